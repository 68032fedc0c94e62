//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export (`nsyskit.ranges/v1`).
//!
//! The metric contract is `docs/sqlite-ranges-spec.md`; `docs/sqlite-ranges.md` documents the tool and the
//! choices made where the contract is silent.
//!
//! Public building blocks for other tools:
//! - [`load_occurrences`]: the kept NVTX range occurrences (labels resolved, prefix/window applied) with their
//!   nesting depth and parent, plus the skipped counts;
//! - [`analyze`]: the whole document plus per-occurrence metrics ([`Analysis`]);
//! - [`run`]: open an `.sqlite` (or export an `.nsys-rep` into a temporary folder) and analyse it;
//! - [`normalize_sync_api`]: a runtime API name to its blocking-sync API, if it is one.
//!
//! How it scales: NVTX rows are few and kept in memory; RUNTIME rows are streamed once (a stabbing query per
//! row against the occurrences of its thread), keeping only a `(process, correlationId) → occurrence-chain`
//! table (a sorted Vec) for calls that fall inside a kept occurrence; device rows are streamed once into a compact 16-byte
//! record (in parallel rowid chunks, each in start order as nsys writes them: the order is a check), marked with
//! their chain and tag (in place when the analysis holds them alone; in a vector apart when they are shared as
//! read with the step budget's timelines), and swept once in start order (a merge of the chunks) to merge
//! per-occurrence and per-device interval unions incrementally.

mod occurrences;
mod table;
mod tree;

pub use occurrences::{keep_prefix, kept_under, load_occurrences, LoadedOccurrences, Occurrence, Skipped};
use occurrences::{load_interned, thread_slices};
pub use table::render_table;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::rows::{DeviceChunk, Keep, PackedDeviceRow};
use crate::export::schema::{self, cols, DeviceKind};
use crate::export::{ns_of, pid_of, tid_of, Export, RowSkips};

use tree::MaxTree;

// ---------------------------------------------------------------------------------------------------------
// Options and occurrences
// ---------------------------------------------------------------------------------------------------------

/// What `sqlite-ranges` keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangesOptions {
    /// Keep only labels starting with this (case-sensitive) prefix; the label includes a `DOMAIN:` prefix.
    pub range_prefix: Option<String>,
    /// `(START, END)` in ns on the export's clock: keep only occurrences lying inside it,
    /// `START <= o.start` and `o.end <= END` (both inclusive).
    pub window: Option<(i64, i64)>,
    /// Fold id-bearing labels into stable ones ([`crate::labels`]): `aten::mm, op_id = 41599` → `aten::mm`,
    /// `vibeserve.request.3` → `vibeserve.request.<n>`. `sqlite-ranges` turns it on unless `--no-fold`.
    pub fold: bool,
}

impl RangesOptions {
    /// What `sqlite-ranges EXPORT` keeps: every label, folded, no window.
    pub fn sqlite_ranges_default() -> RangesOptions {
        RangesOptions { fold: true, ..Default::default() }
    }
}

/// Parse `START:END` (integers in ns, may be negative, `START <= END`).
pub fn parse_window(s: &str) -> Result<(i64, i64)> {
    let bad = || {
        Error::usage(format!("--window {s:?}: expected START:END in ns (integers, START <= END)")).with_arg("--window")
    };
    // the separator is the first ':' that is not at position 0 (a leading '-' is a sign, never ':')
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let a: i64 = a.trim().parse().map_err(|_| bad())?;
    let b: i64 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

static PROGRESS: AtomicBool = AtomicBool::new(false);

/// Print progress lines on stderr during long scans (the binary enables it when stderr is a terminal).
pub fn set_progress(on: bool) {
    PROGRESS.store(on, Ordering::Relaxed);
}

fn progress(msg: &str) {
    if PROGRESS.load(Ordering::Relaxed) {
        eprint!("\rsqlite-ranges: {msg}\x1b[K");
    }
}

pub(crate) use crate::fx::{FxMap, FxSet};

// ---------------------------------------------------------------------------------------------------------
// Sync APIs
// ---------------------------------------------------------------------------------------------------------

/// The blocking synchronisation APIs of the contract, in its order.
pub const SYNC_APIS: [&str; 19] = [
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaStreamQuery",
    "cudaEventQuery",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpy3D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
    "cudaMemset",
    "cudaMemset2D",
    "cudaMemset3D",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH",
    "cuMemcpyHtoD",
    "cuMemcpyDtoD",
];

/// A runtime API name to its blocking-sync API: cut at the first match of `_v[0-9]+|_pt`
/// (`cudaStreamSynchronize_v3020` → `cudaStreamSynchronize`, `cudaMemcpy_ptds_v7000` → `cudaMemcpy`), then
/// compared exactly with [`SYNC_APIS`]. None when it is not one.
pub fn normalize_sync_api(runtime_name: &str) -> Option<&'static str> {
    let b = runtime_name.as_bytes();
    let mut cut = b.len();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'_' {
            if b[i + 1] == b'v' && i + 2 < b.len() && b[i + 2].is_ascii_digit() {
                cut = i;
                break;
            }
            if b[i + 1] == b'p' && i + 2 < b.len() && b[i + 2] == b't' {
                cut = i;
                break;
            }
        }
        i += 1;
    }
    let base = &runtime_name[..cut];
    SYNC_APIS.iter().copied().find(|a| *a == base)
}

// ---------------------------------------------------------------------------------------------------------
// The document
// ---------------------------------------------------------------------------------------------------------

/// `nsyskit.ranges/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangesDoc {
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

impl Document for RangesDoc {
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

fn is_zero(n: &u64) -> bool {
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

/// The document plus the kept occurrences and their metrics (same order, same length).
#[derive(Debug, Clone)]
pub struct Analysis {
    pub doc: RangesDoc,
    pub occurrences: Vec<Occurrence>,
    pub metrics: Vec<OccurrenceMetrics>,
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

/// Open the capture (an `.nsys-rep` is exported with `nsys`, default `NSYS_BIN`/PATH, into a temporary folder)
/// and analyse it.
pub fn run(path: &Path, opts: &RangesOptions, nsys: Option<&Path>) -> Result<RangesDoc> {
    let cap = crate::export::open_capture(path, nsys)?;
    document(&cap.export, &cap.source, opts)
}

/// The document [`run`] prints, of an export already open, `source` saying where it came from (what
/// `gate-check --ranges` writes from its own run: the same bytes).
pub fn document(export: &Export, source: &crate::export::CaptureSource, opts: &RangesOptions) -> Result<RangesDoc> {
    document_impl(export, source, opts, false)
}

/// [`document`], whose reads of the runtime and device tables also compute those tables' timed-stats facts
/// ([`Export::put_stats`], with what [`Export::keep_intervals`] asked them to keep): gates run afterwards on the
/// same export scan none of them again (`gate-check --ranges`: one pass over each table for both documents).
pub fn document_sharing_scans(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &RangesOptions,
) -> Result<RangesDoc> {
    document_impl(export, source, opts, true)
}

fn document_impl(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &RangesOptions,
    share: bool,
) -> Result<RangesDoc> {
    // the contract requires the table (its message says why a capture has none)
    export.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
    let (doc, _) = analyze_impl(export, opts, false, share)?;
    Ok(described(doc, source))
}

/// The document of an analysis as `sqlite-ranges` prints it: its source is the capture the user gave
/// (`source`), and a report exported into a temporary folder says so.
pub fn described(mut doc: RangesDoc, source: &crate::export::CaptureSource) -> RangesDoc {
    doc.source.path = source.path.clone();
    doc.source.size = source.size;
    doc.source.kind = source.kind.clone();
    doc.source.exported_with = source.exported_with.clone();
    if source.kind == "nsys-rep" {
        doc.notes.push(format!(
            "{} is a report: it was exported with {} into a temporary folder (deleted afterwards), never next to it",
            source.path,
            source.exported_with.as_deref().unwrap_or("nsys")
        ));
    }
    doc
}

/// Interned occurrence chains (ascending occurrence indices) in one arena. Occurrence indices ascend with
/// the thread, so a chain's distinct threads are the changes of `thread_of` along it: no per-chain thread list.
/// Interning keeps only the ids in its hash table (5 bytes a slot): a chain is compared in the arena.
struct Chains {
    map: hashbrown::HashTable<u32>,
    offs: Vec<usize>,
    data: Vec<u32>,
}

impl Chains {
    fn new() -> Chains {
        Chains { map: hashbrown::HashTable::new(), offs: vec![0], data: Vec::new() }
    }
    fn get(&self, id: u32) -> &[u32] {
        chain_in(&self.offs, &self.data, id)
    }
    fn len(&self) -> usize {
        self.offs.len() - 1
    }
    fn intern(&mut self, occs: &[u32]) -> u32 {
        let Chains { map, offs, data } = self;
        let h = chain_hash(occs);
        if let Some(&id) = map.find(h, |&id| chain_in(offs, data, id) == occs) {
            return id;
        }
        let id = (offs.len() - 1) as u32;
        data.extend_from_slice(occs);
        offs.push(data.len());
        map.insert_unique(h, id, |&id| chain_hash(chain_in(offs, data, id)));
        id
    }
    /// Interning is over: the table goes, the chains stay.
    fn freeze(&mut self) {
        self.map = hashbrown::HashTable::new();
        self.data.shrink_to_fit();
        self.offs.shrink_to_fit();
    }
}

fn chain_in<'a>(offs: &[usize], data: &'a [u32], id: u32) -> &'a [u32] {
    &data[offs[id as usize]..offs[id as usize + 1]]
}

fn chain_hash(occs: &[u32]) -> u64 {
    use std::hash::Hasher;
    let mut h = crate::fx::Fx::default();
    h.write_usize(occs.len());
    for &o in occs {
        h.write_u32(o);
    }
    h.finish()
}

/// An occurrence as kept during the analysis: the label is an id into the label table, the thread is its slice's
/// ([`Work::thread_of`]) (40 bytes, no heap).
#[derive(Clone, Copy)]
struct COcc {
    start: i64,
    end: i64,
    /// `domainId`, 0 for none (the export layer reads the default domain 0 as none).
    domain_id: i64,
    label: u32,
    depth: u32,
    /// u32::MAX when none
    parent: u32,
    event_type: i32,
}

/// Per-occurrence interval metrics of the sweep (32 bytes). `cur_e`, the end of the union so far, doubles as
/// `last_device_end` (rows are swept by start, so the union's last interval ends last) and `first` is the start
/// of the first one (`i64::MAX` while D is empty); busy and coverage grow by each new piece of the union. The
/// runtime calls and sync statistics live aside (the join's), and so do the row counts ([`DevCounts`]): these are
/// allocated only once the join's correlation table is gone (the peak memory of the analysis is the sweep's).
#[derive(Clone, Copy)]
struct CMet {
    busy_ns: i64,
    coverage_ns: i64,
    first: i64,
    cur_e: i64,
}

impl CMet {
    const EMPTY: CMet = CMet { busy_ns: 0, coverage_ns: 0, first: i64::MAX, cur_e: 0 };
    fn has_device(&self) -> bool {
        self.first != i64::MAX
    }
    fn span_ns(&self) -> i64 {
        if self.has_device() {
            self.cur_e - self.first
        } else {
            0
        }
    }
}

/// Device rows counted by kind, with the kernels' summed durations: of a chain while the rows are tagged
/// ([`tag_rows`]), then of each occurrence ([`spread_counts`]).
#[derive(Clone, Copy, Default)]
struct DevCounts {
    kernels: u64,
    memcpys: u64,
    memsets: u64,
    graph_traces: u64,
    kernel_work_ns: i64,
}

impl DevCounts {
    fn device_rows(&self) -> u64 {
        self.kernels + self.memcpys + self.memsets + self.graph_traces
    }
    /// Sums of non-negative durations saturate the same in any grouping.
    fn add(&mut self, o: &DevCounts) {
        self.kernels += o.kernels;
        self.memcpys += o.memcpys;
        self.memsets += o.memsets;
        self.graph_traces += o.graph_traces;
        self.kernel_work_ns = self.kernel_work_ns.saturating_add(o.kernel_work_ns);
    }
}

/// Blocking sync calls as the join counts them: `occurrence << 8 | API index` ([`SYNC_APIS`]) → calls and ns
/// (24 bytes an entry, only for the (occurrence, API) pairs that have some).
type SyncHits = FxMap<u64, SyncStat>;

/// The blocking sync calls of each occurrence, by API index: the entries of [`SyncHits`] sorted by key (made
/// once the join is done; smaller than the map), then indexed by occurrence ([`SyncTable::index`], once the
/// device rows are gone).
#[derive(Default)]
struct SyncTable {
    ent: Vec<(u64, SyncStat)>,
    /// Occurrence `i`'s entries are `ent[off[i]..off[i + 1]]` (empty before [`SyncTable::index`]).
    off: Vec<usize>,
}

impl SyncTable {
    fn new(hits: SyncHits) -> SyncTable {
        let mut ent: Vec<(u64, SyncStat)> = hits.into_iter().collect();
        ent.sort_unstable_by_key(|e| e.0);
        SyncTable { ent, off: Vec::new() }
    }

