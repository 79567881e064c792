//! `backend-protocol`: HTTPS, GRPC and GRPCS backends reached through both balancers,
//! and `proxy-ssl-*` (the backend verified, a client certificate presented).
//! The backend is a private NGINX that answers with what it saw (scheme, protocol,
//! URI, content type), so each test shows that the request left Ferrule over TLS
//! and/or HTTP/2 exactly as the annotation asked.

use std::time::Duration;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";
const NJS: &[&str] = &["--balancer", "njs"];

/// A private NGINX serving the TLS fixtures `files` from its own directory; `server`
/// is the body of its one `server` block, given that directory.
struct PrivateNginx {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl PrivateNginx {
    fn start(files: &[&str], server: impl FnOnce(&str) -> String) -> PrivateNginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        for f in files {
            std::fs::write(dir.path().join(f), tls_fixture(f)).unwrap();
        }
        let conf = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\nworker_processes 1;\nevents {{}}\n\
             http {{\n  access_log off;\n  server {{\n{}\n  }}\n}}\n",
            server(&d)
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx");
        PrivateNginx { child, _dir: dir }
    }
}

impl Drop for PrivateNginx {
    /// SIGTERM, not SIGKILL: a killed master would leave its worker behind.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A private NGINX with three listeners on one address: TLS (HTTP/1.1), cleartext
/// HTTP/2 and TLS + HTTP/2. Every answer is "$scheme $server_protocol $request_uri
/// $http_content_type".
pub struct ProtocolBackend {
    _nginx: PrivateNginx,
    /// TLS, HTTP/1.1 (backend-protocol HTTPS).
    pub https: u16,
    /// Cleartext HTTP/2 (GRPC).
    pub h2c: u16,
    /// TLS and HTTP/2 (GRPCS).
    pub h2s: u16,
}

impl ProtocolBackend {
    pub fn start(ip: &str) -> ProtocolBackend {
        let (https, h2c, h2s) = (free_port(), free_port(), free_port());
        let nginx = PrivateNginx::start(&["a.crt", "a.key"], |d| {
            format!(
                "    listen {ip}:{https} ssl;\n    listen {ip}:{h2c} http2;\n    \
                 listen {ip}:{h2s} ssl http2;\n    \
                 ssl_certificate {d}/a.crt;\n    ssl_certificate_key {d}/a.key;\n    \
                 location / {{\n      default_type text/plain;\n      \
                 return 200 \"$scheme $server_protocol $request_uri $http_content_type\";\n    }}"
            )
        });
        ProtocolBackend {
            _nginx: nginx,
            https,
            h2c,
            h2s,
        }
    }
}

/// A gRPC-shaped call (HTTP/2 over TLS, `content-type: application/grpc`) to `host`
/// through Ferrule's HTTPS port: the body and "\n<status> <HTTP version>".
pub async fn grpc_call(f: &Ferrule, host: &str) -> String {
    let args = [
        "--http2",
        "-H",
        "content-type: application/grpc",
        "-w",
        "\n%{http_code} %{http_version}",
    ];
    curl_tls(f, host, "/pkg.Service/Call", &args).await
}

/// A plain HTTP GET to `host` through Ferrule's HTTP port: (status, body).
async fn http_get(f: &Ferrule, host: &str, path: &str) -> (u16, String) {
    match client()
        .get(format!("http://127.0.0.1:{}{path}", f.http))
        .header("Host", host)
        .send()
        .await
    {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

async fn each_protocol_reaches_its_backend(ip: &str, balancer: &[&str]) {
    let b = ProtocolBackend::start(ip);
    let m = Manifests::new();
    for (svc, port, proto, host) in [
        ("tls", b.https, "HTTPS", "https.test"),
        ("grpc", b.h2c, "GRPC", "grpc.test"),
        ("grpcs", b.h2s, "GRPCS", "grpcs.test"),
    ] {
        m.write(
            &format!("{svc}.yaml"),
            &service_endpoints("demo", svc, port, &[(ip, true)]),
        );
        m.write(
            &format!("ing-{svc}.yaml"),
            &Ing::new("demo", svc, T0)
                .nginx("backend-protocol", proto)
                .rule(host, &[("/", "Prefix", svc)])
                .yaml(),
        );
    }
    let f = Ferrule::start(m.path(), balancer).await;

    let https_ok = wait_until(Duration::from_secs(5), || async {
        http_get(&f, "https.test", "/x?y=1").await.0 == 200
    })
    .await;
    assert!(https_ok, "HTTPS backend; log:\n{}", f.logs());
    assert_eq!(
        http_get(&f, "https.test", "/x?y=1").await,
        (200, "https HTTP/1.1 /x?y=1 ".to_owned()),
        "backend-protocol HTTPS: TLS to the peer, the URI unchanged"
    );

    let grpc_ok = wait_until(Duration::from_secs(5), || async {
        grpc_call(&f, "grpc.test").await.starts_with("http ")
    })
    .await;
    assert!(
        grpc_ok,
        "GRPC backend: {:?}",
        grpc_call(&f, "grpc.test").await
    );
    assert_eq!(
        grpc_call(&f, "grpc.test").await,
        "http HTTP/2.0 /pkg.Service/Call application/grpc\n200 2",
        "backend-protocol GRPC: cleartext HTTP/2 to the peer"
    );
    assert_eq!(
        grpc_call(&f, "grpcs.test").await,
        "https HTTP/2.0 /pkg.Service/Call application/grpc\n200 2",
        "backend-protocol GRPCS: HTTP/2 over TLS to the peer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_https_grpc_and_grpcs_backends_carry_traffic() {
    each_protocol_reaches_its_backend("127.0.0.47", &["--balancer", "lua"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_https_grpc_and_grpcs_backends_carry_traffic() {
    each_protocol_reaches_its_backend("127.0.0.48", NJS).await;
}

/// A backend answering 64 MiB, MiB by MiB, as its client takes them: the count of
/// MiB it has written so far.
async fn large_answer_backend(
    ip: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    let app = axum::Router::new().fallback(move || {
        let count = count.clone();
        async move {
            count.store(0, Ordering::SeqCst);
            let chunks = futures::stream::unfold(0usize, move |n| {
                let count = count.clone();
                async move {
                    (n < 64).then(|| {
                        count.store(n, Ordering::SeqCst);
                        (Ok::<_, std::io::Error>(vec![b'x'; 1 << 20]), n + 1)
                    })
                }
            });
            axum::body::Body::from_stream(chunks)
        }
    });
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, written, task)
}

/// Starts a GET of the large answer and reads only its first bytes: the connection
/// stays open, the client reads nothing more.
async fn stalled_client(f: &Ferrule) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", f.http))
        .await
        .unwrap();
    s.write_all(b"GET /large HTTP/1.1\r\nHost: large.test\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 64];
    let n = s.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
    s
}

/// Proxy buffering is off by default, as in ingress-nginx: an answer streams at the
/// client's pace (server-sent events and other streams are not held in NGINX), and
/// the ConfigMap's `proxy-buffering: on` lets NGINX take the whole answer from the
/// backend however slowly the client reads.
#[tokio::test]
async fn answers_stream_at_the_clients_pace_unless_the_configmap_buffers() {
    use std::sync::atomic::Ordering;
    let (addr, written, task) = large_answer_backend("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "large", &[addr]));
    let ing = ingress(
        "demo",
        "large",
        T0,
        "large.test",
        &[("/", "Prefix", "large")],
        &[],
    );
    m.write("ing.yaml", &ing);
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;

    let _client = stalled_client(&f).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = written.load(Ordering::SeqCst);
    assert!(
        held < 48,
        "the backend is held at the client's pace: {held} MiB written"
    );
    drop(_client);

    let reloads = f.reloads().await;
    m.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ferrule, namespace: demo }\n\
         data: { proxy-buffering: \"on\" }\n",
    );
    // Counted once new workers serve it; then the old ones must be gone, or the one
    // connection below may meet one of them (no buffering).
    let reloaded = wait_until(Duration::from_secs(10), || async {
        f.reloads().await > reloads
    })
    .await;
    assert!(reloaded, "{}", f.logs());
    f.old_workers_gone().await;
    let _client = stalled_client(&f).await;
    let absorbed = wait_until(Duration::from_secs(20), || async {
        written.load(Ordering::SeqCst) == 63
    })
    .await;
    assert!(
        absorbed,
        "NGINX buffers the whole answer: {} MiB",
        written.load(Ordering::SeqCst)
    );
    task.abort();
}

/// A private NGINX serving a.example.com's certificate (signed by the test CA) that
/// asks for a client certificate of the same CA and answers "$ssl_client_verify
/// $ssl_client_s_dn $ssl_server_name".
fn tls_backend(ip: &str, port: u16) -> PrivateNginx {
    PrivateNginx::start(&["a.crt", "a.key", "ca.crt"], |d| {
        format!(
            "    listen {ip}:{port} ssl;\n    \
             ssl_certificate {d}/a.crt;\n    ssl_certificate_key {d}/a.key;\n    \
             ssl_client_certificate {d}/ca.crt;\n    ssl_verify_client optional;\n    \
             location / {{\n      default_type text/plain;\n      \
             return 200 \"$ssl_client_verify $ssl_client_s_dn $ssl_server_name\";\n    }}"
        )
    })
}

/// `proxy-ssl-*`: the backend's certificate verified against the Secret's CA for
/// the name given (a wrong name or another CA answers 502), the client certificate
/// presented, SNI sent when asked; an Ingress whose verification cannot be set up
/// is rejected, not served unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_verifies_the_backend_and_presents_a_client_certificate() {
    let (ip, port) = ("127.0.0.48", free_port());
    let _backend = tls_backend(ip, port);
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_endpoints("demo", "tls", port, &[(ip, true)]),
    );
    let (ca, crt, key) = (
        tls_fixture("ca.crt"),
        tls_fixture("a.crt"),
        tls_fixture("a.key"),
    );
    m.write(
        "secrets.yaml",
        &[
            secret(
                "full",
                &[("ca.crt", &ca), ("tls.crt", &crt), ("tls.key", &key)],
            ),
            secret("ca-only", &[("ca.crt", &ca)]),
            secret("other-ca", &[("ca.crt", &tls_fixture("ec.crt"))]),
            secret("no-ca", &[("tls.crt", &crt), ("tls.key", &key)]),
        ]
        .join("---\n"),
    );
    let ing = |name: &str, annotations: &[(&str, &str)]| {
        let mut i = Ing::new("demo", name, T0).nginx("backend-protocol", "HTTPS");
        for (k, v) in annotations {
            i = i.nginx(k, v);
        }
        i.rule(&format!("{name}.test"), &[("/", "Prefix", "tls")])
            .yaml()
    };
    let verified = [
        ("proxy-ssl-verify", "on"),
        ("proxy-ssl-name", "a.example.com"),
    ];
    m.write(
        "full.yaml",
        &ing(
            "full",
            &[
                ("proxy-ssl-secret", "full"),
                verified[0],
                verified[1],
                ("proxy-ssl-server-name", "on"),
            ],
        ),
    );
    m.write(
        "ca.yaml",
        &ing(
            "ca",
            &[
                ("proxy-ssl-secret", "demo/ca-only"),
                verified[0],
                verified[1],
            ],
        ),
    );
    m.write(
        "wrong-name.yaml",
        &ing(
            "wrong-name",
            &[
                ("proxy-ssl-secret", "ca-only"),
                verified[0],
                ("proxy-ssl-name", "b.example.com"),
            ],
        ),
    );
    m.write(
        "other-ca.yaml",
        &ing(
            "other-ca",
            &[("proxy-ssl-secret", "other-ca"), verified[0], verified[1]],
        ),
    );
    m.write("plain.yaml", &ing("plain", &[]));
    m.write(
        "no-ca.yaml",
        &ing("no-ca", &[("proxy-ssl-secret", "no-ca"), verified[0]]),
    );
    m.write("no-secret.yaml", &ing("no-secret", &[verified[0]]));
    let f = Ferrule::start(m.path(), &[]).await;

    let ok = wait_until(Duration::from_secs(5), || async {
        http_get(&f, "full.test", "/").await.0 == 200
    })
    .await;
    assert!(
        ok,
        "{:?}\n{}",
        http_get(&f, "full.test", "/").await,
        f.logs()
    );
    assert_eq!(
        http_get(&f, "full.test", "/").await,
        (200, "SUCCESS CN=a.example.com a.example.com".to_owned()),
        "verified, the client certificate presented, SNI sent"
    );
    assert_eq!(
        http_get(&f, "ca.test", "/").await,
        (200, "NONE  ".to_owned()),
        "verified; no client certificate and no SNI unless asked"
    );
    assert_eq!(http_get(&f, "wrong-name.test", "/").await.0, 502);
    assert_eq!(http_get(&f, "other-ca.test", "/").await.0, 502);
    assert_eq!(
        http_get(&f, "plain.test", "/").await,
        (200, "NONE  ".to_owned()),
        "without the annotations: TLS, nothing verified"
    );
    for (name, field) in [
        ("no-ca", "has no ca.crt"),
        ("no-secret", "proxy-ssl-verify"),
    ] {
        let r = f.resource("Ingress", "demo", name).await.unwrap();
        assert_eq!(r["state"], "rejected", "{r}");
        assert!(r["message"].as_str().unwrap().contains(field), "{r}");
    }
}

/// `backend-protocol: AUTO_HTTP`: NGINX speaks to the backend in the client's
/// scheme. The backend here speaks only TLS: a client over HTTPS reaches it (and it
/// sees the TLS), one over plain HTTP gets its "plain HTTP sent to HTTPS port".
#[tokio::test]
async fn auto_http_follows_the_clients_scheme() {
    let (ip, port) = ("127.0.0.49", free_port());
    let _backend = tls_backend(ip, port);
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "auto", &["auto.test"]);
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_endpoints("demo", "tls", port, &[(ip, true)]),
    );
    m.write("cert.yaml", &tls_secret("demo", "auto-tls", &cert, &key));
    let ing = Ing::new("demo", "auto", T0)
        .nginx("backend-protocol", "AUTO_HTTP")
        .nginx("ssl-redirect", "false")
        .rule("auto.test", &[("/", "Prefix", "tls")])
        .tls(&["auto.test"], "auto-tls")
        .yaml();
    m.write("ing.yaml", &ing);
    let f = Ferrule::start(m.path(), &[]).await;
    let over_tls = curl_tls(&f, "auto.test", "/", &["-w", "\n%{http_code}"]).await;
    assert!(
        over_tls.ends_with("\n200") && over_tls.starts_with("NONE "),
        "over HTTPS: {over_tls:?}; log:\n{}",
        f.logs()
    );
    let (status, body) = http_get(&f, "auto.test", "/").await;
    assert_eq!(status, 400, "over HTTP: {body}");
    assert!(
        body.contains("plain HTTP request was sent to HTTPS port"),
        "{body}"
    );
}

/// The TLS 1.2 cipher `openssl s_client` negotiates for `sni`, offering `ciphers`
/// in that order (`None`: no handshake).
fn negotiated_cipher(f: &Ferrule, sni: &str, ciphers: &str) -> Option<String> {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-tls1_2", "-cipher", ciphers, "-connect"])
        .arg(format!("127.0.0.1:{}", f.https))
        .args(["-servername", sni])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let cipher = text
        .lines()
        .find_map(|l| l.split_once("Cipher is ").map(|(_, c)| c.trim().to_owned()))?;
    (out.status.success() && cipher != "(NONE)").then_some(cipher)
}

/// `ssl-ciphers` and `ssl-prefer-server-ciphers`: the host's oldest Ingress sets
/// its ciphers and their order; other hosts keep the ConfigMap's.
#[tokio::test]
async fn a_host_takes_the_ciphers_of_its_oldest_ingress() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    // RSA, for the ECDHE-RSA suites.
    let certs = tempfile::tempdir().unwrap();
    let hosts = ["narrow.test", "ordered.test", "wide.test"];
    let (cert, key, _) = self_signed(certs.path(), "hosts", &hosts);
    m.write("tls.yaml", &tls_secret("demo", "a-tls", &cert, &key));
    let (aes256, aes128) = ("ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES128-GCM-SHA256");
    let both = format!("{aes256}:{aes128}");
    let ing = |name: &str, host: &str, created: &str, annotations: &[(&str, &str)]| {
        let mut i = Ing::new("demo", name, created);
        for (k, v) in annotations {
            i = i.nginx(k, v);
        }
        i.rule(host, &[("/", "Prefix", "echo")])
            .tls(&[host], "a-tls")
            .yaml()
    };
    m.write(
        "narrow.yaml",
        &ing("narrow", "narrow.test", T0, &[("ssl-ciphers", aes256)]),
    );
    m.write(
        "ordered.yaml",
        &ing(
            "ordered",
            "ordered.test",
            T0,
            &[
                ("ssl-ciphers", &both),
                ("ssl-prefer-server-ciphers", "true"),
            ],
        ),
    );
    // Younger on narrow.test: its ciphers are not the host's.
    m.write(
        "younger.yaml",
        &Ing::new("demo", "younger", "2026-06-01T00:00:00Z")
            .nginx("ssl-ciphers", aes128)
            .rule("narrow.test", &[("/younger", "Prefix", "echo")])
            .yaml(),
    );
    m.write("wide.yaml", &ing("wide", "wide.test", T0, &[]));
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        negotiated_cipher(&f, "narrow.test", aes256).as_deref(),
        Some(aes256),
        "log:\n{}",
        f.logs()
    );
    assert_eq!(negotiated_cipher(&f, "narrow.test", aes128), None);
    assert_eq!(
        negotiated_cipher(&f, "wide.test", aes128).as_deref(),
        Some(aes128)
    );
    assert!(
        f.reports(
            "Ingress",
            "demo",
            "younger",
            "host narrow.test: ssl-ciphers and ssl-prefer-server-ciphers are the host's \
             oldest Ingress's (Ingress demo/narrow)",
            Duration::from_secs(5)
        )
        .await
    );
    // The client prefers AES128; the host's order wins.
    let client_order = format!("{aes128}:{aes256}");
    assert_eq!(
        negotiated_cipher(&f, "ordered.test", &client_order).as_deref(),
        Some(aes256)
    );
}

