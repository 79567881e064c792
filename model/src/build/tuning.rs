//! The ConfigMap's NGINX tuning keys (connections, buffers, TLS sessions, upstream
//! keepalive), with ingress-nginx's defaults: a migrating user's ConfigMap means
//! what it meant, and one without these keys gets what ingress-nginx rendered.
//! Every value is typed (a number in its range, an NGINX size or time); an invalid
//! one is reported on the ConfigMap and the default kept.

use serde::{Deserialize, Serialize};

use crate::annotations::value;

/// The tuning the templates render.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tuning {
    /// `keep-alive`: seconds an idle client connection is kept (`keepalive_timeout`).
    pub keep_alive: u32,
    /// `keep-alive-requests`: requests per client connection.
    pub keep_alive_requests: u32,
    /// `client-header-buffer-size`.
    pub client_header_buffer_size: String,
    /// `client-body-buffer-size`: bodies above it go to a temporary file.
    pub client_body_buffer_size: String,
    /// `large-client-header-buffers` (`number size`): the number.
    pub large_client_header_buffers: u32,
    /// The size of each of them.
    pub large_client_header_buffer_size: String,
    /// `ssl-buffer-size`.
    pub ssl_buffer_size: String,
    /// `ssl-session-cache`: whether TLS sessions are cached.
    pub ssl_session_cache: bool,
    /// `ssl-session-cache-size`.
    pub ssl_session_cache_size: String,
    /// `ssl-session-tickets` (off, as ingress-nginx: tickets without key rotation
    /// weaken forward secrecy).
    pub ssl_session_tickets: bool,
    /// `ssl-session-ticket-key`: the key every replica encrypts tickets with, so a
    /// session resumes on any of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_session_ticket_key: Option<crate::model::SecretFile>,
    /// `ssl-session-timeout`.
    pub ssl_session_timeout: String,
    /// `upstream-keepalive-connections`: idle connections to backends per worker.
    pub upstream_keepalive_connections: u32,
    /// `upstream-keepalive-requests`.
    pub upstream_keepalive_requests: u32,
    /// `upstream-keepalive-timeout`, seconds.
    pub upstream_keepalive_timeout: u32,
    /// `variables-hash-bucket-size`.
    pub variables_hash_bucket_size: u32,
    /// `variables-hash-max-size`.
    pub variables_hash_max_size: u32,
    /// `enable-multi-accept`.
    pub multi_accept: bool,
    /// `max-worker-connections`.
    pub worker_connections: u32,
    /// `disable-ipv6`: listen on IPv4 only (default: IPv6 too, where the kernel has it).
    pub disable_ipv6: bool,
    /// `reuse-port`: a listening socket per worker (`reuseport`), so the kernel
    /// spreads connections over the workers. Off by default, unlike ingress-nginx:
    /// with it, a second NGINX can bind the same ports (the orphaned workers of a
    /// master that crashed keep theirs) and silently share the traffic with its
    /// stale configuration; Ferrule's restart after a crash relies on the bind
    /// being exclusive.
    pub reuse_port: bool,
    /// `max-worker-open-files` (`worker_rlimit_nofile`); 0: the limit NGINX is
    /// started with (ingress-nginx derives one from it; a container's is ample).
    pub max_worker_open_files: u32,
    /// `enable-aio-write`: temporary files are written by a thread pool (where
    /// answers are buffered: the template starts the pool only there).
    pub enable_aio_write: bool,
    /// `enable-access-log-for-default-backend`: log the requests of the catch-all
    /// server too (default off: scanners' noise).
    pub enable_access_log_for_default_backend: bool,
    /// `access-log-params`: `access_log`'s parameters (`buffer=`, `flush=`, `gzip`).
    /// Buffered by default, unlike ingress-nginx (none): one `write()` per request
    /// was most of what the access log cost. An empty value writes every line at once.
    pub access_log_params: Vec<String>,
    /// `log-format-upstream`: the access log's format (NGINX's `log_format` text,
    /// variables and all: the ConfigMap is the administrator's). The default is
    /// ingress-nginx's `upstreaminfo` with Ferrule's variables.
    pub log_format: String,
    /// `log-format-escape-json` (`escape=json`) or `log-format-escape-none`.
    pub log_escape: Option<String>,
}

