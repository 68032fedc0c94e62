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
        // held until G4: without the room the parts' doubling left (up to half: 8 MB became ~5 on emit_nvtx ×10)
        if let Some(t) = threads.as_mut() {
            t.0.values_mut().for_each(|m| m.starts.bytes.shrink_to_fit());
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
    pub(super) starts: Starts,
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
            x.starts.append(&m.starts);
            x.last = x.last.max(m.last);
        }
    }

    /// `(count, count starting after after_ns, max(start, end))` of the rows on `tids`.
    pub(super) fn on(&self, tids: &crate::fx::FxSet<i64>, after_ns: i64) -> (i64, i64, i64) {
        let (mut n, mut after, mut last) = (0, 0, None::<i64>);
        for (_, m) in self.0.iter().filter(|(g, _)| tids.contains(g)) {
            n += m.rows;
            after += m.starts.iter().filter(|&s| s > after_ns).count() as i64;
            last = last.max(m.last);
        }
        (n, after, last.unwrap_or(0))
    }
}

/// A thread's NVTX starts in little room: each as the zigzag varint of its difference from the one before (a
/// thread's rows come about in time order: 1 to 3 bytes a start, not 8; 2.06 M op ranges on emit_nvtx ×10: 16 MB
/// held from the NVTX read to G4, at the peak of every tool that reads it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Starts {
    bytes: Vec<u8>,
    last: i64,
}

impl Starts {
    pub(super) fn push(&mut self, s: i64) {
        let d = s.wrapping_sub(self.last);
        self.last = s;
        let mut z = ((d << 1) ^ (d >> 63)) as u64;
        while z >= 0x80 {
            self.bytes.push((z as u8) | 0x80);
            z >>= 7;
        }
        self.bytes.push(z as u8);
    }

    /// `other`'s starts after these, in their order.
    pub(super) fn append(&mut self, other: &Starts) {
        other.iter().for_each(|s| self.push(s));
    }

    /// The starts, in the order pushed.
    pub(super) fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        let (mut at, mut last) = (0usize, 0i64);
        std::iter::from_fn(move || {
            let mut z = 0u64;
            let mut shift = 0;
            loop {
                let b = *self.bytes.get(at)?;
                at += 1;
                z |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    break;
                }
                shift += 7;
            }
            let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
            last = last.wrapping_add(d);
            Some(last)
        })
    }
}

/// The NVTX event types [`Export::nvtx_on_runtime_threads`] counts.
pub(super) const NVTX_MARKS_AND_RANGES: [i64; 3] =
    [schema::nvtx::MARK, schema::nvtx::PUSH_POP, schema::nvtx::START_END];

#[cfg(test)]
mod tests {
    use super::Starts;

    /// Any starts, in any order and at any distance, come back as pushed, appended ones after.
    #[test]
    fn starts_come_back_as_pushed() {
        let v = [0i64, 5, 5, 3, 1 << 40, -7, i64::MAX, i64::MIN, 0, 127, 128, -64, -65, 1_000_000_007];
        let mut s = Starts::default();
        v.iter().for_each(|&x| s.push(x));
        assert_eq!(s.iter().collect::<Vec<_>>(), v);
        let mut t = Starts::default();
        t.push(42);
        t.append(&s);
        assert_eq!(t.iter().collect::<Vec<_>>(), [42].iter().chain(&v).copied().collect::<Vec<_>>());
        assert!(s.bytes.len() < v.len() * 8, "{} bytes", s.bytes.len());
    }
}
