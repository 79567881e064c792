//! TCP and UDP services (`--tcp-services-configmap`, `--udp-services-configmap`):
//! real TCP and UDP traffic through NGINX's stream block, endpoint changes without a
//! reload and without a failed connection, the PROXY protocol, bad entries reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::*;

const FLAGS: &[&str] = &[
    "--tcp-services-configmap",
    "ingress-nginx/tcp-services",
    "--udp-services-configmap",
    "ingress-nginx/udp-services",
];

/// A TCP and a UDP echo on `ip:port` that answer `"<ip> <what they received>"`
/// (TCP: everything up to a `!`, then the connection is closed: NGINX does not pass
/// a half-close on, as ingress-nginx's does not).
struct StreamEcho(Vec<tokio::task::JoinHandle<()>>);

impl StreamEcho {
    async fn start(ip: &'static str, port: u16) -> StreamEcho {
        let tcp = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
        let udp = tokio::net::UdpSocket::bind((ip, port)).await.unwrap();
        let tcp = tokio::spawn(async move {
            loop {
                let Ok((mut c, _)) = tcp.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !got.ends_with(b"!") {
                        match c.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = format!("{ip} {}", String::from_utf8_lossy(&got));
                    let _ = c.write_all(answer.as_bytes()).await;
                });
            }
        });
        let udp = tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            loop {
                let Ok((n, from)) = udp.recv_from(&mut buf).await else {
                    return;
                };
                let answer = format!("{ip} {}", String::from_utf8_lossy(&buf[..n]));
                let _ = udp.send_to(answer.as_bytes(), from).await;
            }
        });
        StreamEcho(vec![tcp, udp])
    }
}

impl Drop for StreamEcho {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}

/// Sends `bytes` and a `!` over a new TCP connection to NGINX's `port`; the answer
/// without the `!`.
async fn tcp_ask(port: u16, bytes: &[u8]) -> Result<String, String> {
    let talk = async {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        c.write_all(&[bytes, b"!"].concat()).await?;
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(5), talk).await {
        Ok(Ok(a)) if a.ends_with('!') => Ok(a.trim_end_matches('!').to_owned()),
        Ok(Ok(_)) => Err("closed without an answer".to_owned()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}

/// Sends one datagram to NGINX's UDP `port`; the answer.
async fn udp_ask(port: u16, text: &str) -> Result<String, String> {
    let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(text.as_bytes(), ("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 2048];
    match tokio::time::timeout(Duration::from_secs(2), s.recv(&mut buf)).await {
        Ok(Ok(n)) => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".to_owned()),
    }
}

/// Service `demo/echo` (TCP port 9000 `tcp`, UDP port 53 `dns`, both to `target`)
/// with `endpoints` ready, and the two services ConfigMaps.
fn cluster(endpoints: &[&str], target: u16, tcp: &[(u16, &str)], udp: &[(u16, &str)]) -> String {
    let eps: String = endpoints
        .iter()
        .map(|ip| format!("- addresses: [\"{ip}\"]\n"))
        .collect();
    let data = |entries: &[(u16, &str)]| -> String {
        entries
            .iter()
            .map(|(port, v)| format!("  \"{port}\": \"{v}\"\n"))
            .collect()
    };
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{ name: echo, namespace: demo }}
spec:
  ports:
  - {{ name: tcp, port: 9000, targetPort: {target} }}
  - {{ name: dns, port: 53, protocol: UDP, targetPort: {target} }}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{ name: echo-1, namespace: demo, labels: {{ kubernetes.io/service-name: echo }} }}
addressType: IPv4
ports: [{{ name: tcp, port: {target} }}, {{ name: dns, port: {target}, protocol: UDP }}]
endpoints:
{eps}---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: tcp-services, namespace: ingress-nginx }}
data:
{tcp}---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: udp-services, namespace: ingress-nginx }}
data:
{udp}"#,
        tcp = data(tcp),
        udp = data(udp),
    )
}

