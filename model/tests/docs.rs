//! The annotation table in `docs/annotations.md` is generated from the registry:
//! this test fails when the two drift. `FERRULE_BLESS=1 cargo test -p ferrule-model
//! --test docs` writes the table anew.

use ferrule_model::annotations::registry;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/annotations.md");
const BEGIN: &str = "<!-- generated from model/src/annotations (registry.rs): begin -->\n";
const END: &str = "<!-- generated: end -->\n";

#[test]
fn the_annotation_table_is_the_registry_s() {
    let text = std::fs::read_to_string(DOC).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let (head, rest) = text.split_once(BEGIN).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let table = registry::markdown_table(ferrule_model::snapshot::DEFAULT_ANNOTATIONS_PREFIX);
    let want = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("FERRULE_BLESS").is_some() {
        std::fs::write(DOC, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "docs/annotations.md is not the registry's table: run FERRULE_BLESS=1 cargo test -p ferrule-model --test docs"
    );
}

const CONFIGMAP_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configmap.md");
const CONFIGMAP_BEGIN: &str = "<!-- generated from model/src/configmap.rs: begin -->\n";

#[test]
fn the_configmap_table_is_the_registry_s() {
    let text =
        std::fs::read_to_string(CONFIGMAP_DOC).unwrap_or_else(|e| panic!("{CONFIGMAP_DOC}: {e}"));
    let (head, rest) = text.split_once(CONFIGMAP_BEGIN).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let table = ferrule_model::configmap::markdown_table();
    let want = format!("{head}{CONFIGMAP_BEGIN}{table}{END}{tail}");
    if std::env::var_os("FERRULE_BLESS").is_some() {
        std::fs::write(CONFIGMAP_DOC, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "docs/configmap.md is not the registry's table: run FERRULE_BLESS=1 cargo test -p ferrule-model --test docs"
    );
}

const SNIPPETS_BEGIN: &str = "<!-- generated from model/src/snippet/allowlist.rs: begin -->\n";

#[test]
fn the_snippet_allowlist_is_the_model_s() {
    let text = std::fs::read_to_string(DOC).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let (head, rest) = text.split_once(SNIPPETS_BEGIN).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let list = ferrule_model::snippet::allowlist::markdown();
    let want = format!("{head}{SNIPPETS_BEGIN}{list}{END}{tail}");
    if std::env::var_os("FERRULE_BLESS").is_some() {
        std::fs::write(DOC, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "docs/annotations.md is not the snippet allowlist: run FERRULE_BLESS=1 cargo test -p ferrule-model --test docs"
    );
}
