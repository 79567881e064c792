//! `--enable-ssl-passthrough` and the `ssl-passthrough` annotation: TLS for such a
//! host reaches its backend by SNI, not terminated (the backend's own certificate
//! is what the client sees), while every other host keeps being terminated by NGINX
//! on the same port with the client's address intact; the passthrough backend's
//! endpoints change without a reload.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::support::*;

/// `openssl s_server -www` on `ip:port` with its own certificate for `host`: a TLS
/// backend that answers an HTTP GET with a status page. Killed on drop.
struct TlsBackend {
    child: Child,
    fingerprint: String,
}

impl TlsBackend {
    fn start(dir: &std::path::Path, ip: &str, port: u16, host: &str) -> TlsBackend {
        let name = format!("backend-{ip}");
        let (_, _, fingerprint) = self_signed(dir, &name, &[host]);
        let child = Command::new("openssl")
            .args(["s_server", "-www", "-quiet", "-accept"])
            .arg(format!("{ip}:{port}"))
            .arg("-cert")
            .arg(dir.join(format!("{name}.crt")))
            .arg("-key")
            .arg(dir.join(format!("{name}.key")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        TlsBackend { child, fingerprint }
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn passthrough_hosts_reach_their_backend_by_sni_and_the_others_are_terminated() {
    let certs = tempfile::tempdir().unwrap();
    let port = free_port();
    let two = TlsBackend::start(certs.path(), "127.0.0.2", port, "pass.example");
    let three = TlsBackend::start(certs.path(), "127.0.0.3", port, "pass.example");
    let echo = Echo::start("127.0.0.4").await;
    let (term_crt, term_key, term_fp) = self_signed(certs.path(), "term", &["term.example"]);

    let m = Manifests::new();
    m.write("echo.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "term.yaml",
        &with_tls(
            &demo_ingress("term", "term.example", &[]),
            &["term.example"],
            "term-tls",
        ),
    );
    m.write(
        "term-tls.yaml",
        &tls_secret("demo", "term-tls", &term_crt, &term_key),
    );
    let tlsapp = |ip: &str| service_endpoints("demo", "tlsapp", port, &[(ip, true)]);
    m.write("tlsapp.yaml", &tlsapp("127.0.0.2"));
    m.write(
        "pass.yaml",
        &ingress(
            "demo",
            "pass",
            "2026-01-01T00:00:00Z",
            "pass.example",
            &[("/", "Prefix", "tlsapp")],
            &[("ssl-passthrough", "true")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--enable-ssl-passthrough"]).await;
    let served = |sni: &'static str| {
        let f = &f;
        async move { f.served_fingerprint(sni) }
    };
    assert_eq!(
        served("pass.example").await,
        two.fingerprint,
        "{}",
        f.logs()
    );
    assert_eq!(served("term.example").await, term_fp, "{}", f.logs());
    // Through to the backend, which answers HTTP itself.
    let page = curl_tls(&f, "pass.example", "/", &[]).await;
    assert!(
        page.contains("s_server"),
        "not the backend's page: {page:?}"
    );
    // Terminated hosts: the client's address and port, not the router's.
    let seen = https_get(&f, "term.example", "/").await;
    assert_eq!(seen["headers"]["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(seen["headers"]["x-forwarded-port"], "443", "{seen}");
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https", "{seen}");
    // Plain HTTP of the passthrough host is NGINX's as before.
    let (status, _) = f.get("term.example", "/").await;
    assert_eq!(status, 200);

    // The backend moves: no reload, the next handshake reaches the new one.
    let no_reload = NoReload::capture(&f).await;
    m.write("tlsapp.yaml", &tlsapp("127.0.0.3"));
    let moved = wait_until(Duration::from_secs(10), || async {
        served("pass.example").await == three.fingerprint
    })
    .await;
    assert!(
        moved,
        "the passthrough backend did not move; log:\n{}",
        f.logs()
    );
    no_reload
        .check(&f, "a passthrough backend's endpoints")
        .await;
    assert_eq!(served("term.example").await, term_fp);
}

#[tokio::test]
async fn without_the_flag_a_passthrough_ingress_is_refused_by_name() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("echo.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "pass.yaml",
        &demo_ingress("pass", "pass.example", &[("ssl-passthrough", "true")]),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    assert!(
        f.reports(
            "Ingress",
            "demo",
            "pass",
            "ssl-passthrough needs the controller flag --enable-ssl-passthrough",
            Duration::from_secs(5)
        )
        .await,
        "{:?}",
        f.resource("Ingress", "demo", "pass").await
    );
    assert_eq!(f.get("pass.example", "/").await.0, 404);
}

/// Issue N9: an ssl-passthrough host whose Service is dual-stack, then IPv6 only:
/// every handshake reaches a backend, the IPv6 one (`::1`) among them. The stream
/// module did not parse a peers file holding `"[::1]:port"`, and refused every
/// connection of the backend.
#[tokio::test]
async fn passthrough_hosts_reach_ipv6_endpoints() {
    let certs = tempfile::tempdir().unwrap();
    let port = free_port();
    let v4 = TlsBackend::start(certs.path(), "127.0.0.2", port, "pass.example");
    let v6 = TlsBackend::start(certs.path(), "[::1]", port, "pass.example");
    let slice = |family: &str, ips: &[&str]| {
        let eps: String = ips
            .iter()
            .map(|ip| format!("  - addresses: [\"{ip}\"]\n"))
            .collect();
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{ name: tlsapp-{}, namespace: demo, \
             labels: {{ kubernetes.io/service-name: tlsapp }} }}\n\
             addressType: {family}\nports: [{{ name: http, port: {port} }}]\n\
             endpoints:\n{}",
            family.to_ascii_lowercase(),
            if eps.is_empty() {
                "  []\n".to_owned()
            } else {
                eps
            }
        )
    };
    let m = Manifests::new();
    // service_endpoints' Service and IPv4 slice, and an IPv6 slice beside it
    let write = |v4_ips: &[&str], v6_ips: &[&str]| {
        let v4_eps: Vec<(&str, bool)> = v4_ips.iter().map(|ip| (*ip, true)).collect();
        m.write(
            "tlsapp.yaml",
            &format!(
                "{}---\n{}",
                service_endpoints("demo", "tlsapp", port, &v4_eps),
                slice("IPv6", v6_ips)
            ),
        );
    };
    write(&["127.0.0.2"], &["::1"]);
    m.write(
        "pass.yaml",
        &ingress(
            "demo",
            "pass",
            "2026-01-01T00:00:00Z",
            "pass.example",
            &[("/", "Prefix", "tlsapp")],
            &[("ssl-passthrough", "true")],
        ),
    );
    let f = Ferrule::start(m.path(), &["--enable-ssl-passthrough"]).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..6 {
        seen.insert(f.served_fingerprint("pass.example"));
    }
    let want: std::collections::BTreeSet<String> =
        [v4.fingerprint.clone(), v6.fingerprint.clone()].into();
    assert_eq!(seen, want, "dual-stack; log:\n{}", f.logs());

    write(&[], &["::1"]);
    let moved = wait_until(Duration::from_secs(10), || async {
        (0..4).all(|_| f.served_fingerprint("pass.example") == v6.fingerprint)
    })
    .await;
    assert!(moved, "IPv6 only; log:\n{}", f.logs());
}
