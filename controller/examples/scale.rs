//! Scale benchmark tool (`make bench-scale`, driven by `test/scale/run.sh`).
//!
//! - `scale load`: creates N Services, N EndpointSlices (10 ready endpoints each) and
//!   N Ingresses (one host each) in the harness API server with server-side apply,
//!   many requests in flight. Idempotent: a re-run re-applies the same objects.
//! - `scale echo`: echo backends on every (address, port) the slices use, inside a
//!   network namespace (the API server refuses loopback endpoint addresses).
//! - `scale latency`: moves the endpoints of one Service at a time to other backend
//!   addresses and polls through NGINX until one of the new backends answers;
//!   prints p50/p90/p99/max.
//!
//! The objects look like what a real cluster holds: the Services and Ingresses carry
//! the labels and the `kubectl.kubernetes.io/last-applied-configuration` annotation
//! that `kubectl apply` leaves, and the EndpointSlices what the EndpointSlice
//! controller writes (owner reference, managed-by label, Pod targetRefs, node
//! names, zones, ready/serving/terminating conditions).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MANAGER: &str = "ferrule-scale";

#[derive(Parser)]
#[command(name = "scale", about = "Ferrule scale benchmark tool")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// The shape of the generated objects (the same for every subcommand).
#[derive(clap::Args, Clone)]
struct Shape {
    /// Namespace holding every generated object.
    #[arg(long, default_value = "scale")]
    namespace: String,
    /// Number of Services (= EndpointSlices = Ingresses).
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Ready endpoints per EndpointSlice.
    #[arg(long, default_value_t = 10)]
    endpoints: usize,
    /// Backend addresses: the first one and how many (consecutive).
    #[arg(long, default_value = "10.214.0.2")]
    first_address: Ipv4Addr,
    /// How many backend addresses (at least 2 × --endpoints, so that an update can
    /// move a Service to addresses it did not use).
    #[arg(long, default_value_t = 20)]
    addresses: usize,
    /// Backend ports: the first one; slice i uses first_port + i % ports.
    #[arg(long, default_value_t = 18080)]
    first_port: u16,
    /// How many backend ports.
    #[arg(long, default_value_t = 10)]
    ports: u16,
}

