//! The controller ConfigMap's keys through a real NGINX: what a client sees when an
//! administrator sets them (statuses, headers, protocols, which requests retry).

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// GET `host` / from source address `from` with extra request headers.
async fn get_as(
    f: &Ferrule,
    from: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let c = reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut req = c
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// `a.example.com` over TLS (the `a-tls` Secret of the fixtures) through `ing`,
/// routed to the Service `echo`.
fn write_tls_host(m: &Manifests, ing: Ing) {
    m.write("secret.yaml", &a_example_secret());
    let ing = ing
        .rule("a.example.com", &[("/", "Prefix", "echo")])
        .tls(&["a.example.com"], "a-tls");
    m.write("a.yaml", &ing.yaml());
}

async fn status_as(f: &Ferrule, from: &str, host: &str, headers: &[(&str, &str)]) -> u16 {
    get_as(f, from, host, headers).await.status().as_u16()
}

#[tokio::test]
async fn block_lists_refuse_clients_on_every_host_before_any_location() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("block-cidrs", "127.0.0.7"),
            ("block-user-agents", "~*badbot, default, exact-agent"),
            ("block-referers", "~*spam\\.example"),
        ]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    // Its own allowlist names the blocked client: the block still wins.
    m.write(
        "own.yaml",
        &demo_ingress(
            "own",
            "own.test",
            &[("allowlist-source-range", "127.0.0.7,127.0.0.1")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &[]).await,
        200,
        "{}",
        f.logs()
    );
    for host in ["plain.test", "own.test", "unknown.test"] {
        assert_eq!(status_as(&f, "127.0.0.7", host, &[]).await, 403, "{host}");
    }
    let ua = |v| [("User-Agent", v)];
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &ua("Mozilla BadBot/2")).await,
        403
    );
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &ua("exact-agent")).await,
        403
    );
    // An exact value is exact, and "default" is a value, not map's keyword.
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &ua("exact-agent/2")).await,
        200
    );
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &ua("default")).await,
        403
    );
    let referer = [("Referer", "http://www.spam.example/x")];
    assert_eq!(status_as(&f, "127.0.0.1", "own.test", &referer).await, 403);
    assert_eq!(status_as(&f, "127.0.0.1", "own.test", &[]).await, 200);

    // An invalid list fails closed: every host answers 403, the ConfigMap says why.
    m.write("cm.yaml", &configmap(&[("block-cidrs", "127.0.0.7/40")]));
    let closed = wait_until(Duration::from_secs(20), || async {
        status_as(&f, "127.0.0.1", "plain.test", &[]).await == 403
    })
    .await;
    assert!(closed, "{}", f.logs());
    let reported = f
        .reports(
            "ConfigMap",
            "demo",
            "ferrule",
            "block-cidrs",
            Duration::from_secs(20),
        )
        .await;
    assert!(reported, "{:?}", f.resources().await);
}

