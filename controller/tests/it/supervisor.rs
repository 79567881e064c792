//! NGINX under `ferrule nginx-supervisor`, the controller with `--nginx-supervisor`:
//! the split of the chart's pod (two containers) as two processes on this machine.
//! The controller must drive an NGINX it cannot signal itself as it drives its own
//! child: serve, reload, test (config safety), restart after a crash, adopt after
//! its own restart, and stop in order.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

const T0: &str = "2026-01-01T00:00:00Z";
const WAIT: Duration = Duration::from_secs(15);

/// `ferrule nginx-supervisor` on a socket of its own, as NGINX's container runs it.
struct Supervisor {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Supervisor {
    fn start() -> Supervisor {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("shared/supervisor.sock");
        let log = dir.path().join("supervisor.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ferrule"))
            .arg("nginx-supervisor")
            .arg("--socket")
            .arg(&socket)
            .env("RUST_LOG", "info,ferrule=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("ferrule nginx-supervisor");
        Supervisor {
            child,
            socket,
            log,
            _dir: dir,
        }
    }

    fn socket(&self) -> &str {
        self.socket.to_str().unwrap()
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Whether it has exited (reaped here).
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for it to exit.
    async fn exits_within(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while !self.exited() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Field `n` (1-based, after the name) of `/proc/PID/stat`: 1 state, 2 ppid.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n - 1).map(str::to_owned)
}

/// The children of `pid`, with their state (`Z`: a zombie nobody reaped).
fn children(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if stat_field(child, 2).is_some_and(|p| p == pid.to_string()) {
            out.push((child, stat_field(child, 1).unwrap_or_default()));
        }
    }
    out
}

fn web(path: &str, annotations: &[(&str, &str)]) -> String {
    ingress(
        "demo",
        "web",
        T0,
        "web.test",
        &[(path, "Prefix", "echo")],
        annotations,
    )
}

/// An echo backend, manifests serving `web.test/a` from it, the supervisor, and the
/// controller on it (with `extra` flags), Ready.
async fn split(extra: &[&str]) -> (Echo, Manifests, Supervisor, Ferrule) {
    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("ing.yaml", &web("/a", &[]));
    let sup = Supervisor::start();
    let mut args = vec!["--nginx-supervisor", sup.socket()];
    args.extend(extra);
    let f = Ferrule::spawn(m.path(), &args);
    let ready = wait_until(Duration::from_secs(30), || async {
        f.get_status("/readyz").await.0 == 200
    })
    .await;
    assert!(
        ready,
        "the controller on the supervisor's NGINX becomes Ready; log:\n{}\nsupervisor:\n{}",
        f.logs(),
        sup.logs()
    );
    (echo, m, sup, f)
}

#[tokio::test]
async fn a_supervised_nginx_serves_reloads_and_comes_back_after_kill_9() {
    let (echo, m, sup, f) = split(&[]).await;
    let backend = echo.addr.to_string();
    assert_eq!(f.backend("web.test", "/a").await, (200, backend.clone()));
    // NGINX is the supervisor's child, and nothing of it is the controller's.
    let master = f.master_pid().expect("pid file");
    assert_eq!(
        stat_field(master, 2),
        Some(sup.child.id().to_string()),
        "the master's parent is the supervisor"
    );
    assert_eq!(
        children(f.child.id()),
        vec![],
        "the controller runs no process"
    );
    // The process metrics come from the supervisor, which sees the processes.
    let procs = f
        .metric("nginx_ingress_controller_nginx_process_num_procs", "")
        .await;
    assert_eq!(procs, 3.0, "master and two workers");

    // An Ingress change: rendered here, tested and reloaded there, verified here.
    let workers = f.worker_pids();
    let reloads = f.reloads().await;
    m.write("ing.yaml", &web("/b", &[]));
    let applied = wait_until(WAIT, || async {
        f.backend("web.test", "/b").await == (200, backend.clone())
    })
    .await;
    assert!(applied, "the change is served; log:\n{}", f.logs());
    f.old_workers_gone().await;
    assert_eq!(f.get("web.test", "/a").await.0, 404, "the old path is gone");
    assert_eq!(f.master_pid(), Some(master), "a reload keeps the master");
    assert!(
        f.worker_pids().iter().all(|w| !workers.contains(w)),
        "new workers: {workers:?} → {:?}",
        f.worker_pids()
    );
    // The count follows the verification, which may finish after the first new
    // answer: wait for it, then check there was exactly one.
    let counted = wait_until(WAIT, || async { f.reloads().await > reloads }).await;
    assert!(counted, "the reload is counted; log:\n{}", f.logs());
    assert_eq!(f.reloads().await, reloads + 1.0, "one verified reload");
    assert!(
        sup.logs().contains("NGINX started"),
        "the supervisor started it:\n{}",
        sup.logs()
    );

    // kill -9 of the master: the controller notices through the supervisor, which
    // kills the orphaned workers and starts a new master.
    let workers = f.worker_pids();
    kill_9(master);
    let back = wait_until(WAIT, || async {
        f.master_pid().is_some_and(|p| p != master && alive(p))
            && f.get_status("/readyz").await.0 == 200
            && f.backend("web.test", "/b").await == (200, backend.clone())
    })
    .await;
    assert!(
        back,
        "a new master serves; log:\n{}\nsupervisor:\n{}",
        f.logs(),
        sup.logs()
    );
    assert_eq!(f.metric("ferrule_nginx_restarts_total", "").await, 1.0);
    let new_master = f.master_pid().unwrap();
    assert_eq!(stat_field(new_master, 2), Some(sup.child.id().to_string()));
    // The old workers were killed, and reaped by the supervisor (their subreaper):
    // no zombie is left among its children.
    let reaped = wait_until(Duration::from_secs(5), || async {
        workers.iter().all(|w| !alive(*w))
            && children(sup.child.id())
                .iter()
                .all(|(_, state)| state != "Z")
    })
    .await;
    assert!(
        reaped,
        "old workers {workers:?} gone and reaped; supervisor's children: {:?}",
        children(sup.child.id())
    );
}

#[tokio::test]
async fn config_safety_tests_in_the_supervisors_nginx() {
    let (echo, m, sup, f) = split(&["--allow-snippet-annotations"]).await;
    // `nginx -t` runs where NGINX and its modules are: its complaint, with the file
    // and line, comes back through the supervisor and names the Ingress.
    let broken = ingress(
        "demo",
        "broken",
        "2026-01-02T00:00:00Z",
        "broken.test",
        &[("/", "Prefix", "echo")],
        &[("configuration-snippet", "add_header X-Broken;")],
    );
    m.write("broken.yaml", &broken);
    let rejected = wait_until(WAIT, || async {
        f.resource("Ingress", "demo", "broken")
            .await
            .is_some_and(|r| r["state"] == "rejected")
    })
    .await;
    let r = f.resource("Ingress", "demo", "broken").await;
    assert!(rejected, "rejected: {r:?}; log:\n{}", f.logs());
    let message = r.unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("invalid number of arguments in \"add_header\""),
        "NGINX's own words: {message}"
    );
    assert_eq!(
        f.backend("web.test", "/a").await,
        (200, echo.addr.to_string()),
        "the rest keeps serving"
    );
    assert_eq!(f.get("broken.test", "/").await.0, 404);
    assert!(
        sup.logs().contains("supervisor listening"),
        "{}",
        sup.logs()
    );
}