/// ingress-nginx's `upstreaminfo` format: `[$proxy_upstream_name]` is the backend
/// (`namespace_service_port`), the alternative (canary) upstream is left empty, and
/// the request id is the one sent to the backend.
pub const UPSTREAMINFO: &str = "$remote_addr - $remote_user [$time_local] \"$request\" \
    $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $request_length \
    $request_time [$ferrule_backend] [] $upstream_addr $upstream_response_length \
    $upstream_response_time $upstream_status $ferrule_request_id";

impl Default for Tuning {
    /// ingress-nginx's defaults (its `config.go`).
    fn default() -> Self {
        Tuning {
            keep_alive: 75,
            keep_alive_requests: 1000,
            client_header_buffer_size: "1k".to_owned(),
            client_body_buffer_size: "8k".to_owned(),
            large_client_header_buffers: 4,
            large_client_header_buffer_size: "8k".to_owned(),
            ssl_buffer_size: "4k".to_owned(),
            ssl_session_cache: true,
            ssl_session_cache_size: "10m".to_owned(),
            ssl_session_tickets: false,
            ssl_session_ticket_key: None,
            ssl_session_timeout: "10m".to_owned(),
            upstream_keepalive_connections: 320,
            upstream_keepalive_requests: 1000,
            upstream_keepalive_timeout: 60,
            variables_hash_bucket_size: 256,
            variables_hash_max_size: 2048,
            multi_accept: true,
            worker_connections: 16384,
            disable_ipv6: false,
            reuse_port: false,
            max_worker_open_files: 0,
            enable_aio_write: true,
            enable_access_log_for_default_backend: false,
            access_log_params: vec!["buffer=32k".to_owned(), "flush=1s".to_owned()],
            log_format: UPSTREAMINFO.to_owned(),
            log_escape: None,
        }
    }
}

/// The keys [`Tuning::set`] reads.
pub(crate) const KEYS: &[&str] = &[
    "keep-alive",
    "keep-alive-requests",
    "client-header-buffer-size",
    "client-body-buffer-size",
    "large-client-header-buffers",
    "ssl-buffer-size",
    "ssl-session-cache",
    "ssl-session-cache-size",
    "ssl-session-tickets",
    "ssl-session-ticket-key",
    "ssl-session-timeout",
    "upstream-keepalive-connections",
    "upstream-keepalive-requests",
    "upstream-keepalive-timeout",
    "variables-hash-bucket-size",
    "variables-hash-max-size",
    "enable-multi-accept",
    "max-worker-connections",
    "disable-ipv6",
    "reuse-port",
    "max-worker-open-files",
    "enable-aio-write",
    "enable-access-log-for-default-backend",
    "access-log-params",
    "log-format-upstream",
    "log-format-escape-json",
    "log-format-escape-none",
];

