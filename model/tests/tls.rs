//! TLS rules: `kubernetes.io/tls` Secrets are parsed and checked (key matches the
//! certificate, SAN covers the host, not expired); otherwise the default certificate is
//! served and a problem names the Secret. The fixtures are made by `fixtures/gen.sh`.

#[macro_use]
mod common;

use common::*;
use ferrule_model::{Fallbacks, Model, build_with};
use serde_json::json;

/// The certificate a host is served with: `Some("ns/secret")`, or `None` for the default.
fn served(m: &Model, host: &str) -> Option<String> {
    let server = m.server(host).unwrap_or_else(|| panic!("no server {host}"));
    server
        .tls
        .as_ref()
        .unwrap_or_else(|| panic!("server {host} has no TLS"))
        .certificate
        .clone()
}

fn tls_ingress(ns_name: &str, t: u32, host: &str, secret: &str) -> Ing {
    Ing::new(ns_name, t)
        .rule(host, &[("/", "Prefix", "web", "80")])
        .tls(&[host], secret)
}

#[test]
fn valid_secrets_rsa_pkcs1_pkcs8_ec_sec1_pkcs8_and_wildcard() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/a-pkcs1", "a.crt", "a.key"),
        tls_secret("default/a-pkcs8", "a.crt", "a-pkcs8.key"),
        tls_secret("default/ec-sec1", "ec.crt", "ec.key"),
        tls_secret("default/ec-pkcs8", "ec.crt", "ec-pkcs8.key"),
        tls_secret("default/wild", "wildcard.crt", "wildcard.key"),
        tls_ingress("default/a", 1, "a.example.com", "a-pkcs1"),
        tls_ingress("default/ec", 1, "ec.example.com", "ec-sec1"),
        tls_ingress("default/w", 1, "*.example.com", "wild"),
        tls_ingress("default/x", 1, "x.example.com", "wild"),
        // the same certificates in PKCS#8 form, on other hosts they cover
        Ing::new("default/pk8", 1)
            .rule("A.example.com", &[("/pk8", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "a-pkcs1"),
        Ing::new("team/a8", 1)
            .rule("y.example.com", &[("/", "Prefix", "web", "80")])
            .tls(&["y.example.com"], "w"),
    ];
    let m = check(&yaml, &[("a.example.com", "/", "default_web_80")]);
    assert_eq!(
        served(&m, "a.example.com").as_deref(),
        Some("default/a-pkcs1")
    );
    assert_eq!(
        served(&m, "ec.example.com").as_deref(),
        Some("default/ec-sec1")
    );
    assert_eq!(served(&m, "*.example.com").as_deref(), Some("default/wild"));
    assert_eq!(served(&m, "x.example.com").as_deref(), Some("default/wild"));
    let a = &m.certificates["default/a-pkcs1"];
    assert_eq!(a.names, ["a.example.com"]);
    assert_eq!(a.secret.to_string(), "Secret default/a-pkcs1");
    assert!(a.not_after > NOW + 50 * 365 * 86_400, "{}", a.not_after);
    assert!(a.cert_pem.contains("BEGIN CERTIFICATE"));
    assert!(a.key_pem.contains("BEGIN RSA PRIVATE KEY"));
    assert_eq!(m.certificates["default/wild"].names, ["*.example.com"]);
    // the missing team/w Secret is reported on its Ingress, and only unused Secrets
    // stay out of the model
    expect_problems(
        &m,
        &[(
            "Ingress team/a8",
            "spec.tls host y.example.com: Secret team/w not found; serving the default certificate",
        )],
    );
    assert_eq!(served(&m, "y.example.com"), None);
    for unused in ["default/a-pkcs8", "default/ec-pkcs8"] {
        assert!(!m.certificates.contains_key(unused));
    }
    expect_no_problems_on(&m, "Ingress default/a");
    expect_no_problems_on(&m, "Ingress default/ec");
    expect_no_problems_on(&m, "Ingress default/w");
    expect_no_problems_on(&m, "Ingress default/x");
}

#[test]
fn every_key_form_is_accepted() {
    for (cert, key, host) in [
        ("a.crt", "a.key", "a.example.com"),
        ("a.crt", "a-pkcs8.key", "a.example.com"),
        ("ec.crt", "ec.key", "ec.example.com"),
        ("ec.crt", "ec-pkcs8.key", "ec.example.com"),
        ("wildcard.crt", "wildcard.key", "foo.example.com"),
    ] {
        let yaml = docs![
            app("default/web", "10.0.0.1"),
            tls_secret("default/s", cert, key),
            tls_ingress("default/i", 1, host, "s"),
        ];
        let m = check(&yaml, &[]);
        assert_eq!(
            served(&m, host).as_deref(),
            Some("default/s"),
            "{cert} + {key}: {}",
            problem_list(&m)
        );
        assert!(
            m.problems.is_empty(),
            "{cert} + {key}: {}",
            problem_list(&m)
        );
        assert!(m.certificates.contains_key("default/s"));
    }
}

