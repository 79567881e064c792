//! `auth-url` and its companions: each request is first sent, without its body, to
//! an authentication service (NGINX's `auth_request`). A 2xx lets it through (with
//! `auth-response-headers` copied to the backend), a 401 answers 401 or redirects
//! to `auth-signin` with the original URL, a 403 answers 403, and an auth service
//! that cannot be reached answers 500: never through.
//!
//! Every value is typed before it reaches NGINX (the emitter quotes it): the URLs
//! are absolute http(s) URLs (CVE-2025-24514 was an auth-url injection), the method
//! a token (CVE-2026-1580), headers are names (CVE-2025-15566). `$` is refused in
//! `auth-url` (with variables NGINX would need a resolver, and the client would
//! choose the service); `auth-signin` takes the variables of ingress-nginx's usual
//! oauth2-proxy setup only (`$host`, `$scheme`, `$request_uri`,
//! `$escaped_request_uri`).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk, Scope::*};
use super::{AnnotationError, IngressAnnotations, Reader, Snippet, snippets, value};

/// The family's implemented keys (the rest of ingress-nginx's external-auth keys
/// are in `unsupported.rs`, and reject their Ingress).
pub(super) const FAMILY: Family = Family {
    name: "external auth",
    keys: &[
        security(
            "auth-url",
            Risk::High,
            "URL of the service that authorizes each request",
        ),
        security(
            "auth-method",
            Risk::Low,
            "HTTP method of the auth subrequest",
        ),
        security(
            "auth-signin",
            Risk::High,
            "where a 401 from the auth service redirects",
        ),
        security(
            "auth-signin-redirect-param",
            Risk::Medium,
            "query parameter carrying the original URL (default rd)",
        ),
        security(
            "auth-response-headers",
            Risk::Medium,
            "auth response headers passed to the backend",
        ),
        security(
            "auth-request-redirect",
            Risk::Medium,
            "X-Auth-Request-Redirect sent to the auth service",
        ),
        security(
            "auth-cache-key",
            Risk::Medium,
            "caches auth answers under this key (variables allowed)",
        ),
        security(
            "auth-cache-duration",
            Risk::Medium,
            "which auth answers are cached how long (default 200 202 401 5m)",
        ),
        security(
            "auth-always-set-cookie",
            Risk::Low,
            "the auth service's Set-Cookie also on error answers",
        ),
        security(
            "auth-proxy-set-headers",
            Risk::Medium,
            "headers sent to the auth service, from a ConfigMap of the Ingress's namespace",
        ),
        security(
            "auth-snippet",
            Risk::Critical,
            "raw NGINX text in the auth subrequest's location (administrator-enabled: without allow-snippet-annotations the Ingress is rejected)",
        ),
        security(
            "enable-global-auth",
            Risk::Low,
            "false: the ConfigMap's global-auth-url does not apply",
        ),
        tuning(
            "auth-keepalive",
            "idle connections kept open to the auth service (default 0: none)",
        ),
        tuning(
            "auth-keepalive-requests",
            "requests per kept connection (default 1000)",
        ),
        tuning(
            "auth-keepalive-timeout",
            "seconds a kept connection may idle (default 60)",
        ),
        tuning(
            "auth-keepalive-share-vars",
            "accepted; the auth subrequest shares the request's variables either way, as NGINX's auth_request does",
        ),
    ],
};

/// A key that tunes how the auth service is reached, never whether a request
/// is checked.
const fn tuning(name: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        scope: Location,
        risk: Risk::Low,
        security: false,
        supported: true,
        doc,
    }
}

const fn security(name: &'static str, risk: Risk, doc: &'static str) -> Key {
    Key {
        name,
        scope: Location,
        risk,
        security: true,
        supported: true,
        doc,
    }
}

