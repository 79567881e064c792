//! The controller ConfigMap: administrator-owned global settings.

use k8s_openapi::api::core::v1::ConfigMap;

use crate::annotations::{GlobalAuth, balancing, external_auth, source_ranges, value};
use crate::build::{blocking, header_lists, http_keys, real_ip, tuning};
use crate::configmap::{self, Status};
use crate::model::{Global, Problem, ProblemKind, ResourceRef, Severity};

/// Reads the ConfigMap into global settings. Invalid values are reported on the
/// ConfigMap and replaced by the default; they never fail the build.
pub(crate) fn global(
    cm: Option<&ConfigMap>,
    allow_snippets: bool,
    config_maps: &[std::sync::Arc<ConfigMap>],
    problems: &mut Vec<Problem>,
) -> Global {
    let mut g = Global {
        allow_snippet_annotations: allow_snippets,
        ssl_redirect: true,
        http_redirect_code: 308,
        proxy_body_size: "1m".to_owned(),
        proxy_connect_timeout: 5,
        proxy_read_timeout: 60,
        proxy_send_timeout: 60,
        limit_req_status: 503,
        limit_conn_status: 503,
        limit_key_variable: "$binary_remote_addr".to_owned(),
        ..Global::default()
    };
    let mut hsts = Hsts::default();
    if let Some(cm) = cm {
        read(cm, config_maps, &mut g, &mut hsts, problems);
    }
    g.hsts = hsts.header();
    g
}

/// The ConfigMap's `hsts*` keys.
struct Hsts {
    on: bool,
    max_age: u32,
    subdomains: bool,
    preload: bool,
}

impl Default for Hsts {
    /// ingress-nginx's defaults: a year, subdomains included, no preload.
    fn default() -> Self {
        Hsts {
            on: true,
            max_age: 31_536_000,
            subdomains: true,
            preload: false,
        }
    }
}

impl Hsts {
    /// The Strict-Transport-Security value, `None` when off.
    fn header(&self) -> Option<String> {
        self.on.then(|| {
            let mut v = format!("max-age={}", self.max_age);
            if self.subdomains {
                v.push_str("; includeSubDomains");
            }
            if self.preload {
                v.push_str("; preload");
            }
            v
        })
    }
}

/// A ConfigMap key Ferrule does not read: never silently dropped. One that
/// restricts access for every host is an error (a new pod is then not Ready: see
/// the controller's readiness), any other a Warning. What is said comes from the
/// registry (`configmap.rs`); an unknown key that looks like a restriction is an
/// error too.
fn unimplemented_key(r: &ResourceRef, key: &str) -> Problem {
    let listed = configmap::lookup(key);
    let restricts = listed.map_or_else(
        || {
            key.ends_with("-source-range")
                || key.starts_with("global-auth-")
                || key.starts_with("global-rate-limit")
                || key.starts_with("block-")
                || key.contains("modsecurity")
                || key.contains("owasp")
        },
        |k| k.restricts,
    );
    let what = match listed.map(|k| k.status) {
        Some(Status::NeedsModule(m)) => format!("needs the {m} module, which this NGINX lacks"),
        Some(Status::NotApplicable(why)) => format!("has no effect in Ferrule ({why})"),
        // a supported key the reader did not read (a registry out of step)
        Some(Status::Supported { .. }) => "is not implemented by Ferrule yet".to_owned(),
        None => "is not an ingress-nginx or Ferrule key".to_owned(),
    };
    if restricts {
        Problem {
            resource: r.clone(),
            severity: Severity::Error,
            message: format!(
                "key {key} restricts access and {what}; the hosts are served without it"
            ),
            kind: ProblemKind::Invalid,
        }
    } else {
        Problem {
            resource: r.clone(),
            severity: Severity::Warning,
            message: format!("key {key} {what}; it is ignored"),
            kind: ProblemKind::Other,
        }
    }
}

