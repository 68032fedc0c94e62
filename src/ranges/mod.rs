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
//! record, sorted by start (already sorted in nsys exports, so the sort is a check), and swept once to merge
//! per-occurrence and per-device interval unions incrementally.

mod table;
mod tree;

pub use table::render_table;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::types::ValueRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::{ns_of, pid_of, tid_of, Export};

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
}

/// Parse `START:END` (integers in ns, may be negative, `START <= END`).
pub fn parse_window(s: &str) -> Result<(i64, i64)> {
    let bad = || Error::usage(format!("--window {s:?}: expected START:END in ns (integers, START <= END)")).with_arg("--window");
    // the separator is the first ':' that is not at position 0 (a leading '-' is a sign, never ':')
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let a: i64 = a.trim().parse().map_err(|_| bad())?;
    let b: i64 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// One kept NVTX range occurrence (after label resolution and prefix/window filtering).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    /// The label: the message, prefixed with `DOMAIN:` for a named NVTX domain.
    pub label: String,
    /// The thread that opened it.
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// 59 push/pop, 60 start/end.
    pub event_type: i64,
    /// `NVTX_EVENTS.domainId` (None when NULL or the column is absent).
    pub domain_id: Option<i64>,
    /// Number of kept occurrences on the same thread enclosing it (0 = outermost).
    pub depth: u32,
    /// Index (into the same Vec) of the immediately enclosing kept occurrence.
    pub parent: Option<usize>,
}

/// Rows of `NVTX_EVENTS` with eventType 59/60 that are not occurrences (counted before any prefix/window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Skipped {
    /// No message: `textId` without a string, or both `textId` and `text` NULL.
    pub unlabeled: u64,
    /// `start` or `end` NULL, or `end < start` (counted only here when also unlabeled).
    pub open_or_inverted: u64,
}

/// The kept occurrences, sorted by `(global_tid, start, end descending, label)`, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct LoadedOccurrences {
    pub occurrences: Vec<Occurrence>,
    pub skipped: Skipped,
    /// 59/60 rows seen (kept + skipped + filtered out by prefix/window).
    pub range_rows: u64,
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

// A small, fast hasher for integer keys (FxHash).
#[derive(Default, Clone, Copy)]
struct Fx(u64);
const FX_K: u64 = 0x517c_c1b7_2722_0a95;
impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(FX_K);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(FX_K);
    }
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;
type FxSet<K> = HashSet<K, BuildHasherDefault<Fx>>;

/// Read column `i` as an optional integer; any other type is an input error naming table and column.
fn int_col(export: &Export, row: &rusqlite::Row, i: usize, table: &str, col: &str) -> Result<Option<i64>> {
    match row.get_ref(i).map_err(export.sql_err(table))? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(v) => Ok(Some(v)),
        other => Err(Error::input(format!(
            "{}: schema mismatch: {table}.{col} holds a {} value, not the INTEGER nsys writes",
            export.name(),
            type_name(other)
        ))),
    }
}

fn text_col(export: &Export, row: &rusqlite::Row, i: usize, table: &str, col: &str) -> Result<Option<String>> {
    match row.get_ref(i).map_err(export.sql_err(table))? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(t) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
        other => Err(Error::input(format!(
            "{}: schema mismatch: {table}.{col} holds a {} value, not the TEXT nsys writes",
            export.name(),
            type_name(other)
        ))),
    }
}

fn type_name(v: ValueRef) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}

/// Read `StringIds` values for `ids` (one scan of the table).
fn strings_for(export: &Export, ids: &FxSet<i64>) -> Result<FxMap<i64, String>> {
    let mut out = FxMap::default();
    if ids.is_empty() {
        return Ok(out);
    }
    let t = export.require("StringIds", &["id", "value"])?;
    let sql = format!("SELECT id, value FROM \"{}\"", t.name);
    let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err("StringIds"))?;
    let mut rows = stmt.query([]).map_err(export.sql_err("StringIds"))?;
    while let Some(row) = rows.next().map_err(export.sql_err("StringIds"))? {
        let Some(id) = int_col(export, row, 0, "StringIds", "id")? else { continue };
        if ids.contains(&id) {
            if let Some(v) = text_col(export, row, 1, "StringIds", "value")? {
                out.insert(id, v);
            }
        }
    }
    Ok(out)
}

struct RawRange {
    start: i64,
    end: i64,
    event_type: i64,
    gtid: i64,
    text_id: Option<i64>,
    text: Option<String>,
    domain: Option<i64>,
}

