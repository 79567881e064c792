//! The traffic annotations of ingress-nginx through real NGINX, as a client sees
//! them: redirects (status and `Location`), CORS headers and preflights, what the
//! backend receives and how its answer is rewritten, retries, mirrors.

use crate::support::*;

#[tokio::test]
async fn permanent_and_temporal_redirects_answer_with_their_code_and_url() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let url = "https://new.example.com$request_uri";
    m.write(
        "perm.yaml",
        &demo_ingress("perm", "perm.test", &[("permanent-redirect", url)]),
    );
    m.write(
        "code.yaml",
        &demo_ingress(
            "code",
            "code.test",
            &[
                ("permanent-redirect", "https://new.example.com/"),
                ("permanent-redirect-code", "308"),
            ],
        ),
    );
    m.write(
        "temp.yaml",
        &demo_ingress(
            "temp",
            "temp.test",
            &[("temporal-redirect", "http://other.example:8080/x?a=1")],
        ),
    );
    m.write(
        "both.yaml",
        &demo_ingress(
            "both",
            "both.test",
            &[
                ("permanent-redirect", "https://perm.example/"),
                ("temporal-redirect", "https://temp.example/"),
                ("temporal-redirect-code", "307"),
            ],
        ),
    );
    // A header a client fills is no part of a redirect (CVE-2023-5044's class).
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[("permanent-redirect", "https://x.example/$http_x")],
        ),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    // A path on the same host, as ingress-nginx takes it (issue 36).
    m.write(
        "relative.yaml",
        &demo_ingress(
            "relative",
            "relative.test",
            &[("permanent-redirect", "/new-location")],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        location_of(&f, "perm.test", "/a/b?x=1").await,
        (301, "https://new.example.com/a/b?x=1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(
        location_of(&f, "code.test", "/a").await,
        (308, "https://new.example.com/".to_owned())
    );
    assert_eq!(
        location_of(&f, "temp.test", "/").await,
        (302, "http://other.example:8080/x?a=1".to_owned())
    );
    assert_eq!(
        location_of(&f, "both.test", "/").await,
        (307, "https://temp.example/".to_owned()),
        "the temporal redirect wins, as in ingress-nginx"
    );
    assert_eq!(location_of(&f, "plain.test", "/").await.0, 200);

    assert_eq!(
        location_of(&f, "relative.test", "/old").await,
        (301, "http://relative.test/new-location".to_owned())
    );

    // As ingress-nginx: the invalid redirect is ignored with a Warning naming the
    // annotation and the value, and the Ingress is served without it.
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "applied", "{bad}");
    let message = bad.to_string();
    assert!(
        message.contains("permanent-redirect") && message.contains("$http_x"),
        "names the annotation and the value: {bad}"
    );
    assert_eq!(location_of(&f, "bad.test", "/").await.0, 200);
    let perm = f.resource("Ingress", "demo", "perm").await.unwrap();
    assert_eq!(perm["state"], "applied", "{perm}");
}

#[tokio::test]
async fn app_root_redirects_only_a_request_for_the_root() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "app.yaml",
        &demo_ingress("app", "app.test", &[("app-root", "/app1")]),
    );
    m.write(
        "bad.yaml",
        &demo_ingress("bad", "bad.test", &[("app-root", "//evil.example")]),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        location_of(&f, "app.test", "/").await,
        (302, "http://app.test/app1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(location_of(&f, "app.test", "/app1").await.0, 200);
    assert_eq!(location_of(&f, "app.test", "/other").await.0, 200);
    // Ignored with a Warning, as ingress-nginx does: served, no redirect.
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "applied", "{bad}");
    assert!(bad.to_string().contains("app-root"), "{bad}");
    assert_eq!(location_of(&f, "bad.test", "/").await.0, 200);
}

/// A request with an `Origin` (and any method): (status, the answer's headers).
async fn with_origin(
    f: &Ferrule,
    method: &str,
    host: &str,
    origin: Option<&str>,
) -> (u16, reqwest::header::HeaderMap) {
    let mut req = client()
        .request(
            method.parse().unwrap(),
            format!("http://127.0.0.1:{}/", f.http),
        )
        .header("Host", host)
        // The backend's own CORS header, which the location's must replace.
        .header(
            "X-Echo-Header",
            "Access-Control-Allow-Origin=https://backend.test",
        );
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.headers().clone())
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Vec<&'a str> {
    h.get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

