//! Admission: whether one Ingress may enter the cluster, decided by the model alone.
//!
//! ingress-nginx's webhook rendered the whole configuration with the candidate and
//! ran `nginx -t` on it: seconds per request at 1k Ingresses, and NGINX parsing text
//! an attacker chose (CVE-2025-1974). Here the candidate is checked by the same build
//! that serves it, on a small snapshot: the candidate, the Ingresses of the current
//! snapshot that could interact with it (those sharing one of its hosts, the oldest
//! catch-all, and, when it sets balancing annotations, those setting them on the same
//! Services), and the Services, EndpointSlices and Secrets they reference. The
//! problems the build reports on the candidate are exactly those `/status/resources`
//! would show once it is admitted, and their kind decides:
//!
//! - [`ProblemKind::Invalid`] denies (an invalid annotation value, an access
//!   restriction Ferrule does not implement, a snippet while snippets are disabled, an
//!   invalid host, path or pathType, a resource backend);
//! - [`ProblemKind::Tls`] denies with [`Options::strict_tls`], else warns;
//! - any other kind (a host + path or a certificate lost to an older Ingress, a
//!   Service or port that does not exist yet, an ignored annotation) warns.
//!
//! The candidate's age is the [`Operation`]'s: a creation is the newest Ingress, an
//! update as old as the version the snapshot holds, never what the request says.
//!
//! Anyone may ask (the webhook does not know its callers), so a decision names and
//! probes nothing of other namespaces: their Ingresses enter the small snapshot as
//! [`Shadows`] (what they claim, under names of their own, with references that
//! always resolve), and [`redact`] words each shadow's name as "an Ingress of another
//! namespace". The problems are then `/status/resources`'s but for those names, and
//! for what other namespaces' Services and Secrets would change (nothing, here).
//!
//! An [`Index`] of the snapshot (host → Ingresses, and Services, EndpointSlices and
//! Secrets by name) keeps the cost of a decision proportional to what the candidate
//! touches, not to the cluster. It shares the snapshot (an `Arc`), holds positions
//! into it, and [`Index::update`] reuses the parts whose inputs did not change.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::annotations;
use crate::build::{backends, classes, hosts};
use crate::model::{DEFAULT_SERVER, ProblemKind};
use crate::snapshot::{Settings, Snapshot};

/// How strict a decision is, and on what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// A TLS Secret that is missing or invalid denies (`--admission-strict-tls`);
    /// by default it is a warning (the Secret is often created after the Ingress).
    pub strict_tls: bool,
    /// "Now" for certificate expiry, in seconds since the Unix epoch; `None` keeps
    /// the snapshot's.
    pub now: Option<i64>,
    /// What the API server is about to do with the candidate: its age follows.
    pub operation: Operation,
}

/// The operation under review; it decides the candidate's age, which decides every
/// "oldest wins" claim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Operation {
    /// A new Ingress: the newest of all, whatever `creationTimestamp` the request
    /// carries (a caller could backdate it to win claims it will never win).
    #[default]
    Create,
    /// A new version of an Ingress: as old as the version the snapshot holds (the API
    /// server keeps `creationTimestamp`); one the snapshot has not seen yet keeps the
    /// request's, or is the newest without one.
    Update,
}

/// What the webhook answers for one Ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not ours (another class): admitted without a look at its content.
    NotOurs,
    /// Admitted, with the problems it will have as warnings (none: valid as it is).
    Allowed {
        /// The model's messages, one per problem.
        warnings: Vec<String>,
    },
    /// Refused.
    Denied {
        /// The model's messages of the problems that refuse it.
        reasons: Vec<String>,
        /// The other problems.
        warnings: Vec<String>,
    },
}

/// In a warning, between the younger Ingress a candidate displaces and the problem
/// that Ingress now has: `Ingress NS/NAME loses to this Ingress: host … path …`.
pub const DISPLACED: &str = "loses to this Ingress:";

/// A snapshot indexed for admission decisions (see the module documentation).
#[derive(Debug, Clone)]
pub struct Index {
    snap: Arc<Snapshot>,
    ingresses: Arc<IngressIndex>,
    services: Arc<Keyed>,
    slices: Arc<Keyed>,
    secrets: Arc<Keyed>,
}

