//! `step-budget`: where each engine step's time went, step by step (`nsyskit.step-budget/v1`).
//!
//! A *step* is one occurrence of the step label (`--step`, default the iteration label that `capture-compare`
//! picks: [`crate::compare::iteration_label`]). Its host wall `[start, end)` is partitioned exactly into
//! components by a priority sweep (see docs/step-budget.md): every ns of the wall lands in the first of
//! `gpu_kernel`, `gpu_memcpy`, `sync_wait`, `launch_api`, `other_api` whose intervals cover it, else in
//! `unattributed`. The intervals are the step's own, from the library's attribution
//! ([`crate::ranges::analyze_with_intervals`]: runtime calls on the step's thread, then
//! `(globalPid, correlationId)` to the device rows), never a second join.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::DeviceKind;
use crate::export::Export;
use crate::ranges::{self, OccurrenceIntervals, RangesOptions};

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
    /// Wall covered by the step's correlated kernels (graph nodes and GRAPH_TRACE rows included), any device.
    pub gpu_kernel: i64,
    /// Wall covered by its correlated memcpy/memset rows and not by a kernel.
    pub gpu_memcpy: i64,
    /// Wall inside its blocking sync API calls (cudaDeviceSynchronize, cudaStreamSynchronize, …) not covered by GPU work.
    pub sync_wait: i64,
    /// Wall inside its launch API calls (name containing `Launch`: cudaLaunchKernel, cudaGraphLaunch, …) not counted above.
    pub launch_api: i64,
    /// Wall inside its other CUDA runtime/driver calls (cudaMemcpyAsync, cudaEventRecord, …) not counted above.
    pub other_api: i64,
    /// Communication: always 0 this version (NCCL kernels count as `gpu_kernel`; see `nccl_kernels`).
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
    /// Next step's start minus this step's end (null for the last step; negative when they overlap).
    pub host_gap_to_next_ns: Option<i64>,
    /// The batch geometry of the iteration record joined to this step (`--iteration-records`; docs/iterations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<crate::iterations::StepGeometry>,
}

/// Order statistics (nearest rank) of a series of ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Dist {
    pub count: usize,
    pub median: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
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
pub struct Verdict {
    /// kernel_bound, cpu_launch_bound, python_overhead_bound, sync_bound, memcpy_bound, comm_bound or mixed_or_unclear.
    pub class: String,
    /// The rule that fired (docs/step-budget.md).
    pub rule: String,
    pub reason: String,
    /// Steps whose components the shares are over: the steps that are not outliers.
    pub steps_used: usize,
    pub rows: Vec<VerdictRow>,
}

/// `nsyskit.step-budget/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepBudgetDoc {
    pub schema: String,
    pub tool: Tool,
    pub source: String,
    /// The step label analysed.
    pub step_label: String,
    /// `--step`, or `iteration_label` (chosen like capture-compare).
    pub step_label_choice: String,
    pub outlier_factor: f64,
    /// `true` on a graph-level capture: the steps launch graphs or own GRAPH_TRACE rows, and the export has no
    /// node-level row (KERNEL/MEMCPY/MEMSET with `graphNodeId`).
    pub graph_level: bool,
    /// KERNEL rows of the capture whose name contains `nccl` (case-insensitive).
    pub nccl_kernels: u64,
    pub steps: Vec<Step>,
    /// `wall`, `gpu_busy`, `gpu_idle_in_span`, `host_gap_to_next` and every component over all steps.
    pub distributions: BTreeMap<String, Dist>,
    /// Σ over steps, per component, and `wall`.
    pub totals: BTreeMap<String, i64>,
    pub outliers: Vec<Outlier>,
    pub pacing: Option<Pacing>,
    /// By kernel count, most steps first.
    pub groups: Vec<Group>,
    pub verdict: Verdict,
    pub notes: Vec<String>,
    /// `--iteration-records` / `--iterations`: the join, the window and the groups by phase and batch size
    /// (docs/iterations.md); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<crate::iterations::window::IterationsSection>,
}

impl Document for StepBudgetDoc {
    const KIND: &'static str = "step-budget";
    const TOOL: &'static str = "step-budget";
}

