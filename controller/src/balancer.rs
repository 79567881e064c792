//! Client of the in-NGINX balancer API (lua/ or njs/, the same API): posts backends
//! and certificates.
//!
//! The client remembers what the store holds and posts only the difference with the
//! desired model, so the same call serves the endpoint fast path (a few backends),
//! the aftermath of a reload (whatever changed with it) and a restarted NGINX (after
//! [`BalancerClient::reset`], everything).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ferrule_model::{Backend, Certificate, Model, Server};
use serde_json::Value;

use crate::nginx::api;

mod mirror;
mod wire;

use mirror::{Mirror, Refusal};

/// A failed update.
#[derive(Debug, thiserror::Error)]
pub enum BalancerError {
    /// The socket could not be reached.
    #[error("balancer API unreachable: {0}")]
    Io(#[from] std::io::Error),
    /// The API refused the update.
    #[error("balancer API answered {status}: {body}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Error body.
        body: String,
    },
}

/// A sync that stopped: what it was posting (`backends` or `certificates`, the
/// metric's kinds) and why. What was posted before it stays applied.
#[derive(Debug, thiserror::Error)]
#[error("posting {kind}: {error}")]
pub struct SyncError {
    /// [`BACKENDS`] or [`CERTIFICATES`].
    pub kind: &'static str,
    /// The failure.
    #[source]
    pub error: BalancerError,
}

/// The kind of a sync posting backends.
pub const BACKENDS: &str = "backends";
/// The kind of a sync posting certificates (the default one included).
pub const CERTIFICATES: &str = "certificates";

fn during(kind: &'static str) -> impl FnOnce(BalancerError) -> SyncError {
    move |error| SyncError { kind, error }
}

/// What one sync posted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Posted {
    /// Backends posted or removed.
    pub backends: usize,
    /// Certificate hosts posted or removed.
    pub certificates: usize,
    /// Backends (`backend NAME: message`) and certificates (`certificate HOST: message`)
    /// the API refused in this sync. Everything else was applied: one invalid object
    /// never blocks the others. A refused object is not posted again until it changes.
    pub rejected: Vec<String>,
}

impl Posted {
    /// How many backends the API refused.
    pub fn rejected_backends(&self) -> usize {
        self.rejected
            .iter()
            .filter(|r| r.starts_with("backend "))
            .count()
    }

    /// How many certificates the API refused.
    pub fn rejected_certificates(&self) -> usize {
        self.rejected.len() - self.rejected_backends()
    }
}

/// An object the API refused, as reported on the resources it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// [`BACKENDS`] (`name` is a backend), [`CERTIFICATES`] (`name` is a host), or
    /// [`DEFAULT_CERTIFICATE`] (`name` is empty).
    pub kind: &'static str,
    /// The backend or host.
    pub name: String,
    /// Why, as the API said.
    pub message: String,
    /// Refused for want of room in the store (507), not for what it holds: posted
    /// again once something leaves the store.
    pub full: bool,
}

/// The kind of a refused default certificate.
pub const DEFAULT_CERTIFICATE: &str = "default certificate";

/// At most this many objects per POST: a full sync at 10k backends in one body
/// needed tens of MB in the controller and in the Lua decoder at once.
const CHUNK: usize = 1000;

/// The model's certificates by name.
type Certificates = BTreeMap<String, Certificate>;

