//! The `stream` block: one server per TCP or UDP service, and the TLS router of
//! `--enable-ssl-passthrough`. NGINX's stream subsystem has no balancer Ferrule can
//! post to, so a connection's peers come from the backend's peers file, which the
//! controller rewrites when its endpoints change (`nginx::stream_peers`): no reload
//! for endpoints, as in HTTP. Ferrule's stream module reads it into an upstream, so
//! that a connection that cannot reach an endpoint tries the next
//! (`proxy-stream-next-upstream*`); without the module `njs/stream.js` picks one.

use ferrule_model::{Model, StreamProtocol};
use serde::Serialize;

use super::{
    HTTPS_SOCKET, NJS_DIR, PASSTHROUGH_SOCKET, Renderer, STREAM_PEERS_DIR, literal_in_variables,
    source,
};

/// What the `stream` block needs.
#[derive(Serialize)]
pub(super) struct StreamsView {
    /// `js_path`: the installed njs sources.
    njs_dir: String,
    /// `js_import`: the peer picker.
    script: String,
    /// `js_var $ferrule_stream_peers`: the directory of peers files.
    peers_dir: String,
    /// The same, as it is, for the stream module's `ferrule_stream_peers` (which
    /// expands no variable); `None` without the module.
    module_peers_dir: Option<String>,
    servers: Vec<StreamServerView>,
    /// The Ingresses' `stream-snippet`s, each between its source markers.
    snippets: Vec<StreamSnippetView>,
}

#[derive(Serialize)]
struct StreamSnippetView {
    /// `Ingress/namespace/name`, for the source markers (config safety).
    source: String,
    text: String,
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

/// The TLS router on the HTTPS port (`--enable-ssl-passthrough`).
#[derive(Serialize)]
pub(super) struct TlsRouterView {
    /// The HTTPS port's addresses.
    listen: Vec<String>,
    /// `ssl-passthrough` hosts (a `map` with `hostnames`) and their backends.
    hosts: Vec<PassthroughView>,
    /// Where the HTTPS servers listen (`unix:...`), as they and the router name it.
    https_socket: String,
    /// The hop of passed-through connections, likewise.
    passthrough_socket: String,
}

#[derive(Serialize)]
struct PassthroughView {
    host: String,
    backend: String,
}

/// The router's view, with `--enable-ssl-passthrough`.
pub(super) fn tls_router(r: &Renderer, model: &Model) -> Option<TlsRouterView> {
    if !r.opts.ssl_passthrough {
        return None;
    }
    Some(TlsRouterView {
        listen: r.listen(model, r.opts.https_port),
        hosts: (model.passthrough.iter())
            .map(|p| PassthroughView {
                host: p.host.clone(),
                backend: p.backend.clone(),
            })
            .collect(),
        https_socket: Renderer::unix(r.worker_path(HTTPS_SOCKET)),
        passthrough_socket: Renderer::unix(r.worker_path(PASSTHROUGH_SOCKET)),
    })
}

/// The view, when the model has streams or the TLS router is on.
pub(super) fn view(r: &Renderer, model: &Model) -> Option<StreamsView> {
    if model.streams.is_empty()
        && !r.opts.ssl_passthrough
        && model.global.stream_snippet.is_none()
        && model.stream_snippets.is_empty()
    {
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
        module_peers_dir: (r.opts.stream_module).then(|| r.worker_path(STREAM_PEERS_DIR)),
        servers,
        snippets: (model.stream_snippets.iter())
            .map(|s| StreamSnippetView {
                source: source(&s.owner),
                text: ferrule_model::annotations::block_lines(&s.text),
            })
            .collect(),
    })
}