impl Shape {
    fn svc(&self, i: usize) -> String {
        format!("svc-{i:05}")
    }
    fn host(&self, i: usize) -> String {
        format!("svc-{i:05}.scale.test")
    }
    fn port(&self, i: usize) -> u16 {
        self.first_port + (i % self.ports as usize) as u16
    }
    fn address(&self, k: usize) -> String {
        Ipv4Addr::from(u32::from(self.first_address) + k as u32).to_string()
    }
    fn pool(&self) -> Vec<String> {
        (0..self.addresses).map(|k| self.address(k)).collect()
    }
    /// The addresses slice i starts with: a window of `endpoints` consecutive pool
    /// addresses.
    fn initial_addresses(&self, i: usize) -> Vec<String> {
        (0..self.endpoints)
            .map(|j| self.address((i + j) % self.addresses))
            .collect()
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Create (or re-apply) the objects.
    Load {
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Requests in flight.
        #[arg(long, default_value_t = 48)]
        concurrency: usize,
        /// Server-side apply every object (default: create, and apply only what
        /// exists already).
        #[arg(long)]
        apply_only: bool,
        #[command(flatten)]
        shape: Shape,
    },
    /// Serve echo backends on every backend (address, port), inside `--netns`.
    Echo {
        /// Network namespace to enter first (`ip netns` name).
        #[arg(long)]
        netns: Option<String>,
        #[command(flatten)]
        shape: Shape,
    },
    /// Measure EndpointSlice update → traffic through NGINX.
    Latency {
        #[arg(long)]
        kubeconfig: PathBuf,
        /// NGINX HTTP port on 127.0.0.1.
        #[arg(long)]
        http_port: u16,
        /// Number of updates (each on a different Service).
        #[arg(long, default_value_t = 50)]
        updates: usize,
        /// Pause between two updates, in milliseconds.
        #[arg(long, default_value_t = 300)]
        pause_ms: u64,
        /// Give up on one update after this many seconds.
        #[arg(long, default_value_t = 20)]
        timeout_s: u64,
        #[command(flatten)]
        shape: Shape,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Echo { netns, shape } => {
            if let Some(ns) = netns {
                // Before any other thread exists: the runtime's threads and every
                // socket are created inside the namespace.
                let f = std::fs::File::open(format!("/var/run/netns/{ns}"))
                    .with_context(|| format!("network namespace {ns}"))?;
                nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
                    .context("setns (needs root)")?;
            }
            runtime()?.block_on(echo(shape))
        }
        Cmd::Load {
            kubeconfig,
            concurrency,
            apply_only,
            shape,
        } => runtime()?.block_on(load(kubeconfig, concurrency, apply_only, shape)),
        Cmd::Latency {
            kubeconfig,
            http_port,
            updates,
            pause_ms,
            timeout_s,
            shape,
        } => runtime()?.block_on(latency(
            kubeconfig,
            http_port,
            updates,
            Duration::from_millis(pause_ms),
            Duration::from_secs(timeout_s),
            shape,
        )),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

async fn client(kubeconfig: &std::path::Path) -> Result<Client> {
    ferrule::source::kube::client(Some(kubeconfig)).await
}

/// Server-side apply, retried on transient failures (throttling, timeouts, 5xx).
async fn apply<K>(api: &Api<K>, name: &str, obj: &Value) -> Result<K>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let pp = PatchParams::apply(MANAGER).force();
    let mut delay = Duration::from_millis(100);
    for attempt in 1.. {
        match api.patch(name, &pp, &Patch::Apply(obj)).await {
            Ok(o) => return Ok(o),
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 && s.code != 409 => {
                bail!("applying {name}: {s:?}")
            }
            Err(e) if attempt >= 10 => bail!("applying {name}: {e}"),
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    unreachable!()
}

/// Create (cheaper for the API server than a server-side apply that creates), else,
/// when the object exists (a re-run), server-side apply: idempotent either way.
async fn create_or_apply<K>(api: &Api<K>, name: &str, obj: &Value, apply_only: bool) -> Result<K>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    if !apply_only {
        let typed: K = serde_json::from_value(obj.clone())?;
        let pp = kube::api::PostParams {
            field_manager: Some(MANAGER.to_owned()),
            ..Default::default()
        };
        let mut delay = Duration::from_millis(100);
        for attempt in 1.. {
            match api.create(&pp, &typed).await {
                Ok(o) => return Ok(o),
                Err(kube::Error::Api(s)) if s.code == 409 => break,
                Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                    bail!("creating {name}: {s:?}")
                }
                Err(e) if attempt >= 10 => bail!("creating {name}: {e}"),
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
    apply(api, name, obj).await
}

// ---------------------------------------------------------------------------
// load
// ---------------------------------------------------------------------------

fn labels(shape: &Shape, i: usize) -> Value {
    json!({
        "app.kubernetes.io/name": shape.svc(i),
        "app.kubernetes.io/instance": format!("{}-prod", shape.svc(i)),
        "app.kubernetes.io/part-of": "scale-benchmark",
        "app.kubernetes.io/managed-by": "kubectl",
    })
}

/// Adds what `kubectl apply` leaves on an object: the last applied configuration.
fn with_last_applied(mut obj: Value) -> Value {
    let text = serde_json::to_string(&obj).expect("JSON");
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        Value::String(text + "\n");
    obj
}

fn service_json(shape: &Shape, i: usize) -> Value {
    with_last_applied(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": shape.svc(i),
            "namespace": shape.namespace,
            "labels": labels(shape, i),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": { "app.kubernetes.io/name": shape.svc(i) },
            "ports": [{ "name": "http", "port": 80, "protocol": "TCP", "targetPort": "http" }],
        },
    }))
}

fn slice_json(shape: &Shape, i: usize, uid: &str, addresses: &[String]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .enumerate()
        .map(|(j, a)| {
            let pod = format!("{}-7d9f8b6c5-{j:05}", shape.svc(i));
            json!({
                "addresses": [a],
                "conditions": { "ready": true, "serving": true, "terminating": false },
                "nodeName": format!("node-{:03}", (i + j) % 100),
                "zone": format!("zone-{}", ["a", "b", "c"][(i + j) % 3]),
                "targetRef": {
                    "kind": "Pod",
                    "namespace": shape.namespace,
                    "name": pod,
                    "uid": pseudo_uid(&format!("{}/{pod}", shape.namespace)),
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{}-1", shape.svc(i)),
            "namespace": shape.namespace,
            "labels": {
                "kubernetes.io/service-name": shape.svc(i),
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "app.kubernetes.io/name": shape.svc(i),
            },
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Service", "name": shape.svc(i), "uid": uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": shape.port(i), "protocol": "TCP" }],
        "endpoints": endpoints,
    })
}

fn ingress_json(shape: &Shape, i: usize) -> Value {
    with_last_applied(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": format!("ing-{i:05}"),
            "namespace": shape.namespace,
            "labels": labels(shape, i),
            "annotations": {
                "nginx.ingress.kubernetes.io/proxy-body-size": "8m",
                "nginx.ingress.kubernetes.io/proxy-read-timeout": "120",
            },
        },
        "spec": {
            "ingressClassName": "ferrule",
            "rules": [{
                "host": shape.host(i),
                "http": { "paths": [{
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": { "service": { "name": shape.svc(i), "port": { "name": "http" } } },
                }]},
            }],
        },
    }))
}