/// Positions in one of the snapshot's lists, by the hash of a key. A collision only
/// adds an object to the small snapshot of a decision, which changes nothing for the
/// candidate but the cost: no key is stored.
#[derive(Debug, Default)]
struct Keyed {
    hasher: RandomState,
    map: HashMap<u64, Vec<u32>>,
}

impl Keyed {
    fn insert(&mut self, key: impl Hash, at: usize) {
        let h = self.hasher.hash_one(key);
        let at = u32::try_from(at).expect("fewer than 2^32 objects");
        let list = self.map.entry(h).or_default();
        if list.last() != Some(&at) {
            list.push(at);
        }
    }

    fn get(&self, key: impl Hash) -> &[u32] {
        self.map
            .get(&self.hasher.hash_one(key))
            .map_or(&[], Vec::as_slice)
    }

    /// Services and Secrets by `(namespace, name)`.
    fn by_name<T: k8s_openapi::Metadata<Ty = ObjectMeta>>(objects: &[Arc<T>]) -> Self {
        let mut k = Keyed::default();
        for (i, o) in objects.iter().enumerate() {
            let m = o.metadata();
            k.insert(
                (
                    m.namespace.as_deref().unwrap_or_default(),
                    m.name.as_deref().unwrap_or_default(),
                ),
                i,
            );
        }
        k
    }

    /// EndpointSlices by `(namespace, Service name)`.
    fn slices(slices: &[Arc<k8s_openapi::api::discovery::v1::EndpointSlice>]) -> Self {
        let mut k = Keyed::default();
        for (i, s) in slices.iter().enumerate() {
            let svc = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(backends::SERVICE_NAME_LABEL));
            if let Some(svc) = svc {
                let ns = s.metadata.namespace.as_deref().unwrap_or_default();
                k.insert((ns, svc.as_str()), i);
            }
        }
        k
    }
}

/// Our Ingresses, by what makes them interact.
#[derive(Debug, Default)]
struct IngressIndex {
    /// Every Ingress of the snapshot (ours or not) by `(namespace, name)`: the
    /// stored version of an update.
    by_name: Keyed,
    /// By rule host (lower case; `_` for rules without one). A TLS host without a
    /// rule of its Ingress claims nothing, so rule hosts are all there is.
    by_host: Keyed,
    /// The Ingresses that would take the catch-all backend (a `spec.defaultBackend`,
    /// annotations that parse, not a canary), oldest first: the first that is not the
    /// candidate is the one it competes with.
    catch_all: Vec<u32>,
    /// Ingresses that set balancing annotations, by `(namespace, Service)` of each
    /// Service they route to: only those compete for a Service port's settings.
    balancing: Keyed,
}

impl IngressIndex {
    fn new(snap: &Snapshot) -> Self {
        let filter = classes::ClassFilter::new(&snap.ingress_classes, &snap.settings);
        let prefix = format!("{}/", snap.settings.annotations_prefix);
        let mut index = IngressIndex {
            by_name: Keyed::by_name(&snap.ingresses),
            ..IngressIndex::default()
        };
        let mut catch_all = Vec::new();
        for (i, ing) in snap.ingresses.iter().enumerate() {
            if !filter.is_ours(ing) {
                continue;
            }
            for host in rule_hosts(ing) {
                index.by_host.insert(host.as_str(), i);
            }
            let ns = ing.metadata.namespace.as_deref().unwrap_or_default();
            if sets_balancing(ing, &prefix) {
                for svc in services(ing) {
                    index.balancing.insert((ns, svc), i);
                }
            }
            let default_backend = ing.spec.as_ref().and_then(|s| s.default_backend.as_ref());
            if default_backend.is_some() {
                let empty = BTreeMap::new();
                let annotations = ing.metadata.annotations.as_ref().unwrap_or(&empty);
                let parsed = annotations::parse(annotations, &prefix);
                if parsed.is_ok_and(|p| p.values.canary.is_none()) {
                    catch_all.push((crate::build::age_key(ing), i));
                }
            }
        }
        catch_all.sort();
        index.catch_all = catch_all.into_iter().map(|(_, i)| i as u32).collect();
        index
    }
}

