//! The `ferrule model`, `diff`, `render` and `validate` commands over manifests
//! directories, run as a user would: the built binary on temporary directories; and
//! the `run` flags refused before anything starts.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_ferrule");

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../model/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The manifests of a small cluster, one YAML document each.
fn documents() -> Vec<String> {
    let mut docs = vec![
        r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: ferrule
spec:
  controller: ferrule.dev/ingress-controller
"#
        .to_owned(),
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: web
  creationTimestamp: "2024-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/proxy-read-timeout: "30"
spec:
  ingressClassName: ferrule
  tls:
    - hosts: [a.example.com]
      secretName: a-tls
  rules:
    - host: a.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: { name: front, port: { name: http } }
          - path: /api
            pathType: Prefix
            backend:
              service: { name: api, port: { number: 8080 } }
"#
        .to_owned(),
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: blog
  namespace: web
spec:
  ingressClassName: ferrule
  rules:
    - host: blog.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: { name: front, port: { number: 80 } }
"#
        .to_owned(),
    ];
    for (svc, port, target, addrs) in [
        ("front", 80, 8080, ["10.0.0.1", "10.0.0.2"]),
        ("api", 8080, 9000, ["10.0.1.1", "fd00::1"]),
    ] {
        docs.push(format!(
            r#"apiVersion: v1
kind: Service
metadata: {{ name: {svc}, namespace: web }}
spec:
  ports:
    - {{ name: http, port: {port}, targetPort: {target} }}
"#
        ));
        for (k, addr) in addrs.iter().enumerate() {
            let ty = if addr.contains(':') { "IPv6" } else { "IPv4" };
            docs.push(format!(
                r#"apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {svc}-{k}
  namespace: web
  labels: {{ kubernetes.io/service-name: {svc} }}
addressType: {ty}
ports: [{{ name: http, port: {target} }}]
endpoints:
  - addresses: ["{addr}"]
    conditions: {{ ready: true }}
"#
            ));
        }
    }
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": { "name": "a-tls", "namespace": "web" },
        "stringData": { "tls.crt": fixture("a.crt"), "tls.key": fixture("a.key") },
    });
    docs.push(serde_yaml::to_string(&secret).unwrap());
    docs
}

fn write(dir: &Path, name: &str, docs: &[String]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, docs.join("---\n")).unwrap();
}

/// The plain layout: one file of all documents.
fn plain(docs: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cluster.yaml", docs);
    dir
}

