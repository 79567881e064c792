//! ingress-nginx's controller metrics: the running configuration's hash, reloads
//! (`success`, `errors`, whether the last one succeeded and when one last did),
//! leader election and the build.

use std::sync::Mutex;

use super::identity::Identity;
use super::text::{Kind, header, sample};

const P: &str = "nginx_ingress_controller";

/// What one pass of the reload path did, as these metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass<'a> {
    /// NGINX serves the configuration of `version`. `activated`: it was started or
    /// reloaded for it (else it served it already); `rejected`: `nginx -t` refused
    /// a configuration on the way (config safety then left a resource out or held
    /// the ConfigMap back).
    Served {
        /// The rendered configuration's version (hex digits).
        version: &'a str,
        /// Started or reloaded.
        activated: bool,
        /// `nginx -t` failed at least once.
        rejected: bool,
    },
    /// No configuration could be served; the last good one keeps running.
    Failed,
}

#[derive(Debug, Default)]
struct State {
    hash: Option<f64>,
    last_ok: Option<bool>,
    last_ok_time: Option<f64>,
    success: u64,
    errors: u64,
    leader: Option<(String, bool)>,
}

/// The controller's state as ingress-nginx's metrics report it.
#[derive(Debug, Default)]
pub struct Controller {
    state: Mutex<State>,
}

impl Controller {
    /// Records a pass of the reload path.
    ///
    /// `success` counts starts and reloads, `errors` the passes in which NGINX
    /// refused a configuration (`nginx -t` failed, or nothing could be served), and
    /// `config_last_reload_successful` says whether the last pass that tested or
    /// loaded a configuration did so without a refusal: a change that config safety
    /// had to cut down reads 0 until the next clean reload.
    pub fn pass(&self, pass: Pass<'_>) {
        let mut s = self.state.lock().expect("metrics lock");
        match pass {
            Pass::Served {
                version,
                activated,
                rejected,
            } => {
                s.hash = Some(hash_value(version));
                if activated {
                    s.success += 1;
                    s.last_ok_time = Some(now());
                }
                if rejected {
                    s.errors += 1;
                    s.last_ok = Some(false);
                } else if activated || s.last_ok.is_none() {
                    s.last_ok = Some(true);
                }
            }
            Pass::Failed => {
                s.errors += 1;
                s.last_ok = Some(false);
            }
        }
    }

    /// Records whether this replica holds the Lease `name`.
    pub fn leader(&self, name: &str, leading: bool) {
        self.state.lock().expect("metrics lock").leader = Some((name.to_owned(), leading));
    }

    /// Appends the metrics in the text format.
    pub fn encode(&self, out: &mut String, id: &Identity) {
        let s = self.state.lock().expect("metrics lock");
        let ids = id.labels();
        let gauge = |out: &mut String, name: &str, help: &str, v: Option<f64>| {
            if let Some(v) = v {
                let name = format!("{P}_{name}");
                header(out, &name, Kind::Gauge, help);
                sample(out, &name, &ids, v);
            }
        };
        gauge(
            out,
            "config_hash",
            "Running configuration hash actually running (the first 52 bits of the rendered configuration's version)",
            s.hash,
        );
        gauge(
            out,
            "config_last_reload_successful",
            "Whether the last configuration reload attempt was successful (0 also when config safety had to leave a resource out)",
            s.last_ok.map(|ok| if ok { 1.0 } else { 0.0 }),
        );
        gauge(
            out,
            "config_last_reload_successful_timestamp_seconds",
            "Timestamp of the last successful configuration reload",
            s.last_ok_time,
        );
        // ingress-nginx's names, without `_total`: untyped (see text::Kind).
        for (name, help, v) in [
            (
                "success",
                "Cumulative number of Ingress controller reload operations",
                s.success,
            ),
            (
                "errors",
                "Cumulative number of Ingress controller errors during reload operations",
                s.errors,
            ),
        ] {
            let name = format!("{P}_{name}");
            header(out, &name, Kind::Untyped, help);
            sample(out, &name, &ids, v as f64);
        }
        if let Some((lease, leading)) = &s.leader {
            let name = format!("{P}_leader_election_status");
            header(
                out,
                &name,
                Kind::Gauge,
                "Gauge reporting status of the leader election, 0 indicates follower, 1 indicates leader. 'name' is the string used to identify the lease",
            );
            let mut labels = ids.clone();
            labels.push(("name", lease));
            sample(out, &name, &labels, if *leading { 1.0 } else { 0.0 });
        }
        let name = format!("{P}_build_info");
        header(
            out,
            &name,
            Kind::Gauge,
            "A metric with a constant '1' labeled with information about the build",
        );
        let mut labels = ids;
        labels.extend([
            ("release", env!("CARGO_PKG_VERSION")),
            ("build", option_env!("FERRULE_COMMIT").unwrap_or("unknown")),
        ]);
        if !env!("CARGO_PKG_REPOSITORY").is_empty() {
            labels.push(("repository", env!("CARGO_PKG_REPOSITORY")));
        }
        sample(out, &name, &labels, 1.0);
    }
}

