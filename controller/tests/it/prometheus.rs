//! A real Prometheus (Debian's `prometheus` package, `make deps`) for the metrics
//! tests: its own directory, configuration and storage, on a loopback port, and its
//! HTTP API.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{client, free_port, wait_until};

/// The labels a Prometheus operator ServiceMonitor attaches to a controller pod's
/// samples (target labels). With its default `honorLabels: false`, a metric's own
/// `namespace` or `service` label becomes `exported_namespace` or `exported_service`,
/// which is what the dashboards expect.
pub const TARGET_LABELS: &[(&str, &str)] = &[
    ("namespace", "ingress"),
    ("pod", "ferrule-controller-7d9f-x2x4q"),
    ("service", "ferrule-controller-metrics"),
    ("container", "controller"),
    ("endpoint", "metrics"),
];

/// A running Prometheus.
pub struct Prometheus {
    child: Child,
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
}

/// One series of an instant query's answer.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its labels.
    pub labels: serde_json::Map<String, Value>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// A label's value ("" when absent).
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `http://127.0.0.1:{target}/metrics` every second,
    /// with the rule files given (evaluated every second).
    pub async fn start(target: u16, rule_files: &[&Path]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let labels: String = TARGET_LABELS
            .iter()
            .map(|(k, v)| format!("          {k}: {v}\n"))
            .collect();
        let rules: String = rule_files
            .iter()
            .map(|p| format!("  - {}\n", p.display()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{rules}\
             scrape_configs:\n  - job_name: ferrule\n    metrics_path: /metrics\n    static_configs:\n\
             \x20     - targets: [\"127.0.0.1:{target}\"]\n        labels:\n{labels}"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus on PATH (make deps installs Debian's prometheus package)");
        let p = Prometheus { child, port, dir };
        let up = wait_until(Duration::from_secs(30), || async {
            p.get("/-/ready").await.is_some_and(|(s, _)| s == 200)
        })
        .await;
        assert!(up, "prometheus not ready; log:\n{}", p.log());
        p
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn get(&self, path_and_query: &str) -> Option<(u16, Value)> {
        let url = format!("http://127.0.0.1:{}{path_and_query}", self.port);
        let r = client().get(url).send().await.ok()?;
        let status = r.status().as_u16();
        let text = r.text().await.ok()?;
        Some((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let r = client()
            .get(url)
            .query(params)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = r.json().await.map_err(|e| e.to_string())?;
        if body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(format!("{}: {}", body["errorType"], body["error"]))
        }
    }

    /// An instant query now: its series, or Prometheus's error (a parse error says
    /// `bad_data`).
    pub async fn query(&self, expr: &str) -> Result<Vec<Sample>, String> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await?;
        let parse = |v: &Value| {
            v.as_str()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| Sample {
                    labels: s["metric"].as_object().cloned().unwrap_or_default(),
                    value: parse(&s["value"][1]),
                })
                .collect()),
            Some("scalar") => Ok(vec![Sample {
                labels: Default::default(),
                value: parse(&data["result"][1]),
            }]),
            other => Err(format!("unexpected result type {other:?}: {data}")),
        }
    }

    /// The values of `label` on the series `selector` matches (what Grafana's
    /// `label_values(selector, label)` lists).
    pub async fn label_values(&self, label: &str, selector: &str) -> Result<Vec<String>, String> {
        let data = self
            .api(
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", selector)],
            )
            .await?;
        Ok(data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect())
    }

    /// The rule groups as loaded: (rule name, health, last error) of every rule.
    pub async fn rules(&self) -> Vec<(String, String, String)> {
        let data = self.api("/api/v1/rules", &[]).await.unwrap_or_default();
        data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                (s("name"), s("health"), s("lastError"))
            })
            .collect()
    }

    /// The time (Unix seconds) of the last scrape of Ferrule.
    pub async fn last_scrape(&self) -> f64 {
        match self.query("max(timestamp(up{job=\"ferrule\"} == 1))").await {
            Ok(s) => s.first().map_or(0.0, |s| s.value),
            Err(_) => 0.0,
        }
    }

    /// Waits until Prometheus scraped Ferrule at least `scrapes` times after now.
    pub async fn wait_scrapes(&self, scrapes: u32) {
        let since = now();
        let ok = wait_until(Duration::from_secs(30), || async {
            self.last_scrape().await >= since + f64::from(scrapes) - 0.5
        })
        .await;
        assert!(
            ok,
            "prometheus did not scrape Ferrule; log:\n{}",
            self.log()
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Now, in Unix seconds.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Runs `promtool` with `args` and `stdin`: (success, what it printed).
pub fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool on PATH (Debian's prometheus package)");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
