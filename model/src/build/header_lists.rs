//! Header lists kept in other ConfigMaps, as ingress-nginx reads them: the
//! controller ConfigMap's `proxy-set-headers` (sent to every backend) and
//! `add-headers` (sent to every client) name a ConfigMap `namespace/name` whose keys
//! are header names and whose values are the values.
//!
//! Both ConfigMaps are the administrator's, so a value may use NGINX variables, but
//! only those NGINX always knows (a name NGINX does not know would fail `nginx -t`
//! for everyone, in a ConfigMap config safety cannot hold back): the request's and
//! connection's core variables, and `$http_*`, `$cookie_*`, `$arg_*`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

/// One header and its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Header {
    /// The name, as NGINX sends it.
    pub name: String,
    /// The value (NGINX text: its variables are expanded per request).
    pub value: String,
}

/// Variables a value may use (besides the `$http_*`, `$cookie_*` and `$arg_*`
/// families): NGINX's core variables of a request and its connection.
const VARIABLES: &[&str] = &[
    "args",
    "binary_remote_addr",
    "body_bytes_sent",
    "bytes_sent",
    "connection",
    "connection_requests",
    "content_length",
    "content_type",
    "document_uri",
    "host",
    "hostname",
    "https",
    "is_args",
    "msec",
    "nginx_version",
    "pid",
    "query_string",
    "realip_remote_addr",
    "remote_addr",
    "remote_port",
    "request",
    "request_id",
    "request_length",
    "request_method",
    "request_time",
    "request_uri",
    "scheme",
    "server_addr",
    "server_name",
    "server_port",
    "server_protocol",
    "ssl_protocol",
    "ssl_cipher",
    "ssl_server_name",
    "status",
    "time_iso8601",
    "time_local",
    "uri",
];

/// The headers of the ConfigMap `reference` names, among `config_maps`, sorted by
/// name. The error says what is wrong, naming the ConfigMap and the header.
pub(crate) fn resolve(
    reference: &str,
    config_maps: &[Arc<ConfigMap>],
) -> Result<Vec<Header>, String> {
    let reference = reference.trim();
    let (ns, name) = reference
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| "expected namespace/name of a ConfigMap".to_owned())?;
    let cm = config_maps
        .iter()
        .find(|c| {
            c.metadata.namespace.as_deref() == Some(ns) && c.metadata.name.as_deref() == Some(name)
        })
        .ok_or_else(|| format!("ConfigMap {ns}/{name} not found"))?;
    headers(cm, header_value).map_err(|e| format!("ConfigMap {ns}/{name}: {e}"))
}

/// The headers of an Ingress's own ConfigMap `cm` (`custom-headers`,
/// `auth-proxy-set-headers`): names checked, values printable and sent as written
/// (the renderer makes every `$` literal: a tenant's value names no variable).
pub(crate) fn tenant_headers(cm: &ConfigMap) -> Result<Vec<Header>, String> {
    headers(cm, printable)
}

/// `cm`'s data as headers, each name checked and each value by `value`.
fn headers(cm: &ConfigMap, value: fn(&str) -> Result<(), String>) -> Result<Vec<Header>, String> {
    let mut out = Vec::new();
    for (k, v) in cm.data.iter().flatten() {
        header_name(k).map_err(|e| format!("header {k:?}: {e}"))?;
        value(v).map_err(|e| format!("header {k}: {e}"))?;
        out.push(Header {
            name: k.clone(),
            value: v.clone(),
        });
    }
    Ok(out)
}

/// A value: printable, at most 4 KiB.
fn printable(v: &str) -> Result<(), String> {
    if v.len() > 4096 || v.chars().any(char::is_control) {
        return Err("a value of at most 4096 printable characters is expected".to_owned());
    }
    Ok(())
}

/// A header name: letters, digits, `-` and `_` (ingress-nginx's rule), at most 256.
pub(crate) fn header_name(k: &str) -> Result<(), String> {
    let ok = !k.is_empty()
        && k.len() <= 256
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match ok {
        true => Ok(()),
        false => Err("not a header name (letters, digits, - and _)".to_owned()),
    }
}

/// A value: [`printable`], every `$` the start of a known variable.
fn header_value(v: &str) -> Result<(), String> {
    printable(v)?;
    let mut rest = v;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        let braced = after.starts_with('{');
        let body = if braced { &after[1..] } else { after };
        let len = body
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let var = &body[..len];
        let known = VARIABLES.contains(&var)
            || ["http_", "cookie_", "arg_"]
                .iter()
                .any(|p| var.len() > p.len() && var.starts_with(p));
        if !known || (braced && !body[len..].starts_with('}')) {
            return Err(format!(
                "${var} is not a variable a header may use (core request variables, \
                 $http_*, $cookie_*, $arg_*)"
            ));
        }
        rest = &body[len + usize::from(braced)..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_use_known_variables_only() {
        for ok in [
            "t=${msec}",
            "$remote_addr",
            "a $http_x_a b",
            "plain",
            "$cookie_s;$arg_q",
        ] {
            assert_eq!(header_value(ok), Ok(()), "{ok}");
        }
        for bad in [
            "$foo",
            "${msec",
            "$",
            "$http_",
            "a\nb",
            "${ferrule_backend}",
        ] {
            assert!(header_value(bad).is_err(), "{bad}");
        }
        assert!(header_name("X-Custom_1").is_ok());
        assert!(header_name("X Custom").is_err());
        assert!(header_name("X:C").is_err());
    }
}
