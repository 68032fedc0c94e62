//! Checks made before the capture (the engine's nsys arguments, CUPTI beside nsys's injection library, the
//! driver's CUDA version against nsys, the size gate before `nsys stats`) and after it (which process
//! triggered the capture range), each a refusal or a finding with what was read.

use super::*;

/// The value of an nsys option in a command line (`--name=V`, or `--name V`), first of `names` that is given.
pub fn nsys_option(cmdline: &str, names: &[&str]) -> Option<String> {
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    for name in names {
        for (i, w) in words.iter().enumerate() {
            if let Some(v) = w.strip_prefix(&format!("{name}=")) {
                return Some(v.to_string());
            }
            if w == name {
                return words.get(i + 1).map(|x| x.to_string());
            }
        }
    }
    None
}

/// A30 (seed gotcha 1): the engine's nsys (the `nsys profile`/`nsys launch` it runs under) must trace CUDA
/// graphs node by node, else graph-resident kernels are one opaque `GRAPH_TRACE` row and `cuda_gpu_kern_sum`
/// misses them. The engine gets one capture per start (`--capture-range-end=stop`), so this is refused before
/// the capture, not found after it by gate-check's G1. Returns the value read (`node…`).
pub fn check_graph_trace(nsys: &ProcEntry) -> Result<String> {
    match nsys_option(&nsys.cmdline, &["--cuda-graph-trace"]) {
        Some(v) if v == "node" || v.starts_with("node:") => Ok(v),
        got => Err(Error::env(format!(
            "refused before the capture: the engine's nsys (PID {}) runs without --cuda-graph-trace=node ({}): CUDA-graph \
             kernels would be one opaque GRAPH_TRACE row each and missing from cuda_gpu_kern_sum (the seed's gotcha 1), and \
             the engine gets one capture per start. Fix: restart the engine under nsys with --cuda-graph-trace=node. \
             Command line: {}",
            nsys.pid,
            match got {
                Some(v) => format!("--cuda-graph-trace={v}"),
                None => "the flag is absent: nsys traces whole graphs".into(),
            },
            nsys.cmdline
        ))),
    }
}

/// Lists, through the engine's root (`/proc/$1/root`), the `libcupti.so*` files in folder `$2` (the folder of
/// the engine's `CUDA_INJECTION64_PATH`, where nsys keeps the CUPTI it loads), then the `libcupti` files the
/// engine maps. Output lines: `file<TAB>NAME`, `mapped<TAB>PATH`, and `dir<TAB>missing` when `$2` cannot be read.
pub const CUPTI_CHECK_SCRIPT: &str = r#"r=/proc/$1/root
if [ -n "$2" ]; then
  if ls -1 "$r$2" > /dev/null 2>&1; then
    ls -1 "$r$2" | grep '^libcupti\.so' | sed 's/^/file	/'
  else
    echo "dir	missing"
  fi
fi
grep -o '/[^ ]*libcupti[^ ]*' "/proc/$1/maps" 2>/dev/null | sort -u | sed 's/^/mapped	/'
true"#;

/// The argv of [`CUPTI_CHECK_SCRIPT`] for engine `pid` and the injection folder `dir` (may be empty).
pub fn argv_cupti_check(pid: &str, dir: &str) -> Vec<String> {
    s(&["sh", "-c", CUPTI_CHECK_SCRIPT, "nsyskit-cupti-check", pid, dir])
}

/// A47: what pod-attach found of CUPTI in the engine's container before the capture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CuptiCheck {
    /// The folder of nsys's injection library (`CUDA_INJECTION64_PATH`), where its `libcupti.so*` must be.
    pub dir: Option<String>,
    /// That folder could not be read in the engine's container.
    pub dir_missing: bool,
    /// `libcupti.so*` files in it.
    pub files: Vec<String>,
    /// `libcupti` files the engine has mapped (`/proc/PID/maps`).
    pub mapped: Vec<String>,
}

/// Parse [`CUPTI_CHECK_SCRIPT`]'s output.
pub fn parse_cupti_check(dir: Option<&str>, text: &str) -> CuptiCheck {
    let mut c = CuptiCheck { dir: dir.map(String::from), ..Default::default() };
    for line in text.lines() {
        match line.split_once('\t') {
            Some(("file", f)) => c.files.push(f.trim().to_string()),
            Some(("mapped", p)) => c.mapped.push(p.trim().to_string()),
            Some(("dir", "missing")) => c.dir_missing = true,
            _ => {}
        }
    }
    c
}

/// The major of a `libcupti.so.MAJOR[.MINOR]` name or path.
pub fn cupti_major(name: &str) -> Option<u64> {
    let base = name.rsplit('/').next()?;
    base.strip_prefix("libcupti.so.")?.split('.').next()?.parse().ok()
}

