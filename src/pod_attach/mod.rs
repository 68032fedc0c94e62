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

mod bundle;
mod caps;
mod checks;
mod copy;
mod doc;
mod engine;
mod options;
mod plan;
#[cfg(test)]
mod tests;

pub use bundle::*;
pub use caps::*;
pub use checks::*;
pub use copy::*;
pub use doc::*;
pub use engine::*;
pub use options::*;
pub use plan::*;

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
