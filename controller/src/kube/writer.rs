//! The lease holder's duties: Ingress status and events, refreshed whenever the
//! applied model, the leadership or the published address changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ferrule_model::{Model, Snapshot};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use super::events::Events;
use super::status::{self, Publish};
use crate::status::Shared;

/// Runs until the process exits. `current` holds the Ingresses as last watched: a
/// status change publishes no snapshot, so the snapshot's status may be older.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    publish: Option<Publish>,
    identity: String,
    mut leader: watch::Receiver<bool>,
    mut applied: watch::Receiver<Option<Arc<Model>>>,
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    current: Store<Ingress>,
    shared: Arc<Shared>,
) {
    let mut events = Events::new(client.clone(), identity);
    let mut writes = status::Writes::default();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            r = leader.changed() => if r.is_err() { return },
            r = applied.changed() => if r.is_err() { return },
            _ = tick.tick() => {},
        }
        if !*leader.borrow() {
            continue;
        }
        let Some(snap) = snapshots.borrow().clone() else {
            continue;
        };
        if applied.borrow().is_none() {
            continue;
        }
        let owned: std::collections::BTreeSet<_> =
            ferrule_model::owned_ingresses(&snap).into_iter().collect();
        let mut all: BTreeMap<(String, String), Arc<Ingress>> = BTreeMap::new();
        let mut ingresses: BTreeMap<(String, String), Arc<Ingress>> = BTreeMap::new();
        for i in &snap.ingresses {
            let r = crate::nginx::safety::ingress_ref(i);
            let latest = current
                .get(&ObjectRef::new(&r.name).within(&r.namespace))
                .unwrap_or_else(|| i.clone());
            if owned.contains(&r) {
                ingresses.insert((r.namespace.clone(), r.name.clone()), latest.clone());
            }
            all.insert((r.namespace, r.name), latest);
        }
        if let Some(p) = &publish {
            match status::addresses(&client, p).await {
                Ok(want) => {
                    let n = status::write(&client, &ingresses, &all, &want, &mut writes).await;
                    if n > 0 {
                        tracing::info!(ingresses = n, "Ingress status updated");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the published address"),
            }
        }
        let statuses = shared.resources();
        let uids: HashMap<(&str, &str), &str> = snap
            .ingresses
            .iter()
            .filter_map(|i| {
                let m = &i.metadata;
                Some((
                    (m.namespace.as_deref()?, m.name.as_deref()?),
                    m.uid.as_deref()?,
                ))
            })
            .collect();
        let uid = |s: &crate::status::ResourceStatus| {
            (s.kind == "Ingress")
                .then(|| uids.get(&(s.namespace.as_str(), s.name.as_str())))
                .flatten()
                .map(|u| (*u).to_owned())
        };
        events.publish(&statuses, uid).await;
    }
}