    fn index(&mut self, n: usize) {
        let mut k = 0;
        self.off = (0..=n as u64)
            .map(|i| {
                while k < self.ent.len() && self.ent[k].0 >> 8 < i {
                    k += 1;
                }
                k
            })
            .collect();
    }

    /// Occurrence `i`'s per-API statistics, by API index.
    fn of(&self, i: usize) -> impl Iterator<Item = (u8, SyncStat)> + '_ {
        let at = match (self.off.get(i), self.off.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.ent[a..b],
            _ => &[],
        };
        at.iter().map(|&(k, st)| (k as u8, st))
    }

    /// Occurrence `i`'s sync calls and their ns (saturating, like each API's).
    fn totals(&self, i: usize) -> (u64, i64) {
        self.of(i).fold((0, 0), |(c, ns), (_, s)| (c + s.calls, ns.saturating_add(s.total_ns)))
    }
}

/// The chain of a `(process, correlationId)` that several runtime calls share: its device rows are ambiguous,
/// attributed to no occurrence and counted ([`Totals::device_rows_ambiguous`]).
const AMBIGUOUS: u32 = u32::MAX - 1;

/// `(process index << 32 | correlationId) → chain`, 12 bytes, kept in a Vec sorted by key.
#[derive(Clone, Copy)]
#[repr(C, packed)]
struct CorrEnt {
    key: u64,
    chain: u32,
}

#[derive(Clone, Copy)]
struct Tag {
    chain: u32,
    dev: u32,
    end: i64,
}

/// The whole analysis of an open export (see the contract).
pub fn analyze(export: &Export, opts: &RangesOptions) -> Result<Analysis> {
    let (doc, detail) = analyze_impl(export, opts, true, false)?;
    let (occurrences, metrics) = detail.expect("asked for");
    Ok(Analysis { doc, occurrences, metrics })
}

type Detail = Option<(Vec<Occurrence>, Vec<OccurrenceMetrics>)>;

/// The analysis; the public per-occurrence vectors are built only when `detail` is asked for. It runs as
/// phases over one [`Work`]: [`load`], [`join_runtime`], [`attribute_device_rows`] (then [`sweep`]),
/// [`map_threads`], [`aggregate`] and [`finish`]. With `share`, the reads also compute the timed-stats facts
/// of the tables they read ([`run_scans`]).
fn analyze_impl(export: &Export, opts: &RangesOptions, detail: bool, share: bool) -> Result<(RangesDoc, Detail)> {
    let w = run_scans(export, opts, None, share, false, None)?;
    let mut ph = crate::phase::Phases::new("sqlite-ranges");
    let thread_diagnostics = map_threads(export, &w)?;
    ph.mark("map_threads");
    let (ranges, high_cardinality_labels) = aggregate(export, &w)?;
    ph.mark("aggregate");
    let r = finish(export, opts, w, ranges, thread_diagnostics, high_cardinality_labels, detail);
    ph.mark("finish");
    r
}

/// What the phases share: the kept occurrences (labels as ids), their threads, their metrics so far.
struct Work {
    tables_present: Vec<String>,
    skipped: Skipped,
    truncated: Vec<occurrences::TruncatedRange>,
    /// Invalid intervals of the runtime and device tables (not delivered by the export layer).
    row_skips: RowSkips,
    occ: Vec<COcc>,
    label_names: Vec<String>,
    /// `(globalTid, lo, hi)` thread slices of `occ`.
    slices: Vec<(i64, usize, usize)>,
    /// Occurrence → its thread slice index.
    thread_of: Vec<u32>,
    /// globalTid → (slice index, lo, hi).
    slice_of: FxMap<i64, (u32, usize, usize)>,
    /// By occurrence: its runtime calls (the join's).
    runtime_calls: Vec<u64>,
    /// By occurrence, its device metrics: empty until the device rows are attributed.
    metrics: Vec<CMet>,
    /// By chain, then ([`spread_counts`]) by occurrence: the device rows counted; empty until then.
    chain_counts: Vec<DevCounts>,
    counts: Vec<DevCounts>,
    /// The join's sync counts, until [`SyncTable::new`] makes `syncs` of them (once the join is done).
    sync_hits: SyncHits,
    syncs: SyncTable,
    th_runtime: Vec<u64>,
    th_device: Vec<u64>,
    /// Process key (NS) → small index of the correlation table.
    proc_idx: FxMap<i64, u32>,
    chains: Chains,
    /// Process keys seen on device rows.
    device_pids: FxSet<i64>,
    per_device: Vec<DeviceTotals>,
    kernels_total: u64,
    kernel_work_total: i64,
    kernels_attr: u64,
    kernel_work_attr: i64,
    /// Device rows whose `(globalPid, correlationId)` several runtime calls share (attributed to none).
    ambiguous_rows: u64,
    /// The label folding report (None without `fold`).
    folded: Option<crate::labels::FoldReport>,
    /// Per-occurrence interval collection for the labels asked by [`analyze_with_intervals`] (None otherwise).
    collect: Option<Collect>,
    /// The occurrences as read, kept for [`Collected::occurrences`].
    loaded: Option<occurrences::InternedOccurrences>,
}

/// What [`analyze_with_intervals`] collects while the phases run.
struct Collect {
    /// Label id → collect its occurrences' intervals.
    want: Vec<bool>,
    /// By occurrence index (empty for the occurrences not asked for).
    per_occ: Vec<OccurrenceIntervals>,
    /// Every device row and runtime call as read ([`CapturedRows`]); the calls by part of the runtime table.
    rows: CapturedRows,
    calls_by_part: Vec<Vec<CapturedCall>>,
    /// The join read the runtime table whole ([`Collected::runtime_read`]).
    runtime_read: bool,
    /// [`Collected::device_ids`].
    device_ids: Vec<i64>,
}

/// A runtime call with a thread and an API name id, as the join read it (for the device timelines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedCall {
    pub start: i64,
    pub end: i64,
    pub global_tid: i64,
    pub correlation_id: Option<i64>,
    pub name_id: i64,
}

/// The runtime calls of [`CapturedRows`], in table order: the parts the join read, each in rowid order, kept as
/// they were read (one vector of them all was a copy of 48 bytes per call: 62 MB at 5 M kernels).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeCalls(Vec<Vec<CapturedCall>>);

impl RuntimeCalls {
    /// The calls of `parts`, taken in order.
    pub fn new(parts: Vec<Vec<CapturedCall>>) -> RuntimeCalls {
        RuntimeCalls(parts)
    }
    /// The parts, in table order, each in rowid order.
    pub fn parts(&self) -> &[Vec<CapturedCall>] {
        &self.0
    }
    /// Every call, in table order.
    pub fn iter(&self) -> impl Iterator<Item = &CapturedCall> + '_ {
        self.0.iter().flatten()
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every device row and runtime call as [`analyze_with_intervals`] read them, before the attribution: what the
/// step budget's device timelines need, without reading the tables again.
#[derive(Debug, Clone, Default)]
pub struct CapturedRows {
    /// The device tables' rows in table then rowid order, with the kernels' names
    /// ([`crate::export::rows::DeviceDetail::Names`]) and the skipped rows of each part: the rows the
    /// attribution reads, shared, never copied (the attribution keeps its marks apart).
    pub device: std::sync::Arc<Vec<DeviceChunk>>,
    /// The runtime calls with a thread and an API name id, in table order (shared with the thread that builds
    /// the device timelines while the analysis goes on: [`RowsReady`]).
    pub runtime: std::sync::Arc<RuntimeCalls>,
    /// Runtime rows skipped (invalid intervals).
    pub runtime_skips: RowSkips,
}

/// What [`analyze_with_intervals`] returns besides the analysis.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// Per occurrence (parallel to `occurrences`): its intervals when its label was asked for, else empty.
    pub intervals: Vec<OccurrenceIntervals>,
    pub rows: CapturedRows,
    /// Whether `rows.runtime` holds every runtime call with a thread and an API name id: the join read the
    /// runtime table whole (it does not when the table is absent or no occurrence was kept).
    pub runtime_read: bool,
    /// With [`analyze_with_intervals_keeping`] and options without prefix or window: the occurrences as read,
    /// before folding ([`SharedOccurrences::loaded`] is what [`load_occurrences`] gives with default options).
    pub occurrences: Option<SharedOccurrences>,
    /// The CUDA `deviceId` of each device index of the intervals' rows ([`CorrelatedDeviceRow::device`]).
    pub device_ids: Vec<i64>,
}

/// The kept occurrences of an analysis without prefix or window, labels unfolded and interned: what a
/// readiness document on the same export reads (`gate-check --report --nvtx-readiness`).
#[derive(Default, Clone)]
pub struct SharedOccurrences(occurrences::InternedOccurrences);

impl SharedOccurrences {
    /// [`load_occurrences`] with default options, without reading the export again.
    pub fn loaded(&self) -> LoadedOccurrences {
        self.0.to_loaded()
    }
}

impl std::fmt::Debug for SharedOccurrences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedOccurrences({} occurrences)", self.0.occurrences.len())
    }
}

/// A device row attributed to an occurrence by the join (same rows as its metrics), as
/// [`CorrelatedDeviceRows`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorrelatedDeviceRow {
    pub start: i64,
    pub end: i64,
    pub kind: DeviceKind,
    /// Its CUDA `deviceId` is `Collected::device_ids[device]`.
    pub device: u32,
}

