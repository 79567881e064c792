//! The dashboards and alerts against a real Prometheus (issue 20): Ferrule serves
//! traffic of a known shape, Prometheus scrapes it every second, and every PromQL
//! expression of the three dashboards (panels, variables, annotations) and of every
//! alert is evaluated through Prometheus's API: each parses, and each whose metrics
//! are on `/metrics` returns data with the labels its legend names. Beside it,
//! `promtool check metrics` on `/metrics` and `promtool check rules` on the alerts.
//!
//! Grafana's variables are substituted as Grafana would: `$__rate_interval` by a
//! window that covers the traffic, `$__range` by the test's span, and each query
//! variable by the first value its own `label_values(...)` returns (else `.*`, All).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::prometheus::{Prometheus, Sample, TARGET_LABELS, promtool};
use crate::support::*;

const DASHBOARDS: &[&str] = &[
    "nginx.json",
    "request-handling-performance.json",
    "controller.json",
];

/// Panels (dashboard file, title) that must have data in this scenario whatever
/// `/metrics` holds: every panel on the controller's and NGINX's metrics. Panels on
/// the per-request metrics (`nginx_ingress_controller_requests`, `_duration_seconds`,
/// `_size`) are checked by the rule below (data wherever their metrics are on
/// `/metrics`); once those metrics are merged, add their panels here, so that a
/// metric that goes missing fails the test instead of making the check a parse check.
const MUST_HAVE_DATA: &[(&str, &str)] = &[
    ("nginx.json", "Controller Connections"),
    ("nginx.json", "Config Reloads"),
    ("nginx.json", "Last Config Failed"),
    ("nginx.json", "Average Memory Usage"),
    ("nginx.json", "Average CPU Usage"),
    ("nginx.json", "NGINX Connections by State"),
    ("nginx.json", "NGINX Requests and Connections"),
    ("nginx.json", "NGINX Processes"),
    ("nginx.json", "Ingress Certificate Expiry"),
    ("controller.json", "Resources applied"),
    ("controller.json", "Resources rejected"),
    ("controller.json", "Reloads"),
    ("controller.json", "Dynamic updates"),
    ("controller.json", "Reloads avoided"),
    ("controller.json", "Since last reload"),
    ("controller.json", "Reloads vs dynamic updates"),
    ("controller.json", "Endpoint change latency"),
    ("controller.json", "Model builds"),
    ("controller.json", "Reload and build duration"),
    ("controller.json", "nginx -t runs and refusals"),
    ("controller.json", "Excluded resources and why"),
    ("controller.json", "Orphan Ingresses"),
    ("controller.json", "Resources by state"),
    ("controller.json", "Rejections by reason"),
    ("controller.json", "Certificate expiry"),
    ("controller.json", "Certificates"),
    ("controller.json", "Admission decision time"),
    ("controller.json", "Build"),
    ("alerts", "FerruleReloadFailing"),
    ("alerts", "FerruleConfigExcluded"),
    ("alerts", "FerruleCertificateExpiringSoon"),
];

/// Expressions that may be empty although every metric they read is on `/metrics`:
/// (file, panel or alert, why).
const EMPTY_BY_DESIGN: &[(&str, &str, &str)] = &[
    (
        "alerts",
        "FerruleNginxRestarting",
        "fires only when NGINX died; it did not",
    ),
    (
        "nginx.json",
        "annotation: Config reloads",
        "marks reloads; empty where none happened in the last interval",
    ),
    (
        "controller.json",
        "annotation: Config reloads",
        "marks reloads; empty where none happened in the last interval",
    ),
];

/// Legend labels a series may lack: `canary` is empty (so no label in Prometheus) on
/// requests that no canary answered.
const OPTIONAL_LEGEND_LABELS: &[&str] = &["canary"];

/// Grafana's built-in variables, as substituted here.
const RATE_INTERVAL: &str = "30s";
const RANGE: &str = "5m";

/// One PromQL expression to evaluate.
#[derive(Debug, Clone)]
struct Expr {
    file: String,
    panel: String,
    ref_id: String,
    expr: String,
    legend: String,
}

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/ferrule")
}

