//! Config safety bookkeeping: which resources are excluded from the configuration
//! because NGINX rejected what they produced, and whether the controller ConfigMap
//! is held back because it broke shared configuration.
//!
//! An exclusion is keyed by a fingerprint of what the user wrote (spec, annotations,
//! labels): when the resource changes, it is tried again; status writes do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ferrule_model::{ResourceRef, Snapshot};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;

/// An excluded resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    /// Fingerprint of the resource when it was excluded.
    pub fingerprint: String,
    /// The NGINX error, as reported on the resource.
    pub message: String,
}

/// A ConfigMap version that was rejected, and the one still in use.
#[derive(Debug, Clone)]
pub struct HeldConfigMap {
    /// Fingerprint of the rejected version.
    pub rejected: String,
    /// Why.
    pub message: String,
    /// The last good version (None: defaults).
    pub last_good: Option<Arc<ConfigMap>>,
}

/// Resources currently excluded by config safety.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    /// Excluded Ingresses.
    pub ingresses: BTreeMap<ResourceRef, Excluded>,
    /// The held-back ConfigMap, if any.
    pub configmap: Option<HeldConfigMap>,
}

impl Exclusions {
    /// Drops exclusions whose resource changed or disappeared, so they are retried.
    pub fn refresh(&mut self, snap: &Snapshot) {
        let current: BTreeMap<ResourceRef, String> = snap
            .ingresses
            .iter()
            .map(|i| (ingress_ref(i), ingress_fingerprint(i)))
            .collect();
        self.ingresses
            .retain(|r, e| current.get(r) == Some(&e.fingerprint));
        let cm_fp = snap.config_map.as_deref().map(configmap_fingerprint);
        if self
            .configmap
            .as_ref()
            .is_some_and(|h| Some(&h.rejected) != cm_fp.as_ref())
        {
            self.configmap = None;
        }
    }

    /// Excludes `r` (an Ingress of `snap`) with `message`.
    pub fn exclude(&mut self, snap: &Snapshot, r: &ResourceRef, message: &str) {
        if let Some(ing) = snap.ingresses.iter().find(|i| &ingress_ref(i) == r) {
            let excluded = Excluded {
                fingerprint: ingress_fingerprint(ing),
                message: message.to_owned(),
            };
            self.ingresses.insert(r.clone(), excluded);
        }
    }

    /// Holds back the snapshot's ConfigMap, keeping `last_good` in use.
    pub fn hold_configmap(
        &mut self,
        snap: &Snapshot,
        last_good: Option<Arc<ConfigMap>>,
        message: &str,
    ) {
        if let Some(cm) = snap.config_map.as_deref() {
            self.configmap = Some(HeldConfigMap {
                rejected: configmap_fingerprint(cm),
                message: message.to_owned(),
                last_good,
            });
        }
    }

    /// The snapshot without excluded resources (and with the last good ConfigMap when
    /// the current one is held back), plus `extra` Ingresses switched off.
    pub fn apply(&self, snap: &Snapshot, extra: &BTreeSet<ResourceRef>) -> Snapshot {
        let mut out = snap.clone();
        out.ingresses.retain(|i| {
            let r = ingress_ref(i);
            !self.ingresses.contains_key(&r) && !extra.contains(&r)
        });
        if let Some(held) = &self.configmap {
            out.config_map = held.last_good.clone();
        }
        out
    }

    /// Whether anything is excluded.
    pub fn is_empty(&self) -> bool {
        self.ingresses.is_empty() && self.configmap.is_none()
    }
}

/// The model's reference to an Ingress.
pub fn ingress_ref(i: &Ingress) -> ResourceRef {
    ResourceRef::new(
        "Ingress",
        i.metadata.namespace.as_deref().unwrap_or_default(),
        i.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// What the user wrote: spec, annotations and labels (not status or resourceVersion).
pub fn ingress_fingerprint(i: &Ingress) -> String {
    ferrule_model::content_hash(&(&i.spec, &i.metadata.annotations, &i.metadata.labels))
}

/// The ConfigMap's data.
pub fn configmap_fingerprint(cm: &ConfigMap) -> String {
    ferrule_model::content_hash(&cm.data)
}
