//! The registry of the controller ConfigMap's keys: every key of ingress-nginx's
//! `configmap.md`, with what Ferrule does with it. The ConfigMap reader
//! (`build/config.rs`) reports each key it does not implement from here, and the
//! table in `docs/configmap.md` is generated from it (a test keeps them equal).

/// What Ferrule does with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Implemented; `example` is a valid value (the registry's tests read it).
    Supported {
        /// A value the reader accepts.
        example: &'static str,
    },
    /// Needs an NGINX module Debian's NGINX does not ship.
    NeedsModule(&'static str),
    /// Means nothing in Ferrule; the reason says why.
    NotApplicable(&'static str),
}

/// One ConfigMap key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigKey {
    /// The key.
    pub name: &'static str,
    /// What Ferrule does with it.
    pub status: Status,
    /// Whether it restricts who may reach a backend: not honoured, it is an error
    /// (the hosts would be served without the restriction).
    pub restricts: bool,
    /// One line of documentation.
    pub doc: &'static str,
}

const fn yes(name: &'static str, example: &'static str, doc: &'static str) -> ConfigKey {
    ConfigKey {
        name,
        status: Status::Supported { example },
        restricts: false,
        doc,
    }
}

const fn module(name: &'static str, m: &'static str, doc: &'static str) -> ConfigKey {
    ConfigKey {
        name,
        status: Status::NeedsModule(m),
        restricts: false,
        doc,
    }
}

const fn na(name: &'static str, why: &'static str) -> ConfigKey {
    ConfigKey {
        name,
        status: Status::NotApplicable(why),
        restricts: false,
        doc: "",
    }
}

/// The same key, restricting access.
const fn restricting(k: ConfigKey) -> ConfigKey {
    ConfigKey {
        restricts: true,
        ..k
    }
}

const TRACING: &str = "OpenTelemetry/Jaeger";
const GEOIP: &str = "GeoIP";

