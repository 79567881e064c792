//! What changed between two models, and what NGINX must do about it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::model::{Backend, DEFAULT_SERVER, Model, Server};

/// The outcome of comparing the running model with a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Diff {
    /// Nothing NGINX serves differs (problems may still differ).
    Unchanged,
    /// Only endpoints, balancing settings, the backend set, certificate contents or
    /// which hosts have TLS differ: POST the named backends and certificates (a name
    /// absent from the new model means "remove"); no reload.
    Dynamic {
        /// Backends added, removed or changed.
        backends: Vec<String>,
        /// Certificates added, removed or changed.
        certificates: Vec<String>,
        /// Hosts that gained or lost TLS, or switched certificates (`_` when the
        /// default certificate changed).
        tls_hosts: Vec<String>,
    },
    /// The configuration files change: render, test and reload.
    Reload {
        /// Machine-readable reasons, e.g. `server-added:foo.com`.
        reasons: Vec<String>,
    },
}

/// Classifies the change from `old` to `new`.
pub fn diff(old: &Model, new: &Model) -> Diff {
    let mut reasons = Vec::new();
    if old.global != new.global {
        reasons.push("global-settings".to_owned());
    }
    if old.default_backend != new.default_backend {
        reasons.push("default-backend".to_owned());
    }
    if old.passthrough != new.passthrough {
        reasons.push("ssl-passthrough".to_owned());
    }
    // A stream's endpoints are its backend's (posted); anything else is its server.
    if old.streams != new.streams {
        let key = |s: &crate::model::Stream| format!("{}/{}", s.protocol, s.port);
        let old_streams: BTreeMap<String, _> = old.streams.iter().map(|s| (key(s), s)).collect();
        let new_streams: BTreeMap<String, _> = new.streams.iter().map(|s| (key(s), s)).collect();
        for side in merge(&old_streams, &new_streams) {
            match side {
                Side::Old(k) => reasons.push(format!("stream-removed:{k}")),
                Side::New(k) => reasons.push(format!("stream-added:{k}")),
                Side::Both(k, o, n) if o != n => reasons.push(format!("stream-changed:{k}")),
                Side::Both(..) => {}
            }
        }
    }
    // The same servers (the build's endpoint fast path shares them): nothing to
    // compare, which is most of the diff's cost in a large cluster.
    let same_servers = Arc::ptr_eq(&old.servers, &new.servers);
    if !same_servers {
        let old_hosts: BTreeSet<&str> = old.servers.iter().map(|s| s.host.as_str()).collect();
        let new_hosts: BTreeSet<&str> = new.servers.iter().map(|s| s.host.as_str()).collect();
        for h in old_hosts.difference(&new_hosts) {
            reasons.push(format!("server-removed:{h}"));
        }
    }
    // Certificates of hosts that gained, lost or switched TLS: the rendered server does
    // not depend on TLS (the balancer serves certificates by SNI and decides the
    // ssl-redirect per request), so that is a certificate change, not a reload.
    let mut tls_hosts = Vec::new();
    // The default certificate is the balancer's fallback for every name without a
    // certificate of its own: a change of it is the catch-all's TLS changing.
    if default_certificate(old) != default_certificate(new) {
        tls_hosts.push(DEFAULT_SERVER.to_owned());
    }
    let changed_servers = if same_servers {
        &[][..]
    } else {
        &new.servers[..]
    };
    for s in changed_servers {
        match old.server(&s.host) {
            None => reasons.push(format!("server-added:{}", s.host)),
            Some(o) if o == s => {}
            Some(o) if same_but_tls(o, s) => tls_hosts.push(s.host.clone()),
            Some(_) => reasons.push(format!("server-changed:{}", s.host)),
        }
    }
    // EWMA needs the log phase, rendered only where it is used (canary and affinity
    // are decided in the balancer phase, which every location has). Only backends a
    // location routes to have locations to render: a canary-only backend's phases
    // are its primary's (the set is built once, when first needed).
    let mut routed: Option<std::collections::HashSet<&str>> = None;
    for (name, o, n) in merge(&old.backends, &new.backends).filter_map(Side::both) {
        if shared_routing(old, new, o, n) || old.feeds_ewma(name) == new.feeds_ewma(name) {
            continue;
        }
        if routed
            .get_or_insert_with(|| new.routed_backends().map(String::as_str).collect())
            .contains(name.as_str())
        {
            reasons.push(format!("load-balance:{}", n.name));
        }
    }
    if !reasons.is_empty() {
        return Diff::Reload { reasons };
    }

    let backends = changed_keys(&old.backends, &new.backends);
    let certificates = changed_keys(&old.certificates, &new.certificates);
    if backends.is_empty() && certificates.is_empty() && tls_hosts.is_empty() {
        Diff::Unchanged
    } else {
        Diff::Dynamic {
            backends,
            certificates,
            tls_hosts,
        }
    }
}

