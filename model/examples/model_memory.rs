//! Heap used by the model of a synthetic 10k-Ingress cluster (issue 2, section 7:
//! goal ≤ 100 MB), measured with a counting global allocator: bytes allocated minus
//! bytes freed while building, with the snapshot built (and held) beforehand so that
//! only the model is counted. Run with
//! `cargo run --release -p ferrule-model --example model_memory [N]`.

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[allow(dead_code)]
#[path = "../benches/synthetic.rs"]
mod synthetic;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn mib(bytes: isize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |a| a.parse().expect("N must be a number"));

    let region = Region::new(GLOBAL);
    let snap = synthetic::cluster(n);
    let snapshot_bytes =
        region.change().bytes_allocated as isize - region.change().bytes_deallocated as isize;

    let region = Region::new(GLOBAL);
    let start = std::time::Instant::now();
    let model = ferrule_model::build(&snap);
    let elapsed = start.elapsed();
    let s = region.change();
    let model_bytes = s.bytes_allocated as isize - s.bytes_deallocated as isize;
    let peak_note = s.bytes_allocated; // everything allocated while building, freed or not

    let locations: usize = model.servers.iter().map(|s| s.locations.len()).sum();
    let endpoints: usize = model.backends.values().map(|b| b.endpoints.len()).sum();
    println!("ingresses:        {n}");
    println!(
        "model:            {} servers, {locations} locations, {} backends, {endpoints} endpoints",
        model.servers.len(),
        model.backends.len()
    );
    println!(
        "model heap:       {model_bytes} bytes ({:.1} MiB, {:.0} bytes per Ingress)",
        mib(model_bytes),
        model_bytes as f64 / n as f64
    );
    println!(
        "allocated during build (incl. temporaries): {peak_note} bytes ({:.1} MiB) in {} allocations",
        mib(peak_note as isize),
        s.allocations
    );
    println!(
        "snapshot heap:    {snapshot_bytes} bytes ({:.1} MiB)",
        mib(snapshot_bytes)
    );
    println!("build time:       {elapsed:?} (one run, with counting allocator)");
    drop(model);
    drop(snap);
}