/// `enable-cors`: with `*` every answer carries the headers and every preflight is
/// answered by NGINX; with a list, only an allowed Origin (anchored, `*.` one
/// label) gets them, echoed. The backend's own CORS header never doubles them, and
/// the server's HSTS header survives the location's `add_header`.
#[tokio::test]
async fn cors_answers_preflights_and_allows_only_listed_origins() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "any.yaml",
        &demo_ingress("any", "any.test", &[("enable-cors", "true")]),
    );
    let listed = [
        ("enable-cors", "true"),
        (
            "cors-allow-origin",
            "https://app.example.com, https://*.example.org",
        ),
        ("cors-allow-methods", "get, post"),
        ("cors-expose-headers", "X-Total"),
        ("cors-max-age", "600"),
    ];
    m.write("list.yaml", &demo_ingress("list", "list.test", &listed));
    m.write(
        "off.yaml",
        &demo_ingress(
            "off",
            "off.test",
            &[("cors-allow-origin", "https://a.test")],
        ),
    );
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[
                ("enable-cors", "true"),
                ("cors-allow-origin", "https://a.test/path"),
            ],
        ),
    );
    m.write("secret.yaml", &a_example_secret());
    let mut secure = Ing::new("demo", "secure", "2026-01-01T00:00:00Z")
        .rule("a.example.com", &[("/", "Prefix", "echo")])
        .tls(&["a.example.com"], "a-tls");
    for (k, v) in listed {
        secure = secure.nginx(k, v);
    }
    m.write("secure.yaml", &secure.yaml());
    let f = Ferrule::start(m.path(), &[]).await;

    // Any origin: the headers on every answer, the backend's replaced.
    let (s, h) = with_origin(&f, "GET", "any.test", Some("https://x.test")).await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(header(&h, "access-control-allow-origin"), ["*"]);
    assert_eq!(
        header(&h, "access-control-allow-methods"),
        ["GET, PUT, POST, DELETE, PATCH, OPTIONS"]
    );
    assert_eq!(header(&h, "access-control-allow-credentials"), ["true"]);
    assert_eq!(header(&h, "access-control-max-age"), ["1728000"]);
    assert_eq!(header(&h, "x-echo-method"), ["GET"], "the backend answered");
    let (s, h) = with_origin(&f, "OPTIONS", "any.test", Some("https://x.test")).await;
    assert_eq!(s, 204);
    assert_eq!(header(&h, "access-control-allow-origin"), ["*"]);
    assert!(header(&h, "x-echo-method").is_empty(), "NGINX answered");

    // A list: the allowed origin echoed, with the settings of the annotations.
    let app = "https://app.example.com";
    let (s, h) = with_origin(&f, "GET", "list.test", Some(app)).await;
    assert_eq!(s, 200);
    assert_eq!(header(&h, "access-control-allow-origin"), [app]);
    assert_eq!(header(&h, "access-control-allow-methods"), ["GET, POST"]);
    assert_eq!(header(&h, "access-control-expose-headers"), ["X-Total"]);
    assert_eq!(header(&h, "access-control-max-age"), ["600"]);
    assert_eq!(header(&h, "vary"), ["Origin"]);
    let (s, h) = with_origin(&f, "OPTIONS", "list.test", Some("https://a.example.org")).await;
    assert_eq!(s, 204);
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        ["https://a.example.org"]
    );
    for other in [
        "https://evil.test",
        "https://app.example.com.evil.test",
        "http://app.example.com",
        "https://a.b.example.org",
    ] {
        let (s, h) = with_origin(&f, "GET", "list.test", Some(other)).await;
        assert_eq!(s, 200);
        assert!(
            header(&h, "access-control-allow-origin").is_empty(),
            "{other}: {h:?}"
        );
        assert!(header(&h, "access-control-allow-methods").is_empty());
        // Not a preflight of an allowed origin: the backend answers.
        let (s, h) = with_origin(&f, "OPTIONS", "list.test", Some(other)).await;
        assert_eq!((s, header(&h, "x-echo-method")), (200, vec!["OPTIONS"]));
    }
    let (_, h) = with_origin(&f, "GET", "list.test", None).await;
    assert!(header(&h, "access-control-allow-origin").is_empty());

    // Without enable-cors the other keys do nothing: the backend's header passes.
    let (_, h) = with_origin(&f, "GET", "off.test", Some("https://a.test")).await;
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        ["https://backend.test"]
    );

    // Over HTTPS the server's HSTS header is still sent.
    let r = tls_client(&f, &["a.example.com"])
        .get(format!("https://a.example.com:{}/", f.https))
        .header("Origin", app)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert_eq!(header(h, "access-control-allow-origin"), [app]);
    assert_eq!(
        header(h, "strict-transport-security"),
        ["max-age=31536000; includeSubDomains"]
    );

    // As ingress-nginx: the invalid value is ignored with a Warning naming it, and
    // the Ingress is served without it (issue 36).
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "applied", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cors-allow-origin") && message.contains("ignored"),
        "{bad}"
    );
}

