//! `ferrule nginx-supervisor`: NGINX in a container of its own, driven by the
//! controller in another (`ferrule run --nginx-supervisor SOCKET`).
//!
//! NGINX parses tenants' configuration and terminates every connection from the
//! internet; the controller holds the service-account token, which reads every
//! Secret of the cluster. In one container, a flaw in NGINX or in one of its modules
//! would hand that token over. Split, the pod's two containers share only an
//! emptyDir (the NGINX prefix: configuration, the balancer API's socket and token,
//! and this supervisor's socket) and the network namespace; the token is mounted
//! into the controller's container alone.
//!
//! The supervisor is the controller's [`Nginx`] run in NGINX's container: the same
//! start (own process group, stale sockets cleared), `nginx -t`, reload, graceful
//! quit and adoption of a master left running, each taken as a request on a unix
//! socket. It decides nothing: the controller still renders, tests, reloads,
//! verifies and restarts with backoff; the supervisor only holds the processes, which
//! the controller can neither see nor signal from its own PID namespace.
//!
//! The protocol: one request per connection, one JSON object per line each way
//! ([`Request`], [`Answer`]). Nothing secret crosses it: whatever runs in NGINX's
//! container can take the socket over, and then only lies about NGINX.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::process::{self, Nginx};
use super::procfs::{Totals, Tracker};

/// The most bytes of a request or an answer line (NGINX's complaint is cut to fit).
const MAX_LINE: usize = 256 * 1024;
/// How long a request may take, but for `test`, `start`'s first parse and `quit`.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// `nginx -t` of a large configuration (10k servers) takes far longer than the rest.
const TEST_TIMEOUT: Duration = Duration::from_secs(600);
/// After SIGTERM, NGINX keeps serving while the controller goes through its grace
/// period (it asks for the status several times a second meanwhile) and stops it;
/// after this long without a word from it, the supervisor stops NGINX itself.
const ORPHANED_AFTER: Duration = Duration::from_secs(10);

/// A request from the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Report the master this supervisor runs on `prefix`, or adopt one an earlier
    /// supervisor left running there; a master whose configuration version does not
    /// answer is stopped (answer without `pid`).
    Adopt {
        /// The controller's `--nginx-prefix`.
        prefix: PathBuf,
        /// Where the workers' own files are, when not in the prefix.
        worker_dir: Option<PathBuf>,
    },
    /// `nginx -t -q -p PREFIX -c CONF -e ERROR_LOG`; a failure's `error` is NGINX's
    /// standard error.
    Test {
        /// `-p`.
        prefix: PathBuf,
        /// `-c`.
        conf: PathBuf,
        /// `-e`.
        error_log: PathBuf,
    },
    /// Start a master on `prefix` (`conf/nginx.conf`, `logs/error.log`).
    Start {
        /// The controller's `--nginx-prefix`.
        prefix: PathBuf,
        /// Where the workers' own files are, when not in the prefix.
        worker_dir: Option<PathBuf>,
    },
    /// Whether the master runs (`pid`).
    Status,
    /// SIGHUP to the master.
    Reload,
    /// SIGQUIT to the master; SIGKILL to its group after `timeout_ms`.
    Quit {
        /// How long the workers may finish their requests.
        timeout_ms: u64,
    },
    /// The master's process group as `/proc` shows it (the metrics).
    Processes,
}

impl Request {
    /// How long the controller waits for the answer.
    fn timeout(&self) -> Duration {
        match self {
            Request::Test { .. } => TEST_TIMEOUT,
            Request::Quit { timeout_ms } => Duration::from_millis(*timeout_ms) + CALL_TIMEOUT,
            _ => CALL_TIMEOUT,
        }
    }
}

/// The supervisor's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Why the request failed (NGINX's own words for `test`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The running master's pid, in NGINX's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The configuration version the running master's workers answer with (`adopt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The master's process group (`processes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Totals>,
}

impl Answer {
    fn failed(why: impl Into<String>) -> Self {
        // JSON may write a byte as six (`\u0001`): the cut leaves room for that.
        let mut why: String = why.into();
        if why.len() > MAX_LINE / 8 {
            let mut end = MAX_LINE / 8;
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            why.truncate(end);
        }
        Answer {
            error: Some(why),
            ..Answer::default()
        }
    }
}

