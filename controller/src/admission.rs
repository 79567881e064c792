//! The validating admission webhook for networking.k8s.io/v1 Ingresses (issue 19):
//! AdmissionReview v1 over TLS on a port of its own (`--admission-port`).
//!
//! Decisions are the model's ([`ferrule_model::admission`]): the candidate is built
//! with the Ingresses of the latest snapshot that share its hosts, never with NGINX
//! and never with the whole cluster. An invalid Ingress is refused with the model's
//! message (the one `/status/resources` would show); conflicts, missing Services and
//! ignored annotations are warnings, which kubectl prints. Ingresses of another class
//! or outside `--watch-namespace` are allowed without a look.
//!
//! The certificate and key are read again when either file changes (checked when a
//! connection arrives): a rotated Secret mounted as files needs no restart, and the
//! controller's own certificate ([`crate::kube::webhook_certificate`]) reaches the
//! webhook the same way. Until the
//! first snapshot, reviews are answered 503, so that the webhook's `failurePolicy`
//! decides.
//!
//! Anyone who reaches the port may connect, so the listener bounds what a client
//! that does not finish can hold ([`Listening`]): connections open at once, the time
//! a connection has to complete each request, the size of a body.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ferrule_model::Snapshot;
use ferrule_model::admission::{Decision, Index, Operation, Options};
use k8s_openapi::api::networking::v1::Ingress;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio_rustls::rustls;

use crate::status::Shared;

/// The path the webhook serves (`clientConfig.url` or `service.path`).
pub const PATH: &str = "/networking/v1/ingresses";

/// At most this many warnings per answer: the API server truncates long lists, and
/// past a few, `/status/resources` is the place to read them.
const MAX_WARNINGS: usize = 20;

/// How long a client has to send a request's headers once it started them.
const HEADERS_TIMEOUT: Duration = Duration::from_secs(10);

/// Webhook settings.
#[derive(Debug, Clone)]
pub struct AdmissionOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Where the certificate comes from.
    pub certificate: CertificateSource,
    /// A missing or invalid TLS Secret refuses the Ingress (default: a warning).
    pub strict_tls: bool,
    /// `--watch-namespace`: Ingresses of other namespaces are not ours.
    pub namespace: Option<String>,
}

/// Where the webhook's certificate comes from.
#[derive(Debug, Clone)]
pub enum CertificateSource {
    /// Files of the user's (`--admission-cert`, `--admission-key`).
    Files {
        /// PEM certificate chain.
        cert: PathBuf,
        /// PEM private key.
        key: PathBuf,
    },
    /// A Secret the controller keeps (`--admission-secret`).
    Managed(crate::kube::webhook_certificate::Options),
}

// ---------------------------------------------------------------------------------------
// AdmissionReview v1: the fields the webhook reads and writes.

#[derive(Debug, Deserialize)]
struct Review {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<Request>,
}

#[derive(Debug, Deserialize)]
struct Request {
    uid: String,
    kind: GroupVersionKind,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Debug, Serialize)]
struct ReviewOut {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut,
}

#[derive(Debug, Serialize)]
struct ResponseOut {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
struct StatusOut {
    code: u16,
    message: String,
}

/// What the webhook answered, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed without a warning.
    Allowed,
    /// Allowed with warnings.
    Warned,
    /// Refused.
    Denied,
    /// No decision (an HTTP error).
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Warned => "warned",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Decisions

/// The webhook's state: the latest snapshot (shared with the model task, never
/// copied) and its admission index, made again when the snapshot changes.
pub struct Webhook {
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    index: Mutex<Option<Arc<Index>>>,
    strict_tls: bool,
    namespace: Option<String>,
    shared: Arc<Shared>,
}

impl Webhook {
    /// A webhook deciding against the snapshots of `snapshots`.
    pub fn new(
        snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
        strict_tls: bool,
        namespace: Option<String>,
        shared: Arc<Shared>,
    ) -> Self {
        Webhook {
            snapshots,
            index: Mutex::new(None),
            strict_tls,
            namespace,
            shared,
        }
    }

    /// The index of the latest snapshot, updated from the last one (reusing what did
    /// not change); `None` before the first snapshot.
    fn index(&self) -> Option<Arc<Index>> {
        let snap = self.snapshots.borrow().clone()?;
        let mut cur = self.index.lock().expect("admission index lock");
        if let Some(i) = cur.as_ref().filter(|i| Arc::ptr_eq(i.snapshot(), &snap)) {
            return Some(i.clone());
        }
        let next = Arc::new(match cur.as_ref() {
            Some(i) => i.update(snap),
            None => Index::new(snap),
        });
        *cur = Some(next.clone());
        Some(next)
    }

