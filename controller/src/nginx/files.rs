//! Writing NGINX files: atomic (temp + rename), unchanged files untouched, stale
//! generated files removed, and every change undoable until it is committed.
//!
//! Nothing here follows a symbolic link at the end of a path: with NGINX in a
//! container of its own (`super::supervisor`), the prefix is a directory NGINX's
//! user may write, and a link it left there must not make the controller read one
//! of its own files (the service-account token) into the prefix or a request
//! (a rollback writes back what it read), nor write or chmod one through it.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Directories whose `*.conf` / `*.pem` files Ferrule owns: files it did not render
/// this time are stale and removed.
const MANAGED_DIRS: &[&str] = &["conf/servers", "conf/certs", AUTH_DIR];

/// Where basic-auth users' files are, below the worker directory (the workers open
/// them at each request).
pub const AUTH_DIR: &str = "auth";

/// A file to write: contents, Unix mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Contents.
    pub bytes: Vec<u8>,
    /// Permission bits (0o600 for keys and tokens).
    pub mode: u32,
    /// The owner's uid when it is not the controller's (a file the NGINX workers
    /// read with mode 0o600 belongs to their user).
    pub owner: Option<u32>,
}

impl FileSpec {
    /// `bytes` with `mode`, owned by the controller.
    pub fn new(bytes: Vec<u8>, mode: u32) -> Self {
        Self {
            bytes,
            mode,
            owner: None,
        }
    }
}

/// A file's previous contents, mode and owner (`None`: it did not exist).
type Previous = Option<(Vec<u8>, u32, u32)>;

/// What a write changed, so that it can be undone.
#[derive(Debug, Default)]
pub struct Change {
    /// (path, previous contents or `None` if the file was new).
    undo: Vec<(PathBuf, Previous)>,
}

impl Change {
    /// Whether anything was written or removed.
    pub fn is_empty(&self) -> bool {
        self.undo.is_empty()
    }

    /// Paths written or removed.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.undo.iter().map(|(p, _)| p.as_path())
    }
}

/// Writes `files` (relative to `prefix`); returns what changed.
///
/// Files whose contents are identical are not rewritten, so their mtime and inode
/// stay the same. In the managed directories, files not in `files` are removed.
///
/// Every file is replaced atomically (temporary file, then rename), and the whole
/// change is made durable by one `syncfs` at the end instead of an fsync per file:
/// a cold start writes one file per host, and per-file flushes cost more than the
/// rest of the controller's pass (controller/BENCHMARKS.md). A power loss before
/// that flush can leave a renamed file without its data (a process crash cannot:
/// the page cache survives it); the next start repairs it, since it compares every
/// file with what it renders and rewrites what differs.
pub fn write_all(prefix: &Path, files: &BTreeMap<String, FileSpec>) -> std::io::Result<Change> {
    write_managed(prefix, &[], files)
}

/// [`write_all`], with `more_managed` (absolute) directories whose files not in
/// `files` are removed too; their files' keys are absolute paths.
pub fn write_managed(
    prefix: &Path,
    more_managed: &[PathBuf],
    files: &BTreeMap<String, FileSpec>,
) -> std::io::Result<Change> {
    let mut change = Change::default();
    let result =
        write_inner(prefix, more_managed, files, &mut change).and_then(|()| sync_fs(prefix));
    if let Err(e) = result {
        // Leave the tree as it was: a half-written change is worse than none.
        let _ = rollback(change);
        return Err(e);
    }
    Ok(change)
}

fn write_inner(
    prefix: &Path,
    more_managed: &[PathBuf],
    files: &BTreeMap<String, FileSpec>,
    change: &mut Change,
) -> std::io::Result<()> {
    // All temporary files first, so that a failure (disk full) renames nothing.
    let mut staged: Vec<(PathBuf, PathBuf, Previous)> = Vec::new();
    let mut stage = || -> std::io::Result<()> {
        for (rel, spec) in files {
            let path = prefix.join(rel);
            let old = read(&path)?;
            if old.as_ref().is_some_and(|(b, m, uid)| {
                *b == spec.bytes && *m == spec.mode && spec.owner.is_none_or(|o| o == *uid)
            }) {
                continue;
            }
            let tmp = write_temp(&path, &spec.bytes, spec.mode, spec.owner, false)?;
            staged.push((path, tmp, old));
        }
        Ok(())
    };
    if let Err(e) = stage() {
        remove_temps(staged.iter().map(|(_, tmp, _)| tmp.as_path()));
        return Err(e);
    }
    let mut staged = staged.into_iter();
    while let Some((path, tmp, old)) = staged.next() {
        if let Err(e) = fs::rename(&tmp, &path) {
            remove_temps(
                std::iter::once(tmp.as_path())
                    .chain(staged.as_slice().iter().map(|(_, t, _)| t.as_path())),
            );
            return Err(e);
        }
        change.undo.push((path, old));
    }
    let managed = MANAGED_DIRS.iter().map(|d| prefix.join(d));
    for dir in managed.chain(more_managed.iter().cloned()) {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry?;
            // A link is removed as it is, never read through.
            let kind = entry.file_type()?;
            if !kind.is_file() && !kind.is_symlink() {
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(prefix)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if !files.contains_key(&rel) {
                let old = read(&path)?;
                fs::remove_file(&path)?;
                change.undo.push((path, old));
            }
        }
    }
    Ok(())
}

