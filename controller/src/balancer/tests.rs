use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use ferrule_model::annotations::{Affinity, Canary};
use ferrule_model::{Backend, Endpoint, Model, ResourceRef, Snapshot};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use serde_json::json;

use super::*;

/// A fake balancer API: refuses (400) any POST naming a backend that starts with
/// "bad", accepts the rest; records every accepted body. A GET sees an empty store.
pub(super) fn fake_api(dir: &std::path::Path) -> (PathBuf, Arc<Mutex<Vec<Value>>>) {
    fake_api_answering(dir, r#"{"names":[],"hosts":[]}"#)
}

/// [`fake_api`] whose every GET answers `get_reply`.
fn fake_api_answering(
    dir: &std::path::Path,
    get_reply: &'static str,
) -> (PathBuf, Arc<Mutex<Vec<Value>>>) {
    let path = dir.join("api.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let log = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 65536];
            let (get, body) = loop {
                let n = s.read(&mut buf).await.unwrap();
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if body.len() >= len {
                        break (head.starts_with("GET "), body.to_owned());
                    }
                }
            };
            if get {
                let reply = get_reply;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                s.write_all(resp.as_bytes()).await.unwrap();
                continue;
            }
            let v: Value = serde_json::from_str(&body).unwrap();
            let bad = v["backends"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|b| b["name"].as_str().unwrap().starts_with("bad"));
            let (status, reply) = if bad {
                (400, r#"{"error":"backends[0] \"bad\": invalid"}"#)
            } else {
                log.lock().unwrap().push(v);
                (201, "{}")
            };
            let resp = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
        }
    });
    (path, accepted)
}

fn backend(name: &str, ip: &str) -> Backend {
    Backend {
        name: name.to_owned(),
        service: ResourceRef::new("Service", "ns", name),
        service_port: "80".to_owned(),
        endpoints: vec![Endpoint {
            address: ip.to_owned(),
            port: 80,
        }],
        balancing: Default::default(),
        cluster_ip: false,
        udp: false,
        external_name: None,
        fallback: None,
    }
}

fn model(backends: &[Backend]) -> Model {
    let mut m = ferrule_model::build(&Snapshot::default());
    m.backends = backends
        .iter()
        .map(|b| (b.name.clone(), Arc::new(b.clone())))
        .collect();
    m
}

