//! Config safety (issue 3, section 3), against real NGINX: a resource whose
//! configuration NGINX rejects is excluded and reported, everything else keeps
//! serving without a failed request, and the controller recovers by itself once the
//! resource is fixed. Every test asserts on traffic and on `/status/resources`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const SNIPPETS: &str = "--allow-snippet-annotations";
const CONFIGMAP: &[&str] = &["--configmap", "demo/ferrule"];
const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-02T00:00:00Z";
const WAIT: Duration = Duration::from_secs(10);

/// An Ingress `name` for `host`, path `/` Prefix to Service `echo`.
fn ing(name: &str, created: &str, host: &str, annotations: &[(&str, &str)]) -> String {
    ingress(
        "demo",
        name,
        created,
        host,
        &[("/", "Prefix", "echo")],
        annotations,
    )
}

/// Manifests with the Service `echo` backed by `echo`.
fn manifests(echo: &Echo) -> Manifests {
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m
}

async fn state(f: &Ferrule, kind: &str, name: &str) -> (String, String) {
    let r = f.resource(kind, "demo", name).await.unwrap_or(Value::Null);
    (
        r["state"].as_str().unwrap_or("absent").to_owned(),
        r["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Waits until `kind/demo/name` has `want` as its state; returns its message.
async fn wait_state(f: &Ferrule, kind: &str, name: &str, want: &str) -> String {
    let ok = wait_until(WAIT, || async { state(f, kind, name).await.0 == want }).await;
    let (got, message) = state(f, kind, name).await;
    assert!(
        ok,
        "{kind} {name}: want {want}, got {got} ({message}); resources: {:?}\nlog:\n{}",
        f.resources().await,
        f.logs()
    );
    message
}

/// Waits until `host` answers `status`.
async fn wait_status(f: &Ferrule, host: &str, status: u16) {
    let ok = wait_until(WAIT, || async { f.get(host, "/").await.0 == status }).await;
    assert!(
        ok,
        "{host} should answer {status}, got {}; resources: {:?}\nlog:\n{}",
        f.get(host, "/").await.0,
        f.resources().await,
        f.logs()
    );
}

/// A response header of `GET host/`.
async fn header(f: &Ferrule, host: &str, name: &str) -> Option<String> {
    let r = client()
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host)
        .send()
        .await
        .unwrap();
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

async fn config_tests(f: &Ferrule) -> f64 {
    f.metric("ferrule_config_tests_total", "").await
}

/// Requests `host` + `path` in a loop until stopped, expecting 200 every time.
struct Traffic {
    stop: Arc<AtomicBool>,
    /// (requests answered 200, descriptions of the others and of errors).
    task: tokio::task::JoinHandle<(usize, Vec<String>)>,
}

impl Traffic {
    fn start(f: &Ferrule, host: &str, path: &str) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("http://127.0.0.1:{}{path}", f.http);
        let (host, stopped) = (host.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let c = client();
            let (mut ok, mut failed) = (0, Vec::new());
            while !stopped.load(Ordering::SeqCst) {
                match c.get(&url).header("Host", &host).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    other => failed.push(format!("{other:?}")),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (ok, failed)
        });
        Traffic { stop, task }
    }

    /// Stops and asserts that every request succeeded.
    async fn assert_no_failure(self, what: &str) {
        self.stop.store(true, Ordering::SeqCst);
        let (ok, failed) = self.task.await.unwrap();
        assert!(ok > 0, "{what}: no request went through");
        assert!(failed.is_empty(), "{what}: failed requests: {failed:?}");
    }
}

#[tokio::test]
async fn a_broken_new_ingress_is_rejected_and_the_rest_keeps_serving() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("good.yaml", &ing("good", T0, "good.test", &[]));
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    wait_status(&f, "good.test", 200).await;
    let workers = f.worker_pids();
    let tests = config_tests(&f).await;
    let traffic = Traffic::start(&f, "good.test", "/");

    let bad = [("configuration-snippet", "return bogus_directive;")];
    m.write("bad.yaml", &ing("bad", T1, "bad.test", &bad));
    let message = wait_state(&f, "Ingress", "bad", "rejected").await;
    assert!(
        message.contains("invalid return code \"bogus_directive\""),
        "the NGINX error is reported: {message}"
    );
    assert_eq!(f.get("bad.test", "/").await.0, 404, "bad host not served");
    assert_eq!(state(&f, "Ingress", "good").await.0, "applied");
    traffic
        .assert_no_failure("while the bad Ingress was rejected")
        .await;
    assert_eq!(f.worker_pids(), workers, "no reload for a rejected change");
    assert_eq!(
        config_tests(&f).await - tests,
        1.0,
        "one nginx -t, its error mapped through the source map"
    );

    // Edited but still broken: retried, and the new error is reported.
    let other = [("configuration-snippet", "return other_bogus;")];
    m.write("bad.yaml", &ing("bad", T1, "bad.test", &other));
    let ok = wait_until(WAIT, || async {
        state(&f, "Ingress", "bad").await.1.contains("other_bogus")
    })
    .await;
    assert!(ok, "{:?}", f.resources().await);
    assert_eq!(f.worker_pids(), workers, "still no reload");

    // Fixed: retried because it changed, applied, served with its snippet.
    let fixed = [("configuration-snippet", "add_header X-Fixed yes;")];
    m.write("bad.yaml", &ing("bad", T1, "bad.test", &fixed));
    wait_state(&f, "Ingress", "bad", "applied").await;
    f.old_workers_gone().await;
    wait_status(&f, "bad.test", 200).await;
    assert_eq!(
        header(&f, "bad.test", "x-fixed").await.as_deref(),
        Some("yes")
    );
    assert_eq!(f.backend("good.test", "/").await.0, 200);
}

#[tokio::test]
async fn a_broken_edit_keeps_the_previous_version_serving() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    let v1 = [("configuration-snippet", "add_header X-Version one;")];
    m.write("web.yaml", &ing("web", T0, "web.test", &v1));
    m.write("other.yaml", &ing("other", T0, "other.test", &[]));
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    wait_status(&f, "web.test", 200).await;
    let workers = f.worker_pids();
    let traffic = Traffic::start(&f, "web.test", "/");

    let broken = [("configuration-snippet", "add_header X-Version;")];
    m.write("web.yaml", &ing("web", T0, "web.test", &broken));
    let message = wait_state(&f, "Ingress", "web", "rejected").await;
    assert!(
        message.contains("invalid number of arguments in \"add_header\"")
            && message.contains("previous version keeps serving"),
        "{message}"
    );
    traffic
        .assert_no_failure("while the edit was rejected")
        .await;
    assert_eq!(f.worker_pids(), workers, "no reload");
    assert_eq!(
        header(&f, "web.test", "x-version").await.as_deref(),
        Some("one")
    );

    // Another change reloads NGINX: the previous version of web is still served.
    m.write("new.yaml", &ing("new", T1, "new.test", &[]));
    wait_status(&f, "new.test", 200).await;
    assert_ne!(f.worker_pids(), workers, "reloaded for the new Ingress");
    assert_eq!(
        header(&f, "web.test", "x-version").await.as_deref(),
        Some("one")
    );
    assert_eq!(state(&f, "Ingress", "web").await.0, "rejected");

    let v2 = [("configuration-snippet", "add_header X-Version two;")];
    m.write("web.yaml", &ing("web", T0, "web.test", &v2));
    wait_state(&f, "Ingress", "web", "applied").await;
    let ok = wait_until(WAIT, || async {
        header(&f, "web.test", "x-version").await.as_deref() == Some("two")
    })
    .await;
    assert!(ok, "the fixed version is served");
}

