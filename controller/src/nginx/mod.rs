//! Everything that writes NGINX files or runs NGINX.
//!
//! [`Dataplane::apply`] is the reload path with config safety: build the model from
//! the snapshot minus excluded resources, render, write (keeping the last good
//! files), `nginx -t`; on failure undo the write, find the resource that caused the
//! error and exclude it (or serve its last accepted version), then try again:
//! - the error's file:line names a resource through the source map (the ConfigMap's
//!   snippets are attributed to the ConfigMap, which is then held back);
//! - else bisection over the Ingresses; when even no Ingress fails, the ConfigMap is
//!   held back;
//! - shared input: when the ConfigMap changed and two Ingresses fail in one pass,
//!   one test checks whether the old ConfigMap fixes them; if so it is held back
//!   instead and their exclusions are undone;
//! - when no step makes progress: the base configuration, then one by one.

pub mod api;
pub mod emit;
pub mod fast_path;
pub mod files;
pub mod process;
pub mod procfs;
pub mod render;
pub mod safety;
pub mod stub_status;
pub mod worker_dir;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrule_model::{Model, ResourceRef, Snapshot};
use k8s_openapi::api::core::v1::ConfigMap;

use files::FileSpec;
use process::{Nginx, TestFailure};
use render::{Balancer, Rendered, Renderer};
use safety::{Excluded, Exclusions};

mod lua {
    include!(concat!(env!("OUT_DIR"), "/lua_files.rs"));
}

mod njs {
    include!(concat!(env!("OUT_DIR"), "/njs_files.rs"));
}

/// The Lua balancer's API token, relative to the prefix (read by `init_by_lua`).
const TOKEN_FILE: &str = "conf/balancer.token";

