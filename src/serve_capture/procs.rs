//! Linux process bookkeeping for serve-capture: `/proc` reads, identity-checked signals, listening ports,
//! and the SIGINT/SIGTERM flag.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    /// Start time in clock ticks since boot (field 22): with the PID, a process's identity (PIDs are reused).
    pub starttime: u64,
    pub comm: String,
}

/// Read `/proc/PID/stat`; None when the process is gone.
pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parse a `/proc/PID/stat` line (the command name may contain spaces and parentheses: split at the last `)`).
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] = state (field 3), rest[1] = ppid (4), rest[19] = starttime (22)
    let state = rest.first()?.chars().next()?;
    let ppid = rest.get(1)?.parse().ok()?;
    let starttime = rest.get(19)?.parse().ok()?;
    Some(ProcStat { pid, ppid, state, starttime, comm })
}

/// The command line of a process (NUL-separated argv), empty when gone or a kernel thread.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect())
        .unwrap_or_default()
}

/// Every live process.
pub fn all() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter_map(stat).collect()
}

/// All descendants of `root` (children, grandchildren, …), ordered by start time then PID.
pub fn descendants(root: i32) -> Vec<ProcStat> {
    let procs = all();
    let mut children: HashMap<i32, Vec<&ProcStat>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for c in children.get(&pid).map(|v| v.as_slice()).unwrap_or(&[]) {
            if c.pid != root && !out.iter().any(|o: &ProcStat| o.pid == c.pid) {
                out.push((*c).clone());
                stack.push(c.pid);
            }
        }
    }
    out.sort_by_key(|p| (p.starttime, p.pid));
    out
}

/// Is the process with this PID *and* this start time still alive (not a zombie)?
pub fn alive(pid: i32, starttime: u64) -> bool {
    match stat(pid) {
        Some(s) => s.starttime == starttime && s.state != 'Z' && s.state != 'X',
        None => false,
    }
}

/// Send a signal to exactly this process if it is still the one recorded (same start time).
/// Returns whether the signal was sent.
pub fn signal_if_same(pid: i32, starttime: u64, sig: i32) -> bool {
    if pid <= 1 || !alive(pid, starttime) {
        return false;
    }
    // SAFETY: kill(2) with a positive PID (never 0, -1 or a group) that we recorded and re-checked.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Is some socket in LISTEN state on this TCP port (IPv4 or IPv6, this network namespace)?
pub fn port_listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).map(|t| listening_in(&t, port)).unwrap_or(false)
    })
}

/// Parse a `/proc/net/tcp{,6}` table: any row with local port `port` in state `0A` (LISTEN)?
pub fn listening_in(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state)) = (cols.get(1), cols.get(3)) else { return false };
        let p = local.rsplit(':').next().and_then(|h| u16::from_str_radix(h, 16).ok());
        p == Some(port) && *state == "0A"
    })
}

static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // only an atomic store: async-signal-safe
    let _ = STOP_SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// Install SIGINT/SIGTERM/SIGHUP handlers that only record the signal; the run loop sees it, stops, and
/// cleans up the recorded processes.
pub fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a handler that only stores into an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The stop signal received so far (0 = none).
pub fn stop_signal() -> i32 {
    STOP_SIGNAL.load(Ordering::SeqCst)
}

/// The name of a signal number, for documents.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let s = parse_stat("4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10").unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) name");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 17);
        assert_eq!(s.starttime, 987654);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn own_process_is_alive_and_listed() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert!(alive(me, s.starttime));
        assert!(!alive(me, s.starttime + 1), "a different start time is a different process");
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let d = descendants(me);
        assert!(d.iter().any(|p| p.pid == child.id() as i32), "{d:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn proc_net_tcp_listen_rows() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:47FF 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   1: 0100007F:1F90 0100007F:D2F0 06 00000000:00000000 03:00000F1B 00000000     0        0 0 3 0\n";
        assert!(listening_in(t, 0x47FF));
        assert!(!listening_in(t, 0x1F90), "TIME_WAIT is not LISTEN");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(port_listening(port));
        // (no check after drop(l): another test of this process may bind the same port in between)
        drop(l);
    }
}