/// External authentication of a location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExternalAuth {
    /// The auth service (absolute http(s) URL, no variables).
    pub url: String,
    /// The subrequest's method (`auth-method`; default GET).
    pub method: String,
    /// Where a 401 redirects (`auth-signin`), with the original URL in `redirect_param`.
    pub signin: Option<String>,
    /// The query parameter of the original URL (`auth-signin-redirect-param`).
    pub redirect_param: String,
    /// Headers of the auth service's answer passed to the backend.
    pub response_headers: Vec<String>,
    /// `X-Auth-Request-Redirect` for the auth service (default: the request URI).
    pub request_redirect: Option<String>,
    /// Answers of the auth service kept and reused (`auth-cache-key`).
    pub cache: Option<AuthCache>,
    /// The auth service's `Set-Cookie` reaches the client on every answer, errors
    /// included (`auth-always-set-cookie`); by default only on successful ones.
    pub always_set_cookie: bool,
    /// `auth-snippet`: raw text in the auth subrequest's location (the build
    /// honours it only where snippets are allowed; the ConfigMap's is the
    /// administrator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<Snippet>,
    /// `auth-proxy-set-headers`: the ConfigMap (`name` or `namespace/name`, the
    /// Ingress's namespace only) whose headers the subrequest sends; its headers,
    /// once the build has read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_set_headers_ref: Option<String>,
    /// See `proxy_set_headers_ref`: sent as written (a `$` is no variable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy_set_headers: Vec<crate::build::header_lists::Header>,
    /// `auth-keepalive*`: connections to the auth service kept open (annotation
    /// only, as in ingress-nginx: never the ConfigMap's global auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<AuthKeepalive>,
}

/// `auth-keepalive`, `auth-keepalive-requests`, `auth-keepalive-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuthKeepalive {
    /// Idle connections kept per worker (`keepalive`).
    pub connections: u32,
    /// Requests per connection (`keepalive_requests`).
    pub requests: u32,
    /// Seconds a connection may idle (`keepalive_timeout`).
    pub timeout: u32,
}

/// `auth-cache-key` and `auth-cache-duration`: NGINX caches the auth service's
/// answers under the key (per host and auth configuration, so that no other
/// Ingress can read them). What the key leaves out is shared: a key without the
/// credentials lets one user's answer decide for another, as in ingress-nginx.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuthCache {
    /// The key, NGINX variables allowed (`$remote_user$http_authorization`).
    pub key: String,
    /// One `proxy_cache_valid` each: status codes (none: 200, 301, 302), then a time.
    pub valid: Vec<Vec<String>>,
}

/// The variables `auth-signin` may use (ingress-nginx's oauth2-proxy examples).
pub const SIGNIN_VARIABLES: &[&str] = &["host", "scheme", "request_uri", "escaped_request_uri"];

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.enable_global_auth = r.parse("enable-global-auth", value::boolean)?;
    out.external_auth = read(|k| r.get(k)).map_err(|(key, reason)| r.invalid(key, &reason))?;
    // Annotation-only (no global-auth twin): a ConfigMap the build reads.
    let headers = r.parse(
        "auth-proxy-set-headers",
        super::custom_headers::config_map_ref,
    )?;
    match (&mut out.external_auth, headers) {
        (Some(auth), headers) => auth.proxy_set_headers_ref = headers,
        (None, Some(_)) => {
            let reason = "without auth-url, nothing would be checked";
            return Err(r.invalid("auth-proxy-set-headers", reason));
        }
        (None, None) => {}
    }
    // Annotation-only as well; without auth-url they tune nothing.
    let connections = r.parse("auth-keepalive", |v| value::integer(v.trim(), 0, 10_000))?;
    let requests = r.parse("auth-keepalive-requests", |v| {
        value::integer(v.trim(), 1, 1_000_000)
    })?;
    let timeout = r.parse("auth-keepalive-timeout", |v| {
        value::integer(v.trim(), 1, 86_400)
    })?;
    r.parse("auth-keepalive-share-vars", value::boolean)?;
    if let (Some(auth), Some(connections @ 1..)) = (&mut out.external_auth, connections) {
        auth.keepalive = Some(AuthKeepalive {
            connections,
            requests: requests.unwrap_or(1000),
            timeout: timeout.unwrap_or(60),
        });
    }
    Ok(())
}

/// The keys [`read`] reads, by their annotation names.
const KEYS: [&str; 10] = [
    "auth-url",
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "auth-cache-key",
    "auth-cache-duration",
    "auth-always-set-cookie",
    "auth-snippet",
];

