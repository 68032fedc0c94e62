//! Preflight: GPUs and their compute processes (nvidia-smi), a TCP port, stale shared-memory segments.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::nsys::{glob_regex, run_with_timeout};

/// The `--query-gpu` fields asked for (their CSV headers differ: `memory.used [MiB]`, `clocks.current.sm [MHz]`).
pub const GPU_QUERY: &str =
    "index,uuid,name,driver_version,memory.used,memory.total,utilization.gpu,clocks.sm,clocks.max.sm";
/// The clock-policy query, asked separately (so that the main query stays the one the fixtures replay): the
/// active clock event reasons (throttling) and the application clocks. Drivers before the rename (R535) only know
/// `clocks_throttle_reasons.active`: [`CLOCKS_QUERY_OLD`] is tried when this one fails.
pub const CLOCKS_QUERY: &str =
    "index,clocks_event_reasons.active,clocks.applications.graphics,clocks.applications.memory";
pub const CLOCKS_QUERY_OLD: &str =
    "index,clocks_throttle_reasons.active,clocks.applications.graphics,clocks.applications.memory";
/// The `--query-compute-apps` fields asked for (`used_memory` prints as `used_gpu_memory [MiB]`).
pub const APPS_QUERY: &str = "pid,process_name,used_memory,gpu_uuid";

/// One GPU as `nvidia-smi --query-gpu` reports it (memory in MiB, clocks in MHz; `null` for `[N/A]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub driver_version: String,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub utilization_pct: Option<u64>,
    pub sm_clock_mhz: Option<u64>,
    pub sm_clock_max_mhz: Option<u64>,
    /// The active clock event (throttle) reasons bitmask as nvidia-smi prints it (`0x0000000000000000` = none);
    /// `null` when the clock query was not answered.
    #[serde(default)]
    pub clocks_event_reasons_active: Option<String>,
    /// Which query name answered: `clocks_event_reasons.active` or (older drivers) `clocks_throttle_reasons.active`.
    #[serde(default)]
    pub clocks_event_reasons_field: Option<String>,
    /// Application clocks (the clock policy), MHz: `clocks.applications.graphics` / `.memory`.
    #[serde(default)]
    pub app_clock_graphics_mhz: Option<u64>,
    #[serde(default)]
    pub app_clock_memory_mhz: Option<u64>,
    /// Whether this GPU is a target of the capture (`--gpu`, `CUDA_VISIBLE_DEVICES`, or every GPU).
    pub target: bool,
}

/// A compute process from `nvidia-smi --query-compute-apps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuProcess {
    pub pid: u32,
    pub process_name: String,
    pub used_memory_mib: Option<u64>,
    pub gpu_uuid: String,
    /// The index of the GPU it runs on (`null` when the UUID is not among the listed GPUs).
    pub gpu_index: Option<u32>,
    /// Whether it runs on a target GPU (a foreign process there fails the preflight).
    pub on_target: bool,
}

/// What nvidia-smi says about the machine's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuState {
    /// `available` or `unavailable`.
    pub status: String,
    /// Why it is unavailable (no nvidia-smi, it failed, …).
    pub reason: Option<String>,
    /// The nvidia-smi that was run.
    pub nvidia_smi: Option<String>,
    /// Driver version (from the first GPU row).
    pub driver_version: Option<String>,
    /// CUDA version the driver supports (`nvidia-smi --version`, `CUDA Version`).
    pub cuda_version: Option<String>,
    /// Target GPU indices, and where they came from (`--gpu`, `CUDA_VISIBLE_DEVICES`, `all`).
    pub targets: Vec<u32>,
    pub target_source: String,
    pub gpus: Vec<Gpu>,
    pub processes: Vec<GpuProcess>,
}

/// Which GPUs the capture targets.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    Index(u32),
    /// `CUDA_VISIBLE_DEVICES` text: indices and/or UUIDs (or UUID prefixes), comma-separated.
    Visible(String),
    All,
}

