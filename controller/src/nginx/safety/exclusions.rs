//! Config safety bookkeeping: which resources are excluded from the configuration
//! because NGINX rejected what they produced, and whether the controller ConfigMap
//! is held back because it broke shared configuration.
//!
//! An exclusion is keyed by a fingerprint of what the user wrote (spec, annotations,
//! labels): when the resource changes, it is tried again; status writes do not count.
//! A new ConfigMap retries every exclusion, since shared configuration can break or
//! fix any resource.
//!
//! When a resource that was served is edited into something NGINX rejects, its last
//! accepted version keeps serving (the "fallback") instead of being dropped: an edit
//! must never take down a route that worked. The last accepted versions live in one
//! [`Fallbacks`] value, which the model reads too (the last valid certificates).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ferrule_model::{Fallbacks, ResourceRef, Snapshot};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;

/// An excluded resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    /// Fingerprint of the resource when it was excluded.
    pub fingerprint: String,
    /// The NGINX error, as reported on the resource.
    pub message: String,
    /// The last version NGINX accepted is served instead of this one.
    pub fallback: bool,
}

/// A ConfigMap version that was rejected, and what serves instead.
#[derive(Debug, Clone)]
pub struct HeldConfigMap {
    /// Fingerprint of the rejected version.
    pub rejected: String,
    /// Why.
    pub message: String,
    /// The defaults serve, not the last good ConfigMap (when that failed too).
    pub defaults: bool,
}

/// Resources currently excluded by config safety.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    /// Excluded Ingresses.
    pub ingresses: BTreeMap<ResourceRef, Excluded>,
    /// The held-back ConfigMap, if any.
    pub configmap: Option<HeldConfigMap>,
    /// Fingerprint of the ConfigMap the Ingress exclusions were found with.
    configmap_seen: Option<String>,
    /// What served last: the Ingresses and the ConfigMap of the configuration NGINX
    /// accepted ([`Self::remember`]), the certificates of the newest model (set by
    /// the sync tasks).
    pub fallbacks: Fallbacks,
}

impl Exclusions {
    /// Drops exclusions whose resource changed or disappeared, so they are retried
    /// (or vanish from the status), and all of them when the ConfigMap changed.
    pub fn refresh(&mut self, snap: &Snapshot) {
        let cm_fp = snap.config_map.as_deref().map(configmap_fingerprint);
        if cm_fp != self.configmap_seen {
            self.ingresses.clear();
            self.configmap_seen = cm_fp.clone();
        }
        if self
            .configmap
            .as_ref()
            .is_some_and(|h| Some(&h.rejected) != cm_fp.as_ref())
        {
            self.configmap = None;
        }
        if self.ingresses.is_empty() {
            return;
        }
        // Only the excluded Ingresses are fingerprinted: this runs on every sync.
        let by_ref: BTreeMap<ResourceRef, &Ingress> = snap
            .ingresses
            .iter()
            .map(|i| (ingress_ref(i), i.as_ref()))
            .collect();
        self.ingresses.retain(|r, e| {
            by_ref
                .get(r)
                .is_some_and(|i| ingress_fingerprint(i) == e.fingerprint)
        });
    }

    /// Excludes `r` (an Ingress of `snap`) with `message`. Returns whether its last
    /// accepted version is served instead.
    ///
    /// The fallback is used once: when `r` is already excluded in its current version,
    /// its fallback is what just failed, and `r` is dropped altogether.
    pub fn exclude(&mut self, snap: &Snapshot, r: &ResourceRef, message: &str) -> bool {
        let Some(ing) = snap.ingresses.iter().find(|i| &ingress_ref(i) == r) else {
            return false;
        };
        let fingerprint = ingress_fingerprint(ing);
        if let Some(e) = self.ingresses.get_mut(r)
            && e.fingerprint == fingerprint
        {
            e.fallback = false;
            return false;
        }
        let fallback = (self.fallbacks.ingresses)
            .get(r)
            .is_some_and(|old| ingress_fingerprint(old) != fingerprint);
        let excluded = Excluded {
            fingerprint,
            message: message.to_owned(),
            fallback,
        };
        self.ingresses.insert(r.clone(), excluded);
        fallback
    }

    /// Holds back the snapshot's ConfigMap: the last good one serves instead, or the
    /// `defaults`.
    pub fn hold_configmap(&mut self, snap: &Snapshot, defaults: bool, message: &str) {
        if let Some(cm) = snap.config_map.as_deref() {
            self.configmap = Some(HeldConfigMap {
                rejected: configmap_fingerprint(cm),
                message: message.to_owned(),
                defaults,
            });
        }
    }

