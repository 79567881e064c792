//! What the controller posts to the balancer API (`balancer/API.md`), as types of
//! their own.
//!
//! Every field and variant name here is the API's, spelled out: renaming a model
//! field or variant, or giving it a serde attribute for the model's hash, must not
//! change what the balancers receive. The conversions from the model match
//! exhaustively, so a new variant does not compile until the API has a name for it.
//! `contract_tests` records what these encode into `balancer/cases/sent.json`, which
//! the Lua and njs unit tests validate.

use ferrule_model::annotations as model_annotations;
use serde::{Serialize, Serializer};

use super::{BACKENDS, CERTIFICATES};

/// An object posted in bulk (a backend, a certificate): where it goes and how a
/// POST body carrying several of them is written.
pub(super) trait Item: Serialize {
    /// The API path it is posted to.
    const PATH: &'static str;
    /// The kind of sync that posts it ([`BACKENDS`], [`CERTIFICATES`]).
    const KIND: &'static str;
    /// A POST body: `items` to store, `removed` names to delete.
    fn body(version: u64, items: &[&Self], removed: &[String]) -> Vec<u8>;
}

/// Encodes a body straight from borrowed values (no intermediate JSON tree: at 10k
/// backends it took ~70 MB).
fn encode<T: Serialize>(body: &T) -> Vec<u8> {
    serde_json::to_vec(body).expect("JSON encoding of strings and numbers cannot fail")
}

/// The body of `POST /configuration/backends`.
#[derive(Serialize)]
struct Backends<'a> {
    version: u64,
    backends: &'a [&'a Backend<'a>],
    removed: &'a [String],
}

/// The body of `POST /configuration/certificates`.
#[derive(Serialize)]
pub(super) struct Certificates<'a> {
    pub version: u64,
    pub certificates: &'a [&'a Certificate<'a>],
    pub removed: &'a [String],
    /// Left out when not replaced: the API keeps the posted one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Pair<'a>>,
}

impl Certificates<'_> {
    pub(super) fn encode(&self) -> Vec<u8> {
        encode(self)
    }
}

/// A backend.
#[derive(Debug, Serialize)]
pub(super) struct Backend<'a> {
    name: &'a str,
    endpoints: Endpoints<'a>,
    load_balance: LoadBalance,
    upstream_hash_by: Option<&'a str>,
    upstream_hash_by_subset_size: Option<u32>,
    affinity: Option<Affinity<'a>>,
    canary: Option<Canary<'a>>,
}

impl Item for Backend<'_> {
    const PATH: &'static str = "/configuration/backends";
    const KIND: &'static str = BACKENDS;
    fn body(version: u64, backends: &[&Self], removed: &[String]) -> Vec<u8> {
        encode(&Backends {
            version,
            backends,
            removed,
        })
    }
}

/// A backend's endpoints, encoded one by one as [`Endpoint`]s from the model's
/// slice (a copy of every endpoint of a full sync would be the largest allocation).
#[derive(Debug)]
struct Endpoints<'a>(&'a [ferrule_model::Endpoint]);

impl Serialize for Endpoints<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|e| Endpoint {
            address: &e.address,
            port: e.port,
        }))
    }
}

#[derive(Debug, Serialize)]
struct Endpoint<'a> {
    address: &'a str,
    port: u16,
}

#[derive(Debug, Serialize)]
enum LoadBalance {
    #[serde(rename = "round_robin")]
    RoundRobin,
    #[serde(rename = "ewma")]
    Ewma,
}

#[derive(Debug, Serialize)]
struct Affinity<'a> {
    mode: AffinityMode,
    affinity_mode: Stickiness,
    cookie_name: &'a str,
    max_age: Option<u32>,
    path: Option<&'a str>,
    secure: Option<bool>,
    samesite: Option<SameSite>,
    conditional_samesite_none: bool,
    expires: Option<u32>,
    domain: Option<&'a str>,
    change_on_failure: bool,
    /// The Ingresses whose locations set the cookie; `None`: every location.
    ingresses: Option<&'a [String]>,
}

#[derive(Debug, Serialize)]
enum AffinityMode {
    #[serde(rename = "cookie")]
    Cookie,
}

/// `affinity.affinity_mode`: always sent, since the API's default (null) is
/// `persistent`, the behaviour of balancers from before the field, while the
/// annotation's default is `balanced`.
#[derive(Debug, Serialize)]
enum Stickiness {
    #[serde(rename = "balanced")]
    Balanced,
    #[serde(rename = "persistent")]
    Persistent,
}

