//! `pod-attach`: capture an nsys profile from a live Kubernetes pod through the API (issue 7).
//!
//! This module holds everything that needs no Kubernetes client: which capture strategy can work with the
//! nsys found in the pod ([`choose_strategy`]), the exact requests and container argv of a run ([`plan`], which
//! is also what `--dry-run` prints), the engine-PID choice from a `/proc` listing ([`parse_proc_listing`],
//! [`select_engine`]), tar-stream validation ([`untar_checked`]), sha256 checks and the output document
//! ([`PodAttachDoc`]). The kube transport lives in `bins/pod-attach` and only executes these steps.
//!
//! Every command run in a container is an argv array. The only shell scripts are the fixed constants in this
//! module ([`PROC_LIST_SCRIPT`], [`END_SLEEP_SCRIPT`]); values reach them as positional parameters (`$1`),
//! never interpolated into the script text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::{Document, Error, Result, Tool};

/// Default `--process-match`.
pub const DEFAULT_PROCESS_MATCH: &str = "vllm serve|EngineCore";

/// Lists every process visible in the container's PID namespace, one line each:
/// `PID<TAB>PPID<TAB>CUDA<TAB>CMDLINE` where CUDA is 1 when the process has a `/dev/nvidia*` file descriptor
/// open or a `libcuda` mapping, and CMDLINE has its NUL separators, tabs and newlines turned into spaces. The first line is
/// `self<TAB>$$` so the listing shell (and its children) can be left out.
pub const PROC_LIST_SCRIPT: &str = r#"echo "self	$$"
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  c=$(tr '\000\t\n\r' '    ' < "$d/cmdline" 2>/dev/null) || continue
  [ -n "$c" ] || continue
  pp=$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)
  g=0
  if ls -l "$d/fd" 2>/dev/null | grep -q '/dev/nvidia'; then g=1
  elif grep -qs 'libcuda' "$d/maps"; then g=1; fi
  printf '%s\t%s\t%s\t%s\n' "$p" "$pp" "$g" "$c"
done"#;

/// Ends the sidecar's `sleep $1` (an ephemeral container cannot be removed): kills only processes in the
/// caller's own mount namespace (the sidecar, not the target it shares a PID namespace with) whose command
/// line is exactly `sleep $1`. Prints the PIDs it signalled.
pub const END_SLEEP_SCRIPT: &str = r#"m=$(readlink /proc/self/ns/mnt)
for d in /proc/[0-9]*; do
  [ "$(readlink "$d/ns/mnt" 2>/dev/null)" = "$m" ] || continue
  [ "$(tr '\000' ' ' < "$d/cmdline" 2>/dev/null)" = "sleep $1 " ] || continue
  kill "${d#/proc/}" 2>/dev/null && echo "${d#/proc/}"
done
true"#;

/// The environment variable that gives `--image` a site default (there is no built-in default image).
pub const SIDECAR_IMAGE_ENV: &str = "NSYSKIT_SIDECAR_IMAGE";

/// The `nsys stats` reports pod-attach writes as CSV next to the export.
pub const STATS_REPORTS: &[&str] = &["cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "osrt_sum"];

/// How the capture is taken. See `docs/pod-attach.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The engine runs under `nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop` (one capture
    /// per engine start) or `=repeat`; pod-attach POSTs `/start_profile` and `/stop_profile` to it and picks up
    /// the new report.
    Endpoint,
    /// The engine runs under `nsys launch --session NAME`; `nsys start`/`nsys stop` run in its container.
    Session,
    /// `nsys profile --attach-pid` from the sidecar; only when that nsys lists the flag.
    Attach,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Endpoint => "endpoint",
            Strategy::Session => "session",
            Strategy::Attach => "attach",
        }
    }
    pub fn parse(s: &str) -> Result<Strategy> {
        match s {
            "endpoint" => Ok(Strategy::Endpoint),
            "session" => Ok(Strategy::Session),
            "attach" => Ok(Strategy::Attach),
            _ => Err(Error::usage(format!("unknown strategy {s:?}: expected endpoint, session or attach")).with_arg("--strategy")),
        }
    }
}

/// `--profile` of the ephemeral container, like `kubectl debug --profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecurityProfile {
    /// Adds `SYS_PTRACE` (what nsys needs to read a target process in the shared PID namespace).
    General,
    /// `privileged: true` (what nsys needs for GPU/CPU sampling on most clusters).
    Sysadmin,
}

impl SecurityProfile {
    pub fn parse(s: &str) -> Result<SecurityProfile> {
        match s {
            "general" => Ok(SecurityProfile::General),
            "sysadmin" => Ok(SecurityProfile::Sysadmin),
            _ => Err(Error::usage(format!("unknown profile {s:?}: expected general or sysadmin")).with_arg("--profile")),
        }
    }
    /// The container `securityContext` this profile sets.
    pub fn security_context(self) -> serde_json::Value {
        match self {
            SecurityProfile::General => serde_json::json!({"capabilities": {"add": ["SYS_PTRACE"]}}),
            SecurityProfile::Sysadmin => serde_json::json!({"privileged": true}),
        }
    }
}

/// What the probed nsys can do, as far as the strategy choice is concerned.
///
/// Filled from the real `--help` texts of the nsys in the pod by [`NsysCaps::from_help`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NsysCaps {
    /// `nsys --version` text, as printed (trimmed).
    pub version: Option<String>,
    pub attach_pid: bool,
    pub capture_range: bool,
    pub capture_range_end: bool,
    /// `nsys launch`, `nsys start` and `nsys stop` are all listed by `nsys --help`.
    pub sessions: bool,
}

fn help_lists_command(help: &str, cmd: &str) -> bool {
    help.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some(cmd) && w.next().is_some()
    })
}

impl NsysCaps {
    /// From `nsys --version`, `nsys --help` and `nsys profile --help`; the profile flags through nsys-resolve's
    /// capability parser ([`crate::resolve::parse_capabilities`]).
    pub fn from_help(version: &str, top_help: &str, profile_help: &str) -> NsysCaps {
        let caps = crate::resolve::parse_capabilities(profile_help, "");
        let v = version.trim();
        NsysCaps {
            version: crate::resolve::parse_version(version).or_else(|| (!v.is_empty()).then(|| v.to_string())),
            attach_pid: caps.attach_pid,
            capture_range: caps.capture_range,
            capture_range_end: caps.capture_range_end,
            sessions: ["launch", "start", "stop"].iter().all(|c| help_lists_command(top_help, c)),
        }
    }
}

