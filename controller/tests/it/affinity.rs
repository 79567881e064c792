//! The affinity cookie's attributes end to end, with both balancers: what
//! ingress-nginx sets (`Secure` on HTTPS requests unless `session-cookie-secure`
//! says otherwise) and what the `session-cookie-*` annotations add.

use crate::support::*;

const CREATED: &str = "2026-01-01T00:00:00Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_cookie_attributes_follow_the_annotations_and_the_scheme() {
    cookie_attributes("127.0.0.60", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_affinity_cookie_attributes_follow_the_annotations_and_the_scheme() {
    cookie_attributes("127.0.0.61", &["--balancer", "njs"]).await;
}

/// The `Set-Cookie` header curl saw for `host` over HTTPS (or HTTP with `http`),
/// sending `User-Agent: ua` when there is one.
async fn set_cookie_of(f: &Ferrule, host: &str, http: bool, ua: Option<&str>) -> String {
    let ua = ua.map(|ua| format!("User-Agent: {ua}"));
    let ua: Vec<&str> = ua.iter().flat_map(|h| ["-H", h.as_str()]).collect();
    let out = if http {
        let out = tokio::process::Command::new("curl")
            .args(["-s", "-D", "-", "-o", "/dev/null", "-H"])
            .arg(format!("Host: {host}"))
            .args(&ua)
            .arg(format!("http://127.0.0.1:{}/", f.http))
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        let args = [&["-D", "-", "-o", "/dev/null"][..], &ua].concat();
        curl_tls(f, host, "/", &args).await
    };
    out.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie: ")
                .then(|| &l["set-cookie: ".len()..])
        })
        .unwrap_or_else(|| panic!("no Set-Cookie from {host} (http: {http}):\n{out}"))
        .trim()
        .to_owned()
}

async fn cookie_attributes(ip: &str, args: &[&str]) {
    let echo = Echo::start(ip).await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(
        certs.path(),
        "c",
        &["plain.test", "tuned.test", "cross.test"],
    );
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}---\n{}---\n{}",
            // balancing settings are per Service: one each
            service("demo", "plain", &[echo.addr]),
            service("demo", "tuned", &[echo.addr]),
            service("demo", "cross", &[echo.addr]),
            tls_secret("demo", "tls", &cert, &key)
        ),
    );
    let affinity = |name: &str, host: &str, extra: &[(&str, &str)]| {
        let mut a = vec![
            ("affinity", "cookie"),
            ("session-cookie-name", "route"),
            ("ssl-redirect", "false"),
        ];
        a.extend_from_slice(extra);
        with_tls(
            &ingress("demo", name, CREATED, host, &[("/", "Prefix", name)], &a),
            &[host],
            "tls",
        )
    };
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}---\n{}",
            affinity("plain", "plain.test", &[]),
            affinity(
                "cross",
                "cross.test",
                &[
                    ("session-cookie-samesite", "None"),
                    ("session-cookie-conditional-samesite-none", "true"),
                ],
            ),
            affinity(
                "tuned",
                "tuned.test",
                &[
                    ("session-cookie-secure", "false"),
                    ("session-cookie-samesite", "Lax"),
                    ("session-cookie-domain", ".tuned.test"),
                    ("session-cookie-expires", "3600"),
                    ("session-cookie-max-age", "60"),
                ],
            )
        ),
    );
    let f = Ferrule::start(m.path(), args).await;
    wait_until(std::time::Duration::from_secs(10), || async {
        https_get(&f, "tuned.test", "/").await["backend"] == echo.addr.to_string()
    })
    .await;

    // Secure over HTTPS, not over HTTP, when the annotation is not set.
    let https = set_cookie_of(&f, "plain.test", false, None).await;
    assert!(
        https.ends_with("; Path=/; Secure; HttpOnly"),
        "HTTPS: {https}"
    );
    let http = set_cookie_of(&f, "plain.test", true, None).await;
    assert!(http.ends_with("; Path=/; HttpOnly"), "HTTP: {http}");

    // The annotations, in the order ingress-nginx writes them; Expires is an hour on.
    let tuned = set_cookie_of(&f, "tuned.test", false, None).await;
    let (_, attrs) = tuned.split_once("; ").unwrap();
    let (expires, rest) = attrs
        .strip_prefix("Path=/; Domain=.tuned.test; Expires=")
        .and_then(|a| a.split_once("; "))
        .unwrap_or_else(|| panic!("attributes: {tuned}"));
    assert_eq!(rest, "Max-Age=60; HttpOnly; SameSite=Lax", "{tuned}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        (now + 3590..=now + 3610).any(|t| cookie_time(t) == expires),
        "Expires {expires} is not an hour on (now {})",
        cookie_time(now)
    );

    // SameSite=None, left out for the browsers that would drop the cookie with it.
    for (browser, ua, none) in [
        (
            "Chrome 120",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            true,
        ),
        (
            "Chrome 66",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/66.0.3359.181 Safari/537.36",
            false,
        ),
        (
            "iOS 12",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 12_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.0 Mobile/15E148 Safari/604.1",
            false,
        ),
    ] {
        let cookie = set_cookie_of(&f, "cross.test", false, Some(ua)).await;
        let want = if none {
            "; Path=/; Secure; HttpOnly; SameSite=None"
        } else {
            "; Path=/; Secure; HttpOnly"
        };
        assert!(cookie.ends_with(want), "{browser}: {cookie}");
    }
}