#[test]
fn key_mismatch_serves_the_default_certificate() {
    for (cert, key) in [
        ("a.crt", "other.key"),
        ("a.crt", "wildcard.key"),
        ("ec.crt", "a.key"),
        ("a.crt", "ec.key"),
    ] {
        let yaml = docs![
            app("default/web", "10.0.0.1"),
            tls_secret("default/mixed", cert, key),
            tls_ingress("default/i", 1, "a.example.com", "mixed"),
        ];
        let m = check(&yaml, &[("a.example.com", "/", "default_web_80")]);
        assert_eq!(served(&m, "a.example.com"), None, "{cert} + {key}");
        assert!(m.certificates.is_empty());
        expect_problems(
            &m,
            &[(
                "Ingress default/i",
                "spec.tls host a.example.com: Secret default/mixed:|serving the default certificate",
            )],
        );
    }
    // the plain RSA mismatch says what is wrong
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/mixed", "a.crt", "other.key"),
        tls_ingress("default/i", 1, "a.example.com", "mixed"),
    ];
    let m = check(&yaml, &[]);
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/mixed: tls.key does not match the certificate in tls.crt",
        )],
    );
}

#[test]
fn san_not_covering_the_host() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/a", "a.crt", "a.key"),
        tls_secret("default/wild", "wildcard.crt", "wildcard.key"),
        tls_ingress("default/b", 1, "b.example.com", "a"),
        // a wildcard covers exactly one label
        tls_ingress("default/deep", 1, "deep.x.example.com", "wild"),
        tls_ingress("default/apex", 1, "example.com", "wild"),
    ];
    let m = check(&yaml, &[]);
    for host in ["b.example.com", "deep.x.example.com", "example.com"] {
        assert_eq!(served(&m, host), None, "{host}");
    }
    expect_problems(
        &m,
        &[
            (
                "Ingress default/b",
                "Secret default/a: the certificate does not cover host b.example.com (names: a.example.com)",
            ),
            (
                "Ingress default/deep",
                "does not cover host deep.x.example.com (names: *.example.com)",
            ),
            ("Ingress default/apex", "does not cover host example.com"),
        ],
    );
    assert!(m.certificates.is_empty());
}

#[test]
fn expired_certificate() {
    let valid = check(
        &docs![
            app("default/web", "10.0.0.1"),
            tls_secret("default/a", "a.crt", "a.key"),
            tls_ingress("default/i", 1, "a.example.com", "a"),
        ],
        &[],
    );
    let not_after = valid.certificates["default/a"].not_after;
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/a", "a.crt", "a.key"),
        tls_ingress("default/i", 1, "a.example.com", "a"),
        test_settings(json!({ "now": not_after + 1 })),
    ];
    let m = check(&yaml, &[("a.example.com", "/", "default_web_80")]);
    assert_eq!(served(&m, "a.example.com"), None);
    assert!(m.certificates.is_empty());
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/a: certificate in tls.crt expired at",
        )],
    );
}

#[test]
fn missing_or_malformed_secret() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret_pem("default/garbage", "not a pem", &fixture("a.key")),
        tls_secret_pem("default/no-cert", &fixture("a.key"), &fixture("a.key")),
        tls_ingress("default/missing", 1, "m.example.com", "nope"),
        tls_ingress("default/garbage", 1, "a.example.com", "garbage"),
        tls_ingress("default/no-cert", 1, "ec.example.com", "no-cert"),
    ];
    let m = check(&yaml, &[]);
    expect_problems(
        &m,
        &[
            ("Ingress default/missing", "Secret default/nope not found"),
            ("Ingress default/garbage", "Secret default/garbage: tls.crt"),
            (
                "Ingress default/no-cert",
                "Secret default/no-cert: tls.crt: no CERTIFICATE block",
            ),
        ],
    );
    for host in ["m.example.com", "a.example.com", "ec.example.com"] {
        assert_eq!(served(&m, host), None);
    }
}