/// How long a starting NGINX may take to serve its first configuration.
const START_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// The ConfigMap that model was built with.
    applied_configmap: Option<Arc<ConfigMap>>,
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

    /// Like [`Dataplane::new`], but first adopts an NGINX master that an earlier
    /// controller process left running on the prefix (see [`Nginx::adopt`]). An
    /// adopted master keeps the balancer token, default certificate and (njs) state
    /// it loaded, so the files holding them are kept; the first apply then reloads
    /// only if the configuration differs from what it serves.
    pub async fn adopt_or_new(
        renderer: Renderer,
        nginx_binary: PathBuf,
        default_pem: Vec<u8>,
    ) -> std::io::Result<Self> {
        let mut nginx = Nginx::new(nginx_binary, renderer.options().prefix.clone())
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
        let opts = renderer.options();
        let prefix = opts.prefix.clone();
        for d in ["conf/servers", "conf/certs", "logs", "run"] {
            std::fs::create_dir_all(prefix.join(d))?;
        }
        std::fs::create_dir_all(opts.worker_path("run"))?;
        for d in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            let dir = opts.worker_path("tmp").join(d);
            std::fs::create_dir_all(&dir)?;
            if let Some(user) = opts.user.as_deref() {
                chown_to(&dir, user);
            }
        }
        let kept = adopted.is_some();
        let (token_file, default_files) = match opts.balancer {
            Balancer::Lua => (TOKEN_FILE, vec![render::DEFAULT_CERTIFICATE]),
            Balancer::Njs => (
                render::NJS_TOKEN_FILE,
                vec![render::NJS_DEFAULT_CERT, render::NJS_DEFAULT_KEY],
            ),
        };
        let kept_token = kept
            .then(|| std::fs::read_to_string(prefix.join(token_file)).ok())
            .flatten()
            .and_then(|t| parse_token(opts.balancer, &t));
        let token = kept_token.clone().unwrap_or_else(new_token);
        // The default certificate an adopted master loaded stays (and is posted).
        let kept_pem: Option<Vec<u8>> = kept
            .then(|| {
                let parts: Vec<Vec<u8>> = default_files
                    .iter()
                    .filter_map(|f| std::fs::read(default_path(opts, f)).ok())
                    .collect();
                (parts.len() == default_files.len()).then(|| parts.concat())
            })
            .flatten();
        let write_default = kept_pem.is_none();
        let default_pem = kept_pem.unwrap_or(default_pem);
        let default_certificate = split_pem(&String::from_utf8_lossy(&default_pem));
        match opts.balancer {
            Balancer::Lua => {
                install(&prefix.join("lua"), lua::LUA_FILES)?;
                if kept_token.is_none() {
                    files::atomic_write(&prefix.join(token_file), token.as_bytes(), 0o600)?;
                }
                if write_default {
                    files::atomic_write(
                        &prefix.join(render::DEFAULT_CERTIFICATE),
                        &default_pem,
                        0o600,
                    )?;
                }
            }
            // `njs/README.md`, "The nginx contract". The workers read the default
            // certificate's files at handshakes, so they belong to the worker user.
            Balancer::Njs => {
                install(&prefix.join(render::NJS_DIR), njs::NJS_FILES)?;
                std::fs::create_dir_all(opts.worker_path("conf"))?;
                if kept_token.is_none() {
                    let json = serde_json::json!({ "token": token }).to_string();
                    files::atomic_write(&prefix.join(token_file), json.as_bytes(), 0o600)?;
                }
                let (cert, key) = &default_certificate;
                for (rel, pem) in [
                    (render::NJS_DEFAULT_CERT, cert),
                    (render::NJS_DEFAULT_KEY, key),
                ] {
                    let path = opts.worker_path(rel);
                    if write_default {
                        files::atomic_write(&path, pem.as_bytes(), 0o600)?;
                    }
                    if let Some(user) = opts.user.as_deref() {
                        chown_to(&path, user);
                    }
                }
            }
        }
        let worker_uid = opts
            .user
            .as_deref()
            .and_then(|u| nix::unistd::User::from_name(u).ok().flatten())
            .map(|u| u.uid.as_raw());
        let dp = Self {
            renderer,
            nginx,
            token,
            default_certificate,
            default_pem,
            applied: None,
            applied_configmap: None,
            adopted_version: adopted.map(|a| a.version),
            verify_timeout: Duration::from_secs(10),
            dry_run: false,
            worker_uid,
        };
        if !kept {
            dp.clear_njs_state()?;
        }
        Ok(dp)
    }

    /// Empties the njs state directory. Its files name the NGINX master that wrote
    /// them, but a new master can get an old pid (a restarted container counts from
    /// 1 again): state is cleared before every start, never trusted across one.
    fn clear_njs_state(&self) -> std::io::Result<()> {
        if self.renderer.options().balancer != Balancer::Njs {
            return Ok(());
        }
        let dir = self.renderer.options().worker_path(render::NJS_STATE_DIR);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&dir)?;
        if let Some(user) = self.renderer.options().user.as_deref() {
            chown_to(&dir, user);
        }
        Ok(())
    }

    /// Makes the first apply reload when the adopted master refuses the token in the
    /// token file (an earlier controller wrote it and died before the reload that
    /// would have loaded it).
    async fn check_adopted_token(&mut self) {
        if self.adopted_version.is_none() {
            return;
        }
        let socket = self.api_socket();
        let request = api::request(
            &socket,
            "GET",
            "/configuration/version",
            Some(&self.token),
            None,
        );
        let resp = tokio::time::timeout(Duration::from_secs(5), request).await;
        if matches!(&resp, Ok(Ok(r)) if r.status == 401 || r.status == 403) {
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
        Ok((rendered, specs))
    }

    /// Writes `specs` below the prefix (and the worker directory's managed files).
    fn write(&self, specs: &BTreeMap<String, FileSpec>) -> std::io::Result<files::Change> {
        let more: Vec<PathBuf> = self
            .renderer
            .options()
            .worker_dir
            .iter()
            .map(|d| d.join(files::AUTH_DIR))
            .collect();
        files::write_managed(self.prefix(), &more, specs)
    }

    /// The reload path with config safety (see the module docs). `excl` is updated
    /// with every resource excluded on the way; the ConfigMap is held back when it
    /// breaks shared configuration.
    ///
    /// Every failing round makes progress (an Ingress excluded, its fallback dropped,
    /// or the ConfigMap held back); when it cannot, the pass falls back to testing
    /// resources one by one.
    pub async fn apply(
        &mut self,
        snap: &Snapshot,
        excl: &mut Exclusions,
    ) -> Result<Outcome, ApplyError> {
        excl.refresh(snap);
        let mut pass = Pass::new(excl);
        // An Ingress can fail twice (its new version, then its fallback), and the
        // ConfigMap can be held back twice (last good, then defaults).
        let max_rounds = 2 * snap.ingresses.len() + 4;
        for _ in 0..max_rounds {
            let served = excl.apply(snap, &BTreeSet::new());
            let model = Arc::new(ferrule_model::build(&served));
            let (rendered, specs) = self.files(&model)?;
            let change = self.write(&specs)?;
            if change.is_empty() && self.serves(rendered.version()) {
                // Exactly what NGINX serves already: no test, no reload.
                return Ok(self.served(
                    model,
                    &served,
                    excl,
                    Applied::Unchanged,
                    pass,
                    rendered.version(),
                ));
            }
            if !self.dry_run && !self.nginx.is_running() && !pass.started_untested {
                // A starting NGINX parses the configuration anyway: testing it first
                // would parse it twice (≈20 s for 10k hosts). Only a failed start
                // runs `nginx -t`, which names the culprit for config safety.
                pass.started_untested = true;
                match self.activate(rendered.version()).await {
                    Ok(applied) => {
                        return Ok(self.served(
                            model,
                            &served,
                            excl,
                            applied,
                            pass,
                            rendered.version(),
                        ));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "nginx did not start; testing the configuration")
                    }
                }
            }
            let failure = match self.test(&mut pass).await {
                Ok(()) => {
                    let applied = self.activate(rendered.version()).await?;
                    return Ok(self.served(
                        model,
                        &served,
                        excl,
                        applied,
                        pass,
                        rendered.version(),
                    ));
                }
                Err(f) => f,
            };
            // Keep the last good files on disk: NGINX may restart or reload at any time.
            files::rollback(change)?;
            let culprit = match self.locate(&failure, &rendered) {
                Some(r) => Ok((r, failure)),
                None => self.bisect(snap, excl, &mut pass, failure).await?,
            };
            let progress = match culprit {
                Ok((r, failure)) if r.kind == "Ingress" => {
                    self.ingress_failed(snap, excl, &mut pass, r, &failure)
                        .await?
                }
                // The ConfigMap's own lines, or a failure even without any Ingress.
                Ok((_, failure)) | Err(failure) => {
                    let message = format!(
                        "nginx -t failed: {}; not applied, the last good ConfigMap stays in use",
                        failure.message
                    );
                    self.blame_configmap(snap, excl, &mut pass, &message)
                }
            };
            if !progress {
                return self.one_by_one(snap, excl, pass).await;
            }
        }
        tracing::error!("config safety did not converge");
        self.one_by_one(snap, excl, pass).await
    }

    /// Whether the running NGINX has loaded the files of `version`, given that they
    /// are the files on disk.
    fn serves(&mut self, version: &str) -> bool {
        let loaded = self.adopted_version.as_ref().is_none_or(|v| v == version);
        loaded && self.nginx.is_running() && !self.dry_run
    }

    /// Records a successful pass: what NGINX serves now, and each resource's last
    /// accepted version (the fallback of later broken edits).
    fn served(
        &mut self,
        model: Arc<Model>,
        served: &Snapshot,
        excl: &mut Exclusions,
        applied: Applied,
        pass: Pass,
        version: &str,
    ) -> Outcome {
        self.applied = Some(model.clone());
        self.applied_configmap = served.config_map.clone();
        self.adopted_version = None;
        excl.remember(served);
        Outcome {
            applied,
            model,
            tests: pass.tests,
            test_time: pass.test_time,
            refused: pass.refused,
            version: version.to_owned(),
        }
    }

    /// `nginx -t` on the files in the prefix, counted in `pass`.
    async fn test(&self, pass: &mut Pass) -> Result<(), TestFailure> {
        let started = Instant::now();
        let result = self.nginx.test().await;
        pass.tests += 1;
        pass.test_time += started.elapsed();
        pass.refused += usize::from(result.is_err());
        result
    }

    /// Excludes an Ingress NGINX rejected; returns false when that changed nothing.
    ///
    /// Shared input: when the ConfigMap changed and a second resource fails in this
    /// pass, one extra test checks whether the last two pass with the last good
    /// ConfigMap. If they do, the ConfigMap is blamed and held back instead: the
    /// pass's exclusions are undone, and nothing reloads for a change that was not
    /// applied. The check keeps a harmless ConfigMap edit from being blamed for
    /// Ingresses that are broken on their own.
    async fn ingress_failed(
        &mut self,
        snap: &Snapshot,
        excl: &mut Exclusions,
        pass: &mut Pass,
        r: ResourceRef,
        failure: &TestFailure,
    ) -> Result<bool, ApplyError> {
        let before = excl.ingresses.get(&r).cloned();
        excl.exclude(snap, &r, &failure.message);
        if excl.ingresses.get(&r) == before.as_ref() {
            return Ok(false);
        }
        if !pass.failed.contains(&r) {
            pass.failed.push(r);
        }
        if pass.failed.len() < 2 || !self.configmap_suspect(snap, excl) {
            return Ok(true);
        }
        let pair = pass.failed[pass.failed.len() - 2..].to_vec();
        let mut trial = excl.clone();
        for p in &pair {
            match pass.start.get(p) {
                Some(e) => trial.ingresses.insert(p.clone(), e.clone()),
                None => trial.ingresses.remove(p),
            };
        }
        trial.hold_configmap(snap, self.applied_configmap.clone(), "");
        if self
            .probe(snap, &trial, &BTreeSet::new(), pass)
            .await?
            .is_ok()
        {
            let message = format!(
                "this ConfigMap change broke the configuration of {} and {} ({}); \
                 not applied, the last good ConfigMap stays in use",
                pair[0], pair[1], failure.message
            );
            self.blame_configmap(snap, excl, pass, &message);
        }
        Ok(true)
    }

    /// Holds the ConfigMap back (the last good one stays in use) and retries the
    /// Ingresses excluded earlier in this pass, which may have failed because of it.
    /// Returns false when the ConfigMap did not change, so cannot be the cause.
    fn blame_configmap(
        &self,
        snap: &Snapshot,
        excl: &mut Exclusions,
        pass: &mut Pass,
        message: &str,
    ) -> bool {
        if !self.configmap_suspect(snap, excl) {
            return false;
        }
        excl.ingresses = pass.start.clone();
        pass.failed.clear();
        excl.hold_configmap(snap, self.applied_configmap.clone(), message);
        true
    }

    /// Whether the snapshot's ConfigMap differs from the one NGINX last accepted (at
    /// startup: whether there is one) and is not held back already.
    fn configmap_suspect(&self, snap: &Snapshot, excl: &Exclusions) -> bool {
        let fp = |cm: &Option<Arc<ConfigMap>>| cm.as_deref().map(safety::configmap_fingerprint);
        excl.configmap.is_none()
            && snap.config_map.is_some()
            && fp(&snap.config_map) != fp(&self.applied_configmap)
    }

    /// Reloads (or starts) NGINX with the files just written and waits for the new
    /// workers.
    async fn activate(&mut self, version: &str) -> Result<Applied, ApplyError> {
        let applied = if self.dry_run {
            Applied::Started
        } else if self.nginx.is_running() {
            self.nginx.reload()?;
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
            self.clear_njs_state()?;
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
                if !self.nginx.is_running() || started.elapsed() > START_TIMEOUT {
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

    /// Maps an `nginx -t` error to the Ingress or ConfigMap that produced the named
    /// line. Lines Ferrule generated on its own (e.g. the default server) name nothing.
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

    /// The Ingresses in the configuration (sorted, so bisection is deterministic).
    fn candidates(&self, snap: &Snapshot, excl: &Exclusions) -> Vec<ResourceRef> {
        let owned: BTreeSet<ResourceRef> =
            ferrule_model::owned_ingresses(snap).into_iter().collect();
        let on: BTreeSet<ResourceRef> = excl
            .apply(snap, &BTreeSet::new())
            .ingresses
            .iter()
            .map(|i| safety::ingress_ref(i))
            .filter(|r| owned.contains(r))
            .collect();
        on.into_iter().collect()
    }

    /// For an error that names no resource: finds one Ingress whose configuration
    /// fails, by switching off halves of the candidates, with the error it causes
    /// (which may differ from `failure` when several are broken). `Err` with the error
    /// of the configuration without any Ingress when that fails too: the shared
    /// configuration is at fault.
    async fn bisect(
        &mut self,
        snap: &Snapshot,
        excl: &Exclusions,
        pass: &mut Pass,
        failure: TestFailure,
    ) -> Result<Result<(ResourceRef, TestFailure), TestFailure>, ApplyError> {
        let candidates = self.candidates(snap, excl);
        let all_but_first =
            |k: usize| -> BTreeSet<ResourceRef> { candidates[k..].iter().cloned().collect() };
        if let Err(base) = self.probe(snap, excl, &all_but_first(0), pass).await? {
            return Ok(Err(base));
        }
        // Invariant: the first `lo` candidates pass together, the first `hi` fail
        // together with `failure` (all of them failed in the test that brought us here).
        let (mut lo, mut hi, mut failure) = (0usize, candidates.len(), failure);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            match self.probe(snap, excl, &all_but_first(mid), pass).await? {
                Err(f) => (hi, failure) = (mid, f),
                Ok(()) => lo = mid,
            }
        }
        match hi.checked_sub(1) {
            Some(i) => Ok(Ok((candidates[i].clone(), failure))),
            // Nothing to switch off, yet the base passed: treat as a shared failure.
            None => Ok(Err(failure)),
        }
    }

    /// Tests the configuration of `excl` with `off` switched off as well; leaves the
    /// last good files in place.
    async fn probe(
        &mut self,
        snap: &Snapshot,
        excl: &Exclusions,
        off: &BTreeSet<ResourceRef>,
        pass: &mut Pass,
    ) -> Result<Result<(), TestFailure>, ApplyError> {
        let model = ferrule_model::build(&excl.apply(snap, off));
        let (_, specs) = self.files(&model)?;
        let change = self.write(&specs)?;
        let result = self.test(pass).await;
        files::rollback(change)?;
        Ok(result)
    }

    /// Last resort: the base configuration (no Ingress; the last good ConfigMap, else
    /// the defaults, when even that fails), then every Ingress added one by one, each
    /// kept only if `nginx -t` accepts it. Exclusions found earlier in the pass are
    /// forgotten: they were found with a configuration that did not converge.
    async fn one_by_one(
        &mut self,
        snap: &Snapshot,
        excl: &mut Exclusions,
        mut pass: Pass,
    ) -> Result<Outcome, ApplyError> {
        tracing::warn!("config safety falling back to adding resources one by one");
        excl.ingresses = pass.start.clone();
        let every: BTreeSet<ResourceRef> = snap
            .ingresses
            .iter()
            .map(|i| safety::ingress_ref(i))
            .collect();
        while let Err(f) = self.probe(snap, excl, &every, &mut pass).await? {
            let last_good = match &excl.configmap {
                None if snap.config_map.is_some() => self.applied_configmap.clone(),
                Some(h) if h.last_good.is_some() => None,
                _ => return Err(ApplyError::Base(f)),
            };
            let message = format!(
                "nginx -t failed: {}; not applied, {} in use",
                f.message,
                if last_good.is_some() {
                    "the last good ConfigMap stays"
                } else {
                    "the defaults are"
                }
            );
            excl.hold_configmap(snap, last_good, &message);
        }
        let candidates = self.candidates(snap, excl);
        let mut off: BTreeSet<ResourceRef> = candidates.iter().cloned().collect();
        for r in &candidates {
            off.remove(r);
            // A second round tests the fallback when the current version fails.
            while let Err(f) = self.probe(snap, excl, &off, &mut pass).await? {
                if !excl.exclude(snap, r, &f.message) {
                    break;
                }
            }
        }
        let served = excl.apply(snap, &BTreeSet::new());
        let model = Arc::new(ferrule_model::build(&served));
        let (rendered, specs) = self.files(&model)?;
        let change = self.write(&specs)?;
        let applied = if change.is_empty() && self.serves(rendered.version()) {
            Applied::Unchanged
        } else {
            self.activate(rendered.version()).await?
        };
        Ok(self.served(model, &served, excl, applied, pass, rendered.version()))
    }
}

/// Bookkeeping of one [`Dataplane::apply`] pass.
struct Pass {
    /// `nginx -t` runs so far.
    tests: usize,
    /// Their total duration.
    test_time: Duration,
    /// Of those, the runs that failed.
    refused: usize,
    /// The Ingress exclusions when the pass began (restored when the ConfigMap is
    /// blamed instead).
    start: BTreeMap<ResourceRef, Excluded>,
    /// Ingresses that failed in this pass, in order, each once.
    failed: Vec<ResourceRef>,
    /// NGINX was started once in this pass without a test first.
    started_untested: bool,
}

impl Pass {
    fn new(excl: &Exclusions) -> Self {
        Self {
            tests: 0,
            test_time: Duration::ZERO,
            refused: 0,
            start: excl.ingresses.clone(),
            failed: Vec::new(),
            started_untested: false,
        }
    }
}

/// The token in a token file: plain text (Lua) or `{"token": "..."}` (njs).
fn parse_token(balancer: Balancer, text: &str) -> Option<String> {
    let token = match balancer {
        Balancer::Lua => text.trim().to_owned(),
        Balancer::Njs => serde_json::from_str::<serde_json::Value>(text)
            .ok()?
            .get("token")?
            .as_str()?
            .trim()
            .to_owned(),
    };
    (!token.is_empty()).then_some(token)
}

fn new_token() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes balancer sources (path relative to `dir`, contents) that differ on disk.
fn install(dir: &Path, sources: &[(&str, &str)]) -> std::io::Result<()> {
    for (rel, text) in sources {
        let path = dir.join(rel);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            files::atomic_write(&path, text.as_bytes(), 0o644)?;
        }
    }
    Ok(())
}

