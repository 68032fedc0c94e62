//! `nvtx-readiness`: can this trace name where the time went? (`nsyskit.readiness/v1`, issue 10).
//!
//! Built on `sqlite-ranges`' reading code ([`crate::ranges::load_occurrences`]: labels, threads, depth, parent;
//! [`crate::ranges::high_cardinality`]; [`crate::ranges::normalize_sync_api`]). Per range prefix `P` it reports
//! the serving range taxonomy (present / missing), the opaque share of `P.engine.iteration` (iteration time no
//! child range under the prefix covers) with the largest opaque gaps, range-naming problems, blocking syncs no
//! range under the prefix encloses, and a verdict: READY, or RETRY "add instrumentation before choosing an
//! optimisation". See `docs/nvtx-readiness.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::{self, cols};
use crate::export::{pid_of, tid_of, Export};
use crate::ranges::{self, Occurrence, RangesOptions};

/// The serving range taxonomy: suffixes after `P.`, in the order.
pub const TAXONOMY: [&str; 11] = [
    "engine.iteration",
    "engine.scheduling",
    "engine.input_preparation",
    "attention.planning",
    "graph.preparation",
    "graph.replay",
    "sampling.d2h",
    "token.acceptance",
    "request.cleanup",
    "api.detokenization",
    "api.streaming",
];

/// The default largest acceptable opaque share of iteration wall time (see docs/nvtx-readiness.md for the
/// calibration on the real fixtures).
pub const DEFAULT_MAX_OPAQUE_SHARE: f64 = 0.05;

/// The share of the step label's wall that no range nested in it covers, over its occurrences (every nested
/// label counts: a framework's op ranges name what runs there too); None without an occurrence of the label.
pub fn opaque_step_share(occ: &[Occurrence], label: &str) -> Option<f64> {
    let mut covered: std::collections::HashMap<usize, Vec<(i64, i64)>> = Default::default();
    let mut wall = 0i64;
    for (i, o) in occ.iter().enumerate() {
        if *o.label == *label {
            wall += o.end - o.start;
            covered.entry(i).or_default();
        }
    }
    if wall <= 0 {
        return None;
    }
    for o in occ.iter().filter(|o| *o.label != *label) {
        // the step occurrence this range is nested in, if any
        let mut p = o.parent;
        while let Some(j) = p {
            if let Some(v) = covered.get_mut(&j) {
                v.push((o.start, o.end));
                break;
            }
            p = occ[j].parent;
        }
    }
    let named: i64 = covered
        .iter()
        .map(|(&j, v)| {
            let (s, e) = (occ[j].start, occ[j].end);
            let clipped: Vec<(i64, i64)> =
                v.iter().map(|&(a, b)| (a.max(s), b.min(e))).filter(|(a, b)| b > a).collect();
            crate::step_budget::device::len(&crate::step_budget::device::union(clipped))
        })
        .sum();
    Some(1.0 - named as f64 / wall as f64)
}

/// Whether a host-side class resting on `unattributed` (its share of the typical steps' wall) rests on time no
/// range names: the opaque share is above [`DEFAULT_MAX_OPAQUE_SHARE`] and the host time the nested ranges do
/// name could not reach the step budget's dominance share alone (a lower bound: all opaque time is taken as
/// unattributed). Such a class does not stand (report's and step-budget's `readiness.opaque_step`).
pub fn rests_on_opaque(unattributed: f64, opaque: f64) -> bool {
    opaque >= DEFAULT_MAX_OPAQUE_SHARE && unattributed - opaque < crate::step_budget::DOMINANT_SHARE
}

/// How many opaque gaps are listed.
pub const TOP_GAPS: usize = 10;

/// The reason of every RETRY.
pub const RETRY_REASON: &str = "add instrumentation before choosing an optimisation";

/// What `nvtx-readiness` checks.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadinessOptions {
    /// `P` (a trailing `.` is ignored); None = inferred from the `*.engine.iteration` label with the most
    /// occurrences.
    pub range_prefix: Option<String>,
    /// READY needs `opaque_share < max_opaque_share`.
    pub max_opaque_share: f64,
}

impl Default for ReadinessOptions {
    fn default() -> Self {
        ReadinessOptions { range_prefix: None, max_opaque_share: DEFAULT_MAX_OPAQUE_SHARE }
    }
}

