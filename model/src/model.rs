//! The model: an immutable description of what NGINX must serve.
//!
//! Every collection is ordered (sorted vectors or `BTreeMap`s) so that the same
//! snapshot always produces the same value, the same JSON and the same hash.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::annotations::Satisfy;

use serde::{Deserialize, Serialize};

use crate::annotations::{
    Affinity, BackendProtocol, BackendTls, BasicAuth, Buffering, Canary, Cors, ExternalAuth,
    Forwarding, GlobalSourceRanges, LoadBalance, Mirror, RateLimits, Redirect, Snippet,
    SourceRanges,
};

/// Identifies a Kubernetes object that contributed to the model.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceRef {
    /// Kind, e.g. `Ingress`, `Service`, `Secret`, `ConfigMap`.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ResourceRef {
    /// A reference to an object of `kind` named `namespace/name`.
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// How bad a problem is: errors drop (part of) a resource, warnings only inform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The resource is served, but something is off (e.g. no ready endpoints).
    Warning,
    /// The resource, or the named part of it, is not served.
    Error,
}

/// Something wrong with one resource, found while building the model.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Problem {
    /// The resource the problem is reported on.
    pub resource: ResourceRef,
    /// Warning or error.
    pub severity: Severity,
    /// A stable, human readable message naming the field and the value.
    pub message: String,
    /// What the problem is about, for callers that act on problems without reading
    /// messages (the admission webhook denies `Invalid` ones). Last, so that problems
    /// sort as before by resource, severity and message.
    #[serde(default)]
    pub kind: ProblemKind,
}

/// What a [`Problem`] is about. The message says the same for people; this is for
/// code: the admission webhook refuses an Ingress with an `Invalid` problem and
/// admits one with any other kind, as a warning (`Tls` is refused with
/// `--admission-strict-tls`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    /// The resource itself asks for what is not valid or not allowed: an invalid
    /// annotation or ConfigMap value, an access restriction Ferrule does not
    /// implement, a snippet while snippets are disabled, an invalid host, path or
    /// pathType, a resource backend. Only a change of the resource fixes it.
    Invalid,
    /// An older resource already claims the same thing (a host + path, a host's
    /// certificate, the catch-all backend, a balancing setting of a Service port, a
    /// primary's canary): the oldest wins and the message names it.
    Conflict,
    /// A referenced object is missing or not ready: a Service or its port, ready
    /// endpoints, a canary's primary. It may appear later.
    Reference,
    /// A TLS Secret is missing, invalid or does not cover the host.
    Tls,
    /// Anything else: an annotation or ConfigMap key ignored with a warning, notes.
    #[default]
    Other,
}

/// The whole desired state of NGINX.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// Virtual servers, sorted by host; the catch-all server has host `_`. Shared:
    /// a model that differs in endpoints only (the fast path of the build) has the
    /// same servers, and the diff skips comparing them.
    pub servers: Arc<Vec<Server>>,
    /// Upstreams by name (`namespace_service_port`). Shared: the endpoint fast path
    /// of the build copies only the backends it changes, and comparing a shared one
    /// (diff, balancer client) is a pointer comparison.
    pub backends: BTreeMap<String, Arc<Backend>>,
    /// Certificates by name (`namespace/secret`). Shared like the servers: the
    /// endpoint fast path keeps them, and the balancer client skips the certificates
    /// of a model that shares them (and the servers) with the last one it posted.
    pub certificates: Arc<BTreeMap<String, Certificate>>,
    /// The `--default-ssl-certificate` Secret's certificate (a key into
    /// `certificates`) when it is valid: served by the catch-all server (unknown or
    /// absent SNI), by servers without TLS, and by TLS hosts without a valid
    /// certificate of their own. `None`: the controller's self-signed certificate.
    /// Left out of the encoding when unset, so that models without it keep their hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_certificate: Option<String>,
    /// Where unknown hosts and unmatched paths go: the catch-all Ingress's
    /// `spec.defaultBackend`, else `--default-backend-service`, else 404.
    pub default_backend: Target,
    /// TCP and UDP services (`--tcp-services-configmap`, `--udp-services-configmap`),
    /// sorted by protocol and port. Left out of the encoding when empty, so that
    /// models without them keep their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<Stream>,
    /// `ssl-passthrough` hosts (with `--enable-ssl-passthrough`), sorted by host.
    /// Left out of the encoding when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<Passthrough>,
    /// The `stream-snippet` annotations of the Ingresses served (snippets allowed,
    /// and a stream block rendered), oldest Ingress first. Left out of the encoding
    /// when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_snippets: Vec<StreamSnippet>,
    /// Settings shared by every server (from the controller ConfigMap).
    pub global: Global,
    /// Problems found while building, sorted.
    pub problems: Vec<Problem>,
    /// The earliest expiry (seconds since the Unix epoch) of the certificates the
    /// build found valid, used or not: the same inputs give the same model for any
    /// `now` up to it. Left out of the encoding when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_valid_until: Option<i64>,
    /// [`Model::hash`], computed on first use. Not part of the model: skipped by
    /// serde, equal to any other, and not carried over by `clone`.
    #[serde(skip)]
    pub hash_memo: HashMemo,
}