#[tokio::test]
async fn header_keys_change_what_clients_and_backends_see() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "cors.yaml",
        &demo_ingress("cors", "cors.test", &[("enable-cors", "true")]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let secret = [("x-echo-header", "X-Secret=1")];
    let underscore = [("my_header", "1")];

    // ingress-nginx's defaults: no version, backend headers passed, names with
    // underscores dropped.
    let r = get_as(&f, "127.0.0.1", "plain.test", &secret).await;
    assert_eq!(r.headers()["server"], "nginx", "{}", f.logs());
    assert!(r.headers().contains_key("x-secret"));
    let r = get_as(&f, "127.0.0.1", "plain.test", &underscore).await;
    let seen: Value = r.json().await.unwrap();
    assert!(seen["headers"].get("my_header").is_none(), "{seen}");

    m.write(
        "cm.yaml",
        &configmap(&[
            ("server-tokens", "true"),
            ("hide-headers", "X-Secret"),
            ("enable-underscores-in-headers", "true"),
        ]),
    );
    let applied = wait_until(Duration::from_secs(20), || async {
        let r = get_as(&f, "127.0.0.1", "plain.test", &[]).await;
        r.headers()
            .get("server")
            .is_some_and(|v| v.to_str().unwrap().starts_with("nginx/"))
    })
    .await;
    f.old_workers_gone().await;
    assert!(applied, "{}", f.logs());
    for host in ["plain.test", "cors.test"] {
        let r = get_as(&f, "127.0.0.1", host, &secret).await;
        assert!(
            !r.headers().contains_key("x-secret"),
            "{host}: {:?}",
            r.headers()
        );
    }
    let r = get_as(&f, "127.0.0.1", "plain.test", &underscore).await;
    let seen: Value = r.json().await.unwrap();
    assert_eq!(seen["headers"]["my_header"], "1", "{seen}");
    // The backend's Server header instead of NGINX's.
    m.write(
        "cm.yaml",
        &configmap(&[("allow-backend-server-header", "true")]),
    );
    let server = [("x-echo-header", "Server=echo")];
    let passed = wait_until(Duration::from_secs(20), || async {
        let r = get_as(&f, "127.0.0.1", "plain.test", &server).await;
        r.headers().get("server").is_some_and(|v| v == "echo")
    })
    .await;
    assert!(passed, "{}", f.logs());
}

#[tokio::test]
async fn gzip_compresses_the_listed_types_when_on() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let gzip = [("Accept-Encoding", "gzip")];
    let r = get_as(&f, "127.0.0.1", "plain.test", &gzip).await;
    assert_eq!(r.status(), 200, "{}", f.logs());
    assert!(
        !r.headers().contains_key("content-encoding"),
        "off by default"
    );

    m.write(
        "cm.yaml",
        &configmap(&[
            ("use-gzip", "true"),
            ("gzip-types", "application/json"),
            ("gzip-min-length", "10"),
        ]),
    );
    let on = wait_until(Duration::from_secs(20), || async {
        let r = get_as(&f, "127.0.0.1", "plain.test", &gzip).await;
        r.headers()
            .get("content-encoding")
            .is_some_and(|v| v == "gzip")
    })
    .await;
    assert!(on, "{}", f.logs());
    f.old_workers_gone().await;
    let r = get_as(&f, "127.0.0.1", "plain.test", &gzip).await;
    assert_eq!(
        r.headers().get("vary").map(|v| v.to_str().unwrap()),
        Some("Accept-Encoding"),
        "{} {:?}; log:\n{}",
        r.status(),
        r.headers(),
        f.logs()
    );
    let body = r.bytes().await.unwrap();
    assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzip stream");
    // Without Accept-Encoding, plain JSON.
    let r = get_as(&f, "127.0.0.1", "plain.test", &[]).await;
    assert!(!r.headers().contains_key("content-encoding"));
}

#[tokio::test]
async fn tls_protocols_and_http2_follow_the_configmap() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    write_tls_host(&m, Ing::new("demo", "a", "2026-01-01T00:00:00Z"));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let url = format!("https://a.example.com:{}/", f.https);
    let tls12 = || {
        let ca = reqwest::Certificate::from_pem(tls_fixture("ca.crt").as_bytes()).unwrap();
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .use_rustls_tls()
            .max_tls_version(reqwest::tls::Version::TLS_1_2)
            .resolve("a.example.com", ([127, 0, 0, 1], f.https).into())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    // Defaults: TLS 1.2 and 1.3, HTTP/2 offered.
    let r = tls_client(&f, &["a.example.com"])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (200, reqwest::Version::HTTP_2)
    );
    assert_eq!(tls12().get(&url).send().await.unwrap().status(), 200);

    m.write(
        "cm.yaml",
        &configmap(&[("ssl-protocols", "TLSv1.3"), ("use-http2", "false")]),
    );
    let applied = wait_until(Duration::from_secs(20), || async {
        tls12().get(&url).send().await.is_err()
    })
    .await;
    assert!(applied, "TLS 1.2 is refused: {}", f.logs());
    f.old_workers_gone().await;
    let r = tls_client(&f, &["a.example.com"])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (200, reqwest::Version::HTTP_11)
    );
}