fn names(v: &Value) -> Vec<String> {
    v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Hosts `a.test` and `b.test` on one certificate with the contents `pem`.
fn tls_model(pem: &str) -> Model {
    let mut m = model(&[]);
    let secret = ResourceRef::new("Secret", "ns", "tls");
    m.certificates = Arc::new(BTreeMap::from([(
        "ns/tls".to_owned(),
        Certificate {
            secret,
            cert_pem: format!("cert {pem}"),
            key_pem: format!("key {pem}"),
            names: vec!["a.test".into(), "b.test".into()],
            not_after: i64::MAX,
        },
    )]));
    let server = |host: &str| Server {
        host: host.to_owned(),
        tls: Some(ferrule_model::ServerTls {
            certificate: Some("ns/tls".to_owned()),
        }),
        owner: None,
        server_snippet: None,
        client_certificates: None,
        ciphers: Default::default(),
        locations: Vec::new(),
        redirect_to: None,
    };
    m.servers = Arc::new(vec![server("a.test"), server("b.test")]);
    m
}

/// The hosts of the certificate POSTs, in order.
fn certificate_posts(accepted: &Mutex<Vec<Value>>) -> Vec<Vec<String>> {
    accepted
        .lock()
        .unwrap()
        .iter()
        .filter_map(|v| v["certificates"].as_array())
        .map(|a| {
            a.iter()
                .map(|c| c["host"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect()
}

/// A new client reads what the store holds before its first sync and removes what
/// the model lacks, whether the API answers names only or, as an NGINX still
/// running older balancer code does, every stored backend.
#[tokio::test]
async fn an_adopted_store_loses_what_the_model_lacks_in_either_answer_format() {
    for reply in [
        r#"{"names":["a","stale"],"hosts":[]}"#,
        r#"{"backends":[{"generation":1,"backend":{"name":"stale"}}],"hosts":[]}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (sock, accepted) = fake_api_answering(dir.path(), reply);
        let mut c = BalancerClient::new(sock, "t".into());
        c.sync(&model(&[backend("a", "10.0.0.1")])).await.unwrap();
        let removed: Vec<Value> = accepted
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| b["removed"].as_array().cloned().unwrap_or_default())
            .collect();
        assert_eq!(removed, [json!("stale")], "{reply}");
    }
}

#[tokio::test]
async fn certificates_are_posted_when_they_change_and_after_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let mut c = BalancerClient::new(sock, "t".into());
    let first = tls_model("1");
    assert_eq!(c.sync(&first).await.unwrap().certificates, 2);
    // The endpoint fast path's model shares servers and certificates.
    let mut next = first.clone();
    next.backends = model(&[backend("a", "10.0.0.1")]).backends;
    let p = c.sync(&next).await.unwrap();
    assert_eq!((p.backends, p.certificates), (1, 0));
    // A full build with the same contents: nothing to post either.
    assert_eq!(c.sync(&tls_model("1")).await.unwrap().certificates, 0);
    // A rotation posts both hosts again.
    assert_eq!(c.sync(&tls_model("2")).await.unwrap().certificates, 2);
    // After a reset (a new NGINX), the same shared model is posted in full.
    let rotated = tls_model("3");
    c.sync(&rotated).await.unwrap();
    c.reset();
    assert_eq!(c.sync(&rotated.clone()).await.unwrap().certificates, 2);
    let ab = vec!["a.test".to_owned(), "b.test".to_owned()];
    assert_eq!(certificate_posts(&accepted), vec![ab.clone(); 4]);
}

#[tokio::test]
async fn a_timed_out_post_is_not_retried() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let posts = Arc::new(Mutex::new(0));
    let seen = posts.clone();
    // Answers the store read (empty); holds every POST without an answer.
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                s.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            if head.starts_with(b"GET ") {
                let reply = r#"{"backends":[],"hosts":[]}"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                s.write_all(resp.as_bytes()).await.unwrap();
            } else {
                *seen.lock().unwrap() += 1;
                held.push(s);
            }
        }
    });
    let mut c =
        BalancerClient::new(path, "t".into()).with_request_timeout(Duration::from_millis(50));
    let e = c
        .sync(&model(&[backend("a", "10.0.0.1")]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no answer within"), "{e}");
    assert_eq!(*posts.lock().unwrap(), 1, "one POST, not five");
}

#[tokio::test]
async fn a_hung_api_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    // Accepts and reads, never answers.
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            held.push(s);
        }
    });
    let mut c =
        BalancerClient::new(path, "t".into()).with_request_timeout(Duration::from_millis(50));
    let started = std::time::Instant::now();
    let e = c
        .sync(&model(&[backend("a", "10.0.0.1")]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no answer within"), "{e}");
    assert_eq!(
        e.kind, BACKENDS,
        "the store is read before backends are posted"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_refused_backend_does_not_block_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let mut c = BalancerClient::new(sock, "t".into());

    let p = c
        .sync(&model(&[
            backend("a", "10.0.0.1"),
            backend("b", "10.0.0.2"),
        ]))
        .await
        .unwrap();
    assert_eq!((p.backends, p.rejected.len()), (2, 0));

    // One invalid backend arrives with a valid change: the valid one is applied.
    let m = model(&[
        backend("a", "10.0.0.9"),
        backend("b", "10.0.0.2"),
        backend("bad", "10.0.0.3"),
    ]);
    let p = c.sync(&m).await.unwrap();
    assert_eq!(p.backends, 1);
    assert_eq!(p.rejected.len(), 1, "{p:?}");
    assert!(p.rejected[0].starts_with("backend bad: "), "{p:?}");
    assert_eq!((p.rejected_backends(), p.rejected_certificates()), (1, 0));
    let last = accepted.lock().unwrap().last().cloned().unwrap();
    assert_eq!(names(&last), ["a"]);

    // Unchanged, the refused backend is not posted again; the next valid change
    // goes through in a single POST.
    let before = accepted.lock().unwrap().len();
    assert_eq!(c.sync(&m).await.unwrap(), Posted::default());
    let m = model(&[
        backend("a", "10.0.0.9"),
        backend("b", "10.0.0.7"),
        backend("bad", "10.0.0.3"),
    ]);
    let p = c.sync(&m).await.unwrap();
    assert_eq!((p.backends, p.rejected.len()), (1, 0));
    let log = accepted.lock().unwrap();
    assert_eq!(log.len(), before + 1);
    assert_eq!(names(log.last().unwrap()), ["b"]);
}

#[tokio::test]
async fn removals_survive_a_refused_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let mut c = BalancerClient::new(sock, "t".into());
    c.sync(&model(&[
        backend("a", "10.0.0.1"),
        backend("b", "10.0.0.2"),
    ]))
    .await
    .unwrap();
    let p = c
        .sync(&model(&[
            backend("a", "10.0.0.1"),
            backend("bad", "10.0.0.3"),
        ]))
        .await
        .unwrap();
    assert_eq!((p.backends, p.rejected.len()), (1, 1), "{p:?}");
    let log = accepted.lock().unwrap();
    assert!(
        log.iter().any(|v| v["removed"] == json!(["b"])),
        "b removed: {log:?}"
    );
}

#[tokio::test]
async fn batches_carry_at_most_the_limit_and_removals_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let mut c = BalancerClient::new(sock, "t".into()).with_batch(2);
    let five: Vec<Backend> = (1..=5)
        .map(|i| backend(&format!("b{i}"), &format!("10.0.0.{i}")))
        .collect();
    let p = c.sync(&model(&five)).await.unwrap();
    assert_eq!((p.backends, p.rejected.len()), (5, 0));
    let sizes: Vec<usize> = accepted
        .lock()
        .unwrap()
        .iter()
        .map(|v| names(v).len())
        .collect();
    assert_eq!(sizes, [2, 2, 1]);

    // Three changed, one removed, one refused: the valid ones still go through.
    accepted.lock().unwrap().clear();
    let next = [
        backend("b1", "10.0.1.1"),
        backend("b2", "10.0.1.2"),
        backend("b3", "10.0.0.3"),
        backend("b4", "10.0.0.4"),
        backend("bad", "10.0.1.9"),
    ];
    let p = c.sync(&model(&next)).await.unwrap();
    assert_eq!((p.backends, p.rejected.len()), (3, 1), "{p:?}");
    let log = accepted.lock().unwrap();
    assert_eq!(log[0]["removed"], json!(["b5"]));
    assert!(log.iter().skip(1).all(|v| v["removed"] == json!([])));
    let posted: BTreeSet<String> = log.iter().flat_map(names).collect();
    assert_eq!(posted, BTreeSet::from(["b1".to_owned(), "b2".to_owned()]));
    assert!(log.iter().all(|v| names(v).len() <= 2));
}

