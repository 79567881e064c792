//! The ConfigMap keys that are NGINX directives of the `http` block (or the main
//! context): headers, timeouts, hashes, TLS protocols and ciphers, gzip, retries,
//! workers. Most are one directive each, stated once as a row of [`ROWS`] with
//! ingress-nginx's default; the few that shape more than one directive have a
//! field of their own. Every value is typed; an invalid one is reported on the
//! ConfigMap and the default kept.

use serde::{Deserialize, Serialize};

use crate::annotations::{buffering, forwarding, value};

/// One directive and its arguments (each quoted by the renderer's emitter).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Directive {
    /// The directive's name, from [`ROWS`], never from the ConfigMap.
    pub name: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// What the templates render for these keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HttpKeys {
    /// The one-directive keys of the main context, in [`ROWS`] order.
    pub main: Vec<Directive>,
    /// The one-directive keys of `http`, in [`ROWS`] order.
    pub http: Vec<Directive>,
    /// The one-directive keys of `stream` (TCP/UDP services), in [`ROWS`] order.
    pub stream: Vec<Directive>,
    /// `log-format-stream`: the access log format of TCP/UDP services.
    pub stream_log_format: String,
    /// `worker-processes`: `auto` or a number; `None`: the controller's flag.
    pub worker_processes: Option<String>,
    /// `error-log-level`.
    pub error_log_level: String,
    /// `disable-access-log`.
    pub access_log: bool,
    /// `use-http2`: HTTP/2 on the HTTPS listeners.
    pub http2: bool,
    /// `hide-headers`: backend response headers not passed on (`proxy_hide_header`,
    /// repeated where a location hides headers of its own: NGINX inherits the list
    /// only into locations that have none).
    pub hide_headers: Vec<String>,
    /// `server-name-hash-max-size`, `server-name-hash-bucket-size`: lower bounds;
    /// the renderer takes at least what the hosts need.
    pub server_names_hash_max_size: u32,
    /// See `server_names_hash_max_size`.
    pub server_names_hash_bucket_size: u32,
    /// `use-gzip` and `gzip-*`; `None` when off.
    pub gzip: Option<Gzip>,
    /// `generate-request-id`: a request without `X-Request-ID` gets one.
    pub generate_request_id: bool,
    /// `proxy-add-original-uri-header`: `X-Original-URI` to backends.
    pub original_uri_header: bool,
    /// `upstream-keepalive-time`: the longest a backend connection is kept.
    pub upstream_keepalive_time: String,
    /// `enable-ocsp`: the certificates served get their responder's OCSP answer
    /// stapled (by the Lua balancer, `lua/ferrule/ocsp.lua`).
    pub ocsp: bool,
    /// `ssl-reject-handshake`: TLS for no known host (or no SNI) is refused
    /// instead of answered with the default certificate.
    pub ssl_reject_handshake: bool,
    /// `main-snippet`: raw NGINX text in the main context (administrator-owned).
    pub main_snippet: Option<String>,
    /// `skip-access-log-urls`: request paths not logged.
    pub skip_access_log_urls: Vec<String>,
    /// `proxy-buffer-size` and `proxy-buffers-number` (`proxy_buffers`), the
    /// defaults of the annotations.
    pub proxy_buffers: Option<crate::annotations::buffering::Buffers>,
    /// `proxy-busy-buffers-size`.
    pub proxy_busy_buffers_size: Option<String>,
    /// `no-tls-redirect-locations`: paths whose locations never redirect to HTTPS.
    pub no_tls_redirect_locations: Vec<String>,
    /// `bind-address`: the addresses the proxy ports listen on instead of the
    /// controller's `--listen-address`.
    pub bind_addresses: Vec<std::net::IpAddr>,
    /// `enable-syslog` with `syslog-host` and `syslog-port`: the access log goes
    /// to that syslog server (`host:port`) instead of the file.
    pub syslog: Option<String>,
}

/// `use-gzip` and its keys, as ingress-nginx renders them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gzip {
    /// `gzip-level`, 1 to 9.
    pub level: u32,
    /// `gzip-min-length`, bytes.
    pub min_length: u32,
    /// `gzip-types`.
    pub types: Vec<String>,
    /// `gzip-disable`: user-agent patterns (NGINX regular expressions).
    pub disable: Vec<String>,
}

