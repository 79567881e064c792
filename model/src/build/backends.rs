//! Backends: a Service port and the ready endpoints of its EndpointSlices.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressServiceBackend;

use crate::model::{Backend, Balancing, Endpoint, ResourceRef};

pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Services and EndpointSlices indexed by namespace and Service name.
pub(crate) struct ServiceIndex<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Keep loopback, link-local and unspecified addresses (`--allow-local-endpoints`).
    allow_local: bool,
    /// What ExternalName Services' names resolved to (the snapshot's).
    external_names: Option<&'a std::collections::BTreeMap<String, Vec<IpAddr>>>,
}

/// Whether NGINX, proxying to `ip`, would reach its own host rather than a pod:
/// loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10, where cloud
/// metadata services answer), unspecified or "this network" (0.0.0.0/8, ::), also
/// written as an IPv4-mapped IPv6 address. An EndpointSlice is written by whoever
/// may write one in its namespace: such an endpoint would proxy a tenant's host to
/// the controller's status port, the balancer's answers or the node's services.
pub(crate) fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.octets()[0] == 0,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_local(IpAddr::V4(v4)),
            None => v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local(),
        },
    }
}

/// The ready endpoints of a Service port, and those left out as local ([`is_local`]).
pub(crate) struct PortEndpoints {
    pub(crate) kept: Vec<Endpoint>,
    pub(crate) dropped: Vec<Endpoint>,
}

impl<'a> ServiceIndex<'a> {
    pub(crate) fn new(
        services: &'a [Arc<Service>],
        slices: &'a [Arc<EndpointSlice>],
        allow_local: bool,
    ) -> Self {
        let mut by_name = HashMap::with_capacity(services.len());
        for s in services {
            by_name.insert(key(&s.metadata), &**s);
        }
        let mut by_service: HashMap<_, Vec<&EndpointSlice>> = HashMap::with_capacity(slices.len());
        for slice in slices {
            let Some(svc) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
            else {
                continue;
            };
            let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
            by_service
                .entry((ns, svc.as_str()))
                .or_default()
                .push(&**slice);
        }
        Self {
            services: by_name,
            slices: by_service,
            allow_local,
            external_names: None,
        }
    }

    /// The index, with what ExternalName Services' names resolved to.
    pub(crate) fn with_external_names(
        mut self,
        names: &'a std::collections::BTreeMap<String, Vec<IpAddr>>,
    ) -> Self {
        self.external_names = Some(names);
        self
    }

    /// The name of an ExternalName Service, if `ns/svc` is one.
    fn external_name(&self, ns: &str, svc: &str) -> Option<String> {
        crate::snapshot::external_name(self.services.get(&(ns, svc))?)
    }