impl Tuning {
    /// Sets `key` (one of [`KEYS`]) from `v`; an error says why the value is refused.
    pub(crate) fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let v = v.trim();
        match key {
            "keep-alive" => self.keep_alive = value::integer(v, 0, 86_400)?,
            "keep-alive-requests" => self.keep_alive_requests = value::integer(v, 1, 1 << 30)?,
            "client-header-buffer-size" => self.client_header_buffer_size = buffer(v)?,
            "client-body-buffer-size" => self.client_body_buffer_size = buffer(v)?,
            "large-client-header-buffers" => {
                let (n, size) = v
                    .split_once(' ')
                    .ok_or("expected a number and a size, e.g. \"4 8k\"")?;
                self.large_client_header_buffers = value::integer(n.trim(), 1, 64)?;
                self.large_client_header_buffer_size = buffer(size.trim())?;
            }
            "ssl-buffer-size" => self.ssl_buffer_size = buffer(v)?,
            "ssl-session-cache" => self.ssl_session_cache = value::boolean(v)?,
            "ssl-session-cache-size" => self.ssl_session_cache_size = buffer(v)?,
            "ssl-session-tickets" => self.ssl_session_tickets = value::boolean(v)?,
            // Empty: none, as ingress-nginx's default.
            "ssl-session-ticket-key" if v.is_empty() => self.ssl_session_ticket_key = None,
            "ssl-session-ticket-key" => self.ssl_session_ticket_key = Some(ticket_key(v)?),
            "ssl-session-timeout" => self.ssl_session_timeout = value::time(v)?,
            "upstream-keepalive-connections" => {
                self.upstream_keepalive_connections = value::integer(v, 0, 1 << 20)?;
            }
            "upstream-keepalive-requests" => {
                self.upstream_keepalive_requests = value::integer(v, 1, 1 << 30)?;
            }
            "upstream-keepalive-timeout" => {
                self.upstream_keepalive_timeout = value::integer(v, 1, 86_400)?;
            }
            "variables-hash-bucket-size" => {
                self.variables_hash_bucket_size = value::power_of_two(v, 32, 4096)?;
            }
            "variables-hash-max-size" => {
                self.variables_hash_max_size = value::integer(v, 64, 1 << 20)?;
            }
            "enable-multi-accept" => self.multi_accept = value::boolean(v)?,
            "disable-ipv6" => self.disable_ipv6 = value::boolean(v)?,
            "access-log-params" => self.access_log_params = access_log_params(v)?,
            "log-format-upstream" => self.log_format = log_format(v)?,
            "log-format-escape-json" => {
                if value::boolean(v)? {
                    self.log_escape = Some("json".to_owned());
                }
            }
            "log-format-escape-none" => {
                if value::boolean(v)? && self.log_escape.is_none() {
                    self.log_escape = Some("none".to_owned());
                }
            }
            "reuse-port" => self.reuse_port = value::boolean(v)?,
            "max-worker-open-files" => {
                let n = value::integer(v, 0, 1 << 24)?;
                self.max_worker_open_files = if n == 0 { 0 } else { n.max(1024) };
            }
            "enable-aio-write" => self.enable_aio_write = value::boolean(v)?,
            "enable-access-log-for-default-backend" => {
                self.enable_access_log_for_default_backend = value::boolean(v)?;
            }
            "max-worker-connections" => {
                // 0 means ingress-nginx's automatic value; Ferrule's default is that.
                let n = value::integer(v, 0, 1 << 20)?;
                self.worker_connections = if n == 0 { 16384 } else { n.max(64) };
            }
            _ => return Err(format!("{key} is not a tuning key")),
        }
        Ok(())
    }
}

/// A buffer size: a positive NGINX size (`8k`, `1m`), at most 1 GiB.
fn buffer(v: &str) -> Result<String, String> {
    let s = value::size(v)?;
    let bytes = value::size_bytes(&s);
    if bytes == 0 || bytes > 1 << 30 {
        return Err("expected a size between 1 byte and 1g".to_owned());
    }
    Ok(s)
}

/// `log-format-upstream` (and `-stream`): one line of printable text (NGINX checks
/// the variables; an unknown one holds the ConfigMap back, as any shared input).
pub(super) fn log_format(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 8192 {
        return Err("expected a format of 1 to 8192 bytes".to_owned());
    }
    if let Some(c) = v.chars().find(|c| c.is_control()) {
        return Err(format!("character {c:?} is not allowed"));
    }
    Ok(v.to_owned())
}

/// `access-log-params`: `buffer=SIZE`, `flush=TIME`, `gzip` or `gzip=1..9`,
/// separated by spaces or commas, each at most once.
fn access_log_params(v: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for p in v.split([' ', ',']).filter(|p| !p.is_empty()) {
        let (name, arg) = p.split_once('=').unwrap_or((p, ""));
        let ok = match name {
            "buffer" => buffer(arg).is_ok(),
            "flush" => value::time(arg).is_ok(),
            "gzip" => {
                arg.is_empty() || matches!(arg, "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8" | "9")
            }
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{p:?} is not one of buffer=SIZE, flush=TIME, gzip[=1-9]"
            ));
        }
        if out.iter().any(|q| q.split('=').next() == Some(name)) {
            return Err(format!("{name} given twice"));
        }
        out.push(p.to_owned());
    }
    if out.iter().any(|p| p.starts_with("flush"))
        && !out
            .iter()
            .any(|p| p.starts_with("buffer") || p.starts_with("gzip"))
    {
        return Err("flush needs buffer= or gzip".to_owned());
    }
    Ok(out)
}