/// The lower-cased hosts of an Ingress's valid rules (`_` for a rule without one).
fn rule_hosts(ing: &Ingress) -> impl Iterator<Item = String> + '_ {
    ing.spec
        .iter()
        .flat_map(|s| s.rules.iter().flatten())
        .filter_map(|r| match r.host.as_deref().filter(|h| !h.is_empty()) {
            None => Some(DEFAULT_SERVER.to_owned()),
            Some(h) => hosts::host(h).ok(),
        })
}

/// The names of the Services an Ingress routes to (with repeats), in its namespace.
fn services(ing: &Ingress) -> impl Iterator<Item = &str> {
    let spec = ing.spec.as_ref();
    let rules = spec
        .into_iter()
        .flat_map(|s| s.rules.iter().flatten())
        .flat_map(|r| r.http.iter().flat_map(|h| &h.paths))
        .map(|p| &p.backend);
    spec.and_then(|s| s.default_backend.as_ref())
        .into_iter()
        .chain(rules)
        .filter_map(|b| b.service.as_ref().map(|s| s.name.as_str()))
}

/// Whether an Ingress sets an annotation of the settings Ingresses sharing a
/// Service port compete for (`Builder::set_balancing`).
fn sets_balancing(ing: &Ingress, prefix: &str) -> bool {
    ing.metadata.annotations.iter().flatten().any(|(k, _)| {
        k.strip_prefix(prefix).is_some_and(|k| {
            k == "load-balance"
                || k == "upstream-hash-by"
                || k == "affinity"
                || k.starts_with("session-cookie-")
        })
    })
}

/// The same objects, in the same order (the sources keep unchanged objects' `Arc`s).
fn same<T>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// The settings the Ingress index depends on (class selection, the prefix).
fn same_class_settings(a: &Settings, b: &Settings) -> bool {
    (
        &a.controller,
        &a.ingress_class,
        a.watch_without_class,
        &a.annotations_prefix,
    ) == (
        &b.controller,
        &b.ingress_class,
        b.watch_without_class,
        &b.annotations_prefix,
    )
}

impl Index {
    /// Indexes a snapshot: one pass over its Ingresses, Services, EndpointSlices
    /// and Secrets.
    pub fn new(snap: Arc<Snapshot>) -> Self {
        Index {
            ingresses: Arc::new(IngressIndex::new(&snap)),
            services: Arc::new(Keyed::by_name(&snap.services)),
            slices: Arc::new(Keyed::slices(&snap.endpoint_slices)),
            secrets: Arc::new(Keyed::by_name(&snap.secrets)),
            snap,
        }
    }

    /// The index of `next`, reusing the parts of this one whose inputs are the same
    /// objects (an EndpointSlice change indexes the EndpointSlices only).
    pub fn update(&self, next: Arc<Snapshot>) -> Self {
        let prev = &*self.snap;
        let ingresses = if same(&prev.ingresses, &next.ingresses)
            && same(&prev.ingress_classes, &next.ingress_classes)
            && same_class_settings(&prev.settings, &next.settings)
        {
            self.ingresses.clone()
        } else {
            Arc::new(IngressIndex::new(&next))
        };
        let reuse = |same: bool, part: &Arc<Keyed>, new: &dyn Fn() -> Keyed| match same {
            true => part.clone(),
            false => Arc::new(new()),
        };
        Index {
            ingresses,
            services: reuse(
                same(&prev.services, &next.services),
                &self.services,
                &|| Keyed::by_name(&next.services),
            ),
            slices: reuse(
                same(&prev.endpoint_slices, &next.endpoint_slices),
                &self.slices,
                &|| Keyed::slices(&next.endpoint_slices),
            ),
            secrets: reuse(same(&prev.secrets, &next.secrets), &self.secrets, &|| {
                Keyed::by_name(&next.secrets)
            }),
            snap: next,
        }
    }

