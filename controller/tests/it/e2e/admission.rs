//! The admission webhook against the API server: the model's decisions as kubectl
//! prints them, and the certificate the controller keeps itself.

use std::time::Duration;

use super::*;

/// Standard base64, for a webhook's `caBundle`.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            match i <= c.len() {
                true => out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char),
                false => out.push('='),
            }
        }
    }
    out
}

/// The ValidatingWebhookConfiguration of a test: cluster-scoped, so it selects only
/// the test's namespace, and it is deleted when the test ends, even by a panic.
struct WebhookConfiguration<'a> {
    c: &'a Cluster,
    name: String,
}

impl<'a> WebhookConfiguration<'a> {
    /// `ca_pem: None` leaves the caBundle for the controller to set.
    fn apply(
        c: &'a Cluster,
        ns: &str,
        port: u16,
        ca_pem: Option<&str>,
        failure_policy: &str,
    ) -> Self {
        let name = format!("{ns}-ferrule");
        c.apply(&format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{ name: {name} }}
webhooks:
- name: validate.ferrule.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: {failure_policy}
  timeoutSeconds: 5
  namespaceSelector:
    matchLabels: {{ kubernetes.io/metadata.name: {ns} }}
  rules:
  - apiGroups: [networking.k8s.io]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [ingresses]
    scope: Namespaced
  clientConfig:
    url: https://127.0.0.1:{port}/networking/v1/ingresses
{ca}"#,
            ca = ca_pem
                .map(|p| format!("    caBundle: {}\n", base64(p.as_bytes())))
                .unwrap_or_default()
        ));
        WebhookConfiguration { c, name }
    }
}