/// Whether two versions of a server differ in their TLS settings only.
fn same_but_tls(a: &Server, b: &Server) -> bool {
    let Server {
        host,
        tls: _,
        owner,
        server_snippet,
        client_certificates,
        ciphers,
        locations,
        redirect_to,
    } = a;
    *host == b.host
        && *owner == b.owner
        && *server_snippet == b.server_snippet
        && *client_certificates == b.client_certificates
        && *ciphers == b.ciphers
        && *locations == b.locations
        && *redirect_to == b.redirect_to
}

/// The default certificate's name and contents.
fn default_certificate(m: &Model) -> Option<(&String, Option<&crate::model::Certificate>)> {
    let name = m.default_certificate.as_ref()?;
    Some((name, m.certificates.get(name)))
}

/// Whether a backend's EWMA and routing decisions cannot have changed: the build's
/// endpoint fast path shares unchanged backends, and at 10k backends these checks were
/// most of the diff's cost after it. A canary's target counts too (`feeds_ewma`).
fn shared_routing(old: &Model, new: &Model, o: &Arc<Backend>, n: &Arc<Backend>) -> bool {
    Arc::ptr_eq(o, n)
        && n.balancing.canary.as_ref().is_none_or(|c| {
            match (old.backends.get(&c.backend), new.backends.get(&c.backend)) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
        })
}

/// Names added, removed or changed, sorted (a shared `Arc` value compares by pointer).
fn changed_keys<V: PartialEq>(old: &BTreeMap<String, V>, new: &BTreeMap<String, V>) -> Vec<String> {
    merge(old, new)
        .filter_map(|side| match side {
            Side::Old(k) | Side::New(k) => Some(k.clone()),
            Side::Both(k, o, n) => (o != n).then(|| k.clone()),
        })
        .collect()
}

/// One entry of two sorted maps walked together.
enum Side<'a, V> {
    Old(&'a String),
    New(&'a String),
    Both(&'a String, &'a V, &'a V),
}

impl<'a, V> Side<'a, V> {
    fn both(self) -> Option<(&'a String, &'a V, &'a V)> {
        match self {
            Side::Both(k, o, n) => Some((k, o, n)),
            _ => None,
        }
    }
}

/// Both maps in key order, in one walk (no lookups).
fn merge<'a, V>(
    old: &'a BTreeMap<String, V>,
    new: &'a BTreeMap<String, V>,
) -> impl Iterator<Item = Side<'a, V>> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    std::iter::from_fn(move || {
        let step = match (o.peek(), n.peek()) {
            (None, None) => return None,
            (Some(_), None) => Less,
            (None, Some(_)) => Greater,
            (Some((ok, _)), Some((nk, _))) => ok.cmp(nk),
        };
        Some(match step {
            Less => Side::Old(o.next().expect("peeked").0),
            Greater => Side::New(n.next().expect("peeked").0),
            Equal => {
                let ((k, ov), (_, nv)) = (o.next().expect("peeked"), n.next().expect("peeked"));
                Side::Both(k, ov, nv)
            }
        })
    })
}
