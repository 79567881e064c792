//! The view of `proxy-ssl-*` (model `BackendTls`): a location's `proxy_ssl_*` (or
//! `grpc_ssl_*`) directives and the files they read, named after the Secret.

use ferrule_model::annotations::BackendTls;
use serde::Serialize;

use super::on_off;

/// Location-level directives.
#[derive(Debug, Clone, Serialize)]
pub(super) struct BackendTlsView {
    /// `grpc_ssl_*` (backend-protocol GRPCS), else `proxy_ssl_*`.
    grpc: bool,
    verify: &'static str,
    depth: u32,
    /// The name checked and sent by SNI.
    name: String,
    server_name: &'static str,
    protocols: Vec<String>,
    ciphers: String,
    /// `*_ssl_trusted_certificate` (absolute).
    ca_file: Option<String>,
    /// `*_ssl_certificate` and `*_ssl_certificate_key`: one file (absolute).
    client_file: Option<String>,
}

fn digest(secret: &str) -> String {
    blake3::hash(secret.as_bytes()).to_hex()[..32].to_owned()
}

/// The CA file of Secret `secret` (`namespace/name`), relative to the prefix.
pub(super) fn ca_file(secret: &str) -> String {
    format!("conf/certs/backend-ca-{}.pem", digest(secret))
}

/// The client certificate and key of Secret `secret`, relative to the prefix.
pub(super) fn client_file(secret: &str) -> String {
    format!("conf/certs/backend-client-{}.pem", digest(secret))
}

/// The view, with files relative to the prefix (see [`BackendTlsView::absolute`]);
/// `service` is the backend's `name.namespace.svc` (the default name).
pub(super) fn view(t: &BackendTls, grpc: bool, service: &str) -> BackendTlsView {
    let s = &t.settings;
    let secret = t.secret.as_deref().unwrap_or_default();
    BackendTlsView {
        grpc,
        verify: on_off(s.verify),
        depth: s.depth,
        // NGINX's own default where the location has no backend (it answers itself).
        name: s.name.clone().unwrap_or_else(|| match service {
            "" => "$proxy_host".to_owned(),
            s => s.to_owned(),
        }),
        server_name: on_off(s.server_name),
        protocols: s.protocols.clone(),
        ciphers: s.ciphers.clone(),
        ca_file: t.ca.as_ref().map(|_| ca_file(secret)),
        client_file: t.client.as_ref().map(|_| client_file(secret)),
    }
}

impl BackendTlsView {
    /// Makes the files absolute with `path` (they are read by the master).
    pub(super) fn absolute(&mut self, path: impl Fn(&str) -> String) {
        for f in [&mut self.ca_file, &mut self.client_file]
            .into_iter()
            .flatten()
        {
            *f = path(f);
        }
    }
}
