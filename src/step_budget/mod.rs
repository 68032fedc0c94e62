//! `step-budget`: where each engine step's time went, step by step (`nsyskit.step-budget/v1`).
//!
//! A *step* is one occurrence of the step label (`--step`, default the step label of [`crate::step_label`], the
//! rule every tool shares). Its host wall `[start, end)` is partitioned exactly into
//! components by a priority sweep (see docs/step-budget.md): every ns of the wall lands in the first of
//! `gpu_kernel`, `gpu_memcpy`, `sync_wait`, `launch_api`, `other_api` whose intervals cover it, else in
//! `unattributed`. The intervals are the step's own, from the library's attribution
//! ([`crate::sqlite_ranges::analyze_with_intervals`]: runtime calls on the step's thread, then
//! `(globalPid, correlationId)` to the device rows), never a second join.
//!
//! Around the steps, [`device`] reads every device row of the capture per device for the GPU idle attribution
//! (`idle[]`), the launch behaviour (`launch[]`) and the NCCL/compute overlap; the steps are then grouped per
//! rank (process) with the straggler of each matched step (`ranks[]`, `stragglers[]`).

mod analyze;
mod bounds;
pub mod device;
mod partition;
pub mod picture;
pub mod samples;
mod summary;
mod sweep;
mod verdict;
pub use analyze::*;
pub use bounds::*;
pub use partition::*;
pub use summary::*;
pub use sweep::*;
pub use verdict::*;

use crate::stats::rank_index;
pub use crate::stats::{dist, dist_in, Dist};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::DeviceKind;
use crate::export::Export;
use crate::sqlite_ranges::{self, OccurrenceIntervals, RangesOptions};
pub use device::{DeviceIdle, DeviceLaunch, IdleCategory, IdleSplit, LatencyDist, NcclKernels, QueueDepth, IDLE_NAMES};

/// Default of `--outlier-factor`: a step whose wall exceeds this many times the median wall is an outlier.
pub const DEFAULT_OUTLIER_FACTOR: f64 = 2.0;
pub use crate::stats::DOMINANT_SHARE;
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
    /// A slow step that is not warm-up: one of the document's `outlier_count` outliers.
    #[serde(default)]
    pub outlier: bool,
    /// A slow step at the start of its rank: one of the document's `warmup_count` warm-up steps.
    #[serde(default)]
    pub warmup: bool,
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
    /// Step index (`index` of a `--steps` row) of the first and how many outliers keep the period.
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
    /// The number of steps analysed (0: no step can be attributed). The document is a summary whose size does
    /// not grow with the steps: `step-budget --steps` prints the per-step rows (NDJSON).
    pub step_count: usize,
    /// The per-step rows, in index order: in memory only (the library's callers, report's bars, `--steps`),
    /// never in the document.
    #[serde(skip)]
    pub steps: Vec<Step>,
    /// `wall`, `gpu_busy`, `gpu_idle_in_span`, `host_gap_to_next` and every component over all steps.
    pub distributions: BTreeMap<String, Dist>,
    /// Σ over steps, per component, and `wall`.
    pub totals: BTreeMap<String, i64>,
    /// The slow steps that are not warm-up: at most 100 (`MAX_LISTED`), those with the largest
    /// `ratio_to_median`, listed in index order; `outlier_count` is how many there are.
    pub outliers: Vec<Outlier>,
    pub outlier_count: usize,
    /// The leading steps of a rank that are slow (compilation, autotuning, first-call allocation): set apart
    /// before the outliers and left out of the typical steps like them ([`slow_steps`]). At most 100
    /// (`MAX_LISTED`), chosen as `outliers` are; `warmup_count` is how many there are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warmup: Vec<Outlier>,
    pub warmup_count: usize,
    /// Σ over every step set apart (warm-up and outliers, listed or not); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_apart: Option<ApartSums>,
    /// Outliers that come back every `period` steps of a rank: a periodic stall (a host task on a timer or a
    /// counter: logging, checkpointing, garbage collection, a scheduler tick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic_stall: Option<PeriodicStall>,
    pub pacing: Option<Pacing>,
    /// By kernel count, most steps first: at most 64 (`MAX_GROUPS`); `group_count` is how many shapes there are.
    pub groups: Vec<Group>,
    pub group_count: usize,
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
    /// With several ranks: per matched step (the k-th step of every rank; without steps, the k-th collective),
    /// the rank the others wait for. At most 100 (`MAX_LISTED`), those with the largest `lead_ns`, in
    /// occurrence order; `straggler_count` is how many were matched.
    pub stragglers: Vec<Straggler>,
    pub straggler_count: usize,
    pub verdict: BudgetVerdict,
    /// gate-check's verdict on the export (`step-budget` runs the throughput tier's gates on what it reads):
    /// a RETRY makes the verdict `unreliable`. Absent when not checked (the library's `analyze`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<crate::gate_check::EvidenceGates>,
    pub notes: Vec<String>,
    /// `--iteration-records` / `--iterations`: the join, the window and the groups by phase and batch size
    /// (docs/iterations.md); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<crate::iterations::window::IterationsSection>,
    /// No step can be attributed (no NVTX range): what each GPU did over its whole active span, the picture
    /// the verdict comes from ([`crate::device_picture`]); absent when there are steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<picture::PictureRow>,
    /// What the host ran in the steps' unattributed time, from nsys's CPU samples (`--sample=process-tree`);
    /// absent when the export holds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_samples: Option<samples::HostSamples>,
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
    /// Step index (`index` of a `--steps` row) of each rank's k-th step, by rank.
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
    let Some(gates) = crate::gate_check::EvidenceGates::of_export(export, source)? else { return Ok(()) };
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
/// `readiness.opaque_step`, the verdict the evidence gives kept as `would_be` ([`crate::nvtx_readiness::rests_on_opaque`]).
fn reject_on_opaque_step(verdict: &mut BudgetVerdict, occ: &sqlite_ranges::OccurrenceTable, label: &str) {
    let unattributed = match verdict.rows.first() {
        Some(r) if verdict.class == "python_overhead_bound" && r.name == "unattributed" => r.share.unwrap_or(0.0),
        _ => return,
    };
    let Some(opaque) = crate::nvtx_readiness::opaque_step_share(occ, label) else { return };
    if !crate::nvtx_readiness::rests_on_opaque(unattributed, opaque) {
        return;
    }
    let would = verdict.clone();
    *verdict = BudgetVerdict {
        class: UNRELIABLE.into(),
        rule: "readiness.opaque_step".into(),
        reason: format!(
            "NVTX readiness rejects this verdict: {:.1} % of the wall of {label:?} is covered by no range nested in it (nvtx-readiness's threshold {:.0} %), and {} ({}) rests on that unnamed host time; an opaque gap is compatible with scheduling, input preparation, attention planning, a hidden sync and Python overhead alike: add NVTX ranges for the phases of the step before choosing an optimisation",
            100.0 * opaque,
            100.0 * crate::nvtx_readiness::DEFAULT_MAX_OPAQUE_SHARE,
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
