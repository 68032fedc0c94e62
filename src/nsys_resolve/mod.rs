//! `nsys-resolve`: find, verify and probe the profiler; preflight the machine; write the provenance record.
//!
//! * [`resolve`] finds nsys (`--nsys`, `NSYS_BIN`, `PATH`, known install folders), verifies it (canonical path,
//!   regular executable, `--version` within a timeout) and probes its [`Capabilities`] from its own help texts.
//! * [`run`] builds the `nsyskit.provenance/v1` document: the resolved nsys, the preflight checks (GPUs and
//!   foreign compute processes through nvidia-smi, a TCP port, stale `/dev/shm` segments), the capture recipe
//!   (flags, commands, env with secrets redacted), the engine's git state, host and UTC time; with `record` it
//!   is also written to `DIR/provenance.json`.

mod preflight;
mod record;
pub mod workload;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};

pub use crate::nsys::{
    compare_versions, declared_options, export_types, parse_capabilities, parse_version, version_key, Capabilities,
    TRACKED_SWITCHES,
};
pub use crate::nsys::{
    expand_glob, glob_regex, install_globs_from_env, probe_capabilities, project_install_globs, resolve,
    run_with_timeout, verify, NsysCandidate, ResolveOptions, Resolved, RunError, RunOutput, KNOWN_INSTALL_GLOBS,
};
pub use preflight::{
    check_port, check_shm, parse_apps, parse_clocks, parse_cuda_version, parse_gpus, parse_proc_net_tcp, query_clocks,
    query_gpus, Clocks, Gpu, GpuProcess, GpuState, Holder, Listener, PortState, ShmSegment, ShmState, TargetSpec,
    APPS_QUERY, CLOCKS_QUERY, CLOCKS_QUERY_OLD, GPU_QUERY,
};
pub use record::{
    hostname, is_secret_key, redact_command, redact_words, repo_state, rfc3339, split_words, ArgvRequirement,
    LauncherCheck, Redactor, RepoState, REDACTED,
};
pub use workload::{Workload, WorkloadSpec};

/// One preflight check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Check {
    /// `gpu`, `gpu-foreign-processes`, `port`, `shm`, `flags`, `nsys-driver`, `cuda-injection`.
    pub name: String,
    /// `pass`, `fail`, `warn` (a finding said before the capture; never fails the run) or `skip` (not
    /// applicable; never fails the run).
    pub status: String,
    /// The measured reason, e.g. `pid 433 (python3) uses 10758 MiB on GPU 0`.
    pub reason: String,
}

/// The capture recipe recorded for later comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureRecipe {
    /// `--flags` exactly as given (`null` when not given).
    pub flags: Option<String>,
    /// The same split into words as a shell would.
    pub flags_argv: Vec<String>,
    /// Tracked `nsys profile` switches in `flags` the resolved nsys lacks (e.g. `--attach-pid` on 2023.4).
    pub unsupported_flags: Vec<String>,
    /// `--server-cmd`, with secret `KEY=value` words and `--secret-flag value`s redacted.
    pub server_cmd: Option<String>,
    /// `--client-cmd`, redacted the same way.
    pub client_cmd: Option<String>,
    /// `--env K` / `--env K=V`, in the order given.
    pub env: Vec<EnvVar>,
    /// `--instrumentation NAME=STATE`, in the order given (the engine's NVTX/tracing switches).
    pub instrumentation: Vec<Switch>,
    /// `CUDA_INJECTION64_PATH` where the engine starts from (`--env`, else this environment), recorded with
    /// `--preflight`/`--record`; any value but nsys's own `libToolsInjection64.so` is a `cuda-injection` warning.
    #[serde(default)]
    pub cuda_injection64_path: Option<String>,
    /// serve-capture's launcher contract: the server argv that was checked against `--require-argv` and what
    /// `--engine` implies (null outside serve-capture, or when nothing was required).
    #[serde(default)]
    pub launcher: Option<LauncherCheck>,
    /// serve-capture: the whole environment the server is started with (nsys's process environment, which the
    /// server inherits: serve-capture's own environment, then `--env`, then what serve-capture sets), sorted by
    /// name, each value redacted by the one rule (`redact_words` on `NAME=VALUE`). nsys adds its own injection
    /// variables on top. Empty outside serve-capture.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_environment: Vec<EnvVar>,
}

