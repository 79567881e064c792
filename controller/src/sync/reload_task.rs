//! The reload task: it owns NGINX. It applies the model task's newest snapshot
//! (render, `nginx -t`, reload, verify, config safety over the dataplane), posts
//! the balancer's state once NGINX serves it, supervises NGINX (restarted with
//! backoff when it dies) and shuts it down gracefully.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Common, SyncOptions, configmap_rejection, post, publish_status, update_readiness};
use crate::nginx::safety::Prebuilt;
use crate::nginx::{Applied, Dataplane};

/// An NGINX that ran this long before it died restarts without the backoff of a
/// start loop.
const STABLE_RUN: Duration = Duration::from_secs(30);

pub(super) async fn run(
    mut dataplane: Dataplane,
    mut rx: watch::Receiver<()>,
    common: Arc<Common>,
    opts: SyncOptions,
    mut stop: watch::Receiver<bool>,
) {
    // Reloads are rate-limited (endpoint changes never go through here).
    let reload_limiter = std::num::NonZeroU32::new(1)
        .zip((!opts.min_reload_interval.is_zero()).then_some(opts.min_reload_interval))
        .and_then(|(burst, period)| {
            governor::Quota::with_period(period).map(|q| q.allow_burst(burst))
        })
        .map(governor::RateLimiter::direct);
    let mut start_failed = false;
    let mut restart_backoff = Duration::from_millis(100);
    let mut started_at: Option<Instant> = None;
    let mut supervise = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            r = rx.changed() => if r.is_err() { break },
            _ = supervise.tick() => {
                let idle = dataplane.applied().is_none() && !start_failed;
                if idle || dataplane.nginx().is_running().await {
                    continue;
                }
            }
        }
        // NGINX died (noticed by the tick, or by a change that came first: the pass
        // would start NGINX itself, Ready all along), or the last attempt to start
        // it failed (e.g. its port was busy): start again, with backoff.
        if !dataplane.nginx().is_running().await && (dataplane.applied().is_some() || start_failed)
        {
            if dataplane.applied().is_some() {
                // A master that ran a while died by accident, not in a start loop.
                if started_at.is_some_and(|t| t.elapsed() >= STABLE_RUN) {
                    restart_backoff = Duration::from_millis(100);
                }
                tracing::error!(backoff = ?restart_backoff, "nginx exited unexpectedly; restarting");
                common.shared.metrics.nginx_restarts.inc();
            }
            {
                // Under the lock: no post in flight can mark the pod Ready again.
                let mut poster = common.balancer.lock().await;
                poster.restarting = true;
                common.serving.store(false, Ordering::SeqCst);
                common.shared.set_ready(false);
                poster.client.reset();
            }
            tokio::time::sleep(restart_backoff).await;
            restart_backoff = (restart_backoff * 2).min(Duration::from_secs(10));
            dataplane.nginx_died();
        }
        if let Some(limiter) = &reload_limiter {
            limiter.until_ready().await;
        }
        rx.borrow_and_update();
        let Some(latest) = common.latest.lock().expect("latest lock").clone() else {
            continue;
        };
        let snap = latest.raw;
        let started = Instant::now();
        let mut excl = common.exclusions.read().expect("exclusions lock").clone();
        // The model task's model of this snapshot holds the last valid certificates.
        excl.fallbacks.certificates = latest.model.certificates.clone();
        // Its model is served as it is unless this pass excludes more.
        let prebuilt = Prebuilt {
            served: latest.served,
            model: latest.model,
        };
        let result = dataplane.apply(&snap, Some(prebuilt), &mut excl).await;
        *common.exclusions.write().expect("exclusions lock") = excl.clone();
        match result {
            Ok(outcome) => {
                let m = &common.shared.metrics;
                m.config_tests.inc_by(outcome.tests as u64);
                m.controller.pass(crate::metrics::controller::Pass::Served {
                    version: &outcome.version,
                    activated: outcome.applied != Applied::Unchanged,
                    rejected: outcome.refused > 0,
                });
                m.reload_duration.observe(started.elapsed().as_secs_f64());
                match outcome.applied {
                    Applied::Unchanged => {}
                    Applied::Started => started_at = Some(Instant::now()),
                    Applied::Reloaded => m.reload(true),
                    Applied::ReloadUnverified => {
                        m.reload(true);
                        m.reload_verify_failures.inc();
                        tracing::warn!("reload not confirmed by new workers in time");
                    }
                }
                start_failed = false;
                if outcome.applied != Applied::Unchanged {
                    tracing::info!(applied = ?outcome.applied, tests = outcome.tests, test_time = ?outcome.test_time, took = ?started.elapsed(), "configuration applied");
                }
                // Full state after a start, the delta after a reload: the balancer
                // must hold every backend before the pod says Ready.
                let mut poster = common.balancer.lock().await;
                if outcome.applied == Applied::Started {
                    poster.client.reset();
                }
                let built = Some((&snap, &outcome.model));
                let synced = post(&common, &mut poster, Some(&outcome.model), built).await;
                if let Err(e) = &synced {
                    tracing::error!(error = %e, "posting state to the balancer failed");
                }
                publish_status(&common, &snap, &outcome.model, &excl);
                poster.restarting = false;
                common.serving.store(synced.is_ok(), Ordering::SeqCst);
                if configmap_rejection(&snap, &outcome.model, &excl).is_none() {
                    common.configmap_proven.store(true, Ordering::SeqCst);
                }
                update_readiness(&common, &snap, &outcome.model, &excl);
                // The model task's newest model was built without what this pass
                // learnt (an Ingress excluded, a version held back) when it differs
                // from this one of the same snapshot.
                let stale = common
                    .latest
                    .lock()
                    .expect("latest lock")
                    .as_ref()
                    .is_some_and(|l| {
                        Arc::ptr_eq(&l.raw, &snap) && l.model.hash() != outcome.model.hash()
                    });
                let model = outcome.model;
                let activated = outcome.applied != Applied::Unchanged;
                // The model task re-evaluates against what NGINX now runs, also when
                // NGINX restarted with the same model (what it posts next is newer
                // than what was just posted), when its model is stale, and when this
                // post failed (it retries with backoff). Published under the lock.
                common.applied.send_if_modified(|cur| {
                    let changed = cur.as_ref().map(|c| c.hash()) != Some(model.hash());
                    *cur = Some(model);
                    changed || activated || stale || synced.is_err()
                });
                drop(poster);
            }
            Err(e) => {
                common.shared.metrics.reload(false);
                common
                    .shared
                    .metrics
                    .controller
                    .pass(crate::metrics::controller::Pass::Failed);
                start_failed = !dataplane.nginx().is_running().await;
                tracing::error!(error = %e, "applying the configuration failed; the last good configuration keeps serving");
                if let Some(model) = dataplane.applied() {
                    publish_status(&common, &snap, &model, &excl);
                }
            }
        }
    }
    // A little longer than NGINX's own limit, so that NGINX ends its workers itself.
    // then the requests in flight: NGINX's worker_shutdown_timeout
    let drain = crate::nginx::render::WORKER_SHUTDOWN_TIMEOUT + Duration::from_secs(5);
    dataplane.nginx().quit(drain).await;
}
