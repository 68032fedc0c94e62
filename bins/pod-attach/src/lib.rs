//! The Kubernetes side of `pod-attach`: a small [`Cluster`] trait (pod list/get, the ephemeral-container patch,
//! events, exec, an HTTP POST through a port-forward), its `kube` implementation [`KubeCluster`], and [`run`],
//! which executes the steps planned by `nsyskit::pod_attach` against any `Cluster`.
//!
//! No token or kubeconfig content is ever printed: errors carry the API status message and the request path only.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{AttachParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use nsyskit::contract::{Document, Error, Result};
use nsyskit::pod_attach::{self as pa, Options, PodAttachDoc, Strategy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a command run in a container returned.
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit code from the status channel (0 on `Success`); None when the stream ended without a status
    /// (an interrupted exec).
    pub exit_code: Option<i32>,
    /// The status message when the command failed without an exit code (e.g. it could not be started).
    pub status_message: Option<String>,
}

/// The Kubernetes operations pod-attach uses.
#[allow(async_fn_in_trait)]
pub trait Cluster {
    async fn get_pod(&self, ns: &str, name: &str) -> Result<Pod>;
    async fn list_pods(&self, ns: &str, selector: &str) -> Result<Vec<Pod>>;
    async fn patch_ephemeral(&self, ns: &str, name: &str, body: &serde_json::Value) -> Result<Pod>;
    /// `"reason: message"` of the pod's events, oldest first.
    async fn events(&self, ns: &str, pod: &str) -> Result<Vec<String>>;
    async fn exec(&self, ns: &str, pod: &str, container: &str, argv: &[String]) -> Result<ExecOutput>;
    /// `POST path` to `port` of the pod through a port-forward; the HTTP status code and body.
    async fn http_post(&self, ns: &str, pod: &str, port: u16, path: &str) -> Result<(u16, String)>;
}

/// The `kube` implementation.
pub struct KubeCluster {
    pub client: Client,
}

fn kube_err(what: &str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) => Error::env(format!("{what}: API answered {} {}: {}", s.code, s.reason, s.message)),
        other => Error::env(format!("{what}: {other}")),
    }
}

impl KubeCluster {
    /// The normal kube way: KUBECONFIG / ~/.kube/config, else in-cluster.
    pub async fn connect() -> Result<KubeCluster> {
        let client = Client::try_default().await.map_err(|e| kube_err("cannot load a Kubernetes client config (KUBECONFIG, ~/.kube/config or in-cluster)", e))?;
        Ok(KubeCluster { client })
    }
    /// With an explicit `KUBECONFIG` value (one path or a `:`-separated list, merged like kubectl; the Nushell
    /// plugin passes Nushell's `$env.KUBECONFIG`, which the plugin process may not have); None: [`connect`].
    ///
    /// [`connect`]: KubeCluster::connect
    pub async fn connect_with(kubeconfig: Option<&std::ffi::OsStr>) -> Result<KubeCluster> {
        let paths: Vec<PathBuf> = kubeconfig.map(|v| std::env::split_paths(v).filter(|p| !p.as_os_str().is_empty()).collect()).unwrap_or_default();
        if paths.is_empty() {
            return KubeCluster::connect().await;
        }
        let what = format!("cannot load the Kubernetes client config KUBECONFIG={}", kubeconfig.unwrap_or_default().to_string_lossy());
        let merged = paths
            .iter()
            .try_fold(kube::config::Kubeconfig::default(), |m, p| kube::config::Kubeconfig::read_from(p).and_then(|c| m.merge(c)))
            .map_err(|e| Error::env(format!("{what}: {e}")))?;
        let config = kube::Config::from_custom_kubeconfig(merged, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::env(format!("{what}: {e}")))?;
        let client = Client::try_from(config).map_err(|e| kube_err(&what, e))?;
        Ok(KubeCluster { client })
    }
    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }
}