/// A chosen environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnvVar {
    pub name: String,
    /// The value (`<redacted>` for secret keys, `scheme://user:<redacted>@host` for URL credentials in it;
    /// `null` when `--env K` names a variable that is not set).
    pub value: Option<String>,
    /// The redaction rule (`resolve::redact_words` on `NAME=VALUE`) removed a secret from the value: a secret
    /// name (TOKEN, SECRET, PASSWORD, PASSWD, KEY, AUTH, CREDENTIAL, BEARER; PASS, PW, PWD as a part) or URL
    /// credentials.
    pub redacted: bool,
    /// `given` (`--env K=V`) or `environment` (`--env K`, read from this process's environment); in
    /// `server_environment` also `inherited` (serve-capture's own environment) and `serve-capture` (set by it).
    pub source: String,
}

/// An instrumentation switch and its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Switch {
    pub name: String,
    pub state: String,
}

/// Where and when this record was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Host {
    pub hostname: Option<String>,
    /// UTC time, RFC 3339 (`2026-11-29T23:01:02Z`).
    pub time_utc: String,
    /// `uname -r` equivalent (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
}

/// `nsyskit.provenance/v1`: which nsys, whether the machine is fit for a capture, and the capture recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provenance {
    pub schema: String,
    pub tool: Tool,
    /// `PASS` when every check passed (or none ran), `RETRY` when one failed (exit 1).
    pub verdict: String,
    /// The failed checks' reasons, joined (empty on PASS).
    pub reason: String,
    /// The resolved nsys (path, version, capabilities, every candidate).
    pub nsys: Resolved,
    /// The checks that ran, in order.
    pub checks: Vec<Check>,
    /// GPUs from nvidia-smi (`null` unless `--preflight`/`--record`/`--gpu`/`--require-gpu`).
    pub gpu: Option<GpuState>,
    /// `--port N`.
    pub port: Option<PortState>,
    /// `--shm PATTERN`.
    pub shm: Option<ShmState>,
    pub capture: CaptureRecipe,
    /// `--repo DIR`.
    pub repo: Option<RepoState>,
    pub host: Host,
    /// Artifact paths: `--artifact`s as given, then `DIR/provenance.json` with `--record`.
    pub artifacts: Vec<String>,
    /// `DIR/provenance.json` (absolute) when `--record DIR` was given.
    pub record: Option<String>,
    /// The workload: question, client command, request rate, concurrency, seed and clock policy, the
    /// instrumentation patch's identity (serve-capture, pod-attach, nsys-resolve's workload flags); absent when
    /// no tool recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
}

impl Document for Provenance {
    const KIND: &'static str = "provenance";
    const TOOL: &'static str = "nsys-resolve";
    fn exit_code(&self) -> i32 {
        if self.verdict == "PASS" {
            0
        } else {
            1
        }
    }
}

