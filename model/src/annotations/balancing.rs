//! `load-balance`, `upstream-hash-by`, `affinity` and `session-cookie-*`.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "balancing and affinity",
    keys: &[
        key("load-balance", Backend, Low, "round_robin or ewma"),
        key(
            "upstream-hash-by",
            Backend,
            Low,
            "consistent hashing on an NGINX variable expression",
        ),
        key(
            "upstream-hash-by-subset",
            Backend,
            Low,
            "true: upstream-hash-by picks a subset of endpoints, requests spread over it",
        ),
        key(
            "upstream-hash-by-subset-size",
            Backend,
            Low,
            "endpoints in that subset (default 3)",
        ),
        key(
            "affinity",
            Backend,
            Low,
            "cookie: session affinity by cookie",
        ),
        key(
            "affinity-mode",
            Backend,
            Low,
            "balanced (default): sessions are redistributed when endpoints are added; \
             persistent: a session stays on its endpoint while it exists",
        ),
        key(
            "session-cookie-name",
            Backend,
            Low,
            "name of the affinity cookie (default INGRESSCOOKIE)",
        ),
        key(
            "session-cookie-path",
            Backend,
            Low,
            "Path of the affinity cookie",
        ),
        key(
            "session-cookie-max-age",
            Backend,
            Low,
            "Max-Age of the affinity cookie",
        ),
        key(
            "session-cookie-expires",
            Backend,
            Low,
            "Expires of the affinity cookie, in seconds from now",
        ),
        key(
            "session-cookie-secure",
            Backend,
            Low,
            "Secure flag of the affinity cookie",
        ),
        key(
            "session-cookie-samesite",
            Backend,
            Low,
            "SameSite of the affinity cookie",
        ),
        key(
            "session-cookie-conditional-samesite-none",
            Backend,
            Low,
            "SameSite=None left out for browsers that refuse it",
        ),
        key(
            "session-cookie-domain",
            Backend,
            Low,
            "Domain of the affinity cookie",
        ),
        key(
            "session-cookie-change-on-failure",
            Backend,
            Low,
            "pick a new endpoint when the sticky one fails",
        ),
    ],
};

/// Load-balancing algorithm of the in-NGINX balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalance {
    /// Round robin (default).
    #[default]
    RoundRobin,
    /// Peak exponentially weighted moving average of latency.
    Ewma,
}

/// How sticky a session is (`affinity-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinityMode {
    /// The cookie holds a key that a consistent hash maps onto the current endpoints:
    /// when endpoints are added, some sessions move to them (ingress-nginx's default).
    #[default]
    Balanced,
    /// The cookie names its endpoint: a session stays there while the endpoint exists.
    Persistent,
}

impl AffinityMode {
    fn is_balanced(&self) -> bool {
        *self == Self::Balanced
    }
}

/// Cookie-based session affinity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Affinity {
    /// `affinity-mode`. Left out of the model's serialization when balanced, so
    /// that the hash of models from before the key existed stays the same.
    #[serde(default, skip_serializing_if = "AffinityMode::is_balanced")]
    pub mode: AffinityMode,
    /// `session-cookie-name` (default `INGRESSCOOKIE`).
    pub cookie_name: String,
    /// `session-cookie-max-age` in seconds (1 to 2^31 - 1, as the balancer API takes).
    pub max_age: Option<u32>,
    /// `session-cookie-path`.
    pub path: Option<String>,
    /// `session-cookie-secure`: `Secure` always (true) or never (false); unset, on
    /// HTTPS requests only (ingress-nginx).
    pub secure: Option<bool>,
    /// `session-cookie-samesite`.
    pub samesite: Option<SameSite>,
    /// `session-cookie-conditional-samesite-none`: `SameSite=None` is left out for
    /// the browsers that refuse a cookie carrying it (Chrome 40 to 69, iOS 12,
    /// Safari on macOS 10.14), which would otherwise lose the session.
    pub conditional_samesite_none: bool,
    /// `session-cookie-expires` in seconds: an `Expires` date that far ahead.
    pub expires: Option<u32>,
    /// `session-cookie-domain`.
    pub domain: Option<String>,
    /// `session-cookie-change-on-failure`: a request whose sticky endpoint failed
    /// gets a cookie naming the endpoint that answered it instead.
    pub change_on_failure: bool,
}

