//! `configuration-snippet`, `server-snippet`: raw NGINX text, administrator-enabled.
//!
//! Snippets are the one deliberate hole in the quoting rule. They are parsed here
//! regardless of the switch (so the model records them), and only the model builder
//! decides whether they are honoured.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "snippets",
    keys: &[
        key(
            "configuration-snippet",
            Location,
            Critical,
            "raw NGINX text in each location (administrator-enabled)",
        ),
        key(
            "server-snippet",
            Server,
            Critical,
            "raw NGINX text in the server block (administrator-enabled)",
        ),
    ],
};

/// An opaque snippet of NGINX configuration, attributed to its Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Snippet(pub String);

pub(super) fn snippet(v: &str) -> Result<Snippet, String> {
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
