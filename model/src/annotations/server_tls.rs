//! `ssl-ciphers`, `ssl-prefer-server-ciphers`: the TLS ciphers of a host, as its
//! oldest Ingress (the owner of its server settings) sets them, in place of the
//! ConfigMap's `ssl-ciphers` and NGINX's default order.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "server TLS",
    keys: &[
        key(
            "ssl-ciphers",
            Server,
            Low,
            "OpenSSL cipher list of the host (TLS 1.2 and older), instead of the ConfigMap's",
        ),
        key(
            "ssl-prefer-server-ciphers",
            Server,
            Low,
            "true: the host's cipher order wins over the client's",
        ),
    ],
};

/// A host's own cipher settings (none: the ConfigMap's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServerCiphers {
    /// `ssl_ciphers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ciphers: Option<String>,
    /// `ssl_prefer_server_ciphers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_server_ciphers: Option<bool>,
}

impl ServerCiphers {
    /// Whether the host keeps the ConfigMap's settings.
    pub fn is_empty(&self) -> bool {
        self.ciphers.is_none() && self.prefer_server_ciphers.is_none()
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.server_ciphers = ServerCiphers {
        ciphers: r.parse("ssl-ciphers", value::cipher_list)?,
        prefer_server_ciphers: r.parse("ssl-prefer-server-ciphers", value::boolean)?,
    };
    Ok(())
}