fn num(field: &str) -> Option<u64> {
    let t = field.trim();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    digits.parse().ok()
}

fn csv_rows(text: &str, what: &str, fields: usize) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or_else(|| format!("{what}: no output"))?;
    let hn = header.split(',').count();
    if hn != fields {
        return Err(format!("{what}: header has {hn} columns, expected {fields}: {:?}", header.trim()));
    }
    for (i, l) in lines.enumerate() {
        // names may contain commas only in `name`/`process_name`; nvidia-smi does not quote, so split from
        // both ends around the one free-text column
        let parts: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
        if parts.len() < fields {
            return Err(format!("{what}: line {} has {} columns, expected {fields}: {:?}", i + 2, parts.len(), l));
        }
        rows.push(parts);
    }
    Ok(rows)
}

/// Join the free-text column `col` back when it contained commas.
fn fix_columns(parts: Vec<String>, fields: usize, col: usize) -> Vec<String> {
    if parts.len() == fields {
        return parts;
    }
    let extra = parts.len() - fields;
    let mut out: Vec<String> = parts[..col].to_vec();
    out.push(parts[col..=col + extra].join(","));
    out.extend_from_slice(&parts[col + extra + 1..]);
    out
}

/// Parse `nvidia-smi --query-gpu=GPU_QUERY --format=csv` output.
pub fn parse_gpus(text: &str) -> Result<Vec<Gpu>, String> {
    let mut out = Vec::new();
    for (i, p) in csv_rows(text, "--query-gpu", 9)?.into_iter().enumerate() {
        let p = fix_columns(p, 9, 2);
        let index = p[0]
            .parse::<u32>()
            .map_err(|_| format!("--query-gpu: line {}: index {:?} is not a number", i + 2, p[0]))?;
        out.push(Gpu {
            index,
            uuid: p[1].clone(),
            name: p[2].clone(),
            driver_version: p[3].clone(),
            memory_used_mib: num(&p[4]),
            memory_total_mib: num(&p[5]),
            utilization_pct: num(&p[6]),
            sm_clock_mhz: num(&p[7]),
            sm_clock_max_mhz: num(&p[8]),
            clocks_event_reasons_active: None,
            clocks_event_reasons_field: None,
            app_clock_graphics_mhz: None,
            app_clock_memory_mhz: None,
            target: false,
        });
    }
    Ok(out)
}

/// Clock policy of one GPU from the [`CLOCKS_QUERY`] answer: `(index, reasons, graphics MHz, memory MHz)`.
pub type Clocks = (u32, Option<String>, Option<u64>, Option<u64>);

/// Parse `nvidia-smi --query-gpu=CLOCKS_QUERY --format=csv` output (either query name).
pub fn parse_clocks(text: &str) -> Result<Vec<Clocks>, String> {
    let mut out = Vec::new();
    for (i, p) in csv_rows(text, "--query-gpu (clocks)", 4)?.into_iter().enumerate() {
        let index = p[0]
            .parse::<u32>()
            .map_err(|_| format!("--query-gpu (clocks): line {}: index {:?} is not a number", i + 2, p[0]))?;
        let reasons = Some(p[1].clone()).filter(|r| r.starts_with("0x"));
        out.push((index, reasons, num(&p[2]), num(&p[3])));
    }
    Ok(out)
}