/// Everything `nsys-resolve` can be asked.
#[derive(Debug, Clone)]
pub struct ProvenanceOptions {
    pub resolve: ResolveOptions,
    /// Run the GPU check (and the port/shm checks when given).
    pub preflight: bool,
    /// A missing nvidia-smi (or one that fails) is a failed check instead of `skip`.
    pub require_gpu: bool,
    /// `--gpu IDX`; else `cuda_visible_devices`; else every GPU is a target.
    pub gpu: Option<u32>,
    /// The `CUDA_VISIBLE_DEVICES` value to honour (the binary passes its environment's).
    pub cuda_visible_devices: Option<String>,
    pub nvidia_smi: Option<PathBuf>,
    pub port: Option<u16>,
    pub shm: Option<String>,
    /// The folder searched by `shm` (normally `/dev/shm`).
    pub shm_dir: PathBuf,
    pub record: Option<PathBuf>,
    pub flags: Option<String>,
    pub server_cmd: Option<String>,
    pub client_cmd: Option<String>,
    pub env: Vec<String>,
    /// The values of the `NAME`-only `env` entries in the user's environment (a tool's run fills it from its
    /// host: Nushell's `$env` for the plugin); `None`: this process's environment.
    pub environment: Option<std::collections::BTreeMap<String, String>>,
    pub instrumentation: Vec<String>,
    pub repo: Option<PathBuf>,
    pub artifacts: Vec<String>,
    /// The value of `CUDA_INJECTION64_PATH` in the environment the engine is started from (the binary passes
    /// its own environment's): checked with `--preflight`/`--record` (`cuda-injection`).
    pub cuda_injection: Option<String>,
    /// The workload record to write (`provenance.workload`), built by [`workload::from_command`].
    pub workload: Option<Workload>,
}

impl Default for ProvenanceOptions {
    fn default() -> Self {
        ProvenanceOptions {
            resolve: ResolveOptions::from_env(),
            preflight: false,
            require_gpu: false,
            gpu: None,
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            nvidia_smi: None,
            port: None,
            shm: None,
            shm_dir: PathBuf::from("/dev/shm"),
            record: None,
            flags: None,
            server_cmd: None,
            client_cmd: None,
            env: vec![],
            environment: None,
            instrumentation: vec![],
            repo: None,
            artifacts: vec![],
            cuda_injection: std::env::var("CUDA_INJECTION64_PATH").ok().filter(|v| !v.is_empty()),
            workload: None,
        }
    }
}

/// The oldest nsys release measured or documented to trace CUDA on a driver of each CUDA major: CUDA 13 drivers
/// need nsys 2025.3 (measured on the H200, driver 580.159.04 / CUDA 13.0: nsys 2023.4.4 exits 0 and silently
/// truncates the CUDA rows — `fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite`, CUPTI cbid 468 —
/// while 2025.3.1 traces fully); CUDA 12 drivers need 2022.4 (the release shipped with CUDA 12.0).
pub const NSYS_FOR_CUDA_MAJOR: &[(u64, &str)] = &[(12, "2022.4"), (13, "2025.3")];

/// Is this nsys old for a driver of this CUDA version? `Some(reason)` when it is (a `warn` finding), `None`
/// when it is recent enough or either version cannot be read.
pub fn nsys_too_old_for_driver(nsys_version: &str, cuda_version: &str) -> Option<String> {
    let major: u64 = cuda_version.split('.').next()?.parse().ok()?;
    let nsys = version_key(nsys_version);
    if nsys.is_empty() {
        return None;
    }
    let (m, need) = NSYS_FOR_CUDA_MAJOR.iter().rev().find(|(m, _)| *m <= major)?;
    if *m < major {
        return Some(format!(
            "the driver supports CUDA {cuda_version}, newer than any CUDA major this check knows (≤ {m}): nsys {nsys_version} may not trace it; \
             check the CUDA rows of the capture (gate-check G3/G4)"
        ));
    }
    (nsys < version_key(need)).then(|| {
        format!(
            "nsys {nsys_version} is older than {need}, the oldest known to trace CUDA on a CUDA {major} driver (this driver: CUDA {cuda_version}): \
             measured, nsys 2023.4 on a CUDA 13 driver exits 0 and silently truncates the CUDA rows (CUPTI cbid 468); use nsys ≥ {need}"
        )
    })
}

/// Is this `CUDA_INJECTION64_PATH` nsys's own CUDA injection library (`libToolsInjection64.so`, which nsys sets
/// on the process it launches)?
pub fn is_nsys_injection(value: &str) -> bool {
    Path::new(value).file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libToolsInjection"))
}

