//! Sources turn the outside world into snapshots: a manifests directory (standalone
//! mode) or the Kubernetes API (watchers); `external_names` adds what ExternalName
//! Services' names resolve to, between either source and the model.

pub mod external_names;
mod header_lists;
pub mod kube;
pub mod manifests;
