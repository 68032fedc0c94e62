//! `pod-attach`: its flags, for the binary (bins/pod-attach) and the Nushell command (see docs/pod-attach.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;
use crate::pod_attach::Flags;

/// Capture an nsys profile from a live Kubernetes pod through the API (no kubectl), copy the report, its SQLite
/// export and stats CSVs out with sha256 checks, run gate-check on it, and clean up.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "pod-attach",
    version,
    after_help = "Examples (print the exact API requests and container argv; need no cluster):\n  pod-attach --dry-run --pod vllm-0 --container engine --duration 10\n  pod-attach --dry-run --pod vllm-0 --container engine \\\n    --image nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04 \\\n    --allow-unpinned-image --install-nsys apt\n\nExit: 0 captured (gate PASS or not run), 1 gate RETRY, 2 error, 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (after cleanup)."
)]
pub struct PodAttachArgs {
    /// Namespace of the pod
    #[arg(long, short = 'n', default_value_t = Flags::default().namespace)]
    pub namespace: String,
    /// Pod name (else --selector must match exactly one pod)
    #[arg(long)]
    pub pod: Option<String>,
    /// Label selector to find the pod, e.g. app=vllm
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// The engine's container (the sidecar's targetContainerName); may be left out when the pod has one container
    #[arg(long, short = 'c')]
    pub container: Option<String>,
    /// Sidecar image with nsys, pinned by digest [default: $NSYSKIT_SIDECAR_IMAGE, else the seed's Path A image
    /// ghcr.io/cfregly/nsys-sidecar:0.1.0@sha256:3146de96…]; not used by --strategy session
    #[arg(long)]
    pub image: Option<String>,
    /// Accept an --image not pinned by @sha256:<digest> (the digest the pod reports is recorded)
    #[arg(long)]
    pub allow_unpinned_image: bool,
    /// Install nsys in the sidecar before probing it: apt (apt-get install nsight-systems-cli; Path B, e.g. with
    /// --image nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04)
    #[arg(long, value_name = "METHOD")]
    pub install_nsys: Option<String>,
    /// Security setting of the sidecar, like kubectl debug's: general (SYS_PTRACE) or sysadmin (privileged)
    #[arg(long, default_value_t = Flags::default().profile)]
    pub profile: String,
    /// endpoint (engine under nsys --capture-range=cudaProfilerApi --capture-range-end=stop|repeat), session
    /// (engine under `nsys launch --session`), attach (only if the sidecar's nsys lists --attach-pid)
    #[arg(long, default_value_t = Flags::default().strategy)]
    pub strategy: String,
    /// Regex over /proc/*/cmdline finding the engine (children are followed to the CUDA-owning one)
    #[arg(long, default_value_t = Flags::default().process_match)]
    pub process_match: String,
    /// Capture window in seconds (the seed's 120 s by default)
    #[arg(long, default_value_t = Flags::default().duration)]
    pub duration: f64,
    /// nsys program in the container that runs it
    #[arg(long, default_value_t = Flags::default().nsys)]
    pub nsys: String,
    /// Scratch folder in that container, created by pod-attach and removed at cleanup: an absolute path whose
    /// last component starts with nsyskit-pod-attach- [default: /tmp/nsyskit-pod-attach-ID]
    #[arg(long)]
    pub workdir: Option<String>,
    /// Local folder for the copied files
    #[arg(long, short = 'o', default_value_t = Flags::default().out_dir)]
    pub out_dir: String,
    /// Refuse a copy-out whose files total more bytes [default: the sizes stat gives in the container; the
    /// stream is cut past them]
    #[arg(long, value_name = "BYTES")]
    pub max_copy_bytes: Option<u64>,
    /// Evidence bundle folder: copy the report and CSVs into DIR/profiles/ and merge kernel_profile into
    /// DIR/inference_perfbench_v1.json
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<String>,
    /// Engine HTTP port (endpoint strategy)
    #[arg(long, default_value_t = Flags::default().port)]
    pub port: u16,
    /// nsys session name (session strategy)
    #[arg(long, default_value_t = Flags::default().session)]
    pub session: String,
    /// Seconds to wait for the sidecar to run and for the report to appear; also every API request's and
    /// command's deadline (10x for export, stats, sha256sum, apt-get; the copy-out: this plus 1 s per MiB, and
    /// no byte for this long stops it)
    #[arg(long, default_value_t = Flags::default().wait_timeout)]
    pub wait_timeout: u64,
    /// Base name of the copied files
    #[arg(long, default_value_t = Flags::default().capture_name)]
    pub capture_name: String,
    /// The size gate: the report must have at least this many bytes before `nsys stats` runs (the seed: never run
    /// stats on a tiny report); also the gate's G2 threshold [default: gate-check's throughput-tier 10000000]
    #[arg(long, value_name = "BYTES")]
    pub min_rep_bytes: Option<u64>,
    /// The seed's GB300 path: the approved CUDA 13 image (pinned by @sha256:) the engine container's nsys was
    /// copied from; recorded with the copied nsys's version (needs --nsys-launch-change)
    #[arg(long, value_name = "IMAGE")]
    pub nsys_source_image: Option<String>,
    /// The seed's GB300 path: how the engine's launch was changed to run the copied nsys (recorded; needs
    /// --nsys-source-image)
    #[arg(long, value_name = "TEXT")]
    pub nsys_launch_change: Option<String>,
    /// The question this capture answers (a text file: the metric, the suspected contributor, its share if known);
    /// recorded as provenance.workload.question; without it pod-attach warns
    #[arg(long, value_name = "FILE")]
    pub question: Option<String>,
    /// The load client's command line driving the engine during the capture (recorded redacted; its
    /// --request-rate, --max-concurrency/--concurrency and --seed are read)
    #[arg(long, value_name = "COMMAND")]
    pub client_cmd: Option<String>,
    /// Requests per second the load client sends (a number or inf); also read from --client-cmd (a disagreement
    /// is exit 2)
    #[arg(long, value_name = "RATE")]
    pub request_rate: Option<String>,
    /// The most requests in flight; also read from --client-cmd's --max-concurrency/--concurrency (a
    /// disagreement is exit 2)
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u64>,
    /// The load client's seed (N, recorded as fixed:N) or seed policy (e.g. random); also read from
    /// --client-cmd's --seed
    #[arg(long, value_name = "SEED")]
    pub seed: Option<String>,
    /// Gate with this gate-check program instead of the library's gate (run in process by default)
    #[arg(long)]
    pub gate_check: Option<PathBuf>,
    /// Give the plan (API requests and exec argv) instead of running it; contacts no cluster
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl PodAttachArgs {
    /// The library's plain flag values; `image` is `--image` (the tool's run reads `$NSYSKIT_SIDECAR_IMAGE` of
    /// the user's environment when it is absent).
    pub fn flags(&self) -> Flags {
        Flags {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            selector: self.selector.clone(),
            container: self.container.clone(),
            image: self.image.clone(),
            allow_unpinned_image: self.allow_unpinned_image,
            install_nsys: self.install_nsys.clone(),
            max_copy_bytes: self.max_copy_bytes,
            bundle: self.bundle.clone(),
            profile: self.profile.clone(),
            strategy: self.strategy.clone(),
            process_match: self.process_match.clone(),
            duration: self.duration,
            nsys: self.nsys.clone(),
            workdir: self.workdir.clone(),
            out_dir: self.out_dir.clone(),
            port: self.port,
            session: self.session.clone(),
            wait_timeout: self.wait_timeout,
            capture_name: self.capture_name.clone(),
            min_rep_bytes: self.min_rep_bytes,
            nsys_source_image: self.nsys_source_image.clone(),
            nsys_launch_change: self.nsys_launch_change.clone(),
            question: self.question.clone(),
            client_cmd: self.client_cmd.clone(),
            request_rate: self.request_rate.clone(),
            concurrency: self.concurrency,
            seed: self.seed.clone(),
        }
    }
}
