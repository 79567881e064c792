//! Model building: `Snapshot` → `Model`.
//!
//! Ingresses are visited oldest first (creationTimestamp, then namespace/name), so
//! "the oldest resource wins" is simply "the first claim wins": every later claim on
//! the same host + path + match, TLS host or catch-all gets a problem naming the
//! winner. Everything else is a single pass over indexed inputs.

mod access;
pub(crate) mod backends;
pub mod blocking;
pub(crate) mod classes;
mod config;
mod endpoints;
pub mod header_lists;
pub(crate) mod hosts;
pub mod http_keys;
mod limits;
mod path_regex;
pub mod real_ip;
mod streams;
mod tls;
pub mod tuning;

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};

use crate::annotations::{self, IngressAnnotations, SourceRanges};
use crate::fallbacks::Fallbacks;
use crate::model::*;
use crate::snapshot::Snapshot;

pub use endpoints::build_endpoint_change;
pub(crate) use tls::covers;

/// `dhparam.pem` of Secret `ns/name` (ConfigMap `ssl-dh-param`): DH parameters in
/// PEM, nothing else.
fn dh_param(snap: &Snapshot, secret: &str) -> Result<String, String> {
    let (ns, name) = secret.split_once('/').unwrap_or_default();
    let s = (snap.secrets.iter())
        .find(|s| meta_key(&s.metadata) == (ns, name))
        .ok_or("not found")?;
    let pem = tls::secret_value(s, "dhparam.pem").ok_or("no dhparam.pem")?;
    let pem = String::from_utf8(pem).map_err(|_| "dhparam.pem is not text")?;
    let pem = pem.trim();
    let ok = pem.len() <= 16 * 1024
        && (pem.starts_with("-----BEGIN DH PARAMETERS-----")
            && pem.ends_with("-----END DH PARAMETERS-----")
            || pem.starts_with("-----BEGIN X9.42 DH PARAMETERS-----")
                && pem.ends_with("-----END X9.42 DH PARAMETERS-----"))
        && pem.matches("-----BEGIN").count() == 1;
    match ok {
        true => Ok(format!("{pem}\n")),
        false => Err("dhparam.pem is not one PEM block of DH parameters".to_owned()),
    }
}

/// Builds the model of a snapshot with nothing to fall back on (what a first build
/// has). Pure and deterministic: the same objects in any order give the same model.
pub fn build(snap: &Snapshot) -> Model {
    build_with(snap, &Fallbacks::default())
}

/// Builds the model of a snapshot; a TLS Secret whose new version is not valid
/// keeps the certificate `fallbacks` holds for it. Pure and deterministic.
pub fn build_with(snap: &Snapshot, fallbacks: &Fallbacks) -> Model {
    let mut problems = Vec::new();
    let global = config::global(
        snap.config_map.as_deref(),
        snap.settings.allow_snippet_annotations,
        &snap.config_maps,
        &mut problems,
    );
    let mut global = global;
    // What the flags make of the ConfigMap's keys (config.rs reads it without them).
    if let Some(cm) = &snap.config_map {
        let (ns, name) = meta_key(&cm.metadata);
        // ssl-dh-param: the Secret's dhparam.pem, or the key is dropped and said so.
        if let Some(dh) = global.ssl_dh_param.take() {
            match dh_param(snap, &dh.secret) {
                Ok(pem) => {
                    let file = Some(crate::model::SecretFile::new(pem.into_bytes()));
                    global.ssl_dh_param = Some(crate::model::DhParam { file, ..dh })
                }
                Err(e) => problems.push(Problem {
                    resource: ResourceRef::new("ConfigMap", ns, name),
                    severity: Severity::Error,
                    message: format!(
                        "key ssl-dh-param: Secret {}: {e}; DHE ciphers are off",
                        dh.secret
                    ),
                    kind: ProblemKind::Reference,
                }),
            }
        }
        let mut warn = |message: String| {
            problems.push(Problem {
                resource: ResourceRef::new("ConfigMap", ns, name),
                severity: Severity::Warning,
                message,
                kind: ProblemKind::Other,
            })
        };
        let s = &snap.settings;
        let streams = s.tcp_services.is_some() || s.udp_services.is_some() || s.ssl_passthrough;
        if !streams && global.stream_snippet.take().is_some() {
            warn(
                "key stream-snippet has a stream block only with --tcp-services-configmap, \
                 --udp-services-configmap or --enable-ssl-passthrough; it is ignored"
                    .to_owned(),
            );
        }
        if global.http.ocsp && !s.ocsp_stapling {
            global.http.ocsp = false;
            warn(
                "key enable-ocsp: the njs balancer cannot staple OCSP responses (NGINX \
                 staples only certificates it loads at start); it is ignored"
                    .to_owned(),
            );
        }
        let ca = &mut global.client_address;
        if ca.behind_proxy_protocol.is_some() && !s.input_headers {
            ca.behind_proxy_protocol = None;
            ca.real_ip_header = Some("proxy_protocol".to_owned());
            warn(
                "keys use-proxy-protocol with use-forwarded-headers: a trusted PROXY \
                 line's forwarded-for header names the client only with Ferrule's C \
                 module (ngx_http_ferrule_module.so, from make deps or the image), which \
                 this NGINX does not load; the PROXY line's address is the client's"
                    .to_owned(),
            );
        }
        // The HTTPS router hands terminated connections to NGINX with the PROXY
        // protocol; a client address from a header cannot be believed over that hop.
        let header = global.client_address.real_ip_header.as_deref();
        if let (true, Some(h)) = (s.ssl_passthrough, header)
            && h != "proxy_protocol"
        {
            warn(format!(
                "with --enable-ssl-passthrough, HTTPS requests reach NGINX through its TLS \
                 router, and their client address is the router's: the {h} header is \
                 believed from proxy-real-ip-cidr on plain HTTP only"
            ));
        }
    }
    let mut b = Builder {
        snap,
        fallbacks,
        index: backends::ServiceIndex::new(
            &snap.services,
            &snap.endpoint_slices,
            snap.settings.allow_local_endpoints,
        )
        .with_external_names(&snap.external_names),
        dropped_endpoints: HashMap::new(),
        secrets: snap
            .secrets
            .iter()
            .map(|s| (meta_key(&s.metadata), &**s))
            .collect(),
        config_maps: snap
            .config_maps
            .iter()
            .map(|c| (meta_key(&c.metadata), &**c))
            .collect(),
        global,
        problems,
        servers: HashMap::new(),
        backends: BTreeMap::new(),
        resolved: HashMap::new(),
        key_buf: String::new(),
        balancing: HashMap::new(),
        canary_owners: HashMap::new(),
        tls_claims: HashMap::new(),
        checked_secrets: HashMap::new(),
        valid_until: None,
        catch_all: None,
        streams: Vec::new(),
        passthrough: Vec::new(),
        stream_snippets: Vec::new(),
        root_defaults: Vec::new(),
        default_backend_fallbacks: BTreeMap::new(),
    };

    let filter = classes::ClassFilter::new(&snap.ingress_classes, &snap.settings);
    let mut ours: Vec<&Ingress> = snap
        .ingresses
        .iter()
        .map(|i| &**i)
        .filter(|i| filter.is_ours(i))
        .collect();
    ours.sort_by(|a, b| age_key(a).cmp(&age_key(b)));

    let mut canaries = Vec::new();
    let prefix = format!("{}/", snap.settings.annotations_prefix);
    for ing in ours {
        let r = ingress_ref(ing);
        let empty = BTreeMap::new();
        // Bounded before anything of it is read further.
        let parsed = limits::check(ing, &snap.settings.limits, &prefix).and_then(|()| {
            let annotations = ing.metadata.annotations.as_ref().unwrap_or(&empty);
            annotations::parse_with(annotations, &prefix, snap.settings.strict_annotations)
                .map_err(|e| e.to_string())
        });
        let mut a = match parsed {
            Err(e) => {
                b.problem(
                    &r,
                    Severity::Error,
                    ProblemKind::Invalid,
                    format!("{e}; the Ingress is not served"),
                );
                continue;
            }
            Ok(p) => {
                for warning in p.ignored {
                    b.problem(&r, Severity::Warning, ProblemKind::Other, warning);
                }
                p.values
            }
        };
        let catch_all = ing
            .spec
            .as_ref()
            .is_some_and(|s| s.default_backend.is_some());
        if catch_all && snap.settings.disable_catch_all {
            b.problem(
                &r,
                Severity::Error,
                ProblemKind::Invalid,
                "spec.defaultBackend: catch-all Ingresses are disabled (--disable-catch-all); \
                 the Ingress is not served"
                    .to_owned(),
            );
            continue;
        }
        if a.ssl_passthrough && !snap.settings.ssl_passthrough {
            b.problem(
                &r,
                Severity::Error,
                ProblemKind::Invalid,
                format!(
                    "annotation {prefix}ssl-passthrough needs the controller flag \
                     --enable-ssl-passthrough; the Ingress is not served"
                ),
            );
            continue;
        }
        if a.canary.is_some() {
            canaries.push((ing, r, a));
            continue;
        }
        // A restriction that cannot be set up rejects the Ingress.
        // An auth snippet may restrict access: without snippets, not served at all.
        let auth_snippet = a
            .external_auth
            .as_ref()
            .is_some_and(|e| e.snippet.is_some());
        let lists = b.header_lists(&r, &mut a);
        let resolved = lists.and_then(|()| b.basic_auth(&r, &a)).and_then(|auth| {
            if auth_snippet && !b.global.allow_snippet_annotations {
                return Err(format!(
                    "annotation {prefix}auth-snippet: snippets are not allowed \
                     (allow-snippet-annotations), and serving the Ingress without it \
                     could leave it open"
                ));
            }
            if b.global.allow_snippet_annotations {
                // Allowed snippets still never load code or read files: `nginx -t`
                // would do it with the controller's privileges.
                use crate::snippet::Kind;
                let snippets = [
                    (
                        "configuration-snippet",
                        Kind::Location,
                        a.configuration_snippet.as_ref(),
                    ),
                    ("server-snippet", Kind::Server, a.server_snippet.as_ref()),
                    ("stream-snippet", Kind::Stream, a.stream_snippet.as_ref()),
                    (
                        "auth-snippet",
                        Kind::Location,
                        a.external_auth.as_ref().and_then(|e| e.snippet.as_ref()),
                    ),
                ];
                let reserved = &b.snap.settings.reserved_ports;
                for (key, kind, snippet) in snippets {
                    let refused =
                        snippet.and_then(|s| annotations::snippet_refusal(kind, &s.0, reserved));
                    if let Some(why) = refused {
                        return Err(format!("annotation {prefix}{key}: {why}"));
                    }
                }
            }
            let certs = b.client_certificates(ing, &r, &a)?;
            let backend_tls = b.backend_tls(&r, &a)?;
            Ok((auth, certs, backend_tls))
        });
        let (basic_auth, client_certificates, backend_tls) = match resolved {
            Ok(x) => x,
            Err(e) => {
                // A Secret that is not there yet may come; another Ingress's host
                // settings are a conflict; anything else is the Ingress's own.
                let kind = if e.contains("not found") {
                    ProblemKind::Reference
                } else if e.contains("oldest Ingress") {
                    ProblemKind::Conflict
                } else {
                    ProblemKind::Invalid
                };
                b.problem(
                    &r,
                    Severity::Error,
                    kind,
                    format!("{e}; the Ingress is not served"),
                );
                continue;
            }
        };
        b.add_stream_snippet(&r, &a);
        b.add_ingress(ing, &r, &a, basic_auth, client_certificates, backend_tls);
    }
    for (ing, r, a) in &canaries {
        b.add_canary(ing, r, a);
    }
    b.add_streams();
    b.finish()
}

