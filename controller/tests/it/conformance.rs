//! Conformance: what a user of an Ingress controller relies on, asserted with real
//! HTTP through real NGINX (what the backend receives, load balancing, a class
//! changing, TLS, redirects, endpoints becoming ready, proxy settings, rewrites).
//! Which backend answers which host and path is in `test/routing/`, run by
//! `controller/tests/it/routing.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

/// A request through the HTTP port with extra headers and an optional body:
/// (status, response headers, echo JSON or Null).
async fn send(
    f: &Ferrule,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = client()
        .request(
            Method::from_bytes(method.as_bytes()).unwrap(),
            format!("http://127.0.0.1:{}{path}", f.http),
        )
        .header("Host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    let r = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {host}{path}: {e}"));
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn service_of(ns: &str, name: &str, echoes: &[&Echo]) -> String {
    let addrs: Vec<SocketAddr> = echoes.iter().map(|e| e.addr).collect();
    service(ns, name, &addrs)
}

#[tokio::test]
async fn default_backend_gets_every_method_with_path_query_and_headers() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "fallback", &[a.addr]));
    m.write(
        "catch-all.yaml",
        &Ing::new("demo", "catch-all", T0)
            .default_backend("fallback")
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let path = "/some/deep%20path/x%2Fy?q=1&q=2&name=a%20b&empty=";
    for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let body = (method != "GET").then(|| b"payload".to_vec());
        let (s, _, v) = send(&f, method, "anything.test", path, &[], body.clone()).await;
        assert_eq!(s, 200, "{method}: {v}");
        assert_eq!(v["backend"], a.addr.to_string(), "{method}");
        assert_eq!(v["method"], method);
        assert_eq!(v["path"], path, "{method}: path and query preserved");
        assert_eq!(
            v["version"], "HTTP/1.1",
            "{method}: HTTP/1.1 to the backend"
        );
        assert_eq!(v["body_bytes"], body.map_or(0, |b| b.len()), "{method}");
    }
    // HEAD has no body: the echo names the method in a header.
    let (s, h, _) = send(&f, "HEAD", "anything.test", path, &[], None).await;
    assert_eq!(s, 200);
    assert_eq!(h["x-echo-method"], "HEAD");
    assert_eq!(h["x-echo-backend"], a.addr.to_string().as_str());

    // Forwarded headers, Host with its port, a generated request id; a client's
    // Proxy header (httpoxy), X-Scheme, forwarded headers and X-Original-URI do not
    // reach the backend as sent (without use-forwarded-headers), nor twice.
    let spoof = [
        ("Proxy", "http://evil.test:3128"),
        ("X-Scheme", "https"),
        ("X-Real-IP", "10.6.6.6"),
        ("X-Forwarded-For", "10.6.6.6"),
        ("X-Forwarded-Host", "evil.test"),
        ("X-Forwarded-Port", "6666"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Scheme", "https"),
        ("X-Original-URI", "/evil"),
    ];
    let (s, _, v) = send(&f, "GET", "Anything.test:8080", "/h", &spoof, None).await;
    assert_eq!(s, 200);
    let h = &v["headers"];
    assert_eq!(v["repeated"], serde_json::json!([]), "{v}");
    assert!(h.get("proxy").is_none(), "Proxy header passed: {h}");
    assert!(
        h.get("x-original-uri").is_none(),
        "X-Original-URI passed: {h}"
    );
    assert_eq!(h["x-real-ip"], "127.0.0.1");
    assert_eq!(h["x-forwarded-scheme"], "http");
    assert_eq!(h["x-scheme"], "http");
    assert_eq!(h["host"], "Anything.test:8080", "Host preserved as sent");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "Anything.test:8080");
    assert_eq!(h["x-forwarded-port"], f.http.to_string());
    let id = h["x-request-id"].as_str().unwrap_or_default();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "generated X-Request-ID: {id:?}"
    );
    // An incoming request id is kept; ids differ between requests.
    let (_, _, v) = send(
        &f,
        "GET",
        "anything.test",
        "/h",
        &[("X-Request-ID", "caller-chose-this")],
        None,
    )
    .await;
    assert_eq!(v["headers"]["x-request-id"], "caller-chose-this");
    let (_, _, v2) = send(&f, "GET", "anything.test", "/h", &[], None).await;
    assert_ne!(v2["headers"]["x-request-id"].as_str(), Some(id));
}