/// A TLS 1.2 handshake with `f` for `a.example.com` that offers the session saved
/// in `session` (if any) and saves the new one there: whether it was resumed.
fn resumed(f: &Ferrule, session: &std::path::Path) -> bool {
    let mut cmd = std::process::Command::new("openssl");
    cmd.args(["s_client", "-tls1_2", "-connect"])
        .arg(format!("127.0.0.1:{}", f.https))
        .args(["-servername", "a.example.com", "-sess_out"])
        .arg(session);
    if session.exists() {
        cmd.arg("-sess_in").arg(session);
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if std::env::var_os("FERRULE_DEBUG_TLS").is_some() {
        eprintln!("{text}");
    }
    text.contains("Reused, TLSv1.2")
}

/// `a.example.com` over TLS to `echo`, with session tickets on, the session cache
/// off (a resumption can then only come from a ticket) and `key` as the
/// `ssl-session-ticket-key`.
fn ticket_manifests(echo: std::net::SocketAddr, key: Option<&str>) -> Manifests {
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo]));
    m.write("tls.yaml", &a_example_secret());
    m.write(
        "ing.yaml",
        &Ing::new("demo", "a", T0)
            .rule("a.example.com", &[("/", "Prefix", "echo")])
            .tls(&["a.example.com"], "a-tls")
            .yaml(),
    );
    let mut data = vec![
        ("ssl-session-tickets", "true"),
        ("ssl-session-cache", "false"),
    ];
    data.extend(key.map(|k| ("ssl-session-ticket-key", k)));
    m.write("cm.yaml", &configmap(&data));
    m
}