impl Builder<'_> {
    /// Keeps `r`'s `stream-snippet` when snippets are allowed and NGINX has a stream
    /// block (as the ConfigMap's key); otherwise says why it is ignored.
    fn add_stream_snippet(&mut self, r: &ResourceRef, a: &IngressAnnotations) {
        let Some(snippet) = &a.stream_snippet else {
            return;
        };
        if !self.global.allow_snippet_annotations {
            return; // said with the other snippets (location_settings)
        }
        let s = &self.snap.settings;
        if s.tcp_services.is_none() && s.udp_services.is_none() && !s.ssl_passthrough {
            let msg = format!(
                "annotation {}/stream-snippet: NGINX has a stream block only with \
                 --tcp-services-configmap, --udp-services-configmap or \
                 --enable-ssl-passthrough; the snippet is ignored",
                s.annotations_prefix
            );
            self.problem(r, Severity::Warning, ProblemKind::Other, msg);
            return;
        }
        self.stream_snippets.push(crate::model::StreamSnippet {
            owner: r.clone(),
            text: snippet.0.clone(),
        });
    }
}

/// Records that the locations of `r` set the affinity cookie of `bal`'s backend.
fn asks_for_affinity(bal: &mut crate::model::Balancing, r: &ResourceRef) {
    let id = format!("{}/{}", r.namespace, r.name);
    if let Err(at) = bal.affinity_ingresses.binary_search(&id) {
        bal.affinity_ingresses.insert(at, id);
    }
}

/// Which Ingress set each balancing setting of a backend: several Ingresses may
/// route to one Service port, and as in ingress-nginx the oldest that sets a setting
/// decides it, setting by setting (one without annotations decides nothing).
#[derive(Default)]
struct BalancingOwners {
    load_balance: Option<ResourceRef>,
    upstream_hash_by: Option<ResourceRef>,
    upstream_hash_by_subset: Option<ResourceRef>,
    affinity: Option<ResourceRef>,
}

/// A TLS Secret as checked: its certificate, or why there is none; `refused` says
/// why its new version was not taken when `certificate` is its last valid one
/// (`Fallbacks::certificates`).
#[derive(Clone)]
struct CheckedSecret {
    certificate: Result<Certificate, String>,
    refused: Option<String>,
}

/// A host's TLS claim: the oldest Ingress listing the host in `spec.tls` wins.
struct TlsClaim {
    owner: ResourceRef,
    /// `namespace/name` of the Secret (a Secret lives in its Ingress's namespace, so
    /// the same name in two namespaces is two different Secrets).
    secret: Option<String>,
}

struct ServerAcc {
    owner: ResourceRef,
    /// The owner's `from-to-www-redirect`.
    from_to_www: bool,
    /// The owner's `server-alias`.
    aliases: Vec<String>,
    /// The owner's `ssl-passthrough`.
    passthrough: bool,
    /// Regex locations so far (`Limits::regex_paths_per_host`).
    regex_paths: usize,
    /// When it was created: owners are visited oldest first.
    order: usize,
    server_snippet: Option<annotations::Snippet>,
    client_certificates: Option<annotations::ClientCertificates>,
    ciphers: annotations::ServerCiphers,
    locations: HashMap<(String, PathMatch), Location>,
}

