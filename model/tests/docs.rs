//! The generated sections of the docs are generated from the model: these tests
//! fail when they drift. `FERRULE_BLESS=1 cargo test -p ferrule-model --test docs`
//! writes them anew.

use ferrule_model::annotations::registry;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/annotations.md");
const CONFIGMAP_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configmap.md");
const END: &str = "<!-- generated: end -->\n";

/// Checks (or, with `FERRULE_BLESS`, writes) the section of `path` between the
/// `begin` marker and the end marker: it must be `content`.
fn check_generated(path: &str, begin: &str, content: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (head, rest) = text.split_once(begin).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let want = format!("{head}{begin}{content}{END}{tail}");
    if std::env::var_os("FERRULE_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "{path} is not what the model generates ({begin}): run FERRULE_BLESS=1 cargo test -p ferrule-model --test docs"
    );
}

#[test]
fn the_annotation_table_is_the_registry_s() {
    check_generated(
        DOC,
        "<!-- generated from model/src/annotations (registry.rs): begin -->\n",
        &registry::markdown_table(ferrule_model::snapshot::DEFAULT_ANNOTATIONS_PREFIX),
    );
}

#[test]
fn the_configmap_table_is_the_registry_s() {
    check_generated(
        CONFIGMAP_DOC,
        "<!-- generated from model/src/configmap.rs: begin -->\n",
        &ferrule_model::configmap::markdown_table(),
    );
}

#[test]
fn the_snippet_allowlist_is_the_model_s() {
    check_generated(
        DOC,
        "<!-- generated from model/src/snippet/allowlist.rs: begin -->\n",
        &ferrule_model::snippet::allowlist::markdown(),
    );
}
