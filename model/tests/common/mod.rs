//! Shared helpers of the model's integration tests: compact builders for the Kubernetes
//! objects (as JSON values, rendered to YAML for the rule tables), a snapshot decoder
//! that goes through `serde_yaml` → `serde_json::Value` → `ferrule_model::objects::add`
//! exactly like the manifests source, and the data-driven `check` helper.
#![allow(dead_code)]

#[path = "../../../test/routing/cases.rs"]
pub mod cases;

use std::fmt::Write as _;

use ferrule_model::route::{Outcome, route};
use ferrule_model::snapshot::DEFAULT_CONTROLLER;
use ferrule_model::{Model, Settings, Snapshot, build, objects};
use serde::Deserialize;
use serde_json::{Value, json};

/// Our IngressClass name (and legacy annotation value), as in `Settings::default()`.
pub const CLASS: &str = "ferrule";
/// "Now" for certificate expiry in every test: 2026-01-01T00:00:00Z.
pub const NOW: i64 = 1_767_225_600;
/// The annotation prefix.
pub const P: &str = "nginx.ingress.kubernetes.io/";

// ---------------------------------------------------------------------------------------
// Builders

/// `2024-01-01T00:00:00Z` plus `t` seconds: creation timestamps that order as `t`.
pub fn ts(t: u32) -> String {
    format!(
        "2024-01-{:02}T{:02}:{:02}:{:02}Z",
        1 + t / 86_400,
        t / 3600 % 24,
        t / 60 % 60,
        t % 60
    )
}

fn split(ns_name: &str) -> (&str, &str) {
    ns_name.split_once('/').unwrap_or(("default", ns_name))
}

/// A Service backend port: digits are a number, anything else a port name.
pub fn port_ref(port: &str) -> Value {
    match port.parse::<i32>() {
        Ok(n) => json!({ "number": n }),
        Err(_) => json!({ "name": port }),
    }
}

fn int_or_string(v: &str) -> Value {
    match v.parse::<i32>() {
        Ok(n) => json!(n),
        Err(_) => json!(v),
    }
}

/// An Ingress under construction. `Ing::new("ns/name", t)` names our IngressClass; the
/// other methods add what a rule table needs.
#[derive(Clone, Debug)]
pub struct Ing(pub Value);

impl Ing {
    /// An Ingress `ns/name` created at `ts(t)`, with `ingressClassName: ferrule`.
    pub fn new(ns_name: &str, t: u32) -> Self {
        let (ns, name) = split(ns_name);
        Ing(json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": { "name": name, "namespace": ns, "creationTimestamp": ts(t) },
            "spec": { "ingressClassName": CLASS },
        }))
    }

    /// Sets (or, with `None`, removes) `spec.ingressClassName`.
    pub fn class(mut self, class: Option<&str>) -> Self {
        let spec = self.0["spec"].as_object_mut().unwrap();
        match class {
            Some(c) => spec.insert("ingressClassName".into(), json!(c)),
            None => spec.remove("ingressClassName"),
        };
        self
    }

    /// Adds an annotation; a key without `/` gets the `nginx.ingress.kubernetes.io/` prefix.
    pub fn ann(mut self, key: &str, value: &str) -> Self {
        let key = if key.contains('/') {
            key.to_owned()
        } else {
            format!("{P}{key}")
        };
        let meta = self.0["metadata"].as_object_mut().unwrap();
        let anns = meta.entry("annotations").or_insert_with(|| json!({}));
        anns[key] = json!(value);
        self
    }

    /// Adds a rule: `host` ("" for none) with `(path, pathType, service, port)` paths.
    pub fn rule(mut self, host: &str, paths: &[(&str, &str, &str, &str)]) -> Self {
        let paths: Vec<Value> = paths
            .iter()
            .map(|(path, path_type, svc, port)| {
                json!({
                    "path": path,
                    "pathType": path_type,
                    "backend": { "service": { "name": svc, "port": port_ref(port) } },
                })
            })
            .collect();
        let mut rule = json!({ "http": { "paths": paths } });
        if !host.is_empty() {
            rule["host"] = json!(host);
        }
        self.push("rules", rule);
        self
    }

    /// Adds a `spec.tls` entry.
    pub fn tls(mut self, hosts: &[&str], secret: &str) -> Self {
        self.push("tls", json!({ "hosts": hosts, "secretName": secret }));
        self
    }

    /// Sets `spec.defaultBackend`.
    pub fn default_backend(mut self, svc: &str, port: &str) -> Self {
        self.0["spec"]["defaultBackend"] =
            json!({ "service": { "name": svc, "port": port_ref(port) } });
        self
    }

    fn push(&mut self, field: &str, v: Value) {
        let spec = self.0["spec"].as_object_mut().unwrap();
        let list = spec.entry(field).or_insert_with(|| json!([]));
        list.as_array_mut().unwrap().push(v);
    }
}

