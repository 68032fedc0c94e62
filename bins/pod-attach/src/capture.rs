//! One capture, in phases: the pod and container, the sidecar and its image digest, `--install-nsys`, the engine
//! and the checks before the capture, the capture itself (per strategy), the size gate, export and stats, the
//! copy-out, the checks after it, and the document.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use nsyskit::contract::{Document, Error, Result};
use nsyskit::pod_attach::{self as pa, Options, PodAttachDoc, Strategy};

use super::{
    container_names, exec_ok, exec_ok_within, exec_within, find_pod, post, say, wait_sidecar, within, Cluster, Gate,
    Shared, STEP_BASIS, WORK_BASIS,
};

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Where the run is: the pod, the container that runs nsys (`tools`) and the warnings so far.
struct Ctx<'a, C: Cluster> {
    c: &'a C,
    o: &'a Options,
    pod: String,
    tools: String,
    warnings: Vec<String>,
}

impl<C: Cluster> Ctx<'_, C> {
    async fn ok(&self, argv: &[String]) -> Result<super::ExecOutput> {
        exec_ok(self.c, self.o, &self.pod, &self.tools, argv).await
    }
    async fn work(&self, argv: &[String]) -> Result<super::ExecOutput> {
        exec_ok_within(self.c, self.o, &self.pod, &self.tools, argv, self.o.work_deadline(), WORK_BASIS).await
    }
    async fn any(&self, argv: &[String]) -> Result<super::ExecOutput> {
        exec_within(self.c, self.o, &self.pod, &self.tools, argv, self.o.step_deadline(), STEP_BASIS).await
    }
    /// A finding: on stderr now, and in the document's warnings.
    fn warn(&mut self, w: String) {
        say(&format!("warning: {w}"));
        self.warnings.push(w);
    }
}

fn pick_container(o: &Options, pod: &Pod, pod_name: &str) -> Result<String> {
    let names = container_names(pod);
    match &o.container {
        Some(cn) if names.contains(cn) => Ok(cn.clone()),
        Some(cn) => Err(Error::input(format!(
            "pod {}/{pod_name} has no container {cn:?}; it has: {}",
            o.namespace,
            names.join(", ")
        ))
        .with_arg("--container")),
        None if names.len() == 1 => Ok(names[0].clone()),
        None => Err(Error::input(format!(
            "pod {}/{pod_name} has {} containers ({}); pick one with --container",
            o.namespace,
            names.len(),
            names.join(", ")
        ))
        .with_arg("--container")),
    }
}

/// The sidecar image's digest: from the pinned reference, else from the pod's status; warnings on a mismatch.
fn sidecar_digest(o: &Options, image_id: Option<&str>, warnings: &mut Vec<String>) -> Result<Option<String>> {
    let from_ref = pa::image_digest(&o.image)?;
    let from_status = image_id
        .and_then(|i| i.rsplit_once('@'))
        .map(|(_, d)| d.to_string())
        .filter(|d| pa::image_digest(&format!("x@{d}")).ok().flatten().is_some());
    match (&from_ref, &from_status) {
        (Some(a), Some(b)) if a != b => warnings.push(format!(
            "the pod reports sidecar image {} but --image is pinned to {a}",
            image_id.unwrap_or_default()
        )),
        (None, None) => {
            warnings.push(format!("--allow-unpinned-image: the pod reported no digest for {}; none recorded", o.image))
        }
        (None, Some(d)) => {
            warnings.push(format!("--allow-unpinned-image: {} resolved to {d} (from the pod's status)", o.image))
        }
        _ => {}
    }
    Ok(from_ref.or(from_status))
}

