//! Access control through real NGINX, as a client sees it: allow and deny lists
//! (annotations and the ConfigMap's defaults) answer 403, from the client's address.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

/// A GET from source address `from` (any 127.0.0.0/8 address is local): (status,
/// the echo's JSON).
async fn get_from(f: &Ferrule, from: &str, host: &str) -> (u16, Value) {
    let c = reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = c
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn allow_and_deny_lists_answer_403_to_other_clients() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "allow.yaml",
        &demo_ingress(
            "allow",
            "allow.test",
            &[("allowlist-source-range", "127.0.0.5, 10.0.0.0/8")],
        ),
    );
    m.write(
        "old.yaml",
        &demo_ingress(
            "old",
            "old.test",
            &[("whitelist-source-range", "127.0.0.6/32")],
        ),
    );
    m.write(
        "deny.yaml",
        &demo_ingress(
            "deny",
            "deny.test",
            &[("denylist-source-range", "127.0.0.7")],
        ),
    );
    m.write("open.yaml", &demo_ingress("open", "open.test", &[]));
    let f = Ferrule::start(m.path(), &[]).await;

    let (s, v) = get_from(&f, "127.0.0.5", "allow.test").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(
        v["headers"]["x-real-ip"], "127.0.0.5",
        "the backend sees the client"
    );
    assert_eq!(get_from(&f, "127.0.0.1", "allow.test").await.0, 403);
    assert_eq!(get_from(&f, "127.0.0.6", "old.test").await.0, 200);
    assert_eq!(get_from(&f, "127.0.0.5", "old.test").await.0, 403);
    assert_eq!(get_from(&f, "127.0.0.7", "deny.test").await.0, 403);
    assert_eq!(get_from(&f, "127.0.0.1", "deny.test").await.0, 200);
    assert_eq!(get_from(&f, "127.0.0.9", "open.test").await.0, 200);
    let allow = f.resource("Ingress", "demo", "allow").await.unwrap();
    assert_eq!(allow["state"], "applied", "{allow}");

    // An endpoint change of an allowlisted location needs no reload.
    let workers = f.worker_pids();
    let other = Echo::start("127.0.0.3").await;
    m.write("svc.yaml", &service("demo", "echo", &[other.addr]));
    let moved = wait_until(Duration::from_secs(5), || async {
        get_from(&f, "127.0.0.5", "allow.test").await.1["backend"] == other.addr.to_string()
    })
    .await;
    assert!(moved, "{}", f.logs());
    assert_eq!(f.worker_pids(), workers, "no reload");
    assert_eq!(get_from(&f, "127.0.0.1", "allow.test").await.0, 403);

    // An invalid list rejects its Ingress (never served without it).
    m.write(
        "allow.yaml",
        &demo_ingress(
            "allow",
            "allow.test",
            &[("allowlist-source-range", "127.0.0.5; allow all")],
        ),
    );
    let rejected = wait_until(Duration::from_secs(5), || async {
        f.resource("Ingress", "demo", "allow")
            .await
            .is_some_and(|r| r["state"] == "rejected")
    })
    .await;
    assert!(rejected, "{:?}", f.resources().await);
    f.old_workers_gone().await;
    assert_eq!(get_from(&f, "127.0.0.5", "allow.test").await.0, 404);
}

