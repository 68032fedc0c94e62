//! `report BUNDLE`: one primary bottleneck class from a fixed vocabulary, the evidence rows that establish it,
//! the provenance block, and what remains unattributed — stated explicitly. `--html OUT.html` draws it.
//!
//! # Decision rules (first match wins; thresholds are the `*_MIN` / `*_MAX` constants below)
//! The *primary range* is `--label` when given, else the label with the most occurrences that carry device
//! work (ties: longer `host_wall_time_ns`, then label), leaving out per-request labels (labels that differ
//! only in digit runs, e.g. `request.#`). For it, with W = host wall, C = coverage, S = span, I = idle within
//! span, R = runtime calls, K = kernels:
//! - `coverage_fraction = C / W`, `idle_in_span_fraction = I / S`,
//!   `outside_span_fraction = (W − min(S, W)) / W` (host time outside the device-work span),
//!   `host_ns_per_runtime_call = W / R`, `kernels_per_runtime_call = K / R`,
//!   `sync_fraction` = Σ `total_ns` of its blocking synchronisation calls (`*Synchronize`, `*Query`) / W,
//!   `memcpy_api_fraction` = Σ `total_ns` of its blocking `cudaMemcpy*`/`cudaMemset*`/`cuMemcpy*` calls / W;
//! - over the capture's kernels: `comm_share` = Σ over devices of the communication time no compute kernel of
//!   the device runs under / Σ over devices of the device busy union when the export's exposure measured it
//!   ([`crate::step_budget::picture::Exposure`], src/report/devices.rs), else the share of kernel time in category
//!   `communication`,
//!   `memcpy_device_share` = MEMCPY+MEMSET time / (kernel + MEMCPY + MEMSET time) when known (when that reaches
//!   [`MEMCPY_SHARE_MIN`], the exposed copy time over the device busy union: [`crate::step_budget::picture::Exposure`]),
//!   else the `memcpy` category's share.
//!
//! 0. no range, CUDA graph launches whose replays left no GPU row (graph-level tracing in nsys 2023.4), or no
//!    device work attributed to the primary range → `mixed_or_unclear` (an export without any range but with
//!    device rows is decided by the device rules instead, [`devices::decide`], unless its graph replays left no
//!    GPU row or only opaque GRAPH_TRACE rows: R0 then too)
//! 1. `comm_share ≥ 0.30` → `comm_bound`
//! 2. `memcpy_device_share ≥ 0.30` or `memcpy_api_fraction ≥ 0.30` → `memcpy_bound`
//! 3. `coverage_fraction ≥ 0.60` and `idle_in_span_fraction ≤ 0.25` → `kernel_bound`
//! 4. `sync_fraction ≥ 0.30` → `sync_bound`
//! 5. `coverage_fraction < 0.40`, no GRAPH_TRACE row in the range, `idle_in_span_fraction ≥ 0.50`, `kernels_per_runtime_call ≤ 1.5` (launched
//!    one by one, no graph amortisation) and `host_ns_per_runtime_call < 20 µs` → `cpu_launch_bound`
//! 6. `coverage_fraction < 0.40` and (`host_ns_per_runtime_call ≥ 20 µs` or `outside_span_fraction ≥ 0.50`)
//!    → `python_overhead_bound`
//! 7. otherwise → `mixed_or_unclear`

mod classify;
pub mod devices;
pub mod headline;
pub mod html;
pub mod question;
pub mod steps;
pub mod trace;

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::categories::{category_shares, Categories, CategoryShare, KernelStat};
use crate::contract::{Document, Error, Result, Tool};
use crate::evidence::{self, Evidence, RangeRow};
use crate::export::Export;

pub use classify::classify;

/// The fixed vocabulary of primary classes.
pub const CLASSES: &[&str] = &[
    "cpu_launch_bound",
    "python_overhead_bound",
    "sync_bound",
    "memcpy_bound",
    "comm_bound",
    "kernel_bound",
    "mixed_or_unclear",
];

pub const COMM_SHARE_MIN: f64 = 0.30;
pub use crate::step_budget::picture::MEMCPY_SHARE_MIN;
pub const KERNEL_COVERAGE_MIN: f64 = 0.60;
pub const KERNEL_IDLE_IN_SPAN_MAX: f64 = 0.25;
pub const SYNC_FRACTION_MIN: f64 = 0.30;
pub const LOW_COVERAGE_MAX: f64 = 0.40;
pub const LAUNCH_IDLE_IN_SPAN_MIN: f64 = 0.50;
pub const LAUNCH_KERNELS_PER_CALL_MAX: f64 = 1.5;
pub const LAUNCH_HOST_NS_PER_CALL_MAX: f64 = 20_000.0;
pub const PYTHON_OUTSIDE_SPAN_MIN: f64 = 0.50;

/// The category row of kernel time that a cut kernel list omits (its share of the totals, not guessed).
pub const NOT_LISTED: &str = "not_listed";

