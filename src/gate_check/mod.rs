//! `gate-check`: PASS/RETRY capture gates. A capture that ran proves nothing: each gate decides one reason
//! why a capture cannot be analysed, with the number it measured and the threshold it compared it to.
//!
//! The gate list is an extensible `Vec<GateResult>`: one function per gate (`g0_profiler_health`, …), each
//! taking the [`Context`] and returning one [`GateResult`]; [`gates`] calls them in order. A new gate is one
//! more function and one more line in [`gates`].

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::DeviceKind;
use crate::export::{self, Export};

mod decode;
mod health;
mod readiness;
mod settings;
mod window;
pub use decode::*;
pub use health::*;
pub use readiness::*;
pub use settings::*;
pub use window::*;

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
/// Written in the case of the document's own verdict (`PASS`, `RETRY`, `SKIP`; issue #41); the lowercase of
/// bundles written before is still read.
#[serde(rename_all = "UPPERCASE")]
pub enum GateVerdict {
    #[serde(alias = "pass")]
    Pass,
    #[serde(alias = "retry")]
    Retry,
    #[serde(alias = "skip")]
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
    /// The number the gate decided on (null when it skipped before measuring); a whole number is written as an
    /// integer (`9400`, not `9400.0`: counts stay integers in JSON readers and Nushell).
    #[serde(serialize_with = "whole_as_integer")]
    pub measured: Option<f64>,
    /// The threshold it was compared with (null when the gate has no numeric threshold); whole: an integer.
    #[serde(serialize_with = "whole_as_integer")]
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

/// `Some(9400.0)` as `9400`, `Some(0.25)` as `0.25`: a whole number of at most 2^53 in magnitude (exact in an
/// f64) is written as an integer.
fn whole_as_integer<S: serde::Serializer>(v: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match *v {
        Some(x) if x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_992.0 => s.serialize_i64(x as i64),
        Some(x) => s.serialize_f64(x),
        None => s.serialize_none(),
    }
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
    /// Rows of the runtime and device tables with a NULL `start`, NULL `end` or `end < start`, by table and
    /// reason: skipped by every gate. Present only when a row was skipped.
    #[serde(default, skip_serializing_if = "crate::export::RowSkips::is_empty")]
    pub skipped_rows: crate::export::RowSkips,
    /// What the export could not say plainly: an unknown fact and why (no export-metadata table), an
    /// informational value decoded lossily, a window cut out of another export. Present only when there is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// `nsyskit.gate/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateCheckDoc {
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

impl Document for GateCheckDoc {
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

/// Every threshold, each a flag of `gate-check` (flattened into [`crate::flags::gate_check::GateCheckArgs`];
/// the Nushell command's signature is built from the same definition). The doc comment of each field is the
/// flag's help in both adapters, its `default_value_t` the one default ([`Thresholds::default`] reads them).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Thresholds {
    /// G2: smallest acceptable .nsys-rep in bytes [default: 10000000 for throughput, 1000000 for decode]
    #[arg(long, value_name = "BYTES")]
    pub min_rep_bytes: Option<u64>,
    /// G4: largest share of the CUDA threads' NVTX events that may start after the last CUDA runtime row
    #[arg(long, default_value_t = 0.02, value_name = "SHARE")]
    pub max_nvtx_after_cuda_share: f64,
    /// G5: an empty GPU stretch is long when above this share of the GPU activity window …
    #[arg(long, default_value_t = 0.25, value_name = "SHARE")]
    pub max_gap_share: f64,
    /// … and at least this many milliseconds
    #[arg(long, default_value_t = 500.0, value_name = "MS")]
    pub min_gap_ms: f64,
    /// G6: smallest share of step-start intervals in the dominant bucket [median/2, 2·median]
    #[arg(long, default_value_t = 0.8, value_name = "SHARE")]
    pub min_dominant_gap_share: f64,
    /// G6: smallest share of steps with the most frequent kernel count
    #[arg(long, default_value_t = 0.8, value_name = "SHARE")]
    pub min_stable_kernel_share: f64,
    /// G7: a step is a duration outlier above this factor × the median step duration
    #[arg(long, default_value_t = 3.0, value_name = "FACTOR")]
    pub duration_outlier_factor: f64,
    /// G7: a step is a kernel-count outlier above this factor × the most frequent count (or below it ÷ factor)
    #[arg(long, default_value_t = 1.5, value_name = "FACTOR")]
    pub kernel_outlier_factor: f64,
    /// G7: largest share of steps unlike the dominant decode-step shape
    #[arg(long, default_value_t = 0.01, value_name = "SHARE")]
    pub max_contaminated_share: f64,
    /// G6: fewest decode steps the decode tier accepts
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub min_decode_steps: usize,
}

impl Default for Thresholds {
    /// The flags' defaults, read from their clap definition (one place).
    fn default() -> Self {
        crate::contract::cli::defaults()
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
        for (v, flag) in [
            (self.duration_outlier_factor, "--duration-outlier-factor"),
            (self.kernel_outlier_factor, "--kernel-outlier-factor"),
        ] {
            if !(v.is_finite() && v >= 1.0) {
                return Err(Error::usage(format!("{flag} {v}: expected a factor ≥ 1")).with_arg(flag));
            }
        }
        if !(self.min_gap_ms.is_finite() && self.min_gap_ms >= 0.0) {
            return Err(Error::usage(format!("--min-gap-ms {}: expected milliseconds ≥ 0", self.min_gap_ms))
                .with_arg("--min-gap-ms"));
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
    pub readiness: Option<crate::nvtx_readiness::ReadinessOptions>,
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

/// Check the thresholds and the readiness options before anything is read (a usage error names the flag).
pub fn validate(opts: &GateOptions) -> Result<()> {
    opts.thresholds.validate()?;
    if let Some(r) = &opts.readiness {
        r.validate()?;
    }
    Ok(())
}

/// Run every gate on the capture named in `opts`. CAPTURE `-` is an SQLite export read from standard input
/// (copied into a temporary file, deleted afterwards; messages name it `<stdin>`).
pub fn run(opts: &GateOptions) -> Result<GateCheckDoc> {
    validate(opts)?;
    on_capture(
        opts,
        |o, shown| {
            let (opened, inputs) = open(o, shown)?;
            inputs.doc(o, opened.export())
        },
        |d| d,
    )
}

/// `run(opts with the capture to read, how other documents name it)` on `opts.capture`; CAPTURE `-` is first
/// copied from standard input into a temporary file (deleted afterwards), and the gate document `gate_of` finds in
/// the result then names `<stdin>` instead of that file.
pub fn on_capture<T>(
    opts: &GateOptions,
    run: impl FnOnce(&GateOptions, Option<&str>) -> Result<T>,
    gate_of: impl FnOnce(&mut T) -> &mut GateCheckDoc,
) -> Result<T> {
    if opts.capture.as_os_str() != "-" {
        return run(opts, None);
    }
    let copy = crate::export::StdinCopy::read().map_err(|e| e.with_arg("CAPTURE"))?;
    let o = GateOptions { capture: copy.path().to_path_buf(), ..opts.clone() };
    let mut out = copy.run(|_| run(&o, Some(crate::export::STDIN_NAME)))?;
    let doc = gate_of(&mut out);
    doc.source.path = crate::export::STDIN_NAME.into();
    doc.source.sqlite = Some(crate::export::STDIN_NAME.into());
    for g in &mut doc.gates {
        g.reason = copy.rename(&g.reason);
        for ev in &mut g.evidence {
            *ev = copy.rename(ev);
        }
    }
    Ok(out)
}

/// The capture opened for the gates (kept alive, with its temporary folder, until the gates ran), and the
/// SQLite file other documents read with how their own tools would describe it.
pub struct Opened {
    opened: Option<export::OpenedCapture>,
    given: Option<Export>,
    /// The SQLite file analysed and its source as `sqlite-ranges` or `report` describe it (None for a `.qdstrm`).
    pub other: Option<(PathBuf, export::CaptureSource)>,
}

impl Opened {
    /// The open export (None for a `.qdstrm`).
    pub fn export(&self) -> Option<&Export> {
        self.given.as_ref().or(self.opened.as_ref().map(|o| &o.export))
    }
}

/// What the gates read besides the export: the source block, `--log` and `--provenance`.
pub struct GateInputs {
    source: GateSource,
    log: Option<(String, String)>,
    provenance: Option<(String, serde_json::Value)>,
}

impl GateInputs {
    /// The gate document on `export` (None for a `.qdstrm`).
    pub fn doc(self, opts: &GateOptions, export: Option<&Export>) -> Result<GateCheckDoc> {
        gate_doc(opts, self.source, export, self.log, self.provenance)
    }
}

/// Open the capture at `opts.capture` for the gates; `shown` is how the other documents name it when that is
/// not its path (`<stdin>`).
pub fn open(opts: &GateOptions, shown: Option<&str>) -> Result<(Opened, GateInputs)> {
    let capture = &opts.capture;
    let name = capture.display().to_string();
    let (kind, size) = capture_kind(opts)?;
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
        size,
        sqlite: None,
        exported_with: None,
        nsys_version: None,
        log: opts.log.as_ref().map(|p| p.display().to_string()),
        provenance: opts.provenance.as_ref().map(|p| p.display().to_string()),
        skipped_rows: Default::default(),
        notes: Vec::new(),
    };
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
    // the other documents: the SQLite file analysed and how its own tool would describe it
    let mut other: Option<(PathBuf, export::CaptureSource)> = match (&opened, &given, &opts.sqlite) {
        (Some(o), _, _) => Some((o.export.path().to_path_buf(), o.source.clone())),
        (None, Some(g), Some(s)) => Some((
            g.path().to_path_buf(),
            export::CaptureSource {
                path: s.display().to_string(),
                size: std::fs::metadata(s).map(|m| m.len()).unwrap_or(0),
                kind: "sqlite".into(),
                exported_with: None,
                exported_sqlite: None,
            },
        )),
        _ => None,
    };
    if let (Some((_, src)), Some(shown)) = (other.as_mut(), shown) {
        src.path = shown.to_string();
    }
    Ok((Opened { opened, given, other }, GateInputs { source, log, provenance }))
}

/// What kind of capture `opts.capture` is (`sqlite`, `nsys-rep` or `qdstrm`, by its extension) and its size; a
/// missing file, a folder, or `--sqlite` beside a capture that is not a report is refused.
fn capture_kind(opts: &GateOptions) -> Result<(&'static str, u64)> {
    let capture = &opts.capture;
    let name = capture.display().to_string();
    let meta = std::fs::metadata(capture).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::input(format!("{name}: no such file")).with_arg("CAPTURE"),
        _ => Error::input(format!("{name}: cannot read: {e}")).with_arg("CAPTURE"),
    })?;
    if !meta.is_file() {
        return Err(Error::input(format!("{name}: not a regular file")).with_arg("CAPTURE"));
    }
    // by its first bytes (a report renamed .sqlite is still a report), else by its extension
    let ext = capture.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let kind = match (export::capture::sniff(capture), ext.as_str()) {
        (Some(export::capture::FileKind::Report { .. }), _) => "nsys-rep",
        (Some(export::capture::FileKind::Qdstrm { .. }), _) => "qdstrm",
        (Some(export::capture::FileKind::Sqlite), _) => "sqlite",
        (_, "nsys-rep" | "qdrep") => "nsys-rep",
        (_, "qdstrm") => "qdstrm",
        _ => "sqlite",
    };
    if opts.sqlite.is_some() && kind != "nsys-rep" {
        return Err(Error::usage(format!(
            "--sqlite gives the export of a .nsys-rep CAPTURE, but {name} is a {kind} file"
        ))
        .with_arg("--sqlite"));
    }
    Ok((kind, meta.len()))
}

/// What the gates ask the next scans of the timed tables to keep besides their facts: G5 reads the valid
/// intervals of the window tables (throughput tier).
pub fn keep_for_gates(opts: &GateOptions, e: &Export) {
    if opts.tier == Tier::Throughput {
        e.keep_intervals(&WINDOW_TABLES.map(|k| k.table()));
    }
}

/// gate-check's verdict on a capture, its retried gates and their reasons, and where it was read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceGates {
    /// `PASS` or `RETRY`.
    pub verdict: String,
    /// The retried gates (`G4`).
    pub retry: Vec<String>,
    /// `G4: CUDA data stops at …`, one per retried gate.
    pub reasons: Vec<String>,
    /// `kernel_profile.gates`, `pod_attach.gate`, `serve_capture.gate`, or `gate-check on the export`.
    pub source: String,
}

/// `ID: reason` of each retried gate of a gate-check document read as JSON (verdicts in either case: older
/// documents wrote them lower case).
pub fn retry_reasons(doc: &Value) -> Vec<String> {
    doc.get("gates")
        .and_then(|l| l.as_array())
        .into_iter()
        .flatten()
        .filter(|x| x.get("verdict").and_then(|v| v.as_str()).is_some_and(|v| v.eq_ignore_ascii_case("retry")))
        .map(|x| {
            format!(
                "{}: {}",
                x.get("id").and_then(|v| v.as_str()).unwrap_or("?"),
                x.get("reason").and_then(|v| v.as_str()).unwrap_or("")
            )
        })
        .collect()
}

impl EvidenceGates {
    /// From a gate-check document as JSON (`{verdict, retry, gates[]}`), read at `source`.
    pub fn of_doc(g: &Value, source: &str) -> Option<EvidenceGates> {
        let verdict = g.get("verdict")?.as_str()?.to_string();
        let retry: Vec<String> = g
            .get("retry")
            .and_then(|r| r.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default();
        Some(EvidenceGates { verdict, retry, reasons: retry_reasons(g), source: source.into() })
    }
    /// gate-check (throughput tier) run on an open export, the one source every tool reads it from.
    pub fn of_export(export: &Export, source: &export::CaptureSource) -> Result<Option<EvidenceGates>> {
        let g = gate_doc_of_open(export, source)?;
        let v = serde_json::to_value(&g).map_err(|e| Error::input(format!("{}: gate: {e}", export.name())))?;
        Ok(EvidenceGates::of_doc(&v, "gate-check (throughput tier) on the export"))
    }
    /// Did gate-check reject the capture?
    pub fn rejected(&self) -> bool {
        self.verdict == "RETRY"
    }
}

/// gate-check's document (default options: throughput tier) of an export already open, `source` saying where
/// it came from: the gates report checks its verdict against (its scans' facts shared with the evidence).
fn gate_doc_of_open(e: &Export, src: &export::CaptureSource) -> Result<GateCheckDoc> {
    let opts = GateOptions { capture: PathBuf::from(&src.path), ..Default::default() };
    gate_doc(&opts, source_of_open(src), Some(e), None, None)
}

/// How the gates describe an export already open, `src` saying where it came from.
fn source_of_open(src: &export::CaptureSource) -> GateSource {
    GateSource {
        path: src.path.clone(),
        kind: if src.kind == "nsys-rep" { "nsys-rep".into() } else { "sqlite".into() },
        size: src.size,
        sqlite: Some(if src.kind == "nsys-rep" { "exported".into() } else { src.path.clone() }),
        exported_with: src.exported_with.clone(),
        nsys_version: None,
        log: None,
        provenance: None,
        skipped_rows: Default::default(),
        notes: Vec::new(),
    }
}

/// The gates on the open export.
fn gate_doc(
    opts: &GateOptions,
    mut source: GateSource,
    export: Option<&Export>,
    log: Option<(String, String)>,
    provenance: Option<(String, serde_json::Value)>,
) -> Result<GateCheckDoc> {
    if let Some(e) = export {
        check_is_nsys_export(e)?;
        source.nsys_version = e.nsys_version()?;
        // the gates aggregate in SQL: refuse impossible timestamps first, count invalid intervals
        let mut ph = crate::phase::Phases::new("gate-check");
        // kept by the same scans (one pass per table)
        keep_for_gates(opts, e);
        e.check_timestamps(&crate::export::rows::TIMED_TABLES)?;
        ph.mark("timed_table_scans");
        let timed = [export::schema::RUNTIME, export::schema::KERNEL, export::schema::MEMCPY, export::schema::MEMSET];
        e.count_interval_skips(&timed, &mut source.skipped_rows)?;
    }
    let cx = Context { opts, source: &source, export, log, provenance, steps: OnceCell::new() };
    let gates = gates(&cx)?;
    if let Some(e) = export {
        source.notes = e.caveats()?;
    }
    let retry: Vec<String> = gates.iter().filter(|g| g.verdict == GateVerdict::Retry).map(|g| g.id.clone()).collect();
    let (schema, tool) = GateCheckDoc::header();
    Ok(GateCheckDoc {
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
    out.push(crate::phase::timed("gate-check", "g0_profiler_health", || g0_profiler_health(cx))?);
    out.push(crate::phase::timed("gate-check", "g1_graph_tracing", || g1_graph_tracing(cx))?);
    out.push(crate::phase::timed("gate-check", "g2_report_size", || g2_report_size(cx))?);
    out.push(crate::phase::timed("gate-check", "g3_kernel_rows", || g3_kernel_rows(cx))?);
    out.push(crate::phase::timed("gate-check", "g4_cuda_coverage", || g4_cuda_coverage(cx))?);
    out.push(crate::phase::timed("gate-check", "g5_traffic", || g5_traffic(cx))?);
    out.push(crate::phase::timed("gate-check", "g6_decode_regularity", || g6_decode_regularity(cx))?);
    out.push(crate::phase::timed("gate-check", "g7_prefill_contamination", || g7_prefill_contamination(cx))?);
    if cx.opts.readiness.is_some() {
        out.push(crate::phase::timed("gate-check", "g8_readiness", || g8_readiness(cx))?);
    }
    Ok(out)
}

/// A file that is SQLite but not an nsys export is unusable input (exit 2).
fn check_is_nsys_export(e: &Export) -> Result<()> {
    e.require(crate::export::schema::STRING_IDS, &crate::export::schema::cols::STRING_IDS).map_err(|err| {
        Error::input(format!("{}; not an `nsys export --type sqlite` file", err.message)).with_arg("CAPTURE")
    })?;
    Ok(())
}

fn read_provenance(p: &Path) -> Result<serde_json::Value> {
    let name = p.display().to_string();
    let bytes =
        crate::contract::Input::Path(p.to_path_buf()).read_json_bytes().map_err(|e| e.with_arg("--provenance"))?;
    let docs = crate::contract::parse_json_stream(&bytes, &name).map_err(|e| e.with_arg("--provenance"))?;
    let Some(doc) = docs.into_iter().next() else {
        return Err(Error::input(format!("{name}: empty, expected an nsyskit.provenance/v1 JSON document"))
            .with_arg("--provenance"));
    };
    if !doc.value.is_object() {
        return Err(Error::input(format!("{name}: line {}: expected a JSON object (nsyskit.provenance/v1)", doc.line))
            .with_arg("--provenance"));
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

/// The device tables of the GPU activity window and coverage: KERNEL (first: the kernel-start tenths read its
/// rows), MEMCPY, MEMSET and GRAPH_TRACE — GPU busy is the union of all four; a graph-level replay is one
/// GRAPH_TRACE row of GPU work, not an empty stretch.
const WINDOW_TABLES: [DeviceKind; 4] =
    [DeviceKind::Kernel, DeviceKind::Memcpy, DeviceKind::Memset, DeviceKind::GraphTrace];

#[cfg(test)]
mod tests {
    use super::*;

    /// `gate-check --ranges`: the ranges reads leave the gates no runtime or device table to scan, and what
    /// they computed (counts, sums, threads, G5's intervals) is what the gates' own scans compute.
    #[test]
    fn ranges_reads_answer_the_gates_scans() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = root.join("fixtures/nsys-2025.3.1/decode_mixed.sqlite");
        let opts = GateOptions { capture: path.clone(), ..Default::default() };
        let shared = Export::open(&path).unwrap();
        keep_for_gates(&opts, &shared);
        let src = export::CaptureSource {
            path: path.display().to_string(),
            size: 0,
            kind: "sqlite".into(),
            exported_with: None,
            exported_sqlite: None,
        };
        crate::pipeline::shared::ranges_sharing_scans(&shared, &src, &Default::default()).unwrap();
        let own = Export::open(&path).unwrap();
        keep_for_gates(&opts, &own);
        own.check_timestamps(&export::rows::TIMED_TABLES).unwrap();
        let fact = |s: &export::rows::TimedStats| {
            let mut t: Vec<i64> = s.thread_ids.iter().copied().collect();
            t.sort_unstable();
            (s.rows, s.max_end, s.sum_dur, t, s.node_rows, format!("{:?}", s.skips))
        };
        let mut read = 0;
        use export::schema::{KERNEL, MEMCPY, MEMSET, NVTX_EVENTS, RUNTIME};
        for t in [RUNTIME, KERNEL, MEMCPY, MEMSET, NVTX_EVENTS] {
            if !shared.has_table(t) {
                continue;
            }
            assert!(shared.stats_wanted(t).is_none(), "{t}: the gates would scan it again");
            assert_eq!(shared.known_stats(t, fact), own.known_stats(t, fact), "{t}");
            read += 1;
        }
        assert!(read >= 4, "the fixture has the NVTX, runtime, kernel and memcpy tables");
        // G4's marks and ranges on the runtime threads, from the NVTX read (no scan of its own), at any cut: what
        // its own scan counts (the fixture has marks, push/pop and start/end ranges; the scan is SQL's answer:
        // tests of the export layer)
        assert!(shared.knows_nvtx_threads() && !own.knows_nvtx_threads());
        let mut starts: Vec<i64> = crate::sqlite_ranges::load_occurrences(&own, &Default::default())
            .unwrap()
            .occurrences
            .iter()
            .map(|o| o.start)
            .collect();
        starts.sort_unstable();
        let n = starts.len();
        let last_runtime = own.max_end(RUNTIME).unwrap().unwrap();
        for cut in [i64::MIN, starts[0], starts[n / 2], starts[n - 1] - 1, starts[n - 1], last_runtime] {
            let (a, b) = (shared.nvtx_on_runtime_threads(cut).unwrap(), own.nvtx_on_runtime_threads(cut).unwrap());
            assert_eq!(a, b, "after {cut}");
        }
        let (all, after, _) = shared.nvtx_on_runtime_threads(starts[n / 2]).unwrap();
        assert!(after > 0 && after < all, "a cut in the middle counts some: {after} of {all}");
        // `gate-check --report`: the gates run beside the step budget on a connection of their own that took
        // over the facts and the kept intervals; the shared connection keeps its facts
        let beside = Export::open(&path).unwrap();
        beside.take_over_facts(&shared);
        let kept = |e: &Export| e.known_stats(export::schema::KERNEL, |s| s.kept_intervals()).unwrap();
        assert!(kept(&beside) > 0 && kept(&shared) == 0, "the kernel intervals moved to the gates' connection");
        for t in [export::schema::RUNTIME, export::schema::KERNEL, export::schema::MEMCPY] {
            assert!(beside.stats_wanted(t).is_none(), "{t}: the gates would scan it again");
            assert_eq!(beside.known_stats(t, fact), own.known_stats(t, fact), "{t}");
            assert_eq!(shared.known_stats(t, fact), own.known_stats(t, fact), "{t}");
        }
        // the same rows in table order, whatever the parts (the kept ones are the scans' rowid chunks)
        let rows = |e: &Export| {
            let w = e.window_intervals(&WINDOW_TABLES).unwrap();
            (w.intervals().collect::<Vec<_>>(), w.first_table().count(), w.first_invalid)
        };
        let own_rows = rows(&own);
        assert!(!own_rows.0.is_empty() && own_rows.1 > 0);
        assert_eq!(rows(&beside), own_rows);
        assert_eq!(rows(&shared), own_rows, "read again when moved");
    }

    /// `gate-check --report`: the report's ranges analysis shares the device rows it read (the step budget's
    /// timelines), and the intervals G5 keeps are those rows, not a copy: the same intervals, parts and invalid
    /// starts as the gates' own scans, taken over by the gates' connection.
    #[test]
    fn shared_device_rows_are_the_gates_intervals() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for name in ["decode_mixed", "gpu_full_node"] {
            let path = root.join(format!("fixtures/nsys-2025.3.1/{name}.sqlite"));
            let opts = GateOptions { capture: path.clone(), ..Default::default() };
            let shared = Export::open(&path).unwrap();
            keep_for_gates(&opts, &shared);
            let ro = crate::sqlite_ranges::RangesOptions { fold: true, ..Default::default() };
            let want = |l: &str| crate::step_label::is_iteration_like(l);
            let (_, collected) =
                crate::sqlite_ranges::analyze_with_intervals_keeping(&shared, &ro, &want, false, None).unwrap();
            let kept = |e: &Export| e.known_stats(export::schema::KERNEL, |s| s.kept_intervals()).unwrap();
            let kernels: usize =
                collected.rows.device.iter().filter(|c| c.kind == Some(DeviceKind::Kernel)).map(|c| c.rows.len()).sum();
            assert!(kernels > 0 && kept(&shared) == kernels, "{name}: the kernel rows are the kept intervals");
            let beside = Export::open(&path).unwrap();
            beside.take_over_facts(&shared);
            assert_eq!((kept(&beside), kept(&shared)), (kernels, 0), "{name}: moved to the gates' connection");
            // the range rows the read counted, on both connections, are SQL's count
            let sql = Export::open(&path).unwrap().nvtx_range_rows().unwrap();
            assert!(sql.is_some_and(|n| n > 0), "{name}: the fixture has NVTX ranges");
            assert_eq!((shared.nvtx_range_rows().unwrap(), beside.nvtx_range_rows().unwrap()), (sql, sql), "{name}");
            let w = beside.window_intervals(&WINDOW_TABLES).unwrap();
            assert!(w.parts.iter().all(|p| matches!(p, export::rows::IntervalPart::Rows(..))), "{name}: copied");
            let own = Export::open(&path).unwrap();
            let o = own.window_intervals(&WINDOW_TABLES).unwrap();
            let view = |w: &export::rows::WindowRows| {
                (w.intervals().collect::<Vec<_>>(), w.first_table().count(), w.first_invalid.clone())
            };
            assert_eq!(view(&w), view(&o), "{name}");
            assert_eq!(
                device_gaps(&beside).unwrap().map(|g| (g.first, g.last, g.gaps)),
                device_gaps(&own).unwrap().map(|g| (g.first, g.last, g.gaps)),
                "{name}: read again once taken"
            );
        }
    }

    /// `gate-check --report`: G5 of the gates' own document is read back from what the evidence's gates computed
    /// on the same export (taken over with its facts), under the same thresholds only: other thresholds compute
    /// their own, as a fresh export does.
    #[test]
    fn g5_is_read_back_under_its_thresholds() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1/decode_mixed.sqlite");
        let src = export::CaptureSource {
            path: path.display().to_string(),
            size: std::fs::metadata(&path).unwrap().len(),
            kind: "sqlite".into(),
            exported_with: None,
            exported_sqlite: None,
        };
        let g5 = |e: &Export, t: Option<(f64, f64)>| {
            let mut opts = GateOptions { capture: path.clone(), ..Default::default() };
            if let Some((share, ms)) = t {
                (opts.thresholds.max_gap_share, opts.thresholds.min_gap_ms) = (share, ms);
            }
            let doc = gate_doc(&opts, source_of_open(&src), Some(e), None, None).unwrap();
            serde_json::to_value(doc.gates.iter().find(|g| g.id == "G5").unwrap()).unwrap()
        };
        let shared = Export::open(&path).unwrap();
        keep_for_gates(&GateOptions { capture: path.clone(), ..Default::default() }, &shared);
        let evidence = EvidenceGates::of_export(&shared, &src).unwrap().unwrap();
        assert!(!evidence.verdict.is_empty());
        let beside = Export::open(&path).unwrap();
        beside.take_over_facts(&shared);
        let key = |share: f64, ms: f64| {
            let mut t = GateOptions::default().thresholds;
            (t.max_gap_share, t.min_gap_ms) = (share, ms);
            window::g5_key(&t)
        };
        type Found = window::G5Window;
        assert!(beside.recall::<Found>(&key(0.25, 500.0)).is_some(), "the evidence's G5 window moved with the facts");
        let fresh = |t| g5(&Export::open(&path).unwrap(), t);
        assert_eq!(g5(&beside, None), fresh(None));
        // every gap long: another verdict, another list of gaps, computed on the same connection
        let every = Some((0.0, 0.0));
        assert!(beside.recall::<Found>(&key(0.0, 0.0)).is_none());
        let (own, want) = (g5(&beside, every), fresh(every));
        assert_eq!(own, want);
        assert_ne!(own, fresh(None), "the thresholds change G5 on this capture");
    }

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
        let f = crate::health_log::scan_text("l.txt", log).findings;
        let classes: Vec<&str> = f.iter().map(|x| x.class).collect();
        assert_eq!(classes, vec!["analysis-failed", "unknown-runtime-api", "cupti-error", "versions", "permission"]);
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
