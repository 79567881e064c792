use std::collections::BTreeMap;

use super::*;

/// Parses `pairs` (keys without the prefix) strictly, so that every parser's
/// judgement shows as an error, and renders the outcome as a short string.
fn check(pairs: &[(&str, &str)], expected: &str) {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
        .collect();
    let got = match parse_with(&map, PREFIX, true) {
        Ok(a) => format!("{:?} ignored: {:?}", a.values, a.ignored),
        Err(e) => format!("error: {e}"),
    };
    assert!(
        got.contains(expected),
        "for {pairs:?}\n  got: {got}\n  expected to contain: {expected}"
    );
}

#[test]
fn booleans() {
    check(&[("ssl-redirect", "false")], "ssl_redirect: Some(false)");
    check(
        &[("force-ssl-redirect", "TRUE")],
        "force_ssl_redirect: Some(true)",
    );
    check(
        &[("ssl-redirect", "yes")],
        "error: annotation nginx.ingress.kubernetes.io/ssl-redirect: invalid value \"yes\"",
    );
    check(&[("use-regex", "true")], "use_regex: true");
    // Go's strconv.ParseBool spellings, which ingress-nginx takes
    check(&[("ssl-redirect", "0")], "ssl_redirect: Some(false)");
    check(&[("ssl-redirect", "T")], "ssl_redirect: Some(true)");
}

#[test]
fn proxy() {
    check(
        &[("backend-protocol", "grpcs")],
        "backend_protocol: Some(Grpcs)",
    );
    check(&[("backend-protocol", "FCGI")], "not supported");
    check(
        &[("backend-protocol", "auto_http")],
        "backend_protocol: Some(AutoHttp)",
    );
    check(
        &[("proxy-body-size", "8m")],
        "proxy_body_size: Some(\"8m\")",
    );
    check(
        &[("proxy-body-size", "8m;evil")],
        "error: annotation nginx.ingress.kubernetes.io/proxy-body-size",
    );
    check(
        &[("proxy-read-timeout", "120")],
        "proxy_read_timeout: Some(120)",
    );
    check(
        &[("proxy-send-timeout", "30s")],
        "proxy_send_timeout: Some(30)",
    );
    check(
        &[("proxy-connect-timeout", "-1")],
        "error: annotation nginx.ingress.kubernetes.io/proxy-connect-timeout: invalid value \"-1\"",
    );
}

#[test]
fn rewrite_target_rejects_config_injection() {
    check(
        &[("rewrite-target", "/$2")],
        "rewrite_target: Some(\"/$2\")",
    );
    check(
        &[("rewrite-target", "/x; return 200 pwned")],
        "error: annotation nginx.ingress.kubernetes.io/rewrite-target",
    );
    check(&[("rewrite-target", "/}\nserver {")], "error");
    check(&[("rewrite-target", "/\"x")], "error");
}