/// The kept NVTX range occurrences of an export, with depth and parent (see the module docs).
pub fn load_occurrences(export: &Export, opts: &RangesOptions) -> Result<LoadedOccurrences> {
    export.require("NVTX_EVENTS", &["start", "end", "eventType", "text", "textId", "globalTid"])?;
    export.require("StringIds", &["id", "value"])?;
    let t = export.table("NVTX_EVENTS").expect("checked");
    let has_domain = t.has_column("domainId");
    let sql = format!(
        "SELECT start, end, eventType, text, textId, globalTid, {} FROM \"{}\" WHERE eventType IN (59, 60, 75)",
        if has_domain { "domainId" } else { "NULL" },
        t.name
    );
    let tbl = "NVTX_EVENTS";
    let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err(tbl))?;
    let mut rows = stmt.query([]).map_err(export.sql_err(tbl))?;
    let mut raw = Vec::new();
    // (NS(globalTid), domainId) → (textId, text) of the eventType 75 row naming it
    let mut domain_rows: Vec<(i64, i64, Option<i64>, Option<String>)> = Vec::new();
    let mut skipped = Skipped::default();
    let mut range_rows = 0u64;
    while let Some(row) = rows.next().map_err(export.sql_err(tbl))? {
        let et = int_col(export, row, 2, tbl, "eventType")?.unwrap_or(0);
        let start = int_col(export, row, 0, tbl, "start")?;
        let end = int_col(export, row, 1, tbl, "end")?;
        let text = text_col(export, row, 3, tbl, "text")?;
        let text_id = int_col(export, row, 4, tbl, "textId")?;
        let gtid = int_col(export, row, 5, tbl, "globalTid")?;
        let domain = int_col(export, row, 6, tbl, "domainId")?.filter(|&d| d != 0);
        if et == 75 {
            if let (Some(g), Some(d)) = (gtid, domain) {
                domain_rows.push((ns_of(g), d, text_id, text));
            }
            continue;
        }
        range_rows += 1;
        let (Some(start), Some(end)) = (start, end) else {
            skipped.open_or_inverted += 1;
            continue;
        };
        if end < start {
            skipped.open_or_inverted += 1;
            continue;
        }
        if text_id.is_none() && text.is_none() {
            skipped.unlabeled += 1;
            continue;
        }
        let Some(gtid) = gtid else {
            return Err(Error::input(format!(
                "{}: NVTX_EVENTS row with start {start}: globalTid is NULL (the thread of a range is required)",
                export.name()
            )));
        };
        raw.push(RawRange { start, end, event_type: et, gtid, text_id, text, domain });
    }
    drop(rows);
    drop(stmt);

    let mut ids: FxSet<i64> = raw.iter().filter_map(|r| r.text_id).collect();
    ids.extend(domain_rows.iter().filter_map(|d| d.2));
    let strings = strings_for(export, &ids)?;
    let message = |text_id: Option<i64>, text: &Option<String>| -> Option<String> {
        match text_id {
            Some(id) => strings.get(&id).cloned(),
            None => text.clone(),
        }
    };
    let mut domains: FxMap<(i64, i64), String> = FxMap::default();
    for (ns, d, tid, text) in &domain_rows {
        if let Some(name) = message(*tid, text) {
            domains.insert((*ns, *d), name);
        }
    }

    let mut occ = Vec::with_capacity(raw.len());
    for r in raw {
        let Some(msg) = message(r.text_id, &r.text) else {
            skipped.unlabeled += 1;
            continue;
        };
        let label = match r.domain.and_then(|d| domains.get(&(ns_of(r.gtid), d))) {
            Some(dn) => format!("{dn}:{msg}"),
            None => msg,
        };
        if let Some(p) = &opts.range_prefix {
            if !label.starts_with(p.as_str()) {
                continue;
            }
        }
        if let Some((ws, we)) = opts.window {
            if r.start < ws || r.end > we {
                continue;
            }
        }
        occ.push(Occurrence {
            label,
            global_tid: r.gtid,
            start: r.start,
            end: r.end,
            event_type: r.event_type,
            domain_id: r.domain,
            depth: 0,
            parent: None,
        });
    }
    occ.sort_unstable_by(|a, b| {
        (a.global_tid, a.start, std::cmp::Reverse(a.end), a.label.as_bytes())
            .cmp(&(b.global_tid, b.start, std::cmp::Reverse(b.end), b.label.as_bytes()))
            .then(a.event_type.cmp(&b.event_type))
    });
    let ends: Vec<i64> = occ.iter().map(|o| o.end).collect();
    let tree = MaxTree::new(&ends);
    nest(&mut occ, &tree);
    Ok(LoadedOccurrences { occurrences: occ, skipped, range_rows })
}

/// Thread slices `[lo, hi)` of the sorted occurrences.
fn thread_slices(occ: &[Occurrence]) -> Vec<(i64, usize, usize)> {
    let mut out = Vec::new();
    let mut lo = 0;
    while lo < occ.len() {
        let g = occ[lo].global_tid;
        let mut hi = lo + 1;
        while hi < occ.len() && occ[hi].global_tid == g {
            hi += 1;
        }
        out.push((g, lo, hi));
        lo = hi;
    }
    out
}

