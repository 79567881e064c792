//! Admission decisions (issue 19): (snapshot, candidate Ingress) → not ours, allowed,
//! allowed with warnings, or denied with the model's message, one table per kind of
//! problem; and, for every Ingress of a fixture, the decision says what the full
//! build of the cluster with it reports on it.

#[macro_use]
mod common;

use std::sync::Arc;

use common::*;
use ferrule_model::admission::{Decision, Index, Operation, Options};
use ferrule_model::{ResourceRef, Severity, build};
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::{Value, json};

/// What a table row expects. Texts are `|`-separated parts one message must all
/// contain (as in `expect_problems`).
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Another class: admitted without a look.
    NotOurs,
    /// Admitted without a warning.
    Clean,
    /// Admitted with a warning containing the text.
    Warned(&'static str),
    /// Refused, with a reason containing the text.
    Denied(&'static str),
}
use Want::*;

/// The cluster the tables decide against: an Ingress on shop.test with TLS, a
/// catch-all, an Ingress that sets a balancing setting of its Service.
fn cluster() -> String {
    docs![
        our_class(),
        ingress_class("other", "example.com/other-controller", false),
        app("default/web", "10.0.0.1"),
        app("default/api", "10.0.0.2"),
        service("default/idle", &[("http", 80, "web")]),
        tls_secret("default/a-tls", "a.crt", "a.key"),
        Ing::new("default/old", 10)
            .rule("a.example.com", &[("/", "Prefix", "web", "80")])
            .rule("shop.test", &[("/", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "a-tls"),
        Ing::new("default/catch", 10).default_backend("web", "80"),
        Ing::new("default/sticky", 10)
            .ann("load-balance", "ewma")
            .rule("sticky.test", &[("/", "Prefix", "api", "80")]),
    ]
}

fn index(manifests: &str) -> Index {
    Index::new(Arc::new(snapshot(manifests)))
}

fn candidate(i: Ing) -> Ingress {
    serde_json::from_value(i.0).unwrap()
}

fn matches(messages: &[String], text: &str) -> bool {
    messages
        .iter()
        .any(|m| text.split('|').all(|t| m.contains(t)))
}

/// THE helper: every `(name, candidate, want)` row decided against `manifests`.
fn table(manifests: &str, opts: &Options, rows: Vec<(&str, Ing, Want)>) {
    let index = index(manifests);
    let mut failures = Vec::new();
    for (name, ing, want) in rows {
        let got = index.check(candidate(ing), opts);
        let ok = match (&want, &got) {
            (NotOurs, Decision::NotOurs) => true,
            (Clean, Decision::Allowed { warnings }) => warnings.is_empty(),
            (Warned(t), Decision::Allowed { warnings }) => matches(warnings, t),
            (Denied(t), Decision::Denied { reasons, .. }) => matches(reasons, t),
            _ => false,
        };
        if !ok {
            failures.push(format!("  {name}: expected {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "decisions:\n{}", failures.join("\n"));
}

fn web(ing: Ing, host: &str) -> Ing {
    ing.rule(host, &[("/", "Prefix", "web", "80")])
}

#[test]
fn invalid_content_is_denied_naming_the_field_and_the_value() {
    let new = |name: &str| Ing::new(&format!("default/{name}"), 20);
    table(
        &cluster(),
        &Options::default(),
        vec![
            ("valid", web(new("valid"), "new.test"), Clean),
            // As ingress-nginx: ignored, and `kubectl apply` prints why.
            (
                "annotation value",
                web(new("timeout"), "new.test").ann("proxy-read-timeout", "soon"),
                Warned(
                    "annotation nginx.ingress.kubernetes.io/proxy-read-timeout|\"soon\"|ignored",
                ),
            ),
            // A key that restricts access, invalid: denied.
            (
                "access annotation value",
                web(new("allow"), "new.test").ann("whitelist-source-range", "10.0.0.0/33"),
                Denied("annotation nginx.ingress.kubernetes.io/whitelist-source-range|10.0.0.0/33"),
            ),
            (
                "security annotation",
                web(new("auth"), "new.test").ann("global-rate-limit", "10"),
                Denied("nginx.ingress.kubernetes.io/global-rate-limit"),
            ),
            (
                "looks like a security annotation",
                web(new("auth-x"), "new.test").ann("auth-something-new", "x"),
                Denied("auth-something-new"),
            ),
            (
                "configuration-snippet while disallowed",
                web(new("snippet"), "new.test").ann("configuration-snippet", "return 200;"),
                Denied("annotation nginx.ingress.kubernetes.io/configuration-snippet|disabled"),
            ),
            (
                "server-snippet while disallowed",
                web(new("server-snippet"), "new.test").ann("server-snippet", "listen 1;"),
                Denied("annotation nginx.ingress.kubernetes.io/server-snippet|disabled"),
            ),
            (
                "path character",
                new("brace").rule("new.test", &[("/a{b", "Prefix", "web", "80")]),
                Denied("host new.test: path \"/a{b\""),
            ),
            (
                "relative path",
                new("relative").rule("new.test", &[("api", "Exact", "web", "80")]),
                Denied("path \"api\" must start with \"/\""),
            ),
            (
                "pathType",
                new("fuzzy").rule("new.test", &[("/", "Fuzzy", "web", "80")]),
                Denied("pathType \"Fuzzy\" is not valid"),
            ),
            (
                "host",
                web(new("underscore"), "bad_host.test"),
                Denied("spec.rules: invalid host \"bad_host.test\""),
            ),
            (
                "wildcard in the middle",
                web(new("mid"), "a.*.test"),
                Denied("invalid host \"a.*.test\""),
            ),
            (
                "TLS host",
                web(new("tls-host"), "new.test").tls(&["new.test", "x..test"], "a-tls"),
                Denied("spec.tls: invalid host \"x..test\""),
            ),
            (
                "regex that would hurt other tenants",
                new("regex")
                    .ann("use-regex", "true")
                    .rule("new.test", &[("/(a+)+$", "Prefix", "web", "80")]),
                Denied("path \"/(a+)+$\""),
            ),
            (
                "one bad path among good ones",
                new("mixed").rule(
                    "new.test",
                    &[
                        ("/ok", "Prefix", "web", "80"),
                        ("/a;b", "Prefix", "web", "80"),
                    ],
                ),
                Denied("path \"/a;b\""),
            ),
        ],
    );
}

#[test]
fn a_resource_backend_is_denied() {
    let mut ing = Ing::new("default/bucket", 20);
    ing.0["spec"]["rules"] = json!([{ "host": "new.test", "http": { "paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": { "resource": { "apiGroup": "k8s.example.com", "kind": "Bucket", "name": "b" } },
    }] } }]);
    table(
        &cluster(),
        &Options::default(),
        vec![(
            "resource",
            ing,
            Denied("resource backends are not supported"),
        )],
    );
}

#[test]
fn conflicts_and_missing_references_are_warnings() {
    let new = |name: &str| Ing::new(&format!("default/{name}"), 20);
    table(
        &cluster(),
        &Options::default(),
        vec![
            (
                "host + path of an older Ingress",
                web(new("younger"), "shop.test"),
                Warned("host shop.test path / (Prefix) is already served by Ingress default/old"),
            ),
            (
                "another path of the same host",
                new("beside").rule("shop.test", &[("/cart", "Prefix", "web", "80")]),
                Clean,
            ),
            (
                "host case does not hide a conflict",
                web(new("upper"), "SHOP.test"),
                Warned("already served by Ingress default/old"),
            ),
            (
                "TLS host of an older Ingress, another Secret",
                new("tls-thief")
                    .rule("a.example.com", &[("/shop", "Prefix", "web", "80")])
                    .tls(&["a.example.com"], "mine"),
                Warned(
                    "the certificate of host a.example.com is already provided by Ingress default/old with Secret default/a-tls",
                ),
            ),
            (
                "TLS host of an older Ingress, the same Secret",
                new("tls-sharer")
                    .rule("a.example.com", &[("/shop", "Prefix", "web", "80")])
                    .tls(&["a.example.com"], "a-tls"),
                Clean,
            ),
            (
                "catch-all of an older Ingress",
                new("catch2").default_backend("api", "80"),
                Warned("spec.defaultBackend ignored: Ingress default/catch is older"),
            ),
            (
                "balancing setting of a Service port an older Ingress sets",
                new("lb")
                    .ann("load-balance", "round_robin")
                    .rule("lb.test", &[("/", "Prefix", "api", "80")]),
                Warned("the load-balance annotations are ignored: Ingress default/sticky is older"),
            ),
            (
                "Service that does not exist yet",
                new("early").rule("early.test", &[("/", "Prefix", "later", "80")]),
                Warned("host early.test path /: Service default/later not found"),
            ),
            (
                "port the Service does not have",
                new("port").rule("port.test", &[("/", "Prefix", "web", "81")]),
                Warned("Service default/web has no port 81"),
            ),
            (
                "Service without ready endpoints",
                new("idle").rule("idle.test", &[("/", "Prefix", "idle", "80")]),
                Warned("Service default/idle port 80 has no ready endpoints"),
            ),
            (
                "unknown harmless annotation",
                web(new("traced"), "traced.test").ann("enable-opentelemetry", "true"),
                Warned("nginx.ingress.kubernetes.io/enable-opentelemetry"),
            ),
            (
                "TLS host without a rule",
                web(new("norule"), "norule.test").tls(&["elsewhere.test"], "a-tls"),
                Warned("spec.tls: host elsewhere.test has no rule in this Ingress"),
            ),
            (
                "canary without a primary",
                web(new("canary"), "alone.test")
                    .ann("canary", "true")
                    .ann("canary-weight", "10"),
                Warned(
                    "canary: no primary Ingress with a resolvable backend serves host alone.test",
                ),
            ),
            (
                "canary of an existing primary",
                new("canary-ok")
                    .ann("canary", "true")
                    .ann("canary-weight", "10")
                    .rule("shop.test", &[("/", "Prefix", "api", "80")]),
                Clean,
            ),
        ],
    );
}

/// An Ingress stamped with the oldest time there is.
fn backdated(mut ing: Ing) -> Ing {
    ing.0["metadata"]["creationTimestamp"] = json!("1970-01-01T00:00:00Z");
    ing
}

#[test]
fn age_decides_who_wins() {
    let mut no_timestamp = web(Ing::new("default/unstamped", 0), "shop.test");
    no_timestamp.0["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("creationTimestamp");
    let update = Options {
        operation: Operation::Update,
        ..Options::default()
    };
    let later = web(Ing::new("default/later", 30), "later.test");
    table(
        &(cluster() + &docs![later]),
        &update,
        vec![
            // An update of the owner itself: its old version is replaced, not a rival.
            (
                "update of the owner",
                Ing::new("default/old", 10)
                    .rule("shop.test", &[("/", "Prefix", "api", "80")])
                    .rule("a.example.com", &[("/", "Prefix", "web", "80")])
                    .tls(&["a.example.com"], "a-tls"),
                Clean,
            ),
            // An older Ingress the snapshot has not seen yet (the update of one) takes
            // the path from the younger owner: the owner loses it, and the warning
            // says so.
            (
                "an older Ingress takes the path",
                web(Ing::new("default/older", 5), "shop.test"),
                Warned(
                    "Ingress default/old loses to this Ingress: host shop.test path / (Prefix) \
                     is already served by Ingress default/older",
                ),
            ),
            (
                "an older Ingress takes the catch-all",
                Ing::new("default/first", 5).default_backend("api", "80"),
                Clean,
            ),
            (
                "the catch-all's owner updated",
                Ing::new("default/catch", 10).default_backend("api", "80"),
                Clean,
            ),
            // The API server keeps creationTimestamp: an update is as old as the
            // version the snapshot holds, whatever the request says.
            (
                "an update claiming to be older than it is",
                backdated(web(Ing::new("default/later", 30), "shop.test")),
                Warned("already served by Ingress default/old"),
            ),
            // Without a stamp (and unseen), the candidate is the newest.
            (
                "no creationTimestamp",
                no_timestamp,
                Warned("already served by Ingress default/old"),
            ),
        ],
    );
}

/// A creation is the newest Ingress there is: a backdated creationTimestamp (the
/// request's, whoever sent it) wins no oldest-wins claim.
#[test]
fn a_creation_is_the_newest_whatever_its_timestamp() {
    let created = Options::default();
    assert_eq!(created.operation, Operation::Create);
    let rows = vec![
        (
            "a backdated creation of a host + path",
            backdated(web(Ing::new("default/early", 0), "shop.test")),
            Warned("host shop.test path / (Prefix) is already served by Ingress default/old"),
        ),
        (
            "a backdated creation of a TLS host",
            backdated(
                Ing::new("default/early-tls", 0)
                    .rule("a.example.com", &[("/shop", "Prefix", "web", "80")])
                    .tls(&["a.example.com"], "mine"),
            ),
            Warned(
                "the certificate of host a.example.com is already provided by Ingress default/old",
            ),
        ),
        (
            "a backdated creation of the catch-all",
            backdated(Ing::new("default/early-catch", 0).default_backend("api", "80")),
            Warned("spec.defaultBackend ignored: Ingress default/catch is older"),
        ),
    ];
    table(&cluster(), &created, rows.clone());
    // Nobody loses anything to it.
    let index = index(&cluster());
    for (name, ing, _) in rows {
        let warnings = match index.check(candidate(ing), &created) {
            Decision::Allowed { warnings } => warnings,
            other => panic!("{name}: {other:?}"),
        };
        let displaced = ferrule_model::admission::DISPLACED;
        assert!(
            !warnings.iter().any(|w| w.contains(displaced)),
            "{name}: {warnings:?}"
        );
    }
}

#[test]
fn other_classes_are_not_looked_at() {
    let bad = |ing: Ing| {
        ing.ann("global-rate-limit", "10")
            .ann("proxy-read-timeout", "soon")
    };
    table(
        &cluster(),
        &Options::default(),
        vec![
            (
                "another controller's class",
                bad(web(Ing::new("default/theirs", 20), "shop.test")).class(Some("other")),
                NotOurs,
            ),
            (
                "an unknown class",
                bad(web(Ing::new("default/unknown", 20), "shop.test")).class(Some("nope")),
                NotOurs,
            ),
            (
                "no class (no default class, no --watch-ingress-without-class)",
                bad(web(Ing::new("default/none", 20), "shop.test")).class(None),
                NotOurs,
            ),
            (
                "the legacy annotation",
                bad(web(Ing::new("default/legacy", 20), "x.test"))
                    .class(None)
                    .ann("kubernetes.io/ingress.class", "ferrule"),
                Denied("global-rate-limit"),
            ),
        ],
    );
    let without_class = cluster() + &docs![test_settings(json!({ "watchWithoutClass": true }))];
    table(
        &without_class,
        &Options::default(),
        vec![(
            "no class, with --watch-ingress-without-class",
            web(Ing::new("default/none", 20), "x.test")
                .class(None)
                .ann("proxy-read-timeout", "soon"),
            Warned("proxy-read-timeout"),
        )],
    );
    // `--strict-annotations`: the webhook denies what the controller would refuse.
    let strict = cluster() + &docs![test_settings(json!({ "strictAnnotations": true }))];
    table(
        &strict,
        &Options::default(),
        vec![(
            "annotation value, strict",
            web(Ing::new("default/timeout", 20), "new.test").ann("proxy-read-timeout", "soon"),
            Denied("annotation nginx.ingress.kubernetes.io/proxy-read-timeout|\"soon\""),
        )],
    );
}

#[test]
fn snippets_are_admitted_when_allowed_and_never_tested() {
    let allowed = cluster() + &docs![config_map(&[("allow-snippet-annotations", "true")])];
    let snippet =
        |key: &str, text: &str| web(Ing::new("default/snippet", 20), "new.test").ann(key, text);
    let cs = "configuration-snippet";
    table(
        &allowed,
        &Options::default(),
        vec![
            // What ingress-nginx users write, read as NGINX reads it.
            (
                "blocks, quotes, variables, comments",
                snippet(
                    cs,
                    "if ($http_x = \"}\") { return 403; }\nadd_header X-Y \"${host}{\";\n\
                     # a } in a comment\naccess_log off;\nerror_log stderr warn;",
                ),
                Clean,
            ),
            (
                "headers",
                snippet(
                    cs,
                    "more_set_headers \"X-A: b\";\n# a comment ; with { and }\n\
                     more_set_headers \"X-Host: $host\";",
                ),
                Clean,
            ),
            (
                "a location of the server's own",
                snippet(
                    "server-snippet",
                    "location = /ping { return 200 ok; }\n\
                     location /api { proxy_pass http://api.default.svc.cluster.local:8080; }",
                ),
                Clean,
            ),
            // Not on the allowlist: refused whatever it is.
            (
                "not nginx",
                snippet(cs, "this is not nginx;"),
                Denied("configuration-snippet: the directive this is not allowed"),
            ),
            // What no tenant's text reaches NGINX with: `nginx -t` would run it with
            // the controller's privileges (CVE-2025-1974, CVE-2021-25742).
            (
                "leaves its block",
                snippet(
                    cs,
                    "}\nload_module /tmp/x.so;\nhttp { server { location / {",
                ),
                Denied("configuration-snippet: a } closes a block the snippet did not open"),
            ),
            (
                "opens a block it does not close",
                snippet("server-snippet", "location /x {"),
                Denied("server-snippet: NGINX would not read it: unexpected end of file"),
            ),
            (
                "an open quote",
                snippet(cs, "add_header X \"}; load_module /x.so;"),
                Denied("configuration-snippet: NGINX would not read it"),
            ),
            (
                "ssl_engine",
                snippet(cs, "ssl_engine /tmp/x.so;"),
                Denied("the directive ssl_engine is not allowed in a location snippet"),
            ),
            (
                "include",
                snippet("server-snippet", "include /var/run/secrets/token;"),
                Denied("server-snippet: the directive include"),
            ),
            (
                "lua",
                snippet(cs, "content_by_lua_block { os.execute('id') }"),
                Denied("the directive content_by_lua_block"),
            ),
            (
                "njs",
                snippet(cs, "js_import /tmp/x.js;"),
                Denied("the directive js_import"),
            ),
            (
                "alias to the service account",
                snippet(
                    cs,
                    "location /t { alias /var/run/secrets/kubernetes.io/serviceaccount/; }",
                ),
                Denied("the directive alias"),
            ),
            (
                "a log over a file",
                snippet(cs, "access_log /var/lib/ferrule/nginx/conf/nginx.conf;"),
                Denied("access_log /var/lib/ferrule/nginx/conf/nginx.conf writes a file"),
            ),
            (
                "auth-snippet",
                snippet("auth-url", "http://auth.default.svc/check").ann("auth-snippet", "root /;"),
                Denied("auth-snippet: the directive root"),
            ),
        ],
    );
}

/// N1 and N2 of the security review: texts that a tokenizer unlike NGINX's, or a
/// denylist, let through. Each is refused naming its key.
#[test]
fn hostile_snippets_are_refused_naming_the_key() {
    let allowed = cluster() + &docs![config_map(&[("allow-snippet-annotations", "true")])];
    let snippet =
        |key: &str, text: &str| web(Ing::new("default/snippet", 20), "new.test").ann(key, text);
    let (cs, ss) = ("configuration-snippet", "server-snippet");
    let lua = "header_filter_by_lua_block { io.open('/var/run/secrets/kubernetes.io/serviceaccount/token'); }";
    let rows: Vec<(&str, Ing, Want)> = vec![
        (
            "${ swallowing ; and a Lua block",
            snippet(cs, &format!("default_type ${{ ;\n{lua}")),
            Denied("configuration-snippet: the directive header_filter_by_lua_block"),
        ),
        (
            "${ closing the location",
            snippet(
                cs,
                "default_type ${ ;\n}\nlocation /evil { return 200 x; }\nlocation /y {",
            ),
            Denied("configuration-snippet: a } closes a block the snippet did not open"),
        ),
        (
            "a vertical tab before #",
            snippet(cs, &format!("add_header A b;a\x0b# ;\n{lua}")),
            Denied("configuration-snippet: the character U+000B"),
        ),
        (
            "a no-break space",
            snippet(cs, "add_header\u{a0}A b;"),
            Denied("configuration-snippet: the character U+00A0"),
        ),
        (
            "a line separator",
            snippet(cs, "add_header A b;\u{2028}listen 81;"),
            Denied("configuration-snippet: the character U+2028"),
        ),
        (
            "} inside a word",
            snippet(cs, &format!("return 200 a}};\n{lua}")),
            Denied("configuration-snippet: the directive header_filter_by_lua_block"),
        ),
        (
            "a quote after a word's first byte",
            snippet(cs, &format!("add_header A b\"c;\n{lua}")),
            Denied("configuration-snippet: the directive header_filter_by_lua_block"),
        ),
        (
            "a backslash before a line break",
            snippet(cs, "add_header A b\\\n;listen 8081;"),
            Denied("configuration-snippet: the directive listen"),
        ),
        (
            "listen in a shared server",
            snippet(ss, "listen 8081;"),
            Denied("server-snippet: the directive listen"),
        ),
        (
            "the backend client key through a conf command",
            snippet(
                cs,
                "proxy_ssl_conf_command PrivateKey conf/certs/backend-client-0.pem;",
            ),
            Denied("configuration-snippet: the directive proxy_ssl_conf_command"),
        ),
        (
            "ssl_conf_command",
            snippet(ss, "ssl_conf_command Certificate /etc/passwd;"),
            Denied("server-snippet: the directive ssl_conf_command"),
        ),
        (
            "grpc_ssl_crl",
            snippet(
                cs,
                "grpc_ssl_crl /var/run/secrets/kubernetes.io/serviceaccount/token;",
            ),
            Denied("configuration-snippet: the directive grpc_ssl_crl"),
        ),
        (
            "a password file",
            snippet(cs, "proxy_ssl_password_file /etc/shadow;"),
            Denied("configuration-snippet: the directive proxy_ssl_password_file"),
        ),
        (
            "a key log",
            snippet(cs, "proxy_ssl_key_log /tmp/keys;"),
            Denied("configuration-snippet: the directive proxy_ssl_key_log"),
        ),
        (
            "the auth cache zone",
            snippet(cs, "proxy_cache ferrule_auth_cache;"),
            Denied("configuration-snippet: the directive proxy_cache"),
        ),
        (
            "a nested location proxying to the status port",
            snippet(
                ss,
                "location /s { proxy_set_header X-Forwarded-For \"\"; \
                 proxy_pass http://127.0.0.1:10254/status/resources; }",
            ),
            Denied("server-snippet: proxy_pass http://127.0.0.1:10254/status/resources"),
        ),
        (
            "link-local metadata",
            snippet(cs, "proxy_pass http://169.254.169.254/latest/;"),
            Denied("configuration-snippet: proxy_pass http://169.254.169.254/latest/"),
        ),
        (
            "the balancer's socket",
            snippet(cs, "grpc_pass unix:/var/lib/ferrule/nginx/balancer.sock;"),
            Denied("configuration-snippet: grpc_pass unix:"),
        ),
        (
            "a variable target",
            snippet(cs, "proxy_pass http://$arg_to;"),
            Denied("a variable in the address"),
        ),
        (
            "choosing another backend",
            snippet(cs, "set $ferrule_backend other-namespace-secret-80;"),
            Denied("configuration-snippet: set $ferrule_backend"),
        ),
        (
            "a file test",
            snippet(
                cs,
                "if (-f /var/run/secrets/kubernetes.io/serviceaccount/token) { return 200; }",
            ),
            Denied("configuration-snippet: if with a file test"),
        ),
        (
            "try_files",
            snippet(cs, "try_files /../conf/nginx.conf =404;"),
            Denied("configuration-snippet: the directive try_files"),
        ),
        (
            "stub_status",
            snippet(ss, "location /s { stub_status; }"),
            Denied("server-snippet: the directive stub_status"),
        ),
    ];
    table(&allowed, &Options::default(), rows);
}

#[test]
fn a_missing_or_invalid_secret_warns_unless_strict() {
    let missing = || {
        web(Ing::new("default/tls", 20), "a.example.com")
            .rule("b.example.com", &[("/", "Prefix", "web", "80")])
            .tls(&["b.example.com"], "missing")
    };
    let wrong_host =
        || web(Ing::new("default/wrong", 20), "c.example.com").tls(&["c.example.com"], "a-tls");
    let lax = Options::default();
    let strict = Options {
        strict_tls: true,
        ..Options::default()
    };
    let missing_text = "spec.tls host b.example.com: Secret default/missing not found";
    let wrong_text = "the certificate does not cover host c.example.com";
    table(
        &cluster(),
        &lax,
        vec![
            ("missing", missing(), Warned(missing_text)),
            ("wrong host", wrong_host(), Warned(wrong_text)),
        ],
    );
    table(
        &cluster(),
        &strict,
        vec![
            ("missing", missing(), Denied(missing_text)),
            ("wrong host", wrong_host(), Denied(wrong_text)),
            (
                "valid",
                Ing::new("default/ok", 20)
                    .rule("a.example.com", &[("/x", "Prefix", "web", "80")])
                    .tls(&["a.example.com"], "a-tls"),
                Clean,
            ),
        ],
    );
    // An expired certificate, with the clock the webhook passes: reported on the
    // owner of the host's TLS (an update of it), not on an Ingress sharing it.
    let later = Options {
        strict_tls: true,
        now: Some(i64::MAX / 2),
        operation: Operation::Update,
    };
    let owner = Ing::new("default/old", 10)
        .rule("a.example.com", &[("/", "Prefix", "web", "80")])
        .tls(&["a.example.com"], "a-tls");
    let sharer = Ing::new("default/ok", 20)
        .rule("a.example.com", &[("/x", "Prefix", "web", "80")])
        .tls(&["a.example.com"], "a-tls");
    table(
        &cluster(),
        &later,
        vec![
            (
                "expired",
                owner,
                Denied("spec.tls host a.example.com: Secret default/a-tls: |expired"),
            ),
            ("expired, not the owner", sharer, Clean),
        ],
    );
}

/// `message` of the full build as the webhook words it for a candidate of namespace
/// `ns`: the Ingresses of other namespaces of `snap`, their TLS Secrets and their
/// backends unnamed.
fn unnamed(message: &str, ns: &str, snap: &ferrule_model::Snapshot) -> String {
    let mut names: Vec<(String, &str)> = Vec::new();
    for ing in &snap.ingresses {
        let (o, name) = (
            ing.metadata.namespace.as_deref().unwrap(),
            ing.metadata.name.as_deref().unwrap(),
        );
        if o == ns {
            continue;
        }
        names.push((
            format!("Ingress {o}/{name}"),
            "an Ingress of another namespace",
        ));
        let spec = ing.spec.as_ref().unwrap();
        for t in spec.tls.iter().flatten() {
            let secret = t.secret_name.as_deref().unwrap_or_default();
            names.push((
                format!("Secret {o}/{secret}"),
                "a Secret of another namespace",
            ));
        }
        let rules = spec.rules.iter().flatten().flat_map(|r| &r.http);
        let backends = rules.flat_map(|h| &h.paths).map(|p| &p.backend);
        for b in backends.chain(&spec.default_backend) {
            let svc = b.service.as_ref().unwrap();
            let port = svc.port.as_ref().unwrap();
            let port = port
                .name
                .clone()
                .unwrap_or_else(|| port.number.unwrap().to_string());
            let backend = format!("{o}_{}_{port}", svc.name);
            names.push((
                format!("backend {backend}"),
                "a backend of another namespace",
            ));
            names.push((backend, "a backend of another namespace"));
        }
    }
    // The longest first: a name that begins another's is replaced after it.
    names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut m = message.to_owned();
    for (name, what) in names {
        m = m.replace(&name, what);
    }
    m.replace(
        "an Ingress of another namespace (another namespace)",
        "an Ingress of another namespace",
    )
}

/// For every Ingress of `manifests`: deciding on it against the cluster without it
/// gives exactly the problems the full build of the whole cluster reports on it
/// (reasons and warnings together), so the webhook and /status/resources agree,
/// but for the names of other namespaces' objects, which the webhook does not give.
fn agrees_with_the_full_build(manifests: &str) {
    let snap = snapshot(manifests);
    let full = build(&snap);
    let (mut checked, mut displacements, mut unnamed_ones) = (0, 0, 0);
    for (i, ing) in snap.ingresses.iter().enumerate() {
        let mut without = snap.clone();
        without.ingresses.remove(i);
        let index = Index::new(Arc::new(without));
        let (ns, name) = (
            ing.metadata.namespace.as_deref().unwrap(),
            ing.metadata.name.as_deref().unwrap(),
        );
        let r = ResourceRef::new("Ingress", ns, name);
        let mut want: Vec<String> = (full.problems_of(&r))
            .map(|p| unnamed(&p.message, ns, &snap))
            .collect();
        let update = Options {
            operation: Operation::Update,
            ..Options::default()
        };
        let mut got: Vec<String> = match index.check((**ing).clone(), &update) {
            Decision::NotOurs => continue,
            Decision::Allowed { warnings } => warnings,
            Decision::Denied { reasons, warnings } => reasons.into_iter().chain(warnings).collect(),
        };
        unnamed_ones += got
            .iter()
            .filter(|m| m.contains("of another namespace"))
            .count();
        // What it takes from younger Ingresses is theirs in the full build.
        let displaced = ferrule_model::admission::DISPLACED;
        for m in got.iter().filter(|m| m.contains(displaced)) {
            let (loser, problem) = m.split_once(&format!(" {displaced} ")).unwrap();
            let losers: Vec<ResourceRef> = match loser {
                "an Ingress of another namespace" => (snap.ingresses.iter())
                    .map(|i| {
                        let m = &i.metadata;
                        let (ns, name) = (m.namespace.as_deref(), m.name.as_deref());
                        ResourceRef::new("Ingress", ns.unwrap(), name.unwrap())
                    })
                    .filter(|o| o.namespace != ns)
                    .collect(),
                named => {
                    let (lns, lname) = named
                        .strip_prefix("Ingress ")
                        .unwrap()
                        .split_once('/')
                        .unwrap();
                    vec![ResourceRef::new("Ingress", lns, lname)]
                }
            };
            assert!(
                (losers.iter().flat_map(|l| full.problems_of(l)))
                    .any(|p| unnamed(&p.message, ns, &snap) == problem),
                "{r} displaces {loser}: {problem}"
            );
            displacements += 1;
        }
        got.retain(|m| !m.contains(displaced));
        want.sort();
        got.sort();
        assert_eq!(got, want, "{r}");
        checked += 1;
    }
    assert!(checked > 5, "only {checked} Ingresses checked");
    assert!(displacements > 0, "no Ingress displaced another");
    assert!(unnamed_ones > 0, "no Ingress of another namespace met");
}

#[test]
fn every_decision_agrees_with_the_full_build() {
    let more = docs![
        web(Ing::new("default/younger", 20), "shop.test"),
        Ing::new("default/tls-thief", 21)
            .rule("a.example.com", &[("/shop", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "mine"),
        Ing::new("default/catch2", 22).default_backend("api", "80"),
        Ing::new("default/lb", 23)
            .ann("load-balance", "round_robin")
            .rule("lb.test", &[("/", "Prefix", "api", "80")]),
        Ing::new("default/early", 24).rule("early.test", &[("/", "Prefix", "later", "80")]),
        Ing::new("default/canary", 25)
            .ann("canary", "true")
            .ann("canary-weight", "10")
            .rule("shop.test", &[("/", "Prefix", "api", "80")]),
        Ing::new("other/canary", 26)
            .ann("canary", "true")
            .ann("canary-weight", "10")
            .rule("shop.test", &[("/", "Prefix", "api", "80")]),
        app("other/api", "10.0.0.3"),
        web(Ing::new("other/younger", 32), "shop.test"),
        Ing::new("other/tls-thief", 33)
            .rule("a.example.com", &[("/other", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "mine"),
        Ing::new("other/catch", 34).default_backend("api", "80"),
        web(Ing::new("other/older", 5), "older.test"),
        web(Ing::new("default/later", 35), "older.test"),
        web(Ing::new("default/bad", 27), "bad.test").ann("proxy-read-timeout", "soon"),
        web(Ing::new("default/snippet", 28), "new.test").ann("server-snippet", "x"),
        Ing::new("default/mixed", 29).rule(
            "shop.test",
            &[
                ("/ok", "Prefix", "web", "80"),
                ("/a;b", "Prefix", "web", "80")
            ]
        ),
        web(Ing::new("default/traced", 30), "traced.test").ann("enable-opentelemetry", "true"),
        web(Ing::new("default/theirs", 31), "shop.test").class(Some("other")),
    ];
    agrees_with_the_full_build(&(cluster() + &more));
}

#[test]
fn severity_of_denied_problems_is_that_of_the_model() {
    // The snippet problem is a Warning for the model (the Ingress is served without
    // the snippet) and still refused by the webhook: denial follows the kind.
    let m = build(&snapshot(
        &(cluster() + &docs![web(Ing::new("default/s", 20), "s.test").ann("server-snippet", "x")]),
    ));
    let p = m
        .problems
        .iter()
        .find(|p| p.resource.name == "s")
        .expect("a problem on the snippet Ingress");
    assert_eq!(p.severity, Severity::Warning);
    assert_eq!(p.kind, ferrule_model::ProblemKind::Invalid);
    let _: Value = serde_json::to_value(p).unwrap();
}

#[test]
fn an_updated_index_follows_the_snapshot() {
    let first = Arc::new(snapshot(&cluster()));
    let index = Index::new(first.clone());
    let idle = || Ing::new("default/idle", 20).rule("idle.test", &[("/", "Prefix", "idle", "80")]);
    let rival = || web(Ing::new("default/rival", 20), "rival.test");
    let opts = Options::default();
    assert!(
        matches!(index.check(candidate(rival()), &opts), Decision::Allowed { warnings } if warnings.is_empty())
    );

    // The same objects but an EndpointSlice: the Ingress part is reused, the
    // EndpointSlices are seen.
    let mut next = (*first).clone();
    next.endpoint_slices.extend(
        snapshot(&docs![slice(
            "default/idle-abc",
            "idle",
            &[("http", 8080)],
            &[("10.0.0.9", Some(true))]
        )])
        .endpoint_slices,
    );
    let updated = index.update(Arc::new(next.clone()));
    match updated.check(candidate(idle()), &opts) {
        Decision::Allowed { warnings } => assert!(warnings.is_empty(), "{warnings:?}"),
        other => panic!("{other:?}"),
    }
    match index.check(candidate(idle()), &opts) {
        Decision::Allowed { warnings } => assert!(matches(&warnings, "no ready endpoints")),
        other => panic!("{other:?}"),
    }

    // A new Ingress: it owns its host from then on.
    next.ingresses
        .extend(snapshot(&docs![web(Ing::new("default/first", 15), "rival.test")]).ingresses);
    let updated = updated.update(Arc::new(next));
    match updated.check(candidate(rival()), &opts) {
        Decision::Allowed { warnings } => {
            assert!(
                matches(&warnings, "already served by Ingress default/first"),
                "{warnings:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// What another namespace (`vault`) holds, for the candidates of `evil`: an Ingress
/// owning pay.example (path, certificate) and one the catch-all, their Service and
/// the Secret of the certificate, each of which a variant leaves out or changes.
#[derive(Clone, Copy, Debug)]
struct Vault {
    ingresses: bool,
    secret: Option<&'static str>,
    service: Option<bool>,
}

impl Vault {
    const ALL: Vault = Vault {
        ingresses: true,
        secret: Some("a.key"),
        service: Some(true),
    };

    fn manifests(self) -> String {
        let mut parts = vec![docs![our_class(), app("evil/web", "10.0.1.1")]];
        if self.ingresses {
            parts.push(docs![
                Ing::new("vault/ledger", 10)
                    .rule("pay.example", &[("/", "Prefix", "ledger-svc", "80")])
                    .tls(&["pay.example"], "ledger-tls"),
                Ing::new("vault/ledger-catch", 10).default_backend("ledger-svc", "80"),
            ]);
        }
        if let Some(key) = self.secret {
            parts.push(docs![tls_secret("vault/ledger-tls", "a.crt", key)]);
        }
        match self.service {
            Some(true) => parts.push(docs![app("vault/ledger-svc", "10.0.0.7")]),
            Some(false) => parts.push(docs![service("vault/ledger-svc", &[("http", 80, "web")])]),
            None => {}
        }
        parts.concat()
    }

    /// Every variant with the Ingresses, and without them.
    fn variants() -> Vec<Vault> {
        let all = Vault::ALL;
        vec![
            all,
            Vault {
                secret: None,
                ..all
            },
            Vault {
                secret: Some("ec.key"),
                ..all
            },
            Vault {
                service: Some(false),
                ..all
            },
            Vault {
                service: None,
                ..all
            },
            Vault {
                secret: None,
                service: None,
                ..all
            },
            Vault {
                ingresses: false,
                ..all
            },
            Vault {
                ingresses: false,
                secret: None,
                service: None,
            },
        ]
    }
}

/// Every message of a decision, reasons first.
fn messages(d: &Decision) -> Vec<String> {
    match d {
        Decision::NotOurs => Vec::new(),
        Decision::Allowed { warnings } => warnings.clone(),
        Decision::Denied { reasons, warnings } => reasons.iter().chain(warnings).cloned().collect(),
    }
}

/// Anyone may ask the webhook about an Ingress of any namespace. Its answer names
/// only the candidate's namespace's objects, and is the same, byte for byte, whether
/// another namespace's Secrets and Services exist, are valid or ready, and, where
/// the outcome does not depend on them, whether its Ingresses exist: a host of
/// another namespace is "served by an Ingress of another namespace", nothing more.
#[test]
fn other_namespaces_are_never_named_nor_probed() {
    let evil = |name: &str| Ing::new(&format!("evil/{name}"), 50);
    let on = |ing: Ing, host: &str| ing.rule(host, &[("/", "Prefix", "web", "80")]);
    let update = Options {
        operation: Operation::Update,
        ..Options::default()
    };
    let create = Options::default();
    // (candidate, options, whether its answer may depend on vault's Ingresses)
    let candidates = vec![
        (
            "host + path",
            on(evil("path"), "pay.example"),
            &create,
            true,
        ),
        (
            "certificate",
            evil("cert")
                .rule("pay.example", &[("/mine", "Prefix", "web", "80")])
                .tls(&["pay.example"], "mine"),
            &create,
            true,
        ),
        (
            "canary of vault's path",
            on(evil("canary"), "pay.example")
                .ann("canary", "true")
                .ann("canary-weight", "10"),
            &create,
            true,
        ),
        (
            "catch-all",
            evil("catch").default_backend("web", "80"),
            &create,
            true,
        ),
        (
            "an update older than vault's",
            backdated(on(evil("older"), "pay.example")),
            &update,
            true,
        ),
        (
            "vault's Secret named",
            on(evil("auth"), "mine.example").ann("auth-tls-secret", "vault/ledger-tls"),
            &create,
            false,
        ),
        (
            "a Secret of its own of the same name",
            on(evil("tls"), "mine.example").tls(&["mine.example"], "ledger-tls"),
            &create,
            false,
        ),
        (
            "a Service of its own of the same name",
            evil("svc").rule("mine.example", &[("/", "Prefix", "ledger-svc", "80")]),
            &create,
            false,
        ),
    ];
    let indexes: Vec<(Vault, Index)> = Vault::variants()
        .into_iter()
        .map(|v| (v, index(&v.manifests())))
        .collect();
    for (name, ing, opts, depends_on_ingresses) in candidates {
        let answers: Vec<(Vault, Decision)> = indexes
            .iter()
            .map(|(v, i)| (*v, i.check(candidate(ing.clone()), opts)))
            .collect();
        // The names of vault's objects, unless the candidate wrote them itself.
        let written = ing.0.to_string();
        for (v, d) in &answers {
            for m in messages(d) {
                for word in ["vault", "ledger"] {
                    assert!(
                        written.contains(word) || !m.contains(word),
                        "{name} against {v:?} names {word}: {m}"
                    );
                }
            }
        }
        let (reference, _) = &answers[0];
        for (v, d) in &answers[1..] {
            if v.ingresses || !depends_on_ingresses {
                assert_eq!(d, &answers[0].1, "{name}: {v:?} against {reference:?}");
            }
        }
        // Where vault's Ingresses matter and the candidate is told, the answer says
        // that another namespace has what it asks for (a canary is attached to
        // vault's path without a word).
        let all = messages(&answers[0].1);
        if depends_on_ingresses && !all.is_empty() {
            assert!(
                all.iter()
                    .any(|m| m.contains("an Ingress of another namespace")),
                "{name}: {all:?}"
            );
        }
    }
}

/// The answers above, word for word.
#[test]
fn another_namespace_is_worded_so() {
    let evil = |name: &str| Ing::new(&format!("evil/{name}"), 50);
    table(
        &Vault::ALL.manifests(),
        &Options::default(),
        vec![
            (
                "host + path",
                evil("path").rule("pay.example", &[("/", "Prefix", "web", "80")]),
                Warned(
                    "host pay.example path / (Prefix) is already served by an Ingress of another \
                     namespace (oldest wins); path skipped",
                ),
            ),
            (
                "certificate",
                evil("cert")
                    .rule("pay.example", &[("/mine", "Prefix", "web", "80")])
                    .tls(&["pay.example"], "mine"),
                Warned(
                    "spec.tls: the certificate of host pay.example is already provided by an \
                     Ingress of another namespace with a Secret of another namespace (oldest wins)",
                ),
            ),
            (
                "catch-all",
                evil("catch").default_backend("web", "80"),
                Warned(
                    "spec.defaultBackend ignored: an Ingress of another namespace is older and \
                     already provides the catch-all backend",
                ),
            ),
            (
                "canary of vault's path: attached",
                evil("canary")
                    .rule("pay.example", &[("/", "Prefix", "web", "80")])
                    .ann("canary", "true")
                    .ann("canary-weight", "10"),
                Clean,
            ),
        ],
    );
    let update = Options {
        operation: Operation::Update,
        ..Options::default()
    };
    table(
        &Vault::ALL.manifests(),
        &update,
        vec![(
            "an update older than vault's",
            backdated(evil("older").rule("pay.example", &[("/", "Prefix", "web", "80")])),
            Warned(
                "an Ingress of another namespace loses to this Ingress: host pay.example path / \
                 (Prefix) is already served by Ingress evil/older (oldest wins); path skipped",
            ),
        )],
    );
}

/// A namespace Kubernetes would not accept is refused: the API server sends none,
/// and the names Ferrule gives other namespaces' Ingresses are such names.
#[test]
fn a_namespace_kubernetes_refuses_is_denied() {
    let rows = ["~other0", "Default", "", "-x", &"a".repeat(64)]
        .into_iter()
        .map(|ns| {
            let mut ing =
                Ing::new("default/odd", 20).rule("odd.test", &[("/", "Prefix", "web", "80")]);
            ing.0["metadata"]["namespace"] = json!(ns);
            ("odd namespace", ing, Denied("metadata.namespace"))
        })
        .collect();
    table(&cluster(), &Options::default(), rows);
}
