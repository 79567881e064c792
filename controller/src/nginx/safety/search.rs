//! The steps of the search for what made `nginx -t` fail: locate by file:line,
//! bisection over the Ingresses, the shared-input check when a ConfigMap change
//! makes several Ingresses fail, and one by one as the last resort.

use std::collections::BTreeSet;

use ferrule_model::{ResourceRef, Snapshot};
use k8s_openapi::api::core::v1::ConfigMap;

use super::{Exclusions, Pass, Probe, Served, configmap_fingerprint, ingress_ref};
use crate::nginx::process::TestFailure;
use crate::nginx::{Applied, ApplyError};

/// Maps an `nginx -t` error to the Ingress or ConfigMap that produced the named
/// line. Lines Ferrule generated on its own (e.g. the default server) name nothing.
pub(super) fn locate<P: Probe>(
    probe: &P,
    written: &P::Written,
    failure: &TestFailure,
) -> Option<ResourceRef> {
    let r = probe.locate(written, failure)?;
    (r.kind == "Ingress" || r.kind == "ConfigMap").then_some(r)
}

/// Excludes an Ingress NGINX rejected; returns false when that changed nothing.
///
/// Shared input: when the ConfigMap changed and a second resource fails in this
/// pass, one extra test checks whether the last two pass with the last good
/// ConfigMap. If they do, the ConfigMap is blamed and held back instead: the
/// pass's exclusions are undone, and nothing reloads for a change that was not
/// applied. The check keeps a harmless ConfigMap edit from being blamed for
/// Ingresses that are broken on their own.
pub(super) async fn ingress_failed<P: Probe>(
    probe: &mut P,
    snap: &Snapshot,
    excl: &mut Exclusions,
    pass: &mut Pass,
    r: ResourceRef,
    failure: &TestFailure,
) -> Result<bool, ApplyError> {
    let before = excl.ingresses.get(&r).cloned();
    excl.exclude(snap, &r, &failure.message);
    if excl.ingresses.get(&r) == before.as_ref() {
        return Ok(false);
    }
    if !pass.failed.contains(&r) {
        pass.failed.push(r);
    }
    if pass.failed.len() < 2 || !configmap_suspect(snap, excl) {
        return Ok(true);
    }
    let pair = pass.failed[pass.failed.len() - 2..].to_vec();
    let mut trial = excl.clone();
    for p in &pair {
        match pass.start.get(p) {
            Some(e) => trial.ingresses.insert(p.clone(), e.clone()),
            None => trial.ingresses.remove(p),
        };
    }
    trial.hold_configmap(snap, false, "");
    if test_without(probe, snap, &trial, &BTreeSet::new(), pass)
        .await?
        .is_ok()
    {
        let message = format!(
            "this ConfigMap change broke the configuration of {} and {} ({}); \
             not applied, the last good ConfigMap stays in use",
            pair[0], pair[1], failure.message
        );
        blame_configmap(snap, excl, pass, &message);
    }
    Ok(true)
}

/// Holds the ConfigMap back (the last good one stays in use) and retries the
/// Ingresses excluded earlier in this pass, which may have failed because of it.
/// Returns false when the ConfigMap did not change, so cannot be the cause.
pub(super) fn blame_configmap(
    snap: &Snapshot,
    excl: &mut Exclusions,
    pass: &mut Pass,
    message: &str,
) -> bool {
    if !configmap_suspect(snap, excl) {
        return false;
    }
    excl.ingresses = pass.start.clone();
    pass.failed.clear();
    excl.hold_configmap(snap, false, message);
    true
}

/// Whether the snapshot's ConfigMap differs from the one NGINX last accepted (at
/// startup: whether there is one) and is not held back already.
fn configmap_suspect(snap: &Snapshot, excl: &Exclusions) -> bool {
    let fp = |cm: Option<&ConfigMap>| cm.map(configmap_fingerprint);
    excl.configmap.is_none()
        && snap.config_map.is_some()
        && fp(snap.config_map.as_deref()) != fp(excl.fallbacks.config_map.as_deref())
}

/// The Ingresses in the configuration (sorted, so bisection is deterministic).
fn candidates(snap: &Snapshot, excl: &Exclusions) -> Vec<ResourceRef> {
    let owned: BTreeSet<ResourceRef> = ferrule_model::owned_ingresses(snap).into_iter().collect();
    let on: BTreeSet<ResourceRef> = excl
        .apply(snap, &BTreeSet::new())
        .ingresses
        .iter()
        .map(|i| ingress_ref(i))
        .filter(|r| owned.contains(r))
        .collect();
    on.into_iter().collect()
}