// The broken version also routes to another Service: until NGINX runs it, the
// balancer must keep the backend the running configuration routes to.
#[tokio::test]
async fn a_broken_edit_to_another_service_keeps_the_old_backend_serving() {
    let echo = Echo::start("127.0.0.1").await;
    let next = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("svc-next.yaml", &service("demo", "next", &[next.addr]));
    m.write("web.yaml", &ing("web", T0, "web.test", &[]));
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    wait_status(&f, "web.test", 200).await;
    let traffic = Traffic::start(&f, "web.test", "/");

    let broken = [("configuration-snippet", "add_header X-Version;")];
    let to_next = [("/", "Prefix", "next")];
    m.write(
        "web.yaml",
        &ingress("demo", "web", T0, "web.test", &to_next, &broken),
    );
    wait_state(&f, "Ingress", "web", "rejected").await;
    // Anything posted late lands within this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    traffic
        .assert_no_failure("while the edit to another Service was rejected")
        .await;
    assert_eq!(
        f.backend("web.test", "/").await,
        (200, echo.addr.to_string())
    );
}

// A rejected version's balancing settings do not reach the balancer either: the
// previous version keeps serving as it was.
#[tokio::test]
async fn a_rejected_edit_s_balancing_settings_are_not_applied() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("web.yaml", &ing("web", T0, "web.test", &[]));
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    wait_status(&f, "web.test", 200).await;
    let broken = [
        ("configuration-snippet", "add_header X-Version;"),
        ("upstream-hash-by", "$request_uri"),
    ];
    m.write("web.yaml", &ing("web", T0, "web.test", &broken));
    wait_state(&f, "Ingress", "web", "rejected").await;
    let previous = wait_until(WAIT, || async {
        f.balancer_backend("demo_echo_80").await["upstream_hash_by"].is_null()
    })
    .await;
    assert!(previous, "{}", f.balancer_backend("demo_echo_80").await);
    // and it stays so
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = f.balancer_backend("demo_echo_80").await;
    assert!(
        b["upstream_hash_by"].is_null(),
        "rejected settings posted: {b}"
    );
}

