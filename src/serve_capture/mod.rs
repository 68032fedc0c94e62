//! `serve-capture`: the profiled-server lifecycle as one command.
//!
//! `nsys profile … SERVER` is started in the background in its own session; the profiler PID and the server PID
//! (found as the nsys descendant whose argv[0] is the server's, see [`find_server`]) are recorded in a run-local
//! PID folder (`OUT/pids/`). The health and models URLs are polled until they answer 2xx, failing as soon as the
//! profiled process exits. The warmup client runs before the capture window opens, the bounded load client spans
//! it (each in its own session, never a child of nsys, its PID recorded separately). Then only the recorded PIDs
//! are stopped — TERM, then KILL after a grace — in reverse launch order: load, warmup, the server's process
//! tree, nsys (after its report is written). The server's port must be released at the end.
//!
//! Afterwards the report is exported next to it (`OUT/capture.sqlite`) and summarised. The load client's
//! throughput under the profiler is recorded as `diagnostic_only`, never as a score.

pub mod engine;
pub mod http;
pub mod module_id;
pub mod procs;

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::resolve::Capabilities;

/// Everything `serve-capture` needs, as the binary and the Nushell plugin pass it.
#[derive(Debug, Clone)]
pub struct ServeCaptureOptions {
    /// The nsys to profile with; None: `NSYS_BIN`, else `nsys` on PATH.
    pub nsys: Option<PathBuf>,
    /// Where nsys is looked for when `nsys` is None: the user's environment (`NSYS_BIN`, `PATH`, install
    /// folders), set by the tool's run from its host.
    pub resolve: crate::resolve::ResolveOptions,
    /// `--trace` for nsys (e.g. `cuda,nvtx,osrt`).
    pub trace: String,
    /// Extra `nsys profile` flags (already split into words).
    pub flags: Vec<String>,
    /// Time-bounded window: `--delay` seconds after launch, `--duration` seconds long.
    pub delay_s: Option<f64>,
    pub duration_s: Option<f64>,
    /// Range-bounded window: `--capture-range` (`cudaProfilerApi`, `nvtx`) and its end (default `stop`).
    pub capture_range: Option<String>,
    pub capture_range_end: Option<String>,
    /// The CUDA process is a child of the launched one (adds `--trace-fork-before-exec=true`).
    pub cuda_child: bool,
    /// Environment for the server, set on the nsys process (which the server inherits).
    pub env: Vec<(String, String)>,
    /// Readiness URLs: the health URL, and the models URL if any. Each must answer 2xx.
    pub health: String,
    pub models: Option<String>,
    /// The warmup client (argv), run before the capture window.
    pub warmup: Option<Vec<String>>,
    /// The bounded load client (argv) that spans the capture window.
    pub load: Vec<String>,
    pub ready_timeout: Duration,
    /// The longest a warmup or load client may run.
    pub client_timeout: Duration,
    /// How long nsys may take to write its report once the server is gone.
    pub finalize_timeout: Duration,
    /// TERM → KILL grace per process.
    pub grace: Duration,
    /// The run folder (created; must be empty if it exists).
    pub out: PathBuf,
    /// The server command (argv).
    pub server: Vec<String>,
    /// gate-check on the capture afterwards: tier, decode step label, smallest report.
    pub tier: crate::gate::Tier,
    pub decode_range: Option<String>,
    pub min_rep_bytes: Option<u64>,
    /// Where a stop request (Ctrl-C) comes from: the process's own SIGINT/SIGTERM/SIGHUP (the binary), or a
    /// [`StopFlag`] the caller sets (the Nushell plugin, where Ctrl-C arrives through the plugin protocol).
    pub stop: StopSource,
    /// The folder the server, nsys and the clients run in and a relative `out` is resolved against; None: the
    /// process's current folder (the binary). The plugin passes Nushell's current folder.
    pub cwd: Option<PathBuf>,
    /// `--gpu IDX`: the physical GPU; `CUDA_VISIBLE_DEVICES=IDX` is set on nsys (so on the server) and on the
    /// clients, and the preflight checks that GPU for foreign processes.
    pub gpu: Option<u32>,
    /// The nvidia-smi to run (None: `nvidia-smi` on PATH); without one the GPU checks are "not checked".
    pub nvidia_smi: Option<PathBuf>,
    /// `--engine-repo DIR`: the engine's source tree, its revision and dirty state go into provenance.
    pub engine_repo: Option<PathBuf>,
    /// `--instrumentation NAME=STATE` (e.g. `nvtx=on`), recorded in provenance.
    pub instrumentation: Vec<String>,
    /// `--shm PATTERN`: stale shared-memory segments matching it fail the preflight.
    pub shm: Option<String>,
    /// After shutdown, GPU memory used on the target GPU(s) must be back within this many MiB of its level at
    /// start.
    pub gpu_mem_tolerance_mib: u64,
    /// `--require-argv FLAG` (repeatable): flags the server command must carry, checked before anything starts.
    pub require_argv: Vec<String>,
    /// `--engine sglang|vllm`: implies the flags its capture mode needs (see [`engine::requirements`]).
    pub engine: Option<String>,
    /// `--module PATH[=SHA256]` (repeatable): generated/JIT modules whose identity and loading are recorded.
    pub modules: Vec<engine::ModuleSpec>,
    /// `--strict-prebuilt`: a listed module missing or not matching its pin fails before anything starts.
    pub strict_prebuilt: bool,
    /// `--iteration-records FILE`: where the server writes its iteration records (given to it as
    /// `NSYSKIT_ITERATION_RECORDS`, set on nsys); collected into the run folder and validated.
    pub iteration_records: Option<PathBuf>,
    /// The workload flags (`--question`, `--request-rate`, `--concurrency`, `--seed`, `--clock-policy`,
    /// `--instrumentation-patch`), recorded with the load command's own flags as `provenance.workload`.
    pub workload: crate::resolve::WorkloadSpec,
    /// `--require-explicit-nsys`: only `nsys` (`--nsys`) or `NSYS_BIN` may name the nsys.
    pub require_explicit_nsys: bool,
    /// `--iterations START:END`: the analysis window of `ranges.json` (sqlite-ranges `--iterations`), with the
    /// run's iteration records when `--iteration-records` was given.
    pub iterations: Option<(u64, u64)>,
}

/// A stop request set by the caller, with the signal it stands for (2 = SIGINT); shared between threads.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(std::sync::Arc<std::sync::atomic::AtomicI32>);

