//! `capture-compare`: are captures comparable, and if they are, is the trial faster.
//!
//! Two forms. `capture-compare A B` compares one pair; `capture-compare --baseline A1 A2 … --trial B1 B2 …`
//! compares several captures per side. Every input is checked against the first baseline (A) for every
//! invalidator of the serving-run manual (Step 2 and "What invalidates a comparison"): capture flags, mode,
//! trace set, resolved nsys path and version, node- vs graph-level tracing, graphs vs eager, workload identity,
//! warmup and window, instrumentation switch and patch, GPU model/index/UUID, clock policy; and every input on
//! its own for a foreign GPU process, a gate-check RETRY, a run that did not end ok, thermal throttling and
//! clocks that changed during the run; plus expected producer ranges / the iteration label missing on one side
//! and attributed kernel-work shares that differ by more than a threshold. Both values are shown; a fact that
//! is unknown on a side is listed in `unchecked` (`--strict` refuses on it). A refused comparison (exit 1)
//! carries no deltas and no statistics.
//!
//! When comparable: per-range and per-kernel deltas (pair form), and the A/B statistics of [`ab`] per stable
//! label (median/p90/p99 of host wall, kernel busy union and GPU idle in span, the relative change of the
//! median with a seeded bootstrap interval, a verdict). `--fail-on-regression PCT` exits 1 when the chosen
//! label is slower than PCT % with confidence. Named baselines ([`baseline`]) are stored in and read from a
//! bundle.

pub mod ab;
pub mod baseline;
pub mod checks;
mod comparable;
mod deltas;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::categories::Categories;
use crate::contract::{Document, Error, Result, Tool};
use crate::evidence::{self, CaptureFacts, Evidence, Fact};
use ab::{AbSettings, LabelChange, Metric, Series};
use checks::RunFacts;
pub use comparable::check_comparable;
pub(crate) use comparable::foreign_present;
pub use deltas::{benchmark_scores, kernel_deltas, range_deltas};
use deltas::{pair_deltas, throughput_comparison};

/// What `capture-compare` is asked to do.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The two-argument form (empty paths when `baseline`/`trial` are used).
    pub a: PathBuf,
    pub b: PathBuf,
    /// `--baseline A1 A2 …` / `--trial B1 B2 …`.
    pub baseline: Vec<PathBuf>,
    pub trial: Vec<PathBuf>,
    /// `--baseline-name NAME`: baseline-side bundles are read as their stored baseline `baselines.NAME`.
    pub baseline_name: Option<String>,
    /// Provenance documents adding facts to A / B (pair form only).
    pub provenance_a: Option<PathBuf>,
    pub provenance_b: Option<PathBuf>,
    /// `--categories FILE`; None = the built-in rules.
    pub categories: Option<PathBuf>,
    /// How many kernel deltas to list (0 = all).
    pub top: usize,
    /// `--strict`: a fact unknown on a side makes the comparison not comparable.
    pub strict: bool,
    /// `--allow-unverified`: unknown facts leave the comparison COMPARABLE (exit 0) instead of UNVERIFIED.
    pub allow_unverified: bool,
    /// `--tier`: the gate-check tier used for raw exports (bundles carry their own gate verdict).
    pub tier: crate::gate_check::Tier,
    /// `--expect-label L` (repeatable): the producer ranges both sides must contain (default: every stable label).
    pub expect_labels: Vec<String>,
    /// `--max-attributed-share-diff`: a share in [0, 1] (default 0.05 = 5 points).
    pub max_attributed_share_diff: f64,
    /// `--label`: the label whose verdict `--fail-on-regression` reads (default: the iteration label).
    pub label: Option<String>,
    /// `--metric`: `host_wall` (default), `kernel_busy_union` or `gpu_idle_within_kernel_span`.
    pub metric: String,
    /// `--fail-on-regression PCT`.
    pub fail_on_regression: Option<f64>,
    pub ab: AbSettings,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            a: PathBuf::new(),
            b: PathBuf::new(),
            baseline: Vec::new(),
            trial: Vec::new(),
            baseline_name: None,
            provenance_a: None,
            provenance_b: None,
            categories: None,
            top: 50,
            strict: false,
            allow_unverified: false,
            tier: crate::gate_check::Tier::default(),
            expect_labels: Vec::new(),
            max_attributed_share_diff: 0.05,
            label: None,
            metric: "host_wall".into(),
            fail_on_regression: None,
            ab: AbSettings::default(),
        }
    }
}

