//! NGINX's processes as `/proc` shows them: the master and its process group
//! (workers, old workers still draining after a reload, cache processes), which
//! Ferrule starts as a group of its own.
//!
//! CPU time and I/O bytes are counters across process lifetimes: a reload replaces
//! the workers, and what the old ones used stays counted (their last reading), so
//! a rate over a reload sees no reset.

use std::collections::HashMap;
use std::path::Path;

/// One process's reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// When it started, in clock ticks since boot (with the pid, who it is).
    pub start_ticks: u64,
    /// User and system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident memory.
    pub resident_bytes: u64,
    /// Virtual memory.
    pub virtual_bytes: u64,
    /// Bytes read from storage (`/proc/PID/io`; 0 when not readable).
    pub read_bytes: u64,
    /// Bytes written to storage.
    pub write_bytes: u64,
}

/// The group's figures, as ingress-nginx's `nginx_process_*` metrics report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// Live processes.
    pub procs: u64,
    /// CPU seconds, counted across process lifetimes.
    pub cpu_seconds: f64,
    /// Resident memory of the live processes.
    pub resident_bytes: u64,
    /// Virtual memory of the live processes.
    pub virtual_bytes: u64,
    /// Bytes read, counted across process lifetimes.
    pub read_bytes: u64,
    /// Bytes written, counted across process lifetimes.
    pub write_bytes: u64,
    /// Start of the oldest live process, in seconds since the Unix epoch.
    pub oldest_start_seconds: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    cpu_ticks: u64,
    read: u64,
    write: u64,
}

impl Counts {
    fn max(self, o: Counts) -> Counts {
        Counts {
            cpu_ticks: self.cpu_ticks.max(o.cpu_ticks),
            read: self.read.max(o.read),
            write: self.write.max(o.write),
        }
    }
}

/// Keeps the counters of processes that exited.
#[derive(Debug, Default)]
pub struct Tracker {
    live: HashMap<(u32, u64), Counts>,
    gone: Counts,
}

impl Tracker {
    /// Reads the group of the master named by `PREFIX/run/nginx.pid` (`None` when no
    /// master of this prefix runs).
    pub fn sample(&mut self, prefix: &Path) -> Option<Totals> {
        let pid: u32 = std::fs::read_to_string(prefix.join(super::process::PID_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if !super::process::is_master_of(pid as i32, &prefix.join("conf/nginx.conf")) {
            return None;
        }
        let procs = group(pid);
        Some(self.update(&procs, clock_ticks(), boot_time()))
    }

    /// Folds one reading of the group in.
    pub fn update(&mut self, procs: &[Proc], ticks_per_second: f64, boot_time: f64) -> Totals {
        let mut live = HashMap::with_capacity(procs.len());
        for p in procs {
            let now = Counts {
                cpu_ticks: p.cpu_ticks,
                read: p.read_bytes,
                write: p.write_bytes,
            };
            let key = (p.pid, p.start_ticks);
            let seen = self.live.get(&key).copied().unwrap_or_default();
            live.insert(key, now.max(seen));
        }
        for (key, last) in &self.live {
            if !live.contains_key(key) {
                self.gone.cpu_ticks += last.cpu_ticks;
                self.gone.read += last.read;
                self.gone.write += last.write;
            }
        }
        self.live = live;
        let sum = self.live.values().fold(self.gone, |a, c| Counts {
            cpu_ticks: a.cpu_ticks + c.cpu_ticks,
            read: a.read + c.read,
            write: a.write + c.write,
        });
        let oldest = procs.iter().map(|p| p.start_ticks).min();
        Totals {
            procs: procs.len() as u64,
            cpu_seconds: sum.cpu_ticks as f64 / ticks_per_second,
            resident_bytes: procs.iter().map(|p| p.resident_bytes).sum(),
            virtual_bytes: procs.iter().map(|p| p.virtual_bytes).sum(),
            read_bytes: sum.read,
            write_bytes: sum.write,
            oldest_start_seconds: oldest.map_or(0.0, |t| boot_time + t as f64 / ticks_per_second),
        }
    }
}

/// The pids of the processes this process can see (`/proc`'s numeric entries).
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// The live processes of process group `pgrp`.
fn group(pgrp: u32) -> Vec<Proc> {
    let page = page_size();
    let mut out = Vec::new();
    for pid in pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((group, mut p)) = parse_stat(&stat, page) else {
            continue;
        };
        if group != pgrp {
            continue;
        }
        if let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
            (p.read_bytes, p.write_bytes) = parse_io(&io);
        }
        p.pid = pid;
        out.push(p);
    }
    out
}

