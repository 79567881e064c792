//! `backend-protocol`, `proxy-body-size`, `proxy-*-timeout`, `service-upstream`.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "proxy",
    keys: &[
        key(
            "backend-protocol",
            Location,
            Low,
            "HTTP, HTTPS, AUTO_HTTP (the client's scheme, no kept connections), GRPC or GRPCS to the backend; FCGI is refused",
        ),
        key(
            "proxy-body-size",
            Location,
            Low,
            "largest request body (client_max_body_size)",
        ),
        key(
            "proxy-connect-timeout",
            Location,
            Low,
            "seconds to connect to the backend",
        ),
        key(
            "proxy-read-timeout",
            Location,
            Low,
            "seconds between two reads from the backend",
        ),
        key(
            "proxy-send-timeout",
            Location,
            Low,
            "seconds between two writes to the backend",
        ),
        key(
            "service-upstream",
            Backend,
            Low,
            "proxy to the Service's ClusterIP instead of its endpoints",
        ),
    ],
};

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
    /// HTTP/1.1 in the client's scheme: TLS to the backend when the client came
    /// over TLS (ingress-nginx's `proxy_pass $scheme://`).
    #[serde(rename = "AUTO_HTTP")]
    AutoHttp,
}

fn protocol(v: &str) -> Result<BackendProtocol, String> {
    match v.to_ascii_uppercase().as_str() {
        "HTTP" => Ok(BackendProtocol::Http),
        "HTTPS" => Ok(BackendProtocol::Https),
        "GRPC" => Ok(BackendProtocol::Grpc),
        "GRPCS" => Ok(BackendProtocol::Grpcs),
        "AUTO_HTTP" => Ok(BackendProtocol::AutoHttp),
        "FCGI" => Err("FastCGI is not supported by Ferrule".to_owned()),
        _ => Err("expected one of HTTP, HTTPS, AUTO_HTTP, GRPC, GRPCS".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.backend_protocol = r.parse("backend-protocol", protocol)?;
    out.proxy_body_size = r.parse("proxy-body-size", value::size)?;
    out.proxy_connect_timeout = r.parse("proxy-connect-timeout", value::seconds)?;
    out.proxy_read_timeout = r.parse("proxy-read-timeout", value::seconds)?;
    out.proxy_send_timeout = r.parse("proxy-send-timeout", value::seconds)?;
    out.service_upstream = r.parse("service-upstream", value::boolean)?;
    Ok(())
}
