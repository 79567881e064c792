//! The last good version of each input: what keeps serving when a new version of
//! an Ingress, the controller ConfigMap or a TLS Secret cannot be.
//!
//! One value, kept by the controller between builds and handed to
//! [`crate::build_with`]: the snapshot holds what the cluster says now, this holds
//! what served before. The model reads the certificates; the controller's config
//! safety reads the Ingresses and the ConfigMap when it serves an excluded
//! resource's last accepted version.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;

use crate::model::{Certificate, ResourceRef};

/// The last good versions (see the module docs). Empty at start: nothing has
/// served yet, so nothing falls back.
#[derive(Debug, Clone, Default)]
pub struct Fallbacks {
    /// Every Ingress as it was in the last configuration NGINX accepted: an edit
    /// NGINX rejects serves this version instead (shared: cloned on every sync).
    pub ingresses: Arc<BTreeMap<ResourceRef, Arc<Ingress>>>,
    /// The controller ConfigMap of the configuration NGINX serves (`None`: none,
    /// the defaults): served while a newer one is held back.
    pub config_map: Option<Arc<ConfigMap>>,
    /// The certificates of the newest model, by `namespace/name` of their Secret: a
    /// Secret whose new version is not valid (a key of another certificate, a
    /// broken chain, expired) keeps serving its last valid one while that has not
    /// expired.
    pub certificates: Arc<BTreeMap<String, Certificate>>,
}