/// A cookie's `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SameSite {
    /// `SameSite=None`.
    None,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=Strict`.
    Strict,
}

fn samesite(v: &str) -> Result<SameSite, String> {
    // ingress-nginx passes the value through; browsers read it case-insensitively
    match v.to_ascii_lowercase().as_str() {
        "none" => Ok(SameSite::None),
        "lax" => Ok(SameSite::Lax),
        "strict" => Ok(SameSite::Strict),
        _ => Err("expected \"None\", \"Lax\" or \"Strict\"".to_owned()),
    }
}

/// A cookie `Domain`: a host name as an Ingress rule takes it (no wildcard),
/// optionally with a leading dot.
fn cookie_domain(v: &str) -> Result<String, String> {
    let (dot, name) = v.strip_prefix('.').map_or(("", v), |name| (".", name));
    match crate::build::hosts::host(name) {
        Ok(host) if !host.starts_with('*') => Ok(format!("{dot}{host}")),
        _ => Err("expected a domain name such as \"example.com\" or \".example.com\"".to_owned()),
    }
}

/// `round_robin` or `ewma` (the annotation and the ConfigMap key alike).
pub(crate) fn load_balance(v: &str) -> Result<LoadBalance, String> {
    match v {
        "round_robin" => Ok(LoadBalance::RoundRobin),
        "ewma" => Ok(LoadBalance::Ewma),
        _ => Err("expected \"round_robin\" or \"ewma\"".to_owned()),
    }
}

/// The largest `session-cookie-max-age` the balancer API takes (`2^31 - 1` seconds,
/// the limit of lua/ferrule/validate.lua and of a signed 32-bit `Max-Age`).
const MAX_COOKIE_MAX_AGE: u32 = i32::MAX as u32;

/// The largest `upstream-hash-by-subset-size` the balancer API takes (`2^31 - 1`);
/// a size above a backend's endpoints spreads over all of them.
const MAX_SUBSET_SIZE: u32 = i32::MAX as u32;

/// An NGINX variable expression: variables (`$name`) and literal `-_.:/` characters.
/// As `expr.parse` of the balancer (lua/ferrule/expr.lua), every `$` starts a variable
/// name of letters, digits and `_` (so `$-x`, `a$.b`, `$$x` and a trailing `$` are
/// refused); `${name}` is not accepted here.
fn hash_expression(v: &str) -> Result<String, String> {
    let chars_ok = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"$_-.:/".contains(&b));
    // The text after each `$` starts with the variable's name.
    let names_ok = v.split('$').skip(1).all(|after| {
        after
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    if chars_ok && names_ok && v.contains('$') {
        Ok(v.to_owned())
    } else {
        Err(
            "expected an NGINX variable expression such as \"$request_uri\" \
             (each $ followed by a variable name of letters, digits and _)"
                .to_owned(),
        )
    }
}

fn cookie_path(v: &str) -> Result<String, String> {
    if !v.starts_with('/') {
        return Err("expected a path starting with \"/\"".to_owned());
    }
    value::plain(v).and_then(|p| {
        if p.contains(',') {
            Err("character ',' is not allowed".to_owned())
        } else {
            Ok(p)
        }
    })
}

/// Parses the family into `out`; a subset key that cannot take effect is said in
/// `ignored` (a Warning on the Ingress) rather than dropped in silence.
pub(super) fn parse(
    r: &Reader<'_>,
    out: &mut IngressAnnotations,
    ignored: &mut Vec<String>,
) -> Result<(), AnnotationError> {
    out.load_balance = r.parse("load-balance", load_balance)?;
    out.upstream_hash_by = r.parse("upstream-hash-by", hash_expression)?;
    let subset = r.parse("upstream-hash-by-subset", value::boolean)?;
    let subset_size = r.parse("upstream-hash-by-subset-size", |v| {
        value::integer(v, 1, MAX_SUBSET_SIZE)
    })?;
    // ingress-nginx's default size; the subset means nothing without the hash
    let prefix = r.prefix;
    match (subset, &out.upstream_hash_by) {
        (Some(true), Some(_)) => out.upstream_hash_by_subset = Some(subset_size.unwrap_or(3)),
        (Some(true), None) => ignored.push(format!(
            "annotation {prefix}upstream-hash-by-subset is ignored: there is no \
             {prefix}upstream-hash-by to take a subset with"
        )),
        _ if subset_size.is_some() => ignored.push(format!(
            "annotation {prefix}upstream-hash-by-subset-size is ignored: \
             {prefix}upstream-hash-by-subset is not \"true\""
        )),
        _ => {}
    }
    let mode = r.parse("affinity", |v| match v {
        "cookie" => Ok(()),
        _ => Err("expected \"cookie\"".to_owned()),
    })?;
    let affinity_mode = r.parse("affinity-mode", |v| match v {
        "balanced" => Ok(AffinityMode::Balanced),
        "persistent" => Ok(AffinityMode::Persistent),
        _ => Err("expected \"balanced\" or \"persistent\"".to_owned()),
    })?;
    let name = r.parse("session-cookie-name", value::token)?;
    let max_age = r.parse("session-cookie-max-age", |v| {
        value::integer(v, 1, MAX_COOKIE_MAX_AGE)
    })?;
    let path = r.parse("session-cookie-path", cookie_path)?;
    let secure = r.parse("session-cookie-secure", value::boolean)?;
    let samesite = r.parse("session-cookie-samesite", samesite)?;
    let conditional_samesite_none =
        r.parse("session-cookie-conditional-samesite-none", value::boolean)?;
    let expires = r.parse("session-cookie-expires", |v| {
        value::integer(v, 1, MAX_COOKIE_MAX_AGE)
    })?;
    let domain = r.parse("session-cookie-domain", cookie_domain)?;
    let change_on_failure = r.parse("session-cookie-change-on-failure", value::boolean)?;
    if mode.is_some() {
        out.affinity = Some(Affinity {
            mode: affinity_mode.unwrap_or_default(),
            cookie_name: name.unwrap_or_else(|| "INGRESSCOOKIE".to_owned()),
            max_age,
            path,
            secure,
            samesite,
            conditional_samesite_none: conditional_samesite_none.unwrap_or(false),
            expires,
            domain,
            change_on_failure: change_on_failure.unwrap_or(false),
        });
    }
    Ok(())
}
