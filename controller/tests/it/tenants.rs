//! Issue 17, "no tenant can hurt another": what one namespace's objects can do to the
//! others' traffic, readiness and privacy, through the real NGINX.

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

/// Regex paths are compiled by PCRE, which backtracks: a path that the model accepts
/// must not let a crafted URI hold a worker that serves every tenant. The worst the
/// model accepts, on URIs made to make them backtrack, costs the workers little more
/// than a plain path (CPU time of the workers, compared in the same run); the
/// polynomial ones are refused and reported.
#[tokio::test]
async fn a_regex_path_cannot_hold_the_workers() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("evil", "app", &[echo.addr]));
    m.write("good.yaml", &service("good", "app", &[echo.addr]));
    let alternatives = |n: usize| "(a|a)".repeat(n);
    m.write(
        "regex.yaml",
        &Ing::new("evil", "regex", T0)
            .nginx("use-regex", "true")
            .rule(
                "regex.test",
                &[
                    // refused: eight stars that take the same characters
                    ("/r/a*a*a*a*a*a*a*a*b", "ImplementationSpecific", "app"),
                    // at the bounds: one star that gives back, 16 ways around it;
                    // 2^18 ways without one
                    (
                        &format!("/w/.*{}c", alternatives(4)),
                        "ImplementationSpecific",
                        "app",
                    ),
                    (
                        &format!("/v/{}c", alternatives(18)),
                        "ImplementationSpecific",
                        "app",
                    ),
                ],
            )
            .yaml(),
    );
    m.write(
        "plain.yaml",
        &Ing::new("good", "plain", T0)
            .rule("plain.test", &[("/plain", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let long = "a".repeat(7000);
    assert_eq!(f.get("plain.test", &format!("/plain/{long}")).await.0, 200);
    assert_eq!(f.get("regex.test", "/v/aaaaaaaaaaaaaaaaaac").await.0, 200);
    assert_eq!(f.get("regex.test", "/w/xaaaac").await.0, 200);

    // CPU time per request of the workers, `rounds` times each URI, fastest of 3.
    let cost = async |host: &str, uris: &[String], rounds: usize| {
        let mut best = u64::MAX;
        for _ in 0..3 {
            let before = f.workers_cpu_ns();
            for _ in 0..rounds {
                for u in uris {
                    f.get(host, u).await;
                }
            }
            best = best.min(f.workers_cpu_ns() - before);
        }
        best / (rounds * uris.len()) as u64
    };
    let crafted = [
        format!("/r/{}cb", &long[..100]),
        format!("/w/{long}xc"),
        format!("/v/{}xc", &long[..18]),
    ];
    let plain = cost("plain.test", &[format!("/plain/{long}xc")], 30).await;
    let hostile = cost("regex.test", &crafted, 10).await;
    assert!(
        hostile < 20 * plain.max(1),
        "a crafted request costs the workers {hostile} ns, a plain one {plain} ns"
    );

    let r = f.resource("Ingress", "evil", "regex").await.unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.contains("path \"/r/a*a*a*a*a*a*a*a*b\"") && msg.contains("steps"),
        "{msg}"
    );
    assert!(!msg.contains("/w/") && !msg.contains("/v/"), "{msg}");
}

/// An address of this machine that is not loopback (the status port's answer to a
/// remote client), if it has one.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let out = std::process::Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3)?.split('/').next()?.parse().ok())
        .find(|ip: &std::net::IpAddr| !ip.is_loopback())
}

/// A GET of `http://ADDR:PORT/PATH` from source address `from`: (status, body).
async fn get_from(
    from: std::net::IpAddr,
    addr: std::net::IpAddr,
    port: u16,
    path: &str,
) -> (u16, String) {
    let c = reqwest::Client::builder()
        .local_address(from)
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let r = c
        .get(format!(
            "http://{}{path}",
            std::net::SocketAddr::new(addr, port)
        ))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Whoever may write an EndpointSlice in a namespace chooses its addresses: one of
/// 127.0.0.1 and the status port would proxy a public host to `/status/resources`
/// (every tenant's Ingresses, hosts, Secret names and errors). Without
/// `--allow-local-endpoints` (the default) such endpoints are left out and reported.
#[tokio::test]
async fn a_local_endpoint_is_left_out_and_reported() {
    let m = Manifests::new();
    m.write("ns.yaml", &ingress_class("unused", false));
    let f = Ferrule::start(m.path(), &["--allow-local-endpoints=false"]).await;
    let local: std::net::SocketAddr = format!("127.0.0.1:{}", f.status).parse().unwrap();
    m.write("svc.yaml", &service("evil", "peek", &[local]));
    m.write(
        "ing.yaml",
        &Ing::new("evil", "peek", T0)
            .rule("peek.test", &[("/", "Prefix", "peek")])
            .yaml(),
    );
    let reported = wait_until(std::time::Duration::from_secs(10), || async {
        f.resource("Ingress", "evil", "peek")
            .await
            .is_some_and(|r| {
                r["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(&format!("endpoint {local} left out"))
            })
    })
    .await;
    assert!(
        reported,
        "{:?}\n{}",
        f.resource("Ingress", "evil", "peek").await,
        f.logs()
    );
    f.old_workers_gone().await;
    let (status, body) = f.get("peek.test", "/status/resources").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(f.get_status("/readyz").await.0, 200);

    // A backend on another address of this machine (the same port: one Service
    // port) is still served, and only it.
    if let Some(ip) = non_loopback_address() {
        let echo = Echo::start_on(&ip.to_string(), f.status).await;
        m.write("svc.yaml", &service("evil", "peek", &[local, echo.addr]));
        let served = wait_until(std::time::Duration::from_secs(10), || async {
            f.backend("peek.test", "/").await == (200, echo.addr.to_string())
        })
        .await;
        assert!(served, "{}", f.logs());
        for _ in 0..4 {
            assert_eq!(f.backend("peek.test", "/").await.1, echo.addr.to_string());
        }
    }
}

/// `/status/resources` (every tenant's Ingresses, hosts, Secret names and errors) is
/// served on the status socket only, unless `--status-resources-public`: not to a
/// loopback connection without `X-Forwarded-For` (what NGINX's own request to a
/// local endpoint, or a tenant's snippet clearing the header, looks like), not
/// through NGINX to the port, nor to the socket; `ferrule resources` reads it. The
/// probes and metrics answer on every address.
#[tokio::test]
async fn status_resources_answer_only_on_the_status_socket() {
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let m = Manifests::new();
    m.write("ns.yaml", &ingress_class("unused", false));
    let local_endpoint = |port: u16| format!("127.0.0.1:{port}").parse().unwrap();
    let f = Ferrule::start(
        m.path(),
        &["--status-address", "0.0.0.0", "--configmap", "demo/ferrule"],
    )
    .await;
    m.write(
        "svc.yaml",
        &service("evil", "peek", &[local_endpoint(f.status)]),
    );
    m.write(
        "ing.yaml",
        &Ing::new("evil", "peek", T0)
            .rule("peek.test", &[("/", "Prefix", "peek")])
            .yaml(),
    );
    // The ConfigMap's snippets are the administrator's, but they show what any
    // NGINX configuration naming the socket would get.
    let socket = f.prefix.path().join("nginx").join(ferrule::status::SOCKET);
    let snippet = format!(
        "location = /peek-socket {{ proxy_pass http://unix:{}:/status/resources; }}",
        socket.display()
    );
    m.write("cm.yaml", &configmap(&[("server-snippet", &snippet)]));
    let listed = wait_until(std::time::Duration::from_secs(10), || async {
        f.resource("Ingress", "evil", "peek").await.is_some()
    })
    .await;
    assert!(listed, "{}", f.logs());

    // A loopback connection without X-Forwarded-For is no proof of anything.
    let (status, body) = get_from(loopback, loopback, f.status, "/status/resources").await;
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("peek"), "{body}");
    if let Some(ip) = non_loopback_address() {
        for path in ["/healthz", "/readyz", "/metrics"] {
            assert_eq!(get_from(ip, ip, f.status, path).await.0, 200, "{path}");
        }
        let (status, body) = get_from(ip, ip, f.status, "/status/resources").await;
        assert_eq!(status, 403, "{body}");
    }

    // Through NGINX: to the port (an endpoint of 127.0.0.1, allowed here), and to
    // the socket.
    let proxied = wait_until(std::time::Duration::from_secs(10), || async {
        f.get("peek.test", "/healthz").await.0 == 200
    })
    .await;
    assert!(proxied, "{}", f.logs());
    f.old_workers_gone().await;
    for path in ["/status/resources", "/peek-socket"] {
        let r = client()
            .get(format!("http://127.0.0.1:{}{path}", f.http))
            .header("Host", "peek.test")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert!(status == 403 || status == 502, "{path}: {status} {body}");
        assert!(!body.contains("peek"), "{path}: {body}");
    }

    // The operator's command reads them.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrule"))
        .args(["resources", "--nginx-prefix"])
        .arg(f.prefix.path().join("nginx"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"peek\""), "{stdout}");
    drop(f);

    let f = Ferrule::start(
        m.path(),
        &["--status-address", "0.0.0.0", "--status-resources-public"],
    )
    .await;
    let (status, body) = get_from(loopback, loopback, f.status, "/status/resources").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"peek\""), "{body}");
}

