//! Typed parsers shared by the annotation families.

/// `true` / `false`, and the other spellings ingress-nginx takes (Go's
/// `strconv.ParseBool`: `1`, `t`, `0`, `f`), case-insensitive.
pub(crate) fn boolean(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" => Ok(true),
        "false" | "f" | "0" => Ok(false),
        _ => Err("expected \"true\" or \"false\"".to_owned()),
    }
}

/// Whole seconds: `60` or `60s`.
pub(crate) fn seconds(v: &str) -> Result<u32, String> {
    let digits = v.strip_suffix('s').unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a whole number of seconds, e.g. \"60\"".to_owned());
    }
    digits
        .parse()
        .map_err(|_| "number of seconds too large".to_owned())
}

/// An unsigned integer within `min..=max`.
pub(crate) fn integer(v: &str, min: u32, max: u32) -> Result<u32, String> {
    let n: u32 = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        v.parse()
            .map_err(|_| format!("expected an integer between {min} and {max}"))?
    } else {
        return Err(format!("expected an integer between {min} and {max}"));
    };
    if n < min || n > max {
        return Err(format!("expected an integer between {min} and {max}"));
    }
    Ok(n)
}

/// An NGINX size: digits with an optional `k`, `m` or `g` suffix.
pub(crate) fn size(v: &str) -> Result<String, String> {
    let digits = v.strip_suffix(['k', 'K', 'm', 'M', 'g', 'G']).unwrap_or(v);
    if digits.is_empty() || digits.len() > 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a size such as \"8m\", \"512k\" or \"0\"".to_owned());
    }
    Ok(v.to_ascii_lowercase())
}

/// The bytes of a size [`size`] accepted (lowercase suffix); saturates.
pub(crate) fn size_bytes(size: &str) -> u64 {
    let (digits, unit) = match size.as_bytes().last() {
        Some(b'k') => (&size[..size.len() - 1], 1 << 10),
        Some(b'm') => (&size[..size.len() - 1], 1 << 20),
        Some(b'g') => (&size[..size.len() - 1], 1 << 30),
        _ => (size, 1),
    };
    digits
        .parse::<u64>()
        .unwrap_or(u64::MAX)
        .saturating_mul(unit)
}

/// `on` / `off`, case-insensitive as NGINX's own flags.
pub(crate) fn on_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("expected \"on\" or \"off\"".to_owned()),
    }
}

/// An HTTP token (header or cookie name): RFC 7230 `tchar`s only.
pub(crate) fn token(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() <= 256
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(v.to_owned())
    } else {
        Err("expected an HTTP token (letters, digits, -_.)".to_owned())
    }
}

/// A printable single-line value without NGINX or HTTP metacharacters.
pub(crate) fn plain(v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if let Some(c) = v
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || "\"'\\;{}`".contains(*c))
    {
        return Err(format!("character {c:?} is not allowed"));
    }
    Ok(v.to_owned())
}

/// Refuses every character that may not stand in a URL Ferrule writes: anything but
/// printable ASCII, quotes, backslash, `;`, braces, backquote, `<>^|`, and those of `also`.
pub(crate) fn url_chars(v: &str, also: &str) -> Result<(), String> {
    match v
        .chars()
        .find(|c| !c.is_ascii_graphic() || "\"'\\;{}`<>^|".contains(*c) || also.contains(*c))
    {
        Some(c) => Err(format!("character {c:?} is not allowed in a URL")),
        None => Ok(()),
    }
}

/// A Secret reference: `name` or `namespace/name`, each a DNS subdomain (the build
/// checks the namespace is the Ingress's own).
pub(crate) fn secret_ref(v: &str) -> Result<String, String> {
    object_ref(v, "expected a Secret name, or namespace/name")
}

/// A reference to an object of the Ingress's namespace (a Secret, a ConfigMap):
/// `name` or `namespace/name`, each a DNS subdomain; else the error `expected`.
pub(crate) fn object_ref(v: &str, expected: &str) -> Result<String, String> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    match v.split_once('/') {
        Some((ns, name)) if ok(ns) && ok(name) => Ok(v.to_owned()),
        None if ok(v) => Ok(v.to_owned()),
        _ => Err(expected.to_owned()),
    }
}

/// Whether `v` is a DNS name: labels of letters, digits, `-` and `_` (no variables,
/// no metacharacters).
pub(crate) fn is_dns_name(v: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    v.len() <= 253 && v.split('.').all(label)
}

/// A host name with an optional port: the labels of a DNS name, no variables.
pub(crate) fn host_port(v: &str) -> Result<String, String> {
    let (host, port) = match v.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (v, None),
    };
    if !is_dns_name(host) {
        return Err("expected a host name such as app.internal (no variables)".to_owned());
    }
    if let Some(p) = port {
        integer(p, 1, 65535).map_err(|_| "invalid port".to_owned())?;
    }
    Ok(v.to_owned())
}

/// An NGINX time: a whole number with an optional unit `ms`, `s`, `m`, `h` or `d`.
pub(crate) fn time(v: &str) -> Result<String, String> {
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &v[digits.len()..];
    let ok = !digits.is_empty()
        && digits.len() <= 9
        && digits.bytes().all(|b| b.is_ascii_digit())
        && matches!(unit, "" | "ms" | "s" | "m" | "h" | "d");
    if ok {
        Ok(v.to_owned())
    } else {
        Err("expected a time such as \"10m\", \"600s\" or \"1h\"".to_owned())
    }
}

/// A power of two in `min..=max` (NGINX's hash bucket sizes).
pub(crate) fn power_of_two(v: &str, min: u32, max: u32) -> Result<u32, String> {
    let n = integer(v, min, max)?;
    if n.is_power_of_two() {
        Ok(n)
    } else {
        Err(format!("expected a power of two between {min} and {max}"))
    }
}
/// One user-agent or referer pattern: printable, without quotes, `;`, braces or
/// backslash-escapes of them; at most 256 bytes. NGINX compiles it: a pattern
/// PCRE refuses holds the ConfigMap back (config safety).
pub(crate) fn pattern(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 256 {
        return Err("expected a pattern of 1 to 256 bytes".to_owned());
    }
    if let Some(c) = v.chars().find(|c| c.is_control() || "\"'`;{}".contains(*c)) {
        return Err(format!("character {c:?} is not allowed in {v:?}"));
    }
    Ok(v.to_owned())
}
/// Comma-separated [`pattern`]s (`msie6`, `~*bot`, exact values).
pub(crate) fn patterns(v: &str) -> Result<Vec<String>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(pattern)
        .collect()
}

/// An OpenSSL cipher list (`ECDHE-RSA-AES128-GCM-SHA256:!aNULL`): the characters
/// OpenSSL's syntax uses, nothing NGINX would read otherwise.
pub(crate) fn cipher_list(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() <= 4096
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_:+!@=.,".contains(&b));
    match ok {
        true => Ok(v.to_owned()),
        false => Err(
            "expected an OpenSSL cipher list such as ECDHE-RSA-AES128-GCM-SHA256:DEFAULT"
                .to_owned(),
        ),
    }
}
