//! What an analysis with intervals hands to other tools: the runtime calls and device rows it read
//! ([`CapturedRows`]), the intervals behind each occurrence ([`OccurrenceIntervals`]) and the shared occurrences.

use super::*;

/// A runtime call with a thread and an API name id, as the join read it (for the device timelines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedCall {
    pub start: i64,
    pub end: i64,
    pub global_tid: i64,
    pub correlation_id: Option<i64>,
    pub name_id: i64,
}

/// The runtime calls of one part the join read, in rowid order, 24 bytes each ([`CapturedCall`] is 48: 62 MB at
/// 5 M kernels): the thread as an index into the part's threads, the duration, correlation id and name id in 32
/// bits; a call whose values do not fit (a call of 2^32 ns or more, no correlation id) is kept whole in `wide`,
/// its correlation id `u32::MAX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallPart {
    calls: Vec<PackedCall>,
    /// `(index, call)` of the calls kept whole, by index.
    wide: Vec<(usize, CapturedCall)>,
    /// The part's threads (`globalTid`), in order of their first call.
    tids: Vec<i64>,
    /// Each thread's index in `tids`.
    tid_index: FxMap<i64, u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedCall {
    start: i64,
    tid: u32,
    dur: u32,
    corr: u32,
    name: u32,
}

impl CallPart {
    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.calls.reserve_exact(n);
    }

    pub(super) fn capacity(&self) -> usize {
        self.calls.capacity()
    }

    /// The index of thread `g` in `tids`, added when new.
    #[inline]
    fn tid(&mut self, g: i64) -> u32 {
        // the previous call's thread first: a thread's calls come in runs
        if let Some(p) = self.calls.last().filter(|p| self.tids[p.tid as usize] == g) {
            return p.tid;
        }
        let next = u32::try_from(self.tids.len()).expect("fewer than 2^32 threads in a part");
        let i = *self.tid_index.entry(g).or_insert(next);
        if i == next {
            self.tids.push(g);
        }
        i
    }

    pub(super) fn push(&mut self, c: CapturedCall) {
        let fit = |v: i64| u32::try_from(v).ok().filter(|&x| x < u32::MAX);
        let tid = self.tid(c.global_tid);
        let packed = match (fit(c.end - c.start), c.correlation_id.and_then(fit), fit(c.name_id)) {
            (Some(dur), Some(corr), Some(name)) => PackedCall { start: c.start, tid, dur, corr, name },
            _ => {
                self.wide.push((self.calls.len(), c));
                PackedCall { start: c.start, tid, dur: 0, corr: u32::MAX, name: 0 }
            }
        };
        self.calls.push(packed);
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Call `i`.
    #[inline]
    pub fn get(&self, i: usize) -> CapturedCall {
        let p = &self.calls[i];
        if p.corr == u32::MAX {
            return crate::beside::at(&self.wide, i);
        }
        CapturedCall {
            start: p.start,
            end: p.start + p.dur as i64,
            global_tid: self.tids[p.tid as usize],
            correlation_id: Some(p.corr as i64),
            name_id: p.name as i64,
        }
    }

    /// The calls in order.
    pub fn iter(&self) -> impl Iterator<Item = CapturedCall> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// The runtime calls of [`CapturedRows`], in table order: the parts the join read, each in rowid order, kept as
/// they were read (one vector of them all was a copy of each call).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeCalls(Vec<CallPart>);

impl RuntimeCalls {
    /// The calls of `parts`, taken in order.
    pub fn new(parts: Vec<CallPart>) -> RuntimeCalls {
        RuntimeCalls(parts)
    }
    /// The calls of `parts`, taken in order.
    pub fn of(parts: Vec<Vec<CapturedCall>>) -> RuntimeCalls {
        RuntimeCalls(
            parts
                .into_iter()
                .map(|v| {
                    let mut p = CallPart::default();
                    v.into_iter().for_each(|c| p.push(c));
                    p
                })
                .collect(),
        )
    }
    /// The parts, in table order, each in rowid order.
    pub fn parts(&self) -> &[CallPart] {
        &self.0
    }
    /// Every call, in table order.
    pub fn iter(&self) -> impl Iterator<Item = CapturedCall> + '_ {
        self.0.iter().flat_map(CallPart::iter)
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(CallPart::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every device row and runtime call as [`analyze_with_intervals`] read them, before the attribution: what the
/// step budget's device timelines need, without reading the tables again.
#[derive(Debug, Clone, Default)]
pub struct CapturedRows {
    /// The device tables' rows in table then rowid order, with the kernels' names
    /// ([`crate::export::rows::DeviceDetail::Names`]) and the skipped rows of each part: the rows the
    /// attribution reads, shared, never copied (the attribution keeps its marks apart).
    pub device: std::sync::Arc<Vec<DeviceChunk>>,
    /// The runtime calls with a thread and an API name id, in table order (shared with the thread that builds
    /// the device timelines while the analysis goes on: [`RowsReady`]).
    pub runtime: std::sync::Arc<RuntimeCalls>,
    /// Runtime rows skipped (invalid intervals).
    pub runtime_skips: RowSkips,
}

/// What [`analyze_with_intervals`] returns besides the analysis.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// Per occurrence (indexed as `occurrences`): its intervals when its label was asked for, else empty.
    pub intervals: IntervalTable,
    pub rows: CapturedRows,
    /// Whether `rows.runtime` holds every runtime call with a thread and an API name id: the join read the
    /// runtime table whole (it does not when the table is absent or no occurrence was kept).
    pub runtime_read: bool,
    /// With [`analyze_with_intervals_keeping`] and folding options without prefix or window: the occurrences as read,
    /// before the labels of the user's own are folded ([`SharedOccurrences::into_loaded`] is what
    /// [`load_occurrences_framework_folded`] gives).
    pub occurrences: Option<SharedOccurrences>,
    /// The CUDA `deviceId` of each device index of the intervals' rows ([`CorrelatedDeviceRow::device`]).
    pub device_ids: Vec<i64>,
}

/// The kept occurrences of an analysis without prefix or window, interned, a framework's labels folded and the
/// others raw: what a readiness document on the same export reads (`gate-check --report --nvtx-readiness`).
#[derive(Default, Clone)]
pub struct SharedOccurrences(pub(super) occurrences::InternedOccurrences);

impl SharedOccurrences {
    /// [`load_occurrences_framework_folded`], without reading the export again: the interned occurrences are
    /// given back as they are turned into occurrences (the two lists are never whole together: on emit_nvtx ×10,
    /// 2.06 M occurrences, 99 MB interned beside 181 MB loaded was the CI chain's peak).
    pub fn into_loaded(self) -> LoadedOccurrences {
        self.0.into_loaded()
    }
}

impl std::fmt::Debug for SharedOccurrences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedOccurrences({} occurrences)", self.0.occurrences.len())
    }
}

