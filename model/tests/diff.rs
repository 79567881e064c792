//! Diff classification: what the controller must do when the model changes, and the
//! hash that tells whether it changed at all.

#[macro_use]
mod common;

use common::*;
use ferrule_model::{Diff, Model, Snapshot, build, build_endpoint_change, diff};
use serde_json::{Value, json};

/// The running state: two hosts (one with TLS), a canary, the controller ConfigMap.
fn base() -> Vec<Value> {
    let mut objs = vec![our_class(), config_map(&[("proxy-body-size", "8m")])];
    objs.extend(app("default/a", "10.0.0.1"));
    objs.extend(app("default/b", "10.0.0.2"));
    objs.extend(app("default/next", "10.0.0.3"));
    objs.push(tls_secret("default/a-tls", "a.crt", "a.key"));
    objs.push(
        Ing::new("default/main", 1)
            .ann("proxy-read-timeout", "30")
            .rule("a.example.com", &[("/", "Prefix", "a", "80")])
            .tls(&["a.example.com"], "a-tls")
            .0,
    );
    objs.push(ingress(
        "default/other",
        2,
        "b.test",
        &[("/", "Prefix", "b", "80")],
    ));
    objs.push(
        Ing::new("default/canary", 3)
            .ann("canary", "true")
            .ann("canary-weight", "10")
            .rule("b.test", &[("/", "Prefix", "next", "80")])
            .0,
    );
    objs
}

fn model(objs: &[Value]) -> Model {
    build(&snapshot(&docs![objs.to_vec()]))
}

/// The object of `kind` named `name` (`namespace/name`).
fn obj<'a>(objs: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    let (ns, n) = name.split_once('/').unwrap();
    objs.iter_mut()
        .find(|o| {
            o["kind"] == kind && o["metadata"]["name"] == n && o["metadata"]["namespace"] == ns
        })
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn annotate(objs: &mut [Value], ing: &str, key: &str, value: &str) {
    obj(objs, "Ingress", ing)["metadata"]["annotations"][format!("{P}{key}")] = json!(value);
}

fn endpoints<'a>(objs: &'a mut [Value], slice: &str) -> &'a mut Vec<Value> {
    obj(objs, "EndpointSlice", slice)["endpoints"]
        .as_array_mut()
        .unwrap()
}

fn dynamic(backends: &[&str], certificates: &[&str]) -> Diff {
    tls(backends, certificates, &[])
}

fn tls(backends: &[&str], certificates: &[&str], hosts: &[&str]) -> Diff {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    Diff::Dynamic {
        backends: strings(backends),
        certificates: strings(certificates),
        tls_hosts: strings(hosts),
    }
}

fn reload(reasons: &[&str]) -> Diff {
    Diff::Reload {
        reasons: reasons.iter().map(|s| s.to_string()).collect(),
    }
}

type Edit = fn(&mut Vec<Value>);

