//! The `stream` block: one server per TCP or UDP service. NGINX's stream subsystem
//! has no balancer Ferrule can post to, so each connection's peer is picked by
//! `njs/stream.js` from the backend's peers file, which the controller rewrites when
//! its endpoints change (`nginx::stream_peers`): no reload for endpoints, as in HTTP.

use ferrule_model::{Model, StreamProtocol};
use serde::Serialize;

use super::{NJS_DIR, Renderer, STREAM_PEERS_DIR, literal_in_variables, source};

/// What the `stream` block needs.
#[derive(Serialize)]
pub(super) struct StreamsView {
    /// `js_path`: the installed njs sources.
    njs_dir: String,
    /// `js_import`: the peer picker.
    script: String,
    /// `js_var $ferrule_stream_peers`: the directory of peers files.
    peers_dir: String,
    servers: Vec<StreamServerView>,
}

#[derive(Serialize)]
struct StreamServerView {
    /// `ConfigMap/namespace/name`, for the source markers.
    source: String,
    /// `tcp/9000`, for people reading the file.
    name: String,
    listen: Vec<String>,
    udp: bool,
    decode_proxy_protocol: bool,
    encode_proxy_protocol: bool,
    /// `$ferrule_backend`: the peers file the picker reads.
    backend: String,
}

/// The view, when the model has streams.
pub(super) fn view(r: &Renderer, model: &Model) -> Option<StreamsView> {
    if model.streams.is_empty() {
        return None;
    }
    let servers = (model.streams.iter())
        .map(|s| StreamServerView {
            source: source(&s.owner),
            name: format!("{}/{}", s.protocol, s.port),
            listen: r.listen(model, s.port),
            udp: s.protocol == StreamProtocol::Udp,
            decode_proxy_protocol: s.decode_proxy_protocol,
            encode_proxy_protocol: s.encode_proxy_protocol,
            backend: s.backend.clone(),
        })
        .collect();
    Some(StreamsView {
        njs_dir: r.path(NJS_DIR),
        script: r.path(&format!("{NJS_DIR}/stream.js")),
        // `js_var` expands variables in its value: a `$` in the prefix is literal.
        peers_dir: literal_in_variables(&r.worker_path(STREAM_PEERS_DIR)),
        servers,
    })
}
