//! Property tests: for random snapshots the four invariants of ARCHITECTURE.md hold, and
//! any permutation of the inputs gives an equal model and an equal hash.
//!
//! A random world is generated as plain indexes into small pools (so that collisions,
//! conflicts, ties and misses are frequent), turned into Kubernetes objects with the
//! shared builders, and decoded with `objects::add`. An independent oracle, written from
//! the rules and not from the implementation, says what the model must contain.
//! `STATS=1 cargo test -p ferrule-model --test properties -- --nocapture` prints what
//! each generated world covered (servers, locations, endpoints, certificates, canaries).

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use common::*;
use ferrule_model::route::{Outcome, route};
use ferrule_model::{
    Model, PathMatch, ResourceRef, Snapshot, Target, build, build_endpoint_change, objects,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

const NAMESPACES: [&str; 2] = ["a", "b"];
/// Rule hosts ("" = no host: the catch-all server). `A.Example.COM` is `a.example.com`.
const HOSTS: [&str; 6] = [
    "a.example.com",
    "x.example.com",
    "*.example.com",
    "ec.example.com",
    "A.Example.COM",
    "",
];
const TLS_HOSTS: [&str; 5] = [
    "a.example.com",
    "x.example.com",
    "*.example.com",
    "ec.example.com",
    "A.Example.COM",
];
const PATHS: [&str; 6] = ["/", "/foo", "/foo/", "/foo/bar", "/Foo", "/bar"];
const PATH_TYPES: [&str; 3] = ["Exact", "Prefix", "ImplementationSpecific"];
const SERVICES: [&str; 3] = ["s1", "s2", "s3"];
/// Ingress backend ports: by number or by name; `81` never exists.
const PORT_REFS: [&str; 5] = ["80", "9090", "http", "metrics", "81"];
/// Service port layouts: (name, port, targetPort).
const SERVICE_PORTS: [&[(&str, i32, &str)]; 4] = [
    &[("http", 80, "web")],
    &[("metrics", 9090, "9091")],
    &[("http", 80, "web"), ("metrics", 9090, "9091")],
    &[("", 80, "8080")],
];
/// EndpointSlice port layouts: (name, port).
const SLICE_PORTS: [&[(&str, i32)]; 4] = [
    &[("http", 8080)],
    &[("metrics", 9091)],
    &[("http", 8081), ("metrics", 9091)],
    &[("", 8080)],
];
/// Endpoint addresses; the last of each is local (left out unless allowed).
const V4: [&str; 4] = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "127.0.0.1"];
const V6: [&str; 4] = ["fd00::1", "fd00::2", "fd00::a", "fe80::1"];
/// Secrets that may exist in each namespace: (name, cert, key, names it covers, valid).
const SECRETS: [(&str, &str, &str, &str, bool); 4] = [
    ("tls-a", "a.crt", "a.key", "a.example.com", true),
    (
        "tls-wild",
        "wildcard.crt",
        "wildcard.key",
        "*.example.com",
        true,
    ),
    ("tls-ec", "ec.crt", "ec-pkcs8.key", "ec.example.com", true),
    ("tls-bad", "a.crt", "other.key", "a.example.com", false),
];
/// Secret names an Ingress may reference: the four above and one that never exists.
const SECRET_REFS: [&str; 5] = ["tls-a", "tls-wild", "tls-ec", "tls-bad", "tls-missing"];

#[derive(Debug, Clone)]
struct PathS {
    path: usize,
    ty: usize,
    svc: usize,
    port: usize,
}

#[derive(Debug, Clone)]
struct RuleS {
    host: usize,
    paths: Vec<PathS>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Ours,
    Other,
    None,
}

#[derive(Debug, Clone)]
struct IngS {
    ns: usize,
    ts: u32,
    class: Class,
    invalid: bool,
    canary: bool,
    rules: Vec<RuleS>,
    tls: Vec<(Vec<usize>, usize)>,
    default_backend: Option<(usize, usize)>,
}

#[derive(Debug, Clone)]
struct SliceS {
    ns: usize,
    svc: usize,
    ports: usize,
    v6: bool,
    endpoints: Vec<(usize, Option<bool>)>,
}

