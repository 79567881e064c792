//! Ferrule's C fast path (`nginx-module/`): a dynamic module that balances plain
//! round-robin backends without entering Lua (see its source for how it shares
//! the work with `balancer_by_lua`). It is optional: found next to the other
//! modules, and used only when this NGINX loads it, so a module built for another
//! NGINX costs speed, never the service. The same module counts the request
//! metrics; with njs, which has no balancer phase to share, it does only that. Its
//! stream twin gives TCP/UDP connections every endpoint of their backend, so that
//! they retry the next (without it, njs picks one and a dead endpoint fails them).

use std::path::Path;

use super::emit::quote;
use super::process::Launcher;
use super::render::{Balancer, RenderOptions};

/// The module's file name in the modules directory.
pub const MODULE: &str = "ngx_http_ferrule_module.so";
/// Its stream twin, beside it (`ferrule_stream_peers`: TCP/UDP services' retries).
pub const STREAM_MODULE: &str = "ngx_stream_ferrule_module.so";

/// The fast path's directives, in `http` (behind `balancer_by_lua`: Lua modules).
const FAST_PATH: &str = "ferrule_fast_zone 1m; upstream u { server 0.0.0.1:1; balancer_by_lua_block { } ferrule_fast; }";
/// The request metrics' directives, in `http`.
const METRICS: &str =
    "ferrule_metrics_zone 1m 1 1 1; server { location / { ferrule_metrics a b c d e; } }";
/// A location's values in its configuration, an alias, the access log's line and
/// the headers' lines, in `http`.
const LOCATION: &str = r#"ferrule_alias $ferrule_probe $scheme;
    ferrule_upstreaminfo $ferrule_probe_line $scheme $scheme;
    ferrule_header_lines $ferrule_probe_headers $scheme X-A $scheme;
    server { location / { ferrule_location a "" ""; ferrule_if_body { } } }"#;
/// A request header set before the realip module reads it, and the client's
/// lookalikes of the headers Ferrule sets dropped, in `http`.
const INPUT_HEADER: &str = "ferrule_input_header X-A $remote_addr; ferrule_drop_lookalikes X-A;";
/// Their dump over HTTP (njs reads it so: no FFI), in `http`.
const METRICS_DUMP: &str = "server { location = /m { ferrule_metrics_dump; } }";

/// Whether `nginx` loads `module` after `modules` and accepts `http` (the body of
/// an `http` block using its directives); if not, why not. The probe's files are
/// written below `scratch` (where `nginx` can read them: with a supervisor, the
/// directory its container shares).
pub async fn probe(
    nginx: &Launcher,
    scratch: &Path,
    modules: &[String],
    module: &Path,
    http: &str,
) -> Result<(), String> {
    probe_blocks(
        nginx,
        scratch,
        modules,
        module,
        &format!("http {{ {http} }}"),
    )
    .await
}

/// [`probe`] with `blocks` as the configuration's top-level blocks.
async fn probe_blocks(
    nginx: &Launcher,
    scratch: &Path,
    modules: &[String],
    module: &Path,
    blocks: &str,
) -> Result<(), String> {
    // The supervisor's container has its own files: NGINX says if it is not there.
    if matches!(nginx, Launcher::Here(_)) && !module.is_file() {
        return Err(format!("{} not found", module.display()));
    }
    let tmp = tempfile::Builder::new()
        .prefix(".probe-")
        .tempdir_in(scratch)
        .map_err(|e| format!("temporary directory in {}: {e}", scratch.display()))?;
    let mut conf = String::new();
    // written as nginx.conf.tera writes the same paths: through the emitter
    for m in modules
        .iter()
        .map(String::as_str)
        .chain([module.to_str().unwrap_or("")])
    {
        conf.push_str(&format!("load_module {};\n", quote(m)));
    }
    let path = |f: &str| quote(&tmp.path().join(f).to_string_lossy());
    conf.push_str(&format!(
        "pid {};\nerror_log {};\nevents {{}}\n{blocks}\n",
        path("nginx.pid"),
        path("error.log")
    ));
    let file = tmp.path().join("nginx.conf");
    std::fs::write(&file, conf).map_err(|e| format!("{}: {e}", file.display()))?;
    let checked = nginx
        .check(tmp.path(), &file, &tmp.path().join("error.log"))
        .await;
    checked.map_err(|out| {
        let name = match nginx {
            Launcher::Here(binary) => binary.display().to_string(),
            Launcher::Supervisor(_) => "the supervisor's nginx".to_owned(),
        };
        format!("{name} does not load it: {}", out.trim())
    })
}