/// A backend endpoint that takes the request and closes without an answer.
async fn dropping_endpoint(ip: &str, port: u16) {
    let l = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
            });
        }
    });
}

/// The statuses of `n` POSTs to plain.test.
async fn posts(f: &Ferrule, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        statuses.push(f.request("POST", "plain.test", "/").await.0);
    }
    statuses
}

#[tokio::test]
async fn retry_non_idempotent_sends_a_failed_post_to_the_next_endpoint() {
    let echo = Echo::start("127.0.0.2").await;
    // Endpoints of a Service share its port: the same port on another address.
    dropping_endpoint("127.0.0.3", echo.addr.port()).await;
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_endpoints(
            "demo",
            "echo",
            echo.addr.port(),
            &[("127.0.0.2", true), ("127.0.0.3", true)],
        ),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write("cm.yaml", &configmap(&[("worker-processes", "3")]));
    let f = Ferrule::start(
        m.path(),
        &[LUA_ONLY, &["--configmap", "demo/ferrule"]].concat(),
    )
    .await;
    // worker-processes: three workers.
    assert_eq!(f.worker_pids().len(), 3, "{}", f.logs());
    // Round robin over two endpoints: some POSTs meet the dropping one, and a POST
    // is not retried by default (it may have had an effect).
    let statuses = posts(&f, 6).await;
    assert!(statuses.contains(&502), "{statuses:?}");
    assert!(statuses.contains(&200), "{statuses:?}");
    // A GET is retried.
    for _ in 0..4 {
        assert_eq!(f.get("plain.test", "/").await.0, 200);
    }
    m.write(
        "cm.yaml",
        &configmap(&[("worker-processes", "3"), ("retry-non-idempotent", "true")]),
    );
    let applied = wait_until(Duration::from_secs(20), || async {
        posts(&f, 6).await.iter().all(|s| *s == 200)
    })
    .await;
    assert!(applied, "{}", f.logs());
}

#[tokio::test]
async fn request_id_original_uri_and_the_access_log_keys() {
    let echo = Echo::start("127.0.0.2").await;
    let syslog = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let syslog_port = syslog.local_addr().unwrap().port().to_string();
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("skip-access-log-urls", "/health"),
            ("proxy-add-original-uri-header", "true"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let (s, seen) = f.get("plain.test", "/logged?a=1").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(seen["headers"]["x-original-uri"], "/logged?a=1", "{seen}");
    let id = seen["headers"]["x-request-id"].as_str().unwrap_or_default();
    assert_eq!(id.len(), 32, "{seen}");
    f.get("plain.test", "/health").await;
    // The log is buffered for a second at most.
    let log = f.prefix.path().join("nginx/logs/access.log");
    let logged = wait_until(Duration::from_secs(10), || async {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/logged?a=1"))
    })
    .await;
    assert!(logged, "{}", f.logs());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("/health"), "{text}");
    // The logged request id is the one the backend received.
    let line = text.lines().find(|l| l.contains("/logged?a=1")).unwrap();
    assert!(line.ends_with(&format!(" {id}")), "{line}");

    // No generated request id, no original URI; the access log to syslog.
    m.write(
        "cm.yaml",
        &configmap(&[
            ("generate-request-id", "false"),
            ("enable-syslog", "true"),
            ("syslog-host", "127.0.0.1"),
            ("syslog-port", &syslog_port),
            ("access-log-params", ""),
        ]),
    );
    let applied = wait_until(Duration::from_secs(20), || async {
        f.get("plain.test", "/").await.1["headers"]
            .get("x-request-id")
            .is_none()
    })
    .await;
    assert!(applied, "{}", f.logs());
    f.old_workers_gone().await;
    let (_, seen) = f.get("plain.test", "/to-syslog").await;
    assert!(seen["headers"].get("x-original-uri").is_none(), "{seen}");
    let mut buf = vec![0u8; 65536];
    let line = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n = syslog.recv(&mut buf).await.unwrap();
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            if line.contains("/to-syslog") {
                return line;
            }
        }
    })
    .await
    .expect("an access log line over syslog");
    assert!(line.contains("nginx:"), "{line}");
}