/// How many direct children of the primary range `primary_split` lists (the rest are summed).
const SPLIT_PARTS_MAX: usize = 20;

/// How many non-primary, non-child labels the evidence rows list at most.
const OTHER_ROWS_MAX: usize = 30;

/// How many top kernels `report` lists unless `--top` says.
pub const DEFAULT_TOP: usize = 20;

/// What `report` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// An evidence bundle, a bare ranges document, or an nsys `.sqlite` export.
    pub input: PathBuf,
    /// A provenance document to use (with an export, or replacing the bundle's block).
    pub provenance: Option<PathBuf>,
    /// `--categories FILE`.
    pub categories: Option<PathBuf>,
    /// Classify this label instead of the automatic primary range.
    pub label: Option<String>,
    /// Write a self-contained HTML page here.
    pub html: Option<PathBuf>,
    /// How many top kernels to list (0 = all).
    pub top: usize,
    /// `--trace OUT.json`: write a Chrome/Perfetto trace-event file of a window of steps (an export only).
    pub trace: Option<PathBuf>,
    /// `--window START:END`: the trace's steps (half-open, step indexes); None = around the median step.
    pub window: Option<(u64, u64)>,
    /// `--trace-max-events N` (None = [`trace::DEFAULT_MAX_EVENTS`]).
    pub trace_max_events: Option<usize>,
}

impl ReportOptions {
    /// What `report INPUT` with no other flag does.
    pub fn of_input(input: PathBuf) -> ReportOptions {
        ReportOptions {
            input,
            top: DEFAULT_TOP,
            trace_max_events: Some(trace::DEFAULT_MAX_EVENTS),
            ..Default::default()
        }
    }
}

/// One range label's numbers (sums over its occurrences, as in the ranges document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceRow {
    pub label: String,
    /// `primary` (the range classified), `child` (its direct children), or `other`.
    pub role: String,
    pub occurrences: i64,
    pub occurrences_with_device_work: i64,
    pub runtime_calls: i64,
    pub kernels: i64,
    pub memcpys: i64,
    pub memsets: i64,
    pub graph_traces: i64,
    pub host_wall_time_ns: i64,
    pub host_range_kernel_coverage_ns: i64,
    pub kernel_busy_union_ns: i64,
    pub kernel_span_ns: i64,
    pub gpu_idle_within_kernel_span_ns: i64,
    pub uncovered_host_time_ns: i64,
    /// Σ total_ns of its blocking synchronisation / memcpy calls.
    pub sync_ns: i64,
    pub memcpy_api_ns: i64,
    /// Nesting depths of its occurrences (`{"0": n}` = outermost).
    pub depths: std::collections::BTreeMap<String, i64>,
}

/// The measured inputs of the decision rules (null = not measurable here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Signals {
    pub coverage_fraction: Option<f64>,
    /// How `coverage_fraction` was measured: host-clipped coverage, or (for a range that launches CUDA graphs)
    /// the busy union of the device work correlated to it.
    pub coverage_source: Option<String>,
    pub idle_in_span_fraction: Option<f64>,
    pub outside_span_fraction: Option<f64>,
    /// Host wall of the primary range per runtime call it made (ns).
    pub host_ns_per_runtime_call: Option<f64>,
    /// Kernels per runtime call (≫ 1 when CUDA graphs amortise launches).
    pub kernels_per_runtime_call: Option<f64>,
    pub sync_fraction: Option<f64>,
    pub memcpy_api_fraction: Option<f64>,
    pub comm_share: Option<f64>,
    /// Where `comm_share` came from when it is the exposed share (absent: the `communication` category's share
    /// of kernel time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_share_source: Option<String>,
    pub memcpy_device_share: Option<f64>,
    /// Where `memcpy_device_share` came from.
    pub memcpy_device_share_source: Option<String>,
}

/// The verdict: the class, the rule that decided it and the measured reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    pub class: String,
    /// `R0`…`R7` (the range rules, docs/compare-report.md), `step_budget.<rule>` when the step budget decided,
    /// or `device.<rule>` for a capture without any NVTX range (`basis`).
    pub rule: String,
    pub reason: String,
    /// The primary range classified (null when there is none).
    pub primary_label: Option<String>,
    pub primary_label_choice: String,
    /// `step_budget` (the verdict of the step budget of the step label), `ranges` (rules R0…R7), `device` (no
    /// step can be attributed: what the GPUs did, src/device_picture.rs), or `rejected` (class `unreliable`:
    /// the gates or readiness rejected the evidence the class would stand on; `would_be` says which class).
    #[serde(default)]
    pub basis: String,
    /// Class `unreliable`: the decision the evidence alone gives, which does not stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_be: Option<Box<Decision>>,
}

/// A top kernel with its category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TopKernel {
    pub name: String,
    pub category: String,
    pub total_time_ns: i64,
    pub instances: i64,
    /// Share of the kernel time of the whole kernel table (its totals when the source records them, never only
    /// the kernels listed).
    pub share: f64,
}