/// An Ingress `demo/NAME` for host `NAME.test`, to the Service `NAME`, with cookie
/// affinity (cookie `route`) and the `extra` annotations.
fn sticky_ingress(name: &str, extra: &[(&str, &str)]) -> String {
    let mut a = vec![("affinity", "cookie"), ("session-cookie-name", "route")];
    a.extend_from_slice(extra);
    ingress(
        "demo",
        name,
        CREATED,
        &format!("{name}.test"),
        &[("/", "Prefix", name)],
        &a,
    )
}

/// NGINX's cookie date for `t` seconds since the epoch ("Mon, 10-Sep-01 01:46:40
/// GMT", two-digit years until 2037).
fn cookie_time(t: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, secs) = ((t / 86400) as i64, t % 86400);
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let year = if year > 2037 {
        year.to_string()
    } else {
        format!("{:02}", year % 100)
    };
    format!(
        "{}, {day:02}-{}-{year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[test]
fn cookie_time_matches_nginx() {
    assert_eq!(cookie_time(1_000_086_400), "Mon, 10-Sep-01 01:46:40 GMT");
    assert_eq!(cookie_time(2_200_000_001), "Sun, 18-Sep-2039 23:06:41 GMT");
}

/// md5 hex of `s`, as the balancer names an endpoint in its cookie.
fn md5_hex(s: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("md5sum");
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..32].to_owned()
}

/// A request to `host` with the cookie `route=value` when there is one: the endpoint
/// that answered (200 asserted) and the value of the `route` cookie it set, if any.
async fn with_route(
    c: &reqwest::Client,
    f: &Ferrule,
    host: &str,
    value: Option<String>,
) -> (String, Option<String>) {
    let cookie = value.map(|v| format!("route={v}"));
    let h: Vec<(&str, &str)> = cookie.iter().map(|v| ("Cookie", v.as_str())).collect();
    let (s, b, h) = crate::dynamic::hit(c, f, host, "/", &h).await;
    assert_eq!(s, 200, "{host}");
    let set = crate::dynamic::set_cookie(&h, "route").map(|v| v["route=".len()..].to_owned());
    (b, set)
}

/// An echo on `ips[0]` and, on `ips[1]`, an endpoint listed and ready where nothing
/// listens, behind two Services `{prefix}keep` and `{prefix}move` with sticky Ingresses
/// carrying `extra` (`move` also `session-cookie-change-on-failure`).
async fn sticky_beside_a_dead_endpoint(
    ips: [&str; 2],
    prefix: &str,
    extra: &[(&str, &str)],
) -> (Echo, Manifests) {
    let echo = Echo::start(ips[0]).await;
    let eps = [(ips[0], true), (ips[1], true)];
    let (keep, moving) = (format!("{prefix}keep"), format!("{prefix}move"));
    let port = echo.addr.port();
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}",
            service_endpoints("demo", &keep, port, &eps),
            service_endpoints("demo", &moving, port, &eps),
        ),
    );
    let change = [extra, &[("session-cookie-change-on-failure", "true")]].concat();
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            sticky_ingress(&keep, extra),
            sticky_ingress(&moving, &change),
        ),
    );
    (echo, m)
}

