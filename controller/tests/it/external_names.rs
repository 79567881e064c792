//! ExternalName Services: the name's addresses are the backend's endpoints (looked
//! up by the controller, an IP address taken as it is), on the Service port's
//! targetPort, and a change of the name moves traffic without a reload.

use std::time::Duration;

use crate::support::*;

/// An ExternalName Service `demo/ext` for `name`, its port 80 going to `target`.
fn external(name: &str, target: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{ name: ext, namespace: demo }}\nspec:\n  \
         type: ExternalName\n  externalName: {name}\n  ports:\n  \
         - {{ name: http, port: 80, targetPort: {target} }}\n"
    )
}

fn routed_to_ext() -> String {
    ingress(
        "demo",
        "web",
        "2026-01-01T00:00:00Z",
        "ext.test",
        &[("/", "Prefix", "ext")],
        &[],
    )
}

#[tokio::test]
async fn external_name_services_are_proxied_to_their_names_addresses() {
    let port = free_port();
    let a = Echo::start_on("127.0.0.2", port).await;
    let b = Echo::start_on("127.0.0.3", port).await;
    let m = Manifests::new();
    m.write("svc.yaml", &external("127.0.0.2", port));
    m.write("ing.yaml", &routed_to_ext());
    let f = Ferrule::start(m.path(), &[]).await;
    let served = wait_until(Duration::from_secs(10), || async {
        f.backend("ext.test", "/").await == (200, a.addr.to_string())
    })
    .await;
    assert!(
        served,
        "{:?}; log:\n{}",
        f.backend("ext.test", "/").await,
        f.logs()
    );

    // Another name: the traffic moves, and NGINX is not reloaded for it.
    let workers = f.worker_pids();
    m.write("svc.yaml", &external("127.0.0.3", port));
    let moved = wait_until(Duration::from_secs(10), || async {
        f.backend("ext.test", "/").await == (200, b.addr.to_string())
    })
    .await;
    assert!(moved, "{:?}", f.backend("ext.test", "/").await);
    assert_eq!(f.worker_pids(), workers, "no reload for a new address");

    // A name looked up: localhost's addresses (loopback, allowed here as all
    // test endpoints are).
    let local = Echo::start_on("127.0.0.1", port).await;
    let _v6 = match tokio::net::TcpListener::bind(("::1", port)).await {
        Ok(l) => Some(Echo::serve(l)),
        Err(_) => None,
    };
    m.write("svc.yaml", &external("localhost", port));
    let looked_up = wait_until(Duration::from_secs(10), || async {
        let endpoints = f.balancer_backend("demo_ext_80").await["endpoints"].clone();
        endpoints.as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e["address"] == "127.0.0.1" && e["port"] == port)
        })
    })
    .await;
    assert!(
        looked_up,
        "{}; log:\n{}",
        f.balancer_backend("demo_ext_80").await,
        f.logs()
    );
    assert_eq!(f.get("ext.test", "/").await.0, 200);
    drop(local);
}

/// Without --allow-local-endpoints, a name that points at the node itself (cloud
/// metadata, loopback) is left out and reported, as EndpointSlices' are.
#[tokio::test]
async fn an_external_name_of_the_node_itself_is_left_out() {
    let port = free_port();
    let _echo = Echo::start_on("127.0.0.2", port).await;
    let m = Manifests::new();
    m.write("svc.yaml", &external("127.0.0.2", port));
    m.write("ing.yaml", &routed_to_ext());
    let f = Ferrule::start(m.path(), &["--allow-local-endpoints=false"]).await;
    let reported = f
        .reports(
            "Ingress",
            "demo",
            "web",
            &format!("endpoint 127.0.0.2:{port} left out"),
            Duration::from_secs(10),
        )
        .await;
    assert!(reported, "{:?}", f.resource("Ingress", "demo", "web").await);
    assert_eq!(f.get("ext.test", "/").await.0, 503);
}