#[test]
fn balancing() {
    check(&[("load-balance", "ewma")], "load_balance: Some(Ewma)");
    check(
        &[("load-balance", "least_conn")],
        "error: annotation nginx.ingress.kubernetes.io/load-balance",
    );
    check(
        &[("upstream-hash-by", "$request_uri")],
        "upstream_hash_by: Some(\"$request_uri\")",
    );
    check(
        &[("upstream-hash-by", "$arg_user$http_x_a")],
        "upstream_hash_by: Some",
    );
    check(&[("upstream-hash-by", "${lua}")], "error");
    // upstream-hash-by-subset: size 3 unless given; nothing without the hash
    check(
        &[
            ("upstream-hash-by", "$arg_u"),
            ("upstream-hash-by-subset", "true"),
        ],
        "upstream_hash_by_subset: Some(3)",
    );
    check(
        &[
            ("upstream-hash-by", "$arg_u"),
            ("upstream-hash-by-subset", "true"),
            ("upstream-hash-by-subset-size", "5"),
        ],
        "upstream_hash_by_subset: Some(5)",
    );
    check(
        &[
            ("upstream-hash-by", "$arg_u"),
            ("upstream-hash-by-subset", "false"),
            ("upstream-hash-by-subset-size", "5"),
        ],
        "upstream_hash_by_subset: None",
    );
    check(
        &[
            ("upstream-hash-by", "$arg_u"),
            ("upstream-hash-by-subset-size", "5"),
        ],
        "ignored: [\"annotation nginx.ingress.kubernetes.io/upstream-hash-by-subset-size is \
         ignored: nginx.ingress.kubernetes.io/upstream-hash-by-subset is not \\\"true\\\"\"]",
    );
    check(
        &[("upstream-hash-by-subset", "true")],
        "upstream_hash_by_subset: None",
    );
    check(
        &[("upstream-hash-by-subset", "true")],
        "ignored: [\"annotation nginx.ingress.kubernetes.io/upstream-hash-by-subset is ignored: \
         there is no nginx.ingress.kubernetes.io/upstream-hash-by to take a subset with\"]",
    );
    check(
        &[
            ("upstream-hash-by", "$arg_u"),
            ("upstream-hash-by-subset", "true"),
        ],
        "ignored: []",
    );
    for (key, bad) in [
        ("upstream-hash-by-subset", "yes"),
        ("upstream-hash-by-subset-size", "0"),
        ("upstream-hash-by-subset-size", "-1"),
        ("upstream-hash-by-subset-size", "three"),
        ("upstream-hash-by-subset-size", "2147483648"),
    ] {
        check(
            &[("upstream-hash-by", "$arg_u"), (key, bad)],
            &format!(
                "error: annotation nginx.ingress.kubernetes.io/{key}: invalid value \"{bad}\""
            ),
        );
    }
    check(&[("upstream-hash-by", "$x; drop")], "error");
    check(&[("affinity", "cookie")], "cookie_name: \"INGRESSCOOKIE\"");
    check(
        &[
            ("affinity", "cookie"),
            ("session-cookie-name", "route"),
            ("session-cookie-max-age", "3600"),
            ("session-cookie-path", "/app"),
        ],
        "Affinity { mode: Balanced, cookie_name: \"route\", max_age: Some(3600), path: Some(\"/app\"), \
         secure: None, samesite: None, conditional_samesite_none: false, expires: None, \
         domain: None, change_on_failure: false }",
    );
    check(
        &[
            ("affinity", "cookie"),
            ("session-cookie-secure", "true"),
            ("session-cookie-samesite", "strict"),
            ("session-cookie-conditional-samesite-none", "true"),
            ("session-cookie-expires", "172800"),
            ("session-cookie-domain", ".Example.com"),
            ("session-cookie-change-on-failure", "true"),
        ],
        "secure: Some(true), samesite: Some(Strict), conditional_samesite_none: true, \
         expires: Some(172800), \
         domain: Some(\".example.com\"), change_on_failure: true",
    );
    for (key, bad) in [
        ("session-cookie-secure", "yes"),
        ("session-cookie-change-on-failure", "yes"),
        ("session-cookie-samesite", "Relaxed"),
        ("session-cookie-conditional-samesite-none", "yes"),
        ("session-cookie-expires", "-1"),
        ("session-cookie-domain", "a.com; HttpOnly"),
        ("session-cookie-domain", "a..com"),
    ] {
        check(
            &[("affinity", "cookie"), (key, bad)],
            &format!("error: annotation nginx.ingress.kubernetes.io/{key}: invalid value"),
        );
    }
    check(
        &[("affinity", "cookie"), ("session-cookie-name", "a b")],
        "error: annotation nginx.ingress.kubernetes.io/session-cookie-name",
    );
    check(&[("affinity", "ip")], "error");
    check(&[("session-cookie-name", "x")], "affinity: None");
    // affinity-mode: balanced unless persistent, as in ingress-nginx; exact values
    check(
        &[("affinity", "cookie"), ("affinity-mode", "persistent")],
        "Affinity { mode: Persistent,",
    );
    check(
        &[("affinity", "cookie"), ("affinity-mode", "balanced")],
        "Affinity { mode: Balanced,",
    );
    for bad in ["Persistent", "sticky", ""] {
        check(
            &[("affinity", "cookie"), ("affinity-mode", bad)],
            &format!(
                "error: annotation nginx.ingress.kubernetes.io/affinity-mode: invalid value \"{bad}\""
            ),
        );
    }
    // a bad value is refused even without affinity (fail closed, as other keys)
    check(&[("affinity-mode", "sticky")], "error");
}

