//! Rule tests that need more than the answer to a request. Which backend or status a
//! request gets is stated in the case files of `test/routing/` (checked against
//! `route()` by `model/tests/routing.rs` and against NGINX by the integration tests);
//! here are the model's side of some of those cases (owners, endpoints, what is left
//! out) and the rules routing does not show (endpoint filters, annotations, canaries).
//!
//! Backends are named `namespace_service_port`; statuses are "404" (no default backend)
//! and "503" (missing Service, port or ready endpoint).

#[macro_use]
mod common;

use common::*;
use ferrule_model::{PathMatch, Severity, Target};
use serde_json::json;

// ---------------------------------------------------------------------------------------
// The routing cases of test/routing: what they imply beyond the answer to a request

#[test]
fn hosts_are_kept_lower_case() {
    let m = named_case_model("hosts/case-insensitive-and-the-port-ignored");
    assert!(m.server("foo.example.com").is_some());
}

#[test]
fn without_a_default_backend_nginx_answers_404_itself() {
    let m = named_case_model("default-backend/an-unknown-host-is-404-without-a-default-backend");
    assert_eq!(m.default_backend, Target::Status(404));
    let m = named_case_model("default-backend/a-rule-without-a-host-is-the-catch-all-server");
    assert!(m.server(ferrule_model::DEFAULT_SERVER).is_some());
}

#[test]
fn the_backend_of_a_losing_catch_all_does_not_survive() {
    let m = named_case_model(
        "default-backend/a-catch-all-ingress-serves-unknown-hosts-and-unmatched-paths",
    );
    assert!(
        !m.backends.contains_key("default_late_80"),
        "{:?}",
        m.backends.keys()
    );
}

#[test]
fn the_oldest_ingress_owns_the_locations_it_wins() {
    let m = named_case_model("conflicts/the-oldest-owns-a-host-path-and-path-type");
    let owner = |path: &str, pm: PathMatch| {
        m.server("c.test")
            .unwrap()
            .locations
            .iter()
            .find(|l| l.path == path && l.path_match == pm)
            .unwrap()
            .owner
            .to_string()
    };
    assert_eq!(owner("/api", PathMatch::Prefix), "Ingress default/old");
    assert_eq!(owner("/api", PathMatch::Exact), "Ingress default/exact");
}

#[test]
fn a_shared_host_is_owned_by_its_oldest_ingress() {
    let m = named_case_model("conflicts/the-paths-of-several-ingresses-on-one-host-merge");
    // the server's owner (server-level annotations) is the oldest Ingress on the host
    let server = m.server("merge.test").unwrap();
    assert_eq!(
        server.owner.as_ref().unwrap().to_string(),
        "Ingress other/two"
    );
    assert_eq!(server.locations.len(), 2);
    assert!(m.problems.is_empty(), "{}", problem_list(&m));
}

#[test]
fn a_rejected_ingress_is_not_half_applied() {
    let m = named_case_model("conflicts/a-rejected-ingress-claims-nothing");
    // no server, no TLS problem, no catch-all: one problem, the annotation
    assert!(m.server("bad.test").is_none());
    assert_eq!(
        m.problems_of(&ferrule_model::ResourceRef::new(
            "Ingress", "default", "bad"
        ))
        .count(),
        1,
        "{}",
        problem_list(&m)
    );
    let z = &m.server("shared.test").unwrap().locations;
    let z = z.iter().find(|l| l.path == "/z").unwrap();
    assert_eq!(z.settings.proxy_read_timeout, Some(120));
}

#[test]
fn a_missing_service_leaves_no_backend() {
    let m = named_case_model("backends/a-missing-service-answers-503");
    assert!(m.backends.is_empty());
}

#[test]
fn service_ports_resolve_through_the_slice_port_of_the_same_name() {
    let m = named_case_model("backends/service-ports-by-number-and-by-name");
    let eps = |b: &str| {
        m.backends[b]
            .endpoints
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    };
    // the named target port `web` resolved through the EndpointSlice port `http`
    // (the case's echoes multi-http and multi-metrics are ports 8000 and 8001)
    assert_eq!(eps("default_multi_80"), ["10.0.0.1:8000"]);
    assert_eq!(eps("default_multi_http"), ["10.0.0.1:8000"]);
    assert_eq!(eps("default_multi_metrics"), ["10.0.0.1:8001"]);
    let m = named_case_model("backends/an-unnamed-single-port");
    assert_eq!(m.backends["default_plain_80"].endpoints[0].port, 8000);
}

#[test]
fn a_backend_without_ready_endpoints_stays_in_the_model() {
    let m = named_case_model("backends/no-ready-endpoints-answer-503");
    assert!(m.problems.iter().all(|p| p.severity == Severity::Warning));
    // so that endpoints arriving later are a dynamic update
    assert!(m.backends["default_down_80"].endpoints.is_empty());
}

// ---------------------------------------------------------------------------------------
// Backends

#[test]
fn backend_endpoints_from_every_slice_ready_only_ipv4_and_ipv6() {
    let yaml = docs![
        service("default/web", &[("http", 80, "web")]),
        slice(
            "default/web-v4a",
            "web",
            &[("http", 8080)],
            &[
                ("10.0.0.2", Some(true)),
                ("10.0.0.1", None),
                ("10.0.0.3", Some(false))
            ]
        ),
        slice(
            "default/web-v4b",
            "web",
            &[("http", 8080)],
            &[("10.0.1.1", Some(true)), ("10.0.0.2", Some(true))]
        ),
        slice(
            "default/web-v6",
            "web",
            &[("http", 8080)],
            &[("fd00::1", Some(true)), ("fd00::2", Some(false))]
        ),
        // a slice of another Service, and one of a same-named Service elsewhere
        slice(
            "default/other-1",
            "other",
            &[("http", 8080)],
            &[("10.9.9.9", Some(true))]
        ),
        slice(
            "elsewhere/web-1",
            "web",
            &[("http", 8080)],
            &[("10.8.8.8", Some(true))]
        ),
        ingress("default/x", 1, "e.test", &[("/", "Prefix", "web", "http")]),
    ];
    let m = check(&yaml, &[("e.test", "/", "default_web_http")]);
    let eps: Vec<String> = m.backends["default_web_http"]
        .endpoints
        .iter()
        .map(|e| format!("{} {}", e.address, e.port))
        .collect();
    assert_eq!(
        eps,
        [
            "10.0.0.1 8080",
            "10.0.0.2 8080",
            "10.0.1.1 8080",
            "fd00::1 8080"
        ]
    );
}

