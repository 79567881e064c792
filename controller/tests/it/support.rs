//! Shared helpers: echo backends, a manifests directory, a running Ferrule.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::extract::Request;
use serde_json::{Value, json};

/// A free TCP port on loopback (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An echo backend: answers every request with JSON naming itself, the method, the
/// path, the HTTP version and the headers it received.
pub struct Echo {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Echo {
    /// Starts an echo backend on `ip` (e.g. `127.0.0.2`) and a free port.
    pub async fn start(ip: &str) -> Echo {
        Self::start_on(ip, 0).await
    }

    /// Starts an echo backend on `ip:port`.
    pub async fn start_on(ip: &str, port: u16) -> Echo {
        let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(move |req: Request| async move {
            let headers: BTreeMap<String, String> = req
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        v.to_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            axum::Json(json!({
                "backend": addr.to_string(),
                "method": req.method().as_str(),
                "path": req.uri().to_string(),
                "version": format!("{:?}", req.version()),
                "headers": headers,
            }))
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Echo { addr, task }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A manifests directory that tests edit while Ferrule watches it.
pub struct Manifests {
    pub dir: tempfile::TempDir,
}

impl Manifests {
    pub fn new() -> Self {
        let m = Manifests {
            dir: tempfile::tempdir().unwrap(),
        };
        m.write("class.yaml", &ingress_class("ferrule", true));
        m
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file atomically (temp + rename), as editors and GitOps tools do.
    pub fn write(&self, name: &str, yaml: &str) {
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(name)).unwrap();
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.dir.path().join(name)).unwrap();
    }
}

/// YAML of an IngressClass for Ferrule's controller value.
pub fn ingress_class(name: &str, default: bool) -> String {
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: {name}
  annotations:
    ingressclass.kubernetes.io/is-default-class: "{default}"
spec:
  controller: ferrule.dev/ingress-controller
"#
    )
}

/// YAML of a Service `name` (port 80 named `http`) with one EndpointSlice holding
/// `endpoints` (all ready; the slice port is their port).
pub fn service(ns: &str, name: &str, endpoints: &[SocketAddr]) -> String {
    let port = endpoints.first().map_or(80, |e| e.port());
    let eps: String = endpoints
        .iter()
        .map(|e| {
            format!(
                "  - addresses: [\"{}\"]\n    conditions: {{ ready: true }}\n",
                e.ip()
            )
        })
        .collect();
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{ name: {name}, namespace: {ns} }}
spec:
  ports: [{{ name: http, port: 80, targetPort: {port} }}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{ kubernetes.io/service-name: {name} }}
addressType: IPv4
ports: [{{ name: http, port: {port} }}]
endpoints:
{eps}"#
    )
}

/// One path rule: (path, pathType, service name).
pub type PathRule<'a> = (&'a str, &'a str, &'a str);

/// YAML of an Ingress with one host (empty: no host) and path rules, created at
/// `created` (RFC 3339), with `annotations` (keys without the nginx prefix).
pub fn ingress(
    ns: &str,
    name: &str,
    created: &str,
    host: &str,
    paths: &[PathRule],
    annotations: &[(&str, &str)],
) -> String {
    let ann: String = annotations
        .iter()
        .map(|(k, v)| {
            format!(
                "    nginx.ingress.kubernetes.io/{k}: {}\n",
                serde_json::to_string(v).unwrap()
            )
        })
        .collect();
    let ann = if ann.is_empty() {
        String::new()
    } else {
        format!("  annotations:\n{ann}")
    };
    let host_line = if host.is_empty() {
        String::new()
    } else {
        format!("    host: {host}\n")
    };
    let paths: String = paths
        .iter()
        .map(|(p, t, svc)| {
            format!(
                "          - path: {p}\n            pathType: {t}\n            backend: {{ service: {{ name: {svc}, port: {{ number: 80 }} }} }}\n"
            )
        })
        .collect();
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: {ns}
  creationTimestamp: "{created}"
{ann}spec:
  rules:
  - http:
      paths:
{paths}{host_line}"#
    )
}

/// A running `ferrule run` with its own NGINX prefix and ports.
pub struct Ferrule {
    pub child: Child,
    pub http: u16,
    pub https: u16,
    pub status: u16,
    pub prefix: tempfile::TempDir,
    pub log: PathBuf,
}

