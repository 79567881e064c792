//! Config safety: a configuration NGINX rejects never replaces the one it serves;
//! the resource that caused the rejection is found, excluded (or served in its last
//! accepted version) and reported, and everything else is applied.
//!
//! [`apply`] is the policy, written over a [`Probe`] (render and write, test, roll
//! back, activate) that [`super::Dataplane`] implements with files and NGINX, and
//! the unit tests (`tests.rs`) with a fake. Each round builds the snapshot minus
//! excluded resources, writes it (keeping the last good files), tests it; on
//! failure it undoes the write, finds the resource that caused the error
//! (`search.rs`), excludes it, and tries again:
//! - the error's file:line names a resource through the source map (the ConfigMap's
//!   snippets are attributed to the ConfigMap, which is then held back);
//! - else bisection over the Ingresses; when even no Ingress fails, the ConfigMap is
//!   held back;
//! - shared input: when the ConfigMap changed and two Ingresses fail in one pass,
//!   one test checks whether the old ConfigMap fixes them; if so it is held back
//!   instead and their exclusions are undone;
//! - when no step makes progress: the base configuration, then one by one.
//!
//! What is excluded, and the last accepted versions, are kept between passes in
//! [`Exclusions`] (`exclusions.rs`).

mod exclusions;
mod search;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrule_model::{Model, ResourceRef, Snapshot};

use super::process::TestFailure;
use super::{Applied, ApplyError};

pub use exclusions::{
    Excluded, Exclusions, HeldConfigMap, configmap_fingerprint, ingress_fingerprint, ingress_ref,
};

/// What config safety needs of a dataplane: write the configuration of a snapshot,
/// test what is written, put the last good files back, activate.
pub trait Probe: Send {
    /// A configuration rendered and written, with what is needed to locate an error
    /// in it, undo the write or activate it.
    type Written: Send;

    /// Renders the configuration of `served` (a snapshot made by
    /// [`Exclusions::apply`]), whose model is `model`, and writes it, keeping what
    /// it replaces.
    fn write(&mut self, served: &Snapshot, model: Arc<Model>) -> Result<Self::Written, ApplyError>;

    /// Whether `written` is exactly what NGINX serves already: nothing to test or
    /// activate.
    fn serves(&mut self, written: &Self::Written) -> impl Future<Output = bool> + Send;

    /// Whether activating would start NGINX rather than reload it (a start parses
    /// the configuration anyway, so it need not be tested first).
    fn starts(&mut self) -> impl Future<Output = bool> + Send;

    /// `nginx -t` on what is written.
    fn test(&mut self) -> impl Future<Output = Result<(), TestFailure>> + Send;

    /// The resource whose lines `failure` names (through the source map of
    /// `written`), if it names a line of one.
    fn locate(&self, written: &Self::Written, failure: &TestFailure) -> Option<ResourceRef>;

    /// Puts back the files `written` replaced.
    fn roll_back(&mut self, written: Self::Written) -> Result<(), ApplyError>;

    /// Reloads (or starts) NGINX with `written`, and waits for the new workers.
    fn activate(
        &mut self,
        written: &Self::Written,
    ) -> impl Future<Output = Result<Applied, ApplyError>> + Send;
}

/// The model the model task built of a snapshot, and the snapshot it built it
/// from (the input minus its exclusions then): the first round of a pass uses it
/// when its exclusions are the same, rather than building the model again.
#[derive(Debug, Clone)]
pub struct Prebuilt {
    /// What the model was built from.
    pub served: Arc<Snapshot>,
    /// The model.
    pub model: Arc<Model>,
}

/// A pass that ended with a configuration NGINX serves.
#[derive(Debug)]
pub struct Served<W> {
    /// What happened to NGINX.
    pub applied: Applied,
    /// The configuration NGINX serves, as the probe wrote it.
    pub written: W,
    /// The snapshot it was made of (the input minus exclusions and fallbacks).
    pub snapshot: Snapshot,
    /// How many `nginx -t` runs it took.
    pub tests: usize,
    /// How long they took in total.
    pub test_time: Duration,
    /// How many of them refused the configuration.
    pub refused: usize,
    /// How many models the pass built (none when the prebuilt one was served).
    pub builds: usize,
}

