//! One scan per timed table ([`TimedStats`]): the facts many questions share (skips, counts, max(end), Σ
//! durations, kept intervals), computed once per export.

use super::*;

/// The timed tables of an export: NVTX and the CUDA ones.
pub const TIMED_TABLES: [&str; 7] = [
    schema::NVTX_EVENTS,
    schema::RUNTIME,
    schema::KERNEL,
    schema::MEMCPY,
    schema::MEMSET,
    schema::GRAPH_TRACE,
    schema::SYNCHRONIZATION,
];

// ---- one scan per timed table (perf helper, issue #19)
//
// The gates and the evidence bundle ask many questions of the same timed tables (impossible timestamps,
// skipped intervals, row counts, max(end), Σ durations, distinct threads, graph launches, node-level rows):
// each was its own SQL pass. They are answered here from one scan per table, computed once per export and
// in parallel threads (one read-only connection each) when several tables are asked for at once. A value of
// another type than INTEGER in a column read makes the table fall back to the SQL queries (same answers,
// SQLite's own semantics).

/// `(start, end)` of a valid row.
pub type Interval = (i64, i64);

/// [`Export::window_intervals`]: the valid intervals in parts, each part in its table's order (a rowid chunk
/// of a table read in parallel, or a whole table), the parts in table order; how many parts come from the first
/// table; the starts of that table's invalid rows. Kept in parts, the rows of a 5 M-kernel capture are never
/// concatenated (an 80 MB copy into fresh pages).
#[derive(Debug, Clone, Default)]
pub struct WindowRows {
    pub parts: Vec<IntervalPart>,
    pub first_parts: usize,
    pub first_invalid: Vec<i64>,
}

impl WindowRows {
    /// Every interval, in table order.
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.parts.iter().flat_map(IntervalPart::iter)
    }

    /// The intervals of the first table, in its order.
    pub fn first_table(&self) -> impl Iterator<Item = Interval> + '_ {
        self.parts[..self.first_parts].iter().flat_map(IntervalPart::iter)
    }
}

/// Intervals in 12 bytes each (5.6 M at 5 M kernels: 67 MB, not 90): the start and the length in 32 bits; an
/// interval of 2^32 - 1 ns or more has `u32::MAX` as its length and its end in `long`, by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnIntervals {
    rows: Vec<PackedInterval>,
    long: Vec<(usize, i64)>,
}

/// An interval of [`OwnIntervals`]: 12 bytes, aligned to 4 (the fields are only ever copied out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
struct PackedInterval {
    start: i64,
    len: u32,
}

impl OwnIntervals {
    pub fn push(&mut self, (s, e): Interval) {
        let len = match u32::try_from(e - s) {
            Ok(l) if l < u32::MAX => l,
            _ => {
                self.long.push((self.rows.len(), e));
                u32::MAX
            }
        };
        self.rows.push(PackedInterval { start: s, len });
    }
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    #[inline]
    fn open(&self, i: usize, p: PackedInterval) -> Interval {
        let start = p.start;
        match p.len {
            u32::MAX => (start, crate::beside::at(&self.long, i)),
            l => (start, start + l as i64),
        }
    }
    /// The start of interval `i`.
    #[inline]
    pub fn start(&self, i: usize) -> Option<i64> {
        self.rows.get(i).map(|p| p.start)
    }
    /// Interval `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Interval> {
        self.rows.get(i).map(|&p| self.open(i, p))
    }
    /// Every interval, in order.
    pub fn iter(&self) -> impl Iterator<Item = Interval> + '_ {
        let mut long = self.long.iter().peekable();
        self.rows.iter().enumerate().map(move |(i, &p)| {
            let start = p.start;
            match long.next_if(|&&(j, _)| j == i) {
                Some(&(_, e)) => (start, e),
                None => (start, start + p.len as i64),
            }
        })
    }
    fn is_sorted_by_start(&self) -> bool {
        self.rows.is_sorted_by_key(|p| p.start)
    }
}

impl FromIterator<Interval> for OwnIntervals {
    fn from_iter<I: IntoIterator<Item = Interval>>(it: I) -> OwnIntervals {
        let mut v = OwnIntervals::default();
        it.into_iter().for_each(|r| v.push(r));
        v
    }
}