impl From<Ing> for Value {
    fn from(i: Ing) -> Value {
        i.0
    }
}

/// The simple form: an Ingress `ns/name` created at `t` with one rule.
pub fn ingress(ns_name: &str, t: u32, host: &str, paths: &[(&str, &str, &str, &str)]) -> Value {
    Ing::new(ns_name, t).rule(host, paths).0
}

/// An IngressClass with `spec.controller`, optionally marked as the cluster default.
pub fn ingress_class(name: &str, controller: &str, default: bool) -> Value {
    let mut v = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": { "name": name },
        "spec": { "controller": controller },
    });
    if default {
        v["metadata"]["annotations"] =
            json!({ "ingressclass.kubernetes.io/is-default-class": "true" });
    }
    v
}

/// Our IngressClass, as [`check`] adds it.
pub fn our_class() -> Value {
    ingress_class(CLASS, DEFAULT_CONTROLLER, false)
}

/// A Service with `(port name, port, targetPort)` ports ("" name = unnamed).
pub fn service(ns_name: &str, ports: &[(&str, i32, &str)]) -> Value {
    let (ns, name) = split(ns_name);
    let ports: Vec<Value> = ports
        .iter()
        .map(|(pname, port, target)| {
            let mut p = json!({ "port": port, "targetPort": int_or_string(target) });
            if !pname.is_empty() {
                p["name"] = json!(pname);
            }
            p
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "ports": ports },
    })
}

/// An EndpointSlice `ns/slice` of Service `svc` with `(port name, port)` ports and
/// `(address, ready)` endpoints (`ready: None` leaves the condition out). The address
/// type follows the first address.
pub fn slice(
    ns_name: &str,
    svc: &str,
    ports: &[(&str, i32)],
    endpoints: &[(&str, Option<bool>)],
) -> Value {
    let (ns, name) = split(ns_name);
    let v6 = endpoints.first().is_some_and(|(a, _)| a.contains(':'));
    let ports: Vec<Value> = ports
        .iter()
        .map(|(pname, port)| json!({ "name": pname, "port": port, "protocol": "TCP" }))
        .collect();
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(addr, ready)| {
            let mut e = json!({ "addresses": [addr] });
            if let Some(r) = ready {
                e["conditions"] = json!({ "ready": r });
            }
            e
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": { "kubernetes.io/service-name": svc },
        },
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// A typical application: Service `ns/name` port 80 (`http`, targetPort `web`) and one
/// EndpointSlice publishing `http` on 8080 with one ready endpoint `addr`. Its backend
/// is `ns_name_80` (or `ns_name_http` by port name).
pub fn app(ns_name: &str, addr: &str) -> Vec<Value> {
    let (ns, name) = split(ns_name);
    vec![
        service(ns_name, &[("http", 80, "web")]),
        slice(
            &format!("{ns}/{name}-abc"),
            name,
            &[("http", 8080)],
            &[(addr, Some(true))],
        ),
    ]
}

/// A `kubernetes.io/tls` Secret from two PEM fixtures (file names under `fixtures/`).
pub fn tls_secret(ns_name: &str, cert: &str, key: &str) -> Value {
    tls_secret_pem(ns_name, &fixture(cert), &fixture(key))
}

/// A `kubernetes.io/tls` Secret with this PEM content (base64 in `data`, as the API has it).
pub fn tls_secret_pem(ns_name: &str, cert_pem: &str, key_pem: &str) -> Value {
    let (ns, name) = split(ns_name);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": { "name": name, "namespace": ns },
        "data": { "tls.crt": base64(cert_pem.as_bytes()), "tls.key": base64(key_pem.as_bytes()) },
    })
}

