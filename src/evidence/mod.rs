//! The evidence `capture-compare` and `report` read: an evidence bundle (from `bundle-merge`), a bare
//! `nsyskit.ranges/v1` document, or a raw nsys `.sqlite` export (optionally with a provenance document).
//!
//! Everything is deserialised tolerantly from the documented shapes (see `docs/compare-report.md`): a field
//! that is absent is "unknown", never guessed, and every fact records where it came from.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::categories::KernelStat;
use crate::contract::{Error, Input, Result};
use crate::export::schema;
use crate::export::{Export, SQLITE_MAGIC};

mod facts;
mod json;
pub use facts::*;
pub use json::*;

/// One blocking API's calls inside a range (`ranges[].sync`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(rename = "SyncStat")]
pub struct RangeSync {
    pub calls: i64,
    pub total_ns: i64,
}

/// A `ranges[]` row of an `nsyskit.ranges/v1` document (the fields compare and report use).
///
/// Not [`crate::sqlite_ranges::RangeStats`] on purpose: this is a lenient reading view (every field defaults, counts
/// are signed, `depths` keys are JSON strings) of a ranges document that may come from a bundle written by
/// another nsyskit version, while `RangeStats` is the strict type the ranges library writes. Both views of an
/// export are made the same way (`From<&SqliteRangesDoc>` reads the library's document into this view).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RangeRow {
    pub label: String,
    pub occurrences: i64,
    pub occurrences_with_device_work: i64,
    pub runtime_calls: i64,
    pub kernels: i64,
    pub memcpys: i64,
    pub memsets: i64,
    pub graph_traces: i64,
    pub host_wall_time_ns: i64,
    pub kernel_work_ns: i64,
    pub host_range_kernel_coverage_ns: i64,
    pub kernel_busy_union_ns: i64,
    pub kernel_span_ns: i64,
    pub gpu_idle_within_kernel_span_ns: i64,
    pub uncovered_host_time_ns: i64,
    pub sync: BTreeMap<String, RangeSync>,
    pub depths: BTreeMap<String, i64>,
    pub parents: BTreeMap<String, i64>,
}

impl RangeRow {
    /// This label as a step-label candidate ([`crate::step_label`]; `depths` keys are depths as text).
    pub fn step_candidate(&self) -> crate::step_label::StepCandidate<'_> {
        crate::step_label::StepCandidate {
            label: &self.label,
            occurrences: self.occurrences.max(0) as u64,
            with_device_work: Some(self.occurrences_with_device_work.max(0) as u64),
            min_depth: self.depths.keys().filter_map(|d| d.parse().ok()).min(),
            host_wall_ns: Some(self.host_wall_time_ns),
            period: None,
        }
    }
    /// Every occurrence of this label is outermost on its thread (depth 0).
    pub fn is_outermost(&self) -> bool {
        self.depths.iter().all(|(d, _)| d == "0") && !self.depths.is_empty()
    }
}

/// `thread_diagnostics[]` of a ranges document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ThreadRow {
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    pub pid: i64,
    pub tid: i64,
    pub mapping: String,
    pub is_main_thread: bool,
    pub thread_name: Option<String>,
    pub occurrences: i64,
    pub runtime_calls: i64,
    pub device_rows_attributed: i64,
}

/// `totals.per_device[]` of a ranges document: one device's rows (every device row, any process).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct DeviceTotalsRow {
    #[serde(rename = "deviceId")]
    pub device_id: i64,
    pub device_rows: i64,
    /// Union of its KERNEL, MEMCPY, MEMSET and GRAPH_TRACE intervals.
    pub busy_union_ns: i64,
    pub first_start: i64,
    pub last_end: i64,
}

/// `totals` of a ranges document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RangeTotals {
    pub per_device: Vec<DeviceTotalsRow>,
    pub kernels_total: i64,
    pub kernel_work_total_ns: i64,
    pub kernels_attributed: i64,
    pub kernel_work_attributed_ns: i64,
    pub kernels_unattributed: i64,
    pub kernel_work_unattributed_ns: i64,
}

