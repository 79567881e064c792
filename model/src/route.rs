//! Which backend answers a request: the routing semantics the renderer must reproduce
//! in NGINX, stated once over the model so that rule tests need no NGINX.

use std::collections::HashMap;

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
///
/// Compiles the server's regex paths: to look up many paths of one server, build a
/// [`Locator`] once.
pub fn location_for<'s>(server: &'s Server, path: &str) -> Option<&'s Location> {
    Locator::new(server).locate(path)
}

/// [`location_for`] for many paths of one server: its regex paths compiled once, into
/// one set matched in a single pass over the path, and its exact and prefix paths
/// looked up by name. A lookup costs about the path's length, whatever the number of
/// locations (the renderer looks up a path per Exact rule of a host).
pub struct Locator<'s> {
    exact: HashMap<&'s str, &'s Location>,
    prefix: HashMap<&'s str, &'s Location>,
    /// The regex locations, in the order of `regexes`.
    regex_locations: Vec<&'s Location>,
    regexes: Regexes,
}

/// A server's regex paths, anchored as NGINX anchors them, without regard to case
/// (`~*`, as ingress-nginx renders them).
enum Regexes {
    /// One set: a single pass over the path gives every pattern that matches.
    Set(regex::RegexSet),
    /// The set is too large to build (or a pattern does not compile as a set):
    /// each pattern on its own, compiled once (`None`: never matches, as before).
    Each(Vec<Option<regex::Regex>>),
}

impl<'s> Locator<'s> {
    /// Indexes `server`'s locations.
    pub fn new(server: &'s Server) -> Self {
        let mut exact = HashMap::new();
        let mut prefix = HashMap::new();
        let mut regex_locations = Vec::new();
        for l in &server.locations {
            match l.path_match {
                // the model has one location per path and match kind; the first wins
                PathMatch::Exact => {
                    exact.entry(l.path.as_str()).or_insert(l);
                }
                PathMatch::Prefix => {
                    prefix.entry(l.path.as_str()).or_insert(l);
                }
                PathMatch::Regex => regex_locations.push(l),
            }
        }
        let patterns: Vec<String> = regex_locations
            .iter()
            .map(|l| format!("(?i)^{}", l.path))
            .collect();
        let regexes = match regex::RegexSet::new(&patterns) {
            Ok(set) => Regexes::Set(set),
            Err(_) => Regexes::Each(patterns.iter().map(|p| regex::Regex::new(p).ok()).collect()),
        };
        Self {
            exact,
            prefix,
            regex_locations,
            regexes,
        }
    }

    /// The location for `path` (see [`location_for`]).
    pub fn locate(&self, path: &str) -> Option<&'s Location> {
        if let Some(l) = self.exact.get(path) {
            return Some(l);
        }
        // the prefixes that match `path` element-wise: `path` itself, each parent
        // ending before a `/`, and `/`
        let mut best: Option<&'s Location> = None;
        let mut consider = |l: &'s Location| {
            if best.is_none_or(|b| precedence(l) < precedence(b)) {
                best = Some(l);
            }
        };
        for (i, _) in path.match_indices('/') {
            if let Some(l) = self.prefix.get(&path[..i]) {
                consider(l);
            }
        }
        for p in [path, "/"] {
            if let Some(l) = self.prefix.get(p) {
                consider(l);
            }
        }
        match &self.regexes {
            Regexes::Set(set) => {
                for i in set.matches(path).iter() {
                    consider(self.regex_locations[i]);
                }
            }
            Regexes::Each(each) => {
                for (re, l) in each.iter().zip(&self.regex_locations) {
                    if re.as_ref().is_some_and(|re| re.is_match(path)) {
                        consider(l);
                    }
                }
            }
        }
        debug_assert!(best.is_none_or(|l| match l.path_match {
            PathMatch::Prefix => prefix_matches(&l.path, path),
            _ => true,
        }));
        best
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LocationSettings, ResourceRef};

    /// The lookup as it is defined: every location tried, each regex compiled.
    fn by_definition<'s>(server: &'s Server, path: &str) -> Option<&'s Location> {
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
                    regex::Regex::new(&format!("(?i)^{}", l.path)).is_ok_and(|re| re.is_match(path))
                }
            })
            .min_by_key(|l| precedence(l))
    }

    #[test]
    fn the_locator_routes_as_every_location_tried_in_turn() {
        let loc = |path: &str, path_match| Location {
            path: path.to_owned(),
            path_match,
            owner: ResourceRef::new("Ingress", "demo", path),
            target: Target::Status(200),
            settings: LocationSettings::default(),
        };
        use PathMatch::*;
        let server = Server {
            host: "a.example.com".to_owned(),
            tls: None,
            owner: None,
            server_snippet: None,
            client_certificates: None,
            ciphers: Default::default(),
            redirect_to: None,
            locations: vec![
                loc("/", Prefix),
                loc("/foo", Prefix),
                loc("/foo/bar", Prefix),
                loc("/foo/", Exact),
                loc("/foo/bar/", Exact),
                loc("/fo+", Regex),
                loc("/foo/b[a-z]+", Regex),
                loc("/x.*", Regex),
            ],
        };
        let locator = Locator::new(&server);
        assert!(matches!(locator.regexes, Regexes::Set(_)));
        for path in [
            "/",
            "",
            "x",
            "/foo",
            "/foo/",
            "/foobar",
            "/foo/bar",
            "/foo/bar/",
            "/foo/barbaz",
            "/[",
            "/foo/bar/baz",
            "/fooo",
            "/x",
            "/xyz/foo",
            "//",
            "/foo//bar",
            "/a/foo",
        ] {
            let (got, want) = (locator.locate(path), by_definition(&server, path));
            assert_eq!(
                got.map(|l| (&l.path, l.path_match)),
                want.map(|l| (&l.path, l.path_match)),
                "{path:?}"
            );
        }
        // a server whose patterns cannot all go in one set (one does not compile,
        // or they are too large together) still routes by the others
        for bad in ["/[", "/big{1000}{1000}"] {
            let mut each = server.clone();
            each.locations.push(loc(bad, Regex));
            let locator = Locator::new(&each);
            assert!(matches!(locator.regexes, Regexes::Each(_)), "{bad}");
            for path in ["/foo/bar/x", "/fooo", "/xy", "/[", "/big"] {
                assert_eq!(
                    locator.locate(path).map(|l| &l.path),
                    by_definition(&each, path).map(|l| &l.path),
                    "{path:?}"
                );
            }
        }
    }
}
