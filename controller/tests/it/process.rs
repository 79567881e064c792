//! The NGINX process as Ferrule drives it: verified reloads, coalescing, the endpoint
//! fast path without reloads, supervision, shutdown, file watching and the status port.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

fn web(paths: &[PathRule]) -> String {
    Ing::new("demo", "web", T0).rule("web.test", paths).yaml()
}

/// The common start: an echo backend on `ip` serving `web.test/`, and Ferrule (with
/// `args`) Ready on those manifests.
async fn echo_web(ip: &str, args: &[&str]) -> (Echo, Manifests, Ferrule) {
    let a = Echo::start(ip).await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    let f = Ferrule::start(m.path(), args).await;
    (a, m, f)
}

const RELOADS_OK: (&str, &str) = ("ferrule_reloads_total", "result=\"success\"");

async fn reloads(f: &Ferrule) -> f64 {
    f.metric(RELOADS_OK.0, RELOADS_OK.1).await
}

#[tokio::test]
async fn reload_is_verified_and_replaces_workers() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/a", "Prefix", "echo")]));
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(f.get("web.test", "/a").await.0, 200);
    let before = reloads(&f).await;
    let workers = f.worker_pids();
    assert_eq!(workers.len(), 2, "two workers: {workers:?}");
    let master = f.master_pid().expect("pid file");

    m.write("ing.yaml", &web(&[("/b", "Prefix", "echo")]));
    let applied = wait_until(Duration::from_secs(5), || async {
        f.get("web.test", "/b").await.0 == 200
    })
    .await;
    assert!(applied, "change applied; log:\n{}", f.logs());
    f.old_workers_gone().await;
    assert_eq!(f.get("web.test", "/a").await.0, 404);
    // The counter is bumped once the reload is verified.
    let counted = wait_until(Duration::from_secs(5), || async {
        reloads(&f).await == before + 1.0
    })
    .await;
    assert!(counted, "reloads {} → {}", before, reloads(&f).await);
    assert_eq!(
        f.metric("ferrule_reload_verify_failures_total", "").await,
        0.0
    );
    assert_eq!(f.master_pid(), Some(master), "a reload keeps the master");
    // Old workers drain and exit; only new ones remain.
    let replaced = wait_until(Duration::from_secs(10), || async {
        let now = f.worker_pids();
        now.len() == 2 && now.iter().all(|p| !workers.contains(p))
    })
    .await;
    assert!(
        replaced,
        "workers {workers:?} → {:?}: not replaced",
        f.worker_pids()
    );
    // Config version endpoint agrees (new workers serve the new version): the
    // counter did not move again, nothing else reloaded.
    assert_eq!(reloads(&f).await, before + 1.0);
}

#[tokio::test]
async fn a_burst_of_ingresses_is_coalesced() {
    let (_a, m, f) = echo_web("127.0.0.2", &[]).await;
    let before = reloads(&f).await;
    for i in 0..20 {
        m.write(
            &format!("burst-{i:02}.yaml"),
            &Ing::new("demo", &format!("burst-{i:02}"), T0)
                .rule(&format!("burst-{i:02}.test"), &[("/", "Prefix", "echo")])
                .yaml(),
        );
    }
    let all = wait_until(Duration::from_secs(10), || async {
        for i in 0..20 {
            if f.get(&format!("burst-{i:02}.test"), "/").await.0 != 200 {
                return false;
            }
        }
        true
    })
    .await;
    assert!(all, "every Ingress of the burst served; log:\n{}", f.logs());
    // Let any straggling reload finish before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = reloads(&f).await - before;
    assert!(
        (1.0..=2.0).contains(&n),
        "20 files in a burst gave {n} reloads"
    );
}