/// The parts of an `nsyskit.ranges/v1` document compare and report use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RangesView {
    pub ranges: Vec<RangeRow>,
    pub thread_diagnostics: Vec<ThreadRow>,
    pub totals: RangeTotals,
    pub notes: Vec<String>,
}

impl From<&crate::sqlite_ranges::SqliteRangesDoc> for RangesView {
    /// The view of a document the ranges library wrote (report of an export, `--iterations` windows): the
    /// fields a bundle's ranges document gives, read the same way.
    fn from(d: &crate::sqlite_ranges::SqliteRangesDoc) -> RangesView {
        let n = |v: u64| v as i64;
        let ranges = d
            .ranges
            .iter()
            .map(|r| RangeRow {
                label: r.label.clone(),
                occurrences: n(r.occurrences),
                occurrences_with_device_work: n(r.occurrences_with_device_work),
                runtime_calls: n(r.runtime_calls),
                kernels: n(r.kernels),
                memcpys: n(r.memcpys),
                memsets: n(r.memsets),
                graph_traces: n(r.graph_traces),
                host_wall_time_ns: r.host_wall_time_ns,
                kernel_work_ns: r.kernel_work_ns,
                host_range_kernel_coverage_ns: r.host_range_kernel_coverage_ns,
                kernel_busy_union_ns: r.kernel_busy_union_ns,
                kernel_span_ns: r.kernel_span_ns,
                gpu_idle_within_kernel_span_ns: r.gpu_idle_within_kernel_span_ns,
                uncovered_host_time_ns: r.uncovered_host_time_ns,
                sync: r
                    .sync
                    .iter()
                    .map(|(k, v)| (k.clone(), RangeSync { calls: n(v.calls), total_ns: v.total_ns }))
                    .collect(),
                depths: r.depths.iter().map(|(k, v)| (k.to_string(), n(*v))).collect(),
                parents: r.parents.iter().map(|(k, v)| (k.clone(), n(*v))).collect(),
            })
            .collect();
        let thread_diagnostics = d
            .thread_diagnostics
            .iter()
            .map(|t| ThreadRow {
                global_tid: t.global_tid,
                pid: t.pid,
                tid: t.tid,
                mapping: t.mapping.clone(),
                is_main_thread: t.is_main_thread,
                thread_name: t.thread_name.clone(),
                occurrences: n(t.occurrences),
                runtime_calls: n(t.runtime_calls),
                device_rows_attributed: n(t.device_rows_attributed),
            })
            .collect();
        let t = &d.totals;
        let totals = RangeTotals {
            per_device: t
                .per_device
                .iter()
                .map(|p| DeviceTotalsRow {
                    device_id: p.device_id,
                    device_rows: n(p.device_rows),
                    busy_union_ns: p.busy_union_ns,
                    first_start: p.first_start,
                    last_end: p.last_end,
                })
                .collect(),
            kernels_total: n(t.kernels_total),
            kernel_work_total_ns: t.kernel_work_total_ns,
            kernels_attributed: n(t.kernels_attributed),
            kernel_work_attributed_ns: t.kernel_work_attributed_ns,
            kernels_unattributed: n(t.kernels_unattributed),
            kernel_work_unattributed_ns: t.kernel_work_unattributed_ns,
        };
        RangesView { ranges, thread_diagnostics, totals, notes: d.notes.clone() }
    }
}

/// One kept range occurrence: its label, start and the three per-occurrence quantities compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Occ {
    pub label: String,
    pub start: i64,
    pub host_wall_ns: i64,
    pub kernel_busy_union_ns: i64,
    pub gpu_idle_within_kernel_span_ns: i64,
}