/// `ssl-session-ticket-key`: tickets stay valid across reloads (NGINX makes new
/// random keys at each one otherwise). The session cache is off here, so that a
/// resumption can only come from the ticket.
#[tokio::test]
async fn a_ticket_key_keeps_sessions_across_reloads() {
    let echo = Echo::start("127.0.0.2").await;
    let start = |key: Option<String>| ticket_manifests(echo.addr, key.as_deref());
    // 80 bytes, base64: 26 groups of three 0x07 bytes, then two.
    let key = format!("{}Bwc=", "BwcH".repeat(26));
    for (name, key, kept) in [("with the key", Some(key), true), ("without", None, false)] {
        let m = start(key);
        let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
        let r = f.resource("ConfigMap", "demo", "ferrule").await;
        assert_eq!(
            r.as_ref().map(|r| r["state"].clone()),
            Some("applied".into()),
            "{r:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("session.pem");
        assert!(
            !resumed(&f, &session),
            "{name}: the first handshake is a new session"
        );
        assert!(resumed(&f, &session), "{name}: resumed from its ticket");
        // A reload (a new host).
        let reloads = f.reloads().await;
        m.write("more.yaml", &demo_ingress("more", "more.test", &[]));
        let reloaded = wait_until(Duration::from_secs(10), || async {
            f.reloads().await > reloads
        })
        .await;
        assert!(reloaded, "{name}: no reload; log:\n{}", f.logs());
        f.old_workers_gone().await;
        assert_eq!(
            resumed(&f, &session),
            kept,
            "{name}: resumed after the reload"
        );
    }
}

/// `ssl-dh-param`: with DH parameters from the Secret the ConfigMap names, the
/// DHE suites of the default cipher list are offered; without them they are not.
#[tokio::test]
async fn dh_parameters_from_a_secret_turn_on_the_dhe_ciphers() {
    let echo = Echo::start("127.0.0.2").await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "dh", &["dh.test"]);
    let out = std::process::Command::new("openssl")
        .args(["dhparam", "-dsaparam", "2048"])
        .stderr(std::process::Stdio::null())
        .output()
        .expect("openssl dhparam");
    let dhparam = String::from_utf8(out.stdout).unwrap();
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("tls.yaml", &tls_secret("demo", "dh-tls", &cert, &key));
    m.write("dh.yaml", &secret("dh", &[("dhparam.pem", &dhparam)]));
    m.write(
        "ing.yaml",
        &Ing::new("demo", "dh", T0)
            .rule("dh.test", &[("/", "Prefix", "echo")])
            .tls(&["dh.test"], "dh-tls")
            .yaml(),
    );
    m.write("cm.yaml", &configmap(&[("ssl-dh-param", "demo/dh")]));
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let dhe = "DHE-RSA-AES128-GCM-SHA256";
    assert_eq!(
        negotiated_cipher(&f, "dh.test", dhe).as_deref(),
        Some(dhe),
        "{:?}; log:\n{}",
        f.resource("ConfigMap", "demo", "ferrule").await,
        f.logs()
    );
    // Without the parameters, NGINX offers no DHE suite.
    m.write("cm.yaml", &configmap(&[("ssl-session-timeout", "5m")]));
    let off = wait_until(Duration::from_secs(10), || async {
        negotiated_cipher(&f, "dh.test", dhe).is_none()
    })
    .await;
    assert!(off, "DHE still offered without ssl-dh-param");
}

