//! The `ferrule` binary: a thin CLI over the library crates.

use std::path::PathBuf;

use std::io::Write;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ferrule_model::{Diff, Settings};

use ferrule::nginx::process::Launcher;
use ferrule::nginx::render::{Balancer, RenderOptions};
use ferrule::source;

mod commands;
mod compat_flags;

#[derive(Parser)]
#[command(
    name = "ferrule",
    version,
    about = "Kubernetes Ingress controller driving NGINX"
)]
struct Cli {
    /// Log lines as text (coloured only on a terminal) or as JSON, one object per
    /// line with timestamp, level, target, message and the event's fields.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How the controller writes its log (to stderr).
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for cluster log pipelines.
    Json,
}

/// Logs to stderr at `RUST_LOG` (default `info`): colour only when stderr is a
/// terminal (a file or a pipe gets no escape codes) and `NO_COLOR` is not set.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(colour).init();
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
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
    /// Reject an Ingress for any invalid annotation value. By default, as in
    /// ingress-nginx, an invalid value of a key that does not restrict access is a
    /// Warning on the Ingress and the key is ignored; the webhook then warns too.
    #[arg(long)]
    strict_annotations: bool,
    /// Proxy to endpoints whose address is loopback (127.0.0.0/8, ::1), link-local
    /// (169.254.0.0/16, fe80::/10) or unspecified. By default they are left out, with a
    /// warning on the Ingresses that route to them: whoever writes an EndpointSlice
    /// could otherwise route a host to the controller's status port or to the node's
    /// own services. For standalone mode with backends on this machine. The same holds
    /// for the OCSP responders that certificates name (ConfigMap enable-ocsp).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false,
          action = clap::ArgAction::Set, value_name = "BOOL")]
    allow_local_endpoints: bool,
    /// `NAMESPACE/NAME` of the controller ConfigMap.
    #[arg(long)]
    configmap: Option<String>,
    /// `NAMESPACE/NAME` of the ConfigMap of TCP services, as ingress-nginx's: each
    /// key a port NGINX listens on, each value `namespace/service:port`, optionally
    /// followed by `:PROXY` (clients send the PROXY protocol) and `:PROXY` (NGINX
    /// sends it to the backend). Needs NGINX's stream module and njs for it.
    #[arg(long, value_parser = configmap_ref)]
    tcp_services_configmap: Option<String>,
    /// `NAMESPACE/NAME` of the ConfigMap of UDP services (the same format, without
    /// the PROXY protocol).
    #[arg(long, value_parser = configmap_ref)]
    udp_services_configmap: Option<String>,
    /// Honour the `ssl-passthrough` annotation: NGINX's stream module takes the
    /// HTTPS port, sends those hosts' TLS by SNI to their backend without
    /// terminating it, and hands every other connection to the HTTPS servers (over
    /// a unix socket, with the client's address in the PROXY protocol). Needs
    /// NGINX's stream module and njs for it.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false,
          action = clap::ArgAction::Set, value_name = "BOOL")]
    enable_ssl_passthrough: bool,
    /// Refuse Ingresses with `spec.defaultBackend` (catch-all Ingresses), as
    /// ingress-nginx's flag: each is reported and not served.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false,
          action = clap::ArgAction::Set, value_name = "BOOL")]
    disable_catch_all: bool,
    /// The most bytes Ferrule reads of one Ingress (annotations, hosts, paths,
    /// Service names); a larger Ingress is rejected alone.
    #[arg(long, default_value_t = ferrule_model::Limits::default().ingress_bytes)]
    max_ingress_bytes: usize,
    /// The most bytes of one annotation value.
    #[arg(long, default_value_t = ferrule_model::Limits::default().annotation_value_bytes)]
    max_annotation_value_bytes: usize,
    /// The most path rules of one Ingress.
    #[arg(long, default_value_t = ferrule_model::Limits::default().paths_per_ingress)]
    max_paths_per_ingress: usize,
    /// The most path rules of one Ingress whose paths are regular expressions.
    #[arg(long, default_value_t = ferrule_model::Limits::default().regex_paths_per_ingress)]
    max_regex_paths_per_ingress: usize,
    /// The most regex path rules of one host, from every Ingress that serves it (the
    /// oldest Ingresses' are kept).
    #[arg(long, default_value_t = ferrule_model::Limits::default().regex_paths_per_host)]
    max_regex_paths_per_host: usize,
    /// The most hosts (rules and TLS entries) of one Ingress.
    #[arg(long, default_value_t = ferrule_model::Limits::default().hosts_per_ingress)]
    max_hosts_per_ingress: usize,
    /// Prefix of the annotations Ferrule reads, as ingress-nginx's flag.
    #[arg(long, default_value = ferrule_model::snapshot::DEFAULT_ANNOTATIONS_PREFIX, value_parser = annotations_prefix)]
    annotations_prefix: String,
}