/// Decide whether the requested strategy can work with this nsys; otherwise refuse, naming the reason and
/// the fix.
pub fn choose_strategy(requested: Strategy, caps: &NsysCaps) -> Result<Strategy> {
    let v = format!("nsys {}", caps.version.as_deref().unwrap_or("(unknown version)"));
    match requested {
        Strategy::Attach if !caps.attach_pid => Err(Error::env(format!(
            "strategy attach refused: {v} does not list --attach-pid in `nsys profile --help` (nsys injects CUDA \
             tracing when a process starts; it cannot attach here). Fix: start the engine under `nsys profile \
             --capture-range=cudaProfilerApi --capture-range-end=stop` with vLLM's --profiler-config.profiler=cuda \
             and use --strategy endpoint, or under `nsys launch --session NAME` and use --strategy session"
        ))
        .with_arg("--strategy")),
        Strategy::Endpoint if !(caps.capture_range && caps.capture_range_end) => Err(Error::env(format!(
            "strategy endpoint refused: {v} does not list {} in `nsys profile --help`, so the engine cannot be \
             running under a repeatable cudaProfilerApi capture range. Fix: use an nsys that has \
             --capture-range-end (2021.2 or later), or --strategy session",
            if caps.capture_range { "--capture-range-end" } else { "--capture-range" }
        ))
        .with_arg("--strategy")),
        Strategy::Session if !caps.sessions => Err(Error::env(format!(
            "strategy session refused: {v} does not list the launch/start/stop commands in `nsys --help`. Fix: \
             use --strategy endpoint"
        ))
        .with_arg("--strategy")),
        s => Ok(s),
    }
}

/// Everything a run needs to know up front (the binary's flags, validated).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Options {
    pub namespace: String,
    /// `--pod`; None means find it with `selector`.
    pub pod: Option<String>,
    pub selector: Option<String>,
    /// `--container`: the engine's container (the ephemeral container's `targetContainerName`).
    pub container: Option<String>,
    pub image: String,
    pub profile: SecurityProfile,
    pub strategy: Strategy,
    pub process_match: String,
    pub duration_s: f64,
    /// nsys program in the sidecar (endpoint, attach) or in the engine's container (session).
    pub nsys: String,
    /// Scratch folder inside the container that runs nsys export/stats; removed at cleanup.
    pub workdir: String,
    /// Local folder the copied-out files go to.
    pub out_dir: String,
    /// Engine HTTP port (endpoint strategy).
    pub port: u16,
    /// Session name (session strategy).
    pub session: String,
    /// Ephemeral container name.
    pub sidecar_name: String,
    /// The sidecar's `sleep` length in seconds; also how cleanup recognises that sleep.
    pub sidecar_sleep_s: u64,
    /// Seconds to wait for the sidecar to run.
    pub wait_timeout_s: u64,
    /// Base name of the capture files.
    pub capture_name: String,
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        if self.pod.is_none() && self.selector.is_none() {
            return Err(Error::usage("give --pod NAME or --selector LABELS to find the pod").with_arg("--pod"));
        }
        regex::Regex::new(&self.process_match)
            .map_err(|e| Error::usage(format!("--process-match {:?} is not a valid regex: {e}", self.process_match)).with_arg("--process-match"))?;
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err(Error::usage(format!("--duration must be a positive number of seconds, got {}", self.duration_s)).with_arg("--duration"));
        }
        if !self.workdir.starts_with('/') || Path::new(&self.workdir).components().any(|c| c == Component::ParentDir) {
            return Err(Error::usage(format!("--workdir {:?} must be an absolute path without `..`", self.workdir)).with_arg("--workdir"));
        }
        for (flag, v) in [("--session", &self.session), ("--sidecar-name", &self.sidecar_name), ("--capture-name", &self.capture_name)] {
            if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') || v.starts_with('.') {
                return Err(Error::usage(format!("{flag} {v:?} must be letters, digits, '-', '_' or '.'")).with_arg(flag));
            }
        }
        if self.strategy != Strategy::Session && self.image.trim().is_empty() {
            return Err(Error::usage(format!(
                "--image is required for --strategy {}: the sidecar image with nsys, pinned by digest (or set a site \
                 default in NSYSKIT_SIDECAR_IMAGE)",
                self.strategy.name()
            ))
            .with_arg("--image"));
        }
        Ok(())
    }
    fn pod_or_placeholder(&self) -> &str {
        self.pod.as_deref().unwrap_or("<POD>")
    }
    fn container_or_placeholder(&self) -> &str {
        self.container.as_deref().unwrap_or("<CONTAINER>")
    }
}

/// One step of a run: an API request, a command in a container, an HTTP call to the engine, or a local wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// A Kubernetes API request.
    Api {
        method: String,
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
        body: Option<serde_json::Value>,
        why: String,
    },
    /// `POST …/pods/NAME/exec` (WebSocket) of this argv in this container.
    Exec { container: String, argv: Vec<String>, why: String },
    /// An HTTP request to the engine through a port-forward (`…/pods/NAME/portforward?ports=PORT`).
    Http { method: String, port: u16, path: String, why: String },
    /// A local wait (the capture window, or polling for the sidecar).
    Wait { seconds: f64, why: String },
}

/// Base path of a pod's API resource.
pub fn pod_path(ns: &str, pod: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{pod}")
}