#[test]
fn classification() {
    let cases: &[(&str, Edit, Diff)] = &[
        ("identical", |_| {}, Diff::Unchanged),
        (
            "endpoint added",
            |o| endpoints(o, "default/a-abc").push(json!({ "addresses": ["10.0.0.9"] })),
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "endpoint removed",
            |o| endpoints(o, "default/a-abc").clear(),
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "endpoint not ready",
            |o| endpoints(o, "default/a-abc")[0]["conditions"] = json!({ "ready": false }),
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "endpoint slice added",
            |o| {
                o.push(slice(
                    "default/b-xyz",
                    "b",
                    &[("http", 8080)],
                    &[("fd00::2", Some(true))],
                ))
            },
            dynamic(&["default_b_80"], &[]),
        ),
        (
            "canary endpoint change",
            |o| endpoints(o, "default/next-abc").push(json!({ "addresses": ["10.0.0.4"] })),
            dynamic(&["default_next_80"], &[]),
        ),
        (
            // EWMA needs the log phase, rendered only where EWMA is used
            "load-balance",
            |o| annotate(o, "default/main", "load-balance", "ewma"),
            reload(&["load-balance:default_a_80"]),
        ),
        (
            // a canary Ingress's load-balance is the canary backend's (ingress-nginx);
            // EWMA there needs the primary's locations to run the log phase
            "load-balance on a canary",
            |o| annotate(o, "default/canary", "load-balance", "ewma"),
            reload(&["load-balance:default_b_80"]),
        ),
        (
            // its other annotations are ignored
            "proxy-read-timeout on a canary",
            |o| annotate(o, "default/canary", "proxy-read-timeout", "7"),
            Diff::Unchanged,
        ),
        (
            // a canary-only backend has no locations of its own
            "affinity on a canary",
            |o| {
                annotate(o, "default/canary", "affinity", "cookie");
                annotate(o, "default/canary", "session-cookie-name", "c");
            },
            dynamic(&["default_next_80"], &[]),
        ),
        (
            "affinity-canary-behavior",
            |o| annotate(o, "default/canary", "affinity-canary-behavior", "legacy"),
            dynamic(&["default_b_80"], &[]),
        ),
        (
            "load-balance unchanged in effect",
            |o| annotate(o, "default/main", "load-balance", "round_robin"),
            Diff::Unchanged,
        ),
        (
            "upstream-hash-by",
            |o| annotate(o, "default/main", "upstream-hash-by", "$remote_addr"),
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "affinity",
            |o| {
                annotate(o, "default/other", "affinity", "cookie");
                annotate(o, "default/other", "session-cookie-name", "sticky");
            },
            dynamic(&["default_b_80"], &[]),
        ),
        (
            // canary and affinity are decided in the balancer phase: no reload
            "affinity where none was",
            |o| {
                annotate(o, "default/main", "affinity", "cookie");
                annotate(o, "default/main", "session-cookie-name", "sticky");
            },
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "canary added",
            |o| {
                o.push(
                    Ing::new("default/canary-a", 4)
                        .ann("canary", "true")
                        .ann("canary-weight", "10")
                        .rule("a.example.com", &[("/", "Prefix", "next", "80")])
                        .0,
                )
            },
            dynamic(&["default_a_80"], &[]),
        ),
        (
            "canary weight",
            |o| annotate(o, "default/canary", "canary-weight", "50"),
            dynamic(&["default_b_80"], &[]),
        ),
        (
            "canary removed",
            |o| o.retain(|x| x["metadata"]["name"] != "canary"),
            dynamic(&["default_b_80", "default_next_80"], &[]),
        ),
        (
            "certificate rotated",
            |o| {
                *obj(o, "Secret", "default/a-tls") =
                    tls_secret("default/a-tls", "a-rotated.crt", "a.key")
            },
            dynamic(&[], &["default/a-tls"]),
        ),
        (
            "path added",
            |o| {
                let ing = obj(o, "Ingress", "default/other");
                ing["spec"]["rules"][0]["http"]["paths"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({
                        "path": "/new", "pathType": "Prefix",
                        "backend": { "service": { "name": "b", "port": { "number": 80 } } },
                    }));
            },
            reload(&["server-changed:b.test"]),
        ),
        (
            "host added",
            |o| {
                o.push(ingress(
                    "default/new",
                    9,
                    "new.test",
                    &[("/", "Prefix", "b", "80")],
                ))
            },
            reload(&["server-added:new.test"]),
        ),
        (
            "host removed",
            |o| o.retain(|x| x["metadata"]["name"] != "other"),
            reload(&["server-removed:b.test"]),
        ),
        (
            "proxy-read-timeout",
            |o| annotate(o, "default/main", "proxy-read-timeout", "90"),
            reload(&["server-changed:a.example.com"]),
        ),
        (
            "ConfigMap",
            |o| {
                *obj(o, "ConfigMap", "ingress-nginx/ferrule") =
                    config_map(&[("proxy-body-size", "16m")])
            },
            reload(&["global-settings"]),
        ),
        (
            "Service gone",
            |o| o.retain(|x| !(x["kind"] == "Service" && x["metadata"]["name"] == "a")),
            reload(&["server-changed:a.example.com"]),
        ),
        (
            // the host keeps TLS with the default certificate
            "TLS secret broken",
            |o| {
                *obj(o, "Secret", "default/a-tls") =
                    tls_secret("default/a-tls", "a.crt", "other.key")
            },
            tls(&[], &["default/a-tls"], &["a.example.com"]),
        ),
        (
            // without a secretName: served with the default certificate
            "TLS added to a served host",
            |o| {
                let ing = obj(o, "Ingress", "default/other");
                ing["spec"]["tls"] = json!([{ "hosts": ["b.test"] }]);
            },
            tls(&[], &[], &["b.test"]),
        ),
        (
            "TLS removed",
            |o| {
                obj(o, "Ingress", "default/main")["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("tls");
            },
            tls(&[], &["default/a-tls"], &["a.example.com"]),
        ),
        (
            "catch-all added",
            |o| o.push(Ing::new("default/catch", 9).default_backend("b", "80").0),
            reload(&["default-backend"]),
        ),
    ];
    let old = model(&base());
    assert!(old.problems.is_empty(), "{}", problem_list(&old));
    for (name, edit, want) in cases {
        let mut objs = base();
        edit(&mut objs);
        let new = model(&objs);
        let got = diff(&old, &new);
        assert_eq!(&got, want, "{name}");
        // the hash changes exactly when the model does
        assert_eq!(
            old == new,
            old.hash() == new.hash(),
            "{name}: hash vs equality"
        );
        assert_eq!(matches!(want, Diff::Unchanged), old == new, "{name}");
    }
}

#[test]
fn problems_only_change_is_unchanged_for_nginx_but_changes_the_hash() {
    let old = model(&base());
    let mut objs = base();
    // a rejected Ingress serves nothing, but its problem is part of the model
    objs.push(
        Ing::new("default/broken", 9)
            .ann("whitelist-source-range", "10.0.0.0/33")
            .rule("broken.test", &[("/", "Prefix", "a", "80")])
            .0,
    );
    let new = model(&objs);
    assert_eq!(diff(&old, &new), Diff::Unchanged);
    assert_ne!(old.hash(), new.hash());
    assert_eq!(new.problems.len(), 1);
}

#[test]
fn hash_is_stable_across_rebuilds_and_input_order() {
    let objs = base();
    let one = model(&objs);
    let two = model(&objs);
    assert_eq!(one, two);
    assert_eq!(one.hash(), two.hash());
    assert_eq!(one.hash().len(), 64);
    let mut reversed = objs.clone();
    reversed.reverse();
    let three = model(&reversed);
    assert_eq!(one, three);
    assert_eq!(one.hash(), three.hash());
    // the hash is the blake3 of the canonical JSON: the same value re-encoded agrees
    let json = serde_json::to_string(&one).unwrap();
    let back: Model = serde_json::from_str(&json).unwrap();
    assert_eq!(back.hash(), one.hash());
}

#[test]
fn the_memoised_hash_follows_a_changed_clone() {
    let one = model(&base());
    let h = one.hash();
    assert_eq!(one.clone().hash(), h, "a clone hashes the same");
    let mut changed = one.clone();
    changed.backends.clear();
    assert_ne!(changed.hash(), h, "a changed clone is hashed anew");
    assert_eq!(
        changed.hash(),
        serde_json::from_value::<Model>(serde_json::to_value(&changed).unwrap())
            .unwrap()
            .hash()
    );
    assert_eq!(one.hash(), h);
}

#[test]
fn diff_is_symmetric_in_kind() {
    // Going back is the same kind of change.
    let old = model(&base());
    let mut objs = base();
    endpoints(&mut objs, "default/a-abc").clear();
    let new = model(&objs);
    assert_eq!(diff(&new, &old), dynamic(&["default_a_80"], &[]));
    let mut objs = base();
    objs.retain(|x| x["metadata"]["name"] != "other");
    let new = model(&objs);
    assert_eq!(diff(&new, &old), reload(&["server-added:b.test"]));
}

#[test]
fn default_certificate_set_or_rotated_needs_no_reload() {
    // The balancer serves it for every name without a certificate of its own (the
    // catch-all `_`), so setting, removing or rotating it is a certificate change.
    let with = |cert: &str| {
        let mut objs = base();
        objs.push(tls_secret("ingress-nginx/fallback", cert, "a.key"));
        objs.push(test_settings(
            json!({ "defaultSslCertificate": "ingress-nginx/fallback" }),
        ));
        model(&objs)
    };
    let without = model(&base());
    let set = with("a.crt");
    let change = tls(&[], &["ingress-nginx/fallback"], &["_"]);
    assert_eq!(diff(&without, &set), change);
    assert_eq!(diff(&set, &without), change);
    assert_eq!(diff(&set, &with("a-rotated.crt")), change);
    assert_eq!(diff(&set, &with("a.crt")), Diff::Unchanged);
}

/// The snapshot of `base()` edited by `edit`, sharing every object but the
/// EndpointSlices with `before` (as the sources share unchanged objects).
fn slices_edited(before: &Snapshot, edit: Edit) -> Snapshot {
    let mut objs = base();
    edit(&mut objs);
    let after = snapshot(&docs![objs]);
    Snapshot {
        endpoint_slices: after.endpoint_slices,
        ..before.clone()
    }
}

#[test]
fn endpoint_fast_path() {
    let before = snapshot(&docs![base()]);
    let old = build(&before);
    let fast = |after: &Snapshot| {
        build_endpoint_change(&before, &old, after).map(|(m, changed)| {
            let full = build(after);
            assert_eq!(m, full, "the fast path gives the full build's model");
            // the diff skips what the fast path shared, with the same outcome
            assert_eq!(diff(&old, &m), diff(&old, &full));
            changed
        })
    };
    let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let cases: &[(&str, Edit, Option<Vec<String>>)] = &[
        ("every slice re-sent, nothing changed", |_| {}, names(&[])),
        (
            "an endpoint added",
            |o| endpoints(o, "default/a-abc").push(json!({ "addresses": ["10.0.0.9"] })),
            names(&["default_a_80"]),
        ),
        (
            "a canary's endpoint replaced",
            |o| endpoints(o, "default/next-abc")[0]["addresses"] = json!(["10.0.0.8"]),
            names(&["default_next_80"]),
        ),
        // the Ingresses get "no ready endpoints": the full build reports it
        (
            "the last endpoint gone",
            |o| endpoints(o, "default/a-abc").clear(),
            None,
        ),
    ];
    for (what, edit, want) in cases {
        assert_eq!(&fast(&slices_edited(&before, *edit)), want, "{what}");
    }
    // The controller's own status write replaces an Ingress object: still the fast path.
    let mut after = slices_edited(&before, |o| {
        endpoints(o, "default/a-abc").push(json!({ "addresses": ["10.0.0.9"] }))
    });
    for ing in &mut after.ingresses {
        let mut i = (**ing).clone();
        i.metadata.resource_version = Some("424242".into());
        i.status = serde_json::from_value(
            json!({ "loadBalancer": { "ingress": [{ "ip": "10.9.9.9" }] } }),
        )
        .unwrap();
        *ing = std::sync::Arc::new(i);
    }
    assert_eq!(
        fast(&after),
        names(&["default_a_80"]),
        "after a status write"
    );
    // Anything else changed: the full build runs.
    let mut objs = base();
    annotate(&mut objs, "default/main", "proxy-read-timeout", "31");
    let other = snapshot(&docs![objs]);
    assert_eq!(
        fast(&Snapshot {
            endpoint_slices: before.endpoint_slices.clone(),
            ..other
        }),
        None
    );
}