#[tokio::test]
async fn endpoint_changes_need_no_reload() {
    let (a, m, f) = echo_web("127.0.0.2", &[]).await;
    let b = Echo::start_on("127.0.0.3", a.addr.port()).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    let before = reloads(&f).await;
    let workers = f.worker_pids();

    m.write("svc.yaml", &service("demo", "echo", &[b.addr]));
    let started = Instant::now();
    let moved = wait_until(Duration::from_secs(3), || async {
        f.backend("web.test", "/").await == (200, b.addr.to_string())
    })
    .await;
    let took = started.elapsed();
    assert!(moved, "traffic follows the endpoints; log:\n{}", f.logs());
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // Stays there (every worker has the new endpoints).
    for _ in 0..20 {
        assert_eq!(f.backend("web.test", "/").await, (200, b.addr.to_string()));
    }
    assert_eq!(reloads(&f).await, before, "no reload");
    assert_eq!(f.worker_pids(), workers, "same workers");
    assert!(
        f.metric(
            "ferrule_dynamic_updates_total",
            "kind=\"backends\",result=\"success\""
        )
        .await
            >= 1.0
    );

    // Scale out to both: both serve, still without reload.
    m.write("svc.yaml", &service("demo", "echo", &[a.addr, b.addr]));
    let both = wait_until(Duration::from_secs(3), || async {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..10 {
            seen.insert(f.backend("web.test", "/").await.1);
        }
        seen.len() == 2
    })
    .await;
    assert!(both, "both endpoints serve");
    assert_eq!(reloads(&f).await, before, "no reload");
    assert_eq!(f.worker_pids(), workers, "same workers");
}

#[tokio::test]
async fn nginx_killed_is_restarted_and_serves_again() {
    let (_a, m, f) = echo_web("127.0.0.2", &[]).await;
    assert_eq!(f.get("web.test", "/").await.0, 200);
    // The endpoints move (the fast path, no reload) before NGINX dies: the restarted
    // NGINX must get them, not those of the last reload.
    let b = Echo::start("127.0.0.2").await;
    let before = reloads(&f).await;
    m.write("svc.yaml", &service("demo", "echo", &[b.addr]));
    let moved = wait_until(Duration::from_secs(5), || async {
        f.backend("web.test", "/").await == (200, b.addr.to_string())
    })
    .await;
    assert!(moved, "endpoint change applied; log:\n{}", f.logs());
    assert_eq!(
        reloads(&f).await,
        before,
        "no reload for an endpoint change"
    );
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 0.0);

    kill_9(master);
    let b_addr = b.addr.to_string();
    let restarted =
        serves_from_a_new_master(&f, master, "web.test", &b_addr, Duration::from_secs(10)).await;
    assert!(restarted, "NGINX restarted and serving; log:\n{}", f.logs());
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 1.0);
    // The orphaned workers of the killed master are gone, and every request is served
    // by the new master's workers with the full configuration (endpoints included).
    let gone = wait_until(Duration::from_secs(5), || async {
        workers.iter().all(|p| !alive(*p))
    })
    .await;
    assert!(gone, "old workers {workers:?} still alive");
    for _ in 0..20 {
        assert_eq!(f.backend("web.test", "/").await, (200, b.addr.to_string()));
    }
    // And it keeps following changes.
    m.write("ing.yaml", &web(&[("/only", "Prefix", "echo")]));
    let applied = wait_until(Duration::from_secs(5), || async {
        f.get("web.test", "/").await.0 == 404
    })
    .await;
    assert!(
        applied,
        "changes applied after a restart; log:\n{}",
        f.logs()
    );

    // Killed again with a change right behind: the pass that starts NGINX again
    // still counts a restart (and NGINX is not Ready until it serves).
    let master = f.master_pid().expect("pid file");
    kill_9(master);
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    let restarted =
        serves_from_a_new_master(&f, master, "web.test", &b_addr, Duration::from_secs(10)).await;
    assert!(restarted, "restarted again; log:\n{}", f.logs());
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 2.0);
}

#[tokio::test]
async fn sigterm_stops_nginx_and_exits_zero() {
    let (_a, _m, mut f) = echo_web("127.0.0.2", &[]).await;
    assert_eq!(f.get("web.test", "/").await.0, 200);
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();
    let started = Instant::now();
    let status = f.stop();
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        f.logs()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!alive(master), "NGINX master still running");
    for w in workers {
        assert!(!alive(w), "NGINX worker {w} still running");
    }
    let refused = client()
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", "web.test")
        .send()
        .await;
    assert!(refused.is_err(), "port still served after exit");
}

