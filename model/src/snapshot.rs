//! The inputs of model building: the cluster objects Ferrule reads and its settings.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

/// The default value of `IngressClass.spec.controller` that Ferrule claims.
pub const DEFAULT_CONTROLLER: &str = "ferrule.dev/ingress-controller";

/// The annotations prefix of ingress-nginx, which Ferrule reads by default.
pub const DEFAULT_ANNOTATIONS_PREFIX: &str = "nginx.ingress.kubernetes.io";

/// Controller settings that influence the model (flags, not cluster objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `IngressClass.spec.controller` value that Ferrule owns.
    pub controller: String,
    /// Legacy `kubernetes.io/ingress.class` annotation value (and IngressClass name) Ferrule owns.
    pub ingress_class: String,
    /// Serve Ingresses without any class.
    pub watch_without_class: bool,
    /// `namespace/name` of the Service used for unknown hosts and unmatched paths.
    pub default_backend_service: Option<String>,
    /// `namespace/name` of the Secret used when a host has no valid certificate.
    pub default_certificate: Option<String>,
    /// Honour `configuration-snippet` / `server-snippet` annotations.
    pub allow_snippet_annotations: bool,
    /// `--strict-annotations`: any invalid annotation value rejects its Ingress
    /// (by default only those of keys that restrict access do).
    pub strict_annotations: bool,
    /// The prefix of the annotations Ferrule reads, without its `/`
    /// (`--annotations-prefix`, default `nginx.ingress.kubernetes.io`).
    pub annotations_prefix: String,
    /// Keep endpoints whose address is loopback, link-local or unspecified
    /// (`--allow-local-endpoints`, default false: they are left out, with a problem
    /// on the Ingresses that route to them).
    pub allow_local_endpoints: bool,
    /// The most one Ingress may hold (see [`Limits`]).
    pub limits: Limits,
    /// `namespace/name` of the TCP services ConfigMap (`--tcp-services-configmap`).
    pub tcp_services: Option<String>,
    /// `namespace/name` of the UDP services ConfigMap (`--udp-services-configmap`).
    pub udp_services: Option<String>,
    /// `--disable-catch-all`: an Ingress with `spec.defaultBackend` is not served
    /// (as ingress-nginx, which ignores it), with an error on it.
    pub disable_catch_all: bool,
    /// `--enable-ssl-passthrough`: the `ssl-passthrough` annotation is honoured
    /// (NGINX routes the HTTPS port by SNI before terminating TLS).
    pub ssl_passthrough: bool,
    /// Whether the balancer can staple OCSP responses (`enable-ocsp`): the Lua one
    /// can, the njs one cannot.
    pub ocsp_stapling: bool,
    /// Whether NGINX can set a request header before the realip module reads it
    /// (Ferrule's C module, `ferrule_input_header`): what `use-proxy-protocol` with
    /// `use-forwarded-headers` needs.
    pub input_headers: bool,
    /// Ports the controller listens on itself (HTTP, HTTPS, status): a TCP service
    /// entry may not take one.
    pub reserved_ports: Vec<u16>,
    /// "Now" as seconds since the Unix epoch, for certificate expiry (kept as an
    /// input so that model building stays pure and deterministic).
    pub now: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            controller: DEFAULT_CONTROLLER.to_owned(),
            ingress_class: "ferrule".to_owned(),
            watch_without_class: false,
            default_backend_service: None,
            default_certificate: None,
            allow_snippet_annotations: false,
            strict_annotations: false,
            annotations_prefix: DEFAULT_ANNOTATIONS_PREFIX.to_owned(),
            allow_local_endpoints: false,
            limits: Limits::default(),
            tcp_services: None,
            udp_services: None,
            ssl_passthrough: false,
            disable_catch_all: false,
            ocsp_stapling: true,
            input_headers: true,
            reserved_ports: Vec::new(),
            now: 0,
        }
    }
}

/// Bounds on what one Ingress may hold, so that no tenant's object can make the
/// model, the files or a reload cost more than its share. An Ingress beyond one is
/// rejected alone, with a problem naming the limit and its flag; the rest is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of what Ferrule reads of an Ingress: annotation keys and values, hosts,
    /// paths, Service names (`--max-ingress-bytes`).
    pub ingress_bytes: usize,
    /// Bytes of one annotation value (`--max-annotation-value-bytes`).
    pub annotation_value_bytes: usize,
    /// Path rules of one Ingress (`--max-paths-per-ingress`).
    pub paths_per_ingress: usize,
    /// Regex path rules of one Ingress (`--max-regex-paths-per-ingress`): each is
    /// compiled by NGINX and tried in turn for every request to its host.
    pub regex_paths_per_ingress: usize,
    /// Regex path rules of one host, from every Ingress that serves it
    /// (`--max-regex-paths-per-host`): the oldest Ingresses' are kept, so that a
    /// tenant sharing a host cannot make every request to it try thousands.
    pub regex_paths_per_host: usize,
    /// Hosts of one Ingress, its rules' and its TLS entries' (`--max-hosts-per-ingress`).
    pub hosts_per_ingress: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            ingress_bytes: 512 * 1024,
            annotation_value_bytes: 64 * 1024,
            paths_per_ingress: 2000,
            regex_paths_per_ingress: 200,
            regex_paths_per_host: 1000,
            hosts_per_ingress: 1000,
        }
    }
}

/// An immutable view of the cluster at one instant.
///
/// Objects are shared (`Arc`) so that sources can hand out snapshots without copying
/// what did not change. Order does not matter: model building sorts what it needs.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Ingresses of every watched namespace.
    pub ingresses: Vec<Arc<Ingress>>,
    /// IngressClasses.
    pub ingress_classes: Vec<Arc<IngressClass>>,
    /// Services.
    pub services: Vec<Arc<Service>>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    /// Secrets (only TLS secrets matter).
    pub secrets: Vec<Arc<Secret>>,
    /// The controller ConfigMap, if configured and present.
    pub config_map: Option<Arc<ConfigMap>>,
    /// Other ConfigMaps the settings name (the TCP and UDP services), or, from a
    /// manifests directory, every other ConfigMap in it.
    pub config_maps: Vec<Arc<ConfigMap>>,
    /// Controller settings.
    pub settings: Settings,
    /// The addresses each ExternalName Service's name resolved to, by name (the
    /// controller resolves them; a name not here is not resolved yet).
    pub external_names: Arc<std::collections::BTreeMap<String, Vec<std::net::IpAddr>>>,
    /// When the source first saw a change this snapshot is the first to hold (the
    /// start of "time from change to applied"), if it knows. Not an input of the model.
    pub observed: Option<std::time::Instant>,
}

/// The name an ExternalName Service points at, as `Snapshot::external_names` is
/// keyed (lower-case, without the root's trailing dot); `None` for other Services.
pub fn external_name(svc: &Service) -> Option<String> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("ExternalName") {
        return None;
    }
    let name = spec.external_name.as_deref()?.trim_end_matches('.');
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

impl Snapshot {
    /// The names of its ExternalName Services (what the controller looks up).
    pub fn external_service_names(&self) -> std::collections::BTreeSet<String> {
        self.services
            .iter()
            .filter_map(|s| external_name(s))
            .collect()
    }
}
