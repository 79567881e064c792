//! `nginx.ingress.kubernetes.io/*` annotations: parsed into typed values, validated.
//!
//! One module per family, each with its keys' descriptors (`registry.rs` lists the
//! families). Parsing is all-or-nothing: the first invalid value rejects the whole
//! Ingress with an error naming the annotation and the value, so that no Ingress is
//! ever half-applied. No key under the prefix is silently dropped: one Ferrule does
//! not implement is a Warning, or rejects the Ingress when it restricts access.

pub mod backend_tls;
pub(crate) mod balancing;
pub mod basic_auth;
pub mod buffering;
mod canary;
pub mod client_certificates;
pub mod cors;
pub(crate) mod custom_headers;
pub mod errors;
pub mod external_auth;
pub mod forwarding;
pub mod mirror;
mod passthrough;
mod proxy;
pub mod rate_limits;
mod redirect;
pub mod registry;
mod rewrite;
pub mod satisfy;
mod server_alias;
mod server_tls;
mod snippets;
pub mod source_ranges;
mod unsupported;
pub(crate) mod value;

use std::collections::BTreeMap;

pub use backend_tls::{BackendTls, BackendTlsAnnotations, BackendTlsSettings};
pub use balancing::{Affinity, AffinityMode, LoadBalance, SameSite};
pub use basic_auth::{BasicAuth, BasicAuthAnnotations};
pub use buffering::{Buffering, Buffers};
pub use canary::{Canary, CanaryAffinity};
pub use client_certificates::{ClientCertificateAnnotations, ClientCertificates};
pub use cors::{Cors, Origin};
pub use external_auth::{AuthKeepalive, ExternalAuth, GlobalAuth};
pub use forwarding::Forwarding;
pub use mirror::Mirror;
pub use proxy::BackendProtocol;
pub use rate_limits::RateLimits;
pub use redirect::Redirect;
pub use satisfy::Satisfy;
pub use server_tls::ServerCiphers;
pub use snippets::{Snippet, block_lines, refusal as snippet_refusal};
pub use source_ranges::{Cidr, GlobalSourceRanges, IngressSourceRanges, SourceRanges};

/// The default prefix of every annotation Ferrule reads (`--annotations-prefix`
/// changes it, as in ingress-nginx), with its `/`.
pub const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// An annotation that keeps its Ingress from being served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    /// A value that cannot be used.
    #[error("annotation {key}: invalid value {value:?}: {reason}")]
    Invalid {
        /// The annotation's full name (prefix included).
        key: String,
        /// The value as written.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A key that restricts access and that Ferrule does not implement
    /// ([`registry::Verdict::Rejecting`]).
    #[error("{0}")]
    Unsupported(String),
}

/// The annotations of one Ingress, parsed, and the keys ignored on the way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The values of the implemented keys.
    pub values: IngressAnnotations,
    /// One Warning per key under the prefix that Ferrule does not implement and that
    /// is harmless to leave out ([`registry::Verdict::Ignored`]).
    pub ignored: Vec<String>,
}