/// The external auth that `get` describes (`None` without `auth-url`), by the
/// annotations' names; an error names the key and why.
fn read<'v>(
    get: impl Fn(&str) -> Option<&'v str>,
) -> Result<Option<ExternalAuth>, (&'static str, String)> {
    let [
        url_key,
        method_key,
        signin_key,
        param_key,
        headers_key,
        redirect_key,
        cache_key,
        duration_key,
        cookie_key,
        snippet_key,
    ] = KEYS;
    let service = field(&get, url_key, |v| url(v, &[]))?;
    let method = field(&get, method_key, method)?;
    let signin = field(&get, signin_key, |v| url(v, SIGNIN_VARIABLES))?;
    let redirect_param = field(&get, param_key, query_parameter)?;
    let response_headers = field(&get, headers_key, header_names)?;
    let request_redirect = field(&get, redirect_key, value::plain)?;
    let key = field(&get, cache_key, cache_key_value)?;
    let valid = field(&get, duration_key, cache_durations)?;
    let always_set_cookie = field(&get, cookie_key, value::boolean)?;
    let snippet = field(&get, snippet_key, snippets::snippet)?;
    let Some(url) = service else {
        // A companion without auth-url would leave the location open.
        return match KEYS[1..].iter().find(|k| get(k).is_some()) {
            Some(k) => Err((k, "without auth-url, nothing would be checked".to_owned())),
            None => Ok(None),
        };
    };
    Ok(Some(ExternalAuth {
        url,
        method: method.unwrap_or_else(|| "GET".to_owned()),
        signin,
        redirect_param: redirect_param.unwrap_or_else(|| "rd".to_owned()),
        response_headers: response_headers.unwrap_or_default(),
        request_redirect,
        // A duration without a key caches nothing (as in ingress-nginx).
        cache: key.map(|key| AuthCache {
            key,
            valid: valid.unwrap_or_else(|| vec![words(&["200", "202", "401", "5m"])]),
        }),
        always_set_cookie: always_set_cookie.unwrap_or(false),
        snippet,
        proxy_set_headers_ref: None,
        proxy_set_headers: Vec::new(),
        keepalive: None,
    }))
}

/// The value of `key` through `parse`, if set; an error names the key.
fn field<'v, T>(
    get: &impl Fn(&str) -> Option<&'v str>,
    key: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, (&'static str, String)> {
    get(key).map(parse).transpose().map_err(|e| (key, e))
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_owned()).collect()
}

/// A cache key: printable ASCII without quotes, spaces, `;`, braces or `\`;
/// NGINX expands its `$variables` (an unknown one fails `nginx -t`, and config
/// safety then excludes this Ingress alone).
fn cache_key_value(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 512 {
        return Err("expected 1 to 512 characters".to_owned());
    }
    match v
        .chars()
        .find(|c| !c.is_ascii_graphic() || "\"'\\;{}`".contains(*c))
    {
        Some(c) => Err(format!("character {c:?} is not allowed in a cache key")),
        None => Ok(v.to_owned()),
    }
}

/// `auth-cache-duration`: comma-separated `[code ...] time` (`200 202 401 5m`,
/// `any 1m`), as NGINX's `proxy_cache_valid`.
fn cache_durations(v: &str) -> Result<Vec<Vec<String>>, String> {
    let entries: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() || entries.len() > 16 {
        return Err(
            "expected 1 to 16 comma-separated entries such as \"200 202 401 5m\"".to_owned(),
        );
    }
    entries
        .into_iter()
        .map(|e| {
            let words: Vec<&str> = e.split_whitespace().collect();
            let (time, codes) = words.split_last().expect("entries are not empty");
            if !is_time(time) {
                return Err(format!("{time:?} is not a time such as 5m or 30s"));
            }
            for c in codes {
                let code = c.parse::<u16>().ok().filter(|n| (100..600).contains(n));
                if code.is_none() && *c != "any" {
                    return Err(format!("{c:?} is not a status code or any"));
                }
            }
            Ok(words.iter().map(|w| (*w).to_owned()).collect())
        })
        .collect()
}