/// The device rows attributed to an occurrence, 16 bytes each (5.6 M rows at 5 M kernels: 24 bytes made them
/// 134 MB): the start, the duration in 32 bits (`u32::MAX`: the end is in `long`, by row index), the kind in the
/// top 2 bits of `tag` and the device index in the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorrelatedDeviceRows {
    rows: Vec<PackedCorrelatedRow>,
    long: Vec<(usize, i64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedCorrelatedRow {
    start: i64,
    dur: u32,
    tag: u32,
}

impl CorrelatedDeviceRows {
    fn reserve_exact(&mut self, n: usize) {
        self.rows.reserve_exact(n);
    }

    fn push(&mut self, r: CorrelatedDeviceRow) {
        let dur = match u32::try_from(r.end - r.start) {
            Ok(d) if d < u32::MAX => d,
            _ => {
                self.long.push((self.rows.len(), r.end));
                u32::MAX
            }
        };
        debug_assert!(r.device < 1 << 30, "device indices are distinct devices");
        self.rows.push(PackedCorrelatedRow { start: r.start, dur, tag: (r.kind as u32) << 30 | r.device });
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = CorrelatedDeviceRow> + '_ {
        let mut long = self.long.iter().peekable();
        self.rows.iter().enumerate().map(move |(i, r)| {
            let end = match long.next_if(|&&(j, _)| j == i) {
                Some(&(_, e)) => e,
                None => r.start + r.dur as i64,
            };
            CorrelatedDeviceRow {
                start: r.start,
                end,
                kind: DeviceKind::ALL[(r.tag >> 30) as usize],
                device: r.tag & !(3 << 30),
            }
        })
    }

    /// Sorted by `(start, end)`, stable (rows of equal interval keep their order).
    fn sort(&mut self) {
        if self.long.is_empty() {
            // the end is start + dur: by (start, dur) is by (start, end)
            self.rows.sort_by_key(|r| (r.start, r.dur));
            return;
        }
        let mut all: Vec<CorrelatedDeviceRow> = self.iter().collect();
        all.sort_by_key(|d| (d.start, d.end));
        *self = CorrelatedDeviceRows::default();
        all.into_iter().for_each(|d| self.push(d));
    }
}

/// A runtime call counted in an occurrence (on its thread, starting inside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnclosedRuntimeCall {
    pub start: i64,
    pub end: i64,
    /// `StringIds` id of the API name.
    pub name_id: Option<i64>,
    /// Blocking sync API ([`normalize_sync_api`]).
    pub sync: bool,
}

/// The intervals behind one occurrence's metrics: its correlated device rows and its runtime calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OccurrenceIntervals {
    pub device: CorrelatedDeviceRows,
    pub runtime: Vec<EnclosedRuntimeCall>,
}

/// [`analyze`], plus the intervals of every occurrence whose label satisfies `want` (parallel to
/// `occurrences`; empty for the others). The same join as the metrics: runtime calls on the occurrence's
/// thread, then `(globalPid, correlationId)` — no second join.
pub fn analyze_with_intervals(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
) -> Result<(Analysis, Collected)> {
    analyze_with_intervals_keeping(export, opts, want, false, None)
}

/// Called once with the rows an analysis with intervals captured, as soon as they are read (before the
/// attribution): the caller may start work on them in its own thread, taking the device rows out (the
/// [`Collected::rows`] it gets back then have none).
pub type RowsReady<'a> = &'a mut dyn FnMut(&mut CapturedRows);

/// [`analyze_with_intervals`]; with `keep_occurrences` and options without prefix or window, the occurrences as
/// read too ([`Collected::occurrences`]), for a readiness document on the same export; `ready` is given the
/// captured rows as soon as they are read ([`RowsReady`]).
pub fn analyze_with_intervals_keeping(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
    keep_occurrences: bool,
    ready: Option<RowsReady<'_>>,
) -> Result<(Analysis, Collected)> {
    let keep = keep_occurrences && opts.range_prefix.is_none() && opts.window.is_none();
    let mut w = run_scans(export, opts, Some(want), true, keep, ready)?;
    let thread_diagnostics = map_threads(export, &w)?;
    let (ranges, high_cardinality_labels) = aggregate(export, &w)?;
    let (per_occ, rows, runtime_read, device_ids) =
        w.collect.take().map(|c| (c.per_occ, c.rows, c.runtime_read, c.device_ids)).unwrap_or_default();
    let occurrences = w.loaded.take().map(SharedOccurrences);
    let n = w.occ.len();
    let shared = occurrences;
    let (doc, detail) = finish(export, opts, w, ranges, thread_diagnostics, high_cardinality_labels, true)?;
    let (occurrences, metrics) = detail.expect("asked for");
    let mut iv = per_occ;
    iv.resize_with(n, OccurrenceIntervals::default);
    for v in &mut iv {
        v.device.sort();
        v.runtime.sort_unstable_by_key(|r| (r.start, r.end, r.name_id, r.sync));
    }
    let c = Collected { intervals: iv, rows, runtime_read, occurrences: shared, device_ids };
    Ok((Analysis { doc, occurrences, metrics }, c))
}

/// Phases 1 to 3: the device tables are read in parallel threads (each large table split into rowid ranges,
/// each range on its own read-only connection: [`crate::export::rows::read_device_chunks`]) while the
/// occurrences load and the runtime calls join on the export's connection; then the device rows are
/// attributed and swept. Errors come in the order of a serial run: tables, NVTX, runtime, device rows.
/// With `share_stats`, the reads also compute the timed-stats facts of the tables they read whole
/// ([`Export::put_stats`]): the caller's other questions (the evidence of a report, the gates) then need no
/// scan of their own.
fn run_scans(
    export: &Export,
    opts: &RangesOptions,
    want: Option<&dyn Fn(&str) -> bool>,
    share_stats: bool,
    keep_occurrences: bool,
    ready: Option<RowsReady<'_>>,
) -> Result<Work> {
    check_tables(export)?;
    let stats = |t: &str| if share_stats { export.stats_wanted(t) } else { None };
    let dev_tables: Vec<(DeviceKind, crate::export::TableInfo, Option<Keep>)> = DeviceKind::ALL
        .iter()
        .filter_map(|k| export.table(k.table()).map(|t| (*k, t.clone(), stats(k.table()))))
        .collect();
    let rt_stats = stats(schema::RUNTIME);
    let src = export.source();
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let threads = crate::export::rows::scan_threads();
    // with intervals (the step budget), the kernels' names too: its device timelines read them from this scan
    let detail = if want.is_some() {
        if export.has_table(schema::KERNEL) {
            export.require(schema::KERNEL, &[cols::DEMANGLED_NAME])?;
        }
        crate::export::rows::DeviceDetail::Names
    } else {
        crate::export::rows::DeviceDetail::None
    };
    // the runtime calls too, in parallel batches (the join and the collected intervals do not depend on the
    // order in which they arrive: [`analyze_with_intervals`] sorts each occurrence's calls on all their fields)
    let rt_table = export.table(schema::RUNTIME).cloned();
    let (tx, rx) = std::sync::mpsc::sync_channel::<crate::export::rows::RuntimeBatch>(16);
    let mut rx = Some(rx);
    std::thread::scope(|s| {
        let (src_r, cancel_r) = (&src, &cancel);
        let reader = s.spawn(|| crate::export::rows::read_device_chunks(&src, &dev_tables, threads, detail, &cancel));
        let rt_reader =
            match rt_table.as_ref() {
                Some(t) => Some(s.spawn(move || {
                    crate::export::rows::read_runtime_batches(src_r, t, threads, rt_stats, cancel_r, tx)
                })),
                None => {
                    drop(tx);
                    rx = None;
                    None
                }
            };
        let mut ph = crate::phase::Phases::new("sqlite-ranges");
        let main = (|| -> Result<(Work, CorrTable, bool)> {
            let mut w = load(export, opts, keep_occurrences, stats(schema::NVTX_EVENTS))?;
            ph.mark("load");
            if let Some(want) = want {
                w.collect = Some(Collect {
                    want: w.label_names.iter().map(|l| want(l)).collect(),
                    per_occ: (0..w.occ.len()).map(|_| OccurrenceIntervals::default()).collect(),
                    rows: CapturedRows::default(),
                    calls_by_part: Vec::new(),
                    runtime_read: false,
                    device_ids: Vec::new(),
                });
            }
            let (corr, consumed) = join_runtime(export, &mut w, rx.take())?;
            ph.mark("join_runtime");
            Ok((w, corr, consumed))
        })();
        // a reader never waits on a consumer that is gone
        drop(rx.take());
        if main.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let rt_skips =
            rt_reader.map(|h| h.join().unwrap_or_else(|_| Err(Error::input("the runtime table reader panicked"))));
        let chunks = reader.join().unwrap_or_else(|_| Err(Error::input("the device table reader panicked")));
        ph.mark("device_rows_wait");
        let (mut w, corr, consumed) = main?;
        let (rt_skips, rt_stats) = if consumed { rt_skips.transpose()?.unzip() } else { (None, None) };
        if let Some(sk) = &rt_skips {
            crate::export::merge_skips(&mut w.row_skips, sk);
        }
        if let Some(st) = rt_stats.flatten() {
            export.put_stats(schema::RUNTIME, st);
        }
        let mut chunks = chunks?;
        let stats = chunks.iter_mut().map(|c| (c.kind, c.stats.take())).collect();
        let rows = match w.collect.as_mut() {
            Some(c) => {
                c.runtime_read = consumed;
                let chunks = std::sync::Arc::new(chunks);
                put_device_stats(export, stats, Some(&chunks));
                let calls = RuntimeCalls::new(std::mem::take(&mut c.calls_by_part));
                let runtime_skips = rt_skips.unwrap_or_default();
                c.rows = CapturedRows { device: chunks.clone(), runtime: std::sync::Arc::new(calls), runtime_skips };
                if let Some(f) = ready {
                    f(&mut c.rows);
                }
                DeviceRows::Shared(chunks)
            }
            None => {
                put_device_stats(export, stats, None);
                DeviceRows::Own(chunks)
            }
        };
        attribute_device_rows(&mut w, corr, rows);
        ph.mark("attribute_device_rows+sweep");
        Ok(w)
    })
}

/// Is there an `NVTX_EVENTS` table to read? An absent one (nsys creates it only when it records an NVTX event:
/// [`crate::export::NvtxRecorded::absent_table_is_empty`]) reads as the empty table the `--lazy=false` export of
/// the same capture has; one that nsys's own count says should be there is the error naming it. Only
/// [`document`] (the `sqlite-ranges` contract) requires the table itself.
fn nvtx_table(export: &Export) -> Result<bool> {
    if !export.has_table(schema::NVTX_EVENTS) && export.nvtx_recorded()?.absent_table_is_empty() {
        return Ok(false);
    }
    export.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
    Ok(true)
}

/// The timed-stats facts the device reads computed, per table ([`Export::put_stats`]); their kept intervals
/// the rows of `shared` when the chunks are shared ([`crate::export::rows::DeviceDetail::Names`]).
fn put_device_stats(
    export: &Export,
    mut stats: Vec<(Option<DeviceKind>, Option<crate::export::rows::TimedStats>)>,
    shared: Option<&std::sync::Arc<Vec<DeviceChunk>>>,
) {
    if let Some(rows) = shared {
        for (at, (_, st)) in stats.iter_mut().enumerate() {
            if let Some(st) = st {
                st.attach_rows(rows, at);
            }
        }
    }
    for kind in DeviceKind::ALL {
        let parts: Vec<_> = stats.iter_mut().filter(|c| c.0 == Some(kind)).map(|c| c.1.take()).collect();
        if let Some(st) = crate::export::rows::merge_stats(parts) {
            export.put_stats(kind.table(), st);
        }
    }
}

