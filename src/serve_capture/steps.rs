//! The run, step by step: launch, readiness, modules, warmup, load, shutdown.

#[allow(unused_imports)]
use super::*;

impl<'a> Run<'a> {
    pub(super) fn new(o: &'a ServeCaptureOptions, t0: Instant, p: Plan) -> Run<'a> {
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
    pub(super) fn scan_modules(&mut self) -> bool {
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
    pub(super) fn check_modules(&mut self, at: f64) -> bool {
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
    pub(super) fn collect_iterations(&mut self) {
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
    pub(super) fn refused(&mut self, reason: String) -> Result<ServeCaptureDoc> {
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
    pub(super) fn launch(&mut self) -> Result<()> {
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
    pub(super) fn ready(&mut self) -> bool {
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
                .filter(|v| !v.is_empty() && !crate::nsys_resolve::is_nsys_injection(v))
            {
                r.injection.push(InjectionFinding {
                    role: rec.role.clone(),
                    pid: rec.pid,
                    value: v.clone(),
                    blocks_cuda_tracing: cuda,
                });
                let why = crate::nsys_resolve::cuda_injection_reason(
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
    pub(super) fn warmup(&mut self) -> bool {
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
    pub(super) fn load(&mut self) -> bool {
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
    pub(super) fn shutdown(&mut self) -> (Cleanup, Option<crate::nsys_resolve::GpuState>) {
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
}
