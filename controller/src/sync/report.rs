//! What each pass says: the status of every resource (`/status/resources`, the
//! metrics, and in Kubernetes mode the lease holder's Ingress status and Events),
//! the words of the balancer's refusals, and readiness.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrule_model::{Model, ResourceRef, Severity, Snapshot};

use super::Common;
use crate::balancer::{BACKENDS, CERTIFICATES, DEFAULT_CERTIFICATE, Refused};
use crate::metrics::rejected::{Reason, Rejection};
use crate::nginx::safety::Exclusions;
use crate::status::{ResourceState, ResourceStatus};

/// Ready: NGINX serves and the balancer is synced, not every Ingress is excluded,
/// and a pod that never served its ConfigMap does not serve without it. Recomputed
/// on every sync, so it comes back by itself (e.g. when the excluded resources or
/// the ConfigMap are fixed or deleted).
///
/// The ConfigMap rule is config safety's for shared inputs: a running pod keeps the
/// last good ConfigMap and stays Ready, but a new pod has none, and a rollout must
/// stall on it rather than finish with every replica serving the defaults (without
/// the administrator's timeouts, HSTS or global restrictions).
pub(super) fn update_readiness(common: &Common, snap: &Snapshot, model: &Model, excl: &Exclusions) {
    let owned = ferrule_model::owned_ingresses(snap);
    let serving = common.serving.load(Ordering::SeqCst);
    let unproven = if common.configmap_proven.load(Ordering::SeqCst) {
        None
    } else {
        configmap_rejection(snap, model, excl)
    };
    if let Some(why) = &unproven
        && !common.configmap_unready_logged.swap(true, Ordering::SeqCst)
    {
        tracing::error!(
            configmap = %why.0,
            reason = %why.1,
            "not Ready: the ConfigMap is rejected and this pod has no earlier good version of it; \
             Ready once it is fixed"
        );
    }
    common
        .shared
        .set_ready(serving && !excl.serves_none_of(&owned) && unproven.is_none());
}

/// Why the snapshot's ConfigMap is not applied whole (`namespace/name`, reason):
/// `nginx -t` held it back, or the model refused a value of it.
pub(super) fn configmap_rejection(
    snap: &Snapshot,
    model: &Model,
    excl: &Exclusions,
) -> Option<(String, String)> {
    let cm = snap.config_map.as_deref()?;
    let r = ResourceRef::new(
        "ConfigMap",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default(),
    );
    let name = format!("{}/{}", r.namespace, r.name);
    if let Some(held) = &excl.configmap {
        return Some((name, held.message.clone()));
    }
    model
        .problems
        .iter()
        .find(|p| p.resource == r && p.severity == Severity::Error)
        .map(|p| (name, p.message.clone()))
}

/// What a refusal of the balancer says, and the resources it is reported on: a
/// certificate's Secret and the Ingresses that name it for the host, a backend's
/// Service and the Ingresses that route to it, the default certificate's Secret.
fn refusal_status(
    snap: &Snapshot,
    model: &Model,
    owned: &std::collections::BTreeSet<ResourceRef>,
    r: &Refused,
) -> (String, Vec<ResourceRef>) {
    let full = if r.full {
        " (the store is full: --certificate-store-size, or fewer or smaller certificates)"
    } else {
        ""
    };
    let mut resources = Vec::new();
    let message = match r.kind {
        CERTIFICATES => {
            let host = r.name.as_str();
            let server = model.server(host);
            let secret = server
                .and_then(|s| s.tls.as_ref()?.certificate.as_ref())
                .and_then(|k| model.certificates.get(k))
                .map(|c| c.secret.clone());
            if let Some(secret) = &secret {
                resources.push(secret.clone());
                for ing in &snap.ingresses {
                    let m = &ing.metadata;
                    let ing_ref = ResourceRef::new(
                        "Ingress",
                        m.namespace.as_deref().unwrap_or_default(),
                        m.name.as_deref().unwrap_or_default(),
                    );
                    let names_it = ing_ref.namespace == secret.namespace
                        && ing
                            .spec
                            .iter()
                            .flat_map(|s| s.tls.iter().flatten())
                            .any(|t| {
                                t.secret_name.as_deref() == Some(secret.name.as_str())
                                    && t.hosts
                                        .iter()
                                        .flatten()
                                        .any(|h| h.eq_ignore_ascii_case(host))
                            });
                    if names_it && owned.contains(&ing_ref) {
                        resources.push(ing_ref);
                    }
                }
            } else {
                resources.extend(server.and_then(|s| s.owner.clone()));
            }
            format!(
                "the balancer refused the certificate of host {host}: {}{full}; the host \
                 keeps the certificate it had, else is served the default one",
                r.message
            )
        }
        BACKENDS => {
            if let Some(b) = model.backends.get(&r.name) {
                resources.push(b.service.clone());
            }
            for s in model.servers.iter() {
                for l in &s.locations {
                    if matches!(&l.target, ferrule_model::Target::Backend(n) if *n == r.name) {
                        resources.push(l.owner.clone());
                    }
                }
            }
            format!(
                "the balancer refused backend {}: {}{full}; its last accepted version, if \
                 any, keeps serving",
                r.name, r.message
            )
        }
        _ => {
            debug_assert_eq!(r.kind, DEFAULT_CERTIFICATE);
            resources.extend(
                model
                    .default_certificate
                    .as_ref()
                    .and_then(|k| model.certificates.get(k))
                    .map(|c| c.secret.clone()),
            );
            format!(
                "the balancer refused the default certificate: {}{full}",
                r.message
            )
        }
    };
    resources.sort();
    resources.dedup();
    (message, resources)
}