/// The strategic-merge patch body that adds the sidecar as an ephemeral container.
pub fn ephemeral_patch(o: &Options) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "ephemeralContainers": [{
                "name": o.sidecar_name,
                "image": o.image,
                "command": ["sleep", o.sidecar_sleep_s.to_string()],
                "targetContainerName": o.container_or_placeholder(),
                "stdin": false,
                "tty": false,
                "securityContext": o.profile.security_context(),
            }]
        }
    })
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// argv: the `/proc` listing (see [`PROC_LIST_SCRIPT`]).
pub fn argv_proc_list() -> Vec<String> {
    s(&["sh", "-c", PROC_LIST_SCRIPT, "nsyskit-proc-list"])
}
/// argv: the three nsys probes.
pub fn argv_nsys_probe(nsys: &str) -> [Vec<String>; 3] {
    [s(&[nsys, "--version"]), s(&[nsys, "--help"]), s(&[nsys, "profile", "--help"])]
}
pub fn argv_mkdir(workdir: &str) -> Vec<String> {
    s(&["mkdir", "-p", "--", workdir])
}
/// argv: list the `.nsys-rep` files of a folder (size, mtime, path) — used before and after the capture.
pub fn argv_list_reports(dir: &str) -> Vec<String> {
    s(&["find", dir, "-maxdepth", "1", "-type", "f", "-name", "*.nsys-rep", "-exec", "stat", "-c", "%s\t%Y\t%n", "{}", "+"])
}
pub fn argv_copy(src: &str, dst: &str) -> Vec<String> {
    s(&["cp", "--", src, dst])
}
pub fn argv_session_start(o: &Options) -> Vec<String> {
    vec![o.nsys.clone(), "start".into(), format!("--session={}", o.session), "-o".into(), format!("{}/{}", o.workdir, o.capture_name)]
}
pub fn argv_session_stop(o: &Options) -> Vec<String> {
    vec![o.nsys.clone(), "stop".into(), format!("--session={}", o.session)]
}
pub fn argv_attach(o: &Options, pid: &str) -> Vec<String> {
    vec![
        o.nsys.clone(),
        "profile".into(),
        format!("--attach-pid={pid}"),
        "--trace=cuda,nvtx,osrt".into(),
        "--cuda-graph-trace=node".into(),
        format!("--duration={}", o.duration_s.ceil() as u64),
        "-o".into(),
        format!("{}/{}", o.workdir, o.capture_name),
    ]
}
pub fn argv_export(o: &Options) -> Vec<String> {
    let base = format!("{}/{}", o.workdir, o.capture_name);
    // the one `nsys export` command line of the export layer (with --lazy=false, as every other caller)
    let mut v = vec![o.nsys.clone()];
    v.extend(crate::export::nsys_export_args(&format!("{base}.nsys-rep"), &format!("{base}.sqlite")));
    v
}
pub fn argv_stats(o: &Options) -> Vec<String> {
    let base = format!("{}/{}", o.workdir, o.capture_name);
    vec![
        o.nsys.clone(),
        "stats".into(),
        format!("--report={}", STATS_REPORTS.join(",")),
        "--format=csv".into(),
        "--force-export=false".into(),
        "-o".into(),
        base.clone(),
        format!("{base}.sqlite"),
    ]
}
/// argv: the names of the regular files in the work folder.
pub fn argv_list_workdir(workdir: &str) -> Vec<String> {
    s(&["find", workdir, "-maxdepth", "1", "-type", "f", "-printf", "%f\n"])
}
/// argv: `NAME<TAB>SIZE` then `sha256sum` lines for the named files of the work folder.
pub fn argv_checksums(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["sha256sum", "--"]);
    v.extend(names.iter().map(|n| format!("{workdir}/{n}")));
    v
}
pub fn argv_sizes(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["stat", "-c", "%s\t%n", "--"]);
    v.extend(names.iter().map(|n| format!("{workdir}/{n}")));
    v
}
/// argv: the tar stream of the named files, relative to the work folder.
pub fn argv_tar(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["tar", "cf", "-", "-C", workdir, "--"]);
    v.extend(names.iter().cloned());
    v
}
pub fn argv_cleanup_workdir(workdir: &str) -> Vec<String> {
    s(&["rm", "-rf", "--", workdir])
}
pub fn argv_end_sleep(sleep_s: u64) -> Vec<String> {
    vec!["sh".into(), "-c".into(), END_SLEEP_SCRIPT.into(), "nsyskit-end-sleep".into(), sleep_s.to_string()]
}