/// ingress-nginx's `gzip-types`.
const GZIP_TYPES: &str = "application/atom+xml application/javascript application/x-javascript \
    application/json application/rss+xml application/vnd.ms-fontobject application/x-font-ttf \
    application/x-web-app-manifest+json application/xhtml+xml application/xml font/opentype \
    image/svg+xml image/x-icon text/css text/javascript text/plain text/x-component";

impl Default for Gzip {
    fn default() -> Self {
        Gzip {
            level: 1,
            min_length: 256,
            types: GZIP_TYPES.split(' ').map(str::to_owned).collect(),
            disable: Vec::new(),
        }
    }
}

/// Where a row's directive goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Main,
    Http,
    Stream,
}

/// A key that is one directive.
struct Row {
    key: &'static str,
    context: Context,
    directive: &'static str,
    parse: fn(&str) -> Result<Vec<String>, String>,
    /// Rendered when the ConfigMap has no value; `None`: NGINX's own default.
    default: Option<&'static str>,
}

const fn row(
    key: &'static str,
    directive: &'static str,
    parse: fn(&str) -> Result<Vec<String>, String>,
    default: Option<&'static str>,
) -> Row {
    Row {
        key,
        context: Context::Http,
        directive,
        parse,
        default,
    }
}

/// ingress-nginx's TLS 1.2 suites (Mozilla's intermediate list).
const SSL_CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
    ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:\
    ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384";

/// The one-directive keys.
const ROWS: &[Row] = &[
    row(
        "client-header-timeout",
        "client_header_timeout",
        seconds,
        Some("60"),
    ),
    row(
        "client-body-timeout",
        "client_body_timeout",
        seconds,
        Some("60"),
    ),
    row("server-tokens", "server_tokens", flag, Some("false")),
    row(
        "ignore-invalid-headers",
        "ignore_invalid_headers",
        flag,
        Some("true"),
    ),
    row(
        "enable-underscores-in-headers",
        "underscores_in_headers",
        flag,
        Some("false"),
    ),
    row("default-type", "default_type", mime_type, Some("text/html")),
    row(
        "map-hash-bucket-size",
        "map_hash_bucket_size",
        hash_size,
        Some("64"),
    ),
    row(
        "proxy-headers-hash-max-size",
        "proxy_headers_hash_max_size",
        hash_size,
        Some("512"),
    ),
    row(
        "proxy-headers-hash-bucket-size",
        "proxy_headers_hash_bucket_size",
        hash_size,
        Some("64"),
    ),
    row(
        "http2-max-concurrent-streams",
        "http2_max_concurrent_streams",
        streams,
        Some("128"),
    ),
    row("limit-rate", "limit_rate", bytes, None),
    row("limit-rate-after", "limit_rate_after", bytes, None),
    row(
        "allow-backend-server-header",
        "proxy_pass_header",
        server_header,
        None,
    ),
    row(
        "proxy-next-upstream-timeout",
        "proxy_next_upstream_timeout",
        seconds,
        None,
    ),
    row(
        "proxy-next-upstream-tries",
        "proxy_next_upstream_tries",
        tries,
        Some("3"),
    ),
    row(
        "proxy-request-buffering",
        "proxy_request_buffering",
        on_off,
        None,
    ),
    row("grpc-buffer-size-kb", "grpc_buffer_size", kilobytes, None),
    row("relative-redirects", "absolute_redirect", relative, None),
    row(
        "proxy-cookie-path",
        "proxy_cookie_path",
        forwarding::rewrite_pair,
        None,
    ),
    row(
        "proxy-cookie-domain",
        "proxy_cookie_domain",
        forwarding::rewrite_pair,
        None,
    ),
    row(
        "proxy-redirect-from",
        "proxy_redirect",
        redirect_off,
        Some("off"),
    ),
    row(
        "ssl-protocols",
        "ssl_protocols",
        ssl_protocols,
        Some("TLSv1.2 TLSv1.3"),
    ),
    row("ssl-ciphers", "ssl_ciphers", ssl_ciphers, Some(SSL_CIPHERS)),
    row("ssl-ecdh-curve", "ssl_ecdh_curve", ecdh_curve, Some("auto")),
    Row {
        context: Context::Stream,
        ..row("proxy-stream-timeout", "proxy_timeout", time, Some("600s"))
    },
    Row {
        context: Context::Stream,
        ..row(
            "proxy-protocol-header-timeout",
            "proxy_protocol_timeout",
            time,
            Some("5s"),
        )
    },
    // Retries of a TCP/UDP connection on the next endpoint: Ferrule's stream module
    // gives the upstream a connection's endpoints (without it, njs picks one).
    Row {
        context: Context::Stream,
        ..row(
            "proxy-stream-next-upstream",
            "proxy_next_upstream",
            flag,
            Some("true"),
        )
    },
    Row {
        context: Context::Stream,
        ..row(
            "proxy-stream-next-upstream-timeout",
            "proxy_next_upstream_timeout",
            time,
            Some("600s"),
        )
    },
    Row {
        context: Context::Stream,
        ..row(
            "proxy-stream-next-upstream-tries",
            "proxy_next_upstream_tries",
            tries,
            Some("3"),
        )
    },
    Row {
        context: Context::Stream,
        ..row(
            "proxy-stream-responses",
            "proxy_responses",
            responses,
            Some("1"),
        )
    },
    Row {
        context: Context::Main,
        ..row(
            "worker-cpu-affinity",
            "worker_cpu_affinity",
            cpu_affinity,
            None,
        )
    },
];

