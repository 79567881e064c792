//! Ferrule's model: a pure function from a cluster snapshot to an immutable NGINX model,
//! and the diff between two models.
//!
//! This crate never does I/O and never depends on the controller. See
//! `ARCHITECTURE.md` ("Model rules") for the semantics it implements.

pub mod admission;
pub mod annotations;
mod build;
pub mod configmap;
pub mod diff;
mod fallbacks;
pub mod model;
pub mod objects;
pub mod route;
pub mod snapshot;
pub mod snippet;

pub use build::header_lists::Header;
pub use build::tuning::UPSTREAMINFO;
pub use build::{build, build_endpoint_change, build_with, owned_ingresses};
pub use diff::{Diff, diff};
pub use fallbacks::Fallbacks;
pub use model::*;
pub use snapshot::{Limits, Settings, Snapshot};
