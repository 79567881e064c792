//! The Kubernetes source: reflectors for every kind Ferrule reads, turned into
//! snapshots.
//!
//! Every watcher event that changes what the model can read marks the source dirty,
//! and every re-list does: after a disconnect the re-list replaces the store, so
//! objects deleted meanwhile vanish from the next snapshot. A change of only the
//! status or the resourceVersion (Ferrule's own Ingress status writes, at 10k
//! Ingresses one watch event each) updates the store but marks nothing: the model
//! never reads either. The first snapshot waits until every store is ready, so
//! Ferrule never serves a half-listed cluster.
//!
//! The stores keep only what the model and the status writers read (see the
//! `strip_*` functions): at 10k Ingresses and 100k endpoints the fields Ferrule
//! never reads (`kubectl.kubernetes.io/last-applied-configuration`, Pod targetRefs,
//! node names, zones, owner references, labels other than the service name...)
//! would otherwise hold most of the controller's memory.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{Notify, watch};

use ferrule_model::{Settings, Snapshot};

use super::header_lists::{self, HeaderLists};

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct KubeSourceOptions {
    /// Only this namespace (Ingresses, Services, EndpointSlices, Secrets); all when None.
    pub namespace: Option<String>,
    /// The controller ConfigMap (namespace, name).
    pub config_map: Option<(String, String)>,
    /// How long to wait for more events before publishing a snapshot.
    pub coalesce: Duration,
}

struct Stores {
    ingresses: Store<Ingress>,
    classes: Store<IngressClass>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    secrets: Store<Secret>,
    config_maps: Option<Store<ConfigMap>>,
    /// The TCP and UDP services ConfigMaps the settings name.
    stream_config_maps: Vec<Store<ConfigMap>>,
    /// The header lists, looked up among the ConfigMaps of the watched namespaces
    /// and of the controller ConfigMap's namespace.
    header_lists: Arc<HeaderLists>,
}

/// Starts the watchers and a task publishing snapshots on `tx` until the process
/// exits. Returns the Ingress store, which holds each Ingress's current status even
/// when no snapshot was published for a status change (for the status writer).
pub fn start(
    client: Client,
    settings: Settings,
    opts: KubeSourceOptions,
    tx: watch::Sender<Option<Arc<Snapshot>>>,
) -> Store<Ingress> {
    let dirty = Arc::new(Notify::new());
    let _ = CUSTOM_PREFIX.set(settings.annotations_prefix.clone());
    let ns = opts.namespace.as_deref();
    let api = |c: &Client| -> (Api<Ingress>, Api<Service>, Api<EndpointSlice>, Api<Secret>) {
        match ns {
            Some(n) => (
                Api::namespaced(c.clone(), n),
                Api::namespaced(c.clone(), n),
                Api::namespaced(c.clone(), n),
                Api::namespaced(c.clone(), n),
            ),
            None => (
                Api::all(c.clone()),
                Api::all(c.clone()),
                Api::all(c.clone()),
                Api::all(c.clone()),
            ),
        }
    };
    let (ing_api, svc_api, slice_api, secret_api) = api(&client);
    let stores = Stores {
        ingresses: reflect(ing_api, every(), strip_ingress, |_| true, &dirty),
        classes: reflect(
            Api::<IngressClass>::all(client.clone()),
            every(),
            |_| {},
            |_| true,
            &dirty,
        ),
        services: reflect(svc_api, every(), strip_service, |_| true, &dirty),
        slices: reflect(slice_api, every(), strip_slice, |_| true, &dirty),
        // Any type: ingress-nginx serves an Opaque Secret holding tls.crt and tls.key
        // too. strip_secret keeps only those keys, so other Secrets cost their name,
        // and their changes (tokens, Helm releases) build no model.
        secrets: reflect(secret_api, every(), strip_secret, holds_tls, &dirty),
        config_maps: opts
            .config_map
            .as_ref()
            .map(|(ns, name)| named_config_map(&client, ns, name, &dirty)),
        header_lists: {
            // metadata only: `Api<PartialObjectMeta<_>>` asks for nothing else
            type Meta = PartialObjectMeta<ConfigMap>;
            let watched = match ns {
                Some(n) => Api::<Meta>::namespaced(client.clone(), n),
                None => Api::<Meta>::all(client.clone()),
            };
            let controller = opts
                .config_map
                .as_ref()
                .filter(|(cns, _)| ns.is_some_and(|n| n != cns))
                .map(|(cns, _)| Api::<Meta>::namespaced(client.clone(), cns));
            let changed = Arc::new(Notify::new());
            let metadata = std::iter::once(watched)
                .chain(controller)
                .map(|api| {
                    let (reader, writer) = reflector::store();
                    let stream = watcher(api, every())
                        .backoff(WatchBackoff::default())
                        .modify(|o| o.managed_fields_mut().clear())
                        .reflect(writer);
                    tokio::spawn(notify_each(stream, changed.clone()));
                    reader
                })
                .collect();
            let lists = Arc::new(HeaderLists::new(client.clone(), metadata));
            tokio::spawn(lists.clone().follow(changed, dirty.clone()));
            lists
        },
        stream_config_maps: [&settings.tcp_services, &settings.udp_services]
            .into_iter()
            .flatten()
            .map(|c| {
                let (ns, name) = c.split_once('/').unwrap_or(("default", c));
                named_config_map(&client, ns, name, &dirty)
            })
            .collect(),
    };
    let ingresses = stores.ingresses.clone();
    tokio::spawn(async move {
        wait_ready(&stores).await;
        tracing::info!("every watch has listed; publishing snapshots");
        let mut observed = None;
        let wanted = header_lists::wanted(
            controller_config_map(&stores).as_deref(),
            &stores.ingresses.state(),
            &settings.annotations_prefix,
        );
        stores.header_lists.fetch_now(&wanted).await;
        loop {
            let snap = snapshot(&stores, &settings, observed, &dirty);
            tx.send_replace(Some(Arc::new(snap)));
            dirty.notified().await;
            observed = Some(std::time::Instant::now());
            tokio::time::sleep(opts.coalesce).await;
        }
    });
    ingresses
}

