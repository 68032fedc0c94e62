//! The `nsyskit.readiness/v1` document ([`NvtxReadinessDoc`]) and its parts.

use super::*;

/// READY or RETRY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReadinessVerdict {
    #[serde(rename = "READY")]
    Ready,
    #[serde(rename = "RETRY")]
    Retry,
}

/// `nsyskit.readiness/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NvtxReadinessDoc {
    pub schema: String,
    pub tool: Tool,
    /// READY (exit 0) when iteration ranges exist and `iterations.opaque_share < threshold.max_opaque_share`,
    /// else RETRY (exit 1).
    pub verdict: ReadinessVerdict,
    /// Why, with the measured numbers; a RETRY starts with "add instrumentation before choosing an optimisation".
    pub reason: String,
    pub source: ReadinessSource,
    pub threshold: ReadinessThreshold,
    /// One entry per taxonomy name, in the taxonomy's order.
    pub taxonomy: Vec<TaxonomyEntry>,
    /// Labels under the prefix that are not in the taxonomy (allowed, listed), by wall time descending.
    pub outside_taxonomy: Vec<LabelCount>,
    pub iterations: Iterations,
    /// The largest opaque gaps (at most ten), longest first, with absolute times (ns, export clock).
    pub largest_opaque_gaps: Vec<OpaqueGap>,
    pub cuda_graphs: CudaGraphs,
    pub naming: Naming,
    pub unenclosed_syncs: UnenclosedSyncs,
    /// The label prefixes seen (all ranges, labels folded): `hf.` for `hf.decode_step`, `aten::` for
    /// `aten::mm, op_id = 41599`; most occurrences first.
    pub prefixes_seen: Vec<PrefixCount>,
    /// A prefix to try with --range-prefix when the capture has no `<P>.engine.iteration` range: the dotted
    /// prefix (`hf`, `vibeserve`) with the most occurrences; null when none is seen or P was found.
    pub suggested_prefix: Option<String>,
    pub notes: Vec<String>,
}

/// One label prefix and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrefixCount {
    /// `hf.` (dotted) or `aten::` (C++-style).
    pub prefix: String,
    /// Distinct labels under it, after folding.
    pub labels: u64,
    pub occurrences: u64,
}

impl Document for NvtxReadinessDoc {
    const KIND: &'static str = "readiness";
    const TOOL: &'static str = "nvtx-readiness";
    fn exit_code(&self) -> i32 {
        match self.verdict {
            ReadinessVerdict::Ready => 0,
            ReadinessVerdict::Retry => 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadinessSource {
    /// The path given.
    pub path: String,
    pub size: u64,
    /// `sqlite`, or `nsys-rep` when a report was exported into a temporary folder by `exported_with`.
    pub kind: String,
    pub exported_with: Option<String>,
    /// From META_DATA_EXPORT when present.
    pub nsys_version: Option<String>,
    /// `P` as used (no trailing dot); null when none was given and no `*.engine.iteration` label exists.
    pub range_prefix: Option<String>,
    /// True when `P` was inferred from the `*.engine.iteration` label with the most occurrences.
    pub range_prefix_inferred: bool,
    /// Runtime rows with a NULL `start`, NULL `end` or `end < start`, by table and reason: not read. Present
    /// only when a row was skipped.
    #[serde(default, skip_serializing_if = "crate::export::RowSkips::is_empty")]
    pub skipped_rows: crate::export::RowSkips,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadinessThreshold {
    pub max_opaque_share: f64,
}

/// One taxonomy name: present (occurrences > 0) or missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaxonomyEntry {
    /// The taxonomy name, e.g. `engine.iteration`.
    pub name: String,
    /// The full label, `P.engine.iteration`.
    pub label: String,
    pub present: bool,
    pub occurrences: u64,
    /// Σ (end - start) over its occurrences (overlapping occurrences on several threads add up).
    pub wall_ns: i64,
    /// Distinct threads that opened it.
    pub threads: u64,
}

/// A label with its occurrences and summed wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LabelCount {
    pub label: String,
    pub occurrences: u64,
    pub wall_ns: i64,
}

/// `P.engine.iteration` and how much of it child ranges name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Iterations {
    pub label: Option<String>,
    pub occurrences: u64,
    /// Σ iteration wall.
    pub wall_ns: i64,
    /// Σ over iterations of |union of its children, clipped to it|.
    pub named_ns: i64,
    /// `wall_ns - named_ns`: iteration time covered by no child range under the prefix.
    pub opaque_ns: i64,
    /// `opaque_ns / wall_ns`; null when there is no iteration wall time.
    pub opaque_share: Option<f64>,
    /// Iterations with no child range at all.
    pub without_children: u64,
    /// The engine's threads: those that opened an iteration range (globalTid, pid, tid).
    pub engine_threads: Vec<ThreadRef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadRef {
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    pub pid: i64,
    pub tid: i64,
}

/// A stretch of an iteration no child range under the prefix covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpaqueGap {
    pub start: i64,
    pub end: i64,
    pub duration_ns: i64,
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    /// The enclosing iteration: its index among the iterations (by thread, then start) and its interval.
    pub iteration_index: u64,
    pub iteration_start: i64,
    pub iteration_end: i64,
    /// The child range that ends where the gap starts (null at the start of the iteration).
    pub after: Option<String>,
    /// The child range that starts where the gap ends (null at the end of the iteration).
    pub before: Option<String>,
}

/// CUDA graph launches and what a host range around a replay measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CudaGraphs {
    /// Runtime calls named `cudaGraphLaunch*` / `cuGraphLaunch*` (0 without a runtime table).
    pub graph_launches: u64,
    /// Set when graphs are launched or a `P.graph.replay` range exists.
    pub note: Option<String>,
    /// NVTX ranges recorded while their thread captured a CUDA graph (between a stream capture's begin and end
    /// calls, [`crate::export::Export::stream_capture_windows`]): emitted once, when the graph was captured, and
    /// never when it replays. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges_in_capture: Option<RangesInCapture>,
}