impl ReadinessOptions {
    pub fn validate(&self) -> Result<()> {
        let s = self.max_opaque_share;
        if !(s.is_finite() && s > 0.0 && s <= 1.0) {
            return Err(Error::usage(format!("--max-opaque-share {s}: expected a share in (0, 1]"))
                .with_arg("--max-opaque-share"));
        }
        if let Some(p) = &self.range_prefix {
            if p.trim_end_matches('.').is_empty() {
                return Err(Error::usage(format!(
                    "--range-prefix {p:?}: expected a non-empty prefix such as vibeserve"
                ))
                .with_arg("--range-prefix"));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------
// The document

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
pub struct ReadinessDoc {
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

/// How many prefixes and id patterns a document lists.
pub const LIST_LIMIT: usize = 50;

/// A label's prefix: the text before its first `.` (a dotted name such as `hf.decode_step`), else before its
/// first `::` (`aten::mm`); None for a label with neither, or with a space before the separator.
pub fn label_prefix(label: &str) -> Option<String> {
    let dot = label.find('.');
    let colons = label.find("::");
    let (i, sep) = match (dot, colons) {
        (Some(d), Some(c)) if c < d => (c, "::"),
        (Some(d), _) => (d, "."),
        (None, Some(c)) => (c, "::"),
        (None, None) => return None,
    };
    let head = &label[..i];
    (!head.is_empty() && !head.contains(char::is_whitespace)).then(|| format!("{head}{sep}"))
}

/// The prefixes of a set of occurrences (labels folded first), most occurrences first (ties: byte order). A
/// framework's own ranges (`aten::*`, XLA's `TSL:` domain, NCCL/cuBLAS API ranges: [`crate::framework`]) are
/// evidence, not the engine's naming: they are left out (XLA's `TSL:Thunk:#hlo_op=…` used to be suggested as
/// the prefix of a JAX decode loop over the user's `jaxdec.`).
pub fn prefixes_seen<'a>(all: impl IntoIterator<Item = &'a Occurrence>) -> Vec<PrefixCount> {
    // each distinct label folded once, with its occurrences (a label repeats on every step: 500 k occurrences
    // of a few labels were folded, cut and looked up one by one)
    let mut counts: crate::fx::FxMap<&str, u64> = Default::default();
    for o in all {
        *counts.entry(&o.label).or_default() += 1;
    }
    counts.retain(|l, _| !crate::framework::is_framework(l));
    let mut per: BTreeMap<String, (BTreeSet<String>, u64)> = BTreeMap::new();
    let mut folder = crate::labels::Folder::new();
    for (raw, n) in counts {
        let l = folder.add(raw, n);
        if let Some(p) = label_prefix(&l) {
            let e = per.entry(p).or_default();
            e.0.insert(l);
            e.1 += n;
        }
    }
    let mut v: Vec<PrefixCount> = per
        .into_iter()
        .map(|(prefix, (l, n))| PrefixCount { prefix, labels: l.len() as u64, occurrences: n })
        .collect();
    v.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.prefix.cmp(&b.prefix)));
    v
}

/// The dotted prefix with the most occurrences (without its dot), the one to try with --range-prefix.
pub fn suggest_prefix(seen: &[PrefixCount]) -> Option<String> {
    seen.iter().find(|p| p.prefix.ends_with('.')).map(|p| p.prefix.trim_end_matches('.').to_string())
}

/// The prefix to suggest: [`suggest_prefix`] among the ranges opened on threads that made CUDA runtime calls
/// (the engine's), else among all. An API process's ranges can outnumber the engine's: in the held-out
/// `engine_spawn` capture `detokenizer.` (800 occurrences, CPU only) used to be suggested over the engine's
/// `EngineCore.` (200, on the thread that replays the CUDA graph).
fn suggest_engine_prefix(export: &Export, all: &[Occurrence], seen: &[PrefixCount]) -> Result<Option<String>> {
    let cuda = export.runtime_thread_ids()?;
    let engine = all.iter().filter(|o| cuda.contains(&o.global_tid));
    Ok(suggest_prefix(&prefixes_seen(engine)).or_else(|| suggest_prefix(seen)))
}

/// Id-bearing labels grouped by the label they fold into ([`crate::labels`], the rule `sqlite-ranges`
/// folds with), most occurrences first, at most [`LIST_LIMIT`].
pub fn id_patterns<'a>(labels: impl IntoIterator<Item = &'a str>) -> Vec<IdPattern> {
    let mut f = crate::labels::Folder::new();
    for l in labels {
        f.add(l, 1);
    }
    f.report(LIST_LIMIT)
        .folded
        .into_iter()
        .map(|x| IdPattern { pattern: x.label, labels: x.raw_labels, occurrences: x.occurrences, examples: x.examples })
        .collect()
}

impl Document for ReadinessDoc {
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

// ---------------------------------------------------------------------------------------------------------
// Analysis

/// Open the capture (an `.nsys-rep` is exported with `nsys` into a temporary folder) and analyse it.
pub fn run(path: &Path, opts: &ReadinessOptions, nsys: Option<&Path>) -> Result<ReadinessDoc> {
    opts.validate()?;
    let cap = crate::export::open_capture(path, nsys)?;
    document(&cap.export, &cap.source, opts)
}

/// The document [`run`] prints, of an export already open, `source` saying where it came from (the shared
/// run of `gate::run_shared`: the same bytes).
pub fn document(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &ReadinessOptions,
) -> Result<ReadinessDoc> {
    document_with(export, source, opts, None)
}

/// What another analysis of the same export already read, so that a readiness document needs no scan of its
/// own (`gate-check --report --nvtx-readiness`: the report's ranges analysis).
pub struct SharedReads<'a> {
    /// Every kept occurrence: [`ranges::load_occurrences`] with default options.
    pub occurrences: ranges::LoadedOccurrences,
    /// Every runtime call with a thread and an API name id, in any order, when the runtime table was read
    /// whole (None: the table is read here when there is one).
    pub runtime_calls: Option<&'a ranges::RuntimeCalls>,
}

impl<'a> SharedReads<'a> {
    /// The reads of a ranges analysis that kept its occurrences
    /// ([`ranges::analyze_with_intervals_keeping`]), None when it did not.
    pub fn of(collected: &'a ranges::Collected) -> Option<SharedReads<'a>> {
        let occurrences = collected.occurrences.as_ref()?.loaded();
        let runtime_calls = collected.runtime_read.then_some(&*collected.rows.runtime);
        Some(SharedReads { occurrences, runtime_calls })
    }
}

/// [`document`], from `shared` reads when given (the same bytes).
pub fn document_with(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &ReadinessOptions,
    shared: Option<SharedReads<'_>>,
) -> Result<ReadinessDoc> {
    opts.validate()?;
    let mut doc = analyze_with(export, opts, shared)?;
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
    Ok(doc)
}

/// `P` from the `*.engine.iteration` label with the most occurrences (ties: byte order), None when none.
pub fn infer_prefix(all: &[Occurrence]) -> Option<String> {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for o in all {
        if let Some(p) = o.label.strip_suffix(".engine.iteration") {
            if !p.is_empty() {
                *counts.entry(p).or_default() += 1;
            }
        }
    }
    let max = counts.values().copied().max()?;
    counts.into_iter().find(|(_, c)| *c == max).map(|(p, _)| p.to_string())
}

/// The whole readiness analysis of an open export.
pub fn analyze(export: &Export, opts: &ReadinessOptions) -> Result<ReadinessDoc> {
    analyze_with(export, opts, None)
}

/// [`analyze`], from `shared` reads when given.
fn analyze_with(export: &Export, opts: &ReadinessOptions, shared: Option<SharedReads<'_>>) -> Result<ReadinessDoc> {
    opts.validate()?;
    // Every range (for the engine threads' labels outside the prefix), then the ones under the prefix (their
    // depth and parent are among ranges under the prefix, as `sqlite-ranges --range-prefix P.` reports them).
    // a capture that recorded no NVTX event reads as no range (the RETRY "no iteration range"), whether its
    // export has no NVTX_EVENTS table (lazy) or an empty one (--lazy=false): the ranges library's rule
    let (loaded, calls) = match shared {
        Some(s) => (s.occurrences, s.runtime_calls),
        None => (ranges::load_occurrences(export, &RangesOptions::default())?, None),
    };
    let all = &loaded.occurrences;
    let (prefix, inferred) = match &opts.range_prefix {
        Some(p) => (Some(p.trim_end_matches('.').to_string()), false),
        None => (infer_prefix(all), true),
    };
    let runtime = export.optional(schema::RUNTIME, &cols::RUNTIME)?.map(|t| t.name.clone());

    let mut notes = vec![
        "opaque_ns is iteration wall time covered by no child range under the prefix (the union of the children's intervals, clipped to the iteration); an opaque gap is not evidence of anything: scheduling, input preparation, attention planning, a hidden sync and Python overhead all look the same.".to_string(),
        "Nested labels overlap by construction: wall times of labels at different depths are never added.".to_string(),
    ];
    let cut: std::collections::BTreeSet<&str> =
        all.iter().map(|o| &*o.label).filter(|l| l.ends_with(crate::labels::LABEL_CUT_MARKER)).collect();
    if !cut.is_empty() {
        notes.push(format!(
            "{} labels were longer than {} bytes: each is cut at a character boundary and ends with `{}` (messages that agree up to the cut count as one label).",
            cut.len(),
            crate::labels::LABEL_MAX_BYTES,
            crate::labels::LABEL_CUT_MARKER
        ));
    }

    let seen = prefixes_seen(all);
    let Some(p) = prefix else {
        let (schema, tool) = ReadinessDoc::header();
        // no prefix: a sync inside ANY range is enclosed
        let syncs = unenclosed_syncs_of(export, runtime.as_deref(), all, calls)?;
        notes.push("No range label ends in `.engine.iteration`: give --range-prefix P for a capture with P.engine.iteration ranges.".into());
        let suggested = suggest_engine_prefix(export, all, &seen)?;
        let hint = match &suggested {
            Some(s) => format!(
                "; prefixes seen: {}; try --range-prefix {s} and name the engine step `{s}.engine.iteration`",
                seen.iter()
                    .take(5)
                    .map(|p| format!("{} ({} labels, {} occurrences)", p.prefix, p.labels, p.occurrences))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => String::new(),
        };
        return Ok(ReadinessDoc {
            schema,
            tool,
            verdict: ReadinessVerdict::Retry,
            reason: format!("{RETRY_REASON}: no `<P>.engine.iteration` range in this capture, so no time can be attributed to engine phases{hint}"),
            source: source(export, None, inferred)?,
            threshold: ReadinessThreshold { max_opaque_share: opts.max_opaque_share },
            taxonomy: Vec::new(),
            outside_taxonomy: Vec::new(),
            iterations: Iterations {
                label: None,
                occurrences: 0,
                wall_ns: 0,
                named_ns: 0,
                opaque_ns: 0,
                opaque_share: None,
                without_children: 0,
                engine_threads: Vec::new(),
            },
            largest_opaque_gaps: Vec::new(),
            cuda_graphs: with_ranges_in_capture(cuda_graphs(export, runtime.as_deref(), None, false)?, export, all, &mut notes)?,
            naming: Naming {
                labels_with_ids: id_patterns(all.iter().map(|o| &*o.label)),
                outside_prefix_on_engine_threads: Vec::new(),
                labels_at_several_depths: Vec::new(),
            },
            unenclosed_syncs: syncs,
            prefixes_seen: seen.into_iter().take(LIST_LIMIT).collect(),
            suggested_prefix: suggested,
            notes,
        });
    };
    let under = format!("{p}.");
    // what `load_occurrences` gives with `range_prefix: under`, without reading NVTX_EVENTS again
    let kept = ranges::kept_under(&loaded, &under);
    let occ: &[Occurrence] = &kept;
    let iter_label = format!("{p}.engine.iteration");

    // ---- taxonomy and labels outside it
    let mut per_label: BTreeMap<&str, (u64, i64, BTreeSet<i64>)> = BTreeMap::new();
    for o in occ {
        let e = per_label.entry(&*o.label).or_default();
        e.0 += 1;
        e.1 += o.end - o.start;
        e.2.insert(o.global_tid);
    }
    let taxonomy: Vec<TaxonomyEntry> = TAXONOMY
        .iter()
        .map(|name| {
            let label = format!("{p}.{name}");
            let (n, w, th) = per_label.get(label.as_str()).map(|e| (e.0, e.1, e.2.len() as u64)).unwrap_or((0, 0, 0));
            TaxonomyEntry { name: name.to_string(), label, present: n > 0, occurrences: n, wall_ns: w, threads: th }
        })
        .collect();
    let tax_labels: BTreeSet<String> = TAXONOMY.iter().map(|n| format!("{p}.{n}")).collect();
    let mut outside_taxonomy: Vec<LabelCount> = per_label
        .iter()
        .filter(|(l, _)| !tax_labels.contains(**l))
        .map(|(l, e)| LabelCount { label: l.to_string(), occurrences: e.0, wall_ns: e.1 })
        .collect();
    sort_counts(&mut outside_taxonomy);

    // ---- opaque share
    let (iterations, gaps) = opaque(occ, &iter_label, TOP_GAPS);

    // ---- naming rules
    let engine: BTreeSet<i64> = iterations.engine_threads.iter().map(|t| t.global_tid).collect();
    let labels_with_ids: Vec<IdPattern> = id_patterns(occ.iter().map(|o| &*o.label));
    let mut outside: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
    for o in all.iter().filter(|o| engine.contains(&o.global_tid) && !o.label.starts_with(&under)) {
        let e = outside.entry(&*o.label).or_default();
        e.0 += 1;
        e.1 += o.end - o.start;
    }
    let mut outside_prefix_on_engine_threads: Vec<LabelCount> = outside
        .into_iter()
        .map(|(l, (n, w))| LabelCount { label: l.to_string(), occurrences: n, wall_ns: w })
        .collect();
    sort_counts(&mut outside_prefix_on_engine_threads);
    let mut depths: BTreeMap<&str, BTreeMap<u32, u64>> = BTreeMap::new();
    for o in occ {
        *depths.entry(&*o.label).or_default().entry(o.depth).or_default() += 1;
    }
    let labels_at_several_depths: Vec<DepthSpread> = depths
        .into_iter()
        .filter(|(_, d)| d.len() > 1)
        .map(|(l, d)| DepthSpread { label: l.to_string(), depths: d })
        .collect();

    // ---- syncs, graphs
    let unenclosed = unenclosed_syncs_of(export, runtime.as_deref(), occ, calls)?;
    let replay_present = per_label.contains_key(format!("{p}.graph.replay").as_str());
    let graphs = with_ranges_in_capture(
        cuda_graphs(export, runtime.as_deref(), Some(&p), replay_present)?,
        export,
        all,
        &mut notes,
    )?;

    // ---- verdict
    let (verdict, reason) = match iterations.opaque_share {
        _ if iterations.occurrences == 0 => (
            ReadinessVerdict::Retry,
            format!("{RETRY_REASON}: no `{iter_label}` range, so no time can be attributed to engine phases"),
        ),
        None => (
            ReadinessVerdict::Retry,
            format!("{RETRY_REASON}: the {} `{iter_label}` ranges have no wall time", iterations.occurrences),
        ),
        Some(s) if s < opts.max_opaque_share => (
            ReadinessVerdict::Ready,
            format!(
                "{} `{iter_label}` ranges ({}); {} of their wall time ({:.2} %) is covered by no child range under `{under}`, below the threshold {:.2} %",
                iterations.occurrences,
                ms(iterations.wall_ns),
                ms(iterations.opaque_ns),
                s * 100.0,
                opts.max_opaque_share * 100.0
            ),
        ),
        Some(s) => (
            ReadinessVerdict::Retry,
            format!(
                "{RETRY_REASON}: {} of the {} wall time of {} `{iter_label}` ranges ({:.2} %) is covered by no child range under `{under}` (threshold {:.2} %); see largest_opaque_gaps for where to add ranges",
                ms(iterations.opaque_ns),
                ms(iterations.wall_ns),
                iterations.occurrences,
                s * 100.0,
                opts.max_opaque_share * 100.0
            ),
        ),
    };
    if runtime.is_none() {
        notes.push("No CUPTI_ACTIVITY_KIND_RUNTIME table (a capture without CUDA): no blocking sync can be listed; that is a result, not an error.".into());
    }
    let suggested_prefix =
        if iterations.occurrences == 0 { suggest_engine_prefix(export, all, &seen)?.filter(|s| *s != p) } else { None };
    let (schema, tool) = ReadinessDoc::header();
    Ok(ReadinessDoc {
        schema,
        tool,
        verdict,
        reason,
        source: source(export, Some(p), inferred)?,
        threshold: ReadinessThreshold { max_opaque_share: opts.max_opaque_share },
        taxonomy,
        outside_taxonomy,
        iterations,
        largest_opaque_gaps: gaps,
        cuda_graphs: graphs,
        naming: Naming { labels_with_ids, outside_prefix_on_engine_threads, labels_at_several_depths },
        unenclosed_syncs: unenclosed,
        suggested_prefix,
        prefixes_seen: seen.into_iter().take(LIST_LIMIT).collect(),
        notes,
    })
}

fn source(export: &Export, prefix: Option<String>, inferred: bool) -> Result<ReadinessSource> {
    let path = export.path();
    Ok(ReadinessSource {
        path: path.display().to_string(),
        size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        kind: "sqlite".into(),
        exported_with: None,
        nsys_version: export.nsys_version()?,
        range_prefix_inferred: inferred && prefix.is_some(),
        range_prefix: prefix,
        skipped_rows: {
            let mut s = crate::export::RowSkips::new();
            export.count_interval_skips(&[schema::RUNTIME], &mut s)?;
            s
        },
    })
}

fn sort_counts(v: &mut [LabelCount]) {
    v.sort_by(|a, b| b.wall_ns.cmp(&a.wall_ns).then_with(|| a.label.as_bytes().cmp(b.label.as_bytes())));
}

fn ms(ns: i64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Opaque time of every `iter_label` occurrence of `occ` (sorted by thread, start, end descending, label, as
/// [`ranges::load_occurrences`] returns them). Children: the other occurrences on the same thread nested inside
/// it (`it.start <= c.start`, `c.end <= it.end`), except other occurrences of `iter_label`. Returns the totals
/// and the `keep` largest gaps, largest first (then by start, thread and the order found); only gaps that rank
/// among the `keep` largest so far are built (a capture has one or more per iteration).
pub fn opaque(occ: &[Occurrence], iter_label: &str, keep: usize) -> (Iterations, Vec<OpaqueGap>) {
    let mut it = Iterations {
        label: Some(iter_label.to_string()),
        occurrences: 0,
        wall_ns: 0,
        named_ns: 0,
        opaque_ns: 0,
        opaque_share: None,
        without_children: 0,
        engine_threads: Vec::new(),
    };
    let mut gaps = TopGaps::new(keep);
    let mut threads = BTreeSet::new();
    for (i, o) in occ.iter().enumerate() {
        if &*o.label != iter_label {
            continue;
        }
        let idx = it.occurrences;
        it.occurrences += 1;
        it.wall_ns += o.end - o.start;
        threads.insert(o.global_tid);
        // identical twins sort right before it; everything else nested inside it follows it
        let mut lo = i;
        while lo > 0 && occ[lo - 1].global_tid == o.global_tid && occ[lo - 1].start == o.start {
            lo -= 1;
        }
        let mut cursor = o.start; // covered up to here
        let mut last_label: Option<&str> = None;
        let mut named = 0i64;
        let mut any_child = false;
        let mut j = lo;
        while j < occ.len() && occ[j].global_tid == o.global_tid && occ[j].start <= o.end {
            let c = &occ[j];
            j += 1;
            if &*c.label == iter_label || c.end > o.end || c.start < o.start {
                continue;
            }
            any_child = true;
            // children arrive by start: a gap is [cursor, c.start) when c starts after the covered part
            if c.start > cursor {
                gaps.offer(c.start - cursor, cursor, o.global_tid, || OpaqueGap {
                    start: cursor,
                    end: c.start,
                    duration_ns: c.start - cursor,
                    global_tid: o.global_tid,
                    iteration_index: idx,
                    iteration_start: o.start,
                    iteration_end: o.end,
                    after: last_label.map(str::to_string),
                    before: Some(c.label.to_string()),
                });
            }
            if c.end > cursor {
                named += c.end - cursor.max(c.start);
                cursor = c.end;
                last_label = Some(&c.label);
            }
        }
        if !any_child {
            it.without_children += 1;
        }
        if o.end > cursor {
            gaps.offer(o.end - cursor, cursor, o.global_tid, || OpaqueGap {
                start: cursor,
                end: o.end,
                duration_ns: o.end - cursor,
                global_tid: o.global_tid,
                iteration_index: idx,
                iteration_start: o.start,
                iteration_end: o.end,
                after: last_label.map(str::to_string),
                before: None,
            });
        }
        it.named_ns += named;
    }
    it.opaque_ns = it.wall_ns - it.named_ns;
    it.opaque_share = (it.wall_ns > 0).then(|| it.opaque_ns as f64 / it.wall_ns as f64);
    it.engine_threads =
        threads.into_iter().map(|g| ThreadRef { global_tid: g, pid: pid_of(g), tid: tid_of(g) }).collect();
    (it, gaps.into_ranked())
}

/// The `keep` largest opaque gaps seen so far, ranked: duration descending, then start, thread and the order
/// offered (what a stable sort of every gap by the first three gives).
struct TopGaps {
    keep: usize,
    offered: u64,
    best: Vec<(GapRank, OpaqueGap)>,
}

/// (duration descending, start, thread, order offered): smaller ranks first.
type GapRank = (std::cmp::Reverse<i64>, i64, i64, u64);

impl TopGaps {
    fn new(keep: usize) -> TopGaps {
        TopGaps { keep, offered: 0, best: Vec::with_capacity(keep.min(64) + 1) }
    }

    /// A gap of `duration` ns from `start` on `global_tid`; `gap` builds it only when it ranks.
    fn offer(&mut self, duration: i64, start: i64, global_tid: i64, gap: impl FnOnce() -> OpaqueGap) {
        let key = (std::cmp::Reverse(duration), start, global_tid, self.offered);
        self.offered += 1;
        if self.best.len() == self.keep && self.best.last().is_none_or(|(worst, _)| key > *worst) {
            return;
        }
        let at = self.best.partition_point(|(k, _)| *k < key);
        self.best.insert(at, (key, gap()));
        self.best.truncate(self.keep);
    }

    fn into_ranked(self) -> Vec<OpaqueGap> {
        self.best.into_iter().map(|(_, g)| g).collect()
    }
}

/// Blocking sync runtime calls (by [`ranges::normalize_sync_api`]) whose start lies inside no occurrence of
/// `occ` on their thread (`o.start <= r.start <= o.end`, the correlation rule of the ranges contract).
pub fn unenclosed_syncs(export: &Export, runtime: Option<&str>, occ: &[Occurrence]) -> Result<UnenclosedSyncs> {
    unenclosed_syncs_of(export, runtime, occ, None)
}

/// Per API: calls, Σ duration (None once it overflows), threads, first start.
type SyncCounts = BTreeMap<String, (u64, Option<i64>, BTreeSet<i64>, i64)>;

/// [`unenclosed_syncs`], over `calls` when given (every runtime call with a thread and an API name id, as
/// another analysis read them), else over the runtime table read here in parallel rowid ranges.
fn unenclosed_syncs_of(
    export: &Export,
    runtime: Option<&str>,
    occ: &[Occurrence],
    calls: Option<&ranges::RuntimeCalls>,
) -> Result<UnenclosedSyncs> {
    let mut out =
        UnenclosedSyncs { runtime_table: runtime.is_some(), sync_calls: 0, enclosed_calls: 0, by_api: Vec::new() };
    if runtime.is_none() {
        return Ok(out);
    }
    let ids = export.string_ids_where(|v| ranges::normalize_sync_api(v).map(str::to_string))?;
    if ids.is_empty() {
        return Ok(out);
    }
    // per thread: the union of its occurrences' closed intervals, sorted
    let mut unions: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for o in occ {
        unions.entry(o.global_tid).or_default().push((o.start, o.end));
    }
    for v in unions.values_mut() {
        v.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(v.len());
        for &(s, e) in v.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *v = merged;
    }
    // per part: calls, enclosed calls, and per API (calls, Σ duration — None once it overflows —, threads,
    // first start)
    type Part = (u64, u64, SyncCounts);
    let add = |p: &mut Part, g: i64, n: i64, s: i64, e: i64| {
        let Some(api) = ids.get(&n) else { return };
        p.0 += 1;
        let enclosed = unions.get(&g).is_some_and(|u| {
            let k = u.partition_point(|iv| iv.0 <= s);
            k > 0 && u[k - 1].1 >= s
        });
        if enclosed {
            p.1 += 1;
            return;
        }
        let entry = p.2.entry(api.clone()).or_insert((0, Some(0), BTreeSet::new(), s));
        entry.0 += 1;
        entry.1 = entry.1.and_then(|t| t.checked_add(e - s));
        entry.2.insert(g);
        entry.3 = entry.3.min(s);
    };
    let parts: Vec<Part> = match calls {
        Some(calls) => {
            let mut p = Part::default();
            for c in calls.iter() {
                add(&mut p, c.global_tid, c.name_id, c.start, c.end);
            }
            vec![p]
        }
        // the runtime table in parallel rowid ranges (rows with a NULL or inverted interval are skipped by the
        // export layer and counted there)
        None => {
            let t = export.table(schema::RUNTIME).cloned().ok_or_else(|| Error::input("no runtime table"))?;
            let threads = crate::export::rows::scan_threads();
            let src = export.source();
            let (parts, _skips) = crate::export::fold::fold_runtime(&src, &t, threads, Part::default, |p, r| {
                if let (Some(g), Some(n)) = (r.global_tid, r.name_id) {
                    add(p, g, n, r.start, r.end);
                }
            })?;
            parts
        }
    };
    let mut by_api: BTreeMap<String, (u64, i64, BTreeSet<i64>, i64)> = BTreeMap::new();
    for (calls, enclosed, apis) in parts {
        out.sync_calls += calls;
        out.enclosed_calls += enclosed;
        for (api, (n, total, th, first)) in apis {
            let entry = by_api.entry(api.clone()).or_insert((0, 0, BTreeSet::new(), first));
            entry.0 += n;
            entry.1 = total.and_then(|t| entry.1.checked_add(t)).ok_or_else(|| {
                Error::input(format!("{}: {}: total duration of {api} calls overflows 64-bit nanoseconds: the export's timestamps are not real", export.name(), schema::RUNTIME))
            })?;
            entry.2.extend(th);
            entry.3 = entry.3.min(first);
        }
    }
    out.by_api = by_api
        .into_iter()
        .map(|(api, (calls, total_ns, th, first))| SyncApiCount {
            api,
            calls,
            total_ns,
            threads: th.len() as u64,
            first_start: first,
        })
        .collect();
    out.by_api.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.api.cmp(&b.api)));
    Ok(out)
}

/// Graph launches among the runtime calls, and the note on what a host range around a replay measures.
fn cuda_graphs(export: &Export, runtime: Option<&str>, prefix: Option<&str>, replay_range: bool) -> Result<CudaGraphs> {
    // graph launches: the one definition of the export layer
    let launches = if runtime.is_some() { export.runtime_graph_launches()?.map_or(0, |(_, n)| n) as u64 } else { 0 };
    let note = (launches > 0 || replay_range).then(|| {
        let replay = prefix.map(|p| format!("`{p}.graph.replay`")).unwrap_or_else(|| "a graph replay".into());
        format!(
            "CUDA graphs: {launches} graph launches. A host range around a replay ({replay}) measures the launch, not the GPU work: graph work is read from kernel rows (node-level tracing, --cuda-graph-trace=node, joined through the launch's correlationId; see sqlite-ranges)."
        )
    });
    Ok(CudaGraphs { graph_launches: launches, note, ranges_in_capture: None })
}

/// `g` with the ranges of `all` recorded inside a graph capture, their warning pushed on `notes`.
fn with_ranges_in_capture(
    mut g: CudaGraphs,
    export: &Export,
    all: &[Occurrence],
    notes: &mut Vec<String>,
) -> Result<CudaGraphs> {
    g.ranges_in_capture = ranges_in_capture(export, all)?;
    if let Some(r) = &g.ranges_in_capture {
        notes.push(r.warning.clone());
    }
    Ok(g)
}

/// The ranges of `occ` recorded inside a CUDA graph capture on their own thread (seed B93: "ranges captured
/// inside a graph are not re-emitted per replay"); None when there is none.
fn ranges_in_capture(export: &Export, occ: &[Occurrence]) -> Result<Option<RangesInCapture>> {
    let windows = export.stream_capture_windows()?;
    if windows.is_empty() {
        return Ok(None);
    }
    let mut by_label: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    let mut folder = crate::labels::Folder::new();
    let mut n = 0u64;
    for o in occ {
        let lo = windows.partition_point(|w| (w.0, w.2) < (o.global_tid, o.end));
        let inside = windows[lo..].iter().take_while(|w| w.0 == o.global_tid).any(|w| w.1 <= o.start && o.end <= w.2);
        if inside {
            n += 1;
            let e = by_label.entry(folder.add(&o.label, 1).to_string()).or_default();
            e.0 += 1;
            e.1 += o.end - o.start;
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let mut labels: Vec<LabelCount> = by_label
        .into_iter()
        .map(|(label, (occurrences, wall_ns))| LabelCount { label, occurrences, wall_ns })
        .collect();
    labels.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.label.cmp(&b.label)));
    let shown: Vec<String> = labels.iter().take(3).map(|l| format!("{} ×{}", l.label, l.occurrences)).collect();
    labels.truncate(10);
    let warning = format!(
        "{n} NVTX range(s) ({}{}) were recorded while their thread captured a CUDA graph (between a stream capture's begin and end calls, {} capture(s)): a range inside a captured graph is emitted once, when the graph is captured, and never when the graph replays, so these labels count the capture, not the replays' work; put step and phase ranges around the graph launch, outside the captured region",
        shown.join(", "),
        if labels.len() > 3 { ", …" } else { "" },
        windows.len()
    );
    Ok(Some(RangesInCapture { captures: windows.len() as u64, occurrences: n, labels, warning }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(label: &str, tid: i64, start: i64, end: i64) -> Occurrence {
        Occurrence {
            label: label.into(),
            global_tid: tid,
            start,
            end,
            event_type: 59,
            domain_id: None,
            depth: 0,
            parent: None,
        }
    }

    #[test]
    fn opaque_is_the_uncovered_part_of_each_iteration() {
        // iteration [0, 100): children [10, 30), [20, 40) (overlapping), [60, 70); a grandchild [62, 65);
        // a range on another thread and one sticking out are not children.
        let occ = vec![
            o("P.engine.iteration", 1, 0, 100),
            o("P.a", 1, 10, 30),
            o("P.b", 1, 20, 40),
            o("P.c", 1, 60, 70),
            o("P.d", 1, 62, 65),
            o("P.out", 1, 90, 120),
            o("P.engine.iteration", 1, 200, 210),
            o("P.x", 2, 0, 100),
        ];
        let (it, mut gaps) = opaque(&occ, "P.engine.iteration", usize::MAX);
        assert_eq!(it.occurrences, 2);
        assert_eq!(it.wall_ns, 110);
        assert_eq!(it.named_ns, 40);
        assert_eq!(it.opaque_ns, 70);
        assert_eq!(it.without_children, 1);
        gaps.sort_by_key(|g| g.start);
        let got: Vec<(i64, i64, Option<&str>, Option<&str>)> =
            gaps.iter().map(|g| (g.start, g.end, g.after.as_deref(), g.before.as_deref())).collect();
        assert_eq!(
            got,
            vec![
                (0, 10, None, Some("P.a")),
                (40, 60, Some("P.b"), Some("P.c")),
                (70, 100, Some("P.c"), None),
                (200, 210, None, None)
            ]
        );
        assert_eq!(it.engine_threads.len(), 1);
    }

    #[test]
    fn top_gaps_are_the_first_of_a_stable_sort_of_all() {
        // gaps of equal duration and start on twin iterations: the order found breaks the tie
        let occ = vec![
            o("P.engine.iteration", 1, 0, 100),
            o("P.engine.iteration", 1, 0, 100),
            o("P.a", 1, 50, 60),
            o("P.engine.iteration", 1, 200, 240),
            o("P.b", 1, 210, 220),
            o("P.engine.iteration", 2, 0, 40),
        ];
        let (_, mut all) = opaque(&occ, "P.engine.iteration", usize::MAX);
        all.sort_by(|a, b| {
            b.duration_ns.cmp(&a.duration_ns).then(a.start.cmp(&b.start)).then(a.global_tid.cmp(&b.global_tid))
        });
        for keep in 0..=all.len() + 1 {
            let (_, top) = opaque(&occ, "P.engine.iteration", keep);
            assert_eq!(top, all[..keep.min(all.len())], "keep {keep}");
        }
        assert_eq!(all[0].iteration_index, 0, "twins: the first found first");
        assert_eq!(all[1].iteration_index, 1);
    }

    #[test]
    fn prefix_is_inferred_from_the_most_frequent_iteration_label() {
        let occ =
            vec![o("a.engine.iteration", 1, 0, 1), o("b.engine.iteration", 1, 2, 3), o("b.engine.iteration", 1, 4, 5)];
        assert_eq!(infer_prefix(&occ).as_deref(), Some("b"));
        assert_eq!(infer_prefix(&occ[..1]).as_deref(), Some("a"));
        assert_eq!(infer_prefix(&[o("x", 1, 0, 1)]), None);
    }

    /// Each distinct label folded once with its count is the fold of every occurrence one by one (labels that
    /// fold together, prefixes of both kinds, labels without a prefix).
    #[test]
    fn prefixes_of_distinct_labels_are_those_of_every_occurrence() {
        let pool = [
            "engine.step_12",
            "engine.step_13",
            "engine::decode 7",
            "engine::decode 8",
            "req 3.prefill",
            "plain",
            "P.engine.iteration",
            "b.x",
        ];
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
        for _ in 0..200 {
            let occ: Vec<Occurrence> =
                (0..next(40)).map(|i| o(pool[next(pool.len() as i64) as usize], 1, i, i + 1)).collect();
            // the definition: every occurrence folded, cut and counted
            let mut per: BTreeMap<String, (BTreeSet<String>, u64)> = BTreeMap::new();
            let mut folder = crate::labels::Folder::new();
            // a framework's own ranges (here `engine::decode N`, namespace::op) are left out
            for x in occ.iter().filter(|x| !crate::framework::is_framework(&x.label)) {
                let l = folder.add(&x.label, 1);
                if let Some(p) = label_prefix(&l) {
                    let e = per.entry(p).or_default();
                    e.0.insert(l);
                    e.1 += 1;
                }
            }
            let mut want: Vec<PrefixCount> = per
                .into_iter()
                .map(|(prefix, (l, n))| PrefixCount { prefix, labels: l.len() as u64, occurrences: n })
                .collect();
            want.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.prefix.cmp(&b.prefix)));
            let got = prefixes_seen(&occ);
            let key =
                |v: &[PrefixCount]| v.iter().map(|p| (p.prefix.clone(), p.labels, p.occurrences)).collect::<Vec<_>>();
            assert_eq!(key(&got), key(&want), "{:?}", occ.iter().map(|x| &*x.label).collect::<Vec<_>>());
        }
    }

    #[test]
    fn thresholds_are_validated() {
        assert!(ReadinessOptions { max_opaque_share: 0.0, ..Default::default() }.validate().is_err());
        assert!(ReadinessOptions { max_opaque_share: 1.5, ..Default::default() }.validate().is_err());
        assert!(ReadinessOptions { range_prefix: Some(".".into()), ..Default::default() }.validate().is_err());
        assert!(ReadinessOptions::default().validate().is_ok());
    }
}