/// One capture: where it came from and its facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    pub source: String,
    /// `bundle`, `ranges`, `sqlite`, `nsys-rep`, or `baseline` (a stored named baseline).
    pub kind: String,
    /// `baseline` or `trial` (A is the first baseline, B the first trial).
    pub role: String,
    pub facts: CaptureFacts,
    pub run_facts: RunFacts,
    /// Whether per-range and per-kernel data were available.
    pub has_ranges: bool,
    pub kernels_source: Option<String>,
    /// `totals.kernel_work_attributed_ns / kernel_work_total_ns` of its ranges (null: no kernel work).
    pub attributed_kernel_share: Option<f64>,
    /// When the capture started (UTC ns): `TARGET_INFO_SESSION_START_TIME`, or the provenance time.
    pub started_utc_ns: Option<i64>,
    pub started_source: Option<String>,
    /// Per-occurrence values were available (A/B statistics).
    pub has_occurrences: bool,
    /// The unprofiled benchmark score recorded beside the run (`benchmark` of a bundle), as given.
    pub benchmark: Option<Value>,
    /// The profiled client's throughput (`serve_capture.diagnostic`): diagnostic only, never compared.
    pub diagnostic_throughput: Option<Value>,
}

/// A reason the captures are not comparable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Invalidator {
    /// The check (docs/compare-report.md lists them all): `nsys_version`, `nsys_path`, `capture_flags`,
    /// `capture_mode`, `trace_set`, `graph_trace_level`, `cuda_graphs`, `window`, `warmup`, `warmup_command`,
    /// `client_command`, `request_rate`, `concurrency`, `seed_policy`, `instrumentation`,
    /// `instrumentation_patch`, `gpu`, `gpu_index`, `gpu_uuid`, `clock_policy`, `application_clocks`,
    /// `clock_policy_end`, `foreign_gpu_process`, `gate`, `run_outcome`, `thermal_throttling`,
    /// `clock_stability`, `iteration_label`, `expected_ranges`, `attributed_share`, `iteration_records`,
    /// `backend`, `graph_mode`, or with `--strict` any of them when unknown.
    pub check: String,
    /// The captures concerned (one for a per-capture check, two for a pairwise one).
    pub sides: Vec<String>,
    /// The values of the first and second capture (for an object such as capture_flags, only the keys that
    /// differ; for a per-capture check `a` is the capture's value and `b` null; `"unknown"` with --strict).
    pub a: Value,
    pub b: Value,
    pub reason: String,
}

/// A fact that could not be checked because a side does not record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Unchecked {
    pub check: String,
    pub sides: Vec<String>,
    pub reason: String,
}

/// `b - a` and `(b - a) / a` (null when a = 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Delta {
    pub a: i64,
    pub b: i64,
    pub delta: i64,
    pub relative: Option<f64>,
}

impl Delta {
    pub fn new(a: i64, b: i64) -> Delta {
        Delta { a, b, delta: b - a, relative: if a != 0 { Some((b - a) as f64 / a as f64) } else { None } }
    }
}

/// Per-label deltas (sums over occurrences, as in the ranges document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangeDelta {
    pub label: String,
    /// `both`, `a_only` or `b_only`.
    pub present: String,
    /// |Δ host_wall_time_ns| + |Δ kernel_busy_union_ns|: the sort key.
    pub impact_ns: i64,
    pub occurrences: Delta,
    pub host_wall_time_ns: Delta,
    /// Mean wall per occurrence (integer ns, floor), comparable when the runs differ in length.
    pub wall_ns_per_occurrence: Delta,
    pub host_range_kernel_coverage_ns: Delta,
    pub kernel_busy_union_ns: Delta,
    pub gpu_idle_within_kernel_span_ns: Delta,
    pub uncovered_host_time_ns: Delta,
    pub kernels: Delta,
    pub runtime_calls: Delta,
}

/// Per-kernel-name deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelDelta {
    pub name: String,
    pub category: String,
    /// |Δ total_time_ns|: the sort key.
    pub impact_ns: i64,
    pub total_time_ns: Delta,
    pub instances: Delta,
    /// Mean duration per instance (integer ns, floor).
    pub mean_ns: Delta,
}

/// A kernel seen on one side only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelOnly {
    pub name: String,
    pub category: String,
    pub total_time_ns: i64,
    pub instances: i64,
}

/// Category shares of both sides and their delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryDelta {
    pub category: String,
    pub total_time_ns: Delta,
    pub share_a: f64,
    pub share_b: f64,
}

/// The A/B statistics (only when comparable and every input has per-occurrence values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AbResult {
    /// `two-level percentile bootstrap of the relative change of the median` (docs/compare-report.md).
    pub method: String,
    pub resamples: usize,
    pub seed: u64,
    pub confidence: f64,
    /// The metric each label's `verdict` is about.
    pub metric: String,
    /// The label `--fail-on-regression` reads (`--label`, else the iteration label).
    pub label: Option<String>,
    pub baseline_captures: usize,
    pub trial_captures: usize,
    /// Per stable label present on both sides, in label order.
    pub labels: Vec<LabelChange>,
}

