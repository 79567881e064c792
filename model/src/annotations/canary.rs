//! `canary` and `canary-*`.

use serde::{Deserialize, Serialize};

use super::registry::{Family, Risk::*, Scope::*, key};
use super::{AnnotationError, IngressAnnotations, Reader, value};
/// The family's keys (see `registry.rs`).
pub(super) const FAMILY: Family = Family {
    name: "canary",
    keys: &[
        key(
            "canary",
            Backend,
            Low,
            "the Ingress is a canary of the Ingress with the same host and path",
        ),
        key(
            "canary-weight",
            Backend,
            Low,
            "share of requests sent to the canary",
        ),
        key(
            "canary-weight-total",
            Backend,
            Low,
            "total of canary-weight (default 100)",
        ),
        key(
            "canary-by-header",
            Backend,
            Low,
            "header that sends a request to the canary (always/never)",
        ),
        key(
            "canary-by-header-value",
            Backend,
            Low,
            "value of that header that selects the canary",
        ),
        key(
            "canary-by-header-pattern",
            Backend,
            Medium,
            "regex on that header that selects the canary",
        ),
        key(
            "canary-by-cookie",
            Backend,
            Low,
            "cookie that sends a request to the canary (always/never)",
        ),
        key(
            "affinity-canary-behavior",
            Backend,
            Low,
            "sticky or legacy: whether affinity keeps canary users",
        ),
    ],
};

/// How requests are chosen for a canary backend. Header rules beat the cookie,
/// which beats the weight, as in ingress-nginx.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Canary {
    /// `canary-weight`: share of requests, out of `weight_total`.
    pub weight: u32,
    /// `canary-weight-total` (default 100).
    pub weight_total: u32,
    /// `canary-by-header`.
    pub header: Option<String>,
    /// `canary-by-header-value`: route to the canary only when the header equals it.
    pub header_value: Option<String>,
    /// `canary-by-header-pattern`: route to the canary when the header matches this
    /// PCRE (ignored when `header_value` is set, as in ingress-nginx).
    pub header_pattern: Option<String>,
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
    /// `affinity-canary-behavior`.
    pub affinity_behavior: CanaryAffinity,
}

/// `affinity-canary-behavior`: whose session affinity the canary side of the split
/// uses. Either way a request whose cookie names an endpoint of one side stays on
/// that side before any canary rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryAffinity {
    /// The primary's affinity holds on both sides (ingress-nginx's default).
    #[default]
    Sticky,
    /// The canary side uses the canary backend's own affinity, if it has one (the
    /// canary Ingress's `affinity` annotations).
    Legacy,
}

/// A regular expression for `canary-by-header-pattern`, matched per request by the
/// balancer (PCRE in Lua, the njs engine). It must parse with Rust's regex parser and
/// use only syntax PCRE reads the same way (no `(?u)`/`(?R)` flags, no class set
/// operations such as `[a-z&&b]`, no `\b{start}` or `\<`): look-around,
/// backreferences and recursion are refused with the rest. It must not repeat a
/// sub-pattern that itself repeats, optionally matches or alternates (`(a+)+`,
/// `(a?a?)+`, `(a|aa)*`): on a backtracking engine such a pattern takes exponential
/// time on a crafted header.
fn header_pattern(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 1024 || v.chars().any(char::is_control) {
        return Err("expected a regular expression of 1 to 1024 printable characters".to_owned());
    }
    let ast = regex_syntax::ast::parse::Parser::new()
        .parse(v)
        .map_err(|e| format!("not a usable regular expression: {}", e.kind()))?;
    pcre_reads_alike(&ast)?;
    if nested_repetition(&ast) {
        return Err(
            "a repeated group must not itself repeat, be optional or alternate (e.g. \
             \"(a+)+\", \"(a?b)*\" or \"(a|b)*\"): it can take exponential time to match"
                .to_owned(),
        );
    }
    Ok(v.to_owned())
}