/// A sticky endpoint that refuses connections: the request is retried on another
/// endpoint (Lua balancer). A new session's cookie names the endpoint that answered;
/// an established one keeps its cookie unless `session-cookie-change-on-failure`.
#[tokio::test]
async fn affinity_cookie_follows_a_retry_away_from_a_dead_endpoint() {
    // persistent: the cookie names the endpoint
    let mode = [("affinity-mode", "persistent")];
    let (echo, m) = sticky_beside_a_dead_endpoint(["127.0.0.62", "127.0.0.63"], "", &mode).await;
    let port = echo.addr.port();
    let f = Ferrule::start(m.path(), LUA_ONLY).await;
    wait_store(&f, "demo_move_80", |b| {
        endpoint_count(b) == 2 && b["affinity"]["change_on_failure"] == true
    })
    .await;
    let live = format!("route={}", md5_hex(&echo.addr.to_string()));
    let dead = format!("route={}", md5_hex(&format!("127.0.0.63:{port}")));
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let get = |host: &'static str, cookie: Option<String>| {
        let c = c.clone();
        let url = format!("http://127.0.0.1:{}/", f.http);
        async move {
            let mut req = c.get(url).header("Host", host);
            if let Some(cookie) = cookie {
                req = req.header("Cookie", cookie);
            }
            let r = req.send().await.expect("proxied request");
            let set = r
                .headers()
                .get("set-cookie")
                .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned());
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            (body["backend"].as_str().unwrap_or_default().to_owned(), set)
        }
    };
    let answered = echo.addr.to_string();

    // New sessions: about half pick the dead endpoint first; every one is answered by
    // the live endpoint and gets its cookie.
    for _ in 0..20 {
        let (b, set) = get("keep.test", None).await;
        assert_eq!(b, answered);
        assert_eq!(
            set.as_deref(),
            Some(live.as_str()),
            "a new session's cookie"
        );
    }
    // An established session on the dead endpoint: answered by the live one; its
    // cookie stays without change-on-failure, moves with it.
    let (b, set) = get("keep.test", Some(dead.clone())).await;
    assert_eq!((b.as_str(), set), (answered.as_str(), None));
    let (b, set) = get("move.test", Some(dead.clone())).await;
    assert_eq!(
        (b.as_str(), set.as_deref()),
        (answered.as_str(), Some(live.as_str()))
    );
    // and the moved session sticks without new cookies
    for _ in 0..5 {
        let (b, set) = get("move.test", Some(live.clone())).await;
        assert_eq!((b.as_str(), set), (answered.as_str(), None));
    }
}