/// The `cuda-injection` finding for a `CUDA_INJECTION64_PATH` value set before the capture.
pub fn cuda_injection_reason(value: &str, whence: &str) -> String {
    format!(
        "CUDA_INJECTION64_PATH={value} is already set ({whence}): another CUDA injector (e.g. zymtrace) blocks nsys's CUDA tracing \
         when the engine keeps it (measured: nsys 2023.4.4 replaces it on the process it launches, so a server that sets it \
         itself, or a process nsys attaches to, loses the CUDA rows); unset it in the engine's environment"
    )
}

fn check(name: &str, status: &str, reason: impl Into<String>) -> Check {
    Check { name: name.into(), status: status.into(), reason: reason.into() }
}

fn env_vars(specs: &[String], environment: Option<&std::collections::BTreeMap<String, String>>) -> Result<Vec<EnvVar>> {
    let mut out = Vec::new();
    for s in specs {
        let (name, value, source) = match s.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string()), "given"),
            None => {
                let v = match environment {
                    Some(env) => env.get(s).cloned(),
                    None => std::env::var(s).ok(),
                };
                (s.clone(), v, "environment")
            }
        };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(Error::usage(format!("--env {s:?}: expected NAME or NAME=VALUE")).with_arg("--env"));
        }
        out.push(env_var(name, value, source));
    }
    Ok(out)
}

/// One environment entry under the one redaction rule on `NAME=VALUE`: a secret name, or credentials inside the
/// value (a URL's).
pub fn env_var(name: String, value: Option<String>, source: &str) -> EnvVar {
    let (value, redacted) = match value {
        Some(v) => {
            let (w, secrets) = redact_words(&[format!("{name}={v}")]);
            let w = w.into_iter().next().unwrap_or_default();
            (Some(w[name.len() + 1..].to_string()), !secrets.is_empty())
        }
        None => (None, false),
    };
    EnvVar { name, value, redacted, source: source.into() }
}

fn switches(specs: &[String]) -> Result<Vec<Switch>> {
    specs
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok(Switch { name: k.into(), state: v.into() }),
            _ => Err(Error::usage(format!("--instrumentation {s:?}: expected NAME=STATE (e.g. nvtx=on)"))
                .with_arg("--instrumentation")),
        })
        .collect()
}

/// Write `dir/provenance.json` (pretty JSON, written to a temporary file then renamed into place).
pub fn write_record(dir: &Path, doc: &Provenance) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::env(format!("{}: cannot create the record folder: {e}", dir.display())).with_arg("--record")
    })?;
    let path = dir.join("provenance.json");
    let text = serde_json::to_string_pretty(doc).expect("provenance serialises") + "\n";
    let tmp = dir.join(".provenance.json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| Error::env(format!("{}: cannot write: {e}", path.display())).with_arg("--record"))?;
    Ok(path)
}

/// Read a provenance record (`DIR/provenance.json` or a document saved from stdout). Errors name the file and,
/// for JSON that is not a provenance document, the JSON path at fault.
pub fn load_record(path: &Path) -> Result<Provenance> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::input(format!("{name}: cannot read: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::input(format!("{name}: not JSON: {e}")))?;
    let id = crate::contract::schema_id(Provenance::KIND);
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s == id => {}
        Some(s) => return Err(Error::input(format!("{name}: $.schema is {s:?}, expected {id:?}"))),
        None => return Err(Error::input(format!("{name}: $.schema is missing, expected {id:?}"))),
    }
    serde_json::from_value(value).map_err(|e| Error::input(format!("{name}: not a {id} document: {e}")))
}