/// `NAMESPACE/NAME` of a ConfigMap (a bare name is in `default`, as in ingress-nginx),
/// returned with its namespace.
fn configmap_ref(v: &str) -> Result<String, String> {
    let (ns, name) = v.split_once('/').unwrap_or(("default", v));
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 253
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if label(ns) && label(name) && !ns.contains('.') {
        Ok(format!("{ns}/{name}"))
    } else {
        Err("expected NAMESPACE/NAME of a ConfigMap".to_owned())
    }
}

/// An annotation prefix: a DNS subdomain, as Kubernetes requires of the part of an
/// annotation key before its `/`.
fn annotations_prefix(v: &str) -> Result<String, String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if v.len() <= 253 && v.split('.').all(label_ok) {
        Ok(v.to_owned())
    } else {
        Err("expected a DNS subdomain such as nginx.ingress.kubernetes.io".to_owned())
    }
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
            strict_annotations: self.strict_annotations,
            annotations_prefix: self.annotations_prefix.clone(),
            allow_local_endpoints: self.allow_local_endpoints,
            limits: ferrule_model::Limits {
                ingress_bytes: self.max_ingress_bytes,
                annotation_value_bytes: self.max_annotation_value_bytes,
                paths_per_ingress: self.max_paths_per_ingress,
                regex_paths_per_ingress: self.max_regex_paths_per_ingress,
                regex_paths_per_host: self.max_regex_paths_per_host,
                hosts_per_ingress: self.max_hosts_per_ingress,
            },
            tcp_services: self.tcp_services_configmap.clone(),
            udp_services: self.udp_services_configmap.clone(),
            ssl_passthrough: self.enable_ssl_passthrough,
            disable_catch_all: self.disable_catch_all,
            // `ferrule run` says which balancer serves and whether its module loads.
            ocsp_stapling: true,
            input_headers: true,
            // `ferrule run` adds its ports; the others serve none.
            reserved_ports: Vec::new(),
            now,
        }
    }

    /// The ConfigMap read: `--configmap NAME` without a namespace is `default/NAME`.
    fn config_map(&self) -> Option<(&str, &str)> {
        self.configmap
            .as_deref()
            .map(|c| c.split_once('/').unwrap_or(("default", c)))
    }

    /// `namespace/name` of the ConfigMap read, as the rendered files name it in
    /// their source markers.
    fn config_map_ref(&self) -> Option<String> {
        self.config_map().map(|(ns, name)| format!("{ns}/{name}"))
    }

    fn model(&self, dir: &std::path::Path) -> Result<ferrule_model::Model> {
        self.model_with(dir, self.settings())
    }

    /// [`Self::settings`] with what the NGINX of `opts` can do, as `ferrule run` learns
    /// it: so that `render` and `validate` report what `run` would.
    fn settings_for(&self, opts: &RenderOptions) -> Settings {
        Settings {
            ocsp_stapling: opts.balancer == Balancer::Lua,
            input_headers: opts.input_header,
            ..self.settings()
        }
    }

    fn model_with(
        &self,
        dir: &std::path::Path,
        settings: Settings,
    ) -> Result<ferrule_model::Model> {
        let snap = source::manifests::load(dir, settings, self.config_map())
            .with_context(|| format!("loading manifests from {}", dir.display()))?;
        Ok(ferrule_model::build(&snap))
    }
}

