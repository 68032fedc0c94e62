//! `step-budget`: where each engine step's time went, step by step (`nsyskit.step-budget/v1`).
//!
//! A *step* is one occurrence of the step label (`--step`, default the step label of [`crate::step_label`], the
//! rule every tool shares). Its host wall `[start, end)` is partitioned exactly into
//! components by a priority sweep (see docs/step-budget.md): every ns of the wall lands in the first of
//! `gpu_kernel`, `gpu_memcpy`, `sync_wait`, `launch_api`, `other_api` whose intervals cover it, else in
//! `unattributed`. The intervals are the step's own, from the library's attribution
//! ([`crate::ranges::analyze_with_intervals`]: runtime calls on the step's thread, then
//! `(globalPid, correlationId)` to the device rows), never a second join.
//!
//! Around the steps, [`device`] reads every device row of the capture per device for the GPU idle attribution
//! (`idle[]`), the launch behaviour (`launch[]`) and the NCCL/compute overlap; the steps are then grouped per
//! rank (process) with the straggler of each matched step (`ranks[]`, `stragglers[]`).

pub mod device;
pub mod picture;

use crate::stats::rank_index;
pub use crate::stats::{dist, dist_in, Dist};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::DeviceKind;
use crate::export::Export;
use crate::ranges::{self, OccurrenceIntervals, RangesOptions};
pub use device::{DeviceIdle, DeviceLaunch, IdleCategory, IdleSplit, LatencyDist, NcclKernels, QueueDepth, IDLE_NAMES};

/// Default of `--outlier-factor`: a step whose wall exceeds this many times the median wall is an outlier.
pub const DEFAULT_OUTLIER_FACTOR: f64 = 2.0;
/// A component is the verdict's when its share of all steps' wall reaches this.
pub const DOMINANT_SHARE: f64 = 0.5;
/// `kernel_bound` also when the median correlated GPU busy reaches this share of the median step period.
pub const GPU_SATURATED_SHARE: f64 = 0.9;

/// What `step-budget` reads.
#[derive(Debug, Clone, PartialEq)]
pub struct StepBudgetOptions {
    /// The step label (None: the iteration label).
    pub step: Option<String>,
    /// Outlier threshold as a multiple of the median step wall.
    pub outlier_factor: f64,
    /// Fold id-bearing labels (as `sqlite-ranges` does by default).
    pub fold: bool,
}

impl Default for StepBudgetOptions {
    fn default() -> Self {
        StepBudgetOptions { step: None, outlier_factor: DEFAULT_OUTLIER_FACTOR, fold: true }
    }
}

/// The exact partition of one step's host wall (integer ns, summing to `wall_ns`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Components {
    /// Wall covered by the step's correlated compute kernels (graph nodes and GRAPH_TRACE rows included; NCCL
    /// kernels excluded), any device.
    pub gpu_kernel: i64,
    /// Wall covered by its correlated memcpy/memset rows and not by a kernel (compute or NCCL).
    pub gpu_memcpy: i64,
    /// Wall inside its blocking sync API calls (cudaDeviceSynchronize, cudaStreamSynchronize, …) not covered by GPU work.
    pub sync_wait: i64,
    /// Wall inside its launch API calls (name containing `Launch`: cudaLaunchKernel, cudaGraphLaunch, …) not counted above.
    pub launch_api: i64,
    /// Wall inside its other CUDA runtime/driver calls (cudaMemcpyAsync, cudaEventRecord, …) not counted above.
    pub other_api: i64,
    /// Wall covered by its correlated NCCL kernels (name containing `nccl`) and not by a compute kernel: the
    /// exposed communication inside the step.
    pub comm: i64,
    /// Host wall covered by none of the above (Python, scheduling, … — not GPU idle).
    pub unattributed: i64,
}

impl Components {
    pub const NAMES: [&'static str; 7] =
        ["gpu_kernel", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "comm", "unattributed"];
    pub fn values(&self) -> [i64; 7] {
        [
            self.gpu_kernel,
            self.gpu_memcpy,
            self.sync_wait,
            self.launch_api,
            self.other_api,
            self.comm,
            self.unattributed,
        ]
    }
    pub fn sum(&self) -> i64 {
        self.values().iter().sum()
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// 0-based, by start.
    pub index: usize,
    pub start_ns: i64,
    pub wall_ns: i64,
    pub components: Components,
    /// The thread that opened it.
    pub global_tid: i64,
    /// Correlated device rows (the step's shape is `kernels`).
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub graph_traces: u64,
    pub runtime_calls: u64,
    /// Its runtime calls that launch a CUDA graph (`cudaGraphLaunch`, …).
    pub graph_launches: u64,
    /// Union of its correlated device work, unclipped (may extend past the host range: a host range around a
    /// graph replay measures the launch).
    pub gpu_busy_ns: i64,
    /// `max(end) - min(start)` of its correlated device work, 0 without any.
    pub gpu_span_ns: i64,
    /// `gpu_span_ns - gpu_busy_ns`.
    pub gpu_idle_in_span_ns: i64,
    pub first_device_start_ns: Option<i64>,
    pub last_device_end_ns: Option<i64>,
    /// The next step of its rank: its start minus this step's end (null for the last step of the rank; negative
    /// when they overlap).
    pub host_gap_to_next_ns: Option<i64>,
    /// Index into `ranks[]`: the step's process.
    pub rank: usize,
    /// Union of its correlated NCCL kernel rows, unclipped.
    pub comm_busy_ns: i64,
    /// Union of the ranges of a communication label (`comm_labels`) on its thread starting inside it, clipped
    /// to its wall: host-side communication (e.g. a torch.distributed GLOO all_reduce).
    pub host_comm_ns: i64,
    /// The device idle inside `[first_device_start_ns, last_device_end_ns)` on the devices of its rows (device
    /// timeline: the rows of every thread count as busy), split by cause; 0 without device rows.
    pub idle: IdleSplit,
    /// The batch geometry of the iteration record joined to this step (`--iteration-records`; docs/iterations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<crate::iterations::StepGeometry>,
}

/// An outlier step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outlier {
    pub index: usize,
    pub start_ns: i64,
    pub wall_ns: i64,
    /// `wall_ns / median wall`.
    pub ratio_to_median: f64,
}

/// Outliers at a regular step period ([`StepBudgetDoc::periodic_stall`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeriodicStall {
    /// Every `period` steps of its rank.
    pub period: usize,
    pub rank: usize,
    /// `steps[]` index of the first and how many outliers keep the period.
    pub first_index: usize,
    pub count: usize,
    /// Median of their `ratio_to_median`.
    pub median_ratio: f64,
    /// Median of their wall minus the median step wall: what the stall adds to each of them.
    pub extra_ns: i64,
}

/// Start-to-start intervals of consecutive steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Pacing {
    pub intervals: Dist,
    pub min: i64,
    pub mean_ns: f64,
    /// Coefficient of variation (stddev / mean), null with fewer than two intervals.
    pub cv: Option<f64>,
    /// `p90 / median`.
    pub p90_over_median: Option<f64>,
    /// `p90_over_median <= 1.25`.
    pub regular: bool,
}

/// Steps of one shape (kernel count).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Group {
    pub kernels: u64,
    pub steps: usize,
    /// First step index of the group.
    pub first_index: usize,
    /// `wall`, `gpu_busy`, and every component.
    pub distributions: BTreeMap<String, Dist>,
}

/// A row establishing the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerdictRow {
    pub name: String,
    pub value_ns: i64,
    /// Share of the non-outlier steps' wall (or of the median period for `median_gpu_busy`).
    pub share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Verdict")]
pub struct BudgetVerdict {
    /// kernel_bound, cpu_launch_bound, python_overhead_bound, sync_bound, memcpy_bound, comm_bound or mixed_or_unclear.
    pub class: String,
    /// The rule that fired (docs/step-budget.md).
    pub rule: String,
    pub reason: String,
    /// Steps whose components the shares are over: the steps that are not outliers.
    pub steps_used: usize,
    pub rows: Vec<VerdictRow>,
    /// With class `unreliable` (rule `gates.…`): the verdict the evidence alone gives, which does not stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_be: Option<Box<BudgetVerdict>>,
}

/// `nsyskit.step-budget/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepBudgetDoc {
    pub schema: String,
    pub tool: Tool,
    pub source: String,
    /// The step label analysed.
    pub step_label: String,
    /// `--step`, or `iteration_label` (the step-label rule every tool shares, nsyskit::step_label).
    pub step_label_choice: String,
    pub outlier_factor: f64,
    /// `true` on a graph-level capture: the steps launch graphs or own GRAPH_TRACE rows, and the export has no
    /// node-level row (KERNEL/MEMCPY/MEMSET with `graphNodeId`).
    pub graph_level: bool,
    /// KERNEL rows of the capture whose name contains `nccl` (case-insensitive).
    pub nccl_kernels: u64,
    /// Those rows by demangled name, largest total first.
    pub nccl_by_name: Vec<NcclKernels>,
    pub steps: Vec<Step>,
    /// `wall`, `gpu_busy`, `gpu_idle_in_span`, `host_gap_to_next` and every component over all steps.
    pub distributions: BTreeMap<String, Dist>,
    /// Σ over steps, per component, and `wall`.
    pub totals: BTreeMap<String, i64>,
    pub outliers: Vec<Outlier>,
    /// The leading steps of a rank that are slow (compilation, autotuning, first-call allocation): set apart
    /// before the outliers and left out of the typical steps like them ([`slow_steps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warmup: Vec<Outlier>,
    /// Outliers that come back every `period` steps of a rank: a periodic stall (a host task on a timer or a
    /// counter: logging, checkpointing, garbage collection, a scheduler tick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic_stall: Option<PeriodicStall>,
    pub pacing: Option<Pacing>,
    /// By kernel count, most steps first.
    pub groups: Vec<Group>,
    /// The labels whose ranges are host-side communication: those containing (case-insensitive) one of
    /// `all_reduce`, `allreduce`, `all_gather`, `allgather`, `reduce_scatter`, `reducescatter`, `all_to_all`,
    /// `alltoall`, `broadcast`, `nccl`.
    pub comm_labels: Vec<String>,
    /// The median step, segment by segment: its wall swept in time order.
    pub waterfall: Option<Waterfall>,
    /// GPU idle attribution per device (all device rows of the capture, any process).
    pub idle: Vec<DeviceIdle>,
    /// Launch-to-start latency and queue depth per device.
    pub launch: Vec<DeviceLaunch>,
    /// One per process with steps, in order of their first step.
    pub ranks: Vec<RankBudget>,
    /// With several ranks: per matched step (the k-th step of every rank), the rank the others wait for.
    pub stragglers: Vec<Straggler>,
    pub verdict: BudgetVerdict,
    /// gate-check's verdict on the export (`step-budget` runs the throughput tier's gates on what it reads):
    /// a RETRY makes the verdict `unreliable`. Absent when not checked (the library's `analyze`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<crate::gate::EvidenceGates>,
    pub notes: Vec<String>,
    /// `--iteration-records` / `--iterations`: the join, the window and the groups by phase and batch size
    /// (docs/iterations.md); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<crate::iterations::window::IterationsSection>,
    /// No step can be attributed (no NVTX range): what each GPU did over its whole active span, the picture
    /// the verdict comes from ([`picture`]); absent when there are steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<picture::PictureRow>,
}