/// Turns the fast path on in `opts` when `module` (a candidate path) is given, the
/// balancer is Lua and `nginx` loads it; with njs, loads the module for the request
/// metrics alone. With either, loads the stream module beside it where TCP/UDP
/// services or passthrough need the stream block. Logs which way it went. Runs
/// `nginx -t`: call it where a slow NGINX may block (not before the status port
/// serves), and with a supervisor once it answers.
pub async fn enable(opts: &mut RenderOptions, nginx: &Launcher, module: Option<&Path>) {
    let Some(module) = module else { return };
    // With a supervisor, NGINX reads the probes in the prefix, which both share.
    let scratch = match nginx {
        Launcher::Here(_) => std::env::temp_dir(),
        Launcher::Supervisor(_) => {
            if let Err(e) = std::fs::create_dir_all(&opts.prefix) {
                tracing::warn!(error = %e, "no C fast path: cannot create the prefix");
                return;
            }
            opts.prefix.clone()
        }
    };
    let scratch = scratch.as_path();
    enable_stream(opts, nginx, scratch, module).await;
    if opts.balancer == Balancer::Njs {
        return enable_njs_metrics(opts, nginx, scratch, module).await;
    }
    match probe(nginx, scratch, &opts.modules, module, FAST_PATH).await {
        Ok(()) => {
            tracing::info!(module = %module.display(), "C fast path for plain backends");
            opts.modules.push(module.to_string_lossy().into_owned());
            opts.fast_path = true;
        }
        Err(why) => tracing::warn!("no C fast path, every request enters Lua: {why}"),
    }
    // So are a proxying location's values, the aliases and the realip module's
    // header, if it is recent enough: one `nginx -t` for all.
    if opts.fast_path {
        let modules = &opts.modules[..opts.modules.len() - 1];
        let http = format!("{FAST_PATH} {LOCATION} {INPUT_HEADER}");
        match probe(nginx, scratch, modules, module, &http).await {
            Ok(()) => (opts.location_directive, opts.input_header) = (true, true),
            Err(why) => tracing::warn!(
                "the C module has no ferrule_location, ferrule_if_body, ferrule_alias, \
                 ferrule_upstreaminfo, ferrule_header_lines, ferrule_input_header or \
                 ferrule_drop_lookalikes (rebuild it: make deps); locations set their \
                 values: {why}"
            ),
        }
    }
    // The request metrics are the module's too, if it is recent enough (a module
    // built before them leaves them to a Lua log phase).
    if opts.fast_path
        && let Some(m) = opts.metrics.as_mut()
    {
        let modules = &opts.modules[..opts.modules.len() - 1];
        match probe(
            nginx,
            scratch,
            modules,
            module,
            &format!("{FAST_PATH} {METRICS}"),
        )
        .await
        {
            Ok(()) => m.module = true,
            Err(why) => tracing::warn!(
                "the C module does not count requests (rebuild it: make deps); Lua does: {why}"
            ),
        }
    }
}

/// With TCP/UDP services or passthrough (the stream modules loaded), loads the stream
/// module beside `module` if NGINX accepts it, whichever the balancer.
async fn enable_stream(opts: &mut RenderOptions, nginx: &Launcher, scratch: &Path, module: &Path) {
    let stream_core = super::render::STREAM_MODULES[0];
    if !opts.modules.iter().any(|m| m.ends_with(stream_core)) {
        return;
    }
    let stream = module.with_file_name(STREAM_MODULE);
    let blocks = "stream { upstream u { server 0.0.0.1:1; \
                  ferrule_stream_peers /nonexistent $remote_addr; } }";
    match probe_blocks(nginx, scratch, &opts.modules, &stream, blocks).await {
        Ok(()) => {
            tracing::info!(module = %stream.display(), "TCP/UDP connections retry other endpoints");
            opts.modules.push(stream.to_string_lossy().into_owned());
            opts.stream_module = true;
        }
        Err(why) => tracing::warn!(
            "no stream module: a TCP/UDP connection to a dead endpoint fails \
             (proxy-stream-next-upstream has no effect): {why}"
        ),
    }
}

/// njs has no balancer phase for the fast path and no shared dictionary to count
/// in, so the module is loaded only to count requests, and only if it also serves
/// the dump (njs cannot call it): without it, no request metrics.
async fn enable_njs_metrics(
    opts: &mut RenderOptions,
    nginx: &Launcher,
    scratch: &Path,
    module: &Path,
) {
    if opts.metrics.is_none() {
        return;
    }
    let metrics = format!("{METRICS} {METRICS_DUMP}");
    match probe(nginx, scratch, &opts.modules, module, &metrics).await {
        Ok(()) => {
            tracing::info!(module = %module.display(), "the C module counts requests");
            // The realip module's header, once loaded, if it is recent enough.
            let header = probe(nginx, scratch, &opts.modules, module, INPUT_HEADER).await;
            opts.input_header = header.is_ok();
            opts.modules.push(module.to_string_lossy().into_owned());
            if let Some(m) = opts.metrics.as_mut() {
                m.module = true;
            }
        }
        Err(why) => tracing::warn!(
            "no request metrics with njs: the C module does not count them or serve their \
             dump (rebuild it: make deps): {why}"
        ),
    }
}
