//! After the load: GPU release, cleanup, export, gate-check, sqlite-ranges, the document and the bundle.

#[allow(unused_imports)]
use super::*;

impl Run<'_> {
    /// Step 7: export and summarise the report; gate-check and sqlite-ranges into the run folder.
    pub(super) fn analyse(&mut self) -> (Option<CaptureResult>, Option<GateSummary>) {
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
            let gopts = crate::gate_check::GateOptions {
                capture: PathBuf::from(&rep),
                sqlite: Some(PathBuf::from(&sql)),
                log: Some(out.join("nsys.log")),
                provenance: Some(out.join("provenance.json")),
                tier: o.tier,
                decode_range: o.decode_range.clone(),
                nsys: Some(nsys.clone()),
                thresholds: crate::gate_check::Thresholds { min_rep_bytes: o.min_rep_bytes, ..Default::default() },
                ..Default::default()
            };
            match crate::gate_check::run(&gopts)
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
    pub(super) fn ranges_of(&mut self, sql: &Path, nsys: &Path, files: &mut Files) {
        let out = self.out.clone();
        let opts = crate::sqlite_ranges::RangesOptions::default();
        let Some(window) = self.o.iterations else {
            match crate::sqlite_ranges::run(sql, &opts, Some(nsys))
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
        match crate::pipeline::window::ranges_run(sql, &opts, Some(nsys), &args) {
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
    pub(super) fn record_run(
        &mut self,
        mut cleanup: Cleanup,
        gpu_end: Option<crate::nsys_resolve::GpuState>,
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
                    docs.extend(crate::bundle_merge::read_docs(&[crate::contract::Input::Path(PathBuf::from(f))])?);
                }
                crate::bundle_merge::run(Path::new(&b), &docs, crate::bundle_merge::Mode::Write).map(|_| ())
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
pub(super) fn verify_gpu(
    r: &mut Run,
    start: Option<&crate::nsys_resolve::GpuState>,
) -> (Cleanup, Option<crate::nsys_resolve::GpuState>) {
    let not_checked =
        |why: String| Cleanup { gpu_check: Some("not checked".into()), gpu_reason: Some(why), ..Default::default() };
    let Some(start) = start.filter(|g| g.status == "available") else {
        let why = start.and_then(|g| g.reason.clone()).unwrap_or_else(|| "nvidia-smi was not queried at start".into());
        return (not_checked(format!("no GPU state at start: {why}")), start.cloned());
    };
    let target = match r.o.gpu {
        Some(i) => crate::nsys_resolve::TargetSpec::Index(i),
        None => match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(v) => crate::nsys_resolve::TargetSpec::Visible(v),
            Err(_) => crate::nsys_resolve::TargetSpec::All,
        },
    };
    let used = |g: &crate::nsys_resolve::GpuState| -> Option<u64> {
        g.gpus.iter().filter(|x| x.target).map(|x| x.memory_used_mib).sum()
    };
    let before = used(start);
    let recorded: Vec<i64> = r.procs.iter().map(|t| t.rec.pid).collect();
    let until = Instant::now() + r.o.grace.max(Duration::from_secs(1));
    loop {
        let end = crate::nsys_resolve::query_gpus(r.o.nvidia_smi.as_deref(), &target, Duration::from_secs(10));
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
pub(super) fn no_report_hint(w: &Window, nsys_ended: Option<&str>, nsys_log: &str, r: &Run) -> String {
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
pub(super) fn nsys_log_cause(nsys_log: &str) -> Option<String> {
    nsys_log.contains(NSYS_AGENT_LOST).then(|| {
        format!(
            "nsys lost the connection to its own agent in the profiled process (nsys.log: \"{NSYS_AGENT_LOST}\", which nsys calls a bug): \
             nothing about the server or the window is known to be wrong; capture again"
        )
    })
}

/// The redaction of a run: every secret value in the server, client and nsys commands and in `--env`.
/// `CUDA_VISIBLE_DEVICES` as serve-capture sets it on nsys and the clients (`--gpu IDX`).
pub(super) fn gpu_pin_value(o: &ServeCaptureOptions) -> Option<String> {
    o.gpu.map(|i| i.to_string())
}

/// The environment nsys (and so the server) is started with, as [`Run::launch`] builds it: this process's
/// environment, then `--env`, then `CUDA_VISIBLE_DEVICES` (`--gpu`) and the iteration-records variable; each
/// entry redacted by the one rule, sorted by name (issue 39 B16).
pub(super) fn server_environment(
    o: &ServeCaptureOptions,
    cuda_visible: Option<String>,
    iter_path: Option<&Path>,
) -> Vec<crate::nsys_resolve::EnvVar> {
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
    env.into_iter().map(|(k, (v, src))| crate::nsys_resolve::env_var(k, Some(v), src)).collect()
}

pub(super) fn redactor(o: &ServeCaptureOptions) -> crate::nsys_resolve::Redactor {
    let mut argvs: Vec<&[String]> = vec![o.server.as_slice(), o.load.as_slice(), o.flags.as_slice()];
    if let Some(w) = &o.warmup {
        argvs.push(w.as_slice());
    }
    crate::nsys_resolve::Redactor::new(argvs, &o.env)
}

pub(super) fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    write_json_redacted(path, v, &crate::nsys_resolve::Redactor::default())
}

pub(super) fn write_json_redacted<T: Serialize>(path: &Path, v: &T, red: &crate::nsys_resolve::Redactor) -> Result<()> {
    let text = red.json(v) + "\n";
    std::fs::write(path, text).map_err(|e| Error::env(format!("{}: cannot write: {e}", path.display())))
}

/// Redact the document (every field, as JSON text) and write it to `OUT/serve-capture.json`.
pub(super) fn finish_doc(
    red: &crate::nsys_resolve::Redactor,
    out: &Path,
    doc: ServeCaptureDoc,
) -> Result<ServeCaptureDoc> {
    let doc: ServeCaptureDoc = serde_json::from_str(&red.json(&doc)).expect("a redacted document reads back");
    write_json(&out.join("serve-capture.json"), &doc)?;
    Ok(doc)
}

/// Record the server's descendants (workers it forked) that are not recorded yet.
pub(super) fn record_tree(r: &mut Run, server: usize) {
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
pub(super) fn record_helpers(r: &mut Run, profiler: i32) {
    for d in procs::descendants(profiler) {
        if d.comm.starts_with("nsys") && !r.is_recorded(d.pid) {
            r.record("nsys-helper", d.pid, d.starttime, procs::cmdline(d.pid), None);
        }
    }
}

/// Stop the recorded processes in reverse launch order: load, warmup, the server's tree (children first),
/// then — once nsys has had `finalize_timeout` to write the report — nsys's helpers and nsys itself.
pub(super) fn cleanup(r: &mut Run, prof: usize, server: Option<usize>) {
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

pub(super) fn diagnostic_of(l: &ClientRun, stdout: &Path) -> Diagnostic {
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
pub(super) fn export_report(nsys: &Path, rep: &Path, sqlite: &Path) -> Result<(Vec<RangeCount>, u64, u64)> {
    crate::export::run_nsys_export(nsys, rep, sqlite)?;
    let ex = crate::export::Export::open(sqlite)?;
    summarize_export(&ex)
}

/// The NVTX push/pop and start/end ranges of an export by label, their total, and its kernel rows (what
/// `capture.nvtx_ranges`, `capture.nvtx_range_total` and `capture.kernel_rows` report). The ranges are those
/// `sqlite-ranges` keeps ([`crate::sqlite_ranges::load_occurrences`]: closed, labelled, `DOMAIN:` prefix for a
/// named domain), so both tools name the same ranges on the same file.
pub fn summarize_export(ex: &crate::export::Export) -> Result<(Vec<RangeCount>, u64, u64)> {
    let mut ranges = Vec::new();
    let mut total = 0;
    if ex.has_table(crate::export::schema::NVTX_EVENTS) {
        let loaded = crate::sqlite_ranges::load_occurrences(ex, &crate::sqlite_ranges::RangesOptions::default())?;
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
