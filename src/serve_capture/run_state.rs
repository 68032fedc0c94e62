//! A run folder's terminal state (`run-state`) and the refusal of an unfinished one.

#[allow(unused_imports)]
use super::*;

pub(super) fn write_run_state(out: &Path, state: &str) {
    let _ = std::fs::write(out.join(RUN_STATE_FILE), format!("{state} {}\n", std::process::id()));
}

/// The file in a run folder that says how far the run got: `running PID` from the start, then `ok PID`,
/// `failed PID` or `interrupted PID` once it reached its terminal state.
pub const RUN_STATE_FILE: &str = "run-state";

/// How far a serve-capture run folder got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Not a serve-capture run folder (no `run-state`, no `pids/`): nothing to say.
    NotARun,
    /// It reached a terminal state: `ok`, `failed` or `interrupted`.
    Terminal(String),
    /// serve-capture (this PID) is still running it.
    Running(i32),
    /// It started and never reached a terminal state (serve-capture killed, or the folder copied mid-run).
    Unfinished(String),
}

/// The state of the run folder `dir` (see [`RunState`]).
pub fn run_state(dir: &Path) -> RunState {
    let text = match std::fs::read_to_string(dir.join(RUN_STATE_FILE)) {
        Ok(t) => t,
        // a folder from before the state file: serve-capture's pids/ and provenance.json without its document
        Err(_) if dir.join("pids").is_dir() && dir.join("provenance.json").is_file() => {
            return if dir.join("serve-capture.json").is_file() {
                RunState::Terminal("unknown".into())
            } else {
                RunState::Unfinished("pids/ and provenance.json but no serve-capture.json".into())
            };
        }
        Err(_) => return RunState::NotARun,
    };
    let mut w = text.split_whitespace();
    let state = w.next().unwrap_or("").to_string();
    let pid: i32 = w.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    match state.as_str() {
        "ok" | "failed" | "interrupted" => RunState::Terminal(state),
        "running"
            if pid > 0
                && procs::stat(pid).is_some_and(|s| {
                    s.state != 'Z'
                        && procs::cmdline(pid)
                            .first()
                            .is_some_and(|a| a.contains("serve-capture") || a.contains("nu_plugin"))
                }) =>
        {
            RunState::Running(pid)
        }
        "running" => RunState::Unfinished(format!("serve-capture (pid {pid}) is gone")),
        other => RunState::Unfinished(format!("{RUN_STATE_FILE} says {other:?}")),
    }
}

/// For gate-check, report and capture-compare: refuse an input that lies in (or is) a serve-capture run folder
/// that never reached a terminal state (exit 2, naming the folder and why). Anything else passes.
pub fn refuse_unfinished(input: &Path) -> Result<()> {
    if input.as_os_str() == "-" {
        return Ok(());
    }
    let dir = if input.is_dir() { Some(input) } else { input.parent() };
    let Some(dir) = dir.map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d }) else { return Ok(()) };
    match run_state(dir) {
        RunState::NotARun | RunState::Terminal(_) => Ok(()),
        RunState::Running(pid) => Err(Error::input(format!(
            "{}: the serve-capture run in {} is still running (pid {pid}): wait for it to end",
            input.display(),
            dir.display()
        ))),
        RunState::Unfinished(why) => Err(Error::input(format!(
            "{}: the serve-capture run in {} never reached a terminal state ({why}): its files are not evidence; capture again",
            input.display(),
            dir.display()
        ))),
    }
}
