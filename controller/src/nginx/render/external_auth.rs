//! The view of `auth-url` (model `ExternalAuth`) for the templates: the internal
//! location of the auth subrequest, the named location of the sign-in redirect,
//! and the headers copied from the auth answer to the backend.

use ferrule_model::Model;
use ferrule_model::annotations::{AuthKeepalive, ExternalAuth};
use serde::Serialize;

use super::literal_in_variables;

/// The variable the templates set to the URL-escaped request URI (Lua's
/// `ngx.escape_uri`, njs's `encodeURIComponent`): what ingress-nginx calls
/// `$escaped_request_uri`.
pub const ESCAPED_REQUEST_URI: &str = "$ferrule_escaped_request_uri";

/// One auth configuration of a server: its subrequest location and sign-in.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExternalAuthView {
    /// `location = ...` of the subrequest (internal: 404 from outside).
    pub location: String,
    /// The auth service.
    pub url: String,
    /// `proxy_method` of the subrequest.
    pub method: String,
    /// `X-Auth-Request-Redirect` (a literal, or `$request_uri`).
    pub request_redirect: String,
    /// The auth answer's headers passed to the backend.
    pub headers: Vec<HeaderView>,
    /// The named location a 401 goes to, with `auth-signin`.
    pub signin_location: Option<String>,
    /// Where it redirects (variables of `SIGNIN_VARIABLES` only).
    pub signin_redirect: Option<String>,
    /// `auth-cache-key`: answers kept in [`CACHE_ZONE`].
    pub cache: Option<CacheView>,
    /// `add_header Set-Cookie ... always` (`auth-always-set-cookie`).
    pub always_set_cookie: bool,
    /// `auth-snippet` (raw, administrator-enabled) in the subrequest's location.
    pub snippet: Option<String>,
    /// `auth-proxy-set-headers`: sent to the auth service, as written.
    pub set_headers: Vec<super::SetHeaderView>,
    /// `auth-keepalive`: the subrequest goes through the relay (see [`upstreams`]).
    pub relay: Option<RelayView>,
}

/// How an auth subrequest reaches the keepalive relay.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RelayView {
    /// What follows the relay's address in `proxy_pass`: the upstream's prefix,
    /// then the auth URL's path and query.
    pub path: String,
    /// `Host` of the auth URL, which the relay passes on.
    pub host: String,
}

/// An auth service reached with kept connections (`auth-keepalive`).
///
/// NGINX does not keep an upstream connection of an `auth_request` subrequest
/// (it never reads the answer's body: nginx ticket 1579; ingress-nginx turns to
/// Lua for it, and only without HTTP/2). So the subrequest goes to a relay, a
/// server of this NGINX on a unix socket, whose ordinary request proxies to this
/// upstream with `keepalive`: the connections to the auth service are reused, for
/// either balancer and over HTTP/2 too.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuthUpstreamView {
    /// `upstream` name, also the relay location's prefix.
    pub name: String,
    /// `server`: host and port of the auth URL.
    pub server: String,
    /// `https`: TLS to the auth service, with `ssl_name` for SNI.
    pub tls: bool,
    /// The auth URL's host (SNI).
    pub ssl_name: String,
    /// `keepalive`.
    pub connections: u32,
    /// `keepalive_requests`.
    pub requests: u32,
    /// `keepalive_timeout`.
    pub timeout: String,
}

/// The parts of an auth URL (an absolute http(s) URL, checked by the model).
struct Target<'a> {
    tls: bool,
    /// `host[:port]` as written: the `Host` header.
    authority: &'a str,
    /// The host alone (IPv6 without brackets).
    host: &'a str,
    /// `host:port`, the port made explicit.
    server: String,
    /// Path and query (`/` when none).
    path: String,
}

fn target(url: &str) -> Option<Target<'_>> {
    let (tls, rest) = match url.split_once("://")? {
        ("https", rest) => (true, rest),
        ("http", rest) => (false, rest),
        _ => return None,
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = port.unwrap_or(if tls { "443" } else { "80" });
    let server = match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Some(Target {
        tls,
        authority,
        host,
        server,
        path,
    })
}

/// The upstream name of an auth service `t` kept alive as `k` says.
fn upstream_name(k: AuthKeepalive, t: &Target<'_>) -> String {
    let text = format!(
        "{}|{}|{}|{}|{}",
        t.tls, t.server, k.connections, k.requests, k.timeout
    );
    format!(
        "ferrule_auth_{}",
        &blake3::hash(text.as_bytes()).to_hex()[..16]
    )
}