/// One segment of the median step's wall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Segment {
    pub component: String,
    /// From the step's start.
    pub offset_ns: i64,
    pub dur_ns: i64,
}

/// A component bar of the waterfall: its value and where it starts when the bars are stacked in priority order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaterfallBar {
    pub component: String,
    pub ns: i64,
    /// Sum of the bars before it.
    pub cumulative_ns: i64,
}

/// The median step (the first step, by index, among the non-outliers whose wall equals the median wall; else
/// the step nearest to it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Waterfall {
    pub index: usize,
    pub start_ns: i64,
    pub wall_ns: i64,
    /// The components in priority order (gpu_kernel, comm, gpu_memcpy, sync_wait, launch_api, other_api,
    /// unattributed) stacked: the last bar ends at `wall_ns`.
    pub bars: Vec<WaterfallBar>,
    /// The wall in time order: consecutive ns of one component merged; the durations of one component sum to
    /// its value in `components`. At most 4096 segments (`truncated` when more).
    pub segments: Vec<Segment>,
    pub truncated: bool,
}

/// The step budget of one rank (one process; its device is the one with the most of its device busy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankBudget {
    pub rank: usize,
    /// `globalPid` of the process (nsys packed form) and the OS pid.
    pub global_pid: i64,
    pub pid: i64,
    /// The device with the largest union busy of the process's rows (null without device rows).
    pub device_id: Option<i64>,
    /// Every device the process has rows on.
    pub devices: Vec<i64>,
    pub steps: usize,
    pub first_index: Option<usize>,
    /// `wall`, `gpu_busy`, `comm_busy` and every component over its steps.
    pub distributions: BTreeMap<String, Dist>,
    /// Σ over its steps, per component, and `wall`.
    pub totals: BTreeMap<String, i64>,
    /// Its NCCL kernel rows on `device_id`, whole capture: union busy, and the part not overlapped by compute
    /// kernels (non-NCCL kernels and GRAPH_TRACE rows of any process) on that device.
    pub comm_busy_ns: i64,
    pub exposed_comm_ns: i64,
    /// Union of the compute rows on its device, whole capture.
    pub compute_busy_ns: i64,
    /// Matched steps at which it is the straggler.
    pub straggler_steps: usize,
    /// Start-to-start intervals of its steps.
    pub pacing: Option<Pacing>,
    /// Launch-to-start latency of its own launches on `device_id` (as in `launch[]`).
    pub kernel_launch: LatencyDist,
    pub graph_launch: LatencyDist,
}

/// The straggler of one matched step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Straggler {
    /// k: the k-th step of every rank.
    pub occurrence: usize,
    /// `steps[]` index of each rank's k-th step, by rank.
    pub step_indexes: Vec<usize>,
    pub rank: usize,
    /// `least_comm` (some rank waits in communication in the step, `comm_busy_ns + host_comm_ns` > 0: the rank
    /// with the least such wait, ties to the latest end) or `last_end` (none does: the rank whose step ends last).
    pub rule: String,
    /// least_comm: max − min of the ranks' `comm_busy_ns + host_comm_ns` (how much longer the others waited);
    /// last_end: max − min of the step ends.
    pub lead_ns: i64,
}

impl Document for StepBudgetDoc {
    const KIND: &'static str = "step-budget";
    const TOOL: &'static str = "step-budget";
    /// 1 when the verdict is `unreliable` (the capture's gates said RETRY), as gate-check's RETRY.
    fn exit_code(&self) -> i32 {
        i32::from(self.verdict.class == UNRELIABLE)
    }
}

/// The counts of small integer values (queue depths): [`dist`] of the values added, without holding them (a
/// depth per device row was 45 MB at 5 M kernels).
#[derive(Debug, Default)]
pub struct DepthCounts {
    /// The least value added.
    lo: i64,
    /// `counts[i]`: how many times `lo + i` was added.
    counts: Vec<u64>,
}

impl DepthCounts {
    pub fn add(&mut self, v: i64) {
        if self.counts.is_empty() {
            self.lo = v;
        } else if v < self.lo {
            let below = usize::try_from(self.lo - v).unwrap_or(usize::MAX);
            self.counts.splice(0..0, std::iter::repeat_n(0, below));
            self.lo = v;
        }
        let i = usize::try_from(v - self.lo).unwrap_or(usize::MAX);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
    }

    /// [`dist`] of the values added: the same nearest ranks, read off the cumulative counts.
    pub fn dist(&self) -> Dist {
        let n: u64 = self.counts.iter().sum();
        let Some(top) = self.counts.iter().rposition(|&c| c > 0) else { return Dist::default() };
        let value_at = |rank: usize| {
            let mut seen = 0u64;
            for (i, &c) in self.counts.iter().enumerate() {
                seen += c;
                if seen > rank as u64 {
                    return self.lo + i as i64;
                }
            }
            self.lo + top as i64
        };
        let n = n as usize;
        Dist {
            count: n,
            median: value_at(rank_index(n, 0.5)),
            p90: value_at(rank_index(n, 0.9)),
            p99: value_at(rank_index(n, 0.99)),
            max: self.lo + top as i64,
        }
    }
}

/// Length of the union of intervals (any order, unclipped).
pub fn union_len(mut iv: Vec<(i64, i64)>) -> i64 {
    iv.retain(|(s, e)| e > s);
    device::len(&device::union(iv))
}

/// The priority partition of `[start, end)`: `classes[k]` are the intervals of component k (in priority
/// order); component k gets `|∪_{j≤k} C_j ∩ wall| − |∪_{j<k} C_j ∩ wall|`, the rest is returned last.
///
/// The definition, in one pass per class: the union of the classes so far is kept sorted and disjoint, each
/// class's clipped intervals (by start: a device class comes so, a class that does not is sorted) are merged
/// into it, and the component is how much it grew.
pub fn partition(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> (Vec<i64>, i64) {
    partition_in(start, end, classes, &mut PartitionBuffers::default())
}

/// [`partition`]'s buffers: the union so far, the next one, a class clipped.
#[derive(Debug, Default)]
struct PartitionBuffers {
    acc: Vec<(i64, i64)>,
    next: Vec<(i64, i64)>,
    cls: Vec<(i64, i64)>,
}

/// [`partition`] in the buffers given (cleared first).
fn partition_in(start: i64, end: i64, classes: &[Vec<(i64, i64)>], buf: &mut PartitionBuffers) -> (Vec<i64>, i64) {
    let PartitionBuffers { acc, next, cls } = buf;
    acc.clear();
    let mut out = Vec::with_capacity(classes.len());
    let mut covered = 0i64;
    for c in classes {
        cls.clear();
        cls.extend(c.iter().map(|&(s, e)| (s.max(start), e.min(end))).filter(|(s, e)| e > s));
        if !cls.is_sorted_by_key(|iv| iv.0) {
            cls.sort_unstable_by_key(|iv| iv.0);
        }
        merge_union(acc, cls, next);
        std::mem::swap(acc, next);
        let now = device::len(acc);
        out.push(now - covered);
        covered = now;
    }
    (out, (end - start) - covered)
}

/// The union of `a` (sorted, disjoint) and `b` (by start) into `out`, sorted and disjoint: the two lists read
/// by start with two cursors (the union does not depend on the order of equal starts).
fn merge_union(a: &[(i64, i64)], b: &[(i64, i64)], out: &mut Vec<(i64, i64)>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    let by_start = std::iter::from_fn(|| {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 <= y.0 => {
                i += 1;
                x
            }
            (Some(x), None) => {
                i += 1;
                x
            }
            (_, Some(y)) => {
                j += 1;
                y
            }
            (None, None) => return None,
        };
        Some(*next)
    });
    device::merge_sorted(by_start, |u| out.push(u));
}

fn is_launch(name: &str) -> bool {
    name.contains("Launch")
}

/// Analyse an open export.
pub fn analyze(export: &Export, opts: &StepBudgetOptions) -> Result<StepBudgetDoc> {
    analyze_window(export, opts, None)
}

/// [`analyze`] restricted to the steps lying inside `window` (ns on the export's clock, as sqlite-ranges'
/// `--window`); `--iterations` resolves to one (crate::iterations::window).
pub fn analyze_window(export: &Export, opts: &StepBudgetOptions, window: Option<(i64, i64)>) -> Result<StepBudgetDoc> {
    analyze_window_with(export, opts, window, None, None)
}