/// Sends `request` to the supervisor on `socket`; an answer with an `error` is an
/// `Err` holding that text alone (for `test`, what NGINX printed).
pub async fn call(socket: &Path, request: &Request) -> std::io::Result<Answer> {
    let exchange = async {
        let mut stream = UnixStream::connect(socket).await?;
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        stream.write_all(&line).await?;
        let mut text = String::new();
        BufReader::new(stream)
            .take(MAX_LINE as u64)
            .read_line(&mut text)
            .await?;
        serde_json::from_str::<Answer>(&text).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unreadable answer ({e}): {text:.200}"),
            )
        })
    };
    let context = |e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!("the NGINX supervisor at {}: {e}", socket.display()),
        )
    };
    let answer = tokio::time::timeout(request.timeout(), exchange)
        .await
        .map_err(|_| context(std::io::ErrorKind::TimedOut.into()))?
        .map_err(context)?;
    match answer.error {
        Some(why) => Err(std::io::Error::other(why)),
        None => Ok(answer),
    }
}

/// Waits until the supervisor on `socket` answers (its container may start after
/// the controller's), saying so every few seconds.
pub async fn wait_for(socket: &Path) {
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        match call(socket, &Request::Status).await {
            Ok(_) => {
                tracing::info!(socket = %socket.display(), waited = ?started.elapsed(), "the NGINX supervisor answers");
                return;
            }
            Err(e) if said.elapsed() >= Duration::from_secs(5) => {
                tracing::warn!(error = %e, "waiting for the NGINX supervisor (ferrule nginx-supervisor in NGINX's container)");
                said = Instant::now();
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The NGINX of this container, as the requests drive it.
struct Supervisor {
    binary: PathBuf,
    /// The master and its prefix (one at a time).
    nginx: tokio::sync::Mutex<Option<Nginx>>,
    /// That prefix, for `processes` while a long request holds `nginx`.
    prefix: Mutex<Option<PathBuf>>,
    /// The counters of exited processes, for `processes`.
    tracker: Mutex<Tracker>,
    /// When the last request came.
    heard: Mutex<Instant>,
}

impl Supervisor {
    /// The NGINX of `prefix`: the one held if it is that prefix's, or a new one when
    /// the one held does not run. One running on another prefix is refused.
    async fn nginx_for<'a>(
        &self,
        held: &'a mut Option<Nginx>,
        prefix: PathBuf,
        worker_dir: Option<PathBuf>,
    ) -> Result<&'a mut Nginx, String> {
        if let Some(n) = held.as_mut()
            && n.prefix() != prefix
            && n.is_running().await
        {
            return Err(format!(
                "this supervisor runs NGINX on {}, not on {}: give the controller's \
                 --nginx-prefix the same path in both containers",
                n.prefix().display(),
                prefix.display()
            ));
        }
        if held.as_ref().is_none_or(|n| n.prefix() != prefix) {
            *self.prefix.lock().expect("prefix lock") = Some(prefix.clone());
            *held = Some(Nginx::new(self.binary.clone(), prefix).with_worker_dir(worker_dir));
        }
        Ok(held.as_mut().expect("just set"))
    }

    async fn handle(&self, request: Request) -> Answer {
        *self.heard.lock().expect("heard lock") = Instant::now();
        match request {
            Request::Test {
                prefix,
                conf,
                error_log,
            } => match process::check_here(&self.binary, &prefix, &conf, &error_log).await {
                Ok(()) => Answer::default(),
                Err(output) => Answer::failed(output),
            },
            Request::Processes => {
                let prefix = self.prefix.lock().expect("prefix lock").clone();
                let processes = prefix.and_then(|p| {
                    let mut tracker = self.tracker.lock().expect("tracker lock");
                    tracker.sample(&p)
                });
                Answer {
                    processes,
                    ..Answer::default()
                }
            }
            Request::Status => {
                let mut held = self.nginx.lock().await;
                let pid = match held.as_mut() {
                    Some(n) => n.is_running().await.then(|| n.pid()).flatten(),
                    None => None,
                };
                Answer {
                    pid,
                    ..Answer::default()
                }
            }
            Request::Start { prefix, worker_dir } => {
                let mut held = self.nginx.lock().await;
                let n = match self.nginx_for(&mut held, prefix, worker_dir).await {
                    Ok(n) => n,
                    Err(why) => return Answer::failed(why),
                };
                match n.start().await {
                    Ok(()) => {
                        tracing::info!(pid = ?n.pid(), prefix = %n.prefix().display(), "NGINX started");
                        Answer {
                            pid: n.pid(),
                            ..Answer::default()
                        }
                    }
                    Err(e) => Answer::failed(format!("starting NGINX: {e}")),
                }
            }
            Request::Adopt { prefix, worker_dir } => {
                let mut held = self.nginx.lock().await;
                let n = match self.nginx_for(&mut held, prefix, worker_dir).await {
                    Ok(n) => n,
                    Err(why) => return Answer::failed(why),
                };
                if !n.is_running().await {
                    return match n.adopt().await {
                        Some(a) => Answer {
                            pid: Some(a.pid),
                            version: Some(a.version),
                            ..Answer::default()
                        },
                        None => Answer::default(),
                    };
                }
                match n.config_version().await {
                    Some(version) => Answer {
                        pid: n.pid(),
                        version: Some(version),
                        ..Answer::default()
                    },
                    None => {
                        // It holds the listening ports: the controller's new master
                        // could not bind.
                        tracing::warn!(
                            "the running NGINX does not answer its configuration version; stopping it"
                        );
                        n.quit(Duration::from_secs(1)).await;
                        Answer::default()
                    }
                }
            }
            Request::Reload => {
                let mut held = self.nginx.lock().await;
                let Some(n) = held.as_mut() else {
                    return Answer::failed("nginx is not running");
                };
                if !n.is_running().await {
                    return Answer::failed("nginx is not running");
                }
                match n.reload().await {
                    Ok(()) => Answer::default(),
                    Err(e) => Answer::failed(format!("reloading NGINX: {e}")),
                }
            }
            Request::Quit { timeout_ms } => {
                let mut held = self.nginx.lock().await;
                if let Some(n) = held.as_mut() {
                    n.quit(Duration::from_millis(timeout_ms)).await;
                    tracing::info!("NGINX stopped");
                }
                Answer::default()
            }
        }
    }

    /// Serves one connection: one request, one answer.
    async fn connection(&self, stream: UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        let read = BufReader::new(read)
            .take(MAX_LINE as u64)
            .read_line(&mut line)
            .await;
        let answer = match read.map(|_| serde_json::from_str::<Request>(&line)) {
            Ok(Ok(request)) => self.handle(request).await,
            Ok(Err(e)) => Answer::failed(format!("not a request: {e}")),
            Err(e) => Answer::failed(format!("reading the request: {e}")),
        };
        let mut text = serde_json::to_vec(&answer).unwrap_or_default();
        text.push(b'\n');
        if let Err(e) = write.write_all(&text).await {
            tracing::debug!(error = %e, "the controller left before the answer");
        }
    }
}

/// Serves requests on `socket`, running NGINX from `binary`, until `shutdown`
/// resolves (SIGTERM) and NGINX has stopped: the controller stops it gracefully at
/// the end of its own shutdown; if no request comes for [`ORPHANED_AFTER`], the
/// supervisor does. Reaps the workers of a master that died (it may be PID 1).
pub async fn serve(
    socket: &Path,
    binary: PathBuf,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The workers of a master that dies come to this process (not to whatever runs
    // above it when it is not PID 1), which kills and reaps them.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "not a child subreaper: orphaned NGINX workers go to PID 1");
    }
    let listener = UnixListener::bind(socket)?;
    // The controller's container runs as the same user (or shares the group).
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660))?;
    tracing::info!(socket = %socket.display(), nginx = %binary.display(), "NGINX supervisor listening");
    let supervisor = Arc::new(Supervisor {
        binary,
        nginx: tokio::sync::Mutex::new(None),
        prefix: Mutex::new(None),
        tracker: Mutex::new(Tracker::default()),
        heard: Mutex::new(Instant::now()),
    });
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut terminating = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let supervisor = supervisor.clone();
                    tokio::spawn(async move { supervisor.connection(stream).await });
                }
                Err(e) => tracing::warn!(error = %e, "accepting a connection"),
            },
            () = &mut shutdown, if !terminating => {
                terminating = true;
                tracing::info!("terminating: NGINX serves until the controller stops it");
            }
            _ = tick.tick() => {
                process::reap_orphans();
                if !terminating {
                    continue;
                }
                // A request in progress (a quit, most likely) holds it.
                let Ok(mut held) = supervisor.nginx.try_lock() else {
                    continue;
                };
                let Some(n) = held.as_mut() else { break };
                if !n.is_running().await {
                    break;
                }
                let silent = supervisor.heard.lock().expect("heard lock").elapsed();
                if silent >= ORPHANED_AFTER {
                    tracing::warn!(?silent, "no word from the controller; stopping NGINX gracefully");
                    let drain = super::render::WORKER_SHUTDOWN_TIMEOUT + Duration::from_secs(5);
                    n.quit(drain).await;
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_file(socket);
    tracing::info!("NGINX supervisor done");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_json_line_each() {
        let r = Request::Start {
            prefix: "/var/lib/ferrule/nginx".into(),
            worker_dir: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"op":"start","prefix":"/var/lib/ferrule/nginx","worker_dir":null}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
        assert_eq!(
            serde_json::to_string(&Request::Quit { timeout_ms: 5 }).unwrap(),
            r#"{"op":"quit","timeout_ms":5}"#
        );
        // An unknown field is refused, not ignored: a newer controller's request
        // is not half-understood.
        let extra = r#"{"op":"quit","timeout_ms":5,"kill_everything":true}"#;
        let e = serde_json::from_str::<Request>(extra).unwrap_err();
        assert!(
            e.to_string().contains("unknown field `kill_everything`"),
            "{e}"
        );
    }

    #[test]
    fn a_long_complaint_is_cut_to_fit_a_line() {
        for unit in ["é", "\u{1}", "\""] {
            let a = Answer::failed(unit.repeat(MAX_LINE));
            let text = serde_json::to_vec(&a).unwrap();
            assert!(text.len() < MAX_LINE, "{unit:?}: {} bytes", text.len());
            assert!(a.error.unwrap().starts_with(unit));
        }
    }

    /// The client against the server, with an NGINX binary that does not exist:
    /// every answer comes back, and a failure is the client's `Err` in its words.
    #[tokio::test]
    async fn the_client_and_the_server_speak_the_same_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s/supervisor.sock");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn({
            let socket = socket.clone();
            async move {
                let shutdown = async {
                    let _ = stop_rx.await;
                };
                serve(&socket, "/nonexistent/nginx".into(), shutdown).await
            }
        });
        wait_for(&socket).await;
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660, "{mode:o}");
        assert_eq!(call(&socket, &Request::Status).await.unwrap().pid, None);
        let prefix = dir.path().join("nginx");
        let test = Request::Test {
            conf: prefix.join("conf/nginx.conf"),
            error_log: prefix.join("logs/error.log"),
            prefix: prefix.clone(),
        };
        let e = call(&socket, &test).await.unwrap_err().to_string();
        assert!(e.starts_with("cannot run /nonexistent/nginx"), "{e}");
        let start = Request::Start {
            prefix: prefix.clone(),
            worker_dir: None,
        };
        let e = call(&socket, &start).await.unwrap_err().to_string();
        assert!(e.starts_with("starting NGINX: "), "{e}");
        let e = call(&socket, &Request::Reload).await.unwrap_err();
        assert_eq!(e.to_string(), "nginx is not running");
        let none = call(&socket, &Request::Processes).await.unwrap();
        assert_eq!(none.processes, None);
        // Not a request: refused with the reason.
        let mut raw = UnixStream::connect(&socket).await.unwrap();
        raw.write_all(b"{\"op\":\"format-disk\"}\n").await.unwrap();
        let mut text = String::new();
        raw.read_to_string(&mut text).await.unwrap();
        let answer: Answer = serde_json::from_str(&text).unwrap();
        assert!(
            answer
                .error
                .as_deref()
                .unwrap()
                .starts_with("not a request: "),
            "{answer:?}"
        );
        // Terminating with no NGINX running: it leaves at once.
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the supervisor exits once terminating without NGINX")
            .unwrap()
            .unwrap();
        assert!(!socket.exists(), "its socket is removed");
        let e = call(&socket, &Request::Status)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("the NGINX supervisor at "), "{e}");
    }
}
