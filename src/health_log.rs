//! Profiler-health lines for Gate 0: what PyTorch's profiler (kineto), nsys and the driver really write, and
//! what each line is evidence for or against. Pure: lines in, findings and a diagnosis out.
//!
//! Lines understood (real ones are in fixtures/logs/, each test below names its file):
//!
//! | line | class | meaning |
//! |---|---|---|
//! | `INFO:… CuptiActivityProfiler.cpp:245] CUDA versions. CUPTI: 130001; Runtime: 13000; Driver: 13000` (kineto; CUDA 12 builds print `CUPTI: 26`) | `versions` | runtime/driver as 1000·major + 10·minor (12090 = 12.9); CUPTI's number is kept as printed |
//! | `CUDA versions. CUPTI/Runtime/Driver: 12.4 / 13.0 / 12.2` (dotted, as an operator may write it) | `versions` | dotted versions |
//! | `Loaded CUPTI library: …/libcupti.so.13.0` (nsys 2025 DIAGNOSTIC_EVENT) | `versions` | nsys's own CUPTI major.minor |
//! | `CudaDriverVersion` of the export's TARGET_INFO_SYSTEM_ENV (`13000`) | `versions` | the driver's CUDA version ([`driver_version_from_export`]) |
//! | `CUPTI_ERROR_INVALID_DEVICE`, `CUPTI_ERROR_NOT_INITIALIZED`, any other `CUPTI_ERROR_*` | `cupti-error` | CUPTI failed; with a toolkit-vs-driver major skew that skew is the cause |
//! | `CUPTI initialization failed - CUDA profiler activities will be missing` (kineto) | `cupti-init-failed` | the profiler that printed it has no CUDA data |
//! | `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)` (kineto under nsys, real) | `cupti-conflict` | a second CUPTI client in one process: the one that printed it lost |
//! | `ERR_NVGPUCTRPERM`, `RmProfilingAdminOnly: 1`, `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES` | `permission` | profiling restricted to admins |
//! | `RmProfilingAdminOnly: 0` (`/proc/driver/nvidia/params`, real) | `permission-ruled-out` | evidence AGAINST a permission cause |
//! | `If you see CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, refer to …` (kineto's hint, real) | none | advice printed on every failure, not an error |
//! | `CUDA_INJECTION64_PATH=/x/libinjector.so` (a log, provenance, the export's environment) | `injection` | a foreign CUDA injection library (nsys's own `libToolsInjection*` is not one) |
//! | `Unknown runtime API function index: 468` (nsys 2023.4 on CUDA 12.5+, real) | `unknown-runtime-api` | nsys older than the CUDA runtime dropped CUDA data |
//! | `**** Analysis failed with:`, `Errors occurred while processing the raw events`, `Error when processing events: … ProcessEventsError` (nsys 2025.3.1 DIAGNOSTIC_EVENT, severity Warning, real: JAX/XLA, fixtures/nsys-2025.3.1/jax_decode), `Cannot find string for an exterior index` | `analysis-failed` | nsys's own analysis failed: the report is incomplete (e.g. NVTX ranges named `[Unknown]`) |
//! | `NVTX binary payload extension is incompatible. Provided compatibility ID 260 != 259.` (nsys 2023.4 with pip nvtx 0.2.17, real) | `nvtx-incompatible` | nsys dropped the NVTX ranges |
use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

/// How much a finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Evidence, for or against a cause.
    Info,
    /// Worth knowing; not a reason to re-capture by itself.
    Warning,
    /// The capture (or the profiler that printed it) lost data.
    Error,
}

/// One line that matters, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct LogFinding {
    /// See the module table: `versions`, `cupti-error`, `cupti-init-failed`, `cupti-conflict`, `permission`,
    /// `permission-ruled-out`, `injection`, `unknown-runtime-api`, `analysis-failed`, `nvtx-incompatible`,
    /// `diagnostic-error`.
    pub class: &'static str,
    pub severity: Severity,
    /// `FILE:LINE`, `EXPORT: DIAGNOSTIC_EVENT t=… ns`, …
    pub at: String,
    /// The line (or the part of a long line that matched).
    pub text: String,
}

/// A CUDA version as major.minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion {
    pub major: u32,
    pub minor: u32,
}

/// A CUDA version and the log line (`path:line`) it was read from.
pub type VersionAt = (CudaVersion, String);