struct Builder<'a> {
    snap: &'a Snapshot,
    /// The last valid certificates.
    fallbacks: &'a Fallbacks,
    index: backends::ServiceIndex<'a>,
    secrets: HashMap<(&'a str, &'a str), &'a Secret>,
    /// The ConfigMaps annotations may name, by namespace and name.
    config_maps: HashMap<(&'a str, &'a str), &'a k8s_openapi::api::core::v1::ConfigMap>,
    global: Global,
    problems: Vec<Problem>,
    servers: HashMap<String, ServerAcc>,
    backends: BTreeMap<String, Backend>,
    /// Memo of backend resolution per (namespace, service, port), so each Service is
    /// resolved once however many paths use it.
    resolved: HashMap<String, Result<String, String>>,
    /// Scratch buffer for `resolved` keys.
    key_buf: String,
    /// The endpoints left out of each backend as local (see `backends::is_local`).
    dropped_endpoints: HashMap<String, Vec<Endpoint>>,
    /// Who set each balancing setting of a backend (see [`BalancingOwners`]).
    balancing: HashMap<String, BalancingOwners>,
    /// The canary Ingress attached to each primary backend (the oldest wins).
    canary_owners: HashMap<String, ResourceRef>,
    tls_claims: HashMap<String, TlsClaim>,
    /// Each TLS Secret checked once per build, by `namespace/name`.
    checked_secrets: HashMap<String, CheckedSecret>,
    /// The earliest expiry of the certificates found valid (Model::certificates_valid_until).
    valid_until: Option<i64>,
    catch_all: Option<(ResourceRef, Target)>,
    /// TCP and UDP services (`streams.rs`).
    streams: Vec<crate::model::Stream>,
    /// `ssl-passthrough` hosts, found by `finish`.
    passthrough: Vec<crate::model::Passthrough>,
    /// The served Ingresses' `stream-snippet`s, in build order (oldest first).
    stream_snippets: Vec<crate::model::StreamSnippet>,
    /// `/` of the hosts an Ingress with rules creates, to its spec.defaultBackend,
    /// where no rule of any Ingress has `/` (filled in by `finish`).
    root_defaults: Vec<(String, Location)>,
    /// `default-backend` as the fallback of a Service without ready endpoints: each
    /// such backend (named `<primary>~fallback~<default>`) and its two parts,
    /// materialised by `finish` once the primary's balancing is known.
    default_backend_fallbacks: BTreeMap<String, (String, String)>,
}

/// What a path answers while its backend has no ready endpoints (its problem says).
#[derive(Clone, Copy)]
enum WhenEmpty<'a> {
    /// 503.
    Answer503,
    /// A canary's: the primary serves its share.
    PrimaryServes,
    /// `default-backend` (`namespace/name`) answers.
    DefaultBackend(&'a str),
}

