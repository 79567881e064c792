//! The routing cases of `test/routing/` through `ferrule run` and a real NGINX, with
//! the Lua balancer and with the njs one: each request is answered by the echo its
//! case file names (or by NGINX with the status it names), and `/status/resources`
//! reports the problems it names. `model/tests/routing.rs` holds `route()` to the
//! same files, so NGINX and the model agree wherever a case says something.

#[path = "../../../test/routing/cases.rs"]
mod cases;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;

use crate::support::*;
use cases::Case;

/// Cases run at once: each is a controller and an NGINX of its own (a case may set
/// flags, and catch-all cases need the unknown hosts to themselves), and the machine
/// running the suite has few cores.
const PARALLEL: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_routes_as_its_file_says_with_lua() {
    every_case("lua").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_routes_as_its_file_says_with_njs() {
    every_case("njs").await;
}

async fn every_case(balancer: &str) {
    let cases = cases::load();
    let failures: Vec<String> = futures::stream::iter(cases.iter().map(|c| run(c, balancer)))
        .buffer_unordered(PARALLEL)
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "{balancer}: {} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs one case; returns its mismatches, each a line naming the case.
async fn run(case: &Case, balancer: &str) -> Vec<String> {
    // Every echo on one address, a port each: a case's Service may publish several
    // ports of the same endpoint.
    let mut echoes = BTreeMap::new();
    for name in case.backends() {
        echoes.insert(name, Echo::start("127.0.0.1").await);
    }
    let addr = |name: &str| {
        let a = echoes[name].addr;
        (a.ip().to_string(), a.port())
    };
    let m = Manifests::new();
    // The case brings its IngressClasses: none is the default unless it says so.
    m.remove("class.yaml");
    m.write("case.yaml", &case.manifests_yaml(&addr));
    let mut args = vec!["--balancer", balancer, "--worker-processes", "1"];
    let flags = case.args();
    args.extend(flags.iter().map(String::as_str));
    let f = Ferrule::start(m.path(), &args).await;

    let id = format!("{} ({balancer})", case.id());
    let mut out = Vec::new();
    for r in &case.requests {
        let request = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            r.method, r.path, r.host
        );
        let (status, body) = raw_http(f.http, &request).await;
        let got = match echo_of(&body) {
            Some(a) => match echoes.iter().find(|(_, e)| e.addr.to_string() == a) {
                Some((name, _)) => format!("backend {name}"),
                None => format!("backend {a} (not the case's)"),
            },
            None => format!("status {status}"),
        };
        if got != r.expected() {
            out.push(format!(
                "{id}: {} {}{}: expected {}, got {got}",
                r.method,
                r.host,
                r.path,
                r.expected()
            ));
        }
    }
    out.extend(problems(&f, case, &id).await);
    if !out.is_empty() {
        out.push(format!("{id}: log:\n{}", f.logs()));
    }
    out
}

/// The address of the echo that wrote `body`, if one did.
fn echo_of(body: &str) -> Option<String> {
    let json = &body[body.find('{')?..=body.rfind('}')?];
    let v: Value = serde_json::from_str(json).ok()?;
    Some(v["backend"].as_str()?.to_owned())
}

/// The case's problems against `/status/resources`, which lists an Ingress of ours
/// with an empty message when it has none.
async fn problems(f: &Ferrule, case: &Case, id: &str) -> Vec<String> {
    let message_of = |resources: &[Value], resource: &str| {
        let (kind, ns, name) = cases::resource(resource);
        resources
            .iter()
            .find(|r| r["kind"] == kind && r["namespace"] == ns && r["name"] == name)
            .map_or(String::new(), |r| {
                r["message"].as_str().unwrap_or_default().to_owned()
            })
    };
    let complete = |resources: &[Value]| {
        case.problems
            .iter()
            .all(|(r, texts)| texts.iter().all(|t| message_of(resources, r).contains(t)))
    };
    // Readiness comes with the first configuration; the report may follow it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut resources = f.resources().await;
    while !complete(&resources) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        resources = f.resources().await;
    }
    let mut out = Vec::new();
    for (resource, texts) in &case.problems {
        let message = message_of(&resources, resource);
        if texts.is_empty() && !message.is_empty() {
            out.push(format!("{id}: {resource}: unexpected {message:?}"));
        }
        for t in texts.iter().filter(|t| !message.contains(t.as_str())) {
            out.push(format!("{id}: {resource}: no {t:?} in {message:?}"));
        }
    }
    out
}