/// Depth and parent of every occurrence (sorted by thread, start, end descending, label).
fn nest(occ: &mut [Occurrence], tree: &MaxTree) {
    for (_, lo, hi) in thread_slices(occ) {
        // rank ends for a Fenwick tree: depth(i) = #{j < i in the slice: end_j >= end_i} + identical twins after i
        let mut ends: Vec<i64> = occ[lo..hi].iter().map(|o| o.end).collect();
        ends.sort_unstable();
        ends.dedup();
        let m = ends.len();
        let mut fen = vec![0u32; m + 1];
        let mut inserted = 0u32;
        let mut i = lo;
        while i < hi {
            // the run of identical intervals [i, k)
            let mut k = i + 1;
            while k < hi && occ[k].start == occ[i].start && occ[k].end == occ[i].end {
                k += 1;
            }
            let rank = ends.partition_point(|&e| e < occ[i].end); // number of distinct ends < end_i
            // earlier ones with end < end_i
            let mut less = 0u32;
            let mut r = rank;
            while r > 0 {
                less += fen[r];
                r &= r - 1;
            }
            let before_ge = inserted - less;
            let run = k - i;
            let outer = if run == 1 { tree.rightmost_ge(lo, i, occ[i].end) } else { None };
            for (p, j) in (i..k).enumerate() {
                occ[j].depth = before_ge + (run - 1) as u32;
                occ[j].parent = if run > 1 {
                    // its identical twins enclose it: the smallest label among the others
                    Some(if p == 0 { i + 1 } else { i })
                } else {
                    // the run of the enclosing one: its first element has the smallest label
                    outer.map(|o| {
                        let mut f = o;
                        while f > lo && occ[f - 1].start == occ[o].start && occ[f - 1].end == occ[o].end {
                            f -= 1;
                        }
                        f
                    })
                };
            }
            for _ in i..k {
                let mut r = rank + 1;
                while r <= m {
                    fen[r] += 1;
                    r += r & r.wrapping_neg();
                }
                inserted += 1;
            }
            i = k;
        }
    }
}

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
    /// Kept labels grouped by replacing each run of digits with `#`; groups of two or more labels.
    pub high_cardinality_labels: Vec<HighCardinality>,
    pub notes: Vec<String>,
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
    pub window: Option<Window>,
    /// When and on what the capture was taken (export metadata: session start, GPUs, driver, duration);
    /// bundle-merge copies `capture.captured_at` to `kernel_profile.captured_at`.
    #[serde(default)]
    pub capture: Option<crate::export::CaptureInfo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Window {
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
    /// Per API (index into [`SYNC_APIS`]): calls and total ns.
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
    ("CUPTI_ACTIVITY_KIND_RUNTIME", &["start", "end", "globalTid", "correlationId", "nameId"]),
    ("CUPTI_ACTIVITY_KIND_KERNEL", &["start", "end", "globalPid", "correlationId", "deviceId"]),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", &["start", "end", "globalPid", "correlationId", "deviceId"]),
    ("CUPTI_ACTIVITY_KIND_MEMSET", &["start", "end", "globalPid", "correlationId", "deviceId"]),
    ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", &["start", "end", "globalPid", "correlationId", "deviceId"]),
    ("PROCESSES", &["globalPid", "pid", "name"]),
    ("ThreadNames", &["nameId", "globalTid"]),
];

const DEVICE_TABLES: [&str; 4] = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
];

/// Open the capture (an `.nsys-rep` is exported with `nsys`, default `NSYS_BIN`/PATH, into a temporary folder)
/// and analyse it.
pub fn run(path: &Path, opts: &RangesOptions, nsys: Option<&Path>) -> Result<RangesDoc> {
    let cap = crate::export::open_capture(path, nsys)?;
    let (doc, _) = analyze_impl(&cap.export, opts, false)?;
    let mut a = Analysis { doc, occurrences: Vec::new(), metrics: Vec::new() };
    a.doc.source.path = cap.source.path.clone();
    a.doc.source.size = cap.source.size;
    a.doc.source.kind = cap.source.kind.clone();
    a.doc.source.exported_with = cap.source.exported_with.clone();
    if cap.source.kind == "nsys-rep" {
        a.doc.notes.push(format!(
            "{} is a report: it was exported with {} into a temporary folder (deleted afterwards), never next to it",
            cap.source.path,
            cap.source.exported_with.as_deref().unwrap_or("nsys")
        ));
    }
    Ok(a.doc)
}


/// Interned occurrence chains (ascending occurrence indices) in one arena. Occurrence indices ascend with
/// the thread, so a chain's distinct threads are the changes of `thread_of` along it: no per-chain thread list.
struct Chains {
    map: FxMap<Box<[u32]>, u32>,
    offs: Vec<usize>,
    data: Vec<u32>,
}

impl Chains {
    fn new() -> Chains {
        Chains { map: FxMap::default(), offs: vec![0], data: Vec::new() }
    }
    fn get(&self, id: u32) -> &[u32] {
        &self.data[self.offs[id as usize]..self.offs[id as usize + 1]]
    }
    fn intern(&mut self, occs: &[u32]) -> u32 {
        if let Some(&id) = self.map.get(occs) {
            return id;
        }
        let id = (self.offs.len() - 1) as u32;
        self.map.insert(occs.into(), id);
        self.data.extend_from_slice(occs);
        self.offs.push(self.data.len());
        id
    }
}

/// An occurrence as kept during the analysis: the label is an id into the label table (56 bytes, no heap).
#[derive(Clone, Copy)]
struct COcc {
    global_tid: i64,
    start: i64,
    end: i64,
    domain_id: Option<i64>,
    label: u32,
    depth: u32,
    /// u32::MAX when none
    parent: u32,
    event_type: i64,
}