    /// Answers one AdmissionReview body: the HTTP status, the body, the outcome.
    pub fn review(&self, body: &[u8]) -> (StatusCode, Vec<u8>, Outcome) {
        let started = Instant::now();
        let answer = self.answer(body);
        let outcome = match &answer {
            Err(_) => Outcome::Error,
            Ok(r) if !r.allowed => Outcome::Denied,
            Ok(r) if r.warnings.is_empty() => Outcome::Allowed,
            Ok(_) => Outcome::Warned,
        };
        let m = &self.shared.metrics;
        m.admission(outcome.label());
        m.admission_roundtrip
            .observe(started.elapsed().as_secs_f64());
        match answer {
            Err((status, message)) => (status, message.into_bytes(), outcome),
            Ok(response) => {
                let out = ReviewOut {
                    api_version: "admission.k8s.io/v1",
                    kind: "AdmissionReview",
                    response,
                };
                let body = serde_json::to_vec(&out).expect("serializing a review");
                (StatusCode::OK, body, outcome)
            }
        }
    }

    fn answer(&self, body: &[u8]) -> Result<ResponseOut, (StatusCode, String)> {
        let bad = |m: String| (StatusCode::BAD_REQUEST, m);
        let review: Review = serde_json::from_slice(body)
            .map_err(|e| bad(format!("not an AdmissionReview: {e}")))?;
        if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
            return Err(bad(format!(
                "expected an admission.k8s.io/v1 AdmissionReview, got {} {}",
                review.api_version, review.kind
            )));
        }
        let req = review
            .request
            .ok_or_else(|| bad("the AdmissionReview has no request".to_owned()))?;
        let allow = |warnings| ResponseOut {
            uid: req.uid.clone(),
            allowed: true,
            status: None,
            warnings,
        };
        let gvk = &req.kind;
        let ingress = (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str())
            == ("networking.k8s.io", "v1", "Ingress");
        // Anything else is not what the webhook is registered for: nothing to say.
        let operation = match req.operation.as_str() {
            "CREATE" if ingress => Operation::Create,
            "UPDATE" if ingress => Operation::Update,
            _ => return Ok(allow(Vec::new())),
        };
        if let (Some(watched), Some(ns)) = (&self.namespace, &req.namespace)
            && watched != ns
        {
            return Ok(allow(Vec::new()));
        }
        let object = req
            .object
            .clone()
            .ok_or_else(|| bad("the request has no object".to_owned()))?;
        let candidate: Ingress = match serde_json::from_value(object) {
            Ok(i) => i,
            Err(e) => {
                return Ok(deny(
                    &req.uid,
                    vec![format!("not a networking.k8s.io/v1 Ingress: {e}")],
                    Vec::new(),
                ));
            }
        };
        let Some(index) = self.index() else {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "Ferrule has not read the cluster yet".to_owned(),
            ));
        };
        let opts = Options {
            strict_tls: self.strict_tls,
            now: Some(now()),
            operation,
        };
        let (decision, tested) = index.check_counted(candidate, &opts);
        self.shared
            .metrics
            .admission_tested_ingresses
            .set(tested as i64);
        Ok(match decision {
            Decision::NotOurs => allow(Vec::new()),
            Decision::Allowed { warnings } => allow(capped(warnings)),
            Decision::Denied { reasons, warnings } => deny(&req.uid, reasons, warnings),
        })
    }
}

fn deny(uid: &str, reasons: Vec<String>, warnings: Vec<String>) -> ResponseOut {
    ResponseOut {
        uid: uid.to_owned(),
        allowed: false,
        status: Some(StatusOut {
            code: 400,
            message: reasons.join("; "),
        }),
        warnings: capped(warnings),
    }
}

/// At most [`MAX_WARNINGS`] warnings, the last saying how many were left out.
fn capped(mut warnings: Vec<String>) -> Vec<String> {
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - (MAX_WARNINGS - 1);
        warnings.truncate(MAX_WARNINGS - 1);
        warnings.push(format!(
            "and {more} more problems: see Ferrule's /status/resources"
        ));
    }
    warnings
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

// ---------------------------------------------------------------------------------------
// TLS: the certificate and key, read again when they change

/// The identity of a file's content as `stat` sees it: a rewrite or a symlink swap
/// (how kubelet updates a mounted Secret) changes it.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// The server's TLS configuration, from the certificate and key files.
pub struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    /// The stamps last read and the configuration last loaded (kept when a newer
    /// pair does not load: a rotation caught between its two files).
    state: Mutex<(Stamp, Stamp, Option<Arc<rustls::ServerConfig>>)>,
}

