//! ingress-nginx's controller flags that Ferrule does not have, as users pass them
//! through Helm's `extraArgs` when they migrate. Each is translated to Ferrule's
//! equivalent, accepted with a warning saying it has no effect, or refused with a
//! message naming it; never clap's opaque "unexpected argument".

/// What becomes of one ingress-nginx flag.
enum Fate {
    /// Accepted; it changes nothing in Ferrule (the reason says why).
    NoEffect(&'static str),
    /// Refused: ignoring it would change what is served (the reason says why).
    Refused(&'static str),
    /// A boolean refused unless set to the value that is Ferrule's behaviour.
    RefusedUnless(&'static str, &'static str),
    /// The same setting under Ferrule's name.
    Renamed(&'static str),
}

/// `(flag, takes a value, fate)`; boolean flags take a value only as `--flag=v`.
const FLAGS: &[(&str, bool, Fate)] = &[
    (
        "deep-inspect",
        false,
        Fate::NoEffect("annotations are always typed and validated"),
    ),
    (
        "disable-full-test",
        false,
        Fate::NoEffect("nginx -t runs on what changed, config safety isolates the rest"),
    ),
    (
        "disable-sync-events",
        false,
        Fate::NoEffect("events are written only for problems"),
    ),
    (
        "dynamic-configuration-retries",
        true,
        Fate::NoEffect("the balancer client retries until NGINX answers"),
    ),
    (
        "election-ttl",
        true,
        Fate::NoEffect("the lease durations are Ferrule's"),
    ),
    (
        "enable-annotation-validation",
        false,
        Fate::NoEffect("annotations are always validated"),
    ),
    (
        "enable-ssl-chain-completion",
        false,
        Fate::NoEffect("certificates are served with the chain in their Secret"),
    ),
    (
        "enable-topology-aware-routing",
        false,
        Fate::NoEffect("every ready endpoint is used"),
    ),
    (
        "health-check-path",
        true,
        Fate::NoEffect("health is /healthz and /readyz on --status-port"),
    ),
    (
        "health-check-timeout",
        true,
        Fate::NoEffect("health is /healthz and /readyz on --status-port"),
    ),
    ("healthz-host", true, Fate::NoEffect("see --status-address")),
    (
        "healthz-port",
        true,
        Fate::NoEffect("health is on --status-port"),
    ),
    (
        "internal-logger-address",
        true,
        Fate::NoEffect("NGINX logs to its own files or stdio"),
    ),
    (
        "metrics-per-undefined-host",
        false,
        Fate::NoEffect("requests for no known host have no host label"),
    ),
    (
        "monitor-max-batch-size",
        true,
        Fate::NoEffect("request metrics are read from shared memory"),
    ),
    (
        "post-shutdown-grace-period",
        true,
        Fate::NoEffect("see --shutdown-grace-period"),
    ),
    (
        "profiler-port",
        true,
        Fate::NoEffect("there is no profiler endpoint"),
    ),
    (
        "profiling",
        false,
        Fate::NoEffect("there is no profiler endpoint"),
    ),
    (
        "report-node-internal-ip-address",
        false,
        Fate::NoEffect("status addresses come from --publish-service"),
    ),
    (
        "status-update-interval",
        true,
        Fate::NoEffect("status is written when it changes"),
    ),
    (
        "sync-period",
        true,
        Fate::NoEffect("watches resync on their own"),
    ),
    (
        "sync-rate-limit",
        true,
        Fate::NoEffect("see --min-reload-interval-ms and --coalesce-ms"),
    ),
    (
        "update-status-on-shutdown",
        false,
        Fate::NoEffect("status is left to the next lease holder"),
    ),
    (
        "default-server-port",
        true,
        Fate::NoEffect("the default server is NGINX's, on the proxy ports"),
    ),
    (
        "stream-port",
        true,
        Fate::NoEffect("there is no stream configuration server"),
    ),
    (
        "disable-svc-external-name",
        false,
        Fate::NoEffect("ExternalName Services are never resolved"),
    ),
    ("validating-webhook", true, Fate::Renamed("admission-port")),
    (
        "validating-webhook-certificate",
        true,
        Fate::Renamed("admission-cert"),
    ),
    (
        "validating-webhook-key",
        true,
        Fate::Renamed("admission-key"),
    ),
    (
        "ssl-passthrough-proxy-port",
        true,
        Fate::NoEffect(
            "NGINX routes TLS by SNI itself and hands the rest to its HTTPS servers over \
             a unix socket: there is no internal port",
        ),
    ),
    (
        "watch-namespace-selector",
        true,
        Fate::Refused(
            "not implemented; Ingresses of every namespace would be served (use --watch-namespace)",
        ),
    ),
    (
        "ingress-class-by-name",
        false,
        Fate::RefusedUnless(
            "false",
            "not implemented; Ingresses whose class is matched by name would not be served",
        ),
    ),
    (
        "disable-leader-election",
        false,
        Fate::RefusedUnless(
            "false",
            "not implemented; status is written by the lease holder only",
        ),
    ),
    (
        "update-status",
        false,
        Fate::RefusedUnless(
            "true",
            "not implemented; Ferrule always writes Ingress status (as the lease holder)",
        ),
    ),
    (
        "apiserver-host",
        true,
        Fate::Refused("use --kubeconfig, or the pod's service account"),
    ),
    (
        "certificate-authority",
        true,
        Fate::Refused("use --kubeconfig, or the pod's service account"),
    ),
];

/// The arguments with ingress-nginx's flags translated or removed, and a warning
/// for each accepted one; `Err` names the first refused flag.
pub fn translate(args: Vec<String>) -> Result<(Vec<String>, Vec<String>), String> {
    let mut out = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(body) = arg.strip_prefix("--") else {
            out.push(arg);
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (body, None),
        };
        let Some((flag, takes_value, fate)) = FLAGS.iter().find(|(f, _, _)| *f == name) else {
            out.push(arg);
            continue;
        };
        let value = match (inline, takes_value) {
            (Some(v), _) => Some(v),
            (None, true) => Some(it.next().ok_or_else(|| format!("--{flag} needs a value"))?),
            (None, false) => None,
        };
        match fate {
            Fate::NoEffect(why) => {
                warnings.push(format!(
                    "--{flag} (ingress-nginx) has no effect in Ferrule: {why}"
                ));
            }
            Fate::Refused(why) => {
                return Err(format!("--{flag} (ingress-nginx) is refused: {why}"));
            }
            // Set to what Ferrule does anyway, it is accepted.
            Fate::RefusedUnless(ours, _) if value.as_deref().unwrap_or("true") == *ours => {}
            Fate::RefusedUnless(_, why) => {
                return Err(format!("--{flag} (ingress-nginx) is refused: {why}"));
            }
            Fate::Renamed(ours) => {
                let v = value.unwrap_or_default();
                // ingress-nginx's webhook address is `[host]:port`.
                let v = match *ours {
                    "admission-port" => v.rsplit(':').next().unwrap_or_default().to_owned(),
                    _ => v,
                };
                warnings.push(format!("--{flag} (ingress-nginx) is read as --{ours} {v}"));
                out.push(format!("--{ours}"));
                out.push(v);
            }
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &str, expected: Result<&str, &str>) {
        let args = args.split(' ').map(str::to_owned).collect();
        let got = translate(args).map(|(a, _)| a.join(" "));
        match (got, expected) {
            (Ok(a), Ok(want)) => assert_eq!(a, want),
            (Err(e), Err(want)) => assert!(e.contains(want), "{e}"),
            (got, want) => panic!("{got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn flags_are_translated_ignored_or_refused() {
        check(
            "ferrule run --sync-period 10m --http-port 80",
            Ok("ferrule run --http-port 80"),
        );
        check(
            "ferrule run --sync-period=10m --profiling",
            Ok("ferrule run"),
        );
        check(
            "ferrule run --validating-webhook=:8443 --validating-webhook-key /k",
            Ok("ferrule run --admission-port 8443 --admission-key /k"),
        );
        check(
            "ferrule run --tcp-services-configmap=a/b",
            Ok("ferrule run --tcp-services-configmap=a/b"),
        );
        check(
            "ferrule run --enable-ssl-passthrough --ssl-passthrough-proxy-port 442",
            Ok("ferrule run --enable-ssl-passthrough"),
        );
        check(
            "ferrule run --update-status=true --disable-catch-all=false",
            Ok("ferrule run --disable-catch-all=false"),
        );
        check("ferrule run --update-status=false", Err("--update-status"));
        check("ferrule run --election-ttl", Err("needs a value"));
        check(
            "ferrule run --unknown-flag",
            Ok("ferrule run --unknown-flag"),
        );
    }
}
