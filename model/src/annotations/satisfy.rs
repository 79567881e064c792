//! `satisfy: any | all`: how the access checks of a location combine (NGINX's
//! `satisfy`): `all` (the default) needs the allowlist and every authentication,
//! `any` lets a client through that passes one of them (typically: the office
//! network without a password, everyone else with one).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Key, Risk, Scope::*};
use super::{AnnotationError, IngressAnnotations, Reader};

/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "satisfy",
    keys: &[Key {
        name: "satisfy",
        scope: Location,
        risk: Risk::Low,
        security: true,
        supported: true,
        doc: "any or all of the allowlist and the authentications",
    }],
};

/// How access checks combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Satisfy {
    /// Every check must pass.
    #[default]
    All,
    /// One check suffices.
    Any,
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.satisfy = r
        .parse("satisfy", |v| match v {
            "all" => Ok(Satisfy::All),
            "any" => Ok(Satisfy::Any),
            _ => Err("expected \"any\" or \"all\"".to_owned()),
        })?
        .unwrap_or_default();
    Ok(())
}