/// Every table of the contract, validated before any work (a schema mismatch is an error, never a partial
/// report).
fn check_tables(export: &Export) -> Result<()> {
    nvtx_table(export)?;
    export.require(schema::STRING_IDS, &cols::STRING_IDS)?;
    for (t, cols) in OPTIONAL_TABLES {
        export.optional(t, cols)?;
    }
    Ok(())
}

impl Work {
    fn present(&self, t: &str) -> bool {
        self.tables_present.iter().any(|p| p == t)
    }
}

/// `(process index, correlationId) → chain` of the runtime calls inside kept occurrences: a sorted Vec of
/// packed keys, and a map for keys that do not pack.
struct CorrTable {
    corr: Vec<CorrEnt>,
    wide: FxMap<(i64, i64), u32>,
}

/// Phase 1: validate every table (a schema mismatch is an error before any work, never a partial report),
/// load the kept occurrences and intern their labels (`nvtx_stats`: the NVTX read is also the table's
/// timed-stats scan).
fn load(export: &Export, opts: &RangesOptions, keep_loaded: bool, nvtx_stats: Option<Keep>) -> Result<Work> {
    nvtx_table(export)?;
    export.require(schema::STRING_IDS, &cols::STRING_IDS)?;
    let mut tables_present = Vec::new();
    for (t, cols) in OPTIONAL_TABLES {
        if export.optional(t, cols)?.is_some() {
            tables_present.push(t.to_string());
        }
    }
    progress("reading NVTX_EVENTS");
    let mut loaded = load_interned(export, opts, nvtx_stats)?;
    let slices = thread_slices(&loaded.occurrences);
    let n = loaded.occurrences.len();
    // labels as ids; folding runs once per distinct raw label (with its occurrence count, first-seen order:
    // what one call per occurrence gives), and the folded labels are numbered in order of first occurrence
    let mut label_names: Vec<String> = Vec::new();
    let mut folder = opts.fold.then(crate::labels::Folder::new);
    let occ: Vec<COcc> = {
        let mut count = vec![0u64; loaded.labels.len()];
        for o in &loaded.occurrences {
            count[o.label as usize] += 1;
        }
        let mut final_of: Vec<u32> = vec![u32::MAX; loaded.labels.len()];
        let mut ids: FxMap<String, u32> = FxMap::default();
        for r in loaded.occurrences.iter().map(|o| o.label) {
            if final_of[r as usize] == u32::MAX {
                let raw = &loaded.labels[r as usize];
                let label = match folder.as_mut() {
                    Some(f) => f.add(raw, count[r as usize]),
                    None => raw.clone(),
                };
                final_of[r as usize] = match ids.get(label.as_str()) {
                    Some(&id) => id,
                    None => {
                        let id = label_names.len() as u32;
                        label_names.push(label.clone());
                        ids.insert(label, id);
                        id
                    }
                };
            }
        }
        let c_occ = |o: &occurrences::Interned| COcc {
            start: o.start,
            end: o.end,
            domain_id: o.domain_id,
            label: final_of[o.label as usize],
            depth: o.depth,
            parent: o.parent,
            event_type: o.event_type,
        };
        if keep_loaded {
            loaded.occurrences.iter().map(c_occ).collect()
        } else {
            // collected in place, then shrunk: the occurrences as read and the kept ones are not both alive
            let mut v: Vec<COcc> = std::mem::take(&mut loaded.occurrences).into_iter().map(|o| c_occ(&o)).collect();
            v.shrink_to_fit();
            v
        }
    };
    let mut thread_of = vec![0u32; n];
    let mut slice_of: FxMap<i64, (u32, usize, usize)> = FxMap::default();
    for (ti, &(g, lo, hi)) in slices.iter().enumerate() {
        for t in &mut thread_of[lo..hi] {
            *t = ti as u32;
        }
        slice_of.insert(g, (ti as u32, lo, hi));
    }
    let nth = slices.len();
    Ok(Work {
        tables_present,
        skipped: loaded.skipped,
        truncated: std::mem::take(&mut loaded.truncated),
        row_skips: RowSkips::new(),
        occ,
        label_names,
        slices,
        thread_of,
        slice_of,
        runtime_calls: vec![0; n],
        metrics: Vec::new(),
        chain_counts: Vec::new(),
        counts: Vec::new(),
        sync_hits: FxMap::default(),
        syncs: SyncTable::default(),
        th_runtime: vec![0u64; nth],
        th_device: vec![0u64; nth],
        proc_idx: FxMap::default(),
        chains: Chains::new(),
        device_pids: FxSet::default(),
        per_device: Vec::new(),
        kernels_total: 0,
        kernel_work_total: 0,
        kernels_attr: 0,
        kernel_work_attr: 0,
        ambiguous_rows: 0,
        folded: folder.map(|f| f.report(crate::labels::REPORT_LIMIT)),
        collect: None,
        loaded: keep_loaded.then_some(loaded),
    })
}

/// Phase 2: stream the runtime calls once; each call inside kept occurrences of its thread counts for them
/// (calls, blocking syncs) and records `(process, correlationId) → occurrence chain` for the device rows.
fn join_runtime(
    export: &Export,
    w: &mut Work,
    rx: Option<std::sync::mpsc::Receiver<crate::export::rows::RuntimeBatch>>,
) -> Result<(CorrTable, bool)> {
    let mut consumed = false;
    let mut corr: Vec<CorrEnt> = Vec::new();
    let mut corr_wide: FxMap<(i64, i64), u32> = FxMap::default();
    let n = w.occ.len();
    // the calls are read when an occurrence can be attributed to, or when the caller collects the rows (the
    // device timelines of a capture without any range link its device rows to their calls)
    let scan = n > 0 || w.collect.is_some();
    if w.present(schema::RUNTIME) && !scan {
        // not scanned (no occurrence to attribute to): its skipped rows are still counted
        export.count_interval_skips(&[schema::RUNTIME], &mut w.row_skips)?;
    }
    if w.present(schema::RUNTIME) && scan {
        let tbl = schema::RUNTIME;
        // sync API name ids (one StringIds scan)
        let mut sync_ids: FxMap<i64, u8> = FxMap::default();
        export.for_each_string(|id, v| {
            if v.len() < 64 && v.starts_with(b"cu") {
                if let Some(api) = std::str::from_utf8(v).ok().and_then(normalize_sync_api) {
                    let idx = SYNC_APIS.iter().position(|a| *a == api).unwrap() as u8;
                    sync_ids.insert(id, idx);
                }
            }
        })?;
        let mut stabs = Stabs::new();
        // an upper bound, reserved once (untouched pages cost no memory): no copy while growing
        corr.reserve_exact(export.row_count_hint(tbl));
        let mut hits: Vec<u32> = Vec::with_capacity(16);
        let mut last_hits: Vec<u32> = Vec::new();
        let mut last_chain = u32::MAX;
        let mut last_ns = i64::MIN;
        let mut last_pidx = 0u32;
        let mut seen = 0u64;
        let Work { occ, slice_of, runtime_calls, sync_hits, th_runtime, proc_idx, chains, row_skips, collect, .. } = w;
        // `bound`: an upper bound of the rows of the part, reserved once (untouched pages cost no memory)
        let mut body = |r: crate::export::RuntimeRow, part: usize, bound: usize| -> Result<()> {
            seen += 1;
            if let (Some(c), Some(t), Some(n)) = (collect.as_mut(), r.global_tid, r.name_id) {
                if c.calls_by_part.len() <= part {
                    c.calls_by_part.resize_with(part + 1, Vec::new);
                }
                if c.calls_by_part[part].capacity() == 0 {
                    c.calls_by_part[part].reserve_exact(bound);
                }
                let call = CapturedCall {
                    start: r.start,
                    end: r.end,
                    global_tid: t,
                    correlation_id: r.correlation_id,
                    name_id: n,
                };
                c.calls_by_part[part].push(call);
            }
            if seen & 0xF_FFFF == 0 {
                progress(&format!("{tbl}: {seen} rows"));
            }
            let Some(gtid) = r.global_tid else { return Ok(()) };
            let (rs, re) = (r.start, r.end);
            hits.clear();
            if let Some(&(ti, lo, hi)) = slice_of.get(&gtid) {
                stabs.query(occ, ti as usize, part, (lo, hi), rs, &mut hits);
                if !hits.is_empty() {
                    th_runtime[ti as usize] += 1;
                }
            }
            let sync = r.name_id.and_then(|id| sync_ids.get(&id).copied());
            for &h in &hits {
                if let Some(c) = collect.as_mut() {
                    if c.want[occ[h as usize].label as usize] {
                        c.per_occ[h as usize].runtime.push(EnclosedRuntimeCall {
                            start: rs,
                            end: re,
                            name_id: r.name_id,
                            sync: sync.is_some(),
                        });
                    }
                }
                runtime_calls[h as usize] += 1;
                if let Some(api) = sync {
                    let s = sync_hits.entry((h as u64) << 8 | api as u64).or_default();
                    s.calls += 1;
                    // saturating: an overflow is reported by the label sums (aggregate), never wrapped
                    s.total_ns = s.total_ns.saturating_add(re - rs);
                }
            }
            // every call with a correlation id is keyed, those outside kept occurrences too (chain u32::MAX):
            // a device row whose key several calls share is ambiguous, wherever the calls are
            let Some(cid) = r.correlation_id else { return Ok(()) };
            let chain = if hits.is_empty() {
                u32::MAX
            } else if hits == last_hits && last_chain != u32::MAX {
                last_chain
            } else {
                let c = chains.intern(&hits);
                last_hits.clone_from(&hits);
                last_chain = c;
                c
            };
            let ns = ns_of(gtid);
            let pidx = if ns == last_ns {
                last_pidx
            } else {
                let next = proc_idx.len() as u32;
                let p = *proc_idx.entry(ns).or_insert(next);
                last_ns = ns;
                last_pidx = p;
                p
            };
            if (0..=u32::MAX as i64).contains(&cid) && pidx < (1 << 30) {
                corr.push(CorrEnt { key: ((pidx as u64) << 32) | cid as u64, chain });
                return Ok(());
            }
            // the same (process, correlationId) on two runtime calls: ambiguous, never a union of both
            corr_wide.entry((ns, cid)).and_modify(|c| *c = AMBIGUOUS).or_insert(chain);
            Ok(())
        };
        match rx {
            // batches of parallel readers (the join does not depend on the row order)
            Some(rx) => {
                consumed = true;
                for b in rx.iter() {
                    for r in b.rows {
                        body(r, b.chunk, b.chunk_bound)?;
                    }
                }
            }
            None => {
                let hint = export.row_count_hint(tbl);
                export.runtime_calls(row_skips, |r| body(r, 0, hint))?
            }
        }
    }

    // sort the correlation entries by key; a key seen on several calls is ambiguous (its device rows are
    // attributed to none of them, and counted), a key of one call outside kept occurrences is dropped
    if !corr.windows(2).all(|w| { w[0].key } <= { w[1].key }) {
        corr.sort_unstable_by_key(|e| e.key);
    }
    {
        let len = corr.len();
        let (mut i, mut o) = (0, 0);
        while i < len {
            let key = corr[i].key;
            let mut ch = corr[i].chain;
            let mut j = i + 1;
            while j < len && { corr[j].key } == key {
                ch = AMBIGUOUS;
                j += 1;
            }
            if ch != u32::MAX {
                corr[o] = CorrEnt { key, chain: ch };
                o += 1;
            }
            i = j;
        }
        corr.truncate(o);
    }
    corr_wide.retain(|_, c| *c != u32::MAX);
    // the chain map is only needed to intern; the chains themselves stay
    w.chains.freeze();
    Ok((CorrTable { corr, wide: corr_wide }, consumed))
}

