//! `report`: classify a capture's bottleneck → `nsyskit.report/v1`.

use nsyskit::iterations::window::{self, parse_iterations, IterationArgs, Windowed};
use nsyskit::report::{self, ReportOptions};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_arg, doc_value, flag_path, flag_str, flag_usize, labeled, labeled_at};
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
        Signature::build(SimplePluginCommand::name(self))
            .optional(
                "bundle",
                SyntaxShape::OneOf(vec![SyntaxShape::Record(Vec::new().into()), SyntaxShape::Filepath]),
                "Evidence bundle JSON, ranges JSON or nsys .sqlite export: a path or a record (default: the pipeline input)",
            )
            .named("html", SyntaxShape::Filepath, "Write a self-contained HTML page with the bars, top kernels and categories", None)
            .named("label", SyntaxShape::String, "Classify this range label instead of the automatic primary range", None)
            .named("provenance", SyntaxShape::Filepath, "A provenance document (nsyskit.provenance/v1) to report (and use with an export)", None)
            .named("categories", SyntaxShape::Filepath, "Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)", None)
            .named("iteration-records", SyntaxShape::Filepath, "Iteration records of the engine (JSON lines, docs/iterations.md) for --iterations (default with a bundle: its iterations.source)", None)
            .named("iterations", SyntaxShape::String, "Classify only iterations START..=END: engine iteration indices with records, else occurrence indices of the step label (--label, else the iteration label); a window selecting no iteration is RETRY (exit 1)", None)
            .named("top", SyntaxShape::Int, "List at most N top kernels (0 = all; default 20)", None)
            .named("trace", SyntaxShape::Filepath, "Write a Chrome/Perfetto trace-event file of a window of steps (an nsys export only; opens in ui.perfetto.dev)", None)
            .named("window", SyntaxShape::String, "The steps of --trace: START:END in step indexes, END excluded (default: 5 steps around the median step)", None)
            .named("trace-max-events", SyntaxShape::Int, "At most N events in the --trace file (later events are dropped and the file says so; default 200000)", None)
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
        let sig = self.signature();
        let arg = call.positional.first().unwrap_or(input);
        let (path, _tmp) = doc_arg(engine, arg, "bundle")?;
        let opts = ReportOptions {
            input: path,
            provenance: flag_path(engine, call, "provenance")?,
            categories: flag_path(engine, call, "categories")?,
            label: flag_str(call, "label")?.map(|s| s.item),
            html: flag_path(engine, call, "html")?,
            top: flag_usize(call, "top")?.unwrap_or(20),
            trace: flag_path(engine, call, "trace")?,
            window: match flag_str(call, "window")? {
                Some(w) => Some(report::trace::parse_window(&w.item).map_err(|e| labeled_at(e, w.span))?),
                None => None,
            },
            trace_max_events: Some(flag_usize(call, "trace-max-events")?.unwrap_or(report::trace::DEFAULT_MAX_EVENTS)),
        };
        let it = IterationArgs {
            records: flag_path(engine, call, "iteration-records")?,
            iterations: flag_str(call, "iterations")?
                .map(|w| parse_iterations(&w.item))
                .transpose()
                .map_err(|e| labeled(e, call, &sig, Some(input.span())))?,
            ..Default::default()
        };
        if it.iterations.is_none() && it.records.is_some() {
            let e = nsyskit::contract::Error::usage("--iteration-records is for --iterations START:END")
                .with_arg("--iteration-records");
            return Err(labeled(e, call, &sig, Some(input.span())));
        }
        if it.any() {
            return match window::report_run(&opts, &it).map_err(|e| labeled(e, call, &sig, Some(input.span())))? {
                Windowed::Doc(doc) => doc_value(&doc, call.head),
                Windowed::Retry(doc) => doc_value(&*doc, call.head),
            };
        }
        let doc = report::run(&opts).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}

const EXAMPLE_VALUE: &str = "mixed_or_unclear";
