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

/// Publishes events for resource states, remembering what it said.
pub struct Events {
    recorder: Recorder,
    sent: HashMap<(String, String, String, String), Instant>,
    /// Resources (kind, namespace, name) an event was published for, and whether
    /// the last one was a Warning: a lookup, not a scan of `sent`, which at 10k
    /// resources made every round quadratic.
    reported: HashMap<(String, String, String), bool>,
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
            sent: HashMap::new(),
            reported: HashMap::new(),
        }
    }

    /// Publishes what changed since the last call. `uid` finds an object's uid.
    pub async fn publish(
        &mut self,
        statuses: &[ResourceStatus],
        uid: impl Fn(&ResourceStatus) -> Option<String>,
    ) {
        let mut budget = MAX_PER_ROUND;
        // Forget what can be said again and resources that are gone.
        self.sent.retain(|_, t| t.elapsed() < REPEAT_AFTER);
        let present: HashSet<(&str, &str, &str)> = statuses
            .iter()
            .map(|s| (s.kind.as_str(), s.namespace.as_str(), s.name.as_str()))
            .collect();
        self.reported
            .retain(|(k, ns, n), _| present.contains(&(k.as_str(), ns.as_str(), n.as_str())));
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
            let key = (
                s.kind.clone(),
                s.namespace.clone(),
                s.name.clone(),
                format!("{reason}:{note}"),
            );
            if self
                .sent
                .get(&key)
                .is_some_and(|t| t.elapsed() < REPEAT_AFTER)
            {
                continue;
            }
            let resource = (key.0.clone(), key.1.clone(), key.2.clone());
            if type_ == EventType::Normal && self.reported.get(&resource) == Some(&false) {
                continue; // once, and again only after a Warning
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
            note.truncate(1000);
            let ev = Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: "Sync".to_owned(),
                secondary: None,
            };
            match self.recorder.publish(&ev, &reference).await {
                Ok(()) => {
                    let warned = type_ == EventType::Warning;
                    // A change of side is news, however soon it comes: a recovery
                    // after a Warning, the same Warning again after a recovery.
                    let (k, ns, n) = &resource;
                    self.sent.retain(|(k2, ns2, n2, said), _| {
                        (k2, ns2, n2) != (k, ns, n) || said.starts_with("Applied:") != warned
                    });
                    self.sent.insert(key, Instant::now());
                    self.reported.insert(resource, warned);
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
