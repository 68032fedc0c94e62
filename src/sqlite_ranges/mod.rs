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

mod aggregate;
mod captured;
mod detail;
mod device;
mod doc;
mod fold_read;
mod occurrences;
mod replay;
mod runtime;
mod scan;
mod slots;
mod table;
mod tree;

pub use occurrences::{
    keep_prefix, kept_under, load_occurrences, load_occurrences_framework_folded, LoadedOccurrences, Occurrence,
    Skipped,
};
use occurrences::{load_interned, thread_slices};
pub use table::render_table;

use aggregate::{aggregate, finish, map_threads};
pub use captured::*;
pub use detail::{OccurrenceRef, OccurrenceTable};
use device::{attribute_device_rows, DeviceRows};
pub use doc::*;
pub use fold_read::FrameworkFolds;
pub use replay::collect_preloaded;
use replay::{DeviceMarks, FirstPass, NamelessCall};
use runtime::join_runtime;
pub use scan::Preloaded;
use scan::{nvtx_table, run_scans};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::rows::{DeviceChunk, Keep, PackedDeviceRow};
use crate::export::schema::{self, cols, DeviceKind};
use crate::export::{ns_of, pid_of, tid_of, Export, RowSkips};

use slots::Slots;
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

/// Open the capture (an `.nsys-rep` is exported with `nsys`, default `NSYS_BIN`/PATH, into a temporary folder)
/// and analyse it.
pub fn run(path: &Path, opts: &RangesOptions, nsys: Option<&Path>) -> Result<SqliteRangesDoc> {
    let cap = crate::export::open_capture(path, nsys)?;
    document(&cap.export, &cap.source, opts)
}

/// The document [`run`] prints, of an export already open, `source` saying where it came from (what
/// `gate-check --ranges` writes from its own run: the same bytes).
pub fn document(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &RangesOptions,
) -> Result<SqliteRangesDoc> {
    document_impl(export, source, opts, false)
}

/// The analysis [`document`] describes, whose reads of the runtime and device tables also compute those tables'
/// timed-stats facts ([`Export::put_stats`]): `gate-check --ranges` (crate::pipeline::shared).
pub fn analyze_sharing_scans(export: &Export, opts: &RangesOptions) -> Result<SqliteRangesDoc> {
    Ok(analyze_impl(export, opts, false, true)?.0)
}

fn document_impl(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &RangesOptions,
    share: bool,
) -> Result<SqliteRangesDoc> {
    // the contract requires the table (its message says why a capture has none)
    export.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
    let (mut doc, _) = analyze_impl(export, opts, false, share)?;
    if let (Some(p), true) = (&opts.range_prefix, doc.ranges.is_empty()) {
        // a prefix that matches no label: name the families that exist (issue #41)
        let all = occurrences::load_occurrences(export, &RangesOptions::default())?;
        doc.notes.extend(crate::label_families::no_match_hint(p, all.occurrences.iter().map(|o| &*o.label)));
    }
    Ok(described(doc, source))
}

