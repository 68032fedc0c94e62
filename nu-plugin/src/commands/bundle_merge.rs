//! `bundle-merge`: merge nsyskit documents (pipeline records, JSON text, files) into an evidence bundle.

use clap::CommandFactory;
use nsyskit::flags::bundle_merge::BundleMergeArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Span, SyntaxShape, Type, Value};

use crate::call::{category, labeled_at, resolve_path, run_tool_with, span_of_arg};
use crate::convert::nu_to_json;
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct BundleMerge;

/// Where pipeline documents are said to come from in messages and in the summary.
const PIPELINE: &str = "pipeline input";

/// The documents of the pipeline input, as the tool reads standard input: a record (one document), a list of
/// records, or JSON text (one, concatenated or NDJSON documents).
fn pipeline_docs(input: &Value) -> Result<Stdin, LabeledError> {
    Ok(match input {
        Value::Nothing { .. } => Stdin::None,
        Value::String { val, .. } => Stdin::Bytes(val.as_bytes().to_vec(), PIPELINE.into()),
        Value::Binary { val, .. } => Stdin::Bytes(val.to_vec(), PIPELINE.into()),
        Value::List { vals, .. } => Stdin::Values(
            vals.iter()
                .enumerate()
                .map(|(i, v)| Ok((nu_to_json(v)?, format!("{PIPELINE} item {i}"))))
                .collect::<Result<_, nu_protocol::ShellError>>()?,
        ),
        other => Stdin::Values(vec![(nu_to_json(other)?, PIPELINE.into())]),
    })
}

/// The span of the document an error message is about: messages start with the document's source
/// (`pipeline input…: line N: …` or the DOC path as resolved).
fn error_span(message: &str, call: &EvaluatedCall, files: &[String], input: Span) -> Option<Span> {
    if message.starts_with(PIPELINE) {
        return Some(input);
    }
    // DOC arguments are positional 1.. (0 is the bundle); their messages name the resolved path, which ends
    // with the path as given
    let head = message.split(": ").next().unwrap_or("");
    files.iter().position(|f| head.ends_with(f.as_str())).and_then(|i| call.positional.get(i + 1)).map(|v| v.span())
}

impl SimplePluginCommand for BundleMerge {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "bundle-merge"
    }

    fn description(&self) -> &str {
        "Merge nsyskit documents (from the pipeline and/or files) into an evidence bundle, losslessly and atomically."
    }

    fn extra_description(&self) -> &str {
        "Each document goes to the place its `schema` kind owns (docs/bundle-merge.md); every other byte of the \
         bundle stays as it was. The bundle is created when absent and written atomically under a lock. \
         Documents come from the pipeline (a record such as `gate-check x.sqlite`'s, a list of them, or JSON \
         text) and then from the DOC files, in order. Returns the summary of what went where; with --check, \
         `changed` says whether the merge would change the bundle (the binary exits 1), nothing is written; \
         with --stdout, nothing is written and the merged bundle itself is returned."
    }

    fn signature(&self) -> Signature {
        let sig = Signature::build(SimplePluginCommand::name(self))
            .required("bundle", SyntaxShape::Filepath, "The evidence bundle (a JSON object; created when absent)")
            .rest("doc", SyntaxShape::Filepath, "nsyskit JSON documents to merge after the pipeline's, in order");
        flags()
            .signature(sig)
            .input_output_types(vec![
                (Type::record(), Type::record()),
                (Type::table(), Type::record()),
                (Type::list(Type::Any), Type::record()),
                (Type::String, Type::record()),
                (Type::Binary, Type::record()),
                (Type::Nothing, Type::record()),
            ])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["evidence", "bundle", "json", "merge", "perfbench"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(kern-csv-to-json fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv | bundle-merge --stdout target/nu-example-bundle.json).kernel_profile.top_kernels.0.name",
            description: "Place a kernel summary into a bundle (here --stdout: nothing is written, the merged bundle is returned)",
            result: Some(Value::test_string("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT")),
        }]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let sig = self.signature();
        let bundle = resolve_path(engine, &call.req::<String>(0)?)?;
        let files: Vec<String> = call.rest(1)?;
        let mut positionals = vec![bundle.into_os_string()];
        for f in &files {
            positionals.push(resolve_path(engine, f)?.into_os_string());
        }
        let label = |e: nsyskit::contract::Error| {
            let span = match error_span(&e.message, call, &files, input.span()) {
                Some(span) => span,
                None if e.arg.is_some() => span_of_arg(e.arg.as_deref(), call, &sig, Some(input.span())),
                // the rest are about the bundle (not JSON, not an object, cannot write)
                None => call.positional.first().map(|v| v.span()).unwrap_or(call.head),
            };
            labeled_at(e, span)
        };
        let stdin = pipeline_docs(input)?;
        run_tool_with(engine, call, &sig, &flags(), positionals, stdin, None, tools::bundle_merge::run, &label)
    }
}

/// The flags of the `bundle-merge` binary (one definition: `nsyskit::flags::bundle_merge`).
fn flags() -> Flags {
    Flags::new(BundleMergeArgs::command())
}
