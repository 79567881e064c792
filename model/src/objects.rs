//! Decoding Kubernetes objects (as JSON values) into a [`Snapshot`].
//!
//! Used by the manifests source and by tests; the kube source builds snapshots from
//! typed watch results directly.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

use crate::snapshot::Snapshot;

/// An object that could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The document has no `kind`.
    #[error("document has no \"kind\"")]
    NoKind,
    /// The document does not match its kind's schema.
    #[error("invalid {kind}: {source}")]
    Invalid {
        /// The kind.
        kind: String,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// What happened to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// Added to the snapshot.
    Added,
    /// Not a kind Ferrule reads; the kind is returned.
    Skipped(String),
}

/// Adds one object (or every item of a `List`) to `snap`.
///
/// `config_map` names the controller ConfigMap (`namespace`, `name`); other ConfigMaps
/// go to `Snapshot::config_maps`. A namespaced object without a namespace is put in
/// `default`.
pub fn add(
    snap: &mut Snapshot,
    value: serde_json::Value,
    config_map: Option<(&str, &str)>,
) -> Result<Vec<Added>, ObjectError> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .ok_or(ObjectError::NoKind)?
        .to_owned();
    let mut out = Vec::new();
    match kind.as_str() {
        "List" => {
            let items = value
                .get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default();
            for item in items {
                out.extend(add(snap, item, config_map)?);
            }
            return Ok(out);
        }
        "Ingress" => snap.ingresses.push(decode(&kind, value)?),
        "IngressClass" => snap
            .ingress_classes
            .push(decode::<IngressClass>(&kind, value)?),
        "Service" => snap.services.push(decode::<Service>(&kind, value)?),
        "EndpointSlice" => snap
            .endpoint_slices
            .push(decode::<EndpointSlice>(&kind, value)?),
        "Secret" => snap.secrets.push(decode::<Secret>(&kind, value)?),
        "ConfigMap" => {
            let cm: Arc<ConfigMap> = decode(&kind, value)?;
            let id = (
                cm.metadata.namespace.as_deref().unwrap_or_default(),
                cm.metadata.name.as_deref().unwrap_or_default(),
            );
            if config_map == Some(id) {
                snap.config_map = Some(cm);
            } else {
                // The build reads those the settings name (TCP/UDP services).
                snap.config_maps.push(cm);
            }
        }
        _ => return Ok(vec![Added::Skipped(kind)]),
    }
    out.push(Added::Added);
    Ok(out)
}

trait Meta {
    fn meta(&mut self) -> &mut ObjectMeta;
    const NAMESPACED: bool = true;
}

macro_rules! meta {
    ($($t:ty),*) => { $(impl Meta for $t { fn meta(&mut self) -> &mut ObjectMeta { &mut self.metadata } })* };
}
meta!(Ingress, Service, EndpointSlice, Secret, ConfigMap);
impl Meta for IngressClass {
    fn meta(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    const NAMESPACED: bool = false;
}

fn decode<T: DeserializeOwned + Meta>(
    kind: &str,
    value: serde_json::Value,
) -> Result<Arc<T>, ObjectError> {
    let mut obj: T = serde_json::from_value(value).map_err(|source| ObjectError::Invalid {
        kind: kind.to_owned(),
        source,
    })?;
    let m = obj.meta();
    if T::NAMESPACED && m.namespace.as_deref().unwrap_or_default().is_empty() {
        m.namespace = Some("default".to_owned());
    }
    if m.uid.is_none() {
        // Deterministic, so that the same manifests always give the same model.
        let id = format!(
            "{kind}/{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        );
        m.uid = Some(blake3::hash(id.as_bytes()).to_hex()[..32].to_string());
    }
    m.managed_fields = None;
    Ok(Arc::new(obj))
}