impl Certificates {
    /// Reads the files once: an error if they do not load.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let c = Certificates::pending(cert, key);
        let config = server_config(cert, key)?;
        *c.state.lock().expect("certificate lock") =
            (stamp(cert), stamp(key), Some(Arc::new(config)));
        Ok(c)
    }

    /// Files that are written later (by the controller, from a Secret): until then
    /// connections are closed without a handshake.
    pub fn pending(cert: &Path, key: &Path) -> Self {
        Certificates {
            cert: cert.to_owned(),
            key: key.to_owned(),
            state: Mutex::new((None, None, None)),
        }
    }

    /// The configuration for a new connection: the files are read again if either
    /// changed since the last look.
    pub fn config(&self) -> Option<Arc<rustls::ServerConfig>> {
        let (cert, key) = (stamp(&self.cert), stamp(&self.key));
        let mut state = self.state.lock().expect("certificate lock");
        if (&state.0, &state.1) != (&cert, &key) {
            match server_config(&self.cert, &self.key) {
                Ok(c) => {
                    tracing::info!(cert = %self.cert.display(), "admission webhook certificate loaded");
                    state.2 = Some(Arc::new(c));
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    "admission webhook certificate not loaded; keeping the last one"
                ),
            }
            (state.0, state.1) = (cert, key);
        }
        state.2.clone()
    }
}

fn server_config(cert: &Path, key: &Path) -> anyhow::Result<rustls::ServerConfig> {
    use anyhow::Context as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the certificate {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{}: no certificate", cert.display());
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and the private key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

// ---------------------------------------------------------------------------------------
// Serving

async fn handle(State(w): State<Arc<Webhook>>, body: Bytes) -> Response {
    let (status, body, _) = w.review(&body);
    let content_type = match status {
        StatusCode::OK => "application/json",
        _ => "text/plain; charset=utf-8",
    };
    (
        status,
        [(axum::http::header::CONTENT_TYPE, content_type)],
        body,
    )
        .into_response()
}

/// The webhook's HTTP routes (plain HTTP: [`serve`] puts TLS in front), refusing
/// bodies over `max_body` bytes (413).
pub fn router(webhook: Arc<Webhook>, max_body: usize) -> Router {
    Router::new()
        .route(PATH, post(handle))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(webhook)
}

/// How the listener keeps clients that connect and do not finish from holding it.
/// They would stall every Ingress change of a cluster whose webhook has
/// `failurePolicy: Fail`: 100 connections trickling a body were all still open a
/// minute later before these limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// Connections open at once. One more closes one: the stalest (see `deadline`)
    /// of the address holding the most, so that one client's connections make room
    /// for each other, not for the API server's.
    pub max_connections: usize,
    /// A connection is closed unless it completes a request (TLS handshake, headers
    /// and body read, answered) within this of being accepted or of its last answer:
    /// an overall deadline per request, and the idle timeout between two.
    pub deadline: Duration,
    /// The largest AdmissionReview body, in bytes (larger ones are answered 413).
    pub max_body: usize,
}

/// The default [`Listening::max_connections`]: far above the reviews an API server
/// sends at once, and a bound on the memory bodies can take (each up to
/// [`Listening::max_body`]).
pub const MAX_CONNECTIONS: usize = 64;

/// The default [`Listening::deadline`]: the API server's default `timeoutSeconds`; a
/// review the webhook has not answered by then has failed at the API server anyway.
pub const DEADLINE: Duration = Duration::from_secs(10);

impl Listening {
    /// The defaults, with a body limit derived from the per-Ingress limits: a review
    /// holds the object and its old version, each at most `--max-ingress-bytes` of
    /// what Ferrule reads (anything larger is denied by the model, so it must still
    /// arrive), which JSON escaping at most doubles for printable text (quotes,
    /// backslashes, newlines), plus 512 KiB each for what that limit does not count
    /// (JSON's structure, labels, managedFields). 3 MiB with the default limit, which
    /// is the API server's own limit of a request body.
    pub fn new(limits: &ferrule_model::snapshot::Limits) -> Self {
        Listening {
            max_connections: MAX_CONNECTIONS,
            deadline: DEADLINE,
            max_body: 2 * (2 * limits.ingress_bytes + (512 << 10)),
        }
    }
}

/// The open connections: who they come from, when they last made progress (accepted
/// or answered), and how to close them.
#[derive(Default)]
struct Connections {
    next: u64,
    open: std::collections::HashMap<u64, Open>,
}

struct Open {
    ip: std::net::IpAddr,
    progress: Instant,
    task: Option<tokio::task::AbortHandle>,
}

impl Connections {
    /// Room for a connection from `ip`: closes one when `max` are open (the stalest of
    /// the address holding the most), then registers it.
    fn admit(&mut self, ip: std::net::IpAddr, max: usize) -> u64 {
        while self.open.len() >= max.max(1) {
            let mut per_ip: std::collections::HashMap<std::net::IpAddr, usize> =
                std::collections::HashMap::new();
            for o in self.open.values() {
                *per_ip.entry(o.ip).or_default() += 1;
            }
            let busiest = per_ip.into_iter().max_by_key(|(ip, n)| (*n, *ip));
            let Some((busiest, _)) = busiest else { break };
            let stalest = (self.open.iter())
                .filter(|(_, o)| o.ip == busiest)
                .min_by_key(|(id, o)| (o.progress, **id))
                .map(|(id, _)| *id);
            let Some(o) = stalest.and_then(|id| self.open.remove(&id)) else {
                break;
            };
            tracing::debug!(peer = %o.ip, "admission webhook: connection closed for a new one");
            if let Some(task) = o.task {
                task.abort();
            }
        }
        let id = self.next;
        self.next += 1;
        let open = Open {
            ip,
            progress: Instant::now(),
            task: None,
        };
        self.open.insert(id, open);
        id
    }
}

/// A connection's place in [`Connections`], given back when its task ends (or is
/// aborted).
struct Slot {
    connections: Arc<Mutex<Connections>>,
    id: u64,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.connections.lock().expect("admission connections lock")
    }

    /// When the connection last made progress (`None`: closed for another).
    fn progress(&self) -> Option<Instant> {
        self.lock().open.get(&self.id).map(|o| o.progress)
    }

    fn answered(&self) {
        if let Some(o) = self.lock().open.get_mut(&self.id) {
            o.progress = Instant::now();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let id = self.id;
        self.lock().open.remove(&id);
    }
}

/// Serves the webhook on `listener`, TLS only, until the process exits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    certificates: Arc<Certificates>,
    webhook: Arc<Webhook>,
    listening: Listening,
) {
    serve_accepted(|| listener.accept(), certificates, webhook, listening).await
}