/// What the evidence does not attribute, stated explicitly.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    pub kernels_total: Option<i64>,
    pub kernels_unattributed: Option<i64>,
    pub kernel_work_unattributed_ns: Option<i64>,
    /// Share of kernel work not attributed to any kept range.
    pub kernel_work_unattributed_fraction: Option<f64>,
    /// Threads whose process could not be mapped: their device work is not attributed.
    pub unmapped_threads: Vec<i64>,
    /// Threads mapped only through the device-namespace fallback.
    pub fallback_threads: Vec<i64>,
    /// Host time of the primary range not covered by device work (NOT GPU idle).
    pub primary_uncovered_host_time_ns: Option<i64>,
    /// Kernel time in category `other` (names no rule matched).
    pub uncategorized_kernel_time_ns: i64,
    /// One sentence per item above.
    pub statements: Vec<String>,
}

/// What a reader looks for first: when, on what and with which nsys the capture was taken, and its kernels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureHeader {
    /// The capture's start (RFC 3339 UTC; null when no export metadata reached the report).
    pub captured_at: Option<String>,
    pub captured_at_from: Option<String>,
    /// GPU names (the export's TARGET_INFO_GPU, else the comparability fact `gpu`).
    pub gpus: Vec<String>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    /// The nsys that exported the capture (the comparability fact `nsys_version`).
    pub nsys_version: Option<String>,
    /// Duration of the capture (ANALYSIS_DETAILS).
    pub duration_ns: Option<i64>,
    /// The capture window as recorded (the comparability fact `window`).
    pub window: Value,
    /// The `--cuda-graph-trace` level (`node`, `graph`, null).
    pub graph_trace_level: Option<String>,
    /// Distinct kernel names, kernel instances and Σ kernel time of the whole kernel table.
    pub kernel_names: Option<i64>,
    pub kernel_instances: Option<i64>,
    pub kernel_time_ns: Option<i64>,
}

/// One direct child of the primary range and its part of the primary's host wall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SplitPart {
    pub label: String,
    pub host_wall_time_ns: i64,
    /// `host_wall_time_ns` / the primary's host wall.
    pub share_of_primary: f64,
    /// Some occurrences of this label have another parent: its wall is an upper bound of the part under the
    /// primary.
    pub also_under_other_parents: bool,
}

/// The primary range split into its direct children, and the time no child covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrimarySplit {
    pub label: String,
    pub host_wall_time_ns: i64,
    /// The longest direct children (at most 20).
    pub children: Vec<SplitPart>,
    /// Direct children not listed, and their summed host wall.
    pub more_children: usize,
    pub more_children_ns: i64,
    pub more_children_share: f64,
    /// Primary wall − Σ children walls (never negative; children on several threads can overlap).
    pub not_in_any_child_ns: i64,
    pub not_in_any_child_share: f64,
}

/// `nsyskit.report/v1`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReportDoc {
    pub schema: String,
    pub tool: Tool,
    pub source: String,
    /// `bundle`, `ranges` or `sqlite`.
    pub source_kind: String,
    /// One of `cpu_launch_bound | python_overhead_bound | sync_bound | memcpy_bound | comm_bound | kernel_bound |
    /// mixed_or_unclear`.
    pub class: String,
    pub decision: Decision,
    /// The first line a person reads ([`headline::headline`]): whether a class stands, the biggest measured fact
    /// (steps set apart, the largest part of the typical step, or the device picture) and the range rules' reading
    /// where it differs.
    #[serde(default)]
    pub headline: String,
    /// The capture header of the page.
    pub capture: CaptureHeader,
    /// The primary range split into its direct children (null without a primary range).
    pub primary_split: Option<PrimarySplit>,
    pub signals: Signals,
    pub evidence: Vec<EvidenceRow>,

    /// Per GPU (src/report/devices.rs): busy union, active span and idle in it, exposed communication and copies
    /// when measured, the idle by cause when the device picture was built; every capture with device rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<devices::DeviceEvidence>,
    /// With two or more ranks (processes with device rows): each one's compute and communication and how often
    /// the others wait for it (step-budget's ranks and stragglers; without steps, matched by collective).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<ReportRank>,
    /// A capture without any NVTX range: the blocking sync and copy calls of the whole capture by API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocking_calls: Vec<crate::nvtx_readiness::SyncApiCount>,
    pub top_kernels: Vec<TopKernel>,
    pub categories: Vec<CategoryShare>,
    pub categories_source: String,
    pub kernels_source: Option<String>,
    /// What `top_kernels` and `categories` cover (`every kernel of the capture`, or `eager kernels only: …` on a
    /// graph-level capture, where they are not the workload's ranking).
    pub kernels_scope: String,
    pub unattributed: Unattributed,
    /// The provenance block as given (null when none).
    pub provenance: Value,
    /// The comparability facts read from the input.
    pub facts: evidence::CaptureFacts,
    /// Where `--html` was written.
    pub html: Option<String>,
    /// The bundle's `question` (measured share, Amdahl bound) and `benchmark` (unprofiled score reconciled
    /// with GPU busy per step): src/report/question.rs; null when the bundle has neither.
    pub question: Option<question::QuestionSection>,
    /// The step budget of the step label (computed on the export, or the bundle's
    /// `kernel_profile.step_budget`); null without a step label.
    pub step_budget: Option<steps::StepBudgetSection>,
    /// The decision of the range rules R0…R7 (equal to `decision` when its basis is `ranges`).
    pub range_decision: Option<Decision>,
    /// What `--trace` wrote (null without it).
    pub trace: Option<trace::TraceSummary>,
    pub notes: Vec<String>,
}

