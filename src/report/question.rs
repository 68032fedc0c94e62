//! The question, bounded before paying for a capture, and the unprofiled score beside the profiled run.
//!
//! `nsyskit.question/v1` (written by hand, placed at `question` by bundle-merge) names the end-to-end metric,
//! the suspected contributor (a range label or a kernel category / kernel-name pattern), its profile share if
//! known and the maximum win if it were removed. `nsyskit.benchmark/v1` (placed at `benchmark`) records the
//! unprofiled benchmark score (e.g. TPOT from the benchmark client's JSON). `report` then states:
//! - the measured share of the contributor (a label: its host wall over the reference label's host wall; a
//!   kernel category or pattern: its kernel time over the reference label's host wall, an upper bound) and the
//!   Amdahl bound on the win: removing a part that takes share p of the time saves at most p of it (speedup at
//!   most 1 / (1 − p));
//! - GPU busy per decode step (the reference label's kernel busy union / occurrences) reconciled against the
//!   unprofiled TPOT: which share of the score the GPU work explains;
//! - the profiled client's throughput (`serve_capture.diagnostic`), marked diagnostic, never a score.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::categories::Categories;
use crate::contract::{Document, Error, Result};
use crate::evidence::{Evidence, RangeRow};

/// The suspected contributor: exactly one of `label`, `kernel_category`, `kernel_pattern`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contributor {
    /// A range label (e.g. `vibeserve.sampling.d2h`).
    pub label: Option<String>,
    /// A kernel category of the report's rules (e.g. `attention`).
    pub kernel_category: Option<String>,
    /// A case-insensitive regular expression over kernel names.
    pub kernel_pattern: Option<String>,
}

/// `nsyskit.question/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionDoc {
    pub schema: String,
    /// The end-to-end metric the change is meant to improve (e.g. `tpot_ms`, `throughput_tok_s`).
    pub metric: String,
    pub contributor: Contributor,
    /// The reference range for shares (default: the report's primary label, e.g. the engine iteration).
    #[serde(default)]
    pub per: Option<String>,
    /// The contributor's share of the metric as currently believed (0–1), if known.
    #[serde(default)]
    pub expected_share: Option<f64>,
    /// The largest win (0–1 of the metric) expected if the contributor were removed, if stated.
    #[serde(default)]
    pub max_win: Option<f64>,
    #[serde(default)]
    pub note: Option<String>,
}

impl Document for QuestionDoc {
    const KIND: &'static str = "question";
    const TOOL: &'static str = "report";
}

/// `nsyskit.benchmark/v1`: a benchmark score recorded beside the profiled run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BenchmarkDoc {
    pub schema: String,
    /// Whether the score was measured under the profiler (true: diagnostic only, never the result).
    #[serde(default)]
    pub profiled: bool,
    /// The benchmark client's command line.
    #[serde(default)]
    pub client_command: Option<String>,
    /// Scores by name (`tpot_ms`, `ttft_ms`, `output_throughput_tok_s`, …).
    #[serde(default)]
    pub scores: std::collections::BTreeMap<String, f64>,
    /// The benchmark client's own JSON as written (vLLM/SGLang `bench_serving`: `median_tpot_ms`,
    /// `mean_tpot_ms`, `output_throughput` … are read when `scores` lacks them).
    #[serde(default)]
    pub client_json: Option<Value>,
}

impl Document for BenchmarkDoc {
    const KIND: &'static str = "benchmark";
    const TOOL: &'static str = "report";
}

/// What report says about the question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionAnswer {
    pub metric: String,
    pub contributor: Contributor,
    /// The reference label the share is relative to.
    pub per: Option<String>,
    /// The measured share (null: not measurable, see `reason`).
    pub measured_share: Option<f64>,
    /// `host wall of the label / host wall of per`, or `kernel time / host wall of per (upper bound)`.
    pub share_basis: String,
    /// Amdahl: removing the contributor saves at most `measured_share` of the time …
    pub max_time_saved: Option<f64>,
    /// … i.e. a speedup of at most 1 / (1 − share) (null when the share is 1 or unknown).
    pub max_speedup: Option<f64>,
    pub expected_share: Option<f64>,
    pub max_win: Option<f64>,
    /// One sentence: the bound, and how it compares with what the question assumed.
    pub statement: String,
}

