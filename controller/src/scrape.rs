//! Per-request metrics: read from NGINX's shared memory at each scrape of
//! `/metrics` and exported with ingress-nginx's names and labels
//! (`nginx_ingress_controller_requests`, `_request_duration_seconds`, ...), so
//! that its dashboards and alerts work unchanged.
//!
//! NGINX counts every request itself, in the log phase: Ferrule's C module
//! (`nginx-module/`, directive `ferrule_metrics` in each location) into a shared
//! zone, or without the module a Lua log phase into `lua_shared_dict
//! ferrule_metrics` (`lua/ferrule/metrics.lua`). Nothing is sent per request; a
//! scrape asks the balancer API for the whole table, `GET /configuration/metrics`
//! on the unix socket, with the API's token.
//!
//! # The dump
//!
//! Text, the same from both sources:
//!
//! ```text
//! ferrule-metrics 1
//! time 0.005,0.01,...          bucket bounds of the durations (seconds)
//! length 10,20,...             of request and response sizes (bytes)
//! size 10,100,...              of bytes_sent (bytes)
//! dropped N                    requests the zone had no room for
//! NS\tINGRESS\tSERVICE\tPATH\tHOST\tCANARY\tMETHOD\tSTATUS\tV0 V1 ... Vk
//! ```
//!
//! One line per (location, canary, method, status), fields separated by tabs
//! (the renderer keeps control characters out of labels; the module refuses them).
//! `STATUS` has three digits, or is a class (`4xx`; `xxx` from 600 on) where the
//! C module folds a status IANA does not register, or counts a location's
//! overflow (with `METHOD` `OTHER`); `METHOD` is one NGINX knows or `OTHER`. The
//! counters, decimal, are each histogram's sum (milliseconds for durations, bytes
//! for sizes) followed by its buckets, non-cumulative, `+Inf` last, in this order:
//! request duration, upstream response, upstream connect, upstream header
//! (durations: `time` buckets), request size, response size (`length` buckets),
//! then bytes sent (`size` buckets, no sum: the response size's). A histogram's
//! count is the sum of its buckets; the request count is the request duration's.
//! The three upstream histograms count only requests that reached an upstream.
//!
//! Counters only grow while the zone lives: a reload keeps it (same name and
//! size), so `rate()` sees no reset at a reload or an endpoint change.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::nginx::api;
use crate::nginx::render::MetricsSource;

/// The prefix of every exported request metric.
pub const PREFIX: &str = "nginx_ingress_controller_";

/// How the request metrics are exported (the flags).
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// A `host` label (`--metrics-per-host`).
    pub per_host: bool,
    /// `status` as `2xx`, ... (`--report-status-classes`).
    pub status_classes: bool,
    /// Metric names (without [`PREFIX`]) not exported (`--exclude-socket-metrics`).
    pub exclude_metrics: BTreeSet<String>,
    /// Labels left out, their series added up (`--metrics-exclude-labels`).
    pub exclude_labels: BTreeSet<String>,
    /// `controller_class` (the IngressClass controller value).
    pub controller_class: String,
    /// `controller_namespace` (`$POD_NAMESPACE`).
    pub controller_namespace: String,
    /// `controller_pod` (`$POD_NAME`).
    pub controller_pod: String,
}

/// Reads the dump from NGINX and exports it.
#[derive(Debug, Clone)]
pub struct Scraper {
    socket: PathBuf,
    token: String,
    source: MetricsSource,
    opts: ExportOptions,
}

/// How long a scrape waits for NGINX.
const TIMEOUT: Duration = Duration::from_secs(5);

impl Scraper {
    /// A scraper of the API at `socket` for metrics collected by `source`.
    pub fn new(socket: PathBuf, token: String, source: MetricsSource, opts: ExportOptions) -> Self {
        Self {
            socket,
            token,
            source,
            opts,
        }
    }

    /// The exposition of the request metrics (empty when NGINX does not answer;
    /// `ferrule_request_metrics_up` says which).
    pub async fn encode(&self) -> String {
        let mut out = String::new();
        let source = match self.source {
            MetricsSource::Module => "module",
            MetricsSource::Lua => "lua",
            MetricsSource::None => "none",
        };
        let dump = match self.source {
            MetricsSource::None => None,
            _ => match tokio::time::timeout(
                TIMEOUT,
                api::request(
                    &self.socket,
                    "GET",
                    "/configuration/metrics",
                    Some(&self.token),
                    None,
                ),
            )
            .await
            {
                Ok(Ok(r)) if r.status == 200 => match Dump::parse(&r.body) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        tracing::warn!(error = %e, "request metrics: NGINX's dump does not parse");
                        None
                    }
                },
                Ok(Ok(r)) => {
                    tracing::warn!(status = r.status, body = %r.body.trim(), "request metrics: NGINX refused the dump");
                    None
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "request metrics: NGINX does not answer");
                    None
                }
                Err(_) => {
                    tracing::warn!("request metrics: NGINX did not answer in time");
                    None
                }
            },
        };
        let _ = writeln!(
            out,
            "# HELP ferrule_request_metrics_up Whether the last scrape read NGINX's request metrics (source: module, lua, or none: not collected)"
        );
        let _ = writeln!(out, "# TYPE ferrule_request_metrics_up gauge");
        let _ = writeln!(
            out,
            "ferrule_request_metrics_up{{source=\"{source}\"}} {}",
            u8::from(dump.is_some())
        );
        if let Some(d) = dump {
            let _ = writeln!(
                out,
                "# HELP ferrule_request_metrics_dropped_total Requests not counted: the metrics store was full (--metrics-store-size)"
            );
            let _ = writeln!(out, "# TYPE ferrule_request_metrics_dropped_total counter");
            let _ = writeln!(out, "ferrule_request_metrics_dropped_total {}", d.dropped);
            export(&d, &self.opts, &mut out);
        }
        out
    }
}

