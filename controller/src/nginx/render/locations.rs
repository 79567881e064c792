//! One `location` block's view: what the server template writes for a location of
//! the model, or for the default backend.

use ferrule_model::annotations::{BackendProtocol, SourceRanges};
use ferrule_model::{Location, Model, PathMatch, Target};
use serde::Serialize;

use super::{
    backend_tls, basic_auth_file, client_certificates, cors, error_pages, external_auth,
    literal_in_variables, mirror, proxying, rate_limits, source,
};

/// `auth_basic` of a location: the realm and the users' file.
#[derive(Debug, Clone, Serialize)]
pub(super) struct BasicAuthView {
    pub(super) realm: String,
    pub(super) file: String,
}

pub(super) fn location_view(
    model: &Model,
    l: &Location,
    modifier: &str,
    path: &str,
    tls_host: Option<&str>,
) -> LocationView {
    let st = &l.settings;
    let (backend, status, include) = target_view(
        model,
        &l.target,
        st.backend_protocol,
        st.backend_tls.is_some(),
    );
    let ewma = feeds_ewma(model, &l.target);
    let mirror_views = st.mirror.as_ref().map(mirror::view);
    // Error pages need a backend to proxy for (a fixed status has none).
    let error_views = (st.error_pages.as_ref())
        .filter(|_| backend.is_some())
        .map(|e| error_pages::view(model, l, e));
    LocationView {
        source: source(&l.owner),
        modifier: modifier.to_owned(),
        path: path.to_owned(),
        force_redirect: st.force_ssl_redirect,
        preserve_trailing_slash: st.preserve_trailing_slash,
        redirect: st.redirect.clone(),
        // `$host`, not the client's Host header: server_name matched it. The path
        // has no `$` (typed), so only these two variables expand.
        app_root: st
            .app_root
            .as_ref()
            .map(|p| format!("$ferrule_scheme://$host{p}")),
        // The balancer redirects when this host has a certificate posted.
        redirect_host: (st.ssl_redirect && !st.force_ssl_redirect)
            .then_some(tls_host)
            .flatten()
            .map(str::to_owned),
        ewma,
        // In every location with a backend, so that its backend may gain affinity
        // without a reload: which Ingress the location is (the cookie is set only
        // where an Ingress asked for it, affinity.ingresses) and the cookie's Path
        // where the annotation sets none (ingress-nginx: the Ingress path). One
        // value for both: a `set` of it runs on every request.
        affinity_scope: backend.is_some().then(|| {
            let path = match l.path_match {
                PathMatch::Regex => "/",
                _ => &l.path,
            };
            let (ns, name) = (&l.owner.namespace, &l.owner.name);
            format!("{ns}/{name} {path}")
        }),
        // Canary and affinity are decided in the balancer phase: only these need
        // the rewrite phase.
        // Authentication too: the ssl-redirect must come before a 401 asks for
        // credentials over plain HTTP.
        rewrite_phase: backend.is_some()
            && (st.backend_protocol != BackendProtocol::Http
                || st.rewrite_target.is_some()
                || st.configuration_snippet.is_some()
                || st.basic_auth.is_some()
                || st.external_auth.is_some()),
        body_size: st.proxy_body_size.clone(),
        connect_timeout: st.proxy_connect_timeout.map(|s| format!("{s}s")),
        read_timeout: st.proxy_read_timeout.map(|s| format!("{s}s")),
        send_timeout: st.proxy_send_timeout.map(|s| format!("{s}s")),
        rewrite_from: match l.path_match {
            // The location matched without regard to case; so does its rewrite.
            PathMatch::Regex => format!("(?i)^{}", l.path),
            _ => format!("^{}", regex_escape(&l.path)),
        },
        rewrite: st.rewrite_target.clone(),
        snippet: st.configuration_snippet.as_ref().map(|s| s.lines()),
        source_ranges: st.source_ranges.clone(),
        basic_auth: st.basic_auth.as_ref().map(|b| BasicAuthView {
            // `auth_basic` expands variables: a `$` in the realm is literal (a realm
            // that evaluates to "off" would switch authentication off).
            realm: literal_in_variables(&b.realm),
            file: basic_auth_file(&b.secret),
        }),
        external_auth: st.external_auth.as_ref().map(external_auth::view),
        cors: st.cors.as_ref().map(cors::view),
        proxying: proxying::view(&st.buffering, &st.forwarding),
        mirror: mirror_views.as_ref().map(|(_, l)| l.clone()),
        mirror_location: mirror_views.map(|(s, _)| s),
        error_pages: error_views.as_ref().map(|(_, l)| l.clone()),
        error_location: error_views.map(|(s, _)| s),
        backend_tls: st.backend_tls.as_ref().map(|t| {
            let service = match &l.target {
                Target::Backend(b) => model
                    .backends
                    .get(b)
                    .map(|b| format!("{}.{}.svc", b.service.name, b.service.namespace))
                    .unwrap_or_default(),
                Target::Status(_) => String::new(),
            };
            backend_tls::view(t, st.backend_protocol == BackendProtocol::Grpcs, &service)
        }),
        // Any add_header of a location replaces every one of its server.
        own_headers: st.external_auth.is_some()
            || st.cors.is_some()
            || !st.custom_headers.is_empty(),
        custom_headers: super::literal_headers(&st.custom_headers),
        rate_limits: rate_limits::location(l, &model.global.limit_key_variable),
        satisfy_any: st.satisfy == ferrule_model::annotations::Satisfy::Any,
        client_certificate: None,
        metrics: metrics_labels(model, &l.owner.namespace, &l.owner.name, &l.target, &l.path),
        metrics_lua: None,
        backend,
        status,
        include,
    }
}