impl CudaVersion {
    /// kineto's and CUDA's integer form, 1000·major + 10·minor: 12090 → 12.9, 13000 → 13.0.
    pub fn from_int(n: u64) -> Option<CudaVersion> {
        (1000..1_000_000)
            .contains(&n)
            .then_some(CudaVersion { major: (n / 1000) as u32, minor: ((n % 1000) / 10) as u32 })
    }

    /// `12.9`, `13.0.2`, `12` (a number of 100 or more, e.g. a driver release 580.159, is not a CUDA version).
    pub fn parse_dotted(s: &str) -> Option<CudaVersion> {
        let mut it = s.trim().split('.');
        let major: u32 = it.next()?.parse().ok()?;
        let minor: u32 = it.next().map(|m| m.parse().ok()).unwrap_or(Some(0))?;
        (major < 100).then_some(CudaVersion { major, minor })
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One versions line.
#[derive(Debug, Clone, PartialEq)]
pub struct Versions {
    pub at: String,
    /// `kineto`, `dotted`, `nsys-cupti-library`, `export`.
    pub form: &'static str,
    /// CUPTI's version as printed (kineto prints an API number: 26 for CUDA 12.x, 130001 for 13.0).
    pub cupti: Option<String>,
    pub runtime: Option<CudaVersion>,
    pub driver: Option<CudaVersion>,
}

/// A CUDA_INJECTION64_PATH that is not nsys's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    pub at: String,
    pub path: String,
}

/// Everything read from one or more sources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthScan {
    pub findings: Vec<LogFinding>,
    pub versions: Vec<Versions>,
    /// `RmProfilingAdminOnly` values seen, with where.
    pub admin_only: Vec<(String, bool)>,
    pub injections: Vec<Injection>,
}

struct Patterns {
    kineto: Regex,
    dotted: Regex,
    nsys_cupti: Regex,
    cupti_error: Regex,
    cupti_init: Regex,
    perm: Regex,
    admin_only: Regex,
    injection: Regex,
    unknown_api: Regex,
    analysis: Regex,
    nvtx: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        kineto: Regex::new(r"CUDA versions\. CUPTI: *([0-9]+); *Runtime: *([0-9]+); *Driver: *([0-9]+)").unwrap(),
        dotted: Regex::new(r"CUPTI/Runtime/Driver[^0-9]*([0-9][0-9.]*)\D+?([0-9][0-9.]*)\D+?([0-9][0-9.]*)").unwrap(),
        nsys_cupti: Regex::new(r"Loaded CUPTI library: *\S*libcupti\.so\.([0-9]+(?:\.[0-9]+)?)").unwrap(),
        cupti_error: Regex::new(r"CUPTI_ERROR_[A-Z_]+").unwrap(),
        cupti_init: Regex::new(r"CUPTI initialization failed").unwrap(),
        perm: Regex::new(r"ERR_NVGPUCTRPERM").unwrap(),
        admin_only: Regex::new(r"RmProfilingAdminOnly\s*[:=]\s*([0-9]+)").unwrap(),
        injection: Regex::new(r#"CUDA_INJECTION64_PATH\s*[=:]\s*"?([^\s";]+)"#).unwrap(),
        unknown_api: Regex::new(r"Unknown runtime API function index: *([0-9]+)").unwrap(),
        analysis: Regex::new(
            r"Analysis failed|Errors occurred while processing the raw events|Error when processing events|Cannot find string for an exterior index",
        )
        .unwrap(),
        nvtx: Regex::new(r"NVTX binary payload extension is incompatible[^\\\n]*").unwrap(),
    })
}

/// nsys's own injection libraries (`libToolsInjection64.so`, `…Proxy64.so`, `…MemoryAllocator.so`).
pub fn is_nsys_injection(path: &str) -> bool {
    path.rsplit('/').next().unwrap_or(path).starts_with("libToolsInjection")
}

/// kineto prints a hint naming CUPTI_ERROR_INSUFFICIENT_PRIVILEGES after every CUPTI failure: not an error.
fn is_hint(line: &str) -> bool {
    line.contains("If you see ")
}