// While a reload to another Service waits (rate limit), the backend the running
// configuration still routes to keeps its newest endpoints, not those of the last
// reload.
#[tokio::test]
async fn a_pending_reload_keeps_the_newest_endpoints_of_the_old_backend() {
    let echo = Echo::start("127.0.0.1").await;
    let moved = Echo::start("127.0.0.1").await;
    let next = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("svc-next.yaml", &service("demo", "next", &[next.addr]));
    m.write("web.yaml", &ing("web", T0, "web.test", &[]));
    let f = Ferrule::start(m.path(), &["--min-reload-interval-ms", "8000"]).await;
    wait_status(&f, "web.test", 200).await;
    m.write("svc.yaml", &service("demo", "echo", &[moved.addr]));
    let ok = wait_until(WAIT, || async {
        f.backend("web.test", "/").await == (200, moved.addr.to_string())
    })
    .await;
    assert!(ok, "endpoints moved; log:\n{}", f.logs());
    let to_next = [("/", "Prefix", "next")];
    m.write(
        "web.yaml",
        &ingress("demo", "web", T0, "web.test", &to_next, &[]),
    );
    // The model task has seen the edit when `next` is in the store.
    let seen = wait_until(WAIT, || async {
        f.balancer_backend("demo_next_80").await["endpoints"][0]["address"] == "127.0.0.1"
    })
    .await;
    assert!(seen, "log:\n{}", f.logs());
    for _ in 0..20 {
        assert_eq!(
            f.backend("web.test", "/").await,
            (200, moved.addr.to_string()),
            "the reload waits; log:\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_source_map_names_the_exact_ingress_on_a_shared_host() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    // `alpha` is older, so it owns the server block; the broken line is in `beta`'s
    // location inside it.
    let paths = |p| [(p, "Prefix", "echo")];
    m.write(
        "alpha.yaml",
        &ingress("demo", "alpha", T0, "shared.test", &paths("/a"), &[]),
    );
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    let tests = config_tests(&f).await;
    let bad = [("configuration-snippet", "proxy_pass_header;")];
    m.write(
        "beta.yaml",
        &ingress("demo", "beta", T1, "shared.test", &paths("/b"), &bad),
    );
    let message = wait_state(&f, "Ingress", "beta", "rejected").await;
    assert!(message.contains("proxy_pass_header"), "{message}");
    assert_eq!(state(&f, "Ingress", "alpha").await.0, "applied");
    assert_eq!(f.get("shared.test", "/a").await.0, 200);
    assert_eq!(f.get("shared.test", "/b").await.0, 404);
    assert_eq!(config_tests(&f).await - tests, 1.0, "no bisection needed");
}

#[tokio::test]
async fn a_broken_configmap_is_held_back_and_every_ingress_keeps_serving() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    let hosts = ["a.test", "b.test", "c.test"];
    for (i, h) in hosts.iter().enumerate() {
        m.write(
            &format!("ing{i}.yaml"),
            &ing(&format!("ing{i}"), T0, h, &[]),
        );
    }
    let one = [("location-snippet", "add_header X-Shared one;")];
    m.write("cm.yaml", &configmap(&one));
    let f = Ferrule::start(m.path(), CONFIGMAP).await;
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;
    assert_eq!(
        header(&f, "a.test", "x-shared").await.as_deref(),
        Some("one")
    );
    let workers = f.worker_pids();
    let tests = config_tests(&f).await;
    let traffic = Traffic::start(&f, "b.test", "/");

    // Its own lines are attributed to the ConfigMap: held back at once.
    m.write(
        "cm.yaml",
        &configmap(&[("location-snippet", "bogus_shared;")]),
    );
    let message = wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert!(
        message.contains("unknown directive \"bogus_shared\""),
        "{message}"
    );
    for i in 0..hosts.len() {
        assert_eq!(state(&f, "Ingress", &format!("ing{i}")).await.0, "applied");
    }
    assert_eq!(config_tests(&f).await - tests, 1.0);
    assert_eq!(f.worker_pids(), workers, "no reload");
    assert_eq!(
        header(&f, "c.test", "x-shared").await.as_deref(),
        Some("one"),
        "the last good ConfigMap stays in use"
    );

    // Same for the http-snippet (in nginx.conf).
    m.write("cm.yaml", &configmap(&[("http-snippet", "bogus_http on;")]));
    let ok = wait_until(WAIT, || async {
        state(&f, "ConfigMap", "ferrule")
            .await
            .1
            .contains("bogus_http")
    })
    .await;
    assert!(ok, "{:?}", f.resources().await);
    assert_eq!(f.worker_pids(), workers, "no reload");
    traffic
        .assert_no_failure("while the ConfigMap was held back")
        .await;

    let two = [("location-snippet", "add_header X-Shared two;")];
    m.write("cm.yaml", &configmap(&two));
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;
    let ok = wait_until(WAIT, || async {
        header(&f, "a.test", "x-shared").await.as_deref() == Some("two")
    })
    .await;
    assert!(ok, "the fixed ConfigMap applies");
}

#[tokio::test]
async fn two_ingresses_failing_after_a_configmap_change_blame_the_configmap() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    let paths = [("/shared", "Prefix", "echo")];
    for (i, h) in ["a.test", "b.test", "c.test"].iter().enumerate() {
        let name = format!("ing{i}");
        m.write(
            &format!("{name}.yaml"),
            &ingress("demo", &name, T0, h, &paths, &[]),
        );
    }
    m.write("cm.yaml", &configmap(&[("proxy-body-size", "2m")]));
    let f = Ferrule::start(m.path(), CONFIGMAP).await;
    let workers = f.worker_pids();
    let tests = config_tests(&f).await;
    let traffic = Traffic::start(&f, "c.test", "/shared");

    // Valid on its own, but every server now defines `location = /shared` twice:
    // NGINX names the Ingresses' lines, not the ConfigMap's.
    let snippet = "location = /shared { return 204; }";
    m.write("cm.yaml", &configmap(&[("server-snippet", snippet)]));
    let message = wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert!(
        message.contains("duplicate location \"/shared\"")
            && message
                .contains("broke the configuration of Ingress demo/ing0 and Ingress demo/ing1"),
        "{message}"
    );
    for i in 0..3 {
        assert_eq!(state(&f, "Ingress", &format!("ing{i}")).await.0, "applied");
    }
    assert_eq!(
        config_tests(&f).await - tests,
        3.0,
        "two failures, one check with the last good ConfigMap, then nothing"
    );
    assert_eq!(f.worker_pids(), workers, "no reload");
    traffic
        .assert_no_failure("during the shared-input failure")
        .await;
    assert_eq!(f.get("a.test", "/shared").await.0, 200);

    let fixed = "location = /other { return 204; }";
    m.write("cm.yaml", &configmap(&[("server-snippet", fixed)]));
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;
    let ok = wait_until(WAIT, || async { f.get("b.test", "/other").await.0 == 204 }).await;
    assert!(ok, "the fixed ConfigMap applies");
}