/// An NGINX time: digits and a unit (ms, s, m, h, d), possibly several (`1h30m`).
fn is_time(t: &str) -> bool {
    let mut rest = t;
    if rest.is_empty() || rest.len() > 16 {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d"]
            .into_iter()
            .find(|u| rest.starts_with(u) && !(*u == "m" && rest.starts_with("ms")));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

fn query_parameter(v: &str) -> Result<String, String> {
    let t = value::token(v)?;
    if t.contains(['$', '&', '=', '#', '%', '+']) {
        return Err("expected a query parameter name".to_owned());
    }
    Ok(t)
}

/// The ConfigMap's `global-auth-*` keys: the external auth of every location whose
/// Ingress sets no `auth-url` of its own and does not opt out
/// (`enable-global-auth: "false"`), except the paths of `no-auth-locations`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GlobalAuth {
    /// `global-auth-url` and its companions (`None`: no global auth).
    pub auth: Option<ExternalAuth>,
    /// One of those keys is invalid: fail closed, every location it would cover
    /// answers 403 until it is fixed.
    pub invalid: bool,
    /// Path prefixes never covered (`no-auth-locations`; by default ACME's
    /// `/.well-known/acme-challenge`, so certificates can still be issued).
    pub exempt: Vec<String>,
}

impl Default for GlobalAuth {
    fn default() -> Self {
        GlobalAuth {
            auth: None,
            invalid: false,
            exempt: vec!["/.well-known/acme-challenge".to_owned()],
        }
    }
}

/// The ConfigMap keys [`GlobalAuth::read`] reads.
pub const GLOBAL_KEYS: [&str; 11] = [
    "global-auth-url",
    "global-auth-method",
    "global-auth-signin",
    "global-auth-signin-redirect-param",
    "global-auth-response-headers",
    "global-auth-request-redirect",
    "global-auth-cache-key",
    "global-auth-cache-duration",
    "global-auth-always-set-cookie",
    "global-auth-snippet",
    "no-auth-locations",
];

impl GlobalAuth {
    /// Reads the ConfigMap's keys through `get`; an invalid one is returned as
    /// `(key, reason)` and closes what the global auth would cover.
    pub fn read<'v>(
        get: impl Fn(&str) -> Option<&'v str>,
    ) -> (GlobalAuth, Option<(String, String)>) {
        let mut g = GlobalAuth::default();
        let mut error = None;
        match read(|k| get(&format!("global-{k}"))) {
            Ok(auth) => g.auth = auth,
            Err((key, reason)) => {
                g.invalid = true;
                error = Some((format!("global-{key}"), reason));
            }
        }
        if let Some(v) = get("no-auth-locations") {
            g.exempt = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
        }
        (g, error)
    }

    /// Whether a location at `path` of an Ingress that sets no `auth-url` and
    /// `enable-global-auth` (default true) is covered.
    pub fn covers(&self, path: &str, enabled: Option<bool>) -> bool {
        (self.auth.is_some() || self.invalid)
            && enabled.unwrap_or(true)
            && !self.exempt.iter().any(|e| path.starts_with(e.as_str()))
    }
}

/// An absolute `http://` or `https://` URL: a host (DNS name, IPv4 or `[IPv6]`),
/// an optional port, an optional path and query, printable ASCII without quotes,
/// spaces, `;`, `{`, `}` or `\`; `$` only before one of `variables`.
pub fn url(v: &str, variables: &[&str]) -> Result<String, String> {
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .ok_or("expected an absolute http:// or https:// URL")?;
    if v.len() > 2048 {
        return Err("longer than 2048 bytes".to_owned());
    }
    value::url_chars(v, "")?;
    // Every `$` names an allowed variable.
    let mut at = 0;
    while let Some(i) = v[at..].find('$') {
        let start = at + i + 1;
        let name: String = v[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !variables.contains(&name.as_str()) {
            return Err(if variables.is_empty() {
                "variables are not allowed here ($ is refused)".to_owned()
            } else {
                format!("only the variables ${} are allowed", variables.join(", $"))
            });
        }
        at = start + name.len();
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // `https://host$request_uri`: a variable after the host ends the authority.
    let authority = match authority.char_indices().skip(1).find(|(_, c)| *c == '$') {
        Some((i, _)) => &authority[..i],
        None => authority,
    };
    let host = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, port) = v6.split_once(']').ok_or("unclosed [ in the host")?;
            addr.parse::<std::net::Ipv6Addr>()
                .map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
            if !(port.is_empty() || port.starts_with(':')) {
                return Err("expected :port after the IPv6 address".to_owned());
            }
            port_ok(port.strip_prefix(':'))?;
            None
        }
        None => {
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            port_ok(port)?;
            Some(host)
        }
    };
    if let Some(host) = host {
        let label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        let var = host
            .strip_prefix('$')
            .is_some_and(|n| variables.contains(&n));
        if !var && (host.is_empty() || host.len() > 253 || !host.split('.').all(label)) {
            return Err(format!("{host:?} is not a host name or address"));
        }
    }
    Ok(v.to_owned())
}

