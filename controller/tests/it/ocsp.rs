//! `enable-ocsp`: OCSP stapling through real NGINX, with a real OCSP responder
//! (`openssl ocsp`), as a client that asks for the status sees it; and what a
//! responder named by a tenant's certificate can cost: hostile responders (an
//! endless header line, one byte at a time), URLs that are refused before
//! anything is sent (CR/LF, a long path, local addresses), and how many fetches
//! a worker runs at once.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A CA in `dir` and, for each (host, URL), a leaf it signed whose AIA names the
/// responder at URL (as OpenSSL's configuration reads it: `\r` is a CR);
/// `<host>.chain` holds the leaf and the CA. The `revoked` hosts are marked
/// revoked in the responder's index. P-256 keys: quick to make.
fn pki(dir: &Path, leaves: &[(&str, &str)], revoked: &[&str]) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-days", "30", "-keyout", "ca.key", "-out", "ca.crt"]);
    ca.extend(["-subj", "/CN=Ferrule test CA"]);
    openssl(dir, &ca);
    let mut index = String::new();
    for (i, (host, url)) in leaves.iter().enumerate() {
        let ext =
            format!("[leaf]\nsubjectAltName=DNS:{host}\nauthorityInfoAccess=OCSP;URI:{url}\n");
        std::fs::write(dir.join(format!("{host}.ext")), ext).unwrap();
        let serial = format!("{:04X}", 0x1000 + i);
        let (key, csr, crt, ext) = (
            format!("{host}.key"),
            format!("{host}.csr"),
            format!("{host}.crt"),
            format!("{host}.ext"),
        );
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr]);
        let subject = format!("/CN={host}");
        req.extend(["-subj", &subject]);
        openssl(dir, &req);
        let serial_arg = format!("0x{serial}");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial_arg,
                "-days",
                "30",
                "-extfile",
                &ext,
                "-extensions",
                "leaf",
                "-out",
                &crt,
            ],
        );
        let leaf = std::fs::read_to_string(dir.join(&crt)).unwrap();
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
    /// On every address of this machine.
    fn start(dir: &Path, port: u16) -> Responder {
        Self::spawn(Command::new("openssl"), dir, port)
    }

    /// On every address of the backends' network namespace (10.213.0.2–9): an
    /// ordinary address, not this machine's loopback.
    fn start_in_netns(dir: &Path, port: u16) -> Responder {
        crate::e2e::netns_up();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", crate::e2e::NETNS, "openssl"]);
        Self::spawn(cmd, dir, port)
    }

    fn spawn(mut cmd: Command, dir: &Path, port: u16) -> Responder {
        let child = cmd
            .args(["ocsp", "-index", "index.txt", "-port", &port.to_string()])
            .args(["-rsigner", "ca.crt", "-rkey", "ca.key", "-CA", "ca.crt"])
            .args(["-nmin", "60", "-ignore_err"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl ocsp");
        // Listening before the first handshake (a failed fetch waits 30 s to retry).
        // Seen in /proc (the responder's own network namespace), not by connecting:
        // openssl ocsp serves one connection at a time and hangs on one that sends
        // nothing.
        let pid = child.id();
        let listening = |table: &str| {
            let needle = format!(":{port:04X} ");
            std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.contains(&needle) && l.split_whitespace().nth(3) == Some("0A"))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        // `ip netns exec` becomes openssl: wait for the command, then the socket.
        while !std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with(b"openssl"))
            || !listening("tcp6") && !listening("tcp")
        {
            assert!(Instant::now() < deadline, "openssl ocsp never listened");
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
/// stapled. Without the key, nothing is stapled at all. (The responder is on
/// loopback, which `--allow-local-endpoints`, passed by the tests, allows.)
#[tokio::test]
async fn enable_ocsp_staples_the_responders_answer() {
    let echo = Echo::start("127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    pki(
        dir.path(),
        &[("good.ocsp.test", &url), ("revoked.ocsp.test", &url)],
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
    let url = format!("http://127.0.0.1:{port}/");
    pki(dir.path(), &[("good.ocsp.test", &url)], &[]);
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

// ---------------------------------------------------------------------------
// What a responder named by a tenant's certificate can cost.

/// What a [`Hostile`] responder answers a fetch with.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// Nothing: it waits (a listener that counts connections).
    Silent,
    /// A status line, then one header line that never ends, as fast as it goes.
    Endless,
    /// A status line, then a header line of one byte every 2.9 s: below a
    /// timeout of 3 s per read, forever.
    Drip,
}

/// What a [`Hostile`] responder saw of the connections NGINX opened to it.
#[derive(Clone, Debug, Default)]
struct Seen {
    accepted: usize,
    open: usize,
    max_open: usize,
    /// Per connection NGINX closed: how long after it was accepted.
    closed_after: Vec<Duration>,
    /// Bytes of answer written, all connections together.
    sent: u64,
}

/// A responder on `ip` that answers every connection as its [`Answer`] says.
struct Hostile {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Hostile {
    async fn start(ip: &str, answer: Answer) -> Hostile {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                {
                    let mut s = s.lock().unwrap();
                    s.accepted += 1;
                    s.open += 1;
                    s.max_open = s.max_open.max(s.open);
                }
                tokio::spawn(serve(conn, answer, s.clone(), st.clone()));
            }
        });
        Hostile {
            addr,
            seen,
            stop,
            task,
        }
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// No more bytes: every connection is closed.
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop();
        self.task.abort();
    }
}

async fn serve(
    conn: tokio::net::TcpStream,
    answer: Answer,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
) {
    let accepted = Instant::now();
    let (mut rd, mut wr) = conn.into_split();
    // NGINX closed: the end of what it sends (end of file, or a reset when it
    // leaves bytes unread).
    let closed = async move {
        let mut buf = [0u8; 4096];
        while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    let stopped = {
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let written = seen.clone();
    let write = async move {
        let status = b"HTTP/1.0 200 OK\r\nX-Hostile: ";
        match answer {
            Answer::Silent => {}
            Answer::Endless => {
                let chunk = vec![b'a'; 64 * 1024];
                if wr.write_all(status).await.is_ok() {
                    while !stop.load(Ordering::Relaxed) && wr.write_all(&chunk).await.is_ok() {
                        written.lock().unwrap().sent += chunk.len() as u64;
                    }
                }
            }
            Answer::Drip => {
                if wr.write_all(status).await.is_ok() {
                    loop {
                        tokio::time::sleep(Duration::from_millis(2900)).await;
                        if wr.write_all(b"x").await.is_err() {
                            break;
                        }
                        written.lock().unwrap().sent += 1;
                    }
                }
            }
        }
        // the connection stays open until NGINX closes it or the test stops
        std::future::pending::<()>().await;
        drop(wr);
    };
    tokio::select! {
        _ = closed => seen.lock().unwrap().closed_after.push(accepted.elapsed()),
        _ = write => {}
        _ = stopped => {}
    }
    seen.lock().unwrap().open -= 1;
}

/// A handshake for `sni`: it starts a fetch when its certificate's is due.
fn handshake(f: &Ferrule, sni: &str) {
    let _ = f.s_client(sni, &[]);
}

/// NGINX's error log so far, where `ferrule.ocsp` writes.
fn error_log(f: &Ferrule) -> String {
    let path = f.prefix.path().join("nginx/logs/error.log");
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// `VmRSS` of `pid` in KiB, as `/proc/PID/status` says (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The arguments of a Ferrule that staples with the Lua balancer.
const OCSP_ARGS: &[&str] = &["--configmap", "demo/ferrule", "--balancer", "lua"];

/// Ferrule serving one certificate per (host, AIA URL), with `enable-ocsp`.
async fn serving(
    dir: &Path,
    leaves: &[(&str, &str)],
    extra: &[&str],
) -> (Ferrule, Echo, Manifests) {
    pki(dir, leaves, &[]);
    let echo = Echo::start("127.0.0.2").await;
    let hosts: Vec<&str> = leaves.iter().map(|(h, _)| *h).collect();
    let m = manifests(dir, echo.addr, &hosts, "true");
    let args = [OCSP_ARGS, extra].concat();
    let f = Ferrule::start(m.path(), &args).await;
    (f, echo, m)
}

/// A responder that answers with a header line that never ends: the fetch stops
/// at 64 KiB of answer and closes the connection at once (not when the
/// responder stops), and the worker's memory stays where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_header_line_is_cut_off_and_the_worker_stays_small() {
    let hostile = Hostile::start("127.0.0.1", Answer::Endless).await;
    let url = format!("http://127.0.0.1:{}/", hostile.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let (f, _echo, _m) = serving(
        dir.path(),
        &[("endless.ocsp.test", &url)],
        &["--worker-processes", "1"],
    )
    .await;
    let workers = f.worker_pids();
    assert_eq!(workers.len(), 1, "{workers:?}");
    let worker = workers[0];
    // A handshake without OCSP first (the default certificate): the baseline
    // holds what any handshake costs.
    handshake(&f, "warm-up.invalid");
    let before = rss_kib(worker);
    let started = Instant::now();
    handshake(&f, "endless.ocsp.test");
    // Stopped at 64 MiB more, whatever NGINX does (it grew past 1 GB before).
    let mut peak = before;
    while started.elapsed() < Duration::from_secs(15) {
        peak = peak.max(rss_kib(worker));
        if !hostile.seen().closed_after.is_empty() || peak > before + 64 * 1024 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hostile.stop();
    for _ in 0..10 {
        peak = peak.max(rss_kib(worker));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = hostile.seen();
    println!(
        "endless header line: worker VmRSS {before} KiB before, {peak} KiB at most; \
         {} bytes sent; NGINX closed after {:?}",
        seen.sent, seen.closed_after
    );
    assert!(
        peak < before + 16 * 1024,
        "the worker grew from {before} KiB to {peak} KiB"
    );
    assert_eq!(seen.accepted, 1, "{seen:?}");
    assert!(
        seen.closed_after.len() == 1 && seen.closed_after[0] < Duration::from_secs(4),
        "NGINX did not close the connection before the deadline: {seen:?}"
    );
    let log = error_log(&f);
    assert!(
        log.contains(&format!(
            "ferrule: OCSP responder {url}: an answer of more than 65536 bytes"
        )),
        "{log}"
    );
    assert_eq!(stapled(&f, "endless.ocsp.test"), None);
}

/// A responder that sends one byte every 2.9 s (each read is quick enough): the
/// fetch is abandoned at its deadline, 5 s after it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_responder_is_abandoned_at_the_deadline() {
    let hostile = Hostile::start("127.0.0.1", Answer::Drip).await;
    let url = format!("http://127.0.0.1:{}/", hostile.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let (f, _echo, _m) = serving(dir.path(), &[("drip.ocsp.test", &url)], &[]).await;
    handshake(&f, "drip.ocsp.test");
    let closed = wait_until(Duration::from_secs(20), || async {
        !hostile.seen().closed_after.is_empty()
    })
    .await;
    let seen = hostile.seen();
    println!(
        "dripping responder: {} bytes dripped, NGINX closed after {:?}",
        seen.sent, seen.closed_after
    );
    assert!(closed, "still open after 20 s: {seen:?}");
    assert_eq!(seen.accepted, 1, "{seen:?}");
    let after = seen.closed_after[0];
    assert!(
        after > Duration::from_secs(4) && after < Duration::from_secs(7),
        "closed after {after:?}, not at the 5 s deadline"
    );
    let log = error_log(&f);
    assert!(
        log.contains(&format!(
            "ferrule: OCSP responder {url}: no complete answer within 5000 ms"
        )),
        "{log}"
    );
}

/// A worker runs at most 8 fetches at once: handshakes for 12 certificates
/// whose responder never answers open 8 connections; the 4 others are fetched
/// by handshakes after those ended (at the deadline), not 30 s later as after a
/// failed fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_at_most_eight_fetches_at_once() {
    let listener = Hostile::start("127.0.0.1", Answer::Silent).await;
    let url = format!("http://127.0.0.1:{}/", listener.addr.port());
    let hosts: Vec<String> = (0..12).map(|i| format!("cap-{i}.ocsp.test")).collect();
    let leaves: Vec<(&str, &str)> = hosts.iter().map(|h| (h.as_str(), url.as_str())).collect();
    let dir = tempfile::tempdir().unwrap();
    let (f, _echo, _m) = serving(dir.path(), &leaves, &["--worker-processes", "1"]).await;
    let started = Instant::now();
    for host in &hosts {
        handshake(&f, host);
    }
    let handshakes = started.elapsed();
    wait_until(Duration::from_secs(2), || async {
        listener.seen().accepted >= 12
    })
    .await;
    let first = listener.seen();
    println!("12 handshakes in {handshakes:?}: {first:?}");
    assert!(
        first.max_open <= 8,
        "more than 8 fetches at once: {first:?}"
    );
    // (unless the handshakes took so long that the first fetches had ended)
    if handshakes < Duration::from_secs(4) {
        assert_eq!(first.accepted, 8, "{first:?}");
    }
    let ended = wait_until(Duration::from_secs(10), || async {
        listener.seen().open == 0
    })
    .await;
    assert!(ended, "{:?}", listener.seen());
    for host in &hosts {
        handshake(&f, host);
    }
    let rest = wait_until(Duration::from_secs(5), || async {
        listener.seen().accepted >= 12
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = listener.seen();
    println!("after a second round: {second:?}");
    assert!(rest && second.accepted == 12, "{second:?}");
    assert!(second.max_open <= 8, "{second:?}");
}

/// Waits until NGINX's log holds every one of `lines` (or 10 s), then half a
/// second more for a connection that should not come.
async fn logged(f: &Ferrule, lines: &[String]) -> bool {
    let all = wait_until(Duration::from_secs(10), || async {
        let log = error_log(f);
        lines.iter().all(|l| log.contains(l.as_str()))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    all
}

/// Responder URLs that are not `http://host[:port]/path` in plain characters are
/// refused before anything is sent: CR/LF in the path (a header and a second
/// request injected), a path of more than 256 bytes. The log shows the URL
/// escaped: no CR or LF of a certificate reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responder_urls_with_cr_lf_or_a_long_path_are_refused_and_logged_escaped() {
    let listener = Hostile::start("127.0.0.1", Answer::Silent).await;
    let base = format!("http://127.0.0.1:{}", listener.addr.port());
    // As OpenSSL's configuration reads it: \r and \n become CR and LF.
    let injected = format!("{base}/a\\r\\nX-Injected: 1\\r\\n\\r\\nGET /second HTTP/1.0");
    let long = format!("{base}/{}", "a".repeat(300));
    let dir = tempfile::tempdir().unwrap();
    let (f, _echo, _m) = serving(
        dir.path(),
        &[("crlf.ocsp.test", &injected), ("long.ocsp.test", &long)],
        &[],
    )
    .await;
    handshake(&f, "crlf.ocsp.test");
    handshake(&f, "long.ocsp.test");
    let lines = [
        format!(
            "ferrule: OCSP responder {base}/a\\x0D\\x0AX-Injected: 1\\x0D\\x0A\\x0D\\x0AGET \
             /second HTTP/1.0: refused: a byte in the path that is not allowed"
        ),
        format!("ferrule: OCSP responder {base}/aaaa"),
        "refused: a path of more than 256 bytes".to_owned(),
    ];
    let all = logged(&f, &lines).await;
    let log = error_log(&f);
    assert_eq!(listener.seen().accepted, 0, "the responder was asked");
    assert!(all, "{lines:#?} not all in NGINX's log:\n{log}");
    assert!(!log.contains('\r'), "a CR in NGINX's log:\n{log:?}");
    assert!(
        !log.lines()
            .any(|l| l.starts_with("X-Injected") || l.starts_with("GET /second")),
        "a line of the certificate's in NGINX's log:\n{log}"
    );
}

/// Without `--allow-local-endpoints`, a responder at a loopback (also
/// IPv4-mapped), unspecified or link-local address is refused before anything
/// is sent, as an endpoint there would be left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_responders_are_refused_without_allow_local_endpoints() {
    let listener = Hostile::start("127.0.0.1", Answer::Silent).await;
    let port = listener.addr.port();
    let urls = [
        ("loopback.ocsp.test", format!("http://127.0.0.1:{port}/")),
        (
            "mapped.ocsp.test",
            format!("http://[::ffff:127.0.0.1]:{port}/"),
        ),
        ("zero.ocsp.test", format!("http://0.0.0.0:{port}/")),
        // Nothing listens there: the log says it was refused, not that it failed.
        (
            "metadata.ocsp.test",
            format!("http://169.254.169.254:{port}/"),
        ),
    ];
    let why = [
        "loopback address 127.0.0.1",
        "loopback address ::ffff:127.0.0.1",
        "unspecified address 0.0.0.0",
        "link-local address 169.254.169.254",
    ];
    let leaves: Vec<(&str, &str)> = urls.iter().map(|(h, u)| (*h, u.as_str())).collect();
    let dir = tempfile::tempdir().unwrap();
    let (f, _echo, _m) = serving(dir.path(), &leaves, &["--allow-local-endpoints=false"]).await;
    for (host, _) in &urls {
        handshake(&f, host);
    }
    let lines: Vec<String> = (urls.iter().zip(why))
        .map(|((_, url), why)| {
            format!(
                "ferrule: OCSP responder {url}: refused: {why} (--allow-local-endpoints allows it)"
            )
        })
        .collect();
    let all = logged(&f, &lines).await;
    assert_eq!(listener.seen().accepted, 0, "a local responder was asked");
    assert!(all, "{lines:#?} not all in NGINX's log:\n{}", error_log(&f));
}

/// A nameserver on `127.53.0.N:53`: the A record of each of `names`, NXDOMAIN
/// for another name, no record of another type.
struct Nameserver {
    ip: Ipv4Addr,
    task: tokio::task::JoinHandle<()>,
}

impl Nameserver {
    async fn start(names: &[(&str, Ipv4Addr)]) -> Nameserver {
        let names: HashMap<String, Ipv4Addr> =
            names.iter().map(|(n, a)| (n.to_string(), *a)).collect();
        let mut bound = None;
        for n in 1..=250 {
            let ip = Ipv4Addr::new(127, 53, 0, n);
            if let Ok(s) = tokio::net::UdpSocket::bind((ip, 53)).await {
                bound = Some((ip, s));
                break;
            }
        }
        let (ip, socket) = bound.expect("no 127.53.0.N:53 free");
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                if let Some(answer) = dns_answer(&buf[..n], &names) {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        });
        Nameserver { ip, task }
    }
}

impl Drop for Nameserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer to the DNS query `q`, as [`Nameserver`] gives it.
fn dns_answer(q: &[u8], names: &HashMap<String, Ipv4Addr>) -> Option<Vec<u8>> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *q.get(pos)? as usize;
        pos += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(pos..pos + len)?).to_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*q.get(pos)?, *q.get(pos + 1)?]);
    let question = q.get(12..pos + 4)?;
    let known = names.get(&labels.join("."));
    let a = known.filter(|_| qtype == 1);
    let mut out = q[..2].to_vec(); // the query's id
    // an answer, recursion available; NXDOMAIN for an unknown name
    out.extend([0x81, if known.is_some() { 0x80 } else { 0x83 }]);
    out.extend([0, 1, 0, u8::from(a.is_some()), 0, 0, 0, 0]);
    out.extend(question);
    if let Some(a) = a {
        // the question's name (a pointer to it), A, IN, 5 s, 4 bytes
        out.extend([0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
        out.extend(a.octets());
    }
    Some(out)
}

/// Ferrule whose `/etc/resolv.conf` names only `nameserver`: spawned from a
/// thread in a mount namespace of its own, where a file is bound over it
/// (Ferrule and its NGINX inherit the namespace; nothing else sees it). The
/// directory holds that file.
fn spawn_with_nameserver(
    nameserver: Ipv4Addr,
    manifests: &Path,
    extra: &[&str],
) -> (Ferrule, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let resolv: PathBuf = dir.path().join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {nameserver}\n")).unwrap();
    let manifests = manifests.to_owned();
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    let f = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare");
        let resolv = resolv.to_string_lossy().into_owned();
        for args in [
            vec!["--make-rprivate", "/"],
            vec!["--bind", &resolv, "/etc/resolv.conf"],
        ] {
            let out = Command::new("mount").args(&args).output().unwrap();
            assert!(out.status.success(), "mount {args:?}: {out:?}");
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        Ferrule::spawn(&manifests, &extra)
    })
    .join()
    .unwrap();
    (f, dir)
}

/// Without `--allow-local-endpoints`, a responder at an ordinary address (in the
/// backends' network namespace) is asked, named by its address or by a host
/// name, which is looked up first: its answer is stapled. A name whose address
/// is loopback is refused, and nothing connects there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_responder_is_asked_by_address_or_name_a_local_one_is_not() {
    let port = free_port();
    let local = Hostile::start("127.0.0.1", Answer::Silent).await;
    let by_address = format!("http://10.213.0.9:{port}/");
    let by_name = format!("http://responder.ocsp.test:{port}/");
    let to_local = format!("http://loopback.ocsp.test:{}/", local.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let leaves = [
        ("address.ocsp.test", by_address.as_str()),
        ("name.ocsp.test", by_name.as_str()),
        ("local.ocsp.test", to_local.as_str()),
    ];
    pki(dir.path(), &leaves, &[]);
    let _responder = Responder::start_in_netns(dir.path(), port);
    let ns = Nameserver::start(&[
        ("responder.ocsp.test", Ipv4Addr::new(10, 213, 0, 9)),
        ("loopback.ocsp.test", Ipv4Addr::LOCALHOST),
    ])
    .await;
    let echo = Echo::start("127.0.0.2").await;
    let hosts: Vec<&str> = leaves.iter().map(|(h, _)| *h).collect();
    let m = manifests(dir.path(), echo.addr, &hosts, "true");
    let args = [OCSP_ARGS, &["--allow-local-endpoints=false"]].concat();
    let (f, _resolv) = spawn_with_nameserver(ns.ip, m.path(), &args);
    f.wait_ready(Duration::from_secs(20)).await;

    handshake(&f, "local.ocsp.test");
    for host in ["address.ocsp.test", "name.ocsp.test"] {
        let good = wait_until(Duration::from_secs(20), || async {
            stapled(&f, host).as_deref() == Some("good")
        })
        .await;
        assert!(
            good,
            "{host}: no good status stapled ({:?}); NGINX's log:\n{}",
            stapled(&f, host),
            error_log(&f)
        );
    }
    let refused = format!(
        "ferrule: OCSP responder {to_local}: refused: loopback address 127.0.0.1 \
         (--allow-local-endpoints allows it)"
    );
    let all = logged(&f, std::slice::from_ref(&refused)).await;
    assert_eq!(local.seen().accepted, 0, "the local responder was asked");
    assert!(all, "{refused:?} not in NGINX's log:\n{}", error_log(&f));
}