impl Document for ReportDoc {
    const KIND: &'static str = "report";
    const TOOL: &'static str = "report";
    /// 1 when the class is `unreliable` (the gates or readiness rejected the evidence, as gate-check's RETRY).
    fn exit_code(&self) -> i32 {
        i32::from(self.class == UNRELIABLE)
    }
}

/// The class of a report whose evidence a gate or readiness rejected ([`Decision::would_be`] holds the class the
/// evidence alone gives).
pub const UNRELIABLE: &str = "unreliable";

/// The categories of `opts`, after refusing an output over an input.
pub fn prepare(opts: &ReportOptions) -> Result<Categories> {
    let categories = match &opts.categories {
        Some(p) => Categories::from_file(p).map_err(|e| e.with_arg("--categories"))?,
        None => Categories::builtin(),
    };
    if let Some(out) = &opts.html {
        let inputs: Vec<&std::path::Path> =
            [Some(opts.input.as_path()), opts.provenance.as_deref(), opts.categories.as_deref()]
                .into_iter()
                .flatten()
                .collect();
        crate::contract::refuse_output_over_input(out, "--html", &inputs)?;
    }
    if let Some(out) = &opts.trace {
        let inputs: Vec<&std::path::Path> =
            [Some(opts.input.as_path()), opts.provenance.as_deref(), opts.categories.as_deref(), opts.html.as_deref()]
                .into_iter()
                .flatten()
                .collect();
        crate::contract::refuse_output_over_input(out, "--trace", &inputs)?;
    } else if opts.window.is_some() {
        return Err(
            Error::usage("--window selects the steps of --trace: give --trace OUT.json too").with_arg("--window")
        );
    }
    Ok(categories)
}

