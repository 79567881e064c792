//! `custom-headers`: response headers from a ConfigMap of the Ingress's own
//! namespace (as ingress-nginx), each name one the administrator allows in the
//! controller ConfigMap's `global-allowed-response-headers`. The build reads the
//! ConfigMap (`build/access.rs`); a value is sent as written (a `$` is no variable).

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "custom headers",
    keys: &[key(
        "custom-headers",
        Location,
        Medium,
        "response headers from a ConfigMap of the Ingress's namespace (names allowed by \
         global-allowed-response-headers)",
    )],
};

/// A ConfigMap's `name` or `namespace/name`.
pub(crate) fn config_map_ref(v: &str) -> Result<String, String> {
    value::object_ref(
        v.trim(),
        "expected the name (or namespace/name) of a ConfigMap",
    )
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.custom_headers = r
        .parse("custom-headers", |v| config_map_ref(v).map(Some))?
        .flatten();
    Ok(())
}