#[test]
fn a_canary_on_the_backend_itself_is_dropped() {
    let mut b = backend("a", "10.0.0.1");
    b.balancing.canary = Some(ferrule_model::CanaryRoute {
        backend: "a".into(),
        rules: ferrule_model::annotations::Canary {
            weight: 50,
            weight_total: 100,
            header: None,
            header_value: None,
            header_pattern: None,
            cookie: None,
            affinity_behavior: Default::default(),
        },
    });
    let json = |b: &Backend| serde_json::to_value(wire::Backend::from(b)).unwrap();
    assert!(json(&b)["canary"].is_null());
    b.balancing.canary.as_mut().unwrap().backend = "c".into();
    assert_eq!(json(&b)["canary"]["backend"], "c");
}

/// The payload is what the API documents (balancer/API.md), field for field.
#[test]
fn backend_payload_fields() {
    let mut b = backend("a", "10.0.0.1");
    b.balancing.affinity = Some(Affinity {
        mode: ferrule_model::annotations::AffinityMode::Persistent,
        cookie_name: "route".into(),
        max_age: Some(60),
        path: None,
        secure: Some(false),
        samesite: Some(ferrule_model::annotations::SameSite::Lax),
        conditional_samesite_none: false,
        expires: Some(3600),
        domain: Some(".example.com".into()),
        change_on_failure: true,
    });
    b.balancing.affinity_ingresses = vec!["demo/a".into(), "demo/b".into()];
    b.balancing.canary = Some(ferrule_model::CanaryRoute {
        backend: "c".into(),
        rules: Canary {
            weight: 10,
            weight_total: 100,
            header: Some("x-canary".into()),
            header_value: None,
            header_pattern: Some("^b".into()),
            cookie: None,
            affinity_behavior: ferrule_model::annotations::CanaryAffinity::Legacy,
        },
    });
    let body =
        <wire::Backend as wire::Item>::body(7, &[&wire::Backend::from(&b)], &["gone".into()]);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v,
        json!({
            "version": 7,
            "backends": [{
                "name": "a",
                "endpoints": [{"address": "10.0.0.1", "port": 80}],
                "load_balance": "round_robin",
                "upstream_hash_by": null,
                "upstream_hash_by_subset_size": null,
                "affinity": {
                    "mode": "cookie", "affinity_mode": "persistent",
                    "cookie_name": "route", "max_age": 60, "path": null,
                    "secure": false, "samesite": "Lax", "conditional_samesite_none": false,
                    "expires": 3600, "domain": ".example.com", "change_on_failure": true,
                    "ingresses": ["demo/a", "demo/b"],
                },
                "canary": {
                    "backend": "c", "weight": 10, "weight_total": 100,
                    "header": "x-canary", "header_value": null, "header_pattern": "^b",
                    "cookie": null,
                    "affinity_behavior": "legacy",
                },
            }],
            "removed": ["gone"],
        })
    );
}