/// Nearest-rank quantile of a sorted slice (q in (0, 1]).
fn rank(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let k = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// Order statistics of a series.
pub fn dist(values: impl IntoIterator<Item = i64>) -> Dist {
    let mut v: Vec<i64> = values.into_iter().collect();
    v.sort_unstable();
    Dist {
        count: v.len(),
        median: rank(&v, 0.5),
        p90: rank(&v, 0.9),
        p99: rank(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
    }
}

/// Length of the union of intervals (any order, unclipped).
pub fn union_len(mut iv: Vec<(i64, i64)>) -> i64 {
    iv.retain(|(s, e)| e > s);
    iv.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(i64, i64)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// The priority partition of `[start, end)`: `classes[k]` are the intervals of component k (in priority
/// order); component k gets `|∪_{j≤k} C_j ∩ wall| − |∪_{j<k} C_j ∩ wall|`, the rest is returned last.
pub fn partition(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> (Vec<i64>, i64) {
    let mut acc: Vec<(i64, i64)> = Vec::new();
    let mut prev = 0;
    let mut out = Vec::with_capacity(classes.len());
    for c in classes {
        acc.extend(c.iter().map(|&(s, e)| (s.max(start), e.min(end))));
        let l = union_len(acc.clone());
        out.push(l - prev);
        prev = l;
    }
    (out, (end - start) - prev)
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
    if !(opts.outlier_factor.is_finite() && opts.outlier_factor > 1.0) {
        return Err(Error::usage(format!(
            "--outlier-factor {}: expected a number greater than 1",
            opts.outlier_factor
        ))
        .with_arg("--outlier-factor"));
    }
    let ropts = RangesOptions { fold: opts.fold, window, ..Default::default() };
    // pass 1 (labels only) when the step label is not given: the doc's label counts
    let (label, choice) = match &opts.step {
        Some(l) => (l.clone(), "--step".to_string()),
        None => {
            let a = ranges::analyze(export, &ropts)?;
            let labels: BTreeMap<String, i64> =
                a.doc.ranges.iter().map(|r| (r.label.clone(), r.occurrences as i64)).collect();
            let unstable = crate::compare::checks::unstable_labels(labels.keys().map(|k| k.as_str()));
            match crate::compare::iteration_label(&labels, &unstable) {
                Some(l) => (l, "iteration_label".to_string()),
                None => {
                    return Err(Error::input(format!(
                        "{}: no iteration-like label (containing iteration, step or decode, not prefill) among {} labels: give --step LABEL",
                        export.name(),
                        labels.len()
                    ))
                    .with_arg("--step"))
                }
            }
        }
    };
    let (a, iv) = ranges::analyze_with_intervals(export, &ropts, &|l| l == label)?;
    let mut idx: Vec<usize> = (0..a.occurrences.len()).filter(|&i| a.occurrences[i].label == label).collect();
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
    // runtime API names of the steps' calls
    let ids: std::collections::HashSet<i64> =
        idx.iter().flat_map(|&i| iv[i].runtime.iter().filter_map(|r| r.name_id)).collect();
    let names = export.strings_for(&ids)?;
    let nccl_kernels: u64 = export
        .kernel_time_by_name()?
        .unwrap_or_default()
        .iter()
        .filter(|(n, _, _)| n.to_ascii_lowercase().contains("nccl"))
        .map(|(_, c, _)| *c as u64)
        .sum();

    let mut steps: Vec<Step> = Vec::with_capacity(idx.len());
    for (k, &i) in idx.iter().enumerate() {
        let o = &a.occurrences[i];
        let m = &a.metrics[i];
        let c = step_components(o.start, o.end, &iv[i], &names);
        debug_assert_eq!(c.sum(), o.end - o.start);
        let gap = idx.get(k + 1).map(|&j| a.occurrences[j].start - o.end);
        steps.push(Step {
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
            graph_launches: iv[i]
                .runtime
                .iter()
                .filter(|r| {
                    r.name_id.and_then(|id| names.get(&id)).is_some_and(|n| crate::export::schema::is_graph_launch(n))
                })
                .count() as u64,
            gpu_busy_ns: m.busy_ns,
            gpu_span_ns: m.span_ns,
            gpu_idle_in_span_ns: m.idle_in_span_ns(),
            first_device_start_ns: m.first_device_start,
            last_device_end_ns: m.last_device_end,
            host_gap_to_next_ns: gap,
            geometry: None,
        });
    }
    // graph-level: the steps launch graphs (or own GRAPH_TRACE rows) and the export has no node-level row:
    // the replays are single GRAPH_TRACE rows (nsys 2024+) or invisible (nsys 2023.4 has no GRAPH_TRACE table)
    let graph_level =
        steps.iter().any(|s| s.graph_traces > 0 || s.graph_launches > 0) && export.graph_facts()?.node_rows == 0;
    let distributions = distributions_of(&steps, true);
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    totals.insert("wall".into(), steps.iter().map(|s| s.wall_ns).sum());
    for (n, name) in Components::NAMES.iter().enumerate() {
        totals.insert(name.to_string(), steps.iter().map(|s| s.components.values()[n]).sum());
    }
    let median_wall = distributions["wall"].median;
    let outliers: Vec<Outlier> = steps
        .iter()
        .filter(|s| median_wall > 0 && s.wall_ns as f64 > opts.outlier_factor * median_wall as f64)
        .map(|s| Outlier {
            index: s.index,
            start_ns: s.start_ns,
            wall_ns: s.wall_ns,
            ratio_to_median: s.wall_ns as f64 / median_wall as f64,
        })
        .collect();
    let pacing = pacing_of(&steps);
    let mut by_shape: BTreeMap<u64, Vec<&Step>> = BTreeMap::new();
    for s in &steps {
        by_shape.entry(s.kernels).or_default().push(s);
    }
    let mut groups: Vec<Group> = by_shape
        .into_iter()
        .map(|(kernels, ss)| {
            let owned: Vec<Step> = ss.iter().map(|s| (*s).clone()).collect();
            Group { kernels, steps: ss.len(), first_index: ss[0].index, distributions: distributions_of(&owned, false) }
        })
        .collect();
    groups.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.kernels.cmp(&b.kernels)));
    // the verdict reads the typical step: the totals over the steps that are not outliers (all when every step is)
    let typical: Vec<&Step> = steps.iter().filter(|s| !outliers.iter().any(|o| o.index == s.index)).collect();
    let typical: Vec<&Step> = if typical.is_empty() { steps.iter().collect() } else { typical };
    let mut vt: BTreeMap<String, i64> = BTreeMap::new();
    vt.insert("wall".into(), typical.iter().map(|s| s.wall_ns).sum());
    for (n, name) in Components::NAMES.iter().enumerate() {
        vt.insert(name.to_string(), typical.iter().map(|s| s.components.values()[n]).sum());
    }
    let mut verdict = verdict_of(&vt, &distributions, pacing.as_ref(), graph_level, nccl_kernels);
    verdict.steps_used = typical.len();
    let mut notes = vec![
        "not in this version: GPU idle attribution per gap, launch-latency distributions, per-rank budgets, exposed NCCL communication, report integration, --trace output".to_string(),
    ];
    if nccl_kernels == 0 {
        notes.push("no NCCL kernel in the capture: comm is 0".into());
    } else {
        notes.push(format!("{nccl_kernels} NCCL kernels in the capture: comm is NOT measured in this version (they count as gpu_kernel)"));
    }
    if graph_level {
        notes.push("graph-level capture (GRAPH_TRACE rows, no node-level kernels): re-capture with --cuda-graph-trace=node to see the kernels".into());
    }
    let (schema, tool) = StepBudgetDoc::header();
    Ok(StepBudgetDoc {
        schema,
        tool,
        source: export.name(),
        step_label: label,
        step_label_choice: choice,
        outlier_factor: opts.outlier_factor,
        graph_level,
        nccl_kernels,
        steps,
        distributions,
        totals,
        outliers,
        pacing,
        groups,
        verdict,
        notes,
        iterations: None,
    })
}

/// The partition of one step from its intervals.
pub fn step_components(
    start: i64,
    end: i64,
    iv: &OccurrenceIntervals,
    names: &std::collections::HashMap<i64, String>,
) -> Components {
    let mut cls: Vec<Vec<(i64, i64)>> = vec![Vec::new(); 5];
    for d in &iv.device {
        let k = match d.kind {
            DeviceKind::Kernel | DeviceKind::GraphTrace => 0,
            DeviceKind::Memcpy | DeviceKind::Memset => 1,
        };
        cls[k].push((d.start, d.end));
    }
    for r in &iv.runtime {
        let k = if r.sync {
            2
        } else if r.name_id.and_then(|i| names.get(&i)).is_some_and(|n| is_launch(n)) {
            3
        } else {
            4
        };
        cls[k].push((r.start, r.end));
    }
    let (v, rest) = partition(start, end, &cls);
    Components {
        gpu_kernel: v[0],
        gpu_memcpy: v[1],
        sync_wait: v[2],
        launch_api: v[3],
        other_api: v[4],
        comm: 0,
        unattributed: rest,
    }
}

fn distributions_of(steps: &[Step], all: bool) -> BTreeMap<String, Dist> {
    let mut d = BTreeMap::new();
    d.insert("wall".to_string(), dist(steps.iter().map(|s| s.wall_ns)));
    d.insert("gpu_busy".to_string(), dist(steps.iter().map(|s| s.gpu_busy_ns)));
    if all {
        d.insert("gpu_idle_in_span".to_string(), dist(steps.iter().map(|s| s.gpu_idle_in_span_ns)));
        d.insert("host_gap_to_next".to_string(), dist(steps.iter().filter_map(|s| s.host_gap_to_next_ns)));
    }
    for (n, name) in Components::NAMES.iter().enumerate() {
        d.insert(name.to_string(), dist(steps.iter().map(|s| s.components.values()[n])));
    }
    d
}

fn pacing_of(steps: &[Step]) -> Option<Pacing> {
    let iv: Vec<i64> = steps.windows(2).map(|w| w[1].start_ns - w[0].start_ns).collect();
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

fn verdict_of(
    totals: &BTreeMap<String, i64>,
    dists: &BTreeMap<String, Dist>,
    pacing: Option<&Pacing>,
    graph_level: bool,
    nccl: u64,
) -> Verdict {
    let wall = totals["wall"].max(1);
    let mut rows: Vec<VerdictRow> = Components::NAMES
        .iter()
        .map(|n| VerdictRow { name: n.to_string(), value_ns: totals[*n], share: Some(totals[*n] as f64 / wall as f64) })
        .collect();
    rows.sort_by(|a, b| b.value_ns.cmp(&a.value_ns).then(a.name.cmp(&b.name)));
    if graph_level {
        return Verdict {
            class: "mixed_or_unclear".into(),
            rule: "graph_level_capture".into(),
            reason: "graph-level capture: the graph replays are single GRAPH_TRACE rows, no node-level kernel rows; re-capture with --cuda-graph-trace=node".into(),
            steps_used: 0,
            rows,
        };
    }
    let period = pacing.map(|p| p.intervals.median).unwrap_or(0);
    let busy = dists["gpu_busy"].median;
    if period > 0 && busy as f64 >= GPU_SATURATED_SHARE * period as f64 {
        let mut r = vec![
            VerdictRow { name: "median_gpu_busy".into(), value_ns: busy, share: Some(busy as f64 / period as f64) },
            VerdictRow { name: "median_step_period".into(), value_ns: period, share: None },
        ];
        r.extend(rows);
        return Verdict {
            class: "kernel_bound".into(),
            rule: "gpu_saturated".into(),
            reason: format!("the median step's correlated GPU busy ({busy} ns) is ≥ {GPU_SATURATED_SHARE} of the median start-to-start period ({period} ns)"),
            steps_used: 0,
            rows: r,
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
        if nccl > 0 {
            reason.push_str("; NCCL kernels exist and are counted in gpu_kernel");
        }
        return Verdict { class: class.into(), rule: "dominant_component".into(), reason, steps_used: 0, rows };
    }
    Verdict {
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
    }
}

/// Open the capture (an `.nsys-rep` is exported into a temporary folder) and analyse it.
pub fn run(path: &Path, opts: &StepBudgetOptions, nsys: Option<&Path>) -> Result<StepBudgetDoc> {
    let cap = crate::export::open_capture(path, nsys)?;
    let mut doc = analyze(&cap.export, opts)?;
    doc.source = cap.source.path.clone();
    Ok(doc)
}

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
    fn nearest_rank() {
        let d = dist((1..=100).rev());
        assert_eq!((d.median, d.p90, d.p99, d.max, d.count), (50, 90, 99, 100, 100));
    }
}
