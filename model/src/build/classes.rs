//! Which Ingresses are ours.

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::snapshot::Settings;

const LEGACY_ANNOTATION: &str = "kubernetes.io/ingress.class";
const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// Decides class membership for one snapshot.
pub(crate) struct ClassFilter<'a> {
    /// Names of IngressClasses whose `spec.controller` is ours.
    ours: Vec<&'a str>,
    /// Whether an IngressClass marked default is ours.
    default_is_ours: bool,
    settings: &'a Settings,
}

impl<'a> ClassFilter<'a> {
    pub(crate) fn new(classes: &'a [std::sync::Arc<IngressClass>], settings: &'a Settings) -> Self {
        let mut ours = Vec::new();
        let mut default_is_ours = false;
        for class in classes {
            let controller = class.spec.as_ref().and_then(|s| s.controller.as_deref());
            if controller != Some(settings.controller.as_str()) {
                continue;
            }
            let Some(name) = class.metadata.name.as_deref() else {
                continue;
            };
            ours.push(name);
            let is_default = class
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
            default_is_ours |= is_default;
        }
        Self {
            ours,
            default_is_ours,
            settings,
        }
    }

    /// Whether `ing` belongs to this controller.
    pub(crate) fn is_ours(&self, ing: &Ingress) -> bool {
        let class_name = ing
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref());
        let legacy = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEGACY_ANNOTATION));
        match (class_name, legacy) {
            (Some(name), _) => self.ours.contains(&name),
            (None, Some(legacy)) => legacy == &self.settings.ingress_class,
            (None, None) => self.default_is_ours || self.settings.watch_without_class,
        }
    }
}
