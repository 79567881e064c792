//! `enable-cors` and its `cors-*` settings: CORS headers on the answers of a
//! location, and its preflights answered by NGINX.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "CORS",
    keys: &[
        key(
            "enable-cors",
            Location,
            Low,
            "add CORS headers and answer preflights (OPTIONS) with 204",
        ),
        key(
            "cors-allow-origin",
            Location,
            Medium,
            "allowed origins, comma-separated: * (default) or [scheme://][*.]host[:port] each",
        ),
        key(
            "cors-allow-methods",
            Location,
            Medium,
            "Access-Control-Allow-Methods (default GET, PUT, POST, DELETE, PATCH, OPTIONS)",
        ),
        key(
            "cors-allow-headers",
            Location,
            Medium,
            "Access-Control-Allow-Headers (default DNT, Keep-Alive, User-Agent, ...)",
        ),
        key(
            "cors-expose-headers",
            Location,
            Medium,
            "Access-Control-Expose-Headers (default none)",
        ),
        key(
            "cors-allow-credentials",
            Location,
            Low,
            "Access-Control-Allow-Credentials (default true)",
        ),
        key(
            "cors-max-age",
            Location,
            Low,
            "Access-Control-Max-Age in seconds (default 1728000)",
        ),
    ],
};

const DEFAULT_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
const DEFAULT_HEADERS: &str = "DNT, Keep-Alive, User-Agent, X-Requested-With, \
    If-Modified-Since, Cache-Control, Content-Type, Range, Authorization";
const DEFAULT_MAX_AGE: u32 = 1_728_000;

/// The CORS settings of a location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cors {
    /// The allowed origins; empty: any (`*`).
    pub origins: Vec<Origin>,
    /// `Access-Control-Allow-Methods`, comma-separated.
    pub methods: String,
    /// `Access-Control-Allow-Headers`, comma-separated.
    pub headers: String,
    /// `Access-Control-Expose-Headers`, comma-separated (empty: not sent).
    pub expose_headers: String,
    /// `Access-Control-Allow-Credentials: true`.
    pub credentials: bool,
    /// `Access-Control-Max-Age`, seconds.
    pub max_age: u32,
}

/// One allowed origin, lowercase.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// `http` or `https`; `None`: either.
    pub scheme: Option<String>,
    /// The host; a leading `*.` stands for exactly one label.
    pub host: String,
    /// The port, when given.
    pub port: Option<u16>,
}

fn origins(v: &str) -> Result<Vec<Origin>, String> {
    let entries: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    // Empty is every origin, as in ingress-nginx (its default is `*`).
    if entries.is_empty() || entries == ["*"] {
        return Ok(Vec::new());
    }
    entries.into_iter().map(origin).collect()
}

fn origin(e: &str) -> Result<Origin, String> {
    let lower = e.to_ascii_lowercase();
    let (scheme, rest) = match lower.split_once("://") {
        Some((s @ ("http" | "https"), rest)) => (Some(s.to_owned()), rest),
        Some(_) => return Err(format!("origin {e:?}: the scheme must be http or https")),
        None => (None, lower.as_str()),
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => {
            let port =
                value::integer(p, 1, 65535).map_err(|_| format!("origin {e:?}: invalid port"))?;
            (h, Some(port as u16))
        }
        None => (rest, None),
    };
    let labels = host.strip_prefix("*.").unwrap_or(host);
    if !value::is_dns_name(labels) || labels.contains('_') {
        return Err(format!(
            "origin {e:?}: expected [scheme://][*.]host[:port], e.g. https://*.example.com"
        ));
    }
    Ok(Origin {
        scheme,
        host: host.to_owned(),
        port,
    })
}

/// A comma-separated list of names, each `[A-Za-z0-9_-]+` (or `*` where
/// `wildcard`), written back as `A, B`.
fn names(v: &str, what: &str, wildcard: bool) -> Result<String, String> {
    let mut out = Vec::new();
    for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let ok = (wildcard && n == "*")
            || (n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        if !ok {
            return Err(format!("{n:?} is not a {what}"));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(format!("expected a comma-separated list of {what}s"));
    }
    Ok(out.join(", "))
}

fn methods(v: &str) -> Result<String, String> {
    names(v, "method", false).map(|m| m.to_ascii_uppercase())
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    // Every key is checked, enabled or not: a typo fails now, not when enabled.
    let enabled = r.parse("enable-cors", value::boolean)?.unwrap_or(false);
    let origins = r.parse("cors-allow-origin", origins)?;
    let methods = r.parse("cors-allow-methods", methods)?;
    let headers = r.parse("cors-allow-headers", |v| names(v, "header name", true))?;
    let expose = r.parse("cors-expose-headers", |v| names(v, "header name", true))?;
    let credentials = r.parse("cors-allow-credentials", value::boolean)?;
    let max_age = r.parse("cors-max-age", |v| value::integer(v, 0, u32::MAX))?;
    out.cors = enabled.then(|| Cors {
        origins: origins.unwrap_or_default(),
        methods: methods.unwrap_or_else(|| DEFAULT_METHODS.to_owned()),
        headers: headers.unwrap_or_else(|| DEFAULT_HEADERS.to_owned()),
        expose_headers: expose.unwrap_or_default(),
        credentials: credentials.unwrap_or(true),
        max_age: max_age.unwrap_or(DEFAULT_MAX_AGE),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(scheme: Option<&str>, host: &str, port: Option<u16>) -> Origin {
        Origin {
            scheme: scheme.map(str::to_owned),
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn origins_are_typed() {
        assert_eq!(origins("*"), Ok(vec![]));
        assert_eq!(
            origins(""),
            Ok(vec![]),
            "empty: every origin, as ingress-nginx"
        );
        assert_eq!(origins(" , "), Ok(vec![]));
        assert_eq!(
            origins("https://A.example.com, http://*.b.example:8080,c.example"),
            Ok(vec![
                o(Some("https"), "a.example.com", None),
                o(Some("http"), "*.b.example", Some(8080)),
                o(None, "c.example", None),
            ])
        );
        for bad in [
            "ftp://a.example",
            "https://a.example/path",
            "https://a.*.example",
            "https://a.example:0",
            "https://a.example:x",
            "https://$host",
            "https://a.example\"; return 200",
            "*, https://a.example",
        ] {
            assert!(origins(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn names_are_tokens_written_back_as_a_list() {
        assert_eq!(methods("get,POST , put"), Ok("GET, POST, PUT".to_owned()));
        assert_eq!(names("X-A,*", "header name", true), Ok("X-A, *".to_owned()));
        assert!(methods("GET;").is_err());
        assert!(methods("*").is_err());
        assert!(names("X A", "header name", true).is_err());
        assert!(names("$http_x", "header name", true).is_err());
    }
}