fn alerts_file() -> PathBuf {
    chart_dir().join("alerts/ferrule.rules.yaml")
}

/// Every panel's targets, with nested rows, and the annotations' expressions.
fn expressions(file: &str, d: &Value) -> Vec<Expr> {
    fn walk(file: &str, panels: &Value, out: &mut Vec<Expr>) {
        for p in panels.as_array().into_iter().flatten() {
            walk(file, &p["panels"], out);
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(Expr {
                        file: file.to_owned(),
                        panel: p["title"].as_str().unwrap_or_default().to_owned(),
                        ref_id: t["refId"].as_str().unwrap_or_default().to_owned(),
                        expr: expr.to_owned(),
                        legend: t["legendFormat"].as_str().unwrap_or_default().to_owned(),
                    });
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(file, &d["panels"], &mut out);
    for a in d["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = a["expr"].as_str() {
            out.push(Expr {
                file: file.to_owned(),
                panel: format!("annotation: {}", a["name"].as_str().unwrap_or_default()),
                ref_id: String::new(),
                expr: expr.to_owned(),
                legend: a["textFormat"].as_str().unwrap_or_default().to_owned(),
            });
        }
    }
    out
}

/// The alerts of the rule file: (name, expr, labels its annotations name).
fn alerts() -> Vec<Expr> {
    let text = std::fs::read_to_string(alerts_file()).unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    let mut out = Vec::new();
    for g in doc["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            let name = r["alert"]
                .as_str()
                .or(r["record"].as_str())
                .unwrap_or_default();
            // The labels the annotations print, as a legend would.
            let annotations: String = r["annotations"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(" ")
                .replace("$labels.", "");
            out.push(Expr {
                file: "alerts".into(),
                panel: name.to_owned(),
                ref_id: String::new(),
                expr: r["expr"].as_str().unwrap_or_default().to_owned(),
                legend: annotations,
            });
        }
    }
    out
}

/// The labels `{{name}}` of a legend (`$value` and functions left out).
fn legend_labels(legend: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = legend;
    while let Some(i) = rest.find("{{") {
        rest = &rest[i + 2..];
        let Some(j) = rest.find("}}") else { break };
        let name = rest[..j].trim();
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(name.to_owned());
        }
        rest = &rest[j + 2..];
    }
    out
}

/// The `nginx_ingress_controller_*` and `ferrule_*` metric names an expression
/// reads (quoted strings skipped).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            if word.starts_with("nginx_ingress_controller_") || word.starts_with("ferrule_") {
                out.insert(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Sample names on `/metrics`.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// `expr` with Grafana's variables replaced (longest names first: `$controller`
/// must not eat `$controller_class`).
fn substitute(expr: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = expr
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("$__range", RANGE)
        .replace("$__interval", "5s");
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        out = out
            .replace(&format!("${{{n}}}"), &vars[n])
            .replace(&format!("${n}"), &vars[n]);
    }
    out
}

/// A label value as a regex matcher's text inside a PromQL string, as Grafana
/// escapes it.
fn regex_value(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push_str("\\\\");
        }
        out.push(c);
    }
    out
}

/// `label_values(selector, label)` or `label_values(label)`.
fn label_values_query(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    match inner.rsplit_once(',') {
        Some((sel, label)) => Some((sel.trim().to_owned(), label.trim().to_owned())),
        None => Some(("{__name__=~\".+\"}".to_owned(), inner.trim().to_owned())),
    }
}

/// A self-signed certificate for `host` valid for `days` (openssl CLI).
fn certificate(dir: &Path, host: &str, days: u32) -> (String, String) {
    let (crt, key) = (
        dir.join(format!("{host}.crt")),
        dir.join(format!("{host}.key")),
    );
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days"])
        .arg(days.to_string())
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .args(["-subj", &format!("/CN={host}/O=Ferrule tests")])
        .args(["-addext", &format!("subjectAltName=DNS:{host}")])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl req: {out:?}");
    (
        std::fs::read_to_string(crt).unwrap(),
        std::fs::read_to_string(key).unwrap(),
    )
}

