//! `nvtx-readiness`: can this trace name where the time went? → `nsyskit.readiness/v1`. RETRY is data.

use clap::CommandFactory;
use nsyskit::flags::nvtx_readiness::NvtxReadinessArgs;
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, resolve_path, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;
use nsyskit::tools::{self, Stdin};

pub struct NvtxReadiness;

impl SimplePluginCommand for NvtxReadiness {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "nvtx-readiness"
    }

    fn description(&self) -> &str {
        "Check that a capture's NVTX ranges can attribute engine time to named phases: READY, or RETRY with what is missing."
    }

    fn extra_description(&self) -> &str {
        "The serving range taxonomy under a prefix P (P.engine.iteration, …): present/missing labels, the opaque \
         share of P.engine.iteration and its largest gaps, naming problems, blocking syncs outside any range \
         (docs/nvtx-readiness.md). A RETRY is a value (`verdict: RETRY`), never an error. An .nsys-rep is \
         exported with --nsys, else $env.NSYS_BIN, else nsys on PATH."
    }

    fn signature(&self) -> Signature {
        let f = flags();
        f.signature(f.required(Signature::build(SimplePluginCommand::name(self)), "capture"))
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nvtx", "taxonomy", "instrumentation", "opaque", "ready"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(nvtx-readiness fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve).verdict",
            description: "Whether the vibeserve taxonomy attributes the engine's time (real fixture)",
            result: Some(Value::test_string(EXAMPLE_VERDICT)),
        }]
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
            tools::nvtx_readiness::run,
        )
    }
}

const EXAMPLE_VERDICT: &str = "READY";

/// The flags of the `nvtx-readiness` binary (one definition: `nsyskit::flags::nvtx_readiness`).
fn flags() -> Flags {
    Flags::new(NvtxReadinessArgs::command()).shapes(&[("capture", crate::flags::path)])
}
