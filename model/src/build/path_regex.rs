//! Checks on the regular expression of a regex path (`use-regex`, `rewrite-target`),
//! which NGINX compiles with PCRE into a `location ~*` and a `rewrite`.
//!
//! `nginx -t` already refuses what PCRE cannot compile (and config safety names the
//! Ingress); two things it accepts would hurt other tenants, so they are refused here:
//!
//! - a named group (`(?<name>…)`, `(?P<name>…)`, `(?'name'…)`): NGINX turns it into a
//!   variable set by every match, so a path could set `$ferrule_backend` after the
//!   location's own `set` and route the request to any backend of the cluster;
//! - a repeated group that can itself match in more than one way (`(a+)+`, `(a|aa)*`,
//!   `(a?b?)+`): PCRE backtracks exponentially on a crafted URI, and NGINX sets no
//!   match limit for locations, so one request could hold a worker for seconds;
//! - choices that multiply without nesting: quantifiers one after another that can
//!   match the same characters (`a*a*a*b`, `.*/.*/x`), many optional parts or
//!   alternatives (`a?a?a?…`): PCRE's backtracking is polynomial in the URI's length,
//!   to the power of their number (three stars cost 2 s of a worker on a 3 KB URI,
//!   with `pcre_jit`). The scan estimates the steps a match can take on the longest
//!   URI NGINX reads ([`URI_BYTES`]) and refuses more than [`MAX_MATCH_STEPS`], and
//!   more than [`MAX_UNBOUNDED_QUANTIFIERS`] unbounded quantifiers whatever it finds.
//!
//! The scan reads PCRE's syntax itself (escapes, classes, look-around, option groups)
//! rather than a stricter parser's, so that the paths people write stay usable.
//! Named groups are looked for in the raw text, and the syntax that could hide
//! something from the scan (`\Q…\E`, `\c`, `(?#…)`, `(*…)`, the x flag) is refused.

/// Syntax whose reading the scan below would have to get exactly right to see what
/// follows it (and which paths do not need): refused outright.
const UNCHECKED: [(&str, &str); 5] = [
    ("\\Q", "\\Q…\\E quoting"),
    ("\\E", "\\Q…\\E quoting"),
    ("\\c", "\\c control escapes"),
    ("(?#", "(?#…) comments"),
    ("(*", "(*…) verbs and groups"),
];

/// The longest URI a match runs on: NGINX reads a request line of at most 8 KiB
/// (`large_client_header_buffers`, which Ferrule leaves at its default), so an
/// unbounded quantifier can take this many lengths.
pub(crate) const URI_BYTES: u64 = 8 * 1024;

/// The most steps, as [`check`] estimates them on a URI of [`URI_BYTES`], that one
/// regex path may take to match or fail: one unbounded quantifier that can give back
/// what it took (`.*` before `/x`, 8,192 steps) with up to 32 ways of matching the
/// rest (optional parts, alternatives, counted ranges). PCRE (with `pcre_jit`) takes
/// well under a millisecond for that; two such quantifiers (`/(.*)/(.*)/x`) cost
/// 2^26 and tens of milliseconds per request.
pub(crate) const MAX_MATCH_STEPS: f64 = 32.0 * URI_BYTES as f64;

/// The most unbounded quantifiers (`*`, `+`, `{n,}`) in one regex path, whatever
/// else the estimate finds: one that is followed by a character it cannot match
/// (`[0-9]+/`) never backtracks, but each costs a scan of the URI.
pub(crate) const MAX_UNBOUNDED_QUANTIFIERS: usize = 8;

/// What a quantifier repeats, for the question "can it match the next character".
#[derive(Clone, Copy)]
enum Atom {
    /// A literal byte.
    Byte(u8),
    /// An escape: `\d`, `\.`, ...
    Escape(u8),
    /// A class `[...]` at these indices (its `]` included).
    Class(usize, usize),
    /// Anything else (`.`, a group, an anchor): assumed to match anything.
    Other,
}

