//! The Kubernetes side of `pod-attach`: a small [`Cluster`] trait (pod list/get, the ephemeral-container patch,
//! events, exec, an HTTP POST through a port-forward), its `kube` implementation [`KubeCluster`], and [`run`],
//! which executes the steps planned by `nsyskit::pod_attach` against any `Cluster`.
//!
//! No token or kubeconfig content is ever printed: errors carry the API status message and the request path only.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{AttachParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use nsyskit::contract::{Error, Result};
use nsyskit::pod_attach::{self as pa, Options, PodAttachDoc, Strategy};
pub use nsyskit::pod_attach::{options, run_gate, Flags, Gate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod capture;
pub use capture::run;

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
    /// Like [`Cluster::exec`], but stdout goes to `sink` as it arrives (never held whole): the copy-out's tar
    /// stream. A `sink` error stops the exec, and so does `stall` passing without a byte of stdout. The returned
    /// `stdout` is empty.
    async fn exec_stream(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[String],
        sink: &mut pa::TarSink,
        stall: Duration,
    ) -> Result<ExecOutput>;
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
        let client = Client::try_default().await.map_err(|e| {
            let files: Vec<PathBuf> = match std::env::var_os("KUBECONFIG") {
                Some(v) => std::env::split_paths(&v).collect(),
                None => {
                    std::env::var_os("HOME").map(|h| vec![PathBuf::from(h).join(".kube/config")]).unwrap_or_default()
                }
            };
            Error::env(format!(
                "cannot load a Kubernetes client config (KUBECONFIG, ~/.kube/config or in-cluster): {}",
                redact_config_error(&e.to_string(), &files)
            ))
        })?;
        Ok(KubeCluster { client })
    }
    /// With an explicit `KUBECONFIG` value (one path or a `:`-separated list, merged like kubectl; the Nushell
    /// plugin passes Nushell's `$env.KUBECONFIG`, which the plugin process may not have); None: [`connect`].
    ///
    /// [`connect`]: KubeCluster::connect
    pub async fn connect_with(kubeconfig: Option<&std::ffi::OsStr>) -> Result<KubeCluster> {
        let paths: Vec<PathBuf> = kubeconfig
            .map(|v| std::env::split_paths(v).filter(|p| !p.as_os_str().is_empty()).collect())
            .unwrap_or_default();
        if paths.is_empty() {
            return KubeCluster::connect().await;
        }
        let what = format!(
            "cannot load the Kubernetes client config KUBECONFIG={}",
            kubeconfig.unwrap_or_default().to_string_lossy()
        );
        let merged = paths
            .iter()
            .try_fold(kube::config::Kubeconfig::default(), |m, p| {
                kube::config::Kubeconfig::read_from(p).and_then(|c| m.merge(c))
            })
            .map_err(|e| Error::env(format!("{what}: {}", redact_config_error(&e.to_string(), &paths))))?;
        let config = kube::Config::from_custom_kubeconfig(merged, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::env(format!("{what}: {}", redact_config_error(&e.to_string(), &paths))))?;
        let client = Client::try_from(config).map_err(|e| kube_err(&what, e))?;
        Ok(KubeCluster { client })
    }
    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }
    /// Run `argv`, giving stdout to `on_out` chunk by chunk; stderr is kept (its last [`MAX_EXEC_STDERR`] bytes).
    /// With `stall`, stdout that stays silent that long is an error.
    async fn exec_inner(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[String],
        stall: Option<Duration>,
        on_out: &mut (dyn FnMut(&[u8]) -> Result<()> + Send),
    ) -> Result<ExecOutput> {
        let ap = AttachParams::default().container(container).stdin(false).stdout(true).stderr(true);
        let what = || {
            format!("exec in {ns}/{pod} container {container} of {:?}", argv.first().map(String::as_str).unwrap_or(""))
        };
        let mut p = self.pods(ns).exec(pod, argv.to_vec(), &ap).await.map_err(|e| kube_err(&what(), e))?;
        let mut out = p.stdout().ok_or_else(|| Error::env(format!("{}: no stdout stream", what())))?;
        let mut err = p.stderr().ok_or_else(|| Error::env(format!("{}: no stderr stream", what())))?;
        let status = p.take_status().ok_or_else(|| Error::env(format!("{}: no status channel", what())))?;
        let read_out = async {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let read = out.read(&mut buf);
                let n = match stall {
                    Some(d) => tokio::time::timeout(d, read).await.map_err(|_| {
                        Error::env(format!(
                            "{}: no byte of output for {} s (--wait-timeout): stalled; stopped",
                            what(),
                            d.as_secs()
                        ))
                    })?,
                    None => read.await,
                }
                .map_err(|e| Error::env(format!("{}: reading output: {e}", what())))?;
                if n == 0 {
                    return Ok::<(), Error>(());
                }
                on_out(&buf[..n])?;
            }
        };
        let read_err = async {
            let mut e = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match err.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        e.extend_from_slice(&buf[..n]);
                        if e.len() > MAX_EXEC_STDERR {
                            e.drain(..e.len() - MAX_EXEC_STDERR);
                        }
                    }
                }
            }
            e
        };
        // stdout and stderr are read together; a sink error returns at once (dropping the process aborts it),
        // without waiting for a stderr that may never end
        tokio::pin!(read_out);
        tokio::pin!(read_err);
        let mut err_done = None;
        let r1 = loop {
            tokio::select! {
                r = &mut read_out => break r,
                e = &mut read_err, if err_done.is_none() => err_done = Some(e),
            }
        };
        if let Err(x) = r1 {
            // stop the exec at once: its stderr and status would otherwise wait behind unread stdout
            p.abort();
            return Err(x);
        }
        let e = match err_done {
            Some(e) => e,
            None => read_err.await,
        };
        let st = status.await;
        let _ = p.join().await;
        let status_message = st
            .as_ref()
            .filter(|s| s.status.as_deref() != Some("Success"))
            .map(|s| s.message.clone().unwrap_or_default());
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
        Ok(ExecOutput { stdout: Vec::new(), stderr: e, exit_code, status_message })
    }
}

