//! Canaries end to end (issue 4): the split by weight, header and cookie, session
//! affinity on either side of the split (`affinity-canary-behavior`), and the canary
//! Ingress's own balancing annotations. No change here needs an NGINX reload.

use std::collections::{BTreeMap, BTreeSet};

use crate::dynamic::{CANARY_CREATED, CREATED, fresh_client, hit, set_cookie, spread};
use crate::support::*;

#[tokio::test]
async fn canary_by_weight_and_header_and_weight_change_without_reload() {
    let echos = echo_group(&["127.0.0.9", "127.0.0.10"]).await;
    let (primary, canary) = (echos[0].addr, echos[1].addr);
    let m = Manifests::new();
    for p in ["w", "h", "v", "p"] {
        m.write(
            &format!("svc-{p}.yaml"),
            &format!(
                "{}---\n{}",
                service("demo", &format!("{p}-main"), &[primary]),
                service("demo", &format!("{p}-canary"), &[canary])
            ),
        );
        m.write(
            &format!("ing-{p}.yaml"),
            &ingress(
                "demo",
                &format!("{p}-main"),
                CREATED,
                &format!("{p}.test"),
                &[("/", "Prefix", &format!("{p}-main"))],
                &[],
            ),
        );
    }
    let canary_ing = |p: &str, ann: &[(&str, &str)]| {
        let mut a = vec![("canary", "true")];
        a.extend_from_slice(ann);
        ingress(
            "demo",
            &format!("{p}-canary"),
            CANARY_CREATED,
            &format!("{p}.test"),
            &[("/", "Prefix", &format!("{p}-canary"))],
            &a,
        )
    };
    m.write(
        "canary-w.yaml",
        &canary_ing("w", &[("canary-weight", "20")]),
    );
    m.write(
        "canary-h.yaml",
        &canary_ing(
            "h",
            &[("canary-by-header", "X-Canary"), ("canary-weight", "50")],
        ),
    );
    m.write(
        "canary-v.yaml",
        &canary_ing(
            "v",
            &[
                ("canary-by-header", "X-Canary"),
                ("canary-by-header-value", "yes-please"),
            ],
        ),
    );
    m.write(
        "canary-p.yaml",
        &format!(
            "{}---\n{}",
            canary_ing(
                "p",
                &[
                    ("canary-by-header", "X-Canary"),
                    ("canary-by-header-pattern", "^(beta|alpha)-[0-9]+$"),
                ],
            ),
            // a pattern that can backtrack exponentially is refused, naming it
            ingress(
                "demo",
                "slow-canary",
                CANARY_CREATED,
                "w.test",
                &[("/", "Prefix", "p-canary")],
                &[
                    ("canary", "true"),
                    ("canary-by-header", "X-Slow"),
                    ("canary-by-header-pattern", "^(a|aa)+$"),
                ],
            )
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    for p in ["w", "h", "v", "p"] {
        let canary_backend = format!("demo_{p}-canary_80");
        wait_store(&f, &format!("demo_{p}-main_80"), |b| {
            b["canary"]["backend"] == canary_backend.as_str()
        })
        .await;
    }
    let before = NoReload::capture(&f).await;
    let (p, c) = (primary.to_string(), canary.to_string());
    let share = |counts: &BTreeMap<String, usize>, n: usize| {
        assert_eq!(
            counts.get(&p).unwrap_or(&0) + counts.get(&c).unwrap_or(&0),
            n,
            "every request answered by primary or canary: {counts:?}"
        );
        *counts.get(&c).unwrap_or(&0) as f64 / n as f64
    };

    // canary-weight 20: 20% ± 5 points over 2,000 requests.
    let counts = spread(&f, "w.test", "/", &[], 2000, 4).await;
    let w = share(&counts, 2000);
    assert!((0.15..=0.25).contains(&w), "canary share {w} for weight 20");
    eprintln!("canary weight 20: {:.1}% of 2000 requests", w * 100.0);

    // canary-by-header: `always` and `never` are exact, other values fall through
    // to the weight (50 here).
    let n = 100;
    let always = share(
        &spread(&f, "h.test", "/", &[("X-Canary", "always")], n, 2).await,
        n,
    );
    let never = share(
        &spread(&f, "h.test", "/", &[("X-Canary", "never")], n, 2).await,
        n,
    );
    let other = share(
        &spread(&f, "h.test", "/", &[("X-Canary", "maybe")], n, 2).await,
        n,
    );
    let absent = share(&spread(&f, "h.test", "/", &[], n, 2).await, n);
    assert_eq!((always, never), (1.0, 0.0), "X-Canary always / never");
    assert!(
        (0.25..=0.75).contains(&other),
        "other value uses the weight: {other}"
    );
    assert!(
        (0.25..=0.75).contains(&absent),
        "no header uses the weight: {absent}"
    );

    for (host, cases) in [
        // canary-by-header-value: only the exact value routes to the canary.
        (
            "v.test",
            [
                (Some("yes-please"), 1.0),
                (Some("Yes-Please"), 0.0),
                (Some("yes-please-not"), 0.0),
                (Some("always"), 0.0),
                (None, 0.0),
            ],
        ),
        // canary-by-header-pattern: a match routes to the canary; anything else
        // falls through to the weight (0 here), `always` included.
        (
            "p.test",
            [
                (Some("beta-7"), 1.0),
                (Some("alpha-12"), 1.0),
                (Some("beta"), 0.0),
                (Some("always"), 0.0),
                (None, 0.0),
            ],
        ),
    ] {
        for (value, want) in cases {
            let h: Vec<(&str, &str)> = value.map(|v| ("X-Canary", v)).into_iter().collect();
            let got = share(&spread(&f, host, "/", &h, 50, 2).await, 50);
            assert_eq!(got, want, "{host} X-Canary: {value:?}");
        }
    }
    let slow = f
        .resource("Ingress", "demo", "slow-canary")
        .await
        .expect("listed");
    assert_eq!(slow["state"], "rejected", "{slow}");
    let msg = slow["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("canary-by-header-pattern") && msg.contains("exponential"),
        "{msg}"
    );

    // Changing the weight is applied without reload.
    m.write(
        "canary-w.yaml",
        &canary_ing("w", &[("canary-weight", "80")]),
    );
    wait_store(&f, "demo_w-main_80", |b| b["canary"]["weight"] == 80).await;
    let counts = spread(&f, "w.test", "/", &[], 2000, 4).await;
    let w = share(&counts, 2000);
    assert!((0.75..=0.85).contains(&w), "canary share {w} for weight 80");
    eprintln!("canary weight 80: {:.1}% of 2000 requests", w * 100.0);

    // Removing the canary Ingress sends everything to the primary, still no reload.
    m.remove("canary-w.yaml");
    wait_store(&f, "demo_w-main_80", |b| b["canary"].is_null()).await;
    let w = share(&spread(&f, "w.test", "/", &[], 200, 2).await, 200);
    assert_eq!(w, 0.0, "no canary after the canary Ingress is deleted");
    before.check(&f, "canary changes").await;
}

/// With a canary, an affinity cookie keeps its request on the side it was set on
/// (ingress-nginx: an affinitized request keeps its balancer, before any canary rule);
/// the canary backend sets its cookie with the primary's affinity settings.
#[tokio::test]
async fn affinity_sticks_across_a_canary_split() {
    let echos = echo_group(&["127.0.0.30", "127.0.0.31", "127.0.0.32", "127.0.0.33"]).await;
    let port = echos[0].addr.port();
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}",
            service_endpoints(
                "demo",
                "main",
                port,
                &[("127.0.0.30", true), ("127.0.0.31", true)]
            ),
            service_endpoints(
                "demo",
                "next",
                port,
                &[("127.0.0.32", true), ("127.0.0.33", true)]
            ),
        ),
    );
    let affinity = [("affinity", "cookie"), ("session-cookie-name", "route")];
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            ingress(
                "demo",
                "main",
                CREATED,
                "split.test",
                &[("/", "Prefix", "main")],
                &affinity
            ),
            ingress(
                "demo",
                "next",
                CANARY_CREATED,
                "split.test",
                &[("/", "Prefix", "next")],
                &[("canary", "true"), ("canary-weight", "50")],
            ),
        ),
    );
    let f = Ferrule::start(m.path(), &[]).await;
    wait_store(&f, "demo_main_80", |b| {
        b["canary"]["backend"] == "demo_next_80"
    })
    .await;
    let c = fresh_client();
    let mut sides = BTreeSet::new();
    for session in 0..16 {
        let (s, first, h) = hit(&c, &f, "split.test", "/", &[]).await;
        assert_eq!(s, 200);
        let cookie = set_cookie(&h, "route")
            .unwrap_or_else(|| panic!("session {session}: a cookie from {first}"));
        sides.insert(
            ["127.0.0.32:", "127.0.0.33:"]
                .iter()
                .any(|p| first.starts_with(p)),
        );
        for _ in 0..10 {
            let (s, b, h) = hit(&c, &f, "split.test", "/", &[("Cookie", &cookie)]).await;
            assert_eq!(
                (s, b.as_str()),
                (200, first.as_str()),
                "session {session} sticks"
            );
            assert!(
                set_cookie(&h, "route").is_none(),
                "no new cookie while it sticks"
            );
        }
    }
    assert_eq!(sides.len(), 2, "sessions start on both sides of the split");
}

