//! `nginx.ingress.kubernetes.io/*` annotations: parsed into typed values, validated.
//!
//! One module per family. Parsing is all-or-nothing: the first invalid value rejects
//! the whole Ingress with an error naming the annotation and the value, so that no
//! Ingress is ever half-applied.

pub(crate) mod balancing;
mod canary;
mod proxy;
mod redirect;
mod rewrite;
mod snippets;
pub(crate) mod value;

use std::collections::BTreeMap;

pub use balancing::{Affinity, LoadBalance, SameSite};
pub use canary::{Canary, CanaryAffinity};
pub use proxy::BackendProtocol;
pub use snippets::Snippet;

/// The prefix shared by every annotation Ferrule reads.
pub const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// An annotation whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {PREFIX}{key}: invalid value {value:?}: {reason}")]
pub struct AnnotationError {
    /// The annotation name without [`PREFIX`].
    pub key: String,
    /// The value as written.
    pub value: String,
    /// Why it is invalid.
    pub reason: String,
}

/// Every annotation of one Ingress, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IngressAnnotations {
    /// `ssl-redirect` (default true).
    pub ssl_redirect: Option<bool>,
    /// `force-ssl-redirect`.
    pub force_ssl_redirect: Option<bool>,
    /// `backend-protocol`.
    pub backend_protocol: Option<BackendProtocol>,
    /// `proxy-body-size`.
    pub proxy_body_size: Option<String>,
    /// `proxy-connect-timeout` (seconds).
    pub proxy_connect_timeout: Option<u32>,
    /// `proxy-read-timeout` (seconds).
    pub proxy_read_timeout: Option<u32>,
    /// `proxy-send-timeout` (seconds).
    pub proxy_send_timeout: Option<u32>,
    /// `service-upstream`: proxy to the Service's ClusterIP, not its endpoints.
    pub service_upstream: bool,
    /// `rewrite-target`.
    pub rewrite_target: Option<String>,
    /// `use-regex`.
    pub use_regex: bool,
    /// `load-balance`.
    pub load_balance: Option<LoadBalance>,
    /// `upstream-hash-by`.
    pub upstream_hash_by: Option<String>,
    /// `affinity: cookie` and its `session-cookie-*` settings.
    pub affinity: Option<Affinity>,
    /// `canary: "true"` and its rules.
    pub canary: Option<Canary>,
    /// `configuration-snippet`.
    pub configuration_snippet: Option<Snippet>,
    /// `server-snippet`.
    pub server_snippet: Option<Snippet>,
}

/// Reads the annotation values of one Ingress.
pub(crate) struct Reader<'a> {
    /// `(name without PREFIX, value)` of the annotations with our prefix: a lookup is a
    /// short scan, with no key to build (model building must not allocate per key).
    ours: Vec<(&'a str, &'a str)>,
}

impl<'a> Reader<'a> {
    fn new(annotations: &'a BTreeMap<String, String>) -> Self {
        let ours = annotations
            .range::<str, _>((
                std::ops::Bound::Included(PREFIX),
                std::ops::Bound::Unbounded,
            ))
            .map_while(|(k, v)| k.strip_prefix(PREFIX).map(|k| (k, v.as_str())))
            .collect();
        Self { ours }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.ours
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim())
    }

    /// Parses `key` with `parse` when present; errors name the annotation and value.
    fn parse<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, AnnotationError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => parse(value).map(Some).map_err(|reason| AnnotationError {
                key: key.to_owned(),
                value: value.to_owned(),
                reason,
            }),
        }
    }
}

/// Parses every annotation Ferrule understands; unknown ones are ignored.
pub fn parse(
    annotations: &BTreeMap<String, String>,
) -> Result<IngressAnnotations, AnnotationError> {
    let r = Reader::new(annotations);
    let mut out = IngressAnnotations::default();
    redirect::parse(&r, &mut out)?;
    proxy::parse(&r, &mut out)?;
    rewrite::parse(&r, &mut out)?;
    balancing::parse(&r, &mut out)?;
    canary::parse(&r, &mut out)?;
    snippets::parse(&r, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