/// The per-occurrence values of a ranges analysis (public API of `crate::sqlite_ranges`: occurrences + metrics).
pub fn occurrences_of(a: &crate::sqlite_ranges::Analysis) -> Vec<Occ> {
    let t = &a.occurrences;
    (0..t.len())
        .map(|i| {
            let (o, m) = (t.get(i), t.metrics(i));
            Occ {
                label: o.label.to_string(),
                start: o.start,
                host_wall_ns: o.end - o.start,
                kernel_busy_union_ns: m.busy_ns,
                gpu_idle_within_kernel_span_ns: m.idle_in_span_ns(),
            }
        })
        .collect()
}

/// A fact about how a capture was taken, with where it was read (`META_DATA_CAPTURE`, `provenance.nsys.version`…).
/// `value` null = unknown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Fact {
    pub value: Value,
    pub source: String,
}

impl Fact {
    fn known(value: Value, source: impl Into<String>) -> Fact {
        Fact { value, source: source.into() }
    }
    pub fn is_known(&self) -> bool {
        !self.value.is_null()
    }
    /// A fact that cannot be read, with the reason (in `source`).
    fn unknown(why: impl Into<String>) -> Fact {
        Fact { value: Value::Null, source: why.into() }
    }
}

/// Counts that show whether CUDA graphs were used and at which level they were traced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphEvidence {
    /// `cudaGraphLaunch*` / `cuGraphLaunch*` runtime calls.
    pub graph_launch_calls: i64,
    /// KERNEL rows with `graphNodeId` set (node-level tracing of replayed graphs).
    pub kernels_with_graph_node: i64,
    /// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` rows (graph-level tracing).
    pub graph_trace_rows: i64,
    /// All KERNEL rows.
    pub kernels: i64,
}

/// The facts that decide whether two captures are comparable. Each is compared as a whole JSON value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureFacts {
    pub nsys_version: Fact,
    pub trace_set: Fact,
    pub capture_flags: Fact,
    /// `node`, `graph`, or null.
    pub graph_trace_level: Fact,
    /// `graphs` (CUDA graphs used), `eager` (kernels, no graph evidence), or null.
    pub cuda_graphs: Fact,
    pub window: Fact,
    pub warmup: Fact,
    /// The list of GPU processes that are not part of the profiled application (empty list = none seen).
    pub foreign_gpu_processes: Fact,
    pub instrumentation: Fact,
    pub gpu: Fact,
    pub clock_policy: Fact,
    pub graph_evidence: Option<GraphEvidence>,
}