/// Resolve nsys, run the asked checks, assemble the provenance document, and write it with `record`.
pub fn run(opts: &ProvenanceOptions) -> Result<Provenance> {
    let time_utc = rfc3339(SystemTime::now());
    // Usage errors before any probing.
    let env = env_vars(&opts.env, opts.environment.as_ref())?;
    let instrumentation = switches(&opts.instrumentation)?;
    let flags_argv = opts.flags.as_deref().map(split_words).unwrap_or_default();
    let repo = opts.repo.as_deref().map(repo_state).transpose()?;

    let nsys = resolve(&opts.resolve)?;
    let mut checks = Vec::new();
    let unsupported_flags = flags_check(&nsys, opts.flags.is_some(), &flags_argv, &mut checks);

    let preflight = opts.preflight || opts.require_gpu || opts.port.is_some() || opts.shm.is_some();
    let want_gpu = preflight || opts.record.is_some() || opts.gpu.is_some();
    let gpu = if want_gpu {
        // an empty CUDA_VISIBLE_DEVICES hides every GPU from CUDA: no target, a failed gpu check
        let target = match (opts.gpu, opts.cuda_visible_devices.as_deref()) {
            (Some(i), _) => TargetSpec::Index(i),
            (None, Some(v)) => TargetSpec::Visible(v.to_string()),
            (None, None) => TargetSpec::All,
        };
        Some(query_gpus(opts.nvidia_smi.as_deref(), &target, opts.resolve.timeout))
    } else {
        None
    };
    if preflight {
        gpu_checks(gpu.as_ref().expect("queried when preflight"), opts.require_gpu, &mut checks);
    }
    let port = opts.port.and_then(|p| port_check(p, &mut checks));
    let shm = match &opts.shm {
        Some(pat) => shm_check(&opts.shm_dir, pat, &mut checks)?,
        None => None,
    };

    // the environment the engine starts from: the --env value given, else ours
    let given =
        env.iter().find(|e| e.name == "CUDA_INJECTION64_PATH" && e.source == "given").and_then(|e| e.value.clone());
    let injection = given
        .map(|v| (v, "--env"))
        .or_else(|| opts.cuda_injection.clone().map(|v| (v, "in the environment nsys and the engine start from")));
    if let Some((v, whence)) =
        injection.as_ref().filter(|(v, _)| !is_nsys_injection(v) && !preflight && opts.record.is_some())
    {
        eprintln!("nsys-resolve: warning: {}", cuda_injection_reason(v, whence));
    }
    if preflight {
        injection_checks(&nsys, injection.as_ref(), gpu.as_ref(), &mut checks);
    }
    for c in checks.iter().filter(|c| c.status == "warn") {
        eprintln!("nsys-resolve: warning: {}: {}", c.name, c.reason);
    }
    let failed: Vec<String> =
        checks.iter().filter(|c| c.status == "fail").map(|c| format!("{}: {}", c.name, c.reason)).collect();
    let server_cmd = opts.server_cmd.as_deref().map(|c| redact_command(c).0);
    let client_cmd = opts.client_cmd.as_deref().map(|c| redact_command(c).0);
    let record_path =
        opts.record.as_ref().map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).join("provenance.json"));
    let mut artifacts = opts.artifacts.clone();
    if let Some(p) = &record_path {
        artifacts.push(p.display().to_string());
    }
    let (schema, tool) = Provenance::header();
    let doc = Provenance {
        schema,
        tool,
        verdict: if failed.is_empty() { "PASS".into() } else { "RETRY".into() },
        reason: failed.join("; "),
        nsys,
        checks,
        gpu,
        port,
        shm,
        capture: CaptureRecipe {
            flags: opts.flags.clone(),
            flags_argv,
            unsupported_flags,
            server_cmd,
            client_cmd,
            env,
            instrumentation,
            cuda_injection64_path: injection.as_ref().filter(|_| want_gpu).map(|(v, _)| v.clone()),
            launcher: None,
            server_environment: Vec::new(),
        },
        repo,
        host: Host {
            hostname: hostname(),
            time_utc,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        },
        artifacts,
        record: record_path.as_ref().map(|p| p.display().to_string()),
        workload: opts.workload.clone(),
    };
    if let Some(dir) = &opts.record {
        write_record(dir, &doc)?;
    }
    Ok(doc)
}

