//! The view of `nginx.conf.tera`: the main and http contexts (modules, logs,
//! maps, zones, upstreams, the balancer's API server, the stream block).

use super::*;

impl Renderer {
    pub(super) fn main_view(&self, model: &Model) -> MainView {
        MainView {
            modules: self.opts.modules.clone(),
            user: self.opts.user.clone(),
            group: self.opts.user.as_ref().map(|_| "nogroup".to_owned()),
            // ConfigMap worker-processes, else the flag.
            worker_processes: (model.global.http.worker_processes.clone())
                .unwrap_or_else(|| self.opts.worker_processes.clone()),
            pid: self.path(process::PID_FILE),
            error_log: if self.opts.log_to_stdio {
                "stderr".to_owned()
            } else {
                self.path("logs/error.log")
            },
            access_log: if self.opts.log_to_stdio {
                "/dev/stdout".to_owned()
            } else {
                self.path("logs/access.log")
            },
            mime_types: "/etc/nginx/mime.types".to_owned(),
            tmp: self.worker_path("tmp"),
            worker_shutdown_timeout: format!("{}s", WORKER_SHUTDOWN_TIMEOUT.as_secs()),
            lua_path: format!("{}/?.lua;;", self.path("lua")),
            backends_dict: "128m".to_owned(),
            fast_path: self.opts.fast_path,
            location_directive: self.opts.location_directive,
            upstreaminfo_line: self.opts.location_directive
                && model.global.tuning.log_format == ferrule_model::UPSTREAMINFO
                && model.global.tuning.log_escape.is_none(),
            input_header: self.opts.input_header,
            certificates_dict: format!("{}m", self.opts.certificate_store_mib),
            token_file_lua: lua_quote(&self.path("conf/balancer.token")),
            njs: self.opts.balancer == Balancer::Njs,
            njs_dir: self.path(NJS_DIR),
            njs_main: self.path(&format!("{NJS_DIR}/ferrule.js")),
            njs_token_file: self.path(NJS_TOKEN_FILE),
            // `js_var` expands variables in its value: a `$` in the prefix is literal.
            njs_state_dir: literal_in_variables(&self.worker_path(NJS_STATE_DIR)),
            njs_default_cert: literal_in_variables(&self.worker_path(NJS_DEFAULT_CERT)),
            njs_default_key: literal_in_variables(&self.worker_path(NJS_DEFAULT_KEY)),
            servers_glob: self.path("conf/servers/*.conf"),
            api_listen: Self::unix(self.path(process::API_SOCKET)),
            unavailable_listen: Self::unix(self.worker_path(process::UNAVAILABLE_SOCKET)),
            redirect_listen: Self::unix(self.worker_path(process::REDIRECT_SOCKET)),
            unavailable_peer_lua: lua_quote(&Self::unix(
                self.worker_path(process::UNAVAILABLE_SOCKET),
            )),
            redirect_peer_lua: lua_quote(&Self::unix(self.worker_path(process::REDIRECT_SOCKET))),
            config_version: VERSION_PLACEHOLDER.to_owned(),
            ticket_key: self.path(TICKET_KEY_FILE),
            dh_param: self.path(DH_PARAM_FILE),
            configmap: configmap_source(self.opts.configmap.as_deref()),
            server_names_bucket: server_names_bucket(model.servers.iter().map(|s| s.host.as_str()))
                .max(model.global.http.server_names_hash_bucket_size as usize),
            // Enough for ten thousand hosts; ConfigMap server-name-hash-max-size may raise it.
            server_names_max: model.global.http.server_names_hash_max_size.max(65_536),
            resolvers: self.opts.resolvers.clone(),
            blocking: model.global.blocking.active(),
            hidden_headers: hidden_headers(&model.global),
            blocked_agents: model
                .global
                .blocking
                .user_agents
                .iter()
                .map(|p| map_source(p))
                .collect(),
            blocked_referers: model
                .global
                .blocking
                .referers
                .iter()
                .map(|p| map_source(p))
                .collect(),
            limits: rate_limits::zones(model),
            auth_cache: external_auth::cache_zone(model, &self.worker_path("tmp/auth_cache")),
            auth_upstreams: external_auth::upstreams(model),
            auth_relay: Self::unix(self.worker_path(options::AUTH_RELAY_SOCKET)),
            metrics: self.metrics_view(),
            ocsp_lua: self.ocsp_lua(),
            streams: streams::view(self, model),
            tls_router: streams::tls_router(self, model),
        }
    }