/// The error for `path`, if it must be refused.
pub(crate) fn check(path: &str) -> Result<(), String> {
    // Named groups are looked for in the raw text, whatever the context (a class, an
    // escape): a refused literal is a small price, a missed group routes anywhere.
    for (i, _) in path.match_indices('(') {
        if let Some(name) = group_name(&path.as_bytes()[i + 1..]) {
            return Err(format!(
                "the named group {name:?} is not allowed in a regex path: NGINX would \
                 turn it into a variable that each match sets (use a numbered group, \
                 $1, in rewrite-target)"
            ));
        }
        if extended_mode(&path.as_bytes()[i + 1..]) {
            return Err("the x flag is not supported in a regex path".to_owned());
        }
    }
    if let Some((_, what)) = UNCHECKED.iter().find(|(text, _)| path.contains(text)) {
        return Err(format!("{what} are not supported in a regex path"));
    }
    let b = path.as_bytes();
    // One entry per open group: whether something in it can match in more than one
    // way, and its alternatives so far.
    let mut groups: Vec<(bool, u32)> = Vec::new();
    // Whether the atom just read is a group that can match in more than one way.
    let mut last_ambiguous = false;
    let mut atom = Atom::Other;
    // The estimate: the ways to match what was read so far (each a point PCRE may
    // come back to), the steps spent so far, the unbounded quantifiers, and the
    // alternatives outside any group (a `|` there leaves the rest of the path
    // unanchored: PCRE tries it at every position of the URI).
    let mut ways = 1.0_f64;
    let mut steps = 0.0_f64;
    let mut unbounded = 0;
    let mut top_branches = 1_u32;
    // Where the last look for the end of the path stopped, and what it found: a later
    // look that starts before that spot finds the same (keeps the scan linear).
    let mut tail: Option<(usize, bool)> = None;
    // Case-insensitive somewhere: literals are compared so everywhere.
    let caseless = path.match_indices("(?").any(|(i, _)| {
        b[i + 2..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic() || matches!(c, b'-' | b'^'))
            .any(|c| *c == b'i')
    });
    let mut i = 0;
    while i < b.len() {
        let mut ambiguous_group = false;
        let mut next_atom = Atom::Other;
        match b[i] {
            b'\\' => {
                next_atom = b.get(i + 1).map_or(Atom::Other, |e| Atom::Escape(*e));
                i += 2;
            }
            b'[' => {
                let end = class_end(b, i);
                next_atom = Atom::Class(i, end);
                i = end;
            }
            b'(' => {
                match group_prefix(&b[i + 1..]) {
                    Prefix::Group(len) => {
                        groups.push((false, 1));
                        i += 1 + len;
                    }
                    // `(?i)`: no group, nothing to repeat
                    Prefix::Other(len) => i += 1 + len,
                }
            }
            b')' => {
                ambiguous_group = groups.pop().is_some_and(|g| g.0);
                if let Some(outer) = groups.last_mut() {
                    outer.0 |= ambiguous_group;
                }
                i += 1;
            }
            b'|' => {
                let branches = match groups.last_mut() {
                    Some(g) => {
                        g.0 = true;
                        g.1 += 1;
                        g.1
                    }
                    None => {
                        top_branches += 1;
                        top_branches
                    }
                };
                // n alternatives so far instead of n - 1
                ways *= f64::from(branches) / f64::from(branches - 1);
                i += 1;
            }
            b'*' | b'+' | b'?' | b'{' => match quantifier(&b[i..]) {
                // a `{` that opens no quantifier is a literal
                None => {
                    next_atom = Atom::Byte(b'{');
                    i += 1;
                }
                Some(q) => {
                    if q.repeats && last_ambiguous {
                        return Err("a repeated group must not itself repeat, be optional or \
                                    alternate (e.g. \"(a+)+\", \"(a?b)*\" or \"(a|b)*\"): it \
                                    can take exponential time to match"
                            .to_owned());
                    }
                    // `{3}` matches one way; `?`, `*`, `{2,5}` choose how often
                    if let Some(g) = groups.last_mut() {
                        g.0 |= q.variable;
                    }
                    i += q.len;
                    // a lazy or possessive suffix belongs to the quantifier
                    let possessive = b.get(i) == Some(&b'+');
                    if matches!(b.get(i), Some(b'?' | b'+')) {
                        i += 1;
                    }
                    if q.variable {
                        let unbounded_here = q.max.is_none_or(|max| max - q.min >= URI_BYTES);
                        unbounded += usize::from(unbounded_here);
                        let (scan, choices) = match q.max {
                            Some(max) if !unbounded_here => {
                                (max.min(URI_BYTES) as f64, (max - q.min + 1) as f64)
                            }
                            _ => (URI_BYTES as f64, URI_BYTES as f64),
                        };
                        // Nothing can fail after the last item: it is tried once.
                        let last = match tail {
                            Some((end, found)) if i <= end => found,
                            _ => {
                                let (len, found) = trailing(&b[i..]);
                                tail = Some((i + len, found));
                                found
                            }
                        };
                        steps += if last { scan } else { ways * scan };
                        // Followed by a character it cannot match, it never gives
                        // back anything that could help (PCRE makes it possessive).
                        let settled = possessive
                            || last
                            || required_byte(&b[i..])
                                .is_some_and(|c| !may_match(b, atom, c, caseless));
                        if !settled {
                            ways *= choices;
                        }
                    }
                }
            },
            b'.' | b'^' | b'$' => i += 1,
            c => {
                next_atom = Atom::Byte(c);
                i += 1;
            }
        }
        last_ambiguous = ambiguous_group;
        atom = next_atom;
    }
    if unbounded > MAX_UNBOUNDED_QUANTIFIERS {
        return Err(format!(
            "{unbounded} unbounded quantifiers (*, +, {{n,}}), more than the \
             {MAX_UNBOUNDED_QUANTIFIERS} a regex path may have"
        ));
    }
    // each way ends with a last attempt at what follows
    steps += ways;
    if top_branches > 1 {
        steps *= URI_BYTES as f64;
    }
    if steps > MAX_MATCH_STEPS {
        return Err(format!(
            "matching it can take about {steps:.0} steps on a crafted URI, more than the \
             {MAX_MATCH_STEPS} a regex path may take: quantifiers one after another that \
             can match the same characters (e.g. \"a*a*\" or \".*/.*/x\"), many optional \
             parts or alternatives, or a | outside a group, multiply PCRE's backtracking \
             (a class that excludes what follows, as in \"[^/]*/\", does not backtrack)"
        ));
    }
    Ok(())
}