/// Generated request ids (Ferrule's module draws them from the kernel a page at a
/// time, 256 ids per page and worker): every one in NGINX's form, 32 lowercase hex
/// digits, and no two alike, across several pages of both workers.
#[tokio::test]
async fn generated_request_ids_are_distinct() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("ing.yaml", &demo_ingress("ids", "ids.test", &[]));
    let f = Ferrule::start(m.path(), &[]).await;
    let asks = (0..1200).map(|_| async {
        let (s, seen) = f.get("ids.test", "/").await;
        assert_eq!(s, 200, "{seen}");
        seen["headers"]["x-request-id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let ids: Vec<String> = futures::future::join_all(asks).await;
    for id in &ids {
        assert!(
            id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "not NGINX's form: {id:?}"
        );
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "a request id came twice");
}

#[tokio::test]
async fn load_balancing_reaches_every_endpoint() {
    let echoes = echo_group(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]).await;
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_of("demo", "app", &echoes.iter().collect::<Vec<_>>()),
    );
    m.write(
        "ing.yaml",
        &Ing::new("demo", "app", T0)
            .rule("lb.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let n = 300;
    for _ in 0..n {
        let (s, backend) = f.backend("lb.test", "/").await;
        assert_eq!(s, 200);
        *seen.entry(backend).or_default() += 1;
    }
    assert_eq!(seen.len(), 3, "every endpoint reached: {seen:?}");
    for (b, count) in &seen {
        assert!(
            (n / 6..=n / 2).contains(count),
            "{b} got {count} of {n}: not roughly even ({seen:?})"
        );
    }
}

/// Which classes are ours is in `test/routing/classes.yaml`; this is the change of
/// one: Ingresses without a class follow the default IngressClass while Ferrule runs.
#[tokio::test]
async fn classless_ingresses_follow_the_default_class() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    let route = |name: &str| {
        Ing::new("demo", name, T0).rule(&format!("{name}.class.test"), &[("/", "Prefix", "app")])
    };
    m.write("named.yaml", &route("named").class("ferrule").yaml());
    m.write("classless.yaml", &route("classless").yaml());
    let f = Ferrule::start(m.path(), &[]).await;
    // `ferrule`, ours, is the default class (see Manifests::new)
    assert_eq!(f.get("classless.class.test", "/").await.0, 200);
    // Ours but no longer the default class: Ingresses without a class are dropped.
    m.write("class.yaml", &ingress_class("ferrule", false));
    let dropped = wait_until(Duration::from_secs(5), || async {
        f.get("classless.class.test", "/").await.0 == 404
    })
    .await;
    assert!(
        dropped,
        "classless Ingress still served; log:\n{}",
        f.logs()
    );
    assert_eq!(f.get("named.class.test", "/").await.0, 200);
}

#[tokio::test]
async fn tls_with_sni_and_ssl_redirects() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    m.write("secret.yaml", &a_example_secret());
    m.write(
        "secure.yaml",
        &Ing::new("demo", "secure", T0)
            .rule("a.example.com", &[("/", "Prefix", "app")])
            .tls(&["a.example.com"], "a-tls")
            .yaml(),
    );
    // Same certificate, but redirects switched off.
    m.write(
        "noredirect.yaml",
        &Ing::new("demo", "noredirect", T0)
            .nginx("ssl-redirect", "false")
            .rule("b.example.com", &[("/", "Prefix", "app")])
            .tls(&["b.example.com"], "a-tls")
            .yaml(),
    );
    m.write(
        "forced.yaml",
        &Ing::new("demo", "forced", T0)
            .nginx("force-ssl-redirect", "true")
            .rule("forced.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    m.write(
        "plain.yaml",
        &Ing::new("demo", "plain", T0)
            .rule("plain.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    // TLS 1.2 offers forward-secret AEAD suites only (as ingress-nginx)
    assert!(f.tls12_handshake("a.example.com", "ECDHE+AESGCM"));
    for weak in ["AES128-SHA", "AES256-SHA256", "CAMELLIA128-SHA"] {
        assert!(!f.tls12_handshake("a.example.com", weak), "{weak} accepted");
    }

    // The right certificate for the SNI name, verified against the test CA, over h2.
    let c = tls_client(&f, &["a.example.com", "other.example.com"]);
    let r = c
        .get(format!("https://a.example.com:{}/tls?x=1", f.https))
        .send()
        .await
        .unwrap_or_else(|e| panic!("TLS to a.example.com: {e:?}; log:\n{}", f.logs()));
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2, "HTTP/2 on TLS");
    // HSTS on HTTPS, as ingress-nginx by default
    assert_eq!(
        r.headers()
            .get("strict-transport-security")
            .and_then(|h| h.to_str().ok()),
        Some("max-age=31536000; includeSubDomains")
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["backend"], a.addr.to_string());
    assert_eq!(v["path"], "/tls?x=1");
    assert_eq!(
        v["version"], "HTTP/1.1",
        "HTTP/1.1 to the backend even for h2 clients"
    );
    assert_eq!(v["headers"]["x-forwarded-proto"], "https");
    // As ingress-nginx: 443 over HTTPS, whatever the port NGINX listens on.
    assert_eq!(v["headers"]["x-forwarded-port"], "443");
    // Another name gets the default certificate, which the test CA did not sign.
    let err = c
        .get(format!("https://other.example.com:{}/", f.https))
        .send()
        .await;
    assert!(err.is_err(), "default certificate must not verify: {err:?}");

    // HTTP on a TLS host: 308 to HTTPS with the request URI.
    let (s, h, _) = send(&f, "POST", "a.example.com", "/p/q?x=1&y=2", &[], None).await;
    assert_eq!(s, 308);
    assert_eq!(h["location"], "https://a.example.com/p/q?x=1&y=2");
    // ssl-redirect "false": HTTP is served.
    assert_eq!(
        f.backend("b.example.com", "/").await,
        (200, a.addr.to_string())
    );
    let c = tls_client(&f, &["b.example.com"]);
    let r = c
        .get(format!("https://b.example.com:{}/", f.https))
        .send()
        .await;
    assert!(
        r.is_err(),
        "b.example.com is not in the certificate: TLS must not verify"
    );
    // force-ssl-redirect without TLS on the host.
    let (s, h, _) = send(&f, "GET", "forced.test", "/x", &[], None).await;
    assert_eq!(s, 308);
    assert_eq!(h["location"], "https://forced.test/x");
    // A plain host is served over HTTP, and over HTTPS (h2) with the default
    // certificate: hosts without TLS share the default server's TLS context.
    let (s, h, _) = send(&f, "GET", "plain.test", "/", &[], None).await;
    assert_eq!(s, 200);
    assert!(
        h.get("strict-transport-security").is_none(),
        "no HSTS over HTTP"
    );
    let insecure = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .use_rustls_tls()
        .resolve("plain.test", SocketAddr::from(([127, 0, 0, 1], f.https)))
        .build()
        .unwrap();
    let r = insecure
        .get(format!("https://plain.test:{}/s", f.https))
        .send()
        .await
        .unwrap_or_else(|e| panic!("HTTPS to a plain host: {e:?}; log:\n{}", f.logs()));
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["backend"], a.addr.to_string());
    assert_eq!(v["headers"]["x-forwarded-proto"], "https");
}

#[tokio::test]
async fn default_ssl_certificate_is_served_without_a_valid_own_certificate() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    let (a_crt, wild_crt) = (tls_fixture("a.crt"), tls_fixture("wildcard.crt"));
    m.write(
        "secrets.yaml",
        &[
            tls_secret("demo", "a-tls", &a_crt, &tls_fixture("a.key")),
            tls_secret(
                "ingress-nginx",
                "fallback",
                &wild_crt,
                &tls_fixture("wildcard.key"),
            ),
        ]
        .join("---\n"),
    );
    let ingresses = [
        ("own", "a.example.com", Some("a-tls")),
        ("missing", "m.example.com", Some("no-such-secret")),
        ("plain", "plain.test", None),
    ];
    for (name, host, secret) in ingresses {
        let mut ing = Ing::new("demo", name, T0).rule(host, &[("/", "Prefix", "app")]);
        if let Some(secret) = secret {
            ing = ing.tls(&[host], secret);
        }
        m.write(&format!("{name}.yaml"), &ing.yaml());
    }
    let f = Ferrule::start(
        m.path(),
        &["--default-ssl-certificate", "ingress-nginx/fallback"],
    )
    .await;

    let (own, fallback) = (fingerprint_pem(&a_crt), fingerprint_pem(&wild_crt));
    assert!(!fallback.is_empty() && own != fallback);
    for (sni, want, why) in [
        ("a.example.com", &own, "a valid own Secret wins"),
        ("m.example.com", &fallback, "its Secret is missing"),
        ("plain.test", &fallback, "a host without TLS"),
        ("unknown.example.org", &fallback, "the default server"),
    ] {
        assert_eq!(
            &f.served_fingerprint(sni),
            want,
            "{sni}: {why}; log:\n{}",
            f.logs()
        );
    }
}

