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
//!   match limit for locations, so one request could hold a worker for seconds.
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
    // One entry per open group: whether something in it can match in more than one way.
    let mut groups: Vec<bool> = Vec::new();
    // Whether the atom just read is a group that can match in more than one way.
    let mut last_ambiguous = false;
    let mut i = 0;
    while i < b.len() {
        let mut ambiguous_group = false;
        match b[i] {
            b'\\' => i += 2,
            b'[' => i = class_end(b, i),
            b'(' => {
                match group_prefix(&b[i + 1..]) {
                    Prefix::Group(len) => {
                        groups.push(false);
                        i += 1 + len;
                    }
                    // `(?i)`: no group, nothing to repeat
                    Prefix::Other(len) => i += 1 + len,
                }
            }
            b')' => {
                ambiguous_group = groups.pop().unwrap_or(false);
                if let Some(outer) = groups.last_mut() {
                    *outer |= ambiguous_group;
                }
                i += 1;
            }
            b'|' => {
                if let Some(g) = groups.last_mut() {
                    *g = true;
                }
                i += 1;
            }
            b'*' | b'+' | b'?' | b'{' => match quantifier(&b[i..]) {
                // a `{` that opens no quantifier is a literal
                None => i += 1,
                Some(Quantifier {
                    repeats,
                    variable,
                    len,
                }) => {
                    if repeats && last_ambiguous {
                        return Err("a repeated group must not itself repeat, be optional or \
                                    alternate (e.g. \"(a+)+\", \"(a?b)*\" or \"(a|b)*\"): it \
                                    can take exponential time to match"
                            .to_owned());
                    }
                    // `{3}` matches one way; `?`, `*`, `{2,5}` choose how often
                    if let Some(g) = groups.last_mut() {
                        *g |= variable;
                    }
                    i += len;
                    // a lazy or possessive suffix belongs to the quantifier
                    if matches!(b.get(i), Some(b'?' | b'+')) {
                        i += 1;
                    }
                }
            },
            _ => i += 1,
        }
        last_ambiguous = ambiguous_group;
    }
    Ok(())
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
    len: usize,
}

/// The quantifier at the start of `b`. None: a `{` that PCRE reads as a literal.
fn quantifier(b: &[u8]) -> Option<Quantifier> {
    let (repeats, variable, len) = match b[0] {
        b'*' | b'+' => (true, true, 1),
        b'?' => (false, true, 1),
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
                None => min,
                Some([]) => u64::MAX,
                Some(hi) => number(hi),
            };
            (max > 1, min != max, end + 1)
        }
    };
    Some(Quantifier {
        repeats,
        variable,
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
        ] {
            check(p, "ok");
        }
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
    /// length may take 8 times as long (16 allows for noise); a quadratic check takes
    /// 64 times as long (a 400 KB path of `{` took 55 s).
    #[test]
    fn the_check_is_linear_in_the_path_length() {
        const N: usize = 25_000;
        for unit in [
            "{", "a{1", "{1,", "x{1,2", "{99", "(?i", "(?", "[[:a", "(a)", "\\d",
        ] {
            let path = |len: usize| format!("/{}", unit.repeat(len.div_ceil(unit.len())));
            let (small, large) = (path(N), path(8 * N));
            assert!(large.len() >= 200_000);
            // warm up (allocations, caches)
            fastest(&small, 3, std::time::Duration::ZERO);
            let base = fastest(&small, 10, std::time::Duration::ZERO);
            let bound = base * 16;
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
