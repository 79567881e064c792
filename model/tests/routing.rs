//! The routing cases of `test/routing/` against `route()`: every request of every case
//! gets the backend or status its file says, and the problems it names are reported.
//! `controller/tests/it/routing.rs` holds NGINX to the same files.

mod common;

use common::cases::{self, Case};
use common::{case_address, case_model, problem_list};
use ferrule_model::Model;
use ferrule_model::route::{Outcome, route};

#[test]
fn every_case_routes_as_its_file_says() {
    let cases = cases::load();
    let failures: Vec<String> = cases.iter().flat_map(check).collect();
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The mismatches of one case, each a line naming the case.
fn check(case: &Case) -> Vec<String> {
    let model = case_model(case);
    let mut out = Vec::new();
    for r in &case.requests {
        let got = answer(case, &model, &r.host, r.route_path());
        if got != r.expected() {
            out.push(format!(
                "{}: {} {}{}: expected {}, got {got}",
                case.id(),
                r.method,
                r.host,
                r.path,
                r.expected()
            ));
        }
    }
    for (resource, texts) in &case.problems {
        let messages: Vec<&str> = model
            .problems
            .iter()
            .filter(|p| p.resource.to_string() == *resource)
            .map(|p| p.message.as_str())
            .collect();
        if texts.is_empty() && !messages.is_empty() {
            out.push(format!(
                "{}: {resource}: unexpected {messages:?}",
                case.id()
            ));
        }
        for t in texts {
            if !messages.iter().any(|m| m.contains(t.as_str())) {
                out.push(format!(
                    "{}: {resource}: no problem containing {t:?}; problems:\n{}",
                    case.id(),
                    problem_list(&model)
                ));
            }
        }
    }
    out
}

/// What `route()` gives, named as the case files name it: the app or echo whose
/// address every endpoint of the backend has, or the status.
fn answer(case: &Case, model: &Model, host: &str, path: &str) -> String {
    let name = match route(model, host, path) {
        Outcome::Status(s) => return format!("status {s}"),
        Outcome::Backend(name) => name,
    };
    let endpoints = &model.backends[&name].endpoints;
    let owners: Vec<&str> = endpoints
        .iter()
        .map(|e| {
            case.backends()
                .find(|b| case_address(case, b) == (e.address.clone(), e.port))
                .unwrap_or("?")
        })
        .collect();
    match owners.as_slice() {
        [one, rest @ ..] if *one != "?" && rest.iter().all(|o| o == one) => {
            format!("backend {one}")
        }
        _ => format!("backend {name} with endpoints {owners:?}"),
    }
}