/// Ranges recorded inside a CUDA graph capture ([`CudaGraphs::ranges_in_capture`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangesInCapture {
    /// Stream capture windows in the export.
    pub captures: u64,
    /// Ranges lying inside one of them on the capturing thread.
    pub occurrences: u64,
    /// Their labels folded, most occurrences first (at most ten).
    pub labels: Vec<LabelCount>,
    /// What it means.
    pub warning: String,
}

/// Range-naming problems, each with counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Naming {
    /// Labels under the prefix (all labels when there is no prefix) carrying ids, grouped by the stable label
    /// they fold into (`aten::mm, op_id = 41599` → `aten::mm`, `vibeserve.request.3` → `vibeserve.request.<n>`;
    /// hashes and compile ids are not ids); most occurrences first, at most 50.
    pub labels_with_ids: Vec<IdPattern>,
    /// Labels not under the prefix opened on the engine's threads.
    pub outside_prefix_on_engine_threads: Vec<LabelCount>,
    /// Labels under the prefix seen at more than one nesting depth (depth among ranges under the prefix on the
    /// same thread, as `sqlite-ranges --range-prefix P.` reports it).
    pub labels_at_several_depths: Vec<DepthSpread>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IdPattern {
    /// The stable label they fold into.
    pub pattern: String,
    /// Distinct labels folded into it.
    pub labels: u64,
    /// Their occurrences.
    pub occurrences: u64,
    /// Up to three of them (first seen).
    pub examples: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DepthSpread {
    pub label: String,
    /// `{depth: occurrences}`.
    pub depths: BTreeMap<u32, u64>,
}

/// Blocking sync calls whose start lies in no range under the prefix on their thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnenclosedSyncs {
    /// Whether CUPTI_ACTIVITY_KIND_RUNTIME exists (without it there is no CUDA and nothing to list).
    pub runtime_table: bool,
    /// Blocking sync calls in the capture (all threads).
    pub sync_calls: u64,
    /// Of them, those enclosed by a range under the prefix (by any range when there is no prefix).
    pub enclosed_calls: u64,
    /// By API, calls descending: the unenclosed ones.
    pub by_api: Vec<SyncApiCount>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SyncApiCount {
    pub api: String,
    pub calls: u64,
    /// Σ whole call duration (end - start).
    pub total_ns: i64,
    /// Distinct threads making them.
    pub threads: u64,
    /// The first one's start (ns, export clock).
    pub first_start: i64,
}
