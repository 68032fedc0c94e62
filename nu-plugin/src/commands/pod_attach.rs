//! `pod-attach`: capture an nsys profile from a live Kubernetes pod through the API → `nsyskit.pod-attach/v1`.
//! The orchestration is the `nsyskit-pod-attach` crate's (the binary's): this command fills its `Flags`, runs
//! `connect_and_run` on a tokio runtime with Nushell's Ctrl-C as the cancel future (cleanup always runs), and
//! gates the copied capture through the library (`Gate::Library`, no gate-check subprocess).

use std::time::Duration;

use nsyskit::pod_attach as pa;
use nsyskit_pod_attach::{connect_and_run, options, runtime, Flags, Gate, Outcome};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_value, flag_bytes, flag_path, flag_seconds, flag_str, labeled, nu_env};
use crate::NsyskitPlugin;

pub struct PodAttach;

/// A non-negative integer flag that fits `T` (a port, a count of seconds).
fn flag_uint<T: TryFrom<i64>>(call: &EvaluatedCall, name: &str) -> Result<Option<T>, LabeledError> {
    let Some(v) = call.get_flag_value(name).filter(|v| !matches!(v, Value::Nothing { .. })) else { return Ok(None) };
    let span = v.span();
    let i = match &v {
        Value::Duration { val, .. } => val / 1_000_000_000,
        other => other.as_int().map_err(LabeledError::from)?,
    };
    T::try_from(i).map(Some).map_err(|_| {
        LabeledError::new(format!("--{name} {i}: out of range"))
            .with_code("nsyskit::usage")
            .with_label("bad argument", span)
    })
}

