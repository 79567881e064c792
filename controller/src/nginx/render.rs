//! Rendering the model into NGINX files with tera, and the source map that says
//! which resource produced which lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrule_model::annotations::BackendProtocol;
use ferrule_model::{DEFAULT_SERVER, Location, Model, PathMatch, ResourceRef, Server, Target};
use serde::Serialize;

use super::emit;

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
];

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

/// Every generated file, keyed by its path relative to the prefix.
pub type Rendered = BTreeMap<String, RenderedFile>;

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
        Self { tera, opts }
    }

    /// The options this renderer was built with.
    pub fn options(&self) -> &RenderOptions {
        &self.opts
    }

    /// Renders every file of the model.
    pub fn render(&self, model: &Model) -> Result<Rendered, RenderError> {
        let main = self.main_view(model);
        let mut out = Rendered::new();
        let mut ctx = tera::Context::new();
        ctx.insert("main", &main);
        ctx.insert("global", &model.global);
        let text = self
            .tera
            .render("nginx.conf.tera", &ctx)
            .map_err(|source| RenderError {
                what: "nginx.conf".into(),
                source,
            })?;
        out.insert("conf/nginx.conf".to_owned(), with_sources(text));

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
        Ok(out)
    }

    fn path(&self, rel: &str) -> String {
        self.opts.prefix.join(rel).to_string_lossy().into_owned()
    }

    fn main_view(&self, model: &Model) -> MainView {
        MainView {
            modules: self.opts.modules.clone(),
            user: self.opts.user.clone(),
            group: self.opts.user.as_ref().map(|_| "nogroup".to_owned()),
            worker_processes: self.opts.worker_processes.clone(),
            pid: self.path("run/nginx.pid"),
            error_log: self.path("logs/error.log"),
            access_log: self.path("logs/access.log"),
            mime_types: "/etc/nginx/mime.types".to_owned(),
            tmp: self.path("tmp"),
            worker_shutdown_timeout: "240s".to_owned(),
            lua_path: format!("{}/?.lua;;", self.path("lua")),
            backends_dict: "128m".to_owned(),
            certificates_dict: "32m".to_owned(),
            token_file_lua: lua_quote(&self.path("conf/balancer.token")),
            servers_glob: self.path("conf/servers/*.conf"),
            api_listen: format!("unix:{}", self.path("run/balancer.sock")),
            config_version: model.hash(),
            configmap: configmap_source(self.opts.configmap.as_deref()),
        }
    }

    fn server_view(&self, model: &Model, s: &Server) -> ServerView {
        let is_default = s.host == DEFAULT_SERVER;
        let has_tls = s.tls.is_some();
        let cert = match s.tls.as_ref().and_then(|t| t.certificate.as_deref()) {
            Some(name) => self.path(&certificate_file(name)),
            None => self.path(DEFAULT_CERTIFICATE),
        };
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
                PathMatch::Exact => locations.push(location_view(model, l, "=", &l.path, has_tls)),
                PathMatch::Regex => locations.push(location_view(
                    model,
                    l,
                    "~",
                    &format!("^{}", l.path),
                    has_tls,
                )),
                PathMatch::Prefix if l.path == "/" => {
                    has_root = true;
                    locations.push(location_view(model, l, "", "/", has_tls));
                }
                PathMatch::Prefix => {
                    // Element-wise: `/foo` is `= /foo` plus everything below `/foo/`.
                    if !exact.contains(l.path.as_str()) {
                        locations.push(location_view(model, l, "=", &l.path, has_tls));
                    }
                    locations.push(location_view(
                        model,
                        l,
                        "",
                        &format!("{}/", l.path),
                        has_tls,
                    ));
                }
            }
        }
        if !has_root {
            locations.push(default_location(model));
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

/// The file of a model certificate (`namespace/name`).
pub fn certificate_file(name: &str) -> String {
    format!("conf/certs/{}.pem", name.replace('/', "_"))
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
    has_tls: bool,
) -> LocationView {
    let st = &l.settings;
    let (backend, status, include) = target_view(model, &l.target, st.backend_protocol);
    LocationView {
        source: source(&l.owner),
        modifier: modifier.to_owned(),
        path: path.to_owned(),
        redirect: st.force_ssl_redirect || (st.ssl_redirect && has_tls),
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
    LocationView {
        source: "Controller/default-backend/".to_owned(),
        modifier: String::new(),
        path: "/".to_owned(),
        redirect: false,
        body_size: None,
        connect_timeout: None,
        read_timeout: None,
        send_timeout: None,
        rewrite_from: String::new(),
        rewrite: None,
        snippet: None,
        backend,
        status,
        include,
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
            (Some(name.clone()), 0, include.to_owned())
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
    servers_glob: String,
    api_listen: String,
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

#[derive(Serialize)]
struct LocationView {
    source: String,
    modifier: String,
    path: String,
    redirect: bool,
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
