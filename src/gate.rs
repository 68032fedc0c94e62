//! `gate-check`: PASS/RETRY capture gates. A capture that ran proves nothing: each gate decides one reason
//! why a capture cannot be analysed, with the number it measured and the threshold it compared it to.
//!
//! The gate list is an extensible `Vec<GateResult>`: one function per gate (`g0_profiler_health`, …), each
//! taking the [`Context`] and returning one [`GateResult`]; [`gates`] calls them in order. A new gate is one
//! more function and one more line in [`gates`].

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::{self, DeviceKind};
use crate::export::{self, Export};

// ---------------------------------------------------------------------------------------------------------
// Document

/// The overall verdict: PASS when no gate says retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Verdict {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "RETRY")]
    Retry,
}

/// One gate's verdict: `skip` when the gate does not apply (wrong tier, no data it needs, decided elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateVerdict {
    Pass,
    Retry,
    Skip,
}

/// Which analysis the capture is meant for; it selects G5 (throughput) or G6/G7 (decode) and the G2 default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    #[default]
    Throughput,
    Decode,
}

impl Tier {
    pub fn parse(s: &str) -> Result<Tier> {
        match s {
            "throughput" => Ok(Tier::Throughput),
            "decode" => Ok(Tier::Decode),
            _ => Err(Error::usage(format!("--tier {s}: expected throughput or decode")).with_arg("--tier")),
        }
    }
}

/// One gate's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateResult {
    /// `G0` … `G7` (other gates may be appended by later tools).
    pub id: String,
    /// Short name, e.g. `profiler-health`.
    pub name: String,
    pub verdict: GateVerdict,
    /// The number the gate decided on (null when it skipped before measuring).
    pub measured: Option<f64>,
    /// The threshold it was compared with (null when the gate has no numeric threshold).
    pub threshold: Option<f64>,
    /// The unit of `measured` and `threshold` (`findings`, `bytes`, `rows`, `share`, …).
    pub unit: String,
    /// One sentence: what was measured and why it passes, retries or skips; a retry says what to fix.
    pub reason: String,
    /// A timestamp (ns, export timebase) the verdict points at: where CUDA data stops (G4), where the longest
    /// empty stretch starts (G5); null otherwise.
    pub at_ns: Option<i64>,
    /// The facts behind the verdict (log lines, metadata rows, counts), each naming where it was read.
    pub evidence: Vec<String>,
}

impl GateResult {
    fn new(id: &str, name: &str, unit: &str) -> GateResult {
        GateResult {
            id: id.into(),
            name: name.into(),
            verdict: GateVerdict::Skip,
            measured: None,
            threshold: None,
            unit: unit.into(),
            reason: String::new(),
            at_ns: None,
            evidence: Vec::new(),
        }
    }
    fn skip(mut self, reason: impl Into<String>) -> GateResult {
        self.verdict = GateVerdict::Skip;
        self.reason = reason.into();
        self
    }
    fn decide(mut self, retry: bool, measured: f64, threshold: Option<f64>, reason: impl Into<String>) -> GateResult {
        self.verdict = if retry { GateVerdict::Retry } else { GateVerdict::Pass };
        self.measured = Some(measured);
        self.threshold = threshold;
        self.reason = reason.into();
        self
    }
}

/// What was checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateSource {
    /// CAPTURE as given.
    pub path: String,
    /// `nsys-rep`, `sqlite` or `qdstrm`.
    pub kind: String,
    /// CAPTURE's size in bytes.
    pub size: u64,
    /// The SQLite export analysed: `--sqlite`, CAPTURE itself, or `exported` for a report nsyskit exported into
    /// a temporary folder (deleted afterwards); null for a `.qdstrm`.
    pub sqlite: Option<String>,
    /// The nsys that exported a report (null unless nsyskit exported it).
    pub exported_with: Option<String>,
    /// The nsys version that wrote the export (META_DATA_EXPORT).
    pub nsys_version: Option<String>,
    /// `--log` and `--provenance` as given.
    pub log: Option<String>,
    pub provenance: Option<String>,
}

/// `nsyskit.gate/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateDoc {
    pub schema: String,
    pub tool: Tool,
    /// PASS when no gate says retry, else RETRY (exit 1).
    pub verdict: Verdict,
    pub tier: Tier,
    pub source: GateSource,
    /// The ids of the gates that said retry, in gate order.
    pub retry: Vec<String>,
    pub gates: Vec<GateResult>,
}

impl Document for GateDoc {
    const KIND: &'static str = "gate";
    const TOOL: &'static str = "gate-check";
    fn exit_code(&self) -> i32 {
        match self.verdict {
            Verdict::Pass => 0,
            Verdict::Retry => 1,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Options

/// Every threshold, each a flag of `gate-check` (defaults documented in docs/gate-check.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// G2: smallest acceptable `.nsys-rep`, bytes; None = the tier default ([`default_min_rep_bytes`]).
    pub min_rep_bytes: Option<u64>,
    /// G4: largest share of NVTX events on CUDA threads that may start after the last CUDA runtime row.
    pub max_nvtx_after_cuda_share: f64,
    /// G5: an empty stretch (no kernel/memcpy/memset) is "long" when it is above this share of the GPU
    /// activity window …
    pub max_gap_share: f64,
    /// … and at least this long (ms).
    pub min_gap_ms: f64,
    /// G6: smallest share of inter-step gaps inside the dominant bucket `[median/2, 2·median]`.
    pub min_dominant_gap_share: f64,
    /// G6: smallest share of steps whose kernel count equals the most frequent count.
    pub min_stable_kernel_share: f64,
    /// G7: a step is unlike the dominant shape when its duration is above this factor × the median duration …
    pub duration_outlier_factor: f64,
    /// … or its kernel count is above this factor × the most frequent count, or below it ÷ this factor.
    pub kernel_outlier_factor: f64,
    /// G7: largest share of steps unlike the dominant shape.
    pub max_contaminated_share: f64,
    /// G6: fewest decode steps the decode tier accepts.
    pub min_decode_steps: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_rep_bytes: None,
            max_nvtx_after_cuda_share: 0.02,
            max_gap_share: 0.25,
            min_gap_ms: 500.0,
            min_dominant_gap_share: 0.8,
            min_stable_kernel_share: 0.8,
            duration_outlier_factor: 3.0,
            kernel_outlier_factor: 1.5,
            max_contaminated_share: 0.01,
            min_decode_steps: 20,
        }
    }
}

impl Thresholds {
    /// Shares must lie in [0, 1], factors be ≥ 1, durations ≥ 0 (a usage error names the flag).
    pub fn validate(&self) -> Result<()> {
        let share = |v: f64, flag: &str| -> Result<()> {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::usage(format!("{flag} {v}: expected a share between 0 and 1")).with_arg(flag))
            }
        };
        share(self.max_nvtx_after_cuda_share, "--max-nvtx-after-cuda-share")?;
        share(self.max_gap_share, "--max-gap-share")?;
        share(self.min_dominant_gap_share, "--min-dominant-gap-share")?;
        share(self.min_stable_kernel_share, "--min-stable-kernel-share")?;
        share(self.max_contaminated_share, "--max-contaminated-share")?;
        for (v, flag) in [(self.duration_outlier_factor, "--duration-outlier-factor"), (self.kernel_outlier_factor, "--kernel-outlier-factor")] {
            if !(v.is_finite() && v >= 1.0) {
                return Err(Error::usage(format!("{flag} {v}: expected a factor ≥ 1")).with_arg(flag));
            }
        }
        if !(self.min_gap_ms.is_finite() && self.min_gap_ms >= 0.0) {
            return Err(Error::usage(format!("--min-gap-ms {}: expected milliseconds ≥ 0", self.min_gap_ms)).with_arg("--min-gap-ms"));
        }
        Ok(())
    }
}

/// G2's default smallest report: 10 MB (10 000 000 bytes) for the throughput tier, 1 MB for the decode tier.
pub fn default_min_rep_bytes(tier: Tier) -> u64 {
    match tier {
        Tier::Throughput => 10_000_000,
        Tier::Decode => 1_000_000,
    }
}

