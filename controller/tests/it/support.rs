//! Shared helpers: echo backends, a manifests directory, a running Ferrule.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::extract::Request;
use serde_json::{Value, json};

/// A free TCP port on loopback, for a listener a test starts later (NGINX's). Taken
/// below the kernel's ephemeral range (32768-60999 by default), where no outgoing
/// connection of a concurrent test can take it as its source port before NGINX binds
/// it (a kernel-chosen port 0 could be: CI once failed on that), and from a counter,
/// so that two tests of this binary never get the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20000;
    const END: u16 = 32000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Start at a pid-based offset, so that two test binaries rarely probe the same ports.
    let start = FIRST + (std::process::id() % 400) as u16 * 20;
    let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in FIRST..END {
        let mut p = NEXT.fetch_add(1, Ordering::Relaxed);
        if p >= END {
            p = FIRST + p % (END - FIRST);
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port in {FIRST}..{END}")
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
        Self::serve(listener)
    }

    /// Serves the echo app on an already bound listener (e.g. one bound inside a
    /// network namespace).
    pub fn serve(listener: tokio::net::TcpListener) -> Echo {
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
            // Names sent more than once (a header the proxy should have replaced).
            let repeated: Vec<String> = (req.headers().keys())
                .filter(|k| req.headers().get_all(*k).iter().count() > 1)
                .map(|k| k.as_str().to_owned())
                .collect();
            // `x-echo-delay-ms: N` makes the backend slow (timeouts tests).
            if let Some(ms) = headers
                .get("x-echo-delay-ms")
                .and_then(|v| v.parse::<u64>().ok())
            {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            // `x-echo-status: N` answers with that status (metrics tests).
            let status = headers
                .get("x-echo-status")
                .and_then(|v| v.parse::<u16>().ok())
                .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
                .unwrap_or(axum::http::StatusCode::OK);
            // `x-echo-header: Name=Value` adds that header to the answer (the
            // backend's own headers that NGINX must replace or hide).
            let mut extra = axum::http::HeaderMap::new();
            if let Some((name, value)) =
                headers.get("x-echo-header").and_then(|v| v.split_once('='))
                && let (Ok(n), Ok(v)) = (
                    axum::http::HeaderName::try_from(name),
                    axum::http::HeaderValue::try_from(value),
                )
            {
                extra.insert(n, v);
            }
            let method = req.method().as_str().to_owned();
            let path = req.uri().to_string();
            let version = format!("{:?}", req.version());
            let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                .await
                .map(|b| b.len())
                .unwrap_or_default();
            (
                status,
                extra,
                // Also in headers, for HEAD requests (no body).
                [
                    ("x-echo-backend", addr.to_string()),
                    ("x-echo-method", method.clone()),
                ],
                axum::Json(json!({
                    "backend": addr.to_string(),
                    "method": method,
                    "path": path,
                    "version": version,
                    "headers": headers,
                    "repeated": repeated,
                    "body_bytes": body,
                })),
            )
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
        Self::in_dir(tempfile::tempdir().unwrap())
    }

    /// The same in `dir`.
    pub fn in_dir(dir: tempfile::TempDir) -> Self {
        let m = Manifests { dir };
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
    let ips: Vec<String> = endpoints.iter().map(|e| e.ip().to_string()).collect();
    let ready: Vec<(&str, bool)> = ips.iter().map(|ip| (ip.as_str(), true)).collect();
    service_endpoints(ns, name, port, &ready)
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

/// A Secret `name` in `demo` with `data` in `stringData`.
pub fn secret(name: &str, data: &[(&str, &str)]) -> String {
    let data: String = data
        .iter()
        .map(|(k, v)| format!("  {k}: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{ name: {name}, namespace: demo }}\nstringData:\n{data}"
    )
}

/// The controller ConfigMap `demo/ferrule` with `data`.
pub fn configmap(data: &[(&str, &str)]) -> String {
    let data: String = data
        .iter()
        .map(|(k, v)| format!("  {k}: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: ferrule, namespace: demo }}\ndata:\n{data}"
    )
}

/// An Ingress in `demo` created at the start of 2026, routing `/` of `host` to the
/// Service `echo`, with the ssl-redirect off and `annotations` (without prefix).
pub fn demo_ingress(name: &str, host: &str, annotations: &[(&str, &str)]) -> String {
    let mut a = vec![("ssl-redirect", "false")];
    a.extend_from_slice(annotations);
    ingress(
        "demo",
        name,
        "2026-01-01T00:00:00Z",
        host,
        &[("/", "Prefix", "echo")],
        &a,
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
    /// The `ferrule` arguments (for a restart on the same prefix and ports).
    args: Vec<String>,
    /// Extra environment of the controller.
    env: Vec<(String, String)>,
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
        let source = [
            "--manifests".to_owned(),
            manifests.to_string_lossy().into_owned(),
        ];
        Self::spawn_source(&source, extra)
    }

    /// Starts Ferrule in Kubernetes mode (`args` carry `--kubeconfig` etc.).
    pub fn spawn_kube(args: &[&str]) -> Ferrule {
        Self::spawn_source(&[], args)
    }

    fn spawn_source(source: &[String], extra: &[&str]) -> Ferrule {
        Self::spawn_in(tempfile::tempdir().unwrap(), source, extra, &[])
    }

    /// Starts Ferrule on `manifests` with its prefix below `dir`, and waits until it
    /// is Ready (e.g. a directory that NGINX's worker user cannot enter).
    pub async fn start_in(dir: tempfile::TempDir, manifests: &Path, extra: &[&str]) -> Ferrule {
        let source = [
            "--manifests".to_owned(),
            manifests.to_string_lossy().into_owned(),
        ];
        let f = Self::spawn_in(dir, &source, extra, &[]);
        f.wait_ready(Duration::from_secs(20)).await;
        f
    }

    /// [`Ferrule::start`] with extra environment variables for the controller.
    pub async fn start_env(manifests: &Path, extra: &[&str], env: &[(&str, &str)]) -> Ferrule {
        let source = [
            "--manifests".to_owned(),
            manifests.to_string_lossy().into_owned(),
        ];
        let f = Self::spawn_in(tempfile::tempdir().unwrap(), &source, extra, env);
        f.wait_ready(Duration::from_secs(30)).await;
        f
    }

    fn spawn_in(
        prefix: tempfile::TempDir,
        source: &[String],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Ferrule {
        // FERRULE_IT_BALANCER=njs runs every test that does not choose a balancer
        // against the njs one (e.g. `cargo test --test it conformance::`).
        let balancer: Vec<String> = match std::env::var("FERRULE_IT_BALANCER") {
            Ok(b) if !b.is_empty() && !extra.contains(&"--balancer") => {
                vec!["--balancer".to_owned(), b]
            }
            _ => Vec::new(),
        };
        let (http, https, status) = (free_port(), free_port(), free_port());
        let log = prefix.path().join("ferrule.log");
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(source.iter().cloned());
        args.push("--nginx-prefix".into());
        args.push(prefix.path().join("nginx").to_string_lossy().into_owned());
        args.extend(["--listen-address".into(), "127.0.0.1".into()]);
        if !extra.contains(&"--status-address") {
            args.extend(["--status-address".into(), "127.0.0.1".into()]);
        }
        // The echo backends listen on loopback: allowed unless the test says
        // (`--allow-local-endpoints=false`).
        if !extra
            .iter()
            .any(|a| a.starts_with("--allow-local-endpoints"))
        {
            args.push("--allow-local-endpoints".into());
        }
        // Two workers unless the test asks otherwise.
        if !extra.contains(&"--worker-processes") {
            args.extend(["--worker-processes".into(), "2".into()]);
        }
        for (flag, port) in [
            ("--http-port", http),
            ("--https-port", https),
            ("--status-port", status),
        ] {
            args.push(flag.into());
            args.push(port.to_string());
        }
        args.extend(["--coalesce-ms".into(), "20".into()]);
        // FERRULE_IT_NGINX_MODULES: a modules directory other than the installed one
        // (a C module being developed, with the Lua modules linked beside it).
        if let Ok(dir) = std::env::var("FERRULE_IT_NGINX_MODULES")
            && !dir.is_empty()
            && !extra.contains(&"--nginx-modules")
        {
            args.extend(["--nginx-modules".into(), dir]);
        }
        args.extend(balancer);
        args.extend(extra.iter().map(|a| a.to_string()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let child = Self::exec(&args, &log, &env);
        Ferrule {
            env,
            child,
            http,
            https,
            status,
            prefix,
            log,
            args,
        }
    }

    fn exec(args: &[String], log: &Path, env: &[(String, String)]) -> Child {
        // Appended: a restarted controller's log follows the first one's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_ferrule"))
            .args(args)
            .env("RUST_LOG", "info,ferrule=debug")
            .envs(env.iter().cloned())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("ferrule binary")
    }

    /// SIGKILL to the controller only, as a crash or an OOM kill would do: its NGINX
    /// (in a process group of its own) keeps running.
    pub fn kill_controller(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a new controller with the same arguments, prefix and ports (after
    /// [`Ferrule::kill_controller`] or [`Ferrule::stop`]); does not wait.
    pub fn restart_controller(&mut self) {
        assert!(
            !matches!(self.child.try_wait(), Ok(None)),
            "the controller is still running"
        );
        self.child = Self::exec(&self.args, &self.log, &self.env);
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

    /// One request to `port` on loopback, with a `Host` header when given.
    async fn send(
        port: u16,
        method: &str,
        host: Option<&str>,
        path: &str,
    ) -> reqwest::Result<reqwest::Response> {
        let url = format!("http://127.0.0.1:{port}{path}");
        let mut req = client().request(method.parse().unwrap(), url);
        if let Some(host) = host {
            req = req.header("Host", host);
        }
        req.send().await
    }

    /// GET on the status port: (status, body); (0, "") while nothing listens.
    pub async fn get_status(&self, path: &str) -> (u16, String) {
        match Self::send(self.status, "GET", None, path).await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    /// `/status/resources` as JSON, from the status socket (as `ferrule resources`).
    pub async fn resources(&self) -> Vec<Value> {
        let socket = self
            .prefix
            .path()
            .join("nginx")
            .join(ferrule::status::SOCKET);
        let read = tokio::task::spawn_blocking(move || ferrule::status::read_resources(&socket));
        let body = read.await.unwrap().unwrap_or_default();
        serde_json::from_str(&body).unwrap_or_default()
    }

    /// The state entry of one resource, if listed.
    pub async fn resource(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.resources()
            .await
            .into_iter()
            .find(|r| r["kind"] == kind && r["namespace"] == ns && r["name"] == name)
    }

    /// Waits up to `timeout` until `/status/resources` reports a message on the
    /// resource that contains `needle`.
    pub async fn reports(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        needle: &str,
        timeout: Duration,
    ) -> bool {
        wait_until(timeout, || async {
            self.resource(kind, ns, name)
                .await
                .is_some_and(|r| r["message"].as_str().unwrap_or_default().contains(needle))
        })
        .await
    }

    /// A request through the HTTP proxy port: (status, echo JSON or Null).
    pub async fn get(&self, host: &str, path: &str) -> (u16, Value) {
        self.request("GET", host, path).await
    }

    /// Any method through the HTTP proxy port.
    pub async fn request(&self, method: &str, host: &str, path: &str) -> (u16, Value) {
        match Self::send(self.http, method, Some(host), path).await {
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
        let Some(master) = self.master_pid() else {
            return Vec::new();
        };
        let out = Command::new("ps")
            .args(["-o", "pid=", "--ppid", &master.to_string()])
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
        self.terminate();
        self.child.wait().unwrap()
    }

    /// Sends SIGTERM without waiting for the exit.
    pub fn terminate(&self) {
        let _ = nix_kill(self.child.id(), "TERM");
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
        // A Ferrule killed with SIGKILL leaves its NGINX behind: stop it too.
        if let Some(pid) = self.master_pid()
            && pid > 1
            && alive(pid)
            // Only this test's NGINX, never a process that reused a stale pid.
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*self.prefix.path().to_string_lossy()))
        {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{pid}")])
                .status();
            let _ = nix_kill(pid, "KILL");
        }
    }
}

fn nix_kill(pid: u32, sig: &str) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
}

/// A plain-HTTP GET: (status, Location header).
pub async fn location_of(f: &Ferrule, host: &str, path: &str) -> (u16, String) {
    let r = client()
        .get(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host)
        .send()
        .await
        .unwrap();
    let location = r
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), location.unwrap_or_default())
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

// ---------------------------------------------------------------------------
// Dynamic updates (added for tests/it/dynamic.rs; reusable).

/// Starts one echo backend on each of `ips`, all on the same port (an EndpointSlice
/// has one port for all its endpoints). Retries with another port if one is taken.
pub async fn echo_group(ips: &[&str]) -> Vec<Echo> {
    'port: for _ in 0..20 {
        let port = free_port();
        // Every listener bound before any serves: a port probed and released could
        // be taken by a parallel test before the echo binds it again.
        let mut listeners = Vec::new();
        for ip in ips {
            match tokio::net::TcpListener::bind((*ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'port,
            }
        }
        return listeners.into_iter().map(Echo::serve).collect();
    }
    panic!("no common free port for {ips:?}");
}

/// YAML of a Service `name` (port 80 named `http`, target `port`) with one
/// EndpointSlice holding `endpoints` as (IP, ready) pairs.
/// Arguments that pin the Lua balancer, for a test of what only it does (the C fast
/// path and its request metrics, EWMA, retries to the next peer, `Expect:
/// 100-continue` before a redirect): `FERRULE_IT_BALANCER=njs`, which `make test`
/// runs too, runs every test that does not choose against the njs balancer.
pub const LUA_ONLY: &[&str] = &["--balancer", "lua"];

pub fn service_endpoints(ns: &str, name: &str, port: u16, endpoints: &[(&str, bool)]) -> String {
    let eps: String = endpoints
        .iter()
        .map(|(ip, ready)| {
            format!("  - addresses: [\"{ip}\"]\n    conditions: {{ ready: {ready} }}\n")
        })
        .collect();
    let eps = if eps.is_empty() {
        "  []\n".to_owned()
    } else {
        eps
    };
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

/// The Secret `demo/a-tls`: the `a.example.com` fixture pair.
pub fn a_example_secret() -> String {
    tls_secret(
        "demo",
        "a-tls",
        &tls_fixture("a.crt"),
        &tls_fixture("a.key"),
    )
}

/// YAML of a `kubernetes.io/tls` Secret (PEM text in `stringData`).
pub fn tls_secret(ns: &str, name: &str, cert_pem: &str, key_pem: &str) -> String {
    let indent = |s: &str| {
        s.trim_end()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{ name: {name}, namespace: {ns} }}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(cert_pem),
        indent(key_pem)
    )
}

/// Adds `spec.tls` (`hosts` served with `secret`) to YAML made by [`ingress`].
pub fn with_tls(ingress_yaml: &str, hosts: &[&str], secret: &str) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        "{ingress_yaml}  tls:\n  - hosts: [{}]\n    secretName: {secret}\n",
        hosts.join(", ")
    )
}

/// A self-signed certificate for `hosts` (SANs) made with the openssl CLI:
/// (certificate PEM, key PEM, SHA-256 fingerprint as openssl prints it).
pub fn self_signed(dir: &Path, name: &str, hosts: &[&str]) -> (String, String, String) {
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let san: Vec<String> = hosts.iter().map(|h| format!("DNS:{h}")).collect();
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .args(["-subj", &format!("/CN={}", hosts[0])])
        .args(["-addext", &format!("subjectAltName={}", san.join(","))])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl req: {out:?}");
    let fp = fingerprint_pem(&std::fs::read_to_string(&crt).unwrap());
    (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
        fp,
    )
}

/// `openssl x509 ARGS` on the first certificate of `input`: what it prints.
fn openssl_x509(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .arg("x509")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().stdout
}

fn openssl_fingerprint(input: &[u8]) -> String {
    let out = openssl_x509(&["-noout", "-fingerprint", "-sha256"], input);
    String::from_utf8_lossy(&out).trim().to_owned()
}

/// The SHA-256 fingerprint of a PEM certificate ("" if it does not parse).
pub fn fingerprint_pem(pem: &str) -> String {
    openssl_fingerprint(pem.as_bytes())
}

impl Ferrule {
    /// The balancer API's unix socket.
    pub fn api_socket(&self) -> PathBuf {
        self.prefix.path().join("nginx/run/balancer.sock")
    }

    /// The controller's token for the balancer API (Lua: plain text; njs: JSON).
    pub fn api_token(&self) -> String {
        let conf = self.prefix.path().join("nginx/conf");
        if let Ok(json) = std::fs::read_to_string(conf.join("balancer.token.json")) {
            let v: Value = serde_json::from_str(&json).unwrap_or_default();
            return v["token"].as_str().unwrap_or_default().to_owned();
        }
        std::fs::read_to_string(conf.join("balancer.token"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// A request to the balancer API with `token` (None: no Authorization header).
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String) {
        let r = ferrule::nginx::api::request(
            &self.api_socket(),
            method,
            path,
            token,
            body.map(str::as_bytes),
        )
        .await
        .expect("balancer API socket");
        (r.status, r.body)
    }

    /// The balancer API's answer for one backend (`Null` if unknown):
    /// `{"generation", "fast_path", "backend"}`.
    async fn balancer_entry(&self, name: &str) -> Value {
        let token = self.api_token();
        let (s, body) = self
            .api(
                "GET",
                &format!("/configuration/backends/{name}"),
                Some(&token),
                None,
            )
            .await;
        if s != 200 {
            return Value::Null;
        }
        serde_json::from_str::<Value>(&body).unwrap_or_default()
    }

    /// The peers the C fast path holds for a backend (`Null`: Lua balances it).
    pub async fn fast_path(&self, name: &str) -> Value {
        let entry = self.balancer_entry(name).await;
        assert!(entry.is_object(), "no backend {name} in the balancer");
        entry["fast_path"].clone()
    }

    /// A backend as the balancer store holds it (`Null` if unknown).
    pub async fn balancer_backend(&self, name: &str) -> Value {
        self.balancer_entry(name).await["backend"].clone()
    }

    /// Successful plus failed NGINX reloads so far.
    pub async fn reloads(&self) -> f64 {
        self.metric("ferrule_reloads_total", "").await
    }

    /// Whether a TLS 1.2 handshake offering only the OpenSSL `ciphers` succeeds.
    pub fn tls12_handshake(&self, sni: &str, ciphers: &str) -> bool {
        Command::new("openssl")
            .args(["s_client", "-tls1_2", "-cipher", ciphers, "-connect"])
            .arg(format!("127.0.0.1:{}", self.https))
            .args(["-servername", sni])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl s_client")
            .success()
    }

    /// What `openssl s_client` with `extra` arguments prints (stdout) for a
    /// handshake with the HTTPS port for `sni`: the served certificate's PEM, and
    /// the session details.
    pub fn s_client(&self, sni: &str, extra: &[&str]) -> Vec<u8> {
        Command::new("openssl")
            .args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{}", self.https))
            .args(["-servername", sni])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .expect("openssl s_client")
            .stdout
    }

    /// The subject and SANs of the certificate served on the HTTPS port for `sni`,
    /// as `openssl x509 -subject -ext subjectAltName` prints them.
    pub fn served_subject(&self, sni: &str) -> String {
        let out = openssl_x509(
            &["-noout", "-subject", "-ext", "subjectAltName"],
            &self.s_client(sni, &[]),
        );
        String::from_utf8_lossy(&out).trim().to_owned()
    }

    /// SHA-256 fingerprint of the certificate served on the HTTPS port for `sni`.
    pub fn served_fingerprint(&self, sni: &str) -> String {
        openssl_fingerprint(&self.s_client(sni, &[]))
    }
}

/// A flexible Ingress manifest (written as JSON, which is YAML).
#[derive(Clone)]
pub struct Ing {
    value: Value,
}

impl Ing {
    /// An Ingress `ns/name` created at `created` (RFC 3339), without rules.
    pub fn new(ns: &str, name: &str, created: &str) -> Self {
        Ing {
            value: json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": { "name": name, "namespace": ns, "creationTimestamp": created },
                "spec": {},
            }),
        }
    }

    /// `spec.ingressClassName`.
    pub fn class(mut self, class: &str) -> Self {
        self.value["spec"]["ingressClassName"] = json!(class);
        self
    }

    /// An annotation with its full key.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        let meta = &mut self.value["metadata"];
        if meta.get("annotations").is_none() {
            meta["annotations"] = json!({});
        }
        meta["annotations"][key] = json!(value);
        self
    }

    /// An `nginx.ingress.kubernetes.io/` annotation.
    pub fn nginx(self, key: &str, value: &str) -> Self {
        self.annotation(&format!("nginx.ingress.kubernetes.io/{key}"), value)
    }

    /// A rule for `host` ("" for none) with path rules (port 80 of each Service).
    pub fn rule(mut self, host: &str, paths: &[PathRule]) -> Self {
        let paths: Vec<Value> = paths
            .iter()
            .map(|(p, t, svc)| {
                json!({
                    "path": p,
                    "pathType": t,
                    "backend": { "service": { "name": svc, "port": { "number": 80 } } },
                })
            })
            .collect();
        let mut rule = json!({ "http": { "paths": paths } });
        if !host.is_empty() {
            rule["host"] = json!(host);
        }
        let spec = &mut self.value["spec"];
        if spec.get("rules").is_none() {
            spec["rules"] = json!([]);
        }
        spec["rules"].as_array_mut().unwrap().push(rule);
        self
    }

    /// A `spec.tls` entry.
    pub fn tls(mut self, hosts: &[&str], secret: &str) -> Self {
        let spec = &mut self.value["spec"];
        if spec.get("tls").is_none() {
            spec["tls"] = json!([]);
        }
        spec["tls"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "hosts": hosts, "secretName": secret }));
        self
    }

    /// `spec.defaultBackend` (port 80 of `svc`).
    pub fn default_backend(mut self, svc: &str) -> Self {
        self.value["spec"]["defaultBackend"] =
            json!({ "service": { "name": svc, "port": { "number": 80 } } });
        self
    }

    /// The manifest.
    pub fn yaml(&self) -> String {
        serde_json::to_string_pretty(&self.value).unwrap()
    }
}

/// A file of the model crate's checked-in TLS fixtures (`model/tests/fixtures`).
pub fn tls_fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../model/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Ferrule {
    /// The NGINX master's pid, from its pid file.
    pub fn master_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.prefix.path().join("nginx/run/nginx.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Waits (up to 10 s) until no worker of an earlier configuration is left: NGINX
    /// renames a worker it told to exit "worker process is shutting down", and such a
    /// worker still answers what it accepted with the old configuration. Call it once
    /// the new configuration has answered (or status says it applied).
    ///
    /// The title alone is not enough: the master starts the new workers first and
    /// only then tells the old ones to exit, and in between an old worker, not yet
    /// renamed, still accepts new connections with the old configuration (seen on a
    /// loaded machine: a request after the new configuration had answered got the
    /// old one). So there must also be no more workers than `--worker-processes`.
    pub async fn old_workers_gone(&self) {
        let expected: Option<usize> = (self.args.windows(2))
            .find(|w| w[0] == "--worker-processes")
            .and_then(|w| w[1].parse().ok());
        let draining = || {
            let titles: Vec<String> = (self.worker_pids().iter())
                .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
                .map(|c| String::from_utf8_lossy(&c).into_owned())
                .filter(|t| t.contains("worker process"))
                .collect();
            titles.iter().any(|t| t.contains("shutting down"))
                || expected.is_some_and(|n| titles.len() > n)
        };
        let gone = wait_until(Duration::from_secs(10), || async { !draining() }).await;
        assert!(
            gone,
            "old NGINX workers still running; log:\n{}",
            self.logs()
        );
    }

    /// The CPU time the NGINX workers have spent so far, in nanoseconds (the
    /// scheduler's count, `/proc/PID/schedstat`: finer than the clock ticks of `stat`).
    pub fn workers_cpu_ns(&self) -> u64 {
        self.worker_pids()
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// The TCP ports NGINX (master or workers) listens on, as `ss` reports them.
    pub fn nginx_tcp_ports(&self) -> std::collections::BTreeSet<u16> {
        let out = Command::new("ss").args(["-Hltnp"]).output().unwrap();
        let mut ours: Vec<String> = self
            .worker_pids()
            .iter()
            .map(|p| format!("pid={p},"))
            .collect();
        ours.extend(self.master_pid().map(|m| format!("pid={m},")));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| ours.iter().any(|p| l.contains(p.as_str())))
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(3)?
                    .rsplit(':')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }
}

/// SIGKILL to `pid` (an NGINX master: no cleanup, its workers orphaned).
pub fn kill_9(pid: u32) {
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {pid}");
}

/// Waits until a master other than `old` runs, Ready, and `host` is served by
/// `backend`.
pub async fn serves_from_a_new_master(
    f: &Ferrule,
    old: u32,
    host: &str,
    backend: &str,
    timeout: Duration,
) -> bool {
    wait_until(timeout, || async {
        f.master_pid().is_some_and(|p| p != old && alive(p))
            && f.get_status("/readyz").await.0 == 200
            && f.backend(host, "/").await == (200, backend.to_owned())
    })
    .await
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------
// No-reload checks, the balancer store, raw requests (dynamic.rs, njs.rs).

/// Worker pids and reload count at one moment: "no reload since" is both unchanged.
pub struct NoReload {
    /// NGINX worker pids.
    pub pids: Vec<u32>,
    /// `ferrule_reloads_total`.
    pub reloads: f64,
}

impl NoReload {
    pub async fn capture(f: &Ferrule) -> NoReload {
        let pids = f.worker_pids();
        assert_eq!(pids.len(), 2, "two NGINX workers expected: {pids:?}");
        NoReload {
            pids,
            reloads: f.reloads().await,
        }
    }

    pub async fn check(&self, f: &Ferrule, what: &str) {
        assert_eq!(
            f.worker_pids(),
            self.pids,
            "{what}: NGINX workers changed (a reload happened); log:\n{}",
            f.logs()
        );
        assert_eq!(
            f.reloads().await,
            self.reloads,
            "{what}: ferrule_reloads_total changed; log:\n{}",
            f.logs()
        );
    }
}

/// Waits until the balancer store's backend `name` satisfies `pred`.
pub async fn wait_store(f: &Ferrule, name: &str, pred: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let b = f.balancer_backend(name).await;
        if pred(&b) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "balancer backend {name} never reached the expected state; last: {b}; log:\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn endpoint_count(b: &Value) -> usize {
    b["endpoints"].as_array().map_or(0, Vec::len)
}

/// A raw HTTP/1.1 request on a proxy port: (status, body).
pub async fn raw_http(port: u16, request: &str) -> (u16, String) {
    raw_http_from("127.0.0.1", port, request).await
}

/// [`raw_http`] from source address `from` (any 127.0.0.0/8 address is local).
pub async fn raw_http_from(from: &str, port: u16, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut s = socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The curl command for `host` (SNI and Host) over TLS through Ferrule's HTTPS port,
/// `args` before the URL.
pub fn curl_tls_command(
    f: &Ferrule,
    host: &str,
    path: &str,
    args: &[&str],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("curl");
    c.args(["-sk"])
        .args(args)
        .arg("--resolve")
        .arg(format!("{host}:{}:127.0.0.1", f.https))
        .arg(format!("https://{host}:{}{path}", f.https));
    c
}

/// [`curl_tls_command`] run: what it printed.
pub async fn curl_tls(f: &Ferrule, host: &str, path: &str, args: &[&str]) -> String {
    let out = curl_tls_command(f, host, path, args)
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An HTTPS GET for `host`: the echo JSON (null when the answer is not JSON).
pub async fn https_get(f: &Ferrule, host: &str, path: &str) -> Value {
    serde_json::from_str(&curl_tls(f, host, path, &[]).await).unwrap_or_default()
}

/// A request over HTTPS with curl: (status, body).
pub fn curl_https(port: u16, sni: &str, host: &str, path: &str, token: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}", "--resolve"])
        .arg(format!("{sni}:{port}:127.0.0.1"))
        .args(["-H", &format!("Host: {host}")])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("https://{sni}:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Requests the balancer API's `path` through the proxy ports with `host` (GET and a
/// POST of `evil` over HTTP, a GET over HTTPS), with the valid `token`: every answer
/// must be NGINX's own 404/400, never the API. Returns how many requests were made.
pub async fn probe_api_on_proxy_ports(
    f: &Ferrule,
    host: &str,
    path: &str,
    token: &str,
    evil: &str,
) -> usize {
    for method in ["GET", "POST"] {
        let body = if method == "POST" { evil } else { "" };
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (s, b) = raw_http(f.http, &req).await;
        // An empty or odd Host may be refused by NGINX itself (400).
        assert!(
            s == 404 || s == 400,
            "{method} Host {host:?} {path}: {s} {b}"
        );
        assert!(!b.contains("generation"), "API answered: {b}");
    }
    let (s, b) = curl_https(f.https, "localhost", host, path, token);
    assert!(s == 404 || s == 400, "https Host {host:?} {path}: {s} {b}");
    assert!(!b.contains("generation"), "API answered over https: {b}");
    3
}

/// An HTTPS client that trusts only the test CA and sends `host` to the HTTPS port.
pub fn tls_client(f: &Ferrule, hosts: &[&str]) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(tls_fixture("ca.crt").as_bytes()).unwrap();
    let mut b = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10));
    for h in hosts {
        b = b.resolve(h, SocketAddr::from(([127, 0, 0, 1], f.https)));
    }
    b.build().unwrap()
}

/// A CA and a certificate for 127.0.0.1 it signed, issued as Ferrule issues the
/// webhook's own, written as `tls.crt` and `tls.key` in `dir`; returns the CA's
/// PEM (a webhook's caBundle, a client's root).
pub fn webhook_certificate(dir: &Path) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let day = Duration::from_secs(86_400);
    let issued =
        ferrule::kube::webhook_certificate::issue(&["127.0.0.1".to_owned()], day, now, None)
            .unwrap();
    std::fs::write(dir.join("tls.crt"), issued.cert).unwrap();
    std::fs::write(dir.join("tls.key"), issued.key).unwrap();
    issued.ca_bundle
}