/// One request through the proxy port; the echo answers `status` when given.
async fn send(f: &Ferrule, host: &str, path: &str, status: Option<u16>) -> u16 {
    let mut req = client()
        .get(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host);
    if let Some(s) = status {
        req = req.header("x-echo-status", s.to_string());
    }
    req.send().await.unwrap().status().as_u16()
}

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-02T00:00:00Z";

/// The traffic of the scenario: (host, path, status asked of the echo, status
/// expected, Ingress, how many).
type Traffic = (
    &'static str,
    &'static str,
    Option<u16>,
    u16,
    &'static str,
    usize,
);
const TRAFFIC: &[Traffic] = &[
    ("a.test", "/", None, 200, "a", 30),
    ("a.test", "/gone", Some(404), 404, "a", 4),
    ("b.test", "/notfound", Some(404), 404, "b", 10),
    ("b.test", "/down", None, 503, "b", 5),
    ("b.test", "/missing", None, 503, "b", 5),
];

#[tokio::test]
async fn dashboards_and_alerts_read_real_data_from_prometheus() {
    let echoes = echo_group(&["127.0.0.2", "127.0.0.3"]).await;
    let port = echoes[0].addr.port();
    let certs = tempfile::tempdir().unwrap();
    let (crt, key) = certificate(certs.path(), "a.test", 7);
    let m = Manifests::new();
    m.write(
        "web.yaml",
        &service_endpoints("shop", "web", port, &[("127.0.0.2", true)]),
    );
    m.write("empty.yaml", &service_endpoints("shop", "empty", port, &[]));
    m.write("secret.yaml", &tls_secret("shop", "a-tls", &crt, &key));
    let a = ingress(
        "shop",
        "a",
        T0,
        "a.test",
        &[("/", "Prefix", "web")],
        &[("ssl-redirect", "false")],
    );
    m.write("a.yaml", &with_tls(&a, &["a.test"], "a-tls"));
    m.write(
        "b.yaml",
        &ingress(
            "shop",
            "b",
            T0,
            "b.test",
            &[
                ("/notfound", "Prefix", "web"),
                ("/down", "Prefix", "empty"),
                ("/missing", "Prefix", "gone"),
            ],
            &[],
        ),
    );
    let f = Ferrule::start(
        m.path(),
        &[LUA_ONLY, &["--allow-snippet-annotations"]].concat(),
    )
    .await;
    let prom = Prometheus::start(f.status, &[&alerts_file()]).await;
    let started = crate::prometheus::now();
    prom.wait_scrapes(2).await;

    // A first request of each kind, so that every request series exists before the
    // traffic that rate() is to see; then the traffic, spread over a few scrapes.
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    for &(host, path, ask, want, ing, _) in TRAFFIC {
        assert_eq!(send(&f, host, path, ask).await, want, "{host}{path}");
        *expected.entry((ing.into(), want.to_string())).or_default() += 1;
    }
    prom.wait_scrapes(2).await;
    let total: usize = TRAFFIC.iter().map(|t| t.5).sum();
    for i in 0..total {
        // round robin over the kinds, each until its count is reached
        let mut k = i;
        let t = TRAFFIC
            .iter()
            .find(|t| {
                if k < t.5 {
                    true
                } else {
                    k -= t.5;
                    false
                }
            })
            .unwrap();
        let (host, path, ask, want, ing, _) = *t;
        assert_eq!(send(&f, host, path, ask).await, want, "{host}{path}");
        *expected.entry((ing.into(), want.to_string())).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }

    // `make dashboards`: a minute more of varied traffic, so that the pictures have
    // something to show.
    let pictures = std::env::var_os("FERRULE_DASHBOARDS_PNG").map(PathBuf::from);
    if pictures.is_some() {
        more_traffic(&f, &m, &mut expected).await;
    }

    // An endpoint change (no reload), a reload, and last an Ingress NGINX refuses:
    // config safety leaves it out, so the last reload counts as failed.
    m.write(
        "web.yaml",
        &service_endpoints(
            "shop",
            "web",
            port,
            &[("127.0.0.2", true), ("127.0.0.3", true)],
        ),
    );
    let moved = wait_until(Duration::from_secs(10), || async {
        f.metric("ferrule_dynamic_update_latency_seconds_count", "")
            .await
            >= 1.0
    })
    .await;
    assert!(moved, "endpoint change; log:\n{}", f.logs());
    m.write(
        "c.yaml",
        &ingress("shop", "c", T1, "c.test", &[("/", "Prefix", "web")], &[]),
    );
    let reloaded = wait_until(Duration::from_secs(10), || async {
        send(&f, "c.test", "/", None).await == 200
    })
    .await;
    assert!(reloaded, "Ingress c served; log:\n{}", f.logs());
    m.write(
        "broken.yaml",
        &ingress(
            "shop",
            "broken",
            T1,
            "broken.test",
            &[("/", "Prefix", "web")],
            &[("configuration-snippet", "return bogus_directive;")],
        ),
    );
    let excluded = wait_until(Duration::from_secs(15), || async {
        f.resource("Ingress", "shop", "broken")
            .await
            .is_some_and(|r| r["state"] == "rejected")
    })
    .await;
    assert!(excluded, "Ingress broken excluded; log:\n{}", f.logs());
    // stub_status answers on the API socket only, never through a proxy port.
    for host in ["a.test", "unknown.test", "localhost"] {
        let r = client()
            .get(format!("http://127.0.0.1:{}/nginx_status", f.http))
            .header("Host", host)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        assert!(
            !body.contains("Active connections"),
            "{host}: {code} {body}"
        );
        if host == "a.test" {
            *expected.entry(("a".into(), code.to_string())).or_default() += 1;
        }
    }

    prom.wait_scrapes(4).await;

    let (status, text) = f.get_status("/metrics").await;
    assert_eq!(status, 200);
    let present = sample_names(&text);

    // promtool: the exposition and the rule file are clean.
    let (ok, out) = promtool(&["check", "metrics"], Some(&text));
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}\n{text}"
    );
    let rules = alerts_file();
    let (ok, out) = promtool(&["check", "rules", &rules.to_string_lossy()], None);
    assert!(ok, "promtool check rules:\n{out}");

    // Prometheus loaded the rules and evaluates them without error.
    let loaded = prom.rules().await;
    assert_eq!(loaded.len(), alerts().len(), "rules loaded: {loaded:?}");
    for (name, health, error) in &loaded {
        assert!(
            health == "ok" && error.is_empty(),
            "rule {name}: {health} {error}"
        );
    }

    // What the scenario must show, exactly.
    check_known_values(&prom, &present, &expected).await;

    // Every expression of every dashboard and alert.
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut with_data = BTreeSet::new();
    let mut all = Vec::new();
    for file in DASHBOARDS {
        let text = std::fs::read_to_string(chart_dir().join("dashboards").join(file)).unwrap();
        let d: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let vars = variables(&prom, file, &d, &present, &mut failures).await;
        all.extend(expressions(file, &d).into_iter().map(|e| (e, vars.clone())));
    }
    all.extend(alerts().into_iter().map(|e| (e, BTreeMap::new())));
    for (e, vars) in &all {
        let expr = substitute(&e.expr, vars);
        let needed = metric_names(&e.expr);
        let missing: Vec<&String> = needed.iter().filter(|n| !present.contains(*n)).collect();
        let id = format!("{} / {} {}", e.file, e.panel, e.ref_id);
        let series = match prom.query(&expr).await {
            Ok(s) => s,
            Err(err) => {
                failures.push(format!("{id}: does not evaluate: {err}\n    {expr}"));
                continue;
            }
        };
        if !series.is_empty() {
            with_data.insert((e.file.clone(), e.panel.clone()));
        }
        let empty_ok = EMPTY_BY_DESIGN
            .iter()
            .any(|(f, p, _)| *f == e.file && *p == e.panel);
        let status = if series.is_empty() {
            if missing.is_empty() && !empty_ok {
                failures.push(format!(
                    "{id}: no data, though {needed:?} are on /metrics\n    {expr}"
                ));
            }
            if missing.is_empty() {
                "empty".to_owned()
            } else {
                format!("parses (no {missing:?} on /metrics)")
            }
        } else {
            format!("{} series", series.len())
        };
        for label in legend_labels(&e.legend) {
            if OPTIONAL_LEGEND_LABELS.contains(&label.as_str()) {
                continue;
            }
            if let Some(s) = series.iter().find(|s| s.label(&label).is_empty()) {
                failures.push(format!(
                    "{id}: a series lacks label {label:?} (its legend or annotation names it): {:?}\n    {expr}",
                    s.labels
                ));
            }
        }
        report.push(format!("{status:>48}  {id}"));
    }
    for (file, panel) in MUST_HAVE_DATA {
        if !with_data.contains(&(file.to_string(), panel.to_string())) {
            failures.push(format!("{file} / {panel}: no data (MUST_HAVE_DATA)"));
        }
    }
    eprintln!(
        "PromQL evaluated against Prometheus:\n{}",
        report.join("\n")
    );
    if let Some(dir) = pictures {
        draw(&prom, &dir, started);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n\n/metrics:\n{text}",
        failures.len(),
        failures.join("\n")
    );
}