/// The unprofiled score reconciled with the profiled run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScoreReconciliation {
    /// The decode step label (the reference label).
    pub step_label: Option<String>,
    pub steps: i64,
    /// Kernel busy union per step (ms) and host wall per step (ms) in the profiled run.
    pub gpu_busy_per_step_ms: Option<f64>,
    pub profiled_step_wall_ms: Option<f64>,
    /// The unprofiled TPOT (ms) and where it was read.
    pub benchmark_tpot_ms: Option<f64>,
    pub benchmark_tpot_source: Option<String>,
    /// GPU busy per step / unprofiled TPOT.
    pub gpu_busy_share_of_tpot: Option<f64>,
    /// Profiled step wall / unprofiled TPOT (profiler overhead and workload differences).
    pub profiled_wall_over_tpot: Option<f64>,
    /// The benchmark was measured under the profiler (never the score).
    pub benchmark_profiled: bool,
    /// The profiled client's throughput (`serve_capture.diagnostic`), diagnostic only.
    pub profiled_client_throughput: Option<Value>,
    pub statements: Vec<String>,
}

/// The report's `question` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionSection {
    pub question: Option<QuestionAnswer>,
    pub score: Option<ScoreReconciliation>,
}

fn check_share(v: Option<f64>, at: &str, src: &str) -> Result<()> {
    match v {
        Some(x) if !(x.is_finite() && (0.0..=1.0).contains(&x)) => {
            Err(Error::input(format!("{src}: $.question.{at}: {x}: expected a share between 0 and 1")))
        }
        _ => Ok(()),
    }
}

/// Parse a question document (the bundle's `question` block).
pub fn parse_question(v: &Value, src: &str) -> Result<QuestionDoc> {
    let q: QuestionDoc = serde_json::from_value(v.clone())
        .map_err(|e| Error::input(format!("{src}: $.question: not an nsyskit.question/v1 document: {e}")))?;
    let c = &q.contributor;
    let n = [c.label.is_some(), c.kernel_category.is_some(), c.kernel_pattern.is_some()].iter().filter(|x| **x).count();
    if n != 1 {
        return Err(Error::input(format!(
            "{src}: $.question.contributor: give exactly one of label, kernel_category, kernel_pattern"
        )));
    }
    check_share(q.expected_share, "expected_share", src)?;
    check_share(q.max_win, "max_win", src)?;
    Ok(q)
}

/// The TPOT of a benchmark record (ms) and where it was read.
pub fn tpot_ms(b: &BenchmarkDoc) -> Option<(f64, String)> {
    for k in ["tpot_ms", "median_tpot_ms", "mean_tpot_ms"] {
        if let Some(v) = b.scores.get(k) {
            return Some((*v, format!("benchmark.scores.{k}")));
        }
    }
    let cj = b.client_json.as_ref()?;
    for k in ["median_tpot_ms", "mean_tpot_ms", "tpot_ms"] {
        if let Some(v) = cj.get(k).and_then(|x| x.as_f64()) {
            return Some((v, format!("benchmark.client_json.{k}")));
        }
    }
    None
}

fn find<'a>(ranges: &'a [RangeRow], label: &str) -> Option<&'a RangeRow> {
    ranges.iter().find(|r| r.label == label)
}

/// The `question` section of a report, from the bundle's `question`, `benchmark` and `serve_capture` blocks.
/// `primary` is the report's primary label (the default reference). None: the bundle has neither block.
pub fn section(ev: &Evidence, categories: &Categories, primary: Option<&str>) -> Result<Option<QuestionSection>> {
    let Some(bundle) = ev.bundle.as_ref() else { return Ok(None) };
    let q = bundle.get("question").filter(|v| !v.is_null());
    let b = bundle.get("benchmark").filter(|v| !v.is_null());
    if q.is_none() && b.is_none() {
        return Ok(None);
    }
    let empty = Vec::new();
    let ranges = ev.ranges.as_ref().map(|r| &r.ranges).unwrap_or(&empty);
    let mut out = QuestionSection::default();
    if let Some(qv) = q {
        out.question = Some(answer(ev, categories, primary, ranges, qv)?);
    }
    if let Some(bv) = b {
        out.score = Some(score(ev, bundle, primary, ranges, bv)?);
    }
    Ok(Some(out))
}

