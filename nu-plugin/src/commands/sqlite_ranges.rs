//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.

use nsyskit::iterations::window::{self, parse_iterations, IterationArgs, Windowed};
use nsyskit::ranges::{self, RangesOptions};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_value, flag_path, flag_str, labeled, nu_nsys_bin, resolve_path};
use crate::NsyskitPlugin;

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
         in span, syncs, nesting; per thread the mapping diagnostics; totals. Every `_ns` integer keeps its exact \
         value and gains a duration next to it (`kernel_busy_union_ns` + `kernel_busy_union`). An .nsys-rep is \
         exported into a temporary folder with --nsys, else $env.NSYS_BIN, else nsys on PATH. The table output \
         of the binary (--format table) is Nushell's own table here."
    }

    fn signature(&self) -> Signature {
        Signature::build(SimplePluginCommand::name(self))
            .required("export", SyntaxShape::Filepath, "The export written by `nsys export --type sqlite` (or an .nsys-rep)")
            .named(
                "range-prefix",
                SyntaxShape::String,
                "Keep only labels starting with this case-sensitive prefix (a domain's labels start with `DOMAIN:`)",
                None,
            )
            .named(
                "window",
                SyntaxShape::String,
                "Keep only occurrences lying inside START:END (ns, the export's clock): START <= start and end <= END",
                None,
            )
            .switch(
                "no-fold",
                "Keep id-bearing labels as they are (`aten::mm, op_id = 41599`, `vibeserve.request.3`); by default they are folded into stable ones (`aten::mm`, `vibeserve.request.<n>`) and the `folded` section says how",
                None,
            )
            .named("iteration-records", SyntaxShape::Filepath, "Iteration records of the engine (JSON lines, docs/iterations.md): joined to the step occurrences by time (clock offset measured); the `iterations` section lists each step occurrence with its iteration", None)
            .named("iterations", SyntaxShape::String, "Analyse only iterations START..=END: engine iteration indices with --iteration-records, else occurrence indices (0-based, by start) of the step label; a window selecting no iteration is RETRY (exit 1)", None)
            .named("step", SyntaxShape::String, "The step label for --iteration-records/--iterations (default: the iteration label, chosen as step-budget does)", None)
            .named("nsys", SyntaxShape::Filepath, "The nsys used to export an .nsys-rep (default: $env.NSYS_BIN, else nsys on PATH)", None)
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
                example: "(sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve.engine.iteration).ranges.0.kernel_busy_union",
                description: "Their GPU busy union as a duration (the exact integer is `kernel_busy_union_ns`)",
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
        let sig = self.signature();
        let export = resolve_path(engine, &call.req::<String>(0)?)?;
        let nsys = match flag_path(engine, call, "nsys")? {
            Some(p) => Some(p),
            None => nu_nsys_bin(engine)?,
        };
        let result = (|| {
            let window = flag_str(call, "window")
                .map_err(|e| nsyskit::contract::Error::usage(e.to_string()).with_arg("--window"))?
                .map(|w| ranges::parse_window(&w.item))
                .transpose()?;
            let fold = !call
                .has_flag("no-fold")
                .map_err(|e| nsyskit::contract::Error::usage(e.to_string()).with_arg("--no-fold"))?;
            let opts = RangesOptions {
                range_prefix: flag_str(call, "range-prefix").ok().flatten().map(|s| s.item),
                window,
                fold,
            };
            let it = IterationArgs {
                records: flag_path(engine, call, "iteration-records")
                    .map_err(|e| nsyskit::contract::Error::usage(e.to_string()).with_arg("--iteration-records"))?,
                iterations: flag_str(call, "iterations")
                    .map_err(|e| nsyskit::contract::Error::usage(e.to_string()).with_arg("--iterations"))?
                    .map(|w| parse_iterations(&w.item))
                    .transpose()?,
                step: flag_str(call, "step").ok().flatten().map(|s| s.item),
                fold,
            };
            if it.step.is_some() && !it.any() {
                return Err(nsyskit::contract::Error::usage(
                    "--step is for --iteration-records or --iterations (sqlite-ranges reports every label)",
                )
                .with_arg("--step"));
            }
            if it.any() {
                return window::ranges_run(&export, &opts, nsys.as_deref(), &it);
            }
            ranges::run(&export, &opts, nsys.as_deref()).map(Windowed::Doc)
        })();
        match result.map_err(|e| labeled(e, call, &sig, Some(input.span())))? {
            Windowed::Doc(doc) => doc_value(&doc, call.head),
            Windowed::Retry(doc) => doc_value(&*doc, call.head),
        }
    }
}
