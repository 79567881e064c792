//! Header lists in Kubernetes mode: the ConfigMaps that the controller ConfigMap and
//! the Ingresses name are followed, and no other ConfigMap costs more than its
//! metadata.

use std::time::Duration;

use super::*;

/// `proxy-set-headers` in Kubernetes mode: the list it names is found in the
/// controller ConfigMap's namespace and followed when it is edited.
#[tokio::test]
async fn header_lists_named_by_the_configmap_are_watched() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-headers";
    c.namespace(ns);
    let _echo = netns_echo("10.213.0.6").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.6"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "headers.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    c.apply(&k8s_ingress(
        ns,
        "custom",
        "custom.e2e",
        &[("/", "Prefix", "echo")],
        &[("custom-headers", "resp")],
    ));
    let list = |v: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: req, namespace: {ns} }}\n\
             data: {{ X-Team: {v} }}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: resp, namespace: {ns} }}\n\
             data: {{ X-Team: {v} }}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: ferrule, namespace: {ns} }}\n\
             data: {{ proxy-set-headers: {ns}/req, global-allowed-response-headers: X-Team }}\n"
        )
    };
    c.apply(&list("blue"));
    let cm = format!("{ns}/ferrule");
    let f = start_ferrule(c, ns, &["--configmap", &cm]);
    f.wait_ready(Duration::from_secs(30)).await;
    let team = || async {
        let (status, seen) = f.get("headers.e2e", "/").await;
        (
            status,
            seen["headers"]["x-team"].as_str().map(str::to_owned),
        )
    };
    assert_eq!(team().await, (200, Some("blue".to_owned())), "{}", f.logs());
    c.apply(&list("green"));
    let edited = wait_until(Duration::from_secs(10), || async {
        team().await.1.as_deref() == Some("green")
    })
    .await;
    assert!(edited, "the edited list is not served; log:\n{}", f.logs());
    // An Ingress's own list (custom-headers), read from its namespace.
    let answered = || async {
        let r = client()
            .get(format!("http://127.0.0.1:{}/", f.http))
            .header("Host", "custom.e2e")
            .send()
            .await
            .unwrap();
        (r.headers().get("x-team"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let custom = wait_until(Duration::from_secs(10), || async {
        answered().await.as_deref() == Some("green")
    })
    .await;
    assert!(
        custom,
        "custom-headers not served: {:?}; log:\n{}",
        answered().await,
        f.logs()
    );
}

/// The controller's peak resident memory (`VmHWM`), in bytes.
fn peak_memory(f: &Ferrule) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", f.child.id())).unwrap();
    let kib: u64 = (status.lines())
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// ConfigMaps nobody names (dashboards, application configuration) cost the
/// controller their metadata only: 32 MiB of them raise its peak memory by less than
/// a fifth of that, measured against the same controller started without them.
#[tokio::test]
async fn configmaps_nobody_names_cost_their_metadata_only() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-big-configmaps";
    c.namespace(ns);
    c.apply(&k8s_service(ns, "echo", &["10.213.0.7"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "big.e2e",
        &[("/", "Prefix", "echo")],
        &[("custom-headers", "named")],
    ));
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: named, namespace: {ns} }}\n\
         data: {{ X-Team: blue }}\n"
    ));
    let peak = || async {
        let mut f = start_ferrule(c, ns, &[]);
        f.wait_ready(Duration::from_secs(60)).await;
        let peak = peak_memory(&f);
        f.stop();
        peak
    };
    let without = peak().await;
    let (count, each) = (32, 1000 * 1000 - 4096);
    let filler = "x".repeat(each);
    for i in 0..count {
        // `create`: `apply` would keep a second copy in an annotation, over the limit
        let yaml = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: big-{i}, namespace: {ns} }}\n\
             data: {{ dashboard.json: {filler} }}\n"
        );
        let (ok, text) = c.kubectl(&["create", "-f", "-"], Some(&yaml));
        assert!(ok || text.contains("AlreadyExists"), "{text}");
    }
    let with = peak().await;
    let data = (count * each) as u64;
    eprintln!("peak memory without the ConfigMaps {without} B, with {with} B; their data {data} B");
    assert!(
        with.saturating_sub(without) < data / 5,
        "{} MiB of ConfigMaps nobody names raised the peak from {} to {} MiB",
        data >> 20,
        without >> 20,
        with >> 20
    );
    for i in 0..count {
        c.delete(&["configmap", "-n", ns, &format!("big-{i}")]);
    }
}
