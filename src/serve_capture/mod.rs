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

mod doc;
pub mod engine;
pub mod http;
pub mod module_id;
mod nsys_args;
mod post;
mod run_state;
mod steps;

pub use doc::*;
pub use nsys_args::*;
pub use post::*;
pub use run_state::*;
pub mod procs;

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::nsys_resolve::Capabilities;

/// Everything `serve-capture` needs, as the binary and the Nushell plugin pass it.
#[derive(Debug, Clone)]
pub struct ServeCaptureOptions {
    /// The nsys to profile with; None: `NSYS_BIN`, else `nsys` on PATH.
    pub nsys: Option<PathBuf>,
    /// Where nsys is looked for when `nsys` is None: the user's environment (`NSYS_BIN`, `PATH`, install
    /// folders), set by the tool's run from its host.
    pub resolve: crate::nsys_resolve::ResolveOptions,
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
    pub tier: crate::gate_check::Tier,
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
    pub workload: crate::nsys_resolve::WorkloadSpec,
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
            resolve: crate::nsys_resolve::ResolveOptions::from_env(),
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
            tier: crate::gate_check::Tier::Throughput,
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
            workload: crate::nsys_resolve::WorkloadSpec::default(),
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
    red: crate::nsys_resolve::Redactor,
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
    gpu_start: Option<crate::nsys_resolve::GpuState>,
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

/// `--iteration-records`, absolute; refused when `--env` names another path for it or the file exists already.
fn iteration_records_path(o: &ServeCaptureOptions) -> Result<Option<PathBuf>> {
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
    Ok(iter_path)
}

/// The capture window the flags ask for, and whether it is time-bounded.
fn window_of(o: &ServeCaptureOptions) -> (bool, Window) {
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
    (timed, window)
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
    let iter_path = iteration_records_path(o)?;
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
    let workload = crate::nsys_resolve::workload::from_command(
        &o.workload,
        Some(&o.load),
        Some(crate::nsys_resolve::redact_command(&join(&o.load)).0),
        o.cwd.as_deref(),
    )?;
    for w in crate::nsys_resolve::workload::warnings(&workload, o.tier == crate::gate_check::Tier::Decode) {
        eprintln!("serve-capture: warning: {w}");
    }
    if let Some(f) = o.server.iter().find(|w| crate::nsys_resolve::workload::EAGER_FLAGS.contains(&w.as_str())) {
        eprintln!(
            "serve-capture: warning: the server command carries {f}: an eager capture of a graph-mode engine is a cross-check only, never the measurement of record (capture-compare says so)"
        );
    }
    let popts = crate::nsys_resolve::ProvenanceOptions {
        resolve: crate::nsys_resolve::ResolveOptions {
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
    let prov = crate::nsys_resolve::run(&popts)?;
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
    let prov: crate::nsys_resolve::Provenance =
        serde_json::from_str(&red.json(&prov)).expect("a redacted provenance reads back");
    crate::nsys_resolve::write_record(&out, &prov)?;
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

    let (timed, window) = window_of(o);

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
            let caps = crate::nsys_resolve::parse_capabilities(&help, "");
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