    /// The snapshot indexed.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snap
    }

    /// Decides on `candidate`, the Ingress as it would be stored (created, or the
    /// new version of one of the snapshot's, as [`Options::operation`] says). Its age
    /// is the operation's ([`Operation`]), never a `creationTimestamp` a creation
    /// carries.
    pub fn check(&self, candidate: Ingress, opts: &Options) -> Decision {
        self.check_counted(candidate, opts).0
    }

    /// [`Index::check`], and how many Ingresses the decision built (the candidate
    /// and those it may interact with; 0 when it is not ours): its cost.
    pub fn check_counted(&self, mut candidate: Ingress, opts: &Options) -> (Decision, usize) {
        let snap = &*self.snap;
        let filter = classes::ClassFilter::new(&snap.ingress_classes, &snap.settings);
        if !filter.is_ours(&candidate) {
            return (Decision::NotOurs, 0);
        }
        let ns = candidate.metadata.namespace.as_deref().unwrap_or_default();
        if !namespace_name(ns) {
            let reasons = vec![format!(
                "metadata.namespace {ns:?} is not a namespace name (a DNS-1123 label)"
            )];
            let warnings = Vec::new();
            return (Decision::Denied { reasons, warnings }, 0);
        }
        let small = self.small_snapshot(&mut candidate, opts);
        let r = crate::build::ingress_ref(small.ingresses.last().expect("the candidate"));
        let model = crate::build::build(&small);
        let (mut reasons, mut warnings) = (Vec::new(), Vec::new());
        for p in model.problems_of(&r) {
            let denies = match p.kind {
                ProblemKind::Invalid => true,
                ProblemKind::Tls => opts.strict_tls,
                _ => false,
            };
            match denies {
                true => reasons.push(redact(&p.message)),
                false => warnings.push(redact(&p.message)),
            }
        }
        // What the candidate takes from a younger Ingress (an update of an old one
        // adding a host or path): the other Ingress loses it, and says so here.
        let winner = format!(" by {r} ");
        for other in &small.ingresses[..small.ingresses.len() - 1] {
            let o = crate::build::ingress_ref(other);
            for p in model.problems_of(&o) {
                if p.kind == ProblemKind::Conflict && p.message.contains(&winner) {
                    warnings.push(redact(&format!("{o} {DISPLACED} {}", p.message)));
                }
            }
        }
        let decision = if reasons.is_empty() {
            Decision::Allowed { warnings }
        } else {
            Decision::Denied { reasons, warnings }
        };
        (decision, small.ingresses.len())
    }

    /// The snapshot a decision builds: the candidate last, after the Ingresses it
    /// may interact with. Those of other namespaces enter as their shadows
    /// ([`Shadows`]), and every Ingress is stamped with its rank by age.
    fn small_snapshot(&self, candidate: &mut Ingress, opts: &Options) -> Snapshot {
        let snap = &*self.snap;
        let ns = candidate.metadata.namespace.clone().unwrap_or_default();
        let name = candidate.metadata.name.clone().unwrap_or_default();
        let itself = |i: &u32| {
            let m = &snap.ingresses[*i as usize].metadata;
            m.namespace.as_deref().unwrap_or_default() == ns
                && m.name.as_deref().unwrap_or_default() == name
        };
        let index = &*self.ingresses;
        let stored = (index.by_name.get((ns.as_str(), name.as_str())).iter())
            .find(|i| itself(i))
            .map(|&i| &snap.ingresses[i as usize]);
        let newest = || Some(Time(k8s_openapi::jiff::Timestamp::MAX));
        candidate.metadata.creation_timestamp = match (opts.operation, stored) {
            (Operation::Create, _) => newest(),
            (Operation::Update, Some(s)) => s.metadata.creation_timestamp.clone(),
            (Operation::Update, None) => {
                candidate.metadata.creation_timestamp.take().or_else(newest)
            }
        };

        let mut picked: Vec<u32> = Vec::new();
        for host in rule_hosts(candidate) {
            picked.extend_from_slice(index.by_host.get(host.as_str()));
        }
        let spec = candidate.spec.as_ref();
        if spec.is_some_and(|s| s.default_backend.is_some()) {
            picked.extend(index.catch_all.iter().copied().find(|i| !itself(i)));
        }
        let prefix = format!("{}/", snap.settings.annotations_prefix);
        if sets_balancing(candidate, &prefix) {
            for svc in services(candidate) {
                picked.extend_from_slice(index.balancing.get((ns.as_str(), svc)));
            }
        }
        picked.sort_unstable();
        picked.dedup();
        picked.retain(|i| !itself(i));

        // Oldest first, as the snapshot has them: the stamps keep that order whatever
        // the shadows' names.
        let mut real: Vec<&Ingress> = picked
            .iter()
            .map(|&i| &*snap.ingresses[i as usize])
            .collect();
        real.push(candidate);
        let mut by_age: Vec<usize> = (0..real.len()).collect();
        by_age
            .sort_by(|&a, &b| crate::build::age_key(real[a]).cmp(&crate::build::age_key(real[b])));
        let mut rank = vec![0; real.len()];
        for (r, &i) in by_age.iter().enumerate() {
            rank[i] = r;
        }
        let mut shadows = Shadows::default();
        let (mut svcs, mut slices) = (Vec::new(), Vec::new());
        let mut ingresses = Vec::with_capacity(real.len());
        for (ing, r) in real.iter().zip(rank) {
            let mut ing = match ing.metadata.namespace.as_deref().unwrap_or_default() == ns {
                true => {
                    // The Services (and their EndpointSlices) it routes to: a canary's
                    // primary must resolve, and each path names its Service's problems.
                    for svc in services(ing) {
                        svcs.extend_from_slice(self.services.get((ns.as_str(), svc)));
                        slices.extend_from_slice(self.slices.get((ns.as_str(), svc)));
                    }
                    (*ing).clone()
                }
                false => shadows.ingress(ing),
            };
            let stamp = k8s_openapi::jiff::Timestamp::from_second(r as i64 + 1);
            ing.metadata.creation_timestamp = Some(Time(stamp.expect("a small second")));
            ingresses.push(Arc::new(ing));
        }
        let mut services = pick(svcs, &snap.services);
        let mut endpoint_slices = pick(slices, &snap.endpoint_slices);
        let (shadow_services, shadow_slices) = shadows.services();
        services.extend(shadow_services);
        endpoint_slices.extend(shadow_slices);
        let (mut secrets, tls) = (Vec::new(), spec.and_then(|s| s.tls.as_ref()));
        for secret in tls
            .into_iter()
            .flatten()
            .filter_map(|t| t.secret_name.as_deref())
        {
            secrets.extend_from_slice(self.secrets.get((ns.as_str(), secret)));
        }
        Snapshot {
            ingresses,
            ingress_classes: snap.ingress_classes.clone(),
            services,
            endpoint_slices,
            secrets: pick(secrets, &snap.secrets),
            config_map: snap.config_map.clone(),
            config_maps: Vec::new(),
            settings: Settings {
                // Problems of these flags are reported on their Service and Secret,
                // never on an Ingress: not checked per request.
                default_backend_service: None,
                default_certificate: None,
                // Streams are not an Ingress's: nothing to decide on.
                tcp_services: None,
                udp_services: None,
                now: opts.now.unwrap_or(snap.settings.now),
                ..snap.settings.clone()
            },
            external_names: snap.external_names.clone(),
            observed: None,
        }
    }
}

