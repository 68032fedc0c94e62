//! The per-occurrence detail of an analysis ([`OccurrenceTable`]): the arrays the phases filled, kept as they
//! are, read one occurrence at a time. Building public vectors of every occurrence (`Occurrence` about 88 bytes,
//! `OccurrenceMetrics` about 140) doubled the analysis's peak on label-heavy captures: 2.3 M PyTorch op ranges
//! took 464 MB more at the end of the analysis, beside the arrays they were copied from.

use super::*;

/// One kept occurrence as [`OccurrenceTable::get`] reads it: [`Occurrence`] with its label borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OccurrenceRef<'a> {
    /// The label: the message, prefixed with `DOMAIN:` for a named NVTX domain.
    pub label: &'a str,
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
    /// Index of the immediately enclosing kept occurrence.
    pub parent: Option<usize>,
}

/// The kept occurrences of an analysis and their metrics ([`OccurrenceMetrics`]), by index (the order of the
/// analysis: by thread, then start): the arrays the analysis filled, about 60 bytes an occurrence and 72 more
/// for one with device rows ([`DevTable`]).
#[derive(Clone, Default)]
pub struct OccurrenceTable {
    labels: Vec<std::sync::Arc<str>>,
    occ: std::sync::Arc<Vec<COcc>>,
    domains: Domains,
    /// The thread slices `(globalTid, lo, hi)` ([`slice_at`]).
    slices: Vec<(i64, usize, usize)>,
    dev: DevTable,
    /// By occurrence, or by kept occurrence once metrics are kept for some only (`calls_kept`).
    runtime_calls: Vec<u32>,
    calls_kept: Option<Slots>,
    syncs: SyncTable,
}

impl OccurrenceTable {
    /// The detail of a finished analysis (its per-occurrence arrays move here; nothing is copied).
    pub(super) fn of_work(w: Work) -> OccurrenceTable {
        let Work { occ, label_names, domains, dev, runtime_calls, syncs, slices, .. } = w;
        let n = occ.len();
        let t = OccurrenceTable {
            labels: occurrences::shared_labels(&label_names),
            occ,
            domains,
            slices,
            dev,
            runtime_calls,
            calls_kept: None,
            syncs,
        };
        debug_assert!(t.slices.last().is_none_or(|s| s.2 == n) && t.dev.len() == n);
        debug_assert!(t.runtime_calls.len() == n);
        t
    }

    pub fn len(&self) -> usize {
        self.occ.len()
    }

    pub fn is_empty(&self) -> bool {
        self.occ.is_empty()
    }

    /// Occurrence `i` (panics when out of range, as indexing a Vec does).
    pub fn get(&self, i: usize) -> OccurrenceRef<'_> {
        let o = &self.occ[i];
        OccurrenceRef {
            label: &self.labels[o.label as usize],
            global_tid: self.slices[slice_at(&self.slices, i) as usize].0,
            start: o.start,
            end: o.end,
            event_type: o.event_type() as i64,
            domain_id: Some(o.domain_id(&self.domains)).filter(|&d| d != 0),
            depth: o.depth,
            parent: (o.parent != u32::MAX).then_some(o.parent as usize),
        }
    }

    /// Occurrence `i`'s label.
    pub fn label(&self, i: usize) -> &str {
        &self.labels[self.occ[i].label as usize]
    }

    /// Occurrence `i` owning its label (a shared string: cheap).
    pub fn occurrence(&self, i: usize) -> Occurrence {
        let o = self.get(i);
        Occurrence {
            label: self.labels[self.occ[i].label as usize].clone(),
            global_tid: o.global_tid,
            start: o.start,
            end: o.end,
            event_type: o.event_type,
            domain_id: o.domain_id,
            depth: o.depth,
            parent: o.parent,
        }
    }

    /// Occurrence `i`'s metrics.
    pub fn metrics(&self, i: usize) -> OccurrenceMetrics {
        let (m, n) = (self.dev.met(i), self.dev.counts(i));
        let (sync_calls, sync_ns) = self.syncs.totals(i);
        OccurrenceMetrics {
            runtime_calls: self.runtime_calls(i),
            kernels: n.kernels.into(),
            memcpys: n.memcpys.into(),
            memsets: n.memsets.into(),
            graph_traces: n.graph_traces.into(),
            kernel_work_ns: n.kernel_work_ns,
            busy_ns: m.busy_ns,
            span_ns: m.span_ns(),
            coverage_ns: m.coverage_ns,
            first_device_start: m.has_device().then_some(m.first),
            last_device_end: m.has_device().then_some(m.cur_e),
            sync_calls,
            sync_ns,
            sync: self.syncs.of(i).collect(),
        }
    }

    /// Keep the device metrics, row counts, sync statistics and runtime call counts of the occurrences `keep`
    /// (ascending indices) only: the others then read as occurrences without device rows, syncs or runtime calls
    /// (on a label-heavy capture most occurrences are op ranges: 56 bytes each with device rows, and 4 for the
    /// calls of every one).
    fn keep_metrics_of(&mut self, keep: &[usize]) {
        debug_assert!(keep.windows(2).all(|w| w[0] < w[1]));
        self.dev.retain(keep);
        self.syncs.retain(keep);
        // read through runtime_calls(i): a table kept once before is indexed by its kept occurrences
        let calls: Vec<u32> = keep.iter().map(|&i| self.runtime_calls(i) as u32).collect();
        self.runtime_calls = calls;
        self.calls_kept = Some(Slots::of(self.occ.len(), keep.iter().copied()));
    }

    /// Keep the metrics of the occurrences for which `keep(label, depth)` only ([`OccurrenceTable::keep_metrics_of`];
    /// asked once per label and depth): the step budget its steps', report's evidence what
    /// [`crate::step_label::reads_metrics`] names.
    pub fn keep_metrics_where(&mut self, keep: impl Fn(&str, u32) -> bool) {
        let mut asked: crate::fx::FxMap<(u32, u32), bool> = Default::default();
        let kept: Vec<usize> = (0..self.occ.len())
            .filter(|&i| {
                let o = &self.occ[i];
                *asked.entry((o.label, o.depth)).or_insert_with(|| keep(&self.labels[o.label as usize], o.depth))
            })
            .collect();
        self.keep_metrics_of(&kept);
    }

    /// Occurrence `i`'s runtime calls (the join's; 0 for one whose metrics were not kept).
    pub fn runtime_calls(&self, i: usize) -> u64 {
        let at = match &self.calls_kept {
            None => Some(i),
            Some(s) => s.get(i).map(|k| k as usize),
        };
        at.and_then(|k| self.runtime_calls.get(k)).map_or(0, |&n| u64::from(n))
    }

    /// Occurrence `i`'s `|D|`, the union of its device rows.
    pub fn busy_ns(&self, i: usize) -> i64 {
        self.dev.met(i).busy_ns
    }

    /// Occurrence `i`'s `max(d.end)` over its device rows, None without any.
    pub fn last_device_end(&self, i: usize) -> Option<i64> {
        let m = self.dev.met(i);
        m.has_device().then_some(m.cur_e)
    }

    /// Occurrence `i`'s device rows (all kinds).
    pub fn device_rows(&self, i: usize) -> u64 {
        self.dev.counts(i).device_rows()
    }

    /// Occurrence `i`'s kernels.
    pub fn kernels(&self, i: usize) -> u64 {
        self.dev.counts(i).kernels.into()
    }

    /// Every occurrence, in order.
    pub fn iter(&self) -> impl Iterator<Item = OccurrenceRef<'_>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The indices of the occurrences labelled `label` (compared by label id: one string comparison per label).
    pub fn indices_of<'a>(&'a self, label: &str) -> impl Iterator<Item = usize> + 'a {
        let id = self.labels.iter().position(|l| **l == *label).map(|i| i as u32);
        self.occ.iter().enumerate().filter(move |(_, o)| Some(o.label) == id).map(|(i, _)| i)
    }
}

