//! The maps in the repository stay true: every repository path that `ARCHITECTURE.md`
//! and `CONTRIBUTING.md` name in backticks or link to exists, and no document, the
//! README included, points outside the repository.
//!
//! A word in backticks (or on a line of a fenced block marked `sh`) is taken for a
//! repository path when it is made of path characters only and contains a `/` or ends
//! in one of [`EXTENSIONS`]. Not taken: absolute paths and URLs (`/run/ferrule`,
//! `/status/resources`), annotation keys and API groups (a first component with a dot,
//! such as `nginx.ingress.kubernetes.io/ssl-redirect`), placeholders in capitals
//! (`PREFIX/run/balancer.sock`), globs and templates (`*`, `<`, `{`), and build output
//! below `target/`. Commands are read word by word: `bash lua/test/run.sh` names
//! `lua/test/run.sh`. Paths are from the repository root, but a file named alone
//! (`emit.rs`) may also be in the folder of the path named before it, as in "`src/`:
//! `a.rs`, `b.rs`".

use std::path::{Component, Path};

/// The repository root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// File extensions of the tree: a word ending in one is a path even without a `/`.
const EXTENSIONS: &[&str] = &[
    "c", "conf", "js", "json", "lock", "lua", "md", "py", "rs", "sh", "snap", "tera", "toml",
    "yaml", "yml",
];

/// What a document says in code: the words of its spans between backticks outside
/// fenced blocks, then those of the lines (comments left out) of its fenced blocks
/// marked `sh` or `bash`; and the targets of its Markdown links.
fn code(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut prose, mut shell) = (String::new(), String::new());
    let mut fence: Option<bool> = None; // inside a fence: whether it is a shell block
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(info.trim(), "sh" | "bash")),
            };
            continue;
        }
        let (out, text) = match fence {
            None => (&mut prose, line),
            Some(true) if !t.starts_with('#') => {
                (&mut shell, line.split(" #").next().unwrap_or_default())
            }
            Some(_) => continue,
        };
        out.push_str(text);
        out.push('\n');
    }
    let spans: Vec<&str> = prose.split('`').collect();
    assert!(
        spans.len() % 2 == 1,
        "unbalanced backticks: a code span is not closed"
    );
    let code_spans = spans.iter().skip(1).step_by(2).copied();
    let words = code_spans
        .chain([shell.as_str()])
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect();
    // `[text](target)` in the prose around the code spans.
    let links = spans
        .iter()
        .step_by(2)
        .flat_map(|s| s.split("](").skip(1))
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|t| !t.contains("://") && !t.starts_with('#') && !t.starts_with("mailto:"))
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    (words, links)
}

/// The repository path a word names, if it names one (see the module docs).
fn repo_path(word: &str) -> Option<&str> {
    let w = word.trim_matches(|c| "\"'()$;,".contains(c));
    let path_chars = w
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c));
    if w.is_empty() || !path_chars || w.starts_with('/') || w.starts_with('-') {
        return None;
    }
    let has_extension = Path::new(w)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.contains(&e));
    if !w.contains('/') && !has_extension {
        return None;
    }
    if escapes(w) {
        return Some(w);
    }
    let first = w.split('/').next().unwrap_or_default();
    let placeholder = |c: &str| {
        c.bytes().any(|b| b.is_ascii_uppercase())
            && c.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    let domain = w.contains('/') && first.get(1..).is_some_and(|rest| rest.contains('.'));
    if domain || first == "target" || w.split('/').any(placeholder) {
        return None;
    }
    Some(w)
}

/// Whether a relative path leaves the directory it starts from.
fn escapes(path: &str) -> bool {
    Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
}

/// What is wrong with the paths `text` names: one line per path that leaves the
/// repository and, when `exist` is set, per path that does not exist.
fn problems(text: &str, exist: bool) -> Vec<String> {
    let (words, links) = code(text);
    let root = Path::new(ROOT);
    let mut out = Vec::new();
    // The folder of the last path named with a `/`, for a file named alone.
    let mut folder = String::new();
    let named = words.iter().filter_map(|w| repo_path(w).map(|p| (p, true)));
    for (p, word) in named.chain(links.iter().map(|l| (l.as_str(), false))) {
        if escapes(p) || p.starts_with('/') {
            out.push(format!("{p}: outside the repository"));
            continue;
        }
        let alone = word && !p.contains('/');
        let found = root.join(p).exists() || alone && root.join(&folder).join(p).exists();
        if exist && !found {
            out.push(match alone {
                true => format!("{p}: no such file in {folder} or the root"),
                false => format!("{p}: no such file or directory"),
            });
        }
        if word && !alone {
            folder = match p.strip_suffix('/') {
                Some(dir) => dir.to_owned(),
                None => p.rsplit_once('/').map_or("", |(dir, _)| dir).to_owned(),
            };
        }
    }
    out.sort();
    out.dedup();
    out
}

fn read(doc: &str) -> String {
    let path = Path::new(ROOT).join(doc);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The problems of every document, one line each, prefixed with its name.
fn problems_of(docs: &[&str], exist: bool) -> Vec<String> {
    docs.iter()
        .flat_map(|doc| {
            problems(&read(doc), exist)
                .into_iter()
                .map(move |p| format!("{doc}: {p}"))
        })
        .collect()
}

#[test]
fn the_architecture_and_contributing_guides_name_only_paths_that_exist() {
    let bad = problems_of(&["ARCHITECTURE.md", "CONTRIBUTING.md"], true);
    assert!(bad.is_empty(), "\n  {}", bad.join("\n  "));
}

#[test]
fn no_document_points_outside_the_repository() {
    let bad = problems_of(&["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"], false);
    assert!(bad.is_empty(), "\n  {}", bad.join("\n  "));
}

/// The check itself: it sees a path that is not there, a link out of the repository,
/// and a path inside a command, and leaves alone what only looks like a path.
#[test]
fn the_check_finds_missing_paths_and_ignores_what_is_not_one() {
    let text = "\
The loop is in `controller/src/sync.rs`, not in `controller/src/loop.rs`; see
`controller/src/nginx/`: `emit.rs` but not `omit.rs`, and `README.md` at the root;
`model/src/annotations/` and [the guide](CONTRIBUTING.md) but not
[the design](../shared/ARCHITECTURE.md). Not paths: `nginx.ingress.kubernetes.io/ssl-redirect`,
`/status/resources`, `PREFIX/run/balancer.sock`, `conf/servers/*.conf`, `target/e2e`,
`ferrule_model::build`, `$request_uri`, `https://example.com/x.md`.

```sh
bash lua/test/run.sh   # and lua/test/gone.sh in a comment is not read
bash lua/test/missing.sh
```

```text
diagram/with/slashes.rs
```
";
    assert_eq!(
        problems(text, true),
        [
            "../shared/ARCHITECTURE.md: outside the repository",
            "controller/src/loop.rs: no such file or directory",
            "lua/test/missing.sh: no such file or directory",
            "omit.rs: no such file in controller/src/nginx or the root",
        ]
    );
    assert_eq!(
        problems(text, false),
        ["../shared/ARCHITECTURE.md: outside the repository"]
    );
}
