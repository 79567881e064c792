//! Snapshots of rendered configuration for representative models (reviewed with
//! `cargo insta review`), and proof that hostile values cannot escape their token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrule_model::{Settings, Severity, Snapshot, objects};
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;

mod growth;

const CONFIGMAP: (&str, &str) = ("ingress-nginx", "ferrule");

/// A model from YAML documents (`watch_without_class`, so no IngressClass needed).
fn model_with(yaml: &str, settings: Settings) -> Model {
    let mut snap = Snapshot {
        settings: Settings {
            watch_without_class: true,
            ..settings
        },
        ..Snapshot::default()
    };
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v = Value::deserialize(doc).expect("valid YAML");
        if !v.is_null() {
            objects::add(&mut snap, v, Some(CONFIGMAP)).expect("valid object");
        }
    }
    ferrule_model::build(&snap)
}

/// A model (with [`SERVICES`]) whose only errors are the `expected` ones.
fn model_expecting(yaml: &str, settings: Settings, expected: &[&str]) -> Model {
    let m = model_with(&format!("{SERVICES}\n---\n{yaml}"), settings);
    let errors: Vec<&str> = m
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| p.message.as_str())
        .collect();
    assert_eq!(errors.len(), expected.len(), "problems: {errors:#?}");
    for (e, want) in errors.iter().zip(expected) {
        assert!(e.contains(want), "{e:?} does not mention {want:?}");
    }
    m
}

/// A model (with [`SERVICES`]) that must build without errors.
pub(crate) fn model(yaml: &str, settings: Settings) -> Model {
    model_expecting(yaml, settings, &[])
}

fn opts(prefix: &str) -> RenderOptions {
    RenderOptions {
        prefix: PathBuf::from(prefix),
        listen_address: "*".to_owned(),
        http_port: 80,
        https_port: 443,
        worker_processes: "auto".to_owned(),
        user: None,
        modules: Vec::new(),
        configmap: Some(format!("{}/{}", CONFIGMAP.0, CONFIGMAP.1)),
        balancer: Balancer::Lua,
        certificate_store_mib: 256,
        fast_path: false,
        location_directive: false,
        stream_module: false,
        input_header: false,
        worker_dir: None,
        log_to_stdio: false,
        resolvers: vec!["10.96.0.10".to_owned()],
        metrics: None,
        ssl_passthrough: false,
        allow_local_endpoints: false,
    }
}

/// Every server file of the model, rendered with prefix `/ferrule`.
fn servers(model: &Model) -> String {
    let rendered = Renderer::new(opts("/ferrule")).render(model).unwrap();
    rendered
        .iter()
        .filter(|(path, _)| path.starts_with("conf/servers/"))
        .map(|(path, f)| format!("#### {path}\n{}", f.text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Services `app` and `canary` in namespace `demo` with one ready endpoint each.
const SERVICES: &str = r#"
apiVersion: v1
kind: Service
metadata: { name: app, namespace: demo }
spec: { ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: app-1, namespace: demo, labels: { kubernetes.io/service-name: app } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: ["10.0.0.1"], conditions: { ready: true } }]
---
apiVersion: v1
kind: Service
metadata: { name: canary, namespace: demo }
spec: { ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: canary-1, namespace: demo, labels: { kubernetes.io/service-name: canary } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: ["10.0.0.2"], conditions: { ready: true } }]
"#;

/// A file of `model/tests/fixtures/`.
pub(crate) fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../model/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn simple_host() {
    let m = model_expecting(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: web, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: web.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /api/, pathType: Prefix, backend: { service: { name: app, port: { name: http } } } }
      - { path: /healthz, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /docs/, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /gone, pathType: Prefix, backend: { service: { name: missing, port: { number: 80 } } } }
"#,
        Settings::default(),
        &["missing"],
    );
    insta::assert_snapshot!(servers(&m));
}

#[test]
fn the_log_phase_only_where_ewma_is_used() {
    // Each to the Service of its own name.
    let ingress = |name: &str, host: &str, lb: &str| {
        let annotations = format!("nginx.ingress.kubernetes.io/load-balance: {lb}");
        format!(
            "\n---\n{}",
            one_path_ingress(name, host, "/", name, &annotations)
        )
    };
    let m = model(
        &format!(
            "{SERVICES}{}{}",
            ingress("app", "ewma.example.com", "ewma"),
            ingress("canary", "rr.example.com", "round_robin")
        ),
        Settings::default(),
    );
    let rendered = Renderer::new(opts("/ferrule")).render(&m).unwrap();
    let log_phases = |host: &str| {
        rendered[&server_file(host)]
            .text
            .matches("log_by_lua_block")
            .count()
    };
    assert_eq!(log_phases("ewma.example.com"), 1);
    assert_eq!(log_phases("rr.example.com"), 0);
    let includes = rendered
        .values()
        .map(|f| f.text.matches("log_by_lua").count())
        .sum::<usize>();
    assert_eq!(includes, 1, "nowhere else, not in nginx.conf");
}

#[test]
fn the_rewrite_phase_only_where_the_balancer_phase_is_too_late() {
    // (annotations of the Ingress on h.example.com, extra documents, rewrite
    // phases wanted in its file (`/` is one location) and in all other files)
    let check = |annotations: &str, extra: &str, want: usize, want_elsewhere: usize| {
        let m = model(
            &format!(
                "{SERVICES}{extra}\n---\n{}",
                one_path_ingress("app", "h.example.com", "/", "app", annotations)
            ),
            Settings {
                allow_snippet_annotations: true,
                ..Settings::default()
            },
        );
        for (balancer, want, want_elsewhere) in
            [(Balancer::Lua, want, want_elsewhere), (Balancer::Njs, 0, 0)]
        {
            let rendered = Renderer::new(RenderOptions {
                balancer,
                ..opts("/ferrule")
            })
            .render(&m)
            .unwrap();
            // (every request, only requests with a body)
            let phases = |text: &str| {
                let lines = || text.lines().map(str::trim_start);
                (
                    lines().filter(|l| l.starts_with("rewrite_by_lua")).count(),
                    lines()
                        .filter(|l| l.starts_with("if ($ferrule_request_body) { rewrite_by_lua"))
                        .count(),
                )
            };
            let host = &rendered[&server_file("h.example.com")].text;
            // the one location has the phase either always or for bodies
            let lua = usize::from(balancer == Balancer::Lua);
            assert_eq!(
                phases(host),
                (want, lua - want),
                "{balancer:?}, annotations {{ {annotations} }}"
            );
            let elsewhere = rendered
                .iter()
                .filter(|(f, _)| *f != &server_file("h.example.com"))
                .map(|(_, r)| phases(&r.text).0)
                .sum::<usize>();
            assert_eq!(elsewhere, want_elsewhere, "{balancer:?}: other files");
        }
    };
    const P: &str = "nginx.ingress.kubernetes.io";
    check("", "", 0, 0);
    check(&format!("{P}/load-balance: ewma"), "", 0, 0);
    check(&format!("{P}/upstream-hash-by: $remote_addr"), "", 0, 0);
    // canary and affinity are decided in the balancer phase
    check(&format!("{P}/affinity: cookie"), "", 0, 0);
    check(&format!("{P}/rewrite-target: /x"), "", 1, 0);
    check(&format!("{P}/backend-protocol: HTTPS"), "", 1, 0);
    check(&format!("{P}/backend-protocol: GRPC"), "", 1, 0);
    let snippet = format!("{P}/configuration-snippet: 'auth_basic on;'");
    check(&snippet, "", 1, 0);
    check(&format!("{P}/server-snippet: 'auth_basic on;'"), "", 1, 0);
    // The same backend as the catch-all's default: its location needs it too.
    let default_backend = r#"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: catch-all
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
spec:
  defaultBackend: { service: { name: app, port: { number: 80 } } }
"#;
    check("", default_backend, 0, 0);
    check(&format!("{P}/affinity: cookie"), default_backend, 0, 0);
    let canary = r#"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: canary
  namespace: demo
  creationTimestamp: "2026-01-02T00:00:00Z"
  annotations: { nginx.ingress.kubernetes.io/canary: "true", nginx.ingress.kubernetes.io/canary-weight: "10" }
spec:
  rules:
  - host: h.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#;
    check("", canary, 0, 0);
    let location_snippet = r#"
---
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: ingress-nginx }
data: { location-snippet: "auth_basic on;" }
"#;
    check("", location_snippet, 1, 0);
}

