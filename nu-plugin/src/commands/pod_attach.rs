//! `pod-attach`: capture an nsys profile from a live Kubernetes pod through the API → `nsyskit.pod-attach/v1`.
//! The orchestration is the `nsyskit-pod-attach` crate's (the binary's): this command fills its `Flags`, runs
//! `connect_and_run` on a tokio runtime with Nushell's Ctrl-C as the cancel future (cleanup always runs), and
//! gates the copied capture through the library (`Gate::Library`, no gate-check subprocess).

use std::time::Duration;

use clap::CommandFactory;
use nsyskit::flags::pod_attach::PodAttachArgs;
use nsyskit::tools::Stdin;
use nsyskit_pod_attach::{run_tool, Ended};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, Type, Value};

use crate::call::{category, labeled, outcome_value, with_host};
use crate::flags::Flags;
use crate::NsyskitPlugin;

pub struct PodAttach;

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
        flags()
            .signature(Signature::build(SimplePluginCommand::name(self)))
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
        let args: PodAttachArgs = flags().parse(engine, call, Vec::new())?;
        let err = |e| labeled(e, call, &sig, Some(input.span()));
        // Ctrl-C reaches a plugin through the protocol (never as SIGINT: it runs in its own process group)
        let signals = engine.signals().clone();
        let ctrl_c = async move {
            while !signals.interrupted() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            "Ctrl-C".to_string()
        };
        let with_cleanup = |e: LabeledError, log: &[String]| {
            if log.is_empty() {
                e
            } else {
                e.with_help(format!("cleanup: {}", log.join("; ")))
            }
        };
        match with_host(engine, Stdin::None, None, |host| run_tool(args, host, ctrl_c))?.map_err(err)? {
            Ended::Done(outcome) => outcome_value(&sig.name, outcome, call),
            Ended::Failed(e, log) => Err(with_cleanup(err(e), &log)),
            Ended::Interrupted(why, log) => Err(with_cleanup(
                LabeledError::new(format!("interrupted by {why} before the capture was copied out"))
                    .with_code("nsyskit::interrupted")
                    .with_label("interrupted", call.head),
                &log,
            )),
        }
    }
}

/// The flags of the `pod-attach` binary (one definition: `nsyskit::flags::pod_attach`); the durations also
/// take a Nushell duration.
fn flags() -> Flags {
    use crate::flags::{path, seconds};
    Flags::new(PodAttachArgs::command()).shapes(&[
        ("duration", seconds),
        ("wait-timeout", seconds),
        ("out-dir", path),
        ("bundle", path),
        ("gate-check", path),
    ])
}