/// Where NGINX lives and listens.
#[derive(clap::Args, Clone)]
struct NginxFlags {
    /// The NGINX binary.
    #[arg(long, default_value = "nginx")]
    nginx_binary: PathBuf,
    /// Directory holding every NGINX file (config, certificates, pid, sockets, logs).
    #[arg(long, default_value = "/var/lib/ferrule/nginx")]
    nginx_prefix: PathBuf,
    /// Address of the proxy listeners (`*` for every address).
    #[arg(long, default_value = "*")]
    listen_address: String,
    /// Plain HTTP port.
    #[arg(long, default_value_t = 80)]
    http_port: u16,
    /// HTTPS port.
    #[arg(long, default_value_t = 443)]
    https_port: u16,
    /// NGINX `worker_processes`.
    #[arg(long, default_value = "auto")]
    worker_processes: String,
    /// Directory of NGINX dynamic modules (ndk and lua, or js for `--balancer njs`).
    #[arg(long, default_value = "/usr/lib/nginx/modules")]
    nginx_modules: PathBuf,
    /// The balancer inside NGINX (picks peers, serves certificates).
    #[arg(long, value_enum, default_value_t = Balancer::Lua)]
    balancer: Balancer,
    /// MiB of NGINX shared memory for the Lua balancer's certificates (each distinct
    /// chain and key once, however many hosts name it; 256 MiB holds about 20,000
    /// with 5 KB of PEM, and at least 2,000 of the 128 KiB a Secret may have). Only
    /// the pages in use take memory. A new size needs a new NGINX (a new pod), not a
    /// reload: NGINX would start the zone empty.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    certificate_store_size: u32,
    /// Do not use Ferrule's C fast path (`ngx_http_ferrule_module.so` in
    /// --nginx-modules, built by `make deps`), which balances plain round-robin
    /// backends without entering Lua. By default it is used when NGINX loads it.
    /// The same module counts the request metrics (with --balancer njs, the only
    /// way they are counted), and its stream twin gives TCP/UDP connections their
    /// retries (`ngx_stream_ferrule_module.so`): this turns those off too.
    #[arg(long)]
    no_fast_path: bool,
    /// Send NGINX's error log to stderr and its access log to stdout (a container's
    /// logs; the image's default command sets it) instead of files in
    /// `--nginx-prefix`/logs.
    #[arg(long)]
    nginx_log_stdio: bool,
    #[command(flatten)]
    metrics: MetricsFlags,
}

/// Per-request metrics (ingress-nginx's `nginx_ingress_controller_requests` and its
/// histograms), with ingress-nginx's flags where it has them.
#[derive(clap::Args, Clone)]
struct MetricsFlags {
    /// Collect per-request metrics in NGINX's shared memory (the C module's log
    /// phase; a Lua log phase without the module; not with `--balancer njs`) and
    /// export them on `/metrics`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true,
          action = clap::ArgAction::Set, value_name = "BOOL")]
    enable_metrics: bool,
    /// Label the request metrics with the host of the server that answered (as
    /// ingress-nginx). The default server's requests have no host label.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true,
          action = clap::ArgAction::Set, value_name = "BOOL")]
    metrics_per_host: bool,
    /// Report the status label as a class (`2xx`, `4xx`, ...) instead of the code.
    #[arg(long)]
    report_status_classes: bool,
    /// Bucket bounds (seconds) of the duration histograms.
    #[arg(long, value_delimiter = ',', default_value = "0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10",
          value_parser = bucket_bound)]
    time_buckets: Vec<f64>,
    /// Bucket bounds (bytes) of the request and response size histograms.
    #[arg(long, value_delimiter = ',', default_value = "10,20,30,40,50,60,70,80,90,100",
          value_parser = bucket_bound)]
    length_buckets: Vec<f64>,
    /// Bucket bounds (bytes) of the `bytes_sent` histogram.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000,100000,1000000,10000000",
          value_parser = bucket_bound)]
    size_buckets: Vec<f64>,
    /// Request metrics not to export, by name with or without the
    /// `nginx_ingress_controller_` prefix (e.g. `bytes_sent,header_duration_seconds`).
    #[arg(long, value_delimiter = ',')]
    exclude_socket_metrics: Vec<String>,
    /// Labels to leave out of the request metrics, their series added up (fewer
    /// series for Prometheus): any of path, method, status, canary, service, host,
    /// ingress, namespace.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(
        ["path", "method", "status", "canary", "service", "host", "ingress", "namespace"]))]
    metrics_exclude_labels: Vec<String>,
    /// MiB of NGINX shared memory for the request counters (about 3 KB per
    /// location, method and status seen with the default buckets; requests that
    /// find no room are counted in `ferrule_request_metrics_dropped_total`). A new
    /// size or new buckets start from zero; any other reload keeps every count.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    metrics_store_size: u32,
}

/// A bucket bound: a finite number, not negative.
fn bucket_bound(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(b) if b.is_finite() && b >= 0.0 => Ok(b),
        _ => Err(format!("{v:?} is not a bucket bound (a number, 0 or more)")),
    }
}

