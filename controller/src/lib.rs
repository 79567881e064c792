//! Ferrule's controller: sources, the sync loop, NGINX, the balancer client, the
//! status port. The binary (`main.rs`) is a thin CLI over this library.

pub mod balancer;
pub mod kube;
pub mod metrics;
pub mod nginx;
pub mod source;
pub mod status;
pub mod sync;
pub mod tls;
