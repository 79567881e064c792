//! CPU time of build, hash and diff for the synthetic clusters, and of the endpoint
//! fast path of the build. Robust to a busy machine: besides the best wall-clock run
//! it reports the process's on-CPU time (`/proc/self/schedstat`), which does not
//! count time spent waiting for a core.
//! Run with `cargo run --release -p ferrule-model --example model_cpu [N] [RUNS]`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ferrule_model::{build, build_endpoint_change, content_hash, diff};

#[allow(dead_code)]
#[path = "../benches/synthetic.rs"]
mod synthetic;

/// Nanoseconds this process has spent on a CPU (Linux), if available.
fn on_cpu() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn measure<T>(runs: u32, mut f: impl FnMut() -> T) -> (Duration, Option<Duration>) {
    let mut best = Duration::MAX;
    let cpu0 = on_cpu();
    for _ in 0..runs {
        let t = Instant::now();
        black_box(f());
        best = best.min(t.elapsed());
    }
    let cpu = match (cpu0, on_cpu()) {
        (Some(a), Some(b)) => Some(Duration::from_nanos((b - a) / u64::from(runs))),
        _ => None,
    };
    (best, cpu)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(10_000, |a| a.parse().expect("N"));
    let runs: u32 = args.next().map_or(10, |a| a.parse().expect("RUNS"));
    let snap = synthetic::cluster(n);
    let next = synthetic::with_one_endpoint_changed(&snap);
    let old = build(&snap);
    let new = build(&next);
    println!("{n} Ingresses, {runs} runs: best wall-clock / mean on-CPU time");
    let report = |name: &str, (best, cpu): (Duration, Option<Duration>)| {
        let per = cpu.unwrap_or(best).as_nanos() as f64 / n as f64 / 1000.0;
        println!(
            "  {name:<16} {best:>10.2?} / {:>10.2?}  ({per:.2} µs per Ingress)",
            cpu.unwrap_or_default()
        );
    };
    report("build", measure(runs, || build(&next)));
    report("hash", measure(runs, || content_hash(&new)));
    report("diff", measure(runs, || diff(&old, &new)));
    report(
        "build+hash+diff",
        measure(runs, || {
            let m = build(&next);
            let h = m.hash();
            (diff(&old, &m), h)
        }),
    );
    report("clone", measure(runs, || old.clone()));
    report(
        "endpoint path",
        measure(runs, || {
            let (m, changed) = build_endpoint_change(&snap, &old, &next).expect("endpoints only");
            assert_eq!(changed.len(), 1);
            m
        }),
    );
    // The patched model shares the servers: the diff compares backends only.
    let (patched, _) = build_endpoint_change(&snap, &old, &next).expect("endpoints only");
    report("endpoint diff", measure(runs, || diff(&old, &patched)));
}
