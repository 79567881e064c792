//! Shared controller state and the status port: `/healthz`, `/readyz`, `/metrics`;
//! and `/status/resources` on the status socket, for a local operator only.
//!
//! `/status/resources` lists every namespace's Ingresses, hosts, Secret names and
//! errors. Nothing about a TCP connection tells who made it: NGINX runs what
//! tenants write (snippets, backends on 127.0.0.1), so a loopback connection
//! without `X-Forwarded-For` may well be NGINX's, asked by a tenant. The resources
//! are therefore served on a unix socket ([`serve_resources`]), and each connection
//! is checked with the kernel's credentials of the process that made it
//! ([`refusal`]): the controller's user (or root), and not NGINX, whose processes
//! the pid file of its prefix names (the master and its process group). The path is
//! no barrier by itself (NGINX runs as the controller's user unless Ferrule is root,
//! and may be configured to connect to any path); the credentials are.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// The status socket, relative to the NGINX prefix (`--status-socket` sets another).
pub const SOCKET: &str = "controller/status.sock";

/// Serves the status port until the process exits. `/healthz`, `/readyz` and
/// `/metrics` answer everyone (kubelet probes and Prometheus come to the pod's
/// address); `/status/resources` only with `resources_public` (anyone who reaches
/// the port, NGINX included, then reads it), else 403: it is the status socket's.
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
            get(move |state| public_resources(state, resources_public)),
        )
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
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

async fn public_resources(State(s): State<Arc<Shared>>, public: bool) -> axum::response::Response {
    if !public {
        return (
            StatusCode::FORBIDDEN,
            "/status/resources is served on the status socket (ferrule resources), not \
             on this port (--status-resources-public)\n",
        )
            .into_response();
    }
    axum::Json(s.resources()).into_response()
}

/// The process at the other end of a connection to the status socket, as the
/// kernel says (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
struct Peer(Option<tokio::net::unix::UCred>);

impl
    axum::extract::connect_info::Connected<
        axum::serve::IncomingStream<'_, tokio::net::UnixListener>,
    > for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::UnixListener>) -> Self {
        Peer(stream.io().peer_cred().ok())
    }
}

/// Serves `/status/resources` on the unix socket `path` until the process exits,
/// to the processes [`refusal`] lets through (NGINX's prefix: `nginx_prefix`). The
/// socket's directory is created 0700 if missing, the socket is 0600, and a socket
/// an earlier controller left is replaced.
pub async fn serve_resources(
    path: PathBuf,
    nginx_prefix: PathBuf,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let app = Router::new()
        .route(
            "/status/resources",
            get(move |state, peer| socket_resources(state, peer, nginx_prefix.clone())),
        )
        .with_state(shared);
    axum::serve(listener, app.into_make_service_with_connect_info::<Peer>()).await
}

async fn socket_resources(
    State(s): State<Arc<Shared>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    nginx_prefix: PathBuf,
) -> axum::response::Response {
    if let Some(why) = refusal(peer, &nginx_prefix) {
        tracing::warn!(?peer, why, "/status/resources refused");
        return (
            StatusCode::FORBIDDEN,
            format!("/status/resources is not served to {why}\n"),
        )
            .into_response();
    }
    axum::Json(s.resources()).into_response()
}

/// Why the process `peer` may not read `/status/resources`, if it may not: it runs
/// as another user than the controller's (root excepted), the kernel does not name
/// it (another PID namespace), or it is NGINX's: the master the pid file of
/// `nginx_prefix` names, one of its descendants, or a process of its group (when the
/// master leads a group of its own, as Ferrule starts it).
pub fn refusal(peer: Option<tokio::net::unix::UCred>, nginx_prefix: &Path) -> Option<&'static str> {
    let Some(peer) = peer else {
        return Some("a process the kernel does not name");
    };
    let euid = nix::unistd::geteuid().as_raw();
    if peer.uid() != euid && peer.uid() != 0 {
        return Some("another user");
    }
    let Some(pid) = peer.pid().filter(|p| *p > 0) else {
        return Some("a process of another PID namespace");
    };
    let pid_file = nginx_prefix.join(crate::nginx::process::PID_FILE);
    let master: Option<i32> = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .filter(|p| *p > 1);
    let conf = nginx_prefix.join("conf/nginx.conf");
    let Some(master) = master.filter(|m| crate::nginx::process::is_master_of(*m, &conf)) else {
        // No NGINX of this prefix runs: nothing to tell apart.
        return None;
    };
    let nginx = "NGINX (its configuration is partly its tenants')";
    let group = stat(master)
        .map(|(_, group)| group)
        .filter(|g| *g == master);
    if stat(pid).is_some_and(|(_, g)| Some(g) == group) {
        return Some(nginx);
    }
    // The process and its ancestors, up to init.
    let mut at = pid;
    for _ in 0..64 {
        if at == master {
            return Some(nginx);
        }
        match stat(at) {
            Some((parent, _)) if parent > 1 => at = parent,
            _ => break,
        }
    }
    None
}

/// The parent and the process group of process `pid`, from `/proc`.
fn stat(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name, in parentheses, may hold anything: the fields follow the last ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(1);
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((parent, group))
}

/// `/status/resources` read from the status socket `path`, as the `ferrule
/// resources` command does: the body of a 200, else the answer as an error.
pub fn read_resources(path: &Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut socket = std::os::unix::net::UnixStream::connect(path)?;
    socket.write_all(b"GET /status/resources HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    socket.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    match head.split_whitespace().nth(1) {
        Some("200") => Ok(body.to_owned()),
        _ => Err(std::io::Error::other(format!(
            "{}: {}",
            head.lines().next().unwrap_or_default(),
            body.trim()
        ))),
    }
}

#[cfg(test)]
mod tests;
