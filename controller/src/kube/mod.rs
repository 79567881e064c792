//! Everything that writes to the Kubernetes API: Ingress status (lease holder only),
//! events, the admission webhook's certificate, and the leader election that
//! decides who writes.

pub mod events;
pub mod leader;
pub mod status;
pub mod webhook_certificate;
pub mod writer;