/// The stabbing queries of the runtime join ("which kept occurrences of this thread contain the time t"),
/// answered incrementally: the calls of one thread and one part of the table mostly come in time order, and
/// for `t ≥` the previous `t'` of the same (thread, part), `{i < cut(t): end_i ≥ t}` is the previous answer
/// without the occurrences that ended before `t`, plus those that started in `(t', t]` and are still open.
/// A call earlier than the previous one asks the tree of the occurrences' ends, built at the first such call
/// (none in a table whose calls come in time order per thread: the tree's memory is not spent).
struct Stabs {
    /// Per (thread slice, part): `(t, cut, answer)` of the last query.
    last: FxMap<(u32, u32), (i64, usize, Vec<u32>)>,
    tree: Option<MaxTree>,
}

impl Stabs {
    fn new() -> Stabs {
        Stabs { last: FxMap::default(), tree: None }
    }

    /// `out` = the indices `i` in `[lo, cut)` with `occ[i].end >= t`, ascending, where `cut` is the first index
    /// of the thread's slice `[lo, hi)` whose start is after `t`.
    fn query(
        &mut self,
        occ: &[COcc],
        thread: usize,
        part: usize,
        (lo, hi): (usize, usize),
        t: i64,
        out: &mut Vec<u32>,
    ) {
        let e = self.last.entry((thread as u32, part as u32)).or_insert((i64::MIN, lo, Vec::new()));
        if t >= e.0 {
            let mut cut = e.1;
            while cut < hi && occ[cut].start <= t {
                cut += 1;
            }
            e.2.retain(|&i| occ[i as usize].end >= t);
            e.2.extend((e.1..cut).filter(|&i| occ[i].end >= t).map(|i| i as u32));
            (e.0, e.1) = (t, cut);
        } else {
            let cut = lo + occ[lo..hi].partition_point(|o| o.start <= t);
            e.2.clear();
            let tree = self.tree.get_or_insert_with(|| MaxTree::new(&occ.iter().map(|o| o.end).collect::<Vec<_>>()));
            tree.collect_ge(lo, cut, t, &mut e.2);
            (e.0, e.1) = (t, cut);
        }
        out.clone_from(&e.2);
    }
}

/// The device rows the attribution reads, and where it keeps each row's mark (its chain, then its tag): in the
/// rows' own `aux` when the analysis holds them alone (`sqlite-ranges`: no second copy of anything), else in a
/// vector apart, the rows shared as read with the step budget's timelines.
enum DeviceRows {
    Own(Vec<DeviceChunk>),
    Shared(std::sync::Arc<Vec<DeviceChunk>>),
}

impl DeviceRows {
    fn chunks(&self) -> &[DeviceChunk] {
        match self {
            DeviceRows::Own(v) => v,
            DeviceRows::Shared(a) => a,
        }
    }

    /// Each chunk's meta and its rows with their marks (none yet).
    fn marked(&mut self) -> (Vec<ChunkMeta<'_>>, Vec<Marked<'_>>) {
        match self {
            DeviceRows::Own(v) => v
                .iter_mut()
                .map(|c| {
                    let DeviceChunk { kind, rows, long, wide, .. } = c;
                    (ChunkMeta { kind: *kind, long, wide }, Marked::Aux(rows))
                })
                .unzip(),
            DeviceRows::Shared(a) => a
                .iter()
                .map(|c| (ChunkMeta { kind: c.kind, long: &c.long, wide: &c.wide }, Marked::Apart(&c.rows, Vec::new())))
                .unzip(),
        }
    }
}

/// One chunk's rows and their marks ([`DeviceRows`]).
enum Marked<'a> {
    /// In the rows' `aux` (the correlation id until marked).
    Aux(&'a mut [PackedDeviceRow]),
    /// Apart (filled by [`chain_rows`]).
    Apart(&'a [PackedDeviceRow], Vec<u32>),
}

impl Marked<'_> {
    fn rows(&self) -> &[PackedDeviceRow] {
        match self {
            Marked::Aux(r) => r,
            Marked::Apart(r, _) => r,
        }
    }

    fn mark(&self, i: usize) -> u32 {
        match self {
            Marked::Aux(r) => r[i].aux,
            Marked::Apart(_, m) => m[i],
        }
    }

    fn set(&mut self, i: usize, mark: u32) {
        match self {
            Marked::Aux(r) => r[i].aux = mark,
            Marked::Apart(_, m) => m[i] = mark,
        }
    }
}

/// What the attribution reads of a chunk besides its rows.
#[derive(Clone, Copy)]
struct ChunkMeta<'a> {
    kind: Option<DeviceKind>,
    long: &'a [(usize, i64)],
    wide: &'a [(usize, Option<i64>)],
}

