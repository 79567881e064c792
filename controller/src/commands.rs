//! The subcommands that run NGINX or write its files.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use ferrule::nginx::process::Launcher;
use ferrule::nginx::render::{RenderOptions, Renderer};
use ferrule::nginx::safety::Exclusions;
use ferrule::nginx::{Dataplane, files};
use ferrule::status::Shared;
use ferrule::sync::{self, SyncOptions};
use ferrule_model::{Model, Settings, Severity, Snapshot};

/// How often ExternalName Services' names are looked up again (ingress-nginx's
/// Lua balancer resolves them at each sync; NGINX's resolver keeps an answer 30 s
/// by default).
const EXTERNAL_NAMES_REFRESH: Duration = Duration::from_secs(30);

/// Kubernetes mode settings.
pub struct KubeArgs {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: Option<String>,
    pub publish: Option<ferrule::kube::status::Publish>,
    pub lease: ferrule::kube::leader::LeaseOptions,
}

/// Everything `ferrule run` needs.
pub struct RunArgs {
    pub manifests: Option<PathBuf>,
    pub kube: KubeArgs,
    pub status: SocketAddr,
    /// `/status/resources` on the status port too, to anyone who reaches it.
    pub status_resources_public: bool,
    /// The status socket (`/status/resources` for a local operator); `None`: in
    /// the NGINX prefix.
    pub status_socket: Option<PathBuf>,
    pub coalesce: Duration,
    pub min_reload_interval: Duration,
    pub shutdown_grace_period: Duration,
    pub render: RenderOptions,
    /// Ferrule's C fast path module to use if NGINX loads it (decided once the status
    /// port serves: the check runs NGINX).
    pub fast_path_module: Option<PathBuf>,
    /// How NGINX's per-request metrics are exported on `/metrics`.
    pub request_metrics: ferrule::scrape::ExportOptions,
    /// How NGINX runs: our child, or the supervisor's in its own container.
    pub launcher: Launcher,
    pub settings: Settings,
    pub config_map: Option<(String, String)>,
    /// The admission webhook, if `--admission-port` is set.
    pub admission: Option<ferrule::admission::AdmissionOptions>,
}