/// Classify the evidence, add the step budget (on `given`, else on the export the evidence came from), write
/// `--trace` and `--html`.
pub fn report_of(
    ev: &mut Evidence,
    opts: &ReportOptions,
    categories: &Categories,
    given: Option<&Export>,
    mut ph: crate::phase::Phases,
) -> Result<ReportDoc> {
    let primary = choose_primary(ev, opts.label.as_deref())?;
    // no step: what each GPU did decides (the device timelines built beside the evidence), and its budget is the
    // device picture with the ranks of a multi-GPU capture
    let mut device_budget = None;
    if primary.label.is_none() && ev.picture.is_none() {
        if let Some(pending) = ev.step_timelines.take() {
            let tl = pending.join()?;
            let why = vec![format!("no step: {}", primary.choice)];
            let sb = crate::step_budget::device_only_of(
                ev.source.clone(),
                &tl,
                ev.exposure.as_ref(),
                &Default::default(),
                why,
            );
            ev.picture = Some(sb.devices.clone());
            device_budget = Some(sb);
        }
    }
    let mut doc = classify(ev, categories, &primary, opts.top)?;
    ph.mark("classify");
    doc.range_decision = Some(doc.decision.clone());
    let budget = step_budget_of(ev, opts, &doc, given, primary.rule.is_some())?;
    ph.mark("step_budget");
    if let Some(sb) = budget.doc.as_ref().or(device_budget.as_ref()) {
        doc.ranks = rank_summaries(sb);
        if let Some(p) = &sb.periodic_stall {
            doc.notes.insert(
                0,
                format!(
                    "periodic stall: every {}th step of rank {} ({} steps from step {}) takes {:.1}× the median step ({} more each): a host task on a timer or a counter (logging, checkpointing, garbage collection, a scheduler tick) stalls the loop",
                    p.period,
                    p.rank,
                    p.count,
                    p.first_index,
                    p.median_ratio,
                    dur(p.extra_ns)
                ),
            );
        }
        if !sb.warmup.is_empty() {
            let listed = if sb.warmup.len() < sb.warmup_count {
                format!("; the {} slowest", sb.warmup.len())
            } else {
                String::new()
            };
            doc.notes.push(format!(
                "warm-up set apart: the first {} step(s) of {:?} ({}{listed}) are slow from the start (compilation, autotuning, first-call allocation) and are left out of the typical steps",
                sb.warmup_count,
                sb.step_label,
                sb.warmup.iter().map(|w| format!("{} at {:.1}×", w.index, w.ratio_to_median)).collect::<Vec<_>>().join(", ")
            ));
        }
        if device_budget.is_some() {
            doc.notes.extend(sb.notes.iter().filter(|n| n.starts_with("rank ")).cloned());
        }
    }
    if let Some(sec) = budget.section {
        if let Some(n) = &sec.bars_note {
            doc.notes.push(format!("{}: {n}", sec.source));
        }
        apply_step_budget(&mut doc, sec);
    } else if ev.kind == "bundle" {
        if let Some(l) = doc.decision.primary_label.as_deref().filter(|l| crate::step_label::is_iteration_like(l)) {
            doc.notes.push(format!(
                "the bundle has no step budget (kernel_profile.step_budget): the class comes from the range rules; `step-budget CAPTURE --step {l} | bundle-merge BUNDLE` adds it"
            ));
        }
    }
    reject_on_opaque_step(&mut doc, ev);
    reject_on_gates(&mut doc, ev);
    // one class stands: when the range rules alone say another, say which and why
    if let Some(rd) = doc.range_decision.as_ref().filter(|rd| rd.class != doc.class) {
        doc.notes.insert(
            0,
            format!(
                "the class that stands is {} ({}); range_decision ({}, {}) is the range rules' reading of {} alone, shown as evidence: {}",
                doc.class,
                doc.decision.rule,
                rd.class,
                rd.rule,
                rd.primary_label.as_deref().map(|l| format!("{l:?}")).unwrap_or_else(|| "the capture".into()),
                match doc.decision.basis.as_str() {
                    "step_budget" => "the step budget partitions every step's wall exactly, where the range rules read one range's totals",
                    "rejected" => "no class stands on rejected evidence",
                    _ => "the device picture decides when no step can be attributed",
                }
            ),
        );
    }
    if let Some(out) = &opts.trace {
        let export = budget.export.as_ref().map(|c| &c.export).or(given.filter(|_| budget.doc.is_some()));
        let (Some(export), Some(sb)) = (export, &budget.doc) else {
            return Err(Error::usage(if ev.kind == "sqlite" || ev.kind == "nsys-rep" {
                format!(
                    "{}: --trace needs a step label (an iteration-like range: iteration, step or decode in its name) and there is none{}: give --label LABEL",
                    ev.source,
                    doc.decision.primary_label.as_deref().map(|l| format!(" (the primary range is {l:?})")).unwrap_or_default()
                )
            } else {
                format!("{}: --trace needs an nsys export (.sqlite or .nsys-rep) as BUNDLE: a {} holds no timeline", ev.source, ev.kind)
            })
            .with_arg("--trace"));
        };
        let t = trace::write(export, sb, opts.window, opts.trace_max_events.unwrap_or(trace::DEFAULT_MAX_EVENTS), out)?;
        if t.truncated {
            doc.notes.push(format!(
                "--trace: the window holds more than {} events: the trace stops at {} ns ({} events dropped); narrow --window or raise --trace-max-events",
                t.max_events,
                t.truncated_at_ns.unwrap_or(0),
                t.dropped_events
            ));
        }
        doc.trace = Some(t);
    }
    doc.headline = headline::headline(&doc);
    if let Some(out) = &opts.html {
        let page = html::render(&doc);
        std::fs::write(out, page).map_err(|e| {
            Error::env(format!("{}: cannot write the HTML page: {e}", out.display())).with_arg("--html")
        })?;
        doc.html = Some(out.display().to_string());
    }
    Ok(doc)
}

/// One rank (a process with device rows, one per GPU in a torchrun or tensor-parallel run) of a capture with two
/// or more: its compute and communication on its device, and how often the others wait for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReportRank {
    pub rank: usize,
    pub pid: i64,
    /// Its device with the most busy time.
    pub device_id: Option<i64>,
    /// Union of the compute rows of that device, whole capture.
    pub compute_busy_ns: i64,
    /// Its NCCL kernels on that device: union, and the part no compute kernel runs under.
    pub comm_busy_ns: i64,
    pub exposed_comm_ns: i64,
    /// `exposed_comm_ns / (compute_busy_ns + exposed_comm_ns)`.
    pub exposed_comm_share: Option<f64>,
    /// Matched steps (or collectives, without steps) at which it is the straggler, of `matched`.
    pub straggler_of: usize,
    pub matched: usize,
    /// How they were matched: `steps` (the k-th step of every rank) or `collectives` (the k-th NCCL kernel).
    pub matched_by: String,
}

/// [`ReportRank`] of a step budget with two or more ranks (empty otherwise).
fn rank_summaries(sb: &crate::step_budget::StepBudgetDoc) -> Vec<ReportRank> {
    if sb.ranks.len() < 2 {
        return Vec::new();
    }
    let by = if sb.step_count == 0 { "collectives" } else { "steps" };
    sb.ranks
        .iter()
        .map(|r| ReportRank {
            rank: r.rank,
            pid: r.pid,
            device_id: r.device_id,
            compute_busy_ns: r.compute_busy_ns,
            comm_busy_ns: r.comm_busy_ns,
            exposed_comm_ns: r.exposed_comm_ns,
            exposed_comm_share: frac(r.exposed_comm_ns, r.compute_busy_ns + r.exposed_comm_ns),
            straggler_of: r.straggler_steps,
            matched: sb.straggler_count,
            matched_by: by.into(),
        })
        .collect()
}