#[derive(Debug, Clone)]
struct World {
    ings: Vec<IngS>,
    /// Per (namespace, service): the port layout, when the Service exists.
    services: Vec<Option<usize>>,
    slices: Vec<SliceS>,
    /// Per (namespace, secret): whether it exists.
    secrets: Vec<bool>,
    watch_without_class: bool,
    /// `--allow-local-endpoints`.
    allow_local_endpoints: bool,
    seed: u64,
}

fn path_s() -> impl Strategy<Value = PathS> {
    (0..PATHS.len(), 0..3usize, 0..3usize, 0..PORT_REFS.len()).prop_map(|(path, ty, svc, port)| {
        PathS {
            path,
            ty,
            svc,
            port,
        }
    })
}

fn rule_s() -> impl Strategy<Value = RuleS> {
    (0..HOSTS.len(), vec(path_s(), 1..4)).prop_map(|(host, paths)| RuleS { host, paths })
}

fn ing_s() -> impl Strategy<Value = IngS> {
    (
        0..2usize,
        0..4u32,
        prop_oneof![8 => Just(Class::Ours), 1 => Just(Class::Other), 1 => Just(Class::None)],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.25),
        vec(rule_s(), 1..3),
        vec((vec(0..TLS_HOSTS.len(), 1..3), 0..SECRET_REFS.len()), 0..3),
        prop::option::weighted(0.15, (0..3usize, 0..PORT_REFS.len())),
    )
        .prop_map(
            |(ns, ts, class, invalid, canary, rules, tls, default_backend)| IngS {
                ns,
                ts,
                class,
                invalid,
                canary,
                rules,
                tls,
                default_backend,
            },
        )
}

fn slice_s() -> impl Strategy<Value = SliceS> {
    let ready = prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)];
    (
        0..2usize,
        0..3usize,
        0..SLICE_PORTS.len(),
        prop::bool::weighted(0.3),
        vec((0..V4.len(), ready), 0..4),
    )
        .prop_map(|(ns, svc, ports, v6, endpoints)| SliceS {
            ns,
            svc,
            ports,
            v6,
            endpoints,
        })
}