/// [`analyze_window`], reusing `pre`: the ranges analysis of the same export with the same options
/// (`fold`, `window`), the intervals of (at least) every occurrence of the step label and the rows read, as
/// [`ranges::analyze_with_intervals`] returns them (report computes them once for the evidence and the step
/// budget). Used only when `opts.step` is given; `pre_built` are then the device timelines of `pre`'s rows, built
/// beside that analysis ([`device::build_beside`]: report's evidence), else they are built from `pre`'s rows.
pub fn analyze_window_with(
    export: &Export,
    opts: &StepBudgetOptions,
    window: Option<(i64, i64)>,
    pre: Option<(&ranges::Analysis, &ranges::Collected)>,
    pre_built: Option<device::PendingTimelines>,
) -> Result<StepBudgetDoc> {
    if !(opts.outlier_factor.is_finite() && opts.outlier_factor > 1.0) {
        return Err(Error::usage(format!(
            "--outlier-factor {}: expected a number greater than 1",
            opts.outlier_factor
        ))
        .with_arg("--outlier-factor"));
    }
    let ropts = RangesOptions { fold: opts.fold, window, ..Default::default() };
    let (label, choice) = match choose_label(export, &ropts, opts)? {
        Chosen::Step(label, choice) => (label, choice),
        Chosen::NoStep(doc) => return Ok(doc),
    };
    let mut ph = crate::phase::Phases::new("step-budget");
    let owned;
    let (a, collected, pre_built) = match pre.filter(|_| opts.step.is_some()) {
        Some((a, c)) => (a, c, pre_built),
        None => {
            owned = ranges::analyze_with_intervals(export, &ropts, &|l| l == label)?;
            (&owned.0, &owned.1, None)
        }
    };
    let iv = collected.intervals.as_slice();
    let idx = step_occurrences(export, a, &label)?;
    // runtime API names of the steps' calls
    let ids: std::collections::HashSet<i64> =
        idx.iter().flat_map(|&i| iv[i].runtime.iter().filter_map(|r| r.name_id)).collect();
    let api = ApiIds::of(&export.strings_for(&ids)?);
    ph.mark("ranges+names");
    let mut tl = match pre_built {
        Some(p) => p.join()?,
        None => device::build(export, &collected.rows)?,
    };
    ph.mark("device_timeline");
    let nccl_kernels = tl.nccl_kernels;
    // ranks: the processes of the steps' threads, in order of their first step
    let mut rank_pids: Vec<i64> = Vec::new();
    for &i in &idx {
        let p = crate::export::ns_of(a.occurrences[i].global_tid);
        if !rank_pids.contains(&p) {
            rank_pids.push(p);
        }
    }
    // a process that runs its collectives with NCCL only enqueues GPU work in them: not host communication
    let comm = CommRows { keys: &tl.nccl_keys, device_ids: &collected.device_ids };
    let HostComm { labels: comm_labels, occ: comm_occ, enqueue_labels } = host_comm(a, iv, &idx, &label, comm);
    let dev_pos: BTreeMap<i64, usize> = tl.devices.iter().enumerate().map(|(k, d)| (d.device_id, k)).collect();
    // the OS runtime waits of the steps' threads: a thread that blocks while its step's GPU work runs waits for
    // the GPU (sync_wait), as in a CUDA sync call (JAX's block_until_ready waits in futex)
    let step_tids: crate::fx::FxSet<i64> = idx.iter().map(|&i| a.occurrences[i].global_tid).collect();
    let waits = export.osrt_waits(&step_tids)?;
    let cx = StepCx {
        a,
        iv,
        idx: &idx,
        api: &api,
        tl: &tl,
        comm_occ: &comm_occ,
        rank_pids: &rank_pids,
        dev_pos: &dev_pos,
        comm,
        waits: &waits,
    };
    let (steps, step_spans) = cx.steps();
    // the idle inside, between and outside the steps on each device, beside the steps' distributions
    let devices = &mut tl.devices;
    let distributions = std::thread::scope(|s| {
        s.spawn(|| {
            for (d, spans) in step_spans {
                if let Some(&p) = dev_pos.get(&d) {
                    devices[p].set_step_spans(spans);
                }
            }
        });
        distributions_of(steps.iter(), true)
    });
    // graph-level: the steps launch graphs (or own GRAPH_TRACE rows) and the export has no node-level row:
    // the replays are single GRAPH_TRACE rows (nsys 2024+) or invisible (nsys 2023.4 has no GRAPH_TRACE table)
    // (the timelines' valid node rows answer first: the export's count, which also counts invalid rows, is
    // read only when they hold none)
    let graph_level = steps.iter().any(|s| s.graph_traces > 0 || s.graph_launches > 0)
        && tl.node_rows == 0
        && export.graph_facts()?.node_rows == 0;
    let totals = totals_of(&steps);
    let median_wall = distributions["wall"].median;
    let slow = slow_steps(&steps, median_wall, opts.outlier_factor);
    let (warmup, outliers) = slow.split(&steps);
    let periodic_stall = periodic_stall_of(&steps, &outliers);
    // the typical steps leave out the warm-up too: the verdict reads the steady state
    let mut not_typical = outliers.clone();
    not_typical.extend(warmup.iter().cloned());
    let pacing = pacing_of(steps.iter());
    let groups = groups_of(&steps);
    let mut verdict =
        typical_verdict(&steps, &not_typical, &distributions, pacing.as_ref(), graph_level, nccl_kernels, &comm_labels);
    reject_on_opaque_step(&mut verdict, &a.occurrences, &label);
    ph.mark("steps");
    let waterfall = waterfall_of(&steps, &not_typical, median_wall, &idx, a, iv, &api, comm, &comm_occ, &waits, &tl);
    let (ranks, stragglers) = ranks_of(&steps, &rank_pids, &tl);
    let notes =
        notes_of(&steps, enqueue_labels, &comm_labels, &comm_occ, nccl_kernels, &ranks, &stragglers, &tl, graph_level);
    let (schema, tool) = StepBudgetDoc::header();
    let doc = StepBudgetDoc {
        schema,
        tool,
        source: export.name(),
        step_label: label,
        step_label_choice: choice,
        outlier_factor: opts.outlier_factor,
        graph_level,
        nccl_kernels,
        nccl_by_name: tl.nccl_by_name.clone(),
        steps,
        distributions,
        totals,
        outliers,
        warmup,
        periodic_stall,
        pacing,
        groups,
        comm_labels,
        waterfall,
        idle: tl.devices.iter().map(|d| d.idle.clone()).collect(),
        launch: tl.devices.iter().map(|d| d.launch.clone()).collect(),
        ranks,
        stragglers,
        verdict,
        gates: None,
        notes,
        iterations: None,
        devices: Vec::new(),
    };
    crate::memory::drop_beside(tl);
    Ok(doc)
}

/// The verdict on the typical step: the totals over the steps that are not outliers (all when every step is);
/// a `comm_bound` verdict says what comm is here.
fn typical_verdict(
    steps: &[Step],
    not_typical: &[Outlier],
    distributions: &BTreeMap<String, Dist>,
    pacing: Option<&Pacing>,
    graph_level: bool,
    nccl_kernels: u64,
    comm_labels: &[String],
) -> BudgetVerdict {
    let typical: Vec<&Step> = steps.iter().filter(typical_step(not_typical)).collect();
    let typical: Vec<&Step> = if typical.is_empty() { steps.iter().collect() } else { typical };
    let vt = totals_of(typical.iter().copied());
    let mut verdict = verdict_of(&vt, distributions, pacing, graph_level, nccl_kernels);
    verdict.steps_used = typical.len();
    if verdict.class == "comm_bound" {
        let what = match (nccl_kernels > 0, comm_labels.is_empty()) {
            (true, true) => "exposed NCCL kernels".to_string(),
            (true, false) => format!("exposed NCCL kernels and host communication ranges ({})", comm_labels.join(", ")),
            _ => format!("host communication ranges ({})", comm_labels.join(", ")),
        };
        verdict.reason.push_str(&format!("; comm here is {what}"));
    }
    verdict
}

/// The step label ([`crate::step_label`]), or the step budget of a capture in which no step can be attributed.
enum Chosen {
    /// The label and how it was chosen (`--step`, or the rule's name).
    Step(String, String),
    NoStep(StepBudgetDoc),
}

/// `--step`, else the step label chosen from a first pass over the labels (the doc's label counts); with none,
/// the device picture of the whole capture ([`device_only`]).
fn choose_label(export: &Export, ropts: &RangesOptions, opts: &StepBudgetOptions) -> Result<Chosen> {
    // pass 1 (labels only) when the step label is not given: the doc's label counts
    Ok(match &opts.step {
        Some(l) => Chosen::Step(l.clone(), "--step".to_string()),
        None => {
            let a = ranges::analyze(export, ropts)?;
            if a.doc.ranges.is_empty() {
                return Ok(Chosen::NoStep(device_only(export, ropts, opts, no_range_why(export)?)?));
            }
            let unstable = crate::step_label::unstable_labels(a.doc.ranges.iter().map(|r| r.label.as_str()));
            let periods = crate::step_label::period_facts(&a);
            let cands: Vec<crate::step_label::StepCandidate> = a
                .doc
                .ranges
                .iter()
                .map(|r| crate::step_label::StepCandidate {
                    period: Some(periods.get(&r.label).copied().unwrap_or_default()),
                    ..r.into()
                })
                .collect();
            match crate::step_label::choose_step(&cands, &unstable) {
                Some(c) => Chosen::Step(c.label.to_string(), c.rule.name().to_string()),
                // no step of the user's (only a framework's own ranges, or nothing that behaves like a step): the
                // devices' own picture, as without NVTX, and the labels a user could pass as --step
                None => {
                    let busy: i64 = a.doc.totals.per_device.iter().map(|d| d.busy_union_ns).sum();
                    let best = crate::step_label::best_candidates(&cands, busy, 5);
                    let what = if best.is_empty() {
                        format!(
                            "the capture's {} NVTX labels are all a framework's own ranges (e.g. {:?}: {})",
                            a.doc.ranges.len(),
                            a.doc.ranges[0].label,
                            crate::framework::framework_of(&a.doc.ranges[0].label).unwrap_or("a framework")
                        )
                    } else {
                        format!(
                            "none of the capture's {} NVTX labels is a step (iteration-like, PyTorch's ProfilerStep#N, or repeating at a regular period at the top level of a CUDA-calling thread with device work); the best candidates for --step: {}",
                            a.doc.ranges.len(),
                            best.join("; ")
                        )
                    };
                    let why = format!(
                        "{what}: no step and no phase of the workload can be attributed, so the budget is the GPUs' own picture over the whole capture; name the engine step with --step LABEL, or {}",
                        crate::export::nvtx::ANNOTATE
                    );
                    Chosen::NoStep(device_only(export, ropts, opts, why)?)
                }
            }
        }
    })
}

/// The occurrences (indices into `a.occurrences`) of the step label, by (start, end, thread); an error when the
/// capture has no range or the label no occurrence.
fn step_occurrences(export: &Export, a: &ranges::Analysis, label: &str) -> Result<Vec<usize>> {
    let mut idx: Vec<usize> = (0..a.occurrences.len()).filter(|&i| *a.occurrences[i].label == *label).collect();
    if a.doc.ranges.is_empty() {
        return Err(no_range_error(export)?);
    }
    if idx.is_empty() {
        let known: Vec<&str> = a.doc.ranges.iter().take(8).map(|r| r.label.as_str()).collect();
        return Err(Error::input(format!(
            "{}: no occurrence of the step label {label:?} (labels: {})",
            export.name(),
            known.join(", ")
        ))
        .with_arg("--step"));
    }
    idx.sort_by_key(|&i| (a.occurrences[i].start, a.occurrences[i].end, a.occurrences[i].global_tid));
    Ok(idx)
}

/// Host communication: the ranges of a communication label ([`COMM_LABEL_PATTERNS`]) on the steps' threads, by
/// thread and sorted; the labels; and those of processes that run NCCL (they only enqueue, not host communication).
struct HostComm<'a> {
    labels: Vec<String>,
    occ: HashMap<i64, Vec<(i64, i64)>>,
    enqueue_labels: std::collections::BTreeSet<&'a str>,
}

