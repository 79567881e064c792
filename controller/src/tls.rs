//! The default certificate: served for unknown hosts and hosts without a valid one.

/// A self-signed certificate and key in one PEM (like ingress-nginx's "fake" one).
pub fn self_signed_default() -> anyhow::Result<Vec<u8>> {
    let cert = rcgen::generate_simple_self_signed(vec!["ferrule.invalid".to_owned()])?;
    Ok(format!("{}{}", cert.cert.pem(), cert.signing_key.serialize_pem()).into_bytes())
}
