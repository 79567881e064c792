//! The webhook's protocol (AdmissionReview in, AdmissionReview out), its metrics, and
//! its TLS listener with certificate rotation. The decisions themselves are tested
//! in the model (`model/tests/admission.rs`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

fn ingress(name: &str, created: &str, host: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name, "namespace": "default", "creationTimestamp": created,
            "annotations": annotations,
        },
        "spec": {
            "ingressClassName": "ferrule",
            "rules": [{ "host": host, "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }] } }],
        },
    })
}

fn snapshot() -> Arc<Snapshot> {
    let mut snap = Snapshot::default();
    let objects = [
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": { "name": "ferrule" },
            "spec": { "controller": ferrule_model::snapshot::DEFAULT_CONTROLLER },
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "web", "namespace": "default" },
            "spec": { "ports": [{ "name": "http", "port": 80 }] },
        }),
        ingress("old", "2024-01-01T00:00:00Z", "shop.test", json!({})),
    ];
    for o in objects {
        ferrule_model::objects::add(&mut snap, o, None).unwrap();
    }
    Arc::new(snap)
}

fn review(operation: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "networking.k8s.io", "version": "v1", "kind": "Ingress" },
            "resource": { "group": "networking.k8s.io", "version": "v1", "resource": "ingresses" },
            "namespace": "default",
            "name": object["metadata"]["name"],
            "operation": operation,
            "userInfo": { "username": "admin" },
            "object": object,
            "oldObject": null,
            "dryRun": false,
        },
    }))
    .unwrap()
}

fn webhook(snap: Option<Arc<Snapshot>>, namespace: Option<&str>) -> (Webhook, Arc<Shared>) {
    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(snap);
    // The receiver keeps the last value once the sender is gone.
    drop(tx);
    let w = Webhook::new(rx, false, namespace.map(str::to_owned), shared.clone());
    (w, shared)
}

/// The answer's `response`, asserting a 200 and the request's uid.
fn response(w: &Webhook, body: &[u8]) -> (Value, Outcome) {
    let (status, out, outcome) = w.review(body);
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    (v["response"].clone(), outcome)
}