#[tokio::test]
async fn the_configmap_lists_are_the_default_an_ingress_replaces() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[("whitelist-source-range", "127.0.0.5")]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "own.yaml",
        &demo_ingress(
            "own",
            "own.test",
            &[("allowlist-source-range", "127.0.0.6")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(get_from(&f, "127.0.0.5", "plain.test").await.0, 200);
    assert_eq!(get_from(&f, "127.0.0.1", "plain.test").await.0, 403);
    assert_eq!(get_from(&f, "127.0.0.6", "own.test").await.0, 200);
    assert_eq!(get_from(&f, "127.0.0.5", "own.test").await.0, 403);

    // An invalid global list fails closed: 403 for every location relying on it,
    // reported on the ConfigMap; an Ingress with its own list keeps it.
    m.write(
        "cm.yaml",
        &configmap(&[("whitelist-source-range", "127.0.0.5/99")]),
    );
    let closed = wait_until(Duration::from_secs(5), || async {
        get_from(&f, "127.0.0.5", "plain.test").await.0 == 403
    })
    .await;
    assert!(closed, "{}", f.logs());
    let reported = wait_until(Duration::from_secs(5), || async {
        f.resource("ConfigMap", "demo", "ferrule")
            .await
            .is_some_and(|cm| {
                cm["state"] == "rejected"
                    && cm["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("whitelist-source-range")
            })
    })
    .await;
    assert!(reported, "{:?}", f.resources().await);
    assert_eq!(get_from(&f, "127.0.0.6", "own.test").await.0, 200);
}

/// A raw HTTP/1.1 exchange from source address `from`, `prefix` (a PROXY protocol
/// line, or nothing) first: (status, the echo's JSON).
async fn raw_from(
    f: &Ferrule,
    from: &str,
    prefix: &str,
    host: &str,
    xff: Option<&str>,
) -> (u16, Value) {
    let xff = xff
        .map(|x| format!("X-Forwarded-For: {x}\r\n"))
        .unwrap_or_default();
    raw_with_headers(f, from, prefix, host, &xff).await
}

/// [`raw_from`] with `headers` (whole lines, each ending in CRLF).
async fn raw_with_headers(
    f: &Ferrule,
    from: &str,
    prefix: &str,
    host: &str,
    headers: &str,
) -> (u16, Value) {
    let req =
        format!("{prefix}GET / HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n");
    let (status, body) = raw_http_from(from, f.http, &req).await;
    // The echo answers with a chunked body: its JSON is between the chunk sizes.
    let json = body
        .find('{')
        .and_then(|i| body.rfind('}').map(|j| &body[i..=j]));
    (
        status,
        json.and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or(Value::Null),
    )
}

/// Behind proxies: an echo backend, the ConfigMap `demo/ferrule` with `keys` (the
/// client address keys), host `allow.test` allowing only `allowed`, and a Ready
/// Ferrule (keep the echo and the manifests alive with it).
async fn behind_proxies(allowed: &str, keys: &[(&str, &str)]) -> (Echo, Manifests, Ferrule) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("cm.yaml", &configmap(keys));
    m.write(
        "allow.yaml",
        &demo_ingress(
            "allow",
            "allow.test",
            &[("allowlist-source-range", allowed)],
        ),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    (echo, m, f)
}

/// Behind a proxy: the client address comes from X-Forwarded-For of trusted
/// peers only, and the allowlist and the backend both see it.
#[tokio::test]
async fn forwarded_headers_are_believed_from_trusted_proxies_only() {
    let (_echo, m, f) = behind_proxies(
        "10.1.2.3",
        &[
            ("use-forwarded-headers", "true"),
            ("proxy-real-ip-cidr", "127.0.0.1/32"),
            ("compute-full-forwarded-for", "true"),
        ],
    )
    .await;

    // The trusted proxy relays a client: recursive, from the right.
    let (s, v) = raw_from(
        &f,
        "127.0.0.1",
        "",
        "allow.test",
        Some("10.9.9.9, 10.1.2.3"),
    )
    .await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(v["headers"]["x-real-ip"], "10.1.2.3", "{v}");
    assert_eq!(
        v["headers"]["x-forwarded-for"], "10.9.9.9, 10.1.2.3, 10.1.2.3",
        "{v}"
    );
    // Anyone else claiming that address is still itself.
    assert_eq!(
        raw_from(&f, "127.0.0.8", "", "allow.test", Some("10.1.2.3"))
            .await
            .0,
        403
    );
    assert_eq!(
        raw_from(&f, "127.0.0.1", "", "allow.test", None).await.0,
        403
    );

    // Without proxy-real-ip-cidr no peer is trusted (ingress-nginx would trust all),
    // and the ConfigMap says so.
    m.write("cm.yaml", &configmap(&[("use-forwarded-headers", "true")]));
    let untrusted = wait_until(Duration::from_secs(5), || async {
        raw_from(&f, "127.0.0.1", "", "allow.test", Some("10.1.2.3"))
            .await
            .0
            == 403
    })
    .await;
    assert!(untrusted, "{}", f.logs());
    let warned = wait_until(Duration::from_secs(5), || async {
        f.resource("ConfigMap", "demo", "ferrule")
            .await
            .is_some_and(|cm| {
                cm["state"] == "applied"
                    && cm["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("proxy-real-ip-cidr names no proxy")
            })
    })
    .await;
    assert!(warned, "{:?}", f.resources().await);
}

/// Behind a load balancer that ends TLS (use-forwarded-headers): a trusted proxy's
/// X-Forwarded-Proto, -Host and -Port are the request's, so its HTTPS requests are
/// not redirected again and the backend learns what the client used; anyone else's
/// are ignored (ingress-nginx believes them from every peer).
#[tokio::test]
async fn a_trusted_proxys_scheme_host_and_port_reach_the_backend_and_the_redirect() {
    let echo = Echo::start("127.0.0.2").await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "lb", &["lb.test"]);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("tls.yaml", &tls_secret("demo", "lb-tls", &cert, &key));
    let web = ingress(
        "demo",
        "web",
        T0,
        "lb.test",
        &[("/", "Prefix", "echo")],
        &[],
    );
    m.write("web.yaml", &with_tls(&web, &["lb.test"], "lb-tls"));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("use-forwarded-headers", "true"),
            ("proxy-real-ip-cidr", "127.0.0.1/32"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let forwarded = "X-Forwarded-Proto: https\r\nX-Forwarded-Host: www.example.com\r\n\
                     X-Forwarded-Port: 443\r\n";
    let get = |from: &'static str, headers: &'static str| async move {
        let req = format!("GET /a HTTP/1.1\r\nHost: lb.test\r\n{headers}Connection: close\r\n\r\n");
        let (status, body) = raw_http_from(from, f.http, &req).await;
        let json = body
            .find('{')
            .and_then(|i| body.rfind('}').map(|j| body[i..=j].to_owned()));
        (
            status,
            json.and_then(|j| serde_json::from_str::<Value>(&j).ok()),
        )
    };

    let (s, v) = get("127.0.0.1", forwarded).await;
    assert_eq!(s, 200, "TLS ended in front: no redirect; {}", f.logs());
    let h = &v.unwrap()["headers"];
    assert_eq!(h["x-forwarded-proto"], "https", "{h}");
    assert_eq!(h["x-forwarded-host"], "www.example.com", "{h}");
    assert_eq!(h["x-forwarded-port"], "443", "{h}");
    // Plain HTTP through the proxy is redirected as before.
    let plain = "X-Forwarded-Proto: http\r\n";
    assert_eq!(get("127.0.0.1", plain).await.0, 308);
    // From an untrusted peer the headers are the client's claims: redirected.
    assert_eq!(get("127.0.0.8", forwarded).await.0, 308);
}

/// PROXY protocol on the listeners: the address of a trusted proxy's PROXY line.
#[tokio::test]
async fn a_proxy_protocol_line_is_believed_from_trusted_proxies_only() {
    let (_echo, _m, f) = behind_proxies(
        "10.1.2.3",
        &[
            ("use-proxy-protocol", "true"),
            ("proxy-real-ip-cidr", "127.0.0.1"),
        ],
    )
    .await;
    let line = |client: &str| format!("PROXY TCP4 {client} 127.0.0.1 40000 8080\r\n");

    let (s, v) = raw_from(&f, "127.0.0.1", &line("10.1.2.3"), "allow.test", None).await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(v["headers"]["x-real-ip"], "10.1.2.3", "{v}");
    assert_eq!(v["headers"]["x-forwarded-for"], "10.1.2.3", "{v}");
    // The port the client reached the proxy on, as ingress-nginx sends it.
    assert_eq!(v["headers"]["x-forwarded-port"], "8080", "{v}");
    assert_eq!(
        raw_from(&f, "127.0.0.1", &line("10.7.7.7"), "allow.test", None)
            .await
            .0,
        403
    );
    // An untrusted peer's line is not believed.
    assert_eq!(
        raw_from(&f, "127.0.0.8", &line("10.1.2.3"), "allow.test", None)
            .await
            .0,
        403
    );
}

/// `use-proxy-protocol` with `use-forwarded-headers` (an HTTP proxy, then a TCP load
/// balancer in front): behind a trusted PROXY line, X-Forwarded-For names the
/// client; behind an untrusted one, the line does, and a client cannot choose its
/// address with the intermediate header (ingress-nginx's realip read a client's
/// X-Forwarded-For-Proxy-Protocol before setting its own).
#[tokio::test]
async fn forwarded_headers_behind_a_trusted_proxy_protocol_line_name_the_client() {
    let (_echo, _m, f) = behind_proxies(
        "203.0.113.7",
        &[
            ("use-proxy-protocol", "true"),
            ("use-forwarded-headers", "true"),
            // the load balancer (the connection) and the HTTP proxy (its PROXY line)
            ("proxy-real-ip-cidr", "127.0.0.1,10.9.0.0/16"),
        ],
    )
    .await;
    let ask = |from: &'static str, proxy: &'static str, headers: &'static str| {
        let f = &f;
        async move {
            let line = format!("PROXY TCP4 {proxy} 127.0.0.1 40000 80\r\n");
            let (status, v) = raw_with_headers(f, from, &line, "allow.test", headers).await;
            (
                status,
                v["headers"]["x-real-ip"].as_str().unwrap_or("").to_owned(),
            )
        }
    };
    let xff = "X-Forwarded-For: 203.0.113.7\r\n";
    // The HTTP proxy is trusted: the client is the one it names.
    assert_eq!(
        ask("127.0.0.1", "10.9.1.1", xff).await,
        (200, "203.0.113.7".to_owned()),
        "{}",
        f.logs()
    );
    // Through more trusted proxies, the first untrusted address from the right.
    assert_eq!(
        ask(
            "127.0.0.1",
            "10.9.1.1",
            "X-Forwarded-For: 203.0.113.7, 10.9.3.3\r\n"
        )
        .await,
        (200, "203.0.113.7".to_owned())
    );
    // An untrusted PROXY address is the client, whatever its request says.
    assert_eq!(ask("127.0.0.1", "198.51.100.9", xff).await.0, 403);
    let spoof = "X-Forwarded-For-Proxy-Protocol: 203.0.113.7\r\n";
    assert_eq!(ask("127.0.0.1", "198.51.100.9", spoof).await.0, 403);
    assert_eq!(ask("127.0.0.1", "10.9.1.1", spoof).await.0, 403);
    // A trusted proxy that names nobody: its own address.
    let (s, _) = ask("127.0.0.1", "10.9.1.1", "").await;
    assert_eq!(s, 403);
    // A connection from an untrusted peer: neither its line nor its headers count.
    assert_eq!(ask("127.0.0.8", "10.9.1.1", xff).await.0, 403);
}

/// Issue N8: `forwarded-for-proxy-protocol-header` may name a header NGINX itself
/// knows, `X-Real-IP` or `X-Forwarded-For`, which the realip module reads through
/// NGINX's pointers to the request's copies, not by name: those must be the module's
/// copy, never the client's. Before, a client behind an untrusted PROXY line chose
/// its address with the header (and passed the allowlist), while a genuine client
/// behind the trusted proxy was seen as the load balancer and denied. The backend
/// receives each header once.
#[tokio::test]
async fn a_proxy_protocol_header_nginx_knows_is_not_the_clients() {
    for header in ["X-Real-IP", "X-Forwarded-For"] {
        let (_echo, _m, f) = behind_proxies(
            "203.0.113.7",
            &[
                ("use-proxy-protocol", "true"),
                ("use-forwarded-headers", "true"),
                ("forwarded-for-proxy-protocol-header", header),
                ("proxy-real-ip-cidr", "127.0.0.1,10.9.0.0/16"),
            ],
        )
        .await;
        let ask = |proxy: &'static str, headers: String| {
            let f = &f;
            async move {
                let line = format!("PROXY TCP4 {proxy} 127.0.0.1 40000 80\r\n");
                raw_with_headers(f, "127.0.0.1", &line, "allow.test", &headers).await
            }
        };
        // A genuine client, named by the trusted HTTP proxy.
        let (s, v) = ask("10.9.1.1", "X-Forwarded-For: 203.0.113.7\r\n".into()).await;
        assert_eq!(s, 200, "{header}: the genuine client; {}", f.logs());
        assert_eq!(v["headers"]["x-real-ip"], "203.0.113.7", "{header}: {v}");
        assert_eq!(v["repeated"], serde_json::json!([]), "{header}: {v}");
        // A spoofer behind an untrusted PROXY line names the allowed address.
        let spoof = format!("{header}: 203.0.113.7\r\nX-Forwarded-For: 203.0.113.7\r\n");
        let (s, v) = ask("198.51.100.9", spoof).await;
        assert_eq!(s, 403, "{header}: the spoofer passed the allowlist: {v}");
        if header == "X-Real-IP" {
            // Behind the trusted proxy, a client's own X-Real-IP changes nothing.
            let (s, v) = ask(
                "10.9.1.1",
                "X-Forwarded-For: 203.0.113.7\r\nX-Real-IP: 198.51.100.66\r\n".into(),
            )
            .await;
            assert_eq!(s, 200, "{header}: {v}");
            assert_eq!(v["headers"]["x-real-ip"], "203.0.113.7", "{v}");
            assert_eq!(v["repeated"], serde_json::json!([]), "{v}");
            let (s, v) = ask("10.9.1.1", "X-Real-IP: 203.0.113.7\r\n".into()).await;
            assert_eq!(s, 403, "{header}: {v}");
        }
    }

    // Any other header NGINX parses itself would keep what NGINX made of the
    // client's copy: refused, and the ConfigMap is held back with the reason.
    let (_echo, m, f) = behind_proxies("203.0.113.7", &[]).await;
    m.write(
        "cm.yaml",
        &configmap(&[
            ("use-proxy-protocol", "true"),
            ("use-forwarded-headers", "true"),
            ("forwarded-for-proxy-protocol-header", "User-Agent"),
            ("proxy-real-ip-cidr", "127.0.0.1"),
        ]),
    );
    let refused = f
        .reports(
            "ConfigMap",
            "demo",
            "ferrule",
            "NGINX parses \"User-Agent\" itself",
            Duration::from_secs(20),
        )
        .await;
    assert!(
        refused,
        "{:?}",
        f.resource("ConfigMap", "demo", "ferrule").await
    );
}

/// Hashes of "s3cret" in every format this NGINX's auth_basic verifies
/// (openssl passwd -apr1/-1/-5/-6, crypt(3) bcrypt and yescrypt, {SHA}, {SSHA}).
const HASHES: &[(&str, &str)] = &[
    ("apr1", "$apr1$abcdefgh$M2T3erDstkD7SsE2QQnfH0"),
    ("md5", "$1$abcdefgh$7.vq19w/w3Vm.hk1FOA7Q/"),
    (
        "sha256",
        "$5$abcdefgh$OcHWp0Vj4l19dnE2g4tHD4hbItEZgO0bjRV6LjwCLoA",
    ),
    (
        "sha512",
        "$6$abcdefgh$Z7KfoKnKTSZrzo5VZ0YubGLQOj9ov6sHo9TmE3zIU/LHKhpE30zCnZ0mcIXYf9r9rQ4DYaXoxAFSPFlcWdxjB.",
    ),
    (
        "bcrypt",
        "$2y$05$abcdefghijklmnopqrstuuLK7U1u6pVRmL7L1BBM2aS35PSZnDXlK",
    ),
    (
        "yescrypt",
        "$y$j9T$abcdefghijklmnop$tySFNIfWVy.ymkBDHEMW6bAQ07dlkLVGalgni.VV4l8",
    ),
    ("sha", "{SHA}/vNB+F2HQ559kaLUZbmHHvZrXpg="),
    ("ssha", "{SSHA}hLwtZzF5GlUU5lfNH2fSFKRBCyFzYWx0MTIzNA=="),
    ("plain", "{PLAIN}s3cret"),
];

/// A GET with basic credentials (`None`: without): status and WWW-Authenticate.
async fn get_as(f: &Ferrule, host: &str, user: Option<(&str, &str)>) -> (u16, String) {
    let mut req = client()
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host);
    if let Some((u, p)) = user {
        req = req.basic_auth(u, Some(p));
    }
    let r = req.send().await.unwrap();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (r.status().as_u16(), challenge)
}

