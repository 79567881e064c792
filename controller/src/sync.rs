//! The loop: snapshots in; the endpoint fast path and the reload path out.
//!
//! Two tasks, so that the fast path never waits behind a reload:
//! - the *model task* (`sync/model_task.rs`) coalesces snapshot changes, builds the
//!   model (a full build on a blocking thread, endpoint changes applied meanwhile),
//!   posts backend and certificate changes to the balancer at once, and wakes the
//!   reload task when the configuration files must change;
//! - the *reload task* owns NGINX: render, `nginx -t`, reload, verify, config safety,
//!   and supervision (restart NGINX when it dies). It always applies the model task's
//!   newest snapshot, never an older one.
//!
//! Invariants: every post to the balancer (from either task, under one lock) holds
//! the newest model plus the backends the running configuration still routes to, so
//! a pending, slow or rejected reload loses no backend and undoes no endpoint change;
//! the pod is Ready only after a post succeeded against the NGINX that serves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ferrule_model::{Diff, Model, ResourceRef, Severity, Snapshot};
use tokio::sync::{Mutex, watch};

use crate::balancer::{
    BACKENDS, BalancerClient, CERTIFICATES, DEFAULT_CERTIFICATE, Posted, Refused, SyncError,
};
use crate::metrics::rejected::{Reason, Rejection};
use crate::nginx::safety::Exclusions;
use crate::nginx::stream_peers::StreamPeers;
use crate::nginx::{Applied, Dataplane};
use crate::status::{ResourceState, ResourceStatus, Shared};

mod model_task;

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
    latest: std::sync::Mutex<Option<(Arc<Snapshot>, Arc<Model>)>>,
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
    let reload = tokio::spawn(reload_task(
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

/// An NGINX that ran this long before it died restarts without the backoff of a
/// start loop.
const STABLE_RUN: Duration = Duration::from_secs(30);

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
        (Some((snap, _)), Some((b_snap, b))) if Arc::ptr_eq(&snap, b_snap) => Some(b.clone()),
        (Some((_, m)), _) => Some(m),
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

async fn reload_task(
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
                if idle || dataplane.nginx().is_running() {
                    continue;
                }
            }
        }
        // NGINX died (noticed by the tick, or by a change that came first: the pass
        // would start NGINX itself, Ready all along), or the last attempt to start
        // it failed (e.g. its port was busy): start again, with backoff.
        if !dataplane.nginx().is_running() && (dataplane.applied().is_some() || start_failed) {
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
        let Some((snap, latest)) = common.latest.lock().expect("latest lock").clone() else {
            continue;
        };
        let started = Instant::now();
        let mut excl = common.exclusions.read().expect("exclusions lock").clone();
        // The model task's model of this snapshot holds the last valid certificates.
        excl.certificates = latest.certificates.clone();
        let result = dataplane.apply(&snap, &mut excl).await;
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
                    .is_some_and(|(s, m)| {
                        Arc::ptr_eq(s, &snap) && m.hash() != outcome.model.hash()
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
                start_failed = !dataplane.nginx().is_running();
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

/// Ready: NGINX serves and the balancer is synced, not every Ingress is excluded,
/// and a pod that never served its ConfigMap does not serve without it. Recomputed
/// on every sync, so it comes back by itself (e.g. when the excluded resources or
/// the ConfigMap are fixed or deleted).
///
/// The ConfigMap rule is config safety's for shared inputs: a running pod keeps the
/// last good ConfigMap and stays Ready, but a new pod has none, and a rollout must
/// stall on it rather than finish with every replica serving the defaults (without
/// the administrator's timeouts, HSTS or global restrictions).
fn update_readiness(common: &Common, snap: &Snapshot, model: &Model, excl: &Exclusions) {
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
fn configmap_rejection(
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
fn publish_status(common: &Common, snap: &Snapshot, model: &Arc<Model>, excl: &Exclusions) {
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
