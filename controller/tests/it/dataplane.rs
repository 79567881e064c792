//! Smoke test of the data path: Ferrule serves an Ingress through real NGINX.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn serves_an_ingress_and_follows_file_changes() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &[("/", "Prefix", "echo")],
            &[],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(f.backend("web.test", "/x").await, (200, a.addr.to_string()));
    assert_eq!(f.get("unknown.test", "/").await.0, 404);

    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &[("/api", "Prefix", "echo")],
            &[],
        ),
    );
    let moved = wait_until(Duration::from_secs(5), || async {
        f.get("web.test", "/x").await.0 == 404
    })
    .await;
    assert!(moved, "path change applied; log:\n{}", f.logs());
    assert_eq!(
        f.backend("web.test", "/api/v1").await,
        (200, a.addr.to_string())
    );
}

/// How many threads each NGINX worker runs.
fn worker_threads(f: &Ferrule) -> Vec<usize> {
    (f.worker_pids().iter())
        .map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()))
        .collect()
}

/// A thread pool makes every worker multi-threaded, which costs each system call:
/// with ingress-nginx's default (answers not buffered) the workers run one thread
/// each; an Ingress that buffers its answers brings the pool, and its answers
/// arrive.
#[tokio::test]
async fn workers_run_a_thread_pool_only_where_answers_are_buffered() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    let web = |annotations: &[(&str, &str)]| {
        let paths = [("/", "Prefix", "echo")];
        ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &paths,
            annotations,
        )
    };
    m.write("ing.yaml", &web(&[]));
    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(f.backend("web.test", "/").await, (200, a.addr.to_string()));
    let threads = worker_threads(&f);
    assert!(
        !threads.is_empty() && threads.iter().all(|&n| n == 1),
        "workers' threads: {threads:?}"
    );

    let buffering = [("proxy-buffering", "on")];
    m.write("ing.yaml", &web(&buffering));
    // Until the old workers, single-threaded, have left.
    let pooled = wait_until(Duration::from_secs(20), || async {
        let threads = worker_threads(&f);
        !threads.is_empty() && threads.iter().all(|&n| n > 1)
    })
    .await;
    assert!(
        pooled,
        "workers' threads: {:?}; log:\n{}",
        worker_threads(&f),
        f.logs()
    );
    for _ in 0..5 {
        assert_eq!(f.backend("web.test", "/x").await, (200, a.addr.to_string()));
    }
}

/// A prefix below a directory that NGINX's worker user cannot enter (`mktemp -d`,
/// `/root`): Ferrule's own answers, TLS and large bodies work as anywhere else.
#[tokio::test]
async fn a_prefix_below_a_private_directory_serves_every_answer() {
    use std::os::unix::fs::PermissionsExt;
    let a = Echo::start("127.0.0.2").await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(certs.path(), "web", &["tls.test"]);
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write("none.yaml", &service("demo", "none", &[]));
    m.write("secret.yaml", &tls_secret("demo", "web-tls", &cert, &key));
    m.write(
        "empty.yaml",
        &ingress(
            "demo",
            "empty",
            "2026-01-01T00:00:00Z",
            "empty.test",
            &[("/", "Prefix", "none")],
            &[],
        ),
    );
    m.write(
        "tls.yaml",
        &Ing::new("demo", "tls", "2026-01-01T00:00:00Z")
            .rule("tls.test", &[("/", "Prefix", "echo")])
            .tls(&["tls.test"], "web-tls")
            .yaml(),
    );
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = Ferrule::start_in(private, m.path(), &[]).await;

    assert_eq!(f.get("empty.test", "/").await.0, 503, "{}", f.logs());
    assert_eq!(f.get("tls.test", "/x").await.0, 308, "{}", f.logs());
    let v = https_get(&f, "tls.test", "/x").await;
    assert_eq!(v["backend"], a.addr.to_string(), "{}", f.logs());
    // A body larger than NGINX's buffer goes through a temporary file.
    let body = vec![b'x'; 200_000];
    let r = client()
        .post(format!("http://127.0.0.1:{}/upload", f.http))
        .header("Host", "empty.test")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    m.write(
        "empty.yaml",
        &ingress(
            "demo",
            "empty",
            "2026-01-01T00:00:00Z",
            "empty.test",
            &[("/", "Prefix", "echo")],
            &[],
        ),
    );
    let routed = wait_until(Duration::from_secs(5), || async {
        f.get("empty.test", "/").await.0 == 200
    })
    .await;
    assert!(routed, "{}", f.logs());
    f.old_workers_gone().await;
    let r = client()
        .post(format!("http://127.0.0.1:{}/upload", f.http))
        .header("Host", "empty.test")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", f.logs());
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["body_bytes"], 200_000);
}

