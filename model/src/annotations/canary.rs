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
    });
    Ok(())
}
