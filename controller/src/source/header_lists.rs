//! Header lists in Kubernetes mode: the ConfigMaps that the controller ConfigMap
//! (`add-headers`, `proxy-set-headers`) and the Ingresses (`custom-headers`,
//! `auth-proxy-set-headers`) name.
//!
//! Any ConfigMap of the watched namespaces may be named, but few are: the others
//! (dashboards, application configuration, `kube-root-ca.crt` in every namespace) can
//! be megabytes each. So the source watches ConfigMaps' metadata only, and fetches
//! the data of a named one when it is first named or its resourceVersion changes.
//! A ConfigMap nobody names costs its metadata, whatever its size.
//!
//! Fetches never hold up a snapshot (an EndpointSlice change must not wait for the
//! API server to answer a GET): a pass that finds a named list missing or stale
//! starts a fetch and publishes what it has; the fetch marks the source dirty when it
//! is done. Only the first snapshot waits for them, so that NGINX never starts
//! without the lists.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;

/// A ConfigMap's namespace and name.
pub(super) type ListName = (String, String);

/// The fetched header lists, and the metadata of every ConfigMap that may be one.
pub(super) struct HeaderLists {
    client: Client,
    metadata: Vec<Store<PartialObjectMeta<ConfigMap>>>,
    fetched: Mutex<BTreeMap<ListName, Fetched>>,
    fetching: AtomicBool,
    /// What the last snapshot named.
    named: Mutex<BTreeSet<ListName>>,
}

struct Fetched {
    version: String,
    map: Arc<ConfigMap>,
}

/// How long a failed fetch waits before the source tries again.
const RETRY: Duration = Duration::from_secs(1);

/// Header lists fetched at once.
const FETCHES: usize = 8;

impl HeaderLists {
    pub(super) fn new(client: Client, metadata: Vec<Store<PartialObjectMeta<ConfigMap>>>) -> Self {
        Self {
            client,
            metadata,
            fetched: Mutex::default(),
            fetching: AtomicBool::new(false),
            named: Mutex::default(),
        }
    }

    /// Follows the metadata watches (`changed` is marked on each of their events):
    /// a change of a list the last snapshot named is fetched, or its deletion marks
    /// `dirty`; other ConfigMaps' changes (another controller's leader election
    /// renewing every few seconds) start no snapshot pass.
    pub(super) async fn follow(self: Arc<Self>, changed: Arc<Notify>, dirty: Arc<Notify>) {
        loop {
            changed.notified().await;
            let deleted = {
                let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
                fetched.keys().any(|name| self.version(name).is_none())
            };
            if deleted {
                dirty.notify_one();
            }
            let stale = self.stale(&self.named.lock().unwrap_or_else(|e| e.into_inner()));
            self.start_fetch(stale, &dirty);
        }
    }

    pub(super) fn metadata(&self) -> &[Store<PartialObjectMeta<ConfigMap>>] {
        &self.metadata
    }

    /// The lists named in `wanted` that exist, as last fetched. Forgets those no
    /// longer named or deleted.
    pub(super) fn get(&self, wanted: &BTreeSet<ListName>) -> Vec<Arc<ConfigMap>> {
        let mut fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        fetched.retain(|name, _| wanted.contains(name) && self.version(name).is_some());
        fetched.values().map(|f| f.map.clone()).collect()
    }

    /// The named lists whose data is missing or older than their metadata.
    fn stale(&self, wanted: &BTreeSet<ListName>) -> Vec<ListName> {
        let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        wanted
            .iter()
            .filter(|name| {
                self.version(name)
                    .is_some_and(|v| fetched.get(*name).is_none_or(|f| f.version != v))
            })
            .cloned()
            .collect()
    }

    fn version(&self, (ns, name): &ListName) -> Option<String> {
        let key = ObjectRef::new(name).within(ns);
        let meta = self.metadata.iter().find_map(|s| s.get(&key))?;
        Some(meta.resource_version().unwrap_or_default())
    }

