//! Which backend answers a request: the routing semantics the renderer must reproduce
//! in NGINX, stated once over the model so that rule tests need no NGINX.

use crate::build::covers;
use crate::model::{DEFAULT_SERVER, Location, Model, PathMatch, Server, Target};

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Proxied to this backend (which has at least one ready endpoint).
    Backend(String),
    /// Answered by NGINX itself with this status.
    Status(u16),
}

/// Routes a request for `host` (port ignored, case-insensitive) and `path`.
pub fn route(model: &Model, host: &str, path: &str) -> Outcome {
    let host = host
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let location = server_for(model, &host).and_then(|s| location_for(s, path));
    let target = location.map_or(&model.default_backend, |l| &l.target);
    match target {
        Target::Status(s) => Outcome::Status(*s),
        Target::Backend(name) => match model.backends.get(name) {
            Some(b) if !b.endpoints.is_empty() => Outcome::Backend(name.clone()),
            _ => Outcome::Status(503),
        },
    }
}

/// The server for a (lower-cased) host: exact, then a wildcard one label up, whose `*`
/// stands for one DNS label, then the catch-all.
pub fn server_for<'m>(model: &'m Model, host: &str) -> Option<&'m Server> {
    // `*.foo.com` is the key of a wildcard server, not a host it serves
    if let Some(s) = model.server(host)
        && !host.starts_with("*.")
    {
        return Some(s);
    }
    if let Some((label, rest)) = host.split_once('.')
        && dns_label(label)
        && let Some(s) = model.server(&format!("*.{rest}"))
    {
        debug_assert!(covers(std::slice::from_ref(&s.host), host));
        return Some(s);
    }
    model.server(DEFAULT_SERVER)
}

/// Whether `label` (lower-cased) is a DNS label, `[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?`:
/// what each label of a rule host must be, and what the `*` of a wildcard host stands
/// for in a request's host. NGINX must match the same: [`WILDCARD_LABEL`].
pub fn dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// [`dns_label`] as a PCRE pattern, for the `server_name` regex of a wildcard host
/// (NGINX lower-cases the host before it matches server names).
pub const WILDCARD_LABEL: &str = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?";

/// The location for a path: an exact one first; then the prefix and regex locations
/// in [`precedence`] order (the longest path first), the first that matches. Without
/// regexes that is the longest element-wise prefix; with them it is ingress-nginx's
/// order (it makes every path of such a host a regex, sorted longest first): a short
/// pattern does not take longer literal paths, though a long enough pattern still
/// can (an Ingress on a shared host is trusted as in ingress-nginx).
pub fn location_for<'s>(server: &'s Server, path: &str) -> Option<&'s Location> {
    let locs = &server.locations;
    if let Some(l) = locs
        .iter()
        .find(|l| l.path_match == PathMatch::Exact && l.path == path)
    {
        return Some(l);
    }
    locs.iter()
        .filter(|l| match l.path_match {
            PathMatch::Exact => false,
            PathMatch::Prefix => prefix_matches(&l.path, path),
            PathMatch::Regex => {
                regex::Regex::new(&format!("^{}", l.path)).is_ok_and(|re| re.is_match(path))
            }
        })
        .min_by_key(|l| precedence(l))
}

/// The order in which prefix and regex locations are tried: the longest path first,
/// a prefix before a regex of the same length (a literal path is the more specific),
/// then by path.
pub fn precedence(l: &Location) -> (std::cmp::Reverse<usize>, bool, &str) {
    (
        std::cmp::Reverse(l.path.len()),
        l.path_match == PathMatch::Regex,
        l.path.as_str(),
    )
}

/// Element-wise prefix match: `/foo` matches `/foo` and `/foo/bar`, not `/foobar`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}