/// The memoised hash of a model. A model is not changed once built (the controller
/// shares it behind an `Arc`); one that is changed by hand must be cloned first,
/// and a clone starts without a hash.
#[derive(Default)]
pub struct HashMemo(std::sync::OnceLock<String>);

impl Clone for HashMemo {
    fn clone(&self) -> Self {
        HashMemo::default()
    }
}

impl PartialEq for HashMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HashMemo {}

impl std::fmt::Debug for HashMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashMemo")
    }
}

/// A TCP or UDP port NGINX forwards to one Service port (an entry of the TCP or UDP
/// services ConfigMap, ingress-nginx's format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// The port NGINX listens on.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: StreamProtocol,
    /// The ConfigMap holding the entry.
    pub owner: ResourceRef,
    /// The backend in [`Model::backends`] (absent there when the Service has no
    /// ready endpoints: connections are then closed at once).
    pub backend: String,
    /// The first `:PROXY`: clients send the PROXY protocol header (the address
    /// NGINX logs is the one it carries).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decode_proxy_protocol: bool,
    /// The second `:PROXY`: NGINX sends the PROXY protocol header to the backend.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encode_proxy_protocol: bool,
}

/// A host whose TLS connections go, by SNI and not terminated, to a backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passthrough {
    /// The host (as the server's, lower-cased; a wildcard matches one label).
    pub host: String,
    /// The Ingress that asked (the host's owner).
    pub owner: ResourceRef,
    /// The backend of the host's `/` rule, in [`Model::backends`].
    pub backend: String,
}

/// The transport of a [`Stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamProtocol {
    /// `--tcp-services-configmap`.
    Tcp,
    /// `--udp-services-configmap`.
    Udp,
}

impl fmt::Display for StreamProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamProtocol::Tcp => "tcp",
            StreamProtocol::Udp => "udp",
        })
    }
}

/// Host name of the catch-all server (unknown hosts and `spec.defaultBackend`).
pub const DEFAULT_SERVER: &str = "_";

/// One virtual server (an NGINX `server` block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    /// Lower-cased host, `*.example.com` for wildcards, [`DEFAULT_SERVER`] for the catch-all.
    pub host: String,
    /// The certificate served for this host, when it has TLS.
    pub tls: Option<ServerTls>,
    /// The resource whose server-level annotations apply (the oldest on this host).
    pub owner: Option<ResourceRef>,
    /// `server-snippet` of the owner (only when snippets are allowed).
    pub server_snippet: Option<Snippet>,
    /// Client certificate authentication (the owner's `auth-tls-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificates: Option<crate::annotations::ClientCertificates>,
    /// The owner's `ssl-ciphers`, `ssl-prefer-server-ciphers`.
    #[serde(
        default,
        skip_serializing_if = "crate::annotations::ServerCiphers::is_empty"
    )]
    pub ciphers: crate::annotations::ServerCiphers,
    /// Locations, sorted by path then match kind.
    pub locations: Vec<Location>,
    /// `from-to-www-redirect`: a server without locations of its own that redirects
    /// (308) every request to this host (its `www.` twin, or the host without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_to: Option<String>,
}

