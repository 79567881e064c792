//! The controller's log as a person and a log pipeline read it: no escape codes in
//! a file, JSON lines on request.

use serde_json::Value;

use crate::support::*;

/// Manifests with one Ingress and one rejected Ingress (an invalid annotation
/// value), so that the log has resource events with their fields.
fn manifests(echo: &Echo) -> Manifests {
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &[("/", "Prefix", "echo")],
            &[],
        ),
    );
    m.write(
        "bad.yaml",
        &ingress(
            "demo",
            "bad",
            "2026-01-01T00:00:00Z",
            "bad.test",
            &[("/", "Prefix", "echo")],
            &[("limit-rps", "huge")],
        ),
    );
    m
}

#[tokio::test]
async fn a_log_redirected_to_a_file_has_no_escape_codes() {
    let echo = Echo::start("127.0.0.2").await;
    let m = manifests(&echo);
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(f.backend("web.test", "/").await.0, 200);
    let log = f.logs();
    assert!(log.contains("resource rejected"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in the log:\n{log:?}");
}

#[tokio::test]
async fn log_format_json_writes_one_object_per_line() {
    let echo = Echo::start("127.0.0.2").await;
    let m = manifests(&echo);
    let f = Ferrule::start(m.path(), &["--log-format", "json"]).await;
    assert_eq!(f.backend("web.test", "/").await.0, 200);
    let log = f.logs();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(l[key].is_string(), "{key} missing: {l}");
        }
    }
    let rejected = lines
        .iter()
        .find(|l| l["message"] == "resource rejected")
        .unwrap_or_else(|| panic!("no rejection logged:\n{log}"));
    assert_eq!(rejected["level"], "WARN");
    assert_eq!(rejected["kind"], "Ingress");
    assert_eq!(rejected["namespace"], "demo");
    assert_eq!(rejected["name"], "bad");
    let problems = rejected["problems"].as_str().unwrap_or_default();
    assert!(problems.contains("limit-rps"), "{rejected}");
}