/// `gate-check`'s inputs.
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// CAPTURE: `.nsys-rep`, `.sqlite` or `.qdstrm`.
    pub capture: PathBuf,
    /// `--sqlite`: the export of a `.nsys-rep` CAPTURE (no re-export).
    pub sqlite: Option<PathBuf>,
    /// `--log`: the nsys console log.
    pub log: Option<PathBuf>,
    /// `--provenance`: an `nsyskit.provenance/v1` document.
    pub provenance: Option<PathBuf>,
    pub tier: Tier,
    /// `--decode-range`: the decode step label (default: the most frequent iteration-like label).
    pub decode_range: Option<String>,
    /// The nsys used to export a report (default: `NSYS_BIN`, else `nsys` on PATH).
    pub nsys: Option<PathBuf>,
    pub thresholds: Thresholds,
    /// `--readiness`: append the NVTX readiness gate (G8, [`g8_readiness`]) with these options.
    pub readiness: Option<crate::readiness::ReadinessOptions>,
}

// ---------------------------------------------------------------------------------------------------------
// Context

/// Everything a gate may look at. `export` is None for a `.qdstrm`.
pub struct Context<'a> {
    pub opts: &'a GateOptions,
    pub source: &'a GateSource,
    pub export: Option<&'a Export>,
    /// `(path, text)` of `--log`.
    pub log: Option<(String, String)>,
    /// `(path, document)` of `--provenance`.
    pub provenance: Option<(String, serde_json::Value)>,
    /// The decode steps, read once for G6 and G7.
    pub steps: OnceCell<std::result::Result<DecodeSteps, String>>,
}

/// Run every gate on the capture named in `opts`. CAPTURE `-` is an SQLite export read from standard input
/// (copied into a temporary file, deleted afterwards; messages name it `<stdin>`).
pub fn run(opts: &GateOptions) -> Result<GateDoc> {
    opts.thresholds.validate()?;
    if let Some(r) = &opts.readiness {
        r.validate()?;
    }
    if opts.capture.as_os_str() == "-" {
        let copy = crate::export::StdinCopy::read().map_err(|e| e.with_arg("CAPTURE"))?;
        let o = GateOptions { capture: copy.path().to_path_buf(), ..opts.clone() };
        let mut doc = copy.run(|_| run_path(&o))?;
        doc.source.path = crate::export::STDIN_NAME.into();
        doc.source.sqlite = Some(crate::export::STDIN_NAME.into());
        for g in &mut doc.gates {
            g.reason = copy.rename(&g.reason);
            for ev in &mut g.evidence {
                *ev = copy.rename(ev);
            }
        }
        return Ok(doc);
    }
    run_path(opts)
}

fn run_path(opts: &GateOptions) -> Result<GateDoc> {
    let capture = &opts.capture;
    let name = capture.display().to_string();
    let meta = std::fs::metadata(capture).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::input(format!("{name}: no such file")).with_arg("CAPTURE"),
        _ => Error::input(format!("{name}: cannot read: {e}")).with_arg("CAPTURE"),
    })?;
    if !meta.is_file() {
        return Err(Error::input(format!("{name}: not a regular file")).with_arg("CAPTURE"));
    }
    let ext = capture.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let kind = match ext.as_str() {
        "nsys-rep" | "qdrep" => "nsys-rep",
        "qdstrm" => "qdstrm",
        _ => "sqlite",
    };
    if opts.sqlite.is_some() && kind != "nsys-rep" {
        return Err(Error::usage(format!(
            "--sqlite gives the export of a .nsys-rep CAPTURE, but {name} is a {kind} file"
        ))
        .with_arg("--sqlite"));
    }
    let log = match &opts.log {
        Some(p) => {
            let bytes = crate::contract::Input::Path(p.clone()).read_bytes().map_err(|e| e.with_arg("--log"))?;
            Some((p.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()))
        }
        None => None,
    };
    let provenance = match &opts.provenance {
        Some(p) => Some((p.display().to_string(), read_provenance(p)?)),
        None => None,
    };
    let mut source = GateSource {
        path: name.clone(),
        kind: kind.into(),
        size: meta.len(),
        sqlite: None,
        exported_with: None,
        nsys_version: None,
        log: opts.log.as_ref().map(|p| p.display().to_string()),
        provenance: opts.provenance.as_ref().map(|p| p.display().to_string()),
    };
    // Open the export (kept alive, with its temporary folder, until the gates ran).
    let opened: Option<export::OpenedCapture>;
    let given: Option<Export>;
    match (kind, &opts.sqlite) {
        ("qdstrm", _) => {
            opened = None;
            given = None;
        }
        ("nsys-rep", Some(s)) => {
            let e = Export::open(s).map_err(|e| e.with_arg("--sqlite"))?;
            source.sqlite = Some(s.display().to_string());
            opened = None;
            given = Some(e);
        }
        _ => {
            let o = export::open_capture(capture, opts.nsys.as_deref()).map_err(|e| e.with_arg("CAPTURE"))?;
            source.sqlite = Some(if o.source.kind == "nsys-rep" { "exported".into() } else { name.clone() });
            source.exported_with = o.source.exported_with.clone();
            opened = Some(o);
            given = None;
        }
    }
    let export = given.as_ref().or(opened.as_ref().map(|o| &o.export));
    if let Some(e) = export {
        check_is_nsys_export(e)?;
        source.nsys_version = e.nsys_version()?;
    }
    let cx = Context { opts, source: &source, export, log, provenance, steps: OnceCell::new() };
    let gates = gates(&cx)?;
    let retry: Vec<String> = gates.iter().filter(|g| g.verdict == GateVerdict::Retry).map(|g| g.id.clone()).collect();
    let (schema, tool) = GateDoc::header();
    Ok(GateDoc {
        schema,
        tool,
        verdict: if retry.is_empty() { Verdict::Pass } else { Verdict::Retry },
        tier: opts.tier,
        source,
        retry,
        gates,
    })
}

/// The gate list, in order. Each gate is one function of the context.
#[allow(clippy::vec_init_then_push)] // one line per gate: later gates are appended here
pub fn gates(cx: &Context) -> Result<Vec<GateResult>> {
    let mut out = Vec::new();
    out.push(g0_profiler_health(cx)?);
    out.push(g1_graph_tracing(cx)?);
    out.push(g2_report_size(cx)?);
    out.push(g3_kernel_rows(cx)?);
    out.push(g4_cuda_coverage(cx)?);
    out.push(g5_traffic(cx)?);
    out.push(g6_decode_regularity(cx)?);
    out.push(g7_prefill_contamination(cx)?);
    if cx.opts.readiness.is_some() {
        out.push(g8_readiness(cx)?);
    }
    Ok(out)
}

/// A file that is SQLite but not an nsys export is unusable input (exit 2).
fn check_is_nsys_export(e: &Export) -> Result<()> {
    e.require("StringIds", &["id", "value"]).map_err(|err| {
        Error::input(format!("{}; not an `nsys export --type sqlite` file", err.message)).with_arg("CAPTURE")
    })?;
    Ok(())
}

fn read_provenance(p: &Path) -> Result<serde_json::Value> {
    let name = p.display().to_string();
    let bytes = crate::contract::Input::Path(p.to_path_buf()).read_bytes().map_err(|e| e.with_arg("--provenance"))?;
    let docs = crate::contract::parse_json_stream(&bytes, &name).map_err(|e| e.with_arg("--provenance"))?;
    let Some(doc) = docs.into_iter().next() else {
        return Err(Error::input(format!("{name}: empty, expected an nsyskit.provenance/v1 JSON document")).with_arg("--provenance"));
    };
    if !doc.value.is_object() {
        return Err(Error::input(format!("{name}: line {}: expected a JSON object (nsyskit.provenance/v1)", doc.line)).with_arg("--provenance"));
    }
    Ok(doc.value)
}

// ---------------------------------------------------------------------------------------------------------
// Small helpers

