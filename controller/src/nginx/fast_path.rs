//! Ferrule's C fast path (`nginx-module/`): a dynamic module that balances plain
//! round-robin backends without entering Lua (see its source for how it shares
//! the work with `balancer_by_lua`). It is optional: found next to the other
//! modules, and used only when this NGINX loads it, so a module built for another
//! NGINX costs speed, never the service.

use std::path::Path;
use std::process::Command;

use super::emit::quote;
use super::render::{Balancer, RenderOptions};

/// The module's file name in the modules directory.
pub const MODULE: &str = "ngx_http_ferrule_module.so";

/// Whether `nginx` loads `module` after `lua_modules` (a configuration using it
/// passes `nginx -t`; with `metrics`, its request metrics too); if not, why not.
pub fn probe(
    nginx: &Path,
    lua_modules: &[String],
    module: &Path,
    metrics: bool,
) -> Result<(), String> {
    if !module.is_file() {
        return Err(format!("{} not found", module.display()));
    }
    let tmp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let mut conf = String::new();
    // written as nginx.conf.tera writes the same paths: through the emitter
    for m in lua_modules
        .iter()
        .map(String::as_str)
        .chain([module.to_str().unwrap_or("")])
    {
        conf.push_str(&format!("load_module {};\n", quote(m)));
    }
    let path = |f: &str| quote(&tmp.path().join(f).to_string_lossy());
    let metrics = if metrics {
        "ferrule_metrics_zone 1m 1 1 1; server { location / { ferrule_metrics a b c d e; } }"
    } else {
        ""
    };
    conf.push_str(&format!(
        "pid {};\nerror_log {};\nevents {{}}\n\
         http {{ ferrule_fast_zone 1m; upstream u {{ server 0.0.0.1:1; \
         balancer_by_lua_block {{ }} ferrule_fast; }} {metrics} }}\n",
        path("nginx.pid"),
        path("error.log")
    ));
    let file = tmp.path().join("nginx.conf");
    std::fs::write(&file, conf).map_err(|e| format!("{}: {e}", file.display()))?;
    let out = Command::new(nginx)
        .arg("-t")
        .arg("-q")
        .arg("-p")
        .arg(tmp.path())
        .arg("-e")
        .arg(tmp.path().join("error.log"))
        .arg("-c")
        .arg(&file)
        .output()
        .map_err(|e| format!("{}: {e}", nginx.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} does not load it: {}",
            nginx.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Turns the fast path on in `opts` when `module` (a candidate path) is given, the
/// balancer is Lua and `nginx` loads it; logs which way it went. Runs `nginx -t`:
/// call it where a slow NGINX may block (not before the status port serves).
pub fn enable(opts: &mut RenderOptions, nginx: &Path, module: Option<&Path>) {
    let Some(module) = module else { return };
    if opts.balancer != Balancer::Lua {
        return;
    }
    match probe(nginx, &opts.modules, module, false) {
        Ok(()) => {
            tracing::info!(module = %module.display(), "C fast path for plain backends");
            opts.modules.push(module.to_string_lossy().into_owned());
            opts.fast_path = true;
        }
        Err(why) => tracing::warn!("no C fast path, every request enters Lua: {why}"),
    }
    // The request metrics are the module's too, if it is recent enough (a module
    // built before them leaves them to a Lua log phase).
    if opts.fast_path
        && let Some(m) = opts.metrics.as_mut()
    {
        let modules = &opts.modules[..opts.modules.len() - 1];
        match probe(nginx, modules, module, true) {
            Ok(()) => m.module = true,
            Err(why) => tracing::warn!(
                "the C module does not count requests (rebuild it: make deps); Lua does: {why}"
            ),
        }
    }
}