/// A version's first 13 hex digits as a number: exact in a float, as ingress-nginx
/// exports its 64-bit hash in one.
fn hash_value(version: &str) -> f64 {
    let digits: String = version.chars().take(13).collect();
    u64::from_str_radix(&digits, 16).map_or(0.0, |v| v as f64)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.split(['{', ' ']).next() == Some(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    #[test]
    fn reloads_and_refusals_are_counted_as_ingress_nginx_does() {
        let c = Controller::default();
        let id = Identity {
            namespace: "ingress".into(),
            class: "ferrule.dev/ingress-controller".into(),
            pod: "p-1".into(),
        };
        let enc = |c: &Controller| {
            let mut out = String::new();
            c.encode(&mut out, &id);
            out
        };
        let t = enc(&c);
        assert_eq!(value(&t, "nginx_ingress_controller_success"), Some(0.0));
        assert_eq!(value(&t, "nginx_ingress_controller_config_hash"), None);
        c.pass(Pass::Served {
            version: "00000000000ff0000",
            activated: true,
            rejected: false,
        });
        let t = enc(&c);
        assert_eq!(
            value(&t, "nginx_ingress_controller_config_hash"),
            Some(255.0)
        );
        assert_eq!(
            value(&t, "nginx_ingress_controller_config_last_reload_successful"),
            Some(1.0)
        );
        assert!(t.contains(
            "nginx_ingress_controller_success{controller_namespace=\"ingress\",controller_class=\"ferrule.dev/ingress-controller\",controller_pod=\"p-1\"} 1\n"
        ));
        // config safety left an Ingress out: served, but refused first
        c.pass(Pass::Served {
            version: "1",
            activated: true,
            rejected: true,
        });
        let t = enc(&c);
        assert_eq!(value(&t, "nginx_ingress_controller_success"), Some(2.0));
        assert_eq!(value(&t, "nginx_ingress_controller_errors"), Some(1.0));
        assert_eq!(
            value(&t, "nginx_ingress_controller_config_last_reload_successful"),
            Some(0.0)
        );
        // nothing new to load keeps the verdict; a clean reload restores it
        c.pass(Pass::Served {
            version: "1",
            activated: false,
            rejected: false,
        });
        let t = enc(&c);
        assert_eq!(
            value(&t, "nginx_ingress_controller_config_last_reload_successful"),
            Some(0.0)
        );
        c.pass(Pass::Failed);
        c.leader("ferrule-leader", true);
        let t = enc(&c);
        assert_eq!(value(&t, "nginx_ingress_controller_errors"), Some(2.0));
        assert!(t.contains("controller_pod=\"p-1\",name=\"ferrule-leader\"} 1\n"));
        assert!(t.contains("# TYPE nginx_ingress_controller_success untyped\n"));
    }
}