/// A reflector of the one ConfigMap `ns/name`.
fn named_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    dirty: &Arc<Notify>,
) -> Store<ConfigMap> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    reflect(
        Api::<ConfigMap>::namespaced(client.clone(), ns),
        cfg,
        |_| {},
        |_| true,
        dirty,
    )
}

/// A reflector store of `api`, stripped by `strip`; changes to `relevant` objects
/// mark the snapshot dirty.
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    strip: fn(&mut K),
    relevant: fn(&K) -> bool,
    dirty: &Arc<Notify>,
) -> Store<K>
where
    K: Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher(api, cfg)
        .backoff(WatchBackoff::default())
        .modify(move |o: &mut K| {
            o.managed_fields_mut().clear();
            strip(o);
        })
        .reflect(writer);
    tokio::spawn(drive(stream, dirty.clone(), relevant));
    reader
}

/// Retries of a failing watch: 0.5 s doubling to 5 s, with jitter, from the first
/// success on again. kube-rs's default goes up to 30 s, which after an API outage
/// left one kind (Secrets: TLS hosts on the default certificate) a minute behind the
/// others.
struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (d * 2).min(Self::MAX);
        // up to a fifth more, so that replicas do not retry in step
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos());
        Some(d + d.mul_f64(f64::from(nanos % 1000) / 5000.0))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

fn every() -> watcher::Config {
    watcher::Config::default()
}

/// Whether a (stripped) Secret can serve TLS, client certificate checks (a CA) or
/// basic auth (an htpasswd `auth`).
fn holds_tls(s: &Secret) -> bool {
    s.data.as_ref().is_some_and(|d| {
        ["tls.crt", "tls.key", "ca.crt", "ca.crl", "auth"]
            .iter()
            .any(|k| d.contains_key(*k))
    })
}

/// Annotations of an Ingress the model reads: ours (under any prefix that ends in
/// `ingress.kubernetes.io`, so that `--annotations-prefix` needs nothing here, and
/// any other prefix named by that flag) and the legacy class.
fn ingress_annotation_wanted(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    prefix.ends_with("ingress.kubernetes.io")
        || key == "kubernetes.io/ingress.class"
        || CUSTOM_PREFIX.get().is_some_and(|p| p == prefix)
}

