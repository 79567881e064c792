//! `allowlist-source-range` (old name `whitelist-source-range`) and
//! `denylist-source-range`: client address lists, answered with 403 by NGINX's
//! access phase (`allow`/`deny`), as in ingress-nginx. The ConfigMap's
//! `whitelist-source-range` and `denylist-source-range` are the defaults of the
//! locations whose Ingress sets none. The client address is the connection's,
//! unless the ConfigMap trusts a proxy in front (`build/real_ip.rs`).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk::*, Scope::*};
use super::{AnnotationError, IngressAnnotations, Reader};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "allow and deny lists",
    keys: &[
        security(
            "allowlist-source-range",
            "client CIDRs allowed; others get 403",
        ),
        security(
            "whitelist-source-range",
            "old name of allowlist-source-range (read when it is absent)",
        ),
        security("denylist-source-range", "client CIDRs refused with 403"),
    ],
};

const fn security(name: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        scope: Location,
        risk: Medium,
        security: true,
        supported: true,
        doc,
    }
}

/// An IPv4 or IPv6 network: its address with the host bits cleared, and the prefix
/// length. Displayed (and serialized) as NGINX's `allow`/`deny` take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    /// The network address.
    pub addr: IpAddr,
    /// The prefix length (0..=32 or 0..=128).
    pub prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Cidr::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `2001:db8::/32` or a bare address (a host network).
    pub fn parse(v: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match v.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (v, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{v:?} is not an IPv4 or IPv6 address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => Some(p)
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{v:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }
}

/// `addr` with the bits after `prefix` cleared (NGINX warns about set host bits).
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((bits & m).into())
        }
    }
}

/// A comma-separated list of CIDRs, at least one, sorted and without repeats.
pub fn cidr_list(v: &str) -> Result<Vec<Cidr>, String> {
    let mut out = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Cidr::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if out.is_empty() {
        return Err("expected a comma-separated list of CIDRs".to_owned());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The client address lists of a location. Empty lists restrict nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SourceRanges {
    /// Only these clients are served (`allow` each, then `deny all`).
    pub allow: Vec<Cidr>,
    /// These clients get 403 (`deny` each, before the allowlist).
    pub deny: Vec<Cidr>,
    /// Every client gets 403: the location relies on a ConfigMap list that is
    /// invalid (fail closed: without it the location would serve everyone).
    pub closed: bool,
}

impl SourceRanges {
    /// Whether the location restricts anything.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty() && !self.closed
    }

    /// The Ingress's lists, each falling back to the ConfigMap's when it sets none
    /// (as in ingress-nginx, an Ingress's list replaces the global one).
    pub fn or_defaults(ingress: &IngressSourceRanges, global: &GlobalSourceRanges) -> SourceRanges {
        let pick = |own: &Option<Vec<Cidr>>, global: &Option<Vec<Cidr>>| {
            own.as_ref()
                .or(global.as_ref())
                .cloned()
                .unwrap_or_default()
        };
        SourceRanges {
            allow: pick(&ingress.allow, &global.allow),
            deny: pick(&ingress.deny, &global.deny),
            closed: (ingress.allow.is_none() && global.allow_invalid)
                || (ingress.deny.is_none() && global.deny_invalid),
        }
    }
}

/// The ConfigMap's `whitelist-source-range` and `denylist-source-range`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct GlobalSourceRanges {
    /// `whitelist-source-range` (`None`: not set).
    pub allow: Option<Vec<Cidr>>,
    /// `denylist-source-range`.
    pub deny: Option<Vec<Cidr>>,
    /// `whitelist-source-range` is set but invalid.
    pub allow_invalid: bool,
    /// `denylist-source-range` is set but invalid.
    pub deny_invalid: bool,
}

impl GlobalSourceRanges {
    /// The lists of a location without lists of its own (the default backend's).
    pub fn location(&self) -> SourceRanges {
        SourceRanges::or_defaults(&IngressSourceRanges::default(), self)
    }
}

/// The lists as an Ingress's annotations set them (`None`: not set).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IngressSourceRanges {
    /// `allowlist-source-range`, else `whitelist-source-range`.
    pub allow: Option<Vec<Cidr>>,
    /// `denylist-source-range`.
    pub deny: Option<Vec<Cidr>>,
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let allow = match r.parse("allowlist-source-range", cidr_list)? {
        Some(a) => Some(a),
        None => r.parse("whitelist-source-range", cidr_list)?,
    };
    out.source_ranges = IngressSourceRanges {
        allow,
        deny: r.parse("denylist-source-range", cidr_list)?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &str) -> String {
        match cidr_list(v) {
            Ok(l) => l.iter().map(Cidr::to_string).collect::<Vec<_>>().join(" "),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn cidr_lists() {
        let cases = [
            ("10.0.0.0/8", "10.0.0.0/8"),
            (" 10.1.2.3/8 , 192.168.0.1", "10.0.0.0/8 192.168.0.1/32"),
            ("2001:db8::1/32,::1", "::1/128 2001:db8::/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("::/0", "::/0"),
            ("10.0.0.0/8,10.0.0.0/8", "10.0.0.0/8"),
            (
                "10.0.0.0/33",
                "error: \"10.0.0.0/33\": the prefix length must be 0 to 32",
            ),
            (
                "10.0.0.0/+8",
                "error: \"10.0.0.0/+8\": the prefix length must be 0 to 32",
            ),
            (
                "2001:db8::/129",
                "error: \"2001:db8::/129\": the prefix length must be 0 to 128",
            ),
            (
                "10.0.0",
                "error: \"10.0.0\" is not an IPv4 or IPv6 address or CIDR",
            ),
            (
                "all",
                "error: \"all\" is not an IPv4 or IPv6 address or CIDR",
            ),
            ("10.0.0.0/8; deny all", "error: \"10.0.0.0/8; deny all\""),
            ("", "error: expected a comma-separated list of CIDRs"),
            (" , ", "error: expected a comma-separated list of CIDRs"),
        ];
        for (input, want) in cases {
            let got = list(input);
            assert!(got.starts_with(want), "{input:?}: {got}");
        }
    }
}
