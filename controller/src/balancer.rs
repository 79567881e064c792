//! Client of the in-NGINX balancer API (lua/): posts backends and certificates.
//!
//! The client remembers what the store holds and posts only the difference with the
//! desired model, so the same call serves the endpoint fast path (a few backends),
//! the aftermath of a reload (whatever changed with it) and a restarted NGINX (after
//! [`BalancerClient::reset`], everything).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ferrule_model::{Backend, Model};
use serde_json::{Value, json};

use crate::nginx::api;

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

/// What one sync posted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Posted {
    /// Backends posted or removed.
    pub backends: usize,
    /// Certificate hosts posted or removed.
    pub certificates: usize,
}

/// Posts model changes to the balancer over its unix socket.
pub struct BalancerClient {
    socket: PathBuf,
    token: String,
    version: u64,
    backends: BTreeMap<String, Backend>,
    certificates: BTreeMap<String, (String, String)>,
}

impl BalancerClient {
    /// A client for the API at `socket`, authenticating with `token`.
    pub fn new(socket: PathBuf, token: String) -> Self {
        Self {
            socket,
            token,
            version: 0,
            backends: BTreeMap::new(),
            certificates: BTreeMap::new(),
        }
    }

    /// Forgets what the store holds (after NGINX restarted: its shared memory is new).
    pub fn reset(&mut self) {
        self.backends.clear();
        self.certificates.clear();
    }

    /// Posts what differs between the store and `model`, retrying with backoff.
    pub async fn sync(&mut self, model: &Model) -> Result<Posted, BalancerError> {
        let mut posted = Posted::default();
        let changed: Vec<&Backend> = model
            .backends
            .values()
            .filter(|b| self.backends.get(&b.name) != Some(*b))
            .collect();
        let removed: Vec<&String> = self
            .backends
            .keys()
            .filter(|n| !model.backends.contains_key(*n))
            .collect();
        if !changed.is_empty() || !removed.is_empty() {
            self.version += 1;
            let body = json!({
                "version": self.version,
                "backends": changed.iter().map(|b| backend_json(b)).collect::<Vec<_>>(),
                "removed": removed,
            });
            self.post("/configuration/backends", &body).await?;
            posted.backends = changed.len() + removed.len();
            self.backends = model.backends.clone();
        }

        let wanted = certificate_hosts(model);
        let changed: Vec<Value> = wanted
            .iter()
            .filter(|(h, c)| self.certificates.get(*h) != Some(*c))
            .map(|(h, (cert, key))| json!({"host": h, "cert": cert, "key": key}))
            .collect();
        let removed: Vec<&String> = self
            .certificates
            .keys()
            .filter(|h| !wanted.contains_key(*h))
            .collect();
        if !changed.is_empty() || !removed.is_empty() {
            self.version += 1;
            let body =
                json!({"version": self.version, "certificates": changed, "removed": removed});
            self.post("/configuration/certificates", &body).await?;
            posted.certificates = changed.len() + removed.len();
            self.certificates = wanted;
        }
        Ok(posted)
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(), BalancerError> {
        let bytes = serde_json::to_vec(body).expect("JSON encoding cannot fail");
        let mut delay = Duration::from_millis(20);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result =
                api::request(&self.socket, "POST", path, Some(&self.token), Some(&bytes)).await;
            match result {
                Ok(r) if (200..300).contains(&r.status) => return Ok(()),
                // A refusal is deterministic: retrying the same body cannot help.
                Ok(r) if r.status < 500 => {
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
                Err(e) if attempt >= 5 => return Err(e.into()),
                _ => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}

/// Host → (certificate PEM, key PEM) for every server served with a model certificate.
fn certificate_hosts(model: &Model) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for s in &model.servers {
        let Some(name) = s.tls.as_ref().and_then(|t| t.certificate.as_ref()) else {
            continue;
        };
        if let Some(c) = model.certificates.get(name) {
            out.insert(s.host.clone(), (c.cert_pem.clone(), c.key_pem.clone()));
        }
    }
    out
}

fn backend_json(b: &Backend) -> Value {
    let bal = &b.balancing;
    json!({
        "name": b.name,
        "endpoints": b.endpoints.iter().map(|e| json!({"address": e.address, "port": e.port})).collect::<Vec<_>>(),
        "load_balance": bal.load_balance,
        "upstream_hash_by": bal.upstream_hash_by,
        "affinity": bal.affinity.as_ref().map(|a| json!({
            "mode": "cookie", "cookie_name": a.cookie_name, "max_age": a.max_age, "path": a.path,
        })),
        "canary": bal.canary.as_ref().map(|c| json!({
            "backend": c.backend,
            "weight": c.rules.weight,
            "weight_total": c.rules.weight_total,
            "header": c.rules.header,
            "header_value": c.rules.header_value,
            "cookie": c.rules.cookie,
        })),
    })
}