/// A TLS host proxying over HTTPS with proxy, buffering and forwarding settings and
/// CORS for listed origins,
/// a gRPC host with CORS for any origin, a forced redirect with a mirror.
fn tls_and_protocols() -> String {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": "a-tls", "namespace": "demo" },
        "stringData": { "tls.crt": fixture("a.crt"), "tls.key": fixture("a.key") },
    });
    format!(
        r#"{secret}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: secure
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/proxy-body-size: 8m
    nginx.ingress.kubernetes.io/proxy-connect-timeout: "5"
    nginx.ingress.kubernetes.io/proxy-read-timeout: "120s"
    nginx.ingress.kubernetes.io/proxy-send-timeout: "30"
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/enable-cors: "true"
    nginx.ingress.kubernetes.io/cors-allow-origin: "https://app.example.com, *.example.org:8443"
    nginx.ingress.kubernetes.io/cors-expose-headers: X-Total
    nginx.ingress.kubernetes.io/proxy-buffering: "on"
    nginx.ingress.kubernetes.io/proxy-buffer-size: 8k
    nginx.ingress.kubernetes.io/proxy-max-temp-file-size: "0"
    nginx.ingress.kubernetes.io/proxy-next-upstream: error timeout http_502
    nginx.ingress.kubernetes.io/proxy-next-upstream-tries: "2"
    nginx.ingress.kubernetes.io/upstream-vhost: app.internal
    nginx.ingress.kubernetes.io/proxy-cookie-path: /inner /
    nginx.ingress.kubernetes.io/enable-access-log: "false"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: a-tls
    nginx.ingress.kubernetes.io/proxy-ssl-server-name: "on"
spec:
  tls: [{{ hosts: [a.example.com], secretName: a-tls }}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: grpc
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: GRPC
    nginx.ingress.kubernetes.io/enable-cors: "true"
    nginx.ingress.kubernetes.io/cors-allow-credentials: "false"
    nginx.ingress.kubernetes.io/ssl-redirect: "false"
    nginx.ingress.kubernetes.io/force-ssl-redirect: "false"
spec:
  rules:
  - host: grpc.example.com
    http:
      paths:
      - {{ path: /pkg.Service, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: forced
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/force-ssl-redirect: "true"
    nginx.ingress.kubernetes.io/mirror-target: https://shadow.example$request_uri
    nginx.ingress.kubernetes.io/mirror-request-body: "off"
spec:
  rules:
  - host: forced.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
"#
    )
}

#[test]
fn tls_host_with_proxy_settings() {
    let m = model(&tls_and_protocols(), Settings::default());
    insta::assert_snapshot!(servers(&m));
}

const REWRITE: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
spec:
  rules:
  - host: rw.example.com
    http:
      paths:
      - { path: "/api(/|$)(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
"#;

/// The njs balancer: its contract in nginx.conf, certificates from `data:`
/// variables, the peer checked before any rewrite, the njs includes.
#[test]
fn njs_balancer() {
    let m = model(
        &format!("{}\n---\n{REWRITE}", tls_and_protocols()),
        Settings::default(),
    );
    let mut o = opts("/ferrule");
    o.balancer = Balancer::Njs;
    o.modules = vec!["/usr/lib/nginx/modules/ngx_http_js_module.so".to_owned()];
    let rendered = Renderer::new(o).render(&m).unwrap();
    let text = rendered
        .iter()
        .filter(|(p, _)| *p == "conf/nginx.conf" || p.starts_with("conf/servers/"))
        .map(|(p, f)| {
            format!(
                "#### {p}\n{}",
                f.text.replace(rendered.version(), "<config-version>")
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(text);
}

/// The njs balancer with the C module counting requests: its zone, and the dump
/// on the API socket behind njs's token check.
#[test]
fn njs_balancer_with_request_metrics() {
    let m = model(SERVICES, Settings::default());
    let mut o = opts("/ferrule");
    o.balancer = Balancer::Njs;
    o.modules = vec![
        "/usr/lib/nginx/modules/ngx_http_js_module.so".to_owned(),
        "/usr/lib/nginx/modules/ngx_http_ferrule_module.so".to_owned(),
    ];
    o.metrics = Some(super::MetricsRender {
        time_buckets: vec![0.005, 0.5, 10.0],
        length_buckets: vec![10.0, 100.0],
        size_buckets: vec![1000.0],
        zone_mib: 32,
        module: true,
    });
    let rendered = Renderer::new(o).render(&m).unwrap();
    insta::assert_snapshot!(
        rendered["conf/nginx.conf"]
            .text
            .replace(rendered.version(), "<config-version>")
    );
}

#[test]
fn wildcard_and_exact_hosts() {
    let m = model(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: wild, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: "*.foo.example.com"
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
  - host: bar.foo.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
        Settings::default(),
    );
    insta::assert_snapshot!(servers(&m));
}

#[test]
fn regex_and_rewrite() {
    let m = model(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/use-regex: "true"
    nginx.ingress.kubernetes.io/rewrite-target: /$2
spec:
  rules:
  - host: rewrite.example.com
    http:
      paths:
      - { path: "/something(/|$)(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: "/v[0-9]+/(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /exact, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
"#,
        Settings::default(),
    );
    insta::assert_snapshot!(servers(&m));
}

#[test]
fn canary() {
    let m = model(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: main, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: main-canary
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:01Z"
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-weight: "20"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
        Settings::default(),
    );
    // The canary adds no location: the split happens in the balancer.
    let canary = m.backends["demo_app_80"].balancing.canary.as_ref();
    assert_eq!(canary.map(|c| c.backend.as_str()), Some("demo_canary_80"));
    insta::assert_snapshot!(servers(&m));
}

#[test]
fn snippets_enabled() {
    let m = model(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: ingress-nginx }
data:
  http-snippet: "map $http_x_tenant $tenant { default none; }"
  server-snippet: "add_header X-Server-Snippet on;"
  location-snippet: "add_header X-Location-Snippet on;"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: snippets
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/server-snippet: |
      location = /server-snippet { return 204; }
    nginx.ingress.kubernetes.io/configuration-snippet: |
      more_set_headers "X-Config: on";
      add_header X-Config-Snippet on;
spec:
  rules:
  - host: snippets.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
"#,
        Settings {
            allow_snippet_annotations: true,
            ..Settings::default()
        },
    );
    let rendered = Renderer::new(opts("/ferrule")).render(&m).unwrap();
    let main = &rendered["conf/nginx.conf"].text;
    let http_snippet = main
        .lines()
        .skip_while(|l| !l.contains("ConfigMap http-snippet"))
        .take(4)
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(format!(
        "#### conf/nginx.conf (http-snippet)\n{http_snippet}\n{}",
        servers(&m)
    ));
}

#[test]
fn default_backend() {
    let m = model(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: catch-all, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  defaultBackend: { service: { name: app, port: { number: 80 } } }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: api, namespace: demo, creationTimestamp: "2026-01-02T00:00:00Z" }
spec:
  rules:
  - http:
      paths:
      - { path: /api, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
        Settings::default(),
    );
    insta::assert_snapshot!(servers(&m));
    // Without any Ingress: the implicit default server answers 404.
    insta::assert_snapshot!("no_ingress", servers(&model("", Settings::default())));
}

/// The version NGINX answers with names what it read: a model that differs in
/// endpoints only renders the same files and the same version (no reload).
#[test]
fn the_version_follows_the_files_not_the_endpoints() {
    let r = Renderer::new(opts("/ferrule"));
    let m = model(&tls_and_protocols(), Settings::default());
    let mut moved = m.clone();
    for b in moved.backends.values_mut() {
        std::sync::Arc::make_mut(b).endpoints.clear();
    }
    assert_ne!(m.hash(), moved.hash());
    let (a, b) = (r.render(&m).unwrap(), r.render(&moved).unwrap());
    assert_eq!(a.version(), b.version());
    let nginx_conf = &a["conf/nginx.conf"].text;
    assert!(
        nginx_conf.contains(&format!("return 200 \"{}\";", a.version())),
        "{nginx_conf}"
    );
    let mut other = m.clone();
    std::sync::Arc::make_mut(&mut other.servers)[0]
        .locations
        .pop();
    assert_ne!(r.render(&other).unwrap().version(), a.version());
}

#[test]
fn main_config() {
    let m = model("", Settings::default());
    let mut o = opts("/ferrule");
    o.user = Some("nobody".to_owned());
    o.modules = vec!["/usr/lib/nginx/modules/ngx_http_lua_module.so".to_owned()];
    let rendered = Renderer::new(o).render(&m).unwrap();
    let text = rendered["conf/nginx.conf"]
        .text
        .replace(rendered.version(), "<config-version>");
    insta::assert_snapshot!(text);
}

// ---------------------------------------------------------------------------
// Hostile values.

/// The same files (server files are named by host) with the same structure: no
/// directive, block or parameter was added, removed or ended early.
fn assert_same_structure(h: &BTreeMap<String, String>, b: &BTreeMap<String, String>) {
    assert_eq!(h.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (path, text) in h {
        assert_eq!(
            skeleton(text),
            skeleton(&b[path]),
            "{path}: structure differs\n{text}"
        );
    }
}

/// The structure NGINX parses from a configuration: one entry per directive
/// (`depth name argc`), following `ngx_conf_read_token` (comments start only where
/// a token starts; quotes only at the start of a token, with backslash escapes).
/// Bodies of `*_by_lua_block` directives are Lua, skipped by brace counting.
fn skeleton(conf: &str) -> Vec<String> {
    let b = conf.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b';' | b'{' | b'}' => {
                if c == b'}' {
                    assert!(words.is_empty(), "unterminated directive {words:?}");
                    depth = depth.checked_sub(1).expect("unbalanced }");
                } else {
                    let name = words.first().cloned().unwrap_or_default();
                    out.push(format!("{depth} {name} {}", words.len() - 1));
                    words.clear();
                    if c == b'{' {
                        if name.ends_with("_by_lua_block") {
                            let mut level = 1;
                            while level > 0 {
                                i += 1;
                                match b[i] {
                                    b'{' => level += 1,
                                    b'}' => level -= 1,
                                    _ => {}
                                }
                            }
                        } else {
                            depth += 1;
                        }
                    }
                }
                i += 1;
            }
            b'"' | b'\'' => {
                let mut w = String::new();
                i += 1;
                while b[i] != c {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    w.push(b[i] as char);
                    i += 1;
                }
                i += 1;
                // NGINX also accepts `)` there, as in `if ($x = "")`.
                assert!(
                    i >= b.len() || b" \t\r\n;{)".contains(&b[i]),
                    "a quoted token must be followed by a separator at byte {i}"
                );
                words.push(w);
            }
            _ => {
                let mut w = String::new();
                while i < b.len() && !b" \t\r\n;{}".contains(&b[i]) {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    w.push(b[i] as char);
                    i += 1;
                }
                words.push(w);
            }
        }
    }
    assert_eq!(depth, 0, "unbalanced blocks");
    out
}

#[test]
fn skeleton_sees_injected_directives() {
    let ok = "server { listen \"80\"; }";
    let injected = "server { listen \"80\"; } server { listen 81; }";
    assert_eq!(skeleton(ok), vec!["0 server 0", "1 listen 1"]);
    assert_ne!(skeleton(ok), skeleton(injected));
    assert_eq!(skeleton("a \"x;}\\\"#\" b#c;"), vec!["0 a 2"]);
}

/// Hostile strings in every user-controlled place that reaches a file, each with a
/// benign twin of the same role.
struct Values {
    ns: &'static str,
    ingress: &'static str,
    service: &'static str,
    port: &'static str,
    secret: &'static str,
    regex_path: &'static str,
    rewrite: &'static str,
}

const HOSTILE: Values = Values {
    // No control character here: the model refuses a backend name with one (the
    // balancer API would), and the namespace is part of the backend's name. The
    // Ingress and Secret names keep their newlines.
    ns: "demo\";} server{listen 1;}#",
    ingress: "evil\";\n} server { listen 2; }\n# x",
    service: "svc\";}server{listen 3;}#$http_x_pick",
    port: "http\";}#",
    secret: "tls\";}\nssl_certificate x;#",
    regex_path: "/r\";}server{return(200);#(.*)",
    rewrite: "/$1#frag",
};

const BENIGN: Values = Values {
    ns: "demo",
    ingress: "nice",
    service: "svc",
    port: "http",
    secret: "tls",
    regex_path: "/r/(.*)",
    rewrite: "/$1",
};

fn world(v: &Values) -> String {
    let docs = [
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": v.service, "namespace": v.ns },
            "spec": { "ports": [{ "name": v.port, "port": 80, "targetPort": 8080 }] },
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "s-1", "namespace": v.ns,
                "labels": { "kubernetes.io/service-name": v.service },
            },
            "addressType": "IPv4",
            "ports": [{ "name": v.port, "port": 8080 }],
            "endpoints": [{ "addresses": ["10.0.0.1"], "conditions": { "ready": true } }],
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": v.secret, "namespace": v.ns },
            "stringData": { "tls.crt": fixture("a.crt"), "tls.key": fixture("a.key") },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": v.ingress, "namespace": v.ns,
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "tls": [{ "hosts": ["a.example.com"], "secretName": v.secret }],
                "rules": [{ "host": "a.example.com", "http": { "paths": [
                    { "path": "/p", "pathType": "Prefix",
                      "backend": { "service": { "name": v.service, "port": { "name": v.port } } } },
                    { "path": "/x", "pathType": "Exact",
                      "backend": { "service": { "name": v.service, "port": { "number": 80 } } } },
                ] } }],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "regex", "namespace": v.ns,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {
                    "nginx.ingress.kubernetes.io/use-regex": "true",
                    "nginx.ingress.kubernetes.io/rewrite-target": v.rewrite,
                },
            },
            "spec": { "rules": [{ "host": "b.example.com", "http": { "paths": [
                { "path": v.regex_path, "pathType": "ImplementationSpecific",
                  "backend": { "service": { "name": v.service, "port": { "number": 80 } } } },
            ] } }] },
        }),
    ];
    docs.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[test]
fn hostile_annotations_and_hosts_never_reach_nginx() {
    let cases: &[(&str, &str)] = &[
        ("proxy-body-size", "1m; return 200 \"x\""),
        ("proxy-read-timeout", "5;}"),
        ("rewrite-target", "/x; return 200"),
        ("rewrite-target", "/x\"}"),
        ("rewrite-target", "/x\n}"),
        ("session-cookie-name", "a;b"),
        ("cors-allow-origin", "https://a.example\"; return 200"),
        ("cors-allow-origin", "https://a.example/$http_x"),
        ("cors-allow-methods", "GET;}"),
        ("cors-allow-headers", "X-A\n}"),
        ("upstream-vhost", "a.test\"; return 200"),
        ("upstream-vhost", "$http_x_host"),
        ("connection-proxy-header", "close;"),
        ("x-forwarded-prefix", "/a $host"),
        ("proxy-cookie-path", "/a /b; return 200"),
        ("proxy-next-upstream", "error; return"),
        ("proxy-buffer-size", "4k;"),
        ("proxy-ssl-name", "a.test; return 200"),
        ("proxy-ssl-ciphers", "HIGH\"}"),
        ("proxy-ssl-protocols", "TLSv1.2;"),
        ("mirror-target", "https://m.example/$http_x"),
        ("mirror-target", "https://m.example/;return 200"),
        ("mirror-host", "m.example\"; return 200"),
    ];
    for (key, value) in cases {
        let ing = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "bad", "namespace": "demo",
                "annotations": { format!("nginx.ingress.kubernetes.io/{key}"): value },
            },
            "spec": { "rules": [{ "host": "bad.example.com", "http": { "paths": [
                { "path": "/", "pathType": "Prefix",
                  "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
            ] } }] },
        });
        let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
        // Refused at parse time, never rendered: the Ingress is served without the
        // key (as ingress-nginx serves it) with a problem naming the key.
        assert!(
            m.problems.iter().any(|p| p.message.contains(key)),
            "{key}: {value:?} accepted silently: {:#?}",
            m.problems
        );
        // Rejected whole, or NGINX gets exactly what it gets without the annotation.
        if m.server("bad.example.com").is_none() {
            continue;
        }
        let mut clean = ing.clone();
        clean["metadata"]["annotations"] = json!({});
        let without = model_with(&format!("{SERVICES}\n---\n{clean}"), Settings::default());
        assert_eq!(
            servers(&m),
            servers(&without),
            "{key}: {value:?} reached NGINX"
        );
    }
    for host in [
        "a.test;", "a.test}", "a\".test", "a test", "a.test\n", "#a.test",
    ] {
        let ing = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": { "name": "bad", "namespace": "demo" },
            "spec": { "rules": [{ "host": host, "http": { "paths": [
                { "path": "/", "pathType": "Prefix",
                  "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
            ] } }] },
        });
        let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
        assert_eq!(m.servers.len(), 0, "host {host:?} accepted");
    }
    for path in ["/a;b", "/a{", "/a}", "/a\"", "/a b", "/a\nb", "/a\\"] {
        let ing = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": { "name": "bad", "namespace": "demo" },
            "spec": { "rules": [{ "host": "p.example.com", "http": { "paths": [
                { "path": path, "pathType": "Prefix",
                  "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
            ] } }] },
        });
        let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
        assert!(m.servers.is_empty(), "path {path:?} accepted");
    }
}

