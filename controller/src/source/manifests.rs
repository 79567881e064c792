//! Standalone mode: a directory of Kubernetes YAML/JSON manifests.

use std::collections::HashMap;
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
/// Names starting with a dot are skipped, directories too: a mounted ConfigMap keeps
/// each file in `..data/` (and the previous version in `..<timestamp>/` while it
/// swaps) behind a visible symlink, which alone is read.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    let visible = |e: &walkdir::DirEntry| {
        e.depth() == 0 || !e.file_name().to_str().is_some_and(|n| n.starts_with('.'))
    };
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_entry(visible)
    {
        let entry = entry.map_err(|e| ManifestError::Io {
            path: e.path().unwrap_or(dir).to_owned(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("walk error")),
        })?;
        let p = entry.path();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if entry.file_type().is_file() && matches!(ext, "yaml" | "yml" | "json") {
            out.push(p.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Loads every object of `dir` into a snapshot. Unknown kinds are skipped with a
/// warning; an invalid document fails the whole load, naming file and document (the
/// offline commands: a pipeline must see it).
pub fn load(
    dir: &Path,
    settings: Settings,
    config_map: Option<(&str, &str)>,
) -> Result<Snapshot, ManifestError> {
    let files = fingerprint(dir)?;
    let (snap, mut errors) = load_cached(&files, settings, config_map, &mut Cache::default());
    match errors.is_empty() {
        true => Ok(snap),
        false => Err(errors.swap_remove(0)),
    }
}

/// The objects of each file, decoded, valid while the file's (size, mtime, inode) is
/// unchanged: a change to one file re-reads and re-decodes that file only, and the
/// others are shared into the new snapshot by `Arc` (parsing and decoding 20k
/// documents took about 0.3 s per change).
#[derive(Default)]
struct Cache(HashMap<PathBuf, (FileStamp, Snapshot)>);

/// What identifies a version of a file: size, modification time (ns) and inode.
type FileStamp = (u64, i128, u64);

/// The snapshot of `files`, and the errors of those that do not decode: such a file
/// keeps its last version that did (none at first), so that one broken file holds
/// back only its own objects' changes.
fn load_cached(
    files: &[(PathBuf, FileStamp)],
    settings: Settings,
    config_map: Option<(&str, &str)>,
    cache: &mut Cache,
) -> (Snapshot, Vec<ManifestError>) {
    let mut errors = Vec::new();
    let mut snap = Snapshot {
        settings,
        ..Snapshot::default()
    };
    let present: std::collections::HashSet<&Path> =
        files.iter().map(|(f, _)| f.as_path()).collect();
    cache.0.retain(|p, _| present.contains(p.as_path()));
    for (path, stamp) in files {
        let part = match cache.0.get(path) {
            Some((s, part)) if s == stamp => part,
            _ => match decode_file(path, config_map) {
                Ok(part) => {
                    &cache
                        .0
                        .entry(path.clone())
                        .insert_entry((*stamp, part))
                        .into_mut()
                        .1
                }
                Err(e) => {
                    errors.push(e);
                    match cache.0.get(path) {
                        Some((_, previous)) => previous,
                        None => continue,
                    }
                }
            },
        };
        snap.ingresses.extend(part.ingresses.iter().cloned());
        snap.ingress_classes
            .extend(part.ingress_classes.iter().cloned());
        snap.services.extend(part.services.iter().cloned());
        snap.endpoint_slices
            .extend(part.endpoint_slices.iter().cloned());
        snap.secrets.extend(part.secrets.iter().cloned());
        if part.config_map.is_some() {
            snap.config_map.clone_from(&part.config_map);
        }
    }
    (snap, errors)
}

/// The objects of one file as a snapshot of its own. Unknown kinds are skipped with a
/// warning (once per version of the file).
fn decode_file(path: &Path, config_map: Option<(&str, &str)>) -> Result<Snapshot, ManifestError> {
    let mut part = Snapshot::default();
    for (index, value) in parse(path)?.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let added =
            objects::add(&mut part, value, config_map).map_err(|e| ManifestError::Document {
                path: path.to_owned(),
                index,
                message: e.to_string(),
            })?;
        for a in added {
            if let Added::Skipped(kind) = a {
                tracing::warn!(file = %path.display(), document = index, kind, "skipping object of a kind Ferrule does not read");
            }
        }
    }
    Ok(part)
}

/// The documents of one file (empty documents, e.g. a trailing `---`, as `null`, so
/// that indexes match the file).
fn parse(path: &Path) -> Result<Vec<serde_json::Value>, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_yaml::Deserializer::from_str(&text)
        .enumerate()
        .map(|(index, doc)| {
            serde_json::Value::deserialize(doc).map_err(|e| ManifestError::Document {
                path: path.to_owned(),
                index,
                message: e.to_string(),
            })
        })
        .collect()
}

/// Watches `dir` and publishes a new snapshot whenever a file changes (including
/// atomic renames). Changes are noticed through inotify at once; the directory is
/// also checked every `interval` (inotify can overflow, and misses some network
/// file systems). An unreadable directory or invalid document is logged and the
/// previous snapshot stays in force.
pub async fn watch(
    dir: PathBuf,
    settings: Settings,
    config_map: Option<(String, String)>,
    interval: std::time::Duration,
    tx: tokio::sync::watch::Sender<Option<std::sync::Arc<Snapshot>>>,
    failing_files: prometheus_client::metrics::gauge::Gauge,
) {
    let wake = std::sync::Arc::new(tokio::sync::Notify::new());
    if let Err(e) = notify_on_change(&dir, wake.clone()) {
        tracing::warn!(error = %e, dir = %dir.display(), "inotify unavailable; polling only");
    }
    let mut cache = Cache::default();
    let mut last_fingerprint = None;
    loop {
        let fp = fingerprint(&dir).ok();
        if fp.is_some() && fp != last_fingerprint {
            let cm = config_map.as_ref().map(|(a, b)| (a.as_str(), b.as_str()));
            let mut settings = settings.clone();
            settings.now = now();
            let files = fp.as_deref().unwrap_or_default();
            let (snap, errors) = load_cached(files, settings, cm, &mut cache);
            failing_files.set(errors.len() as i64);
            for e in errors {
                tracing::error!(error = %e, "manifest file not loaded; its last version that loaded (if any) stays in use, every other file is current");
            }
            tracing::debug!(dir = %dir.display(), "manifests changed");
            tx.send_replace(Some(std::sync::Arc::new(snap)));
            last_fingerprint = fp;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = wake.notified() => {
                // Editors and `kubectl`-style tools write in several steps: let a
                // burst settle so that one change is one load.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    }
}

/// Wakes `wake` whenever something changes in `dir` or a directory below it, from a
/// thread blocked on inotify.
fn notify_on_change(dir: &Path, wake: std::sync::Arc<tokio::sync::Notify>) -> nix::Result<()> {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_ATTRIB;
    watch_dirs(&inotify, dir, mask);
    let dir = dir.to_owned();
    std::thread::Builder::new()
        .name("ferrule-manifests-inotify".to_owned())
        .spawn(move || {
            while let Ok(events) = inotify.read_events() {
                let new_dir = events.iter().any(|e| {
                    e.mask.contains(AddWatchFlags::IN_ISDIR)
                        && e.mask
                            .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                });
                if new_dir {
                    watch_dirs(&inotify, &dir, mask);
                }
                wake.notify_one();
            }
        })
        .map(|_| ())
        .map_err(|_| nix::Error::EAGAIN)
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Watches `dir` and every directory below it (adding one again returns its
/// existing watch).
fn watch_dirs(
    inotify: &nix::sys::inotify::Inotify,
    dir: &Path,
    mask: nix::sys::inotify::AddWatchFlags,
) {
    for d in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_dir())
    {
        let _ = inotify.add_watch(d.path(), mask);
    }
}

/// Every manifest file with its stamp (size, modification time, inode).
fn fingerprint(dir: &Path) -> Result<Vec<(PathBuf, FileStamp)>, ManifestError> {
    use std::os::unix::fs::MetadataExt;
    Ok(files(dir)?
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok()?;
            let mtime = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
            Some((p, (m.len(), mtime, m.ino())))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: NAME, namespace: demo}\nspec: {ports: [{port: 80}]}\n";

    fn services(snap: &Snapshot) -> Vec<String> {
        let mut names: Vec<String> = snap
            .services
            .iter()
            .map(|s| s.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_cache_follows_edits_additions_and_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let write = |file: &str, name: &str| {
            std::fs::write(dir.path().join(file), SVC.replace("NAME", name)).unwrap()
        };
        let mut cache = Cache::default();
        let load = |cache: &mut Cache| {
            let files = fingerprint(dir.path()).unwrap();
            let (snap, errors) = load_cached(&files, Settings::default(), None, cache);
            assert!(errors.is_empty(), "{errors:?}");
            snap
        };
        write("a.yaml", "a");
        write("b.yaml", "b");
        let first = load(&mut cache);
        assert_eq!(services(&first), ["a", "b"]);
        // An edit changes the stamp (size here): the file is parsed again.
        write("b.yaml", "bee");
        let second = load(&mut cache);
        assert_eq!(services(&second), ["a", "bee"]);
        // The unchanged file's objects are shared, not decoded again.
        assert!(std::sync::Arc::ptr_eq(
            &first.services[0],
            &second.services[0]
        ));
        assert!(!std::sync::Arc::ptr_eq(
            &first.services[1],
            &second.services[1]
        ));
        write("c.yaml", "c");
        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        assert_eq!(services(&load(&mut cache)), ["bee", "c"]);
        assert_eq!(cache.0.len(), 2, "deleted files leave the cache");
        // A file that stops parsing is reported, naming it, and keeps its last good
        // version while the other files stay current; its next good version loads.
        std::fs::write(dir.path().join("c.yaml"), "kind: [").unwrap();
        write("b.yaml", "b2");
        let files = fingerprint(dir.path()).unwrap();
        let (snap, errors) = load_cached(&files, Settings::default(), None, &mut cache);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("c.yaml"), "{}", errors[0]);
        assert_eq!(services(&snap), ["b2", "c"]);
        // A new file that never parsed adds nothing.
        std::fs::write(dir.path().join("d.yaml"), "metadata: {name: x").unwrap();
        let files = fingerprint(dir.path()).unwrap();
        let (snap, errors) = load_cached(&files, Settings::default(), None, &mut cache);
        assert_eq!(errors.len(), 2);
        assert_eq!(services(&snap), ["b2", "c"]);
        std::fs::remove_file(dir.path().join("d.yaml")).unwrap();
        write("c.yaml", "c2");
        assert_eq!(services(&load(&mut cache)), ["b2", "c2"]);
        // The offline load still fails on any broken file.
        std::fs::write(dir.path().join("e.yaml"), "kind: [").unwrap();
        let err = super::load(dir.path(), Settings::default(), None).unwrap_err();
        assert!(err.to_string().contains("e.yaml"), "{err}");
    }

    /// A ConfigMap volume: the files live in `..<timestamp>/`, `..data` links to the
    /// current one and each visible name links into `..data`. Each object is read once,
    /// from the visible link, also while an old version's directory is still there.
    #[test]
    fn a_mounted_configmap_is_read_through_its_visible_links_only() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (version, name) in [("..2026_01_01", "old"), ("..2026_01_02", "new")] {
            std::fs::create_dir(d.join(version)).unwrap();
            std::fs::write(d.join(version).join("svc.yaml"), SVC.replace("NAME", name)).unwrap();
        }
        symlink("..2026_01_02", d.join("..data")).unwrap();
        symlink("..data/svc.yaml", d.join("svc.yaml")).unwrap();
        std::fs::write(d.join(".hidden.yaml"), SVC.replace("NAME", "hidden")).unwrap();
        assert_eq!(files(d).unwrap(), [d.join("svc.yaml")]);
        let snap = load(d, Settings::default(), None).unwrap();
        assert_eq!(services(&snap), ["new"]);
    }
}
