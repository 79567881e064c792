//! Everything that writes NGINX files or runs NGINX, behind [`Dataplane`]:
//! `prefix.rs` prepares the prefix for a new or an adopted master, `probe.rs`
//! renders, writes, tests and activates a configuration, and [`Dataplane::apply`]
//! runs config safety (`safety/`) over that probe: a configuration NGINX rejects
//! never replaces the one it serves, and the resource that caused it is excluded.

pub mod api;
pub mod emit;
pub mod fast_path;
pub mod files;
mod prefix;
mod probe;
pub mod process;
pub mod procfs;
pub mod render;
pub mod safety;
pub mod stream_peers;
pub mod stub_status;
pub mod supervisor;
pub mod worker_dir;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrule_model::{Model, Snapshot};

use process::{Launcher, Nginx, TestFailure};
use render::{Balancer, Renderer};
use safety::Exclusions;

/// The balancer sources, embedded (`controller/build.rs`): written by `prefix.rs`,
/// digested into the configuration version by `render.rs`.
mod lua {
    include!(concat!(env!("OUT_DIR"), "/lua_files.rs"));
}

mod njs {
    include!(concat!(env!("OUT_DIR"), "/njs_files.rs"));
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The rendered files were already what NGINX serves.
    Unchanged,
    /// NGINX was started with the new configuration.
    Started,
    /// NGINX reloaded, and new workers answer with the new version.
    Reloaded,
    /// NGINX reloaded, but new workers did not confirm the version in time.
    ReloadUnverified,
}

/// The outcome of one reload-path pass.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What happened to NGINX.
    pub applied: Applied,
    /// The model NGINX now serves.
    pub model: Arc<Model>,
    /// How many `nginx -t` runs it took.
    pub tests: usize,
    /// How long `nginx -t` runs took in total.
    pub test_time: Duration,
    /// How many of those refused the configuration (config safety then left a
    /// resource out or held the ConfigMap back).
    pub refused: usize,
    /// The served configuration's version (a digest of the rendered files).
    pub version: String,
}

