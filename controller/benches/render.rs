//! Render benchmark (issue 3, section 6): model build, render, write and `nginx -t`
//! for synthetic clusters of 1k and 10k Ingresses (3 Prefix paths each, one host per
//! Ingress, one Service with a 3-endpoint EndpointSlice per Ingress).
//!
//! Goals: ≤ 2 KB of configuration per Ingress on average; the controller's own share
//! (build + render + write) ≤ 0.1× the `nginx -t` time on the same configuration.
//!
//! `cargo bench -p ferrule --bench render` (short measurement by default; criterion
//! flags such as `--measurement-time` override it). `FERRULE_BENCH_SIZES=10000` runs
//! only the listed sizes (comma separated). Needs `nginx` with the Lua module
//! (`make deps`); without it the `nginx -t` part is skipped.
//! Results: `controller/BENCHMARKS.md`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Criterion;
use ferrule::nginx::render::{RenderOptions, Renderer};
use ferrule::nginx::{Dataplane, files, process::Nginx};
use ferrule_model::{Model, Settings, Snapshot, objects};
use serde_json::json;

const SIZES: &[usize] = &[1_000, 10_000];

/// `n` Ingresses `ing-i` (host `ing-i.bench.example.com`, paths `/`, `/api`,
/// `/static/v1`), each with its own Service and EndpointSlice.
fn snapshot(n: usize) -> Snapshot {
    let mut snap = Snapshot {
        settings: Settings {
            watch_without_class: true,
            ..Settings::default()
        },
        ..Snapshot::default()
    };
    for i in 0..n {
        let ns = format!("team-{}", i % 50);
        let name = format!("ing-{i}");
        let svc = format!("svc-{i}");
        let paths: Vec<_> = ["/", "/api", "/static/v1"]
            .iter()
            .map(|p| {
                json!({ "path": p, "pathType": "Prefix",
                        "backend": { "service": { "name": svc, "port": { "number": 80 } } } })
            })
            .collect();
        let docs = [
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": { "name": name, "namespace": ns,
                              "creationTimestamp": "2026-01-01T00:00:00Z" },
                "spec": { "rules": [{ "host": format!("{name}.bench.example.com"),
                                      "http": { "paths": paths } }] },
            }),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": svc, "namespace": ns },
                "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
            }),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": { "name": format!("{svc}-1"), "namespace": ns,
                              "labels": { "kubernetes.io/service-name": svc } },
                "addressType": "IPv4",
                "ports": [{ "name": "http", "port": 8080 }],
                "endpoints": (0..3).map(|e| json!({
                    "addresses": [format!("10.{}.{}.{e}", i / 250 % 250, i % 250)],
                    "conditions": { "ready": true },
                })).collect::<Vec<_>>(),
            }),
        ];
        for d in docs {
            objects::add(&mut snap, d, None).expect("valid object");
        }
    }
    snap
}

/// `snap` with the first path of Ingress `name` changed.
fn with_changed_path(snap: &Snapshot, name: &str) -> Snapshot {
    let mut out = snap.clone();
    for ing in &mut out.ingresses {
        if ing.metadata.name.as_deref() == Some(name) {
            let mut changed = (**ing).clone();
            let rules = changed
                .spec
                .as_mut()
                .and_then(|s| s.rules.as_mut())
                .unwrap();
            let paths = &mut rules[0].http.as_mut().unwrap().paths;
            paths[0].path = Some("/changed".to_owned());
            *ing = std::sync::Arc::new(changed);
        }
    }
    out
}

fn nginx_available() -> bool {
    std::process::Command::new("nginx")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new("/usr/lib/nginx/modules/ngx_http_lua_module.so").exists()
}

