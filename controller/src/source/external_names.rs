//! The names of ExternalName Services, resolved: a stage between a source and the
//! model. Each snapshot goes on at once with the addresses known so far
//! (`Snapshot::external_names`); the names are looked up beside it (the system's
//! resolver: `/etc/hosts`, then DNS), new ones at once and all of them again every
//! `every`, and a snapshot goes on again when an answer changes. The model stays
//! pure, and the balancer gets the addresses like any endpoints: no reload when
//! they change.
//!
//! Without ExternalName Services (the usual case) a snapshot goes on untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrule_model::Snapshot;
use tokio::sync::{mpsc, watch};

type Addresses = BTreeMap<String, Vec<IpAddr>>;

/// How long one lookup may take; a name that does not answer keeps what it had.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The addresses of `name`, sorted (`None`: no answer).
async fn lookup(name: String) -> (String, Option<Vec<IpAddr>>) {
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name.as_str(), 0)))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|addrs| {
            let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            ips.sort();
            ips.dedup();
            ips
        });
    if found.is_none() {
        tracing::warn!(name = %name, "ExternalName: no answer for the name; keeping what it had");
    }
    (name, found)
}

/// Passes the snapshots of `input` to `output`, with the ExternalName Services'
/// addresses, until `input` closes.
pub async fn run(
    mut input: watch::Receiver<Option<Arc<Snapshot>>>,
    output: watch::Sender<Option<Arc<Snapshot>>>,
    every: Duration,
) {
    let (answers_tx, mut answers) = mpsc::unbounded_channel();
    let mut known: Addresses = BTreeMap::new();
    let mut current: Option<Arc<Snapshot>> = None;
    let mut published: Arc<Addresses> = Arc::default();
    // The input last passed on: a refresh that changes nothing passes nothing.
    let mut last_input: Option<Arc<Snapshot>> = None;
    let mut refresh = tokio::time::interval(every);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The current snapshot's names, found once per snapshot.
    let mut names: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut refresh_all = false;
        tokio::select! {
            r = input.changed() => {
                if r.is_err() {
                    return;
                }
                current = input.borrow_and_update().clone();
                names = current
                    .as_deref()
                    .map(Snapshot::external_service_names)
                    .unwrap_or_default();
                known.retain(|n, _| names.contains(n));
            }
            _ = refresh.tick() => refresh_all = true,
            Some((name, found)) = answers.recv() => {
                if let (Some(ips), true) = (found, names.contains(&name)) {
                    known.insert(name, ips);
                }
            }
        }
        // New names at once, all of them at each refresh.
        let wanted: Vec<String> = (names.iter())
            .filter(|n| refresh_all || !known.contains_key(*n))
            .cloned()
            .collect();
        for name in wanted {
            // Not looked up again before the answer comes: an empty entry.
            known.entry(name.clone()).or_default();
            let tx = answers_tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(lookup(name).await);
            });
        }
        let Some(snap) = &current else { continue };
        let addresses: Addresses = known
            .iter()
            .filter(|(_, ips)| !ips.is_empty())
            .map(|(n, ips)| (n.clone(), ips.clone()))
            .collect();
        let addresses_changed = *published != addresses;
        if addresses_changed {
            published = Arc::new(addresses);
        }
        let input_changed = !last_input.as_ref().is_some_and(|l| Arc::ptr_eq(l, snap));
        if !input_changed && !addresses_changed {
            continue;
        }
        last_input = Some(snap.clone());
        let next = match names.is_empty() && snap.external_names.is_empty() {
            true => snap.clone(),
            false => Arc::new(Snapshot {
                external_names: published.clone(),
                ..(**snap).clone()
            }),
        };
        output.send_replace(Some(next));
    }
}