/// NGINX loads the whole chain: a broken intermediate is reported on the Ingress
/// rather than found at handshake time; an oversized chain cannot fill the store.
#[test]
fn broken_or_oversized_chains() {
    let broken = format!(
        "{}-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n",
        fixture("a.crt")
    );
    let huge = fixture("a.crt").repeat(128 * 1024 / fixture("a.crt").len() + 1);
    let with_ca = format!("{}{}", fixture("a.crt"), fixture("ca.crt"));
    let with_secret = |pem: &str| {
        let yaml = docs![
            app("default/web", "10.0.0.1"),
            tls_secret_pem("default/s", pem, &fixture("a.key")),
            tls_ingress("default/i", 1, "a.example.com", "s"),
        ];
        check(&yaml, &[])
    };
    let m = with_secret(&broken);
    assert_eq!(served(&m, "a.example.com"), None);
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/s: tls.crt: certificate 2 of the chain is invalid",
        )],
    );
    let m = with_secret(&huge);
    assert_eq!(served(&m, "a.example.com"), None);
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/s: tls.crt and tls.key: |bytes together, more than the 131072",
        )],
    );
    // the same leaf with a valid CA certificate after it is fine
    let m = with_secret(&with_ca);
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("default/s"));
    expect_no_problems_on(&m, "Ingress default/i");
}

/// The store keeps what is served: the blocks read, without the text around them,
/// and a certificate and key of at most 128 KiB together, however the bytes are
/// spent (a padded key took a MB of the store per host).
#[test]
fn only_the_pem_blocks_are_kept_and_their_size_is_bounded() {
    let with_secret = |cert: &str, key: &str| {
        let yaml = docs![
            app("default/web", "10.0.0.1"),
            tls_secret_pem("default/s", cert, key),
            tls_ingress("default/i", 1, "a.example.com", "s"),
        ];
        check(&yaml, &[])
    };
    let (cert, key) = (fixture("a.crt"), fixture("a.key"));
    // padding after the key's block, a comment before the chain, a key in tls.crt
    let padded = format!("{key}{}\n", "x".repeat(1 << 20));
    let m = with_secret(&cert, &padded);
    assert_eq!(served(&m, "a.example.com"), None);
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/s: tls.crt and tls.key: |bytes together, more than the 131072",
        )],
    );
    let noisy_cert = format!("issued by us\n{cert}{key}trailing text\n");
    let noisy_key = format!("{key}{}\n", "x".repeat(60 * 1024));
    let m = with_secret(&noisy_cert, &noisy_key);
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("default/s"));
    let c = &m.certificates["default/s"];
    assert_eq!(c.cert_pem, cert);
    assert_eq!(c.key_pem, key);
    // Another Secret with the same blocks written differently (CRLF, blank lines,
    // indentation): the same bytes reach the balancers, which store a pair once.
    let crlf = |pem: &str| format!("\r\n  {}\r\n\r\n", pem.replace('\n', "\r\n"));
    let m = with_secret(&crlf(&cert), &crlf(&key));
    let c = &m.certificates["default/s"];
    assert_eq!(
        (c.cert_pem.as_str(), c.key_pem.as_str()),
        (cert.as_str(), key.as_str())
    );
    // at the bound: a chain of the same leaf, repeated
    let n = (128 * 1024 - key.len()) / cert.len();
    let m = with_secret(&cert.repeat(n), &key);
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("default/s"));
    let m = with_secret(&cert.repeat(n + 1), &key);
    assert_eq!(served(&m, "a.example.com"), None);
}

/// A Secret whose new version is not valid keeps serving the certificate the
/// previous model served (`Fallbacks::certificates`), reported on the Ingress; a
/// deleted Secret, or an expired last version, falls back to the default.
#[test]
fn an_invalid_new_version_of_a_secret_keeps_its_last_valid_certificate() {
    let with = |key: &str| {
        snapshot(&docs![
            our_class(),
            app("default/web", "10.0.0.1"),
            tls_secret("default/a", "a.crt", key),
            tls_ingress("default/i", 1, "a.example.com", "a"),
        ])
    };
    let after = |m: &Model| Fallbacks {
        certificates: m.certificates.clone(),
        ..Default::default()
    };
    let good = ferrule_model::build(&with("a.key"));
    assert_eq!(served(&good, "a.example.com").as_deref(), Some("default/a"));
    let bad = with("ec.key");
    assert_eq!(
        served(&ferrule_model::build(&bad), "a.example.com"),
        None,
        "nothing to fall back on"
    );
    let m = build_with(&bad, &after(&good));
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("default/a"));
    assert_eq!(m.certificates["default/a"], good.certificates["default/a"]);
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "Secret default/a: tls.key does not match the certificate in tls.crt; serving the Secret's last valid version",
        )],
    );
    // and it carries on while the Secret stays invalid
    assert_eq!(
        served(&build_with(&with("ec.key"), &after(&m)), "a.example.com").as_deref(),
        Some("default/a")
    );

    let gone = snapshot(&docs![
        our_class(),
        app("default/web", "10.0.0.1"),
        tls_ingress("default/i", 1, "a.example.com", "a"),
    ]);
    assert_eq!(
        served(&build_with(&gone, &after(&good)), "a.example.com"),
        None
    );

    let mut old = good.certificates.as_ref().clone();
    old.get_mut("default/a").unwrap().not_after = NOW - 1;
    let expired = Fallbacks {
        certificates: std::sync::Arc::new(old),
        ..Default::default()
    };
    assert_eq!(
        served(&build_with(&with("ec.key"), &expired), "a.example.com"),
        None
    );
}

