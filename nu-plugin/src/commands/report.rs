//! `report`: classify a capture's bottleneck → `nsyskit.report/v1`.

use clap::CommandFactory;
use nsyskit::flags::report::ReportArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_arg, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct Report;

impl SimplePluginCommand for Report {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "report"
    }

    fn description(&self) -> &str {
        "Classify a capture's bottleneck: one primary class, the evidence rows that establish it, and what remains unattributed."
    }

    fn extra_description(&self) -> &str {
        "Classes: cpu_launch_bound, python_overhead_bound, sync_bound, memcpy_bound, comm_bound, kernel_bound, \
         mixed_or_unclear (docs/compare-report.md); from the step budget of the step label when there is one. BUNDLE is an evidence bundle (bundle-merge output), a bare \
         nsyskit.ranges/v1 document or an nsys .sqlite export — a path, or a record: from the pipeline \
         (`sqlite-ranges x.sqlite | report`, `open bundle.json | report`) or as the argument. --html also \
         writes a self-contained page; --trace a Chrome/Perfetto trace of a window of steps."
    }

    fn signature(&self) -> Signature {
        let sig = Signature::build(SimplePluginCommand::name(self)).optional(
                "bundle",
                SyntaxShape::OneOf(vec![SyntaxShape::Record(Vec::new().into()), SyntaxShape::Filepath]),
                "Evidence bundle JSON, ranges JSON or nsys .sqlite export: a path or a record (default: the pipeline input)",
            );
        flags()
            .signature(sig)
            .input_output_types(vec![(Type::Nothing, Type::record()), (Type::record(), Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["bottleneck", "classify", "evidence", "html"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(report fixtures/nsys-2025.3.1/gpu_full_node.sqlite).class",
            description: "The primary class of a real capture",
            result: Some(Value::test_string(EXAMPLE_VALUE)),
        }]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let arg = call.positional.first().unwrap_or(input);
        // a record (from the pipeline or as the argument) is read from a temporary file that lives until the end
        let (path, _tmp) = doc_arg(engine, arg, "bundle")?;
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            vec![path.into_os_string()],
            Stdin::None,
            None,
            tools::report::run,
        )
    }
}

const EXAMPLE_VALUE: &str = "mixed_or_unclear";

/// The flags of the `report` binary (one definition: `nsyskit::flags::report`).
fn flags() -> Flags {
    Flags::new(ReportArgs::command())
}
