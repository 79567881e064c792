//! TCP and UDP services: the ConfigMaps of `--tcp-services-configmap` and
//! `--udp-services-configmap`, in ingress-nginx's format, one entry per port:
//!
//! ```text
//! "9000": "namespace/service:port"               port: a Service port's number or name
//! "9001": "namespace/service:port:PROXY"         clients send the PROXY protocol
//! "9002": "namespace/service:port:PROXY:PROXY"   and NGINX sends it to the backend
//! ```
//!
//! Unlike ingress-nginx, which skips a bad entry with a line in its log, every entry
//! that is not served is a problem on its ConfigMap naming the key; the others are
//! served. An entry whose Service has no ready endpoints keeps its port (connections
//! are closed until endpoints come, without a reload), where ingress-nginx drops the
//! port.

use k8s_openapi::api::networking::v1::{IngressServiceBackend, ServiceBackendPort};

use super::Builder;
use crate::model::{ProblemKind, ResourceRef, Severity, Stream, StreamProtocol};
use crate::route::dns_label;

impl Builder<'_> {
    /// Reads both ConfigMaps into `self.streams`, their backends into `self.backends`.
    pub(super) fn add_streams(&mut self) {
        let settings = &self.snap.settings;
        for (flag, protocol) in [
            (settings.tcp_services.clone(), StreamProtocol::Tcp),
            (settings.udp_services.clone(), StreamProtocol::Udp),
        ] {
            let Some(flag) = flag else { continue };
            let (ns, name) = super::flag_ref(&flag);
            let r = ResourceRef::new("ConfigMap", ns, name);
            let Some(cm) = self.config_maps.get(&(ns, name)).copied() else {
                let msg = format!(
                    "ConfigMap {ns}/{name} (--{protocol}-services-configmap) not found; \
                     no {} service is served",
                    protocol.to_string().to_uppercase()
                );
                self.problem(&r, Severity::Warning, ProblemKind::Reference, msg);
                continue;
            };
            for (key, value) in cm.data.iter().flatten() {
                match self.stream(protocol, key, value, &r) {
                    Ok(stream) => self.streams.push(stream),
                    Err((kind, e)) => {
                        let msg =
                            format!("{protocol} service {key:?}: {e}; the port is not served");
                        self.problem(&r, Severity::Error, kind, msg);
                    }
                }
            }
        }
        self.streams.sort_by_key(|s| (s.protocol, s.port));
    }

    /// One entry: the port it listens on and where it goes.
    fn stream(
        &mut self,
        protocol: StreamProtocol,
        key: &str,
        value: &str,
        r: &ResourceRef,
    ) -> Result<Stream, (ProblemKind, String)> {
        let invalid = |e: String| (ProblemKind::Invalid, e);
        let port = key
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| invalid("the key must be a port number (1-65535)".to_owned()))?;
        if protocol == StreamProtocol::Tcp && self.snap.settings.reserved_ports.contains(&port) {
            return Err(invalid(format!(
                "port {port} is the controller's own (HTTP, HTTPS or status port)"
            )));
        }
        let parsed = parse_entry(value).map_err(invalid)?;
        if protocol == StreamProtocol::Udp && (parsed.decode || parsed.encode) {
            // ingress-nginx ignores the flags on UDP; saying so is kinder.
            return Err(invalid(
                "the PROXY protocol is for TCP services only".to_owned(),
            ));
        }
        let port_ref = match parsed.port.parse::<i32>() {
            Ok(n) => ServiceBackendPort {
                number: Some(n),
                name: None,
            },
            Err(_) => ServiceBackendPort {
                name: Some(parsed.port.to_owned()),
                number: None,
            },
        };
        let svc = IngressServiceBackend {
            name: parsed.service.to_owned(),
            port: Some(port_ref),
        };
        let resolved = match protocol {
            StreamProtocol::Tcp => self.index.resolve(parsed.namespace, &svc),
            StreamProtocol::Udp => self.index.resolve_udp(parsed.namespace, &svc),
        };
        let (backend, dropped) = resolved.map_err(|e| (ProblemKind::Reference, e))?;
        let name = backend.name.clone();
        if backend.endpoints.is_empty() {
            let local = match dropped.is_empty() {
                true => "",
                false => " (local endpoints are left out: --allow-local-endpoints)",
            };
            let msg = format!(
                "{protocol} service {key:?}: Service {}/{} port {} has no ready endpoints{local}; \
                 connections are closed",
                parsed.namespace, parsed.service, parsed.port
            );
            self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
        }
        let load_balance = self.global.load_balance;
        self.backends.entry(name.clone()).or_insert_with(|| {
            let mut b = backend;
            b.balancing.load_balance = load_balance;
            b
        });
        Ok(Stream {
            port,
            protocol,
            owner: r.clone(),
            backend: name,
            decode_proxy_protocol: parsed.decode,
            encode_proxy_protocol: parsed.encode,
        })
    }
}