/// `affinity-canary-behavior: legacy`: the canary side uses the canary Ingress's own
/// affinity (or none), and its own `upstream-hash-by`; the default (`sticky`) gives
/// the canary side the primary's affinity. A cookie naming an endpoint of either side
/// keeps its request there, whatever the weight. All of it without a reload.
#[tokio::test]
async fn canary_ingress_own_affinity_and_hash_with_legacy_behavior() {
    canary_affinity_behaviors(
        ["127.0.0.50", "127.0.0.51", "127.0.0.52", "127.0.0.53"],
        &[],
    )
    .await;
}

/// The same with the njs balancer.
#[tokio::test]
async fn njs_canary_ingress_own_affinity_and_hash_with_legacy_behavior() {
    let ips = ["127.0.0.54", "127.0.0.55", "127.0.0.56", "127.0.0.57"];
    canary_affinity_behaviors(ips, &["--balancer", "njs"]).await;
}

async fn canary_affinity_behaviors(ips: [&str; 4], args: &[&str]) {
    let echos = echo_group(&ips).await;
    let port = echos[0].addr.port();
    let canary_eps = [format!("{}:", ips[2]), format!("{}:", ips[3])];
    let is_canary = |b: &str| canary_eps.iter().any(|p| b.starts_with(p.as_str()));
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}",
            service_endpoints("demo", "main", port, &[(ips[0], true), (ips[1], true)]),
            service_endpoints("demo", "next", port, &[(ips[2], true), (ips[3], true)]),
        ),
    );
    m.write(
        "ing.yaml",
        &ingress(
            "demo",
            "main",
            CREATED,
            "legacy.test",
            &[("/shop", "Prefix", "main")],
            &[("affinity", "cookie"), ("session-cookie-name", "route")],
        ),
    );
    let write_canary = |ann: &[(&str, &str)]| {
        let mut a = vec![("canary", "true")];
        a.extend_from_slice(ann);
        m.write(
            "canary.yaml",
            &ingress(
                "demo",
                "next",
                CANARY_CREATED,
                "legacy.test",
                &[("/shop", "Prefix", "next")],
                &a,
            ),
        );
    };
    write_canary(&[
        ("canary-weight", "50"),
        ("affinity-canary-behavior", "legacy"),
        ("affinity", "cookie"),
        ("session-cookie-name", "canary-route"),
    ]);
    let f = Ferrule::start(m.path(), args).await;
    wait_store(&f, "demo_main_80", |b| {
        b["canary"]["backend"] == "demo_next_80" && b["canary"]["legacy_affinity"] == true
    })
    .await;
    wait_store(&f, "demo_next_80", |b| {
        b["affinity"]["cookie_name"] == "canary-route"
    })
    .await;
    let before = NoReload::capture(&f).await;
    let c = fresh_client();

    // Each side sets its own cookie, and each cookie sticks.
    let mut primary_cookie = None;
    let mut sides = BTreeSet::new();
    for session in 0..16 {
        let (s, first, h) = hit(&c, &f, "legacy.test", "/shop", &[]).await;
        assert_eq!(s, 200);
        let (mine, other) = if is_canary(&first) {
            ("canary-route", "route")
        } else {
            ("route", "canary-route")
        };
        let cookie = set_cookie(&h, mine)
            .unwrap_or_else(|| panic!("session {session}: {first} sets {mine}: {h:?}"));
        assert_eq!(set_cookie(&h, other), None, "{first} sets only {mine}");
        // without session-cookie-path, the Path is the Ingress path (ingress-nginx)
        let raw = h.get("set-cookie").unwrap().to_str().unwrap();
        assert!(raw.contains("; Path=/shop;"), "cookie path: {raw}");
        sides.insert(is_canary(&first));
        if !is_canary(&first) {
            primary_cookie = Some((cookie.clone(), first.clone()));
        }
        for _ in 0..5 {
            let (s, b, h) = hit(&c, &f, "legacy.test", "/shop", &[("Cookie", &cookie)]).await;
            assert_eq!((s, b.as_str()), (200, first.as_str()), "{mine} sticks");
            assert_eq!(set_cookie(&h, mine), None, "no new cookie while it sticks");
        }
    }
    assert_eq!(sides.len(), 2, "sessions start on both sides of the split");
    let (primary_cookie, primary_ep) = primary_cookie.expect("a session on the primary");

    // The canary Ingress drops its affinity for its own upstream-hash-by and takes
    // every request: the same key reaches the same canary endpoint, no cookie is set
    // on the canary side, and a primary session still sticks to the primary.
    write_canary(&[
        ("canary-weight", "100"),
        ("affinity-canary-behavior", "legacy"),
        ("upstream-hash-by", "$arg_k"),
    ]);
    wait_store(&f, "demo_next_80", |b| {
        b["affinity"].is_null() && b["upstream_hash_by"] == "$arg_k"
    })
    .await;
    wait_store(&f, "demo_main_80", |b| b["canary"]["weight"] == 100).await;
    let mut reached = BTreeSet::new();
    for k in 0..20 {
        let path = format!("/shop?k={k}");
        let (s, first, h) = hit(&c, &f, "legacy.test", &path, &[]).await;
        assert_eq!(s, 200);
        assert!(
            is_canary(&first),
            "weight 100 sends k={k} to the canary, not {first}"
        );
        assert!(
            h.get("set-cookie").is_none(),
            "no cookie on the canary side: {h:?}"
        );
        for _ in 0..3 {
            let (_, b, _) = hit(&c, &f, "legacy.test", &path, &[]).await;
            assert_eq!(b, first, "k={k} always reaches the same canary endpoint");
        }
        reached.insert(first);
    }
    assert_eq!(reached.len(), 2, "keys spread over both canary endpoints");
    for _ in 0..10 {
        let (_, b, _) = hit(
            &c,
            &f,
            "legacy.test",
            "/shop",
            &[("Cookie", &primary_cookie)],
        )
        .await;
        assert_eq!(b, primary_ep, "a primary session stays on the primary");
    }

    // The default behavior (sticky): the canary side sets the primary's cookie.
    write_canary(&[("canary-weight", "100")]);
    wait_store(&f, "demo_main_80", |b| {
        b["canary"]["legacy_affinity"] == false
    })
    .await;
    let (s, first, h) = hit(&c, &f, "legacy.test", "/shop", &[]).await;
    assert_eq!(s, 200);
    assert!(is_canary(&first), "weight 100: {first}");
    let cookie = set_cookie(&h, "route").expect("the primary's cookie on the canary side");
    for _ in 0..10 {
        let (_, b, _) = hit(&c, &f, "legacy.test", "/shop", &[("Cookie", &cookie)]).await;
        assert_eq!(b, first, "the canary session sticks");
    }
    before.check(&f, "canary affinity changes").await;
}
