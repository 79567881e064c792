//! The `ferrule` binary: a thin CLI over the library crates.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ferrule_model::{Diff, Settings};

mod source;

#[derive(Parser)]
#[command(
    name = "ferrule",
    version,
    about = "Kubernetes Ingress controller driving NGINX"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Flags that shape the model, shared by every subcommand that builds one.
#[derive(clap::Args, Clone)]
struct ModelFlags {
    /// IngressClass `spec.controller` value Ferrule owns.
    #[arg(long, default_value = ferrule_model::snapshot::DEFAULT_CONTROLLER)]
    controller_class: String,
    /// Legacy `kubernetes.io/ingress.class` annotation value Ferrule owns.
    #[arg(long, default_value = "ferrule")]
    ingress_class: String,
    /// Serve Ingresses that name no class.
    #[arg(long)]
    watch_ingress_without_class: bool,
    /// `NAMESPACE/NAME` of the Service for unknown hosts and unmatched paths.
    #[arg(long)]
    default_backend_service: Option<String>,
    /// `NAMESPACE/NAME` of the default TLS Secret.
    #[arg(long)]
    default_ssl_certificate: Option<String>,
    /// Honour configuration-snippet / server-snippet annotations.
    #[arg(long)]
    allow_snippet_annotations: bool,
    /// `NAMESPACE/NAME` of the controller ConfigMap.
    #[arg(long)]
    configmap: Option<String>,
}

impl ModelFlags {
    fn settings(&self) -> Settings {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Settings {
            controller: self.controller_class.clone(),
            ingress_class: self.ingress_class.clone(),
            watch_without_class: self.watch_ingress_without_class,
            default_backend_service: self.default_backend_service.clone(),
            default_certificate: self.default_ssl_certificate.clone(),
            allow_snippet_annotations: self.allow_snippet_annotations,
            now,
        }
    }

    fn config_map(&self) -> Option<(&str, &str)> {
        self.configmap
            .as_deref()
            .map(|c| c.split_once('/').unwrap_or(("default", c)))
    }

    fn model(&self, dir: &std::path::Path) -> Result<ferrule_model::Model> {
        let snap = source::manifests::load(dir, self.settings(), self.config_map())
            .with_context(|| format!("loading manifests from {}", dir.display()))?;
        Ok(ferrule_model::build(&snap))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print the model built from a manifests directory as JSON.
    Model {
        /// Directory of Kubernetes manifests.
        #[arg(long)]
        manifests: PathBuf,
        /// Print only the model's blake3 hash.
        #[arg(long)]
        hash: bool,
        #[command(flatten)]
        flags: ModelFlags,
    },
    /// Compare the models of two manifests directories: `unchanged`, `dynamic` or `reload`.
    Diff {
        /// The running state.
        old: PathBuf,
        /// The new state.
        new: PathBuf,
        #[command(flatten)]
        flags: ModelFlags,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Model {
            manifests,
            hash,
            flags,
        } => {
            let model = flags.model(&manifests)?;
            if hash {
                println!("{}", model.hash());
            } else {
                println!("{}", serde_json::to_string_pretty(&model)?);
            }
        }
        Command::Diff { old, new, flags } => {
            let (old, new) = (flags.model(&old)?, flags.model(&new)?);
            match ferrule_model::diff(&old, &new) {
                Diff::Unchanged => println!("unchanged"),
                Diff::Dynamic {
                    backends,
                    certificates,
                } => {
                    println!("dynamic");
                    backends.iter().for_each(|b| println!("backend {b}"));
                    certificates
                        .iter()
                        .for_each(|c| println!("certificate {c}"));
                }
                Diff::Reload { reasons } => {
                    println!("reload");
                    reasons.iter().for_each(|r| println!("{r}"));
                }
            }
        }
    }
    Ok(())
}
