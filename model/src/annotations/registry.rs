//! The registry of annotation families: every key ingress-nginx reads, with what
//! Ferrule does with it. The parser's fail-closed check, `ferrule validate`'s
//! migration report and the generated table in `docs/annotations.md` all read it.
//!
//! A family Ferrule implements declares its keys next to its parser (its `FAMILY`);
//! the families it does not implement yet are declared in `unsupported.rs`.

/// Where an annotation's setting applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The locations (paths) of the Ingress.
    Location,
    /// The whole host (server block); the oldest Ingress of the host decides.
    Server,
    /// The backend (Service port) behind the paths, shared by every Ingress using it.
    Backend,
}

/// How much harm a hostile value could do, as ingress-nginx's annotation risk levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    /// A typed value that changes only its own traffic.
    Low,
    /// A value that reaches other hosts or the backend's view of the request.
    Medium,
    /// A URL, header or certificate that decides who may reach a backend.
    High,
    /// Raw NGINX configuration.
    Critical,
}

/// One annotation key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The name without the prefix (`ssl-redirect`).
    pub name: &'static str,
    /// Where it applies.
    pub scope: Scope,
    /// How dangerous a hostile value is.
    pub risk: Risk,
    /// Whether it restricts who may reach a backend: unsupported, it rejects its
    /// Ingress (serving it without the restriction would fail open).
    pub security: bool,
    /// Whether Ferrule implements it.
    pub supported: bool,
    /// One line of documentation.
    pub doc: &'static str,
}

/// A family of annotations: the keys one feature reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The family's name, as the docs list it.
    pub name: &'static str,
    /// Its keys.
    pub keys: &'static [Key],
}

/// A supported key (the family files' descriptors).
pub(crate) const fn key(name: &'static str, scope: Scope, risk: Risk, doc: &'static str) -> Key {
    Key {
        name,
        scope,
        risk,
        security: false,
        supported: true,
        doc,
    }
}

/// Every family, implemented ones first, in the order the docs list them.
pub static FAMILIES: &[&Family] = &[
    &super::redirect::FAMILY,
    &super::proxy::FAMILY,
    &super::cors::FAMILY,
    &super::buffering::FAMILY,
    &super::forwarding::FAMILY,
    &super::backend_tls::FAMILY,
    &super::mirror::FAMILY,
    &super::rewrite::FAMILY,
    &super::balancing::FAMILY,
    &super::canary::FAMILY,
    &super::snippets::FAMILY,
    &super::source_ranges::FAMILY,
    &super::basic_auth::FAMILY,
    &super::external_auth::FAMILY,
    &super::client_certificates::FAMILY,
    &super::rate_limits::FAMILY,
    &super::unsupported::GLOBAL_RATE_LIMITS,
    &super::satisfy::FAMILY,
    &super::errors::FAMILY,
    &super::server_alias::FAMILY,
    &super::passthrough::FAMILY,
    &super::custom_headers::FAMILY,
    &super::unsupported::MODSECURITY,
    &super::server_tls::FAMILY,
    &super::unsupported::TRACING,
];

/// The family and descriptor of `name` (without the prefix).
pub fn lookup(name: &str) -> Option<(&'static Family, &'static Key)> {
    FAMILIES
        .iter()
        .find_map(|f| f.keys.iter().find(|k| k.name == name).map(|k| (*f, k)))
}

/// Whether an annotation that is in no family still looks like one that restricts
/// access (a newer ingress-nginx key, or a misspelt one): refused rather than
/// ignored, as an unknown security key would fail open.
pub fn looks_like_security(name: &str) -> bool {
    name.ends_with("-source-range")
        // Keepalive to the auth service only tunes connections.
        || (name.starts_with("auth-") && !name.starts_with("auth-keepalive"))
        || name.starts_with("limit-")
        || name.starts_with("global-rate-limit")
        || name.contains("modsecurity")
        || name.contains("owasp")
        || name.contains("allowlist")
        || name.contains("whitelist")
        || name.contains("denylist")
        || name.contains("blacklist")
        || matches!(name, "satisfy" | "enable-global-auth" | "ssl-passthrough")
}

/// The families whose keys decide who may reach a backend, or hold raw NGINX
/// text: an invalid value of theirs rejects the Ingress (served without it, the
/// location could be open), where any other invalid value is ignored with a
/// Warning. `custom-headers` and `canary` are here too: ingress-nginx denies a
/// location whose custom headers it cannot read, and a canary read as a plain
/// Ingress would take the primary's traffic.
const FAIL_CLOSED_FAMILIES: &[&str] = &[
    "allow and deny lists",
    "basic auth",
    "external auth",
    "client certificates",
    "rate limits",
    "global rate limits",
    "satisfy",
    "ModSecurity",
    "snippets",
    "custom headers",
    "canary",
];