/// `ferrule run`: the whole loop in standalone mode.
pub async fn run(mut args: RunArgs) -> Result<()> {
    let default_pem = ferrule::tls::self_signed_default()?;
    let identity = ferrule::metrics::Identity::from_env(&args.settings.controller);
    // The request metrics carry the same identity: dashboards chain their variables
    // from config_hash's labels.
    let export = &mut args.request_metrics;
    export.controller_class.clone_from(&identity.class);
    export.controller_namespace.clone_from(&identity.namespace);
    export.controller_pod.clone_from(&identity.pod);
    let shared = Arc::new(Shared::new(identity));
    shared
        .metrics
        .nginx
        .watch(args.render.prefix.clone(), &args.launcher);
    let listener = tokio::net::TcpListener::bind(args.status)
        .await
        .with_context(|| format!("binding the status port {}", args.status))?;
    drop(listener);
    // The webhook's listener and certificate are checked before anything starts: a
    // webhook that cannot serve must not fail the API server's requests silently.
    let admission = match args.admission.clone() {
        None => None,
        Some(opts) => {
            use ferrule::admission::{CertificateSource, Certificates};
            let certificates = match &opts.certificate {
                CertificateSource::Files { cert, key } => Certificates::load(cert, key)
                    .context("loading the admission webhook certificate")?,
                CertificateSource::Managed(m) if args.manifests.is_some() => anyhow::bail!(
                    "--admission-secret {}/{} needs the Kubernetes API, not --manifests",
                    m.namespace,
                    m.secret
                ),
                // Written from the Secret once it is read (or issued).
                CertificateSource::Managed(m) => {
                    Certificates::pending(&m.cert_file(), &m.key_file())
                }
            };
            let listener = tokio::net::TcpListener::bind(opts.addr)
                .await
                .with_context(|| format!("binding the admission port {}", opts.addr))?;
            Some((opts, Arc::new(certificates), listener))
        }
    };
    tokio::spawn({
        let shared = shared.clone();
        async move {
            if let Err(e) =
                ferrule::status::serve(args.status, shared, args.status_resources_public).await
            {
                tracing::error!(error = %e, "status port failed");
            }
        }
    });
    let socket = (args.status_socket.clone())
        .unwrap_or_else(|| args.render.prefix.join(ferrule::status::SOCKET));
    tokio::spawn({
        let (shared, prefix) = (shared.clone(), args.render.prefix.clone());
        async move {
            let path = socket.display().to_string();
            if let Err(e) = ferrule::status::serve_resources(socket, prefix, shared).await {
                tracing::error!(error = %e, socket = path, "status socket failed");
            }
        }
    });
    if let Launcher::Supervisor(socket) = &args.launcher {
        // Its container may start after this one: the fast path's checks run there.
        ferrule::nginx::supervisor::wait_for(socket).await;
    }
    let module = args.fast_path_module.take();
    ferrule::nginx::fast_path::enable(&mut args.render, &args.launcher, module.as_deref()).await;
    args.settings.input_headers = args.render.input_header;
    // A restarted controller takes over the NGINX it left running, without a reload.
    let dataplane = Dataplane::adopt_or_new(
        Renderer::new(args.render.clone()),
        args.launcher.clone(),
        default_pem,
    )
    .await
    .with_context(|| {
        format!(
            "preparing the NGINX prefix {}",
            args.render.prefix.display()
        )
    })?;
    let source = args.render.metrics_source();
    if args.render.metrics.is_some() && source == ferrule::nginx::render::MetricsSource::None {
        tracing::warn!(
            "no per-request metrics with --balancer njs without Ferrule's C module \
             (ngx_http_ferrule_module.so in --nginx-modules, make deps): this NGINX's njs \
             has no shared dictionary (js_shared_dict_zone, njs 0.8.0); /metrics has only \
             the controller's"
        );
    }
    let _ = shared.request_metrics.set(ferrule::scrape::Scraper::new(
        dataplane.api_socket(),
        dataplane.token().to_owned(),
        source,
        args.request_metrics.clone(),
    ));
    // The source writes `tx`; the ExternalName stage passes its snapshots on to `rx`.
    let (tx, source_rx) = tokio::sync::watch::channel(None);
    let (resolved_tx, rx) = tokio::sync::watch::channel(None);
    tokio::spawn(ferrule::source::external_names::run(
        source_rx,
        resolved_tx,
        EXTERNAL_NAMES_REFRESH,
    ));
    let (applied_tx, applied_rx) = tokio::sync::watch::channel(None);
    let managed_certificate = admission
        .as_ref()
        .and_then(|(opts, _, _)| match &opts.certificate {
            ferrule::admission::CertificateSource::Managed(m) => Some(m.clone()),
            ferrule::admission::CertificateSource::Files { .. } => None,
        });
    if let Some((opts, certificates, listener)) = admission {
        let webhook = ferrule::admission::Webhook::new(
            rx.clone(),
            opts.strict_tls,
            opts.namespace.clone(),
            shared.clone(),
        );
        tracing::info!(address = %opts.addr, path = ferrule::admission::PATH, "admission webhook serving");
        tokio::spawn(ferrule::admission::serve(
            listener,
            certificates,
            Arc::new(webhook),
            ferrule::admission::Listening::new(&args.settings.limits),
        ));
    }
    match &args.manifests {
        Some(dir) => {
            tokio::spawn(ferrule::source::manifests::watch(
                dir.clone(),
                args.settings.clone(),
                args.config_map.clone(),
                Duration::from_millis(200),
                tx,
                shared.metrics.manifest_errors.clone(),
            ));
            tracing::info!(manifests = %dir.display(), prefix = %args.render.prefix.display(), "ferrule running in standalone mode");
        }
        None => {
            let client = ferrule::source::kube::client(args.kube.kubeconfig.as_deref()).await?;
            let opts = ferrule::source::kube::KubeSourceOptions {
                namespace: args.kube.namespace.clone(),
                config_map: args.config_map.clone(),
                coalesce: Duration::from_millis(10),
            };
            let ingresses =
                ferrule::source::kube::start(client.clone(), args.settings.clone(), opts, tx);
            let identity = args.kube.lease.identity.clone();
            let leader = ferrule::kube::leader::elect(client.clone(), args.kube.lease.clone())
                .await
                .context("starting leader election")?;
            if let Some(opts) = managed_certificate {
                tokio::spawn(ferrule::kube::webhook_certificate::run(
                    client.clone(),
                    opts,
                    leader.clone(),
                ));
            }
            tokio::spawn(leader_metric(
                leader.clone(),
                args.kube.lease.name.clone(),
                shared.clone(),
            ));
            tokio::spawn(ferrule::kube::writer::run(
                client,
                args.kube.publish.clone(),
                identity,
                leader,
                applied_rx,
                rx.clone(),
                ingresses,
                shared.clone(),
            ));
            tracing::info!(prefix = %args.render.prefix.display(), "ferrule running against the Kubernetes API");
        }
    }
    let opts = SyncOptions {
        coalesce: args.coalesce,
        min_reload_interval: args.min_reload_interval,
        shutdown_grace_period: args.shutdown_grace_period,
    };
    sync::run(rx, dataplane, shared, opts, applied_tx, shutdown_signal()).await
}

