//! The view of `limit-*` (model `RateLimits`) for the templates.
//!
//! NGINX's request rate belongs to a zone, so there is one zone per distinct rate
//! (`ferrule_rps_<n>`, `ferrule_rpm_<n>`) and one connection zone, all keyed by
//! `$ferrule_limit_key`: the location's id followed by the client's address, so
//! that locations with the same rate share a zone without sharing their counts. A
//! client of a location's `limit-allowlist` gets an empty key, which NGINX does
//! not count.

use std::collections::BTreeSet;

use ferrule_model::{Location, Model, ResourceRef};
use serde::Serialize;

/// Shared memory of each zone (NGINX keeps about 8,000 clients per MiB).
const ZONE_SIZE: &str = "5m";

/// The http-level declarations: zones, allowlist maps, statuses.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ZonesView {
    /// `limit_req_zone`s.
    pub req_zones: Vec<ReqZone>,
    /// Whether a location limits connections.
    pub conn_zone: bool,
    /// Locations with an allowlist.
    pub exempt: Vec<Exempt>,
    /// Zone size.
    pub size: &'static str,
    /// `limit_req_status`.
    pub req_status: u16,
    /// `limit_conn_status`.
    pub conn_status: u16,
    /// What tells clients apart (`limit-conn-zone-variable`).
    pub key_variable: String,
}

/// A `limit_req_zone`: its name and rate (`10r/s`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReqZone {
    /// `ferrule_rps_<n>` or `ferrule_rpm_<n>`.
    pub name: String,
    /// `<n>r/s` or `<n>r/m`.
    pub rate: String,
}

/// The allowlist of a location: its id and CIDRs.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Exempt {
    /// The location's id.
    pub id: String,
    /// The clients not counted.
    pub cidrs: Vec<String>,
}

/// A `limit_req` of a location: its zone and burst.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReqLimit {
    /// The zone.
    pub zone: String,
    /// `burst=`.
    pub burst: u32,
}

/// The location-level directives.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LocationLimitsView {
    /// The value `$ferrule_limit_key` is set to.
    pub key: String,
    /// `limit_req` zones with their bursts.
    pub req: Vec<ReqLimit>,
    /// `limit_conn ferrule_conn N`.
    pub connections: Option<u32>,
    /// `limit_rate`.
    pub rate: Option<String>,
    /// `limit_rate_after`.
    pub rate_after: Option<String>,
}

/// The id of location `l` in limit keys: its owner, path and match kind.
fn id(owner: &ResourceRef, l: &Location) -> String {
    let text = format!("{owner}|{}|{:?}", l.path, l.path_match);
    blake3::hash(text.as_bytes()).to_hex()[..12].to_owned()
}

/// The zones every limited location of `model` needs.
pub fn zones(model: &Model) -> ZonesView {
    let mut req = BTreeSet::new();
    let mut view = ZonesView {
        size: ZONE_SIZE,
        req_status: model.global.limit_req_status,
        conn_status: model.global.limit_conn_status,
        key_variable: model.global.limit_key_variable.clone(),
        ..ZonesView::default()
    };
    for l in model.servers.iter().flat_map(|s| &s.locations) {
        let r = &l.settings.rate_limits;
        if r.is_empty() {
            continue;
        }
        req.extend(r.rps.map(|n| ReqZone {
            name: format!("ferrule_rps_{n}"),
            rate: format!("{n}r/s"),
        }));
        req.extend(r.rpm.map(|n| ReqZone {
            name: format!("ferrule_rpm_{n}"),
            rate: format!("{n}r/m"),
        }));
        view.conn_zone |= r.connections.is_some();
        if !r.allowlist.is_empty() {
            let cidrs = r.allowlist.iter().map(ToString::to_string).collect();
            view.exempt.push(Exempt {
                id: id(&l.owner, l),
                cidrs,
            });
        }
    }
    view.exempt.sort();
    view.exempt.dedup();
    view.req_zones = req.into_iter().collect();
    view
}

/// The directives of location `l`, if it is limited; `variable` tells clients
/// apart (`limit-conn-zone-variable`).
pub fn location(l: &Location, variable: &str) -> Option<LocationLimitsView> {
    let r = &l.settings.rate_limits;
    if r.is_empty() {
        return None;
    }
    let id = id(&l.owner, l);
    let key = if r.allowlist.is_empty() {
        format!("{id}{variable}")
    } else {
        format!("$ferrule_limit_key_{id}")
    };
    let mut req = Vec::new();
    if let Some(n) = r.rps {
        req.push(ReqLimit {
            zone: format!("ferrule_rps_{n}"),
            burst: n.saturating_mul(r.burst_multiplier),
        });
    }
    if let Some(n) = r.rpm {
        req.push(ReqLimit {
            zone: format!("ferrule_rpm_{n}"),
            burst: n.saturating_mul(r.burst_multiplier),
        });
    }
    Some(LocationLimitsView {
        key,
        req,
        connections: r.connections,
        rate: r.rate_kb.map(|k| format!("{k}k")),
        rate_after: r.rate_after_kb.map(|k| format!("{k}k")),
    })
}