/// Evaluates the dashboard's query variables in order, each with the values chosen
/// before it; returns the value each is substituted by.
async fn variables(
    prom: &Prometheus,
    file: &str,
    d: &Value,
    present: &BTreeSet<String>,
    failures: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap_or_default().to_owned();
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .or(v["definition"].as_str())
            .unwrap_or_default();
        let Some((selector, label)) = label_values_query(&substitute(q, &vars)) else {
            failures.push(format!(
                "{file}: variable {name}: not label_values(...): {q}"
            ));
            continue;
        };
        let values = match prom.label_values(&label, &selector).await {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{file}: variable {name}: {e}: {selector}"));
                Vec::new()
            }
        };
        let metrics_there = metric_names(&selector).iter().all(|m| present.contains(m));
        if values.is_empty() && metrics_there {
            failures.push(format!("{file}: variable {name} has no values: {q}"));
        }
        let value = values.first().map_or(".*".to_owned(), |v| regex_value(v));
        vars.insert(name, value);
    }
    vars
}

/// The figures the scenario fixes, on Ferrule's own metrics, and (once they exist)
/// the request counters: exactly the requests sent.
async fn check_known_values(
    prom: &Prometheus,
    present: &BTreeSet<String>,
    expected: &BTreeMap<(String, String), usize>,
) {
    let q = |e: &'static str| async move {
        prom.query(e)
            .await
            .unwrap_or_else(|err| panic!("{e}: {err}"))
    };
    let labels = |s: &[Sample], names: &[&str]| -> BTreeSet<Vec<String>> {
        s.iter()
            .map(|s| names.iter().map(|n| s.label(n).to_owned()).collect())
            .collect()
    };
    // The scrape's target labels are there; the metrics' own `namespace` is renamed.
    let orphans = q("nginx_ingress_controller_orphan_ingress").await;
    assert_eq!(
        labels(&orphans, &["exported_namespace", "ingress", "type"]),
        [["shop", "b", "no-endpoint"], ["shop", "b", "no-service"]]
            .iter()
            .map(|r| r.iter().map(|s| s.to_string()).collect())
            .collect(),
        "{orphans:?}"
    );
    assert!(
        orphans
            .iter()
            .all(|s| s.label("namespace") == TARGET_LABELS[0].1)
    );
    let expiry = q("nginx_ingress_controller_ssl_expire_time_seconds - time()").await;
    assert_eq!(
        labels(&expiry, &["host", "secret_name", "exported_namespace"]),
        BTreeSet::from([vec!["a.test".into(), "a-tls".into(), "shop".into()]])
    );
    let days = expiry[0].value / 86400.0;
    assert!((6.0..=7.01).contains(&days), "expires in {days} days");
    let info = q("nginx_ingress_controller_ssl_certificate_info").await;
    assert_eq!(
        labels(
            &info,
            &[
                "host",
                "issuer_common_name",
                "issuer_organization",
                "public_key_algorithm"
            ]
        ),
        BTreeSet::from([vec![
            "a.test".into(),
            "a.test".into(),
            "Ferrule tests".into(),
            "RSA".into()
        ]])
    );
    assert!(
        !info[0].label("serial_number").is_empty()
            && info[0]
                .label("identifier")
                .ends_with(info[0].label("serial_number"))
    );
    let rejected = q("ferrule_resource_rejected").await;
    assert_eq!(
        labels(
            &rejected,
            &["kind", "resource_namespace", "resource_name", "reason"]
        ),
        // b's missing Service is an error on b (its other paths are served).
        BTreeSet::from([
            vec![
                "Ingress".into(),
                "shop".into(),
                "b".into(),
                "reference".into()
            ],
            vec![
                "Ingress".into(),
                "shop".into(),
                "broken".into(),
                "excluded".into()
            ],
        ]),
        "{rejected:?}"
    );
    let last = q("nginx_ingress_controller_config_last_reload_successful").await;
    assert_eq!(last.iter().map(|s| s.value).collect::<Vec<_>>(), [0.0]);
    assert!(
        q("nginx_ingress_controller_success").await[0].value >= 2.0,
        "start and reloads"
    );
    assert!(q("nginx_ingress_controller_errors").await[0].value >= 1.0);
    let procs = q("nginx_ingress_controller_nginx_process_num_procs").await;
    assert!(procs[0].value >= 3.0, "master and two workers: {procs:?}");
    let sent: usize = expected.values().sum();
    let requests = q("nginx_ingress_controller_nginx_process_requests_total").await;
    assert!(
        requests[0].value >= sent as f64,
        "stub_status requests {requests:?} < {sent}"
    );
    let build = q("nginx_ingress_controller_build_info").await;
    assert_eq!(build[0].label("release"), env!("CARGO_PKG_VERSION"));
    assert_eq!(
        build[0].label("controller_class"),
        "ferrule.dev/ingress-controller"
    );
    // The per-request counters: exactly what was sent.
    assert!(
        present.contains("nginx_ingress_controller_requests"),
        "no request metrics on /metrics"
    );
    {
        let got =
            q(r#"sum by (ingress, status) (nginx_ingress_controller_requests{ingress=~"a|b"})"#)
                .await;
        let got: BTreeMap<(String, String), usize> = got
            .iter()
            .map(|s| {
                (
                    (s.label("ingress").into(), s.label("status").into()),
                    s.value as usize,
                )
            })
            .collect();
        assert_eq!(&got, expected, "requests by Ingress and status");
    }
}

