//! Device timelines for `step-budget`: per device (CUDA `deviceId`), every device row of the capture (KERNEL,
//! MEMCPY, MEMSET, GRAPH_TRACE; any process), linked to the runtime call that issued it by
//! `(globalPid, correlationId)`. From them: the GPU idle gaps and their attribution (host wait, sync wait,
//! launch latency, other), the launch-to-start latency of kernel and graph launches, the launch queue depth
//! over time, and the NCCL/compute overlap (exposed communication). The rules are in docs/step-budget.md.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{dist, Dist};
use crate::contract::{Error, Result};
use crate::export::rows::DeviceChunk;
use crate::export::rows::NO_NAME;
use crate::export::schema::DeviceKind;
use crate::export::{ns_of, Export, RowSkips};
use crate::ranges::FxMap;
use crate::ranges::{CapturedCall, CapturedRows};

/// Idle categories, in the order of [`IdleSplit`].
pub const IDLE_NAMES: [&str; 4] = ["host_wait", "sync_wait", "launch_latency", "other"];
const HOST: u8 = 0;
const SYNC: u8 = 1;
const LAUNCH: u8 = 2;
const OTHER: u8 = 3;
/// In [`Pieces`]' category bytes: the first piece of a gap.
const GAP_START: u8 = 0x80;

/// Most points of a queue-depth series.
pub const QUEUE_SERIES_POINTS: i64 = 256;

/// GPU idle time split by cause (integer ns; see docs/step-budget.md for each rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdleSplit {
    /// The next device row had not been issued yet (its runtime call had not started) and its launching thread
    /// was not inside a sync API.
    pub host_wait: i64,
    /// The next device row had not been issued yet and its launching thread was inside a blocking sync API.
    pub sync_wait: i64,
    /// The next device row was issued (its runtime call had started) but had not started on the device.
    pub launch_latency: i64,
    /// The next row has no runtime call in the export, or is a later node of a graph launch whose first node
    /// already ran (device-side scheduling inside the graph).
    pub other: i64,
}

impl IdleSplit {
    pub fn values(&self) -> [i64; 4] {
        [self.host_wait, self.sync_wait, self.launch_latency, self.other]
    }
    pub fn sum(&self) -> i64 {
        self.values().iter().sum()
    }
    fn from(v: [i64; 4]) -> IdleSplit {
        IdleSplit { host_wait: v[0], sync_wait: v[1], launch_latency: v[2], other: v[3] }
    }
    fn minus(&self, o: &IdleSplit) -> IdleSplit {
        let (a, b) = (self.values(), o.values());
        IdleSplit::from([a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]])
    }
}

/// One idle category over a device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdleCategory {
    pub ns: i64,
    /// Gaps with a non-zero part in this category (a gap split across categories counts in each).
    pub gaps: u64,
}

/// `idle[]`: the GPU idle attribution of one device over its active span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceIdle {
    /// CUDA `deviceId` (-1: rows without one).
    pub device_id: i64,
    /// `globalPid` of the processes with device rows on it.
    pub processes: Vec<i64>,
    /// First device row start and last device row end.
    pub span_start_ns: i64,
    pub span_end_ns: i64,
    /// Union of all its device rows.
    pub busy_ns: i64,
    /// `span − busy`; equals the sum of the categories.
    pub idle_ns: i64,
    pub gaps: u64,
    /// Lengths of its idle gaps.
    pub gap_lengths: Dist,
    /// `host_wait`, `sync_wait`, `launch_latency`, `other`: ns summing exactly to `idle_ns`, and gap counts.
    pub categories: BTreeMap<String, IdleCategory>,
    /// The idle inside the steps' GPU spans on this device (the union of the spans).
    pub in_steps: IdleSplit,
    /// The idle between the first step's span start and the last step's span end, outside every step span.
    pub between_steps: IdleSplit,
    /// The rest of the active span (before the first step, after the last): `total − in − between`.
    pub outside_steps: IdleSplit,
}

/// Launch-to-start latency: device start of the first row of a launch minus the start of its runtime call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LatencyDist {
    pub count: usize,
    pub min: i64,
    pub median: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
    /// Launches whose first row starts before the call (clock skew between host and device).
    pub negative: u64,
}

fn latency(v: &[i64]) -> LatencyDist {
    let d = dist(v.iter().copied());
    LatencyDist {
        count: d.count,
        min: v.iter().copied().min().unwrap_or(0),
        median: d.median,
        p90: d.p90,
        p99: d.p99,
        max: d.max,
        negative: v.iter().filter(|&&x| x < 0).count() as u64,
    }
}

/// The launch queue of one device: rows issued (runtime call started) and not finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueDepth {
    pub max: i64,
    /// Time-weighted mean over `[first issue, last end]`.
    pub mean: f64,
    /// Share of that window with nothing queued or running.
    pub empty_share: f64,
    /// The depth each row finds when it is issued (rows already queued or running on the device).
    pub at_issue: Dist,
    /// Width of one point of `series`.
    pub bucket_ns: i64,
    /// At most 256 points `[bucket start ns, max depth in the bucket]` over the window.
    pub series: Vec<[i64; 2]>,
}

/// `launch[]`: launch behaviour of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceLaunch {
    pub device_id: i64,
    /// Kernel launches (`cudaLaunchKernel`, `cuLaunchKernel`, `cudaLaunchKernelExC`, `cuLaunchKernelEx`, …:
    /// a runtime name containing `Launch` that is not a graph launch): call start → kernel start.
    pub kernel_launch: LatencyDist,
    /// Graph launches (`cudaGraphLaunch`, `cuGraphLaunch`): call start → start of the first device row of that
    /// correlationId (a node kernel on a node-level capture, the GRAPH_TRACE row on a graph-level one).
    pub graph_launch: LatencyDist,
    /// Graph launches whose first row is a GRAPH_TRACE row (graph-level), not a node.
    pub graph_launch_graph_level: u64,
    /// Launches by API name (version suffix removed).
    pub by_api: BTreeMap<String, u64>,
    pub queue_depth: QueueDepth,
}

