//! The admission webhook's certificate, kept by the controller itself
//! (`--admission-secret` and `--admission-webhook-configuration`), so that an install
//! needs no certificate Job and no cert-manager.
//!
//! The lease holder issues a CA and a serving certificate for the names the
//! ValidatingWebhookConfiguration calls (its Services' DNS names, its URLs' hosts),
//! stores them in the Secret (`ca.crt`, `tls.crt`, `tls.key`), sets the
//! configuration's `caBundle`, and issues new ones when a third of the lifetime is
//! left. Every replica serves what the Secret holds, written to files that the
//! webhook reads again when they change.
//!
//! A rotation never breaks a replica that still serves the old certificate: the new
//! `caBundle` holds the new CA and the previous one, and it is set before the Secret
//! changes. No CA key is kept anywhere: each rotation issues a new CA.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::watch;

/// Where the certificate is kept and for which webhook configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose `caBundle` is set.
    pub webhook_configuration: String,
    /// Lifetime of a serving certificate (its CA lives twice as long).
    pub lifetime: Duration,
    /// Where `tls.crt` and `tls.key` are written for the webhook to serve.
    pub dir: PathBuf,
}

impl Options {
    /// The certificate file the webhook serves.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    /// The key file the webhook serves.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("tls.key")
    }
}

/// What the Secret holds, PEM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stored {
    /// The CAs a client should trust: the newest first, then the previous one.
    pub ca_bundle: String,
    /// The serving certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

/// Certificates are backdated this much, for clocks that are a little behind.
const BACKDATE: i64 = 300;

/// The names a client of `configuration` checks the certificate against: the DNS
/// names of each webhook's Service and the host of each webhook's URL.
pub fn served_names(configuration: &ValidatingWebhookConfiguration) -> Vec<String> {
    let mut names = Vec::new();
    for webhook in configuration.webhooks.iter().flatten() {
        let client = &webhook.client_config;
        if let Some(svc) = &client.service {
            let (name, ns) = (&svc.name, &svc.namespace);
            names.push(name.clone());
            names.push(format!("{name}.{ns}"));
            names.push(format!("{name}.{ns}.svc"));
            names.push(format!("{name}.{ns}.svc.cluster.local"));
        }
        if let Some(host) = client.url.as_deref().and_then(url_host) {
            names.push(host);
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The host of an `https://host[:port]/path` URL, without IPv6 brackets.
fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// Why `stored` cannot serve `names` until a third of `lifetime` from `now`, or
/// `None` when it can.
pub fn renewal(
    stored: Option<&Stored>,
    names: &[String],
    lifetime: Duration,
    now: i64,
) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let Some(stored) = stored else {
        return Some("there is no certificate yet".to_owned());
    };
    let ders = match pem_certificates(&stored.cert) {
        Ok(d) if !d.is_empty() => d,
        _ => return Some("tls.crt holds no certificate".to_owned()),
    };
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(&ders[0].1) else {
        return Some("tls.crt does not parse".to_owned());
    };
    let validity = leaf.validity();
    let margin = (lifetime.as_secs() / 3) as i64;
    if validity.not_after.timestamp() - now < margin {
        return Some(format!(
            "the certificate expires at {} (renewed with a third of its lifetime left)",
            validity.not_after
        ));
    }
    if validity.not_before.timestamp() > now {
        return Some(format!(
            "the certificate is valid only from {}",
            validity.not_before
        ));
    }
    let mut covered: Vec<String> = Vec::new();
    if let Ok(Some(san)) = leaf.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => covered.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(ip) => covered.extend(ip_string(ip)),
                _ => {}
            }
        }
    }
    if let Some(missing) = names
        .iter()
        .find(|n| !covered.contains(&n.to_ascii_lowercase()))
    {
        return Some(format!("the certificate is not valid for {missing}"));
    }
    match rcgen::KeyPair::from_pem(&stored.key) {
        Ok(key) if key.public_key_raw() == leaf.public_key().subject_public_key.data.as_ref() => {}
        _ => return Some("tls.key is not the certificate's key".to_owned()),
    }
    let issued_by_bundle = pem_certificates(&stored.ca_bundle)
        .unwrap_or_default()
        .iter()
        .filter_map(|(_, der)| x509_parser::parse_x509_certificate(der).ok())
        .any(|(_, ca)| {
            ca.subject().as_raw() == leaf.issuer().as_raw()
                && leaf.verify_signature(Some(ca.public_key())).is_ok()
        });
    if !issued_by_bundle {
        return Some("ca.crt holds no CA that signed the certificate".to_owned());
    }
    None
}