/// `--fail-on-regression PCT`: the chosen label's verdict against the threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegressionCheck {
    pub label: String,
    pub metric: String,
    pub threshold_pct: f64,
    /// The lower end of the interval of the relative change, in percent (null: not measurable).
    pub ci_low_pct: Option<f64>,
    pub relative_change_pct: Option<f64>,
    /// The label is slower than `threshold_pct` with confidence (the lower end of the interval exceeds it): exit 1.
    pub failed: bool,
    pub reason: String,
}

/// The throughput scores of both sides: compared only when both are unprofiled benchmark scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThroughputComparison {
    pub compared: bool,
    pub reason: String,
    /// Per metric both sides share (e.g. `tpot_ms`): first baseline and first trial score.
    pub scores: BTreeMap<String, (f64, f64)>,
}

/// `nsyskit.compare/v1`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CaptureCompareDoc {
    pub schema: String,
    pub tool: Tool,
    /// `COMPARABLE`; `REFUSED` (exit 1: an invalidator holds); `UNVERIFIED` (exit 1: none holds, but some
    /// checks could not be made: see `unchecked`; `--allow-unverified` accepts them). Unknown is never
    /// comparable by default: a pair whose facts are unknown proves nothing.
    pub verdict: String,
    /// The first baseline and the first trial (the pair in the two-argument form).
    pub a: Side,
    pub b: Side,
    /// Every baseline and trial capture, in the order given (stored baselines expanded).
    pub baseline: Vec<Side>,
    pub trial: Vec<Side>,
    /// `--strict` was given: unknown facts refuse.
    pub strict: bool,
    pub invalidators: Vec<Invalidator>,
    pub unchecked: Vec<Unchecked>,
    /// Time-order warnings (baseline and trial not alternated, start times unknown), and `cross-check only: …`
    /// for an eager capture of a graph-mode engine.
    pub warnings: Vec<String>,
    /// The iteration label used by the checks and as the default `--label`.
    pub iteration_label: Option<String>,
    /// Sorted by impact; null when refused, when either side has no ranges, or with several captures per side.
    pub range_deltas: Option<Vec<RangeDelta>>,
    /// Kernels on both sides, sorted by impact; null when refused or when either side has no kernel data.
    pub kernel_deltas: Option<Vec<KernelDelta>>,
    pub kernels_appeared: Option<Vec<KernelOnly>>,
    pub kernels_vanished: Option<Vec<KernelOnly>>,
    pub category_deltas: Option<Vec<CategoryDelta>>,
    /// Null when refused or when an input has no per-occurrence values (a bundle: give the .sqlite export).
    pub ab: Option<AbResult>,
    pub regression: Option<RegressionCheck>,
    pub throughput: ThroughputComparison,
    /// `builtin` or the `--categories` file.
    pub categories_source: String,
    pub notes: Vec<String>,
}

impl Document for CaptureCompareDoc {
    const KIND: &'static str = "compare";
    const TOOL: &'static str = "capture-compare";
    fn exit_code(&self) -> i32 {
        if self.verdict == "COMPARABLE" && !self.regression.as_ref().map(|r| r.failed).unwrap_or(false) {
            0
        } else {
            1
        }
    }
}

/// One loaded capture.
#[derive(Debug, Clone)]
pub struct Capture {
    pub side: Side,
    /// The evidence (None for a stored baseline).
    pub evidence: Option<Evidence>,
    /// Occurrences per label (None: no ranges).
    pub labels: Option<BTreeMap<String, i64>>,
    /// Per-label per-occurrence series (None: not available).
    pub series: Option<BTreeMap<String, Series>>,
}

