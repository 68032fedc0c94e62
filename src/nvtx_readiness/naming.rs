//! Label prefixes and id patterns: which prefix a capture's ranges use, which one to suggest, which labels
//! carry ids.

use super::*;

/// How many prefixes and id patterns a document lists.
pub const LIST_LIMIT: usize = 50;

pub use crate::label_families::label_prefix;

/// The prefixes of a set of occurrences (labels folded first), most occurrences first (ties: byte order). A
/// framework's own ranges (`aten::*`, XLA's `TSL:` domain, NCCL/cuBLAS API ranges: [`crate::framework`]) are
/// evidence, not the engine's naming: they are left out (XLA's `TSL:Thunk:#hlo_op=…` used to be suggested as
/// the prefix of a JAX decode loop over the user's `jaxdec.`).
pub fn prefixes_seen<'a>(all: impl IntoIterator<Item = &'a Occurrence>) -> Vec<PrefixCount> {
    // each distinct label folded once, with its occurrences (a label repeats on every step: 500 k occurrences
    // of a few labels were folded, cut and looked up one by one)
    let counts = label_counts(all).into_iter().filter(|(l, _)| !crate::framework::is_framework(l));
    let mut per: BTreeMap<String, (BTreeSet<String>, u64)> = BTreeMap::new();
    let mut folder = crate::labels::Folder::new();
    for (raw, n) in counts {
        let l = folder.add(raw, n);
        if let Some(p) = label_prefix(l) {
            let e = per.entry(p).or_default();
            e.0.insert(l.to_string());
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
pub(super) fn suggest_engine_prefix(
    export: &Export,
    all: &[Occurrence],
    seen: &[PrefixCount],
) -> Result<Option<String>> {
    let cuda = export.runtime_thread_ids()?;
    // every range on a thread that made CUDA calls (a single-process PyTorch run): the prefixes are `seen`'s
    if all.iter().all(|o| cuda.contains(&o.global_tid)) {
        return Ok(suggest_prefix(seen));
    }
    let engine = all.iter().filter(|o| cuda.contains(&o.global_tid));
    Ok(suggest_prefix(&prefixes_seen(engine)).or_else(|| suggest_prefix(seen)))
}

/// Id-bearing labels grouped by the label they fold into ([`crate::labels`], the rule `sqlite-ranges`
/// folds with), most occurrences first, at most [`LIST_LIMIT`].
pub fn id_patterns<'a>(occs: impl IntoIterator<Item = &'a Occurrence>) -> Vec<IdPattern> {
    let mut f = crate::labels::Folder::new();
    for (l, n) in label_counts(occs) {
        f.add(l, n);
    }
    patterns_of(f.report(LIST_LIMIT))
}

/// [`id_patterns`] of `occs`; when their framework labels were folded as they were read
/// ([`crate::sqlite_ranges::load_occurrences_framework_folded`]), the same patterns, from `folds` for those
/// labels (`under`: only the folded labels that start with it, as `occs` do).
pub fn id_patterns_with<'a>(
    folds: Option<&crate::sqlite_ranges::FrameworkFolds>,
    occs: impl IntoIterator<Item = &'a Occurrence>,
    under: Option<&str>,
) -> Vec<IdPattern> {
    match folds {
        Some(f) => patterns_of(f.report(occs, |l| under.is_none_or(|u| l.starts_with(u)), LIST_LIMIT)),
        None => id_patterns(occs),
    }
}

fn patterns_of(r: crate::labels::FoldReport) -> Vec<IdPattern> {
    r.folded
        .into_iter()
        .map(|x| IdPattern { pattern: x.label, labels: x.raw_labels, occurrences: x.occurrences, examples: x.examples })
        .collect()
}

/// Each distinct label of `occs` with its number of occurrences, in order of first appearance. Counted by the
/// label's shared string first (the loaded occurrences of one label share it): one pointer hashed per
/// occurrence, not the label (2 M PyTorch op labels of about 100 bytes each took a third of a readiness run on
/// an emit_nvtx capture); labels equal but held apart are then merged.
pub(super) fn label_counts<'a>(occs: impl IntoIterator<Item = &'a Occurrence>) -> Vec<(&'a str, u64)> {
    use std::collections::hash_map::Entry;
    let mut by_ptr: crate::fx::FxMap<usize, usize> = Default::default();
    let mut held: Vec<(&'a str, u64)> = Vec::new();
    for o in occs {
        match by_ptr.entry(std::sync::Arc::as_ptr(&o.label) as *const u8 as usize) {
            Entry::Occupied(e) => held[*e.get()].1 += 1,
            Entry::Vacant(e) => {
                e.insert(held.len());
                held.push((&o.label, 1));
            }
        }
    }
    let mut by_label: crate::fx::FxMap<&str, usize> = Default::default();
    let mut out: Vec<(&'a str, u64)> = Vec::with_capacity(held.len());
    for (l, n) in held {
        match by_label.entry(l) {
            Entry::Occupied(e) => out[*e.get()].1 += n,
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push((l, n));
            }
        }
    }
    out
}
