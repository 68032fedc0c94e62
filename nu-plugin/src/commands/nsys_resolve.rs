//! `nsys-resolve`: find, verify and probe nsys; preflight the machine; the provenance record.

use clap::CommandFactory;
use nsyskit::flags::nsys_resolve::NsysResolveArgs;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct NsysResolve;

impl SimplePluginCommand for NsysResolve {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "nsys-resolve"
    }

    fn description(&self) -> &str {
        "Find, verify and probe the nsys profiler, check the machine before a capture, and record provenance."
    }

    fn extra_description(&self) -> &str {
        "Search order: --nsys, $env.NSYS_BIN, every `nsys` on $env.PATH, then the known install folders, newest \
         version first (Nushell's environment is used, not the plugin process's). A failed check is data \
         (`verdict: RETRY` with the check's reason); no usable nsys is an error listing every candidate. \
         `--env NAME` takes NAME's value from Nushell's environment; secrets are redacted."
    }

    fn signature(&self) -> Signature {
        flags()
            .signature(Signature::build(SimplePluginCommand::name(self)))
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "profiler", "provenance", "preflight", "nvidia-smi", "capabilities"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(nsys-resolve --nsys ~/.cache/nsyskit/nsys-2023.4/usr/bin/nsys).nsys.capabilities.attach_pid",
                description: "nsys 2023.4 (installed by scripts/get-nsys) has no --attach-pid: a recipe needing it is refused",
                result: Some(Value::test_bool(false)),
            },
            Example {
                example: "(nsys-resolve --nsys ~/.cache/nsyskit/nsys-2023.4/usr/bin/nsys --flags '--trace=cuda,nvtx --attach-pid=1').verdict",
                description: "A capture flag string this nsys cannot run fails the `flags` check: RETRY, as a value",
                result: Some(Value::test_string("RETRY")),
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
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            Vec::new(),
            Stdin::None,
            None,
            tools::nsys_resolve::run,
        )
    }
}

/// The flags of the `nsys-resolve` binary (one definition: `nsyskit::flags::nsys_resolve`).
fn flags() -> Flags {
    Flags::new(NsysResolveArgs::command())
}