/// Reads the ConfigMap's keys into `g` and `hsts`.
fn read(
    cm: &ConfigMap,
    config_maps: &[std::sync::Arc<ConfigMap>],
    g: &mut Global,
    hsts: &mut Hsts,
    problems: &mut Vec<Problem>,
) {
    let r = ResourceRef::new(
        "ConfigMap",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default(),
    );
    let Some(data) = cm.data.as_ref() else {
        return;
    };
    let mut bad = |key: &str, v: &str, reason: String| {
        problems.push(Problem {
            resource: r.clone(),
            severity: Severity::Error,
            message: format!("key {key}: invalid value {v:?}: {reason}; using the default"),
            kind: ProblemKind::Invalid,
        })
    };
    let mut unimplemented = Vec::new();
    let get = |k: &str| data.get(k).map(String::as_str);
    let mut invalid = Vec::new();
    g.http = http_keys::read(get, &mut invalid);
    for (key, v, reason) in invalid {
        bad(key, &v, reason);
    }
    // An invalid block list closes every host (fail closed).
    let mut closing = Vec::new();
    g.blocking = blocking::read(get, &mut closing);
    for (key, v, reason) in closing {
        unimplemented.push(Problem {
            resource: r.clone(),
            severity: Severity::Error,
            message: format!(
                "key {key}: invalid value {v:?}: {reason}; every host answers 403 until it \
                 is fixed"
            ),
            kind: ProblemKind::Invalid,
        });
    }
    g.client_address = real_ip::read(&r, get, &mut unimplemented);
    let (global_auth, invalid) = GlobalAuth::read(|k| data.get(k).map(|v| v.trim()));
    g.global_auth = global_auth;
    if let Some((key, reason)) = invalid {
        // Fail closed: without it every location would be open.
        unimplemented.push(Problem {
            resource: r.clone(),
            severity: Severity::Error,
            message: format!(
                "key {key}: {reason}; every location the global auth covers answers 403 \
                 until it is fixed"
            ),
            kind: ProblemKind::Invalid,
        });
    }
    for (key, v) in data {
        let v = v.as_str();
        match key.as_str() {
            // Defaults of the annotations of the same names.
            "ssl-redirect" | "force-ssl-redirect" | "service-upstream" => {
                match value::boolean(v.trim()) {
                    Ok(b) if key == "ssl-redirect" => g.ssl_redirect = b,
                    Ok(b) if key == "force-ssl-redirect" => g.force_ssl_redirect = b,
                    Ok(b) => g.service_upstream = b,
                    Err(e) => bad(key, v, e),
                }
            }
            "custom-http-errors" => match crate::annotations::errors::codes(v) {
                Ok(c) => g.custom_http_errors = c,
                Err(e) => bad(key, v, e),
            },
            "http-redirect-code" => match v.trim() {
                c @ ("301" | "302" | "307" | "308") => g.http_redirect_code = c.parse().unwrap(),
                _ => bad(key, v, "expected 301, 302, 307 or 308".to_owned()),
            },
            "load-balance" => match balancing::load_balance(v.trim()) {
                Ok(lb) => g.load_balance = lb,
                Err(e) => bad(key, v, e),
            },
            "allow-snippet-annotations" => match value::boolean(v.trim()) {
                Ok(b) => g.allow_snippet_annotations |= b,
                Err(e) => bad(key, v, e),
            },
            "proxy-body-size" => match value::size(v.trim()) {
                Ok(s) => g.proxy_body_size = s,
                Err(e) => bad(key, v, e),
            },
            "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => {
                match value::seconds(v.trim()) {
                    Ok(n) if key == "proxy-connect-timeout" => g.proxy_connect_timeout = n,
                    Ok(n) if key == "proxy-read-timeout" => g.proxy_read_timeout = n,
                    Ok(n) => g.proxy_send_timeout = n,
                    Err(e) => bad(key, v, e),
                }
            }
            "hsts" | "hsts-include-subdomains" | "hsts-preload" => match value::boolean(v.trim()) {
                Ok(b) if key == "hsts" => hsts.on = b,
                Ok(b) if key == "hsts-preload" => hsts.preload = b,
                Ok(b) => hsts.subdomains = b,
                Err(e) => bad(key, v, e),
            },
            "limit-req-status-code" | "limit-conn-status-code" => {
                match value::integer(v.trim(), 400, 599) {
                    Ok(n) if key == "limit-req-status-code" => g.limit_req_status = n as u16,
                    Ok(n) => g.limit_conn_status = n as u16,
                    Err(e) => bad(key, v, e),
                }
            }
            // Read by `build`, which has the Secrets.
            "ssl-dh-param" => match v.trim().split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    g.ssl_dh_param = Some(crate::model::DhParam {
                        secret: v.trim().to_owned(),
                        file: None,
                    });
                }
                _ => bad(key, v, "expected the Secret as namespace/name".to_owned()),
            },
            "limit-conn-zone-variable" => match limit_key_variable(v.trim()) {
                Ok(var) => g.limit_key_variable = var,
                Err(e) => bad(key, v, e),
            },
            "proxy-buffering" => match v.trim() {
                "on" => g.proxy_buffering = true,
                "off" => g.proxy_buffering = false,
                _ => bad(key, v, "expected on or off".to_owned()),
            },
            "hsts-max-age" => match value::integer(v.trim(), 0, i32::MAX as u32) {
                Ok(n) => hsts.max_age = n,
                Err(e) => bad(key, v, e),
            },
            "proxy-set-headers" | "add-headers" => match header_lists::resolve(v, config_maps) {
                Ok(h) if key == "add-headers" => g.add_headers = h,
                Ok(h) => g.proxy_set_headers = h,
                Err(e) => bad(key, v, e),
            },
            "http-snippet" => g.http_snippet = Some(v.to_owned()),
            "stream-snippet" => g.stream_snippet = Some(v.to_owned()),
            "global-allowed-response-headers" => {
                let names: Vec<String> = (v.split(','))
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect();
                match names.iter().try_for_each(|n| header_lists::header_name(n)) {
                    Ok(()) => g.allowed_response_headers = names,
                    Err(e) => bad(key, v, e),
                }
            }
            "server-snippet" => g.server_snippet = Some(v.to_owned()),
            "location-snippet" => g.location_snippet = Some(v.to_owned()),
            // An invalid list fails closed: every location relying on it answers 403
            // (the default, no list, would serve everyone).
            "whitelist-source-range" | "denylist-source-range" => {
                let allow = key == "whitelist-source-range";
                match source_ranges::cidr_list(v) {
                    Ok(l) if allow => g.source_ranges.allow = Some(l),
                    Ok(l) => g.source_ranges.deny = Some(l),
                    Err(e) => {
                        if allow {
                            g.source_ranges.allow_invalid = true;
                        } else {
                            g.source_ranges.deny_invalid = true;
                        }
                        unimplemented.push(Problem {
                            resource: r.clone(),
                            severity: Severity::Error,
                            message: format!(
                                "key {key}: invalid value {v:?}: {e}; every location without \
                                 its own list answers 403 until it is fixed"
                            ),
                            kind: ProblemKind::Invalid,
                        });
                    }
                }
            }
            k if tuning::KEYS.contains(&k) => {
                if let Err(e) = g.tuning.set(k, v) {
                    bad(key, v, e);
                }
            }
            k if real_ip::KEYS.contains(&k) => {}
            k if http_keys::reads(k) || blocking::KEYS.contains(&k) => {}
            k if external_auth::GLOBAL_KEYS.contains(&k) => {}
            _ => unimplemented.push(unimplemented_key(&r, key)),
        }
    }
    problems.extend(unimplemented);
}