/// Whether an invalid value of `name` (without the prefix) rejects its Ingress.
pub fn fails_closed(name: &str) -> bool {
    match lookup(name) {
        Some((f, k)) => k.security || FAIL_CLOSED_FAMILIES.contains(&f.name),
        None => looks_like_security(name),
    }
}

/// What Ferrule does with one annotation of an Ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Implemented: its value is parsed and applied.
    Supported,
    /// Not implemented and harmless to leave out: the Ingress is served with a
    /// Warning saying so.
    Ignored(String),
    /// Not implemented and it restricts access: the Ingress is not served.
    Rejecting(String),
}

/// The verdict on annotation `name` (without the prefix; `full` is how the Ingress
/// spells it, for the messages).
pub fn verdict(name: &str, full: &str) -> Verdict {
    match lookup(name) {
        Some((_, k)) if k.supported => Verdict::Supported,
        Some((f, k)) if k.security => Verdict::Rejecting(format!(
            "annotation {full} ({}) restricts access and Ferrule does not implement it yet; \
             the Ingress is not served rather than served without the restriction",
            f.name
        )),
        Some((f, _)) => Verdict::Ignored(format!(
            "annotation {full} ({}) is not implemented by Ferrule and is ignored",
            f.name
        )),
        None if looks_like_security(name) => Verdict::Rejecting(format!(
            "annotation {full} is unknown and looks like an access restriction; \
             the Ingress is not served rather than served without it"
        )),
        None => Verdict::Ignored(format!(
            "annotation {full} is not one ingress-nginx or Ferrule knows (misspelt?) and is ignored"
        )),
    }
}

/// The annotation table of `docs/annotations.md`, generated from [`FAMILIES`].
pub fn markdown_table(prefix: &str) -> String {
    let mut out = String::from(
        "| Annotation | Family | Scope | Risk | Ferrule | What it does |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for f in FAMILIES {
        for k in f.keys {
            let status = match (k.supported, k.security) {
                (true, _) => "supported",
                (false, true) => "not yet: **rejects the Ingress**",
                (false, false) => "not yet: ignored with a Warning",
            };
            out.push_str(&format!(
                "| `{prefix}/{}` | {} | {:?} | {:?} | {status} | {} |\n",
                k.name, f.name, k.scope, k.risk, k.doc
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_in_one_family_once() {
        let mut seen = std::collections::BTreeSet::new();
        for f in FAMILIES {
            for k in f.keys {
                assert!(seen.insert(k.name), "{} listed twice", k.name);
                assert!(!k.doc.is_empty() && !k.doc.contains('|'), "{}", k.name);
            }
        }
    }

    /// The security classification of the listed keys agrees with the patterns
    /// used for unknown ones, so that a key does not change class by being listed.
    #[test]
    fn listed_security_keys_match_the_patterns() {
        for f in FAMILIES {
            for k in f.keys.iter().filter(|k| !k.supported) {
                assert_eq!(k.security, looks_like_security(k.name), "{}", k.name);
            }
        }
    }

    #[test]
    fn verdicts() {
        let check = |name: &str, want: &str| {
            let got = match verdict(name, &format!("p/{name}")) {
                Verdict::Supported => "supported".to_owned(),
                Verdict::Ignored(m) => format!("ignored: {m}"),
                Verdict::Rejecting(m) => format!("rejecting: {m}"),
            };
            assert!(got.starts_with(want), "{name}: {got}");
        };
        check("ssl-redirect", "supported");
        check("canary-by-cookie", "supported");
        check("whitelist-source-range", "supported");
        check("denylist-source-range", "supported");
        check("auth-url", "supported");
        check("auth-cache-key", "supported");
        check("auth-proxy-set-headers", "supported");
        check("auth-keepalive", "supported");
        check("auth-tls-secret", "supported");
        check("limit-rps", "supported");
        check("global-rate-limit", "rejecting");
        check("satisfy", "supported");
        check("ssl-passthrough", "supported");
        check("enable-cors", "supported");
        check(
            "enable-opentelemetry",
            "ignored: annotation p/enable-opentelemetry (tracing) is not implemented",
        );
        check(
            "auth-something-new",
            "rejecting: annotation p/auth-something-new is unknown",
        );
        check(
            "proxy-bodysize",
            "ignored: annotation p/proxy-bodysize is not one",
        );
    }
}