/// A rolling update must not drop traffic: at SIGTERM the pod stops being Ready at
/// once, NGINX accepts new connections for the grace period (while endpoints and load
/// balancers catch up), then stops accepting and lets the requests in flight finish.
#[tokio::test]
async fn sigterm_keeps_serving_for_the_grace_period_and_drains_requests_in_flight() {
    let (a, _m, mut f) = echo_web("127.0.0.2", &["--shutdown-grace-period", "2"]).await;
    assert_eq!(f.get_status("/readyz").await.0, 200);
    let url = format!("http://127.0.0.1:{}/slow", f.http);
    let slow = tokio::spawn(async move {
        let r = client()
            .get(url)
            .header("Host", "web.test")
            .header("x-echo-delay-ms", "3500")
            .send()
            .await?;
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await?;
        Ok::<_, reqwest::Error>((status, body["backend"].as_str().unwrap_or("").to_owned()))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    f.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        f.get_status("/readyz").await.0,
        503,
        "not Ready from SIGTERM on"
    );
    assert_eq!(
        f.backend("web.test", "/new").await,
        (200, a.addr.to_string()),
        "a new connection during the grace period is served"
    );
    let (status, backend) = slow
        .await
        .unwrap()
        .expect("the request in flight completes");
    assert_eq!((status, backend), (200, a.addr.to_string()));
    let exit = f.child.wait().unwrap();
    assert!(exit.success(), "exit {exit:?}; log:\n{}", f.logs());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

/// One manifest file that does not parse holds back only its own objects: at start
/// the others are served, and later changes to them still apply.
#[tokio::test]
async fn a_broken_manifest_file_holds_back_only_its_own_objects() {
    let a = Echo::start("127.0.0.2").await;
    let b = Echo::start("127.0.0.3").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    m.write("broken.yaml", "metadata: {name: x, namespace: demo\n");
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    m.write("svc.yaml", &service("demo", "echo", &[b.addr]));
    let moved = wait_until(Duration::from_secs(5), || async {
        f.backend("web.test", "/").await.1 == b.addr.to_string()
    })
    .await;
    assert!(
        moved,
        "the endpoint change was held back; log:\n{}",
        f.logs()
    );
    assert!(f.logs().contains("broken.yaml"), "{}", f.logs());
    assert_eq!(f.metric("ferrule_manifest_errors", "").await, 1.0);
    m.write("broken.yaml", &service("demo", "other", &[a.addr]));
    let fixed = wait_until(Duration::from_secs(5), || async {
        f.metric("ferrule_manifest_errors", "").await == 0.0
    })
    .await;
    assert!(fixed, "the fixed file still counts as failing");
}

#[tokio::test]
async fn ingress_edits_are_picked_up_within_a_second() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/v0", "Prefix", "echo")]));
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(f.get("web.test", "/v0").await.0, 200);
    for i in 1..=3 {
        let path = format!("/v{i}");
        let yaml = web(&[(&path, "Prefix", "echo")]);
        let started = Instant::now();
        if i == 2 {
            // An in-place write (not atomic).
            std::fs::write(m.path().join("ing.yaml"), yaml).unwrap();
        } else {
            // Atomic: temp file + rename, as editors and GitOps tools do.
            m.write("ing.yaml", &yaml);
        }
        let ok = wait_until(Duration::from_secs(3), || async {
            f.get("web.test", &path).await.0 == 200
        })
        .await;
        let took = started.elapsed();
        assert!(ok, "edit {i} not applied; log:\n{}", f.logs());
        assert!(took < Duration::from_secs(1), "edit {i} took {took:?}");
    }
    // A new file and a removed file.
    let started = Instant::now();
    m.write(
        "second.yaml",
        &Ing::new("demo", "second", T0)
            .rule("second.test", &[("/", "Prefix", "echo")])
            .yaml(),
    );
    let ok = wait_until(Duration::from_secs(3), || async {
        f.get("second.test", "/").await.0 == 200
    })
    .await;
    assert!(ok && started.elapsed() < Duration::from_secs(1));
    let started = Instant::now();
    m.remove("second.yaml");
    let ok = wait_until(Duration::from_secs(3), || async {
        f.get("second.test", "/").await.0 == 404
    })
    .await;
    assert!(ok && started.elapsed() < Duration::from_secs(1));
}

/// An `nginx` wrapper that waits while `gate` exists, so a test can observe the
/// controller before its first configuration is applied.
fn gated_nginx(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let gate = dir.join("gate");
    std::fs::write(&gate, "").unwrap();
    let prelude = format!("while [ -e '{}' ]; do sleep 0.02; done", gate.display());
    (nginx_wrapper(dir, "nginx-gated", &prelude), gate)
}

/// An executable `dir/name` that runs `prelude`, then the real `nginx`.
fn nginx_wrapper(dir: &std::path::Path, name: &str, prelude: &str) -> std::path::PathBuf {
    let script = dir.join(name);
    std::fs::write(
        &script,
        format!("#!/bin/sh\n{prelude}\nexec nginx \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// An `nginx` wrapper whose `nginx -t` touches `waiting`, then waits while `gate`
/// exists (created by the test when it wants a slow test).
fn slow_test_nginx(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (gate, waiting) = (dir.join("gate"), dir.join("waiting"));
    let prelude = format!(
        "case \" $* \" in *\" -t \"*) touch '{w}'; while [ -e '{g}' ]; do sleep 0.02; done;; esac",
        w = waiting.display(),
        g = gate.display()
    );
    (
        nginx_wrapper(dir, "nginx-slow-test", &prelude),
        gate,
        waiting,
    )
}

// Issue 4: an endpoint change that arrives during a slow `nginx -t` is applied at
// once; the reload that follows neither brings the older endpoints back (its model
// was built before the change) nor is followed by a second reload for them.
#[tokio::test]
async fn endpoints_changed_during_a_slow_nginx_t_apply_at_once_and_stay() {
    let a = Echo::start("127.0.0.2").await;
    let b = Echo::start_on("127.0.0.3", a.addr.port()).await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    let tools = tempfile::tempdir().unwrap();
    let (nginx, gate, waiting) = slow_test_nginx(tools.path());
    let f = Ferrule::start(m.path(), &["--nginx-binary", nginx.to_str().unwrap()]).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    let before = reloads(&f).await;

    std::fs::write(&gate, "").unwrap();
    // `/new` goes to a Service that does not exist: 503 once reloaded (`/` answers
    // it until then).
    m.write(
        "ing.yaml",
        &web(&[("/", "Prefix", "echo"), ("/new", "Exact", "none")]),
    );
    let testing = wait_until(Duration::from_secs(5), || async { waiting.exists() }).await;
    assert!(testing, "nginx -t started; log:\n{}", f.logs());
    m.write("svc.yaml", &service("demo", "echo", &[b.addr]));
    let moved = wait_until(Duration::from_secs(3), || async {
        f.backend("web.test", "/").await == (200, b.addr.to_string())
    })
    .await;
    assert!(moved, "applied while nginx -t runs; log:\n{}", f.logs());
    assert_eq!(
        f.get("web.test", "/new").await.0,
        200,
        "the reload is still pending"
    );

    // The test finishes: every request from now on goes to the new endpoint.
    std::fs::remove_file(&gate).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut settled: Option<Instant> = None;
    while settled.is_none_or(|t| t.elapsed() < Duration::from_millis(500)) {
        assert!(
            Instant::now() < deadline,
            "reload not applied; log:\n{}",
            f.logs()
        );
        assert_eq!(
            f.backend("web.test", "/").await,
            (200, b.addr.to_string()),
            "log:\n{}",
            f.logs()
        );
        if settled.is_none() && f.get("web.test", "/new").await.0 == 503 {
            settled = Some(Instant::now());
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        reloads(&f).await - before,
        1.0,
        "one reload; log:\n{}",
        f.logs()
    );
}

#[tokio::test]
async fn status_port_health_readiness_and_metrics() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    m.write(
        "bad.yaml",
        &Ing::new("demo", "bad", T0)
            .nginx("limit-rps", "lots")
            .rule("bad.test", &[("/", "Prefix", "echo")])
            .yaml(),
    );
    let tools = tempfile::tempdir().unwrap();
    let (nginx, gate) = gated_nginx(tools.path());
    let f = Ferrule::spawn(m.path(), &["--nginx-binary", nginx.to_str().unwrap()]);

    // Alive at once; not ready while the first configuration is not applied.
    let healthy = wait_until(Duration::from_secs(10), || async {
        f.get_status("/healthz").await.0 == 200
    })
    .await;
    assert!(healthy, "healthz; log:\n{}", f.logs());
    for _ in 0..10 {
        assert_eq!(f.get_status("/readyz").await.0, 503);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::remove_file(&gate).unwrap();
    f.wait_ready(Duration::from_secs(20)).await;
    assert_eq!(f.get("web.test", "/").await.0, 200);

    let (s, text) = f.get_status("/metrics").await;
    assert_eq!(s, 200);
    // Every series carries the controller's labels first (ingress-nginx's).
    let id = "{controller_namespace=";
    let needles = [
        "ferrule_reload_duration_seconds_bucket{".to_owned(),
        format!("ferrule_reload_duration_seconds_count{id}"),
        "ferrule_sync_duration_seconds_bucket{".to_owned(),
        format!("ferrule_sync_duration_seconds_count{id}"),
        format!("ferrule_model_passes_total{id}"),
        ",state=\"applied\"} ".to_owned(),
        ",state=\"rejected\"} ".to_owned(),
        format!("ferrule_reload_verify_failures_total{id}"),
        format!("ferrule_nginx_restarts_total{id}"),
    ];
    for needle in &needles {
        assert!(text.contains(needle), "/metrics lacks {needle:?}:\n{text}");
    }
    assert!(f.metric("ferrule_reload_duration_seconds_count", "").await >= 1.0);
    assert!(f.metric("ferrule_sync_duration_seconds_count", "").await >= 1.0);
    assert_eq!(
        f.metric("ferrule_resources", "state=\"applied\"").await,
        1.0
    );
    assert_eq!(
        f.metric("ferrule_resources", "state=\"rejected\"").await,
        1.0
    );

    // A reload is counted by result.
    m.write("ing.yaml", &web(&[("/x", "Prefix", "echo")]));
    let counted = wait_until(Duration::from_secs(5), || async {
        reloads(&f).await >= 1.0
    })
    .await;
    assert!(
        counted,
        "reloads by result:\n{}",
        f.get_status("/metrics").await.1
    );
    let bad = f.resource("Ingress", "demo", "bad").await.expect("listed");
    assert_eq!(bad["state"], "rejected");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("limit-rps"),
        "{bad}"
    );
}

/// Every request until `/readyz` answers 200 is served by `backend` (or refused with
/// 503 by nobody: the proxy port must never fail while the controller restarts).
async fn served_by_until_ready(f: &Ferrule, backend: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut requests = 0;
    loop {
        assert_eq!(
            f.backend("web.test", "/").await,
            (200, backend.to_owned()),
            "request {requests} while the controller restarts; log:\n{}",
            f.logs()
        );
        requests += 1;
        if f.get_status("/readyz").await.0 == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready again within {timeout:?}; log:\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(requests > 0);
}

#[tokio::test]
async fn a_restarted_controller_adopts_its_nginx_without_a_reload() {
    adoption_without_a_reload(&["127.0.0.2", "127.0.0.3"], &[]).await;
}

/// The adoption test above with the balancer chosen by `args` (also run for njs).
pub async fn adoption_without_a_reload(ips: &[&str; 2], args: &[&str]) {
    let (a, m, mut f) = echo_web(ips[0], args).await;
    let b = Echo::start_on(ips[1], a.addr.port()).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();
    assert_eq!(workers.len(), 2, "two workers: {workers:?}");
    let token = f.api_token();

    // The controller dies (SIGKILL: no cleanup); its NGINX keeps serving.
    f.kill_controller();
    assert!(alive(master), "NGINX master died with the controller");
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));

    f.restart_controller();
    served_by_until_ready(&f, &a.addr.to_string(), Duration::from_secs(20)).await;
    assert_eq!(f.master_pid(), Some(master), "the same master");
    assert_eq!(f.worker_pids(), workers, "the same workers: no reload");
    assert_eq!(reloads(&f).await, 0.0, "no reload counted");
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 0.0);
    assert_eq!(f.api_token(), token, "the token NGINX loaded is kept");
    assert!(
        f.logs().contains("adopted the running NGINX master"),
        "log:\n{}",
        f.logs()
    );

    // The balancer accepts the new controller: endpoint changes reach traffic, still
    // without a reload.
    m.write("svc.yaml", &service("demo", "echo", &[b.addr]));
    let moved = wait_until(Duration::from_secs(3), || async {
        f.backend("web.test", "/").await == (200, b.addr.to_string())
    })
    .await;
    assert!(moved, "traffic follows the endpoints; log:\n{}", f.logs());
    for _ in 0..10 {
        assert_eq!(f.backend("web.test", "/").await, (200, b.addr.to_string()));
    }
    assert_eq!(f.worker_pids(), workers, "the same workers");
    assert_eq!(reloads(&f).await, 0.0);

    // Endpoints changed while no controller ran need no reload either: the version
    // NGINX answers with names its files, which hold no endpoints.
    f.kill_controller();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    f.restart_controller();
    f.wait_ready(Duration::from_secs(20)).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    assert_eq!(
        f.worker_pids(),
        workers,
        "the same workers after the second adoption"
    );
    assert_eq!(reloads(&f).await, 0.0);

    // A configuration change reloads the adopted master (not a restart).
    m.write("ing.yaml", &web(&[("/only", "Prefix", "echo")]));
    let applied = wait_until(Duration::from_secs(5), || async {
        f.get("web.test", "/").await.0 == 404 && f.get("web.test", "/only").await.0 == 200
    })
    .await;
    assert!(applied, "change applied; log:\n{}", f.logs());
    assert_eq!(f.master_pid(), Some(master), "reloaded, not restarted");
    let counted = wait_until(Duration::from_secs(5), || async {
        reloads(&f).await == 1.0
    })
    .await;
    assert!(counted, "one reload, got {}", reloads(&f).await);

    // SIGTERM still drains and stops the adopted NGINX.
    let status = f.stop();
    assert!(status.success(), "exit {status:?}; log:\n{}", f.logs());
    assert!(!alive(master), "adopted NGINX master still running");
    let gone = wait_until(Duration::from_secs(5), || async {
        f.worker_pids().is_empty() && workers.iter().all(|w| !alive(*w))
    })
    .await;
    assert!(gone, "NGINX workers still running");
}

#[tokio::test]
async fn a_stale_pid_file_is_not_adopted() {
    let (a, _m, mut f) = echo_web("127.0.0.2", &[]).await;
    let master = f.master_pid().expect("pid file");

    // Controller and NGINX both gone; the pid file now names another program.
    f.kill_controller();
    let group = std::process::Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{master}")])
        .status()
        .unwrap();
    assert!(group.success());
    let dead = wait_until(Duration::from_secs(5), || async { !alive(master) }).await;
    assert!(dead);
    let mut other = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid_file = f.prefix.path().join("nginx/run/nginx.pid");
    std::fs::write(&pid_file, format!("{}\n", other.id())).unwrap();

    f.restart_controller();
    f.wait_ready(Duration::from_secs(20)).await;
    let fresh = f.master_pid().expect("pid file");
    assert!(
        fresh != master && fresh != other.id() && alive(fresh),
        "a new master: {master} → {fresh}"
    );
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    assert!(
        matches!(other.try_wait(), Ok(None)),
        "the program named by the stale pid file was signalled"
    );
    let _ = other.kill();
    let _ = other.wait();
}

#[tokio::test]
async fn a_controller_restarted_on_changed_manifests_reloads_the_adopted_nginx() {
    let (_a, m, mut f) = echo_web("127.0.0.2", &[]).await;
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();

    // Changed while no controller runs: the files on disk are out of date.
    f.kill_controller();
    m.write("ing.yaml", &web(&[("/new", "Prefix", "echo")]));
    f.restart_controller();
    f.wait_ready(Duration::from_secs(20)).await;
    f.old_workers_gone().await;
    assert_eq!(f.get("web.test", "/new").await.0, 200, "log:\n{}", f.logs());
    assert_eq!(f.get("web.test", "/").await.0, 404);
    assert_eq!(f.master_pid(), Some(master), "reloaded, not restarted");
    assert_eq!(reloads(&f).await, 1.0, "one reload");
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 0.0);
    let replaced = wait_until(Duration::from_secs(10), || async {
        let now = f.worker_pids();
        now.len() == 2 && now.iter().all(|p| !workers.contains(p))
    })
    .await;
    assert!(replaced, "workers {workers:?} → {:?}", f.worker_pids());
}

// What was deleted while no controller ran leaves the adopted balancer's store: the
// backend of a deleted Service, and the certificate of a host that lost TLS (else plain
// HTTP to it would still be redirected to HTTPS).
#[tokio::test]
async fn an_adopted_store_forgets_what_was_deleted_while_no_controller_ran() {
    let a = Echo::start("127.0.0.2").await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "web", &["web.test"]);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("gone.yaml", &service("demo", "gone", &[a.addr]));
    m.write("secret.yaml", &tls_secret("demo", "web-tls", &cert, &key));
    m.write(
        "ing.yaml",
        &Ing::new("demo", "web", T0)
            .rule(
                "web.test",
                &[("/", "Prefix", "echo"), ("/gone", "Prefix", "gone")],
            )
            .tls(&["web.test"], "web-tls")
            .yaml(),
    );
    let mut f = Ferrule::start(m.path(), &[]).await;
    let master = f.master_pid().expect("pid file");
    let gone = "demo_gone_80";
    assert!(!f.balancer_backend(gone).await.is_null(), "{gone} posted");
    assert_eq!(
        f.get("web.test", "/").await.0,
        308,
        "a TLS host redirects HTTP"
    );

    f.kill_controller();
    m.remove("gone.yaml");
    m.remove("secret.yaml");
    m.write("ing.yaml", &web(&[("/", "Prefix", "echo")]));
    f.restart_controller();
    f.wait_ready(Duration::from_secs(20)).await;
    assert_eq!(f.master_pid(), Some(master), "adopted");
    assert!(
        f.balancer_backend(gone).await.is_null(),
        "the deleted Service's backend is still in the store"
    );
    assert_eq!(
        f.get("web.test", "/").await.0,
        200,
        "TLS removed: plain HTTP is served, not redirected"
    );
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
}

