//! The Secrets that annotations name, read and checked for one Ingress (basic
//! auth's users, client certificates' CA, backend TLS's CA and client
//! certificate): what cannot be set up rejects the Ingress, with a message naming
//! the annotation and the Secret.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;

use super::{Builder, tls};
use crate::annotations::{self, IngressAnnotations};
use crate::model::ResourceRef;

impl<'a> Builder<'a> {
    /// The Secret `written` (`name` or `namespace/name`) that an annotation of
    /// Ingress `r` names, and its `namespace/name`: only a Secret of `r`'s own
    /// namespace is read. Errors start with `what`.
    fn own_secret(
        &self,
        r: &ResourceRef,
        written: &str,
        what: &str,
    ) -> Result<(&'a Secret, String), String> {
        let (secret, (ns, name)) = own(&self.secrets, "Secret", r, written, what)?;
        Ok((secret, format!("{ns}/{name}")))
    }

    /// The ConfigMap `written` names, as [`Builder::own_secret`] a Secret (another
    /// namespace's would be read into this tenant's requests).
    fn own_config_map(
        &self,
        r: &ResourceRef,
        written: &str,
        what: &str,
    ) -> Result<&'a k8s_openapi::api::core::v1::ConfigMap, String> {
        own(&self.config_maps, "ConfigMap", r, written, what).map(|(cm, _)| cm)
    }

    /// The header lists Ingress `r`'s annotations name (`custom-headers`,
    /// `auth-proxy-set-headers`), read into `a`. A custom header the administrator
    /// does not allow (`global-allowed-response-headers`) rejects the Ingress.
    pub(super) fn header_lists(
        &self,
        r: &ResourceRef,
        a: &mut IngressAnnotations,
    ) -> Result<(), String> {
        let prefix = &self.snap.settings.annotations_prefix;
        if let Some(written) = a.custom_headers.clone() {
            let what = format!("annotation {prefix}/custom-headers {written}");
            let cm = self.own_config_map(r, &written, &what)?;
            let headers =
                super::header_lists::tenant_headers(cm).map_err(|e| format!("{what}: {e}"))?;
            let allowed = &self.global.allowed_response_headers;
            if let Some(h) = headers
                .iter()
                .find(|h| !allowed.iter().any(|a| a.eq_ignore_ascii_case(&h.name)))
            {
                return Err(format!(
                    "{what}: header {} is not allowed by the ConfigMap's \
                     global-allowed-response-headers ({})",
                    h.name,
                    match allowed.is_empty() {
                        true => "empty".to_owned(),
                        false => allowed.join(", "),
                    }
                ));
            }
            a.custom_header_list = headers;
        }
        if let Some(auth) = a.external_auth.as_mut()
            && let Some(written) = auth.proxy_set_headers_ref.clone()
        {
            let what = format!("annotation {prefix}/auth-proxy-set-headers {written}");
            let cm = self.own_config_map(r, &written, &what)?;
            auth.proxy_set_headers =
                super::header_lists::tenant_headers(cm).map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    }

    /// The basic authentication of Ingress `r`: its Secret (of `r`'s namespace)
    /// read and checked.
    pub(super) fn basic_auth(
        &self,
        r: &ResourceRef,
        a: &IngressAnnotations,
    ) -> Result<Option<annotations::BasicAuth>, String> {
        use annotations::basic_auth::{self, SecretType};
        let Some(ann) = &a.basic_auth else {
            return Ok(None);
        };
        let what = format!("auth-secret {}", ann.secret);
        let (secret, secret_name) = self.own_secret(r, &ann.secret, &what)?;
        let text = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_owned)
                .map_err(|_| format!("{what}: not UTF-8"))
        };
        let users = match ann.secret_type {
            SecretType::AuthFile => {
                let file = tls::secret_value(secret, "auth")
                    .ok_or_else(|| format!("{what}: the Secret has no key \"auth\""))?;
                basic_auth::htpasswd_users(text(&file)?.lines())
            }
            SecretType::AuthMap => {
                let mut entries: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for (k, v) in secret.data.iter().flatten() {
                    entries.insert(k.clone(), v.0.clone());
                }
                for (k, v) in secret.string_data.iter().flatten() {
                    entries.insert(k.clone(), v.clone().into_bytes());
                }
                let mut lines = Vec::new();
                for (user, hash) in &entries {
                    lines.push((user.clone(), text(hash)?));
                }
                basic_auth::map_users(lines.iter().map(|(u, h)| (u.as_str(), h.as_str())))
            }
        }
        .map_err(|e| format!("{what}: {e}"))?;
        Ok(Some(annotations::BasicAuth {
            realm: ann.realm.clone(),
            secret: secret_name.clone(),
            users,
        }))
    }

    /// The client certificate settings of Ingress `r`: its Secret (of `r`'s
    /// namespace) read and checked, and none of its hosts already served (by an
    /// older Ingress) with other settings: server-level, the oldest decides, and a
    /// younger Ingress is not served with less than it asked for.
    pub(super) fn client_certificates(
        &self,
        ing: &Ingress,
        r: &ResourceRef,
        a: &IngressAnnotations,
    ) -> Result<Option<annotations::ClientCertificates>, String> {
        use annotations::client_certificates as cc;
        let Some(ann) = &a.client_certificates else {
            return Ok(None);
        };
        let what = format!("auth-tls-secret {}", ann.secret);
        let (secret, secret_name) = self.own_secret(r, &ann.secret, &what)?;
        let field = |key: &str| {
            tls::secret_value(secret, key).map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let ca = field("ca.crt").ok_or_else(|| format!("{what}: the Secret has no ca.crt"))?;
        let ca = cc::ca_bundle(&ca).map_err(|e| format!("{what}: ca.crt: {e}"))?;
        let crl = field("ca.crl")
            .map(|c| cc::crl(&c).map_err(|e| format!("{what}: ca.crl: {e}")))
            .transpose()?;
        let certs = annotations::ClientCertificates {
            secret: secret_name.clone(),
            ca,
            crl,
            settings: ann.settings.clone(),
        };
        let hosts = ing
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|rule| rule.host.as_deref());
        for host in hosts {
            if let Some(older) = self.servers.get(&host.to_ascii_lowercase())
                && older.client_certificates.as_ref() != Some(&certs)
            {
                return Err(format!(
                    "host {host}: client certificate settings are the host's oldest Ingress's ({}), which sets others",
                    older.owner
                ));
            }
        }
        Ok(Some(certs))
    }

    /// The backend TLS of Ingress `r`: its `proxy-ssl-secret` (of `r`'s namespace)
    /// read and checked: `ca.crt` (needed to verify), `tls.crt` with `tls.key`.
    pub(super) fn backend_tls(
        &self,
        r: &ResourceRef,
        a: &IngressAnnotations,
    ) -> Result<Option<annotations::BackendTls>, String> {
        let Some(ann) = &a.backend_tls else {
            return Ok(None);
        };
        let Some(written) = &ann.secret else {
            return Ok(Some(annotations::BackendTls {
                secret: None,
                ca: None,
                client: None,
                settings: ann.settings.clone(),
            }));
        };
        let what = format!("proxy-ssl-secret {written}");
        let (secret, secret_name) = self.own_secret(r, written, &what)?;
        let ca = tls::secret_value(secret, "ca.crt")
            .map(|b| {
                annotations::client_certificates::ca_bundle(&String::from_utf8_lossy(&b))
                    .map_err(|e| format!("{what}: ca.crt: {e}"))
            })
            .transpose()?;
        if ann.settings.verify && ca.is_none() {
            return Err(format!(
                "{what}: the Secret has no ca.crt to verify the backend against"
            ));
        }
        let client = match tls::secret_value(secret, "tls.crt") {
            None => None,
            Some(_) => {
                let c = tls::certificate(secret, self.snap.settings.now)
                    .map_err(|e| format!("{what}: {e}"))?;
                Some(format!("{}{}", c.cert_pem, c.key_pem))
            }
        };
        if ca.is_none() && client.is_none() {
            return Err(format!(
                "{what}: the Secret has neither ca.crt nor tls.crt and tls.key"
            ));
        }
        Ok(Some(annotations::BackendTls {
            secret: Some(secret_name),
            ca,
            client,
            settings: ann.settings.clone(),
        }))
    }
}

/// The object of `kind` that `written` (`name` or `namespace/name`) names among
/// `objects`, for an annotation of Ingress `r`: only one of `r`'s own namespace is
/// read. Errors start with `what`.
fn own<'a, 'w, T>(
    objects: &HashMap<(&str, &str), &'a T>,
    kind: &str,
    r: &'w ResourceRef,
    written: &'w str,
    what: &str,
) -> Result<(&'a T, (&'w str, &'w str)), String> {
    let (ns, name) = written
        .split_once('/')
        .unwrap_or((r.namespace.as_str(), written));
    if ns != r.namespace {
        return Err(format!(
            "{what}: a {kind} of another namespace is not read (it must be in {})",
            r.namespace
        ));
    }
    let found = objects
        .get(&(ns, name))
        .ok_or_else(|| format!("{what}: {kind} {ns}/{name} not found"))?;
    Ok((*found, (ns, name)))
}