/// Per-occurrence metrics as kept during the analysis. The current merged device interval doubles as
/// `last_device_end` (rows are swept by start, so the last merged interval ends last) and `first` is the start of
/// the first one (`i64::MAX` while D is empty). Sync statistics live aside, only for occurrences that have some.
#[derive(Clone, Copy)]
struct CMet {
    runtime_calls: u64,
    kernels: u64,
    memcpys: u64,
    memsets: u64,
    graph_traces: u64,
    kernel_work_ns: i64,
    busy_ns: i64,
    coverage_ns: i64,
    first: i64,
    cur_s: i64,
    cur_e: i64,
}

impl CMet {
    const EMPTY: CMet = CMet {
        runtime_calls: 0,
        kernels: 0,
        memcpys: 0,
        memsets: 0,
        graph_traces: 0,
        kernel_work_ns: 0,
        busy_ns: 0,
        coverage_ns: 0,
        first: i64::MAX,
        cur_s: 0,
        cur_e: 0,
    };
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
    fn device_rows(&self) -> u64 {
        self.kernels + self.memcpys + self.memsets + self.graph_traces
    }
}

/// Blocking sync calls of one occurrence: (calls, ns, per API).
#[derive(Default)]
struct OccSync {
    calls: u64,
    ns: i64,
    per_api: Vec<(u8, SyncStat)>,
}

/// Device row during the sweep: 16 bytes. `tag` indexes `(chain, device index, end of a long row)`; a row
/// lasting `u32::MAX` ns or more has `dur == u32::MAX` and its own tag holding its end.
#[derive(Clone, Copy)]
struct DevRow {
    start: i64,
    dur: u32,
    tag: u32,
}

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
    let (doc, detail) = analyze_impl(export, opts, true)?;
    let (occurrences, metrics) = detail.expect("asked for");
    Ok(Analysis { doc, occurrences, metrics })
}

type Detail = Option<(Vec<Occurrence>, Vec<OccurrenceMetrics>)>;

