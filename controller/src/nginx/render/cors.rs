//! `enable-cors`: the headers a location adds, and the pattern of its origins.

use ferrule_model::annotations::{Cors, Origin};
use serde::Serialize;

/// What the template writes for a location's CORS (server.conf.tera).
#[derive(Debug, Clone, Serialize)]
pub(super) struct CorsView {
    /// The origins as one case-insensitive pattern matched against `$http_origin`;
    /// `None`: any origin (`*`, sent on every answer).
    origin_regex: Option<String>,
    /// Each header with the variable that holds its value: empty unless the origin
    /// is allowed (NGINX sends no header whose value is empty).
    headers: Vec<CorsHeader>,
}

#[derive(Debug, Clone, Serialize)]
struct CorsHeader {
    name: &'static str,
    var: &'static str,
    value: String,
}

const ORIGIN_VAR: &str = "$ferrule_cors_origin";

pub(super) fn view(c: &Cors) -> CorsView {
    let origin_regex = (!c.origins.is_empty()).then(|| {
        let alternatives: Vec<String> = c.origins.iter().map(origin_pattern).collect();
        format!("^(?:{})$", alternatives.join("|"))
    });
    // With a list, the allowed origin is echoed; with `*`, browsers send no
    // credentials whatever Allow-Credentials says (Fetch), as in ingress-nginx.
    let origin = match origin_regex {
        Some(_) => "$http_origin".to_owned(),
        None => "*".to_owned(),
    };
    let mut headers = vec![
        header("Access-Control-Allow-Origin", ORIGIN_VAR, origin),
        header(
            "Access-Control-Allow-Methods",
            "$ferrule_cors_methods",
            c.methods.clone(),
        ),
        header(
            "Access-Control-Allow-Headers",
            "$ferrule_cors_headers",
            c.headers.clone(),
        ),
        header(
            "Access-Control-Max-Age",
            "$ferrule_cors_max_age",
            c.max_age.to_string(),
        ),
    ];
    if c.credentials {
        headers.push(header(
            "Access-Control-Allow-Credentials",
            "$ferrule_cors_credentials",
            "true".to_owned(),
        ));
    }
    if !c.expose_headers.is_empty() {
        headers.push(header(
            "Access-Control-Expose-Headers",
            "$ferrule_cors_expose_headers",
            c.expose_headers.clone(),
        ));
    }
    // An answer that depends on Origin says so to caches.
    if origin_regex.is_some() {
        headers.push(header("Vary", "$ferrule_cors_vary", "Origin".to_owned()));
    }
    CorsView {
        origin_regex,
        headers,
    }
}

fn header(name: &'static str, var: &'static str, value: String) -> CorsHeader {
    CorsHeader { name, var, value }
}

/// `[scheme://][*.]host[:port]` as a PCRE: no scheme matches both, `*.` one label.
/// Anchored at both ends (ingress-nginx anchors only the end, so that an origin
/// written without its scheme also allows `https://evil-host`).
fn origin_pattern(o: &Origin) -> String {
    let scheme = match o.scheme.as_deref() {
        Some(s) => s.to_owned(),
        None => "https?".to_owned(),
    };
    let host = match o.host.strip_prefix("*.") {
        Some(rest) => format!("[a-z0-9-]+\\.{}", rest.replace('.', "\\.")),
        None => o.host.replace('.', "\\."),
    };
    let port = o.port.map(|p| format!(":{p}")).unwrap_or_default();
    format!("{scheme}://{host}{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_become_one_anchored_pattern() {
        let o = |scheme: Option<&str>, host: &str, port| Origin {
            scheme: scheme.map(str::to_owned),
            host: host.to_owned(),
            port,
        };
        let c = Cors {
            origins: vec![
                o(Some("https"), "a.example.com", None),
                o(None, "*.b.example", Some(8443)),
            ],
            methods: "GET".into(),
            headers: "X-A".into(),
            expose_headers: String::new(),
            credentials: false,
            max_age: 5,
        };
        let v = view(&c);
        assert_eq!(
            v.origin_regex.as_deref(),
            Some(r"^(?:https://a\.example\.com|https?://[a-z0-9-]+\.b\.example:8443)$")
        );
        let names: Vec<_> = v.headers.iter().map(|h| h.name).collect();
        assert_eq!(
            names,
            [
                "Access-Control-Allow-Origin",
                "Access-Control-Allow-Methods",
                "Access-Control-Allow-Headers",
                "Access-Control-Max-Age",
                "Vary"
            ]
        );
        assert_eq!(v.headers[0].value, "$http_origin");
    }
}