#[tokio::test]
async fn basic_auth_asks_for_credentials_and_checks_every_hash_format() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let htpasswd: String = HASHES.iter().map(|(u, h)| format!("{u}:{h}\n")).collect();
    m.write("users.yaml", &secret("users", &[("auth", &htpasswd)]));
    m.write(
        "map.yaml",
        &secret("map", &[("alice", "{PLAIN}wonder"), ("bob", HASHES[0].1)]),
    );
    let basic = |secret: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut a = vec![("auth-type", "basic"), ("auth-secret", secret)];
        a.extend_from_slice(extra);
        a
    };
    m.write(
        "file.yaml",
        &demo_ingress(
            "file",
            "file.test",
            &basic("users", &[("auth-realm", "Staff $only")]),
        ),
    );
    m.write(
        "mapped.yaml",
        &demo_ingress(
            "mapped",
            "map.test",
            &basic("map", &[("auth-secret-type", "auth-map")]),
        ),
    );
    m.write(
        "elsewhere.yaml",
        &demo_ingress("elsewhere", "elsewhere.test", &basic("other/users", &[])),
    );
    m.write(
        "missing.yaml",
        &demo_ingress("missing", "missing.test", &basic("nosuch", &[])),
    );
    m.write(
        "digest.yaml",
        &demo_ingress(
            "digest",
            "digest.test",
            &[("auth-type", "digest"), ("auth-secret", "users")],
        ),
    );
    m.write(
        "open.yaml",
        &demo_ingress("open", "open.test", &[("auth-secret", "users")]),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    let (s, challenge) = get_as(&f, "file.test", None).await;
    assert_eq!(s, 401, "{}", f.logs());
    assert_eq!(challenge, "Basic realm=\"Staff $only\"");
    for (user, _) in HASHES {
        assert_eq!(
            get_as(&f, "file.test", Some((user, "s3cret"))).await.0,
            200,
            "{user}"
        );
        assert_eq!(
            get_as(&f, "file.test", Some((user, "wrong"))).await.0,
            401,
            "{user}"
        );
    }
    assert_eq!(
        get_as(&f, "map.test", Some(("alice", "wonder"))).await.0,
        200
    );
    assert_eq!(get_as(&f, "map.test", Some(("bob", "s3cret"))).await.0, 200);
    assert_eq!(
        get_as(&f, "map.test", Some(("apr1", "s3cret"))).await.0,
        401
    );

    // What cannot be set up is not served, and says why.
    for (name, host, why) in [
        (
            "elsewhere",
            "elsewhere.test",
            "a Secret of another namespace is not read",
        ),
        ("missing", "missing.test", "Secret demo/nosuch not found"),
        ("digest", "digest.test", "digest needs a module"),
        ("open", "open.test", "without auth-type: basic"),
    ] {
        let r = f.resource("Ingress", "demo", name).await.unwrap();
        assert_eq!(r["state"], "rejected", "{r}");
        assert!(r["message"].as_str().unwrap().contains(why), "{r}");
        assert_eq!(get_as(&f, host, None).await.0, 404, "{name}");
    }

    // The users' file is the workers' alone, named after the Secret only.
    let auth_dir = f.prefix.path().join("nginx/auth");
    let files: Vec<_> = std::fs::read_dir(&auth_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for p in &files {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(p).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{p:?}");
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(meta.uid(), nobody.uid.as_raw(), "{p:?}");
        }
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains("file") && !name.contains("users"), "{name}");
    }

    // A rotated Secret applies; a broken one keeps the Ingress from being served.
    m.write(
        "users.yaml",
        &secret("users", &[("auth", "carol:{PLAIN}new\n")]),
    );
    let rotated = wait_until(Duration::from_secs(5), || async {
        get_as(&f, "file.test", Some(("carol", "new"))).await.0 == 200
    })
    .await;
    assert!(rotated, "{}", f.logs());
    assert_eq!(
        get_as(&f, "file.test", Some(("apr1", "s3cret"))).await.0,
        401
    );
    m.write(
        "users.yaml",
        &secret("users", &[("auth", "carol:plaintext\n")]),
    );
    let refused = wait_until(Duration::from_secs(5), || async {
        f.resource("Ingress", "demo", "file")
            .await
            .is_some_and(|r| {
                r["state"] == "rejected"
                    && r["message"].as_str().unwrap_or_default().contains("line 1")
            })
    })
    .await;
    assert!(refused, "{:?}", f.resources().await);
    // (403 while the old workers find their users' file gone: never a 200)
    let gone = wait_until(Duration::from_secs(5), || async {
        let s = get_as(&f, "file.test", Some(("carol", "new"))).await.0;
        assert_ne!(s, 200, "served without its users");
        s == 404
    })
    .await;
    assert!(gone, "{}", f.logs());
}