/// The exact request plan of a run (what `--dry-run` prints). Values only known while running (the engine PID,
/// the report's name) appear as `<ENGINE_PID>`, `<NSYS_PID>`, `<NEW_REPORT>`, `<FILES>`.
pub fn plan(o: &Options) -> Vec<Step> {
    let pod = o.pod_or_placeholder();
    let base = pod_path(&o.namespace, pod);
    let mut v = Vec::new();
    match &o.pod {
        Some(_) => v.push(Step::Api { method: "GET".into(), path: base.clone(), content_type: None, body: None, why: "find the pod".into() }),
        None => v.push(Step::Api {
            method: "GET".into(),
            path: format!("/api/v1/namespaces/{}/pods?labelSelector={}", o.namespace, o.selector.as_deref().unwrap_or("")),
            content_type: None,
            body: None,
            why: "find exactly one pod by selector".into(),
        }),
    }
    let sidecar = o.strategy != Strategy::Session;
    let tools_container = if sidecar { o.sidecar_name.clone() } else { o.container_or_placeholder().to_string() };
    let exec = |argv: Vec<String>, why: &str| Step::Exec { container: tools_container.clone(), argv, why: why.into() };
    if sidecar {
        v.push(Step::Api {
            method: "PATCH".into(),
            path: format!("{base}/ephemeralcontainers"),
            content_type: Some("application/strategic-merge-patch+json".into()),
            body: Some(ephemeral_patch(o)),
            why: "add the nsys sidecar sharing the engine's PID namespace".into(),
        });
        v.push(Step::Api { method: "GET".into(), path: base.clone(), content_type: None, body: None, why: format!("poll until {} runs (up to {} s)", o.sidecar_name, o.wait_timeout_s) });
        v.push(Step::Api {
            method: "GET".into(),
            path: format!("/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name={pod}", o.namespace),
            content_type: None,
            body: None,
            why: "only if the sidecar fails to run: the pod's events for the error".into(),
        });
    }
    v.push(exec(argv_proc_list(), "list /proc to find the engine PID"));
    for a in argv_nsys_probe(&o.nsys) {
        v.push(exec(a, "probe nsys capabilities"));
    }
    v.push(exec(argv_mkdir(&o.workdir), "scratch folder"));
    match o.strategy {
        Strategy::Endpoint => {
            v.push(exec(argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"), "reports before the capture"));
            v.push(Step::Http { method: "POST".into(), port: o.port, path: "/start_profile".into(), why: "engine calls cudaProfilerStart".into() });
            v.push(Step::Wait { seconds: o.duration_s, why: "capture window".into() });
            v.push(Step::Http { method: "POST".into(), port: o.port, path: "/stop_profile".into(), why: "engine calls cudaProfilerStop; nsys writes a report".into() });
            v.push(exec(argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"), "poll for the new report until its size is stable"));
            v.push(exec(argv_copy("/proc/<NSYS_PID>/root/<NEW_REPORT>", &format!("{}/{}.nsys-rep", o.workdir, o.capture_name)), "take the report"));
        }
        Strategy::Session => {
            v.push(exec(argv_session_start(o), "start the session's collection"));
            v.push(Step::Wait { seconds: o.duration_s, why: "capture window".into() });
            v.push(exec(argv_session_stop(o), "stop; nsys writes the report"));
        }
        Strategy::Attach => {
            v.push(exec(argv_attach(o, "<ENGINE_PID>"), "attach for the capture window"));
        }
    }
    v.push(exec(argv_export(o), "export SQLite"));
    v.push(exec(argv_stats(o), "nsys stats CSVs"));
    v.push(exec(argv_list_workdir(&o.workdir), "files to copy"));
    let files = vec!["<FILES>".to_string()];
    v.push(exec(argv_sizes(&o.workdir, &files), "sizes in the container"));
    v.push(exec(argv_checksums(&o.workdir, &files), "sha256 in the container"));
    v.push(exec(argv_tar(&o.workdir, &files), "copy out (tar stream over exec)"));
    v.push(exec(argv_cleanup_workdir(&o.workdir), "cleanup: scratch folder"));
    if sidecar {
        v.push(exec(argv_end_sleep(o.sidecar_sleep_s), "cleanup: end the sidecar's sleep (ephemeral containers cannot be removed)"));
    }
    v
}

/// One process of a `/proc` listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcEntry {
    pub pid: u32,
    pub ppid: u32,
    /// Has a `/dev/nvidia*` descriptor open or `libcuda` mapped.
    pub cuda: bool,
    pub cmdline: String,
}

/// Parse the output of [`PROC_LIST_SCRIPT`]; drops the listing shell itself and its children.
pub fn parse_proc_listing(text: &str) -> Result<Vec<ProcEntry>> {
    let mut me = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Some(p) = line.strip_prefix("self\t") {
            me = p.trim().parse::<u32>().ok();
            continue;
        }
        let mut f = line.splitn(4, '\t');
        let (pid, ppid, cuda, cmd) = (f.next(), f.next(), f.next(), f.next());
        let bad = || Error::input(format!("/proc listing line {}: expected PID<TAB>PPID<TAB>CUDA<TAB>CMDLINE, got {line:?}", i + 1));
        let pid: u32 = pid.and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let ppid: u32 = ppid.map(|p| p.trim().parse().unwrap_or(0)).ok_or_else(bad)?;
        let cuda = match cuda {
            Some("1") => true,
            Some("0") => false,
            _ => return Err(bad()),
        };
        out.push(ProcEntry { pid, ppid, cuda, cmdline: cmd.ok_or_else(bad)?.trim_end().to_string() });
    }
    if let Some(me) = me {
        out.retain(|e| e.pid != me && e.ppid != me);
    }
    Ok(out)
}

/// The engine process pod-attach chose, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EngineChoice {
    pub pid: u32,
    pub cmdline: String,
    /// The chosen process owns CUDA (`/dev/nvidia*` descriptor or `libcuda` mapping).
    pub cuda_owner: bool,
    /// PIDs whose command line matched `--process-match`.
    pub matched: Vec<u32>,
    /// The nearest ancestor whose command line runs nsys (`nsys profile`/`nsys launch`), if any.
    pub nsys_ancestor: Option<ProcEntry>,
}

fn is_nsys_cmd(cmd: &str) -> bool {
    let first = cmd.split_whitespace().next().unwrap_or("");
    let base = first.rsplit('/').next().unwrap_or(first);
    base == "nsys" && cmd.split_whitespace().nth(1).is_some_and(|w| w == "profile" || w == "launch")
}

/// Choose the engine: processes whose command line matches `pattern`, plus all their descendants; of those,
/// exactly one must own CUDA. When none owns CUDA and exactly one process matched (not counting matches inside
/// another match's subtree), that one is chosen with `cuda_owner: false`. Anything else is an error listing the
/// candidates. nsys's own processes never count as the engine.
pub fn select_engine(procs: &[ProcEntry], pattern: &str) -> Result<EngineChoice> {
    let re = regex::Regex::new(pattern).map_err(|e| Error::usage(format!("--process-match {pattern:?}: {e}")).with_arg("--process-match"))?;
    let by_pid: BTreeMap<u32, &ProcEntry> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let matched: Vec<u32> = procs.iter().filter(|p| !is_nsys_cmd(&p.cmdline) && re.is_match(&p.cmdline)).map(|p| p.pid).collect();
    let list = |pids: &mut dyn Iterator<Item = u32>| -> String {
        pids.filter_map(|p| by_pid.get(&p)).map(|p| format!("  {} (ppid {}, cuda {}): {}", p.pid, p.ppid, if p.cuda { "yes" } else { "no" }, p.cmdline)).collect::<Vec<_>>().join("\n")
    };
    if matched.is_empty() {
        let shown = procs.iter().take(40).map(|p| format!("  {}: {}", p.pid, p.cmdline)).collect::<Vec<_>>().join("\n");
        return Err(Error::input(format!(
            "no process matches --process-match {pattern:?} among {} processes in the pod's PID namespace:\n{shown}",
            procs.len()
        ))
        .with_arg("--process-match"));
    }
    // Matches and their descendants.
    let mut set = BTreeSet::new();
    let mut stack: Vec<u32> = matched.clone();
    while let Some(p) = stack.pop() {
        if set.insert(p) {
            stack.extend(children.get(&p).into_iter().flatten().copied());
        }
    }
    let owners: Vec<u32> = set.iter().copied().filter(|p| by_pid.get(p).is_some_and(|e| e.cuda && !is_nsys_cmd(&e.cmdline))).collect();
    let chosen = match owners.len() {
        1 => owners[0],
        0 => {
            let matched_set: BTreeSet<u32> = matched.iter().copied().collect();
            let roots: Vec<u32> = matched
                .iter()
                .copied()
                .filter(|p| {
                    // no matched ancestor
                    let mut cur = by_pid.get(p).map(|e| e.ppid);
                    let mut hops = 0;
                    while let Some(pp) = cur {
                        if matched_set.contains(&pp) {
                            return false;
                        }
                        cur = by_pid.get(&pp).map(|e| e.ppid);
                        hops += 1;
                        if hops > 4096 {
                            break;
                        }
                    }
                    true
                })
                .collect();
            if roots.len() == 1 {
                roots[0]
            } else {
                return Err(Error::input(format!(
                    "{} processes match --process-match {pattern:?} and none owns CUDA; make the pattern match exactly one:\n{}",
                    roots.len(),
                    list(&mut roots.iter().copied())
                ))
                .with_arg("--process-match"));
            }
        }
        _ => {
            return Err(Error::input(format!(
                "ambiguous engine: {} CUDA-owning processes under the processes matching --process-match {pattern:?}; narrow the pattern:\n{}",
                owners.len(),
                list(&mut owners.iter().copied())
            ))
            .with_arg("--process-match"))
        }
    };
    let e = by_pid[&chosen];
    let mut anc = by_pid.get(&e.ppid).copied();
    let mut nsys_ancestor = None;
    let mut hops = 0;
    while let Some(a) = anc {
        if is_nsys_cmd(&a.cmdline) {
            nsys_ancestor = Some(a.clone());
            break;
        }
        if a.ppid == a.pid || hops > 4096 {
            break;
        }
        hops += 1;
        anc = by_pid.get(&a.ppid).copied();
    }
    Ok(EngineChoice { pid: e.pid, cmdline: e.cmdline.clone(), cuda_owner: e.cuda, matched, nsys_ancestor })
}

/// How the engine's nsys ends a cudaProfilerApi capture range (`--capture-range-end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeEnd {
    /// `repeat[:N]`: a report per range, the engine keeps running. nsys 2025.3.1 was measured ignoring
    /// cudaProfilerStart in this mode (docs/pod-attach.md), so the report may never come.
    Repeat,
    /// `stop`: one report for the first range; later ranges are ignored, the engine keeps running.
    Stop,
}

