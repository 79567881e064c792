//! Admission benchmark (issue 19): the webhook's decision on one Ingress against a
//! synthetic cluster of 3,000 Ingresses with 10 paths each, beside the full build of
//! that cluster (what ingress-nginx's webhook did per request, before `nginx -t`).
//! The decisions: a valid Ingress on a new host, a younger one on an existing host
//! and path (a warning naming the winner), an invalid one; and indexing the snapshot
//! (once per snapshot change, not per request). Before criterion runs, the p50 and
//! p99 of 2,000 decisions of each kind are printed.

// criterion_group! generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ferrule_model::admission::{Decision, Index, Options};
use ferrule_model::{Snapshot, build};
use k8s_openapi::api::networking::v1::{HTTPIngressPath, Ingress};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

#[allow(dead_code)]
mod synthetic;

const N: usize = 3_000;
const PATHS: usize = 10;

/// Ingress `i` of the synthetic cluster, with `PATHS` paths.
fn ingress(i: usize) -> Ingress {
    let mut ing = synthetic::ingress(i);
    let rule = &mut ing.spec.as_mut().unwrap().rules.as_mut().unwrap()[0];
    let paths = &mut rule.http.as_mut().unwrap().paths;
    let template = paths[0].clone();
    *paths = (0..PATHS)
        .map(|p| HTTPIngressPath {
            path: Some(if p == 0 {
                "/".to_owned()
            } else {
                format!("/p{p}")
            }),
            ..template.clone()
        })
        .collect();
    ing
}

fn cluster() -> Snapshot {
    let mut snap = synthetic::cluster(N);
    snap.ingresses = (0..N).map(|i| Arc::new(ingress(i))).collect();
    snap
}

/// The candidates, by name.
fn candidates() -> Vec<(&'static str, Ingress)> {
    let newest = |mut ing: Ingress, name: &str| {
        ing.metadata.name = Some(name.to_owned());
        ing.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_800_000_000).unwrap()));
        ing
    };
    // Ingress N on a host of its own, routed to an existing Service (svc100 of ns0).
    let mut valid = newest(ingress(N), "new");
    let rules = valid.spec.as_mut().unwrap().rules.as_mut().unwrap();
    for p in &mut rules[0].http.as_mut().unwrap().paths {
        p.backend.service.as_mut().unwrap().name = "svc100".to_owned();
    }
    assert_eq!(valid.metadata.namespace.as_deref(), Some("ns0"));
    // A copy of Ingress 1,500 (same host, paths and Service), younger.
    let conflict = newest(ingress(N / 2), "rival");
    let mut invalid = newest(ingress(N + 1), "invalid");
    invalid.metadata.annotations = Some(
        [(
            "nginx.ingress.kubernetes.io/proxy-read-timeout".to_owned(),
            "soon".to_owned(),
        )]
        .into(),
    );
    vec![
        ("valid", valid),
        ("conflict", conflict),
        ("invalid", invalid),
    ]
}

fn percentiles(index: &Index, candidate: &Ingress, opts: &Options) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..2_000)
        .map(|_| {
            let c = candidate.clone();
            let t = Instant::now();
            black_box(index.check(c, opts));
            t.elapsed()
        })
        .collect();
    times.sort();
    (times[times.len() / 2], times[times.len() * 99 / 100])
}

fn bench(c: &mut Criterion) {
    let snap = Arc::new(cluster());
    let opts = Options::default();
    let index = Index::new(snap.clone());
    let full = build(&snap);
    assert!(full.problems.is_empty(), "{:?}", &full.problems[..1]);
    let candidates = candidates();
    for (name, cand) in &candidates {
        let d = index.check(cand.clone(), &opts);
        let ok = match (*name, &d) {
            ("valid", Decision::Allowed { warnings }) => warnings.is_empty(),
            ("conflict", Decision::Allowed { warnings }) => warnings
                .iter()
                .any(|w| w.contains("already served by Ingress ns0/ing1500")),
            ("invalid", Decision::Denied { .. }) => true,
            _ => false,
        };
        assert!(ok, "{name}: {d:?}");
    }

    let t = Instant::now();
    let runs = 5;
    for _ in 0..runs {
        black_box(build(&snap));
    }
    let build_time = t.elapsed() / runs;
    println!(
        "admission: {N} Ingresses x {PATHS} paths; full build {build_time:?} (mean of {runs})"
    );
    for (name, cand) in &candidates {
        let (p50, p99) = percentiles(&index, cand, &opts);
        println!(
            "admission: decision {name}: p50 {p50:?}, p99 {p99:?}; full build / p50 = {:.0}",
            build_time.as_secs_f64() / p50.as_secs_f64()
        );
    }

    let mut g = c.benchmark_group("admission");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.bench_with_input(BenchmarkId::new("full-build", N), &snap, |b, s| {
        b.iter(|| build(black_box(s)))
    });
    g.bench_with_input(BenchmarkId::new("index", N), &snap, |b, s| {
        b.iter(|| Index::new(black_box(s.clone())))
    });
    g.finish();
    let mut g = c.benchmark_group("admission");
    for (name, cand) in &candidates {
        g.bench_with_input(
            BenchmarkId::new(format!("decision-{name}"), N),
            cand,
            |b, cand| b.iter(|| index.check(black_box(cand.clone()), &opts)),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
