//! `nsys-resolve`: find, verify and probe nsys; preflight the machine; the provenance record.

use std::ffi::OsString;
use std::time::Duration;

use clap::CommandFactory;
use nsyskit::flags::nsys_resolve::NsysResolveArgs;
use nsyskit::resolve::{self, ProvenanceOptions, ResolveOptions, KNOWN_INSTALL_GLOBS};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, ShellError, Signature, Type, Value};

use crate::call::{category, doc_value, labeled, nu_env, nu_env_raw};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct NsysResolve;

/// `$env.PATH` of Nushell (a list there, a string in the plugin's own environment), joined the OS way.
fn nu_path_var(engine: &EngineInterface) -> Result<Option<OsString>, ShellError> {
    Ok(match engine.get_env_var("PATH")? {
        None => None,
        Some(Value::List { vals, .. }) => {
            let dirs = vals.into_iter().map(|v| v.coerce_into_string()).collect::<Result<Vec<_>, _>>()?;
            std::env::join_paths(dirs).ok()
        }
        Some(v) => Some(OsString::from(v.coerce_into_string()?)),
    })
}

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
        let sig = self.signature();
        let args: NsysResolveArgs = flags().parse(engine, call, Vec::new())?;
        let timeout = Duration::from_millis(args.timeout_ms.max(1));
        // `--env NAME` reads NAME from Nushell's environment (the plugin process's is not the user's)
        let mut env = Vec::new();
        for e in args.env.iter().cloned() {
            if e.contains('=') {
                env.push(e);
            } else {
                match nu_env(engine, &e)? {
                    Some(v) => env.push(format!("{e}={v}")),
                    None => env.push(e),
                }
            }
        }
        let opts = ProvenanceOptions {
            resolve: ResolveOptions {
                nsys: args.nsys.clone(),
                nsys_bin: nu_env(engine, "NSYS_BIN")?.map(OsString::from),
                path_var: nu_path_var(engine)?,
                install_globs: match nu_env_raw(engine, "NSYSKIT_NSYS_DIRS")? {
                    Some(v) => v.split(':').filter(|s| !s.is_empty()).map(String::from).collect(),
                    None => KNOWN_INSTALL_GLOBS.iter().map(|s| s.to_string()).collect(),
                },
                timeout,
                probe: !args.no_probe,
            },
            preflight: args.preflight,
            require_gpu: args.require_gpu,
            gpu: args.gpu,
            cuda_visible_devices: nu_env_raw(engine, "CUDA_VISIBLE_DEVICES")?,
            nvidia_smi: args.nvidia_smi.clone(),
            port: args.port,
            shm: args.shm.clone(),
            record: args.record.clone(),
            flags: args.flags.clone(),
            server_cmd: args.server_cmd.clone(),
            client_cmd: args.client_cmd.clone(),
            env,
            instrumentation: args.instrumentation.clone(),
            repo: args.repo.clone(),
            artifacts: args.artifact.clone(),
            // the engine starts from Nushell's environment, not the plugin process's
            cuda_injection: nu_env_raw(engine, "CUDA_INJECTION64_PATH")?.filter(|v| !v.is_empty()),
            ..ProvenanceOptions::default()
        };
        let doc = resolve::run(&opts).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}

/// The flags of the `nsys-resolve` binary (one definition: `nsyskit::flags::nsys_resolve`).
fn flags() -> Flags {
    Flags::new(NsysResolveArgs::command())
}