/// The kept-alive auth services of `model`'s locations, each once.
pub fn upstreams(model: &Model) -> Vec<AuthUpstreamView> {
    let mut out: Vec<AuthUpstreamView> = model
        .servers
        .iter()
        .flat_map(|s| &s.locations)
        .filter_map(|l| l.settings.external_auth.as_ref())
        .filter_map(|a| {
            let k = a.keepalive?;
            let t = target(&a.url)?;
            Some(AuthUpstreamView {
                name: upstream_name(k, &t),
                server: t.server.clone(),
                tls: t.tls,
                ssl_name: t.host.to_owned(),
                connections: k.connections,
                requests: k.requests,
                timeout: format!("{}s", k.timeout),
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The `keys_zone` of the auth answers' cache (one for the whole configuration:
/// every key starts with the host and the auth location, so entries never mix).
pub const CACHE_ZONE: &str = "ferrule_auth";

/// `proxy_cache_path` of the auth answers' cache (ingress-nginx's sizes).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CacheZoneView {
    /// Where the workers keep the cached answers.
    pub path: String,
    /// `keys_zone=`.
    pub keys_zone: String,
}

/// How one auth location caches.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CacheView {
    /// `proxy_cache` ([`CACHE_ZONE`]).
    pub zone: String,
    /// `proxy_cache_key`: `$host`, the auth location, then `auth-cache-key`.
    pub key: String,
    /// The `proxy_cache_valid` directives' parameters.
    pub valid: Vec<Vec<String>>,
}

/// The cache zone, when a location of `model` caches auth answers.
pub fn cache_zone(model: &Model, path: &str) -> Option<CacheZoneView> {
    let cached = model.servers.iter().flat_map(|s| &s.locations).any(|l| {
        l.settings
            .external_auth
            .as_ref()
            .is_some_and(|a| a.cache.is_some())
    });
    cached.then(|| CacheZoneView {
        path: path.to_owned(),
        keys_zone: format!("{CACHE_ZONE}:10m"),
    })
}

/// A header of the auth answer copied to the backend.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HeaderView {
    /// As the backend receives it.
    pub name: String,
    /// The variable `auth_request_set` fills.
    pub var: String,
    /// The auth answer's header, as NGINX names it.
    pub upstream: String,
}

/// The view of `a`: its locations are named after the configuration itself, so
/// that the locations of one server sharing it share one subrequest location.
pub fn view(a: &ExternalAuth) -> ExternalAuthView {
    let id = blake3::hash(serde_json::to_string(a).unwrap_or_default().as_bytes()).to_hex();
    let id = &id[..16];
    let headers = a
        .response_headers
        .iter()
        .map(|h| {
            let snake = h.to_ascii_lowercase().replace('-', "_");
            HeaderView {
                name: h.clone(),
                var: format!("$ferrule_auth_{snake}"),
                upstream: format!("$upstream_http_{snake}"),
            }
        })
        .collect();
    let signin_redirect = a.signin.as_ref().map(|s| {
        let s = s.replace("$escaped_request_uri", ESCAPED_REQUEST_URI);
        // As ingress-nginx: the original URL is added unless the URL carries it.
        if s.contains(&format!("{}=", a.redirect_param)) {
            s
        } else {
            let sep = if s.contains('?') { '&' } else { '?' };
            format!(
                "{s}{sep}{}=$scheme://$http_host{ESCAPED_REQUEST_URI}",
                a.redirect_param
            )
        }
    });
    let location = format!("/_ferrule/auth/{id}");
    let cache = a.cache.as_ref().map(|c| CacheView {
        zone: CACHE_ZONE.to_owned(),
        key: format!("$host{location}{}", c.key),
        valid: c.valid.clone(),
    });
    ExternalAuthView {
        cache,
        always_set_cookie: a.always_set_cookie,
        snippet: a.snippet.as_ref().map(|s| s.lines()),
        location,
        url: a.url.clone(),
        method: a.method.clone(),
        request_redirect: a
            .request_redirect
            .as_deref()
            .map_or_else(|| "$request_uri".to_owned(), literal_in_variables),
        headers,
        signin_location: a.signin.as_ref().map(|_| format!("@ferrule_signin_{id}")),
        signin_redirect,
        set_headers: super::literal_headers(&a.proxy_set_headers),
        relay: a.keepalive.and_then(|k| {
            let t = target(&a.url)?;
            Some(RelayView {
                path: format!("/{}{}", upstream_name(k, &t), t.path),
                host: t.authority.to_owned(),
            })
        }),
    }
}