/// `ssl-session-ticket-key`: 48 or 80 bytes, base64 (`openssl rand 80 | openssl
/// enc -A -base64`), as NGINX's `ssl_session_ticket_key` file holds them.
fn ticket_key(v: &str) -> Result<crate::model::SecretFile, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v)
        .map_err(|_| "expected base64, e.g. of `openssl rand 80`".to_owned())?;
    if bytes.len() != 48 && bytes.len() != 80 {
        return Err(format!(
            "the key is {} bytes; NGINX takes 48 or 80",
            bytes.len()
        ));
    }
    Ok(crate::model::SecretFile::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(key, value, Ok(what the template gets) | Err(part of the reason))`.
    fn check(cases: &[(&str, &str, Result<&str, &str>)]) {
        for (key, v, want) in cases {
            let mut t = Tuning::default();
            let got = t.set(key, v).map(|()| {
                let json = serde_json::to_value(&t).unwrap();
                let field = key
                    .replace("enable-multi-accept", "multi_accept")
                    .replace("max-worker-connections", "worker_connections")
                    .replace("log-format-upstream", "log_format")
                    .replace("log-format-escape-json", "log_escape")
                    .replace("log-format-escape-none", "log_escape")
                    .replace('-', "_");
                let text = |f: &str| match &json[f] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if field == "large_client_header_buffers" {
                    format!(
                        "{} {}",
                        text(&field),
                        text("large_client_header_buffer_size")
                    )
                } else {
                    text(&field)
                }
            });
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, *w, "{key}: {v}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{key}: {v}: {e}"),
                (got, want) => panic!("{key}: {v}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn values_are_typed() {
        check(&[
            ("keep-alive", "30", Ok("30")),
            ("keep-alive", "30s", Err("integer")),
            ("keep-alive-requests", "0", Err("between 1")),
            ("client-body-buffer-size", "16K", Ok("16k")),
            ("client-body-buffer-size", "0", Err("between 1 byte")),
            ("client-body-buffer-size", "2g", Err("between 1 byte")),
            ("client-body-buffer-size", "8k; deny all", Err("size")),
            ("large-client-header-buffers", "8 16k", Ok("8 16k")),
            (
                "large-client-header-buffers",
                "16k",
                Err("a number and a size"),
            ),
            (
                "large-client-header-buffers",
                "100 8k",
                Err("between 1 and 64"),
            ),
            ("ssl-session-tickets", "true", Ok("true")),
            (
                "ssl-session-ticket-key",
                "not base64!",
                Err("expected base64"),
            ),
            (
                "ssl-session-ticket-key",
                "YWJj",
                Err("3 bytes; NGINX takes 48 or 80"),
            ),
            ("ssl-session-timeout", "1h", Ok("1h")),
            ("ssl-session-timeout", "1 h", Err("a time")),
            ("ssl-session-timeout", "10y", Err("a time")),
            ("upstream-keepalive-connections", "0", Ok("0")),
            ("variables-hash-bucket-size", "128", Ok("128")),
            ("variables-hash-bucket-size", "100", Err("power of two")),
            ("enable-multi-accept", "false", Ok("false")),
            ("disable-ipv6", "true", Ok("true")),
            ("max-worker-connections", "0", Ok("16384")),
            (
                "log-format-upstream",
                "$remote_addr \"$request\"",
                Ok("$remote_addr \"$request\""),
            ),
            ("log-format-upstream", "a\nb", Err("not allowed")),
            ("log-format-upstream", "", Err("1 to 8192")),
            ("log-format-escape-json", "true", Ok("json")),
            ("log-format-escape-none", "true", Ok("none")),
            ("log-format-escape-json", "false", Ok("null")),
            ("log-format-escape-json", "yes", Err("true")),
            ("max-worker-connections", "4096", Ok("4096")),
            ("reuse-port", "true", Ok("true")),
            ("reuse-port", "yes", Err("expected \"true\"")),
            ("max-worker-open-files", "0", Ok("0")),
            ("max-worker-open-files", "10", Ok("1024")),
            ("max-worker-open-files", "65536", Ok("65536")),
            ("max-worker-open-files", "-1", Err("integer")),
            ("enable-aio-write", "false", Ok("false")),
            ("enable-access-log-for-default-backend", "true", Ok("true")),
            (
                "access-log-params",
                "buffer=16k, gzip flush=5m",
                Ok(r#"["buffer=16k","gzip","flush=5m"]"#),
            ),
            ("access-log-params", "", Ok("[]")),
            ("access-log-params", "flush=1s", Err("flush needs")),
            ("access-log-params", "buffer=1k buffer=2k", Err("twice")),
            ("access-log-params", "if=$loggable", Err("is not one of")),
            ("access-log-params", "gzip=10", Err("is not one of")),
            ("access-log-params", "buffer=8k;", Err("is not one of")),
        ]);
    }
}