/// Path B: install nsys in the sidecar.
async fn install_nsys<C: Cluster>(x: &Ctx<'_, C>) -> Result<Option<pa::NsysInstall>> {
    let o = x.o;
    let Some(how) = o.install_nsys else {
        return Ok(None);
    };
    let [update, install, query] = pa::argv_install_nsys(how);
    say(&format!("--install-nsys apt: installing {} in {}", pa::NSYS_APT_PACKAGE, o.sidecar_name));
    for argv in [&update, &install] {
        let r = exec_within(x.c, o, &x.pod, &x.tools, argv, o.work_deadline(), WORK_BASIS)
            .await
            .map_err(|e| e.with_arg("--install-nsys"))?;
        if r.exit_code != Some(0) {
            let tail = |b: &[u8]| {
                let t = String::from_utf8_lossy(b);
                let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
                lines[lines.len().saturating_sub(6)..].join(" | ")
            };
            return Err(Error::env(format!(
                "--install-nsys apt failed in sidecar {}: `{}` {}: {}",
                o.sidecar_name,
                argv.join(" "),
                match r.exit_code {
                    Some(c) => format!("exited {c}"),
                    None => "ended without an exit status".into(),
                },
                [tail(&r.stderr), tail(&r.stdout), r.status_message.clone().unwrap_or_default()]
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .collect::<Vec<_>>()
                    .join(" | ")
            ))
            .with_arg("--install-nsys"));
        }
    }
    let v = x.ok(&query).await?;
    let version = String::from_utf8_lossy(&v.stdout).trim().to_string();
    say(&format!("--install-nsys apt: {} {version}", pa::NSYS_APT_PACKAGE));
    Ok(Some(pa::NsysInstall { method: how, package: pa::NSYS_APT_PACKAGE.into(), version }))
}

/// A53: the driver, read in the container that runs nsys (`nvidia-smi --version`, else the kernel module).
async fn read_driver<C: Cluster>(x: &Ctx<'_, C>) -> pa::DriverInfo {
    let [smi, module] = pa::argv_driver_queries();
    let mut why = Vec::new();
    for (argv, source) in [(&smi, "nvidia-smi --version"), (&module, "/proc/driver/nvidia/version")] {
        match x.any(argv).await {
            Ok(r) if r.exit_code == Some(0) => {
                if let Some(d) = pa::parse_driver(&String::from_utf8_lossy(&r.stdout), source) {
                    return d;
                }
                why.push(format!("{source}: no version in its output"));
            }
            Ok(r) => why.push(format!("{source}: exited {:?}", r.exit_code)),
            Err(e) => why.push(format!("{source}: {}", e.message)),
        }
    }
    pa::DriverInfo { source: format!("unknown ({})", why.join("; ")), ..Default::default() }
}

/// The nsys probe and the strategy it allows.
async fn probe_nsys<C: Cluster>(x: &Ctx<'_, C>) -> Result<(pa::NsysCaps, Strategy)> {
    let [a1, a2, a3] = pa::argv_nsys_probe(&x.o.nsys);
    let v = x.ok(&a1).await?;
    // `nsys --help` may exit non-zero
    let h = x.any(&a2).await?;
    let ph = x.ok(&a3).await?;
    let caps = pa::NsysCaps::from_help(
        &String::from_utf8_lossy(&v.stdout),
        &String::from_utf8_lossy(&[h.stdout, h.stderr].concat()),
        &String::from_utf8_lossy(&ph.stdout),
    );
    let strategy = pa::choose_strategy(x.o.strategy, &caps)?;
    say(&format!("nsys: {}", caps.version.as_deref().unwrap_or("?")));
    Ok((caps, strategy))
}

/// What the checks before the capture read.
#[derive(Default)]
struct PreChecks {
    engine_env: Option<pa::EngineEnv>,
    cupti: Option<pa::CuptiCheck>,
    graph_trace: Option<String>,
}