/// A GET with extra request headers: (status, answer headers, echo JSON).
async fn get_with(
    f: &Ferrule,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let mut req = client()
        .get(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let (status, h) = (r.status().as_u16(), r.headers().clone());
    (status, h, r.json().await.unwrap_or_default())
}

/// What the backend receives (`upstream-vhost`, `connection-proxy-header`,
/// `x-forwarded-prefix`, `proxy-http-version`) and how its answer is rewritten
/// (`proxy-redirect-*`, `proxy-cookie-*`); `proxy-buffer-size` lets a large header
/// through that the default buffer refuses with 502.
#[tokio::test]
async fn forwarding_annotations_shape_the_request_and_the_answer() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "fwd.yaml",
        &demo_ingress(
            "fwd",
            "fwd.test",
            &[
                ("upstream-vhost", "internal.svc:8080"),
                ("connection-proxy-header", "keep-alive"),
                ("x-forwarded-prefix", "/api"),
                ("proxy-http-version", "1.0"),
                ("proxy-redirect-from", "http://internal.svc/"),
                ("proxy-redirect-to", "https://public.example/"),
                ("proxy-cookie-domain", "internal.svc public.example"),
                ("proxy-cookie-path", "/inner /"),
            ],
        ),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "big.yaml",
        &demo_ingress(
            "big",
            "big.test",
            &[("proxy-buffer-size", "16k"), ("proxy-buffering", "on")],
        ),
    );
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[("proxy-buffer-size", "16k"), ("proxy-buffers-number", "2")],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    let echo_header = |v: &serde_json::Value, n: &str| v["headers"][n].as_str().map(str::to_owned);
    let (s, h, v) = get_with(
        &f,
        "fwd.test",
        "/",
        &[("X-Echo-Header", "Location=http://internal.svc/next")],
    )
    .await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(
        echo_header(&v, "host").as_deref(),
        Some("internal.svc:8080")
    );
    assert_eq!(echo_header(&v, "connection").as_deref(), Some("keep-alive"));
    assert_eq!(
        echo_header(&v, "x-forwarded-prefix").as_deref(),
        Some("/api")
    );
    assert_eq!(v["version"], "HTTP/1.0");
    assert_eq!(
        h.get("location").unwrap().to_str().unwrap(),
        "https://public.example/next"
    );
    let (_, h, _) = get_with(
        &f,
        "fwd.test",
        "/",
        &[(
            "X-Echo-Header",
            "Set-Cookie=s=1; Domain=internal.svc; Path=/inner",
        )],
    )
    .await;
    assert_eq!(
        h.get("set-cookie").unwrap().to_str().unwrap(),
        "s=1; Domain=public.example; Path=/"
    );

    // Without the annotations: the client's Host, HTTP/1.1, nothing rewritten.
    let (_, h, v) = get_with(
        &f,
        "plain.test",
        "/",
        &[("X-Echo-Header", "Location=http://internal.svc/next")],
    )
    .await;
    assert_eq!(echo_header(&v, "host").as_deref(), Some("plain.test"));
    assert_eq!(echo_header(&v, "x-forwarded-prefix"), None);
    assert_eq!(v["version"], "HTTP/1.1");
    assert_eq!(
        h.get("location").unwrap().to_str().unwrap(),
        "http://internal.svc/next"
    );

    // A 6 KB answer header: too big for NGINX's default 4k buffer, not for 16k.
    let large = format!("X-Large={}", "a".repeat(6000));
    let big = [("X-Echo-Header", large.as_str())];
    assert_eq!(get_with(&f, "plain.test", "/", &big).await.0, 502);
    assert_eq!(get_with(&f, "big.test", "/", &big).await.0, 200);

    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(message.contains("proxy-buffers-number"), "{bad}");
}