impl Cluster for KubeCluster {
    async fn get_pod(&self, ns: &str, name: &str) -> Result<Pod> {
        self.pods(ns).get(name).await.map_err(|e| kube_err(&format!("GET {}", pa::pod_path(ns, name)), e))
    }
    async fn list_pods(&self, ns: &str, selector: &str) -> Result<Vec<Pod>> {
        let l = self.pods(ns).list(&ListParams::default().labels(selector)).await.map_err(|e| kube_err(&format!("list pods in {ns} with selector {selector:?}"), e))?;
        Ok(l.items)
    }
    async fn patch_ephemeral(&self, ns: &str, name: &str, body: &serde_json::Value) -> Result<Pod> {
        self.pods(ns)
            .patch_ephemeral_containers(name, &PatchParams::default(), &Patch::Strategic(body))
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 403 => Error::env(format!(
                    "adding the ephemeral container was forbidden (403 {}): {}. Fix: grant `patch` on pods/ephemeralcontainers in {ns}",
                    s.reason, s.message
                )),
                kube::Error::Api(s) if s.code == 404 => Error::env(format!(
                    "PATCH {}/ephemeralcontainers answered 404: {} (ephemeral containers disabled on this cluster, or the pod is gone)",
                    pa::pod_path(ns, name),
                    s.message
                )),
                e => kube_err(&format!("PATCH {}/ephemeralcontainers", pa::pod_path(ns, name)), e),
            })
    }
    async fn events(&self, ns: &str, pod: &str) -> Result<Vec<String>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
        let l = api.list(&ListParams::default().fields(&format!("involvedObject.name={pod}"))).await.map_err(|e| kube_err("list events", e))?;
        Ok(l.items.into_iter().map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default())).collect())
    }
    async fn exec(&self, ns: &str, pod: &str, container: &str, argv: &[String]) -> Result<ExecOutput> {
        let ap = AttachParams::default().container(container).stdin(false).stdout(true).stderr(true);
        let what = || format!("exec in {ns}/{pod} container {container} of {:?}", argv.first().map(String::as_str).unwrap_or(""));
        let mut p = self.pods(ns).exec(pod, argv.to_vec(), &ap).await.map_err(|e| kube_err(&what(), e))?;
        let mut out = p.stdout().expect("stdout requested");
        let mut err = p.stderr().expect("stderr requested");
        let status = p.take_status().expect("first take");
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let (r1, r2) = tokio::join!(out.read_to_end(&mut o), err.read_to_end(&mut e));
        r1.and(r2).map_err(|e| Error::env(format!("{}: reading output: {e}", what())))?;
        let st = status.await;
        let _ = p.join().await;
        let status_message = st.as_ref().filter(|s| s.status.as_deref() != Some("Success")).map(|s| s.message.clone().unwrap_or_default());
        let exit_code = st.map(|s| {
            if s.status.as_deref() == Some("Success") {
                0
            } else {
                s.details
                    .and_then(|d| d.causes)
                    .and_then(|c| c.into_iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
                    .and_then(|c| c.message)
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(-1)
            }
        });
        Ok(ExecOutput { stdout: o, stderr: e, exit_code, status_message })
    }
    async fn http_post(&self, ns: &str, pod: &str, port: u16, path: &str) -> Result<(u16, String)> {
        let what = format!("POST {path} to port {port} of {ns}/{pod} through a port-forward");
        let mut pf = self.pods(ns).portforward(pod, &[port]).await.map_err(|e| kube_err(&what, e))?;
        let mut s = pf.take_stream(port).ok_or_else(|| Error::env(format!("{what}: no stream")))?;
        let req = format!("POST {path} HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.map_err(|e| Error::env(format!("{what}: {e}")))?;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(120), s.read_to_end(&mut buf)).await;
        drop(s);
        pf.abort();
        let text = String::from_utf8_lossy(&buf).to_string();
        let code = text
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| Error::env(format!("{what}: no HTTP response ({} bytes)", buf.len())))?;
        let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
        Ok((code, body))
    }
}

/// What the run has set up, so cleanup can undo it even when the run future was dropped (Ctrl-C).
#[derive(Debug, Default, Clone)]
pub struct Setup {
    pub pod: Option<String>,
    /// Container that runs nsys and holds the work folder.
    pub tools_container: Option<String>,
    pub sidecar_added: bool,
    pub workdir_made: bool,
    pub profiling_started: bool,
    pub profiling_stopped: bool,
    pub log: Vec<String>,
}

pub type Shared = Arc<Mutex<Setup>>;

fn say(msg: &str) {
    eprintln!("pod-attach: {msg}");
}

async fn exec_ok<C: Cluster>(c: &C, o: &Options, pod: &str, container: &str, argv: &[String]) -> Result<ExecOutput> {
    let r = c.exec(&o.namespace, pod, container, argv).await?;
    match r.exit_code {
        Some(0) => Ok(r),
        code => Err(Error::env(format!(
            "in {}/{pod} container {container}: {:?} {}: {}",
            o.namespace,
            argv,
            match code {
                Some(c) => format!("exited {c}"),
                None => "ended without an exit status (the exec stream was cut)".into(),
            },
            [String::from_utf8_lossy(&r.stderr).trim().to_string(), r.status_message.clone().unwrap_or_default()].join(" ").trim()
        ))),
    }
}

fn container_names(p: &Pod) -> Vec<String> {
    p.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
}

