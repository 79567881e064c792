//! Rendering the model into NGINX files with tera, and the source map that says
//! which resource produced which lines.

use std::collections::BTreeMap;

use ferrule_model::route;
use ferrule_model::{DEFAULT_SERVER, Location, Model, PathMatch, ResourceRef, Server};
use serde::Serialize;

use super::{emit, process};
use locations::{LocationView, default_location, location_view, regex_escape};
pub use options::{
    Balancer, HTTPS_SOCKET, MetricsRender, MetricsSource, NJS_DEFAULT_CERT, NJS_DEFAULT_KEY,
    NJS_DIR, NJS_STATE_DIR, NJS_TOKEN_FILE, OPTIONAL_MODULES, PASSTHROUGH_SOCKET, RenderOptions,
    STREAM_MODULES, STREAM_PEERS_DIR, system_resolvers,
};

const MAIN_TEMPLATE: &str = include_str!("../../../rootfs/etc/nginx/nginx.conf.tera");
const SERVER_TEMPLATE: &str = include_str!("../../../rootfs/etc/nginx/server.conf.tera");

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
        // `set`'s value expands variables: `| literal` keeps a tenant's `$` as is.
        tera.register_filter("literal", |v: &str, _: tera::Kwargs, _: &tera::State| {
            literal_in_variables(v)
        });
        tera.add_raw_template("nginx.conf.tera", MAIN_TEMPLATE)
            .expect("nginx.conf.tera is valid");
        tera.add_raw_template("server.conf.tera", SERVER_TEMPLATE)
            .expect("server.conf.tera is valid");
        // A new controller adopting an NGINX must reload it into new Lua or njs (the
        // njs sources are installed with Lua too: they pick TCP/UDP services' peers).
        let code: Vec<(&str, &str)> = match opts.balancer {
            Balancer::Lua => (super::lua::LUA_FILES.iter())
                .chain(super::njs::NJS_FILES)
                .copied()
                .collect(),
            Balancer::Njs => super::njs::NJS_FILES.to_vec(),
        };
        let code_digest = *files_digest(code.into_iter()).finalize().as_bytes();
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
        let mut main = self.main_view(model);
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
                client_certificates: None,
                ciphers: Default::default(),
                locations: Vec::new(),
                redirect_to: None,
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
        for (path, text) in static_files::static_files(self.opts.location_directive) {
            out.insert(path.to_owned(), with_sources(text.to_owned()));
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

    fn worker_path(&self, rel: &str) -> String {
        self.opts.worker_path(rel).to_string_lossy().into_owned()
    }

    /// The addresses of a proxy port, as `listen` takes them: IPv4, and IPv6 too (as
    /// ingress-nginx) unless the ConfigMap's disable-ipv6 says otherwise or this
    /// kernel has no IPv6; ConfigMap bind-address instead of --listen-address.
    fn listen(&self, model: &Model, port: u16) -> Vec<String> {
        let dual = !model.global.tuning.disable_ipv6 && ipv6_enabled();
        let bind = &model.global.http.bind_addresses;
        match self.opts.listen_address.as_str() {
            _ if !bind.is_empty() => (bind.iter())
                .map(|a| std::net::SocketAddr::new(*a, port).to_string())
                .collect(),
            "*" | "" if dual => vec![port.to_string(), format!("[::]:{port}")],
            "*" | "" => vec![port.to_string()],
            a if a.contains(':') => vec![format!("[{a}]:{port}")],
            a => vec![format!("{a}:{port}")],
        }
    }

    /// A unix socket, as `listen` and `set_current_peer` name it.
    fn unix(path: String) -> String {
        format!("unix:{path}")
    }
}

/// How long old workers may finish their requests after a reload or at shutdown
/// (ingress-nginx's default `worker-shutdown-timeout`).
pub const WORKER_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(240);

/// The default certificate's file (certificate and key in one PEM, mode 0600).
pub const DEFAULT_CERTIFICATE: &str = "conf/certs/default.pem";

/// The certificate server blocks name when `ssl-session-ticket-key` is set
/// ([`crate::tls::ticket_placeholder`]), with its key (Lua balancer).
pub const TICKET_PLACEHOLDER: &str = "conf/certs/tickets.pem";