/// `/proc/PID/stat`: (process group, reading without I/O); `None` for a zombie.
pub fn parse_stat(stat: &str, page_size: u64) -> Option<(u32, Proc)> {
    // The command name is in parentheses and may hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 of proc(5) (the state).
    let field = |n: usize| -> Option<u64> { f.get(n - 3)?.parse().ok() };
    if matches!(f.first(), Some(&"Z") | Some(&"X") | None) {
        return None;
    }
    Some((
        field(5)? as u32,
        Proc {
            pid: 0,
            start_ticks: field(22)?,
            cpu_ticks: field(14)? + field(15)?,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page_size,
            read_bytes: 0,
            write_bytes: 0,
        },
    ))
}

/// `/proc/PID/io`: (read_bytes, write_bytes).
pub fn parse_io(io: &str) -> (u64, u64) {
    let get = |key: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("read_bytes:"), get("write_bytes:"))
}

fn clock_ticks() -> f64 {
    use nix::unistd::{SysconfVar, sysconf};
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

fn page_size() -> u64 {
    use nix::unistd::{SysconfVar, sysconf};
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as u64,
        _ => 4096,
    }
}

/// Boot time in seconds since the Unix epoch (`btime` of `/proc/stat`).
fn boot_time() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_an_odd_command_name() {
        let stat = "4242 (nginx: wor) ker) S 4200 4200 4200 0 -1 4194624 100 0 0 0 \
                    250 50 0 0 20 0 1 0 123456 104857600 2560 18446744073709551615";
        let (pgrp, p) = parse_stat(stat, 4096).unwrap();
        assert_eq!(pgrp, 4200);
        assert_eq!((p.cpu_ticks, p.start_ticks), (300, 123456));
        assert_eq!(
            (p.virtual_bytes, p.resident_bytes),
            (104857600, 2560 * 4096)
        );
        assert!(parse_stat("1 (x) Z 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5 0 0", 4096).is_none());
        let io = "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\n";
        assert_eq!(parse_io(io), (4096, 8192));
    }

    #[test]
    fn counters_keep_what_exited_workers_used() {
        let p = |pid, start, cpu| Proc {
            pid,
            start_ticks: start,
            cpu_ticks: cpu,
            resident_bytes: 10,
            ..Proc::default()
        };
        let mut t = Tracker::default();
        // master 1 and workers 2, 3
        let a = t.update(&[p(1, 10, 100), p(2, 20, 50), p(3, 20, 50)], 100.0, 1000.0);
        assert_eq!((a.procs, a.cpu_seconds, a.resident_bytes), (3, 2.0, 30));
        assert_eq!(a.oldest_start_seconds, 1000.1);
        // a reload: 2 and 3 exit after a little more work; 4 and 5 replace them
        t.update(&[p(1, 10, 110), p(2, 20, 70), p(3, 20, 60)], 100.0, 1000.0);
        let b = t.update(&[p(1, 10, 120), p(4, 90, 5), p(5, 90, 5)], 100.0, 1000.0);
        assert_eq!(b.procs, 3);
        assert_eq!(b.cpu_seconds, (120 + 70 + 60 + 5 + 5) as f64 / 100.0);
        // a pid reused by a new process is another process
        let c = t.update(&[p(1, 10, 120), p(4, 95, 1), p(5, 90, 5)], 100.0, 1000.0);
        assert_eq!(c.cpu_seconds, (120 + 70 + 60 + 5 + 1 + 5) as f64 / 100.0);
        assert!(c.cpu_seconds >= b.cpu_seconds);
    }
}
