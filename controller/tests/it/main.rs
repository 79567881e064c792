//! Ferrule's integration tests: one binary (so the suite builds once), a module per
//! feature, shared helpers in `support`. Every test runs the real `ferrule` binary
//! with a real NGINX on loopback and asserts on real HTTP traffic.

mod support;

mod access;
mod affinity;
mod canary;
mod chart;
mod configmap;
mod conformance;
mod dataplane;
mod dynamic;
mod e2e;
mod external_names;
mod install;
mod logs;
mod metrics;
mod nightmare;
mod njs;
mod ocsp;
mod passthrough;
mod process;
mod prometheus;
mod protocols;
mod request_metrics;
mod routing;
mod safety;
mod snippet_tokens;
mod streams;
mod supervisor;
mod tenants;
mod traffic;