/// About a minute of traffic whose rate, latency and errors vary, with a reload
/// halfway (for `make dashboards`).
async fn more_traffic(
    f: &Ferrule,
    m: &Manifests,
    expected: &mut BTreeMap<(String, String), usize>,
) {
    for i in 0..60u64 {
        let second = tokio::time::Instant::now() + Duration::from_secs(1);
        let mut batch = Vec::new();
        for _ in 0..(6 + (i * 7) % 13) {
            batch.push(("a.test", "/", None, 200, "a"));
        }
        for _ in 0..(i % 4) {
            batch.push(("b.test", "/notfound", Some(404), 404, "b"));
        }
        if i % 5 == 0 || (20..26).contains(&i) {
            batch.push(("b.test", "/down", None, 503, "b"));
        }
        let delay = (i * 11) % 40;
        for (host, path, ask, want, ing) in batch {
            let mut req = client()
                .get(format!("http://127.0.0.1:{}{path}", f.http))
                .header("Host", host)
                .header("x-echo-delay-ms", delay.to_string());
            if let Some(s) = ask {
                req = req.header("x-echo-status", s.to_string());
            }
            assert_eq!(req.send().await.unwrap().status().as_u16(), want);
            *expected.entry((ing.into(), want.to_string())).or_default() += 1;
        }
        if i == 30 {
            m.write(
                "d.yaml",
                &ingress("shop", "d", T1, "d.test", &[("/", "Prefix", "web")], &[]),
            );
        }
        tokio::time::sleep_until(second).await;
    }
}

/// Draws the dashboards from Prometheus's answers (test/dashboards/render.py).
fn draw(prom: &Prometheus, dir: &Path, since: f64) {
    let python = std::env::var("FERRULE_DASHBOARDS_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test/dashboards/render.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(format!("--prometheus=http://127.0.0.1:{}", prom.port))
        .arg(format!("--out={}", dir.display()))
        .arg(format!("--start={since}"))
        .arg(format!("--end={}", crate::prometheus::now()))
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "render.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}