/// What the runtime API name is, for the device timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Sync,
    KernelLaunch,
    GraphLaunch,
    Other,
}

fn classify(name: &str) -> Api {
    if crate::export::schema::is_graph_launch(name) {
        Api::GraphLaunch
    } else if name.contains("Launch") {
        Api::KernelLaunch
    } else if crate::ranges::normalize_sync_api(name).is_some() {
        Api::Sync
    } else {
        Api::Other
    }
}

/// `cudaLaunchKernel_v7000` → `cudaLaunchKernel`.
fn base_name(n: &str) -> &str {
    match n.find("_v") {
        Some(i) if n[i + 2..].starts_with(|c: char| c.is_ascii_digit()) => &n[..i],
        _ => n,
    }
}

/// No runtime call (an index into the calls).
const NO_CALL: u32 = u32::MAX;

/// A device row of a timeline, linked to the runtime call that issued it when built: 24 bytes (5 M rows: 120
/// MB; it was 40 with its process id and correlation id beside the call they are looked up by).
#[derive(Debug, Clone, Copy)]
struct Op {
    start: i64,
    end: i64,
    /// Index of its runtime call in [`Calls`], or [`NO_CALL`].
    call: u32,
    /// Its process (an index into the timeline's process ids, [`Ops::pids`], sorted: the index orders as the id)
    /// above the NCCL flag (bit 2) and the [`DeviceKind`] (bits 0–1).
    meta: u32,
}

impl Op {
    fn new(start: i64, end: i64, call: u32, process: u32, kind: DeviceKind, nccl: bool) -> Op {
        Op { start, end, call, meta: process << 3 | (nccl as u32) << 2 | kind as u32 }
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::ALL[(self.meta & 3) as usize]
    }
    /// A communication (NCCL) kernel.
    fn nccl(&self) -> bool {
        self.meta & 4 != 0
    }
    /// Index of its process id in [`Ops::pids`].
    fn process(&self) -> u32 {
        self.meta >> 3
    }
}

/// Where a runtime call is kept in the calls the ranges scan read: its part and its index there
/// ([`crate::ranges::RuntimeCalls::parts`]).
#[derive(Debug, Clone, Copy)]
struct CallAt {
    part: u32,
    i: u32,
}

/// One device's timeline, as analysed.
#[derive(Debug, Clone)]
pub struct DeviceTimeline {
    pub device_id: i64,
    /// Idle pieces `(start, end, category)` by start, covering exactly the idle of the active span.
    pieces: Pieces,
    /// Union of the non-NCCL kernel rows (and GRAPH_TRACE rows) of the device (compute), kept only when the device
    /// has communication rows (it is then overlapped with them: [`DeviceTimeline::comm_of`]); else empty.
    compute: Vec<(i64, i64)>,
    /// The length of that union, always.
    compute_ns: i64,
    /// Union of the NCCL kernel rows of each process on the device.
    nccl_by_pid: BTreeMap<i64, Vec<(i64, i64)>>,
    /// Union busy per process on the device.
    pub busy_by_pid: BTreeMap<i64, i64>,
    /// `(kernel launch, graph launch)` latencies per process on the device.
    pub launch_by_pid: BTreeMap<i64, (LatencyDist, LatencyDist)>,
    pub idle: DeviceIdle,
    pub launch: DeviceLaunch,
}

/// All device timelines of a capture.
#[derive(Debug, Clone, Default)]
pub struct Timelines {
    pub devices: Vec<DeviceTimeline>,
    /// `(deviceId, start, end)` of the NCCL kernel rows: how a step's correlated kernel rows are recognised as
    /// communication.
    pub nccl_keys: HashSet<(i64, i64, i64)>,
    /// Keys shared by an NCCL and a non-NCCL kernel row (then counted as NCCL).
    pub ambiguous_keys: u64,
    /// Device rows whose `(globalPid, correlationId)` more than one runtime call shares: linked to no call (the
    /// join is ambiguous), never to several.
    pub ambiguous_joins: u64,
    pub nccl_kernels: u64,
    pub nccl_by_name: Vec<NcclKernels>,
    /// Valid KERNEL/MEMCPY/MEMSET rows with a `graphNodeId` (node-level graph rows).
    pub node_rows: u64,
    pub skips: RowSkips,
    /// `(start, end, deviceId)` of each process's NCCL kernel rows (by `globalPid`), in start order: the k-th of
    /// every rank is the k-th collective it took part in.
    pub nccl_rows: BTreeMap<i64, Vec<(i64, i64, i64)>>,
}

/// The NCCL kernel rows of one demangled name, whole capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NcclKernels {
    pub name: String,
    pub count: u64,
    /// Σ duration (a sum over rows, not a union).
    pub total_ns: i64,
}

/// Union of intervals, sorted and disjoint.
pub fn union(mut iv: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    iv.sort_unstable();
    union_sorted(iv.into_iter())
}

/// Length of sorted disjoint intervals.
pub fn len(u: &[(i64, i64)]) -> i64 {
    u.iter().map(|(a, b)| b - a).sum()
}

/// `|A ∩ B|` of two sorted disjoint lists.
pub fn overlap(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut t) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            t += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    t
}