#[tokio::test]
async fn a_large_sync_is_posted_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let mut c = BalancerClient::new(sock, "t".into());
    let many: Vec<Backend> = (0..2500)
        .map(|i| backend(&format!("b{i:04}"), "10.0.0.1"))
        .collect();
    let p = c.sync(&model(&many)).await.unwrap();
    assert_eq!((p.backends, p.rejected.len()), (2500, 0));
    let log = accepted.lock().unwrap();
    let sizes: Vec<usize> = log.iter().map(|v| names(v).len()).collect();
    assert_eq!(sizes, [1000, 1000, 500]);
}

/// A fake certificate store with room for `capacity` distinct pairs, as the Lua
/// store: removals first, then each certificate in turn until one does not fit
/// (507, the earlier ones kept). Hosts naming the same pair share it.
fn fake_store(
    dir: &std::path::Path,
    capacity: usize,
) -> (PathBuf, Arc<Mutex<BTreeMap<String, String>>>) {
    let path = dir.join("store.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let store: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let state = store.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 65536];
            let (head, body) = loop {
                let n = s.read(&mut buf).await.unwrap();
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if body.len() >= len {
                        break (head.to_owned(), body.to_owned());
                    }
                }
            };
            let (status, reply) = if head.starts_with("GET /configuration/certificates") {
                let hosts: Vec<String> = state.lock().unwrap().keys().cloned().collect();
                (200, json!({ "hosts": hosts }).to_string())
            } else if head.starts_with("GET /configuration/version") {
                let used = state
                    .lock()
                    .unwrap()
                    .values()
                    .collect::<BTreeSet<_>>()
                    .len();
                let c =
                    json!({ "capacity": capacity * 100, "free_space": (capacity - used) * 100 });
                (200, json!({ "certificates": c }).to_string())
            } else if head.starts_with("GET ") {
                (200, r#"{"names":[]}"#.to_owned())
            } else {
                let v: Value = serde_json::from_str(&body).unwrap();
                let mut st = state.lock().unwrap();
                for h in v["removed"].as_array().into_iter().flatten() {
                    st.remove(h.as_str().unwrap());
                }
                let mut full = None;
                for c in v["certificates"].as_array().into_iter().flatten() {
                    let pair = format!("{}|{}", c["cert"], c["key"]);
                    let host = c["host"].as_str().unwrap().to_owned();
                    let mut pairs: BTreeSet<&String> = st.values().collect();
                    if let Some(old) = st.get(&host)
                        && st.values().filter(|p| *p == old).count() == 1
                    {
                        pairs.remove(old);
                    }
                    if !pairs.contains(&pair) && pairs.len() >= capacity {
                        full = Some(host);
                        break;
                    }
                    st.insert(host, pair);
                }
                match full {
                    Some(h) => (
                        507,
                        json!({ "error": format!("shared dict ferrule_certificates: no memory (at {h})") })
                            .to_string(),
                    ),
                    None => (201, "{}".to_owned()),
                }
            };
            let resp = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
        }
    });
    (path, store)
}