/// The reload path with config safety (see the module docs): serves `snap` through
/// `probe`, minus what NGINX rejects. `excl` is updated with every resource
/// excluded on the way; the ConfigMap is held back when it breaks shared
/// configuration, for the last good one (`excl.fallbacks`). `prebuilt` is the
/// model task's model of `snap`, if it has one.
///
/// Every failing round makes progress (an Ingress excluded, its fallback dropped,
/// or the ConfigMap held back); when it cannot, the pass falls back to testing
/// resources one by one.
pub async fn apply<P: Probe>(
    probe: &mut P,
    snap: &Snapshot,
    prebuilt: Option<Prebuilt>,
    excl: &mut Exclusions,
) -> Result<Served<P::Written>, ApplyError> {
    excl.refresh(snap);
    let mut pass = Pass::new(excl, prebuilt);
    // An Ingress can fail twice (its new version, then its fallback), and the
    // ConfigMap can be held back twice (last good, then defaults).
    let max_rounds = 2 * snap.ingresses.len() + 4;
    for _ in 0..max_rounds {
        let served = excl.apply(snap, &BTreeSet::new());
        let written = pass.write(probe, excl, &served)?;
        if probe.serves(&written).await {
            // Exactly what NGINX serves already: no test, no reload.
            return Ok(pass.served(excl, served, written, Applied::Unchanged));
        }
        if probe.starts().await && !pass.started_untested {
            // A starting NGINX parses the configuration anyway: testing it first
            // would parse it twice (≈20 s for 10k hosts). Only a failed start
            // runs `nginx -t`, which names the culprit for config safety.
            pass.started_untested = true;
            match probe.activate(&written).await {
                Ok(applied) => return Ok(pass.served(excl, served, written, applied)),
                Err(e) => {
                    tracing::warn!(error = %e, "nginx did not start; testing the configuration")
                }
            }
        }
        let failure = match pass.test(probe).await {
            Ok(()) => {
                let applied = probe.activate(&written).await?;
                return Ok(pass.served(excl, served, written, applied));
            }
            Err(f) => f,
        };
        let located = search::locate(probe, &written, &failure);
        // Keep the last good files on disk: NGINX may restart or reload at any time.
        probe.roll_back(written)?;
        let culprit = match located {
            Some(r) => Ok((r, failure)),
            None => search::bisect(probe, snap, excl, &mut pass, failure).await?,
        };
        let progress = match culprit {
            Ok((r, failure)) if r.kind == "Ingress" => {
                search::ingress_failed(probe, snap, excl, &mut pass, r, &failure).await?
            }
            // The ConfigMap's own lines, or a failure even without any Ingress.
            Ok((_, failure)) | Err(failure) => {
                let message = format!(
                    "nginx -t failed: {}; not applied, the last good ConfigMap stays in use",
                    failure.message
                );
                search::blame_configmap(snap, excl, &mut pass, &message)
            }
        };
        if !progress {
            return search::one_by_one(probe, snap, excl, pass).await;
        }
    }
    tracing::error!("config safety did not converge");
    search::one_by_one(probe, snap, excl, pass).await
}

/// Bookkeeping of one [`apply`] pass.
struct Pass {
    /// `nginx -t` runs so far.
    tests: usize,
    /// Their total duration.
    test_time: Duration,
    /// Of those, the runs that failed.
    refused: usize,
    /// The Ingress exclusions when the pass began (restored when the ConfigMap is
    /// blamed instead).
    start: BTreeMap<ResourceRef, Excluded>,
    /// Ingresses that failed in this pass, in order, each once.
    failed: Vec<ResourceRef>,
    /// NGINX was started once in this pass without a test first.
    started_untested: bool,
    /// The model task's model (see [`Prebuilt`]).
    prebuilt: Option<Prebuilt>,
    /// Models built so far.
    builds: usize,
}

impl Pass {
    fn new(excl: &Exclusions, prebuilt: Option<Prebuilt>) -> Self {
        Self {
            tests: 0,
            test_time: Duration::ZERO,
            refused: 0,
            start: excl.ingresses.clone(),
            failed: Vec::new(),
            started_untested: false,
            prebuilt,
            builds: 0,
        }
    }

    /// Writes the configuration of `served` through `probe`, with the prebuilt
    /// model when it was built from the same Ingresses and ConfigMap (the rest of
    /// `served` is the same snapshot's), else one built now.
    fn write<P: Probe>(
        &mut self,
        probe: &mut P,
        excl: &Exclusions,
        served: &Snapshot,
    ) -> Result<P::Written, ApplyError> {
        let model = match &self.prebuilt {
            Some(p) if same_exclusions(&p.served, served) => p.model.clone(),
            _ => {
                self.builds += 1;
                Arc::new(ferrule_model::build_with(served, &excl.fallbacks))
            }
        };
        probe.write(served, model)
    }

    /// `nginx -t` on what `probe` wrote, counted.
    async fn test<P: Probe>(&mut self, probe: &mut P) -> Result<(), TestFailure> {
        let started = Instant::now();
        let result = probe.test().await;
        self.tests += 1;
        self.test_time += started.elapsed();
        self.refused += usize::from(result.is_err());
        result
    }

    /// Ends the pass with `written` (made of `served`) served: each resource's
    /// version in it is the fallback of later broken edits.
    fn served<W>(
        self,
        excl: &mut Exclusions,
        served: Snapshot,
        written: W,
        applied: Applied,
    ) -> Served<W> {
        excl.remember(&served);
        Served {
            applied,
            written,
            snapshot: served,
            tests: self.tests,
            test_time: self.test_time,
            refused: self.refused,
            builds: self.builds,
        }
    }
}

/// Whether two snapshots made by [`Exclusions::apply`] of the same input serve the
/// same versions of the same Ingresses and the same ConfigMap (by identity: each
/// version is one `Arc`, so this is a pointer comparison per Ingress).
fn same_exclusions(a: &Snapshot, b: &Snapshot) -> bool {
    let same = |x: &Option<Arc<_>>, y: &Option<Arc<_>>| match (x, y) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        (None, None) => true,
        _ => false,
    };
    same(&a.config_map, &b.config_map)
        && a.ingresses.len() == b.ingresses.len()
        && a.ingresses
            .iter()
            .zip(&b.ingresses)
            .all(|(x, y)| Arc::ptr_eq(x, y))
}