#[tokio::test]
async fn one_hsts_header_and_reject_handshakes_for_unknown_hosts() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    write_tls_host(&m, Ing::new("demo", "a", "2026-01-01T00:00:00Z"));
    m.write("cm.yaml", &configmap(&[("ssl-reject-handshake", "true")]));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    // The backend sends its own HSTS: the client gets Ferrule's, once.
    let r = tls_client(&f, &["a.example.com"])
        .get(format!("https://a.example.com:{}/", f.https))
        .header("x-echo-header", "Strict-Transport-Security=max-age=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", f.logs());
    let hsts: Vec<_> = r
        .headers()
        .get_all("strict-transport-security")
        .iter()
        .collect();
    assert_eq!(hsts, ["max-age=31536000; includeSubDomains"]);
    // A name with no server: no certificate at all, the handshake fails.
    let unknown = tls_client(&f, &["unknown.example.com"])
        .get(format!("https://unknown.example.com:{}/", f.https))
        .send()
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
}

/// Snippets written for ingress-nginx use headers-more: it is loaded, so they work
/// where snippets are allowed (an Ingress's with the flag, the ConfigMap's always).
#[tokio::test]
async fn headers_more_snippets_work_as_in_ingress_nginx() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[("http-snippet", "more_set_headers \"X-Global: on\";")]),
    );
    m.write(
        "snip.yaml",
        &demo_ingress(
            "snip",
            "snip.test",
            &[(
                "configuration-snippet",
                "more_set_headers \"X-Snippet: yes\";\nmore_set_input_headers \"X-In: 1\";\nmore_clear_headers X-Secret;",
            )],
        ),
    );
    let f = Ferrule::start(
        m.path(),
        &["--configmap", "demo/ferrule", "--allow-snippet-annotations"],
    )
    .await;
    let r = get_as(
        &f,
        "127.0.0.1",
        "snip.test",
        &[("x-echo-header", "X-Secret=1")],
    )
    .await;
    assert_eq!(r.status(), 200, "{}", f.logs());
    assert_eq!(r.headers()["x-snippet"], "yes");
    assert_eq!(r.headers()["x-global"], "on");
    assert!(!r.headers().contains_key("x-secret"));
    let seen: Value = r.json().await.unwrap();
    assert_eq!(seen["headers"]["x-in"], "1", "{seen}");
}

