//! The metrics read off what NGINX serves: certificates, orphaned Ingresses and the
//! rejected resources. The sync loop hands over the model and the rejections when it
//! publishes the status; they are turned into metrics only when scraped, so that an
//! endpoint change costs nothing more.

use std::sync::{Arc, RwLock};

use ferrule_model::Model;

use super::certificates::Certificates;
use super::identity::Identity;
use super::rejected::{self, Rejection};

/// The model NGINX serves and what is rejected, as last published.
#[derive(Debug, Default)]
pub struct Served {
    state: RwLock<(Option<Arc<Model>>, Vec<Rejection>)>,
    certificates: Certificates,
}

impl Served {
    /// What the status now reports.
    pub fn set(&self, model: Arc<Model>, mut rejections: Vec<Rejection>) {
        rejections.sort();
        rejections.dedup();
        *self.state.write().expect("metrics lock") = (Some(model), rejections);
    }

    /// Appends the metrics.
    pub fn encode(&self, out: &mut String, id: &Identity) {
        let (model, rejections) = self.state.read().expect("metrics lock").clone();
        if let Some(model) = model {
            self.certificates.encode(out, &id.class, &model);
            super::orphans::encode(out, id, &model);
        }
        rejected::encode(out, id, &rejections);
    }
}
