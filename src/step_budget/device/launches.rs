//! Launch-to-start latency by API and process, the launch queue depth over time, and what a timeline
//! answers (compute, NCCL overlap).

use super::*;

/// Launch latency per launch (one runtime call, its first row on this device), by API and per process.
#[allow(clippy::type_complexity)]
pub(super) fn launches(
    dev: i64,
    first: &FirstRows,
    calls: &Calls,
    names: &HashMap<i64, String>,
    queue_depth: QueueDepth,
) -> (DeviceLaunch, BTreeMap<i64, (LatencyDist, LatencyDist)>) {
    let (mut kl, mut gl, mut graph_level) = (Vec::new(), Vec::new(), 0u64);
    let mut by_name_id: FxMap<i64, u64> = FxMap::default();
    let mut by_pid_lat: BTreeMap<i64, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    for (call, (start, kind)) in first.iter() {
        let Some(c) = calls.get(call) else { continue };
        let mine = by_pid_lat.entry(ns_of(c.global_tid)).or_default();
        match calls.api[call as usize] {
            Api::KernelLaunch => {
                kl.push(start - c.start);
                mine.0.push(start - c.start);
            }
            Api::GraphLaunch => {
                gl.push(start - c.start);
                mine.1.push(start - c.start);
                if kind == DeviceKind::GraphTrace {
                    graph_level += 1;
                }
            }
            _ => continue,
        }
        *by_name_id.entry(c.name_id).or_default() += 1;
    }
    let mut by_api: BTreeMap<String, u64> = BTreeMap::new();
    for (id, n) in by_name_id {
        let name = names.get(&id).cloned().unwrap_or_else(|| format!("<name id {id}>"));
        *by_api.entry(name).or_default() += n;
    }
    let launch = DeviceLaunch {
        device_id: dev,
        kernel_launch: latency(&kl),
        graph_launch: latency(&gl),
        graph_launch_graph_level: graph_level,
        by_api,
        queue_depth,
    };
    (launch, by_pid_lat.into_iter().map(|(p, (k, g))| (p, (latency(&k), latency(&g)))).collect())
}

/// The queue-depth sweep: +1 at each row's issue, −1 at its end (ends before issues at the same ns). `ops` by
/// start.
pub(super) fn queue(ops: &OpRows, calls: &Calls) -> QueueDepth {
    let issues = Issues::of(ops, calls);
    let issues = issues.0.as_slice();
    let mut ends = EndsInOrder::new(ops);
    let bounds = |v: Option<i64>, w: Option<i64>| v.into_iter().chain(w);
    let t0 = bounds(issues.first().map(|&x| Issues::time(x)), ops.iter().map(|o| o.end).min()).min();
    let t1 = bounds(issues.last().map(|&x| Issues::time(x)), ops.iter().map(|o| o.end).max()).max();
    let (Some(t0), Some(t1)) = (t0, t1) else {
        return QueueDepth {
            max: 0,
            mean: 0.0,
            empty_share: 0.0,
            at_issue: Dist::default(),
            bucket_ns: 0,
            series: Vec::new(),
        };
    };
    let window = (t1 - t0).max(1);
    let points = QUEUE_SERIES_POINTS.min(window);
    let bw = (window + points - 1) / points;
    let nb = ((window + bw - 1) / bw).max(1) as usize;
    let mut series: Vec<[i64; 2]> = (0..nb).map(|i| [t0 + i as i64 * bw, 0]).collect();
    let (mut depth, mut max, mut area, mut empty) = (0i64, 0i64, 0i128, 0i64);
    let mut at_issue = crate::step_budget::DepthCounts::default();
    let mut prev = t0;
    let mut i = 0usize;
    loop {
        // an end before an issue at the same ns
        let (t, is_end) = match (ends.peek(), issues.get(i).map(|&x| Issues::time(x))) {
            (Some(e), Some(x)) if e <= x => (e, true),
            (_, Some(x)) => (x, false),
            (Some(e), None) => (e, true),
            (None, None) => break,
        };
        if t > prev {
            area += depth as i128 * (t - prev) as i128;
            if depth == 0 {
                empty += t - prev;
            } else {
                let (b0, b1) = (((prev - t0) / bw) as usize, (((t - 1) - t0) / bw) as usize);
                for p in &mut series[b0..=b1.min(nb - 1)] {
                    p[1] = p[1].max(depth);
                }
            }
            prev = t;
        }
        if is_end {
            depth -= 1;
            ends.pop();
        } else {
            // the rows issued together, one after another
            for _ in 0..Issues::rows(issues[i]) {
                at_issue.add(depth);
                depth += 1;
            }
            i += 1;
            let b = (((t - t0) / bw) as usize).min(nb - 1);
            series[b][1] = series[b][1].max(depth);
        }
        max = max.max(depth);
    }
    QueueDepth {
        max,
        mean: area as f64 / window as f64,
        empty_share: empty as f64 / window as f64,
        at_issue: at_issue.dist(),
        bucket_ns: bw,
        series,
    }
}

/// When the rows of a device are issued, in order: the time shifted by [`Issues::COUNT_BITS`] above how many
/// rows are issued then. The rows of one call issued at its start (the nodes of a graph launch) are one entry, a
/// row issued at its own start (no call, or one that starts after it) one of its own: 8 bytes a row at most, and
/// one entry a launch (5.6 M rows at 5 M kernels: 45 MB were one entry a row).
pub(super) struct Issues(pub(super) Vec<i64>);

impl Issues {
    /// Times are within ±2^54 ns (issues are device row and runtime call starts: ±2^53).
    const COUNT_BITS: u32 = 9;
    const MOST: u32 = (1 << Self::COUNT_BITS) - 1;

