//! The model task: snapshots in, models out (to the balancer at once, to the reload
//! task when the files must change).
//!
//! Invariant: the endpoint path never waits for a full build. A full build runs on
//! a blocking thread; an EndpointSlice change that arrives meanwhile is applied to
//! the previous model (its configuration, the new endpoints) and posted at once,
//! and the finished build takes the newest endpoints before it is applied.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrule_model::{Diff, Model, Snapshot};
use tokio::sync::watch;

use super::{
    Common, RETRY_FIRST, SyncOptions, post_dynamic, publish_status, share_unchanged,
    sleep_until_some, update_readiness,
};
use crate::nginx::safety::Exclusions;

/// The model the task built last, and what it was built from.
struct Last {
    /// The snapshot as the source gave it (for the status).
    raw: Arc<Snapshot>,
    /// The same with the exclusions applied: the model's input.
    served: Arc<Snapshot>,
    model: Arc<Model>,
}

/// What one pass hands to [`ModelTask::apply`].
struct Built {
    raw: Arc<Snapshot>,
    served: Snapshot,
    model: Model,
    /// `full` or `endpoints` (the `model_builds` metric).
    kind: &'static str,
    /// When the pass woke up (the start of "time from change to applied").
    detected: Instant,
    started: Instant,
}

struct ModelTask {
    common: Arc<Common>,
    reload_tx: watch::Sender<()>,
    last: Option<Last>,
    /// What NGINX ran when the last model needed no reload against it: while NGINX
    /// runs the same, that model is the diff base (see `apply`).
    equivalent_to: Option<Arc<Model>>,
    /// A failed post is tried again after this, doubling up to 30 s, until one
    /// succeeds: nothing else may come to trigger it.
    retry: Option<Instant>,
    retry_backoff: Duration,
}

/// `snapshot` with the EndpointSlices of `newer` (and its time of observation).
fn with_endpoints_of(snapshot: &Snapshot, newer: &Snapshot) -> Snapshot {
    let mut out = snapshot.clone();
    out.endpoint_slices = newer.endpoint_slices.clone();
    out.observed = newer.observed;
    out
}

pub(super) async fn run(
    mut snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    reload_tx: watch::Sender<()>,
    common: Arc<Common>,
    opts: SyncOptions,
) {
    let mut applied_rx = common.applied.subscribe();
    let mut task = ModelTask {
        common,
        reload_tx,
        last: None,
        equivalent_to: None,
        retry: None,
        retry_backoff: RETRY_FIRST,
    };
    let mut last_pass: Option<Instant> = None;
    // A snapshot arrived during a full build: the next pass starts at once.
    let mut pending = false;
    loop {
        // What started the pass (a snapshot that came during the last build is one).
        let cause = if pending {
            "snapshot"
        } else {
            tokio::select! {
                r = snapshots.changed() => if r.is_err() { return } else { "snapshot" },
                // A reload finished: the diff base changed, re-evaluate.
                r = applied_rx.changed() => if r.is_err() { return } else { "reload" },
                _ = sleep_until_some(task.retry) => "retry",
            }
        };
        tracing::debug!(cause, "model pass");
        (task.common.shared.metrics.model_passes)
            .get_or_create(&crate::metrics::PassLabel {
                cause: cause.into(),
            })
            .inc();
        pending = false;
        let detected = Instant::now();
        // Leading-edge coalescing: a change after a quiet period is handled at once
        // (an isolated endpoint change must not wait for the window); changes that
        // follow a pass within the window are batched into one pass at its end.
        if let Some(next) = last_pass.map(|t| t + opts.coalesce)
            && next > detected
        {
            tokio::time::sleep_until(next.into()).await;
        }
        last_pass = Some(Instant::now());
        let Some(raw) = snapshots.borrow_and_update().clone() else {
            continue;
        };
        let started = Instant::now();
        // Refreshed against this snapshot, so that an edited excluded resource is
        // built again (and its change triggers a reload that retries it), and a
        // deleted one leaves the status. The reload task refreshes its own copy.
        let mut excl = task
            .common
            .exclusions
            .read()
            .expect("exclusions lock")
            .clone();
        excl.refresh(&raw);
        if let Some(last) = &task.last {
            excl.fallbacks.certificates = last.model.certificates.clone();
        }
        let served = excl.apply(&raw, &Default::default());
        let patched = task
            .last
            .as_ref()
            .and_then(|l| ferrule_model::build_endpoint_change(&l.served, &l.model, &served));
        let built = match patched {
            Some((model, _)) => Built {
                raw,
                served,
                model,
                kind: "endpoints",
                detected,
                started,
            },
            None => {
                let (served, model, newer) =
                    task.build_in_full(served, &mut snapshots, &excl).await;
                pending = newer.is_some();
                // The endpoints that changed during the build are not undone.
                let (raw, served, model) = match newer.and_then(|n| {
                    let next = with_endpoints_of(&served, &n);
                    ferrule_model::build_endpoint_change(&served, &model, &next)
                        .map(|(m, _)| (Arc::new(with_endpoints_of(&raw, &n)), next, m))
                }) {
                    Some(patched) => patched,
                    None => (raw, served, model),
                };
                Built {
                    raw,
                    served,
                    model,
                    kind: "full",
                    detected,
                    started,
                }
            }
        };
        task.apply(built, &excl).await;
    }
}

