//! Ferrule's controller: sources, the sync loop, NGINX, the balancer client, the
//! status port, the admission webhook. The binary (`main.rs`) is a thin CLI over this
//! library.

pub mod admission;
pub mod balancer;
pub mod kube;
pub mod metrics;
pub mod nginx;
pub mod scrape;
pub mod source;
pub mod status;
pub mod sync;
pub mod tls;