/// A part of a table's valid intervals, in its order: copied by the scan that kept them, or the rows of a
/// device chunk that scan read and shared ([`DeviceDetail::Names`]: the intervals are these rows, not a copy).
#[derive(Debug, Clone)]
pub enum IntervalPart {
    Own(OwnIntervals),
    /// Chunk `.1` of the shared device rows.
    Rows(std::sync::Arc<Vec<DeviceChunk>>, usize),
}

impl IntervalPart {
    pub fn len(&self) -> usize {
        match self {
            IntervalPart::Own(v) => v.len(),
            IntervalPart::Rows(c, i) => c[*i].rows.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The intervals as a slice or as the chunk's rows (for lookups one by one: no reference counted on each).
    pub fn view(&self) -> PartView<'_> {
        match self {
            IntervalPart::Own(v) => PartView::Own(v),
            IntervalPart::Rows(c, k) => PartView::Rows(&c[*k]),
        }
    }
    /// Every interval, in order (the rows of a chunk read in one pass, not looked up one by one).
    pub fn iter(&self) -> impl Iterator<Item = Interval> + '_ {
        let (own, rows) = match self {
            IntervalPart::Own(v) => (Some(v.iter()), None),
            IntervalPart::Rows(c, k) => (None, Some(c[*k].intervals())),
        };
        own.into_iter().flatten().chain(rows.into_iter().flatten())
    }
    /// Sorted by start (an unsorted part of shared rows becomes a sorted copy).
    pub fn sort_by_start(&mut self) {
        let sorted = match self {
            IntervalPart::Own(v) => v.is_sorted_by_start(),
            IntervalPart::Rows(c, k) => c[*k].rows.is_sorted_by_key(|r| r.start),
        };
        if sorted {
            return;
        }
        let mut v: Vec<Interval> = self.iter().collect();
        v.sort_unstable_by_key(|r| r.0);
        *self = IntervalPart::Own(v.into_iter().collect());
    }
}

/// [`IntervalPart::view`].
#[derive(Debug, Clone, Copy)]
pub enum PartView<'a> {
    Own(&'a OwnIntervals),
    Rows(&'a DeviceChunk),
}

impl PartView<'_> {
    /// The number of intervals.
    pub fn len(&self) -> usize {
        match self {
            PartView::Own(v) => v.len(),
            PartView::Rows(c) => c.rows.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The start of interval `i`.
    #[inline]
    pub fn start(&self, i: usize) -> Option<i64> {
        match self {
            PartView::Own(v) => v.start(i),
            PartView::Rows(c) => c.rows.get(i).map(|r| r.start),
        }
    }
    /// Interval `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Interval> {
        match self {
            PartView::Own(v) => v.get(i),
            PartView::Rows(c) => c.interval(i),
        }
    }
}

/// Facts about every row of one timed table, from one scan.
#[derive(Debug, Clone, Default)]
pub struct TimedStats {
    /// `count(*)`.
    pub rows: i64,
    pub skips: IntervalSkips,
    /// `max(end)` over the valid rows.
    pub max_end: Option<i64>,
    /// Σ `end - start` over the valid rows; None when it overflows (the SQL query then decides).
    pub sum_dur: Option<i64>,
    /// The longest valid row: `(end - start, rowid)` (the first of equals in table order).
    pub(super) longest: Option<(i64, Option<i64>)>,
    /// The first row (table order) with a timestamp beyond ±[`MAX_TIMESTAMP_NS`].
    pub(super) bad_ts: Option<RowTimes>,
    /// Distinct non-NULL `globalTid` (when the table has the column).
    pub thread_ids: crate::fx::FxSet<i64>,
    /// Rows per non-NULL `nameId` (when the table has the column).
    pub name_counts: crate::fx::FxMap<i64, i64>,
    /// Rows with `graphNodeId` set (None when the table has no such column).
    pub node_rows: Option<i64>,
    /// `(start, end)` of the valid rows in table order, in the parts the scans read (one per rowid chunk),
    /// kept only when asked ([`Export::keep_intervals`]), and the starts of the invalid rows with a start;
    /// taken by [`Export::window_intervals`].
    pub(super) intervals: Option<(Vec<IntervalPart>, Vec<i64>)>,
    /// `demangledName` id → (rows, Σ `end - start`) over the valid rows, kept only when asked
    /// ([`Export::keep_kernel_names`]); None when a name id is not an INTEGER or a sum overflows (the SQL of
    /// [`Export::kernel_time_by_name`] then decides).
    pub(super) name_time: Option<crate::fx::FxMap<i64, (i64, i64)>>,
    /// The table has `globalTid` / `nameId` (what [`TimedStats::add_row`] counts).
    pub(super) threads: bool,
    pub(super) names: bool,
}

/// What a scan keeps besides the facts of [`TimedStats`], per table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Keep {
    /// The valid intervals (G5's window).
    pub intervals: bool,
    /// The kernel time by `demangledName` id.
    pub names: bool,
}

