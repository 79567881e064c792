//! Addresses a snippet names: where it proxies to, and the port it listens on.
//!
//! A proxied address must not be Ferrule's own host: not a unix socket (the
//! balancer's), not loopback (the status port, the webhook), not link-local (cloud
//! metadata), not unspecified; the same rule as endpoints
//! (`build::backends::is_local`). A variable in the address is refused: it could
//! hold any of those at request time. A name is refused when it is one of the local
//! host's (`localhost`…) or a number in disguise (`127.1`, `2130706433`,
//! `0x7f000001`: the C library reads them as 127.0.0.1). Other names are resolved by
//! NGINX when it loads the configuration, which the model cannot see; that residue
//! is for the network policy to close (`docs/annotations.md`).

use std::net::IpAddr;

use crate::build::backends::is_local;

/// Names the local host and cloud metadata services answer to.
const LOCAL_NAMES: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Checks a `proxy_pass`-like address: `scheme://host[:port]/…`, `host[:port]`, or
/// an upstream's name.
pub(super) fn check(address: &str) -> Result<(), String> {
    let rest = match address.split_once("://") {
        Some((scheme, rest)) if !scheme.contains('$') => rest,
        Some(_) => return Err("a variable in the address could name any host".to_owned()),
        None => address,
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('$') {
        return Err("a variable in the address could name any host".to_owned());
    }
    if authority.to_ascii_lowercase().starts_with("unix:") || address.starts_with("unix:") {
        return Err("a unix socket is Ferrule's own".to_owned());
    }
    host_allowed(host_of(authority))
}

/// Checks the address of a stream `listen`: not a unix socket, not a port of
/// Ferrule's.
pub(super) fn check_listen(address: &str, reserved: &[u16]) -> Result<(), String> {
    if address.to_ascii_lowercase().starts_with("unix:") {
        return Err("a snippet may not listen on a unix socket".to_owned());
    }
    let port = match address.rsplit_once(':') {
        Some((_, port)) if !address.ends_with(']') => port,
        _ => address,
    };
    match port.parse::<u16>() {
        Ok(p) if reserved.contains(&p) => Err(format!("port {p} is Ferrule's own")),
        Ok(_) => Ok(()),
        Err(_) => Err("the port is not a number".to_owned()),
    }
}

/// The host of `host`, `host:port`, `[v6]`, `[v6]:port`.
fn host_of(authority: &str) -> &str {
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn host_allowed(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host".to_owned());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if is_local(ip) {
            return Err(format!(
                "{ip} is loopback, link-local or unspecified: Ferrule's own host"
            ));
        }
        return Ok(());
    }
    let lower = host.trim_end_matches('.').to_ascii_lowercase();
    if LOCAL_NAMES.contains(&lower.as_str()) || lower.ends_with(".localhost") {
        return Err(format!("{host} names the local host"));
    }
    // What inet_aton would take for an address: one to four numbers, decimal,
    // octal (a leading 0) or hexadecimal (0x).
    let number = |label: &str| match label.strip_prefix("0x") {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()),
    };
    let numeric = lower.split('.').count() <= 4 && lower.split('.').all(number);
    if numeric {
        return Err(format!(
            "{host} reads as an address but is not one written in full"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for ok in [
            "http://echo.demo.svc.cluster.local",
            "http://10.0.0.7:8080/path",
            "https://api.example.com/$request_uri",
            "grpc://[2001:db8::1]:50051",
            "upstream_balancer",
            "http://upstream_balancer",
            "backend.example:9000",
            "http://deadbeef.example",
            "http://db:5432",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:10254/status/resources",
            "http://[::1]:10254",
            "http://[::ffff:127.0.0.1]",
            "http://169.254.169.254/latest/meta-data",
            "http://0.0.0.0:80",
            "http://localhost:10254",
            "http://LOCALHOST.:10254",
            "http://a.localhost",
            "http://metadata.google.internal/",
            "http://127.1:10254",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://$host/",
            "$scheme://x",
            "http://unix:/var/lib/ferrule/balancer.sock:/",
            "unix:/tmp/x.sock",
            "http://user@127.0.0.1/",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_ports() {
        let reserved = [80, 443, 10254];
        assert_eq!(check_listen("9000", &reserved), Ok(()));
        assert_eq!(check_listen("[::]:9000", &reserved), Ok(()));
        assert!(check_listen("10254", &reserved).is_err());
        assert!(check_listen("0.0.0.0:443", &reserved).is_err());
        assert!(check_listen("[::]:80", &reserved).is_err());
        assert!(check_listen("unix:/tmp/s", &reserved).is_err());
        assert!(check_listen("[::]", &reserved).is_err());
    }
}
