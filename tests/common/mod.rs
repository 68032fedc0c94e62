//! Helpers shared by the integration tests: fixture paths, running binaries, schema validation.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The project root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file under `fixtures/` (the real captures copied from shared/fixtures).
pub fn fixture(rel: &str) -> PathBuf {
    let p = root().join("fixtures").join(rel);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}

/// Validate a document against `schemas/<kind>.v1.schema.json`, chosen by its `schema` field.
pub fn assert_valid(doc: &serde_json::Value) {
    let id = doc.get("schema").and_then(|s| s.as_str()).unwrap_or_else(|| panic!("document has no schema field: {doc}"));
    let kind = nsyskit::contract::kind_of_schema_id(id).unwrap_or_else(|| panic!("not an nsyskit schema id: {id}"));
    let path = root().join("schemas").join(format!("{kind}.v1.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: invalid schema: {e}", path.display()));
    let errors: Vec<String> = validator.iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "document does not match {}:\n{}", path.display(), errors.join("\n"));
}

/// Parse stdout of a binary as exactly one JSON document, validated against its schema.
pub fn one_doc(stdout: &[u8]) -> serde_json::Value {
    let docs = nsyskit::contract::parse_json_stream(stdout, "stdout").expect("stdout is JSON");
    assert_eq!(docs.len(), 1, "stdout must carry exactly one JSON document");
    let v = docs.into_iter().next().unwrap().value;
    assert_valid(&v);
    v
}

/// Is the real nsys available (NSYS_BIN or PATH)? Tests that need it print why they skip.
pub fn nsys_or_skip(test: &str) -> Option<PathBuf> {
    match nsyskit::export::default_nsys() {
        Ok(p) if p.exists() || which_ok(&p) => Some(p),
        _ => {
            eprintln!("SKIP {test}: no nsys (set NSYS_BIN=$(scripts/get-nsys) to run it)");
            None
        }
    }
}

fn which_ok(p: &Path) -> bool {
    std::process::Command::new(p).arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}