/// Everything rendered for a model, as (path, text), certificates excluded.
fn render_all(model: &Model, prefix: &Path, balancer: Balancer) -> BTreeMap<String, String> {
    let mut o = opts(&prefix.to_string_lossy());
    o.balancer = balancer;
    Renderer::new(o)
        .render(model)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.text))
        .collect()
}

#[tokio::test]
async fn hostile_values_cannot_escape_their_token() {
    let hostile = model_with(&world(&HOSTILE), Settings::default());
    let benign = model_with(&world(&BENIGN), Settings::default());
    // Both build the same thing: 2 servers, a backend, a certificate, no errors.
    for m in [&hostile, &benign] {
        let errors: Vec<_> = m
            .problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(m.servers.len(), 2);
        assert_eq!(m.backends.len(), 2, "by port name and by number");
        assert_eq!(m.certificates.len(), 1);
    }
    let dir = tempfile::tempdir().unwrap();
    let (h, b) = (
        render_all(&hostile, dir.path(), Balancer::Lua),
        render_all(&benign, dir.path(), Balancer::Lua),
    );
    assert_same_structure(&h, &b);
    // The hostile strings are there, but only quoted.
    let host_file = &h[&server_file("a.example.com")];
    assert!(
        host_file.contains(r#"demo\";} server{listen 1;}#"#),
        "{host_file}"
    );
    assert!(!host_file.contains("server{listen 1;}#\n"));
    // A `$` in a name never reads a variable where NGINX expands them.
    assert!(
        host_file.contains("#${ferrule_dollar}http_x_pick_"),
        "{host_file}"
    );
    assert!(!host_file.contains("#$http_x_pick"), "{host_file}");

    // And NGINX accepts it.
    if which_nginx().is_none() {
        eprintln!("nginx not installed: skipping nginx -t");
        return;
    }
    let out = nginx_test(&hostile, dir.path(), Balancer::Lua).await;
    assert!(out.is_ok(), "nginx -t failed: {out:?}");
}

/// With the C module's `ferrule_location`, the hostile values are its arguments as
/// they are (the module expands no variable), still in their tokens, and NGINX with
/// the module accepts them.
#[tokio::test]
async fn hostile_values_stay_in_their_token_in_ferrule_location() {
    let hostile = model_with(&world(&HOSTILE), Settings::default());
    let benign = model_with(&world(&BENIGN), Settings::default());
    let dir = tempfile::tempdir().unwrap();
    let with_module = |m: &Model| {
        Renderer::new(module_opts(dir.path()))
            .render(m)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.text))
            .collect::<BTreeMap<_, _>>()
    };
    let (h, b) = (with_module(&hostile), with_module(&benign));
    assert_same_structure(&h, &b);
    let host_file = &h[&server_file("a.example.com")];
    let located: Vec<_> = (host_file.lines())
        .filter(|l| l.trim_start().starts_with("ferrule_location "))
        .collect();
    assert!(!located.is_empty(), "{host_file}");
    for l in &located {
        assert!(l.contains(r#"#$http_x_pick_"#), "the name as it is: {l}");
    }
    assert!(!host_file.contains("set $ferrule_backend"), "{host_file}");
    // The module decides which requests may carry a body: no map, no `if`.
    assert!(!h["conf/nginx.conf"].contains("$ferrule_request_body {"));
    assert!(!host_file.contains("$ferrule_request_body"), "{host_file}");
    let if_body = (host_file.lines())
        .filter(|l| {
            l.trim_start()
                .starts_with("ferrule_if_body { rewrite_by_lua_block")
        })
        .count();
    assert!(if_body > 0, "{host_file}");
    // The headers' variables that are the first non-empty of others: aliases, not
    // maps.
    let conf = &h["conf/nginx.conf"];
    for alias in [
        "ferrule_alias $ferrule_host $http_host $host;",
        "ferrule_alias $ferrule_request_id $http_x_request_id $request_id;",
        "ferrule_alias $ferrule_upstream_host $ferrule_host;",
        "ferrule_alias $ferrule_scheme $scheme;",
        "ferrule_alias $ferrule_forwarded_host $ferrule_host;",
        "ferrule_alias $ferrule_forwarded_port $ferrule_server_port;",
        "ferrule_alias $ferrule_forwarded_for $remote_addr;",
    ] {
        assert!(conf.contains(alias), "{alias} missing from\n{conf}");
    }
    assert!(!conf.contains("map \"\" $ferrule_scheme"), "{conf}");
    // One header line carries ingress-nginx's others; the client's copies are
    // dropped (it::conformance checks what the backend receives).
    assert!(
        conf.contains("ferrule_header_lines $ferrule_proxy_headers $remote_addr"),
        "{conf}"
    );
    let headers = &h["conf/proxy-headers.conf"];
    assert!(
        headers.contains("proxy_set_header X-Real-IP $ferrule_proxy_headers;"),
        "{headers}"
    );
    // The same headers as proxy-headers.conf without the module: each line that
    // file sets is either one of ferrule_header_lines' (empty here, so the
    // client's copy is dropped) or the same here.
    let classic = (static_files::static_files(false))
        .find(|(p, _)| *p == "conf/proxy-headers.conf")
        .unwrap()
        .1;
    let lines = conf
        .split("ferrule_header_lines $ferrule_proxy_headers ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap();
    let words: Vec<&str> = lines.split_whitespace().collect();
    let mut carried = vec![("X-Real-IP", words[0])];
    carried.extend(words[1..].chunks(2).map(|p| (p[0], p[1])));
    let set = |text: &str| -> Vec<String> {
        (text.lines())
            .filter(|l| l.starts_with("proxy_set_header "))
            .map(str::to_owned)
            .collect()
    };
    for line in set(classic) {
        let carried_here = carried
            .iter()
            .find(|(name, var)| line == format!("proxy_set_header {name} {var};"));
        match carried_here {
            Some(("X-Real-IP", _)) => {}
            Some((name, _)) => assert!(
                headers.contains(&format!("proxy_set_header {name} \"\";")),
                "{name}: {headers}"
            ),
            None => assert!(headers.contains(&line), "{line}: {headers}"),
        }
    }
    assert_eq!(carried.len(), 9, "{lines}");
    assert_eq!(set(headers).len(), set(classic).len(), "{headers}");
    // The access log's line too (it::dataplane checks it is NGINX's).
    assert!(
        conf.contains("log_format upstreaminfo escape=none $ferrule_upstreaminfo;"),
        "{conf}"
    );
    assert!(!conf.contains("$ferrule_host {"), "{conf}");

    if which_nginx().is_none() || !Path::new(MODULE_SO).exists() {
        eprintln!("nginx or Ferrule's module not installed: skipping nginx -t");
        return;
    }
    // With an ssl-redirect host and without (an empty argument).
    let no_redirect = REWRITE.replace(
        "  annotations:\n",
        "  annotations:\n    nginx.ingress.kubernetes.io/ssl-redirect: \"false\"\n",
    );
    let plain = model(&format!("{SERVICES}---{no_redirect}"), Settings::default());
    for m in [&hostile, &plain] {
        let dir = tempfile::tempdir().unwrap();
        let pem = crate::tls::self_signed_default().unwrap();
        let renderer = Renderer::new(module_opts(dir.path()));
        let dp = crate::nginx::Dataplane::new(renderer, "nginx".into(), pem).unwrap();
        let (_, specs) = dp.files(m).unwrap();
        crate::nginx::files::write_all(dir.path(), &specs).unwrap();
        let out = (crate::nginx::process::Nginx::new("nginx", dir.path()).test()).await;
        assert!(out.is_ok(), "nginx -t failed: {out:?}");
    }
}

/// Where `make deps` installs Ferrule's module.
const MODULE_SO: &str = "/usr/lib/nginx/modules/ngx_http_ferrule_module.so";

/// [`opts`] with the Lua balancer's fast path and `ferrule_location` on.
fn module_opts(prefix: &Path) -> RenderOptions {
    let mut o = opts(&prefix.to_string_lossy());
    o.modules = (Balancer::Lua.modules().iter())
        .map(|m| format!("/usr/lib/nginx/modules/{m}"))
        .chain([MODULE_SO.to_owned()])
        .collect();
    o.fast_path = true;
    o.location_directive = true;
    o
}

/// In njs mode too, hostile values stay in their token, and NGINX (with the js
/// module) accepts the configuration with every backend protocol.
#[tokio::test]
async fn njs_configuration_is_quoted_and_passes_nginx_t() {
    let hostile = model_with(&world(&HOSTILE), Settings::default());
    let benign = model_with(&world(&BENIGN), Settings::default());
    let dir = tempfile::tempdir().unwrap();
    let h = render_all(&hostile, dir.path(), Balancer::Njs);
    let b = render_all(&benign, dir.path(), Balancer::Njs);
    assert_same_structure(&h, &b);
    let host_file = &h[&server_file("a.example.com")];
    assert!(
        host_file.contains("#${ferrule_dollar}http_x_pick_"),
        "{host_file}"
    );
    if which_nginx().is_none()
        || !Path::new("/usr/lib/nginx/modules/ngx_http_js_module.so").exists()
    {
        eprintln!("nginx or its js module not installed: skipping nginx -t");
        return;
    }
    let out = nginx_test(&hostile, dir.path(), Balancer::Njs).await;
    assert!(out.is_ok(), "nginx -t failed: {out:?}");
    let protocols = model(
        &format!("{}\n---\n{REWRITE}", tls_and_protocols()),
        Settings::default(),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = nginx_test(&protocols, dir.path(), Balancer::Njs).await;
    assert!(out.is_ok(), "nginx -t failed: {out:?}");
}

fn which_nginx() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("nginx"))
        .find(|p| p.exists())
}

/// Writes every file of `model` into `prefix` (as the controller does, with the
/// modules the controller loads) and runs `nginx -t`.
async fn nginx_test(
    model: &Model,
    prefix: &Path,
    balancer: Balancer,
) -> Result<(), crate::nginx::process::TestFailure> {
    nginx_test_with(model, prefix, balancer, false).await
}

/// `nginx -t` accepts `m`'s files with either balancer (skipped without NGINX).
async fn passes_nginx_t_with_both_balancers(m: &Model, ssl_passthrough: bool) {
    if which_nginx().is_none() {
        eprintln!("nginx not installed: skipping nginx -t");
        return;
    }
    for balancer in [Balancer::Lua, Balancer::Njs] {
        let dir = tempfile::tempdir().unwrap();
        let out = nginx_test_with(m, dir.path(), balancer, ssl_passthrough).await;
        assert!(out.is_ok(), "nginx -t failed with {balancer:?}: {out:?}");
    }
}

/// [`nginx_test`], with `--enable-ssl-passthrough` or not.
async fn nginx_test_with(
    model: &Model,
    prefix: &Path,
    balancer: Balancer,
    ssl_passthrough: bool,
) -> Result<(), crate::nginx::process::TestFailure> {
    let mut o = opts(&prefix.to_string_lossy());
    o.balancer = balancer;
    o.ssl_passthrough = ssl_passthrough;
    let streams = (!model.streams.is_empty() || ssl_passthrough).then_some(STREAM_MODULES);
    o.modules = (balancer.modules().iter())
        .chain(streams.into_iter().flatten())
        .map(|m| format!("/usr/lib/nginx/modules/{m}"))
        .collect();
    let pem = crate::tls::self_signed_default().unwrap();
    let dp = crate::nginx::Dataplane::new(Renderer::new(o), "nginx".into(), pem).unwrap();
    let (_, specs) = dp.files(model).unwrap();
    crate::nginx::files::write_all(prefix, &specs).unwrap();
    crate::nginx::process::Nginx::new("nginx", prefix)
        .test()
        .await
}

/// Every supported ConfigMap key set at once (the registry's examples, and exact
/// block values that are `map` keywords): the files say what each asks, and NGINX
/// accepts them with either balancer.
#[tokio::test]
async fn every_supported_configmap_key_renders_and_passes_nginx_t() {
    use ferrule_model::configmap::{KEYS, Status};
    let (ns, name) = CONFIGMAP;
    let mut data = serde_json::Map::new();
    for k in KEYS {
        let Status::Supported { example } = k.status else {
            continue;
        };
        // Snippets have their own tests; the global auth resolves its URL;
        // ssl-dh-param names a Secret of real DH parameters (it::protocols has it).
        let skip = example.is_empty()
            || k.name.starts_with("global-auth-")
            || k.name == "no-auth-locations"
            || k.name == "log-format-escape-none"
            || k.name == "ssl-dh-param";
        if !skip {
            data.insert(k.name.to_owned(), example.into());
        }
    }
    data.insert("block-user-agents".into(), "~*bot, default, include".into());
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": ns, "name": name},
        "data": data,
    });
    // add-headers and proxy-set-headers name this one.
    let headers = r#"