/// TLS settings of a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerTls {
    /// Key into [`Model::certificates`]; `None` means the controller's self-signed
    /// certificate (no valid own certificate and no `--default-ssl-certificate`).
    pub certificate: Option<String>,
}

/// How a location's path matches a request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathMatch {
    /// The request path equals the path.
    Exact,
    /// Element-wise prefix: `/foo` matches `/foo` and `/foo/bar`, never `/foobar`.
    Prefix,
    /// A case-sensitive regular expression (`use-regex` or `rewrite-target`).
    Regex,
}

/// One location: a path rule on a host, routed to a backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The path as written in the rule (trailing slash removed for prefixes, `/` kept).
    pub path: String,
    /// How it matches.
    pub path_match: PathMatch,
    /// The Ingress that owns this host + path + match kind (the oldest).
    pub owner: ResourceRef,
    /// Where the traffic goes.
    pub target: Target,
    /// Per-location proxy settings from the owner's annotations.
    pub settings: LocationSettings,
}

/// Where a location sends its traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Target {
    /// A backend in [`Model::backends`].
    Backend(String),
    /// A fixed status (503 when the Service is missing, 404 for the default server without backend).
    Status(u16),
}

/// Proxy settings of a location (parsed annotations and ConfigMap defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LocationSettings {
    /// Redirect HTTP to HTTPS when the server has TLS (`ssl-redirect`, default true).
    pub ssl_redirect: bool,
    /// Redirect HTTP to HTTPS even without TLS on the server (`force-ssl-redirect`).
    pub force_ssl_redirect: bool,
    /// `preserve-trailing-slash`: the redirect to HTTPS keeps the URI as it came
    /// (by default one trailing slash is stripped, as ingress-nginx does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_trailing_slash: bool,
    /// Redirect every request elsewhere (`permanent-redirect`, `temporal-redirect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// `app-root`: a request for `/` is redirected (302) to this path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_root: Option<String>,
    /// `enable-cors`: CORS headers, and preflights answered with 204.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// `proxy-buffering`, the buffers, `proxy-request-buffering`, ...
    #[serde(default, skip_serializing_if = "Buffering::is_default")]
    pub buffering: Buffering,
    /// `proxy-http-version`, `proxy-next-upstream*`, `upstream-vhost`, ...
    #[serde(default, skip_serializing_if = "Forwarding::is_default")]
    pub forwarding: Forwarding,
    /// `proxy-ssl-*`: TLS to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_tls: Option<BackendTls>,
    /// `mirror-target`: a copy of each request goes there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Mirror>,
    /// Protocol used to talk to the backend.
    pub backend_protocol: BackendProtocol,
    /// `client_max_body_size`, as a validated NGINX size (e.g. `1m`, `0`).
    pub proxy_body_size: Option<String>,
    /// `proxy_connect_timeout` in seconds.
    pub proxy_connect_timeout: Option<u32>,
    /// `proxy_read_timeout` in seconds.
    pub proxy_read_timeout: Option<u32>,
    /// `proxy_send_timeout` in seconds.
    pub proxy_send_timeout: Option<u32>,
    /// `rewrite-target`: replacement for the matched path (may use `$1`… captures).
    pub rewrite_target: Option<String>,
    /// `configuration-snippet` (only when snippets are allowed).
    pub configuration_snippet: Option<Snippet>,
    /// Client address allow and deny lists (the Ingress's, else the ConfigMap's).
    pub source_ranges: SourceRanges,
    /// HTTP basic authentication (`auth-type: basic`).
    pub basic_auth: Option<BasicAuth>,
    /// External authentication (`auth-url`).
    pub external_auth: Option<ExternalAuth>,
    /// Per-client request, connection and bandwidth limits (`limit-*`).
    pub rate_limits: RateLimits,
    /// How the allowlist and the authentications combine (`satisfy`).
    pub satisfy: Satisfy,
    /// `custom-http-errors` (or the ConfigMap's) with the backend answering them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_pages: Option<ErrorPages>,
    /// `custom-headers`: response headers of the location (replacing the backend's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_headers: Vec<crate::build::header_lists::Header>,
}

