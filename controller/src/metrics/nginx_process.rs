//! `nginx_ingress_controller_nginx_process_*`: NGINX's connections and requests
//! (its `stub_status` page) and its processes (`/proc`), read at each scrape. The
//! names, types and labels are ingress-nginx's.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::identity::Identity;
use super::text::{Kind, header, sample};
use crate::nginx::process::Launcher;
use crate::nginx::procfs::{Totals, Tracker};
use crate::nginx::stub_status::{self, StubStatus};
use crate::nginx::supervisor;

const P: &str = "nginx_ingress_controller_nginx_process";

/// Where NGINX runs, once known, and what its exited processes used.
#[derive(Debug, Default)]
pub struct NginxProcess {
    prefix: OnceLock<PathBuf>,
    /// The supervisor's socket, when NGINX's processes are in another container
    /// (the supervisor reads them there).
    supervisor: OnceLock<PathBuf>,
    tracker: Mutex<Tracker>,
}

impl NginxProcess {
    /// NGINX runs on `prefix` (its pid file and API socket are there), launched by
    /// `launcher`.
    pub fn watch(&self, prefix: PathBuf, launcher: &Launcher) {
        let _ = self.prefix.set(prefix);
        if let Launcher::Supervisor(socket) = launcher {
            let _ = self.supervisor.set(socket.clone());
        }
    }

    /// Reads NGINX now and appends the metrics (none while NGINX does not run).
    pub async fn encode(&self, out: &mut String, id: &Identity) {
        let Some(prefix) = self.prefix.get() else {
            return;
        };
        let socket = prefix.join(crate::nginx::process::API_SOCKET);
        let status = stub_status::fetch(&socket).await;
        if let Err(e) = &status {
            tracing::debug!(error = %e, "no stub_status for the metrics");
        }
        let totals = match self.supervisor.get() {
            None => self.tracker.lock().expect("metrics lock").sample(prefix),
            Some(socket) => match supervisor::call(socket, &supervisor::Request::Processes).await {
                Ok(answer) => answer.processes,
                Err(e) => {
                    tracing::debug!(error = %e, "no NGINX processes from the supervisor");
                    None
                }
            },
        };
        let ids = id.labels();
        if let Ok(s) = status {
            encode_status(out, &ids, &s);
        }
        if let Some(t) = totals {
            encode_totals(out, &ids, &t);
        }
    }
}

fn encode_status(out: &mut String, ids: &[(&str, &str)], s: &StubStatus) {
    let with = |state: &'static str| {
        let mut l = ids.to_vec();
        l.push(("state", state));
        l
    };
    let name = format!("{P}_connections");
    header(
        out,
        &name,
        Kind::Gauge,
        "current number of client connections with state {active, reading, writing, waiting}",
    );
    for (state, v) in [
        ("active", s.active),
        ("reading", s.reading),
        ("writing", s.writing),
        ("waiting", s.waiting),
    ] {
        sample(out, &name, &with(state), v as f64);
    }
    let name = format!("{P}_connections_total");
    header(
        out,
        &name,
        Kind::Counter,
        "total number of connections with state {accepted, handled}",
    );
    for (state, v) in [("accepted", s.accepted), ("handled", s.handled)] {
        sample(out, &name, &with(state), v as f64);
    }
    let name = format!("{P}_requests_total");
    header(out, &name, Kind::Counter, "total number of client requests");
    sample(out, &name, ids, s.requests as f64);
}

fn encode_totals(out: &mut String, ids: &[(&str, &str)], t: &Totals) {
    for (name, kind, help, v) in [
        (
            "num_procs",
            Kind::Gauge,
            "number of processes",
            t.procs as f64,
        ),
        (
            "cpu_seconds_total",
            Kind::Counter,
            "Cpu usage in seconds (user and system, exited processes included)",
            t.cpu_seconds,
        ),
        (
            "resident_memory_bytes",
            Kind::Gauge,
            "number of bytes of memory in use",
            t.resident_bytes as f64,
        ),
        (
            "virtual_memory_bytes",
            Kind::Gauge,
            "number of bytes of memory in use",
            t.virtual_bytes as f64,
        ),
        (
            "read_bytes_total",
            Kind::Counter,
            "number of bytes read",
            t.read_bytes as f64,
        ),
        (
            "write_bytes_total",
            Kind::Counter,
            "number of bytes written",
            t.write_bytes as f64,
        ),
        (
            "oldest_start_time_seconds",
            Kind::Gauge,
            "start time in seconds since 1970/01/01",
            t.oldest_start_seconds,
        ),
    ] {
        let name = format!("{P}_{name}");
        header(out, &name, kind, help);
        sample(out, &name, ids, v);
    }
}
