//! Shared controller state and the status port: `/healthz`, `/readyz`, `/metrics`,
//! `/status/resources`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde::Serialize;

use crate::metrics::{Metrics, StateLabel};

/// Whether a resource is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceState {
    /// Served (possibly with warnings in the message).
    Applied,
    /// Not served, or partly not served; the message says why.
    Rejected,
}

/// The state of one resource as users see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceStatus {
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Applied or rejected.
    pub state: ResourceState,
    /// Problems, joined with `; ` (empty when none).
    pub message: String,
}

/// State shared between the sync loop and the status port.
#[derive(Default)]
pub struct Shared {
    ready: AtomicBool,
    /// Set once at SIGTERM: readiness stays false from then on.
    stopping: AtomicBool,
    resources: RwLock<Vec<ResourceStatus>>,
    /// Metrics.
    pub metrics: Metrics,
    /// NGINX's per-request metrics, read at each scrape (set once NGINX's API
    /// socket and token are known).
    pub request_metrics: std::sync::OnceLock<crate::scrape::Scraper>,
}

impl Shared {
    /// State whose metrics carry `identity`'s labels.
    pub fn new(identity: crate::metrics::Identity) -> Self {
        Self {
            metrics: Metrics::new(identity),
            ..Self::default()
        }
    }

    /// Sets readiness (false for good once [`Shared::stop`] was called).
    pub fn set_ready(&self, ready: bool) {
        let mut ready = ready && !self.stopping.load(Ordering::SeqCst);
        let was = self.ready.swap(ready, Ordering::SeqCst);
        if ready && self.stopping.load(Ordering::SeqCst) {
            // stop() ran between the check and the swap: it wins
            self.ready.store(false, Ordering::SeqCst);
            ready = false;
        }
        if was != ready {
            tracing::info!(ready, "readiness changed");
        }
    }

    /// The pod is shutting down: not Ready any more, so that load balancers stop
    /// sending new connections while NGINX still accepts them.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.set_ready(false);
    }

    /// Readiness.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Replaces the resource states; logs one line per state change.
    pub fn set_resources(&self, mut next: Vec<ResourceStatus>) {
        next.sort_by(|a, b| {
            (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name))
        });
        let mut cur = self.resources.write().expect("status lock");
        for r in &next {
            // `cur` was stored sorted by the same key: a lookup, not a scan (10k
            // resources made the scan quadratic and dominate every sync).
            let key = (&r.kind, &r.namespace, &r.name);
            let old = cur
                .binary_search_by(|o| (&o.kind, &o.namespace, &o.name).cmp(&key))
                .ok()
                .map(|i| &cur[i]);
            if old.map(|o| (o.state, &o.message)) != Some((r.state, &r.message)) {
                match r.state {
                    ResourceState::Applied => {
                        tracing::info!(kind = %r.kind, namespace = %r.namespace, name = %r.name, problems = %r.message, "resource applied")
                    }
                    ResourceState::Rejected => {
                        tracing::warn!(kind = %r.kind, namespace = %r.namespace, name = %r.name, problems = %r.message, "resource rejected")
                    }
                }
            }
        }
        for (state, label) in [
            (ResourceState::Applied, "applied"),
            (ResourceState::Rejected, "rejected"),
        ] {
            let n = next.iter().filter(|r| r.state == state).count();
            self.metrics
                .resources
                .get_or_create(&StateLabel {
                    state: label.to_owned(),
                })
                .set(n as i64);
        }
        *cur = next;
    }

    /// Current resource states.
    pub fn resources(&self) -> Vec<ResourceStatus> {
        self.resources.read().expect("status lock").clone()
    }
}

/// Serves the status port until the process exits. `/healthz`, `/readyz` and
/// `/metrics` answer everyone (kubelet probes and Prometheus come to the pod's
/// address); `/status/resources` names every namespace's Ingresses, hosts, Secrets and
/// NGINX errors, so it answers only a loopback connection that NGINX did not proxy,
/// unless `resources_public`.
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
    resources_public: bool,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/status/resources",
            get(move |state, peer, headers| resources(state, peer, headers, resources_public)),
        )
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

/// Whether `/status/resources` may answer a request from `peer` with `headers`: from
/// loopback (IPv4-mapped included), and not proxied by Ferrule's NGINX, which sets
/// `X-Forwarded-For` on every request it proxies (an endpoint of 127.0.0.1 allowed
/// with `--allow-local-endpoints` would otherwise bring anyone's request here).
pub fn resources_allowed(peer: SocketAddr, headers: &axum::http::HeaderMap) -> bool {
    let ip = match peer.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() && !headers.contains_key("x-forwarded-for")
}

async fn readyz(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    if s.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    // The controller's and NGINX processes' metrics, then NGINX's request metrics
    // (crate::scrape), all in the text format the content type names.
    let mut text = s.metrics.scrape().await;
    if let Some(scraper) = s.request_metrics.get() {
        text.push_str(&scraper.encode().await);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

async fn resources(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: axum::http::HeaderMap,
    public: bool,
) -> axum::response::Response {
    if !public && !resources_allowed(peer, &headers) {
        return (
            StatusCode::FORBIDDEN,
            "/status/resources answers only on loopback (--status-resources-public)\n",
        )
            .into_response();
    }
    axum::Json(s.resources()).into_response()
}
