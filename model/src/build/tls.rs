//! TLS Secrets: parse the PEM, check that the key matches the certificate, that the
//! certificate covers the host and is not expired.

use k8s_openapi::api::core::v1::Secret;
use ring::signature::{self, KeyPair};
use x509_parser::prelude::*;

use crate::model::{Certificate, ResourceRef};

/// The most bytes a TLS Secret's `tls.crt` and `tls.key` may hold together. The
/// balancer keeps every certificate and key in NGINX shared memory that all tenants'
/// TLS shares (`--certificate-store-size`): a leaf, its intermediates and a key are a
/// few KB, and one Secret must not take a tenant's share of the store.
pub(crate) const MAX_TLS_PEM: usize = 128 * 1024;

/// Reads and checks a `kubernetes.io/tls` Secret. Errors name the field.
pub(crate) fn certificate(secret: &Secret, now: i64) -> Result<Certificate, String> {
    let ns = secret.metadata.namespace.as_deref().unwrap_or_default();
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let cert_pem = field(secret, "tls.crt")?;
    let key_pem = field(secret, "tls.key")?;

    // Kept in NGINX's shared memory: a bound keeps one Secret from filling the store
    // that every tenant's TLS uses.
    let total = cert_pem.len() + key_pem.len();
    if total > MAX_TLS_PEM {
        return Err(format!(
            "tls.crt and tls.key: {total} bytes together, more than the {MAX_TLS_PEM} a \
             certificate chain and its key may have"
        ));
    }
    let blocks = ::pem::parse_many(&cert_pem).map_err(|e| format!("tls.crt: invalid PEM: {e}"))?;
    let chain: Vec<&::pem::Pem> = blocks.iter().filter(|b| b.tag() == "CERTIFICATE").collect();
    let leaf = chain.first().ok_or("tls.crt: no CERTIFICATE block")?;
    let (_, cert) = X509Certificate::from_der(leaf.contents())
        .map_err(|e| format!("tls.crt: invalid certificate: {e}"))?;
    // NGINX reads the whole chain: a broken intermediate fails the handshake setup.
    for (i, b) in chain.iter().enumerate().skip(1) {
        X509Certificate::from_der(b.contents()).map_err(|e| {
            format!(
                "tls.crt: certificate {} of the chain is invalid: {e}",
                i + 1
            )
        })?;
    }
    let key = ::pem::parse(&key_pem).map_err(|e| format!("tls.key: invalid PEM: {e}"))?;
    // What is served, and kept in the store: the blocks read, not what surrounds them
    // (text after a block, other blocks: a private key pasted into tls.crt).
    let encode = |b: &::pem::Pem| {
        ::pem::encode_config(
            b,
            ::pem::EncodeConfig::new().set_line_ending(::pem::LineEnding::LF),
        )
    };
    let cert_pem: String = chain.iter().map(|b| encode(b)).collect();
    let key_pem = encode(&key);
    let spki = cert.public_key().subject_public_key.data.as_ref();
    if !key_matches(key.tag(), key.contents(), spki)? {
        return Err("tls.key does not match the certificate in tls.crt".to_owned());
    }

    let not_after = cert.validity().not_after.timestamp();
    if not_after < now {
        return Err(format!(
            "certificate in tls.crt expired at {}",
            cert.validity().not_after
        ));
    }
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                names.push(d.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        // Legacy certificates without SANs: fall back to the subject common name.
        for cn in cert.subject().iter_common_name() {
            if let Ok(s) = cn.as_str() {
                names.push(s.to_ascii_lowercase());
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(Certificate {
        secret: ResourceRef::new("Secret", ns, name),
        cert_pem,
        key_pem,
        names,
        not_after,
    })
}

fn field(secret: &Secret, key: &str) -> Result<String, String> {
    let bytes = secret_value(secret, key).ok_or_else(|| format!("{key}: missing"))?;
    String::from_utf8(bytes).map_err(|_| format!("{key}: not UTF-8 PEM"))
}

/// The value of `key` in `secret`: `data`, else `stringData` (a manifest's).
pub(crate) fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
}

pub(crate) fn covers(names: &[String], host: &str) -> bool {
    names.iter().any(|n| {
        if n == host {
            return true;
        }
        match (n.strip_prefix("*."), host.split_once('.')) {
            (Some(suffix), Some((label, rest))) => {
                !label.is_empty() && label != "*" && rest == suffix
            }
            _ => false,
        }
    })
}

/// Checks that a private key corresponds to the certificate's public key.
fn key_matches(tag: &str, der: &[u8], spki: &[u8]) -> Result<bool, String> {
    let rng = ring::rand::SystemRandom::new();
    let public: Vec<u8> = match tag {
        "RSA PRIVATE KEY" => signature::RsaKeyPair::from_der(der)
            .map_err(|e| format!("tls.key: invalid RSA key: {e}"))?
            .public_key()
            .as_ref()
            .to_vec(),
        "PRIVATE KEY" => {
            if let Ok(k) = signature::RsaKeyPair::from_pkcs8(der) {
                k.public_key().as_ref().to_vec()
            } else if let Some(k) = ecdsa_pkcs8(der, &rng) {
                k
            } else if let Ok(k) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
                k.public_key().as_ref().to_vec()
            } else {
                return Err("tls.key: unsupported or invalid PKCS#8 key".to_owned());
            }
        }
        "EC PRIVATE KEY" => ecdsa_pkcs8(&sec1_to_pkcs8(der, P256), &rng)
            .or_else(|| ecdsa_pkcs8(&sec1_to_pkcs8(der, P384), &rng))
            .ok_or("tls.key: unsupported or invalid EC key")?,
        other => return Err(format!("tls.key: unsupported PEM block {other:?}")),
    };
    Ok(public == spki)
}

fn ecdsa_pkcs8(der: &[u8], rng: &ring::rand::SystemRandom) -> Option<Vec<u8>> {
    [
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
    ]
    .into_iter()
    .find_map(|alg| signature::EcdsaKeyPair::from_pkcs8(alg, der, rng).ok())
    .map(|k| k.public_key().as_ref().to_vec())
}

const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// Wraps a SEC1 `EC PRIVATE KEY` in a PKCS#8 envelope for `curve`, so that ring can
/// check it (ring rejects the wrapping if the curve is wrong).
fn sec1_to_pkcs8(sec1: &[u8], curve: &[u8]) -> Vec<u8> {
    let algorithm = der(0x30, &[EC_PUBLIC_KEY, curve].concat());
    der(
        0x30,
        &[&[0x02, 0x01, 0x00][..], &algorithm, &der(0x04, sec1)].concat(),
    )
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn wildcard_names_cover_exactly_one_label() {
        let names = vec!["*.foo.com".to_owned(), "foo.com".to_owned()];
        assert!(covers(&names, "bar.foo.com"));
        assert!(covers(&names, "foo.com"));
        assert!(!covers(&names, "baz.bar.foo.com"));
        assert!(!covers(&names, "bar.other.com"));
        assert!(!covers(&["*.foo.com".to_owned()], "foo.com"));
    }
}