apiVersion: v1
kind: ConfigMap
metadata: { namespace: ingress-nginx, name: custom-headers }
data: { X-Frame-Options: DENY, X-Request-Start: "t=${msec}", X-Client: $remote_addr }
"#;
    let yaml = format!(
        "{}\n---\n{}\n---\n{headers}",
        tls_and_protocols(),
        serde_yaml::to_string(&cm).unwrap()
    );
    let m = model_with(&format!("{SERVICES}\n---\n{yaml}"), Settings::default());
    let problems: Vec<_> = m
        .problems
        .iter()
        .filter(|p| p.resource.kind == "ConfigMap")
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    let conf = Renderer::new(opts("/ferrule")).render(&m).unwrap()["conf/nginx.conf"]
        .text
        .clone();
    for want in [
        "worker_processes \"2\";",
        "worker_cpu_affinity \"auto\";",
        "error_log \"/ferrule/logs/error.log\" \"warn\";",
        "server_tokens \"on\";",
        "ssl_protocols \"TLSv1.3\";",
        "proxy_next_upstream \"error\" \"timeout\" \"http_502\" \"non_idempotent\";",
        "proxy_hide_header \"X-Powered-By\";",
        "gzip_types \"application/json\" \"text/css\";",
        "access_log off;",
        "\"~*bot\" 1;",
        "\"\\\\default\" 1;",
        "\"192.0.2.0/24\" 1;",
        "server_names_hash_max_size 65536;",
    ] {
        assert!(conf.contains(want), "{want} missing from\n{conf}");
    }
    let host = Renderer::new(opts("/ferrule")).render(&m).unwrap()[&server_file("a.example.com")]
        .text
        .clone();
    assert!(
        host.contains("if ($ferrule_blocked) { return 403; }"),
        "{host}"
    );
    assert!(!host.contains("http2"), "use-http2 false: {host}");
    for want in [
        "add_header \"X-Frame-Options\" \"DENY\" always;",
        "proxy_set_header \"X-Request-Start\" \"t=${msec}\";",
    ] {
        assert!(host.contains(want), "{want} missing from\n{host}");
    }
    assert!(
        conf.contains("proxy_hide_header \"X-Frame-Options\";"),
        "{conf}"
    );
    passes_nginx_t_with_both_balancers(&m, false).await;
}