/// What the endpoint strategy found out about the engine's nsys (from its command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointNsys {
    /// The report folder: absolute inside that process's root, or `None` when `-o` is relative or absent (then
    /// the caller uses `/proc/PID/cwd`).
    pub dir: Option<String>,
    /// The file name nsys gives the report, when `-o` is given (`run` → `run.nsys-rep`).
    pub report_name: Option<String>,
    pub end: RangeEnd,
}

/// What the endpoint strategy needs from the nsys process the engine runs under: a cudaProfilerApi capture
/// range that does not end the engine (`--capture-range-end=repeat…` or `stop`).
pub fn check_endpoint_nsys(choice: &EngineChoice) -> Result<EndpointNsys> {
    let Some(n) = &choice.nsys_ancestor else {
        return Err(Error::env(format!(
            "strategy endpoint refused: engine PID {} ({}) does not run under `nsys profile`; start it with `nsys profile \
             --capture-range=cudaProfilerApi --capture-range-end=stop|repeat …` and vLLM's --profiler-config.profiler=cuda",
            choice.pid, choice.cmdline
        )));
    };
    let words: Vec<&str> = n.cmdline.split_whitespace().collect();
    let opt = |name: &str| -> Option<String> {
        for (i, w) in words.iter().enumerate() {
            if let Some(v) = w.strip_prefix(&format!("{name}=")) {
                return Some(v.to_string());
            }
            if *w == name {
                return words.get(i + 1).map(|x| x.to_string());
            }
        }
        None
    };
    let range = opt("--capture-range").or_else(|| opt("-c"));
    let end_text = opt("--capture-range-end");
    let end = match end_text.as_deref() {
        Some(e) if e.starts_with("repeat") && !e.starts_with("repeat-shutdown") => Some(RangeEnd::Repeat),
        Some("stop") => Some(RangeEnd::Stop),
        _ => None,
    };
    let (Some("cudaProfilerApi"), Some(end)) = (range.as_deref(), end) else {
        return Err(Error::env(format!(
            "strategy endpoint refused: nsys PID {} runs with --capture-range={} --capture-range-end={}; it needs \
             --capture-range=cudaProfilerApi and --capture-range-end=stop (one capture per engine start) or repeat \
             (else /stop_profile ends the engine, or nothing is captured). Command line: {}",
            n.pid,
            range.as_deref().unwrap_or("(none)"),
            end_text.as_deref().unwrap_or("(none: stop-shutdown)"),
            n.cmdline
        )));
    };
    let out = opt("--output").or_else(|| opt("-o"));
    let dir = out.as_deref().and_then(|o| {
        let dir = Path::new(o).parent().map(|p| p.to_string_lossy().to_string()).unwrap_or_default();
        if o.starts_with('/') { Some(if dir.is_empty() { "/".into() } else { dir }) } else { None }
    });
    let report_name = out.as_deref().and_then(|o| Path::new(o).file_name()).map(|f| {
        let f = f.to_string_lossy();
        if f.ends_with(".nsys-rep") { f.to_string() } else { format!("{f}.nsys-rep") }
    });
    Ok(EndpointNsys { dir, report_name, end })
}

/// With `--capture-range-end=stop` nsys writes one report, named after `-o`, for the first range and ignores
/// later ones. nsys refuses to start when that file already exists (without `--force-overwrite`), so a report of
/// that name in its folder means this nsys has used its one range: returns it.
pub fn stop_range_used(ep: &EndpointNsys, listing: &[ReportFile]) -> Option<ReportFile> {
    if ep.end != RangeEnd::Stop {
        return None;
    }
    let name = ep.report_name.as_deref()?;
    listing.iter().find(|r| r.path.rsplit('/').next() == Some(name)).cloned()
}

/// A `.nsys-rep` in a listing from [`argv_list_reports`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFile {
    pub size: u64,
    pub mtime: i64,
    pub path: String,
}

pub fn parse_report_listing(text: &str) -> Vec<ReportFile> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            Some(ReportFile { size: f.next()?.parse().ok()?, mtime: f.next()?.parse().ok()?, path: f.next()?.to_string() })
        })
        .collect()
}