/// The document of an analysis as `sqlite-ranges` prints it: its source is the capture the user gave
/// (`source`), and a report exported into a temporary folder says so.
pub fn described(mut doc: SqliteRangesDoc, source: &crate::export::CaptureSource) -> SqliteRangesDoc {
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

/// The index of the thread slice (`(globalTid, lo, hi)`, contiguous and in order) holding occurrence `i`: a
/// search over the few threads instead of 4 bytes an occurrence (8 MB on 2 M op ranges).
fn slice_at(slices: &[(i64, usize, usize)], i: usize) -> u32 {
    (slices.partition_point(|s| s.1 <= i) - 1) as u32
}

/// Interned occurrence chains (ascending occurrence indices) in one arena. Occurrence indices ascend with
/// the thread, so a chain's distinct threads are the changes of [`slice_at`] along it: no per-chain thread list.
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
/// ([`slice_at`]), the domain an index into the domains seen ([`Domains`]) packed with the event type (32
/// bytes, no heap: 2 M op ranges hold 16 MB less than with the 8-byte `domainId` and a 4-byte event type).
#[derive(Clone, Copy)]
struct COcc {
    start: i64,
    end: i64,
    label: u32,
    depth: u32,
    /// u32::MAX when none
    parent: u32,
    /// The domain's index in [`Domains`] << 1, | 1 for a start/end range (60), 0 for push/pop (59).
    kind: u32,
}

impl COcc {
    /// 59 push/pop or 60 start/end (the only range event types the load keeps).
    fn event_type(&self) -> i32 {
        if self.kind & 1 == 1 {
            schema::nvtx::START_END as i32
        } else {
            schema::nvtx::PUSH_POP as i32
        }
    }

    /// `domainId`, 0 for none.
    fn domain_id(&self, domains: &Domains) -> i64 {
        domains.ids[(self.kind >> 1) as usize]
    }
}

/// The distinct `domainId`s of the kept occurrences, 0 (none) first: a capture has a few.
#[derive(Clone, Debug)]
struct Domains {
    ids: Vec<i64>,
    index: FxMap<i64, u32>,
}

impl Default for Domains {
    fn default() -> Domains {
        Domains { ids: vec![0], index: [(0, 0)].into_iter().collect() }
    }
}

impl Domains {
    /// [`COcc::kind`] of a range of `event_type` (59 or 60) in domain `domain_id` (0 for none).
    fn kind(&mut self, domain_id: i64, event_type: i32) -> u32 {
        let ids = &mut self.ids;
        let d = *self.index.entry(domain_id).or_insert_with(|| {
            ids.push(domain_id);
            ids.len() as u32 - 1
        });
        debug_assert!(
            d < 1 << 31
                && (event_type as i64 == schema::nvtx::PUSH_POP || event_type as i64 == schema::nvtx::START_END)
        );
        d << 1 | u32::from(event_type as i64 == schema::nvtx::START_END)
    }
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
/// ([`tag_rows`]), then of each occurrence ([`spread_counts`]). The counts are 32-bit (24 bytes, not 40: 15 MB on
/// emit_nvtx ×10's 0.93 M occurrences with device rows): a chain's or an occurrence's rows are distinct rows of
/// the capture, and a capture with more than `u32::MAX` device rows is refused before they are counted
/// ([`attribute_device_rows`]).
#[derive(Clone, Copy, Default)]
struct DevCounts {
    kernels: u32,
    memcpys: u32,
    memsets: u32,
    graph_traces: u32,
    kernel_work_ns: i64,
}

impl DevCounts {
    fn device_rows(&self) -> u64 {
        [self.kernels, self.memcpys, self.memsets, self.graph_traces].into_iter().map(u64::from).sum()
    }
    /// Sums of non-negative durations saturate the same in any grouping; the counts cannot wrap (no more rows
    /// than the capture's, checked).
    fn add(&mut self, o: &DevCounts) {
        self.kernels += o.kernels;
        self.memcpys += o.memcpys;
        self.memsets += o.memsets;
        self.graph_traces += o.graph_traces;
        self.kernel_work_ns = self.kernel_work_ns.saturating_add(o.kernel_work_ns);
    }
}

/// By occurrence, its device metrics ([`CMet`]) and row counts ([`DevCounts`]), 56 bytes kept only for the
/// occurrences with device rows, found through [`Slots`] (a bit an occurrence: a PyTorch op-level capture
/// attributes device rows to fewer than half of its ranges, 92 962 of emit_nvtx's 206 019). Made once the chains'
/// rows are counted ([`DevTable::of_chains`]), before the sweep fills the metrics; the counts are allocated by
/// [`spread_counts`], once the device rows are gone (the sweep is the analysis's peak).
#[derive(Clone, Default)]
struct DevTable {
    /// Occurrence → its index in `met` and `counts`, none without device rows.
    slot: Slots,
    met: Vec<CMet>,
    counts: Vec<DevCounts>,
}

impl DevTable {
    /// A slot for each of the `n` occurrences that a chain with device rows holds, in occurrence order.
    fn of_chains(n: usize, chains: &Chains, chain_counts: &[DevCounts]) -> DevTable {
        let held = device::counted_chains(chains, chain_counts).flat_map(|(_, occs)| occs.iter().map(|&o| o as usize));
        let slot = Slots::of(n, held);
        DevTable { met: vec![CMet::EMPTY; slot.count()], slot, counts: Vec::new() }
    }

    fn len(&self) -> usize {
        self.slot.len()
    }

    /// Occurrence `i`'s metrics (empty without device rows, or before the device rows are attributed).
    fn met(&self, i: usize) -> CMet {
        self.slot.get(i).map_or(CMet::EMPTY, |k| self.met[k as usize])
    }

    /// Occurrence `i`'s row counts (none without device rows, or before they are spread).
    fn counts(&self, i: usize) -> DevCounts {
        self.slot.get(i).and_then(|k| self.counts.get(k as usize).copied()).unwrap_or_default()
    }

    /// The metrics and counts of the occurrences `keep` (ascending) only; the others read as without device rows.
    fn retain(&mut self, keep: &[usize]) {
        let (mut met, mut counts) = (Vec::new(), Vec::new());
        let kept: Vec<usize> = keep.iter().copied().filter(|&i| self.slot.get(i).is_some()).collect();
        for &i in &kept {
            let k = self.slot.get(i).unwrap_or_default() as usize;
            met.push(self.met[k]);
            if let Some(&c) = self.counts.get(k) {
                counts.push(c);
            }
        }
        // counts are spread for every slot or for none
        debug_assert!(counts.is_empty() || counts.len() == met.len());
        *self = DevTable { slot: Slots::of(self.slot.len(), kept), met, counts };
    }
}

/// Blocking sync calls as the join counts them: `occurrence << 8 | API index` ([`SYNC_APIS`]) → calls and ns
/// (24 bytes an entry, only for the (occurrence, API) pairs that have some).
type SyncHits = FxMap<u64, SyncStat>;

/// The blocking sync calls of each occurrence, by API index: the entries of [`SyncHits`] sorted by key (made
/// once the join is done; smaller than the map). An occurrence's entries are found by binary search, or by a
/// [`SyncCursor`] walking the occurrences in order: an index by occurrence cost 8 bytes each (16 MB on
/// emit_nvtx ×10's 2 M op ranges, most of which have no sync call).
#[derive(Clone, Default)]
struct SyncTable {
    ent: Vec<(u64, SyncStat)>,
}

impl SyncTable {
    fn new(hits: SyncHits) -> SyncTable {
        let mut ent: Vec<(u64, SyncStat)> = hits.into_iter().collect();
        ent.sort_unstable_by_key(|e| e.0);
        SyncTable { ent }
    }

    /// Occurrence `i`'s per-API statistics, by API index.
    fn of(&self, i: usize) -> impl Iterator<Item = (u8, SyncStat)> + '_ {
        let lo = self.ent.partition_point(|e| e.0 >> 8 < i as u64);
        let n = self.ent[lo..].partition_point(|e| e.0 >> 8 == i as u64);
        api_stats(&self.ent[lo..lo + n])
    }

    /// Occurrence `i`'s sync calls and their ns (saturating, like each API's).
    fn totals(&self, i: usize) -> (u64, i64) {
        self.of(i).fold((0, 0), |(c, ns), (_, s)| (c + s.calls, ns.saturating_add(s.total_ns)))
    }

    /// The entries of the occurrences `keep` (ascending) only.
    fn retain(&mut self, keep: &[usize]) {
        let mut ent = Vec::new();
        for &i in keep {
            ent.extend(self.of(i).map(|(api, st)| ((i as u64) << 8 | api as u64, st)));
        }
        *self = SyncTable { ent };
    }

    /// A cursor for occurrences asked in ascending order.
    fn cursor(&self) -> SyncCursor<'_> {
        SyncCursor { ent: &self.ent }
    }
}