#[test]
fn the_longest_dns_names_get_files_and_buckets_nginx_accepts() {
    // 253 bytes, the most a DNS name may have.
    let long = format!("{0}.{0}.{0}.{0}.example12", "a".repeat(60));
    assert_eq!(long.len(), 253);
    let wild = format!("*.{}", &long[2..]);
    let files: Vec<String> = [long.as_str(), wild.as_str(), "a.example.com"]
        .into_iter()
        .map(server_file)
        .collect();
    for f in &files {
        let name = f.rsplit('/').next().unwrap();
        // the temporary file of the write adds a dot and `.tmp-<pid>`
        assert!(name.len() + 16 <= 255, "{f} is too long for a file name");
        assert!(name.ends_with(".conf"), "{f} must match the include glob");
    }
    assert_eq!(files[2], "conf/servers/host_a.example.com.conf");
    assert_ne!(files[0], files[1]);
    // a short host spelled like a cut long one never shares its file
    let cut = files[0]
        .trim_start_matches("conf/servers/host+")
        .trim_end_matches(".conf");
    assert_ne!(server_file(&cut.replace('+', "-")), files[0]);

    assert_eq!(server_names_bucket(["a.example.com"].into_iter()), 128);
    assert_eq!(server_names_bucket(std::iter::empty()), 128);
    // NGINX: pointer + align(253 + 2) + end marker = 272, aligned to a cache line
    assert_eq!(server_names_bucket([long.as_str()].into_iter()), 320);
}