/// The namespaces of shadows start so: `~` is in no namespace Kubernetes accepts, so a
/// candidate's never does ([`namespace_name`]), and [`redact`] finds every name made
/// from one (Ingress, Service, Secret, backend).
const SHADOW: &str = "~other";

/// Where a shadow's Service sends traffic (TEST-NET-1): an address, not loopback.
const SHADOW_ADDRESS: &str = "192.0.2.1";

/// Ingresses of other namespaces as a decision sees them: what they claim (class,
/// age, annotations, hosts, paths, certificates' hosts, catch-all) under names of
/// their own, and references that always resolve. The Service an Ingress of another
/// namespace routes to becomes one with the ports it names and a ready endpoint, its
/// Secrets names without objects: whether those of another namespace exist, what
/// they hold and what they are called changes no answer, and no answer can name
/// them. Objects that are the same stay the same (two Ingresses of one namespace
/// routing to one Service share it), so that they still interact as they do.
#[derive(Default)]
struct Shadows {
    namespaces: HashMap<String, usize>,
    ingresses: usize,
    /// By (shadow namespace, Service): the shadow's name and the ports Ingresses name.
    services: BTreeMap<(usize, String), (String, std::collections::BTreeSet<Port>)>,
    secrets: HashMap<(usize, String), String>,
}

