//! The ingress-nginx annotation families Ferrule does not implement yet. Each key
//! is listed so that an Ingress carrying it is never served as if it were absent:
//! a security key rejects its Ingress, any other is served with a Warning (see
//! `registry::verdict`). A family that gets implemented moves to a file of its own
//! with its parser (CONTRIBUTING.md, "Adding an annotation family").

use super::registry::{Family, Key, Risk, Scope};

/// A key Ferrule does not implement.
const fn todo(
    name: &'static str,
    scope: Scope,
    risk: Risk,
    security: bool,
    doc: &'static str,
) -> Key {
    Key {
        name,
        scope,
        risk,
        security,
        supported: false,
        doc,
    }
}

use Risk::{Critical, High, Low, Medium};
use Scope::Location;

/// ingress-nginx's memcached-backed global rate limits (removed in ingress-nginx 1.x).
pub(super) const GLOBAL_RATE_LIMITS: Family = Family {
    name: "global rate limits",
    keys: &[
        todo(
            "global-rate-limit",
            Location,
            Low,
            true,
            "removed in ingress-nginx 1.x (memcached limits)",
        ),
        todo(
            "global-rate-limit-window",
            Location,
            Low,
            true,
            "removed in ingress-nginx 1.x",
        ),
        todo(
            "global-rate-limit-key",
            Location,
            Low,
            true,
            "removed in ingress-nginx 1.x",
        ),
        todo(
            "global-rate-limit-ignored-cidrs",
            Location,
            Low,
            true,
            "removed in ingress-nginx 1.x",
        ),
    ],
};

/// The ModSecurity web application firewall (a module Debian's NGINX lacks).
pub(super) const MODSECURITY: Family = Family {
    name: "ModSecurity",
    keys: &[
        todo(
            "enable-modsecurity",
            Location,
            Low,
            true,
            "the ModSecurity WAF",
        ),
        todo(
            "enable-owasp-core-rules",
            Location,
            Low,
            true,
            "the OWASP core rule set",
        ),
        todo(
            "modsecurity-transaction-id",
            Location,
            High,
            true,
            "transaction id from an NGINX variable",
        ),
        todo(
            "modsecurity-snippet",
            Location,
            Critical,
            true,
            "raw ModSecurity rules",
        ),
    ],
};

/// Tracing and metrics exporters (modules Debian's NGINX lacks).
pub(super) const TRACING: Family = Family {
    name: "tracing",
    keys: &[
        todo(
            "enable-opentelemetry",
            Location,
            Low,
            false,
            "OpenTelemetry spans",
        ),
        todo(
            "opentelemetry-trust-incoming-span",
            Location,
            Low,
            false,
            "continue incoming spans",
        ),
        todo(
            "opentelemetry-operation-name",
            Location,
            Medium,
            false,
            "span name",
        ),
        todo(
            "enable-opentracing",
            Location,
            Low,
            false,
            "OpenTracing (removed from ingress-nginx)",
        ),
        todo(
            "opentracing-trust-incoming-span",
            Location,
            Low,
            false,
            "removed from ingress-nginx",
        ),
        todo(
            "enable-influxdb",
            Location,
            Low,
            false,
            "InfluxDB metrics (removed from ingress-nginx)",
        ),
        todo(
            "influxdb-measurement",
            Location,
            Low,
            false,
            "removed from ingress-nginx",
        ),
        todo(
            "influxdb-port",
            Location,
            Low,
            false,
            "removed from ingress-nginx",
        ),
        todo(
            "influxdb-host",
            Location,
            Low,
            false,
            "removed from ingress-nginx",
        ),
        todo(
            "influxdb-server-name",
            Location,
            Low,
            false,
            "removed from ingress-nginx",
        ),
    ],
};