#[tokio::test]
async fn startup_maps_one_error_to_its_ingress() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    for i in 0..3 {
        m.write(
            &format!("good{i}.yaml"),
            &ing(&format!("good{i}"), T0, &format!("good{i}.test"), &[]),
        );
    }
    let bad = [("configuration-snippet", "return bogus_directive;")];
    m.write("bad.yaml", &ing("bad", T0, "bad.test", &bad));
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    let message = wait_state(&f, "Ingress", "bad", "rejected").await;
    assert!(message.contains("invalid return code"), "{message}");
    for i in 0..3 {
        assert_eq!(f.get(&format!("good{i}.test"), "/").await.0, 200);
        assert_eq!(state(&f, "Ingress", &format!("good{i}")).await.0, "applied");
    }
    assert_eq!(f.get("bad.test", "/").await.0, 404);
    assert_eq!(config_tests(&f).await, 2.0, "one failing test, one passing");
}

#[tokio::test]
async fn startup_bisects_errors_that_name_no_usable_line() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    for i in 0..6 {
        m.write(
            &format!("good{i}.yaml"),
            &ing(&format!("good{i}"), T0, &format!("good{i}.test"), &[]),
        );
    }
    // NGINX reports this with no file:line at all...
    let no_line = [("server-snippet", "limit_req zone=nosuch_limit burst=1;")];
    m.write("noline.yaml", &ing("noline", T0, "noline.test", &no_line));
    // ...and this at the end of the http block in nginx.conf, naming nothing.
    let wrong_line = [("configuration-snippet", "proxy_busy_buffers_size 100m;")];
    m.write(
        "wrongline.yaml",
        &ing("wrongline", T0, "wrongline.test", &wrong_line),
    );
    let f = Ferrule::start(m.path(), &[SNIPPETS]).await;
    assert!(
        config_tests(&f).await > 4.0,
        "bisection ran: two failures, then probes of halves"
    );

    let message = wait_state(&f, "Ingress", "noline", "rejected").await;
    assert!(
        message.contains("zero size shared memory zone \"nosuch_limit\""),
        "{message}"
    );
    let message = wait_state(&f, "Ingress", "wrongline", "rejected").await;
    assert!(
        message.contains("\"proxy_busy_buffers_size\" must be less than"),
        "{message}"
    );
    for i in 0..6 {
        assert_eq!(f.get(&format!("good{i}.test"), "/").await.0, 200);
        assert_eq!(state(&f, "Ingress", &format!("good{i}")).await.0, "applied");
    }
    assert_eq!(f.get("noline.test", "/").await.0, 404);
    assert_eq!(f.get("wrongline.test", "/").await.0, 404);
}

