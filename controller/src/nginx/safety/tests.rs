//! The search driven by a fake probe, from a table. The real-NGINX tests in
//! `controller/tests/it/safety.rs` prove that NGINX behaves as the fake does; these
//! cover the policy case by case and count its tests exactly.
//!
//! A world is written as words:
//! - `a` or `a:V`: the Ingress `ns/a` in version `V` (`1` when left out). Flags in
//!   `V` say how NGINX takes it: `!` rejected, the error naming one of its lines;
//!   `?` rejected, the error naming a line Ferrule generated (so no resource);
//!   `^` rejected (naming it) together with a ConfigMap marked `^`, which is fine
//!   on its own (shared input); `@s` it uses the Secret `s`.
//! - `cm:V`: the controller ConfigMap; `!` its own lines are rejected, `?` it
//!   breaks the configuration without naming a line, even without any Ingress.
//! - `secret:s`, `secret:s!`: a Secret; when broken, every Ingress using it is
//!   rejected with an error naming the Ingress's lines.
//! - `outside:cm`, `outside:all`: something the resources do not hold breaks any
//!   configuration with a ConfigMap (an included file is gone), or every one.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use ferrule_model::{Model, ResourceRef, Snapshot};

use super::{Exclusions, Prebuilt, Probe, apply};
use crate::nginx::process::TestFailure;
use crate::nginx::{Applied, ApplyError};

/// A configuration as the fake renders it.
#[derive(Debug, Clone)]
struct Conf {
    /// What it is made of, sorted: `a:1 b:2 secret:s cm:1`.
    text: String,
    /// How NGINX rejects it: the first error in the files.
    failure: Option<TestFailure>,
}

/// A write: the configuration, and what it replaced when it changed the files.
struct Written {
    conf: Conf,
    replaced: Option<Conf>,
    /// The model it was written with.
    model: Arc<Model>,
}

/// NGINX as the search sees it.
struct Fake {
    /// The configuration in the files.
    disk: Conf,
    /// What the running NGINX loaded (`None`: not running).
    running: Option<String>,
    /// The configurations tested, in order.
    tested: Vec<String>,
    /// What breaks from outside the resources (`outside:`).
    outside: Option<String>,
}

impl Fake {
    fn new() -> Self {
        let missing = failure("open() \"nginx.conf\" failed", None);
        Self {
            disk: Conf {
                text: "<no files>".into(),
                failure: Some(missing),
            },
            running: None,
            tested: Vec::new(),
            outside: None,
        }
    }

    fn render(&self, snap: &Snapshot) -> Conf {
        let cm = snap
            .config_map
            .as_ref()
            .map(|c| c.data.as_ref().unwrap()["v"].clone());
        let cm = cm.as_deref();
        let mut failures = Vec::new();
        let outside = self.outside.as_deref();
        if outside == Some("all") {
            failures.push(failure("everything fails", None));
        }
        if outside == Some("cm") && cm.is_some() {
            failures.push(failure("open() \"extra.conf\" failed", None));
        }
        if cm.is_some_and(|v| v.contains('!')) {
            failures.push(failure("bad ConfigMap lines", Some("ConfigMap/ns/cm")));
        }
        if cm.is_some_and(|v| v.contains('?')) {
            failures.push(failure("the ConfigMap breaks the http block", None));
        }
        let mut ingresses = BTreeSet::new();
        let mut secrets = BTreeSet::new();
        for ing in &snap.ingresses {
            let name = ing.metadata.name.as_deref().unwrap();
            let v = &ing.metadata.annotations.as_ref().unwrap()["v"];
            ingresses.insert(format!("{name}:{v}"));
            let at = format!("Ingress/ns/{name}");
            if v.contains('!') {
                failures.push(failure(&format!("unknown directive in {name}"), Some(&at)));
            }
            if v.contains('?') {
                let line = Some("Controller/-/default-server");
                failures.push(failure(&format!("no usable line for {name}"), line));
            }
            if v.contains('^') && cm.is_some_and(|c| c.contains('^')) {
                failures.push(failure(&format!("duplicate location in {name}"), Some(&at)));
            }
            if let Some((_, s)) = v.split_once('@') {
                let secret = snap
                    .secrets
                    .iter()
                    .find(|x| x.metadata.name.as_deref() == Some(s))
                    .expect("the Secret used");
                let broken = secret.metadata.annotations.is_some();
                secrets.insert(format!("secret:{s}{}", if broken { "!" } else { "" }));
                if broken {
                    let message = format!("Secret {s} breaks {name}");
                    failures.push(failure(&message, Some(&at)));
                }
            }
        }
        let words: Vec<String> = ingresses
            .into_iter()
            .chain(secrets)
            .chain(cm.map(|v| format!("cm:{v}")))
            .collect();
        Conf {
            text: if words.is_empty() {
                "-".into()
            } else {
                words.join(" ")
            },
            failure: failures.into_iter().next(),
        }
    }
}