/// A parsed dump.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    /// Bounds of the duration buckets, as written (seconds).
    pub time: Vec<String>,
    /// Bounds of the size buckets (bytes).
    pub length: Vec<String>,
    /// Bounds of the bytes_sent buckets (bytes).
    pub size: Vec<String>,
    /// Requests not counted.
    pub dropped: u64,
    /// The entries.
    pub entries: Vec<Entry>,
}

/// One line of the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// namespace, ingress, service, path, host, canary, method, status.
    pub labels: [String; 8],
    /// The counters (see the module's doc).
    pub values: Vec<u64>,
}

/// The label names of the eight fields of an entry.
const FIELDS: [&str; 8] = [
    "namespace",
    "ingress",
    "service",
    "path",
    "host",
    "canary",
    "method",
    "status",
];

/// A dump that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct ParseError {
    line: usize,
    what: String,
}

impl Dump {
    /// The counters of one entry.
    pub fn slot_len(&self) -> usize {
        4 * (self.time.len() + 2) + 2 * (self.length.len() + 2) + self.size.len() + 1
    }

    /// Parses the text of `GET /configuration/metrics`.
    pub fn parse(text: &str) -> Result<Dump, ParseError> {
        let err = |line: usize, what: &str| ParseError {
            line: line + 1,
            what: what.to_owned(),
        };
        let mut lines = text.lines().enumerate();
        let mut header = |name: &str| -> Result<String, ParseError> {
            let (i, l) = lines.next().ok_or_else(|| err(0, "too short"))?;
            l.strip_prefix(name)
                .and_then(|r| r.strip_prefix(' '))
                .map(str::to_owned)
                .ok_or_else(|| err(i, &format!("expected {name}")))
        };
        if header("ferrule-metrics")? != "1" {
            return Err(err(0, "unknown version"));
        }
        let bounds = |s: String| -> Vec<String> { s.split(',').map(str::to_owned).collect() };
        let time = bounds(header("time")?);
        let length = bounds(header("length")?);
        let size = bounds(header("size")?);
        let dropped = header("dropped")?
            .parse()
            .map_err(|_| err(4, "dropped is not a number"))?;
        let mut dump = Dump {
            time,
            length,
            size,
            dropped,
            entries: Vec::new(),
        };
        let want = dump.slot_len();
        for (i, l) in lines {
            if l.is_empty() {
                continue;
            }
            let mut fields = l.split('\t');
            let mut labels: [String; 8] = Default::default();
            for label in labels.iter_mut() {
                *label = fields
                    .next()
                    .ok_or_else(|| err(i, "too few fields"))?
                    .to_owned();
            }
            let values: Vec<u64> = fields
                .next()
                .ok_or_else(|| err(i, "no counters"))?
                .split(' ')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|_| err(i, "a counter is not a number"))?;
            if fields.next().is_some() {
                return Err(err(i, "too many fields"));
            }
            if values.len() != want {
                return Err(err(i, &format!("{} counters, not {want}", values.len())));
            }
            dump.entries.push(Entry { labels, values });
        }
        Ok(dump)
    }
}

/// A histogram in an entry's counters.
struct Hist {
    /// Metric name without the prefix.
    name: &'static str,
    help: &'static str,
    /// Offset of its sum (None: the sum at another offset, `sum_at`).
    offset: usize,
    sum_at: Option<usize>,
    /// Which bounds.
    kind: Bounds,
    /// Divides the sum into the unit (ms to seconds).
    scale: f64,
}

#[derive(Clone, Copy)]
enum Bounds {
    Time,
    Length,
    Size,
}

impl Dump {
    fn bounds(&self, b: Bounds) -> &[String] {
        match b {
            Bounds::Time => &self.time,
            Bounds::Length => &self.length,
            Bounds::Size => &self.size,
        }
    }

