//! Issue 17, "no tenant can hurt another": what one namespace's objects can do to the
//! others' traffic, readiness and privacy, through the real NGINX.

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";

/// Regex paths are compiled by PCRE, which backtracks: a path that the model accepts
/// must not let a crafted URI hold a worker that serves every tenant. The worst the
/// model accepts, on URIs made to make them backtrack, costs the workers little more
/// than a plain path (CPU time of the workers, compared in the same run); the
/// polynomial ones are refused and reported.
#[tokio::test]
async fn a_regex_path_cannot_hold_the_workers() {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("evil", "app", &[echo.addr]));
    m.write("good.yaml", &service("good", "app", &[echo.addr]));
    let alternatives = |n: usize| "(a|a)".repeat(n);
    m.write(
        "regex.yaml",
        &Ing::new("evil", "regex", T0)
            .nginx("use-regex", "true")
            .rule(
                "regex.test",
                &[
                    // refused: eight stars that take the same characters
                    ("/r/a*a*a*a*a*a*a*a*b", "ImplementationSpecific", "app"),
                    // at the bounds: one star that gives back, 16 ways around it;
                    // 2^18 ways without one
                    (
                        &format!("/w/.*{}c", alternatives(4)),
                        "ImplementationSpecific",
                        "app",
                    ),
                    (
                        &format!("/v/{}c", alternatives(18)),
                        "ImplementationSpecific",
                        "app",
                    ),
                ],
            )
            .yaml(),
    );
    m.write(
        "plain.yaml",
        &Ing::new("good", "plain", T0)
            .rule("plain.test", &[("/plain", "Prefix", "app")])
            .yaml(),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    let long = "a".repeat(7000);
    assert_eq!(f.get("plain.test", &format!("/plain/{long}")).await.0, 200);
    assert_eq!(f.get("regex.test", "/v/aaaaaaaaaaaaaaaaaac").await.0, 200);
    assert_eq!(f.get("regex.test", "/w/xaaaac").await.0, 200);

    // CPU time per request of the workers, `rounds` times each URI, fastest of 3.
    let cost = async |host: &str, uris: &[String], rounds: usize| {
        let mut best = u64::MAX;
        for _ in 0..3 {
            let before = f.workers_cpu_ns();
            for _ in 0..rounds {
                for u in uris {
                    f.get(host, u).await;
                }
            }
            best = best.min(f.workers_cpu_ns() - before);
        }
        best / (rounds * uris.len()) as u64
    };
    let crafted = [
        format!("/r/{}cb", &long[..100]),
        format!("/w/{long}xc"),
        format!("/v/{}xc", &long[..18]),
    ];
    let plain = cost("plain.test", &[format!("/plain/{long}xc")], 30).await;
    let hostile = cost("regex.test", &crafted, 10).await;
    assert!(
        hostile < 20 * plain.max(1),
        "a crafted request costs the workers {hostile} ns, a plain one {plain} ns"
    );

    let r = f.resource("Ingress", "evil", "regex").await.unwrap();
    assert_eq!(r["state"], "rejected", "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.contains("path \"/r/a*a*a*a*a*a*a*a*b\"") && msg.contains("steps"),
        "{msg}"
    );
    assert!(!msg.contains("/w/") && !msg.contains("/v/"), "{msg}");
}
