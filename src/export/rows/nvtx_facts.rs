//! What one read of every `NVTX_EVENTS` row tells besides its ranges: [`NvtxFacts`] and each thread's marks.

use super::*;

/// What one read of every `NVTX_EVENTS` row tells besides its ranges (the parallel NVTX read of `fold.rs` with
/// stats): the table's [`TimedStats`] and each thread's marks and ranges ([`NvtxThreads`]), each None when a
/// value is not an INTEGER (its question then falls back to its own scan, as without this read).
#[derive(Debug, Clone)]
pub struct NvtxFacts {
    pub(super) stats: Option<TimedStats>,
    pub(super) threads: Option<NvtxThreads>,
}

impl NvtxFacts {
    pub(crate) fn new(t: &crate::export::TableInfo, keep: Keep) -> NvtxFacts {
        NvtxFacts { stats: Some(TimedStats::new(t, keep)), threads: Some(NvtxThreads::default()) }
    }

    /// Count a row of [`nvtx_columns`] followed by [`TimedStats::columns`] at `at` (what [`scan_timed_stats`]
    /// and [`Export::nvtx_on_runtime_threads`]'s scan count of it).
    pub(crate) fn add_row(&mut self, r: &RawRow, at: usize) {
        if self.stats.as_mut().is_some_and(|st| !st.add_timed_row(r, at)) {
            self.stats = None;
        }
        // the columns of `nvtx_columns`: start 1, end 2, eventType 3, globalTid 6
        if self.threads.as_mut().is_some_and(|th| !th.add(r.int(3), r.int(1), r.int(2), r.int(6))) {
            self.threads = None;
        }
    }

    /// The facts of the parts of a read, in rowid order.
    pub(crate) fn merge(parts: Vec<NvtxFacts>) -> NvtxFacts {
        let mut threads = Some(NvtxThreads::default());
        let mut stats = Vec::with_capacity(parts.len());
        for p in parts {
            stats.push(p.stats);
            threads = threads.zip(p.threads).map(|(mut a, b)| {
                a.append(b);
                a
            });
        }
        NvtxFacts { stats: merge_stats(stats), threads }
    }
}

/// The NVTX marks, push/pop and start/end ranges of each thread (`globalTid`, not NULL): their count, their
/// starts and `max(start, end)` over those with a start (what [`Export::nvtx_on_runtime_threads`] counts).
#[derive(Debug, Clone, Default)]
pub(crate) struct NvtxThreads(crate::fx::FxMap<i64, ThreadMarks>);

#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadMarks {
    pub(super) rows: i64,
    pub(super) starts: Vec<i64>,
    pub(super) last: Option<i64>,
}

impl NvtxThreads {
    /// Count a row of the cells `event_type`, `start`, `end` and `global_tid` when it is a mark or a range;
    /// false when its `start`, `end` or `globalTid` is not an INTEGER ([`Export::nvtx_on_runtime_threads`] then
    /// asks SQL).
    pub(super) fn add(&mut self, event_type: IntCell, start: IntCell, end: IntCell, global_tid: IntCell) -> bool {
        if !matches!(event_type, IntCell::Int(t) if NVTX_MARKS_AND_RANGES.contains(&t)) {
            return true;
        }
        let (Ok(s), Ok(e), Ok(g)) = (int_cell(start), int_cell(end), int_cell(global_tid)) else {
            return false;
        };
        if let Some(g) = g {
            let m = self.0.entry(g).or_default();
            m.rows += 1;
            if let Some(s) = s {
                m.starts.push(s);
                let v = s.max(e.unwrap_or(s));
                m.last = Some(m.last.map_or(v, |l| l.max(v)));
            }
        }
        true
    }

    pub(super) fn append(&mut self, o: NvtxThreads) {
        for (g, m) in o.0 {
            let x = self.0.entry(g).or_default();
            x.rows += m.rows;
            x.starts.extend(m.starts);
            x.last = x.last.max(m.last);
        }
    }

    /// `(count, count starting after after_ns, max(start, end))` of the rows on `tids`.
    pub(super) fn on(&self, tids: &crate::fx::FxSet<i64>, after_ns: i64) -> (i64, i64, i64) {
        let (mut n, mut after, mut last) = (0, 0, None::<i64>);
        for (_, m) in self.0.iter().filter(|(g, _)| tids.contains(g)) {
            n += m.rows;
            after += m.starts.iter().filter(|&&s| s > after_ns).count() as i64;
            last = last.max(m.last);
        }
        (n, after, last.unwrap_or(0))
    }
}

/// The NVTX event types [`Export::nvtx_on_runtime_threads`] counts.
pub(super) const NVTX_MARKS_AND_RANGES: [i64; 3] =
    [schema::nvtx::MARK, schema::nvtx::PUSH_POP, schema::nvtx::START_END];