/// Whether [`read`] reads `key`: the keys it asks for, found once by reading an
/// empty ConfigMap (it asks for every key whatever the values).
pub(crate) fn reads(key: &str) -> bool {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let asked = std::cell::RefCell::new(Vec::new());
        read(
            |k| {
                asked.borrow_mut().push(k);
                None
            },
            &mut Vec::new(),
        );
        asked.into_inner()
    });
    keys.contains(&key)
}

/// Reads the keys through `get`; each invalid value is `(key, value, reason)` in
/// `invalid`, and its default is kept.
pub(crate) fn read<'a>(
    get: impl Fn(&'static str) -> Option<&'a str>,
    invalid: &mut Vec<(&'static str, String, String)>,
) -> HttpKeys {
    let mut keys = Reader { get, invalid };
    let mut main = Vec::new();
    let mut http = Vec::new();
    let mut stream = Vec::new();
    for r in ROWS {
        let default = || r.default.map(|d| (r.parse)(d).expect("defaults parse"));
        let args = keys.value(r.key, default(), |v| (r.parse)(v).map(Some));
        if let Some(args) = args.filter(|a| !a.is_empty()) {
            let d = Directive {
                name: r.directive.to_owned(),
                args,
            };
            match r.context {
                Context::Main => main.push(d),
                Context::Http => http.push(d),
                Context::Stream => stream.push(d),
            }
        }
    }
    let defaults = vec!["error".to_owned(), "timeout".to_owned()];
    let mut next_upstream = keys.value("proxy-next-upstream", defaults, forwarding::next_upstream);
    if keys.value("retry-non-idempotent", false, value::boolean)
        && !next_upstream
            .iter()
            .any(|c| c == "off" || c == "non_idempotent")
    {
        next_upstream.push("non_idempotent".to_owned());
    }
    http.push(Directive {
        name: "proxy_next_upstream".to_owned(),
        args: next_upstream,
    });
    let d = Gzip::default();
    // Read even when off, so that an invalid value is reported.
    let gzip = Gzip {
        level: keys.value("gzip-level", d.level, |v| value::integer(v, 1, 9)),
        min_length: keys.value("gzip-min-length", d.min_length, |v| {
            value::integer(v, 0, i32::MAX as u32)
        }),
        types: keys.value("gzip-types", d.types, mime_types),
        disable: keys.value("gzip-disable", d.disable, value::patterns),
    };
    let gzip = keys
        .value("use-gzip", false, value::boolean)
        .then_some(gzip);
    let size = keys.value("proxy-buffer-size", None, |v| value::size(v).map(Some));
    let number = keys.value("proxy-buffers-number", None, |v| {
        value::integer(v, 2, 1024).map(Some)
    });
    let busy = keys.value("proxy-busy-buffers-size", None, |v| {
        value::size(v).map(Some)
    });
    let (proxy_buffers, proxy_busy_buffers_size) =
        match buffering::checked_buffers(size.clone(), number, busy.as_deref()) {
            Ok(b) => (b, busy),
            Err((key, e)) => {
                let v = match key {
                    "proxy-buffer-size" => size.unwrap_or_default(),
                    "proxy-buffers-number" => number.map(|n| n.to_string()).unwrap_or_default(),
                    _ => busy.unwrap_or_default(),
                };
                keys.invalid.push((key, v, e.to_owned()));
                (None, None)
            }
        };
    let syslog_host = keys.value("syslog-host", None, |v| value::host_port(v).map(Some));
    let syslog_port = keys.value("syslog-port", 514, |v| value::integer(v, 1, 65_535));
    let syslog = match (
        keys.value("enable-syslog", false, value::boolean),
        syslog_host,
    ) {
        (true, Some(host)) => Some(format!("{host}:{syslog_port}")),
        (true, None) => {
            let e = "needs syslog-host".to_owned();
            keys.invalid.push(("enable-syslog", "true".to_owned(), e));
            None
        }
        (false, _) => None,
    };
    HttpKeys {
        main,
        http,
        stream,
        stream_log_format: keys.value(
            "log-format-stream",
            STREAM_LOG_FORMAT.to_owned(),
            super::tuning::log_format,
        ),
        worker_processes: keys.value("worker-processes", None, |v| workers(v).map(Some)),
        error_log_level: keys.value("error-log-level", "notice".to_owned(), log_level),
        access_log: !keys.value("disable-access-log", false, value::boolean),
        http2: keys.value("use-http2", true, value::boolean),
        hide_headers: keys.value("hide-headers", Vec::new(), header_names),
        server_names_hash_max_size: keys.value("server-name-hash-max-size", 1024, |v| {
            value::integer(v, 64, 1 << 20)
        }),
        server_names_hash_bucket_size: keys.value("server-name-hash-bucket-size", 32, |v| {
            value::power_of_two(v, 32, 4096)
        }),
        gzip,
        generate_request_id: keys.value("generate-request-id", true, value::boolean),
        original_uri_header: keys.value("proxy-add-original-uri-header", false, value::boolean),
        upstream_keepalive_time: keys.value(
            "upstream-keepalive-time",
            "1h".to_owned(),
            value::time,
        ),
        ssl_reject_handshake: keys.value("ssl-reject-handshake", false, value::boolean),
        ocsp: keys.value("enable-ocsp", false, value::boolean),
        main_snippet: keys.value("main-snippet", None, |v| Ok(Some(v.to_owned()))),
        skip_access_log_urls: keys.value("skip-access-log-urls", Vec::new(), paths),
        syslog,
        proxy_buffers,
        proxy_busy_buffers_size,
        bind_addresses: keys.value("bind-address", Vec::new(), addresses),
        no_tls_redirect_locations: keys.value(
            "no-tls-redirect-locations",
            vec!["/.well-known/acme-challenge".to_owned()],
            paths,
        ),
    }
}

/// The ConfigMap's values and the invalid ones found so far.
struct Reader<'i, G> {
    get: G,
    invalid: &'i mut Vec<(&'static str, String, String)>,
}