impl Drop for WebhookConfiguration<'_> {
    fn drop(&mut self) {
        let _ = self.c.kubectl(
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.name,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

#[tokio::test]
async fn the_admission_webhook_refuses_invalid_ingresses_and_warns_of_conflicts() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-admission";
    c.namespace(ns);
    // What an earlier run may have left: its webhook (deleted on drop, but not if
    // the run was killed) and its Ingresses.
    let _ = c.kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            &format!("{ns}-ferrule"),
            "--ignore-not-found",
        ],
        None,
    );
    c.delete(&["ingress", "-n", ns, "--all"]);
    let _a = netns_echo("10.213.0.7").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.7"]));

    let dir = tempfile::tempdir().unwrap();
    let ca = webhook_certificate(dir.path());
    let port = free_port().to_string();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let mut f = start_ferrule(
        c,
        ns,
        &[
            "--admission-port",
            &port,
            "--admission-address",
            "127.0.0.1",
            "--admission-cert",
            cert,
            "--admission-key",
            key,
        ],
    );
    f.wait_ready(Duration::from_secs(30)).await;
    let _fail = WebhookConfiguration::apply(c, ns, port.parse().unwrap(), Some(&ca), "Fail");
    let apply = |yaml: String| c.kubectl(&["apply", "-f", "-"], Some(&yaml));

    // An invalid annotation value: refused, naming the key and the value. The API
    // server takes a moment to start calling a new webhook: until then the Ingress
    // is created, and applying it again is an UPDATE, refused as well.
    let bad = k8s_ingress(
        ns,
        "bad",
        "bad.e2e",
        &[("/", "Prefix", "echo")],
        &[("limit-rps", "many")],
    );
    let mut refused = (false, String::new());
    for _ in 0..60 {
        let (ok, text) = apply(bad.clone());
        if !ok {
            refused = (true, text);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let (was_refused, text) = refused;
    assert!(
        was_refused,
        "the bad Ingress was never refused; log:\n{}",
        f.logs()
    );
    assert!(
        text.contains("denied the request")
            && text.contains("annotation nginx.ingress.kubernetes.io/limit-rps")
            && text.contains(r#""many""#),
        "{text}"
    );

    // An invalid value of a key that does not restrict access: admitted, as
    // ingress-nginx admits it, and `kubectl apply` prints the webhook's warning
    // naming the key and the value (issue 36).
    let sloppy = k8s_ingress(
        ns,
        "sloppy",
        "sloppy.e2e",
        &[("/", "Prefix", "echo")],
        &[("proxy-read-timeout", "soon")],
    );
    let (ok, text) = apply(sloppy);
    assert!(
        ok && text.contains("Warning:")
            && text.contains("annotation nginx.ingress.kubernetes.io/proxy-read-timeout")
            && text.contains(r#""soon""#),
        "{text}"
    );

    // A snippet while snippets are disabled, a path NGINX must not see: refused.
    for (name, ing, wanted) in [
        (
            "snippet",
            k8s_ingress(
                ns,
                "snippet",
                "snippet.e2e",
                &[("/", "Prefix", "echo")],
                &[("configuration-snippet", "return 200;")],
            ),
            "annotation nginx.ingress.kubernetes.io/configuration-snippet: snippets are disabled",
        ),
        (
            "path",
            k8s_ingress(ns, "brace", "brace.e2e", &[("/a{b", "Prefix", "echo")], &[]),
            r#"host brace.e2e: path "/a{b" contains a character not allowed in a path"#,
        ),
    ] {
        let (ok, text) = apply(ing);
        assert!(!ok && text.contains(wanted), "{name}: {text}");
    }

    // A valid one is created, without a warning.
    let good = k8s_ingress(ns, "good", "adm.e2e", &[("/", "Prefix", "echo")], &[]);
    let (ok, text) = apply(good);
    assert!(ok, "{text}");
    assert!(!text.contains("Warning"), "{text}");

    // A younger Ingress on its host + path, and a path to a Service that does not
    // exist yet: created, and kubectl prints the warnings, naming the winner.
    let younger = k8s_ingress(
        ns,
        "younger",
        "adm.e2e",
        &[("/", "Prefix", "echo"), ("/new", "Prefix", "later")],
        &[],
    );
    let (ok, text) = apply(younger);
    assert!(ok, "{text}");
    let lost = format!(
        "Warning: host adm.e2e path / (Prefix) is already served by Ingress {ns}/good (oldest wins)"
    );
    assert!(text.contains(&lost), "{text}");
    assert!(
        text.contains(&format!(
            "Warning: host adm.e2e path /new: Service {ns}/later not found"
        )),
        "{text}"
    );
    // /status/resources says the same, once the controller has built it.
    let same = wait_until(Duration::from_secs(15), || async {
        f.resource("Ingress", ns, "younger")
            .await
            .and_then(|r| r["message"].as_str().map(str::to_owned))
            .is_some_and(|m| m.contains(&lost["Warning: ".len()..]))
    })
    .await;
    assert!(same, "{:?}", f.resource("Ingress", ns, "younger").await);
    f.old_workers_gone().await;
    assert_eq!(f.backend("adm.e2e", "/").await.0, 200);

    // Another class is none of Ferrule's business, however it is annotated.
    let theirs = k8s_ingress(
        ns,
        "theirs",
        "theirs.e2e",
        &[("/", "Prefix", "echo")],
        &[("auth-type", "basic")],
    )
    .replace(
        "ingressClassName: ferrule",
        "ingressClassName: someone-else",
    );
    let (ok, text) = apply(theirs);
    assert!(ok && !text.contains("Warning"), "{text}");

    for (result, at_least) in [("denied", 3.0), ("warned", 1.0), ("allowed", 2.0)] {
        let n = f
            .metric(
                "ferrule_admission_requests_total",
                &format!(r#"result="{result}""#),
            )
            .await;
        assert!(n >= at_least, "{result}: {n}");
    }
    assert!(
        f.metric("ferrule_admission_roundtrip_duration_seconds_count", "")
            .await
            >= 6.0
    );

    // The webhook down: with failurePolicy Fail nothing is admitted; with Ignore,
    // applies work again (unchecked).
    f.stop();
    let later = k8s_ingress(ns, "later", "later.e2e", &[("/", "Prefix", "echo")], &[]);
    let (ok, text) = apply(later.clone());
    assert!(!ok && text.contains("failed calling webhook"), "{text}");
    // The same configuration, updated: never a moment without a webhook.
    let _ignore = WebhookConfiguration::apply(c, ns, port.parse().unwrap(), Some(&ca), "Ignore");
    let mut admitted = (false, String::new());
    for _ in 0..60 {
        admitted = apply(later.clone());
        if admitted.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(admitted.0, "with failurePolicy Ignore: {}", admitted.1);
    let (ok, text) = apply(bad);
    assert!(ok, "unchecked while the webhook is down: {text}");
}

/// Applies `yaml` until the webhook refuses it (the API server takes a moment to
/// call a new webhook or trust a new CA); the refusal's text, or `None`.
fn refused(c: &Cluster, yaml: &str) -> Option<String> {
    for _ in 0..80 {
        let (ok, text) = c.kubectl(&["apply", "-f", "-"], Some(yaml));
        if !ok && text.contains("denied the request") {
            return Some(text);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// One field of an object, through kubectl's go-template (`base64decode` for data).
fn field(c: &Cluster, object: &[&str], template: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(object);
    let template = format!("go-template={template}");
    args.extend(["-o", template.as_str()]);
    let (ok, text) = c.kubectl(&args, None);
    if ok { text } else { String::new() }
}

#[tokio::test]
async fn the_controller_keeps_the_webhook_certificate_and_renews_it_in_time() {
    use ferrule::kube::webhook_certificate::issue;
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-admission-cert";
    let configuration = format!("{ns}-ferrule");
    c.namespace(ns);
    let _ = c.kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            &configuration,
            "--ignore-not-found",
        ],
        None,
    );
    c.delete(&["ingress,secret", "-n", ns, "--all"]);
    let port = free_port();
    let secret = ["secret", "webhook-cert", "-n", ns];
    let tls_crt = r#"{{index .data "tls.crt" | base64decode}}"#;
    let ca_crt = r#"{{index .data "ca.crt" | base64decode}}"#;
    let ca_bundle = |c: &Cluster| {
        field(
            c,
            &["validatingwebhookconfiguration", &configuration],
            r#"{{range .webhooks}}{{.clientConfig.caBundle | base64decode}}{{end}}"#,
        )
    };
    let bad = k8s_ingress(
        ns,
        "bad",
        "bad.e2e",
        &[("/", "Prefix", "echo")],
        &[("limit-rps", "many")],
    );

    // What a year-old install left: a certificate issued 300 days ago for a year,
    // with under a third of its lifetime left, and its CA in the configuration.
    let year = Duration::from_secs(365 * 86_400);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let old = issue(&["127.0.0.1".to_owned()], year, now - 300 * 86_400, None).unwrap();
    c.apply(&format!(
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata: {{name: webhook-cert, \
         namespace: {ns}}}\ndata:\n  ca.crt: {}\n  tls.crt: {}\n  tls.key: {}\n",
        base64(old.ca_bundle.as_bytes()),
        base64(old.cert.as_bytes()),
        base64(old.key.as_bytes())
    ));
    let _webhook = WebhookConfiguration::apply(c, ns, port, Some(&old.ca_bundle), "Fail");
    let port = port.to_string();
    let args = [
        "--admission-port",
        port.as_str(),
        "--admission-address",
        "127.0.0.1",
        "--admission-secret",
        &format!("{ns}/webhook-cert"),
        "--admission-webhook-configuration",
        &configuration,
        "--lease-duration-seconds",
        "3",
    ];
    let mut f = start_ferrule(c, ns, &args);
    f.wait_ready(Duration::from_secs(30)).await;

    // Renewed at once: a new certificate, whose bundle still trusts the old CA (a
    // replica that has not yet read the Secret serves the old one), set on the
    // configuration; the API server calls the webhook and gets its answer.
    let renewed = wait_until(Duration::from_secs(30), || async {
        let crt = field(c, &secret, tls_crt);
        !crt.is_empty() && crt != old.cert
    })
    .await;
    assert!(
        renewed,
        "the due certificate was renewed; log:\n{}",
        f.logs()
    );
    let bundle = field(c, &secret, ca_crt);
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2, "{bundle}");
    assert!(bundle.contains(old.ca_bundle.trim()), "the old CA is kept");
    let set = wait_until(Duration::from_secs(10), || async { ca_bundle(c) == bundle }).await;
    assert!(set, "caBundle {:?}, Secret {bundle:?}", ca_bundle(c));
    let text = refused(c, &bad).unwrap_or_else(|| panic!("never refused; log:\n{}", f.logs()));
    assert!(text.contains("limit-rps"), "{text}");

    // A restart keeps the certificate.
    let kept = field(c, &secret, tls_crt);
    f.stop();
    let mut f = start_ferrule(c, ns, &args);
    f.wait_ready(Duration::from_secs(30)).await;
    assert!(
        refused(c, &bad).is_some(),
        "after a restart; log:\n{}",
        f.logs()
    );
    assert_eq!(field(c, &secret, tls_crt), kept, "the certificate is kept");

    // A fresh install: no Secret and no caBundle. The controller issues both.
    f.stop();
    c.delete(&["secret", "webhook-cert", "-n", ns]);
    let _webhook = WebhookConfiguration::apply(c, ns, port.parse().unwrap(), None, "Fail");
    assert_eq!(
        ca_bundle(c),
        "",
        "the configuration starts without a caBundle"
    );
    let f = start_ferrule(c, ns, &args);
    f.wait_ready(Duration::from_secs(30)).await;
    assert!(
        refused(c, &bad).is_some(),
        "on a fresh install; log:\n{}",
        f.logs()
    );
    assert_eq!(
        field(
            c,
            &secret,
            r#"{{.type}} {{index .metadata.labels "app.kubernetes.io/managed-by"}}"#
        ),
        "kubernetes.io/tls ferrule"
    );
    assert_eq!(ca_bundle(c), field(c, &secret, ca_crt));
    assert_eq!(
        field(c, &secret, ca_crt)
            .matches("BEGIN CERTIFICATE")
            .count(),
        1
    );
}