/// A `--annotations-prefix` that [`ingress_annotation_wanted`] would not keep by its
/// suffix (the reflectors' strip functions are plain functions).
static CUSTOM_PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Drops the annotations the model does not read (typically the large
/// `kubectl.kubernetes.io/last-applied-configuration`). Spec, status, labels,
/// uid and timestamps stay: the model, the config-safety fingerprint, the status
/// writer and the events use them.
pub fn strip_ingress(o: &mut Ingress) {
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| ingress_annotation_wanted(k));
    }
}

/// A Service is read for its type, ClusterIP (service-upstream) and ports only (and
/// its name and namespace).
pub fn strip_service(o: &mut Service) {
    o.metadata.annotations = None;
    o.metadata.labels = None;
    o.metadata.owner_references = None;
    if let Some(spec) = o.spec.as_mut() {
        spec.selector = None;
    }
}

/// An EndpointSlice is read for its service-name label, address type, ports, and the
/// addresses and readiness of its endpoints: Pod references, node names, zones,
/// hints, owner references and the other labels go.
pub fn strip_slice(o: &mut EndpointSlice) {
    o.metadata.annotations = None;
    o.metadata.owner_references = None;
    if let Some(labels) = o.metadata.labels.as_mut() {
        labels.retain(|k, _| k == "kubernetes.io/service-name");
    }
    for ep in o.endpoints.iter_mut().flatten() {
        ep.target_ref = None;
        ep.node_name = None;
        ep.zone = None;
        ep.hints = None;
        ep.hostname = None;
        ep.deprecated_topology = None;
    }
}

/// A TLS Secret is read for its certificate, key and CA only, a basic-auth Secret
/// for its htpasswd `auth` (so `auth-secret-type: auth-map` is not available in
/// Kubernetes mode: its users are every key); its annotations (a
/// `last-applied-configuration` there holds a second copy of the key) go.
pub fn strip_secret(o: &mut Secret) {
    o.metadata.annotations = None;
    o.metadata.labels = None;
    o.metadata.owner_references = None;
    if let Some(data) = o.data.as_mut() {
        data.retain(|k, _| {
            matches!(
                k.as_str(),
                "tls.crt" | "tls.key" | "ca.crt" | "ca.crl" | "auth"
            )
        });
    }
}

async fn drive<S, K>(stream: S, dirty: Arc<Notify>, relevant: fn(&K) -> bool)
where
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    K: Resource + serde::Serialize,
{
    let mut stream = std::pin::pin!(stream);
    let mut seen = Seen::default();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => {
                if seen.changes(&ev, relevant) {
                    if tracing::enabled!(tracing::Level::DEBUG) {
                        let (event, object) = describe(&ev);
                        let kind = std::any::type_name::<K>().rsplit("::").next();
                        tracing::debug!(kind, event, object, "a change the model reads");
                    }
                    dirty.notify_one();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = std::any::type_name::<K>(), "watch error; retrying with backoff")
            }
        }
    }
}

/// Marks `changed` on every event of `stream` (the ConfigMap metadata watches,
/// which [`HeaderLists::follow`] sorts out).
async fn notify_each<S, K>(stream: S, changed: Arc<Notify>)
where
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => changed.notify_one(),
            Err(e) => {
                tracing::warn!(error = %e, kind = std::any::type_name::<K>(), "watch error; retrying with backoff")
            }
        }
    }
}

/// What the model could read of each object of one kind, as last seen, to tell
/// changes from status-only and resourceVersion-only updates.
#[derive(Default)]
struct Seen {
    current: HashMap<(String, String), u64>,
    /// Filled during a re-list, then replaces `current` (so that objects deleted
    /// while disconnected are forgotten).
    relist: HashMap<(String, String), u64>,
}

impl Seen {
    #[cfg(test)]
    fn changes_of<K: Resource + serde::Serialize>(&mut self, ev: &watcher::Event<K>) -> bool {
        self.changes(ev, |_| true)
    }

    /// Records the event; whether it may change the model.
    /// Objects that are not `relevant` (a Secret without TLS keys) change nothing
    /// unless they were relevant before.
    fn changes<K: Resource + serde::Serialize>(
        &mut self,
        ev: &watcher::Event<K>,
        relevant: fn(&K) -> bool,
    ) -> bool {
        match ev {
            watcher::Event::Apply(o) if !relevant(o) => self.current.remove(&key(o)).is_some(),
            watcher::Event::Apply(o) => {
                let fp = model_fingerprint(o);
                self.current.insert(key(o), fp) != Some(fp)
            }
            watcher::Event::Delete(o) => self.current.remove(&key(o)).is_some(),
            watcher::Event::Init => {
                self.relist.clear();
                true
            }
            watcher::Event::InitApply(o) => {
                if relevant(o) {
                    self.relist.insert(key(o), model_fingerprint(o));
                }
                true
            }
            watcher::Event::InitDone => {
                self.current = std::mem::take(&mut self.relist);
                true
            }
        }
    }
}

