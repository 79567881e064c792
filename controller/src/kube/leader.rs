//! Leader election on a `coordination.k8s.io` Lease. Every replica serves traffic;
//! only the holder writes status and events.

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name, or host name and pid).
    pub identity: String,
    /// Lease duration in seconds: how long a dead holder keeps the lease.
    pub duration: u64,
    /// Grace period in seconds for renewals.
    pub grace: u64,
}

/// Starts leader election; the receiver says whether this replica holds the lease.
pub async fn elect(client: Client, opts: LeaseOptions) -> anyhow::Result<watch::Receiver<bool>> {
    let manager = LeaseManagerBuilder::new(client, &opts.name)
        .with_namespace(&opts.namespace)
        .with_identity(&opts.identity)
        .with_duration(opts.duration)
        .with_grace(opts.grace)
        .with_field_manager("ferrule")
        .build()
        .await
        .map_err(|e| {
            // The lease manager's errors can display as nothing: say what failed.
            anyhow::anyhow!(
                "cannot create or read Lease {}/{} ({e:?}); does the namespace exist, and may \
                 this service account get, create and update leases.coordination.k8s.io there?",
                opts.namespace,
                opts.name
            )
        })?;
    let (rx, handle) = manager.watch().await;
    // Keep the manager task alive for the life of the process (dropping the handle
    // does not stop it; the receiver does when it is dropped).
    drop(handle);
    Ok(rx)
}
