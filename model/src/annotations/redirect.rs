//! `ssl-redirect`, `force-ssl-redirect`, and the redirects of every request of a
//! location: `permanent-redirect` and `temporal-redirect` with their codes.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, external_auth, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "redirect",
    keys: &[
        key(
            "ssl-redirect",
            Location,
            Low,
            "redirect plain HTTP to HTTPS when the host has TLS (default true)",
        ),
        key(
            "force-ssl-redirect",
            Location,
            Low,
            "redirect plain HTTP to HTTPS even without TLS on the host",
        ),
        key(
            "preserve-trailing-slash",
            Location,
            Low,
            "keep the URI's trailing slash in the redirect to HTTPS (by default one is \
             stripped, as ingress-nginx does)",
        ),
        key(
            "permanent-redirect",
            Location,
            Medium,
            "redirect every request to this URL, absolute or a path on the host (default code 301)",
        ),
        key(
            "permanent-redirect-code",
            Location,
            Low,
            "status of permanent-redirect, 300 to 308",
        ),
        key(
            "temporal-redirect",
            Location,
            Medium,
            "temporary redirect to this URL, absolute or a path on the host (default code 302; wins over permanent-redirect)",
        ),
        key(
            "temporal-redirect-code",
            Location,
            Low,
            "status of temporal-redirect, 300 to 308",
        ),
        key(
            "from-to-www-redirect",
            Server,
            Low,
            "redirect (308) www.host to host, or host to www.host, when no Ingress serves the other",
        ),
        key(
            "app-root",
            Server,
            Medium,
            "redirect (302) a request for / to this path, on the Ingress's locations",
        ),
    ],
};

/// The variables a redirect URL may use: the request's own URI and host, nothing a
/// client could fill with a header (CVE-2023-5044 injected directives through
/// `permanent-redirect`; the URL is typed and every other `$` refused).
const URL_VARIABLES: &[&str] = &["request_uri", "uri", "is_args", "args", "scheme", "host"];

/// A redirect of every request of a location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Redirect {
    /// The status (300 to 308).
    pub code: u16,
    /// An absolute http(s) URL (`$` only before [`URL_VARIABLES`]) or a path.
    pub url: String,
}

/// An absolute http(s) URL, or a path on the same host (`/new-location`, as
/// ingress-nginx takes it: NGINX makes it absolute with the request's host).
fn url(v: &str) -> Result<String, String> {
    if v.starts_with('/') {
        return app_root(v).map_err(|_| {
            "expected an absolute http(s) URL, or a path such as /new-location without \
             variables, quotes or spaces"
                .to_owned()
        });
    }
    external_auth::url(v, URL_VARIABLES)
}

/// An absolute path without variables, quotes, spaces or NGINX metacharacters.
fn app_root(v: &str) -> Result<String, String> {
    if !v.starts_with('/') || v.starts_with("//") {
        return Err("expected an absolute path such as /app".to_owned());
    }
    if v.len() > 1024 {
        return Err("longer than 1024 bytes".to_owned());
    }
    value::url_chars(v, "$#")?;
    Ok(v.to_owned())
}

fn code(v: &str) -> Result<u16, String> {
    value::integer(v, 300, 308).map(|c| c as u16)
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.ssl_redirect = r.parse("ssl-redirect", value::boolean)?;
    out.force_ssl_redirect = r.parse("force-ssl-redirect", value::boolean)?;
    out.preserve_trailing_slash = r
        .parse("preserve-trailing-slash", value::boolean)?
        .unwrap_or(false);
    let permanent = r.parse("permanent-redirect", url)?;
    let permanent_code = r.parse("permanent-redirect-code", code)?;
    let temporal = r.parse("temporal-redirect", url)?;
    let temporal_code = r.parse("temporal-redirect-code", code)?;
    out.app_root = r.parse("app-root", app_root)?;
    out.from_to_www_redirect = r
        .parse("from-to-www-redirect", value::boolean)?
        .unwrap_or(false);
    // As ingress-nginx: the temporal redirect wins when both are set.
    out.redirect = match (temporal, permanent) {
        (Some(url), _) => Some(Redirect {
            code: temporal_code.unwrap_or(302),
            url,
        }),
        (None, Some(url)) => Some(Redirect {
            code: permanent_code.unwrap_or(301),
            url,
        }),
        (None, None) => None,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_urls_are_typed() {
        assert_eq!(
            url("https://new.example.com$request_uri").unwrap(),
            "https://new.example.com$request_uri"
        );
        assert!(url("https://a.b/x?$http_cookie").is_err());
        // A path on the same host, as ingress-nginx takes it; never a variable, a
        // scheme-relative URL or a metacharacter.
        assert_eq!(url("/new-location").unwrap(), "/new-location");
        assert!(url("//evil.example/x").is_err());
        assert!(url("/x$http_cookie").is_err());
        assert!(url("/x;return 200").is_err());
        assert!(url("https://a.b/;return 200").is_err());
        assert!(url("javascript:alert(1)").is_err());
        assert_eq!(app_root("/app/").unwrap(), "/app/");
        assert!(app_root("app").is_err());
        assert!(app_root("//evil.example").is_err());
        assert!(app_root("/$host").is_err());
        assert!(app_root("/a;b").is_err());
        assert_eq!(code("308"), Ok(308));
        assert!(code("200").is_err());
        assert!(code("309").is_err());
    }
}