/// Every annotation of one Ingress, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IngressAnnotations {
    /// `ssl-redirect` (default true).
    pub ssl_redirect: Option<bool>,
    /// `force-ssl-redirect`.
    pub force_ssl_redirect: Option<bool>,
    /// `preserve-trailing-slash`.
    pub preserve_trailing_slash: bool,
    /// `temporal-redirect` or `permanent-redirect`, with its code.
    pub redirect: Option<Redirect>,
    /// `app-root`: where a request for `/` is redirected.
    pub app_root: Option<String>,
    /// `from-to-www-redirect`.
    pub from_to_www_redirect: bool,
    /// `server-alias`.
    pub server_aliases: Vec<String>,
    /// `ssl-ciphers`, `ssl-prefer-server-ciphers` (server-level: the owner's).
    pub server_ciphers: ServerCiphers,
    /// `ssl-passthrough`.
    pub ssl_passthrough: bool,
    /// `custom-headers`: the ConfigMap (`name` or `namespace/name`).
    pub custom_headers: Option<String>,
    /// Its headers, once the build has read the ConfigMap.
    pub custom_header_list: Vec<crate::build::header_lists::Header>,
    /// `enable-cors` and its `cors-*` settings.
    pub cors: Option<Cors>,
    /// `proxy-buffering`, the buffers, `proxy-request-buffering`, ...
    pub buffering: Buffering,
    /// `proxy-http-version`, `proxy-next-upstream*`, `upstream-vhost`, ...
    pub forwarding: Forwarding,
    /// `proxy-ssl-*`.
    pub backend_tls: Option<BackendTlsAnnotations>,
    /// `mirror-target` and its companions.
    pub mirror: Option<Mirror>,
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
    pub service_upstream: Option<bool>,
    /// `rewrite-target`.
    pub rewrite_target: Option<String>,
    /// `use-regex`.
    pub use_regex: bool,
    /// `load-balance`.
    pub load_balance: Option<LoadBalance>,
    /// `upstream-hash-by`.
    pub upstream_hash_by: Option<String>,
    /// `upstream-hash-by-subset: "true"` (with `upstream-hash-by`): the subset's size,
    /// `upstream-hash-by-subset-size` or 3.
    pub upstream_hash_by_subset: Option<u32>,
    /// `affinity: cookie` and its `session-cookie-*` settings.
    pub affinity: Option<Affinity>,
    /// `canary: "true"` and its rules.
    pub canary: Option<Canary>,
    /// `configuration-snippet`.
    pub configuration_snippet: Option<Snippet>,
    /// `server-snippet`.
    pub server_snippet: Option<Snippet>,
    /// `stream-snippet` (administrator-enabled; TCP/UDP services or passthrough on).
    pub stream_snippet: Option<Snippet>,
    /// `allowlist-source-range` / `whitelist-source-range`, `denylist-source-range`.
    pub source_ranges: IngressSourceRanges,
    /// `auth-type: basic` and its `auth-secret`, `auth-secret-type`, `auth-realm`.
    pub basic_auth: Option<BasicAuthAnnotations>,
    /// `auth-url` and its companions.
    pub external_auth: Option<ExternalAuth>,
    /// `enable-global-auth` (`None`: the default, true).
    pub enable_global_auth: Option<bool>,
    /// `limit-*`.
    pub rate_limits: RateLimits,
    /// `satisfy`.
    pub satisfy: Satisfy,
    /// `custom-http-errors`, `default-backend`, `disable-proxy-intercept-errors`.
    pub error_pages: errors::ErrorPages,
    /// `auth-tls-*` (server-level).
    pub client_certificates: Option<ClientCertificateAnnotations>,
}

/// Reads the annotation values of one Ingress.
pub(crate) struct Reader<'a> {
    /// The prefix with its `/`, for the messages.
    prefix: &'a str,
    /// `--strict-annotations`: every invalid value rejects the Ingress.
    strict: bool,
    /// The Warnings of invalid values ignored (keys that do not restrict access).
    lenient: std::cell::RefCell<Vec<String>>,
    /// `(name without the prefix, value)` of the annotations with our prefix: a
    /// lookup is a short scan, with no key to build (model building must not
    /// allocate per key).
    ours: Vec<(&'a str, &'a str)>,
}