/// Most bytes of stdout kept from a command (listings, probes); more is an error.
pub const MAX_EXEC_OUTPUT: usize = 64 << 20;
/// Most bytes of stderr kept from a command (its tail).
pub const MAX_EXEC_STDERR: usize = 64 << 10;

impl Cluster for KubeCluster {
    async fn get_pod(&self, ns: &str, name: &str) -> Result<Pod> {
        self.pods(ns).get(name).await.map_err(|e| kube_err(&format!("GET {}", pa::pod_path(ns, name)), e))
    }
    async fn list_pods(&self, ns: &str, selector: &str) -> Result<Vec<Pod>> {
        let l = self
            .pods(ns)
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| kube_err(&format!("list pods in {ns} with selector {selector:?}"), e))?;
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
        let l = api
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await
            .map_err(|e| kube_err("list events", e))?;
        Ok(l.items
            .into_iter()
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect())
    }
    async fn exec(&self, ns: &str, pod: &str, container: &str, argv: &[String]) -> Result<ExecOutput> {
        let mut out = Vec::new();
        let mut r = self
            .exec_inner(ns, pod, container, argv, None, &mut |b: &[u8]| {
                if out.len() + b.len() > MAX_EXEC_OUTPUT {
                    return Err(Error::env(format!(
                        "more than {MAX_EXEC_OUTPUT} bytes of output: stopped (a broken or hostile API server?)"
                    )));
                }
                out.extend_from_slice(b);
                Ok(())
            })
            .await?;
        r.stdout = out;
        Ok(r)
    }
    async fn exec_stream(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[String],
        sink: &mut pa::TarSink,
        stall: Duration,
    ) -> Result<ExecOutput> {
        self.exec_inner(ns, pod, container, argv, Some(stall), &mut |b: &[u8]| sink.feed(b)).await
    }
    async fn http_post(&self, ns: &str, pod: &str, port: u16, path: &str) -> Result<(u16, String)> {
        let what = format!("POST {path} to port {port} of {ns}/{pod} through a port-forward");
        let mut pf = self.pods(ns).portforward(pod, &[port]).await.map_err(|e| kube_err(&what, e))?;
        let mut s = pf.take_stream(port).ok_or_else(|| Error::env(format!("{what}: no stream")))?;
        let req =
            format!("POST {path} HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
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

/// A kubeconfig loading error fit to print: only its first line (the YAML parser's source snippet, which can
/// show a `token:` line, is dropped), with every credential value of the kubeconfig `files` (`token`,
/// `password`, `*-data`, `id-token`, `refresh-token`, `access-token`, `secret`) and every long quoted string
/// replaced by `<redacted>`.
pub fn redact_config_error(msg: &str, files: &[PathBuf]) -> String {
    let mut m = msg.lines().next().unwrap_or("").trim_end().to_string();
    if let Some(i) = m.find(" --> ") {
        m.truncate(i);
    }
    let key = |k: &str| {
        let k = k.trim().trim_start_matches('-').trim().trim_matches('"').to_ascii_lowercase();
        k.contains("token") || k.contains("password") || k.ends_with("-data") || k.contains("secret")
    };
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for line in text.lines() {
            // `key: value` and flow-style `{key: value, …}`
            for part in line.split([',', '{', '}']) {
                if let Some((k, v)) = part.split_once(':') {
                    let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                    if key(k) && v.len() >= 4 {
                        m = m.replace(v, "<redacted>");
                    }
                }
            }
        }
    }
    let q = regex::Regex::new(r#""[^"]{8,}""#).unwrap();
    q.replace_all(&m, "\"<redacted>\"").to_string()
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

/// `f`, a remote step, with a deadline (docs/pod-attach.md, "Deadlines"): past `limit` it is dropped (an exec's
/// stream is closed, a request abandoned) and the error names the step, the deadline and what it derives from
/// (`basis`).
pub async fn within<T>(step: &str, limit: Duration, basis: &str, f: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(Error::env(format!("{step}: no answer within {} s ({basis}); stopped", limit.as_secs()))),
    }
}

/// How a deadline is derived, as errors name it.
const STEP_BASIS: &str = "--wait-timeout";
const WORK_BASIS: &str = "10 x --wait-timeout";

fn exec_step(o: &Options, pod: &str, container: &str, argv: &[String]) -> String {
    format!("exec in {}/{pod} container {container} of {:?}", o.namespace, argv)
}

/// [`Cluster::exec`] within `limit` (derived from `basis`).
async fn exec_within<C: Cluster>(
    c: &C,
    o: &Options,
    pod: &str,
    container: &str,
    argv: &[String],
    limit: Duration,
    basis: &str,
) -> Result<ExecOutput> {
    within(&exec_step(o, pod, container, argv), limit, basis, c.exec(&o.namespace, pod, container, argv)).await
}

/// A short command ([`Options::step_deadline`]) that must exit 0.
async fn exec_ok<C: Cluster>(c: &C, o: &Options, pod: &str, container: &str, argv: &[String]) -> Result<ExecOutput> {
    exec_ok_within(c, o, pod, container, argv, o.step_deadline(), STEP_BASIS).await
}

/// A command that must exit 0, within `limit`.
async fn exec_ok_within<C: Cluster>(
    c: &C,
    o: &Options,
    pod: &str,
    container: &str,
    argv: &[String],
    limit: Duration,
    basis: &str,
) -> Result<ExecOutput> {
    let r = exec_within(c, o, pod, container, argv, limit, basis).await?;
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
            [String::from_utf8_lossy(&r.stderr).trim().to_string(), r.status_message.clone().unwrap_or_default()]
                .join(" ")
                .trim()
        ))),
    }
}

