//! The NGINX process: test, start, reload, verify, quit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::api;

/// The balancer API / config-version socket, relative to the prefix.
pub const API_SOCKET: &str = "run/balancer.sock";
/// The socket of the server that answers 503 for the Lua balancer.
pub const UNAVAILABLE_SOCKET: &str = "run/answer-503.sock";
/// The socket of the server that answers the ssl-redirect for the Lua balancer.
pub const REDIRECT_SOCKET: &str = "run/answer-redirect.sock";
/// The unix sockets NGINX listens on that worker processes connect to (below the
/// worker directory, `RenderOptions::worker_path`); the API socket is the prefix's.
const ANSWER_SOCKETS: [&str; 2] = [UNAVAILABLE_SOCKET, REDIRECT_SOCKET];

/// The master's pid file, relative to the prefix (`pid` in nginx.conf).
pub const PID_FILE: &str = "run/nginx.pid";

/// Whether `pid` is a live (not zombie) NGINX master running `conf`.
///
/// The master rewrites its command line to `nginx: master process ` followed by the
/// original arguments, which name the configuration file.
pub(crate) fn is_master_of(pid: i32, conf: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let zombie = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_none_or(|state| state == "Z" || state == "X");
    if zombie {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    cmdline.starts_with("nginx: master process ")
        && cmdline.split_whitespace().any(|arg| Path::new(arg) == conf)
}

/// `nginx -t` rejected the configuration.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TestFailure {
    /// The first `[emerg]` line (or the whole output when none).
    pub message: String,
    /// File and line named by NGINX, when it named one.
    pub location: Option<(PathBuf, usize)>,
}

impl TestFailure {
    fn parse(output: &str) -> Self {
        let line = output
            .lines()
            .find(|l| l.contains("[emerg]") || l.contains("[crit]"))
            .or_else(|| output.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("nginx -t failed without output")
            .trim();
        let message = line.strip_prefix("nginx: ").unwrap_or(line).to_owned();
        let location = line.rsplit_once(" in ").and_then(|(_, at)| {
            let (file, line) = at.rsplit_once(':')?;
            Some((PathBuf::from(file), line.trim().parse().ok()?))
        });
        Self { message, location }
    }
}

/// Controls one NGINX master process running from a prefix directory.
///
/// The master runs in its own process group with its workers, so that when it dies
/// (killed, crashed) its orphaned workers can be stopped too: they would otherwise
/// keep the listening sockets and answer with a stale configuration, and no new
/// master could bind.
///
/// The master is either our child, or a master an earlier controller process left
/// running on the same prefix (see [`Nginx::adopt`]), which is supervised by pid.
pub struct Nginx {
    binary: PathBuf,
    prefix: PathBuf,
    child: Option<Child>,
    /// The pid of an adopted master (not our child: it cannot be waited for).
    adopted: Option<i32>,
    /// Process group of the current (or last) master and its workers.
    group: Option<i32>,
    /// Where the answer sockets are, when not below the prefix.
    worker_dir: Option<PathBuf>,
}

/// A running master found by [`Nginx::adopt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    /// The master's pid.
    pub pid: u32,
    /// The configuration version its workers answer with.
    pub version: String,
}

