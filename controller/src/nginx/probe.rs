//! [`Dataplane`] as config safety's [`Probe`]: the files of a snapshot's model
//! written below the prefix, `nginx -t` on them, the last good files put back, and
//! a reload or start confirmed by the new workers' configuration version.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrule_model::{Model, ResourceRef, Snapshot};

use super::files::{self, FileSpec};
use super::process::TestFailure;
use super::render::{self, Balancer, Rendered};
use super::safety::Probe;
use super::{Applied, ApplyError, Dataplane, prefix};

/// How long a starting NGINX may take to serve its first configuration.
const START_TIMEOUT: Duration = Duration::from_secs(600);

/// A configuration written below the prefix.
pub struct Written {
    /// The model it was rendered from.
    pub model: Arc<Model>,
    /// The rendered files, with their source maps.
    rendered: Rendered,
    /// How to put back what the write replaced.
    change: files::Change,
}

impl Written {
    /// The configuration's version (a digest of the rendered files).
    pub fn version(&self) -> &str {
        self.rendered.version()
    }
}

impl Dataplane {
    /// Renders every file for `model`, with modes.
    pub fn files(
        &self,
        model: &Model,
    ) -> Result<(Rendered, BTreeMap<String, FileSpec>), render::RenderError> {
        let rendered = self.renderer.render(model)?;
        let mut specs: BTreeMap<String, FileSpec> = rendered
            .iter()
            .map(|(k, v)| (k.clone(), FileSpec::new(v.text.clone().into_bytes(), 0o644)))
            .collect();
        // Client CAs and CRLs: read by the master at start and reload.
        for (file, pem) in render::client_certificate_files(model) {
            specs.insert(file, FileSpec::new(pem.as_bytes().to_vec(), 0o600));
        }
        // Backend TLS CAs and client keys: read by the master at start and reload.
        for (file, pem) in render::backend_tls_files(model) {
            specs.insert(file, FileSpec::new(pem.as_bytes().to_vec(), 0o600));
        }
        // The ConfigMap's secret files (DH parameters, the ticket key).
        for (file, bytes) in render::master_files(model) {
            specs.insert(file.to_owned(), FileSpec::new(bytes.to_vec(), 0o600));
        }
        // Basic-auth users: read by the workers at each request, so theirs (0600).
        let opts = self.renderer.options();
        for (file, users) in render::basic_auth_files(model) {
            let key = match &opts.worker_dir {
                None => file,
                Some(dir) => dir.join(file).to_string_lossy().into_owned(),
            };
            let mut spec = FileSpec::new(users.as_bytes().to_vec(), 0o600);
            spec.owner = self.worker_uid;
            specs.insert(key, spec);
        }
        // Certificates of hosts are not files: the balancer serves them by SNI from
        // its store, so private keys stay off the disk and a rotation writes nothing.
        if self.renderer.options().balancer == Balancer::Njs {
            // The njs balancer serves its fallback from conf/default.{crt,key}.
            return Ok((rendered, specs));
        }
        specs.insert(
            render::DEFAULT_CERTIFICATE.to_owned(),
            FileSpec::new(self.default_pem.clone(), 0o600),
        );
        if let Some(key) = &model.global.tuning.ssl_session_ticket_key {
            let pem = crate::tls::ticket_placeholder(&key.bytes);
            specs.insert(
                render::TICKET_PLACEHOLDER.to_owned(),
                FileSpec::new(pem, 0o600),
            );
        }
        Ok((rendered, specs))
    }

    /// Writes `specs` below the prefix (and the worker directory's managed files).
    fn write_files(&self, specs: &BTreeMap<String, FileSpec>) -> std::io::Result<files::Change> {
        let more: Vec<PathBuf> = self
            .renderer
            .options()
            .worker_dir
            .iter()
            .map(|d| d.join(files::AUTH_DIR))
            .collect();
        files::write_managed(self.prefix(), &more, specs)
    }
}

impl Probe for Dataplane {
    type Written = Written;

    fn write(&mut self, _: &Snapshot, model: Arc<Model>) -> Result<Written, ApplyError> {
        let (rendered, specs) = self.files(&model)?;
        let change = self.write_files(&specs)?;
        Ok(Written {
            model,
            rendered,
            change,
        })
    }

    /// The files on disk did not change, and the running NGINX has loaded them.
    async fn serves(&mut self, written: &Written) -> bool {
        let version = written.rendered.version();
        let loaded = self.adopted_version.as_ref().is_none_or(|v| v == version);
        written.change.is_empty() && loaded && !self.dry_run && self.nginx.is_running().await
    }

    async fn starts(&mut self) -> bool {
        !self.dry_run && !self.nginx.is_running().await
    }

    async fn test(&mut self) -> Result<(), TestFailure> {
        self.nginx.test().await
    }

    fn locate(&self, written: &Written, failure: &TestFailure) -> Option<ResourceRef> {
        let (file, line) = failure.location.as_ref()?;
        let rel = file
            .strip_prefix(self.prefix())
            .ok()?
            .to_string_lossy()
            .into_owned();
        written.rendered.get(&rel)?.resource_at(*line).cloned()
    }

    fn roll_back(&mut self, written: Written) -> Result<(), ApplyError> {
        Ok(files::rollback(written.change)?)
    }

    /// In a dry run, claims a start and touches nothing.
    async fn activate(&mut self, written: &Written) -> Result<Applied, ApplyError> {
        let version = written.rendered.version();
        let applied = if self.dry_run {
            Applied::Started
        } else if self.nginx.is_running().await {
            self.nginx.reload().await?;
            if self
                .nginx
                .wait_for_version(version, self.verify_timeout)
                .await
            {
                Applied::Reloaded
            } else {
                Applied::ReloadUnverified
            }
        } else {
            prefix::clear_njs_state(self.renderer.options())?;
            self.nginx.start().await?;
            // A master parsing a large configuration (10k servers) takes far longer
            // than a reload check: wait as long as it is alive, not a fixed timeout.
            let started = Instant::now();
            loop {
                if self
                    .nginx
                    .wait_for_version(version, Duration::from_secs(1))
                    .await
                {
                    break;
                }
                if !self.nginx.is_running().await || started.elapsed() > START_TIMEOUT {
                    return Err(ApplyError::Io(std::io::Error::other(format!(
                        "nginx did not start serving (waited {:?}); see {}",
                        started.elapsed(),
                        self.prefix().join("logs/error.log").display()
                    ))));
                }
            }
            Applied::Started
        };
        Ok(applied)
    }
}