fn ip_string(raw: &[u8]) -> Option<String> {
    match raw.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(raw).ok()?).to_string()),
        16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(raw).ok()?).to_string()),
        _ => None,
    }
}

/// The certificates of a PEM text, each as its PEM block and its DER.
fn pem_certificates(pem: &str) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    for block in pem.split_inclusive(END).filter(|b| b.contains(END)) {
        let block = &block[block
            .find("-----BEGIN CERTIFICATE-----")
            .context("a PEM block")?..];
        let (_, parsed) = x509_parser::pem::parse_x509_pem(block.as_bytes())
            .map_err(|e| anyhow::anyhow!("a PEM certificate: {e}"))?;
        out.push((format!("{block}\n"), parsed.contents));
    }
    Ok(out)
}

/// A new CA and a serving certificate for `names`; the bundle keeps the previous
/// CA while it is valid, for the replicas that still serve what it signed.
pub fn issue(
    names: &[String],
    lifetime: Duration,
    now: i64,
    previous: Option<&Stored>,
) -> anyhow::Result<Stored> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    anyhow::ensure!(
        !names.is_empty(),
        "the webhook configuration names no Service or URL"
    );
    let at = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).context("a certificate date");
    let life = lifetime.as_secs() as i64;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // A subject of its own per CA: the bundle may hold two.
    ca.distinguished_name
        .push(DnType::CommonName, format!("ferrule-admission-ca-{now}"));
    (ca.not_before, ca.not_after) = (at(now - BACKDATE)?, at(now + 2 * life)?);
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names.to_vec())?;
    leaf.distinguished_name
        .push(DnType::CommonName, names[0].clone());
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    (leaf.not_before, leaf.not_after) = (at(now - BACKDATE)?, at(now + life)?);
    let cert = leaf.signed_by(&key, &issuer)?.pem();
    let mut ca_bundle = ca_pem;
    if let Some(previous) = previous.and_then(|p| newest_valid_ca(&p.ca_bundle, now)) {
        ca_bundle.push_str(&previous);
    }
    Ok(Stored {
        ca_bundle,
        cert,
        key: key.serialize_pem(),
    })
}

/// The newest CA of `bundle` that is still valid at `now`, PEM.
fn newest_valid_ca(bundle: &str, now: i64) -> Option<String> {
    pem_certificates(bundle)
        .ok()?
        .into_iter()
        .filter_map(|(pem, der)| {
            let (_, c) = x509_parser::parse_x509_certificate(&der).ok()?;
            let v = c.validity();
            (v.not_after.timestamp() > now).then(|| (v.not_before.timestamp(), pem))
        })
        .max_by_key(|(from, _)| *from)
        .map(|(_, pem)| pem)
}

// ---------------------------------------------------------------------------------------
// The loop: the lease holder issues and publishes, every replica serves

/// Keeps the certificate until the process exits.
pub async fn run(client: Client, opts: Options, mut leader: watch::Receiver<bool>) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &opts.namespace);
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client);
    // Checked often enough to renew well within a third of the lifetime, and to set
    // a caBundle again soon after an upgrade removed it.
    let every = (opts.lifetime / 10).clamp(Duration::from_secs(1), Duration::from_secs(10));
    let mut written: Option<Stored> = None;
    loop {
        let leading = *leader.borrow();
        let wait = match tick(&secrets, &configurations, &opts, leading, &mut written).await {
            Ok(()) if written.is_some() => every,
            // A replica waits for the lease holder's first certificate: look again soon.
            Ok(()) => every.min(Duration::from_secs(2)),
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    secret = format!("{}/{}", opts.namespace, opts.secret),
                    "admission webhook certificate"
                );
                every.min(Duration::from_secs(5))
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {},
            r = leader.changed() => if r.is_err() { return },
        }
    }
}