/// The engine's environment, its nsys's `--cuda-graph-trace` (A30, refused when not `node`), CUPTI beside nsys's
/// injection library (A47).
async fn engine_checks<C: Cluster>(
    x: &mut Ctx<'_, C>,
    strategy: Strategy,
    e: &pa::EngineChoice,
    procs: &[pa::ProcEntry],
    driver: &pa::DriverInfo,
) -> Result<PreChecks> {
    say(&format!("engine PID {} ({})", e.pid, e.cmdline));
    if !e.cuda_owner {
        x.warnings.push(format!("engine PID {} shows no /dev/nvidia* descriptor and no libcuda mapping", e.pid));
    }
    // the engine's environment (only the checked variables leave the container) and command lines
    let r = x.ok(&pa::argv_env_check(&e.pid.to_string())).await?;
    let mut env = pa::parse_env_check(e.pid, &String::from_utf8_lossy(&r.stdout));
    pa::note_cmdlines(&mut env, &pa::engine_chain(procs, e.pid));
    for w in pa::check_engine_env(strategy, &env)? {
        x.warn(w);
    }
    let mut out = PreChecks::default();
    if strategy != Strategy::Attach {
        if let Some(n) = &e.nsys_ancestor {
            out.graph_trace = Some(pa::check_graph_trace(n)?);
        }
    }
    let dir = env
        .cuda_injection64_path
        .as_deref()
        .filter(|v| env.nsys_injection && v.contains('/'))
        .and_then(|v| v.rsplit_once('/'))
        .map(|(d, _)| if d.is_empty() { "/".to_string() } else { d.to_string() });
    if let Some(dir) = dir {
        let r = x.ok(&pa::argv_cupti_check(&e.pid.to_string(), &dir)).await?;
        let cupti = pa::parse_cupti_check(Some(&dir), &String::from_utf8_lossy(&r.stdout));
        for w in pa::cupti_findings(&cupti, driver.cuda_major) {
            x.warn(w);
        }
        out.cupti = Some(cupti);
    }
    out.engine_env = Some(env);
    Ok(out)
}