fn api_stats(ent: &[(u64, SyncStat)]) -> impl Iterator<Item = (u8, SyncStat)> + '_ {
    ent.iter().map(|&(k, st)| (k as u8, st))
}

/// [`SyncTable::of`] for occurrences asked in ascending order, without a search.
struct SyncCursor<'a> {
    ent: &'a [(u64, SyncStat)],
}

impl<'a> SyncCursor<'a> {
    /// Occurrence `i`'s per-API statistics (`i` not below any asked before).
    fn of(&mut self, i: usize) -> impl Iterator<Item = (u8, SyncStat)> + 'a {
        let lo = self.ent.iter().take_while(|e| e.0 >> 8 < i as u64).count();
        let n = self.ent[lo..].iter().take_while(|e| e.0 >> 8 == i as u64).count();
        let (at, rest) = self.ent[lo..].split_at(n);
        self.ent = rest;
        api_stats(at)
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
    Ok(Analysis { doc, occurrences: detail.expect("asked for") })
}

/// [`analyze`], whose reads also compute the timed-stats facts of the tables they read (as
/// [`analyze_sharing_scans`]), and what the next analysis of the export with the same options needs
/// ([`Preloaded`]): its loaded occurrences, and the rows it read with the marks their attribution gave them, from
/// which [`collect_preloaded`] computes the intervals of any labels without reading a table again (the step
/// budget's second pass). The rows are read as [`analyze_with_intervals`] reads them (the kernels' names too).
pub fn analyze_preloading(export: &Export, opts: &RangesOptions) -> Result<(Analysis, Preloaded)> {
    // the rows are captured as an analysis with intervals captures them, which needs the kernels' names
    let capture = export.table(schema::KERNEL).is_none_or(|t| t.has_column(cols::DEMANGLED_NAME));
    let want: Want = (&|_| false, true);
    let mut w = run_scans(export, opts, capture.then_some(want), true, false, None, None)?;
    let part = w.load_part(opts);
    let first = w.collect.take().and_then(|c| FirstPass::of(c, std::mem::replace(&mut w.chains, Chains::new())));
    let pre = Preloaded(part, first.map(Box::new));
    let mut ph = crate::phase::Phases::new("sqlite-ranges");
    let thread_diagnostics = map_threads(export, &w)?;
    ph.mark("map_threads");
    let (ranges, high_cardinality_labels) = aggregate(export, &w)?;
    ph.mark("aggregate");
    w.loaded = None;
    let (doc, detail) = finish(export, opts, w, ranges, thread_diagnostics, high_cardinality_labels, true)?;
    ph.mark("finish");
    Ok((Analysis { doc, occurrences: detail.expect("asked for") }, pre))
}