/// Phase 3: the device rows (read in bulk, in table order: [`run_scans`]) attributed through `(globalPid,
/// correlationId)` to the occurrence chain of their runtime call: each row marked ([`DeviceRows`]) with its
/// chain, then its tag; then [`sweep`].
fn attribute_device_rows(w: &mut Work, ct: CorrTable, mut rows: DeviceRows) {
    progress("attributing device rows");
    let CorrTable { corr, wide: corr_wide } = ct;
    let (segs, dev_ids) = segments_of(w, rows.chunks());
    let (metas, marked) = rows.marked();
    // each row's chain, chunk by chunk in parallel threads
    let (counts, mut marked): (Vec<KernelTotals>, Vec<Marked>) = {
        let (corr, corr_wide) = (&corr, &corr_wide);
        std::thread::scope(|s| {
            let handles: Vec<_> = marked
                .into_iter()
                .zip(metas.iter().zip(&segs))
                .map(|(mut m, (meta, sg))| {
                    s.spawn(move || {
                        let n = chain_rows(*meta, &mut m, sg, corr, corr_wide);
                        (n, m)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a device row attribution thread panicked")).unzip()
        })
    };
    drop(corr);
    drop(corr_wide);
    w.syncs = SyncTable::new(std::mem::take(&mut w.sync_hits));
    // sqlite-ranges' peak is next (the sweep); the report's analysis (collecting intervals) does not trim: its
    // step budget allocates again at once, and the pages trimmed would be faulted in afresh (measured at 5 M
    // kernels: the chain's CPU 3.78 -> 3.60 s, peak RSS unchanged)
    if w.collect.is_none() {
        crate::memory::release_free_memory();
    }
    w.metrics = vec![CMet::EMPTY; w.occ.len()];
    w.chain_counts = vec![DevCounts::default(); w.chains.len()];
    for c in counts {
        w.kernels_total += c.kernels_total;
        w.kernel_work_total = w.kernel_work_total.saturating_add(c.kernel_work_total);
        w.kernels_attr += c.kernels_attr;
        w.kernel_work_attr = w.kernel_work_attr.saturating_add(c.kernel_work_attr);
        w.ambiguous_rows += c.ambiguous_rows;
    }
    // then, in one pass, the rows counted for the occurrences of their chain and tagged
    let tags = tag_rows(w, &metas, &segs, &mut marked);
    crate::phase::timed("sqlite-ranges", "sweep", || sweep(w, &metas, &marked, tags, &dev_ids));
    // the rows (when the analysis held them alone) go before the occurrences' counts are spread
    drop((metas, marked));
    drop(rows);
    spread_counts(w);
    w.syncs.index(w.occ.len());
}

/// Each chunk's runs of rows of one process and device ([`SegOf`]), in row order, and the devices (a few per
/// chunk) by index; the chunks' skipped rows counted, their processes noted.
fn segments_of(w: &mut Work, chunks: &[DeviceChunk]) -> (Vec<Vec<SegOf>>, Vec<i64>) {
    let mut dev_ids: Vec<i64> = Vec::new();
    let mut dev_idx: FxMap<i64, u32> = FxMap::default();
    let mut segs: Vec<Vec<SegOf>> = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        crate::export::merge_skips(&mut w.row_skips, &chunk.skips);
        if chunk.kind.is_none() {
            segs.push(Vec::new());
            continue;
        }
        let mut v = Vec::with_capacity(chunk.segs.len());
        for (k, &(lo, gpid, dev)) in chunk.segs.iter().enumerate() {
            let hi = chunk.segs.get(k + 1).map_or(chunk.rows.len(), |n| n.0);
            if hi <= lo {
                continue;
            }
            let dev = dev.unwrap_or(-1);
            let next = dev_ids.len() as u32;
            let di = *dev_idx.entry(dev).or_insert_with(|| {
                dev_ids.push(dev);
                next
            });
            if let Some(g) = gpid {
                w.device_pids.insert(g);
            }
            let pidx = gpid.and_then(|g| w.proc_idx.get(&g).copied());
            v.push(SegOf { rows: lo..hi, gpid, pidx, dev: di });
        }
        segs.push(v);
    }
    (segs, dev_ids)
}

/// A run of rows of one chunk with the same process and device: the device's index, the process's index in the
/// correlation table.
struct SegOf {
    rows: std::ops::Range<usize>,
    gpid: Option<i64>,
    pidx: Option<u32>,
    dev: u32,
}

/// The kernel rows of a chunk, and those with a chain.
#[derive(Default)]
struct KernelTotals {
    kernels_total: u64,
    kernel_work_total: i64,
    kernels_attr: u64,
    kernel_work_attr: i64,
    /// Device rows (every kind) whose key several runtime calls share: attributed to none.
    ambiguous_rows: u64,
}

/// Each row's chain (`u32::MAX` for none), through `(process, correlationId)`, by row; the kernel totals.
fn chain_rows(
    chunk: ChunkMeta,
    m: &mut Marked,
    segs: &[SegOf],
    corr: &[CorrEnt],
    corr_wide: &FxMap<(i64, i64), u32>,
) -> KernelTotals {
    let mut n = KernelTotals::default();
    let Some(kind) = chunk.kind else { return n };
    if let Marked::Apart(rows, marks) = m {
        *marks = vec![u32::MAX; rows.len()];
    }
    let (mut ends, mut wide_i, mut hint) = (Ends::new(chunk.long), 0usize, 0usize);
    for sg in segs {
        for i in sg.rows.clone() {
            let r = m.rows()[i];
            let (s, e) = (r.start, ends.next(r));
            let correlation_id = if r.aux == u32::MAX {
                wide_i += 1;
                chunk.wide[wide_i - 1].1
            } else {
                Some(r.aux as i64)
            };
            let mut chain = match (sg.gpid, sg.pidx, correlation_id) {
                (Some(g), Some(p), Some(c)) => chain_of(corr, corr_wide, &mut hint, g, p, c),
                _ => u32::MAX,
            };
            if chain == AMBIGUOUS {
                n.ambiguous_rows += 1;
                chain = u32::MAX;
            }
            if kind == DeviceKind::Kernel {
                n.kernels_total += 1;
                n.kernel_work_total = n.kernel_work_total.saturating_add(e - s);
                if chain != u32::MAX {
                    n.kernels_attr += 1;
                    n.kernel_work_attr = n.kernel_work_attr.saturating_add(e - s);
                }
            }
            m.set(i, chain);
        }
    }
    n
}

/// The chain of `(process, correlationId)`: the packed table (device rows come nearly in correlation order: the
/// last hit and its successor are tried first), else the map of keys that do not pack.
fn chain_of(corr: &[CorrEnt], corr_wide: &FxMap<(i64, i64), u32>, hint: &mut usize, g: i64, p: u32, c: i64) -> u32 {
    if !((0..=u32::MAX as i64).contains(&c) && p < (1 << 30)) {
        return corr_wide.get(&(g, c)).copied().unwrap_or(u32::MAX);
    }
    let k = ((p as u64) << 32) | c as u64;
    let at = if *hint < corr.len() && { corr[*hint].key } == k {
        Some(*hint)
    } else if *hint + 1 < corr.len() && { corr[*hint + 1].key } == k {
        Some(*hint + 1)
    } else {
        let i = corr.partition_point(|e| { e.key } < k);
        (i < corr.len() && { corr[i].key } == k).then_some(i)
    };
    match at {
        Some(i) => {
            *hint = i;
            corr[i].chain
        }
        None => u32::MAX,
    }
}

/// The ends of a chunk's rows read in row order: a row lasting `u32::MAX` ns or more takes the next entry of
/// [`DeviceChunk::long`].
struct Ends<'a> {
    long: &'a [(usize, i64)],
    next: usize,
}

impl<'a> Ends<'a> {
    fn new(long: &'a [(usize, i64)]) -> Ends<'a> {
        Ends { long, next: 0 }
    }

    fn next(&mut self, r: PackedDeviceRow) -> i64 {
        if r.dur == u32::MAX {
            self.next += 1;
            self.long[self.next - 1].1
        } else {
            r.start + r.dur as i64
        }
    }
}

/// A run of `rows` rows of `kind` with the same chain, lasting `work` ns together, added to the chain's counts
/// (sums of non-negative durations saturate the same in any grouping).
fn add_run(w: &mut Work, kind: DeviceKind, (chain, rows, work): (u32, u64, i64)) {
    if chain == u32::MAX || rows == 0 {
        return;
    }
    let m = &mut w.chain_counts[chain as usize];
    match kind {
        DeviceKind::Kernel => {
            m.kernels += rows;
            m.kernel_work_ns = m.kernel_work_ns.saturating_add(work);
        }
        DeviceKind::Memcpy => m.memcpys += rows,
        DeviceKind::Memset => m.memsets += rows,
        DeviceKind::GraphTrace => m.graph_traces += rows,
    }
}

/// The chains that counted device rows: their counts and their occurrences.
fn counted_chains<'a>(chains: &'a Chains, counts: &'a [DevCounts]) -> impl Iterator<Item = (&'a DevCounts, &'a [u32])> {
    counts.iter().enumerate().filter(|(_, cc)| cc.device_rows() > 0).map(|(c, cc)| (cc, chains.get(c as u32)))
}

/// Each chain's counts added to its occurrences, and its rows to the device rows of their threads (once per
/// thread of the chain).
fn spread_counts(w: &mut Work) {
    let mut counts = vec![DevCounts::default(); w.occ.len()];
    let Work { chains, chain_counts, thread_of, th_device, .. } = w;
    for (cc, occs) in counted_chains(chains, chain_counts) {
        let mut prev = u32::MAX;
        for &o in occs {
            let th = thread_of[o as usize];
            if th != prev {
                th_device[th as usize] += cc.device_rows();
                prev = th;
            }
            counts[o as usize].add(cc);
        }
    }
    w.chain_counts = Vec::new();
    w.counts = counts;
}

/// Each row counted for the occurrences of its chain (its mark, by runs of rows with the same chain: the rows of
/// a launch come together), then tagged: its mark becomes `(chain, device)`, shared by the rows of a key, or its
/// own tag holding the end for a row lasting `u32::MAX` ns or more.
fn tag_rows(w: &mut Work, chunks: &[ChunkMeta], segs: &[Vec<SegOf>], marked: &mut [Marked]) -> Vec<Tag> {
    let mut tags = Tags::new(w.chains.len());
    let (mut last_key, mut last_tag) = ((u32::MAX, u32::MAX), u32::MAX);
    for ((chunk, sg), m) in chunks.iter().zip(segs).zip(marked) {
        let Some(kind) = chunk.kind else { continue };
        let mut ends = Ends::new(chunk.long);
        let mut run: (u32, u64, i64) = (u32::MAX, 0, 0);
        for sg in sg {
            for i in sg.rows.clone() {
                let r = m.rows()[i];
                let chain = m.mark(i);
                let end = ends.next(r);
                if chain != run.0 {
                    add_run(w, kind, run);
                    run = (chain, 0, 0);
                }
                run.1 += 1;
                run.2 = run.2.saturating_add(end - r.start);
                let tag = if r.dur != u32::MAX {
                    let key = (chain, sg.dev);
                    if key != last_key {
                        last_tag = tags.shared(chain, sg.dev);
                        last_key = key;
                    }
                    last_tag
                } else {
                    tags.own(Tag { chain, dev: sg.dev, end })
                };
                m.set(i, tag);
            }
        }
        add_run(w, kind, run);
    }
    tags.tags
}

/// The tags of [`tag_rows`]: one shared by the rows of each (chain, device), its own for each long row. Tag
/// `chain + 1` (no chain: 0) is the chain's on the first device it was seen on; only a chain seen on a second
/// device needs the map.
struct Tags {
    tags: Vec<Tag>,
    more: FxMap<(u32, u32), u32>,
}

/// A chain's first tag before any row of it was seen.
const UNSEEN: u32 = u32::MAX;

impl Tags {
    fn new(chains: usize) -> Tags {
        let unseen = (0..=chains as u32).map(|s| Tag { chain: s.wrapping_sub(1), dev: UNSEEN, end: 0 });
        Tags { tags: unseen.collect(), more: FxMap::default() }
    }

    fn own(&mut self, tag: Tag) -> u32 {
        self.tags.push(tag);
        self.tags.len() as u32 - 1
    }

    fn shared(&mut self, chain: u32, dev: u32) -> u32 {
        let slot = chain.wrapping_add(1);
        match self.tags[slot as usize].dev {
            UNSEEN => {
                self.tags[slot as usize].dev = dev;
                slot
            }
            d if d == dev => slot,
            _ => match self.more.get(&(chain, dev)) {
                Some(&t) => t,
                None => {
                    let t = self.own(Tag { chain, dev, end: 0 });
                    self.more.insert((chain, dev), t);
                    t
                }
            },
        }
    }
}

/// Phase 3b: the device records swept by start, merging per-occurrence and per-device interval unions
/// incrementally (busy, coverage, span), no per-occurrence interval list.
fn sweep(w: &mut Work, chunks: &[ChunkMeta], marked: &[Marked], tags: Vec<Tag>, dev_ids: &[i64]) {
    progress("merging device intervals");
    // each chunk in start order (nsys writes its rows so: the order is a check, an index only for a chunk
    // that is not), then merged by start (the unions do not depend on the order of equal starts; the collected
    // intervals keep the table order of rows with equal starts: a stable sort)
    let order: Vec<Option<Vec<u32>>> = marked.iter().map(|m| start_order(m.rows())).collect();
    let row_at = |c: usize, i: usize| order[c].as_ref().map_or(Some(i), |o| o.get(i).map(|&j| j as usize));
    let key = |c: usize, i: usize| row_at(c, i).and_then(|j| marked[c].rows().get(j)).map(|r| r.start);
    // a row's mark is its tag: `(chain, device index, end of a long row)`; a row lasting `u32::MAX` ns or more
    // has `dur == u32::MAX` and its own tag holding its end
    let rows_out = crate::merge::MergeByKey::new(marked.len(), key).filter_map(|(c, i)| {
        let j = row_at(c, i)?;
        Some((marked[c].rows()[j], marked[c].mark(j), c))
    });
    // the collected device rows of an occurrence: as many as its chains counted, allocated once
    if let Some(c) = w.collect.as_mut() {
        let mut need = vec![0u64; w.occ.len()];
        for (cc, occs) in counted_chains(&w.chains, &w.chain_counts) {
            for &o in occs {
                need[o as usize] += cc.device_rows();
            }
        }
        for (o, &n) in need.iter().enumerate() {
            if c.want[w.occ[o].label as usize] && n > 0 {
                c.per_occ[o].device.reserve_exact(n as usize);
            }
        }
    }

    // sweep: per-occurrence and per-device incremental unions
    #[derive(Clone, Copy)]
    struct Cur {
        s: i64,
        e: i64,
        open: bool,
    }
    let mut dcur = vec![Cur { s: 0, e: 0, open: false }; dev_ids.len()];
    let mut dtot: Vec<DeviceTotals> = dev_ids
        .iter()
        .map(|&d| DeviceTotals {
            device_id: d,
            device_rows: 0,
            busy_union_ns: 0,
            first_start: i64::MAX,
            last_end: i64::MIN,
        })
        .collect();
    if let Some(c) = w.collect.as_mut() {
        c.device_ids = dev_ids.to_vec();
    }
    let (occ, metrics, chains, collect) = (&w.occ, &mut w.metrics, &w.chains, &mut w.collect);
    for (r, mark, ci) in rows_out {
        let tg = tags[mark as usize];
        let end = if r.dur == u32::MAX { tg.end } else { r.start + r.dur as i64 };
        let di = tg.dev as usize;
        let dt = &mut dtot[di];
        dt.device_rows += 1;
        dt.first_start = dt.first_start.min(r.start);
        dt.last_end = dt.last_end.max(end);
        let c = &mut dcur[di];
        if !c.open {
            *c = Cur { s: r.start, e: end, open: true };
        } else if r.start <= c.e {
            c.e = c.e.max(end);
        } else {
            dt.busy_union_ns += c.e - c.s;
            *c = Cur { s: r.start, e: end, open: true };
        }
        if tg.chain == u32::MAX {
            continue;
        }
        for &o in chains.get(tg.chain).iter() {
            let o = o as usize;
            if let (Some(c), Some(kind)) = (collect.as_mut(), chunks[ci].kind) {
                if c.want[occ[o].label as usize] {
                    c.per_occ[o].device.push(CorrelatedDeviceRow { start: r.start, end, kind, device: di as u32 });
                }
            }
            let m = &mut metrics[o];
            // the part of the row the union does not hold yet, `[from, end)`: rows come by start, so the union
            // ends at cur_e and grows by disjoint pieces whose lengths and overlaps with the range add up exactly
            let from = if !m.has_device() {
                // the first one gives min(d.start)
                (m.first, m.cur_e) = (r.start, end);
                r.start
            } else {
                let from = r.start.max(m.cur_e);
                m.cur_e = m.cur_e.max(end);
                from
            };
            if end > from {
                m.busy_ns += end - from;
                m.coverage_ns += overlap(from, end, occ[o].start, occ[o].end);
            }
        }
    }
    drop(tags);
    for (di, c) in dcur.iter().enumerate() {
        if c.open {
            dtot[di].busy_union_ns += c.e - c.s;
        }
    }
    let mut per_device: Vec<DeviceTotals> = dtot.into_iter().filter(|d| d.device_rows > 0).collect();
    per_device.sort_by_key(|d| d.device_id);
    w.per_device = per_device;
}

/// The rows' indices in start order (stable), or None when they are in start order already.
fn start_order(rows: &[PackedDeviceRow]) -> Option<Vec<u32>> {
    if rows.is_sorted_by_key(|r| r.start) {
        return None;
    }
    let mut o: Vec<u32> = (0..rows.len() as u32).collect();
    o.sort_by_key(|&i| rows[i as usize].start);
    Some(o)
}

/// Phase 4: one diagnostic per thread with kept occurrences: its process mapping (PROCESSES, else the
/// device tables' globalPid, else unmapped: listed, never guessed), its name, what it owns.
fn map_threads(export: &Export, w: &Work) -> Result<Vec<ThreadDiagnostics>> {
    progress("summarising");
    let processes = if w.present(schema::PROCESSES) { export.process_ids()? } else { Default::default() };
    let mut thread_name_ids: FxMap<i64, i64> = FxMap::default();
    if w.present(schema::THREAD_NAMES) && !w.slices.is_empty() {
        export.thread_names(|g, nid| {
            if w.slice_of.contains_key(&g) {
                thread_name_ids.insert(g, nid); // the last row for the thread wins
            }
        })?;
    }
    let names = export.strings_for(&thread_name_ids.values().copied().collect())?;
    let mut thread_diagnostics = Vec::with_capacity(w.slices.len());
    for (ti, &(g, lo, hi)) in w.slices.iter().enumerate() {
        let ns = ns_of(g);
        let mapping = if processes.contains(&ns) {
            "processes"
        } else if w.device_pids.contains(&ns) {
            "device_namespace_fallback"
        } else {
            "unmapped"
        };
        let is_main = tid_of(g) == pid_of(g);
        let mut attention = Vec::new();
        if !is_main && w.th_device[ti] > 0 {
            attention.push("non_main_thread_owns_device_work".to_string());
        }
        if mapping != "processes" {
            attention.push(mapping.to_string());
        }
        thread_diagnostics.push(ThreadDiagnostics {
            global_tid: g,
            pid: pid_of(g),
            tid: tid_of(g),
            namespace: ns,
            mapping: mapping.to_string(),
            is_main_thread: is_main,
            thread_name: thread_name_ids.get(&g).and_then(|nid| names.get(nid).cloned()),
            occurrences: (hi - lo) as u64,
            runtime_calls: w.th_runtime[ti],
            device_rows_attributed: w.th_device[ti],
            attention,
        });
    }
    Ok(thread_diagnostics)
}

/// Phase 5: per label, the sums over its occurrences (sorted by host wall time descending, then label), and
/// the high-cardinality label groups.
fn aggregate(export: &Export, w: &Work) -> Result<(Vec<RangeStats>, Vec<HighCardinality>)> {
    let (occ, metrics, label_names) = (&w.occ, &w.metrics, &w.label_names);
    let mut by_label: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, o) in occ.iter().enumerate() {
        by_label.entry(label_names[o.label as usize].as_str()).or_default().push(i);
    }
    let mut ranges = Vec::with_capacity(by_label.len());
    for (label, idxs) in &by_label {
        let mut walls: Vec<i64> = idxs.iter().map(|&i| occ[i].end - occ[i].start).collect();
        walls.sort_unstable();
        let mut r = RangeStats {
            label: label.to_string(),
            occurrences: idxs.len() as u64,
            occurrences_with_device_work: 0,
            runtime_calls: 0,
            kernels: 0,
            memcpys: 0,
            memsets: 0,
            graph_traces: 0,
            host_wall_time_ns: 0,
            wall_ns_min: walls[0],
            wall_ns_median: walls[(walls.len() - 1) / 2],
            wall_ns_max: walls[walls.len() - 1],
            kernel_work_ns: 0,
            host_range_kernel_coverage_ns: 0,
            host_range_kernel_coverage_fraction: 0.0,
            kernel_busy_union_ns: 0,
            kernel_span_ns: 0,
            gpu_idle_within_kernel_span_ns: 0,
            uncovered_host_time_ns: 0,
            gpu_busy_fraction: None,
            sync: BTreeMap::new(),
            depths: BTreeMap::new(),
            parents: BTreeMap::new(),
        };
        // checked sums: timestamps are bounded by the export layer, but many huge rows could still overflow
        let overflow = |field: &str| {
            Error::input(format!(
                "{}: label {label:?}: {field} overflows 64-bit nanoseconds: the export's timestamps are not real; nothing was written",
                export.name()
            ))
        };
        let add = |acc: &mut i64, v: i64, field: &str| -> Result<()> {
            *acc = acc.checked_add(v).filter(|x| *x != i64::MAX).ok_or_else(|| overflow(field))?;
            Ok(())
        };
        for &w in &walls {
            add(&mut r.host_wall_time_ns, w, "host_wall_time_ns")?;
        }
        for &i in idxs {
            let (m, n) = (&metrics[i], &w.counts[i]);
            let o = &occ[i];
            let wall = o.end - o.start;
            if n.device_rows() > 0 {
                r.occurrences_with_device_work += 1;
            }
            r.runtime_calls += w.runtime_calls[i];
            r.kernels += n.kernels;
            r.memcpys += n.memcpys;
            r.memsets += n.memsets;
            r.graph_traces += n.graph_traces;
            add(&mut r.kernel_work_ns, n.kernel_work_ns, "kernel_work_ns")?;
            add(&mut r.host_range_kernel_coverage_ns, m.coverage_ns, "host_range_kernel_coverage_ns")?;
            add(&mut r.kernel_busy_union_ns, m.busy_ns, "kernel_busy_union_ns")?;
            add(&mut r.kernel_span_ns, m.span_ns(), "kernel_span_ns")?;
            add(&mut r.gpu_idle_within_kernel_span_ns, m.span_ns() - m.busy_ns, "gpu_idle_within_kernel_span_ns")?;
            add(&mut r.uncovered_host_time_ns, (wall - m.coverage_ns).max(0), "uncovered_host_time_ns")?;
            for (api, s) in w.syncs.of(i) {
                let e = r.sync.entry(SYNC_APIS[api as usize].to_string()).or_default();
                e.calls += s.calls;
                add(&mut e.total_ns, s.total_ns, "sync total_ns")?;
            }
            *r.depths.entry(o.depth).or_default() += 1;
            let parent = if o.parent == u32::MAX {
                String::new()
            } else {
                label_names[occ[o.parent as usize].label as usize].clone()
            };
            *r.parents.entry(parent).or_default() += 1;
        }
        if r.host_wall_time_ns > 0 {
            r.host_range_kernel_coverage_fraction =
                (r.host_range_kernel_coverage_ns as f64 / r.host_wall_time_ns as f64).min(1.0);
        }
        if r.kernel_span_ns > 0 {
            r.gpu_busy_fraction = Some(r.kernel_busy_union_ns as f64 / r.kernel_span_ns as f64);
        }
        ranges.push(r);
    }
    ranges.sort_by(|a, b| {
        b.host_wall_time_ns.cmp(&a.host_wall_time_ns).then_with(|| a.label.as_bytes().cmp(b.label.as_bytes()))
    });
    let high_cardinality_labels = high_cardinality(by_label.keys().copied());
    Ok((ranges, high_cardinality_labels))
}

/// The note on the ranges closed by the capture's end: how many, of which labels (up to five), and why they are
/// no occurrence.
pub fn truncated_note(n: u64, listed: &[occurrences::TruncatedRange]) -> String {
    let mut by_label: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
    for t in listed {
        let e = by_label.entry(t.label.as_str()).or_insert((0, 0));
        e.0 += 1;
        e.1 = e.1.max(t.end - t.start);
    }
    let mut names: Vec<String> = by_label
        .iter()
        .take(5)
        .map(|(l, (c, w))| format!("{l} ×{c} (open for at least {:.3} ms)", *w as f64 / 1e6))
        .collect();
    if by_label.len() > 5 {
        names.push(format!("{} more label(s)", by_label.len() - 5));
    }
    format!(
        "{n} NVTX range(s) end at the capture's end (ANALYSIS_DETAILS.duration): nsys closed them when the capture stopped, so their end and wall are the capture's, not theirs; they are marked truncated (truncated_ranges) and kept out of every statistic like an open range: {}",
        names.join(", ")
    )
}

/// Phase 6: the notes, the document, and (when asked) the public per-occurrence vectors.
fn finish(
    export: &Export,
    opts: &RangesOptions,
    mut w: Work,
    ranges: Vec<RangeStats>,
    thread_diagnostics: Vec<ThreadDiagnostics>,
    high_cardinality_labels: Vec<HighCardinality>,
    detail: bool,
) -> Result<(RangesDoc, Detail)> {
    let mut notes = vec![
        "Nested labels overlap by construction: never add numbers of labels at different depths (see each label's `depths` and `parents`).".to_string(),
        "uncovered_host_time_ns is host time not covered by device work; it is NOT GPU idle (gpu_idle_within_kernel_span_ns is the device bubble).".to_string(),
        "kernel_busy_union_ns, kernel_span_ns and host_range_kernel_coverage_ns cover all device work (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE); only kernel_work_ns is kernels alone.".to_string(),
        "Ranges still open when the capture ended are either absent from the export (nsys ended the application at cudaProfilerStop) or exported with their end clipped to the end of the capture (--capture-range-end=stop).".to_string(),
    ];
    if !schema::DEVICE_TABLES.iter().any(|t| w.present(t)) {
        notes.push("No CUDA device table in this export (a capture without CUDA): no device work is attributed; that is a result, not an error.".to_string());
    } else if !w.present(schema::RUNTIME) {
        notes.push(
            "No CUPTI_ACTIVITY_KIND_RUNTIME table: device work cannot be joined to ranges, all of it is unattributed."
                .to_string(),
        );
    }
    let graph_mode = export.graph_trace_mode()?.is_some_and(|m| m.mode == "graph");
    // an empty GRAPH_TRACE table is what `nsys export --lazy=false` writes for every capture: not graph level
    if w.present(schema::GRAPH_TRACE) && export.count_rows(schema::GRAPH_TRACE)? > 0 {
        notes.push("CUDA graphs were traced at graph level: each replay is one opaque GRAPH_TRACE row (counted in graph_traces, not kernels).".to_string());
    } else if graph_mode {
        notes.push("CUDA graphs were traced at graph level (META_DATA_CAPTURE CUDA_GRAPH_TRACE_OPTIONS:MODE = Graph) and the export has no GRAPH_TRACE table: graph replays left no GPU row at all (seen with nsys 2023.4), so their device work is invisible here. Capture with --cuda-graph-trace=node.".to_string());
    }
    let unmapped = thread_diagnostics.iter().filter(|t| t.mapping == "unmapped").count();
    if unmapped > 0 {
        notes.push(format!("{unmapped} thread(s) with kept ranges map to no process: their runtime calls are counted, no device work is attributed to them (see thread_diagnostics)."));
    }
    let fallback = thread_diagnostics.iter().filter(|t| t.mapping == "device_namespace_fallback").count();
    if fallback > 0 {
        notes.push(format!("{fallback} thread(s) belong to a process missing from PROCESSES (nsys omits traced fork children) and were mapped through the device tables' globalPid (mapping = device_namespace_fallback)."));
    }
    let (kernels_total, kernels_attr, kernel_work_total, kernel_work_attr) =
        (w.kernels_total, w.kernels_attr, w.kernel_work_total, w.kernel_work_attr);
    if kernel_work_total == i64::MAX {
        return Err(Error::input(format!(
            "{}: the KERNEL rows' total duration overflows 64-bit nanoseconds: the export's timestamps are not real; nothing was written",
            export.name()
        )));
    }
    if w.ambiguous_rows > 0 {
        notes.push(format!("{} device rows have a (globalPid, correlationId) that more than one CUPTI_ACTIVITY_KIND_RUNTIME call shares: the join is ambiguous, so they are attributed to no range (totals.device_rows_ambiguous), never to several.", w.ambiguous_rows));
    }
    if kernels_total > kernels_attr {
        notes.push(format!(
            "{} of {} KERNEL rows ({} ns of {} ns) are not attributed to any kept range: reported in totals, never dropped.",
            kernels_total - kernels_attr,
            kernels_total,
            kernel_work_total - kernel_work_attr,
            kernel_work_total
        ));
    }
    if w.skipped.unlabeled + w.skipped.open_or_inverted > 0 {
        notes.push(format!(
            "Skipped NVTX range rows: {} without a message, {} with a NULL or inverted interval.",
            w.skipped.unlabeled, w.skipped.open_or_inverted
        ));
    }
    if w.skipped.closed_by_capture_end > 0 {
        notes.push(truncated_note(w.skipped.closed_by_capture_end, &w.truncated));
    }
    if let Some(s) = crate::export::describe_skips(&w.row_skips) {
        notes.push(format!("Skipped rows with a NULL or inverted interval (never summed, never attributed): {s}."));
    }
    if let Some((ws, we)) = opts.window {
        notes.push(format!("--window {ws}:{we}: only occurrences lying inside it were kept (start >= {ws} and end <= {we}); totals and per_device still cover the whole capture."));
    }
    if progress_on() {
        eprintln!();
    }

    let (schema, tool) = RangesDoc::header();
    let size = std::fs::metadata(export.path()).map(|m| m.len()).unwrap_or(0);
    let doc = RangesDoc {
        schema,
        tool,
        source: RangesSource {
            path: export.name(),
            size,
            range_prefix: opts.range_prefix.clone(),
            nsys_version: export.nsys_version()?,
            kind: "sqlite".into(),
            exported_with: None,
            window: opts.window.map(|(start, end)| TimeWindow { start, end }),
            capture: Some(crate::export::capture_info(export)?),
        },
        tables_present: w.tables_present.clone(),
        ranges,
        thread_diagnostics,
        totals: Totals {
            per_device: std::mem::take(&mut w.per_device),
            kernels_total,
            kernel_work_total_ns: kernel_work_total,
            kernels_attributed: kernels_attr,
            kernel_work_attributed_ns: kernel_work_attr,
            kernels_unattributed: kernels_total - kernels_attr,
            kernel_work_unattributed_ns: kernel_work_total - kernel_work_attr,
            device_rows_ambiguous: w.ambiguous_rows,
        },
        skipped: w.skipped,
        truncated_ranges: std::mem::take(&mut w.truncated),
        skipped_rows: std::mem::take(&mut w.row_skips),
        high_cardinality_labels,
        folded: w.folded.take(),
        notes,
        iterations: None,
    };
    if !detail {
        return Ok((doc, None));
    }
    let Work { occ, label_names, metrics, counts, runtime_calls, syncs, slices, thread_of, .. } = w;
    let label_names = occurrences::shared_labels(&label_names);
    let occurrences: Vec<Occurrence> = occ
        .iter()
        .zip(&thread_of)
        .map(|(o, &th)| Occurrence {
            label: label_names[o.label as usize].clone(),
            global_tid: slices[th as usize].0,
            start: o.start,
            end: o.end,
            event_type: o.event_type as i64,
            domain_id: (o.domain_id != 0).then_some(o.domain_id),
            depth: o.depth,
            parent: if o.parent == u32::MAX { None } else { Some(o.parent as usize) },
        })
        .collect();
    let metrics: Vec<OccurrenceMetrics> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (sync_calls, sync_ns) = syncs.totals(i);
            let n = &counts[i];
            OccurrenceMetrics {
                runtime_calls: runtime_calls[i],
                kernels: n.kernels,
                memcpys: n.memcpys,
                memsets: n.memsets,
                graph_traces: n.graph_traces,
                kernel_work_ns: n.kernel_work_ns,
                busy_ns: m.busy_ns,
                span_ns: m.span_ns(),
                coverage_ns: m.coverage_ns,
                first_device_start: m.has_device().then_some(m.first),
                last_device_end: m.has_device().then_some(m.cur_e),
                sync_calls,
                sync_ns,
                sync: syncs.of(i).collect(),
            }
        })
        .collect();
    Ok((doc, Some((occurrences, metrics))))
}