/// Fill the clock-policy fields of `gpus` from nvidia-smi (new query name first, then the old one). Never an
/// error: the fields stay `null` when neither query is answered.
pub fn query_clocks(smi: &Path, gpus: &mut [Gpu], timeout: Duration) {
    for (q, field) in
        [(CLOCKS_QUERY, "clocks_event_reasons.active"), (CLOCKS_QUERY_OLD, "clocks_throttle_reasons.active")]
    {
        let Ok(o) = run_with_timeout(smi, &[&format!("--query-gpu={q}"), "--format=csv"], timeout) else { continue };
        if !o.status.success() {
            continue;
        }
        let Ok(rows) = parse_clocks(&o.stdout) else { continue };
        for (index, reasons, g, m) in rows {
            if let Some(x) = gpus.iter_mut().find(|x| x.index == index) {
                x.clocks_event_reasons_field = reasons.as_ref().map(|_| field.to_string());
                x.clocks_event_reasons_active = reasons;
                x.app_clock_graphics_mhz = g;
                x.app_clock_memory_mhz = m;
            }
        }
        return;
    }
}

/// Parse `nvidia-smi --query-compute-apps=APPS_QUERY --format=csv` output.
pub fn parse_apps(text: &str) -> Result<Vec<GpuProcess>, String> {
    let mut out = Vec::new();
    for (i, p) in csv_rows(text, "--query-compute-apps", 4)?.into_iter().enumerate() {
        let p = fix_columns(p, 4, 1);
        let pid = p[0]
            .parse::<u32>()
            .map_err(|_| format!("--query-compute-apps: line {}: pid {:?} is not a number", i + 2, p[0]))?;
        out.push(GpuProcess {
            pid,
            process_name: p[1].clone(),
            used_memory_mib: num(&p[2]),
            gpu_uuid: p[3].clone(),
            gpu_index: None,
            on_target: false,
        });
    }
    Ok(out)
}

/// `CUDA Version : 13.0` (from `nvidia-smi --version`) or `CUDA Version: 13.0` (the table header).
pub fn parse_cuda_version(text: &str) -> Option<String> {
    let i = text.find("CUDA Version")?;
    let rest = text[i + "CUDA Version".len()..].trim_start().strip_prefix(':')?.trim_start();
    let v: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    (!v.is_empty()).then_some(v)
}

fn unavailable(reason: String, smi: Option<&Path>, target_source: &str) -> GpuState {
    GpuState {
        status: "unavailable".into(),
        reason: Some(reason),
        nvidia_smi: smi.map(|p| p.display().to_string()),
        driver_version: None,
        cuda_version: None,
        targets: vec![],
        target_source: target_source.into(),
        gpus: vec![],
        processes: vec![],
    }
}

