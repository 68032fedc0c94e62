//! `nvtx-readiness`: can this trace name where the time went? (`nsyskit.readiness/v1`, issue 10).
//!
//! Built on `sqlite-ranges`' reading code ([`crate::sqlite_ranges::load_occurrences`]: labels, threads, depth, parent;
//! [`crate::sqlite_ranges::high_cardinality`]; [`crate::sqlite_ranges::normalize_sync_api`]). Per range prefix `P` it reports
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
use crate::sqlite_ranges::{self, Occurrence};

mod capture;
mod doc;
mod naming;
mod opaque;
mod syncs;

use capture::*;
pub use doc::*;
pub use naming::*;
pub use opaque::*;
pub use syncs::*;

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
pub fn opaque_step_share(occ: &crate::sqlite_ranges::OccurrenceTable, label: &str) -> Option<f64> {
    let wall: i64 = occ.iter().filter(|o| o.label == label).map(|o| o.end - o.start).sum();
    if wall <= 0 {
        return None;
    }
    // each range nested in a step, clipped to the step it is nested in (the nearest enclosing one)
    let nested = || {
        occ.iter().filter(|o| o.label != label).filter_map(|o| {
            let mut p = o.parent;
            while let Some(j) = p {
                let step = occ.get(j);
                if step.label == label {
                    let (a, b) = (o.start.max(step.start), o.end.min(step.end));
                    return (b > a).then_some((j, a, b));
                }
                p = step.parent;
            }
            None
        })
    };
    // per step, the union of its nested ranges made as they come: the analysis's order is by thread, then start,
    // so a step's nested ranges come by start (never the ranges themselves: 2 M op ranges on emit_nvtx ×10, 51 MB
    // held at the CI chain's peak when they were gathered per step); in another order, gathered and sorted
    let mut covered: HashMap<usize, Union> = HashMap::new();
    if !nested().all(|(j, a, b)| covered.entry(j).or_default().add(a, b)) {
        let mut all: Vec<(usize, i64, i64)> = nested().collect();
        all.sort_unstable();
        covered.clear();
        for (j, a, b) in all {
            // by step, then start: every one is added
            covered.entry(j).or_default().add(a, b);
        }
    }
    let named: i64 = covered.values().map(Union::len).sum();
    Some(1.0 - named as f64 / wall as f64)
}

/// The length of a union of intervals given by start.
#[derive(Default)]
struct Union {
    done: i64,
    open: Option<(i64, i64)>,
}

impl Union {
    /// Add `[a, b)`; false when `a` comes before the start of the run still open (it could bridge two runs).
    fn add(&mut self, a: i64, b: i64) -> bool {
        match &mut self.open {
            Some((s, _)) if a < *s => return false,
            Some((_, e)) if a <= *e => *e = (*e).max(b),
            Some((s, e)) => {
                self.done += *e - *s;
                self.open = Some((a, b));
            }
            None => self.open = Some((a, b)),
        }
        true
    }

    fn len(&self) -> i64 {
        self.done + self.open.map_or(0, |(s, e)| e - s)
    }
}

/// Whether a host-side class resting on `unattributed` (its share of the typical steps' wall) rests on time no
/// range names: the opaque share is above [`DEFAULT_MAX_OPAQUE_SHARE`] and the host time the nested ranges do
/// name could not reach the step budget's dominance share alone (a lower bound: all opaque time is taken as
/// unattributed). Such a class does not stand (report's and step-budget's `readiness.opaque_step`).
pub fn rests_on_opaque(unattributed: f64, opaque: f64) -> bool {
    opaque >= DEFAULT_MAX_OPAQUE_SHARE && unattributed - opaque < crate::stats::DOMINANT_SHARE
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
// Analysis

/// Open the capture (an `.nsys-rep` is exported with `nsys` into a temporary folder) and analyse it.
pub fn run(path: &Path, opts: &ReadinessOptions, nsys: Option<&Path>) -> Result<NvtxReadinessDoc> {
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
) -> Result<NvtxReadinessDoc> {
    document_with(export, source, opts, None)
}

/// What another analysis of the same export already read, so that a readiness document needs no scan of its
/// own (`gate-check --report --nvtx-readiness`: the report's ranges analysis).
pub struct SharedReads<'a> {
    /// Every occurrence, a framework's own under its folded label: [`sqlite_ranges::load_occurrences_framework_folded`].
    pub occurrences: sqlite_ranges::LoadedOccurrences,
    /// Every runtime call with a thread and an API name id, in any order, when the runtime table was read
    /// whole (None: the table is read here when there is one).
    pub runtime_calls: Option<&'a sqlite_ranges::RuntimeCalls>,
}