/// Reports in `after` that are new or changed since `before`.
pub fn new_reports(before: &[ReportFile], after: &[ReportFile]) -> Vec<ReportFile> {
    after.iter().filter(|a| !before.iter().any(|b| b.path == a.path && b.mtime == a.mtime && b.size == a.size)).cloned().collect()
}

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse `sha256sum` output into `basename → digest`.
pub fn parse_sha256sum(text: &str) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let (h, p) = l.split_once("  ").or_else(|| l.split_once(" *")).ok_or_else(|| Error::input(format!("sha256sum output line {}: {l:?}", i + 1)))?;
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::input(format!("sha256sum output line {}: not a sha256: {l:?}", i + 1)));
        }
        let name = p.rsplit('/').next().unwrap_or(p).to_string();
        m.insert(name, h.to_ascii_lowercase());
    }
    Ok(m)
}

/// Parse `stat -c '%s\t%n'` output into `basename → size`.
pub fn parse_sizes(text: &str) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let (sz, p) = l.split_once('\t').ok_or_else(|| Error::input(format!("stat output line {}: {l:?}", i + 1)))?;
        let sz = sz.parse().map_err(|_| Error::input(format!("stat output line {}: bad size in {l:?}", i + 1)))?;
        m.insert(p.rsplit('/').next().unwrap_or(p).to_string(), sz);
    }
    Ok(m)
}

/// Names of the files to copy out: the report, its SQLite export and the stats CSVs. Anything else in the
/// work folder is left behind; names that are not plain file names are rejected.
pub fn files_to_copy(listing: &str, capture_name: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for l in listing.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if l.contains('/') || l == ".." || l == "." {
            return Err(Error::input(format!("work folder listing: {l:?} is not a plain file name")));
        }
        let keep = l.starts_with(capture_name) && (l.ends_with(".nsys-rep") || l.ends_with(".sqlite") || l.ends_with(".csv"));
        if keep {
            names.push(l.to_string());
        }
    }
    names.sort();
    if !names.iter().any(|n| n.ends_with(".nsys-rep")) {
        return Err(Error::env(format!("no {capture_name}.nsys-rep in the work folder (listing: {:?})", listing.lines().collect::<Vec<_>>())));
    }
    Ok(names)
}

/// A file pod-attach copied out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CopiedFile {
    pub name: String,
    /// Local path.
    pub path: String,
    pub size: u64,
    /// sha256 computed locally; equal to the one `sha256sum` printed in the container.
    pub sha256: String,
}

/// Validate a tar stream and write its regular files under `dest`.
///
/// Every entry must be a regular file (or a folder) with a relative path and no `..` component; absolute paths,
/// `..`, links and devices are rejected before anything is written for them. The stream must end with the
/// two zero blocks (a truncated stream is an error). Returns `(name, bytes)` of each file.
pub fn untar_checked(data: &[u8], dest: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    let mut off = 0usize;
    loop {
        if off + 512 > data.len() {
            return Err(Error::input(format!("tar stream truncated at byte {off} of {} (no end-of-archive blocks): the copy was interrupted", data.len())));
        }
        let h = &data[off..off + 512];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let field = |a: usize, b: usize| -> String {
            let f = &h[a..b];
            let end = f.iter().position(|&c| c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).to_string()
        };
        // checksum
        let stored = u64::from_str_radix(field(148, 156).trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| Error::input(format!("tar header at byte {off}: bad checksum field")))?;
        let sum: u64 = h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { b as u64 }).sum();
        if sum != stored {
            return Err(Error::input(format!("tar header at byte {off}: checksum mismatch (stored {stored}, computed {sum})")));
        }
        let name = field(0, 100);
        let prefix = if &h[257..262] == b"ustar" { field(345, 500) } else { String::new() };
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let size_s = field(124, 136);
        let size = u64::from_str_radix(size_s.trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| Error::input(format!("tar entry {path:?} at byte {off}: bad size field {size_s:?}")))? as usize;
        let typ = h[156];
        let p = Path::new(&path);
        if p.is_absolute() || path.starts_with('/') {
            return Err(Error::input(format!("tar entry {path:?} at byte {off}: absolute path rejected")));
        }
        if p.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_))) {
            return Err(Error::input(format!("tar entry {path:?} at byte {off}: `..` component rejected")));
        }
        let body_start = off + 512;
        let body_end = body_start + size;
        if body_end > data.len() {
            return Err(Error::input(format!(
                "tar entry {path:?}: {size} bytes announced, {} present: the copy was interrupted",
                data.len().saturating_sub(body_start)
            )));
        }
        match typ {
            b'0' | 0 => {
                let rel: PathBuf = p.components().filter(|c| matches!(c, Component::Normal(_))).collect();
                let target = dest.join(&rel);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::env(format!("{}: {e}", parent.display())))?;
                }
                let bytes = data[body_start..body_end].to_vec();
                std::fs::write(&target, &bytes).map_err(|e| Error::env(format!("{}: {e}", target.display())))?;
                files.push((rel.to_string_lossy().to_string(), bytes));
            }
            b'5' => {}
            other => {
                return Err(Error::input(format!(
                    "tar entry {path:?} at byte {off}: type {:?} rejected (only regular files are copied)",
                    other as char
                )))
            }
        }
        off = body_start + size.div_ceil(512) * 512;
    }
    Ok(files)
}

/// The result of `gate-check` on the copied-out capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateResult {
    /// `PASS`, `RETRY`, or `NOT_RUN` with the reason in `reason`.
    pub verdict: String,
    pub reason: String,
    /// The gate document, when it ran.
    pub document: Option<serde_json::Value>,
}

/// Where the capture came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provenance {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: Option<String>,
    pub node: Option<String>,
    pub container: String,
    pub container_image: Option<String>,
    /// The ephemeral container (endpoint/attach strategies).
    pub sidecar: Option<String>,
    pub sidecar_image: Option<String>,
    pub nsys: NsysCaps,
    pub engine: Option<EngineChoice>,
    /// The report as nsys wrote it, in the container's filesystem.
    pub source_report: Option<String>,
    pub started_at_unix_s: f64,
    pub capture_s: f64,
}