/// Query GPUs and compute processes with nvidia-smi (`smi`, else `nvidia-smi` on PATH) and mark the targets.
/// Never an error: a missing or failing nvidia-smi gives `status: unavailable` with the reason.
pub fn query_gpus(smi: Option<&Path>, target: &TargetSpec, timeout: Duration) -> GpuState {
    let source = match target {
        TargetSpec::Index(_) => "--gpu",
        TargetSpec::Visible(_) => "CUDA_VISIBLE_DEVICES",
        TargetSpec::All => "all",
    };
    let smi: PathBuf = match smi {
        Some(p) => p.to_path_buf(),
        None => match which::which("nvidia-smi") {
            Ok(p) => p,
            Err(_) => return unavailable("no nvidia-smi on PATH".into(), None, source),
        },
    };
    let run = |args: &[&str]| -> Result<String, String> {
        let o = run_with_timeout(&smi, args, timeout).map_err(|e| format!("`nvidia-smi {}` {e}", args.join(" ")))?;
        if !o.status.success() {
            let msg = format!("{}{}", o.stdout, o.stderr);
            let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
            return Err(format!(
                "`nvidia-smi {}` exited with {}: {}",
                args.join(" "),
                o.status,
                msg.chars().take(300).collect::<String>()
            ));
        }
        Ok(o.stdout)
    };
    let gpus = match run(&[&format!("--query-gpu={GPU_QUERY}"), "--format=csv"]).and_then(|t| parse_gpus(&t)) {
        Ok(g) => g,
        Err(e) => return unavailable(e, Some(&smi), source),
    };
    let mut procs =
        match run(&[&format!("--query-compute-apps={APPS_QUERY}"), "--format=csv"]).and_then(|t| parse_apps(&t)) {
            Ok(p) => p,
            Err(e) => return unavailable(e, Some(&smi), source),
        };
    let cuda_version = run(&["--version"])
        .ok()
        .and_then(|t| parse_cuda_version(&t))
        .or_else(|| run(&[]).ok().and_then(|t| parse_cuda_version(&t)));
    let mut gpus = gpus;
    query_clocks(&smi, &mut gpus, timeout);
    let targets: Vec<u32> = match target {
        TargetSpec::Index(i) => vec![*i],
        TargetSpec::All => gpus.iter().map(|g| g.index).collect(),
        TargetSpec::Visible(v) => v
            .split(',')
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .filter_map(|s| match s.parse::<u32>() {
                Ok(i) => Some(i),
                Err(_) => gpus
                    .iter()
                    .find(|g| g.uuid.starts_with(s) || g.uuid.strip_prefix("GPU-").is_some_and(|u| u.starts_with(s)))
                    .map(|g| g.index),
            })
            .collect(),
    };
    for g in &mut gpus {
        g.target = targets.contains(&g.index);
    }
    let by_uuid: HashMap<&str, (u32, bool)> = gpus.iter().map(|g| (g.uuid.as_str(), (g.index, g.target))).collect();
    for p in &mut procs {
        if let Some((i, t)) = by_uuid.get(p.gpu_uuid.as_str()) {
            p.gpu_index = Some(*i);
            p.on_target = *t;
        }
    }
    GpuState {
        status: "available".into(),
        reason: None,
        nvidia_smi: Some(smi.display().to_string()),
        driver_version: gpus.first().map(|g| g.driver_version.clone()),
        cuda_version,
        targets,
        target_source: source.into(),
        gpus,
        processes: procs,
    }
}

/// A process that holds a socket or a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Holder {
    pub pid: u32,
    /// `/proc/PID/comm`.
    pub command: String,
    /// `/proc/PID/cmdline`, arguments joined by spaces (may be empty when unreadable).
    pub cmdline: String,
}

/// A listening TCP socket on the port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Listener {
    /// `127.0.0.1:8000`, `[::]:8000`.
    pub local_address: String,
    /// Owner uid of the socket.
    pub uid: u32,
    pub inode: u64,
    /// The processes with the socket open (empty when their `/proc/PID/fd` is not readable).
    pub holders: Vec<Holder>,
}

/// Is a TCP port free?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PortState {
    pub port: u16,
    /// No socket listens on it (any address, IPv4 or IPv6).
    pub free: bool,
    pub listeners: Vec<Listener>,
}

fn parse_addr(hex: &str, v6: bool) -> Option<(String, u16)> {
    let (ip, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let addr = if !v6 {
        let n = u32::from_str_radix(ip, 16).ok()?;
        std::net::Ipv4Addr::from(n.to_le_bytes()).to_string()
    } else {
        if ip.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for w in 0..4 {
            let word = u32::from_str_radix(&ip[w * 8..w * 8 + 8], 16).ok()?;
            bytes[w * 4..w * 4 + 4].copy_from_slice(&word.to_le_bytes());
        }
        format!("[{}]", std::net::Ipv6Addr::from(bytes))
    };
    Some((addr, port))
}

/// The LISTEN sockets of `/proc/net/tcp{,6}` text: `(local_address, port, uid, inode)`.
pub fn parse_proc_net_tcp(text: &str, v6: bool) -> Vec<(String, u16, u32, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((addr, port)) = parse_addr(f[1], v6) else { continue };
        let uid = f[7].parse().unwrap_or(0);
        let inode = f[9].parse().unwrap_or(0);
        out.push((format!("{addr}:{port}"), port, uid, inode));
    }
    out
}

fn holder(pid: u32) -> Holder {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    Holder { pid, command: comm, cmdline }
}

