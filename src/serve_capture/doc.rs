//! The `serve-capture` document (`nsyskit.serve-capture/v1`) and its parts.

#[allow(unused_imports)]
use super::*;

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
    pub gpu_end: Option<crate::nsys_resolve::GpuState>,
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
