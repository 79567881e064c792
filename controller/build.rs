//! Embeds the Lua balancer (`lua/ferrule/**/*.lua`) in the binary, so that one
//! executable carries everything it writes into the NGINX prefix.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "lua") {
            out.push(p);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../lua");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root.join("ferrule"), &mut files);
    files.sort();
    let mut src = String::from(
        "/// Lua balancer sources: (path relative to the Lua dir, contents).\npub const LUA_FILES: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        let abs = f.canonicalize().unwrap();
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        println!("cargo:rerun-if-changed={}", abs.display());
        writeln!(
            src,
            "    ({rel:?}, include_str!({:?})),",
            abs.display().to_string()
        )
        .unwrap();
    }
    src.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("lua_files.rs");
    std::fs::write(out, src).unwrap();
}