/// `proxy-next-upstream: off` and `proxy-next-upstream-tries: 1` let a refused
/// connection answer 502 where the default tries the next endpoint;
/// `enable-access-log: "false"` keeps the location's requests out of the log.
#[tokio::test]
async fn retries_and_access_log_follow_their_annotations() {
    let echo = Echo::start("127.0.0.2").await;
    // Nothing listens on 127.0.0.3 at the echo's port: connections are refused.
    let dead: std::net::SocketAddr = format!("127.0.0.3:{}", echo.addr.port()).parse().unwrap();
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr, dead]));
    m.write("retry.yaml", &demo_ingress("retry", "retry.test", &[]));
    m.write(
        "off.yaml",
        &demo_ingress("off", "off.test", &[("proxy-next-upstream", "off")]),
    );
    m.write(
        "once.yaml",
        &demo_ingress("once", "once.test", &[("proxy-next-upstream-tries", "1")]),
    );
    m.write(
        "quiet.yaml",
        &demo_ingress("quiet", "quiet.test", &[("enable-access-log", "false")]),
    );
    let f = Ferrule::start(m.path(), LUA_ONLY).await;

    let statuses = |host: &'static str| {
        let f = &f;
        async move {
            let mut out = Vec::new();
            for _ in 0..6 {
                out.push(f.get(host, "/").await.0);
            }
            out
        }
    };
    assert_eq!(statuses("retry.test").await, [200; 6], "{}", f.logs());
    for host in ["off.test", "once.test"] {
        let s = statuses(host).await;
        assert!(s.contains(&502) && s.contains(&200), "{host}: {s:?}");
    }

    let logged = |path: &str| {
        std::fs::read_to_string(f.prefix.path().join("nginx/logs/access.log"))
            .unwrap_or_default()
            .contains(path)
    };
    assert_eq!(f.get("quiet.test", "/quiet-1").await.0, 200);
    assert_eq!(f.get("retry.test", "/loud-1").await.0, 200);
    assert!(
        wait_until(std::time::Duration::from_secs(5), || async {
            logged("/loud-1")
        })
        .await,
        "the other location is logged"
    );
    assert!(!logged("/quiet-1"), "enable-access-log: false");
}