#[test]
fn an_invalid_ingress_is_denied_with_the_models_message() {
    let (w, shared) = webhook(Some(snapshot()), None);
    let bad = ingress(
        "bad",
        "2024-02-01T00:00:00Z",
        "new.test",
        json!({ "nginx.ingress.kubernetes.io/limit-rps": "many" }),
    );
    let (r, outcome) = response(&w, &review("CREATE", bad));
    assert_eq!(outcome, Outcome::Denied);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 400);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("annotation nginx.ingress.kubernetes.io/limit-rps")
            && msg.contains("\"many\""),
        "{msg}"
    );
    let metrics = shared.metrics.encode();
    assert!(
        metrics.contains(r#"ferrule_admission_requests_total{result="denied"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("ferrule_admission_roundtrip_duration_seconds_count 1"));
    assert!(metrics.contains("ferrule_admission_tested_ingresses 1"));
}

#[test]
fn a_conflict_is_allowed_with_a_warning_naming_the_winner() {
    let (w, shared) = webhook(Some(snapshot()), None);
    let younger = ingress("younger", "2024-02-01T00:00:00Z", "shop.test", json!({}));
    let (r, outcome) = response(&w, &review("UPDATE", younger));
    assert_eq!(outcome, Outcome::Warned);
    assert_eq!(r["allowed"], true);
    assert!(r.get("status").is_none(), "{r}");
    let warnings = r["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("is already served by Ingress default/old")),
        "{warnings:?}"
    );
    // The candidate and the owner of its host: not the cluster.
    let metrics = shared.metrics.encode();
    assert!(
        metrics.contains("ferrule_admission_tested_ingresses 2"),
        "{metrics}"
    );
    assert!(metrics.contains(r#"ferrule_admission_requests_total{result="warned"} 1"#));
}

#[test]
fn what_is_not_ours_is_allowed_untouched() {
    let (w, _) = webhook(Some(snapshot()), Some("default"));
    let mut theirs = ingress(
        "theirs",
        "2024-02-01T00:00:00Z",
        "shop.test",
        json!({ "nginx.ingress.kubernetes.io/auth-type": "basic" }),
    );
    theirs["spec"]["ingressClassName"] = json!("nginx");
    let (r, outcome) = response(&w, &review("CREATE", theirs.clone()));
    assert_eq!(
        (r["allowed"].clone(), outcome),
        (json!(true), Outcome::Allowed)
    );
    assert!(r.get("warnings").is_none(), "{r}");

    // Outside --watch-namespace.
    let mut elsewhere = theirs.clone();
    elsewhere["spec"]["ingressClassName"] = json!("ferrule");
    elsewhere["metadata"]["namespace"] = json!("other");
    let mut body: Value = serde_json::from_slice(&review("CREATE", elsewhere)).unwrap();
    body["request"]["namespace"] = json!("other");
    let (r, _) = response(&w, &serde_json::to_vec(&body).unwrap());
    assert_eq!(r["allowed"], true);

    // An operation the webhook is not registered for.
    let mut ours = theirs;
    ours["spec"]["ingressClassName"] = json!("ferrule");
    let (r, _) = response(&w, &review("DELETE", ours.clone()));
    assert_eq!(r["allowed"], true);
    let (r, _) = response(&w, &review("CREATE", ours));
    assert_eq!(r["allowed"], false, "and a CREATE of it is checked");
}

#[test]
fn no_decision_without_a_snapshot_or_a_review() {
    let (w, shared) = webhook(None, None);
    let good = ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({}));
    let (status, _, outcome) = w.review(&review("CREATE", good));
    assert_eq!(
        (status, outcome),
        (StatusCode::SERVICE_UNAVAILABLE, Outcome::Error)
    );
    let (status, body, _) = w.review(b"{\"kind\": \"Pod\"");
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("not an AdmissionReview"));
    let (status, _, _) = w.review(br#"{"apiVersion": "v1", "kind": "Pod"}"#);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        shared
            .metrics
            .encode()
            .contains(r#"ferrule_admission_requests_total{result="error"} 3"#)
    );
}

#[test]
fn the_index_follows_the_latest_snapshot() {
    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(Some(snapshot()));
    let w = Webhook::new(rx, false, None, shared);
    let rival = ingress("rival", "2024-02-01T00:00:00Z", "rival.test", json!({}));
    let served_by_first = |r: &Value| {
        r["warnings"].as_array().into_iter().flatten().any(|m| {
            m.as_str()
                .unwrap()
                .contains("already served by Ingress default/first")
        })
    };
    let (r, _) = response(&w, &review("CREATE", rival.clone()));
    assert!(!served_by_first(&r), "{r}");
    let mut next = (*snapshot()).clone();
    let first = ingress("first", "2024-01-15T00:00:00Z", "rival.test", json!({}));
    ferrule_model::objects::add(&mut next, first, None).unwrap();
    tx.send(Some(Arc::new(next))).unwrap();
    let (r, _) = response(&w, &review("CREATE", rival));
    assert!(served_by_first(&r), "{r}");
}

#[test]
fn warnings_are_capped() {
    let many: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
    let capped = capped(many);
    assert_eq!(capped.len(), MAX_WARNINGS);
    assert_eq!(capped[MAX_WARNINGS - 2], "w18");
    assert!(capped[MAX_WARNINGS - 1].starts_with("and 31 more problems"));
}

// ---------------------------------------------------------------------------------------
// TLS

/// A CA and a server certificate for 127.0.0.1 signed by it: (CA PEM, cert, key).
fn issue(dir: &Path, name: &str) -> String {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), leaf.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca_cert.pem()
}

async fn post(port: u16, ca_pem: &str, body: Vec<u8>) -> Result<(u16, Value), String> {
    let (status, body) = post_raw(port, ca_pem, body).await?;
    Ok((
        status,
        serde_json::from_slice(&body).map_err(|e| e.to_string())?,
    ))
}

/// A review over TLS: the answer's status and body as they came.
async fn post_raw(port: u16, ca_pem: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), String> {
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let r = client
        .post(format!("https://127.0.0.1:{port}{PATH}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = r.status().as_u16();
    Ok((status, r.bytes().await.map_err(|e| e.to_string())?.to_vec()))
}

/// `w` served over TLS on a port of loopback: (port, the CA's PEM, the directory of
/// the certificate files, to keep).
async fn serve_tls(w: Webhook) -> (u16, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ca = issue(dir.path(), "test");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let certificates = Arc::new(Certificates::load(&cert, &key).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let listening = Listening::new(&ferrule_model::snapshot::Limits::default());
    tokio::spawn(serve(listener, certificates, Arc::new(w), listening));
    (port, ca, dir)
}

/// A creation is the newest Ingress, whatever creationTimestamp the request carries:
/// backdated to 1970, it still loses the host to the Ingress that has it, and its
/// answer is the same, byte for byte, as that of the same creation stamped now.
#[tokio::test]
async fn a_backdated_creation_wins_nothing() {
    let (w, _) = webhook(Some(snapshot()), None);
    let (port, ca, _dir) = serve_tls(w).await;
    let backdated = ingress("early", "1970-01-01T00:00:00Z", "shop.test", json!({}));
    let (status, answer) = post(port, &ca, review("CREATE", backdated)).await.unwrap();
    assert_eq!(status, 200);
    let warnings = answer["response"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains(
                "host shop.test path / (Prefix) is already served by Ingress default/old"
            )),
        "{answer}"
    );
    assert!(
        !warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .contains(ferrule_model::admission::DISPLACED)),
        "{answer}"
    );
    let stamped_now = ingress("early", "2030-01-01T00:00:00Z", "shop.test", json!({}));
    let (_, now_answer) = post(port, &ca, review("CREATE", stamped_now))
        .await
        .unwrap();
    assert_eq!(answer, now_answer);
}

/// The cluster as `snapshot()`, plus what namespace `vault` holds, as `vault` says:
/// an Ingress owning pay.example (a path, its certificate), its Service with a ready
/// endpoint (or without one, or none), and the certificate's Secret (valid, not a
/// certificate, or none).
fn with_vault(ledger: bool, service: Option<bool>, secret: Option<bool>) -> Arc<Snapshot> {
    let mut snap = (*snapshot()).clone();
    let mut objects = Vec::new();
    if ledger {
        let mut ledger = ingress("ledger", "2024-01-01T00:00:00Z", "pay.example", json!({}));
        ledger["metadata"]["namespace"] = json!("vault");
        let backend = &mut ledger["spec"]["rules"][0]["http"]["paths"][0]["backend"];
        backend["service"]["name"] = json!("ledger-svc");
        ledger["spec"]["tls"] = json!([{ "hosts": ["pay.example"], "secretName": "ledger-tls" }]);
        objects.push(ledger);
    }
    if let Some(ready) = service {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "ledger-svc", "namespace": "vault" },
            "spec": { "ports": [{ "name": "http", "port": 80 }] },
        }));
        objects.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "ledger-svc-1", "namespace": "vault",
                "labels": { "kubernetes.io/service-name": "ledger-svc" },
            },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080 }],
            "endpoints": [{ "addresses": ["10.0.0.7"], "conditions": { "ready": ready } }],
        }));
    }
    if let Some(valid) = secret {
        let (cert, key) = match valid {
            true => {
                let c = rcgen::generate_simple_self_signed(vec!["pay.example".to_owned()]).unwrap();
                (c.cert.pem(), c.signing_key.serialize_pem())
            }
            false => ("not a certificate".to_owned(), "not a key".to_owned()),
        };
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": "ledger-tls", "namespace": "vault" },
            "stringData": { "tls.crt": cert, "tls.key": key },
        }));
    }
    for o in objects {
        ferrule_model::objects::add(&mut snap, o, None).unwrap();
    }
    Arc::new(snap)
}