/// For an error that names no resource: finds one Ingress whose configuration
/// fails, by switching off halves of the candidates, with the error it causes
/// (which may differ from `failure` when several are broken). `Err` with the error
/// of the configuration without any Ingress when that fails too: the shared
/// configuration is at fault.
///
/// With n candidates this takes at most ⌈log2 n⌉ + 1 tests: one without any
/// Ingress, then one per halving.
pub(super) async fn bisect<P: Probe>(
    probe: &mut P,
    snap: &Snapshot,
    excl: &Exclusions,
    pass: &mut Pass,
    failure: TestFailure,
) -> Result<Result<(ResourceRef, TestFailure), TestFailure>, ApplyError> {
    let candidates = candidates(snap, excl);
    let all_but_first =
        |k: usize| -> BTreeSet<ResourceRef> { candidates[k..].iter().cloned().collect() };
    if let Err(base) = test_without(probe, snap, excl, &all_but_first(0), pass).await? {
        return Ok(Err(base));
    }
    // Invariant: the first `lo` candidates pass together, the first `hi` fail
    // together with `failure` (all of them failed in the test that brought us here).
    let (mut lo, mut hi, mut failure) = (0usize, candidates.len(), failure);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        match test_without(probe, snap, excl, &all_but_first(mid), pass).await? {
            Err(f) => (hi, failure) = (mid, f),
            Ok(()) => lo = mid,
        }
    }
    match hi.checked_sub(1) {
        Some(i) => Ok(Ok((candidates[i].clone(), failure))),
        // Nothing to switch off, yet the base passed: treat as a shared failure.
        None => Ok(Err(failure)),
    }
}

/// Tests the configuration of `excl` with `off` switched off as well; leaves the
/// last good files in place.
async fn test_without<P: Probe>(
    probe: &mut P,
    snap: &Snapshot,
    excl: &Exclusions,
    off: &BTreeSet<ResourceRef>,
    pass: &mut Pass,
) -> Result<Result<(), TestFailure>, ApplyError> {
    let written = pass.write(probe, excl, &excl.apply(snap, off))?;
    let result = pass.test(probe).await;
    probe.roll_back(written)?;
    Ok(result)
}

/// Last resort: the base configuration (no Ingress; the last good ConfigMap, else
/// the defaults, when even that fails), then every Ingress added one by one, each
/// kept only if `nginx -t` accepts it. Exclusions found earlier in the pass are
/// forgotten: they were found with a configuration that did not converge.
pub(super) async fn one_by_one<P: Probe>(
    probe: &mut P,
    snap: &Snapshot,
    excl: &mut Exclusions,
    mut pass: Pass,
) -> Result<Served<P::Written>, ApplyError> {
    tracing::warn!("config safety falling back to adding resources one by one");
    excl.ingresses = pass.start.clone();
    let every: BTreeSet<ResourceRef> = snap.ingresses.iter().map(|i| ingress_ref(i)).collect();
    while let Err(f) = test_without(probe, snap, excl, &every, &mut pass).await? {
        // Held back for the last good ConfigMap first, then for the defaults.
        let defaults = match &excl.configmap {
            None if snap.config_map.is_some() => false,
            Some(_) if excl.held_configmap_stand_in().is_some() => true,
            _ => return Err(ApplyError::Base(f)),
        };
        let message = format!(
            "nginx -t failed: {}; not applied, {} in use",
            f.message,
            if defaults || excl.fallbacks.config_map.is_none() {
                "the defaults are"
            } else {
                "the last good ConfigMap stays"
            }
        );
        excl.hold_configmap(snap, defaults, &message);
    }
    let candidates = candidates(snap, excl);
    let mut off: BTreeSet<ResourceRef> = candidates.iter().cloned().collect();
    for r in &candidates {
        off.remove(r);
        // A second round tests the fallback when the current version fails.
        while let Err(f) = test_without(probe, snap, excl, &off, &mut pass).await? {
            if !excl.exclude(snap, r, &f.message) {
                break;
            }
        }
    }
    let served = excl.apply(snap, &BTreeSet::new());
    let written = pass.write(probe, excl, &served)?;
    let applied = if probe.serves(&written).await {
        Applied::Unchanged
    } else {
        probe.activate(&written).await?
    };
    Ok(pass.served(excl, served, written, applied))
}
