//! The routing cases of `test/routing/*.yaml` (the format is in `test/routing/README.md`).
//!
//! Both the model's `model/tests/routing.rs` (through `route()`) and the integration
//! test `controller/tests/it/routing.rs` (through `ferrule run` and a real NGINX)
//! include this file, so that a routing rule is written once and the two are held to
//! the same answer. It knows neither side: it reads the files, checks that they are
//! well formed, and turns a case into the manifests both feed to Ferrule.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

/// The folder of the case files, from either crate (both are one level below the root).
pub const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../test/routing");

/// The IngressClass every case gets: ours, and not the cluster's default, so that an
/// Ingress without a class is served only when a case says why.
const OUR_CLASS: &str = "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: { name: ferrule }
spec: { controller: ferrule.dev/ingress-controller }
";

/// One file: its cases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    cases: Vec<Case>,
}

/// A case: manifests, the echo backends behind them, requests and what they get.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique in its file; `file/name` is how failures name the case.
    pub name: String,
    /// The file's stem, set by [`load`].
    #[serde(skip)]
    pub file: String,
    /// Controller flags without their `--`: `true` is a switch, anything else a value.
    #[serde(default)]
    pub flags: BTreeMap<String, Value>,
    /// Applications, `namespace/name` or `name` (namespace `default`): each gets a
    /// Service (port 80 named `http`) and an EndpointSlice with one ready endpoint,
    /// an echo backend.
    #[serde(default)]
    pub apps: Vec<String>,
    /// Echo backends without generated objects: the manifests reach them through
    /// `$NAME.ip` and `$NAME.port`.
    #[serde(default)]
    pub echoes: Vec<String>,
    /// The case's Kubernetes objects.
    #[serde(default)]
    pub manifests: Vec<Value>,
    /// The requests and what each gets.
    pub requests: Vec<Request>,
    /// Problems by resource (`Ingress ns/name`): each text is part of one message
    /// reported on it; an empty list says the resource has none.
    #[serde(default)]
    pub problems: BTreeMap<String, Vec<String>>,
}

/// A request and the expected answer: the echo (app or echo name) or NGINX's status.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// GET unless said.
    #[serde(default = "get")]
    pub method: String,
    /// The Host header as sent (port included).
    pub host: String,
    /// The request target: path and maybe a query.
    pub path: String,
    /// The app or echo that answers.
    pub backend: Option<String>,
    /// The status NGINX answers with itself.
    pub status: Option<u16>,
}

fn get() -> String {
    "GET".to_owned()
}

impl Request {
    /// The expected answer as both suites print theirs: `backend NAME` or `status N`.
    pub fn expected(&self) -> String {
        match (&self.backend, self.status) {
            (Some(b), None) => format!("backend {b}"),
            (None, Some(s)) => format!("status {s}"),
            _ => unreachable!("checked by load"),
        }
    }

    /// The path without its query: what routing looks at.
    pub fn route_path(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

impl Case {
    /// `file/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.file, self.name)
    }

    /// Every app and echo: each needs a backend listening.
    pub fn backends(&self) -> impl Iterator<Item = &str> {
        self.apps.iter().chain(&self.echoes).map(String::as_str)
    }

    /// The flags as command-line arguments.
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.flags {
            out.push(format!("--{k}"));
            if v != &Value::Bool(true) {
                out.push(scalar(v));
            }
        }
        out
    }

    /// The flags as `(name, value)`, a switch's value being `true`.
    pub fn flag_values(&self) -> Vec<(String, String)> {
        self.flags
            .iter()
            .map(|(k, v)| (k.clone(), scalar(v)))
            .collect()
    }

    /// Multi-document YAML of our IngressClass, the apps' objects and the manifests,
    /// `addr` telling where each app or echo listens (IP, port).
    pub fn manifests_yaml(&self, addr: &dyn Fn(&str) -> (String, u16)) -> String {
        let mut docs = vec![serde_yaml::from_str::<Value>(OUR_CLASS).unwrap()];
        for app in &self.apps {
            let (ip, port) = addr(app);
            docs.extend(app_objects(app, &ip, port));
        }
        for m in &self.manifests {
            docs.push(fill(m.clone(), addr));
        }
        docs.iter()
            .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
            .collect()
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => panic!("flag value {other:?} is not a scalar"),
    }
}

/// `ns/name` or `name` (in `default`).
pub fn split(app: &str) -> (&str, &str) {
    app.split_once('/').unwrap_or(("default", app))
}

/// An app's Service and EndpointSlice: the Service's targetPort names the slice's
/// port, as Deployments' named container ports do.
fn app_objects(app: &str, ip: &str, port: u16) -> Vec<Value> {
    let (ns, name) = split(app);
    let yaml = format!(
        "apiVersion: v1
kind: Service
metadata: {{ name: {name}, namespace: {ns} }}
spec: {{ ports: [{{ name: http, port: 80, targetPort: web }}] }}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-echo
  namespace: {ns}
  labels: {{ kubernetes.io/service-name: {name} }}
addressType: IPv4
ports: [{{ name: http, port: {port}, protocol: TCP }}]
endpoints: [{{ addresses: [\"{ip}\"], conditions: {{ ready: true }} }}]
"
    );
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

/// Replaces the strings `$NAME.ip` and `$NAME.port` (a number) in `v`.
fn fill(v: Value, addr: &dyn Fn(&str) -> (String, u16)) -> Value {
    match v {
        Value::String(s) => match s.strip_prefix('$').and_then(|s| s.rsplit_once('.')) {
            Some((name, "ip")) => Value::String(addr(name).0),
            Some((name, "port")) => Value::Number(addr(name).1.into()),
            _ => Value::String(s),
        },
        Value::Sequence(s) => Value::Sequence(s.into_iter().map(|v| fill(v, addr)).collect()),
        Value::Mapping(m) => {
            Value::Mapping(m.into_iter().map(|(k, v)| (k, fill(v, addr))).collect())
        }
        other => other,
    }
}

/// Every case of every file, in file order; panics on a malformed file, so that a
/// mistake in a case fails both suites rather than passing silently.
pub fn load() -> Vec<Case> {
    let mut paths: Vec<_> = std::fs::read_dir(DIR)
        .unwrap_or_else(|e| panic!("{DIR}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no case files in {DIR}");
    paths.iter().flat_map(|p| read(p)).collect()
}

fn read(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path).unwrap();
    let file: File =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let mut names = BTreeSet::new();
    file.cases
        .into_iter()
        .map(|mut c| {
            c.file = stem.clone();
            let id = c.id();
            assert!(names.insert(c.name.clone()), "{id}: name used twice");
            assert!(!c.requests.is_empty(), "{id}: no requests");
            let known: BTreeSet<&str> = c.backends().collect();
            for r in &c.requests {
                match (&r.backend, r.status) {
                    (Some(b), None) => assert!(known.contains(b.as_str()), "{id}: {b} undeclared"),
                    (None, Some(_)) => {}
                    _ => panic!("{id}: {} {}: one of backend, status", r.host, r.path),
                }
            }
            c
        })
        .collect()
}

/// A resource as the case files name it, `Kind ns/name` (or `Kind name`): (kind,
/// namespace, name).
pub fn resource(r: &str) -> (&str, &str, &str) {
    let (kind, rest) = r
        .split_once(' ')
        .unwrap_or_else(|| panic!("resource {r:?}"));
    let (ns, name) = rest.split_once('/').unwrap_or(("", rest));
    (kind, ns, name)
}
