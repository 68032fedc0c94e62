//! The nsys capability probe and the strategy choice.

use super::*;

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
    /// capability parser ([`crate::nsys_resolve::parse_capabilities`]).
    pub fn from_help(version: &str, top_help: &str, profile_help: &str) -> NsysCaps {
        let caps = crate::nsys_resolve::parse_capabilities(profile_help, "");
        let v = version.trim();
        NsysCaps {
            version: crate::nsys_resolve::parse_version(version).or_else(|| (!v.is_empty()).then(|| v.to_string())),
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
