//! Synthetic clusters for the benchmark and the memory example: `n` Ingresses with
//! 3 paths each on their own host, one Service each (port 80 named `http`, named target
//! port) and one EndpointSlice with 10 ready endpoints each, spread over 100 namespaces.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrule_model::{Settings, Snapshot};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressClass, IngressClassSpec,
    IngressRule, IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(ns.to_owned()),
        uid: Some(format!("uid-{ns}-{name}")),
        ..ObjectMeta::default()
    }
}

fn ns(i: usize) -> String {
    format!("ns{}", i % 100)
}

/// The Ingress number `i`.
pub fn ingress(i: usize) -> Ingress {
    let path = |p: &str| HTTPIngressPath {
        path: Some(p.to_owned()),
        path_type: "Prefix".to_owned(),
        backend: IngressBackend {
            service: Some(IngressServiceBackend {
                name: format!("svc{i}"),
                port: Some(ServiceBackendPort {
                    number: Some(80),
                    name: None,
                }),
            }),
            resource: None,
        },
    };
    let mut m = meta(&ns(i), &format!("ing{i}"));
    m.creation_timestamp = Some(Time(
        Timestamp::from_second(1_700_000_000 + i as i64).unwrap(),
    ));
    Ingress {
        metadata: m,
        spec: Some(IngressSpec {
            ingress_class_name: Some("ferrule".to_owned()),
            rules: Some(vec![IngressRule {
                host: Some(format!("host{i}.example.com")),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![path("/"), path("/api"), path("/static/")],
                }),
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    }
}

/// The Service of Ingress `i`.
pub fn service(i: usize) -> Service {
    Service {
        metadata: meta(&ns(i), &format!("svc{i}")),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: 80,
                target_port: Some(IntOrString::String("web".to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The EndpointSlice of Service `i`; `generation` shifts the last endpoint's address.
pub fn slice(i: usize, generation: usize) -> EndpointSlice {
    let mut m = meta(&ns(i), &format!("svc{i}-abcde"));
    m.labels = Some(BTreeMap::from([(
        "kubernetes.io/service-name".to_owned(),
        format!("svc{i}"),
    )]));
    let endpoints = (0..10)
        .map(|e| {
            let last = if e == 9 { generation } else { 0 };
            Endpoint {
                addresses: vec![format!("10.{}.{}.{}", i / 256 % 256, i % 256, e + last)],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            }
        })
        .collect();
    EndpointSlice {
        metadata: m,
        address_type: "IPv4".to_owned(),
        endpoints: Some(endpoints),
        ports: Some(vec![EndpointPort {
            name: Some("http".to_owned()),
            port: Some(8080),
            ..EndpointPort::default()
        }]),
    }
}

/// A cluster of `n` Ingresses.
pub fn cluster(n: usize) -> Snapshot {
    Snapshot {
        ingresses: (0..n).map(|i| Arc::new(ingress(i))).collect(),
        ingress_classes: vec![Arc::new(IngressClass {
            metadata: ObjectMeta {
                name: Some("ferrule".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(IngressClassSpec {
                controller: Some(ferrule_model::snapshot::DEFAULT_CONTROLLER.to_owned()),
                parameters: None,
            }),
        })],
        services: (0..n).map(|i| Arc::new(service(i))).collect(),
        endpoint_slices: (0..n).map(|i| Arc::new(slice(i, 0))).collect(),
        secrets: vec![],
        config_map: None,
        config_maps: vec![],
        external_names: Default::default(),
        settings: Settings::default(),
        observed: None,
    }
}

/// The same cluster with one endpoint of Service `n / 2` changed.
pub fn with_one_endpoint_changed(snap: &Snapshot) -> Snapshot {
    let mut next = snap.clone();
    let i = snap.ingresses.len() / 2;
    next.endpoint_slices[i] = Arc::new(slice(i, 100));
    next
}