/// A location's custom error pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorPages {
    /// The statuses whose page the backend answers (the status is kept).
    pub codes: Vec<u16>,
    /// The backend in [`Model::backends`] that answers them.
    pub backend: String,
    /// Whether the backend's own errors get the page too (`proxy_intercept_errors`;
    /// off with `disable-proxy-intercept-errors`).
    pub intercept: bool,
}

/// An upstream: one Service port and its ready endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Backend {
    /// `namespace_service_port`, unique in the model.
    pub name: String,
    /// The Service.
    pub service: ResourceRef,
    /// The Service port as referenced by the Ingress (number or name).
    pub service_port: String,
    /// Ready endpoints, sorted.
    pub endpoints: Vec<Endpoint>,
    /// Balancing settings (changing them needs no reload).
    pub balancing: Balancing,
    /// `service-upstream`: the one endpoint is the Service's ClusterIP and port, and
    /// EndpointSlices do not apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_ip: bool,
    /// The Service's UDP port (a UDP service): named `..._udp`, apart from its TCP
    /// port of the same number.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// An ExternalName Service's name: the endpoints are its addresses (the
    /// snapshot's `external_names`), and EndpointSlices do not apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_name: Option<String>,
    /// `default-backend` as a fallback: the Service whose endpoints this backend
    /// takes while its own (`service`) has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<ResourceRef>,
}

/// A ready endpoint of a backend.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// IPv4 or IPv6 address, as in the EndpointSlice.
    pub address: String,
    /// Target port.
    pub port: u16,
}

impl fmt::Display for Endpoint {
    /// `addr:port`, `[v6]:port`: as `proxy_pass` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address.contains(':') {
            true => write!(f, "[{}]:{}", self.address, self.port),
            false => write!(f, "{}:{}", self.address, self.port),
        }
    }
}

/// How the in-NGINX balancer spreads requests over a backend's endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, Hash)]
pub struct Balancing {
    /// Algorithm.
    pub load_balance: LoadBalance,
    /// `upstream-hash-by`: an NGINX variable expression for consistent hashing.
    pub upstream_hash_by: Option<String>,
    /// `upstream-hash-by-subset(-size)`: the hash picks this many endpoints and
    /// requests are spread over them. Left out of the serialization when unset,
    /// which keeps the hash of models without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_hash_by_subset: Option<u32>,
    /// Cookie affinity.
    pub affinity: Option<Affinity>,
    /// The Ingresses (`namespace/name`) that asked for `affinity`: as in
    /// ingress-nginx, the cookie is set on their locations only, not on those of
    /// another Ingress routing to the same Service port. Sorted; left out of the
    /// serialization when empty, which keeps the hash of models without affinity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affinity_ingresses: Vec<String>,
    /// Canary split towards another backend, paired by host + path.
    pub canary: Option<CanaryRoute>,
}

/// A canary attached to a primary backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct CanaryRoute {
    /// The canary backend.
    pub backend: String,
    /// How requests are chosen for it.
    pub rules: Canary,
}

/// One Ingress's `stream-snippet`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamSnippet {
    /// The Ingress.
    pub owner: ResourceRef,
    /// Its text, as written.
    pub text: String,
}

/// A TLS certificate and its key, checked while building.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// The Secret it comes from.
    pub secret: ResourceRef,
    /// PEM certificate chain.
    pub cert_pem: String,
    /// PEM private key.
    pub key_pem: String,
    /// Names (SANs) the certificate covers, lower-cased.
    pub names: Vec<String>,
    /// Expiry as seconds since the Unix epoch.
    pub not_after: i64,
}