fn excerpt(line: &str, m: Option<regex::Match>) -> String {
    let line = line.trim();
    if let Some(m) = m {
        if line.len() > 200 {
            let start = line[..m.start()].char_indices().rev().nth(60).map(|(i, _)| i).unwrap_or(0);
            let end = (m.end() + 60).min(line.len());
            let end = (end..=line.len()).find(|&i| line.is_char_boundary(i)).unwrap_or(line.len());
            return format!("…{}…", &line[start..end]).replace("\\n", " ");
        }
    }
    line.chars().take(300).collect()
}

impl HealthScan {
    pub fn new() -> HealthScan {
        HealthScan::default()
    }

    fn push(&mut self, class: &'static str, severity: Severity, at: &str, line: &str, m: Option<regex::Match>) {
        self.findings.push(LogFinding { class, severity, at: at.to_string(), text: excerpt(line, m) });
    }

    /// Read one line. `error_severity`: the source itself calls the line an error (a DIAGNOSTIC_EVENT of
    /// severity Error), which makes an otherwise unknown line a `diagnostic-error`. Returns whether it matched.
    pub fn line(&mut self, at: &str, line: &str, error_severity: bool) -> bool {
        let p = patterns();
        let before = self.findings.len();
        if let Some(c) = p.kineto.captures(line) {
            self.versions.push(Versions {
                at: at.to_string(),
                form: "kineto",
                cupti: Some(c[1].to_string()),
                runtime: c[2].parse().ok().and_then(CudaVersion::from_int),
                driver: c[3].parse().ok().and_then(CudaVersion::from_int),
            });
            self.push("versions", Severity::Info, at, line, c.get(0));
        } else if let Some(c) = p.dotted.captures(line) {
            self.versions.push(Versions {
                at: at.to_string(),
                form: "dotted",
                cupti: Some(c[1].to_string()),
                runtime: CudaVersion::parse_dotted(&c[2]),
                driver: CudaVersion::parse_dotted(&c[3]),
            });
            self.push("versions", Severity::Info, at, line, c.get(0));
        }
        if let Some(c) = p.nsys_cupti.captures(line) {
            self.versions.push(Versions {
                at: at.to_string(),
                form: "nsys-cupti-library",
                cupti: Some(c[1].to_string()),
                runtime: None,
                driver: None,
            });
            self.push("versions", Severity::Info, at, line, c.get(0));
        }
        if let Some(m) = p.unknown_api.find(line) {
            self.push("unknown-runtime-api", Severity::Error, at, line, Some(m));
        }
        if !is_hint(line) {
            // the first CUPTI error of the line names it
            if let Some(m) = p.cupti_error.find(line) {
                let (class, sev) = match m.as_str() {
                    "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" => ("cupti-conflict", Severity::Error),
                    "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" => ("permission", Severity::Error),
                    _ => ("cupti-error", Severity::Error),
                };
                self.push(class, sev, at, line, Some(m));
            }
            if let Some(m) = p.perm.find(line) {
                // one finding per line and class (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: ERR_NVGPUCTRPERM` is one)
                if !self.findings[before..].iter().any(|f| f.class == "permission") {
                    self.push("permission", Severity::Error, at, line, Some(m));
                }
            }
        }
        if let Some(m) = p.cupti_init.find(line) {
            self.push("cupti-init-failed", Severity::Error, at, line, Some(m));
        }
        if let Some(c) = p.admin_only.captures(line) {
            let restricted = &c[1] != "0";
            self.admin_only.push((at.to_string(), restricted));
            if restricted {
                self.push("permission", Severity::Error, at, line, c.get(0));
            } else {
                self.push("permission-ruled-out", Severity::Info, at, line, c.get(0));
            }
        }
        for c in p.injection.captures_iter(line) {
            let path = c[1].to_string();
            if !is_nsys_injection(&path) && !path.is_empty() {
                self.injections.push(Injection { at: at.to_string(), path });
                self.push("injection", Severity::Warning, at, line, c.get(0));
            }
        }
        if let Some(m) = p.analysis.find(line) {
            self.push("analysis-failed", Severity::Error, at, line, Some(m));
        }
        if let Some(m) = p.nvtx.find(line) {
            self.push("nvtx-incompatible", Severity::Error, at, line, Some(m));
        }
        let matched = self.findings.len() > before;
        if !matched && error_severity {
            self.push("diagnostic-error", Severity::Error, at, line, None);
            return true;
        }
        matched
    }

