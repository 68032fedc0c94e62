//! Opaque time: the part of each iteration that no child range covers, and the largest gaps.

use super::*;

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
pub(super) struct TopGaps {
    keep: usize,
    offered: u64,
    best: Vec<(GapRank, OpaqueGap)>,
}

/// (duration descending, start, thread, order offered): smaller ranks first.
pub(super) type GapRank = (std::cmp::Reverse<i64>, i64, i64, u64);

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