    /// The backend of an ExternalName Service: the addresses its name resolved to,
    /// on the Ingress's port (a number; a name is the Service port of that name,
    /// whose targetPort, or port, is the number), local ones left out unless allowed.
    fn resolve_external(
        &self,
        ns: &str,
        b: &IngressServiceBackend,
        host: &str,
    ) -> Result<(Backend, Vec<Endpoint>), String> {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let svc = self.services[&(ns, b.name.as_str())];
        let port_ref = match b.port.as_ref().map(|p| (&p.name, p.number)) {
            Some((Some(name), _)) if !name.is_empty() => PortRef::Name(name),
            Some((_, Some(n))) => PortRef::Number(n),
            _ => return Err(format!("backend Service {ns}/{} has no port", b.name)),
        };
        // As ingress-nginx: the Service port the Ingress names, at its targetPort
        // (or port); a Service without ports takes the Ingress's number.
        let ports = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or_default();
        let number = match (ports.iter().find(|p| port_ref.matches(p)), &port_ref) {
            (Some(p), _) => match &p.target_port {
                Some(IntOrString::Int(n)) => *n,
                _ => p.port,
            },
            (None, PortRef::Number(n)) if ports.is_empty() => *n,
            (None, _) => return Err(format!("Service {ns}/{} has no port {port_ref}", b.name)),
        };
        let number = u16::try_from(number)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                format!(
                    "Service {ns}/{} port {port_ref}: invalid port number",
                    b.name
                )
            })?;
        let service_port = port_ref.to_string();
        let name = backend_name(ns, &b.name, &service_port);
        if !balancer_name_ok(&name) {
            return Err(format!(
                "backend Service {ns}/{} port {service_port}: the backend name {name:?} is \
                 not valid for the balancer",
                b.name
            ));
        }
        let addresses = self
            .external_names
            .and_then(|m| m.get(host))
            .map_or(&[][..], Vec::as_slice);
        let (mut kept, mut dropped) = (Vec::new(), Vec::new());
        for ip in addresses {
            let e = Endpoint {
                address: ip.to_string(),
                port: number,
            };
            match is_local(*ip) && !self.allow_local {
                true => dropped.push(e),
                false => kept.push(e),
            }
        }
        kept.sort();
        kept.dedup();
        let mut backend = backend(ns, &b.name, name, service_port, kept, false);
        backend.external_name = Some(host.to_owned());
        Ok((backend, dropped))
    }

    /// Resolves an Ingress backend to a model backend (without balancing settings),
    /// with the endpoints left out as local. The error is the problem message,
    /// naming the Service and port.
    pub(crate) fn resolve(
        &self,
        ns: &str,
        b: &IngressServiceBackend,
    ) -> Result<(Backend, Vec<Endpoint>), String> {
        if let Some(host) = self.external_name(ns, &b.name) {
            return self.resolve_external(ns, b, &host);
        }
        let (name, service_port, port, _) = self.port_of(ns, b, Transport::Tcp)?;
        let PortEndpoints { kept, dropped } = self.endpoints(ns, &b.name, port);
        let backend = backend(ns, &b.name, name, service_port, kept, false);
        Ok((backend, dropped))
    }

    /// [`ServiceIndex::resolve`] for a UDP service: the Service's UDP port of that
    /// number or name (a DNS Service has TCP and UDP ports of one number), named
    /// apart from the TCP one.
    pub(crate) fn resolve_udp(
        &self,
        ns: &str,
        b: &IngressServiceBackend,
    ) -> Result<(Backend, Vec<Endpoint>), String> {
        let (name, service_port, port, _) = self.port_of(ns, b, Transport::Udp)?;
        let PortEndpoints { kept, dropped } = self.endpoints(ns, &b.name, port);
        let mut backend = backend(ns, &b.name, name, service_port, kept, false);
        backend.udp = true;
        Ok((backend, dropped))
    }

    /// The backend of `service-upstream`: the Service's ClusterIP and port as its one
    /// endpoint (kube-proxy, or a service mesh, balances behind it), named apart from
    /// the Service's endpoints backend. `Ok(None)` for a Service without a ClusterIP
    /// (headless).
    pub(crate) fn resolve_cluster_ip(
        &self,
        ns: &str,
        b: &IngressServiceBackend,
    ) -> Result<Option<(Backend, Vec<Endpoint>)>, String> {
        // An ExternalName Service has no ClusterIP: its name's addresses, as without
        // the annotation.
        if self.external_name(ns, &b.name).is_some() {
            return Ok(None);
        }
        let (name, service_port, port, svc) = self.port_of(ns, b, Transport::ClusterIp)?;
        let ip = svc
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        let Some(ip) = ip else {
            return Ok(None);
        };
        let number = u16::try_from(port.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                format!(
                    "Service {ns}/{} port {service_port}: invalid port number",
                    b.name
                )
            })?;
        let endpoint = Endpoint {
            address: ip.to_string(),
            port: number,
        };
        let (kept, dropped) = if is_local(ip) && !self.allow_local {
            (Vec::new(), vec![endpoint])
        } else {
            (vec![endpoint], Vec::new())
        };
        let backend = backend(ns, &b.name, name, service_port, kept, true);
        Ok(Some((backend, dropped)))
    }

    /// The backend's name (the Service's, port and the transport's suffix), its
    /// Service port as the Ingress names it, that port and the Service.
    fn port_of(
        &self,
        ns: &str,
        b: &IngressServiceBackend,
        transport: Transport,
    ) -> Result<(String, String, &'a ServicePort, &'a Service), String> {
        let suffix = match transport {
            Transport::Tcp => "",
            Transport::ClusterIp => "_cluster-ip",
            Transport::Udp => "_udp",
        };
        let udp = transport == Transport::Udp;
        let port_ref = match &b.port {
            Some(p) => match (&p.name, p.number) {
                (Some(name), _) if !name.is_empty() => PortRef::Name(name),
                (_, Some(n)) => PortRef::Number(n),
                _ => return Err(format!("backend Service {ns}/{} has no port", b.name)),
            },
            None => return Err(format!("backend Service {ns}/{} has no port", b.name)),
        };
        let service_port = port_ref.to_string();
        let name = backend_name(ns, &b.name, &service_port) + suffix;
        // The API server's name rules (and the manifests source's) keep names far
        // inside the balancer's, but an Ingress's port name is not checked in a
        // manifests directory: a name the balancer API would refuse must not reach it
        // (the whole backend would be refused), nor one NGINX would read differently.
        if !balancer_name_ok(&name) {
            return Err(format!(
                "backend Service {ns}/{} port {service_port}: the backend name {name:?} is \
                 not valid for the balancer (at most {MAX_BACKEND_NAME} bytes, no control \
                 characters)",
                b.name
            ));
        }
        let svc = self
            .services
            .get(&(ns, b.name.as_str()))
            .ok_or_else(|| format!("Service {ns}/{} not found", b.name))?;
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            return Err(format!(
                "Service {ns}/{} is of type ExternalName, which only HTTP backends can be",
                b.name
            ));
        }
        let port = spec
            .and_then(|s| s.ports.as_ref())
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| port_ref.matches(p) && is_udp(p) == udp)
            })
            .ok_or_else(|| match udp {
                true => format!("Service {ns}/{} has no UDP port {port_ref}", b.name),
                false => format!("Service {ns}/{} has no port {port_ref}", b.name),
            })?;
        Ok((name, service_port, port, svc))
    }

    /// The endpoints of a backend resolved before (`service_port` as in
    /// [`crate::model::Backend`]): `None` if the Service or its port is gone.
    pub(crate) fn endpoints_of(
        &self,
        ns: &str,
        svc: &str,
        service_port: &str,
        udp: bool,
    ) -> Option<Vec<Endpoint>> {
        let ports = self.ports(ns, svc)?;
        let named = PortRef::Name(service_port);
        // Port names contain a letter (the API server checks): a number is a number,
        // unless a port is named so anyway (a manifests file): then it is unclear.
        let port_ref = match service_port.parse::<i32>() {
            Ok(_) if ports.iter().any(|p| named.matches(p)) => return None,
            Ok(n) => PortRef::Number(n),
            Err(_) => named,
        };
        let port = ports
            .iter()
            .find(|p| port_ref.matches(p) && is_udp(p) == udp)?;
        Some(self.endpoints(ns, svc, port).kept)
    }

    /// What the problems reported on the Service's ports depend on, in the Service's
    /// order: whether each has no ready endpoints, and the endpoints left out as local.
    pub(crate) fn endpoint_problems(&self, ns: &str, svc: &str) -> Vec<(bool, Vec<Endpoint>)> {
        self.ports(ns, svc)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let e = self.endpoints(ns, svc, p);
                (e.kept.is_empty(), e.dropped)
            })
            .collect()
    }

    fn ports(&self, ns: &str, svc: &str) -> Option<&'a [ServicePort]> {
        self.services
            .get(&(ns, svc))?
            .spec
            .as_ref()?
            .ports
            .as_deref()
    }

    /// Ready endpoints of every EndpointSlice of the Service, for the slice port whose
    /// name equals the Service port's name (that is how the target port is published);
    /// local ones ([`is_local`]) apart unless they are allowed.
    fn endpoints(&self, ns: &str, svc: &str, port: &ServicePort) -> PortEndpoints {
        let want = port.name.as_deref().unwrap_or_default();
        let slices = self.slices.get(&(ns, svc)).map_or(&[][..], Vec::as_slice);
        let capacity = slices
            .iter()
            .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
            .sum();
        let mut out = Vec::with_capacity(capacity);
        let mut dropped = Vec::new();
        for slice in slices {
            if slice.address_type == "FQDN" {
                continue;
            }
            let Some(target) = slice.ports.iter().flatten().find_map(|p| {
                (p.name.as_deref().unwrap_or_default() == want)
                    .then_some(p.port)
                    .flatten()
            }) else {
                continue;
            };
            // 1..=65535, as the balancer API takes (port 0 would refuse the backend).
            let Some(target) = u16::try_from(target).ok().filter(|&p| p != 0) else {
                continue;
            };
            for ep in slice.endpoints.iter().flatten() {
                let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !ready {
                    continue;
                }
                for addr in &ep.addresses {
                    // Rust's IPv4 parser accepts only the canonical dotted form, so a
                    // parsed IPv4 address is kept as written (no formatting per endpoint);
                    // IPv6 is normalised.
                    let (ip, address) = match addr.parse::<IpAddr>() {
                        Ok(ip @ IpAddr::V4(_)) => (ip, addr.clone()),
                        Ok(ip @ IpAddr::V6(_)) => (ip, ip.to_string()),
                        Err(_) => continue,
                    };
                    let endpoint = Endpoint {
                        address,
                        port: target,
                    };
                    if !self.allow_local && is_local(ip) {
                        dropped.push(endpoint);
                    } else {
                        out.push(endpoint);
                    }
                }
            }
        }
        for v in [&mut out, &mut dropped] {
            v.sort();
            v.dedup();
        }
        PortEndpoints { kept: out, dropped }
    }
}