impl<'a> Reader<'a> {
    fn new(annotations: &'a BTreeMap<String, String>, prefix: &'a str, strict: bool) -> Self {
        let ours = annotations
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map_while(|(k, v)| k.strip_prefix(prefix).map(|k| (k, v.as_str())))
            .collect();
        Self {
            prefix,
            strict,
            lenient: Default::default(),
            ours,
        }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.ours
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim())
    }

    /// Parses `key` with `parse` when present; errors name the annotation and value.
    ///
    /// The leniency rule, stated once: an invalid value of a key that restricts
    /// access ([`registry::fails_closed`]) rejects the Ingress, as does any invalid
    /// value with `--strict-annotations`; any other invalid value is a Warning, the
    /// key is ignored (its default applies) and the Ingress is served, as
    /// ingress-nginx does.
    fn parse<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, AnnotationError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match parse(value) {
            Ok(v) => Ok(Some(v)),
            Err(reason) => {
                let error = AnnotationError::Invalid {
                    key: format!("{}{key}", self.prefix),
                    value: value.to_owned(),
                    reason,
                };
                if self.strict || registry::fails_closed(key) {
                    return Err(error);
                }
                self.lenient.borrow_mut().push(format!(
                    "{error}; the key is ignored and the Ingress served without it \
                     (--strict-annotations rejects the Ingress instead)"
                ));
                Ok(None)
            }
        }
    }

    /// An error on `key` (present or not) for a reason found across keys.
    fn invalid(&self, key: &str, reason: &str) -> AnnotationError {
        AnnotationError::Invalid {
            key: format!("{}{key}", self.prefix),
            value: self.get(key).unwrap_or_default().to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// The fail-closed check: every key under the prefix is implemented, ignored
    /// with a Warning (returned), or rejects the Ingress.
    fn check_keys(&self) -> Result<Vec<String>, AnnotationError> {
        let mut ignored = Vec::new();
        for (name, _) in &self.ours {
            let full = format!("{}{name}", self.prefix);
            match registry::verdict(name, &full) {
                registry::Verdict::Supported => {}
                registry::Verdict::Ignored(m) => ignored.push(m),
                registry::Verdict::Rejecting(m) => return Err(AnnotationError::Unsupported(m)),
            }
        }
        Ok(ignored)
    }
}

/// Parses the annotations under `prefix` (with its `/`, e.g. [`PREFIX`]): every key
/// Ferrule implements into its typed value, and the fail-closed check for the
/// others. An invalid value of a key that restricts access rejects the whole
/// Ingress; any other is ignored with a Warning ([`Reader::parse`]).
pub fn parse(
    annotations: &BTreeMap<String, String>,
    prefix: &str,
) -> Result<Parsed, AnnotationError> {
    parse_with(annotations, prefix, false)
}

/// [`parse`], with `strict` (`--strict-annotations`): any invalid value rejects
/// the Ingress, not only those of keys that restrict access.
pub fn parse_with(
    annotations: &BTreeMap<String, String>,
    prefix: &str,
    strict: bool,
) -> Result<Parsed, AnnotationError> {
    let r = Reader::new(annotations, prefix, strict);
    let mut ignored = r.check_keys()?;
    let mut out = IngressAnnotations::default();
    redirect::parse(&r, &mut out)?;
    proxy::parse(&r, &mut out)?;
    cors::parse(&r, &mut out)?;
    buffering::parse(&r, &mut out)?;
    forwarding::parse(&r, &mut out)?;
    backend_tls::parse(&r, &mut out)?;
    mirror::parse(&r, &mut out)?;
    rewrite::parse(&r, &mut out)?;
    balancing::parse(&r, &mut out, &mut ignored)?;
    canary::parse(&r, &mut out)?;
    snippets::parse(&r, &mut out)?;
    source_ranges::parse(&r, &mut out)?;
    basic_auth::parse(&r, &mut out)?;
    external_auth::parse(&r, &mut out)?;
    rate_limits::parse(&r, &mut out)?;
    satisfy::parse(&r, &mut out)?;
    errors::parse(&r, &mut out)?;
    server_alias::parse(&r, &mut out)?;
    server_tls::parse(&r, &mut out)?;
    passthrough::parse(&r, &mut out)?;
    custom_headers::parse(&r, &mut out)?;
    client_certificates::parse(&r, &mut out)?;
    ignored.extend(r.lenient.take());
    Ok(Parsed {
        values: out,
        ignored,
    })
}

#[cfg(test)]
mod tests;
