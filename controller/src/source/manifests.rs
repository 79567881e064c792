//! Standalone mode: a directory of Kubernetes YAML/JSON manifests.

use std::path::{Path, PathBuf};

use ferrule_model::objects::{self, Added};
use ferrule_model::{Settings, Snapshot};
use serde::Deserialize;

/// A manifests directory that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A document is not valid YAML or not a valid object of its kind.
    #[error("{path}: document {index}: {message}")]
    Document {
        /// The file.
        path: PathBuf,
        /// Zero-based index of the document in the file.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// Files of a manifests directory, sorted (`*.yaml`, `*.yml`, `*.json`, recursively).
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(true) {
        let entry = entry.map_err(|e| ManifestError::Io {
            path: e.path().unwrap_or(dir).to_owned(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("walk error")),
        })?;
        let p = entry.path();
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if entry.file_type().is_file() && !hidden && matches!(ext, "yaml" | "yml" | "json") {
            out.push(p.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Loads every object of `dir` into a snapshot. Unknown kinds are skipped with a
/// warning; an invalid document fails the whole load, naming file and document.
pub fn load(
    dir: &Path,
    settings: Settings,
    config_map: Option<(&str, &str)>,
) -> Result<Snapshot, ManifestError> {
    let mut snap = Snapshot {
        settings,
        ..Snapshot::default()
    };
    for path in files(dir)? {
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Io {
            path: path.clone(),
            source,
        })?;
        for (index, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let err = |message: String| ManifestError::Document {
                path: path.clone(),
                index,
                message,
            };
            let value = serde_json::Value::deserialize(doc).map_err(|e| err(e.to_string()))?;
            if value.is_null() {
                continue; // an empty document (e.g. a trailing `---`)
            }
            for added in
                objects::add(&mut snap, value, config_map).map_err(|e| err(e.to_string()))?
            {
                if let Added::Skipped(kind) = added {
                    tracing::warn!(file = %path.display(), document = index, kind, "skipping object of a kind Ferrule does not read");
                }
            }
        }
    }
    Ok(snap)
}

/// Watches `dir` and publishes a new snapshot whenever a file changes (including
/// atomic renames), checking every `interval`. An unreadable directory or invalid
/// document is logged and the previous snapshot stays in force.
pub async fn watch(
    dir: PathBuf,
    settings: Settings,
    config_map: Option<(String, String)>,
    interval: std::time::Duration,
    tx: tokio::sync::watch::Sender<Option<std::sync::Arc<Snapshot>>>,
) {
    let mut last_fingerprint = None;
    loop {
        let fp = fingerprint(&dir);
        if fp.is_some() && fp != last_fingerprint {
            let cm = config_map.as_ref().map(|(a, b)| (a.as_str(), b.as_str()));
            let mut settings = settings.clone();
            settings.now = now();
            match load(&dir, settings, cm) {
                Ok(snap) => {
                    tracing::debug!(dir = %dir.display(), "manifests changed");
                    tx.send_replace(Some(std::sync::Arc::new(snap)));
                }
                Err(e) => {
                    tracing::error!(error = %e, "manifests not loaded; keeping the previous state")
                }
            }
            last_fingerprint = fp;
        }
        tokio::time::sleep(interval).await;
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Paths, sizes, modification times and inodes of every manifest file.
fn fingerprint(dir: &Path) -> Option<Vec<(PathBuf, u64, i128, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let files = files(dir).ok()?;
    Some(
        files
            .into_iter()
            .filter_map(|p| {
                let m = std::fs::metadata(&p).ok()?;
                let mtime = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
                Some((p, m.len(), mtime, m.ino()))
            })
            .collect(),
    )
}
