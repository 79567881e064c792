//! NGINX's configuration tokenizer, byte for byte.
//!
//! This is the state machine of `ngx_conf_read_token` (NGINX 1.22,
//! `src/core/ngx_conf_file.c`), restated: a tenant's snippet is checked on the
//! statements NGINX will see, so any difference between this reader and NGINX's is a
//! way past the check. The rules that matter, and that a "reasonable" tokenizer gets
//! wrong:
//! - only space, TAB, CR and LF separate words (no VT, FF, NBSP, U+2028…);
//! - `#` starts a comment only where a word could start; inside a word it is a byte;
//! - `}` inside a word is a byte of the word, not the end of a block;
//! - `$` followed by `{` keeps every `{` that follows from opening a block (`${`),
//!   and nothing else: `;`, spaces and `}` act as usual;
//! - a backslash makes the next byte (any byte, LF included) part of the word;
//! - a quote opens a quoted word only where a word starts; a closed quoted word must
//!   be followed by a space, `;`, `{` or `)`.
//!
//! `controller/tests/it/snippet_tokens.rs` checks this reader against NGINX itself.

use std::fmt;

/// NGINX's configuration buffer: a word this long or longer does not parse.
const CONF_BUFFER: usize = 4096;

/// One statement: its words (quotes removed, escapes applied as NGINX applies them)
/// and, for `name args { ... }`, the statements of its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The words, the directive's name first.
    pub words: Vec<Vec<u8>>,
    /// The block's statements, for a statement that opens one.
    pub block: Option<Vec<Statement>>,
    /// Byte offset of the first word's first byte (its quote, if quoted).
    pub offset: usize,
}

impl Statement {
    /// The directive's name, lossily as text (names are ASCII in practice).
    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.words[0]).into_owned()
    }

    /// Argument `i` (0 is the first after the name), lossily as text.
    pub fn arg(&self, i: usize) -> Option<String> {
        self.words
            .get(i + 1)
            .map(|w| String::from_utf8_lossy(w).into_owned())
    }
}

/// Why NGINX would not parse the text, worded as NGINX words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenError {
    /// 1-based line of the text where NGINX stops.
    pub line: usize,
    /// NGINX's message.
    pub message: String,
    /// The names of the statements and blocks read before the error, in order: a
    /// refused directive whose block NGINX's reader cannot read (a Lua block has
    /// its own) is still named.
    pub names: Vec<Vec<u8>>,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on line {}", self.message, self.line)
    }
}

/// What one call of the reader found: `ngx_conf_read_token`'s return values.
enum Event {
    /// `words ;`
    Directive(Vec<Vec<u8>>, usize),
    /// `words {`
    BlockStart(Vec<Vec<u8>>, usize),
    /// `}`
    BlockDone,
    /// The end of the text.
    Done,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// A word as NGINX stores it: `\"`, `\'` and `\\` lose their backslash, `\t`, `\r`
/// and `\n` become the control byte, any other backslash stays.
fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            match raw.get(i + 1) {
                Some(b'"' | b'\'' | b'\\') => i += 1,
                Some(b't') => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                Some(b'r') => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                Some(b'n') => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

struct Reader<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
    names: Vec<Vec<u8>>,
}

impl Reader<'_> {
    fn error(&self, message: impl Into<String>) -> TokenError {
        TokenError {
            line: self.line,
            message: message.into(),
            names: self.names.clone(),
        }
    }

    fn unexpected(&self, ch: u8) -> TokenError {
        self.error(format!("unexpected \"{}\"", ch.escape_ascii()))
    }

    /// One step of NGINX's reader: the next statement, block start or block end.
    fn next(&mut self) -> Result<Event, TokenError> {
        let mut words: Vec<Vec<u8>> = Vec::new();
        let mut offset = self.pos;
        let (mut need_space, mut last_space, mut comment) = (false, true, false);
        let (mut variable, mut escaped, mut s_quoted, mut d_quoted) = (false, false, false, false);
        let mut start = self.pos;
        loop {
            let Some(&ch) = self.text.get(self.pos) else {
                if !words.is_empty() || !last_space {
                    return Err(self.error("unexpected end of file, expecting \";\" or \"}\""));
                }
                return Ok(Event::Done);
            };
            if !last_space && self.pos - start >= CONF_BUFFER {
                return Err(self.error("too long parameter"));
            }
            self.pos += 1;
            if ch == b'\n' {
                self.line += 1;
                comment = false;
            }
            if comment {
                continue;
            }
            if escaped {
                escaped = false;
                continue;
            }
            if need_space {
                if is_space(ch) {
                    last_space = true;
                    need_space = false;
                    continue;
                }
                match ch {
                    b';' => return Ok(Event::Directive(words, offset)),
                    b'{' => return Ok(Event::BlockStart(words, offset)),
                    b')' => {
                        last_space = true;
                        need_space = false;
                    }
                    _ => return Err(self.unexpected(ch)),
                }
            }
            if last_space {
                start = self.pos - 1;
                if is_space(ch) {
                    continue;
                }
                match ch {
                    b';' | b'{' => {
                        if words.is_empty() {
                            return Err(self.unexpected(ch));
                        }
                        return Ok(if ch == b'{' {
                            Event::BlockStart(words, offset)
                        } else {
                            Event::Directive(words, offset)
                        });
                    }
                    b'}' => {
                        if !words.is_empty() {
                            return Err(self.unexpected(ch));
                        }
                        return Ok(Event::BlockDone);
                    }
                    b'#' => {
                        comment = true;
                        continue;
                    }
                    b'\\' => escaped = true,
                    b'"' => {
                        start += 1;
                        d_quoted = true;
                    }
                    b'\'' => {
                        start += 1;
                        s_quoted = true;
                    }
                    b'$' => variable = true,
                    _ => {}
                }
                if words.is_empty() {
                    offset = self.pos - 1;
                }
                last_space = false;
                continue;
            }
            if ch == b'{' && variable {
                continue;
            }
            variable = false;
            if ch == b'\\' {
                escaped = true;
                continue;
            }
            if ch == b'$' {
                variable = true;
                continue;
            }
            let found = if d_quoted {
                d_quoted = ch != b'"';
                need_space = !d_quoted;
                !d_quoted
            } else if s_quoted {
                s_quoted = ch != b'\'';
                need_space = !s_quoted;
                !s_quoted
            } else if is_space(ch) || ch == b';' || ch == b'{' {
                last_space = true;
                true
            } else {
                false
            };
            if found {
                words.push(unescape(&self.text[start..self.pos - 1]));
                match ch {
                    b';' => return Ok(Event::Directive(words, offset)),
                    b'{' => return Ok(Event::BlockStart(words, offset)),
                    _ => {}
                }
            }
        }
    }