/// The ssl-redirect comes before the 401: credentials are never asked for over
/// plain HTTP on a host with TLS.
#[tokio::test]
async fn basic_auth_redirects_to_https_before_asking() {
    let echo = Echo::start("127.0.0.2").await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "web", &["tls.test"]);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("tls.yaml", &tls_secret("demo", "web-tls", &cert, &key));
    m.write("users.yaml", &secret("users", &[("auth", "u:{PLAIN}p\n")]));
    m.write(
        "ing.yaml",
        &Ing::new("demo", "web", T0)
            .rule("tls.test", &[("/", "Prefix", "echo")])
            .tls(&["tls.test"], "web-tls")
            .nginx("auth-type", "basic")
            .nginx("auth-secret", "users")
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(get_as(&f, "tls.test", None).await.0, 308, "{}", f.logs());
    let body = curl_tls(
        &f,
        "tls.test",
        "/",
        &["-w", "%{http_code}", "-o", "/dev/null"],
    )
    .await;
    assert_eq!(body.trim(), "401");
    let body = curl_tls(
        &f,
        "tls.test",
        "/",
        &["-u", "u:p", "-w", "%{http_code}", "-o", "/dev/null"],
    )
    .await;
    assert_eq!(body.trim(), "200");
}

/// An authentication service on loopback: `X-Test-Auth: ok` → 200 with
/// `X-Auth-User: alice`, `cookie` → 200 with `Set-Cookie: session=alice`, `deny` →
/// 403, anything else → 401 with `Set-Cookie: attempt=1`. It records what it got
/// (method, X-Original-URL, body size) for the test.
struct AuthService {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    /// TCP connections accepted.
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl AuthService {
    async fn start() -> AuthService {
        let listener = tokio::net::TcpListener::bind("127.0.0.3:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let log = log.clone();
            async move { auth_answer(req, log).await }
        });
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        AuthService {
            addr,
            seen,
            connections,
            task,
        }
    }

    fn last(&self) -> Value {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }
}

/// What [`AuthService`] answers to `req`.
async fn auth_answer(
    req: axum::extract::Request,
    log: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let (parts, body) = req.into_parts();
    let h = |n: &str| {
        parts
            .headers
            .get(n)
            .map(|v| v.to_str().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    let mut entry = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.to_string(),
        "original_url": h("x-original-url"),
        "team": h("x-team"),
        "original_method": h("x-original-method"),
        "redirect": h("x-auth-request-redirect"),
    });
    let verdict = h("x-test-auth");
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    entry["body_bytes"] = serde_json::json!(body.len());
    log.lock().unwrap().push(entry);
    match verdict.as_str() {
        // A body, which NGINX reads only where it keeps the connection.
        "ok" => (StatusCode::OK, [("x-auth-user", "alice")], "authorized").into_response(),
        "cookie" => (StatusCode::OK, [("set-cookie", "session=alice")], "").into_response(),
        "deny" => (StatusCode::FORBIDDEN, "").into_response(),
        _ => (
            StatusCode::UNAUTHORIZED,
            [
                ("www-authenticate", "Bearer realm=\"test\""),
                ("set-cookie", "attempt=1"),
            ],
            "",
        )
            .into_response(),
    }
}

impl Drop for AuthService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

use axum::response::IntoResponse;

/// A request with `X-Test-Auth: verdict` (and a spoofed `X-Auth-User`): status,
/// Location and the echo's JSON.
async fn get_with_verdict(
    f: &Ferrule,
    host: &str,
    path: &str,
    verdict: &str,
) -> (u16, String, Value) {
    let r = client()
        .post(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host)
        .header("X-Test-Auth", verdict)
        .header("X-Auth-User", "mallory")
        .body("a body the auth service must not get")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location, r.json().await.unwrap_or(Value::Null))
}

