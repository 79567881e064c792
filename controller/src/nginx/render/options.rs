//! How the renderer is configured: the balancer inside NGINX, where NGINX listens
//! and finds its files, and how it collects per-request metrics.

use std::path::PathBuf;

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

/// Modules loaded when installed, whichever the balancer: headers-more, so that
/// snippets written for ingress-nginx (`more_set_headers`, `more_clear_headers`,
/// `more_set_input_headers`) keep working where snippets are allowed.
pub const OPTIONAL_MODULES: &[&str] = &["ngx_http_headers_more_filter_module.so"];

/// The modules TCP/UDP services need (`--tcp-services-configmap`,
/// `--udp-services-configmap`): the stream subsystem and njs in it (which picks each
/// connection's peer). Debian: `libnginx-mod-stream`, `libnginx-mod-stream-js`.
pub const STREAM_MODULES: &[&str] = &["ngx_stream_module.so", "ngx_stream_js_module.so"];
/// The peers of each stream backend, one file per backend, written by the
/// controller and read by `njs/stream.js` per connection (see `nginx::stream_peers`).
pub const STREAM_PEERS_DIR: &str = "run/ferrule-stream";

/// With `--enable-ssl-passthrough`: where the HTTPS servers listen (the TLS router
/// hands them the connections it does not pass through, with the PROXY protocol).
pub const HTTPS_SOCKET: &str = "run/https.sock";
/// With `--enable-ssl-passthrough`: the hop that takes the router's PROXY line off
/// a passed-through connection before it goes to the backend.
pub const PASSTHROUGH_SOCKET: &str = "run/passthrough.sock";

/// With `auth-keepalive`: the relay that keeps connections to auth services (see
/// `render::external_auth::AuthUpstreamView`).
pub const AUTH_RELAY_SOCKET: &str = "run/auth-keepalive.sock";

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
    /// MiB of shared memory for the balancer's certificates (Lua): every TLS host's
    /// chain and key, a few KB each in whole 4 KB pages. Fixed: a new size is a new,
    /// empty zone at the next reload. Pages are committed as they are used.
    pub certificate_store_mib: u32,
    /// Whether `modules` holds Ferrule's C fast path (Lua only, [`super::fast_path`]):
    /// plain backends are then balanced without entering Lua.
    pub fast_path: bool,
    /// Whether the module in `modules` has `ferrule_location`, `ferrule_if_body`,
    /// `ferrule_alias`, `ferrule_upstreaminfo` and `ferrule_header_lines` (Lua with
    /// `fast_path`): a proxying location then names its backend, ssl-redirect host
    /// and affinity scope in its configuration instead of with three `set`s, the
    /// module, not a map and an `if`, decides whether a request may have a body, the
    /// forwarded headers' variables that are another variable as it is are aliases,
    /// not maps, the module writes the default access log line and one header line
    /// that carries the others: every request is spared the rewrite module's, the
    /// maps', the log module's and the proxy module's script work for them.
    pub location_directive: bool,
    /// Whether `modules` holds Ferrule's stream module ([`super::fast_path`]): TCP/UDP
    /// services and passthrough hosts then get every endpoint in an upstream, and a
    /// connection that cannot reach one tries the next; else njs picks one.
    pub stream_module: bool,
    /// Whether the module in `modules` has `ferrule_input_header` and
    /// `ferrule_drop_lookalikes` (with either balancer): the client address behind a
    /// trusted PROXY line may then come from its forwarded-for header
    /// (`use-proxy-protocol` with `use-forwarded-headers`), and a client's lookalikes
    /// of the headers Ferrule sets (`X_Forwarded_For`) are dropped.
    pub input_header: bool,
    /// Where the paths that worker processes open themselves live (the answer
    /// sockets, temporary files, the njs state and default certificate), when the
    /// worker user cannot enter the prefix ([`super::worker_dir`]); `None`: the prefix.
    pub worker_dir: Option<PathBuf>,
    /// NGINX's error log to stderr and its access log to stdout, which the master
    /// inherits from Ferrule (a container's logs), instead of `PREFIX/logs/`.
    pub log_to_stdio: bool,
    /// NGINX's `resolver`: for the URLs it resolves per request (a `mirror-target`
    /// with variables). [`system_resolvers`] at start; empty: none.
    pub resolvers: Vec<String>,
    /// Per-request metrics (`--enable-metrics`), collected in NGINX's shared memory
    /// by the C module's log phase when it is loaded (Lua: with `fast_path`; else by
    /// a Lua log phase into a shared dict; njs without it: not at all), see
    /// [`RenderOptions::metrics_source`]: `None` collects nothing.
    pub metrics: Option<MetricsRender>,
    /// `--enable-ssl-passthrough`: the stream block owns the HTTPS port and routes
    /// by SNI; the HTTPS servers listen on [`HTTPS_SOCKET`] behind it.
    pub ssl_passthrough: bool,
    /// `--allow-local-endpoints`: what the Lua balancer connects to itself (the OCSP
    /// responders that certificates name, ConfigMap `enable-ocsp`) may be loopback,
    /// link-local or unspecified too, as endpoints may.
    pub allow_local_endpoints: bool,
}

