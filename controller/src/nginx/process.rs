//! The NGINX process: test, start, reload, verify, quit. NGINX runs either as this
//! process's child ([`Launcher::Here`], standalone and single-container) or in a
//! container of its own under `ferrule nginx-supervisor` ([`Launcher::Supervisor`],
//! `super::supervisor`), which runs the same code there and takes each operation
//! over a unix socket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::{api, supervisor};

/// Where `nginx` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// As a child of this process, from this binary.
    Here(PathBuf),
    /// In another container, by `ferrule nginx-supervisor` listening on this unix
    /// socket: this process never runs or signals NGINX itself, and NGINX never
    /// shares this process's files (its credentials among them).
    Supervisor(PathBuf),
}

impl Launcher {
    /// `nginx -t -q -p PREFIX -c CONF -e ERROR_LOG`: nothing, or what NGINX said.
    pub async fn check(&self, prefix: &Path, conf: &Path, error_log: &Path) -> Result<(), String> {
        match self {
            Launcher::Here(binary) => check_here(binary, prefix, conf, error_log).await,
            Launcher::Supervisor(socket) => {
                let test = supervisor::Request::Test {
                    prefix: prefix.to_owned(),
                    conf: conf.to_owned(),
                    error_log: error_log.to_owned(),
                };
                supervisor::call(socket, &test)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// [`Launcher::check`] with `binary` as a child of this process.
pub(super) async fn check_here(
    binary: &Path,
    prefix: &Path,
    conf: &Path,
    error_log: &Path,
) -> Result<(), String> {
    let out = Command::new(binary)
        .arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(conf)
        .arg("-e")
        .arg(error_log)
        .arg("-t")
        .arg("-q")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&out.stderr).into_owned())
}

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

/// Reaps the zombies of NGINX workers whose master died: they are handed to PID 1
/// of their PID namespace, which `ferrule nginx-supervisor` is in NGINX's container,
/// and nothing else would wait for them. Only children that lead no process group
/// and are in another group than this process's are reaped: a master leads its own
/// group (its exit is for its `Child` to see) and whatever this process runs and
/// waits for itself (`nginx -t`) is in this process's group.
pub fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let me = std::process::id();
    let my_group = nix::unistd::getpgrp().as_raw() as u32;
    for pid in super::procfs::pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`: the name may hold anything but the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
        let [state, ppid, group] = fields[..] else {
            continue;
        };
        let (Ok(ppid), Ok(group)) = (ppid.parse::<u32>(), group.parse::<u32>()) else {
            continue;
        };
        if state == "Z" && ppid == me && group != my_group && group != pid {
            let pid = Pid::from_raw(pid as i32);
            if let Ok(status) = waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                tracing::debug!(?status, "reaped an orphaned NGINX process");
            }
        }
    }
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
/// running on the same prefix (see [`Nginx::adopt`]), which is supervised by pid;
/// with [`Launcher::Supervisor`], it is the supervisor's, and every operation is a
/// request to it.
pub struct Nginx {
    launcher: Launcher,
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
    /// An NGINX that is not running yet, run from `binary` as our child.
    pub fn new(binary: impl Into<PathBuf>, prefix: impl Into<PathBuf>) -> Self {
        Self::launched(Launcher::Here(binary.into()), prefix)
    }

    /// An NGINX that is not running yet, run by `launcher`.
    pub fn launched(launcher: Launcher, prefix: impl Into<PathBuf>) -> Self {
        Self {
            launcher,
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
    ///
    /// With a supervisor, the supervisor adopts (or reports the master it runs).
    pub async fn adopt(&mut self) -> Option<Adopted> {
        if let Some(socket) = self.supervisor() {
            let adopt = supervisor::Request::Adopt {
                prefix: self.prefix.clone(),
                worker_dir: self.worker_dir.clone(),
            };
            return match supervisor::call(socket, &adopt).await {
                Ok(r) => r.pid.zip(r.version).map(|(pid, version)| {
                    tracing::info!(pid, version = %version, "adopted the NGINX master the supervisor runs");
                    Adopted { pid, version }
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "no NGINX adopted from the supervisor");
                    None
                }
            };
        }
        if self.is_running_here() {
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

    /// The configuration version the workers answer with (`None`: no answer).
    pub(super) async fn config_version(&self) -> Option<String> {
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

    /// How NGINX is run.
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    fn supervisor(&self) -> Option<&Path> {
        match &self.launcher {
            Launcher::Supervisor(socket) => Some(socket),
            Launcher::Here(_) => None,
        }
    }

    fn conf(&self) -> PathBuf {
        self.prefix.join("conf/nginx.conf")
    }

    fn error_log(&self) -> PathBuf {
        self.prefix.join("logs/error.log")
    }

    /// Runs `nginx -t` on the files in the prefix (in NGINX's container, with a
    /// supervisor: its NGINX and modules are the ones that will load them).
    pub async fn test(&self) -> Result<(), TestFailure> {
        let checked = self
            .launcher
            .check(&self.prefix, &self.conf(), &self.error_log())
            .await;
        checked.map_err(|output| TestFailure::parse(&output))
    }

    /// Starts the master process (in the foreground, as our child, in a new process
    /// group). What a previous master left behind is cleared first: its workers (if it
    /// died without them) and its unix sockets (NGINX removes them only on a clean
    /// exit, and a stale one makes `bind()` fail).
    pub async fn start(&mut self) -> std::io::Result<()> {
        if let Some(socket) = self.supervisor() {
            let start = supervisor::Request::Start {
                prefix: self.prefix.clone(),
                worker_dir: self.worker_dir.clone(),
            };
            let started = supervisor::call(socket, &start).await?;
            tracing::info!(pid = ?started.pid, "the supervisor started NGINX");
            return Ok(());
        }
        if self.is_running_here() {
            return Err(std::io::Error::other("nginx is already running"));
        }
        let Launcher::Here(binary) = &self.launcher else {
            unreachable!("a supervisor's NGINX starts above")
        };
        let mut command = Command::new(binary);
        command
            .arg("-p")
            .arg(&self.prefix)
            .arg("-c")
            .arg(self.conf())
            .arg("-e")
            .arg(self.error_log());
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
        let child = command
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

    /// The master's pid, when running as our child or adopted.
    pub(super) fn pid(&self) -> Option<u32> {
        match self.adopted {
            Some(pid) => Some(pid as u32),
            None => self.child.as_ref().and_then(|c| c.id()),
        }
    }

    /// Whether the master process is still alive (with a supervisor: whether the
    /// supervisor answers that it is; one that does not answer runs none we know of).
    pub async fn is_running(&mut self) -> bool {
        if let Some(socket) = self.supervisor() {
            return match supervisor::call(socket, &supervisor::Request::Status).await {
                Ok(status) => status.pid.is_some(),
                Err(e) => {
                    tracing::warn!(error = %e, "the NGINX supervisor does not answer");
                    false
                }
            };
        }
        self.is_running_here()
    }

    fn is_running_here(&mut self) -> bool {
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
    pub async fn reload(&self) -> std::io::Result<()> {
        if let Some(socket) = self.supervisor() {
            return supervisor::call(socket, &supervisor::Request::Reload)
                .await
                .map(drop);
        }
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
        if let Some(socket) = self.supervisor() {
            let quit = supervisor::Request::Quit {
                timeout_ms: timeout.as_millis().try_into().unwrap_or(u64::MAX),
            };
            if let Err(e) = supervisor::call(socket, &quit).await {
                tracing::warn!(error = %e, "the NGINX supervisor did not stop NGINX");
            }
            return;
        }
        if self.signal(Signal::SIGQUIT).is_err() {
            return;
        }
        if self.adopted.is_some() {
            // Not our child: watch it go instead of waiting for it.
            let deadline = Instant::now() + timeout;
            while self.is_running_here() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.is_running_here() {
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
            if !self.is_running().await {
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