/// Refuses the syntax Rust's parser takes and PCRE reads otherwise or not at all.
fn pcre_reads_alike(ast: &regex_syntax::ast::Ast) -> Result<(), String> {
    use regex_syntax::ast::{AssertionKind, Ast, Flag, FlagsItemKind, GroupKind};
    let flags_ok = |flags: &regex_syntax::ast::Flags| {
        flags.items.iter().all(|item| {
            !matches!(
                item.kind,
                FlagsItemKind::Flag(Flag::Unicode) | FlagsItemKind::Flag(Flag::CRLF)
            )
        })
    };
    let refuse = |what: &str| Err(format!("{what} is not supported (PCRE reads it otherwise)"));
    match ast {
        Ast::Flags(f) if !flags_ok(&f.flags) => refuse("the flag u or R"),
        Ast::Group(g) => match &g.kind {
            GroupKind::NonCapturing(flags) if !flags_ok(flags) => refuse("the flag u or R"),
            _ => pcre_reads_alike(&g.ast),
        },
        Ast::Assertion(a)
            if !matches!(
                a.kind,
                AssertionKind::StartLine
                    | AssertionKind::EndLine
                    | AssertionKind::StartText
                    | AssertionKind::EndText
                    | AssertionKind::WordBoundary
                    | AssertionKind::NotWordBoundary
            ) =>
        {
            refuse("this word boundary")
        }
        Ast::ClassBracketed(c) if class_has_set_operation(&c.kind) => {
            refuse("a class set operation (&&, --, ~~)")
        }
        Ast::Repetition(r) => pcre_reads_alike(&r.ast),
        Ast::Alternation(a) => a.asts.iter().try_for_each(pcre_reads_alike),
        Ast::Concat(c) => c.asts.iter().try_for_each(pcre_reads_alike),
        _ => Ok(()),
    }
}

fn class_has_set_operation(set: &regex_syntax::ast::ClassSet) -> bool {
    use regex_syntax::ast::{ClassSet, ClassSetItem};
    fn item(i: &ClassSetItem) -> bool {
        match i {
            ClassSetItem::Bracketed(b) => class_has_set_operation(&b.kind),
            ClassSetItem::Union(u) => u.items.iter().any(item),
            _ => false,
        }
    }
    match set {
        ClassSet::BinaryOp(_) => true,
        ClassSet::Item(i) => item(i),
    }
}

/// Whether a repetition in `ast` repeats a sub-pattern that repeats, is optional or
/// alternates.
fn nested_repetition(ast: &regex_syntax::ast::Ast) -> bool {
    use regex_syntax::ast::Ast;
    match ast {
        Ast::Repetition(r) => {
            (repeats(&r.op.kind) && ambiguous(&r.ast)) || nested_repetition(&r.ast)
        }
        Ast::Group(g) => nested_repetition(&g.ast),
        Ast::Alternation(a) => a.asts.iter().any(nested_repetition),
        Ast::Concat(c) => c.asts.iter().any(nested_repetition),
        _ => false,
    }
}

/// Whether `ast` can match in more than one way: any repetition (`?` included)
/// or alternation in it.
fn ambiguous(ast: &regex_syntax::ast::Ast) -> bool {
    use regex_syntax::ast::Ast;
    match ast {
        Ast::Repetition(_) | Ast::Alternation(_) => true,
        Ast::Group(g) => ambiguous(&g.ast),
        Ast::Concat(c) => c.asts.iter().any(ambiguous),
        _ => false,
    }
}

/// More than once: everything but `?`, `{0}`, `{1}`, `{n,0}` and `{n,1}`.
fn repeats(kind: &regex_syntax::ast::RepetitionKind) -> bool {
    use regex_syntax::ast::{RepetitionKind, RepetitionRange};
    match kind {
        RepetitionKind::ZeroOrOne => false,
        RepetitionKind::Range(RepetitionRange::Exactly(n)) => *n > 1,
        RepetitionKind::Range(RepetitionRange::Bounded(_, n)) => *n > 1,
        _ => true,
    }
}

fn affinity_behavior(v: &str) -> Result<CanaryAffinity, String> {
    match v {
        "sticky" => Ok(CanaryAffinity::Sticky),
        "legacy" => Ok(CanaryAffinity::Legacy),
        _ => Err("expected \"sticky\" or \"legacy\"".to_owned()),
    }
}

pub(super) fn parse(r: &Reader<'_>, out: &mut IngressAnnotations) -> Result<(), AnnotationError> {
    if r.parse("canary", value::boolean)? != Some(true) {
        return Ok(());
    }
    let total = r
        .parse("canary-weight-total", |v| value::integer(v, 1, 1_000_000))?
        .unwrap_or(100);
    let weight = r
        .parse("canary-weight", |v| value::integer(v, 0, total))?
        .unwrap_or(0);
    out.canary = Some(Canary {
        weight,
        weight_total: total,
        header: r.parse("canary-by-header", value::token)?,
        header_value: r.parse("canary-by-header-value", value::plain)?,
        header_pattern: r.parse("canary-by-header-pattern", header_pattern)?,
        cookie: r.parse("canary-by-cookie", value::token)?,
        affinity_behavior: r
            .parse("affinity-canary-behavior", affinity_behavior)?
            .unwrap_or_default(),
    });
    Ok(())
}