/// Undoes a change: restores previous contents, removes files that were new.
pub fn rollback(change: Change) -> std::io::Result<()> {
    let Some(dir) = change
        .undo
        .first()
        .and_then(|(p, _)| p.parent().map(Path::to_owned))
    else {
        return Ok(());
    };
    for (path, old) in change.undo.into_iter().rev() {
        match old {
            Some((bytes, mode, uid)) => {
                let tmp = write_temp(&path, &bytes, mode, Some(uid), false)?;
                fs::rename(&tmp, &path)?;
            }
            None => match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
    }
    // One flush for the whole undo, as for the change itself (one prefix, one file
    // system).
    sync_fs(&dir)
}

/// A file's contents, mode and owner; `None` when it does not exist or is a
/// symbolic link (which is then replaced, or removed by a rollback, unread).
fn read(path: &Path) -> std::io::Result<Previous> {
    let Some(mut file) = open_no_follow(path)? else {
        return Ok(None);
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a file",
            path.display()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(Some((
        bytes,
        meta.permissions().mode() & 0o7777,
        meta.uid(),
    )))
}

/// Opens `path` for reading unless it does not exist or is a symbolic link.
fn open_no_follow(path: &Path) -> std::io::Result<Option<fs::File>> {
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path);
    match opened {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A file's contents, `None` when it does not exist or is a symbolic link: for the
/// files of the prefix read back (the token, the default certificate, the balancer
/// sources compared before they are written).
pub fn read_no_follow(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    Ok(read(path)?.map(|(bytes, _, _)| bytes))
}

/// Commits the caches of the file system holding `path` (data and metadata of
/// every file and directory written since the last flush) to disk.
fn sync_fs(path: &Path) -> std::io::Result<()> {
    let dir = fs::File::open(path)?;
    nix::unistd::syncfs(&dir).map_err(std::io::Error::from)
}

/// Writes `bytes` with `mode` into a temporary file beside `path`; returns its path.
/// Flushed only with `sync`: [`write_all`] renames many and flushes once.
fn write_temp(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<u32>,
    sync: bool,
) -> std::io::Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A leading dot keeps it out of NGINX's `include servers/*.conf`.
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    // A leftover of an earlier run (or a link in its place) goes first: the file is
    // created new, never opened through a link.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::debug!(path = %tmp.display(), error = %e, "cannot remove a leftover")
        }
        _ => {}
    }
    let written: std::io::Result<()> = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_data()?;
        }
        // The umask may have narrowed `mode`; set on the file opened, not the path.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        if let Some(uid) = owner
            && uid != nix::unistd::geteuid().as_raw()
        {
            std::os::unix::fs::fchown(&f, Some(uid), None)?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            // Not a file this call created (it exists): leave it.
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = fs::remove_file(&tmp);
            }
            Err(e)
        }
    }
}

fn remove_temps<'a>(temps: impl Iterator<Item = &'a Path>) {
    for tmp in temps {
        let _ = fs::remove_file(tmp);
    }
}