/// Everything compare and report know about one capture.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    /// The path given.
    pub source: String,
    /// `report --iterations`: the time window (export clock, ns) the ranges were recomputed over; the step
    /// budget is taken over the same window.
    #[serde(skip)]
    pub step_window: Option<(i64, i64)>,
    /// `bundle`, `ranges` (a bare ranges document) or `sqlite`.
    pub kind: String,
    pub facts: CaptureFacts,
    #[serde(skip)]
    pub ranges: Option<RangesView>,
    #[serde(skip)]
    pub kernels: Option<Vec<KernelStat>>,
    /// Where `kernels` came from (`KERNEL table`, `kernel_profile.top_kernels`).
    #[serde(skip)]
    pub kernels_source: Option<String>,
    /// Σ duration of MEMCPY and MEMSET rows when known (raw export).
    #[serde(skip)]
    pub memcpy_time_ns: Option<i64>,
    /// The provenance block as given.
    #[serde(skip)]
    pub provenance: Option<Value>,
    /// When and on what the capture was taken (the export's metadata, or the bundle's ranges document
    /// `source.capture`).
    #[serde(skip)]
    pub capture: Option<crate::export::CaptureInfo>,
    /// The totals of the whole kernel table (`kernel_profile.totals`) when the bundle records them: shares are
    /// taken over these, whatever part of the table `kernels` lists.
    #[serde(skip)]
    pub kernel_totals: Option<BundleKernelTotals>,
    /// gate-check's verdict on the capture: the bundle's recorded one (`kernel_profile.gates`,
    /// `pod_attach.gate`, `serve_capture.gate`), or gate-check run on the export (report).
    pub gates: Option<EvidenceGates>,
    /// The whole JSON document when the input was a bundle (capture-compare reads `serve_capture`,
    /// `question`, `benchmark`, `baselines` from it).
    #[serde(skip)]
    pub bundle: Option<Value>,
    /// Per-occurrence values of every kept range (raw export read without step detail): the A/B statistics of
    /// capture-compare. With step detail (report) they are not copied out: [`Evidence::occurrence_values`] reads
    /// them from [`Evidence::step_detail`].
    #[serde(skip)]
    pub occurrences: Option<Vec<Occ>>,
    /// The private temporary copy of an export read from stdin or a FIFO (kept while the evidence lives, so
    /// a second reader of the same export, such as capture-compare's gate, opens it instead of `-`).
    #[serde(skip)]
    #[schemars(skip)]
    pub spooled: Option<std::sync::Arc<tempfile::TempPath>>,
    /// How much copy and communication time the compute hides on each device (raw export read with step
    /// detail, i.e. report; measured only when it can change a class: [`crate::step_budget::picture::export_exposure`]).
    #[serde(skip)]
    #[schemars(skip)]
    pub exposure: Option<crate::step_budget::picture::Exposure>,
    /// The ranges analysis of a raw export (whole capture, labels folded) with the intervals of every
    /// occurrence of an iteration-like label: report's step budget reuses it instead of a second analysis.
    #[serde(skip)]
    #[schemars(skip)]
    pub step_detail: Option<std::sync::Arc<(crate::sqlite_ranges::Analysis, crate::sqlite_ranges::Collected)>>,
    /// The step budget's device timelines, built in a thread of their own from the rows that analysis read, while
    /// it went on ([`crate::step_budget::device::build_beside`]; its [`crate::sqlite_ranges::Collected`] then holds no
    /// device rows).
    #[serde(skip)]
    #[schemars(skip)]
    pub step_timelines: Option<crate::step_budget::device::PendingTimelines>,
    /// `TARGET_INFO_SESSION_START_TIME.utcEpochNs` (raw export only).
    #[serde(skip)]
    pub started_utc_ns: Option<i64>,
    /// A raw export without any NVTX range, read with step detail (report): why, and its blocking calls
    /// ([`no_range_of`]).
    #[serde(skip)]
    #[schemars(skip)]
    pub no_range: Option<NoRange>,
    /// What each GPU did over its whole active span ([`crate::step_budget::picture`]), when no step can be attributed
    /// and the device timelines were built (report on an export).
    #[serde(skip)]
    #[schemars(skip)]
    pub picture: Option<Vec<crate::step_budget::picture::PictureRow>>,
}

impl Evidence {
    /// The per-occurrence values of every kept range ([`Evidence::occurrences`]): as kept, else computed from
    /// the step detail; None for evidence read from JSON.
    pub fn occurrence_values(&self) -> Option<std::borrow::Cow<'_, [Occ]>> {
        use std::borrow::Cow;
        match (&self.occurrences, &self.step_detail) {
            (Some(o), _) => Some(Cow::Borrowed(o.as_slice())),
            (None, Some(d)) => Some(Cow::Owned(occurrences_of(&d.0))),
            (None, None) => None,
        }
    }
}

pub use crate::gate_check::EvidenceGates;

/// What a capture without any NVTX range still shows on the host side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NoRange {
    /// Why it has none, when the export says ([`crate::export::NvtxRecorded::no_range_cause`]).
    pub cause: Option<String>,
    /// The blocking sync and copy calls of the whole capture by API (no range encloses them), calls descending.
    pub blocking_calls: Vec<crate::nvtx_readiness::SyncApiCount>,
}

