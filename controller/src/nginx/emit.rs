//! The one emitter: how any value reaches an NGINX configuration file.
//!
//! Every `{{ value }}` in a template is passed through [`quote`] by the template
//! engine (autoescaping is on for every template), so a value is always exactly one
//! double-quoted NGINX token: it can never close a block, end a directive, start a
//! comment or add a parameter. Only snippet annotations and ConfigMap snippets,
//! which an administrator must enable or owns, bypass it with `| safe`.

use std::io::Write;

/// Writes `input` as one double-quoted NGINX string token.
///
/// NGINX un-escapes `\"`, `\\`, `\n`, `\r` and `\t` inside quoted strings; every other
/// control character is dropped (typed parsing never lets one through; this is the
/// second line of defence).
pub fn quote_to(input: &str, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"\"")?;
    // Runs of ordinary characters are written at once (this is the hot path of
    // rendering: every value of every file goes through here).
    let mut start = 0;
    for (i, c) in input.char_indices() {
        let replacement: &[u8] = match c {
            '"' => b"\\\"",
            '\\' => b"\\\\",
            '\n' => b"\\n",
            '\r' => b"\\r",
            '\t' => b"\\t",
            c if c.is_control() => b"",
            _ => continue,
        };
        out.write_all(&input.as_bytes()[start..i])?;
        out.write_all(replacement)?;
        start = i + c.len_utf8();
    }
    out.write_all(&input.as_bytes()[start..])?;
    out.write_all(b"\"")
}

/// [`quote_to`] into a new string.
pub fn quote(input: &str) -> String {
    let mut out = Vec::with_capacity(input.len() + 2);
    quote_to(input, &mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("quote preserves UTF-8")
}

#[cfg(test)]
mod tests {
    use super::quote;

    fn check(input: &str, expected: &str) {
        assert_eq!(quote(input), expected, "quoting {input:?}");
    }

    #[test]
    fn values_stay_one_token() {
        check("/foo", r#""/foo""#);
        check(r#"a"; return 200 "pwned"#, r#""a\"; return 200 \"pwned""#);
        check("}\nserver {", r#""}\nserver {""#);
        check(r"C:\x", r#""C:\\x""#);
        check("# not a comment", r##""# not a comment""##);
        check("bell\u{7}", r#""bell""#);
        check("a\u{85}b\u{9b}c", r#""abc""#);
        check("", r#""""#);
        check("ünïcödé/€", r#""ünïcödé/€""#);
        check("\"\"", r#""\"\"""#);
    }
}
