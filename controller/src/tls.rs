//! The default certificate: served for unknown hosts and hosts without a valid one.

/// The default certificate's subject, as ingress-nginx names its "fake" one: a
/// blackbox probe or an alert that looks for it keeps working after a migration.
pub const DEFAULT_SUBJECT_CN: &str = "Kubernetes Ingress Controller Fake Certificate";

/// A self-signed certificate and key in one PEM, with ingress-nginx's identity for
/// it (`O=Acme Co`, [`DEFAULT_SUBJECT_CN`], `DNS:ingress.local`), valid for a year.
pub fn self_signed_default() -> anyhow::Result<Vec<u8>> {
    let mut params = rcgen::CertificateParams::new(vec!["ingress.local".to_owned()])?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "Acme Co");
    dn.push(rcgen::DnType::CommonName, DEFAULT_SUBJECT_CN);
    params.distinguished_name = dn;
    let now = std::time::SystemTime::now();
    params.not_before = now.into();
    params.not_after = (now + std::time::Duration::from_secs(365 * 24 * 3600)).into();
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()).into_bytes())
}
