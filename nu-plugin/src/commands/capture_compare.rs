//! `capture-compare`: is a pair of captures comparable, and what changed → `nsyskit.compare/v1`.

use nsyskit::compare::{self, CompareOptions};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_arg, doc_value, flag_path, flag_usize, labeled};
use crate::NsyskitPlugin;

pub struct CaptureCompare;

impl SimplePluginCommand for CaptureCompare {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "capture-compare"
    }

    fn description(&self) -> &str {
        "Is a pair of captures comparable, and if so, what changed (per range, per kernel, per category)."
    }

    fn extra_description(&self) -> &str {
        "A and B are evidence bundles (bundle-merge output), bare nsyskit.ranges/v1 documents or nsys .sqlite \
         exports — paths, or records (`capture-compare (sqlite-ranges a.sqlite) b.sqlite`). A refusal is data: \
         the document lists each invalidator (the binary exits 1); docs/capture-compare.md."
    }

    fn signature(&self) -> Signature {
        let doc = || SyntaxShape::OneOf(vec![SyntaxShape::Record(Vec::new().into()), SyntaxShape::Filepath]);
        Signature::build(SimplePluginCommand::name(self))
            .required("a", doc(), "The baseline capture: bundle JSON, ranges JSON or nsys .sqlite export (a path or a record)")
            .required("b", doc(), "The capture compared with A (a path or a record)")
            .named("provenance-a", SyntaxShape::Filepath, "A provenance document (nsyskit.provenance/v1) for A: adds version, flags, window, GPU facts", None)
            .named("provenance-b", SyntaxShape::Filepath, "A provenance document for B", None)
            .named("categories", SyntaxShape::Filepath, "Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)", None)
            .named("top", SyntaxShape::Int, "List at most N kernel deltas (0 = all; default 50)", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["diff", "delta", "comparable", "regression"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(capture-compare fixtures/nsys-2025.3.1/gpu_full_node.sqlite fixtures/nsys-2025.3.1/gpu_full_graph.sqlite).verdict",
            description: "A node-level and a graph-level capture are not comparable (real fixtures)",
            result: Some(Value::test_string("REFUSED")),
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
        let (a, _ta) = doc_arg(engine, &call.positional[0], "a")?;
        let (b, _tb) = doc_arg(engine, &call.positional[1], "b")?;
        let opts = CompareOptions {
            a,
            b,
            provenance_a: flag_path(engine, call, "provenance-a")?,
            provenance_b: flag_path(engine, call, "provenance-b")?,
            categories: flag_path(engine, call, "categories")?,
            top: flag_usize(call, "top")?.unwrap_or(50),
            ..Default::default()
        };
        let doc = compare::run(&opts).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}