/// A Service port as an Ingress names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Port {
    Number(i32),
    Name(String),
}

impl Shadows {
    /// The shadow of `ing`, an Ingress of another namespace than the candidate's.
    fn ingress(&mut self, ing: &Ingress) -> Ingress {
        use k8s_openapi::api::networking::v1::{
            HTTPIngressPath, HTTPIngressRuleValue, IngressRule, IngressSpec, IngressTLS,
        };
        let real_ns = ing.metadata.namespace.clone().unwrap_or_default();
        let next = self.namespaces.len();
        let ns = *self.namespaces.entry(real_ns).or_insert(next);
        self.ingresses += 1;
        let spec = ing.spec.as_ref().map(|s| {
            let mut rules = Vec::new();
            for rule in s.rules.iter().flatten() {
                let http = rule.http.as_ref().map(|h| {
                    let mut paths = Vec::with_capacity(h.paths.len());
                    for p in &h.paths {
                        paths.push(HTTPIngressPath {
                            path: p.path.clone(),
                            path_type: p.path_type.clone(),
                            backend: self.backend(ns, &p.backend),
                        });
                    }
                    HTTPIngressRuleValue { paths }
                });
                rules.push(IngressRule {
                    host: rule.host.clone(),
                    http,
                });
            }
            let mut tls = Vec::new();
            for t in s.tls.iter().flatten() {
                let secret_name = t.secret_name.as_deref().map(|name| match name {
                    "" => String::new(),
                    name => {
                        let next = format!("t{}", self.secrets.len());
                        (self.secrets.entry((ns, name.to_owned())))
                            .or_insert(next)
                            .clone()
                    }
                });
                tls.push(IngressTLS {
                    hosts: t.hosts.clone(),
                    secret_name,
                });
            }
            IngressSpec {
                ingress_class_name: s.ingress_class_name.clone(),
                default_backend: s.default_backend.as_ref().map(|b| self.backend(ns, b)),
                rules: s.rules.as_ref().map(|_| rules),
                tls: s.tls.as_ref().map(|_| tls),
            }
        });
        Ingress {
            metadata: ObjectMeta {
                namespace: Some(format!("{SHADOW}{ns}")),
                name: Some(format!("i{}", self.ingresses)),
                annotations: ing.metadata.annotations.clone(),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    fn backend(
        &mut self,
        ns: usize,
        b: &k8s_openapi::api::networking::v1::IngressBackend,
    ) -> k8s_openapi::api::networking::v1::IngressBackend {
        use k8s_openapi::api::networking::v1::{IngressBackend, IngressServiceBackend};
        let service = b.service.as_ref().map(|s| {
            let next = format!("s{}", self.services.len());
            let (name, ports) = (self.services.entry((ns, s.name.clone())))
                .or_insert_with(|| (next, Default::default()));
            match &s.port {
                Some(p) if p.name.as_deref().is_some_and(|n| !n.is_empty()) => {
                    ports.insert(Port::Name(p.name.clone().unwrap_or_default()))
                }
                Some(p) => ports.insert(Port::Number(p.number.unwrap_or_default())),
                None => false,
            };
            IngressServiceBackend {
                name: name.clone(),
                port: s.port.clone(),
            }
        });
        IngressBackend {
            resource: b.resource.clone(),
            service,
        }
    }

    /// The Services the shadows route to, each with a ready endpoint on every port
    /// they name, and their EndpointSlices.
    fn services(
        self,
    ) -> (
        Vec<Arc<k8s_openapi::api::core::v1::Service>>,
        Vec<Arc<k8s_openapi::api::discovery::v1::EndpointSlice>>,
    ) {
        use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
        use k8s_openapi::api::discovery::v1::{
            Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
        };
        let (mut services, mut slices) = (Vec::new(), Vec::new());
        for ((ns, _), (name, ports)) in self.services {
            let ns = format!("{SHADOW}{ns}");
            let numbers: std::collections::BTreeSet<i32> = (ports.iter())
                .filter_map(|p| match p {
                    Port::Number(n) => Some(*n),
                    Port::Name(_) => None,
                })
                .collect();
            let mut free = (1..=65535).rev().filter(|n| !numbers.contains(n));
            let ports: Vec<ServicePort> = ports
                .into_iter()
                .map(|p| match p {
                    // `~` keeps these names apart from any port name Kubernetes accepts.
                    Port::Number(n) => ServicePort {
                        name: Some(format!("~{n}")),
                        port: n,
                        ..ServicePort::default()
                    },
                    Port::Name(name) => ServicePort {
                        name: Some(name),
                        port: free.next().unwrap_or(1),
                        ..ServicePort::default()
                    },
                })
                .collect();
            let endpoint_ports = (ports.iter())
                .map(|p| EndpointPort {
                    name: p.name.clone(),
                    port: Some(8080),
                    ..EndpointPort::default()
                })
                .collect();
            slices.push(Arc::new(EndpointSlice {
                metadata: ObjectMeta {
                    namespace: Some(ns.clone()),
                    name: Some(format!("{name}-shadow")),
                    labels: Some(BTreeMap::from([(
                        backends::SERVICE_NAME_LABEL.to_owned(),
                        name.clone(),
                    )])),
                    ..ObjectMeta::default()
                },
                address_type: "IPv4".to_owned(),
                endpoints: Some(vec![Endpoint {
                    addresses: vec![SHADOW_ADDRESS.to_owned()],
                    conditions: Some(EndpointConditions {
                        ready: Some(true),
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                }]),
                ports: Some(endpoint_ports),
            }));
            services.push(Arc::new(Service {
                metadata: ObjectMeta {
                    namespace: Some(ns),
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                spec: Some(ServiceSpec {
                    cluster_ip: Some(SHADOW_ADDRESS.to_owned()),
                    ports: Some(ports),
                    ..ServiceSpec::default()
                }),
                status: None,
            }));
        }
        (services, slices)
    }
}

/// `message` without the names of shadows: each becomes what it stands for, "an
/// Ingress of another namespace" (and so for Secrets, Services and backends).
fn redact(message: &str) -> String {
    if !message.contains(SHADOW) {
        return message.to_owned();
    }
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(SHADOW) {
        let name = |c: char| c.is_ascii_alphanumeric() || "~/_-".contains(c);
        let end = (rest[at..].find(|c| !name(c))).map_or(rest.len(), |n| at + n);
        let before = &rest[..at];
        let (before, what) = [
            ("Ingress ", "an Ingress of another namespace"),
            ("Secret ", "a Secret of another namespace"),
            ("Service ", "a Service of another namespace"),
            ("backend ", "a backend of another namespace"),
        ]
        .into_iter()
        .find_map(|(kind, what)| before.strip_suffix(kind).map(|b| (b, what)))
        .unwrap_or((before, "a backend of another namespace"));
        out.push_str(before);
        out.push_str(what);
        rest = &rest[end..];
    }
    out.push_str(rest);
    // The canary note on a primary's owner says it once already.
    out.replace(
        "an Ingress of another namespace (another namespace)",
        "an Ingress of another namespace",
    )
}

/// Whether `ns` is a name Kubernetes accepts for a namespace (a DNS-1123 label): the
/// API server sends no other, and none is a shadow's.
fn namespace_name(ns: &str) -> bool {
    let b = ns.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The objects at positions `at` of `from`, each once, in the snapshot's order.
fn pick<T>(mut at: Vec<u32>, from: &[Arc<T>]) -> Vec<Arc<T>> {
    at.sort_unstable();
    at.dedup();
    at.into_iter().map(|i| from[i as usize].clone()).collect()
}