/// Where `ssl-session-ticket-key` is written (read by the master at start and reload).
pub const TICKET_KEY_FILE: &str = "conf/tickets.key";

/// Where `ssl-dh-param`'s parameters are written (read by the master).
pub const DH_PARAM_FILE: &str = "conf/dhparam.pem";

/// The secret files of the ConfigMap's keys (`ssl-dh-param`, `ssl-session-ticket-key`)
/// and their content: read by the master at start and reload.
pub fn master_files(model: &Model) -> Vec<(&'static str, &[u8])> {
    let g = &model.global;
    let dh = g.ssl_dh_param.as_ref().and_then(|d| d.file.as_ref());
    let ticket = g.tuning.ssl_session_ticket_key.as_ref();
    [(DH_PARAM_FILE, dh), (TICKET_KEY_FILE, ticket)]
        .into_iter()
        .filter_map(|(path, f)| Some((path, f?.bytes.as_slice())))
        .collect()
}

/// The users' file of basic-auth Secret `secret` (`namespace/name`), relative to the
/// worker directory: named after the Secret alone, by a digest, so that no Ingress
/// can name, read or replace another Secret's file (CVE-2020-8553).
pub fn basic_auth_file(secret: &str) -> String {
    let digest = blake3::hash(secret.as_bytes()).to_hex();
    format!("{}/{}.htpasswd", super::files::AUTH_DIR, &digest[..32])
}

/// The client certificate CA and CRL files `model` needs (prefix-relative).
pub fn client_certificate_files(model: &Model) -> BTreeMap<String, &str> {
    let mut out = BTreeMap::new();
    for c in model
        .servers
        .iter()
        .filter_map(|s| s.client_certificates.as_ref())
    {
        out.insert(client_certificates::ca_file(&c.secret), c.ca.as_str());
        if let Some(crl) = &c.crl {
            out.insert(client_certificates::crl_file(&c.secret), crl.as_str());
        }
    }
    out
}

/// The users' files `model` needs (`basic_auth_file` → htpasswd lines).
pub fn basic_auth_files(model: &Model) -> BTreeMap<String, &str> {
    model
        .servers
        .iter()
        .flat_map(|s| &s.locations)
        .filter_map(|l| l.settings.basic_auth.as_ref())
        .map(|b| (basic_auth_file(&b.secret), b.users.as_str()))
        .collect()
}

/// The backend TLS files of every location (CA bundles, client certificates with
/// their keys), by file name relative to the prefix.
pub fn backend_tls_files(model: &Model) -> BTreeMap<String, &str> {
    let mut out = BTreeMap::new();
    for t in model
        .servers
        .iter()
        .flat_map(|s| &s.locations)
        .filter_map(|l| l.settings.backend_tls.as_ref())
    {
        let secret = t.secret.as_deref().unwrap_or_default();
        if let Some(ca) = &t.ca {
            out.insert(backend_tls::ca_file(secret), ca.as_str());
        }
        if let Some(client) = &t.client {
            out.insert(backend_tls::client_file(secret), client.as_str());
        }
    }
    out
}

/// A value for a directive that expands variables (`set`): a literal `$` is written
/// as `${ferrule_dollar}` (defined in nginx.conf as a literal `$`), so that a name
/// can never read a variable (e.g. a request header choosing the backend).
fn literal_in_variables(value: &str) -> String {
    value.replace('$', "${ferrule_dollar}")
}

/// A header and its value as NGINX text (a tenant's `$` made literal).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SetHeaderView {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// `headers` as written: every `$` literal (`custom-headers`,
/// `auth-proxy-set-headers`: a tenant's value names no variable).
pub fn literal_headers(headers: &[ferrule_model::Header]) -> Vec<SetHeaderView> {
    (headers.iter())
        .map(|h| SetHeaderView {
            name: h.name.clone(),
            value: literal_in_variables(&h.value),
        })
        .collect()
}

/// The longest host spelled out in its server's file name: a DNS name may have 253
/// bytes, a file name 255, and the temporary file adds a dot and `.tmp-<pid>`.
const HOST_IN_FILE_NAME: usize = 200;