impl<'a, G: Fn(&'static str) -> Option<&'a str>> Reader<'_, G> {
    /// The value of `key` parsed, else (absent or invalid) `default`.
    fn value<T>(
        &mut self,
        key: &'static str,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> T {
        match (self.get)(key).map(str::trim) {
            None => default,
            Some(v) => parse(v).unwrap_or_else(|e| {
                self.invalid.push((key, v.to_owned(), e));
                default
            }),
        }
    }
}

impl Default for HttpKeys {
    /// ingress-nginx's defaults.
    fn default() -> Self {
        read(|_| None, &mut Vec::new())
    }
}

fn time(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![value::time(v)?])
}

/// `proxy_responses`: datagrams a UDP backend answers per client datagram.
fn responses(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![value::integer(v, 0, 1_000_000)?.to_string()])
}

/// ingress-nginx's `log-format-stream`.
const STREAM_LOG_FORMAT: &str =
    "[$remote_addr] [$time_local] $protocol $status $bytes_sent $bytes_received $session_time";

fn seconds(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![format!("{}s", value::seconds(v)?)])
}

fn flag(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![
        if value::boolean(v)? { "on" } else { "off" }.to_owned(),
    ])
}

/// `relative-redirects`: true makes NGINX's own redirects relative.
fn relative(v: &str) -> Result<Vec<String>, String> {
    Ok(if value::boolean(v)? {
        vec!["off".to_owned()]
    } else {
        Vec::new()
    })
}