/// What the one pass over `StringIds` tells the timelines: runtime API classes, launch API names, NCCL names.
#[derive(Default)]
struct Names {
    api_of: FxMap<i64, Api>,
    launch_names: HashMap<i64, String>,
    /// Ids of communication kernel names ([`crate::categories::is_communication_kernel`]): an NCCL (or custom
    /// all-reduce) kernel when a kernel row carries one.
    nccl: FxMap<i64, String>,
}

fn names_of(export: &Export) -> Result<Names> {
    let mut n = Names::default();
    export.for_each_string(|id, v| {
        let Ok(v) = std::str::from_utf8(v) else { return };
        if crate::categories::is_communication_kernel(v) {
            n.nccl.insert(id, v.to_string());
        }
        let a = classify(v);
        if a != Api::Other {
            n.api_of.insert(id, a);
            if matches!(a, Api::KernelLaunch | Api::GraphLaunch) {
                n.launch_names.insert(id, base_name(v).to_string());
            }
        }
    })?;
    Ok(n)
}

/// The rows by device, the process ids they index, the NCCL kernel rows by name id, the node-level rows
/// ([`ops_of`]).
struct Ops {
    by_dev: BTreeMap<i64, Vec<Op>>,
    /// The rows' `globalPid` values (−1 for NULL), sorted: [`Op::process`] indexes them.
    pids: Vec<i64>,
    nccl_by_id: FxMap<i64, (u64, i64)>,
    node_rows: u64,
    /// Rows whose key several calls share ([`AMBIGUOUS_CALL`]): linked to none.
    ambiguous: u64,
}

/// Every device row of the capture, by device (rows in table then rowid order), as the ranges scan read them,
/// each linked to the runtime call of its `(globalPid, correlationId)`.
fn ops_of(device: &[DeviceChunk], names: &Names, calls: &Calls, skips: &mut RowSkips) -> Ops {
    // each device's vector allocated once at its size (5 M rows: no doubling copies); the process ids
    let mut sizes: BTreeMap<i64, usize> = BTreeMap::new();
    let mut pids: Vec<i64> = Vec::new();
    for c in device.iter().filter(|c| c.kind.is_some()) {
        for (rows, pid, dev) in c.segments() {
            *sizes.entry(dev.unwrap_or(-1)).or_default() += rows.len();
            pids.push(pid.unwrap_or(-1));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    let mut by_dev: BTreeMap<i64, Vec<Op>> = sizes.into_iter().map(|(d, n)| (d, Vec::with_capacity(n))).collect();
    let mut nccl_by_id: FxMap<i64, (u64, i64)> = FxMap::default();
    let mut node_rows = 0;
    let mut ambiguous = 0u64;
    // rows come nearly in correlation order: each lookup tries the previous call and its successor first
    let mut hint = 0usize;
    for c in device {
        crate::export::merge_skips(skips, &c.skips);
        node_rows += c.node_rows;
        let Some(kind) = c.kind else { continue };
        for (idx, pid, dev) in c.segments() {
            let (pid, dev) = (pid.unwrap_or(-1), dev.unwrap_or(-1));
            let process = pids.partition_point(|&p| p < pid) as u32;
            let v = by_dev.entry(dev).or_default();
            for i in idx {
                let r = c.rows[i];
                let (end, corr) = (c.end(i), c.correlation_id(i, r.aux));
                let name = c.names.get(i).copied().filter(|&n| n != NO_NAME);
                let nccl = kind == DeviceKind::Kernel && name.is_some_and(|n| names.nccl.contains_key(&n));
                if nccl {
                    let e = nccl_by_id.entry(name.unwrap_or(-1)).or_insert((0, 0));
                    e.0 += 1;
                    e.1 += end - r.start;
                }
                let mut call = corr.map_or(NO_CALL, |corr| calls.find(pid, corr, &mut hint));
                if call == AMBIGUOUS_CALL {
                    ambiguous += 1;
                    call = NO_CALL;
                }
                v.push(Op::new(r.start, end, call, process, kind, nccl));
            }
        }
    }
    Ops { by_dev, pids, nccl_by_id, node_rows, ambiguous }
}

/// What [`Calls::find`] answers for a key that several runtime calls share: the device row is linked to none.
const AMBIGUOUS_CALL: u32 = u32::MAX - 1;

/// The runtime calls with a correlation id, sorted by `(pid, corr)` (one per key: the last in table order): where
/// the ranges scan keeps them (8 bytes a call; a copy of each was 48, 62 MB at 5 M kernels) and their API
/// classes; and each thread's blocking sync calls, unioned. A call's index is its place in this order.
#[derive(Default)]
struct Calls<'a> {
    parts: &'a [Vec<CapturedCall>],
    at: Vec<CallAt>,
    /// Indices in `at` of the keys that several calls share, ascending.
    shared: Vec<u32>,
    api: Vec<Api>,
    syncs: FxMap<i64, Vec<(i64, i64)>>,
}

/// A call's `(pid, corr)`: the key of its device rows.
fn key_of(c: &CapturedCall) -> (i64, Option<i64>) {
    (ns_of(c.global_tid), c.correlation_id)
}

/// The call kept at `c` in `parts`.
fn call_at<'a>(parts: &'a [Vec<CapturedCall>], c: &CallAt) -> &'a CapturedCall {
    &parts[c.part as usize][c.i as usize]
}

