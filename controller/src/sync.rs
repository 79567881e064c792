//! The loop: snapshots in; the endpoint fast path and the reload path out.
//!
//! Two tasks, so that the fast path never waits behind a reload:
//! - the *model task* (`sync/model_task.rs`) coalesces snapshot changes, builds the
//!   model (a full build on a blocking thread, endpoint changes applied meanwhile),
//!   posts backend and certificate changes to the balancer at once, and wakes the
//!   reload task when the configuration files must change;
//! - the *reload task* (`sync/reload_task.rs`) owns NGINX: render, `nginx -t`,
//!   reload, verify, config safety, and supervision (restart NGINX when it dies). It
//!   always applies the model task's newest snapshot, never an older one.
//!
//! Here: what both share (the balancer poster and its view policy); in
//! `sync/report.rs`: the status of the resources and readiness after each pass.
//!
//! Invariants: every post to the balancer (from either task, under one lock) holds
//! the newest model plus the backends the running configuration still routes to, so
//! a pending, slow or rejected reload loses no backend and undoes no endpoint change;
//! the pod is Ready only after a post succeeded against the NGINX that serves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ferrule_model::{Diff, Model, Snapshot};
use tokio::sync::{Mutex, watch};

use crate::balancer::{BACKENDS, BalancerClient, CERTIFICATES, Posted, Refused, SyncError};
use crate::nginx::Dataplane;
use crate::nginx::safety::Exclusions;
use crate::nginx::stream_peers::StreamPeers;
use crate::status::Shared;

mod model_task;
mod reload_task;
mod report;

use report::{configmap_rejection, publish_status, update_readiness};

/// Loop settings.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Changes closer than this to the previous pass are batched into one pass at
    /// the end of the window; a change after a quiet period is handled at once.
    pub coalesce: Duration,
    /// Minimum time between two reloads (endpoint changes are never limited).
    pub min_reload_interval: Duration,
    /// After SIGTERM: how long NGINX keeps accepting new connections while the pod
    /// reports not Ready (endpoints and load balancers take a while to notice).
    pub shutdown_grace_period: Duration,
}

/// The balancer client and the last view posted through it.
struct Poster {
    client: BalancerClient,
    /// The newest data known for a backend the newest model no longer has (see
    /// [`balancer_view`]).
    posted: Option<Arc<Model>>,
    /// NGINX died and its restart has not posted yet: a post that succeeds now
    /// reached orphaned workers, not a serving NGINX, and says nothing of readiness.
    restarting: bool,
    /// The peers files of TCP/UDP services, written from the same view.
    streams: StreamPeers,
}

struct Common {
    shared: Arc<Shared>,
    balancer: Mutex<Poster>,
    exclusions: RwLock<Exclusions>,
    /// NGINX serves a configuration and the balancer holds its state (the reload
    /// task's half of readiness; the other half is "not everything excluded").
    serving: AtomicBool,
    /// NGINX served the ConfigMap (or the defaults, without one) accepted whole at
    /// least once in this process: until then a rejected ConfigMap keeps the pod not
    /// Ready (see [`update_readiness`]).
    configmap_proven: AtomicBool,
    /// The reason for that was logged (once per process).
    configmap_unready_logged: AtomicBool,
    /// The model NGINX serves (set by the reload task).
    applied: watch::Sender<Option<Arc<Model>>>,
    /// What the balancer refuses now (reported on the resources it comes from), and
    /// whether that changed since the status was last published.
    refusals: std::sync::Mutex<Vec<Refused>>,
    refusals_changed: AtomicBool,
    /// The newest snapshot the model task evaluated and the model it built: what the
    /// reload task applies (never an older snapshot: after an NGINX restart or a
    /// reverted edit it must not bring back what the cluster no longer holds) and
    /// what every post to the balancer starts from.
    latest: std::sync::Mutex<Option<Latest>>,
}

/// The model task's newest pass (`Common::latest`).
#[derive(Clone)]
struct Latest {
    /// The snapshot as the source gave it.
    raw: Arc<Snapshot>,
    /// What the model was built from: `raw` minus the exclusions the model task knew.
    served: Arc<Snapshot>,
    model: Arc<Model>,
}