/// `proxy-redirect-from`: only `off` (ingress-nginx's default) in the ConfigMap:
/// NGINX's `default` is refused where `proxy_pass` has variables (the njs balancer),
/// and a prefix needs the annotation's `proxy-redirect-to`.
fn redirect_off(v: &str) -> Result<Vec<String>, String> {
    match v {
        "off" => Ok(vec!["off".to_owned()]),
        _ => Err("only off in the ConfigMap (an Ingress may set from and to)".to_owned()),
    }
}

fn on_off(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![
        if value::on_off(v)? { "on" } else { "off" }.to_owned(),
    ])
}

/// A `type/subtype` MIME type.
fn mime_type(v: &str) -> Result<Vec<String>, String> {
    let ok = v.split_once('/').is_some_and(|(t, s)| {
        value::token(t).is_ok() && value::token(s).is_ok() && !s.contains('/')
    });
    if ok {
        Ok(vec![v.to_owned()])
    } else {
        Err("expected a MIME type such as text/html".to_owned())
    }
}

/// Space- or comma-separated MIME types (`*` alone: every type).
fn mime_types(v: &str) -> Result<Vec<String>, String> {
    let types: Vec<&str> = v.split([' ', ',']).filter(|t| !t.is_empty()).collect();
    if types == ["*"] {
        return Ok(vec!["*".to_owned()]);
    }
    if types.is_empty() {
        return Err("expected MIME types such as \"application/json text/css\"".to_owned());
    }
    types
        .iter()
        .map(|t| mime_type(t).map(|mut m| m.remove(0)))
        .collect()
}

/// A hash size (NGINX rounds it up to what the CPU's cache line needs).
fn hash_size(v: &str) -> Result<Vec<String>, String> {
    let n = value::integer(v, 32, 1 << 20)?;
    Ok(vec![n.to_string()])
}

fn streams(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![value::integer(v, 1, 65_536)?.to_string()])
}

fn tries(v: &str) -> Result<Vec<String>, String> {
    Ok(vec![value::integer(v, 0, 100)?.to_string()])
}

/// Bytes (per second, for `limit-rate`); 0 means no limit and renders nothing.
fn bytes(v: &str) -> Result<Vec<String>, String> {
    let n = value::integer(v, 0, i32::MAX as u32)?;
    Ok(if n == 0 {
        Vec::new()
    } else {
        vec![n.to_string()]
    })
}

fn kilobytes(v: &str) -> Result<Vec<String>, String> {
    let n = value::integer(v, 0, 1 << 20)?;
    Ok(if n == 0 {
        Vec::new()
    } else {
        vec![format!("{n}k")]
    })
}

/// `allow-backend-server-header`: true passes the backend's `Server` header.
fn server_header(v: &str) -> Result<Vec<String>, String> {
    Ok(if value::boolean(v)? {
        vec!["Server".to_owned()]
    } else {
        Vec::new()
    })
}

/// TLS versions this OpenSSL offers; SSLv2 and SSLv3 are refused.
fn ssl_protocols(v: &str) -> Result<Vec<String>, String> {
    const KNOWN: [&str; 4] = ["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];
    let out: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
    if out.is_empty() {
        return Err("expected versions such as \"TLSv1.2 TLSv1.3\"".to_owned());
    }
    match out.iter().find(|p| !KNOWN.contains(&p.as_str())) {
        Some(p) => Err(format!("{p:?} is not one of {}", KNOWN.join(", "))),
        None => Ok(out),
    }
}

/// An OpenSSL cipher string: names, `:`, `+`, `!`, `-`, `@` and `=`.
fn ssl_ciphers(v: &str) -> Result<Vec<String>, String> {
    crate::annotations::value::cipher_list(v).map(|c| vec![c])
}

/// `auto` or curve names separated by `:`.
fn ecdh_curve(v: &str) -> Result<Vec<String>, String> {
    let ok = !v.is_empty()
        && v.split(':').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(vec![v.to_owned()])
    } else {
        Err("expected auto or curves such as X25519:prime256v1".to_owned())
    }
}

/// `auto`, or one bit mask per worker.
fn cpu_affinity(v: &str) -> Result<Vec<String>, String> {
    let masks: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
    let ok = !masks.is_empty()
        && (masks == ["auto"]
            || masks
                .iter()
                .all(|m| m.len() <= 64 && m.bytes().all(|b| b == b'0' || b == b'1')));
    if ok {
        Ok(masks)
    } else {
        Err("expected auto or bit masks such as \"0001 0010\"".to_owned())
    }
}

