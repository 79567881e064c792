//! `custom-headers`: response headers from a ConfigMap of the Ingress's own
//! namespace (as ingress-nginx), each name one the administrator allows in the
//! controller ConfigMap's `global-allowed-response-headers`. The build reads the
//! ConfigMap (`build/access.rs`); a value is sent as written (a `$` is no variable).

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader};

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
    let v = v.trim();
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 253
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    match v.split_once('/') {
        Some((ns, name)) if label(ns) && label(name) => Ok(v.to_owned()),
        None if label(v) => Ok(v.to_owned()),
        _ => Err("expected the name (or namespace/name) of a ConfigMap".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.custom_headers = r
        .parse("custom-headers", |v| config_map_ref(v).map(Some))?
        .flatten();
    Ok(())
}
