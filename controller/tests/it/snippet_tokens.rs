//! Ferrule's snippet tokenizer (`model/src/snippet/tokens.rs`) against NGINX's own
//! reader: a text is tokenized by Ferrule, every statement is prefixed (at the
//! offset Ferrule found) with a directive of the test-only echo module
//! (`nginx-module/test/`), and `nginx -t` prints what NGINX read. The two must be
//! the same statements, words and blocks, byte for byte: the whole `nginx -T` of a
//! rendered configuration, the hostile snippets of the security review, and a few
//! thousand random texts made of the bytes the two readers could disagree on.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferrule_model::snippet::tokens::{self, Statement};

use crate::support::*;

const ECHO_SO: &str = "ngx_ferrule_token_echo_module.so";

/// The echo module: beside the module under test (`FERRULE_IT_NGINX_MODULES`)
/// or the installed ones (`nginx-module/build.sh`, run by `make deps`).
fn echo_module() -> PathBuf {
    let dir = std::env::var("FERRULE_IT_NGINX_MODULES")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/usr/lib/nginx/modules".to_owned());
    let so = Path::new(&dir).join(ECHO_SO);
    assert!(so.exists(), "{}: run nginx-module/build.sh", so.display());
    so
}

/// What Ferrule reads: one line per statement (`S`/`B` and the hex words), `E`
/// after a block.
fn ferrule_lines(statements: &[Statement], out: &mut Vec<String>) {
    for st in statements {
        let kind = if st.block.is_some() { 'B' } else { 'S' };
        let words: Vec<String> = st.words.iter().map(|w| hex(w)).collect();
        out.push(format!("{kind} {}", words.join(" ")));
        if let Some(block) = &st.block {
            ferrule_lines(block, out);
            out.push("E".to_owned());
        }
    }
}

fn hex(word: &[u8]) -> String {
    if word.is_empty() {
        return "-".to_owned();
    }
    word.iter().map(|b| format!("{b:02x}")).collect()
}

/// `text` with the echo directive before each statement Ferrule found.
fn instrumented(text: &[u8], statements: &[Statement]) -> Vec<u8> {
    fn offsets(statements: &[Statement], out: &mut Vec<(usize, bool)>) {
        for st in statements {
            out.push((st.offset, st.block.is_some()));
            if let Some(b) = &st.block {
                offsets(b, out);
            }
        }
    }
    let mut at = Vec::new();
    offsets(statements, &mut at);
    at.sort();
    let mut out = Vec::with_capacity(text.len() + at.len() * 26);
    let mut last = 0;
    for (offset, block) in at {
        out.extend_from_slice(&text[last..offset]);
        out.extend_from_slice(if block {
            b"ferrule_token_echo_block "
        } else {
            b"ferrule_token_echo "
        });
        last = offset;
    }
    out.extend_from_slice(&text[last..]);
    out
}

/// What NGINX reads of the instrumented text, or its error.
fn nginx_lines(dir: &Path, so: &Path, body: &[u8]) -> Result<Vec<String>, String> {
    let conf = dir.join("t.conf");
    let mut file = format!("load_module {};\n", so.display()).into_bytes();
    file.extend_from_slice(body);
    file.extend_from_slice(b"\nevents {}\n");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(&conf, file).unwrap();
    let out = Command::new("nginx")
        .args(["-t", "-q", "-e", "stderr", "-p"])
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("nginx");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(stderr);
    }
    Ok(stderr
        .lines()
        .filter(|l| l.starts_with("S ") || l.starts_with("B ") || *l == "E")
        .map(str::to_owned)
        .collect())
}

/// Whether NGINX reads `text` as Ferrule does; `None` when Ferrule does not read
/// it at all (a snippet Ferrule refuses; nothing to compare).
fn same_reading(dir: &Path, so: &Path, text: &[u8]) -> Option<Result<(), String>> {
    let statements = tokens::parse(text).ok()?;
    let mut want = Vec::new();
    ferrule_lines(&statements, &mut want);
    let got = nginx_lines(dir, so, &instrumented(text, &statements));
    Some(match got {
        Ok(got) if got == want => Ok(()),
        Ok(got) => Err(format!(
            "{:?}\nFerrule: {want:#?}\nNGINX: {got:#?}",
            String::from_utf8_lossy(text)
        )),
        Err(e) => Err(format!(
            "{:?}: Ferrule reads {want:#?}, NGINX refuses: {e}",
            String::from_utf8_lossy(text)
        )),
    })
}

