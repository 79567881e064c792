//! `auth-tls-secret` and its companions: client certificate authentication
//! (mutual TLS) of a host, checked by NGINX against the CA bundle (`ca.crt`, and
//! `ca.crl` when present) of a Secret in the Ingress's namespace.
//!
//! Server-level: the host's oldest Ingress decides, as in ingress-nginx. A younger
//! Ingress that asks for other settings on that host is refused rather than served
//! without them. Plain HTTP to such a host is redirected to HTTPS (never served
//! without a certificate). `auth-tls-match-cn` is a typed list of names, never raw
//! regex text (CVE-2025-1097 injected configuration through it).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk, Scope::*};
use super::{AnnotationError, IngressAnnotations, Reader, external_auth, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "client certificates",
    keys: &[
        security(
            "auth-tls-secret",
            Risk::Medium,
            "Secret with the CA (ca.crt, ca.crl) clients are checked against",
        ),
        security(
            "auth-tls-verify-client",
            Risk::Medium,
            "on, off, optional or optional_no_ca",
        ),
        security(
            "auth-tls-verify-depth",
            Risk::Low,
            "maximum client chain depth (default 1)",
        ),
        security(
            "auth-tls-error-page",
            Risk::High,
            "where a failed verification redirects",
        ),
        security(
            "auth-tls-pass-certificate-to-upstream",
            Risk::Low,
            "client certificate sent to the backend (ssl-client-cert)",
        ),
        security(
            "auth-tls-match-cn",
            Risk::High,
            "CN=(a or b): the client certificate's CN must be one of the names",
        ),
    ],
};

const fn security(name: &'static str, risk: Risk, doc: &'static str) -> Key {
    Key {
        name,
        scope: Server,
        risk,
        security: true,
        supported: true,
        doc,
    }
}

/// `ssl_verify_client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    /// A valid certificate is required.
    #[default]
    On,
    /// No check.
    Off,
    /// Checked when sent.
    Optional,
    /// Asked for, not checked against the CA.
    OptionalNoCa,
}

/// The annotations as an Ingress sets them (the build reads the Secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificateAnnotations {
    /// `auth-tls-secret` as written.
    pub secret: String,
    /// The rest of the settings.
    pub settings: ClientCertificateSettings,
}

/// Every setting but the CA.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClientCertificateSettings {
    /// `auth-tls-verify-client`.
    pub verify: Verify,
    /// `auth-tls-verify-depth`.
    pub depth: u32,
    /// `auth-tls-error-page`.
    pub error_page: Option<String>,
    /// `auth-tls-pass-certificate-to-upstream`.
    pub pass_to_upstream: bool,
    /// `auth-tls-match-cn`: the CNs accepted (empty: any).
    pub match_cn: Vec<String>,
}

/// Client certificate authentication of a server, as the model holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClientCertificates {
    /// `namespace/name` of the Secret: the renderer names the CA's file after it.
    pub secret: String,
    /// `ca.crt`: the CA certificates (PEM, checked).
    pub ca: String,
    /// `ca.crl`, when present.
    pub crl: Option<String>,
    /// The settings.
    pub settings: ClientCertificateSettings,
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let secret = r.parse("auth-tls-secret", value::secret_ref)?;
    let verify = r.parse("auth-tls-verify-client", |v| match v {
        "on" => Ok(Verify::On),
        "off" => Ok(Verify::Off),
        "optional" => Ok(Verify::Optional),
        "optional_no_ca" => Ok(Verify::OptionalNoCa),
        _ => Err("expected on, off, optional or optional_no_ca".to_owned()),
    })?;
    let depth = r.parse("auth-tls-verify-depth", |v| value::integer(v, 1, 16))?;
    let error_page = r.parse("auth-tls-error-page", |v| external_auth::url(v, &[]))?;
    let pass_to_upstream = r.parse("auth-tls-pass-certificate-to-upstream", value::boolean)?;
    let match_cn = r.parse("auth-tls-match-cn", match_cn)?;
    let Some(secret) = secret else {
        for key in [
            "auth-tls-verify-client",
            "auth-tls-verify-depth",
            "auth-tls-error-page",
            "auth-tls-pass-certificate-to-upstream",
            "auth-tls-match-cn",
        ] {
            if r.get(key).is_some() {
                return Err(r.invalid(key, "without auth-tls-secret, nothing would be checked"));
            }
        }
        return Ok(());
    };
    out.client_certificates = Some(ClientCertificateAnnotations {
        secret,
        settings: ClientCertificateSettings {
            verify: verify.unwrap_or_default(),
            depth: depth.unwrap_or(1),
            error_page,
            pass_to_upstream: pass_to_upstream.unwrap_or(false),
            match_cn: match_cn.unwrap_or_default(),
        },
    });
    Ok(())
}

/// `CN=a`, `CN=a|b` or `CN=(a|b)`: names of letters, digits, `.`, `-`, `_`, `*`,
/// `@` and spaces (matched literally, never as a pattern).
fn match_cn(v: &str) -> Result<Vec<String>, String> {
    let list = v
        .strip_prefix("CN=")
        .ok_or("expected CN=name or CN=(name|name)")?;
    let list = list
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or(list);
    let names: Vec<String> = list.split('|').map(str::to_owned).collect();
    for n in &names {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_*@ ".contains(c));
        if !ok {
            return Err(format!(
                "{n:?} is not a name (letters, digits, . - _ * @ and spaces)"
            ));
        }
    }
    Ok(names)
}

/// Checks a CA bundle: PEM certificates only, at least one.
pub fn ca_bundle(pem: &str) -> Result<String, String> {
    let blocks = ::pem::parse_many(pem).map_err(|e| format!("invalid PEM: {e}"))?;
    if blocks.is_empty() {
        return Err("no certificate".to_owned());
    }
    if let Some(b) = blocks.iter().find(|b| b.tag() != "CERTIFICATE") {
        return Err(format!("unexpected PEM block {:?}", b.tag()));
    }
    for b in &blocks {
        x509_parser::parse_x509_certificate(b.contents())
            .map_err(|e| format!("invalid certificate: {e}"))?;
    }
    Ok(blocks.iter().map(::pem::encode).collect())
}

/// Checks a CRL: PEM `X509 CRL` blocks only, at least one.
pub fn crl(pem: &str) -> Result<String, String> {
    let blocks = ::pem::parse_many(pem).map_err(|e| format!("invalid PEM: {e}"))?;
    if blocks.is_empty() || blocks.iter().any(|b| b.tag() != "X509 CRL") {
        return Err("expected X509 CRL blocks".to_owned());
    }
    Ok(blocks.iter().map(::pem::encode).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_names() {
        assert_eq!(match_cn("CN=a.example").unwrap(), ["a.example"]);
        assert_eq!(match_cn("CN=(a|b c)").unwrap(), ["a", "b c"]);
        assert!(match_cn("a").is_err());
        assert!(match_cn("CN=.*\"; deny all; #").is_err());
        assert!(match_cn("CN=(a|)").is_err());
        assert!(match_cn("CN=a$").is_err());
    }
}
