//! `from nsyskit`: the typed view of nsyskit JSON (documents a binary wrote, or a bundle).

use nsyskit::contract::parse_json_stream;
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::category;
use crate::convert::{json_to_nu, nu_to_json};
use crate::NsyskitPlugin;

pub struct FromNsyskit;

impl SimplePluginCommand for FromNsyskit {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "from nsyskit"
    }

    fn description(&self) -> &str {
        "Read nsyskit JSON (documents written by the binaries, a stream of them, or a bundle) as typed values."
    }

    fn extra_description(&self) -> &str {
        "The same conversion every nsyskit command applies to its output: integers stay integers, an \
         integer `<x>_ns` becomes a duration and `<x>_bytes`/`size` a filesize under the same key (exact: no \
         column is added), RFC 3339 timestamps (`captured_at`, `*_utc`, `*_at`) become dates, null becomes \
         nothing. One document gives a record, several (concatenated or NDJSON) a list."
    }

    fn signature(&self) -> Signature {
        Signature::build(SimplePluginCommand::name(self))
            .input_output_types(vec![
                (Type::String, Type::Any),
                (Type::Binary, Type::Any),
                (Type::record(), Type::record()),
                (Type::table(), Type::table()),
            ])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "json", "duration", "evidence"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: r#"('{"kernel_busy_union_ns": 1500000}' | from nsyskit).kernel_busy_union_ns"#,
                description: "An `_ns` integer becomes a duration of exactly that many nanoseconds, under the same key",
                result: Some(Value::test_duration(1_500_000)),
            },
            Example {
                example: r#"("{\"a_bytes\": 2048}\n{\"a_bytes\": 4096}" | from nsyskit).1.a_bytes"#,
                description: "A stream of documents (NDJSON) gives a list; a `<x>_bytes` integer becomes a filesize",
                result: Some(Value::test_filesize(4096)),
            },
        ]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        _engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let span = input.span();
        let bytes = match input {
            Value::String { val, .. } => val.as_bytes().to_vec(),
            Value::Binary { val, .. } => val.to_vec(),
            Value::Record { .. } | Value::List { .. } => {
                return Ok(json_to_nu(&nu_to_json(input).map_err(LabeledError::from)?, call.head));
            }
            other => {
                return Err(LabeledError::new(format!(
                    "from nsyskit takes JSON text or a record, not {}",
                    other.get_type()
                ))
                .with_code("nsyskit::input")
                .with_label("pipeline input", span))
            }
        };
        let docs = parse_json_stream(&bytes, "pipeline input")
            .map_err(|e| LabeledError::new(e.message).with_code("nsyskit::input").with_label("not valid JSON", span))?;
        let mut values: Vec<Value> = docs.iter().map(|d| json_to_nu(&d.value, call.head)).collect();
        Ok(if values.len() == 1 { values.remove(0) } else { Value::list(values, call.head) })
    }
}