/// One raw HTTP/1.1 request with an extra header line of `header_len` bytes: the
/// whole answer head (status line and headers).
async fn raw_head(f: &Ferrule, header_len: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", f.http))
        .await
        .unwrap();
    let req = format!(
        "GET / HTTP/1.1\r\nHost: tune.test\r\nX-Long: {}\r\n\r\n",
        "a".repeat(header_len)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// How many sockets listen on TCP `port` (with `reuseport`, one per worker).
fn listening_sockets(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The ConfigMap's keys about NGINX's processes: by default one listening socket
/// shared by the workers (ingress-nginx's `reuse-port` default differs, see
/// `Tuning::reuse_port`) and no access log for requests to no known host; with the
/// keys set, a socket per worker, the workers' open-files limit
/// (`max-worker-open-files`) and the catch-all server logged. The access log is
/// buffered by default (`access-log-params`).
#[tokio::test]
async fn configmap_process_keys_reach_nginx() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let ing = ingress(
        "demo",
        "tune",
        "2026-01-01T00:00:00Z",
        "tune.test",
        &[("/", "Prefix", "echo")],
        &[],
    );
    m.write("ing.yaml", &ing);
    let logged = |f: &Ferrule, path: &str| {
        std::fs::read_to_string(f.prefix.path().join("nginx/logs/access.log"))
            .unwrap_or_default()
            .contains(path)
    };

    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(listening_sockets(f.http), 1, "one shared socket");
    assert_eq!(f.get("unknown.test", "/default-1").await.0, 404);
    assert_eq!(f.get("tune.test", "/known-1").await.0, 200);
    // access-log-params' default buffers: the line is written within a second.
    assert!(!logged(&f, "/known-1"), "the access log is buffered");
    let known = wait_until(Duration::from_secs(5), || async { logged(&f, "/known-1") }).await;
    assert!(known, "{}", f.logs());
    assert!(
        !logged(&f, "/default-1"),
        "the catch-all server is not logged"
    );
    drop(f);

    m.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ferrule, namespace: demo }\ndata:\n  \
         reuse-port: \"true\"\n  max-worker-open-files: \"4096\"\n  \
         enable-access-log-for-default-backend: \"true\"\n  enable-aio-write: \"false\"\n  \
         access-log-params: \"\"\n",
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(listening_sockets(f.http), 2, "a socket per worker");
    for pid in f.worker_pids() {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let open_files = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        assert_eq!(
            open_files.split_whitespace().nth(3),
            Some("4096"),
            "{open_files}"
        );
    }
    assert_eq!(f.get("unknown.test", "/default-2").await.0, 404);
    let default = wait_until(Duration::from_secs(5), || async {
        logged(&f, "/default-2")
    })
    .await;
    assert!(default, "{}", f.logs());
    assert!(
        f.resource("ConfigMap", "demo", "ferrule")
            .await
            .is_some_and(|cm| cm["state"] == "applied")
    );
}

/// The ConfigMap's tuning keys reach NGINX with ingress-nginx's defaults
/// (`large-client-header-buffers` 4 8k, `keep-alive-requests` 1000) and the values
/// given; an invalid one is reported and its default kept.
#[tokio::test]
async fn configmap_tuning_keys_reach_nginx() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let ing = ingress(
        "demo",
        "tune",
        "2026-01-01T00:00:00Z",
        "tune.test",
        &[("/", "Prefix", "echo")],
        &[],
    );
    m.write("ing.yaml", &ing);
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    let head = raw_head(&f, 3000).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("Connection: keep-alive"), "{head}");

    m.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ferrule, namespace: demo }\ndata:\n  \
         large-client-header-buffers: \"2 1k\"\n  keep-alive-requests: \"1\"\n  \
         ssl-session-tickets: \"true\"\n  ssl-session-timeout: \"1h\"\n  \
         upstream-keepalive-requests: \"7\"\n  client-body-buffer-size: \"8 k\"\n",
    );
    let applied = wait_until(Duration::from_secs(10), || async {
        raw_head(&f, 3000).await.starts_with("HTTP/1.1 400")
    })
    .await;
    assert!(
        applied,
        "a 3 KB header line is too large for 1k buffers; {}",
        f.logs()
    );
    f.old_workers_gone().await;
    let head = raw_head(&f, 10).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Connection: close"),
        "one request per connection: {head}"
    );
    // The report follows the reload.
    let reported = wait_until(Duration::from_secs(5), || async {
        f.resource("ConfigMap", "demo", "ferrule")
            .await
            .is_some_and(|cm| {
                cm["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("key client-body-buffer-size: invalid value \"8 k\"")
            })
    })
    .await;
    assert!(reported, "{:?}", f.resources().await);
}

