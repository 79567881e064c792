use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;

use super::{Stored, issue, pem_certificates, renewal, served_names};

const DAY: i64 = 86_400;
const YEAR: Duration = Duration::from_secs(365 * 86_400);
const NOW: i64 = 1_800_000_000;

fn names() -> Vec<String> {
    vec![
        "ferrule-admission.ingress.svc".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

fn configuration(yaml: &str) -> ValidatingWebhookConfiguration {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn the_names_are_those_the_api_server_checks() {
    let c = configuration(
        r#"
metadata: { name: w }
webhooks:
- name: a.ferrule.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig:
    service: { name: ferrule-admission, namespace: ingress, path: /networking/v1/ingresses }
- name: b.ferrule.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: { url: "https://127.0.0.1:8443/networking/v1/ingresses" }
- name: c.ferrule.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: { url: "https://[::1]:8443/x" }
"#,
    );
    assert_eq!(
        served_names(&c),
        [
            "127.0.0.1",
            "::1",
            "ferrule-admission",
            "ferrule-admission.ingress",
            "ferrule-admission.ingress.svc",
            "ferrule-admission.ingress.svc.cluster.local",
        ]
    );
}

/// What `renewal` says of `stored` at `now` (`None`: it serves).
fn check(stored: Option<&Stored>, names: &[String], now: i64, expected: Option<&str>) {
    let got = renewal(stored, names, YEAR, now);
    match (expected, &got) {
        (None, None) => {}
        (Some(want), Some(got)) if got.contains(want) => {}
        _ => panic!("expected {expected:?}, got {got:?}"),
    }
}

#[test]
fn a_certificate_is_renewed_when_it_cannot_serve_for_a_third_of_its_lifetime() {
    let fresh = issue(&names(), YEAR, NOW, None).unwrap();
    check(None, &names(), NOW, Some("no certificate yet"));
    check(Some(&fresh), &names(), NOW, None);
    // 365 days: renewed with under 121 days left, not before.
    check(Some(&fresh), &names(), NOW + 240 * DAY, None);
    check(Some(&fresh), &names(), NOW + 245 * DAY, Some("expires at"));
    // Backdated for slow clocks, but not by a day.
    check(Some(&fresh), &names(), NOW - 60, None);
    check(Some(&fresh), &names(), NOW - DAY, Some("valid only from"));
    // The webhook configuration now calls a name the certificate lacks.
    let more = [names(), vec!["other.ingress.svc".to_owned()]].concat();
    check(
        Some(&fresh),
        &more,
        NOW,
        Some("not valid for other.ingress.svc"),
    );
    let other = issue(&names(), YEAR, NOW, None).unwrap();
    let wrong_key = Stored {
        key: other.key.clone(),
        ..fresh.clone()
    };
    check(Some(&wrong_key), &names(), NOW, Some("tls.key is not"));
    let wrong_ca = Stored {
        ca_bundle: other.ca_bundle.clone(),
        ..fresh.clone()
    };
    check(Some(&wrong_ca), &names(), NOW, Some("ca.crt holds no CA"));
    let garbage = Stored {
        cert: "not a certificate".to_owned(),
        ..fresh
    };
    check(Some(&garbage), &names(), NOW, Some("tls.crt holds no"));
}

#[test]
fn a_rotation_keeps_the_previous_ca_so_the_old_certificate_still_verifies() {
    let first = issue(&names(), YEAR, NOW, None).unwrap();
    let second = issue(&names(), YEAR, NOW + 250 * DAY, Some(&first)).unwrap();
    assert_eq!(pem_certificates(&second.ca_bundle).unwrap().len(), 2);
    // A replica still serving the first certificate is trusted by the new bundle
    // (checked at a time the first is not yet due), and so is one serving the second.
    let old_served = Stored {
        ca_bundle: second.ca_bundle.clone(),
        ..first.clone()
    };
    check(Some(&old_served), &names(), NOW, None);
    check(Some(&second), &names(), NOW + 250 * DAY, None);
    // The next rotation drops the oldest CA: two at most.
    let third = issue(&names(), YEAR, NOW + 500 * DAY, Some(&second)).unwrap();
    let cas = pem_certificates(&third.ca_bundle).unwrap();
    assert_eq!(cas.len(), 2);
    let first_ca = &pem_certificates(&first.ca_bundle).unwrap()[0];
    assert!(!cas.contains(first_ca), "the first CA is gone");
    let second_ca = &pem_certificates(&second.ca_bundle).unwrap()[0];
    assert!(cas.contains(second_ca), "the second CA stays");
}