    pub(super) fn time(x: i64) -> i64 {
        x >> Self::COUNT_BITS
    }
    pub(super) fn rows(x: i64) -> u32 {
        (x & Self::MOST as i64) as u32
    }
    fn entry(t: i64, n: u32) -> i64 {
        t << Self::COUNT_BITS | n as i64
    }
    /// `n` rows issued at `t`, in entries of at most [`Issues::MOST`].
    fn push(v: &mut Vec<i64>, t: i64, mut n: u32) {
        while n > 0 {
            let k = n.min(Self::MOST);
            v.push(Self::entry(t, k));
            n -= k;
        }
    }

    /// The issues of `ops` ([`Calls::issue_of`] of each row), sorted.
    pub(super) fn of(ops: &OpRows, calls: &Calls) -> Issues {
        // the rows issued at their call's start, counted by call over the range of calls the device's rows have
        let (lo, hi) = ops
            .iter()
            .filter(|o| o.call != NO_CALL)
            .fold((u32::MAX, 0), |(lo, hi), o| (lo.min(o.call), hi.max(o.call)));
        let mut by_call: Vec<u32> = if lo <= hi { vec![0; (hi - lo) as usize + 1] } else { Vec::new() };
        let mut own = 0usize;
        for o in ops.iter() {
            match calls.get(o.call) {
                Some(c) if c.start <= o.start => by_call[(o.call - lo) as usize] += 1,
                _ => own += 1,
            }
        }
        let entries = by_call.iter().map(|&n| n.div_ceil(Self::MOST) as usize).sum::<usize>() + own;
        let mut v: Vec<i64> = Vec::with_capacity(entries);
        for o in ops.iter() {
            match calls.get(o.call) {
                Some(c) if c.start <= o.start => {}
                _ => v.push(Self::entry(o.start, 1)),
            }
        }
        for (k, &n) in by_call.iter().enumerate() {
            if n > 0 {
                let c = calls.get(lo + k as u32).expect("a call of the device's rows");
                Self::push(&mut v, c.start, n);
            }
        }
        drop(by_call);
        v.sort_unstable();
        Issues(v)
    }
}

/// The rows' ends in ascending order from rows by start, without sorting them: a row ends at or after its start,
/// so an end at or before the next row's start is the smallest left. A min-heap holds the ends of the rows
/// started and not yet ended: the rows in flight on the device, not every row.
pub(super) struct EndsInOrder<'a> {
    pub(super) ops: &'a OpRows,
    pub(super) next: usize,
    pub(super) open: std::collections::BinaryHeap<std::cmp::Reverse<i64>>,
}

impl<'a> EndsInOrder<'a> {
    pub(super) fn new(ops: &'a OpRows) -> Self {
        debug_assert!(ops.iter().zip(ops.iter().skip(1)).all(|(a, b)| a.start <= b.start), "rows not by start");
        EndsInOrder { ops, next: 0, open: std::collections::BinaryHeap::new() }
    }
    /// The smallest end not yet popped.
    pub(super) fn peek(&mut self) -> Option<i64> {
        loop {
            let top = self.open.peek().map(|r| r.0);
            match self.ops.get(self.next) {
                Some(o) if top.is_none_or(|e| e > o.start) => {
                    self.open.push(std::cmp::Reverse(o.end));
                    self.next += 1;
                }
                _ => return top,
            }
        }
    }
    pub(super) fn pop(&mut self) {
        self.open.pop();
    }
}

impl DeviceTimeline {
    /// The idle of `[lo, hi)` on this device, by category.
    pub fn idle_in(&self, lo: i64, hi: i64) -> IdleSplit {
        IdleSplit::from(self.pieces.idle_in(lo, hi))
    }

    /// The parts of `[lo, hi)` in which this device is busy (any process): inside its active span and outside
    /// its idle pieces, in order.
    pub fn busy_within(&self, lo: i64, hi: i64) -> Vec<(i64, i64)> {
        let (lo, hi) = (lo.max(self.idle.span_start_ns), hi.min(self.idle.span_end_ns));
        let mut out = Vec::new();
        let mut at = lo;
        for (s, e, _) in self.pieces.ending_after(lo) {
            if s >= hi {
                break;
            }
            if s > at {
                out.push((at, s));
            }
            at = at.max(e);
        }
        if hi > at {
            out.push((at, hi));
        }
        out
    }

    /// Does the process `pid` have rows on this device?
    pub fn has_process(&self, pid: i64) -> bool {
        self.busy_by_pid.get(&pid).is_some_and(|b| *b > 0)
    }

    /// Fill `in_steps`, `between_steps`, `outside_steps` from the GPU spans of the steps on this device.
    pub fn set_step_spans(&mut self, spans: Vec<(i64, i64)>) {
        let u = union(spans);
        let total = IdleSplit::from(IDLE_NAMES.map(|n| self.idle.categories.get(n).map(|c| c.ns).unwrap_or(0)));
        let (inside, window) = self.pieces.idle_inside_and_across(&u);
        let (inside, window) = (IdleSplit::from(inside), IdleSplit::from(window));
        let between = window.minus(&inside);
        self.idle.in_steps = inside;
        self.idle.between_steps = between;
        self.idle.outside_steps = total.minus(&inside).minus(&between);
    }

    /// `(NCCL busy, NCCL busy not overlapped by compute on this device)` of one process.
    pub fn comm_of(&self, pid: i64) -> (i64, i64) {
        let Some(n) = self.nccl_by_pid.get(&pid) else { return (0, 0) };
        let busy = len(n);
        (busy, busy - overlap(n, &self.compute))
    }

    /// Union of the compute rows of this device.
    pub fn compute_busy(&self) -> i64 {
        self.compute_ns
    }
}