/// (certificates, private keys) of a PEM text, each a sequence of whole blocks.
pub fn split_pem(pem: &str) -> (String, String) {
    let (mut certs, mut keys) = (String::new(), String::new());
    let mut block = String::new();
    for line in pem.lines() {
        if line.starts_with("-----BEGIN ") {
            block.clear();
        }
        block.push_str(line);
        block.push('\n');
        if let Some(label) = line.strip_prefix("-----END ") {
            if label.contains("PRIVATE KEY") {
                keys.push_str(&block);
            } else {
                certs.push_str(&block);
            }
            block.clear();
        }
    }
    (certs, keys)
}

/// Where a default certificate file is: the worker processes read njs's, the
/// master Lua's.
fn default_path(opts: &render::RenderOptions, rel: &str) -> PathBuf {
    match opts.balancer {
        Balancer::Lua => opts.prefix.join(rel),
        Balancer::Njs => opts.worker_path(rel),
    }
}

fn chown_to(dir: &Path, user: &str) {
    if let Ok(Some(u)) = nix::unistd::User::from_name(user) {
        let _ = nix::unistd::chown(dir, Some(u.uid), None);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_pem_separates_certificates_from_keys() {
        let pem = String::from_utf8(crate::tls::self_signed_default().unwrap()).unwrap();
        let (cert, key) = super::split_pem(&pem);
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----\n"), "{cert}");
        assert!(cert.trim_end().ends_with("-----END CERTIFICATE-----"));
        assert!(!cert.contains("PRIVATE"));
        assert!(key.starts_with("-----BEGIN ") && key.contains("PRIVATE KEY-----\n"));
        assert!(!key.contains("CERTIFICATE"));
        // Whole blocks, nothing lost.
        assert_eq!(cert.len() + key.len(), pem.trim_end().len() + 1);
    }
}
