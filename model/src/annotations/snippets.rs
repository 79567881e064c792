//! `configuration-snippet`, `server-snippet`, `stream-snippet`: raw NGINX text,
//! administrator-enabled.
//!
//! Snippets are the one deliberate hole in the quoting rule. They are parsed here
//! regardless of the switch (so the model records them), and only the model builder
//! decides whether they are honoured.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "snippets",
    keys: &[
        key(
            "configuration-snippet",
            Location,
            Critical,
            "raw NGINX text in each location (administrator-enabled)",
        ),
        key(
            "server-snippet",
            Server,
            Critical,
            "raw NGINX text in the server block (administrator-enabled)",
        ),
        key(
            "stream-snippet",
            Server,
            Critical,
            "raw NGINX text in the stream block (administrator-enabled; with TCP/UDP services or SSL passthrough)",
        ),
    ],
};

/// An opaque snippet of NGINX configuration, attributed to its Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Snippet(pub String);

pub(super) fn snippet(v: &str) -> Result<Snippet, String> {
    if v.contains('\0') {
        return Err("NUL bytes are not allowed".to_owned());
    }
    Ok(Snippet(v.to_owned()))
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    out.configuration_snippet = r.parse("configuration-snippet", snippet)?;
    out.server_snippet = r.parse("server-snippet", snippet)?;
    out.stream_snippet = r.parse("stream-snippet", snippet)?;
    Ok(())
}

/// Directives a tenant's snippet may not hold, even with snippets allowed: each
/// loads code, or reads or writes a file of the controller's (its service account
/// token, the balancer token, other tenants' keys), and `nginx -t` would do so with
/// the controller's privileges before config safety could say no (the technique of
/// CVE-2025-1974 and CVE-2021-25742). A name ending in `_` stands for its prefix.
const REFUSED: &[&str] = &[
    "load_module",
    "include",
    "ssl_engine",
    "lua_",
    "js_",
    "perl",
    "perl_",
    "root",
    "alias",
    "auth_basic_user_file",
    "ssl_certificate",
    "ssl_certificate_key",
    "ssl_client_certificate",
    "ssl_trusted_certificate",
    "ssl_crl",
    "ssl_dhparam",
    "ssl_password_file",
    "ssl_stapling_file",
    "ssl_session_ticket_key",
    "proxy_ssl_certificate",
    "proxy_ssl_certificate_key",
    "proxy_ssl_trusted_certificate",
    "proxy_ssl_crl",
    "proxy_ssl_password_file",
    "grpc_ssl_certificate",
    "grpc_ssl_certificate_key",
    "grpc_ssl_trusted_certificate",
    "uwsgi_ssl_certificate",
    "uwsgi_ssl_certificate_key",
    "secure_link_secret",
    "client_body_temp_path",
    "proxy_temp_path",
    "proxy_cache_path",
    "proxy_store",
];

/// Why a snippet cannot be given to NGINX, or `None`: it must stay inside the
/// block it is put in (braces balance, outside quotes and comments), and name none
/// of [`REFUSED`]'s directives (nor `*_by_lua*`, nor a log written to a file).
pub fn refusal(text: &str) -> Option<String> {
    let statements = match statements(text) {
        Ok(s) => s,
        Err(e) => return Some(e),
    };
    for words in statements {
        let Some(name) = words.first() else { continue };
        let refused = name.contains("_by_lua")
            || REFUSED.iter().any(|d| match d.strip_suffix('_') {
                Some(prefix) => name.starts_with(prefix) && name.len() > prefix.len(),
                None => name == d,
            });
        if refused {
            return Some(format!(
                "the directive {name} loads code or reads files, which no snippet may do"
            ));
        }
        if (name == "access_log" || name == "error_log")
            && words.get(1).is_some_and(|to| !log_target_allowed(to))
        {
            return Some(format!(
                "{name} {} writes a file; a snippet's logs go to off, stdout, stderr or syslog",
                words[1]
            ));
        }
    }
    None
}

fn log_target_allowed(to: &str) -> bool {
    matches!(to, "off" | "/dev/stdout" | "/dev/stderr" | "stderr") || to.starts_with("syslog:")
}

/// The statements of a snippet as NGINX's tokenizer sees them: words (quotes
/// removed), split at `;`, `{` and `}`. An error when a brace closes a block the
/// snippet did not open, or a block or a quote is left open.
fn statements(text: &str) -> Result<Vec<Vec<String>>, String> {
    let (mut out, mut words, mut word) = (Vec::new(), Vec::new(), String::new());
    let mut depth = 0usize;
    let mut chars = text.chars().peekable();
    let end_word = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '#' if word.is_empty() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' if word.is_empty() => {
                let mut closed = false;
                while let Some(q) = chars.next() {
                    match q {
                        '\\' => word.extend(chars.next()),
                        q if q == c => {
                            closed = true;
                            break;
                        }
                        q => word.push(q),
                    }
                }
                if !closed {
                    return Err("a quote is left open".to_owned());
                }
                words.push(std::mem::take(&mut word));
            }
            '\\' => {
                word.push(c);
                word.extend(chars.next());
            }
            // `${name}` is a variable, not a block.
            '$' if chars.peek() == Some(&'{') => {
                word.push(c);
                for v in chars.by_ref() {
                    word.push(v);
                    if v == '}' {
                        break;
                    }
                }
            }
            ';' | '{' | '}' => {
                end_word(&mut word, &mut words);
                out.push(std::mem::take(&mut words));
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth = depth.checked_sub(1).ok_or_else(|| {
                            "a } closes a block the snippet did not open".to_owned()
                        })?
                    }
                    _ => {}
                }
            }
            c if c.is_whitespace() => end_word(&mut word, &mut words),
            c => word.push(c),
        }
    }
    end_word(&mut word, &mut words);
    out.push(words);
    if depth > 0 {
        return Err("a { opens a block the snippet does not close".to_owned());
    }
    Ok(out)
}
