//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.

use nsyskit::iterations::window::{self, parse_iterations, IterationArgs, Windowed};
use nsyskit::step_budget::{self, StepBudgetOptions, DEFAULT_OUTLIER_FACTOR};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_value, flag_f64, flag_path, flag_str, labeled, nu_nsys_bin, resolve_path};
use crate::NsyskitPlugin;

pub struct StepBudget;

impl SimplePluginCommand for StepBudget {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "step-budget"
    }

    fn description(&self) -> &str {
        "Partition the host wall of every step (one occurrence of the step label) exactly into gpu_kernel, gpu_memcpy, sync_wait, launch_api, other_api, comm and unattributed; then distributions, outliers, pacing, groups by shape and one verdict."
    }

    fn extra_description(&self) -> &str {
        "The same function as the `step-budget` binary (docs/step-budget.md). The step label defaults to the \
         iteration label, chosen as capture-compare does. An .nsys-rep is exported with --nsys, else \
         $env.NSYS_BIN, else nsys on PATH."
    }

    fn signature(&self) -> Signature {
        Signature::build(SimplePluginCommand::name(self))
            .required("capture", SyntaxShape::Filepath, "The export written by `nsys export --type sqlite` (or an .nsys-rep)")
            .named(
                "step",
                SyntaxShape::String,
                "The step label (default: the iteration label, chosen as capture-compare does: the most frequent label containing iteration, step or decode and not prefill)",
                None,
            )
            .named("outlier-factor", SyntaxShape::Number, "A step whose wall exceeds this many times the median step wall is an outlier (default 2)", None)
            .switch("no-fold", "Keep id-bearing labels as they are (by default they are folded as sqlite-ranges does)", None)
            .named("iteration-records", SyntaxShape::Filepath, "Iteration records of the engine (JSON lines, docs/iterations.md): joined to the steps by time (clock offset measured); each joined step carries its batch geometry, groups by phase and batch size", None)
            .named("iterations", SyntaxShape::String, "Analyse only iterations START..=END: engine iteration indices with --iteration-records, else step indices (0-based, by start); a window selecting no iteration is RETRY (exit 1)", None)
            .named("nsys", SyntaxShape::Filepath, "The nsys used to export an .nsys-rep (default: $env.NSYS_BIN, else nsys on PATH)", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["step", "budget", "decode", "iteration", "outlier", "pacing"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite).outliers.14.index",
            description:
                "The last of the 15 prefill-contaminated decode steps of a real capture (every 25th step), as outliers",
            result: Some(Value::test_int(375)),
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
        let capture = resolve_path(engine, &call.req::<String>(0)?)?;
        let nsys = match flag_path(engine, call, "nsys")? {
            Some(p) => Some(p),
            None => nu_nsys_bin(engine)?,
        };
        let fold = !call.has_flag("no-fold").map_err(|e| {
            labeled(
                nsyskit::contract::Error::usage(e.to_string()).with_arg("--no-fold"),
                call,
                &sig,
                Some(input.span()),
            )
        })?;
        let opts = StepBudgetOptions {
            step: flag_str(call, "step")?.map(|s| s.item),
            outlier_factor: flag_f64(call, "outlier-factor")?.unwrap_or(DEFAULT_OUTLIER_FACTOR),
            fold,
        };
        let it = IterationArgs {
            records: flag_path(engine, call, "iteration-records")?,
            iterations: flag_str(call, "iterations")?
                .map(|w| parse_iterations(&w.item))
                .transpose()
                .map_err(|e| labeled(e, call, &sig, Some(input.span())))?,
            ..Default::default()
        };
        if it.any() {
            return match window::step_budget_run(&capture, &opts, nsys.as_deref(), &it)
                .map_err(|e| labeled(e, call, &sig, Some(input.span())))?
            {
                Windowed::Doc(doc) => doc_value(&doc, call.head),
                Windowed::Retry(doc) => doc_value(&*doc, call.head),
            };
        }
        let doc = step_budget::run(&capture, &opts, nsys.as_deref())
            .map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}