/// [`cluster`] with a second EndpointSlice, of IPv6 addresses (`v6`): a dual-stack
/// Service, or an IPv6-only one when `v4` is empty.
fn dual_stack(
    v4: &[&str],
    v6: &[&str],
    target: u16,
    tcp: &[(u16, &str)],
    udp: &[(u16, &str)],
) -> String {
    let eps: String = v6
        .iter()
        .map(|ip| format!("- addresses: [\"{ip}\"]\n"))
        .collect();
    format!(
        r#"{}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{ name: echo-6, namespace: demo, labels: {{ kubernetes.io/service-name: echo }} }}
addressType: IPv6
ports: [{{ name: tcp, port: {target} }}, {{ name: dns, port: {target}, protocol: UDP }}]
endpoints:
{}"#,
        cluster(v4, target, tcp, udp),
        if eps.is_empty() {
            "[]\n".to_owned()
        } else {
            eps
        }
    )
}

/// Issue N9: a TCP and a UDP service whose endpoints include an IPv6 address
/// (`::1`, kept by the tests' --allow-local-endpoints), dual-stack and then IPv6
/// only: every connection and datagram reaches an endpoint. The stream module
/// counted a peers file's peers up to the first `]`, that of `"[::1]:port"`, so the
/// file did not parse and the whole backend refused every connection.
#[tokio::test]
async fn tcp_and_udp_services_reach_ipv6_endpoints() {
    ipv6_endpoints(FLAGS).await;
}

/// The same where the stream module is not loaded (`njs/stream.js` picks a peer).
#[tokio::test]
async fn tcp_and_udp_services_reach_ipv6_endpoints_without_the_module() {
    ipv6_endpoints(&[FLAGS, &["--no-fast-path"]].concat()).await;
}

async fn ipv6_endpoints(flags: &[&str]) {
    let target = free_port();
    let _v4 = StreamEcho::start("127.0.0.2", target).await;
    let _v6 = StreamEcho::start("::1", target).await;
    let (tcp_port, udp_port) = (free_port(), free_port());
    let m = Manifests::new();
    let write = |v4: &[&str], v6: &[&str]| {
        let (tcp, udp) = ([(tcp_port, "demo/echo:9000")], [(udp_port, "demo/echo:53")]);
        m.write("all.yaml", &dual_stack(v4, v6, target, &tcp, &udp))
    };
    write(&["127.0.0.2"], &["::1"]);
    let f = Ferrule::start(m.path(), flags).await;

    // Dual-stack: round robin over both, nothing refused.
    let mut answered = std::collections::BTreeSet::new();
    for i in 0..8 {
        let a = tcp_ask(tcp_port, b"x").await;
        assert!(a.is_ok(), "TCP connection {i}: {a:?}; log:\n{}", f.logs());
        answered.insert(a.unwrap());
        let d = udp_ask(udp_port, "u").await;
        assert!(d.is_ok(), "datagram {i}: {d:?}; log:\n{}", f.logs());
        answered.insert(d.unwrap());
    }
    for want in ["127.0.0.2 x", "::1 x", "127.0.0.2 u", "::1 u"] {
        assert!(answered.contains(want), "{want:?} in {answered:?}");
    }

    // IPv6 only.
    write(&[], &["::1"]);
    let moved = wait_until(Duration::from_secs(10), || async {
        for _ in 0..4 {
            if tcp_ask(tcp_port, b"y").await != Ok("::1 y".to_owned())
                || udp_ask(udp_port, "v").await != Ok("::1 v".to_owned())
            {
                return false;
            }
        }
        true
    })
    .await;
    assert!(
        moved,
        "the IPv6-only service is not served; log:\n{}",
        f.logs()
    );
}

#[tokio::test]
async fn tcp_and_udp_services_follow_endpoints_without_a_reload_or_a_failed_connection() {
    churn(&[]).await;
}

#[tokio::test]
async fn tcp_and_udp_services_work_with_the_njs_balancer_too() {
    churn(&["--balancer", "njs"]).await;
}