/// A location's metrics labels as ingress-nginx names them: namespace, ingress,
/// service, path (the rule's), host (filled in by the server). Control characters,
/// which separate the fields of the metrics dump, become `_`.
fn metrics_labels(model: &Model, ns: &str, ingress: &str, t: &Target, path: &str) -> Vec<String> {
    let service = match t {
        Target::Backend(b) => model
            .backends
            .get(b)
            .map(|b| b.service.name.clone())
            .unwrap_or_default(),
        Target::Status(_) => String::new(),
    };
    [ns, ingress, &service, path, ""]
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| if c.is_control() { '_' } else { c })
                .collect()
        })
        .collect()
}

pub(super) fn default_location(model: &Model) -> LocationView {
    let (backend, status, include) =
        target_view(model, &model.default_backend, BackendProtocol::Http, false);
    // The default backend may be a rule's backend too: EWMA and affinity apply.
    let ewma = feeds_ewma(model, &model.default_backend);
    LocationView {
        source: "Controller/default-backend/".to_owned(),
        path: "/".to_owned(),
        metrics: metrics_labels(model, "", "", &model.default_backend, "/"),
        source_ranges: model.global.source_ranges.location(),
        affinity_scope: backend.is_some().then(|| " /".to_owned()),
        ewma,
        backend,
        status,
        include,
        ..LocationView::default()
    }
}

/// Whether a location routed to `t` runs the log phase: its backend (or its canary)
/// balances with EWMA (false for a backend the model does not have).
fn feeds_ewma(model: &Model, t: &Target) -> bool {
    match t {
        Target::Backend(b) => model.feeds_ewma(b),
        Target::Status(_) => false,
    }
}

/// The backend, the status answered without one, and the include that proxies;
/// `unshared`: TLS connections of the location's own (`proxy-ssl-*`).
fn target_view(
    model: &Model,
    t: &Target,
    proto: BackendProtocol,
    unshared: bool,
) -> (Option<String>, u16, String) {
    let include = match (proto, unshared) {
        (BackendProtocol::Http, _) => "proxy-http.conf",
        (BackendProtocol::Https, false) => "proxy-https.conf",
        (BackendProtocol::Https, true) => "proxy-https-unshared.conf",
        (BackendProtocol::AutoHttp, _) => "proxy-auto-http.conf",
        (BackendProtocol::Grpc, _) => "grpc.conf",
        (BackendProtocol::Grpcs, false) => "grpcs.conf",
        (BackendProtocol::Grpcs, true) => "grpcs-unshared.conf",
    };
    match t {
        Target::Backend(name) if model.backends.contains_key(name) => {
            (Some(name.clone()), 0, include.to_owned())
        }
        Target::Backend(_) => (None, 503, String::new()),
        Target::Status(s) => (None, *s, String::new()),
    }
}