/// The longest one API request may take by default. A chunk of 1,000 backends is
/// decoded in well under a second; a timed-out request is not retried in place.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Posts model changes to the balancer over its unix socket.
pub struct BalancerClient {
    socket: PathBuf,
    token: String,
    version: u64,
    /// What the store holds of backends by name and certificates by host, as far as
    /// this client posted it, and what the API refused (not retried while unchanged).
    backends: Mirror<String, Digest>,
    certificates: Mirror<String, Digest>,
    /// Why the fallback certificate was refused, if it was.
    refused_default: Option<Refusal<Digest>>,
    /// The certificate store's size and free bytes, as the API last said (Lua only).
    certificate_store: Option<(u64, u64)>,
    /// The hosts whose certificates the store held before [`BalancerClient::reset`]:
    /// posted first into the new store, so that when it cannot take everything, the
    /// hosts that were served keep their certificates and what came last is refused.
    stored_before_reset: std::collections::BTreeSet<String>,
    /// The digest of each backend of the last synced model, with the backend it was
    /// computed from: a backend the next model shares (the build's endpoint fast path
    /// copies only the backends it changes) is not hashed again.
    digests: BTreeMap<String, (Arc<Backend>, Digest)>,
    /// Served for TLS hosts without a valid certificate of their own (the entry also
    /// tells the balancer that the host has TLS, for the ssl-redirect).
    default_certificate: Option<std::sync::Arc<(String, String)>>,
    /// The servers and certificates of the last model whose certificates were all
    /// posted: a model sharing both (the build's endpoint fast path) needs no
    /// certificate work. Weak: the allocations stay (no address is reused) but not
    /// the contents.
    certificates_posted: Option<(Weak<Vec<Server>>, Weak<Certificates>)>,
    /// The fallback certificate the store holds (posted as `default`).
    posted_default: Option<(String, String)>,
    /// The most objects one POST carries.
    batch: usize,
    /// The longest one API request may take.
    timeout: Duration,
    /// Set until the first sync after [`BalancerClient::new`] or [`BalancerClient::reset`]
    /// has read which names the store holds: an NGINX adopted after a controller
    /// restart keeps backends and certificates deleted while no controller ran, and
    /// this client, having never posted them, would never remove them.
    store_unread: bool,
}

impl BalancerClient {
    /// A client for the API at `socket`, authenticating with `token`.
    pub fn new(socket: PathBuf, token: String) -> Self {
        Self {
            socket,
            token,
            version: 0,
            backends: Mirror::new(false),
            // a certificate rotated to a smaller pair can make room
            certificates: Mirror::new(true),
            refused_default: None,
            certificate_store: None,
            stored_before_reset: Default::default(),
            digests: BTreeMap::new(),
            default_certificate: None,
            certificates_posted: None,
            posted_default: None,
            batch: CHUNK,
            timeout: REQUEST_TIMEOUT,
            store_unread: true,
        }
    }

    /// Posts `cert` and `key` (PEM) for TLS hosts that have no valid certificate of
    /// their own.
    pub fn with_default_certificate(mut self, (cert, key): &(String, String)) -> Self {
        if !cert.is_empty() && !key.is_empty() {
            self.default_certificate = Some(std::sync::Arc::new((cert.clone(), key.clone())));
        }
        self
    }

