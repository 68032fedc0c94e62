//! `serve-capture`: profile a server under nsys (readiness, warmup, bounded load across the window, clean stop)
//! → `nsyskit.serve-capture/v1`. A failed stage or a RETRY gate is data; Ctrl-C in Nushell stops the run through
//! the library's [`StopFlag`] (no process-wide signal handler in the plugin).

use clap::CommandFactory;
use nsyskit::contract::Error;
use nsyskit::flags::serve_capture::ServeCaptureArgs;
use nsyskit::gate::Tier;
use nsyskit::serve_capture::{self, ServeCaptureOptions, StopFlag, StopSource};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, SignalAction, Signature, Span, SyntaxShape, Type, Value};

use crate::call::{
    category, doc_value, flag_bytes, flag_duration, flag_list, flag_path, flag_str, labeled, nu_nsys_bin,
};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct ServeCapture;

/// A client command: one string (split with shell-word rules, as the binary does) or a list (the argv as is).
fn command_flag(call: &EvaluatedCall, name: &str) -> Result<Option<Vec<String>>, LabeledError> {
    let flag = format!("--{name}");
    match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => Ok(None),
        Some(Value::List { vals, .. }) => {
            let argv = vals.into_iter().map(|v| v.coerce_into_string()).collect::<Result<Vec<_>, _>>()?;
            Ok(Some(argv))
        }
        Some(v) => {
            let span = v.span();
            let s = v.coerce_into_string()?;
            serve_capture::split_command(&s, &flag).map(Some).map_err(|e| crate::call::labeled_at(e, span))
        }
    }
    .and_then(|argv| match argv {
        Some(a) if a.is_empty() => Err(LabeledError::new(format!("{flag}: an empty command"))
            .with_code("nsyskit::usage")
            .with_label("give the client's command", call.head)),
        other => Ok(other),
    })
}

fn flag_secs_f64(call: &EvaluatedCall, name: &str) -> Result<Option<f64>, LabeledError> {
    Ok(flag_duration(call, name)?.map(|d| d.as_secs_f64()))
}

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
        let sig = self.signature();
        let usage = |msg: String, span: Span| {
            LabeledError::new(msg).with_code("nsyskit::usage").with_label("bad argument", span)
        };
        let server: Vec<String> = call.rest(0)?;
        if server.is_empty() {
            return Err(usage("serve-capture: the server command (rest arguments) is missing".into(), call.head));
        }
        let health = flag_str(call, "health")?.map(|s| s.item).unwrap_or_default();
        let load = command_flag(call, "load")?.unwrap_or_default();
        let out = flag_path(engine, call, "out")?.unwrap_or_default();
        let cwd = std::path::PathBuf::from(engine.get_current_dir()?);
        let mut o = ServeCaptureOptions::new(server, health, load, out);
        o.cwd = Some(cwd);
        o.nsys = match flag_path(engine, call, "nsys")? {
            Some(p) => Some(p),
            None => nu_nsys_bin(engine)?,
        };
        if let Some(t) = flag_str(call, "trace")? {
            o.trace = t.item;
        }
        if let Some(f) = flag_str(call, "flags")? {
            o.flags =
                serve_capture::split_command(&f.item, "--flags").map_err(|e| crate::call::labeled_at(e, f.span))?;
        }
        o.delay_s = flag_secs_f64(call, "delay")?;
        o.duration_s = flag_secs_f64(call, "duration")?;
        o.capture_range = flag_str(call, "capture-range")?.map(|s| s.item);
        o.capture_range_end = flag_str(call, "capture-range-end")?.map(|s| s.item);
        o.cuda_child = call.has_flag("cuda-child")?;
        o.env = flag_list(call, "env")?
            .iter()
            .map(|e| serve_capture::parse_env(e).map_err(|e| labeled(e.with_arg("--env"), call, &sig, None)))
            .collect::<Result<_, _>>()?;
        o.models = flag_str(call, "models")?.map(|s| s.item);
        o.warmup = command_flag(call, "warmup")?;
        for (name, field) in [
            ("ready-timeout", &mut o.ready_timeout),
            ("client-timeout", &mut o.client_timeout),
            ("finalize-timeout", &mut o.finalize_timeout),
            ("grace", &mut o.grace),
        ] {
            if let Some(d) = flag_duration(call, name)? {
                *field = d;
            }
        }
        if let Some(t) = flag_str(call, "tier")? {
            o.tier = Tier::parse(&t.item).map_err(|e: Error| crate::call::labeled_at(e.with_arg("--tier"), t.span))?;
        }
        o.decode_range = flag_str(call, "decode-range")?.map(|s| s.item);
        o.min_rep_bytes = flag_bytes(call, "min-rep-bytes")?;
        let index = |name: &str| -> Result<Option<u32>, LabeledError> {
            match call.get_flag::<i64>(name)? {
                None => Ok(None),
                Some(g) => u32::try_from(g).map(Some).map_err(|_| {
                    LabeledError::new(format!("--{name} {g}: expected a non-negative integer"))
                        .with_code("nsyskit::usage")
                        .with_label("bad argument", call.get_flag_span(name).unwrap_or(call.head))
                }),
            }
        };
        o.gpu = index("gpu")?;
        if let Some(t) = index("gpu-mem-tolerance")? {
            o.gpu_mem_tolerance_mib = t as u64;
        }
        o.nvidia_smi = flag_path(engine, call, "nvidia-smi")?;
        o.engine_repo = flag_path(engine, call, "engine-repo")?;
        o.instrumentation = flag_list(call, "instrumentation")?;
        o.shm = flag_str(call, "shm")?.map(|s| s.item);
        o.require_argv = flag_list(call, "require-argv")?;
        o.engine = flag_str(call, "engine")?.map(|s| s.item);
        o.modules = flag_list(call, "module")?
            .iter()
            .map(|m| serve_capture::engine::parse_module(m).map_err(|e| labeled(e, call, &sig, None)))
            .collect::<Result<_, _>>()?;
        o.strict_prebuilt = call.has_flag("strict-prebuilt")?;
        o.iteration_records = flag_path(engine, call, "iteration-records")?;

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
        o.stop = StopSource::Flag(stop);
        let doc = serve_capture::run(&o).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
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