/// The `flags` check (with `--flags`): does the resolved nsys support every tracked switch. Returns the
/// unsupported ones (none when capabilities were not probed).
fn flags_check(nsys: &Resolved, given: bool, flags_argv: &[String], checks: &mut Vec<Check>) -> Vec<String> {
    let unsupported_flags = if nsys.probed { nsys.capabilities.unsupported(flags_argv) } else { vec![] };
    if given {
        if !nsys.probed {
            checks.push(check("flags", "skip", "capabilities not probed"));
        } else if unsupported_flags.is_empty() {
            checks.push(check(
                "flags",
                "pass",
                format!("nsys {} supports every tracked switch in --flags", nsys.version),
            ));
        } else {
            checks.push(check(
                "flags",
                "fail",
                format!("nsys {} has no {}", nsys.version, unsupported_flags.join(", ")),
            ));
        }
    }
    unsupported_flags
}

/// The `gpu` and `gpu-foreign-processes` checks of a preflight.
fn gpu_checks(g: &GpuState, require_gpu: bool, checks: &mut Vec<Check>) {
    if g.status != "available" {
        let why = g.reason.clone().unwrap_or_default();
        if require_gpu {
            checks.push(check("gpu", "fail", format!("gpu unavailable: {why}")));
        } else {
            checks.push(check("gpu", "skip", format!("gpu unavailable: {why} (a failure only with --require-gpu)")));
        }
        return;
    }
    let missing: Vec<String> =
        g.targets.iter().filter(|t| !g.gpus.iter().any(|x| x.index == **t)).map(|t| t.to_string()).collect();
    if g.targets.is_empty() {
        checks.push(check(
            "gpu",
            "fail",
            format!("no target GPU: {} selects none of the {} GPUs", g.target_source, g.gpus.len()),
        ));
    } else if !missing.is_empty() {
        checks.push(check(
            "gpu",
            "fail",
            format!("target GPU {} not found ({} GPUs listed)", missing.join(", "), g.gpus.len()),
        ));
    } else {
        let names: Vec<String> =
            g.gpus.iter().filter(|x| x.target).map(|x| format!("{} ({})", x.index, x.name)).collect();
        checks.push(check("gpu", "pass", format!("target GPU {} from {}", names.join(", "), g.target_source)));
    }
    let foreign: Vec<String> = g
        .processes
        .iter()
        .filter(|p| p.on_target)
        .map(|p| {
            let mem = p.used_memory_mib.map(|m| format!("{m} MiB")).unwrap_or_else(|| "unknown memory".into());
            format!(
                "pid {} ({}) uses {mem} on GPU {}",
                p.pid,
                p.process_name,
                p.gpu_index.map(|i| i.to_string()).unwrap_or_default()
            )
        })
        .collect();
    if foreign.is_empty() {
        checks.push(check("gpu-foreign-processes", "pass", "no compute process on the target GPU"));
    } else {
        checks.push(check(
            "gpu-foreign-processes",
            "fail",
            format!("foreign process on the target GPU: {}", foreign.join("; ")),
        ));
    }
}

/// The `port` check (`--port`): the port's state, None when it could not be read.
fn port_check(p: u16, checks: &mut Vec<Check>) -> Option<PortState> {
    match check_port(p) {
        Ok(s) => {
            if s.free {
                checks.push(check("port", "pass", format!("port {p} is free")));
            } else {
                let who: Vec<String> = s
                    .listeners
                    .iter()
                    .map(|l| {
                        let hs: Vec<String> =
                            l.holders.iter().map(|h| format!("pid {} ({})", h.pid, h.command)).collect();
                        let hs =
                            if hs.is_empty() { format!("uid {}, process not visible", l.uid) } else { hs.join(", ") };
                        format!("{} held by {hs}", l.local_address)
                    })
                    .collect();
                checks.push(check("port", "fail", format!("port {p} is in use: {}", who.join("; "))));
            }
            Some(s)
        }
        Err(e) => {
            checks.push(check("port", "fail", format!("cannot check port {p}: {e}")));
            None
        }
    }
}