pub(super) fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[derive(Serialize, Default)]
pub(super) struct LocationView {
    pub(super) source: String,
    pub(super) modifier: String,
    pub(super) path: String,
    /// `force-ssl-redirect`: static.
    pub(super) force_redirect: bool,
    /// `preserve-trailing-slash`: the redirect to HTTPS keeps the URI as it came.
    pub(super) preserve_trailing_slash: bool,
    /// `ssl-redirect`: the server's host, for the balancer's per-request decision
    /// (as written: `| literal` for a `set`).
    pub(super) redirect_host: Option<String>,
    /// `permanent-redirect` / `temporal-redirect`: a `return` before anything else
    /// of the location but the force-ssl-redirect (as ingress-nginx, whose Lua
    /// ssl-redirect comes after NGINX's rewrite directives).
    pub(super) redirect: Option<ferrule_model::annotations::Redirect>,
    /// `app-root`: the URL a request for `/` is redirected to.
    pub(super) app_root: Option<String>,
    /// Whether the location runs the log phase (EWMA statistics).
    pub(super) ewma: bool,
    /// Whether the location runs `rewrite()` for every request (the template ignores
    /// it for njs; elsewhere only requests with a body run it). Elsewhere balance()
    /// alone routes, canary and affinity included, answering the 503 and the
    /// ssl-redirect through NGINX's own servers: the rewrite phase costs every
    /// request about 4 % of throughput. Kept for other protocols than HTTP (the
    /// answering servers speak HTTP/1.1), for rewrite-target (the redirect must carry
    /// the URI before the rewrite) and where snippets may add access checks.
    pub(super) rewrite_phase: bool,
    /// `$ferrule_affinity_scope` (every location with a backend): the location's
    /// Ingress and the affinity cookie's default Path, `namespace/name /path`
    /// (` /` where no Ingress owns the location); as written (`| literal` for a `set`).
    pub(super) affinity_scope: Option<String>,
    pub(super) body_size: Option<String>,
    pub(super) connect_timeout: Option<String>,
    pub(super) read_timeout: Option<String>,
    pub(super) send_timeout: Option<String>,
    pub(super) rewrite_from: String,
    pub(super) rewrite: Option<String>,
    pub(super) snippet: Option<String>,
    /// Client address lists (access phase: `deny`, then `allow` and `deny all`).
    pub(super) source_ranges: SourceRanges,
    /// `auth_basic` and its users' file (access phase).
    pub(super) basic_auth: Option<BasicAuthView>,
    /// `auth_request` (access phase).
    pub(super) external_auth: Option<external_auth::ExternalAuthView>,
    /// `enable-cors` (rewrite phase: a preflight is answered before access checks).
    pub(super) cors: Option<cors::CorsView>,
    /// Buffering and forwarding directives.
    pub(super) proxying: Option<proxying::ProxyingView>,
    /// `proxy-ssl-*`.
    pub(super) backend_tls: Option<backend_tls::BackendTlsView>,
    /// `mirror-target`: the location's half (the server has the other).
    pub(super) mirror: Option<mirror::MirrorLocationView>,
    /// The server's half, collected by the server view.
    #[serde(skip)]
    pub(super) mirror_location: Option<mirror::MirrorView>,
    /// `custom-http-errors`: the location's half (the server has the other).
    pub(super) error_pages: Option<error_pages::ErrorPagesView>,
    /// The server's half, collected by the server view.
    #[serde(skip)]
    pub(super) error_location: Option<error_pages::ErrorLocationView>,
    /// Whether the location has `add_header`s of its own: the server's (HSTS) are
    /// then written again, NGINX does not inherit them.
    pub(super) own_headers: bool,
    /// `custom-headers`: sent to the client as written, the backend's own hidden.
    pub(super) custom_headers: Vec<super::SetHeaderView>,
    /// `limit_req`, `limit_conn`, `limit_rate` (preaccess phase and after).
    pub(super) rate_limits: Option<rate_limits::LocationLimitsView>,
    /// `satisfy any` (else NGINX's default, all).
    pub(super) satisfy_any: bool,
    /// The server's `auth-tls-*`, as this location applies it.
    pub(super) client_certificate: Option<client_certificates::LocationCertView>,
    /// `ferrule_metrics` (C module): namespace, ingress, service, path, host; empty
    /// where the module does not count.
    pub(super) metrics: Vec<String>,
    /// The same labels tab-separated as a Lua string (Lua log phase), or `None`.
    pub(super) metrics_lua: Option<String>,
    /// The backend's name, as written (`| literal` for a `set`).
    pub(super) backend: Option<String>,
    pub(super) status: u16,
    pub(super) include: String,
}
