//! Prometheus metrics of the controller.
//!
//! Names: `ferrule_` (the registry's prefix), then what is measured, then the unit
//! (`_seconds`) for times; counters get `_total` from the encoder. Where a metric
//! means what an ingress-nginx one means, it takes that one's name after its
//! `nginx_ingress_controller_` prefix (`admission_roundtrip_duration`,
//! `admission_tested_ingresses`), with the same unit suffix as Ferrule's others, so
//! that dashboards need only the prefix changed (and `_seconds` added).
//!
//! Beside them, ingress-nginx's own metrics under its names
//! (`nginx_ingress_controller_*`), where Ferrule measures the same thing: the
//! controller's ([`controller`]), NGINX's processes ([`nginx_process`]), and what the
//! served model holds ([`served`]: certificates, orphaned Ingresses, and Ferrule's
//! rejected resources). Every metric carries the [`Identity`] labels. `/metrics` is
//! the Prometheus text format 0.0.4 ([`text`]).

pub mod certificates;
pub mod controller;
pub mod identity;
pub mod nginx_process;
pub mod orphans;
pub mod rejected;
pub mod served;
pub mod text;

pub use identity::Identity;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label: an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `success` or `failure`.
    pub result: String,
}

/// Labels of dynamic updates.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DynamicLabel {
    /// `backends` or `certificates`.
    pub kind: String,
    /// `success` or `failure`.
    pub result: String,
}

/// Label: how a model was built.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    /// `endpoints` (only EndpointSlices changed: the last model patched) or `full`.
    pub kind: String,
}

/// Label: what started a pass of the model task.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabel {
    /// `snapshot` (the source saw a change the model reads), `reload` (NGINX serves
    /// a new model: the diff base changed) or `retry` (of a failed post).
    pub cause: String,
}

/// Label: a resource state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `applied` or `rejected`.
    pub state: String,
}

/// Label: what the admission webhook answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabel {
    /// `allowed` (without a warning: valid, or not ours), `warned` (allowed with
    /// warnings), `denied`, or `error` (no decision: a request that is not an
    /// AdmissionReview, or no snapshot yet).
    pub result: String,
}

/// Label: which figure of a store.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabel {
    /// `capacity` or `free`.
    pub state: String,
}

/// Every metric Ferrule exports.
pub struct Metrics {
    registry: Registry,
    /// The labels every metric carries.
    pub identity: Identity,
    /// ingress-nginx's controller metrics (reloads, configuration hash, leader).
    pub controller: controller::Controller,
    /// NGINX's connections, requests and processes, read at each scrape.
    pub nginx: nginx_process::NginxProcess,
    /// What the served model holds (certificates, orphans, rejections).
    pub served: served::Served,
    /// Reloads by result.
    pub reloads: Family<ResultLabel, Counter>,
    /// Time from the start of a reload pass (render, write, test, reload, verify) to its end.
    pub reload_duration: Histogram,
    /// Reloads whose new workers did not confirm the version in time.
    pub reload_verify_failures: Counter,
    /// Time to build and diff the model after a change.
    pub sync_duration: Histogram,
    /// Models built after a change, by kind.
    pub model_builds: Family<BuildLabel, Counter>,
    /// Passes of the model task, by what started them.
    pub model_passes: Family<PassLabel, Counter>,
    /// Resources by state.
    pub resources: Family<StateLabel, Gauge>,
    /// Dynamic (no reload) updates by kind and result.
    pub dynamic_updates: Family<DynamicLabel, Counter>,
    /// Time from the source first seeing a change (a watch event, before coalescing)
    /// to the balancer having it.
    pub dynamic_latency: Histogram,
    /// NGINX master restarts after it died.
    pub nginx_restarts: Counter,
    /// `nginx -t` runs.
    pub config_tests: Counter,
    /// Manifest files (standalone mode) that do not load: each keeps its last
    /// version that did.
    pub manifest_errors: Gauge,
    /// Admission reviews answered, by result.
    pub admission_requests: Family<AdmissionLabel, Counter>,
    /// Time to answer an admission review, from its body read to its answer.
    pub admission_roundtrip: Histogram,
    /// Ingresses the last admission decision built (the candidate and those sharing
    /// its hosts): its cost, whatever the size of the cluster.
    pub admission_tested_ingresses: Gauge,
    /// The Lua balancer's certificate store (`--certificate-store-size`): its size
    /// and its free bytes, after the last sync that changed it (absent with njs).
    pub certificate_store_bytes: Family<StoreLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Identity::default())
    }
}

