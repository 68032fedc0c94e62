//! Timing by phase for the benchmark (`scripts/bench-ranges`, docs/performance.md): with
//! `NSYSKIT_PHASE_TIMES=1` in the environment, each tool prints one stderr line per phase,
//! `nsyskit-phase TOOL PHASE SECONDS rss=MB hwm=MB faults=K`, as the phase ends (the resident and peak resident
//! memory of the process then, from `/proc/self/status` where there is one, and the thousands of minor page faults
//! since it started, from `/proc/self/stat`: each first touch of a fresh page costs one, and a fault costs more on
//! some virtual machines than the work that touched the page). Without it nothing is printed and nothing is timed
//! beyond one `Instant::now()` per phase. Never part of a document.

use std::sync::OnceLock;
use std::time::Instant;

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("NSYSKIT_PHASE_TIMES").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// A phase clock: [`Phases::mark`] prints the time since the previous mark (or since [`Phases::new`]).
pub struct Phases {
    tool: &'static str,
    last: Instant,
}

impl Phases {
    pub fn new(tool: &'static str) -> Phases {
        Phases { tool, last: Instant::now() }
    }

    /// End the current phase, naming it.
    pub fn mark(&mut self, phase: &str) {
        let now = Instant::now();
        if enabled() {
            eprintln!("nsyskit-phase {} {} {:.3}{}", self.tool, phase, (now - self.last).as_secs_f64(), memory());
        }
        self.last = now;
    }
}

/// ` rss=MB hwm=MB` from `/proc/self/status` (empty where it cannot be read).
fn memory() -> String {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return String::new();
    };
    let kb = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    let faults = minor_faults().map(|f| format!(" faults={}", f / 1000)).unwrap_or_default();
    match (kb("VmRSS:"), kb("VmHWM:")) {
        (Some(r), Some(h)) => format!(" rss={} hwm={}{faults}", r / 1024, h / 1024),
        _ => String::new(),
    }
}

/// The process's minor page faults so far (`minflt`, the 10th field of `/proc/self/stat`, counted after the
/// command name, which may hold spaces but ends at the last `)`).
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(7)?.parse().ok()
}

/// Time `f` as one phase of `tool` (printed only with `NSYSKIT_PHASE_TIMES=1`).
pub fn timed<T>(tool: &'static str, phase: &str, f: impl FnOnce() -> T) -> T {
    let mut p = Phases::new(tool);
    let v = f();
    p.mark(phase);
    v
}
