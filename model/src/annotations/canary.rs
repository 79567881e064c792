//! `canary` and `canary-*`.

use serde::{Deserialize, Serialize};

use super::{AnnotationError, IngressAnnotations, Reader, value};

/// How requests are chosen for a canary backend. Header rules beat the cookie,
/// which beats the weight, as in ingress-nginx.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Canary {
    /// `canary-weight`: share of requests, out of `weight_total`.
    pub weight: u32,
    /// `canary-weight-total` (default 100).
    pub weight_total: u32,
    /// `canary-by-header`.
    pub header: Option<String>,
    /// `canary-by-header-value`: route to the canary only when the header equals it.
    pub header_value: Option<String>,
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
    /// `affinity-canary-behavior`.
    pub affinity_behavior: CanaryAffinity,
}

/// `affinity-canary-behavior`: whose session affinity the canary side of the split
/// uses. Either way a request whose cookie names an endpoint of one side stays on
/// that side before any canary rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryAffinity {
    /// The primary's affinity holds on both sides (ingress-nginx's default).
    #[default]
    Sticky,
    /// The canary side uses the canary backend's own affinity, if it has one (the
    /// canary Ingress's `affinity` annotations).
    Legacy,
}

fn affinity_behavior(v: &str) -> Result<CanaryAffinity, String> {
    match v {
        "sticky" => Ok(CanaryAffinity::Sticky),
        "legacy" => Ok(CanaryAffinity::Legacy),
        _ => Err("expected \"sticky\" or \"legacy\"".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    if r.parse("canary", value::boolean)? != Some(true) {
        return Ok(());
    }
    let total = r
        .parse("canary-weight-total", |v| value::integer(v, 1, 1_000_000))?
        .unwrap_or(100);
    let weight = r
        .parse("canary-weight", |v| value::integer(v, 0, total))?
        .unwrap_or(0);
    out.canary = Some(Canary {
        weight,
        weight_total: total,
        header: r.parse("canary-by-header", value::token)?,
        header_value: r.parse("canary-by-header-value", value::plain)?,
        cookie: r.parse("canary-by-cookie", value::token)?,
        affinity_behavior: r
            .parse("affinity-canary-behavior", affinity_behavior)?
            .unwrap_or_default(),
    });
    Ok(())
}
