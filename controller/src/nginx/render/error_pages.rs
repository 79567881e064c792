//! The view of `custom-http-errors` (model `ErrorPages`): the named location a
//! server sends error pages through, one per error backend, and what a location
//! adds. `error_page` keeps the original status (no `=`): the error backend
//! writes the body, never the status a client sees.

use ferrule_model::{ErrorPages, Location, Model};
use serde::Serialize;

use super::literal_in_variables;

/// One error backend of a server: its named location.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(super) struct ErrorLocationView {
    /// `@ferrule_errors_<digest of the backend>`.
    name: String,
    /// `$ferrule_backend` there.
    backend: String,
}

/// What a location with error pages adds.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ErrorPagesView {
    codes: Vec<u16>,
    location: String,
    intercept: bool,
    /// What the error backend is told (ingress-nginx's X-Namespace, X-Ingress-Name,
    /// X-Service-Name, X-Service-Port).
    namespace: String,
    ingress: String,
    service: String,
    service_port: String,
}

/// The server's and the location's views of `e`, the error pages of `l`.
pub(super) fn view(
    model: &Model,
    l: &Location,
    e: &ErrorPages,
) -> (ErrorLocationView, ErrorPagesView) {
    let digest = blake3::hash(e.backend.as_bytes()).to_hex();
    let name = format!("@ferrule_errors_{}", &digest[..16]);
    let (service, service_port) = match &l.target {
        ferrule_model::Target::Backend(b) => model
            .backends
            .get(b)
            .map(|b| (b.service.name.clone(), b.service_port.clone()))
            .unwrap_or_default(),
        ferrule_model::Target::Status(_) => Default::default(),
    };
    (
        ErrorLocationView {
            name: name.clone(),
            backend: literal_in_variables(&e.backend),
        },
        ErrorPagesView {
            codes: e.codes.clone(),
            location: name,
            intercept: e.intercept,
            // `set` expands variables: each is literal.
            namespace: literal_in_variables(&l.owner.namespace),
            ingress: literal_in_variables(&l.owner.name),
            service: literal_in_variables(&service),
            service_port: literal_in_variables(&service_port),
        },
    )
}
