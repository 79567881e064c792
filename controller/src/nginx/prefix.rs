//! The prefix NGINX runs in, prepared for a new master or for one an earlier
//! controller left running: directories, the balancer sources, the API token, the
//! default certificate and (njs) the state directory.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::render::{self, Balancer, RenderOptions};
use super::{api, files, lua, njs};

/// The Lua balancer's API token, relative to the prefix (read by `init_by_lua`).
const TOKEN_FILE: &str = "conf/balancer.token";

/// What a prepared prefix holds that the dataplane keeps in memory.
pub(super) struct Prepared {
    /// The balancer API token.
    pub token: String,
    /// The default certificate and key (PEM).
    pub default_certificate: (String, String),
    /// The same, as the file `conf/default.pem` holds it (Lua).
    pub default_pem: Vec<u8>,
    /// The uid of the worker user (when NGINX starts as root).
    pub worker_uid: Option<u32>,
}

/// Prepares the prefix (directories, balancer sources, token, default certificate;
/// for njs also an empty state directory). With `kept`, an adopted master runs on
/// it: the token, default certificate and (njs) state it loaded are kept.
pub(super) fn prepare(
    opts: &RenderOptions,
    default_pem: Vec<u8>,
    kept: bool,
) -> std::io::Result<Prepared> {
    let prefix = opts.prefix.clone();
    for d in ["conf/servers", "conf/certs", "logs", "run"] {
        std::fs::create_dir_all(prefix.join(d))?;
    }
    std::fs::create_dir_all(opts.worker_path("run"))?;
    for d in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        let dir = opts.worker_path("tmp").join(d);
        std::fs::create_dir_all(&dir)?;
        if let Some(user) = opts.user.as_deref() {
            chown_to(&dir, user);
        }
    }
    let (token_file, default_files) = match opts.balancer {
        Balancer::Lua => (TOKEN_FILE, vec![render::DEFAULT_CERTIFICATE]),
        Balancer::Njs => (
            render::NJS_TOKEN_FILE,
            vec![render::NJS_DEFAULT_CERT, render::NJS_DEFAULT_KEY],
        ),
    };
    // Read back without following a link: the prefix may be NGINX's to write, and
    // the token read is sent to NGINX.
    let kept_token = kept
        .then(|| {
            files::read_no_follow(&prefix.join(token_file))
                .ok()
                .flatten()
        })
        .flatten()
        .and_then(|t| parse_token(opts.balancer, &String::from_utf8_lossy(&t)));
    let token = kept_token.clone().unwrap_or_else(new_token);
    // The default certificate an adopted master loaded stays (and is posted).
    let kept_pem: Option<Vec<u8>> = kept
        .then(|| {
            let parts: Vec<Vec<u8>> = default_files
                .iter()
                .filter_map(|f| files::read_no_follow(&default_path(opts, f)).ok().flatten())
                .collect();
            (parts.len() == default_files.len()).then(|| parts.concat())
        })
        .flatten();
    let write_default = kept_pem.is_none();
    let default_pem = kept_pem.unwrap_or(default_pem);
    let default_certificate = split_pem(&String::from_utf8_lossy(&default_pem));
    // The njs sources, whichever the balancer: they also pick TCP/UDP services' peers.
    install(&prefix.join(render::NJS_DIR), njs::NJS_FILES)?;
    std::fs::create_dir_all(opts.worker_path(render::STREAM_PEERS_DIR))?;
    match opts.balancer {
        Balancer::Lua => {
            install(&prefix.join("lua"), lua::LUA_FILES)?;
            if kept_token.is_none() {
                files::atomic_write(&prefix.join(token_file), token.as_bytes(), 0o600)?;
            }
            if write_default {
                files::atomic_write(
                    &prefix.join(render::DEFAULT_CERTIFICATE),
                    &default_pem,
                    0o600,
                )?;
            }
        }
        // `njs/README.md`, "The nginx contract". The workers read the default
        // certificate's files at handshakes, so they belong to the worker user.
        Balancer::Njs => {
            std::fs::create_dir_all(opts.worker_path("conf"))?;
            if kept_token.is_none() {
                let json = serde_json::json!({ "token": token }).to_string();
                files::atomic_write(&prefix.join(token_file), json.as_bytes(), 0o600)?;
            }
            let (cert, key) = &default_certificate;
            for (rel, pem) in [
                (render::NJS_DEFAULT_CERT, cert),
                (render::NJS_DEFAULT_KEY, key),
            ] {
                let path = opts.worker_path(rel);
                if write_default {
                    files::atomic_write(&path, pem.as_bytes(), 0o600)?;
                }
                if let Some(user) = opts.user.as_deref() {
                    chown_to(&path, user);
                }
            }
        }
    }
    let worker_uid = opts
        .user
        .as_deref()
        .and_then(|u| nix::unistd::User::from_name(u).ok().flatten())
        .map(|u| u.uid.as_raw());
    if !kept {
        clear_njs_state(opts)?;
    }
    Ok(Prepared {
        token,
        default_certificate,
        default_pem,
        worker_uid,
    })
}