    /// Read a whole console log; findings are at `PATH:LINE` (nsys's `\r` progress redraws split a line).
    pub fn text(&mut self, path: &str, text: &str) {
        for (i, line) in text.split('\n').enumerate() {
            for part in line.split('\r').filter(|p| !p.trim().is_empty()) {
                self.line(&format!("{path}:{}", i + 1), part, false);
            }
        }
    }

    /// Add the driver's CUDA version recorded by the export (TARGET_INFO_SYSTEM_ENV `CudaDriverVersion`).
    pub fn export_driver_version(&mut self, at: &str, value: &str) {
        if let Some(d) = driver_version_from_export(value) {
            self.versions.push(Versions {
                at: at.to_string(),
                form: "export",
                cupti: None,
                runtime: None,
                driver: Some(d),
            });
        }
    }

    /// Findings of one class.
    pub fn of(&self, class: &str) -> impl Iterator<Item = &LogFinding> {
        let class = class.to_string();
        self.findings.iter().filter(move |f| f.class == class)
    }

    fn has(&self, class: &str) -> bool {
        self.of(class).next().is_some()
    }

    /// The first runtime and driver versions known (from any line), and whether their majors differ.
    pub fn runtime_driver(&self) -> (Option<VersionAt>, Option<VersionAt>) {
        let rt = self.versions.iter().find_map(|v| v.runtime.map(|r| (r, v.at.clone())));
        let dr = self.versions.iter().find_map(|v| v.driver.map(|d| (d, v.at.clone())));
        (rt, dr)
    }

    /// `Some((runtime, driver))` when both are known and their CUDA majors differ.
    pub fn major_skew(&self) -> Option<(CudaVersion, CudaVersion)> {
        match self.runtime_driver() {
            (Some((r, _)), Some((d, _))) if r.major != d.major => Some((r, d)),
            _ => None,
        }
    }
}

/// Scan one console log.
pub fn scan_text(path: &str, text: &str) -> HealthScan {
    let mut s = HealthScan::new();
    s.text(path, text);
    s
}

/// `13000` → 13.0 (TARGET_INFO_SYSTEM_ENV `CudaDriverVersion`).
pub fn driver_version_from_export(value: &str) -> Option<CudaVersion> {
    value.trim().parse().ok().and_then(CudaVersion::from_int)
}

/// Whether the capture holds CUDA data, as far as the caller knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaData {
    /// Only logs were read.
    Unknown,
    /// CUDA tracing was on and the export holds CUDA API or kernel rows.
    Present,
    /// CUDA tracing was on and the export holds none.
    Missing,
}

/// What the lines say, as a gate needs it: RETRY when `causes` is not empty (the first is the likely one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diagnosis {
    pub causes: Vec<String>,
    /// Evidence for or against, and warnings that are no reason to re-capture.
    pub notes: Vec<String>,
    /// Findings that count as errors after weighing (e.g. kineto's conflict line when nsys's data is there is
    /// not an error of this capture).
    pub errors: Vec<LogFinding>,
}

impl Diagnosis {
    pub fn retry(&self) -> bool {
        !self.causes.is_empty()
    }
}

fn first_at(s: &HealthScan, class: &str) -> String {
    s.of(class).next().map(|f| f.at.clone()).unwrap_or_default()
}