/// The controller ConfigMap (`ingress-nginx/ferrule`, as [`snapshot`] configures it).
pub fn config_map(data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> =
        data.iter().map(|(k, v)| ((*k).into(), json!(v))).collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": "ferrule", "namespace": "ingress-nginx" },
        "data": data,
    })
}

/// A pseudo-document only the tests read: controller settings, so that a rule table
/// stays one YAML string. Fields: `watchWithoutClass`, `defaultBackendService`,
/// `defaultSslCertificate`, `allowLocalEndpoints`, `now`, `tcpServices`,
/// `udpServices`, `reservedPorts`, `sslPassthrough`, `disableCatchAll`, `regexPathsPerHost`.
pub fn test_settings(fields: Value) -> Value {
    json!({ "kind": "TestSettings", "spec": fields })
}

/// Reads a file of `tests/fixtures/`.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Multi-document YAML of these objects; see the [`docs!`] macro.
pub fn docs_of(parts: Vec<Docs>) -> String {
    let mut out = String::new();
    for v in parts.into_iter().flat_map(|d| d.0) {
        let _ = write!(out, "---\n{}", serde_yaml::to_string(&v).unwrap());
    }
    out
}

/// `docs![obj, vec_of_objs, ing, ...]`: multi-document YAML of objects (`Value`),
/// lists of objects (`Vec<Value>`, e.g. from `app`) and [`Ing`] builders.
#[macro_export]
macro_rules! docs {
    ($($e:expr),* $(,)?) => {
        $crate::common::docs_of(vec![$($crate::common::Docs::from($e)),*])
    };
}

/// One or several objects, for [`docs`].
pub struct Docs(Vec<Value>);
impl From<Value> for Docs {
    fn from(v: Value) -> Self {
        Docs(vec![v])
    }
}
impl From<Vec<Value>> for Docs {
    fn from(v: Vec<Value>) -> Self {
        Docs(v)
    }
}
impl From<Ing> for Docs {
    fn from(i: Ing) -> Self {
        Docs(vec![i.0])
    }
}

// ---------------------------------------------------------------------------------------
// Snapshot and checks

/// Decodes multi-document YAML into a snapshot, as the manifests source does
/// (`serde_yaml` → `serde_json::Value` → `objects::add`). Settings are the defaults
/// with `now = NOW`, changed by a `TestSettings` document.
pub fn snapshot(manifests: &str) -> Snapshot {
    let mut snap = Snapshot {
        settings: Settings {
            now: NOW,
            ..Settings::default()
        },
        ..Snapshot::default()
    };
    for (i, doc) in serde_yaml::Deserializer::from_str(manifests).enumerate() {
        let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("document {i}: {e}"));
        if v.is_null() {
            continue;
        }
        if v["kind"] == "TestSettings" {
            let s = &mut snap.settings;
            let spec = &v["spec"];
            if let Some(b) = spec["watchWithoutClass"].as_bool() {
                s.watch_without_class = b;
            }
            if let Some(d) = spec["defaultBackendService"].as_str() {
                s.default_backend_service = Some(d.to_owned());
            }
            if let Some(d) = spec["defaultSslCertificate"].as_str() {
                s.default_certificate = Some(d.to_owned());
            }
            if let Some(b) = spec["allowLocalEndpoints"].as_bool() {
                s.allow_local_endpoints = b;
            }
            if let Some(n) = spec["now"].as_i64() {
                s.now = n;
            }
            if let Some(c) = spec["tcpServices"].as_str() {
                s.tcp_services = Some(c.to_owned());
            }
            if let Some(c) = spec["udpServices"].as_str() {
                s.udp_services = Some(c.to_owned());
            }
            if let Some(n) = spec["regexPathsPerHost"].as_u64() {
                s.limits.regex_paths_per_host = n as usize;
            }
            if let Some(b) = spec["disableCatchAll"].as_bool() {
                s.disable_catch_all = b;
            }
            if let Some(b) = spec["sslPassthrough"].as_bool() {
                s.ssl_passthrough = b;
            }
            if let Some(b) = spec["strictAnnotations"].as_bool() {
                s.strict_annotations = b;
            }
            if let Some(ports) = spec["reservedPorts"].as_array() {
                s.reserved_ports = ports
                    .iter()
                    .filter_map(|p| p.as_u64())
                    .map(|p| p as u16)
                    .collect();
            }
            continue;
        }
        objects::add(&mut snap, v, Some(("ingress-nginx", "ferrule")))
            .unwrap_or_else(|e| panic!("document {i}: {e}"));
    }
    snap
}

