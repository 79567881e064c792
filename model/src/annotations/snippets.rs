//! `configuration-snippet`, `server-snippet`: raw NGINX text, administrator-enabled.
//!
//! Snippets are the one deliberate hole in the quoting rule. They are parsed here
//! regardless of the switch (so the model records them), and only the model builder
//! decides whether they are honoured.

use serde::{Deserialize, Serialize};

use super::{AnnotationError, IngressAnnotations, Reader};

/// An opaque snippet of NGINX configuration, attributed to its Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Snippet(pub String);

fn snippet(v: &str) -> Result<Snippet, String> {
    if v.contains('\0') {
        return Err("NUL bytes are not allowed".to_owned());
    }
    Ok(Snippet(v.to_owned()))
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.configuration_snippet = r.parse("configuration-snippet", snippet)?;
    out.server_snippet = r.parse("server-snippet", snippet)?;
    Ok(())
}