/// How NGINX collects per-request metrics (read back by `crate::scrape`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsRender {
    /// Bucket bounds of the durations, in seconds (`--time-buckets`).
    pub time_buckets: Vec<f64>,
    /// Bucket bounds of request and response sizes, in bytes (`--length-buckets`).
    pub length_buckets: Vec<f64>,
    /// Bucket bounds of `bytes_sent`, in bytes (`--size-buckets`).
    pub size_buckets: Vec<f64>,
    /// MiB of shared memory for the counters (a zone whose size or buckets change is
    /// a new, empty one; any other reload keeps every count).
    pub zone_mib: u32,
    /// Whether the C module counts (set by [`super::fast_path::enable`] when the
    /// module loaded has the metrics' directives, with njs its dump's too); else a
    /// Lua log phase does (njs: nothing does).
    pub module: bool,
}

impl MetricsRender {
    /// Bounds as NGINX and the dump write them: `0.005,0.01,...`.
    pub fn bounds_text(bounds: &[f64]) -> String {
        bounds
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Where per-request metrics are collected, as the renderer decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsSource {
    /// Ferrule's C module, in its log phase, into a shared zone.
    Module,
    /// A Lua log phase into `lua_shared_dict ferrule_metrics`.
    Lua,
    /// Not collected (off, or the njs balancer without the C module: its njs has
    /// no shared dict).
    None,
}

impl RenderOptions {
    /// Where per-request metrics are collected with these options. The module is
    /// loaded with Lua when `fast_path` is on; with njs it is loaded for the
    /// metrics alone (`fast_path` stays off: njs has no balancer phase to share).
    pub fn metrics_source(&self) -> MetricsSource {
        match (&self.metrics, self.balancer) {
            (None, _) => MetricsSource::None,
            (Some(m), Balancer::Lua) if m.module && self.fast_path => MetricsSource::Module,
            (Some(_), Balancer::Lua) => MetricsSource::Lua,
            (Some(m), Balancer::Njs) if m.module => MetricsSource::Module,
            (Some(_), Balancer::Njs) => MetricsSource::None,
        }
    }
}

impl RenderOptions {
    /// `rel` below the directory the worker processes reach (see `worker_dir`).
    pub fn worker_path(&self, rel: &str) -> PathBuf {
        self.worker_dir.as_ref().unwrap_or(&self.prefix).join(rel)
    }
}

/// The nameservers of `/etc/resolv.conf` (a pod's cluster DNS), as NGINX's
/// `resolver` takes them (IPv6 in brackets).
pub fn system_resolvers() -> Vec<String> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    nameservers(&text)
}

fn nameservers(resolv_conf: &str) -> Vec<String> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<std::net::IpAddr>().ok())
        .map(|ip| match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn nameservers_as_nginx_takes_them() {
        let conf = "search a.svc\nnameserver 10.96.0.10\nnameserver ::1\nnameserver x;y\n";
        assert_eq!(super::nameservers(conf), ["10.96.0.10", "[::1]"]);
    }
}
