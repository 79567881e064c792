//! What changed between two models, and what NGINX must do about it.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::model::Model;

/// The outcome of comparing the running model with a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Diff {
    /// Nothing NGINX serves differs (problems may still differ).
    Unchanged,
    /// Only endpoints, balancing settings, the backend set or certificate contents
    /// differ: POST the named backends and certificates (a name absent from the new
    /// model means "remove"); no reload.
    Dynamic {
        /// Backends added, removed or changed.
        backends: Vec<String>,
        /// Certificates added, removed or changed.
        certificates: Vec<String>,
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
    // The default certificate is the static `ssl_certificate` of every server
    // without one of its own (the balancer only serves certificates by SNI host), so
    // a new one, or new contents, is a new configuration.
    if default_certificate(old) != default_certificate(new) {
        reasons.push("default-certificate".to_owned());
    }
    let old_hosts: BTreeSet<&str> = old.servers.iter().map(|s| s.host.as_str()).collect();
    let new_hosts: BTreeSet<&str> = new.servers.iter().map(|s| s.host.as_str()).collect();
    for h in old_hosts.difference(&new_hosts) {
        reasons.push(format!("server-removed:{h}"));
    }
    for s in &new.servers {
        match old.server(&s.host) {
            None => reasons.push(format!("server-added:{}", s.host)),
            Some(o) if o != s => reasons.push(format!("server-changed:{}", s.host)),
            Some(_) => {}
        }
    }
    if !reasons.is_empty() {
        return Diff::Reload { reasons };
    }

    let backends = changed_keys(&old.backends, &new.backends);
    let certificates = changed_keys(&old.certificates, &new.certificates);
    if backends.is_empty() && certificates.is_empty() {
        Diff::Unchanged
    } else {
        Diff::Dynamic {
            backends,
            certificates,
        }
    }
}

/// The default certificate's name and contents.
fn default_certificate(m: &Model) -> Option<(&String, Option<&crate::model::Certificate>)> {
    let name = m.default_certificate.as_ref()?;
    Some((name, m.certificates.get(name)))
}

fn changed_keys<V: PartialEq>(
    old: &std::collections::BTreeMap<String, V>,
    new: &std::collections::BTreeMap<String, V>,
) -> Vec<String> {
    let mut out: Vec<String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    out.extend(old.keys().filter(|k| !new.contains_key(*k)).cloned());
    out.sort();
    out
}
