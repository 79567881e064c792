//! The endpoint fast path of the build. Endpoint changes are the most frequent event
//! in a large cluster, and a full build costs about 25 µs per Ingress (a quarter of a
//! second at 10k). When two snapshots differ in EndpointSlices only, the new model is
//! the old one with the endpoints of the affected backends recomputed by the same
//! code the full build uses.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;

use super::backends::{self, ServiceIndex};
use crate::model::Model;
use crate::snapshot::Snapshot;

/// The model `build(next)` gives, computed from `prev_model`, which is
/// `build(prev)`, when `next` holds the same objects as `prev` (the same `Arc`s) but
/// for EndpointSlices, and no Service port gains its first endpoint or loses its last
/// (that changes the problems reported on the Ingresses). Also returns the names of
/// the backends whose endpoints changed. `None`: build `next` in full.
pub fn build_endpoint_change(
    prev: &Snapshot,
    prev_model: &Model,
    next: &Snapshot,
) -> Option<(Model, Vec<String>)> {
    if !same_by(&prev.ingresses, &next.ingresses, same_ingress)
        || !same(&prev.ingress_classes, &next.ingress_classes)
        || !same(&prev.services, &next.services)
        || !same(&prev.secrets, &next.secrets)
        || !same(&prev.config_maps, &next.config_maps)
        || !match (&prev.config_map, &next.config_map) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
        || !same_settings(prev, prev_model, next)
        || prev.external_names != next.external_names
    {
        return None;
    }
    let touched = touched_services(&prev.endpoint_slices, &next.endpoint_slices);
    let mut model = prev_model.clone();
    if touched.is_empty() {
        return Some((model, Vec::new()));
    }
    let is_touched = |ns: &str, name: &str| touched.contains(&(ns, name));
    let of_touched = |slices: &[Arc<EndpointSlice>]| -> Vec<Arc<EndpointSlice>> {
        slices
            .iter()
            .filter(|s| service_of(s).is_some_and(|(ns, svc)| is_touched(ns, svc)))
            .cloned()
            .collect()
    };
    let (slices_before, slices_after) = (
        of_touched(&prev.endpoint_slices),
        of_touched(&next.endpoint_slices),
    );
    let services: Vec<_> = next
        .services
        .iter()
        .filter(|s| {
            is_touched(
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default(),
            )
        })
        .cloned()
        .collect();
    let allow_local = next.settings.allow_local_endpoints;
    let before = ServiceIndex::new(&services, &slices_before, allow_local);
    let after = ServiceIndex::new(&services, &slices_after, allow_local);
    // A port without ready endpoints, or with local ones left out, is a problem on
    // every Ingress that routes to it, also where the backend is not kept (an ignored
    // spec.defaultBackend).
    for &(ns, svc) in &touched {
        if before.endpoint_problems(ns, svc) != after.endpoint_problems(ns, svc) {
            return None;
        }
    }
    let mut changed = Vec::new();
    for b in model.backends.values_mut() {
        // A default-backend fallback takes one of two Services' endpoints: built in
        // full when either is touched (still no reload: only endpoints change).
        if let Some(d) = &b.fallback
            && (is_touched(&b.service.namespace, &b.service.name)
                || is_touched(&d.namespace, &d.name))
        {
            return None;
        }
        if b.cluster_ip
            || b.external_name.is_some()
            || !is_touched(&b.service.namespace, &b.service.name)
        {
            continue;
        }
        let endpoints = after.endpoints_of(
            &b.service.namespace,
            &b.service.name,
            &b.service_port,
            b.udp,
        )?;
        if endpoints != b.endpoints {
            changed.push(b.name.clone());
            // Copies this backend only: the others stay shared with `prev_model`.
            Arc::make_mut(b).endpoints = endpoints;
        }
    }
    Some((model, changed))
}

/// The same settings but for the clock, which moves with every snapshot and matters
/// only when a certificate the build found valid expires in between.
fn same_settings(prev: &Snapshot, prev_model: &Model, next: &Snapshot) -> bool {
    let (then, now) = (prev.settings.now, next.settings.now);
    let mut settings = prev.settings.clone();
    settings.now = now;
    settings == next.settings
        && now >= then
        && prev_model
            .certificates_valid_until
            .is_none_or(|until| now <= until)
}

/// The same objects, in the same order (the sources keep unchanged objects' `Arc`s).
fn same<T>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
    same_by(a, b, |_, _| false)
}

/// [`same`], where objects that are not the same `Arc` may still be `equal`.
fn same_by<T>(a: &[Arc<T>], b: &[Arc<T>], equal: impl Fn(&T, &T) -> bool) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(x, y) || equal(x, y))
}

/// Equal for the build, which reads neither an Ingress's status nor the metadata the
/// API server changes with it: the controller's own status writes replace the
/// Ingress objects of the snapshot.
fn same_ingress(a: &Ingress, b: &Ingress) -> bool {
    let (ma, mb) = (&a.metadata, &b.metadata);
    a.spec == b.spec
        && ma.name == mb.name
        && ma.namespace == mb.namespace
        && ma.uid == mb.uid
        && ma.creation_timestamp == mb.creation_timestamp
        && ma.deletion_timestamp == mb.deletion_timestamp
        && ma.annotations == mb.annotations
        && ma.labels == mb.labels
}

/// The Service a slice belongs to: namespace and `kubernetes.io/service-name`.
fn service_of(s: &EndpointSlice) -> Option<(&str, &str)> {
    let svc = s
        .metadata
        .labels
        .as_ref()?
        .get(backends::SERVICE_NAME_LABEL)?;
    Some((s.metadata.namespace.as_deref().unwrap_or_default(), svc))
}

/// Services whose slices were added, removed or replaced (either side of a slice
/// that moved to another Service). By identity, not by name: a manifests directory
/// may hold two slices of the same name, or slices without one.
fn touched_services<'a>(
    prev: &'a [Arc<EndpointSlice>],
    next: &'a [Arc<EndpointSlice>],
) -> HashSet<(&'a str, &'a str)> {
    let ids = |v: &[Arc<EndpointSlice>]| -> HashSet<*const EndpointSlice> {
        v.iter().map(Arc::as_ptr).collect()
    };
    let (before, after) = (ids(prev), ids(next));
    let mut touched = HashSet::new();
    let gone = prev.iter().filter(|s| !after.contains(&Arc::as_ptr(s)));
    let new = next.iter().filter(|s| !before.contains(&Arc::as_ptr(s)));
    for s in gone.chain(new) {
        touched.extend(service_of(s));
    }
    touched
}
