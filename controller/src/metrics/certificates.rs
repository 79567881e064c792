//! `nginx_ingress_controller_ssl_expire_time_seconds` and `_ssl_certificate_info`:
//! per host that NGINX serves with a certificate of its own, with ingress-nginx's
//! labels (the Secret's `namespace`, the controller `class`, `host`, `secret_name`
//! and the certificate's `identifier`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ferrule_model::{Certificate, Model};
use x509_parser::prelude::*;

use super::text::{Kind, header, sample};

const EXPIRE: &str = "nginx_ingress_controller_ssl_expire_time_seconds";
const INFO: &str = "nginx_ingress_controller_ssl_certificate_info";

/// What the info metric says of a certificate (its leaf).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Described {
    /// The issuer's `serialNumber` attribute and the serial, as ingress-nginx forms it.
    identifier: String,
    serial: String,
    issuer_organization: String,
    issuer_common_name: String,
    public_key_algorithm: String,
}

/// Parsed certificates, kept while the model's certificates stay the same.
#[derive(Debug, Default)]
pub struct Certificates {
    cache: Mutex<HashMap<String, (blake3::Hash, Described)>>,
    /// The certificate map last described (shared by models that differ in
    /// endpoints only): its entries need no hashing again.
    last: Mutex<Option<Arc<BTreeMap<String, Certificate>>>>,
}

impl Certificates {
    /// Appends both metrics for `model`.
    pub fn encode(&self, out: &mut String, class: &str, model: &Model) {
        let described = self.describe(&model.certificates);
        let mut rows = Vec::new();
        for s in model.servers.iter() {
            let Some(key) = s.tls.as_ref().and_then(|t| t.certificate.as_ref()) else {
                continue;
            };
            if s.host == ferrule_model::DEFAULT_SERVER {
                continue;
            }
            if let (Some(c), Some(d)) = (model.certificates.get(key), described.get(key)) {
                rows.push((s.host.as_str(), c, d));
            }
        }
        if rows.is_empty() {
            return;
        }
        header(
            out,
            EXPIRE,
            Kind::Gauge,
            "Number of seconds since 1970 to the SSL Certificate expire. An example to check if this certificate will expire in 10 days is: \"nginx_ingress_controller_ssl_expire_time_seconds < (time() + (10 * 24 * 3600))\"",
        );
        let base = |host: &str, c: &Certificate, d: &Described| -> Vec<(&'static str, String)> {
            vec![
                ("namespace", c.secret.namespace.clone()),
                ("class", class.to_owned()),
                ("host", host.to_owned()),
                ("secret_name", c.secret.name.clone()),
                ("identifier", d.identifier.clone()),
            ]
        };
        for (host, c, d) in &rows {
            let l = base(host, c, d);
            let refs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            sample(out, EXPIRE, &refs, c.not_after as f64);
        }
        header(
            out,
            INFO,
            Kind::Gauge,
            "Hold all labels associated to a certificate",
        );
        for (host, c, d) in &rows {
            let mut l = base(host, c, d);
            l.extend([
                ("issuer_organization", d.issuer_organization.clone()),
                ("issuer_common_name", d.issuer_common_name.clone()),
                ("serial_number", d.serial.clone()),
                ("public_key_algorithm", d.public_key_algorithm.clone()),
            ]);
            let refs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            sample(out, INFO, &refs, 1.0);
        }
    }

    /// Every certificate of the map, described (parsed once per content).
    fn describe(&self, certs: &Arc<BTreeMap<String, Certificate>>) -> HashMap<String, Described> {
        let mut cache = self.cache.lock().expect("metrics lock");
        let mut last = self.last.lock().expect("metrics lock");
        let same = last.as_ref().is_some_and(|l| Arc::ptr_eq(l, certs));
        if !same {
            let mut next = HashMap::with_capacity(certs.len());
            for (key, c) in certs.iter() {
                let digest = blake3::hash(c.cert_pem.as_bytes());
                let d = match cache.remove(key) {
                    Some((h, d)) if h == digest => d,
                    _ => describe(&c.cert_pem),
                };
                next.insert(key.clone(), (digest, d));
            }
            *cache = next;
            *last = Some(certs.clone());
        }
        cache
            .iter()
            .map(|(k, (_, d))| (k.clone(), d.clone()))
            .collect()
    }
}

/// The first attribute's text ("" when none, or not text).
fn first<'a>(mut it: impl Iterator<Item = &'a AttributeTypeAndValue<'a>>) -> String {
    it.next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The leaf of a PEM chain, described; empty fields when it does not parse (the
/// model checked it already).
fn describe(pem: &str) -> Described {
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(pem.as_bytes()) else {
        return Described::default();
    };
    let Ok(cert) = block.parse_x509() else {
        return Described::default();
    };
    let issuer = cert.issuer();
    let issuer_serial =
        first(issuer.iter_by_oid(&x509_parser::oid_registry::OID_X509_SERIALNUMBER));
    let serial = cert.serial.to_string();
    let algorithm = cert.public_key().algorithm.algorithm.to_id_string();
    Described {
        identifier: format!("{issuer_serial}-{serial}"),
        serial,
        issuer_organization: first(issuer.iter_organization()),
        issuer_common_name: first(issuer.iter_common_name()),
        public_key_algorithm: match algorithm.as_str() {
            "1.2.840.113549.1.1.1" | "1.2.840.113549.1.1.10" => "RSA",
            "1.2.840.10045.2.1" => "ECDSA",
            "1.3.101.112" => "Ed25519",
            "1.2.840.10040.4.1" => "DSA",
            _ => "Unknown",
        }
        .to_owned(),
    }
}
