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

/// The server for a host: exact, then a wildcard one label up, then the catch-all.
pub fn server_for<'m>(model: &'m Model, host: &str) -> Option<&'m Server> {
    if let Some(s) = model.server(host) {
        return Some(s);
    }
    if let Some((label, rest)) = host.split_once('.')
        && !label.is_empty()
        && let Some(s) = model.server(&format!("*.{rest}"))
    {
        debug_assert!(covers(std::slice::from_ref(&s.host), host));
        return Some(s);
    }
    model.server(DEFAULT_SERVER)
}

/// The location for a path: exact first, then regular expressions in model order,
/// then the longest element-wise prefix.
pub fn location_for<'s>(server: &'s Server, path: &str) -> Option<&'s Location> {
    let locs = &server.locations;
    if let Some(l) = locs
        .iter()
        .find(|l| l.path_match == PathMatch::Exact && l.path == path)
    {
        return Some(l);
    }
    let regex = locs.iter().find(|l| {
        l.path_match == PathMatch::Regex
            && regex::Regex::new(&format!("^{}", l.path)).is_ok_and(|re| re.is_match(path))
    });
    if regex.is_some() {
        return regex;
    }
    locs.iter()
        .filter(|l| l.path_match == PathMatch::Prefix && prefix_matches(&l.path, path))
        .max_by_key(|l| l.path.len())
}

/// Element-wise prefix match: `/foo` matches `/foo` and `/foo/bar`, not `/foobar`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}