/// Issue N10: with `enable-underscores-in-headers`, a client's header that is one
/// Ferrule sets once case is ignored and `_` reads as `-` (`X_Forwarded_For`, which
/// CGI, Rack and WSGI read as `X-Forwarded-For`: Puma's CVE-2024-45614) never
/// reaches the backend: the forwarded headers, a header of the ConfigMap's
/// `proxy-set-headers`, the auth service's `auth-response-headers`. Other names
/// with underscores still pass, as the key asks.
#[tokio::test]
async fn lookalikes_of_the_headers_ferrule_sets_never_reach_the_backend() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "authed.yaml",
        &demo_ingress(
            "authed",
            "authed.test",
            &[("auth-url", &url), ("auth-response-headers", "X-Auth-User")],
        ),
    );
    m.write(
        "req.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: req, namespace: demo }\n\
         data: { X-Tenant-Id: ferrule }\n",
    );
    m.write(
        "cm.yaml",
        &configmap(&[
            ("enable-underscores-in-headers", "true"),
            ("proxy-set-headers", "demo/req"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let lookalikes = [
        ("X_Forwarded_For", "6.6.6.6"),
        ("X_Real_IP", "6.6.6.6"),
        ("X_Forwarded_Proto", "https"),
        ("X_Forwarded_Host", "evil.example"),
        ("x-forwarded_port", "1"),
        ("X_TENANT_ID", "evil"),
        ("X_Auth_User", "mallory"),
    ];
    let get = |host: &'static str| {
        let f = &f;
        async move {
            let mut req = client()
                .get(format!("http://127.0.0.1:{}/", f.http))
                .header("Host", host)
                .header("X-Test-Auth", "ok")
                .header("My_Header", "kept");
            for (k, v) in lookalikes {
                req = req.header(k, v);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // Where no auth service answers X-Auth-User, a client's X_Auth_User is its own.
    for (host, underscored) in [
        ("plain.test", &["my_header", "x_auth_user"][..]),
        ("authed.test", &["my_header"]),
    ] {
        let (s, v) = get(host).await;
        assert_eq!(s, 200, "{host}: {v}; {}", f.logs());
        let h = v["headers"].as_object().unwrap();
        let passed: Vec<&String> = h.keys().filter(|k| k.contains('_')).collect();
        assert_eq!(passed, underscored, "{host}: {v}");
        assert_eq!(h["my_header"], "kept", "{host}: {v}");
        // Ferrule's own, with the connection's values.
        assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{host}: {v}");
        assert_eq!(h["x-real-ip"], "127.0.0.1", "{host}: {v}");
        assert_eq!(h["x-forwarded-proto"], "http", "{host}: {v}");
        assert_eq!(h["x-forwarded-host"], host, "{host}: {v}");
        assert_eq!(h["x-tenant-id"], "ferrule", "{host}: {v}");
        assert_eq!(v["repeated"], serde_json::json!([]), "{host}: {v}");
    }
    let (_, v) = get("authed.test").await;
    assert_eq!(v["headers"]["x-auth-user"], "alice", "{v}");
}

#[tokio::test]
async fn external_auth_decides_every_request_and_never_lets_through_on_failure() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let down = format!("http://127.0.0.1:{}/check", free_port());
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "signin.yaml",
        &demo_ingress(
            "signin",
            "signin.test",
            &[
                ("auth-url", &url),
                ("auth-method", "POST"),
                ("auth-response-headers", "X-Auth-User"),
                ("auth-signin", "https://login.example/start"),
            ],
        ),
    );
    m.write(
        "plain.yaml",
        &demo_ingress("plain", "plain.test", &[("auth-url", &url)]),
    );
    m.write(
        "down.yaml",
        &demo_ingress("down", "down.test", &[("auth-url", &down)]),
    );
    m.write(
        "bad.yaml",
        &demo_ingress("bad", "bad.test", &[("auth-url", "http://$host/check")]),
    );
    m.write(
        "alone.yaml",
        &demo_ingress(
            "alone",
            "alone.test",
            &[("auth-signin", "https://login.example/")],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    // 2xx: through, with the auth answer's header (not the client's).
    let (s, _, v) = get_with_verdict(&f, "signin.test", "/app?x=1", "ok").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(v["headers"]["x-auth-user"], "alice", "{v}");
    let seen = auth.last();
    assert_eq!(seen["method"], "POST", "{seen}");
    assert_eq!(seen["path"], "/check", "{seen}");
    assert_eq!(
        seen["body_bytes"], 0,
        "the body stays with the request: {seen}"
    );
    assert_eq!(seen["original_url"], "http://signin.test/app?x=1", "{seen}");
    assert_eq!(seen["original_method"], "POST", "{seen}");
    assert_eq!(seen["redirect"], "/app?x=1", "{seen}");
    let (s, _, v) = get_with_verdict(&f, "plain.test", "/", "ok").await;
    assert_eq!(s, 200);
    assert!(
        v["headers"]
            .get("x-auth-user")
            .is_some_and(|u| u == "mallory"),
        "{v}"
    );

    // 401: to the sign-in page with the original URL, or a 401 without one.
    let (s, location, _) = get_with_verdict(&f, "signin.test", "/app?x=1&y=2", "").await;
    assert_eq!(s, 302);
    assert_eq!(
        location,
        "https://login.example/start?rd=http://signin.test%2Fapp%3Fx%3D1%26y%3D2"
    );
    assert_eq!(get_with_verdict(&f, "plain.test", "/", "").await.0, 401);
    // 403 denies; an auth service that cannot be reached answers 500.
    assert_eq!(
        get_with_verdict(&f, "signin.test", "/", "deny").await.0,
        403
    );
    assert_eq!(get_with_verdict(&f, "down.test", "/", "ok").await.0, 500);

    // The subrequest's location is not reachable from outside.
    let internal = f.get("signin.test", "/_ferrule/auth/").await.0;
    assert_ne!(internal, 200);
    let files = std::fs::read_dir(f.prefix.path().join("nginx/conf/servers")).unwrap();
    let conf: String = files
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .find(|c| c.contains("signin.test"))
        .unwrap();
    let auth_location = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("location = \"/_ferrule/auth/"))
        .map(|rest| format!("/_ferrule/auth/{}", rest.split('"').next().unwrap()))
        .expect("an auth location");
    assert_eq!(
        get_with_verdict(&f, "signin.test", &auth_location, "ok")
            .await
            .0,
        404
    );

    // What cannot be honoured is not served.
    for (name, why) in [
        ("bad", "variables are not allowed"),
        ("alone", "without auth-url, nothing would be checked"),
    ] {
        let r = f.resource("Ingress", "demo", name).await.unwrap();
        assert_eq!(r["state"], "rejected", "{r}");
        assert!(r["message"].as_str().unwrap().contains(why), "{r}");
    }
}

/// A request's status and `Set-Cookie` with `X-Test-Auth: verdict`.
async fn cookie_with_verdict(f: &Ferrule, host: &str, verdict: &str) -> (u16, Option<String>) {
    let r = client()
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host)
        .header("X-Test-Auth", verdict)
        .send()
        .await
        .unwrap();
    let cookie = r
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), cookie)
}

/// `auth-cache-key` keeps the auth service's answers: one subrequest for many
/// requests with the same key. The service's `Set-Cookie` reaches the client on
/// success, and on errors too with `auth-always-set-cookie`; the server's HSTS
/// header survives the location's `add_header`.
/// `auth-keepalive`: the connections to the auth service are kept and reused
/// (ingress-nginx does it with Lua and only without HTTP/2; here through a relay of
/// NGINX's own), while every request is still decided by the service.
#[tokio::test]
async fn external_auth_keepalive_reuses_connections_to_the_auth_service() {
    use std::sync::atomic::Ordering;
    let echo = Echo::start("127.0.0.2").await;
    let kept = AuthService::start().await;
    let plain = AuthService::start().await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let kept_url = format!("http://{}/check?team=a", kept.addr);
    m.write(
        "kept.yaml",
        &demo_ingress(
            "kept",
            "kept.test",
            &[
                ("auth-url", &kept_url),
                ("auth-response-headers", "X-Auth-User"),
                ("auth-keepalive", "4"),
                ("auth-keepalive-requests", "100"),
                ("auth-keepalive-timeout", "30"),
            ],
        ),
    );
    let plain_url = format!("http://{}/check", plain.addr);
    m.write(
        "plain.yaml",
        &demo_ingress("plain", "plain.test", &[("auth-url", &plain_url)]),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    const N: usize = 20;
    for host in ["kept.test", "plain.test"] {
        for _ in 0..N {
            let (status, _, echoed) = get_with_verdict(&f, host, "/", "ok").await;
            assert_eq!(status, 200, "{host}; log:\n{}", f.logs());
            if host == "kept.test" {
                assert_eq!(echoed["headers"]["x-auth-user"], "alice", "{echoed}");
            }
        }
    }
    // The service saw the subrequest as without the relay: its path and query, the
    // original URL, no body.
    let last = kept.last();
    assert_eq!(last["path"], "/check?team=a", "{last}");
    assert_eq!(last["original_url"], "http://kept.test/", "{last}");
    assert_eq!(last["body_bytes"], 0, "{last}");
    // Kept: a connection per worker at most; without keepalive, one per request.
    let workers = f.worker_pids().len();
    let kept_connections = kept.connections.load(Ordering::SeqCst);
    assert!(
        (1..=workers).contains(&kept_connections),
        "{kept_connections} connections for {N} requests ({workers} workers)"
    );
    assert_eq!(plain.connections.load(Ordering::SeqCst), N);
    // Still decided every time: a refusal is a refusal.
    assert_eq!(get_with_verdict(&f, "kept.test", "/", "deny").await.0, 403);
    assert_eq!(get_with_verdict(&f, "kept.test", "/", "no").await.0, 401);
    assert_eq!(kept.seen.lock().unwrap().len(), N + 2);
}

#[tokio::test]
async fn external_auth_caches_answers_and_passes_its_cookie() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cached.yaml",
        &demo_ingress(
            "cached",
            "cached.test",
            &[
                ("auth-url", &url),
                ("auth-cache-key", "$http_x_test_auth"),
                ("auth-cache-duration", "200 1m"),
            ],
        ),
    );
    m.write(
        "plain.yaml",
        &demo_ingress("plain", "plain.test", &[("auth-url", &url)]),
    );
    m.write(
        "always.yaml",
        &demo_ingress(
            "always",
            "always.test",
            &[("auth-url", &url), ("auth-always-set-cookie", "true")],
        ),
    );
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[
                ("auth-url", &url),
                ("auth-cache-key", "$http_x_test_auth"),
                ("auth-cache-duration", "200 soon"),
            ],
        ),
    );
    m.write("secret.yaml", &a_example_secret());
    m.write(
        "secure.yaml",
        &Ing::new("demo", "secure", T0)
            .nginx("auth-url", &url)
            .rule("a.example.com", &[("/", "Prefix", "echo")])
            .tls(&["a.example.com"], "a-tls")
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let asked = || auth.seen.lock().unwrap().len();

    // Cached: the same key asks once; another key is asked (and 403 is not cached).
    let before = asked();
    for _ in 0..3 {
        let (s, _, _) = get_with_verdict(&f, "cached.test", "/", "ok").await;
        assert_eq!(s, 200, "{}", f.logs());
    }
    assert_eq!(asked() - before, 1, "three requests, one subrequest");
    for _ in 0..2 {
        assert_eq!(
            get_with_verdict(&f, "cached.test", "/", "deny").await.0,
            403
        );
    }
    assert_eq!(asked() - before, 3, "403 is not in the cached statuses");
    // Without auth-cache-key, every request is asked.
    let before = asked();
    for _ in 0..2 {
        assert_eq!(get_with_verdict(&f, "plain.test", "/", "ok").await.0, 200);
    }
    assert_eq!(asked() - before, 2);

    // The auth service's cookie: on success; on a 401 only with always-set-cookie.
    let (s, cookie) = cookie_with_verdict(&f, "plain.test", "cookie").await;
    assert_eq!((s, cookie.as_deref()), (200, Some("session=alice")));
    let (s, cookie) = cookie_with_verdict(&f, "plain.test", "").await;
    assert_eq!((s, cookie), (401, None));
    let (s, cookie) = cookie_with_verdict(&f, "always.test", "").await;
    assert_eq!((s, cookie.as_deref()), (401, Some("attempt=1")));

    // Over HTTPS, the location's add_header keeps the server's HSTS header.
    let r = tls_client(&f, &["a.example.com"])
        .get(format!("https://a.example.com:{}/", f.https))
        .header("X-Test-Auth", "cookie")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", f.logs());
    let h = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(h("set-cookie").as_deref(), Some("session=alice"));
    assert_eq!(
        h("strict-transport-security").as_deref(),
        Some("max-age=31536000; includeSubDomains")
    );

    let r = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    let message = r["message"].as_str().unwrap();
    assert!(message.contains("auth-cache-duration"), "{r}");
    assert!(message.contains("is not a time"), "{r}");
}