/// A device row attributed to an occurrence by the join (same rows as its metrics), as
/// [`CorrelatedDeviceRows`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorrelatedDeviceRow {
    pub start: i64,
    pub end: i64,
    pub kind: DeviceKind,
    /// Its CUDA `deviceId` is `Collected::device_ids[device]`.
    pub device: u32,
}

/// The device rows attributed to an occurrence, 12 bytes each (5.6 M rows at 5 M kernels: 67 MB; 16 bytes
/// were 90 MB, 24 were 134): the start as an offset from `base` (the first row's start) in 32 bits, the
/// duration in 32 bits, the kind in the top 2 bits of `tag` and the device index in the rest. A row whose
/// offset or duration does not fit (2^31 ns away from the first row, 2^32 - 1 ns long or more) is kept whole in
/// `wide`: its duration `u32::MAX`, its `tag` its index there.
#[derive(Debug, Clone, Default)]
pub struct CorrelatedDeviceRows {
    base: i64,
    rows: Vec<PackedCorrelatedRow>,
    wide: Vec<CorrelatedDeviceRow>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PackedCorrelatedRow {
    off: i32,
    dur: u32,
    tag: u32,
}

/// The offset of `start` from `base` when it fits 32 bits.
fn offset(base: i64, start: i64) -> Option<i32> {
    start.checked_sub(base).and_then(|d| i32::try_from(d).ok())
}

impl CorrelatedDeviceRows {
    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.rows.reserve_exact(n);
    }