impl TimedStats {
    /// A copy without the kept intervals (only the gates take them, from the connection that kept them).
    pub(super) fn facts(&self) -> TimedStats {
        TimedStats {
            rows: self.rows,
            skips: self.skips,
            max_end: self.max_end,
            sum_dur: self.sum_dur,
            longest: self.longest,
            bad_ts: self.bad_ts,
            thread_ids: self.thread_ids.clone(),
            name_counts: self.name_counts.clone(),
            node_rows: self.node_rows,
            intervals: None,
            name_time: self.name_time.clone(),
            threads: self.threads,
            names: self.names,
        }
    }

    /// How many valid intervals the scan kept for the gates and nobody took yet.
    pub fn kept_intervals(&self) -> usize {
        self.intervals.as_ref().map_or(0, |(v, _)| v.iter().map(IntervalPart::len).sum())
    }

    /// The valid intervals this scan keeps are the rows it reads, shared afterwards ([`DeviceDetail::Names`]):
    /// none is copied; [`TimedStats::attach_rows`] names the chunk that holds them.
    pub(crate) fn leave_intervals_to_rows(&mut self) {
        if let Some((v, _)) = self.intervals.as_mut() {
            v.clear();
        }
    }

    /// The kept valid intervals of these stats are the rows of chunk `at` of `rows` (after
    /// [`TimedStats::leave_intervals_to_rows`]); nothing when no interval is kept.
    pub(crate) fn attach_rows(&mut self, rows: &std::sync::Arc<Vec<DeviceChunk>>, at: usize) {
        if let Some((v, _)) = self.intervals.as_mut() {
            debug_assert!(v.is_empty(), "intervals copied and left to the rows");
            *v = vec![IntervalPart::Rows(rows.clone(), at)];
        }
    }

    /// Add the stats of the next rows of the same table (chunks in table order).
    pub(super) fn append(&mut self, o: TimedStats) {
        self.rows += o.rows;
        self.skips.null_start += o.skips.null_start;
        self.skips.null_end += o.skips.null_end;
        self.skips.inverted += o.skips.inverted;
        self.max_end = match (self.max_end, o.max_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.sum_dur = match (self.sum_dur, o.sum_dur) {
            (Some(a), Some(b)) => a.checked_add(b),
            _ => None,
        };
        if self.bad_ts.is_none() {
            self.bad_ts = o.bad_ts;
        }
        if o.longest.is_some_and(|(d, _)| self.longest.is_none_or(|(l, _)| d > l)) {
            self.longest = o.longest;
        }
        self.thread_ids.extend(o.thread_ids);
        for (k, v) in o.name_counts {
            *self.name_counts.entry(k).or_default() += v;
        }
        self.node_rows = match (self.node_rows, o.node_rows) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        if let (Some((v, s)), Some((ov, os))) = (self.intervals.as_mut(), o.intervals) {
            // the parts moved, never copied
            v.extend(ov);
            s.extend_from_slice(&os);
        }
        self.name_time = match (self.name_time.take(), o.name_time) {
            (Some(mut a), Some(b)) => b
                .into_iter()
                .try_for_each(|(id, (n, t))| {
                    let e = a.entry(id).or_insert((0, 0));
                    *e = (e.0 + n, e.1.checked_add(t)?);
                    Some(())
                })
                .map(|_| a),
            _ => None,
        };
    }
}

/// One scan of a timed table (or of one rowid range of it) on `conn`; Ok(None) when a value is not an
/// INTEGER.
pub(super) fn scan_timed_stats(
    conn: &rusqlite::Connection,
    t: &crate::export::TableInfo,
    range: Option<(i64, i64)>,
    keep: Keep,
) -> std::result::Result<Option<TimedStats>, rusqlite::Error> {
    let list = format!("start, end, {}", TimedStats::columns(t, keep));
    let filter = range.map(|(a, b)| format!(" WHERE rowid >= {a} AND rowid < {b}")).unwrap_or_default();
    let mut q = match RawQuery::prepare(conn, &format!("SELECT rowid, {list} FROM \"{}\"{filter}", t.name)) {
        Ok(q) => q,
        Err(e) if range.is_some() => return Err(e),
        Err(_) => RawQuery::prepare(conn, &format!("SELECT NULL, {list} FROM \"{}\"", t.name))?,
    };
    let mut st = TimedStats::new(t, keep);
    while let Some(r) = q.next()? {
        if !st.add_timed_row(&r, 3) {
            return Ok(None);
        }
    }
    Ok(Some(st))
}

/// Where [`TimedStats::add_row`] finds its four values in a row: `globalTid`, `nameId`, `graphNodeId` and the
/// kernel's `demangledName`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatCols {
    pub(super) tid: usize,
    pub(super) name: usize,
    pub(super) node: usize,
    pub(super) kname: usize,
}

