//! The view of `mirror-target` (model `Mirror`): the internal location a server
//! sends the copies through, and what a location adds to make them.

use ferrule_model::annotations::Mirror;
use serde::Serialize;

/// One mirror of a server: its internal location (`location = ...`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(super) struct MirrorView {
    /// The internal location's path (404 from outside).
    location: String,
    /// `proxy_pass` of the copies.
    url: String,
    /// Their Host header.
    host: String,
    /// Whether they carry the body (else NGINX's example: no body, no
    /// Content-Length, which would make the target wait for one).
    request_body: bool,
}

/// What a location with a mirror adds.
#[derive(Debug, Clone, Serialize)]
pub(super) struct MirrorLocationView {
    /// The internal location the copies go through.
    location: String,
    request_body: &'static str,
}

/// The server's and the location's views of `m`. Locations with the same target,
/// host and body setting share one internal location (its path is their digest).
pub(super) fn view(m: &Mirror) -> (MirrorView, MirrorLocationView) {
    let key = format!("{}\n{}\n{}", m.target, m.host, m.request_body);
    let digest = blake3::hash(key.as_bytes()).to_hex();
    let location = format!("/_ferrule_mirror_{}", &digest[..16]);
    (
        MirrorView {
            location: location.clone(),
            url: m.target.clone(),
            host: m.host.clone(),
            request_body: m.request_body,
        },
        MirrorLocationView {
            location,
            request_body: super::on_off(m.request_body),
        },
    )
}