/// `POST path` to the engine's port through a port-forward, within [`Options::step_deadline`].
async fn post<C: Cluster>(c: &C, o: &Options, pod: &str, path: &str) -> Result<(u16, String)> {
    let step = format!("POST {path} to port {} of {}/{pod} through a port-forward", o.port, o.namespace);
    within(&step, o.step_deadline(), STEP_BASIS, c.http_post(&o.namespace, pod, o.port, path)).await
}

fn container_names(p: &Pod) -> Vec<String> {
    p.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
}

/// Find exactly one pod.
pub async fn find_pod<C: Cluster>(c: &C, o: &Options) -> Result<Pod> {
    let (limit, basis) = (o.step_deadline(), STEP_BASIS);
    if let Some(p) = &o.pod {
        return within(&format!("GET {}", pa::pod_path(&o.namespace, p)), limit, basis, c.get_pod(&o.namespace, p))
            .await;
    }
    let sel = o.selector.clone().unwrap_or_default();
    let pods = within(
        &format!("list pods in {} with selector {sel:?}", o.namespace),
        limit,
        basis,
        c.list_pods(&o.namespace, &sel),
    )
    .await?;
    match pods.len() {
        1 => Ok(pods.into_iter().next().unwrap()),
        0 => Err(Error::input(format!("no pod in namespace {} matches selector {sel:?}", o.namespace))
            .with_arg("--selector")),
        n => Err(Error::input(format!(
            "{n} pods in namespace {} match selector {sel:?}; pick one with --pod: {}",
            o.namespace,
            pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>().join(", ")
        ))
        .with_arg("--selector")),
    }
}