/// An EndpointSlice is written by whoever may write one in its namespace: an address
/// of the node itself (loopback, link-local, unspecified, also IPv4-mapped) would
/// proxy a tenant's host to the controller's status port or the node's services.
/// Such endpoints are left out, with a warning, unless `--allow-local-endpoints`.
#[test]
fn local_endpoints_are_left_out_unless_allowed() {
    let yaml = |allow: bool| {
        docs![
            test_settings(json!({ "allowLocalEndpoints": allow })),
            service("default/web", &[("http", 80, "web")]),
            slice(
                "default/web-v4",
                "web",
                &[("http", 8080)],
                &[
                    ("10.0.0.1", Some(true)),
                    ("127.0.0.1", Some(true)),
                    ("127.1.2.3", Some(true)),
                    ("169.254.169.254", Some(true)),
                    ("0.0.0.0", Some(true)),
                ]
            ),
            slice(
                "default/web-v6",
                "web",
                &[("http", 8080)],
                &[
                    ("fd00::1", Some(true)),
                    ("::1", Some(true)),
                    ("fe80::1", Some(true)),
                    ("::", Some(true)),
                    ("::ffff:127.0.0.1", Some(true)),
                ]
            ),
            app("default/local", "127.0.0.1"),
            ingress(
                "default/x",
                1,
                "e.test",
                &[
                    ("/", "Prefix", "web", "http"),
                    ("/local", "Prefix", "local", "80")
                ]
            ),
        ]
    };
    let addresses = |m: &ferrule_model::Model, b: &str| -> Vec<String> {
        m.backends[b]
            .endpoints
            .iter()
            .map(|e| e.address.clone())
            .collect()
    };
    let m = check(
        &yaml(false),
        &[
            ("e.test", "/", "default_web_http"),
            ("e.test", "/local", "503"),
        ],
    );
    assert_eq!(addresses(&m, "default_web_http"), ["10.0.0.1", "fd00::1"]);
    expect_problems(
        &m,
        &[
            (
                "Ingress default/x",
                "host e.test path /: Service default/web port http: endpoint 0.0.0.0:8080, \
                 127.0.0.1:8080, 127.1.2.3:8080 and 5 more left out|--allow-local-endpoints",
            ),
            (
                "Ingress default/x",
                "path /local: Service default/local port 80: endpoint 127.0.0.1:8080 left out",
            ),
            (
                "Ingress default/x",
                "Service default/local port 80 has no ready endpoints; answering 503",
            ),
        ],
    );
    let m = check(&yaml(true), &[("e.test", "/local", "default_local_80")]);
    assert_eq!(addresses(&m, "default_web_http").len(), 10);
    assert!(
        !m.problems.iter().any(|p| p.message.contains("left out")),
        "{}",
        problem_list(&m)
    );
}

/// The balancer API takes endpoint ports 1..=65535 (lua/ferrule/validate.lua): a slice
/// port outside that (a manifests directory is not checked by an API server) gives no
/// endpoint, rather than a backend the API refuses whole.
#[test]
fn backend_endpoint_ports_the_balancer_api_takes() {
    for (port, expected) in [
        (1, "default_web_80"),
        (65535, "default_web_80"),
        (0, "503"),
        (65536, "503"),
        (-1, "503"),
    ] {
        let yaml = docs![
            service("default/web", &[("http", 80, "web")]),
            slice(
                "default/web-1",
                "web",
                &[("http", port)],
                &[("10.0.0.1", Some(true))]
            ),
            ingress("default/x", 1, "p.test", &[("/", "Prefix", "web", "80")]),
        ];
        let m = check(&yaml, &[("p.test", "/", expected)]);
        let want: Vec<String> = if expected == "503" {
            vec![]
        } else {
            vec![format!("10.0.0.1 {port}")]
        };
        let got: Vec<String> = m.backends["default_web_80"]
            .endpoints
            .iter()
            .map(|e| format!("{} {}", e.address, e.port))
            .collect();
        assert_eq!(got, want, "slice port {port}");
    }
}