/// Whether nothing but the end of the path follows: closing groups, perhaps
/// quantified (a quantifier after `)` applies to a group already read). Also returns
/// how far it read.
fn trailing(rest: &[u8]) -> (usize, bool) {
    let mut i = 0;
    while i < rest.len() {
        if rest[i] != b')' {
            return (i, false);
        }
        i += 1;
        if let Some(q) = rest.get(i).and_then(|_| quantifier(&rest[i..])) {
            i += q.len;
            if matches!(rest.get(i), Some(b'?' | b'+')) {
                i += 1;
            }
        }
    }
    (i, true)
}

/// The ASCII character that must come next, if `rest` starts with one that is not
/// optional: a literal, or an escaped punctuation character.
fn required_byte(rest: &[u8]) -> Option<u8> {
    let (c, len) = match rest {
        [b'\\', c, ..] if c.is_ascii_punctuation() => (*c, 2),
        [c, ..] if c.is_ascii_graphic() && !b"\\^$.|?*+()[]{}".contains(c) => (*c, 1),
        _ => return None,
    };
    match rest.get(len) {
        Some(b'?' | b'*' | b'{') => None,
        _ => Some(c),
    }
}

/// Whether `atom` (of `path`) may match the ASCII character `c`. When unsure, yes.
fn may_match(path: &[u8], atom: Atom, c: u8, caseless: bool) -> bool {
    let same = |x: u8| x == c || (caseless && x.eq_ignore_ascii_case(&c));
    match atom {
        Atom::Byte(x) => same(x),
        Atom::Escape(e) => escape_matches(e, c).unwrap_or_else(|| same(e)),
        Atom::Class(start, end) => class_matches(&path[start..end], c, caseless).unwrap_or(true),
        Atom::Other => true,
    }
}