/// Weigh the findings: name the likely cause first, never blame permission when `RmProfilingAdminOnly: 0`
/// is the only permission evidence, and name a toolkit-vs-driver major skew as such.
pub fn diagnose(s: &HealthScan, cuda: CudaData) -> Diagnosis {
    let mut d = Diagnosis::default();
    let conflict = s.has("cupti-conflict");
    for f in &s.findings {
        if f.severity != Severity::Error {
            continue;
        }
        // a second CUPTI client (torch.profiler inside an nsys capture) loses; nsys's own data is there
        if cuda == CudaData::Present && (f.class == "cupti-conflict" || (conflict && f.class == "cupti-init-failed")) {
            continue;
        }
        d.errors.push(f.clone());
    }
    let err = |class: &str| d.errors.iter().any(|f| f.class == class);
    let skew = s.major_skew();
    let (rt, dr) = s.runtime_driver();
    let admin0 = s.admin_only.iter().find(|(_, r)| !*r).map(|(at, _)| at.clone());
    let admin1 = s.admin_only.iter().any(|(_, r)| *r);
    let cupti_failed = err("cupti-error") || err("cupti-init-failed");
    let not_perm = admin0.as_ref().map(|at| format!("not permission: RmProfilingAdminOnly: 0 at {at}"));

    if err("unknown-runtime-api") {
        let p = patterns();
        let ids: std::collections::BTreeSet<String> = s
            .of("unknown-runtime-api")
            .filter_map(|f| p.unknown_api.captures(&f.text).map(|c| c[1].to_string()))
            .collect();
        d.causes.push(format!(
            "unknown-runtime-api (runtime API function index {}): nsys is older than the application's CUDA runtime and dropped CUDA data; profile with an nsys that knows this CUDA version (first at {})",
            ids.into_iter().collect::<Vec<_>>().join(", "),
            first_at(s, "unknown-runtime-api")
        ));
    }
    if let Some((r, dv)) = skew {
        if cupti_failed || cuda == CudaData::Missing {
            let why = if cupti_failed { "CUPTI failed to initialise" } else { "no CUDA data was recorded" };
            let mut c = format!(
                "toolkit-vs-driver major-version skew: CUDA runtime {r} vs driver {dv} ({why}); use an image whose CUDA major matches the driver's (a version skew, not capture hygiene)"
            );
            if let Some(n) = &not_perm {
                c.push_str(&format!("; {n}"));
            }
            d.causes.push(c);
        } else {
            d.notes.push(format!("toolkit-vs-driver major-version skew (CUDA runtime {r} vs driver {dv}) but no CUPTI error: watch for missing CUDA data"));
        }
    }
    if err("permission") {
        let mut c = format!(
            "permission ({}): GPU profiling is restricted to admin users; run as root or set the nvidia module option NVreg_RestrictProfilingToAdminUsers=0",
            s.of("permission").next().map(|f| f.at.as_str()).unwrap_or("")
        );
        if let Some(at) = &admin0 {
            if !admin1 {
                c.push_str(&format!(" (but RmProfilingAdminOnly: 0 at {at} says profiling is not restricted: check which machine each line is from)"));
            }
        }
        d.causes.push(c);
    }
    if err("cupti-conflict") {
        let mut c = format!(
            "cupti-conflict (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, {}): another CUPTI client held CUPTI in the same process (e.g. torch.profiler inside an nsys capture, or an injector); run one CUDA profiler at a time",
            first_at(s, "cupti-conflict")
        );
        if let Some(i) = s.injections.first() {
            c.push_str(&format!("; CUDA_INJECTION64_PATH={} was set ({})", i.path, i.at));
        }
        d.causes.push(c);
    }
    if let Some(i) = s.injections.first() {
        match cuda {
            CudaData::Missing if !err("cupti-conflict") => d.causes.push(format!(
                "foreign CUDA injection: CUDA_INJECTION64_PATH={} ({}) was set for the profiled process and no CUDA data was recorded; unset it for the capture (on the nsys process, never `-- env`)",
                i.path, i.at
            )),
            CudaData::Present => d.notes.push(format!(
                "CUDA_INJECTION64_PATH={} ({}) was set, CUDA was traced anyway (measured: nsys 2025.3.1 with an injector that does not use CUPTI); one that subscribes to CUPTI blocks the trace",
                i.path, i.at
            )),
            _ => d.notes.push(format!(
                "CUDA_INJECTION64_PATH={} ({}) is set: a third-party CUDA injector (e.g. a continuous profiler) that uses CUPTI blocks nsys's CUDA trace",
                i.path, i.at
            )),
        }
    }
    if cupti_failed && skew.is_none() {
        let name = s
            .of("cupti-error")
            .next()
            .and_then(|f| patterns().cupti_error.find(&f.text).map(|m| m.as_str().to_string()));
        let mut c = format!(
            "cupti-init ({}, {}): CUPTI failed, no CUDA data was collected by the profiler that printed it",
            name.unwrap_or_else(|| "CUPTI initialization failed".into()),
            d.errors
                .iter()
                .find(|f| f.class == "cupti-error" || f.class == "cupti-init-failed")
                .map(|f| f.at.as_str())
                .unwrap_or("")
        );
        match (&rt, &dr) {
            (Some((r, _)), Some((dv, _))) => c.push_str(&format!("; versions agree (CUDA runtime {r}, driver {dv}), so not a major-version skew")),
            _ => c.push_str("; no runtime/driver versions seen: look for kineto's `CUDA versions. CUPTI: …; Runtime: …; Driver: …` (KINETO_LOG_LEVEL=0) and compare the majors"),
        }
        if let Some(n) = &not_perm {
            c.push_str(&format!("; {n}"));
        }
        d.causes.push(c);
    }
    if err("nvtx-incompatible") {
        d.causes.push(format!(
            "nvtx-incompatible ({}): nsys could not read this NVTX library's payloads and dropped the ranges; use an NVTX library this nsys understands (measured: pip nvtx 0.2.17 under nsys 2023.4.4 records no range, 0.2.10 records all) or a newer nsys",
            first_at(s, "nvtx-incompatible")
        ));
    }
    if err("analysis-failed") {
        let why =
            if err("unknown-runtime-api") { " (explained by the unknown runtime API function above)" } else { "" };
        d.causes.push(format!(
            "analysis-failed ({}): nsys's analyser failed while importing the raw events, the report is incomplete{why}; re-capture (see the console log's error)",
            first_at(s, "analysis-failed")
        ));
    }
    if err("diagnostic-error") {
        d.causes.push(format!(
            "nsys reported an error ({}): read it before trusting the capture",
            first_at(s, "diagnostic-error")
        ));
    }
    if let (Some(at), false) = (&admin0, err("permission")) {
        d.notes.push(format!("RmProfilingAdminOnly: 0 ({at}): profiling is not restricted to admins (evidence against a permission cause)"));
    }
    if let (Some((r, ra)), Some((dv, da)), None) = (rt, dr, skew) {
        d.notes.push(format!("CUDA runtime {r} ({ra}) and driver {dv} ({da}) share a major version"));
    }
    if cuda == CudaData::Present && conflict {
        d.notes.push(format!(
            "{}: a second CUPTI client (e.g. torch.profiler) lost CUPTI to nsys; nsys's CUDA data is there",
            first_at(s, "cupti-conflict")
        ));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/logs").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn cuda_integer_versions() {
        assert_eq!(CudaVersion::from_int(12090), Some(CudaVersion { major: 12, minor: 9 }));
        assert_eq!(CudaVersion::from_int(13000).unwrap().to_string(), "13.0");
        assert_eq!(CudaVersion::from_int(11080).unwrap().to_string(), "11.8");
        assert_eq!(CudaVersion::from_int(26), None);
        assert_eq!(CudaVersion::parse_dotted("12.9"), Some(CudaVersion { major: 12, minor: 9 }));
        assert_eq!(CudaVersion::parse_dotted("580.159"), None);
    }

    #[test]
    fn real_kineto_versions_line() {
        // fixtures/logs/kineto-2.11.0_cupti13.console.txt: PyTorch 2.11 + CUDA 13 on driver 580 (KINETO_LOG_LEVEL=0)
        let s = scan_text("kineto.txt", &fixture("kineto-2.11.0_cupti13.console.txt"));
        assert_eq!(s.versions.len(), 1, "{:?}", s.versions);
        let v = &s.versions[0];
        assert_eq!(v.at, "kineto.txt:3");
        assert_eq!((v.form, v.cupti.as_deref()), ("kineto", Some("130001")));
        assert_eq!(v.runtime.unwrap().to_string(), "13.0");
        assert_eq!(v.driver.unwrap().to_string(), "13.0");
        assert!(s.major_skew().is_none());
        let d = diagnose(&s, CudaData::Unknown);
        assert!(!d.retry(), "{:?}", d);
        assert!(d.notes.iter().any(|n| n.contains("share a major version")), "{:?}", d.notes);
        // the CUDA 12 form of the issue: CUPTI 26, runtime 12.9, driver 13.0 = a major skew
        let s = scan_text("k.txt", "INFO:2026-01-01 1:1 CuptiActivityProfiler.cpp:245] CUDA versions. CUPTI: 26; Runtime: 12090; Driver: 13000\n");
        assert_eq!(s.major_skew().map(|(r, d)| (r.to_string(), d.to_string())), Some(("12.9".into(), "13.0".into())));
        // alone (no CUPTI error, data unknown): a note, not a RETRY
        let d = diagnose(&s, CudaData::Unknown);
        assert!(!d.retry() && d.notes[0].contains("toolkit-vs-driver major-version skew"), "{:?}", d);
        // with no CUDA data in the export: the skew is the cause
        let d = diagnose(&s, CudaData::Missing);
        assert!(
            d.causes[0].starts_with("toolkit-vs-driver major-version skew: CUDA runtime 12.9 vs driver 13.0"),
            "{:?}",
            d
        );
    }

    #[test]
    fn skew_with_cupti_invalid_device_is_named_as_skew_not_permission() {
        // the seed's GB300 case: CUPTI_ERROR_INVALID_DEVICE, 12.9 toolkit on a 13.0 driver, RmProfilingAdminOnly: 0
        let log = "INFO:2026-01-01 1:1 CuptiActivityProfiler.cpp:245] CUDA versions. CUPTI: 26; Runtime: 12090; Driver: 13000\n\
                   WARNING:2026-01-01 1:1 init.cpp:116] function cbapi->getCuptiStatus() failed with error CUPTI_ERROR_INVALID_DEVICE (17)\n\
                   WARNING:2026-01-01 1:1 init.cpp:117] CUPTI initialization failed - CUDA profiler activities will be missing\n\
                   INFO:2026-01-01 1:1 init.cpp:119] If you see CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, refer to https://developer.nvidia.com/nvidia-development-tools-solutions-err-nvgpuctrperm-cupti\n";
        let mut s = scan_text("engine.log", log);
        s.text("params", &fixture("driver-params_580.159.04.txt"));
        assert!(
            !s.has("permission"),
            "the hint line and RmProfilingAdminOnly: 0 are not permission errors: {:?}",
            s.findings
        );
        let d = diagnose(&s, CudaData::Missing);
        assert_eq!(d.causes.len(), 1, "{:?}", d.causes);
        assert!(d.causes[0].starts_with(
            "toolkit-vs-driver major-version skew: CUDA runtime 12.9 vs driver 13.0 (CUPTI failed to initialise)"
        ));
        assert!(d.causes[0].contains("not permission: RmProfilingAdminOnly: 0 at params:1"), "{}", d.causes[0]);
    }

    #[test]
    fn cupti_errors_without_versions_ask_for_them() {
        for name in ["CUPTI_ERROR_INVALID_DEVICE", "CUPTI_ERROR_NOT_INITIALIZED"] {
            let s = scan_text("nsys.log", &format!("Error: {name}\n"));
            let d = diagnose(&s, CudaData::Unknown);
            assert!(d.retry());
            assert!(d.causes[0].starts_with(&format!("cupti-init ({name}, nsys.log:1)")), "{:?}", d.causes);
            assert!(d.causes[0].contains("CUDA versions. CUPTI"), "{:?}", d.causes);
        }
    }

    #[test]
    fn rm_profiling_admin_only_zero_is_evidence_against_permission() {
        // real: /proc/driver/nvidia/params of the H200 machine
        let s = scan_text("params", &fixture("driver-params_580.159.04.txt"));
        assert_eq!(s.admin_only, vec![("params:1".to_string(), false)]);
        assert!(!s.has("permission"));
        let d = diagnose(&s, CudaData::Unknown);
        assert!(!d.retry(), "{:?}", d);
        assert!(d.notes[0].contains("evidence against a permission cause"), "{:?}", d.notes);
        // only 1 or ERR_NVGPUCTRPERM point at permission
        for line in [
            "RmProfilingAdminOnly: 1",
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters",
        ] {
            let d = diagnose(&scan_text("x", line), CudaData::Unknown);
            assert!(d.causes[0].starts_with("permission (x:1)"), "{line}: {:?}", d.causes);
        }
    }

    #[test]
    fn real_kineto_under_nsys_conflict() {
        // fixtures/logs/kineto-2.11.0_under_nsys-2025.3.1.console.txt: torch.profiler inside an nsys capture
        let s = scan_text("k.txt", &fixture("kineto-2.11.0_under_nsys-2025.3.1.console.txt"));
        let classes: Vec<&str> = s.findings.iter().map(|f| f.class).collect();
        assert_eq!(classes, ["cupti-conflict", "cupti-init-failed", "versions"], "{:?}", s.findings);
        assert_eq!(s.findings[0].at, "k.txt:3");
        // nsys got CUPTI first and recorded CUDA: kineto lost, the nsys capture is fine
        let d = diagnose(&s, CudaData::Present);
        assert!(!d.retry(), "{:?}", d);
        assert!(d.notes.iter().any(|n| n.contains("lost CUPTI to nsys")), "{:?}", d.notes);
        // log alone: the conflict is the cause (not permission, not a skew: versions agree)
        let d = diagnose(&s, CudaData::Unknown);
        assert!(
            d.causes[0].starts_with("cupti-conflict (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, k.txt:3)"),
            "{:?}",
            d.causes
        );
        assert!(!d.causes.iter().any(|c| c.starts_with("permission")));
    }

    #[test]
    fn injection_paths() {
        // real: the injector capture's DeviceEnvironment entry (fixtures/nsys-2025.3.1/injector) and nsys's own
        let s = scan_text("env", "CUDA_INJECTION64_PATH=/tmp/hf/libfake_injector.so;CC=/opt/gcc/bin/gcc\n");
        assert_eq!(s.injections, vec![Injection { at: "env:1".into(), path: "/tmp/hf/libfake_injector.so".into() }]);
        let s2 = scan_text(
            "meta",
            "PROCESS_0:ENVIRONMENT_VARIABLE|CUDA_INJECTION64_PATH=\"/opt/zymtrace/libzymtrace_cuda.so\"\n",
        );
        assert_eq!(s2.injections[0].path, "/opt/zymtrace/libzymtrace_cuda.so");
        assert!(scan_text(
            "x",
            "CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so"
        )
        .injections
        .is_empty());
        // measured: nsys 2025.3.1 traced CUDA with this injector loaded: a note, not a RETRY
        let d = diagnose(&s, CudaData::Present);
        assert!(!d.retry() && d.notes[0].contains("CUDA was traced anyway"), "{:?}", d);
        let d = diagnose(&s, CudaData::Missing);
        assert!(
            d.causes[0].starts_with("foreign CUDA injection: CUDA_INJECTION64_PATH=/tmp/hf/libfake_injector.so"),
            "{:?}",
            d
        );
    }

    #[test]
    fn real_nsys_lines() {
        // nsys 2023.4.4 on CUDA 12.5+: callback 468 unknown, then the analysis fails
        let s = scan_text("f.log", &fixture("nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt"));
        let d = diagnose(&s, CudaData::Unknown);
        assert!(d.causes[0].starts_with("unknown-runtime-api (runtime API function index 468)"), "{:?}", d.causes);
        assert_eq!(d.causes.len(), 2, "{:?}", d.causes);
        assert!(
            d.causes[1].starts_with("analysis-failed")
                && d.causes[1].contains("explained by the unknown runtime API function"),
            "{:?}",
            d.causes
        );
        // clean nsys 2025.3.1 consoles: nothing
        for f in [
            "nsys-2025.3.1_hf_node.console.txt",
            "nsys-2025.3.1_hf_graph.console.txt",
            "nsys-2025.3.1_hf_eager.console.txt",
            "nsys-2025.3.1_gpu_full_node.console.txt",
        ] {
            let s = scan_text(f, &fixture(f));
            assert!(s.findings.is_empty(), "{f}: {:?}", s.findings);
        }
        // nsys 2025's DIAGNOSTIC_EVENT wording for its CUPTI (real, hf_node)
        let mut s = HealthScan::new();
        s.line(
            "d",
            "Loaded CUPTI library: /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/libcupti.so.13.0",
            false,
        );
        assert_eq!((s.versions[0].form, s.versions[0].cupti.as_deref()), ("nsys-cupti-library", Some("13.0")));
        // a diagnostic error nsys did not explain further
        let mut s = HealthScan::new();
        assert!(!s.line("d", "Profiling has started.", false));
        assert!(s.line("d", "Something odd", true));
        assert_eq!(s.findings[0].class, "diagnostic-error");
        // the NVTX payload message (real, in the nvtx 0.2.17 export's StringIds)
        let s = scan_text("s", "NVTX binary payload extension is incompatible. Provided compatibility ID 260 != 259.");
        let d = diagnose(&s, CudaData::Unknown);
        assert!(d.causes[0].starts_with("nvtx-incompatible (s:1)"), "{:?}", d.causes);
        // the export's CudaDriverVersion
        assert_eq!(driver_version_from_export("13000").unwrap().to_string(), "13.0");
    }

    #[test]
    fn dotted_form_still_read() {
        let s = scan_text("l", "CUDA versions. CUPTI/Runtime/Driver: 12.4 / 13.0 / 12.2\n");
        assert_eq!(s.major_skew().map(|(r, d)| (r.to_string(), d.to_string())), Some(("13.0".into(), "12.2".into())));
    }
}
