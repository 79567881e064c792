//! The ConfigMap's `block-cidrs`, `block-user-agents` and `block-referers`: clients
//! refused with 403 on every host, before any location (and its own allowlist) is
//! chosen. They restrict access, so a list that cannot be read fails closed: every
//! host answers 403 until it is fixed, as an invalid `denylist-source-range` does.

use serde::{Deserialize, Serialize};

use crate::annotations::source_ranges::{Cidr, cidr_list};
use crate::annotations::value::patterns;

/// The keys this file reads.
pub(crate) const KEYS: [&str; 3] = ["block-cidrs", "block-user-agents", "block-referers"];

/// Who is refused everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Blocking {
    /// `block-cidrs`: client addresses (after the real-IP keys).
    pub cidrs: Vec<Cidr>,
    /// `block-user-agents`: exact `User-Agent` values, or NGINX regular expressions
    /// starting with `~` (case-sensitive) or `~*`.
    pub user_agents: Vec<String>,
    /// `block-referers`: the same for `Referer`.
    pub referers: Vec<String>,
    /// A list was invalid: every request is refused.
    pub closed: bool,
}

impl Blocking {
    /// Whether anything is refused (the templates render nothing otherwise).
    pub fn active(&self) -> bool {
        self.closed
            || !self.cidrs.is_empty()
            || !self.user_agents.is_empty()
            || !self.referers.is_empty()
    }
}

/// Reads the keys through `get`; an invalid one is `(key, value, reason)` in
/// `invalid` and closes every host.
pub(crate) fn read<'a>(
    get: impl Fn(&str) -> Option<&'a str>,
    invalid: &mut Vec<(&'static str, String, String)>,
) -> Blocking {
    let mut b = Blocking::default();
    if let Some(v) = get("block-cidrs").filter(|v| !v.trim().is_empty()) {
        match cidr_list(v) {
            Ok(l) => b.cidrs = l,
            Err(e) => {
                invalid.push(("block-cidrs", v.to_owned(), e));
                b.closed = true;
            }
        }
    }
    for (key, out) in [
        ("block-user-agents", &mut b.user_agents),
        ("block-referers", &mut b.referers),
    ] {
        let Some(v) = get(key) else { continue };
        match patterns(v) {
            Ok(l) => *out = l,
            Err(e) => {
                invalid.push((key, v.to_owned(), e));
                b.closed = true;
            }
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(key: &str, v: &str) -> (Blocking, usize) {
        let mut invalid = Vec::new();
        let b = read(|k| (k == key).then_some(v), &mut invalid);
        (b, invalid.len())
    }

    #[test]
    fn lists_are_read_and_invalid_ones_close_every_host() {
        let (b, n) = check("block-cidrs", "192.0.2.0/24, 2001:db8::/32");
        assert_eq!((b.cidrs.len(), b.closed, n), (2, false, 0));
        let (b, n) = check("block-user-agents", "~*bot, curl/8.0");
        assert_eq!(b.user_agents, ["~*bot", "curl/8.0"]);
        assert_eq!((b.closed, n), (false, 0));
        let (b, n) = check("block-cidrs", "192.0.2.0/33");
        assert!(b.closed && b.active() && n == 1);
        let (b, n) = check("block-referers", "~spam\"; return 200");
        assert!(b.closed && n == 1);
        let (b, _) = check("block-cidrs", " ");
        assert!(!b.active());
    }
}