impl Metrics {
    /// The metrics of the controller `identity` names.
    pub fn new(identity: Identity) -> Self {
        let mut registry =
            Registry::with_prefix_and_labels("ferrule", identity.registry_labels().into_iter());
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register("reloads", "NGINX reloads by result", reloads.clone());
        let reload_duration = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "reload_duration_seconds",
            "Duration of reload passes",
            reload_duration.clone(),
        );
        let reload_verify_failures = Counter::default();
        registry.register(
            "reload_verify_failures",
            "Reloads not confirmed by new workers in time",
            reload_verify_failures.clone(),
        );
        let sync_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "sync_duration_seconds",
            "Duration of model build and diff",
            sync_duration.clone(),
        );
        let model_builds = Family::<BuildLabel, Counter>::default();
        registry.register(
            "model_builds",
            "Models built after a change: endpoints (the last one patched) or full",
            model_builds.clone(),
        );
        let model_passes = Family::<PassLabel, Counter>::default();
        registry.register(
            "model_passes",
            "Passes of the model task by cause: snapshot (a change the model reads), \
             reload (the diff base changed) or retry (of a failed post)",
            model_passes.clone(),
        );
        let resources = Family::<StateLabel, Gauge>::default();
        registry.register("resources", "Resources by state", resources.clone());
        let dynamic_updates = Family::<DynamicLabel, Counter>::default();
        registry.register(
            "dynamic_updates",
            "Updates applied without reload",
            dynamic_updates.clone(),
        );
        let dynamic_latency = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "dynamic_update_latency_seconds",
            "Time from the source first seeing a change to the balancer having it",
            dynamic_latency.clone(),
        );
        let nginx_restarts = Counter::default();
        registry.register(
            "nginx_restarts",
            "NGINX restarts after it died",
            nginx_restarts.clone(),
        );
        let config_tests = Counter::default();
        registry.register("config_tests", "nginx -t runs", config_tests.clone());
        let manifest_errors = Gauge::default();
        registry.register(
            "manifest_errors",
            "Manifest files that do not load (standalone mode)",
            manifest_errors.clone(),
        );
        let admission_requests = Family::<AdmissionLabel, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by result (allowed, warned, denied, error)",
            admission_requests.clone(),
        );
        let admission_roundtrip = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register(
            "admission_roundtrip_duration_seconds",
            "Time to decide on an admission review (no NGINX, no full build)",
            admission_roundtrip.clone(),
        );
        let admission_tested_ingresses = Gauge::default();
        registry.register(
            "admission_tested_ingresses",
            "Ingresses the last admission decision built: the candidate and those it may interact with",
            admission_tested_ingresses.clone(),
        );
        let certificate_store_bytes = Family::<StoreLabel, Gauge>::default();
        registry.register(
            "certificate_store_bytes",
            "The balancer's certificate store: capacity and free bytes (whole free pages)",
            certificate_store_bytes.clone(),
        );
        // Every outcome from zero, so that rate() sees the first reload or update
        // (a series that appears at 1 has no increase to show).
        for result in ["success", "failure"] {
            drop(reloads.get_or_create(&ResultLabel {
                result: result.into(),
            }));
            for kind in ["backends", "certificates"] {
                drop(dynamic_updates.get_or_create(&DynamicLabel {
                    kind: kind.into(),
                    result: result.into(),
                }));
            }
        }
        for kind in ["endpoints", "full"] {
            drop(model_builds.get_or_create(&BuildLabel { kind: kind.into() }));
        }
        for cause in ["snapshot", "reload", "retry"] {
            drop(model_passes.get_or_create(&PassLabel {
                cause: cause.into(),
            }));
        }
        Self {
            registry,
            identity,
            controller: Default::default(),
            nginx: Default::default(),
            served: Default::default(),
            reloads,
            reload_duration,
            reload_verify_failures,
            sync_duration,
            model_builds,
            model_passes,
            resources,
            dynamic_updates,
            dynamic_latency,
            nginx_restarts,
            config_tests,
            manifest_errors,
            admission_requests,
            admission_roundtrip,
            admission_tested_ingresses,
            certificate_store_bytes,
        }
    }

    /// The Prometheus text exposition (0.0.4) of everything but NGINX's processes.
    pub fn encode(&self) -> String {
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &self.registry)
            .expect("encoding to a String");
        let mut out = text::from_openmetrics(&om);
        self.controller.encode(&mut out, &self.identity);
        self.served.encode(&mut out, &self.identity);
        out
    }

    /// What `/metrics` answers: [`Metrics::encode`] and NGINX's processes, read now.
    pub async fn scrape(&self) -> String {
        let mut out = self.encode();
        self.nginx.encode(&mut out, &self.identity).await;
        out
    }

    /// Counts a reload.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts an admission review answered with `result` (see [`AdmissionLabel`]).
    pub fn admission(&self, result: &str) {
        self.admission_requests
            .get_or_create(&AdmissionLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Sets the certificate store's figures.
    pub fn certificate_store(&self, capacity: u64, free: u64) {
        for (state, bytes) in [("capacity", capacity), ("free", free)] {
            self.certificate_store_bytes
                .get_or_create(&StoreLabel {
                    state: state.to_owned(),
                })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// Counts a dynamic update.
    pub fn dynamic(&self, kind: &str, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.dynamic_updates
            .get_or_create(&DynamicLabel {
                kind: kind.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }
}
