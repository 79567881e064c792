//! Smoke test of the data path: Ferrule serves an Ingress through real NGINX.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn serves_an_ingress_and_follows_file_changes() {
    let a = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[a.addr]));
    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &[("/", "Prefix", "echo")],
            &[],
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(f.backend("web.test", "/x").await, (200, a.addr.to_string()));
    assert_eq!(f.get("unknown.test", "/").await.0, 404);

    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "web",
            "2026-01-01T00:00:00Z",
            "web.test",
            &[("/api", "Prefix", "echo")],
            &[],
        ),
    );
    let moved = wait_until(Duration::from_secs(5), || async {
        f.get("web.test", "/x").await.0 == 404
    })
    .await;
    assert!(moved, "path change applied; log:\n{}", f.logs());
    assert_eq!(
        f.backend("web.test", "/api/v1").await,
        (200, a.addr.to_string())
    );
}