/// Nanoseconds as seconds with 3 decimals: `7.568 s`.
pub fn secs(ns: i64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

fn ms(ns: i64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// The device tables of the GPU activity window and coverage (KERNEL, MEMCPY, MEMSET).
const WINDOW_TABLES: [DeviceKind; 3] = [DeviceKind::Kernel, DeviceKind::Memcpy, DeviceKind::Memset];

// ---------------------------------------------------------------------------------------------------------
// G0 profiler health

/// One problem nsys reported, classified by its fix.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthFinding {
    /// `cupti-init`, `permission`, `analysis-failed`, `unknown-runtime-api`, `diagnostic-error`.
    pub class: &'static str,
    /// Where: `FILE:LINE` or `DIAGNOSTIC_EVENT t=… ns`.
    pub at: String,
    pub text: String,
}

struct HealthPatterns {
    cupti: Regex,
    versions: Regex,
    perm: Regex,
    unknown_api: Regex,
    analysis: Regex,
}

fn health_patterns() -> HealthPatterns {
    HealthPatterns {
        cupti: Regex::new(r"CUPTI_ERROR_[A-Z_]+").unwrap(),
        versions: Regex::new(r"CUPTI/Runtime/Driver[^0-9]*([0-9][0-9.]*)\D+?([0-9][0-9.]*)\D+?([0-9][0-9.]*)").unwrap(),
        perm: Regex::new(r"ERR_NVGPUCTRPERM|RmProfilingAdminOnly").unwrap(),
        unknown_api: Regex::new(r"Unknown runtime API function index: *([0-9]+)").unwrap(),
        analysis: Regex::new(r"Analysis failed|Errors occurred while processing the raw events").unwrap(),
    }
}

/// Classify one line of nsys output (console log line or DIAGNOSTIC_EVENT text). `error_severity` makes an
/// otherwise unclassified line a `diagnostic-error` finding.
fn classify_line(p: &HealthPatterns, line: &str, error_severity: bool) -> Option<&'static str> {
    if p.unknown_api.is_match(line) {
        Some("unknown-runtime-api")
    } else if p.perm.is_match(line) {
        Some("permission")
    } else if p.cupti.is_match(line) || p.versions.is_match(line) {
        Some("cupti-init")
    } else if p.analysis.is_match(line) {
        Some("analysis-failed")
    } else if error_severity {
        Some("diagnostic-error")
    } else {
        None
    }
}

/// Scan a console log for profiler-health findings.
pub fn scan_log(path: &str, text: &str) -> Vec<HealthFinding> {
    let p = health_patterns();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(class) = classify_line(&p, line, false) {
            out.push(HealthFinding { class, at: format!("{path}:{}", i + 1), text: excerpt(&p, line) });
        }
    }
    out
}

fn excerpt(p: &HealthPatterns, line: &str) -> String {
    // keep the part of a long line that matched (the FAILED log's lines are one escaped protobuf string)
    let line = line.trim();
    for re in [&p.unknown_api, &p.perm, &p.cupti, &p.versions, &p.analysis] {
        if let Some(m) = re.find(line) {
            if line.len() > 200 {
                let start = line[..m.start()].char_indices().rev().nth(60).map(|(i, _)| i).unwrap_or(0);
                let end = (m.end() + 60).min(line.len());
                let end = (end..=line.len()).find(|&i| line.is_char_boundary(i)).unwrap_or(line.len());
                return format!("…{}…", &line[start..end]).replace("\\n", " ");
            }
        }
    }
    line.chars().take(300).collect()
}

/// Profiler-health findings in the export's DIAGNOSTIC_EVENT rows (nsys 2024+; absent in 2023.4 exports).
pub fn scan_diagnostics(e: &Export) -> Result<Vec<HealthFinding>> {
    let rows = e.diagnostic_events()?;
    let p = health_patterns();
    let mut out = Vec::new();
    for crate::export::rows::DiagnosticRow { timestamp: ts, severity, text } in rows {
        let text = text.unwrap_or_default();
        // severity 3 = Error (ENUM_DIAGNOSTIC_SEVERITY_LEVEL); warnings such as "No CUDA events collected" for
        // a process that never used CUDA are normal and ignored.
        if let Some(class) = classify_line(&p, &text, severity >= 3) {
            out.push(HealthFinding {
                class,
                at: format!("{}: DIAGNOSTIC_EVENT t={ts} ns severity={severity}", e.name()),
                text: excerpt(&p, &text),
            });
        }
    }
    Ok(out)
}

fn health_fix(class: &str) -> &'static str {
    match class {
        "unknown-runtime-api" => "nsys is older than the application's CUDA runtime and dropped CUDA data: profile with an nsys that knows this CUDA version",
        "analysis-failed" => "nsys's analyser failed while importing the raw events, the report is incomplete: re-capture (see the console log's error)",
        "cupti-init" => "CUPTI failed to initialise, no CUDA data was collected: check the toolkit/driver versions (a major-version skew between the CUDA runtime, CUPTI and the driver is the usual cause)",
        "permission" => "insufficient GPU profiling permission: run as root or set the nvidia module option NVreg_RestrictProfilingToAdminUsers=0",
        _ => "nsys reported an error: read it before trusting the capture",
    }
}