/// The answer to the bundle's `question`: the contributor's share of the reference range and Amdahl's bound.
fn answer(
    ev: &Evidence,
    categories: &Categories,
    primary: Option<&str>,
    ranges: &[RangeRow],
    qv: &Value,
) -> Result<QuestionAnswer> {
    let q = parse_question(qv, &ev.source)?;
    let per = q.per.clone().or_else(|| primary.map(String::from));
    let reference = per.as_deref().and_then(|p| find(ranges, p));
    let denom = reference.map(|r| r.host_wall_time_ns).filter(|w| *w > 0);
    let (num, basis): (Option<i64>, String) = if let Some(l) = &q.contributor.label {
        let r = find(ranges, l);
        let nested = r
            .map(|r| per.as_deref().map(|p| r.parents.contains_key(p) || r.label == p).unwrap_or(false))
            .unwrap_or(false);
        (
            r.map(|r| r.host_wall_time_ns),
            format!(
                "host wall of {l:?} / host wall of {:?}{}",
                per.as_deref().unwrap_or("?"),
                if r.is_some() && !nested {
                    " (the label is not a direct child of the reference: the share may count time outside it)"
                } else {
                    ""
                }
            ),
        )
    } else {
        let re = match &q.contributor.kernel_pattern {
            Some(p) => Some(regex::RegexBuilder::new(p).case_insensitive(true).build().map_err(|e| {
                Error::input(format!(
                    "{}: $.question.contributor.kernel_pattern: bad regular expression {p:?}: {e}",
                    ev.source
                ))
            })?),
            None => None,
        };
        let cat = q.contributor.kernel_category.clone();
        let t: Option<i64> = ev.kernels.as_ref().map(|ks| {
            ks.iter()
                .filter(|k| match (&re, &cat) {
                    (Some(re), _) => re.is_match(&k.name),
                    (None, Some(c)) => categories.categorize(&k.name) == c,
                    _ => false,
                })
                .map(|k| k.total_time_ns)
                .sum()
        });
        (t, format!("kernel time of the contributor (whole capture) / host wall of {:?}: an upper bound (kernels overlap host time)", per.as_deref().unwrap_or("?")))
    };
    let share = match (num, denom) {
        (Some(n), Some(d)) => Some(n as f64 / d as f64),
        _ => None,
    };
    let saved = share.map(|s| s.min(1.0));
    let speedup = saved.and_then(|s| (s < 1.0).then(|| 1.0 / (1.0 - s)));
    let name = q
        .contributor
        .label
        .clone()
        .or(q.contributor.kernel_category.clone())
        .or(q.contributor.kernel_pattern.clone())
        .unwrap_or_default();
    let statement = match saved {
        None if denom.is_none() => format!("the reference range {:?} is not in this capture (or has no host wall): the share of {name:?} cannot be measured", per.as_deref().unwrap_or("?")),
        None => format!("{name:?} is not measurable in this capture (no such label or no kernel statistics)"),
        Some(s) => {
            let mut t = format!(
                "{name:?} takes {:.1}% of {:?} ({basis}); by Amdahl's law removing it entirely saves at most {:.1}% of {} (speedup ≤ {})",
                s * 100.0,
                per.as_deref().unwrap_or("?"),
                s * 100.0,
                q.metric,
                speedup.map(|x| format!("{x:.3}×")).unwrap_or_else(|| "unbounded".into())
            );
            if let Some(w) = q.max_win {
                if w > s + 1e-9 {
                    t.push_str(&format!("; the question expected up to {:.1}%: more than the bound allows", w * 100.0));
                } else {
                    t.push_str(&format!("; the question's {:.1}% is within the bound", w * 100.0));
                }
            }
            if let Some(e) = q.expected_share {
                t.push_str(&format!("; it assumed a {:.1}% share, measured {:.1}%", e * 100.0, s * 100.0));
            }
            t
        }
    };
    Ok(QuestionAnswer {
        metric: q.metric.clone(),
        contributor: q.contributor.clone(),
        per: per.clone(),
        measured_share: share,
        share_basis: basis,
        max_time_saved: saved,
        max_speedup: speedup,
        expected_share: q.expected_share,
        max_win: q.max_win,
        statement,
    })
}