    /// The ConfigMap that serves while the snapshot's is held back.
    pub fn held_configmap_stand_in(&self) -> Option<Arc<ConfigMap>> {
        match &self.configmap {
            Some(h) if h.defaults => None,
            _ => self.fallbacks.config_map.clone(),
        }
    }

    /// Records what NGINX now serves (`served` is a snapshot made by [`Self::apply`]),
    /// as the fallback of resources edited into something NGINX rejects.
    pub fn remember(&mut self, served: &Snapshot) {
        self.fallbacks.ingresses = Arc::new(
            served
                .ingresses
                .iter()
                .map(|i| (ingress_ref(i), i.clone()))
                .collect(),
        );
        self.fallbacks.config_map = served.config_map.clone();
    }

    /// The snapshot without excluded resources (their last accepted version where
    /// they have a fallback), with the last good ConfigMap when the current one is
    /// held back, and with `extra` Ingresses switched off.
    pub fn apply(&self, snap: &Snapshot, extra: &BTreeSet<ResourceRef>) -> Snapshot {
        let mut out = snap.clone();
        if self.configmap.is_some() {
            out.config_map = self.held_configmap_stand_in();
        }
        if self.ingresses.is_empty() && extra.is_empty() {
            return out;
        }
        out.ingresses = snap
            .ingresses
            .iter()
            .filter_map(|i| {
                let r = ingress_ref(i);
                if extra.contains(&r) {
                    return None;
                }
                match self.ingresses.get(&r) {
                    None => Some(i.clone()),
                    Some(e) if e.fallback => self.fallbacks.ingresses.get(&r).cloned(),
                    Some(_) => None,
                }
            })
            .collect();
        out
    }

    /// Whether anything is excluded.
    pub fn is_empty(&self) -> bool {
        self.ingresses.is_empty() && self.configmap.is_none()
    }

