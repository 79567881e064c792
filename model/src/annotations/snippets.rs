//! `configuration-snippet`, `server-snippet`, `stream-snippet`: raw NGINX text,
//! administrator-enabled.
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
        key(
            "stream-snippet",
            Server,
            Critical,
            "raw NGINX text in the stream block (administrator-enabled; with TCP/UDP services or SSL passthrough)",
        ),
    ],
};

/// An opaque snippet of NGINX configuration, attributed to its Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Snippet(pub String);

impl Snippet {
    /// The text as a block of lines: ending in a line break, so that a snippet
    /// ending in a comment cannot comment out what the renderer writes after it.
    pub fn lines(&self) -> String {
        block_lines(&self.0)
    }
}

/// `text` ending in a line break.
pub fn block_lines(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

pub(super) fn snippet(v: &str) -> Result<Snippet, String> {
    if v.contains('\0') {
        return Err("NUL bytes are not allowed".to_owned());
    }
    Ok(Snippet(v.to_owned()))
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.configuration_snippet = r.parse("configuration-snippet", snippet)?;
    out.server_snippet = r.parse("server-snippet", snippet)?;
    out.stream_snippet = r.parse("stream-snippet", snippet)?;
    Ok(())
}

/// Why a tenant's snippet of `kind` cannot be given to NGINX, or `None`: the
/// text is read as NGINX reads it and held to the allowlist of `crate::snippet`.
pub fn refusal(kind: crate::snippet::Kind, text: &str, reserved_ports: &[u16]) -> Option<String> {
    crate::snippet::check(kind, text, &crate::snippet::Context { reserved_ports }).err()
}
