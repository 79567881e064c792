//! The traffic annotations of ingress-nginx through real NGINX, as a client sees
//! them: redirects (status and `Location`).

use crate::support::*;

#[tokio::test]
async fn permanent_and_temporal_redirects_answer_with_their_code_and_url() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    let url = "https://new.example.com$request_uri";
    m.write(
        "perm.yaml",
        &demo_ingress("perm", "perm.test", &[("permanent-redirect", url)]),
    );
    m.write(
        "code.yaml",
        &demo_ingress(
            "code",
            "code.test",
            &[
                ("permanent-redirect", "https://new.example.com/"),
                ("permanent-redirect-code", "308"),
            ],
        ),
    );
    m.write(
        "temp.yaml",
        &demo_ingress(
            "temp",
            "temp.test",
            &[("temporal-redirect", "http://other.example:8080/x?a=1")],
        ),
    );
    m.write(
        "both.yaml",
        &demo_ingress(
            "both",
            "both.test",
            &[
                ("permanent-redirect", "https://perm.example/"),
                ("temporal-redirect", "https://temp.example/"),
                ("temporal-redirect-code", "307"),
            ],
        ),
    );
    // A header a client fills is no part of a redirect (CVE-2023-5044's class).
    m.write(
        "bad.yaml",
        &demo_ingress(
            "bad",
            "bad.test",
            &[("permanent-redirect", "https://x.example/$http_x")],
        ),
    );
    m.write("plain.yaml", &demo_ingress("plain", "plain.test", &[]));
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        location_of(&f, "perm.test", "/a/b?x=1").await,
        (301, "https://new.example.com/a/b?x=1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(
        location_of(&f, "code.test", "/a").await,
        (308, "https://new.example.com/".to_owned())
    );
    assert_eq!(
        location_of(&f, "temp.test", "/").await,
        (302, "http://other.example:8080/x?a=1".to_owned())
    );
    assert_eq!(
        location_of(&f, "both.test", "/").await,
        (307, "https://temp.example/".to_owned()),
        "the temporal redirect wins, as in ingress-nginx"
    );
    assert_eq!(location_of(&f, "plain.test", "/").await.0, 200);

    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("permanent-redirect") && message.contains("$http_x"),
        "names the annotation and the value: {bad}"
    );
    assert_eq!(location_of(&f, "bad.test", "/").await.0, 404);
    let perm = f.resource("Ingress", "demo", "perm").await.unwrap();
    assert_eq!(perm["state"], "applied", "{perm}");
}

#[tokio::test]
async fn app_root_redirects_only_a_request_for_the_root() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write(
        "app.yaml",
        &demo_ingress("app", "app.test", &[("app-root", "/app1")]),
    );
    m.write(
        "bad.yaml",
        &demo_ingress("bad", "bad.test", &[("app-root", "//evil.example")]),
    );
    let f = Ferrule::start(m.path(), &[]).await;

    assert_eq!(
        location_of(&f, "app.test", "/").await,
        (302, "http://app.test/app1".to_owned()),
        "{}",
        f.logs()
    );
    assert_eq!(location_of(&f, "app.test", "/app1").await.0, 200);
    assert_eq!(location_of(&f, "app.test", "/other").await.0, 200);
    let bad = f.resource("Ingress", "demo", "bad").await.unwrap();
    assert_eq!(bad["state"], "rejected", "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("app-root"),
        "{bad}"
    );
}
