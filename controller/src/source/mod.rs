//! Sources turn the outside world into snapshots: a manifests directory (standalone
//! mode) or the Kubernetes API (watchers).

pub mod kube;
pub mod manifests;