impl Builder<'_> {
    fn problem(&mut self, r: &ResourceRef, severity: Severity, kind: ProblemKind, message: String) {
        self.problems.push(Problem {
            resource: r.clone(),
            severity,
            message,
            kind,
        });
    }

    fn add_ingress(
        &mut self,
        ing: &Ingress,
        r: &ResourceRef,
        a: &IngressAnnotations,
        basic_auth: Option<annotations::BasicAuth>,
        client_certificates: Option<annotations::ClientCertificates>,
        backend_tls: Option<annotations::BackendTls>,
    ) {
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        let ns = r.namespace.as_str();
        let mut settings = self.location_settings(r, a, basic_auth, backend_tls);
        settings.error_pages = self.error_pages(r, &a.error_pages);
        let server_snippet = if self.global.allow_snippet_annotations {
            a.server_snippet.clone()
        } else {
            None
        };
        let mut ciphers_warned = std::collections::HashSet::new();
        // A host this Ingress is the first to serve: its server settings are ours.
        let new_server = |order| ServerAcc {
            owner: r.clone(),
            from_to_www: a.from_to_www_redirect,
            aliases: a.server_aliases.clone(),
            passthrough: a.ssl_passthrough,
            regex_paths: 0,
            order,
            server_snippet: server_snippet.clone(),
            client_certificates: client_certificates.clone(),
            ciphers: a.server_ciphers.clone(),
            locations: HashMap::new(),
        };

        // As ingress-nginx: an Ingress without rules gives the catch-all its
        // spec.defaultBackend; one with rules gives it to `/` of each host its
        // rules create (a host an older Ingress has is not its to fill), where no
        // rule of any Ingress has `/`.
        let has_rules = spec.rules.as_ref().is_some_and(|r| !r.is_empty());
        let mut rule_default = None;
        if let Some(default) = &spec.default_backend {
            let target = self.target(
                ns,
                r,
                default,
                (self.service_upstream(a), WhenEmpty::Answer503),
                || "spec.defaultBackend".to_owned(),
            );
            if let Target::Backend(name) = &target {
                self.set_balancing(name, r, a);
            }
            if has_rules {
                rule_default = Some(target);
            } else {
                match &self.catch_all {
                    None => self.catch_all = Some((r.clone(), target)),
                    Some((winner, _)) => {
                        let msg = format!(
                            "spec.defaultBackend ignored: {winner} is older and already provides the catch-all backend"
                        );
                        self.problem(r, Severity::Warning, ProblemKind::Conflict, msg)
                    }
                }
            }
        }
        // The rule hosts older Ingresses already have.
        let older_hosts: HashSet<String> = (spec.rules.iter().flatten())
            .filter_map(|rule| rule.host.as_deref().filter(|h| !h.is_empty()))
            .filter_map(|h| hosts::host(h).ok())
            .filter(|h| self.servers.contains_key(h))
            .collect();

        // The hosts this Ingress's `spec.tls` may give a certificate to (below).
        let mut rule_hosts = HashSet::new();
        for rule in spec.rules.iter().flatten() {
            let host = match rule.host.as_deref().filter(|h| !h.is_empty()) {
                None => DEFAULT_SERVER.to_owned(),
                Some(h) => match hosts::host(h) {
                    Ok(h) => h,
                    Err(e) => {
                        self.problem(
                            r,
                            Severity::Error,
                            ProblemKind::Invalid,
                            format!("spec.rules: {e}; rule skipped"),
                        );
                        continue;
                    }
                },
            };
            rule_hosts.insert(host.clone());
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                let regex = a.use_regex || a.rewrite_target.is_some();
                let (path_match, raw) = match p.path_type.as_str() {
                    "Exact" => (PathMatch::Exact, p.path.as_deref().unwrap_or_default()),
                    "Prefix" | "ImplementationSpecific" if regex => {
                        (PathMatch::Regex, p.path.as_deref().unwrap_or("/"))
                    }
                    "Prefix" | "ImplementationSpecific" => {
                        (PathMatch::Prefix, p.path.as_deref().unwrap_or("/"))
                    }
                    other => {
                        let msg =
                            format!("host {host}: pathType {other:?} is not valid; path skipped");
                        self.problem(r, Severity::Error, ProblemKind::Invalid, msg);
                        continue;
                    }
                };
                let path = match hosts::path(raw, path_match == PathMatch::Regex) {
                    Ok(p) if path_match == PathMatch::Prefix => hosts::prefix_str(p).to_owned(),
                    Ok(p) => p.to_owned(),
                    Err(e) => {
                        self.problem(
                            r,
                            Severity::Error,
                            ProblemKind::Invalid,
                            format!("host {host}: {e}; path skipped"),
                        );
                        continue;
                    }
                };
                let key = (path.clone(), path_match);
                if let Some(winner) = self.servers.get(&host).and_then(|s| s.locations.get(&key)) {
                    let msg = format!(
                        "host {host} path {path} ({path_match:?}) is already served by {} (oldest wins); path skipped",
                        winner.owner
                    );
                    self.problem(r, Severity::Error, ProblemKind::Conflict, msg);
                    continue;
                }
                let regex_limit = self.snap.settings.limits.regex_paths_per_host;
                if path_match == PathMatch::Regex
                    && (self.servers.get(&host)).is_some_and(|s| s.regex_paths >= regex_limit)
                {
                    let msg = format!(
                        "host {host} path {path}: the host has {regex_limit} regex paths of older \
                         Ingresses already (--max-regex-paths-per-host); path skipped"
                    );
                    self.problem(r, Severity::Error, ProblemKind::Invalid, msg);
                    continue;
                }
                let target = self.target_or_fallback(ns, r, a, &p.backend, || {
                    format!("host {host} path {path}")
                });
                match self.servers.get(&host) {
                    None => {
                        let acc = new_server(self.servers.len());
                        self.servers.insert(host.clone(), acc);
                    }
                    // Server settings are the host's oldest Ingress's.
                    Some(older)
                        if older.owner != *r
                            && !a.server_ciphers.is_empty()
                            && older.ciphers != a.server_ciphers
                            && ciphers_warned.insert(host.clone()) =>
                    {
                        let msg = format!(
                            "host {host}: ssl-ciphers and ssl-prefer-server-ciphers are the \
                             host's oldest Ingress's ({}); this Ingress's are ignored",
                            older.owner
                        );
                        self.problem(r, Severity::Warning, ProblemKind::Conflict, msg);
                    }
                    Some(_) => {}
                }
                let server = self.servers.get_mut(&host).expect("inserted above");
                let mut settings = settings.clone();
                let global_auth = &self.global.global_auth;
                if settings.external_auth.is_none()
                    && global_auth.covers(&path, a.enable_global_auth)
                {
                    match &global_auth.auth {
                        Some(auth) => settings.external_auth = Some(auth.clone()),
                        // Invalid global auth: closed (reported on the ConfigMap).
                        None => settings.source_ranges.closed = true,
                    }
                }
                // no-tls-redirect-locations (ACME's challenge path by default): as
                // ingress-nginx, a location whose path starts with one never
                // redirects to HTTPS.
                if (self.global.http.no_tls_redirect_locations.iter())
                    .any(|p| path.starts_with(p.as_str()))
                {
                    settings.ssl_redirect = false;
                    settings.force_ssl_redirect = false;
                }
                let location = Location {
                    path,
                    path_match,
                    owner: r.clone(),
                    target,
                    settings,
                };
                server.regex_paths += usize::from(path_match == PathMatch::Regex);
                server.locations.insert(key, location);
            }
        }
        if let Some(target) = rule_default {
            // The catch-all server is always there in ingress-nginx: never filled so.
            let new_hosts = (rule_hosts.iter())
                .filter(|h| !older_hosts.contains(*h) && h.as_str() != DEFAULT_SERVER);
            for host in new_hosts {
                let order = self.servers.len();
                (self.servers.entry(host.clone())).or_insert_with(|| new_server(order));
                let location = Location {
                    path: "/".to_owned(),
                    path_match: PathMatch::Prefix,
                    owner: r.clone(),
                    target: target.clone(),
                    settings: settings.clone(),
                };
                self.root_defaults.push((host.clone(), location));
            }
        }

        for tls in spec.tls.iter().flatten() {
            for h in tls.hosts.iter().flatten() {
                let Ok(host) = hosts::host(h) else {
                    self.problem(
                        r,
                        Severity::Error,
                        ProblemKind::Invalid,
                        format!("spec.tls: invalid host {h:?}; skipped"),
                    );
                    continue;
                };
                // As ingress-nginx: a certificate for a host the Ingress has no rule for
                // would let an old Ingress take the TLS of anyone's host at any time.
                if !rule_hosts.contains(&host) {
                    let msg = format!(
                        "spec.tls: host {host} has no rule in this Ingress; its certificate is ignored"
                    );
                    self.problem(r, Severity::Warning, ProblemKind::Other, msg);
                    continue;
                }
                let secret = tls
                    .secret_name
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .map(|s| format!("{ns}/{s}"));
                match self.tls_claims.get(&host) {
                    None => {
                        self.tls_claims.insert(
                            host,
                            TlsClaim {
                                owner: r.clone(),
                                secret,
                            },
                        );
                    }
                    Some(c) if c.secret == secret => {}
                    Some(c) => {
                        let msg = format!(
                            "spec.tls: the certificate of host {host} is already provided by {} with Secret {} (oldest wins)",
                            c.owner,
                            c.secret.as_deref().unwrap_or("<default>")
                        );
                        self.problem(r, Severity::Error, ProblemKind::Conflict, msg);
                    }
                }
            }
        }
    }

    /// The error pages of an Ingress's locations: its `custom-http-errors` (else the
    /// ConfigMap's), answered by its `default-backend` (else
    /// `--default-backend-service`). Without a backend to answer them, NGINX's own
    /// pages are served, with a Warning.
    fn error_pages(
        &mut self,
        r: &ResourceRef,
        a: &annotations::errors::ErrorPages,
    ) -> Option<crate::model::ErrorPages> {
        let codes = a
            .codes
            .clone()
            .unwrap_or_else(|| self.global.custom_http_errors.clone());
        if codes.is_empty() {
            // Without error pages, default-backend is only the fallback of a
            // Service without endpoints (`target_or_fallback`).
            return None;
        }
        let prefix = &self.snap.settings.annotations_prefix;
        let (ns, name, what) = match (&a.backend, &self.snap.settings.default_backend_service) {
            (Some(svc), _) => (
                r.namespace.clone(),
                svc.clone(),
                format!("annotation {prefix}/default-backend"),
            ),
            (None, Some(flag)) => {
                let (ns, name) = flag_ref(flag);
                (
                    ns.to_owned(),
                    name.to_owned(),
                    "--default-backend-service".to_owned(),
                )
            }
            (None, None) => {
                let msg = format!(
                    "annotation {prefix}/custom-http-errors (or the ConfigMap's): no \
                     {prefix}/default-backend and no --default-backend-service to answer \
                     them; NGINX's own error pages are served"
                );
                self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
                return None;
            }
        };
        let Some(backend) = self.first_port(&ns, &name) else {
            let msg = format!(
                "{what}: Service {ns}/{name} not found or has no port; NGINX's own error \
                 pages are served"
            );
            self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
            return None;
        };
        match self.target(&ns, r, &backend, (false, WhenEmpty::Answer503), || {
            what.clone()
        }) {
            Target::Backend(b) => Some(crate::model::ErrorPages {
                codes,
                backend: b,
                intercept: !a.no_intercept,
            }),
            Target::Status(_) => None,
        }
    }

    /// The target of a path, balancing set: with `default-backend`, a backend that
    /// is the path's Service's endpoints, or the default backend's while that has
    /// none (ingress-nginx's fallback), so that either change is an endpoint
    /// change, never a reload.
    fn target_or_fallback(
        &mut self,
        ns: &str,
        r: &ResourceRef,
        a: &IngressAnnotations,
        backend: &IngressBackend,
        what: impl Fn() -> String,
    ) -> Target {
        let fallback = a.error_pages.backend.as_ref().and_then(|d| {
            let port = self.first_port(ns, d);
            if port.is_none() {
                let prefix = &self.snap.settings.annotations_prefix;
                let msg = format!(
                    "{}: annotation {prefix}/default-backend: Service {ns}/{d} not found or \
                     has no port; no fallback",
                    what()
                );
                self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
            }
            Some((d.clone(), port?))
        });
        let default = fallback.as_ref().map(|(d, _)| format!("{ns}/{d}"));
        let empty = match &default {
            Some(d) => WhenEmpty::DefaultBackend(d),
            None => WhenEmpty::Answer503,
        };
        let target = self.target(ns, r, backend, (self.service_upstream(a), empty), &what);
        let Target::Backend(primary) = target else {
            return target;
        };
        self.set_balancing(&primary, r, a);
        let Some((_, dflt)) = fallback else {
            return Target::Backend(primary);
        };
        let prefix = &self.snap.settings.annotations_prefix;
        let label = || format!("annotation {prefix}/default-backend");
        match self.target(ns, r, &dflt, (false, WhenEmpty::Answer503), label) {
            Target::Backend(secondary) if secondary != primary => {
                let name = format!("{primary}~fallback~{secondary}");
                self.default_backend_fallbacks
                    .insert(name.clone(), (primary, secondary));
                Target::Backend(name)
            }
            _ => Target::Backend(primary),
        }
    }

    /// `service-upstream` of the Ingress, else the ConfigMap's.
    fn service_upstream(&self, a: &IngressAnnotations) -> bool {
        a.service_upstream.unwrap_or(self.global.service_upstream)
    }

    fn location_settings(
        &mut self,
        r: &ResourceRef,
        a: &IngressAnnotations,
        basic_auth: Option<annotations::BasicAuth>,
        backend_tls: Option<annotations::BackendTls>,
    ) -> LocationSettings {
        let snippets_on = self.global.allow_snippet_annotations;
        if !snippets_on {
            let present = [
                ("configuration-snippet", a.configuration_snippet.is_some()),
                ("server-snippet", a.server_snippet.is_some()),
                ("stream-snippet", a.stream_snippet.is_some()),
            ];
            for (key, _) in present.into_iter().filter(|(_, set)| *set) {
                let msg = format!(
                    "annotation {}/{key}: snippets are disabled by the administrator \
                     (allow-snippet-annotations); the snippet is ignored",
                    self.snap.settings.annotations_prefix
                );
                self.problem(r, Severity::Warning, ProblemKind::Invalid, msg);
            }
        }
        LocationSettings {
            ssl_redirect: a.ssl_redirect.unwrap_or(self.global.ssl_redirect),
            force_ssl_redirect: a
                .force_ssl_redirect
                .unwrap_or(self.global.force_ssl_redirect),
            preserve_trailing_slash: a.preserve_trailing_slash,
            redirect: a.redirect.clone(),
            app_root: a.app_root.clone(),
            cors: a.cors.clone(),
            buffering: a.buffering.clone(),
            forwarding: a.forwarding.clone(),
            backend_tls,
            mirror: a.mirror.clone(),
            backend_protocol: a.backend_protocol.unwrap_or_default(),
            proxy_body_size: a.proxy_body_size.clone(),
            proxy_connect_timeout: a.proxy_connect_timeout,
            proxy_read_timeout: a.proxy_read_timeout,
            proxy_send_timeout: a.proxy_send_timeout,
            rewrite_target: a.rewrite_target.clone(),
            configuration_snippet: if snippets_on {
                a.configuration_snippet.clone()
            } else {
                None
            },
            source_ranges: SourceRanges::or_defaults(&a.source_ranges, &self.global.source_ranges),
            basic_auth,
            external_auth: a.external_auth.clone(),
            rate_limits: a.rate_limits.clone(),
            satisfy: a.satisfy,
            error_pages: None,
            custom_headers: a.custom_header_list.clone(),
        }
    }

    /// Resolves an Ingress backend into a target, recording problems on `r`.
    /// `what` describes the reference for problem messages (built only when needed).
    /// The target of an Ingress backend: its model backend (the Service's endpoints,
    /// or with `cluster_ip` (`service-upstream`) its ClusterIP), or the status to
    /// answer when it cannot be resolved. Problems name `what`, and say what a
    /// backend without endpoints answers (`empty`).
    fn target(
        &mut self,
        ns: &str,
        r: &ResourceRef,
        backend: &IngressBackend,
        (cluster_ip, empty): (bool, WhenEmpty<'_>),
        what: impl Fn() -> String,
    ) -> Target {
        let Some(svc) = backend.service.as_ref() else {
            let msg = format!(
                "{}: resource backends are not supported; answering 503",
                what()
            );
            self.problem(r, Severity::Error, ProblemKind::Invalid, msg);
            return Target::Status(503);
        };
        // Memo key: namespace, Service and port, written into a reused buffer so that
        // a path whose Service was already resolved costs no allocation but its name.
        use std::fmt::Write as _;
        let mut key = std::mem::take(&mut self.key_buf);
        key.clear();
        let _ = match svc.port.as_ref().map(|p| (&p.name, p.number)) {
            Some((Some(n), _)) if !n.is_empty() => write!(key, "{ns}\0{}\0{n}", svc.name),
            Some((_, Some(n))) => write!(key, "{ns}\0{}\0{n}", svc.name),
            _ => write!(key, "{ns}\0{}\0", svc.name),
        };
        if cluster_ip {
            key.push_str("\0cluster-ip");
        }
        let resolved = match self.resolved.get(key.as_str()) {
            Some(res) => res.clone(),
            None => {
                let res = if cluster_ip {
                    // a headless Service has no ClusterIP: its endpoints, as without
                    // the annotation (a warning below)
                    self.index
                        .resolve_cluster_ip(ns, svc)
                        .transpose()
                        .unwrap_or_else(|| self.index.resolve(ns, svc))
                } else {
                    self.index.resolve(ns, svc)
                };
                // The headless fallback resolves the plain backend under another
                // memo key: the one already built (with its balancing) stays.
                // A new backend balances as the ConfigMap's load-balance says until an
                // Ingress's annotations say otherwise (set_balancing).
                let load_balance = self.global.load_balance;
                let res = res.map(|(mut b, dropped)| {
                    let name = b.name.clone();
                    if !dropped.is_empty() {
                        self.dropped_endpoints.insert(name.clone(), dropped);
                    }
                    self.backends.entry(name.clone()).or_insert_with(|| {
                        b.balancing.load_balance = load_balance;
                        b
                    });
                    name
                });
                self.resolved.insert(key.clone(), res.clone());
                res
            }
        };
        self.key_buf = key;
        match resolved {
            Ok(name) => {
                if cluster_ip
                    && !self.backends[&name].cluster_ip
                    && self.backends[&name].external_name.is_none()
                {
                    let msg = format!(
                        "{}: service-upstream: Service {ns}/{} has no ClusterIP (headless); \
                         proxying to its endpoints",
                        what(),
                        svc.name
                    );
                    self.problem(r, Severity::Warning, ProblemKind::Other, msg);
                }
                if let Some(dropped) = self.dropped_endpoints.get(&name) {
                    let shown: Vec<String> =
                        dropped.iter().take(3).map(ToString::to_string).collect();
                    let more = match dropped.len() - shown.len() {
                        0 => String::new(),
                        n => format!(" and {n} more"),
                    };
                    let msg = format!(
                        "{}: Service {ns}/{} port {}: endpoint {}{more} left out: loopback, \
                         link-local and unspecified addresses reach the node or the controller \
                         itself, not a pod (--allow-local-endpoints allows them)",
                        what(),
                        svc.name,
                        self.backends[&name].service_port,
                        shown.join(", "),
                    );
                    self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
                }
                if self.backends[&name].endpoints.is_empty() {
                    let outcome = match empty {
                        WhenEmpty::Answer503 => "answering 503".to_owned(),
                        WhenEmpty::PrimaryServes => {
                            "the primary serves the canary's share".to_owned()
                        }
                        WhenEmpty::DefaultBackend(d) => format!("answered by default-backend {d}"),
                    };
                    let msg = format!(
                        "{}: Service {ns}/{} port {} has no ready endpoints; {outcome}",
                        what(),
                        svc.name,
                        self.backends[&name].service_port
                    );
                    self.problem(r, Severity::Warning, ProblemKind::Reference, msg);
                }
                Target::Backend(name)
            }
            Err(e) => {
                let msg = format!("{}: {e}; answering 503", what());
                self.problem(r, Severity::Error, ProblemKind::Reference, msg);
                Target::Status(503)
            }
        }
    }

    /// Gives `backend` the balancing settings `r`'s annotations set and no older
    /// Ingress set before; a setting that differs from the older one is reported on
    /// `r`.
    fn set_balancing(&mut self, backend: &str, r: &ResourceRef, a: &IngressAnnotations) {
        let Some(b) = self.backends.get_mut(backend) else {
            return;
        };
        let owners = self.balancing.entry(backend.to_owned()).or_default();
        // `value`: what `r` sets, if anything; taken when nobody set `field` before.
        fn claim<T: PartialEq>(
            field: &mut T,
            owner: &mut Option<ResourceRef>,
            value: Option<T>,
            r: &ResourceRef,
        ) -> Option<ResourceRef> {
            let value = value?;
            match owner {
                None => {
                    *owner = Some(r.clone());
                    *field = value;
                    None
                }
                Some(o) if o != r && *field != value => Some(o.clone()),
                Some(_) => None,
            }
        }
        let bal = &mut b.balancing;
        if a.affinity.is_some() {
            asks_for_affinity(bal, r);
        }
        let lb = claim(
            &mut bal.load_balance,
            &mut owners.load_balance,
            a.load_balance,
            r,
        );
        let hash_by = a.upstream_hash_by.clone().map(Some);
        let hash = claim(
            &mut bal.upstream_hash_by,
            &mut owners.upstream_hash_by,
            hash_by,
            r,
        );
        let subset = claim(
            &mut bal.upstream_hash_by_subset,
            &mut owners.upstream_hash_by_subset,
            a.upstream_hash_by_subset.map(Some),
            r,
        );
        let aff = claim(
            &mut bal.affinity,
            &mut owners.affinity,
            a.affinity.clone().map(Some),
            r,
        );
        for (name, owner) in [
            ("load-balance", lb),
            ("upstream-hash-by", hash),
            ("upstream-hash-by-subset", subset),
            ("affinity", aff),
        ] {
            let Some(owner) = owner else { continue };
            let msg = format!(
                "backend {backend}: the {name} annotations are ignored: {owner} is older and sets them for this Service port"
            );
            self.problem(r, Severity::Warning, ProblemKind::Conflict, msg);
        }
    }

    /// A canary Ingress adds no location: it attaches its backend to the primary
    /// backend of every host + path it shares with a non-canary Ingress.
    fn add_canary(&mut self, ing: &Ingress, r: &ResourceRef, a: &IngressAnnotations) {
        let Some(rules) = a.canary.clone() else {
            return;
        };
        let ns = r.namespace.as_str();
        let regex = a.use_regex || a.rewrite_target.is_some();
        for (ri, rule) in ing
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .enumerate()
        {
            let host = match rule
                .host
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(hosts::host)
            {
                None => DEFAULT_SERVER.to_owned(),
                Some(Ok(h)) => h,
                Some(Err(e)) => {
                    self.problem(
                        r,
                        Severity::Error,
                        ProblemKind::Invalid,
                        format!("spec.rules: {e}; rule skipped"),
                    );
                    continue;
                }
            };
            for (pi, p) in rule.http.iter().flat_map(|h| &h.paths).enumerate() {
                let raw = p.path.clone().unwrap_or_else(|| "/".to_owned());
                let key = match p.path_type.as_str() {
                    "Exact" => (raw, PathMatch::Exact),
                    _ if regex => (raw, PathMatch::Regex),
                    _ => (hosts::prefix(&raw), PathMatch::Prefix),
                };
                let location = self.servers.get(&host).and_then(|s| s.locations.get(&key));
                // reported on only for a canary from another namespace
                let primary_ingress = location.map(|l| l.owner.clone());
                let primary_owner =
                    (primary_ingress.clone()).filter(|o| o.namespace != r.namespace);
                let primary = location.map(|l| l.target.clone());
                let Some(Target::Backend(primary)) = primary else {
                    let msg = format!(
                        "canary: no primary Ingress with a resolvable backend serves host {host} path {}; canary ignored",
                        key.0
                    );
                    self.problem(r, Severity::Error, ProblemKind::Reference, msg);
                    continue;
                };
                let Target::Backend(canary) = self.target(
                    ns,
                    r,
                    &p.backend,
                    (self.service_upstream(a), WhenEmpty::PrimaryServes),
                    || format!("host {host} path {}", key.0),
                ) else {
                    continue;
                };
                if canary == primary {
                    // It would split traffic between a backend and itself; claiming the
                    // primary would also turn a real canary of it away.
                    let svc = p.backend.service.as_ref().map_or("", |s| s.name.as_str());
                    let msg = format!(
                        "canary: spec.rules[{ri}].http.paths[{pi}].backend.service {ns}/{svc} is the primary's own backend {primary} (host {host} path {}); canary ignored",
                        key.0
                    );
                    self.problem(r, Severity::Error, ProblemKind::Conflict, msg);
                    continue;
                }
                match self.canary_owners.get(&primary) {
                    Some(owner) if owner != r => {
                        let msg = format!(
                            "canary: backend {primary} already has a canary from {owner}, which is older (oldest wins); canary ignored"
                        );
                        self.problem(r, Severity::Error, ProblemKind::Conflict, msg);
                    }
                    _ => {
                        self.canary_owners.insert(primary.clone(), r.clone());
                        // ingress-nginx keeps a canary Ingress's load-balance,
                        // upstream-hash-by and affinity annotations (it ignores the
                        // others); Ingresses routing to the Service directly come first.
                        self.set_balancing(&canary, r, a);
                        // The canary's own cookie (affinity-canary-behavior legacy)
                        // is set on the primary's locations, which it shares.
                        if let (Some(_), Some(o)) = (&a.affinity, &primary_ingress)
                            && let Some(cb) = self.backends.get_mut(&canary)
                        {
                            asks_for_affinity(&mut cb.balancing, o);
                        }
                        let b = self
                            .backends
                            .get_mut(&primary)
                            .expect("primary backend exists");
                        b.balancing.canary = Some(CanaryRoute {
                            backend: canary.clone(),
                            rules: rules.clone(),
                        });
                        // As in ingress-nginx, any namespace may add a canary to a
                        // host + path; the primary's owner at least sees it in its status.
                        if let Some(owner) = &primary_owner {
                            let msg = format!(
                                "canary: {r} (another namespace) receives part of the traffic of backend {primary} (host {host} path {}), routed to {canary}",
                                key.0
                            );
                            self.problem(owner, Severity::Warning, ProblemKind::Other, msg);
                        }
                    }
                }
            }
        }
    }

    /// The `(alias, host)` pairs of `server-alias`, in the order the hosts' owners
    /// were visited (oldest first): an alias that another Ingress serves, that a
    /// from-to-www-redirect twin or an older alias took, is left out with a Warning.
    fn server_aliases(
        &mut self,
        servers: &HashMap<String, ServerAcc>,
        twins: &[(String, String)],
    ) -> Vec<(String, String)> {
        let mut claims: Vec<(&String, &ServerAcc)> = servers
            .iter()
            .filter(|(h, acc)| !acc.aliases.is_empty() && h.as_str() != DEFAULT_SERVER)
            .collect();
        claims.sort_by_key(|(_, acc)| acc.order);
        let mut out: Vec<(String, String)> = Vec::new();
        for (host, acc) in claims {
            for alias in &acc.aliases {
                let taken = if let Some(other) = servers.get(alias) {
                    Some(format!("it is a host of {}", other.owner))
                } else if twins.iter().any(|(t, _)| t == alias) {
                    Some("it is the from-to-www-redirect twin of another host".to_owned())
                } else if let Some((_, h)) = out.iter().find(|(a, _)| a == alias) {
                    Some(format!("host {h} has it as an alias already"))
                } else {
                    None
                };
                match taken {
                    Some(why) => {
                        let msg = format!(
                            "annotation {}/server-alias: alias {alias} is left out: {why}",
                            self.snap.settings.annotations_prefix
                        );
                        self.problem(&acc.owner, Severity::Warning, ProblemKind::Conflict, msg);
                    }
                    None => out.push((alias.clone(), host.clone())),
                }
            }
        }
        out
    }

    fn finish(mut self) -> Model {
        for (name, (primary, secondary)) in std::mem::take(&mut self.default_backend_fallbacks) {
            let (Some(p), Some(d)) = (self.backends.get(&primary), self.backends.get(&secondary))
            else {
                continue;
            };
            let mut b = p.clone();
            if b.endpoints.is_empty() {
                b.endpoints = d.endpoints.clone();
            }
            b.name = name.clone();
            b.fallback = Some(d.service.clone());
            self.backends.insert(name, b);
        }
        for (host, location) in std::mem::take(&mut self.root_defaults) {
            if let Some(acc) = self.servers.get_mut(&host) {
                let key = ("/".to_owned(), PathMatch::Prefix);
                acc.locations.entry(key).or_insert(location);
            }
        }
        let mut certificates = BTreeMap::new();
        let default_certificate = self.default_certificate_flag(&mut certificates);
        let mut servers = Vec::with_capacity(self.servers.len());
        let server_acc = std::mem::take(&mut self.servers);
        let claims = std::mem::take(&mut self.tls_claims);
        let twins = redirect_twins(&server_acc);
        let aliases = self.server_aliases(&server_acc, &twins);
        self.passthrough = self.passthrough_hosts(&server_acc);
        for (host, acc) in server_acc {
            let tls = claims.get(&host).map(|claim| {
                let tls = self.server_tls(&host, claim, &mut certificates);
                ServerTls {
                    certificate: tls.certificate.or_else(|| default_certificate.clone()),
                }
            });
            let mut locations: Vec<Location> = acc.locations.into_values().collect();
            locations.sort_by(|a, b| {
                (a.path_match, std::cmp::Reverse(a.path.len()), &a.path).cmp(&(
                    b.path_match,
                    std::cmp::Reverse(b.path.len()),
                    &b.path,
                ))
            });
            servers.push(Server {
                host,
                tls,
                owner: Some(acc.owner),
                server_snippet: acc.server_snippet,
                client_certificates: acc.client_certificates,
                ciphers: acc.ciphers,
                locations,
                redirect_to: None,
            });
        }
        // The hosts' servers by name, for their twins and aliases (a scan per twin
        // would make the build quadratic in the hosts).
        let by_host: HashMap<String, usize> = (servers.iter().enumerate())
            .map(|(i, s)| (s.host.clone(), i))
            .collect();
        // from-to-www-redirect: the twin host redirects; over TLS with the host's
        // certificate when that covers the twin too.
        for (twin, to) in twins {
            let host = by_host.get(&to).map(|&i| &servers[i]);
            let owner = host.and_then(|s| s.owner.clone());
            let tls = host.and_then(|s| s.tls.clone()).filter(|t| {
                t.certificate
                    .as_ref()
                    .and_then(|c| certificates.get(c))
                    .is_some_and(|c: &crate::model::Certificate| tls::covers(&c.names, &twin))
            });
            servers.push(Server {
                host: twin,
                tls,
                owner,
                server_snippet: None,
                client_certificates: None,
                ciphers: Default::default(),
                locations: Vec::new(),
                redirect_to: Some(to),
            });
        }
        // server-alias: the host's server again under each name it may take.
        for (alias, host) in aliases {
            if let Some(&i) = by_host.get(&host) {
                let twin = Server {
                    host: alias,
                    ..servers[i].clone()
                };
                servers.push(twin);
            }
        }
        servers.sort_by(|a, b| a.host.cmp(&b.host));

        let default_backend = match self.catch_all.take() {
            Some((_, target)) => target,
            None => self.default_backend_flag(),
        };
        // Backends only referenced by skipped rules must not survive.
        let used: std::collections::HashSet<&str> = crate::model::routed_backends(
            &servers,
            &default_backend,
            &self.streams,
            &self.passthrough,
        )
        .map(String::as_str)
        .collect();
        let canaries: Vec<String> = used
            .iter()
            .filter_map(|n| {
                self.backends
                    .get(*n)?
                    .balancing
                    .canary
                    .as_ref()
                    .map(|c| c.backend.clone())
            })
            .collect();
        let mut backends = std::mem::take(&mut self.backends);
        backends.retain(|n, _| used.contains(n.as_str()) || canaries.contains(n));

        self.problems.sort();
        self.problems.dedup();
        Model {
            servers: std::sync::Arc::new(servers),
            backends: backends
                .into_iter()
                .map(|(name, b)| (name, std::sync::Arc::new(b)))
                .collect(),
            certificates: std::sync::Arc::new(certificates),
            default_certificate,
            default_backend,
            streams: self.streams,
            passthrough: self.passthrough,
            stream_snippets: self.stream_snippets,
            global: self.global,
            problems: self.problems,
            certificates_valid_until: self.valid_until,
            hash_memo: Default::default(),
        }
    }

    /// The hosts whose owner asked for `ssl-passthrough`, to the backend of their `/`
    /// rule (ingress-nginx's choice); a host without one is served terminated, with
    /// a Warning on its owner.
    fn passthrough_hosts(
        &mut self,
        servers: &HashMap<String, ServerAcc>,
    ) -> Vec<crate::model::Passthrough> {
        let mut out = Vec::new();
        for (host, acc) in servers.iter().filter(|(_, acc)| acc.passthrough) {
            let root = acc.locations.get(&("/".to_owned(), PathMatch::Prefix));
            match root.map(|l| &l.target) {
                Some(Target::Backend(b)) => out.push(crate::model::Passthrough {
                    host: host.clone(),
                    owner: acc.owner.clone(),
                    backend: b.clone(),
                }),
                _ => {
                    let msg = format!(
                        "ssl-passthrough: host {host} has no rule for path / (Prefix) to a \
                         Service; its TLS is terminated by NGINX"
                    );
                    let owner = acc.owner.clone();
                    self.problem(&owner, Severity::Warning, ProblemKind::Reference, msg);
                }
            }
        }
        out.sort_by(|a, b| a.host.cmp(&b.host));
        out
    }

    /// Only expiry changes a checked certificate's outcome as time goes on.
    fn note_validity(&mut self, checked: &Result<Certificate, String>) {
        if let Ok(c) = checked {
            self.valid_until = Some(self.valid_until.map_or(c.not_after, |v| v.min(c.not_after)));
        }
    }

    fn server_tls(
        &mut self,
        host: &str,
        claim: &TlsClaim,
        certs: &mut BTreeMap<String, Certificate>,
    ) -> ServerTls {
        let Some(secret) = &claim.secret else {
            return ServerTls { certificate: None };
        };
        let name = secret.clone();
        // Parsing and key checking cost far more than the rest of a host (an RSA key
        // check is ~0.1 ms), and one Secret (a wildcard) often serves many hosts: each
        // Secret is checked once per build.
        let checked = match self.checked_secrets.get(&name) {
            Some(c) => c.clone(),
            None => {
                let key = secret.split_once('/').expect("claims hold namespace/name");
                let now = self.snap.settings.now;
                let certificate = match self.secrets.get(&key) {
                    None => Err(format!("Secret {name} not found")),
                    Some(s) => tls::certificate(s, now).map_err(|e| format!("Secret {name}: {e}")),
                };
                // A Secret that exists but whose new version is not valid keeps its
                // last valid version while that is not expired (a deleted one does not).
                let previous = || {
                    let prev = self.fallbacks.certificates.get(&name)?;
                    (prev.not_after >= now).then(|| prev.clone())
                };
                let c = match certificate {
                    Err(e) if self.secrets.contains_key(&key) => match previous() {
                        Some(prev) => CheckedSecret {
                            certificate: Ok(prev),
                            refused: Some(e),
                        },
                        None => CheckedSecret {
                            certificate: Err(e),
                            refused: None,
                        },
                    },
                    c => CheckedSecret {
                        certificate: c,
                        refused: None,
                    },
                };
                self.note_validity(&c.certificate);
                self.checked_secrets.insert(name.clone(), c.clone());
                c
            }
        };
        let refused = checked.refused;
        let checked = checked.certificate.and_then(|c| {
            if tls::covers(&c.names, host) {
                Ok(c)
            } else {
                Err(format!(
                    "Secret {name}: the certificate does not cover host {host} (names: {})",
                    c.names.join(", ")
                ))
            }
        });
        match checked {
            Ok(cert) => {
                if let Some(e) = refused {
                    let msg = format!(
                        "spec.tls host {host}: {e}; serving the Secret's last valid version"
                    );
                    self.problem(&claim.owner, Severity::Error, ProblemKind::Tls, msg);
                }
                certs.insert(name.clone(), cert);
                ServerTls {
                    certificate: Some(name),
                }
            }
            Err(e) => {
                self.problem(
                    &claim.owner,
                    Severity::Error,
                    ProblemKind::Tls,
                    format!("spec.tls host {host}: {e}; serving the default certificate"),
                );
                ServerTls { certificate: None }
            }
        }
    }

    /// The `--default-ssl-certificate` Secret, checked like any TLS Secret but
    /// without a host to cover (it is served for any name); added to `certs`.
    fn default_certificate_flag(
        &mut self,
        certs: &mut BTreeMap<String, Certificate>,
    ) -> Option<String> {
        let flag = self.snap.settings.default_certificate.clone()?;
        let (ns, name) = flag_ref(&flag);
        let checked = match self.secrets.get(&(ns, name)) {
            None => Err("Secret not found".to_owned()),
            Some(s) => tls::certificate(s, self.snap.settings.now),
        };
        self.note_validity(&checked);
        match checked {
            Ok(cert) => {
                let key = format!("{ns}/{name}");
                certs.insert(key.clone(), cert);
                Some(key)
            }
            Err(e) => {
                let r = ResourceRef::new("Secret", ns, name);
                let msg = format!(
                    "--default-ssl-certificate {flag}: {e}; serving the self-signed default certificate"
                );
                self.problem(&r, Severity::Error, ProblemKind::Tls, msg);
                None
            }
        }
    }

    /// The backend of Service `ns/name` on its first port (how ingress-nginx picks
    /// the port of `--default-backend-service` and `default-backend`); `None` when
    /// the Service is missing or has no port.
    fn first_port(&self, ns: &str, name: &str) -> Option<IngressBackend> {
        let port = (self.snap.services.iter())
            .find(|s| meta_key(&s.metadata) == (ns, name))
            .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port))?;
        Some(IngressBackend {
            service: Some(k8s_openapi::api::networking::v1::IngressServiceBackend {
                name: name.to_owned(),
                port: Some(k8s_openapi::api::networking::v1::ServiceBackendPort {
                    number: Some(port),
                    name: None,
                }),
            }),
            resource: None,
        })
    }

    fn default_backend_flag(&mut self) -> Target {
        let Some(flag) = self.snap.settings.default_backend_service.clone() else {
            return Target::Status(404);
        };
        let (ns, name) = flag_ref(&flag);
        let r = ResourceRef::new("Service", ns, name);
        let Some(backend) = self.first_port(ns, name) else {
            self.problem(&r, Severity::Error, ProblemKind::Reference, format!("--default-backend-service {flag}: Service not found or has no port; answering 503"));
            return Target::Status(503);
        };
        // No annotations: the ConfigMap's defaults, unless an Ingress routes to it.
        self.target(ns, &r, &backend, (false, WhenEmpty::Answer503), || {
            "--default-backend-service".to_owned()
        })
    }
}

