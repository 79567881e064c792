//! `ssl-redirect`, `force-ssl-redirect`.

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "redirect",
    keys: &[
        key(
            "ssl-redirect",
            Location,
            Low,
            "redirect plain HTTP to HTTPS when the host has TLS (default true)",
        ),
        key(
            "force-ssl-redirect",
            Location,
            Low,
            "redirect plain HTTP to HTTPS even without TLS on the host",
        ),
    ],
};

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.ssl_redirect = r.parse("ssl-redirect", value::boolean)?;
    out.force_ssl_redirect = r.parse("force-ssl-redirect", value::boolean)?;
    Ok(())
}