impl Ferrule {
    /// Starts Ferrule on `manifests` with extra flags, and waits until it is Ready.
    pub async fn start(manifests: &Path, extra: &[&str]) -> Ferrule {
        let f = Self::spawn(manifests, extra);
        f.wait_ready(Duration::from_secs(20)).await;
        f
    }

    /// Starts Ferrule without waiting.
    pub fn spawn(manifests: &Path, extra: &[&str]) -> Ferrule {
        let prefix = tempfile::tempdir().unwrap();
        let (http, https, status) = (free_port(), free_port(), free_port());
        let log = prefix.path().join("ferrule.log");
        let child = Command::new(env!("CARGO_BIN_EXE_ferrule"))
            .arg("run")
            .arg("--manifests")
            .arg(manifests)
            .arg("--nginx-prefix")
            .arg(prefix.path().join("nginx"))
            .args([
                "--listen-address",
                "127.0.0.1",
                "--worker-processes",
                "2",
                "--status-address",
                "127.0.0.1",
            ])
            .args([
                "--http-port",
                &http.to_string(),
                "--https-port",
                &https.to_string(),
            ])
            .args(["--status-port", &status.to_string(), "--coalesce-ms", "20"])
            .args(extra)
            .env("RUST_LOG", "info,ferrule=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("ferrule binary");
        Ferrule {
            child,
            http,
            https,
            status,
            prefix,
            log,
        }
    }

    /// The controller's log so far (for assertion messages).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `/readyz` to answer 200.
    pub async fn wait_ready(&self, timeout: Duration) {
        let ok = wait_until(timeout, || async {
            self.get_status("/readyz").await.0 == 200
        })
        .await;
        assert!(
            ok,
            "ferrule not ready within {timeout:?}; log:\n{}",
            self.logs()
        );
    }

    /// GET on the status port: (status, body).
    pub async fn get_status(&self, path: &str) -> (u16, String) {
        match client()
            .get(format!("http://127.0.0.1:{}{path}", self.status))
            .send()
            .await
        {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    /// `/status/resources` as JSON.
    pub async fn resources(&self) -> Vec<Value> {
        let (_, body) = self.get_status("/status/resources").await;
        serde_json::from_str(&body).unwrap_or_default()
    }

    /// The state entry of one resource, if listed.
    pub async fn resource(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.resources()
            .await
            .into_iter()
            .find(|r| r["kind"] == kind && r["namespace"] == ns && r["name"] == name)
    }

    /// A request through the HTTP proxy port: (status, echo JSON or Null).
    pub async fn get(&self, host: &str, path: &str) -> (u16, Value) {
        self.request("GET", host, path).await
    }

    /// Any method through the HTTP proxy port.
    pub async fn request(&self, method: &str, host: &str, path: &str) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}{path}", self.http);
        let req = client()
            .request(method.parse().unwrap(), url)
            .header("Host", host);
        match req.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.json().await.unwrap_or(Value::Null))
            }
            Err(e) => panic!("request {method} {host}{path} failed: {e}"),
        }
    }

    /// Which backend answered `host` + `path` ("" when NGINX answered itself).
    pub async fn backend(&self, host: &str, path: &str) -> (u16, String) {
        let (s, v) = self.get(host, path).await;
        (s, v["backend"].as_str().unwrap_or_default().to_owned())
    }

    /// PIDs of the NGINX worker processes (unchanged pids prove "no reload").
    pub fn worker_pids(&self) -> Vec<u32> {
        let master = std::fs::read_to_string(self.prefix.path().join("nginx/run/nginx.pid"))
            .unwrap_or_default();
        let master = master.trim();
        let out = Command::new("ps")
            .args(["-o", "pid=", "--ppid", master])
            .output()
            .unwrap();
        let mut pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        pids.sort();
        pids
    }

    /// A metric's value summed over label sets whose text contains `labels`.
    pub async fn metric(&self, name: &str, labels: &str) -> f64 {
        let (_, text) = self.get_status("/metrics").await;
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split([' ', '{']).next() == Some(name) && l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Sends SIGTERM and waits for exit; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = nix_kill(self.child.id(), "TERM");
        self.child.wait().unwrap()
    }
}

impl Drop for Ferrule {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = nix_kill(self.child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn nix_kill(pid: u32, sig: &str) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
}

/// A plain HTTP client without connection reuse surprises.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
