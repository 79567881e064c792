//! How a request is forwarded and its answer rewritten: `proxy-http-version`,
//! `proxy-next-upstream*`, `upstream-vhost`, `connection-proxy-header`,
//! `x-forwarded-prefix`, `proxy-redirect-from/-to`, `proxy-cookie-domain/-path`;
//! the redirects NGINX makes itself (`use-port-in-redirects`, `relative-redirects`);
//! and the location's logs: `enable-access-log`, `enable-rewrite-log`; `http2-push-preload`.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "forwarding",
    keys: &[
        key(
            "proxy-http-version",
            Location,
            Low,
            "1.0 or 1.1 to the backend (default 1.1)",
        ),
        key(
            "proxy-next-upstream",
            Location,
            Medium,
            "when to try the next endpoint: error, timeout, invalid_header, http_500, ..., non_idempotent, off",
        ),
        key(
            "proxy-next-upstream-tries",
            Location,
            Low,
            "most attempts for one request (0: no limit)",
        ),
        key(
            "proxy-next-upstream-timeout",
            Location,
            Low,
            "seconds within which a next endpoint may be tried (0: no limit)",
        ),
        key(
            "upstream-vhost",
            Location,
            Medium,
            "Host header sent to the backend (a host name, optionally with a port)",
        ),
        key(
            "connection-proxy-header",
            Location,
            Low,
            "Connection header sent to the backend (e.g. keep-alive, close)",
        ),
        key(
            "x-forwarded-prefix",
            Location,
            Medium,
            "X-Forwarded-Prefix header sent to the backend",
        ),
        key(
            "proxy-redirect-from",
            Location,
            Medium,
            "Location/Refresh text the backend answers with, replaced (off, default, or text)",
        ),
        key("proxy-redirect-to", Location, Medium, "its replacement"),
        key(
            "proxy-cookie-domain",
            Location,
            Medium,
            "Set-Cookie domain rewriting: \"from to\" or off",
        ),
        key(
            "proxy-cookie-path",
            Location,
            Medium,
            "Set-Cookie path rewriting: \"from to\" or off",
        ),
        key(
            "use-port-in-redirects",
            Location,
            Low,
            "true: the port in the redirects NGINX makes itself (default false)",
        ),
        key(
            "relative-redirects",
            Location,
            Low,
            "true: NGINX's own redirects carry a relative Location (default false)",
        ),
        key(
            "enable-access-log",
            Location,
            Low,
            "false: no access log for these locations",
        ),
        key(
            "enable-rewrite-log",
            Location,
            Low,
            "true: NGINX's rewrite log (notice level) for these locations",
        ),
        key(
            "http2-push-preload",
            Location,
            Low,
            "true: over HTTP/2, push what the backend's Link: rel=preload headers name (http2_push_preload)",
        ),
    ],
};

/// The forwarding settings of a location; empty fields keep the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Forwarding {
    /// `proxy_http_version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<String>,
    /// `proxy_next_upstream` (each condition one parameter).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_upstream: Vec<String>,
    /// `proxy_next_upstream_tries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_upstream_tries: Option<u32>,
    /// `proxy_next_upstream_timeout`, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_upstream_timeout: Option<u32>,
    /// The Host header to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_vhost: Option<String>,
    /// The Connection header to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    /// `X-Forwarded-Prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_prefix: Option<String>,
    /// `proxy_redirect`: `["off"]`, `["default"]` or `[from, to]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirect: Vec<String>,
    /// `proxy_cookie_domain`: `["off"]` or `[from, to]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie_domain: Vec<String>,
    /// `proxy_cookie_path`: `["off"]` or `[from, to]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie_path: Vec<String>,
    /// `port_in_redirect on` (the http block has it off, as ingress-nginx).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub port_in_redirect: bool,
    /// `absolute_redirect off`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relative_redirects: bool,
    /// `access_log off` when false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<bool>,
    /// `rewrite_log on`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewrite_log: bool,
    /// `http2_push_preload on`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub push_preload: bool,
}

impl Forwarding {
    /// Whether nothing is set.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

const NEXT_UPSTREAM: &[&str] = &[
    "error",
    "timeout",
    "invalid_header",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_403",
    "http_404",
    "http_429",
    "non_idempotent",
    "off",
];

fn http_version(v: &str) -> Result<String, String> {
    match v {
        "1.0" | "1.1" => Ok(v.to_owned()),
        _ => Err("expected 1.0 or 1.1".to_owned()),
    }
}

pub(crate) fn next_upstream(v: &str) -> Result<Vec<String>, String> {
    let conditions: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
    if conditions.is_empty() {
        return Err("expected conditions such as \"error timeout\"".to_owned());
    }
    if let Some(c) = conditions
        .iter()
        .find(|c| !NEXT_UPSTREAM.contains(&c.as_str()))
    {
        return Err(format!("{c:?} is not one of {}", NEXT_UPSTREAM.join(", ")));
    }
    if conditions.len() > 1 && conditions.iter().any(|c| c == "off") {
        return Err("off stands alone".to_owned());
    }
    Ok(conditions)
}

/// A Connection header value: letters, digits and `-` (`keep-alive`, `close`).
fn connection(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err("expected a word such as keep-alive or close".to_owned());
    }
    Ok(v.to_owned())
}

