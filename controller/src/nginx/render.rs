//! Rendering the model into NGINX files with tera, and the source map that says
//! which resource produced which lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrule_model::annotations::BackendProtocol;
use ferrule_model::route;
use ferrule_model::{DEFAULT_SERVER, Location, Model, PathMatch, ResourceRef, Server, Target};
use serde::Serialize;

use super::{emit, process};

const MAIN_TEMPLATE: &str = include_str!("../../../rootfs/etc/nginx/nginx.conf.tera");
const SERVER_TEMPLATE: &str = include_str!("../../../rootfs/etc/nginx/server.conf.tera");

/// Static files written as they are, next to nginx.conf.
pub const STATIC_FILES: &[(&str, &str)] = &[
    (
        "conf/proxy-http.conf",
        include_str!("../../../rootfs/etc/nginx/proxy-http.conf"),
    ),
    (
        "conf/proxy-https.conf",
        include_str!("../../../rootfs/etc/nginx/proxy-https.conf"),
    ),
    (
        "conf/grpc.conf",
        include_str!("../../../rootfs/etc/nginx/grpc.conf"),
    ),
    (
        "conf/grpcs.conf",
        include_str!("../../../rootfs/etc/nginx/grpcs.conf"),
    ),
    (
        "conf/proxy-headers.conf",
        include_str!("../../../rootfs/etc/nginx/proxy-headers.conf"),
    ),
    (
        "conf/grpc-headers.conf",
        include_str!("../../../rootfs/etc/nginx/grpc-headers.conf"),
    ),
    (
        "conf/njs-proxy-http.conf",
        include_str!("../../../rootfs/etc/nginx/njs-proxy-http.conf"),
    ),
    (
        "conf/njs-proxy-https.conf",
        include_str!("../../../rootfs/etc/nginx/njs-proxy-https.conf"),
    ),
    (
        "conf/njs-grpc.conf",
        include_str!("../../../rootfs/etc/nginx/njs-grpc.conf"),
    ),
    (
        "conf/njs-grpcs.conf",
        include_str!("../../../rootfs/etc/nginx/njs-grpcs.conf"),
    ),
];

/// The balancer inside NGINX that picks peers and serves certificates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Balancer {
    /// `lua/` with lua-nginx-module: round robin, EWMA, consistent hash, affinity,
    /// canary; upstream keepalive and retries to the next peer.
    #[default]
    Lua,
    /// `njs/` with ngx_http_js_module, for NGINX builds without Lua: the same API
    /// and algorithms except EWMA (served as round robin), without upstream
    /// keepalive or retries to the next peer (see `njs/README.md`).
    Njs,
}

impl Balancer {
    /// The dynamic modules it needs, as file names in the modules directory.
    pub fn modules(self) -> &'static [&'static str] {
        match self {
            Balancer::Lua => &["ndk_http_module.so", "ngx_http_lua_module.so"],
            Balancer::Njs => &["ngx_http_js_module.so"],
        }
    }

    /// The most backends or certificates one API request should carry: njs keeps a
    /// request's garbage until it ends (~140 MiB for 10,000 backends at once).
    pub fn max_batch(self) -> usize {
        match self {
            Balancer::Lua => usize::MAX,
            Balancer::Njs => 1000,
        }
    }
}

/// Where the njs balancer's sources are installed (`ferrule.js` and `ferrule/`).
pub const NJS_DIR: &str = "njs";
/// The njs balancer's API token, as `{"token": "..."}` (read by `js_preload_object`).
pub const NJS_TOKEN_FILE: &str = "conf/balancer.token.json";
/// The njs balancer's state directory (written by the workers).
pub const NJS_STATE_DIR: &str = "run/ferrule-state";
/// The certificate served by the njs balancer when SNI matches nothing posted.
pub const NJS_DEFAULT_CERT: &str = "conf/default.crt";
/// The key of [`NJS_DEFAULT_CERT`] (separate: `ssl_certificate_key data:` takes it alone).
pub const NJS_DEFAULT_KEY: &str = "conf/default.key";

/// Where and how NGINX listens and finds its files.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// The NGINX prefix directory; every path below is inside it.
    pub prefix: PathBuf,
    /// Address for the proxy listeners (`*` for all).
    pub listen_address: String,
    /// Plain HTTP port.
    pub http_port: u16,
    /// HTTPS port.
    pub https_port: u16,
    /// `worker_processes`.
    pub worker_processes: String,
    /// `user` for worker processes (when NGINX starts as root).
    pub user: Option<String>,
    /// Dynamic modules to load (absolute paths).
    pub modules: Vec<String>,
    /// `namespace/name` of the controller ConfigMap, for attributing its snippets.
    pub configmap: Option<String>,
    /// The balancer inside NGINX.
    pub balancer: Balancer,
}

/// A rendered file and its source map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Contents.
    pub text: String,
    /// Line ranges (1-based, inclusive) and the resource that produced them; nested
    /// ranges are listed after the range that contains them.
    pub sources: Vec<SourceRange>,
}

/// Lines of a file produced by one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRange {
    /// First line (1-based).
    pub start: usize,
    /// Last line (inclusive).
    pub end: usize,
    /// The resource.
    pub resource: ResourceRef,
}

impl RenderedFile {
    /// The innermost resource whose lines contain `line`.
    pub fn resource_at(&self, line: usize) -> Option<&ResourceRef> {
        self.sources
            .iter()
            .filter(|r| r.start <= line && line <= r.end)
            .min_by_key(|r| r.end - r.start)
            .map(|r| &r.resource)
    }
}

/// Every generated file, keyed by its path relative to the prefix, and their version.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    files: BTreeMap<String, RenderedFile>,
    version: String,
}

impl Rendered {
    /// The configuration version: a digest of every file, which new workers answer
    /// with after a reload. A model that differs in endpoints or certificates only
    /// renders the same files, so it has the same version and needs no reload.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl std::ops::Deref for Rendered {
    type Target = BTreeMap<String, RenderedFile>;
    fn deref(&self) -> &Self::Target {
        &self.files
    }
}

impl IntoIterator for Rendered {
    type Item = (String, RenderedFile);
    type IntoIter = std::collections::btree_map::IntoIter<String, RenderedFile>;
    fn into_iter(self) -> Self::IntoIter {
        self.files.into_iter()
    }
}