pub fn g0_profiler_health(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G0", "profiler-health", "findings");
    let mut findings = Vec::new();
    let mut sources = Vec::new();
    if let Some((path, text)) = &cx.log {
        findings.extend(scan_log(path, text));
        sources.push(format!("console log {path}"));
    }
    if let Some(e) = cx.export {
        if e.has_table("DIAGNOSTIC_EVENT") {
            sources.push(format!("{} DIAGNOSTIC_EVENT", e.name()));
        }
        findings.extend(scan_diagnostics(e)?);
    }
    if sources.is_empty() {
        return Ok(g.skip(
            "nothing to read: no --log given and the export has no DIAGNOSTIC_EVENT table (nsys 2023.4 writes none); pass the nsys console log with --log",
        ));
    }
    let n = findings.len();
    let mut classes: Vec<&str> = Vec::new();
    for f in &findings {
        if !classes.contains(&f.class) {
            classes.push(f.class);
        }
    }
    // an "Unknown runtime API function index" explains the "Analysis failed" next to it: name the cause first
    classes.sort_by_key(|c| match *c {
        "unknown-runtime-api" => 0,
        "permission" => 1,
        "cupti-init" => 2,
        "analysis-failed" => 3,
        _ => 4,
    });
    let mut g = if n == 0 {
        g.decide(false, 0.0, Some(0.0), format!("no profiler error in {}", sources.join(" and ")))
    } else {
        let mut parts = Vec::new();
        for c in &classes {
            let mut detail = String::new();
            if *c == "unknown-runtime-api" {
                let p = health_patterns();
                let ids: Vec<String> = findings
                    .iter()
                    .filter_map(|f| p.unknown_api.captures(&f.text).map(|m| m[1].to_string()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                detail = format!(" (runtime API function index {})", ids.join(", "));
            }
            if *c == "cupti-init" {
                let p = health_patterns();
                if let Some(v) = findings.iter().find_map(|f| p.versions.captures(&f.text)) {
                    let major = |s: &str| s.split('.').next().unwrap_or("").to_string();
                    let (c1, r1, d1) = (major(&v[1]), major(&v[2]), major(&v[3]));
                    // CUDA majors only (a driver release such as 580.x is not comparable)
                    let cuda_like = [&c1, &r1, &d1].iter().all(|m| m.parse::<u32>().map(|v| v < 100).unwrap_or(false));
                    let skew = if cuda_like && (c1 != r1 || r1 != d1) { ", major-version skew" } else { "" };
                    detail = format!(" (CUPTI/Runtime/Driver {}/{}/{}{skew})", &v[1], &v[2], &v[3]);
                }
            }
            parts.push(format!("{c}{detail}: {}", health_fix(c)));
        }
        g.decide(true, n as f64, Some(0.0), format!("{n} profiler error line(s) in {}; {}", sources.join(" and "), parts.join("; ")))
    };
    g.evidence = findings.iter().take(20).map(|f| format!("{} [{}] {}", f.at, f.class, f.text)).collect();
    if findings.len() > 20 {
        g.evidence.push(format!("… {} more", findings.len() - 20));
    }
    Ok(g)
}

// ---------------------------------------------------------------------------------------------------------
// G1 node-level graph tracing

/// `--cuda-graph-trace` mode and CUDA tracing as recorded by one source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceSettings {
    /// `node` or `graph` (lower case), None when the source does not say.
    pub graph_mode: Option<String>,
    /// Whether CUDA tracing was on, None when the source does not say.
    pub cuda_trace: Option<bool>,
    /// Where it was read.
    pub from: Vec<String>,
}

/// Read `--cuda-graph-trace=X` and `--trace=LIST` / `-t LIST` out of a flag string.
pub fn settings_from_flags(flags: &str) -> TraceSettings {
    let mut s = TraceSettings::default();
    let graph = Regex::new(r"--cuda-graph-trace[= ]+'?([A-Za-z]+)").unwrap();
    if let Some(m) = graph.captures(flags) {
        s.graph_mode = Some(m[1].to_ascii_lowercase());
    }
    let trace = Regex::new(r#"(?:^|[\s'"])(?:--trace|-t)[= ]+([A-Za-z0-9_,-]+)"#).unwrap();
    if let Some(m) = trace.captures(flags) {
        s.cuda_trace = Some(m[1].split(',').any(|t| t.eq_ignore_ascii_case("cuda")));
    }
    s
}

/// From META_DATA_CAPTURE: `PROCESS_n:CUDA_GRAPH_TRACE_OPTIONS:MODE`, `PROCESS_n:COLLECT_CUDA_TRACE`; then the
/// recorded `PROCESS_n:COMMAND` / `PROCESS_n:ARGUMENT_m` searched for `--cuda-graph-trace` (set when the
/// profiled command is itself a launcher that carries nsys flags).
pub fn settings_from_metadata(e: &Export) -> Result<(TraceSettings, TraceSettings)> {
    let rows = e.capture_settings()?;
    let mut md = TraceSettings::default();
    // the mode with the one definition of the export layer; its evidence line at the row's place
    let mode = e.graph_trace_mode()?;
    let mut cmd_parts: Vec<(String, String)> = Vec::new();
    for (name, value) in &rows {
        let v = value.clone().unwrap_or_default();
        if name.ends_with(crate::export::schema::capture_keys::GRAPH_TRACE_MODE_SUFFIX) {
            if let Some(m) = mode.as_ref().filter(|m| &m.key == name && md.graph_mode.is_none()) {
                md.graph_mode = Some(m.mode.clone());
                md.from.push(format!("META_DATA_CAPTURE {}={}", m.key, m.raw));
            }
        } else if name.ends_with(crate::export::schema::capture_keys::COLLECT_CUDA_TRACE_SUFFIX) {
            let on = v.eq_ignore_ascii_case("true");
            if md.cuda_trace != Some(true) {
                md.cuda_trace = Some(on);
                md.from.push(format!("META_DATA_CAPTURE {name}={v}"));
            }
        } else if name.ends_with(":COMMAND") || name.contains(":ARGUMENT_") {
            cmd_parts.push((name.clone(), v));
        }
    }
    let joined = cmd_parts.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join(" ");
    let mut cmd = settings_from_flags(&joined);
    if cmd.graph_mode.is_some() || cmd.cuda_trace.is_some() {
        cmd.from.push(format!("META_DATA_CAPTURE COMMAND/ARGUMENT rows: {joined}"));
    }
    Ok((md, cmd))
}

/// From an `nsyskit.provenance/v1` document: the capture flag string at `capture.flags` (a string, or an array
/// of strings joined with spaces), else `capture.flags_argv`/`argv`/`command`/`args` (empty or null values
/// do not count), else any string in the document
/// that mentions `--cuda-graph-trace`. The nsys default (`--cuda-graph-trace=graph`, CUDA traced) applies when
/// a flag string was found that does not set them.
pub fn settings_from_provenance(path: &str, doc: &serde_json::Value) -> TraceSettings {
    fn text_of(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(a) => {
                Some(a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(" "))
            }
            _ => None,
        }
    }
    fn all_strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| all_strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| all_strings(x, out)),
            _ => {}
        }
    }
    // nsys-resolve writes the whole `nsys profile` argv to `capture.flags_argv` and the user's extra flags to
    // `capture.flags`: the argv first, then the first other key that sets --cuda-graph-trace, then any.
    let keys = ["flags_argv", "flags", "argv", "command", "args"];
    let texts: Vec<(String, String)> = keys
        .iter()
        .filter_map(|k| {
            doc.get("capture").and_then(|c| c.get(*k)).and_then(text_of).filter(|t| !t.trim().is_empty()).map(|t| (format!("capture.{k}"), t))
        })
        .collect();
    let mut found: Option<(String, String)> = texts
        .iter()
        .find(|(k, t)| k == "capture.flags_argv" || t.contains("--cuda-graph-trace"))
        .or(texts.first())
        .cloned();
    if found.is_none() {
        let mut strings = Vec::new();
        all_strings(doc, &mut strings);
        if let Some(s) = strings.into_iter().find(|s| s.contains("--cuda-graph-trace")) {
            found = Some(("a string mentioning --cuda-graph-trace".into(), s));
        }
    }
    let Some((key, flags)) = found else { return TraceSettings::default() };
    let mut s = settings_from_flags(&flags);
    let explicit = s.graph_mode.is_some();
    // nsys's defaults apply only to a whole `nsys profile` command line, not to a list of extra flags
    let whole = flags.split_whitespace().any(|w| w.trim_matches(|c| c == '\'' || c == '"') == "profile");
    let mut note = "";
    if whole {
        if s.graph_mode.is_none() {
            s.graph_mode = Some("graph".into()); // nsys default
            note = " (no --cuda-graph-trace: nsys default graph)";
        }
        if s.cuda_trace.is_none() {
            s.cuda_trace = Some(true); // nsys default --trace includes cuda
        }
    } else if !explicit {
        note = " (extra flags only: says nothing about --cuda-graph-trace)";
    }
    s.from.push(format!("{path} {key}: {flags}{note}"));
    s
}

/// Graph launches and node-level device rows in the export: [`crate::export::GraphFacts`], one definition
/// for every tool.
pub type GraphData = crate::export::GraphFacts;

pub fn graph_data(e: &Export) -> Result<GraphData> {
    e.graph_facts()
}

