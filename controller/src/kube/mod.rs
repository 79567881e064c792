//! Everything that writes to the Kubernetes API: Ingress status (lease holder only),
//! events, and the leader election that decides who writes.

pub mod events;
pub mod leader;
pub mod status;
pub mod writer;
