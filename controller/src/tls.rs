//! The default certificate (served for unknown hosts and hosts without a valid
//! one), and the placeholder that server blocks name when a ticket key is set.

/// The default certificate's subject, as ingress-nginx names its "fake" one: a
/// blackbox probe or an alert that looks for it keeps working after a migration.
pub const DEFAULT_SUBJECT_CN: &str = "Kubernetes Ingress Controller Fake Certificate";

/// A self-signed certificate and key in one PEM, with ingress-nginx's identity for
/// it (`O=Acme Co`, [`DEFAULT_SUBJECT_CN`], `DNS:ingress.local`), valid for a year.
pub fn self_signed_default() -> anyhow::Result<Vec<u8>> {
    let mut params = identity();
    let now = std::time::SystemTime::now();
    params.not_before = now.into();
    params.not_after = (now + std::time::Duration::from_secs(365 * 24 * 3600)).into();
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()).into_bytes())
}

/// ingress-nginx's identity for its own certificates: `O=Acme Co`,
/// [`DEFAULT_SUBJECT_CN`], `DNS:ingress.local`.
fn identity() -> rcgen::CertificateParams {
    let mut params =
        rcgen::CertificateParams::new(vec!["ingress.local".to_owned()]).expect("a valid DNS name");
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "Acme Co");
    dn.push(rcgen::DnType::CommonName, DEFAULT_SUBJECT_CN);
    params.distinguished_name = dn;
    params
}

/// The certificate every server block names for NGINX (`ssl_certificate`) when
/// `ssl-session-ticket-key` is set, derived from the key alone.
///
/// NGINX binds a TLS session to a context hashed from that certificate, so with a
/// random certificate per controller a ticket that one replica issued is refused
/// by the others, though they share the ticket key. The Lua balancer serves every
/// host's certificate (and the default one) itself; this one is only the static
/// fallback. Its Ed25519 key comes from the ticket key through a keyed derivation,
/// so it is as secret as that key and the same on every replica and restart.
pub fn ticket_placeholder(ticket_key: &[u8]) -> Vec<u8> {
    let seed = blake3::derive_key("ferrule 2026 TLS session placeholder key", ticket_key);
    // PKCS#8 v1 of an Ed25519 private key (RFC 8410): this prefix, then the seed.
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend_from_slice(&seed);
    // Fixed inputs of fixed sizes: these cannot fail (the unit test runs them).
    let key = rcgen::KeyPair::try_from(pkcs8).expect("an Ed25519 PKCS#8 key");
    let mut params = identity();
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(2126, 1, 1);
    let cert = params.self_signed(&key).expect("fixed parameters sign");
    format!("{}{}", cert.pem(), key.serialize_pem()).into_bytes()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ticket_placeholder_is_a_function_of_the_key() {
        let a = super::ticket_placeholder(&[7; 80]);
        assert_eq!(
            a,
            super::ticket_placeholder(&[7; 80]),
            "the same on every replica"
        );
        assert_ne!(
            a,
            super::ticket_placeholder(&[8; 80]),
            "another key, another one"
        );
        let pem = String::from_utf8(a).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE") && pem.contains("BEGIN PRIVATE KEY"));
    }
}