pub fn g1_graph_tracing(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G1", "node-level-graph-tracing", "node-level device rows");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let (md, cmd) = settings_from_metadata(e)?;
    let prov = cx.provenance.as_ref().map(|(p, d)| settings_from_provenance(p, d)).unwrap_or_default();
    // mode: metadata, else command/arguments, else provenance
    let (mode, mode_from) = if md.graph_mode.is_some() {
        (md.graph_mode.clone(), "META_DATA_CAPTURE")
    } else if cmd.graph_mode.is_some() {
        (cmd.graph_mode.clone(), "the recorded command and arguments")
    } else if prov.graph_mode.is_some() {
        (prov.graph_mode.clone(), "--provenance")
    } else {
        (None, "")
    };
    let cuda = md.cuda_trace.or(cmd.cuda_trace).or(prov.cuda_trace);
    let data = graph_data(e)?;
    g.evidence.extend(md.from.iter().cloned());
    g.evidence.extend(cmd.from.iter().cloned());
    g.evidence.extend(prov.from.iter().cloned());
    g.evidence.push(format!(
        "{}: cudaGraphLaunch calls {}, KERNEL/MEMCPY/MEMSET rows with graphNodeId {}, GRAPH_TRACE rows {}, runtime rows {}",
        e.name(),
        data.graph_launches,
        data.node_rows,
        data.graph_trace_rows,
        data.runtime_rows
    ));
    let measured = data.node_rows as f64;
    if cuda == Some(false) || (cuda.is_none() && !e.has_table("CUPTI_ACTIVITY_KIND_RUNTIME")) {
        return Ok(g.decide(
            true,
            measured,
            None,
            "CUDA tracing was off (no CUDA API or GPU rows can exist): capture with --trace=cuda,nvtx,osrt --cuda-graph-trace=node",
        ));
    }
    let launches_hidden = data.graph_launches > 0 && data.node_rows == 0;
    match mode.as_deref() {
        Some("graph") => Ok(g.decide(
            true,
            measured,
            None,
            format!(
                "graph-level tracing (--cuda-graph-trace=graph, from {mode_from}): the {} graph launches' kernels are {}; re-capture with --cuda-graph-trace=node",
                data.graph_launches,
                if data.graph_trace_rows > 0 { format!("{} opaque GRAPH_TRACE rows", data.graph_trace_rows) } else { "not in the export".to_string() }
            ),
        )),
        _ if launches_hidden => Ok(g.decide(
            true,
            measured,
            None,
            format!(
                "{} cudaGraphLaunch calls but no KERNEL row has a graphNodeId: graph-level tracing ({}), the replayed work is {}; re-capture with --cuda-graph-trace=node",
                data.graph_launches,
                match mode.as_deref() {
                    Some(m) => format!("recorded mode {m} from {mode_from}"),
                    None => "mode not recorded".into(),
                },
                if data.graph_trace_rows > 0 { "opaque GRAPH_TRACE rows" } else { "invisible" }
            ),
        )),
        Some(m) => Ok(g.decide(
            false,
            measured,
            None,
            format!(
                "--cuda-graph-trace={m} (from {mode_from}), CUDA traced; {} cudaGraphLaunch calls, {} node-level device rows",
                data.graph_launches, data.node_rows
            ),
        )),
        None => Ok(g.decide(
            false,
            measured,
            None,
            if data.graph_launches == 0 {
                "graph-trace mode not recorded (no META_DATA_CAPTURE mode row, no flag in the command or --provenance), but the capture has no cudaGraphLaunch call: nothing is hidden".to_string()
            } else {
                format!("graph-trace mode not recorded, but the data is node level: {} node-level device rows for {} cudaGraphLaunch calls", data.node_rows, data.graph_launches)
            },
        )),
    }
}

// ---------------------------------------------------------------------------------------------------------
// G2 report size

pub fn g2_report_size(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G2", "report-size", "bytes");
    let min = cx.opts.thresholds.min_rep_bytes.unwrap_or_else(|| default_min_rep_bytes(cx.opts.tier));
    let size = cx.source.size;
    match cx.source.kind.as_str() {
        "qdstrm" => Ok(g.decide(
            true,
            size as f64,
            None,
            format!(
                "{} is a .qdstrm left instead of a .nsys-rep: nsys could not run its importer (QdstrmImporter), so no report was written and the raw stream embeds copies of every loaded library; fix the nsys installation (missing importer libraries) and re-capture",
                cx.source.path
            ),
        )),
        "nsys-rep" => {
            let mut g = if size < min {
                g.decide(
                    true,
                    size as f64,
                    Some(min as f64),
                    format!(
                        "the report is {size} bytes, under the {} tier's {min} bytes: an idle or failed capture (nothing ran under load); re-capture under load, or lower --min-rep-bytes for a deliberately small capture",
                        tier_name(cx.opts.tier)
                    ),
                )
            } else {
                g.decide(false, size as f64, Some(min as f64), format!("the report is {size} bytes (≥ {min})"))
            };
            g.evidence.push(format!("{}: {size} bytes", cx.source.path));
            Ok(g)
        }
        _ => Ok(g.skip(
            "an export was given, not a report: its size says nothing about the capture; give the .nsys-rep as CAPTURE (with --sqlite for its export) to check it",
        )),
    }
}

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Throughput => "throughput",
        Tier::Decode => "decode",
    }
}

// ---------------------------------------------------------------------------------------------------------
// G3 kernel rows

pub fn g3_kernel_rows(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G3", "kernel-rows", "rows");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let mut g = match e.table("CUPTI_ACTIVITY_KIND_KERNEL") {
        None => g.decide(
            true,
            0.0,
            Some(1.0),
            "no CUDA kernel data: the export has no CUPTI_ACTIVITY_KIND_KERNEL table (nsys creates it only when it records a kernel)",
        ),
        Some(t) => {
            let n = e.count_rows(&t.name)?;
            if n == 0 {
                g.decide(true, 0.0, Some(1.0), "no CUDA kernel data: CUPTI_ACTIVITY_KIND_KERNEL is empty")
            } else {
                g.decide(false, n as f64, Some(1.0), format!("{n} kernel rows"))
            }
        }
    };
    g.evidence.push(format!("{}: CUPTI_ACTIVITY_KIND_KERNEL rows {}", e.name(), e.count_rows("CUPTI_ACTIVITY_KIND_KERNEL")?));
    Ok(g)
}

// ---------------------------------------------------------------------------------------------------------
// G4 CUDA data covers the window

/// NVTX events (marks 34, push/pop 59, start/end 60) opened on threads that made CUDA runtime calls,
/// against the end of the last CUDA runtime call.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Coverage {
    pub cuda_threads: i64,
    /// max(end) over CUPTI_ACTIVITY_KIND_RUNTIME.
    pub last_runtime_end: i64,
    /// max(end) over the device tables (None without device rows).
    pub last_device_end: Option<i64>,
    pub nvtx_on_cuda_threads: i64,
    pub nvtx_after: i64,
    /// max(start, end) of those NVTX events.
    pub last_nvtx: i64,
}

pub fn coverage(e: &Export) -> Result<Option<Coverage>> {
    let Some(rt) = e.optional(schema::RUNTIME, &["end", "globalTid"])? else { return Ok(None) };
    let rt = rt.name.clone();
    let nrt = e.count_rows(&rt)?;
    if nrt == 0 {
        return Ok(None);
    }
    let mut c = Coverage {
        last_runtime_end: e.max_end(schema::RUNTIME)?.unwrap_or(0),
        cuda_threads: e.runtime_thread_count()?,
        ..Default::default()
    };
    for k in WINDOW_TABLES {
        c.last_device_end = c.last_device_end.max(e.max_end(k.table())?);
    }
    let (a, b, m) = e.nvtx_on_runtime_threads(c.last_runtime_end)?;
    c.nvtx_on_cuda_threads = a;
    c.nvtx_after = b;
    c.last_nvtx = m;
    Ok(Some(c))
}

pub fn g4_cuda_coverage(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G4", "cuda-data-covers-window", "share");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let Some(c) = coverage(e)? else {
        return Ok(g.skip("no CUDA runtime rows: nothing to compare (G1/G3 decide)"));
    };
    g.evidence.push(format!(
        "{}: last CUDA runtime row ends {} ({} ns); last device row ends {}; {} CUDA thread(s); NVTX events on them {}, starting after the last runtime row {}, last at {}",
        e.name(),
        secs(c.last_runtime_end),
        c.last_runtime_end,
        c.last_device_end.map(secs).unwrap_or_else(|| "-".into()),
        c.cuda_threads,
        c.nvtx_on_cuda_threads,
        c.nvtx_after,
        secs(c.last_nvtx)
    ));
    if c.nvtx_on_cuda_threads == 0 {
        return Ok(g.skip("no NVTX events on the threads that call CUDA: nothing shows how long they ran (annotate the engine with NVTX)"));
    }
    let share = c.nvtx_after as f64 / c.nvtx_on_cuda_threads as f64;
    let max = cx.opts.thresholds.max_nvtx_after_cuda_share;
    g.at_ns = Some(c.last_runtime_end);
    let g = if share > max {
        g.decide(
            true,
            share,
            Some(max),
            format!(
                "CUDA data stops at {} (last CUDA runtime row) but {} of {} NVTX events on the CUDA thread(s) ({:.1} %) start after it, until {}: nsys silently lost the CUDA trace (see G0; e.g. an nsys older than the CUDA runtime); re-capture",
                secs(c.last_runtime_end),
                c.nvtx_after,
                c.nvtx_on_cuda_threads,
                share * 100.0,
                secs(c.last_nvtx)
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(max),
            format!(
                "CUDA data lasts as long as the CUDA threads' NVTX ranges: {} of {} NVTX events start after the last CUDA runtime row ({})",
                c.nvtx_after,
                c.nvtx_on_cuda_threads,
                secs(c.last_runtime_end)
            ),
        )
    };
    Ok(g)
}

