//! The Kubernetes source: reflectors for every kind Ferrule reads, turned into
//! snapshots.
//!
//! Every raw watcher event, re-lists included, marks the source dirty: after a
//! disconnect the re-list replaces the store, so objects deleted meanwhile vanish
//! from the next snapshot. The first snapshot waits until every store is ready, so
//! Ferrule never serves a half-listed cluster.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{Notify, watch};

use ferrule_model::{Settings, Snapshot};

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
}

/// Starts the watchers and publishes snapshots on `tx` until the process exits.
pub async fn run(
    client: Client,
    settings: Settings,
    opts: KubeSourceOptions,
    tx: watch::Sender<Option<Arc<Snapshot>>>,
) {
    let dirty = Arc::new(Notify::new());
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
        ingresses: reflect(ing_api, watcher::Config::default(), &dirty),
        classes: reflect(
            Api::<IngressClass>::all(client.clone()),
            watcher::Config::default(),
            &dirty,
        ),
        services: reflect(svc_api, watcher::Config::default(), &dirty),
        slices: reflect(slice_api, watcher::Config::default(), &dirty),
        // Only TLS Secrets matter; the field selector keeps the rest out of memory.
        secrets: reflect(
            secret_api,
            watcher::Config::default().fields("type=kubernetes.io/tls"),
            &dirty,
        ),
        config_maps: opts.config_map.as_ref().map(|(ns, name)| {
            let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
            reflect(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                cfg,
                &dirty,
            )
        }),
    };
    wait_ready(&stores).await;
    tracing::info!("every watch has listed; publishing snapshots");
    loop {
        let snap = snapshot(&stores, &settings);
        tx.send_replace(Some(Arc::new(snap)));
        dirty.notified().await;
        tokio::time::sleep(opts.coalesce).await;
    }
}

fn reflect<K>(api: Api<K>, cfg: watcher::Config, dirty: &Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher(api, cfg)
        .default_backoff()
        .modify(|o: &mut K| {
            o.managed_fields_mut().clear();
        })
        .reflect(writer);
    tokio::spawn(drive(stream, dirty.clone()));
    reader
}

async fn drive<S, K>(stream: S, dirty: Arc<Notify>)
where
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => dirty.notify_one(),
            Err(e) => {
                tracing::warn!(error = %e, kind = std::any::type_name::<K>(), "watch error; retrying with backoff")
            }
        }
    }
}

async fn wait_ready(s: &Stores) {
    let _ = s.ingresses.wait_until_ready().await;
    let _ = s.classes.wait_until_ready().await;
    let _ = s.services.wait_until_ready().await;
    let _ = s.slices.wait_until_ready().await;
    let _ = s.secrets.wait_until_ready().await;
    if let Some(cm) = &s.config_maps {
        let _ = cm.wait_until_ready().await;
    }
}

fn snapshot(s: &Stores, settings: &Settings) -> Snapshot {
    let mut settings = settings.clone();
    settings.now = super::manifests::now();
    Snapshot {
        ingresses: s.ingresses.state(),
        ingress_classes: s.classes.state(),
        services: s.services.state(),
        endpoint_slices: s.slices.state(),
        secrets: s.secrets.state(),
        config_map: s
            .config_maps
            .as_ref()
            .and_then(|c| c.state().into_iter().next()),
        settings,
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

/// Name of an object for logs.
pub fn describe<K: ResourceExt>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}