async fn churn(extra: &[&str]) {
    let target = free_port();
    let _two = StreamEcho::start("127.0.0.2", target).await;
    let _three = StreamEcho::start("127.0.0.3", target).await;
    let (tcp_port, udp_port) = (free_port(), free_port());
    let m = Manifests::new();
    let write = |eps: &[&str]| {
        m.write(
            "all.yaml",
            &cluster(
                eps,
                target,
                &[(tcp_port, "demo/echo:9000")],
                &[(udp_port, "demo/echo:53")],
            ),
        )
    };
    write(&["127.0.0.2"]);
    let flags: Vec<&str> = FLAGS.iter().chain(extra).copied().collect();
    let f = Ferrule::start(m.path(), &flags).await;
    assert_eq!(
        tcp_ask(tcp_port, b"hello").await,
        Ok("127.0.0.2 hello".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(
        udp_ask(udp_port, "ping").await,
        Ok("127.0.0.2 ping".to_owned()),
        "{}",
        f.logs()
    );

    // Connections one after another for the whole churn: none may fail.
    let no_reload = NoReload::capture(&f).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (failures, by_three) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let client = {
        let (stop, failures, by_three) = (stop.clone(), failures.clone(), by_three.clone());
        tokio::spawn(async move {
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                match tcp_ask(tcp_port, b"x").await {
                    Ok(a) if a == "127.0.0.3 x" => {
                        by_three.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(a) if a == "127.0.0.2 x" => {}
                    other => {
                        failures.fetch_add(1, Ordering::SeqCst);
                        errors.push(format!("{other:?}"));
                    }
                }
            }
            errors
        })
    };
    write(&["127.0.0.2", "127.0.0.3"]);
    let both = wait_until(Duration::from_secs(10), || async {
        by_three.load(Ordering::SeqCst) > 0
    })
    .await;
    assert!(both, "the new endpoint never answered; log:\n{}", f.logs());
    write(&["127.0.0.3"]);
    let moved = wait_until(Duration::from_secs(10), || async {
        for _ in 0..5 {
            if tcp_ask(tcp_port, b"y").await != Ok("127.0.0.3 y".to_owned()) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(
        moved,
        "connections still reach the removed endpoint; log:\n{}",
        f.logs()
    );
    stop.store(true, Ordering::SeqCst);
    let errors = client.await.unwrap();
    assert!(
        errors.is_empty(),
        "connections failed during the churn: {errors:?}"
    );
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    // UDP follows too, as TCP did above: every worker, five datagrams in a row.
    let udp_moved = wait_until(Duration::from_secs(10), || async {
        for _ in 0..5 {
            if udp_ask(udp_port, "pong").await != Ok("127.0.0.3 pong".to_owned()) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(
        udp_moved,
        "datagrams still reach the removed endpoint; log:\n{}",
        f.logs()
    );
    no_reload
        .check(&f, "endpoint churn of TCP/UDP services")
        .await;

    // No endpoints: connections are closed; endpoints back: served, still no reload.
    write(&[]);
    let closed = wait_until(Duration::from_secs(10), || async {
        tcp_ask(tcp_port, b"z").await.is_err()
    })
    .await;
    assert!(closed, "a service without endpoints still answers");
    write(&["127.0.0.2"]);
    let back = wait_until(Duration::from_secs(10), || async {
        tcp_ask(tcp_port, b"z").await == Ok("127.0.0.2 z".to_owned())
    })
    .await;
    assert!(
        back,
        "the endpoint that came back is not served; log:\n{}",
        f.logs()
    );
    no_reload.check(&f, "endpoints gone and back").await;
}

/// An endpoint that moves from one address to another of the same length by way of
/// both (A; A and B; B) with no connection in between: the last peers file then has
/// the size of the one a worker last read, is written within the same second, and
/// ext4 gives each new file the lowest free inode, which is that file's, freed by the
/// rename in between. Every move must still reach the next connection (the stream
/// module's copy of a file once looked unchanged then, and kept sending connections
/// to the old address).
#[tokio::test]
async fn an_endpoint_moving_between_two_addresses_is_followed_every_time() {
    let target = free_port();
    let _two = StreamEcho::start("127.0.0.2", target).await;
    let _three = StreamEcho::start("127.0.0.3", target).await;
    let tcp_port = free_port();
    // Manifests off the prefix's filesystem where there is one, so that their own
    // renames take no inodes there.
    let shm = tempfile::tempdir_in("/dev/shm");
    let m = Manifests::in_dir(shm.unwrap_or_else(|_| tempfile::tempdir().unwrap()));
    let write = |eps: &[&str]| {
        let tcp = [(tcp_port, "demo/echo:9000")];
        m.write("all.yaml", &cluster(eps, target, &tcp, &[]))
    };
    write(&["127.0.0.2"]);
    let f = Ferrule::start(m.path(), FLAGS).await;
    // The controller logs each write of the peers file.
    let writes = || f.logs().matches("stream peers updated files=1").count();
    let followed = |ip: &'static str| async move {
        let want = format!("{ip} t");
        wait_until(Duration::from_secs(5), || async {
            for _ in 0..6 {
                if tcp_ask(tcp_port, b"t").await.as_ref() != Ok(&want) {
                    return false;
                }
            }
            true
        })
        .await
    };
    for round in 0..6 {
        let (from, to) = if round % 2 == 0 {
            ("127.0.0.2", "127.0.0.3")
        } else {
            ("127.0.0.3", "127.0.0.2")
        };
        assert!(followed(from).await, "round {round}: not at {from}");
        // Each step written by the controller (its log says so) before the next, and
        // no connection until the last.
        for eps in [&[from, to][..], &[to]] {
            let before = writes();
            write(eps);
            let written = wait_until(Duration::from_secs(5), || async { writes() > before }).await;
            assert!(
                written,
                "round {round}: {eps:?} never written; log:\n{}",
                f.logs()
            );
        }
        assert!(
            followed(to).await,
            "round {round}: the move to {to} never reached every connection: {:?}; log:\n{}",
            tcp_ask(tcp_port, b"t").await,
            f.logs()
        );
    }
}

/// A ready endpoint where nothing listens: with ingress-nginx's defaults
/// (`proxy-stream-next-upstream` on, 3 tries) a connection that meets it goes on to
/// the next endpoint (Ferrule's stream module), so every one is answered; with the
/// key off, those connections fail.
#[tokio::test]
async fn a_connection_to_a_dead_endpoint_tries_the_next() {
    retries(&[]).await;
}

#[tokio::test]
async fn a_connection_to_a_dead_endpoint_tries_the_next_with_njs_too() {
    retries(&["--balancer", "njs"]).await;
}

async fn retries(extra: &[&str]) {
    let target = free_port();
    let _two = StreamEcho::start("127.0.0.2", target).await;
    let tcp_port = free_port();
    let m = Manifests::new();
    // 127.0.0.4: ready in the EndpointSlice, nothing listens there.
    let services = cluster(
        &["127.0.0.4", "127.0.0.2"],
        target,
        &[(tcp_port, "demo/echo:9000")],
        &[],
    );
    m.write("all.yaml", &services);
    m.write("cm.yaml", &configmap(&[]));
    let flags: Vec<&str> = (FLAGS.iter())
        .chain(&["--configmap", "demo/ferrule"])
        .chain(extra)
        .copied()
        .collect();
    let f = Ferrule::start(m.path(), &flags).await;
    for i in 0..12 {
        assert_eq!(
            tcp_ask(tcp_port, i.to_string().as_bytes()).await,
            Ok(format!("127.0.0.2 {i}")),
            "connection {i}; log:\n{}",
            f.logs()
        );
    }

    m.write(
        "cm.yaml",
        &configmap(&[("proxy-stream-next-upstream", "false")]),
    );
    let failing = wait_until(Duration::from_secs(10), || async {
        let mut failed = 0;
        for _ in 0..6 {
            failed += usize::from(tcp_ask(tcp_port, b"q").await.is_err());
        }
        failed > 0
    })
    .await;
    assert!(
        failing,
        "with proxy-stream-next-upstream off, no connection met the dead endpoint; log:\n{}",
        f.logs()
    );
}

#[tokio::test]
async fn ports_come_and_go_with_the_configmap_and_bad_entries_are_reported() {
    let target = free_port();
    let _two = StreamEcho::start("127.0.0.2", target).await;
    let (plain, encode, decode) = (free_port(), free_port(), free_port());
    let m = Manifests::new();
    m.write(
        "all.yaml",
        &cluster(&["127.0.0.2"], target, &[(plain, "demo/echo:9000")], &[]),
    );
    let f = Ferrule::start(m.path(), FLAGS).await;
    assert_eq!(tcp_ask(plain, b"a").await, Ok("127.0.0.2 a".to_owned()));
    assert!(
        tcp_ask(encode, b"a").await.is_err(),
        "nothing listens there yet"
    );

    let bad = free_port();
    m.write(
        "all.yaml",
        &cluster(
            &["127.0.0.2"],
            target,
            &[
                (plain, "demo/echo:tcp"),
                (encode, "demo/echo:9000::PROXY"),
                (decode, "demo/echo:9000:PROXY"),
                (bad, "demo/missing:9000"),
                (f.http, "demo/echo:9000"),
            ],
            &[],
        ),
    );
    let added = wait_until(Duration::from_secs(10), || async {
        tcp_ask(encode, b"b").await.is_ok()
    })
    .await;
    assert!(added, "the new port is not served; log:\n{}", f.logs());
    // NGINX sends the PROXY protocol line first (the client's address: loopback).
    let answer = tcp_ask(encode, b"b").await.unwrap();
    assert!(
        answer.starts_with("127.0.0.2 PROXY TCP4 127.0.0.1 127.0.0.1 ")
            && answer.ends_with("\r\nb"),
        "{answer:?}"
    );
    // A port that decodes the PROXY protocol refuses a connection without it and
    // serves one with it.
    assert!(tcp_ask(decode, b"c").await.is_err());
    let line = format!("PROXY TCP4 192.0.2.7 127.0.0.1 5555 {decode}\r\nc");
    assert_eq!(
        tcp_ask(decode, line.as_bytes()).await,
        Ok("127.0.0.2 c".to_owned())
    );
    assert_eq!(tcp_ask(plain, b"d").await, Ok("127.0.0.2 d".to_owned()));
    for needle in [
        format!("tcp service \"{bad}\": Service demo/missing not found; the port is not served"),
        format!(
            "tcp service \"{}\": port {} is the controller's own",
            f.http, f.http
        ),
    ] {
        assert!(
            f.reports(
                "ConfigMap",
                "ingress-nginx",
                "tcp-services",
                &needle,
                Duration::from_secs(5)
            )
            .await,
            "not reported: {needle}; resource: {:?}",
            f.resource("ConfigMap", "ingress-nginx", "tcp-services")
                .await
        );
    }
    // HTTP is still served on its port.
    assert_eq!(f.get("nothing.example", "/").await.0, 404);

    // The entry removed: the port closes.
    m.write(
        "all.yaml",
        &cluster(&["127.0.0.2"], target, &[(plain, "demo/echo:9000")], &[]),
    );
    let removed = wait_until(Duration::from_secs(10), || async {
        tcp_ask(encode, b"e").await.is_err()
    })
    .await;
    assert!(removed, "a removed entry is still served");
}

/// `proxy-protocol-header-timeout`: a client of a port that decodes the PROXY
/// protocol and sends no PROXY line is let go after that time (NGINX's own is 30s).
#[tokio::test]
async fn a_missing_proxy_line_is_waited_for_only_as_long_as_the_configmap_says() {
    let target = free_port();
    let _two = StreamEcho::start("127.0.0.2", target).await;
    let decode = free_port();
    let m = Manifests::new();
    m.write(
        "all.yaml",
        &cluster(
            &["127.0.0.2"],
            target,
            &[(decode, "demo/echo:9000:PROXY")],
            &[],
        ),
    );
    m.write(
        "cm.yaml",
        &configmap(&[("proxy-protocol-header-timeout", "1s")]),
    );
    let flags = [FLAGS, &["--configmap", "demo/ferrule"]].concat();
    let f = Ferrule::start(m.path(), &flags).await;
    let line = format!("PROXY TCP4 192.0.2.7 127.0.0.1 5555 {decode}\r\nc");
    assert_eq!(
        tcp_ask(decode, line.as_bytes()).await,
        Ok("127.0.0.2 c".to_owned()),
        "log:\n{}",
        f.logs()
    );
    // Silent after connecting: closed once the second has passed, before both
    // Ferrule's default (5s) and NGINX's (30s).
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", decode))
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(4), s.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open after 4s: {read:?}"
    );
}

/// A TCP answer from NGINX's `port`: what it sends before closing.
async fn tcp_read(port: u16) -> Result<String, String> {
    let talk = async {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(5), talk).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}

/// `stream-snippet` annotations, with snippets allowed: each Ingress's text goes
/// into the stream block between its source markers, so a broken one is excluded
/// by config safety and reported on its Ingress while the others are served.
/// Without `--allow-snippet-annotations` the snippet is ignored with a Warning.
#[tokio::test]
async fn stream_snippets_of_ingresses_with_snippets_allowed() {
    let echo = Echo::start("127.0.0.2").await;
    let (good, broken) = (free_port(), free_port());
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let snippet = |name: &str, created: &str, text: String| {
        ingress(
            "demo",
            name,
            created,
            &format!("{name}.test"),
            &[("/", "Prefix", "echo")],
            &[("stream-snippet", text.as_str())],
        )
    };
    m.write(
        "good.yaml",
        &snippet(
            "good",
            "2026-01-01T00:00:00Z",
            format!("server {{ listen 127.0.0.1:{good}; return \"from a stream snippet\\n\"; }}"),
        ),
    );
    m.write(
        "broken.yaml",
        &snippet(
            "broken",
            "2026-01-02T00:00:00Z",
            format!("server {{ listen 127.0.0.1:{broken}; no_such_directive on; }}"),
        ),
    );
    let allowed = [FLAGS, &["--allow-snippet-annotations"]].concat();
    let f = Ferrule::start(m.path(), &allowed).await;
    let served = wait_until(Duration::from_secs(20), || async {
        tcp_read(good).await.as_deref() == Ok("from a stream snippet\n")
    })
    .await;
    assert!(served, "{:?}; log:\n{}", tcp_read(good).await, f.logs());
    let broken_state = wait_until(Duration::from_secs(20), || async {
        let r = f.resource("Ingress", "demo", "broken").await;
        r.is_some_and(|r| r["state"] == "rejected")
    })
    .await;
    assert!(
        broken_state,
        "{:?}",
        f.resource("Ingress", "demo", "broken").await
    );
    let r = f.resource("Ingress", "demo", "broken").await.unwrap();
    assert!(r.to_string().contains("no_such_directive"), "{r}");
    assert!(
        tcp_read(broken).await.is_err(),
        "the broken snippet is not served"
    );
    assert_eq!(f.get("good.test", "/").await.0, 200, "its HTTP rules are");
    drop(f);

    let f = Ferrule::start(m.path(), FLAGS).await;
    assert!(tcp_read(good).await.is_err(), "snippets are off by default");
    let r = f.resource("Ingress", "demo", "good").await.unwrap();
    assert!(
        r.to_string()
            .contains("stream-snippet: snippets are disabled"),
        "{r}"
    );
}