// ---------------------------------------------------------------------------------------------------------
// G5 traffic

/// An empty stretch of the GPU activity window: no kernel, memcpy or memset running.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gap {
    pub start: i64,
    pub end: i64,
}

/// The GPU activity window `[first start, last end]` over KERNEL, MEMCPY, MEMSET and its gaps (between the
/// union of the intervals), longest first.
/// `((first start, last end), gaps longest first)`.
pub type GpuWindow = ((i64, i64), Vec<Gap>);

pub fn device_gaps(e: &Export) -> Result<Option<GpuWindow>> {
    if !WINDOW_TABLES.iter().any(|k| e.has_table(k.table())) {
        return Ok(None);
    }
    // 16 bytes a row, sorted here (in place) rather than by SQLite (a temporary b-tree of the same rows);
    // rows with a NULL or inverted interval are skipped by the export layer (counted in the document's
    // source.skipped_rows)
    let mut rows: Vec<(i64, i64)> = Vec::new();
    let mut skips = crate::export::RowSkips::new();
    for k in WINDOW_TABLES {
        e.device_intervals(k, &mut skips, |s, en| rows.push((s, en)))?;
    }
    rows.sort_unstable();
    let Some(&(first, _)) = rows.first() else { return Ok(None) };
    let mut gaps = Vec::new();
    let mut reach = i64::MIN;
    for (s, en) in rows {
        if reach != i64::MIN && s > reach {
            gaps.push(Gap { start: reach, end: s });
        }
        reach = reach.max(en);
    }
    gaps.sort_by(|a, b| (b.end - b.start).cmp(&(a.end - a.start)).then(a.start.cmp(&b.start)));
    Ok(Some(((first, reach), gaps)))
}

pub fn g5_traffic(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G5", "traffic", "share");
    if cx.opts.tier != Tier::Throughput {
        return Ok(g.skip("throughput tier only"));
    }
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let Some(((first, last), gaps)) = device_gaps(e)? else {
        return Ok(g.skip("no GPU rows (G3 decides)"));
    };
    let window = (last - first).max(1);
    let t = &cx.opts.thresholds;
    let min_gap_ns = (t.min_gap_ms * 1e6) as i64;
    g.evidence.push(format!(
        "{}: GPU activity window {} – {} ({}), {} empty stretches",
        e.name(),
        secs(first),
        secs(last),
        ms(window),
        gaps.len()
    ));
    // the rate, for the reader: kernel starts in each tenth of the window
    if let Some(tenths) = e.kernel_start_tenths(first, window)? {
        g.evidence.push(format!(
            "kernel starts per tenth of the window: {}",
            tenths.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
        ));
    }
    for gap in gaps.iter().take(3) {
        g.evidence.push(format!(
            "empty {} – {} ({}, {:.1} % of the window)",
            secs(gap.start),
            secs(gap.end),
            ms(gap.end - gap.start),
            100.0 * (gap.end - gap.start) as f64 / window as f64
        ));
    }
    let Some(longest) = gaps.first().copied() else {
        return Ok(g.decide(false, 0.0, Some(t.max_gap_share), "the GPU is never idle inside its activity window"));
    };
    let len = longest.end - longest.start;
    let share = len as f64 / window as f64;
    g.at_ns = Some(longest.start);
    let long: Vec<&Gap> = gaps
        .iter()
        .filter(|x| (x.end - x.start) as f64 / window as f64 > t.max_gap_share && x.end - x.start >= min_gap_ns)
        .collect();
    Ok(if !long.is_empty() {
        let where_: Vec<String> = long.iter().map(|x| format!("{} – {}", secs(x.start), secs(x.end))).collect();
        g.decide(
            true,
            share,
            Some(t.max_gap_share),
            format!(
                "no kernel ran for {} ({:.1} % of the {} GPU activity window, above {:.0} % and ≥ {} ms) at {}: traffic was not steady (load stopped or stalled); re-capture under steady load",
                ms(len),
                share * 100.0,
                ms(window),
                t.max_gap_share * 100.0,
                t.min_gap_ms,
                where_.join(", ")
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(t.max_gap_share),
            format!(
                "kernels across the {} GPU activity window; longest empty stretch {} ({:.1} %) at {}; long means above {:.0} % of the window and ≥ {} ms",
                ms(window),
                ms(len),
                share * 100.0,
                secs(longest.start),
                t.max_gap_share * 100.0,
                t.min_gap_ms
            ),
        )
    })
}

// ---------------------------------------------------------------------------------------------------------
// G6 / G7 decode tier

/// The decode steps of a capture: occurrences of the step label (from `sqlite-ranges`' reading code) with
/// their kernel counts and the prefill-labelled occurrences nested in them.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeSteps {
    pub label: String,
    /// How the label was chosen: `--decode-range` or `most frequent iteration-like label`.
    pub chosen_by: String,
    /// The iteration-like labels seen, with their occurrence counts (most frequent first).
    pub candidates: Vec<(String, usize)>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// KERNEL rows attributed to it (runtime calls on its thread, then `(globalPid, correlationId)`).
    pub kernels: u64,
    /// Prefill-labelled occurrences nested inside it.
    pub prefills: u64,
}

/// Is a label iteration-like (a candidate decode step)? Its text contains `iteration`, `step` or `decode`
/// (case-insensitive) and not `prefill`.
pub fn is_iteration_like(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    (l.contains("iteration") || l.contains("step") || l.contains("decode")) && !l.contains("prefill")
}

pub fn is_prefill_label(label: &str) -> bool {
    label.to_ascii_lowercase().contains("prefill")
}

/// Read the decode steps with `sqlite-ranges`' reading code ([`crate::ranges::analyze`]). None when no step
/// label was found (the candidates and the reason are in the error string).
pub fn decode_steps(e: &Export, decode_range: Option<&str>) -> Result<std::result::Result<DecodeSteps, String>> {
    if !e.has_table("NVTX_EVENTS") {
        return Ok(Err("the export has no NVTX_EVENTS table (NVTX was not traced): capture with --trace=cuda,nvtx,osrt and annotate each engine step".into()));
    }
    let a = crate::ranges::analyze(e, &crate::ranges::RangesOptions::default())?;
    let mut counts: std::collections::BTreeMap<&str, (usize, u32)> = std::collections::BTreeMap::new();
    for o in &a.occurrences {
        let c = counts.entry(o.label.as_str()).or_insert((0, u32::MAX));
        c.0 += 1;
        c.1 = c.1.min(o.depth);
    }
    let mut candidates: Vec<(&str, usize, u32)> =
        counts.iter().filter(|(l, _)| is_iteration_like(l)).map(|(l, (n, d))| (*l, *n, *d)).collect();
    // most frequent, then `iteration` before `step` before `decode`, then outermost, then label order
    let rank = |l: &str| {
        let l = l.to_ascii_lowercase();
        if l.contains("iteration") {
            0
        } else if l.contains("step") {
            1
        } else {
            2
        }
    };
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(rank(a.0).cmp(&rank(b.0))).then(a.2.cmp(&b.2)).then(a.0.cmp(b.0)));
    let cand_list: Vec<(String, usize)> = candidates.iter().map(|(l, n, _)| (l.to_string(), *n)).collect();
    let (label, chosen_by) = match decode_range {
        Some(l) => {
            if !counts.contains_key(l) {
                let mut top: Vec<(&&str, &(usize, u32))> = counts.iter().collect();
                top.sort_by_key(|t| std::cmp::Reverse(t.1 .0));
                let names: Vec<String> = top.iter().take(8).map(|(l, (n, _))| format!("{l} ({n})")).collect();
                return Ok(Err(format!("--decode-range {l}: no such NVTX range in the capture (most frequent: {})", names.join(", "))));
            }
            (l.to_string(), "--decode-range".to_string())
        }
        None => match candidates.first() {
            Some((l, _, _)) => (l.to_string(), "the most frequent iteration-like label".to_string()),
            None => {
                return Ok(Err(
                    "no iteration-like NVTX range (a label containing iteration, step or decode): annotate each engine step, or name it with --decode-range".to_string(),
                ))
            }
        },
    };
    let mut steps: Vec<Step> = Vec::new();
    for (i, o) in a.occurrences.iter().enumerate() {
        if o.label == label {
            steps.push(Step { global_tid: o.global_tid, start: o.start, end: o.end, kernels: a.metrics[i].kernels, prefills: 0 });
        }
    }
    steps.sort_by_key(|s| (s.global_tid, s.start));
    // Prefill-labelled occurrences overlapping a step on the same thread. Overlap, not ranges' parent chain:
    // a start/end range (e.g. a request opened inside a step and outliving it) encloses the prefill, so the
    // prefill's parent is the request, which the step does not enclose.
    for o in a.occurrences.iter().filter(|o| is_prefill_label(&o.label)) {
        // steps of this thread starting before the prefill ends; walk back while they overlap it
        let hi = steps.partition_point(|s| (s.global_tid, s.start) < (o.global_tid, o.end));
        let mut i = hi;
        while i > 0 {
            i -= 1;
            let s = &mut steps[i];
            if s.global_tid != o.global_tid || s.end <= o.start {
                break;
            }
            if s.start < o.end || (s.start == o.start && o.start == o.end) {
                s.prefills += 1;
            }
        }
    }
    Ok(Ok(DecodeSteps { label, chosen_by, candidates: cand_list, steps }))
}