#[tokio::test]
async fn a_503_is_early_and_ends_when_an_endpoint_is_ready() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write(
        "svc-unready.yaml",
        &service_endpoints("demo", "unready", a.addr.port(), &[("127.0.0.2", false)]),
    );
    m.write(
        "svc-empty.yaml",
        &service_endpoints("demo", "empty", a.addr.port(), &[]),
    );
    // The manifests source accepts port names Kubernetes would not (it refuses such
    // object names): a `$` in one must stay literal where NGINX expands variables
    // (the backend name, `demo_odd_p$http_x_pick`).
    m.write(
        "svc-odd.yaml",
        &service("demo", "odd", &[a.addr]).replace("name: http,", "name: p$http_x_pick,"),
    );
    m.write(
        "ing.yaml",
        &Ing::new("demo", "app", T0)
            .rule(
                "e.test",
                &[
                    ("/unready", "Prefix", "unready"),
                    ("/empty", "Prefix", "empty"),
                ],
            )
            .yaml(),
    );
    m.write(
        "ing-odd.yaml",
        &Ing::new("demo", "odd", T0)
            .rule("e.test", &[("/odd", "Prefix", "odd")])
            .yaml()
            .replace(r#""number": 80"#, r#""name": "p$http_x_pick""#),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    // Which paths answer 503 is in `test/routing/backends.yaml`.
    assert_eq!(f.get("e.test", "/unready").await.0, 503);
    // An HTTP/2 upload of unknown length (no Content-Length) is answered 503 before
    // its body is read, not 413 after 1 MB of it.
    assert_eq!(
        h2_upload_status(&f, "e.test", "/empty", 2 << 20).await,
        "503"
    );
    assert_eq!(f.backend("e.test", "/odd").await, (200, a.addr.to_string()));
    let (s, _, _) = send(&f, "GET", "e.test", "/odd", &[("X-Pick", "x")], None).await;
    assert_eq!(s, 200, "a request header cannot rename the backend");
    // The endpoint becomes ready: served without anything else changing.
    m.write(
        "svc-unready.yaml",
        &service_endpoints("demo", "unready", a.addr.port(), &[("127.0.0.2", true)]),
    );
    let ok = wait_until(Duration::from_secs(5), || async {
        f.get("e.test", "/unready").await.0 == 200
    })
    .await;
    assert!(ok, "ready endpoint served; log:\n{}", f.logs());
}

#[tokio::test]
async fn proxy_body_size_and_read_timeout() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    m.write(
        "small.yaml",
        &Ing::new("demo", "small", T0)
            .nginx("proxy-body-size", "1k")
            .nginx("proxy-read-timeout", "1")
            .rule("limits.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    m.write(
        "default.yaml",
        &Ing::new("demo", "default", T0)
            .rule("defaults.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let post = |host: &'static str, n: usize| {
        let f = &f;
        async move {
            send(f, "POST", host, "/up", &[], Some(vec![b'x'; n]))
                .await
                .0
        }
    };
    assert_eq!(post("limits.test", 512).await, 200);
    assert_eq!(post("limits.test", 4096).await, 413);
    assert_eq!(post("defaults.test", 4096).await, 200);

    // A backend slower than proxy-read-timeout: 504, after about the timeout.
    let started = Instant::now();
    let (s, _, _) = send(
        &f,
        "GET",
        "limits.test",
        "/slow",
        &[("x-echo-delay-ms", "3000")],
        None,
    )
    .await;
    let took = started.elapsed();
    assert_eq!(s, 504);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "504 after {took:?}, want about 1s"
    );
    // Faster than the timeout: served.
    let (s, _, _) = send(
        &f,
        "GET",
        "limits.test",
        "/slow",
        &[("x-echo-delay-ms", "200")],
        None,
    )
    .await;
    assert_eq!(s, 200);
    // The default read timeout (60s) tolerates the slow backend.
    let (s, _, _) = send(
        &f,
        "GET",
        "defaults.test",
        "/slow",
        &[("x-echo-delay-ms", "1500")],
        None,
    )
    .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn rewrite_target_with_regex_captures() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "app", &[a.addr]));
    m.write(
        "ing.yaml",
        &Ing::new("demo", "rewrite", T0)
            .nginx("use-regex", "true")
            .nginx("rewrite-target", "/$2")
            .rule(
                "rewrite.test",
                &[("/something(/|$)(.*)", "ImplementationSpecific", "app")],
            )
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let cases = [
        ("/something", "/"),
        ("/something/", "/"),
        ("/something/new", "/new"),
        ("/something/a/b?x=1&y=%20", "/a/b?x=1&y=%20"),
        // Regex paths ignore case, as ingress-nginx's (`~*`), and so does the rewrite.
        ("/SomeThing/New", "/New"),
    ];
    for (req, want) in cases {
        let (s, v) = f.get("rewrite.test", req).await;
        assert_eq!(s, 200, "{req}");
        assert_eq!(v["path"], want, "{req} rewritten");
    }
}

