//! The engine PID from a `/proc` listing, the engine's nsys arguments, its environment checks, report listings.

use super::*;

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