    pub(super) fn push(&mut self, r: CorrelatedDeviceRow) {
        if self.rows.is_empty() {
            self.base = r.start;
        }
        let dur = u32::try_from(r.end - r.start).ok().filter(|&d| d < u32::MAX);
        debug_assert!(r.device < 1 << 30, "device indices are distinct devices");
        let packed = match (offset(self.base, r.start), dur) {
            (Some(off), Some(dur)) => PackedCorrelatedRow { off, dur, tag: (r.kind as u32) << 30 | r.device },
            _ => {
                let slot = u32::try_from(self.wide.len()).expect("fewer than 2^32 wide rows");
                self.wide.push(r);
                PackedCorrelatedRow { off: 0, dur: u32::MAX, tag: slot }
            }
        };
        self.rows.push(packed);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    #[inline]
    fn unpack(&self, r: &PackedCorrelatedRow) -> CorrelatedDeviceRow {
        if r.dur == u32::MAX {
            return self.wide[r.tag as usize];
        }
        let start = self.base + r.off as i64;
        CorrelatedDeviceRow {
            start,
            end: start + r.dur as i64,
            kind: DeviceKind::ALL[(r.tag >> 30) as usize],
            device: r.tag & !(3 << 30),
        }
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = CorrelatedDeviceRow> + '_ {
        self.rows.iter().map(|r| self.unpack(r))
    }

    /// Sorted by `(start, end)`, stable (rows of equal interval keep their order).
    pub(super) fn sort(&mut self) {
        if self.wide.is_empty() {
            // the start is base + off and the end start + dur: by (off, dur) is by (start, end)
            self.rows.sort_by_key(|r| (r.off, r.dur));
            return;
        }
        let mut all: Vec<CorrelatedDeviceRow> = self.iter().collect();
        all.sort_by_key(|d| (d.start, d.end));
        *self = CorrelatedDeviceRows::default();
        all.into_iter().for_each(|d| self.push(d));
    }
}

/// The same rows in the same order (the offsets' base is how they were pushed, not what they are).
impl PartialEq for CorrelatedDeviceRows {
    fn eq(&self, o: &Self) -> bool {
        self.len() == o.len() && self.iter().eq(o.iter())
    }
}

impl Eq for CorrelatedDeviceRows {}

/// A runtime call counted in an occurrence (on its thread, starting inside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnclosedRuntimeCall {
    pub start: i64,
    pub end: i64,
    /// `StringIds` id of the API name.
    pub name_id: Option<i64>,
    /// Blocking sync API ([`normalize_sync_api`]).
    pub sync: bool,
}

/// The runtime calls counted in an occurrence, 12 bytes each ([`EnclosedRuntimeCall`] is 40: 1.3 M calls in
/// the step label's occurrences at 5 M kernels were 64 MB): the start as an offset from `base` (the first call's
/// start) in 32 bits, the duration in 32 bits and in `tag` the sync flag (top bit) and the name id + 1 (0:
/// none). A call whose values do not fit (2^31 ns away from the first call, 2^32 - 1 ns long or more, a name id
/// outside `0..2^31 - 1`) is kept whole in `wide`: its duration `u32::MAX`, its `tag` its index there (so that
/// the calls sort in place). `wide` is in call order once sorted or only pushed to.
#[derive(Debug, Clone, Default)]
pub struct EnclosedCalls {
    base: i64,
    calls: Vec<PackedEnclosed>,
    wide: Vec<EnclosedRuntimeCall>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PackedEnclosed {
    off: i32,
    dur: u32,
    tag: u32,
}

const SYNC_BIT: u32 = 1 << 31;

impl EnclosedCalls {
    pub fn push(&mut self, c: EnclosedRuntimeCall) {
        if self.calls.is_empty() {
            self.base = c.start;
        }
        let dur = u32::try_from(c.end - c.start).ok().filter(|&d| d < u32::MAX);
        let name = match c.name_id {
            None => Some(0),
            Some(id) => u32::try_from(id).ok().filter(|&x| x < SYNC_BIT - 1).map(|x| x + 1),
        };
        let packed = match (offset(self.base, c.start), dur, name) {
            (Some(off), Some(dur), Some(name)) => PackedEnclosed { off, dur, tag: name | (c.sync as u32) << 31 },
            _ => {
                let slot = u32::try_from(self.wide.len()).expect("fewer than 2^32 wide calls");
                self.wide.push(c);
                PackedEnclosed { off: 0, dur: u32::MAX, tag: slot }
            }
        };
        self.calls.push(packed);
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    #[inline]
    fn unpack(base: i64, wide: &[EnclosedRuntimeCall], p: &PackedEnclosed) -> EnclosedRuntimeCall {
        if p.dur == u32::MAX {
            return wide[p.tag as usize];
        }
        let name = p.tag & !SYNC_BIT;
        let start = base + p.off as i64;
        EnclosedRuntimeCall {
            start,
            end: start + p.dur as i64,
            name_id: name.checked_sub(1).map(i64::from),
            sync: p.tag & SYNC_BIT != 0,
        }
    }

    /// The calls in order.
    pub fn iter(&self) -> impl Iterator<Item = EnclosedRuntimeCall> + '_ {
        self.calls.iter().map(|p| Self::unpack(self.base, &self.wide, p))
    }

