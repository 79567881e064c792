//! The peers files of TCP/UDP services: one JSON file per stream backend in
//! `STREAM_PEERS_DIR`, `{"backend": NAME, "peers": ["addr:port", ...]}`, read by
//! Ferrule's stream module (`nginx-module/ngx_stream_ferrule_module.c`, which relies
//! on this compact form: no spaces, no escapes) or else `njs/stream.js` for every new
//! connection. NGINX's stream subsystem has no Lua
//! and no balancer API, so the controller writes them, beside its posts to the
//! HTTP balancer and from the same view: an endpoint change reaches the next
//! connection without a reload. Each file is replaced atomically (a reader sees the
//! old or the new peers), and only when its peers change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use ferrule_model::Model;

use super::files;

/// The directory and what it holds.
pub struct StreamPeers {
    dir: PathBuf,
    /// The peers each file holds, by backend name.
    written: BTreeMap<String, Vec<String>>,
    /// Whether the directory holds nothing but `written` (true after a sync).
    clean: bool,
}

impl StreamPeers {
    /// The peers files in `dir` (created by the prefix preparation). Files left by
    /// an earlier controller are rewritten or removed by the first `sync`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            written: BTreeMap::new(),
            clean: false,
        }
    }

    /// Brings the files to the streams and passthrough hosts of `view` and of
    /// `running` (one the newest model dropped is served until the reload that
    /// drops it): their backends' endpoints as `view` has them. Returns how many files changed.
    pub fn sync(&mut self, view: &Model, running: Option<&Model>) -> std::io::Result<usize> {
        let of = |m: &'_ Model| -> Vec<String> {
            (m.streams.iter().map(|s| s.backend.clone()))
                .chain(m.passthrough.iter().map(|p| p.backend.clone()))
                .collect()
        };
        let mut names: BTreeSet<String> = of(view).into_iter().collect();
        names.extend(running.map(of).unwrap_or_default());
        if names.is_empty() && self.written.is_empty() && self.clean {
            return Ok(0);
        }
        let mut changed = 0;
        for name in &names {
            let peers: Vec<String> = (view.backends.get(name))
                .or_else(|| running.and_then(|r| r.backends.get(name)))
                .map(|b| b.endpoints.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            if self.written.get(name) == Some(&peers) {
                continue;
            }
            let body = serde_json::json!({ "backend": name, "peers": peers }).to_string();
            files::atomic_write(
                &self.dir.join(format!("{name}.json")),
                body.as_bytes(),
                0o644,
            )?;
            self.written.insert(name.clone(), peers);
            changed += 1;
        }
        // What no stream uses any more, and whatever an earlier controller left.
        let gone = self.written.keys().any(|n| !names.contains(n));
        if self.clean && !gone {
            return Ok(changed);
        }
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let file = entry.file_name().to_string_lossy().into_owned();
            let keep = file
                .strip_suffix(".json")
                .is_some_and(|n| names.contains(n));
            if !keep {
                std::fs::remove_file(entry.path())?;
                changed += 1;
            }
        }
        self.written.retain(|n, _| names.contains(n));
        self.clean = true;
        Ok(changed)
    }
}