/// The C fast path's directives where the module needs them: its zone once, and
/// `ferrule_fast` after `balancer_by_lua_block` (which it falls back to) and before
/// `keepalive` (which must wrap it). Never for njs.
#[test]
fn the_fast_path_wraps_the_lua_balancer() {
    let m = model("", Settings::default());
    let main = |balancer, fast_path| {
        let rendered = Renderer::new(RenderOptions {
            balancer,
            fast_path,
            ..opts("/ferrule")
        })
        .render(&m)
        .unwrap();
        let text = rendered["conf/nginx.conf"].text.clone();
        text.lines()
            .map(str::trim)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let lines = main(Balancer::Lua, true);
    let at = |what: &str| lines.iter().position(|l| l.starts_with(what));
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("ferrule_fast_zone "))
            .count(),
        1
    );
    let (lua, fast, keepalive) = (
        at("balancer_by_lua_block").unwrap(),
        at("ferrule_fast;").unwrap(),
        at("keepalive ").unwrap(),
    );
    assert!(lua < fast && fast < keepalive, "{lua} {fast} {keepalive}");
    for (balancer, fast_path) in [(Balancer::Lua, false), (Balancer::Njs, true)] {
        assert!(
            !main(balancer, fast_path)
                .iter()
                .any(|l| l.starts_with("ferrule_fast")),
            "{balancer:?} {fast_path}"
        );
    }
}

/// One host with `n` Exact paths ending in `/` (each needs a twin for its bare path,
/// routed as the model routes it) and `n` regex paths, from two Ingresses.
fn exact_and_regex_paths(n: usize) -> Model {
    let rule = |paths: String| {
        format!("  rules:\n  - host: many.example.com\n    http:\n      paths:\n{paths}")
    };
    let path = |p: String, kind: &str| {
        format!(
            "      - {{ path: \"{p}\", pathType: {kind}, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}\n"
        )
    };
    let exact: String = (0..n).map(|i| path(format!("/e{i}/"), "Exact")).collect();
    let regex: String = (0..n)
        .map(|i| path(format!("/r{i}/[a-z]+/(v1|v2)/.*"), "ImplementationSpecific"))
        .collect();
    model(
        &format!(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{ name: exact, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }}
spec:
{}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: regex
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:01Z"
  annotations: {{ nginx.ingress.kubernetes.io/use-regex: "true" }}
spec:
{}
"#,
            rule(exact),
            rule(regex)
        ),
        Settings::default(),
    )
}

/// A user's Ingress of a few hundred paths must not make every render (every reload
/// of every tenant) take minutes: naming the bare path of each Exact `/foo/` once
/// looked it up against every regex path of the host, each compiled again. 8 times
/// the paths may cost 8 times as much (24 allows for noise); a quadratic render costs
/// 64 times as much (fastest of several runs each).
#[test]
fn the_render_is_linear_in_the_paths_of_a_host() {
    let renderer = Renderer::new(opts("/ferrule"));
    // Thread CPU time (growth::best): a wall clock counts other tests' turns.
    let fastest = |m: &Model, runs: usize| {
        growth::best(runs, || {
            std::hint::black_box(renderer.render(m).unwrap());
        })
    };
    let (small, large) = (exact_and_regex_paths(25), exact_and_regex_paths(200));
    let twins = |m: &Model| {
        renderer.render(m).unwrap()["conf/servers/host_many.example.com.conf"]
            .text
            .matches("location = \"/e")
            .count()
    };
    // each Exact `/eN/` and its twin `/eN`
    assert_eq!(twins(&large), 400);
    fastest(&small, 3);
    let (base, took) = (fastest(&small, 10), fastest(&large, 5));
    let ratio = took.as_secs_f64() / base.as_secs_f64();
    assert!(
        ratio < 24.0,
        "400 paths took {took:?}, 50 paths {base:?}: {ratio:.0} times as long"
    );
}