/// The ConfigMap's `global-auth-url` covers every Ingress that sets no `auth-url`
/// and does not opt out, but not the paths of `no-auth-locations` (an ACME
/// challenge); an invalid value closes what it covers.
#[tokio::test]
async fn global_auth_covers_every_ingress_that_does_not_opt_out() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("global-auth-url", &url),
            ("global-auth-response-headers", "X-Auth-User"),
        ]),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "out.yaml",
        &demo_ingress("out", "out.test", &[("enable-global-auth", "false")]),
    );
    let challenge = "/.well-known/acme-challenge/token";
    m.write(
        "acme.yaml",
        &ingress(
            "demo",
            "acme",
            T0,
            "plain.test",
            &[(challenge, "Exact", "echo")],
            &[("ssl-redirect", "false")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;

    assert_eq!(get_with_verdict(&f, "plain.test", "/", "").await.0, 401);
    let (s, _, v) = get_with_verdict(&f, "plain.test", "/app", "ok").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(v["headers"]["x-auth-user"], "alice", "{v}");
    assert_eq!(auth.last()["original_url"], "http://plain.test/app");
    assert_eq!(get_with_verdict(&f, "out.test", "/", "").await.0, 200);
    assert_eq!(
        get_with_verdict(&f, "plain.test", challenge, "").await.0,
        200
    );

    // Invalid: closed where it applies (403), reported on the ConfigMap.
    m.write(
        "cm.yaml",
        &configmap(&[("global-auth-url", "http://$host/check")]),
    );
    let closed = wait_until(Duration::from_secs(5), || async {
        get_with_verdict(&f, "plain.test", "/", "ok").await.0 == 403
    })
    .await;
    assert!(closed, "{}", f.logs());
    // The report follows the reload that closed the location.
    let reported = f
        .reports(
            "ConfigMap",
            "demo",
            "ferrule",
            "global-auth-url",
            Duration::from_secs(5),
        )
        .await;
    assert!(reported, "{:?}", f.resources().await);
    assert_eq!(get_with_verdict(&f, "out.test", "/", "").await.0, 200);
}

/// `n` GETs in a row from `from`: their statuses.
async fn burst(f: &Ferrule, from: &str, host: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get_from(f, from, host).await.0);
    }
    out
}

#[tokio::test]
async fn rate_limits_refuse_the_excess_of_each_client_and_spare_the_allowlist() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let limited: &[(&str, &str)] = &[("limit-rpm", "2"), ("limit-burst-multiplier", "1")];
    m.write("a.yaml", &demo_ingress("a", "a.test", limited));
    m.write("b.yaml", &demo_ingress("b", "b.test", limited));
    let mut spared = limited.to_vec();
    spared.push(("limit-allowlist", "127.0.0.5/32"));
    m.write(
        "spared.yaml",
        &demo_ingress("spared", "spared.test", &spared),
    );
    m.write(
        "conn.yaml",
        &demo_ingress("conn", "conn.test", &[("limit-connections", "1")]),
    );
    m.write("cm.yaml", &configmap(&[("limit-req-status-code", "429")]));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;

    // 2 a minute with a burst of 2: the first requests pass, then 429.
    let a = burst(&f, "127.0.0.1", "a.test", 6).await;
    assert_eq!(a[0], 200, "{a:?} {}", f.logs());
    assert!(a.iter().filter(|s| **s == 200).count() <= 3, "{a:?}");
    assert_eq!(*a.last().unwrap(), 429, "{a:?}");
    // Another client, and another location with the same rate, count on their own.
    assert_eq!(get_from(&f, "127.0.0.9", "a.test").await.0, 200);
    assert_eq!(get_from(&f, "127.0.0.1", "b.test").await.0, 200);
    // The allowlist is not limited; others on that location are.
    let spared_client = burst(&f, "127.0.0.5", "spared.test", 6).await;
    assert!(spared_client.iter().all(|s| *s == 200), "{spared_client:?}");
    let other = burst(&f, "127.0.0.6", "spared.test", 6).await;
    assert_eq!(*other.last().unwrap(), 429, "{other:?}");

    // One connection at a time per client (default status 503).
    let slow = || async {
        client()
            .get(format!("http://127.0.0.1:{}/", f.http))
            .header("Host", "conn.test")
            .header("x-echo-delay-ms", "700")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let (one, two, three) = tokio::join!(slow(), slow(), slow());
    let mut got = vec![one, two, three];
    got.sort();
    assert_eq!(got[0], 200, "{got:?}");
    assert_eq!(got[2], 503, "{got:?}");
}