/// An apply that could not produce any servable configuration.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Writing files failed.
    #[error("writing NGINX files: {0}")]
    Io(#[from] std::io::Error),
    /// Rendering failed (a template bug).
    #[error(transparent)]
    Render(#[from] render::RenderError),
    /// Even the base configuration fails `nginx -t`.
    #[error("the base configuration fails nginx -t: {0}")]
    Base(TestFailure),
}

/// NGINX as Ferrule drives it: files in a prefix, one master process.
pub struct Dataplane {
    renderer: Renderer,
    nginx: Nginx,
    /// The balancer API token (written to `conf/balancer.token`, mode 0600).
    token: String,
    /// The default certificate and key (PEM).
    default_certificate: (String, String),
    /// The same, as the file `conf/default.pem` holds it (Lua): every rendering lists
    /// it among the files, so it is kept rather than read back from the disk.
    default_pem: Vec<u8>,
    /// The model NGINX serves.
    applied: Option<Arc<Model>>,
    /// The configuration version an adopted master served when adopted, until the
    /// first apply: files on disk equal to the new ones do not prove that the master
    /// loaded them (an earlier controller may have died between writing and reload).
    adopted_version: Option<String>,
    /// How long to wait for new workers to confirm a reload.
    pub verify_timeout: Duration,
    /// Only render and test; never start or reload NGINX (`ferrule validate`).
    pub dry_run: bool,
    /// The uid of the worker user (when NGINX starts as root): owner of the files
    /// the workers read themselves. Looked up once, not per render.
    worker_uid: Option<u32>,
}

impl Dataplane {
    /// Prepares the prefix (directories, balancer sources, token, default
    /// certificate; for njs also an empty state directory) for a new NGINX.
    pub fn new(
        renderer: Renderer,
        nginx_binary: PathBuf,
        default_pem: Vec<u8>,
    ) -> std::io::Result<Self> {
        let nginx = Nginx::new(nginx_binary, renderer.options().prefix.clone())
            .with_worker_dir(renderer.options().worker_dir.clone());
        Self::prepare(renderer, nginx, default_pem, None)
    }

    /// Like [`Dataplane::new`], with NGINX run by `launcher`, but first adopts an
    /// NGINX master that an earlier controller process left running on the prefix
    /// (see [`Nginx::adopt`]). An adopted master keeps the balancer token, default
    /// certificate and (njs) state it loaded, so the files holding them are kept;
    /// the first apply then reloads only if the configuration differs from what it
    /// serves.
    pub async fn adopt_or_new(
        renderer: Renderer,
        launcher: Launcher,
        default_pem: Vec<u8>,
    ) -> std::io::Result<Self> {
        let mut nginx = Nginx::launched(launcher, renderer.options().prefix.clone())
            .with_worker_dir(renderer.options().worker_dir.clone());
        let adopted = nginx.adopt().await;
        let mut dataplane = Self::prepare(renderer, nginx, default_pem, adopted)?;
        dataplane.check_adopted_token().await;
        Ok(dataplane)
    }

    fn prepare(
        renderer: Renderer,
        nginx: Nginx,
        default_pem: Vec<u8>,
        adopted: Option<process::Adopted>,
    ) -> std::io::Result<Self> {
        let prepared = prefix::prepare(renderer.options(), default_pem, adopted.is_some())?;
        Ok(Self {
            renderer,
            nginx,
            token: prepared.token,
            default_certificate: prepared.default_certificate,
            default_pem: prepared.default_pem,
            applied: None,
            adopted_version: adopted.map(|a| a.version),
            verify_timeout: Duration::from_secs(10),
            dry_run: false,
            worker_uid: prepared.worker_uid,
        })
    }

    /// Makes the first apply reload when the adopted master refuses the token in the
    /// token file (an earlier controller wrote it and died before the reload that
    /// would have loaded it).
    async fn check_adopted_token(&mut self) {
        if self.adopted_version.is_some()
            && prefix::refuses_token(&self.api_socket(), &self.token).await
        {
            tracing::warn!("the adopted NGINX refuses the token on disk; the first apply reloads");
            self.adopted_version = Some(String::new());
        }
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        self.nginx.prefix()
    }

    /// The balancer inside NGINX.
    pub fn balancer(&self) -> Balancer {
        self.renderer.options().balancer
    }

    /// The balancer API token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The default certificate and key (PEM), as NGINX serves them.
    pub fn default_certificate(&self) -> &(String, String) {
        &self.default_certificate
    }

    /// Where the peers files of TCP/UDP services live (`stream_peers`).
    pub fn stream_peers_dir(&self) -> PathBuf {
        (self.renderer.options()).worker_path(render::STREAM_PEERS_DIR)
    }

    /// The balancer API socket.
    pub fn api_socket(&self) -> PathBuf {
        self.prefix().join(process::API_SOCKET)
    }

    /// The model NGINX serves, once something was applied.
    pub fn applied(&self) -> Option<Arc<Model>> {
        self.applied.clone()
    }

    /// The NGINX process.
    pub fn nginx(&mut self) -> &mut Nginx {
        &mut self.nginx
    }

    /// Forgets the running state after NGINX died, so the next apply starts it.
    pub fn nginx_died(&mut self) {
        self.applied = None;
        self.adopted_version = None;
    }

    /// The reload path with config safety ([`safety::apply`] over this dataplane).
    /// `excl` is updated with every resource excluded on the way; the ConfigMap is
    /// held back when it breaks shared configuration.
    pub async fn apply(
        &mut self,
        snap: &Snapshot,
        prebuilt: Option<safety::Prebuilt>,
        excl: &mut Exclusions,
    ) -> Result<Outcome, ApplyError> {
        let served = safety::apply(self, snap, prebuilt, excl).await?;
        let version = served.written.version().to_owned();
        let model = served.written.model;
        self.applied = Some(model.clone());
        self.adopted_version = None;
        Ok(Outcome {
            applied: served.applied,
            model,
            tests: served.tests,
            test_time: served.test_time,
            refused: served.refused,
            version,
        })
    }
}