/// A backend that keeps what it receives: "METHOD URI HOST BODY-BYTES" per request.
struct Recorder {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(ip: &str) -> Recorder {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let log = log.clone();
            async move {
                let host = req
                    .headers()
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let line = format!("{} {} {host}", req.method(), req.uri());
                let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                    .await
                    .map(|b| b.len())
                    .unwrap_or_default();
                log.lock().unwrap().push(format!("{line} {body}"));
                "recorded"
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Recorder { addr, seen, task }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `mirror-target`: each request of the location is copied to the URL (with its
/// URI, the Host of `mirror-host`, the body unless `mirror-request-body: off`),
/// while the client gets the backend's answer; a URL reading a client's header is
/// refused.
#[tokio::test]
async fn mirror_copies_each_request_and_the_client_gets_the_backend() {
    let echo = Echo::start("127.0.0.2").await;
    let copies = Recorder::start("127.0.0.4").await;
    let target = format!("http://{}$request_uri", copies.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "mirrored.yaml",
        &demo_ingress(
            "mirrored",
            "mirrored.test",
            &[("mirror-target", &target), ("mirror-host", "shadow.test")],
        ),
    );
    m.write(
        "nobody.yaml",
        &demo_ingress(
            "nobody",
            "nobody.test",
            &[("mirror-target", &target), ("mirror-request-body", "off")],
        ),
    );
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[("mirror-target", "http://m.example/$http_x_target")],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    let post = |host: &'static str, path: &'static str| {
        let f = &f;
        async move {
            let r = client()
                .post(format!("http://127.0.0.1:{}{path}", f.http))
                .header("Host", host)
                .body("hello")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            (status, v["backend"].as_str().unwrap_or_default().to_owned())
        }
    };
    assert_eq!(
        post("mirrored.test", "/a?b=1").await,
        (200, echo.addr.to_string()),
        "{}",
        f.logs()
    );
    assert_eq!(post("nobody.test", "/c").await.0, 200);
    let arrived = wait_until(std::time::Duration::from_secs(5), || async {
        copies.seen().len() >= 2
    })
    .await;
    assert!(arrived, "{:?}\n{}", copies.seen(), f.logs());
    let seen = copies.seen();
    assert!(
        seen.contains(&"POST /a?b=1 shadow.test 5".to_owned()),
        "{seen:?}"
    );
    assert!(
        seen.contains(&format!("POST /c {} 0", copies.addr)),
        "without the body, the URL's host: {seen:?}"
    );
    let (s, _) = f.get("plain.test", "/").await;
    assert_eq!(s, 404, "no Ingress for plain.test");
    assert_eq!(copies.seen().len(), 2, "other hosts are not mirrored");

    // As ingress-nginx: the invalid value is ignored with a Warning naming it, and
    // the Ingress is served without it (issue 36).
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "applied", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("mirror-target") && message.contains("ignored"),
        "{bad}"
    );
}

/// `from-to-www-redirect`: the `www.` twin of a host (or the host without `www.`)
/// redirects with 308 and the URI kept, unless an Ingress serves the twin itself.
#[tokio::test]
async fn from_to_www_redirect_sends_the_twin_host_to_the_ingress_host() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let on = [("from-to-www-redirect", "true")];
    m.write("www.yaml", &demo_ingress("www", "www.site.test", &on));
    m.write("bare.yaml", &demo_ingress("bare", "bare.test", &on));
    m.write("taken.yaml", &demo_ingress("taken", "taken.test", &on));
    m.write(
        "theirs.yaml",
        &demo_ingress("theirs", "www.taken.test", &[]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        location_of(&f, "site.test", "/a/b?c=1").await,
        (308, "http://www.site.test/a/b?c=1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(
        location_of(&f, "www.bare.test", "/").await,
        (308, "http://bare.test/".to_owned())
    );
    assert_eq!(f.get("www.site.test", "/x").await.0, 200);
    assert_eq!(f.get("bare.test", "/x").await.0, 200);
    assert_eq!(
        f.backend("www.taken.test", "/").await,
        (200, echo.addr.to_string()),
        "a host an Ingress serves is never redirected"
    );
    assert_eq!(f.get("www.plain.test", "/").await.0, 404);
}

/// The redirects NGINX makes itself (here a snippet's `return 302 /moved`): no port
/// by default, as ingress-nginx; the port with `use-port-in-redirects`; a relative
/// Location with `relative-redirects`.
#[tokio::test]
async fn nginx_s_own_redirects_follow_the_port_and_relative_keys() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let moved = ("configuration-snippet", "return 302 /moved;");
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[moved]));
    m.write(
        "port.yaml",
        &demo_ingress(
            "port",
            "port.test",
            &[moved, ("use-port-in-redirects", "true")],
        ),
    );
    m.write(
        "relative.yaml",
        &demo_ingress(
            "relative",
            "relative.test",
            &[moved, ("relative-redirects", "true")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--allow-snippet-annotations"]).await;

    assert_eq!(
        location_of(&f, "plain.test", "/").await,
        (302, "http://plain.test/moved".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(
        location_of(&f, "port.test", "/").await,
        (302, format!("http://port.test:{}/moved", f.http))
    );
    assert_eq!(
        location_of(&f, "relative.test", "/").await,
        (302, "/moved".to_owned())
    );
}

/// server-alias: more names for the host's server, never one another Ingress
/// serves (even a newer one: an alias does not steal a host), with a Warning.
#[tokio::test]
async fn server_aliases_serve_the_host_but_never_take_another_ingress_s() {
    let echo = Echo::start("127.0.0.2").await;
    let other = Echo::start("127.0.0.3").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("other-svc.yaml", &service("demo", "other", &[other.addr]));
    m.write(
        "main.yaml",
        &demo_ingress(
            "main",
            "main.test",
            &[("server-alias", "alias.test, taken.test")],
        ),
    );
    m.write(
        "taken.yaml",
        &Ing::new("demo", "taken", "2026-06-01T00:00:00Z")
            .nginx("ssl-redirect", "false")
            .rule("taken.test", &[("/", "Prefix", "other")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(
        f.backend("alias.test", "/x").await,
        (200, echo.addr.to_string()),
        "{}",
        f.logs()
    );
    assert_eq!(
        f.backend("main.test", "/x").await,
        (200, echo.addr.to_string())
    );
    assert_eq!(
        f.backend("taken.test", "/x").await,
        (200, other.addr.to_string())
    );
    let main = f.resource("Ingress", "demo", "main").await.unwrap();
    let message = main["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("server-alias: alias taken.test is left out"),
        "{main}"
    );
}
