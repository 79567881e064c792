//! `ferrule_resource_rejected`: each resource Ferrule does not serve (or serves in
//! an earlier version), and why, as `/status/resources` reports it. One series per
//! resource and reason, 1 while it holds; the labels avoid `namespace` and `name`,
//! which scrape configurations attach to every target.

use ferrule_model::ProblemKind;

use super::identity::Identity;
use super::text::{Kind, header, sample};

const NAME: &str = "ferrule_resource_rejected";

/// Why a resource is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// `nginx -t` refused what it produced: left out of the configuration.
    Excluded,
    /// `nginx -t` refused its new version: the last accepted one is served.
    PreviousVersion,
    /// The ConfigMap broke `nginx -t`: its last good version stays in use.
    HeldBack,
    /// An error of the model (invalid value, conflict, missing reference, TLS).
    Problem(ProblemKind),
    /// The balancer inside NGINX refused a backend or certificate of it.
    BalancerRefused,
}

impl Reason {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Excluded => "excluded",
            Reason::PreviousVersion => "previous-version",
            Reason::HeldBack => "held-back",
            Reason::Problem(ProblemKind::Invalid) => "invalid",
            Reason::Problem(ProblemKind::Conflict) => "conflict",
            Reason::Problem(ProblemKind::Reference) => "reference",
            Reason::Problem(ProblemKind::Tls) => "tls",
            Reason::Problem(ProblemKind::Other) => "other",
            Reason::BalancerRefused => "balancer-refused",
        }
    }
}

/// One rejected resource and one reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rejection {
    /// Kind (`Ingress`, `ConfigMap`, `Secret`, `Service`).
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why.
    pub reason: Reason,
}

/// Appends the metric.
pub fn encode(out: &mut String, id: &Identity, rejections: &[Rejection]) {
    if rejections.is_empty() {
        return;
    }
    header(
        out,
        NAME,
        Kind::Gauge,
        "Resources not served, or served in an earlier version, by reason (excluded, previous-version, held-back, invalid, conflict, reference, tls, other, balancer-refused)",
    );
    let ids = id.labels();
    for r in rejections {
        let mut l = ids.clone();
        l.extend([
            ("kind", r.kind.as_str()),
            ("resource_namespace", r.namespace.as_str()),
            ("resource_name", r.name.as_str()),
            ("reason", r.reason.as_str()),
        ]);
        sample(out, NAME, &l, 1.0);
    }
}