#[test]
fn canary() {
    check(&[("canary-weight", "20")], "canary: None");
    check(
        &[("canary", "true"), ("canary-weight", "20")],
        "weight: 20, weight_total: 100",
    );
    check(
        &[("canary", "true"), ("canary-weight", "101")],
        "error: annotation nginx.ingress.kubernetes.io/canary-weight: invalid value \"101\"",
    );
    check(
        &[
            ("canary", "true"),
            ("canary-weight", "300"),
            ("canary-weight-total", "1000"),
        ],
        "weight: 300, weight_total: 1000",
    );
    check(
        &[
            ("canary", "true"),
            ("canary-by-header", "X-Canary"),
            ("canary-by-header-value", "yes"),
        ],
        "header: Some(\"X-Canary\"), header_value: Some(\"yes\")",
    );
    check(
        &[("canary", "true"), ("canary-by-cookie", "cc")],
        "cookie: Some(\"cc\"), affinity_behavior: Sticky",
    );
    check(
        &[
            ("canary", "true"),
            ("canary-by-header", "X-Canary"),
            ("canary-by-header-pattern", "^(beta|alpha)-\\d+$"),
        ],
        "header_pattern: Some(\"^(beta|alpha)-\\\\d+$\")",
    );
    check(
        &[
            ("canary", "true"),
            ("canary-by-header-pattern", "^v[0-9]+(-rc[0-9]?)?$"),
        ],
        "header_pattern: Some(",
    );
    // unparsable; PCRE's look-around; shapes that backtrack exponentially
    for bad in [
        "^(beta",
        "a{2,1}",
        "x\ny",
        "^(?!old)",
        "^(a+)+$",
        "^(a|aa)*$",
        "(x(ab|cd){2})+",
        "^([a-z]+-)+$",
        "^(a?a?)+$",
        "^(a?){25}a{25}$",
        "^(\\w\\d?)+$",
        "(?:a(?R)|a(?R)|b)",
        "(?u)x",
        "[a-z&&b]",
        "\\b{start}x",
        "\\<x",
    ] {
        check(
            &[("canary", "true"), ("canary-by-header-pattern", bad)],
            "error: annotation nginx.ingress.kubernetes.io/canary-by-header-pattern: invalid value",
        );
    }
    check(
        &[("canary", "true"), ("affinity-canary-behavior", "legacy")],
        "affinity_behavior: Legacy",
    );
    check(
        &[("canary", "true"), ("affinity-canary-behavior", "Sticky")],
        "error: annotation nginx.ingress.kubernetes.io/affinity-canary-behavior: invalid value \"Sticky\"",
    );
}

#[test]
fn snippets_are_kept_opaque() {
    check(
        &[("configuration-snippet", "more_set_headers \"A: b\";")],
        "configuration_snippet: Some(Snippet(",
    );
    check(
        &[("server-snippet", "location /x { return 200; }")],
        "server_snippet: Some(Snippet(",
    );
}

#[test]
fn unknown_annotations_are_warnings_and_unknown_security_ones_reject() {
    check(
        &[("not-a-thing", "whatever")],
        "ignored: [\"annotation nginx.ingress.kubernetes.io/not-a-thing is not one ingress-nginx or Ferrule knows (misspelt?) and is ignored\"]",
    );
    check(
        &[("enable-opentelemetry", "true"), ("ssl-redirect", "false")],
        "ssl_redirect: Some(false)",
    );
    check(
        &[("enable-opentelemetry", "true")],
        "ignored: [\"annotation nginx.ingress.kubernetes.io/enable-opentelemetry (tracing) is not implemented by Ferrule and is ignored\"]",
    );
    for key in ["global-rate-limit", "enable-modsecurity", "auth-brand-new"] {
        check(
            &[(key, "x"), ("ssl-redirect", "false")],
            &format!("error: annotation nginx.ingress.kubernetes.io/{key} "),
        );
    }
}