/// Lower median of a sorted slice.
fn lower_median(sorted: &[i64]) -> i64 {
    if sorted.is_empty() {
        0
    } else {
        sorted[(sorted.len() - 1) / 2]
    }
}

/// Step-start to next-step-start intervals on the same thread.
pub fn step_intervals(steps: &[Step]) -> Vec<i64> {
    steps.windows(2).filter(|w| w[0].global_tid == w[1].global_tid).map(|w| w[1].start - w[0].start).collect()
}

/// The most frequent kernel count per step (ties: the smaller count) and how many steps have it.
pub fn kernel_mode(steps: &[Step]) -> (u64, usize) {
    let mut c: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for s in steps {
        *c.entry(s.kernels).or_default() += 1;
    }
    c.into_iter().fold((0, 0), |best, (k, n)| if n > best.1 { (k, n) } else { best })
}

fn steps_of<'c>(cx: &'c Context) -> Result<&'c std::result::Result<DecodeSteps, String>> {
    let e = cx.export.expect("checked by the caller");
    if cx.steps.get().is_none() {
        let v = decode_steps(e, cx.opts.decode_range.as_deref())?;
        let _ = cx.steps.set(v);
    }
    Ok(cx.steps.get().expect("set above"))
}

pub fn g6_decode_regularity(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G6", "decode-regularity", "share");
    if cx.opts.tier != Tier::Decode {
        return Ok(g.skip("decode tier only"));
    }
    if cx.export.is_none() {
        return Ok(g.skip("no export to read (a .qdstrm: see G2)"));
    }
    let t = &cx.opts.thresholds;
    let ds = match steps_of(cx)? {
        Err(why) => return Ok(g.decide(true, 0.0, Some(t.min_decode_steps as f64), why.clone())),
        Ok(ds) => ds,
    };
    g.evidence.push(format!(
        "step label {} ({}); iteration-like labels: {}",
        ds.label,
        ds.chosen_by,
        ds.candidates.iter().map(|(l, n)| format!("{l} ({n})")).collect::<Vec<_>>().join(", ")
    ));
    let n = ds.steps.len();
    if n < t.min_decode_steps {
        g.unit = "steps".into();
        return Ok(g.decide(
            true,
            n as f64,
            Some(t.min_decode_steps as f64),
            format!("only {n} {} steps, fewer than {}: capture more decode steps", ds.label, t.min_decode_steps),
        ));
    }
    let mut iv = step_intervals(&ds.steps);
    iv.sort_unstable();
    let med = lower_median(&iv);
    let inside = iv.iter().filter(|&&x| 2 * x >= med && x <= 2 * med).count();
    let gap_share = if iv.is_empty() { 0.0 } else { inside as f64 / iv.len() as f64 };
    let (mode, mode_n) = kernel_mode(&ds.steps);
    let k_share = mode_n as f64 / n as f64;
    let pct = |v: &[i64], q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    g.evidence.push(format!(
        "{n} steps; step-start intervals min/median/p90/max {}/{}/{}/{} µs; {inside} of {} in the dominant bucket [{} µs, {} µs]",
        iv.first().copied().unwrap_or(0) / 1000,
        med / 1000,
        pct(&iv, 0.9) / 1000,
        iv.last().copied().unwrap_or(0) / 1000,
        iv.len(),
        med / 2000,
        med * 2 / 1000
    ));
    g.evidence.push(format!("kernels per step: most frequent {mode} in {mode_n} of {n} steps ({:.1} %)", k_share * 100.0));
    if mode == 0 {
        g.unit = "kernels per step".into();
        return Ok(g.decide(
            true,
            0.0,
            Some(1.0),
            format!("most {} steps carry no kernel: the step range is not on the thread that launches the GPU work (or CUDA data is missing)", ds.label),
        ));
    }
    if gap_share < t.min_dominant_gap_share {
        return Ok(g.decide(
            true,
            gap_share,
            Some(t.min_dominant_gap_share),
            format!(
                "irregular decode steps: only {:.1} % of step-start intervals lie within [median/2, 2·median] around the {} µs median (below {:.0} %); capture steady decode",
                gap_share * 100.0,
                med / 1000,
                t.min_dominant_gap_share * 100.0
            ),
        ));
    }
    if k_share < t.min_stable_kernel_share {
        g.unit = "share of steps".into();
        return Ok(g.decide(
            true,
            k_share,
            Some(t.min_stable_kernel_share),
            format!(
                "unstable decode steps: the most frequent kernel count ({mode}) holds for only {:.1} % of steps (below {:.0} %)",
                k_share * 100.0,
                t.min_stable_kernel_share * 100.0
            ),
        ));
    }
    Ok(g.decide(
        false,
        gap_share,
        Some(t.min_dominant_gap_share),
        format!(
            "{n} {} steps: {:.1} % of step-start intervals in the dominant bucket around the {} µs median; {mode} kernels in {:.1} % of steps",
            ds.label,
            gap_share * 100.0,
            med / 1000,
            k_share * 100.0
        ),
    ))
}

