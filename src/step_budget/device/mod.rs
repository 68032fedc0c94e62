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
use crate::export::schema::DeviceKind;
use crate::export::{ns_of, Export, RowSkips};
use crate::sqlite_ranges::FxMap;
use crate::sqlite_ranges::{CallPart, CapturedCall, CapturedRows};

mod inputs;
mod launches;
mod ops;
mod pieces;
mod timeline;

use inputs::*;
use launches::*;
use ops::*;
pub(super) use pieces::merge_sorted;
use pieces::*;
use timeline::*;

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
    } else if crate::sqlite_ranges::normalize_sync_api(name).is_some() {
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

/// A device row of a timeline, linked to the runtime call that issued it when built, as read: held in 16 bytes
/// ([`OpRows`]; 24 as it is, 40 with its process id and correlation id beside the call they are looked up by).
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
/// ([`crate::sqlite_ranges::RuntimeCalls::parts`]).
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

pub use crate::intervals::{len, overlap, union};

/// The device timelines of a capture from the device rows and runtime calls the ranges scan read
/// ([`CapturedRows`]): every device row linked to the call that issued it; each device analysed (in parallel
/// threads when there are several).
pub fn build(export: &Export, rows: &CapturedRows) -> Result<Timelines> {
    build_owned(export, rows, None)
}

/// [`build`]; the device rows are `owned` when given (`rows` then has none: they were taken out of it), and
/// dropped as soon as the timeline rows are built.
pub fn build_owned(export: &Export, rows: &CapturedRows, owned: Option<Arc<Vec<DeviceChunk>>>) -> Result<Timelines> {
    let mut ph = crate::phase::Phases::new("step-budget");
    let names = names_of(export)?;
    ph.mark("timeline_names");
    Ok(timelines(&names, rows, owned, None))
}

/// Device timelines being built in a thread of their own ([`build_beside`]); [`PendingTimelines::join`] waits
/// for them.
#[derive(Debug, Clone)]
pub struct PendingTimelines(Arc<Mutex<Option<std::thread::JoinHandle<Timelines>>>>);

impl PendingTimelines {
    /// Has the thread ended?
    #[cfg(test)]
    fn is_finished(&self) -> bool {
        self.0.lock().ok().and_then(|h| h.as_ref().map(|h| h.is_finished())).unwrap_or(true)
    }

    /// The timelines, once built.
    pub fn join(self) -> Result<Timelines> {
        let handle = self.0.lock().ok().and_then(|mut h| h.take());
        let Some(h) = handle else { return Err(Error::input("the device timelines were taken already")) };
        h.join().map_err(|_| Error::input("the device timeline thread panicked"))
    }
}

/// [`build`] in a thread of its own, started as soon as the ranges analysis has read its rows
/// ([`crate::sqlite_ranges::RowsReady`]): the device rows are taken out of `rows` and shared with the caller (the
/// report's exposure reads them while the analysis goes on; the thread drops its share once its timeline rows are
/// built) and with the analysis's attribution (which reads them as they are), the runtime calls shared. Once its
/// rows are linked to their calls, the thread waits for the [`Go`] returned (dropped: the analysis ended) before
/// it sorts them and cuts the gaps: the idle pieces are not made while the analysis is at its peak (20 M kernels,
/// 16 cores: report's peak RSS 1 854–2 067 MiB without the wait, moving with the threads' timing; 1 813–1 820
/// with it). A failure to read the names leaves `rows` as they were.
pub fn build_beside(export: &Export, rows: &mut CapturedRows) -> Result<(PendingTimelines, Arc<Vec<DeviceChunk>>, Go)> {
    let names = names_of(export)?;
    let device = std::mem::take(&mut rows.device);
    let own = CapturedRows {
        device: Default::default(),
        runtime: rows.runtime.clone(),
        runtime_skips: rows.runtime_skips.clone(),
    };
    let shared = device.clone();
    let go = Go::default();
    let wait = go.clone();
    let handle = std::thread::spawn(move || timelines(&names, &own, Some(shared), Some(&wait)));
    Ok((PendingTimelines(Arc::new(Mutex::new(Some(handle)))), device, go))
}

/// Lets the timelines [`build_beside`] builds go on past their rows when dropped (or [`Go::now`]).
#[derive(Debug, Clone, Default)]
pub struct Go(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Go {
    /// Let them go on.
    pub fn now(self) {}

    fn wait(&self) {
        let (gone, cv) = &*self.0;
        let mut g = gone.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Go {
    fn drop(&mut self) {
        // the caller's handle (the thread drops its own once it went on)
        let (gone, cv) = &*self.0;
        *gone.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

/// Drop a share of the device rows; the last share's rows are dropped and their pages given back.
pub fn let_go(rows: Arc<Vec<DeviceChunk>>) {
    if let Ok(rows) = Arc::try_unwrap(rows) {
        drop(rows);
        crate::memory::release_free_memory();
    }
}

/// [`build`] with the names read: the device rows are `owned` when given (dropped as soon as the timeline rows
/// are built: they are the largest thing a report holds then), else those of `rows`; with `go`, it waits for it
/// once the rows are linked ([`build_beside`]).
fn timelines(names: &Names, rows: &CapturedRows, owned: Option<Arc<Vec<DeviceChunk>>>, go: Option<&Go>) -> Timelines {
    let mut ph = crate::phase::Phases::new("step-budget");
    let mut skips = RowSkips::new();
    // the rows given to no one else are dropped chunk by chunk as they become timeline rows
    let (mine, shared) = match owned.map(Arc::try_unwrap) {
        Some(Ok(v)) => (Some(v), None),
        Some(Err(a)) => (None, Some(a)),
        None => (None, None),
    };
    let device = match mine {
        Some(v) => Chunks::Owned(v),
        None => Chunks::Shared(shared.as_deref().map_or(&rows.device, |v| v.as_slice())),
    };
    // the calls first: each device row is linked to its call as it is built
    let calls = calls_of(rows, names, &mut skips);
    let Ops { by_dev, pids, nccl_by_id, node_rows, ambiguous: ambiguous_joins } =
        ops_of(device, names, &calls, &mut skips);
    if let Some(rows) = shared {
        let_go(rows);
    }
    ph.mark("timeline_calls+ops");
    if let Some(go) = go {
        go.wait();
        ph.mark("timeline_wait");
    }
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
    by_dev: BTreeMap<i64, OpRows>,
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

#[cfg(test)]
mod tests;