/// Two replicas with the same `ssl-session-ticket-key` resume each other's
/// sessions: NGINX binds a session to its server's certificate, which is derived
/// from the key (the same on both) instead of each controller's own.
#[tokio::test]
async fn replicas_with_one_ticket_key_resume_each_others_sessions() {
    let echo = Echo::start("127.0.0.2").await;
    let key = format!("{}Bwc=", "BwcH".repeat(26));
    let m = ticket_manifests(echo.addr, Some(&key));
    let args = [&["--configmap", "demo/ferrule"][..], LUA_ONLY].concat();
    let a = Ferrule::start(m.path(), &args).await;
    let b = Ferrule::start(m.path(), &args).await;
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("session.pem");
    assert!(
        !resumed(&a, &session),
        "the first handshake is a new session"
    );
    assert!(resumed(&b, &session), "a's ticket resumed on b");
    assert!(resumed(&a, &session), "and b's on a");
}

/// `http2-push-preload`: over HTTP/2, NGINX pushes what the backend's
/// `Link: rel=preload` header names (as nghttp, an HTTP/2 client, sees the
/// PUSH_PROMISE); a host without the annotation pushes nothing.
#[tokio::test]
async fn http2_push_preload_pushes_what_link_headers_name() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    for (name, push) in [("push", true), ("plain", false)] {
        let mut ing =
            Ing::new("demo", name, T0).rule(&format!("{name}.test"), &[("/", "Prefix", "echo")]);
        if push {
            ing = ing.nginx("http2-push-preload", "true");
        }
        m.write(&format!("{name}.yaml"), &ing.yaml());
    }
    let f = Ferrule::start(m.path(), &[]).await;
    // nghttp runs while the runtime serves the echo backend (not a blocking call)
    let promises = |host: &str| {
        let host = host.to_owned();
        let port = f.https;
        async move {
            let out = tokio::process::Command::new("nghttp")
                .args(["-nv", "-H"])
                .arg(format!(":authority: {host}"))
                .args([
                    "-H",
                    "x-echo-header: Link=</pushed.css>; rel=preload; as=style",
                ])
                .arg(format!("https://127.0.0.1:{port}/"))
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .expect("nghttp (make deps installs nghttp2-client)");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            (text.matches("recv PUSH_PROMISE").count(), text)
        }
    };
    let (pushed, text) = promises("push.test").await;
    assert!(pushed >= 1 && text.contains("/pushed.css"), "{text}");
    let (pushed, text) = promises("plain.test").await;
    assert_eq!(pushed, 0, "{text}");
}