/// `limit-conn-zone-variable`: what tells clients apart, here a header (an API key),
/// so one address with two keys is two clients and two addresses with one key one.
#[tokio::test]
async fn the_limit_key_variable_tells_clients_apart() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let limited: &[(&str, &str)] = &[("limit-rpm", "2"), ("limit-burst-multiplier", "1")];
    m.write("a.yaml", &demo_ingress("a", "a.test", limited));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("limit-req-status-code", "429"),
            ("limit-conn-zone-variable", "$http_x_api_key"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let from = |ip: &'static str, key: &'static str| {
        let f = &f;
        async move {
            reqwest::Client::builder()
                .local_address(ip.parse::<std::net::IpAddr>().unwrap())
                .build()
                .unwrap()
                .get(format!("http://127.0.0.1:{}/", f.http))
                .header("Host", "a.test")
                .header("X-Api-Key", key)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let mut first = Vec::new();
    for _ in 0..6 {
        first.push(from("127.0.0.1", "one").await);
    }
    assert_eq!(first[0], 200, "{first:?} {}", f.logs());
    assert_eq!(*first.last().unwrap(), 429, "{first:?}");
    // Another address with the same key is the same client; another key is not.
    assert_eq!(from("127.0.0.9", "one").await, 429);
    assert_eq!(from("127.0.0.1", "two").await, 200);
}

/// A GET from `from` with basic credentials (`None`: without): the status.
async fn get_from_as(f: &Ferrule, from: &str, host: &str, user: Option<(&str, &str)>) -> u16 {
    let c = reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut req = c
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", host);
    if let Some((u, p)) = user {
        req = req.basic_auth(u, Some(p));
    }
    req.send().await.unwrap().status().as_u16()
}

/// `satisfy: any`: the office network without a password, everyone else with one;
/// `all` (the default): both.
#[tokio::test]
async fn satisfy_combines_the_allowlist_and_basic_auth() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("users.yaml", &secret("users", &[("auth", "u:{PLAIN}p\n")]));
    let both: &[(&str, &str)] = &[
        ("auth-type", "basic"),
        ("auth-secret", "users"),
        ("allowlist-source-range", "127.0.0.5"),
    ];
    let mut any = both.to_vec();
    any.push(("satisfy", "any"));
    m.write("any.yaml", &demo_ingress("any", "any.test", &any));
    m.write("all.yaml", &demo_ingress("all", "all.test", both));
    let f = Ferrule::start(m.path(), &[]).await;
    let creds = Some(("u", "p"));
    assert_eq!(
        get_from_as(&f, "127.0.0.5", "any.test", None).await,
        200,
        "{}",
        f.logs()
    );
    assert_eq!(get_from_as(&f, "127.0.0.1", "any.test", None).await, 401);
    assert_eq!(get_from_as(&f, "127.0.0.1", "any.test", creds).await, 200);
    assert_eq!(get_from_as(&f, "127.0.0.5", "all.test", None).await, 401);
    assert_eq!(get_from_as(&f, "127.0.0.5", "all.test", creds).await, 200);
    assert_eq!(get_from_as(&f, "127.0.0.1", "all.test", creds).await, 403);
}

/// Runs `openssl args` in `dir`; it must succeed.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`name.crt`/`name.key` in `dir`); returns its certificate's PEM.
fn ca(dir: &std::path::Path, name: &str) -> String {
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &format!("{name}.key"),
        "-out",
        &format!("{name}.crt"),
        "-days",
        "2",
        "-subj",
        &format!("/CN={name}"),
    ]);
    std::fs::read_to_string(dir.join(format!("{name}.crt"))).unwrap()
}

/// A client certificate `cn` signed by CA `ca` (files `cn.crt`, `cn.key` in `dir`).
fn client_cert(dir: &std::path::Path, ca: &str, cn: &str) {
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &format!("{cn}.key"),
        "-out",
        &format!("{cn}.csr"),
        "-subj",
        &format!("/CN={cn}"),
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        &format!("{cn}.csr"),
        "-CA",
        &format!("{ca}.crt"),
        "-CAkey",
        &format!("{ca}.key"),
        "-CAcreateserial",
        "-out",
        &format!("{cn}.crt"),
        "-days",
        "2",
    ]);
}

