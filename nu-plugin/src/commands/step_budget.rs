//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.

use clap::CommandFactory;
use nsyskit::flags::step_budget::StepBudgetArgs;
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, resolve_path, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;
use nsyskit::tools::{self, Stdin};

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
         $env.NSYS_BIN, else nsys on PATH. The record is a summary whose size does not grow with the steps: \
         `step_count`, distributions, totals, verdict; `outliers`, `warmup` and `stragglers` list at most 100 \
         (the largest first chosen, in step order) beside `outlier_count`, `warmup_count` and `straggler_count`, \
         `groups` at most 64 beside `group_count`. --steps returns the per-step rows instead: a table, one row \
         per step in index order (the binary's NDJSON), each with `outlier` and `warmup`; with --iterations, \
         the window's steps."
    }

    fn signature(&self) -> Signature {
        let f = flags();
        f.signature(f.required(Signature::build(SimplePluginCommand::name(self)), "export"))
            .input_output_types(vec![(Type::Nothing, Type::record()), (Type::Nothing, Type::table())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["step", "budget", "decode", "iteration", "outlier", "pacing"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite).outliers.21.index",
                description: "The last of a real capture's 22 outliers (15 prefill-contaminated decode steps, every 25th, and 7 slow ones)",
                result: Some(Value::test_int(375)),
            },
            Example {
                example: "(step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite --steps).25.outlier",
                description: "The per-step rows as a table (one row per step): step 25 encloses a prefill and is an outlier",
                result: Some(Value::test_bool(true)),
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
        let capture = resolve_path(engine, &call.req::<String>(0)?)?;
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            vec![capture.into_os_string()],
            Stdin::None,
            None,
            tools::step_budget::run,
        )
    }
}

/// The flags of the `step-budget` binary (one definition: `nsyskit::flags::step_budget`).
fn flags() -> Flags {
    Flags::new(StepBudgetArgs::command()).shapes(&[("export", crate::flags::path)])
}
