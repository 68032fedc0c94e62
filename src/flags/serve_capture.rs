//! `serve-capture`: its flags, for the binary and the Nushell command (see docs/serve-capture.md).

use std::path::PathBuf;

use std::time::Duration;

use crate::contract::cli::OutputArgs;
use crate::contract::Result;
use crate::serve_capture::{self, ServeCaptureOptions};

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "serve-capture",
    version,
    about = "Profile a server you control under nsys: readiness, warmup, bounded load across the capture window, clean stop",
    after_help = "Example (CPU only, nsys 2023.4 in NSYS_BIN: `export NSYS_BIN=$(scripts/get-nsys)`; the test server scripts/cpu/vibeserve_http.c; exit 1 expected: the capture, ranges and bundle are written, but a CPU-only capture has no CUDA data, so gate-check says RETRY at G1, G2 and G3):\n  NVTX_INC=$(dirname $(find -L \"$(dirname \"$NSYS_BIN\")/..\" \\\n    -path '*nvtx/include/nvtx3' | head -1))\n  gcc -O1 -I\"$NVTX_INC\" scripts/cpu/vibeserve_http.c \\\n    -o /tmp/vibeserve_http -ldl\n  serve-capture --trace nvtx,osrt --delay 3 --duration 3 \\\n    --health http://127.0.0.1:18080/health \\\n    --models http://127.0.0.1:18080/v1/models \\\n    --warmup \"curl -sf -o /dev/null http://127.0.0.1:18080/generate\" \\\n    --load \"/tmp/vibeserve_http --client 18080 8\" \\\n    --out runs/cpu1 -- /tmp/vibeserve_http 18080\n\nExit: 0 ok and gate-check PASS, 1 a stage failed or gate-check says RETRY (the document says which), 2 bad usage (nothing started), 130/143 interrupted by SIGINT/SIGTERM (after cleanup)."
)]
pub struct ServeCaptureArgs {
    /// The nsys binary (default: NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// nsys --trace list; with cuda, --cuda-graph-trace=node is added (mandatory)
    #[arg(long, default_value = "cuda,nvtx,osrt")]
    pub trace: String,
    /// Extra nsys profile flags, one string split with shell-word rules (e.g. "--sample=none --cpuctxsw=none")
    #[arg(long, value_name = "\"FLAGS\"", allow_hyphen_values = true)]
    pub flags: Option<String>,
    /// Time-bounded window: start collecting SECONDS after launch
    #[arg(long, value_name = "SECONDS")]
    pub delay: Option<f64>,
    /// Time-bounded window: collect for SECONDS
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Range-bounded window: cudaProfilerApi (or nvtx, with --flags "--nvtx-capture=NAME")
    #[arg(long, value_name = "RANGE")]
    pub capture_range: Option<String>,
    /// What ends a range-bounded capture (default stop: the server keeps running, serve-capture stops it)
    #[arg(long, value_name = "END")]
    pub capture_range_end: Option<String>,
    /// The CUDA process is a child of the launched one (vLLM, SGLang workers): adds --trace-fork-before-exec=true
    #[arg(long)]
    pub cuda_child: bool,
    /// Environment variable for the server, set on the nsys process (repeatable)
    #[arg(long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Health URL, polled until it answers 2xx
    #[arg(long, value_name = "URL")]
    pub health: String,
    /// Models URL (e.g. http://127.0.0.1:8000/v1/models), also polled until 2xx
    #[arg(long, value_name = "URL")]
    pub models: Option<String>,
    /// Warmup client command, run before the capture window (one string, split with shell-word rules, no shell)
    #[arg(long, value_name = "\"CMD\"")]
    pub warmup: Option<String>,
    /// Bounded load client command that spans the capture window (split with shell-word rules, no shell)
    #[arg(long, value_name = "\"CMD\"")]
    pub load: String,
    /// Seconds to wait for readiness
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub ready_timeout: f64,
    /// Seconds a warmup or load client may run
    #[arg(long, default_value_t = 1800.0, value_name = "SECONDS")]
    pub client_timeout: f64,
    /// Seconds nsys may take to write its report once the server is gone
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub finalize_timeout: f64,
    /// Seconds between TERM and KILL for each recorded process
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace: f64,
    /// gate-check tier for the capture: throughput (G5) or decode (G6, G7)
    #[arg(long, default_value = "throughput", value_name = "TIER")]
    pub tier: String,
    /// gate-check decode tier: the NVTX label of one decode step
    #[arg(long, value_name = "LABEL")]
    pub decode_range: Option<String>,
    /// gate-check G2: smallest acceptable .nsys-rep in bytes [default: the tier's]
    #[arg(long, value_name = "BYTES")]
    pub min_rep_bytes: Option<u64>,
    /// Pin the run to this physical GPU: CUDA_VISIBLE_DEVICES=IDX on the server (through nsys) and the clients; a foreign process on it fails the preflight
    #[arg(long, value_name = "IDX")]
    pub gpu: Option<u32>,
    /// The nvidia-smi to run (default: nvidia-smi on PATH; without one the GPU checks say "not checked")
    #[arg(long, value_name = "PATH")]
    pub nvidia_smi: Option<PathBuf>,
    /// The engine's source tree: its git revision and dirty state go into provenance.json
    #[arg(long, value_name = "DIR")]
    pub engine_repo: Option<PathBuf>,
    /// The engine's instrumentation switch state NAME=STATE (e.g. nvtx=on), recorded in provenance; repeatable
    #[arg(long, value_name = "NAME=STATE")]
    pub instrumentation: Vec<String>,
    /// Stale /dev/shm segments matching this glob (vllm_*) or regex (re:^psm_) fail the preflight
    #[arg(long, value_name = "PATTERN")]
    pub shm: Option<String>,
    /// After shutdown, GPU memory used on the target GPU(s) must be back within this many MiB of its level at start
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub gpu_mem_tolerance: u64,
    /// A flag the server command must carry (repeatable): without it serve-capture refuses to start (exit 2, nothing launched)
    #[arg(long, value_name = "FLAG", allow_hyphen_values = true)]
    pub require_argv: Vec<String>,
    /// The engine (sglang, vllm): implies the server flags its capture mode needs (sglang: --alignment-nvtx-ranges, --alignment-iteration-records; vllm with --capture-range: --profiler-config.profiler=cuda)
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    /// A generated/JIT module (.so, cache entry) to record: size, sha256, mtime, and whether the server processes mapped it (repeatable; PATH=SHA256 pins it)
    #[arg(long, value_name = "PATH[=SHA256]")]
    pub module: Vec<String>,
    /// A --module that is missing or differs from its pinned sha256 fails before the server is launched (exit 2)
    #[arg(long)]
    pub strict_prebuilt: bool,
    /// The file the server writes its iteration records to (told through NSYSKIT_ITERATION_RECORDS, set on nsys); collected into the run folder and validated (iterations.json)
    #[arg(long, value_name = "FILE")]
    pub iteration_records: Option<PathBuf>,
    /// Only --nsys or NSYS_BIN may name the nsys: PATH and the install folders are not searched (exit 2 without either, nothing started); recorded as nsys.explicit_required in provenance.json
    #[arg(long)]
    pub require_explicit_nsys: bool,
    /// The analysis window, given up front: ranges.json covers only iterations START..=END (engine iteration indices with --iteration-records, else step occurrence indices), as sqlite-ranges --iterations; a window that selects no evidence fails the run (stage iterations)
    #[arg(long, value_name = "START:END")]
    pub iterations: Option<String>,
    /// The question this capture answers (a text file: the metric, the suspected contributor, its share if known); recorded as provenance.workload.question; without it serve-capture warns
    #[arg(long, value_name = "FILE")]
    pub question: Option<PathBuf>,
    /// Requests per second the load client sends (a number or inf); also read from the load command's --request-rate (a disagreement is exit 2)
    #[arg(long, value_name = "RATE")]
    pub request_rate: Option<String>,
    /// The most requests in flight; also read from the load command's --max-concurrency/--concurrency (a disagreement is exit 2)
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u64>,
    /// The load client's seed (N, recorded as fixed:N) or seed policy (e.g. random); also read from the load command's --seed
    #[arg(long, value_name = "SEED")]
    pub seed: Option<String>,
    /// The GPU clock policy, as stated (e.g. locked:1980,2619 or default); recorded and compared by capture-compare
    #[arg(long, value_name = "POLICY")]
    pub clock_policy: Option<String>,
    /// The diagnostic instrumentation patch applied to the engine: its sha256 is recorded and compared by capture-compare
    #[arg(long, value_name = "FILE")]
    pub instrumentation_patch: Option<PathBuf>,
    /// The run folder (created; must be empty): report, export, logs, pids/, provenance.json, serve-capture.json
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The server command, after `--`
    #[arg(last = true, required = true, value_name = "SERVER CMD")]
    pub server: Vec<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn secs(x: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(x)
        .map_err(|_| crate::contract::Error::usage(format!("{flag} {x}: expected seconds >= 0")).with_arg(flag))
}

impl ServeCaptureArgs {
    /// The library's options for these flags (a bad value is a usage error naming its flag).
    pub fn options(&self) -> Result<ServeCaptureOptions> {
        let a = self;
        let mut o = ServeCaptureOptions::new(
            a.server.clone(),
            a.health.clone(),
            serve_capture::split_command(&a.load, "--load")?,
            a.out.clone(),
        );
        o.nsys = a.nsys.clone();
        o.trace = a.trace.clone();
        o.flags = match &a.flags {
            Some(f) => serve_capture::split_command(f, "--flags")?,
            None => Vec::new(),
        };
        o.delay_s = a.delay;
        o.duration_s = a.duration;
        o.capture_range = a.capture_range.clone();
        o.capture_range_end = a.capture_range_end.clone();
        o.cuda_child = a.cuda_child;
        o.env = a.env.iter().map(|e| serve_capture::parse_env(e)).collect::<Result<_>>()?;
        o.models = a.models.clone();
        o.warmup = a.warmup.as_deref().map(|w| serve_capture::split_command(w, "--warmup")).transpose()?;
        o.ready_timeout = secs(a.ready_timeout, "--ready-timeout")?;
        o.client_timeout = secs(a.client_timeout, "--client-timeout")?;
        o.finalize_timeout = secs(a.finalize_timeout, "--finalize-timeout")?;
        o.grace = secs(a.grace, "--grace")?;
        o.tier = crate::gate_check::Tier::parse(&a.tier).map_err(|e| e.with_arg("--tier"))?;
        o.decode_range = a.decode_range.clone();
        o.min_rep_bytes = a.min_rep_bytes;
        o.gpu = a.gpu;
        o.nvidia_smi = a.nvidia_smi.clone();
        o.engine_repo = a.engine_repo.clone();
        o.instrumentation = a.instrumentation.clone();
        o.shm = a.shm.clone();
        o.gpu_mem_tolerance_mib = a.gpu_mem_tolerance;
        o.require_argv = a.require_argv.clone();
        o.engine = a.engine.clone();
        o.modules = a
            .module
            .iter()
            .map(|m| serve_capture::engine::parse_module(m).map_err(|e| e.with_arg("--module")))
            .collect::<Result<_>>()?;
        o.strict_prebuilt = a.strict_prebuilt;
        o.iteration_records = a.iteration_records.clone();
        o.require_explicit_nsys = a.require_explicit_nsys;
        o.iterations = a
            .iterations
            .as_deref()
            .map(|s| crate::iterations::window::parse_iterations(s).map_err(|e| e.with_arg("--iterations")))
            .transpose()?;
        o.workload = crate::nsys_resolve::WorkloadSpec {
            question: a.question.clone(),
            request_rate: a.request_rate.clone(),
            concurrency: a.concurrency,
            seed: a.seed.clone(),
            clock_policy: a.clock_policy.clone(),
            instrumentation_patch: a.instrumentation_patch.clone(),
        };
        Ok(o)
    }
}