/// The status of an HTTP/2 POST over TLS of `len` bytes streamed from a pipe: curl
/// cannot know the length and sends no Content-Length.
async fn h2_upload_status(f: &Ferrule, host: &str, path: &str, len: usize) -> String {
    use tokio::io::AsyncWriteExt;
    let args = [
        "--http2",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-T",
        "-",
    ];
    let mut child = curl_tls_command(f, host, path, &args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The answer may come before the body is sent: a refused write is expected.
    let _ = stdin.write_all(&vec![b'x'; len]).await;
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `service-upstream: "true"`: NGINX proxies to the Service's ClusterIP and port
/// (kube-proxy or a mesh balances behind it), not to its endpoints; an endpoint change
/// does not move it. Another Ingress on the same Service keeps the endpoints.
#[tokio::test]
async fn service_upstream_proxies_to_the_cluster_ip() {
    // the "ClusterIP" is a loopback address with its own server
    let echos = echo_group(&["127.0.0.71", "127.0.0.72", "127.0.0.73"]).await;
    let port = echos[0].addr.port();
    let svc = |endpoint: &str| {
        format!(
            r#"apiVersion: v1
kind: Service
metadata: {{ name: app, namespace: demo }}
spec:
  clusterIP: 127.0.0.71
  ports: [{{ name: http, port: {port}, targetPort: {port} }}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-1
  namespace: demo
  labels: {{ kubernetes.io/service-name: app }}
addressType: IPv4
ports: [{{ name: http, port: {port} }}]
endpoints:
  - addresses: ["{endpoint}"]
    conditions: {{ ready: true }}
"#
        )
    };
    let m = Manifests::new();
    m.write("svc.yaml", &svc("127.0.0.72"));
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            ingress_on_port("mesh", "mesh.test", port, &[("service-upstream", "true")]),
            ingress_on_port("plain", "plain.test", port, &[]),
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let (cluster_ip, first, second) = (
        format!("127.0.0.71:{port}"),
        format!("127.0.0.72:{port}"),
        format!("127.0.0.73:{port}"),
    );
    assert_eq!(f.backend("mesh.test", "/").await, (200, cluster_ip.clone()));
    assert_eq!(f.backend("plain.test", "/").await, (200, first));
    let reloads = f.reloads().await;

    m.write("svc.yaml", &svc("127.0.0.73"));
    let moved = wait_until(Duration::from_secs(10), || async {
        f.backend("plain.test", "/").await == (200, second.clone())
    })
    .await;
    assert!(moved, "the endpoints backend follows; log:\n{}", f.logs());
    for _ in 0..5 {
        assert_eq!(f.backend("mesh.test", "/").await, (200, cluster_ip.clone()));
    }
    assert_eq!(
        f.reloads().await,
        reloads,
        "an endpoint change is no reload"
    );
}

/// An Ingress `name` on `host`, path `/` to Service `app` port `port`, annotated.
fn ingress_on_port(name: &str, host: &str, port: u16, annotations: &[(&str, &str)]) -> String {
    ingress(
        "demo",
        name,
        T0,
        host,
        &[("/", "Prefix", "app")],
        annotations,
    )
    .replace("number: 80", &format!("number: {port}"))
}