/// Writes a temporary file beside `path` with `mode`, flushes it, then renames it
/// over `path`: for single files written outside [`write_all`] (token, default
/// certificate, Lua sources).
pub fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = write_temp(path, bytes, mode, None, true)?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> FileSpec {
        FileSpec::new(s.as_bytes().to_vec(), 0o644)
    }

    #[test]
    fn unchanged_files_are_not_rewritten_and_changes_roll_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert("conf/nginx.conf".to_owned(), spec("a"));
        files.insert("conf/servers/host_a.conf".to_owned(), spec("server a"));
        let first = write_all(dir.path(), &files).unwrap();
        assert_eq!(first.paths().count(), 2);
        assert!(write_all(dir.path(), &files).unwrap().is_empty());

        let mut next = BTreeMap::new();
        next.insert("conf/nginx.conf".to_owned(), spec("b"));
        next.insert("conf/servers/host_b.conf".to_owned(), spec("server b"));
        let change = write_all(dir.path(), &next).unwrap();
        assert!(
            !dir.path().join("conf/servers/host_a.conf").exists(),
            "stale server file removed"
        );
        rollback(change).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("conf/nginx.conf")).unwrap(),
            "a"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("conf/servers/host_a.conf")).unwrap(),
            "server a"
        );
        assert!(
            !dir.path().join("conf/servers/host_b.conf").exists(),
            "new file removed by rollback"
        );
    }

    #[test]
    fn a_failed_write_changes_nothing_and_leaves_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let servers = dir.path().join("conf/servers");
        let mut files = BTreeMap::new();
        files.insert("conf/servers/host_a.conf".to_owned(), spec("a"));
        write_all(dir.path(), &files).unwrap();
        // A directory where host_b's temporary file goes: staging fails after the
        // temporary files of nginx.conf and host_a were written.
        let squatter = servers.join(format!(".host_b.conf.tmp-{}", std::process::id()));
        fs::create_dir(&squatter).unwrap();

        let mut next = BTreeMap::new();
        next.insert("conf/nginx.conf".to_owned(), spec("main"));
        next.insert("conf/servers/host_a.conf".to_owned(), spec("a2"));
        next.insert("conf/servers/host_b.conf".to_owned(), spec("b"));
        next.insert("conf/servers/host_c.conf".to_owned(), spec("c"));
        assert!(write_all(dir.path(), &next).is_err());

        assert_eq!(
            fs::read_to_string(servers.join("host_a.conf")).unwrap(),
            "a"
        );
        assert!(!dir.path().join("conf/nginx.conf").exists());
        assert!(!servers.join("host_c.conf").exists());
        let leftovers: Vec<PathBuf> = [dir.path().join("conf"), servers.clone()]
            .iter()
            .flat_map(|d| fs::read_dir(d).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

        // Once the obstacle is gone, the same change goes through whole.
        fs::remove_dir(&squatter).unwrap();
        assert_eq!(write_all(dir.path(), &next).unwrap().paths().count(), 4);
        assert_eq!(
            fs::read_to_string(servers.join("host_c.conf")).unwrap(),
            "c"
        );
    }

    /// What NGINX's user could leave in a shared prefix: links to the controller's
    /// own files. None is read through, written through or kept.
    #[test]
    fn links_in_the_prefix_are_replaced_unread() {
        let dir = tempfile::tempdir().unwrap();
        let private = tempfile::tempdir().unwrap();
        let token = private.path().join("token");
        fs::write(&token, "the cluster's keys").unwrap();
        fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
        let servers = dir.path().join("conf/servers");
        fs::create_dir_all(&servers).unwrap();
        // A link where a rendered file goes, one where a stale file would be, and
        // one in place of the temporary file the next write creates.
        std::os::unix::fs::symlink(&token, servers.join("host_a.conf")).unwrap();
        std::os::unix::fs::symlink(&token, servers.join("stale.conf")).unwrap();
        let tmp = servers.join(format!(".host_b.conf.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&token, &tmp).unwrap();
        assert_eq!(read_no_follow(&servers.join("host_a.conf")).unwrap(), None);

        let mut files = BTreeMap::new();
        files.insert("conf/servers/host_a.conf".to_owned(), spec("server a"));
        files.insert("conf/servers/host_b.conf".to_owned(), spec("server b"));
        let change = write_all(dir.path(), &files).unwrap();
        assert_eq!(fs::read_to_string(&token).unwrap(), "the cluster's keys");
        let mode = fs::metadata(&token).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "not chmod-ed through a link");
        assert_eq!(
            fs::read_to_string(servers.join("host_a.conf")).unwrap(),
            "server a"
        );
        assert!(fs::symlink_metadata(servers.join("stale.conf")).is_err());
        // The rollback of that change puts back nothing it read through a link.
        rollback(change).unwrap();
        for name in ["host_a.conf", "host_b.conf", "stale.conf"] {
            assert!(
                fs::symlink_metadata(servers.join(name)).is_err(),
                "{name} left after the rollback"
            );
        }
        let left: Vec<String> = fs::read_dir(&servers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(fs::read_to_string(&token).unwrap(), "the cluster's keys");
    }

    #[test]
    fn secrets_get_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert(
            "conf/certs/x.pem".to_owned(),
            FileSpec::new(b"k".to_vec(), 0o600),
        );
        write_all(dir.path(), &files).unwrap();
        let mode = fs::metadata(dir.path().join("conf/certs/x.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
