//! The view of `auth-url` (model `ExternalAuth`) for the templates: the internal
//! location of the auth subrequest, the named location of the sign-in redirect,
//! and the headers copied from the auth answer to the backend.

use ferrule_model::Model;
use ferrule_model::annotations::ExternalAuth;
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
        snippet: a.snippet.as_ref().map(|s| s.0.clone()),
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
    }
}
