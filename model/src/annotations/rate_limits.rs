//! `limit-rps`, `limit-rpm`, `limit-connections`, `limit-burst-multiplier`,
//! `limit-rate`, `limit-rate-after` and `limit-allowlist` (old name
//! `limit-whitelist`): per-client limits of a location, as ingress-nginx sets them
//! (`limit_req ... nodelay` with a burst of rate × multiplier, `limit_conn`,
//! `limit_rate`). The status of a refused request is the ConfigMap's
//! `limit-req-status-code` / `limit-conn-status-code` (default 503, as
//! ingress-nginx).
//!
//! Zones: NGINX's rate is a property of a zone, so the renderer declares one zone
//! per distinct rate and keys it by location and client, so that 10k Ingresses
//! with limits need as many zones as they have distinct rates, not 10k.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk, Scope::*};
use super::source_ranges::{Cidr, cidr_list};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "rate limits",
    keys: &[
        security("limit-rps", "requests per second per client address"),
        security("limit-rpm", "requests per minute per client address"),
        security(
            "limit-connections",
            "concurrent connections per client address",
        ),
        security(
            "limit-burst-multiplier",
            "burst size as a multiple of the rate (default 5)",
        ),
        security("limit-rate", "response bandwidth per connection, KB/s"),
        security("limit-rate-after", "KB sent before limit-rate applies"),
        security("limit-allowlist", "client CIDRs not limited"),
        security(
            "limit-whitelist",
            "old name of limit-allowlist (read when it is absent)",
        ),
    ],
};

const fn security(name: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        scope: Location,
        risk: Risk::Low,
        security: true,
        supported: true,
        doc,
    }
}

/// The limits of a location (all `None`/empty: none).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct RateLimits {
    /// Requests per second per client.
    pub rps: Option<u32>,
    /// Requests per minute per client.
    pub rpm: Option<u32>,
    /// Burst as a multiple of the rate.
    pub burst_multiplier: u32,
    /// Concurrent connections per client.
    pub connections: Option<u32>,
    /// `limit_rate` in KB/s.
    pub rate_kb: Option<u32>,
    /// `limit_rate_after` in KB.
    pub rate_after_kb: Option<u32>,
    /// Clients the request and connection limits do not count.
    pub allowlist: Vec<Cidr>,
}

impl RateLimits {
    /// Whether any limit applies.
    pub fn is_empty(&self) -> bool {
        self.rps.is_none()
            && self.rpm.is_none()
            && self.connections.is_none()
            && self.rate_kb.is_none()
    }
}

/// The largest rate, connection count or KB figure accepted.
const MAX: u32 = 1_000_000;

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let n = |v: &str| value::integer(v, 1, MAX);
    let limits = RateLimits {
        rps: r.parse("limit-rps", n)?,
        rpm: r.parse("limit-rpm", n)?,
        burst_multiplier: r
            .parse("limit-burst-multiplier", |v| value::integer(v, 1, 1000))?
            .unwrap_or(5),
        connections: r.parse("limit-connections", n)?,
        rate_kb: r.parse("limit-rate", n)?,
        rate_after_kb: r.parse("limit-rate-after", |v| value::integer(v, 0, MAX))?,
        allowlist: match r.parse("limit-allowlist", cidr_list)? {
            Some(l) => l,
            None => r.parse("limit-whitelist", cidr_list)?.unwrap_or_default(),
        },
    };
    if limits.is_empty() {
        // A companion alone would limit nothing the user expects limited.
        for key in [
            "limit-burst-multiplier",
            "limit-rate-after",
            "limit-allowlist",
            "limit-whitelist",
        ] {
            if r.get(key).is_some() {
                return Err(r.invalid(key, "without a limit (limit-rps, limit-rpm, limit-connections or limit-rate) it limits nothing"));
            }
        }
        return Ok(());
    }
    out.rate_limits = limits;
    Ok(())
}