/// The step budget of the input, and (from an export) the export and the typed document for `--trace`.
struct Budget {
    section: Option<steps::StepBudgetSection>,
    export: Option<crate::export::OpenedCapture>,
    doc: Option<crate::step_budget::StepBudgetDoc>,
}

/// A bundle's `kernel_profile.step_budget`, or (from an export) the step budget of the primary range when it is
/// iteration-like (the step label), computed by the step-budget library on the same export.
fn step_budget_of(
    ev: &mut Evidence,
    opts: &ReportOptions,
    doc: &ReportDoc,
    given: Option<&Export>,
    is_step: bool,
) -> Result<Budget> {
    let none = Budget { section: None, export: None, doc: None };
    if ev.kind == "bundle" {
        let v = ev.bundle.as_ref().and_then(|b| b.pointer("/kernel_profile/step_budget")).filter(|v| !v.is_null());
        let v = match v {
            Some(Value::Array(a)) => a.first(),
            v => v,
        };
        return Ok(Budget { section: v.and_then(|v| steps::section(v, "kernel_profile.step_budget")), ..none });
    }
    if ev.kind != "sqlite" && ev.kind != "nsys-rep" {
        return Ok(none);
    }
    let Some(label) = doc.decision.primary_label.clone().filter(|l| is_step || crate::step_label::is_iteration_like(l))
    else {
        return Ok(none);
    };
    let cap = match given {
        Some(_) => None,
        None => Some(crate::export::open_capture(evidence::export_path(ev, &opts.input), None)?),
    };
    let Some(export) = cap.as_ref().map(|c| &c.export).or(given) else { return Ok(none) };
    let sopts = crate::step_budget::StepBudgetOptions { step: Some(label.clone()), ..Default::default() };
    // --iterations: the same time window as the windowed ranges (crate::pipeline::report)
    // the evidence's analysis (whole capture, folded, intervals of every iteration-like label) when the
    // ranges were not recomputed over a window
    // the device timelines the evidence built beside its ranges analysis (Evidence::step_timelines); a windowed
    // step budget reads its own
    let window = ev.step_window;
    let built = ev.step_timelines.take().filter(|_| window.is_none());
    // (the evidence kept the intervals of the iteration-like labels only: a step found by another rule is read
    // again)
    let kept = crate::step_label::is_iteration_like(&label);
    let pre = ev.step_detail.as_deref().filter(|_| window.is_none() && kept).map(|(a, c)| (a, c));
    let built = built.filter(|_| kept);
    let mut sb = crate::step_budget::analyze_window_with(export, &sopts, window, pre, built)?;
    sb.source = ev.source.clone();
    sb.step_label_choice = format!("the report's primary range: {}", doc.decision.primary_label_choice);
    Ok(Budget { section: steps::section_of(&sb, "step-budget on the export"), export: cap, doc: Some(sb) })
}

/// [`crate::nvtx_readiness::opaque_step_share`] of the step over the evidence's occurrences; None without them (a
/// bundle) or without the step.
fn opaque_share_of(ev: &Evidence, label: &str) -> Option<f64> {
    let (a, _) = ev.step_detail.as_deref()?;
    crate::nvtx_readiness::opaque_step_share(&a.occurrences, label)
}

/// A host-side class that rests on step time no range names (the step budget's `unattributed` host time, not
/// covered by any range nested in the step beyond nvtx-readiness's threshold) does not stand: an opaque gap is
/// compatible with scheduling, input preparation, a hidden sync and Python alike (the serving manual, step 4).
/// Class `unreliable`, rule `readiness.opaque_step`, the class the evidence alone gives kept as `would_be`.
fn reject_on_opaque_step(doc: &mut ReportDoc, ev: &Evidence) {
    let unattributed = match doc.step_budget.as_ref().and_then(|sb| sb.verdict.rows.first()) {
        Some(r)
            if doc.decision.basis == "step_budget"
                && doc.class == "python_overhead_bound"
                && r.name == "unattributed" =>
        {
            r.share.unwrap_or(0.0)
        }
        _ => return,
    };
    let Some(label) = doc.decision.primary_label.clone() else { return };
    let Some(opaque) = opaque_share_of(ev, &label) else { return };
    let threshold = crate::nvtx_readiness::DEFAULT_MAX_OPAQUE_SHARE;
    if !crate::nvtx_readiness::rests_on_opaque(unattributed, opaque) {
        return;
    }
    let would = doc.decision.clone();
    doc.decision = Decision {
        class: UNRELIABLE.into(),
        rule: "readiness.opaque_step".into(),
        reason: format!(
            "NVTX readiness rejects the evidence of this class: {:.1} % of the wall of {label:?} is covered by no range nested in it (nvtx-readiness's threshold {:.0} %), and the class the step budget gives ({}: {}) rests on that unnamed host time; an opaque gap is compatible with scheduling, input preparation, attention planning, a hidden sync and Python overhead alike: add NVTX ranges for the phases of the step (nvtx-readiness lists the taxonomy) before choosing an optimisation",
            100.0 * opaque,
            100.0 * threshold,
            would.class,
            would.reason
        ),
        primary_label: would.primary_label.clone(),
        primary_label_choice: would.primary_label_choice.clone(),
        basis: "rejected".into(),
        would_be: Some(Box::new(would)),
    };
    doc.class = UNRELIABLE.into();
}

