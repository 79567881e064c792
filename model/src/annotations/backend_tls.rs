//! `proxy-ssl-*`: TLS from NGINX to an HTTPS or GRPCS backend: the CA its
//! certificate is verified against, the client certificate NGINX presents (both
//! from `proxy-ssl-secret`, a Secret of the Ingress's namespace), the name checked
//! and sent by SNI, protocols and ciphers.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "backend TLS",
    keys: &[
        key(
            "proxy-ssl-secret",
            Location,
            Medium,
            "Secret with ca.crt (to verify the backend) and/or tls.crt and tls.key (the client certificate)",
        ),
        key(
            "proxy-ssl-verify",
            Location,
            Medium,
            "on: verify the backend's certificate against ca.crt (default off)",
        ),
        key(
            "proxy-ssl-verify-depth",
            Location,
            Low,
            "most certificates in the backend's chain (default 1)",
        ),
        key(
            "proxy-ssl-name",
            Location,
            Low,
            "name the backend's certificate must hold, and the SNI (default: the Service's name.namespace.svc)",
        ),
        key(
            "proxy-ssl-server-name",
            Location,
            Low,
            "on: send the name by SNI (default off)",
        ),
        key(
            "proxy-ssl-protocols",
            Location,
            Low,
            "TLS versions to the backend (default TLSv1.2 TLSv1.3)",
        ),
        key(
            "proxy-ssl-ciphers",
            Location,
            Low,
            "OpenSSL cipher list to the backend (default DEFAULT)",
        ),
    ],
};

/// The annotations as an Ingress sets them (the build reads the Secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTlsAnnotations {
    /// `proxy-ssl-secret` as written.
    pub secret: Option<String>,
    /// The rest.
    pub settings: BackendTlsSettings,
}

/// Every setting but the Secret's contents.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackendTlsSettings {
    /// `proxy_ssl_verify on`.
    pub verify: bool,
    /// `proxy_ssl_verify_depth`.
    pub depth: u32,
    /// `proxy_ssl_name`; `None`: the Service's cluster name.
    pub name: Option<String>,
    /// `proxy_ssl_server_name on`.
    pub server_name: bool,
    /// `proxy_ssl_protocols`.
    pub protocols: Vec<String>,
    /// `proxy_ssl_ciphers`.
    pub ciphers: String,
}

/// Backend TLS of a location, as the model holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackendTls {
    /// `namespace/name` of the Secret (the renderer names the files after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `ca.crt` (PEM, checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// `tls.crt` and `tls.key` as one PEM (checked: the key matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The settings.
    pub settings: BackendTlsSettings,
}

const PROTOCOLS: &[&str] = &["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];

fn protocols(v: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
    if list.is_empty() {
        return Err("expected TLS versions such as \"TLSv1.2 TLSv1.3\"".to_owned());
    }
    match list.iter().find(|p| !PROTOCOLS.contains(&p.as_str())) {
        Some(p) => Err(format!("{p:?} is not one of {}", PROTOCOLS.join(", "))),
        None => Ok(list),
    }
}

/// A DNS name (no variables).
fn name(v: &str) -> Result<String, String> {
    if value::is_dns_name(v) {
        Ok(v.to_ascii_lowercase())
    } else {
        Err("expected a DNS name such as app.demo.svc".to_owned())
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let secret = r.parse("proxy-ssl-secret", value::secret_ref)?;
    let verify = r.parse("proxy-ssl-verify", value::on_off)?;
    let depth = r.parse("proxy-ssl-verify-depth", |v| value::integer(v, 1, 16))?;
    let ssl_name = r.parse("proxy-ssl-name", name)?;
    let server_name = r.parse("proxy-ssl-server-name", value::on_off)?;
    let protocols = r.parse("proxy-ssl-protocols", protocols)?;
    let ciphers = r.parse("proxy-ssl-ciphers", value::cipher_list)?;
    let any = secret.is_some()
        || verify.is_some()
        || depth.is_some()
        || ssl_name.is_some()
        || server_name.is_some()
        || protocols.is_some()
        || ciphers.is_some();
    if !any {
        return Ok(());
    }
    // Verification needs the CA: without the Secret nothing would be checked.
    if verify == Some(true) && secret.is_none() {
        return Err(r.invalid(
            "proxy-ssl-verify",
            "needs proxy-ssl-secret with the ca.crt to verify against",
        ));
    }
    out.backend_tls = Some(BackendTlsAnnotations {
        secret,
        settings: BackendTlsSettings {
            verify: verify.unwrap_or(false),
            depth: depth.unwrap_or(1),
            name: ssl_name,
            server_name: server_name.unwrap_or(false),
            protocols: protocols
                .unwrap_or_else(|| vec!["TLSv1.2".to_owned(), "TLSv1.3".to_owned()]),
            ciphers: ciphers.unwrap_or_else(|| "DEFAULT".to_owned()),
        },
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed() {
        assert_eq!(
            protocols("TLSv1.2 TLSv1.3"),
            Ok(vec!["TLSv1.2".into(), "TLSv1.3".into()])
        );
        assert!(protocols("SSLv3").is_err());
        assert!(protocols("TLSv1.2;").is_err());
        assert!(value::cipher_list("HIGH:!aNULL:!MD5").is_ok());
        assert!(value::cipher_list("HIGH; return 200").is_err());
        assert!(value::cipher_list("$http_x").is_err());
        assert_eq!(name("App.Demo.svc"), Ok("app.demo.svc".into()));
        assert!(name("$host").is_err());
        assert!(name("a b").is_err());
    }
}
