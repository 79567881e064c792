//! `status.loadBalancer` of the Ingresses Ferrule serves.

use std::collections::BTreeMap;
use std::sync::Arc;

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

/// Writes `want` into the status of every Ingress in `owned` whose status differs.
/// Returns how many were patched. `owned` holds each Ingress as last seen.
pub async fn write(
    client: &Client,
    owned: &BTreeMap<(String, String), Arc<Ingress>>,
    want: &[IngressLoadBalancerIngress],
) -> usize {
    let stale: Vec<(String, String)> = owned
        .iter()
        .filter(|(_, ing)| {
            let have = ing
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_deref())
                .unwrap_or_default();
            have != want
        })
        .map(|(k, _)| k.clone())
        .collect();
    let patch = json!({"status": {"loadBalancer": {"ingress": want}}});
    futures::stream::iter(stale)
        .map(|(ns, name)| patch_one(client.clone(), ns, name, patch.clone()))
        .buffer_unordered(CONCURRENT_WRITES)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await
}

async fn patch_one(client: Client, ns: String, name: String, patch: serde_json::Value) -> bool {
    let api = Api::<Ingress>::namespaced(client, &ns);
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(namespace = %ns, name = %name, error = %e, "writing Ingress status failed");
            false
        }
    }
}