impl MetricsFlags {
    fn render(&self) -> Result<Option<ferrule::nginx::render::MetricsRender>> {
        if !self.enable_metrics {
            return Ok(None);
        }
        for (flag, b) in [
            ("--time-buckets", &self.time_buckets),
            ("--length-buckets", &self.length_buckets),
            ("--size-buckets", &self.size_buckets),
        ] {
            anyhow::ensure!(
                !b.is_empty() && b.len() <= 64 && b.windows(2).all(|w| w[0] < w[1]),
                "{flag}: 1 to 64 increasing bounds"
            );
        }
        Ok(Some(ferrule::nginx::render::MetricsRender {
            time_buckets: self.time_buckets.clone(),
            length_buckets: self.length_buckets.clone(),
            size_buckets: self.size_buckets.clone(),
            zone_mib: self.metrics_store_size,
            module: false,
        }))
    }

    fn export(&self) -> ferrule::scrape::ExportOptions {
        ferrule::scrape::ExportOptions {
            per_host: self.metrics_per_host,
            status_classes: self.report_status_classes,
            exclude_metrics: self
                .exclude_socket_metrics
                .iter()
                .map(|m| {
                    m.trim()
                        .trim_start_matches(ferrule::scrape::PREFIX)
                        .to_owned()
                })
                .collect(),
            exclude_labels: self.metrics_exclude_labels.iter().cloned().collect(),
            // Set by `commands::run` from the one identity every metric carries.
            controller_class: String::new(),
            controller_namespace: String::new(),
            controller_pod: String::new(),
        }
    }
}

impl NginxFlags {
    fn render_options(&self, flags: &ModelFlags) -> Result<RenderOptions> {
        let configmap = flags.config_map_ref();
        let streams = flags.tcp_services_configmap.is_some()
            || flags.udp_services_configmap.is_some()
            || flags.enable_ssl_passthrough;
        if streams {
            for m in ferrule::nginx::render::STREAM_MODULES {
                let path = self.nginx_modules.join(m);
                anyhow::ensure!(
                    path.exists(),
                    "TCP/UDP services (--tcp-services-configmap, --udp-services-configmap) and \
                     --enable-ssl-passthrough need NGINX's stream module and njs for it, and \
                     {} does not exist (Debian: \
                     apt install libnginx-mod-stream libnginx-mod-stream-js)",
                    path.display()
                );
            }
        }
        let root = nix::unistd::geteuid().is_root();
        let prefix =
            std::path::absolute(&self.nginx_prefix).unwrap_or_else(|_| self.nginx_prefix.clone());
        Ok(RenderOptions {
            prefix,
            listen_address: self.listen_address.clone(),
            http_port: self.http_port,
            https_port: self.https_port,
            worker_processes: self.worker_processes.clone(),
            user: root.then(|| "nobody".to_owned()),
            modules: (self.balancer.modules().iter())
                .chain(
                    streams
                        .then_some(ferrule::nginx::render::STREAM_MODULES)
                        .into_iter()
                        .flatten(),
                )
                .map(|m| self.nginx_modules.join(m))
                .chain(
                    (ferrule::nginx::render::OPTIONAL_MODULES.iter())
                        .map(|m| self.nginx_modules.join(m))
                        .filter(|p| p.exists()),
                )
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            configmap,
            balancer: self.balancer,
            certificate_store_mib: self.certificate_store_size,
            fast_path: false,
            location_directive: false,
            stream_module: false,
            input_header: false,
            worker_dir: None,
            log_to_stdio: self.nginx_log_stdio,
            resolvers: ferrule::nginx::render::system_resolvers(),
            metrics: self.metrics.render()?,
            ssl_passthrough: flags.enable_ssl_passthrough,
            allow_local_endpoints: flags.allow_local_endpoints,
        })
    }

    /// [`Self::render_options`] for `ferrule run`: with a worker directory where the
    /// worker user cannot enter the prefix (`ferrule::nginx::worker_dir`).
    fn run_options(&self, flags: &ModelFlags) -> Result<RenderOptions> {
        let mut opts = self.render_options(flags)?;
        if let Some(user) = opts.user.as_deref() {
            opts.worker_dir = ferrule::nginx::worker_dir::choose(&opts.prefix, user)?;
        }
        Ok(opts)
    }

    /// Where Ferrule's C fast path module would be, unless turned off (see
    /// `ferrule::nginx::fast_path::enable`, which checks that NGINX loads it).
    fn fast_path_module(&self) -> Option<PathBuf> {
        (!self.no_fast_path).then(|| self.nginx_modules.join(ferrule::nginx::fast_path::MODULE))
    }