/// blake3 over (path, length, text) of each file.
fn files_digest<'a>(files: impl Iterator<Item = (&'a str, &'a str)>) -> blake3::Hasher {
    let mut digest = blake3::Hasher::new();
    for (path, text) in files {
        digest.update(path.as_bytes());
        digest.update(&(text.len() as u64).to_le_bytes());
        digest.update(text.as_bytes());
    }
    digest
}

/// Stands for the version in `nginx.conf` while the digest is computed.
const VERSION_PLACEHOLDER: &str = "ferrule-config-version";

/// A rendering failure (a template bug, never a user input problem).
#[derive(Debug, thiserror::Error)]
#[error("rendering {what}: {source}")]
pub struct RenderError {
    what: String,
    #[source]
    source: tera::Error,
}

/// The template engine, with the emitter installed as the escape function.
pub struct Renderer {
    tera: tera::Tera,
    opts: RenderOptions,
    /// blake3 of the balancer's code (fixed per binary): part of every version.
    code_digest: [u8; 32],
}

impl Renderer {
    /// Loads the checked-in templates.
    pub fn new(opts: RenderOptions) -> Self {
        let mut tera = tera::Tera::default();
        tera.set_escape_fn(emit::quote_to);
        tera.autoescape_on(vec![".tera"]);
        tera.add_raw_template("nginx.conf.tera", MAIN_TEMPLATE)
            .expect("nginx.conf.tera is valid");
        tera.add_raw_template("server.conf.tera", SERVER_TEMPLATE)
            .expect("server.conf.tera is valid");
        // A new controller adopting an NGINX must reload it into new Lua or njs.
        let code = match opts.balancer {
            Balancer::Lua => super::lua::LUA_FILES,
            Balancer::Njs => super::njs::NJS_FILES,
        };
        let code_digest = *files_digest(code.iter().copied()).finalize().as_bytes();
        Self {
            tera,
            opts,
            code_digest,
        }
    }

    /// The options this renderer was built with.
    pub fn options(&self) -> &RenderOptions {
        &self.opts
    }

    /// Renders every file of the model.
    pub fn render(&self, model: &Model) -> Result<Rendered, RenderError> {
        let main = self.main_view();
        let mut out = BTreeMap::new();
        let mut ctx = tera::Context::new();
        ctx.insert("main", &main);
        ctx.insert("global", &model.global);

        let has_default = model.server(DEFAULT_SERVER).is_some();
        let implicit_default;
        let mut servers: Vec<&Server> = model.servers.iter().collect();
        if !has_default {
            implicit_default = Server {
                host: DEFAULT_SERVER.to_owned(),
                tls: None,
                owner: None,
                server_snippet: None,
                locations: Vec::new(),
            };
            servers.push(&implicit_default);
        }
        for s in servers {
            ctx.insert("s", &self.server_view(model, s));
            let text = self
                .tera
                .render("server.conf.tera", &ctx)
                .map_err(|source| RenderError {
                    what: format!("server {}", s.host),
                    source,
                })?;
            out.insert(server_file(&s.host), with_sources(text));
        }
        for (path, text) in STATIC_FILES {
            out.insert((*path).to_owned(), with_sources((*text).to_owned()));
        }
        let render_main = |ctx: &tera::Context| {
            self.tera
                .render("nginx.conf.tera", ctx)
                .map_err(|source| RenderError {
                    what: "nginx.conf".into(),
                    source,
                })
        };
        // Everything NGINX reads that this binary decides: the files, nginx.conf
        // with a placeholder for the version itself, and the balancer's code.
        let mut digest = files_digest(out.iter().map(|(p, f)| (p.as_str(), f.text.as_str())));
        digest.update(&self.code_digest);
        digest.update(render_main(&ctx)?.as_bytes());
        let version = digest.finalize().to_hex()[..32].to_owned();
        // Rendered again rather than substituted: a snippet may hold any text.
        let mut main = main;
        main.config_version = version.clone();
        ctx.insert("main", &main);
        out.insert(
            "conf/nginx.conf".to_owned(),
            with_sources(render_main(&ctx)?),
        );
        Ok(Rendered {
            files: out,
            version,
        })
    }

    fn path(&self, rel: &str) -> String {
        self.opts.prefix.join(rel).to_string_lossy().into_owned()
    }

    /// A unix socket below the prefix, as `listen` and `set_current_peer` name it.
    fn unix(&self, rel: &str) -> String {
        format!("unix:{}", self.path(rel))
    }

    fn main_view(&self) -> MainView {
        MainView {
            modules: self.opts.modules.clone(),
            user: self.opts.user.clone(),
            group: self.opts.user.as_ref().map(|_| "nogroup".to_owned()),
            worker_processes: self.opts.worker_processes.clone(),
            pid: self.path(process::PID_FILE),
            error_log: self.path("logs/error.log"),
            access_log: self.path("logs/access.log"),
            mime_types: "/etc/nginx/mime.types".to_owned(),
            tmp: self.path("tmp"),
            worker_shutdown_timeout: "240s".to_owned(),
            lua_path: format!("{}/?.lua;;", self.path("lua")),
            backends_dict: "128m".to_owned(),
            certificates_dict: "32m".to_owned(),
            token_file_lua: lua_quote(&self.path("conf/balancer.token")),
            njs: self.opts.balancer == Balancer::Njs,
            njs_dir: self.path(NJS_DIR),
            njs_main: self.path(&format!("{NJS_DIR}/ferrule.js")),
            njs_token_file: self.path(NJS_TOKEN_FILE),
            // `js_var` expands variables in its value: a `$` in the prefix is literal.
            njs_state_dir: literal_in_variables(&self.path(NJS_STATE_DIR)),
            njs_default_cert: literal_in_variables(&self.path(NJS_DEFAULT_CERT)),
            njs_default_key: literal_in_variables(&self.path(NJS_DEFAULT_KEY)),
            servers_glob: self.path("conf/servers/*.conf"),
            api_listen: self.unix(process::API_SOCKET),
            unavailable_listen: self.unix(process::UNAVAILABLE_SOCKET),
            redirect_listen: self.unix(process::REDIRECT_SOCKET),
            unavailable_peer_lua: lua_quote(&self.unix(process::UNAVAILABLE_SOCKET)),
            redirect_peer_lua: lua_quote(&self.unix(process::REDIRECT_SOCKET)),
            config_version: VERSION_PLACEHOLDER.to_owned(),
            configmap: configmap_source(self.opts.configmap.as_deref()),
        }
    }

