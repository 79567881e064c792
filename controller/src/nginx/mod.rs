//! Everything that writes NGINX files or runs NGINX.
//!
//! [`Dataplane::apply`] is the reload path with config safety: build the model from
//! the snapshot minus excluded resources, render, write (keeping the last good
//! files), `nginx -t`; on failure undo the write, find the resource that caused the
//! error (source map, else bisection, else one by one), exclude it and try again.

pub mod api;
pub mod emit;
pub mod files;
pub mod process;
pub mod render;
pub mod safety;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrule_model::{Model, ResourceRef, Snapshot};
use k8s_openapi::api::core::v1::ConfigMap;

use files::FileSpec;
use process::{Nginx, TestFailure};
use render::{Rendered, Renderer};
use safety::Exclusions;

mod lua {
    include!(concat!(env!("OUT_DIR"), "/lua_files.rs"));
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
    /// The model NGINX serves.
    applied: Option<Arc<Model>>,
    /// The ConfigMap that model was built with.
    applied_configmap: Option<Arc<ConfigMap>>,
    /// How long to wait for new workers to confirm a reload.
    pub verify_timeout: Duration,
    /// Only render and test; never start or reload NGINX (`ferrule validate`).
    pub dry_run: bool,
}

impl Dataplane {
    /// Prepares the prefix (directories, Lua sources, token, default certificate).
    pub fn new(
        renderer: Renderer,
        nginx_binary: PathBuf,
        default_pem: Vec<u8>,
    ) -> std::io::Result<Self> {
        let prefix = renderer.options().prefix.clone();
        for d in ["conf/servers", "conf/certs", "logs", "run", "lua"] {
            std::fs::create_dir_all(prefix.join(d))?;
        }
        for d in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            let dir = prefix.join("tmp").join(d);
            std::fs::create_dir_all(&dir)?;
            if let Some(user) = renderer.options().user.as_deref() {
                chown_to(&dir, user);
            }
        }
        for (rel, text) in lua::LUA_FILES {
            let path = prefix.join("lua").join(rel);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
                files::atomic_write(&path, text.as_bytes(), 0o644)?;
            }
        }
        let token = new_token();
        files::atomic_write(&prefix.join("conf/balancer.token"), token.as_bytes(), 0o600)?;
        files::atomic_write(
            &prefix.join(render::DEFAULT_CERTIFICATE),
            &default_pem,
            0o600,
        )?;
        Ok(Self {
            renderer,
            nginx: Nginx::new(nginx_binary, prefix),
            token,
            applied: None,
            applied_configmap: None,
            verify_timeout: Duration::from_secs(10),
            dry_run: false,
        })
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        self.nginx.prefix()
    }

    /// The balancer API token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The balancer API socket.
    pub fn api_socket(&self) -> PathBuf {
        self.prefix().join("run/balancer.sock")
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
    }

    /// Renders every file for `model`, with modes.
    pub fn files(
        &self,
        model: &Model,
    ) -> Result<(Rendered, BTreeMap<String, FileSpec>), render::RenderError> {
        let rendered = self.renderer.render(model)?;
        let mut specs: BTreeMap<String, FileSpec> = rendered
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    FileSpec {
                        bytes: v.text.clone().into_bytes(),
                        mode: 0o644,
                    },
                )
            })
            .collect();
        for (name, cert) in &model.certificates {
            let pem = format!(
                "{}\n{}\n",
                cert.cert_pem.trim_end(),
                cert.key_pem.trim_end()
            );
            specs.insert(
                render::certificate_file(name),
                FileSpec {
                    bytes: pem.into_bytes(),
                    mode: 0o600,
                },
            );
        }
        let default =
            std::fs::read(self.prefix().join(render::DEFAULT_CERTIFICATE)).unwrap_or_default();
        specs.insert(
            render::DEFAULT_CERTIFICATE.to_owned(),
            FileSpec {
                bytes: default,
                mode: 0o600,
            },
        );
        Ok((rendered, specs))
    }

    /// The reload path with config safety (see the module docs). `excl` is updated
    /// with every resource excluded on the way; the ConfigMap is held back when it
    /// breaks shared configuration.
    pub async fn apply(
        &mut self,
        snap: &Snapshot,
        excl: &mut Exclusions,
    ) -> Result<Outcome, ApplyError> {
        excl.refresh(snap);
        let configmap_changed = self.applied.as_ref().is_some_and(|m| {
            ferrule_model::build(&excl.apply(&strip_ingresses(snap), &BTreeSet::new())).global
                != m.global
        });
        let mut tests = 0;
        let mut test_time = Duration::ZERO;
        let mut failed_in_pass: Vec<ResourceRef> = Vec::new();
        let max_rounds = snap.ingresses.len() + 8;
        for _ in 0..max_rounds {
            let filtered = excl.apply(snap, &BTreeSet::new());
            let model = Arc::new(ferrule_model::build(&filtered));
            let (rendered, specs) = self.files(&model)?;
            let change = files::write_all(self.prefix(), &specs)?;
            if change.is_empty() && self.nginx.is_running() && !self.dry_run {
                self.applied = Some(model.clone());
                self.applied_configmap = filtered.config_map.clone();
                return Ok(Outcome {
                    applied: Applied::Unchanged,
                    model,
                    tests,
                    test_time,
                });
            }
            let started = Instant::now();
            let result = self.nginx.test().await;
            tests += 1;
            test_time += started.elapsed();
            let failure = match result {
                Ok(()) => {
                    let applied = self.activate(&model).await?;
                    self.applied_configmap = filtered.config_map.clone();
                    return Ok(Outcome {
                        applied,
                        model,
                        tests,
                        test_time,
                    });
                }
                Err(f) => f,
            };
            files::rollback(change)?;
            let culprit = match self.locate(&failure, &rendered) {
                Some(r) => Some(r),
                None => {
                    let (r, n, t) = self.bisect(snap, excl).await?;
                    tests += n;
                    test_time += t;
                    r
                }
            };
            match culprit {
                Some(r) if r.kind == "Ingress" => {
                    failed_in_pass.push(r.clone());
                    if configmap_changed && failed_in_pass.len() >= 2 {
                        // A shared input broke several resources in a row: blame it,
                        // not them, and keep the last good ConfigMap.
                        for r in &failed_in_pass {
                            excl.ingresses.remove(r);
                        }
                        let msg = format!(
                            "this ConfigMap change broke the configuration of {} and {} ({}); change not applied",
                            failed_in_pass[0], failed_in_pass[1], failure.message
                        );
                        let last_good = self.last_good_configmap();
                        excl.hold_configmap(snap, last_good, &msg);
                        continue;
                    }
                    excl.exclude(snap, &r, &failure.message);
                }
                Some(r)
                    if r.kind == "ConfigMap"
                        && snap.config_map.is_some()
                        && excl.configmap.is_none() =>
                {
                    let last_good = self.last_good_configmap();
                    excl.hold_configmap(snap, last_good, &failure.message);
                }
                _ => return self.one_by_one(snap, excl, failure, tests, test_time).await,
            }
        }
        let failure = TestFailure {
            message: "config safety did not converge".to_owned(),
            location: None,
        };
        self.one_by_one(snap, excl, failure, tests, test_time).await
    }

    /// Reloads (or starts) NGINX with the files just written and waits for the new
    /// workers.
    async fn activate(&mut self, model: &Arc<Model>) -> Result<Applied, ApplyError> {
        let applied = if self.dry_run {
            Applied::Started
        } else if self.nginx.is_running() {
            self.nginx.reload()?;
            if self
                .nginx
                .wait_for_version(&model.hash(), self.verify_timeout)
                .await
            {
                Applied::Reloaded
            } else {
                Applied::ReloadUnverified
            }
        } else {
            self.nginx.start().await?;
            if !self
                .nginx
                .wait_for_version(&model.hash(), self.verify_timeout)
                .await
            {
                return Err(ApplyError::Io(std::io::Error::other(format!(
                    "nginx did not start serving within {:?}; see {}",
                    self.verify_timeout,
                    self.prefix().join("logs/error.log").display()
                ))));
            }
            Applied::Started
        };
        self.applied = Some(model.clone());
        Ok(applied)
    }

    /// Maps an `nginx -t` error to the resource that produced the named line.
    fn locate(&self, failure: &TestFailure, rendered: &Rendered) -> Option<ResourceRef> {
        let (file, line) = failure.location.as_ref()?;
        let rel = file
            .strip_prefix(self.prefix())
            .ok()?
            .to_string_lossy()
            .into_owned();
        let r = rendered.get(&rel)?.resource_at(*line)?;
        (r.kind == "Ingress" || r.kind == "ConfigMap").then(|| r.clone())
    }

    /// Finds one Ingress whose configuration fails, by switching off halves of the
    /// candidates (oldest first). Returns `None` when the base alone fails.
    async fn bisect(
        &mut self,
        snap: &Snapshot,
        excl: &Exclusions,
    ) -> Result<(Option<ResourceRef>, usize, Duration), ApplyError> {
        let candidates: Vec<ResourceRef> = excl
            .apply(snap, &BTreeSet::new())
            .ingresses
            .iter()
            .map(|i| safety::ingress_ref(i))
            .collect();
        let mut tests = 0;
        let mut time = Duration::ZERO;
        // Smallest k such that the first k candidates fail together.
        let (mut lo, mut hi) = (0usize, candidates.len());
        if !self
            .probe(
                snap,
                excl,
                &candidates[..0].to_vec(),
                &candidates,
                &mut tests,
                &mut time,
            )
            .await?
        {
            return Ok((None, tests, time));
        }
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            let fails = !self
                .probe(
                    snap,
                    excl,
                    &candidates[..mid].to_vec(),
                    &candidates,
                    &mut tests,
                    &mut time,
                )
                .await?;
            if fails { hi = mid } else { lo = mid }
        }
        Ok((candidates.get(hi.saturating_sub(1)).cloned(), tests, time))
    }

    /// Tests a configuration with only `on` of `all` switched on; undoes the write.
    async fn probe(
        &mut self,
        snap: &Snapshot,
        excl: &Exclusions,
        on: &[ResourceRef],
        all: &[ResourceRef],
        tests: &mut usize,
        time: &mut Duration,
    ) -> Result<bool, ApplyError> {
        let off: BTreeSet<ResourceRef> = all.iter().filter(|r| !on.contains(r)).cloned().collect();
        let model = ferrule_model::build(&excl.apply(snap, &off));
        let (_, specs) = self.files(&model)?;
        let change = files::write_all(self.prefix(), &specs)?;
        let started = Instant::now();
        let ok = self.nginx.test().await.is_ok();
        *tests += 1;
        *time += started.elapsed();
        files::rollback(change)?;
        Ok(ok)
    }

    /// Last resort: the base configuration (no ConfigMap snippets, no Ingresses), then
    /// every Ingress added one by one, each kept only if `nginx -t` accepts it.
    async fn one_by_one(
        &mut self,
        snap: &Snapshot,
        excl: &mut Exclusions,
        failure: TestFailure,
        mut tests: usize,
        mut test_time: Duration,
    ) -> Result<Outcome, ApplyError> {
        tracing::warn!(error = %failure, "config safety falling back to adding resources one by one");
        let all: Vec<ResourceRef> = snap
            .ingresses
            .iter()
            .map(|i| safety::ingress_ref(i))
            .collect();
        if !self
            .probe(snap, excl, &[], &all, &mut tests, &mut test_time)
            .await?
        {
            if snap.config_map.is_some() && excl.configmap.is_none() {
                excl.hold_configmap(snap, None, &failure.message);
            }
            if !self
                .probe(snap, excl, &[], &all, &mut tests, &mut test_time)
                .await?
            {
                return Err(ApplyError::Base(failure));
            }
        }
        let mut on: Vec<ResourceRef> = Vec::new();
        for r in &all {
            if excl.ingresses.contains_key(r) {
                continue;
            }
            on.push(r.clone());
            if !self
                .probe(snap, excl, &on, &all, &mut tests, &mut test_time)
                .await?
            {
                on.pop();
                excl.exclude(snap, r, &failure.message);
            }
        }
        let filtered = excl.apply(snap, &BTreeSet::new());
        let model = Arc::new(ferrule_model::build(&filtered));
        let (_, specs) = self.files(&model)?;
        files::write_all(self.prefix(), &specs)?;
        let applied = self.activate(&model).await?;
        self.applied_configmap = filtered.config_map.clone();
        Ok(Outcome {
            applied,
            model,
            tests,
            test_time,
        })
    }

    /// The ConfigMap of the last good configuration (`None`: the defaults).
    fn last_good_configmap(&self) -> Option<Arc<ConfigMap>> {
        self.applied_configmap.clone()
    }
}

fn strip_ingresses(snap: &Snapshot) -> Snapshot {
    Snapshot {
        ingresses: Vec::new(),
        ..snap.clone()
    }
}

fn new_token() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn chown_to(dir: &Path, user: &str) {
    if let Ok(Some(u)) = nix::unistd::User::from_name(user) {
        let _ = nix::unistd::chown(dir, Some(u.uid), None);
    }
}
