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

/// A sticky endpoint that refuses connections: the request is retried on another
/// endpoint (Lua balancer). A new session's cookie names the endpoint that answered;
/// an established one keeps its cookie unless `session-cookie-change-on-failure`.
#[tokio::test]
async fn affinity_cookie_follows_a_retry_away_from_a_dead_endpoint() {
    let echo = Echo::start("127.0.0.62").await;
    let port = echo.addr.port();
    // 127.0.0.63: listed and ready, but nothing listens there
    let eps = [("127.0.0.62", true), ("127.0.0.63", true)];
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &format!(
            "{}---\n{}",
            service_endpoints("demo", "keep", port, &eps),
            service_endpoints("demo", "move", port, &eps),
        ),
    );
    let sticky = |name: &str, extra: &[(&str, &str)]| {
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
    };
    m.write(
        "ing.yaml",
        &format!(
            "{}---\n{}",
            sticky("keep", &[]),
            sticky("move", &[("session-cookie-change-on-failure", "true")]),
        ),
    );
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
