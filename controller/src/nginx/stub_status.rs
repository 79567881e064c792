//! NGINX's `stub_status` page: connections and requests since the master started
//! (a reload keeps them; they live in the master's shared memory). Served at
//! [`PATH`] on the API socket only, so never on a proxied port.

use std::path::Path;

/// The location in the API server (`rootfs/etc/nginx/nginx.conf.tera`).
pub const PATH: &str = "/nginx_status";

/// What `stub_status` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StubStatus {
    /// Open client connections, idle ones included.
    pub active: u64,
    /// Client connections accepted.
    pub accepted: u64,
    /// Of those, handled (fewer only when a limit such as `worker_connections` hit).
    pub handled: u64,
    /// Client requests.
    pub requests: u64,
    /// Connections reading a request header.
    pub reading: u64,
    /// Connections writing a response (or reading a body, or waiting on a backend).
    pub writing: u64,
    /// Idle keepalive connections.
    pub waiting: u64,
}

/// Parses the page:
///
/// ```text
/// Active connections: 2
/// server accepts handled requests
///  10 10 31
/// Reading: 0 Writing: 1 Waiting: 1
/// ```
pub fn parse(text: &str) -> Option<StubStatus> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let after = |word: &str| -> Option<u64> {
        let i = tokens.iter().position(|t| *t == word)?;
        tokens.get(i + 1)?.parse().ok()
    };
    let totals = tokens.iter().position(|t| *t == "requests")?;
    let total = |k: usize| -> Option<u64> { tokens.get(totals + k)?.parse().ok() };
    Some(StubStatus {
        active: after("connections:")?,
        accepted: total(1)?,
        handled: total(2)?,
        requests: total(3)?,
        reading: after("Reading:")?,
        writing: after("Writing:")?,
        waiting: after("Waiting:")?,
    })
}

/// Reads the page over the API socket.
pub async fn fetch(api_socket: &Path) -> std::io::Result<StubStatus> {
    let r = super::api::request(api_socket, "GET", PATH, None, None).await?;
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if r.status != 200 {
        return Err(bad(format!("{PATH} answered {}", r.status)));
    }
    parse(&r.body).ok_or_else(|| bad(format!("{PATH}: unexpected page {:?}", r.body)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_page_nginx_writes() {
        let page = "Active connections: 291 \nserver accepts handled requests\n \
                    16630948 16630946 31070465 \nReading: 6 Writing: 179 Waiting: 106 \n";
        let s = super::parse(page).unwrap();
        assert_eq!(
            (s.active, s.accepted, s.handled, s.requests),
            (291, 16630948, 16630946, 31070465)
        );
        assert_eq!((s.reading, s.writing, s.waiting), (6, 179, 106));
        assert_eq!(super::parse("<html>not it</html>"), None);
    }
}
