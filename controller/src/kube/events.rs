//! Kubernetes events about resources: a Warning per problem, a Normal on the first
//! successful apply and when a resource recovers from a Warning. Rate-limited per
//! resource and message, so a flapping resource cannot storm the API server.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::status::{ResourceState, ResourceStatus};

/// How often the same event may be repeated for the same resource.
const REPEAT_AFTER: Duration = Duration::from_secs(600);
/// The note of the Normal event of an applied resource.
const APPLIED_NOTE: &str = "configuration applied";
/// At most this many events per publishing round (the rest waits for the next round).
const MAX_PER_ROUND: usize = 50;

/// What was told about one resource.
#[derive(Default)]
struct Told {
    /// The last event was a Warning.
    warned: bool,
    /// Each `reason:note` published, and when (said again after REPEAT_AFTER).
    notes: HashMap<String, Instant>,
}

/// Publishes events for resource states, remembering what it said.
pub struct Events {
    recorder: Recorder,
    /// By resource (kind, namespace, name): a lookup per status, never a scan.
    told: HashMap<(String, String, String), Told>,
}

impl Events {
    /// A publisher reporting as `instance` of the Ferrule controller.
    pub fn new(client: Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: "ferrule".to_owned(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            told: HashMap::new(),
        }
    }

    /// Publishes what changed since the last call. `uid` finds an object's uid.
    pub async fn publish(
        &mut self,
        statuses: &[ResourceStatus],
        uid: impl Fn(&ResourceStatus) -> Option<String>,
    ) {
        let mut budget = MAX_PER_ROUND;
        // Forget resources that are gone and what can be said again.
        let present: HashSet<(&str, &str, &str)> = statuses
            .iter()
            .map(|s| (s.kind.as_str(), s.namespace.as_str(), s.name.as_str()))
            .collect();
        self.told.retain(|(k, ns, n), told| {
            told.notes.retain(|_, t| t.elapsed() < REPEAT_AFTER);
            present.contains(&(k.as_str(), ns.as_str(), n.as_str()))
        });
        // Problems first: at 10k new resources the budget would otherwise spend
        // minutes on "configuration applied" before a rejection is told.
        let problems_first = statuses
            .iter()
            .filter(|s| !s.message.is_empty())
            .chain(statuses.iter().filter(|s| s.message.is_empty()));
        for s in problems_first {
            let (type_, reason, note) = match (s.state, s.message.is_empty()) {
                (ResourceState::Rejected, _) => (EventType::Warning, "Rejected", s.message.clone()),
                (ResourceState::Applied, false) => {
                    (EventType::Warning, "Problem", s.message.clone())
                }
                (ResourceState::Applied, true) => {
                    (EventType::Normal, "Applied", APPLIED_NOTE.to_owned())
                }
            };
            let warned = type_ == EventType::Warning;
            let said = format!("{reason}:{note}");
            let resource = (s.kind.clone(), s.namespace.clone(), s.name.clone());
            if let Some(told) = self.told.get(&resource) {
                // said lately; or applied, told once and again only after a Warning
                if told.notes.contains_key(&said) || (!warned && !told.warned) {
                    continue;
                }
            }
            if budget == 0 {
                break;
            }
            budget -= 1;
            let reference = ObjectReference {
                api_version: Some(api_version(&s.kind).to_owned()),
                kind: Some(s.kind.clone()),
                namespace: Some(s.namespace.clone()).filter(|n| !n.is_empty()),
                name: Some(s.name.clone()),
                uid: uid(s),
                ..Default::default()
            };
            let mut note = note;
            // on a character boundary: a message may quote any text
            let cut = (0..=note.len().min(1000))
                .rev()
                .find(|&i| note.is_char_boundary(i))
                .unwrap_or(0);
            note.truncate(cut);
            let ev = Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: "Sync".to_owned(),
                secondary: None,
            };
            match self.recorder.publish(&ev, &reference).await {
                Ok(()) => {
                    let told = self.told.entry(resource).or_default();
                    // A change of side is news, however soon it comes: a recovery
                    // after a Warning, the same Warning again after a recovery.
                    if told.warned != warned {
                        told.notes.clear();
                    }
                    told.warned = warned;
                    told.notes.insert(said, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, kind = %s.kind, name = %s.name, "publishing an event failed")
                }
            }
        }
    }
}

fn api_version(kind: &str) -> &'static str {
    match kind {
        "Ingress" | "IngressClass" => "networking.k8s.io/v1",
        _ => "v1",
    }
}