fn progress_on() -> bool {
    PROGRESS.load(Ordering::Relaxed)
}

fn overlap(a: i64, b: i64, c: i64, d: i64) -> i64 {
    (b.min(d) - a.max(c)).max(0)
}

/// Replace each run of ASCII digits with `#`.
pub fn digits_to_hash(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    let mut in_digits = false;
    for ch in label.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(ch);
            in_digits = false;
        }
    }
    out
}

/// The contract's `high_cardinality_labels` of a set of labels: distinct labels grouped by
/// [`digits_to_hash`]; every group of two or more labels, sorted by pattern (used by `nvtx-readiness`).
pub fn high_cardinality<'a>(labels: impl IntoIterator<Item = &'a str>) -> Vec<HighCardinality> {
    let distinct: std::collections::BTreeSet<&str> = labels.into_iter().collect();
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for label in distinct {
        *groups.entry(digits_to_hash(label)).or_default() += 1;
    }
    groups.into_iter().filter(|(_, c)| *c >= 2).map(|(pattern, labels)| HighCardinality { pattern, labels }).collect()
}

/// The ranges document of an open export, without the per-occurrence vectors [`analyze`] keeps (appended by
/// H7 for `report` and `capture-compare`, which need the document only: it bounds their memory).
pub fn analyze_doc(export: &Export, opts: &RangesOptions) -> Result<RangesDoc> {
    Ok(analyze_impl(export, opts, false, false)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correlated_row_is_16_bytes() {
        assert_eq!(std::mem::size_of::<PackedCorrelatedRow>(), 16);
    }

    /// Packed rows give back what was pushed, rows of 2^32 - 1 ns or more included (their end kept apart), and
    /// sort as the rows themselves sorted stably by `(start, end)`, with and without long rows.
    #[test]
    fn correlated_rows_keep_long_ends_and_sort_stably() {
        let row = |start: i64, len: i64, kind: DeviceKind, device: u32| CorrelatedDeviceRow {
            start,
            end: start + len,
            kind,
            device,
        };
        let long = u32::MAX as i64;
        let short = vec![
            row(50, 10, DeviceKind::Kernel, 0),
            row(10, 5, DeviceKind::Memcpy, 3),
            row(10, 5, DeviceKind::Kernel, 1),
            row(10, 2, DeviceKind::GraphTrace, (1 << 30) - 1),
            row(-7, 0, DeviceKind::Memset, 2),
        ];
        let mut with_long = short.clone();
        with_long.insert(1, row(10, long, DeviceKind::Kernel, 4));
        with_long.insert(3, row(10, long - 1, DeviceKind::Memcpy, 5));
        with_long.push(row(-100, 1 << 40, DeviceKind::GraphTrace, 6));
        for rows in [short, with_long] {
            let mut packed = CorrelatedDeviceRows::default();
            rows.iter().for_each(|&r| packed.push(r));
            assert_eq!(packed.iter().collect::<Vec<_>>(), rows);
            assert_eq!(packed.len(), rows.len());
            let mut sorted = rows.clone();
            sorted.sort_by_key(|d| (d.start, d.end));
            packed.sort();
            assert_eq!(packed.iter().collect::<Vec<_>>(), sorted);
        }
    }

    #[test]
    fn sync_api_names_normalise() {
        assert_eq!(normalize_sync_api("cudaStreamSynchronize_v3020"), Some("cudaStreamSynchronize"));
        assert_eq!(normalize_sync_api("cudaMemcpy_ptds_v7000"), Some("cudaMemcpy"));
        assert_eq!(normalize_sync_api("cudaMemcpyAsync_v3020"), None);
        assert_eq!(normalize_sync_api("cudaMemcpy2D_v3020"), Some("cudaMemcpy2D"));
        assert_eq!(normalize_sync_api("cuCtxSynchronize"), Some("cuCtxSynchronize"));
        assert_eq!(normalize_sync_api("cudaStreamQuery_ptsz"), Some("cudaStreamQuery"));
        assert_eq!(normalize_sync_api("cudaLaunchKernel_v7000"), None);
        // `_v` without a digit is not a version suffix
        assert_eq!(normalize_sync_api("cudaMemset_vx"), None);
        assert_eq!(normalize_sync_api(""), None);
    }

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("10:20").unwrap(), (10, 20));
        assert_eq!(parse_window("-5:-1").unwrap(), (-5, -1));
        assert!(parse_window("5:1").is_err());
        assert!(parse_window("5").is_err());
        assert!(parse_window("a:b").is_err());
    }

    #[test]
    fn chains_intern_by_content() {
        let mut c = Chains::new();
        let (a, b) = (c.intern(&[1, 2, 3]), c.intern(&[1, 2]));
        assert_ne!(a, b);
        assert_eq!(c.intern(&[1, 2, 3]), a);
        assert_eq!(c.intern(&[1, 2]), b);
        // many chains: the table grows and still finds each by its content
        let ids: Vec<u32> = (0..5000u32).map(|i| c.intern(&[i, i + 7])).collect();
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(c.get(id), &[i as u32, i as u32 + 7]);
            assert_eq!(c.intern(&[i as u32, i as u32 + 7]), id);
        }
        c.freeze();
        assert_eq!(c.get(a), &[1, 2, 3]);
    }

    #[test]
    fn tags_are_shared_by_chain_and_device() {
        let mut t = Tags::new(3);
        let first = t.shared(1, 0);
        assert_eq!(t.shared(1, 0), first);
        // the same chain on another device: its own shared tag, found again
        let other = t.shared(1, 5);
        assert_ne!(other, first);
        assert_eq!(t.shared(1, 5), other);
        assert_eq!(t.shared(1, 0), first);
        // no chain (unattributed rows) has a slot too
        let none = t.shared(u32::MAX, 0);
        assert_eq!(t.shared(u32::MAX, 0), none);
        // a long row's tag is its own, holding its end
        let long = t.own(Tag { chain: 2, dev: 0, end: 99 });
        assert_ne!(long, t.shared(2, 0));
        for (id, (chain, dev)) in [(first, (1, 0)), (other, (1, 5)), (none, (u32::MAX, 0))] {
            let tag = t.tags[id as usize];
            assert_eq!((tag.chain, tag.dev), (chain, dev));
        }
        assert_eq!(t.tags[long as usize].end, 99);
    }

    #[test]
    fn sync_table_gives_each_occurrence_its_apis_in_order() {
        let mut hits = SyncHits::default();
        let st = |calls, total_ns| SyncStat { calls, total_ns };
        hits.insert(2 << 8 | 5, st(1, 10));
        hits.insert(2 << 8 | 1, st(2, 30));
        hits.insert(4 << 8, st(1, i64::MAX));
        hits.insert(4 << 8 | 3, st(1, 5));
        let mut t = SyncTable::new(hits);
        t.index(6);
        assert_eq!(t.of(2).collect::<Vec<_>>(), vec![(1, st(2, 30)), (5, st(1, 10))]);
        assert_eq!(t.totals(2), (3, 40));
        assert_eq!(t.of(3).count(), 0);
        assert_eq!(t.totals(0), (0, 0));
        // saturating, like each API's sum
        assert_eq!(t.totals(4), (2, i64::MAX));
        assert_eq!(t.of(9).count(), 0);
    }

    #[test]
    fn digit_runs_collapse() {
        assert_eq!(digits_to_hash("vibeserve.request.12"), "vibeserve.request.#");
        assert_eq!(digits_to_hash("a1b22c"), "a#b#c");
    }
}