/// A watcher event's kind and object (`namespace/name`), for the debug log.
fn describe<K: Resource>(ev: &watcher::Event<K>) -> (&'static str, String) {
    let name = |o: &K| {
        let (ns, name) = key(o);
        format!("{ns}/{name}")
    };
    match ev {
        watcher::Event::Apply(o) => ("apply", name(o)),
        watcher::Event::Delete(o) => ("delete", name(o)),
        watcher::Event::Init => ("relist", String::new()),
        watcher::Event::InitApply(o) => ("relist-apply", name(o)),
        watcher::Event::InitDone => ("relist-done", String::new()),
    }
}

fn key<K: Resource>(o: &K) -> (String, String) {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// A hash of everything in an object but what the model never reads and changes
/// without the user changing anything: `status` (Ingress status written by the
/// controller, Service load-balancer status), `metadata.resourceVersion`,
/// `metadata.generation` (follows the spec, which is hashed) and managed fields.
pub fn model_fingerprint<K: serde::Serialize>(o: &K) -> u64 {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
            meta.remove("generation");
            meta.remove("managedFields");
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // serde_json maps are sorted (no preserve_order): equal objects, equal text.
    v.to_string().hash(&mut h);
    h.finish()
}

async fn wait_ready(s: &Stores) {
    let _ = s.ingresses.wait_until_ready().await;
    let _ = s.classes.wait_until_ready().await;
    let _ = s.services.wait_until_ready().await;
    let _ = s.slices.wait_until_ready().await;
    let _ = s.secrets.wait_until_ready().await;
    for cm in (s.config_maps.iter()).chain(&s.stream_config_maps) {
        let _ = cm.wait_until_ready().await;
    }
    for cm in s.header_lists.metadata() {
        let _ = cm.wait_until_ready().await;
    }
}

fn controller_config_map(s: &Stores) -> Option<Arc<ConfigMap>> {
    s.config_maps
        .as_ref()
        .and_then(|c| c.state().into_iter().next())
}

/// The snapshot of the stores, with the header lists fetched so far; starts
/// fetching those missing or changed (see [`HeaderLists`]).
fn snapshot(
    s: &Stores,
    settings: &Settings,
    observed: Option<std::time::Instant>,
    dirty: &Arc<Notify>,
) -> Snapshot {
    let mut settings = settings.clone();
    settings.now = super::manifests::now();
    let config_map = controller_config_map(s);
    let ingresses = s.ingresses.state();
    let wanted = header_lists::wanted(
        config_map.as_deref(),
        &ingresses,
        &settings.annotations_prefix,
    );
    s.header_lists.fetch_later(&wanted, dirty);
    Snapshot {
        ingresses: ingresses.clone(),
        ingress_classes: s.classes.state(),
        services: s.services.state(),
        endpoint_slices: s.slices.state(),
        secrets: s.secrets.state(),
        config_maps: (s.stream_config_maps.iter())
            .flat_map(|c| c.state())
            .chain(s.header_lists.get(&wanted))
            .collect(),
        config_map,
        settings,
        observed,
        ..Snapshot::default()
    }
}

/// A client from `--kubeconfig PATH`, else the in-cluster or default configuration.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn watch_retries_double_to_five_seconds_and_start_over() {
        use kube::runtime::utils::Backoff;
        let mut b = super::WatchBackoff::default();
        let first: Vec<f64> = b.by_ref().take(6).map(|d| d.as_secs_f64()).collect();
        let base = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0];
        for (got, want) in first.iter().zip(base) {
            assert!(*got >= want && *got <= want * 1.2, "{first:?}");
        }
        b.reset();
        assert!(b.next().unwrap() < std::time::Duration::from_millis(600));
    }

    use super::*;
    use serde_json::json;

    fn from<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    /// Objects as a real cluster holds them (kubectl apply, EndpointSlice controller).
    fn cluster() -> Snapshot {
        let last_applied = "{\"apiVersion\":\"v1\",\"kind\":\"...\"}";
        let ing: Ingress = from(json!({
            "metadata": {
                "name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": { "app": "web" },
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                    "nginx.ingress.kubernetes.io/proxy-read-timeout": "120",
                    "nginx.ingress.kubernetes.io/affinity": "cookie",
                    "kubernetes.io/ingress.class": "ferrule",
                    "example.com/owner": "team-a",
                },
            },
            "spec": {
                "tls": [{ "hosts": ["web.example"], "secretName": "web-tls" }],
                "rules": [{ "host": "web.example", "http": { "paths": [
                    { "path": "/", "pathType": "Prefix",
                      "backend": { "service": { "name": "web", "port": { "name": "http" } } } },
                ]}}],
            },
            "status": { "loadBalancer": { "ingress": [{ "ip": "192.0.2.1" }] } },
        }));
        let svc: Service = from(json!({
            "metadata": {
                "name": "web", "namespace": "ns", "uid": "s1",
                "labels": { "app": "web" },
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": last_applied },
            },
            "spec": {
                "selector": { "app": "web" },
                "ports": [{ "name": "http", "port": 80, "targetPort": "http" }],
            },
        }));
        let slice: EndpointSlice = from(json!({
            "metadata": {
                "name": "web-abc", "namespace": "ns",
                "labels": {
                    "kubernetes.io/service-name": "web",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                },
                "annotations": { "endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z" },
                "ownerReferences": [{ "apiVersion": "v1", "kind": "Service", "name": "web", "uid": "s1" }],
            },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
            "endpoints": [
                { "addresses": ["10.0.0.1"], "conditions": { "ready": true },
                  "nodeName": "node-1", "zone": "a", "hostname": "web-0",
                  "targetRef": { "kind": "Pod", "namespace": "ns", "name": "web-0", "uid": "p0" } },
                { "addresses": ["10.0.0.2"], "conditions": { "ready": false },
                  "nodeName": "node-2", "zone": "b",
                  "targetRef": { "kind": "Pod", "namespace": "ns", "name": "web-1", "uid": "p1" } },
            ],
        }));
        let (cert, key) = {
            let c = rcgen::generate_simple_self_signed(vec!["web.example".to_owned()]).unwrap();
            (c.cert.pem(), c.signing_key.serialize_pem())
        };
        let b64 = |s: &str| k8s_openapi::ByteString(s.as_bytes().to_vec());
        let secret: Secret = from(json!({
            "metadata": {
                "name": "web-tls", "namespace": "ns",
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": last_applied },
            },
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": b64(&cert), "tls.key": b64(&key), "ca.crt": b64(&cert),
                "extra": b64("not read"),
            },
        }));
        let class: IngressClass = from(json!({
            "metadata": { "name": "ferrule" },
            "spec": { "controller": ferrule_model::snapshot::DEFAULT_CONTROLLER },
        }));
        Snapshot {
            ingresses: vec![Arc::new(ing)],
            ingress_classes: vec![Arc::new(class)],
            services: vec![Arc::new(svc)],
            endpoint_slices: vec![Arc::new(slice)],
            secrets: vec![Arc::new(secret)],
            config_map: None,
            settings: Settings::default(),
            observed: None,
            ..Snapshot::default()
        }
    }

    fn stripped(s: &Snapshot) -> Snapshot {
        fn each<K: Clone>(v: &[Arc<K>], f: fn(&mut K)) -> Vec<Arc<K>> {
            v.iter()
                .map(|o| {
                    let mut o = (**o).clone();
                    f(&mut o);
                    Arc::new(o)
                })
                .collect()
        }
        Snapshot {
            ingresses: each(&s.ingresses, strip_ingress),
            services: each(&s.services, strip_service),
            endpoint_slices: each(&s.endpoint_slices, strip_slice),
            secrets: each(&s.secrets, strip_secret),
            ..s.clone()
        }
    }

    #[test]
    fn a_status_only_change_is_not_a_change() {
        let ing = cluster().ingresses[0].clone();
        let mut seen = Seen::default();
        let apply = |o: &Ingress| watcher::Event::Apply(o.clone());
        assert!(seen.changes_of(&apply(&ing)), "a new object is a change");
        assert!(
            !seen.changes_of(&apply(&ing)),
            "the same object again is not"
        );

        // Ferrule's own status write, as the watch reports it back.
        let mut written = (*ing).clone();
        written.metadata.resource_version = Some("8".into());
        written.status = Some(from(
            json!({ "loadBalancer": { "ingress": [{ "ip": "192.0.2.9" }] } }),
        ));
        assert!(
            !seen.changes_of(&apply(&written)),
            "status and resourceVersion only"
        );

        let mut annotated = written.clone();
        annotated
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(
                "nginx.ingress.kubernetes.io/ssl-redirect".into(),
                "false".into(),
            );
        assert!(
            seen.changes_of(&apply(&annotated)),
            "an annotation is a change"
        );

        let mut edited = annotated.clone();
        edited.metadata.generation = Some(2);
        edited.spec.as_mut().unwrap().rules.as_mut().unwrap()[0].host =
            Some("other.example".into());
        assert!(seen.changes_of(&apply(&edited)), "a spec edit is a change");

        assert!(seen.changes_of(&watcher::Event::Delete(edited.clone())));
        assert!(
            seen.changes_of(&apply(&edited)),
            "re-created after a delete"
        );

        // A re-list always counts (deletions while disconnected), and forgets what it
        // did not list.
        assert!(seen.changes_of(&watcher::Event::<Ingress>::Init));
        assert!(seen.changes_of(&watcher::Event::<Ingress>::InitDone));
        assert!(seen.changes_of(&apply(&edited)), "forgotten by the re-list");
    }

    /// Secrets without TLS keys (tokens, Helm releases) build no model, unless one
    /// had them before.
    #[test]
    fn only_secrets_holding_tls_keys_are_changes() {
        let tls = (*cluster().secrets[0]).clone();
        let mut plain = tls.clone();
        plain.metadata.name = Some("token".into());
        plain.data = Some([("token".to_owned(), k8s_openapi::ByteString(b"x".to_vec()))].into());
        strip_secret(&mut plain);
        let mut seen = Seen::default();
        let apply = |o: &Secret| watcher::Event::Apply(o.clone());
        assert!(!seen.changes(&apply(&plain), holds_tls), "a new token");
        assert!(!seen.changes(&watcher::Event::Delete(plain.clone()), holds_tls));
        assert!(seen.changes(&apply(&tls), holds_tls), "a TLS Secret");
        let mut emptied = tls.clone();
        emptied.data = None;
        assert!(
            seen.changes(&apply(&emptied), holds_tls),
            "it lost its keys"
        );
        assert!(
            !seen.changes(&apply(&emptied), holds_tls),
            "and stays without"
        );
    }

    #[test]
    fn stripping_keeps_the_model_and_drops_what_it_does_not_read() {
        let full = cluster();
        let lean = stripped(&full);
        let (a, b) = (ferrule_model::build(&full), ferrule_model::build(&lean));
        assert_eq!(a, b, "the model is the same from stripped objects");
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.backends.values().next().unwrap().endpoints.len(), 1);
        assert_eq!(a.certificates.len(), 1, "the TLS Secret is still usable");

        let ing = &lean.ingresses[0];
        let keys: Vec<_> = ing.metadata.annotations.as_ref().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "kubernetes.io/ingress.class",
                "nginx.ingress.kubernetes.io/affinity",
                "nginx.ingress.kubernetes.io/proxy-read-timeout"
            ]
        );
        assert!(
            ing.status.is_some(),
            "the status writer compares the status"
        );
        assert_eq!(
            ing.metadata.uid.as_deref(),
            Some("u1"),
            "events name the uid"
        );
        assert!(ing.metadata.labels.is_some());

        let slice = &lean.endpoint_slices[0];
        assert_eq!(slice.metadata.labels.as_ref().unwrap().len(), 1);
        assert!(slice.metadata.owner_references.is_none());
        let eps = slice.endpoints.as_ref().unwrap();
        assert!(
            eps.iter()
                .all(|e| e.target_ref.is_none() && e.node_name.is_none() && e.zone.is_none())
        );
        assert_eq!(eps[1].conditions.as_ref().unwrap().ready, Some(false));

        assert!(lean.services[0].spec.as_ref().unwrap().selector.is_none());
        let data = lean.secrets[0].data.as_ref().unwrap();
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ca.crt", "tls.crt", "tls.key"]
        );
    }
}
