//! One device's timeline: its busy time, per-process unions, and its idle gaps attributed by cause.

use super::*;

pub(super) fn device_timeline(
    dev: i64,
    mut ops: OpRows,
    pids: &[i64],
    calls: &Calls,
    names: &HashMap<i64, String>,
) -> DeviceTimeline {
    let mut ph = crate::phase::Phases::new("step-budget");
    // by (start, issue, end, process, call); stable and adaptive: the rows of each table come nearly sorted (the
    // issue is looked up for rows of equal start only). Rows tied up to their process order by call, that is by
    // correlationId (the calls are sorted so), unlinked rows last.
    ops.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then_with(|| calls.issue_of(a).cmp(&calls.issue_of(b)))
            .then_with(|| (a.end, a.process(), a.call).cmp(&(b.end, b.process(), b.call)))
    });
    ph.mark("device_sort");
    // four independent passes over the sorted rows, in parallel
    let rows = &ops;
    let ((first, (pieces, busy, span)), (compute, (nccl_by_pid, busy_by_pid)), queue_depth) = std::thread::scope(|s| {
        let gaps = s.spawn(move || {
            let mut ph = crate::phase::Phases::new("step-budget");
            let first = FirstRows::of(rows);
            ph.mark("device_first_rows");
            let g = gaps(rows, calls, &first);
            ph.mark("device_gaps");
            (first, g)
        });
        let queue = s.spawn(move || queue(rows, calls));
        let compute = compute_of(rows);
        let procs = per_process(rows, pids);
        (gaps.join().expect("the gaps pass panicked"), (compute, procs), queue.join().expect("the queue pass panicked"))
    });
    ph.mark("device_passes");
    let (span_start, span_end) = span;
    // the idle categories beside the launch latencies
    let (categories, (launch, launch_by_pid)) = std::thread::scope(|s| {
        let categories = s.spawn(|| categories_of(&pieces));
        let launches = launches(dev, &first, calls, names, queue_depth);
        (categories.join().expect("the idle categories panicked"), launches)
    });
    drop(first);
    // the gaps' lengths from their pieces, once the rows are dropped (5 M kernels: 22 MB no longer beside them)
    drop(ops);
    // in runs of at least GAP_RUN pieces on the scan's threads (a thread apiece for a few pieces costs more)
    let gap_lengths = pieces.gap_lengths(crate::export::rows::scan_threads().min(pieces.len() / GAP_RUN));
    let processes: Vec<i64> = busy_by_pid.keys().copied().collect();
    let idle_ns = (span_end - span_start) - busy;
    debug_assert_eq!(idle_ns, pieces.iter().map(|p| p.1 - p.0).sum::<i64>());
    DeviceTimeline {
        device_id: dev,
        pieces,
        compute: compute.0,
        compute_ns: compute.1,
        nccl_by_pid,
        busy_by_pid,
        launch_by_pid,
        idle: DeviceIdle {
            device_id: dev,
            processes,
            span_start_ns: span_start,
            span_end_ns: span_end,
            busy_ns: busy,
            idle_ns,
            gaps: gap_lengths.len() as u64,
            gap_lengths: gap_lengths.dist(),
            categories,
            in_steps: IdleSplit::default(),
            between_steps: IdleSplit::default(),
            outside_steps: IdleSplit::default(),
        },
        launch,
    }
}

/// Per process of the device's rows (sorted by start): the union of its communication kernels and its busy
/// union length. A device serves a few processes: a short list, not a map lookup per row.
#[allow(clippy::type_complexity)]
pub(super) fn per_process(ops: &OpRows, pids: &[i64]) -> (BTreeMap<i64, Vec<(i64, i64)>>, BTreeMap<i64, i64>) {
    // (process index, communication union, busy (current start, current end, total before it))
    let mut procs: Vec<(u32, Vec<(i64, i64)>, (i64, i64, i64))> = Vec::new();
    let mut last = usize::MAX;
    for o in ops.iter() {
        if procs.get(last).is_none_or(|p| p.0 != o.process()) {
            last = match procs.iter().position(|p| p.0 == o.process()) {
                Some(i) => i,
                None => {
                    procs.push((o.process(), Vec::new(), (o.start, o.start, 0)));
                    procs.len() - 1
                }
            };
        }
        let (_, nccl, b) = &mut procs[last];
        if o.nccl() {
            match nccl.last_mut() {
                Some(l) if o.start <= l.1 => l.1 = l.1.max(o.end),
                _ => nccl.push((o.start, o.end)),
            }
        }
        if o.start <= b.1 {
            b.1 = b.1.max(o.end);
        } else {
            b.2 += b.1 - b.0;
            *b = (o.start, o.end, b.2);
        }
    }
    let pid = |p: u32| pids[p as usize];
    let busy = procs.iter().map(|(p, _, (s, e, t))| (pid(*p), t + (e - s))).collect();
    let nccl = procs.into_iter().filter(|(_, v, _)| !v.is_empty()).map(|(p, v, _)| (pid(p), v)).collect();
    (nccl, busy)
}

/// The first row of each launch on one device, as its index in the device's rows sorted by start, in a vector
/// over the range of call indices its rows have (a device's rows come from a few processes, whose calls are
/// contiguous in [`Calls`]): 4 bytes a call (its start and kind were 16, 21 MB at 5 M kernels). A device's rows
/// are indexed by `u32` as their calls are ([`Op::call`]).
pub(super) struct FirstRows<'a> {
    pub(super) ops: &'a OpRows,
    pub(super) lo: u32,
    pub(super) at: Vec<u32>,
}