// A new pod has no last good ConfigMap: it serves the defaults (NGINX must run) but
// is not Ready, so that a rollout stalls instead of finishing without the
// administrator's settings; fixing the ConfigMap makes it Ready by itself.
#[tokio::test]
async fn startup_with_a_rejected_configmap_serves_the_defaults_but_is_not_ready() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    for i in 0..2 {
        m.write(
            &format!("ing{i}.yaml"),
            &ing(&format!("ing{i}"), T0, &format!("ing{i}.test"), &[]),
        );
    }
    // Fails without a line, with no Ingress at all: the ConfigMap is held back.
    m.write(
        "cm.yaml",
        &configmap(&[("http-snippet", "limit_req zone=nosuch burst=1;")]),
    );
    let f = Ferrule::spawn(m.path(), CONFIGMAP);
    let message = wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert!(
        message.contains("zero size shared memory zone"),
        "{message}"
    );
    for i in 0..2 {
        wait_status(&f, &format!("ing{i}.test"), 200).await;
        assert_eq!(state(&f, "Ingress", &format!("ing{i}")).await.0, "applied");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.get_status("/readyz").await.0, 503, "{}", f.logs());
    let said = f
        .logs()
        .matches("the ConfigMap is rejected and this pod has no earlier good version")
        .count();
    assert_eq!(said, 1, "logged once: {}", f.logs());

    m.write(
        "cm.yaml",
        &configmap(&[("location-snippet", "add_header X-Shared fixed;")]),
    );
    f.wait_ready(WAIT).await;
    f.old_workers_gone().await;
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;
    assert_eq!(
        header(&f, "ing0.test", "x-shared").await.as_deref(),
        Some("fixed")
    );

    // Running, it keeps the last good version and stays Ready.
    m.write(
        "cm.yaml",
        &configmap(&[("location-snippet", "bogus_shared;")]),
    );
    wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert_eq!(f.get_status("/readyz").await.0, 200);
    assert_eq!(
        header(&f, "ing1.test", "x-shared").await.as_deref(),
        Some("fixed")
    );
}

