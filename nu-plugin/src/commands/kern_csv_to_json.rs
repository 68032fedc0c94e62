//! `kern-csv-to-json`: `nsys stats --format csv` output → the typed `nsyskit.stats/v1` document.

use clap::CommandFactory;
use nsyskit::flags::kern_csv_to_json::KernCsvToJsonArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, resolve_path, run_tool};

/// How messages name the pipeline's CSV text.
const PIPELINE: &str = "pipeline input";
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct KernCsvToJson;

impl SimplePluginCommand for KernCsvToJson {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "kern-csv-to-json"
    }

    fn description(&self) -> &str {
        "Convert one `nsys stats --format csv` report into a typed record (the kern-csv-to-json document)."
    }

    fn extra_description(&self) -> &str {
        "Times become integer nanoseconds whatever the CSV's time unit (each `_ns` integer a duration of \
         exactly those nanoseconds), percentages floats, counts integers, names byte-exact. Kernel reports (cuda_gpu_kern_sum, old \
         name gpukernsum) add `totals` and `top_kernels`. The CSV comes from the path argument or from the \
         pipeline (`open stats.csv --raw | kern-csv-to-json`). A report nsys SKIPPED is data: `status` is \
         `skipped` with `skipped_reason` (the binary exits 1)."
    }

    fn signature(&self) -> Signature {
        let sig = Signature::build(SimplePluginCommand::name(self)).optional(
            "input",
            SyntaxShape::Filepath,
            "The CSV file written by `nsys stats --format csv` (default: the pipeline input)",
        );
        flags()
            .signature(sig)
            .input_output_types(vec![
                (Type::Nothing, Type::record()),
                (Type::String, Type::record()),
                (Type::Binary, Type::record()),
            ])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "stats", "csv", "kernel", "cuda_gpu_kern_sum"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(kern-csv-to-json fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv --top 3).totals.kernels",
                description: "How many distinct kernels a capture ran (real fixture)",
                result: Some(Value::test_int(28)),
            },
            Example {
                example: "(kern-csv-to-json fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv --top 1).top_kernels.0.total_time_ns",
                description: "The top kernel's total time: `total_time_ns`, a duration of exactly those nanoseconds",
                result: Some(Value::test_duration(EXAMPLE_TOP_KERNEL_NS)),
            },
            Example {
                example: r#"("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n100.0,6009202,1831,3281.9,2816.0,2624,5152,858.1,nvjet\n" | kern-csv-to-json --captured-at 2026-11-29T22:43:05Z).captured_at_from"#,
                description: "CSV text from the pipeline (as `open stats.csv --raw` gives it), with the capture's time given as a date",
                result: Some(Value::test_string("--captured-at")),
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
        // the input is the path argument, else the pipeline's CSV text (what `-` reads)
        let path: Option<String> = call.opt(0)?;
        let (positionals, stdin) = match (path, input) {
            (Some(p), _) => (vec![resolve_path(engine, &p)?.into_os_string()], Stdin::None),
            (None, Value::String { val, .. }) => (Vec::new(), Stdin::Bytes(val.as_bytes().to_vec(), PIPELINE.into())),
            (None, Value::Binary { val, .. }) => (Vec::new(), Stdin::Bytes(val.to_vec(), PIPELINE.into())),
            (None, other) => {
                return Err(LabeledError::new(format!(
                    "kern-csv-to-json needs a CSV file argument or CSV text from the pipeline, got {}",
                    other.get_type()
                ))
                .with_code("nsyskit::usage")
                .with_label(
                    "no CSV here",
                    if matches!(other, Value::Nothing { .. }) { call.head } else { other.span() },
                ))
            }
        };
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            positionals,
            stdin,
            None,
            tools::kern_csv_to_json::run,
        )
    }
}

/// `Total Time (ns)` of the first row of fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv.
const EXAMPLE_TOP_KERNEL_NS: i64 = 6_009_202;

/// The flags of the `kern-csv-to-json` binary (one definition: `nsyskit::flags::kern_csv_to_json`).
fn flags() -> Flags {
    Flags::new(KernCsvToJsonArgs::command())
}