fn port_ok(port: Option<&str>) -> Result<(), String> {
    match port {
        None => Ok(()),
        Some(p)
            if p.parse::<u16>().is_ok_and(|n| n > 0) && p.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Ok(())
        }
        Some(p) => Err(format!("{p:?} is not a port")),
    }
}

/// An HTTP method: upper-case letters only (RFC 9110 methods are tokens; NGINX's
/// `proxy_method` takes any, so nothing else gets through).
fn method(v: &str) -> Result<String, String> {
    if !v.is_empty() && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(v.to_owned())
    } else {
        Err("expected an HTTP method such as GET or POST".to_owned())
    }
}

/// A comma-separated list of header names (letters, digits and `-`).
fn header_names(v: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if names.is_empty() || names.len() > 32 {
        return Err("expected 1 to 32 comma-separated header names".to_owned());
    }
    for n in &names {
        if n.len() > 128 || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(format!(
                "{n:?} is not a header name (letters, digits and -)"
            ));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let ok = |v: &str, vars: &[&str]| assert_eq!(url(v, vars).as_deref(), Ok(v), "{v}");
        let bad = |v: &str, vars: &[&str], why: &str| {
            let e = url(v, vars).unwrap_err();
            assert!(e.contains(why), "{v}: {e}");
        };
        ok("http://auth.auth.svc.cluster.local/check", &[]);
        ok("https://127.0.0.1:9000/oauth2/auth?x=1", &[]);
        ok("http://[::1]:8080/", &[]);
        ok(
            "https://$host/oauth2/start?rd=$escaped_request_uri",
            SIGNIN_VARIABLES,
        );
        bad("ftp://x/", &[], "expected an absolute http");
        bad("/relative", &[], "expected an absolute http");
        bad("http://$host/check", &[], "variables are not allowed");
        bad("http://a.b/$request_uri", &[], "variables are not allowed");
        bad(
            "https://$host/x?$http_cookie",
            SIGNIN_VARIABLES,
            "only the variables",
        );
        bad("http://a;b/", &[], "character ';'");
        bad("http://a/ x", &[], "character ' '");
        bad("http://a/\"", &[], "character '\"'");
        bad("http://a/{x}", &[], "character '{'");
        bad("http://a:0/", &[], "is not a port");
        bad("http://a:99999/", &[], "is not a port");
        bad("http://-a/", &[], "is not a host name");
        bad("http://[::1/", &[], "unclosed");
        bad("http://a\u{85}/", &[], "is not allowed");
    }

    #[test]
    fn methods_and_headers() {
        assert_eq!(method("POST").unwrap(), "POST");
        assert!(method("GET /x HTTP/1.1").is_err());
        assert!(method("get").is_err());
        assert!(method("").is_err());
        assert_eq!(
            header_names("X-Auth-User, X-Auth-Email").unwrap(),
            ["X-Auth-User", "X-Auth-Email"]
        );
        assert!(header_names("X-A: 1").is_err());
        assert!(header_names("X_A").is_err());
        assert!(header_names(" , ").is_err());
    }

    #[test]
    fn cache_values() {
        assert_eq!(
            cache_durations("200 202 401 5m, any 30s,1h30m").unwrap(),
            [
                words(&["200", "202", "401", "5m"]),
                words(&["any", "30s"]),
                words(&["1h30m"])
            ]
        );
        for (bad, why) in [
            ("", "expected 1 to 16"),
            ("200 5x", "is not a time"),
            ("200", "is not a time"),
            ("700 5m", "is not a status code"),
            ("200 5m; return 200", "is not a time"),
        ] {
            let e = cache_durations(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(is_time("250ms") && is_time("1d") && !is_time("m5") && !is_time("5"));
        assert_eq!(
            cache_key_value("$remote_user$http_authorization").unwrap(),
            "$remote_user$http_authorization"
        );
        assert!(cache_key_value("a\"b").is_err());
        assert!(cache_key_value("a b").is_err());
        assert!(cache_key_value("${x}").is_err());
    }
}