// The same for a value the model refuses: a new pod does not serve without it.
#[tokio::test]
async fn startup_with_an_invalid_configmap_value_is_not_ready_until_fixed() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("ing.yaml", &ing("ing", T0, "ing.test", &[]));
    m.write("cm.yaml", &configmap(&[("proxy-body-size", "huge")]));
    let f = Ferrule::spawn(m.path(), CONFIGMAP);
    let message = wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert!(message.contains("proxy-body-size"), "{message}");
    wait_status(&f, "ing.test", 200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.get_status("/readyz").await.0, 503, "{}", f.logs());
    m.write("cm.yaml", &configmap(&[("proxy-body-size", "2m")]));
    f.wait_ready(WAIT).await;
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;
}

#[tokio::test]
async fn not_ready_while_everything_is_excluded_and_ready_again_by_itself() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    let bad = [("configuration-snippet", "return bogus_directive;")];
    m.write("one.yaml", &ing("one", T0, "one.test", &bad));
    m.write("two.yaml", &ing("two", T0, "two.test", &bad));
    let f = Ferrule::spawn(m.path(), &[SNIPPETS]);
    wait_state(&f, "Ingress", "one", "rejected").await;
    wait_state(&f, "Ingress", "two", "rejected").await;
    // NGINX serves the base configuration, but nothing of ours.
    wait_status(&f, "one.test", 404).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.get_status("/readyz").await.0, 503, "{}", f.logs());

    let fixed = [("configuration-snippet", "add_header X-Fixed yes;")];
    m.write("one.yaml", &ing("one", T0, "one.test", &fixed));
    f.wait_ready(WAIT).await;
    wait_status(&f, "one.test", 200).await;
    assert_eq!(state(&f, "Ingress", "one").await.0, "applied");

    // A deleted excluded resource leaves the status.
    m.remove("two.yaml");
    let gone = wait_until(WAIT, || async {
        state(&f, "Ingress", "two").await.0 == "absent"
    })
    .await;
    assert!(gone, "{:?}", f.resources().await);
    assert_eq!(f.get_status("/readyz").await.0, 200);
}

#[tokio::test]
async fn deleting_every_excluded_ingress_makes_it_ready() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    let bad = [("configuration-snippet", "return bogus_directive;")];
    m.write("one.yaml", &ing("one", T0, "one.test", &bad));
    let f = Ferrule::spawn(m.path(), &[SNIPPETS]);
    wait_state(&f, "Ingress", "one", "rejected").await;
    assert_eq!(f.get_status("/readyz").await.0, 503);
    // No configuration change (nothing of `one` was served), yet Ready again.
    m.remove("one.yaml");
    f.wait_ready(WAIT).await;
    assert_eq!(state(&f, "Ingress", "one").await.0, "absent");
}