#[derive(Debug, Serialize)]
enum SameSite {
    #[serde(rename = "None")]
    None,
    #[serde(rename = "Lax")]
    Lax,
    #[serde(rename = "Strict")]
    Strict,
}

#[derive(Debug, Serialize)]
struct Canary<'a> {
    backend: &'a str,
    weight: u32,
    weight_total: u32,
    header: Option<&'a str>,
    header_value: Option<&'a str>,
    header_pattern: Option<&'a str>,
    cookie: Option<&'a str>,
    affinity_behavior: CanaryAffinity,
}

#[derive(Debug, Serialize)]
enum CanaryAffinity {
    #[serde(rename = "sticky")]
    Sticky,
    #[serde(rename = "legacy")]
    Legacy,
}

/// A host's certificate.
#[derive(Debug, Serialize)]
pub(super) struct Certificate<'a> {
    pub host: &'a str,
    pub cert: &'a str,
    pub key: &'a str,
}

impl Item for Certificate<'_> {
    const PATH: &'static str = "/configuration/certificates";
    const KIND: &'static str = CERTIFICATES;
    fn body(version: u64, certificates: &[&Self], removed: &[String]) -> Vec<u8> {
        Certificates {
            version,
            certificates,
            removed,
            default: None,
        }
        .encode()
    }
}

/// The fallback certificate (`default`).
#[derive(Debug, Serialize)]
pub(super) struct Pair<'a> {
    pub cert: &'a str,
    pub key: &'a str,
}

impl<'a> From<&'a ferrule_model::Backend> for Backend<'a> {
    fn from(b: &'a ferrule_model::Backend) -> Self {
        let bal = &b.balancing;
        Self {
            name: &b.name,
            endpoints: Endpoints(&b.endpoints),
            load_balance: match bal.load_balance {
                model_annotations::LoadBalance::RoundRobin => LoadBalance::RoundRobin,
                model_annotations::LoadBalance::Ewma => LoadBalance::Ewma,
            },
            upstream_hash_by: bal.upstream_hash_by.as_deref(),
            upstream_hash_by_subset_size: bal.upstream_hash_by_subset,
            affinity: bal.affinity.as_ref().map(|a| Affinity {
                ingresses: Some(bal.affinity_ingresses.as_slice()).filter(|i| !i.is_empty()),
                ..Affinity::from(a)
            }),
            // A canary on the backend itself routes to the same endpoints either way;
            // the API refuses it, so it is dropped here rather than refusing the backend.
            canary: bal
                .canary
                .as_ref()
                .filter(|c| c.backend != b.name)
                .map(Canary::from),
        }
    }
}

impl<'a> From<&'a model_annotations::Affinity> for Affinity<'a> {
    fn from(a: &'a model_annotations::Affinity) -> Self {
        Self {
            mode: AffinityMode::Cookie,
            affinity_mode: match a.mode {
                model_annotations::AffinityMode::Balanced => Stickiness::Balanced,
                model_annotations::AffinityMode::Persistent => Stickiness::Persistent,
            },
            cookie_name: &a.cookie_name,
            max_age: a.max_age,
            path: a.path.as_deref(),
            secure: a.secure,
            samesite: a.samesite.map(|s| match s {
                model_annotations::SameSite::None => SameSite::None,
                model_annotations::SameSite::Lax => SameSite::Lax,
                model_annotations::SameSite::Strict => SameSite::Strict,
            }),
            conditional_samesite_none: a.conditional_samesite_none,
            expires: a.expires,
            domain: a.domain.as_deref(),
            change_on_failure: a.change_on_failure,
            ingresses: None,
        }
    }
}

impl<'a> From<&'a ferrule_model::CanaryRoute> for Canary<'a> {
    fn from(c: &'a ferrule_model::CanaryRoute) -> Self {
        let r = &c.rules;
        Self {
            backend: &c.backend,
            weight: r.weight,
            weight_total: r.weight_total,
            header: r.header.as_deref(),
            header_value: r.header_value.as_deref(),
            header_pattern: r.header_pattern.as_deref(),
            cookie: r.cookie.as_deref(),
            affinity_behavior: match r.affinity_behavior {
                model_annotations::CanaryAffinity::Sticky => CanaryAffinity::Sticky,
                model_annotations::CanaryAffinity::Legacy => CanaryAffinity::Legacy,
            },
        }
    }
}