fn pids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Is `port` free? Reads `/proc/net/tcp` and `/proc/net/tcp6`, then `/proc/*/fd` for who holds each socket.
pub fn check_port(port: u16) -> Result<PortState, String> {
    let mut listeners: Vec<Listener> = Vec::new();
    let mut read_any = false;
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        read_any = true;
        for (addr, p, uid, inode) in parse_proc_net_tcp(&text, v6) {
            if p == port {
                listeners.push(Listener { local_address: addr, uid, inode, holders: vec![] });
            }
        }
    }
    if !read_any {
        return Err("cannot read /proc/net/tcp or /proc/net/tcp6".into());
    }
    if !listeners.is_empty() {
        let wanted: HashMap<String, usize> =
            listeners.iter().enumerate().map(|(i, l)| (format!("socket:[{}]", l.inode), i)).collect();
        for pid in pids() {
            let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let Ok(target) = std::fs::read_link(e.path()) else { continue };
                if let Some(&i) = wanted.get(target.to_string_lossy().as_ref()) {
                    if !listeners[i].holders.iter().any(|h| h.pid == pid) {
                        listeners[i].holders.push(holder(pid));
                    }
                }
            }
        }
    }
    Ok(PortState { port, free: listeners.is_empty(), listeners })
}

/// A shared-memory segment under `/dev/shm` that matches the pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShmSegment {
    pub path: String,
    pub size: u64,
    /// Last modification, RFC 3339 UTC.
    pub modified: Option<String>,
    /// Processes that have it open or mapped.
    pub holders: Vec<Holder>,
    /// No process has it open or mapped: left behind by a process that is gone.
    pub stale: bool,
}

/// Stale shared-memory segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShmState {
    /// The pattern as given.
    pub pattern: String,
    /// `glob` or `regex` (a pattern written `re:…`).
    pub syntax: String,
    pub dir: String,
    pub segments: Vec<ShmSegment>,
    pub stale: usize,
}