/// A model whose servers `hosts` (host, Secret) have TLS, each Secret its own pair.
fn hosts_model(hosts: &[(&str, &str)]) -> Model {
    let mut m = model(&[]);
    let mut certs = BTreeMap::new();
    let mut servers = Vec::new();
    for (host, secret) in hosts {
        certs
            .entry(format!("ns/{secret}"))
            .or_insert_with(|| Certificate {
                secret: ResourceRef::new("Secret", "ns", secret),
                cert_pem: format!("cert {secret}"),
                key_pem: format!("key {secret}"),
                names: Vec::new(),
                not_after: i64::MAX,
            });
        servers.push(Server {
            host: host.to_string(),
            tls: Some(ferrule_model::ServerTls {
                certificate: Some(format!("ns/{secret}")),
            }),
            owner: None,
            server_snippet: None,
            client_certificates: None,
            ciphers: Default::default(),
            locations: Vec::new(),
            redirect_to: None,
        });
    }
    m.certificates = Arc::new(certs);
    m.servers = Arc::new(servers);
    m
}

/// A store with no room for one tenant's certificates refuses those (507): they are
/// refused objects, reported, not a failed sync (which cost every tenant readiness),
/// and they are posted again once something leaves the store.
#[tokio::test]
async fn a_full_store_refuses_the_certificates_that_do_not_fit_not_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, store) = fake_store(dir.path(), 4);
    let mut c = BalancerClient::new(sock, "t".into());
    // (its host sorts last)
    let victim = ("zz-victim.test", "victim");
    c.sync(&hosts_model(&[victim])).await.unwrap();
    assert_eq!(c.certificate_store(), Some((400, 300)));

    // Ten hosts on one Secret take one pair; five Secrets of their own do not fit
    // (posted in the order of their hosts).
    let mut hosts = vec![victim];
    let shared: Vec<String> = (0..10).map(|i| format!("s{i}.evil.test")).collect();
    hosts.extend(shared.iter().map(|h| (h.as_str(), "shared")));
    let own: Vec<(String, String)> = (0..5)
        .map(|i| (format!("x{i}.evil.test"), format!("own{i}")))
        .collect();
    hosts.extend(own.iter().map(|(h, s)| (h.as_str(), s.as_str())));
    let m = hosts_model(&hosts);
    let p = c.sync(&m).await.expect("a full store is not a failed sync");
    assert_eq!(p.rejected_certificates(), 3, "{p:?}");
    assert!(
        p.rejected[0]
            .starts_with("certificate x2.evil.test: shared dict ferrule_certificates: no memory"),
        "{p:?}"
    );
    let refused = c.refused();
    assert_eq!(
        refused
            .iter()
            .map(|r| (r.kind, r.name.as_str(), r.full))
            .collect::<Vec<_>>(),
        [
            (CERTIFICATES, "x2.evil.test", true),
            (CERTIFICATES, "x3.evil.test", true),
            (CERTIFICATES, "x4.evil.test", true)
        ]
    );
    assert_eq!(
        store.lock().unwrap()["zz-victim.test"],
        "\"cert victim\"|\"key victim\""
    );
    assert_eq!(store.lock().unwrap().len(), 1 + 10 + 2);
    assert_eq!(c.certificate_store(), Some((400, 0)));

    // Unchanged: not posted again.
    assert_eq!(
        c.sync(&hosts_model(&hosts)).await.unwrap(),
        Posted::default()
    );
    assert_eq!(c.refused().len(), 3);

    // Two of them leave: the refused ones are tried again, two fit.
    let fewer: Vec<(&str, &str)> = hosts
        .iter()
        .filter(|(h, _)| !h.starts_with("x0.") && !h.starts_with("x1."))
        .copied()
        .collect();
    let p = c.sync(&hosts_model(&fewer)).await.unwrap();
    assert_eq!(p.rejected_certificates(), 1, "{p:?}");
    assert_eq!(c.refused()[0].name, "x4.evil.test");
    assert!(store.lock().unwrap().contains_key("x3.evil.test"));

    // NGINX restarts with an empty store: what it served is posted first, so the
    // host that came last is refused again, not the victim (which sorts last).
    store.lock().unwrap().clear();
    c.reset();
    let p = c.sync(&hosts_model(&fewer)).await.unwrap();
    assert_eq!(
        p.rejected,
        ["certificate x4.evil.test: shared dict ferrule_certificates: no memory (at x4.evil.test)"]
    );
    assert!(store.lock().unwrap().contains_key("zz-victim.test"));
}
