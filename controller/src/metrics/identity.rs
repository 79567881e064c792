//! Which controller exports the metrics: ingress-nginx's constant labels.

use std::borrow::Cow;

/// `controller_namespace`, `controller_class` and `controller_pod`, on every
/// `nginx_ingress_controller_*` and `ferrule_*` metric, as ingress-nginx labels its
/// own: dashboards choose a controller with them, whatever labels the scrape adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The pod's namespace (`$POD_NAMESPACE`, else `default`, as ingress-nginx).
    pub namespace: String,
    /// The IngressClass controller value (`--controller-class`).
    pub class: String,
    /// The pod's name (`$POD_NAME`, else the host name).
    pub pod: String,
}

impl Identity {
    /// From the environment the chart sets (`POD_NAME`, `POD_NAMESPACE`).
    pub fn from_env(controller_class: &str) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self {
            namespace: var("POD_NAMESPACE").unwrap_or_else(|| "default".to_owned()),
            class: controller_class.to_owned(),
            pod: var("POD_NAME").unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_default()
            }),
        }
    }

    /// The labels, without those that are empty (an empty label is no label).
    pub fn labels(&self) -> Vec<(&'static str, &str)> {
        [
            ("controller_namespace", self.namespace.as_str()),
            ("controller_class", self.class.as_str()),
            ("controller_pod", self.pod.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
    }

    /// The same, as a prometheus-client registry takes them.
    pub(crate) fn registry_labels(&self) -> Vec<(Cow<'static, str>, Cow<'static, str>)> {
        self.labels()
            .into_iter()
            .map(|(k, v)| (Cow::Borrowed(k), Cow::Owned(escape(v))))
            .collect()
    }
}

/// A label value escaped for the text format (prometheus-client writes values as
/// given).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