/// The `shm` check (`--shm PATTERN`): stale segments in `dir`; a bad pattern is a usage error.
fn shm_check(dir: &Path, pat: &str, checks: &mut Vec<Check>) -> Result<Option<ShmState>> {
    match check_shm(dir, pat) {
        Ok(s) => {
            let stale: Vec<&str> = s.segments.iter().filter(|x| x.stale).map(|x| x.path.as_str()).collect();
            if stale.is_empty() {
                checks.push(check(
                    "shm",
                    "pass",
                    format!("no stale segment matches {pat:?} ({} in use)", s.segments.len()),
                ));
            } else {
                checks.push(check(
                    "shm",
                    "fail",
                    format!("{} stale segment(s) match {pat:?}: {}", stale.len(), stale.join(", ")),
                ));
            }
            Ok(Some(s))
        }
        Err(e) if e.starts_with("--shm") => Err(Error::usage(e).with_arg("--shm")),
        Err(e) => {
            checks.push(check("shm", "fail", e));
            Ok(None)
        }
    }
}

/// The `cuda-injection` and `nsys-driver` checks of a preflight.
fn injection_checks(
    nsys: &Resolved,
    injection: Option<&(String, &str)>,
    gpu: Option<&GpuState>,
    checks: &mut Vec<Check>,
) {
    match injection {
        Some((v, _)) if is_nsys_injection(v) => {
            checks.push(check("cuda-injection", "pass", format!("CUDA_INJECTION64_PATH is nsys's own ({v})")))
        }
        Some((v, whence)) => checks.push(check("cuda-injection", "warn", cuda_injection_reason(v, whence))),
        None => checks.push(check("cuda-injection", "pass", "CUDA_INJECTION64_PATH is not set")),
    }
    if let Some(g) = gpu.filter(|g| g.status == "available") {
        match g.cuda_version.as_deref() {
            Some(cv) => match nsys_too_old_for_driver(&nsys.version, cv) {
                Some(why) => checks.push(check("nsys-driver", "warn", why)),
                None => checks.push(check(
                    "nsys-driver",
                    "pass",
                    format!("nsys {} traces CUDA on a CUDA {cv} driver", nsys.version),
                )),
            },
            None => checks.push(check(
                "nsys-driver",
                "skip",
                "the driver's CUDA version is unknown (nvidia-smi printed none)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsys_versus_driver_cuda() {
        // measured: 2023.4.4 truncates CUDA rows on the CUDA 13.0 driver of the H200 machine; 2025.3.1 does not
        assert!(nsys_too_old_for_driver("2023.4.4.54-234433681190v0", "13.0").unwrap().contains("cbid 468"));
        assert_eq!(nsys_too_old_for_driver("2025.3.1.90-253135822126v0", "13.0"), None);
        assert_eq!(nsys_too_old_for_driver("2023.4.4.54", "12.4"), None);
        assert!(nsys_too_old_for_driver("2022.1.1", "12.2").is_some());
        assert!(nsys_too_old_for_driver("2025.3.1", "14.0").unwrap().contains("newer than any CUDA major"));
        assert_eq!(nsys_too_old_for_driver("2025.3.1", "11.8"), None);
        assert_eq!(nsys_too_old_for_driver("garbage", "13.0"), None);
        assert!(is_nsys_injection("/opt/nvidia/nsight-systems/2025.3.1/target-linux-x64/libToolsInjection64.so"));
        assert!(!is_nsys_injection("/opt/zymtrace/libzymtrace.so"));
    }
}