/// Whether the class escape `\e` matches `c` (`None`: `e` is not a class escape
/// but a literal when it is punctuation, and anything, to be safe, otherwise).
fn escape_matches(e: u8, c: u8) -> Option<bool> {
    let word = c.is_ascii_alphanumeric() || c == b'_';
    Some(match e {
        b'd' => c.is_ascii_digit(),
        b'D' => !c.is_ascii_digit(),
        b'w' => word,
        b'W' => !word,
        b's' => c.is_ascii_whitespace(),
        b'S' => !c.is_ascii_whitespace(),
        e if e.is_ascii_punctuation() => return None,
        // \x, \p, \h, \N, ...: not read
        _ => true,
    })
}

/// Whether the class `class` (`[` to `]`) matches the ASCII character `c`; `None`
/// when it holds something this does not read.
fn class_matches(class: &[u8], c: u8, caseless: bool) -> Option<bool> {
    let inner = class.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let (negated, inner) = match inner.strip_prefix(b"^") {
        Some(rest) => (true, rest),
        None => (false, inner),
    };
    let candidates = if caseless {
        [c.to_ascii_lowercase(), c.to_ascii_uppercase()]
    } else {
        [c, c]
    };
    // A literal item at `i`: its byte and length.
    let literal = |i: usize| -> Option<(u8, usize)> {
        match inner.get(i..)? {
            [b'\\', e, ..] if e.is_ascii_punctuation() => Some((*e, 2)),
            [b'\\', ..] => None,
            [x, ..] if x.is_ascii() => Some((*x, 1)),
            _ => None,
        }
    };
    let mut found = false;
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'\\' && inner.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) {
            let e = inner[i + 1];
            if !b"dDwWsS".contains(&e) {
                return None;
            }
            found |= candidates
                .iter()
                .any(|c| escape_matches(e, *c) == Some(true));
            i += 2;
            continue;
        }
        if inner[i..].starts_with(b"[:") {
            let name_len = inner[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_alphabetic())
                .count();
            let name = &inner[i + 2..i + 2 + name_len];
            if inner[i + 2 + name_len..].starts_with(b":]") {
                let test: fn(&u8) -> bool = match name {
                    b"alpha" => u8::is_ascii_alphabetic,
                    b"digit" => u8::is_ascii_digit,
                    b"alnum" => u8::is_ascii_alphanumeric,
                    b"upper" => u8::is_ascii_uppercase,
                    b"lower" => u8::is_ascii_lowercase,
                    b"xdigit" => u8::is_ascii_hexdigit,
                    b"punct" => u8::is_ascii_punctuation,
                    _ => return None,
                };
                // [:upper:] and [:lower:] are caseless under (?i)
                found |= candidates.iter().any(test)
                    || (caseless && c.is_ascii_alphabetic() && matches!(name, b"upper" | b"lower"));
                i += name_len + 4;
                continue;
            }
        }
        let (lo, len) = literal(i)?;
        i += len;
        // a range `lo-hi`, unless the `-` is the last item
        if inner.get(i) == Some(&b'-') && i + 1 < inner.len() {
            let (hi, len) = literal(i + 1)?;
            i += 1 + len;
            found |= candidates.iter().any(|c| (lo..=hi).contains(c));
        } else {
            found |= candidates.contains(&lo);
        }
    }
    Some(found != negated)
}

