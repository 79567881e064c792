//! `rewrite-target`, `use-regex`.

use super::{AnnotationError, IngressAnnotations, Reader, value};

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.rewrite_target = r.parse("rewrite-target", value::plain)?;
    out.use_regex = r.parse("use-regex", value::boolean)?.unwrap_or(false);
    Ok(())
}
