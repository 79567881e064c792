//! Host and path normalisation and validation.

use crate::route::dns_label;

/// Lower-cases and validates a rule host: DNS labels, optionally `*.` first.
pub(crate) fn host(raw: &str) -> Result<String, String> {
    let h = raw.trim_end_matches('.').to_ascii_lowercase();
    let body = h.strip_prefix("*.").unwrap_or(&h);
    let valid = !body.is_empty() && h.len() <= 253 && body.split('.').all(dns_label);
    if valid {
        Ok(h)
    } else {
        Err(format!("invalid host {raw:?}"))
    }
}

/// Validates a path: absolute, printable, no whitespace; a regex also passes
/// [`super::path_regex::check`].
pub(crate) fn path(raw: &str, regex: bool) -> Result<&str, String> {
    if !regex && !raw.starts_with('/') {
        return Err(format!("path {raw:?} must start with \"/\""));
    }
    if raw.is_empty() {
        return Err("path must not be empty".to_owned());
    }
    if let Some(c) = raw.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("path {raw:?} contains the character {c:?}"));
    }
    if !regex && raw.chars().any(|c| "{};\"'\\".contains(c)) {
        return Err(format!(
            "path {raw:?} contains a character not allowed in a path"
        ));
    }
    if regex {
        super::path_regex::check(raw).map_err(|e| format!("path {raw:?}: {e}"))?;
    }
    Ok(raw)
}

/// A prefix path without its trailing slash (`/` stays `/`), for element-wise matching.
pub(crate) fn prefix(p: &str) -> String {
    prefix_str(p).to_owned()
}

/// [`prefix`] without allocating.
pub(crate) fn prefix_str(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() { "/" } else { t }
}