/// A47's findings: no `libcupti` beside nsys's injection library (nsys cannot start CUPTI: the capture holds no
/// CUDA rows), or none new enough for the driver's CUDA major (the seed's Gate 0: a CUDA 12 CUPTI on a CUDA 13
/// driver fails with `CUPTI_ERROR_INVALID_DEVICE`, 0 kernels whatever else is right).
pub fn cupti_findings(c: &CuptiCheck, driver_cuda_major: Option<u64>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(dir) = &c.dir else {
        return out;
    };
    if c.dir_missing {
        out.push(format!(
            "libcupti: the folder of the engine's CUDA_INJECTION64_PATH ({dir}) cannot be read in the engine's container: \
             nsys's CUPTI cannot load there, the capture would hold no CUDA rows"
        ));
        return out;
    }
    if c.files.is_empty() {
        out.push(format!(
            "libcupti: no libcupti.so* beside nsys's injection library in {dir} (engine's container): nsys cannot start \
             CUPTI, the capture would hold no CUDA rows; use a complete Nsight Systems install"
        ));
        return out;
    }
    if let Some(m) = driver_cuda_major {
        let newest = c.files.iter().chain(&c.mapped).filter_map(|f| cupti_major(f)).max();
        if let Some(n) = newest.filter(|n| *n < m) {
            out.push(format!(
                "libcupti: the newest CUPTI beside nsys in {dir} is {n}.x, older than the driver's CUDA {m}: CUPTI from an \
                 older CUDA major fails to initialize (the seed's Gate 0: CUPTI_ERROR_INVALID_DEVICE, 0 kernels); use an \
                 nsys built for CUDA {m}"
            ));
        }
    }
    out
}

/// A53: the driver as read in a container: `nvidia-smi --version` (driver and CUDA version), else
/// `/proc/driver/nvidia/version` (the kernel module's version; the CUDA major is derived from it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DriverInfo {
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, as nvidia-smi prints it.
    pub cuda_version: Option<String>,
    /// The CUDA major the driver supports: nvidia-smi's, else derived from the driver version
    /// ([`cuda_major_for_driver`]).
    pub cuda_major: Option<u64>,
    /// Where it was read: `nvidia-smi --version`, `/proc/driver/nvidia/version`, or why neither could be.
    pub source: String,
}

/// The argv that read the driver: `nvidia-smi --version`, then `cat /proc/driver/nvidia/version`.
pub fn argv_driver_queries() -> [Vec<String>; 2] {
    [s(&["nvidia-smi", "--version"]), s(&["cat", "/proc/driver/nvidia/version"])]
}

/// The CUDA major a driver branch supports: CUDA 13.0 needs driver ≥ 580, CUDA 12.0 ≥ 525, CUDA 11.0 ≥ 450
/// (NVIDIA's CUDA toolkit release notes, minimum driver per toolkit; a newer toolkit major needs a newer driver
/// branch).
pub fn cuda_major_for_driver(driver_version: &str) -> Option<u64> {
    let branch: u64 = driver_version.split('.').next()?.trim().parse().ok()?;
    [(580, 13), (525, 12), (450, 11)].iter().find(|(b, _)| branch >= *b).map(|(_, m)| *m)
}

/// Parse `nvidia-smi --version` (`DRIVER version : 580.159.04`, `CUDA Version : 13.0`) or
/// `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  …`).
pub fn parse_driver(text: &str, source: &str) -> Option<DriverInfo> {
    let mut d = DriverInfo { source: source.into(), ..Default::default() };
    for line in text.lines() {
        let l = line.trim();
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "driver version" && d.driver_version.is_none() {
                d.driver_version = v.split_whitespace().next().map(String::from);
            }
            if k == "cuda version" {
                d.cuda_version = v.split_whitespace().next().map(String::from);
            }
        }
        if l.starts_with("NVRM version:") {
            // `NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build …`
            d.driver_version = l
                .split_whitespace()
                .find(|w| {
                    w.contains('.') && w.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                })
                .map(String::from);
        }
    }
    d.cuda_major = d
        .cuda_version
        .as_deref()
        .and_then(|v| v.split('.').next()?.parse().ok())
        .or_else(|| d.driver_version.as_deref().and_then(cuda_major_for_driver));
    (d.driver_version.is_some() || d.cuda_version.is_some()).then_some(d)
}

