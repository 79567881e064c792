//! What the client posts, recorded in `balancer/cases/sent.json`: the Lua and njs
//! unit tests validate every payload in it (`balancer/API.md`), so a wire change
//! the balancers would refuse fails there, and a wire change at all fails here
//! until the file is blessed:
//! `FERRULE_BLESS=1 cargo test -p ferrule --lib contract_tests`.

use std::path::PathBuf;

use ferrule_model::Settings;
use serde_json::{Value, json};

use super::BalancerClient;
use super::tests::fake_api;
use crate::nginx::render::tests::{fixture, model as model_from_yaml};

/// Ingresses using every field the API takes, across a few backends and hosts:
/// cookie affinity with every attribute, EWMA, a canary with every rule, a hash on
/// an IPv6 backend, a host's own certificate, a wildcard, and a TLS host served the
/// default certificate. Without `hashed`, the last Ingress is left out (what the
/// second sync removes).
fn ingresses(hashed: bool) -> String {
    let secret = |name: &str, pem: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": name, "namespace": "demo" },
            "stringData": {
                "tls.crt": fixture(&format!("{pem}.crt")),
                "tls.key": fixture(&format!("{pem}.key")),
            },
        })
    };
    let mut yaml = format!(
        r#"{a}
---
{wildcard}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/load-balance: ewma
    nginx.ingress.kubernetes.io/affinity: cookie
    nginx.ingress.kubernetes.io/session-cookie-name: route
    nginx.ingress.kubernetes.io/session-cookie-max-age: "3600"
    nginx.ingress.kubernetes.io/session-cookie-path: /shop
    nginx.ingress.kubernetes.io/session-cookie-secure: "true"
    nginx.ingress.kubernetes.io/session-cookie-samesite: None
    nginx.ingress.kubernetes.io/session-cookie-conditional-samesite-none: "true"
    nginx.ingress.kubernetes.io/session-cookie-expires: "7200"
    nginx.ingress.kubernetes.io/session-cookie-domain: .example.com
    nginx.ingress.kubernetes.io/session-cookie-change-on-failure: "true"
spec:
  tls: [{{ hosts: [a.example.com], secretName: a-tls }}, {{ hosts: [b.example.com] }}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {{ path: /shop, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
  - host: b.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web-canary
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:01Z"
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-weight: "5"
    nginx.ingress.kubernetes.io/canary-weight-total: "50"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
    nginx.ingress.kubernetes.io/canary-by-header-value: "yes"
    nginx.ingress.kubernetes.io/canary-by-header-pattern: "^(beta|alpha)$"
    nginx.ingress.kubernetes.io/canary-by-cookie: canary
    nginx.ingress.kubernetes.io/affinity-canary-behavior: legacy
spec:
  rules:
  - host: a.example.com
    http:
      paths:
      - {{ path: /shop, pathType: Prefix, backend: {{ service: {{ name: canary, port: {{ number: 80 }} }} }} }}
"#,
        a = secret("a-tls", "a"),
        wildcard = secret("wild-tls", "wildcard"),
    );
    if hashed {
        yaml.push_str(
            r#"---
apiVersion: v1
kind: Service
metadata: { name: hashed, namespace: demo }
spec: { ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: hashed-1, namespace: demo, labels: { kubernetes.io/service-name: hashed } }
addressType: IPv6
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: ["fd00::5", "fd00::6"], conditions: { ready: true } }]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: hashed
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:02Z"
  annotations:
    nginx.ingress.kubernetes.io/upstream-hash-by: "$request_uri-$arg_user"
    nginx.ingress.kubernetes.io/upstream-hash-by-subset: "true"
    nginx.ingress.kubernetes.io/upstream-hash-by-subset-size: "2"
spec:
  tls: [{ hosts: [w.example.com], secretName: wild-tls }]
  rules:
  - host: w.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: hashed, port: { number: 80 } } } }
"#,
        );
    }
    yaml
}

fn sent_json() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../balancer/cases/sent.json")
}

/// Every POST of a first sync (everything) and a second one (a backend and a host
/// removed), as `{"sync", "path", "body"}`.
async fn record() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let (sock, accepted) = fake_api(dir.path());
    let default = (fixture("ec.crt"), fixture("ec.key"));
    let mut client = BalancerClient::new(sock, "token".into()).with_default_certificate(&default);
    let mut out = Vec::new();
    for (sync, hashed) in [
        ("everything", true),
        ("a backend and a host removed", false),
    ] {
        let model = model_from_yaml(&ingresses(hashed), Settings::default());
        let posted = client.sync(&model).await.unwrap();
        assert_eq!(posted.rejected, Vec::<String>::new());
        for body in accepted.lock().unwrap().drain(..) {
            // the fake API keeps bodies only; each kind's body has its own list
            let path = match body.get("backends") {
                Some(_) => "/configuration/backends",
                None => "/configuration/certificates",
            };
            out.push(json!({ "sync": sync, "path": path, "body": body }));
        }
    }
    out
}

/// The paths (`.body.backends[].name`) of the scalars in `v` that are not null.
fn non_null_fields(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => m
            .iter()
            .filter(|(_, x)| !x.is_null())
            .for_each(|(k, x)| non_null_fields(x, &format!("{path}.{k}"), out)),
        Value::Array(a) => a
            .iter()
            .for_each(|x| non_null_fields(x, &format!("{path}[]"), out)),
        _ => out.push(path.to_owned()),
    }
}

#[tokio::test]
async fn what_the_client_posts_is_in_sent_json() {
    let posts = record().await;
    // The model above must use every field, or the balancers never see it filled.
    let mut filled = Vec::new();
    for post in &posts {
        non_null_fields(post, "", &mut filled);
    }
    for field in [
        ".body.backends[].endpoints[].address",
        ".body.backends[].load_balance",
        ".body.backends[].upstream_hash_by",
        ".body.backends[].upstream_hash_by_subset_size",
        ".body.backends[].affinity.mode",
        ".body.backends[].affinity.affinity_mode",
        ".body.backends[].affinity.cookie_name",
        ".body.backends[].affinity.max_age",
        ".body.backends[].affinity.path",
        ".body.backends[].affinity.secure",
        ".body.backends[].affinity.samesite",
        ".body.backends[].affinity.expires",
        ".body.backends[].affinity.domain",
        ".body.backends[].affinity.change_on_failure",
        ".body.backends[].affinity.ingresses[]",
        ".body.backends[].canary.backend",
        ".body.backends[].canary.weight",
        ".body.backends[].canary.weight_total",
        ".body.backends[].canary.header",
        ".body.backends[].canary.header_value",
        ".body.backends[].canary.header_pattern",
        ".body.backends[].canary.cookie",
        ".body.backends[].canary.affinity_behavior",
        ".body.removed[]",
        ".body.certificates[].host",
        ".body.default.cert",
    ] {
        assert!(
            filled.contains(&field.to_owned()),
            "no payload fills {field}"
        );
    }
    let sent = Value::Array(posts);
    let path = sent_json();
    if std::env::var_os("FERRULE_BLESS").is_some_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&sent).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let recorded: Value = serde_json::from_str(&text).unwrap();
    assert!(
        recorded == sent,
        "what the client posts differs from {path:?}; if the change is meant, rerun with \
         FERRULE_BLESS=1, review the diff and run the Lua and njs suites, which validate it.\n\
         posted now: {}",
        serde_json::to_string_pretty(&sent).unwrap()
    );
}