    /// Statements up to the end of the block (`inside`) or of the text.
    fn statements(&mut self, inside: bool) -> Result<Vec<Statement>, TokenError> {
        let mut out = Vec::new();
        loop {
            match self.next()? {
                Event::Directive(words, offset) => {
                    self.names.push(words[0].clone());
                    out.push(Statement {
                        words,
                        block: None,
                        offset,
                    })
                }
                Event::BlockStart(words, offset) => {
                    self.names.push(words[0].clone());
                    let block = self.statements(true)?;
                    out.push(Statement {
                        words,
                        block: Some(block),
                        offset,
                    });
                }
                Event::BlockDone if inside => return Ok(out),
                Event::BlockDone => return Err(self.error("unexpected \"}\"")),
                Event::Done if inside => {
                    return Err(self.error("unexpected end of file, expecting \"}\""));
                }
                Event::Done => return Ok(out),
            }
        }
    }
}

/// The statements of `text` read as NGINX reads a whole configuration file: every
/// block that opens closes, every statement ends with `;` or a block.
pub fn parse(text: &[u8]) -> Result<Vec<Statement>, TokenError> {
    Reader {
        text,
        pos: 0,
        line: 1,
        names: Vec::new(),
    }
    .statements(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements as `name arg…` lines, `{`/`}` for blocks, words in brackets.
    fn shape(text: &str) -> String {
        fn walk(s: &[Statement], depth: usize, out: &mut String) {
            for st in s {
                out.push_str(&"  ".repeat(depth));
                let words: Vec<String> = st
                    .words
                    .iter()
                    .map(|w| format!("[{}]", w.escape_ascii()))
                    .collect();
                out.push_str(&words.join(" "));
                match &st.block {
                    Some(b) => {
                        out.push_str(" {\n");
                        walk(b, depth + 1, out);
                        out.push_str(&"  ".repeat(depth));
                        out.push_str("}\n");
                    }
                    None => out.push_str(";\n"),
                }
            }
        }
        match parse(text.as_bytes()) {
            Ok(s) => {
                let mut out = String::new();
                walk(&s, 0, &mut out);
                out
            }
            Err(e) => format!("error: {e}"),
        }
    }

    fn check(text: &str, expected: &str) {
        assert_eq!(shape(text), expected, "{text:?}");
    }

    #[test]
    fn reads_as_nginx_reads() {
        check("a b;", "[a] [b];\n");
        check("a \"b c\" 'd;e';", "[a] [b c] [d;e];\n");
        check(
            "a { b; c { d; } }",
            "[a] {\n  [b];\n  [c] {\n    [d];\n  }\n}\n",
        );
        // `}` inside a word is the word's.
        check("a b}; c;", "[a] [b}];\n[c];\n");
        // `#` inside a word is the word's; at a word's start, a comment.
        check("a b#c; # d;\ne;", "[a] [b#c];\n[e];\n");
        // `${` keeps its `{` (all of them) from opening a block, nothing more.
        check("default_type ${ ;\nb;", "[default_type] [${];\n[b];\n");
        check("a ${{{x};", "[a] [${{{x}];\n");
        // Only space, TAB, CR, LF separate: VT and FF are bytes of the word.
        check("a\x0b# b;", "[a\\x0b#] [b];\n");
        check("a\x0cb;", "[a\\x0cb];\n");
        // A backslash keeps the next byte, LF included.
        check("a b\\\nc;", "[a] [b\\\\\\nc];\n");
        check("a \"q\\\"q\";", "[a] [q\\\"q];\n");
        check("a \"\\t\";", "[a] [\\t];\n");
        // A quote opened after the start of a word is a byte.
        check("a b\"c;", "[a] [b\\\"c];\n");
        // `if (…)`: `)` after a quoted word ends it.
        check(
            "if ($a = \"b\") { return 204; }",
            "[if] [($a] [=] [b] [)] {\n  [return] [204];\n}\n",
        );
    }

    #[test]
    fn refuses_what_nginx_refuses() {
        check("}", "error: unexpected \"}\" on line 1");
        check(
            "a {",
            "error: unexpected end of file, expecting \"}\" on line 1",
        );
        check(
            "a",
            "error: unexpected end of file, expecting \";\" or \"}\" on line 1",
        );
        check(";", "error: unexpected \";\" on line 1");
        check("a \"b\"c;", "error: unexpected \"c\" on line 1");
        check(
            "a \"b;",
            "error: unexpected end of file, expecting \";\" or \"}\" on line 1",
        );
        check("a b }", "error: unexpected \"}\" on line 1");
        check(
            "a b\\",
            "error: unexpected end of file, expecting \";\" or \"}\" on line 1",
        );
    }
}