/// A class never stands on a capture its gates rejected: class `unreliable`, the gates' reasons first, the class
/// the evidence alone gives kept as `would_be`.
fn reject_on_gates(doc: &mut ReportDoc, ev: &Evidence) {
    let Some(g) = ev.gates.as_ref().filter(|g| g.rejected()) else { return };
    // already rejected by readiness: the gates come first, the class the evidence gives stays the one kept
    let would = match doc.decision.would_be.take() {
        Some(w) => *w,
        None => doc.decision.clone(),
    };
    doc.decision = Decision {
        class: UNRELIABLE.into(),
        rule: format!("gates.{}", g.retry.join("+")),
        reason: format!(
            "gate-check said RETRY ({}): {}; the class the evidence alone gives ({}, {}) does not stand on a capture its gates rejected: capture again",
            g.source,
            g.reasons.join("; "),
            would.class,
            would.rule
        ),
        primary_label: would.primary_label.clone(),
        primary_label_choice: would.primary_label_choice.clone(),
        basis: "rejected".into(),
        would_be: Some(Box::new(would)),
    };
    doc.class = UNRELIABLE.into();
}

/// The step budget decides the class when its steps carry device work and its class is of the vocabulary.
fn apply_step_budget(doc: &mut ReportDoc, sec: steps::StepBudgetSection) {
    let v = &sec.verdict;
    if !sec.device_work {
        doc.notes.push(format!(
            "the steps of {:?} carry no device work: the class comes from the range rules, not the step budget",
            sec.step_label
        ));
    } else if !CLASSES.contains(&v.class.as_str()) {
        doc.notes.push(format!(
            "the step budget's class {:?} is not of the vocabulary: the class comes from the range rules",
            v.class
        ));
    } else {
        doc.decision = Decision {
            class: v.class.clone(),
            rule: format!("step_budget.{}", v.rule),
            reason: format!(
                "step budget of {:?} ({} steps{}): {}",
                sec.step_label,
                sec.steps,
                v.steps_used.map(|u| format!(", {u} used")).unwrap_or_default(),
                v.reason
            ),
            primary_label: doc.decision.primary_label.clone(),
            primary_label_choice: doc.decision.primary_label_choice.clone(),
            basis: "step_budget".into(),
            would_be: None,
        };
        doc.class = v.class.clone();
    }
    doc.step_budget = Some(sec);
}

fn is_memcpy_api(api: &str) -> bool {
    api.starts_with("cudaMemcpy")
        || api.starts_with("cudaMemset")
        || api.starts_with("cuMemcpy")
        || api.starts_with("cuMemset")
}

fn sync_split(r: &RangeRow) -> (i64, i64) {
    let mut sync = 0;
    let mut mem = 0;
    for (api, s) in &r.sync {
        if is_memcpy_api(api) {
            mem += s.total_ns;
        } else {
            sync += s.total_ns;
        }
    }
    (sync, mem)
}

fn frac(n: i64, d: i64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

fn row(r: &RangeRow, role: &str) -> EvidenceRow {
    let (sync_ns, memcpy_api_ns) = sync_split(r);
    EvidenceRow {
        label: r.label.clone(),
        role: role.into(),
        occurrences: r.occurrences,
        occurrences_with_device_work: r.occurrences_with_device_work,
        runtime_calls: r.runtime_calls,
        kernels: r.kernels,
        memcpys: r.memcpys,
        memsets: r.memsets,
        graph_traces: r.graph_traces,
        host_wall_time_ns: r.host_wall_time_ns,
        host_range_kernel_coverage_ns: r.host_range_kernel_coverage_ns,
        kernel_busy_union_ns: r.kernel_busy_union_ns,
        kernel_span_ns: r.kernel_span_ns,
        gpu_idle_within_kernel_span_ns: r.gpu_idle_within_kernel_span_ns,
        uncovered_host_time_ns: r.uncovered_host_time_ns,
        sync_ns,
        memcpy_api_ns,
        depths: r.depths.clone(),
    }
}

/// A duration for a human: `5.838 s`, `524.242 ms`, `1.514 ms`, `146.3 µs`, `820 ns`.
pub fn dur(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    if a >= 1e9 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// `memcpy_device_share`'s source when only the kernel list is known (a bundle: no MEMCPY/MEMSET rows): copy
/// kernels, not the copy engines' copies. It measures something else than its name, and says so.
pub const MEMCPY_FROM_CATEGORY: &str = "kernel time of category memcpy among the listed kernels (copy kernels only: the bundle holds no MEMCPY/MEMSET rows, so copies by the copy engines are not in it)";

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "n/a".into())
}