fn pseudo_uid(seed: &str) -> String {
    let h = blake3::hash(seed.as_bytes()).to_hex();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

async fn load(
    kubeconfig: PathBuf,
    concurrency: usize,
    apply_only: bool,
    shape: Shape,
) -> Result<()> {
    let client = client(&kubeconfig).await?;
    let started = Instant::now();
    apply(
        &Api::<Namespace>::all(client.clone()),
        &shape.namespace,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": shape.namespace}}),
    )
    .await?;
    apply(
        &Api::<IngressClass>::all(client.clone()),
        "ferrule",
        &json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "ferrule"},
            "spec": {"controller": "ferrule.dev/ingress-controller"},
        }),
    )
    .await?;
    let services = Api::<Service>::namespaced(client.clone(), &shape.namespace);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), &shape.namespace);
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &shape.namespace);
    let done = Arc::new(AtomicUsize::new(0));
    let shape = &shape;
    let results = futures::stream::iter(0..shape.count)
        .map(|i| {
            let (services, slices, ingresses, done) = (&services, &slices, &ingresses, &done);
            async move {
                let svc =
                    create_or_apply(services, &shape.svc(i), &service_json(shape, i), apply_only)
                        .await?;
                let uid = svc.metadata.uid.unwrap_or_default();
                let addrs = shape.initial_addresses(i);
                let name = format!("{}-1", shape.svc(i));
                let slice = slice_json(shape, i, &uid, &addrs);
                create_or_apply(slices, &name, &slice, apply_only).await?;
                let ing = ingress_json(shape, i);
                create_or_apply(ingresses, &format!("ing-{i:05}"), &ing, apply_only).await?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 1000 == 0 {
                    eprintln!(
                        "  {n}/{} Service+EndpointSlice+Ingress applied ({:.1} s)",
                        shape.count,
                        started.elapsed().as_secs_f64()
                    );
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(|r| r.err()).collect();
    if let Some(e) = failed.first() {
        bail!("{} objects failed; first: {e:#}", failed.len());
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "RESULT load_seconds={secs:.1} objects={} endpoints={} concurrency={concurrency}",
        shape.count * 3,
        shape.count * shape.endpoints
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// echo
// ---------------------------------------------------------------------------

async fn echo(shape: Shape) -> Result<()> {
    let mut n = 0;
    for a in shape.pool() {
        for p in 0..shape.ports {
            let port = shape.first_port + p;
            let l = tokio::net::TcpListener::bind((a.as_str(), port))
                .await
                .with_context(|| format!("binding {a}:{port}"))?;
            let me: Arc<str> = format!("{a}:{port}").into();
            tokio::spawn(async move {
                loop {
                    let Ok((conn, _)) = l.accept().await else {
                        continue;
                    };
                    tokio::spawn(serve_echo(conn, me.clone()));
                }
            });
            n += 1;
        }
    }
    println!("echo backends listening: {n}");
    std::io::stdout().flush()?;
    std::future::pending::<()>().await;
    Ok(())
}

/// Minimal HTTP/1.1 keep-alive server: every request (no body expected) gets 200
/// with the backend's `address:port` in a header and in the body.
async fn serve_echo(mut conn: tokio::net::TcpStream, me: Arc<str>) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        while find(&buf, b"\r\n\r\n").is_none() {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 * 1024 {
                return;
            }
        }
        let end = find(&buf, b"\r\n\r\n").expect("found") + 4;
        let close = String::from_utf8_lossy(&buf[..end])
            .to_ascii_lowercase()
            .contains("connection: close");
        buf.drain(..end);
        let body = format!("{me}\n");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Echo-Backend: {me}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
        );
        if conn.write_all(resp.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

fn find(h: &[u8], needle: &[u8]) -> Option<usize> {
    h.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------
// latency
// ---------------------------------------------------------------------------

/// One GET through NGINX: (status, the answering backend's address or "").
async fn get(port: u16, host: &str) -> Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.set_nodelay(true)?;
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let backend = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-echo-backend")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    Ok((status, backend))
}

fn ip_of(backend: &str) -> &str {
    backend.rsplit_once(':').map_or(backend, |(ip, _)| ip)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

async fn latency(
    kubeconfig: PathBuf,
    http_port: u16,
    updates: usize,
    pause: Duration,
    timeout: Duration,
    shape: Shape,
) -> Result<()> {
    let client = client(&kubeconfig).await?;
    let services = Api::<Service>::namespaced(client.clone(), &shape.namespace);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), &shape.namespace);
    let pool: BTreeSet<String> = shape.pool().into_iter().collect();
    let mut samples = Vec::new();
    let mut api_ms = Vec::new();
    let mut misses = 0;
    for u in 0..updates {
        // Spread over the whole range, away from the first objects.
        let i = (u * shape.count / updates + shape.count / (2 * updates)) % shape.count;
        let host = shape.host(i);
        let name = format!("{}-1", shape.svc(i));
        let current = slices.get(&name).await?;
        let old: BTreeSet<String> = current
            .endpoints
            .iter()
            .flatten()
            .flat_map(|e| e.addresses.clone())
            .collect();
        // Every address of the pool the Service does not use now.
        let new: Vec<String> = pool
            .difference(&old)
            .take(shape.endpoints)
            .cloned()
            .collect();
        // Before: traffic reaches one of the old backends.
        let (status, before) = get(http_port, &host).await?;
        if status != 200 || !old.contains(ip_of(&before)) {
            bail!(
                "{host} answered {status} from {before:?} before the update; expected one of {old:?}"
            );
        }
        let uid = services
            .get(&shape.svc(i))
            .await?
            .metadata
            .uid
            .unwrap_or_default();
        let body = slice_json(&shape, i, &uid, &new);
        let t0 = Instant::now();
        apply(&slices, &name, &body).await?;
        let t_api = t0.elapsed();
        let deadline = t0 + timeout;
        let mut seen = None;
        while Instant::now() < deadline {
            if let Ok((200, b)) = get(http_port, &host).await
                && new.iter().any(|n| n == ip_of(&b))
            {
                seen = Some(t0.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        api_ms.push(t_api.as_secs_f64() * 1000.0);
        match seen {
            Some(d) => {
                let ms = d.as_secs_f64() * 1000.0;
                eprintln!(
                    "  update {:>2}/{updates}: {host}: new backend answers after {ms:.0} ms (apply took {:.0} ms)",
                    u + 1,
                    t_api.as_secs_f64() * 1000.0
                );
                samples.push(ms);
            }
            None => {
                misses += 1;
                eprintln!(
                    "  update {:>2}/{updates}: {host}: new backend NOT answering after {timeout:?}",
                    u + 1
                );
                samples.push(timeout.as_secs_f64() * 1000.0);
            }
        }
        tokio::time::sleep(pause).await;
    }
    samples.sort_by(f64::total_cmp);
    api_ms.sort_by(f64::total_cmp);
    println!(
        "RESULT latency_n={} latency_p50_ms={:.0} latency_p90_ms={:.0} latency_p99_ms={:.0} latency_max_ms={:.0} latency_misses={misses} apply_p50_ms={:.0}",
        samples.len(),
        percentile(&samples, 50.0),
        percentile(&samples, 90.0),
        percentile(&samples, 99.0),
        samples.last().copied().unwrap_or(f64::NAN),
        percentile(&api_ms, 50.0),
    );
    Ok(())
}
