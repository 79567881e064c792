//! `ssl-redirect`, `force-ssl-redirect`.

use super::{AnnotationError, IngressAnnotations, Reader, value};

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.ssl_redirect = r.parse("ssl-redirect", value::boolean)?;
    out.force_ssl_redirect = r.parse("force-ssl-redirect", value::boolean)?;
    Ok(())
}
