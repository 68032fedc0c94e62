//! `gate-check`: PASS/RETRY capture gates → `nsyskit.gate/v1`. A RETRY verdict is data, not an error.

use clap::CommandFactory;
use nsyskit::flags::gate_check::GateCheckArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, flag_str, resolve_path, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct GateCheck;

impl SimplePluginCommand for GateCheck {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "gate-check"
    }

    fn description(&self) -> &str {
        "Decide whether an nsys capture can be analysed: PASS, or RETRY with the gate, the number it measured and the threshold."
    }

    fn extra_description(&self) -> &str {
        "Gates G0 profiler health, G1 node-level graph tracing, G2 report size, G3 kernel rows, G4 CUDA data covers \
         the window, G5 traffic (throughput tier), G6 decode regularity and G7 prefill contamination (decode tier); \
         see docs/gate-check.md. A RETRY is a value (`verdict: RETRY`, the gates' `verdict: retry`), never an \
         error: `gate-check x.sqlite | get gates | where verdict == retry`. Only unusable input is an error. \
         An .nsys-rep is exported with $env.NSYS_BIN, else nsys on PATH."
    }

    fn signature(&self) -> Signature {
        let f = flags();
        f.signature(f.required(Signature::build(SimplePluginCommand::name(self)), "capture"))
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "capture", "verdict", "retry", "pass", "health"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite).verdict",
                description: "A node-level capture with kernels all along: PASS (real fixture)",
                result: Some(Value::test_string("PASS")),
            },
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_graph.sqlite).retry",
                description: "A graph-level capture: RETRY at G1 — a value, not an error",
                result: Some(Value::test_list(vec![Value::test_string("G1")])),
            },
            Example {
                example: "(gate-check fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite --log fixtures/logs/nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt).retry",
                description: "The silently truncated capture, with its console log: G0 sees the analyser failure, G4 where CUDA data stops",
                result: Some(Value::test_list(EXAMPLE_FAILED_RETRY.iter().map(|g| Value::test_string(*g)).collect())),
            },
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --readiness --range-prefix vibeserve).gates.8.id",
                description: "--readiness appends G8, the NVTX readiness of the vibeserve taxonomy",
                result: Some(Value::test_string("G8")),
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
        if !call.has_flag("readiness")? {
            if let Some(p) = flag_str(call, "range-prefix")? {
                return Err(LabeledError::new("--range-prefix needs --readiness (it selects G8's taxonomy)")
                    .with_code("nsyskit::usage")
                    .with_label("only with --readiness", p.span));
            }
        }
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
            tools::gate_check::run,
        )
    }
}

/// The flags of the `gate-check` binary (one definition: `nsyskit::flags::gate_check`).
fn flags() -> Flags {
    Flags::new(GateCheckArgs::command())
}

const EXAMPLE_FAILED_RETRY: &[&str] = &["G0", "G4"];
