//! `capture-compare`: are captures comparable, and is the trial faster → `nsyskit.compare/v1`
//! (or `nsyskit.baseline/v1` with `--save-baseline`).

use clap::CommandFactory;
use nsyskit::flags::capture_compare::CaptureCompareArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_arg, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct CaptureCompare;

impl SimplePluginCommand for CaptureCompare {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "capture-compare"
    }

    fn description(&self) -> &str {
        "Are captures comparable, and if so, what changed and is the trial faster (with statistics)."
    }

    fn extra_description(&self) -> &str {
        "Two forms: `capture-compare A B` (one pair; paths or records such as `(sqlite-ranges a.sqlite)`), or \
         `capture-compare --baseline [A1 A2] --trial [B1 B2]` (several captures per side). Every invalidator of \
         the serving-run manual is checked with both values shown; unknown facts are listed (--strict refuses on \
         them). A refusal, and a tripped --fail-on-regression, is data: `verdict` / `regression.failed` (the \
         binary exits 1). The A/B numbers per label are `ab.labels` (a table); docs/compare-report.md."
    }

    fn signature(&self) -> Signature {
        let doc = || SyntaxShape::OneOf(vec![SyntaxShape::Record(Vec::new().into()), SyntaxShape::Filepath]);
        let sig = Signature::build(SimplePluginCommand::name(self))
            .optional("a", doc(), "The baseline capture: bundle JSON, ranges JSON, nsys .sqlite export or stored baseline (a path or a record)")
            .optional("b", doc(), "The capture compared with A (a path or a record)");
        flags().signature(sig).input_output_types(vec![(Type::Nothing, Type::record())]).category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["diff", "delta", "comparable", "regression", "ab", "bootstrap", "baseline"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(capture-compare fixtures/nsys-2025.3.1/gpu_full_node.sqlite fixtures/nsys-2025.3.1/gpu_full_graph.sqlite).verdict",
                description: "A node-level and a graph-level capture are not comparable (real fixtures)",
                result: Some(Value::test_string("REFUSED")),
            },
            Example {
                example: "(capture-compare --baseline [fixtures/nsys-2025.3.1/gpu_full_node.sqlite] --trial [fixtures/nsys-2025.3.1/gpu_full_node.sqlite] --bootstrap 200 --label vibeserve.engine.iteration --fail-on-regression 5).regression.reason",
                description: "A/B per stable label (ab.labels is a table); the CI gate on the step label: a capture against itself does not regress",
                result: Some(Value::test_string("vibeserve.engine.iteration host_wall: +0.00% (interval from -1.82%): not slower than 5% with confidence")),
            },
        ]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        // records (from the pipeline or as arguments) are read from temporary files that live until the end
        let (a, _ta) = match call.positional.first() {
            Some(v) => doc_arg(engine, v, "a")?,
            None => (Default::default(), None),
        };
        let (b, _tb) = match call.positional.get(1) {
            Some(v) => doc_arg(engine, v, "b")?,
            None => (Default::default(), None),
        };
        let positionals = [a, b].into_iter().filter(|p| !p.as_os_str().is_empty()).map(|p| p.into_os_string());
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            positionals.collect(),
            Stdin::None,
            None,
            tools::capture_compare::run,
        )
    }
}

/// The flags of the `capture-compare` binary (one definition: `nsyskit::flags::capture_compare`).
fn flags() -> Flags {
    Flags::new(CaptureCompareArgs::command())
}
