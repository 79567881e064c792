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
        snap.config_maps.extend(part.config_maps.iter().cloned());
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
        check_names(&value).map_err(|message| ManifestError::Document {
            path: path.to_owned(),
            index,
            message,
        })?;
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

/// Refuses, as the API server does, an object of a kind Ferrule reads (or of a
/// `List`) whose namespace is not a DNS-1123 label or whose name is not a DNS-1035
/// label (a Service) or a DNS-1123 subdomain (the others). The model relies on it: a
/// backend is named `namespace_service_port`, which no `_` may make ambiguous, and
/// every name must reach NGINX's configuration as it is.
fn check_names(value: &serde_json::Value) -> Result<(), String> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    let (name_ok, rule): (fn(&str) -> bool, &str) = match kind {
        "List" => {
            let items = value.get("items").and_then(|i| i.as_array());
            return items.into_iter().flatten().try_for_each(check_names);
        }
        "Service" => (dns1035_label, DNS1035_LABEL),
        "Ingress" | "IngressClass" | "EndpointSlice" | "Secret" | "ConfigMap" => {
            (dns1123_subdomain, DNS1123_SUBDOMAIN)
        }
        _ => return Ok(()),
    };
    // Missing is empty; a value that is no string is the decoder's to report.
    let field = |key: &str| match value.get("metadata").and_then(|m| m.get(key)) {
        None | Some(serde_json::Value::Null) => Some(""),
        Some(v) => v.as_str(),
    };
    let name = field("name");
    if let Some(name) = name
        && !name_ok(name)
    {
        return Err(format!(
            "{kind} name {name:?} is invalid: Kubernetes requires {rule}"
        ));
    }
    let name = name.unwrap_or_default();
    // Without one, a namespaced object is in `default`; an IngressClass has none.
    if let Some(namespace) = field("namespace")
        && kind != "IngressClass"
        && !namespace.is_empty()
        && !dns1123_label(namespace)
    {
        return Err(format!(
            "{kind} {name:?}: namespace {namespace:?} is invalid: Kubernetes requires \
             {DNS1123_LABEL}"
        ));
    }
    Ok(())
}

const DNS1123_LABEL: &str = "a DNS-1123 label (at most 63 characters: lower-case letters, \
                             digits and '-', starting and ending with a letter or digit)";
const DNS1035_LABEL: &str = "a DNS-1035 label (at most 63 characters: lower-case letters, \
                             digits and '-', starting with a letter and ending with a letter \
                             or digit)";
const DNS1123_SUBDOMAIN: &str = "a DNS-1123 subdomain (at most 253 characters: labels of \
                                 lower-case letters, digits and '-', starting and ending with a \
                                 letter or digit, joined by '.')";

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn label_chars(s: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = s.as_bytes();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// A namespace: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn dns1123_label(s: &str) -> bool {
    s.len() <= 63 && label_chars(s)
}

/// A Service name: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn dns1035_label(s: &str) -> bool {
    dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// Most names: DNS-1123 labels of any length joined by `.`, at most 253 characters.
fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_chars)
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

    /// Kubernetes refuses an object whose namespace or name is not a DNS name (a
    /// label for namespaces and Services, a subdomain otherwise): backend names
    /// `namespace_service_port` rely on it (namespace `a_b` + Service `c` and `a` +
    /// `b_c` would share one), and NGINX's configuration cannot hold every character.
    /// A manifests directory is refused the same: a manifest error naming the file,
    /// kind and name, the file's other objects held back as for a file that does not
    /// parse, the other files current.
    #[test]
    fn names_kubernetes_refuses_are_manifest_errors() {
        let long_subdomain = "i".repeat(253);
        let too_long_subdomain = "i".repeat(254);
        let long_label = "s".repeat(63);
        let too_long_label = "s".repeat(64);
        // (kind, namespace, name, what the error names; None: loads)
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            ("Service", "a_b", "c", Some("namespace \"a_b\"")),
            ("Service", "a", "b_c", Some("Service name \"b_c\"")),
            (
                "Service",
                "demo",
                "collide\u{85}",
                Some("\"collide\\u{85}\""),
            ),
            ("Service", "demo", "s\u{7}", Some("\"s\\u{7}\"")),
            ("Service", "Demo", "web", Some("namespace \"Demo\"")),
            ("Service", "demo", "Web", Some("Service name \"Web\"")),
            ("Service", "demo", "a.b", Some("Service name \"a.b\"")),
            ("Service", "demo", "1st", Some("Service name \"1st\"")),
            ("Service", "demo", "web-", Some("Service name \"web-\"")),
            ("Service", "demo", "", Some("Service name \"\"")),
            (
                "Service",
                "demo",
                &too_long_label,
                Some("Service name \"sss"),
            ),
            ("Service", &too_long_label, "web", Some("namespace \"sss")),
            ("Service", "demo", &long_label, None),
            ("Service", &long_label, "web-1", None),
            ("Service", "", "web", None),
            ("Ingress", "demo", "a.b-c.0", None),
            ("Ingress", "demo", &long_subdomain, None),
            (
                "Ingress",
                "demo",
                &too_long_subdomain,
                Some("Ingress name \"iii"),
            ),
            ("Ingress", "demo", "a_b", Some("Ingress name \"a_b\"")),
            ("Ingress", "demo", "a..b", Some("Ingress name \"a..b\"")),
            ("Ingress", "demo", "-a", Some("Ingress name \"-a\"")),
            ("Ingress", "d.e", "a", Some("namespace \"d.e\"")),
            ("Secret", "demo", "tls.example.com", None),
            ("Secret", "demo", "tls key", Some("Secret name \"tls key\"")),
            ("ConfigMap", "demo", "cfg", None),
            ("ConfigMap", "demo", "cfg$", Some("ConfigMap name \"cfg$\"")),
            ("IngressClass", "", "nginx.example", None),
            (
                "IngressClass",
                "",
                "Nginx",
                Some("IngressClass name \"Nginx\""),
            ),
            ("EndpointSlice", "demo", "web-x1", None),
            (
                "EndpointSlice",
                "demo",
                "web_x1",
                Some("EndpointSlice name \"web_x1\""),
            ),
            // not read by Ferrule: not its business
            ("Deployment", "a_b", "c_d", None),
        ];
        for (kind, ns, name, error) in cases {
            let api_version = match *kind {
                "Ingress" | "IngressClass" => "networking.k8s.io/v1",
                "EndpointSlice" => "discovery.k8s.io/v1",
                "Deployment" => "apps/v1",
                _ => "v1",
            };
            let mut doc = serde_json::json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": { "name": name, "namespace": ns },
            });
            if *kind == "EndpointSlice" {
                doc["addressType"] = "IPv4".into();
                doc["endpoints"] = serde_json::json!([]);
            }
            let in_list: serde_json::Value =
                serde_yaml::from_str(&SVC.replace("NAME", "in-list")).unwrap();
            let list =
                serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": [in_list, doc] });
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("good.yaml"), SVC.replace("NAME", "good")).unwrap();
            // the object alone, and in a List after a valid one (serde_yaml writes
            // control characters escaped: a raw U+0085 would be a line break)
            for (file, text) in [
                ("object.yaml", serde_yaml::to_string(&doc).unwrap()),
                ("list.yaml", serde_yaml::to_string(&list).unwrap()),
            ] {
                std::fs::write(dir.path().join(file), text).unwrap();
                let files = fingerprint(dir.path()).unwrap();
                let (snap, errors) =
                    load_cached(&files, Settings::default(), None, &mut Cache::default());
                let mut want = vec!["good"];
                match error {
                    None => {
                        assert!(errors.is_empty(), "{kind} {ns}/{name}: {errors:?}");
                        if *kind == "Service" {
                            want.push(name);
                        }
                        if file == "list.yaml" {
                            want.push("in-list");
                        }
                    }
                    Some(what) => {
                        let e = errors
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("\n");
                        assert_eq!(errors.len(), 1, "{kind} {ns}/{name}: {e}");
                        for part in [file, kind, what] {
                            assert!(e.contains(part), "{kind} {ns}/{name}: {e:?} lacks {part:?}");
                        }
                        // the offline commands fail on it
                        assert!(super::load(dir.path(), Settings::default(), None).is_err());
                    }
                }
                want.sort();
                assert_eq!(services(&snap), want, "{kind} {ns}/{name} in {file}");
                std::fs::remove_file(dir.path().join(file)).unwrap();
            }
        }
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
