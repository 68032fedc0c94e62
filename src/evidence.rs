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
/// Not [`crate::ranges::RangeStats`] on purpose: this is a lenient reading view (every field defaults, counts
/// are signed, `depths` keys are JSON strings) of a ranges document that may come from a bundle written by
/// another nsyskit version, while `RangeStats` is the strict type the ranges library writes. Both views of an
/// export are made the same way (`From<&RangesDoc>` reads the library's document into this view).
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

impl From<&crate::ranges::RangesDoc> for RangesView {
    /// The view of a document the ranges library wrote (report of an export, `--iterations` windows): the
    /// fields a bundle's ranges document gives, read the same way.
    fn from(d: &crate::ranges::RangesDoc) -> RangesView {
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

/// The per-occurrence values of a ranges analysis (public API of `crate::ranges`: occurrences + metrics).
pub fn occurrences_of(a: &crate::ranges::Analysis) -> Vec<Occ> {
    a.occurrences
        .iter()
        .zip(a.metrics.iter())
        .map(|(o, m)| Occ {
            label: o.label.to_string(),
            start: o.start,
            host_wall_ns: o.end - o.start,
            kernel_busy_union_ns: m.busy_ns,
            gpu_idle_within_kernel_span_ns: m.idle_in_span_ns(),
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
    pub step_detail: Option<std::sync::Arc<(crate::ranges::Analysis, crate::ranges::Collected)>>,
    /// The step budget's device timelines, built in a thread of their own from the rows that analysis read, while
    /// it went on ([`crate::step_budget::device::build_beside`]; its [`crate::ranges::Collected`] then holds no
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

pub use crate::gate::EvidenceGates;

/// What a capture without any NVTX range still shows on the host side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NoRange {
    /// Why it has none, when the export says ([`crate::export::NvtxRecorded::no_range_cause`]).
    pub cause: Option<String>,
    /// The blocking sync and copy calls of the whole capture by API (no range encloses them), calls descending.
    pub blocking_calls: Vec<crate::readiness::SyncApiCount>,
}

/// [`Evidence::no_range`] of an export whose ranges analysis found no range: nsys's cause when the export
/// records it, and the blocking calls of the whole capture (nvtx-readiness' counting, no range enclosing any).
pub fn no_range_of(export: &Export) -> Result<NoRange> {
    let runtime = export.optional(schema::RUNTIME, &schema::cols::RUNTIME)?.map(|t| t.name.clone());
    let calls = crate::readiness::unenclosed_syncs(export, runtime.as_deref(), &[])?;
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

/// Evidence from a JSON document: an evidence bundle, or a bare ranges document.
pub fn from_json(v: &Value, name: &str) -> Result<Evidence> {
    let mut ev = from_json_view(v, name)?;
    if ev.kind == "bundle" {
        ev.bundle = Some(v.clone());
    }
    Ok(ev)
}

/// [`from_json`] keeping the document itself as [`Evidence::bundle`], not a copy of it (the copy doubled the
/// memory a bundle takes).
fn from_json_owned(v: Value, name: &str) -> Result<Evidence> {
    let mut ev = from_json_view(&v, name)?;
    if ev.kind == "bundle" {
        ev.bundle = Some(v);
    }
    Ok(ev)
}

/// [`from_json`] without [`Evidence::bundle`].
fn from_json_view(v: &Value, name: &str) -> Result<Evidence> {
    let Some(obj) = v.as_object() else {
        return Err(Error::input(format!("{name}: $: expected a JSON object (an evidence bundle)")));
    };
    let mut ev = Evidence { source: name.to_string(), ..Default::default() };
    let schema = obj.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    if schema == "nsyskit.ranges/v1" {
        ev.kind = "ranges".into();
        ev.ranges = Some(ranges_view(v, &format!("{name}: $"))?);
        ev.capture = capture_of(v, &format!("{name}: $.source.capture"))?;
        return Ok(ev);
    }
    let kp = obj.get("kernel_profile");
    if kp.is_none() && !obj.contains_key("provenance") {
        return Err(Error::input(format!(
            "{name}: $: not an evidence bundle (no kernel_profile or provenance block{})",
            if schema.is_empty() { String::new() } else { format!("; schema {schema}") }
        )));
    }
    ev.kind = "bundle".into();
    check_block_types(obj, name)?;
    let kp = kp.filter(|k| !k.is_null());
    if let Some(kp) = kp {
        if let Some(r) = kp.get("ranges").filter(|r| !r.is_null()) {
            // one ranges document, or a list of them (the first is used)
            let (r, at) = match r {
                Value::Array(a) if !a.is_empty() => (&a[0], "$.kernel_profile.ranges[0]"),
                _ => (r, "$.kernel_profile.ranges"),
            };
            ev.ranges = Some(ranges_view(r, &format!("{name}: {at}"))?);
            ev.capture = capture_of(r, &format!("{name}: {at}.source.capture"))?;
        }
        if let Some(tk) = kp.get("top_kernels").filter(|t| !t.is_null()) {
            let Some(list) = tk.as_array() else {
                return Err(Error::input(format!("{name}: $.kernel_profile.top_kernels: expected an array")));
            };
            ev.kernels = Some(kernel_stats(list, &format!("{name}: $.kernel_profile.top_kernels"))?);
            ev.kernels_source = Some("kernel_profile.top_kernels".into());
        }
        // the full kernel table kern-csv-to-json keeps at kernel_profile.stats.<report>.rows (top_kernels may be
        // cut by --top): preferred, so that shares never come from a truncated list; every cell is checked
        for report in crate::kern_csv::KERNEL_REPORTS {
            let Some(rows) = kp.get("stats").and_then(|s| s.get(*report)).and_then(|d| d.get("rows")) else {
                continue;
            };
            let at = format!("{name}: $.kernel_profile.stats.{report}.rows");
            let Some(rows) = rows.as_array() else {
                return Err(Error::input(format!("{at}: expected an array, got {}", json_kind(rows))));
            };
            let ks = kernel_stats(rows, &at)?;
            if !ks.is_empty() {
                ev.kernels = Some(ks);
                ev.kernels_source = Some(format!("kernel_profile.stats.{report}.rows"));
                break;
            }
        }
        // the totals of the whole kernel table: the denominator of every share
        let totals = kp
            .get("totals")
            .filter(|t| t.is_object())
            .map(|t| (t, "kernel_profile.totals".to_string(), "kernel_profile.totals"))
            .or_else(|| {
                crate::kern_csv::KERNEL_REPORTS.iter().find_map(|r| {
                    kp.get("stats")
                        .and_then(|s| s.get(*r))
                        .and_then(|d| d.get("totals"))
                        .filter(|t| t.is_object())
                        .map(|t| (t, format!("kernel_profile.stats.{r}.totals"), "kernel_profile.stats totals"))
                })
            });
        if let Some((t, path, at)) = totals {
            let n = |k: &str| cell_count(t, k, &format!("{name}: $.{path}"));
            if let Some(total) = n("total_time_ns")? {
                ev.kernel_totals = Some(BundleKernelTotals {
                    total_time_ns: total,
                    kernels: n("kernels")?,
                    instances: n("instances")?,
                    source: at.into(),
                });
            }
        }
    }
    if let Some(kp) = kp {
        apply_bundle_documents(&mut ev, kp);
    }
    // the gate verdict of a pod-attach or serve-capture run, where kernel_profile carries none (pod-attach
    // --bundle keeps gate-check's document at pod_attach.gate.document)
    if ev.gates.is_none() {
        if let Some(g) = v.pointer("/pod_attach/gate").filter(|g| g.is_object()) {
            ev.gates = g
                .get("document")
                .and_then(|d| EvidenceGates::of_doc(d, "pod_attach.gate.document"))
                .or_else(|| EvidenceGates::of_doc(g, "pod_attach.gate"));
        } else if let Some(g) = v.pointer("/serve_capture/gate").filter(|g| g.is_object()) {
            ev.gates = EvidenceGates::of_doc(g, "serve_capture.gate").map(|mut s| {
                if s.reasons.is_empty() {
                    s.reasons = g
                        .get("reasons")
                        .and_then(|r| r.as_array())
                        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                }
                s
            });
        }
    }
    if let Some(p) = obj.get("provenance").filter(|p| p.is_object()) {
        apply_provenance(&mut ev.facts, p, "provenance");
        ev.provenance = Some(p.clone());
    }
    Ok(ev)
}

/// The blocks nsyskit places in a bundle (bundle-merge's placement table) must have their type: a string
/// where `kernel_profile` belongs is an input error naming the JSON path, not an empty bundle. Null counts as
/// absent.
fn check_block_types(obj: &serde_json::Map<String, Value>, name: &str) -> Result<()> {
    fn type_name(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
    let want_object = |v: Option<&Value>, path: &str| -> Result<()> {
        match v {
            None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
            Some(v) => Err(Error::input(format!("{name}: {path}: expected an object, found {}", type_name(v)))),
        }
    };
    for k in ["kernel_profile", "provenance", "report", "comparisons", "serve_capture", "pod_attach"] {
        want_object(obj.get(k), &format!("$.{k}"))?;
    }
    let Some(kp) = obj.get("kernel_profile").and_then(|k| k.as_object()) else { return Ok(()) };
    for k in ["gates", "readiness", "stats", "totals"] {
        want_object(kp.get(k), &format!("$.kernel_profile.{k}"))?;
    }
    match kp.get("ranges") {
        None | Some(Value::Null) | Some(Value::Object(_)) | Some(Value::Array(_)) => {}
        Some(v) => {
            return Err(Error::input(format!(
                "{name}: $.kernel_profile.ranges: expected an object (a ranges document) or an array of them, found {}",
                type_name(v)
            )))
        }
    }
    match kp.get("top_kernels") {
        None | Some(Value::Null) | Some(Value::Array(_)) => {}
        Some(v) => {
            return Err(Error::input(format!(
                "{name}: $.kernel_profile.top_kernels: expected an array, found {}",
                type_name(v)
            )))
        }
    }
    Ok(())
}

fn ranges_view(v: &Value, at: &str) -> Result<RangesView> {
    if !v.get("ranges").map(|r| r.is_array()).unwrap_or(false) {
        return Err(Error::input(format!("{at}: expected an nsyskit.ranges/v1 document with a ranges array")));
    }
    serde_json::from_value::<RangesView>(v.clone())
        .map_err(|e| Error::input(format!("{at}: not a ranges document: {e}")))
}

/// The JSON type of a value, for messages (`a string "6009202"`, `null`).
fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{:?}", s.chars().take(60).collect::<String>()),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A count or a duration in ns read from a bundle: a JSON integer in 0..=i64::MAX (no string, float, null,
/// boolean or negative number), else an input error naming `at`.
fn count_at(v: &Value, at: &str) -> Result<i64> {
    match v.as_u64() {
        Some(n) if n <= i64::MAX as u64 => Ok(n as i64),
        _ => Err(Error::input(format!("{at}: expected a non-negative integer, got {}", json_kind(v)))),
    }
}

/// The cell `key` of object `obj` (at `at`) as [`count_at`]; `None` when it is absent.
fn cell_count(obj: &Value, key: &str, at: &str) -> Result<Option<i64>> {
    obj.get(key).map(|v| count_at(v, &format!("{at}.{key}"))).transpose()
}

/// One kernel row of a bundle (`top_kernels[i]` or `stats.<report>.rows[i]`, at `at`): `name` a string, the
/// total time (`total_time_ns` or its CSV aliases) and `instances` (absent = 0) non-negative integers.
fn kernel_stat(k: &Value, at: &str) -> Result<KernelStat> {
    if !k.is_object() {
        return Err(Error::input(format!("{at}: expected a kernel row object, got {}", json_kind(k))));
    }
    let name = match k.get("name").map(|n| ("name", n)).or_else(|| k.get("Name").map(|n| ("Name", n))) {
        Some((_, Value::String(s))) => s.clone(),
        Some((key, v)) => return Err(Error::input(format!("{at}.{key}: expected a string, got {}", json_kind(v)))),
        None => return Err(Error::input(format!("{at}: expected {{name, total_time_ns, instances}}: no name"))),
    };
    let first = |keys: &[&'static str]| keys.iter().find_map(|key| k.get(*key).map(|v| (*key, v)));
    let total = match first(&["total_time_ns", "total_ns", "time_total_ns", "total_time", "Total Time (ns)"]) {
        Some((key, v)) => count_at(v, &format!("{at}.{key}"))?,
        None => {
            return Err(Error::input(format!("{at}: expected {{name, total_time_ns, instances}}: no total_time_ns")))
        }
    };
    let instances = match first(&["instances", "Instances", "count"]) {
        Some((key, v)) => count_at(v, &format!("{at}.{key}"))?,
        None => 0,
    };
    Ok(KernelStat { name, total_time_ns: total, instances })
}

/// The kernel rows of a list at `at`, each checked ([`kernel_stat`]); their total time and instances must also
/// sum within i64 (a category total is such a sum).
fn kernel_stats(rows: &[Value], at: &str) -> Result<Vec<KernelStat>> {
    let ks = rows.iter().enumerate().map(|(i, k)| kernel_stat(k, &format!("{at}[{i}]"))).collect::<Result<Vec<_>>>()?;
    for (what, f) in [
        ("total_time_ns", (|k: &KernelStat| k.total_time_ns) as fn(&KernelStat) -> i64),
        ("instances", |k| k.instances),
    ] {
        if ks.iter().try_fold(0i64, |a, k| a.checked_add(f(k))).is_none() {
            return Err(Error::input(format!(
                "{at}: the rows' {what} sum past {} (no real capture has that much)",
                i64::MAX
            )));
        }
    }
    Ok(ks)
}

/// The capture header a ranges document carries at `source.capture` (`at` names it), every field type-checked:
/// strings or null, `gpus` an array of strings, durations and bounds integers (the duration non-negative).
fn capture_of(doc: &Value, at: &str) -> Result<Option<crate::export::CaptureInfo>> {
    let Some(c) = doc.pointer("/source/capture").filter(|c| !c.is_null()) else { return Ok(None) };
    let Some(obj) = c.as_object() else {
        return Err(Error::input(format!("{at}: expected an object, got {}", json_kind(c))));
    };
    for (k, v) in obj {
        let ok = match k.as_str() {
            "captured_at" | "captured_at_from" | "driver_version" | "cuda_driver_version" => {
                v.is_null() || v.is_string()
            }
            "gpus" => v.as_array().is_some_and(|a| a.iter().all(|g| g.is_string())),
            "start_ns" | "stop_ns" => v.is_null() || v.is_i64(),
            "duration_ns" => v.is_null() || v.as_i64().is_some_and(|d| d >= 0),
            _ => true,
        };
        if !ok {
            let want = match k.as_str() {
                "gpus" => "an array of strings",
                "start_ns" | "stop_ns" => "an integer or null",
                "duration_ns" => "a non-negative integer or null",
                _ => "a string or null",
            };
            return Err(Error::input(format!("{at}.{k}: expected {want}, got {}", json_kind(v))));
        }
    }
    let mut c = c.clone();
    if let Some(o) = c.as_object_mut() {
        o.entry("gpus").or_insert_with(|| Value::Array(vec![]));
    }
    serde_json::from_value(c).map(Some).map_err(|e| Error::input(format!("{at}: {e}")))
}

/// Facts the bundle's own documents record: the nsys version (ranges or gate `source.nsys_version`), the
/// ranges window, and from gate G1 (`node-level-graph-tracing`) the graph-trace level and graph evidence.
fn apply_bundle_documents(ev: &mut Evidence, kp: &Value) {
    let f = &mut ev.facts;
    for (path, doc) in [("kernel_profile.ranges", kp.get("ranges")), ("kernel_profile.gates", kp.get("gates"))] {
        if let Some(v) = doc.and_then(|d| d.pointer("/source/nsys_version")).and_then(|v| v.as_str()) {
            if !f.nsys_version.is_known() {
                f.nsys_version = Fact::known(
                    Value::String(normalize_version(v)),
                    format!("{path}.source.nsys_version (the nsys that exported it)"),
                );
            }
        }
    }
    if let Some(w) = kp.pointer("/ranges/source/window") {
        let w = if w.is_null() { Value::String("whole capture".into()) } else { w.clone() };
        f.window = Fact::known(w, "kernel_profile.ranges.source.window (sqlite-ranges --window; null = whole capture)");
    }
    let Some(g) = kp.get("gates").filter(|g| g.is_object()) else {
        // no gate-check document: the gates step-budget ran on the export it budgeted, when it recorded them
        if let Some(g) = kp.pointer("/step_budget/gates").filter(|g| g.is_object()) {
            ev.gates = serde_json::from_value::<EvidenceGates>(g.clone())
                .ok()
                .filter(|x| !x.verdict.is_empty())
                .map(|x| EvidenceGates { source: "kernel_profile.step_budget.gates".into(), ..x });
        }
        return;
    };
    ev.gates = EvidenceGates::of_doc(g, "kernel_profile.gates");
    let Some(g1) = g
        .get("gates")
        .and_then(|l| l.as_array())
        .and_then(|l| l.iter().find(|x| x.get("id").and_then(|i| i.as_str()) == Some("G1")))
    else {
        return;
    };
    let mut text = g1.get("reason").and_then(|r| r.as_str()).unwrap_or("").to_string();
    for e in g1.get("evidence").and_then(|e| e.as_array()).into_iter().flatten() {
        text.push('\n');
        text.push_str(e.as_str().unwrap_or(""));
    }
    let level = regex::Regex::new(r"--cuda-graph-trace=(node|graph)").expect("regex");
    if let Some(c) = level.captures(&text) {
        f.graph_trace_level = Fact::known(Value::String(c[1].to_string()), "kernel_profile.gates G1 reason");
    }
    let num = |re: &str| regex::Regex::new(re).expect("regex").captures(&text).and_then(|c| c[1].parse::<i64>().ok());
    if let (Some(launches), Some(node_rows), Some(trace_rows)) =
        (num(r"cudaGraphLaunch calls (\d+)"), num(r"rows with graphNodeId (\d+)"), num(r"GRAPH_TRACE rows (\d+)"))
    {
        let uses = launches > 0 || node_rows > 0 || trace_rows > 0;
        f.cuda_graphs = Fact::known(
            Value::String(if uses { "graphs" } else { "eager" }.into()),
            "kernel_profile.gates G1 evidence (graph launches, graphNodeId rows, GRAPH_TRACE rows)",
        );
        f.graph_evidence = Some(GraphEvidence {
            graph_launch_calls: launches,
            kernels_with_graph_node: node_rows,
            graph_trace_rows: trace_rows,
            kernels: 0,
        });
    }
}

/// Look up the first present path (dotted) in a JSON value.
fn lookup<'a>(v: &'a Value, paths: &[&'a str]) -> Option<(&'a str, &'a Value)> {
    for p in paths {
        let mut cur = v;
        let mut ok = true;
        for part in p.split('.') {
            match cur.get(part) {
                Some(x) => cur = x,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && !cur.is_null() {
            return Some((p, cur));
        }
    }
    None
}

/// Facts from a provenance document (`nsyskit.provenance/v1` from `nsys-resolve`; the accepted paths are listed
/// in docs/compare-report.md). What the provenance records replaces what an export says.
pub fn apply_provenance(f: &mut CaptureFacts, p: &Value, prefix: &str) {
    let set = |fact: &mut Fact, paths: &[&str]| {
        if let Some((path, v)) = lookup(p, paths) {
            *fact = Fact::known(v.clone(), format!("{prefix}.{path}"));
        }
    };
    set(&mut f.nsys_version, &["nsys.version", "nsys.resolved_version", "nsys_version"]);
    if let Value::String(v) = &f.nsys_version.value {
        f.nsys_version.value = Value::String(normalize_version(v));
    }
    set(
        &mut f.capture_flags,
        &["capture.flags_argv", "capture.flags", "capture.argv", "capture.args", "capture_flags"],
    );
    // a flag string is compared as its list of words
    if let Value::String(s) = &f.capture_flags.value {
        let words: Vec<Value> = s.split_whitespace().map(|w| Value::String(w.to_string())).collect();
        f.capture_flags.value = Value::Array(words);
    }
    if f.capture_flags.source.starts_with(prefix) {
        if let Some(words) = f.capture_flags.value.as_array().cloned() {
            let words: Vec<String> = words.iter().filter_map(|w| w.as_str().map(String::from)).collect();
            f.capture_flags.value = serde_json::json!(profile_flags(&words));
        }
    }
    // empty flags (`flags_argv: []` when --flags was not given) record nothing
    if f.capture_flags.value.as_array().map(|a| a.is_empty()).unwrap_or(false)
        && f.capture_flags.source.starts_with(prefix)
    {
        f.capture_flags = Fact::default();
    }
    set(&mut f.trace_set, &["capture.trace", "capture.trace_set", "trace_set"]);
    set(&mut f.graph_trace_level, &["capture.cuda_graph_trace", "capture.graph_trace_level"]);
    set(&mut f.window, &["capture.window", "window"]);
    set(&mut f.warmup, &["capture.warmup", "warmup", "workload.warmup"]);
    set(&mut f.instrumentation, &["capture.instrumentation", "instrumentation"]);
    set(&mut f.clock_policy, &["gpu.clock_policy", "clock_policy", "workload.clock_policy"]);
    set(&mut f.gpu, &["gpu.name", "gpu.names"]);
    set(&mut f.foreign_gpu_processes, &["gpu.foreign_processes", "foreign_gpu_processes"]);
    // nsys-resolve's preflight: gpu.gpus[] (target = true) and gpu.processes[] (on_target = true = foreign,
    // as the preflight runs before the profiled application starts)
    if let Some(gpu) = p.get("gpu").filter(|g| g.is_object()) {
        let available = gpu.get("status").and_then(|s| s.as_str()).map(|s| s == "available").unwrap_or(true);
        if available {
            if let Some(gpus) = gpu.get("gpus").and_then(|g| g.as_array()) {
                let mut names: Vec<String> = gpus
                    .iter()
                    .filter(|g| g.get("target").and_then(|t| t.as_bool()).unwrap_or(true))
                    .filter_map(|g| g.get("name").and_then(|n| n.as_str()).map(String::from))
                    .collect();
                names.sort();
                if !names.is_empty() && !f.gpu.source.starts_with(prefix) {
                    f.gpu = Fact::known(serde_json::json!(names), format!("{prefix}.gpu.gpus[target].name"));
                }
            }
            if let Some(procs) = gpu.get("processes").and_then(|g| g.as_array()) {
                if !f.foreign_gpu_processes.source.starts_with(prefix) {
                    let foreign: Vec<Value> = procs
                        .iter()
                        .filter(|q| q.get("on_target").and_then(|t| t.as_bool()).unwrap_or(true))
                        .map(|q| serde_json::json!({"pid": q.get("pid"), "process_name": q.get("process_name"), "used_memory_mib": q.get("used_memory_mib")}))
                        .collect();
                    f.foreign_gpu_processes =
                        Fact::known(Value::Array(foreign), format!("{prefix}.gpu.processes[on_target]"));
                }
            }
        }
    }
    // flags given as words: derive the trace set, graph level and window when not given separately
    if let Some(args) = f.capture_flags.value.as_array().cloned().filter(|_| f.capture_flags.source.starts_with(prefix))
    {
        let args: Vec<String> = args.iter().filter_map(|a| a.as_str().map(String::from)).collect();
        let opt = |name: &str| -> Option<String> {
            args.iter().enumerate().find_map(|(i, a)| {
                a.strip_prefix(&format!("{name}="))
                    .map(String::from)
                    .or_else(|| (a == name).then(|| args.get(i + 1).cloned()).flatten())
            })
        };
        let from = |flag: &str| format!("{prefix}.capture flags {flag}");
        if !f.trace_set.source.starts_with(prefix) {
            // nsys's default --trace is cuda,nvtx,osrt (plus opengl on some platforms)
            let t = opt("--trace").or_else(|| opt("-t")).unwrap_or_else(|| "cuda,nvtx,osrt".into());
            f.trace_set = Fact::known(serde_json::json!(normalize_trace(t.split(','))), from("--trace"));
        }
        if !f.graph_trace_level.source.starts_with(prefix) {
            // nsys's default is graph level
            let t = opt("--cuda-graph-trace").unwrap_or_else(|| "graph".into());
            f.graph_trace_level = Fact::known(Value::String(t.to_ascii_lowercase()), from("--cuda-graph-trace"));
        }
        if !f.window.source.starts_with(prefix) {
            let mut w = serde_json::Map::new();
            for k in ["--delay", "--duration", "--capture-range", "--capture-range-end"] {
                let short = match k {
                    "--delay" => opt("-y"),
                    "--duration" => opt("-d"),
                    "--capture-range" => opt("-c"),
                    _ => None,
                };
                w.insert(
                    k.trim_start_matches("--").to_string(),
                    opt(k).or(short).map(Value::String).unwrap_or(Value::Null),
                );
            }
            f.window = Fact::known(Value::Object(w), from("--delay/--duration/--capture-range/--capture-range-end"));
        }
    }
}

/// The `nsys profile` switches of a command line, as `--switch=value` words in order: a leading `nsys` /
/// `profile` is skipped, the profiled command (the first word that is neither a switch nor a switch's value)
/// ends the list, and per-run switches that do not change what is measured are left out (`--output`/`-o`,
/// `--force-overwrite`/`-f`, `--stats`, `--export`).
pub fn profile_flags(words: &[String]) -> Vec<String> {
    const TAKES_VALUE: &[&str] = &[
        "-t",
        "-o",
        "-c",
        "-y",
        "-d",
        "-s",
        "-b",
        "-w",
        "-x",
        "-p",
        "-e",
        "-n",
        "-f",
        "--trace",
        "--output",
        "--capture-range",
        "--capture-range-end",
        "--cuda-graph-trace",
        "--delay",
        "--duration",
        "--sample",
        "--cpuctxsw",
        "--backtrace",
        "--kill",
        "--resolve-symbols",
        "--trace-fork-before-exec",
        "--force-overwrite",
        "--stats",
        "--export",
        "--env-var",
        "--cuda-memory-usage",
        "--gpu-metrics-devices",
        "--nvtx-capture",
        "--osrt-threshold",
        "--wait",
        "--show-output",
        "--session-new",
        "--python-sampling",
    ];
    const PER_RUN: &[&str] = &["-o", "--output", "-f", "--force-overwrite", "--stats", "--export"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() && (words[i] == "profile" || words[i].ends_with("nsys")) {
        i += 1;
    }
    while i < words.len() {
        let w = &words[i];
        if !w.starts_with('-') {
            break;
        }
        let (name, value) = match w.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None if TAKES_VALUE.contains(&w.as_str()) && i + 1 < words.len() => {
                i += 1;
                (w.clone(), Some(words[i].clone()))
            }
            None => (w.clone(), None),
        };
        if !PER_RUN.contains(&name.as_str()) {
            out.push(match value {
                Some(v) => format!("{name}={v}"),
                None => name,
            });
        }
        i += 1;
    }
    out
}

/// `2025.3.2.0`, `2023.4.4.54-234433681190v0` → the first three numbers (`2025.3.2`, `2023.4.4`).
pub fn normalize_version(v: &str) -> String {
    let re = regex::Regex::new(r"\d+\.\d+(\.\d+)?").expect("version regex");
    re.find(v).map(|m| m.as_str().to_string()).unwrap_or_else(|| v.trim().to_string())
}

/// Trace names as `nsys profile --trace` spells them, sorted: META_DATA_CAPTURE's `Cuda`, `NvtxEvents`,
/// `OSRuntime` become `cuda`, `nvtx`, `osrt`.
pub fn normalize_trace<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = names
        .map(|n| match n.trim() {
            "Cuda" => "cuda".to_string(),
            "NvtxEvents" => "nvtx".to_string(),
            "OSRuntime" => "osrt".to_string(),
            "CublasEvents" => "cublas".to_string(),
            "CudnnEvents" => "cudnn".to_string(),
            "OpenGL" => "opengl".to_string(),
            "MPI" => "mpi".to_string(),
            other => other.to_ascii_lowercase(),
        })
        .filter(|n| !n.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Capture settings that vary from run to run without changing what is measured, or that are compared as
/// their own facts: left out of `capture_flags`.
fn is_run_specific(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    let tail = k.rsplit(':').next().unwrap_or(&k);
    matches!(
        tail,
        "PROFILING_SESSION_UUID"
            | "PROFILING_SESSION_ID"
            | "RUN_DURATION_MS"
            | "WORKING_DIR"
            | "COMMAND"
            | "PID"
            | "APPLICATION_PID"
            | "DEVICE_DISPLAY_NAME"
            | "DEVICE_ID"
            | "USER_NAME"
            | "CAPTURE_EVENT_TYPE"
            | "MODE"
            | "START_TRIGGER"
            | "STOP_TRIGGER"
            | "START_DELAY_MS"
            | "START_FRAME_VALUE"
            | "RUN_DURATION_FRAMES"
    ) || tail.starts_with("ARGUMENT_")
        || k.contains("ENVIRONMENT_VARIABLE")
}

const WINDOW_KEYS: &[&str] =
    &["START_TRIGGER", "STOP_TRIGGER", "START_DELAY_MS", "START_FRAME_VALUE", "RUN_DURATION_FRAMES"];

/// The comparability facts of an export.
pub fn export_facts(export: &Export) -> Result<CaptureFacts> {
    let mut f = CaptureFacts::default();
    let meta = export.export_metadata()?;
    let meta_table = export.export_meta_table().unwrap_or(schema::META_DATA_EXPORT);
    if let Some((_, Some(v))) = meta.iter().find(|(n, _)| n == "EXPORT_PRODUCT_VERSION") {
        f.nsys_version = Fact::known(
            Value::String(normalize_version(v)),
            format!("{meta_table}.EXPORT_PRODUCT_VERSION (the nsys that exported it)"),
        );
    } else if let Some(v) = export.nsys_version()? {
        f.nsys_version = Fact::known(Value::String(normalize_version(&v)), meta_table);
    } else if export.export_meta_table().is_none() {
        f.nsys_version = Fact::unknown(format!(
            "unknown: the export has no export-metadata table ({}; ≈2021.3 exports have none)",
            schema::EXPORT_META_TABLES.join(" / ")
        ));
    }
    let cap = export.capture_settings()?;
    if !cap.is_empty() {
        let trace =
            normalize_trace(cap.iter().filter(|(n, _)| n == "CAPTURE_EVENT_TYPE").filter_map(|(_, v)| v.as_deref()));
        f.trace_set = Fact::known(serde_json::json!(trace), "META_DATA_CAPTURE.CAPTURE_EVENT_TYPE");
        let mut flags = serde_json::Map::new();
        let mut sorted: Vec<&(String, Option<String>)> = cap.iter().filter(|(n, _)| !is_run_specific(n)).collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, v) in sorted {
            flags.insert(n.clone(), v.clone().map(Value::String).unwrap_or(Value::Null));
        }
        f.capture_flags = Fact::known(Value::Object(flags), "META_DATA_CAPTURE (run-specific rows left out)");
        let mut window = serde_json::Map::new();
        for k in WINDOW_KEYS {
            if let Some((_, v)) = cap.iter().find(|(n, _)| n == k) {
                window.insert(k.to_string(), v.clone().map(Value::String).unwrap_or(Value::Null));
            }
        }
        if !window.is_empty() {
            f.window = Fact::known(Value::Object(window), "META_DATA_CAPTURE (START_TRIGGER, STOP_TRIGGER, START_DELAY_MS, …; nsys does not record --capture-range here)");
        }
        if let Some(m) = export.graph_trace_mode()? {
            f.graph_trace_level = Fact::known(Value::String(m.mode), format!("META_DATA_CAPTURE.{}", m.key));
        }
    }
    // graph evidence: the export layer's graph facts (one definition for every tool)
    let mut ge = GraphEvidence::default();
    let facts = export.graph_facts()?;
    if let Some(k) = export.optional(schema::KERNEL, &["start", "end"])? {
        ge.kernels = export.count_rows(&k.name)?;
    }
    ge.kernels_with_graph_node = facts.kernel_node_rows;
    ge.graph_trace_rows = facts.graph_trace_rows;
    ge.graph_launch_calls = facts.graph_launches;
    if !f.graph_trace_level.is_known() {
        if facts.node_rows > 0 {
            f.graph_trace_level = Fact::known("node".into(), "CUPTI_ACTIVITY_KIND_KERNEL.graphNodeId set");
        } else if ge.graph_trace_rows > 0 {
            f.graph_trace_level = Fact::known("graph".into(), "CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows");
        }
    }
    let uses = ge.graph_launch_calls > 0 || facts.node_rows > 0 || ge.graph_trace_rows > 0;
    if uses {
        f.cuda_graphs = Fact::known("graphs".into(), "graph launches / graphNodeId / GRAPH_TRACE rows");
    } else if ge.kernels > 0 {
        f.cuda_graphs = Fact::known("eager".into(), "kernels without any graph launch, graph node or graph trace");
    }
    f.graph_evidence = Some(ge);
    // instrumentation: NVTX domains and whether any NVTX range exists
    if let Some(ranges) = export.nvtx_range_rows()? {
        let domains = export.nvtx_domain_names()?;
        f.instrumentation = Fact::known(
            serde_json::json!({"nvtx_ranges_present": ranges > 0, "nvtx_domains": domains}),
            "NVTX_EVENTS (ranges present, named domains)",
        );
    } else {
        f.instrumentation =
            Fact::known(serde_json::json!({"nvtx_ranges_present": false, "nvtx_domains": []}), "NVTX_EVENTS absent");
    }
    // GPU model(s)
    let mut gpus: Vec<String> = export
        .target_gpus()?
        .into_iter()
        .map(|row| {
            row.into_iter()
                .enumerate()
                .map(|(i, (col, v))| {
                    format!("{}{}", if i == 0 { String::new() } else { format!("{col}=") }, v.unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    gpus.sort();
    gpus.dedup();
    if !gpus.is_empty() {
        f.gpu =
            Fact::known(serde_json::json!(gpus), "TARGET_INFO_GPU (name, chipName, smCount, totalMemory, clockRate)");
    }
    Ok(f)
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