/// A review of `operation` on `object`, an Ingress moved to namespace `ns`.
fn review_in(ns: &str, operation: &str, mut object: Value) -> Vec<u8> {
    object["metadata"]["namespace"] = json!(ns);
    let mut body: Value = serde_json::from_slice(&review(operation, object)).unwrap();
    body["request"]["namespace"] = json!(ns);
    serde_json::to_vec(&body).unwrap()
}

/// Anyone who reaches the webhook may ask about an Ingress of any namespace (here
/// `evil`). Over TLS, the answers never name another namespace's (`vault`'s)
/// Ingress, Service or Secret, and are the same bytes whether that Service exists or
/// is ready and whether that Secret exists or holds a certificate; where the answer
/// does not depend on vault's Ingress, the same bytes without it too.
#[tokio::test]
async fn answers_never_name_nor_probe_another_namespace() {
    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(Some(with_vault(true, Some(true), Some(true))));
    let (port, ca, _dir) = serve_tls(Webhook::new(rx, false, None, shared)).await;

    let path = ingress("path", "2024-02-01T00:00:00Z", "pay.example", json!({}));
    let mut cert = path.clone();
    cert["metadata"]["name"] = json!("cert");
    cert["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("/mine");
    cert["spec"]["tls"] = json!([{ "hosts": ["pay.example"], "secretName": "mine" }]);
    let canary = ingress(
        "canary",
        "2024-02-01T00:00:00Z",
        "pay.example",
        json!({
            "nginx.ingress.kubernetes.io/canary": "true",
            "nginx.ingress.kubernetes.io/canary-weight": "10",
        }),
    );
    let older = ingress("older", "1970-01-01T00:00:00Z", "pay.example", json!({}));
    let mut probe = ingress(
        "probe",
        "2024-02-01T00:00:00Z",
        "mine.example",
        json!({ "nginx.ingress.kubernetes.io/auth-tls-secret": "vault/ledger-tls" }),
    );
    probe["spec"]["tls"] = json!([{ "hosts": ["mine.example"], "secretName": "ledger-tls" }]);
    // (review, whether its answer may depend on vault's Ingress)
    let reviews = [
        (review_in("evil", "CREATE", path), true),
        (review_in("evil", "CREATE", cert), true),
        (review_in("evil", "CREATE", canary), true),
        (review_in("evil", "UPDATE", older), true),
        (review_in("evil", "CREATE", probe), false),
    ];
    let variants = [
        (true, Some(true), Some(true)),
        (true, Some(false), Some(true)),
        (true, None, Some(true)),
        (true, Some(true), Some(false)),
        (true, Some(true), None),
        (true, None, None),
        (false, None, None),
    ];
    let mut answers: Vec<Vec<Vec<u8>>> = Vec::new();
    for (ledger, service, secret) in variants {
        tx.send(Some(with_vault(ledger, service, secret))).unwrap();
        let mut these = Vec::new();
        for (body, _) in &reviews {
            let (status, answer) = post_raw(port, &ca, body.clone()).await.unwrap();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
            these.push(answer);
        }
        answers.push(these);
    }
    for (v, these) in variants.iter().zip(&answers) {
        for ((review, depends), answer) in reviews.iter().zip(these) {
            let text = String::from_utf8_lossy(answer);
            let asked = String::from_utf8_lossy(review);
            for word in ["vault", "ledger"] {
                assert!(
                    asked.contains(word) || !text.contains(word),
                    "{v:?}: {text}"
                );
            }
            let first = &answers[0][reviews.iter().position(|r| r.0 == *review).unwrap()];
            if v.0 || !depends {
                assert_eq!(
                    text,
                    String::from_utf8_lossy(first),
                    "{v:?} against {:?}",
                    variants[0]
                );
            }
        }
    }
    // What vault's Ingress has is said so, and only so.
    let path_answer = String::from_utf8_lossy(&answers[0][0]);
    assert!(
        path_answer.contains(
            "host pay.example path / (Prefix) is already served by an Ingress of another namespace"
        ),
        "{path_answer}"
    );
    let older_answer = String::from_utf8_lossy(&answers[0][3]);
    assert!(
        older_answer.contains("an Ingress of another namespace loses to this Ingress"),
        "{older_answer}"
    );
}

#[tokio::test]
async fn serves_tls_only_and_follows_a_rotated_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first_ca = issue(dir.path(), "first");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let certificates = Arc::new(Certificates::load(&cert, &key).unwrap());
    let (w, _) = webhook(Some(snapshot()), None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let listening = Listening::new(&ferrule_model::snapshot::Limits::default());
    tokio::spawn(serve(listener, certificates, Arc::new(w), listening));

    let good = || {
        review(
            "CREATE",
            ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({})),
        )
    };
    let (status, v) = post(port, &first_ca, good()).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(v["response"]["allowed"], true);

    // Plain HTTP gets no answer.
    let plain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{PATH}"))
        .body(good())
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");

    // A new certificate from another CA: the next connection presents it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second_ca = issue(dir.path(), "second");
    let (status, _) = post(port, &second_ca, good()).await.unwrap();
    assert_eq!(status, 200);
    assert!(post(port, &first_ca, good()).await.is_err());

    // A key that does not belong to the certificate: the last good pair stays.
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(&key, other.serialize_pem()).unwrap();
    let (status, _) = post(port, &second_ca, good()).await.unwrap();
    assert_eq!(status, 200);
}