/// The access log is ingress-nginx's `upstreaminfo` by default (the backend in
/// brackets, the request id last); `log-format-upstream` with
/// `log-format-escape-json` writes the administrator's JSON lines instead.
#[tokio::test]
async fn the_access_log_format_is_upstreaminfo_or_the_configmap_s() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("ing.yaml", &demo_ingress("logged", "logged.test", &[]));
    let lines = |f: &Ferrule, marker: &str| -> Vec<String> {
        std::fs::read_to_string(f.prefix.path().join("nginx/logs/access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(marker))
            .map(str::to_owned)
            .collect()
    };
    let get = |f: &Ferrule, path: &'static str| {
        let url = format!("http://127.0.0.1:{}{path}", f.http);
        async move {
            client()
                .get(url)
                .header("Host", "logged.test")
                .header("X-Request-ID", "req-42")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };

    let f = Ferrule::start(m.path(), &[]).await;
    assert_eq!(get(&f, "/upstreaminfo").await, 200);
    let written = wait_until(Duration::from_secs(5), || async {
        !lines(&f, "/upstreaminfo").is_empty()
    })
    .await;
    assert!(written, "{}", f.logs());
    let line = &lines(&f, "/upstreaminfo")[0];
    assert!(
        line.contains("\"GET /upstreaminfo HTTP/1.1\" 200 "),
        "{line}"
    );
    assert!(line.contains(" [demo_echo_80] [] "), "{line}");
    assert!(line.contains(&format!(" {} ", echo.addr)), "{line}");
    assert!(line.ends_with(" 200 req-42"), "{line}");
    drop(f);

    m.write(
        "cm.yaml",
        &configmap(&[
            (
                "log-format-upstream",
                r#"{"uri": "$uri", "status": $status, "agent": "$http_user_agent"}"#,
            ),
            ("log-format-escape-json", "true"),
        ]),
    );
    let f = Ferrule::start(m.path(), &["--configmap", "demo/ferrule"]).await;
    assert_eq!(get(&f, "/json").await, 200);
    let written = wait_until(Duration::from_secs(5), || async {
        !lines(&f, "/json").is_empty()
    })
    .await;
    assert!(written, "{}", f.logs());
    let line: serde_json::Value = serde_json::from_str(&lines(&f, "/json")[0]).unwrap();
    assert_eq!(line["uri"], "/json");
    assert_eq!(line["status"], 200);
}

/// The default access log line comes from the C module (`ferrule_upstreaminfo`):
/// it is the line NGINX's log module writes for the same request, escapes, retries
/// and refused requests included. An `http-snippet` logs every request a second
/// time in the same format through NGINX's `log_format`; the two files must be the
/// same, line for line and byte for byte (one log phase: the same clock). Lua only: with njs the log
/// module writes the default format itself.
#[tokio::test]
async fn the_module_s_access_log_line_is_the_one_nginx_writes() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    // One endpoint refuses connections: a request that tries it first is retried on
    // the other, and its line names both.
    let port = echo.addr.port();
    m.write(
        "svc.yaml",
        &service_endpoints(
            "demo",
            "echo",
            port,
            &[("127.0.0.2", true), ("127.0.0.71", true)],
        ),
    );
    m.write("ing.yaml", &demo_ingress("logged", "logged.test", &[]));
    let snippet = format!(
        "log_format native {};\naccess_log logs/native.log native;",
        serde_json::to_string(ferrule_model::UPSTREAMINFO).unwrap()
    );
    m.write("cm.yaml", &configmap(&[("http-snippet", &snippet)]));
    let f = Ferrule::start(
        m.path(),
        &[LUA_ONLY, &["--configmap", "demo/ferrule"]].concat(),
    )
    .await;
    let conf = std::fs::read_to_string(f.prefix.path().join("nginx/conf/nginx.conf")).unwrap();
    assert!(
        conf.contains("log_format upstreaminfo escape=none $ferrule_upstreaminfo;"),
        "the module does not write the line:\n{conf}"
    );

    let requests = [
        "GET /plain HTTP/1.1\r\nHost: logged.test\r\nConnection: close\r\n\r\n",
        "GET /odd?q=\"x HTTP/1.1\r\nHost: logged.test\r\nUser-Agent: evil\"\\ua\u{1}é\r\n\
         Referer: http://r/a-path-longer-than-a-word/\"x\r\nX-Request-ID: id\"2\r\n\
         Authorization: Basic dXMiZXI6cHc=\r\nConnection: close\r\n\r\n",
        "POST /body HTTP/1.1\r\nHost: logged.test\r\nContent-Length: 5\r\n\
         Connection: close\r\n\r\nhello",
        "GET /refused HTTP/1.1\r\nHost: logged.test\r\nContent-Length: x\r\n\r\n",
    ];
    let mut sent = 0;
    for r in requests.iter().chain([&requests[0]; 4].into_iter()) {
        raw_http(f.http, r).await;
        sent += 1;
    }
    let read = |name: &str| {
        std::fs::read_to_string(f.prefix.path().join("nginx/logs").join(name)).unwrap_or_default()
    };
    let all_written = wait_until(Duration::from_secs(5), || async {
        read("access.log").lines().count() >= sent && read("native.log").lines().count() >= sent
    })
    .await;
    let (module, nginx) = (read("access.log"), read("native.log"));
    assert!(all_written, "{module}\n{nginx}\n{}", f.logs());
    // Each worker buffers each file: the files interleave the workers' lines
    // differently. Every line ends with its own request id.
    let sorted = |text: &str| {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        lines.join("\n")
    };
    assert_eq!(sorted(&module), sorted(&nginx));

    // What the lines hold: escapes, the backend, NGINX's own refusal, a retry.
    for part in [
        r#""GET /odd?q=\x22x HTTP/1.1""#,
        r#""http://r/a-path-longer-than-a-word/\x22x" "evil\x22\x5Cua\x01\xC3\xA9""#,
        r#" - us\x22er "#,
        " [demo_echo_80] [] ",
        " id\\x222\n",
        "\"GET /refused HTTP/1.1\" 400 ",
    ] {
        assert!(module.contains(part), "{part} not in\n{module}");
    }
    let retried = format!("127.0.0.71:{port}, {}", echo.addr);
    assert!(
        module.contains(&retried),
        "no line with {retried}:\n{module}"
    );
}
