//! TCP and UDP services (`--tcp-services-configmap`, `--udp-services-configmap`):
//! which ports the model serves, where they go, and what is reported.

mod common;

use common::*;
use ferrule_model::{Diff, StreamProtocol, build, diff};
use serde_json::{Value, json};

fn services_map(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> =
        data.iter().map(|(k, v)| ((*k).into(), json!(v))).collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "ingress-nginx" },
        "data": data,
    })
}

/// A DNS-like Service `demo/dns`: port 53 over TCP (`dns-tcp`) and UDP (`dns`), with
/// different target ports so that a mix-up shows; and `demo/echo` port 9000 (`tcp`).
fn cluster(tcp: &[(&str, &str)], udp: &[(&str, &str)]) -> String {
    let dns = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "dns", "namespace": "demo" },
        "spec": { "ports": [
            { "name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5353 },
            { "name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5354 },
        ]},
    });
    let dns_slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": "dns-1", "namespace": "demo",
                      "labels": { "kubernetes.io/service-name": "dns" } },
        "addressType": "IPv4",
        "ports": [ { "name": "dns-tcp", "port": 5353, "protocol": "TCP" },
                   { "name": "dns", "port": 5354, "protocol": "UDP" } ],
        "endpoints": [ { "addresses": ["10.0.0.53"] } ],
    });
    let mut docs = vec![
        test_settings(json!({
            "tcpServices": "ingress-nginx/tcp-services",
            "udpServices": "ingress-nginx/udp-services",
            "reservedPorts": [80, 443, 10254],
        })),
        dns,
        dns_slice,
        service("demo/echo", &[("tcp", 9000, "9000")]),
        slice(
            "demo/echo-1",
            "echo",
            &[("tcp", 9000)],
            &[("10.0.0.9", Some(true))],
        ),
        service("demo/idle", &[("tcp", 7000, "7000")]),
    ];
    if !tcp.is_empty() {
        docs.push(services_map("tcp-services", tcp));
    }
    if !udp.is_empty() {
        docs.push(services_map("udp-services", udp));
    }
    docs.iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// (protocol/port, backend, endpoints as addr:port, decode, encode) of every stream.
fn streams(manifests: &str) -> (Vec<String>, ferrule_model::Model) {
    let model = build(&snapshot(manifests));
    let out = model
        .streams
        .iter()
        .map(|s| {
            let eps: Vec<String> = model
                .backends
                .get(&s.backend)
                .map(|b| {
                    b.endpoints
                        .iter()
                        .map(|e| format!("{}:{}", e.address, e.port))
                        .collect()
                })
                .unwrap_or_default();
            let proxy = match (s.decode_proxy_protocol, s.encode_proxy_protocol) {
                (false, false) => "",
                (true, false) => " decode",
                (false, true) => " encode",
                (true, true) => " decode encode",
            };
            format!(
                "{}/{} -> {} [{}]{proxy}",
                s.protocol,
                s.port,
                s.backend,
                eps.join(",")
            )
        })
        .collect();
    (out, model)
}

#[test]
fn entries_become_streams_to_the_service_port_of_their_protocol() {
    let (got, model) = streams(&cluster(
        &[
            ("9000", "demo/echo:9000"),
            ("9001", "demo/echo:tcp:PROXY"),
            ("9002", "demo/echo:9000:PROXY:PROXY"),
            ("53", "demo/dns:53"),
        ],
        &[("53", "demo/dns:53"), ("5300", "demo/dns:dns")],
    ));
    assert_eq!(
        got,
        [
            "tcp/53 -> demo_dns_53 [10.0.0.53:5353]",
            "tcp/9000 -> demo_echo_9000 [10.0.0.9:9000]",
            "tcp/9001 -> demo_echo_tcp [10.0.0.9:9000] decode",
            "tcp/9002 -> demo_echo_9000 [10.0.0.9:9000] decode encode",
            "udp/53 -> demo_dns_53_udp [10.0.0.53:5354]",
            "udp/5300 -> demo_dns_dns_udp [10.0.0.53:5354]",
        ]
    );
    expect_no_problems_on(&model, "ConfigMap ingress-nginx/tcp-services");
    expect_no_problems_on(&model, "ConfigMap ingress-nginx/udp-services");
    assert_eq!(model.streams[4].protocol, StreamProtocol::Udp);
}