fn parse_rfc3339_ns(s: &str) -> Option<i64> {
    // 2026-11-29T23:19:13Z
    let re = regex::Regex::new(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?Z$").ok()?;
    let c = re.captures(s.trim())?;
    let n = |i: usize| c[i].parse::<i64>().ok();
    let (y, m, d) = (n(1)?, n(2)?, n(3)?);
    // days from civil (Howard Hinnant)
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some((days * 86400 + n(4)? * 3600 + n(5)? * 60 + n(6)?) * 1_000_000_000)
}

/// The gate verdict of a raw export, by gate-check's library at `tier`.
fn gate_fact_of_export(path: &std::path::Path, tier: crate::gate_check::Tier) -> Result<Fact> {
    let doc = crate::gate_check::run(&crate::gate_check::GateOptions {
        capture: path.to_path_buf(),
        tier,
        ..Default::default()
    })?;
    let v = serde_json::to_value(&doc).map_err(|e| Error::input(format!("{}: gate: {e}", path.display())))?;
    let reasons = crate::gate_check::retry_reasons(&v);
    let tier_name = v.get("tier").cloned().unwrap_or(Value::Null);
    Ok(Fact {
        value: json!({"verdict": v["verdict"], "retry": v["retry"], "reasons": reasons, "tier": tier_name}),
        source: format!("gate-check --tier {} (run on the export)", tier_name.as_str().unwrap_or("?")),
    })
}

/// The gate verdict a bundle records: `kernel_profile.gates`, else `pod_attach.gate.document`, else
/// `serve_capture.gate`.
fn gate_fact_of_bundle(bundle: &Value) -> Fact {
    // a gate-check document: bundle-merge's place, or pod-attach --bundle's (pod_attach.gate.document)
    for (at, source) in
        [("/kernel_profile/gates", "kernel_profile.gates"), ("/pod_attach/gate/document", "pod_attach.gate.document")]
    {
        if let Some(g) = bundle.pointer(at).filter(|g| g.is_object()) {
            let reasons = crate::gate_check::retry_reasons(g);
            return Fact {
                value: json!({"verdict": g["verdict"], "retry": g["retry"], "reasons": reasons, "tier": g["tier"]}),
                source: source.into(),
            };
        }
    }
    if let Some(g) = bundle.pointer("/serve_capture/gate").filter(|g| g.is_object()) {
        return Fact {
            value: json!({"verdict": g["verdict"], "retry": g["retry"], "reasons": g["reasons"]}),
            source: "serve_capture.gate".into(),
        };
    }
    Fact::default()
}

/// Build a capture from loaded evidence.
pub fn capture_of(ev: Evidence, role: &str, path: &std::path::Path, tier: crate::gate_check::Tier) -> Result<Capture> {
    let serve = ev.bundle.as_ref().and_then(|b| b.get("serve_capture")).filter(|v| v.is_object());
    let mut run_facts = checks::run_facts(ev.provenance.as_ref(), "provenance", serve);
    if !run_facts.iteration_records.is_known() {
        // a bundle's ranges document computed with --iteration-records carries the join
        if let Some(it) = ev.bundle.as_ref().and_then(|b| b.pointer("/kernel_profile/ranges/iterations")) {
            let joined = it.get("join").is_some_and(|j| !j.is_null());
            run_facts.iteration_records =
                Fact { value: json!(joined), source: "kernel_profile.ranges.iterations.join".into() };
        }
    }
    run_facts.gate = match ev.kind.as_str() {
        "sqlite" | "nsys-rep" => gate_fact_of_export(evidence::export_path(&ev, path), tier)?,
        _ => ev.bundle.as_ref().map(gate_fact_of_bundle).unwrap_or_default(),
    };
    let labels = ev.ranges.as_ref().map(|r| {
        let mut m = BTreeMap::new();
        for row in &r.ranges {
            *m.entry(row.label.clone()).or_insert(0) += row.occurrences;
        }
        m
    });
    let share = ev.ranges.as_ref().and_then(|r| {
        (r.totals.kernel_work_total_ns > 0)
            .then(|| r.totals.kernel_work_attributed_ns as f64 / r.totals.kernel_work_total_ns as f64)
    });
    let (started, started_source) = match ev.started_utc_ns {
        Some(t) => (Some(t), Some(format!("{}.utcEpochNs", crate::export::schema::TARGET_INFO_SESSION_START_TIME))),
        None => match ev
            .provenance
            .as_ref()
            .and_then(|p| p.pointer("/host/time_utc"))
            .and_then(|t| t.as_str())
            .and_then(parse_rfc3339_ns)
        {
            Some(t) => (Some(t), Some("provenance.host.time_utc".into())),
            None => (None, None),
        },
    };
    let series = ev.occurrence_values().map(|o| ab::series_by_label(&o));
    let side = Side {
        source: ev.source.clone(),
        kind: ev.kind.clone(),
        role: role.into(),
        facts: ev.facts.clone(),
        run_facts,
        has_ranges: ev.ranges.is_some(),
        kernels_source: ev.kernels_source.clone(),
        attributed_kernel_share: share,
        started_utc_ns: started,
        started_source,
        has_occurrences: series.is_some(),
        benchmark: ev.bundle.as_ref().and_then(|b| b.get("benchmark")).filter(|v| !v.is_null()).cloned(),
        diagnostic_throughput: serve.and_then(|s| s.get("diagnostic")).filter(|v| !v.is_null()).cloned(),
    };
    Ok(Capture { side, evidence: Some(ev), labels, series })
}

/// Load one input: a capture, or the captures of a stored baseline.
fn load_input(
    path: &std::path::Path,
    role: &str,
    provenance: Option<&std::path::Path>,
    opts: &CompareOptions,
) -> Result<Vec<Capture>> {
    let arg = if role == "baseline" { "--baseline" } else { "--trial" };
    // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
    crate::serve_capture::refuse_unfinished(path).map_err(|e| e.with_arg(arg))?;
    // a stored baseline (a baseline document, or a bundle's baselines.NAME)
    if let Some(stored) =
        baseline::try_load(path, if role == "baseline" { opts.baseline_name.as_deref() } else { None })
            .map_err(|e| e.with_arg(arg))?
    {
        return Ok(stored
            .into_iter()
            .map(|mut c| {
                c.side.role = role.into();
                c
            })
            .collect());
    }
    let ev = crate::pipeline::load(path, provenance).map_err(|e| e.with_arg(arg))?;
    Ok(vec![capture_of(ev, role, path, opts.tier)?])
}

/// The iteration label of a capture: [`crate::step_label`] over its ranges (device work known) when it has
/// them, else over its label counts (a stored baseline).
fn capture_iteration_label(c: &Capture, unstable: &BTreeSet<String>) -> Option<String> {
    match c.evidence.as_ref().and_then(|e| e.ranges.as_ref()) {
        Some(r) => {
            let cands: Vec<crate::step_label::StepCandidate> =
                r.ranges.iter().map(crate::evidence::RangeRow::step_candidate).collect();
            crate::step_label::choose(&cands, unstable).map(str::to_string)
        }
        None => c.labels.as_ref().and_then(|l| crate::step_label::of_counts(l, unstable)),
    }
}

/// Load the inputs and compare them.
pub fn run(opts: &CompareOptions) -> Result<CaptureCompareDoc> {
    let categories = match &opts.categories {
        Some(p) => Categories::from_file(p).map_err(|e| e.with_arg("--categories"))?,
        None => Categories::builtin(),
    };
    if Metric::parse(&opts.metric).is_none() {
        return Err(Error::usage(format!(
            "--metric {}: expected host_wall, kernel_busy_union or gpu_idle_within_kernel_span",
            opts.metric
        ))
        .with_arg("--metric"));
    }
    if !(opts.max_attributed_share_diff.is_finite() && (0.0..=1.0).contains(&opts.max_attributed_share_diff)) {
        return Err(Error::usage(format!(
            "--max-attributed-share-diff {}: expected a share between 0 and 1",
            opts.max_attributed_share_diff
        ))
        .with_arg("--max-attributed-share-diff"));
    }
    if !(opts.ab.confidence > 0.5 && opts.ab.confidence < 1.0) {
        return Err(Error::usage(format!(
            "--confidence {}: expected a level between 0.5 and 1 (e.g. 0.95)",
            opts.ab.confidence
        ))
        .with_arg("--confidence"));
    }
    if opts.ab.resamples < 100 {
        return Err(Error::usage(format!("--bootstrap {}: expected at least 100 resamples", opts.ab.resamples))
            .with_arg("--bootstrap"));
    }
    if let Some(p) = opts.fail_on_regression {
        if !(p.is_finite() && p >= 0.0) {
            return Err(Error::usage(format!("--fail-on-regression {p}: expected a percentage ≥ 0"))
                .with_arg("--fail-on-regression"));
        }
    }
    let pair = !opts.a.as_os_str().is_empty() || !opts.b.as_os_str().is_empty();
    let (mut base, mut trial) = (Vec::new(), Vec::new());
    if pair {
        if !opts.baseline.is_empty() || !opts.trial.is_empty() {
            return Err(Error::usage("give either A B or --baseline … --trial …, not both"));
        }
        if opts.a.as_os_str().is_empty() || opts.b.as_os_str().is_empty() {
            return Err(Error::usage("the two-argument form needs A and B"));
        }
        base.extend(load_input(&opts.a, "baseline", opts.provenance_a.as_deref(), opts).map_err(|e| e.with_arg("A"))?);
        trial.extend(load_input(&opts.b, "trial", opts.provenance_b.as_deref(), opts).map_err(|e| e.with_arg("B"))?);
    } else {
        if opts.baseline.is_empty() || opts.trial.is_empty() {
            return Err(Error::usage("give A B, or --baseline A1 [A2 …] --trial B1 [B2 …] (both sides)"));
        }
        if opts.provenance_a.is_some() || opts.provenance_b.is_some() {
            return Err(Error::usage("--provenance-a/-b belong to the two-argument form; with --baseline/--trial give bundles that carry their provenance"));
        }
        for p in &opts.baseline {
            base.extend(load_input(p, "baseline", None, opts)?);
        }
        for p in &opts.trial {
            trial.extend(load_input(p, "trial", None, opts)?);
        }
    }
    if base.is_empty() || trial.is_empty() {
        return Err(Error::input("a stored baseline without captures: nothing to compare"));
    }
    if let Some(l) = &opts.label {
        let known: BTreeSet<&String> = base
            .iter()
            .chain(trial.iter())
            .flat_map(|c| c.labels.iter().flat_map(|m| m.keys()).chain(c.series.iter().flat_map(|s| s.keys())))
            .collect();
        if !known.is_empty() && !known.contains(l) {
            return Err(Error::usage(format!(
                "--label {l:?}: no capture has this range label (labels: {})",
                known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ))
            .with_arg("--label"));
        }
    }
    Ok(compare_captures(&base, &trial, &categories, opts))
}

/// Compare loaded captures: checks, then deltas (one capture per side) and A/B statistics.
pub fn compare_captures(
    base: &[Capture],
    trial: &[Capture],
    categories: &Categories,
    opts: &CompareOptions,
) -> CaptureCompareDoc {
    let (schema, tool) = CaptureCompareDoc::header();
    let reference = &base[0];
    let unstable = checks::unstable_labels(base.iter().chain(trial.iter()).flat_map(|c| {
        c.labels.iter().flat_map(|l| l.keys()).chain(c.series.iter().flat_map(|s| s.keys())).map(|k| k.as_str())
    }));
    let iteration = opts.label.clone().or_else(|| capture_iteration_label(reference, &unstable));
    let copts = checks::CheckOptions {
        unstable: unstable.clone(),
        expect_labels: opts.expect_labels.clone(),
        iteration_label: iteration.clone(),
        max_attributed_share_diff: opts.max_attributed_share_diff,
    };
    let all: Vec<&Capture> = base.iter().chain(trial.iter()).collect();
    let (invalidators, unchecked) = comparability_checks(&all, &copts, opts.strict);
    let refused = !invalidators.is_empty();
    let mut notes = Vec::new();
    let mut warnings = alternation_warnings(base, trial);
    warnings.extend(cross_check_warnings(base.iter().chain(trial.iter())));
    let throughput = throughput_comparison(&base[0].side, &trial[0].side);
    let mut doc = CaptureCompareDoc {
        schema,
        tool,
        verdict: if refused {
            "REFUSED".into()
        } else if !unchecked.is_empty() && !opts.allow_unverified {
            "UNVERIFIED".into()
        } else {
            "COMPARABLE".into()
        },
        a: base[0].side.clone(),
        b: trial[0].side.clone(),
        baseline: base.iter().map(|c| c.side.clone()).collect(),
        trial: trial.iter().map(|c| c.side.clone()).collect(),
        strict: opts.strict,
        invalidators,
        unchecked,
        warnings,
        iteration_label: iteration.clone(),
        range_deltas: None,
        kernel_deltas: None,
        kernels_appeared: None,
        kernels_vanished: None,
        category_deltas: None,
        ab: None,
        regression: None,
        throughput,
        categories_source: categories.source().to_string(),
        notes: Vec::new(),
    };
    if refused {
        notes.push(
            "not comparable: no deltas and no statistics are computed (fix each invalidator, or capture again)".into(),
        );
        doc.notes = notes;
        return doc;
    }
    unverified_notes(&doc, &mut notes);
    if base.len() == 1 && trial.len() == 1 {
        if let (Some(a), Some(b)) = (&base[0].evidence, &trial[0].evidence) {
            pair_deltas(&mut doc, &mut notes, a, b, categories, opts.top);
        }
    } else {
        notes.push("several captures per side: per-range and per-kernel deltas are left out; the A/B statistics compare the sides".into());
    }
    let metric = Metric::parse(&opts.metric).unwrap_or(Metric::HostWall);
    if all.iter().all(|c| c.series.is_some()) {
        doc.ab = Some(ab_statistics(base, trial, &unstable, iteration.clone(), metric, opts, &mut notes));
    } else {
        let missing: Vec<String> = all.iter().filter(|c| c.series.is_none()).map(|c| c.side.source.clone()).collect();
        notes.push(format!(
            "A/B statistics need per-occurrence values (a .sqlite export or a stored baseline); none for: {}",
            missing.join(", ")
        ));
    }
    if let Some(pct) = opts.fail_on_regression {
        doc.regression = Some(regression_check(doc.ab.as_ref(), iteration.as_deref(), metric, pct));
    }
    doc.notes = notes;
    doc
}

/// Every capture against the first one, then each distinct capture on its own; under `--strict` every
/// unknown fact is an invalidator too.
fn comparability_checks(
    all: &[&Capture],
    copts: &checks::CheckOptions,
    strict: bool,
) -> (Vec<Invalidator>, Vec<Unchecked>) {
    let mut invalidators = Vec::new();
    let mut unchecked = Vec::new();
    let mut seen_unchecked: BTreeSet<(String, Vec<String>)> = BTreeSet::new();
    let mut push_unchecked = |u: Unchecked, list: &mut Vec<Unchecked>| {
        if seen_unchecked.insert((u.check.clone(), u.sides.clone())) {
            list.push(u);
        }
    };
    let ci = |c: &'_ Capture| -> (Side, Option<BTreeMap<String, i64>>) { (c.side.clone(), c.labels.clone()) };
    let (rs, rl) = ci(all[0]);
    for other in all.iter().skip(1) {
        let (os, ol) = ci(other);
        let (i, u) = checks::check_pair(
            &checks::CheckInput { side: &rs, labels: rl.as_ref() },
            &checks::CheckInput { side: &os, labels: ol.as_ref() },
            copts,
        );
        invalidators.extend(i);
        for x in u {
            push_unchecked(x, &mut unchecked);
        }
    }
    let mut checked_once: Vec<&Side> = Vec::new();
    for c in all {
        // the same capture given twice (same file, same facts) is checked once on its own
        let mut plain = c.side.clone();
        plain.role = String::new();
        if checked_once.iter().any(|s| {
            let mut t = (*s).clone();
            t.role = String::new();
            t == plain
        }) {
            continue;
        }
        checked_once.push(&c.side);
        let (i, u) = checks::check_single(&c.side);
        invalidators.extend(i);
        for x in u {
            push_unchecked(x, &mut unchecked);
        }
    }
    if strict {
        for u in &unchecked {
            invalidators.push(Invalidator {
                check: u.check.clone(),
                sides: u.sides.clone(),
                a: json!("unknown"),
                b: json!("unknown"),
                reason: format!("unknown under --strict: {}", u.reason),
            });
        }
    }
    (invalidators, unchecked)
}

/// The note of an unverified pair, or of unknown facts accepted with `--allow-unverified`.
fn unverified_notes(doc: &CaptureCompareDoc, notes: &mut Vec<String>) {
    if doc.verdict == "UNVERIFIED" {
        notes.push(format!(
            "unverified: {} comparability check(s) could not be made (see unchecked): no invalidator was found, but the pair is not shown comparable; the deltas and A/B statistics below are given for reading; --allow-unverified accepts the unknown facts (exit 0), --strict refuses on them; provenance documents (--provenance-a/-b) or bundles that carry them make the checks",
            doc.unchecked.len()
        ));
    } else if !doc.unchecked.is_empty() {
        notes.push(format!(
            "{} comparability check(s) could not be made (see unchecked), accepted with --allow-unverified: the result is only as trustworthy as those facts",
            doc.unchecked.len()
        ));
    }
}

/// The A/B statistics per stable label present on both sides (every capture has per-occurrence series).
fn ab_statistics(
    base: &[Capture],
    trial: &[Capture],
    unstable: &BTreeSet<String>,
    iteration: Option<String>,
    metric: Metric,
    opts: &CompareOptions,
    notes: &mut Vec<String>,
) -> AbResult {
    let labels: BTreeSet<&String> = base
        .iter()
        .flat_map(|c| c.series.as_ref().unwrap().keys())
        .filter(|l| !unstable.contains(*l))
        .filter(|l| trial.iter().any(|c| c.series.as_ref().unwrap().contains_key(*l)))
        .collect();
    let mut changes = Vec::new();
    for l in labels {
        let sb: Vec<&Series> = base.iter().filter_map(|c| c.series.as_ref().unwrap().get(l)).collect();
        let st: Vec<&Series> = trial.iter().filter_map(|c| c.series.as_ref().unwrap().get(l)).collect();
        changes.push(ab::compare_label(l, &sb, &st, &opts.ab, metric));
    }
    if base.len() == 1 || trial.len() == 1 {
        notes.push("one capture on a side: the interval covers the noise between occurrences of that run, not between runs (capture more runs per side)".into());
    }
    AbResult {
        method: "two-level percentile bootstrap (captures, then occurrences) of median(trial)/median(baseline) − 1"
            .into(),
        resamples: opts.ab.resamples,
        seed: opts.ab.seed,
        confidence: opts.ab.confidence,
        metric: metric.name().into(),
        label: iteration,
        baseline_captures: base.len(),
        trial_captures: trial.len(),
        labels: changes,
    }
}

fn regression_check(ab: Option<&AbResult>, label: Option<&str>, metric: Metric, pct: f64) -> RegressionCheck {
    let fail = |label: &str, reason: String| RegressionCheck {
        label: label.into(),
        metric: metric.name().into(),
        threshold_pct: pct,
        ci_low_pct: None,
        relative_change_pct: None,
        failed: true,
        reason,
    };
    let Some(label) = label else {
        return fail("", "no label to check: give --label (no iteration-like label in the baseline)".into());
    };
    let Some(ab) = ab else {
        return fail(label, "no A/B statistics (see notes): the regression check cannot pass without them".into());
    };
    let Some(lc) = ab.labels.iter().find(|l| l.label == label) else {
        return fail(label, format!("label {label:?} is not on both sides: the regression check cannot pass"));
    };
    let m = lc.metrics.iter().find(|m| m.metric == metric.name()).expect("every metric is computed");
    let lo = m.ci_low.map(|x| x * 100.0);
    let rel = m.relative_change.map(|x| x * 100.0);
    let failed = lo.map(|l| l > pct).unwrap_or(false);
    let reason = match (rel, lo) {
        (Some(r), Some(l)) if failed => {
            format!("{label} {}: {r:+.2}% (interval from {l:+.2}%): slower than {pct}% with confidence", metric.name())
        }
        (Some(r), Some(l)) => format!(
            "{label} {}: {r:+.2}% (interval from {l:+.2}%): not slower than {pct}% with confidence",
            metric.name()
        ),
        _ => format!(
            "{label} {}: not measurable (too few occurrences or a zero baseline median): not failed",
            metric.name()
        ),
    };
    RegressionCheck {
        label: label.into(),
        metric: metric.name().into(),
        threshold_pct: pct,
        ci_low_pct: lo,
        relative_change_pct: rel,
        failed,
        reason,
    }
}

/// A capture of a graph-mode engine forced eager (`run_facts.graph_mode` eager) is a cross-check only: it runs
/// kernels the benchmark's graph path never emits (the serving-run manual, B73).
fn cross_check_warnings<'a>(caps: impl Iterator<Item = &'a Capture>) -> Vec<String> {
    caps.filter(|c| c.side.run_facts.graph_mode.value == "eager")
        .map(|c| {
            format!(
                "cross-check only: {} is an eager capture of a graph-mode engine ({}): its kernel set is not the graph path the benchmark runs, so it is never the measurement of record",
                c.side.source, c.side.run_facts.graph_mode.source
            )
        })
        .collect()
}