/// The endpoint strategy: list the reports, `POST /start_profile`, wait, `POST /stop_profile`, wait for the new
/// report, copy it into the work folder. Returns the report's path as nsys wrote it.
async fn capture_endpoint<C: Cluster>(
    x: &mut Ctx<'_, C>,
    setup: &Shared,
    e: &pa::EngineChoice,
    rep: &str,
    captured_at: &mut String,
) -> Result<String> {
    let (c, o) = (x.c, x.o);
    let ep = pa::check_endpoint_nsys(e)?;
    let nsys_pid = e.nsys_ancestor.as_ref().map(|n| n.pid).unwrap_or(0);
    let dir = match &ep.dir {
        Some(d) => format!("/proc/{nsys_pid}/root{d}"),
        None => format!("/proc/{nsys_pid}/cwd"),
    };
    let before = pa::parse_report_listing(&String::from_utf8_lossy(&x.any(&pa::argv_list_reports(&dir)).await?.stdout));
    if let Some(used) = pa::stop_range_used(&ep, &before) {
        return Err(Error::env(format!(
            "strategy endpoint refused: the engine's nsys (PID {nsys_pid}) runs with --capture-range-end=stop and has \
             already written its one report {} ({} bytes); it ignores further cudaProfilerStart calls. Fix: restart \
             the engine under nsys, or use --strategy session",
            used.path, used.size
        )));
    }
    if ep.end == pa::RangeEnd::Stop {
        x.warn(format!(
            "the engine's nsys (PID {nsys_pid}) runs with --capture-range-end=stop: one capture per engine start; each \
             further capture needs an engine restart (later /start_profile calls capture nothing)"
        ));
    }
    setup.lock().unwrap().profiling_started = true;
    *captured_at = nsyskit::contract::rfc3339_utc(SystemTime::now());
    let (code, body) = post(c, o, &x.pod, "/start_profile").await?;
    if !(200..300).contains(&code) {
        return Err(Error::env(format!("POST /start_profile answered {code}: {}", body.trim())));
    }
    say(&format!("capturing for {} s", o.duration_s));
    tokio::time::sleep(Duration::from_secs_f64(o.duration_s)).await;
    let (code, body) = post(c, o, &x.pod, "/stop_profile").await?;
    setup.lock().unwrap().profiling_stopped = true;
    if !(200..300).contains(&code) {
        return Err(Error::env(format!("POST /stop_profile answered {code}: {}", body.trim())));
    }
    // Wait for nsys to write a new report whose size is stable; the whole wait, each listing included, is
    // bounded by --wait-timeout.
    let t0 = Instant::now();
    let wait = o.step_deadline();
    let mut last: Option<pa::ReportFile> = None;
    let found = loop {
        let left = wait.saturating_sub(t0.elapsed()).max(Duration::from_secs(1));
        let list = pa::argv_list_reports(&dir);
        let after = pa::parse_report_listing(&String::from_utf8_lossy(
            &exec_within(c, o, &x.pod, &x.tools, &list, left, "--wait-timeout after /stop_profile").await?.stdout,
        ));
        let mut new = pa::new_reports(&before, &after);
        new.sort_by_key(|r| r.mtime);
        if let Some(n) = new.pop() {
            if last.as_ref().is_some_and(|l| l.path == n.path && l.size == n.size) && n.size > 0 {
                break n;
            }
            last = Some(n);
        }
        if t0.elapsed() > wait {
            let hint = if ep.end == pa::RangeEnd::Repeat {
                " The engine's nsys runs with --capture-range-end=repeat: nsys 2025.3.1 was measured ignoring \
                 cudaProfilerStart in that mode (its output never says \"Capture range started in the application.\"; \
                 docs/pod-attach.md). Fix: start the engine with --capture-range-end=stop (one capture per engine \
                 start), or use --strategy session"
            } else {
                ""
            };
            return Err(Error::env(format!(
                "no new .nsys-rep appeared in {dir} within {} s after /stop_profile.{hint}",
                o.wait_timeout_s
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    x.work(&pa::argv_copy(&found.path, rep)).await?;
    Ok(found.path)
}

/// A58: the size gate before `nsys stats`: export, then stats only when the report reaches `--min-rep-bytes`.
async fn export_and_stats<C: Cluster>(x: &mut Ctx<'_, C>, rep: &str) -> Result<Option<u64>> {
    let o = x.o;
    say("exporting SQLite");
    x.work(&pa::argv_export(o)).await?;
    let size =
        x.ok(&pa::argv_size_of(rep)).await.ok().and_then(|r| String::from_utf8_lossy(&r.stdout).trim().parse().ok());
    let gate = match size {
        Some(n) => pa::size_gate(n, o.size_gate_bytes()),
        None => Err(format!("size gate: the size of {rep} could not be read; nsys stats not run")),
    };
    if let Err(why) = gate {
        x.warn(why);
        return Ok(size);
    }
    say("size gate passed: running nsys stats");
    let st = exec_within(x.c, o, &x.pod, &x.tools, &pa::argv_stats(o), o.work_deadline(), WORK_BASIS).await?;
    if st.exit_code != Some(0) {
        x.warnings.push(format!(
            "nsys stats exited {:?}: {}",
            st.exit_code,
            String::from_utf8_lossy(&st.stderr).trim()
        ));
    }
    Ok(size)
}

/// Copy the work folder's files out (sizes and sha256 from the container, a checked tar stream).
async fn copy_out<C: Cluster>(x: &Ctx<'_, C>) -> Result<Vec<pa::CopiedFile>> {
    let (c, o, pod_name, tools) = (x.c, x.o, &x.pod, &x.tools);
    let ls = x.ok(&pa::argv_list_workdir(&o.workdir)).await?;
    let names = pa::files_to_copy(&String::from_utf8_lossy(&ls.stdout), &o.capture_name)?;
    let sizes = pa::parse_sizes(&String::from_utf8_lossy(&x.ok(&pa::argv_sizes(&o.workdir, &names)).await?.stdout))?;
    let sums =
        pa::parse_sha256sum(&String::from_utf8_lossy(&x.work(&pa::argv_checksums(&o.workdir, &names)).await?.stdout))?;
    let expected = pa::expected_files(&names, &sizes, &sums, o.max_copy_bytes)?;
    let total: u64 = expected.values().map(|e| e.size).sum();
    say(&format!("copying {} files out ({total} bytes)", names.len()));
    let out_dir = std::path::Path::new(&o.out_dir);
    let mut sink = pa::TarSink::new(out_dir, expected, o.max_copy_bytes)?;
    let ctx = || format!("copy-out from {}/{pod_name} {}", o.namespace, o.workdir);
    // a stall of --wait-timeout without a byte stops the copy; so does its total deadline (a trickle)
    let limit = o.copy_deadline(total);
    let tar = match tokio::time::timeout(
        limit,
        c.exec_stream(&o.namespace, pod_name, tools, &pa::argv_tar(&o.workdir, &names), &mut sink, o.step_deadline()),
    )
    .await
    {
        Ok(r) => r.map_err(|e| e.context(ctx()))?,
        Err(_) => {
            return Err(Error::env(format!(
                "{}: tar stream not done within {} s (--wait-timeout + {total} bytes at 1 MiB/s) after {} bytes; stopped, nothing kept",
                ctx(),
                limit.as_secs(),
                sink.received()
            )))
        }
    };
    match tar.exit_code {
        Some(0) => {}
        None => {
            return Err(Error::env(format!(
                "{}: the exec stream ended after {} bytes without tar's exit status: the copy was interrupted; nothing kept",
                ctx(),
                sink.received()
            )))
        }
        Some(code) => {
            return Err(Error::env(format!(
                "{}: tar in the container exited {code}: {}; nothing kept",
                ctx(),
                String::from_utf8_lossy(&tar.stderr).trim()
            )))
        }
    }
    sink.commit().map_err(|e| e.context(ctx()))
}

/// The capture itself, by strategy. Returns when it started (UTC) and the report's path as nsys wrote it.
async fn capture<C: Cluster>(
    x: &mut Ctx<'_, C>,
    setup: &Shared,
    strategy: Strategy,
    engine: Option<&pa::EngineChoice>,
    rep: &str,
) -> Result<(String, String)> {
    let (c, o) = (x.c, x.o);
    let mut captured_at = String::new();
    let source_report = match strategy {
        Strategy::Endpoint => {
            let e = engine.expect("endpoint has an engine");
            capture_endpoint(x, setup, e, rep, &mut captured_at).await?
        }
        Strategy::Session => {
            setup.lock().unwrap().profiling_started = true;
            captured_at = nsyskit::contract::rfc3339_utc(SystemTime::now());
            x.ok(&pa::argv_session_start(o)).await?;
            say(&format!("capturing for {} s", o.duration_s));
            tokio::time::sleep(Duration::from_secs_f64(o.duration_s)).await;
            x.work(&pa::argv_session_stop(o)).await?;
            setup.lock().unwrap().profiling_stopped = true;
            rep.to_string()
        }
        Strategy::Attach => {
            let e = engine.expect("attach has an engine");
            setup.lock().unwrap().profiling_started = true;
            captured_at = nsyskit::contract::rfc3339_utc(SystemTime::now());
            say(&format!("capturing for {} s", o.duration_s));
            let argv = pa::argv_attach(o, &e.pid.to_string());
            exec_ok_within(c, o, &x.pod, &x.tools, &argv, o.attach_deadline(), "--duration + 10 x --wait-timeout")
                .await?;
            setup.lock().unwrap().profiling_stopped = true;
            rep.to_string()
        }
    };
    Ok((captured_at, source_report))
}

/// Execute a whole capture. `setup` records what was created so that [`super::cleanup`] can undo it.
pub async fn run<C: Cluster>(c: &C, o: &Options, setup: &Shared, gate: &Gate) -> Result<PodAttachDoc> {
    o.validate()?;
    let started = now_s();
    let pod = find_pod(c, o).await?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    setup.lock().unwrap().pod = Some(pod_name.clone());
    let container = pick_container(o, &pod, &pod_name)?;
    let mut o = o.clone();
    o.pod = Some(pod_name.clone());
    o.container = Some(container.clone());
    let o = &o;
    say(&format!("pod {}/{pod_name}, container {container}, strategy {}", o.namespace, o.strategy.name()));

    let sidecar = o.strategy != Strategy::Session;
    let tools = if sidecar { o.sidecar_name.clone() } else { container.clone() };
    let mut x = Ctx { c, o, pod: pod_name.clone(), tools: tools.clone(), warnings: Vec::new() };
    for w in nsyskit::nsys_resolve::workload::warnings(&o.workload, false) {
        x.warn(w);
    }
    let mut image_id = None;
    if sidecar {
        say(&format!("adding ephemeral container {} ({})", o.sidecar_name, o.image));
        within(
            &format!("PATCH {}/ephemeralcontainers", pa::pod_path(&o.namespace, &pod_name)),
            o.step_deadline(),
            STEP_BASIS,
            c.patch_ephemeral(&o.namespace, &pod_name, &pa::ephemeral_patch(o)),
        )
        .await?;
        setup.lock().unwrap().sidecar_added = true;
        image_id = wait_sidecar(c, o, &pod_name).await?;
    }
    setup.lock().unwrap().tools_container = Some(tools.clone());
    let image_digest = if sidecar { sidecar_digest(o, image_id.as_deref(), &mut x.warnings)? } else { None };
    let nsys_install = install_nsys(&x).await?;

    // Engine PID.
    let listing = x.ok(&pa::argv_proc_list()).await?;
    let procs = pa::parse_proc_listing(&String::from_utf8_lossy(&listing.stdout))?;
    let mut engine = pa::select_engine(&procs, &o.process_match);
    if o.strategy != Strategy::Session {
        engine = Ok(engine?);
    }
    let (caps, strategy) = probe_nsys(&x).await?;
    let engine = match (strategy, engine) {
        (Strategy::Session, Ok(e)) => Some(e),
        (Strategy::Session, Err(e)) => {
            x.warnings
                .push(format!("engine PID not identified (the session strategy does not need it): {}", e.message));
            None
        }
        (_, r) => Some(r?),
    };
    // A53: the nsys that runs here against the driver's CUDA version, before the capture.
    let driver = read_driver(&x).await;
    say(&format!(
        "driver: {} (CUDA {}; {})",
        driver.driver_version.as_deref().unwrap_or("?"),
        driver.cuda_major.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
        driver.source
    ));
    for w in pa::driver_findings(
        &format!("nsys in container {tools}"),
        caps.version.as_deref(),
        &driver,
        o.install_nsys.is_some(),
    ) {
        x.warn(w);
    }
    let pre = match &engine {
        Some(e) => engine_checks(&mut x, strategy, e, &procs, &driver).await?,
        None => PreChecks::default(),
    };

    x.ok(&pa::argv_mkdir_parent(&o.workdir)).await?;
    x.ok(&pa::argv_mkdir(&o.workdir)).await.map_err(|e| {
        e.context(format!("--workdir {} must not exist yet (cleanup removes it)", o.workdir)).with_arg("--workdir")
    })?;
    setup.lock().unwrap().workdir_made = true;
    let rep = format!("{}/{}.nsys-rep", o.workdir, o.capture_name);
    let t_cap = Instant::now();
    let (captured_at, source_report) = capture(&mut x, setup, strategy, engine.as_ref(), &rep).await?;
    let capture_s = t_cap.elapsed().as_secs_f64();
    let report_bytes = export_and_stats(&mut x, &rep).await?;
    let copied = copy_out(&x).await?;
    let out_dir = std::path::Path::new(&o.out_dir);
    let sqlite = out_dir.join(format!("{}.sqlite", o.capture_name));
    let after = after_checks(&mut x, &sqlite, engine.as_ref(), &driver, strategy);
    let gate = pa::run_gate_with(gate, &out_dir.join(format!("{}.nsys-rep", o.capture_name)), &sqlite, o.min_rep_bytes);
    if gate.verdict == "NOT_RUN" {
        x.warnings.push(format!("gate-check not run: {}", gate.reason));
    }
    let (schema, tool) = PodAttachDoc::header();
    Ok(PodAttachDoc {
        schema,
        tool,
        dry_run: false,
        strategy,
        namespace: o.namespace.clone(),
        pod: Some(pod_name.clone()),
        container: Some(container.clone()),
        plan: vec![],
        provenance: Some(pa::PodProvenance {
            namespace: o.namespace.clone(),
            pod: pod_name.clone(),
            pod_uid: pod.metadata.uid.clone(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            container: container.clone(),
            container_image: container_status_image(&pod, &container),
            sidecar: sidecar.then(|| o.sidecar_name.clone()),
            sidecar_image: sidecar.then(|| o.image.clone()),
            sidecar_image_digest: image_digest,
            sidecar_image_id: image_id,
            nsys_install,
            nsys: caps,
            engine,
            engine_env: pre.engine_env,
            captured_at: Some(captured_at),
            source_report: Some(source_report),
            started_at_unix_s: started,
            capture_s,
            graph_trace: pre.graph_trace,
            cupti: pre.cupti,
            driver: Some(driver),
            report_bytes,
            min_rep_bytes: Some(o.size_gate_bytes()),
            report_nsys_version: after.report_nsys_version.clone(),
            copied_nsys: o.copied_nsys(after.report_nsys_version),
            capture_trigger: after.trigger,
            workload: Some(o.workload.clone()),
        }),
        out_dir: Some(o.out_dir.clone()),
        files: copied,
        gate: Some(gate),
        kernel_profile: None,
        bundle: None,
        cleanup: vec![],
        warnings: x.warnings,
    })
}

/// What the checks after the copy read of the export.
struct AfterChecks {
    report_nsys_version: Option<String>,
    trigger: Option<pa::CaptureTrigger>,
}

/// After the copy: the nsys version that wrote the report (the engine's, for endpoint) against the driver
/// (A53), and which process triggered the capture range (B72).
fn after_checks<C: Cluster>(
    x: &mut Ctx<'_, C>,
    sqlite: &std::path::Path,
    engine: Option<&pa::EngineChoice>,
    driver: &pa::DriverInfo,
    strategy: Strategy,
) -> AfterChecks {
    let report_nsys_version = pa::report_nsys_version(sqlite);
    if strategy == Strategy::Endpoint {
        for w in
            pa::driver_findings("the engine's nsys (from the report)", report_nsys_version.as_deref(), driver, false)
        {
            x.warn(w);
        }
    }
    let trigger = match (engine, strategy) {
        (Some(e), Strategy::Endpoint) => match pa::capture_trigger(sqlite, e.pid) {
            Ok(t) => {
                if let Some(w) = pa::trigger_finding(&t) {
                    x.warn(w);
                }
                Some(t)
            }
            Err(err) => {
                x.warn(format!("capture trigger: the export could not be read: {}", err.message));
                None
            }
        },
        _ => None,
    };
    AfterChecks { report_nsys_version, trigger }
}

fn container_status_image(p: &Pod, c: &str) -> Option<String> {
    p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| s.name == c).map(|s| {
        format!("{}{}", s.image, if s.image_id.is_empty() { String::new() } else { format!(" ({})", s.image_id) })
    })
}