fn ferrule(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrule")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ferrule render` of `manifests` with `flags` into a new directory: (it, the run).
fn render_into(manifests: &std::path::Path, flags: &[&str]) -> (tempfile::TempDir, Output) {
    let out = tempfile::tempdir().unwrap();
    let mut args = vec![
        "render",
        "--manifests",
        manifests.to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    let o = ferrule(&args);
    (out, o)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn hash(dir: &Path) -> String {
    let o = ferrule(&["model", "--manifests", dir.to_str().unwrap(), "--hash"]);
    assert!(
        o.status.success(),
        "ferrule model --hash failed: {}",
        stderr(&o)
    );
    let h = stdout(&o).trim().to_owned();
    assert_eq!(h.len(), 64, "not a blake3 hex hash: {h:?}");
    h
}

fn diff(old: &Path, new: &Path) -> Vec<String> {
    let o = ferrule(&["diff", old.to_str().unwrap(), new.to_str().unwrap()]);
    assert!(o.status.success(), "ferrule diff failed: {}", stderr(&o));
    stdout(&o).lines().map(str::to_owned).collect()
}

#[test]
fn model_prints_the_model_as_json() {
    let dir = plain(&documents());
    let o = ferrule(&["model", "--manifests", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let model: Value = serde_json::from_slice(&o.stdout).expect("JSON model");
    let hosts: Vec<&str> = model["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["a.example.com", "blog.example.com"]);
    assert_eq!(
        model["servers"][0]["tls"]["certificate"], "web/a-tls",
        "{}",
        model["problems"]
    );
    let eps = &model["backends"]["web_api_8080"]["endpoints"];
    assert_eq!(
        eps,
        &json!([{ "address": "10.0.1.1", "port": 9000 }, { "address": "fd00::1", "port": 9000 }])
    );
    assert_eq!(model["problems"], json!([]));
}

#[test]
fn shuffled_and_resplit_copy_has_the_same_hash() {
    let docs = documents();
    let original = plain(&docs);

    // The same objects: order reversed, spread over renamed files in subdirectories,
    // some of them wrapped in a `List`, one as JSON, with comments and empty documents.
    let copy = tempfile::tempdir().unwrap();
    let mut rev: Vec<String> = docs.iter().rev().cloned().collect();
    let as_value = |d: &String| serde_yaml::from_str::<Value>(d).unwrap();
    let listed: Vec<Value> = rev.drain(0..3).map(|d| as_value(&d)).collect();
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": listed });
    write(
        copy.path(),
        "z-list.yml",
        &[format!(
            "# objects as kubectl get -o yaml prints them\n{}",
            serde_yaml::to_string(&list).unwrap()
        )],
    );
    let json_doc = rev.remove(0);
    std::fs::write(
        copy.path().join("one.json"),
        serde_json::to_string_pretty(&as_value(&json_doc)).unwrap(),
    )
    .unwrap();
    let (first, second) = rev.split_at(rev.len() / 2);
    let mut first = first.to_vec();
    first.push(String::new()); // a trailing empty document
    write(copy.path(), "nested/dir/b.yaml", &first);
    write(copy.path(), "a.yaml", second);
    // files of other types are ignored
    std::fs::write(copy.path().join("README.md"), "not a manifest: {").unwrap();

    assert_eq!(hash(original.path()), hash(copy.path()));
    assert_eq!(diff(original.path(), copy.path()), ["unchanged"]);
}

#[test]
fn endpoint_change_is_dynamic() {
    let docs = documents();
    let old = plain(&docs);
    let changed: Vec<String> = docs
        .iter()
        .map(|d| d.replace(r#"["10.0.0.2"]"#, r#"["10.0.0.3"]"#))
        .collect();
    assert_ne!(changed, docs);
    let new = plain(&changed);
    assert_ne!(hash(old.path()), hash(new.path()));
    let out = diff(old.path(), new.path());
    assert_eq!(out[0], "dynamic", "{out:?}");
    assert_eq!(out[1..], ["backend web_front_80", "backend web_front_http"]);
}

#[test]
fn added_path_is_reload() {
    let docs = documents();
    let old = plain(&docs);
    let changed: Vec<String> = docs
        .iter()
        .map(|d| {
            d.replace(
                "          - path: /api\n",
                "          - path: /v2\n            pathType: Exact\n            backend:\n              service: { name: api, port: { number: 8080 } }\n          - path: /api\n",
            )
        })
        .collect();
    let new = plain(&changed);
    assert_ne!(hash(old.path()), hash(new.path()));
    let out = diff(old.path(), new.path());
    assert_eq!(out, ["reload", "server-changed:a.example.com"]);
}

#[test]
fn unknown_kind_is_a_warning() {
    let mut docs = documents();
    docs.push(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: front, namespace: web }\n"
            .to_owned(),
    );
    let with_unknown = plain(&docs);
    let o = ferrule(&[
        "model",
        "--manifests",
        with_unknown.path().to_str().unwrap(),
        "--hash",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("WARN"), "{err}");
    assert!(err.contains("Deployment"), "{err}");
    assert!(err.contains("cluster.yaml"), "{err}");
    // and the model is the one without it
    assert_eq!(stdout(&o).trim(), hash(plain(&documents()).path()));
}

#[test]
fn invalid_yaml_names_the_file_and_the_document() {
    let mut docs = documents();
    docs.insert(2, "kind: Service\nmetadata: { name: broken\n".to_owned());
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", &documents());
    write(dir.path(), "sub/bad.yaml", &docs);
    let o = ferrule(&["model", "--manifests", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("sub/bad.yaml"), "{err}");
    assert!(err.contains("document 2"), "{err}");

    // a document that is valid YAML but not a valid object of its kind
    let dir = tempfile::tempdir().unwrap();
    let mut docs = documents();
    docs.push("apiVersion: v1\nkind: Service\nmetadata: { name: x }\nspec: { ports: 7 }\n".into());
    write(dir.path(), "objects.yaml", &docs);
    let o = ferrule(&["model", "--manifests", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    let index = format!("document {}", docs.len() - 1);
    assert!(
        err.contains("objects.yaml") && err.contains(&index),
        "{err}"
    );
    assert!(err.contains("invalid Service"), "{err}");

    // a document without a kind
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "nokind.yaml",
        &["metadata: { name: x }\n".to_owned()],
    );
    let o = ferrule(&[
        "diff",
        dir.path().to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("nokind.yaml") && err.contains("document 0"),
        "{err}"
    );
}

/// `--balancer` decides what `render` writes and what `validate` tests: a snippet
/// using a variable of the njs balancer's passes with njs and is rejected with Lua
/// (which defines no such variable), naming the Ingress. (A Lua directive in a
/// snippet is refused by the model with either balancer: it could read the
/// controller's files.)
#[test]
fn balancer_flag_selects_what_render_writes_and_validate_tests() {
    let mut docs = documents();
    docs.push(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: luaish
  namespace: web
  annotations:
    nginx.ingress.kubernetes.io/configuration-snippet: |
      add_header X-Peer $ferrule_peer;
spec:
  ingressClassName: ferrule
  rules:
    - host: lua.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: { name: front, port: { number: 80 } }
"#
        .to_owned(),
    );
    let dir = plain(&docs);
    let manifests = dir.path().to_str().unwrap();
    let validate = |balancer: &str| {
        ferrule(&[
            "validate",
            "--manifests",
            manifests,
            "--allow-snippet-annotations",
            "--balancer",
            balancer,
        ])
    };
    let o = validate("njs");
    assert!(o.status.success(), "njs: {}{}", stdout(&o), stderr(&o));
    let o = validate("lua");
    assert!(!o.status.success(), "Lua accepted an njs variable");
    let out = stdout(&o);
    assert!(
        out.contains("Ingress web/luaish: rejected") && out.contains("ferrule_peer"),
        "{out}"
    );
    assert!(
        !out.contains("shop: rejected") && !out.contains("blog: rejected"),
        "{out}"
    );

    let plain = plain(&documents());
    for balancer in ["lua", "njs"] {
        let (out, o) = render_into(plain.path(), &["--balancer", balancer]);
        assert!(o.status.success(), "{balancer}: {}", stderr(&o));
        let conf = std::fs::read_to_string(out.path().join("conf/nginx.conf")).unwrap();
        let token = out.path().join("conf/balancer.token.json");
        let njs = balancer == "njs";
        assert_eq!(conf.contains("js_content ferrule.api;"), njs, "{conf}");
        assert_eq!(conf.contains("content_by_lua_block"), !njs, "{conf}");
        // Installed with Lua too: njs picks TCP/UDP services' peers.
        assert!(out.path().join("njs/stream.js").exists());
        assert!(out.path().join("njs/ferrule/balance.js").exists());
        assert_eq!(out.path().join("lua/ferrule/balancer.lua").exists(), !njs);
        assert_eq!(token.exists(), njs);
        if njs {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(token).unwrap()).unwrap();
            assert!(v["token"].as_str().is_some_and(|t| t.len() >= 32), "{v}");
        }
    }
}

#[test]
fn configmap_without_namespace_is_named_by_the_namespace_read() {
    // Read as default/ferrule-cm; the one in kube-system must not be taken.
    let cm = |ns: &str, tenant: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: ferrule-cm, namespace: {ns} }}\n\
             data:\n  http-snippet: \"map $http_x_tenant $tenant {{ default {tenant}; }}\"\n"
        )
    };
    let mut docs = documents();
    docs.push(cm("default", "from-default"));
    docs.push(cm("kube-system", "from-kube-system"));
    let dir = plain(&docs);
    for flag in ["ferrule-cm", "default/ferrule-cm"] {
        let (out, o) = render_into(dir.path(), &["--configmap", flag]);
        assert!(o.status.success(), "--configmap {flag}: {}", stderr(&o));
        let main = std::fs::read_to_string(out.path().join("conf/nginx.conf")).unwrap();
        let marked: Vec<&str> = main
            .lines()
            .skip_while(|l| !l.contains("ferrule:begin \"ConfigMap/"))
            .take(2)
            .map(str::trim)
            .collect();
        assert_eq!(
            marked,
            [
                "# ferrule:begin \"ConfigMap/default/ferrule-cm\"",
                "map $http_x_tenant $tenant { default from-default; }"
            ],
            "--configmap {flag}"
        );
    }
}

/// An Ingress `name` in `web` for `host` with `annotations` (full keys).
fn annotated(name: &str, host: &str, annotations: &[(&str, &str)]) -> String {
    let annotations: String = annotations
        .iter()
        .map(|(k, v)| format!("    {k}: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: web
  creationTimestamp: "2024-01-01T00:00:00Z"
  annotations:
{annotations}spec:
  ingressClassName: ferrule
  rules:
    - host: {host}
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: {{ name: front, port: {{ number: 80 }} }}
"#
    )
}

/// The migration report an ingress-nginx user runs before switching: each
/// annotation supported, ignored with a warning, or rejecting its Ingress.
#[test]
fn validate_reports_every_annotation_and_rejects_unimplemented_restrictions() {
    let mut docs = documents();
    docs.push(annotated(
        "guarded",
        "guarded.example.com",
        &[
            ("nginx.ingress.kubernetes.io/global-rate-limit", "10"),
            ("nginx.ingress.kubernetes.io/ssl-redirect", "false"),
        ],
    ));
    docs.push(annotated(
        "traced",
        "traced.example.com",
        &[("nginx.ingress.kubernetes.io/enable-opentelemetry", "true")],
    ));
    let dir = plain(&docs);
    let o = ferrule(&["validate", "--manifests", dir.path().to_str().unwrap()]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    for line in [
        "Ingress web/guarded: annotations:",
        "  nginx.ingress.kubernetes.io/ssl-redirect: supported",
        "  nginx.ingress.kubernetes.io/global-rate-limit: rejects the Ingress: annotation nginx.ingress.kubernetes.io/global-rate-limit (global rate limits) restricts access",
        "  nginx.ingress.kubernetes.io/enable-opentelemetry: ignored with a warning: annotation nginx.ingress.kubernetes.io/enable-opentelemetry (tracing) is not implemented by Ferrule and is ignored",
        "Ingress web/guarded: error: annotation nginx.ingress.kubernetes.io/global-rate-limit",
        "Ingress web/traced: warning: annotation nginx.ingress.kubernetes.io/enable-opentelemetry",
        "  nginx.ingress.kubernetes.io/proxy-read-timeout: supported",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }

    // The warning alone does not fail validation.
    let mut docs = documents();
    docs.push(annotated(
        "traced",
        "traced.example.com",
        &[("nginx.ingress.kubernetes.io/enable-opentelemetry", "true")],
    ));
    let dir = plain(&docs);
    let o = ferrule(&["validate", "--manifests", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// Issue 35, N1: with snippets allowed, `ferrule validate` refuses each hostile
/// snippet, naming its Ingress and key, exits non-zero, and passes the benign one.
#[test]
fn validate_names_each_refused_snippet() {
    let lua = "header_filter_by_lua_block { io.open('/var/run/secrets/token'); }";
    let mut docs = documents();
    docs.push(annotated(
        "dollar-brace",
        "dollar-brace.example.com",
        &[(
            "nginx.ingress.kubernetes.io/configuration-snippet",
            &format!("default_type ${{ ;\n{lua}"),
        )],
    ));
    docs.push(annotated(
        "vertical-tab",
        "vertical-tab.example.com",
        &[(
            "nginx.ingress.kubernetes.io/server-snippet",
            &format!("add_header A b;a\x0b# ;\n{lua}"),
        )],
    ));
    docs.push(annotated(
        "status-port",
        "status-port.example.com",
        &[(
            "nginx.ingress.kubernetes.io/server-snippet",
            "location /s { proxy_set_header X-Forwarded-For \"\"; \
             proxy_pass http://127.0.0.1:10254/status/resources; }",
        )],
    ));
    docs.push(annotated(
        "benign",
        "benign.example.com",
        &[(
            "nginx.ingress.kubernetes.io/configuration-snippet",
            "more_set_headers \"X-A: b\";\n# a comment ; with { and }\n\
             more_set_headers \"X-Host: $host\";",
        )],
    ));
    let dir = plain(&docs);
    let o = ferrule(&[
        "validate",
        "--allow-snippet-annotations",
        "--manifests",
        dir.path().to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    for line in [
        "Ingress web/dollar-brace: error: annotation nginx.ingress.kubernetes.io/configuration-snippet: the directive header_filter_by_lua_block is not allowed",
        "Ingress web/vertical-tab: error: annotation nginx.ingress.kubernetes.io/server-snippet: the character U+000B",
        "Ingress web/status-port: error: annotation nginx.ingress.kubernetes.io/server-snippet: proxy_pass http://127.0.0.1:10254/status/resources",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(!out.contains("Ingress web/benign: error"), "{out}");
}

/// Issue 36: an invalid value of a key that does not restrict access is listed with
/// its effect and does not fail validation; `--strict-annotations` makes it fail.
#[test]
fn validate_lists_ignored_invalid_values_and_strict_rejects_them() {
    let mut docs = documents();
    docs.push(annotated(
        "sloppy",
        "sloppy.example.com",
        &[("nginx.ingress.kubernetes.io/proxy-body-size", "not a size")],
    ));
    let dir = plain(&docs);
    let manifests = dir.path().to_str().unwrap();
    let o = ferrule(&["validate", "--manifests", manifests]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains(
            "Ingress web/sloppy: warning: annotation nginx.ingress.kubernetes.io/proxy-body-size: \
             invalid value \"not a size\""
        ) && out.contains("the key is ignored and the Ingress served without it"),
        "{out}"
    );
    let o = ferrule(&["validate", "--strict-annotations", "--manifests", manifests]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(
            "Ingress web/sloppy: error: annotation nginx.ingress.kubernetes.io/proxy-body-size"
        ),
        "{out}"
    );
}

/// `--annotations-prefix` as in ingress-nginx: the other prefix is read, the
/// default one is then another controller's.
#[test]
fn annotations_prefix_selects_the_annotations_read() {
    let mut docs = documents();
    docs.push(annotated(
        "custom",
        "custom.example.com",
        &[
            ("custom.example/global-rate-limit", "10"),
            ("nginx.ingress.kubernetes.io/limit-rps", "many"),
        ],
    ));
    let dir = plain(&docs);
    let manifests = dir.path().to_str().unwrap();
    let o = ferrule(&["validate", "--manifests", manifests]);
    assert!(!o.status.success());
    assert!(
        stdout(&o).contains("limit-rps: invalid value"),
        "{}",
        stdout(&o)
    );
    let o = ferrule(&[
        "validate",
        "--manifests",
        manifests,
        "--annotations-prefix",
        "custom.example",
    ]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(
            "Ingress web/custom: error: annotation custom.example/global-rate-limit (global rate limits)"
        ),
        "{out}"
    );
    assert!(!out.contains("limit-rps"), "{out}");
    let o = ferrule(&[
        "validate",
        "--manifests",
        manifests,
        "--annotations-prefix",
        "Not/A",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--annotations-prefix"),
        "{}",
        stderr(&o)
    );
}

/// `ferrule run` refuses an admission webhook it could not serve before it starts
/// anything: on a port another listener has, or without a certificate it can load.
#[test]
fn run_refuses_an_admission_webhook_it_cannot_serve() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let prefix = dir.path().join("prefix");
    let run = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["run", "--manifests", d, "--nginx-prefix"])
            .arg(&prefix)
            .args(["--status-port", "0"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let files = [
        "--admission-cert",
        "/nonexistent.crt",
        "--admission-key",
        "/nonexistent.key",
    ];
    let clash = run(&[&["--admission-port", "443"][..], &files].concat());
    assert!(
        clash.contains("--admission-port 443 is also --https-port"),
        "{clash}"
    );
    let missing = run(&[&["--admission-port", "18443"][..], &files].concat());
    assert!(
        missing.contains("loading the admission webhook certificate")
            && missing.contains("/nonexistent.crt"),
        "{missing}"
    );
}

/// ingress-nginx's flags, as a migrating user's Helm `extraArgs` pass them: one that
/// changes nothing is accepted with a warning naming it, one whose absence would
/// change what is served is refused by name (never clap's "unexpected argument").
#[test]
fn ingress_nginx_flags_are_accepted_with_a_warning_or_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = ferrule(&[
        "validate",
        "--manifests",
        d,
        "--sync-period=10m",
        "--profiling",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        log.contains("--sync-period (ingress-nginx) has no effect in Ferrule"),
        "{log}"
    );
    assert!(
        log.contains("--profiling (ingress-nginx) has no effect"),
        "{log}"
    );
    for flag in ["--watch-namespace-selector=team=a", "--update-status=false"] {
        let o = ferrule(&["validate", "--manifests", d, flag]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        let name = flag.split('=').next().unwrap();
        assert!(
            stderr(&o).contains(&format!("{name} (ingress-nginx) is refused")),
            "{}",
            stderr(&o)
        );
    }
}

/// `use-proxy-protocol` with `use-forwarded-headers` needs Ferrule's C module:
/// `render` and `validate` learn whether NGINX loads it, as `run` does, and without
/// it the PROXY line names the client and the ConfigMap has a warning.
#[test]
fn forwarded_headers_behind_the_proxy_protocol_follow_the_module() {
    let mut docs = documents();
    docs.push(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ferrule-cm, namespace: default }\n\
         data:\n  use-proxy-protocol: \"true\"\n  use-forwarded-headers: \"true\"\n  \
         proxy-real-ip-cidr: 10.0.0.0/8\n"
            .to_owned(),
    );
    let dir = plain(&docs);
    let (out, o) = render_into(dir.path(), &["--configmap", "ferrule-cm", "--no-fast-path"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let main = std::fs::read_to_string(out.path().join("conf/nginx.conf")).unwrap();
    assert!(
        main.contains("    real_ip_header \"proxy_protocol\";"),
        "{main}"
    );
    assert!(!main.contains("ferrule_input_header"), "{main}");
    let manifests = dir.path().to_str().unwrap();
    let o = ferrule(&[
        "validate",
        "--manifests",
        manifests,
        "--configmap",
        "ferrule-cm",
        "--no-fast-path",
    ]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        said.contains("keys use-proxy-protocol with use-forwarded-headers"),
        "{said}"
    );

    if !Path::new("/usr/lib/nginx/modules/ngx_http_ferrule_module.so").exists() {
        eprintln!("Ferrule's module not installed: skipping the render with it");
        return;
    }
    let (out, o) = render_into(dir.path(), &["--configmap", "ferrule-cm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let main = std::fs::read_to_string(out.path().join("conf/nginx.conf")).unwrap();
    assert!(
        main.contains(
            "ferrule_input_header \"X-Forwarded-For-Proxy-Protocol\" $ferrule_forwarded_for_proxy_protocol;"
        ),
        "{main}"
    );
}