fn failure(message: &str, at: Option<&str>) -> TestFailure {
    TestFailure {
        message: format!("[emerg] {message}"),
        location: at.map(|a| (PathBuf::from(a), 1)),
    }
}

impl Probe for Fake {
    type Written = Written;

    fn write(&mut self, snap: &Snapshot, model: Arc<Model>) -> Result<Written, ApplyError> {
        let conf = self.render(snap);
        let replaced =
            (conf.text != self.disk.text).then(|| std::mem::replace(&mut self.disk, conf.clone()));
        Ok(Written {
            conf,
            replaced,
            model,
        })
    }

    async fn serves(&mut self, written: &Written) -> bool {
        written.replaced.is_none() && self.running.as_ref() == Some(&written.conf.text)
    }

    async fn starts(&mut self) -> bool {
        self.running.is_none()
    }

    async fn test(&mut self) -> Result<(), TestFailure> {
        self.tested.push(self.disk.text.clone());
        self.disk.failure.clone().map_or(Ok(()), Err)
    }

    fn locate(&self, _: &Written, failure: &TestFailure) -> Option<ResourceRef> {
        let (file, _) = failure.location.as_ref()?;
        let mut parts = file.to_str()?.splitn(3, '/');
        let (kind, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
        Some(ResourceRef::new(kind, ns, name))
    }

    fn roll_back(&mut self, written: Written) -> Result<(), ApplyError> {
        if let Some(previous) = written.replaced {
            self.disk = previous;
        }
        Ok(())
    }

    async fn activate(&mut self, written: &Written) -> Result<Applied, ApplyError> {
        assert_eq!(
            self.disk.text, written.conf.text,
            "activates what is written"
        );
        if self.running.is_some() {
            // The search never reloads what was not tested.
            assert!(self.disk.failure.is_none(), "reloaded {}", self.disk.text);
            self.running = Some(self.disk.text.clone());
            return Ok(Applied::Reloaded);
        }
        if self.disk.failure.is_some() {
            return Err(ApplyError::Io(std::io::Error::other("nginx did not start")));
        }
        self.running = Some(self.disk.text.clone());
        Ok(Applied::Started)
    }
}

/// The snapshot of a world's words, and what breaks from outside.
fn world(words: &str) -> (Snapshot, Option<String>) {
    let mut snap = Snapshot::default();
    snap.settings.watch_without_class = true;
    let mut outside = None;
    for word in words.split_whitespace() {
        let (name, v) = word.split_once(':').unwrap_or((word, "1"));
        match name {
            "outside" => outside = Some(v.to_owned()),
            "cm" => {
                let cm = serde_json::json!({
                    "metadata": { "namespace": "ns", "name": "cm" }, "data": { "v": v },
                });
                snap.config_map = Some(Arc::new(serde_json::from_value(cm).unwrap()));
            }
            "secret" => {
                let (s, broken) = (v.trim_end_matches('!'), v.ends_with('!'));
                let mut secret =
                    serde_json::json!({ "metadata": { "namespace": "ns", "name": s } });
                if broken {
                    secret["metadata"]["annotations"] = serde_json::json!({ "broken": "yes" });
                }
                snap.secrets
                    .push(Arc::new(serde_json::from_value(secret).unwrap()));
            }
            _ => {
                let ing = serde_json::json!({
                    "metadata": { "namespace": "ns", "name": name, "annotations": { "v": v } },
                    "spec": { "rules": [{ "host": format!("{name}.test") }] },
                });
                snap.ingresses
                    .push(Arc::new(serde_json::from_value(ing).unwrap()));
            }
        }
    }
    (snap, outside)
}

/// One pass of the search over `now`, after a pass over `before` that NGINX
/// accepted as it was (empty: NGINX is not running yet). Returns what the pass did,
/// in the words of [`Case::expect`], and the messages reported.
async fn run(before: &str, now: &str) -> (String, String) {
    let mut fake = Fake::new();
    let mut excl = Exclusions::default();
    if !before.is_empty() {
        let (snap, _) = world(before);
        let served = apply(&mut fake, &snap, None, &mut excl).await.unwrap();
        assert_eq!(served.applied, Applied::Started, "{before}");
        assert!(excl.is_empty() && fake.tested.is_empty(), "{before}");
    }
    let (snap, outside) = world(now);
    fake.outside = outside;
    fake.tested.clear();
    let result = apply(&mut fake, &snap, None, &mut excl).await;
    let tests = fake.tested.len();
    let mut rejected: Vec<String> = excl
        .ingresses
        .iter()
        .map(|(r, e)| {
            let fallback = if e.fallback { " (fallback)" } else { "" };
            format!("{}{fallback}", r.name)
        })
        .collect();
    rejected.extend(excl.configmap.as_ref().map(|_| "cm (held)".to_owned()));
    let rejected = if rejected.is_empty() {
        "-".to_owned()
    } else {
        rejected.join(", ")
    };
    let mut messages: Vec<&str> = excl
        .ingresses
        .values()
        .map(|e| e.message.as_str())
        .collect();
    messages.extend(excl.configmap.as_ref().map(|h| h.message.as_str()));
    let messages = messages.join("\n");
    let outcome = match result {
        Ok(served) => {
            assert_eq!(served.tests, tests, "the pass counts every test");
            assert_eq!(fake.render(&served.snapshot).text, served.written.conf.text);
            let serves = &served.written.conf.text;
            let applied = served.applied;
            format!("{applied:?}; tests: {tests}; serves: {serves}; rejected: {rejected}")
        }
        Err(ApplyError::Base(_)) => format!("Base error; tests: {tests}"),
        Err(e) => panic!("{now}: {e}"),
    };
    (outcome, messages)
}

struct Case {
    /// What the case shows.
    what: &'static str,
    /// What NGINX accepted and serves before the pass ("": not running).
    before: &'static str,
    /// The input of the pass.
    now: &'static str,
    /// What the pass did: how NGINX was changed, the tests it ran, what NGINX
    /// serves, what is rejected.
    expect: &'static str,
    /// A part of the messages reported ("": not checked).
    says: &'static str,
}

async fn check(case: &Case) {
    let (outcome, messages) = run(case.before, case.now).await;
    assert_eq!(outcome, case.expect, "{}", case.what);
    assert!(
        messages.contains(case.says),
        "{}: {messages:?} should say {:?}",
        case.what,
        case.says
    );
}

const CASES: &[Case] = &[
    Case {
        what: "nothing changed: no test, no reload",
        before: "a b cm:1",
        now: "a b cm:1",
        expect: "Unchanged; tests: 0; serves: a:1 b:1 cm:1; rejected: -",
        says: "",
    },
    Case {
        what: "a change NGINX accepts: one test, one reload",
        before: "a",
        now: "a b",
        expect: "Reloaded; tests: 1; serves: a:1 b:1; rejected: -",
        says: "",
    },
    Case {
        what: "at startup NGINX starts untested: it parses the configuration anyway",
        before: "",
        now: "a b cm:1",
        expect: "Started; tests: 0; serves: a:1 b:1 cm:1; rejected: -",
        says: "",
    },
    Case {
        what: "an error naming an Ingress's line rejects that Ingress in one test",
        before: "good",
        now: "good bad:1!",
        expect: "Unchanged; tests: 1; serves: good:1; rejected: bad",
        says: "unknown directive in bad",
    },
    Case {
        what: "an edit NGINX rejects keeps its last accepted version serving",
        before: "web other",
        now: "web:2! other",
        expect: "Unchanged; tests: 1; serves: other:1 web:1; rejected: web (fallback)",
        says: "unknown directive in web",
    },
    Case {
        what: "several Ingresses named by their errors are rejected one per test",
        before: "a b c d",
        now: "a b c d bad1:1! bad2:1!",
        expect: "Unchanged; tests: 2; serves: a:1 b:1 c:1 d:1; rejected: bad1, bad2",
        says: "unknown directive in bad2",
    },
    Case {
        what: "the rest of the change applies without the rejected Ingress",
        before: "a b",
        now: "a b new bad:1!",
        expect: "Reloaded; tests: 2; serves: a:1 b:1 new:1; rejected: bad",
        says: "",
    },
    Case {
        what: "an error naming no resource in an edit: bisection finds it, the \
               previous version serves",
        before: "a b c",
        now: "a b:2? c",
        expect: "Unchanged; tests: 4; serves: a:1 b:1 c:1; rejected: b (fallback)",
        says: "no usable line for b",
    },
    Case {
        what: "a named error, then one naming nothing, found by bisection",
        before: "a b c d",
        now: "a b:2! c d:2?",
        expect: "Unchanged; tests: 5; serves: a:1 b:1 c:1 d:1; \
                 rejected: b (fallback), d (fallback)",
        says: "no usable line for d",
    },
    Case {
        what: "a version NGINX accepted before has no fallback to itself",
        before: "a:1^ b cm:1",
        now: "a:1^ b cm:2^",
        expect: "Reloaded; tests: 2; serves: b:1 cm:2^; rejected: a",
        says: "duplicate location in a",
    },
    Case {
        what: "a fallback NGINX rejects too is dropped, with the first error kept",
        before: "a:1^ b cm:1",
        now: "a:2! b cm:2^",
        expect: "Reloaded; tests: 3; serves: b:1 cm:2^; rejected: a",
        says: "unknown directive in a",
    },
    Case {
        what: "a ConfigMap's own lines: held back at once, the last good one stays",
        before: "a b c cm:1",
        now: "a b c cm:2!",
        expect: "Unchanged; tests: 1; serves: a:1 b:1 c:1 cm:1; rejected: cm (held)",
        says: "bad ConfigMap lines; not applied, the last good ConfigMap stays in use",
    },
    Case {
        what: "a ConfigMap change that fails even without any Ingress is held back",
        before: "a b cm:1",
        now: "a b cm:2?",
        expect: "Unchanged; tests: 2; serves: a:1 b:1 cm:1; rejected: cm (held)",
        says: "the ConfigMap breaks the http block",
    },
    Case {
        what: "two Ingresses failing after a ConfigMap change: the ConfigMap is held, \
               found with one more test",
        before: "a:1^ b:1^ c:1^ cm:1",
        now: "a:1^ b:1^ c:1^ cm:2^",
        expect: "Unchanged; tests: 3; serves: a:1^ b:1^ c:1^ cm:1; rejected: cm (held)",
        says: "this ConfigMap change broke the configuration of Ingress ns/a and \
               Ingress ns/b ([emerg] duplicate location in b)",
    },
    Case {
        what: "Ingresses broken on their own are not blamed on a harmless ConfigMap change",
        before: "a b c cm:1",
        now: "a:2! b:2! c cm:2",
        expect: "Reloaded; tests: 4; serves: a:1 b:1 c:1 cm:2; \
                 rejected: a (fallback), b (fallback)",
        says: "unknown directive in b",
    },
    Case {
        what: "a shared Secret that breaks several Ingresses rejects each of them",
        before: "a:1@s b:1@s c secret:s",
        now: "a:1@s b:1@s c secret:s!",
        expect: "Reloaded; tests: 3; serves: c:1; rejected: a, b",
        says: "Secret s breaks b",
    },
    Case {
        what: "a shared Secret breaking Ingresses as the ConfigMap changes: the old \
               ConfigMap does not fix them, so it is not held",
        before: "a:1@s b:1@s c secret:s cm:1",
        now: "a:1@s b:1@s c secret:s! cm:2",
        expect: "Reloaded; tests: 4; serves: c:1 cm:2; rejected: a, b",
        says: "Secret s breaks a",
    },
    Case {
        what: "at startup, an error naming an Ingress: a failed start, one failing \
               test, one passing",
        before: "",
        now: "good0 good1 good2 bad:1!",
        expect: "Started; tests: 2; serves: good0:1 good1:1 good2:1; rejected: bad",
        says: "unknown directive in bad",
    },
    Case {
        what: "at startup, errors naming no resource are bisected one after the other",
        before: "",
        now: "g0 g1 g2 g3 g4 g5 noline:1? wrongline:1?",
        expect: "Started; tests: 11; serves: g0:1 g1:1 g2:1 g3:1 g4:1 g5:1; \
                 rejected: noline, wrongline",
        says: "no usable line for wrongline",
    },
    Case {
        what: "at startup, a ConfigMap that fails even without Ingresses: the \
               defaults serve",
        before: "",
        now: "a b cm:1?",
        expect: "Started; tests: 3; serves: a:1 b:1; rejected: cm (held)",
        says: "the ConfigMap breaks the http block",
    },
    Case {
        what: "at startup, a ConfigMap whose own lines fail: the defaults serve",
        before: "",
        now: "a cm:1!",
        expect: "Started; tests: 2; serves: a:1; rejected: cm (held)",
        says: "bad ConfigMap lines",
    },
    Case {
        what: "every Ingress rejected: the base configuration serves",
        before: "",
        now: "one:1! two:1!",
        expect: "Started; tests: 3; serves: -; rejected: one, two",
        says: "unknown directive in two",
    },
    Case {
        what: "a shared configuration broken from outside (the ConfigMap did not \
               change): the base, the last good ConfigMap, the defaults, then one by one",
        before: "ing0 cm:1",
        now: "ing0 ing1 cm:1 outside:cm",
        expect: "Reloaded; tests: 7; serves: ing0:1 ing1:1; rejected: cm (held)",
        says: "extra.conf\" failed; not applied, the defaults are in use",
    },
    Case {
        what: "a change when even the defaults fail is an error",
        before: "a",
        now: "a b outside:all",
        expect: "Base error; tests: 3",
        says: "",
    },
];

#[tokio::test]
async fn the_search_over_a_fake_probe() {
    for case in CASES {
        check(case).await;
    }
}

/// Bisection over n Ingresses finds the one whose error names no resource in at
/// most ⌈log2 n⌉ + 1 tests: one without any Ingress, then one per halving.
#[tokio::test]
async fn bisection_takes_at_most_log2_n_plus_one_tests() {
    for n in [1usize, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 100] {
        let bound = n.next_power_of_two().trailing_zeros() as usize + 1;
        let names: Vec<String> = (0..n).map(|i| format!("i{i:03}")).collect();
        let before = names.join(" ");
        let all_served = names.iter().map(|n| format!("{n}:1")).collect::<Vec<_>>();
        for k in 0..n {
            let mut now = names.clone();
            now[k] = format!("{}:2?", names[k]);
            let (outcome, _) = run(&before, &now.join(" ")).await;
            // The test that failed, then bisection; the fallback is what NGINX
            // serves already.
            let (head, tail) = outcome
                .strip_prefix("Unchanged; tests: ")
                .and_then(|rest| rest.split_once(';'))
                .unwrap_or_else(|| panic!("n={n} k={k}: {outcome}"));
            let bisection = head.parse::<usize>().unwrap() - 1;
            assert!(
                bisection <= bound,
                "n={n} k={k}: {bisection} tests, more than {bound}"
            );
            let want = format!(
                " serves: {}; rejected: {} (fallback)",
                all_served.join(" "),
                names[k]
            );
            assert_eq!(tail, want, "n={n} k={k}");
        }
    }
}

/// The model task's model of the snapshot is served as it is when the pass excludes
/// nothing more than the model task knew: the reload path builds no model then.
#[tokio::test]
async fn the_model_task_s_model_serves_unless_the_pass_excludes_more() {
    let prebuilt = |snap: &Snapshot| {
        let served = Arc::new(Exclusions::default().apply(snap, &BTreeSet::new()));
        let model = Arc::new(ferrule_model::build(&served));
        Prebuilt { served, model }
    };
    let (snap, _) = world("a b");
    let given = prebuilt(&snap);
    let (mut fake, mut excl) = (Fake::new(), Exclusions::default());
    let served = apply(&mut fake, &snap, Some(given.clone()), &mut excl)
        .await
        .unwrap();
    assert_eq!(served.builds, 0);
    assert!(Arc::ptr_eq(&served.written.model, &given.model));

    // c is new and broken: the configuration without it is a model of its own.
    let (snap, _) = world("a b c:!");
    let given = prebuilt(&snap);
    let served = apply(&mut fake, &snap, Some(given.clone()), &mut excl)
        .await
        .unwrap();
    assert_eq!(fake.render(&served.snapshot).text, "a:1 b:1");
    assert_eq!(served.builds, 1);
    assert!(!Arc::ptr_eq(&served.written.model, &given.model));
    assert_eq!(
        *served.written.model,
        ferrule_model::build(&served.snapshot),
        "built from what is served"
    );
}