#[tokio::test]
async fn a_restarted_controller_adopts_the_supervisors_nginx_without_a_reload() {
    let (echo, _m, sup, mut f) = split(&[]).await;
    let backend = echo.addr.to_string();
    let master = f.master_pid().unwrap();
    let workers = f.worker_pids();
    f.kill_controller();
    // NGINX serves on while no controller runs.
    assert_eq!(f.backend("web.test", "/a").await, (200, backend.clone()));
    f.restart_controller();
    f.wait_ready(Duration::from_secs(20)).await;
    assert!(
        f.logs()
            .contains("adopted the NGINX master the supervisor runs"),
        "log:\n{}",
        f.logs()
    );
    assert_eq!(f.master_pid(), Some(master));
    assert_eq!(f.worker_pids(), workers, "no reload: the same workers");
    assert_eq!(f.reloads().await, 0.0);
    assert_eq!(f.backend("web.test", "/a").await, (200, backend));
    assert_eq!(
        sup.logs().matches("NGINX started").count(),
        1,
        "started once:\n{}",
        sup.logs()
    );
}

#[tokio::test]
async fn the_supervisor_outlives_the_controller_s_shutdown_and_then_leaves() {
    let (echo, _m, mut sup, mut f) = split(&["--shutdown-grace-period", "2"]).await;
    let master = f.master_pid().unwrap();
    // SIGTERM reaches both containers of a pod at once: NGINX keeps serving through
    // the controller's grace period...
    sup.terminate();
    f.terminate();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        f.backend("web.test", "/a").await,
        (200, echo.addr.to_string()),
        "served during the grace period"
    );
    assert!(!sup.exited(), "the supervisor waits for the controller");
    // ... then the controller stops it, and the supervisor leaves.
    let status = f.child.wait().unwrap();
    assert!(status.success(), "the controller exits cleanly: {status}");
    assert!(!alive(master), "NGINX stopped by the controller");
    let left = sup.exits_within(Duration::from_secs(5)).await;
    assert!(
        left,
        "the supervisor exits once NGINX is stopped:\n{}",
        sup.logs()
    );
    assert!(!Path::new(sup.socket()).exists(), "its socket is gone");
}

#[tokio::test]
async fn a_supervisor_without_its_controller_stops_nginx_by_itself() {
    let (_echo, _m, mut sup, mut f) = split(&[]).await;
    let master = f.master_pid().unwrap();
    f.kill_controller();
    sup.terminate();
    // Nobody asks for anything any more: after ten seconds of silence the
    // supervisor stops NGINX itself and leaves.
    let left = sup.exits_within(Duration::from_secs(20)).await;
    assert!(left, "the supervisor left:\n{}", sup.logs());
    assert!(!alive(master), "NGINX stopped");
    assert!(
        sup.logs().contains("no word from the controller"),
        "{}",
        sup.logs()
    );
}