impl<'a> SharedReads<'a> {
    /// The reads of a ranges analysis that kept its occurrences
    /// ([`sqlite_ranges::analyze_with_intervals_keeping`]): `kept`, taken out of `collected`
    /// ([`sqlite_ranges::Collected::occurrences`]), is turned into the occurrences as it is given back.
    pub fn of(kept: sqlite_ranges::SharedOccurrences, collected: &'a sqlite_ranges::Collected) -> SharedReads<'a> {
        let runtime_calls = collected.runtime_read.then_some(&*collected.rows.runtime);
        SharedReads { occurrences: kept.into_loaded(), runtime_calls }
    }
}

/// [`document`], from `shared` reads when given (the same bytes).
pub fn document_with(
    export: &Export,
    source: &crate::export::CaptureSource,
    opts: &ReadinessOptions,
    shared: Option<SharedReads<'_>>,
) -> Result<NvtxReadinessDoc> {
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
pub fn analyze(export: &Export, opts: &ReadinessOptions) -> Result<NvtxReadinessDoc> {
    analyze_with(export, opts, None)
}

/// [`analyze`], from `shared` reads when given.
fn analyze_with(export: &Export, opts: &ReadinessOptions, shared: Option<SharedReads<'_>>) -> Result<NvtxReadinessDoc> {
    opts.validate()?;
    let mut ph = crate::phase::Phases::new("nvtx-readiness");
    // Every range (for the engine threads' labels outside the prefix), then the ones under the prefix (their
    // depth and parent are among ranges under the prefix, as `sqlite-ranges --range-prefix P.` reports them).
    // a capture that recorded no NVTX event reads as no range (the RETRY "no iteration range"), whether its
    // export has no NVTX_EVENTS table (lazy) or an empty one (--lazy=false): the ranges library's rule
    let (loaded, calls) = match shared {
        Some(s) => (s.occurrences, s.runtime_calls),
        // a framework's own ranges folded as they are read (an emit_nvtx capture's 205 708 distinct op labels are
        // never held): they are evidence, never the workload, and nothing below names one by its raw label
        None => (sqlite_ranges::load_occurrences_framework_folded(export)?, None),
    };
    ph.mark("load");
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

    ph.mark("cut");
    let seen = prefixes_seen(all);
    ph.mark("prefixes_seen");
    let Some(p) = prefix else {
        let facts = Facts { all, folds: loaded.framework_folds.as_ref(), calls, runtime: runtime.as_deref(), inferred };
        return without_prefix(export, opts, facts, seen, notes);
    };
    let under = format!("{p}.");
    // a prefix a framework's folded labels share (`--range-prefix CUDAGraphNode`): its taxonomy lists them raw
    let reread;
    let loaded = match &loaded.framework_folds {
        Some(f) if f.folds_under(&under) => {
            reread = sqlite_ranges::load_occurrences(export, &sqlite_ranges::RangesOptions::default())?;
            &reread
        }
        _ => &loaded,
    };
    let all = &loaded.occurrences;
    // what `load_occurrences` gives with `range_prefix: under`, without reading NVTX_EVENTS again
    let kept = sqlite_ranges::kept_under(loaded, &under);
    let occ: &[Occurrence] = &kept;
    let iter_label = format!("{p}.engine.iteration");

    let (per_label, taxonomy, outside_taxonomy) = taxonomy_of(occ, &p);

    // ---- opaque share
    let (iterations, gaps) = opaque(occ, &iter_label, TOP_GAPS);

    let naming = naming_of(all, occ, loaded.framework_folds.as_ref(), &iterations, &under);

    // ---- syncs, graphs
    let unenclosed = unenclosed_syncs_of(export, runtime.as_deref(), occ, calls)?;
    let replay_present = per_label.contains_key(format!("{p}.graph.replay").as_str());
    let graphs = with_ranges_in_capture(
        cuda_graphs(export, runtime.as_deref(), Some(&p), replay_present)?,
        export,
        all,
        &mut notes,
    )?;

    let (verdict, reason) = verdict_of(&iterations, opts, &iter_label, &under);
    if runtime.is_none() {
        notes.push(format!(
            "No {} table (a capture without CUDA): no blocking sync can be listed; that is a result, not an error.",
            schema::RUNTIME
        ));
    }
    let suggested_prefix =
        if iterations.occurrences == 0 { suggest_engine_prefix(export, all, &seen)?.filter(|s| *s != p) } else { None };
    let (schema, tool) = NvtxReadinessDoc::header();
    Ok(NvtxReadinessDoc {
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
        naming,
        unenclosed_syncs: unenclosed,
        suggested_prefix,
        prefixes_seen: seen.into_iter().take(LIST_LIMIT).collect(),
        notes,
    })
}

/// What the document without a prefix reads besides the export: every occurrence, the shared runtime calls,
/// the runtime table's name, and whether the prefix was inferred.
struct Facts<'a> {
    all: &'a [Occurrence],
    /// What the framework's labels of `all` folded at read were.
    folds: Option<&'a sqlite_ranges::FrameworkFolds>,
    calls: Option<&'a sqlite_ranges::RuntimeCalls>,
    runtime: Option<&'a str>,
    inferred: bool,
}

/// The RETRY document of a capture without a `<P>.engine.iteration` range (no prefix given or inferred).
fn without_prefix(
    export: &Export,
    opts: &ReadinessOptions,
    f: Facts<'_>,
    seen: Vec<PrefixCount>,
    mut notes: Vec<String>,
) -> Result<NvtxReadinessDoc> {
    let (schema, tool) = NvtxReadinessDoc::header();
    // no prefix: a sync inside ANY range is enclosed
    let mut ph = crate::phase::Phases::new("nvtx-readiness");
    let syncs = unenclosed_syncs_of(export, f.runtime, f.all, f.calls)?;
    ph.mark("unenclosed_syncs");
    notes.push("No range label ends in `.engine.iteration`: give --range-prefix P for a capture with P.engine.iteration ranges.".into());
    let suggested = suggest_engine_prefix(export, f.all, &seen)?;
    ph.mark("suggest_engine_prefix");
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
    Ok(NvtxReadinessDoc {
        schema,
        tool,
        verdict: ReadinessVerdict::Retry,
        reason: format!("{RETRY_REASON}: no `<P>.engine.iteration` range in this capture, so no time can be attributed to engine phases{hint}"),
        source: source(export, None, f.inferred)?,
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
        cuda_graphs: with_ranges_in_capture(cuda_graphs(export, f.runtime, None, false)?, export, f.all, &mut notes)?,
        naming: Naming {
            labels_with_ids: naming::id_patterns_with(f.folds, f.all, None),
            outside_prefix_on_engine_threads: Vec::new(),
            labels_at_several_depths: Vec::new(),
        },
        unenclosed_syncs: syncs,
        prefixes_seen: seen.into_iter().take(LIST_LIMIT).collect(),
        suggested_prefix: suggested,
        notes,
    })
}

/// Occurrences, wall time and threads per label under the prefix `p`; the taxonomy's entries; the labels
/// outside the taxonomy, sorted.
#[allow(clippy::type_complexity)]
fn taxonomy_of<'a>(
    occ: &'a [Occurrence],
    p: &str,
) -> (BTreeMap<&'a str, (u64, i64, BTreeSet<i64>)>, Vec<TaxonomyEntry>, Vec<LabelCount>) {
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

    (per_label, taxonomy, outside_taxonomy)
}

/// The naming rules: labels with ids, labels outside the prefix on engine threads, labels at several depths.
fn naming_of(
    all: &[Occurrence],
    occ: &[Occurrence],
    folds: Option<&sqlite_ranges::FrameworkFolds>,
    iterations: &Iterations,
    under: &str,
) -> Naming {
    let engine: BTreeSet<i64> = iterations.engine_threads.iter().map(|t| t.global_tid).collect();
    let labels_with_ids: Vec<IdPattern> = naming::id_patterns_with(folds, occ, Some(under));
    let mut outside: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
    for o in all.iter().filter(|o| engine.contains(&o.global_tid) && !o.label.starts_with(under)) {
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

    Naming { labels_with_ids, outside_prefix_on_engine_threads, labels_at_several_depths }
}

/// READY when the iterations' opaque share is below the threshold, else RETRY, with the reason.
fn verdict_of(
    iterations: &Iterations,
    opts: &ReadinessOptions,
    iter_label: &str,
    under: &str,
) -> (ReadinessVerdict, String) {
    match iterations.opaque_share {
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
    }
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

#[cfg(test)]
mod tests;