/// The `pod-attach` document.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PodAttachDoc {
    pub schema: String,
    pub tool: Tool,
    pub dry_run: bool,
    pub strategy: Strategy,
    pub namespace: String,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// `--dry-run`: the exact requests and argv a run issues, in order.
    pub plan: Vec<Step>,
    pub provenance: Option<Provenance>,
    pub out_dir: Option<String>,
    pub files: Vec<CopiedFile>,
    pub gate: Option<GateResult>,
    /// What cleanup did, and what it could not do.
    pub cleanup: Vec<String>,
    pub warnings: Vec<String>,
}

impl Document for PodAttachDoc {
    const KIND: &'static str = "pod-attach";
    const TOOL: &'static str = "pod-attach";
    fn exit_code(&self) -> i32 {
        match &self.gate {
            Some(g) if g.verdict == "RETRY" => 1,
            _ => 0,
        }
    }
}

/// `--dry-run`: the plan, no cluster needed.
pub fn dry_run(o: &Options) -> Result<PodAttachDoc> {
    o.validate()?;
    let (schema, tool) = PodAttachDoc::header();
    let mut warnings = Vec::new();
    if o.pod.is_none() || o.container.is_none() {
        warnings.push("without --pod and --container the plan shows <POD>/<CONTAINER>: a run finds them through the API".into());
    }
    Ok(PodAttachDoc {
        schema,
        tool,
        dry_run: true,
        strategy: o.strategy,
        namespace: o.namespace.clone(),
        pod: o.pod.clone(),
        container: o.container.clone(),
        plan: plan(o),
        provenance: None,
        out_dir: Some(o.out_dir.clone()),
        files: vec![],
        gate: None,
        cleanup: vec![],
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            namespace: "ns".into(),
            pod: Some("p".into()),
            selector: None,
            container: Some("engine".into()),
            image: "registry.example/nsys@sha256:00".into(),
            profile: SecurityProfile::General,
            strategy: Strategy::Endpoint,
            process_match: DEFAULT_PROCESS_MATCH.into(),
            duration_s: 5.0,
            nsys: "nsys".into(),
            workdir: "/tmp/nsyskit-x".into(),
            out_dir: "out".into(),
            port: 8000,
            session: "s".into(),
            sidecar_name: "nsyskit-x".into(),
            sidecar_sleep_s: 3600,
            wait_timeout_s: 60,
            capture_name: "capture".into(),
        }
    }

    fn real_help(v: &str, f: &str) -> String {
        std::fs::read_to_string(format!("{}/fixtures/nsys-help/{v}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn real_nsys_help_texts() {
        let c23 = NsysCaps::from_help(&real_help("2023.4.4", "version.txt"), "", &real_help("2023.4.4", "profile-help.txt"));
        assert!(c23.capture_range && c23.capture_range_end && !c23.attach_pid, "{c23:?}");
        assert_eq!(c23.version.as_deref(), Some("2023.4.4.54-234433681190v0"));
        let c25 = NsysCaps::from_help("", "", &real_help("2025.3.1", "profile-help.txt"));
        assert!(c25.capture_range && c25.capture_range_end && !c25.attach_pid, "{c25:?}");
        assert!(choose_strategy(Strategy::Attach, &c25).is_err());
    }

    #[test]
    fn attach_refused_without_flag_and_endpoint_allowed() {
        let caps = NsysCaps::from_help("NVIDIA Nsight Systems version 2023.4.4", "\tlaunch   Launch\n\tstart   Start\n\tstop   Stop\n", &real_help("2023.4.4", "profile-help.txt"));
        let e = choose_strategy(Strategy::Attach, &caps).unwrap_err();
        assert!(e.message.contains("--attach-pid") && e.message.contains("2023.4.4"), "{}", e.message);
        assert_eq!(choose_strategy(Strategy::Endpoint, &caps).unwrap(), Strategy::Endpoint);
        assert_eq!(choose_strategy(Strategy::Session, &caps).unwrap(), Strategy::Session);
        let no = NsysCaps::default();
        assert!(choose_strategy(Strategy::Endpoint, &no).unwrap_err().message.contains("--capture-range"));
        assert!(choose_strategy(Strategy::Session, &no).unwrap_err().message.contains("launch/start/stop"));
    }

    #[test]
    fn plan_has_patch_body_and_argv_arrays() {
        let p = plan(&opts());
        let patch = p.iter().find_map(|s| match s {
            Step::Api { method, path, body, .. } if method == "PATCH" => Some((path.clone(), body.clone().unwrap())),
            _ => None,
        });
        let (path, body) = patch.expect("a PATCH");
        assert_eq!(path, "/api/v1/namespaces/ns/pods/p/ephemeralcontainers");
        let c = &body["spec"]["ephemeralContainers"][0];
        assert_eq!(c["targetContainerName"], "engine");
        assert_eq!(c["command"], serde_json::json!(["sleep", "3600"]));
        assert_eq!(c["securityContext"]["capabilities"]["add"][0], "SYS_PTRACE");
        // a user value never lands inside a script text
        let mut o = opts();
        o.process_match = "x'; rm -rf / #".into();
        for st in plan(&o) {
            if let Step::Exec { argv, .. } = st {
                assert!(!argv.iter().any(|a| a.contains("rm -rf /")), "{argv:?}");
            }
        }
        let mut o = opts();
        o.strategy = Strategy::Session;
        assert!(!plan(&o).iter().any(|s| matches!(s, Step::Api { method, .. } if method == "PATCH")));
    }

    fn pe(pid: u32, ppid: u32, cuda: bool, cmd: &str) -> ProcEntry {
        ProcEntry { pid, ppid, cuda, cmdline: cmd.into() }
    }

    #[test]
    fn engine_follows_children_to_cuda_owner() {
        let procs = vec![
            pe(1, 0, false, "/usr/bin/nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat -o /out/run vllm serve m"),
            pe(7, 1, false, "python3 /usr/bin/vllm serve m"),
            pe(9, 7, true, "VLLM::EngineCore"),
            pe(12, 7, false, "python3 -c from multiprocessing.resource_tracker import main"),
        ];
        let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
        assert_eq!(c.pid, 9);
        assert!(c.cuda_owner);
        assert_eq!(c.nsys_ancestor.as_ref().unwrap().pid, 1);
        let ep = check_endpoint_nsys(&c).unwrap();
        assert_eq!(ep, EndpointNsys { dir: Some("/out".into()), report_name: Some("run.nsys-rep".into()), end: RangeEnd::Repeat });
    }

    #[test]
    fn engine_not_found_or_ambiguous_lists_candidates() {
        let e = select_engine(&[pe(1, 0, false, "sleep 10")], DEFAULT_PROCESS_MATCH).unwrap_err();
        assert!(e.message.contains("no process matches") && e.message.contains("sleep 10"));
        let two = vec![pe(3, 1, true, "vllm serve a"), pe(4, 1, true, "vllm serve b")];
        let e = select_engine(&two, DEFAULT_PROCESS_MATCH).unwrap_err();
        assert!(e.message.contains("ambiguous") && e.message.contains("vllm serve a") && e.message.contains("vllm serve b"), "{}", e.message);
        let two_cpu = vec![pe(3, 1, false, "vllm serve a"), pe(4, 1, false, "vllm serve b")];
        assert!(select_engine(&two_cpu, DEFAULT_PROCESS_MATCH).unwrap_err().message.contains("2 processes match"));
    }

    #[test]
    fn endpoint_refuses_wrong_capture_range() {
        let procs = vec![pe(1, 0, false, "nsys profile --capture-range=cudaProfilerApi python3 -m vllm serve"), pe(2, 1, true, "vllm serve m")];
        let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
        let e = check_endpoint_nsys(&c).unwrap_err();
        assert!(e.message.contains("--capture-range-end=stop") && e.message.contains("(none: stop-shutdown)"), "{}", e.message);
        for bad in ["stop-shutdown", "repeat-shutdown:2", "none"] {
            let procs = vec![pe(1, 0, false, &format!("nsys profile -c cudaProfilerApi --capture-range-end={bad} vllm serve")), pe(2, 1, true, "vllm serve m")];
            let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
            assert!(check_endpoint_nsys(&c).unwrap_err().message.contains("refused"), "{bad}");
        }
        // stop: accepted, one report per engine start; relative -o → the cwd
        let procs = vec![pe(1, 0, false, "nsys profile --capture-range cudaProfilerApi --capture-range-end stop -o eng.nsys-rep vllm serve"), pe(2, 1, true, "vllm serve m")];
        let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
        let ep = check_endpoint_nsys(&c).unwrap();
        assert_eq!(ep, EndpointNsys { dir: None, report_name: Some("eng.nsys-rep".into()), end: RangeEnd::Stop });
        let rf = |p: &str| ReportFile { size: 10, mtime: 1, path: p.into() };
        assert_eq!(stop_range_used(&ep, &[rf("/proc/1/cwd/other.nsys-rep")]), None);
        assert_eq!(stop_range_used(&ep, &[rf("/proc/1/cwd/eng.nsys-rep")]), Some(rf("/proc/1/cwd/eng.nsys-rep")));
        let rep = EndpointNsys { end: RangeEnd::Repeat, ..ep };
        assert_eq!(stop_range_used(&rep, &[rf("/proc/1/cwd/eng.nsys-rep")]), None);
        let bare = select_engine(&[pe(2, 1, true, "vllm serve m")], DEFAULT_PROCESS_MATCH).unwrap();
        assert!(check_endpoint_nsys(&bare).unwrap_err().message.contains("does not run under `nsys profile`"));
    }

    #[test]
    fn proc_listing_drops_the_lister() {
        let t = "self\t50\n1\t0\t0\tnsys profile x\n50\t0\t0\tsh -c ...\n51\t50\t0\tls -l /proc/1/fd\n7\t1\t1\tvllm serve m\n";
        let v = parse_proc_listing(t).unwrap();
        assert_eq!(v.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![1, 7]);
        assert!(parse_proc_listing("x\ty\n").unwrap_err().message.contains("line 1"));
    }

    fn tar_header(name: &str, size: usize, typ: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        let sz = format!("{size:011o}");
        h[124..135].copy_from_slice(sz.as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = typ;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        for b in &mut h[148..156] {
            *b = b' ';
        }
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        let cs = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(cs.as_bytes());
        h
    }

    fn tar_of(entries: &[(&str, &[u8], u8)]) -> Vec<u8> {
        let mut v = Vec::new();
        for (n, d, t) in entries {
            v.extend(tar_header(n, d.len(), *t));
            v.extend_from_slice(d);
            v.resize(v.len().div_ceil(512) * 512, 0);
        }
        v.extend(vec![0u8; 1024]);
        v
    }

    #[test]
    fn untar_accepts_plain_files_and_rejects_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let ok = tar_of(&[("capture.nsys-rep", b"abc", b'0'), ("capture.sqlite", b"", b'0')]);
        let files = untar_checked(&ok, dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(std::fs::read(dir.path().join("capture.nsys-rep")).unwrap(), b"abc");
        for bad in ["../evil", "a/../../evil", "/etc/evil"] {
            let t = tar_of(&[(bad, b"x", b'0')]);
            let e = untar_checked(&t, dir.path()).unwrap_err();
            assert!(e.message.contains("rejected") && e.message.contains(bad), "{}", e.message);
        }
        assert!(!dir.path().parent().unwrap().join("evil").exists());
        let link = tar_of(&[("l", b"", b'2')]);
        assert!(untar_checked(&link, dir.path()).unwrap_err().message.contains("type"));
        let cut = &ok[..600];
        assert!(untar_checked(cut, dir.path()).unwrap_err().message.contains("interrupted"));
    }

    #[test]
    fn sha_and_listings() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let m = parse_sha256sum("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  /w/capture.nsys-rep\n").unwrap();
        assert_eq!(m["capture.nsys-rep"].len(), 64);
        assert_eq!(parse_sizes("3\t/w/capture.nsys-rep\n").unwrap()["capture.nsys-rep"], 3);
        let names = files_to_copy("capture.nsys-rep\ncapture.sqlite\ncapture_nvtx_sum.csv\nother.txt\n", "capture").unwrap();
        assert_eq!(names, vec!["capture.nsys-rep", "capture.sqlite", "capture_nvtx_sum.csv"]);
        assert!(files_to_copy("capture.sqlite\n", "capture").is_err());
        let before = parse_report_listing("10\t100\t/o/a.nsys-rep\n");
        let after = parse_report_listing("10\t100\t/o/a.nsys-rep\n20\t200\t/o/a.1.nsys-rep\n");
        assert_eq!(new_reports(&before, &after)[0].path, "/o/a.1.nsys-rep");
    }
}