/// Wait until the sidecar runs; its `imageID` from the pod's status (what the kubelet pulled), when reported.
async fn wait_sidecar<C: Cluster>(c: &C, o: &Options, pod: &str) -> Result<Option<String>> {
    let t0 = Instant::now();
    let wait = o.step_deadline();
    // each request gets what is left of --wait-timeout (at least 1 s); the events of a failure, one more bound
    let left = || wait.saturating_sub(t0.elapsed()).max(Duration::from_secs(1));
    let get = format!("GET {} (waiting for {} to run)", pa::pod_path(&o.namespace, pod), o.sidecar_name);
    let events =
        || async { within("list events", wait, STEP_BASIS, c.events(&o.namespace, pod)).await.unwrap_or_default() };
    let fail = |why: String, events: Vec<String>| {
        Error::env(format!(
            "ephemeral container {} in {}/{pod} did not start: {why}. Pod events:\n{}",
            o.sidecar_name,
            o.namespace,
            if events.is_empty() {
                "  (none)".to_string()
            } else {
                events.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n")
            }
        ))
    };
    loop {
        let p = within(&get, left(), STEP_BASIS, c.get_pod(&o.namespace, pod)).await?;
        let st = p
            .status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref())
            .and_then(|v| v.iter().find(|s| s.name == o.sidecar_name).cloned());
        let image_id = st.as_ref().map(|s| s.image_id.clone()).filter(|i| !i.is_empty());
        if let Some(state) = st.and_then(|s| s.state) {
            if state.running.is_some() {
                return Ok(image_id);
            }
            if let Some(t) = state.terminated {
                let ev = events().await;
                return Err(fail(
                    format!("terminated ({}: {})", t.reason.unwrap_or_default(), t.message.unwrap_or_default()),
                    ev,
                ));
            }
            if let Some(w) = state.waiting {
                let reason = w.reason.clone().unwrap_or_default();
                if [
                    "ErrImagePull",
                    "ImagePullBackOff",
                    "InvalidImageName",
                    "CreateContainerError",
                    "CreateContainerConfigError",
                ]
                .contains(&reason.as_str())
                {
                    let ev = events().await;
                    return Err(fail(format!("{reason}: {}", w.message.unwrap_or_default()), ev));
                }
            }
        }
        if t0.elapsed() > wait {
            let ev = events().await;
            return Err(fail(format!("still not running after {} s (--wait-timeout)", o.wait_timeout_s), ev));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
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
            Strategy::Endpoint => match post(c, o, &pod, "/stop_profile").await {
                Ok((code, _)) => log.push(format!("capture interrupted: POST /stop_profile answered {code}")),
                Err(e) => log.push(format!("capture interrupted: POST /stop_profile failed: {}", e.message)),
            },
            Strategy::Session => {
                let argv = vec![o.nsys.clone(), "cancel".into(), format!("--session={}", o.session)];
                match exec_within(c, o, &pod, &tools, &argv, o.step_deadline(), STEP_BASIS).await {
                    Ok(r) => log.push(format!(
                        "capture interrupted: `nsys cancel --session={}` exited {:?}",
                        o.session, r.exit_code
                    )),
                    Err(e) => log.push(format!("capture interrupted: nsys cancel failed: {}", e.message)),
                }
            }
            Strategy::Attach => log.push("capture interrupted: the attach nsys ends with its exec stream".into()),
        }
    }
    if s.workdir_made {
        let argv = pa::argv_cleanup_workdir(&o.workdir);
        match exec_within(c, o, &pod, &tools, &argv, o.step_deadline(), STEP_BASIS).await {
            Ok(r) if r.exit_code == Some(0) => log.push(format!("removed {} in container {tools}", o.workdir)),
            Ok(r) => log.push(format!(
                "could not remove {}: exit {:?} {}",
                o.workdir,
                r.exit_code,
                String::from_utf8_lossy(&r.stderr).trim()
            )),
            Err(e) => log.push(format!("could not remove {}: {}", o.workdir, e.message)),
        }
    }
    if s.sidecar_added {
        let argv = pa::argv_end_sleep(o.sidecar_sleep_s);
        match exec_within(c, o, &pod, &o.sidecar_name, &argv, o.step_deadline(), STEP_BASIS).await {
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
pub async fn run_with_cleanup<C: Cluster>(
    c: &C,
    o: &Options,
    gate: &Gate,
    cancel: impl Future<Output = String>,
) -> Outcome {
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
            doc.cleanup = log.clone();
            if let Some(dir) = &o.bundle {
                if let Err(e) = pa::write_bundle(Path::new(dir), &mut doc, o) {
                    return Outcome::Failed(e.context(format!("the capture is in {}, but", o.out_dir)), log);
                }
                say(&format!("bundle: kernel_profile merged into {}", Path::new(dir).join(pa::BUNDLE_FILE).display()));
            }
            Outcome::Done(Box::new(doc))
        }
        Ok(Err(e)) => Outcome::Failed(e, log),
    }
}

