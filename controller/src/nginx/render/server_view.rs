//! The view of `server.conf.tera`: one server per host, its listeners, TLS,
//! locations (each path rule's, in NGINX's order) and the named locations they use.

use super::*;

impl Renderer {
    pub(super) fn server_view(&self, model: &Model, s: &Server) -> ServerView {
        let is_default = s.host == DEFAULT_SERVER;
        // Nothing here depends on whether the host has TLS: the balancer serves its
        // certificate by SNI and decides the ssl-redirect per request, so TLS coming
        // or going needs no reload. The default certificate is the static fallback;
        // with a ticket key, the certificate derived from it, the same on every
        // replica: NGINX binds sessions to it, and replicas then resume each
        // other's tickets.
        let cert = match &model.global.tuning.ssl_session_ticket_key {
            Some(_) => self.path(TICKET_PLACEHOLDER),
            None => self.path(DEFAULT_CERTIFICATE),
        };
        let tls_host = (!is_default).then_some(s.host.as_str());
        let mut locations = Vec::new();
        let exact: std::collections::HashSet<&str> = s
            .locations
            .iter()
            .filter(|l| l.path_match == PathMatch::Exact)
            .map(|l| l.path.as_str())
            .collect();
        let mut has_root = false;
        // A host with a regex path: NGINX tries regex locations in the order written
        // and prefers any of them to a prefix location, so every prefix path is
        // written as a regex too, all in the model's precedence (route.rs), after the
        // exact ones (NGINX tries those first whatever their order).
        let regex_mode = s.locations.iter().any(|l| l.path_match == PathMatch::Regex);
        let mut ordered: Vec<&Location> = s.locations.iter().collect();
        if regex_mode {
            // (exact ones keep the model's order: precedence is that order for them)
            ordered.sort_by_key(|l| (l.path_match != PathMatch::Exact, route::precedence(l)));
        }
        for l in ordered {
            match l.path_match {
                PathMatch::Exact => locations.push(location_view(model, l, "=", &l.path, tls_host)),
                // Case-insensitive, as ingress-nginx's regex paths (`~*`).
                PathMatch::Regex => locations.push(location_view(
                    model,
                    l,
                    "~*",
                    &format!("^{}", l.path),
                    tls_host,
                )),
                PathMatch::Prefix if l.path == "/" => {
                    has_root = true;
                    let (modifier, path) = if regex_mode { ("~", "^/") } else { ("", "/") };
                    locations.push(location_view(model, l, modifier, path, tls_host));
                }
                PathMatch::Prefix if regex_mode => {
                    let regex = format!("^{}(?:/|$)", regex_escape(&l.path));
                    locations.push(location_view(model, l, "~", &regex, tls_host));
                }
                PathMatch::Prefix => {
                    // Element-wise: `/foo` is `= /foo` plus everything below `/foo/`.
                    if !exact.contains(l.path.as_str()) {
                        locations.push(location_view(model, l, "=", &l.path, tls_host));
                    }
                    locations.push(location_view(
                        model,
                        l,
                        "",
                        &format!("{}/", l.path),
                        tls_host,
                    ));
                }
            }
        }
        // NGINX answers `/foo` with a 301 to `/foo/` when a location named `/foo/`
        // proxies and none is named `/foo`. Only an Exact `/foo/` rule can leave `/foo`
        // unnamed (a Prefix always names both): name it, routed as the model routes it.
        let named: std::collections::HashSet<&str> = locations
            .iter()
            .filter(|l| !l.modifier.starts_with('~'))
            .map(|l| l.path.as_str())
            .collect();
        let mut twins = Vec::new();
        // Built for the first twin only, and once per host: each lookup then costs
        // about the length of its path, not a compilation of every regex path.
        let mut locator: Option<route::Locator<'_>> = None;
        for l in &s.locations {
            let Some(bare) = l.path.strip_suffix('/') else {
                continue;
            };
            if l.path_match != PathMatch::Exact || bare.is_empty() || named.contains(bare) {
                continue;
            }
            let by = locator
                .get_or_insert_with(|| route::Locator::new(s))
                .locate(bare);
            let mut twin = match by {
                Some(by) => location_view(model, by, "=", bare, tls_host),
                None => default_location(model),
            };
            twin.modifier = "=".to_owned();
            twin.path = bare.to_owned();
            twins.push(twin);
        }
        locations.extend(twins);
        if !has_root {
            locations.push(default_location(model));
        }
        // from-to-www-redirect's twin: one location, the redirect. `$host` is not
        // used: the target is the other host, a typed DNS name (no `$`).
        if let Some(to) = &s.redirect_to {
            locations = vec![LocationView {
                source: s.owner.as_ref().map(source).unwrap_or_default(),
                path: "/".to_owned(),
                redirect: Some(ferrule_model::annotations::Redirect {
                    code: 308,
                    url: format!("$ferrule_scheme://{to}$request_uri"),
                }),
                status: 308,
                ..LocationView::default()
            }];
        }
        // Client certificates: never served over plain HTTP (redirected first), and
        // every location tells the backend what was verified.
        if let Some(c) = &s.client_certificates {
            for l in &mut locations {
                l.force_redirect = true;
                l.client_certificate = Some(client_certificates::location(c));
            }
        }
        let mirror_locations =
            each_once(locations.iter().filter_map(|l| l.mirror_location.as_ref()));
        let error_locations = each_once(locations.iter().filter_map(|l| l.error_location.as_ref()));
        let auth_locations = each_once(locations.iter().filter_map(|l| l.external_auth.as_ref()));
        // The users' files are opened by the workers: below the worker directory.
        for b in locations.iter_mut().filter_map(|l| l.basic_auth.as_mut()) {
            b.file = self.worker_path(&b.file);
        }
        // The backend TLS files are read by the master: below the prefix.
        for t in locations.iter_mut().filter_map(|l| l.backend_tls.as_mut()) {
            t.absolute(|rel| self.path(rel));
        }
        // Without a rewrite phase, balance() answers the ssl-redirect after the access
        // phase; a snippet may add access checks (auth_basic, allow), which must not
        // be asked for before the redirect to HTTPS.
        let g = &model.global;
        if g.http_snippet.is_some()
            || g.server_snippet.is_some()
            || g.location_snippet.is_some()
            || s.server_snippet.is_some()
        {
            for l in locations.iter_mut() {
                l.rewrite_phase = l.backend.is_some();
            }
        }
        // The metrics' labels: the host is the server's (never the request's Host,
        // which anyone chooses); the default server's requests have none.
        let metrics_host = if is_default { "" } else { s.host.as_str() };
        let metrics_source = self.opts.metrics_source();
        for l in locations.iter_mut() {
            match metrics_source {
                _ if l.metrics.len() != 5 => l.metrics.clear(),
                MetricsSource::None => l.metrics.clear(),
                _ => {
                    l.metrics[4] = metrics_host.to_owned();
                    if metrics_source == MetricsSource::Lua {
                        l.metrics_lua = Some(lua_quote(&l.metrics.join("\t")));
                    }
                    if metrics_source != MetricsSource::Module {
                        l.metrics.clear();
                    }
                }
            }
        }
        if self.opts.balancer == Balancer::Njs {
            // Every Lua include `X` has its njs twin `njs-X` (same headers, the peer
            // from `$ferrule_peer`); the location view stays balancer-neutral.
            for l in locations.iter_mut().filter(|l| !l.include.is_empty()) {
                l.include = format!("njs-{}", l.include);
            }
        }
        ServerView {
            host: s.host.clone(),
            server_name: server_name(&s.host),
            default: is_default,
            owner: s
                .owner
                .as_ref()
                .map(source)
                .unwrap_or_else(|| "Controller".to_owned()),
            listen_http: self.listen(model, self.opts.http_port),
            listen_https: self.listen(model, self.opts.https_port),
            cert,
            server_snippet: s.server_snippet.as_ref().map(|s| s.lines()),
            auth_locations,
            mirror_locations,
            error_locations,
            client_certificates: s
                .client_certificates
                .as_ref()
                .map(|c| client_certificates::server(c, |rel| self.path(rel))),
            ssl_ciphers: s.ciphers.ciphers.clone(),
            ssl_prefer_server_ciphers: s.ciphers.prefer_server_ciphers.map(on_off),
            locations,
        }
    }
}

#[derive(Serialize)]
pub(super) struct ServerView {
    host: String,
    server_name: String,
    default: bool,
    owner: String,
    listen_http: Vec<String>,
    listen_https: Vec<String>,
    cert: String,
    server_snippet: Option<String>,
    locations: Vec<LocationView>,
    /// The external-auth subrequests of its locations, each once.
    auth_locations: Vec<external_auth::ExternalAuthView>,
    /// The mirrors of its locations, each once.
    mirror_locations: Vec<mirror::MirrorView>,
    /// The named locations of its locations' error backends, each once.
    error_locations: Vec<error_pages::ErrorLocationView>,
    /// `auth-tls-*` of its owner.
    client_certificates: Option<client_certificates::ServerCertView>,
    /// `ssl-ciphers` of its owner.
    ssl_ciphers: Option<String>,
    /// `ssl-prefer-server-ciphers` of its owner: `on` or `off`.
    ssl_prefer_server_ciphers: Option<&'static str>,
}