impl StopFlag {
    pub fn new() -> StopFlag {
        StopFlag::default()
    }
    /// Ask the run to stop as if `sig` had been received (the first request wins).
    pub fn request(&self, sig: i32) {
        let _ =
            self.0.compare_exchange(0, sig, std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst);
    }
    /// Ask the run to stop as on Ctrl-C (SIGINT): outcome `interrupted`, `cleanup.stop_signal` 2.
    pub fn interrupt(&self) {
        self.request(libc::SIGINT)
    }
    /// The signal requested so far (0 = none).
    pub fn get(&self) -> i32 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Where [`run`] learns that it must stop and clean up.
#[derive(Debug, Clone, Default)]
pub enum StopSource {
    /// Install process-wide SIGINT/SIGTERM/SIGHUP handlers that record the signal (the binary).
    #[default]
    ProcessSignals,
    /// Only this flag; no signal handler is installed (a library caller such as the Nushell plugin).
    Flag(StopFlag),
}

impl StopSource {
    /// The stop signal requested so far (0 = none).
    pub fn signal(&self) -> i32 {
        match self {
            StopSource::ProcessSignals => procs::stop_signal(),
            StopSource::Flag(f) => f.get(),
        }
    }
}

impl ServeCaptureOptions {
    /// Options with the defaults of the binary.
    pub fn new(server: Vec<String>, health: String, load: Vec<String>, out: PathBuf) -> Self {
        ServeCaptureOptions {
            nsys: None,
            resolve: crate::resolve::ResolveOptions::from_env(),
            trace: "cuda,nvtx,osrt".into(),
            flags: Vec::new(),
            delay_s: None,
            duration_s: None,
            capture_range: None,
            capture_range_end: None,
            cuda_child: false,
            env: Vec::new(),
            health,
            models: None,
            warmup: None,
            load,
            ready_timeout: Duration::from_secs(300),
            client_timeout: Duration::from_secs(1800),
            finalize_timeout: Duration::from_secs(300),
            grace: Duration::from_secs(10),
            out,
            server,
            tier: crate::gate::Tier::Throughput,
            decode_range: None,
            min_rep_bytes: None,
            stop: StopSource::ProcessSignals,
            cwd: None,
            gpu: None,
            nvidia_smi: None,
            engine_repo: None,
            instrumentation: Vec::new(),
            shm: None,
            gpu_mem_tolerance_mib: 256,
            require_argv: Vec::new(),
            engine: None,
            modules: Vec::new(),
            strict_prebuilt: false,
            iteration_records: None,
            workload: crate::resolve::WorkloadSpec::default(),
            require_explicit_nsys: false,
            iterations: None,
        }
    }
}

/// Split a command given as one string (`--warmup "curl -s URL"`) with POSIX shell-word rules, for exec
/// without a shell. `flag` names the argument in errors.
pub fn split_command(s: &str, flag: &str) -> Result<Vec<String>> {
    let words = shlex::split(s).ok_or_else(|| {
        Error::usage(format!("{flag} '{s}': unbalanced quotes or a trailing backslash")).with_arg(flag)
    })?;
    Ok(words)
}

/// Parse `K=V` for `--env`.
pub fn parse_env(s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => Ok((k.to_string(), v.to_string())),
        _ => Err(Error::usage(format!("--env '{s}': expected NAME=VALUE")).with_arg("--env")),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The document

/// The `serve-capture` document (`nsyskit.serve-capture/v1`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ServeCaptureDoc {
    pub schema: String,
    pub tool: Tool,
    /// `ok`, `failed` (a stage failed: exit 1) or `interrupted` (SIGINT/SIGTERM: exit 130/143).
    pub outcome: String,
    /// What failed, in order (empty when `outcome` is `ok`).
    pub failures: Vec<Failure>,
    /// The run folder and what it holds.
    pub out_dir: String,
    pub files: Files,
    pub nsys: NsysInfo,
    pub window: Window,
    /// The exact nsys command line (argv), server command included.
    pub nsys_argv: Vec<String>,
    /// Flags serve-capture added to the nsys command, each with why.
    pub added_flags: Vec<AddedFlag>,
    /// Names of the variables set on the nsys process with `--env` (values are in provenance.json).
    pub env_names: Vec<String>,
    /// Every process serve-capture recorded, in launch order, and how each ended.
    pub processes: Vec<ProcessRecord>,
    pub ready: Option<Ready>,
    pub warmup: Option<ClientRun>,
    pub load: Option<ClientRun>,
    /// The load client's throughput under the profiler: diagnostic only, never a score.
    pub diagnostic: Option<Diagnostic>,
    pub capture: Option<CaptureResult>,
    /// gate-check on the capture (`OUT/gate.json`): PASS, or RETRY with the gates that said retry.
    pub gate: Option<GateSummary>,
    pub cleanup: Cleanup,
    /// `--gpu IDX`: the physical GPU the run was pinned to (its UUID from nvidia-smi when there is one).
    #[serde(default)]
    pub gpu_pin: Option<GpuPin>,
    /// `CUDA_INJECTION64_PATH` found in the environment of the server's processes (`/proc/PID/environ`) when
    /// it is not nsys's own injection library.
    #[serde(default)]
    pub injection: Vec<InjectionFinding>,
    /// nvidia-smi after shutdown (same fields as provenance's `gpu`, read at start): clocks, throttle reasons,
    /// memory, compute processes. `null` when not queried (a stop signal) .
    #[serde(default)]
    pub gpu_end: Option<crate::resolve::GpuState>,
    /// The launcher contract checked before the start (`--require-argv`, `--engine`); null when none.
    #[serde(default)]
    pub launcher: Option<engine::LauncherCheck>,
    /// `--module`s: identity at start and whether this run's server processes mapped them
    /// (`path`, `sha256`, `loaded`, `loaded_by_pid`, …).
    #[serde(default)]
    pub modules: Vec<engine::ModuleRecord>,
    /// `--iteration-records`: what was collected and validated (null when not asked).
    #[serde(default)]
    pub iterations: Option<IterationsResult>,
    /// Seconds from serve-capture's start to the end of the run.
    pub wall_s: f64,
}

/// The iteration records of the run: where the server wrote them, the copy in the run folder, the validation.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IterationsResult {
    /// The file the server was told to write (`NSYSKIT_ITERATION_RECORDS`).
    pub source: String,
    /// `OUT/iterations.jsonl` (null when the server wrote nothing).
    pub copy: Option<String>,
    /// `OUT/iterations.json` (`nsyskit.iterations/v1`).
    pub document: Option<String>,
    pub verdict: Option<String>,
    pub records: u64,
    pub usable_as_time: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GpuPin {
    /// The physical nvidia-smi index.
    pub index: u32,
    /// Its UUID (`GPU-…`), `null` when nvidia-smi is not there.
    pub uuid: Option<String>,
    /// The value set on nsys (the server inherits it) and on the clients.
    pub cuda_visible_devices: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InjectionFinding {
    pub role: String,
    pub pid: i64,
    pub value: String,
    /// A failure (`stage: injection`) when CUDA is traced; only a warning otherwise.
    pub blocks_cuda_tracing: bool,
}

impl Document for ServeCaptureDoc {
    const KIND: &'static str = "serve-capture";
    const TOOL: &'static str = "serve-capture";
    /// 0: the lifecycle went through and gate-check says PASS; 1: a stage failed, or the gate says RETRY;
    /// 130/143: interrupted by SIGINT/SIGTERM (after cleanup).
    fn exit_code(&self) -> i32 {
        match self.outcome.as_str() {
            "ok" if self.gate.as_ref().is_some_and(|g| g.verdict == "PASS") => 0,
            "interrupted" => 128 + self.cleanup.stop_signal.unwrap_or(libc::SIGINT),
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GateSummary {
    /// `PASS` or `RETRY`.
    pub verdict: String,
    /// The gates that said retry (e.g. `G3`), with their reasons in `OUT/gate.json`.
    pub retry: Vec<String>,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Failure {
    /// `preflight`, `ready`, `injection`, `warmup`, `window`, `load`, `server`, `worker`, `capture`,
    /// `postprocess`, `cleanup`, `interrupted`.
    pub stage: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Files {
    pub provenance: String,
    pub pids_dir: String,
    pub nsys_log: String,
    /// `OUT/serve-capture.json`: this document.
    pub document: String,
    pub report: Option<String>,
    pub sqlite: Option<String>,
    /// `OUT/gate.json` (gate-check), `OUT/ranges.json` (sqlite-ranges), `OUT/bundle.json` (provenance, gate,
    /// ranges and this document merged with bundle-merge).
    pub gate: Option<String>,
    pub ranges: Option<String>,
    pub bundle: Option<String>,
    /// `OUT/iterations.json` with `--iteration-records`.
    #[serde(default)]
    pub iterations: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NsysInfo {
    pub path: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Window {
    /// `time` (`--delay`/`--duration`), `range` (`--capture-range`) or `whole` (the whole run).
    pub mode: String,
    pub delay_s: Option<f64>,
    pub duration_s: Option<f64>,
    pub capture_range: Option<String>,
    pub capture_range_end: Option<String>,
    /// Time mode: estimated window, seconds since serve-capture started (nsys launch + delay).
    pub start_est_s: Option<f64>,
    pub end_est_s: Option<f64>,
    /// `--iterations START:END`: the analysis window given up front (`ranges.json` covers only it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_iterations: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AddedFlag {
    pub flag: String,
    pub why: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProcessRecord {
    /// `profiler` (nsys), `server`, `server-child`, `nsys-helper`, `warmup`, `load`.
    pub role: String,
    pub pid: i64,
    /// Start time in clock ticks since boot: the PID's identity (a signal is sent only while it matches).
    pub starttime_ticks: u64,
    /// Its parent when recorded: serve-capture itself for nsys and the clients (never nsys for a client).
    pub parent_pid: i64,
    pub argv: Vec<String>,
    /// When serve-capture launched or found it (seconds since start).
    pub recorded_at_s: f64,
    /// Signals serve-capture sent it, in order.
    pub signals_sent: Vec<String>,
    /// How it ended: `exit 0`, `exit 3`, `signal SIGTERM`, or `gone` (not our child: no status).
    pub ended: Option<String>,
    pub ended_at_s: Option<f64>,
    /// Gone at the end of the run.
    pub gone: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Ready {
    pub urls: Vec<String>,
    /// Seconds since start when every URL answered 2xx.
    pub at_s: f64,
    pub polls: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClientRun {
    pub argv: Vec<String>,
    pub pid: i64,
    pub started_at_s: f64,
    pub ended_at_s: Option<f64>,
    pub wall_s: Option<f64>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// Time mode, load client only: started before the window opened and ended after it closed (estimate).
    pub spans_window: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Diagnostic {
    /// Always true: a profiled run's throughput is not a benchmark result.
    pub diagnostic_only: bool,
    pub load_wall_s: Option<f64>,
    /// From the load client's last stdout line when it is a JSON object with `"requests"` (and `"tokens"`).
    pub requests: Option<u64>,
    pub tokens: Option<u64>,
    pub requests_per_s: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CaptureResult {
    /// nsys's exit status (`exit 0`, `signal SIGTERM`).
    pub nsys_ended: Option<String>,
    pub report: Option<String>,
    pub sqlite: Option<String>,
    /// NVTX push/pop and start/end ranges in the export, by name (closed ranges only).
    pub nvtx_ranges: Vec<RangeCount>,
    pub nvtx_range_total: u64,
    /// Kernel rows in the export (0 without CUDA trace).
    pub kernel_rows: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RangeCount {
    pub name: String,
    pub count: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Cleanup {
    /// Every recorded PID is gone.
    pub all_gone: bool,
    /// The port of the health URL, and whether nothing listens on it any more.
    pub port: Option<u16>,
    pub port_released: Option<bool>,
    /// The stop signal serve-capture received (2 = SIGINT, 15 = SIGTERM), if any.
    pub stop_signal: Option<i32>,
    /// After shutdown: no recorded PID holds a GPU and the target GPUs' memory used is back at its level at
    /// start (± `--gpu-mem-tolerance`): `passed`, `failed`, or `not checked` (no nvidia-smi: never "passed").
    #[serde(default)]
    pub gpu_check: Option<String>,
    /// What was measured, or why it was not checked.
    #[serde(default)]
    pub gpu_reason: Option<String>,
    /// Memory used on the target GPU(s) at start and after shutdown, MiB.
    #[serde(default)]
    pub gpu_memory_before_mib: Option<u64>,
    #[serde(default)]
    pub gpu_memory_after_mib: Option<u64>,
}

// ---------------------------------------------------------------------------------------------------------------
// Validation and the nsys command line

/// The flags serve-capture owns: given in `--flags` they are refused with the serve-capture flag to use.
fn owned_flag(word: &str) -> Option<&'static str> {
    let name = word.split('=').next().unwrap_or(word);
    Some(match name {
        "-o" | "--output" => "--out DIR (the report is OUT/capture.nsys-rep)",
        "-t" | "--trace" => "--trace",
        "-y" | "--delay" => "--delay",
        "-d" | "--duration" => "--duration",
        "-c" | "--capture-range" => "--capture-range",
        "--capture-range-end" => "--capture-range-end",
        "-e" | "--env-var" => "--env NAME=VALUE (set on the nsys process)",
        "-f" | "--force-overwrite" => "a fresh --out DIR",
        _ => return None,
    })
}

/// Check the options and build the `nsys profile` argv (without the nsys path) and the flags added.
pub fn build_nsys_args(
    o: &ServeCaptureOptions,
    caps: &Capabilities,
    report_base: &Path,
) -> Result<(Vec<String>, Vec<AddedFlag>)> {
    if o.server.is_empty() {
        return Err(
            Error::usage("no server command: give it after `--`: serve-capture … -- SERVER ARGS…").with_arg("SERVER")
        );
    }
    let prog = Path::new(&o.server[0]).file_name().and_then(|s| s.to_str()).unwrap_or("");
    if prog == "env" {
        return Err(Error::usage(
            "the server command starts with `env`: environment for the profiled server must be set on the nsys process itself (use --env NAME=VALUE), never `nsys … -- env VAR=v cmd`",
        )
        .with_arg("SERVER"));
    }
    if o.load.is_empty() {
        return Err(Error::usage("--load: empty command").with_arg("--load"));
    }
    if matches!(&o.warmup, Some(w) if w.is_empty()) {
        return Err(Error::usage("--warmup: empty command").with_arg("--warmup"));
    }
    let trace: Vec<&str> = o.trace.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if trace.is_empty() {
        return Err(Error::usage("--trace: empty list").with_arg("--trace"));
    }
    let cuda = trace.iter().any(|t| *t == "cuda" || t.starts_with("cuda-"));
    let timed = o.delay_s.is_some() || o.duration_s.is_some();
    let ranged = o.capture_range.as_deref().is_some_and(|r| r != "none");
    if timed && ranged {
        return Err(Error::usage(
            "--delay/--duration (time-bounded window) and --capture-range (range-bounded window) exclude each other",
        )
        .with_arg("--capture-range"));
    }
    for (v, f) in [(o.delay_s, "--delay"), (o.duration_s, "--duration")] {
        if let Some(x) = v {
            if !(x.is_finite() && x >= 0.0) || (f == "--duration" && x <= 0.0) {
                return Err(Error::usage(format!("{f} {x}: expected a positive number of seconds")).with_arg(f));
            }
        }
    }
    if o.warmup.is_some() && !timed && !ranged {
        return Err(Error::usage(
            "--warmup needs a capture window that opens after it: --delay SECONDS [--duration SECONDS] or --capture-range cudaProfilerApi",
        )
        .with_arg("--warmup"));
    }
    if o.warmup.is_some() && timed && o.delay_s.is_none() {
        return Err(Error::usage("--warmup with a time-bounded window needs --delay SECONDS: the window would open at launch, before the warmup").with_arg("--delay"));
    }
    if o.capture_range_end.is_some() && !ranged {
        return Err(Error::usage("--capture-range-end needs --capture-range").with_arg("--capture-range-end"));
    }
    let mut added = Vec::new();
    let mut args: Vec<String> = vec!["profile".into(), format!("--trace={}", trace.join(","))];
    // mandatory flags
    let user_graph = o.flags.iter().find(|f| f.starts_with("--cuda-graph-trace"));
    if let Some(f) = user_graph {
        if !f.starts_with("--cuda-graph-trace=node") {
            return Err(Error::usage(format!(
                "--flags: '{f}' refused: graph-replayed kernels only exist in a trace taken with --cuda-graph-trace=node (serve-capture adds it when CUDA is traced)"
            ))
            .with_arg("--flags"));
        }
    }
    if cuda {
        if !caps.cuda_graph_trace {
            return Err(Error::usage(
                "refused: CUDA is traced but this nsys has no --cuda-graph-trace (graph-replayed kernels would be invisible); use a newer nsys or trace without cuda",
            )
            .with_arg("--trace"));
        }
        if user_graph.is_none() {
            args.push("--cuda-graph-trace=node".into());
            added.push(AddedFlag {
                flag: "--cuda-graph-trace=node".into(),
                why: "CUDA is traced: graph-replayed kernels only exist at node level".into(),
            });
        }
    }
    let user_fork = o.flags.iter().find(|f| f.starts_with("--trace-fork-before-exec"));
    if o.cuda_child {
        if !caps.trace_fork_before_exec {
            return Err(Error::usage(
                "refused: --cuda-child needs --trace-fork-before-exec=true, which this nsys does not have",
            )
            .with_arg("--cuda-child"));
        }
        match user_fork {
            Some(f) if f != "--trace-fork-before-exec=true" => {
                return Err(Error::usage(format!("--flags: '{f}' refused: the CUDA process is a child (--cuda-child), which needs --trace-fork-before-exec=true")).with_arg("--flags"))
            }
            Some(_) => {}
            None => {
                args.push("--trace-fork-before-exec=true".into());
                added.push(AddedFlag { flag: "--trace-fork-before-exec=true".into(), why: "--cuda-child: the CUDA process is a child of the launched one".into() });
            }
        }
    }
    if let Some(d) = o.delay_s {
        args.push(format!("--delay={}", fmt_secs(d)));
    }
    if let Some(d) = o.duration_s {
        args.push(format!("--duration={}", fmt_secs(d)));
    }
    if ranged {
        let r = o.capture_range.as_deref().unwrap_or_default();
        if !caps.capture_range {
            return Err(Error::usage("refused: this nsys has no --capture-range").with_arg("--capture-range"));
        }
        args.push(format!("--capture-range={r}"));
        let end = o.capture_range_end.clone().unwrap_or_else(|| "stop".into());
        if !caps.capture_range_end {
            return Err(Error::usage("refused: this nsys has no --capture-range-end (needed so that the server keeps running after the range)").with_arg("--capture-range-end"));
        }
        args.push(format!("--capture-range-end={end}"));
        if o.capture_range_end.is_none() {
            added.push(AddedFlag {
                flag: "--capture-range-end=stop".into(),
                why: "the server keeps running after the range; serve-capture stops it".into(),
            });
        }
    }
    for f in &o.flags {
        if let Some(use_instead) = owned_flag(f) {
            return Err(
                Error::usage(format!("--flags: '{f}' is set by serve-capture: use {use_instead}")).with_arg("--flags")
            );
        }
    }
    // --kill exists in every nsys serve-capture supports (2020.x onwards); resolve does not track it
    let user_kill = o.flags.iter().any(|f| f.starts_with("--kill"));
    if !user_kill {
        args.push("--kill=none".into());
        added.push(AddedFlag {
            flag: "--kill=none".into(),
            why: "nsys must not signal the server when the window ends: the load client spans the window, and serve-capture stops the recorded PIDs itself".into(),
        });
    }
    args.extend(o.flags.iter().cloned());
    args.push(format!("--output={}", report_base.display()));
    args.extend(o.server.iter().cloned());
    Ok((args, added))
}

fn fmt_secs(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as u64)
    } else {
        format!("{x}")
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The run

struct Tracked {
    rec: ProcessRecord,
    child: Option<Child>,
    /// When it was recorded (an exit seen by the [`procs::ExitWatcher`] before this is someone else's).
    since: Instant,
}

struct Run<'a> {
    o: &'a ServeCaptureOptions,
    t0: Instant,
    out: PathBuf,
    pids_dir: PathBuf,
    procs: Vec<Tracked>,
    failures: Vec<Failure>,
    stop_seen: Option<i32>,
    /// The one redaction rule for every document and message of this run.
    red: crate::resolve::Redactor,
    /// Exit statuses of processes that are not our children (the server's workers), when the kernel's
    /// process-event connector is available (root).
    watcher: Option<procs::ExitWatcher>,
    /// A worker of the server failed while its parent lived (`stage: worker` recorded).
    worker_failed: bool,
    /// What the preflight fixed.
    p: Plan,
    /// The recorded processes: nsys, the server, the clients (indices into `procs`).
    prof: usize,
    server_i: Option<usize>,
    warmup_i: Option<usize>,
    load_i: Option<usize>,
    ready: Option<Ready>,
    injection: Vec<InjectionFinding>,
    /// `--module`s, their loading filled in by [`Run::scan_modules`].
    modules: Vec<engine::ModuleRecord>,
    iterations: Option<IterationsResult>,
}

impl Run<'_> {
    fn now(&self) -> f64 {
        (self.t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
    }
    fn fail(&mut self, stage: &str, reason: impl Into<String>) {
        let reason = self.red.text(&reason.into());
        eprintln!("serve-capture: {stage}: {reason}");
        self.failures.push(Failure { stage: stage.into(), reason });
    }
    fn say(&self, msg: impl AsRef<str>) {
        eprintln!("serve-capture: [{:7.2}s] {}", self.t0.elapsed().as_secs_f64(), self.red.text(msg.as_ref()));
    }
    /// A stop signal arrived (recorded once as a failure).
    fn stopped(&mut self) -> bool {
        let s = self.o.stop.signal();
        if s != 0 && self.stop_seen.is_none() {
            self.stop_seen = Some(s);
            self.fail(
                "interrupted",
                format!("{} received: stopping and cleaning up the recorded processes", procs::signal_name(s)),
            );
        }
        s != 0
    }

    fn record(&mut self, role: &str, pid: i32, starttime: u64, argv: Vec<String>, child: Option<Child>) -> usize {
        let rec = ProcessRecord {
            role: role.into(),
            pid: pid as i64,
            starttime_ticks: starttime,
            parent_pid: procs::stat(pid).map(|s| s.ppid as i64).unwrap_or(-1),
            argv: self.red.argv(&argv),
            recorded_at_s: self.now(),
            signals_sent: Vec::new(),
            ended: None,
            ended_at_s: None,
            gone: false,
        };
        let n = self.procs.iter().filter(|p| p.rec.role == role).count();
        let file = if n == 0 { format!("{role}.pid") } else { format!("{role}.{n}.pid") };
        let _ = std::fs::write(self.pids_dir.join(file), format!("{pid} {starttime}\n"));
        self.procs.push(Tracked { rec, child, since: Instant::now() });
        self.procs.len() - 1
    }

    fn is_recorded(&self, pid: i32) -> bool {
        self.procs.iter().any(|p| p.rec.pid == pid as i64)
    }

    /// Spawn a client (warmup/load) in its own session with stdout/stderr to files; record it.
    fn spawn_client(&mut self, role: &str, argv: &[String]) -> std::result::Result<usize, String> {
        let so = self.out.join(format!("{role}.stdout"));
        let se = self.out.join(format!("{role}.stderr"));
        let f1 = File::create(&so).map_err(|e| format!("{}: {e}", so.display()))?;
        let f2 = File::create(&se).map_err(|e| format!("{}: {e}", se.display()))?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(f1).stderr(f2);
        if let Some(d) = &self.o.cwd {
            cmd.current_dir(d);
        }
        if let Some(g) = self.o.gpu {
            cmd.env("CUDA_VISIBLE_DEVICES", g.to_string());
        }
        new_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
        let pid = child.id() as i32;
        let st = procs::stat(pid).map(|s| s.starttime).unwrap_or(0);
        Ok(self.record(role, pid, st, argv.to_vec(), Some(child)))
    }

    /// Has tracked process `i` ended? Reaps our children and records how.
    fn poll_end(&mut self, i: usize) -> bool {
        let now = self.now();
        let (watcher, t) = (&self.watcher, &mut self.procs[i]);
        if t.rec.ended.is_some() {
            return true;
        }
        let ended = match &mut t.child {
            Some(c) => match c.try_wait() {
                Ok(Some(st)) => Some(describe_status(st)),
                Ok(None) => None,
                Err(_) => Some("gone".into()),
            },
            None if !procs::alive(t.rec.pid as i32, t.rec.starttime_ticks) => {
                // a worker of the server: its status from the zombie entry, else the process-event connector
                let status = if t.rec.role == "server-child" {
                    let (pid, since) = (t.rec.pid as i32, t.since);
                    procs::zombie_status(pid).or_else(|| {
                        let w = watcher.as_ref()?;
                        // the event may still be on its way from the socket to the watcher thread
                        w.status(pid, since).or_else(|| {
                            std::thread::sleep(Duration::from_millis(100));
                            w.status(pid, since)
                        })
                    })
                } else {
                    None
                };
                Some(status.map(procs::describe_wait_status).unwrap_or_else(|| "gone".to_string()))
            }
            None => None,
        };
        if let Some(e) = ended {
            t.rec.ended = Some(e);
            t.rec.ended_at_s = Some(now);
            true
        } else {
            false
        }
    }

    /// Wait for process `i` up to `limit`, stopping early on a stop signal (unless `ignore_stop`) or when
    /// `also` says so. Returns whether it ended.
    fn wait_for(
        &mut self,
        i: usize,
        limit: Duration,
        ignore_stop: bool,
        mut also: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.poll_end(i) {
                return true;
            }
            if Instant::now() >= until || (!ignore_stop && self.stopped()) || also(self) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Watch the server's process tree while the run is live: record new descendants, and reject the sample
    /// (`stage: worker`) when one exits non-zero or dies on a signal while its parent lives. Returns true once
    /// such a failure was recorded (callers stop waiting).
    fn watch_workers(&mut self, server: usize) -> bool {
        if self.worker_failed {
            return true;
        }
        record_tree(self, server);
        for i in 0..self.procs.len() {
            if self.procs[i].rec.role != "server-child" || self.procs[i].rec.ended.is_some() {
                continue;
            }
            if !self.poll_end(i) {
                continue;
            }
            let rec = self.procs[i].rec.clone();
            let ended = rec.ended.clone().unwrap_or_default();
            let parent = rec.parent_pid as i32;
            let parent_alive =
                self.procs.iter().any(|p| p.rec.pid == rec.parent_pid && procs::alive(parent, p.rec.starttime_ticks));
            if ended == "exit 0" || !parent_alive {
                continue;
            }
            if ended == "gone" {
                self.say(format!("worker pid {} ({}) ended while its parent {parent} lives; its exit status is unknown (reaped by its parent, no process-event connector)", rec.pid, rec.argv.join(" ")));
                continue;
            }
            self.fail(
                "worker",
                format!(
                    "worker pid {} ({}) of the server ended with {ended} while its parent pid {parent} still runs: the sample is rejected",
                    rec.pid,
                    rec.argv.join(" ")
                ),
            );
            self.worker_failed = true;
            return true;
        }
        false
    }

    /// TERM, then KILL after the grace, process `i` (only while it is the recorded one).
    fn stop(&mut self, i: usize) {
        if self.poll_end(i) {
            return;
        }
        let grace = self.o.grace;
        for sig in [libc::SIGTERM, libc::SIGKILL] {
            let (pid, st) = (self.procs[i].rec.pid as i32, self.procs[i].rec.starttime_ticks);
            let sent = match &self.procs[i].child {
                // our own child: not reaped yet, so the PID cannot have been reused
                Some(_) => unsafe { libc::kill(pid, sig) == 0 },
                None => procs::signal_if_same(pid, st, sig),
            };
            if sent {
                self.procs[i].rec.signals_sent.push(procs::signal_name(sig));
                self.say(format!("{} {} ({})", procs::signal_name(sig), pid, self.procs[i].rec.role));
            }
            let limit = if sig == libc::SIGKILL { Duration::from_secs(5) } else { grace };
            if self.wait_for(i, limit, true, |_| false) {
                return;
            }
        }
    }
}

fn new_session(cmd: &mut Command) {
    // SAFETY: setsid(2) is async-signal-safe; it runs in the forked child before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn describe_status(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {}", procs::signal_name(s)),
        _ => "ended".into(),
    }
}

fn exit_code_of(ended: &Option<String>) -> Option<i32> {
    ended.as_deref()?.strip_prefix("exit ")?.parse().ok()
}

fn signal_of(ended: &Option<String>) -> Option<String> {
    ended.as_deref()?.strip_prefix("signal ").map(str::to_string)
}

fn basename(s: &str) -> &str {
    Path::new(s).file_name().and_then(|n| n.to_str()).unwrap_or(s)
}

/// Find the server among the profiler's descendants: the earliest one whose argv[0] (or comm, which the
/// kernel truncates to 15 bytes) has the basename of the server command's argv[0]; nsys's own processes
/// (`nsys*` comm, e.g. `nsys-launcher`, `nsys-tee`) are skipped.
pub fn find_server(profiler: i32, server_argv0: &str) -> Option<procs::ProcStat> {
    let want = basename(server_argv0);
    let want_comm: String = want.chars().take(15).collect();
    procs::descendants(profiler).into_iter().find(|p| {
        if p.comm.starts_with("nsys") {
            return false;
        }
        let cl = procs::cmdline(p.pid);
        cl.first().map(|a| basename(a) == want).unwrap_or(false) || p.comm == want_comm
    })
}

fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // nsys progress bars are \r-separated
    let all: Vec<&str> = text.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// What the preflight fixed before anything starts: the URLs, the run folder, the resolved nsys and its argv,
/// the provenance facts the later steps need, the window.
struct Plan {
    health: http::Url,
    urls: Vec<(String, http::Url)>,
    is_local: bool,
    out: PathBuf,
    nsys: PathBuf,
    version: String,
    args: Vec<String>,
    added: Vec<AddedFlag>,
    nsys_argv: Vec<String>,
    files: Files,
    gpu_start: Option<crate::resolve::GpuState>,
    gpu_pin: Option<GpuPin>,
    timed: bool,
    window: Window,
    preflight_failed: Option<String>,
    launcher: Option<engine::LauncherCheck>,
    /// `--iteration-records`, absolute.
    iter_path: Option<PathBuf>,
}

/// Run the whole lifecycle. Errors (exit 2) only before anything was started; afterwards every problem is a
/// failure in the document (exit 1), and the recorded processes are always cleaned up.
pub fn run(o: &ServeCaptureOptions) -> Result<ServeCaptureDoc> {
    let t0 = Instant::now();
    let plan = preflight(o)?;
    let mut r = Run::new(o, t0, plan);
    if let Some(reason) = r.p.preflight_failed.clone() {
        return r.refused(reason);
    }
    r.launch()?;
    // each step returns false when the run cannot go on; the cleanup always runs
    // the modules are looked up in the live server processes' maps after each step
    let _ = r.ready() && r.scan_modules() && r.warmup() && r.scan_modules() && r.load();
    r.scan_modules();
    let (cleanup, gpu_end) = r.shutdown();
    r.collect_iterations();
    let (capture, gate) = r.analyse();
    r.record_run(cleanup, gpu_end, capture, gate)
}

/// Step 1, before anything is created or started: the usage checks, nsys-resolve (the nsys, its capabilities,
/// the preflight), the nsys argv; then the run folder, `run-state` and the provenance written at start.
fn preflight(o: &ServeCaptureOptions) -> Result<Plan> {
    // the launcher contract and the prebuilt modules, before anything else: exit 2, nothing created or started
    let reqs = engine::requirements(&o.require_argv, o.engine.as_deref(), o.capture_range.as_deref())?;
    if o.server.is_empty() {
        return Err(Error::usage("no server command after --"));
    }
    engine::check_argv(&o.server, &reqs)?;
    let launcher = (!reqs.is_empty() || o.engine.is_some()).then(|| engine::LauncherCheck {
        engine: o.engine.clone(),
        required: reqs,
        checked_argv: redactor(o).argv(&o.server),
    });
    engine::inspect_modules(&o.modules, o.cwd.as_deref(), o.strict_prebuilt)?;
    let iter_path = o.iteration_records.as_ref().map(|p| match (p.is_absolute(), &o.cwd) {
        (true, _) => p.clone(),
        (false, Some(d)) => d.join(p),
        (false, None) => std::path::absolute(p).unwrap_or_else(|_| p.clone()),
    });
    if let Some(p) = &iter_path {
        if let Some((_, v)) =
            o.env.iter().find(|(k, v)| k == crate::iterations::RECORDS_ENV && Path::new(v) != p.as_path())
        {
            return Err(Error::usage(format!(
                "--env {}={v} contradicts --iteration-records {}: give the path once (serve-capture sets {} itself)",
                crate::iterations::RECORDS_ENV,
                p.display(),
                crate::iterations::RECORDS_ENV
            ))
            .with_arg("--iteration-records"));
        }
        if p.exists() {
            return Err(Error::usage(format!(
                "--iteration-records {}: exists already: records from an earlier run would be taken as this run's; remove it or give a fresh path",
                p.display()
            ))
            .with_arg("--iteration-records"));
        }
    }
    let health = http::Url::parse(&o.health).map_err(|e| e.with_arg("--health"))?;
    let mut urls = vec![(o.health.clone(), health.clone())];
    if let Some(m) = &o.models {
        urls.push((m.clone(), http::Url::parse(m).map_err(|e| e.with_arg("--models"))?));
    }
    let is_local = matches!(health.host.as_str(), "127.0.0.1" | "localhost" | "::1" | "0.0.0.0");
    let abs_out = if o.out.is_absolute() {
        o.out.clone()
    } else if let Some(d) = &o.cwd {
        d.join(&o.out)
    } else {
        std::env::current_dir().map_err(|e| Error::env(format!("cannot read the current folder: {e}")))?.join(&o.out)
    };
    if abs_out.exists() {
        let empty = std::fs::read_dir(&abs_out)
            .map(|mut d| d.next().is_none())
            .map_err(|e| Error::usage(format!("--out {}: {e}", abs_out.display())).with_arg("--out"))?;
        if !empty {
            return Err(Error::usage(format!(
                "--out {}: exists and is not empty: give a fresh run folder",
                abs_out.display()
            ))
            .with_arg("--out"));
        }
    }
    // nsys-resolve: the nsys, its capabilities, the preflight (GPU, port) and the provenance document
    let join = |v: &[String]| shlex::try_join(v.iter().map(String::as_str)).unwrap_or_else(|_| v.join(" "));
    // the workload: the flags and the load command's own flags (a disagreement is exit 2, nothing started)
    let workload = crate::resolve::workload::from_command(
        &o.workload,
        Some(&o.load),
        Some(crate::resolve::redact_command(&join(&o.load)).0),
        o.cwd.as_deref(),
    )?;
    for w in crate::resolve::workload::warnings(&workload, o.tier == crate::gate::Tier::Decode) {
        eprintln!("serve-capture: warning: {w}");
    }
    if let Some(f) = o.server.iter().find(|w| crate::compare::checks::EAGER_FLAGS.contains(&w.as_str())) {
        eprintln!(
            "serve-capture: warning: the server command carries {f}: an eager capture of a graph-mode engine is a cross-check only, never the measurement of record (capture-compare says so)"
        );
    }
    let popts = crate::resolve::ProvenanceOptions {
        resolve: crate::resolve::ResolveOptions {
            nsys: o.nsys.clone(),
            require_explicit: o.require_explicit_nsys || o.resolve.require_explicit,
            ..o.resolve.clone()
        },
        preflight: true,
        port: is_local.then_some(health.port),
        flags: Some(join(&o.flags)),
        server_cmd: Some(join(&o.server)),
        client_cmd: Some(join(&o.load)),
        env: o.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        gpu: o.gpu,
        nvidia_smi: o.nvidia_smi.clone(),
        repo: o.engine_repo.clone(),
        instrumentation: o.instrumentation.clone(),
        shm: o.shm.clone(),
        workload: Some(workload),
        ..Default::default()
    };
    let red = redactor(o);
    let prov = crate::resolve::run(&popts)?;
    let nsys = prov.nsys.path.clone();
    let version = prov.nsys.version.clone();
    // everything is checked before anything is created or started
    let (args, added) = build_nsys_args(o, &prov.nsys.capabilities, &abs_out.join("capture"))?;
    let out = abs_out;
    std::fs::create_dir_all(out.join("pids"))
        .map_err(|e| Error::env(format!("--out {}: cannot create: {e}", out.display())).with_arg("--out"))?;
    let mut nsys_argv = vec![nsys.display().to_string()];
    nsys_argv.extend(red.argv(&args));
    // the run has started: gate-check, report and capture-compare refuse this folder until it ends
    write_run_state(&out, "running");
    // provenance written at start, before the server is launched
    let mut prov = prov;
    prov.capture.flags_argv = red.argv(&args);
    prov.capture.launcher = launcher.clone();
    prov.capture.server_environment = server_environment(o, gpu_pin_value(o), iter_path.as_deref());
    let prov: crate::resolve::Provenance =
        serde_json::from_str(&red.json(&prov)).expect("a redacted provenance reads back");
    crate::resolve::write_record(&out, &prov)?;
    let gpu_pin = o.gpu.map(|index| GpuPin {
        index,
        uuid: prov.gpu.as_ref().and_then(|g| g.gpus.iter().find(|x| x.index == index)).map(|x| x.uuid.clone()),
        cuda_visible_devices: index.to_string(),
    });

    let files = Files {
        provenance: out.join("provenance.json").display().to_string(),
        pids_dir: out.join("pids").display().to_string(),
        nsys_log: out.join("nsys.log").display().to_string(),
        document: out.join("serve-capture.json").display().to_string(),
        ..Default::default()
    };
    let preflight_failed = (prov.verdict != "PASS").then(|| prov.reason.clone());
    let gpu_start = prov.gpu.clone();

    let timed = o.delay_s.is_some() || o.duration_s.is_some();
    let ranged = o.capture_range.as_deref().is_some_and(|r| r != "none");
    let window = Window {
        mode: if timed {
            "time"
        } else if ranged {
            "range"
        } else {
            "whole"
        }
        .into(),
        delay_s: o.delay_s,
        duration_s: o.duration_s,
        capture_range: o.capture_range.clone().filter(|_| ranged),
        capture_range_end: ranged.then(|| o.capture_range_end.clone().unwrap_or_else(|| "stop".into())),
        start_est_s: None,
        end_est_s: None,
        analysis_iterations: o.iterations.map(|(a, b)| format!("{a}:{b}")),
    };

    Ok(Plan {
        health,
        urls,
        is_local,
        out,
        nsys,
        version,
        args,
        added,
        nsys_argv,
        files,
        gpu_start,
        gpu_pin,
        timed,
        window,
        preflight_failed,
        launcher,
        iter_path,
    })
}

impl<'a> Run<'a> {
    fn new(o: &'a ServeCaptureOptions, t0: Instant, p: Plan) -> Run<'a> {
        if matches!(o.stop, StopSource::ProcessSignals) {
            procs::install_stop_handlers();
        }
        let watcher = match procs::ExitWatcher::start() {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("serve-capture: note: no process-event connector ({e}): a worker's exit status is read only while it is a zombie");
                None
            }
        };
        Run {
            o,
            t0,
            out: p.out.clone(),
            pids_dir: p.out.join("pids"),
            procs: Vec::new(),
            failures: Vec::new(),
            stop_seen: None,
            red: redactor(o),
            watcher,
            worker_failed: false,
            p,
            prof: 0,
            server_i: None,
            ready: None,
            injection: Vec::new(),
            warmup_i: None,
            load_i: None,
            // read again at start (the preflight checked them): the identity of the files this run may load
            modules: engine::inspect_modules(&o.modules, o.cwd.as_deref(), false).unwrap_or_default(),
            iterations: None,
        }
    }

    /// Read the live server processes' /proc/PID/maps for the `--module`s. Always true (a step of the chain).
    fn scan_modules(&mut self) -> bool {
        if self.modules.is_empty() {
            return true;
        }
        let pids: Vec<i32> = self
            .procs
            .iter()
            .filter(|t| {
                matches!(t.rec.role.as_str(), "server" | "server-child")
                    && t.rec.ended.is_none()
                    && procs::alive(t.rec.pid as i32, t.rec.starttime_ticks)
            })
            .map(|t| t.rec.pid as i32)
            .collect();
        let at = self.now();
        engine::scan(&mut self.modules, &pids, at);
        self.check_modules(at)
    }

    /// After a scan: the readiness state of each module, files changed on disk, compile events; with
    /// `--strict-prebuilt` a module first loaded after readiness, or rebuilt during the run, fails the run
    /// (issue 39 B138: "finish every required process-local build before reporting server readiness").
    fn check_modules(&mut self, at: f64) -> bool {
        let ready = self.ready.as_ref().map(|r| r.at_s);
        let mut problems = Vec::new();
        for m in self.modules.iter_mut() {
            if ready.is_some() {
                match m.loaded_at_ready {
                    None => m.loaded_at_ready = Some(m.loaded),
                    Some(false) if m.loaded && m.first_seen_s == Some(at) => problems.push(format!(
                        "module {} was first loaded after readiness (mapped by pid {:?} at {at:.2} s, ready at {:.2} s)",
                        m.path,
                        m.loaded_by_pid,
                        ready.unwrap_or_default()
                    )),
                    _ => {}
                }
            }
            if m.changed.is_none() {
                if let Some(how) = engine::changed_on_disk(m) {
                    m.changed = Some(format!("{how} (seen at {at:.2} s)"));
                    problems.push(format!("module {} changed on disk during the run: {how}", m.path));
                }
            }
            let name = Path::new(&m.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            for t in self.procs.iter().filter(|t| matches!(t.rec.role.as_str(), "server" | "server-child")) {
                let names = t.rec.argv.iter().any(|w| w.contains(&m.path) || (!name.is_empty() && w.contains(&name)));
                if names && t.rec.role == "server-child" && !m.compile_events.iter().any(|c| c.pid == t.rec.pid) {
                    m.compile_events.push(engine::CompileEvent {
                        pid: t.rec.pid,
                        argv: t.rec.argv.clone(),
                        seen_at_s: t.rec.recorded_at_s,
                        after_ready: ready.is_some_and(|r| t.rec.recorded_at_s > r),
                    });
                }
            }
        }
        if !self.o.strict_prebuilt || problems.is_empty() {
            return true;
        }
        for p in problems {
            self.fail(
                "modules",
                format!(
                    "--strict-prebuilt: {p}: every process-local build must be finished and loaded before readiness"
                ),
            );
        }
        false
    }

    /// After shutdown: copy the server's iteration records into the run folder and validate them.
    fn collect_iterations(&mut self) {
        let Some(src) = self.p.iter_path.clone() else { return };
        let out = self.out.clone();
        let mut res = IterationsResult {
            source: src.display().to_string(),
            copy: None,
            document: None,
            verdict: None,
            records: 0,
            usable_as_time: false,
        };
        if !src.is_file() {
            self.fail(
                "iterations",
                format!(
                    "the server wrote no iteration records at {} (it is told the path through {}): does it write them?",
                    src.display(),
                    crate::iterations::RECORDS_ENV
                ),
            );
            self.iterations = Some(res);
            return;
        }
        let copy = out.join("iterations.jsonl");
        if let Err(e) = std::fs::copy(&src, &copy) {
            self.fail("iterations", format!("cannot copy {} to {}: {e}", src.display(), copy.display()));
            self.iterations = Some(res);
            return;
        }
        res.copy = Some(copy.display().to_string());
        match crate::iterations::validate_file(&copy) {
            Ok(d) => {
                let path = out.join("iterations.json");
                if let Err(e) = write_json_redacted(&path, &d, &self.red) {
                    self.fail("iterations", e.message);
                } else {
                    res.document = Some(path.display().to_string());
                    self.p.files.iterations = res.document.clone();
                }
                if d.verdict != "PASS" {
                    let first: Vec<String> = d
                        .problems
                        .iter()
                        .take(3)
                        .map(|p| format!("line {} {}: {}", p.line, p.path, p.message))
                        .collect();
                    self.fail(
                        "iterations",
                        format!(
                            "the iteration records fail validation ({} problem(s)): {}",
                            d.problems.len(),
                            first.join("; ")
                        ),
                    );
                }
                res.verdict = Some(d.verdict.clone());
                res.records = d.records;
                res.usable_as_time = d.usable_as_time;
            }
            Err(e) => self.fail("iterations", e.message),
        }
        self.iterations = Some(res);
    }

    /// The preflight said RETRY: nothing was started; the document says why.
    fn refused(&mut self, reason: String) -> Result<ServeCaptureDoc> {
        let r = self;
        let o = r.o;
        let (out, nsys, version) = (r.p.out.clone(), r.p.nsys.clone(), r.p.version.clone());
        r.fail(
            "preflight",
            format!("nsys-resolve says RETRY: {reason}; nothing was started (see {})", r.p.files.provenance),
        );
        let (schema, tool) = ServeCaptureDoc::header();
        let doc = ServeCaptureDoc {
            schema,
            tool,
            outcome: "failed".into(),
            failures: r.failures.clone(),
            out_dir: out.display().to_string(),
            files: r.p.files.clone(),
            nsys: NsysInfo { path: nsys.display().to_string(), version: version.clone() },
            window: r.p.window.clone(),
            nsys_argv: r.p.nsys_argv.clone(),
            added_flags: r.p.added.clone(),
            env_names: o.env.iter().map(|(k, _)| k.clone()).collect(),
            processes: vec![],
            ready: None,
            warmup: None,
            load: None,
            diagnostic: None,
            capture: None,
            gate: None,
            cleanup: Cleanup {
                all_gone: true,
                port: Some(r.p.health.port),
                gpu_check: Some("not checked".into()),
                gpu_reason: Some("nothing was started".into()),
                ..Default::default()
            },
            gpu_pin: r.p.gpu_pin.clone(),
            injection: vec![],
            gpu_end: None,
            launcher: r.p.launcher.clone(),
            modules: r.modules.clone(),
            iterations: None,
            wall_s: r.now(),
        };
        let doc = finish_doc(&r.red, &out, doc)?;
        write_run_state(&out, "failed");
        Ok(doc)
    }

    /// Step 2: `nsys profile … SERVER` in its own session, env set on the nsys process.
    fn launch(&mut self) -> Result<()> {
        let r = self;
        let o = r.o;
        let (out, nsys) = (r.p.out.clone(), r.p.nsys.clone());
        // 1. nsys profile … SERVER, in its own session, env set on the nsys process
        let log =
            File::create(out.join("nsys.log")).map_err(|e| Error::env(format!("{}/nsys.log: {e}", out.display())))?;
        let log2 = log.try_clone().map_err(|e| Error::env(format!("{}/nsys.log: {e}", out.display())))?;
        let mut cmd = Command::new(&nsys);
        cmd.args(&r.p.args).stdin(Stdio::null()).stdout(log).stderr(log2);
        if let Some(d) = &o.cwd {
            cmd.current_dir(d);
        }
        for (k, v) in &o.env {
            cmd.env(k, v);
        }
        if let Some(p) = &r.p.gpu_pin {
            cmd.env("CUDA_VISIBLE_DEVICES", &p.cuda_visible_devices);
        }
        if let Some(p) = &r.p.iter_path {
            cmd.env(crate::iterations::RECORDS_ENV, p);
        }
        new_session(&mut cmd);
        r.say(format!("starting {}", shlex::try_join(r.p.nsys_argv.iter().map(String::as_str)).unwrap_or_default()));
        let child = cmd.spawn().map_err(|e| Error::env(format!("cannot start {}: {e}", nsys.display())))?;
        let ppid = child.id() as i32;
        let pst = procs::stat(ppid).map(|s| s.starttime).unwrap_or(0);
        let argv = r.p.nsys_argv.clone();
        r.prof = r.record("profiler", ppid, pst, argv, Some(child));
        let launched_at = r.now();
        let ms = |x: f64| (x * 1000.0).round() / 1000.0;
        if let Some(d) = o.delay_s {
            r.p.window.start_est_s = Some(ms(launched_at + d));
            r.p.window.end_est_s = o.duration_s.map(|x| ms(launched_at + d + x));
        } else if let Some(x) = o.duration_s {
            r.p.window.start_est_s = Some(launched_at);
            r.p.window.end_est_s = Some(ms(launched_at + x));
        }

        Ok(())
    }

    /// Step 3: readiness (the server found under nsys, every URL 2xx, its workers recorded and watched, a
    /// foreign CUDA injector in their environment refused).
    fn ready(&mut self) -> bool {
        let r = self;
        let ppid = r.procs[r.prof].rec.pid as i32;
        let urls = r.p.urls.clone();
        let o = r.o;
        let out = r.p.out.clone();
        let prof = r.prof;
        let deadline = Instant::now() + o.ready_timeout;
        let mut polls = 0u64;
        let mut last = String::new();
        loop {
            if r.stopped() {
                return false;
            }
            if r.server_i.is_none() {
                if let Some(s) = find_server(ppid, &o.server[0]) {
                    r.say(format!("server pid {} ({})", s.pid, s.comm));
                    r.server_i = Some(r.record("server", s.pid, s.starttime, procs::cmdline(s.pid), None));
                }
            }
            if r.poll_end(prof) {
                let how = r.procs[prof].rec.ended.clone().unwrap_or_default();
                r.fail(
                    "ready",
                    format!(
                        "the profiled process exited ({how} of nsys) before the server was ready; nsys.log: {}",
                        tail_of(&out.join("nsys.log"), 4)
                    ),
                );
                return false;
            }
            if let Some(si) = r.server_i {
                if r.poll_end(si) {
                    r.fail(
                        "ready",
                        format!(
                            "the server (pid {}) exited before it was ready; nsys.log: {}",
                            r.procs[si].rec.pid,
                            tail_of(&out.join("nsys.log"), 4)
                        ),
                    );
                    return false;
                }
                if r.watch_workers(si) {
                    return false;
                }
            }
            polls += 1;
            let mut all_ok = true;
            for (s, u) in &urls {
                match http::get_status(u, Duration::from_secs(2)) {
                    Ok(c) if (200..300).contains(&c) => {}
                    Ok(c) => {
                        all_ok = false;
                        last = format!("{s} answered {c}");
                        break;
                    }
                    Err(e) => {
                        all_ok = false;
                        last = format!("{s}: {e}");
                        break;
                    }
                }
            }
            if all_ok {
                if r.server_i.is_none() {
                    if let Some(s) = find_server(ppid, &o.server[0]) {
                        r.server_i = Some(r.record("server", s.pid, s.starttime, procs::cmdline(s.pid), None));
                    }
                }
                let at = r.now();
                r.say(format!("ready after {polls} polls"));
                r.ready = Some(Ready { urls: urls.iter().map(|(s, _)| s.clone()).collect(), at_s: at, polls });
                break;
            }
            if Instant::now() >= deadline {
                r.fail(
                    "ready",
                    format!("not ready after {} s (--ready-timeout); last: {last}", o.ready_timeout.as_secs_f64()),
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let Some(si) = r.server_i else {
            r.fail("server", format!("the server answers, but no descendant of nsys (pid {ppid}) runs '{}': serve-capture cannot stop it safely (is the URL served by another process?)", o.server[0]));
            return false;
        };
        record_tree(r, si);
        record_helpers(r, ppid);
        // a CUDA injector already in the engine's environment replaces nsys's (before any capture window)
        let cuda = o.trace.split(',').any(|t| t.trim() == "cuda" || t.trim().starts_with("cuda-"));
        for i in 0..r.procs.len() {
            let rec = r.procs[i].rec.clone();
            if !matches!(rec.role.as_str(), "server" | "server-child") {
                continue;
            }
            if let Some(v) = procs::environ_var(rec.pid as i32, "CUDA_INJECTION64_PATH")
                .filter(|v| !v.is_empty() && !crate::resolve::is_nsys_injection(v))
            {
                r.injection.push(InjectionFinding {
                    role: rec.role.clone(),
                    pid: rec.pid,
                    value: v.clone(),
                    blocks_cuda_tracing: cuda,
                });
                let why = crate::resolve::cuda_injection_reason(
                    &v,
                    &format!("in /proc/{}/environ of the {} process", rec.pid, rec.role),
                );
                if cuda {
                    r.fail(
                        "injection",
                        format!("{why}; nothing was captured on purpose: the run stops before the warmup"),
                    );
                } else {
                    eprintln!("serve-capture: warning: {} (CUDA is not traced in this run)", r.red.text(&why));
                }
            }
        }
        if r.failures.iter().any(|f| f.stage == "injection") {
            return false;
        }

        true
    }

    /// Step 4: the warmup client, outside the capture window (and the time-window check).
    fn warmup(&mut self) -> bool {
        let r = self;
        let o = r.o;
        let out = r.p.out.clone();
        let timed = r.p.timed;
        let window = r.p.window.clone();
        let Some(si) = r.server_i else { return false };
        // 3. warmup, outside the capture window
        if let Some(w) = &o.warmup {
            r.say(format!("warmup: {}", w.join(" ")));
            let i = match r.spawn_client("warmup", w) {
                Ok(i) => i,
                Err(e) => {
                    r.fail("warmup", e);
                    return false;
                }
            };
            r.warmup_i = Some(i);
            if !r.wait_for(i, o.client_timeout, false, |r| r.poll_end(si) || r.watch_workers(si)) {
                if r.stop_seen.is_none() && !r.worker_failed {
                    if r.procs[si].rec.ended.is_some() {
                        r.fail("server", format!("the server (pid {}) exited during the warmup", r.procs[si].rec.pid));
                    } else {
                        r.fail(
                            "warmup",
                            format!(
                                "the warmup client did not finish within {} s (--client-timeout)",
                                o.client_timeout.as_secs_f64()
                            ),
                        );
                    }
                }
                return false;
            }
            let ended = r.procs[i].rec.ended.clone();
            if ended.as_deref() != Some("exit 0") {
                r.fail(
                    "warmup",
                    format!(
                        "the warmup client failed ({}); see {}/warmup.stderr",
                        ended.unwrap_or_default(),
                        out.display()
                    ),
                );
                return false;
            }
        }
        if let Some(ws) = window.start_est_s {
            if timed && o.delay_s.is_some() && r.now() >= ws {
                r.fail("window", format!(
                    "readiness and warmup took until {:.1} s, past the capture start (~{ws:.1} s = nsys launch + --delay {}): the warmup would be inside the capture; raise --delay",
                    r.now(), fmt_secs(o.delay_s.unwrap_or(0.0))
                ));
                return false;
            }
        }

        true
    }

    /// Step 5: the load client spanning the window; in time mode the wait for the window to close.
    fn load(&mut self) -> bool {
        let r = self;
        let o = r.o;
        let out = r.p.out.clone();
        let (timed, prof) = (r.p.timed, r.prof);
        let window = r.p.window.clone();
        let Some(si) = r.server_i else { return false };
        // 4. the load client, spanning the capture window
        r.say(format!("load: {}", o.load.join(" ")));
        let i = match r.spawn_client("load", &o.load) {
            Ok(i) => i,
            Err(e) => {
                r.fail("load", e);
                return false;
            }
        };
        r.load_i = Some(i);
        let server_died = |r: &mut Run| r.poll_end(si) || (!timed && r.poll_end(prof)) || r.watch_workers(si);
        if !r.wait_for(i, o.client_timeout, false, server_died) {
            if r.stop_seen.is_none() && !r.worker_failed {
                if r.procs[si].rec.ended.is_some() || r.procs[prof].rec.ended.is_some() {
                    r.fail(
                        "server",
                        format!(
                            "the server (pid {}) exited during the load (mid-run); nsys.log: {}",
                            r.procs[si].rec.pid,
                            tail_of(&out.join("nsys.log"), 3)
                        ),
                    );
                } else {
                    r.fail(
                        "load",
                        format!(
                            "the load client did not finish within {} s (--client-timeout)",
                            o.client_timeout.as_secs_f64()
                        ),
                    );
                }
            }
            return false;
        }
        let ended = r.procs[i].rec.ended.clone();
        if r.watch_workers(si) {
            return false;
        }
        if ended.as_deref() != Some("exit 0") {
            // A client that fails because the server is going away often sees the closed socket a moment before
            // the server process is gone: give the server a short grace before blaming the client.
            let grace_from = Instant::now();
            let died = loop {
                if r.poll_end(si) {
                    break true;
                }
                if grace_from.elapsed() >= Duration::from_secs(2) {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let stage = if died { "server" } else { "load" };
            let why = if died {
                format!("; the server (pid {}) exited during the load (mid-run)", r.procs[si].rec.pid)
            } else {
                String::new()
            };
            r.fail(
                stage,
                format!(
                    "the load client failed ({}){why}; see {}/load.stderr",
                    ended.unwrap_or_default(),
                    out.display()
                ),
            );
        }

        // 5. time mode: wait for the window to close (nsys exits by itself after --duration with --kill=none)
        if let Some(we) = window.end_est_s {
            let left = (we - r.now()).max(0.0);
            r.say(format!("waiting for the capture window to close (~{left:.1} s) and nsys to write its report"));
            let limit = Duration::from_secs_f64(left) + o.finalize_timeout;
            if !r.wait_for(prof, limit, false, |r| r.watch_workers(si)) && r.stop_seen.is_none() && !r.worker_failed {
                r.fail(
                    "capture",
                    format!(
                        "nsys did not end within {} s after the window closed (--finalize-timeout)",
                        o.finalize_timeout.as_secs_f64()
                    ),
                );
            }
        }
        if timed {
            let li = &r.procs[i].rec;
            let (ls, le) = (li.recorded_at_s, li.ended_at_s.unwrap_or(f64::MAX));
            let spans = window.start_est_s.is_some_and(|ws| ls <= ws) && window.end_est_s.is_none_or(|we| le >= we);
            if !spans && r.failures.is_empty() {
                r.fail("window", format!(
                    "the load client ran {ls:.1}–{le:.1} s but the capture window is ~{:.1}–{} s: it must start before the window opens and end after it closes",
                    window.start_est_s.unwrap_or(0.0),
                    window.end_est_s.map(|x| format!("{x:.1}")).unwrap_or_else(|| "exit".into())
                ));
            }
        }
        true
    }

    /// Step 6: stop only the recorded PIDs (reverse launch order); verify the port and the GPU are released.
    fn shutdown(&mut self) -> (Cleanup, Option<crate::resolve::GpuState>) {
        let r = self;
        let o = r.o;
        let prof = r.prof;
        // 6. cleanup: only the recorded PIDs, reverse launch order
        let server_i = r.server_i;
        cleanup(r, prof, server_i);
        // a stop signal during the shutdown itself counts as one before it: no post-processing, 128 + signal
        r.stopped();
        let stop_signal = r.stop_seen;
        let all_gone = r.procs.iter_mut().all(|t| {
            let c = t.child.as_mut().map(|c| matches!(c.try_wait(), Ok(Some(_)))).unwrap_or(false);
            t.rec.gone = t.rec.ended.is_some() || c || !procs::alive(t.rec.pid as i32, t.rec.starttime_ticks);
            t.rec.gone
        });
        if !all_gone {
            let left: Vec<String> =
                r.procs.iter().filter(|t| !t.rec.gone).map(|t| format!("{} {}", t.rec.role, t.rec.pid)).collect();
            r.fail("cleanup", format!("still running after TERM and KILL: {}", left.join(", ")));
        }
        let port = r.p.health.port;
        let port_released = if r.p.is_local {
            let until = Instant::now() + o.grace;
            let mut listening = procs::port_listening(port);
            while listening && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
                listening = procs::port_listening(port);
            }
            if listening {
                r.fail("cleanup", format!("port {port} is still listening after cleanup (a process serve-capture did not record holds it; it was not touched)"));
            }
            Some(!listening)
        } else {
            None
        };
        let gpu_start = r.p.gpu_start.clone();
        // the GPU resources: no recorded PID on a GPU, memory used back at its level at start
        let (gpu_check, gpu_end) = verify_gpu(r, gpu_start.as_ref());

        (Cleanup { all_gone, port: Some(port), port_released, stop_signal, ..gpu_check }, gpu_end)
    }

    /// Step 7: export and summarise the report; gate-check and sqlite-ranges into the run folder.
    fn analyse(&mut self) -> (Option<CaptureResult>, Option<GateSummary>) {
        let r = self;
        let window = r.p.window.clone();
        let o = r.o;
        let (out, nsys, version) = (r.p.out.clone(), r.p.nsys.clone(), r.p.version.clone());
        let prof = r.prof;
        // 7. the report: export and summarise (not after a stop signal, whenever it came)
        let mut capture = None;
        let mut files = r.p.files.clone();
        if !r.stopped() {
            let rep = out.join("capture.nsys-rep");
            let nsys_ended = r.procs[prof].rec.ended.clone();
            if rep.is_file() {
                files.report = Some(rep.display().to_string());
                match export_report(&nsys, &rep, &out.join("capture.sqlite")) {
                    Ok((ranges, total, kernels)) => {
                        files.sqlite = Some(out.join("capture.sqlite").display().to_string());
                        capture = Some(CaptureResult {
                            nsys_ended,
                            report: files.report.clone(),
                            sqlite: files.sqlite.clone(),
                            nvtx_ranges: ranges,
                            nvtx_range_total: total,
                            kernel_rows: kernels,
                        });
                    }
                    Err(e) => r.fail("capture", e.message),
                }
            } else {
                let log_text = std::fs::read_to_string(out.join("nsys.log")).unwrap_or_default();
                let hint = no_report_hint(&window, nsys_ended.as_deref(), &log_text, r);
                r.fail(
                    "capture",
                    format!(
                        "nsys ({}) wrote no report {}: {hint}; nsys.log: {}",
                        nsys_ended.clone().unwrap_or_default(),
                        rep.display(),
                        tail_of(&out.join("nsys.log"), 4)
                    ),
                );
                capture = Some(CaptureResult {
                    nsys_ended,
                    report: None,
                    sqlite: None,
                    nvtx_ranges: vec![],
                    nvtx_range_total: 0,
                    kernel_rows: 0,
                });
            }
            if let Some(c) = &capture {
                // (only a finding of its own when the lifecycle went through: after an earlier failure it is expected)
                if c.sqlite.is_some() && c.nvtx_range_total == 0 && o.trace.contains("nvtx") && r.failures.is_empty() {
                    let facts = c
                        .sqlite
                        .as_deref()
                        .and_then(|p| crate::export::Export::open(Path::new(p)).ok())
                        .and_then(|ex| crate::export::nvtx_no_range_facts(&ex).ok());
                    let why = match facts {
                        Some((_, Some(msg))) => format!(
                            "the run emitted NVTX but nsys recorded no range, and its export says {msg:?}: the engine's NVTX library is incompatible with nsys {version} \
                             (measured: Python nvtx 0.2.17 under nsys 2023.4.4 records only a domain-creation row; nvtx 0.2.10 records every range): pin the NVTX library or use a newer nsys"
                        ),
                        Some((n, None)) if n > 0 => format!(
                            "the run emitted NVTX ({n} NVTX row(s) that are not ranges: domains, registered strings or marks) but the export holds no closed range: the engine's NVTX library may be incompatible with nsys {version}, or its ranges lie outside the window"
                        ),
                        _ => "the export holds no closed NVTX range: the load did not reach the capture window (or the server emits no NVTX)".into(),
                    };
                    r.fail("capture", why);
                }
            }
        }

        // 8. gate-check and sqlite-ranges on the export, into the run folder
        let mut gate = None;
        if let (Some(rep), Some(sql), false) = (files.report.clone(), files.sqlite.clone(), r.stopped()) {
            let gopts = crate::gate::GateOptions {
                capture: PathBuf::from(&rep),
                sqlite: Some(PathBuf::from(&sql)),
                log: Some(out.join("nsys.log")),
                provenance: Some(out.join("provenance.json")),
                tier: o.tier,
                decode_range: o.decode_range.clone(),
                nsys: Some(nsys.clone()),
                thresholds: crate::gate::Thresholds { min_rep_bytes: o.min_rep_bytes, ..Default::default() },
                ..Default::default()
            };
            match crate::gate::run(&gopts)
                .and_then(|g| write_json_redacted(&out.join("gate.json"), &g, &r.red).map(|_| g))
            {
                Ok(g) => {
                    files.gate = Some(out.join("gate.json").display().to_string());
                    let verdict = serde_json::to_value(g.verdict)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let reasons = g
                        .gates
                        .iter()
                        .filter(|x| g.retry.contains(&x.id))
                        .map(|x| format!("{}: {}", x.id, x.reason))
                        .collect();
                    gate = Some(GateSummary { verdict, retry: g.retry.clone(), reasons });
                }
                Err(e) => r.fail("postprocess", format!("gate-check: {}", e.message)),
            }
            if !r.stopped() {
                r.ranges_of(Path::new(&sql), &nsys, &mut files);
            }
        }

        r.p.files = files;
        (capture, gate)
    }

    /// sqlite-ranges on the export into `OUT/ranges.json`; with `--iterations` only that window (issue 39 B79),
    /// joined to the run's iteration records when there are any. A window that selects no evidence is a failure
    /// (`stage: iterations`) and its RETRY document goes to `OUT/iteration-window.json`.
    fn ranges_of(&mut self, sql: &Path, nsys: &Path, files: &mut Files) {
        let out = self.out.clone();
        let opts = crate::ranges::RangesOptions::default();
        let Some(window) = self.o.iterations else {
            match crate::ranges::run(sql, &opts, Some(nsys))
                .and_then(|d| write_json_redacted(&out.join("ranges.json"), &d, &self.red))
            {
                Ok(()) => files.ranges = Some(out.join("ranges.json").display().to_string()),
                Err(e) => self.fail("postprocess", format!("sqlite-ranges: {}", e.message)),
            }
            return;
        };
        let records = self.iterations.as_ref().and_then(|i| i.copy.clone()).map(PathBuf::from);
        let args =
            crate::iterations::window::IterationArgs { records, iterations: Some(window), step: None, fold: true };
        match crate::iterations::window::ranges_run(sql, &opts, Some(nsys), &args) {
            Ok(crate::iterations::window::Windowed::Doc(d)) => {
                match write_json_redacted(&out.join("ranges.json"), &d, &self.red) {
                    Ok(()) => files.ranges = Some(out.join("ranges.json").display().to_string()),
                    Err(e) => self.fail("postprocess", format!("sqlite-ranges: {}", e.message)),
                }
            }
            Ok(crate::iterations::window::Windowed::Retry(d)) => {
                let _ = write_json_redacted(&out.join("iteration-window.json"), &*d, &self.red);
                self.fail(
                    "iterations",
                    format!(
                        "--iterations {}:{} selects no evidence: {} (OUT/iteration-window.json)",
                        window.0, window.1, d.reason
                    ),
                );
            }
            Err(e) => self.fail("postprocess", format!("sqlite-ranges --iterations: {}", e.message)),
        }
    }

    /// Step 8: the document (redacted) and the bundle; the run folder's terminal state.
    fn record_run(
        &mut self,
        mut cleanup: Cleanup,
        gpu_end: Option<crate::resolve::GpuState>,
        capture: Option<CaptureResult>,
        gate: Option<GateSummary>,
    ) -> Result<ServeCaptureDoc> {
        let r = self;
        let o = r.o;
        let (out, nsys, version) = (r.p.out.clone(), r.p.nsys.clone(), r.p.version.clone());
        let timed = r.p.timed;
        let mut files = r.p.files.clone();
        // a stop signal at any phase before the document is written makes the run `interrupted`
        r.stopped();
        let stop_signal = r.stop_seen;
        cleanup.stop_signal = stop_signal;
        let window = r.p.window.clone();
        let client = |i: Option<usize>, role: &str, r: &Run| {
            i.map(|i| {
                let p = &r.procs[i].rec;
                ClientRun {
                    argv: p.argv.clone(),
                    pid: p.pid,
                    started_at_s: p.recorded_at_s,
                    ended_at_s: p.ended_at_s,
                    wall_s: p.ended_at_s.map(|e| ((e - p.recorded_at_s) * 1000.0).round() / 1000.0),
                    exit_code: exit_code_of(&p.ended),
                    signal: signal_of(&p.ended),
                    stdout: out.join(format!("{role}.stdout")).display().to_string(),
                    stderr: out.join(format!("{role}.stderr")).display().to_string(),
                    spans_window: None,
                }
            })
        };
        let warmup = client(r.warmup_i, "warmup", r);
        let mut load = client(r.load_i, "load", r);
        if let (Some(l), true) = (&mut load, timed) {
            l.spans_window = Some(
                window.start_est_s.is_some_and(|ws| l.started_at_s <= ws)
                    && window.end_est_s.is_none_or(|we| l.ended_at_s.is_some_and(|e| e >= we)),
            );
        }
        let diagnostic = load.as_ref().map(|l| diagnostic_of(l, &out.join("load.stdout")));
        let outcome = if stop_signal.is_some() {
            "interrupted"
        } else if r.failures.is_empty() {
            "ok"
        } else {
            "failed"
        };
        if stop_signal.is_none() {
            files.bundle = Some(out.join("bundle.json").display().to_string());
        }
        let paths = files.clone();
        let (schema, tool) = ServeCaptureDoc::header();
        let doc = ServeCaptureDoc {
            schema,
            tool,
            outcome: outcome.into(),
            failures: r.failures.clone(),
            out_dir: out.display().to_string(),
            files,
            nsys: NsysInfo { path: nsys.display().to_string(), version: version.clone() },
            window,
            nsys_argv: r.p.nsys_argv.clone(),
            added_flags: r.p.added.clone(),
            env_names: o.env.iter().map(|(k, _)| k.clone()).collect(),
            processes: r.procs.iter().map(|t| t.rec.clone()).collect(),
            ready: r.ready.clone(),
            warmup,
            load,
            diagnostic,
            capture,
            gate,
            cleanup,
            gpu_pin: r.p.gpu_pin.clone(),
            injection: r.injection.clone(),
            gpu_end,
            launcher: r.p.launcher.clone(),
            modules: r.modules.clone(),
            iterations: r.iterations.clone(),
            wall_s: r.now(),
        };
        let mut doc = finish_doc(&r.red, &out, doc)?;
        // 9. the bundle: provenance, gate, ranges and this document, merged with bundle-merge (from the paths
        // as they are: a redacted path names no file)
        if let Some(b) = paths.bundle.clone() {
            let merged = (|| -> Result<()> {
                let mut docs = Vec::new();
                for f in [
                    Some(paths.provenance.clone()),
                    paths.gate.clone(),
                    paths.ranges.clone(),
                    paths.iterations.clone(),
                    Some(paths.document.clone()),
                ]
                .into_iter()
                .flatten()
                {
                    docs.extend(crate::bundle::read_docs(&[crate::contract::Input::Path(PathBuf::from(f))])?);
                }
                crate::bundle::run(Path::new(&b), &docs, crate::bundle::Mode::Write).map(|_| ())
            })();
            if let Err(e) = merged {
                eprintln!("serve-capture: postprocess: bundle-merge: {}", r.red.text(&e.message));
                doc.failures
                    .push(Failure { stage: "postprocess".into(), reason: format!("bundle-merge: {}", e.message) });
                doc.outcome = "failed".into();
                doc.files.bundle = None;
                doc = finish_doc(&r.red, &out, doc)?;
            }
        }
        write_run_state(&out, &doc.outcome);
        Ok(doc)
    }
}

/// After shutdown: query nvidia-smi again (same target as at start) and check that no recorded PID holds a GPU
/// and that the target GPUs' memory used is back at its level at start, within `gpu_mem_tolerance_mib`
/// (polled up to `--grace`: the driver releases memory a moment after the process is gone). Without a GPU
/// state at start or at the end this is `not checked`, never `passed`.
fn verify_gpu(r: &mut Run, start: Option<&crate::resolve::GpuState>) -> (Cleanup, Option<crate::resolve::GpuState>) {
    let not_checked =
        |why: String| Cleanup { gpu_check: Some("not checked".into()), gpu_reason: Some(why), ..Default::default() };
    let Some(start) = start.filter(|g| g.status == "available") else {
        let why = start.and_then(|g| g.reason.clone()).unwrap_or_else(|| "nvidia-smi was not queried at start".into());
        return (not_checked(format!("no GPU state at start: {why}")), start.cloned());
    };
    let target = match r.o.gpu {
        Some(i) => crate::resolve::TargetSpec::Index(i),
        None => match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(v) => crate::resolve::TargetSpec::Visible(v),
            Err(_) => crate::resolve::TargetSpec::All,
        },
    };
    let used = |g: &crate::resolve::GpuState| -> Option<u64> {
        g.gpus.iter().filter(|x| x.target).map(|x| x.memory_used_mib).sum()
    };
    let before = used(start);
    let recorded: Vec<i64> = r.procs.iter().map(|t| t.rec.pid).collect();
    let until = Instant::now() + r.o.grace.max(Duration::from_secs(1));
    loop {
        let end = crate::resolve::query_gpus(r.o.nvidia_smi.as_deref(), &target, Duration::from_secs(10));
        if end.status != "available" {
            let why = end.reason.clone().unwrap_or_default();
            return (not_checked(format!("nvidia-smi after shutdown: {why}")), Some(end));
        }
        let held: Vec<String> = end
            .processes
            .iter()
            .filter(|p| recorded.contains(&(p.pid as i64)))
            .map(|p| {
                format!(
                    "pid {} ({}) still holds {} on GPU {}",
                    p.pid,
                    p.process_name,
                    p.used_memory_mib.map(|m| format!("{m} MiB")).unwrap_or_else(|| "memory".into()),
                    p.gpu_index.map(|i| i.to_string()).unwrap_or_else(|| p.gpu_uuid.clone())
                )
            })
            .collect();
        let after = used(&end);
        let tol = r.o.gpu_mem_tolerance_mib;
        let mem_back = match (before, after) {
            (Some(b), Some(a)) => a <= b + tol,
            _ => false,
        };
        if held.is_empty() && mem_back {
            let reason = format!(
                "no recorded PID on a GPU; memory used on the target GPU(s) {} MiB after shutdown, {} MiB at start (tolerance {tol} MiB)",
                after.unwrap_or(0),
                before.unwrap_or(0)
            );
            return (
                Cleanup {
                    gpu_check: Some("passed".into()),
                    gpu_reason: Some(reason),
                    gpu_memory_before_mib: before,
                    gpu_memory_after_mib: after,
                    ..Default::default()
                },
                Some(end),
            );
        }
        if Instant::now() >= until {
            let mut why = held;
            match (before, after) {
                (Some(b), Some(a)) if a > b + tol => why.push(format!("memory used on the target GPU(s) is {a} MiB after shutdown, {b} MiB at start (more than the {tol} MiB tolerance)")),
                (Some(_), Some(_)) => {}
                _ => why.push("nvidia-smi reports no memory used figure for the target GPU(s)".into()),
            }
            let reason = why.join("; ");
            r.fail("cleanup", format!("GPU resources not released: {reason}"));
            return (
                Cleanup {
                    gpu_check: Some("failed".into()),
                    gpu_reason: Some(reason),
                    gpu_memory_before_mib: before,
                    gpu_memory_after_mib: after,
                    ..Default::default()
                },
                Some(end),
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Why nsys wrote no report, from what was measured with nsys 2023.4.4 on this project's CPU server: when the
/// profiled application is stopped (SIGTERM) before any data was collected — a range capture whose range never
/// opened, or a time window whose `--delay` had not passed — nsys exits 143 and prints `Generated:` with no
/// file; when nsys itself gets SIGTERM before the window opened it exits 0 with no file. nsys 2023.4.4 also, now and
/// then on a loaded 2-core machine, loses its own agent in the profiled process mid-run ("Connection to Agent lost.
/// This is most likely a bug", exit 0, no report; seen in stops 12, 13 and 14 with nothing signalled): its log
/// says so, and that is named before any timing cause.
fn no_report_hint(w: &Window, nsys_ended: Option<&str>, nsys_log: &str, r: &Run) -> String {
    if let Some(cause) = nsys_log_cause(nsys_log) {
        return cause;
    }
    let server_stop = r.procs.iter().filter(|t| t.rec.role == "server").filter_map(|t| t.rec.ended_at_s).next();
    let nsys_signalled = r.procs.iter().any(|t| t.rec.role == "profiler" && !t.rec.signals_sent.is_empty());
    let before_window = match (w.start_est_s, server_stop) {
        (Some(ws), Some(se)) => se < ws,
        _ => false,
    };
    match (w.mode.as_str(), nsys_ended) {
        ("range", Some("exit 143")) => format!(
            "the capture range never opened: the server was stopped before any {} range start, so nsys had collected nothing (measured: nsys then exits 143 with no report). \
             Check that the load opens the range ({}) in the process nsys traces (with --cuda-child: the CUDA worker, not the parent)",
            w.capture_range.as_deref().unwrap_or("capture"),
            if w.capture_range.as_deref() == Some("cudaProfilerApi") { "cudaProfilerStart" } else { "the NVTX trigger of --nvtx-capture" }
        ),
        ("time", Some("exit 143")) if before_window => "the server was stopped before the capture window opened (nsys launch + --delay): nothing was collected (measured: nsys then exits 143 with no report); lower --delay or make the load longer".into(),
        (_, Some("exit 143")) => "the profiled application ended on SIGTERM before nsys had written the report (nsys exits 143 when its application does); raise --finalize-timeout or check nsys.log".into(),
        (_, Some(e)) if nsys_signalled => format!("serve-capture had to stop nsys ({e}) after --finalize-timeout: the report was not finished; raise --finalize-timeout"),
        ("time", _) if before_window => "the run ended before the capture window opened (nsys launch + --delay): nothing was collected".into(),
        _ => "no measured cause matches; see nsys.log".into(),
    }
}

/// What nsys prints when its agent in the profiled process goes away mid-run (its own bug, see [`no_report_hint`]).
pub const NSYS_AGENT_LOST: &str = "Connection to Agent lost";

/// A cause for a missing report that nsys's own log states, before any timing guess.
fn nsys_log_cause(nsys_log: &str) -> Option<String> {
    nsys_log.contains(NSYS_AGENT_LOST).then(|| {
        format!(
            "nsys lost the connection to its own agent in the profiled process (nsys.log: \"{NSYS_AGENT_LOST}\", which nsys calls a bug): \
             nothing about the server or the window is known to be wrong; capture again"
        )
    })
}

/// The redaction of a run: every secret value in the server, client and nsys commands and in `--env`.
/// `CUDA_VISIBLE_DEVICES` as serve-capture sets it on nsys and the clients (`--gpu IDX`).
fn gpu_pin_value(o: &ServeCaptureOptions) -> Option<String> {
    o.gpu.map(|i| i.to_string())
}

/// The environment nsys (and so the server) is started with, as [`Run::launch`] builds it: this process's
/// environment, then `--env`, then `CUDA_VISIBLE_DEVICES` (`--gpu`) and the iteration-records variable; each
/// entry redacted by the one rule, sorted by name (issue 39 B16).
fn server_environment(
    o: &ServeCaptureOptions,
    cuda_visible: Option<String>,
    iter_path: Option<&Path>,
) -> Vec<crate::resolve::EnvVar> {
    let mut env: std::collections::BTreeMap<String, (String, &str)> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), (v.to_string_lossy().into_owned(), "inherited")))
        .collect();
    for (k, v) in &o.env {
        env.insert(k.clone(), (v.clone(), "given"));
    }
    if let Some(v) = cuda_visible {
        env.insert("CUDA_VISIBLE_DEVICES".into(), (v, "serve-capture"));
    }
    if let Some(p) = iter_path {
        env.insert(crate::iterations::RECORDS_ENV.into(), (p.display().to_string(), "serve-capture"));
    }
    env.into_iter().map(|(k, (v, src))| crate::resolve::env_var(k, Some(v), src)).collect()
}

fn redactor(o: &ServeCaptureOptions) -> crate::resolve::Redactor {
    let mut argvs: Vec<&[String]> = vec![o.server.as_slice(), o.load.as_slice(), o.flags.as_slice()];
    if let Some(w) = &o.warmup {
        argvs.push(w.as_slice());
    }
    crate::resolve::Redactor::new(argvs, &o.env)
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    write_json_redacted(path, v, &crate::resolve::Redactor::default())
}

fn write_json_redacted<T: Serialize>(path: &Path, v: &T, red: &crate::resolve::Redactor) -> Result<()> {
    let text = red.json(v) + "\n";
    std::fs::write(path, text).map_err(|e| Error::env(format!("{}: cannot write: {e}", path.display())))
}

/// Redact the document (every field, as JSON text) and write it to `OUT/serve-capture.json`.
fn finish_doc(red: &crate::resolve::Redactor, out: &Path, doc: ServeCaptureDoc) -> Result<ServeCaptureDoc> {
    let doc: ServeCaptureDoc = serde_json::from_str(&red.json(&doc)).expect("a redacted document reads back");
    write_json(&out.join("serve-capture.json"), &doc)?;
    Ok(doc)
}

fn write_run_state(out: &Path, state: &str) {
    let _ = std::fs::write(out.join(RUN_STATE_FILE), format!("{state} {}\n", std::process::id()));
}

/// The file in a run folder that says how far the run got: `running PID` from the start, then `ok PID`,
/// `failed PID` or `interrupted PID` once it reached its terminal state.
pub const RUN_STATE_FILE: &str = "run-state";

/// How far a serve-capture run folder got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Not a serve-capture run folder (no `run-state`, no `pids/`): nothing to say.
    NotARun,
    /// It reached a terminal state: `ok`, `failed` or `interrupted`.
    Terminal(String),
    /// serve-capture (this PID) is still running it.
    Running(i32),
    /// It started and never reached a terminal state (serve-capture killed, or the folder copied mid-run).
    Unfinished(String),
}

/// The state of the run folder `dir` (see [`RunState`]).
pub fn run_state(dir: &Path) -> RunState {
    let text = match std::fs::read_to_string(dir.join(RUN_STATE_FILE)) {
        Ok(t) => t,
        // a folder from before the state file: serve-capture's pids/ and provenance.json without its document
        Err(_) if dir.join("pids").is_dir() && dir.join("provenance.json").is_file() => {
            return if dir.join("serve-capture.json").is_file() {
                RunState::Terminal("unknown".into())
            } else {
                RunState::Unfinished("pids/ and provenance.json but no serve-capture.json".into())
            };
        }
        Err(_) => return RunState::NotARun,
    };
    let mut w = text.split_whitespace();
    let state = w.next().unwrap_or("").to_string();
    let pid: i32 = w.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    match state.as_str() {
        "ok" | "failed" | "interrupted" => RunState::Terminal(state),
        "running"
            if pid > 0
                && procs::stat(pid).is_some_and(|s| {
                    s.state != 'Z'
                        && procs::cmdline(pid)
                            .first()
                            .is_some_and(|a| a.contains("serve-capture") || a.contains("nu_plugin"))
                }) =>
        {
            RunState::Running(pid)
        }
        "running" => RunState::Unfinished(format!("serve-capture (pid {pid}) is gone")),
        other => RunState::Unfinished(format!("{RUN_STATE_FILE} says {other:?}")),
    }
}

/// For gate-check, report and capture-compare: refuse an input that lies in (or is) a serve-capture run folder
/// that never reached a terminal state (exit 2, naming the folder and why). Anything else passes.
pub fn refuse_unfinished(input: &Path) -> Result<()> {
    if input.as_os_str() == "-" {
        return Ok(());
    }
    let dir = if input.is_dir() { Some(input) } else { input.parent() };
    let Some(dir) = dir.map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d }) else { return Ok(()) };
    match run_state(dir) {
        RunState::NotARun | RunState::Terminal(_) => Ok(()),
        RunState::Running(pid) => Err(Error::input(format!(
            "{}: the serve-capture run in {} is still running (pid {pid}): wait for it to end",
            input.display(),
            dir.display()
        ))),
        RunState::Unfinished(why) => Err(Error::input(format!(
            "{}: the serve-capture run in {} never reached a terminal state ({why}): its files are not evidence; capture again",
            input.display(),
            dir.display()
        ))),
    }
}

/// Record the server's descendants (workers it forked) that are not recorded yet.
fn record_tree(r: &mut Run, server: usize) {
    let (pid, st) = (r.procs[server].rec.pid as i32, r.procs[server].rec.starttime_ticks);
    if !procs::alive(pid, st) {
        return;
    }
    for d in procs::descendants(pid) {
        if !r.is_recorded(d.pid) {
            r.record("server-child", d.pid, d.starttime, procs::cmdline(d.pid), None);
        }
    }
}

/// Record nsys's own helper processes (`nsys-launcher`, `nsys-tee`: `nsys*` descendants of the profiler), so
/// that none is left behind when nsys exits before the server (time window with `--kill=none`).
fn record_helpers(r: &mut Run, profiler: i32) {
    for d in procs::descendants(profiler) {
        if d.comm.starts_with("nsys") && !r.is_recorded(d.pid) {
            r.record("nsys-helper", d.pid, d.starttime, procs::cmdline(d.pid), None);
        }
    }
}

/// Stop the recorded processes in reverse launch order: load, warmup, the server's tree (children first),
/// then — once nsys has had `finalize_timeout` to write the report — nsys's helpers and nsys itself.
fn cleanup(r: &mut Run, prof: usize, server: Option<usize>) {
    if let Some(si) = server {
        record_tree(r, si);
    }
    let ppid = r.procs[prof].rec.pid as i32;
    if !r.poll_end(prof) {
        record_helpers(r, ppid);
    }
    let order: Vec<usize> = (0..r.procs.len()).rev().collect();
    for &i in &order {
        if matches!(r.procs[i].rec.role.as_str(), "load" | "warmup") {
            r.stop(i);
        }
    }
    // the server tree, latest first
    let mut tree: Vec<usize> =
        order.iter().copied().filter(|&i| matches!(r.procs[i].rec.role.as_str(), "server" | "server-child")).collect();
    tree.sort_by_key(|&i| std::cmp::Reverse((r.procs[i].rec.starttime_ticks, r.procs[i].rec.pid)));
    for i in tree {
        r.stop(i);
    }
    // nsys writes the report once the application is gone
    // (a stop signal, before or during this wait, leaves nsys only --grace: stop now)
    if !r.poll_end(prof) {
        let limit = if r.stopped() { r.o.grace } else { r.o.finalize_timeout };
        r.say(format!("waiting up to {:.0} s for nsys to write the report", limit.as_secs_f64()));
        let (since, grace) = (Instant::now(), r.o.grace);
        r.wait_for(prof, limit, true, |r| r.stopped() && since.elapsed() >= grace);
    }
    for &i in &order {
        if r.procs[i].rec.role == "nsys-helper" {
            r.stop(i);
        }
    }
    r.stop(prof);
    for i in 0..r.procs.len() {
        r.poll_end(i);
    }
}

fn diagnostic_of(l: &ClientRun, stdout: &Path) -> Diagnostic {
    let last = std::fs::read_to_string(stdout).unwrap_or_default();
    let v = last
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok());
    let num = |k: &str| v.as_ref().and_then(|v| v.get(k)).and_then(|x| x.as_u64());
    let (requests, tokens) = (num("requests"), num("tokens"));
    let per = |n: Option<u64>| match (n, l.wall_s) {
        (Some(n), Some(w)) if w > 0.0 => Some(((n as f64 / w) * 1000.0).round() / 1000.0),
        _ => None,
    };
    Diagnostic {
        diagnostic_only: true,
        load_wall_s: l.wall_s,
        requests,
        tokens,
        requests_per_s: per(requests),
        tokens_per_s: per(tokens),
        note: "measured under the profiler: diagnostic only, never a throughput score".into(),
    }
}

/// Export the report to SQLite (next to it, in the run folder) and count its NVTX ranges and kernel rows.
fn export_report(nsys: &Path, rep: &Path, sqlite: &Path) -> Result<(Vec<RangeCount>, u64, u64)> {
    crate::export::run_nsys_export(nsys, rep, sqlite)?;
    let ex = crate::export::Export::open(sqlite)?;
    summarize_export(&ex)
}

/// The NVTX push/pop and start/end ranges of an export by label, their total, and its kernel rows (what
/// `capture.nvtx_ranges`, `capture.nvtx_range_total` and `capture.kernel_rows` report). The ranges are those
/// `sqlite-ranges` keeps ([`crate::ranges::load_occurrences`]: closed, labelled, `DOMAIN:` prefix for a
/// named domain), so both tools name the same ranges on the same file.
pub fn summarize_export(ex: &crate::export::Export) -> Result<(Vec<RangeCount>, u64, u64)> {
    let mut ranges = Vec::new();
    let mut total = 0;
    if ex.has_table(crate::export::schema::NVTX_EVENTS) {
        let loaded = crate::ranges::load_occurrences(ex, &crate::ranges::RangesOptions::default())?;
        let mut by: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for o in &loaded.occurrences {
            *by.entry(&*o.label).or_default() += 1;
        }
        for (name, n) in by {
            total += n;
            ranges.push(RangeCount { name: name.to_string(), count: n });
        }
    }
    let kernels = ex.count_rows(crate::export::schema::KERNEL)? as u64;
    Ok((ranges, total, kernels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_nsys_agent_is_named_from_the_log() {
        // nsys.log of a real failed run (nsys 2023.4.4, stop 14, tests/it/serve_capture.rs time window)
        let log = "vibeserve_http: pid 3539 listening on 127.0.0.1:40969\nConnection to Agent lost. This is most likely a bug. \
                   Internal reason: 'End of file'.\nPlease refer to the troubleshooting section of the docs:\n";
        assert!(nsys_log_cause(log).unwrap().contains("lost the connection to its own agent"));
        let ok = "Generating '/tmp/nsys-report-1c71.qdstrm'\nGenerated:\n    /tmp/sc/run1/capture.nsys-rep\n";
        assert_eq!(nsys_log_cause(ok), None);
    }

    fn opts() -> ServeCaptureOptions {
        ServeCaptureOptions::new(
            vec!["./srv".into(), "8000".into()],
            "http://127.0.0.1:8000/health".into(),
            vec!["curl".into()],
            "/tmp/x".into(),
        )
    }
    fn all_caps() -> Capabilities {
        Capabilities {
            cuda_graph_trace: true,
            trace_fork_before_exec: true,
            capture_range: true,
            capture_range_end: true,
            ..Default::default()
        }
    }

    #[test]
    fn mandatory_flags_added() {
        let mut o = opts();
        o.cuda_child = true;
        o.capture_range = Some("cudaProfilerApi".into());
        let (a, added) = build_nsys_args(&o, &all_caps(), Path::new("/o/capture")).unwrap();
        assert_eq!(
            a,
            [
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--cuda-graph-trace=node",
                "--trace-fork-before-exec=true",
                "--capture-range=cudaProfilerApi",
                "--capture-range-end=stop",
                "--kill=none",
                "--output=/o/capture",
                "./srv",
                "8000"
            ]
        );
        assert_eq!(added.len(), 4);
    }

    #[test]
    fn refusals() {
        let mut o = opts();
        let mut caps = all_caps();
        caps.cuda_graph_trace = false;
        let e = build_nsys_args(&o, &caps, Path::new("/o/c")).unwrap_err();
        assert!(e.message.contains("no --cuda-graph-trace"), "{}", e.message);
        o.trace = "nvtx,osrt".into();
        assert!(build_nsys_args(&o, &caps, Path::new("/o/c")).is_ok(), "no CUDA traced: no graph flag needed");
        o.cuda_child = true;
        caps.trace_fork_before_exec = false;
        assert!(build_nsys_args(&o, &caps, Path::new("/o/c"))
            .unwrap_err()
            .message
            .contains("--trace-fork-before-exec"));
        let mut o = opts();
        o.flags = vec!["--cuda-graph-trace=graph".into()];
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c")).unwrap_err().message.contains("refused"));
        o.flags = vec!["-o".into(), "x".into()];
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c")).unwrap_err().message.contains("--out DIR"));
        let mut o = opts();
        o.server = vec!["/usr/bin/env".into(), "A=1".into(), "srv".into()];
        let e = build_nsys_args(&o, &all_caps(), Path::new("/o/c")).unwrap_err();
        assert!(e.message.contains("--env NAME=VALUE"), "{}", e.message);
        let mut o = opts();
        o.warmup = Some(vec!["curl".into()]);
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c"))
            .unwrap_err()
            .message
            .contains("--warmup needs a capture window"));
        o.duration_s = Some(5.0);
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c")).unwrap_err().message.contains("needs --delay"));
        o.delay_s = Some(5.0);
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c")).is_ok());
        o.capture_range = Some("cudaProfilerApi".into());
        assert!(build_nsys_args(&o, &all_caps(), Path::new("/o/c"))
            .unwrap_err()
            .message
            .contains("exclude each other"));
    }

    #[test]
    fn real_nsys_help_texts_have_the_mandatory_flags() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-help");
        for v in ["2023.4.4", "2025.3.1"] {
            let help = std::fs::read_to_string(root.join(v).join("profile-help.txt")).unwrap();
            let caps = crate::resolve::parse_capabilities(&help, "");
            assert!(help.contains("--kill="), "{v}: serve-capture relies on --kill");
            let mut o = opts();
            o.cuda_child = true;
            o.capture_range = Some("cudaProfilerApi".into());
            let (a, _) =
                build_nsys_args(&o, &caps, Path::new("/o/capture")).unwrap_or_else(|e| panic!("{v}: {}", e.message));
            assert!(
                a.contains(&"--cuda-graph-trace=node".to_string())
                    && a.contains(&"--trace-fork-before-exec=true".to_string())
            );
        }
    }

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(
            split_command("curl -s 'http://x/a b' \"q\"", "--load").unwrap(),
            ["curl", "-s", "http://x/a b", "q"]
        );
        assert!(split_command("curl 'unclosed", "--load").is_err());
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(parse_env("=x").is_err());
    }
}
