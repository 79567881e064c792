//! The traffic annotations of ingress-nginx through real NGINX, as a client sees
//! them: redirects (status and `Location`), CORS headers and preflights.

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

    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("permanent-redirect") && message.contains("$http_x"),
        "names the annotation and the value: {bad}"
    );
    assert_eq!(location_of(&f, "bad.test", "/").await.0, 404);
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
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("app-root"),
        "{bad}"
    );
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
    m.write(
        "secret.yaml",
        &tls_secret(
            "demo",
            "a-tls",
            &tls_fixture("a.crt"),
            &tls_fixture("a.key"),
        ),
    );
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

    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(message.contains("cors-allow-origin"), "{bad}");
}