impl<'a> FirstRows<'a> {
    const UNSET: u32 = u32::MAX;

    /// From rows sorted by start (then issue): the first of each call's rows.
    pub(super) fn of(ops: &'a OpRows) -> FirstRows<'a> {
        // the range of linked calls, in one pass
        let (lo, hi) = ops
            .iter()
            .filter(|o| o.call != NO_CALL)
            .fold((u32::MAX, 0), |(lo, hi), o| (lo.min(o.call), hi.max(o.call)));
        if lo > hi {
            return FirstRows { ops, lo: 0, at: Vec::new() };
        }
        let mut at = vec![Self::UNSET; (hi - lo) as usize + 1];
        for (i, o) in ops.iter().enumerate().filter(|(_, o)| o.call != NO_CALL) {
            let f = &mut at[(o.call - lo) as usize];
            if *f == Self::UNSET {
                *f = i as u32;
            }
        }
        FirstRows { ops, lo, at }
    }

    /// The (start, kind) of the row at `i`.
    pub(super) fn row(&self, i: u32) -> Option<(i64, DeviceKind)> {
        let o = self.ops.get(i as usize)?;
        Some((o.start, o.kind()))
    }

    pub(super) fn get(&self, call: u32) -> Option<(i64, DeviceKind)> {
        let i = *self.at.get(call.checked_sub(self.lo)? as usize)?;
        self.row(i)
    }

    /// (call index, first row) of every launch on the device.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, (i64, DeviceKind))> + '_ {
        self.at.iter().enumerate().filter_map(|(k, &i)| Some((self.lo + k as u32, self.row(i)?)))
    }
}

/// Fewest pieces a thread of [`Pieces::gap_lengths`] takes.
const GAP_RUN: usize = 1 << 14;

/// The lengths of a device's gaps: 4 bytes each while every one fits (22 MB at 5 M kernels, not 45); a gap of
/// `u32::MAX` ns (4.3 s) or more widens them all to 8 bytes.
pub(super) enum GapLengths {
    Short(Vec<u32>),
    Long(Vec<i64>),
}

impl GapLengths {
    pub(super) fn len(&self) -> usize {
        match self {
            GapLengths::Short(v) => v.len(),
            GapLengths::Long(v) => v.len(),
        }
    }
    pub(super) fn dist(mut self) -> Dist {
        match &mut self {
            GapLengths::Short(v) => crate::step_budget::dist_in(v),
            GapLengths::Long(v) => crate::step_budget::dist_in(v),
        }
    }
}

/// Idle pieces and gaps of rows sorted by start: each gap split into pieces by the rules (the first piece of each
/// marked: [`Pieces::gap_lengths`]); the busy union and the active span.
pub(super) fn gaps(ops: &OpRows, calls: &Calls, first: &FirstRows) -> (Pieces, i64, (i64, i64)) {
    // at most one gap per row; a gap is one piece or a few: reserved once (untouched pages cost no memory), no
    // copy while growing
    let mut pieces = Pieces::with_capacity(ops.len() * 2);
    let mut busy = 0i64;
    let mut cur: Option<(i64, i64)> = None;
    let empty = Vec::new();
    for o in ops.iter() {
        match cur {
            Some((cs, ce)) if o.start <= ce => cur = Some((cs, ce.max(o.end))),
            Some((cs, ce)) => {
                busy += ce - cs;
                let (g0, g1) = (ce, o.start);
                let first_piece = pieces.len();
                // the call of a launch's first row on the device
                let launch = calls.get(o.call).filter(|_| first.get(o.call).is_some_and(|f| f.0 == o.start));
                if let Some(c) = launch {
                    let cs = c.start;
                    if cs > g0 {
                        let cover = calls.syncs.get(&c.global_tid).unwrap_or(&empty);
                        split_by(g0, cs.min(g1), cover, SYNC, HOST, &mut pieces);
                    }
                    if g1 > cs.max(g0) {
                        pieces.push((cs.max(g0), g1, LAUNCH));
                    }
                } else {
                    pieces.push((g0, g1, OTHER));
                }
                pieces.mark_gap_start(first_piece);
                cur = Some((o.start, o.end));
            }
            None => cur = Some((o.start, o.end)),
        }
    }
    pieces.shrink_to_fit();
    let span = match (ops.first(), cur) {
        (Some(f), Some((cs, ce))) => {
            busy += ce - cs;
            (f.start, ce)
        }
        _ => (0, 0),
    };
    (pieces, busy, span)
}

/// The idle categories over a device: ns and gaps with a part in each.
pub(super) fn categories_of(pieces: &Pieces) -> BTreeMap<String, IdleCategory> {
    let mut cat = [IdleCategory::default(); 4];
    let mut last_gap: [i64; 4] = [i64::MIN; 4];
    // a gap is identified by its start (marked on its first piece: two gaps can touch)
    let mut gap_start = i64::MIN;
    for (s, e, k, first) in pieces.with_gap_starts() {
        if first {
            gap_start = s;
        }
        cat[k as usize].ns += e - s;
        if last_gap[k as usize] != gap_start {
            last_gap[k as usize] = gap_start;
            cat[k as usize].gaps += 1;
        }
    }
    IDLE_NAMES.iter().zip(cat).map(|(n, c)| (n.to_string(), c)).collect()
}
