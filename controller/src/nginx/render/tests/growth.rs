//! Growth (issue 17): model build and render are linear in their input, for the
//! shapes an adversarial review once found quadratic or worse. Each shape is built
//! and rendered at `n` and at `8n`; the ratio of the two times (best of a few
//! runs, both measured here, in this run) must stay far below the 64 that a
//! quadratic cost gives. A ratio, never an absolute time: these machines are noisy.

use std::time::Duration;

use ferrule_model::{Settings, Snapshot, objects};
use serde_json::{Value, json};

use super::opts;
use crate::nginx::render::Renderer;

/// The growth factor of the input, and the most its cost may grow by: linear
/// with room for sorting, allocation and noise (about ×10-16 here in a debug
/// build), half of the ×64 a quadratic cost gives.
const FACTOR: usize = 8;
const MAX_RATIO: f64 = 32.0;

/// The least CPU time this thread spent in `f` over `runs` runs. CPU time of the
/// thread, not wall time: the other tests of this binary (and anything else on
/// the machine) take the cores in turn, and a wall clock counts their turns too,
/// which once made a linear shape look ×40 on a loaded 2-core machine.
pub(super) fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    let now = || -> Duration {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
            .expect("thread CPU clock")
            .into()
    };
    (0..runs)
        .map(|_| {
            let t = now();
            f();
            now() - t
        })
        .min()
        .expect("runs")
}

fn snapshot(docs: Vec<Value>) -> Snapshot {
    let mut snap = Snapshot {
        settings: Settings {
            watch_without_class: true,
            ..Settings::default()
        },
        ..Snapshot::default()
    };
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "app", "namespace": "t" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    });
    for d in std::iter::once(service).chain(docs) {
        objects::add(&mut snap, d, None).expect("valid object");
    }
    snap
}

fn ingress(name: &str, host: &str, paths: &[(String, &str)], annotations: Value) -> Value {
    let paths: Vec<Value> = paths
        .iter()
        .map(|(p, t)| {
            json!({ "path": p, "pathType": t,
                    "backend": { "service": { "name": "app", "port": { "number": 80 } } } })
        })
        .collect();
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": { "name": name, "namespace": "t", "annotations": annotations,
                      "creationTimestamp": "2026-01-01T00:00:00Z" },
        "spec": { "rules": [{ "host": host, "http": { "paths": paths } }] },
    })
}

/// A hostile shape: its name, its baseline size and the snapshot of a size.
type Shape = (&'static str, usize, fn(usize) -> Snapshot);

/// The hostile shapes, each a snapshot of size `n`.
fn shapes() -> Vec<Shape> {
    vec![
        ("paths of one Ingress", 200, |n| {
            let paths: Vec<_> = (0..n).map(|i| (format!("/p{i}"), "Prefix")).collect();
            snapshot(vec![ingress("a", "a.test", &paths, json!({}))])
        }),
        // Each Exact path ending in `/` was routed against every regex path.
        ("Exact paths beside regex paths on one host", 100, |n| {
            let per = 20;
            let docs = (0..n / per)
                .map(|k| {
                    let mut paths: Vec<_> =
                        (0..per).map(|i| (format!("/e{k}-{i}/"), "Exact")).collect();
                    paths.extend(
                        (0..per).map(|i| (format!("/r{k}-{i}/.*"), "ImplementationSpecific")),
                    );
                    ingress(
                        &format!("i{k}"),
                        "shared.test",
                        &paths,
                        json!({
                        "nginx.ingress.kubernetes.io/use-regex": "true" }),
                    )
                })
                .collect();
            snapshot(docs)
        }),
        // An opening brace per character was once scanned to its end.
        ("one long regex path of braces", 4096, |n| {
            let path = format!("/r/{}", "{".repeat(n));
            snapshot(vec![ingress(
                "a",
                "a.test",
                &[(path, "ImplementationSpecific")],
                json!({ "nginx.ingress.kubernetes.io/use-regex": "true" }),
            )])
        }),
        ("hosts, one Ingress each", 200, |n| {
            let docs = (0..n)
                .map(|i| {
                    ingress(
                        &format!("i{i}"),
                        &format!("h{i}.test"),
                        &[("/".into(), "Prefix")],
                        json!({}),
                    )
                })
                .collect();
            snapshot(docs)
        }),
        ("a long annotation list", 100, |n| {
            let origins: Vec<String> = (0..n)
                .map(|i| format!("https://o{i}.example.com"))
                .collect();
            snapshot(vec![ingress(
                "a",
                "a.test",
                &[("/".into(), "Prefix")],
                json!({ "nginx.ingress.kubernetes.io/enable-cors": "true",
                        "nginx.ingress.kubernetes.io/cors-allow-origin": origins.join(", ") }),
            )])
        }),
    ]
}

#[test]
fn build_and_render_grow_linearly_with_hostile_input() {
    let renderer = Renderer::new(opts("/ferrule"));
    let mut report = Vec::new();
    for (name, n, make) in shapes() {
        let (small, large) = (make(n), make(n * FACTOR));
        let cost = |snap: &Snapshot, runs| {
            let build = best(runs, || {
                ferrule_model::build(snap);
            });
            let model = ferrule_model::build(snap);
            let render = best(runs, || {
                renderer.render(&model).expect("render");
            });
            (build, render)
        };
        // Warm up, then the baseline and the grown input.
        cost(&small, 1);
        let (b1, r1) = cost(&small, 7);
        let (b8, r8) = cost(&large, 3);
        let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64().max(1e-6);
        let (build, render) = (ratio(b1, b8), ratio(r1, r8));
        report.push(format!("{name}: build ×{build:.1}, render ×{render:.1}"));
        assert!(
            build < MAX_RATIO && render < MAX_RATIO,
            "{name}: input ×{FACTOR}, build {b1:?} → {b8:?} (×{build:.1}), render {r1:?} → \
             {r8:?} (×{render:.1})"
        );
    }
    eprintln!("{}", report.join("\n"));
}
