//! `status.loadBalancer` of the Ingresses Ferrule serves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerIngress};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

/// Where the published address comes from.
#[derive(Debug, Clone)]
pub enum Publish {
    /// `--publish-service NAMESPACE/NAME`: its load-balancer ingress, else its ClusterIP.
    Service(String, String),
    /// `--publish-status-address ADDR[,ADDR]`.
    Addresses(Vec<String>),
}

/// The addresses to publish right now.
pub async fn addresses(
    client: &Client,
    publish: &Publish,
) -> anyhow::Result<Vec<IngressLoadBalancerIngress>> {
    match publish {
        Publish::Addresses(a) => Ok(a.iter().map(|s| entry(s)).collect()),
        Publish::Service(ns, name) => {
            let svc = Api::<Service>::namespaced(client.clone(), ns)
                .get(name)
                .await?;
            let lb: Vec<IngressLoadBalancerIngress> = svc
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|lb| lb.ingress)
                .unwrap_or_default()
                .into_iter()
                .map(|i| IngressLoadBalancerIngress {
                    ip: i.ip,
                    hostname: i.hostname,
                    ..Default::default()
                })
                .collect();
            if !lb.is_empty() {
                return Ok(lb);
            }
            let ips = svc
                .spec
                .and_then(|s| s.cluster_ips.or(s.cluster_ip.map(|i| vec![i])))
                .unwrap_or_default();
            Ok(ips
                .iter()
                .filter(|i| *i != "None")
                .map(|s| entry(s))
                .collect())
        }
    }
}

fn entry(addr: &str) -> IngressLoadBalancerIngress {
    if addr.parse::<std::net::IpAddr>().is_ok() {
        IngressLoadBalancerIngress {
            ip: Some(addr.to_owned()),
            ..Default::default()
        }
    } else {
        IngressLoadBalancerIngress {
            hostname: Some(addr.to_owned()),
            ..Default::default()
        }
    }
}

/// How many status PATCHes are in flight at once: at 10k Ingresses serial writes
/// (one round trip each) took minutes; unbounded ones would flood the API server.
const CONCURRENT_WRITES: usize = 32;

/// What the status writer remembers between passes.
#[derive(Default)]
pub struct Writes {
    /// Ingresses that showed our address while ours: when one stops being ours
    /// (another class, the default class changed) its address is taken back, and
    /// only then (another controller may publish the same address on its own).
    written: HashSet<(String, String)>,
    /// Ingresses whose last write failed: when to try again and the delay after that
    /// (a missing RBAC rule on 10k Ingresses must not become 2,000 requests a second).
    failing: HashMap<(String, String), (Instant, Duration)>,
}

const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Writes `want` into the status of every Ingress in `owned` whose status differs,
/// and clears it on the Ingresses of `all` this process wrote that are no longer
/// owned. Returns how many were patched. `owned` holds each Ingress as last seen.
pub async fn write(
    client: &Client,
    owned: &BTreeMap<(String, String), Arc<Ingress>>,
    all: &BTreeMap<(String, String), Arc<Ingress>>,
    want: &[IngressLoadBalancerIngress],
    state: &mut Writes,
) -> usize {
    let now = Instant::now();
    let shows_ours = |ing: &Ingress| -> bool {
        let addrs = ing
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_deref())
            .unwrap_or_default();
        addrs == want
    };
    // (Ingress, whether to take our address back rather than write it)
    let mut todo: Vec<((String, String), bool)> = Vec::new();
    state.written.retain(|k| all.contains_key(k));
    for (k, ing) in owned {
        if shows_ours(ing) {
            // shown before a restart or by the previous leader: ours to take back too
            if !state.written.contains(k) {
                state.written.insert(k.clone());
            }
        } else {
            todo.push((k.clone(), false));
        }
    }
    // still our address: a new owner may have written its own already
    todo.extend(
        all.iter()
            .filter(|(k, ing)| {
                !owned.contains_key(*k) && state.written.contains(*k) && shows_ours(ing)
            })
            .map(|(k, _)| (k.clone(), true)),
    );
    state.failing.retain(|k, _| all.contains_key(k));
    todo.retain(|(k, _)| state.failing.get(k).is_none_or(|(at, _)| *at <= now));
    let set = json!({"status": {"loadBalancer": {"ingress": want}}});
    let clear = json!({"status": {"loadBalancer": {"ingress": []}}});
    let results: Vec<((String, String), bool, Option<String>)> = futures::stream::iter(todo)
        .map(|(k, cleared)| {
            let client = client.clone();
            let patch = if cleared { clear.clone() } else { set.clone() };
            async move {
                let r = patch_one(client, k.0.clone(), k.1.clone(), patch).await;
                (k, cleared, r.err())
            }
        })
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    let mut done = 0;
    let mut failed = 0;
    for (k, cleared, err) in results {
        match err {
            None => {
                done += 1;
                state.failing.remove(&k);
                if cleared {
                    state.written.remove(&k);
                } else {
                    state.written.insert(k);
                }
            }
            Some(e) => {
                failed += 1;
                let delay = match state.failing.get(&k) {
                    Some((_, d)) => (*d * 2).min(RETRY_MAX),
                    None => {
                        tracing::warn!(namespace = %k.0, name = %k.1, error = %e, "writing Ingress status failed; retrying with backoff");
                        RETRY_FIRST
                    }
                };
                state.failing.insert(k, (now + delay, delay));
            }
        }
    }
    if failed > 0 {
        tracing::debug!(failed, "Ingress status writes failed this pass");
    }
    done
}

async fn patch_one(
    client: Client,
    ns: String,
    name: String,
    patch: serde_json::Value,
) -> Result<(), String> {
    Api::<Ingress>::namespaced(client, &ns)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