/// Settings shared by all servers, from the controller ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Global {
    /// Whether snippet annotations on Ingresses are honoured.
    pub allow_snippet_annotations: bool,
    /// Default of the `ssl-redirect` annotation.
    pub ssl_redirect: bool,
    /// Default of the `force-ssl-redirect` annotation.
    pub force_ssl_redirect: bool,
    /// ConfigMap `service-upstream`: the default of the annotation.
    pub service_upstream: bool,
    /// ConfigMap `custom-http-errors`: the default of the annotation.
    pub custom_http_errors: Vec<u16>,
    /// `http-redirect-code`: the status of the redirect to HTTPS (default 308).
    pub http_redirect_code: u16,
    /// Default of the `load-balance` annotation.
    pub load_balance: LoadBalance,
    /// `proxy-set-headers`: headers sent to every backend (left out of the encoding
    /// when empty, as the next one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy_set_headers: Vec<crate::build::header_lists::Header>,
    /// `add-headers`: headers sent to every client, replacing a backend's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_headers: Vec<crate::build::header_lists::Header>,
    /// `global-allowed-response-headers`: the names `custom-headers` may set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_response_headers: Vec<String>,
    /// Default `client_max_body_size`.
    pub proxy_body_size: String,
    /// Default timeouts in seconds: connect, read, send.
    pub proxy_connect_timeout: u32,
    /// Default `proxy_read_timeout`.
    pub proxy_read_timeout: u32,
    /// Default `proxy_send_timeout`.
    pub proxy_send_timeout: u32,
    /// ConfigMap `http-snippet` (administrator-owned).
    pub http_snippet: Option<String>,
    /// ConfigMap `stream-snippet`: raw text in the `stream` block (only with TCP/UDP
    /// services or `--enable-ssl-passthrough`, which load the stream module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_snippet: Option<String>,
    /// ConfigMap `server-snippet` (administrator-owned, every server).
    pub server_snippet: Option<String>,
    /// ConfigMap `location-snippet` (administrator-owned, every location).
    pub location_snippet: Option<String>,
    /// The `Strict-Transport-Security` value sent on HTTPS responses of named hosts
    /// (ConfigMap `hsts`, `hsts-max-age`, `hsts-include-subdomains`, `hsts-preload`);
    /// `None` when `hsts` is false.
    pub hsts: Option<String>,
    /// ConfigMap `whitelist-source-range` / `denylist-source-range`: the lists of
    /// locations whose Ingress sets none, and of the default backend.
    pub source_ranges: GlobalSourceRanges,
    /// Where the client address comes from (ConfigMap `use-forwarded-headers`,
    /// `use-proxy-protocol`, `proxy-real-ip-cidr`, …).
    pub client_address: crate::build::real_ip::ClientAddress,
    /// The status of a request refused by `limit-rps`/`limit-rpm`
    /// (`limit-req-status-code`, default 503 as ingress-nginx).
    pub limit_req_status: u16,
    /// The status of a request refused by `limit-connections`
    /// (`limit-conn-status-code`, default 503).
    pub limit_conn_status: u16,
    /// The variable that tells clients apart in every limit's key
    /// (`limit-conn-zone-variable`, default `$binary_remote_addr`).
    pub limit_key_variable: String,
    /// ConfigMap `global-auth-*` and `no-auth-locations`.
    pub global_auth: crate::annotations::GlobalAuth,
    /// ConfigMap `proxy-buffering` (default off, as ingress-nginx: a streamed or
    /// server-sent-events answer reaches the client as the backend writes it).
    pub proxy_buffering: bool,
    /// ConfigMap tuning keys (connections, buffers, TLS sessions, keepalive).
    pub tuning: crate::build::tuning::Tuning,
    /// ConfigMap `ssl-dh-param`: the Secret (`namespace/name`) whose `dhparam.pem`
    /// gives DHE its parameters; its PEM once the build has read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_dh_param: Option<DhParam>,
    /// ConfigMap keys that are `http` and main directives (headers, timeouts,
    /// TLS protocols, gzip, retries, workers).
    pub http: crate::build::http_keys::HttpKeys,
    /// ConfigMap `block-cidrs`, `block-user-agents`, `block-referers`.
    pub blocking: crate::build::blocking::Blocking,
}