/// ConfigMap `force-ssl-redirect` is the default an Ingress may turn off, and
/// `http-redirect-code` the status of every redirect to HTTPS.
#[tokio::test]
async fn force_ssl_redirect_and_the_redirect_code_come_from_the_configmap() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("force-ssl-redirect", "true"),
            ("http-redirect-code", "301"),
        ]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "off.yaml",
        &demo_ingress("off", "off.test", &[("force-ssl-redirect", "false")]),
    );
    m.write(
        "acme.yaml",
        &Ing::new("demo", "acme", "2026-01-02T00:00:00Z")
            .rule(
                "plain.test",
                &[("/.well-known/acme-challenge", "Prefix", "echo")],
            )
            .yaml(),
    );
    write_tls_host(
        &m,
        Ing::new("demo", "a", "2026-01-01T00:00:00Z").nginx("force-ssl-redirect", "false"),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(
        location_of(&f, "plain.test", "/x?y=1").await,
        (301, "https://plain.test/x?y=1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(f.get("off.test", "/").await.0, 200);
    // no-tls-redirect-locations: ACME's challenge path by default, as ingress-nginx
    // (an HTTP-01 solver must be reachable over plain HTTP).
    assert_eq!(
        f.get("plain.test", "/.well-known/acme-challenge/token")
            .await
            .0,
        200
    );
    // The ssl-redirect of a TLS host (decided by the balancer) has the code too, and
    // as ingress-nginx no trailing slash (the bare host's `/` included).
    assert_eq!(
        location_of(&f, "a.example.com", "/").await,
        (301, "https://a.example.com".to_owned())
    );
}

/// The redirect to HTTPS strips one trailing slash, as ingress-nginx's does,
/// unless the location has `preserve-trailing-slash`; with either balancer (the
/// Lua one answers from its redirect socket, njs in the location).
#[tokio::test]
async fn the_redirect_to_https_strips_a_trailing_slash_unless_preserved() {
    trailing_slash(&[]).await;
}

#[tokio::test]
async fn the_redirect_to_https_strips_a_trailing_slash_with_njs_too() {
    trailing_slash(&["--balancer", "njs"]).await;
}

async fn trailing_slash(flags: &[&str]) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    write_tls_host(&m, Ing::new("demo", "a", "2026-01-01T00:00:00Z"));
    let kept = Ing::new("demo", "kept", "2026-01-02T00:00:00Z")
        .nginx("preserve-trailing-slash", "true")
        .rule("a.example.com", &[("/kept", "Prefix", "echo")]);
    m.write("kept.yaml", &kept.yaml());
    let forced = Ing::new("demo", "forced", "2026-01-03T00:00:00Z")
        .nginx("force-ssl-redirect", "true")
        .rule("forced.test", &[("/", "Prefix", "echo")]);
    m.write("forced.yaml", &forced.yaml());
    let f = Ferrule::start(m.path(), flags).await;
    for (host, path, want) in [
        ("a.example.com", "/app/", "https://a.example.com/app"),
        (
            "a.example.com",
            "/app/?q=1",
            "https://a.example.com/app/?q=1",
        ),
        ("a.example.com", "/", "https://a.example.com"),
        ("a.example.com", "/kept/", "https://a.example.com/kept/"),
        ("forced.test", "/x/", "https://forced.test/x"),
    ] {
        assert_eq!(
            location_of(&f, host, path).await,
            (308, want.to_owned()),
            "{host}{path}; log:\n{}",
            f.logs()
        );
    }
}

/// ConfigMap `proxy-cookie-path` and `-domain` rewrite every backend's cookies;
/// an Ingress's own annotation replaces them.
#[tokio::test]
async fn cookie_rewrites_are_the_default_an_ingress_replaces() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("proxy-cookie-path", "/internal/ /"),
            ("proxy-cookie-domain", "svc.local example.com"),
        ]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "own.yaml",
        &demo_ingress(
            "own",
            "own.test",
            &[("proxy-cookie-path", "/internal/ /own/")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let cookie = [(
        "x-echo-header",
        "Set-Cookie=s=1; Domain=svc.local; Path=/internal/",
    )];
    let r = get_as(&f, "127.0.0.1", "plain.test", &cookie).await;
    assert_eq!(r.status(), 200, "{}", f.logs());
    assert_eq!(r.headers()["set-cookie"], "s=1; Domain=example.com; Path=/");
    let r = get_as(&f, "127.0.0.1", "own.test", &cookie).await;
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.contains("Path=/own/"), "{set}");
}