    /// Posts at most `batch` objects per request (at least one, at most [`CHUNK`]),
    /// for balancers that cannot take a full resync at once (`Balancer::max_batch`).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.clamp(1, CHUNK);
        self
    }

    /// Gives up on an API request after `timeout` (default 15 s).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Forgets what the store holds (after NGINX restarted: its shared memory is new).
    pub fn reset(&mut self) {
        self.backends.forget();
        let hosts = self.certificates.forget();
        if !hosts.is_empty() {
            self.stored_before_reset = hosts.into_iter().collect();
        }
        self.refused_default = None;
        self.certificate_store = None;
        self.certificates_posted = None;
        self.posted_default = None;
        self.store_unread = true;
    }

    /// What the API refuses now: each refused object until it changes (or, refused
    /// for want of room, until something leaves the store).
    pub fn refused(&self) -> Vec<Refused> {
        let each = |kind, mirror: &Mirror<String, Digest>| {
            mirror
                .refused()
                .map(|(name, r)| Refused {
                    kind,
                    name: name.clone(),
                    message: r.message.clone(),
                    full: r.full,
                })
                .collect::<Vec<_>>()
        };
        let mut out = each(BACKENDS, &self.backends);
        out.extend(each(CERTIFICATES, &self.certificates));
        out.extend(self.refused_default.iter().map(|r| Refused {
            kind: DEFAULT_CERTIFICATE,
            name: String::new(),
            message: r.message.clone(),
            full: r.full,
        }));
        out
    }

    /// The certificate store's size and free bytes (whole free pages), as the API
    /// said after the last sync that changed it; `None` when it does not say (njs).
    pub fn certificate_store(&self) -> Option<(u64, u64)> {
        self.certificate_store
    }

    /// Reads the certificate store's size and free bytes (`GET
    /// /configuration/version`); keeps the last known on failure.
    async fn read_certificate_store(&mut self) {
        let Ok(r) = self.request("GET", "/configuration/version", None).await else {
            return;
        };
        let Ok(v) = serde_json::from_str::<Value>(&r.body) else {
            return;
        };
        let c = &v["certificates"];
        if let (Some(capacity), Some(free)) = (c["capacity"].as_u64(), c["free_space"].as_u64()) {
            self.certificate_store = Some((capacity, free));
        }
    }

    /// Posts what differs between the store and `model`, retrying with backoff.
    ///
    /// The delta goes in one POST per kind. If the API refuses it (4xx: an object
    /// fails its validation; 507: the store has no room for one), the removals and
    /// then every changed object are posted one by one, so that the others are
    /// applied and only the refused ones are reported in [`Posted::rejected`] (and
    /// [`BalancerClient::refused`]): one tenant's object that does not fit is that
    /// tenant's problem, not a failed sync. Errors are returned only when nothing
    /// could be applied (socket unreachable, token refused, ...).
    pub async fn sync(&mut self, model: &Model) -> Result<Posted, SyncError> {
        let mut posted = Posted::default();
        self.digests.retain(|n, _| model.backends.contains_key(n));
        let mut wanted: BTreeMap<&str, Digest> = BTreeMap::new();
        for (name, b) in &model.backends {
            let d = match self.digests.get_mut(name) {
                Some((seen, d)) if Arc::ptr_eq(seen, b) => *d,
                Some(entry) => {
                    *entry = (b.clone(), digest(&**b));
                    entry.1
                }
                None => {
                    let d = digest(&**b);
                    self.digests.insert(name.clone(), (b.clone(), d));
                    d
                }
            };
            wanted.insert(name, d);
        }
        let stored = if self.store_unread {
            Some(self.stored_names().await.map_err(during(BACKENDS))?)
        } else {
            None
        };
        let stored_backends = stored.as_ref().map(|(backends, _)| &backends[..]);
        let delta = self.backends.delta(&wanted, stored_backends);
        if !delta.changed.is_empty() || !delta.removed.is_empty() {
            let items: Vec<(String, wire::Backend)> = delta
                .changed
                .iter()
                .map(|(name, _)| {
                    (
                        name.to_string(),
                        wire::Backend::from(&*model.backends[*name]),
                    )
                })
                .collect();
            let refused = self
                .post_chunked(items, &delta.removed)
                .await
                .map_err(during(BACKENDS))?;
            let (applied, rejected) = self.backends.record(delta, refusal_in(&refused));
            posted.backends += applied;
            for (name, message) in rejected {
                posted.rejected.push(format!("backend {name}: {message}"));
            }
        }

        let shared = self
            .certificates_posted
            .as_ref()
            .is_some_and(|(servers, certs)| {
                servers.ptr_eq(&Arc::downgrade(&model.servers))
                    && certs.ptr_eq(&Arc::downgrade(&model.certificates))
            });
        if !shared {
            let stored_hosts = stored.as_ref().map(|(_, hosts)| &hosts[..]);
            self.sync_certificates(model, stored_hosts, &mut posted)
                .await
                .map_err(during(CERTIFICATES))?;
            self.certificates_posted = Some((
                Arc::downgrade(&model.servers),
                Arc::downgrade(&model.certificates),
            ));
        }
        self.sync_default(model, &mut posted)
            .await
            .map_err(during(CERTIFICATES))?;
        if self.store_unread || posted.certificates > 0 || posted.rejected_certificates() > 0 {
            self.read_certificate_store().await;
        }
        self.store_unread = false;
        for r in &posted.rejected {
            tracing::warn!(refused = %r, "the balancer API refused an update; the others are applied");
        }
        Ok(posted)
    }

    /// Posts the certificates by host that differ from what the store holds, and
    /// removes the hosts that lost TLS (`stored_hosts`: what an adopted store holds).
    async fn sync_certificates(
        &mut self,
        model: &Model,
        stored_hosts: Option<&[String]>,
        posted: &mut Posted,
    ) -> Result<(), BalancerError> {
        // An `Arc` clone: `wanted` borrows it across the `&mut self` posts below.
        let default = self.default_certificate.clone();
        let wanted = certificate_hosts(model, default.as_deref());
        // Most hosts share a few certificates (wildcards, the default): each pair is
        // hashed once.
        let mut seen: std::collections::HashMap<(usize, usize), Digest> =
            std::collections::HashMap::new();
        let digests: BTreeMap<&str, Digest> = wanted
            .iter()
            .map(|(h, pair)| {
                let d = *seen
                    .entry((pair.0.as_ptr() as usize, pair.1.as_ptr() as usize))
                    .or_insert_with(|| digest(pair));
                (*h, d)
            })
            .collect();
        let mut delta = self.certificates.delta(&digests, stored_hosts);
        // what was served before a restart first (a stable sort: host order else)
        delta
            .changed
            .sort_by_key(|(h, _)| !self.stored_before_reset.contains(*h));
        if !delta.changed.is_empty() || !delta.removed.is_empty() {
            let items: Vec<(String, wire::Certificate)> = delta
                .changed
                .iter()
                .map(|(h, _)| {
                    let (cert, key) = wanted[h];
                    (h.to_string(), wire::Certificate { host: h, cert, key })
                })
                .collect();
            let refused = self.post_chunked(items, &delta.removed).await?;
            let (applied, rejected) = self.certificates.record(delta, refusal_in(&refused));
            posted.certificates += applied;
            for (host, message) in rejected {
                posted
                    .rejected
                    .push(format!("certificate {host}: {message}"));
            }
        }
        self.stored_before_reset.clear();
        Ok(())
    }

    /// Posts the store's fallback certificate, served for every name without one of
    /// its own (the catch-all, hosts without TLS): `--default-ssl-certificate` when
    /// the model has a valid one, else the self-signed default. A change of it needs
    /// no reload.
    async fn sync_default(
        &mut self,
        model: &Model,
        posted: &mut Posted,
    ) -> Result<(), BalancerError> {
        let wanted = model
            .default_certificate
            .as_ref()
            .and_then(|n| model.certificates.get(n))
            .map(|c| (c.cert_pem.as_str(), c.key_pem.as_str()))
            .or(self
                .default_certificate
                .as_deref()
                .map(|(c, k)| (c.as_str(), k.as_str())));
        let Some((cert, key)) = wanted else {
            return Ok(());
        };
        let posted_now = self.posted_default.as_ref();
        let full = self.refused_default.as_ref().is_some_and(|r| r.full);
        if posted_now.is_some_and(|(c, k)| (c.as_str(), k.as_str()) == (cert, key))
            && !(full && posted.certificates > 0)
        {
            return Ok(());
        }
        let wanted = Some((cert.to_owned(), key.to_owned()));
        self.version += 1;
        let body = wire::Certificates {
            version: self.version,
            certificates: &[],
            removed: &[],
            default: Some(wire::Pair { cert, key }),
        }
        .encode();
        match self
            .post(<wire::Certificate as wire::Item>::PATH, &body)
            .await
        {
            Ok(()) => {
                posted.certificates += 1;
                self.refused_default = None;
            }
            // Not retried until it changes, like any refused object (a full store's
            // refusal: until a sync changes what the store holds).
            Err(BalancerError::Refused { status, body }) if is_refusal_status(status) => {
                let message = api_message(&body);
                posted
                    .rejected
                    .push(format!("{DEFAULT_CERTIFICATE}: {message}"));
                self.refused_default = Some(Refusal {
                    digest: digest(&(cert, key)),
                    message,
                    full: status == STORE_FULL,
                });
            }
            Err(e) => return Err(e),
        }
        self.posted_default = wanted;
        Ok(())
    }

    /// [`BalancerClient::post_delta`] in chunks of `self.batch` objects ([`CHUNK`]
    /// unless the balancer needs fewer; removals go with the first).
    async fn post_chunked<T: wire::Item>(
        &mut self,
        mut items: Vec<(String, T)>,
        removed: &[String],
    ) -> Result<Vec<Refused>, BalancerError> {
        let mut refused = Vec::new();
        let mut removed = removed;
        loop {
            let rest = items.split_off(items.len().min(self.batch));
            refused.extend(self.post_delta(items, removed).await?);
            removed = &[];
            if rest.is_empty() {
                return Ok(refused);
            }
            items = rest;
        }
    }

    /// Posts `items` (name, payload) and `removed`; when the API refuses an object
    /// (it fails its validation, or the store has no room for it), isolates the
    /// culprits. Returns the refused items.
    async fn post_delta<T: wire::Item>(
        &mut self,
        items: Vec<(String, T)>,
        removed: &[String],
    ) -> Result<Vec<Refused>, BalancerError> {
        let path = T::PATH;
        let refusal = |name: String, status: u16, body: &str| Refused {
            kind: T::KIND,
            name,
            message: api_message(body),
            full: status == STORE_FULL,
        };
        self.version += 1;
        let all: Vec<&T> = items.iter().map(|(_, v)| v).collect();
        let body = T::body(self.version, &all, removed);
        match self.post(path, &body).await {
            Ok(()) => return Ok(Vec::new()),
            Err(e) if !is_refusal(&e) || items.len() + removed.len() <= 1 => {
                // A single object: report it as refused, unless the API refused the
                // request itself (token, unreachable).
                return match (e, items.first()) {
                    (BalancerError::Refused { status, body }, Some((name, _)))
                        if is_refusal_status(status) && removed.is_empty() =>
                    {
                        Ok(vec![refusal(name.clone(), status, &body)])
                    }
                    (e, _) => Err(e),
                };
            }
            Err(_) => {}
        }
        // Isolate: removals first (they cannot be invalid), then one object at a time.
        if !removed.is_empty() {
            self.version += 1;
            let body = T::body(self.version, &[], removed);
            self.post(path, &body).await?;
        }
        let mut refused = Vec::new();
        for (name, item) in items {
            self.version += 1;
            let body = T::body(self.version, &[&item], &[]);
            match self.post(path, &body).await {
                Ok(()) => {}
                Err(BalancerError::Refused { status, body }) if is_refusal_status(status) => {
                    refused.push(refusal(name, status, &body));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(refused)
    }

    /// One API request. A hung NGINX (stopped, a stuck worker) must not hold the
    /// client's lock, and with it the fast path and the post after a reload, for ever.
    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> std::io::Result<api::Response> {
        let request = api::request(&self.socket, method, path, Some(&self.token), body);
        tokio::time::timeout(self.timeout, request)
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{method} {path}: no answer within {:?}", self.timeout),
                ))
            })
    }

    /// The backend names and certificate hosts the store holds (the `GET` debugging
    /// endpoints; the default certificate is not a host).
    async fn stored_names(&self) -> Result<(Vec<String>, Vec<String>), BalancerError> {
        let get = |path: &'static str| async move {
            let r = self.request("GET", path, None).await?;
            if r.status != 200 {
                return Err(BalancerError::Refused {
                    status: r.status,
                    body: r.body,
                });
            }
            // An unreadable answer is an error, not an empty store: the next sync
            // reads again rather than leaving stale entries for good.
            serde_json::from_str::<Value>(&r.body)
                .map_err(|e| std::io::Error::other(format!("GET {path}: {e}")).into())
        };
        let strings = |v: Option<&Vec<Value>>, pick: fn(&Value) -> Option<&str>| -> Vec<String> {
            v.into_iter()
                .flatten()
                .filter_map(pick)
                .map(str::to_owned)
                .collect()
        };
        // names only: the full list makes the worker read and encode every backend
        let backends = get("/configuration/backends?names=1").await?;
        let certificates = get("/configuration/certificates").await?;
        // An NGINX still running older balancer code answers the full list.
        let names = match backends["names"].as_array() {
            Some(names) => strings(Some(names), Value::as_str),
            None => strings(backends["backends"].as_array(), |b| {
                b["backend"]["name"].as_str()
            }),
        };
        Ok((
            names,
            strings(certificates["hosts"].as_array(), Value::as_str),
        ))
    }

    async fn post(&self, path: &str, bytes: &[u8]) -> Result<(), BalancerError> {
        let mut delay = Duration::from_millis(20);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.request("POST", path, Some(bytes)).await;
            match result {
                Ok(r) if (200..300).contains(&r.status) => return Ok(()),
                // A refusal is deterministic: retrying the same body cannot help
                // (nor, at once, does it for a full store).
                Ok(r) if r.status < 500 || r.status == STORE_FULL => {
                    return Err(BalancerError::Refused {
                        status: r.status,
                        body: r.body,
                    });
                }
                Ok(r) if attempt >= 5 => {
                    return Err(BalancerError::Refused {
                        status: r.status,
                        body: r.body,
                    });
                }
                // A hung NGINX is not retried here (five timeouts would hold the
                // lock five times as long): the caller tries again later.
                Err(e) if attempt >= 5 || e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(e.into());
                }
                _ => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}