/// Warnings when baseline and trial captures were not alternated in time.
fn alternation_warnings(base: &[Capture], trial: &[Capture]) -> Vec<String> {
    let mut out = Vec::new();
    if base.len() + trial.len() <= 2 {
        return out;
    }
    let all: Vec<&Capture> = base.iter().chain(trial.iter()).collect();
    let unknown: Vec<&str> =
        all.iter().filter(|c| c.side.started_utc_ns.is_none()).map(|c| c.side.source.as_str()).collect();
    if !unknown.is_empty() {
        out.push(format!(
            "cannot check that baseline and trial alternated: start time unknown for {}",
            unknown.join(", ")
        ));
        return out;
    }
    let mut order: Vec<&Capture> = all.clone();
    order.sort_by_key(|c| c.side.started_utc_ns);
    let roles: Vec<&str> = order.iter().map(|c| if c.side.role == "baseline" { "A" } else { "B" }).collect();
    let runs = roles.windows(2).filter(|w| w[0] == w[1]).count();
    // the fewest same-role neighbours any order can have
    let (na, nb) = (base.len(), trial.len());
    let least = na.max(nb).saturating_sub(na.min(nb) + 1);
    if runs > least {
        let last_a = order.iter().rposition(|c| c.side.role == "baseline");
        let first_b = order.iter().position(|c| c.side.role == "trial");
        let blocked = matches!((last_a, first_b), (Some(a), Some(b)) if a < b) || {
            let last_b = order.iter().rposition(|c| c.side.role == "trial");
            let first_a = order.iter().position(|c| c.side.role == "baseline");
            matches!((last_b, first_a), (Some(b), Some(a)) if b < a)
        };
        out.push(format!(
            "baseline and trial were not alternated in time (order by start: {}){}: clock and thermal drift can pass for a change; alternate the runs",
            roles.join(""),
            if blocked { ", one side ran entirely before the other" } else { "" }
        ));
    }
    out
}