impl<'a> Calls<'a> {
    /// The call of index `k`.
    fn get(&self, k: u32) -> Option<&'a CapturedCall> {
        self.at.get(k as usize).map(|c| call_at(self.parts, c))
    }

    /// The index of the call of `(pid, corr)`, trying `hint` and its successor first (rows come nearly in
    /// correlation order); [`AMBIGUOUS_CALL`] when several calls have that key.
    fn find(&self, pid: i64, corr: i64, hint: &mut usize) -> u32 {
        let key = (pid, Some(corr));
        let at = |i: usize| self.get(i as u32).is_some_and(|c| key_of(c) == key);
        let i = if at(*hint) {
            *hint
        } else if at(*hint + 1) {
            *hint + 1
        } else {
            let i = self.at.partition_point(|c| key_of(call_at(self.parts, c)) < key);
            if !at(i) {
                return NO_CALL;
            }
            i
        };
        *hint = i;
        if self.shared.binary_search(&(i as u32)).is_ok() {
            return AMBIGUOUS_CALL;
        }
        i as u32
    }

    /// When `o` was issued: its call's start (at most its own start), else its start.
    fn issue_of(&self, o: &Op) -> i64 {
        match self.get(o.call) {
            Some(c) => c.start.min(o.start),
            None => o.start,
        }
    }
}

fn calls_of<'a>(rows: &'a CapturedRows, names: &Names, skips: &mut RowSkips) -> Calls<'a> {
    crate::export::merge_skips(skips, &rows.runtime_skips);
    let parts = rows.runtime.parts();
    let api_of = |c: &CapturedCall| names.api_of.get(&c.name_id).copied().unwrap_or(Api::Other);
    let mut at: Vec<CallAt> = Vec::with_capacity(rows.runtime.len());
    let mut syncs: FxMap<i64, Vec<(i64, i64)>> = FxMap::default();
    for (part, calls) in parts.iter().enumerate() {
        for (i, c) in calls.iter().enumerate() {
            if api_of(c) == Api::Sync {
                syncs.entry(c.global_tid).or_default().push((c.start, c.end));
            }
            if c.correlation_id.is_some() {
                at.push(CallAt { part: part as u32, i: i as u32 });
            }
        }
    }
    let call = |c: &CallAt| call_at(parts, c);
    // stable: equal keys keep table order, and the last of them is kept (its API class, its syncs); a key
    // several calls share is noted: its device rows are linked to none of them
    at.sort_by_key(|c| key_of(call(c)));
    let mut shared: Vec<u32> = Vec::new();
    let mut kept_len = 1usize;
    at.dedup_by(|later, kept| {
        let same = key_of(call(later)) == key_of(call(kept));
        if same {
            *kept = *later;
            // `kept` is the last entry kept so far: index kept_len - 1
            if shared.last() != Some(&(kept_len as u32 - 1)) {
                shared.push(kept_len as u32 - 1);
            }
        } else {
            kept_len += 1;
        }
        same
    });
    at.shrink_to_fit();
    let api = at.iter().map(|c| api_of(call(c))).collect();
    let syncs = syncs.into_iter().map(|(k, v)| (k, union(v))).collect();
    Calls { parts, at, shared, api, syncs }
}

/// The device timelines of a capture from the device rows and runtime calls the ranges scan read
/// ([`CapturedRows`]): every device row linked to the call that issued it; each device analysed (in parallel
/// threads when there are several).
pub fn build(export: &Export, rows: &CapturedRows) -> Result<Timelines> {
    let mut ph = crate::phase::Phases::new("step-budget");
    let names = names_of(export)?;
    ph.mark("timeline_names");
    Ok(timelines(&names, rows, None))
}

/// Device timelines being built in a thread of their own ([`build_beside`]); [`PendingTimelines::join`] waits
/// for them.
#[derive(Debug, Clone)]
pub struct PendingTimelines(Arc<Mutex<Option<std::thread::JoinHandle<Timelines>>>>);

impl PendingTimelines {
    /// The timelines, once built.
    pub fn join(self) -> Result<Timelines> {
        let handle = self.0.lock().ok().and_then(|mut h| h.take());
        let Some(h) = handle else { return Err(Error::input("the device timelines were taken already")) };
        h.join().map_err(|_| Error::input("the device timeline thread panicked"))
    }
}

/// [`build`] in a thread of its own, started as soon as the ranges analysis has read its rows
/// ([`crate::ranges::RowsReady`]): the device rows are taken out of `rows` and shared with the caller (the
/// report's exposure reads them while the analysis goes on; the thread drops its share once its timeline rows are
/// built) and with the analysis's attribution (which reads them as they are), the runtime calls shared. A
/// failure to read the names leaves `rows` as they were.
pub fn build_beside(export: &Export, rows: &mut CapturedRows) -> Result<(PendingTimelines, Arc<Vec<DeviceChunk>>)> {
    let names = names_of(export)?;
    let device = std::mem::take(&mut rows.device);
    let own = CapturedRows {
        device: Default::default(),
        runtime: rows.runtime.clone(),
        runtime_skips: rows.runtime_skips.clone(),
    };
    let shared = device.clone();
    let handle = std::thread::spawn(move || timelines(&names, &own, Some(shared)));
    Ok((PendingTimelines(Arc::new(Mutex::new(Some(handle)))), device))
}