/// Runs the loop until `shutdown` resolves; then stops NGINX gracefully. `applied`
/// receives every model NGINX starts serving (for status writers).
pub async fn run(
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    dataplane: Dataplane,
    shared: Arc<Shared>,
    opts: SyncOptions,
    applied: watch::Sender<Option<Arc<Model>>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let balancer = BalancerClient::new(dataplane.api_socket(), dataplane.token().to_owned())
        .with_default_certificate(dataplane.default_certificate())
        .with_batch(dataplane.balancer().max_batch());
    let common = Arc::new(Common {
        shared,
        balancer: Mutex::new(Poster {
            client: balancer,
            posted: None,
            restarting: false,
            streams: StreamPeers::new(dataplane.stream_peers_dir()),
        }),
        exclusions: RwLock::new(Exclusions::default()),
        serving: AtomicBool::new(false),
        configmap_proven: AtomicBool::new(false),
        configmap_unready_logged: AtomicBool::new(false),
        applied,
        refusals: std::sync::Mutex::new(Vec::new()),
        refusals_changed: AtomicBool::new(false),
        latest: std::sync::Mutex::new(None),
    });
    // A wake-up only: the reload task reads `Common::latest`.
    let (reload_tx, reload_rx) = watch::channel(());
    let (stop_tx, stop_rx) = watch::channel(false);
    let reload = tokio::spawn(reload_task::run(
        dataplane,
        reload_rx,
        common.clone(),
        opts.clone(),
        stop_rx,
    ));
    let grace = opts.shutdown_grace_period;
    let model = tokio::spawn(model_task::run(snapshots, reload_tx, common.clone(), opts));
    shutdown.await;
    common.shared.stop();
    if !grace.is_zero() {
        tracing::info!(
            ?grace,
            "shutting down: not Ready; NGINX accepts new connections until the grace period ends"
        );
        tokio::time::sleep(grace).await;
    }
    tracing::info!("shutting down: no more changes, draining NGINX");
    model.abort();
    let _ = stop_tx.send(true);
    reload.await?;
    Ok(())
}

/// The first wait before posting again after a failed post to the balancer.
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// Resolves at `at`, never when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Makes `model` share what it has equal with `base` (`diff` is between them and
/// needs no reload), so that the next diff and the balancer client's digests, after
/// an endpoint change patched `model`, compare pointers instead of contents.
fn share_unchanged(model: &mut Model, base: &Model, diff: &Diff) {
    let (backends, tls_hosts): (&[String], &[String]) = match diff {
        Diff::Dynamic {
            backends,
            tls_hosts,
            ..
        } => (backends, tls_hosts),
        _ => (&[], &[]),
    };
    if tls_hosts.is_empty() {
        model.servers = base.servers.clone();
    }
    let changed: std::collections::HashSet<&str> = backends.iter().map(String::as_str).collect();
    for (name, b) in model.backends.iter_mut() {
        if !changed.contains(name.as_str())
            && let Some(same) = base.backends.get(name)
        {
            *b = same.clone();
        }
    }
}

/// Posts the newest model to the balancer (see [`post`]): whether it succeeded, and
/// whether that made the balancer whole again (the post after the last reload had
/// failed: this one holds it all).
async fn post_dynamic(common: &Common, since: Instant) -> (bool, bool) {
    let mut poster = common.balancer.lock().await;
    // Read under the lock: the reload task publishes what NGINX runs before it
    // releases the lock, so this post cannot drop what a reload just started using.
    let running = common.applied.borrow().clone();
    match post(common, &mut poster, running.as_ref(), None).await {
        Ok(p) => {
            if p.backends + p.certificates > 0 {
                common
                    .shared
                    .metrics
                    .dynamic_latency
                    .observe(since.elapsed().as_secs_f64());
                tracing::debug!(
                    backends = p.backends,
                    certificates = p.certificates,
                    "balancer updated"
                );
            }
            let restored = !poster.restarting && !common.serving.swap(true, Ordering::SeqCst);
            (true, restored)
        }
        Err(e) => {
            tracing::warn!(error = %e, "balancer update failed; trying again");
            (false, false)
        }
    }
}