type Detail = Option<OccurrenceTable>;

/// The analysis; the public per-occurrence vectors are built only when `detail` is asked for. It runs as
/// phases over one [`Work`]: [`load`], [`join_runtime`], [`attribute_device_rows`] (then [`sweep`]),
/// [`map_threads`], [`aggregate`] and [`finish`]. With `share`, the reads also compute the timed-stats facts
/// of the tables they read ([`run_scans`]).
fn analyze_impl(export: &Export, opts: &RangesOptions, detail: bool, share: bool) -> Result<(SqliteRangesDoc, Detail)> {
    let w = run_scans(export, opts, None, share, false, None, None)?;
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
    occ: std::sync::Arc<Vec<COcc>>,
    label_names: Vec<String>,
    domains: Domains,
    /// `(globalTid, lo, hi)` thread slices of `occ`.
    slices: Vec<(i64, usize, usize)>,
    /// globalTid → (slice index, lo, hi).
    slice_of: FxMap<i64, (u32, usize, usize)>,
    /// By occurrence: its runtime calls (the join's).
    runtime_calls: Vec<u32>,
    /// By chain: the device rows counted (empty until they are), then spread into `dev` ([`spread_counts`]).
    chain_counts: Vec<DevCounts>,
    /// By occurrence, its device metrics and row counts: empty until the device rows are attributed.
    dev: DevTable,
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
    /// By occurrence index: the intervals of the occurrences whose label was asked for.
    per_occ: IntervalTable,
    /// Every device row and runtime call as read ([`CapturedRows`]); the calls by part of the runtime table.
    rows: CapturedRows,
    calls_by_part: Vec<CallPart>,
    /// The join read the runtime table whole ([`Collected::runtime_read`]).
    runtime_read: bool,
    /// [`Collected::device_ids`].
    device_ids: Vec<i64>,
    /// The runtime calls with a thread and no API name id (not in `rows`), and the sync API ids of the join:
    /// with the marks, what a later collection needs ([`FirstPass`]).
    nameless: Vec<NamelessCall>,
    sync_ids: FxMap<i64, u8>,
    /// Keep each device row's mark and the tags once the rows are swept ([`FirstPass`]).
    keep_marks: bool,
    marks: Option<DeviceMarks>,
}

