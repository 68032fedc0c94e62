//! Linux process bookkeeping for serve-capture: `/proc` reads, identity-checked signals, listening ports,
//! and the SIGINT/SIGTERM flag.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

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
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        })
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
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .any(|f| std::fs::read_to_string(f).map(|t| listening_in(&t, port)).unwrap_or(false))
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

/// The exit status of a zombie (`/proc/PID/stat` field 52, `exit_code`, in `waitpid` form), i.e. of a process
/// that has ended but whose parent has not reaped it yet; None while it runs or once it is reaped.
pub fn zombie_status(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = text.rfind(')')?;
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    if rest.first()? != &"Z" {
        return None;
    }
    // field 52 is rest[49] (rest[0] is field 3)
    rest.get(49)?.parse().ok()
}

/// A `waitpid` status as `exit N` or `signal SIGX`.
pub fn describe_wait_status(status: i32) -> String {
    if status & 0x7f == 0 {
        format!("exit {}", (status >> 8) & 0xff)
    } else {
        format!("signal {}", signal_name(status & 0x7f))
    }
}

/// `NAME` from `/proc/PID/environ` (the environment the process was exec'd with), if readable and set.
pub fn environ_var(pid: i32, name: &str) -> Option<String> {
    let b = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let want = format!("{name}=");
    b.split(|&c| c == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(want.as_str()).map(str::to_string)
    })
}

/// Process exit statuses from the kernel's process-event connector (netlink `NETLINK_CONNECTOR`, `CN_IDX_PROC`):
/// every process that exits on this machine, with its `waitpid` status, even when it is not our child and its
/// parent reaps it at once. Needs `CAP_NET_ADMIN` (root); [`ExitWatcher::start`] returns None without it, and
/// the caller falls back to [`zombie_status`].
pub struct ExitWatcher {
    exits: std::sync::Arc<std::sync::Mutex<HashMap<i32, (i32, std::time::Instant)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExitWatcher {
    pub fn start() -> Result<ExitWatcher, String> {
        // SAFETY: plain socket calls on a descriptor this function owns; buffers outlive the calls.
        unsafe {
            let fd =
                libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 11 /* NETLINK_CONNECTOR */);
            if fd < 0 {
                return Err(format!("netlink socket: {}", std::io::Error::last_os_error()));
            }
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            addr.nl_groups = 1; // CN_IDX_PROC
            addr.nl_pid = 0;
            if libc::bind(
                fd,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            ) < 0
            {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(format!("netlink bind: {e}"));
            }
            // nlmsghdr (16) + cn_msg {idx=1, val=1, seq, ack, len=4, flags} (20) + PROC_CN_MCAST_LISTEN (4)
            let mut msg = [0u8; 40];
            msg[0..4].copy_from_slice(&40u32.to_ne_bytes());
            msg[4..6].copy_from_slice(&3u16.to_ne_bytes()); // NLMSG_DONE
            msg[12..16].copy_from_slice(&(std::process::id()).to_ne_bytes());
            msg[16..20].copy_from_slice(&1u32.to_ne_bytes());
            msg[20..24].copy_from_slice(&1u32.to_ne_bytes());
            msg[32..34].copy_from_slice(&4u16.to_ne_bytes());
            msg[36..40].copy_from_slice(&1u32.to_ne_bytes());
            if libc::send(fd, msg.as_ptr() as *const libc::c_void, msg.len(), 0) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(format!("netlink listen: {e}"));
            }
            let tv = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            let exits = std::sync::Arc::new(std::sync::Mutex::new(HashMap::new()));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (e2, s2) = (exits.clone(), stop.clone());
            let thread = std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while !s2.load(Ordering::SeqCst) {
                    let n = libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
                    if n <= 0 {
                        continue;
                    }
                    let n = n as usize;
                    let mut off = 0;
                    while off + 16 <= n {
                        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
                        if len < 16 || off + len > n {
                            break;
                        }
                        // proc_event at 36: what (4), cpu (4), timestamp (8), then exit: pid, tgid, code, signal
                        let ev = off + 36;
                        if ev + 32 <= off + len {
                            let what = u32::from_ne_bytes(buf[ev..ev + 4].try_into().unwrap());
                            if what == 0x8000_0000 {
                                let pid = i32::from_ne_bytes(buf[ev + 16..ev + 20].try_into().unwrap());
                                let tgid = i32::from_ne_bytes(buf[ev + 20..ev + 24].try_into().unwrap());
                                let code = i32::from_ne_bytes(buf[ev + 24..ev + 28].try_into().unwrap());
                                if pid == tgid {
                                    if let Ok(mut m) = e2.lock() {
                                        m.insert(pid, (code, std::time::Instant::now()));
                                    }
                                }
                            }
                        }
                        off += (len + 3) & !3;
                    }
                }
                libc::close(fd);
            });
            Ok(ExitWatcher { exits, stop, thread: Some(thread) })
        }
    }
    /// The `waitpid` status of `pid`'s latest exit seen since `since`.
    pub fn status(&self, pid: i32, since: std::time::Instant) -> Option<i32> {
        let m = self.exits.lock().ok()?;
        m.get(&pid).filter(|(_, t)| *t >= since).map(|(c, _)| *c)
    }
}

impl Drop for ExitWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub use crate::signals::{install_stop_handlers, signal_name, stop_signal};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let s = parse_stat("4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10")
            .unwrap();
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
    fn exit_status_of_a_grandchild_reaped_by_its_parent() {
        // sh forks `sh -c 'exit 7'` and reaps it itself: not our child, never a zombie we could see
        let w = match ExitWatcher::start() {
            Ok(w) => w,
            Err(e) => {
                eprintln!("SKIP: no process-event connector here ({e})");
                return;
            }
        };
        let t0 = std::time::Instant::now();
        let mut c = std::process::Command::new("sh")
            .args(["-c", "sh -c 'sleep 0.2; exit 7' & echo $!; wait; sleep 0.3"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Read;
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        c.wait().unwrap();
        let pid: i32 = out.trim().parse().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(w.status(pid, t0).map(describe_wait_status).as_deref(), Some("exit 7"));
        assert_eq!(describe_wait_status(libc::SIGKILL), "signal SIGKILL");
        assert_eq!(describe_wait_status(3 << 8), "exit 3");
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