#[test]
fn a_bad_entry_is_reported_by_key_and_the_others_are_served() {
    let (got, model) = streams(&cluster(
        &[
            ("9000", "demo/echo:9000"),
            ("http", "demo/echo:9000"),
            ("443", "demo/echo:9000"),
            ("9003", "demo/echo"),
            ("9004", "demo/missing:9000"),
            ("9005", "demo/echo:9999"),
            ("9006", "demo/idle:7000"),
            ("9007", "demo/dns:dns"),
        ],
        &[("53", "demo/dns:53:PROXY"), ("54", "demo/echo:9000")],
    ));
    assert_eq!(
        got,
        [
            "tcp/9000 -> demo_echo_9000 [10.0.0.9:9000]",
            "tcp/9006 -> demo_idle_7000 []",
        ]
    );
    let cm = "ConfigMap ingress-nginx/tcp-services";
    expect_problems(
        &model,
        &[
            (
                cm,
                "tcp service \"http\": the key must be a port number|not served",
            ),
            (cm, "tcp service \"443\": port 443 is the controller's own"),
            (
                cm,
                "tcp service \"9003\": \"demo/echo\" is not \"namespace/service:port\"",
            ),
            (cm, "tcp service \"9004\": Service demo/missing not found"),
            (
                cm,
                "tcp service \"9005\": Service demo/echo has no port 9999",
            ),
            (
                cm,
                "tcp service \"9006\": Service demo/idle port 7000 has no ready endpoints; connections are closed",
            ),
            // the TCP entry may not take the UDP port of that name
            (cm, "tcp service \"9007\": Service demo/dns has no port dns"),
            (
                "ConfigMap ingress-nginx/udp-services",
                "udp service \"53\": the PROXY protocol is for TCP services only",
            ),
            (
                "ConfigMap ingress-nginx/udp-services",
                "udp service \"54\": Service demo/echo has no UDP port 9000",
            ),
        ],
    );
}

#[test]
fn a_missing_configmap_is_reported_and_serves_nothing() {
    let (got, model) = streams(&cluster(&[], &[]));
    assert!(got.is_empty(), "{got:?}");
    expect_problems(
        &model,
        &[(
            "ConfigMap ingress-nginx/tcp-services",
            "(--tcp-services-configmap) not found; no TCP service is served",
        )],
    );
}

#[test]
fn endpoints_of_a_stream_change_without_a_reload_and_its_ports_with_one() {
    let one = cluster(&[("9000", "demo/echo:9000")], &[("53", "demo/dns:53")]);
    let (_, before) = streams(&one);
    let moved = one
        .replace("10.0.0.9", "10.0.0.10")
        .replace("10.0.0.53", "10.0.0.54");
    let (_, after) = streams(&moved);
    match diff(&before, &after) {
        Diff::Dynamic { backends, .. } => {
            assert_eq!(backends, ["demo_dns_53_udp", "demo_echo_9000"])
        }
        d => panic!("{d:?}"),
    }
    // The endpoint fast path of the build gives the same model as a full build.
    let (prev, next) = (snapshot(&one), snapshot(&moved));
    let mut next_shared = next.clone();
    next_shared.ingresses = prev.ingresses.clone();
    next_shared.services = prev.services.clone();
    next_shared.config_maps = prev.config_maps.clone();
    next_shared.ingress_classes = prev.ingress_classes.clone();
    next_shared.secrets = prev.secrets.clone();
    let (patched, _) = ferrule_model::build_endpoint_change(&prev, &before, &next_shared)
        .expect("an endpoint change");
    assert_eq!(patched, after);

    let other = cluster(&[("9001", "demo/echo:9000")], &[("53", "demo/dns:53")]);
    let (_, ported) = streams(&other);
    match diff(&before, &ported) {
        Diff::Reload { reasons } => {
            assert_eq!(
                reasons,
                ["stream-removed:tcp/9000", "stream-added:tcp/9001"]
            )
        }
        d => panic!("{d:?}"),
    }
}