fn world() -> impl Strategy<Value = World> {
    (
        vec(ing_s(), 0..8),
        vec(prop::option::weighted(0.8, 0..SERVICE_PORTS.len()), 6),
        vec(slice_s(), 0..12),
        vec(any::<bool>(), 8),
        prop::bool::weighted(0.3),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(
                ings,
                services,
                slices,
                secrets,
                watch_without_class,
                allow_local_endpoints,
                seed,
            )| {
                World {
                    ings,
                    services,
                    slices,
                    secrets,
                    watch_without_class,
                    allow_local_endpoints,
                    seed,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------
// World → objects

fn ing_name(i: usize) -> String {
    format!("i{i}")
}

fn objects_of(w: &World) -> Vec<Value> {
    static SECRET_OBJS: OnceLock<Vec<Value>> = OnceLock::new();
    let secret_objs = SECRET_OBJS.get_or_init(|| {
        let mut out = vec![];
        for ns in NAMESPACES {
            for (name, cert, key, _, _) in SECRETS {
                out.push(tls_secret(&format!("{ns}/{name}"), cert, key));
            }
        }
        out
    });
    let mut objs = vec![
        our_class(),
        ingress_class("other", "example.com/other", false),
    ];
    for (i, ing) in w.ings.iter().enumerate() {
        let ns = NAMESPACES[ing.ns];
        let mut b = Ing::new(&format!("{ns}/{}", ing_name(i)), ing.ts);
        b = match ing.class {
            Class::Ours => b,
            Class::Other => b.class(Some("other")),
            Class::None => b.class(None),
        };
        if ing.invalid {
            // An access restriction Ferrule cannot honour: the Ingress is rejected.
            b = b.ann("whitelist-source-range", "10.0.0.0/33");
        }
        if ing.canary {
            b = b.ann("canary", "true").ann("canary-weight", "30");
        }
        for r in &ing.rules {
            let paths: Vec<(&str, &str, &str, &str)> = r
                .paths
                .iter()
                .map(|p| {
                    (
                        PATHS[p.path],
                        PATH_TYPES[p.ty],
                        SERVICES[p.svc],
                        PORT_REFS[p.port],
                    )
                })
                .collect();
            b = b.rule(HOSTS[r.host], &paths);
        }
        for (hosts, secret) in &ing.tls {
            let hosts: Vec<&str> = hosts.iter().map(|h| TLS_HOSTS[*h]).collect();
            b = b.tls(&hosts, SECRET_REFS[*secret]);
        }
        if let Some((svc, port)) = ing.default_backend {
            b = b.default_backend(SERVICES[svc], PORT_REFS[port]);
        }
        objs.push(b.0);
    }
    for (k, layout) in w.services.iter().enumerate() {
        if let Some(layout) = layout {
            let (ns, svc) = (NAMESPACES[k / 3], SERVICES[k % 3]);
            objs.push(service(&format!("{ns}/{svc}"), SERVICE_PORTS[*layout]));
        }
    }
    for (k, s) in w.slices.iter().enumerate() {
        let pool = if s.v6 { V6 } else { V4 };
        let eps: Vec<(&str, Option<bool>)> =
            s.endpoints.iter().map(|(a, r)| (pool[*a], *r)).collect();
        let mut v = slice(
            &format!("{}/es{k}", NAMESPACES[s.ns]),
            SERVICES[s.svc],
            SLICE_PORTS[s.ports],
            &eps,
        );
        v["addressType"] = (if s.v6 { "IPv6" } else { "IPv4" }).into();
        objs.push(v);
    }
    for (k, exists) in w.secrets.iter().enumerate() {
        if *exists {
            objs.push(secret_objs[k].clone());
        }
    }
    objs
}

fn snapshot_of(w: &World, objs: Vec<Value>) -> Snapshot {
    let mut snap = Snapshot::default();
    snap.settings.now = NOW;
    snap.settings.watch_without_class = w.watch_without_class;
    snap.settings.allow_local_endpoints = w.allow_local_endpoints;
    for o in objs {
        objects::add(&mut snap, o, None).unwrap();
    }
    snap
}

/// A small deterministic PRNG (xorshift64*) for the permutation property.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// Every vector shuffled: the objects, and inside them the lists whose order carries no
/// meaning (endpoints of a slice, ports of a Service or a slice, IngressClasses).
fn shuffled(mut objs: Vec<Value>, seed: u64) -> Vec<Value> {
    let mut rng = Rng(seed | 1);
    rng.shuffle(&mut objs);
    for o in &mut objs {
        for pointer in ["/endpoints", "/ports", "/spec/ports"] {
            if let Some(a) = o.pointer_mut(pointer).and_then(|p| p.as_array_mut()) {
                rng.shuffle(a);
            }
        }
    }
    objs
}

// ---------------------------------------------------------------------------------------
// The oracle

fn ing_ref(w: &World, i: usize) -> ResourceRef {
    ResourceRef::new("Ingress", NAMESPACES[w.ings[i].ns], &ing_name(i))
}

fn host_key(raw: &str) -> String {
    if raw.is_empty() {
        "_".to_owned()
    } else {
        raw.to_ascii_lowercase()
    }
}

fn path_key(p: &PathS) -> (String, PathMatch) {
    let raw = PATHS[p.path];
    if PATH_TYPES[p.ty] == "Exact" {
        (raw.to_owned(), PathMatch::Exact)
    } else {
        let t = raw.trim_end_matches('/');
        (
            if t.is_empty() { "/" } else { t }.to_owned(),
            PathMatch::Prefix,
        )
    }
}

/// The backend an Ingress backend resolves to, when the Service and port exist.
fn resolve(w: &World, ns: usize, svc: usize, port: usize) -> Option<String> {
    let layout = w.services[ns * 3 + svc]?;
    let pr = PORT_REFS[port];
    let found = SERVICE_PORTS[layout]
        .iter()
        .any(|(name, number, _)| match pr.parse::<i32>() {
            Ok(n) => *number == n,
            Err(_) => *name == pr,
        });
    found.then(|| format!("{}_{}_{pr}", NAMESPACES[ns], SERVICES[svc]))
}

fn covers(name: &str, host: &str) -> bool {
    name == host
        || match (name.strip_prefix("*."), host.split_once('.')) {
            (Some(suffix), Some((label, rest))) => label != "*" && rest == suffix,
            _ => false,
        }
}

type Key = (String, String, PathMatch);

struct Expected {
    /// host + path + match → (winning Ingress, resolved backend).
    locations: BTreeMap<Key, (usize, Option<String>)>,
    /// (loser, winner) of host + path + match conflicts.
    path_losers: Vec<(usize, usize)>,
    /// host → (owning Ingress, `ns/secret`).
    tls: BTreeMap<String, (usize, String)>,
    tls_losers: Vec<(usize, usize)>,
    default_backend: Target,
    /// primary backend → canary backend.
    canaries: BTreeMap<String, String>,
}

fn expected(w: &World) -> Expected {
    let ours = |i: &IngS| match i.class {
        Class::Ours => true,
        Class::Other => false,
        Class::None => w.watch_without_class,
    };
    let mut order: Vec<usize> = (0..w.ings.len())
        .filter(|i| ours(&w.ings[*i]) && !w.ings[*i].invalid)
        .collect();
    order.sort_by_key(|i| (w.ings[*i].ts, NAMESPACES[w.ings[*i].ns], ing_name(*i)));

    let mut e = Expected {
        locations: BTreeMap::new(),
        path_losers: vec![],
        tls: BTreeMap::new(),
        tls_losers: vec![],
        default_backend: Target::Status(404),
        canaries: BTreeMap::new(),
    };
    let mut default_set = false;
    // Hosts with a server so far, and the `/` an Ingress with rules gives its
    // spec.defaultBackend on each host its rules create (where no rule has `/`).
    let mut with_server: std::collections::HashSet<String> = Default::default();
    let mut root_defaults = Vec::new();
    for &i in order.iter().filter(|i| !w.ings[**i].canary) {
        let ing = &w.ings[i];
        if let Some((svc, port)) = ing.default_backend
            && !default_set
            && ing.rules.is_empty()
        {
            default_set = true;
            e.default_backend = match resolve(w, ing.ns, svc, port) {
                Some(b) => Target::Backend(b),
                None => Target::Status(503),
            };
        }
        let older: std::collections::HashSet<String> = (ing.rules.iter())
            .map(|r| host_key(HOSTS[r.host]))
            .filter(|h| with_server.contains(h))
            .collect();
        if let (Some((svc, port)), false) = (ing.default_backend, ing.rules.is_empty()) {
            for r in &ing.rules {
                let host = host_key(HOSTS[r.host]);
                if host != "_" && !older.contains(&host) {
                    root_defaults.push((host.clone(), i, resolve(w, ing.ns, svc, port)));
                    with_server.insert(host);
                }
            }
        }
        for r in &ing.rules {
            if !r.paths.is_empty() {
                with_server.insert(host_key(HOSTS[r.host]));
            }
        }
        for r in &ing.rules {
            for p in &r.paths {
                let (path, m) = path_key(p);
                let key = (host_key(HOSTS[r.host]), path, m);
                match e.locations.get(&key) {
                    Some((winner, _)) => e.path_losers.push((i, *winner)),
                    None => {
                        let target = resolve(w, ing.ns, p.svc, p.port);
                        e.locations.insert(key, (i, target));
                    }
                }
            }
        }
        for (hosts, secret) in &ing.tls {
            let secret = format!("{}/{}", NAMESPACES[ing.ns], SECRET_REFS[*secret]);
            for h in hosts {
                let host = TLS_HOSTS[*h].to_ascii_lowercase();
                // only the hosts of the Ingress's own rules
                if !ing.rules.iter().any(|r| host_key(HOSTS[r.host]) == host) {
                    continue;
                }
                match e.tls.get(&host) {
                    Some((winner, s)) if *s != secret => e.tls_losers.push((i, *winner)),
                    Some(_) => {}
                    None => {
                        e.tls.insert(host, (i, secret.clone()));
                    }
                }
            }
        }
    }
    let mut owners = BTreeMap::new();
    for &i in order.iter().filter(|i| w.ings[**i].canary) {
        let ing = &w.ings[i];
        for r in &ing.rules {
            for p in &r.paths {
                let (path, m) = path_key(p);
                let key = (host_key(HOSTS[r.host]), path, m);
                let Some((_, Some(primary))) = e.locations.get(&key) else {
                    continue;
                };
                let Some(canary) = resolve(w, ing.ns, p.svc, p.port) else {
                    continue;
                };
                // a canary on the primary's own backend is ignored and claims nothing
                if canary == *primary {
                    continue;
                }
                // the oldest canary Ingress wins a primary; within one Ingress the
                // last path on that primary counts
                match owners.get(primary) {
                    Some(owner) if *owner != i => {}
                    _ => {
                        owners.insert(primary.clone(), i);
                        e.canaries.insert(primary.clone(), canary);
                    }
                }
            }
        }
    }
    // Filled in last: any rule's `/` (a younger Ingress's too) wins over them.
    for (host, i, target) in root_defaults {
        e.locations
            .entry((host, "/".to_owned(), PathMatch::Prefix))
            .or_insert((i, target));
    }
    e
}

/// Whether `ns/secret` is a valid certificate for `host` in this world.
fn valid_for(w: &World, secret: &str, host: &str) -> bool {
    let (ns, name) = secret.split_once('/').unwrap();
    let ns = NAMESPACES.iter().position(|n| *n == ns).unwrap();
    SECRETS
        .iter()
        .enumerate()
        .any(|(k, (n, _, _, names, valid))| {
            *n == name && w.secrets[ns * SECRETS.len() + k] && *valid && covers(names, host)
        })
}

fn request_host(host: &str) -> String {
    if host == "_" {
        "unknown.invalid".to_owned()
    } else if let Some(rest) = host.strip_prefix('*') {
        format!("zz{rest}")
    } else {
        host.to_owned()
    }
}

// ---------------------------------------------------------------------------------------
// The invariants

fn check_invariants(w: &World, m: &Model) -> Result<(), TestCaseError> {
    let e = expected(w);
    let problems = problem_list(m);

    // (a) every path rule with a backend that resolves (and that is not lost to an older
    // identical rule, nor in a rejected Ingress) yields a location routed to it.
    for ((host, path, pm), (owner, target)) in &e.locations {
        let server = m.server(host);
        prop_assert!(server.is_some(), "no server {host}");
        let loc = server
            .unwrap()
            .locations
            .iter()
            .find(|l| &l.path == path && l.path_match == *pm);
        prop_assert!(loc.is_some(), "no location {host} {path} {pm:?}");
        let loc = loc.unwrap();
        prop_assert_eq!(
            &loc.owner,
            &ing_ref(w, *owner),
            "owner of {} {}",
            host,
            path
        );
        let want = match target {
            Some(b) => Target::Backend(b.clone()),
            None => Target::Status(503),
        };
        prop_assert_eq!(&loc.target, &want, "target of {} {} {:?}", host, path, pm);
        // and a request for exactly that path is routed there (unless an Exact rule of
        // the same path takes precedence over this Prefix one)
        let shadowed = *pm == PathMatch::Prefix
            && e.locations
                .contains_key(&(host.clone(), path.clone(), PathMatch::Exact));
        if !shadowed {
            let got = route(m, &request_host(host), path);
            let want = match target {
                Some(b) if !m.backends[b].endpoints.is_empty() => Outcome::Backend(b.clone()),
                _ => Outcome::Status(503),
            };
            prop_assert_eq!(got, want, "route {} {}", host, path);
        }
    }
    for (loser, winner) in &e.path_losers {
        let needle = format!("is already served by {} (oldest wins)", ing_ref(w, *winner));
        prop_assert!(
            m.problems_of(&ing_ref(w, *loser))
                .any(|p| p.message.contains(&needle)),
            "{} lost a path to {} without a problem:\n{}",
            ing_ref(w, *loser),
            ing_ref(w, *winner),
            problems
        );
    }
    prop_assert_eq!(&m.default_backend, &e.default_backend);

    // (b) every TLS host with a rule and a valid secret (that it owns) is served with
    // that certificate; every other TLS host gets the default one and a problem.
    let mut certs = BTreeSet::new();
    for s in m.servers.iter() {
        match e.tls.get(&s.host) {
            None => prop_assert!(s.tls.is_none(), "unexpected TLS on {}", s.host),
            Some((owner, secret)) => {
                let tls = s.tls.as_ref();
                prop_assert!(tls.is_some(), "no TLS on {}", s.host);
                let got = tls.unwrap().certificate.as_deref();
                if valid_for(w, secret, &s.host) {
                    prop_assert_eq!(got, Some(secret.as_str()), "certificate of {}", s.host);
                    prop_assert!(m.certificates.contains_key(secret));
                    certs.insert(secret.clone());
                } else {
                    prop_assert_eq!(got, None, "certificate of {}", s.host);
                    let needle = format!("spec.tls host {}: Secret {secret}", s.host);
                    prop_assert!(
                        m.problems_of(&ing_ref(w, *owner))
                            .any(|p| p.message.contains(&needle)),
                        "no problem {needle:?}:\n{problems}"
                    );
                }
            }
        }
    }
    for (loser, winner) in &e.tls_losers {
        let needle = format!("is already provided by {}", ing_ref(w, *winner));
        prop_assert!(
            m.problems_of(&ing_ref(w, *loser))
                .any(|p| p.message.contains(&needle)),
            "{} lost TLS to {} without a problem:\n{}",
            ing_ref(w, *loser),
            ing_ref(w, *winner),
            problems
        );
    }

    // (c) every backend's endpoints derive from the Service port (number or name) and
    // the EndpointSlice port of the same name, ready endpoints only, local ones only
    // where allowed.
    for (name, b) in &m.backends {
        let ns = NAMESPACES
            .iter()
            .position(|n| *n == b.service.namespace)
            .unwrap();
        let svc = SERVICES.iter().position(|s| *s == b.service.name).unwrap();
        prop_assert_eq!(
            name,
            &format!(
                "{}_{}_{}",
                b.service.namespace, b.service.name, b.service_port
            )
        );
        let layout = w.services[ns * 3 + svc];
        prop_assert!(layout.is_some(), "backend {name} without Service");
        let port_name = SERVICE_PORTS[layout.unwrap()]
            .iter()
            .find(|(pname, number, _)| match b.service_port.parse::<i32>() {
                Ok(n) => *number == n,
                Err(_) => *pname == b.service_port,
            })
            .map(|(pname, _, _)| *pname);
        prop_assert!(port_name.is_some(), "backend {name}: no such Service port");
        let mut want = BTreeSet::new();
        for s in w.slices.iter().filter(|s| s.ns == ns && s.svc == svc) {
            let Some((_, port)) = SLICE_PORTS[s.ports]
                .iter()
                .find(|(pname, _)| Some(*pname) == port_name)
            else {
                continue;
            };
            let pool = if s.v6 { V6 } else { V4 };
            for (a, ready) in &s.endpoints {
                let local = *a == pool.len() - 1;
                if *ready != Some(false) && (w.allow_local_endpoints || !local) {
                    want.insert((pool[*a].to_owned(), *port as u16));
                }
            }
        }
        let got: BTreeSet<(String, u16)> = b
            .endpoints
            .iter()
            .map(|e| (e.address.clone(), e.port))
            .collect();
        prop_assert_eq!(
            got.len(),
            b.endpoints.len(),
            "duplicate endpoints in {}",
            name
        );
        prop_assert_eq!(got, want, "endpoints of {}", name);
    }

    // (d) nothing that no current rule describes survives.
    let hosts: BTreeSet<&str> = e.locations.keys().map(|(h, _, _)| h.as_str()).collect();
    let servers: BTreeSet<&str> = m.servers.iter().map(|s| s.host.as_str()).collect();
    prop_assert_eq!(servers, hosts);
    let locations: usize = m.servers.iter().map(|s| s.locations.len()).sum();
    prop_assert_eq!(locations, e.locations.len());
    let mut backends: BTreeSet<String> = e
        .locations
        .values()
        .filter_map(|(_, b)| b.clone())
        .collect();
    if let Target::Backend(b) = &e.default_backend {
        backends.insert(b.clone());
    }
    for (primary, canary) in &e.canaries {
        backends.insert(canary.clone());
        let got = m.backends[primary].balancing.canary.as_ref();
        prop_assert_eq!(got.map(|c| c.backend.as_str()), Some(canary.as_str()));
    }
    let got: BTreeSet<String> = m.backends.keys().cloned().collect();
    prop_assert_eq!(got, backends);
    for (name, b) in &m.backends {
        if !e.canaries.contains_key(name) {
            prop_assert!(
                b.balancing.canary.is_none(),
                "unexpected canary on {}",
                name
            );
        }
    }
    let got: BTreeSet<String> = m.certificates.keys().cloned().collect();
    prop_assert_eq!(got, certs);
    // problems are about Ingresses of this snapshot
    for p in &m.problems {
        prop_assert_eq!(p.resource.kind.as_str(), "Ingress");
        let i: usize = p.resource.name[1..].parse().unwrap();
        prop_assert_eq!(&p.resource, &ing_ref(w, i));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_order_does_not_matter(w in world()) {
        let objs = objects_of(&w);
        let model = build(&snapshot_of(&w, objs.clone()));
        check_invariants(&w, &model)?;
        if std::env::var("STATS").is_ok() {
            eprintln!("STAT servers={} locs={} backends={} eps={} certs={} problems={} canaries={} tlsservers={}",
                model.servers.len(),
                model.servers.iter().map(|s| s.locations.len()).sum::<usize>(),
                model.backends.len(),
                model.backends.values().map(|b| b.endpoints.len()).sum::<usize>(),
                model.certificates.len(), model.problems.len(),
                model.backends.values().filter(|b| b.balancing.canary.is_some()).count(),
                model.servers.iter().filter(|s| s.tls.is_some()).count());
        }

        let permuted = build(&snapshot_of(&w, shuffled(objs, w.seed)));
        prop_assert_eq!(&model, &permuted);
        prop_assert_eq!(model.hash(), permuted.hash());
    }
}

/// `snap` with its EndpointSlices replaced by those of `w` (every other object the
/// same `Arc`, as the sources keep them).
fn with_slices_of(snap: &Snapshot, w: &World) -> Snapshot {
    let slices = snapshot_of(
        w,
        objects_of(w)
            .into_iter()
            .filter(|o| o["kind"] == "EndpointSlice")
            .collect(),
    );
    Snapshot {
        endpoint_slices: slices.endpoint_slices,
        ..snap.clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// The endpoint fast path gives exactly the full build's model, and names exactly
    /// the backends whose endpoints differ; where it declines, the full build runs.
    #[test]
    fn the_endpoint_fast_path_equals_the_full_build(
        w in world(),
        other in vec(slice_s(), 0..12),
        keep in vec(any::<bool>(), 12),
        // the clock moves between snapshots: not at all, a second, past every expiry
        later in prop_oneof![Just(0i64), Just(1), Just(101 * 365 * 86_400)],
    ) {
        let before = snapshot_of(&w, objects_of(&w));
        let model = build(&before);
        // Nothing changed: always the fast path (it must not just decline everything).
        let same = build_endpoint_change(&before, &model, &before.clone());
        prop_assert_eq!(same.map(|(m, changed)| (m == model, changed)), Some((true, vec![])));
        // Some slices of the first world are kept (the same Arc), the others replaced.
        let mut w2 = w.clone();
        w2.slices = other;
        let mut after = with_slices_of(&before, &w2);
        after.settings.now += later;
        after.endpoint_slices.extend(
            before.endpoint_slices.iter().zip(&keep).filter(|(_, k)| **k).map(|(s, _)| s.clone()),
        );
        let full = build(&after);
        if let Some((fast, changed)) = build_endpoint_change(&before, &model, &after) {
            prop_assert_eq!(&fast, &full);
            let want: Vec<String> = full
                .backends
                .iter()
                .filter(|(n, b)| model.backends[*n].endpoints != b.endpoints)
                .map(|(n, _)| n.clone())
                .collect();
            prop_assert_eq!(changed, want);
        }
    }
}