/// Keeps `nginx_ingress_controller_leader_election_status` current.
async fn leader_metric(
    mut leader: tokio::sync::watch::Receiver<bool>,
    lease: String,
    shared: Arc<Shared>,
) {
    loop {
        let leading = *leader.borrow_and_update();
        shared.metrics.controller.leader(&lease, leading);
        if leader.changed().await.is_err() {
            return;
        }
    }
}

/// SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

/// `ferrule render`: writes the files of `model` under `opts.prefix`.
pub fn render(model: &Model, opts: RenderOptions) -> Result<usize> {
    let prefix = opts.prefix.clone();
    let default_pem = ferrule::tls::self_signed_default()?;
    let dataplane = Dataplane::new(Renderer::new(opts), PathBuf::from("nginx"), default_pem)?;
    let (_, specs) = dataplane.files(model)?;
    files::write_all(&prefix, &specs)?;
    Ok(specs.len())
}

/// The migration report of `ferrule validate`: per Ingress Ferrule serves, what it
/// does with each annotation under the prefix (supported, ignored with a Warning,
/// or rejecting the Ingress). Invalid values follow among the problems.
fn migration_report(snap: &Snapshot) {
    use ferrule_model::annotations::registry::{Verdict, verdict};
    let owned: std::collections::BTreeSet<_> =
        ferrule_model::owned_ingresses(snap).into_iter().collect();
    let prefix = format!("{}/", snap.settings.annotations_prefix);
    for ing in &snap.ingresses {
        let r = ferrule::nginx::safety::ingress_ref(ing);
        if !owned.contains(&r) {
            continue;
        }
        let ours: Vec<(&String, &str)> = ing
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter_map(|(k, _)| k.strip_prefix(&prefix).map(|name| (k, name)))
            .collect();
        if ours.is_empty() {
            continue;
        }
        println!("{r}: annotations:");
        for (full, name) in ours {
            match verdict(name, full) {
                Verdict::Supported => println!("  {full}: supported"),
                Verdict::Ignored(why) => println!("  {full}: ignored with a warning: {why}"),
                Verdict::Rejecting(why) => println!("  {full}: rejects the Ingress: {why}"),
            }
        }
    }
}

/// `ferrule validate`: config safety without serving; prints the migration report,
/// then problems per resource.
pub async fn validate(
    snap: &Snapshot,
    model: &Model,
    nginx: &std::path::Path,
    mut opts: RenderOptions,
) -> Result<bool> {
    let dir = tempfile::tempdir()?;
    opts.prefix = dir.path().to_owned();
    opts.user = None;
    let default_pem = ferrule::tls::self_signed_default()?;
    let mut dataplane = Dataplane::new(Renderer::new(opts), nginx.to_owned(), default_pem)?;
    dataplane.dry_run = true;
    let mut excl = Exclusions::default();
    dataplane
        .apply(snap, None, &mut excl)
        .await
        .context("nginx -t")?;
    migration_report(snap);
    let mut rejected = false;
    for (r, e) in &excl.ingresses {
        rejected = true;
        println!("{r}: rejected: nginx -t failed: {}", e.message);
    }
    if let Some(held) = &excl.configmap {
        rejected = true;
        println!("ConfigMap: rejected: {}", held.message);
    }
    for p in &model.problems {
        let level = match p.severity {
            Severity::Error => {
                rejected = true;
                "error"
            }
            Severity::Warning => "warning",
        };
        println!("{}: {level}: {}", p.resource, p.message);
    }
    if !rejected {
        println!(
            "ok: {} servers, {} backends",
            model.servers.len(),
            model.backends.len()
        );
    }
    Ok(!rejected)
}
