//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.

use clap::CommandFactory;
use nsyskit::flags::sqlite_ranges::SqliteRangesArgs;
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, resolve_path, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;
use nsyskit::tools::{self, Stdin};

pub struct SqliteRanges;

impl SimplePluginCommand for SqliteRanges {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "sqlite-ranges"
    }

    fn description(&self) -> &str {
        "Attribute CUDA runtime calls and device work to the NVTX ranges of an nsys SQLite export, per label."
    }

    fn extra_description(&self) -> &str {
        "The metric contract is docs/sqlite-ranges-spec.md: per label wall time, device coverage, busy union, idle \
         in span, syncs, nesting; per thread the mapping diagnostics; totals. Every `_ns` integer is a duration of \
         exactly those nanoseconds under the same key (`sort-by kernel_busy_union_ns` sorts exactly). An .nsys-rep is \
         exported into a temporary folder with --nsys, else $env.NSYS_BIN, else nsys on PATH. The table output \
         of the binary (--format table) is Nushell's own table here."
    }

    fn signature(&self) -> Signature {
        let f = flags();
        f.signature(f.required(Signature::build(SimplePluginCommand::name(self)), "export"))
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nvtx", "nsys", "kernel", "attribution", "busy", "idle"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve.engine.iteration).ranges.0.occurrences",
                description: "How many engine iterations a capture holds (real fixture)",
                result: Some(Value::test_int(204)),
            },
            Example {
                example: "(sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve.engine.iteration).ranges.0.kernel_busy_union_ns",
                description: "Their GPU busy union: `kernel_busy_union_ns` is a duration of exactly those nanoseconds (`into int` gives the integer)",
                result: Some(Value::test_duration(22_263_904)),
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
        let export = resolve_path(engine, &call.req::<String>(0)?)?;
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            vec![export.into_os_string()],
            Stdin::None,
            None,
            tools::sqlite_ranges::run,
        )
    }
}

/// The flags of the `sqlite-ranges` binary (one definition: `nsyskit::flags::sqlite_ranges`).
fn flags() -> Flags {
    Flags::new(SqliteRangesArgs::command()).skip(&["format"]).shapes(&[("export", crate::flags::path)])
}
