//! The contract shared by every nsyskit tool.
//!
//! * Every output document is a JSON object whose first two keys are `"schema": "nsyskit.<kind>/v1"` and
//!   `"tool": {"name", "version"}` ([`Header`]); its Rust type implements [`Document`].
//! * Errors are [`Error`]s: usage or unusable input, exit code 2, with a message that names the file and the
//!   line, table, column or JSON path at fault. A check that fails (RETRY, "would change") is not an error: it
//!   is a document whose [`Document::exit_code`] is 1.
//! * Input comes from a path or `-`/stdin ([`Input`]); JSON input may be a stream of documents
//!   ([`parse_json_stream`]).
//! * Output is one JSON document on stdout, pretty on a terminal and compact otherwise ([`Style`]).

pub mod cli;
mod error;
mod input;
mod json;
mod output;
mod paths;
mod time;

pub use error::{Error, ErrorKind, Result};
pub use input::{
    json_max_bytes, parse_json_stream, read_json_file, Input, JsonDoc, JSON_MAX_BYTES_DEFAULT, JSON_MAX_BYTES_ENV,
};
pub use json::{check_strict, duplicate_key_path, push_key, StrictValue};
pub use output::{render, Style};
pub use paths::{file_kind, open_input, read_input, refuse_output_over_input, same_file};
pub use time::rfc3339_utc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The nsyskit version every document records in `tool.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `tool` of every document: which binary (or Nushell command) wrote it, and its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Tool {
    pub fn new(name: &str) -> Tool {
        Tool { name: name.to_string(), version: VERSION.to_string() }
    }
}

/// The identifier `nsyskit.<kind>/v1` of a document kind.
pub fn schema_id(kind: &str) -> String {
    format!("nsyskit.{kind}/v1")
}

/// The kind of a schema identifier (`nsyskit.gate/v1` → `gate`), or None when it is not an nsyskit one.
pub fn kind_of_schema_id(id: &str) -> Option<&str> {
    id.strip_prefix("nsyskit.")?.strip_suffix("/v1")
}

/// An nsyskit output document.
///
/// Implementors are serde structs whose first two fields are `schema: String` and `tool: Tool`
/// (use [`Header`]-style construction through [`Document::header`]).
pub trait Document: Serialize + JsonSchema {
    /// The `<kind>` of `nsyskit.<kind>/v1`.
    const KIND: &'static str;
    /// The tool name written in `tool.name` by default.
    const TOOL: &'static str;
    /// 0 when the document reports success, 1 when it reports a failed check (RETRY, would change).
    fn exit_code(&self) -> i32 {
        0
    }
    /// `(schema, tool)` for a new document of this kind.
    fn header() -> (String, Tool) {
        (schema_id(Self::KIND), Tool::new(Self::TOOL))
    }
}

/// The JSON Schema of a document kind, generated from its Rust type, with `schema` pinned to its identifier.
pub fn json_schema<T: Document>() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).expect("schema serialises");
    let id = schema_id(T::KIND);
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "$id".into(),
            serde_json::Value::String(format!("https://nsyskit.invalid/schemas/{}.v1.schema.json", T::KIND)),
        );
        if let Some(props) = obj.get_mut("properties").and_then(|p| p.as_object_mut()) {
            props.insert("schema".into(), serde_json::json!({"const": id, "type": "string"}));
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_ids_round_trip() {
        assert_eq!(schema_id("gate"), "nsyskit.gate/v1");
        assert_eq!(kind_of_schema_id("nsyskit.gate/v1"), Some("gate"));
        assert_eq!(kind_of_schema_id("nsyskit.gate/v2"), None);
        assert_eq!(kind_of_schema_id("other.gate/v1"), None);
    }
}