/// The index after the class opening at `start`: `]` first in the class is literal,
/// escapes are skipped, `[:alpha:]` is one item.
fn class_end(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    if b.get(i) == Some(&b'^') {
        i += 1;
    }
    if b.get(i) == Some(&b']') {
        i += 1;
    }
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            // a POSIX class `[:alpha:]`, as PCRE reads one: letters up to `:]`
            b'[' if b.get(i + 1) == Some(&b':') => {
                let name = b[i + 2..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .count();
                i += if b[i + 2 + name..].starts_with(b":]") {
                    name + 4
                } else {
                    1
                };
            }
            b']' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

enum Prefix {
    /// A group opens; its `?…` prefix has this length.
    Group(usize),
    /// An option setting (`(?i)`) of this length, with its `)`.
    Other(usize),
}

/// What the `(` before `rest` opens: the `?:`, `?=`, `?<!`, `?i:` of a group are no
/// quantifiers.
fn group_prefix(rest: &[u8]) -> Prefix {
    // `(?#` and `(*` never get here: check() refuses them.
    match rest {
        [b'?', b'<', b'=' | b'!', ..] => Prefix::Group(3),
        [b'?', b':' | b'=' | b'!' | b'>' | b'|', ..] => Prefix::Group(2),
        [b'?', flags @ ..] => {
            let n = flags
                .iter()
                .take_while(|c| c.is_ascii_alphabetic() || matches!(c, b'-' | b'^'))
                .count();
            match flags.get(n) {
                Some(b')') if n > 0 => Prefix::Other(n + 2),
                Some(b':') if n > 0 => Prefix::Group(n + 2),
                // recursion, subroutine calls, conditionals: a group, as PCRE reads
                // it or refuses it (nginx -t)
                _ => Prefix::Group(1),
            }
        }
        _ => Prefix::Group(0),
    }
}

/// Whether the `(` before `rest` sets the x flag (`(?x)`, `(?ix:`): whitespace and
/// `#` comments would then hide what follows from the scan.
fn extended_mode(rest: &[u8]) -> bool {
    let Some(flags) = rest.strip_prefix(b"?") else {
        return false;
    };
    let n = flags
        .iter()
        .take_while(|c| c.is_ascii_alphabetic() || **c == b'^')
        .count();
    matches!(flags.get(n), Some(b')' | b':' | b'-')) && flags[..n].contains(&b'x')
}

/// The name of a named group whose `(` precedes `rest`.
fn group_name(rest: &[u8]) -> Option<String> {
    let after = if let Some(r) = rest.strip_prefix(b"?P<") {
        r
    } else if let Some(r) = rest.strip_prefix(b"?<") {
        // look-behind, not a name
        if matches!(r.first(), Some(b'=') | Some(b'!')) {
            return None;
        }
        r
    } else {
        rest.strip_prefix(b"?'")?
    };
    let name: Vec<u8> = after
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .copied()
        .collect();
    Some(String::from_utf8_lossy(&name).into_owned())
}

struct Quantifier {
    /// It allows more than one repetition.
    repeats: bool,
    /// It allows more than one count (all but `{n}`).
    variable: bool,
    /// The fewest repetitions.
    min: u64,
    /// The most (`None`: no limit).
    max: Option<u64>,
    len: usize,
}

/// The quantifier at the start of `b`. None: a `{` that PCRE reads as a literal.
fn quantifier(b: &[u8]) -> Option<Quantifier> {
    let (repeats, variable, min, max, len) = match b[0] {
        b'*' => (true, true, 0, None, 1),
        b'+' => (true, true, 1, None, 1),
        b'?' => (false, true, 0, Some(1), 1),
        _ => {
            // `{n}`, `{n,}` or `{n,m}`, read no further than its digits: a `{` that
            // opens none is a literal and the scan goes on after it, so looking
            // ahead for a `}` would make the check quadratic in the path length.
            let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
            let lo = &b[1..1 + digits(1)];
            let mut end = 1 + lo.len();
            let hi = if b.get(end) == Some(&b',') {
                let hi = &b[end + 1..end + 1 + digits(end + 1)];
                end += 1 + hi.len();
                Some(hi)
            } else {
                None
            };
            if lo.is_empty() || b.get(end) != Some(&b'}') {
                return None;
            }
            // digits only: a number too large for u64 is simply large
            let number = |d: &[u8]| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(u64::MAX)
            };
            let min = number(lo);
            let max = match hi {
                None => Some(min),
                Some([]) => None,
                Some(hi) => Some(number(hi)),
            };
            // `{5,2}`: PCRE refuses it (nginx -t); read as `{5}` meanwhile
            let max = max.map(|m| m.max(min));
            (
                max.is_none_or(|m| m > 1),
                max != Some(min),
                min,
                max,
                end + 1,
            )
        }
    };
    Some(Quantifier {
        repeats,
        variable,
        min,
        max,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::check as check_path;

    /// `expected`: "ok", or a word the error must contain.
    fn check(path: &str, expected: &str) {
        match (check_path(path), expected) {
            (Ok(()), "ok") => {}
            (Ok(()), want) => panic!("{path:?} was accepted, expected an error about {want:?}"),
            (Err(e), "ok") => panic!("{path:?} was refused: {e}"),
            (Err(e), want) => assert!(e.contains(want), "{path:?}: {e:?} lacks {want:?}"),
        }
    }

    #[test]
    fn paths_users_write_are_accepted() {
        for p in [
            "/",
            "/api(/|$)(.*)",
            "/something(/|$)(.*)",
            "/(.*)",
            "/.well-known/acme-challenge/.*",
            "/v1/(?!internal)(.*)",
            "/(?<=x)y",
            "/(?<!x)y",
            "/(?i)foo",
            "/users/[0-9]+/(profile|settings)",
            "/(/[a-z]+)?",
            "/a{2}",
            "/(ab){1}",
            "/(a|b){0,1}",
            "/x{",
            "/x{a}",
            "/[]a]+",
            "/[[:alpha:]]+",
            "/(a)*",
            "/(abc)+",
            "/(?:[a-z]{2}/)*page",
            "/(?i)a+",
            "/(?=a)(b)+",
            "/(?i:ab)+",
            "/(?<=a)(b)+",
            "/(x{3})+",
            // quantifiers that cannot give back what the next character needs, or
            // that end the path, do not multiply the backtracking
            "/users/[0-9]+/orders/[0-9]+",
            "/api/v[0-9]+/[^/]+/items/[^/]*",
            "/(.*)/foo",
            "/(.*)/foo/(.*)",
            "/(en|de|fr)/(.*)",
            "/a*b",
            "/[a-z]+-[0-9]+\\.html",
            "/\\d+/\\w+\\.json",
            "/(?i)[a-z]+/x",
            "/a+b+c+d+e+f+g+h+",
            "/foo|/bar",
        ] {
            check(p, "ok");
        }
    }

    #[test]
    fn polynomial_backtracking_is_refused() {
        for p in [
            "/r/a*a*a*a*a*a*a*a*b",
            "/r/a*a*b",
            "/(.*)/(.*)/x",
            "/.*.*x",
            "/[a-z]*[a-z0-9]*/",
            "/(?i)[a-z]+A*b",
            "/a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?aaaaaaaaaaaaaaaaaaaa",
            "/a{0,1000}a{0,1000}b",
            "/(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)",
            "/x|.*.*y",
            "/x|.*y",
            "/.*(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)c",
        ] {
            check(p, "steps");
        }
        // and more unbounded quantifiers than allowed, however harmless each is
        check("/a+b+c+d+e+f+g+h+i+", "9 unbounded quantifiers");
        // at the bound: 16 ways to match around one star that gives back, 2^18 ways
        check("/.*(a|b)(a|b)(a|b)(a|b)c", "ok");
        check(
            "/(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)",
            "ok",
        );
    }

    #[test]
    fn named_groups_are_refused() {
        check("/(?<ferrule_backend>[^/]+)", "ferrule_backend");
        check("/(?P<x>.*)", "named group \"x\"");
        check("/(?'host'a)", "host");
        check("/[a](?<b>c)", "named group");
        check("/\\Q(\\E(?<b>c)", "named group");
        // wherever they are: in a class, escaped, quoted, after a trap for the scan
        check("/[(?<n>]+", "named group");
        check("/\\(?<n>", "named group");
        check("/[[:](?<ferrule_backend>[^/]+):]", "ferrule_backend");
        check("/(?:\\c\\Q)?(?<b>x)", "named group");
        check("/(*pla:(?<b>x))", "named group");
    }

    #[test]
    fn syntax_that_could_hide_a_repetition_is_refused() {
        check("/(a+)\\Q\\E+", "quoting");
        check("/(a+)\\E+", "quoting");
        check("/(a+)(?#x)+", "comments");
        check("/(*pla:(a+)+$)", "verbs");
        check("/(?:\\c)", "control escapes");
        check("/(?x)(a+) +", "x flag");
        check("/(?ix:a)", "x flag");
    }

    #[test]
    fn exponential_repetitions_are_refused() {
        for p in [
            "/(a|aa)+$",
            "/(a+)+",
            "/(a*)*",
            "/(a?b?)+",
            "/((ab)*c)+",
            "/(?:a|b)*",
            "/(x+){2,}",
            "/(x+){1,5}",
            "/(?:(a|b))+",
            "/(a+){30}",
            "/(?i:a|b)*",
            "/(a{2,3})+",
        ] {
            check(p, "exponential");
        }
    }

    /// The fastest of `runs` checks of `path`, stopping at the first faster than
    /// `enough` (a pass needs one run that was not slowed down by another process).
    fn fastest(path: &str, runs: usize, enough: std::time::Duration) -> std::time::Duration {
        let mut best = std::time::Duration::MAX;
        for _ in 0..runs {
            let start = std::time::Instant::now();
            let _ = std::hint::black_box(check_path(std::hint::black_box(path)));
            best = best.min(start.elapsed());
            if best < enough {
                break;
            }
        }
        best
    }

    /// A path is a request of the Ingress's author, who may be hostile to the others:
    /// its check must take time linear in its length, whatever it holds. 8 times the
    /// length may take 8 times as long (32 allows for a loaded machine's noise: 25
    /// was seen with two other builds running); a quadratic check takes
    /// 64 times as long (a 400 KB path of `{` took 55 s).
    #[test]
    fn the_check_is_linear_in_the_path_length() {
        const N: usize = 25_000;
        for unit in [
            "{", "a{1", "{1,", "x{1,2", "{99", "(?i", "(?", "[[:a", "(a)", "\\d", ")?", "a*)",
            "[a-z]+/", "(?i)",
        ] {
            let path = |len: usize| format!("/{}", unit.repeat(len.div_ceil(unit.len())));
            let (small, large) = (path(N), path(8 * N));
            assert!(large.len() >= 200_000);
            // warm up (allocations, caches)
            fastest(&small, 3, std::time::Duration::ZERO);
            let base = fastest(&small, 10, std::time::Duration::ZERO);
            let bound = base * 32;
            let took = fastest(&large, 5, bound);
            assert!(
                took < bound,
                "{unit:?}: {} bytes took {took:?}, {} bytes {base:?}: {:.0} times as long",
                large.len(),
                small.len(),
                took.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
}
