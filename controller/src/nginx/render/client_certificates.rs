//! The view of `auth-tls-*` (model `ClientCertificates`) for the templates: the
//! server's `ssl_verify_client` with its CA file, and what each location adds (the
//! CN check and the headers telling the backend what was verified).

use ferrule_model::annotations::ClientCertificates;
use ferrule_model::annotations::client_certificates::Verify;
use serde::Serialize;

/// Server-level directives.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCertView {
    /// `ssl_verify_client`.
    pub verify: &'static str,
    /// `ssl_verify_depth`.
    pub depth: u32,
    /// `ssl_client_certificate` (absolute).
    pub ca_file: String,
    /// `ssl_crl` (absolute).
    pub crl_file: Option<String>,
    /// `error_page 495 496 =` this URL.
    pub error_page: Option<String>,
}

/// Location-level directives.
#[derive(Debug, Clone, Serialize, Default)]
pub struct LocationCertView {
    /// A regular expression the client's subject DN must match (`auth-tls-match-cn`).
    pub match_dn: Option<String>,
    /// `auth-tls-pass-certificate-to-upstream`.
    pub pass_certificate: bool,
}

/// The CA file of Secret `secret` (`namespace/name`), relative to the prefix.
pub fn ca_file(secret: &str) -> String {
    let digest = blake3::hash(secret.as_bytes()).to_hex();
    format!("conf/certs/client-ca-{}.pem", &digest[..32])
}

/// The CRL file of Secret `secret`.
pub fn crl_file(secret: &str) -> String {
    let digest = blake3::hash(secret.as_bytes()).to_hex();
    format!("conf/certs/client-crl-{}.pem", &digest[..32])
}

/// The server's view; `path` makes a prefix-relative file absolute.
pub fn server(c: &ClientCertificates, path: impl Fn(&str) -> String) -> ServerCertView {
    ServerCertView {
        verify: match c.settings.verify {
            Verify::On => "on",
            Verify::Off => "off",
            Verify::Optional => "optional",
            Verify::OptionalNoCa => "optional_no_ca",
        },
        depth: c.settings.depth,
        ca_file: path(&ca_file(&c.secret)),
        crl_file: c.crl.as_ref().map(|_| path(&crl_file(&c.secret))),
        error_page: c.settings.error_page.clone(),
    }
}

/// A location's view.
pub fn location(c: &ClientCertificates) -> LocationCertView {
    let names = &c.settings.match_cn;
    LocationCertView {
        // The names are typed (letters, digits, `.-_*@ `): escape what PCRE reads.
        match_dn: (!names.is_empty()).then(|| {
            let alternatives: Vec<String> = names
                .iter()
                .map(|n| n.replace('.', "\\.").replace('*', "\\*"))
                .collect();
            format!("(^|,)CN=({})(,|$)", alternatives.join("|"))
        }),
        pass_certificate: c.settings.pass_to_upstream,
    }
}