/// `ssl-passthrough` hosts (with `--enable-ssl-passthrough`): the host's owner
/// decides, its `/` rule names the backend; without the flag the Ingress is refused.
#[test]
fn passthrough_hosts_go_to_the_backend_of_their_root_rule() {
    let docs = |flag: bool| -> String {
        let mut docs = [
            test_settings(json!({})),
            our_class(),
            service("demo/tls", &[("https", 443, "8443")]),
            slice(
                "demo/tls-1",
                "tls",
                &[("https", 8443)],
                &[("10.0.0.7", Some(true))],
            ),
            Ing::new("demo/pass", 1)
                .ann("ssl-passthrough", "true")
                .rule("pass.example", &[("/", "Prefix", "tls", "443")])
                .0,
            // a younger Ingress on the host decides nothing
            Ing::new("demo/late", 2)
                .ann("ssl-passthrough", "false")
                .rule("pass.example", &[("/other", "Prefix", "tls", "443")])
                .0,
            Ing::new("demo/noroot", 3)
                .ann("ssl-passthrough", "true")
                .rule("noroot.example", &[("/api", "Prefix", "tls", "443")])
                .0,
        ];
        if flag {
            docs[0] = test_settings(json!({ "sslPassthrough": true }));
        }
        docs.iter()
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    };
    let model = build(&snapshot(&docs(true)));
    let got: Vec<String> = model
        .passthrough
        .iter()
        .map(|p| format!("{} -> {} ({})", p.host, p.backend, p.owner))
        .collect();
    assert_eq!(got, ["pass.example -> demo_tls_443 (Ingress demo/pass)"]);
    expect_problems(
        &model,
        &[(
            "Ingress demo/noroot",
            "ssl-passthrough: host noroot.example has no rule for path / (Prefix)",
        )],
    );
    expect_no_problems_on(&model, "Ingress demo/pass");

    let without = build(&snapshot(&docs(false)));
    assert!(without.passthrough.is_empty());
    expect_problems(
        &without,
        &[(
            "Ingress demo/pass",
            "ssl-passthrough needs the controller flag --enable-ssl-passthrough; the Ingress is not served",
        )],
    );
    match diff(&without, &model) {
        Diff::Reload { reasons } => assert!(
            reasons.contains(&"ssl-passthrough".to_owned()),
            "{reasons:?}"
        ),
        d => panic!("{d:?}"),
    }
}

/// `stream-snippet` goes into the stream block, which exists only with TCP/UDP
/// services or passthrough (they load the stream module): else it is reported.
#[test]
fn a_stream_snippet_without_a_stream_block_is_reported() {
    let docs = |settings: Value| {
        [
            test_settings(settings),
            config_map(&[("stream-snippet", "server { listen 9999; return x; }")]),
        ]
        .iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
    };
    let without = build(&snapshot(&docs(json!({}))));
    assert_eq!(without.global.stream_snippet, None);
    expect_problems(
        &without,
        &[(
            "ConfigMap ingress-nginx/ferrule",
            "key stream-snippet has a stream block only with --tcp-services-configmap",
        )],
    );
    let with = build(&snapshot(&docs(json!({ "sslPassthrough": true }))));
    assert!(with.global.stream_snippet.is_some());
    expect_no_problems_on(&with, "ConfigMap ingress-nginx/ferrule");
}

/// The `stream-snippet` annotation: kept with snippets allowed and a stream block,
/// oldest Ingress first; a Warning without a stream block; a directive that loads
/// code or reads files rejects the Ingress, as in the other snippets.
#[test]
fn stream_snippet_annotations_follow_the_snippet_rules() {
    let snap = |settings: Value, second: &str| {
        let docs = [
            test_settings(settings),
            our_class(),
            service("demo/web", &[("http", 80, "8080")]),
            Ing::new("demo/a", 1)
                .ann("stream-snippet", "server { listen 9001; return a; }")
                .rule("a.example", &[("/", "Prefix", "web", "80")])
                .0,
            Ing::new("demo/b", 2)
                .ann("stream-snippet", second)
                .rule("b.example", &[("/", "Prefix", "web", "80")])
                .0,
        ];
        let text = (docs.iter())
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n");
        let mut snap = snapshot(&text);
        snap.settings.allow_snippet_annotations = true;
        snap
    };
    let streams = json!({ "sslPassthrough": true });
    let m = build(&snap(streams.clone(), "server { listen 9002; return b; }"));
    let owners: Vec<String> = (m.stream_snippets.iter())
        .map(|s| s.owner.to_string())
        .collect();
    assert_eq!(
        owners,
        ["Ingress demo/a", "Ingress demo/b"],
        "{:?}",
        m.problems
    );
    assert_eq!(
        m.stream_snippets[1].text,
        "server { listen 9002; return b; }"
    );

    let m = build(&snap(streams, "include /etc/passwd;"));
    assert_eq!(m.stream_snippets.len(), 1);
    expect_problems(
        &m,
        &[(
            "Ingress demo/b",
            "annotation nginx.ingress.kubernetes.io/stream-snippet:",
        )],
    );

    let m = build(&snap(json!({}), "server { listen 9002; return b; }"));
    assert!(m.stream_snippets.is_empty());
    expect_problems(
        &m,
        &[
            (
                "Ingress demo/a",
                "stream-snippet: NGINX has a stream block only with",
            ),
            (
                "Ingress demo/b",
                "stream-snippet: NGINX has a stream block only with",
            ),
        ],
    );
}
