//! `nsys-resolve`: its flags, for the binary and the Nushell command (see docs/nsys-resolve.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;

/// Find, verify and probe the nsys profiler, check the machine before a capture, and record provenance.
///
/// Search order: --nsys, NSYS_BIN, every `nsys` on PATH (PATH order), then the known install folders
/// (/opt/nvidia/nsight-systems/*/bin/nsys, /opt/nvidia/nsight-systems-cli/*/bin/nsys, /usr/local/cuda*/bin/nsys,
/// /usr/lib/nsight-systems/bin/nsys, Nsight Compute's …/host/target-linux-x64/nsys, and where scripts/get-nsys
/// installs: $NSYS_HOME/usr/bin/nsys, ~/.cache/nsyskit/*/usr/bin/nsys) newest version first.
/// NSYSKIT_NSYS_DIRS (`:`-separated globs) replaces the install folders. --nsys and NSYS_BIN are explicit:
/// when unusable, nothing else is tried.
///
/// Exit: 0 resolved and every check passed; 1 a check failed (verdict RETRY, the document is still printed);
/// 2 no usable nsys (every candidate and why it was rejected on stderr) or bad usage.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "nsys-resolve",
    version,
    after_help = "Examples:\n  nsys-resolve --nsys \"$(scripts/get-nsys)\" --pretty\n  nsys-resolve --preflight --gpu 0 --port 8000 --shm 'vllm_*' \\\n    --record runs/r1\n  nsys-resolve --flags '--trace=cuda,nvtx --cuda-graph-trace=node' \\\n    --repo . --env HF_TOKEN"
)]
pub struct NsysResolveArgs {
    /// Use exactly this nsys (no fallback when it is unusable)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Limit for each `nsys --version`/`--help` and nvidia-smi run, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Skip probing `nsys profile --help` / `nsys export --help` (capabilities then all false)
    #[arg(long)]
    pub no_probe: bool,
    /// Check the machine: GPUs and foreign compute processes on the target GPU (nvidia-smi), plus --port/--shm
    #[arg(long)]
    pub preflight: bool,
    /// Target GPU index (default: CUDA_VISIBLE_DEVICES, else every GPU)
    #[arg(long, value_name = "IDX")]
    pub gpu: Option<u32>,
    /// A missing or failing nvidia-smi fails the preflight (otherwise `gpu: unavailable`, check skipped)
    #[arg(long)]
    pub require_gpu: bool,
    /// The nvidia-smi to run (default: nvidia-smi on PATH)
    #[arg(long, value_name = "PATH")]
    pub nvidia_smi: Option<PathBuf>,
    /// Check that this TCP port is free; who holds it otherwise (implies --preflight)
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Stale /dev/shm segments matching this glob (`vllm_*`) or regex (`re:^psm_`) fail the preflight (implies --preflight)
    #[arg(long, value_name = "PATTERN")]
    pub shm: Option<String>,
    /// Write DIR/provenance.json (the same document as stdout)
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// The exact nsys capture flag string; tracked switches the resolved nsys lacks fail the `flags` check
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub flags: Option<String>,
    /// The server command (secrets redacted)
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub server_cmd: Option<String>,
    /// The client/benchmark command (secrets redacted)
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub client_cmd: Option<String>,
    /// Chosen env: NAME (value read from the environment) or NAME=VALUE; repeatable; secret keys redacted
    #[arg(long, value_name = "K[=V]")]
    pub env: Vec<String>,
    /// Instrumentation switch state NAME=STATE (e.g. nvtx=on); repeatable
    #[arg(long, value_name = "NAME=STATE")]
    pub instrumentation: Vec<String>,
    /// The engine's source tree: git revision and dirty state
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// An artifact path to record (e.g. the .nsys-rep to be written); repeatable
    #[arg(long, value_name = "PATH")]
    pub artifact: Vec<String>,
    /// Only --nsys or NSYS_BIN may name the nsys: PATH and the install folders are not searched (exit 2 without either); recorded as nsys.explicit_required
    #[arg(long)]
    pub require_explicit_nsys: bool,
    /// The question the capture answers (a text file), recorded as workload.question
    #[arg(long, value_name = "FILE")]
    pub question: Option<PathBuf>,
    /// Requests per second of the client (a number or inf); also read from --client-cmd's --request-rate
    #[arg(long, value_name = "RATE")]
    pub request_rate: Option<String>,
    /// The most requests in flight; also read from --client-cmd's --max-concurrency/--concurrency
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u64>,
    /// The client's seed (N, recorded as fixed:N) or seed policy; also read from --client-cmd's --seed
    #[arg(long, value_name = "SEED")]
    pub seed: Option<String>,
    /// The GPU clock policy, as stated (e.g. locked:1980,2619 or default)
    #[arg(long, value_name = "POLICY")]
    pub clock_policy: Option<String>,
    /// The diagnostic instrumentation patch applied to the engine: its sha256 is recorded
    #[arg(long, value_name = "FILE")]
    pub instrumentation_patch: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}