/// An HTTPS GET of `host` with SNI `sni` and the client certificate `cn` of `dir`
/// (`None`: without): (status, body).
async fn mtls_get(
    f: &Ferrule,
    sni: &str,
    host: &str,
    dir: &std::path::Path,
    cn: Option<&str>,
) -> (u16, String) {
    let mut c = tokio::process::Command::new("curl");
    c.args([
        "-sk",
        "-w",
        "\n%{http_code}",
        "-H",
        &format!("Host: {host}"),
    ])
    .arg("--resolve")
    .arg(format!("{sni}:{}:127.0.0.1", f.https));
    if let Some(cn) = cn {
        c.arg("--cert").arg(dir.join(format!("{cn}.crt")));
        c.arg("--key").arg(dir.join(format!("{cn}.key")));
    }
    let out = c
        .arg(format!("https://{sni}:{}/", f.https))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[tokio::test]
async fn client_certificates_are_checked_against_the_ca_and_the_names() {
    let echo = Echo::start("127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let good_ca = ca(dir.path(), "good-ca");
    ca(dir.path(), "other-ca");
    client_cert(dir.path(), "good-ca", "alice");
    client_cert(dir.path(), "good-ca", "bob");
    client_cert(dir.path(), "other-ca", "mallory");
    let (cert, key, _) = self_signed(dir.path(), "web", &["mtls.test", "plain.test"]);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("tls.yaml", &tls_secret("demo", "web-tls", &cert, &key));
    m.write("ca.yaml", &secret("ca", &[("ca.crt", &good_ca)]));
    m.write(
        "mtls.yaml",
        &Ing::new("demo", "mtls", T0)
            .rule("mtls.test", &[("/", "Prefix", "echo")])
            .tls(&["mtls.test"], "web-tls")
            .nginx("ssl-redirect", "false")
            .nginx("auth-tls-secret", "ca")
            .nginx("auth-tls-pass-certificate-to-upstream", "true")
            .nginx("auth-tls-match-cn", "CN=(alice|carol)")
            .yaml(),
    );
    m.write(
        "plain.yaml",
        &Ing::new("demo", "plain", T0)
            .rule("plain.test", &[("/", "Prefix", "echo")])
            .tls(&["plain.test"], "web-tls")
            .yaml(),
    );
    // Younger, on the same host, asking for other settings: not served.
    m.write(
        "younger.yaml",
        &Ing::new("demo", "younger", "2026-02-01T00:00:00Z")
            .rule("mtls.test", &[("/other", "Prefix", "echo")])
            .nginx("auth-tls-secret", "ca")
            .nginx("auth-tls-verify-client", "optional")
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let d = dir.path();

    let (s, body) = mtls_get(&f, "mtls.test", "mtls.test", d, Some("alice")).await;
    assert_eq!(s, 200, "{body} {}", f.logs());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["headers"]["ssl-client-verify"], "SUCCESS", "{v}");
    assert!(
        v["headers"]["ssl-client-subject-dn"]
            .as_str()
            .unwrap()
            .contains("CN=alice"),
        "{v}"
    );
    assert!(
        v["headers"]["ssl-client-cert"]
            .as_str()
            .unwrap()
            .contains("BEGIN%20CERTIFICATE"),
        "{v}"
    );
    // No certificate, another CA's: refused by NGINX (400); a name not listed: 403.
    assert_eq!(mtls_get(&f, "mtls.test", "mtls.test", d, None).await.0, 400);
    assert_eq!(
        mtls_get(&f, "mtls.test", "mtls.test", d, Some("mallory"))
            .await
            .0,
        400
    );
    assert_eq!(
        mtls_get(&f, "mtls.test", "mtls.test", d, Some("bob"))
            .await
            .0,
        403
    );
    // Never over plain HTTP, even with ssl-redirect off.
    assert_eq!(f.get("mtls.test", "/").await.0, 308);
    // Another host's SNI does not carry a request for this one past the check.
    let (s, _) = mtls_get(&f, "plain.test", "mtls.test", d, None).await;
    assert_ne!(s, 200, "SNI plain.test, Host mtls.test");
    assert_eq!(
        mtls_get(&f, "plain.test", "plain.test", d, None).await.0,
        200
    );

    let r = f.resource("Ingress", "demo", "younger").await.unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("oldest Ingress"),
        "{r}"
    );
}

/// `auth-snippet` reaches the auth subrequest where snippets are allowed; without
/// them the Ingress is rejected (served without the snippet, it could be open).
/// The ConfigMap's `global-auth-snippet` is the administrator's: always honoured.
#[tokio::test]
async fn auth_snippets_reach_the_auth_service_only_where_allowed() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let snippet = [
        ("auth-url", url.as_str()),
        ("auth-snippet", "proxy_set_header X-Team blue;"),
    ];
    m.write("team.yaml", &demo_ingress("team", "team.test", &snippet));
    let f = Ferrule::start(m.path(), &[]).await;
    let r = f.resource("Ingress", "demo", "team").await.unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("auth-snippet"),
        "{r}"
    );
    assert_eq!(f.get("team.test", "/").await.0, 404);
    drop(f);

    let f = Ferrule::start(m.path(), &["--allow-snippet-annotations"]).await;
    let (s, _, _) = get_with_verdict(&f, "team.test", "/", "ok").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(auth.last()["team"], "blue");
    drop(f);

    m.remove("team.yaml");
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    m.write(
        "cm.yaml",
        &configmap(&[
            ("global-auth-url", &url),
            ("global-auth-snippet", "proxy_set_header X-Team red;"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let (s, _, _) = get_with_verdict(&f, "plain.test", "/", "ok").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(auth.last()["team"], "red");
}

/// CVE-2026-24513 was an error page answering for an auth service: a 401 became
/// the page's 200 and the request went through. Here an error backend that answers
/// 200 to everything writes the page of the 401 and the 403, whose status stays,
/// and the protected backend is never reached without the auth service's yes.
#[tokio::test]
async fn an_error_page_never_lets_a_request_past_external_auth() {
    let echo = Echo::start("127.0.0.2").await;
    let pages = Echo::start("127.0.0.4").await;
    let auth = AuthService::start().await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("errors.yaml", &service("demo", "errors", &[pages.addr]));
    let url = format!("http://{}/check", auth.addr);
    m.write(
        "secure.yaml",
        &demo_ingress(
            "secure",
            "secure.test",
            &[
                ("auth-url", &url),
                ("custom-http-errors", "401,403,500"),
                ("default-backend", "errors"),
            ],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    for (verdict, status) in [("", 401), ("deny", 403)] {
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}/private", f.http))
            .header("Host", "secure.test")
            .header("X-Test-Auth", verdict)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{verdict:?}: {}", f.logs());
        let page: Value = r.json().await.unwrap();
        assert_eq!(
            page["backend"],
            pages.addr.to_string(),
            "the error page: {page}"
        );
        assert_eq!(page["headers"]["x-code"], status.to_string());
    }
    let (s, _, _) = get_with_verdict(&f, "secure.test", "/private", "ok").await;
    assert_eq!(s, 200);
}

/// `auth-proxy-set-headers` and `custom-headers` read a ConfigMap of the Ingress's
/// own namespace: the auth service and the client get its headers as written (a
/// `$` is no variable); another namespace's ConfigMap, or a response header the
/// administrator does not allow, rejects the Ingress by name.
#[tokio::test]
async fn header_lists_of_the_ingress_s_namespace_reach_the_auth_service_and_clients() {
    let echo = Echo::start("127.0.0.2").await;
    let auth = AuthService::start().await;
    let url = format!("http://{}/check", auth.addr);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let cm = |ns: &str, name: &str, data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: {name}, namespace: {ns} }}\ndata: {data}\n---\n"
        )
    };
    m.write(
        "lists.yaml",
        &[
            cm("demo", "auth-headers", r#"{ X-Team: "blue $host" }"#),
            cm(
                "demo",
                "resp",
                r#"{ X-Team: "red $host", X-Frame-Options: DENY }"#,
            ),
            cm("demo", "secret-ish", "{ X-Internal: yes }"),
            cm("other", "resp", "{ X-Team: theirs }"),
        ]
        .concat(),
    );
    m.write(
        "cm.yaml",
        &configmap(&[("global-allowed-response-headers", "X-Team, x-frame-options")]),
    );
    let ing = |name: &str, host: &str, ann: &[(&str, &str)]| {
        m.write(&format!("{name}.yaml"), &demo_ingress(name, host, ann))
    };
    ing(
        "authed",
        "auth.test",
        &[
            ("auth-url", &url),
            ("auth-proxy-set-headers", "auth-headers"),
        ],
    );
    ing("custom", "custom.test", &[("custom-headers", "resp")]);
    ing("cross", "cross.test", &[("custom-headers", "other/resp")]);
    ing(
        "unlisted",
        "unlisted.test",
        &[("custom-headers", "secret-ish")],
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;

    let (s, _, _) = get_with_verdict(&f, "auth.test", "/", "ok").await;
    assert_eq!(s, 200, "{}", f.logs());
    assert_eq!(auth.last()["team"], "blue $host", "{}", auth.last());

    let r = client()
        .get(format!("http://127.0.0.1:{}/", f.http))
        .header("Host", "custom.test")
        .header("x-echo-header", "X-Frame-Options=SAMEORIGIN")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let all = |name: &str| -> Vec<String> {
        (r.headers().get_all(name).iter())
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(all("x-frame-options"), ["DENY"], "{:?}", r.headers());
    assert_eq!(all("x-team"), ["red $host"], "{:?}", r.headers());

    for (name, needle) in [
        (
            "cross",
            "custom-headers other/resp: a ConfigMap of another namespace is not read",
        ),
        (
            "unlisted",
            "header X-Internal is not allowed by the ConfigMap's global-allowed-response-headers",
        ),
    ] {
        assert!(
            f.reports("Ingress", "demo", name, needle, Duration::from_secs(5))
                .await,
            "{name}: {:?}",
            f.resource("Ingress", "demo", name).await
        );
    }
    assert_eq!(f.get("cross.test", "/").await.0, 404);
}
