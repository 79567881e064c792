//! `mirror-target`, `mirror-host`, `mirror-request-body`: a copy of each request of
//! a location sent to another URL, its answer dropped. The URL is typed and takes
//! only the request's own variables (CVE-2025-1098 injected configuration through
//! these annotations).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, external_auth, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "mirror",
    keys: &[
        key(
            "mirror-target",
            Location,
            High,
            "absolute http(s) URL each request is copied to ($request_uri, $uri, $is_args, $args allowed)",
        ),
        key(
            "mirror-host",
            Location,
            High,
            "Host header of the copies (default: the URL's host)",
        ),
        key(
            "mirror-request-body",
            Location,
            Low,
            "on or off: whether copies carry the body (default on)",
        ),
    ],
};

/// The variables a mirror URL may use: the request's path and query.
const URL_VARIABLES: &[&str] = &["request_uri", "uri", "is_args", "args"];

/// The mirror of a location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mirror {
    /// Where the copies go.
    pub target: String,
    /// Their Host header.
    pub host: String,
    /// Whether they carry the request body.
    pub request_body: bool,
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let target = r.parse("mirror-target", |v| external_auth::url(v, URL_VARIABLES))?;
    let host = r.parse("mirror-host", value::host_port)?;
    let body = r.parse("mirror-request-body", value::on_off)?;
    let Some(target) = target else {
        for key in ["mirror-host", "mirror-request-body"] {
            if r.get(key).is_some() {
                return Err(r.invalid(key, "without mirror-target, nothing is mirrored"));
            }
        }
        return Ok(());
    };
    let host = host.unwrap_or_else(|| url_host(&target).to_owned());
    out.mirror = Some(Mirror {
        target,
        host,
        request_body: body.unwrap_or(true),
    });
    Ok(())
}

/// The authority of a URL `external_auth::url` accepted.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#', '$']).unwrap_or(rest.len());
    &rest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_defaults_to_the_url_s() {
        assert_eq!(
            url_host("https://m.example:8443/x$request_uri"),
            "m.example:8443"
        );
        assert_eq!(url_host("http://m.example$request_uri"), "m.example");
        assert!(external_auth::url("http://m.example/$http_x", URL_VARIABLES).is_err());
        assert!(external_auth::url("http://m.example/;x", URL_VARIABLES).is_err());
    }
}