impl SimplePluginCommand for PodAttach {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "pod-attach"
    }

    fn description(&self) -> &str {
        "Capture an nsys profile from a live Kubernetes pod through the API (no kubectl): copy the report, its SQLite export and stats out with sha256 checks, gate it, clean up."
    }

    fn extra_description(&self) -> &str {
        "--dry-run gives the plan (every API request and container argv) and contacts no cluster. Otherwise the \
         cluster comes from $env.KUBECONFIG (Nushell's), else ~/.kube/config, else in-cluster. The copied \
         capture is gated through the gate-check library (or --gate-check PROGRAM); a RETRY is data \
         (`gate.verdict`). Ctrl-C stops the run and cleanup always runs (stop the capture, remove the work folder, \
         end the sidecar's sleep); the error lists what cleanup did. --out-dir is relative to Nushell's current \
         folder; --nsys and --workdir are paths inside the container. See docs/pod-attach.md."
    }

    fn signature(&self) -> Signature {
        let secs = || SyntaxShape::OneOf(vec![SyntaxShape::Number, SyntaxShape::Duration]);
        Signature::build(SimplePluginCommand::name(self))
            .named("namespace", SyntaxShape::String, "Namespace of the pod (default: default)", Some('n'))
            .named("pod", SyntaxShape::String, "Pod name (else --selector must match exactly one pod)", None)
            .named("selector", SyntaxShape::String, "Label selector to find the pod, e.g. app=vllm", Some('l'))
            .named("container", SyntaxShape::String, "The engine's container (the sidecar's targetContainerName); may be left out when the pod has one container", Some('c'))
            .named("image", SyntaxShape::String, "Sidecar image with nsys, pinned by digest (default: $env.NSYSKIT_SIDECAR_IMAGE, else the seed's Path A image ghcr.io/cfregly/nsys-sidecar:0.1.0@sha256:3146de96…); not used by --strategy session", None)
            .switch("allow-unpinned-image", "Accept an --image not pinned by @sha256:<digest> (the digest the pod reports is recorded)", None)
            .named("install-nsys", SyntaxShape::String, "Install nsys in the sidecar before probing it: apt (apt-get install nsight-systems-cli; Path B, e.g. with --image nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04)", None)
            .named("profile", SyntaxShape::String, "Security setting of the sidecar: general (SYS_PTRACE, the default) or sysadmin (privileged)", None)
            .named("strategy", SyntaxShape::String, "endpoint (the default: engine under nsys --capture-range=cudaProfilerApi --capture-range-end=stop|repeat), session, or attach (only if the sidecar's nsys lists --attach-pid)", None)
            .named("process-match", SyntaxShape::String, "Regex over /proc/*/cmdline finding the engine (default: vllm serve|EngineCore)", None)
            .named("duration", secs(), "Capture window, seconds or a duration (default 120, the seed's)", None)
            .named("nsys", SyntaxShape::String, "nsys program in the container that runs it (default nsys)", None)
            .named("workdir", SyntaxShape::String, "Scratch folder in that container, created by pod-attach and removed at cleanup: an absolute path whose last component starts with nsyskit-pod-attach- (default /tmp/nsyskit-pod-attach-ID)", None)
            .named("out-dir", SyntaxShape::Filepath, "Local folder for the copied files (default pod-attach-out)", Some('o'))
            .named("max-copy-bytes", SyntaxShape::OneOf(vec![SyntaxShape::Int, SyntaxShape::Filesize]), "Refuse a copy-out whose files total more bytes (default: the sizes stat gives in the container; the stream is cut past them)", None)
            .named("bundle", SyntaxShape::Filepath, "Evidence bundle folder: copy the report and CSVs into DIR/profiles/ and merge kernel_profile into DIR/inference_perfbench_v1.json", None)
            .named("port", SyntaxShape::Int, "Engine HTTP port, endpoint strategy (default 8000)", None)
            .named("session", SyntaxShape::String, "nsys session name, session strategy (default nsyskit)", None)
            .named("wait-timeout", secs(), "Seconds to wait for the sidecar to run and for the report to appear (default 120)", None)
            .named("capture-name", SyntaxShape::String, "Base name of the copied files (default capture)", None)
            .named("gate-check", SyntaxShape::Filepath, "Gate with this gate-check program instead of the library's gate (run in process by default)", None)
            .switch("dry-run", "Give the plan (API requests and exec argv); contacts no cluster", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["kubernetes", "k8s", "pod", "nsys", "ephemeral", "sidecar", "capture", "vllm"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(pod-attach --dry-run --pod vllm-0 --container engine --duration 10sec).plan.1.path",
                description: "The plan of a capture (needs no cluster); its second API request adds the ephemeral sidecar",
                result: Some(Value::test_string("/api/v1/namespaces/default/pods/vllm-0/ephemeralcontainers")),
            },
            Example {
                example: "(pod-attach --dry-run --pod vllm-0 --container engine --strategy session).plan.3.argv",
                description: "The session strategy adds no sidecar: nsys runs in the engine's own container (no --image needed)",
                result: Some(Value::test_list(vec![Value::test_string("nsys"), Value::test_string("--version")])),
            },
            Example {
                example: "(pod-attach --dry-run --pod vllm-0 --container engine).plan.1.body.spec.ephemeralContainers.0.image",
                description: "Without --image (and $env.NSYSKIT_SIDECAR_IMAGE) the sidecar is the seed's Path A image, pinned by digest",
                result: Some(Value::test_string(nsyskit::pod_attach::DEFAULT_SIDECAR_IMAGE)),
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
        let d = Flags::default();
        let s = |name: &str| -> Result<Option<String>, LabeledError> { Ok(flag_str(call, name)?.map(|s| s.item)) };
        let flags = Flags {
            namespace: s("namespace")?.unwrap_or(d.namespace),
            pod: s("pod")?,
            selector: s("selector")?,
            container: s("container")?,
            image: match s("image")? {
                Some(i) => Some(i),
                None => nu_env(engine, nsyskit::pod_attach::SIDECAR_IMAGE_ENV)?,
            },
            allow_unpinned_image: call.has_flag("allow-unpinned-image")?,
            install_nsys: s("install-nsys")?,
            max_copy_bytes: flag_bytes(call, "max-copy-bytes")?,
            bundle: flag_path(engine, call, "bundle")?.map(|p| p.display().to_string()),
            profile: s("profile")?.unwrap_or(d.profile),
            strategy: s("strategy")?.unwrap_or(d.strategy),
            process_match: s("process-match")?.unwrap_or(d.process_match),
            duration: flag_seconds(call, "duration")?.unwrap_or(d.duration),
            nsys: s("nsys")?.unwrap_or(d.nsys),
            workdir: s("workdir")?,
            out_dir: flag_path(engine, call, "out-dir")?
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(engine.get_current_dir().unwrap_or_default()).join(&d.out_dir)
                })
                .display()
                .to_string(),
            port: flag_uint(call, "port")?.unwrap_or(d.port),
            session: s("session")?.unwrap_or(d.session),
            wait_timeout: flag_uint(call, "wait-timeout")?.unwrap_or(d.wait_timeout),
            capture_name: s("capture-name")?.unwrap_or(d.capture_name),
        };
        let err = |e| labeled(e, call, &sig, Some(input.span()));
        let o = options(&flags).map_err(err)?;
        if call.has_flag("dry-run")? {
            return doc_value(&pa::dry_run(&o).map_err(err)?, call.head);
        }
        let gate = match flag_path(engine, call, "gate-check")? {
            Some(p) => Gate::Program(p),
            None => Gate::Library,
        };
        let kubeconfig = nu_env(engine, "KUBECONFIG")?;
        // Ctrl-C reaches a plugin through the protocol (never as SIGINT: it runs in its own process group)
        let signals = engine.signals().clone();
        let ctrl_c = async move {
            while !signals.interrupted() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            "Ctrl-C".to_string()
        };
        let rt = runtime().map_err(err)?;
        let outcome = rt.block_on(connect_and_run(kubeconfig.as_deref().map(std::ffi::OsStr::new), &o, &gate, ctrl_c));
        let with_cleanup = |e: LabeledError, log: &[String]| {
            if log.is_empty() {
                e
            } else {
                e.with_help(format!("cleanup: {}", log.join("; ")))
            }
        };
        match outcome.map_err(err)? {
            Outcome::Done(doc) => doc_value(&*doc, call.head),
            Outcome::Failed(e, log) => Err(with_cleanup(err(e), &log)),
            Outcome::Interrupted(why, log) => Err(with_cleanup(
                LabeledError::new(format!("interrupted by {why} before the capture was copied out"))
                    .with_code("nsyskit::interrupted")
                    .with_label("interrupted", call.head),
                &log,
            )),
        }
    }
}