/// [`build`] with the names read: the device rows are `owned` when given (dropped as soon as the timeline rows
/// are built: they are the largest thing a report holds then), else those of `rows`.
fn timelines(names: &Names, rows: &CapturedRows, owned: Option<Arc<Vec<DeviceChunk>>>) -> Timelines {
    let mut ph = crate::phase::Phases::new("step-budget");
    let mut skips = RowSkips::new();
    let device: &[DeviceChunk] = owned.as_deref().map_or(&rows.device, |v| v.as_slice());
    // the calls first: each device row is linked to its call as it is built
    let calls = calls_of(rows, names, &mut skips);
    let Ops { by_dev, pids, nccl_by_id, node_rows, ambiguous: ambiguous_joins } =
        ops_of(device, names, &calls, &mut skips);
    drop(owned);
    ph.mark("timeline_calls+ops");
    let mut nccl_keys: HashSet<(i64, i64, i64)> = HashSet::new();
    let mut nccl_kernels = 0u64;
    let mut nccl_rows: BTreeMap<i64, Vec<(i64, i64, i64)>> = BTreeMap::new();
    for (&dev, ops) in &by_dev {
        for o in ops.iter().filter(|o| o.nccl()) {
            nccl_kernels += 1;
            nccl_keys.insert((dev, o.start, o.end));
            if let Some(&pid) = pids.get(o.process() as usize) {
                nccl_rows.entry(pid).or_default().push((o.start, o.end, dev));
            }
        }
    }
    for v in nccl_rows.values_mut() {
        v.sort_unstable();
    }
    let ambiguous_keys = if nccl_keys.is_empty() {
        0
    } else {
        by_dev
            .iter()
            .flat_map(|(d, v)| v.iter().map(move |o| (*d, o)))
            .filter(|(d, o)| o.kind() == DeviceKind::Kernel && !o.nccl() && nccl_keys.contains(&(*d, o.start, o.end)))
            .count() as u64
    };
    let mut by_name: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for (id, (n, t)) in nccl_by_id {
        if let Some(name) = names.nccl.get(&id) {
            let e = by_name.entry(name.clone()).or_insert((0, 0));
            e.0 += n;
            e.1 += t;
        }
    }
    let devices = analyse_devices(by_dev, &pids, &calls, &names.launch_names);
    ph.mark("timeline_devices");
    let mut nccl_by_name: Vec<NcclKernels> =
        by_name.into_iter().map(|(name, (count, total_ns))| NcclKernels { name, count, total_ns }).collect();
    nccl_by_name.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
    Timelines {
        devices,
        nccl_keys,
        ambiguous_keys,
        ambiguous_joins,
        nccl_kernels,
        nccl_by_name,
        node_rows,
        skips,
        nccl_rows,
    }
}

/// [`device_timeline`] of every device, in parallel threads when there are several.
fn analyse_devices(
    by_dev: BTreeMap<i64, Vec<Op>>,
    pids: &[i64],
    calls: &Calls,
    names: &HashMap<i64, String>,
) -> Vec<DeviceTimeline> {
    if by_dev.len() <= 1 {
        return by_dev.into_iter().map(|(dev, ops)| device_timeline(dev, ops, pids, calls, names)).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = by_dev
            .into_iter()
            .map(|(dev, ops)| s.spawn(move || device_timeline(dev, ops, pids, calls, names)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a device timeline thread panicked")).collect()
    })
}

/// Union of intervals already sorted by start.
fn union_sorted(iv: impl Iterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    // the iterator's upper bound, reserved once: untouched pages cost no memory and no copy while growing
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(iv.size_hint().1.unwrap_or(0));
    merge_sorted(iv, |u| out.push(u));
    out.shrink_to_fit();
    out
}

/// Each interval of the union of intervals already sorted by start, in order, given to `emit` once complete.
pub(super) fn merge_sorted(iv: impl Iterator<Item = (i64, i64)>, mut emit: impl FnMut((i64, i64))) {
    let mut cur: Option<(i64, i64)> = None;
    for (s, e) in iv {
        match cur.as_mut() {
            Some(c) if s <= c.1 => c.1 = c.1.max(e),
            _ => {
                if let Some(done) = cur.replace((s, e)) {
                    emit(done);
                }
            }
        }
    }
    if let Some(done) = cur {
        emit(done);
    }
}

/// The union of a device's compute rows (non-NCCL kernels, GRAPH_TRACE) and its length, from rows sorted by
/// start: the union only when the device has NCCL rows to overlap it with (at 5 M kernels without NCCL, 80 MB of
/// intervals read for their length alone).
fn compute_of(ops: &[Op]) -> (Vec<(i64, i64)>, i64) {
    let rows = ops
        .iter()
        .filter(|o| (o.kind() == DeviceKind::Kernel && !o.nccl()) || o.kind() == DeviceKind::GraphTrace)
        .map(|o| (o.start, o.end));
    if ops.iter().any(|o| o.nccl()) {
        let u = union_sorted(rows);
        let l = len(&u);
        return (u, l);
    }
    let mut total = 0i64;
    merge_sorted(rows, |(a, b)| total += b - a);
    (Vec::new(), total)
}

/// Idle pieces `(start, end, category)` by start: the intervals and the categories apart, 17 bytes a piece (a
/// tuple was 24: 5.6 M pieces at 5 M kernels, 134 MB). The first piece of each gap has [`GAP_START`] in its
/// category byte (two gaps can touch: around a zero-length row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Pieces {
    spans: Vec<(i64, i64)>,
    kinds: Vec<u8>,
}