    /// Sorted by `(start, end, name_id, sync)` (the whole call: equal keys are equal calls), the spare capacity
    /// given back (a shrink in place).
    pub(super) fn sort(&mut self) {
        if self.wide.is_empty() {
            // start = base + off, end = start + dur; name_id None → 0, Some(x) → x + 1: by (off, dur, name, sync)
            // is by the call
            self.calls.sort_unstable_by_key(|p| (p.off, p.dur, p.tag.rotate_left(1)));
        } else {
            let (base, wide) = (self.base, &self.wide);
            let key = |p: &PackedEnclosed| {
                let c = Self::unpack(base, wide, p);
                (c.start, c.end, c.name_id, c.sync)
            };
            self.calls.sort_unstable_by_key(key);
            // `wide` back in call order (the same calls give the same `EnclosedCalls`)
            let old = std::mem::take(&mut self.wide);
            for p in self.calls.iter_mut().filter(|p| p.dur == u32::MAX) {
                let c = old[p.tag as usize];
                p.tag = self.wide.len() as u32;
                self.wide.push(c);
            }
        }
        self.calls.shrink_to_fit();
    }
}

/// The same calls in the same order (the offsets' base is how they were pushed, not what they are).
impl PartialEq for EnclosedCalls {
    fn eq(&self, o: &Self) -> bool {
        self.len() == o.len() && self.iter().eq(o.iter())
    }
}

impl Eq for EnclosedCalls {}

/// The intervals behind one occurrence's metrics: its correlated device rows and its runtime calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OccurrenceIntervals {
    pub device: CorrelatedDeviceRows,
    pub runtime: EnclosedCalls,
}

/// What [`IntervalTable`] gives for an occurrence not asked for.
static NOT_ASKED: OccurrenceIntervals = OccurrenceIntervals {
    device: CorrelatedDeviceRows { base: 0, rows: Vec::new(), wide: Vec::new() },
    runtime: EnclosedCalls { base: 0, calls: Vec::new(), wide: Vec::new() },
};

/// The intervals of the occurrences whose label was asked for, indexed by occurrence (`table[i]`; empty for
/// the others). Held for those occurrences only: 72 bytes for each of 2 M PyTorch op ranges, none of them
/// asked for, were 148 MB; which are asked for is a bit each ([`Slots`]; a 4-byte slot each was 8 MB more).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntervalTable {
    /// Occurrence index → its index in `asked` (none: not asked for).
    slot: Slots,
    asked: Vec<OccurrenceIntervals>,
}

impl IntervalTable {
    /// Empty intervals for each occurrence `i < n` with `asked(i)`.
    pub(super) fn new(n: usize, asked: impl Fn(usize) -> bool) -> IntervalTable {
        let slot = Slots::of(n, (0..n).filter(|&i| asked(i)));
        // allocated once, not grown by doubling (100 k steps: 11 MB, not up to 15)
        let mut t = IntervalTable { asked: Vec::new(), slot };
        t.asked.resize_with(t.slot.count(), OccurrenceIntervals::default);
        t
    }

    /// Occurrence `i`'s intervals, None when it was not asked for.
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut OccurrenceIntervals> {
        let s = self.slot.get(i)?;
        self.asked.get_mut(s as usize)
    }

    /// Every asked occurrence's intervals.
    pub(super) fn asked_mut(&mut self) -> impl Iterator<Item = &mut OccurrenceIntervals> {
        self.asked.iter_mut()
    }

    /// The number of occurrences (asked for or not).
    pub fn len(&self) -> usize {
        self.slot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot.len() == 0
    }
}

impl std::ops::Index<usize> for IntervalTable {
    type Output = OccurrenceIntervals;
    fn index(&self, i: usize) -> &OccurrenceIntervals {
        match self.slot.get(i) {
            Some(s) => &self.asked[s as usize],
            None => &NOT_ASKED,
        }
    }
}