/// A prepared NGINX prefix (Lua files, token, default certificate) and its dataplane.
fn dataplane(prefix: &Path) -> Dataplane {
    let opts = RenderOptions {
        prefix: prefix.to_owned(),
        listen_address: "127.0.0.1".to_owned(),
        http_port: 18080,
        https_port: 18443,
        worker_processes: "1".to_owned(),
        user: None,
        modules: ["ndk_http_module.so", "ngx_http_lua_module.so"]
            .iter()
            .map(|m| format!("/usr/lib/nginx/modules/{m}"))
            .collect(),
        configmap: None,
        balancer: Default::default(),
        certificate_store_mib: 256,
        fast_path: false,
        location_directive: false,
        stream_module: false,
        input_header: false,
        worker_dir: None,
        log_to_stdio: false,
        resolvers: Vec::new(),
        metrics: None,
        ssl_passthrough: false,
        allow_local_endpoints: false,
    };
    let pem = ferrule::tls::self_signed_default().expect("default certificate");
    Dataplane::new(Renderer::new(opts), PathBuf::from("nginx"), pem).expect("prefix")
}

/// Build + render (+ file specs) + write into an empty prefix.
fn controller_pass(snap: &Snapshot, dp: &Dataplane, out: &Path) -> Model {
    let model = ferrule_model::build(snap);
    let (_, specs) = dp.files(&model).expect("render");
    files::write_all(out, &specs).expect("write");
    model
}

/// Wall time and CPU time (this thread's on-CPU time plus that of reaped children,
/// i.e. `nginx -t`): the machine these run on is shared, and CPU time leaves out
/// the waiting for a core.
#[derive(Clone, Copy)]
struct Took {
    wall: Duration,
    cpu: Duration,
}

impl std::fmt::Display for Took {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1?} (cpu {:.1?})", self.wall, self.cpu)
    }
}

/// On-CPU time of this thread (`/proc/thread-self/schedstat`, ns) plus user + system
/// time of waited-for children (`/proc/self/stat` cutime + cstime, clock ticks).
fn cpu_now() -> Duration {
    let own = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the comm field: state is field 3, so cutime (16) and cstime (17) are at
    // indices 13 and 14. Clock ticks are 1/100 s on Linux.
    let ticks: u64 = [13, 14]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(own) + Duration::from_millis(ticks * 10)
}

/// Medians of `runs` runs of `f` (what `f` returns is dropped outside the timing).
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Took {
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..runs {
        let (t, c) = (Instant::now(), cpu_now());
        let v = std::hint::black_box(f());
        walls.push(t.elapsed());
        cpus.push(cpu_now().saturating_sub(c));
        drop(v);
    }
    walls.sort();
    cpus.sort();
    Took {
        wall: walls[runs / 2],
        cpu: cpus[runs / 2],
    }
}

/// `SIZES`, or the sizes listed in `FERRULE_BENCH_SIZES`: criterion's filter only
/// skips its own groups, while the timed summary is what takes minutes.
fn sizes() -> Vec<usize> {
    match std::env::var("FERRULE_BENCH_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("FERRULE_BENCH_SIZES: numbers"))
            .collect(),
        Err(_) => SIZES.to_vec(),
    }
}