/// Comma-separated IPv4 and IPv6 addresses, without repeats.
fn addresses(v: &str) -> Result<Vec<std::net::IpAddr>, String> {
    let mut out = Vec::new();
    for a in v.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let ip: std::net::IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

/// Comma-separated request paths (`/health`), matched exactly.
fn paths(v: &str) -> Result<Vec<String>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let ok = p.starts_with('/')
                && p.len() <= 1024
                && !p
                    .chars()
                    .any(|c| c.is_control() || c.is_whitespace() || "\"'`;{}\\".contains(c));
            ok.then(|| p.to_owned())
                .ok_or_else(|| format!("{p:?} is not a path such as /health"))
        })
        .collect()
}

/// `auto` or a number of workers.
fn workers(v: &str) -> Result<String, String> {
    if v == "auto" {
        return Ok(v.to_owned());
    }
    Ok(value::integer(v, 1, 1024)?.to_string())
}

fn log_level(v: &str) -> Result<String, String> {
    const LEVELS: [&str; 8] = [
        "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg",
    ];
    if LEVELS.contains(&v) {
        Ok(v.to_owned())
    } else {
        Err(format!("expected one of {}", LEVELS.join(", ")))
    }
}

/// Comma-separated header names.
fn header_names(v: &str) -> Result<Vec<String>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(value::token)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)]) -> (HttpKeys, Vec<(&'static str, String, String)>) {
        let mut invalid = Vec::new();
        let keys = read(
            |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v),
            &mut invalid,
        );
        (keys, invalid)
    }

    fn http(keys: &HttpKeys, name: &str) -> Option<Vec<String>> {
        keys.http
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.args.clone())
    }

    #[test]
    fn defaults_are_ingress_nginx_s() {
        let (k, invalid) = check(&[]);
        assert!(invalid.is_empty());
        assert_eq!(http(&k, "server_tokens"), Some(vec!["off".to_owned()]));
        assert_eq!(http(&k, "default_type"), Some(vec!["text/html".to_owned()]));
        assert_eq!(
            http(&k, "proxy_next_upstream_tries"),
            Some(vec!["3".to_owned()])
        );
        assert_eq!(
            http(&k, "proxy_next_upstream"),
            Some(vec!["error".into(), "timeout".into()])
        );
        assert_eq!(http(&k, "limit_rate"), None);
        assert!(k.http2 && k.access_log && k.gzip.is_none());
    }

    #[test]
    fn values_become_typed_arguments() {
        let (k, invalid) = check(&[
            ("client-header-timeout", "30"),
            ("ssl-protocols", "TLSv1.3"),
            ("retry-non-idempotent", "true"),
            ("use-gzip", "true"),
            ("gzip-types", "application/json, text/css"),
            ("hide-headers", "X-Powered-By, Server-Timing"),
            ("worker-processes", "3"),
        ]);
        assert!(invalid.is_empty(), "{invalid:?}");
        assert_eq!(
            http(&k, "client_header_timeout"),
            Some(vec!["30s".to_owned()])
        );
        assert_eq!(http(&k, "ssl_protocols"), Some(vec!["TLSv1.3".to_owned()]));
        assert_eq!(
            http(&k, "proxy_next_upstream"),
            Some(vec![
                "error".into(),
                "timeout".into(),
                "non_idempotent".into()
            ])
        );
        assert_eq!(k.gzip.unwrap().types, ["application/json", "text/css"]);
        assert_eq!(k.hide_headers, ["X-Powered-By", "Server-Timing"]);
        assert_eq!(k.worker_processes.as_deref(), Some("3"));
    }

    #[test]
    fn hostile_values_are_refused_and_the_default_kept() {
        for (key, v) in [
            ("ssl-protocols", "SSLv3"),
            ("ssl-ciphers", "ALL; include /etc/passwd"),
            ("default-type", "text/html; charset"),
            ("gzip-disable", "msie6\"; root /"),
            ("hide-headers", "X-A\r\nX-B"),
            ("worker-processes", "0"),
            ("error-log-level", "debug;"),
            ("worker-cpu-affinity", "0012"),
        ] {
            let (k, invalid) = check(&[(key, v)]);
            assert_eq!(invalid.len(), 1, "{key}: {v}");
            assert_eq!(invalid[0].0, key);
            let (d, _) = check(&[]);
            assert_eq!(k, d, "{key}: the default is kept");
        }
    }
}