/// The labels whose occurrences' intervals an analysis collects, and whether it keeps what a later collection
/// of other labels needs ([`Collect::keep_marks`]).
type Want<'a> = (&'a dyn Fn(&str) -> bool, bool);

/// [`analyze`], plus the intervals of every occurrence whose label satisfies `want` (parallel to
/// `occurrences`; empty for the others). The same join as the metrics: runtime calls on the occurrence's
/// thread, then `(globalPid, correlationId)` — no second join.
pub fn analyze_with_intervals(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
) -> Result<(Analysis, Collected)> {
    analyze_with_intervals_impl(export, opts, want, false, None, None)
}

/// [`analyze_with_intervals`] starting from the occurrences an earlier analysis of the same export loaded
/// ([`analyze_preloading`]; loaded again when its options differ).
pub fn analyze_with_intervals_preloaded(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
    pre: Preloaded,
) -> Result<(Analysis, Collected)> {
    analyze_with_intervals_impl(export, opts, want, false, None, Some(pre))
}

/// Called once with the rows an analysis with intervals captured, as soon as they are read (before the
/// attribution): the caller may start work on them in its own thread, taking the device rows out (the
/// [`Collected::rows`] it gets back then have none).
pub type RowsReady<'a> = &'a mut dyn FnMut(&mut CapturedRows);

/// [`analyze_with_intervals`]; with `keep_occurrences` and folding options without prefix or window, the
/// occurrences as read too ([`Collected::occurrences`], as [`load_occurrences_framework_folded`] reads them), for a
/// readiness document on the same export; `ready` is given the
/// captured rows as soon as they are read ([`RowsReady`]).
pub fn analyze_with_intervals_keeping(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
    keep_occurrences: bool,
    ready: Option<RowsReady<'_>>,
) -> Result<(Analysis, Collected)> {
    analyze_with_intervals_impl(export, opts, want, keep_occurrences, ready, None)
}

fn analyze_with_intervals_impl(
    export: &Export,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
    keep_occurrences: bool,
    ready: Option<RowsReady<'_>>,
    pre: Option<Preloaded>,
) -> Result<(Analysis, Collected)> {
    // kept only as `load_occurrences_framework_folded` reads them: folded at read, a framework's labels folded
    let keep = keep_occurrences && opts.fold && opts.range_prefix.is_none() && opts.window.is_none();
    let mut w = run_scans(export, opts, Some((want, false)), true, keep, ready, pre)?;
    let thread_diagnostics = map_threads(export, &w)?;
    let (ranges, high_cardinality_labels) = aggregate(export, &w)?;
    let (per_occ, rows, runtime_read, device_ids) =
        w.collect.take().map(|c| (c.per_occ, c.rows, c.runtime_read, c.device_ids)).unwrap_or_default();
    let occurrences = w.loaded.take().map(SharedOccurrences);
    let n = w.occ.len();
    let shared = occurrences;
    let (doc, detail) = finish(export, opts, w, ranges, thread_diagnostics, high_cardinality_labels, true)?;
    let occurrences = detail.expect("asked for");
    let iv = sorted_intervals(per_occ, n);
    let c = Collected { intervals: iv, rows, runtime_read, occurrences: shared, device_ids };
    Ok((Analysis { doc, occurrences }, c))
}

/// The collected intervals of `n` occurrences, each asked occurrence's rows and calls in their order.
fn sorted_intervals(mut iv: IntervalTable, n: usize) -> IntervalTable {
    if iv.len() != n {
        iv = IntervalTable::new(n, |_| false);
    }
    for v in iv.asked_mut() {
        v.device.sort();
        v.runtime.sort();
    }
    iv
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
pub fn analyze_doc(export: &Export, opts: &RangesOptions) -> Result<SqliteRangesDoc> {
    Ok(analyze_impl(export, opts, false, false)?.0)
}

#[cfg(test)]
mod tests;
