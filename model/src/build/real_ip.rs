//! The real client address (ConfigMap `use-forwarded-headers`, `enable-real-ip`,
//! `forwarded-for-header`, `proxy-real-ip-cidr`, `use-proxy-protocol`,
//! `forwarded-for-proxy-protocol-header`, `compute-full-forwarded-for`): which address allow and deny lists see and the
//! backend receives. Allowlists are worthless without it behind a load balancer,
//! and dangerous with a wrong one: a client address is taken from a header or a
//! PROXY protocol line only when the connection comes from a trusted proxy.
//!
//! Difference from ingress-nginx, on purpose: ingress-nginx trusts every peer
//! (`proxy-real-ip-cidr` defaults to `0.0.0.0/0`), so any client that can reach the
//! listeners chooses its own address and walks through every allowlist. Ferrule
//! trusts no peer until `proxy-real-ip-cidr` names the proxies, and says so.

use serde::{Deserialize, Serialize};

use crate::annotations::{Cidr, source_ranges, value};
use crate::model::{Problem, ProblemKind, ResourceRef, Severity};

/// Where the client address comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ClientAddress {
    /// The listeners expect a PROXY protocol header (`use-proxy-protocol`).
    pub proxy_protocol: bool,
    /// `real_ip_header`: a request header (`forwarded-for-header`) or
    /// `proxy_protocol`; `None`: the connection's address.
    pub real_ip_header: Option<String>,
    /// The proxies whose header or PROXY line is believed (`proxy-real-ip-cidr`).
    pub trusted: Vec<Cidr>,
    /// `X-Forwarded-For` to the backend keeps the incoming list and appends the
    /// client (`compute-full-forwarded-for`), instead of the client alone.
    pub full_forwarded_for: bool,
    /// `use-forwarded-headers`: a trusted proxy's `X-Forwarded-Proto`, `-Host` and
    /// `-Port` are the request's (the ssl-redirect sees the client's scheme, so a
    /// load balancer that ends TLS causes no redirect loop) and pass to the backend.
    pub forwarded_headers: bool,
    /// `use-proxy-protocol` with `use-forwarded-headers` (an HTTP proxy, then a TCP
    /// load balancer in front): behind a trusted PROXY line, the client is the one
    /// the request's forwarded-for header names; behind any other, the PROXY line's.
    /// `real_ip_header` is then this header, which NGINX sets before the realip
    /// module reads it (Ferrule's C module; ingress-nginx's way let a client choose
    /// it). `None` otherwise.
    pub behind_proxy_protocol: Option<ProxyProtocolForwarded>,
}

/// See [`ClientAddress::behind_proxy_protocol`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProxyProtocolForwarded {
    /// The header set for the realip module (`forwarded-for-proxy-protocol-header`).
    pub header: String,
    /// `forwarded-for-header` as an NGINX variable (`$http_x_forwarded_for`).
    pub forwarded_for: String,
}

/// ingress-nginx's `forwarded-for-proxy-protocol-header`.
const PROXY_PROTOCOL_HEADER: &str = "X-Forwarded-For-Proxy-Protocol";

/// A header name NGINX can read as a variable and Ferrule's module can set:
/// letters, digits and dashes.
fn plain_header(v: &str) -> Result<String, String> {
    let h = value::token(v)?;
    if h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        Ok(h)
    } else {
        Err("letters, digits and dashes only".to_owned())
    }
}

/// The keys this file reads, for the ConfigMap reader's dispatch.
pub(crate) const KEYS: &[&str] = &[
    "use-forwarded-headers",
    "enable-real-ip",
    "forwarded-for-header",
    "proxy-real-ip-cidr",
    "use-proxy-protocol",
    "forwarded-for-proxy-protocol-header",
    "compute-full-forwarded-for",
];

/// Reads the family's keys of the ConfigMap `r` (`get` looks a key up).
pub(crate) fn read<'a>(
    r: &ResourceRef,
    get: impl Fn(&str) -> Option<&'a str>,
    problems: &mut Vec<Problem>,
) -> ClientAddress {
    // (key, value, reason) of each invalid value
    let mut invalid: Vec<(&str, &str, String)> = Vec::new();
    let mut flag = |key: &'static str| match get(key) {
        None => false,
        Some(v) => value::boolean(v.trim()).unwrap_or_else(|e| {
            invalid.push((key, v, e));
            false
        }),
    };
    let forwarded_headers = flag("use-forwarded-headers");
    let forwarded = forwarded_headers | flag("enable-real-ip");
    let proxy_protocol = flag("use-proxy-protocol");
    let full_forwarded_for = flag("compute-full-forwarded-for");
    let mut header = "X-Forwarded-For".to_owned();
    if let Some(v) = get("forwarded-for-header") {
        match value::token(v.trim()) {
            Ok(h) => header = h,
            Err(e) => invalid.push(("forwarded-for-header", v, e)),
        }
    }
    let mut pp_header = PROXY_PROTOCOL_HEADER.to_owned();
    if let Some(v) = get("forwarded-for-proxy-protocol-header") {
        match plain_header(v.trim()) {
            Ok(h) => pp_header = h,
            Err(e) => invalid.push(("forwarded-for-proxy-protocol-header", v, e)),
        }
    }
    let behind_proxy_protocol = (proxy_protocol && forwarded_headers).then(|| {
        // its variable: a header of other token characters has none
        let forwarded_for = plain_header(&header).unwrap_or_else(|e| {
            invalid.push((
                "forwarded-for-header",
                get("forwarded-for-header").unwrap_or(""),
                { format!("{e} with use-proxy-protocol and use-forwarded-headers") },
            ));
            "X-Forwarded-For".to_owned()
        });
        ProxyProtocolForwarded {
            header: pp_header,
            forwarded_for: format!(
                "$http_{}",
                forwarded_for.to_ascii_lowercase().replace('-', "_")
            ),
        }
    });
    let mut trusted = Vec::new();
    if let Some(v) = get("proxy-real-ip-cidr") {
        match source_ranges::cidr_list(v) {
            Ok(l) => trusted = l,
            Err(e) => invalid.push(("proxy-real-ip-cidr", v, e)),
        }
    }
    for (key, v, reason) in invalid {
        problems.push(Problem {
            resource: r.clone(),
            severity: Severity::Error,
            message: format!("key {key}: invalid value {v:?}: {reason}; using the default"),
            kind: ProblemKind::Invalid,
        });
    }
    let real_ip_header = if let Some(b) = &behind_proxy_protocol {
        Some(b.header.clone())
    } else if proxy_protocol {
        Some("proxy_protocol".to_owned())
    } else {
        forwarded.then_some(header)
    };
    if real_ip_header.is_some() && trusted.is_empty() {
        problems.push(Problem {
            resource: r.clone(),
            severity: Severity::Warning,
            message: "proxy-real-ip-cidr names no proxy: no peer is trusted, and every \
                      client address is the connection's (ingress-nginx would trust every \
                      peer, letting any client choose its address); set it to the addresses \
                      of your load balancers"
                .to_owned(),
            kind: ProblemKind::Other,
        });
    }
    ClientAddress {
        proxy_protocol,
        real_ip_header,
        trusted,
        full_forwarded_for,
        forwarded_headers,
        behind_proxy_protocol,
    }
}
