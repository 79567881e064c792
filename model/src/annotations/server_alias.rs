//! `server-alias`: more host names served as the Ingress's host (its locations, its
//! certificate). Only the host's oldest Ingress (the owner of its server settings)
//! decides, and an alias never takes a name another Ingress serves or an older
//! alias claimed: it is left out with a Warning.

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "server alias",
    keys: &[key(
        "server-alias",
        Server,
        Medium,
        "more host names (comma-separated) served as the host; never one another Ingress serves",
    )],
};

/// Comma-separated DNS names, lower-cased, without repeats.
fn aliases(v: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for a in v.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let a = a.to_ascii_lowercase();
        if !value::is_dns_name(&a) {
            return Err(format!("{a:?} is not a DNS name"));
        }
        if !out.contains(&a) {
            out.push(a);
        }
    }
    if out.is_empty() {
        return Err("expected host names such as \"www.example.com,example.net\"".to_owned());
    }
    Ok(out)
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.server_aliases = r.parse("server-alias", aliases)?.unwrap_or_default();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_dns_names() {
        assert_eq!(
            aliases("WWW.a.test, b.test,b.test"),
            Ok(vec!["www.a.test".into(), "b.test".into()])
        );
        assert!(aliases("*.a.test").is_err());
        assert!(aliases("a.test;b").is_err());
        assert!(aliases(" , ").is_err());
    }
}
