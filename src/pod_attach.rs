//! `pod-attach`: capture an nsys profile from a live Kubernetes pod through the API (issue 7).
//!
//! This module holds everything that needs no Kubernetes client: which capture strategy can work with the
//! nsys found in the pod ([`choose_strategy`]), the exact requests and container argv of a run ([`plan`], which
//! is also what `--dry-run` prints), the engine-PID choice from a `/proc` listing ([`parse_proc_listing`],
//! [`select_engine`]), the engine's environment and command-line checks ([`check_engine_env`]), the streaming
//! tar check of the copy-out ([`TarSink`]), the flags and their defaults ([`Flags`], [`options`]), the gate
//! ([`Gate`], in process by default), the evidence bundle ([`write_bundle`]) and the output document
//! ([`PodAttachDoc`]). The kube transport lives in `bins/pod-attach` and only executes these steps.
//!
//! Every command run in a container is an argv array. The only shell scripts are the fixed constants in this
//! module ([`PROC_LIST_SCRIPT`], [`END_SLEEP_SCRIPT`]); values reach them as positional parameters (`$1`),
//! never interpolated into the script text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

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

/// The environment variable that overrides the built-in default `--image` (the flag wins over it).
pub const SIDECAR_IMAGE_ENV: &str = "NSYSKIT_SIDECAR_IMAGE";

/// Path A of the seed recipe (`shared/seeds/000_…`): the pre-built, publicly readable nsys sidecar, pinned by
/// its manifest digest. The default `--image`.
pub const DEFAULT_SIDECAR_IMAGE: &str =
    "ghcr.io/cfregly/nsys-sidecar:0.1.0@sha256:3146de96f6022a8cc36f86d1b8c0281cb940e51e2c3dc49c315646ad66ede43d";

/// Path B of the seed recipe: a stock CUDA image plus `--install-nsys apt` (not pinned by digest: it needs
/// `--allow-unpinned-image`, or the operator's own digest).
pub const PATH_B_IMAGE: &str = "nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04";

/// The apt package `--install-nsys apt` installs (the seed's `apt install nsight-systems-cli`).
pub const NSYS_APT_PACKAGE: &str = "nsight-systems-cli";

/// Default `--duration`: the seed's 120 s capture window.
pub const DEFAULT_DURATION_S: f64 = 120.0;

/// A `--workdir` must be a folder of its own whose name starts with this (cleanup runs `rm -rf` on it).
pub const WORKDIR_PREFIX: &str = "nsyskit-pod-attach-";

/// The bundle file `--bundle DIR` merges into (the seed's step 5).
pub const BUNDLE_FILE: &str = "inference_perfbench_v1.json";

/// Prints, of the environment of process `$1` (`/proc/$1/environ`), only the variables pod-attach checks, one
/// `NAME=value` a line (NULs become newlines, newlines inside values become spaces, so a value cannot fake a
/// line); `unreadable` when the file cannot be read. Nothing else of the environment leaves the container.
pub const ENV_CHECK_SCRIPT: &str = r#"f=/proc/$1/environ
if ! tr '\000\n' '\n ' < "$f" > /dev/null 2>&1; then echo unreadable; exit 0; fi
tr '\000\n' '\n ' < "$f" | grep -E '^(CUDA_INJECTION64_PATH|VLLM_TORCH_CUDA_PROFILE)=' || true"#;

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
            _ => Err(Error::usage(format!("unknown strategy {s:?}: expected endpoint, session or attach"))
                .with_arg("--strategy")),
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
            _ => {
                Err(Error::usage(format!("unknown profile {s:?}: expected general or sysadmin")).with_arg("--profile"))
            }
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

/// How `--install-nsys` puts nsys into the sidecar (Path B of the seed recipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstallNsys {
    /// `apt-get update`, `apt-get install -y --no-install-recommends nsight-systems-cli` (argv, no shell), then
    /// `dpkg-query` records the installed version.
    Apt,
}

impl InstallNsys {
    pub fn parse(s: &str) -> Result<InstallNsys> {
        match s {
            "apt" => Ok(InstallNsys::Apt),
            _ => Err(Error::usage(format!("--install-nsys {s:?}: the only method is apt")).with_arg("--install-nsys")),
        }
    }
}

/// How many `--wait-timeout`s a command doing real work in the container may take ([`Options::work_deadline`]).
pub const WORK_TIMEOUTS: u64 = 10;
/// The copy-out's slowest accepted average rate, bytes per second ([`Options::copy_deadline`]): 1 MiB/s.
pub const COPY_MIN_RATE: u64 = 1 << 20;

/// Everything a run needs to know up front (the binary's flags, validated).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Options {
    pub namespace: String,
    /// `--pod`; None means find it with `selector`.
    pub pod: Option<String>,
    pub selector: Option<String>,
    /// `--container`: the engine's container (the ephemeral container's `targetContainerName`).
    pub container: Option<String>,
    /// The sidecar image (`--image`, else `$NSYSKIT_SIDECAR_IMAGE`, else [`DEFAULT_SIDECAR_IMAGE`]).
    pub image: String,
    /// `--allow-unpinned-image`: accept an image reference without `@sha256:<digest>`.
    pub allow_unpinned_image: bool,
    /// `--install-nsys apt`: install nsys in the sidecar before probing it (Path B).
    pub install_nsys: Option<InstallNsys>,
    pub profile: SecurityProfile,
    pub strategy: Strategy,
    pub process_match: String,
    pub duration_s: f64,
    /// nsys program in the sidecar (endpoint, attach) or in the engine's container (session).
    pub nsys: String,
    /// Scratch folder inside the container that runs nsys export/stats; created by pod-attach (it must not
    /// exist) and removed at cleanup. Its name starts with [`WORKDIR_PREFIX`].
    pub workdir: String,
    /// Local folder the copied-out files go to.
    pub out_dir: String,
    /// `--max-copy-bytes`: refuse a copy-out whose files total more (default: the sizes `stat` gave in the
    /// container; the tar stream is cut when it runs past them).
    pub max_copy_bytes: Option<u64>,
    /// `--bundle DIR`: copy the report and CSVs into `DIR/profiles/` and merge `kernel_profile` into
    /// `DIR/inference_perfbench_v1.json`.
    pub bundle: Option<String>,
    /// Engine HTTP port (endpoint strategy).
    pub port: u16,
    /// Session name (session strategy).
    pub session: String,
    /// Ephemeral container name.
    pub sidecar_name: String,
    /// The sidecar's `sleep` length in seconds; also how cleanup recognises that sleep.
    pub sidecar_sleep_s: u64,
    /// Seconds to wait for the sidecar to run and for the new report; also the deadline of every remote step
    /// ([`Options::step_deadline`] and the others derived from it). Positive.
    pub wait_timeout_s: u64,
    /// Base name of the capture files.
    pub capture_name: String,
}

/// A DNS-1123 label (namespace and container names): 1–63 of `a-z`, `0-9`, `-`, starting and ending
/// alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain (pod names): at most 253 characters, dot-separated labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The `sha256:<64 hex>` digest an image reference is pinned by; None when it has no `@`; an error when the
/// part after `@` is not a sha256 digest.
pub fn image_digest(image: &str) -> Result<Option<String>> {
    let Some((_, d)) = image.rsplit_once('@') else { return Ok(None) };
    let hex = d.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        Ok(Some(d.to_string()))
    } else {
        Err(Error::usage(format!(
            "--image {image:?}: `@{d}` is not a digest (expected @sha256: and 64 lowercase hex digits)"
        ))
        .with_arg("--image"))
    }
}

