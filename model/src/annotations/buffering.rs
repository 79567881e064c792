//! `proxy-buffering`, the response buffers (`proxy-buffer-size`,
//! `proxy-buffers-number`, `proxy-busy-buffers-size`, `proxy-max-temp-file-size`)
//! and the request body's (`proxy-request-buffering`, `client-body-buffer-size`).

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "buffering",
    keys: &[
        key(
            "proxy-buffering",
            Location,
            Low,
            "on or off: buffer backend responses (default: the ConfigMap's, off)",
        ),
        key(
            "proxy-buffer-size",
            Location,
            Low,
            "size of the first response buffer and of each of the others (default 4k)",
        ),
        key(
            "proxy-buffers-number",
            Location,
            Low,
            "number of response buffers (default 4)",
        ),
        key(
            "proxy-busy-buffers-size",
            Location,
            Low,
            "buffers busy sending to the client (default twice the buffer size)",
        ),
        key(
            "proxy-max-temp-file-size",
            Location,
            Low,
            "largest response buffered to disk (0: none)",
        ),
        key(
            "proxy-request-buffering",
            Location,
            Low,
            "on or off: read the whole request body before proxying (default on)",
        ),
        key(
            "client-body-buffer-size",
            Location,
            Low,
            "request body kept in memory before it goes to a file",
        ),
    ],
};

const DEFAULT_BUFFER_SIZE: u64 = 4096;
const DEFAULT_BUFFERS: u32 = 4;

/// The buffering settings of a location; `None` fields keep NGINX's (or the
/// ConfigMap's) value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Buffering {
    /// `proxy_buffering`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<bool>,
    /// `proxy_buffer_size` and `proxy_buffers`, written together so that NGINX's
    /// rules between them hold (checked at parse time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<Buffers>,
    /// `proxy_busy_buffers_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_size: Option<String>,
    /// `proxy_max_temp_file_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_temp_file_size: Option<String>,
    /// `proxy_request_buffering`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<bool>,
    /// `client_body_buffer_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_body_buffer_size: Option<String>,
}

impl Buffering {
    /// Whether nothing is set.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `proxy_buffer_size {size}` and `proxy_buffers {number} {size}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Buffers {
    /// The size of each buffer (an NGINX size).
    pub size: String,
    /// How many.
    pub number: u32,
}

impl Buffers {
    /// NGINX's `proxy_busy_buffers_size` when none is set (twice a buffer), in
    /// bytes: written where the buffers are, so that a larger inherited value
    /// (the ConfigMap's) never breaks them.
    pub fn default_busy(&self) -> String {
        (2 * value::size_bytes(&self.size)).to_string()
    }
}

/// The response buffers of `proxy-buffer-size`, `proxy-buffers-number` and
/// `proxy-busy-buffers-size` (4k and 4 where one is missing), checked against
/// NGINX's rules (`nginx -t` refuses the configuration otherwise) so that the error
/// names the key: `Err((key, reason))`. `None` when neither is set.
pub(crate) fn checked_buffers(
    size: Option<String>,
    number: Option<u32>,
    busy: Option<&str>,
) -> Result<Option<Buffers>, (&'static str, &'static str)> {
    if size.as_deref().is_some_and(|s| value::size_bytes(s) == 0) {
        return Err(("proxy-buffer-size", "must not be 0"));
    }
    let Some(b) = (size.is_some() || number.is_some()).then(|| Buffers {
        size: size.unwrap_or_else(|| "4k".to_owned()),
        number: number.unwrap_or(DEFAULT_BUFFERS),
    }) else {
        return match busy {
            Some(_) => Err((
                "proxy-busy-buffers-size",
                "needs proxy-buffer-size or proxy-buffers-number (NGINX's default \
                 buffers depend on the platform)",
            )),
            None => Ok(None),
        };
    };
    let one = value::size_bytes(&b.size);
    let all_but_one = one * u64::from(b.number - 1);
    match busy.map(value::size_bytes) {
        Some(busy) if busy < one || busy > all_but_one => Err((
            "proxy-busy-buffers-size",
            "must be at least proxy-buffer-size and at most the size of all proxy \
             buffers but one",
        )),
        None if 2 * one > all_but_one => Err((
            "proxy-buffers-number",
            "at least 3 buffers are needed (the busy buffers, twice the buffer size by \
             default, must leave one free)",
        )),
        _ => Ok(Some(b)),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    let size = r.parse("proxy-buffer-size", value::size)?;
    let number = r.parse("proxy-buffers-number", |v| value::integer(v, 2, 1024))?;
    let busy = r.parse("proxy-busy-buffers-size", value::size)?;
    let max_temp = r.parse("proxy-max-temp-file-size", value::size)?;
    let buffers =
        checked_buffers(size, number, busy.as_deref()).map_err(|(k, e)| r.invalid(k, e))?;
    let one = buffers
        .as_ref()
        .map_or(DEFAULT_BUFFER_SIZE, |b| value::size_bytes(&b.size));
    if let Some(m) = &max_temp
        && value::size_bytes(m) != 0
        && value::size_bytes(m) < 2 * one
    {
        return Err(r.invalid(
            "proxy-max-temp-file-size",
            "must be 0 or at least twice proxy-buffer-size",
        ));
    }
    out.buffering = Buffering {
        responses: r.parse("proxy-buffering", value::on_off)?,
        buffers,
        busy_size: busy,
        max_temp_file_size: max_temp,
        requests: r.parse("proxy-request-buffering", value::on_off)?,
        client_body_buffer_size: r.parse("client-body-buffer-size", value::size)?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bytes() {
        assert_eq!(value::size_bytes("4k"), 4096);
        assert_eq!(value::size_bytes("1m"), 1 << 20);
        assert_eq!(value::size_bytes("512"), 512);
        assert_eq!(value::size_bytes("0"), 0);
    }
}