/// Brings the balancer to the newest model, keeping the backends that `running`
/// (the configuration NGINX runs) still routes to: a pending, slow or failed reload
/// must not lose them. The newest model is the model task's, or `built` (a reload's
/// model) when that is of the same snapshot: the reload knows the newest exclusions.
async fn post(
    common: &Common,
    poster: &mut Poster,
    running: Option<&Arc<Model>>,
    built: Option<(&Arc<Snapshot>, &Arc<Model>)>,
) -> Result<Posted, SyncError> {
    let latest = common.latest.lock().expect("latest lock").clone();
    let newest = match (latest, built) {
        (Some(l), Some((b_snap, b))) if Arc::ptr_eq(&l.raw, b_snap) => Some(b.clone()),
        (Some(l), _) => Some(l.model),
        (None, b) => b.map(|(_, m)| m.clone()),
    };
    let view = match (newest, running) {
        (Some(newest), Some(running)) => balancer_view(&newest, running, poster.posted.as_deref()),
        (Some(newest), None) => newest,
        (None, Some(running)) => running.clone(),
        (None, None) => return Ok(Default::default()),
    };
    let result = poster.client.sync(&view).await;
    // Endpoints of TCP/UDP services: files, not posts (crate::nginx::stream_peers).
    match poster.streams.sync(&view, running.map(|r| &**r)) {
        Ok(0) => {}
        Ok(n) => tracing::debug!(files = n, "stream peers updated"),
        Err(e) => tracing::warn!(error = %e, "writing the peers of TCP/UDP services failed"),
    }
    poster.posted = Some(view);
    let refused = poster.client.refused();
    {
        let mut refusals = common.refusals.lock().expect("refusals lock");
        if *refusals != refused {
            *refusals = refused;
            common.refusals_changed.store(true, Ordering::SeqCst);
        }
    }
    let metrics = &common.shared.metrics;
    if let Some((capacity, free)) = poster.client.certificate_store() {
        metrics.certificate_store(capacity, free);
    }
    match &result {
        Ok(p) => {
            for (kind, applied, refused) in [
                (BACKENDS, p.backends, p.rejected_backends()),
                (CERTIFICATES, p.certificates, p.rejected_certificates()),
            ] {
                if applied > 0 {
                    metrics.dynamic(kind, true);
                }
                if refused > 0 {
                    metrics.dynamic(kind, false);
                }
            }
        }
        Err(e) => metrics.dynamic(e.kind, false),
    }
    result
}

/// `newest`, plus the backends `running`'s locations (or default backend) route to
/// that `newest` no longer has, with their canaries: as last posted when they were
/// (their endpoints may have changed since `running` was built), else as `running`
/// has them.
fn balancer_view(newest: &Arc<Model>, running: &Model, posted: Option<&Model>) -> Arc<Model> {
    // The same locations (the endpoint fast path and the diff share them): nothing
    // can be missing, and nothing needs walking.
    if Arc::ptr_eq(&newest.servers, &running.servers)
        && newest.default_backend == running.default_backend
    {
        return newest.clone();
    }
    let mut missing: Vec<&String> = running
        .routed_backends()
        .filter(|n| !newest.backends.contains_key(*n))
        .collect();
    if missing.is_empty() {
        return newest.clone();
    }
    let canaries: Vec<&String> = missing
        .iter()
        .filter_map(|n| running.backends.get(*n)?.balancing.canary.as_ref())
        .map(|c| &c.backend)
        .filter(|n| !newest.backends.contains_key(*n))
        .collect();
    missing.extend(canaries);
    let mut view = (**newest).clone();
    for name in missing {
        let known = posted
            .and_then(|p| p.backends.get(name))
            .or_else(|| running.backends.get(name));
        if let Some(b) = known {
            view.backends.insert(name.clone(), b.clone());
        }
    }
    Arc::new(view)
}
