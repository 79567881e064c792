//! The lease holder's duties: Ingress status and events, refreshed whenever the
//! applied model, the leadership or the published address changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferrule_model::{Model, Snapshot};
use kube::Client;
use tokio::sync::watch;

use super::events::Events;
use super::status::{self, Publish};
use crate::status::Shared;

/// Runs until the process exits.
pub async fn run(
    client: Client,
    publish: Option<Publish>,
    identity: String,
    mut leader: watch::Receiver<bool>,
    mut applied: watch::Receiver<Option<Arc<Model>>>,
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    shared: Arc<Shared>,
) {
    let mut events = Events::new(client.clone(), identity);
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
        let ingresses: BTreeMap<(String, String), &k8s_openapi::api::networking::v1::Ingress> =
            snap.ingresses
                .iter()
                .map(|i| (crate::nginx::safety::ingress_ref(i), &**i))
                .filter(|(r, _)| owned.contains(r))
                .map(|(r, i)| ((r.namespace, r.name), i))
                .collect();
        if let Some(p) = &publish {
            match status::addresses(&client, p).await {
                Ok(want) => {
                    let n = status::write(&client, &ingresses, &want).await;
                    if n > 0 {
                        tracing::info!(ingresses = n, "Ingress status updated");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the published address"),
            }
        }
        let statuses = shared.resources();
        let uid = |s: &crate::status::ResourceStatus| {
            snap.ingresses
                .iter()
                .find(|i| {
                    s.kind == "Ingress"
                        && i.metadata.namespace.as_deref() == Some(&s.namespace)
                        && i.metadata.name.as_deref() == Some(&s.name)
                })
                .and_then(|i| i.metadata.uid.clone())
        };
        events.publish(&statuses, uid).await;
    }
}