fn bench(c: &mut Criterion, rt: &tokio::runtime::Runtime, have_nginx: bool) -> Vec<String> {
    let mut summary = Vec::new();
    for n in sizes() {
        let snap = snapshot(n);
        let changed = with_changed_path(&snap, "ing-0");
        let dir = tempfile::tempdir().unwrap();
        let dp = dataplane(dir.path());
        let model = ferrule_model::build(&snap);
        assert_eq!(model.servers.len(), n, "one server per Ingress");
        let (rendered, specs) = dp.files(&model).unwrap();
        let config_bytes: usize = rendered.values().map(|f| f.text.len()).sum();
        let server_bytes: usize = rendered
            .iter()
            .filter(|(p, _)| p.starts_with("conf/servers/host_"))
            .map(|(_, f)| f.text.len())
            .sum();
        files::write_all(dir.path(), &specs).unwrap();

        // Criterion for the in-memory phases; writing and `nginx -t` (seconds per run)
        // are timed by the summary below so that the whole bench takes minutes.
        let mut g = c.benchmark_group(format!("render_{n}"));
        g.bench_function("build", |b| b.iter(|| ferrule_model::build(&snap)));
        g.bench_function("render", |b| b.iter(|| dp.files(&model).unwrap()));
        g.finish();
        if have_nginx {
            let nginx = Nginx::new("nginx", dir.path());
            rt.block_on(nginx.test())
                .expect("nginx -t accepts the config");
        }

        // The summary: medians of a few runs, each phase on its own and the whole
        // controller pass (build + render + write into an empty prefix).
        let runs = if n >= 10_000 { 3 } else { 5 };
        let build = time(runs, || ferrule_model::build(&snap));
        let render = time(runs, || dp.files(&model).unwrap());
        let nginx_t = have_nginx.then(|| {
            let nginx = Nginx::new("nginx", dir.path());
            time(runs, || rt.block_on(nginx.test()).unwrap())
        });
        let mut line = format!(
            "{n} Ingresses: config {:.2} MB = {:.0} B/Ingress (server files {:.0} B/Ingress)\n    \
             build {build}, render {render}",
            config_bytes as f64 / 1e6,
            config_bytes as f64 / n as f64,
            server_bytes as f64 / n as f64,
        );
        if let Some(t) = nginx_t {
            line.push_str(&format!("\n    nginx -t {t}"));
        }
        // Writing depends on the file system: the temporary directory (the prefix is
        // usually on disk) and tmpfs (an emptyDir with medium Memory).
        let shm = Path::new("/dev/shm");
        let bases: Vec<(&str, PathBuf)> = [("disk", std::env::temp_dir()), ("tmpfs", shm.into())]
            .into_iter()
            .filter(|(_, p)| p.is_dir())
            .collect();
        for (label, base) in &bases {
            let write = time(runs, || {
                let out = tempfile::tempdir_in(base).unwrap();
                files::write_all(out.path(), &specs).unwrap();
                out
            });
            // The same files without any flush (files::write_all flushes the file
            // system once at the end), to show what that durability costs.
            let write_nosync = time(runs, || {
                let out = tempfile::tempdir_in(base).unwrap();
                for (rel, spec) in &specs {
                    let path = out.path().join(rel);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    let tmp = path.with_extension("tmp");
                    std::fs::write(&tmp, &spec.bytes).unwrap();
                    std::fs::rename(&tmp, &path).unwrap();
                }
                out
            });
            let pass = time(runs, || {
                let out = tempfile::tempdir_in(base).unwrap();
                controller_pass(&snap, &dp, out.path());
                out
            });
            // The usual reload: one Ingress changed, every file rendered, only its file
            // rewritten (write_all compares with what is on disk).
            let out = tempfile::tempdir_in(base).unwrap();
            controller_pass(&snap, &dp, out.path());
            let mut flip = false;
            let one = time(runs, || {
                flip = !flip;
                controller_pass(if flip { &changed } else { &snap }, &dp, out.path())
            });
            line.push_str(&format!(
                "\n    {label} ({}): write {write}, without fsync {write_nosync}\n      \
                 controller pass (build + render + write), empty prefix {pass}",
                base.display()
            ));
            let ratio = |p: Took, t: Took| {
                format!(
                    " = {:.3} of nginx -t (cpu {:.3})",
                    p.wall.as_secs_f64() / t.wall.as_secs_f64(),
                    p.cpu.as_secs_f64() / t.cpu.as_secs_f64(),
                )
            };
            if let Some(t) = nginx_t {
                line.push_str(&ratio(pass, t));
            }
            line.push_str(&format!("\n      one Ingress changed {one}"));
            if let Some(t) = nginx_t {
                line.push_str(&ratio(one, t));
            }
        }
        summary.push(line);
    }
    summary
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let have_nginx = nginx_available();
    if !have_nginx {
        eprintln!("nginx with the Lua module not found: skipping nginx -t (run `make deps`)");
    }
    let summary = bench(&mut c, &rt, have_nginx);
    c.final_summary();
    println!("\nsummary (medians):");
    for line in summary {
        println!("  {line}");
    }
}