/// The balancer API takes backend names of 1 to 1024 bytes without control characters
/// (lua/ferrule/validate.lua `MAX_NAME`), and NGINX must get the name the balancer
/// gets: the configuration's quoting drops control characters, C1 ones too (the
/// location of `collide\u{85}` would use the backend of `collide`); what it escapes
/// (`"`, `\`) NGINX reads back. Names from an API server are far inside that, but a
/// manifests directory's port names are not checked. A name refused is a problem
/// naming the reference, and the path answers 503.
#[test]
fn backend_names_the_balancer_api_takes() {
    // `default_<service>_80`: 11 bytes besides the Service name
    let at_limit = "s".repeat(1024 - 11);
    let past_limit = "s".repeat(1024 - 10);
    for (svc, ok) in [
        (at_limit.as_str(), true),
        (past_limit.as_str(), false),
        ("a\u{7}b", false),
        ("a\u{1f}b", false),
        ("a\u{7f}b", false),
        ("collide\u{85}", false),
        ("a\u{80}b", false),
        ("a\u{9f}b", false),
        ("a\"b", true),
        ("a\\b", true),
        ("\u{a0}\u{e9}", true),
    ] {
        let yaml = docs![
            service(&format!("default/{svc}"), &[("http", 80, "web")]),
            slice(
                "default/s-1",
                svc,
                &[("http", 8080)],
                &[("10.0.0.1", Some(true))]
            ),
            ingress("default/x", 1, "n.test", &[("/", "Prefix", svc, "80")]),
        ];
        let name = format!("default_{svc}_80");
        let m = check(&yaml, &[("n.test", "/", if ok { &name } else { "503" })]);
        if ok {
            expect_no_problems_on(&m, "Ingress default/x");
            assert_eq!(m.backends[&name].endpoints.len(), 1);
        } else {
            expect_problems(
                &m,
                &[(
                    "Ingress default/x",
                    &format!(
                        "host n.test path /: backend Service default/{svc} port 80: the backend name {name:?} is not valid for the balancer|answering 503"
                    ),
                )],
            );
            assert!(!m.backends.contains_key(&name), "{svc:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Annotations

#[test]
fn annotation_invalid_values_each_name_the_annotation() {
    for (key, value) in [
        ("ssl-redirect", "yes"),
        ("backend-protocol", "FTP"),
        ("proxy-body-size", "1 m"),
        ("proxy-connect-timeout", "-1"),
        ("load-balance", "random"),
        ("upstream-hash-by", "no-variable"),
        ("affinity", "ip"),
        ("canary-weight", "150"),
    ] {
        let mut ing = Ing::new("default/x", 1)
            .ann(key, value)
            .rule("v.test", &[("/", "Prefix", "a", "80")]);
        if key == "canary-weight" {
            ing = ing.ann("canary", "true");
        }
        let yaml = docs![app("default/a", "10.0.0.1"), ing];
        // Ignored and served (ingress-nginx's leniency), but for a canary: read as
        // a plain Ingress it would take the primary's traffic.
        let want = if key == "canary-weight" {
            "404"
        } else {
            "default_a_80"
        };
        let m = check(&yaml, &[("v.test", "/", want)]);
        expect_problems(
            &m,
            &[(
                "Ingress default/x",
                &format!("annotation {P}{key}: invalid value {value:?}"),
            )],
        );
    }
}

#[test]
fn annotation_balancing_settings_reach_the_backend() {
    let yaml = docs![
        app("default/a", "10.0.0.1"),
        Ing::new("default/x", 1)
            .ann("load-balance", "ewma")
            .ann("upstream-hash-by", "$request_uri")
            .ann("affinity", "cookie")
            .ann("session-cookie-name", "route")
            .rule("lb.test", &[("/", "Prefix", "a", "80")]),
        // younger Ingress on the same backend: the oldest user's settings win
        Ing::new("default/y", 2)
            .ann("load-balance", "round_robin")
            .rule("lb2.test", &[("/", "Prefix", "a", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            ("lb.test", "/", "default_a_80"),
            ("lb2.test", "/", "default_a_80"),
        ],
    );
    let b = &m.backends["default_a_80"].balancing;
    assert_eq!(
        b.load_balance,
        ferrule_model::annotations::LoadBalance::Ewma
    );
    assert_eq!(b.upstream_hash_by.as_deref(), Some("$request_uri"));
    assert_eq!(b.affinity.as_ref().unwrap().cookie_name, "route");
}

/// The ConfigMap's `load-balance` is the default of the annotation (ingress-nginx);
/// an invalid value is reported on the ConfigMap and round robin stays.
#[test]
fn annotation_load_balance_default_from_the_configmap() {
    use ferrule_model::annotations::LoadBalance;
    let ingresses = || {
        docs![
            our_class(),
            app("default/a", "10.0.0.1"),
            app("default/b", "10.0.0.2"),
            ingress("default/x", 1, "a.test", &[("/", "Prefix", "a", "80")]),
            Ing::new("default/y", 2)
                .ann("load-balance", "round_robin")
                .rule("b.test", &[("/", "Prefix", "b", "80")]),
        ]
    };
    let lb = |m: &ferrule_model::Model, b: &str| m.backends[b].balancing.load_balance;
    let ewma = format!(
        "{}{}",
        ingresses(),
        docs![config_map(&[("load-balance", "ewma")])]
    );
    let m = ferrule_model::build(&snapshot(&ewma));
    assert_eq!(lb(&m, "default_a_80"), LoadBalance::Ewma);
    assert_eq!(lb(&m, "default_b_80"), LoadBalance::RoundRobin);
    assert!(m.feeds_ewma("default_a_80"));
    // the default backends too: an Ingress's spec.defaultBackend, and the flag's
    for (extra, backend) in [
        (
            Ing::new("default/z", 3).default_backend("c", "80").0,
            "default_c_80",
        ),
        (
            test_settings(json!({ "defaultBackendService": "default/c" })),
            "default_c_80",
        ),
    ] {
        let yaml = format!(
            "{}{}",
            ingresses(),
            docs![
                config_map(&[("load-balance", "ewma")]),
                app("default/c", "10.0.0.3"),
                extra
            ]
        );
        let m = ferrule_model::build(&snapshot(&yaml));
        assert_eq!(lb(&m, backend), LoadBalance::Ewma, "{yaml}");
    }

    let bad = format!(
        "{}{}",
        ingresses(),
        docs![config_map(&[("load-balance", "least_conn")])]
    );
    let m = ferrule_model::build(&snapshot(&bad));
    assert_eq!(lb(&m, "default_a_80"), LoadBalance::RoundRobin);
    expect_problems(
        &m,
        &[(
            "ConfigMap ingress-nginx/ferrule",
            "key load-balance: invalid value \"least_conn\"",
        )],
    );
}

/// `proxy-buffering`: off unless the ConfigMap says on (ingress-nginx's default).
#[test]
fn configmap_proxy_buffering_is_off_by_default() {
    let buffering = |data: &[(&str, &str)]| {
        let m = ferrule_model::build(&snapshot(&docs![config_map(data)]));
        (m.global.proxy_buffering, m.problems.len())
    };
    assert_eq!(buffering(&[]), (false, 0));
    assert_eq!(buffering(&[("proxy-buffering", "on")]), (true, 0));
    assert_eq!(buffering(&[("proxy-buffering", "off")]), (false, 0));
    assert_eq!(buffering(&[("proxy-buffering", "yes")]), (false, 1));
}

/// HSTS: ingress-nginx's defaults (a year, subdomains), and the ConfigMap's keys.
#[test]
fn configmap_hsts_keys() {
    fn check(data: &[(&str, &str)], want: Option<&str>) {
        let m = ferrule_model::build(&snapshot(&docs![config_map(data)]));
        assert_eq!(m.global.hsts.as_deref(), want, "{data:?}");
    }
    check(&[], Some("max-age=31536000; includeSubDomains"));
    check(&[("hsts", "false")], None);
    check(
        &[
            ("hsts-max-age", "600"),
            ("hsts-include-subdomains", "false"),
            ("hsts-preload", "true"),
        ],
        Some("max-age=600; preload"),
    );
    let m = ferrule_model::build(&snapshot(&docs![config_map(&[("hsts-max-age", "1y")])]));
    assert_eq!(
        m.global.hsts.as_deref(),
        Some("max-age=31536000; includeSubDomains")
    );
    expect_problems(
        &m,
        &[(
            "ConfigMap ingress-nginx/ferrule",
            "key hsts-max-age: invalid value \"1y\"",
        )],
    );
}

/// `ssl-dh-param`: the Secret's `dhparam.pem`, one PEM block of DH parameters;
/// a missing Secret or anything else is reported on the ConfigMap, and no DHE.
#[test]
fn configmap_ssl_dh_param_reads_its_secret() {
    let pem = "-----BEGIN DH PARAMETERS-----\nMIIBCAKCAQEA\n-----END DH PARAMETERS-----\n";
    let secret = |name: &str, value: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name, "namespace": "ingress-nginx" },
            "stringData": { "dhparam.pem": value },
        })
    };
    let build = |value: &str| {
        ferrule_model::build(&snapshot(&docs![
            secret("dh", pem),
            secret("evil", &format!("{pem}ssl_engine x;\n")),
            config_map(&[("ssl-dh-param", value)])
        ]))
    };
    let m = build("ingress-nginx/dh");
    assert_eq!(
        (m.global.ssl_dh_param.as_ref())
            .and_then(|d| d.file.as_ref())
            .map(|f| f.bytes.as_slice()),
        Some(pem.as_bytes())
    );
    expect_problems(&m, &[]);
    for (value, problem) in [
        (
            "ingress-nginx/nosuch",
            "key ssl-dh-param: Secret ingress-nginx/nosuch: not found",
        ),
        (
            "ingress-nginx/evil",
            "key ssl-dh-param: Secret ingress-nginx/evil: dhparam.pem is not one PEM block",
        ),
        ("dh", "key ssl-dh-param: invalid value \"dh\""),
    ] {
        let m = build(value);
        assert!(m.global.ssl_dh_param.is_none(), "{value}");
        expect_problems(&m, &[("ConfigMap ingress-nginx/ferrule", problem)]);
    }
}

/// `limit-conn-zone-variable`: one variable, nothing else (it is expanded in every
/// limit key); anything else keeps the default and is reported.
#[test]
fn configmap_limit_conn_zone_variable_is_one_variable() {
    fn check(value: &str, want: &str, problem: Option<&str>) {
        let m = ferrule_model::build(&snapshot(&docs![config_map(&[(
            "limit-conn-zone-variable",
            value
        )])]));
        assert_eq!(m.global.limit_key_variable, want, "{value:?}");
        let problems: Vec<(&str, &str)> = problem
            .map(|p| vec![("ConfigMap ingress-nginx/ferrule", p)])
            .unwrap_or_default();
        expect_problems(&m, &problems);
    }
    check("$http_x_api_key", "$http_x_api_key", None);
    check(" $remote_addr ", "$remote_addr", None);
    for bad in ["remote_addr", "$", "$a b", "$a;deny all", "${host}"] {
        check(
            bad,
            "$binary_remote_addr",
            Some("key limit-conn-zone-variable: invalid value"),
        );
    }
}

/// ExternalName Services: the name's addresses (the snapshot's, looked up by the
/// controller) on the Service port's targetPort (a Service without ports: the
/// Ingress's number); none yet answers 503 with a warning; addresses of the node
/// itself are left out as EndpointSlices' are; a new answer is not an endpoint
/// change for the fast path.
#[test]
fn external_name_services_are_their_names_addresses() {
    let mut ext = service("default/ext", &[("http", 80, "8080")]);
    ext["spec"]["type"] = json!("ExternalName");
    ext["spec"]["externalName"] = json!("api.example.com");
    let mut bare = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "bare", "namespace": "default" },
        "spec": { "type": "ExternalName", "externalName": "metadata.example.com" },
    });
    bare["spec"]["ports"] = json!(null);
    let mut later = ext.clone();
    later["metadata"]["name"] = json!("later");
    later["spec"]["externalName"] = json!("later.example.com");
    let yaml = docs![
        our_class(),
        ext,
        bare,
        later,
        Ing::new("default/web", 1)
            .rule("ext.test", &[("/", "Prefix", "ext", "80")])
            .rule("bare.test", &[("/", "Prefix", "bare", "9000")])
            .rule("later.test", &[("/", "Prefix", "later", "http")]),
    ];
    let mut snap = snapshot(&yaml);
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    snap.external_names = std::sync::Arc::new(
        [
            (
                "api.example.com".to_owned(),
                vec![ip("192.0.2.1"), ip("2001:db8::1")],
            ),
            (
                "metadata.example.com".to_owned(),
                vec![ip("169.254.169.254"), ip("192.0.2.9")],
            ),
        ]
        .into(),
    );
    let m = ferrule_model::build(&snap);
    let names: Vec<&String> = m.backends.keys().collect();
    let eps = |b: &str| {
        m.backends
            .get(b)
            .unwrap_or_else(|| panic!("{b} not in {names:?}; {:?}", m.problems))
            .endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        eps("default_ext_80"),
        ["192.0.2.1:8080", "[2001:db8::1]:8080"]
    );
    assert_eq!(eps("default_bare_9000"), ["192.0.2.9:9000"]);
    assert!(eps("default_later_http").is_empty());
    expect_problems(
        &m,
        &[
            (
                "Ingress default/web",
                "Service default/bare port 9000: endpoint 169.254.169.254:9000 left out",
            ),
            (
                "Ingress default/web",
                "Service default/later port http has no ready endpoints; answering 503",
            ),
        ],
    );
    // A new answer is built in full (the problems may change), not patched.
    let mut next = snap.clone();
    next.external_names =
        std::sync::Arc::new([("later.example.com".to_owned(), vec![ip("192.0.2.7")])].into());
    assert!(ferrule_model::build_endpoint_change(&snap, &m, &next).is_none());
    let m = ferrule_model::build(&next);
    assert_eq!(
        m.backends["default_later_http"].endpoints[0].to_string(),
        "192.0.2.7:8080"
    );
}