#[test]
fn logs_go_to_the_prefix_or_to_stdio() {
    let m = model("", Settings::default());
    let main = |log_to_stdio| {
        let rendered = Renderer::new(RenderOptions {
            log_to_stdio,
            ..opts("/ferrule")
        })
        .render(&m)
        .unwrap();
        rendered["conf/nginx.conf"].text.clone()
    };
    let files = main(false);
    assert!(
        files.contains(r#"error_log "/ferrule/logs/error.log" "notice";"#),
        "{files}"
    );
    assert!(
        files.contains(
            r#"access_log "/ferrule/logs/access.log" upstreaminfo "buffer=32k" "flush=1s";"#
        ),
        "{files}"
    );
    let stdio = main(true);
    assert!(stdio.contains(r#"error_log "stderr" "notice";"#), "{stdio}");
    assert!(
        stdio.contains(r#"access_log "/dev/stdout" upstreaminfo "buffer=32k" "flush=1s";"#),
        "{stdio}"
    );
    assert!(!stdio.contains("/ferrule/logs/"), "{stdio}");
}

/// Request metrics: the C module's directives where it counts (its zone with the
/// buckets, each location's labels through the emitter), a Lua log phase where it
/// does not (joined with the EWMA one), nothing with njs or metrics off.
#[test]
fn request_metrics_are_rendered_for_their_source() {
    let m = model(
        &format!(
            "{SERVICES}---\n{}",
            r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: web, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: web.example.com
    http:
      paths:
      - { path: /api, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
"#
        ),
        Settings::default(),
    );
    let metrics = |module| super::MetricsRender {
        time_buckets: vec![0.005, 0.5, 10.0],
        length_buckets: vec![10.0, 100.0],
        size_buckets: vec![1000.0],
        zone_mib: 32,
        module,
    };
    let render = |balancer, fast_path, metrics| {
        let rendered = Renderer::new(RenderOptions {
            balancer,
            fast_path,
            metrics,
            ..opts("/ferrule")
        })
        .render(&m)
        .unwrap();
        (
            rendered["conf/nginx.conf"].text.clone(),
            rendered["conf/servers/host_web.example.com.conf"]
                .text
                .clone(),
            rendered["conf/servers/default.conf"].text.clone(),
        )
    };
    let (main, server, default) = render(Balancer::Lua, true, Some(metrics(true)));
    assert!(
        main.contains(r#"ferrule_metrics_zone "32m" "0.005,0.5,10" "10,100" "1000";"#),
        "{main}"
    );
    assert!(main.contains(r#"metrics = { source = "module", time = "0.005,0.5,10", length = "10,100", size = "1000" },"#), "{main}");
    assert!(
        server.contains(r#"ferrule_metrics "demo" "web" "app" "/api" "web.example.com";"#),
        "{server}"
    );
    assert!(!server.contains("ferrule.metrics"), "{server}");
    // a request with a body runs in the `if` block of the rewrite phase, which
    // inherits the location's labels (the module's merge): none named there
    assert!(
        server.contains(r#"if ($ferrule_request_body) { rewrite_by_lua_block { require("ferrule.balancer").rewrite() } }"#),
        "{server}"
    );
    assert!(!server.contains("rewrite() } ferrule_metrics"), "{server}");
    // the default server's requests have no host
    assert!(
        default.contains(r#"ferrule_metrics "" "" "" "/" "";"#),
        "{default}"
    );

    // without the module (or one without the metrics' directives): Lua counts
    for (fast_path, module) in [(false, false), (true, false)] {
        let (main, server, _) = render(Balancer::Lua, fast_path, Some(metrics(module)));
        assert!(
            main.contains("lua_shared_dict ferrule_metrics \"32m\";"),
            "{main}"
        );
        assert!(!main.contains("ferrule_metrics_zone"), "{main}");
        assert!(
            server.contains(r#"log_by_lua_block { require("ferrule.metrics").log("demo\9web\9app\9/api\9web.example.com") }"#),
            "{server}"
        );
        assert!(!server.contains("ferrule_metrics \""), "{server}");
    }

    // njs with the module: its zone and labels, its dump on the API socket behind
    // njs's token check; no Lua anywhere
    let (main, server, default) = render(Balancer::Njs, false, Some(metrics(true)));
    assert!(
        main.contains(r#"ferrule_metrics_zone "32m" "0.005,0.5,10" "10,100" "1000";"#),
        "{main}"
    );
    let api = &main[main.find("# Configuration API").expect("the API server")..];
    assert!(
        api.contains(
            "location = /configuration/metrics {\n            \
             auth_request /ferrule/authorize;\n            ferrule_metrics_dump;\n        }"
        ),
        "{api}"
    );
    assert!(
        api.contains(
            "location = /ferrule/authorize {\n            internal;\n            \
             js_content ferrule.authorize;\n        }"
        ),
        "{api}"
    );
    assert!(
        !main.contains("lua") && !main.contains("metrics ="),
        "{main}"
    );
    assert!(
        server.contains(r#"ferrule_metrics "demo" "web" "app" "/api" "web.example.com";"#),
        "{server}"
    );
    // the 503 without a peer is answered in an `if` block, a location of its own
    // that inherits the labels
    assert!(
        server.contains(r#"if ($ferrule_peer = "") { return 503; }"#),
        "{server}"
    );
    assert!(!server.contains("ferrule.metrics"), "{server}");
    assert!(
        default.contains(r#"ferrule_metrics "" "" "" "/" "";"#),
        "{default}"
    );

    // off, or njs without the module (or one without the dump): nothing
    for (balancer, metrics) in [(Balancer::Lua, None), (Balancer::Njs, Some(metrics(false)))] {
        let (main, server, _) = render(balancer, true, metrics);
        assert!(
            !main.contains("ferrule_metrics") && !main.contains("metrics ="),
            "{main}"
        );
        assert!(
            !server.contains("ferrule_metrics") && !server.contains("ferrule.metrics"),
            "{server}"
        );
        assert!(!main.contains("/configuration/metrics"), "{main}");
    }
}

/// TCP and UDP services: one stream server each, the peer from njs, the PROXY
/// protocol where asked; NGINX accepts it with either balancer.
#[tokio::test]
async fn tcp_and_udp_services_render_a_stream_block() {
    let yaml = r#"
apiVersion: v1
kind: Service
metadata: { name: dns, namespace: demo }
spec:
  ports:
  - { name: dns-tcp, port: 53, targetPort: 5353 }
  - { name: dns, port: 53, protocol: UDP, targetPort: 5353 }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: dns-1, namespace: demo, labels: { kubernetes.io/service-name: dns } }
addressType: IPv4
ports: [{ name: dns-tcp, port: 5353 }, { name: dns, port: 5353, protocol: UDP }]
endpoints: [{ addresses: ["10.0.0.53"] }]
---
apiVersion: v1
kind: ConfigMap
metadata: { name: tcp-services, namespace: ingress-nginx }
data: { "9000": "demo/app:80:PROXY:PROXY", "5353": "demo/dns:53" }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: udp-services, namespace: ingress-nginx }
data: { "53": "demo/dns:53" }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: ingress-nginx }
data:
  proxy-real-ip-cidr: 192.0.2.0/24
  use-forwarded-headers: "true"
  proxy-stream-timeout: 1h
  proxy-stream-responses: "2"
  stream-snippet: |
    server { listen 127.0.0.1:9999; return "administrator's"; }
"#;
    let settings = Settings {
        tcp_services: Some("ingress-nginx/tcp-services".to_owned()),
        udp_services: Some("ingress-nginx/udp-services".to_owned()),
        ..Settings::default()
    };
    let m = model(yaml, settings);
    let conf = Renderer::new(opts("/ferrule")).render(&m).unwrap()["conf/nginx.conf"]
        .text
        .clone();
    let stream = &conf[conf.find("\nstream {").expect("a stream block")..];
    insta::assert_snapshot!(stream);
    passes_nginx_t_with_both_balancers(&m, false).await;
}

/// An Ingress whose hosts' TLS passes through (`--enable-ssl-passthrough`).
const PASSTHROUGH: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: pass
  namespace: demo
  annotations: { nginx.ingress.kubernetes.io/ssl-passthrough: "true" }
spec:
  rules:
  - host: "*.pass.example"
    http: { paths: [{ path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }] }
"#;

/// With Ferrule's stream module, TCP/UDP services and passthrough hosts proxy to an
/// upstream that reads the peers files, and NGINX with the module accepts it with
/// either balancer.
#[tokio::test]
async fn the_stream_module_gives_connections_every_endpoint() {
    let yaml = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: tcp-services, namespace: ingress-nginx }
data: { "9000": "demo/app:80" }
"#;
    let settings = Settings {
        tcp_services: Some("ingress-nginx/tcp-services".to_owned()),
        ssl_passthrough: true,
        ..Settings::default()
    };
    let m = model(&format!("{SERVICES}---{PASSTHROUGH}---{yaml}"), settings);
    let stream_so = "/usr/lib/nginx/modules/ngx_stream_ferrule_module.so";
    for balancer in [Balancer::Lua, Balancer::Njs] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().to_path_buf();
        let mut o = opts(&prefix.to_string_lossy());
        o.balancer = balancer;
        o.ssl_passthrough = true;
        o.stream_module = true;
        o.modules = (balancer.modules().iter())
            .chain(STREAM_MODULES)
            .map(|m| format!("/usr/lib/nginx/modules/{m}"))
            .chain([stream_so.to_owned()])
            .collect();
        let peers = format!("{}/run/ferrule-stream", prefix.display());
        let rendered = Renderer::new(o.clone()).render(&m).unwrap();
        let conf = &rendered["conf/nginx.conf"].text;
        for want in [
            format!("ferrule_stream_peers \"{peers}\" $ferrule_backend;"),
            format!("ferrule_stream_peers \"{peers}\" $ferrule_passthrough_backend;"),
            "proxy_pass ferrule_stream;".to_owned(),
            "proxy_pass ferrule_passthrough;".to_owned(),
            "proxy_next_upstream_tries \"3\";".to_owned(),
        ] {
            assert!(conf.contains(&want), "{want} missing from\n{conf}");
        }
        assert!(!conf.contains("proxy_pass $ferrule_stream_peer"), "{conf}");

        if which_nginx().is_none() || !Path::new(stream_so).exists() {
            eprintln!("nginx or Ferrule's stream module not installed: skipping nginx -t");
            return;
        }
        let pem = crate::tls::self_signed_default().unwrap();
        let dp = crate::nginx::Dataplane::new(Renderer::new(o), "nginx".into(), pem).unwrap();
        let (_, specs) = dp.files(&m).unwrap();
        crate::nginx::files::write_all(&prefix, &specs).unwrap();
        let out = (crate::nginx::process::Nginx::new("nginx", &prefix).test()).await;
        assert!(out.is_ok(), "nginx -t failed with {balancer:?}: {out:?}");
    }
}

/// `--enable-ssl-passthrough`: the stream block takes the HTTPS port and routes by
/// SNI, the HTTPS servers listen behind it with the PROXY protocol, and the client
/// address comes from it; NGINX accepts it with either balancer.
#[tokio::test]
async fn the_tls_router_takes_the_https_port() {
    let yaml = PASSTHROUGH;
    let settings = Settings {
        ssl_passthrough: true,
        ..Settings::default()
    };
    let m = model(yaml, settings);
    let mut o = opts("/ferrule");
    o.ssl_passthrough = true;
    let rendered = Renderer::new(o).render(&m).unwrap();
    let conf = &rendered["conf/nginx.conf"].text;
    let stream = &conf[conf.find("\nstream {").expect("a stream block")..];
    insta::assert_snapshot!(stream);
    for want in [
        "    set_real_ip_from unix:;\n    real_ip_header proxy_protocol;",
        "map $https $ferrule_server_port { on 443; default $server_port; }",
    ] {
        assert!(conf.contains(want), "{want} missing from\n{conf}");
    }
    let host = &rendered[&server_file("*.pass.example")].text;
    assert!(
        host.contains("listen \"unix:/ferrule/run/https.sock\" ssl http2 proxy_protocol;"),
        "{host}"
    );
    passes_nginx_t_with_both_balancers(&m, true).await;
}

/// Ingress `demo/NAME` of one Prefix `path` on `host` to port 80 of `service`, with
/// `annotations` (YAML flow-mapping entries).
fn one_path_ingress(
    name: &str,
    host: &str,
    path: &str,
    service: &str,
    annotations: &str,
) -> String {
    format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {{ {annotations} }}
spec:
  rules:
  - host: {host}
    http:
      paths:
      - {{ path: {path}, pathType: Prefix, backend: {{ service: {{ name: {service}, port: {{ number: 80 }} }} }} }}
"#
    )
}

/// Ferrule's ConfigMap ([`CONFIGMAP`]) with `data` (YAML flow-mapping entries).
fn ferrule_configmap(data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ namespace: {}, name: {} }}\n\
         data: {{ {data} }}\n",
        CONFIGMAP.0, CONFIGMAP.1
    )
}

/// A thread pool (`aio threads`) makes every worker multi-threaded, which costs each
/// system call: it starts only where answers are buffered (the ConfigMap's
/// `proxy-buffering` for all, else the locations whose annotation asks), and nowhere
/// without buffering.
#[tokio::test]
async fn a_thread_pool_only_where_answers_are_buffered() {
    let buffering = r#"nginx.ingress.kubernetes.io/proxy-buffering: "on""#;
    // (the ConfigMap's value, the annotations) -> pools in http, in the server file
    // (a Prefix path has two locations)
    let cases = [
        ("off", "", 0, 0),
        ("off", buffering, 0, 2),
        ("on", "", 1, 0),
        ("on", buffering, 1, 0),
    ];
    for (global, annotations, in_http, in_server) in cases {
        let ingress = one_path_ingress("web", "a.example.com", "/buffered", "app", annotations);
        let configmap = ferrule_configmap(&format!("proxy-buffering: \"{global}\""));
        let yaml = format!("{configmap}\n---\n{ingress}");
        let m = model(&yaml, Settings::default());
        let files = Renderer::new(opts("/ferrule")).render(&m).unwrap();
        let conf = &files["conf/nginx.conf"].text;
        let host = &files[&server_file("a.example.com")].text;
        let case = format!("ConfigMap {global}, annotations {annotations:?}");
        assert_eq!(
            conf.matches("aio threads;").count(),
            in_http,
            "{case}:\n{conf}"
        );
        assert_eq!(
            host.matches("aio threads;").count(),
            in_server,
            "{case}:\n{host}"
        );
        assert_eq!(conf.matches("aio_write").count(), 1, "{case}");
        if in_http + in_server > 0 {
            passes_nginx_t_with_both_balancers(&m, false).await;
        }
    }
}

/// The C module writes the access log's line only for the default format with
/// NGINX's default escaping (it writes exactly that line); another format, JSON or
/// no escaping, or no module, and NGINX's `log_format` writes it.
#[test]
fn the_module_writes_only_the_default_access_log_line() {
    let cases = [
        ("", true),
        (r#"log-format-escape-json: "true""#, false),
        (r#"log-format-escape-none: "true""#, false),
        (r#"log-format-upstream: "$remote_addr $status""#, false),
    ];
    let module_line = "\n    log_format upstreaminfo escape=none $ferrule_upstreaminfo;\n";
    let module_var =
        "\n    ferrule_upstreaminfo $ferrule_upstreaminfo $ferrule_backend $ferrule_request_id;\n";
    for (data, by_module) in cases {
        let yaml = format!(
            "{}\n---\n{}",
            ferrule_configmap(data),
            one_path_ingress("web", "a.example.com", "/", "app", "")
        );
        let m = model(&yaml, Settings::default());
        let dir = tempfile::tempdir().unwrap();
        let files = Renderer::new(module_opts(dir.path())).render(&m).unwrap();
        let conf = &files["conf/nginx.conf"].text;
        assert_eq!(conf.contains(module_line), by_module, "{data}:\n{conf}");
        assert_eq!(conf.contains(module_var), by_module, "{data}:\n{conf}");
        assert_eq!(conf.matches("log_format upstreaminfo").count(), 1, "{data}");
        let files = Renderer::new(opts("/ferrule")).render(&m).unwrap();
        let conf = &files["conf/nginx.conf"].text;
        assert!(!conf.contains("ferrule_upstreaminfo"), "{data}:\n{conf}");
    }
}

/// With `enable-ocsp`, `ferrule.ocsp` is told whether a responder may be local
/// (`--allow-local-endpoints`, as endpoints) and which nameservers look its name up;
/// without the key, nothing.
#[test]
fn ocsp_options_carry_allow_local_endpoints_and_the_nameservers() {
    let yaml = |on: &str| {
        format!(
            "{}\n---\n{}",
            ferrule_configmap(&format!("enable-ocsp: \"{on}\"")),
            one_path_ingress("web", "a.example.com", "/", "app", "")
        )
    };
    let on = model(&yaml("true"), Settings::default());
    let cases: [(bool, &[&str], &str); 3] = [
        (
            false,
            &["10.96.0.10"],
            r#"ocsp = { allow_local = false, resolvers = {"10.96.0.10"} },"#,
        ),
        (
            true,
            &["10.96.0.10", "[fd00::a]"],
            r#"ocsp = { allow_local = true, resolvers = {"10.96.0.10", "[fd00::a]"} },"#,
        ),
        (
            false,
            &[],
            r#"ocsp = { allow_local = false, resolvers = {} },"#,
        ),
    ];
    for (allow_local_endpoints, resolvers, want) in cases {
        let files = Renderer::new(RenderOptions {
            allow_local_endpoints,
            resolvers: resolvers.iter().map(|r| r.to_string()).collect(),
            ..opts("/ferrule")
        })
        .render(&on)
        .unwrap();
        let conf = &files["conf/nginx.conf"].text;
        assert_eq!(conf.matches(want).count(), 1, "{want}:\n{conf}");
    }
    let off = model(&yaml("false"), Settings::default());
    let files = Renderer::new(opts("/ferrule")).render(&off).unwrap();
    assert!(!files["conf/nginx.conf"].text.contains("ocsp ="));
}
