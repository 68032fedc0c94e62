//! The `nsyskit.ranges/v1` document types (`SqliteRangesDoc` and its parts) and the per-occurrence [`Analysis`].

use super::*;

/// `nsyskit.ranges/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SqliteRangesDoc {
    pub schema: String,
    pub tool: Tool,
    pub source: RangesSource,
    /// Optional tables found, in the contract's order.
    pub tables_present: Vec<String>,
    /// One object per label, by `host_wall_time_ns` descending, then label (byte order).
    pub ranges: Vec<RangeStats>,
    /// One object per thread that opened at least one kept occurrence, by `globalTid`.
    pub thread_diagnostics: Vec<ThreadDiagnostics>,
    pub totals: Totals,
    pub skipped: Skipped,
    /// Ranges closed by the capture's end (`skipped.closed_by_capture_end`; the first 100 by thread and start):
    /// no occurrence, never in a statistic. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated_ranges: Vec<occurrences::TruncatedRange>,
    /// Rows of the runtime and device tables that were not read, by table and reason (NULL `start`, NULL
    /// `end`, `end < start`): never summed, never attributed. Present only when a row was skipped.
    #[serde(default, skip_serializing_if = "RowSkips::is_empty")]
    pub skipped_rows: RowSkips,
    /// Kept labels grouped by replacing each run of digits with `#`; groups of two or more labels.
    pub high_cardinality_labels: Vec<HighCardinality>,
    /// What label folding did (null with `--no-fold`): each folded label, its occurrences, how many raw
    /// labels it holds, the rules and up to three raw examples; `ranges` then holds one object per folded label.
    pub folded: Option<crate::labels::FoldReport>,
    pub notes: Vec<String>,
    /// `--iteration-records` / `--iterations`: the join, the window and the step occurrences with their engine
    /// iteration (docs/iterations.md); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<crate::iterations::window::IterationsSection>,
}

impl Document for SqliteRangesDoc {
    const KIND: &'static str = "ranges";
    const TOOL: &'static str = "sqlite-ranges";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangesSource {
    /// The path given.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    pub range_prefix: Option<String>,
    /// From META_DATA_EXPORT when present.
    pub nsys_version: Option<String>,
    /// `sqlite`, or `nsys-rep` when a report was exported into a temporary folder by `exported_with`.
    pub kind: String,
    pub exported_with: Option<String>,
    /// `--window` when given: occurrences with `start <= o.start` and `o.end <= end` were kept.
    pub window: Option<TimeWindow>,
    /// When and on what the capture was taken (export metadata: session start, GPUs, driver, duration);
    /// bundle-merge copies `capture.captured_at` to `kernel_profile.captured_at`.
    #[serde(default)]
    pub capture: Option<crate::export::CaptureInfo>,
}

/// `--window START:END` of sqlite-ranges, in ns on the export's clock (not serve-capture's capture window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TimeWindow {
    pub start: i64,
    pub end: i64,
}

/// `{calls, total_ns}` of one blocking API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SyncStat {
    pub calls: u64,
    pub total_ns: i64,
}

/// One label: sums over its occurrences (see the contract for each field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangeStats {
    pub label: String,
    pub occurrences: u64,
    pub occurrences_with_device_work: u64,
    pub runtime_calls: u64,
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub graph_traces: u64,
    pub host_wall_time_ns: i64,
    pub wall_ns_min: i64,
    pub wall_ns_median: i64,
    pub wall_ns_max: i64,
    pub kernel_work_ns: i64,
    pub host_range_kernel_coverage_ns: i64,
    pub host_range_kernel_coverage_fraction: f64,
    pub kernel_busy_union_ns: i64,
    pub kernel_span_ns: i64,
    pub gpu_idle_within_kernel_span_ns: i64,
    pub uncovered_host_time_ns: i64,
    pub gpu_busy_fraction: Option<f64>,
    pub sync: BTreeMap<String, SyncStat>,
    pub depths: BTreeMap<u32, u64>,
    pub parents: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadDiagnostics {
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    pub pid: i64,
    pub tid: i64,
    pub namespace: i64,
    /// `processes`, `device_namespace_fallback` or `unmapped`.
    pub mapping: String,
    pub is_main_thread: bool,
    pub thread_name: Option<String>,
    pub occurrences: u64,
    pub runtime_calls: u64,
    pub device_rows_attributed: u64,
    /// Why this thread deserves a look (empty when none): `non_main_thread_owns_device_work`,
    /// `device_namespace_fallback`, `unmapped`.
    pub attention: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceTotals {
    #[serde(rename = "deviceId")]
    pub device_id: i64,
    pub device_rows: u64,
    pub busy_union_ns: i64,
    pub first_start: i64,
    pub last_end: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    pub per_device: Vec<DeviceTotals>,
    pub kernels_total: u64,
    pub kernel_work_total_ns: i64,
    pub kernels_attributed: u64,
    pub kernel_work_attributed_ns: i64,
    pub kernels_unattributed: u64,
    pub kernel_work_unattributed_ns: i64,
    /// Device rows (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE) whose `(globalPid, correlationId)` matches more than one
    /// runtime call: the join is ambiguous, so they are attributed to no range (their kernels are unattributed).
    /// Absent when none (real captures: correlation ids are unique per process).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device_rows_ambiguous: u64,
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HighCardinality {
    pub pattern: String,
    pub labels: u64,
}

/// Per-occurrence quantities (the contract's "Per-occurrence quantities"), parallel to the occurrences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OccurrenceMetrics {
    pub runtime_calls: u64,
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub graph_traces: u64,
    /// Σ over its KERNEL rows of `end - start`.
    pub kernel_work_ns: i64,
    /// `|D|`.
    pub busy_ns: i64,
    /// `max(d.end) - min(d.start)`, 0 when D is empty.
    pub span_ns: i64,
    /// `|D ∩ [start, end)|`.
    pub coverage_ns: i64,
    /// `min(d.start)` / `max(d.end)` over D.
    pub first_device_start: Option<i64>,
    pub last_device_end: Option<i64>,
    /// Blocking sync calls among its runtime calls, and their whole durations.
    pub sync_calls: u64,
    pub sync_ns: i64,
    /// Per API (index into [`SYNC_APIS`], ascending): calls and total ns.
    pub sync: Vec<(u8, SyncStat)>,
}

impl OccurrenceMetrics {
    pub fn device_rows(&self) -> u64 {
        self.kernels + self.memcpys + self.memsets + self.graph_traces
    }
    pub fn idle_in_span_ns(&self) -> i64 {
        self.span_ns - self.busy_ns
    }
}

/// The document plus the kept occurrences and their metrics ([`OccurrenceTable`]).
#[derive(Debug, Clone)]
pub struct Analysis {
    pub doc: SqliteRangesDoc,
    pub occurrences: OccurrenceTable,
}

/// The optional tables of the contract, in its order, with the columns read from each.
pub const OPTIONAL_TABLES: [(&str, &[&str]); 7] = [
    (schema::RUNTIME, &cols::RUNTIME),
    (schema::KERNEL, &cols::DEVICE),
    (schema::MEMCPY, &cols::DEVICE),
    (schema::MEMSET, &cols::DEVICE),
    (schema::GRAPH_TRACE, &cols::DEVICE),
    (schema::PROCESSES, &cols::PROCESSES),
    (schema::THREAD_NAMES, &cols::THREAD_NAMES),
];