/// `limit-conn-zone-variable`: one NGINX variable (`$name`), which the limit keys
/// expand for each request.
fn limit_key_variable(v: &str) -> Result<String, String> {
    let name = v.strip_prefix('$').unwrap_or_default();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err("expected one variable, such as $binary_remote_addr".to_owned());
    }
    Ok(v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(key: &str, v: &str) -> Vec<Problem> {
        let mut data = serde_json::json!({ key: v });
        // The global auth's keys mean something only with its URL.
        if key.starts_with("global-auth-") || key == "no-auth-locations" {
            data["global-auth-url"] = "http://auth.example/check".into();
        }
        // The busy buffers mean something only with the buffers.
        if key == "proxy-busy-buffers-size" {
            data["proxy-buffer-size"] = "8k".into();
        }
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ferrule", "name": "config"},
            "data": data,
        }))
        .unwrap();
        // The header lists name another ConfigMap.
        let headers: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ingress-nginx", "name": "custom-headers"},
            "data": {"X-Frame-Options": "DENY", "X-Client": "$remote_addr"},
        }))
        .unwrap();
        let mut problems = Vec::new();
        global(
            Some(&cm),
            false,
            &[std::sync::Arc::new(headers)],
            &mut problems,
        );
        problems
    }

    /// The registry says what the reader does: a supported key's example is read
    /// without a problem, every other key is reported, by name.
    #[test]
    fn the_registry_is_the_reader_s() {
        for k in configmap::KEYS {
            match k.status {
                Status::Supported { example } => {
                    // Advice about a valid value (use-proxy-protocol without
                    // proxy-real-ip-cidr) is fine; a problem with the key is not.
                    let own = format!("key {}", k.name);
                    let p = problems(k.name, example);
                    assert!(
                        !p.iter().any(|p| p.message.starts_with(&own)),
                        "{} = {example:?}: {p:?}",
                        k.name
                    );
                }
                _ => {
                    let p = problems(k.name, "1");
                    assert_eq!(p.len(), 1, "{}: {p:?}", k.name);
                    assert!(p[0].message.contains(k.name), "{}", p[0].message);
                    let severity = if k.restricts {
                        Severity::Error
                    } else {
                        Severity::Warning
                    };
                    assert_eq!(p[0].severity, severity, "{}", k.name);
                }
            }
        }
        let p = problems("no-such-key", "1");
        assert!(p[0].message.contains("not an ingress-nginx or Ferrule key"));
    }
}