/// What a request gets, as the rule tables write it: a backend name or a status.
pub fn outcome(model: &Model, host: &str, path: &str) -> String {
    match route(model, host, path) {
        Outcome::Backend(b) => b,
        Outcome::Status(s) => s.to_string(),
    }
}

/// THE rule-table helper: builds the model of `manifests` (plus our IngressClass) and
/// checks that every `(host, path, expected)` request gets `expected` (a backend
/// `namespace_service_port` or a status such as "404"/"503"). Returns the model for
/// further assertions.
pub fn check(manifests: &str, requests: &[(&str, &str, &str)]) -> Model {
    let manifests = format!("{}{manifests}", docs_of(vec![our_class().into()]));
    let model = build(&snapshot(&manifests));
    let failures: Vec<String> = requests
        .iter()
        .filter_map(|(host, path, want)| {
            let got = outcome(&model, host, path);
            (got != *want).then(|| format!("  {host}{path}: expected {want}, got {got}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "routing mismatches:\n{}\nmodel: {}",
        failures.join("\n"),
        serde_json::to_string_pretty(&model).unwrap()
    );
    model
}

/// Asserts that for each `(resource, text)` some problem on `resource` (as displayed,
/// e.g. `Ingress default/b`) contains every `|`-separated part of `text`.
pub fn expect_problems(model: &Model, expected: &[(&str, &str)]) {
    for (resource, text) in expected {
        let found = model.problems.iter().any(|p| {
            p.resource.to_string() == *resource && text.split('|').all(|t| p.message.contains(t))
        });
        assert!(
            found,
            "no problem on {resource} containing {text:?}; problems:\n{}",
            problem_list(model)
        );
    }
}

/// Asserts that no problem is reported on `resource`.
pub fn expect_no_problems_on(model: &Model, resource: &str) {
    assert!(
        !model
            .problems
            .iter()
            .any(|p| p.resource.to_string() == resource),
        "unexpected problems on {resource}:\n{}",
        problem_list(model)
    );
}

/// The problems, one per line, for assertion messages.
pub fn problem_list(model: &Model) -> String {
    model
        .problems
        .iter()
        .map(|p| format!("  {} [{:?}] {}", p.resource, p.severity, p.message))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------
// The routing cases of test/routing

/// Where the model puts a case's app or echo number `i`: one address, a port each
/// (the case files may put several ports of one Service on the same address).
pub fn case_address(case: &cases::Case, name: &str) -> (String, u16) {
    let i = case
        .backends()
        .position(|b| b == name)
        .unwrap_or_else(|| panic!("{}: no app or echo {name}", case.id()));
    ("10.0.0.1".to_owned(), 8000 + i as u16)
}

/// The model of a routing case: its manifests with [`case_address`], and its flags.
pub fn case_model(case: &cases::Case) -> Model {
    let mut snap = snapshot(&case.manifests_yaml(&|n| case_address(case, n)));
    for (flag, value) in case.flag_values() {
        set_flag(&mut snap.settings, &flag, &value);
    }
    build(&snap)
}

/// The model of the case `file/name`, for tests that assert more than routing on it.
pub fn named_case_model(id: &str) -> Model {
    let cases = cases::load();
    let case = cases
        .iter()
        .find(|c| c.id() == id)
        .unwrap_or_else(|| panic!("no routing case {id}"));
    case_model(case)
}

/// What a controller flag of `ferrule run` sets in `Settings`. A flag the model does
/// not know fails the test: a case must not mean more to NGINX than to the model.
fn set_flag(s: &mut Settings, flag: &str, value: &str) {
    let yes = || value == "true";
    match flag {
        "controller-class" => s.controller = value.to_owned(),
        "ingress-class" => s.ingress_class = value.to_owned(),
        "watch-ingress-without-class" => s.watch_without_class = yes(),
        "default-backend-service" => s.default_backend_service = Some(value.to_owned()),
        "disable-catch-all" => s.disable_catch_all = yes(),
        "max-regex-paths-per-host" => s.limits.regex_paths_per_host = value.parse().unwrap(),
        other => panic!("flag --{other} is not known to the model's routing tests"),
    }
}