    /// `ferrule.ocsp`'s options (ConfigMap `enable-ocsp`): whether a responder may
    /// be local, and the nameservers its name is looked up with.
    fn ocsp_lua(&self) -> String {
        let resolvers: Vec<String> = (self.opts.resolvers.iter()).map(|r| lua_quote(r)).collect();
        format!(
            "{{ allow_local = {}, resolvers = {{{}}} }}",
            self.opts.allow_local_endpoints,
            resolvers.join(", ")
        )
    }

    fn metrics_view(&self) -> Option<MetricsMainView> {
        let m = self.opts.metrics.as_ref()?;
        let source = match self.opts.metrics_source() {
            MetricsSource::Module => "module",
            MetricsSource::Lua => "lua",
            MetricsSource::None => return None,
        };
        let (time, length, size) = (
            MetricsRender::bounds_text(&m.time_buckets),
            MetricsRender::bounds_text(&m.length_buckets),
            MetricsRender::bounds_text(&m.size_buckets),
        );
        Some(MetricsMainView {
            module: source == "module",
            zone: format!("{}m", m.zone_mib),
            init_lua: format!(
                "{{ source = {}, time = {}, length = {}, size = {} }}",
                lua_quote(source),
                lua_quote(&time),
                lua_quote(&length),
                lua_quote(&size)
            ),
            time,
            length,
            size,
        })
    }
}

#[derive(Serialize)]
pub(super) struct MainView {
    /// `limit-*`: zones, allowlists, statuses.
    limits: rate_limits::ZonesView,
    /// `auth-cache-key`: the cache of auth answers, when a location uses one.
    auth_cache: Option<external_auth::CacheZoneView>,
    /// `auth-keepalive`: the auth services reached through the relay.
    auth_upstreams: Vec<external_auth::AuthUpstreamView>,
    /// Where the relay listens (`unix:PATH`).
    auth_relay: String,
    /// `ferrule.ocsp`'s options, a Lua table (rendered with `enable-ocsp`).
    ocsp_lua: String,
    modules: Vec<String>,
    user: Option<String>,
    group: Option<String>,
    worker_processes: String,
    pid: String,
    error_log: String,
    access_log: String,
    mime_types: String,
    tmp: String,
    worker_shutdown_timeout: String,
    lua_path: String,
    backends_dict: String,
    fast_path: bool,
    location_directive: bool,
    /// The access log's format is ingress-nginx's `upstreaminfo` (the default,
    /// escaped as NGINX escapes) and the C module writes it: its
    /// `ferrule_upstreaminfo` variable, not the log module's op-by-op format.
    upstreaminfo_line: bool,
    input_header: bool,
    certificates_dict: String,
    token_file_lua: String,
    njs: bool,
    njs_dir: String,
    njs_main: String,
    njs_token_file: String,
    njs_state_dir: String,
    njs_default_cert: String,
    njs_default_key: String,
    servers_glob: String,
    api_listen: String,
    unavailable_listen: String,
    redirect_listen: String,
    unavailable_peer_lua: String,
    redirect_peer_lua: String,
    pub(super) config_version: String,
    /// `ssl_session_ticket_key`'s file (written when the ConfigMap sets a key).
    ticket_key: String,
    /// `ssl_dhparam`'s file (written when the ConfigMap names a Secret).
    dh_param: String,
    configmap: String,
    server_names_bucket: usize,
    /// `server_names_hash_max_size`.
    server_names_max: u32,
    /// `proxy_hide_header`s of every proxied location.
    hidden_headers: Vec<String>,
    /// Whether the ConfigMap's `block-*` keys refuse anyone.
    blocking: bool,
    /// ConfigMap `block-user-agents` as `map` sources.
    blocked_agents: Vec<String>,
    /// ConfigMap `block-referers` as `map` sources.
    blocked_referers: Vec<String>,
    /// `resolver` (none when empty).
    resolvers: Vec<String>,
    /// Per-request metrics, when collected.
    metrics: Option<MetricsMainView>,
    /// TCP and UDP services and the TLS router (the `stream` block), when needed.
    streams: Option<streams::StreamsView>,
    /// The TLS router (`--enable-ssl-passthrough`): the HTTPS servers listen behind it.
    tls_router: Option<streams::TlsRouterView>,
}

#[derive(Serialize)]
pub(super) struct MetricsMainView {
    /// Collected by the C module (else by Lua).
    module: bool,
    /// The zone's (or shared dict's) size.
    zone: String,
    time: String,
    length: String,
    size: String,
    /// The options of `ferrule.metrics.init`, a Lua table.
    init_lua: String,
}