impl std::fmt::Debug for OccurrenceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OccurrenceTable({} occurrences, {} labels)", self.occ.len(), self.labels.len())
    }
}

#[cfg(test)]
mod tests {
    use crate::sqlite_ranges::{analyze, OccurrenceMetrics, RangesOptions};

    /// Kept occurrences read their metrics as before; the others as occurrences without device rows, syncs or
    /// runtime calls, on a real capture with kernels, copies and blocking syncs.
    #[test]
    fn kept_metrics_are_the_kept_occurrences_own() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1/decode_mixed.sqlite");
        let export = crate::export::Export::open(&path).unwrap();
        let all = analyze(&export, &RangesOptions::default()).unwrap().occurrences;
        let with_rows: Vec<usize> = (0..all.len()).filter(|&i| all.device_rows(i) > 0).collect();
        let with_syncs: Vec<usize> = (0..all.len()).filter(|&i| all.metrics(i).sync_calls > 0).collect();
        assert!(with_rows.len() >= 4 && with_syncs.len() >= 2, "{} {}", with_rows.len(), with_syncs.len());
        // every other occurrence with device rows, and the first with syncs
        let mut keep: Vec<usize> = with_rows.iter().step_by(2).copied().chain([with_syncs[0]]).collect();
        keep.sort_unstable();
        keep.dedup();
        let mut t = all.clone();
        t.keep_metrics_of(&keep);
        let (mut kept, mut dropped) = (0, 0);
        for i in 0..all.len() {
            if keep.binary_search(&i).is_ok() {
                assert_eq!(t.metrics(i), all.metrics(i), "kept occurrence {i}");
                kept += 1;
            } else {
                let none = OccurrenceMetrics::default();
                assert_eq!(t.metrics(i), none, "dropped occurrence {i}");
                dropped += usize::from(all.metrics(i) != none);
            }
            assert_eq!(t.get(i).start, all.get(i).start);
        }
        assert!(kept == keep.len() && dropped > 0, "{kept} kept, {dropped} changed by the drop");
        // keeping again, a subset of the kept: each still reads its own metrics
        let again: Vec<usize> = keep.iter().copied().step_by(2).collect();
        let mut u = t.clone();
        u.keep_metrics_of(&again);
        for &i in &again {
            assert_eq!(u.metrics(i), all.metrics(i), "kept twice {i}");
        }
        // (what makes it a test: kept occurrences with runtime calls, whose kept index is not their own)
        assert!(again.iter().enumerate().any(|(k, &i)| all.runtime_calls(i) > 0 && k != i));
    }
}
