//! `ssl-passthrough`: TLS for the host goes, by SNI and without being terminated, to
//! the backend of its `/` rule (`--enable-ssl-passthrough`). As in ingress-nginx the
//! host's other rules and location annotations do not apply to HTTPS (NGINX never
//! sees the requests); plain HTTP is served as usual. Only the host's oldest Ingress
//! (the owner of its server settings) decides.

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "ssl passthrough",
    keys: &[key(
        "ssl-passthrough",
        Server,
        Low,
        "TLS for the host forwarded by SNI to the backend of its / rule, not terminated \
         (needs --enable-ssl-passthrough)",
    )],
};

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.ssl_passthrough = r.parse("ssl-passthrough", value::boolean)?.unwrap_or(false);
    Ok(())
}