#[tokio::test]
async fn a_shared_configuration_broken_from_outside_falls_back_to_one_by_one() {
    let echo = Echo::start("127.0.0.1").await;
    let m = manifests(&echo);
    m.write("ing0.yaml", &ing("ing0", T0, "ing0.test", &[]));
    let extra = tempfile::tempdir().unwrap();
    let included = extra.path().join("extra.conf");
    std::fs::write(&included, "map $host $ferrule_test_extra { default 1; }\n").unwrap();
    let snippet = format!("include {};", included.display());
    m.write("cm.yaml", &configmap(&[("http-snippet", &snippet)]));
    let f = Ferrule::start(m.path(), CONFIGMAP).await;
    wait_state(&f, "ConfigMap", "ferrule", "applied").await;

    // The ConfigMap did not change, yet it breaks now: no change to blame, so the
    // base configuration is rebuilt (the defaults, as the last good ConfigMap fails
    // too) and every Ingress is added back one by one.
    std::fs::remove_file(&included).unwrap();
    m.write("ing1.yaml", &ing("ing1", T1, "ing1.test", &[]));
    let message = wait_state(&f, "ConfigMap", "ferrule", "rejected").await;
    assert!(
        message.contains("extra.conf") && message.contains("the defaults are in use"),
        "{message}"
    );
    wait_status(&f, "ing1.test", 200).await;
    assert_eq!(f.get("ing0.test", "/").await.0, 200);
    for name in ["ing0", "ing1"] {
        assert_eq!(state(&f, "Ingress", name).await.0, "applied");
    }
    assert!(f.logs().contains("one by one"), "the fallback ran");
}

/// A regex path reaches NGINX as a `location ~*` and a `rewrite`: a named group would
/// be a variable each match sets (here the balancer's `$ferrule_backend`, so that the
/// URI picked any backend of the cluster), a nested repetition would let one URI hold
/// a worker. Both paths are refused, named in the status; the rest keeps serving.
#[tokio::test]
async fn a_regex_path_can_neither_choose_the_backend_nor_backtrack_for_ever() {
    let alpha = Echo::start("127.0.0.2").await;
    let beta = Echo::start("127.0.0.3").await;
    let m = Manifests::new();
    m.write("alpha-svc.yaml", &service("demo", "alpha", &[alpha.addr]));
    m.write("beta-svc.yaml", &service("demo", "beta", &[beta.addr]));
    m.write(
        "alpha.yaml",
        &ingress(
            "demo",
            "alpha",
            T0,
            "alpha.test",
            &[("/", "Prefix", "alpha")],
            &[],
        ),
    );
    let paths = [
        (
            "/(?<ferrule_backend>[^/]+)",
            "ImplementationSpecific",
            "beta",
        ),
        ("/slow/(a|aa)+$", "ImplementationSpecific", "beta"),
        ("/ok(/|$)(.*)", "ImplementationSpecific", "beta"),
    ];
    m.write(
        "beta.yaml",
        &ingress(
            "demo",
            "beta",
            T1,
            "beta.test",
            &paths,
            &[("rewrite-target", "/$2")],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let message = state(&f, "Ingress", "beta").await.1;
    assert!(
        message.contains("named group \"ferrule_backend\""),
        "{message}"
    );
    assert!(message.contains("exponential"), "{message}");
    assert_eq!(
        f.backend("beta.test", "/ok/x").await,
        (200, beta.addr.to_string())
    );
    for uri in [
        "/demo_alpha_80",
        "/demo_alpha_http",
        "/slow/aaaaaaaaaaaaaaaaaaaaaaaaab",
    ] {
        let (s, backend) = f.backend("beta.test", uri).await;
        assert_ne!(
            backend,
            alpha.addr.to_string(),
            "{uri} reached another tenant"
        );
        assert_eq!(s, 404, "{uri}: no location");
    }
    assert_eq!(
        f.backend("alpha.test", "/").await,
        (200, alpha.addr.to_string())
    );
}