/// Recomputes what `/status/resources` reports from the model NGINX serves and the
/// exclusions it was built with.
pub(super) fn publish_status(
    common: &Common,
    snap: &Snapshot,
    model: &Arc<Model>,
    excl: &Exclusions,
) {
    let mut by_resource: BTreeMap<ResourceRef, (bool, Vec<String>)> = BTreeMap::new();
    // Why each rejected resource is, for the metrics.
    let mut why: Vec<(ResourceRef, Reason)> = Vec::new();
    for r in ferrule_model::owned_ingresses(snap) {
        by_resource.entry(r).or_default();
    }
    for (r, e) in &excl.ingresses {
        why.push((
            r.clone(),
            if e.fallback {
                Reason::PreviousVersion
            } else {
                Reason::Excluded
            },
        ));
        let entry = by_resource.entry(r.clone()).or_default();
        entry.0 = true;
        entry.1.push(if e.fallback {
            format!(
                "this version is not applied: nginx -t failed: {}; the previous version keeps serving",
                e.message
            )
        } else {
            format!(
                "excluded from the configuration: nginx -t failed: {}",
                e.message
            )
        });
    }
    if let Some(cm) = snap.config_map.as_deref() {
        let r = ResourceRef::new(
            "ConfigMap",
            cm.metadata.namespace.as_deref().unwrap_or_default(),
            cm.metadata.name.as_deref().unwrap_or_default(),
        );
        if excl.configmap.is_some() {
            why.push((r.clone(), Reason::HeldBack));
        }
        let entry = by_resource.entry(r).or_default();
        if let Some(held) = &excl.configmap {
            entry.0 = true;
            entry.1.push(held.message.clone());
        }
    }
    for p in &model.problems {
        if p.severity == Severity::Error {
            why.push((p.resource.clone(), Reason::Problem(p.kind)));
        }
        let entry = by_resource.entry(p.resource.clone()).or_default();
        entry.0 |= p.severity == Severity::Error;
        entry.1.push(p.message.clone());
    }
    common.refusals_changed.store(false, Ordering::SeqCst);
    let refusals = common.refusals.lock().expect("refusals lock").clone();
    if !refusals.is_empty() {
        let owned: std::collections::BTreeSet<ResourceRef> =
            ferrule_model::owned_ingresses(snap).into_iter().collect();
        for r in &refusals {
            let (message, resources) = refusal_status(snap, model, &owned, r);
            for res in resources {
                why.push((res.clone(), Reason::BalancerRefused));
                let entry = by_resource.entry(res).or_default();
                entry.0 = true;
                entry.1.push(message.clone());
            }
        }
    }
    let statuses = by_resource
        .into_iter()
        .map(|(r, (rejected, messages))| ResourceStatus {
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            state: if rejected {
                ResourceState::Rejected
            } else {
                ResourceState::Applied
            },
            message: messages.join("; "),
        })
        .collect();
    common.shared.set_resources(statuses);
    let rejections = why
        .into_iter()
        .map(|(r, reason)| Rejection {
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            reason,
        })
        .collect();
    common.shared.metrics.served.set(model.clone(), rejections);
}