#[test]
fn another_prefix_is_read_and_the_default_one_is_then_not_ours() {
    let map: BTreeMap<String, String> = [
        ("custom.io/ssl-redirect", "false"),
        ("custom.io/enable-opentelemetry", "true"),
        ("nginx.ingress.kubernetes.io/auth-url", "http://auth"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let got = parse(&map, "custom.io/").unwrap();
    assert_eq!(got.values.ssl_redirect, Some(false));
    assert_eq!(got.ignored.len(), 1);
    assert!(
        got.ignored[0].contains("custom.io/enable-opentelemetry"),
        "{got:?}"
    );
    let err = parse_with(
        &[("custom.io/proxy-body-size".to_owned(), "x".to_owned())].into(),
        "custom.io/",
        true,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("annotation custom.io/proxy-body-size: invalid value"),
        "{err}"
    );
}

/// Every value the balancer API (lua/ferrule/validate.lua, lua/ferrule/expr.lua) would
/// refuse is refused here, naming the annotation: a backend the API refuses is never
/// posted, and its Ingress would answer 503 or keep stale endpoints. Each limit is
/// checked at the boundary: accepted at it, refused just past it.
#[test]
fn balancer_api_limits() {
    const AFF: (&str, &str) = ("affinity", "cookie");
    const CAN: (&str, &str) = ("canary", "true");
    let long_token = "t".repeat(256);
    let too_long_token = "t".repeat(257);
    // (annotations, Some(part of the parsed annotations) when accepted, None when
    // refused: the error names the last annotation and its value)
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: &[Case<'_>] = &[
        // session-cookie-max-age: validate.lua takes 0..=2^31-1; the model 1..=2^31-1
        (
            &[AFF, ("session-cookie-max-age", "1")],
            Some("max_age: Some(1)"),
        ),
        (&[AFF, ("session-cookie-max-age", "0")], None),
        (
            &[AFF, ("session-cookie-max-age", "2147483647")],
            Some("max_age: Some(2147483647)"),
        ),
        (&[AFF, ("session-cookie-max-age", "2147483648")], None),
        (&[AFF, ("session-cookie-max-age", "4294967295")], None),
        (&[AFF, ("session-cookie-max-age", "4294967296")], None),
        (&[AFF, ("session-cookie-max-age", "-1")], None),
        // upstream-hash-by: every `$` starts a name of [A-Za-z0-9_] (expr.parse)
        (
            &[("upstream-hash-by", "$a")],
            Some("upstream_hash_by: Some(\"$a\")"),
        ),
        (
            &[("upstream-hash-by", "$_")],
            Some("upstream_hash_by: Some(\"$_\")"),
        ),
        (
            &[("upstream-hash-by", "$9")],
            Some("upstream_hash_by: Some(\"$9\")"),
        ),
        (
            &[("upstream-hash-by", "$a-x:$b_c/$d.e")],
            Some("upstream_hash_by: Some(\"$a-x:$b_c/$d.e\")"),
        ),
        (
            &[("upstream-hash-by", "-.:/$a")],
            Some("upstream_hash_by: Some(\"-.:/$a\")"),
        ),
        (&[("upstream-hash-by", "$-x")], None),
        (&[("upstream-hash-by", "$.x")], None),
        (&[("upstream-hash-by", "$:x")], None),
        (&[("upstream-hash-by", "$/x")], None),
        (&[("upstream-hash-by", "a$-b")], None),
        (&[("upstream-hash-by", "$a$-b")], None),
        (&[("upstream-hash-by", "$$a")], None),
        (&[("upstream-hash-by", "$a$")], None),
        (&[("upstream-hash-by", "$")], None),
        (&[("upstream-hash-by", "${host}")], None),
        (&[("upstream-hash-by", "$a b")], None),
        (&[("upstream-hash-by", "$a\u{1}")], None),
        (&[("upstream-hash-by", "$ä")], None),
        (&[("upstream-hash-by", "const")], None),
        // load-balance and affinity: exact enum values, as the API compares them
        (&[("load-balance", "round_robin")], Some("Some(RoundRobin)")),
        (&[("load-balance", "ewma")], Some("Some(Ewma)")),
        (&[("load-balance", "EWMA")], None),
        (&[("load-balance", "round-robin")], None),
        (&[("affinity", "cookie")], Some("affinity: Some(")),
        (&[("affinity", "Cookie")], None),
        // session-cookie-name: an RFC 6265 cookie name (the API refuses separators)
        (
            &[AFF, ("session-cookie-name", "a!#$%&'*+-.^_`|~Z9")],
            Some("cookie_name: \"a!#$%&'*+-.^_`|~Z9\""),
        ),
        (&[AFF, ("session-cookie-name", "a=b")], None),
        (&[AFF, ("session-cookie-name", "a;b")], None),
        (&[AFF, ("session-cookie-name", "a,b")], None),
        (&[AFF, ("session-cookie-name", "a:b")], None),
        (&[AFF, ("session-cookie-name", "a/b")], None),
        (&[AFF, ("session-cookie-name", "a\"b")], None),
        (&[AFF, ("session-cookie-name", "a(b)")], None),
        (&[AFF, ("session-cookie-name", "a[b]")], None),
        (&[AFF, ("session-cookie-name", "a{b}")], None),
        (&[AFF, ("session-cookie-name", "a?b")], None),
        (&[AFF, ("session-cookie-name", "a@b")], None),
        (&[AFF, ("session-cookie-name", "a<b>")], None),
        (&[AFF, ("session-cookie-name", "a\\b")], None),
        (&[AFF, ("session-cookie-name", "a b")], None),
        (&[AFF, ("session-cookie-name", "a\u{7f}b")], None),
        (&[AFF, ("session-cookie-name", "é")], None),
        (
            &[AFF, ("session-cookie-name", &long_token)],
            Some("cookie_name: \"tttt"),
        ),
        (&[AFF, ("session-cookie-name", &too_long_token)], None),
        // session-cookie-path: no `;` and no control characters (path_ok)
        (
            &[AFF, ("session-cookie-path", "/")],
            Some("path: Some(\"/\")"),
        ),
        (
            &[AFF, ("session-cookie-path", "/a-b/c.d_e~f")],
            Some("path: Some(\"/a-b/c.d_e~f\")"),
        ),
        (&[AFF, ("session-cookie-path", "/a;b")], None),
        (&[AFF, ("session-cookie-path", "/a\u{1}b")], None),
        (&[AFF, ("session-cookie-path", "/a\u{7f}b")], None),
        (&[AFF, ("session-cookie-path", "/a b")], None),
        (&[AFF, ("session-cookie-path", "a")], None),
        // canary-weight-total: the API takes 1..=2^31-1; the model 1..=1_000_000
        (
            &[CAN, ("canary-weight-total", "1")],
            Some("weight_total: 1"),
        ),
        (&[CAN, ("canary-weight-total", "0")], None),
        (
            &[CAN, ("canary-weight-total", "1000000")],
            Some("weight_total: 1000000"),
        ),
        (&[CAN, ("canary-weight-total", "1000001")], None),
        (&[CAN, ("canary-weight-total", "2147483648")], None),
        // canary-weight: 0..=weight_total
        (
            &[CAN, ("canary-weight", "0")],
            Some("weight: 0, weight_total: 100"),
        ),
        (
            &[CAN, ("canary-weight", "100")],
            Some("weight: 100, weight_total: 100"),
        ),
        (&[CAN, ("canary-weight", "101")], None),
        (&[CAN, ("canary-weight", "-1")], None),
        (
            &[CAN, ("canary-weight-total", "7"), ("canary-weight", "7")],
            Some("weight: 7, weight_total: 7"),
        ),
        (
            &[CAN, ("canary-weight-total", "7"), ("canary-weight", "8")],
            None,
        ),
        (
            &[
                CAN,
                ("canary-weight-total", "1000000"),
                ("canary-weight", "1000000"),
            ],
            Some("weight: 1000000, weight_total: 1000000"),
        ),
        (
            &[
                CAN,
                ("canary-weight-total", "1000000"),
                ("canary-weight", "1000001"),
            ],
            None,
        ),
        // canary-by-header: an HTTP field name (header_name_ok)
        (
            &[CAN, ("canary-by-header", "X-a!#$%&'*+-.^_`|~9")],
            Some("header: Some(\"X-a!#$%&'*+-.^_`|~9\")"),
        ),
        (&[CAN, ("canary-by-header", "X Canary")], None),
        (&[CAN, ("canary-by-header", "X:Canary")], None),
        (&[CAN, ("canary-by-header", "X(Canary)")], None),
        (&[CAN, ("canary-by-header", "X\u{1}")], None),
        (
            &[CAN, ("canary-by-header", &long_token)],
            Some("header: Some(\"tttt"),
        ),
        (&[CAN, ("canary-by-header", &too_long_token)], None),
        // canary-by-header-value: non-empty, no control characters (clean_string)
        (
            &[CAN, ("canary-by-header-value", "a-b.c/d")],
            Some("header_value: Some(\"a-b.c/d\")"),
        ),
        (&[CAN, ("canary-by-header-value", "a\u{1}b")], None),
        (&[CAN, ("canary-by-header-value", "a\u{7f}b")], None),
        // canary-by-cookie: an RFC 6265 cookie name (cookie_name_ok)
        (
            &[CAN, ("canary-by-cookie", "cc")],
            Some("cookie: Some(\"cc\")"),
        ),
        (&[CAN, ("canary-by-cookie", "c=c")], None),
        (&[CAN, ("canary-by-cookie", "c;c")], None),
        (&[CAN, ("canary-by-cookie", "c c")], None),
        (&[CAN, ("canary-by-cookie", "c\u{1}")], None),
    ];
    for (pairs, expected) in cases {
        let (key, value) = pairs.last().expect("a case has annotations");
        let expected = match expected {
            Some(part) => (*part).to_owned(),
            None => format!("error: annotation {PREFIX}{key}: invalid value {value:?}"),
        };
        check(pairs, &expected);
    }
}

#[test]
fn auth_keepalive() {
    let url = ("auth-url", "http://auth.example/check");
    check(
        &[url, ("auth-keepalive", "8")],
        "keepalive: Some(AuthKeepalive { connections: 8, requests: 1000, timeout: 60 })",
    );
    check(
        &[
            url,
            ("auth-keepalive", "2"),
            ("auth-keepalive-requests", "10"),
            ("auth-keepalive-timeout", "5"),
            ("auth-keepalive-share-vars", "true"),
        ],
        "keepalive: Some(AuthKeepalive { connections: 2, requests: 10, timeout: 5 })",
    );
    // 0 (ingress-nginx's default) keeps none; so does a tuning key alone.
    check(&[url, ("auth-keepalive", "0")], "keepalive: None");
    check(&[url, ("auth-keepalive-requests", "10")], "keepalive: None");
    check(
        &[url, ("auth-keepalive", "-1")],
        "error: annotation nginx.ingress.kubernetes.io/auth-keepalive: invalid value",
    );
    check(
        &[
            url,
            ("auth-keepalive", "2"),
            ("auth-keepalive-timeout", "0"),
        ],
        "error: annotation nginx.ingress.kubernetes.io/auth-keepalive-timeout",
    );
}

#[test]
fn server_ciphers() {
    check(
        &[
            ("ssl-ciphers", "ECDHE-RSA-AES256-GCM-SHA384:!aNULL"),
            ("ssl-prefer-server-ciphers", "true"),
        ],
        "server_ciphers: ServerCiphers { ciphers: Some(\"ECDHE-RSA-AES256-GCM-SHA384:!aNULL\"), prefer_server_ciphers: Some(true) }",
    );
    check(
        &[("ssl-ciphers", "HIGH; return 200")],
        "error: annotation nginx.ingress.kubernetes.io/ssl-ciphers: invalid value",
    );
    check(
        &[("ssl-prefer-server-ciphers", "sometimes")],
        "error: annotation nginx.ingress.kubernetes.io/ssl-prefer-server-ciphers",
    );
}

/// Issue 36: ingress-nginx's leniency. An invalid value of a key that does not
/// restrict access is ignored with a Warning naming key and value (the default
/// applies, the Ingress is served); one of a key that restricts access still
/// rejects the Ingress; `--strict-annotations` rejects both.
#[test]
fn invalid_values_are_ignored_unless_they_restrict_access() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
            .collect()
    };
    let lenient = [
        ("proxy-read-timeout", "soon"),
        ("client-body-buffer-size", "1b!"),
        ("ssl-redirect", "yes"),
        ("load-balance", "least_conn"),
        ("proxy-body-size", "8m;evil"),
    ];
    for (key, value) in lenient {
        let m = map(&[(key, value), ("proxy-send-timeout", "30")]);
        let got = parse(&m, PREFIX).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            got.values.proxy_send_timeout,
            Some(30),
            "{key}: the rest is read"
        );
        assert_eq!(got.ignored.len(), 1, "{key}: {got:?}");
        let warning = &got.ignored[0];
        assert!(
            warning.contains(&format!(
                "annotation {PREFIX}{key}: invalid value {value:?}"
            )) && warning.contains("ignored"),
            "{warning}"
        );
        assert!(
            parse_with(&m, PREFIX, true).is_err(),
            "{key}: strict rejects"
        );
    }
    let closed = [
        ("whitelist-source-range", "10.0.0.0/33"),
        ("auth-url", "ftp://auth"),
        ("limit-rps", "many"),
        ("satisfy", "some"),
        ("auth-tls-verify-client", "perhaps"),
    ];
    for (key, value) in closed {
        let err = parse(&map(&[(key, value)]), PREFIX)
            .map(|p| format!("{p:?}"))
            .expect_err(key);
        assert!(
            err.to_string()
                .contains(&format!("annotation {PREFIX}{key}")),
            "{err}"
        );
    }
}