/// Find exactly one pod.
pub async fn find_pod<C: Cluster>(c: &C, o: &Options) -> Result<Pod> {
    if let Some(p) = &o.pod {
        return c.get_pod(&o.namespace, p).await;
    }
    let sel = o.selector.clone().unwrap_or_default();
    let pods = c.list_pods(&o.namespace, &sel).await?;
    match pods.len() {
        1 => Ok(pods.into_iter().next().unwrap()),
        0 => Err(Error::input(format!("no pod in namespace {} matches selector {sel:?}", o.namespace)).with_arg("--selector")),
        n => Err(Error::input(format!(
            "{n} pods in namespace {} match selector {sel:?}; pick one with --pod: {}",
            o.namespace,
            pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>().join(", ")
        ))
        .with_arg("--selector")),
    }
}

async fn wait_sidecar<C: Cluster>(c: &C, o: &Options, pod: &str) -> Result<()> {
    let t0 = Instant::now();
    let fail = |why: String, events: Vec<String>| {
        Error::env(format!(
            "ephemeral container {} in {}/{pod} did not start: {why}. Pod events:\n{}",
            o.sidecar_name,
            o.namespace,
            if events.is_empty() { "  (none)".to_string() } else { events.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n") }
        ))
    };
    loop {
        let p = c.get_pod(&o.namespace, pod).await?;
        let st = p.status.as_ref().and_then(|s| s.ephemeral_container_statuses.as_ref()).and_then(|v| v.iter().find(|s| s.name == o.sidecar_name).cloned());
        if let Some(state) = st.and_then(|s| s.state) {
            if state.running.is_some() {
                return Ok(());
            }
            if let Some(t) = state.terminated {
                let ev = c.events(&o.namespace, pod).await.unwrap_or_default();
                return Err(fail(format!("terminated ({}: {})", t.reason.unwrap_or_default(), t.message.unwrap_or_default()), ev));
            }
            if let Some(w) = state.waiting {
                let reason = w.reason.clone().unwrap_or_default();
                if ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerError", "CreateContainerConfigError"].contains(&reason.as_str()) {
                    let ev = c.events(&o.namespace, pod).await.unwrap_or_default();
                    return Err(fail(format!("{reason}: {}", w.message.unwrap_or_default()), ev));
                }
            }
        }
        if t0.elapsed() > Duration::from_secs(o.wait_timeout_s) {
            let ev = c.events(&o.namespace, pod).await.unwrap_or_default();
            return Err(fail(format!("still not running after {} s (--wait-timeout)", o.wait_timeout_s), ev));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// How the copied capture is gated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// No gate-check: the verdict is `NOT_RUN` with this reason.
    Skip(String),
    /// Run this `gate-check` program (`REPORT --sqlite SQLITE --compact`) and read its exit code and document
    /// (the binary: `--gate-check`, else the one next to pod-attach, else on PATH).
    Program(PathBuf),
    /// Call [`nsyskit::gate::run`] in this process (the Nushell plugin: no subprocess, no binary to find).
    Library,
}

impl Gate {
    /// The binary's choice: `--gate-check PATH`, else `gate-check` next to the running program, else on `PATH`,
    /// else [`Gate::Skip`].
    pub fn find_program(explicit: Option<&Path>) -> Gate {
        if let Some(g) = explicit {
            return Gate::Program(g.to_path_buf());
        }
        let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("gate-check"))).filter(|p| p.is_file());
        let found = beside.or_else(|| {
            std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("gate-check")).find(|p| p.is_file()))
        });
        match found {
            Some(p) => Gate::Program(p),
            None => Gate::Skip("no gate-check binary found (next to pod-attach, on PATH, or --gate-check)".into()),
        }
    }
}

