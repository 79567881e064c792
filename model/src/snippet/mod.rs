//! Tenants' snippets (`configuration-snippet`, `server-snippet`, `stream-snippet`,
//! `auth-snippet`): read as NGINX reads them ([`tokens`]), then held to an
//! allowlist of directives per kind of block ([`allowlist`]).
//!
//! Snippets are the one place a tenant's text reaches NGINX unquoted, so the check
//! is built to fail closed: a byte NGINX and a human could read differently is
//! refused before any reading, a statement is looked at exactly as NGINX will see
//! it, and only directives known not to run code, read or write files, listen, or
//! reach the controller's own addresses are let through. Administrators' snippets
//! (the ConfigMap's) are not checked: they are the administrator's configuration.

pub mod allowlist;
mod targets;
pub mod tokens;

pub use allowlist::Kind;

/// What a snippet needs to know of the installation: the ports that belong to
/// Ferrule (a `listen` there would take them over).
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    /// NGINX's HTTP and HTTPS ports and the status port.
    pub reserved_ports: &'a [u16],
}

/// Why `text`, a snippet of `kind`, cannot be given to NGINX, in words that name
/// the statement; `Ok` when NGINX may have it.
pub fn check(kind: Kind, text: &str, cx: &Context<'_>) -> Result<(), String> {
    refuse_ambiguous_bytes(text)?;
    let statements = tokens::parse(text.as_bytes()).map_err(|e| {
        // A refused directive read before the error is the better answer: a Lua
        // block, say, is not NGINX's syntax.
        if let Some(why) = e
            .names
            .iter()
            .find_map(|n| allowlist::refused_everywhere(kind, n))
        {
            return why;
        }
        match e.message.as_str() {
            "unexpected \"}\"" => format!("a }} closes a block the snippet did not open ({e})"),
            _ => format!("NGINX would not read it: {e}"),
        }
    })?;
    allowlist::check(kind, &statements, cx)
}

/// Bytes that NGINX reads one way and a reviewer (or another tool) another: control
/// bytes other than TAB, CR and LF, DEL, and whitespace outside ASCII (NGINX takes
/// a vertical tab or a no-break space as part of a word; most readers as a space).
fn refuse_ambiguous_bytes(text: &str) -> Result<(), String> {
    for (line, l) in text.split('\n').enumerate() {
        if let Some(c) = l.chars().find(|&c| {
            (c.is_control() && !matches!(c, '\t' | '\r'))
                || (c.is_whitespace() && !c.is_ascii())
                || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}')
        }) {
            return Err(format!(
                "the character U+{:04X} on line {} is not allowed in a snippet (only \
                 printable text, spaces, tabs and line breaks)",
                c as u32,
                line + 1
            ));
        }
    }
    Ok(())
}