    /// [`Self::render_options`] with the fast path decided now (`nginx -t`).
    async fn render_options_probed(&self, flags: &ModelFlags) -> Result<RenderOptions> {
        let mut opts = self.render_options(flags)?;
        let nginx = Launcher::Here(self.nginx_binary.clone());
        let module = self.fast_path_module();
        ferrule::nginx::fast_path::enable(&mut opts, &nginx, module.as_deref()).await;
        Ok(opts)
    }
}

/// The validating admission webhook (off unless `--admission-port` is set).
#[derive(clap::Args, Clone)]
struct AdmissionFlags {
    /// Serve the validating admission webhook for Ingresses (AdmissionReview v1,
    /// path /networking/v1/ingresses) on this port, TLS only. It decides with the
    /// model, never with NGINX.
    #[arg(long)]
    admission_port: Option<u16>,
    /// Address of the admission webhook's port.
    #[arg(long, default_value = "0.0.0.0")]
    admission_address: std::net::IpAddr,
    /// PEM certificate (chain) of the admission webhook; read again when it changes.
    #[arg(long, requires_all = ["admission_port", "admission_key"])]
    admission_cert: Option<PathBuf>,
    /// PEM private key of the admission webhook; read again when it changes.
    #[arg(long, requires_all = ["admission_port", "admission_cert"])]
    admission_key: Option<PathBuf>,
    /// NAMESPACE/NAME of a Secret in which the controller keeps the webhook's CA and
    /// certificate: the lease holder creates it, renews it before it expires and sets
    /// the caBundle of --admission-webhook-configuration; every replica serves it.
    #[arg(
        long,
        value_parser = secret_ref,
        requires_all = ["admission_port", "admission_webhook_configuration"],
        conflicts_with_all = ["admission_cert", "admission_key"]
    )]
    admission_secret: Option<(String, String)>,
    /// The ValidatingWebhookConfiguration whose caBundle the controller sets; its
    /// Services and URLs name the certificate's hosts.
    #[arg(long, requires = "admission_secret")]
    admission_webhook_configuration: Option<String>,
    /// Lifetime of a certificate the controller issues (`s`, `m`, `h` or `d`); it is
    /// renewed with a third left.
    #[arg(long, default_value = "365d", value_parser = lifetime, requires = "admission_secret")]
    admission_certificate_lifetime: std::time::Duration,
    /// Refuse an Ingress whose TLS Secret is missing or invalid (default: admit it
    /// with a warning, as the Secret is often created after the Ingress).
    #[arg(long)]
    admission_strict_tls: bool,
    /// Where the webhook's certificate and key from --admission-secret are written
    /// for it to read (default: --nginx-prefix/admission). With --nginx-supervisor,
    /// a directory NGINX's container does not share.
    #[arg(long, requires = "admission_secret")]
    admission_certificate_dir: Option<PathBuf>,
}

/// `NAMESPACE/NAME`.
fn secret_ref(v: &str) -> Result<(String, String), String> {
    match v.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{v:?} is not NAMESPACE/NAME")),
    }
}

/// A duration such as `90s`, `30m`, `12h` or `365d`, at least a minute.
fn lifetime(v: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = v.split_at(v.len().saturating_sub(1));
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{v:?}: a number followed by s, m, h or d")),
    };
    let secs = n
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|s| *s >= 60)
        .ok_or_else(|| format!("{v:?}: a number followed by s, m, h or d, at least 60s"))?;
    Ok(std::time::Duration::from_secs(secs))
}

impl AdmissionFlags {
    /// The webhook's options; its port must be none of the others.
    fn options(
        &self,
        namespace: Option<String>,
        others: &[(&str, u16)],
        prefix: &std::path::Path,
    ) -> Result<Option<ferrule::admission::AdmissionOptions>> {
        let Some(port) = self.admission_port else {
            return Ok(None);
        };
        if let Some((flag, _)) = others.iter().find(|(_, p)| *p == port) {
            anyhow::bail!(
                "--admission-port {port} is also {flag}: the webhook needs a port of its own"
            );
        }
        use ferrule::admission::CertificateSource;
        let certificate = match (
            &self.admission_cert,
            &self.admission_key,
            &self.admission_secret,
            &self.admission_webhook_configuration,
        ) {
            (Some(cert), Some(key), None, _) => CertificateSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            (None, None, Some((namespace, secret)), Some(configuration)) => {
                CertificateSource::Managed(ferrule::kube::webhook_certificate::Options {
                    namespace: namespace.clone(),
                    secret: secret.clone(),
                    webhook_configuration: configuration.clone(),
                    lifetime: self.admission_certificate_lifetime,
                    dir: (self.admission_certificate_dir.clone())
                        .unwrap_or_else(|| prefix.join("admission")),
                })
            }
            _ => anyhow::bail!(
                "--admission-port needs --admission-cert and --admission-key, or \
                 --admission-secret and --admission-webhook-configuration"
            ),
        };
        Ok(Some(ferrule::admission::AdmissionOptions {
            addr: std::net::SocketAddr::new(self.admission_address, port),
            certificate,
            strict_tls: self.admission_strict_tls,
            namespace,
        }))
    }
}

