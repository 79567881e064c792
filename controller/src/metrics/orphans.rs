//! `nginx_ingress_controller_orphan_ingress`: Ingresses with a path whose Service is
//! missing (`type="no-service"`, answered 503) or has no ready endpoint
//! (`type="no-endpoint"`), in the model NGINX serves. As ingress-nginx, one series
//! per Ingress and type, 1 while it is orphaned; unlike it, a series goes once the
//! Ingress is whole again (it would stay at 0 there).

use std::collections::BTreeSet;

use ferrule_model::{Model, Target};

use super::identity::Identity;
use super::text::{Kind, header, sample};

const NAME: &str = "nginx_ingress_controller_orphan_ingress";

/// (namespace, Ingress, type) of every orphaned path's Ingress.
pub fn orphans(model: &Model) -> BTreeSet<(&str, &str, &'static str)> {
    let mut out = BTreeSet::new();
    for s in model.servers.iter() {
        for l in &s.locations {
            if l.owner.kind != "Ingress" {
                continue;
            }
            let kind = match &l.target {
                Target::Status(503) => "no-service",
                Target::Backend(b) => match model.backends.get(b) {
                    Some(b) if b.endpoints.is_empty() => "no-endpoint",
                    Some(_) => continue,
                    None => "no-service",
                },
                Target::Status(_) => continue,
            };
            out.insert((l.owner.namespace.as_str(), l.owner.name.as_str(), kind));
        }
    }
    out
}

/// Appends the metric for `model`.
pub fn encode(out: &mut String, id: &Identity, model: &Model) {
    let rows = orphans(model);
    if rows.is_empty() {
        return;
    }
    header(
        out,
        NAME,
        Kind::Gauge,
        "Gauge reporting status of ingress orphanity, 1 indicates orphaned ingress. 'namespace' is the string used to identify namespace of ingress, 'ingress' for ingress name and 'type' for 'no-service' or 'no-endpoint' of orphanity",
    );
    let ids = id.labels();
    for (ns, name, kind) in rows {
        let mut l = ids.clone();
        l.extend([("namespace", ns), ("ingress", name), ("type", kind)]);
        sample(out, NAME, &l, 1.0);
    }
}