fn host_comm<'a>(
    a: &'a ranges::Analysis,
    iv: &[OccurrenceIntervals],
    idx: &[usize],
    label: &str,
    comm: CommRows,
) -> HostComm<'a> {
    // host communication: the ranges of a communication label (COMM_LABEL_PATTERNS) on the steps' threads
    let comm_labels: Vec<String> = a
        .doc
        .ranges
        .iter()
        .map(|r| r.label.clone())
        .filter(|l| *l != label && is_comm_label(l))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    // a process that runs its collectives with NCCL only enqueues GPU work in them: not host communication
    let nccl_procs = nccl_processes(a, iv, idx, comm);
    let mut comm_occ: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    let mut enqueue_labels: std::collections::BTreeSet<&str> = Default::default();
    for o in a.occurrences.iter().filter(|o| comm_labels.iter().any(|l| **l == *o.label)) {
        if nccl_procs.contains(&crate::export::ns_of(o.global_tid)) {
            enqueue_labels.insert(&*o.label);
            continue;
        }
        comm_occ.entry(o.global_tid).or_default().push((o.start, o.end));
    }
    for v in comm_occ.values_mut() {
        v.sort_unstable();
    }
    HostComm { labels: comm_labels, occ: comm_occ, enqueue_labels }
}

/// The steps grouped by kernel count, most steps first.
fn groups_of(steps: &[Step]) -> Vec<Group> {
    let mut by_shape: BTreeMap<u64, Vec<&Step>> = BTreeMap::new();
    for s in steps {
        by_shape.entry(s.kernels).or_default().push(s);
    }
    let mut groups: Vec<Group> = by_shape
        .into_iter()
        .map(|(kernels, ss)| Group {
            kernels,
            steps: ss.len(),
            first_index: ss[0].index,
            distributions: distributions_of(ss.iter().copied(), false),
        })
        .collect();
    groups.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.kernels.cmp(&b.kernels)));
    groups
}