/// custom-http-errors through `balancer_flags`: the error backend writes the page
/// of the listed statuses, told what failed; the client keeps the status.
async fn error_pages_scenario(balancer_flags: &[&str]) {
    let echo = Echo::start("127.0.0.2").await;
    let pages = Echo::start("127.0.0.4").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("errors.yaml", &service("demo", "errors", &[pages.addr]));
    m.write("cm.yaml", &configmap(&[("custom-http-errors", "404")]));
    m.write(
        "own.yaml",
        &demo_ingress(
            "own",
            "own.test",
            &[
                ("custom-http-errors", "404,503"),
                ("default-backend", "errors"),
            ],
        ),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "raw.yaml",
        &demo_ingress(
            "raw",
            "raw.test",
            &[("disable-proxy-intercept-errors", "true")],
        ),
    );
    let mut flags = vec![
        "--configmap",
        "demo/ferrule",
        "--default-backend-service",
        "demo/errors",
    ];
    flags.extend_from_slice(balancer_flags);
    let f = Ferrule::start(m.path(), &flags).await;
    let get = |host: &'static str, status: &'static str| {
        let f = &f;
        async move {
            let r = reqwest::Client::new()
                .get(format!("http://127.0.0.1:{}/missing?q=1", f.http))
                .header("Host", host)
                .header("x-echo-status", status)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (s, page) = get("own.test", "404").await;
    assert_eq!(s, 404, "{}", f.logs());
    assert_eq!(page["backend"], pages.addr.to_string(), "{page}");
    // As ingress-nginx: the path is /, the query stays.
    assert_eq!(page["path"], "/?q=1");
    assert_eq!(page["method"], "GET");
    let h = &page["headers"];
    assert_eq!(h["x-code"], "404", "{page}");
    assert_eq!(h["x-original-uri"], "/missing?q=1");
    assert_eq!(h["x-namespace"], "demo");
    assert_eq!(h["x-ingress-name"], "own");
    assert_eq!(h["x-service-name"], "echo");
    // The Service port the Ingress names (not the endpoints').
    assert_eq!(h["x-service-port"], "80");
    // Not listed: the backend's own answer.
    let (s, body) = get("own.test", "500").await;
    assert_eq!(
        (s, body["backend"].as_str()),
        (500, Some(echo.addr.to_string().as_str()))
    );
    // The ConfigMap's list and --default-backend-service for the others.
    let (s, page) = get("plain.test", "404").await;
    assert_eq!(
        (s, page["backend"].as_str()),
        (404, Some(pages.addr.to_string().as_str()))
    );
    let (s, body) = get("plain.test", "503").await;
    assert_eq!(
        (s, body["backend"].as_str()),
        (503, Some(echo.addr.to_string().as_str()))
    );
    // disable-proxy-intercept-errors: the backend's errors pass through.
    let (s, body) = get("raw.test", "404").await;
    assert_eq!(
        (s, body["backend"].as_str()),
        (404, Some(echo.addr.to_string().as_str()))
    );
}

#[tokio::test]
async fn custom_http_errors_keep_the_status_and_tell_the_error_backend() {
    error_pages_scenario(&[]).await;
}

#[tokio::test]
async fn custom_http_errors_with_the_njs_balancer() {
    error_pages_scenario(&["--balancer", "njs"]).await;
}

/// ConfigMap `proxy-buffer-size` and friends are the defaults of every location: a
/// backend's 6 KB header needs more than NGINX's 4k buffer. An Ingress with buffers
/// of its own keeps them, and the ConfigMap's larger busy size does not break it.
#[tokio::test]
async fn proxy_buffer_keys_are_the_defaults_of_every_location() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "own.yaml",
        &demo_ingress("own", "own.test", &[("proxy-buffer-size", "4k")]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let big = format!("X-Big={}", "b".repeat(6000));
    let header = [("x-echo-header", big.as_str())];
    assert_eq!(
        status_as(&f, "127.0.0.1", "plain.test", &header).await,
        502,
        "{}",
        f.logs()
    );

    m.write(
        "cm.yaml",
        &configmap(&[
            ("proxy-buffer-size", "16k"),
            ("proxy-buffers-number", "4"),
            ("proxy-busy-buffers-size", "32k"),
        ]),
    );
    let applied = wait_until(Duration::from_secs(20), || async {
        status_as(&f, "127.0.0.1", "plain.test", &header).await == 200
    })
    .await;
    assert!(applied, "{}", f.logs());
    assert_eq!(status_as(&f, "127.0.0.1", "own.test", &[]).await, 200);
    assert_eq!(status_as(&f, "127.0.0.1", "own.test", &header).await, 502);
    let cm = f.resource("ConfigMap", "demo", "ferrule").await;
    assert!(
        cm.as_ref().is_none_or(|c| c["state"] != "rejected"),
        "{cm:?}"
    );
}

/// ConfigMap `bind-address`: the proxy ports listen on those addresses only.
#[tokio::test]
async fn bind_address_chooses_where_the_proxy_ports_listen() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write("cm.yaml", &configmap(&[("bind-address", "127.0.0.5")]));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let get = |ip: &str| {
        reqwest::Client::new()
            .get(format!("http://{ip}:{}/", f.http))
            .header("Host", "plain.test")
            .timeout(Duration::from_secs(5))
            .send()
    };
    assert_eq!(
        get("127.0.0.5").await.unwrap().status(),
        200,
        "{}",
        f.logs()
    );
    assert!(
        get("127.0.0.1").await.is_err(),
        "nothing listens on 127.0.0.1"
    );
}

/// ConfigMap `service-upstream`: every Ingress proxies to its Service's ClusterIP,
/// unless its own annotation says otherwise.
#[tokio::test]
async fn service_upstream_is_the_default_an_ingress_replaces() {
    let cluster = Echo::start("127.0.0.74").await;
    let port = cluster.addr.port();
    let endpoint = Echo::serve(
        tokio::net::TcpListener::bind(("127.0.0.75", port))
            .await
            .unwrap(),
    );
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_endpoints("demo", "echo", port, &[("127.0.0.75", true)])
            .replace("spec:\n", "spec:\n  clusterIP: 127.0.0.74\n")
            // The ClusterIP answers on the Service port: the echo's.
            .replace("port: 80,", &format!("port: {port},")),
    );
    m.write("cm.yaml", &configmap(&[("service-upstream", "true")]));
    let on_port = |ing: String| ing.replace("number: 80", &format!("number: {port}"));
    m.write(
        "plain.yaml",
        &on_port(demo_ingress("plain", "plain.test", &[])),
    );
    m.write(
        "own.yaml",
        &on_port(demo_ingress(
            "own",
            "own.test",
            &[("service-upstream", "false")],
        )),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(
        f.backend("plain.test", "/").await,
        (200, cluster.addr.to_string()),
        "{}",
        f.logs()
    );
    assert_eq!(
        f.backend("own.test", "/").await,
        (200, endpoint.addr.to_string())
    );
}

/// `add-headers` and `proxy-set-headers` name other ConfigMaps, as in ingress-nginx:
/// every client gets the first's headers (replacing the backend's own, with HSTS
/// kept, also where a location adds headers of its own), every backend the
/// second's (NGINX variables expanded); an edit of either is served.
#[tokio::test]
async fn header_lists_from_other_configmaps_reach_clients_and_backends() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    write_tls_host(&m, Ing::new("demo", "a", "2026-01-01T00:00:00Z"));
    let cors = Ing::new("demo", "b", "2026-01-02T00:00:00Z")
        .nginx("enable-cors", "true")
        .rule("a.example.com", &[("/cors", "Prefix", "echo")]);
    m.write("b.yaml", &cors.yaml());
    let lists = |frame: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: resp, namespace: demo }}\n\
             data: {{ X-Frame-Options: {frame} }}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: req, namespace: demo }}\n\
             data: {{ X-Client: $remote_addr, X-Request-Start: \"t=${{msec}}\" }}\n"
        )
    };
    m.write("lists.yaml", &lists("DENY"));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("add-headers", "demo/resp"),
            ("proxy-set-headers", "demo/req"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let client = tls_client(&f, &["a.example.com"]);
    let get = |path: &'static str| {
        let client = client.clone();
        let url = format!("https://a.example.com:{}{path}", f.https);
        async move {
            client
                .get(url)
                .header("Origin", "https://app.example")
                .header("x-echo-header", "X-Frame-Options=SAMEORIGIN")
                .send()
                .await
                .unwrap()
        }
    };
    for path in ["/", "/cors"] {
        let r = get(path).await;
        assert_eq!(r.status(), 200, "{path}: {}", f.logs());
        let all = |name: &str| -> Vec<String> {
            (r.headers().get_all(name).iter())
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            all("x-frame-options"),
            ["DENY"],
            "{path}: {:?}",
            r.headers()
        );
        assert_eq!(
            all("strict-transport-security"),
            ["max-age=31536000; includeSubDomains"],
            "{path}"
        );
        if path == "/cors" {
            assert!(
                r.headers().contains_key("access-control-allow-origin"),
                "{path}"
            );
        }
        let seen: Value = r.json().await.unwrap();
        assert_eq!(seen["headers"]["x-client"], "127.0.0.1", "{seen}");
        let start = seen["headers"]["x-request-start"]
            .as_str()
            .unwrap_or_default();
        assert!(start.starts_with("t=1"), "{seen}");
    }

    // The list is edited: the next answers carry the new value. Each look on a
    // new connection: a kept one may still be an old worker's, which serves the
    // old configuration until it is let go.
    m.write("lists.yaml", &lists("SAMEORIGIN"));
    let edited = wait_until(Duration::from_secs(10), || async {
        tls_client(&f, &["a.example.com"])
            .get(format!("https://a.example.com:{}/", f.https))
            .send()
            .await
            .ok()
            .and_then(|r| {
                let v = r
                    .headers()
                    .get("x-frame-options")?
                    .to_str()
                    .ok()?
                    .to_owned();
                Some(v)
            })
            .as_deref()
            == Some("SAMEORIGIN")
    })
    .await;
    assert!(edited, "the edited list is not served; log:\n{}", f.logs());

    // A list that names a variable NGINX may not know is refused by name, and the
    // last good one stays.
    m.write(
        "lists.yaml",
        &lists("SAMEORIGIN").replace("$remote_addr", "$no_such_variable"),
    );
    assert!(
        f.reports(
            "ConfigMap",
            "demo",
            "ferrule",
            "key proxy-set-headers: invalid value \"demo/req\": ConfigMap demo/req: header X-Client: $no_such_variable is not a variable",
            Duration::from_secs(10)
        )
        .await,
        "{:?}\n{}",
        f.resource("ConfigMap", "demo", "ferrule").await,
        f.logs()
    );
}

