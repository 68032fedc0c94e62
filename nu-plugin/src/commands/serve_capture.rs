//! `serve-capture`: profile a server under nsys (readiness, warmup, bounded load across the window, clean stop)
//! → `nsyskit.serve-capture/v1`. A failed stage or a RETRY gate is data; Ctrl-C in Nushell stops the run through
//! the library's [`StopFlag`] (no process-wide signal handler in the plugin).

use clap::CommandFactory;
use nsyskit::flags::serve_capture::ServeCaptureArgs;
use nsyskit::serve_capture::StopFlag;
use nsyskit::tools::{self, Stdin};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, SignalAction, Signature, SyntaxShape, Type, Value};

use crate::call::{category, run_tool};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct ServeCapture;

impl SimplePluginCommand for ServeCapture {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "serve-capture"
    }

    fn description(&self) -> &str {
        "Profile a server you control under nsys: readiness, warmup, bounded load across the capture window, clean stop."
    }

    fn extra_description(&self) -> &str {
        "The server command is the rest arguments (quote a word that starts with `-`: `'--port' 8000`); a client \
         command is one string (split with shell-word rules, no shell) or a list (the argv as is). The run folder \
         --out holds the report, its export, logs, pids/, provenance.json and serve-capture.json; see \
         docs/serve-capture.md. A failed stage (`outcome: failed`) or a RETRY gate is a value, never an error; \
         only bad usage (nothing started) is an error. Ctrl-C stops the run like SIGINT stops the binary: the \
         recorded processes are cleaned up and the record says `outcome: interrupted`, `cleanup.stop_signal: 2`. \
         nsys: --nsys, else $env.NSYS_BIN, else nsys on the PATH the plugin started with. The server and clients \
         run in Nushell's current folder with the plugin's environment plus --env (set on the nsys process)."
    }

    fn signature(&self) -> Signature {
        flags()
            .signature(Signature::build(SimplePluginCommand::name(self)).rest(
                "server",
                SyntaxShape::String,
                "The server command and its arguments",
            ))
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "profile", "server", "capture", "vllm", "sglang", "load"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "serve-capture --nsys ~/.cache/nsyskit/nsys-2023.4/usr/bin/nsys --trace osrt --ready-timeout 1 --grace 1 \
                      --health http://127.0.0.1:9/health --load 'true' --out target/nsyskit-examples/serve-capture sleep 30 \
                      | {outcome: $in.outcome, stage: $in.failures.0.stage, all_gone: $in.cleanup.all_gone}",
            description: "A server that never answers its health URL: the ready stage fails (a value, not an error) and \
                          the recorded processes are stopped (real run; needs nsys 2023.4 and a fresh --out)",
            result: Some(Value::test_record(nu_protocol::record! {
                "outcome" => Value::test_string("failed"),
                "stage" => Value::test_string("ready"),
                "all_gone" => Value::test_bool(true),
            })),
        }]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let server: Vec<String> = call.rest(0)?;
        if server.is_empty() {
            return Err(LabeledError::new("serve-capture: the server command (rest arguments) is missing")
                .with_code("nsyskit::usage")
                .with_label("bad argument", call.head));
        }
        // Ctrl-C reaches a plugin through the protocol, not as SIGINT: it sets the run's stop flag, and the run
        // cleans up exactly as the binary does on SIGINT.
        let stop = StopFlag::new();
        let on_signal = stop.clone();
        let _guard = engine.register_signal_handler(Box::new(move |action| {
            if matches!(action, SignalAction::Interrupt) {
                on_signal.interrupt();
            }
        }))?;
        if engine.signals().interrupted() {
            stop.interrupt();
        }
        let server = server.into_iter().map(Into::into).collect();
        run_tool(
            engine,
            call,
            input,
            &self.signature(),
            &flags(),
            server,
            Stdin::None,
            Some(stop),
            tools::serve_capture::run,
        )
    }
}

/// The flags of the `serve-capture` binary (one definition: `nsyskit::flags::serve_capture`); a client
/// command may also be a list of words.
fn flags() -> Flags {
    use crate::flags::{command_words, path};
    Flags::new(ServeCaptureArgs::command()).shapes(&[
        ("load", command_words),
        ("warmup", command_words),
        ("out", path),
        ("engine-repo", path),
    ])
}