impl ModelTask {
    /// `ferrule_model::build(&served)` on a blocking thread. Meanwhile every new
    /// snapshot's endpoints are applied to the last model and posted; the newest
    /// such snapshot is returned with the model.
    async fn build_in_full(
        &mut self,
        served: Snapshot,
        snapshots: &mut watch::Receiver<Option<Arc<Snapshot>>>,
        excl: &Exclusions,
    ) -> (Snapshot, Model, Option<Arc<Snapshot>>) {
        let fallbacks = excl.fallbacks.clone();
        let build = tokio::task::spawn_blocking(move || {
            let model = build_slowly_for_tests(&served, &fallbacks);
            (served, model)
        });
        tokio::pin!(build);
        let mut newer = None;
        loop {
            tokio::select! {
                r = &mut build => {
                    let (served, model) = r.expect("the model build panicked");
                    return (served, model, newer);
                }
                r = snapshots.changed() => {
                    if r.is_err() {
                        let (served, model) = (&mut build).await.expect("the model build panicked");
                        return (served, model, newer);
                    }
                    let Some(n) = snapshots.borrow_and_update().clone() else { continue };
                    self.apply_endpoints_only(&n, excl).await;
                    newer = Some(n);
                }
            }
        }
    }

    /// The last model with the endpoints of `newer`, applied, when its Services'
    /// endpoints allow that (see `build_endpoint_change`); else nothing.
    async fn apply_endpoints_only(&mut self, newer: &Arc<Snapshot>, excl: &Exclusions) {
        let detected = Instant::now();
        let Some(last) = &self.last else { return };
        let served = with_endpoints_of(&last.served, newer);
        let Some((model, _)) =
            ferrule_model::build_endpoint_change(&last.served, &last.model, &served)
        else {
            return;
        };
        let raw = Arc::new(with_endpoints_of(&last.raw, newer));
        let built = Built {
            raw,
            served,
            model,
            kind: "endpoints",
            detected,
            started: detected,
        };
        self.apply(built, excl).await;
    }