impl Nginx {
    /// An NGINX that is not running yet.
    pub fn new(binary: impl Into<PathBuf>, prefix: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            prefix: prefix.into(),
            child: None,
            adopted: None,
            group: None,
            worker_dir: None,
        }
    }

    /// The answer sockets are below `dir` rather than the prefix (see
    /// `RenderOptions::worker_dir`).
    pub fn with_worker_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.worker_dir = dir;
        self
    }

    /// Takes over a master that an earlier controller process started on this prefix
    /// and left running (the controller was killed or restarted; NGINX runs in its
    /// own process group, so it survives). Adopting it keeps its workers and their
    /// connections: a restarted controller with an unchanged configuration causes no
    /// reload.
    ///
    /// The pid file must name a live `nginx: master process` whose command line names
    /// this prefix's configuration, and the config-version endpoint on this prefix's
    /// API socket must answer. Anything else (no pid file, a stale pid, another
    /// program, another prefix) adopts nothing, and the next apply starts NGINX; a
    /// master of this prefix that does not answer is killed (with its process group)
    /// when that new one starts.
    pub async fn adopt(&mut self) -> Option<Adopted> {
        if self.is_running() {
            return None;
        }
        let pid: i32 = std::fs::read_to_string(self.prefix.join(PID_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if pid <= 1 || !is_master_of(pid, &self.prefix.join("conf/nginx.conf")) {
            tracing::info!(pid, "the pid file names no NGINX master of this prefix");
            return None;
        }
        // Only a group of its own is ours to kill: a master started by hand may share
        // a group with unrelated processes.
        let group = nix::unistd::getpgid(Some(Pid::from_raw(pid)))
            .ok()
            .map(Pid::as_raw)
            .filter(|g| *g == pid);
        let version = match self.config_version().await {
            Some(v) => v,
            None => {
                tracing::warn!(
                    pid,
                    "NGINX master of this prefix found, but its config version does not answer; replacing it"
                );
                // It holds the listening ports: the new master could not bind.
                self.group = group;
                return None;
            }
        };
        self.adopted = Some(pid);
        self.group = group;
        tracing::info!(pid, version = %version, "adopted the running NGINX master");
        Some(Adopted {
            pid: pid as u32,
            version,
        })
    }

    async fn config_version(&self) -> Option<String> {
        let socket = self.prefix.join(API_SOCKET);
        // A hung master must not hang the controller's start.
        let request = api::request(&socket, "GET", "/ferrule/config-version", None, None);
        let resp = tokio::time::timeout(Duration::from_secs(5), request)
            .await
            .ok()?
            .ok()?;
        (resp.status == 200).then(|| resp.body.trim().to_owned())
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.binary);
        c.arg("-p")
            .arg(&self.prefix)
            .arg("-c")
            .arg(self.prefix.join("conf/nginx.conf"));
        c.arg("-e").arg(self.prefix.join("logs/error.log"));
        c
    }

    /// Runs `nginx -t` on the files in the prefix.
    pub async fn test(&self) -> Result<(), TestFailure> {
        let out = self
            .command()
            .arg("-t")
            .arg("-q")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| TestFailure {
                message: format!("cannot run {}: {e}", self.binary.display()),
                location: None,
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(TestFailure::parse(&String::from_utf8_lossy(&out.stderr)))
    }

    /// Starts the master process (in the foreground, as our child, in a new process
    /// group). What a previous master left behind is cleared first: its workers (if it
    /// died without them) and its unix sockets (NGINX removes them only on a clean
    /// exit, and a stale one makes `bind()` fail).
    pub async fn start(&mut self) -> std::io::Result<()> {
        if self.is_running() {
            return Err(std::io::Error::other("nginx is already running"));
        }
        self.adopted = None;
        self.kill_group();
        let worker_dir = self.worker_dir.as_ref().unwrap_or(&self.prefix);
        let answers = ANSWER_SOCKETS.iter().map(|s| worker_dir.join(s));
        for socket in std::iter::once(self.prefix.join(API_SOCKET)).chain(answers) {
            match std::fs::remove_file(socket) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let child = self
            .command()
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()?;
        self.group = child.id().map(|p| p as i32);
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL to what remains of the last master's process group (after the master
    /// itself exited).
    fn kill_group(&mut self) {
        if let Some(group) = self.group.take() {
            match killpg(Pid::from_raw(group), Signal::SIGKILL) {
                Ok(()) => tracing::warn!(group, "killed NGINX processes left by a dead master"),
                Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => tracing::warn!(group, error = %e, "cannot kill NGINX process group"),
            }
        }
    }

    /// The master's pid, when running.
    pub fn pid(&self) -> Option<u32> {
        match self.adopted {
            Some(pid) => Some(pid as u32),
            None => self.child.as_ref().and_then(|c| c.id()),
        }
    }

    /// Whether the master process is still alive.
    pub fn is_running(&mut self) -> bool {
        if let Some(pid) = self.adopted {
            if is_master_of(pid, &self.prefix.join("conf/nginx.conf")) {
                return true;
            }
            self.adopted = None;
            self.kill_group();
            return false;
        }
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                self.kill_group();
                false
            }
            None => false,
        }
    }

    /// Asks the master to reload its configuration (SIGHUP).
    pub fn reload(&self) -> std::io::Result<()> {
        self.signal(Signal::SIGHUP)
    }

    fn signal(&self, sig: Signal) -> std::io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| std::io::Error::other("nginx is not running"))?;
        kill(Pid::from_raw(pid as i32), sig).map_err(std::io::Error::from)
    }

    /// Graceful shutdown (SIGQUIT): workers finish their requests; waits up to `timeout`
    /// and then kills.
    pub async fn quit(&mut self, timeout: Duration) {
        if self.signal(Signal::SIGQUIT).is_err() {
            return;
        }
        if self.adopted.is_some() {
            // Not our child: watch it go instead of waiting for it.
            let deadline = Instant::now() + timeout;
            while self.is_running() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.is_running() {
                let _ = self.signal(Signal::SIGKILL);
            }
            self.adopted = None;
            self.kill_group();
            return;
        }
        if let Some(child) = self.child.as_mut()
            && tokio::time::timeout(timeout, child.wait()).await.is_err()
        {
            let _ = child.kill().await;
        }
        self.child = None;
        self.kill_group();
    }

    /// Waits until new connections are answered by workers serving `version`.
    pub async fn wait_for_version(&mut self, version: &str, timeout: Duration) -> bool {
        let socket = self.prefix.join(API_SOCKET);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            // A master that died meanwhile will never confirm: supervision restarts
            // it now rather than after the timeout.
            if !self.is_running() {
                return false;
            }
            if let Ok(resp) =
                api::request(&socket, "GET", "/ferrule/config-version", None, None).await
                && resp.status == 200
                && resp.body.trim() == version
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for Nginx {
    /// The master is killed on drop (`kill_on_drop`); its workers go with it.
    fn drop(&mut self) {
        if (self.child.is_some() || self.adopted.is_some())
            && let Some(group) = self.group
        {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TestFailure;

    #[test]
    fn nginx_errors_name_file_and_line() {
        let out = "nginx: [emerg] unknown directive \"bogus\" in /p/conf/servers/host_a.conf:12\nnginx: configuration file /p/conf/nginx.conf test failed\n";
        let f = TestFailure::parse(out);
        assert_eq!(
            f.message,
            "[emerg] unknown directive \"bogus\" in /p/conf/servers/host_a.conf:12"
        );
        assert_eq!(f.location, Some(("/p/conf/servers/host_a.conf".into(), 12)));
        assert_eq!(
            TestFailure::parse("nginx: [emerg] no events section\n").location,
            None
        );
    }
}