/// Connect ([`KubeCluster::connect_with`]: this `KUBECONFIG` value, else the normal kube configuration) and
/// [`run_with_cleanup`].
pub async fn connect_and_run(
    kubeconfig: Option<&std::ffi::OsStr>,
    o: &Options,
    gate: &Gate,
    cancel: impl Future<Output = String>,
) -> Result<Outcome> {
    let cluster = KubeCluster::connect_with(kubeconfig).await?;
    Ok(run_with_cleanup(&cluster, o, gate, cancel).await)
}

/// How pod-attach's run ended ([`run_tool`]).
pub enum Ended {
    /// A document (the capture, gated; or the `--dry-run` plan).
    Done(nsyskit::tools::Outcome),
    /// A step failed; the cleanup log.
    Failed(Error, Vec<String>),
    /// The interrupt completed first (its reason: `SIGINT`, `Ctrl-C`…); the cleanup log.
    Interrupted(String, Vec<String>),
}

/// pod-attach's whole run, for the binary and the Nushell command (the `tools` layer of nsyskit, here because
/// only this crate may depend on kube): the flags, the user's environment (`NSYSKIT_SIDECAR_IMAGE`,
/// `KUBECONFIG`) and folder from `host`, `--dry-run` or the capture with its cleanup, until it ends or
/// `interrupt` completes.
pub fn run_tool(
    a: nsyskit::flags::pod_attach::PodAttachArgs,
    host: &nsyskit::tools::Invocation,
    interrupt: impl Future<Output = String>,
) -> Result<Ended> {
    let style = a.out.style();
    let mut flags = a.flags();
    if flags.image.is_none() {
        flags.image = host.var(pa::SIDECAR_IMAGE_ENV).map(|v| v.to_string_lossy().into_owned());
    }
    flags.bundle = flags.bundle.as_deref().map(|b| host.path(b));
    flags.out_dir = host.path(&flags.out_dir);
    flags.question = flags.question.as_deref().map(|q| host.path(q));
    let o = options(&flags)?;
    if a.dry_run {
        // the plan's warnings (a stop engine's one capture, no --question) on stderr too
        let doc = pa::dry_run(&o)?;
        let warnings = doc.warnings.clone();
        let out = warnings
            .into_iter()
            .fold(nsyskit::tools::Outcome::doc(doc, style), |out, w| out.saying(format!("warning: {w}")));
        return Ok(Ended::Done(out));
    }
    let gate = match &a.gate_check {
        Some(p) => Gate::Program(p.clone()),
        None => Gate::Library,
    };
    // a binary leaves the client configuration to kube (KUBECONFIG, ~/.kube/config, in-cluster); Nushell passes
    // its own `$env.KUBECONFIG`, which the plugin process may not have
    let kubeconfig = if host.own_env { None } else { host.var("KUBECONFIG") };
    let rt = runtime()?;
    Ok(match rt.block_on(connect_and_run(kubeconfig.as_deref(), &o, &gate, interrupt))? {
        Outcome::Done(doc) => Ended::Done(nsyskit::tools::Outcome::doc(*doc, style)),
        Outcome::Failed(e, log) => Ended::Failed(e, log),
        Outcome::Interrupted(why, log) => Ended::Interrupted(why, log),
    })
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

    #[test]
    fn config_errors_never_show_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("kc");
        std::fs::write(&f, "users:\n- name: u\n  user: {token: SUPERSECRET-tok-123, : }\n").unwrap();
        let msg = "failed to parse kubeconfig YAML: error: line 3 column 38: cannot deserialize null\n --> <input>:3:38\n  |\n3 |   user: {token: SUPERSECRET-tok-123, : }\n";
        let r = redact_config_error(msg, std::slice::from_ref(&f));
        assert!(!r.contains("SUPERSECRET") && r.contains("line 3 column 38"), "{r}");
        let r = redact_config_error("invalid type: string \"SUPERSECRET-tok-123\", expected a map", &[]);
        assert!(!r.contains("SUPERSECRET"), "{r}");
        let r = redact_config_error("token SUPERSECRET-tok-123 is bad", &[f]);
        assert!(!r.contains("SUPERSECRET"), "{r}");
    }
}
