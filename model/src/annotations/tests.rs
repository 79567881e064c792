use std::collections::BTreeMap;

use super::*;

/// Parses `pairs` (keys without the prefix) and renders the outcome as a short string.
fn check(pairs: &[(&str, &str)], expected: &str) {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
        .collect();
    let got = match parse(&map) {
        Ok(a) => format!("{a:?}"),
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
}

#[test]
fn proxy() {
    check(
        &[("backend-protocol", "grpcs")],
        "backend_protocol: Some(Grpcs)",
    );
    check(&[("backend-protocol", "FCGI")], "not supported");
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
    check(&[("upstream-hash-by", "$x; drop")], "error");
    check(&[("affinity", "cookie")], "cookie_name: \"INGRESSCOOKIE\"");
    check(
        &[
            ("affinity", "cookie"),
            ("session-cookie-name", "route"),
            ("session-cookie-max-age", "3600"),
            ("session-cookie-path", "/app"),
        ],
        "Affinity { cookie_name: \"route\", max_age: Some(3600), path: Some(\"/app\") }",
    );
    check(
        &[("affinity", "cookie"), ("session-cookie-name", "a b")],
        "error: annotation nginx.ingress.kubernetes.io/session-cookie-name",
    );
    check(&[("affinity", "ip")], "error");
    check(&[("session-cookie-name", "x")], "affinity: None");
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
        "cookie: Some(\"cc\")",
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
fn unknown_annotations_are_ignored() {
    check(&[("not-a-thing", "whatever")], "IngressAnnotations {");
}