/// The bundle's `benchmark` reconciled with the capture: GPU busy per step against the unprofiled TPOT.
fn score(
    ev: &Evidence,
    bundle: &Value,
    primary: Option<&str>,
    ranges: &[RangeRow],
    bv: &Value,
) -> Result<ScoreReconciliation> {
    let bm: BenchmarkDoc = serde_json::from_value(bv.clone())
        .map_err(|e| Error::input(format!("{}: $.benchmark: not an nsyskit.benchmark/v1 document: {e}", ev.source)))?;
    let step = primary.and_then(|p| find(ranges, p));
    let steps = step.map(|r| r.occurrences).unwrap_or(0);
    let per_step = |ns: i64| (steps > 0).then(|| ns as f64 / steps as f64 / 1e6);
    let busy = step.and_then(|r| per_step(r.kernel_busy_union_ns));
    let wall = step.and_then(|r| per_step(r.host_wall_time_ns));
    let tpot = tpot_ms(&bm);
    let share = match (busy, &tpot) {
        (Some(b), Some((t, _))) if *t > 0.0 => Some(b / t),
        _ => None,
    };
    let over = match (wall, &tpot) {
        (Some(w), Some((t, _))) if *t > 0.0 => Some(w / t),
        _ => None,
    };
    let mut st = Vec::new();
    if bm.profiled {
        st.push("the benchmark record says it was measured under the profiler: it is diagnostic, not the score; record an unprofiled run".into());
    }
    match (busy, &tpot, share) {
        (Some(b), Some((t, src)), Some(s)) => {
            st.push(format!(
                "GPU busy per decode step ({}) is {b:.3} ms = {:.1}% of the unprofiled TPOT {t:.3} ms ({src}); the remaining {:.3} ms per token is host time and device idle{}",
                primary.unwrap_or("?"),
                s * 100.0,
                (t - b).max(0.0),
                if s > 1.0 { " — busy exceeds the TPOT: the benchmark and the capture do not describe the same workload (batch, sequence lengths), or one step emits several tokens" } else { "" }
            ));
        }
        (_, None, _) => st.push("the benchmark record has no TPOT (scores.tpot_ms, client_json.median_tpot_ms / mean_tpot_ms): nothing to reconcile".into()),
        _ => st.push(format!("no decode step label with occurrences ({}) in this capture: GPU busy per step is unknown", primary.unwrap_or("none"))),
    }
    if let (Some(o), Some((t, _))) = (over, &tpot) {
        st.push(format!("the profiled step wall is {:.2}× the unprofiled TPOT {t:.3} ms: profiler overhead and workload differences; quote the unprofiled score", o));
    }
    let diag = bundle.pointer("/serve_capture/diagnostic").filter(|v| !v.is_null()).cloned();
    if diag.is_some() {
        st.push(
            "the profiled client's throughput (serve_capture.diagnostic) is diagnostic only: never the score".into(),
        );
    }
    Ok(ScoreReconciliation {
        step_label: primary.map(String::from),
        steps,
        gpu_busy_per_step_ms: busy,
        profiled_step_wall_ms: wall,
        benchmark_tpot_ms: tpot.as_ref().map(|t| t.0),
        benchmark_tpot_source: tpot.map(|t| t.1),
        gpu_busy_share_of_tpot: share,
        profiled_wall_over_tpot: over,
        benchmark_profiled: bm.profiled,
        profiled_client_throughput: diag,
        statements: st,
    })
}