impl StatCols {
    /// The list of [`TimedStats::columns`] at `base`.
    pub(crate) fn at(base: usize) -> StatCols {
        StatCols { tid: base, name: base + 1, node: base + 2, kname: base + 3 }
    }
}

impl TimedStats {
    /// Empty stats of a scan of `t` that keeps `keep`.
    pub(crate) fn new(t: &crate::export::TableInfo, keep: Keep) -> TimedStats {
        TimedStats {
            sum_dur: Some(0),
            node_rows: t.has_column(cols::GRAPH_NODE_ID).then_some(0),
            intervals: keep.intervals.then(|| (vec![IntervalPart::Own(OwnIntervals::default())], Vec::new())),
            name_time: (keep.names && t.has_column(cols::DEMANGLED_NAME)).then(Default::default),
            threads: t.has_column("globalTid"),
            names: t.has_column("nameId"),
            ..Default::default()
        }
    }

    /// The four columns [`TimedStats::add_row`] reads (NULL for those the table lacks): `globalTid`, `nameId`,
    /// `graphNodeId`, and the kernel's `demangledName` when kept.
    pub(crate) fn columns(t: &crate::export::TableInfo, keep: Keep) -> String {
        Self::columns_beside(t, keep, 0, None, None).0
    }

    /// [`TimedStats::columns`] as the list at `base` of a statement that reads `graphNodeId` at `node` or
    /// `demangledName` at `kname` itself: those are not read twice (NULL in the list); and where
    /// [`TimedStats::add_row`] finds each value.
    pub(crate) fn columns_beside(
        t: &crate::export::TableInfo,
        keep: Keep,
        base: usize,
        node: Option<usize>,
        kname: Option<usize>,
    ) -> (String, StatCols) {
        let has = |c: &'static str| if t.has_column(c) { c } else { "NULL" };
        let keep_name = keep.names && t.has_column(cols::DEMANGLED_NAME) && kname.is_none();
        let list = format!(
            "{}, {}, {}, {}",
            has("globalTid"),
            has("nameId"),
            if node.is_some() { "NULL" } else { has(cols::GRAPH_NODE_ID) },
            if keep_name { cols::DEMANGLED_NAME } else { "NULL" }
        );
        let at = StatCols::at(base);
        (list, StatCols { node: node.unwrap_or(at.node), kname: kname.unwrap_or(at.kname), ..at })
    }

    /// Count one row whose interval was read as `start, end` and whose [`TimedStats::columns`] are the
    /// columns of `r` at `at`; the row id (column 0) names an impossible timestamp. False when a value is not
    /// an INTEGER (the stats of the table then fall back to SQL).
    pub(crate) fn add_row(&mut self, r: &RawRow, start: Option<i64>, end: Option<i64>, at: StatCols) -> bool {
        self.add_cells(start, end, at, |i| r.int(i))
    }

    /// [`TimedStats::add_row`] of a row whose `start` and `end` are columns 1 and 2 and whose
    /// [`TimedStats::columns`] start at `at`: what a scan of the table counts of it. False when a value is not an
    /// INTEGER.
    pub(crate) fn add_timed_row(&mut self, r: &RawRow, at: usize) -> bool {
        match (int_cell(r.int(1)), int_cell(r.int(2))) {
            (Ok(s), Ok(e)) => self.add_row(r, s, e, StatCols::at(at)),
            _ => false,
        }
    }