/// The same with balanced affinity (the default): a balanced cookie holds a key,
/// not an endpoint, so a session whose key maps to the dead endpoint is retried on
/// the live one and, with `session-cookie-change-on-failure`, given a new key that
/// maps there; without it, the cookie stays.
#[tokio::test]
async fn balanced_affinity_cookie_follows_a_retry_away_from_a_dead_endpoint() {
    let (echo, m) = sticky_beside_a_dead_endpoint(["127.0.0.64", "127.0.0.65"], "b", &[]).await;
    let f = Ferrule::start(m.path(), LUA_ONLY).await;
    wait_store(&f, "demo_bmove_80", |b| {
        endpoint_count(b) == 2 && b["affinity"]["affinity_mode"] == "balanced"
    })
    .await;
    wait_store(&f, "demo_bkeep_80", |b| endpoint_count(b) == 2).await;
    let c = crate::dynamic::fresh_client();
    let answered = echo.addr.to_string();
    let get = |host: &'static str, value| with_route(&c, &f, host, value);

    // New sessions: about half of the keys map to the dead endpoint first; every
    // one is answered by the live endpoint, with a cookie that keeps it there.
    for _ in 0..10 {
        let (b, set) = get("bkeep.test", None).await;
        assert_eq!(b, answered);
        let set = set.expect("a new session's cookie");
        assert_eq!(get("bkeep.test", Some(set)).await, (answered.clone(), None));
    }
    // Established sessions (keys of our own, with each backend's tag): about half
    // map to the dead endpoint. All are answered; only with change-on-failure do
    // those get a new key, which then sticks.
    let key = |backend: &str, i: usize| {
        format!(
            "{:016x}.{}",
            0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1),
            &md5_hex(backend)[..8]
        )
    };
    let mut moved = 0;
    for i in 0..20 {
        let (b, set) = get("bkeep.test", Some(key("demo_bkeep_80", i))).await;
        assert_eq!((b.as_str(), set), (answered.as_str(), None), "kept cookie");
        let (b, set) = get("bmove.test", Some(key("demo_bmove_80", i))).await;
        assert_eq!(b, answered);
        if let Some(new) = set {
            moved += 1;
            assert_ne!(new, key("demo_bmove_80", i));
            for _ in 0..3 {
                assert_eq!(
                    get("bmove.test", Some(new.clone())).await,
                    (answered.clone(), None)
                );
            }
        }
    }
    assert!(
        (1..20).contains(&moved),
        "{moved} of 20 sessions were on the dead endpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_modes_when_endpoints_are_added_and_removed() {
    affinity_modes(
        ["127.0.0.80", "127.0.0.81", "127.0.0.82", "127.0.0.83"],
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_affinity_modes_when_endpoints_are_added_and_removed() {
    affinity_modes(
        ["127.0.0.84", "127.0.0.85", "127.0.0.86", "127.0.0.87"],
        &["--balancer", "njs"],
    )
    .await;
}

/// `affinity-mode`, observed: sessions made on 2 endpoints, then 2 more added, then
/// one of the first removed. Persistent sessions stay put until their endpoint goes
/// (then a new cookie); balanced ones (the default) partly move to the new
/// endpoints, and off the removed one, with the cookies they have.
async fn affinity_modes(ips: [&str; 4], args: &[&str]) {
    let echos = echo_group(&ips).await;
    let port = echos[0].addr.port();
    let addr = |ip: &str| format!("{ip}:{port}");
    let m = Manifests::new();
    let services = |up: &[&str]| {
        let eps: Vec<(&str, bool)> = up.iter().map(|ip| (*ip, true)).collect();
        format!(
            "{}---\n{}",
            service_endpoints("demo", "bal", port, &eps),
            service_endpoints("demo", "per", port, &eps)
        )
    };
    m.write("svc.yaml", &services(&ips[..2]));
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            // no affinity-mode: ingress-nginx's default, balanced
            sticky_ingress("bal", &[]),
            sticky_ingress("per", &[("affinity-mode", "persistent")]),
        ),
    );
    let f = Ferrule::start(m.path(), args).await;
    let settled = |n: usize| {
        let f = &f;
        async move {
            wait_store(f, "demo_bal_80", |b| {
                endpoint_count(b) == n && b["affinity"]["affinity_mode"] == "balanced"
            })
            .await;
            wait_store(f, "demo_per_80", |b| {
                endpoint_count(b) == n && b["affinity"]["affinity_mode"] == "persistent"
            })
            .await;
        }
    };
    settled(2).await;
    let c = crate::dynamic::fresh_client();
    let get = |host: &'static str, value| with_route(&c, &f, host, value);
    const N: usize = 40;
    // sessions[host] = [(cookie value, endpoint)]
    let mut sessions = Vec::new();
    for host in ["bal.test", "per.test"] {
        let mut s = Vec::new();
        for _ in 0..N {
            let (ep, set) = get(host, None).await;
            let value = set.unwrap_or_else(|| panic!("{host}: a new session's cookie"));
            assert_eq!(
                get(host, Some(value.clone())).await,
                (ep.clone(), None),
                "{host} sticks"
            );
            s.push((value, ep));
        }
        let on_first = s.iter().filter(|(_, ep)| *ep == addr(ips[0])).count();
        assert!(
            on_first > 0 && on_first < N,
            "{host}: sessions spread: {on_first} of {N} on one"
        );
        sessions.push((host, s));
    }

    // Scale from 2 to 4 endpoints.
    m.write("svc.yaml", &services(&ips));
    settled(4).await;
    for (host, s) in &mut sessions {
        let mut moved = 0;
        for (value, ep) in s.iter_mut() {
            let (now, set) = get(host, Some(value.clone())).await;
            assert_eq!(set, None, "{host}: the cookie stays valid");
            if now != *ep {
                moved += 1;
                assert!(
                    now == addr(ips[2]) || now == addr(ips[3]),
                    "{host}: a session moved from {ep} to {now}, not to a new endpoint"
                );
                *ep = now;
            }
            // and it sticks where it is now
            assert_eq!(get(host, Some(value.clone())).await, (ep.clone(), None));
        }
        if *host == "per.test" {
            assert_eq!(moved, 0, "persistent sessions stay on their endpoint");
        } else {
            // half of them in theory (2 of 4 endpoints are new)
            assert!(
                moved > 0 && moved < N,
                "balanced: {moved} of {N} sessions moved"
            );
        }
    }

    // Remove the first endpoint: its sessions move (a persistent one with a new
    // cookie, a balanced one with its own), every other one stays.
    m.write("svc.yaml", &services(&ips[1..]));
    settled(3).await;
    for (host, s) in &sessions {
        let gone = addr(ips[0]);
        let mut left = 0;
        for (value, ep) in s {
            let (now, set) = get(host, Some(value.clone())).await;
            if *ep == gone {
                left += 1;
                assert_ne!(now, gone, "{host}: off the removed endpoint");
                let again = match (*host, set) {
                    ("per.test", Some(new)) => new,
                    ("per.test", None) => panic!("per.test: a new cookie for a new session"),
                    (_, Some(new)) => panic!("{host}: a new cookie {new}: the old key still maps"),
                    (_, None) => value.clone(),
                };
                assert_eq!(
                    get(host, Some(again)).await,
                    (now.clone(), None),
                    "{host} sticks"
                );
            } else {
                assert_eq!((&now, set), (ep, None), "{host}: stays");
            }
        }
        assert!(left > 0, "{host}: no session was on the removed endpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hash_by_subset_spreads_a_key_over_its_subset() {
    hash_subset(
        [
            "127.0.0.88",
            "127.0.0.89",
            "127.0.0.90",
            "127.0.0.91",
            "127.0.0.92",
        ],
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_upstream_hash_by_subset_spreads_a_key_over_its_subset() {
    hash_subset(
        [
            "127.0.0.93",
            "127.0.0.94",
            "127.0.0.95",
            "127.0.0.96",
            "127.0.0.97",
        ],
        &["--balancer", "njs"],
    )
    .await;
}

/// `upstream-hash-by-subset`: the requests of one key go to exactly `size`
/// endpoints (3 by default), different keys to different subsets.
async fn hash_subset(ips: [&str; 5], args: &[&str]) {
    let echos = echo_group(&ips).await;
    let port = echos[0].addr.port();
    let eps: Vec<(&str, bool)> = ips.iter().map(|ip| (*ip, true)).collect();
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}",
            service_endpoints("demo", "three", port, &eps),
            service_endpoints("demo", "two", port, &eps)
        ),
    );
    let hashed = |name: &str, extra: &[(&str, &str)]| {
        let mut a = vec![
            ("upstream-hash-by", "$arg_user"),
            ("upstream-hash-by-subset", "true"),
        ];
        a.extend_from_slice(extra);
        ingress(
            "demo",
            name,
            CREATED,
            &format!("{name}.test"),
            &[("/", "Prefix", name)],
            &a,
        )
    };
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            hashed("three", &[]),
            hashed("two", &[("upstream-hash-by-subset-size", "2")]),
        ),
    );
    let f = Ferrule::start(m.path(), args).await;
    wait_store(&f, "demo_three_80", |b| {
        endpoint_count(b) == 5 && b["upstream_hash_by_subset_size"] == 3
    })
    .await;
    wait_store(&f, "demo_two_80", |b| {
        endpoint_count(b) == 5 && b["upstream_hash_by_subset_size"] == 2
    })
    .await;
    let c = crate::dynamic::fresh_client();
    for (host, size) in [("three.test", 3), ("two.test", 2)] {
        let mut union = std::collections::BTreeSet::new();
        for user in 0..8 {
            let mut seen = std::collections::BTreeSet::new();
            // 40 requests: a member of the subset is missed with odds (1 - 1/3)^40
            for _ in 0..40 {
                let (s, b, _) =
                    crate::dynamic::hit(&c, &f, host, &format!("/?user=u{user}"), &[]).await;
                assert_eq!(s, 200);
                seen.insert(b);
            }
            assert_eq!(seen.len(), size, "{host} user u{user}: {seen:?}");
            union.extend(seen);
        }
        assert!(
            union.len() > size,
            "{host}: keys share one subset: {union:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cookie_is_set_only_where_an_ingress_asked_for_it() {
    cookie_only_where_asked(["127.0.0.62", "127.0.0.63"], LUA_ONLY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn njs_the_cookie_is_set_only_where_an_ingress_asked_for_it() {
    cookie_only_where_asked(["127.0.0.64", "127.0.0.65"], &["--balancer", "njs"]).await;
}

/// Two Ingresses on one host route to one Service: `/sticky` asks for affinity,
/// `/plain` does not. As in ingress-nginx, only `/sticky` sets the cookie; a
/// request to `/plain` that brings it still follows it. When `/plain` asks too,
/// its locations set the cookie, without a reload.
async fn cookie_only_where_asked(ips: [&str; 2], args: &[&str]) {
    let echos = echo_group(&ips).await;
    let port = echos[0].addr.port();
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service_endpoints("demo", "shared", port, &[(ips[0], true), (ips[1], true)]),
    );
    let sticky = [("affinity", "cookie"), ("session-cookie-name", "route")];
    let ing = |name: &str, created: &str, annotations: &[(&str, &str)]| {
        let path = format!("/{name}");
        ingress(
            "demo",
            name,
            created,
            "shared.test",
            &[(path.as_str(), "Prefix", "shared")],
            annotations,
        )
    };
    m.write("sticky.yaml", &ing("sticky", CREATED, &sticky));
    m.write("plain.yaml", &ing("plain", "2026-01-02T00:00:00Z", &[]));
    let f = Ferrule::start(m.path(), args).await;
    wait_store(&f, "demo_shared_80", |b| !b["affinity"].is_null()).await;
    let c = crate::dynamic::fresh_client();
    let hit = |path: &'static str, cookie: Option<String>| {
        let (c, f) = (&c, &f);
        async move {
            let h: Vec<(&str, String)> = cookie.into_iter().map(|v| ("Cookie", v)).collect();
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let (s, b, h) = crate::dynamic::hit(c, f, "shared.test", path, &h).await;
            assert_eq!(s, 200, "{path}");
            (b, crate::dynamic::set_cookie(&h, "route"))
        }
    };
    let (first, cookie) = hit("/sticky", None).await;
    let cookie = cookie.expect("/sticky asked for affinity: a cookie");
    for _ in 0..6 {
        assert_eq!(hit("/plain", None).await.1, None, "/plain did not ask");
    }
    for _ in 0..10 {
        let (b, set) = hit("/plain", Some(cookie.clone())).await;
        assert_eq!(
            (b.as_str(), set),
            (first.as_str(), None),
            "follows the cookie"
        );
    }
    let before = NoReload::capture(&f).await;
    m.write("plain.yaml", &ing("plain", "2026-01-02T00:00:00Z", &sticky));
    wait_store(&f, "demo_shared_80", |b| {
        b["affinity"]["ingresses"] == serde_json::json!(["demo/plain", "demo/sticky"])
    })
    .await;
    assert!(hit("/plain", None).await.1.is_some(), "/plain asks now");
    before.check(&f, "affinity for one more Ingress").await;
}