pub fn g7_prefill_contamination(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G7", "prefill-contamination", "share");
    if cx.opts.tier != Tier::Decode {
        return Ok(g.skip("decode tier only"));
    }
    if cx.export.is_none() {
        return Ok(g.skip("no export to read (a .qdstrm: see G2)"));
    }
    let t = &cx.opts.thresholds;
    let ds = match steps_of(cx)? {
        Err(_) => return Ok(g.skip("no decode steps (see G6)")),
        Ok(ds) if ds.steps.is_empty() => return Ok(g.skip("no decode steps (see G6)")),
        Ok(ds) => ds,
    };
    let n = ds.steps.len();
    let mut walls: Vec<i64> = ds.steps.iter().map(|s| s.end - s.start).collect();
    walls.sort_unstable();
    let med = lower_median(&walls);
    let (mode, _) = kernel_mode(&ds.steps);
    if mode == 0 {
        return Ok(g.skip("the decode steps carry no kernel (G6 decides)"));
    }
    let (mut by_prefill, mut by_kernels, mut by_duration) = (0, 0, 0);
    let mut bad: Vec<&Step> = Vec::new();
    for s in &ds.steps {
        let p = s.prefills > 0;
        let k = (s.kernels as f64) > mode as f64 * t.kernel_outlier_factor || (s.kernels as f64) * t.kernel_outlier_factor < mode as f64;
        let d = (s.end - s.start) as f64 > med as f64 * t.duration_outlier_factor;
        by_prefill += p as usize;
        by_kernels += k as usize;
        by_duration += d as usize;
        if p || k || d {
            bad.push(s);
        }
    }
    let share = bad.len() as f64 / n as f64;
    g.evidence.push(format!(
        "{n} {} steps; median duration {} µs, most frequent kernel count {mode}; unlike it: {} (prefill-labelled range inside {by_prefill}, kernel count outside [{:.0}, {:.0}] {by_kernels}, duration above {} µs {by_duration})",
        ds.label,
        med / 1000,
        bad.len(),
        mode as f64 / t.kernel_outlier_factor,
        mode as f64 * t.kernel_outlier_factor,
        (med as f64 * t.duration_outlier_factor / 1000.0) as i64
    ));
    for s in bad.iter().take(5) {
        g.evidence.push(format!(
            "step at {}: {} µs, {} kernels, {} prefill range(s)",
            secs(s.start),
            (s.end - s.start) / 1000,
            s.kernels,
            s.prefills
        ));
    }
    if let Some(s) = bad.first() {
        g.at_ns = Some(s.start);
    }
    Ok(if share > t.max_contaminated_share {
        g.decide(
            true,
            share,
            Some(t.max_contaminated_share),
            format!(
                "prefill contamination: {} of {n} decode steps ({:.2} %, above {:.0} %) are unlike the dominant decode step ({by_prefill} contain a prefill range, {by_kernels} kernel-count and {by_duration} duration outliers); capture decode without arriving requests (or a longer steady window)",
                bad.len(),
                share * 100.0,
                t.max_contaminated_share * 100.0
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(t.max_contaminated_share),
            format!("{} of {n} decode steps ({:.2} %) are unlike the dominant decode step", bad.len(), share * 100.0),
        )
    })
}

// ---------------------------------------------------------------------------------------------------------
// G8 NVTX readiness (only with --readiness; the analysis is crate::readiness, `nvtx-readiness`)

/// G8: can the capture's NVTX ranges attribute engine time to named phases? PASS when `nvtx-readiness` says
/// READY, RETRY with its reason otherwise; measured = the opaque share of `P.engine.iteration` wall time.
pub fn g8_readiness(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G8", "nvtx-readiness", "share");
    let Some(ropts) = &cx.opts.readiness else { return Ok(g.skip("not requested (--readiness)")) };
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let doc = crate::readiness::analyze(e, ropts)?;
    let retry = doc.verdict == crate::readiness::ReadinessVerdict::Retry;
    let mut g = match doc.iterations.opaque_share {
        Some(share) => g.decide(retry, share, Some(ropts.max_opaque_share), doc.reason.clone()),
        None => {
            let mut g = g.decide(true, 0.0, Some(ropts.max_opaque_share), doc.reason.clone());
            g.measured = None;
            g
        }
    };
    g.at_ns = doc.largest_opaque_gaps.first().map(|gap| gap.start);
    let present: Vec<&str> = doc.taxonomy.iter().filter(|t| t.present).map(|t| t.name.as_str()).collect();
    let missing: Vec<&str> = doc.taxonomy.iter().filter(|t| !t.present).map(|t| t.name.as_str()).collect();
    let name = e.name();
    if let Some(p) = &doc.source.range_prefix {
        g.evidence.push(format!(
            "{name}: range prefix {p}{}; taxonomy present: {}; missing: {}",
            if doc.source.range_prefix_inferred { " (inferred)" } else { "" },
            if present.is_empty() { "none".to_string() } else { present.join(", ") },
            if missing.is_empty() { "none".to_string() } else { missing.join(", ") }
        ));
    }
    if doc.iterations.occurrences > 0 {
        g.evidence.push(format!(
            "{name}: {} iterations, wall {} ns, opaque {} ns, {} without a child range",
            doc.iterations.occurrences, doc.iterations.wall_ns, doc.iterations.opaque_ns, doc.iterations.without_children
        ));
    }
    if let Some(gap) = doc.largest_opaque_gaps.first() {
        g.evidence.push(format!(
            "{name}: largest opaque gap {} ns at {} (after {}, before {})",
            gap.duration_ns,
            gap.start,
            gap.after.as_deref().unwrap_or("the iteration start"),
            gap.before.as_deref().unwrap_or("the iteration end")
        ));
    }
    for h in &doc.naming.labels_with_ids {
        g.evidence.push(format!("{name}: labels carry ids: {} ({} labels, {} occurrences)", h.pattern, h.labels, h.occurrences));
    }
    for l in &doc.naming.outside_prefix_on_engine_threads {
        g.evidence.push(format!("{name}: label outside the prefix on an engine thread: {} ({} occurrences)", l.label, l.occurrences));
    }
    for d in &doc.naming.labels_at_several_depths {
        let depths: Vec<String> = d.depths.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        g.evidence.push(format!("{name}: label at several depths: {} ({})", d.label, depths.join(", ")));
    }
    for s in &doc.unenclosed_syncs.by_api {
        g.evidence.push(format!("{name}: blocking sync outside any range under the prefix: {} × {} ({} ns)", s.calls, s.api, s.total_ns));
    }
    if let Some(n) = &doc.cuda_graphs.note {
        g.evidence.push(n.clone());
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_read() {
        let s = settings_from_flags("profile --trace=cuda,nvtx,osrt --cuda-graph-trace=node -o x");
        assert_eq!(s.graph_mode.as_deref(), Some("node"));
        assert_eq!(s.cuda_trace, Some(true));
        let s = settings_from_flags("profile -t nvtx,osrt --cuda-graph-trace graph");
        assert_eq!(s.graph_mode.as_deref(), Some("graph"));
        assert_eq!(s.cuda_trace, Some(false));
        assert_eq!(settings_from_flags("python3 x.py"), TraceSettings::default());
    }

    #[test]
    fn log_lines_are_classified() {
        let log = "ok line\n**** Analysis failed with:\nValue: \"x\\n[QuadDCommon::tag_message*] = Unknown runtime API function index: 468\\n\"\n\
                   Error: CUPTI_ERROR_INVALID_DEVICE\nCUDA versions. CUPTI/Runtime/Driver: 12.4 / 13.0 / 12.2\nERR_NVGPUCTRPERM - user lacks permission\n";
        let f = scan_log("l.txt", log);
        let classes: Vec<&str> = f.iter().map(|x| x.class).collect();
        assert_eq!(classes, vec!["analysis-failed", "unknown-runtime-api", "cupti-init", "cupti-init", "permission"]);
        assert_eq!(f[1].at, "l.txt:3");
    }

    #[test]
    fn provenance_is_read_tolerantly() {
        let d = serde_json::json!({"capture": {"flags": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"]}});
        let s = settings_from_provenance("p.json", &d);
        assert_eq!(s.graph_mode.as_deref(), Some("node"));
        // a whole `nsys profile` command without --cuda-graph-trace: nsys's default, graph
        let d = serde_json::json!({"capture": {"flags_argv": ["profile", "--trace=cuda,nvtx", "app"]}});
        assert_eq!(settings_from_provenance("p.json", &d).graph_mode.as_deref(), Some("graph"));
        // extra flags only: unknown
        let d = serde_json::json!({"capture": {"flags": "'--sample=none' '--backtrace=none'"}});
        assert_eq!(settings_from_provenance("p.json", &d).graph_mode, None);
        let d = serde_json::json!({"nsys": {"cmd": "nsys profile --cuda-graph-trace=node app"}});
        assert_eq!(settings_from_provenance("p.json", &d).graph_mode.as_deref(), Some("node"));
        assert_eq!(settings_from_provenance("p.json", &serde_json::json!({})), TraceSettings::default());
        // nsys-resolve's shape: flags null when not given, flags_argv the split words
        let d = serde_json::json!({"capture": {"flags": null, "flags_argv": []}});
        assert_eq!(settings_from_provenance("p.json", &d), TraceSettings::default());
        let d = serde_json::json!({"capture": {"flags": null, "flags_argv": ["-t", "cuda,nvtx", "--cuda-graph-trace=node"]}});
        let s = settings_from_provenance("p.json", &d);
        assert_eq!((s.graph_mode.as_deref(), s.cuda_trace), (Some("node"), Some(true)));
    }
}
