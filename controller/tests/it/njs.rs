//! `ferrule run --balancer njs`: the njs balancer (njs/) driven by the real binary.
//! Routing and the per-location features that need no Lua, endpoint and certificate
//! changes without a reload, 503 without endpoints, header canaries, and the
//! isolation of the configuration API, all observed through real HTTP and TLS.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-02T00:00:00Z";
const NJS: &[&str] = &["--balancer", "njs"];

/// A GET through the HTTP port with extra headers: (status, headers, echo JSON).
async fn get_with(
    f: &Ferrule,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = client()
        .get(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.expect("proxied request");
    let status = r.status().as_u16();
    let h = r.headers().clone();
    (status, h, r.json().await.unwrap_or(Value::Null))
}

/// A POST of `n` bytes through the HTTP port: the status.
async fn post_bytes(f: &Ferrule, host: &str, n: usize) -> u16 {
    client()
        .post(format!("http://127.0.0.1:{}/up", f.http))
        .header("Host", host)
        .body(vec![b'x'; n])
        .send()
        .await
        .expect("proxied POST")
        .status()
        .as_u16()
}

/// Waits until `f.backend(host, path)` answers `want` (status, backend address).
async fn wait_backend(f: &Ferrule, host: &str, path: &str, want: (u16, &str), what: &str) {
    let ok = wait_until(Duration::from_secs(10), || async {
        let (s, b) = f.backend(host, path).await;
        (s, b.as_str()) == want
    })
    .await;
    assert!(
        ok,
        "{what}: {host}{path} never answered {want:?} (last {:?}); log:\n{}",
        f.backend(host, path).await,
        f.logs()
    );
}

// Multi-threaded: openssl and curl run as child processes while the echo backends
// must keep answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_routes_with_location_features_and_applies_changes_without_reload() {
    let ips = ["127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34"];
    let echos = echo_group(&ips).await;
    let port = echos[0].addr.port();
    let addr = |i: usize| echos[i].addr.to_string();
    let certs = tempfile::tempdir().unwrap();
    let (cert_a, key_a, fp_a) = self_signed(certs.path(), "a", &["secure.test"]);
    let (cert_b, key_b, fp_b) = self_signed(certs.path(), "b", &["secure.test"]);
    assert!(!fp_a.is_empty() && fp_a != fp_b);

    let services = |app: &str, empty: &[(&str, bool)]| {
        [
            service_endpoints("demo", "app", port, &[(app, true)]),
            service_endpoints("demo", "api", port, &[(ips[1], true)]),
            service_endpoints("demo", "empty", port, empty),
            service_endpoints("demo", "main", port, &[(ips[0], true)]),
            service_endpoints("demo", "canary", port, &[(ips[3], true)]),
        ]
        .join("---\n")
    };
    let m = Manifests::new();
    m.write("svc.yaml", &services(ips[0], &[]));
    m.write(
        "secret.yaml",
        &tls_secret("demo", "secure-tls", &cert_a, &key_a),
    );
    let ingresses = [
        Ing::new("demo", "web", T0).rule(
            "web.test",
            &[
                ("/", "Prefix", "app"),
                ("/api", "Prefix", "api"),
                ("/empty", "Prefix", "empty"),
            ],
        ),
        Ing::new("demo", "rewrite", T0)
            .nginx("use-regex", "true")
            .nginx("rewrite-target", "/$2")
            .rule(
                "rw.test",
                &[("/strip(/|$)(.*)", "ImplementationSpecific", "app")],
            ),
        Ing::new("demo", "limits", T0)
            .nginx("proxy-body-size", "1k")
            .nginx("proxy-read-timeout", "1")
            .rule("limits.test", &[("/", "Prefix", "app")]),
        Ing::new("demo", "redir", T0)
            .nginx("force-ssl-redirect", "true")
            .rule("redir.test", &[("/", "Prefix", "app")]),
        Ing::new("demo", "secure", T0)
            .tls(&["secure.test"], "secure-tls")
            .rule("secure.test", &[("/", "Prefix", "app")]),
        Ing::new("demo", "main", T0).rule("canary.test", &[("/", "Prefix", "main")]),
        Ing::new("demo", "canary", T1)
            .nginx("canary", "true")
            .nginx("canary-by-header", "X-Canary")
            .nginx("canary-by-header-value", "yes")
            .rule("canary.test", &[("/", "Prefix", "canary")]),
    ];
    for (i, ing) in ingresses.iter().enumerate() {
        m.write(&format!("ing-{i}.yaml"), &ing.yaml());
    }
    let f = Ferrule::start(m.path(), NJS).await;
    let conf = std::fs::read_to_string(f.prefix.path().join("nginx/conf/nginx.conf")).unwrap();
    assert!(
        conf.contains("js_content ferrule.api;") && !conf.contains("lua"),
        "an njs configuration:\n{conf}"
    );
    wait_store(&f, "demo_main_80", |b| {
        b["canary"]["backend"] == "demo_canary_80"
    })
    .await;

    // Hosts and element-wise prefixes; unknown hosts get the default 404.
    for (host, path, want) in [
        ("web.test", "/", (200, addr(0))),
        ("web.test", "/apix", (200, addr(0))),
        ("web.test", "/api", (200, addr(1))),
        ("web.test", "/api/v1?q=1", (200, addr(1))),
        ("unknown.test", "/", (404, String::new())),
    ] {
        assert_eq!(f.backend(host, path).await, want, "{host}{path}");
    }
    // A Service without endpoints: 503 from NGINX, not an error page of the proxy.
    assert_eq!(f.get("web.test", "/empty").await.0, 503);

    // What the backend receives: Host as sent, forwarded headers, a request id.
    let (s, _, v) = get_with(&f, "Web.test:8080", "/h?x=1", &[]).await;
    assert_eq!(s, 200, "{v}");
    let h = &v["headers"];
    assert_eq!(v["path"], "/h?x=1");
    assert_eq!(v["version"], "HTTP/1.1");
    assert_eq!(h["host"], "Web.test:8080", "Host preserved, not the peer");
    assert_eq!(h["x-forwarded-host"], "Web.test:8080");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-real-ip"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-port"], f.http.to_string());
    let id = h["x-request-id"].as_str().unwrap_or_default();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "generated X-Request-ID: {id:?}"
    );
    let (_, _, v) = get_with(&f, "web.test", "/h", &[("X-Request-ID", "mine")]).await;
    assert_eq!(v["headers"]["x-request-id"], "mine");

    // rewrite-target: the peer is picked before the rewrite ends the rewrite phase.
    for (req, want) in [("/strip", "/"), ("/strip/a/b?x=1&y=%20", "/a/b?x=1&y=%20")] {
        let (s, v) = f.get("rw.test", req).await;
        assert_eq!((s, v["path"].as_str()), (200, Some(want)), "{req}");
        assert_eq!(v["backend"], addr(0));
    }
    assert_eq!(f.get("rw.test", "/other").await.0, 404);

    // proxy-body-size and proxy-read-timeout.
    assert_eq!(post_bytes(&f, "limits.test", 512).await, 200);
    assert_eq!(post_bytes(&f, "limits.test", 4096).await, 413);
    assert_eq!(post_bytes(&f, "web.test", 4096).await, 200);
    let started = Instant::now();
    let (s, _, _) = get_with(&f, "limits.test", "/slow", &[("x-echo-delay-ms", "3000")]).await;
    let took = started.elapsed();
    assert_eq!(s, 504);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "504 after {took:?}, want about 1s"
    );

    // Redirects to HTTPS: forced, and implied by TLS on the host.
    for (host, path) in [("redir.test", "/p?q=1"), ("secure.test", "/s")] {
        let (s, h, _) = get_with(&f, host, path, &[]).await;
        assert_eq!(s, 308, "{host}{path}");
        assert_eq!(h["location"], format!("https://{host}{path}").as_str());
    }

    // Header canary: only the exact value routes to the canary.
    for (value, want) in [
        (Some("yes"), addr(3)),
        (Some("Yes"), addr(0)),
        (Some("yes2"), addr(0)),
        (Some("always"), addr(0)),
        (None, addr(0)),
    ] {
        let headers: Vec<(&str, &str)> = value.map(|v| ("X-Canary", v)).into_iter().collect();
        for _ in 0..10 {
            let (s, _, v) = get_with(&f, "canary.test", "/", &headers).await;
            assert_eq!((s, v["backend"].as_str()), (200, Some(&*want)), "{value:?}");
        }
    }

    // Certificates by SNI, from the balancer's state; the default file otherwise.
    let served_a = wait_until(Duration::from_secs(5), || async {
        f.served_fingerprint("secure.test") == fp_a
    })
    .await;
    assert!(
        served_a,
        "cert A served; got {:?}; log:\n{}",
        f.served_fingerprint("secure.test"),
        f.logs()
    );
    let default_fp = f.served_fingerprint("other.test");
    assert!(
        !default_fp.is_empty() && default_fp != fp_a,
        "another SNI gets the default certificate"
    );
    let v = https_get(&f, "secure.test", "/tls").await;
    assert_eq!(v["backend"], addr(0), "proxied over TLS: {v}");
    assert_eq!(v["headers"]["x-forwarded-proto"], "https");

    // Dynamic changes: endpoints, a Service gaining endpoints, a Secret rotation.
    let before = NoReload::capture(&f).await;
    m.write("svc.yaml", &services(ips[2], &[(ips[3], true)]));
    wait_backend(&f, "web.test", "/", (200, &addr(2)), "endpoint change").await;
    wait_backend(&f, "web.test", "/empty", (200, &addr(3)), "endpoints added").await;
    // Every worker serves the change (new connections spread over both).
    for _ in 0..20 {
        assert_eq!(f.backend("web.test", "/").await, (200, addr(2)));
    }
    m.write(
        "secret.yaml",
        &tls_secret("demo", "secure-tls", &cert_b, &key_b),
    );
    let served_b = wait_until(Duration::from_secs(10), || async {
        f.served_fingerprint("secure.test") == fp_b
    })
    .await;
    assert!(served_b, "cert B served after rotation; log:\n{}", f.logs());
    assert_eq!(f.served_fingerprint("other.test"), default_fp);
    assert_eq!(https_get(&f, "secure.test", "/").await["backend"], addr(2));
    before.check(&f, "endpoint and certificate changes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_api_needs_the_token_is_unreachable_through_the_proxy_and_survives_a_restart() {
    let a = Echo::start("127.0.0.35").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    m.write(
        "ing.yaml",
        &Ing::new("demo", "app", T0)
            .rule("app.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), NJS).await;
    wait_store(&f, "demo_app_80", |b| endpoint_count(b) == 1).await;
    let token_file = f.prefix.path().join("nginx/conf/balancer.token.json");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "token file mode");
    let token = f.api_token();
    assert!(token.len() >= 32, "a strong token: {} chars", token.len());
    let (s, body) = f
        .api("GET", "/configuration/version", Some(&token), None)
        .await;
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!((s, v["balancer"].as_str()), (200, Some("njs")), "{body}");
    assert!(v["backends"]["version"].is_u64(), "{body}");

    // On the socket: no token, a wrong one, an empty one → 401, nothing leaks or
    // changes.
    let evil = r#"{"version": 99, "backends": [{"name": "demo_app_80", "endpoints": [{"address": "127.0.0.99", "port": 1}]}]}"#;
    for t in [None, Some("wrong"), Some(&*format!("{token}x")), Some("")] {
        for (method, path, body) in [
            ("GET", "/configuration/backends", None),
            ("GET", "/configuration/version", None),
            ("GET", "/configuration/certificates", None),
            ("POST", "/configuration/backends", Some(evil)),
        ] {
            let (s, out) = f.api(method, path, t, body).await;
            assert_eq!(s, 401, "{method} {path} with token {t:?}: {out}");
            assert!(!out.contains("127.0.0.35"), "leaks nothing: {out}");
        }
    }

    // Through the proxy ports, under any Host and path, even with the token: routed
    // like any request (the default server's 404, or the Ingress's backend).
    let sock = f.api_socket().display().to_string();
    let hosts = [
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{}", f.http),
        "ferrule".to_owned(),
        format!("unix:{sock}"),
        sock.clone(),
        String::new(),
    ];
    let paths = [
        "/configuration/backends",
        "/configuration/backends/demo_app_80",
        "/configuration/version",
        "/configuration/certificates",
        "/ferrule/config-version",
    ];
    let mut probes = 0;
    for path in paths {
        for host in &hosts {
            probes += probe_api_on_proxy_ports(&f, host, path, &token, evil).await;
        }
        let target = format!("http://unix:{sock}:{path}");
        let req = format!(
            "GET {target} HTTP/1.1\r\nHost: app.test\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        let (s, b) = raw_http(f.http, &req).await;
        assert!(s == 404 || s == 400, "GET {target}: {s} {b}");
        assert!(!b.contains("generation"), "API answered: {b}");
        // On a host an Ingress serves, the path reaches the app, not the API.
        let (s, v) = f.get("app.test", path).await;
        assert_eq!(
            (s, v["backend"].as_str()),
            (200, Some(&*a.addr.to_string()))
        );
        assert_eq!(v["path"], path);
        probes += 2;
    }
    assert_eq!(
        f.balancer_backend("demo_app_80").await["endpoints"][0]["address"],
        "127.0.0.35",
        "nothing refused or sent through the proxy changed the store"
    );

    // NGINX listens on TCP only on the proxy ports.
    let ports = f.nginx_tcp_ports();
    assert_eq!(
        ports,
        BTreeSet::from([f.http, f.https]),
        "NGINX TCP listeners"
    );
    eprintln!("njs API isolation: {probes} proxy-port probes, none reached the API");

    // A new NGINX master starts with an empty store: the controller posts everything
    // again, and traffic is served as before.
    let master = f.master_pid().expect("pid file");
    kill_9(master);
    let a_addr = a.addr.to_string();
    let restarted =
        serves_from_a_new_master(&f, master, "app.test", &a_addr, Duration::from_secs(15)).await;
    assert!(restarted, "NGINX restarted and serving; log:\n{}", f.logs());
    for _ in 0..10 {
        assert_eq!(f.backend("app.test", "/").await, (200, a.addr.to_string()));
    }
}

// A served host gaining and losing TLS: certificate by SNI and the ssl-redirect decided
// per request (ferrule.tlsRedirect), without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_tls_added_to_and_removed_from_served_hosts_without_reload() {
    crate::dynamic::tls_comes_and_goes_without_reload("127.0.0.41", NJS).await;
}

// A controller killed and restarted on the same prefix adopts its NGINX: the njs token,
// default certificate and state the running master holds are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_a_restarted_controller_adopts_its_nginx_without_a_reload() {
    crate::process::adoption_without_a_reload(&["127.0.0.42", "127.0.0.43"], NJS).await;
}
