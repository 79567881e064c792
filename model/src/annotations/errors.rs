//! Error pages: `custom-http-errors` (statuses answered by an error backend,
//! ConfigMap `custom-http-errors` as the default), `default-backend` (the Service
//! answering them for this Ingress instead of `--default-backend-service`, and
//! the fallback of a Service without ready endpoints) and
//! `disable-proxy-intercept-errors` (only the errors NGINX makes itself).
//!
//! Unlike ingress-nginx, the client always gets the original status: an error page
//! may change the body, never a 401 or 403 into a 200 (CVE-2026-24513 was an auth
//! subrequest's 401 replaced by an error page's answer).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "errors",
    keys: &[
        key(
            "custom-http-errors",
            Location,
            Low,
            "statuses (400-599) whose page the error backend answers, with the status kept",
        ),
        key(
            "default-backend",
            Location,
            Low,
            "Service (first port) answering this Ingress's custom-http-errors, and its requests while their Service has no ready endpoints",
        ),
        key(
            "disable-proxy-intercept-errors",
            Location,
            Low,
            "only NGINX's own errors get the error page, not the backend's",
        ),
    ],
};

/// The annotations as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ErrorPages {
    /// `custom-http-errors`; `None`: the ConfigMap's.
    pub codes: Option<Vec<u16>>,
    /// `default-backend`: a Service of the Ingress's namespace.
    pub backend: Option<String>,
    /// `disable-proxy-intercept-errors`.
    pub no_intercept: bool,
}

/// A list of statuses 400-599, sorted, without repeats.
pub(crate) fn codes(v: &str) -> Result<Vec<u16>, String> {
    let mut out = v
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| value::integer(c, 400, 599).map(|n| n as u16))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "expected statuses between 400 and 599, such as \"404,503\"".to_owned())?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A Service name (DNS-1035 label).
fn service(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && !v.ends_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(v.to_owned())
    } else {
        Err("expected the name of a Service in the Ingress's namespace".to_owned())
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.error_pages = ErrorPages {
        codes: r.parse("custom-http-errors", codes)?,
        backend: r.parse("default-backend", service)?,
        no_intercept: r
            .parse("disable-proxy-intercept-errors", value::boolean)?
            .unwrap_or(false),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed() {
        assert_eq!(codes("503, 404,404"), Ok(vec![404, 503]));
        assert!(codes("200").is_err());
        assert!(codes("404;").is_err());
        assert!(service("errors").is_ok());
        assert!(service("other/errors").is_err());
        assert!(service("Errors").is_err());
    }
}
