//! Model benchmark (issue 2, section 7): full build + hash + diff for synthetic
//! clusters of 1k and 10k Ingresses (3 paths, one Service and one EndpointSlice with
//! 10 endpoints each). Goal: 10k in ≤ 100 ms (≤ 10 µs per Ingress).
//! Memory: `cargo run --release -p ferrule-model --example model_memory`.

// criterion_group! generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrule_model::{Diff, build, diff};

mod synthetic;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("model");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for n in [1_000, 10_000] {
        let snap = synthetic::cluster(n);
        let next = synthetic::with_one_endpoint_changed(&snap);
        let old = build(&snap);
        let new = build(&next);
        assert!(old.problems.is_empty(), "{:?}", &old.problems[..1]);
        assert!(
            matches!(diff(&old, &new), Diff::Dynamic { ref backends, .. } if backends.len() == 1)
        );
        g.throughput(Throughput::Elements(n as u64));

        g.bench_with_input(BenchmarkId::new("build", n), &snap, |b, s| {
            b.iter(|| build(black_box(s)))
        });
        g.bench_with_input(BenchmarkId::new("hash", n), &old, |b, m| {
            b.iter(|| black_box(m).hash())
        });
        g.bench_with_input(BenchmarkId::new("diff", n), &(&old, &new), |b, (o, m)| {
            b.iter(|| diff(black_box(o), black_box(m)))
        });
        // The sync loop's work for one endpoint event: rebuild, hash, diff.
        g.bench_with_input(BenchmarkId::new("build+hash+diff", n), &next, |b, s| {
            b.iter(|| {
                let m = build(black_box(s));
                let h = m.hash();
                (diff(&old, &m), h)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