fn retry_ids(doc: Option<&serde_json::Value>) -> Vec<String> {
    doc.and_then(|d| d.get("retry"))
        .and_then(|r| r.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Gate the copied files (`REPORT`, with its export `SQLITE`): `PASS`, `RETRY`, else `NOT_RUN` with why.
pub fn run_gate(gate: &Gate, report: &Path, sqlite: &Path) -> pa::GateResult {
    match gate {
        Gate::Skip(reason) => pa::GateResult { verdict: "NOT_RUN".into(), reason: reason.clone(), document: None },
        Gate::Program(bin) => run_gate_program(bin, report, sqlite),
        Gate::Library => {
            let opts = nsyskit::gate::GateOptions { capture: report.to_path_buf(), sqlite: Some(sqlite.to_path_buf()), ..Default::default() };
            match nsyskit::gate::run(&opts) {
                Ok(doc) => {
                    let code = doc.exit_code();
                    let doc = serde_json::to_value(&doc).ok();
                    let (verdict, reason) = if code == 0 {
                        ("PASS", "gate-check (library) said PASS".to_string())
                    } else {
                        ("RETRY", format!("gate-check (library): gates {} said retry (see document.gates)", retry_ids(doc.as_ref()).join(",")))
                    };
                    pa::GateResult { verdict: verdict.into(), reason, document: doc }
                }
                Err(e) => pa::GateResult { verdict: "NOT_RUN".into(), reason: format!("gate-check (library): {}", e.message), document: None },
            }
        }
    }
}

fn run_gate_program(bin: &Path, report: &Path, sqlite: &Path) -> pa::GateResult {
    match std::process::Command::new(bin).arg(report).arg("--sqlite").arg(sqlite).arg("--compact").output() {
        Ok(out) => {
            let doc = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
            let verdict = match out.status.code() {
                Some(0) => "PASS",
                Some(1) => "RETRY",
                _ => "NOT_RUN",
            };
            let retry = retry_ids(doc.as_ref());
            let reason = match verdict {
                "NOT_RUN" => format!("{} exited {:?}: {}", bin.display(), out.status.code(), String::from_utf8_lossy(&out.stderr).trim()),
                "RETRY" => format!("{} exited 1: gates {} said retry (see document.gates)", bin.display(), retry.join(",")),
                _ => format!("{} exited 0", bin.display()),
            };
            pa::GateResult { verdict: verdict.into(), reason, document: doc }
        }
        Err(e) => pa::GateResult { verdict: "NOT_RUN".into(), reason: format!("{}: {e}", bin.display()), document: None },
    }
}

/// Execute a whole capture. `setup` records what was created so that [`cleanup`] can undo it.
pub async fn run<C: Cluster>(c: &C, o: &Options, setup: &Shared, gate: &Gate) -> Result<PodAttachDoc> {
    o.validate()?;
    let started = now_s();
    let pod = find_pod(c, o).await?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    setup.lock().unwrap().pod = Some(pod_name.clone());
    let names = container_names(&pod);
    let container = match &o.container {
        Some(cn) if names.contains(cn) => cn.clone(),
        Some(cn) => return Err(Error::input(format!("pod {}/{pod_name} has no container {cn:?}; it has: {}", o.namespace, names.join(", "))).with_arg("--container")),
        None if names.len() == 1 => names[0].clone(),
        None => return Err(Error::input(format!("pod {}/{pod_name} has {} containers ({}); pick one with --container", o.namespace, names.len(), names.join(", "))).with_arg("--container")),
    };
    let mut o = o.clone();
    o.pod = Some(pod_name.clone());
    o.container = Some(container.clone());
    let o = &o;
    say(&format!("pod {}/{pod_name}, container {container}, strategy {}", o.namespace, o.strategy.name()));

    let sidecar = o.strategy != Strategy::Session;
    let tools = if sidecar { o.sidecar_name.clone() } else { container.clone() };
    if sidecar {
        say(&format!("adding ephemeral container {} ({})", o.sidecar_name, o.image));
        c.patch_ephemeral(&o.namespace, &pod_name, &pa::ephemeral_patch(o)).await?;
        setup.lock().unwrap().sidecar_added = true;
        wait_sidecar(c, o, &pod_name).await?;
    }
    setup.lock().unwrap().tools_container = Some(tools.clone());

    // Engine PID.
    let listing = exec_ok(c, o, &pod_name, &tools, &pa::argv_proc_list()).await?;
    let procs = pa::parse_proc_listing(&String::from_utf8_lossy(&listing.stdout))?;
    let mut engine = pa::select_engine(&procs, &o.process_match);
    if o.strategy != Strategy::Session {
        engine = Ok(engine?);
    }
    let mut warnings = Vec::new();
    // nsys capabilities.
    let [a1, a2, a3] = pa::argv_nsys_probe(&o.nsys);
    let v = exec_ok(c, o, &pod_name, &tools, &a1).await?;
    let h = c.exec(&o.namespace, &pod_name, &tools, &a2).await?; // `nsys --help` may exit non-zero
    let ph = exec_ok(c, o, &pod_name, &tools, &a3).await?;
    let caps = pa::NsysCaps::from_help(
        &String::from_utf8_lossy(&v.stdout),
        &String::from_utf8_lossy(&[h.stdout, h.stderr].concat()),
        &String::from_utf8_lossy(&ph.stdout),
    );
    let strategy = pa::choose_strategy(o.strategy, &caps)?;
    say(&format!("nsys: {}", caps.version.as_deref().unwrap_or("?")));
    let engine = match (strategy, engine) {
        (Strategy::Session, Ok(e)) => Some(e),
        (Strategy::Session, Err(e)) => {
            warnings.push(format!("engine PID not identified (the session strategy does not need it): {}", e.message));
            None
        }
        (_, r) => Some(r?),
    };
    if let Some(e) = &engine {
        say(&format!("engine PID {} ({})", e.pid, e.cmdline));
        if !e.cuda_owner {
            warnings.push(format!("engine PID {} shows no /dev/nvidia* descriptor and no libcuda mapping", e.pid));
        }
    }

    exec_ok(c, o, &pod_name, &tools, &pa::argv_mkdir(&o.workdir)).await?;
    setup.lock().unwrap().workdir_made = true;
    let rep = format!("{}/{}.nsys-rep", o.workdir, o.capture_name);
    let t_cap = Instant::now();
    let source_report;
    match strategy {
        Strategy::Endpoint => {
            let e = engine.as_ref().expect("endpoint has an engine");
            let ep = pa::check_endpoint_nsys(e)?;
            let nsys_pid = e.nsys_ancestor.as_ref().map(|n| n.pid).unwrap_or(0);
            let dir = match &ep.dir {
                Some(d) => format!("/proc/{nsys_pid}/root{d}"),
                None => format!("/proc/{nsys_pid}/cwd"),
            };
            let before = pa::parse_report_listing(&String::from_utf8_lossy(&c.exec(&o.namespace, &pod_name, &tools, &pa::argv_list_reports(&dir)).await?.stdout));
            if let Some(used) = pa::stop_range_used(&ep, &before) {
                return Err(Error::env(format!(
                    "strategy endpoint refused: the engine's nsys (PID {nsys_pid}) runs with --capture-range-end=stop and has \
                     already written its one report {} ({} bytes); it ignores further cudaProfilerStart calls. Fix: restart \
                     the engine under nsys, or use --strategy session",
                    used.path, used.size
                )));
            }
            if ep.end == pa::RangeEnd::Stop {
                warnings.push(format!(
                    "the engine's nsys (PID {nsys_pid}) runs with --capture-range-end=stop: one capture per engine start (later /start_profile calls capture nothing)"
                ));
            }
            setup.lock().unwrap().profiling_started = true;
            let (code, body) = c.http_post(&o.namespace, &pod_name, o.port, "/start_profile").await?;
            if !(200..300).contains(&code) {
                return Err(Error::env(format!("POST /start_profile answered {code}: {}", body.trim())));
            }
            say(&format!("capturing for {} s", o.duration_s));
            tokio::time::sleep(Duration::from_secs_f64(o.duration_s)).await;
            let (code, body) = c.http_post(&o.namespace, &pod_name, o.port, "/stop_profile").await?;
            setup.lock().unwrap().profiling_stopped = true;
            if !(200..300).contains(&code) {
                return Err(Error::env(format!("POST /stop_profile answered {code}: {}", body.trim())));
            }
            // Wait for nsys to write a new report whose size is stable.
            let t0 = Instant::now();
            let mut last: Option<pa::ReportFile> = None;
            let found = loop {
                let after = pa::parse_report_listing(&String::from_utf8_lossy(&c.exec(&o.namespace, &pod_name, &tools, &pa::argv_list_reports(&dir)).await?.stdout));
                let mut new = pa::new_reports(&before, &after);
                new.sort_by_key(|r| r.mtime);
                if let Some(n) = new.pop() {
                    if last.as_ref().is_some_and(|l| l.path == n.path && l.size == n.size) && n.size > 0 {
                        break n;
                    }
                    last = Some(n);
                }
                if t0.elapsed() > Duration::from_secs(o.wait_timeout_s) {
                    let hint = if ep.end == pa::RangeEnd::Repeat {
                        " The engine's nsys runs with --capture-range-end=repeat: nsys 2025.3.1 was measured ignoring \
                         cudaProfilerStart in that mode (its output never says \"Capture range started in the application.\"; \
                         docs/pod-attach.md). Fix: start the engine with --capture-range-end=stop (one capture per engine \
                         start), or use --strategy session"
                    } else {
                        ""
                    };
                    return Err(Error::env(format!("no new .nsys-rep appeared in {dir} within {} s after /stop_profile.{hint}", o.wait_timeout_s)));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            source_report = Some(found.path.clone());
            exec_ok(c, o, &pod_name, &tools, &pa::argv_copy(&found.path, &rep)).await?;
        }
        Strategy::Session => {
            setup.lock().unwrap().profiling_started = true;
            exec_ok(c, o, &pod_name, &tools, &pa::argv_session_start(o)).await?;
            say(&format!("capturing for {} s", o.duration_s));
            tokio::time::sleep(Duration::from_secs_f64(o.duration_s)).await;
            exec_ok(c, o, &pod_name, &tools, &pa::argv_session_stop(o)).await?;
            setup.lock().unwrap().profiling_stopped = true;
            source_report = Some(rep.clone());
        }
        Strategy::Attach => {
            let e = engine.as_ref().expect("attach has an engine");
            setup.lock().unwrap().profiling_started = true;
            say(&format!("capturing for {} s", o.duration_s));
            exec_ok(c, o, &pod_name, &tools, &pa::argv_attach(o, &e.pid.to_string())).await?;
            setup.lock().unwrap().profiling_stopped = true;
            source_report = Some(rep.clone());
        }
    }
    let capture_s = t_cap.elapsed().as_secs_f64();
    say("exporting SQLite and stats");
    exec_ok(c, o, &pod_name, &tools, &pa::argv_export(o)).await?;
    let st = c.exec(&o.namespace, &pod_name, &tools, &pa::argv_stats(o)).await?;
    if st.exit_code != Some(0) {
        warnings.push(format!("nsys stats exited {:?}: {}", st.exit_code, String::from_utf8_lossy(&st.stderr).trim()));
    }

    // Copy out.
    let ls = exec_ok(c, o, &pod_name, &tools, &pa::argv_list_workdir(&o.workdir)).await?;
    let names = pa::files_to_copy(&String::from_utf8_lossy(&ls.stdout), &o.capture_name)?;
    let sizes = pa::parse_sizes(&String::from_utf8_lossy(&exec_ok(c, o, &pod_name, &tools, &pa::argv_sizes(&o.workdir, &names)).await?.stdout))?;
    let sums = pa::parse_sha256sum(&String::from_utf8_lossy(&exec_ok(c, o, &pod_name, &tools, &pa::argv_checksums(&o.workdir, &names)).await?.stdout))?;
    say(&format!("copying {} files out", names.len()));
    let tar = c.exec(&o.namespace, &pod_name, &tools, &pa::argv_tar(&o.workdir, &names)).await?;
    let out_dir = std::path::Path::new(&o.out_dir);
    std::fs::create_dir_all(out_dir).map_err(|e| Error::env(format!("{}: {e}", out_dir.display())).with_arg("--out-dir"))?;
    let files = pa::untar_checked(&tar.stdout, out_dir).map_err(|e| e.context(format!("copy-out from {}/{pod_name} {}", o.namespace, o.workdir)))?;
    if tar.exit_code != Some(0) {
        return Err(Error::env(format!("tar in the container exited {:?}: {}", tar.exit_code, String::from_utf8_lossy(&tar.stderr).trim())));
    }
    let mut copied = Vec::new();
    for n in &names {
        let (_, bytes) = files.iter().find(|(f, _)| f == n).ok_or_else(|| Error::env(format!("copy-out: {n} missing from the tar stream")))?;
        let local = pa::sha256_hex(bytes);
        let remote = sums.get(n).ok_or_else(|| Error::env(format!("copy-out: no sha256 for {n} from the container")))?;
        let rsize = *sizes.get(n).ok_or_else(|| Error::env(format!("copy-out: no size for {n} from the container")))?;
        if rsize != bytes.len() as u64 || &local != remote {
            return Err(Error::env(format!(
                "copy-out: {n} differs: container {rsize} bytes sha256 {remote}, received {} bytes sha256 {local}",
                bytes.len()
            )));
        }
        copied.push(pa::CopiedFile { name: n.clone(), path: out_dir.join(n).to_string_lossy().to_string(), size: rsize, sha256: local });
    }
    let sqlite = out_dir.join(format!("{}.sqlite", o.capture_name));
    let gate = run_gate(gate, &out_dir.join(format!("{}.nsys-rep", o.capture_name)), &sqlite);
    if gate.verdict == "NOT_RUN" {
        warnings.push(format!("gate-check not run: {}", gate.reason));
    }
    let cs = container_status_image(&pod, &container);
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
        provenance: Some(pa::Provenance {
            namespace: o.namespace.clone(),
            pod: pod_name.clone(),
            pod_uid: pod.metadata.uid.clone(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            container: container.clone(),
            container_image: cs,
            sidecar: sidecar.then(|| o.sidecar_name.clone()),
            sidecar_image: sidecar.then(|| o.image.clone()),
            nsys: caps,
            engine,
            source_report,
            started_at_unix_s: started,
            capture_s,
        }),
        out_dir: Some(o.out_dir.clone()),
        files: copied,
        gate: Some(gate),
        cleanup: vec![],
        warnings,
    })
}

fn container_status_image(p: &Pod, c: &str) -> Option<String> {
    p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| s.name == c).map(|s| format!("{}{}", s.image, s.image_id.is_empty().then_some(String::new()).unwrap_or_else(|| format!(" ({})", s.image_id))))
}

/// Undo what the run set up: stop a capture still running, remove the work folder, end the sidecar's sleep
/// (an ephemeral container cannot be removed). Returns what it did and what it could not do.
pub async fn cleanup<C: Cluster>(c: &C, o: &Options, setup: &Shared) -> Vec<String> {
    let s = setup.lock().unwrap().clone();
    let mut log = Vec::new();
    let (Some(pod), Some(tools)) = (s.pod.clone(), s.tools_container.clone()) else {
        if s.sidecar_added {
            log.push(format!("ephemeral container {} was added but never became usable; it cannot be removed (Kubernetes does not allow it) and ends when its `sleep {}` does", o.sidecar_name, o.sidecar_sleep_s));
        }
        return log;
    };
    if s.profiling_started && !s.profiling_stopped {
        match o.strategy {
            Strategy::Endpoint => match c.http_post(&o.namespace, &pod, o.port, "/stop_profile").await {
                Ok((code, _)) => log.push(format!("capture interrupted: POST /stop_profile answered {code}")),
                Err(e) => log.push(format!("capture interrupted: POST /stop_profile failed: {}", e.message)),
            },
            Strategy::Session => {
                let argv = vec![o.nsys.clone(), "cancel".into(), format!("--session={}", o.session)];
                match c.exec(&o.namespace, &pod, &tools, &argv).await {
                    Ok(r) => log.push(format!("capture interrupted: `nsys cancel --session={}` exited {:?}", o.session, r.exit_code)),
                    Err(e) => log.push(format!("capture interrupted: nsys cancel failed: {}", e.message)),
                }
            }
            Strategy::Attach => log.push("capture interrupted: the attach nsys ends with its exec stream".into()),
        }
    }
    if s.workdir_made {
        match c.exec(&o.namespace, &pod, &tools, &pa::argv_cleanup_workdir(&o.workdir)).await {
            Ok(r) if r.exit_code == Some(0) => log.push(format!("removed {} in container {tools}", o.workdir)),
            Ok(r) => log.push(format!("could not remove {}: exit {:?} {}", o.workdir, r.exit_code, String::from_utf8_lossy(&r.stderr).trim())),
            Err(e) => log.push(format!("could not remove {}: {}", o.workdir, e.message)),
        }
    }
    if s.sidecar_added {
        match c.exec(&o.namespace, &pod, &o.sidecar_name, &pa::argv_end_sleep(o.sidecar_sleep_s)).await {
            Ok(r) => log.push(format!(
                "ephemeral container {} cannot be removed (Kubernetes does not allow it); ended its `sleep {}` (pids: {})",
                o.sidecar_name,
                o.sidecar_sleep_s,
                String::from_utf8_lossy(&r.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
            )),
            Err(e) => log.push(format!("ephemeral container {} cannot be removed; ending its sleep failed: {}", o.sidecar_name, e.message)),
        }
    }
    log
}

/// pod-attach's flags as plain values, with the binary's defaults ([`Flags::default`]); both adapters (the
/// binary's clap arguments, the Nushell command's signature) fill one and call [`options`].
#[derive(Debug, Clone, PartialEq)]
pub struct Flags {
    pub namespace: String,
    pub pod: Option<String>,
    pub selector: Option<String>,
    pub container: Option<String>,
    pub image: Option<String>,
    pub profile: String,
    pub strategy: String,
    pub process_match: String,
    pub duration: f64,
    pub nsys: String,
    pub workdir: Option<String>,
    pub out_dir: String,
    pub port: u16,
    pub session: String,
    pub wait_timeout: u64,
    pub capture_name: String,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            namespace: "default".into(),
            pod: None,
            selector: None,
            container: None,
            image: None,
            profile: "general".into(),
            strategy: "endpoint".into(),
            process_match: pa::DEFAULT_PROCESS_MATCH.into(),
            duration: 10.0,
            nsys: "nsys".into(),
            workdir: None,
            out_dir: "pod-attach-out".into(),
            port: 8000,
            session: "nsyskit".into(),
            wait_timeout: 120,
            capture_name: "capture".into(),
        }
    }
}

/// The run's [`Options`] from the flags: a per-run id names the sidecar (`nsyskit-ID`) and the default work
/// folder (`/tmp/nsyskit-pod-attach-ID`), and a per-run sleep length lets cleanup recognise this sidecar's sleep.
/// Validated (usage errors name the flag).
pub fn options(f: &Flags) -> Result<Options> {
    let id = format!(
        "{:x}",
        std::process::id() as u64 ^ (SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0) & 0xffff_ffff)
    );
    let o = Options {
        namespace: f.namespace.clone(),
        pod: f.pod.clone(),
        selector: f.selector.clone(),
        container: f.container.clone(),
        image: f.image.clone().unwrap_or_default(),
        profile: pa::SecurityProfile::parse(&f.profile)?,
        strategy: Strategy::parse(&f.strategy)?,
        process_match: f.process_match.clone(),
        duration_s: f.duration,
        nsys: f.nsys.clone(),
        workdir: f.workdir.clone().unwrap_or_else(|| format!("/tmp/nsyskit-pod-attach-{id}")),
        out_dir: f.out_dir.clone(),
        port: f.port,
        session: f.session.clone(),
        sidecar_name: format!("nsyskit-{id}"),
        sidecar_sleep_s: (f.duration.ceil() as u64) + 3 * f.wait_timeout + 600 + (std::process::id() as u64 % 997),
        wait_timeout_s: f.wait_timeout,
        capture_name: f.capture_name.clone(),
    };
    o.validate()?;
    Ok(o)
}