/// A53's findings: the nsys that will run (`which`) against the driver's CUDA major
/// ([`crate::nsys_resolve::nsys_too_old_for_driver`]); with `--install-nsys apt` on a CUDA ≥ 13 driver, the seed's
/// "do not rely on an apt-installed Nsight Systems build for this CUDA 13 path".
pub fn driver_findings(which: &str, nsys_version: Option<&str>, d: &DriverInfo, apt: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Some(major) = d.cuda_major else {
        return out;
    };
    let cuda = d.cuda_version.clone().unwrap_or_else(|| major.to_string());
    match nsys_version {
        Some(v) => {
            if let Some(r) = crate::nsys_resolve::nsys_too_old_for_driver(v, &cuda) {
                out.push(format!("{which}: {r} (driver {})", d.driver_version.as_deref().unwrap_or("?")));
            }
        }
        None => {
            out.push(format!("{which}: its version is unknown, so it cannot be compared with the driver's CUDA {cuda}"))
        }
    }
    if apt && major >= 13 {
        out.push(format!(
            "--install-nsys apt on a CUDA {cuda} driver: the seed's GB300 path says not to rely on an apt-installed Nsight \
             Systems for CUDA 13; copy a Blackwell-capable nsys from an approved CUDA 13 image (--nsys-source-image)"
        ));
    }
    out
}

/// A58: the report's size against the size gate (G2's threshold) before `nsys stats` runs: `Err(reason)` when
/// the report is under it (the seed: never run stats on a tiny rep).
pub fn size_gate(report_bytes: u64, min_rep_bytes: u64) -> std::result::Result<(), String> {
    if report_bytes < min_rep_bytes {
        Err(format!(
            "size gate: the report is {report_bytes} bytes, under {min_rep_bytes} (G2, --min-rep-bytes): an idle or failed \
             capture; nsys stats not run (the seed: never run stats on a tiny rep)"
        ))
    } else {
        Ok(())
    }
}

/// The argv of `stat -c %s -- FILE` (the report's size in the container, before `nsys stats`).
pub fn argv_size_of(file: &str) -> Vec<String> {
    s(&["stat", "-c", "%s", "--", file])
}

/// B72: which process called `cudaProfilerStart` (`cuProfilerStart`) in the copied export.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureTrigger {
    /// The engine PID pod-attach resolved (the CUDA owner).
    pub engine_pid: u32,
    /// PIDs of the processes with a `cudaProfilerStart`/`cuProfilerStart` runtime row, ascending.
    pub trigger_pids: Vec<i64>,
    /// PIDs of the processes with CUDA device rows (kernels), ascending.
    pub kernel_pids: Vec<i64>,
    /// `true`: the trigger came from the engine PID; `false`: from another process; `null`: no trigger row
    /// (unknown, e.g. a timed capture or an export without CUDA rows).
    pub from_engine: Option<bool>,
}

fn is_profiler_start(name: &str) -> bool {
    matches!(name, "cudaProfilerStart" | "cuProfilerStart") || name.starts_with("cudaProfilerStart_v")
}

/// Read the capture trigger of the export `sqlite` (read-only, through the export layer).
pub fn capture_trigger(sqlite: &Path, engine_pid: u32) -> Result<CaptureTrigger> {
    let ex = crate::export::Export::open(sqlite)?;
    let ids = ex.string_ids_where(|s| is_profiler_start(s).then_some(()))?;
    let mut trig = BTreeSet::new();
    let mut skips = Default::default();
    ex.runtime_calls(&mut skips, |r| {
        if let (Some(n), Some(t)) = (r.name_id, r.global_tid) {
            if ids.contains_key(&n) {
                trig.insert(crate::export::pid_of(t));
            }
        }
        Ok(())
    })?;
    let mut kern = BTreeSet::new();
    ex.device_rows(crate::export::schema::DeviceKind::Kernel, &mut skips, |d| {
        if let Some(p) = d.global_pid {
            kern.insert(crate::export::pid_of(p));
        }
        Ok(())
    })?;
    let from_engine = (!trig.is_empty()).then(|| trig.iter().all(|p| *p == engine_pid as i64));
    Ok(CaptureTrigger {
        engine_pid,
        trigger_pids: trig.into_iter().collect(),
        kernel_pids: kern.into_iter().collect(),
        from_engine,
    })
}

/// B72's finding: the capture range was armed by a process other than the CUDA owner (the serving manual: a
/// capture armed in the wrong process gives the empty-kernel symptom), or no trigger row was found.
pub fn trigger_finding(t: &CaptureTrigger) -> Option<String> {
    match t.from_engine {
        Some(true) => None,
        Some(false) => Some(format!(
            "capture trigger: cudaProfilerStart came from PID {:?}, not the CUDA-owning engine PID {} pod-attach resolved \
             (kernels from PID {:?}): a capture armed in the wrong process can miss the engine's kernels (serving manual: \
             arm --capture-range=cudaProfilerApi from the CUDA-owning process)",
            t.trigger_pids, t.engine_pid, t.kernel_pids
        )),
        None => Some(format!(
            "capture trigger: unknown, the export has no cudaProfilerStart row, so it cannot show that the CUDA-owning \
             engine PID {} armed the capture",
            t.engine_pid
        )),
    }
}

/// The nsys version that wrote the export `sqlite` (its metadata), when readable.
pub fn report_nsys_version(sqlite: &Path) -> Option<String> {
    crate::export::Export::open(sqlite).ok()?.nsys_version().ok().flatten()
}