/// A `--workdir` pod-attach may create and later `rm -rf`: an absolute, normalised path (no `.`, `..` or empty
/// component) whose last component is `nsyskit-pod-attach-<id>` (letters, digits, `.`, `_`, `-`). `/tmp`, `/`,
/// a home folder or any folder not dedicated to pod-attach is refused.
pub fn check_workdir(w: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::usage(format!(
            "--workdir {w:?} refused: {why}. It must be a dedicated scratch folder, an absolute path whose last \
             component starts with {WORKDIR_PREFIX} (e.g. /tmp/{WORKDIR_PREFIX}run1): cleanup removes it with rm -rf"
        ))
        .with_arg("--workdir"))
    };
    if !w.starts_with('/') {
        return bad("not absolute");
    }
    let comps: Vec<&str> = w[1..].split('/').collect();
    if comps.iter().any(|c| c.is_empty() || *c == "." || *c == "..") {
        return bad("it has an empty, `.` or `..` component");
    }
    let last = comps.last().copied().unwrap_or("");
    match last.strip_prefix(WORKDIR_PREFIX) {
        Some(id) if !id.is_empty() && last.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) => Ok(()),
        _ => bad(&format!("its last component {last:?} is not {WORKDIR_PREFIX}<id>")),
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        if self.pod.is_none() && self.selector.is_none() {
            return Err(Error::usage("give --pod NAME or --selector LABELS to find the pod").with_arg("--pod"));
        }
        if !is_dns1123_label(&self.namespace) {
            return Err(Error::usage(format!(
                "--namespace {:?} is not a DNS-1123 label (1-63 of a-z, 0-9, '-', starting and ending alphanumeric)",
                self.namespace
            ))
            .with_arg("--namespace"));
        }
        if let Some(p) = &self.pod {
            if !is_dns1123_subdomain(p) {
                return Err(Error::usage(format!(
                    "--pod {p:?} is not a DNS-1123 subdomain (at most 253 of a-z, 0-9, '-', '.', each dot-separated part starting and ending alphanumeric)"
                ))
                .with_arg("--pod"));
            }
        }
        if let Some(c) = &self.container {
            if !is_dns1123_label(c) {
                return Err(Error::usage(format!("--container {c:?} is not a DNS-1123 label (1-63 of a-z, 0-9, '-')"))
                    .with_arg("--container"));
            }
        }
        if let Some(sel) = &self.selector {
            if sel.trim().is_empty() || sel.chars().any(|c| c.is_control()) {
                return Err(Error::usage(format!("--selector {sel:?} is empty or holds control characters"))
                    .with_arg("--selector"));
            }
        }
        regex::Regex::new(&self.process_match).map_err(|e| {
            Error::usage(format!("--process-match {:?} is not a valid regex: {e}", self.process_match))
                .with_arg("--process-match")
        })?;
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err(Error::usage(format!(
                "--duration must be a positive number of seconds, got {}",
                self.duration_s
            ))
            .with_arg("--duration"));
        }
        check_workdir(&self.workdir)?;
        for (flag, v) in [("--session", &self.session), ("--capture-name", &self.capture_name)] {
            if v.is_empty()
                || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
                || v.starts_with('.')
            {
                return Err(
                    Error::usage(format!("{flag} {v:?} must be letters, digits, '-', '_' or '.'")).with_arg(flag)
                );
            }
        }
        if !is_dns1123_label(&self.sidecar_name) {
            return Err(Error::usage(format!("sidecar name {:?} is not a DNS-1123 label", self.sidecar_name)));
        }
        if self.wait_timeout_s == 0 {
            return Err(Error::usage(
                "--wait-timeout must be a positive number of seconds (it bounds every remote step)",
            )
            .with_arg("--wait-timeout"));
        }
        if self.max_copy_bytes == Some(0) {
            return Err(Error::usage("--max-copy-bytes must be positive").with_arg("--max-copy-bytes"));
        }
        if let Some(b) = &self.bundle {
            if b.is_empty() {
                return Err(Error::usage("--bundle needs a folder").with_arg("--bundle"));
            }
        }
        if self.strategy != Strategy::Session {
            if self.image.trim().is_empty() {
                return Err(
                    Error::usage(format!("--image is empty (default {DEFAULT_SIDECAR_IMAGE})")).with_arg("--image")
                );
            }
            if image_digest(&self.image)?.is_none() && !self.allow_unpinned_image {
                return Err(Error::usage(format!(
                    "--image {:?} is not pinned by digest (@sha256:<64 hex>): a tag can move to other bytes between \
                     runs. Pin it (e.g. the default {DEFAULT_SIDECAR_IMAGE}), or pass --allow-unpinned-image to accept \
                     it (the digest the kubelet pulled is then recorded from the pod's status)",
                    self.image
                ))
                .with_arg("--image"));
            }
        } else if self.install_nsys.is_some() {
            return Err(Error::usage(
                "--install-nsys installs nsys in the sidecar; the session strategy adds no sidecar",
            )
            .with_arg("--install-nsys"));
        }
        Ok(())
    }
    /// The deadline of one API request or short command in the container (listings, probes, `mkdir`, the
    /// engine checks, `nsys start`, a port-forwarded POST, each cleanup step): `--wait-timeout`.
    pub fn step_deadline(&self) -> Duration {
        Duration::from_secs(self.wait_timeout_s)
    }
    /// The deadline of a command doing real work in the container (`apt-get`, `nsys export`, `nsys stats`,
    /// `nsys stop`, `sha256sum`, the report's `cp`): [`WORK_TIMEOUTS`] × `--wait-timeout`.
    pub fn work_deadline(&self) -> Duration {
        Duration::from_secs(self.wait_timeout_s.saturating_mul(WORK_TIMEOUTS))
    }
    /// The deadline of `nsys profile --attach-pid … --duration=D`: D plus [`Options::work_deadline`].
    pub fn attach_deadline(&self) -> Duration {
        Duration::from_secs(
            (self.duration_s.ceil().max(0.0) as u64).saturating_add(self.wait_timeout_s.saturating_mul(WORK_TIMEOUTS)),
        )
    }
    /// The copy-out's total deadline for `bytes` listed: `--wait-timeout` plus the bytes at [`COPY_MIN_RATE`]
    /// (a stream that trickles is stopped here); a stall of `--wait-timeout` without a byte stops it earlier.
    pub fn copy_deadline(&self, bytes: u64) -> Duration {
        Duration::from_secs(self.wait_timeout_s.saturating_add(bytes.div_ceil(COPY_MIN_RATE)))
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
#[schemars(rename = "Step")]
pub enum PlanStep {
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
    format!("/api/v1/namespaces/{}/pods/{}", path_segment(ns), path_segment(pod))
}

/// A path segment, percent-encoded (names are validated as DNS-1123 first, so this changes only the dry run's
/// `<POD>` placeholder, which is kept).
fn path_segment(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~<>".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
/// argv: the parent of the work folder (may exist).
pub fn argv_mkdir_parent(workdir: &str) -> Vec<String> {
    let parent = Path::new(workdir).parent().map(|p| p.to_string_lossy().to_string()).unwrap_or_else(|| "/".into());
    s(&["mkdir", "-p", "--", &parent])
}
/// argv: the work folder itself, which must not exist yet (so cleanup's `rm -rf` only removes what this run made).
pub fn argv_mkdir(workdir: &str) -> Vec<String> {
    s(&["mkdir", "-m", "0700", "--", workdir])
}
/// argv: the checked variables of the engine's environment (see [`ENV_CHECK_SCRIPT`]).
pub fn argv_env_check(pid: &str) -> Vec<String> {
    s(&["sh", "-c", ENV_CHECK_SCRIPT, "nsyskit-env-check", pid])
}
/// argv of `--install-nsys apt`, in order: update the package lists, install the package, print its version.
pub fn argv_install_nsys(how: InstallNsys) -> [Vec<String>; 3] {
    match how {
        InstallNsys::Apt => [
            s(&["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "update"]),
            s(&[
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "-q",
                "-y",
                "install",
                "--no-install-recommends",
                NSYS_APT_PACKAGE,
            ]),
            s(&["dpkg-query", "-W", "-f=${Version}", NSYS_APT_PACKAGE]),
        ],
    }
}

/// Percent-encoding of a query value (RFC 3986 unreserved characters kept).
pub fn url_encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
/// argv: list the `.nsys-rep` files of a folder (size, mtime, path) — used before and after the capture.
pub fn argv_list_reports(dir: &str) -> Vec<String> {
    s(&[
        "find",
        dir,
        "-maxdepth",
        "1",
        "-type",
        "f",
        "-name",
        "*.nsys-rep",
        "-exec",
        "stat",
        "-c",
        "%s\t%Y\t%n",
        "{}",
        "+",
    ])
}
pub fn argv_copy(src: &str, dst: &str) -> Vec<String> {
    s(&["cp", "--", src, dst])
}
pub fn argv_session_start(o: &Options) -> Vec<String> {
    vec![
        o.nsys.clone(),
        "start".into(),
        format!("--session={}", o.session),
        "-o".into(),
        format!("{}/{}", o.workdir, o.capture_name),
    ]
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
pub fn plan(o: &Options) -> Vec<PlanStep> {
    let pod = o.pod_or_placeholder();
    let base = pod_path(&o.namespace, pod);
    let mut v = Vec::new();
    match &o.pod {
        Some(_) => v.push(PlanStep::Api {
            method: "GET".into(),
            path: base.clone(),
            content_type: None,
            body: None,
            why: "find the pod".into(),
        }),
        None => v.push(PlanStep::Api {
            method: "GET".into(),
            path: format!(
                "/api/v1/namespaces/{}/pods?labelSelector={}",
                o.namespace,
                url_encode(o.selector.as_deref().unwrap_or(""))
            ),
            content_type: None,
            body: None,
            why: "find exactly one pod by selector".into(),
        }),
    }
    let sidecar = o.strategy != Strategy::Session;
    let tools_container = if sidecar { o.sidecar_name.clone() } else { o.container_or_placeholder().to_string() };
    let exec =
        |argv: Vec<String>, why: &str| PlanStep::Exec { container: tools_container.clone(), argv, why: why.into() };
    if sidecar {
        v.push(PlanStep::Api {
            method: "PATCH".into(),
            path: format!("{base}/ephemeralcontainers"),
            content_type: Some("application/strategic-merge-patch+json".into()),
            body: Some(ephemeral_patch(o)),
            why: "add the nsys sidecar sharing the engine's PID namespace".into(),
        });
        v.push(PlanStep::Api {
            method: "GET".into(),
            path: base.clone(),
            content_type: None,
            body: None,
            why: format!("poll until {} runs (up to {} s)", o.sidecar_name, o.wait_timeout_s),
        });
        v.push(PlanStep::Api {
            method: "GET".into(),
            path: format!(
                "/api/v1/namespaces/{}/events?fieldSelector={}",
                o.namespace,
                url_encode(&format!("involvedObject.name={pod}"))
            ),
            content_type: None,
            body: None,
            why: "only if the sidecar fails to run: the pod's events for the error".into(),
        });
    }
    if let Some(how) = o.install_nsys {
        let [u, i, q] = argv_install_nsys(how);
        v.push(exec(u, "--install-nsys apt: package lists"));
        v.push(exec(i, &format!("--install-nsys apt: install {NSYS_APT_PACKAGE} (a failure stops the run with apt's message; cleanup still runs)")));
        v.push(exec(q, "--install-nsys apt: record the installed version"));
    }
    v.push(exec(argv_proc_list(), "list /proc to find the engine PID"));
    v.push(exec(
        argv_env_check("<ENGINE_PID>"),
        "engine environment: CUDA_INJECTION64_PATH (a foreign CUDA injector blocks tracing), VLLM_TORCH_CUDA_PROFILE",
    ));
    for a in argv_nsys_probe(&o.nsys) {
        v.push(exec(a, "probe nsys capabilities"));
    }
    v.push(exec(argv_mkdir_parent(&o.workdir), "parent of the scratch folder"));
    v.push(exec(argv_mkdir(&o.workdir), "scratch folder (must not exist: cleanup removes only what this run made)"));
    match o.strategy {
        Strategy::Endpoint => {
            v.push(exec(argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"), "reports before the capture"));
            v.push(PlanStep::Http {
                method: "POST".into(),
                port: o.port,
                path: "/start_profile".into(),
                why: "engine calls cudaProfilerStart".into(),
            });
            v.push(PlanStep::Wait { seconds: o.duration_s, why: "capture window".into() });
            v.push(PlanStep::Http {
                method: "POST".into(),
                port: o.port,
                path: "/stop_profile".into(),
                why: "engine calls cudaProfilerStop; nsys writes a report".into(),
            });
            v.push(exec(
                argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"),
                "poll for the new report until its size is stable",
            ));
            v.push(exec(
                argv_copy("/proc/<NSYS_PID>/root/<NEW_REPORT>", &format!("{}/{}.nsys-rep", o.workdir, o.capture_name)),
                "take the report",
            ));
        }
        Strategy::Session => {
            v.push(exec(argv_session_start(o), "start the session's collection"));
            v.push(PlanStep::Wait { seconds: o.duration_s, why: "capture window".into() });
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
    v.push(exec(argv_tar(&o.workdir, &files), "copy out (tar stream over exec, written to disk as it arrives: only the listed regular files, each once, size and sha256 of the bytes written checked, capped)"));
    v.push(exec(argv_cleanup_workdir(&o.workdir), "cleanup: scratch folder"));
    if sidecar {
        v.push(exec(
            argv_end_sleep(o.sidecar_sleep_s),
            "cleanup: end the sidecar's sleep (ephemeral containers cannot be removed)",
        ));
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
        let bad = || {
            Error::input(format!(
                "/proc listing line {}: expected PID<TAB>PPID<TAB>CUDA<TAB>CMDLINE, got {line:?}",
                i + 1
            ))
        };
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
    let re = regex::Regex::new(pattern)
        .map_err(|e| Error::usage(format!("--process-match {pattern:?}: {e}")).with_arg("--process-match"))?;
    let by_pid: BTreeMap<u32, &ProcEntry> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let matched: Vec<u32> =
        procs.iter().filter(|p| !is_nsys_cmd(&p.cmdline) && re.is_match(&p.cmdline)).map(|p| p.pid).collect();
    let list = |pids: &mut dyn Iterator<Item = u32>| -> String {
        pids.filter_map(|p| by_pid.get(&p))
            .map(|p| {
                format!("  {} (ppid {}, cuda {}): {}", p.pid, p.ppid, if p.cuda { "yes" } else { "no" }, p.cmdline)
            })
            .collect::<Vec<_>>()
            .join("\n")
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
    let owners: Vec<u32> =
        set.iter().copied().filter(|p| by_pid.get(p).is_some_and(|e| e.cuda && !is_nsys_cmd(&e.cmdline))).collect();
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
        if o.starts_with('/') {
            Some(if dir.is_empty() { "/".into() } else { dir })
        } else {
            None
        }
    });
    let report_name = out.as_deref().and_then(|o| Path::new(o).file_name()).map(|f| {
        let f = f.to_string_lossy();
        if f.ends_with(".nsys-rep") {
            f.to_string()
        } else {
            format!("{f}.nsys-rep")
        }
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
            Some(ReportFile {
                size: f.next()?.parse().ok()?,
                mtime: f.next()?.parse().ok()?,
                path: f.next()?.to_string(),
            })
        })
        .collect()
}

/// Reports in `after` that are new or changed since `before`.
pub fn new_reports(before: &[ReportFile], after: &[ReportFile]) -> Vec<ReportFile> {
    after
        .iter()
        .filter(|a| !before.iter().any(|b| b.path == a.path && b.mtime == a.mtime && b.size == a.size))
        .cloned()
        .collect()
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
        let (h, p) = l
            .split_once("  ")
            .or_else(|| l.split_once(" *"))
            .ok_or_else(|| Error::input(format!("sha256sum output line {}: {l:?}", i + 1)))?;
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
        let keep =
            l.starts_with(capture_name) && (l.ends_with(".nsys-rep") || l.ends_with(".sqlite") || l.ends_with(".csv"));
        if keep {
            names.push(l.to_string());
        }
    }
    names.sort();
    if !names.iter().any(|n| n.ends_with(".nsys-rep")) {
        return Err(Error::env(format!(
            "no {capture_name}.nsys-rep in the work folder (listing: {:?})",
            listing.lines().collect::<Vec<_>>()
        )));
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

/// What the container said about one file before the copy: its size (`stat`) and sha256 (`sha256sum`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub size: u64,
    pub sha256: String,
}

/// The expected files of a copy-out, from the container's `stat` and `sha256sum` listings: every name must be in
/// both; `max_copy_bytes` refuses a total over it before any byte is copied.
pub fn expected_files(
    names: &[String],
    sizes: &BTreeMap<String, u64>,
    sums: &BTreeMap<String, String>,
    max_copy_bytes: Option<u64>,
) -> Result<BTreeMap<String, Expected>> {
    let mut m = BTreeMap::new();
    for n in names {
        let size = *sizes.get(n).ok_or_else(|| Error::env(format!("copy-out: no size for {n} from the container")))?;
        let sha256 =
            sums.get(n).ok_or_else(|| Error::env(format!("copy-out: no sha256 for {n} from the container")))?.clone();
        m.insert(n.clone(), Expected { size, sha256 });
    }
    let total: u64 = m.values().map(|e| e.size).sum();
    if let Some(cap) = max_copy_bytes {
        if total > cap {
            return Err(Error::env(format!(
                "copy-out refused: the container's files total {total} bytes ({}), over --max-copy-bytes {cap}",
                m.iter().map(|(n, e)| format!("{n} {}", e.size)).collect::<Vec<_>>().join(", ")
            ))
            .with_arg("--max-copy-bytes"));
        }
    }
    Ok(m)
}

/// Most bytes a tar stream of these files can take: headers, bodies rounded to 512, the end blocks and tar's
/// padding to its 10240-byte record.
pub fn tar_stream_cap(expected: &BTreeMap<String, Expected>) -> u64 {
    let body: u64 = expected.values().map(|e| 512 + e.size.div_ceil(512) * 512).sum();
    (body + 1024).div_ceil(10240) * 10240
}

#[derive(Debug)]
enum TarState {
    Header,
    Body,
    Pad,
    End,
}

struct CurFile {
    name: String,
    file: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    remaining: u64,
    size: u64,
}

/// Checks and writes a tar stream as it arrives (no file is held in memory): only regular files, each listed
/// in `expected` exactly once, with a plain name (no `/`, so no absolute path and no `..`), the expected size
/// (checked at the header, before its body is read) and the expected sha256 of the bytes written; header
/// checksums; nothing but zeros after the end-of-archive; at most `cap` bytes in all. Files go to a fresh
/// staging folder inside `dest` (created with `mkdir`, files with `O_CREAT|O_EXCL|O_NOFOLLOW`), and are renamed
/// into `dest` only by [`TarSink::commit`] when everything checked out: a rename replaces a symlink already in
/// `dest` instead of following it. On any error, or when dropped uncommitted, the staging folder and every file
/// in it are deleted.
pub struct TarSink {
    dest: PathBuf,
    staging: PathBuf,
    expected: BTreeMap<String, Expected>,
    cap: u64,
    received: u64,
    state: TarState,
    hdr: Vec<u8>,
    cur: Option<CurFile>,
    pad_left: u64,
    offset: u64,
    done: Vec<(String, u64, String)>,
    committed: bool,
    failed: Option<String>,
}

impl TarSink {
    /// `dest` is created when missing; `cap` None: [`tar_stream_cap`] of `expected`.
    pub fn new(dest: &Path, expected: BTreeMap<String, Expected>, cap: Option<u64>) -> Result<TarSink> {
        std::fs::create_dir_all(dest)
            .map_err(|e| Error::env(format!("{}: {e}", dest.display())).with_arg("--out-dir"))?;
        let id = format!(
            "{:x}{:x}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
        );
        let staging = dest.join(format!(".nsyskit-copy-{id}"));
        std::fs::create_dir(&staging)
            .map_err(|e| Error::env(format!("{}: {e}", staging.display())).with_arg("--out-dir"))?;
        let auto = tar_stream_cap(&expected);
        Ok(TarSink {
            dest: dest.to_path_buf(),
            staging,
            cap: cap.map(|c| c.min(auto)).unwrap_or(auto),
            expected,
            received: 0,
            state: TarState::Header,
            hdr: Vec::with_capacity(512),
            cur: None,
            pad_left: 0,
            offset: 0,
            done: Vec::new(),
            committed: false,
            failed: None,
        })
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    fn fail(&mut self, msg: String) -> Error {
        self.cur = None;
        let _ = std::fs::remove_dir_all(&self.staging);
        self.failed = Some(msg.clone());
        Error::input(msg)
    }

    /// The next piece of the stream.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<()> {
        if let Some(m) = &self.failed {
            return Err(Error::input(m.clone()));
        }
        self.received += data.len() as u64;
        if self.received > self.cap {
            let msg = format!(
                "tar stream runs past {} bytes (the listed files' sizes plus tar's headers and padding{}): stopped, nothing kept",
                self.cap,
                if self.cap < tar_stream_cap(&self.expected) { ", capped by --max-copy-bytes" } else { "" }
            );
            return Err(self.fail(msg));
        }
        while !data.is_empty() {
            match self.state {
                TarState::Header => {
                    let need = 512 - self.hdr.len();
                    let take = need.min(data.len());
                    self.hdr.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.hdr.len() == 512 {
                        let h = std::mem::take(&mut self.hdr);
                        if let Err(m) = self.header(&h) {
                            return Err(self.fail(m));
                        }
                        self.offset += 512;
                        self.hdr = Vec::with_capacity(512);
                    }
                }
                TarState::Body => {
                    let cur = self.cur.as_mut().expect("a file in Body");
                    let take = (cur.remaining.min(data.len() as u64)) as usize;
                    let chunk = &data[..take];
                    cur.hasher.update(chunk);
                    if let Err(e) = std::io::Write::write_all(&mut cur.file, chunk) {
                        let msg = format!("writing {}: {e}", cur.name);
                        return Err(self.fail(msg));
                    }
                    cur.remaining -= take as u64;
                    data = &data[take..];
                    self.offset += take as u64;
                    if cur.remaining == 0 {
                        if let Err(m) = self.finish_file() {
                            return Err(self.fail(m));
                        }
                    }
                }
                TarState::Pad => {
                    let take = (self.pad_left.min(data.len() as u64)) as usize;
                    self.pad_left -= take as u64;
                    data = &data[take..];
                    self.offset += take as u64;
                    if self.pad_left == 0 {
                        self.state = TarState::Header;
                    }
                }
                TarState::End => {
                    if data.iter().any(|&b| b != 0) {
                        let msg = format!(
                            "tar stream: data after the end-of-archive at byte {}: refused (unexpected extra content)",
                            self.offset
                        );
                        return Err(self.fail(msg));
                    }
                    self.offset += data.len() as u64;
                    data = &[];
                }
            }
        }
        Ok(())
    }

    fn header(&mut self, h: &[u8]) -> std::result::Result<(), String> {
        let off = self.offset;
        if h.iter().all(|&b| b == 0) {
            self.state = TarState::End;
            return Ok(());
        }
        let field = |a: usize, b: usize| -> String {
            let f = &h[a..b];
            let end = f.iter().position(|&c| c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).to_string()
        };
        let stored = u64::from_str_radix(field(148, 156).trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| format!("tar header at byte {off}: bad checksum field"))?;
        let sum: u64 = h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { b as u64 }).sum();
        if sum != stored {
            return Err(format!("tar header at byte {off}: checksum mismatch (stored {stored}, computed {sum})"));
        }
        let name = field(0, 100);
        let prefix = if &h[257..262] == b"ustar" { field(345, 500) } else { String::new() };
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let size_s = field(124, 136);
        let size = u64::from_str_radix(size_s.trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| format!("tar entry {path:?} at byte {off}: bad size field {size_s:?}"))?;
        let typ = h[156];
        if path.starts_with('/') {
            return Err(format!("tar entry {path:?} at byte {off}: absolute path rejected"));
        }
        if Path::new(&path)
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)))
        {
            return Err(format!("tar entry {path:?} at byte {off}: `..` component rejected"));
        }
        if !matches!(typ, b'0' | 0) {
            let what = match typ {
                b'1' => "a hard link",
                b'2' => "a symbolic link",
                b'5' => "a folder",
                b'3' | b'4' | b'6' => "a device or FIFO",
                _ => "not a regular file",
            };
            return Err(format!("tar entry {path:?} at byte {off}: type {:?} ({what}) rejected: only the listed regular files are copied", typ as char));
        }
        if path.contains('/') || path.is_empty() || path == "." {
            return Err(format!(
                "tar entry {path:?} at byte {off}: not a plain file name of the work folder: rejected"
            ));
        }
        let Some(exp) = self.expected.get(&path).cloned() else {
            return Err(format!(
                "tar entry {path:?} at byte {off}: unexpected extra file (asked for {}): rejected",
                self.expected.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        };
        if self.done.iter().any(|(n, _, _)| *n == path) {
            return Err(format!(
                "tar entry {path:?} at byte {off}: the same file a second time: rejected (nothing kept)"
            ));
        }
        if size != exp.size {
            return Err(format!("tar entry {path:?} at byte {off}: announces {size} bytes, the container's stat said {}: rejected before reading it", exp.size));
        }
        use std::os::unix::fs::OpenOptionsExt;
        let target = self.staging.join(&path);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&target)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        self.cur = Some(CurFile {
            name: path,
            file: std::io::BufWriter::with_capacity(256 * 1024, file),
            hasher: Sha256::new(),
            remaining: size,
            size,
        });
        self.state = TarState::Body;
        if size == 0 {
            self.finish_file()?;
        }
        Ok(())
    }

    fn finish_file(&mut self) -> std::result::Result<(), String> {
        let cur = self.cur.take().expect("a file to finish");
        let CurFile { name, mut file, hasher, size, .. } = cur;
        std::io::Write::flush(&mut file).map_err(|e| format!("writing {name}: {e}"))?;
        drop(file);
        let got: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let exp = &self.expected[&name];
        if got != exp.sha256 {
            let _ = std::fs::remove_file(self.staging.join(&name));
            return Err(format!(
                "copy-out: {name} differs: the container's sha256 {}, the {size} bytes written here {got}: deleted",
                exp.sha256
            ));
        }
        self.done.push((name, size, got));
        self.pad_left = (512 - size % 512) % 512;
        self.state = if self.pad_left == 0 { TarState::Header } else { TarState::Pad };
        Ok(())
    }

    /// The stream ended: it must have reached its end-of-archive with every expected file; then the files are
    /// renamed into `dest`. Returns them in `expected` order.
    pub fn commit(mut self) -> Result<Vec<CopiedFile>> {
        if let Some(m) = &self.failed {
            return Err(Error::input(m.clone()));
        }
        if !matches!(self.state, TarState::End) {
            let msg = format!(
                "tar stream ended at byte {} before its end-of-archive blocks{}: the copy was interrupted; nothing kept",
                self.received,
                self.cur.as_ref().map(|c| format!(" ({} announced {} bytes, {} missing)", c.name, c.size, c.remaining)).unwrap_or_default()
            );
            return Err(self.fail(msg));
        }
        let missing: Vec<String> =
            self.expected.keys().filter(|n| !self.done.iter().any(|(d, _, _)| d == *n)).cloned().collect();
        if !missing.is_empty() {
            let msg = format!("copy-out: {} missing from the tar stream; nothing kept", missing.join(", "));
            return Err(self.fail(msg));
        }
        let mut out = Vec::new();
        for (name, size, sha) in std::mem::take(&mut self.done) {
            let to = self.dest.join(&name);
            if let Err(e) = std::fs::rename(self.staging.join(&name), &to) {
                let msg = format!("{}: {e}", to.display());
                return Err(self.fail(msg));
            }
            out.push(CopiedFile { name, path: to.to_string_lossy().to_string(), size, sha256: sha });
        }
        let _ = std::fs::remove_dir(&self.staging);
        self.committed = true;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

impl Drop for TarSink {
    fn drop(&mut self) {
        if !self.committed {
            self.cur = None;
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Copy a local file into `dir/name` through a staging file (created exclusively, never following a link),
/// checking the sha256 of the bytes written; a rename puts it in place (replacing, not following, a link).
pub fn copy_verified(src: &Path, dir: &Path, name: &str, sha256: &str) -> Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.nsyskit-{:x}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let res = (|| -> std::io::Result<(u64, String)> {
        let mut r = std::fs::File::open(src)?;
        let f = std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            let k = std::io::Read::read(&mut r, &mut buf)?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            std::io::Write::write_all(&mut w, &buf[..k])?;
            n += k as u64;
        }
        std::io::Write::flush(&mut w)?;
        Ok((n, h.finalize().iter().map(|b| format!("{b:02x}")).collect()))
    })();
    match res {
        Ok((n, got)) if got == sha256 => {
            std::fs::rename(&tmp, dir.join(name))
                .map_err(|e| Error::env(format!("{}: {e}", dir.join(name).display())))?;
            Ok(n)
        }
        Ok((_, got)) => {
            let _ = std::fs::remove_file(&tmp);
            Err(Error::env(format!(
                "{}: copied bytes have sha256 {got}, expected {sha256}: deleted",
                dir.join(name).display()
            )))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(Error::env(format!("copying {} to {}: {e}", src.display(), dir.join(name).display())))
        }
    }
}

/// What pod-attach read of the engine's environment and command line before the capture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EngineEnv {
    pub pid: u32,
    /// `/proc/PID/environ` could be read (it needs ptrace access: `--profile general` or `sysadmin`).
    pub readable: bool,
    /// `CUDA_INJECTION64_PATH` in the engine's environment, when set: only one CUDA injector can load.
    pub cuda_injection64_path: Option<String>,
    /// That value is nsys's own injection library (`libToolsInjection…`): the engine runs under an nsys that
    /// traces CUDA.
    pub nsys_injection: bool,
    /// `VLLM_TORCH_CUDA_PROFILE` (older vLLM's switch to the CUDA profiler for `/start_profile`), when set.
    pub vllm_torch_cuda_profile: Option<String>,
    /// The engine's command line or one of its ancestors' looks like vLLM.
    pub vllm: bool,
    /// One of those command lines sets vLLM's `--profiler-config.profiler=cuda` (or `--profiler-config`
    /// JSON with `"profiler": "cuda"`).
    pub profiler_config_cuda: bool,
}

/// Parse the output of [`ENV_CHECK_SCRIPT`] for process `pid`.
pub fn parse_env_check(pid: u32, text: &str) -> EngineEnv {
    let mut e = EngineEnv { pid, readable: !text.lines().any(|l| l.trim() == "unreadable"), ..Default::default() };
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("CUDA_INJECTION64_PATH=") {
            e.cuda_injection64_path = Some(v.to_string());
        } else if let Some(v) = l.strip_prefix("VLLM_TORCH_CUDA_PROFILE=") {
            e.vllm_torch_cuda_profile = Some(v.to_string());
        }
    }
    e.nsys_injection = e
        .cuda_injection64_path
        .as_deref()
        .is_some_and(|p| p.rsplit('/').next().unwrap_or(p).starts_with("libToolsInjection"));
    e
}

/// The command lines of process `pid` and its ancestors, up to (not including) its nearest nsys ancestor.
pub fn engine_chain(procs: &[ProcEntry], pid: u32) -> Vec<String> {
    let by_pid: BTreeMap<u32, &ProcEntry> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut out = Vec::new();
    let mut cur = by_pid.get(&pid).copied();
    while let Some(p) = cur {
        if is_nsys_cmd(&p.cmdline) || out.len() > 64 {
            break;
        }
        out.push(p.cmdline.clone());
        if p.ppid == p.pid {
            break;
        }
        cur = by_pid.get(&p.ppid).copied();
    }
    out
}

/// Fill the command-line facts of `env` from the engine's chain of command lines ([`engine_chain`]).
pub fn note_cmdlines(env: &mut EngineEnv, chain: &[String]) {
    let vllm = regex::Regex::new(r"(^|[\s/])vllm(\s|$)|vllm\.entrypoints|VLLM::").unwrap();
    let flag = regex::Regex::new(
        r#"--profiler-config\.profiler(=|\s+)cuda(\s|$)|--profiler-config(=|\s+)\{[^}]*"?profiler"?\s*:\s*"?cuda\b"#,
    )
    .unwrap();
    env.vllm = chain.iter().any(|c| vllm.is_match(c));
    env.profiler_config_cuda = chain.iter().any(|c| flag.is_match(c));
}

/// Before a capture: refuse (with the reason) what cannot give CUDA data, warn where the strategy does not
/// need a fact or it could not be checked. Returns the warnings.
///
/// * `CUDA_INJECTION64_PATH`: nsys traces CUDA by setting it to its own `libToolsInjection64.so` (measured with
///   nsys 2023.4: set with `--trace=cuda` or `--capture-range=cudaProfilerApi`; an inherited value is replaced,
///   and with `--trace=osrt` alone removed). Another value (set by a zymtrace-style launcher between nsys and the
///   engine, or with no nsys at all) takes the one injection slot: refused for every strategy. For attach any value is refused (the
///   slot is taken). Absent under endpoint/session: a warning (that nsys records no CUDA).
/// * endpoint on a vLLM engine: `/start_profile` calls `cudaProfilerStart` only with
///   `--profiler-config.profiler=cuda` (or `VLLM_TORCH_CUDA_PROFILE=1`): refused without it. Not a vLLM
///   command line: a warning (cannot be checked).
pub fn check_engine_env(strategy: Strategy, env: &EngineEnv) -> Result<Vec<String>> {
    let mut w = Vec::new();
    let pid = env.pid;
    if !env.readable {
        w.push(format!(
            "cannot read /proc/{pid}/environ (ptrace access: --profile general or sysadmin): CUDA_INJECTION64_PATH not checked"
        ));
    }
    match (&env.cuda_injection64_path, strategy) {
        (Some(v), Strategy::Attach) => {
            return Err(Error::env(format!(
                "strategy attach refused: engine PID {pid} already has CUDA_INJECTION64_PATH={v} in its environment{}; \
                 only one CUDA injector can load, so nsys cannot add CUDA tracing. Fix: {}",
                if env.nsys_injection { " (nsys's own: the engine already runs under nsys)" } else { " (a foreign CUDA injector, e.g. zymtrace)" },
                if env.nsys_injection { "use --strategy endpoint or session" } else { "restart the engine without that injector (or profile a pod that has none)" }
            )))
        }
        (Some(v), _) if !env.nsys_injection => {
            return Err(Error::env(format!(
                "strategy {} refused: engine PID {pid} has CUDA_INJECTION64_PATH={v}, not nsys's injection library \
                 (libToolsInjection64.so): a foreign CUDA injector (e.g. zymtrace) holds the one injection slot, so \
                 nsys records no CUDA activity. Fix: restart the engine without it",
                strategy.name()
            )))
        }
        (None, Strategy::Endpoint | Strategy::Session) if env.readable => w.push(format!(
            "engine PID {pid} has no CUDA_INJECTION64_PATH: the nsys it runs under does not trace CUDA (its --trace lacks \
             cuda), so the capture holds no CUDA kernels"
        )),
        _ => {}
    }
    if strategy == Strategy::Endpoint {
        let env_switch =
            env.vllm_torch_cuda_profile.as_deref().is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        if env.vllm && !env.profiler_config_cuda && !env_switch {
            return Err(Error::env(format!(
                "strategy endpoint refused: the vLLM engine (PID {pid}) was started without --profiler-config.profiler=cuda, \
                 so POST /start_profile never calls cudaProfilerStart and nsys's cudaProfilerApi range never opens. Fix: \
                 restart vLLM with --profiler-config.profiler=cuda (under the same nsys), or use --strategy session"
            )));
        }
        if !env.vllm {
            w.push(format!(
                "engine PID {pid} is not a vLLM command line: cannot check that its /start_profile calls cudaProfilerStart \
                 (vLLM needs --profiler-config.profiler=cuda)"
            ));
        }
    }
    Ok(w)
}

/// `--install-nsys`: what was installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NsysInstall {
    pub method: InstallNsys,
    pub package: String,
    /// `dpkg-query -W -f=${Version}` after the install.
    pub version: String,
}

/// The seed recipe's `kernel_profile` (step 5), as `--bundle` merges it: paths relative to the bundle folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelProfile {
    /// UTC (RFC 3339) when the capture started (the `/start_profile` POST, `nsys start`, or the attach), not a
    /// file's mtime.
    pub captured_at: String,
    /// `profiles/capture.nsys-rep`.
    pub nsys_rep_path: String,
    /// `profiles/gpu_kern_sum.csv` (`nsys stats` cuda_gpu_kern_sum), when nsys wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_csv_path: Option<String>,
    /// `profiles/cuda_api_sum.csv`, when nsys wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_api_csv_path: Option<String>,
    /// The capture window asked for (`--duration`, default 120 s).
    pub duration_s: f64,
    /// The engine PID in the pod's PID namespace (the CUDA-owning process pod-attach chose).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm_pid: Option<u32>,
    /// The sidecar image reference as used (with its digest when pinned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_image: Option<String>,
    /// `sha256:…` of the sidecar image: from the reference, else from the pod's status (what the kubelet pulled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_image_digest: Option<String>,
    /// `ephemeral-container-share-processes` (endpoint, attach: the API form of the seed's
    /// `kubectl debug --share-processes --target`) or `nsys-session-in-engine-container` (session).
    pub method: String,
    /// `endpoint`, `session` or `attach`.
    pub strategy: Strategy,
    /// From `profiles/gpu_kern_sum.csv` (kern-csv-to-json's `top_kernels`: name, instances, times in ns, share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_kernels: Option<Vec<crate::kern_csv_to_json::StatsTopKernel>>,
}

/// What `--bundle` wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BundleOut {
    /// The bundle folder as given.
    pub dir: String,
    /// The bundle file merged into (`DIR/inference_perfbench_v1.json`).
    pub file: String,
    /// The files copied into `DIR/profiles/` (path relative to the bundle folder, size, sha256 of the bytes written).
    pub profiles: Vec<CopiedFile>,
}

/// The bundle's copies of the copied-out files: (name in the out folder, name in `profiles/`).
fn bundle_names(capture_name: &str) -> [(String, &'static str); 3] {
    [
        (format!("{capture_name}.nsys-rep"), "capture.nsys-rep"),
        (format!("{capture_name}_cuda_gpu_kern_sum.csv"), "gpu_kern_sum.csv"),
        (format!("{capture_name}_cuda_api_sum.csv"), "cuda_api_sum.csv"),
    ]
}

/// `--bundle DIR`: copy the report and the two CSVs into `DIR/profiles/` (sha256 of the bytes written checked,
/// links not followed), fill `doc.kernel_profile` and `doc.bundle`, and merge into `DIR/inference_perfbench_v1.json`
/// through bundle-merge ([`crate::bundle_merge::run`]: the kernel CSV's `nsyskit.stats/v1` document, then this
/// document, whose `kernel_profile` members go to the bundle's `kernel_profile`); everything else in the bundle
/// stays byte-identical.
pub fn write_bundle(dir: &Path, doc: &mut PodAttachDoc, o: &Options) -> Result<()> {
    let prov = doc.provenance.clone().ok_or_else(|| Error::env("--bundle: no capture to put in the bundle"))?;
    let profiles = dir.join("profiles");
    for p in [dir, profiles.as_path()] {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.file_type().is_symlink() || !m.is_dir() {
                return Err(Error::input(format!(
                    "--bundle: {} is {}, not a folder: refused",
                    p.display(),
                    if m.file_type().is_symlink() { "a symbolic link" } else { "a file" }
                ))
                .with_arg("--bundle"));
            }
        }
    }
    std::fs::create_dir_all(&profiles)
        .map_err(|e| Error::env(format!("{}: {e}", profiles.display())).with_arg("--bundle"))?;
    let mut copied = Vec::new();
    for (src, dst) in bundle_names(&o.capture_name) {
        let Some(f) = doc.files.iter().find(|f| f.name == src) else { continue };
        let n = copy_verified(Path::new(&f.path), &profiles, dst, &f.sha256)?;
        copied.push(CopiedFile {
            name: dst.to_string(),
            path: format!("profiles/{dst}"),
            size: n,
            sha256: f.sha256.clone(),
        });
    }
    if !copied.iter().any(|c| c.name == "capture.nsys-rep") {
        return Err(Error::env("--bundle: the report was not copied out"));
    }
    let captured_at =
        prov.captured_at.clone().unwrap_or_else(|| crate::contract::rfc3339_utc(std::time::SystemTime::now()));
    let mut stats = None;
    let mut top = None;
    if copied.iter().any(|c| c.name == "gpu_kern_sum.csv") {
        let csv = profiles.join("gpu_kern_sum.csv");
        let bytes = std::fs::read(&csv).map_err(|e| Error::env(format!("{}: {e}", csv.display())))?;
        let opts =
            crate::kern_csv_to_json::KernCsvOptions { captured_at: Some(captured_at.clone()), ..Default::default() };
        match crate::kern_csv_to_json::convert(&bytes, "profiles/gpu_kern_sum.csv", Some(&csv), None, &opts) {
            Ok(s) if s.status == "ok" => {
                top = s.top_kernels.clone();
                stats = Some(s);
            }
            Ok(s) => doc.warnings.push(format!(
                "--bundle: nsys stats skipped cuda_gpu_kern_sum ({}): no top_kernels",
                s.skipped_reason.unwrap_or_default()
            )),
            Err(e) => doc.warnings.push(format!(
                "--bundle: profiles/gpu_kern_sum.csv ({} bytes) not converted: {}: no top_kernels",
                bytes.len(),
                e.message
            )),
        }
    } else {
        doc.warnings
            .push("--bundle: nsys stats wrote no cuda_gpu_kern_sum CSV: no summary_csv_path, no top_kernels".into());
    }
    let sidecar = doc.strategy != Strategy::Session;
    doc.kernel_profile = Some(KernelProfile {
        captured_at,
        nsys_rep_path: "profiles/capture.nsys-rep".into(),
        summary_csv_path: copied
            .iter()
            .any(|c| c.name == "gpu_kern_sum.csv")
            .then(|| "profiles/gpu_kern_sum.csv".into()),
        cuda_api_csv_path: copied
            .iter()
            .any(|c| c.name == "cuda_api_sum.csv")
            .then(|| "profiles/cuda_api_sum.csv".into()),
        duration_s: o.duration_s,
        vllm_pid: prov.engine.as_ref().map(|e| e.pid),
        sidecar_image: prov.sidecar_image.clone(),
        sidecar_image_digest: prov.sidecar_image_digest.clone(),
        method: if sidecar { "ephemeral-container-share-processes" } else { "nsys-session-in-engine-container" }.into(),
        strategy: doc.strategy,
        top_kernels: top,
    });
    let file = dir.join(BUNDLE_FILE);
    doc.bundle = Some(BundleOut { dir: dir.display().to_string(), file: file.display().to_string(), profiles: copied });
    let mut docs = Vec::new();
    if let Some(s) = &stats {
        docs.push(crate::bundle_merge::DocIn {
            value: serde_json::to_value(s).map_err(|e| Error::env(e.to_string()))?,
            source: "profiles/gpu_kern_sum.csv".into(),
            line: 1,
        });
    }
    docs.push(crate::bundle_merge::DocIn {
        value: serde_json::to_value(&*doc).map_err(|e| Error::env(e.to_string()))?,
        source: "pod-attach".into(),
        line: 1,
    });
    crate::bundle_merge::run(&file, &docs, crate::bundle_merge::Mode::Write).map_err(|e| e.context("--bundle"))?;
    Ok(())
}

/// pod-attach's flags as plain values, with the binary's defaults ([`Flags::default`]); both adapters (the
/// binary's clap arguments, the Nushell command's signature) fill one and call [`options`]. `image` None: the
/// adapter found neither `--image` nor `$NSYSKIT_SIDECAR_IMAGE`, so [`DEFAULT_SIDECAR_IMAGE`] is used.
#[derive(Debug, Clone, PartialEq)]
pub struct Flags {
    pub namespace: String,
    pub pod: Option<String>,
    pub selector: Option<String>,
    pub container: Option<String>,
    pub image: Option<String>,
    pub allow_unpinned_image: bool,
    pub install_nsys: Option<String>,
    pub profile: String,
    pub strategy: String,
    pub process_match: String,
    pub duration: f64,
    pub nsys: String,
    pub workdir: Option<String>,
    pub out_dir: String,
    pub max_copy_bytes: Option<u64>,
    pub bundle: Option<String>,
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
            allow_unpinned_image: false,
            install_nsys: None,
            profile: "general".into(),
            strategy: "endpoint".into(),
            process_match: DEFAULT_PROCESS_MATCH.into(),
            duration: DEFAULT_DURATION_S,
            nsys: "nsys".into(),
            workdir: None,
            out_dir: "pod-attach-out".into(),
            max_copy_bytes: None,
            bundle: None,
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
        std::process::id() as u64
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
                & 0xffff_ffff)
    );
    let o = Options {
        namespace: f.namespace.clone(),
        pod: f.pod.clone(),
        selector: f.selector.clone(),
        container: f.container.clone(),
        image: f.image.clone().unwrap_or_else(|| DEFAULT_SIDECAR_IMAGE.to_string()),
        allow_unpinned_image: f.allow_unpinned_image,
        install_nsys: f.install_nsys.as_deref().map(InstallNsys::parse).transpose()?,
        profile: SecurityProfile::parse(&f.profile)?,
        strategy: Strategy::parse(&f.strategy)?,
        process_match: f.process_match.clone(),
        duration_s: f.duration,
        nsys: f.nsys.clone(),
        workdir: f.workdir.clone().unwrap_or_else(|| format!("/tmp/{WORKDIR_PREFIX}{id}")),
        out_dir: f.out_dir.clone(),
        max_copy_bytes: f.max_copy_bytes,
        bundle: f.bundle.clone(),
        port: f.port,
        session: f.session.clone(),
        sidecar_name: format!("nsyskit-{id}"),
        sidecar_sleep_s: (f.duration.ceil().max(0.0) as u64)
            + 3 * f.wait_timeout
            + 600
            + (std::process::id() as u64 % 997),
        wait_timeout_s: f.wait_timeout,
        capture_name: f.capture_name.clone(),
    };
    o.validate()?;
    Ok(o)
}

/// How the copied capture is gated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// No gate: the verdict is `NOT_RUN` with this reason.
    Skip(String),
    /// Run this `gate-check` program (`REPORT --sqlite SQLITE --compact`) and read its exit code and document
    /// (`--gate-check PROGRAM`: an operator pins the gate they trust).
    Program(PathBuf),
    /// Call [`crate::gate_check::run`] in this process: the default of the binary and of the Nushell command, as in
    /// serve-capture.
    Library,
}

fn retry_ids(doc: Option<&serde_json::Value>) -> Vec<String> {
    doc.and_then(|d| d.get("retry"))
        .and_then(|r| r.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Gate the copied files (`REPORT`, with its export `SQLITE`): `PASS`, `RETRY`, else `NOT_RUN` with why.
pub fn run_gate(gate: &Gate, report: &Path, sqlite: &Path) -> PodGateResult {
    match gate {
        Gate::Skip(reason) => PodGateResult { verdict: "NOT_RUN".into(), reason: reason.clone(), document: None },
        Gate::Program(bin) => run_gate_program(bin, report, sqlite),
        Gate::Library => {
            let opts = crate::gate_check::GateOptions {
                capture: report.to_path_buf(),
                sqlite: Some(sqlite.to_path_buf()),
                ..Default::default()
            };
            match crate::gate_check::run(&opts) {
                Ok(doc) => {
                    let code = doc.exit_code();
                    let doc = serde_json::to_value(&doc).ok();
                    let (verdict, reason) = if code == 0 {
                        ("PASS", "gate-check (library) said PASS".to_string())
                    } else {
                        (
                            "RETRY",
                            format!(
                                "gate-check (library): gates {} said retry (see document.gates)",
                                retry_ids(doc.as_ref()).join(",")
                            ),
                        )
                    };
                    PodGateResult { verdict: verdict.into(), reason, document: doc }
                }
                Err(e) => PodGateResult {
                    verdict: "NOT_RUN".into(),
                    reason: format!("gate-check (library): {}", e.message),
                    document: None,
                },
            }
        }
    }
}

fn run_gate_program(bin: &Path, report: &Path, sqlite: &Path) -> PodGateResult {
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
                "NOT_RUN" => format!(
                    "{} exited {:?}: {}",
                    bin.display(),
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                "RETRY" => {
                    format!("{} exited 1: gates {} said retry (see document.gates)", bin.display(), retry.join(","))
                }
                _ => format!("{} exited 0", bin.display()),
            };
            PodGateResult { verdict: verdict.into(), reason, document: doc }
        }
        Err(e) => {
            PodGateResult { verdict: "NOT_RUN".into(), reason: format!("{}: {e}", bin.display()), document: None }
        }
    }
}

/// The result of `gate-check` on the copied-out capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "GateResult")]
pub struct PodGateResult {
    /// `PASS`, `RETRY`, or `NOT_RUN` with the reason in `reason`.
    pub verdict: String,
    pub reason: String,
    /// The gate document, when it ran.
    pub document: Option<serde_json::Value>,
}

/// Where the capture came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Provenance")]
pub struct PodProvenance {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: Option<String>,
    pub node: Option<String>,
    pub container: String,
    pub container_image: Option<String>,
    /// The ephemeral container (endpoint/attach strategies).
    pub sidecar: Option<String>,
    pub sidecar_image: Option<String>,
    /// `sha256:…` of the sidecar image: from `--image` when pinned, else from the pod's
    /// `ephemeralContainerStatuses[].imageID` (`--allow-unpinned-image`).
    pub sidecar_image_digest: Option<String>,
    /// The sidecar's `imageID` in the pod's status (what the kubelet pulled), when reported.
    pub sidecar_image_id: Option<String>,
    /// `--install-nsys`: the package and version installed in the sidecar.
    pub nsys_install: Option<NsysInstall>,
    pub nsys: NsysCaps,
    pub engine: Option<EngineChoice>,
    /// What was checked of the engine's environment and command line before the capture.
    pub engine_env: Option<EngineEnv>,
    /// UTC (RFC 3339) when the capture started.
    pub captured_at: Option<String>,
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
    pub plan: Vec<PlanStep>,
    pub provenance: Option<PodProvenance>,
    pub out_dir: Option<String>,
    pub files: Vec<CopiedFile>,
    pub gate: Option<PodGateResult>,
    /// `--bundle`: the seed's `kernel_profile`, as merged into the bundle.
    pub kernel_profile: Option<KernelProfile>,
    /// `--bundle`: where it was written.
    pub bundle: Option<BundleOut>,
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
        warnings.push(
            "without --pod and --container the plan shows <POD>/<CONTAINER>: a run finds them through the API".into(),
        );
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
        kernel_profile: None,
        bundle: o.bundle.as_ref().map(|d| BundleOut {
            dir: d.clone(),
            file: Path::new(d).join(BUNDLE_FILE).display().to_string(),
            profiles: vec![],
        }),
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
            image: DEFAULT_SIDECAR_IMAGE.into(),
            allow_unpinned_image: false,
            install_nsys: None,
            profile: SecurityProfile::General,
            strategy: Strategy::Endpoint,
            process_match: DEFAULT_PROCESS_MATCH.into(),
            duration_s: 5.0,
            nsys: "nsys".into(),
            workdir: "/tmp/nsyskit-pod-attach-x".into(),
            out_dir: "out".into(),
            max_copy_bytes: None,
            bundle: None,
            port: 8000,
            session: "s".into(),
            sidecar_name: "nsyskit-x".into(),
            sidecar_sleep_s: 3600,
            wait_timeout_s: 60,
            capture_name: "capture".into(),
        }
    }

    #[test]
    fn every_remote_step_has_a_deadline_from_the_wait_timeout() {
        let mut o = opts();
        o.duration_s = 2.5;
        assert_eq!(o.step_deadline(), Duration::from_secs(60));
        assert_eq!(o.work_deadline(), Duration::from_secs(600));
        assert_eq!(o.attach_deadline(), Duration::from_secs(603));
        assert_eq!(o.copy_deadline(0), Duration::from_secs(60));
        assert_eq!(o.copy_deadline(1_436_765), Duration::from_secs(62));
        o.wait_timeout_s = u64::MAX;
        assert_eq!(o.copy_deadline(u64::MAX), Duration::from_secs(u64::MAX));
        o.wait_timeout_s = 0;
        let e = o.validate().unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("--wait-timeout must be a positive"), "{}", e.message);
    }

    fn real_help(v: &str, f: &str) -> String {
        std::fs::read_to_string(format!("{}/fixtures/nsys-help/{v}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn real_nsys_help_texts() {
        let c23 =
            NsysCaps::from_help(&real_help("2023.4.4", "version.txt"), "", &real_help("2023.4.4", "profile-help.txt"));
        assert!(c23.capture_range && c23.capture_range_end && !c23.attach_pid, "{c23:?}");
        assert_eq!(c23.version.as_deref(), Some("2023.4.4.54-234433681190v0"));
        let c25 = NsysCaps::from_help("", "", &real_help("2025.3.1", "profile-help.txt"));
        assert!(c25.capture_range && c25.capture_range_end && !c25.attach_pid, "{c25:?}");
        assert!(choose_strategy(Strategy::Attach, &c25).is_err());
    }

    #[test]
    fn attach_refused_without_flag_and_endpoint_allowed() {
        let caps = NsysCaps::from_help(
            "NVIDIA Nsight Systems version 2023.4.4",
            "\tlaunch   Launch\n\tstart   Start\n\tstop   Stop\n",
            &real_help("2023.4.4", "profile-help.txt"),
        );
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
            PlanStep::Api { method, path, body, .. } if method == "PATCH" => {
                Some((path.clone(), body.clone().unwrap()))
            }
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
            if let PlanStep::Exec { argv, .. } = st {
                assert!(!argv.iter().any(|a| a.contains("rm -rf /")), "{argv:?}");
            }
        }
        let mut o = opts();
        o.strategy = Strategy::Session;
        assert!(!plan(&o).iter().any(|s| matches!(s, PlanStep::Api { method, .. } if method == "PATCH")));
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
        assert_eq!(
            ep,
            EndpointNsys { dir: Some("/out".into()), report_name: Some("run.nsys-rep".into()), end: RangeEnd::Repeat }
        );
    }

    #[test]
    fn engine_not_found_or_ambiguous_lists_candidates() {
        let e = select_engine(&[pe(1, 0, false, "sleep 10")], DEFAULT_PROCESS_MATCH).unwrap_err();
        assert!(e.message.contains("no process matches") && e.message.contains("sleep 10"));
        let two = vec![pe(3, 1, true, "vllm serve a"), pe(4, 1, true, "vllm serve b")];
        let e = select_engine(&two, DEFAULT_PROCESS_MATCH).unwrap_err();
        assert!(
            e.message.contains("ambiguous") && e.message.contains("vllm serve a") && e.message.contains("vllm serve b"),
            "{}",
            e.message
        );
        let two_cpu = vec![pe(3, 1, false, "vllm serve a"), pe(4, 1, false, "vllm serve b")];
        assert!(select_engine(&two_cpu, DEFAULT_PROCESS_MATCH).unwrap_err().message.contains("2 processes match"));
    }

    #[test]
    fn endpoint_refuses_wrong_capture_range() {
        let procs = vec![
            pe(1, 0, false, "nsys profile --capture-range=cudaProfilerApi python3 -m vllm serve"),
            pe(2, 1, true, "vllm serve m"),
        ];
        let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
        let e = check_endpoint_nsys(&c).unwrap_err();
        assert!(
            e.message.contains("--capture-range-end=stop") && e.message.contains("(none: stop-shutdown)"),
            "{}",
            e.message
        );
        for bad in ["stop-shutdown", "repeat-shutdown:2", "none"] {
            let procs = vec![
                pe(1, 0, false, &format!("nsys profile -c cudaProfilerApi --capture-range-end={bad} vllm serve")),
                pe(2, 1, true, "vllm serve m"),
            ];
            let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
            assert!(check_endpoint_nsys(&c).unwrap_err().message.contains("refused"), "{bad}");
        }
        // stop: accepted, one report per engine start; relative -o → the cwd
        let procs = vec![
            pe(
                1,
                0,
                false,
                "nsys profile --capture-range cudaProfilerApi --capture-range-end stop -o eng.nsys-rep vllm serve",
            ),
            pe(2, 1, true, "vllm serve m"),
        ];
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

    fn exp(files: &[(&str, &[u8])]) -> BTreeMap<String, Expected> {
        files.iter().map(|(n, d)| (n.to_string(), Expected { size: d.len() as u64, sha256: sha256_hex(d) })).collect()
    }

    fn sink_run(dir: &Path, want: &[(&str, &[u8])], stream: &[u8], chunk: usize) -> Result<Vec<CopiedFile>> {
        let mut s = TarSink::new(dir, exp(want), None)?;
        for c in stream.chunks(chunk) {
            s.feed(c)?;
        }
        s.commit()
    }

    fn only_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn tar_sink_streams_checks_and_refuses() {
        let want: &[(&str, &[u8])] = &[("capture.nsys-rep", b"abc"), ("capture.sqlite", b"")];
        let ok = tar_of(&[("capture.nsys-rep", b"abc", b'0'), ("capture.sqlite", b"", b'0')]);
        for chunk in [1, 7, 512, 100_000] {
            let dir = tempfile::tempdir().unwrap();
            let files = sink_run(dir.path(), want, &ok, chunk).unwrap();
            assert_eq!(files.len(), 2);
            assert_eq!(files[0].sha256, sha256_hex(b"abc"));
            assert_eq!(std::fs::read(dir.path().join("capture.nsys-rep")).unwrap(), b"abc");
            assert_eq!(only_files(dir.path()), vec!["capture.nsys-rep", "capture.sqlite"], "staging removed");
        }
        let cases: Vec<(Vec<u8>, &str)> = vec![
            // the same file twice: the first copy matches, the second is other bytes
            (
                tar_of(&[
                    ("capture.nsys-rep", b"abc", b'0'),
                    ("capture.nsys-rep", b"xyz", b'0'),
                    ("capture.sqlite", b"", b'0'),
                ]),
                "the same file a second time",
            ),
            (tar_of(&[("../evil", b"x", b'0')]), "`..` component rejected"),
            (tar_of(&[("a/../../evil", b"x", b'0')]), "`..` component rejected"),
            (tar_of(&[("/etc/evil", b"x", b'0')]), "absolute path rejected"),
            (tar_of(&[("capture.nsys-rep", b"", b'2')]), "a symbolic link"),
            (tar_of(&[("capture.nsys-rep", b"", b'1')]), "a hard link"),
            (
                tar_of(&[("capture.nsys-rep", b"abc", b'0'), ("capture.sqlite", b"", b'0'), ("extra.sh", b"x", b'0')]),
                "unexpected extra file",
            ),
            (tar_of(&[("sub/capture.sqlite", b"", b'0')]), "not a plain file name"),
            (tar_of(&[("capture.nsys-rep", b"abd", b'0'), ("capture.sqlite", b"", b'0')]), "differs"),
            (tar_of(&[("capture.nsys-rep", b"abcdef", b'0')]), "announces 6 bytes, the container's stat said 3"),
            (tar_of(&[("capture.nsys-rep", b"abc", b'0')]), "capture.sqlite missing"),
            (ok[..600].to_vec(), "interrupted"),
            (
                {
                    let mut v = ok.clone();
                    v.extend_from_slice(b"junk");
                    v
                },
                "data after the end-of-archive",
            ),
        ];
        for (stream, want_msg) in cases {
            let dir = tempfile::tempdir().unwrap();
            let e = sink_run(dir.path(), want, &stream, 333).unwrap_err();
            assert!(e.message.contains(want_msg), "{want_msg}: {}", e.message);
            assert!(only_files(dir.path()).is_empty(), "{want_msg}: nothing kept: {:?}", only_files(dir.path()));
            assert!(!dir.path().parent().unwrap().join("evil").exists());
        }
        // a stream longer than the listed files allow is cut at the cap
        let dir = tempfile::tempdir().unwrap();
        let mut flood = ok.clone();
        flood.extend(vec![0u8; 200_000]);
        let e = sink_run(dir.path(), want, &flood, 4096).unwrap_err();
        assert!(e.message.contains("runs past 10240 bytes"), "{}", e.message);
        // --max-copy-bytes refuses a total over it before anything is copied
        let sizes: BTreeMap<String, u64> = [("a".to_string(), 10u64), ("b".to_string(), 20)].into();
        let sums: BTreeMap<String, String> =
            [("a".to_string(), "0".repeat(64)), ("b".to_string(), "0".repeat(64))].into();
        let e = expected_files(&["a".into(), "b".into()], &sizes, &sums, Some(29)).unwrap_err();
        assert!(e.message.contains("total 30 bytes") && e.message.contains("--max-copy-bytes 29"), "{}", e.message);
        assert!(expected_files(&["a".into(), "b".into()], &sizes, &sums, Some(30)).is_ok());
    }

    #[test]
    fn tar_sink_does_not_follow_symlinks_in_out_dir() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, b"keep me").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&victim, out.join("capture.nsys-rep")).unwrap();
        let want: &[(&str, &[u8])] = &[("capture.nsys-rep", b"abc")];
        let files = sink_run(&out, want, &tar_of(&[("capture.nsys-rep", b"abc", b'0')]), 512).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me", "the link's target is untouched");
        assert!(!std::fs::symlink_metadata(out.join("capture.nsys-rep")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(out.join("capture.nsys-rep")).unwrap(), b"abc");
    }

    #[test]
    fn names_workdir_and_image_validation() {
        for ok in ["vllm-0", "a", "a.b-c", "x1.y2"] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", "..", "../x", "a/b", "A", "-a", "a-", "a..b", "a%2Fb", "a b", &"x".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        assert!(is_dns1123_label("inference") && !is_dns1123_label("a.b") && !is_dns1123_label(&"x".repeat(64)));
        for bad in [
            "/tmp",
            "/",
            "/root",
            "/tmp/",
            "tmp/nsyskit-pod-attach-x",
            "/tmp/nsyskit-pod-attach-",
            "/tmp/../nsyskit-pod-attach-x",
            "/tmp//nsyskit-pod-attach-x",
            "/tmp/./nsyskit-pod-attach-x",
            "/tmp/nsyskit-pod-attach-x/",
            "/tmp/nsyskit-pod-attach-x y",
            "/home/u",
        ] {
            let e = check_workdir(bad).unwrap_err();
            assert_eq!(e.arg.as_deref(), Some("--workdir"), "{bad}");
        }
        check_workdir("/tmp/nsyskit-pod-attach-1f").unwrap();
        check_workdir("/scratch/run/nsyskit-pod-attach-a.b_c").unwrap();
        assert_eq!(
            image_digest(DEFAULT_SIDECAR_IMAGE).unwrap().as_deref(),
            Some("sha256:3146de96f6022a8cc36f86d1b8c0281cb940e51e2c3dc49c315646ad66ede43d")
        );
        assert_eq!(image_digest(PATH_B_IMAGE).unwrap(), None);
        assert!(image_digest("r/x@sha256:00").is_err());
        let mut o = opts();
        o.image = PATH_B_IMAGE.into();
        let e = o.validate().unwrap_err();
        assert!(e.message.contains("not pinned by digest") && e.arg.as_deref() == Some("--image"), "{}", e.message);
        o.allow_unpinned_image = true;
        o.validate().unwrap();
        let f = Flags { pod: Some("vllm-0".into()), ..Flags::default() };
        let o = options(&f).unwrap();
        assert_eq!(o.image, DEFAULT_SIDECAR_IMAGE);
        assert_eq!(o.duration_s, 120.0);
        assert!(o.workdir.starts_with("/tmp/nsyskit-pod-attach-"));
        for (flag, f) in [
            ("--pod", Flags { pod: Some("../etc".into()), ..Flags::default() }),
            ("--namespace", Flags { pod: Some("p".into()), namespace: "a/b".into(), ..Flags::default() }),
            ("--container", Flags { pod: Some("p".into()), container: Some("X".into()), ..Flags::default() }),
            ("--workdir", Flags { pod: Some("p".into()), workdir: Some("/tmp".into()), ..Flags::default() }),
            ("--install-nsys", Flags { pod: Some("p".into()), install_nsys: Some("yum".into()), ..Flags::default() }),
        ] {
            assert_eq!(options(&f).unwrap_err().arg.as_deref(), Some(flag));
        }
        assert_eq!(url_encode("app=vllm,tier in (a b)"), "app%3Dvllm%2Ctier%20in%20%28a%20b%29");
    }

    #[test]
    fn engine_env_checks() {
        let nsys_inj = "CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so\n";
        let e = parse_env_check(9, nsys_inj);
        assert!(e.readable && e.nsys_injection);
        assert!(check_engine_env(Strategy::Session, &e).unwrap().is_empty());
        assert!(check_engine_env(Strategy::Attach, &e).unwrap_err().message.contains("already runs under nsys"));
        let zym = parse_env_check(9, "CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace_cuda.so\n");
        for s in [Strategy::Endpoint, Strategy::Session, Strategy::Attach] {
            let m = check_engine_env(s, &zym).unwrap_err().message;
            assert!(m.contains("/opt/zymtrace/libzymtrace_cuda.so") && m.contains("refused"), "{m}");
        }
        let none = parse_env_check(9, "");
        assert!(check_engine_env(Strategy::Attach, &none).unwrap().is_empty());
        assert!(check_engine_env(Strategy::Session, &none).unwrap()[0].contains("no CUDA_INJECTION64_PATH"));
        let unread = parse_env_check(9, "unreadable\n");
        assert!(
            !unread.readable
                && check_engine_env(Strategy::Attach, &unread).unwrap()[0].contains("cannot read /proc/9/environ")
        );
        // vLLM's profiler switch, endpoint only
        let mut v = parse_env_check(9, nsys_inj);
        note_cmdlines(&mut v, &["VLLM::EngineCore".into(), "python3 /usr/bin/vllm serve m --port 8000".into()]);
        assert!(v.vllm && !v.profiler_config_cuda);
        assert!(check_engine_env(Strategy::Endpoint, &v)
            .unwrap_err()
            .message
            .contains("--profiler-config.profiler=cuda"));
        assert!(check_engine_env(Strategy::Session, &v).is_ok());
        for cmd in [
            "vllm serve m --profiler-config.profiler=cuda",
            "vllm serve m --profiler-config.profiler cuda",
            r#"vllm serve m --profiler-config {"profiler": "cuda"}"#,
        ] {
            let mut v2 = v.clone();
            note_cmdlines(&mut v2, &[cmd.into()]);
            assert!(v2.profiler_config_cuda, "{cmd}");
            assert!(check_engine_env(Strategy::Endpoint, &v2).unwrap().is_empty(), "{cmd}");
        }
        let mut old = parse_env_check(9, &format!("{nsys_inj}VLLM_TORCH_CUDA_PROFILE=1\n"));
        note_cmdlines(&mut old, &["python3 -m vllm.entrypoints.openai.api_server".into()]);
        assert!(old.vllm && check_engine_env(Strategy::Endpoint, &old).unwrap().is_empty());
        let mut other = parse_env_check(9, nsys_inj);
        note_cmdlines(&mut other, &["python3 serve.py".into()]);
        assert!(check_engine_env(Strategy::Endpoint, &other).unwrap()[0].contains("not a vLLM command line"));
        // a value cannot fake a line: the script turns newlines inside values into spaces
        assert!(ENV_CHECK_SCRIPT.contains(r"tr '\000\n' '\n '"));
    }

    #[test]
    fn plan_shows_default_image_and_path_b_install() {
        let o = options(&Flags { pod: Some("vllm-0".into()), container: Some("engine".into()), ..Flags::default() })
            .unwrap();
        let p = plan(&o);
        let patch = p
            .iter()
            .find_map(|s| match s {
                PlanStep::Api { body: Some(b), .. } => Some(b.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(patch["spec"]["ephemeralContainers"][0]["image"], DEFAULT_SIDECAR_IMAGE);
        assert!(p.iter().any(|s| matches!(s, PlanStep::Wait { seconds, .. } if *seconds == 120.0)));
        let b = options(&Flags {
            pod: Some("vllm-0".into()),
            image: Some(PATH_B_IMAGE.into()),
            allow_unpinned_image: true,
            install_nsys: Some("apt".into()),
            ..Flags::default()
        })
        .unwrap();
        let argvs: Vec<Vec<String>> = plan(&b)
            .into_iter()
            .filter_map(|s| match s {
                PlanStep::Exec { argv, .. } => Some(argv),
                _ => None,
            })
            .collect();
        let i = argvs.iter().position(|a| a.contains(&"install".to_string())).expect("install step");
        assert_eq!(
            argvs[i],
            s(&[
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "-q",
                "-y",
                "install",
                "--no-install-recommends",
                "nsight-systems-cli"
            ])
        );
        assert_eq!(argvs[i + 1][0], "dpkg-query");
        let probe = argvs.iter().position(|a| a.get(1).map(String::as_str) == Some("--version")).unwrap();
        assert!(i < probe, "install before the nsys probe");
    }

    #[test]
    fn sha_and_listings() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let m =
            parse_sha256sum("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  /w/capture.nsys-rep\n")
                .unwrap();
        assert_eq!(m["capture.nsys-rep"].len(), 64);
        assert_eq!(parse_sizes("3\t/w/capture.nsys-rep\n").unwrap()["capture.nsys-rep"], 3);
        let names =
            files_to_copy("capture.nsys-rep\ncapture.sqlite\ncapture_nvtx_sum.csv\nother.txt\n", "capture").unwrap();
        assert_eq!(names, vec!["capture.nsys-rep", "capture.sqlite", "capture_nvtx_sum.csv"]);
        assert!(files_to_copy("capture.sqlite\n", "capture").is_err());
        let before = parse_report_listing("10\t100\t/o/a.nsys-rep\n");
        let after = parse_report_listing("10\t100\t/o/a.nsys-rep\n20\t200\t/o/a.1.nsys-rep\n");
        assert_eq!(new_reports(&before, &after)[0].path, "/o/a.1.nsys-rep");
    }
    #[test]
    fn library_gate_matches_gate_run() {
        let fx = |p: &str| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(p);
        let (rep, sqlite) = (fx("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"), fx("nsys-2023.4.4/cpu_nvtx_osrt.sqlite"));
        let g = run_gate(&Gate::Library, &rep, &sqlite);
        assert_eq!(g.verdict, "RETRY", "{}", g.reason);
        let want = crate::gate_check::run(&crate::gate_check::GateOptions {
            capture: rep.clone(),
            sqlite: Some(sqlite.clone()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(g.document.unwrap(), serde_json::to_value(&want).unwrap());
        assert!(g.reason.starts_with("gate-check (library): gates "), "{}", g.reason);
        assert_eq!(run_gate(&Gate::Library, &rep, &fx("nope.sqlite")).verdict, "NOT_RUN");
    }

    /// `--bundle` on a real kernel CSV (nsys 2025.3.1 on the H200): the seed's fields, top_kernels from the CSV,
    /// the files under profiles/ with the sha256 of the bytes written, the bundle's other bytes kept.
    #[test]
    fn bundle_fills_kernel_profile_from_a_real_csv() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let csv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
        let mut files = Vec::new();
        for (name, bytes) in [
            ("capture.nsys-rep", b"not a real report".to_vec()),
            ("capture_cuda_gpu_kern_sum.csv", std::fs::read(&csv).unwrap()),
            ("capture_cuda_api_sum.csv", b"x".to_vec()),
        ] {
            std::fs::write(out.join(name), &bytes).unwrap();
            files.push(CopiedFile {
                name: name.into(),
                path: out.join(name).display().to_string(),
                size: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            });
        }
        let mut o = opts();
        o.bundle = Some(dir.path().join("b").display().to_string());
        let mut doc = dry_run(&o).unwrap();
        doc.dry_run = false;
        doc.files = files;
        doc.provenance = Some(PodProvenance {
            namespace: "ns".into(),
            pod: "p".into(),
            pod_uid: None,
            node: None,
            container: "engine".into(),
            container_image: None,
            sidecar: Some("nsyskit-x".into()),
            sidecar_image: Some(DEFAULT_SIDECAR_IMAGE.into()),
            sidecar_image_digest: image_digest(DEFAULT_SIDECAR_IMAGE).unwrap(),
            sidecar_image_id: None,
            nsys_install: None,
            nsys: NsysCaps::default(),
            engine: Some(EngineChoice {
                pid: 4242,
                cmdline: "VLLM::EngineCore".into(),
                cuda_owner: true,
                matched: vec![4242],
                nsys_ancestor: None,
            }),
            engine_env: None,
            captured_at: Some("2026-12-01T13:00:00Z".into()),
            source_report: None,
            started_at_unix_s: 0.0,
            capture_s: 5.0,
        });
        let b = dir.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        let before = "{\"run_id\": \"x\",\n \"n\": 1.0, \"kernel_profile\": {\"keep\": [1 ,2]}}\n";
        std::fs::write(b.join(BUNDLE_FILE), before).unwrap();
        write_bundle(&b, &mut doc, &o).unwrap();
        let kp = doc.kernel_profile.clone().unwrap();
        assert_eq!(kp.captured_at, "2026-12-01T13:00:00Z");
        assert_eq!(
            (kp.nsys_rep_path.as_str(), kp.summary_csv_path.as_deref(), kp.cuda_api_csv_path.as_deref()),
            ("profiles/capture.nsys-rep", Some("profiles/gpu_kern_sum.csv"), Some("profiles/cuda_api_sum.csv"))
        );
        assert_eq!(
            (kp.duration_s, kp.vllm_pid, kp.sidecar_image.as_deref()),
            (5.0, Some(4242), Some(DEFAULT_SIDECAR_IMAGE))
        );
        let top = kp.top_kernels.clone().unwrap();
        assert!(!top.is_empty() && top[0].rank == 1 && top[0].instances > 0, "{top:?}");
        assert_eq!(std::fs::read(b.join("profiles/gpu_kern_sum.csv")).unwrap(), std::fs::read(&csv).unwrap());
        let text = std::fs::read_to_string(b.join(BUNDLE_FILE)).unwrap();
        assert!(text.starts_with("{\"run_id\": \"x\",\n \"n\": 1.0, \"kernel_profile\": {\"keep\": [1 ,2]"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let k = &v["kernel_profile"];
        for f in [
            "captured_at",
            "nsys_rep_path",
            "summary_csv_path",
            "duration_s",
            "vllm_pid",
            "sidecar_image",
            "method",
            "top_kernels",
        ] {
            assert!(!k[f].is_null(), "{f}: {k}");
        }
        assert_eq!(k["top_kernels"][0]["name"], top[0].name.as_str());
        assert_eq!(k["summary_csv_path"], "profiles/gpu_kern_sum.csv");
        assert_eq!(k["stats"]["cuda_gpu_kern_sum"]["source"], "profiles/gpu_kern_sum.csv");
        assert_eq!(v["pod_attach"]["kernel_profile"]["vllm_pid"], 4242);
        // a file whose bytes do not match its sha256 is not put in the bundle
        let mut doc2 = doc.clone();
        doc2.files[0].sha256 = "0".repeat(64);
        assert!(write_bundle(&b, &mut doc2, &o).unwrap_err().message.contains("deleted"));
    }
}