/// How a run ended, after cleanup.
#[derive(Debug)]
pub enum Outcome {
    /// The capture was copied out and gated; the document's `cleanup` holds the cleanup log.
    Done(Box<PodAttachDoc>),
    /// A step failed; the cleanup log.
    Failed(Error, Vec<String>),
    /// The cancel future completed first (Ctrl-C), with its reason; the cleanup log.
    Interrupted(String, Vec<String>),
}

/// Run a capture against `c` until it ends or `cancel` completes (its output says why, e.g. `SIGINT`), then
/// ALWAYS clean up ([`cleanup`]) and attach the cleanup log. Progress and the cleanup log go to stderr.
pub async fn run_with_cleanup<C: Cluster>(c: &C, o: &Options, gate: &Gate, cancel: impl Future<Output = String>) -> Outcome {
    let setup: Shared = Arc::new(Mutex::new(Setup::default()));
    let outcome = tokio::select! {
        r = run(c, o, &setup, gate) => Ok(r),
        why = cancel => Err(why),
    };
    if let Err(why) = &outcome {
        say(&format!("interrupted ({why}); cleaning up"));
    }
    let log = cleanup(c, o, &setup).await;
    for l in &log {
        say(&format!("cleanup: {l}"));
    }
    match outcome {
        Err(why) => Outcome::Interrupted(why, log),
        Ok(Ok(mut doc)) => {
            doc.cleanup = log;
            Outcome::Done(Box::new(doc))
        }
        Ok(Err(e)) => Outcome::Failed(e, log),
    }
}