#[test]
fn unloadable_files_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = Certificates::load(&dir.path().join("no.crt"), &dir.path().join("no.key"));
    assert!(missing.is_err());
    issue(dir.path(), "x");
    std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
    let bad = Certificates::load(&dir.path().join("tls.crt"), &dir.path().join("tls.key"));
    assert!(bad.is_err());
}

// ---------------------------------------------------------------------------------------
// The listener's limits

/// `w` served over TLS with `listening`: (port, the CA's PEM, the certificate's
/// directory, to keep).
async fn serve_with(w: Webhook, listening: Listening) -> (u16, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ca = issue(dir.path(), "test");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let certificates = Arc::new(Certificates::load(&cert, &key).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve(listener, certificates, Arc::new(w), listening));
    (port, ca, dir)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to the webhook from address `from` (any of 127.0.0.0/8).
async fn connect_tls(port: u16, ca_pem: &str, from: &str) -> std::io::Result<Tls> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    let tcp = socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// A client that sends a review's headers and then its body a byte at a time, every
/// 200 ms, never finishing; the task ends when the webhook closes the connection.
async fn trickle(port: u16, ca_pem: &str, from: &str) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncWriteExt;
    let mut tls = connect_tls(port, ca_pem, from).await.unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if tls.write_all(b" ").await.is_err() || tls.flush().await.is_err() {
                return;
            }
        }
    })
}