#[test]
fn oldest_ingress_wins_a_hosts_tls() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/a", "a.crt", "a.key"),
        tls_secret("default/wild", "wildcard.crt", "wildcard.key"),
        tls_secret("team/a", "a.crt", "a-pkcs8.key"),
        // listed young first; every Ingress has its own path, so only TLS conflicts
        Ing::new("default/young", 9)
            .rule("a.example.com", &[("/young", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "wild"),
        tls_ingress("default/old", 3, "a.example.com", "a"),
        // same Secret name, other namespace: another Secret, so a conflict too
        Ing::new("team/younger", 12)
            .rule("a.example.com", &[("/team", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "a"),
        // the same Secret again is no conflict
        Ing::new("default/same", 10)
            .rule("a.example.com", &[("/same", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "a"),
    ];
    let m = check(&yaml, &[("a.example.com", "/", "default_web_80")]);
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("default/a"));
    expect_problems(
        &m,
        &[
            (
                "Ingress default/young",
                "spec.tls: the certificate of host a.example.com is already provided by Ingress default/old with Secret default/a (oldest wins)",
            ),
            (
                "Ingress team/younger",
                "already provided by Ingress default/old with Secret default/a",
            ),
        ],
    );
    expect_no_problems_on(&m, "Ingress default/old");
    expect_no_problems_on(&m, "Ingress default/same");
    // team/web does not exist: that is the only other problem of team/younger
    assert_eq!(m.problems.len(), 3, "{}", problem_list(&m));
    assert_eq!(m.certificates.keys().collect::<Vec<_>>(), ["default/a"]);
}

#[test]
fn tls_host_without_rule_adds_nothing() {
    let yaml = docs![
        app("default/web", "10.0.0.1"),
        tls_secret("default/a", "a.crt", "a.key"),
        Ing::new("default/i", 1)
            .rule("other.example.com", &[("/", "Prefix", "web", "80")])
            .tls(&["a.example.com"], "a"),
    ];
    let m = check(&yaml, &[("a.example.com", "/", "404")]);
    assert!(m.server("a.example.com").is_none());
    assert!(m.server("other.example.com").unwrap().tls.is_none());
    assert!(m.certificates.is_empty());
    expect_problems(
        &m,
        &[(
            "Ingress default/i",
            "spec.tls: host a.example.com has no rule in this Ingress; its certificate is ignored",
        )],
    );
}

/// An older Ingress listing another tenant's host in `spec.tls` (without a rule for
/// it) does not take that host's certificate: creationTimestamp never changes, so it
/// could do so at any time.
#[test]
fn an_older_ingress_cannot_take_the_certificate_of_a_host_it_has_no_rule_for() {
    let yaml = docs![
        app("alpha/web", "10.0.0.1"),
        app("beta/web", "10.0.0.2"),
        tls_secret("alpha/a", "a.crt", "a.key"),
        tls_secret("beta/fake", "a.crt", "a-pkcs8.key"),
        Ing::new("beta/old", 1)
            .rule("b.example.com", &[("/", "Prefix", "web", "80")])
            .tls(&["a.example.com", "b.example.com"], "fake"),
        tls_ingress("alpha/a", 5, "a.example.com", "a"),
    ];
    let m = check(&yaml, &[("a.example.com", "/", "alpha_web_80")]);
    assert_eq!(served(&m, "a.example.com").as_deref(), Some("alpha/a"));
    expect_no_problems_on(&m, "Ingress alpha/a");
    expect_problems(
        &m,
        &[(
            "Ingress beta/old",
            "host a.example.com has no rule in this Ingress",
        )],
    );
}

// ---------------------------------------------------------------------------------------
// --default-ssl-certificate

/// Hosts with a valid Secret of their own, a missing one, none named, one that does
/// not cover the host, and one with a key of another certificate; one host without TLS.
fn default_cert_fixture(flag: &str) -> String {
    docs![
        app("default/web", "10.0.0.1"),
        tls_secret("ingress-nginx/fallback", "wildcard.crt", "wildcard.key"),
        tls_secret("default/fallback", "ec.crt", "ec.key"),
        tls_secret("ingress-nginx/broken", "a.crt", "other.key"),
        tls_secret("default/a", "a.crt", "a.key"),
        tls_secret("default/mixed", "a.crt", "other.key"),
        tls_ingress("default/own", 1, "a.example.com", "a"),
        tls_ingress("default/missing", 1, "m.example.com", "no-such-secret"),
        tls_ingress("default/uncovered", 1, "u.example.com", "a"),
        tls_ingress("default/mismatch", 1, "k.example.com", "mixed"),
        Ing::new("default/unnamed", 1)
            .rule("n.example.com", &[("/", "Prefix", "web", "80")])
            .tls(&["n.example.com"], ""),
        Ing::new("default/plain", 1).rule("plain.test", &[("/", "Prefix", "web", "80")]),
        test_settings(json!({ "defaultSslCertificate": flag })),
    ]
}

#[test]
fn default_ssl_certificate_serves_tls_hosts_without_a_valid_own_secret() {
    // (flag, the certificate it names, or None when the Secret is not valid)
    let flags = [
        ("ingress-nginx/fallback", Some("ingress-nginx/fallback")),
        // no namespace: `default`, as for --default-backend-service
        ("fallback", Some("default/fallback")),
        ("ingress-nginx/nope", None),
        ("ingress-nginx/broken", None),
    ];
    for (flag, default) in flags {
        let m = check(
            &default_cert_fixture(flag),
            &[
                ("a.example.com", "/", "default_web_80"),
                ("m.example.com", "/", "default_web_80"),
                ("plain.test", "/", "default_web_80"),
            ],
        );
        assert_eq!(m.default_certificate.as_deref(), default, "{flag}");
        // (host, served certificate): its own when valid, else the flag's
        let rows = [
            ("a.example.com", Some("default/a")),
            ("m.example.com", default),
            ("n.example.com", default),
            ("u.example.com", default),
            ("k.example.com", default),
        ];
        for (host, want) in rows {
            assert_eq!(served(&m, host).as_deref(), want, "{flag}: {host}");
        }
        // A host without TLS stays without TLS (no redirect to HTTPS); the default
        // server serves the default certificate through `default_certificate`.
        assert!(m.server("plain.test").unwrap().tls.is_none(), "{flag}");
        match default {
            Some(name) => {
                assert!(m.certificates.contains_key(name), "{flag}");
                let secret = format!("Secret {name}");
                expect_no_problems_on(&m, &secret);
            }
            None => assert!(
                !m.certificates
                    .keys()
                    .any(|k| k.contains("fallback") || k.contains("broken")),
                "{flag}: {:?}",
                m.certificates.keys()
            ),
        }
        // The hosts' own problems stay, whatever is served instead.
        expect_problems(
            &m,
            &[
                (
                    "Ingress default/missing",
                    "Secret default/no-such-secret not found",
                ),
                (
                    "Ingress default/uncovered",
                    "does not cover host u.example.com",
                ),
                ("Ingress default/mismatch", "tls.key does not match"),
            ],
        );
    }
}

#[test]
fn default_ssl_certificate_that_is_not_valid_is_a_problem_on_its_secret() {
    let m = check(&default_cert_fixture("ingress-nginx/nope"), &[]);
    expect_problems(
        &m,
        &[(
            "Secret ingress-nginx/nope",
            "--default-ssl-certificate ingress-nginx/nope: Secret not found; serving the self-signed default certificate",
        )],
    );
    let m = check(&default_cert_fixture("ingress-nginx/broken"), &[]);
    expect_problems(
        &m,
        &[(
            "Secret ingress-nginx/broken",
            "--default-ssl-certificate ingress-nginx/broken: tls.key does not match the certificate in tls.crt",
        )],
    );
    // Without the flag nothing changes: the model has no default certificate and
    // its encoding (hence its hash) has no field for it.
    let m = check(
        &docs![
            app("default/web", "10.0.0.1"),
            tls_ingress("default/missing", 1, "m.example.com", "no-such-secret"),
        ],
        &[],
    );
    assert_eq!(m.default_certificate, None);
    assert_eq!(served(&m, "m.example.com"), None);
    assert!(
        !serde_json::to_string(&m)
            .unwrap()
            .contains("default_certificate")
    );
}
