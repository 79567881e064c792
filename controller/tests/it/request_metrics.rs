//! Per-request metrics (issue 20): NGINX counts in shared memory (the C module's
//! log phase, or a Lua log phase without it), the controller exports on `/metrics`
//! with ingress-nginx's names and labels. Counts are exact, and neither an
//! endpoint change nor a reload resets them. With njs, the C module counts and
//! serves the dump itself (`ferrule_metrics_dump`), behind njs's token check.

use std::time::Duration;

use crate::dynamic::{CREATED, fresh_client};
use crate::support::*;

/// `nginx_ingress_controller_requests` of one Ingress and status, summed over the
/// other labels.
async fn requests(f: &Ferrule, ingress: &str, status: &str) -> f64 {
    let (_, text) = f.get_status("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with("nginx_ingress_controller_requests{"))
        .filter(|l| {
            l.contains(&format!("ingress=\"{ingress}\""))
                && l.contains(&format!("status=\"{status}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the counter reads `want` (the Lua source flushes every second);
/// fails with the metrics when it does not.
async fn expect_requests(f: &Ferrule, ingress: &str, status: &str, want: usize) {
    let ok = wait_until(Duration::from_secs(10), || async {
        requests(f, ingress, status).await == want as f64
    })
    .await;
    let (_, text) = f.get_status("/metrics").await;
    assert!(
        ok,
        "{ingress} {status}: {} requests counted, {want} sent:\n{}",
        requests(f, ingress, status).await,
        text.lines()
            .filter(|l| l.starts_with("nginx_ingress_controller_requests")
                || l.starts_with("ferrule_request"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `n` GETs to `host` + `path` (new connections, so both workers take some),
/// with `headers`; returns how many answered each status.
async fn send(
    f: &Ferrule,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    n: usize,
) -> std::collections::BTreeMap<u16, usize> {
    let c = fresh_client();
    let mut out = std::collections::BTreeMap::new();
    for _ in 0..n {
        let mut req = c
            .get(format!("http://127.0.0.1:{}{path}", f.http))
            .header("Host", host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let status = req.send().await.expect("proxied request").status().as_u16();
        *out.entry(status).or_default() += 1;
    }
    out
}

/// `promtool check metrics` on the whole of `/metrics`: no problem reported.
pub(crate) async fn promtool_check(f: &Ferrule) {
    let (_, text) = f.get_status("/metrics").await;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package: make deps)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics: {report}\n{text}"
    );
}

/// `args`: the balancer and its flags.
async fn exact_counts_survive_endpoint_changes_and_reloads(args: &[&str], source: &str) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc-a.yaml", &service("demo", "svc-a", &[echo.addr]));
    m.write("svc-b.yaml", &service("demo", "svc-b", &[echo.addr]));
    m.write(
        "ing-a.yaml",
        &ingress(
            "demo",
            "a",
            CREATED,
            "a.test",
            &[("/", "Prefix", "svc-a")],
            &[],
        ),
    );
    m.write(
        "ing-b.yaml",
        &ingress(
            "demo",
            "b",
            CREATED,
            "b.test",
            &[("/b", "Prefix", "svc-b")],
            &[],
        ),
    );
    let f = Ferrule::start(m.path(), args).await;
    let (_, text) = f.get_status("/metrics").await;
    assert!(
        text.contains(&format!(
            "ferrule_request_metrics_up{{source=\"{source}\"}} 1"
        )),
        "metrics read from the {source} source:\n{text}"
    );

    // N requests to A answered 200, M to B answered 404 by its backend.
    let (n, m404) = (30, 12);
    assert_eq!(send(&f, "a.test", "/", &[], n).await[&200], n);
    assert_eq!(
        send(&f, "b.test", "/b/x", &[("x-echo-status", "404")], m404).await[&404],
        m404
    );
    expect_requests(&f, "a", "200", n).await;
    expect_requests(&f, "b", "404", m404).await;

    // Labels as ingress-nginx's.
    let (_, text) = f.get_status("/metrics").await;
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("nginx_ingress_controller_requests{") && l.contains("ingress=\"a\"")
        })
        .unwrap();
    for want in [
        "canary=\"\"",
        "controller_class=\"ferrule.dev/ingress-controller\"",
        "host=\"a.test\"",
        "method=\"GET\"",
        "namespace=\"demo\"",
        "path=\"/\"",
        "service=\"svc-a\"",
        "status=\"200\"",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
    for h in [
        "request_duration_seconds",
        "response_duration_seconds",
        "connect_duration_seconds",
        "header_duration_seconds",
        "request_size",
        "response_size",
        "bytes_sent",
    ] {
        let count = f
            .metric(
                &format!("nginx_ingress_controller_{h}_count"),
                "ingress=\"a\"",
            )
            .await;
        assert_eq!(count, n as f64, "{h}_count of a:\n{text}");
    }
    promtool_check(&f).await;

    // An endpoint change (no reload): B has no endpoint left and answers 503; the
    // counts go on.
    let reloads = f.reloads().await;
    m.write(
        "svc-b.yaml",
        &service_endpoints("demo", "svc-b", echo.addr.port(), &[("127.0.0.2", false)]),
    );
    wait_store(&f, "demo_svc-b_80", |b| endpoint_count(b) == 0).await;
    let m503 = 9;
    assert_eq!(send(&f, "b.test", "/b", &[], m503).await[&503], m503);
    expect_requests(&f, "b", "503", m503).await;
    expect_requests(&f, "b", "404", m404).await;
    expect_requests(&f, "a", "200", n).await;
    assert_eq!(
        f.reloads().await,
        reloads,
        "an endpoint change does not reload"
    );

    // A reload (a new host): nothing is reset.
    m.write(
        "ing-c.yaml",
        &ingress(
            "demo",
            "c",
            CREATED,
            "c.test",
            &[("/", "Prefix", "svc-a")],
            &[],
        ),
    );
    let reloaded = wait_until(Duration::from_secs(20), || async {
        f.reloads().await > reloads && f.backend("c.test", "/").await.0 == 200
    })
    .await;
    assert!(reloaded, "the new host reloads NGINX:\n{}", f.logs());
    let n2 = 10;
    assert_eq!(send(&f, "a.test", "/", &[], n2).await[&200], n2);
    expect_requests(&f, "a", "200", n + n2).await;
    expect_requests(&f, "b", "404", m404).await;
    expect_requests(&f, "b", "503", m503).await;
    // (c.test was asked once above, maybe more while the reload came)
    assert!(requests(&f, "c", "200").await >= 1.0);
    promtool_check(&f).await;

    // Requests with a body (Lua: they enter the `if` block of the rewrite phase).
    let posts = 4;
    for _ in 0..posts {
        let r = fresh_client()
            .post(format!("http://127.0.0.1:{}/", f.http))
            .header("Host", "a.test")
            .body("payload")
            .send()
            .await
            .expect("proxied POST");
        assert_eq!(r.status().as_u16(), 200);
    }
    let ok = wait_until(Duration::from_secs(10), || async {
        f.metric(
            "nginx_ingress_controller_requests",
            "ingress=\"a\",method=\"POST\"",
        )
        .await
            == posts as f64
    })
    .await;
    assert!(
        ok,
        "{posts} POSTs to a counted:\n{}",
        f.get_status("/metrics").await.1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c_module_counts_exactly_across_endpoint_changes_and_reloads() {
    exact_counts_survive_endpoint_changes_and_reloads(LUA_ONLY, "module").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lua_counts_exactly_across_endpoint_changes_and_reloads() {
    exact_counts_survive_endpoint_changes_and_reloads(
        &[LUA_ONLY, &["--no-fast-path"]].concat(),
        "lua",
    )
    .await;
}

/// A Ferrule started with `args` serving `a.test` (Ingress `demo/a` to Service
/// `svc-a`), with the echo it proxies to.
async fn serving_a(args: &[&str]) -> (Ferrule, Echo) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc-a.yaml", &service("demo", "svc-a", &[echo.addr]));
    m.write(
        "ing-a.yaml",
        &ingress(
            "demo",
            "a",
            CREATED,
            "a.test",
            &[("/", "Prefix", "svc-a")],
            &[],
        ),
    );
    (Ferrule::start(m.path(), args).await, echo)
}

/// [`serving_a`], after three requests that it counted nowhere (`source="none"`,
/// no request metric).
async fn counting_nothing(args: &[&str]) -> (Ferrule, Echo) {
    let (f, echo) = serving_a(args).await;
    assert_eq!(send(&f, "a.test", "/", &[], 3).await[&200], 3);
    let (_, text) = f.get_status("/metrics").await;
    assert!(
        text.contains("ferrule_request_metrics_up{source=\"none\"} 0"),
        "{text}"
    );
    assert!(
        !text.contains("nginx_ingress_controller_requests"),
        "{text}"
    );
    (f, echo)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_off_collects_nothing() {
    let (f, _echo) = counting_nothing(&["--enable-metrics=false"]).await;
    let conf = std::fs::read_to_string(f.prefix.path().join("nginx/conf/servers/host_a.test.conf"))
        .unwrap();
    assert!(
        !conf.contains("ferrule_metrics") && !conf.contains("ferrule.metrics"),
        "{conf}"
    );
}

/// A request sent to a canary names its backend in `canary` (ingress-nginx: the
/// alternative upstream), counted under the primary Ingress's labels.
/// `args`: the balancer and its flags.
async fn canary_label(args: &[&str]) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc-a.yaml", &service("demo", "svc-a", &[echo.addr]));
    m.write("svc-c.yaml", &service("demo", "svc-c", &[echo.addr]));
    m.write(
        "ing-a.yaml",
        &ingress(
            "demo",
            "a",
            CREATED,
            "a.test",
            &[("/", "Prefix", "svc-a")],
            &[],
        ),
    );
    m.write(
        "ing-c.yaml",
        &ingress(
            "demo",
            "a-canary",
            crate::dynamic::CANARY_CREATED,
            "a.test",
            &[("/", "Prefix", "svc-c")],
            &[("canary", "true"), ("canary-by-header", "x-canary")],
        ),
    );
    let f = Ferrule::start(m.path(), args).await;
    wait_store(&f, "demo_svc-a_80", |b| !b["canary"].is_null()).await;
    assert_eq!(
        send(&f, "a.test", "/", &[("x-canary", "always")], 5).await[&200],
        5
    );
    assert_eq!(send(&f, "a.test", "/", &[], 3).await[&200], 3);
    let counted = |canary: &'static str| {
        let f = &f;
        async move {
            f.metric(
                "nginx_ingress_controller_requests",
                &format!("canary=\"{canary}\""),
            )
            .await
        }
    };
    let ok = wait_until(Duration::from_secs(10), || async {
        counted("demo_svc-c_80").await == 5.0 && counted("").await == 3.0
    })
    .await;
    let (_, text) = f.get_status("/metrics").await;
    assert!(ok, "5 to the canary, 3 to the primary:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("nginx_ingress_controller_requests{")
                && l.contains("canary=\"demo_svc-c_80\"")
                && l.contains("ingress=\"a\"")
                && l.contains("service=\"svc-a\"")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c_module_names_the_canary() {
    canary_label(LUA_ONLY).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lua_names_the_canary() {
    canary_label(&[LUA_ONLY, &["--no-fast-path"]].concat()).await;
}

const NJS: &[&str] = &["--balancer", "njs"];

#[tokio::test(flavor = "multi_thread")]
async fn njs_c_module_counts_exactly_across_endpoint_changes_and_reloads() {
    exact_counts_survive_endpoint_changes_and_reloads(NJS, "module").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn njs_c_module_names_the_canary() {
    canary_label(NJS).await;
}

/// Without the module, njs counts nothing, and says so.
#[tokio::test(flavor = "multi_thread")]
async fn njs_without_the_module_collects_nothing() {
    let (f, _echo) = counting_nothing(&[NJS, &["--no-fast-path"]].concat()).await;
    let token = f.api_token();
    let (status, _) = f
        .api("GET", "/configuration/metrics", Some(&token), None)
        .await;
    assert_eq!(status, 404, "no dump without the module");
}

/// The dump on the njs API is the API's: no token or a wrong one is refused
/// before the C module writes anything; only GET (and HEAD) read it.
#[tokio::test(flavor = "multi_thread")]
async fn njs_metrics_dump_needs_the_api_token() {
    let (f, _echo) = serving_a(NJS).await;
    assert_eq!(send(&f, "a.test", "/", &[], 2).await[&200], 2);
    let token = f.api_token();
    let wrong = format!("{}x", &token[..token.len() - 1]);
    for (who, t) in [("no token", None), ("a wrong token", Some(wrong.as_str()))] {
        let (status, body) = f.api("GET", "/configuration/metrics", t, None).await;
        assert!(status == 401 || status == 403, "{who}: {status} {body}");
        assert!(!body.contains("ferrule-metrics"), "{who}: {body}");
    }
    let (status, body) = f
        .api("GET", "/configuration/metrics", Some(&token), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ferrule-metrics 1\n"), "{body}");
    assert!(
        body.contains("demo\ta\tsvc-a\t/\ta.test\t\tGET\t200\t"),
        "{body}"
    );
    let (status, body) = f
        .api("POST", "/configuration/metrics", Some(&token), Some("{}"))
        .await;
    assert_eq!(status, 405, "{body}");
    let (status, _) = f
        .api("POST", "/configuration/metrics", None, Some("{}"))
        .await;
    assert!(status == 401 || status == 403, "{status}");
}

/// Series of `ingress` in `/metrics`: (method, status, requests).
async fn series(f: &Ferrule, ingress: &str) -> Vec<(String, String, f64)> {
    let (_, text) = f.get_status("/metrics").await;
    let label = |l: &str, name: &str| -> String {
        let start = format!("{name}=\"");
        l.split_once(&start)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(v, _)| v.to_owned())
            .unwrap_or_default()
    };
    text.lines()
        .filter(|l| l.starts_with("nginx_ingress_controller_requests{"))
        .filter(|l| l.contains(&format!("ingress=\"{ingress}\"")))
        .map(|l| {
            (
                label(l, "method"),
                label(l, "status"),
                l.rsplit(' ').next().unwrap().parse::<f64>().unwrap(),
            )
        })
        .collect()
}

/// The requests of [`series`].
fn total(series: &[(String, String, f64)]) -> f64 {
    series.iter().fold(0.0, |t, s| t + s.2)
}

/// Issue N7: one location whose backend answers whatever status it is asked for
/// (every one from 200 to 999, with several methods) takes a bounded share of a
/// small store (1 MiB): its requests are all counted, in folded statuses and an
/// overflow series, and another Ingress's new series are still counted exactly.
/// Before, each status was a series of its own, the hostile location filled the
/// store, and the other Ingress's requests were dropped.
#[tokio::test(flavor = "multi_thread")]
async fn c_module_one_location_cannot_crowd_out_the_others() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "svc", &[echo.addr]));
    for (name, host) in [("hostile", "hostile.test"), ("victim", "victim.test")] {
        m.write(
            &format!("{name}.yaml"),
            &ingress("demo", name, CREATED, host, &[("/", "Prefix", "svc")], &[]),
        );
    }
    let f = Ferrule::start(
        m.path(),
        &[LUA_ONLY, &["--metrics-store-size", "1"]].concat(),
    )
    .await;

    // The hostile location: every status from 200 to 999, then a few of them with
    // other methods (keep-alive: one connection, quick).
    let c = client();
    let mut hostile = 0usize;
    let mut ask = |method: &'static str, status: u16| {
        hostile += 1;
        c.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("http://127.0.0.1:{}/", f.http),
        )
        .header("Host", "hostile.test")
        .header("x-echo-status", status.to_string())
        .send()
    };
    for status in 200..=999u16 {
        let r = ask("GET", status).await.expect("hostile request");
        assert_eq!(r.status().as_u16(), status);
    }
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        for status in [200u16, 201, 404, 418, 503, 599, 777] {
            ask(method, status).await.expect("hostile request");
        }
    }

    // The victim's new series, after the flood: counted exactly.
    let victim = [
        ("GET", 200u16, 5usize),
        ("GET", 404, 4),
        ("POST", 503, 3),
        ("PUT", 201, 3),
    ];
    for (method, status, n) in victim {
        for _ in 0..n {
            let r = c
                .request(
                    reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                    format!("http://127.0.0.1:{}/", f.http),
                )
                .header("Host", "victim.test")
                .header("x-echo-status", status.to_string())
                .send()
                .await
                .expect("victim request");
            assert_eq!(r.status().as_u16(), status);
        }
    }
    let sent: usize = victim.iter().map(|v| v.2).sum();
    let counted = wait_until(Duration::from_secs(10), || async {
        total(&series(&f, "victim").await) == sent as f64
    })
    .await;
    let got = series(&f, "victim").await;
    let dropped = f.metric("ferrule_request_metrics_dropped_total", "").await;
    assert!(
        counted,
        "victim: {} of {sent} requests counted, {dropped} dropped: {got:?}",
        total(&got)
    );
    for (method, status, n) in victim {
        let s = got
            .iter()
            .find(|s| s.0 == method && s.1 == status.to_string())
            .unwrap_or_else(|| panic!("{method} {status} in {got:?}"));
        assert_eq!(s.2, n as f64, "{method} {status}: {got:?}");
    }
    assert_eq!(dropped, 0.0, "nothing dropped");

    // The hostile location's requests are all counted too, in a bounded number of
    // series (its budget, then one per status class), in statuses the dashboards
    // read: registered codes kept, any other folded to its class.
    let h = series(&f, "hostile").await;
    assert_eq!(
        total(&h),
        hostile as f64,
        "every hostile request counted: {h:?}"
    );
    assert!(h.len() <= 16 + 7, "{} hostile series: {h:?}", h.len());
    for (_, status, _) in &h {
        let known = status.parse::<u16>().is_ok_and(|s| s < 600);
        let class = ["1xx", "2xx", "3xx", "4xx", "5xx", "xxx"].contains(&status.as_str());
        assert!(known || class, "status {status:?} in {h:?}");
    }
    assert!(!h.iter().any(|s| s.1 == "777"), "{h:?}");
    promtool_check(&f).await;
}

/// Issue N7: the entries of a location that left the configuration are freed
/// once the old workers are gone (they never were: a store shared by Ingresses
/// that come and go filled up), while those of the locations that stay keep
/// their counts across the reload.
#[tokio::test(flavor = "multi_thread")]
async fn c_module_frees_the_series_of_a_location_that_left() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "svc", &[echo.addr]));
    for (name, host) in [("gone", "gone.test"), ("stays", "stays.test")] {
        m.write(
            &format!("{name}.yaml"),
            &ingress("demo", name, CREATED, host, &[("/", "Prefix", "svc")], &[]),
        );
    }
    let f = Ferrule::start(
        m.path(),
        &[LUA_ONLY, &["--metrics-store-size", "1"]].concat(),
    )
    .await;
    for status in [200, 201, 404, 500, 503] {
        let n = send(
            &f,
            "gone.test",
            "/",
            &[("x-echo-status", &status.to_string())],
            2,
        )
        .await;
        assert_eq!(n[&status], 2);
    }
    assert_eq!(send(&f, "stays.test", "/", &[], 7).await[&200], 7);
    expect_requests(&f, "gone", "503", 2).await;
    expect_requests(&f, "stays", "200", 7).await;

    let reloads = f.reloads().await;
    m.remove("gone.yaml");
    let gone = wait_until(Duration::from_secs(20), || async {
        f.reloads().await > reloads && series(&f, "gone").await.is_empty()
    })
    .await;
    assert!(
        gone,
        "series of the removed Ingress: {:?}",
        series(&f, "gone").await
    );
    expect_requests(&f, "stays", "200", 7).await;
    assert_eq!(send(&f, "stays.test", "/", &[], 3).await[&200], 3);
    expect_requests(&f, "stays", "200", 10).await;
}
