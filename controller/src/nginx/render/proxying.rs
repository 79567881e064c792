//! A location's buffering and forwarding directives (`buffering.rs` and
//! `forwarding.rs` of the annotations), as the server template writes them.

use ferrule_model::annotations::{Buffering, Forwarding};
use serde::Serialize;

use super::on_off;

/// Each field one directive's parameters; `None` or empty: not written.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct ProxyingView {
    buffering: Option<&'static str>,
    buffer_size: Option<String>,
    /// `proxy_buffers`: number and size.
    buffers: Vec<String>,
    busy_buffers_size: Option<String>,
    max_temp_file_size: Option<String>,
    request_buffering: Option<&'static str>,
    client_body_buffer_size: Option<String>,
    http_version: Option<String>,
    next_upstream: Vec<String>,
    next_upstream_tries: Option<String>,
    next_upstream_timeout: Option<String>,
    /// Set into `$ferrule_upstream_host`, which every proxy include sends as Host.
    upstream_vhost: Option<String>,
    /// Set into `$ferrule_connection`, sent as Connection.
    connection: Option<String>,
    forwarded_prefix: Option<String>,
    redirect: Vec<String>,
    cookie_domain: Vec<String>,
    cookie_path: Vec<String>,
    port_in_redirect: bool,
    relative_redirects: bool,
    access_log_off: bool,
    rewrite_log: bool,
    push_preload: bool,
}

/// `None` when the location sets nothing of these families.
pub(super) fn view(b: &Buffering, f: &Forwarding) -> Option<ProxyingView> {
    if b.is_default() && f.is_default() {
        return None;
    }
    Some(ProxyingView {
        buffering: b.responses.map(on_off),
        buffer_size: b.buffers.as_ref().map(|x| x.size.clone()),
        buffers: b
            .buffers
            .as_ref()
            .map(|x| vec![x.number.to_string(), x.size.clone()])
            .unwrap_or_default(),
        busy_buffers_size: (b.busy_size.clone())
            .or_else(|| b.buffers.as_ref().map(|x| x.default_busy())),
        max_temp_file_size: b.max_temp_file_size.clone(),
        request_buffering: b.requests.map(on_off),
        client_body_buffer_size: b.client_body_buffer_size.clone(),
        http_version: f.http_version.clone(),
        next_upstream: f.next_upstream.clone(),
        next_upstream_tries: f.next_upstream_tries.map(|n| n.to_string()),
        next_upstream_timeout: f.next_upstream_timeout.map(|s| format!("{s}s")),
        upstream_vhost: f.upstream_vhost.clone(),
        connection: f.connection.clone(),
        forwarded_prefix: f.forwarded_prefix.clone(),
        redirect: f.redirect.clone(),
        cookie_domain: f.cookie_domain.clone(),
        cookie_path: f.cookie_path.clone(),
        port_in_redirect: f.port_in_redirect,
        relative_redirects: f.relative_redirects,
        access_log_off: f.access_log == Some(false),
        rewrite_log: f.rewrite_log,
        push_preload: f.push_preload,
    })
}
