//! `rewrite-target`, `use-regex`.

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "rewrite",
    keys: &[
        key(
            "rewrite-target",
            Location,
            Medium,
            "the URI sent to the backend, with regex captures",
        ),
        key(
            "use-regex",
            Server,
            Medium,
            "paths of the Ingress are regular expressions",
        ),
    ],
};

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.rewrite_target = r.parse("rewrite-target", value::plain)?;
    out.use_regex = r.parse("use-regex", value::boolean)?.unwrap_or(false);
    Ok(())
}
