//! `nsys-resolve`: find, verify and probe nsys; preflight the machine; the provenance record.

use std::ffi::OsString;
use std::time::Duration;

use nsyskit::resolve::{self, ProvenanceOptions, ResolveOptions, KNOWN_INSTALL_GLOBS};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, ShellError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_value, flag_list, flag_path, flag_str, labeled, nu_env, nu_env_raw, resolve_path};
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
        Signature::build(SimplePluginCommand::name(self))
            .named("nsys", SyntaxShape::Filepath, "Use exactly this nsys (no fallback when it is unusable)", None)
            .named("timeout-ms", SyntaxShape::Int, "Limit for each `nsys --version`/`--help` and nvidia-smi run, in milliseconds (default 10000)", None)
            .switch("no-probe", "Skip probing `nsys profile --help` / `nsys export --help` (capabilities then all false)", None)
            .switch("preflight", "Check the machine: GPUs and foreign compute processes on the target GPU (nvidia-smi), plus --port/--shm", None)
            .named("gpu", SyntaxShape::Int, "Target GPU index (default: $env.CUDA_VISIBLE_DEVICES, else every GPU)", None)
            .switch("require-gpu", "A missing or failing nvidia-smi fails the preflight (otherwise `gpu: unavailable`, check skipped)", None)
            .named("nvidia-smi", SyntaxShape::Filepath, "The nvidia-smi to run (default: nvidia-smi on PATH)", None)
            .named("port", SyntaxShape::Int, "Check that this TCP port is free; who holds it otherwise (implies --preflight)", None)
            .named("shm", SyntaxShape::String, "Stale /dev/shm segments matching this glob (`vllm_*`) or regex (`re:^psm_`) fail the preflight (implies --preflight)", None)
            .named("record", SyntaxShape::Directory, "Write DIR/provenance.json (the same document as the value returned)", None)
            .named("flags", SyntaxShape::String, "The exact nsys capture flag string; tracked switches the resolved nsys lacks fail the `flags` check", None)
            .named("server-cmd", SyntaxShape::String, "The server command (secrets redacted)", None)
            .named("client-cmd", SyntaxShape::String, "The client/benchmark command (secrets redacted)", None)
            .named(
                "env",
                SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::String)), SyntaxShape::String]),
                "Chosen env: NAME (value from Nushell's environment) or NAME=VALUE, or a list of them; secret keys redacted",
                None,
            )
            .named(
                "instrumentation",
                SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::String)), SyntaxShape::String]),
                "Instrumentation switch state NAME=STATE (e.g. nvtx=on), or a list of them",
                None,
            )
            .named("repo", SyntaxShape::Directory, "The engine's source tree: git revision and dirty state", None)
            .named(
                "artifact",
                SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::String)), SyntaxShape::String]),
                "An artifact path to record (e.g. the .nsys-rep to be written), or a list of them",
                None,
            )
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
        let timeout_ms: Option<i64> = call.get_flag("timeout-ms")?;
        let timeout = Duration::from_millis(timeout_ms.unwrap_or(10_000).max(1) as u64);
        let port = match call.get_flag::<i64>("port")? {
            None => None,
            Some(p) => Some(u16::try_from(p).map_err(|_| {
                LabeledError::new(format!("--port {p}: expected a TCP port (0-65535)"))
                    .with_code("nsyskit::usage")
                    .with_label("not a port", call.get_flag_span("port").unwrap_or(call.head))
            })?),
        };
        let gpu = match call.get_flag::<i64>("gpu")? {
            None => None,
            Some(g) => Some(u32::try_from(g).map_err(|_| {
                LabeledError::new(format!("--gpu {g}: expected a GPU index"))
                    .with_code("nsyskit::usage")
                    .with_label("not a GPU index", call.get_flag_span("gpu").unwrap_or(call.head))
            })?),
        };
        // `--env NAME` reads NAME from Nushell's environment (the plugin process's is not the user's)
        let mut env = Vec::new();
        for e in flag_list(call, "env")? {
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
                nsys: flag_path(engine, call, "nsys")?,
                nsys_bin: nu_env(engine, "NSYS_BIN")?.map(OsString::from),
                path_var: nu_path_var(engine)?,
                install_globs: match nu_env_raw(engine, "NSYSKIT_NSYS_DIRS")? {
                    Some(v) => v.split(':').filter(|s| !s.is_empty()).map(String::from).collect(),
                    None => KNOWN_INSTALL_GLOBS.iter().map(|s| s.to_string()).collect(),
                },
                timeout,
                probe: !call.has_flag("no-probe")?,
            },
            preflight: call.has_flag("preflight")?,
            require_gpu: call.has_flag("require-gpu")?,
            gpu,
            cuda_visible_devices: nu_env_raw(engine, "CUDA_VISIBLE_DEVICES")?,
            nvidia_smi: flag_path(engine, call, "nvidia-smi")?,
            port,
            shm: flag_str(call, "shm")?.map(|s| s.item),
            record: flag_path(engine, call, "record")?,
            flags: flag_str(call, "flags")?.map(|s| s.item),
            server_cmd: flag_str(call, "server-cmd")?.map(|s| s.item),
            client_cmd: flag_str(call, "client-cmd")?.map(|s| s.item),
            env,
            instrumentation: flag_list(call, "instrumentation")?,
            repo: match flag_str(call, "repo")? {
                Some(r) => Some(resolve_path(engine, &r.item)?),
                None => None,
            },
            artifacts: flag_list(call, "artifact")?,
            // the engine starts from Nushell's environment, not the plugin process's
            cuda_injection: nu_env_raw(engine, "CUDA_INJECTION64_PATH")?.filter(|v| !v.is_empty()),
            ..ProvenanceOptions::default()
        };
        let doc = resolve::run(&opts).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}