/// The notes of a step budget: what comm is here, NCCL key collisions, stragglers, graph rows, skipped rows.
#[allow(clippy::too_many_arguments)]
fn notes_of(
    steps: &[Step],
    enqueue_labels: std::collections::BTreeSet<&str>,
    comm_labels: &[String],
    comm_occ: &HashMap<i64, Vec<(i64, i64)>>,
    nccl_kernels: u64,
    ranks: &[RankBudget],
    stragglers: &[Straggler],
    tl: &device::Timelines,
    graph_level: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !enqueue_labels.is_empty() {
        notes.push(format!(
            "the communication ranges of processes that run NCCL ({}) are not host communication: an NCCL call only enqueues the collective, whose time is its NCCL kernels' (comm); their host time is API or host time",
            enqueue_labels.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if nccl_kernels == 0 && comm_occ.is_empty() {
        notes.push("no NCCL kernel in the capture: comm is 0".into());
    } else if nccl_kernels == 0 {
        notes.push(format!(
            "no NCCL kernel in the capture: comm is the host time in the communication ranges ({})",
            comm_labels.join(", ")
        ));
    } else {
        notes.push(format!("{nccl_kernels} NCCL kernels in the capture: their wall not covered by a compute kernel of the step is comm"));
    }
    if tl.ambiguous_keys > 0 {
        notes.push(format!(
            "{} kernel rows share (device, start, end) with an NCCL kernel row: counted as NCCL",
            tl.ambiguous_keys
        ));
    }
    if !stragglers.is_empty() {
        for r in ranks {
            let leads: Vec<i64> = stragglers.iter().filter(|x| x.rank == r.rank).map(|x| x.lead_ns).collect();
            if !leads.is_empty() {
                notes.push(format!(
                    "rank {} (pid {}) is the straggler of {} of {} matched steps (median lead {} ns, max {} ns)",
                    r.rank,
                    r.pid,
                    leads.len(),
                    stragglers.len(),
                    dist(leads.iter().copied()).median,
                    leads.iter().max().unwrap()
                ));
            }
        }
    }
    let graph_rows: usize = tl.devices.iter().map(|d| d.launch.graph_launch.count).sum();
    if steps.iter().any(|s| s.graph_launches > 0) && graph_rows == 0 {
        notes.push("no device row belongs to a graph launch (graph-level capture without GRAPH_TRACE rows, nsys 2023.4): idle[] and launch[] miss the graphs' GPU work and count its time as idle".into());
    }
    if let Some(s) = crate::export::describe_skips(&tl.skips) {
        notes.push(format!("device timelines: rows skipped: {s}"));
    }
    if let Some(n) = ambiguous_join_note(&tl) {
        notes.push(n);
    }
    if graph_level {
        notes.push("graph-level capture (GRAPH_TRACE rows, no node-level kernels): re-capture with --cuda-graph-trace=node to see the kernels".into());
    }
    notes
}

/// The components in the priority order of the sweep (`unattributed` last: the rest).
pub const PRIORITY: [&str; 7] =
    ["gpu_kernel", "comm", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "unattributed"];

/// The GPU span of a step on each device it ran on: `(deviceId, (first start, last end))`.
type StepSpans = Vec<(i64, (i64, i64))>;
/// The GPU spans of the steps, by device.
type SpansByDevice = BTreeMap<i64, Vec<(i64, i64)>>;

/// What every step of [`analyze_window_with`] reads: the steps are independent, so they run in parallel chunks.
struct StepCx<'a> {
    a: &'a ranges::Analysis,
    iv: &'a [ranges::OccurrenceIntervals],
    /// The steps' occurrence indices, by start.
    idx: &'a [usize],
    api: &'a ApiIds,
    tl: &'a device::Timelines,
    comm_occ: &'a HashMap<i64, Vec<(i64, i64)>>,
    rank_pids: &'a [i64],
    dev_pos: &'a BTreeMap<i64, usize>,
    comm: CommRows<'a>,
    /// The OS runtime waits of the steps' threads ([`crate::export::Export::osrt_waits`]).
    waits: &'a HashMap<i64, Vec<(i64, i64)>>,
}

impl StepCx<'_> {
    /// Every step, in order, and the GPU span of each step on each device it ran on.
    fn steps(&self) -> (Vec<Step>, SpansByDevice) {
        let n = self.idx.len();
        let chunk = n.div_ceil(crate::export::rows::scan_threads().max(1)).max(256);
        // each thread writes its steps in place (100 k steps of ~350 bytes: no part copied into the whole on
        // one thread) and returns its steps' spans in step order
        let mut steps: Vec<Step> = Vec::with_capacity(n);
        let parts: Vec<StepSpans> = std::thread::scope(|s| {
            let handles: Vec<_> = steps.spare_capacity_mut()[..n]
                .chunks_mut(chunk)
                .enumerate()
                .map(|(c, slots)| {
                    s.spawn(move || {
                        let (mut spans, mut scratch) = (StepSpans::new(), StepScratch::default());
                        for (j, slot) in slots.iter_mut().enumerate() {
                            slot.write(self.step(c * chunk + j, &mut spans, &mut scratch));
                        }
                        spans
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a step thread panicked")).collect()
        });
        // SAFETY: the chunks cover the first `n` slots and every thread wrote each slot of its chunk once before
        // it was joined (a thread that panicked stopped this function above: its steps are leaked, never read).
        unsafe { steps.set_len(n) };
        let mut spans = SpansByDevice::new();
        for (d, span) in parts.into_iter().flatten() {
            spans.entry(d).or_default().push(span);
        }
        (steps, spans)
    }

    /// Step `k` (occurrence `idx[k]`), in the buffers of `scratch`; its GPU span on each device it ran on is
    /// pushed on `spans`.
    fn step(&self, k: usize, spans: &mut StepSpans, scratch: &mut StepScratch) -> Step {
        let (a, iv, tl) = (self.a, self.iv, self.tl);
        let i = self.idx[k];
        let o = &a.occurrences[i];
        let m = &a.metrics[i];
        let host_comm = host_comm_of(self.comm_occ, o.global_tid, o.start, o.end);
        let waits = gpu_waits_of(self.waits, tl, o.global_tid, (o.start, o.end), m.last_device_end);
        let c = step_components_with(o.start, o.end, &iv[i], self.api, self.comm, &host_comm, &waits, scratch);
        debug_assert_eq!(c.sum(), o.end - o.start);
        // the next step of the same rank (process)
        let rank_of = |j: usize| crate::export::ns_of(a.occurrences[j].global_tid);
        let gap =
            self.idx[k + 1..].iter().find(|&&j| rank_of(j) == rank_of(i)).map(|&j| a.occurrences[j].start - o.end);
        let comm_busy = union_len(iv[i].device.iter().filter(|d| self.comm.has(d)).map(|d| (d.start, d.end)).collect());
        let mut idle = IdleSplit::default();
        if let (Some(fs), Some(le)) = (m.first_device_start, m.last_device_end) {
            let mut devs: Vec<i64> = iv[i].device.iter().map(|d| self.comm.device_id(&d)).collect();
            devs.sort_unstable();
            devs.dedup();
            let mut v = [0i64; 4];
            for d in devs {
                spans.push((d, (fs, le)));
                if let Some(&p) = self.dev_pos.get(&d) {
                    let s = tl.devices[p].idle_in(fs, le).values();
                    for q in 0..4 {
                        v[q] += s[q];
                    }
                }
            }
            idle = IdleSplit { host_wait: v[0], sync_wait: v[1], launch_latency: v[2], other: v[3] };
        }
        let rank = self.rank_pids.iter().position(|&p| p == crate::export::ns_of(o.global_tid)).unwrap_or(0);
        let graph_launches = iv[i].runtime.iter().filter(|r| self.api.is_graph_launch(r.name_id)).count() as u64;
        Step {
            index: k,
            start_ns: o.start,
            wall_ns: o.end - o.start,
            components: c,
            global_tid: o.global_tid,
            kernels: m.kernels,
            memcpys: m.memcpys,
            memsets: m.memsets,
            graph_traces: m.graph_traces,
            runtime_calls: m.runtime_calls,
            graph_launches,
            gpu_busy_ns: m.busy_ns,
            gpu_span_ns: m.span_ns,
            gpu_idle_in_span_ns: m.idle_in_span_ns(),
            first_device_start_ns: m.first_device_start,
            last_device_end_ns: m.last_device_end,
            host_gap_to_next_ns: gap,
            rank,
            comm_busy_ns: comm_busy,
            host_comm_ns: union_len(host_comm),
            idle,
            geometry: None,
        }
    }
}

/// The capture's NCCL kernel rows by `(deviceId, start, end)` ([`device::Timelines::nccl_keys`]), and the
/// `deviceId` of each device index of the correlated rows ([`ranges::Collected::device_ids`]).
#[derive(Clone, Copy)]
pub struct CommRows<'a> {
    pub keys: &'a HashSet<(i64, i64, i64)>,
    pub device_ids: &'a [i64],
}

impl CommRows<'_> {
    /// Is this correlated row an NCCL kernel (recognised by `(device, start, end)` among the NCCL rows)?
    fn has(&self, d: &ranges::CorrelatedDeviceRow) -> bool {
        d.kind == DeviceKind::Kernel && self.keys.contains(&(self.device_id(d), d.start, d.end))
    }
    /// The CUDA `deviceId` of a correlated row.
    fn device_id(&self, d: &ranges::CorrelatedDeviceRow) -> i64 {
        self.device_ids[d.device as usize]
    }
}

/// What each class of [`step_classes`] counts as (the last entry: the rest).
pub const CLASS_COMPONENT: [&str; 8] =
    ["gpu_kernel", "comm", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "comm", "unattributed"];

/// Substrings (case-insensitive) of a host communication label.
pub const COMM_LABEL_PATTERNS: [&str; 10] = [
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "all_to_all",
    "alltoall",
    "broadcast",
    "nccl",
];

/// Is this NVTX label host-side communication?
pub fn is_comm_label(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    COMM_LABEL_PATTERNS.iter().any(|p| l.contains(p))
}

/// The host communication ranges of thread `tid` starting inside `[start, end)`, clipped to it.
/// The processes (`NS(globalTid)`) that run collectives with NCCL: they opened a range in NCCL's own NVTX
/// domain (`NCCL:ncclAllReduce`, …) or their steps own NCCL kernels. NCCL's calls are asynchronous: the host call
/// enqueues the collective, and the wait for the peers is the NCCL kernel's time on the GPU (measured: held-out
/// `nccl`, world size 1, `NCCL:ncclAllReduce` 7.4 µs per call while `tp.all_reduce` around torch's
/// `dist.all_reduce` took 82.7 µs of host time with no peer to wait for).
fn nccl_processes(a: &ranges::Analysis, iv: &[OccurrenceIntervals], idx: &[usize], nccl: CommRows<'_>) -> HashSet<i64> {
    let by_domain = a.occurrences.iter().filter(|o| o.label.starts_with(NCCL_DOMAIN_PREFIX));
    let by_kernel = idx.iter().filter(|&&i| iv[i].device.iter().any(|d| nccl.has(&d))).map(|&i| &a.occurrences[i]);
    by_domain.chain(by_kernel).map(|o| crate::export::ns_of(o.global_tid)).collect()
}

/// The label prefix of NCCL's own NVTX domain (`DOMAIN:` labels of the ranges contract).
pub const NCCL_DOMAIN_PREFIX: &str = "NCCL:";

/// The OS runtime waits of thread `tid` in `[start, end)` while the GPUs its process uses are busy (its GPU work
/// runs, whichever thread launched it: XLA's executor, PyTorch's autograd thread): the thread waits for the GPU.
/// A wait in flight when the step's own device work ends (`last_device_end`: it started before and returned at or
/// after the end of the step's last correlated device row) was released by that work's completion: all of it is
/// waiting for the GPU, as a CUDA sync call that returns after the work is done (JAX/XLA's `block_until_ready()`
/// blocks in `futex` from the launch to past the last kernel: 199 of 200 steps of jax_decode, 38.5 ms). The rest
/// of another wait (the GPU idle too: waiting for another host thread, the GIL) is not: multiprocessing's feeder
/// thread holds the GIL of a vLLM-shaped engine (engine_spawn: 390 `pthread_cond_timedwait`, none in flight when
/// its step's device work ends); counting the idle gaps inside the step's device span (nsys's GPU projection)
/// made 11 % of its steps "sync_wait".
fn gpu_waits_of(
    waits: &HashMap<i64, Vec<(i64, i64)>>,
    tl: &device::Timelines,
    tid: i64,
    (start, end): (i64, i64),
    last_device_end: Option<i64>,
) -> Vec<(i64, i64)> {
    let Some(v) = waits.get(&tid) else { return Vec::new() };
    let pid = crate::export::ns_of(tid);
    let first = v.partition_point(|w| w.1 <= start);
    let mut out = Vec::new();
    for &(ws, we) in v[first..].iter().take_while(|w| w.0 < end) {
        let (s, e) = (ws.max(start), we.min(end));
        if e <= s {
            continue;
        }
        if last_device_end.is_some_and(|le| ws < le && le <= we) {
            out.push((s, e));
            continue;
        }
        for d in tl.devices.iter().filter(|d| d.has_process(pid)) {
            out.extend(d.busy_within(s, e));
        }
    }
    out
}

fn host_comm_of(comm: &HashMap<i64, Vec<(i64, i64)>>, tid: i64, start: i64, end: i64) -> Vec<(i64, i64)> {
    let Some(v) = comm.get(&tid) else { return Vec::new() };
    let lo = v.partition_point(|c| c.0 < start);
    v[lo..].iter().take_while(|c| c.0 < end).map(|&(s, e)| (s, e.min(end))).filter(|(s, e)| e > s).collect()
}

/// The runtime API name ids of the steps' calls by what a step asks of them, from their names once (not a
/// SipHash lookup and a substring search per call of every step).
#[derive(Debug, Default)]
pub struct ApiIds {
    launch: crate::fx::FxSet<i64>,
    graph_launch: crate::fx::FxSet<i64>,
}

impl ApiIds {
    pub fn of(names: &HashMap<i64, String>) -> ApiIds {
        let ids = |f: fn(&str) -> bool| names.iter().filter(|(_, n)| f(n)).map(|(&id, _)| id).collect();
        ApiIds { launch: ids(is_launch), graph_launch: ids(crate::export::schema::is_graph_launch) }
    }
    /// A launch API (kernel or graph).
    fn is_launch(&self, id: Option<i64>) -> bool {
        id.is_some_and(|i| self.launch.contains(&i))
    }
    fn is_graph_launch(&self, id: Option<i64>) -> bool {
        id.is_some_and(|i| self.graph_launch.contains(&i))
    }
}

/// The buffers one thread's steps reuse from one step to the next (a step's classes and partition were eleven
/// allocations).
#[derive(Debug, Default)]
pub struct StepScratch {
    classes: Vec<Vec<(i64, i64)>>,
    partition: PartitionBuffers,
}

/// The intervals of one step per class, in priority order: compute kernels, NCCL kernels, memcpy/memset,
/// sync APIs, launch APIs, other APIs, host communication ranges (see [`CLASS_COMPONENT`]).
pub fn step_classes(
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
) -> Vec<Vec<(i64, i64)>> {
    let mut cls = Vec::new();
    fill_step_classes(iv, api, nccl, host_comm, waits, &mut cls);
    cls
}

/// [`step_classes`] into `cls` (its vectors reused).
fn fill_step_classes(
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
    cls: &mut Vec<Vec<(i64, i64)>>,
) {
    cls.resize_with(7, Vec::new);
    cls.iter_mut().for_each(Vec::clear);
    cls[6].extend_from_slice(host_comm);
    // OS runtime waits while the step's GPU work runs: waiting for the GPU, as a sync call; inside a host
    // communication range a wait is that communication's (class 6)
    if host_comm.is_empty() {
        cls[3].extend_from_slice(waits);
    } else {
        let comm = device::union(host_comm.to_vec());
        for &(s, e) in waits {
            let mut at = s;
            for &(cs, ce) in comm.iter().filter(|c| c.1 > s && c.0 < e) {
                if cs > at {
                    cls[3].push((at, cs));
                }
                at = at.max(ce);
            }
            if e > at {
                cls[3].push((at, e));
            }
        }
    }
    for d in iv.device.iter() {
        let k = match d.kind {
            DeviceKind::Kernel if nccl.has(&d) => 1,
            DeviceKind::Kernel | DeviceKind::GraphTrace => 0,
            DeviceKind::Memcpy | DeviceKind::Memset => 2,
        };
        cls[k].push((d.start, d.end));
    }
    for r in &iv.runtime {
        let k = if r.sync {
            3
        } else if api.is_launch(r.name_id) {
            4
        } else {
            5
        };
        cls[k].push((r.start, r.end));
    }
}

/// The partition of one step from its intervals.
pub fn step_components(
    start: i64,
    end: i64,
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
) -> Components {
    step_components_with(start, end, iv, api, nccl, host_comm, waits, &mut StepScratch::default())
}

/// [`step_components`] in the buffers of `scratch`.
#[allow(clippy::too_many_arguments)]
fn step_components_with(
    start: i64,
    end: i64,
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
    scratch: &mut StepScratch,
) -> Components {
    let StepScratch { classes, partition } = scratch;
    fill_step_classes(iv, api, nccl, host_comm, waits, classes);
    let (v, rest) = partition_in(start, end, classes, partition);
    Components {
        gpu_kernel: v[0],
        comm: v[1] + v[6],
        gpu_memcpy: v[2],
        sync_wait: v[3],
        launch_api: v[4],
        other_api: v[5],
        unattributed: rest,
    }
}

impl Components {
    /// The value of a component by name.
    pub fn get(&self, name: &str) -> i64 {
        Components::NAMES.iter().position(|n| *n == name).map(|k| self.values()[k]).unwrap_or(0)
    }
}

/// The priority sweep of `[start, end)` in time order: `(class, from, to)` with consecutive ns of one class
/// merged; class `classes.len()` is the rest.
pub fn sweep_segments(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> Vec<(usize, i64, i64)> {
    let unions: Vec<Vec<(i64, i64)>> = classes
        .iter()
        .map(|c| device::union(c.iter().map(|&(s, e)| (s.max(start), e.min(end))).filter(|(s, e)| e > s).collect()))
        .collect();
    let mut cuts: Vec<i64> = vec![start, end];
    for u in &unions {
        for &(s, e) in u {
            cuts.push(s);
            cuts.push(e);
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let covers = |u: &[(i64, i64)], t: i64| {
        let i = u.partition_point(|x| x.1 <= t);
        i < u.len() && u[i].0 <= t
    };
    let mut out: Vec<(usize, i64, i64)> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let k = unions.iter().position(|u| covers(u, a)).unwrap_or(classes.len());
        match out.last_mut() {
            Some(l) if l.0 == k && l.2 == a => l.2 = b,
            _ => out.push((k, a, b)),
        }
    }
    out
}

/// The most segments a waterfall keeps.
pub const WATERFALL_SEGMENTS: usize = 4096;

/// How far above the median a step must be to be slow (robust: the median absolute deviation, scaled to a
/// standard deviation by 1.4826, of all steps; warm-up steps barely move it).
pub const OUTLIER_ROBUST_SIGMAS: f64 = 5.0;
/// A slow step is at least this × the median (regular loops have a tiny deviation).
pub const OUTLIER_MIN_RATIO: f64 = 1.25;
/// The warm-up of a rank is at most this many of its first steps (and a tenth of them when more).
pub const WARMUP_MAX_STEPS: usize = 5;

/// The slow steps: wall above `min(factor × median, max(OUTLIER_MIN_RATIO × median, median + 5 σ))`, σ the
/// robust deviation: a stall of 1.6× the median in a regular loop is slow, as is anything beyond the factor.
struct Slow {
    slow: Vec<bool>,
    median: i64,
}

fn slow_steps(steps: &[Step], median: i64, factor: f64) -> Slow {
    let mut dev: Vec<i64> = steps.iter().map(|s| (s.wall_ns - median).abs()).collect();
    dev.sort_unstable();
    let mad = if dev.is_empty() { 0 } else { dev[dev.len() / 2] };
    let robust = (median as f64 + OUTLIER_ROBUST_SIGMAS * 1.4826 * mad as f64).max(OUTLIER_MIN_RATIO * median as f64);
    let limit = robust.min(factor * median as f64);
    Slow { slow: steps.iter().map(|s| median > 0 && s.wall_ns as f64 > limit).collect(), median }
}

impl Slow {
    /// `(warm-up, outliers)`: the slow steps at the start of each rank (at most [`WARMUP_MAX_STEPS`], or a tenth
    /// of its steps, each one slow from its first step on) are its warm-up; the other slow steps are outliers.
    fn split(&self, steps: &[Step]) -> (Vec<Outlier>, Vec<Outlier>) {
        let mut seen: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
        let per_rank: BTreeMap<usize, usize> = steps.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.rank).or_insert(0) += 1;
            m
        });
        let (mut warm, mut out) = (Vec::new(), Vec::new());
        for (s, &slow) in steps.iter().zip(&self.slow) {
            let (k, leading) = seen.entry(s.rank).or_insert((0, true));
            let max_warm = WARMUP_MAX_STEPS.max(per_rank[&s.rank] / 10);
            let o = Outlier {
                index: s.index,
                start_ns: s.start_ns,
                wall_ns: s.wall_ns,
                ratio_to_median: s.wall_ns as f64 / self.median.max(1) as f64,
            };
            if slow && *leading && *k < max_warm {
                warm.push(o);
            } else {
                *leading = false;
                if slow {
                    out.push(o);
                }
            }
            *k += 1;
        }
        (warm, out)
    }
}

/// A periodic stall: on one rank, at least three outliers whose step numbers (within the rank) step by one
/// period, for at least 80 % of the gaps between them.
fn periodic_stall_of(steps: &[Step], outliers: &[Outlier]) -> Option<PeriodicStall> {
    let mut k_of: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for s in steps {
        let c = counts.entry(s.rank).or_insert(0);
        k_of.insert(s.index, (s.rank, *c));
        *c += 1;
    }
    let mut by_rank: BTreeMap<usize, Vec<(usize, &Outlier)>> = BTreeMap::new();
    for o in outliers {
        if let Some(&(r, k)) = k_of.get(&o.index) {
            by_rank.entry(r).or_default().push((k, o));
        }
    }
    let median_wall = |o: &[&Outlier]| {
        let mut v: Vec<f64> = o.iter().map(|o| o.ratio_to_median).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    by_rank.into_iter().find_map(|(rank, list)| {
        if list.len() < 3 {
            return None;
        }
        let gaps: Vec<usize> = list.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let mut freq: BTreeMap<usize, usize> = BTreeMap::new();
        for g in &gaps {
            *freq.entry(*g).or_insert(0) += 1;
        }
        let (&period, &n) = freq.iter().max_by_key(|(g, n)| (**n, std::cmp::Reverse(**g)))?;
        if period < 2 || (n as f64) < 0.8 * gaps.len() as f64 {
            return None;
        }
        let kept: Vec<&Outlier> = list.iter().map(|(_, o)| *o).collect();
        let ratio = median_wall(&kept);
        let mut walls: Vec<i64> = kept.iter().map(|o| o.wall_ns).collect();
        walls.sort_unstable();
        let base = (kept[0].wall_ns as f64 / kept[0].ratio_to_median.max(f64::MIN_POSITIVE)) as i64;
        Some(PeriodicStall {
            period,
            rank,
            first_index: kept[0].index,
            count: kept.len(),
            median_ratio: ratio,
            extra_ns: walls[walls.len() / 2] - base,
        })
    })
}

/// Whether a step is not an outlier: its index looked up in the outliers' indices, sorted (a scan of every
/// outlier per step was 25 M comparisons at 100 k steps and 250 outliers).
fn typical_step(outliers: &[Outlier]) -> impl Fn(&&Step) -> bool {
    let mut at: Vec<usize> = outliers.iter().map(|o| o.index).collect();
    at.sort_unstable();
    move |s: &&Step| at.binary_search(&s.index).is_err()
}

#[allow(clippy::too_many_arguments)]
fn waterfall_of(
    steps: &[Step],
    outliers: &[Outlier],
    median_wall: i64,
    idx: &[usize],
    a: &ranges::Analysis,
    iv: &[OccurrenceIntervals],
    api: &ApiIds,
    nccl: CommRows<'_>,
    comm_occ: &HashMap<i64, Vec<(i64, i64)>>,
    waits: &HashMap<i64, Vec<(i64, i64)>>,
    tl: &device::Timelines,
) -> Option<Waterfall> {
    let typical = typical_step(outliers);
    let s = steps
        .iter()
        .filter(&typical)
        .find(|s| s.wall_ns == median_wall)
        .or_else(|| steps.iter().filter(&typical).min_by_key(|s| ((s.wall_ns - median_wall).abs(), s.index)))
        .or_else(|| steps.first())?;
    let o = &a.occurrences[idx[s.index]];
    let hc = host_comm_of(comm_occ, o.global_tid, o.start, o.end);
    let w = gpu_waits_of(waits, tl, o.global_tid, (o.start, o.end), a.metrics[idx[s.index]].last_device_end);
    let cls = step_classes(&iv[idx[s.index]], api, nccl, &hc, &w);
    let seg = sweep_segments(o.start, o.end, &cls);
    let segments = seg
        .iter()
        .map(|&(k, f, t)| Segment { component: CLASS_COMPONENT[k].to_string(), offset_ns: f - o.start, dur_ns: t - f })
        .collect::<Vec<_>>();
    // merge neighbours that became one component (NCCL kernels, then host comm)
    let mut merged: Vec<Segment> = Vec::with_capacity(segments.len());
    for g in segments {
        match merged.last_mut() {
            Some(l) if l.component == g.component && l.offset_ns + l.dur_ns == g.offset_ns => l.dur_ns += g.dur_ns,
            _ => merged.push(g),
        }
    }
    let truncated = merged.len() > WATERFALL_SEGMENTS;
    merged.truncate(WATERFALL_SEGMENTS);
    let segments = merged;
    let mut cum = 0;
    let bars = PRIORITY
        .iter()
        .map(|n| {
            let ns = s.components.get(n);
            let b = WaterfallBar { component: n.to_string(), ns, cumulative_ns: cum };
            cum += ns;
            b
        })
        .collect();
    Some(Waterfall { index: s.index, start_ns: s.start_ns, wall_ns: s.wall_ns, bars, segments, truncated })
}

fn ranks_of(steps: &[Step], rank_pids: &[i64], tl: &device::Timelines) -> (Vec<RankBudget>, Vec<Straggler>) {
    let mut ranks: Vec<RankBudget> = Vec::new();
    let mut per_rank: Vec<Vec<&Step>> = vec![Vec::new(); rank_pids.len()];
    for s in steps {
        per_rank[s.rank].push(s);
    }
    for (r, &pid) in rank_pids.iter().enumerate() {
        let mine: &[&Step] = &per_rank[r];
        let mut devices: Vec<(i64, i64)> =
            tl.devices.iter().filter_map(|d| d.busy_by_pid.get(&pid).map(|&b| (d.device_id, b))).collect();
        devices.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        let device_id = devices.first().map(|d| d.0);
        let (mut comm, mut exposed, mut compute) = (0, 0, 0);
        let (mut kl, mut gl) = (LatencyDist::default(), LatencyDist::default());
        if let Some(d) = tl.devices.iter().find(|d| Some(d.device_id) == device_id) {
            (comm, exposed) = d.comm_of(pid);
            compute = d.compute_busy();
            if let Some(l) = d.launch_by_pid.get(&pid) {
                (kl, gl) = *l;
            }
        }
        let mut distributions = distributions_of(mine.iter().copied(), false);
        distributions.insert("comm_busy".into(), dist(mine.iter().map(|s| s.comm_busy_ns)));
        let totals = totals_of(mine.iter().copied());
        let mut ds: Vec<i64> = devices.iter().map(|d| d.0).collect();
        ds.sort_unstable();
        ranks.push(RankBudget {
            rank: r,
            global_pid: pid,
            pid: crate::export::pid_of(pid),
            device_id,
            devices: ds,
            steps: mine.len(),
            first_index: mine.first().map(|s| s.index),
            distributions,
            totals,
            comm_busy_ns: comm,
            exposed_comm_ns: exposed,
            compute_busy_ns: compute,
            straggler_steps: 0,
            pacing: pacing_of(mine.iter().copied()),
            kernel_launch: kl,
            graph_launch: gl,
        });
    }
    let mut stragglers = Vec::new();
    if rank_pids.len() >= 2 {
        let k_max = per_rank.iter().map(|v| v.len()).min().unwrap_or(0);
        for k in 0..k_max {
            let row: Vec<&Step> = per_rank.iter().map(|v| v[k]).collect();
            let end = |s: &Step| s.start_ns + s.wall_ns;
            let wait = |s: &Step| s.comm_busy_ns + s.host_comm_ns;
            let any_comm = row.iter().any(|s| wait(s) > 0);
            let (rank, rule, lead) = if any_comm {
                let r = (0..row.len()).min_by_key(|&r| (wait(row[r]), std::cmp::Reverse(end(row[r])), r)).unwrap();
                let mx = row.iter().map(|s| wait(s)).max().unwrap();
                (r, "least_comm", mx - wait(row[r]))
            } else {
                let r = (0..row.len()).max_by_key(|&r| (end(row[r]), std::cmp::Reverse(r))).unwrap();
                let mn = row.iter().map(|s| end(s)).min().unwrap();
                (r, "last_end", end(row[r]) - mn)
            };
            ranks[rank].straggler_steps += 1;
            stragglers.push(Straggler {
                occurrence: k,
                step_indexes: row.iter().map(|s| s.index).collect(),
                rank,
                rule: rule.into(),
                lead_ns: lead,
            });
        }
    }
    (ranks, stragglers)
}

fn distributions_of<'a>(steps: impl Iterator<Item = &'a Step>, all: bool) -> BTreeMap<String, Dist> {
    // the values of every distribution gathered in one pass over the steps (a pass per distribution read each
    // step's cache lines eleven times over: 100 k steps of ~490 bytes)
    const WALL: usize = Components::NAMES.len();
    let (busy, idle) = (WALL + 1, WALL + 2);
    let n = steps.size_hint().0;
    let mut cols: [Vec<i64>; WALL + 3] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut gaps: Vec<i64> = Vec::new();
    for s in steps {
        for (col, v) in cols.iter_mut().zip(s.components.values()) {
            col.push(v);
        }
        cols[WALL].push(s.wall_ns);
        cols[busy].push(s.gpu_busy_ns);
        if all {
            cols[idle].push(s.gpu_idle_in_span_ns);
            gaps.extend(s.host_gap_to_next_ns);
        }
    }
    let ds = cols.map(dist);
    let mut d = BTreeMap::new();
    d.insert("wall".to_string(), ds[WALL]);
    d.insert("gpu_busy".to_string(), ds[busy]);
    if all {
        d.insert("gpu_idle_in_span".to_string(), ds[idle]);
        d.insert("host_gap_to_next".to_string(), dist(gaps));
    }
    for (k, name) in Components::NAMES.iter().enumerate() {
        d.insert(name.to_string(), ds[k]);
    }
    d
}

/// The wall and each component summed over `steps`, in one pass.
fn totals_of<'a>(steps: impl IntoIterator<Item = &'a Step>) -> BTreeMap<String, i64> {
    let (mut wall, mut sums) = (0i64, [0i64; Components::NAMES.len()]);
    for s in steps {
        wall += s.wall_ns;
        for (t, v) in sums.iter_mut().zip(s.components.values()) {
            *t += v;
        }
    }
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    totals.insert("wall".into(), wall);
    for (name, t) in Components::NAMES.iter().zip(sums) {
        totals.insert(name.to_string(), t);
    }
    totals
}

/// Start-to-start intervals of consecutive steps of the same rank (all ranks' intervals together).
fn pacing_of<'a>(steps: impl Iterator<Item = &'a Step>) -> Option<Pacing> {
    let mut last: BTreeMap<usize, i64> = BTreeMap::new();
    let mut iv: Vec<i64> = Vec::new();
    for s in steps {
        if let Some(p) = last.insert(s.rank, s.start_ns) {
            iv.push(s.start_ns - p);
        }
    }
    if iv.is_empty() {
        return None;
    }
    let d = dist(iv.iter().copied());
    let n = iv.len() as f64;
    let mean = iv.iter().map(|&x| x as f64).sum::<f64>() / n;
    let cv = (iv.len() >= 2 && mean > 0.0)
        .then(|| (iv.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / mean);
    let ratio = (d.median > 0).then(|| d.p90 as f64 / d.median as f64);
    Some(Pacing {
        intervals: d,
        min: *iv.iter().min().unwrap(),
        mean_ns: mean,
        cv,
        p90_over_median: ratio,
        regular: ratio.is_some_and(|r| r <= 1.25),
    })
}

/// A capture without any NVTX range has no step to budget: the same message for its lazy export (no
/// `NVTX_EVENTS` table) and its `--lazy=false` export (an empty one), with the cause when the export says it.
/// Why no step can be attributed in a capture without NVTX ranges, and what to add.
fn no_range_why(export: &Export) -> Result<String> {
    let cause = export.nvtx_recorded()?.no_range_cause().map(|c| format!(" ({c})")).unwrap_or_default();
    Ok(format!(
        "the capture holds no NVTX range{cause}, so no engine step and no phase can be attributed: the budget is the GPUs' own picture over the whole capture; {}",
        crate::export::nvtx::ANNOTATE
    ))
}

/// The step budget of a capture in which no step can be attributed (`why`): no step, the device picture of
/// every GPU over its whole active span, and the class it supports ([`picture`]).
fn device_only(export: &Export, ropts: &RangesOptions, opts: &StepBudgetOptions, why: String) -> Result<StepBudgetDoc> {
    let (_, collected) = ranges::analyze_with_intervals(export, ropts, &|_| false)?;
    let tl = device::build(export, &collected.rows)?;
    let (kernels, copies) = picture::export_kernel_stats(export)?;
    let exposure = picture::export_exposure(export, &collected.rows.device, &kernels, copies)?;
    Ok(device_only_of(export.name(), &tl, exposure.as_ref(), opts, vec![why]))
}

/// The note on the device rows whose `(globalPid, correlationId)` several runtime calls share (linked to no call,
/// no step), or None.
fn ambiguous_join_note(tl: &device::Timelines) -> Option<String> {
    (tl.ambiguous_joins > 0).then(|| format!("device timelines: {} device rows have a (globalPid, correlationId) that more than one CUPTI_ACTIVITY_KIND_RUNTIME call shares: the join is ambiguous, so they are linked to no call and no step, never to several", tl.ambiguous_joins))
}

/// [`device_only`] from device timelines already built (report's evidence): `notes` first say why no step.
pub fn device_only_of(
    source: String,
    tl: &device::Timelines,
    exposure: Option<&picture::Exposure>,
    opts: &StepBudgetOptions,
    mut notes: Vec<String>,
) -> StepBudgetDoc {
    let rows = picture::rows(tl, exposure);
    let picture = picture::decide(&rows);
    let idle: i64 = tl.devices.iter().map(|d| d.idle.idle_ns).sum();
    let verdict_rows: Vec<VerdictRow> = device::IDLE_NAMES
        .iter()
        .map(|n| {
            let ns: i64 = tl.devices.iter().map(|d| d.idle.categories.get(*n).map_or(0, |c| c.ns)).sum();
            VerdictRow { name: format!("idle_{n}"), value_ns: ns, share: (idle > 0).then(|| ns as f64 / idle as f64) }
        })
        .collect();
    notes.extend(picture.decided_by.iter().map(|f| format!("decided by: {f}")));
    let (ranks, stragglers) = device_ranks(tl);
    for r in ranks.iter().filter(|r| r.straggler_steps > 0) {
        let leads: Vec<i64> = stragglers.iter().filter(|x| x.rank == r.rank).map(|x| x.lead_ns).collect();
        notes.push(format!(
            "rank {} (pid {}) is the straggler of {} of {} matched collectives (the rank whose NCCL kernel waited least: the others waited for it; median lead {} ns, max {} ns)",
            r.rank,
            r.pid,
            leads.len(),
            stragglers.len(),
            dist(leads.iter().copied()).median,
            leads.iter().max().copied().unwrap_or(0)
        ));
    }
    if let Some(s) = crate::export::describe_skips(&tl.skips) {
        notes.push(format!("device timelines: rows skipped: {s}"));
    }
    if let Some(n) = ambiguous_join_note(tl) {
        notes.push(n);
    }
    let (schema, tool) = StepBudgetDoc::header();
    StepBudgetDoc {
        schema,
        tool,
        source,
        step_label: String::new(),
        step_label_choice: "none: no step can be attributed".into(),
        outlier_factor: opts.outlier_factor,
        graph_level: false,
        nccl_kernels: tl.nccl_kernels,
        nccl_by_name: tl.nccl_by_name.clone(),
        steps: Vec::new(),
        distributions: distributions_of(std::iter::empty(), true),
        totals: totals_of(std::iter::empty()),
        outliers: Vec::new(),
        warmup: Vec::new(),
        periodic_stall: None,
        pacing: None,
        groups: Vec::new(),
        comm_labels: Vec::new(),
        waterfall: None,
        idle: tl.devices.iter().map(|d| d.idle.clone()).collect(),
        launch: tl.devices.iter().map(|d| d.launch.clone()).collect(),
        ranks,
        stragglers,
        verdict: BudgetVerdict {
            class: picture.class.into(),
            rule: picture.rule.into(),
            reason: picture.reason,
            steps_used: 0,
            rows: verdict_rows,
            would_be: None,
        },
        gates: None,
        notes,
        iterations: None,
        devices: rows,
    }
}

/// Without steps, the ranks are the processes with device rows (one per GPU in a torchrun/tensor-parallel run),
/// in `globalPid` order; with two or more, the k-th NCCL kernel of every rank is one collective, and its
/// straggler the rank whose kernel waited least (rule `least_comm_collective`: the others' kernels began
/// earlier and waited for it; lead = longest − shortest of those kernels).
fn device_ranks(tl: &device::Timelines) -> (Vec<RankBudget>, Vec<Straggler>) {
    let mut pids: Vec<i64> = tl.devices.iter().flat_map(|d| d.busy_by_pid.keys().copied()).collect();
    pids.sort_unstable();
    pids.dedup();
    let mut ranks: Vec<RankBudget> = pids
        .iter()
        .enumerate()
        .map(|(r, &pid)| {
            let mut devices: Vec<(i64, i64)> =
                tl.devices.iter().filter_map(|d| d.busy_by_pid.get(&pid).map(|&b| (d.device_id, b))).collect();
            devices.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let device_id = devices.first().map(|d| d.0);
            let (mut comm, mut exposed, mut compute) = (0, 0, 0);
            let (mut kl, mut gl) = (device::LatencyDist::default(), device::LatencyDist::default());
            if let Some(d) = tl.devices.iter().find(|d| Some(d.device_id) == device_id) {
                (comm, exposed) = d.comm_of(pid);
                compute = d.compute_busy();
                if let Some(l) = d.launch_by_pid.get(&pid) {
                    (kl, gl) = *l;
                }
            }
            let mut ds: Vec<i64> = devices.iter().map(|d| d.0).collect();
            ds.sort_unstable();
            RankBudget {
                rank: r,
                global_pid: pid,
                pid: crate::export::pid_of(pid),
                device_id,
                devices: ds,
                steps: 0,
                first_index: None,
                distributions: BTreeMap::new(),
                totals: totals_of(std::iter::empty()),
                comm_busy_ns: comm,
                exposed_comm_ns: exposed,
                compute_busy_ns: compute,
                straggler_steps: 0,
                pacing: None,
                kernel_launch: kl,
                graph_launch: gl,
            }
        })
        .collect();
    let mut stragglers = Vec::new();
    let lists: Vec<&[(i64, i64, i64)]> =
        pids.iter().map(|p| tl.nccl_rows.get(p).map_or(&[][..], |v| v.as_slice())).collect();
    if lists.len() >= 2 {
        let k_max = lists.iter().map(|v| v.len()).min().unwrap_or(0);
        for k in 0..k_max {
            let dur = |r: usize| lists[r][k].1 - lists[r][k].0;
            let r = (0..lists.len()).min_by_key(|&r| (dur(r), std::cmp::Reverse(lists[r][k].0), r)).unwrap_or(0);
            let longest = (0..lists.len()).map(dur).max().unwrap_or(0);
            ranks[r].straggler_steps += 1;
            stragglers.push(Straggler {
                occurrence: k,
                step_indexes: Vec::new(),
                rank: r,
                rule: "least_comm_collective".into(),
                lead_ns: longest - dur(r),
            });
        }
    }
    (ranks, stragglers)
}

fn no_range_error(export: &Export) -> Result<Error> {
    let cause = export.nvtx_recorded()?.no_range_cause().map(|c| format!("; {c}")).unwrap_or_default();
    Ok(Error::input(format!(
        "{}: the capture holds no NVTX range, so there is no engine step to budget{cause}; {}; `report` gives the GPU-side evidence of a capture without ranges",
        export.name(),
        crate::export::nvtx::ANNOTATE
    ))
    .with_arg("--step"))
}

fn verdict_of(
    totals: &BTreeMap<String, i64>,
    dists: &BTreeMap<String, Dist>,
    pacing: Option<&Pacing>,
    graph_level: bool,
    nccl: u64,
) -> BudgetVerdict {
    let wall = totals["wall"].max(1);
    let mut rows: Vec<VerdictRow> = Components::NAMES
        .iter()
        .map(|n| VerdictRow { name: n.to_string(), value_ns: totals[*n], share: Some(totals[*n] as f64 / wall as f64) })
        .collect();
    rows.sort_by(|a, b| b.value_ns.cmp(&a.value_ns).then(a.name.cmp(&b.name)));
    if graph_level {
        return BudgetVerdict {
            class: "mixed_or_unclear".into(),
            rule: "graph_level_capture".into(),
            reason: "graph-level capture: the graph replays are single GRAPH_TRACE rows, no node-level kernel rows; re-capture with --cuda-graph-trace=node".into(),
            steps_used: 0,
            rows,
            would_be: None,
        };
    }
    let period = pacing.map(|p| p.intervals.median).unwrap_or(0);
    let busy = dists["gpu_busy"].median;
    if period > 0 && busy as f64 >= GPU_SATURATED_SHARE * period as f64 {
        let mut r = vec![
            VerdictRow { name: "median_gpu_busy".into(), value_ns: busy, share: Some(busy as f64 / period as f64) },
            VerdictRow { name: "median_step_period".into(), value_ns: period, share: None },
        ];
        // what fills the busy GPU: compute, copies, or communication no compute hides (the largest of the
        // device components of the steps' wall)
        let (what, class) = [("gpu_kernel", "kernel_bound"), ("gpu_memcpy", "memcpy_bound"), ("comm", "comm_bound")]
            .into_iter()
            .max_by_key(|(n, _)| totals[*n])
            .unwrap_or(("gpu_kernel", "kernel_bound"));
        r.extend(rows);
        return BudgetVerdict {
            class: class.into(),
            rule: "gpu_saturated".into(),
            reason: format!("the median step's correlated GPU busy ({busy} ns) is ≥ {GPU_SATURATED_SHARE} of the median start-to-start period ({period} ns); the largest device component of the steps is {what} ({:.1}% of their wall)", totals[what] as f64 * 100.0 / wall as f64),
            steps_used: 0,
            rows: r,
            would_be: None,
        };
    }
    let top = &rows[0];
    let share = top.share.unwrap_or(0.0);
    if share >= DOMINANT_SHARE {
        let class = match top.name.as_str() {
            "gpu_kernel" => "kernel_bound",
            "gpu_memcpy" => "memcpy_bound",
            "sync_wait" => "sync_bound",
            "launch_api" | "other_api" => "cpu_launch_bound",
            "comm" => "comm_bound",
            _ => "python_overhead_bound",
        };
        let mut reason = format!(
            "{} is {:.1}% of the typical (non-outlier) steps' wall (≥ {:.0}%)",
            top.name,
            share * 100.0,
            DOMINANT_SHARE * 100.0
        );
        if nccl > 0 && top.name != "comm" {
            reason.push_str("; NCCL kernels exist: their exposed time is comm");
        }
        return BudgetVerdict {
            class: class.into(),
            rule: "dominant_component".into(),
            reason,
            steps_used: 0,
            rows,
            would_be: None,
        };
    }
    BudgetVerdict {
        class: "mixed_or_unclear".into(),
        rule: "no_dominant_component".into(),
        reason: format!(
            "no component reaches {:.0}% of the typical steps' wall (largest: {} at {:.1}%)",
            DOMINANT_SHARE * 100.0,
            top.name,
            share * 100.0
        ),
        steps_used: 0,
        rows,
        would_be: None,
    }
}

/// Open the capture (an `.nsys-rep` is exported into a temporary folder), analyse it and judge the verdict by
/// the capture's gates ([`judge`]).
pub fn run(path: &Path, opts: &StepBudgetOptions, nsys: Option<&Path>) -> Result<StepBudgetDoc> {
    let cap = crate::export::open_capture(path, nsys)?;
    let mut doc = analyze(&cap.export, opts)?;
    doc.source = cap.source.path.clone();
    judge(&mut doc, &cap.export, &cap.source)?;
    Ok(doc)
}

/// A verdict never stands on a capture its gates rejected: gate-check (throughput tier) runs on the export;
/// on RETRY the verdict becomes `unreliable` (rule `gates.G…`, the gates' reasons first) and the verdict the
/// evidence alone gives is kept as `would_be`. `gates` records what gate-check said either way.
pub fn judge(doc: &mut StepBudgetDoc, export: &Export, source: &crate::export::CaptureSource) -> Result<()> {
    let Some(gates) = crate::gate::EvidenceGates::of_export(export, source)? else { return Ok(()) };
    if gates.rejected() {
        // already rejected by readiness: the gates come first, the verdict the evidence gives stays the one kept
        if let Some(w) = doc.verdict.would_be.take() {
            doc.verdict = *w;
        }
        let would = std::mem::replace(
            &mut doc.verdict,
            BudgetVerdict {
                class: UNRELIABLE.into(),
                rule: format!("gates.{}", gates.retry.join("+")),
                reason: String::new(),
                steps_used: 0,
                rows: Vec::new(),
                would_be: None,
            },
        );
        doc.verdict.reason = format!(
            "gate-check said RETRY: {}; the class the evidence alone gives ({}, {}) does not stand on a capture its gates rejected: capture again",
            gates.reasons.join("; "),
            would.class,
            would.rule
        );
        doc.verdict.steps_used = would.steps_used;
        doc.verdict.rows = would.rows.clone();
        doc.verdict.would_be = Some(Box::new(would));
    }
    doc.gates = Some(gates);
    Ok(())
}

/// A host-side verdict resting on step time no range names does not stand (NVTX readiness: an opaque gap is
/// compatible with scheduling, input preparation, a hidden sync and Python alike): `unreliable`, rule
/// `readiness.opaque_step`, the verdict the evidence gives kept as `would_be` ([`crate::readiness::rests_on_opaque`]).
fn reject_on_opaque_step(verdict: &mut BudgetVerdict, occ: &[ranges::Occurrence], label: &str) {
    let unattributed = match verdict.rows.first() {
        Some(r) if verdict.class == "python_overhead_bound" && r.name == "unattributed" => r.share.unwrap_or(0.0),
        _ => return,
    };
    let Some(opaque) = crate::readiness::opaque_step_share(occ, label) else { return };
    if !crate::readiness::rests_on_opaque(unattributed, opaque) {
        return;
    }
    let would = verdict.clone();
    *verdict = BudgetVerdict {
        class: UNRELIABLE.into(),
        rule: "readiness.opaque_step".into(),
        reason: format!(
            "NVTX readiness rejects this verdict: {:.1} % of the wall of {label:?} is covered by no range nested in it (nvtx-readiness's threshold {:.0} %), and {} ({}) rests on that unnamed host time; an opaque gap is compatible with scheduling, input preparation, attention planning, a hidden sync and Python overhead alike: add NVTX ranges for the phases of the step before choosing an optimisation",
            100.0 * opaque,
            100.0 * crate::readiness::DEFAULT_MAX_OPAQUE_SHARE,
            would.class,
            would.reason
        ),
        steps_used: would.steps_used,
        rows: would.rows.clone(),
        would_be: Some(Box::new(would)),
    };
}

/// The class of a verdict that does not stand (a capture its gates rejected).
pub const UNRELIABLE: &str = "unreliable";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_priority_is_exact() {
        // wall [0,100): kernel [10,40), memcpy [30,50), sync [0,60), launch [55,70)
        let cls = vec![vec![(10, 40)], vec![(30, 50)], vec![(0, 60)], vec![(55, 70)], vec![(-5, 200)]];
        let (v, rest) = partition(0, 100, &cls);
        assert_eq!(v, vec![30, 10, 20, 10, 30]);
        assert_eq!(rest, 0);
        let (v, rest) = partition(0, 100, &[vec![(10, 20), (15, 30)], vec![]]);
        assert_eq!((v, rest), (vec![20, 0], 80));
    }

    #[test]
    fn depth_counts_dist_equals_dist() {
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
        assert_eq!(DepthCounts::default().dist(), dist(Vec::new()));
        for round in 0..500 {
            let len = 1 + next(300) as usize;
            // small depths, some below zero (an end before the issue of a zero-length row), the first value
            // not the least
            let v: Vec<i64> = (0..len).map(|_| next(40) - if round % 3 == 0 { 5 } else { 0 }).collect();
            let mut h = DepthCounts::default();
            v.iter().for_each(|&d| h.add(d));
            assert_eq!(h.dist(), dist(v.clone()), "{v:?}");
        }
    }

    /// The definition, class by class: `|∪_{j≤k}| − |∪_{j<k}|` of the clipped intervals.
    fn partition_by_definition(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> (Vec<i64>, i64) {
        let mut acc: Vec<(i64, i64)> = Vec::new();
        let (mut prev, mut out) = (0, Vec::new());
        for c in classes {
            acc.extend(c.iter().map(|&(s, e)| (s.max(start), e.min(end))));
            let l = union_len(acc.clone());
            out.push(l - prev);
            prev = l;
        }
        (out, (end - start) - prev)
    }

    #[test]
    fn partition_equals_the_definition() {
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let (start, end) = (next(50), 50 + next(100));
            let classes: Vec<Vec<(i64, i64)>> = (0..1 + next(7))
                .map(|_| {
                    (0..next(6))
                        .map(|_| {
                            let s = next(200) - 20;
                            (s, s + next(60) - 5)
                        })
                        .collect()
                })
                .collect();
            assert_eq!(partition(start, end, &classes), partition_by_definition(start, end, &classes), "{classes:?}");
        }
    }

    #[test]
    fn nearest_rank() {
        let d = dist((1..=100).rev());
        assert_eq!((d.median, d.p90, d.p99, d.max, d.count), (50, 90, 99, 100, 100));
        assert_eq!(dist(std::iter::empty()), Dist { count: 0, median: 0, p90: 0, p99: 0, max: 0 });
    }

    #[test]
    fn selection_gives_the_sorted_ranks() {
        // values with many duplicates and negatives, every size up to 300
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 1..=300usize {
            let v: Vec<i64> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((x >> 33) % 41) as i64 - 20
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_unstable();
            let at = |q: f64| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
            let want = Dist { count: n, median: at(0.5), p90: at(0.9), p99: at(0.99), max: sorted[n - 1] };
            assert_eq!(dist(v.iter().copied()), want, "n = {n}");
        }
    }
}
