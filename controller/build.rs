//! Embeds the Lua balancer (`lua/ferrule/**/*.lua`) and the njs balancer
//! (`njs/ferrule.js`, `njs/stream.js`, `njs/ferrule/*.js`) in the binary, so that one executable
//! carries everything it writes into the NGINX prefix.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// Writes `OUT_DIR/{file}`: a `const {name}: &[(&str, &str)]` of (path relative to
/// `root`, contents) for `files`.
fn embed(root: &Path, mut files: Vec<PathBuf>, name: &str, doc: &str, file: &str) {
    println!("cargo:rerun-if-changed={}", root.display());
    files.sort();
    let mut src = format!(
        "/// {doc}: (path relative to its directory, contents).\npub const {name}: &[(&str, &str)] = &[\n"
    );
    for f in &files {
        let abs = f.canonicalize().unwrap();
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        println!("cargo:rerun-if-changed={}", abs.display());
        writeln!(
            src,
            "    ({rel:?}, include_str!({:?})),",
            abs.display().to_string()
        )
        .unwrap();
    }
    src.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join(file);
    std::fs::write(out, src).unwrap();
}

fn main() {
    let repo = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");

    let lua = repo.join("lua");
    let mut files = Vec::new();
    collect(&lua.join("ferrule"), "lua", &mut files);
    embed(
        &lua,
        files,
        "LUA_FILES",
        "Lua balancer sources",
        "lua_files.rs",
    );

    // The entry module and its imports; njs/test/ is not part of the balancer.
    let njs = repo.join("njs");
    let mut files = vec![njs.join("ferrule.js"), njs.join("stream.js")];
    collect(&njs.join("ferrule"), "js", &mut files);
    embed(
        &njs,
        files,
        "NJS_FILES",
        "njs balancer sources",
        "njs_files.rs",
    );
}