/// Kubernetes mode.
#[derive(clap::Args, Clone)]
struct KubeFlags {
    /// Path of a kubeconfig (default: in-cluster configuration, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Watch only this namespace.
    #[arg(long)]
    watch_namespace: Option<String>,
    /// `NAMESPACE/NAME` of the Service whose address is published in Ingress status.
    #[arg(long)]
    publish_service: Option<String>,
    /// Addresses published in Ingress status (comma separated), instead of a Service.
    #[arg(long, value_delimiter = ',')]
    publish_status_address: Vec<String>,
    /// Name of the leader-election Lease (default: `ferrule-leader`, followed by the
    /// controller class when it is not Ferrule's default, so that two installs with
    /// different classes in one namespace do not share a leader).
    #[arg(long)]
    election_id: Option<String>,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Lease duration in seconds (how long a dead leader blocks others).
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
}

/// The default Lease name for a controller class.
fn election_id(controller_class: &str) -> String {
    if controller_class == ferrule_model::snapshot::DEFAULT_CONTROLLER {
        return "ferrule-leader".to_owned();
    }
    // A DNS label: lower case, digits and dashes.
    let mut name: String = controller_class
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(40);
    format!("ferrule-leader-{}", name.trim_matches('-'))
}

impl KubeFlags {
    fn options(&self, controller_class: &str) -> Result<commands::KubeArgs> {
        let publish = match (
            &self.publish_service,
            self.publish_status_address.is_empty(),
        ) {
            (Some(s), _) => {
                let (ns, name) = s
                    .split_once('/')
                    .context("--publish-service must be NAMESPACE/NAME")?;
                Some(ferrule::kube::status::Publish::Service(
                    ns.to_owned(),
                    name.to_owned(),
                ))
            }
            (None, false) => Some(ferrule::kube::status::Publish::Addresses(
                self.publish_status_address.clone(),
            )),
            (None, true) => None,
        };
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        });
        Ok(commands::KubeArgs {
            kubeconfig: self.kubeconfig.clone(),
            namespace: self.watch_namespace.clone(),
            publish,
            lease: ferrule::kube::leader::LeaseOptions {
                namespace: self
                    .lease_namespace
                    .clone()
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| "default".to_owned()),
                name: self
                    .election_id
                    .clone()
                    .unwrap_or_else(|| election_id(controller_class)),
                identity,
                duration: self.lease_duration_seconds,
                grace: (self.lease_duration_seconds / 3).max(1),
            },
        })
    }
}