impl Pieces {
    fn with_capacity(n: usize) -> Pieces {
        Pieces { spans: Vec::with_capacity(n), kinds: Vec::with_capacity(n) }
    }
    fn push(&mut self, (s, e, k): (i64, i64, u8)) {
        self.spans.push((s, e));
        self.kinds.push(k);
    }
    fn shrink_to_fit(&mut self) {
        self.spans.shrink_to_fit();
        self.kinds.shrink_to_fit();
    }
    /// The pieces from the first that ends after `t`.
    fn ending_after(&self, t: i64) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        self.starting_at(self.spans.partition_point(|p| p.1 <= t))
    }
    fn iter(&self) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        self.starting_at(0)
    }
    fn starting_at(&self, i: usize) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        self.spans[i..].iter().zip(&self.kinds[i..]).map(|(&(s, e), &k)| (s, e, k & !GAP_START))
    }
    fn len(&self) -> usize {
        self.kinds.len()
    }
    /// Mark piece `at` as the first of its gap.
    fn mark_gap_start(&mut self, at: usize) {
        if let Some(k) = self.kinds.get_mut(at) {
            *k |= GAP_START;
        }
    }
    /// The pieces, each with whether it is the first of its gap.
    fn with_gap_starts(&self) -> impl Iterator<Item = (i64, i64, u8, bool)> + '_ {
        self.spans.iter().zip(&self.kinds).map(|(&(s, e), &k)| (s, e, k & !GAP_START, k & GAP_START != 0))
    }
    /// The idle of `[lo, hi)` by category.
    fn idle_in(&self, lo: i64, hi: i64) -> [i64; 4] {
        let mut v = [0i64; 4];
        if hi <= lo {
            return v;
        }
        for (s, e, k) in self.ending_after(lo) {
            if s >= hi {
                break;
            }
            v[k as usize] += e.min(hi) - s.max(lo);
        }
        v
    }
    /// The idle inside the sorted disjoint spans `u` ([`Pieces::idle_in`] summed over them) and across them (from
    /// the first start to the last end), by category, in one pass over the pieces.
    fn idle_inside_and_across(&self, u: &[(i64, i64)]) -> ([i64; 4], [i64; 4]) {
        let (mut inside, mut across) = ([0i64; 4], [0i64; 4]);
        let (Some(&(lo, _)), Some(&(_, hi))) = (u.first(), u.last()) else { return (inside, across) };
        let mut j = 0;
        for (s, e, k) in self.ending_after(lo) {
            if s >= hi {
                break;
            }
            across[k as usize] += e.min(hi) - s.max(lo);
            while j < u.len() && u[j].1 <= s {
                j += 1;
            }
            for &(a, b) in u[j..].iter().take_while(|span| span.0 < e) {
                inside[k as usize] += e.min(b) - s.max(a);
            }
        }
        (inside, across)
    }
}

/// Split `[a, b)` into the parts covered by `cover` (sorted disjoint) and the rest, pushed as pieces.
fn split_by(a: i64, b: i64, cover: &[(i64, i64)], inside: u8, outside: u8, out: &mut Pieces) {
    let mut t = a;
    let lo = cover.partition_point(|c| c.1 <= a);
    for &(s, e) in &cover[lo..] {
        if s >= b {
            break;
        }
        let (s, e) = (s.max(a), e.min(b));
        if s > t {
            out.push((t, s, outside));
        }
        if e > s {
            out.push((s, e, inside));
        }
        t = t.max(e);
    }
    if b > t {
        out.push((t, b, outside));
    }
}