/// The file of a server: hosts are validated DNS names, `*` becomes `_wildcard_`.
/// A longer name is cut and followed by its digest, after a `+` that no DNS name
/// holds: it cannot collide with the file of another host, however that is chosen.
pub fn server_file(host: &str) -> String {
    if host == DEFAULT_SERVER {
        return "conf/servers/default.conf".to_owned();
    }
    let name = host.replace('*', "_wildcard_");
    if name.len() <= HOST_IN_FILE_NAME {
        return format!("conf/servers/host_{name}.conf");
    }
    let cut: String = name.chars().take(HOST_IN_FILE_NAME - 40).collect();
    let digest = blake3::hash(host.as_bytes()).to_hex();
    format!("conf/servers/host+{cut}+{}.conf", &digest[..32])
}

/// The server-level halves of its locations' views, each once, in order.
fn each_once<'a, T: PartialEq + Clone + 'a>(items: impl Iterator<Item = &'a T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.contains(i) {
            out.push(i.clone());
        }
    }
    out
}

/// The backend response headers never passed on: ConfigMap `hide-headers`, and
/// `Strict-Transport-Security` where Ferrule sends its own (a client would get two).
fn hidden_headers(global: &ferrule_model::Global) -> Vec<String> {
    let mut out = global.http.hide_headers.clone();
    let hsts = global.hsts.as_ref().map(|_| HSTS.to_owned());
    // add-headers replace the backend's own (as ingress-nginx's more_set_headers).
    let added = global.add_headers.iter().map(|h| h.name.clone());
    for name in hsts.into_iter().chain(added) {
        if !out.iter().any(|h| h.eq_ignore_ascii_case(&name)) {
            out.push(name);
        }
    }
    out
}

const HSTS: &str = "Strict-Transport-Security";

/// A `map` source matching `pattern`: a regular expression (`~`, `~*`) as it is,
/// an exact value behind `\\`, which `map` strips, so that no value is read as one of
/// its keywords (`default`, `include`, `hostnames`, `volatile`).
fn map_source(pattern: &str) -> String {
    if pattern.starts_with('~') {
        pattern.to_owned()
    } else {
        format!("\\{pattern}")
    }
}

/// `server_names_hash_bucket_size`: NGINX does not start when one exact name does not
/// fit in a bucket (a pointer, the name and two bytes aligned to a pointer, and the
/// bucket's end marker), and a DNS name may have 253 bytes. Bigger buckets hold more
/// names per lookup, so only a configuration with such a name gets them.
fn server_names_bucket<'a>(hosts: impl Iterator<Item = &'a str>) -> usize {
    const POINTER: usize = std::mem::size_of::<usize>();
    let longest = hosts.map(str::len).max().unwrap_or(0);
    let need = POINTER + (longest + 2).next_multiple_of(POINTER) + POINTER;
    need.next_multiple_of(64).max(128)
}

/// NGINX `server_name`: exact names as they are; a wildcard becomes a regular
/// expression matching exactly one DNS label (NGINX's own `*.` matches several, and
/// any bytes in them: `a@evil`, `a_b`), as [`route::dns_label`] does.
fn server_name(host: &str) -> String {
    if host == DEFAULT_SERVER {
        return "_".to_owned();
    }
    match host.strip_prefix("*.") {
        Some(rest) => format!(
            "~^{}\\.{}$",
            route::WILDCARD_LABEL,
            rest.replace('.', "\\.")
        ),
        None => host.to_owned(),
    }
}

/// An NGINX flag's value.
fn on_off(v: bool) -> &'static str {
    if v { "on" } else { "off" }
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

/// A Lua string literal (for values inside `*_by_lua_block`).
/// Whether this kernel has IPv6 (NGINX cannot listen on `[::]` otherwise). Read
/// once: it does not change while the process runs.
fn ipv6_enabled() -> bool {
    // The render snapshots must not depend on the machine that runs them.
    if cfg!(test) {
        return true;
    }
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::path::Path::new("/proc/net/if_inet6").exists())
}

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

mod backend_tls;
pub mod client_certificates;
mod cors;
mod error_pages;
mod external_auth;
mod locations;
mod main_view;
mod mirror;
mod options;
mod proxying;
mod rate_limits;
mod server_view;
mod static_files;
mod streams;
#[cfg(test)]
pub(crate) mod tests;