/// How a backend reaches a Service port, which names it apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// Its TCP endpoints (HTTP, gRPC, TCP services).
    Tcp,
    /// Its ClusterIP (`service-upstream`).
    ClusterIp,
    /// Its UDP endpoints (UDP services).
    Udp,
}

/// Whether a Service port is UDP (the API server defaults the protocol to TCP).
fn is_udp(p: &ServicePort) -> bool {
    p.protocol.as_deref() == Some("UDP")
}

enum PortRef<'a> {
    Name(&'a str),
    Number(i32),
}

impl PortRef<'_> {
    fn matches(&self, p: &ServicePort) -> bool {
        match self {
            PortRef::Name(n) => p.name.as_deref() == Some(*n),
            PortRef::Number(n) => p.port == *n,
        }
    }
}

impl std::fmt::Display for PortRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortRef::Name(n) => f.write_str(n),
            PortRef::Number(n) => write!(f, "{n}"),
        }
    }
}

/// A backend without balancing settings (set by the Ingress that routes to it).
fn backend(
    ns: &str,
    svc: &str,
    name: String,
    service_port: String,
    endpoints: Vec<Endpoint>,
    cluster_ip: bool,
) -> Backend {
    Backend {
        name,
        service: ResourceRef::new("Service", ns, svc),
        service_port,
        endpoints,
        balancing: Balancing::default(),
        cluster_ip,
        udp: false,
        external_name: None,
        fallback: None,
    }
}

/// The longest backend name the balancer API takes (lua/ferrule/validate.lua `MAX_NAME`).
pub(crate) const MAX_BACKEND_NAME: usize = 1024;

/// Whether `name` can be a backend name: not empty, at most [`MAX_BACKEND_NAME`]
/// bytes, and no control character. The balancer API refuses the ASCII ones, and the
/// configuration's quoting (controller/src/nginx/emit.rs) drops every one, C1
/// included, so NGINX would read another backend's name; what it escapes (`"`, `\`)
/// NGINX reads back as it was.
pub(crate) fn balancer_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_BACKEND_NAME && !name.chars().any(char::is_control)
}

/// `namespace_service_port`: `_` never occurs in a Kubernetes namespace or Service
/// name (the manifests source refuses such names as the API server does), so this is
/// unambiguous.
pub(crate) fn backend_name(ns: &str, svc: &str, port: &str) -> String {
    format!("{ns}_{svc}_{port}")
}

fn key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (&str, &str) {
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
}