fn device_timeline(
    dev: i64,
    mut ops: Vec<Op>,
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
    let ops = &ops;
    let ((first, (pieces, gap_lengths, busy, span)), (compute, (nccl_by_pid, busy_by_pid)), queue_depth) =
        std::thread::scope(|s| {
            let gaps = s.spawn(move || {
                let mut ph = crate::phase::Phases::new("step-budget");
                let first = FirstRows::of(ops);
                ph.mark("device_first_rows");
                let g = gaps(ops, calls, &first);
                ph.mark("device_gaps");
                (first, g)
            });
            let queue = s.spawn(move || queue(ops, calls));
            let compute = compute_of(ops);
            let procs = per_process(ops, pids);
            (
                gaps.join().expect("the gaps pass panicked"),
                (compute, procs),
                queue.join().expect("the queue pass panicked"),
            )
        });
    ph.mark("device_passes");
    let (span_start, span_end) = span;
    let categories = categories_of(&pieces);
    let (launch, launch_by_pid) = launches(dev, &first, calls, names, queue_depth);
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
fn per_process(ops: &[Op], pids: &[i64]) -> (BTreeMap<i64, Vec<(i64, i64)>>, BTreeMap<i64, i64>) {
    // (process index, communication union, busy (current start, current end, total before it))
    let mut procs: Vec<(u32, Vec<(i64, i64)>, (i64, i64, i64))> = Vec::new();
    let mut last = usize::MAX;
    for o in ops {
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
struct FirstRows<'a> {
    ops: &'a [Op],
    lo: u32,
    at: Vec<u32>,
}

impl<'a> FirstRows<'a> {
    const UNSET: u32 = u32::MAX;

    /// From rows sorted by start (then issue): the first of each call's rows.
    fn of(ops: &'a [Op]) -> FirstRows<'a> {
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
    fn row(&self, i: u32) -> Option<(i64, DeviceKind)> {
        let o = self.ops.get(i as usize)?;
        Some((o.start, o.kind()))
    }

    fn get(&self, call: u32) -> Option<(i64, DeviceKind)> {
        let i = *self.at.get(call.checked_sub(self.lo)? as usize)?;
        self.row(i)
    }

    /// (call index, first row) of every launch on the device.
    fn iter(&self) -> impl Iterator<Item = (u32, (i64, DeviceKind))> + '_ {
        self.at.iter().enumerate().filter_map(|(k, &i)| Some((self.lo + k as u32, self.row(i)?)))
    }
}

/// The lengths of a device's gaps: 4 bytes each while every one fits (22 MB at 5 M kernels, not 45); a gap of
/// `u32::MAX` ns (4.3 s) or more widens them all to 8 bytes.
enum GapLengths {
    Short(Vec<u32>),
    Long(Vec<i64>),
}

impl GapLengths {
    fn push(&mut self, g: i64) {
        match self {
            GapLengths::Short(v) => match u32::try_from(g) {
                Ok(x) => v.push(x),
                Err(_) => {
                    let mut wide: Vec<i64> = v.iter().map(|&x| x as i64).collect();
                    wide.push(g);
                    *self = GapLengths::Long(wide);
                }
            },
            GapLengths::Long(v) => v.push(g),
        }
    }
    fn len(&self) -> usize {
        match self {
            GapLengths::Short(v) => v.len(),
            GapLengths::Long(v) => v.len(),
        }
    }
    fn dist(mut self) -> Dist {
        match &mut self {
            GapLengths::Short(v) => super::dist_in(v),
            GapLengths::Long(v) => super::dist_in(v),
        }
    }
}

/// Idle pieces and gaps of rows sorted by start: each gap split into pieces by the rules; the gap lengths, the
/// busy union and the active span.
#[allow(clippy::type_complexity)]
fn gaps(ops: &[Op], calls: &Calls, first: &FirstRows) -> (Pieces, GapLengths, i64, (i64, i64)) {
    // at most one gap per row; a gap is one piece or a few: reserved once (untouched pages cost no memory), no
    // copy while growing
    let mut pieces = Pieces::with_capacity(ops.len() * 2);
    let mut gap_lengths = GapLengths::Short(Vec::with_capacity(ops.len()));
    let mut busy = 0i64;
    let mut cur: Option<(i64, i64)> = None;
    let empty = Vec::new();
    for o in ops {
        match cur {
            Some((cs, ce)) if o.start <= ce => cur = Some((cs, ce.max(o.end))),
            Some((cs, ce)) => {
                busy += ce - cs;
                let (g0, g1) = (ce, o.start);
                gap_lengths.push(g1 - g0);
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
    (pieces, gap_lengths, busy, span)
}

/// The idle categories over a device: ns and gaps with a part in each.
fn categories_of(pieces: &Pieces) -> BTreeMap<String, IdleCategory> {
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

/// Launch latency per launch (one runtime call, its first row on this device), by API and per process.
#[allow(clippy::type_complexity)]
fn launches(
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
fn queue(ops: &[Op], calls: &Calls) -> QueueDepth {
    let mut issues: Vec<i64> = ops.iter().map(|o| calls.issue_of(o)).collect();
    issues.sort_unstable();
    let mut ends = EndsInOrder::new(ops);
    let bounds = |v: Option<i64>, w: Option<i64>| v.into_iter().chain(w);
    let t0 = bounds(issues.first().copied(), ops.iter().map(|o| o.end).min()).min();
    let t1 = bounds(issues.last().copied(), ops.iter().map(|o| o.end).max()).max();
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
    let mut at_issue = super::DepthCounts::default();
    let mut prev = t0;
    let mut i = 0usize;
    loop {
        // an end before an issue at the same ns
        let (t, is_end) = match (ends.peek(), issues.get(i)) {
            (Some(e), Some(&x)) if e <= x => (e, true),
            (_, Some(&x)) => (x, false),
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
            at_issue.add(depth);
            depth += 1;
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

/// The rows' ends in ascending order from rows by start, without sorting them: a row ends at or after its start,
/// so an end at or before the next row's start is the smallest left. A min-heap holds the ends of the rows
/// started and not yet ended: the rows in flight on the device, not every row.
struct EndsInOrder<'a> {
    ops: &'a [Op],
    next: usize,
    open: std::collections::BinaryHeap<std::cmp::Reverse<i64>>,
}

impl<'a> EndsInOrder<'a> {
    fn new(ops: &'a [Op]) -> Self {
        debug_assert!(ops.windows(2).all(|w| w[0].start <= w[1].start), "rows not by start");
        EndsInOrder { ops, next: 0, open: std::collections::BinaryHeap::new() }
    }
    /// The smallest end not yet popped.
    fn peek(&mut self) -> Option<i64> {
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
    fn pop(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_gaps_that_touch_count_as_two() {
        // [0, 10), a zero-length row at 20, [30, 40): the gaps [10, 20) and [20, 30) touch
        let op = |start: i64, end: i64| Op::new(start, end, NO_CALL, 0, DeviceKind::Kernel, false);
        let ops = [op(0, 10), op(20, 20), op(30, 40)];
        let (pieces, lengths, busy, span) = gaps(&ops, &Calls::default(), &FirstRows::of(&ops));
        assert_eq!((lengths.dist(), busy, span), (dist([10, 10]), 20, (0, 40)));
        let other = categories_of(&pieces)["other"];
        assert_eq!((other.ns, other.gaps), (20, 2));
        assert_eq!(pieces.iter().collect::<Vec<_>>(), vec![(10, 20, OTHER), (20, 30, OTHER)]);
    }

    #[test]
    fn idle_inside_and_across_spans_is_idle_in_summed() {
        let mut next = crate::test_rng::xorshift(0x5DEE_CE66_D1CE_4E5B);
        for _ in 0..500 {
            // sorted disjoint pieces (some touching), sorted disjoint spans (some empty of pieces)
            let (mut pieces, mut t) = (Pieces::default(), next(20));
            for _ in 0..next(30) {
                let s = t + next(3);
                t = s + 1 + next(10);
                pieces.push((s, t, next(4) as u8));
            }
            let (mut u, mut t) = (Vec::new(), next(40) - 10);
            for _ in 0..1 + next(8) {
                let a = t + 1 + next(15);
                t = a + 1 + next(20);
                u.push((a, t));
            }
            let mut inside = [0i64; 4];
            for &(a, b) in &u {
                let v = pieces.idle_in(a, b);
                (0..4).for_each(|k| inside[k] += v[k]);
            }
            let across = pieces.idle_in(u[0].0, u[u.len() - 1].1);
            assert_eq!(pieces.idle_inside_and_across(&u), (inside, across), "{pieces:?} {u:?}");
        }
        assert_eq!(Pieces::default().idle_inside_and_across(&[]), ([0; 4], [0; 4]));
    }

    #[test]
    fn split_and_overlap() {
        let mut out = Pieces::default();
        split_by(0, 100, &[(-5, 10), (20, 30), (90, 200)], SYNC, HOST, &mut out);
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![(0, 10, SYNC), (10, 20, HOST), (20, 30, SYNC), (30, 90, HOST), (90, 100, SYNC)]
        );
        assert_eq!(overlap(&[(0, 10), (20, 30)], &[(5, 25)]), 10);
        assert_eq!(base_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
        assert_eq!(base_name("cuLaunchKernelEx"), "cuLaunchKernelEx");
        assert_eq!(classify("cudaLaunchKernelExC_v11060"), Api::KernelLaunch);
        assert_eq!(classify("cudaGraphLaunch_v10000"), Api::GraphLaunch);
        assert_eq!(classify("cudaStreamSynchronize_v3020"), Api::Sync);
    }

    #[test]
    fn compute_length_without_the_union_is_the_unions() {
        let op = |start: i64, end: i64, kind: DeviceKind, nccl: bool| Op::new(start, end, NO_CALL, 0, kind, nccl);
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let n = 1 + next(40);
            let mut ops: Vec<Op> = (0..n)
                .map(|_| {
                    let (s, d) = (next(1000), next(90));
                    op(s, s + d, DeviceKind::ALL[next(4) as usize], false)
                })
                .collect();
            ops.sort_by_key(|o| o.start);
            let compute = |o: &&Op| matches!(o.kind(), DeviceKind::Kernel | DeviceKind::GraphTrace);
            // by definition: the ns covered by at least one compute row
            let covered = (0..1100).filter(|&t| ops.iter().filter(compute).any(|o| o.start <= t && t < o.end)).count();
            let (kept, ns) = compute_of(&ops);
            assert!(kept.is_empty());
            assert_eq!(ns, covered as i64, "{ops:?}");
            // with a communication row, the union itself is kept (the NCCL row is not compute)
            let want = union(ops.iter().filter(compute).map(|o| (o.start, o.end)).collect());
            ops.push(op(2000, 2010, DeviceKind::Kernel, true));
            assert_eq!(compute_of(&ops), (want, covered as i64));
        }
    }

    /// The timelines built in their own thread from the rows the ranges analysis hands over while it goes on are
    /// those built from its collected rows afterwards; the device rows leave the collected rows and stay shared
    /// with the caller; a pending build is joined once.
    #[test]
    fn timelines_built_beside_the_analysis_are_the_same() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for name in ["decode_mixed", "gpu_full_node"] {
            let path = root.join(format!("fixtures/nsys-2025.3.1/{name}.sqlite"));
            let export = Export::open(&path).unwrap();
            let want = |l: &str| crate::gate::is_iteration_like(l);
            let opts = crate::ranges::RangesOptions { fold: true, ..Default::default() };
            let mut beside = None;
            let mut ready = |rows: &mut CapturedRows| beside = Some(build_beside(&export, rows).unwrap());
            let (_, handed) =
                crate::ranges::analyze_with_intervals_keeping(&export, &opts, &want, false, Some(&mut ready)).unwrap();
            let (pending, device) = beside.expect("the rows were handed over");
            assert!(handed.rows.device.is_empty() && !device.is_empty(), "{name}: the device rows were taken");
            let (_, kept) = crate::ranges::analyze_with_intervals(&export, &opts, &want).unwrap();
            let after = build(&export, &kept.rows).unwrap();
            let early = pending.clone().join().unwrap();
            assert!(pending.join().is_err(), "{name}: joined twice");
            let view = |t: &Timelines| {
                let mut keys: Vec<_> = t.nccl_keys.iter().copied().collect();
                keys.sort_unstable();
                let devices: Vec<_> = t
                    .devices
                    .iter()
                    .map(|d| (d.device_id, d.pieces.clone(), d.compute.clone(), d.idle.clone(), d.launch.clone()))
                    .collect();
                (devices, keys, t.ambiguous_keys, t.nccl_kernels, t.nccl_by_name.clone(), t.node_rows)
            };
            assert!(!after.devices.is_empty(), "{name}: the fixture has device rows");
            assert_eq!(view(&early), view(&after), "{name}");
        }
    }

    /// Gap lengths held in 4 bytes give the distribution of their values, and one too long for 4 bytes widens
    /// those held before it.
    #[test]
    fn gap_lengths_widen_and_keep_their_distribution() {
        let mut next = crate::test_rng::xorshift(0x51_7CC1_B727_220A);
        for long_at in [None, Some(0), Some(7), Some(63)] {
            let mut g = GapLengths::Short(Vec::new());
            let mut want = Vec::new();
            for k in 0..64 {
                let v = if Some(k) == long_at { u32::MAX as i64 + 1 + next(1000) } else { 1 + next(5000) };
                g.push(v);
                want.push(v);
            }
            assert_eq!(matches!(g, GapLengths::Long(_)), long_at.is_some());
            assert_eq!(g.len(), 64);
            assert_eq!(g.dist(), dist(want));
        }
    }

    #[test]
    fn an_op_is_24_bytes_and_keeps_its_fields() {
        assert_eq!(std::mem::size_of::<Op>(), 24);
        for (k, nccl, process) in
            [(DeviceKind::Kernel, true, 0), (DeviceKind::GraphTrace, false, 7), (DeviceKind::Memset, true, 1 << 28)]
        {
            let o = Op::new(-5, 9, 3, process, k, nccl);
            assert_eq!((o.start, o.end, o.call, o.kind(), o.nccl(), o.process()), (-5, 9, 3, k, nccl, process));
        }
    }
}