/// The analysis; the public per-occurrence vectors are built only when `detail` is asked for.
fn analyze_impl(export: &Export, opts: &RangesOptions, detail: bool) -> Result<(RangesDoc, Detail)> {
    // Validate every table first: a schema mismatch is an error before any work, never a partial report.
    export.require("NVTX_EVENTS", &["start", "end", "eventType", "text", "textId", "globalTid"])?;
    export.require("StringIds", &["id", "value"])?;
    let mut tables_present = Vec::new();
    for (t, cols) in OPTIONAL_TABLES {
        if export.optional(t, cols)?.is_some() {
            tables_present.push(t.to_string());
        }
    }
    let present = |t: &str| tables_present.iter().any(|p| p == t);

    progress("reading NVTX_EVENTS");
    let loaded = load_occurrences(export, opts)?;
    let slices = thread_slices(&loaded.occurrences);
    let n = loaded.occurrences.len();
    // labels as ids; the owned Strings are dropped before the big scans
    let mut label_names: Vec<String> = Vec::new();
    let occ: Vec<COcc> = {
        let mut ids: FxMap<String, u32> = FxMap::default();
        let mut out = Vec::with_capacity(n);
        for o in loaded.occurrences {
            let label = match ids.get(o.label.as_str()) {
                Some(&id) => id,
                None => {
                    let id = label_names.len() as u32;
                    label_names.push(o.label.clone());
                    ids.insert(o.label, id);
                    id
                }
            };
            out.push(COcc {
                global_tid: o.global_tid,
                start: o.start,
                end: o.end,
                domain_id: o.domain_id,
                label,
                depth: o.depth,
                parent: o.parent.map_or(u32::MAX, |p| p as u32),
                event_type: o.event_type,
            });
        }
        out
    };
    let mut thread_of = vec![0u32; n];
    let mut slice_of: FxMap<i64, (u32, usize, usize)> = FxMap::default();
    for (ti, &(g, lo, hi)) in slices.iter().enumerate() {
        for t in &mut thread_of[lo..hi] {
            *t = ti as u32;
        }
        slice_of.insert(g, (ti as u32, lo, hi));
    }
    let ends: Vec<i64> = occ.iter().map(|o| o.end).collect();
    let tree = MaxTree::new(&ends);
    drop(ends);

    let mut metrics = vec![CMet::EMPTY; n];
    let mut syncs: FxMap<u32, OccSync> = FxMap::default();
    let mut th_runtime = vec![0u64; slices.len()];
    let mut th_device = vec![0u64; slices.len()];

    // process (NS) → small index; (index, correlationId) → chain
    let mut proc_idx: FxMap<i64, u32> = FxMap::default();
    let mut corr: Vec<CorrEnt> = Vec::new();
    let mut corr_wide: FxMap<(i64, i64), u32> = FxMap::default();
    let mut chains = Chains::new();

    // ---- runtime calls
    if present("CUPTI_ACTIVITY_KIND_RUNTIME") && n > 0 {
        let tbl = "CUPTI_ACTIVITY_KIND_RUNTIME";
        // sync API name ids (one StringIds scan)
        let mut sync_ids: FxMap<i64, u8> = FxMap::default();
        {
            let t = export.table("StringIds").expect("checked");
            let sql = format!("SELECT id, value FROM \"{}\"", t.name);
            let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err("StringIds"))?;
            let mut rows = stmt.query([]).map_err(export.sql_err("StringIds"))?;
            while let Some(row) = rows.next().map_err(export.sql_err("StringIds"))? {
                let Some(id) = int_col(export, row, 0, "StringIds", "id")? else { continue };
                if let ValueRef::Text(v) = row.get_ref(1).map_err(export.sql_err("StringIds"))? {
                    if v.len() < 64 && (v.starts_with(b"cu")) {
                        if let Some(api) = std::str::from_utf8(v).ok().and_then(normalize_sync_api) {
                            let idx = SYNC_APIS.iter().position(|a| *a == api).unwrap() as u8;
                            sync_ids.insert(id, idx);
                        }
                    }
                }
            }
        }
        let t = export.table(tbl).expect("checked");
        let sql = format!("SELECT start, end, globalTid, correlationId, nameId FROM \"{}\"", t.name);
        let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err(tbl))?;
        // an upper bound, reserved once (untouched pages cost no memory): no copy while growing
        let h: Option<i64> =
            export.conn().query_row(&format!("SELECT max(rowid) FROM \"{}\"", t.name), [], |r| r.get(0)).unwrap_or(None);
        corr.reserve_exact(h.unwrap_or(0).clamp(0, 1 << 32) as usize);
        let mut rows = stmt.query([]).map_err(export.sql_err(tbl))?;
        let mut hits: Vec<u32> = Vec::with_capacity(16);
        let mut last_hits: Vec<u32> = Vec::new();
        let mut last_chain = u32::MAX;
        let mut last_ns = i64::MIN;
        let mut last_pidx = 0u32;
        let mut seen = 0u64;
        while let Some(row) = rows.next().map_err(export.sql_err(tbl))? {
            seen += 1;
            if seen & 0xF_FFFF == 0 {
                progress(&format!("{tbl}: {seen} rows"));
            }
            let Some(gtid) = int_col(export, row, 2, tbl, "globalTid")? else { continue };
            let Some(&(ti, lo, hi)) = slice_of.get(&gtid) else { continue };
            let Some(rs) = int_col(export, row, 0, tbl, "start")? else { continue };
            let cut = lo + occ[lo..hi].partition_point(|o| o.start <= rs);
            hits.clear();
            tree.collect_ge(lo, cut, rs, &mut hits);
            if hits.is_empty() {
                continue;
            }
            let re = int_col(export, row, 1, tbl, "end")?.unwrap_or(rs);
            let cid = int_col(export, row, 3, tbl, "correlationId")?;
            let name_id = int_col(export, row, 4, tbl, "nameId")?;
            th_runtime[ti as usize] += 1;
            let sync = name_id.and_then(|id| sync_ids.get(&id).copied());
            for &h in &hits {
                let m = &mut metrics[h as usize];
                m.runtime_calls += 1;
                if let Some(api) = sync {
                    let m = syncs.entry(h).or_default();
                    m.calls += 1;
                    m.ns += re - rs;
                    match m.per_api.iter_mut().find(|(a, _)| *a == api) {
                        Some((_, s)) => {
                            s.calls += 1;
                            s.total_ns += re - rs;
                        }
                        None => m.per_api.push((api, SyncStat { calls: 1, total_ns: re - rs })),
                    }
                }
            }
            let Some(cid) = cid else { continue };
            let chain = if hits == last_hits && last_chain != u32::MAX {
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
                continue;
            }
            let slot = corr_wide.entry((ns, cid)).or_insert(u32::MAX);
            if *slot == u32::MAX {
                *slot = chain;
            } else if *slot != chain {
                // the same (process, correlationId) on two runtime calls inside kept ranges: union of both
                let mut u: Vec<u32> = chains.get(*slot).iter().chain(chains.get(chain).iter()).copied().collect();
                u.sort_unstable();
                u.dedup();
                *slot = chains.intern(&u);
            }
        }
    }

    // sort the correlation entries by key; a key seen on several calls gets the union of their chains
    if !corr.windows(2).all(|w| { w[0].key } <= { w[1].key }) {
        corr.sort_unstable_by_key(|e| e.key);
    }
    {
        let len = corr.len();
        let (mut i, mut w) = (0, 0);
        while i < len {
            let key = corr[i].key;
            let mut ch = corr[i].chain;
            let mut j = i + 1;
            while j < len && { corr[j].key } == key {
                let other = corr[j].chain;
                if other != ch {
                    let mut u: Vec<u32> = chains.get(ch).iter().chain(chains.get(other).iter()).copied().collect();
                    u.sort_unstable();
                    u.dedup();
                    ch = chains.intern(&u);
                }
                j += 1;
            }
            corr[w] = CorrEnt { key, chain: ch };
            w += 1;
            i = j;
        }
        corr.truncate(w);
    }
    drop(tree);
    // the chain map is only needed to intern; the chains themselves stay
    chains.map = FxMap::default();
    chains.data.shrink_to_fit();
    chains.offs.shrink_to_fit();

    // ---- device rows
    let mut dev_ids: Vec<i64> = Vec::new();
    let mut dev_idx: FxMap<i64, u32> = FxMap::default();
    let mut device_pids: FxSet<i64> = FxSet::default();
    let mut rows_out: Vec<DevRow> = Vec::new();
    let mut tags: Vec<Tag> = Vec::new();
    let mut tag_idx: FxMap<(u32, u32), u32> = FxMap::default();
    let mut last_tag_key = (u32::MAX, u32::MAX);
    let mut last_tag = u32::MAX;
    let mut corr_hint = 0usize;
    let mut kernels_total = 0u64;
    let mut kernel_work_total = 0i64;
    let mut kernels_attr = 0u64;
    let mut kernel_work_attr = 0i64;
    // Size the record vector once, exactly, without a scan: max(rowid) is one b-tree descent per table (absent
    // for WITHOUT ROWID tables). Growing by doubling would hold two copies at the peak.
    let mut hint = 0usize;
    for tbl in DEVICE_TABLES.iter().filter(|t| present(t)) {
        let t = export.table(tbl).expect("checked");
        let h: Option<i64> =
            export.conn().query_row(&format!("SELECT max(rowid) FROM \"{}\"", t.name), [], |r| r.get(0)).unwrap_or(None);
        hint += h.unwrap_or(0).clamp(0, 1 << 32) as usize;
    }
    rows_out.reserve_exact(hint);
    for (kind, tbl) in DEVICE_TABLES.iter().enumerate() {
        if !present(tbl) {
            continue;
        }
        let t = export.table(tbl).expect("checked");
        let sql = format!("SELECT start, end, globalPid, correlationId, deviceId FROM \"{}\"", t.name);
        let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err(tbl))?;
        let mut rows = stmt.query([]).map_err(export.sql_err(tbl))?;
        let mut last_gpid = i64::MIN;
        let mut last_pidx: Option<u32> = None;
        let mut last_dev = i64::MIN;
        let mut last_di = 0u32;
        let mut seen = 0u64;
        while let Some(row) = rows.next().map_err(export.sql_err(tbl))? {
            seen += 1;
            if seen & 0xF_FFFF == 0 {
                progress(&format!("{tbl}: {seen} rows"));
            }
            let (Some(s), Some(e)) = (int_col(export, row, 0, tbl, "start")?, int_col(export, row, 1, tbl, "end")?) else {
                continue;
            };
            let e = e.max(s);
            let gpid = int_col(export, row, 2, tbl, "globalPid")?;
            let cid = int_col(export, row, 3, tbl, "correlationId")?;
            let dev = int_col(export, row, 4, tbl, "deviceId")?.unwrap_or(-1);
            if dev != last_dev {
                let next = dev_ids.len() as u32;
                last_di = *dev_idx.entry(dev).or_insert_with(|| {
                    dev_ids.push(dev);
                    next
                });
                last_dev = dev;
            }
            let mut chain = u32::MAX;
            if let Some(g) = gpid {
                if g != last_gpid {
                    device_pids.insert(g);
                    last_gpid = g;
                    last_pidx = proc_idx.get(&g).copied();
                }
                if let (Some(p), Some(c)) = (last_pidx, cid) {
                    if (0..=u32::MAX as i64).contains(&c) && p < (1 << 30) {
                        let k = ((p as u64) << 32) | c as u64;
                        // device rows come nearly in correlation order: try the last hit and its successor first
                        let at = if corr_hint < corr.len() && { corr[corr_hint].key } == k {
                            Some(corr_hint)
                        } else if corr_hint + 1 < corr.len() && { corr[corr_hint + 1].key } == k {
                            Some(corr_hint + 1)
                        } else {
                            let i = corr.partition_point(|e| { e.key } < k);
                            (i < corr.len() && { corr[i].key } == k).then_some(i)
                        };
                        if let Some(i) = at {
                            corr_hint = i;
                            chain = corr[i].chain;
                        }
                    } else if let Some(&ch) = corr_wide.get(&(g, c)) {
                        chain = ch;
                    }
                }
            }
            if kind == 0 {
                kernels_total += 1;
                kernel_work_total += e - s;
                if chain != u32::MAX {
                    kernels_attr += 1;
                    kernel_work_attr += e - s;
                }
            }
            if chain != u32::MAX {
                let mut prev = u32::MAX;
                for &o in chains.get(chain) {
                    let th = thread_of[o as usize];
                    if th != prev {
                        th_device[th as usize] += 1;
                        prev = th;
                    }
                }
                for &o in chains.get(chain).iter() {
                    let m = &mut metrics[o as usize];
                    match kind {
                        0 => {
                            m.kernels += 1;
                            m.kernel_work_ns += e - s;
                        }
                        1 => m.memcpys += 1,
                        2 => m.memsets += 1,
                        _ => m.graph_traces += 1,
                    }
                }
            }
            let d = e - s;
            let (dur, tag) = if d < u32::MAX as i64 {
                let key = (chain, last_di);
                if key != last_tag_key {
                    let next = tags.len() as u32;
                    last_tag = *tag_idx.entry(key).or_insert_with(|| {
                        tags.push(Tag { chain, dev: last_di, end: 0 });
                        next
                    });
                    last_tag_key = key;
                }
                (d as u32, last_tag)
            } else {
                tags.push(Tag { chain, dev: last_di, end: e });
                (u32::MAX, tags.len() as u32 - 1)
            };
            rows_out.push(DevRow { start: s, dur, tag });
        }
    }
    drop(corr);
    drop(corr_wide);
    progress("merging device intervals");
    if !rows_out.windows(2).all(|w| w[0].start <= w[1].start) {
        rows_out.sort_unstable_by_key(|r| r.start);
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
        .map(|&d| DeviceTotals { device_id: d, device_rows: 0, busy_union_ns: 0, first_start: i64::MAX, last_end: i64::MIN })
        .collect();
    for r in &rows_out {
        let tg = tags[r.tag as usize];
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
            let m = &mut metrics[o];
            if !m.has_device() {
                // rows come by start: the first one gives min(d.start)
                m.first = r.start;
                m.cur_s = r.start;
                m.cur_e = end;
            } else if r.start <= m.cur_e {
                m.cur_e = m.cur_e.max(end);
            } else {
                m.busy_ns += m.cur_e - m.cur_s;
                m.coverage_ns += overlap(m.cur_s, m.cur_e, occ[o].start, occ[o].end);
                m.cur_s = r.start;
                m.cur_e = end;
            }
        }
    }
    drop(rows_out);
    drop(tags);
    drop(tag_idx);
    for (di, c) in dcur.iter().enumerate() {
        if c.open {
            dtot[di].busy_union_ns += c.e - c.s;
        }
    }
    // close each occurrence's last merged interval; it ends last, so cur_e stays as max(d.end)
    for (o, m) in metrics.iter_mut().enumerate() {
        if m.has_device() {
            m.busy_ns += m.cur_e - m.cur_s;
            m.coverage_ns += overlap(m.cur_s, m.cur_e, occ[o].start, occ[o].end);
        }
    }
    let mut per_device: Vec<DeviceTotals> = dtot.into_iter().filter(|d| d.device_rows > 0).collect();
    per_device.sort_by_key(|d| d.device_id);
    progress("summarising");

    // ---- threads
    let processes: FxSet<i64> = if present("PROCESSES") {
        let t = export.table("PROCESSES").expect("checked");
        let sql = format!("SELECT globalPid FROM \"{}\"", t.name);
        let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err("PROCESSES"))?;
        let mut rows = stmt.query([]).map_err(export.sql_err("PROCESSES"))?;
        let mut s = FxSet::default();
        while let Some(row) = rows.next().map_err(export.sql_err("PROCESSES"))? {
            if let Some(g) = int_col(export, row, 0, "PROCESSES", "globalPid")? {
                s.insert(g);
            }
        }
        s
    } else {
        FxSet::default()
    };
    let mut thread_name_ids: FxMap<i64, i64> = FxMap::default();
    if present("ThreadNames") && !slices.is_empty() {
        let t = export.table("ThreadNames").expect("checked");
        let sql = format!("SELECT nameId, globalTid FROM \"{}\"", t.name);
        let mut stmt = export.conn().prepare(&sql).map_err(export.sql_err("ThreadNames"))?;
        let mut rows = stmt.query([]).map_err(export.sql_err("ThreadNames"))?;
        while let Some(row) = rows.next().map_err(export.sql_err("ThreadNames"))? {
            let (Some(nid), Some(g)) =
                (int_col(export, row, 0, "ThreadNames", "nameId")?, int_col(export, row, 1, "ThreadNames", "globalTid")?)
            else {
                continue;
            };
            if slice_of.contains_key(&g) {
                thread_name_ids.insert(g, nid); // the last row for the thread wins
            }
        }
    }
    let names = strings_for(export, &thread_name_ids.values().copied().collect())?;
    let mut thread_diagnostics = Vec::with_capacity(slices.len());
    for (ti, &(g, lo, hi)) in slices.iter().enumerate() {
        let ns = ns_of(g);
        let mapping = if processes.contains(&ns) {
            "processes"
        } else if device_pids.contains(&ns) {
            "device_namespace_fallback"
        } else {
            "unmapped"
        };
        let is_main = tid_of(g) == pid_of(g);
        let mut attention = Vec::new();
        if !is_main && th_device[ti] > 0 {
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
            runtime_calls: th_runtime[ti],
            device_rows_attributed: th_device[ti],
            attention,
        });
    }

    // ---- labels
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
            host_wall_time_ns: walls.iter().sum(),
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
        for &i in idxs {
            let m = &metrics[i];
            let o = &occ[i];
            let wall = o.end - o.start;
            if m.device_rows() > 0 {
                r.occurrences_with_device_work += 1;
            }
            r.runtime_calls += m.runtime_calls;
            r.kernels += m.kernels;
            r.memcpys += m.memcpys;
            r.memsets += m.memsets;
            r.graph_traces += m.graph_traces;
            r.kernel_work_ns += m.kernel_work_ns;
            r.host_range_kernel_coverage_ns += m.coverage_ns;
            r.kernel_busy_union_ns += m.busy_ns;
            r.kernel_span_ns += m.span_ns();
            r.gpu_idle_within_kernel_span_ns += m.span_ns() - m.busy_ns;
            r.uncovered_host_time_ns += (wall - m.coverage_ns).max(0);
            for (api, s) in syncs.get(&(i as u32)).map_or(&[][..], |s| &s.per_api[..]) {
                let e = r.sync.entry(SYNC_APIS[*api as usize].to_string()).or_default();
                e.calls += s.calls;
                e.total_ns += s.total_ns;
            }
            *r.depths.entry(o.depth).or_default() += 1;
            let parent = if o.parent == u32::MAX { String::new() } else { label_names[occ[o.parent as usize].label as usize].clone() };
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
    ranges.sort_by(|a, b| b.host_wall_time_ns.cmp(&a.host_wall_time_ns).then_with(|| a.label.as_bytes().cmp(b.label.as_bytes())));

    // ---- high-cardinality labels
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for label in by_label.keys() {
        *groups.entry(digits_to_hash(label)).or_default() += 1;
    }
    let high_cardinality_labels: Vec<HighCardinality> =
        groups.into_iter().filter(|(_, c)| *c >= 2).map(|(pattern, labels)| HighCardinality { pattern, labels }).collect();

    // ---- notes
    let mut notes = vec![
        "Nested labels overlap by construction: never add numbers of labels at different depths (see each label's `depths` and `parents`).".to_string(),
        "uncovered_host_time_ns is host time not covered by device work; it is NOT GPU idle (gpu_idle_within_kernel_span_ns is the device bubble).".to_string(),
        "kernel_busy_union_ns, kernel_span_ns and host_range_kernel_coverage_ns cover all device work (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE); only kernel_work_ns is kernels alone.".to_string(),
        "Ranges still open when the capture ended are either absent from the export (nsys ended the application at cudaProfilerStop) or exported with their end clipped to the end of the capture (--capture-range-end=stop).".to_string(),
    ];
    if !DEVICE_TABLES.iter().any(|t| present(t)) {
        notes.push("No CUDA device table in this export (a capture without CUDA): no device work is attributed; that is a result, not an error.".to_string());
    } else if !present("CUPTI_ACTIVITY_KIND_RUNTIME") {
        notes.push("No CUPTI_ACTIVITY_KIND_RUNTIME table: device work cannot be joined to ranges, all of it is unattributed.".to_string());
    }
    let graph_mode = export
        .name_values("META_DATA_CAPTURE")?
        .into_iter()
        .any(|(k, v)| k.ends_with("CUDA_GRAPH_TRACE_OPTIONS:MODE") && v.as_deref() == Some("Graph"));
    if present("CUPTI_ACTIVITY_KIND_GRAPH_TRACE") {
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
    if kernels_total > kernels_attr {
        notes.push(format!(
            "{} of {} KERNEL rows ({} ns of {} ns) are not attributed to any kept range: reported in totals, never dropped.",
            kernels_total - kernels_attr,
            kernels_total,
            kernel_work_total - kernel_work_attr,
            kernel_work_total
        ));
    }
    if loaded.skipped.unlabeled + loaded.skipped.open_or_inverted > 0 {
        notes.push(format!(
            "Skipped NVTX range rows: {} without a message, {} with a NULL or inverted interval.",
            loaded.skipped.unlabeled, loaded.skipped.open_or_inverted
        ));
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
            window: opts.window.map(|(start, end)| Window { start, end }),
            capture: Some(crate::export::capture_info(export)?),
        },
        tables_present: tables_present.clone(),
        ranges,
        thread_diagnostics,
        totals: Totals {
            per_device,
            kernels_total,
            kernel_work_total_ns: kernel_work_total,
            kernels_attributed: kernels_attr,
            kernel_work_attributed_ns: kernel_work_attr,
            kernels_unattributed: kernels_total - kernels_attr,
            kernel_work_unattributed_ns: kernel_work_total - kernel_work_attr,
        },
        skipped: loaded.skipped,
        high_cardinality_labels,
        notes,
    };
    if !detail {
        return Ok((doc, None));
    }
    drop(by_label);
    let occurrences: Vec<Occurrence> = occ
        .iter()
        .map(|o| Occurrence {
            label: label_names[o.label as usize].clone(),
            global_tid: o.global_tid,
            start: o.start,
            end: o.end,
            event_type: o.event_type,
            domain_id: o.domain_id,
            depth: o.depth,
            parent: if o.parent == u32::MAX { None } else { Some(o.parent as usize) },
        })
        .collect();
    let metrics: Vec<OccurrenceMetrics> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let s = syncs.remove(&(i as u32)).unwrap_or_default();
            OccurrenceMetrics {
                runtime_calls: m.runtime_calls,
                kernels: m.kernels,
                memcpys: m.memcpys,
                memsets: m.memsets,
                graph_traces: m.graph_traces,
                kernel_work_ns: m.kernel_work_ns,
                busy_ns: m.busy_ns,
                span_ns: m.span_ns(),
                coverage_ns: m.coverage_ns,
                first_device_start: m.has_device().then_some(m.first),
                last_device_end: m.has_device().then_some(m.cur_e),
                sync_calls: s.calls,
                sync_ns: s.ns,
                sync: s.per_api,
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn digit_runs_collapse() {
        assert_eq!(digits_to_hash("vibeserve.request.12"), "vibeserve.request.#");
        assert_eq!(digits_to_hash("a1b22c"), "a#b#c");
    }
}

/// The ranges document of an open export, without the per-occurrence vectors [`analyze`] keeps (appended by
/// H7 for `report` and `capture-compare`, which need the document only: it bounds their memory).
pub fn analyze_doc(export: &Export, opts: &RangesOptions) -> Result<RangesDoc> {
    Ok(analyze_impl(export, opts, false)?.0)
}
