//! `schemas/` holds the JSON Schema of every document kind, generated from the Rust types.
//! `NSYSKIT_BLESS=1 cargo test --test it schemas::` rewrites them; otherwise this test fails when they are stale.

use crate::common;

#[test]
fn schemas_are_generated_from_the_types() {
    let dir = common::root().join("schemas");
    let bless = std::env::var_os("NSYSKIT_BLESS").is_some();
    let mut stale = Vec::new();
    for (kind, schema) in nsyskit::schemas::all() {
        let path = dir.join(format!("{kind}.v1.schema.json"));
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if bless {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(stale.is_empty(), "stale schemas (run NSYSKIT_BLESS=1 cargo test --test it schemas::): {stale:?}");
}

#[test]
fn every_schema_file_belongs_to_a_kind() {
    let kinds: Vec<String> = nsyskit::schemas::all().iter().map(|(k, _)| format!("{k}.v1.schema.json")).collect();
    for entry in std::fs::read_dir(common::root().join("schemas")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(kinds.contains(&name), "schemas/{name} is not generated from any document type");
    }
}