// Parsed once at start: `resources`, much smaller than the others, costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the controller: watch the inputs, drive NGINX, serve the status port.
    Run {
        /// Standalone mode: a directory of Kubernetes manifests to serve. Without it,
        /// Ferrule watches the Kubernetes API (`--kubeconfig`, else in-cluster).
        #[arg(long)]
        manifests: Option<PathBuf>,
        #[command(flatten)]
        kube: Box<KubeFlags>,
        /// Status port (`/healthz`, `/readyz`, `/metrics`).
        #[arg(long, default_value_t = 10254)]
        status_port: u16,
        /// Address of the status port (probes and Prometheus use the pod's).
        #[arg(long, default_value = "0.0.0.0")]
        status_address: std::net::IpAddr,
        /// Unix socket serving `/status/resources` (every namespace's Ingresses, hosts,
        /// Secrets and errors) to processes of the controller's user (or root) that
        /// are not NGINX: `ferrule resources` reads it. Default: `controller/status.sock`
        /// in `--nginx-prefix`.
        #[arg(long)]
        status_socket: Option<PathBuf>,
        /// Answer `/status/resources` on the status port too: anyone who reaches the
        /// port, NGINX (and so tenants' snippets and backends) included, then reads
        /// every tenant's state.
        #[arg(long)]
        status_resources_public: bool,
        /// Coalescing window for changes, in milliseconds.
        #[arg(long, default_value_t = 100)]
        coalesce_ms: u64,
        /// Minimum milliseconds between two reloads, enforced by a rate limiter (endpoint changes are never limited).
        #[arg(long, default_value_t = 0)]
        min_reload_interval_ms: u64,
        /// Seconds NGINX keeps accepting new connections after SIGTERM while the pod
        /// reports not Ready (as ingress-nginx's --shutdown-grace-period), before it
        /// drains: give endpoints and load balancers time to stop sending traffic.
        /// The pod's terminationGracePeriodSeconds must cover it plus the drain (240 s).
        #[arg(long, default_value_t = 0)]
        shutdown_grace_period: u64,
        /// NGINX runs in another container, under `ferrule nginx-supervisor` listening
        /// on this unix socket: every start, `nginx -t`, reload and stop goes through
        /// it, and this process runs and signals no NGINX itself. The two containers
        /// share the directory of --nginx-prefix (at the same path) and the socket;
        /// the cluster credentials stay in this one's. Without it, NGINX is this
        /// process's child.
        #[arg(long, value_name = "SOCKET", conflicts_with = "nginx_binary")]
        nginx_supervisor: Option<PathBuf>,
        #[command(flatten)]
        admission: Box<AdmissionFlags>,
        #[command(flatten)]
        nginx: NginxFlags,
        #[command(flatten)]
        flags: ModelFlags,
    },
    /// Run NGINX in its own container for a controller in another one (`ferrule run
    /// --nginx-supervisor SOCKET`): start, test (`nginx -t`), reload and stop it as
    /// the controller asks on SOCKET, and nothing else. NGINX's logs are this
    /// process's standard output and error. After SIGTERM, NGINX serves until the
    /// controller stops it (or has not been heard from for 10 s).
    NginxSupervisor {
        /// The unix socket to listen on, in the directory the two containers share.
        #[arg(long)]
        socket: PathBuf,
        /// The NGINX binary.
        #[arg(long, default_value = "nginx")]
        nginx_binary: PathBuf,
    },
    /// Render the NGINX files of a manifests directory without running NGINX.
    Render {
        /// Directory of Kubernetes manifests.
        #[arg(long)]
        manifests: PathBuf,
        /// Output directory (used as the NGINX prefix in the files).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        nginx: NginxFlags,
        #[command(flatten)]
        flags: ModelFlags,
    },
    /// Render to a temporary directory, run `nginx -t`, print per-resource problems;
    /// exit non-zero if any resource is rejected.
    Validate {
        /// Directory of Kubernetes manifests.
        #[arg(long)]
        manifests: PathBuf,
        #[command(flatten)]
        nginx: NginxFlags,
        #[command(flatten)]
        flags: ModelFlags,
    },
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
    /// Print `/status/resources` of the controller running on this machine (every
    /// resource's state), read from its status socket.
    Resources {
        /// The running controller's `--nginx-prefix` (its status socket is there).
        #[arg(long, default_value = "/var/lib/ferrule/nginx")]
        nginx_prefix: PathBuf,
        /// The running controller's `--status-socket`, if it set one.
        #[arg(long)]
        status_socket: Option<PathBuf>,
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

/// jemalloc instead of glibc malloc: with glibc, memory freed on one tokio worker
/// thread's arena is not reused by another, and each full model rebuild at 10k
/// Ingresses left the controller's RSS tens of MB higher (test/scale/RESULTS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> Result<()> {
    // ingress-nginx's flags (Helm extraArgs of a migrating user): translated,
    // accepted with a warning, or refused by name before clap sees them.
    let (args, compat) = match compat_flags::translate(std::env::args().collect()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let cli = Cli::parse_from(args);
    init_logging(cli.log_format);
    for w in compat {
        tracing::warn!("{w}");
    }
    match cli.command {
        Command::Run {
            manifests,
            kube,
            status_port,
            status_address,
            status_socket,
            status_resources_public,
            coalesce_ms,
            min_reload_interval_ms,
            shutdown_grace_period,
            nginx_supervisor,
            admission,
            nginx,
            flags,
        } => {
            let admission = admission.options(
                kube.watch_namespace.clone(),
                &[
                    ("--status-port", status_port),
                    ("--http-port", nginx.http_port),
                    ("--https-port", nginx.https_port),
                ],
                &nginx.nginx_prefix,
            )?;
            commands::run(commands::RunArgs {
                manifests,
                kube: kube.options(&flags.controller_class)?,
                status: std::net::SocketAddr::new(status_address, status_port),
                status_resources_public,
                status_socket,
                coalesce: std::time::Duration::from_millis(coalesce_ms),
                min_reload_interval: std::time::Duration::from_millis(min_reload_interval_ms),
                shutdown_grace_period: std::time::Duration::from_secs(shutdown_grace_period),
                render: nginx.run_options(&flags)?,
                fast_path_module: nginx.fast_path_module(),
                request_metrics: nginx.metrics.export(),
                launcher: match nginx_supervisor {
                    Some(socket) => Launcher::Supervisor(socket),
                    None => Launcher::Here(nginx.nginx_binary.clone()),
                },
                settings: Settings {
                    // A TCP service may not take a port the controller listens on.
                    reserved_ports: [status_port, nginx.http_port, nginx.https_port]
                        .into_iter()
                        .chain(admission.as_ref().map(|a| a.addr.port()))
                        .collect(),
                    ocsp_stapling: nginx.balancer == Balancer::Lua,
                    ..flags.settings()
                },
                config_map: flags
                    .config_map()
                    .map(|(a, b)| (a.to_owned(), b.to_owned())),
                admission,
            })
            .await?;
        }
        Command::NginxSupervisor {
            socket,
            nginx_binary,
        } => {
            ferrule::nginx::supervisor::serve(&socket, nginx_binary, commands::shutdown_signal())
                .await
                .with_context(|| format!("serving {}", socket.display()))?;
        }
        Command::Render {
            manifests,
            out,
            nginx,
            flags,
        } => {
            let mut nginx = nginx.clone();
            nginx.nginx_prefix = out;
            let opts = nginx.render_options_probed(&flags).await?;
            let model = flags.model_with(&manifests, flags.settings_for(&opts))?;
            let written = commands::render(&model, opts)?;
            println!("wrote {written} files");
        }
        Command::Validate {
            manifests,
            nginx,
            flags,
        } => {
            let opts = nginx.render_options_probed(&flags).await?;
            let settings = flags.settings_for(&opts);
            let model = flags.model_with(&manifests, settings.clone())?;
            let snap = source::manifests::load(&manifests, settings, flags.config_map())?;
            let ok = commands::validate(&snap, &model, &nginx.nginx_binary, opts).await?;
            if !ok {
                std::process::exit(1);
            }
        }
        Command::Model {
            manifests,
            hash,
            flags,
        } => {
            let model = flags.model(&manifests)?;
            if hash {
                println!("{}", model.hash());
            } else {
                // Piped into `head` or `jq`: a closed pipe is not an error.
                let mut out = std::io::stdout().lock();
                match serde_json::to_writer_pretty(&mut out, &model) {
                    Err(e) if e.is_io() => return Ok(()),
                    other => other?,
                }
                let _ = writeln!(out);
            }
        }
        Command::Resources {
            nginx_prefix,
            status_socket,
        } => {
            let socket =
                status_socket.unwrap_or_else(|| nginx_prefix.join(ferrule::status::SOCKET));
            let resources = ferrule::status::read_resources(&socket)
                .with_context(|| format!("reading the status socket {}", socket.display()))?;
            println!("{resources}");
        }
        Command::Diff { old, new, flags } => {
            let (old, new) = (flags.model(&old)?, flags.model(&new)?);
            match ferrule_model::diff(&old, &new) {
                Diff::Unchanged => println!("unchanged"),
                Diff::Dynamic {
                    backends,
                    certificates,
                    tls_hosts,
                } => {
                    println!("dynamic");
                    backends.iter().for_each(|b| println!("backend {b}"));
                    certificates
                        .iter()
                        .for_each(|c| println!("certificate {c}"));
                    tls_hosts.iter().for_each(|h| println!("tls-host {h}"));
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_lease_name_follows_the_controller_class() {
        let id = super::election_id;
        assert_eq!(
            id(ferrule_model::snapshot::DEFAULT_CONTROLLER),
            "ferrule-leader"
        );
        assert_eq!(
            id("example.com/Edge_Ingress"),
            "ferrule-leader-example-com-edge-ingress"
        );
        assert_ne!(id("a.dev/one"), id("a.dev/two"));
        assert!(id(&"x".repeat(300)).len() <= 63);
    }
}