    /// Diffs `b.model` against what NGINX runs, wakes the reload task or publishes
    /// the status, and posts the balancer's state.
    async fn apply(&mut self, b: Built, excl: &Exclusions) {
        let Built {
            raw: snap,
            served,
            mut model,
            kind,
            detected,
            started,
        } = b;
        let common = self.common.clone();
        let applied = common.applied.borrow().clone();
        // The diff base: the last model that needed no reload against what NGINX
        // runs, while NGINX runs the same. It shares most with this one (a diff
        // against the last reload's model compares every backend changed since by
        // value, more of them as time goes by).
        let base = self
            .last
            .as_ref()
            .filter(|_| {
                matches!((&self.equivalent_to, &applied), (Some(e), Some(a)) if Arc::ptr_eq(e, a))
            })
            .map(|l| l.model.clone());
        let (diff, from) = match &applied {
            None => (None, None),
            Some(a) => {
                let near = base.map(|b| (ferrule_model::diff(&b, &model), b));
                match near {
                    // A reload is decided against what NGINX runs, not the base: when
                    // the base says one is needed, ask (and report) NGINX's own model.
                    Some((d, b)) if !matches!(d, Diff::Reload { .. }) => (Some(d), Some(b)),
                    _ => (Some(ferrule_model::diff(a, &model)), Some(a.clone())),
                }
            }
        };
        if let (Some(b), Some(d @ (Diff::Unchanged | Diff::Dynamic { .. }))) = (&from, &diff) {
            share_unchanged(&mut model, b, d);
        }
        let model = Arc::new(model);
        self.equivalent_to = match (&applied, &diff) {
            (Some(a), Some(Diff::Unchanged | Diff::Dynamic { .. })) => Some(a.clone()),
            _ => None,
        };
        let served = Arc::new(served);
        *common.latest.lock().expect("latest lock") = Some(super::Latest {
            raw: snap.clone(),
            served: served.clone(),
            model: model.clone(),
        });
        common
            .shared
            .metrics
            .model_builds
            .get_or_create(&crate::metrics::BuildLabel { kind: kind.into() })
            .inc();
        tracing::debug!(kind, took = ?started.elapsed(), "model built");
        common
            .shared
            .metrics
            .sync_duration
            .observe(started.elapsed().as_secs_f64());
        match &diff {
            None | Some(Diff::Reload { .. }) => {
                if let Some(Diff::Reload { reasons }) = &diff {
                    tracing::info!(?reasons, "configuration change needs a reload");
                }
                // The status says what NGINX serves: the reload task publishes it
                // once it knows what NGINX accepted.
                self.reload_tx.send_replace(());
            }
            Some(Diff::Unchanged) | Some(Diff::Dynamic { .. }) => {
                publish_status(&common, &snap, &model, excl);
                update_readiness(&common, &snap, &model, excl);
            }
        }
        // The fast path: whatever the reload task is doing, the balancer gets the new
        // backends and certificates now.
        if applied.is_some() {
            // From the source's first sight of the change when it says (the kube
            // source coalesces before it publishes), else from this pass's wake-up.
            let since = snap.observed.map_or(detected, |o| o.min(detected));
            let (posted, restored) = post_dynamic(&common, since).await;
            if restored {
                update_readiness(&common, &snap, &model, excl);
            }
            // What the balancer refused is reported with what NGINX serves: here when
            // this model needs no reload, else by the reload task once it does.
            if matches!(diff, Some(Diff::Unchanged | Diff::Dynamic { .. }))
                && common
                    .refusals_changed
                    .load(std::sync::atomic::Ordering::SeqCst)
            {
                publish_status(&common, &snap, &model, excl);
            }
            self.retry = (!posted).then(|| Instant::now() + self.retry_backoff);
            self.retry_backoff = if posted {
                RETRY_FIRST
            } else {
                (self.retry_backoff * 2).min(Duration::from_secs(30))
            };
        }
        self.last = Some(Last {
            raw: snap,
            served,
            model,
        });
    }
}

/// `ferrule_model::build`, after `FERRULE_TEST_FULL_BUILD_DELAY_MS` when that is set:
/// the integration tests make full builds slow to show that endpoint changes do
/// not wait for them (a pathological input would need minutes of CPU).
fn build_slowly_for_tests(served: &Snapshot, fallbacks: &ferrule_model::Fallbacks) -> Model {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        std::env::var("FERRULE_TEST_FULL_BUILD_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
    });
    if let Some(d) = delay {
        std::thread::sleep(*d);
    }
    ferrule_model::build_with(served, fallbacks)
}