/// Connect ([`KubeCluster::connect_with`]: this `KUBECONFIG` value, else the normal kube configuration) and
/// [`run_with_cleanup`].
pub async fn connect_and_run(kubeconfig: Option<&std::ffi::OsStr>, o: &Options, gate: &Gate, cancel: impl Future<Output = String>) -> Result<Outcome> {
    let cluster = KubeCluster::connect_with(kubeconfig).await?;
    Ok(run_with_cleanup(&cluster, o, gate, cancel).await)
}

/// A small multi-threaded tokio runtime for one run (the binary and the Nushell command block on it).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::env(format!("cannot start the async runtime: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
    }

    #[test]
    fn options_from_default_flags() {
        let f = Flags { pod: Some("vllm-0".into()), image: Some("r/x@sha256:ab".into()), ..Flags::default() };
        let o = options(&f).unwrap();
        assert_eq!((o.namespace.as_str(), o.strategy, o.port, o.duration_s, o.nsys.as_str()), ("default", Strategy::Endpoint, 8000, 10.0, "nsys"));
        assert!(o.sidecar_name.starts_with("nsyskit-"));
        assert_eq!(o.workdir, format!("/tmp/nsyskit-pod-attach-{}", &o.sidecar_name["nsyskit-".len()..]));
        assert!(o.sidecar_sleep_s >= 10 + 3 * 120 + 600);
        let e = options(&Flags { duration: 0.0, ..f.clone() }).unwrap_err();
        assert_eq!(e.arg.as_deref(), Some("--duration"));
        let e = options(&Flags { pod: None, ..f }).unwrap_err();
        assert_eq!(e.arg.as_deref(), Some("--pod"));
    }

    #[test]
    fn library_gate_matches_gate_run() {
        let rep = fixture("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
        let sqlite = fixture("nsys-2023.4.4/cpu_nvtx_osrt.sqlite");
        let g = run_gate(&Gate::Library, &rep, &sqlite);
        // a CPU-only capture: RETRY with the gate document, exactly what gate::run says
        assert_eq!(g.verdict, "RETRY", "{}", g.reason);
        let want = nsyskit::gate::run(&nsyskit::gate::GateOptions { capture: rep.clone(), sqlite: Some(sqlite.clone()), ..Default::default() }).unwrap();
        let got = g.document.unwrap();
        let want = serde_json::to_value(&want).unwrap();
        assert_eq!(got, want);
        assert!(g.reason.contains(&format!("gates {} said retry", want["retry"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect::<Vec<_>>().join(","))), "{}", g.reason);
        let bad = run_gate(&Gate::Library, &rep, &fixture("nope.sqlite"));
        assert_eq!(bad.verdict, "NOT_RUN");
        assert!(bad.reason.contains("nope.sqlite"), "{}", bad.reason);
        let skip = run_gate(&Gate::Skip("no gate".into()), &rep, &sqlite);
        assert_eq!((skip.verdict.as_str(), skip.reason.as_str()), ("NOT_RUN", "no gate"));
    }
}