/// The API's answer when the store has no room for an object (507 Insufficient
/// Storage).
const STORE_FULL: u16 = 507;

/// A refusal of what was posted: an object fails its validation, or the store has
/// no room for it (as opposed to authentication, or an API that cannot answer).
/// One object's refusal must not stop the others: it is isolated and reported.
fn is_refusal_status(status: u16) -> bool {
    ((400..500).contains(&status) && status != 401 && status != 403) || status == STORE_FULL
}

fn is_refusal(e: &BalancerError) -> bool {
    matches!(e, BalancerError::Refused { status, .. } if is_refusal_status(*status))
}

/// Why `refused` says an object was refused (message, for want of room), by name.
fn refusal_in(refused: &[Refused]) -> impl Fn(&str) -> Option<(String, bool)> + '_ {
    |name| {
        refused
            .iter()
            .find(|r| r.name == name)
            .map(|r| (r.message.clone(), r.full))
    }
}

/// The `error` of an API error body, or the body itself.
fn api_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned())
}

/// Host → (certificate PEM, key PEM) for every server with TLS: its model
/// certificate, else `default`.
fn certificate_hosts<'a>(
    model: &'a Model,
    default: Option<&'a (String, String)>,
) -> BTreeMap<&'a str, (&'a str, &'a str)> {
    let mut out = BTreeMap::new();
    for s in model.servers.iter() {
        let Some(tls) = &s.tls else {
            continue;
        };
        let own = tls
            .certificate
            .as_ref()
            .and_then(|n| model.certificates.get(n))
            .map(|c| (c.cert_pem.as_str(), c.key_pem.as_str()));
        if let Some(pair) = own.or(default.map(|(c, k)| (c.as_str(), k.as_str()))) {
            out.insert(s.host.as_str(), pair);
        }
    }
    out
}

/// What the client remembers of a posted object: a blake3 digest of its `Hash`
/// encoding. Copies of every posted backend and certificate cost tens of MB at 10k.
type Digest = [u8; 32];

fn digest<T: std::hash::Hash + ?Sized>(value: &T) -> Digest {
    /// Collects the `Hash` encoding so that blake3 sees one buffer, not thousands
    /// of tiny writes.
    struct Encoding(Vec<u8>);
    impl std::hash::Hasher for Encoding {
        fn write(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
        fn finish(&self) -> u64 {
            unreachable!("only the encoding is used")
        }
    }
    let mut e = Encoding(Vec::with_capacity(512));
    value.hash(&mut e);
    *blake3::hash(&e.0).as_bytes()
}

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod tests;
