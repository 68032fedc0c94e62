//! Helpers shared by pod-attach's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// The workspace root (fixtures and schemas live there).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Validate against schemas/pod-attach.v1.schema.json.
pub fn assert_valid(doc: &Value) {
    let path = root().join("schemas/pod-attach.v1.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(doc).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