    fn server_view(&self, model: &Model, s: &Server) -> ServerView {
        let is_default = s.host == DEFAULT_SERVER;
        // Nothing here depends on whether the host has TLS: the balancer serves its
        // certificate by SNI and decides the ssl-redirect per request, so TLS coming
        // or going needs no reload. The default certificate is the static fallback.
        let cert = self.path(DEFAULT_CERTIFICATE);
        let tls_host = (!is_default).then_some(s.host.as_str());
        let mut locations = Vec::new();
        let exact: std::collections::HashSet<&str> = s
            .locations
            .iter()
            .filter(|l| l.path_match == PathMatch::Exact)
            .map(|l| l.path.as_str())
            .collect();
        let mut has_root = false;
        for l in &s.locations {
            match l.path_match {
                PathMatch::Exact => locations.push(location_view(model, l, "=", &l.path, tls_host)),
                PathMatch::Regex => locations.push(location_view(
                    model,
                    l,
                    "~",
                    &format!("^{}", l.path),
                    tls_host,
                )),
                PathMatch::Prefix if l.path == "/" => {
                    has_root = true;
                    locations.push(location_view(model, l, "", "/", tls_host));
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
            .filter(|l| l.modifier != "~")
            .map(|l| l.path.as_str())
            .collect();
        let mut twins = Vec::new();
        for l in &s.locations {
            let Some(bare) = l.path.strip_suffix('/') else {
                continue;
            };
            if l.path_match != PathMatch::Exact || bare.is_empty() || named.contains(bare) {
                continue;
            }
            let mut twin = match route::location_for(s, bare) {
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
        if self.opts.balancer == Balancer::Njs {
            // Every Lua include `X` has its njs twin `njs-X` (same headers, the peer
            // from `$ferrule_peer`); the location view stays balancer-neutral.
            for l in locations.iter_mut().filter(|l| !l.include.is_empty()) {
                l.include = format!("njs-{}", l.include);
            }
        }
        let listen = |port: u16| match self.opts.listen_address.as_str() {
            "*" | "" => port.to_string(),
            a if a.contains(':') => format!("[{a}]:{port}"),
            a => format!("{a}:{port}"),
        };
        ServerView {
            host: s.host.clone(),
            server_name: server_name(&s.host),
            default: is_default,
            owner: s
                .owner
                .as_ref()
                .map(source)
                .unwrap_or_else(|| "Controller".to_owned()),
            listen_http: listen(self.opts.http_port),
            listen_https: listen(self.opts.https_port),
            cert,
            server_snippet: s.server_snippet.as_ref().map(|s| s.0.clone()),
            locations,
        }
    }
}

/// The default certificate's file (certificate and key in one PEM, mode 0600).
pub const DEFAULT_CERTIFICATE: &str = "conf/certs/default.pem";

/// A value for a directive that expands variables (`set`): a literal `$` is written
/// as `${ferrule_dollar}` (defined in nginx.conf as a literal `$`), so that a name
/// can never read a variable (e.g. a request header choosing the backend).
fn literal_in_variables(value: &str) -> String {
    value.replace('$', "${ferrule_dollar}")
}

/// The file of a server: hosts are validated DNS names, `*` becomes `_wildcard_`.
pub fn server_file(host: &str) -> String {
    if host == DEFAULT_SERVER {
        "conf/servers/default.conf".to_owned()
    } else {
        format!("conf/servers/host_{}.conf", host.replace('*', "_wildcard_"))
    }
}

/// NGINX `server_name`: exact names as they are; a wildcard becomes a regular
/// expression matching exactly one label (NGINX's own `*.` matches several).
fn server_name(host: &str) -> String {
    if host == DEFAULT_SERVER {
        return "_".to_owned();
    }
    match host.strip_prefix("*.") {
        Some(rest) => format!("~^[^.]+\\.{}$", rest.replace('.', "\\.")),
        None => host.to_owned(),
    }
}

fn source(r: &ResourceRef) -> String {
    format!("{}/{}/{}", r.kind, r.namespace, r.name)
}

fn configmap_source(cm: Option<&str>) -> String {
    let (ns, name) = cm
        .and_then(|c| c.split_once('/'))
        .unwrap_or(("", "configmap"));
    format!("ConfigMap/{ns}/{name}")
}

fn location_view(
    model: &Model,
    l: &Location,
    modifier: &str,
    path: &str,
    tls_host: Option<&str>,
) -> LocationView {
    let st = &l.settings;
    let (backend, status, include) = target_view(model, &l.target, st.backend_protocol);
    let ewma = feeds_ewma(model, &l.target);
    LocationView {
        source: source(&l.owner),
        modifier: modifier.to_owned(),
        path: path.to_owned(),
        force_redirect: st.force_ssl_redirect,
        // The balancer redirects when this host has a certificate posted.
        redirect_host: (st.ssl_redirect && !st.force_ssl_redirect)
            .then_some(tls_host)
            .flatten()
            .map(literal_in_variables),
        ewma,
        // The affinity cookie's Path where the annotation sets none (ingress-nginx:
        // the Ingress path), in every location with a backend: its backend may gain
        // affinity or a canary without a reload.
        cookie_path: backend.is_some().then(|| {
            literal_in_variables(match l.path_match {
                PathMatch::Regex => "/",
                _ => &l.path,
            })
        }),
        // Canary and affinity are decided in the balancer phase: only these need
        // the rewrite phase.
        rewrite_phase: backend.is_some()
            && (st.backend_protocol != BackendProtocol::Http
                || st.rewrite_target.is_some()
                || st.configuration_snippet.is_some()),
        body_size: st.proxy_body_size.clone(),
        connect_timeout: st.proxy_connect_timeout.map(|s| format!("{s}s")),
        read_timeout: st.proxy_read_timeout.map(|s| format!("{s}s")),
        send_timeout: st.proxy_send_timeout.map(|s| format!("{s}s")),
        rewrite_from: match l.path_match {
            PathMatch::Regex => format!("^{}", l.path),
            _ => format!("^{}", regex_escape(&l.path)),
        },
        rewrite: st.rewrite_target.clone(),
        snippet: st.configuration_snippet.as_ref().map(|s| s.0.clone()),
        backend,
        status,
        include,
    }
}

fn default_location(model: &Model) -> LocationView {
    let (backend, status, include) =
        target_view(model, &model.default_backend, BackendProtocol::Http);
    // The default backend may be a rule's backend too, with its canary or affinity.
    let ewma = feeds_ewma(model, &model.default_backend);
    LocationView {
        source: "Controller/default-backend/".to_owned(),
        path: "/".to_owned(),
        cookie_path: backend.is_some().then(|| "/".to_owned()),
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

fn target_view(model: &Model, t: &Target, proto: BackendProtocol) -> (Option<String>, u16, String) {
    let include = match proto {
        BackendProtocol::Http => "proxy-http.conf",
        BackendProtocol::Https => "proxy-https.conf",
        BackendProtocol::Grpc => "grpc.conf",
        BackendProtocol::Grpcs => "grpcs.conf",
    };
    match t {
        Target::Backend(name) if model.backends.contains_key(name) => {
            (Some(literal_in_variables(name)), 0, include.to_owned())
        }
        Target::Backend(_) => (None, 503, String::new()),
        Target::Status(s) => (None, *s, String::new()),
    }
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A Lua string literal (for values inside `*_by_lua_block`).
fn lua_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c)
            }
            c if c.is_control() => out.push_str(&format!("\\{}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Turns `# ferrule:begin "X"` / `# ferrule:end` markers into a source map.
fn with_sources(text: String) -> RenderedFile {
    let mut sources = Vec::new();
    let mut stack: Vec<(usize, ResourceRef)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("# ferrule:begin ") {
            let id = rest.trim().trim_matches('"');
            let mut parts = id.splitn(3, '/');
            let (kind, ns, name) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            stack.push((line_no, ResourceRef::new(kind, ns, name)));
        } else if t.starts_with("# ferrule:end")
            && let Some((start, resource)) = stack.pop()
        {
            sources.push(SourceRange {
                start,
                end: line_no,
                resource,
            });
        }
    }
    let last = text.lines().count();
    for (start, resource) in stack.into_iter().rev() {
        sources.push(SourceRange {
            start,
            end: last,
            resource,
        });
    }
    sources.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    RenderedFile { text, sources }
}

/// The absolute path of a rendered file.
pub fn absolute(prefix: &Path, rel: &str) -> PathBuf {
    prefix.join(rel)
}

#[derive(Serialize)]
struct MainView {
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
    config_version: String,
    configmap: String,
}

#[derive(Serialize)]
struct ServerView {
    host: String,
    server_name: String,
    default: bool,
    owner: String,
    listen_http: String,
    listen_https: String,
    cert: String,
    server_snippet: Option<String>,
    locations: Vec<LocationView>,
}

#[derive(Serialize, Default)]
struct LocationView {
    source: String,
    modifier: String,
    path: String,
    /// `force-ssl-redirect`: static.
    force_redirect: bool,
    /// `ssl-redirect`: the server's host, for the balancer's per-request decision.
    redirect_host: Option<String>,
    /// Whether the location runs the log phase (EWMA statistics).
    ewma: bool,
    /// Whether the location runs `rewrite()` for every request (the template ignores
    /// it for njs; elsewhere only requests with a body run it). Elsewhere balance()
    /// alone routes, canary and affinity included, answering the 503 and the
    /// ssl-redirect through NGINX's own servers: the rewrite phase costs every
    /// request about 4 % of throughput. Kept for other protocols than HTTP (the
    /// answering servers speak HTTP/1.1), for rewrite-target (the redirect must carry
    /// the URI before the rewrite) and where snippets may add access checks.
    rewrite_phase: bool,
    /// `$ferrule_cookie_path` (every location with a backend).
    cookie_path: Option<String>,
    body_size: Option<String>,
    connect_timeout: Option<String>,
    read_timeout: Option<String>,
    send_timeout: Option<String>,
    rewrite_from: String,
    rewrite: Option<String>,
    snippet: Option<String>,
    backend: Option<String>,
    status: u16,
    include: String,
}

#[cfg(test)]
mod tests {
    //! Snapshots of rendered configuration for representative models (reviewed with
    //! `cargo insta review`), and proof that hostile values cannot escape their token.

    use std::collections::BTreeMap;

    use ferrule_model::{Settings, Severity, Snapshot, objects};
    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::*;

    const CONFIGMAP: (&str, &str) = ("ingress-nginx", "ferrule");

    /// A model from YAML documents (`watch_without_class`, so no IngressClass needed).
    fn model_with(yaml: &str, settings: Settings) -> Model {
        let mut snap = Snapshot {
            settings: Settings {
                watch_without_class: true,
                ..settings
            },
            ..Snapshot::default()
        };
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let v = Value::deserialize(doc).expect("valid YAML");
            if !v.is_null() {
                objects::add(&mut snap, v, Some(CONFIGMAP)).expect("valid object");
            }
        }
        ferrule_model::build(&snap)
    }

    /// A model (with [`SERVICES`]) whose only errors are the `expected` ones.
    fn model_expecting(yaml: &str, settings: Settings, expected: &[&str]) -> Model {
        let m = model_with(&format!("{SERVICES}\n---\n{yaml}"), settings);
        let errors: Vec<&str> = m
            .problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(errors.len(), expected.len(), "problems: {errors:#?}");
        for (e, want) in errors.iter().zip(expected) {
            assert!(e.contains(want), "{e:?} does not mention {want:?}");
        }
        m
    }

    /// A model (with [`SERVICES`]) that must build without errors.
    fn model(yaml: &str, settings: Settings) -> Model {
        model_expecting(yaml, settings, &[])
    }

    fn opts(prefix: &str) -> RenderOptions {
        RenderOptions {
            prefix: PathBuf::from(prefix),
            listen_address: "*".to_owned(),
            http_port: 80,
            https_port: 443,
            worker_processes: "auto".to_owned(),
            user: None,
            modules: Vec::new(),
            configmap: Some(format!("{}/{}", CONFIGMAP.0, CONFIGMAP.1)),
            balancer: Balancer::Lua,
        }
    }

    /// Every server file of the model, rendered with prefix `/ferrule`.
    fn servers(model: &Model) -> String {
        let rendered = Renderer::new(opts("/ferrule")).render(model).unwrap();
        rendered
            .iter()
            .filter(|(path, _)| path.starts_with("conf/servers/"))
            .map(|(path, f)| format!("#### {path}\n{}", f.text))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Services `app` and `canary` in namespace `demo` with one ready endpoint each.
    const SERVICES: &str = r#"
apiVersion: v1
kind: Service
metadata: { name: app, namespace: demo }
spec: { ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: app-1, namespace: demo, labels: { kubernetes.io/service-name: app } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: ["10.0.0.1"], conditions: { ready: true } }]
---
apiVersion: v1
kind: Service
metadata: { name: canary, namespace: demo }
spec: { ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: canary-1, namespace: demo, labels: { kubernetes.io/service-name: canary } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: ["10.0.0.2"], conditions: { ready: true } }]
"#;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../model/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn simple_host() {
        let m = model_expecting(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: web, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: web.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /api/, pathType: Prefix, backend: { service: { name: app, port: { name: http } } } }
      - { path: /healthz, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /docs/, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /gone, pathType: Prefix, backend: { service: { name: missing, port: { number: 80 } } } }
"#,
            Settings::default(),
            &["missing"],
        );
        insta::assert_snapshot!(servers(&m));
    }

    #[test]
    fn the_log_phase_only_where_ewma_is_used() {
        let ingress = |name: &str, host: &str, lb: &str| {
            format!(
                r#"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {{ nginx.ingress.kubernetes.io/load-balance: {lb} }}
spec:
  rules:
  - host: {host}
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: {name}, port: {{ number: 80 }} }} }} }}
"#
            )
        };
        let m = model(
            &format!(
                "{SERVICES}{}{}",
                ingress("app", "ewma.example.com", "ewma"),
                ingress("canary", "rr.example.com", "round_robin")
            ),
            Settings::default(),
        );
        let rendered = Renderer::new(opts("/ferrule")).render(&m).unwrap();
        let log_phases = |host: &str| {
            rendered[&server_file(host)]
                .text
                .matches("log_by_lua_block")
                .count()
        };
        assert_eq!(log_phases("ewma.example.com"), 1);
        assert_eq!(log_phases("rr.example.com"), 0);
        let includes = rendered
            .values()
            .map(|f| f.text.matches("log_by_lua").count())
            .sum::<usize>();
        assert_eq!(includes, 1, "nowhere else, not in nginx.conf");
    }

    #[test]
    fn the_rewrite_phase_only_where_the_balancer_phase_is_too_late() {
        // (annotations of the Ingress on h.example.com, extra documents, rewrite
        // phases wanted in its file (`/` is one location) and in all other files)
        let check = |annotations: &str, extra: &str, want: usize, want_elsewhere: usize| {
            let m = model(
                &format!(
                    r#"{SERVICES}{extra}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {{ {annotations} }}
spec:
  rules:
  - host: h.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
"#
                ),
                Settings {
                    allow_snippet_annotations: true,
                    ..Settings::default()
                },
            );
            for (balancer, want, want_elsewhere) in
                [(Balancer::Lua, want, want_elsewhere), (Balancer::Njs, 0, 0)]
            {
                let rendered = Renderer::new(RenderOptions {
                    balancer,
                    ..opts("/ferrule")
                })
                .render(&m)
                .unwrap();
                // (every request, only requests with a body)
                let phases = |text: &str| {
                    let lines = || text.lines().map(str::trim_start);
                    (
                        lines().filter(|l| l.starts_with("rewrite_by_lua")).count(),
                        lines()
                            .filter(|l| {
                                l.starts_with("if ($ferrule_request_body) { rewrite_by_lua")
                            })
                            .count(),
                    )
                };
                let host = &rendered[&server_file("h.example.com")].text;
                // the one location has the phase either always or for bodies
                let lua = usize::from(balancer == Balancer::Lua);
                assert_eq!(
                    phases(host),
                    (want, lua - want),
                    "{balancer:?}, annotations {{ {annotations} }}"
                );
                let elsewhere = rendered
                    .iter()
                    .filter(|(f, _)| *f != &server_file("h.example.com"))
                    .map(|(_, r)| phases(&r.text).0)
                    .sum::<usize>();
                assert_eq!(elsewhere, want_elsewhere, "{balancer:?}: other files");
            }
        };
        const P: &str = "nginx.ingress.kubernetes.io";
        check("", "", 0, 0);
        check(&format!("{P}/load-balance: ewma"), "", 0, 0);
        check(&format!("{P}/upstream-hash-by: $remote_addr"), "", 0, 0);
        // canary and affinity are decided in the balancer phase
        check(&format!("{P}/affinity: cookie"), "", 0, 0);
        check(&format!("{P}/rewrite-target: /x"), "", 1, 0);
        check(&format!("{P}/backend-protocol: HTTPS"), "", 1, 0);
        check(&format!("{P}/backend-protocol: GRPC"), "", 1, 0);
        let snippet = format!("{P}/configuration-snippet: 'auth_basic on;'");
        check(&snippet, "", 1, 0);
        check(&format!("{P}/server-snippet: 'auth_basic on;'"), "", 1, 0);
        // The same backend as the catch-all's default: its location needs it too.
        let default_backend = r#"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: catch-all
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
spec:
  defaultBackend: { service: { name: app, port: { number: 80 } } }
"#;
        check("", default_backend, 0, 0);
        check(&format!("{P}/affinity: cookie"), default_backend, 0, 0);
        let canary = r#"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: canary
  namespace: demo
  creationTimestamp: "2026-01-02T00:00:00Z"
  annotations: { nginx.ingress.kubernetes.io/canary: "true", nginx.ingress.kubernetes.io/canary-weight: "10" }
spec:
  rules:
  - host: h.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#;
        check("", canary, 0, 0);
        let location_snippet = r#"
---
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: ingress-nginx }
data: { location-snippet: "auth_basic on;" }
"#;
        check("", location_snippet, 1, 0);
    }

    /// A TLS host proxying over HTTPS with proxy settings, a gRPC host, a forced
    /// redirect.
    fn tls_and_protocols() -> String {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": "a-tls", "namespace": "demo" },
            "stringData": { "tls.crt": fixture("a.crt"), "tls.key": fixture("a.key") },
        });
        format!(
            r#"{secret}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: secure
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/proxy-body-size: 8m
    nginx.ingress.kubernetes.io/proxy-connect-timeout: "5"
    nginx.ingress.kubernetes.io/proxy-read-timeout: "120s"
    nginx.ingress.kubernetes.io/proxy-send-timeout: "30"
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
spec:
  tls: [{{ hosts: [a.example.com], secretName: a-tls }}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: grpc
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: GRPC
    nginx.ingress.kubernetes.io/ssl-redirect: "false"
    nginx.ingress.kubernetes.io/force-ssl-redirect: "false"
spec:
  rules:
  - host: grpc.example.com
    http:
      paths:
      - {{ path: /pkg.Service, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: forced
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/force-ssl-redirect: "true"
spec:
  rules:
  - host: forced.example.com
    http:
      paths:
      - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: app, port: {{ number: 80 }} }} }} }}