/// The backends `servers`' locations and `default_backend` route to, and those
/// answering their error pages, with repeats (canaries not included).
pub fn routed_backends<'a>(
    servers: &'a [Server],
    default_backend: &'a Target,
    streams: &'a [Stream],
    passthrough: &'a [Passthrough],
) -> impl Iterator<Item = &'a String> {
    let locations = servers.iter().flat_map(|s| &s.locations);
    let error_pages =
        (locations.clone()).filter_map(|l| l.settings.error_pages.as_ref().map(|e| &e.backend));
    locations
        .map(|l| &l.target)
        .chain([default_backend])
        .filter_map(|t| match t {
            Target::Backend(b) => Some(b),
            Target::Status(_) => None,
        })
        .chain(error_pages)
        .chain(streams.iter().map(|s| &s.backend))
        .chain(passthrough.iter().map(|p| &p.backend))
}

impl Model {
    /// The backends its locations, its default backend, its streams and its
    /// passthrough hosts route to, with repeats.
    pub fn routed_backends(&self) -> impl Iterator<Item = &String> {
        routed_backends(
            &self.servers,
            &self.default_backend,
            &self.streams,
            &self.passthrough,
        )
    }

    /// The blake3 hash of the model's canonical encoding, as 64 hex digits. Computed
    /// once per model (80 ms at 10k Ingresses), though the sync loop asks several
    /// times per change.
    pub fn hash(&self) -> String {
        self.hash_memo.0.get_or_init(|| content_hash(self)).clone()
    }

    /// Problems reported on one resource.
    pub fn problems_of<'a>(&'a self, r: &'a ResourceRef) -> impl Iterator<Item = &'a Problem> {
        self.problems.iter().filter(move |p| &p.resource == r)
    }

    /// Whether requests routed to `backend` feed EWMA statistics: the backend or its
    /// canary balances with EWMA. Only those locations run the log phase (it costs
    /// every request that enters it), so a change here needs a reload.
    pub fn feeds_ewma(&self, backend: &str) -> bool {
        let ewma = |name: &str| {
            self.backends
                .get(name)
                .is_some_and(|b| b.balancing.load_balance == LoadBalance::Ewma)
        };
        ewma(backend)
            || self
                .backends
                .get(backend)
                .and_then(|b| b.balancing.canary.as_ref())
                .is_some_and(|c| ewma(&c.backend))
    }

    /// The server for an exact host key (`*.example.com` for wildcard servers).
    pub fn server(&self, host: &str) -> Option<&Server> {
        self.servers
            .binary_search_by(|s| s.host.as_str().cmp(host))
            .ok()
            .map(|i| &self.servers[i])
    }
}

/// blake3 over the canonical JSON encoding of any serializable value.
///
/// JSON is canonical here because every map in the model is a `BTreeMap` and every
/// list is sorted by construction.
pub fn content_hash<T: Serialize>(value: &T) -> String {
    // serde_json emits many tiny writes (every key, quote and comma); feeding them to
    // blake3 one by one costs more than the hashing itself, so they are batched.
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, blake3::Hasher::new());
    serde_json::to_writer(&mut w, value).expect("model serialization cannot fail");
    let hasher = w.into_inner().expect("hashing cannot fail");
    hasher.finalize().to_hex().to_string()
}

/// A file NGINX's master reads that holds a secret (a ticket key, DH parameters).
/// The model carries its digest, so that a new one is a change of the model, and
/// never its bytes, which are not serialized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SecretFile {
    /// blake3 of the bytes.
    pub digest: String,
    /// The file's content.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

impl SecretFile {
    /// The file of `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        SecretFile {
            digest: blake3::hash(&bytes).to_hex().to_string(),
            bytes,
        }
    }
}

/// `ssl-dh-param`: the Secret named, and its `dhparam.pem` once the build has
/// read it (`None` until then).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DhParam {
    /// `namespace/name` of the Secret.
    pub secret: String,
    /// `dhparam.pem`.
    pub file: Option<SecretFile>,
}