/// [`Evidence::no_range`] of an export whose ranges analysis found no range: nsys's cause when the export
/// records it, and the blocking calls of the whole capture (nvtx-readiness' counting, no range enclosing any).
pub fn no_range_of(export: &Export) -> Result<NoRange> {
    let runtime = export.optional(schema::RUNTIME, &schema::cols::RUNTIME)?.map(|t| t.name.clone());
    let calls = crate::nvtx_readiness::unenclosed_syncs(export, runtime.as_deref(), &[])?;
    Ok(NoRange { cause: export.nvtx_recorded()?.no_range_cause().map(String::from), blocking_calls: calls.by_api })
}

/// The totals of a capture's whole kernel table, as a bundle records them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "KernelTotals")]
pub struct BundleKernelTotals {
    pub total_time_ns: i64,
    pub kernels: Option<i64>,
    pub instances: Option<i64>,
    /// Where they were read (`kernel_profile.totals`).
    pub source: String,
}

/// Does the file start with the SQLite header? (false when it cannot be read: the JSON path reports that; a
/// FIFO or a device is never opened here, so nothing hangs)
fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let regular = std::fs::metadata(path).map(|m| m.is_file()).unwrap_or(false);
    let mut head = [0u8; 16];
    regular
        && crate::contract::open_input(path).ok().and_then(|mut f| f.read_exact(&mut head).ok()).is_some()
        && &head == SQLITE_MAGIC
}

/// Evidence from the bytes of one JSON document (an evidence bundle or a ranges document) named `name`.
pub fn load_json(bytes: Vec<u8>, name: &str) -> Result<Evidence> {
    let mut docs = crate::contract::parse_json_stream(&bytes, name)?;
    drop(bytes); // the text is not needed beside its values
    if docs.is_empty() {
        return Err(Error::input(format!(
            "{name}: empty: expected one JSON document (an evidence bundle) or an SQLite export"
        )));
    }
    if docs.len() != 1 {
        return Err(Error::input(format!(
            "{name}: expected one JSON document (an evidence bundle), found {}",
            docs.len()
        )));
    }
    from_json_owned(docs.pop().map(|d| d.value).unwrap_or_default(), name)
}

/// Does the file start with the SQLite header? (capture-compare's stored-baseline probe)
pub fn looks_like_sqlite(path: &Path) -> bool {
    is_sqlite(path)
}

/// The file to open for a second look at the export: the private copy of stdin/a FIFO, else `path`.
pub fn export_path<'a>(ev: &'a Evidence, path: &'a Path) -> &'a Path {
    ev.spooled.as_deref().map(|p| p.as_ref()).unwrap_or(path)
}

/// Add the `nsyskit.provenance/v1` document at `p` to the evidence: its facts, and the block itself (replacing
/// a bundle's own).
pub fn add_provenance(ev: &mut Evidence, p: &Path) -> Result<()> {
    {
        let pname = p.display().to_string();
        let bytes = Input::Path(p.to_path_buf()).read_json_bytes()?;
        let docs = crate::contract::parse_json_stream(&bytes, &pname)?;
        let Some(doc) = docs.into_iter().next() else {
            return Err(Error::input(format!("{pname}: empty: expected a provenance document")));
        };
        if !doc.value.is_object() {
            return Err(Error::input(format!("{pname}: $: expected a JSON object (a provenance document)")));
        }
        apply_provenance(&mut ev.facts, &doc.value, &pname);
        ev.provenance = Some(doc.value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_flags_keep_switches_only() {
        let w: Vec<String> =
            "profile --trace=cuda,nvtx -o /tmp/x --capture-range cudaProfilerApi --kill=none python3 app.py 18080"
                .split_whitespace()
                .map(String::from)
                .collect();
        assert_eq!(profile_flags(&w), vec!["--trace=cuda,nvtx", "--capture-range=cudaProfilerApi", "--kill=none"]);
        assert_eq!(normalize_version("2023.4.4.54-234433681190v0"), "2023.4.4");
        assert_eq!(normalize_trace(["OSRuntime", "Cuda", "NvtxEvents"].into_iter()), vec!["cuda", "nvtx", "osrt"]);
    }
}