#[test]
fn nginx_reads_a_rendered_configuration_as_ferrule_does() {
    let so = echo_module();
    let work = tempfile::tempdir().unwrap();
    let m = Manifests::new();
    m.write(
        "svc.yaml",
        &service("demo", "echo", &["10.0.0.7:8080".parse().unwrap()]),
    );
    m.write(
        "snippets.yaml",
        &demo_ingress(
            "snippets",
            "snippets.test",
            &[
                (
                    "configuration-snippet",
                    "more_set_headers \"X-A: b\";\n# a comment ; with { and }\n\
                     more_set_headers \"X-Host: $host\";",
                ),
                ("server-snippet", "location = /ping { return 200 \"ok}\"; }"),
                ("enable-cors", "true"),
                ("auth-url", "http://10.0.0.8/check"),
                ("rewrite-target", "/$1"),
                ("use-regex", "true"),
            ],
        ),
    );
    let out = work.path().join("out");
    // The njs balancer: a Lua block is Lua's syntax, read by the Lua module's own
    // reader, not NGINX's; a snippet may hold none.
    let render = Command::new(env!("CARGO_BIN_EXE_ferrule"))
        .args(["render", "--balancer", "njs", "--allow-snippet-annotations"])
        .arg("--manifests")
        .arg(m.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        render.status.success(),
        "{}",
        String::from_utf8_lossy(&render.stderr)
    );
    let dump = Command::new("nginx")
        .args(["-T", "-q", "-e", "stderr", "-p"])
        .arg(&out)
        .arg("-c")
        .arg(out.join("conf/nginx.conf"))
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "nginx -T: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let text = dump.stdout;
    let text_str = String::from_utf8_lossy(&text);
    assert!(
        text_str.contains("X-Host: $host") && text_str.contains("# configuration file"),
        "the dump holds the snippets and every file"
    );
    let statements = tokens::parse(&text).expect("Ferrule reads nginx -T");
    let mut count = Vec::new();
    ferrule_lines(&statements, &mut count);
    assert!(count.len() > 300, "{} statements", count.len());
    let dir = work.path().join("echo");
    if let Some(Err(e)) = same_reading(&dir, &so, &text) {
        panic!("nginx -T read differently: {e}");
    }
}

#[test]
fn nginx_reads_hostile_and_random_snippets_as_ferrule_does() {
    let so = echo_module();
    let work = tempfile::tempdir().unwrap();
    let lua = "header_filter_by_lua_block { io.open('/var/run/secrets/token'); }";
    let hostile: Vec<String> = vec![
        format!("default_type ${{ ;\n{lua}"),
        "default_type ${ ;\n}\nlocation /evil { return 200 x; }\nlocation /y {".to_owned(),
        format!("add_header A b;a\x0b# ;\n{lua}"),
        format!("add_header A b;a\x0c# ;\n{lua}"),
        "add_header\u{a0}A b;".to_owned(),
        format!("return 200 a}};\n{lua}"),
        format!("add_header A b\"c;\n{lua}"),
        "add_header A b\\\n;listen 8081;".to_owned(),
        "add_header A 'b\\' c';".to_owned(),
        "add_header A ${{{{ };".to_owned(),
        "if ($a = \"b\") { return 403; }".to_owned(),
        "add_header X-Y \"${host}{\";\n# a } in a comment\naccess_log off;".to_owned(),
        "more_set_headers \"X-A: b\";\n# a comment ; with { and }\nmore_set_headers \"X-Host: $host\";".to_owned(),
        "a \"\\t\\r\\n\\x\" '\\'' \\\"q;".to_owned(),
        "a#b c#;d;".to_owned(),
        "a\r\nb\tc;".to_owned(),
    ];
    let mut read = 0;
    let mut failures = Vec::new();
    for (i, text) in hostile.iter().enumerate() {
        let dir = work.path().join(format!("h{i}"));
        match same_reading(&dir, &so, text.as_bytes()) {
            Some(Ok(())) => read += 1,
            Some(Err(e)) => failures.push(e),
            None => {}
        }
    }
    // Random texts from the bytes that matter, half of them shaped as
    // statements so that most parse.
    const BYTES: &[&[u8]] = &[
        b"a",
        b"b",
        b"$",
        b"{",
        b"}",
        b";",
        b"#",
        b"\"",
        b"'",
        b"\\",
        b" ",
        b"\t",
        b"\n",
        b"\r",
        b"\x0b",
        b"\x0c",
        b"(",
        b")",
        b"${",
        b"\xc2\xa0",
    ];
    let mut seed: u64 = 0x5eed_f00d;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % n
    };
    let mut random_read = 0;
    for i in 0..1500 {
        let mut text = Vec::new();
        if i % 2 == 0 {
            text.extend_from_slice(b"a ");
        }
        for _ in 0..1 + next(24) {
            text.extend_from_slice(BYTES[next(BYTES.len())]);
        }
        if i % 2 == 0 {
            text.extend_from_slice(b" b;");
        }
        let dir = work.path().join(format!("r{i}"));
        match same_reading(&dir, &so, &text) {
            Some(Ok(())) => random_read += 1,
            Some(Err(e)) => failures.push(e),
            None => {}
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(read >= 12, "{read} hostile texts compared");
    assert!(random_read >= 300, "{random_read} random texts compared");
}