/// [`serve`] on the connections `accept` gives.
async fn serve_accepted<F, A>(
    mut accept: F,
    certificates: Arc<Certificates>,
    webhook: Arc<Webhook>,
    listening: Listening,
) where
    F: FnMut() -> A,
    A: std::future::Future<Output = std::io::Result<(tokio::net::TcpStream, SocketAddr)>>,
{
    let app = router(webhook, listening.max_body);
    let connections = Arc::new(Mutex::new(Connections::default()));
    loop {
        let (tcp, peer) = match accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "admission webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(config) = certificates.config() else {
            continue;
        };
        // An answer must not wait behind an earlier segment's delayed ACK (Nagle's
        // algorithm): on a new connection, rustls writes its session tickets, then
        // the answer, and the answer waited up to 40 ms for the client's ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "admission webhook: TCP_NODELAY not set");
        }
        let id = (connections.lock().expect("admission connections lock"))
            .admit(peer.ip(), listening.max_connections);
        let slot = Slot {
            connections: connections.clone(),
            id,
        };
        let app = app.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                () = connection(tcp, peer, config, app, &slot) => {}
                () = deadline(&slot, listening.deadline) => {
                    tracing::debug!(%peer, "admission webhook: connection closed at its deadline");
                }
            }
        });
        let mut open = connections.lock().expect("admission connections lock");
        if let Some(o) = open.open.get_mut(&id) {
            o.task = Some(task.abort_handle());
        }
    }
}

/// Returns once the connection of `slot` has made no progress for `deadline`.
async fn deadline(slot: &Slot, deadline: Duration) {
    while let Some(progress) = slot.progress() {
        let until = progress + deadline;
        if Instant::now() >= until {
            return;
        }
        tokio::time::sleep_until(until.into()).await;
    }
}

/// One connection: the TLS handshake, then HTTP/1.1 until the client closes.
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    app: Router,
    slot: &Slot,
) {
    use hyper::service::Service as _;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "admission webhook: TLS handshake failed");
            return;
        }
    };
    let inner = hyper_util::service::TowerToHyperService::new(app);
    let service = hyper::service::service_fn(|req| {
        let answer = inner.call(req);
        async move {
            let answer = answer.await;
            slot.answered();
            answer
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADERS_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "admission webhook: connection ended");
    }
}

#[cfg(test)]
mod tests;