/// R1's reason: the exposed share with each device's part when the exposure was measured, else the category's
/// share of kernel time.
fn r1_reason(s: &Signals, rows: &[devices::DeviceEvidence]) -> String {
    if s.comm_share_source.is_none() {
        return format!(
            "communication kernels take {} of kernel time (≥ {:.0}%)",
            pct(s.comm_share),
            COMM_SHARE_MIN * 100.0
        );
    }
    let per: Vec<String> = rows
        .iter()
        .filter(|r| r.exposed_comm_share.is_some())
        .map(|r| format!("device {} {}", r.device_id, pct(r.exposed_comm_share)))
        .collect();
    format!(
        "communication with no compute under it takes {} of the device busy time (≥ {:.0}%; {})",
        pct(s.comm_share),
        COMM_SHARE_MIN * 100.0,
        per.join(", ")
    )
}

/// Classify loaded evidence (see the module docs for the rules).
/// The primary range: `--label`, else the engine step ([`crate::step_label`], the rule every tool shares: a
/// framework's own ranges and per-request labels are never it), else none (the device picture decides).
pub struct Primary {
    pub label: Option<String>,
    /// How it was chosen, in words.
    pub choice: String,
    /// The step rule that found it (None for `--label` or none).
    pub rule: Option<crate::step_label::StepRule>,
}

/// Choose the primary range of the evidence ([`Primary`]).
pub fn choose_primary(ev: &Evidence, label: Option<&str>) -> Result<Primary> {
    let empty = Vec::new();
    let ranges: &Vec<RangeRow> = ev.ranges.as_ref().map(|r| &r.ranges).unwrap_or(&empty);
    if let Some(l) = label {
        return match ranges.iter().find(|r| r.label == l) {
            Some(_) => Ok(Primary { label: Some(l.to_string()), choice: format!("--label {l}"), rule: None }),
            None => Err(Error::usage(format!(
                "{}: no range labelled {l:?} (labels: {})",
                ev.source,
                ranges.iter().take(20).map(|r| r.label.as_str()).collect::<Vec<_>>().join(", ")
            ))
            .with_arg("--label")),
        };
    }
    // per-request labels (digit runs shared by two or more labels, e.g. request.#) are never primary, nor is a
    // folded per-request label (`vibeserve.request.<n>`, crate::labels)
    let re = regex::Regex::new(r"[0-9]+").expect("digits regex");
    let mut groups: std::collections::BTreeMap<String, usize> = Default::default();
    for r in ranges.iter() {
        *groups.entry(re.replace_all(&r.label, "#").into_owned()).or_default() += 1;
    }
    let unstable: std::collections::BTreeSet<String> = ranges
        .iter()
        .filter(|r| !r.label.starts_with("ProfilerStep#"))
        .filter(|r| {
            r.label.contains(crate::labels::NUMBER)
                || groups.get(re.replace_all(&r.label, "#").as_ref()).copied().unwrap_or(0) >= 2
        })
        .map(|r| r.label.clone())
        .collect();
    let periods = ev.step_detail.as_deref().map(|(a, _)| crate::step_label::period_facts(a));
    let cands: Vec<crate::step_label::StepCandidate> = ranges
        .iter()
        .map(|r| crate::step_label::StepCandidate {
            period: periods.as_ref().map(|p| p.get(&r.label).copied().unwrap_or_default()),
            ..r.step_candidate()
        })
        .collect();
    Ok(match crate::step_label::choose_step(&cands, &unstable) {
        Some(c) => Primary {
            label: Some(c.label.to_string()),
            choice: format!("the engine step, rule {}: {}", c.rule.name(), c.rule.describe()),
            rule: Some(c.rule),
        },
        None => {
            let busy: i64 = ev.ranges.as_ref().map_or(0, |r| r.totals.per_device.iter().map(|d| d.busy_union_ns).sum());
            let best = crate::step_label::best_candidates(&cands, busy, 5);
            let choice = if ranges.is_empty() {
                "none: the capture holds no NVTX range".to_string()
            } else if best.is_empty() {
                format!(
                    "none: the capture's {} NVTX labels are all a framework's own ranges (e.g. {:?}: {}), never the workload's step",
                    ranges.len(),
                    ranges[0].label,
                    crate::framework::framework_of(&ranges[0].label).unwrap_or("a framework")
                )
            } else {
                format!(
                    "none: no label is a step (iteration-like, PyTorch's ProfilerStep#N, or repeating at a regular period at the top level of a CUDA-calling thread with device work); the best candidates for --label: {}",
                    best.join("; ")
                )
            };
            Primary { label: None, choice, rule: None }
        }
    })
}
