//! `backend-protocol`, `proxy-body-size`, `proxy-*-timeout`, `service-upstream`.

use serde::{Deserialize, Serialize};

use super::{AnnotationError, IngressAnnotations, Reader, value};

/// Protocol NGINX speaks to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum BackendProtocol {
    /// Plain HTTP/1.1 (default).
    #[default]
    Http,
    /// HTTP/1.1 over TLS.
    Https,
    /// gRPC over cleartext HTTP/2.
    Grpc,
    /// gRPC over TLS.
    Grpcs,
}

fn protocol(v: &str) -> Result<BackendProtocol, String> {
    match v.to_ascii_uppercase().as_str() {
        "HTTP" => Ok(BackendProtocol::Http),
        "HTTPS" => Ok(BackendProtocol::Https),
        "GRPC" => Ok(BackendProtocol::Grpc),
        "GRPCS" => Ok(BackendProtocol::Grpcs),
        "AUTO_HTTP" | "FCGI" => Err("not supported by Ferrule".to_owned()),
        _ => Err("expected one of HTTP, HTTPS, GRPC, GRPCS".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.backend_protocol = r.parse("backend-protocol", protocol)?;
    out.proxy_body_size = r.parse("proxy-body-size", value::size)?;
    out.proxy_connect_timeout = r.parse("proxy-connect-timeout", value::seconds)?;
    out.proxy_read_timeout = r.parse("proxy-read-timeout", value::seconds)?;
    out.proxy_send_timeout = r.parse("proxy-send-timeout", value::seconds)?;
    out.service_upstream = r
        .parse("service-upstream", value::boolean)?
        .unwrap_or(false);
    Ok(())
}