/// Every key, in the order of ingress-nginx's `configmap.md`.
#[rustfmt::skip]
pub const KEYS: &[ConfigKey] = &[
    yes("add-headers", "ingress-nginx/custom-headers", "response headers from another ConfigMap (namespace/name)"),
    yes("allow-backend-server-header", "true", "pass the backend's Server header"),
    na("allow-cross-namespace-resources", "Ferrule never reads another namespace's objects for an Ingress"),
    yes("allow-snippet-annotations", "false", "honour snippet annotations (or --allow-snippet-annotations)"),
    na("annotations-risk-level", "annotations are typed; snippets have their own switch"),
    na("annotation-value-word-blocklist", "annotations are typed and quoted; snippets have their own switch"),
    yes("hide-headers", "X-Powered-By,Server-Timing", "response headers of backends not passed to clients"),
    yes("access-log-params", "buffer=64k flush=5s", "access_log parameters (buffered by default)"),
    na("access-log-path", "logs go to stdout and stderr in the container"),
    na("http-access-log-path", "logs go to stdout and stderr in the container"),
    na("stream-access-log-path", "logs go to stdout and stderr in the container"),
    yes("enable-access-log-for-default-backend", "true", "log the catch-all server's requests"),
    na("error-log-path", "logs go to stdout and stderr in the container"),
    restricting(module("enable-modsecurity", "ModSecurity", "the ModSecurity WAF")),
    restricting(module("modsecurity-snippet", "ModSecurity", "ModSecurity rules")),
    restricting(module("enable-owasp-modsecurity-crs", "ModSecurity", "the OWASP core rule set")),
    yes("client-header-buffer-size", "2k", "client_header_buffer_size"),
    yes("client-header-timeout", "30", "seconds to read a request's header (client_header_timeout)"),
    yes("client-body-buffer-size", "16k", "client_body_buffer_size"),
    yes("client-body-timeout", "30", "seconds between two reads of a request body (client_body_timeout)"),
    yes("disable-access-log", "true", "no access log"),
    yes("disable-ipv6", "true", "listen on IPv4 only"),
    na("disable-ipv6-dns", "NGINX resolves only mirror targets with variables, with the pod's nameservers"),
    yes("enable-underscores-in-headers", "true", "accept header names with underscores"),
    yes("enable-ocsp", "true", "staple OCSP responses (the Lua balancer)"),
    yes("ignore-invalid-headers", "false", "drop header lines with invalid names"),
    yes("retry-non-idempotent", "true", "retry POST, LOCK and PATCH on another endpoint too"),
    yes("error-log-level", "warn", "error_log level"),
    na("http2-max-field-size", "obsolete since NGINX 1.19.7: large-client-header-buffers"),
    na("http2-max-header-size", "obsolete since NGINX 1.19.7: large-client-header-buffers"),
    na("http2-max-requests", "obsolete since NGINX 1.19.7: keep-alive-requests"),
    yes("http2-max-concurrent-streams", "64", "concurrent HTTP/2 streams per connection"),
    yes("hsts", "false", "Strict-Transport-Security on HTTPS answers"),
    yes("hsts-include-subdomains", "false", "includeSubDomains in HSTS"),
    yes("hsts-max-age", "600", "HSTS max-age"),
    yes("hsts-preload", "true", "preload in HSTS"),
    yes("keep-alive", "30", "seconds an idle client connection is kept"),
    yes("keep-alive-requests", "100", "requests per client connection"),
    yes("large-client-header-buffers", "4 16k", "large_client_header_buffers"),
    yes("log-format-escape-none", "true", "access log without escaping"),
    yes("log-format-escape-json", "true", "access log escaped for JSON"),
    yes("log-format-upstream", "$remote_addr $status", "access log format"),
    yes("log-format-stream", "$remote_addr $protocol $status", "access log format of TCP/UDP services"),
    yes("enable-multi-accept", "false", "multi_accept"),
    yes("max-worker-connections", "4096", "worker_connections"),
    yes("max-worker-open-files", "65536", "worker_rlimit_nofile"),
    yes("map-hash-bucket-size", "128", "map_hash_bucket_size"),
    na("nginx-status-ipv4-whitelist", "NGINX's status is on a unix socket only the controller reads"),
    na("nginx-status-ipv6-whitelist", "NGINX's status is on a unix socket only the controller reads"),
    yes("proxy-real-ip-cidr", "10.0.0.0/8", "proxies trusted for the client address"),
    yes("proxy-set-headers", "ingress-nginx/custom-headers", "headers to backends from another ConfigMap (namespace/name)"),
    yes("server-name-hash-max-size", "4096", "server_names_hash_max_size (at least what the hosts need)"),
    yes("server-name-hash-bucket-size", "128", "server_names_hash_bucket_size (at least what the hosts need)"),
    yes("proxy-headers-hash-max-size", "1024", "proxy_headers_hash_max_size"),
    yes("proxy-headers-hash-bucket-size", "128", "proxy_headers_hash_bucket_size"),
    yes("reuse-port", "true", "a listening socket per worker (off by default, see the tuning docs)"),
    yes("server-tokens", "true", "the NGINX version in the Server header and error pages"),
    yes("ssl-ciphers", "ECDHE-RSA-AES128-GCM-SHA256", "TLS 1.2 cipher suites"),
    yes("ssl-ecdh-curve", "X25519:prime256v1", "ssl_ecdh_curve"),
    yes("ssl-dh-param", "ingress-nginx/dhparam", "DH parameters (dhparam.pem of a Secret, namespace/name) for DHE ciphers"),
    yes("ssl-protocols", "TLSv1.3", "TLS protocol versions"),
    yes("ssl-session-cache", "false", "TLS session cache"),
    yes("ssl-session-cache-size", "20m", "its size"),
    yes("ssl-session-tickets", "true", "TLS session tickets"),
    yes("ssl-session-ticket-key", "", "the key of TLS session tickets (48 or 80 bytes, base64), shared by the replicas"),
    yes("ssl-session-timeout", "1h", "TLS session lifetime"),
    yes("ssl-buffer-size", "16k", "ssl_buffer_size"),
    yes("use-proxy-protocol", "true", "PROXY protocol on the listeners"),
    yes("proxy-protocol-header-timeout", "5s", "time to wait for the PROXY line on the stream listeners (TLS router, TCP services)"),
    yes("enable-aio-write", "false", "aio_write; the thread pool (aio threads) runs only where answers are buffered"),
    yes("use-gzip", "true", "gzip responses"),
    module("use-geoip", GEOIP, "GeoIP variables"),
    module("use-geoip2", GEOIP, "GeoIP2 variables"),
    module("geoip2-autoreload-in-minutes", GEOIP, "GeoIP2 database reload"),
    module("enable-brotli", "Brotli", "brotli responses"),
    module("brotli-level", "Brotli", "brotli level"),
    module("brotli-min-length", "Brotli", "brotli minimum length"),
    module("brotli-types", "Brotli", "brotli MIME types"),
    yes("use-http2", "false", "HTTP/2 on the HTTPS port"),
    yes("gzip-disable", "msie6", "user agents not sent gzip"),
    yes("gzip-level", "5", "gzip compression level"),
    yes("gzip-min-length", "1024", "smallest response gzipped"),
    yes("gzip-types", "application/json text/css", "MIME types gzipped"),
    yes("worker-processes", "2", "worker processes (auto: one per CPU)"),
    yes("worker-cpu-affinity", "auto", "worker_cpu_affinity"),
    na("worker-shutdown-timeout", "240 s: the controller's drain on shutdown waits for it"),
    na("enable-serial-reloads", "reloads are serial: one reload task"),
    yes("load-balance", "ewma", "default balancing algorithm"),
    yes("variables-hash-bucket-size", "512", "variables_hash_bucket_size"),
    yes("variables-hash-max-size", "4096", "variables_hash_max_size"),
    yes("upstream-keepalive-connections", "64", "idle connections to backends per worker"),
    yes("upstream-keepalive-time", "30m", "lifetime of a backend connection"),
    yes("upstream-keepalive-timeout", "30", "idle timeout of backend connections"),
    yes("upstream-keepalive-requests", "100", "requests per backend connection"),
    yes("limit-conn-zone-variable", "$binary_remote_addr", "what tells clients apart in the limit-* keys"),
    yes("proxy-stream-timeout", "10m", "idle timeout of TCP/UDP service connections"),
    yes("proxy-stream-next-upstream", "false", "a TCP/UDP connection that cannot reach an endpoint tries the next (Ferrule's stream module)"),
    yes("proxy-stream-next-upstream-timeout", "30s", "how long a TCP/UDP connection may go on trying endpoints"),
    yes("proxy-stream-next-upstream-tries", "2", "endpoints a TCP/UDP connection tries (0: up to 32)"),
    yes("proxy-stream-responses", "2", "datagrams a UDP backend answers per request"),
    yes("bind-address", "127.0.0.1,::1", "addresses the proxy ports listen on (instead of --listen-address)"),
    yes("use-forwarded-headers", "true", "trust X-Forwarded-* from proxy-real-ip-cidr"),
    yes("enable-real-ip", "true", "client address from forwarded-for-header"),
    yes("forwarded-for-header", "X-Real-IP", "header with the client address"),
    yes("forwarded-for-proxy-protocol-header", "X-Client-Via-LB", "header NGINX sets for the client address with use-proxy-protocol and use-forwarded-headers"),
    yes("compute-full-forwarded-for", "true", "append to X-Forwarded-For"),
    yes("proxy-add-original-uri-header", "true", "X-Original-URI to backends"),
    yes("generate-request-id", "false", "an X-Request-ID for requests without one"),
    module("jaeger-collector-host", TRACING, "tracing"),
    module("jaeger-collector-port", TRACING, "tracing"),
    module("jaeger-endpoint", TRACING, "tracing"),
    module("jaeger-service-name", TRACING, "tracing"),
    module("jaeger-propagation-format", TRACING, "tracing"),
    module("jaeger-sampler-type", TRACING, "tracing"),
    module("jaeger-sampler-param", TRACING, "tracing"),
    module("jaeger-sampler-host", TRACING, "tracing"),
    module("jaeger-sampler-port", TRACING, "tracing"),
    module("jaeger-trace-context-header-name", TRACING, "tracing"),
    module("jaeger-debug-header", TRACING, "tracing"),
    module("jaeger-baggage-header", TRACING, "tracing"),
    module("jaeger-trace-baggage-header-prefix", TRACING, "tracing"),
    module("enable-opentelemetry", TRACING, "tracing"),
    module("opentelemetry-trust-incoming-span", TRACING, "tracing"),
    module("opentelemetry-operation-name", TRACING, "tracing"),
    module("opentelemetry-config", TRACING, "tracing"),
    module("otlp-collector-host", TRACING, "tracing"),
    module("otlp-collector-port", TRACING, "tracing"),
    module("otel-max-queuesize", TRACING, "tracing"),
    module("otel-schedule-delay-millis", TRACING, "tracing"),
    module("otel-max-export-batch-size", TRACING, "tracing"),
    module("otel-service-name", TRACING, "tracing"),
    module("otel-sampler", TRACING, "tracing"),
    module("otel-sampler-parent-based", TRACING, "tracing"),
    module("otel-sampler-ratio", TRACING, "tracing"),
    yes("main-snippet", "worker_priority 0;", "raw NGINX text in the main context"),
    yes("http-snippet", "", "raw NGINX text in http (administrator-owned)"),
    yes("server-snippet", "", "raw NGINX text in every server"),
    yes("stream-snippet", "", "raw NGINX text in stream (with TCP/UDP services or --enable-ssl-passthrough)"),
    yes("location-snippet", "", "raw NGINX text in every location"),
    yes("custom-http-errors", "404,503", "statuses answered by the default backend (the status kept)"),
    yes("proxy-body-size", "8m", "client_max_body_size"),
    yes("proxy-connect-timeout", "10", "proxy_connect_timeout"),
    yes("proxy-read-timeout", "120", "proxy_read_timeout"),
    yes("proxy-send-timeout", "120", "proxy_send_timeout"),
    yes("proxy-buffers-number", "8", "number of response buffers (default of the annotation)"),
    yes("proxy-buffer-size", "8k", "size of each response buffer (default of the annotation)"),
    yes("proxy-busy-buffers-size", "16k", "busy response buffers (default of the annotation)"),
    yes("proxy-cookie-path", "/ /app/", "rewrite Set-Cookie paths (off or from to)"),
    yes("proxy-cookie-domain", "internal.svc example.com", "rewrite Set-Cookie domains (off or from to)"),
    yes("proxy-next-upstream", "error timeout http_502", "when a request goes to another endpoint"),
    yes("proxy-next-upstream-timeout", "10", "seconds for all tries"),
    yes("proxy-next-upstream-tries", "2", "tries at most"),
    yes("proxy-redirect-from", "off", "proxy_redirect (off, as ingress-nginx)"),
    yes("proxy-request-buffering", "off", "read the whole request body before proxying"),
    yes("ssl-redirect", "false", "default of the ssl-redirect annotation"),
    yes("force-ssl-redirect", "true", "default of the force-ssl-redirect annotation"),
    yes("denylist-source-range", "192.0.2.0/24", "clients refused everywhere without an own list"),
    yes("whitelist-source-range", "10.0.0.0/8", "clients allowed everywhere without an own list"),
    yes("skip-access-log-urls", "/health,/ready", "paths not logged"),
    yes("limit-rate", "1048576", "response bandwidth per connection, bytes per second"),
    yes("limit-rate-after", "1048576", "bytes sent before limit-rate applies"),
    na("lua-shared-dicts", "the balancer's shared memory is sized by the controller"),
    yes("http-redirect-code", "301", "status of the redirect to HTTPS (308)"),
    yes("proxy-buffering", "on", "buffer responses (off by default, as ingress-nginx)"),
    yes("limit-req-status-code", "429", "status of a rate-limited request"),
    yes("limit-conn-status-code", "429", "status of a connection-limited request"),
    yes("enable-syslog", "false", "access log to syslog"),
    yes("syslog-host", "syslog.example", "syslog server"),
    yes("syslog-port", "1514", "syslog port"),
    yes("no-tls-redirect-locations", "/.well-known/acme-challenge,/public", "paths whose locations never redirect to HTTPS"),
    yes("global-allowed-response-headers", "X-Team, X-Frame-Options", "header names the custom-headers annotation may set"),
    yes("global-auth-url", "http://auth.example/check", "external auth for every location"),
    yes("global-auth-method", "GET", "its method"),
    yes("global-auth-signin", "http://auth.example/signin", "its sign-in page"),
    yes("global-auth-signin-redirect-param", "rd", "its redirect parameter"),
    yes("global-auth-response-headers", "X-User", "headers from its answer"),
    yes("global-auth-request-redirect", "http://auth.example/", "its X-Auth-Request-Redirect"),
    yes("global-auth-snippet", "", "raw NGINX text in its location"),
    yes("global-auth-cache-key", "$remote_user", "its cache key"),
    yes("global-auth-cache-duration", "200 5m", "how long answers are cached"),
    yes("global-auth-always-set-cookie", "true", "Set-Cookie from the auth answer on every status"),
    yes("no-auth-locations", "/public", "paths the global auth does not cover"),
    restricting(yes("block-cidrs", "192.0.2.0/24", "clients refused (403) on every host")),
    restricting(yes("block-user-agents", "~*bot", "user agents refused (403) on every host")),
    restricting(yes("block-referers", "~*spam", "referers refused (403) on every host")),
    na("proxy-ssl-location-only", "proxy-ssl-* apply to the locations of the Ingress only, always"),
    yes("default-type", "application/octet-stream", "MIME type of answers without one"),
    yes("service-upstream", "true", "default of the service-upstream annotation"),
    yes("ssl-reject-handshake", "true", "refuse TLS for unknown hosts"),
    na("debug-connections", "NGINX is not built with debugging"),
    na("strict-validate-path-type", "paths are always validated for their pathType"),
    yes("grpc-buffer-size-kb", "8", "grpc_buffer_size in KB"),
    yes("relative-redirects", "true", "relative Location headers in NGINX's redirects"),
];