    /// [`TimedStats::add_row`] of a row whose cell `i` is `cell(i)` (the caller's reader, which gives the cells
    /// it has read already instead of asking SQLite twice).
    #[inline]
    pub(crate) fn add_cells(
        &mut self,
        start: Option<i64>,
        end: Option<i64>,
        at: StatCols,
        cell: impl Fn(usize) -> IntCell,
    ) -> bool {
        let bad = |v: Option<i64>| v.is_some_and(|x| !possible_ts(x));
        self.rows += 1;
        if self.bad_ts.is_none() && (bad(start) || bad(end)) {
            let rowid = int_cell(cell(0)).ok().flatten();
            self.bad_ts = Some((rowid, start, end));
        }
        match (start, end) {
            (Some(s), Some(e)) if e >= s => {
                self.max_end = Some(self.max_end.map_or(e, |m| m.max(e)));
                self.sum_dur = self.sum_dur.and_then(|a| a.checked_add(e - s));
                if let Some(d) = e.checked_sub(s).filter(|d| self.longest.is_none_or(|(l, _)| *d > l)) {
                    self.longest = Some((d, int_cell(cell(0)).ok().flatten()));
                }
                if let Some((v, _)) = self.intervals.as_mut() {
                    if let Some(IntervalPart::Own(v)) = v.last_mut() {
                        v.push((s, e));
                    }
                }
                if let Some(m) = self.name_time.as_mut() {
                    let ok = match cell(at.kname) {
                        IntCell::Int(id) => {
                            let x = m.entry(id).or_insert((0, 0));
                            e.checked_sub(s).and_then(|d| x.1.checked_add(d)).map(|t| *x = (x.0 + 1, t)).is_some()
                        }
                        _ => false,
                    };
                    if !ok {
                        self.name_time = None;
                    }
                }
            }
            (None, _) => self.skips.null_start += 1,
            (Some(s), None) => {
                self.skips.null_end += 1;
                if let Some((_, i)) = self.intervals.as_mut() {
                    i.push(s);
                }
            }
            (Some(s), Some(_)) => {
                self.skips.inverted += 1;
                if let Some((_, i)) = self.intervals.as_mut() {
                    i.push(s);
                }
            }
        }
        if self.threads {
            let Ok(g) = int_cell(cell(at.tid)) else { return false };
            if let Some(g) = g {
                self.thread_ids.insert(g);
            }
        }
        if self.names {
            let Ok(n) = int_cell(cell(at.name)) else { return false };
            if let Some(n) = n {
                *self.name_counts.entry(n).or_default() += 1;
            }
        }
        if let Some(n) = self.node_rows.as_mut() {
            // `graphNodeId IS NOT NULL`
            if !matches!(cell(at.node), IntCell::Null) {
                *n += 1;
            }
        }
        true
    }
}

/// The [`TimedStats`] of one table from the parts of a parallel read, in rowid order: None when a part did not
/// compute them (a value of another type than INTEGER).
pub(crate) fn merge_stats(parts: impl IntoIterator<Item = Option<TimedStats>>) -> Option<TimedStats> {
    let mut out: Option<TimedStats> = None;
    for p in parts {
        let p = p?;
        match out.as_mut() {
            None => out = Some(p),
            Some(o) => o.append(p),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Intervals held in 12 bytes give back what was pushed, those of 2^32 - 1 ns or more included (their end
    /// kept apart), one by one and in order; an unsorted part sorts by start.
    #[test]
    fn own_intervals_keep_long_ends() {
        let long = u32::MAX as i64;
        let want: Vec<Interval> =
            vec![(50, 60), (10, 10 + long), (-7, -7), (10, 10 + long - 1), (-100, (1 << 40) - 100), (3, 9)];
        let v: OwnIntervals = want.iter().copied().collect();
        assert_eq!(std::mem::size_of::<PackedInterval>(), 12);
        assert_eq!((v.len(), v.is_empty()), (want.len(), false));
        assert_eq!(v.iter().collect::<Vec<_>>(), want);
        for (i, &w) in want.iter().enumerate() {
            assert_eq!((v.get(i), v.start(i)), (Some(w), Some(w.0)));
        }
        assert_eq!(v.get(want.len()), None);
        let mut part = IntervalPart::Own(v);
        part.sort_by_start();
        let mut sorted = want.clone();
        sorted.sort_by_key(|r| r.0);
        assert_eq!(part.iter().map(|r| r.0).collect::<Vec<_>>(), sorted.iter().map(|r| r.0).collect::<Vec<_>>());
        let mut got: Vec<Interval> = part.iter().collect();
        got.sort();
        let mut all = want;
        all.sort();
        assert_eq!(got, all);
    }
}