/// With `failurePolicy: Fail`, a webhook that does not answer stalls every Ingress
/// change of the cluster. 100 clients trickling a body (more than the connections
/// the webhook keeps open), from another address or from the same one as the API
/// server, leave it answering a valid review, and only up to its cap of them stay.
#[tokio::test]
async fn a_review_is_answered_while_100_connections_trickle_a_body() {
    let listening = Listening::new(&ferrule_model::snapshot::Limits::default());
    assert!(listening.max_connections < 100);
    let good = || {
        review(
            "CREATE",
            ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({})),
        )
    };
    for from in ["127.0.0.2", "127.0.0.1"] {
        let (w, _) = webhook(Some(snapshot()), None);
        let (port, ca, _dir) = serve_with(w, listening).await;
        let mut slow = Vec::new();
        for _ in 0..100 {
            slow.push(trickle(port, &ca, from).await);
        }
        let answered = tokio::time::timeout(Duration::from_secs(5), post(port, &ca, good())).await;
        let (status, v) = answered
            .unwrap_or_else(|_| panic!("no answer with 100 slow clients from {from}"))
            .unwrap();
        assert_eq!(
            (status, &v["response"]["allowed"]),
            (200, &json!(true)),
            "{v}"
        );
        // The cap holds: the slow clients that made room were closed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open = slow.iter().filter(|t| !t.is_finished()).count();
        assert!(
            open < listening.max_connections,
            "{open} slow clients from {from} still open"
        );
        for t in slow {
            t.abort();
        }
    }
}