"#
        )
    }

    #[test]
    fn tls_host_with_proxy_settings() {
        let m = model(&tls_and_protocols(), Settings::default());
        insta::assert_snapshot!(servers(&m));
    }

    const REWRITE: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
spec:
  rules:
  - host: rw.example.com
    http:
      paths:
      - { path: "/api(/|$)(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
"#;

    /// The njs balancer: its contract in nginx.conf, certificates from `data:`
    /// variables, the peer checked before any rewrite, the njs includes.
    #[test]
    fn njs_balancer() {
        let m = model(
            &format!("{}\n---\n{REWRITE}", tls_and_protocols()),
            Settings::default(),
        );
        let mut o = opts("/ferrule");
        o.balancer = Balancer::Njs;
        o.modules = vec!["/usr/lib/nginx/modules/ngx_http_js_module.so".to_owned()];
        let rendered = Renderer::new(o).render(&m).unwrap();
        let text = rendered
            .iter()
            .filter(|(p, _)| *p == "conf/nginx.conf" || p.starts_with("conf/servers/"))
            .map(|(p, f)| {
                format!(
                    "#### {p}\n{}",
                    f.text.replace(rendered.version(), "<config-version>")
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn wildcard_and_exact_hosts() {
        let m = model(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: wild, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: "*.foo.example.com"
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
  - host: bar.foo.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
            Settings::default(),
        );
        insta::assert_snapshot!(servers(&m));
    }

    #[test]
    fn regex_and_rewrite() {
        let m = model(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/use-regex: "true"
    nginx.ingress.kubernetes.io/rewrite-target: /$2
spec:
  rules:
  - host: rewrite.example.com
    http:
      paths:
      - { path: "/something(/|$)(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: "/v[0-9]+/(.*)", pathType: ImplementationSpecific, backend: { service: { name: app, port: { number: 80 } } } }
      - { path: /exact, pathType: Exact, backend: { service: { name: app, port: { number: 80 } } } }
"#,
            Settings::default(),
        );
        insta::assert_snapshot!(servers(&m));
    }

    #[test]
    fn canary() {
        let m = model(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: main, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: main-canary
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:01Z"
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-weight: "20"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
            Settings::default(),
        );
        // The canary adds no location: the split happens in the balancer.
        let canary = m.backends["demo_app_80"].balancing.canary.as_ref();
        assert_eq!(canary.map(|c| c.backend.as_str()), Some("demo_canary_80"));
        insta::assert_snapshot!(servers(&m));
    }

    #[test]
    fn snippets_enabled() {
        let m = model(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: ingress-nginx }
data:
  http-snippet: "map $http_x_tenant $tenant { default none; }"
  server-snippet: "add_header X-Server-Snippet on;"
  location-snippet: "add_header X-Location-Snippet on;"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: snippets
  namespace: demo
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    nginx.ingress.kubernetes.io/server-snippet: |
      location = /server-snippet { return 204; }
    nginx.ingress.kubernetes.io/configuration-snippet: |
      more_set_headers "X-Config: on";
      add_header X-Config-Snippet on;
spec:
  rules:
  - host: snippets.example.com
    http:
      paths:
      - { path: /, pathType: Prefix, backend: { service: { name: app, port: { number: 80 } } } }
"#,
            Settings {
                allow_snippet_annotations: true,
                ..Settings::default()
            },
        );
        let rendered = Renderer::new(opts("/ferrule")).render(&m).unwrap();
        let main = &rendered["conf/nginx.conf"].text;
        let http_snippet = main
            .lines()
            .skip_while(|l| !l.contains("ConfigMap http-snippet"))
            .take(4)
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(format!(
            "#### conf/nginx.conf (http-snippet)\n{http_snippet}\n{}",
            servers(&m)
        ));
    }

    #[test]
    fn default_backend() {
        let m = model(
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: catch-all, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  defaultBackend: { service: { name: app, port: { number: 80 } } }
  rules:
  - http:
      paths:
      - { path: /api, pathType: Prefix, backend: { service: { name: canary, port: { number: 80 } } } }
"#,
            Settings::default(),
        );
        insta::assert_snapshot!(servers(&m));
        // Without any Ingress: the implicit default server answers 404.
        insta::assert_snapshot!("no_ingress", servers(&model("", Settings::default())));
    }

    /// The version NGINX answers with names what it read: a model that differs in
    /// endpoints only renders the same files and the same version (no reload).
    #[test]
    fn the_version_follows_the_files_not_the_endpoints() {
        let r = Renderer::new(opts("/ferrule"));
        let m = model(&tls_and_protocols(), Settings::default());
        let mut moved = m.clone();
        for b in moved.backends.values_mut() {
            std::sync::Arc::make_mut(b).endpoints.clear();
        }
        assert_ne!(m.hash(), moved.hash());
        let (a, b) = (r.render(&m).unwrap(), r.render(&moved).unwrap());
        assert_eq!(a.version(), b.version());
        let nginx_conf = &a["conf/nginx.conf"].text;
        assert!(
            nginx_conf.contains(&format!("return 200 \"{}\";", a.version())),
            "{nginx_conf}"
        );
        let mut other = m.clone();
        std::sync::Arc::make_mut(&mut other.servers)[0]
            .locations
            .pop();
        assert_ne!(r.render(&other).unwrap().version(), a.version());
    }

    #[test]
    fn main_config() {
        let m = model("", Settings::default());
        let mut o = opts("/ferrule");
        o.user = Some("nobody".to_owned());
        o.modules = vec!["/usr/lib/nginx/modules/ngx_http_lua_module.so".to_owned()];
        let rendered = Renderer::new(o).render(&m).unwrap();
        let text = rendered["conf/nginx.conf"]
            .text
            .replace(rendered.version(), "<config-version>");
        insta::assert_snapshot!(text);
    }

    // ---------------------------------------------------------------------------
    // Hostile values.

    /// The same files (server files are named by host) with the same structure: no
    /// directive, block or parameter was added, removed or ended early.
    fn assert_same_structure(h: &BTreeMap<String, String>, b: &BTreeMap<String, String>) {
        assert_eq!(h.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (path, text) in h {
            assert_eq!(
                skeleton(text),
                skeleton(&b[path]),
                "{path}: structure differs\n{text}"
            );
        }
    }

    /// The structure NGINX parses from a configuration: one entry per directive
    /// (`depth name argc`), following `ngx_conf_read_token` (comments start only where
    /// a token starts; quotes only at the start of a token, with backslash escapes).
    /// Bodies of `*_by_lua_block` directives are Lua, skipped by brace counting.
    fn skeleton(conf: &str) -> Vec<String> {
        let b = conf.as_bytes();
        let (mut i, mut depth) = (0, 0usize);
        let mut out = Vec::new();
        let mut words: Vec<String> = Vec::new();
        while i < b.len() {
            let c = b[i];
            match c {
                b' ' | b'\t' | b'\r' | b'\n' => i += 1,
                b'#' => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                b';' | b'{' | b'}' => {
                    if c == b'}' {
                        assert!(words.is_empty(), "unterminated directive {words:?}");
                        depth = depth.checked_sub(1).expect("unbalanced }");
                    } else {
                        let name = words.first().cloned().unwrap_or_default();
                        out.push(format!("{depth} {name} {}", words.len() - 1));
                        words.clear();
                        if c == b'{' {
                            if name.ends_with("_by_lua_block") {
                                let mut level = 1;
                                while level > 0 {
                                    i += 1;
                                    match b[i] {
                                        b'{' => level += 1,
                                        b'}' => level -= 1,
                                        _ => {}
                                    }
                                }
                            } else {
                                depth += 1;
                            }
                        }
                    }
                    i += 1;
                }
                b'"' | b'\'' => {
                    let mut w = String::new();
                    i += 1;
                    while b[i] != c {
                        if b[i] == b'\\' {
                            i += 1;
                        }
                        w.push(b[i] as char);
                        i += 1;
                    }
                    i += 1;
                    // NGINX also accepts `)` there, as in `if ($x = "")`.
                    assert!(
                        i >= b.len() || b" \t\r\n;{)".contains(&b[i]),
                        "a quoted token must be followed by a separator at byte {i}"
                    );
                    words.push(w);
                }
                _ => {
                    let mut w = String::new();
                    while i < b.len() && !b" \t\r\n;{}".contains(&b[i]) {
                        if b[i] == b'\\' {
                            i += 1;
                        }
                        w.push(b[i] as char);
                        i += 1;
                    }
                    words.push(w);
                }
            }
        }
        assert_eq!(depth, 0, "unbalanced blocks");
        out
    }

    #[test]
    fn skeleton_sees_injected_directives() {
        let ok = "server { listen \"80\"; }";
        let injected = "server { listen \"80\"; } server { listen 81; }";
        assert_eq!(skeleton(ok), vec!["0 server 0", "1 listen 1"]);
        assert_ne!(skeleton(ok), skeleton(injected));
        assert_eq!(skeleton("a \"x;}\\\"#\" b#c;"), vec!["0 a 2"]);
    }

    /// Hostile strings in every user-controlled place that reaches a file, each with a
    /// benign twin of the same role.
    struct Values {
        ns: &'static str,
        ingress: &'static str,
        service: &'static str,
        port: &'static str,
        secret: &'static str,
        regex_path: &'static str,
        rewrite: &'static str,
    }

    const HOSTILE: Values = Values {
        // No control character here: the model refuses a backend name with one (the
        // balancer API would), and the namespace is part of the backend's name. The
        // Ingress and Secret names keep their newlines.
        ns: "demo\";} server{listen 1;}#",
        ingress: "evil\";\n} server { listen 2; }\n# x",
        service: "svc\";}server{listen 3;}#$http_x_pick",
        port: "http\";}#",
        secret: "tls\";}\nssl_certificate x;#",
        regex_path: "/r\";}server{return(200);#(.*)",
        rewrite: "/$1#frag",
    };

    const BENIGN: Values = Values {
        ns: "demo",
        ingress: "nice",
        service: "svc",
        port: "http",
        secret: "tls",
        regex_path: "/r/(.*)",
        rewrite: "/$1",
    };

    fn world(v: &Values) -> String {
        let docs = [
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": v.service, "namespace": v.ns },
                "spec": { "ports": [{ "name": v.port, "port": 80, "targetPort": 8080 }] },
            }),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "name": "s-1", "namespace": v.ns,
                    "labels": { "kubernetes.io/service-name": v.service },
                },
                "addressType": "IPv4",
                "ports": [{ "name": v.port, "port": 8080 }],
                "endpoints": [{ "addresses": ["10.0.0.1"], "conditions": { "ready": true } }],
            }),
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": { "name": v.secret, "namespace": v.ns },
                "stringData": { "tls.crt": fixture("a.crt"), "tls.key": fixture("a.key") },
            }),
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {
                    "name": v.ingress, "namespace": v.ns,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {
                    "tls": [{ "hosts": ["a.example.com"], "secretName": v.secret }],
                    "rules": [{ "host": "a.example.com", "http": { "paths": [
                        { "path": "/p", "pathType": "Prefix",
                          "backend": { "service": { "name": v.service, "port": { "name": v.port } } } },
                        { "path": "/x", "pathType": "Exact",
                          "backend": { "service": { "name": v.service, "port": { "number": 80 } } } },
                    ] } }],
                },
            }),
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {
                    "name": "regex", "namespace": v.ns,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "annotations": {
                        "nginx.ingress.kubernetes.io/use-regex": "true",
                        "nginx.ingress.kubernetes.io/rewrite-target": v.rewrite,
                    },
                },
                "spec": { "rules": [{ "host": "b.example.com", "http": { "paths": [
                    { "path": v.regex_path, "pathType": "ImplementationSpecific",
                      "backend": { "service": { "name": v.service, "port": { "number": 80 } } } },
                ] } }] },
            }),
        ];
        docs.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    #[test]
    fn hostile_annotations_and_hosts_are_rejected_at_parse_time() {
        let cases: &[(&str, &str)] = &[
            ("proxy-body-size", "1m; return 200 \"x\""),
            ("proxy-read-timeout", "5;}"),
            ("rewrite-target", "/x; return 200"),
            ("rewrite-target", "/x\"}"),
            ("rewrite-target", "/x\n}"),
            ("session-cookie-name", "a;b"),
        ];
        for (key, value) in cases {
            let ing = json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {
                    "name": "bad", "namespace": "demo",
                    "annotations": { format!("nginx.ingress.kubernetes.io/{key}"): value },
                },
                "spec": { "rules": [{ "host": "bad.example.com", "http": { "paths": [
                    { "path": "/", "pathType": "Prefix",
                      "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
                ] } }] },
            });
            let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
            assert!(
                m.problems
                    .iter()
                    .any(|p| p.severity == Severity::Error && p.message.contains(key)),
                "{key}: {value:?} accepted: {:#?}",
                m.problems
            );
            assert!(m.server("bad.example.com").is_none(), "{key}: {value:?}");
        }
        for host in [
            "a.test;", "a.test}", "a\".test", "a test", "a.test\n", "#a.test",
        ] {
            let ing = json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": { "name": "bad", "namespace": "demo" },
                "spec": { "rules": [{ "host": host, "http": { "paths": [
                    { "path": "/", "pathType": "Prefix",
                      "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
                ] } }] },
            });
            let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
            assert_eq!(m.servers.len(), 0, "host {host:?} accepted");
        }
        for path in ["/a;b", "/a{", "/a}", "/a\"", "/a b", "/a\nb", "/a\\"] {
            let ing = json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": { "name": "bad", "namespace": "demo" },
                "spec": { "rules": [{ "host": "p.example.com", "http": { "paths": [
                    { "path": path, "pathType": "Prefix",
                      "backend": { "service": { "name": "app", "port": { "number": 80 } } } },
                ] } }] },
            });
            let m = model_with(&format!("{SERVICES}\n---\n{ing}"), Settings::default());
            assert!(m.servers.is_empty(), "path {path:?} accepted");
        }
    }

    /// Everything rendered for a model, as (path, text), certificates excluded.
    fn render_all(model: &Model, prefix: &Path, balancer: Balancer) -> BTreeMap<String, String> {
        let mut o = opts(&prefix.to_string_lossy());
        o.balancer = balancer;
        Renderer::new(o)
            .render(model)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.text))
            .collect()
    }

    #[tokio::test]
    async fn hostile_values_cannot_escape_their_token() {
        let hostile = model_with(&world(&HOSTILE), Settings::default());
        let benign = model_with(&world(&BENIGN), Settings::default());
        // Both build the same thing: 2 servers, a backend, a certificate, no errors.
        for m in [&hostile, &benign] {
            let errors: Vec<_> = m
                .problems
                .iter()
                .filter(|p| p.severity == Severity::Error)
                .collect();
            assert!(errors.is_empty(), "{errors:#?}");
            assert_eq!(m.servers.len(), 2);
            assert_eq!(m.backends.len(), 2, "by port name and by number");
            assert_eq!(m.certificates.len(), 1);
        }
        let dir = tempfile::tempdir().unwrap();
        let (h, b) = (
            render_all(&hostile, dir.path(), Balancer::Lua),
            render_all(&benign, dir.path(), Balancer::Lua),
        );
        assert_same_structure(&h, &b);
        // The hostile strings are there, but only quoted.
        let host_file = &h[&server_file("a.example.com")];
        assert!(
            host_file.contains(r#"demo\";} server{listen 1;}#"#),
            "{host_file}"
        );
        assert!(!host_file.contains("server{listen 1;}#\n"));
        // A `$` in a name never reads a variable where NGINX expands them.
        assert!(
            host_file.contains("#${ferrule_dollar}http_x_pick_"),
            "{host_file}"
        );
        assert!(!host_file.contains("#$http_x_pick"), "{host_file}");

        // And NGINX accepts it.
        if which_nginx().is_none() {
            eprintln!("nginx not installed: skipping nginx -t");
            return;
        }
        let out = nginx_test(&hostile, dir.path(), Balancer::Lua).await;
        assert!(out.is_ok(), "nginx -t failed: {out:?}");
    }

    /// In njs mode too, hostile values stay in their token, and NGINX (with the js
    /// module) accepts the configuration with every backend protocol.
    #[tokio::test]
    async fn njs_configuration_is_quoted_and_passes_nginx_t() {
        let hostile = model_with(&world(&HOSTILE), Settings::default());
        let benign = model_with(&world(&BENIGN), Settings::default());
        let dir = tempfile::tempdir().unwrap();
        let h = render_all(&hostile, dir.path(), Balancer::Njs);
        let b = render_all(&benign, dir.path(), Balancer::Njs);
        assert_same_structure(&h, &b);
        let host_file = &h[&server_file("a.example.com")];
        assert!(
            host_file.contains("#${ferrule_dollar}http_x_pick_"),
            "{host_file}"
        );
        if which_nginx().is_none()
            || !Path::new("/usr/lib/nginx/modules/ngx_http_js_module.so").exists()
        {
            eprintln!("nginx or its js module not installed: skipping nginx -t");
            return;
        }
        let out = nginx_test(&hostile, dir.path(), Balancer::Njs).await;
        assert!(out.is_ok(), "nginx -t failed: {out:?}");
        let protocols = model(
            &format!("{}\n---\n{REWRITE}", tls_and_protocols()),
            Settings::default(),
        );
        let dir = tempfile::tempdir().unwrap();
        let out = nginx_test(&protocols, dir.path(), Balancer::Njs).await;
        assert!(out.is_ok(), "nginx -t failed: {out:?}");
    }

    fn which_nginx() -> Option<PathBuf> {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| Path::new(d).join("nginx"))
            .find(|p| p.exists())
    }

    /// Writes every file of `model` into `prefix` (as the controller does, with the
    /// modules the controller loads) and runs `nginx -t`.
    async fn nginx_test(
        model: &Model,
        prefix: &Path,
        balancer: Balancer,
    ) -> Result<(), crate::nginx::process::TestFailure> {
        let mut o = opts(&prefix.to_string_lossy());
        o.balancer = balancer;
        o.modules = balancer
            .modules()
            .iter()
            .map(|m| format!("/usr/lib/nginx/modules/{m}"))
            .collect();
        let pem = crate::tls::self_signed_default().unwrap();
        let dp = crate::nginx::Dataplane::new(Renderer::new(o), "nginx".into(), pem).unwrap();
        let (_, specs) = dp.files(model).unwrap();
        crate::nginx::files::write_all(prefix, &specs).unwrap();
        crate::nginx::process::Nginx::new("nginx", prefix)
            .test()
            .await
    }
}
