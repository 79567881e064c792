//! Where the NGINX worker processes can open paths themselves.
//!
//! Started as root, NGINX runs its workers as `nobody`. The master opens the
//! configuration, logs and listening sockets, but a worker opens some paths itself:
//! it connects to the answer sockets (503 without endpoints, the ssl-redirect),
//! writes temporary files of large bodies, and (njs) reads its state and default
//! certificate. Under a prefix whose parents `nobody` cannot enter (`/root/...`, a
//! `mktemp -d` directory) each of those fails, and a request that needed one gets a
//! 502. Those paths then live in a directory of their own below `/run/ferrule`,
//! named after the prefix; everything else stays in the prefix.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the worker directory of an unreachable prefix is made.
pub const FALLBACK_ROOT: &str = "/run/ferrule";

/// A layout the workers cannot use.
#[derive(Debug, thiserror::Error)]
#[error(
    "the NGINX workers (user {user}) cannot enter {blocked}, which holds --nginx-prefix \
     {prefix}, and the directory for their files, {fallback}, is not usable: {reason}; \
     give others search permission on {blocked} (chmod o+x) or choose a prefix below /var/lib"
)]
pub struct Unreachable {
    /// The worker user.
    pub user: String,
    /// The first directory on the way to the prefix that the user cannot enter.
    pub blocked: PathBuf,
    /// The prefix.
    pub prefix: PathBuf,
    /// The directory tried instead.
    pub fallback: PathBuf,
    /// Why that did not work.
    pub reason: String,
}

/// The worker directory for `prefix` when NGINX runs its workers as `user`: `None`
/// when the user can enter the prefix (everything stays there), else a directory
/// below [`FALLBACK_ROOT`]. Creates the prefix first, so that its own mode counts.
pub fn choose(prefix: &Path, user: &str) -> Result<Option<PathBuf>, Unreachable> {
    let Ok(Some(account)) = nix::unistd::User::from_name(user) else {
        // NGINX itself refuses an unknown user, with a clear message.
        return Ok(None);
    };
    let gid = nix::unistd::Group::from_name("nogroup")
        .ok()
        .flatten()
        .map_or(account.gid.as_raw(), |g| g.gid.as_raw());
    let _ = std::fs::create_dir_all(prefix);
    let Some(blocked) = blocking_dir(prefix, account.uid.as_raw(), gid) else {
        return Ok(None);
    };
    let fallback = Path::new(FALLBACK_ROOT).join(name_for(prefix));
    let fail = |reason: String| Unreachable {
        user: user.to_owned(),
        blocked: blocked.clone(),
        prefix: prefix.to_owned(),
        fallback: fallback.clone(),
        reason,
    };
    for dir in [Path::new(FALLBACK_ROOT), &fallback] {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| fail(e.to_string()))?;
    }
    if let Some(also) = blocking_dir(&fallback, account.uid.as_raw(), gid) {
        return Err(fail(format!(
            "the user cannot enter {} either",
            also.display()
        )));
    }
    tracing::info!(
        prefix = %prefix.display(),
        blocked = %blocked.display(),
        worker_dir = %fallback.display(),
        "the NGINX workers cannot enter the prefix; their sockets and temporary files are elsewhere"
    );
    Ok(Some(fallback))
}

/// The first directory from `/` down to `path` (included, where it exists) that a
/// process with `uid` and `gid` may not enter (search permission, as the kernel
/// checks it for a user that is not root).
pub fn blocking_dir(path: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    let mut at = PathBuf::new();
    for part in path.components() {
        at.push(part);
        let Ok(meta) = std::fs::metadata(&at) else {
            // Not there yet: it is created with the process's umask, below.
            return None;
        };
        let mode = meta.mode();
        let bit = if meta.uid() == uid {
            0o100
        } else if meta.gid() == gid {
            0o010
        } else {
            0o001
        };
        if mode & bit == 0 {
            return Some(at);
        }
    }
    None
}

/// A short name for the prefix's worker directory: two prefixes never share one.
fn name_for(prefix: &Path) -> String {
    let hash = blake3::hash(prefix.as_os_str().as_encoded_bytes());
    hash.to_hex()[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOBODY: u32 = 65534;

    fn dir_with_mode(parent: &Path, name: &str, mode: u32) -> PathBuf {
        let d = parent.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    #[test]
    fn a_private_parent_blocks_and_an_open_one_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let private = dir_with_mode(tmp.path(), "private", 0o700);
        let open = dir_with_mode(tmp.path(), "open", 0o711);
        assert_eq!(
            blocking_dir(&private.join("nginx/deeper"), NOBODY, NOBODY),
            Some(private)
        );
        assert_eq!(blocking_dir(&open.join("nginx"), NOBODY, NOBODY), None);
    }

    #[test]
    fn the_owner_s_and_the_group_s_bits_count_for_them() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = dir_with_mode(tmp.path(), "d", 0o710);
        let meta = std::fs::metadata(&d).unwrap();
        // Its owner may enter, its group may, anyone else may not.
        assert_eq!(blocking_dir(&d, meta.uid(), NOBODY), None);
        assert_eq!(blocking_dir(&d, NOBODY, meta.gid()), None);
        assert_eq!(blocking_dir(&d, NOBODY, NOBODY), Some(d));
    }

    #[test]
    fn each_prefix_has_its_own_worker_directory() {
        assert_ne!(
            name_for(Path::new("/a/nginx")),
            name_for(Path::new("/b/nginx"))
        );
        assert_eq!(name_for(Path::new("/a/nginx")).len(), 16);
    }
}