/// An entry's value, split.
#[derive(Debug, PartialEq, Eq)]
struct Entry<'a> {
    namespace: &'a str,
    service: &'a str,
    port: &'a str,
    decode: bool,
    encode: bool,
}

/// `namespace/service:port[:PROXY[:PROXY]]` (PROXY in any case, as ingress-nginx).
fn parse_entry(value: &str) -> Result<Entry<'_>, String> {
    let shape = || {
        format!(
            "{value:?} is not \"namespace/service:port\", optionally followed by \
             \":PROXY\" (decode) and \":PROXY\" (encode)"
        )
    };
    let mut parts = value.trim().split(':');
    let service_ref = parts.next().unwrap_or_default();
    let port = parts.next().ok_or_else(shape)?;
    let mut flag = || match parts.next() {
        None => Ok(false),
        Some(p) if p.eq_ignore_ascii_case("PROXY") => Ok(true),
        // An empty field keeps its place: "ns/svc:80::PROXY" encodes only.
        Some("") => Ok(false),
        Some(_) => Err(shape()),
    };
    let decode = flag()?;
    let encode = flag()?;
    if parts.next().is_some() {
        return Err(shape());
    }
    let (namespace, service) = service_ref.split_once('/').ok_or_else(shape)?;
    if !dns_label(namespace) || !dns_label(service) {
        return Err(format!(
            "{service_ref:?} is not a namespace and a Service name (DNS labels)"
        ));
    }
    let port_ok = match port.parse::<u32>() {
        Ok(n) => (1..=65535).contains(&n),
        Err(_) => dns_label(port) && port.len() <= 15,
    };
    if !port_ok {
        return Err(format!(
            "{port:?} is not a Service port number (1-65535) or name"
        ));
    }
    Ok(Entry {
        namespace,
        service,
        port,
        decode,
        encode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` → the entry, or the error's start.
    fn check(value: &str, expected: Result<(&str, &str, &str, bool, bool), &str>) {
        let got = parse_entry(value);
        match (got, expected) {
            (Ok(e), Ok((ns, svc, port, decode, encode))) => assert_eq!(
                e,
                Entry {
                    namespace: ns,
                    service: svc,
                    port,
                    decode,
                    encode
                },
                "{value}"
            ),
            (Err(e), Err(start)) => assert!(e.starts_with(start), "{value}: {e}"),
            (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn entries_parse_as_ingress_nginx_reads_them() {
        check("demo/echo:9000", Ok(("demo", "echo", "9000", false, false)));
        check(
            "demo/echo:tcp-echo",
            Ok(("demo", "echo", "tcp-echo", false, false)),
        );
        check(
            "demo/echo:9000:PROXY",
            Ok(("demo", "echo", "9000", true, false)),
        );
        check(
            "demo/echo:9000:proxy:PROXY",
            Ok(("demo", "echo", "9000", true, true)),
        );
        check(
            "demo/echo:9000::PROXY",
            Ok(("demo", "echo", "9000", false, true)),
        );
        check(" demo/echo:53 ", Ok(("demo", "echo", "53", false, false)));
        check("demo/echo", Err("\"demo/echo\" is not"));
        check("echo:9000", Err("\"echo:9000\" is not"));
        check("demo/echo:9000:SEND", Err("\"demo/echo:9000:SEND\" is not"));
        check(
            "demo/echo:9000:PROXY:PROXY:PROXY",
            Err("\"demo/echo:9000:PROXY:PROXY:PROXY\""),
        );
        check("demo/Echo:9000", Err("\"demo/Echo\" is not a namespace"));
        check(
            "demo/echo;x:9000",
            Err("\"demo/echo;x\" is not a namespace"),
        );
        check("demo/echo:0", Err("\"0\" is not a Service port"));
        check("demo/echo:70000", Err("\"70000\" is not a Service port"));
        check("demo/echo:a b", Err("\"a b\" is not a Service port"));
    }
}