/// Text of a URL or path that NGINX matches or writes literally: URL characters,
/// no variables, not a regex (`~`).
fn literal(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 1024 {
        return Err("expected a URL or path of at most 1024 bytes".to_owned());
    }
    if v.starts_with('~') {
        return Err("regular expressions are not supported".to_owned());
    }
    value::url_chars(v, "$")?;
    Ok(v.to_owned())
}

/// `off`, or `from to`.
pub(crate) fn rewrite_pair(v: &str) -> Result<Vec<String>, String> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    match parts.as_slice() {
        ["off"] => Ok(vec!["off".to_owned()]),
        [from, to] => Ok(vec![literal(from)?, literal(to)?]),
        _ => Err("expected \"off\" or \"from to\"".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let from = r.parse("proxy-redirect-from", |v| match v {
        "off" | "default" => Ok(v.to_owned()),
        _ => literal(v),
    })?;
    let to = r.parse("proxy-redirect-to", literal)?;
    let redirect = match (from, to) {
        (None, None) => Vec::new(),
        (Some(f), None) if f == "off" || f == "default" => vec![f],
        (Some(f), Some(t)) if f != "off" && f != "default" => vec![f, t],
        (Some(_), Some(_)) => {
            return Err(r.invalid("proxy-redirect-to", "not used with off or default"));
        }
        (_, None) => {
            return Err(r.invalid("proxy-redirect-to", "needed with proxy-redirect-from"));
        }
        (None, Some(_)) => {
            return Err(r.invalid("proxy-redirect-from", "needed with proxy-redirect-to"));
        }
    };
    out.forwarding = Forwarding {
        http_version: r.parse("proxy-http-version", http_version)?,
        next_upstream: r
            .parse("proxy-next-upstream", next_upstream)?
            .unwrap_or_default(),
        next_upstream_tries: r.parse("proxy-next-upstream-tries", |v| value::integer(v, 0, 100))?,
        next_upstream_timeout: r.parse("proxy-next-upstream-timeout", value::seconds)?,
        upstream_vhost: r.parse("upstream-vhost", value::host_port)?,
        connection: r.parse("connection-proxy-header", connection)?,
        forwarded_prefix: r.parse("x-forwarded-prefix", literal)?,
        redirect,
        cookie_domain: r
            .parse("proxy-cookie-domain", rewrite_pair)?
            .unwrap_or_default(),
        cookie_path: r
            .parse("proxy-cookie-path", rewrite_pair)?
            .unwrap_or_default(),
        port_in_redirect: r
            .parse("use-port-in-redirects", value::boolean)?
            .unwrap_or(false),
        relative_redirects: r
            .parse("relative-redirects", value::boolean)?
            .unwrap_or(false),
        access_log: r.parse("enable-access-log", value::boolean)?,
        rewrite_log: r
            .parse("enable-rewrite-log", value::boolean)?
            .unwrap_or(false),
        push_preload: r
            .parse("http2-push-preload", value::boolean)?
            .unwrap_or(false),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed() {
        assert_eq!(
            next_upstream("error timeout http_502"),
            Ok(vec!["error".into(), "timeout".into(), "http_502".into()])
        );
        assert!(next_upstream("error;").is_err());
        assert!(next_upstream("off error").is_err());
        assert!(next_upstream("").is_err());
        assert_eq!(
            value::host_port("app.internal:8080"),
            Ok("app.internal:8080".into())
        );
        assert!(value::host_port("$http_x").is_err());
        assert!(value::host_port("a b").is_err());
        assert!(value::host_port("a.test:0").is_err());
        assert_eq!(
            rewrite_pair(".internal .example.com"),
            Ok(vec![".internal".into(), ".example.com".into()])
        );
        assert_eq!(rewrite_pair("off"), Ok(vec!["off".into()]));
        assert!(rewrite_pair("a").is_err());
        assert!(rewrite_pair("~^/a /b").is_err());
        assert!(rewrite_pair("/a $host").is_err());
        assert!(literal("http://a/;return").is_err());
        assert!(http_version("2").is_err());
        assert!(connection("$http_x").is_err());
        assert_eq!(connection("keep-alive"), Ok("keep-alive".into()));
    }
}