    /// Fetches the stale lists of `wanted` before returning (the first snapshot).
    pub(super) async fn fetch_now(&self, wanted: &BTreeSet<ListName>) {
        self.fetch_all(self.stale(wanted)).await;
    }

    /// Starts fetching the stale lists of `wanted` (what this snapshot names, which
    /// [`Self::follow`] watches from now on) unless a fetch runs already; it marks
    /// `dirty` when done, and the pass it starts looks again.
    pub(super) fn fetch_later(self: &Arc<Self>, wanted: &BTreeSet<ListName>, dirty: &Arc<Notify>) {
        wanted.clone_into(&mut self.named.lock().unwrap_or_else(|e| e.into_inner()));
        self.start_fetch(self.stale(wanted), dirty);
    }

    /// Fetches `stale` in a task of its own, unless one runs already.
    fn start_fetch(self: &Arc<Self>, stale: Vec<ListName>, dirty: &Arc<Notify>) {
        if stale.is_empty() || self.fetching.swap(true, Ordering::AcqRel) {
            return;
        }
        let (lists, dirty) = (self.clone(), dirty.clone());
        tokio::spawn(async move {
            let failed = !lists.fetch_all(stale).await;
            if failed {
                tokio::time::sleep(RETRY).await;
            }
            lists.fetching.store(false, Ordering::Release);
            dirty.notify_one();
        });
    }

    /// Fetches `names`, a few at a time (thousands of Ingresses may each name a
    /// list of their own); whether every fetch succeeded.
    async fn fetch_all(&self, names: Vec<ListName>) -> bool {
        let failed = AtomicBool::new(false);
        futures::stream::iter(names)
            .for_each_concurrent(FETCHES, |name| {
                let failed = &failed;
                async move {
                    if let Err(e) = self.fetch(&name).await {
                        let configmap = format!("{}/{}", name.0, name.1);
                        tracing::warn!(%configmap, error = %e, "header list not fetched; retrying");
                        failed.store(true, Ordering::Relaxed);
                    }
                }
            })
            .await;
        !failed.into_inner()
    }

    async fn fetch(&self, (ns, name): &ListName) -> Result<(), kube::Error> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), ns);
        let got = api.get_opt(name).await?;
        let mut fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.clone(), name.clone());
        match got {
            Some(mut map) => {
                strip(&mut map);
                let version = map.resource_version().unwrap_or_default();
                let map = Arc::new(map);
                fetched.insert(key, Fetched { version, map });
            }
            None => {
                fetched.remove(&key);
            }
        }
        Ok(())
    }
}

/// The header lists the controller ConfigMap and the Ingresses name (an Ingress's in
/// its own namespace unless it writes `namespace/name`).
pub(super) fn wanted(
    controller: Option<&ConfigMap>,
    ingresses: &[Arc<Ingress>],
    prefix: &str,
) -> BTreeSet<ListName> {
    let mut names = BTreeSet::new();
    let lists = controller.and_then(|c| c.data.as_ref());
    for k in ["add-headers", "proxy-set-headers"] {
        if let Some((ns, name)) = lists.and_then(|d| d.get(k)?.trim().split_once('/')) {
            names.insert((ns.to_owned(), name.to_owned()));
        }
    }
    let keys = [
        format!("{prefix}/custom-headers"),
        format!("{prefix}/auth-proxy-set-headers"),
    ];
    for ing in ingresses {
        let own = ing.metadata.namespace.as_deref().unwrap_or_default();
        for written in keys.iter().filter_map(|k| ing.annotations().get(k)) {
            let (ns, name) = written
                .trim()
                .split_once('/')
                .unwrap_or((own, written.trim()));
            names.insert((ns.to_owned(), name.to_owned()));
        }
    }
    names
}

/// Only what the header lists need of a ConfigMap: its name and `data`.
fn strip(o: &mut ConfigMap) {
    o.metadata.annotations = None;
    o.metadata.labels = None;
    o.metadata.owner_references = None;
    o.metadata.managed_fields = None;
    o.binary_data = None;
}