    fn histograms(&self) -> Vec<Hist> {
        let (nt, nl) = (self.time.len(), self.length.len());
        let time = |i: usize, name, help| Hist {
            name,
            help,
            offset: i * (nt + 2),
            sum_at: None,
            kind: Bounds::Time,
            scale: 1000.0,
        };
        let rs = 4 * (nt + 2);
        vec![
            time(
                0,
                "request_duration_seconds",
                "The request processing time in seconds",
            ),
            time(
                1,
                "response_duration_seconds",
                "The time spent on receiving the response from the upstream server",
            ),
            time(
                2,
                "connect_duration_seconds",
                "The time spent on establishing a connection with the upstream server",
            ),
            time(
                3,
                "header_duration_seconds",
                "The time spent on receiving first header from the upstream server",
            ),
            Hist {
                name: "request_size",
                help: "The request length (including request line, header, and request body)",
                offset: rs,
                sum_at: None,
                kind: Bounds::Length,
                scale: 1.0,
            },
            Hist {
                name: "response_size",
                help: "The response length (including request line, header, and request body)",
                offset: rs + nl + 2,
                sum_at: None,
                kind: Bounds::Length,
                scale: 1.0,
            },
            Hist {
                name: "bytes_sent",
                help: "DEPRECATED The number of bytes sent to a client",
                offset: rs + 2 * (nl + 2),
                sum_at: Some(rs + nl + 2),
                kind: Bounds::Size,
                scale: 1.0,
            },
        ]
    }
}

fn labels_text(labels: &[(&str, String)], extra: Option<(&str, &str)>) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in labels
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(extra)
        .enumerate()
    {
        if i > 0 {
            s.push(',');
        }
        s.push_str(k);
        s.push_str("=\"");
        crate::metrics::text::escape_label_value(v, &mut s);
        s.push('"');
    }
    s.push('}');
    s
}

/// Appends the request metrics of `d` to `out` as `opts` says.
pub fn export(d: &Dump, opts: &ExportOptions, out: &mut String) {
    // Series by their labels (names sorted, as Prometheus' Go client writes them),
    // entries that only differ in a label left out added up.
    let mut series: BTreeMap<Vec<(&str, String)>, Vec<u64>> = BTreeMap::new();
    for e in &d.entries {
        let mut labels: Vec<(&str, String)> = vec![
            ("controller_class", opts.controller_class.clone()),
            ("controller_namespace", opts.controller_namespace.clone()),
            ("controller_pod", opts.controller_pod.clone()),
        ];
        for (name, value) in FIELDS.iter().zip(&e.labels) {
            if opts.exclude_labels.contains(*name) || (*name == "host" && !opts.per_host) {
                continue;
            }
            let value = match *name {
                "status" if opts.status_classes => {
                    format!("{}xx", value.chars().next().unwrap_or('0'))
                }
                // three digits in the dump: "000" for none, as NGINX's $status
                _ => value.clone(),
            };
            labels.push((name, value));
        }
        labels.sort_by_key(|(k, _)| *k);
        let sum = series
            .entry(labels)
            .or_insert_with(|| vec![0; e.values.len()]);
        for (s, v) in sum.iter_mut().zip(&e.values) {
            *s += v;
        }
    }
    let hists = d.histograms();
    let excluded = |name: &str| opts.exclude_metrics.contains(name);
    if !excluded("requests") {
        let name = format!("{PREFIX}requests");
        let _ = writeln!(out, "# HELP {name} The total number of client requests");
        // A counter, by ingress-nginx's name, which has no `_total`: declared as
        // untyped, which Prometheus stores and queries (rate()) alike, since
        // `promtool check metrics` refuses a counter without the suffix.
        let _ = writeln!(out, "# TYPE {name} untyped");
        let h = &hists[0];
        for (labels, v) in &series {
            let count: u64 = v[h.offset + 1..h.offset + 2 + d.time.len()].iter().sum();
            let _ = writeln!(out, "{name}{} {count}", labels_text(labels, None));
        }
    }
    for h in &hists {
        if excluded(h.name) {
            continue;
        }
        let name = format!("{PREFIX}{}", h.name);
        let _ = writeln!(out, "# HELP {name} {}", h.help);
        let _ = writeln!(out, "# TYPE {name} histogram");
        let bounds = d.bounds(h.kind);
        // buckets follow the sum, except for bytes_sent (its sum is elsewhere)
        let first = if h.sum_at.is_some() {
            h.offset
        } else {
            h.offset + 1
        };
        for (labels, v) in &series {
            let buckets = &v[first..first + bounds.len() + 1];
            let count: u64 = buckets.iter().sum();
            if count == 0 {
                // nothing observed (no upstream): no series, as ingress-nginx
                continue;
            }
            let mut cumulative = 0;
            for (b, le) in buckets
                .iter()
                .zip(bounds.iter().map(String::as_str).chain(["+Inf"]))
            {
                cumulative += b;
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {cumulative}",
                    labels_text(labels, Some(("le", le)))
                );
            }
            let sum = v[h.sum_at.unwrap_or(h.offset)] as f64 / h.scale;
            let l = labels_text(labels, None);
            let _ = writeln!(out, "{name}_sum{l} {sum}");
            let _ = writeln!(out, "{name}_count{l} {count}");
        }
    }
}

#[cfg(test)]
mod tests;