#[tokio::test]
async fn an_unresponsive_nginx_is_replaced_not_adopted() {
    let (a, _m, mut f) = echo_web("127.0.0.2", &[]).await;
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();

    // The controller dies and its NGINX hangs: stopped workers answer nothing, but
    // still hold the listening sockets.
    f.kill_controller();
    for w in &workers {
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &w.to_string()])
            .status()
            .unwrap();
        assert!(stopped.success());
    }
    f.restart_controller();
    f.wait_ready(Duration::from_secs(30)).await;
    let fresh = f.master_pid().expect("pid file");
    assert_ne!(fresh, master, "a new master");
    let gone = wait_until(Duration::from_secs(5), || async {
        !alive(master) && workers.iter().all(|w| !alive(*w))
    })
    .await;
    assert!(gone, "the hung NGINX was not stopped; log:\n{}", f.logs());
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
}

// A first start does not run `nginx -t` before NGINX parses the same files as it starts
// (twice the parse time at 10k hosts); later changes are tested before the reload.
#[tokio::test]
async fn a_clean_start_parses_the_configuration_once() {
    let (a, m, f) = echo_web("127.0.0.2", &[]).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    assert_eq!(f.metric("ferrule_config_tests_total", "").await, 0.0);
    m.write(
        "ing.yaml",
        &web(&[("/", "Prefix", "echo"), ("/new", "Prefix", "echo")]),
    );
    let reloaded = wait_until(Duration::from_secs(5), || async {
        f.reloads().await >= 1.0
    })
    .await;
    assert!(reloaded, "log:\n{}", f.logs());
    assert_eq!(f.metric("ferrule_config_tests_total", "").await, 1.0);
}

/// A fast-path module that this NGINX does not load (built for another NGINX, or
/// broken) costs speed, not service: Ferrule runs on the Lua balancer alone and
/// says why.
#[tokio::test]
async fn a_fast_path_module_nginx_cannot_load_leaves_lua_serving() {
    let modules = tempfile::tempdir().unwrap();
    for m in ["ndk_http_module.so", "ngx_http_lua_module.so"] {
        std::os::unix::fs::symlink(
            std::path::Path::new("/usr/lib/nginx/modules").join(m),
            modules.path().join(m),
        )
        .unwrap();
    }
    std::fs::write(
        modules.path().join("ngx_http_ferrule_module.so"),
        "not a module",
    )
    .unwrap();
    let dir = modules.path().to_str().unwrap();
    let (a, _m, f) = echo_web("127.0.0.2", &["--balancer", "lua", "--nginx-modules", dir]).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    assert_eq!(f.fast_path("demo_echo_80").await, serde_json::Value::Null);
    assert!(
        f.logs().contains("no C fast path"),
        "the reason is logged:\n{}",
        f.logs()
    );
}