/// The `NAMESPACE/NAME` of a flag (`--default-backend-service`,
/// `--default-ssl-certificate`); a bare name is in `default`, as in ingress-nginx.
fn flag_ref(flag: &str) -> (&str, &str) {
    flag.split_once('/').unwrap_or(("default", flag))
}

fn meta_key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (&str, &str) {
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
}

pub(crate) fn ingress_ref(ing: &Ingress) -> ResourceRef {
    let (ns, name) = meta_key(&ing.metadata);
    ResourceRef::new("Ingress", ns, name)
}

/// Oldest first: creationTimestamp, then namespace/name. A missing timestamp sorts first.
pub(crate) fn age_key(ing: &Ingress) -> (Option<i64>, &str, &str) {
    let ts = ing
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let (ns, name) = meta_key(&ing.metadata);
    (ts, ns, name)
}

/// The Ingresses of the snapshot that belong to this controller (class selection).
pub fn owned_ingresses(snap: &Snapshot) -> Vec<ResourceRef> {
    let filter = classes::ClassFilter::new(&snap.ingress_classes, &snap.settings);
    let mut out: Vec<ResourceRef> = snap
        .ingresses
        .iter()
        .filter(|i| filter.is_ours(i))
        .map(|i| ingress_ref(i))
        .collect();
    out.sort();
    out
}

/// The `(twin, host)` pairs of `from-to-www-redirect`: `www.host` for `host` and
/// `host` for `www.host`, where the host's owner asks for it and no Ingress serves
/// the twin (a real host is never taken over). Wildcard hosts have no twin.
fn redirect_twins(servers: &HashMap<String, ServerAcc>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = servers
        .iter()
        .filter(|(host, acc)| {
            acc.from_to_www && !host.starts_with('*') && host.as_str() != DEFAULT_SERVER
        })
        .filter_map(|(host, _)| {
            let twin = match host.strip_prefix("www.") {
                Some(bare) if bare.contains('.') => bare.to_owned(),
                Some(_) => return None,
                None => format!("www.{host}"),
            };
            (!servers.contains_key(&twin)).then(|| (twin, host.clone()))
        })
        .collect();
    // Both www.a and a cannot be twins here (both are served); two hosts cannot
    // share a twin either. Sorted: the model does not depend on the map's order.
    out.sort();
    out
}