/// `service-upstream`: the Ingress proxies to the Service's ClusterIP and port (a
/// backend of its own, untouched by EndpointSlices), other Ingresses to the same
/// Service to its endpoints; a headless Service keeps its endpoints, with a warning.
#[test]
fn annotation_service_upstream_proxies_to_the_cluster_ip() {
    let mut svc = service("default/a", &[("http", 80, "8080")]);
    svc["spec"]["clusterIP"] = json!("10.96.0.10");
    let mut headless = service("default/h", &[("http", 80, "8080")]);
    headless["spec"]["clusterIP"] = json!("None");
    let yaml = docs![
        svc,
        slice(
            "default/a-1",
            "a",
            &[("http", 8080)],
            &[("10.0.0.1", Some(true))]
        ),
        headless,
        slice(
            "default/h-1",
            "h",
            &[("http", 8080)],
            &[("10.0.0.2", Some(true))]
        ),
        // older, on the headless Service: its balancing stays the backend's
        Ing::new("default/sticky", 1)
            .ann("affinity", "cookie")
            .rule("sticky.test", &[("/", "Prefix", "h", "80")]),
        Ing::new("default/mesh", 2)
            .ann("service-upstream", "true")
            .rule("mesh.test", &[("/", "Prefix", "a", "80")])
            .rule("headless.test", &[("/", "Prefix", "h", "80")]),
        Ing::new("default/plain", 3).rule("plain.test", &[("/", "Prefix", "a", "80")]),
        // a canary's own service-upstream holds for its backend (ingress-nginx)
        Ing::new("default/mesh-canary", 4)
            .ann("canary", "true")
            .ann("canary-weight", "10")
            .ann("service-upstream", "true")
            .rule("plain.test", &[("/", "Prefix", "a", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            ("mesh.test", "/", "default_a_80_cluster-ip"),
            ("plain.test", "/", "default_a_80"),
            ("headless.test", "/", "default_h_80"),
        ],
    );
    let eps = |b: &str| {
        m.backends[b]
            .endpoints
            .iter()
            .map(|e| format!("{}:{}", e.address, e.port))
            .collect::<Vec<_>>()
    };
    assert_eq!(eps("default_a_80_cluster-ip"), ["10.96.0.10:80"]);
    assert_eq!(eps("default_a_80"), ["10.0.0.1:8080"]);
    assert_eq!(eps("default_h_80"), ["10.0.0.2:8080"]);
    assert!(m.backends["default_h_80"].balancing.affinity.is_some());
    let canary = m.backends["default_a_80"]
        .balancing
        .canary
        .as_ref()
        .unwrap();
    assert_eq!(canary.backend, "default_a_80_cluster-ip");
    expect_problems(
        &m,
        &[(
            "Ingress default/mesh",
            "host headless.test path /: service-upstream: Service default/h has no ClusterIP (headless); proxying to its endpoints",
        )],
    );

    // The endpoint fast path leaves the ClusterIP backend alone.
    // (only the slices differ, the rest is shared, as the sources share it)
    let prev = snapshot(&yaml);
    let next = ferrule_model::Snapshot {
        endpoint_slices: snapshot(&yaml.replace("10.0.0.1", "10.0.0.9")).endpoint_slices,
        ..prev.clone()
    };
    let (fast, changed) =
        ferrule_model::build_endpoint_change(&prev, &m, &next).expect("fast path");
    assert_eq!(changed, ["default_a_80"]);
    assert_eq!(
        fast.backends["default_a_80_cluster-ip"].endpoints,
        m.backends["default_a_80_cluster-ip"].endpoints
    );
}

// ---------------------------------------------------------------------------------------
// Canary

#[test]
fn canary_pairs_with_its_primary_by_host_and_path() {
    let yaml = docs![
        app("default/stable", "10.0.0.1"),
        app("default/next", "10.0.0.2"),
        app("default/orphan", "10.0.0.3"),
        ingress(
            "default/main",
            1,
            "shop.test",
            &[("/", "Prefix", "stable", "80")]
        ),
        Ing::new("default/main-canary", 2)
            .ann("canary", "true")
            .ann("canary-weight", "20")
            .ann("canary-by-header", "X-Canary")
            .rule("shop.test", &[("/", "Prefix", "next", "80")]),
        Ing::new("default/orphan-canary", 3)
            .ann("canary", "true")
            .ann("canary-weight", "50")
            .rule("nothing-here.test", &[("/", "Prefix", "orphan", "80")])
            .rule("shop.test", &[("/other", "Prefix", "orphan", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            // the canary adds no location: routing picks the primary, the balancer splits
            ("shop.test", "/", "default_stable_80"),
            ("shop.test", "/other", "default_stable_80"),
            ("nothing-here.test", "/", "404"),
        ],
    );
    let canary = m.backends["default_stable_80"]
        .balancing
        .canary
        .as_ref()
        .expect("canary set on the primary backend");
    assert_eq!(canary.backend, "default_next_80");
    assert_eq!(canary.rules.weight, 20);
    assert_eq!(canary.rules.header.as_deref(), Some("X-Canary"));
    assert!(m.backends.contains_key("default_next_80"));
    assert!(!m.backends.contains_key("default_orphan_80"));
    assert_eq!(m.server("shop.test").unwrap().locations.len(), 1);
    expect_problems(
        &m,
        &[
            (
                "Ingress default/orphan-canary",
                "canary: no primary Ingress with a resolvable backend serves host nothing-here.test path /",
            ),
            (
                "Ingress default/orphan-canary",
                "host shop.test path /other",
            ),
        ],
    );
    expect_no_problems_on(&m, "Ingress default/main-canary");
}

/// Several Ingresses routing to one Service port share its balancing settings: as in
/// ingress-nginx, the oldest Ingress that sets a setting decides it, setting by
/// setting; one without annotations decides nothing, and a younger different value
/// is reported where it is ignored.
#[test]
fn balancing_settings_of_a_shared_service_port_are_decided_setting_by_setting() {
    use ferrule_model::annotations::LoadBalance;
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        ingress(
            "default/plain",
            1,
            "a.test",
            &[("/", "Prefix", "web", "80")]
        ),
        Ing::new("default/sticky", 2)
            .ann("affinity", "cookie")
            .ann("session-cookie-name", "stk")
            .rule("b.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/ewma", 3)
            .ann("load-balance", "ewma")
            .ann("affinity", "cookie")
            .ann("session-cookie-name", "other")
            .rule("c.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/same", 4)
            .ann("affinity", "cookie")
            .ann("session-cookie-name", "stk")
            .rule("d.test", &[("/", "Prefix", "web", "80")]),
    ];
    let m = check(&yaml, &[("a.test", "/", "default_web_80")]);
    let b = &m.backends["default_web_80"].balancing;
    assert_eq!(b.affinity.as_ref().unwrap().cookie_name, "stk");
    assert_eq!(b.load_balance, LoadBalance::Ewma);
    expect_problems(
        &m,
        &[(
            "Ingress default/ewma",
            "backend default_web_80: the affinity annotations are ignored: Ingress default/sticky is older and sets them for this Service port",
        )],
    );
    for quiet in ["default/plain", "default/sticky", "default/same"] {
        expect_no_problems_on(&m, &format!("Ingress {quiet}"));
    }
}

/// ingress-nginx ignores a canary Ingress's annotations except the canary rules,
/// `load-balance`, `upstream-hash-by` and session affinity: those give the canary
/// backend its settings, unless an Ingress routing to that Service directly set them.
#[test]
fn canary_ingress_balancing_settings_reach_the_canary_backend() {
    use ferrule_model::annotations::{CanaryAffinity, LoadBalance};
    let yaml = docs![
        app("default/stable", "10.0.0.1"),
        app("default/next", "10.0.0.2"),
        app("default/shared", "10.0.0.3"),
        ingress(
            "default/main",
            1,
            "shop.test",
            &[
                ("/", "Prefix", "stable", "80"),
                ("/b", "Prefix", "stable", "80")
            ]
        ),
        // a younger Ingress routing to "shared" directly: its settings still win
        // over the canary's, which only fill in what no direct Ingress sets
        Ing::new("default/direct", 5)
            .ann("load-balance", "round_robin")
            .rule("shared.test", &[("/", "Prefix", "shared", "80")]),
        Ing::new("default/main-canary", 2)
            .ann("canary", "true")
            .ann("canary-weight", "20")
            .ann("affinity-canary-behavior", "legacy")
            .ann("load-balance", "ewma")
            .ann("upstream-hash-by", "$arg_user")
            .ann("affinity", "cookie")
            .ann("session-cookie-name", "canary-route")
            // ignored on a canary, as in ingress-nginx
            .ann("proxy-read-timeout", "7")
            .rule("shop.test", &[("/", "Prefix", "next", "80")]),
        Ing::new("default/shared-canary", 3)
            .ann("canary", "true")
            .ann("canary-weight", "20")
            .ann("load-balance", "ewma")
            .rule("shop.test", &[("/b", "Prefix", "shared", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            ("shop.test", "/", "default_stable_80"),
            ("shared.test", "/", "default_shared_80"),
        ],
    );
    let next = &m.backends["default_next_80"].balancing;
    assert_eq!(next.load_balance, LoadBalance::Ewma);
    assert_eq!(next.upstream_hash_by.as_deref(), Some("$arg_user"));
    assert_eq!(next.affinity.as_ref().unwrap().cookie_name, "canary-route");
    assert_eq!(next.canary, None);
    let route = m.backends["default_stable_80"]
        .balancing
        .canary
        .as_ref()
        .unwrap();
    assert_eq!(route.backend, "default_next_80");
    assert_eq!(route.rules.affinity_behavior, CanaryAffinity::Legacy);
    assert_eq!(
        m.backends["default_stable_80"].balancing.load_balance,
        LoadBalance::RoundRobin
    );
    assert!(
        m.feeds_ewma("default_stable_80"),
        "the canary side feeds EWMA"
    );
    let server = m.server("shop.test").unwrap();
    let root = server.locations.iter().find(|l| l.path == "/").unwrap();
    assert_eq!(root.settings.proxy_read_timeout, None);
    assert_eq!(
        m.backends["default_shared_80"].balancing.load_balance,
        LoadBalance::RoundRobin
    );
    expect_no_problems_on(&m, "Ingress default/main-canary");
}

#[test]
fn canary_oldest_wins_a_primary() {
    let yaml = docs![
        app("default/stable", "10.0.0.1"),
        app("default/c1", "10.0.0.2"),
        app("default/c2", "10.0.0.3"),
        ingress(
            "default/main",
            1,
            "shop.test",
            &[("/", "Prefix", "stable", "80")]
        ),
        Ing::new("default/young-canary", 9)
            .ann("canary", "true")
            .ann("canary-weight", "90")
            .rule("shop.test", &[("/", "Prefix", "c2", "80")]),
        Ing::new("default/old-canary", 2)
            .ann("canary", "true")
            .ann("canary-weight", "5")
            .rule("shop.test", &[("/", "Prefix", "c1", "80")]),
        // the same canary backend from a younger Ingress does not take over either
        Ing::new("default/copy-canary", 10)
            .ann("canary", "true")
            .ann("canary-weight", "70")
            .rule("shop.test", &[("/", "Prefix", "c1", "80")]),
    ];
    let m = check(&yaml, &[("shop.test", "/", "default_stable_80")]);
    let canary = m.backends["default_stable_80"]
        .balancing
        .canary
        .as_ref()
        .unwrap();
    assert_eq!(canary.backend, "default_c1_80");
    assert_eq!(canary.rules.weight, 5);
    assert!(!m.backends.contains_key("default_c2_80"));
    for loser in ["default/young-canary", "default/copy-canary"] {
        expect_problems(
            &m,
            &[(
                &format!("Ingress {loser}"),
                "canary: backend default_stable_80 already has a canary from Ingress default/old-canary, which is older (oldest wins)",
            )],
        );
    }
}

/// Any namespace may add a canary to a host + path (as in ingress-nginx); the owner
/// of the primary sees it in its status. A canary from its own namespace is silent.
#[test]
fn a_canary_from_another_namespace_is_reported_on_the_primary() {
    let yaml = docs![
        app("alpha/web", "10.0.0.1"),
        app("alpha/next", "10.0.0.2"),
        app("beta/web", "10.0.0.3"),
        ingress("alpha/main", 1, "a.test", &[("/", "Prefix", "web", "80")]),
        ingress(
            "alpha/api",
            1,
            "a.test",
            &[("/api", "Prefix", "next", "80")]
        ),
        Ing::new("beta/canary", 2)
            .ann("canary", "true")
            .ann("canary-weight", "100")
            .rule("a.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("alpha/own-canary", 3)
            .ann("canary", "true")
            .ann("canary-weight", "10")
            .rule("a.test", &[("/api", "Prefix", "web", "80")]),
    ];
    let m = check(&yaml, &[("a.test", "/", "alpha_web_80")]);
    let canary = m.backends["alpha_web_80"]
        .balancing
        .canary
        .as_ref()
        .unwrap();
    assert_eq!(canary.backend, "beta_web_80");
    expect_problems(
        &m,
        &[(
            "Ingress alpha/main",
            "canary: Ingress beta/canary (another namespace) receives part of the traffic of backend alpha_web_80 (host a.test path /), routed to beta_web_80",
        )],
    );
    assert_eq!(
        m.backends["alpha_next_80"]
            .balancing
            .canary
            .as_ref()
            .unwrap()
            .backend,
        "alpha_web_80"
    );
    expect_no_problems_on(&m, "Ingress alpha/api");
}

/// A canary Service without ready endpoints takes no share: the primary serves
/// every request (the balancer falls back), and the warning says so.
#[test]
fn a_canary_without_endpoints_leaves_its_share_to_the_primary() {
    let yaml = docs![
        app("default/stable", "10.0.0.1"),
        service("default/next", &[("http", 80, "web")]),
        ingress(
            "default/main",
            1,
            "shop.test",
            &[("/", "Prefix", "stable", "80")]
        ),
        Ing::new("default/canary", 2)
            .ann("canary", "true")
            .ann("canary-weight", "50")
            .rule("shop.test", &[("/", "Prefix", "next", "80")]),
    ];
    let m = check(&yaml, &[("shop.test", "/", "default_stable_80")]);
    expect_problems(
        &m,
        &[(
            "Ingress default/canary",
            "Service default/next port 80 has no ready endpoints; the primary serves the canary's share",
        )],
    );
}

#[test]
fn canary_on_the_primarys_own_service_is_a_problem_on_the_canary() {
    let self_canary = Ing::new("default/self-canary", 2)
        .ann("canary", "true")
        .ann("canary-weight", "50")
        .rule("shop.test", &[("/", "Prefix", "stable", "80")]);
    let base = docs![
        app("default/stable", "10.0.0.1"),
        app("default/next", "10.0.0.2"),
        ingress(
            "default/main",
            1,
            "shop.test",
            &[("/", "Prefix", "stable", "80")]
        ),
        self_canary,
    ];
    let problem = (
        "Ingress default/self-canary",
        "canary: spec.rules[0].http.paths[0].backend.service default/stable is the primary's own backend default_stable_80 (host shop.test path /); canary ignored",
    );

    // Alone: the primary serves as if there were no canary.
    let m = check(&base, &[("shop.test", "/", "default_stable_80")]);
    assert_eq!(m.backends["default_stable_80"].balancing.canary, None);
    expect_problems(&m, &[problem]);
    expect_no_problems_on(&m, "Ingress default/main");

    // It does not claim the primary either: a younger, real canary still attaches.
    let yaml = base
        + &docs![
            Ing::new("default/real-canary", 3)
                .ann("canary", "true")
                .ann("canary-weight", "20")
                .rule("shop.test", &[("/", "Prefix", "next", "80")])
        ];
    let m = check(&yaml, &[("shop.test", "/", "default_stable_80")]);
    let canary = m.backends["default_stable_80"].balancing.canary.as_ref();
    assert_eq!(canary.map(|c| c.backend.as_str()), Some("default_next_80"));
    assert_eq!(canary.map(|c| c.rules.weight), Some(20));
    expect_problems(&m, &[problem]);
    expect_no_problems_on(&m, "Ingress default/real-canary");
    expect_no_problems_on(&m, "Ingress default/main");
}

// ---------------------------------------------------------------------------------------
// Annotations Ferrule does not implement: never silently dropped

#[test]
fn an_unimplemented_access_restriction_rejects_its_ingress_and_others_warn() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        Ing::new("default/basic", 1)
            .ann("nginx.ingress.kubernetes.io/global-rate-limit-window", "1m")
            .rule("basic.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/auth", 1)
            .ann("nginx.ingress.kubernetes.io/global-rate-limit", "10")
            .rule("auth.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/traced", 1)
            .ann("nginx.ingress.kubernetes.io/enable-opentelemetry", "true")
            .ann("nginx.ingress.kubernetes.io/ssl-redirect", "false")
            .rule("traced.test", &[("/", "Prefix", "web", "80")]),
        // Another controller's prefix is not ours to judge.
        Ing::new("default/other-prefix", 1)
            .ann("example.com/auth-url", "http://auth.example/check")
            .rule("other-prefix.test", &[("/", "Prefix", "web", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            ("basic.test", "/", "404"),
            ("auth.test", "/", "404"),
            ("traced.test", "/", "default_web_80"),
            ("other-prefix.test", "/", "default_web_80"),
        ],
    );
    expect_problems(
        &m,
        &[
            (
                "Ingress default/basic",
                "annotation nginx.ingress.kubernetes.io/global-rate-limit-window (global rate limits) restricts access and Ferrule does not implement it yet",
            ),
            (
                "Ingress default/auth",
                "nginx.ingress.kubernetes.io/global-rate-limit (global rate limits)",
            ),
            (
                "Ingress default/traced",
                "annotation nginx.ingress.kubernetes.io/enable-opentelemetry (tracing) is not implemented by Ferrule and is ignored",
            ),
        ],
    );
    let severity = |name: &str| {
        m.problems
            .iter()
            .find(|p| p.resource.name == name)
            .map(|p| p.severity)
    };
    assert_eq!(severity("basic"), Some(Severity::Error));
    assert_eq!(severity("auth"), Some(Severity::Error));
    assert_eq!(severity("traced"), Some(Severity::Warning));
    expect_no_problems_on(&m, "Ingress default/other-prefix");
}

/// `enable-ocsp` is stapled by the Lua balancer; with the njs one
/// (`Settings::ocsp_stapling` false) it is a Warning and off.
#[test]
fn enable_ocsp_without_a_stapling_balancer_is_a_warning() {
    let mut snap = snapshot(&docs![config_map(&[("enable-ocsp", "true")])]);
    let m = ferrule_model::build(&snap);
    assert!(m.global.http.ocsp);
    expect_no_problems_on(&m, "ConfigMap ingress-nginx/ferrule");
    snap.settings.ocsp_stapling = false;
    let m = ferrule_model::build(&snap);
    assert!(!m.global.http.ocsp);
    expect_problems(
        &m,
        &[(
            "ConfigMap ingress-nginx/ferrule",
            "key enable-ocsp: the njs balancer cannot staple OCSP responses|; it is ignored",
        )],
    );
}

/// `use-proxy-protocol` with `use-forwarded-headers`: the realip module reads the
/// header Ferrule's module sets (`forwarded-for-proxy-protocol-header`), filled from
/// `forwarded-for-header` behind a trusted PROXY line; without the module
/// (`Settings::input_headers` false) a Warning, and the PROXY line names the client.
#[test]
fn forwarded_headers_behind_the_proxy_protocol() {
    let keys = [
        ("use-proxy-protocol", "true"),
        ("use-forwarded-headers", "true"),
        ("proxy-real-ip-cidr", "10.0.0.0/8"),
        ("forwarded-for-header", "X-Client-IP"),
    ];
    let mut snap = snapshot(&docs![config_map(&keys)]);
    let m = ferrule_model::build(&snap);
    expect_no_problems_on(&m, "ConfigMap ingress-nginx/ferrule");
    let ca = &m.global.client_address;
    assert_eq!(
        ca.real_ip_header.as_deref(),
        Some("X-Forwarded-For-Proxy-Protocol")
    );
    let b = ca
        .behind_proxy_protocol
        .as_ref()
        .expect("behind a PROXY line");
    assert_eq!(
        (b.header.as_str(), b.forwarded_for.as_str()),
        ("X-Forwarded-For-Proxy-Protocol", "$http_x_client_ip")
    );

    let named = [
        keys.as_slice(),
        &[("forwarded-for-proxy-protocol-header", "X-Via-LB")],
    ]
    .concat();
    let m = ferrule_model::build(&snapshot(&docs![config_map(&named)]));
    assert_eq!(
        m.global.client_address.real_ip_header.as_deref(),
        Some("X-Via-LB")
    );
    // Not a header the module may set (nor a variable NGINX reads).
    for bad in ["X_Via", "X:Via"] {
        let named = [
            keys.as_slice(),
            &[("forwarded-for-proxy-protocol-header", bad)],
        ]
        .concat();
        let m = ferrule_model::build(&snapshot(&docs![config_map(&named)]));
        assert_eq!(
            m.global.client_address.real_ip_header.as_deref(),
            Some("X-Forwarded-For-Proxy-Protocol"),
            "{bad}"
        );
        expect_problems(
            &m,
            &[(
                "ConfigMap ingress-nginx/ferrule",
                "key forwarded-for-proxy-protocol-header: invalid value|using the default",
            )],
        );
    }

    snap.settings.input_headers = false;
    let m = ferrule_model::build(&snap);
    let ca = &m.global.client_address;
    assert_eq!(ca.real_ip_header.as_deref(), Some("proxy_protocol"));
    assert_eq!(ca.behind_proxy_protocol, None);
    expect_problems(
        &m,
        &[(
            "ConfigMap ingress-nginx/ferrule",
            "keys use-proxy-protocol with use-forwarded-headers|the PROXY line's address is the client's",
        )],
    );
}

/// A ConfigMap key Ferrule does not implement is reported: an error when it
/// restricts access for every host, a Warning otherwise.
#[test]
fn configmap_unimplemented_keys_are_reported() {
    let m = ferrule_model::build(&snapshot(&docs![config_map(&[
        ("enable-modsecurity", "true"),
        ("global-rate-limit-memcached-host", "memcached:11211"),
        ("enable-brotli", "true"),
        ("lua-shared-dicts", "a: 10"),
        ("block-cidrs", "10.0.0.0/8"),
        ("proxy-body-size", "2m"),
    ])]));
    let on_cm: std::collections::BTreeSet<(bool, &str)> = m
        .problems
        .iter()
        .filter(|p| p.resource.kind == "ConfigMap")
        .map(|p| (p.severity == Severity::Error, p.message.as_str()))
        .collect();
    assert_eq!(
        on_cm,
        std::collections::BTreeSet::from([
            (
                Severity::Error,
                "key enable-modsecurity restricts access and needs the ModSecurity module, which this NGINX lacks; the hosts are served without it"
            ),
            (
                Severity::Error,
                "key global-rate-limit-memcached-host restricts access and is not an ingress-nginx or Ferrule key; the hosts are served without it"
            ),
            (
                Severity::Warning,
                "key enable-brotli needs the Brotli module, which this NGINX lacks; it is ignored"
            ),
            (
                Severity::Warning,
                "key lua-shared-dicts has no effect in Ferrule (the balancer's shared memory is sized by the controller); it is ignored"
            ),
        ]
        .map(|(s, t)| (s == Severity::Error, t)))
    );
    assert_eq!(m.global.proxy_body_size, "2m");
}

/// ConfigMap `global-auth-url`: the external auth of every location whose Ingress
/// has no `auth-url` and does not opt out with `enable-global-auth: "false"`, except
/// below `no-auth-locations` (ACME's challenge path by default). An invalid value
/// closes what it would cover (403), reported on the ConfigMap.
#[test]
fn configmap_global_auth_covers_every_location_that_does_not_opt_out() {
    let ingresses = docs![
        our_class(),
        app("default/a", "10.0.0.1"),
        Ing::new("default/plain", 1).rule(
            "plain.test",
            &[
                ("/", "Prefix", "a", "80"),
                ("/.well-known/acme-challenge", "Prefix", "a", "80"),
            ]
        ),
        Ing::new("default/out", 2)
            .ann("enable-global-auth", "false")
            .rule("out.test", &[("/", "Prefix", "a", "80")]),
        Ing::new("default/own", 3)
            .ann("auth-url", "http://own.auth/check")
            .rule("own.test", &[("/", "Prefix", "a", "80")]),
    ];
    let location = |m: &ferrule_model::Model, host: &str, path: &str| {
        let s = m.servers.iter().find(|s| s.host == host).unwrap();
        s.locations
            .iter()
            .find(|l| l.path == path)
            .unwrap()
            .settings
            .clone()
    };
    let auth_of = |m: &ferrule_model::Model, host: &str, path: &str| {
        location(m, host, path).external_auth.map(|a| a.url)
    };
    let with = |data: &[(&str, &str)]| {
        ferrule_model::build(&snapshot(&format!(
            "{ingresses}{}",
            docs![config_map(data)]
        )))
    };

    let m = with(&[
        ("global-auth-url", "http://global.auth/check"),
        ("global-auth-method", "POST"),
        ("global-auth-response-headers", "X-User"),
    ]);
    expect_problems(&m, &[]);
    let global = location(&m, "plain.test", "/").external_auth.unwrap();
    assert_eq!(global.url, "http://global.auth/check");
    assert_eq!(global.method, "POST");
    assert_eq!(global.response_headers, ["X-User"]);
    assert_eq!(
        auth_of(&m, "plain.test", "/.well-known/acme-challenge"),
        None
    );
    assert_eq!(auth_of(&m, "out.test", "/"), None);
    assert_eq!(
        auth_of(&m, "own.test", "/").as_deref(),
        Some("http://own.auth/check")
    );

    let m = with(&[
        ("global-auth-url", "http://global.auth/check"),
        ("no-auth-locations", "/public, /.well-known"),
    ]);
    assert_eq!(
        auth_of(&m, "plain.test", "/.well-known/acme-challenge"),
        None
    );
    assert!(auth_of(&m, "plain.test", "/").is_some());

    // Invalid: closed where it would apply, reported; opted-out and own auth stay.
    for data in [
        &[("global-auth-url", "http://$host/check")][..],
        &[("global-auth-signin", "https://login.example/")][..],
    ] {
        let m = with(data);
        let key = data[0].0;
        expect_problems(
            &m,
            &[("ConfigMap ingress-nginx/ferrule", &format!("key {key}: "))],
        );
        assert!(
            location(&m, "plain.test", "/").source_ranges.closed,
            "{data:?}"
        );
        assert!(!location(&m, "out.test", "/").source_ranges.closed);
        assert!(!location(&m, "own.test", "/").source_ranges.closed);
    }
    // global-auth-snippet is the administrator's: honoured without the snippet switch.
    let m = with(&[
        ("global-auth-url", "http://global.auth/check"),
        ("global-auth-snippet", "proxy_set_header X-Team a;"),
    ]);
    expect_problems(&m, &[]);
    let global = location(&m, "plain.test", "/").external_auth.unwrap();
    assert_eq!(
        global.snippet.map(|s| s.0).as_deref(),
        Some("proxy_set_header X-Team a;")
    );
}

/// custom-http-errors: the Ingress's `default-backend` Service answers them (a
/// backend of the model, kept though no path routes to it); without one, and
/// without --default-backend-service, NGINX's own pages with a Warning.
#[test]
fn error_pages_are_answered_by_the_default_backend_annotation() {
    let m = ferrule_model::build(&snapshot(&docs![
        our_class(),
        service("default/web", &[("", 80, "8080")]),
        slice(
            "default/web-1",
            "web",
            &[("", 8080)],
            &[("10.0.0.1", Some(true))]
        ),
        service("default/errors", &[("", 8080, "8080")]),
        slice(
            "default/errors-1",
            "errors",
            &[("", 8080)],
            &[("10.0.0.9", Some(true))]
        ),
        Ing::new("default/pages", 1)
            .ann("custom-http-errors", "503,404")
            .ann("default-backend", "errors")
            .rule("pages.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/orphan", 2)
            .ann("custom-http-errors", "404")
            .rule("orphan.test", &[("/", "Prefix", "web", "80")]),
    ]));
    let pages = |host: &str| {
        m.servers.iter().find(|s| s.host == host).unwrap().locations[0]
            .settings
            .error_pages
            .clone()
    };
    let e = pages("pages.test").expect("error pages");
    assert_eq!(e.codes, [404, 503]);
    assert!(e.intercept);
    assert_eq!(m.backends[&e.backend].endpoints[0].address, "10.0.0.9");
    assert_eq!(pages("orphan.test"), None);
    assert!(
        m.problems.iter().any(|p| p.resource.name == "orphan"
            && p.severity == Severity::Warning
            && p.message
                .contains("no nginx.ingress.kubernetes.io/default-backend")),
        "{:#?}",
        m.problems
    );
}

/// `default-backend` without error pages: the fallback of a Service without ready
/// endpoints (ingress-nginx's), one backend that takes the Service's endpoints, or
/// the default backend's while it has none; a missing default backend is reported.
#[test]
fn a_default_backend_answers_for_a_service_without_endpoints() {
    let yaml = docs![
        our_class(),
        service("default/web", &[("", 80, "8080")]),
        service("default/errors", &[("", 80, "8080")]),
        slice(
            "default/errors-1",
            "errors",
            &[("", 8080)],
            &[("10.0.0.9", Some(true))]
        ),
        Ing::new("default/fallback", 1)
            .ann("default-backend", "errors")
            .rule("fallback.test", &[("/", "Prefix", "web", "80")]),
        Ing::new("default/missing", 2)
            .ann("default-backend", "nosuch")
            .rule("missing.test", &[("/", "Prefix", "web", "80")]),
    ];
    let m = check(
        &yaml,
        &[
            (
                "fallback.test",
                "/",
                "default_web_80~fallback~default_errors_80",
            ),
            // no endpoints and no fallback: 503
            ("missing.test", "/", "503"),
        ],
    );
    let b = &m.backends["default_web_80~fallback~default_errors_80"];
    assert_eq!(b.endpoints[0].to_string(), "10.0.0.9:8080");
    assert_eq!(b.fallback.as_ref().map(|r| r.name.as_str()), Some("errors"));
    expect_problems(
        &m,
        &[
            (
                "Ingress default/fallback",
                "host fallback.test path /: Service default/web port 80 has no ready endpoints; answered by default-backend default/errors",
            ),
            (
                "Ingress default/missing",
                "host missing.test path /: annotation nginx.ingress.kubernetes.io/default-backend: Service default/nosuch not found or has no port; no fallback",
            ),
            (
                "Ingress default/missing",
                "host missing.test path /: Service default/web port 80 has no ready endpoints; answering 503",
            ),
        ],
    );
    // The Service's endpoints back: the same backend takes them (built in full).
    let next = snapshot(
        &(yaml.clone()
            + &docs![slice(
                "default/web-1",
                "web",
                &[("", 8080)],
                &[("10.0.0.1", Some(true))]
            )]),
    );
    assert!(ferrule_model::build_endpoint_change(&snapshot(&yaml), &m, &next).is_none());
    let m = ferrule_model::build(&next);
    let b = &m.backends["default_web_80~fallback~default_errors_80"];
    assert_eq!(b.endpoints[0].to_string(), "10.0.0.1:8080");
}
