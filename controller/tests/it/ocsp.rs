//! `enable-ocsp`: OCSP stapling through real NGINX, with a real OCSP responder
//! (`openssl ocsp`) on loopback, as a client that asks for the status sees it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA in `dir` and, for each host, a leaf it signed whose AIA names the
/// responder at `port`; `<host>.chain` holds the leaf and the CA. The `revoked`
/// ones are marked revoked in the responder's index.
fn pki(dir: &Path, port: u16, good: &[&str], revoked: &[&str]) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=Ferrule test CA",
        ],
    );
    let mut index = String::new();
    for (i, host) in good.iter().chain(revoked).enumerate() {
        let ext = format!(
            "subjectAltName=DNS:{host}\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{port}/\n"
        );
        std::fs::write(dir.join(format!("{host}.ext")), ext).unwrap();
        let serial = format!("{:04X}", 0x1000 + i);
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{host}.key"),
                "-out",
                &format!("{host}.csr"),
                "-subj",
                &format!("/CN={host}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{host}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &format!("0x{serial}"),
                "-days",
                "30",
                "-extfile",
                &format!("{host}.ext"),
                "-out",
                &format!("{host}.crt"),
            ],
        );
        let leaf = std::fs::read_to_string(dir.join(format!("{host}.crt"))).unwrap();
        let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
        std::fs::write(dir.join(format!("{host}.chain")), leaf + &ca).unwrap();
        let state = if revoked.contains(host) {
            "R\t300101000000Z\t260101000000Z"
        } else {
            "V\t300101000000Z\t"
        };
        index.push_str(&format!("{state}\t{serial}\tunknown\t/CN={host}\n"));
    }
    std::fs::write(dir.join("index.txt"), index).unwrap();
}

/// `openssl ocsp` answering for the CA on `port`, killed when dropped.
struct Responder(Child);

impl Responder {
    fn start(dir: &Path, port: u16) -> Responder {
        let child = Command::new("openssl")
            .args(["ocsp", "-index", "index.txt", "-port", &port.to_string()])
            .args(["-rsigner", "ca.crt", "-rkey", "ca.key", "-CA", "ca.crt"])
            .args(["-nmin", "60", "-ignore_err"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl ocsp");
        // Listening before the first handshake (a failed fetch waits 30 s to retry).
        // Seen in /proc, not by connecting: openssl ocsp serves one connection at a
        // time and hangs on one that sends nothing.
        let listening = |table: &str| {
            let needle = format!(":{port:04X} ");
            std::fs::read_to_string(table).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.contains(&needle) && l.split_whitespace().nth(3) == Some("0A"))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !listening("/proc/net/tcp6") && !listening("/proc/net/tcp") {
            assert!(
                std::time::Instant::now() < deadline,
                "openssl ocsp never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Responder(child)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a client asking for the certificate status of `sni` is told: the
/// `Cert Status` line of the stapled response, or `None` when none was sent.
fn stapled(f: &Ferrule, sni: &str) -> Option<String> {
    let out = f.s_client(sni, &["-status"]);
    let text = String::from_utf8_lossy(&out);
    if text.contains("OCSP response: no response sent") {
        return None;
    }
    (text.lines())
        .find_map(|l| l.trim().strip_prefix("Cert Status: "))
        .map(str::to_owned)
}

fn manifests(dir: &Path, echo: std::net::SocketAddr, hosts: &[&str], ocsp: &str) -> Manifests {
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo]));
    for host in hosts {
        let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{host}.{ext}"))).unwrap();
        let name = host.replace('.', "-");
        m.write(
            &format!("{name}-tls.yaml"),
            &tls_secret("demo", &name, &read("chain"), &read("key")),
        );
        m.write(
            &format!("{name}.yaml"),
            &Ing::new("demo", &name, T0)
                .rule(host, &[("/", "Prefix", "echo")])
                .tls(&[host], &name)
                .yaml(),
        );
    }
    m.write("cm.yaml", &configmap(&[("enable-ocsp", ocsp)]));
    m
}

/// With `enable-ocsp`, a handshake staples the responder's answer for a good
/// certificate; a revoked certificate's answer does not validate and nothing is
/// stapled. Without the key, nothing is stapled at all.
#[tokio::test]
async fn enable_ocsp_staples_the_responders_answer() {
    let echo = Echo::start("127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    pki(
        dir.path(),
        port,
        &["good.ocsp.test"],
        &["revoked.ocsp.test"],
    );
    let _responder = Responder::start(dir.path(), port);
    let hosts = ["good.ocsp.test", "revoked.ocsp.test"];

    let m = manifests(dir.path(), echo.addr, &hosts, "true");
    let f = Ferrule::start(
        m.path(),
        &["--configmap", "demo/ferrule", "--balancer", "lua"],
    )
    .await;
    // The first handshake starts a fetch; a later one staples its answer.
    let _ = stapled(&f, "revoked.ocsp.test");
    let good = wait_until(Duration::from_secs(20), || async {
        stapled(&f, "good.ocsp.test").as_deref() == Some("good")
    })
    .await;
    assert!(
        good,
        "no good status stapled ({:?}); log:\n{}",
        stapled(&f, "good.ocsp.test"),
        f.logs()
    );
    // The revoked one's fetch started first: its answer came, and did not validate.
    for _ in 0..3 {
        assert_eq!(stapled(&f, "revoked.ocsp.test"), None, "{}", f.logs());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(f);

    let m = manifests(dir.path(), echo.addr, &hosts, "false");
    let f = Ferrule::start(
        m.path(),
        &["--configmap", "demo/ferrule", "--balancer", "lua"],
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            stapled(&f, "good.ocsp.test"),
            None,
            "stapled without enable-ocsp"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The njs balancer cannot staple: `enable-ocsp` is a Warning on the ConfigMap,
/// and the certificates are served as without it.
#[tokio::test]
async fn enable_ocsp_with_njs_is_a_warning() {
    let echo = Echo::start("127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    pki(dir.path(), port, &["good.ocsp.test"], &[]);
    let _responder = Responder::start(dir.path(), port);
    let m = manifests(dir.path(), echo.addr, &["good.ocsp.test"], "true");
    let f = Ferrule::start(
        m.path(),
        &["--configmap", "demo/ferrule", "--balancer", "njs"],
    )
    .await;
    let r = f.resource("ConfigMap", "demo", "ferrule").await.unwrap();
    let text = r.to_string();
    assert!(
        text.contains("enable-ocsp: the njs balancer cannot staple"),
        "{r}"
    );
    assert_eq!(stapled(&f, "good.ocsp.test"), None);
    assert!(
        f.served_fingerprint("good.ocsp.test")
            == fingerprint_pem(
                &std::fs::read_to_string(dir.path().join("good.ocsp.test.crt")).unwrap()
            ),
        "the certificate is served"
    );
}