/// Empties the njs state directory. Its files name the NGINX master that wrote
/// them, but a new master can get an old pid (a restarted container counts from
/// 1 again): state is cleared before every start, never trusted across one.
pub(super) fn clear_njs_state(opts: &RenderOptions) -> std::io::Result<()> {
    if opts.balancer != Balancer::Njs {
        return Ok(());
    }
    let dir = opts.worker_path(render::NJS_STATE_DIR);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)?;
    if let Some(user) = opts.user.as_deref() {
        chown_to(&dir, user);
    }
    Ok(())
}

/// Whether the master behind `socket` refuses `token` (an earlier controller wrote
/// the token file and died before the reload that would have loaded it).
pub(super) async fn refuses_token(socket: &Path, token: &str) -> bool {
    let request = api::request(socket, "GET", "/configuration/version", Some(token), None);
    let resp = tokio::time::timeout(Duration::from_secs(5), request).await;
    matches!(&resp, Ok(Ok(r)) if r.status == 401 || r.status == 403)
}

/// The token in a token file: plain text (Lua) or `{"token": "..."}` (njs).
fn parse_token(balancer: Balancer, text: &str) -> Option<String> {
    let token = match balancer {
        Balancer::Lua => text.trim().to_owned(),
        Balancer::Njs => serde_json::from_str::<serde_json::Value>(text)
            .ok()?
            .get("token")?
            .as_str()?
            .trim()
            .to_owned(),
    };
    (!token.is_empty()).then_some(token)
}

fn new_token() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes balancer sources (path relative to `dir`, contents) that differ on disk.
fn install(dir: &Path, sources: &[(&str, &str)]) -> std::io::Result<()> {
    for (rel, text) in sources {
        let path = dir.join(rel);
        let on_disk = files::read_no_follow(&path).ok().flatten();
        if on_disk.as_deref() != Some(text.as_bytes()) {
            files::atomic_write(&path, text.as_bytes(), 0o644)?;
        }
    }
    Ok(())
}

/// (certificates, private keys) of a PEM text, each a sequence of whole blocks.
fn split_pem(pem: &str) -> (String, String) {
    let (mut certs, mut keys) = (String::new(), String::new());
    let mut block = String::new();
    for line in pem.lines() {
        if line.starts_with("-----BEGIN ") {
            block.clear();
        }
        block.push_str(line);
        block.push('\n');
        if let Some(label) = line.strip_prefix("-----END ") {
            if label.contains("PRIVATE KEY") {
                keys.push_str(&block);
            } else {
                certs.push_str(&block);
            }
            block.clear();
        }
    }
    (certs, keys)
}

/// Where a default certificate file is: the worker processes read njs's, the
/// master Lua's.
fn default_path(opts: &RenderOptions, rel: &str) -> PathBuf {
    match opts.balancer {
        Balancer::Lua => opts.prefix.join(rel),
        Balancer::Njs => opts.worker_path(rel),
    }
}

fn chown_to(dir: &Path, user: &str) {
    if let Ok(Some(u)) = nix::unistd::User::from_name(user) {
        let _ = nix::unistd::chown(dir, Some(u.uid), None);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_pem_separates_certificates_from_keys() {
        let pem = String::from_utf8(crate::tls::self_signed_default().unwrap()).unwrap();
        let (cert, key) = super::split_pem(&pem);
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----\n"), "{cert}");
        assert!(cert.trim_end().ends_with("-----END CERTIFICATE-----"));
        assert!(!cert.contains("PRIVATE"));
        assert!(key.starts_with("-----BEGIN ") && key.contains("PRIVATE KEY-----\n"));
        assert!(!key.contains("CERTIFICATE"));
        // Whole blocks, nothing lost.
        assert_eq!(cert.len() + key.len(), pem.trim_end().len() + 1);
    }
}