/// `default-backend` without custom-http-errors: while the Ingress's Service has no
/// ready endpoints, the default backend answers (ingress-nginx's fallback); when
/// the Service has endpoints again it answers, and neither change reloads NGINX.
#[tokio::test]
async fn the_default_backend_answers_while_the_service_has_no_endpoints() {
    let app = Echo::start("127.0.0.2").await;
    let maint = Echo::start("127.0.0.4").await;
    let port = app.addr.port();
    let m = Manifests::new();
    let none_ready = service_endpoints("demo", "echo", port, &[("127.0.0.2", false)]);
    m.write("svc.yaml", &none_ready);
    m.write("maint.yaml", &service("demo", "maint", &[maint.addr]));
    m.write(
        "web.yaml",
        &demo_ingress("web", "web.test", &[("default-backend", "maint")]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(
        f.backend("web.test", "/").await,
        (200, maint.addr.to_string()),
        "log:\n{}",
        f.logs()
    );
    assert_eq!(
        f.get("plain.test", "/").await.0,
        503,
        "no fallback without it"
    );
    assert!(
        f.reports(
            "Ingress",
            "demo",
            "web",
            "Service demo/echo port 80 has no ready endpoints; answered by default-backend demo/maint",
            Duration::from_secs(5),
        )
        .await,
        "{:?}",
        f.resource("Ingress", "demo", "web").await
    );

    let workers = f.worker_pids();
    for (ready, by) in [(true, app.addr), (false, maint.addr)] {
        let svc = service_endpoints("demo", "echo", port, &[("127.0.0.2", ready)]);
        m.write("svc.yaml", &svc);
        let moved = wait_until(Duration::from_secs(10), || async {
            f.backend("web.test", "/").await == (200, by.to_string())
        })
        .await;
        assert!(
            moved,
            "ready {ready}: {:?}",
            f.backend("web.test", "/").await
        );
    }
    assert_eq!(f.worker_pids(), workers, "endpoint changes only: no reload");
}