/// The subject of the certificate served for `sni` on the HTTPS port.
fn served_subject(f: &Ferrule, sni: &str) -> String {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{}", f.https))
        .args(["-servername", sni])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The balancer keeps certificates in NGINX shared memory that every tenant's TLS
/// shares. One tenant's Secrets fill it here three ways: a key padded past its PEM
/// block, named by forty hosts (a copy per host filled the store); one large chain
/// named by fifty hosts (stored once); and thirty Secrets of a large chain each,
/// more than the store holds. Another namespace's host keeps its certificate, the
/// pod stays Ready, and what does not fit is reported on the Ingress and Secrets
/// that bring it, with the store's fill level in the metrics.
#[tokio::test]
async fn a_tenant_cannot_exhaust_the_certificate_store() {
    let certs = tempfile::tempdir().unwrap();
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    let tls_ing = |ns: &str, name: &str, hosts: &[String], secret: &str| {
        let paths = [("/", "Prefix", "app")];
        let mut ing = Ing::new(ns, name, T0).nginx("ssl-redirect", "false");
        for h in hosts {
            ing = ing.rule(h, &paths);
        }
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        ing.tls(&hosts, secret).yaml()
    };
    let (v_cert, v_key, v_fp) = self_signed(certs.path(), "victim", &["victim.good.test"]);
    m.write("good-svc.yaml", &service("good", "app", &[echo.addr]));
    // as large as the tenant's, so that the order matters after a restart
    let chain = |cert: &str| cert.repeat(100_000 / cert.len());
    m.write(
        "good-secret.yaml",
        &tls_secret("good", "victim", &chain(&v_cert), &v_key),
    );
    m.write(
        "good-ing.yaml",
        &tls_ing("good", "victim", &["victim.good.test".to_owned()], "victim"),
    );
    // the Lua balancer's store (njs keeps certificates in files: no store size to fill)
    let flags = ["--balancer", "lua", "--certificate-store-size", "2"];
    let f = Ferrule::start(m.path(), &flags).await;
    assert_eq!(f.served_fingerprint("victim.good.test"), v_fp);

    m.write("evil-svc.yaml", &service("evil", "app", &[echo.addr]));
    let hosts = |prefix: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("{prefix}{i:02}.evil.test"))
            .collect()
    };
    // a valid key, and a MB of padding after its block
    let (cert, key, _) = self_signed(certs.path(), "padded", &["*.evil.test"]);
    let padded = format!("{key}{}\n", "A".repeat(1 << 20));
    m.write(
        "evil-padded.yaml",
        &tls_secret("evil", "padded", &cert, &padded),
    );
    m.write(
        "evil-padded-ing.yaml",
        &tls_ing("evil", "padded", &hosts("p", 40), "padded"),
    );
    // about 100 KB of chain each: the same certificate, repeated
    let (cert, key, shared_fp) = self_signed(certs.path(), "shared", &["*.evil.test"]);
    m.write(
        "evil-shared.yaml",
        &tls_secret("evil", "shared", &chain(&cert), &key),
    );
    m.write(
        "evil-shared-ing.yaml",
        &tls_ing("evil", "shared", &hosts("a", 50), "shared"),
    );
    let mut fill = Vec::new();
    for i in 0..30 {
        let (cert, key, _) = self_signed(certs.path(), &format!("fill{i}"), &["*.evil.test"]);
        fill.push(tls_secret(
            "evil",
            &format!("fill{i:02}"),
            &chain(&cert),
            &key,
        ));
        let ing = tls_ing(
            "evil",
            &format!("fill{i:02}"),
            &hosts(&format!("f{i:02}-"), 1),
            &format!("fill{i:02}"),
        );
        fill.push(ing);
    }
    m.write("evil-fill.yaml", &fill.join("\n---\n"));

    // Some fill Ingresses are refused by the store, and reported; Ready throughout.
    let ready_throughout = std::sync::atomic::AtomicBool::new(true);
    let reported = wait_until(std::time::Duration::from_secs(30), || async {
        if f.get_status("/readyz").await.0 != 200 {
            ready_throughout.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        f.resources().await.iter().any(|r| {
            r["kind"] == "Ingress"
                && r["namespace"] == "evil"
                && r["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("the balancer refused the certificate of host f")
        })
    })
    .await;
    let resources = f.resources().await;
    let dump = serde_json::to_string_pretty(&resources).unwrap();
    assert!(reported, "no store refusal reported:\n{dump}\n{}", f.logs());
    assert!(
        ready_throughout.load(std::sync::atomic::Ordering::SeqCst),
        "not Ready at some point:\n{}",
        f.logs()
    );
    assert_eq!(f.get_status("/readyz").await.0, 200);

    // The other namespace keeps its certificate.
    assert_eq!(
        served_subject(&f, "victim.good.test"),
        "CN = victim.good.test"
    );
    assert_eq!(f.served_fingerprint("victim.good.test"), v_fp);
    let good = f.resource("Ingress", "good", "victim").await.unwrap();
    assert_eq!(good["state"], "applied", "{good}");

    // The padded key is refused by its size, whatever the rest is.
    let padded = f.resource("Ingress", "evil", "padded").await.unwrap();
    assert_eq!(padded["state"], "rejected", "{padded}");
    assert!(
        padded["message"]
            .as_str()
            .unwrap()
            .contains("more than the 131072"),
        "{padded}"
    );
    // Fifty hosts of one Secret take its size once: all served.
    let shared = f.resource("Ingress", "evil", "shared").await.unwrap();
    assert_eq!(shared["state"], "applied", "{shared}");
    for h in ["a00.evil.test", "a49.evil.test"] {
        assert_eq!(f.served_fingerprint(h), shared_fp, "{h}");
    }
    // What does not fit is reported on its Ingress and its Secret, with the reason.
    let refused: Vec<&serde_json::Value> = resources
        .iter()
        .filter(|r| {
            r["message"]
                .as_str()
                .unwrap_or_default()
                .contains("no memory")
        })
        .collect();
    let kinds: std::collections::BTreeSet<&str> = refused
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Ingress", "Secret"].into(), "{dump}");
    assert!(
        refused.iter().all(|r| r["namespace"] == "evil"
            && r["state"] == "rejected"
            && r["message"]
                .as_str()
                .unwrap()
                .contains("--certificate-store-size")),
        "{dump}"
    );
    let capacity = f
        .metric("ferrule_certificate_store_bytes", "state=\"capacity\"")
        .await;
    let free = f
        .metric("ferrule_certificate_store_bytes", "state=\"free\"")
        .await;
    assert_eq!(capacity, (2 << 20) as f64);
    assert!(free < 200_000.0, "{free} bytes free");

    // NGINX dies and starts with an empty store: the hosts it served come first,
    // the victim's among them, though its host sorts after the tenant's.
    let master = f.master_pid().unwrap();
    kill_9(master);
    let back = wait_until(std::time::Duration::from_secs(30), || async {
        f.master_pid().is_some_and(|p| p != master && alive(p))
            && f.get_status("/readyz").await.0 == 200
            && f.served_fingerprint("victim.good.test") == v_fp
    })
    .await;
    assert!(back, "{}", f.logs());
    assert_eq!(f.served_fingerprint("a07.evil.test"), shared_fp);
}

/// A Service and its EndpointSlice in two files: an endpoint change then touches
/// the slice alone (the manifests source re-decodes only the file that changed).
fn service_and_slice(m: &Manifests, ns: &str, name: &str, endpoints: &[std::net::SocketAddr]) {
    let yaml = service(ns, name, endpoints);
    let (svc, slice) = yaml.split_once("\n---\n").unwrap();
    m.write(&format!("{ns}-{name}-svc.yaml"), svc);
    m.write(&format!("{ns}-{name}-slice.yaml"), slice);
}

/// An endpoint change does not wait for a full model build: while one tenant's
/// change is being built (made slow here, as a pathological input would make it),
/// another tenant's EndpointSlice change reaches traffic, and the finished build
/// does not take it back.
#[tokio::test]
async fn an_endpoint_change_does_not_wait_for_a_full_build() {
    let old = Echo::start("127.0.0.2").await;
    let new = Echo::start_on("127.0.0.3", old.addr.port()).await;
    let m = Manifests::new();
    service_and_slice(&m, "victim", "app", &[old.addr]);
    m.write(
        "victim.yaml",
        &Ing::new("victim", "web", T0)
            .rule("victim.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    m.write("tenant-svc.yaml", &service("tenant", "app", &[old.addr]));
    let f = Ferrule::start_env(
        m.path(),
        &[],
        &[("FERRULE_TEST_FULL_BUILD_DELAY_MS", "4000")],
    )
    .await;
    assert_eq!(f.backend("victim.test", "/").await.1, old.addr.to_string());
    let full = r#"kind="full""#;
    let full_builds = f.metric("ferrule_model_builds_total", full).await;

    // The tenant's new Ingress needs a full build; the victim's endpoint change
    // comes while it runs.
    m.write(
        "tenant.yaml",
        &Ing::new("tenant", "web", T0)
            .rule("tenant.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    service_and_slice(&m, "victim", "app", &[new.addr]);
    let moved = wait_until(std::time::Duration::from_secs(20), || async {
        f.backend("victim.test", "/").await.1 == new.addr.to_string()
    })
    .await;
    assert!(moved, "{}", f.logs());
    assert_eq!(
        f.metric("ferrule_model_builds_total", full).await,
        full_builds,
        "the endpoint change came before the full build ended"
    );

    // The build lands with the newest endpoints.
    let built = wait_until(std::time::Duration::from_secs(20), || async {
        f.get("tenant.test", "/").await.0 == 200
    })
    .await;
    assert!(built, "{}", f.logs());
    for _ in 0..4 {
        assert_eq!(f.backend("victim.test", "/").await.1, new.addr.to_string());
    }
}

/// Limits per Ingress: one that holds more paths, regex paths, hosts or bytes
/// than the flags allow is rejected alone, with a message naming the flag; the
/// other namespace's Ingress is served all the while.
#[tokio::test]
async fn an_ingress_beyond_a_limit_is_rejected_alone() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    for ns in ["victim", "evil"] {
        m.write(&format!("{ns}-svc.yaml"), &service(ns, "app", &[echo.addr]));
    }
    m.write(
        "victim.yaml",
        &Ing::new("victim", "web", T0)
            .rule("victim.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    let paths: Vec<String> = (0..6).map(|i| format!("/p{i}")).collect();
    let rules: Vec<PathRule> = paths
        .iter()
        .map(|p| (p.as_str(), "Prefix", "app"))
        .collect();
    m.write(
        "many.yaml",
        &Ing::new("evil", "many", T0)
            .rule("many.test", &rules)
            .yaml(),
    );
    m.write(
        "regex.yaml",
        &Ing::new("evil", "regex", T0)
            .nginx("use-regex", "true")
            .rule("regex.test", &rules[..4])
            .yaml(),
    );
    let mut hosts = Ing::new("evil", "hosts", T0);
    for i in 0..4 {
        hosts = hosts.rule(&format!("h{i}.test"), &[("/", "Prefix", "app")]);
    }
    m.write("hosts.yaml", &hosts.yaml());
    m.write(
        "big.yaml",
        &Ing::new("evil", "big", T0)
            .annotation("example.com/note", &"x".repeat(70 * 1024))
            .rule("big.test", &[("/", "Prefix", "app")])
            .yaml(),
    );
    m.write(
        "fits.yaml",
        &Ing::new("evil", "fits", T0)
            .rule("fits.test", &rules[..3])
            .yaml(),
    );
    let f = Ferrule::start(
        m.path(),
        &[
            "--max-paths-per-ingress",
            "5",
            "--max-regex-paths-per-ingress",
            "3",
            "--max-hosts-per-ingress",
            "3",
        ],
    )
    .await;

    assert_eq!(f.backend("victim.test", "/").await.1, echo.addr.to_string());
    assert_eq!(f.get("fits.test", "/p0").await.0, 200, "{}", f.logs());
    for (name, host, flag) in [
        ("many", "many.test", "--max-paths-per-ingress (5)"),
        ("regex", "regex.test", "--max-regex-paths-per-ingress (3)"),
        ("hosts", "h0.test", "--max-hosts-per-ingress (3)"),
        ("big", "big.test", "--max-annotation-value-bytes (65536)"),
    ] {
        let r = f.resource("Ingress", "evil", name).await.unwrap();
        assert_eq!(r["state"], "rejected", "{r}");
        let message = r["message"].as_str().unwrap_or_default();
        assert!(message.contains(flag), "{name}: {message}");
        assert_eq!(f.get(host, "/p0").await.0, 404, "{name} is not served");
    }
    let victim = f.resource("Ingress", "victim", "web").await.unwrap();
    assert_eq!(victim["state"], "applied", "{victim}");
    let (status, _) = f.get_status("/readyz").await;
    assert_eq!(status, 200, "still Ready");
}