async fn tick(
    secrets: &Api<Secret>,
    configurations: &Api<ValidatingWebhookConfiguration>,
    opts: &Options,
    leading: bool,
    written: &mut Option<Stored>,
) -> anyhow::Result<()> {
    let secret = secrets
        .get_opt(&opts.secret)
        .await
        .with_context(|| format!("reading Secret {}/{}", opts.namespace, opts.secret))?;
    let mut stored = secret.as_ref().and_then(stored_of);
    if leading {
        let configuration = configurations
            .get_opt(&opts.webhook_configuration)
            .await?
            .with_context(|| {
                format!(
                    "ValidatingWebhookConfiguration {} not found",
                    opts.webhook_configuration
                )
            })?;
        let names = served_names(&configuration);
        if let Some(reason) = renewal(stored.as_ref(), &names, opts.lifetime, now()) {
            tracing::info!(%reason, names = names.join(","), "issuing the admission webhook certificate");
            let new = issue(&names, opts.lifetime, now(), stored.as_ref())?;
            // The new CA is trusted before anyone serves what it signed.
            set_ca_bundle(configurations, &configuration, &new.ca_bundle).await?;
            store(secrets, opts, &configuration, secret, &new).await?;
            stored = Some(new);
        } else if let Some(s) = &stored {
            set_ca_bundle(configurations, &configuration, &s.ca_bundle).await?;
        }
    }
    if let Some(s) = stored
        && written.as_ref() != Some(&s)
    {
        write_files(&opts.dir, &s)?;
        tracing::info!(dir = %opts.dir.display(), "admission webhook certificate written");
        *written = Some(s);
    }
    Ok(())
}

fn stored_of(secret: &Secret) -> Option<Stored> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| String::from_utf8(data.get(k)?.0.clone()).ok();
    Some(Stored {
        ca_bundle: text("ca.crt")?,
        cert: text("tls.crt")?,
        key: text("tls.key")?,
    })
}

/// Sets `caBundle` on every webhook of `configuration` that has another.
async fn set_ca_bundle(
    api: &Api<ValidatingWebhookConfiguration>,
    configuration: &ValidatingWebhookConfiguration,
    bundle: &str,
) -> anyhow::Result<()> {
    let name = configuration.metadata.name.clone().unwrap_or_default();
    let stale: Vec<serde_json::Value> = configuration
        .webhooks
        .iter()
        .flatten()
        .filter(|w| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes())
        })
        .map(|w| {
            serde_json::json!({
                "name": w.name,
                "clientConfig": { "caBundle": ByteString(bundle.as_bytes().to_vec()) },
            })
        })
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    // Webhooks merge by name: the other fields stay the user's (or Helm's).
    let patch = serde_json::json!({ "webhooks": stale });
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .with_context(|| {
            format!("setting the caBundle of ValidatingWebhookConfiguration {name}")
        })?;
    tracing::info!(configuration = %name, "admission webhook caBundle set");
    Ok(())
}

/// Creates the Secret, or replaces the one read (a conflict means another holder
/// wrote first: the next look serves theirs). A new Secret carries the
/// configuration's labels and is owned by it: deleting the configuration (`helm
/// uninstall`) deletes the Secret.
async fn store(
    api: &Api<Secret>,
    opts: &Options,
    configuration: &ValidatingWebhookConfiguration,
    current: Option<Secret>,
    stored: &Stored,
) -> anyhow::Result<()> {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let data = [
        ("ca.crt", bytes(&stored.ca_bundle)),
        ("tls.crt", bytes(&stored.cert)),
        ("tls.key", bytes(&stored.key)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let context = || format!("writing Secret {}/{}", opts.namespace, opts.secret);
    match current {
        Some(mut secret) => {
            secret.data = Some(data);
            api.replace(&opts.secret, &PostParams::default(), &secret)
                .await
                .with_context(context)?;
        }
        None => {
            let mut labels = configuration.metadata.labels.clone().unwrap_or_default();
            labels.insert(
                "app.kubernetes.io/managed-by".to_owned(),
                "ferrule".to_owned(),
            );
            let owner = OwnerReference {
                api_version: "admissionregistration.k8s.io/v1".to_owned(),
                kind: "ValidatingWebhookConfiguration".to_owned(),
                name: configuration.metadata.name.clone().unwrap_or_default(),
                uid: configuration.metadata.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            };
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(opts.secret.clone()),
                    namespace: Some(opts.namespace.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![owner]),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(data),
                ..Secret::default()
            };
            api.create(&PostParams::default(), &secret)
                .await
                .with_context(context)?;
        }
    }
    Ok(())
}

/// Writes the key, then the certificate, each by a rename: the webhook never reads
/// half a file.
fn write_files(dir: &Path, stored: &Stored) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    for (name, content) in [("tls.key", &stored.key), ("tls.crt", &stored.cert)] {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(content.as_bytes())?;
        tmp.persist(dir.join(name))
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    Ok(())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests;