/// Segments in `dir` (normally `/dev/shm`) whose name matches `pattern`: a shell glob (`vllm_*`), or a regex
/// when written `re:…` (searched, not anchored). A leading `/dev/shm/` in a glob is ignored.
pub fn check_shm(dir: &Path, pattern: &str) -> Result<ShmState, String> {
    let (syntax, re) = match pattern.strip_prefix("re:") {
        Some(r) => ("regex", regex::Regex::new(r).map_err(|e| format!("--shm: bad regex {r:?}: {e}"))?),
        None => {
            let g = pattern.strip_prefix(&format!("{}/", dir.display())).unwrap_or(pattern);
            ("glob", glob_regex(g))
        }
    };
    let rd = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut segs: Vec<ShmSegment> = Vec::new();
    let mut names: Vec<(String, std::fs::Metadata)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.metadata().ok()?)))
        .filter(|(n, m)| re.is_match(n) && m.is_file())
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    if names.is_empty() {
        return Ok(ShmState {
            pattern: pattern.into(),
            syntax: syntax.into(),
            dir: dir.display().to_string(),
            segments: vec![],
            stale: 0,
        });
    }
    let paths: Vec<String> = names.iter().map(|(n, _)| dir.join(n).display().to_string()).collect();
    let mut holders: Vec<Vec<Holder>> = vec![vec![]; paths.len()];
    let index: HashMap<&str, usize> = paths.iter().enumerate().map(|(i, p)| (p.as_str(), i)).collect();
    for pid in pids() {
        let mut hit: Vec<usize> = Vec::new();
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for e in rd.filter_map(|e| e.ok()) {
                if let Ok(t) = std::fs::read_link(e.path()) {
                    let t = t.to_string_lossy();
                    let t = t.strip_suffix(" (deleted)").unwrap_or(&t);
                    if let Some(&i) = index.get(t) {
                        hit.push(i);
                    }
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for l in maps.lines() {
                if let Some(pos) = l.find(&format!("{}/", dir.display())) {
                    let t = l[pos..].trim_end();
                    let t = t.strip_suffix(" (deleted)").unwrap_or(t);
                    if let Some(&i) = index.get(t) {
                        hit.push(i);
                    }
                }
            }
        }
        hit.sort();
        hit.dedup();
        for i in hit {
            holders[i].push(holder(pid));
        }
    }
    for (((_, m), p), h) in names.into_iter().zip(paths).zip(holders) {
        let modified = m.modified().ok().map(super::record::rfc3339);
        segs.push(ShmSegment { path: p, size: m.len(), modified, stale: h.is_empty(), holders: h });
    }
    let stale = segs.iter().filter(|s| s.stale).count();
    Ok(ShmState {
        pattern: pattern.into(),
        syntax: syntax.into(),
        dir: dir.display().to_string(),
        segments: segs,
        stale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU_IDLE: &str = include_str!("../../fixtures/nvidia-smi/query_gpu_idle.csv");
    const APPS_FOREIGN: &str = include_str!("../../fixtures/nvidia-smi/query_compute_apps_foreign.csv");
    const APPS_IDLE: &str = include_str!("../../fixtures/nvidia-smi/query_compute_apps_idle.csv");
    const VERSION: &str = include_str!("../../fixtures/nvidia-smi/version.txt");
    const TABLE: &str = include_str!("../../fixtures/nvidia-smi/nvidia-smi_idle.txt");

    #[test]
    fn real_nvidia_smi_csv() {
        let g = parse_gpus(GPU_IDLE).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].name, "NVIDIA H200");
        assert_eq!(g[0].uuid, "GPU-d88ae72a-a315-b2b5-471e-023b73e1019d");
        assert_eq!(g[0].driver_version, "580.159.04");
        assert_eq!((g[0].memory_used_mib, g[0].memory_total_mib), (Some(0), Some(143771)));
        assert_eq!((g[0].sm_clock_mhz, g[0].sm_clock_max_mhz), (Some(375), Some(1980)));
        let a = parse_apps(APPS_FOREIGN).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].pid, a[0].process_name.as_str(), a[0].used_memory_mib), (433, "python3", Some(10758)));
        assert!(parse_apps(APPS_IDLE).unwrap().is_empty());
        assert_eq!(parse_cuda_version(VERSION).as_deref(), Some("13.0"));
        assert_eq!(parse_cuda_version(TABLE).as_deref(), Some("13.0"));
        assert!(parse_gpus("index, uuid\n0, x\n").unwrap_err().contains("header has 2 columns"));
    }

    #[test]
    fn clock_policy_answer() {
        // the real H200 answer (driver 580.159.04, idle: reason 0x1 = GPU idle); both query names answer it
        let c = parse_clocks(include_str!("../../fixtures/nvidia-smi/query_clocks.csv")).unwrap();
        assert_eq!(c, vec![(0, Some("0x0000000000000001".into()), Some(1980), Some(3201))]);
        // a GPU without the figures prints [N/A] (edge case, synthetic line in the same form)
        let na = "index, clocks_event_reasons.active, clocks.applications.graphics [MHz], clocks.applications.memory [MHz]\n1, [N/A], [N/A], [N/A]\n";
        assert_eq!(parse_clocks(na).unwrap(), vec![(1, None, None, None)]);
        assert!(parse_clocks("index\n0\n").is_err());
    }

    #[test]
    fn proc_net_tcp() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F91 0100007F:9999 01 00000000:00000000 00:00000000 00000000  1000        0 12346 1\n";
        let l = parse_proc_net_tcp(t, false);
        assert_eq!(l, vec![("127.0.0.1:8080".to_string(), 8080, 1000, 12345)]);
        let t6 = "hdr\n   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1\n";
        assert_eq!(parse_proc_net_tcp(t6, true), vec![("[::]:8080".to_string(), 8080, 0, 777)]);
    }
}