/// A connection that has not completed a request within the deadline, a body
/// trickled or a TLS handshake never started, is closed; so is one idle that long
/// after its last answer.
#[tokio::test]
async fn a_connection_is_closed_at_its_deadline() {
    use tokio::io::AsyncReadExt;
    let listening = Listening {
        deadline: Duration::from_secs(1),
        ..Listening::new(&ferrule_model::snapshot::Limits::default())
    };
    let (w, _) = webhook(Some(snapshot()), None);
    let (port, ca, _dir) = serve_with(w, listening).await;
    let trickling = trickle(port, &ca, "127.0.0.1").await;
    let mut silent = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a silent connection is still open: {closed:?}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), trickling).await;
    assert!(ended.is_ok(), "a trickling connection is still open");

    // Answered, then idle: closed too.
    use tokio::io::AsyncWriteExt;
    let mut tls = connect_tls(port, &ca, "127.0.0.1").await.unwrap();
    let body = review(
        "CREATE",
        ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({})),
    );
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(&[head.as_bytes(), &body].concat())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "an idle connection is still open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// The body limit follows `--max-ingress-bytes` (3 MiB with the default); a larger
/// review is refused before it is read whole.
#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let default = Listening::new(&ferrule_model::snapshot::Limits::default());
    assert_eq!(default.max_body, 3 << 20);
    let limits = ferrule_model::snapshot::Limits {
        ingress_bytes: 64 << 10,
        ..ferrule_model::snapshot::Limits::default()
    };
    let listening = Listening::new(&limits);
    assert_eq!(listening.max_body, 2 * (2 * (64 << 10) + (512 << 10)));
    let (w, _) = webhook(Some(snapshot()), None);
    let (port, ca, _dir) = serve_with(w, listening).await;
    let padded = |len: usize| {
        let mut body = review(
            "CREATE",
            ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({})),
        );
        body.resize(len, b' ');
        body
    };
    let (status, _) = post_raw(port, &ca, padded(listening.max_body))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = post_raw(port, &ca, padded(listening.max_body + 1))
        .await
        .unwrap();
    assert_eq!(status, 413);
}

/// The answer leaves at once: the webhook's connections have TCP_NODELAY. Without
/// it, the answer (written after rustls's session tickets) waited for the client's
/// delayed ACK of the tickets: a 40 ms tail measured from outside.
#[tokio::test]
async fn connections_have_tcp_nodelay() {
    let dir = tempfile::tempdir().unwrap();
    let ca = issue(dir.path(), "test");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let certificates = Arc::new(Certificates::load(&cert, &key).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // The sockets the webhook serves, seen through duplicates of their descriptors.
    let seen: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let accept = {
        let seen = seen.clone();
        let listener = Arc::new(listener);
        move || {
            let (seen, listener) = (seen.clone(), listener.clone());
            async move {
                let (tcp, peer) = listener.accept().await?;
                let tcp = tcp.into_std()?;
                seen.lock().unwrap().push(tcp.try_clone()?);
                Ok((tokio::net::TcpStream::from_std(tcp)?, peer))
            }
        }
    };
    let (w, _) = webhook(Some(snapshot()), None);
    let listening = Listening::new(&ferrule_model::snapshot::Limits::default());
    tokio::spawn(serve_accepted(accept, certificates, Arc::new(w), listening));
    let good = review(
        "CREATE",
        ingress("good", "2024-02-01T00:00:00Z", "new.test", json!({})),
    );
    let (status, _) = post(port, &ca, good).await.unwrap();
    assert_eq!(status, 200);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    for tcp in seen.iter() {
        assert!(tcp.nodelay().unwrap(), "a connection without TCP_NODELAY");
    }
}