    /// Whether none of `owned` is served in any version (readiness: a controller that
    /// serves none of its resources is not Ready). False when `owned` is empty.
    pub fn serves_none_of(&self, owned: &[ResourceRef]) -> bool {
        !owned.is_empty()
            && owned
                .iter()
                .all(|r| self.ingresses.get(r).is_some_and(|e| !e.fallback))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ing(name: &str, snippet: &str, resource_version: &str) -> Arc<Ingress> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "namespace": "ns", "name": name, "resourceVersion": resource_version,
                    "annotations": { "nginx.ingress.kubernetes.io/configuration-snippet": snippet },
                },
                "spec": { "rules": [{ "host": format!("{name}.test") }] },
            }))
            .unwrap(),
        )
    }

    fn cm(data: &str, resource_version: &str) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "namespace": "ns", "name": "cm", "resourceVersion": resource_version },
                "data": { "location-snippet": data },
            }))
            .unwrap(),
        )
    }

    fn snap(ingresses: &[&Arc<Ingress>], config_map: Option<&Arc<ConfigMap>>) -> Snapshot {
        Snapshot {
            ingresses: ingresses.iter().map(|i| (*i).clone()).collect(),
            config_map: config_map.cloned(),
            ..Default::default()
        }
    }

    fn r(name: &str) -> ResourceRef {
        ResourceRef::new("Ingress", "ns", name)
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.ingresses
            .iter()
            .map(|i| i.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn fingerprint_ignores_status_and_resource_version() {
        let a = ing("a", "bogus;", "1");
        let mut b = (*ing("a", "bogus;", "2")).clone();
        b.status = Some(
            serde_json::from_value(serde_json::json!({
                "loadBalancer": { "ingress": [{ "ip": "10.0.0.1" }] }
            }))
            .unwrap(),
        );
        b.metadata.managed_fields = Some(Vec::new());
        assert_eq!(ingress_fingerprint(&a), ingress_fingerprint(&b));
        assert_ne!(
            ingress_fingerprint(&a),
            ingress_fingerprint(&ing("a", "fixed;", "1"))
        );
        assert_eq!(
            configmap_fingerprint(&cm("x;", "1")),
            configmap_fingerprint(&cm("x;", "9"))
        );
    }

    #[test]
    fn an_edited_or_deleted_resource_is_retried_a_status_write_is_not() {
        let (a, b) = (ing("a", "bogus;", "1"), ing("b", "ok;", "1"));
        let mut excl = Exclusions::default();
        let s = snap(&[&a, &b], None);
        excl.refresh(&s);
        assert!(
            !excl.exclude(&s, &r("a"), "unknown directive"),
            "no fallback yet"
        );
        assert_eq!(names(&excl.apply(&s, &BTreeSet::new())), ["b"]);

        // Only resourceVersion (a status write) changed: still excluded.
        let a2 = ing("a", "bogus;", "2");
        let s2 = snap(&[&a2, &b], None);
        excl.refresh(&s2);
        assert!(excl.ingresses.contains_key(&r("a")));

        // The user edited it: tried again.
        let a3 = ing("a", "fixed;", "3");
        let s3 = snap(&[&a3, &b], None);
        excl.refresh(&s3);
        assert!(excl.is_empty());
        assert_eq!(names(&excl.apply(&s3, &BTreeSet::new())), ["a", "b"]);

        // Deleted: the exclusion (and so its status entry) disappears.
        excl.exclude(&s3, &r("a"), "again");
        excl.refresh(&snap(&[&b], None));
        assert!(excl.is_empty());
    }

    #[test]
    fn a_new_configmap_retries_every_exclusion_and_releases_the_hold() {
        let a = ing("a", "x;", "1");
        let (bad, good) = (cm("bogus;", "1"), cm("ok;", "2"));
        let mut excl = Exclusions::default();
        let s = snap(&[&a], Some(&bad));
        excl.refresh(&s);
        excl.exclude(&s, &r("a"), "e");
        excl.remember(&snap(&[&a], Some(&good)));
        excl.hold_configmap(&s, false, "held");
        let served = excl.apply(&s, &BTreeSet::new());
        assert_eq!(served.config_map.as_deref(), Some(good.as_ref()));

        // Same data, new resourceVersion: nothing changes.
        let s_meta = snap(&[&a], Some(&cm("bogus;", "7")));
        excl.refresh(&s_meta);
        assert!(excl.configmap.is_some() && excl.ingresses.contains_key(&r("a")));

        let fixed = cm("fixed;", "8");
        excl.refresh(&snap(&[&a], Some(&fixed)));
        assert!(excl.is_empty(), "{excl:?}");
    }

    #[test]
    fn a_broken_edit_keeps_the_last_accepted_version_once() {
        let (a1, b) = (ing("a", "ok;", "1"), ing("b", "ok;", "1"));
        let mut excl = Exclusions::default();
        let s1 = snap(&[&a1, &b], None);
        excl.refresh(&s1);
        excl.remember(&excl.apply(&s1, &BTreeSet::new()));

        let a2 = ing("a", "bogus;", "2");
        let s2 = snap(&[&a2, &b], None);
        excl.refresh(&s2);
        assert!(excl.exclude(&s2, &r("a"), "unknown directive"));
        let served = excl.apply(&s2, &BTreeSet::new());
        assert_eq!(served.ingresses[0], a1, "the last accepted version serves");
        assert!(!excl.serves_none_of(&[r("a")]));
        // Switched off on request (bisection), fallback or not.
        assert_eq!(
            names(&excl.apply(&s2, &[r("a")].into_iter().collect())),
            ["b"]
        );
        // What NGINX accepted in this state still has the old version as fallback.
        excl.remember(&served);

        // The fallback failed too: dropped, with the original message kept.
        assert!(!excl.exclude(&s2, &r("a"), "other"));
        assert_eq!(names(&excl.apply(&s2, &BTreeSet::new())), ["b"]);
        assert_eq!(excl.ingresses[&r("a")].message, "unknown directive");
        assert!(excl.serves_none_of(&[r("a")]));
        assert!(!excl.serves_none_of(&[r("a"), r("b")]));
        assert!(!excl.serves_none_of(&[]), "nothing owned: nothing to serve");
    }

    #[test]
    fn a_version_that_was_accepted_before_gets_no_fallback_to_itself() {
        let a = ing("a", "ok;", "1");
        let mut excl = Exclusions::default();
        let s = snap(&[&a], None);
        excl.refresh(&s);
        excl.remember(&s);
        // The same version fails now (e.g. because of a new ConfigMap): no fallback.
        assert!(!excl.exclude(&s, &r("a"), "e"));
        assert!(excl.apply(&s, &BTreeSet::new()).ingresses.is_empty());
    }
}