/// The descriptor of `name`, if ingress-nginx has such a key.
pub fn lookup(name: &str) -> Option<&'static ConfigKey> {
    KEYS.iter().find(|k| k.name == name)
}

/// The table of every key, for `docs/configmap.md`.
pub fn markdown_table() -> String {
    let mut out = String::from("| Key | Ferrule | What it does |\n| --- | --- | --- |\n");
    for k in KEYS {
        let status = match (k.status, k.restricts) {
            (Status::Supported { .. }, _) => "supported".to_owned(),
            (Status::NeedsModule(m), true) => format!("needs {m}: **an error**"),
            (Status::NeedsModule(m), false) => format!("needs {m}: ignored with a Warning"),
            (Status::NotApplicable(_), _) => "not applicable: a Warning".to_owned(),
        };
        let doc = match k.status {
            Status::NotApplicable(why) => why,
            _ => k.doc,
        };
        out.push_str(&format!("| `{}` | {status} | {doc} |\n", k.name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_listed_once_with_a_doc() {
        let mut seen = std::collections::BTreeSet::new();
        for k in KEYS {
            assert!(seen.insert(k.name), "{} listed twice", k.name);
            let doc = match k.status {
                Status::NotApplicable(why) => why,
                _ => k.doc,
            };
            assert!(!doc.is_empty() && !doc.contains('|'), "{}", k.name);
        }
    }
}
