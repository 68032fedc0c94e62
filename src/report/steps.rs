//! The step budget in the report (`report.step_budget`): what the page draws of a `nsyskit.step-budget/v1`
//! document, read from its JSON so that fields a newer step budget adds, or an older one lacks, are tolerated
//! (`idle[]` absent or empty = "not computed").
//!
//! - `bars`: the budget of every step by component, in step order; with more than [`MAX_BARS`] steps,
//!   consecutive steps are binned (`steps_per_bar` each, sums per bar; the page draws the mean per step and
//!   says so);
//! - `histograms`: step wall and GPU busy, [`HIST_BINS`] bins from the minimum to `min(max, 3 × median)` (the whole range
//!   when the median is 0), the rest counted in `above`;
//! - the verdict, distributions and outliers as the step budget states them.
//!
//! A step-budget document is a summary without per-step rows (`step_count`, no `steps[]`; `step-budget --steps`
//! prints the rows): its section has the verdict, totals, distributions, outliers and the steps set apart, and
//! no bars or histograms, `bars_note` saying why. The report computed from the export draws the bars from the
//! steps the library keeps in memory.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// At most this many bars in `bars` (more steps are binned).
pub const MAX_BARS: usize = 400;
/// Bins of each histogram.
pub const HIST_BINS: usize = 30;

/// The component order of the step budget (components it adds later are appended in the order found).
pub const KNOWN_COMPONENTS: [&str; 7] =
    ["gpu_kernel", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "comm", "unattributed"];

/// The step budget's verdict, as it states it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepVerdict {
    pub class: String,
    pub rule: String,
    pub reason: String,
    pub steps_used: Option<u64>,
    /// The rows that establish it (component totals over the steps used and their shares).
    pub rows: Vec<StepVerdictRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepVerdictRow {
    pub name: String,
    pub value_ns: i64,
    pub share: Option<f64>,
}

/// Order statistics of one series (nearest rank), as the step budget states them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepDist {
    pub count: u64,
    pub median: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

/// One bar of the per-step chart: one step, or `steps` consecutive steps summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepBar {
    pub first_index: u64,
    pub last_index: u64,
    pub steps: u64,
    pub start_ns: i64,
    /// Σ wall of its steps.
    pub wall_ns: i64,
    /// Σ GPU busy of its steps.
    pub gpu_busy_ns: i64,
    /// Σ per component, in the order of `step_budget.components`.
    pub components: Vec<i64>,
    /// Outlier steps among its steps.
    pub outliers: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepBars {
    /// 1 = one bar per step; k > 1 = each bar sums k consecutive steps (the last may hold fewer).
    pub steps_per_bar: u64,
    pub binned: bool,
    pub bars: Vec<StepBar>,
}

/// A histogram of one per-step series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Histogram {
    /// `wall` or `gpu_busy`.
    pub name: String,
    /// Bin k holds the steps with `lo_ns + k·bin_ns <= value < lo_ns + (k+1)·bin_ns`, up to `hi_ns` included.
    pub lo_ns: i64,
    pub bin_ns: i64,
    pub hi_ns: i64,
    pub counts: Vec<u64>,
    /// Steps above `hi_ns`.
    pub above: u64,
    pub max_ns: i64,
}

/// What the report carries of the step budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepBudgetSection {
    /// `step-budget on the export` (computed in-process by the step-budget library) or
    /// `kernel_profile.step_budget` (the bundle's document).
    pub source: String,
    pub step_label: String,
    pub step_label_choice: Option<String>,
    pub steps: u64,
    pub outlier_factor: Option<f64>,
    pub graph_level: bool,
    /// Some step carries correlated device work (or the capture is graph-level): the verdict is about the GPU.
    pub device_work: bool,
    pub verdict: StepVerdict,
    /// Component names, in drawing order.
    pub components: Vec<String>,
    /// Σ per component over all steps, and `wall` (recomputed from the steps; a summary's own `totals`).
    pub totals: BTreeMap<String, i64>,
    pub distributions: BTreeMap<String, StepDist>,
    /// Outlier step indexes: those the step budget lists (at most 100, `nsyskit::step_budget::MAX_LISTED`: the
    /// largest ratio to the median), in index order.
    pub outliers: Vec<u64>,
    /// How many outliers there are, when `outliers` lists fewer (absent when it lists them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_count: Option<u64>,
    /// Why `bars` and `histograms` are empty although there are steps: the step budget read is a summary
    /// without per-step rows (absent when they are drawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bars_note: Option<String>,
    /// The steps left out of the typical ones (warm-up and outliers) and their weight: often the biggest fact of
    /// the capture (a few prefill or compilation steps holding most of the wall).
    pub set_apart: SetApart,
    pub bars: StepBars,
    pub histograms: Vec<Histogram>,
    /// The step budget's `idle[]` (GPU idle attribution) as it states it; empty when it was not computed.
    pub idle: Vec<Value>,
    /// `idle[]` was present and non-empty.
    pub idle_computed: bool,
}

/// The steps set apart from the typical ones ([`StepBudgetSection::set_apart`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetApart {
    /// Warm-up steps (slow from the start of a rank) and outliers (slow later).
    pub warmup: u64,
    pub outliers: u64,
    /// Σ wall of those steps, and their share of the wall of all steps.
    pub wall_ns: i64,
    pub wall_share: Option<f64>,
    /// Σ GPU busy of those steps over their wall (how much of their time the GPU worked).
    pub gpu_busy_share: Option<f64>,
}

fn i(v: &Value, k: &str) -> i64 {
    v.get(k).and_then(|x| x.as_i64()).unwrap_or(0)
}

/// One step as read from the document: index, start, wall, GPU busy, whether it carries device work, whether it
/// is an outlier or set apart (warm-up or outlier), and its components in the order of the section's names.
struct StepRow {
    index: u64,
    start: i64,
    wall: i64,
    busy: i64,
    device: bool,
    outlier: bool,
    apart: bool,
    comps: Vec<i64>,
}

/// What a summary states in place of its rows (no `steps[]`).
struct Summary {
    steps: u64,
    totals: BTreeMap<String, i64>,
    /// Σ wall and Σ GPU busy of the steps set apart.
    apart: (i64, i64),
    device_work: bool,
}

/// What a section is built from, whether read from JSON ([`section`]) or from the typed document
/// ([`section_of`]).
struct Parts {
    names: Vec<String>,
    rows: Vec<StepRow>,
    /// Set when `rows` is empty: a summary.
    summary: Option<Summary>,
    /// The outliers listed (bounded), and how many outliers and warm-up steps there are.
    outliers: Vec<u64>,
    outlier_count: u64,
    warmup_count: u64,
    verdict: StepVerdict,
    distributions: BTreeMap<String, StepDist>,
    idle: Vec<Value>,
    graph_level: bool,
    step_label: String,
    step_label_choice: Option<String>,
    outlier_factor: Option<f64>,
}

/// The note of a section read from a summary step budget.
pub const SUMMARY_NOTE: &str = "the step budget is a summary without per-step rows: per-step bars and histograms need `step-budget --steps` or the export (`report CAPTURE`)";

/// Indexes (and ratios, when given) of a list of outliers: objects with `index`, or plain indexes.
fn indexes(doc: &Value, key: &str) -> Vec<(u64, f64)> {
    doc.get(key)
        .and_then(|o| o.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|o| {
                    let r = o.get("ratio_to_median").and_then(|x| x.as_f64()).unwrap_or(0.0);
                    o.as_u64().or_else(|| o.get("index").and_then(|x| x.as_u64())).map(|i| (i, r))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn count(doc: &Value, key: &str, listed: usize) -> u64 {
    doc.get(key).and_then(|x| x.as_u64()).unwrap_or(listed as u64)
}

/// Build the section from a step-budget document (JSON): from its `steps[]` when it has them, else from a
/// summary's `step_count`, totals and sums. None when it has no steps.
pub fn section(doc: &Value, source: &str) -> Option<StepBudgetSection> {
    let steps_v: &[Value] = match doc.get("steps") {
        Some(s) => s.as_array()?,
        None if doc.get("step_count").and_then(|n| n.as_u64()).is_some_and(|n| n > 0) => &[],
        None => return None,
    };
    if steps_v.is_empty() && doc.get("steps").is_some() {
        return None;
    }
    fn comps_of(s: &Value) -> Option<&serde_json::Map<String, Value>> {
        s.get("components").and_then(|c| c.as_object())
    }
    let totals_v = doc.get("totals").and_then(|t| t.as_object());
    // component order: the known ones present, then the others as first found
    let has = |n: &str| {
        if steps_v.is_empty() {
            totals_v.is_some_and(|m| m.get(n).is_some_and(|v| v.as_i64().is_some()))
        } else {
            steps_v.iter().any(|s| comps_of(s).is_some_and(|m| m.get(n).is_some_and(|v| v.as_i64().is_some())))
        }
    };
    let mut names: Vec<String> = KNOWN_COMPONENTS.iter().filter(|n| has(n)).map(|n| n.to_string()).collect();
    let extra = steps_v.iter().filter_map(comps_of).chain(totals_v.filter(|_| steps_v.is_empty()));
    for m in extra {
        for (k, v) in m {
            if v.as_i64().is_some() && !names.contains(k) && k != "wall" {
                names.push(k.clone());
            }
        }
    }
    let all_outliers = indexes(doc, "outliers");
    let warmup: Vec<u64> = indexes(doc, "warmup").into_iter().map(|(i, _)| i).collect();
    let (outlier_count, warmup_count) =
        (count(doc, "outlier_count", all_outliers.len()), count(doc, "warmup_count", warmup.len()));
    let flag = |s: &Value, k: &str| s.get(k).and_then(|x| x.as_bool());
    let rows: Vec<StepRow> = steps_v
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let index = s.get("index").and_then(|x| x.as_u64()).unwrap_or(k as u64);
            // a row's own flags (`step-budget --steps`), else the document's lists (an older document lists all)
            let outlier = flag(s, "outlier").unwrap_or_else(|| all_outliers.iter().any(|o| o.0 == index));
            let warm = flag(s, "warmup").unwrap_or_else(|| warmup.contains(&index));
            StepRow {
                index,
                start: i(s, "start_ns"),
                wall: i(s, "wall_ns"),
                busy: i(s, "gpu_busy_ns"),
                device: ["kernels", "memcpys", "memsets", "graph_traces", "graph_launches"].iter().any(|f| i(s, f) > 0)
                    || i(s, "gpu_busy_ns") > 0,
                outlier,
                apart: outlier || warm,
                comps: names
                    .iter()
                    .map(|n| comps_of(s).and_then(|m| m.get(n)).and_then(|v| v.as_i64()).unwrap_or(0))
                    .collect(),
            }
        })
        .collect();
    let distributions: BTreeMap<String, StepDist> = doc
        .get("distributions")
        .and_then(|d| d.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| serde_json::from_value(v.clone()).ok().map(|d| (k.clone(), d))).collect())
        .unwrap_or_default();
    let graph_level = doc.get("graph_level").and_then(|x| x.as_bool()).unwrap_or(false);
    let summary = steps_v.is_empty().then(|| Summary {
        steps: count(doc, "step_count", 0),
        totals: totals_v
            .map(|m| m.iter().filter_map(|(k, v)| v.as_i64().map(|v| (k.clone(), v))).collect())
            .unwrap_or_default(),
        apart: doc.get("set_apart").map(|a| (i(a, "wall_ns"), i(a, "gpu_busy_ns"))).unwrap_or((0, 0)),
        device_work: distributions.get("gpu_busy").is_some_and(|d| d.max > 0)
            || doc
                .get("groups")
                .and_then(|g| g.as_array())
                .is_some_and(|g| g.iter().any(|g| g.get("kernels").and_then(|k| k.as_u64()).unwrap_or(0) > 0)),
    });
    let listed = crate::step_budget::keep_largest(all_outliers, crate::step_budget::MAX_LISTED, |o| o.1);
    Some(build(
        Parts {
            names,
            rows,
            summary,
            outliers: listed.into_iter().map(|(i, _)| i).collect(),
            outlier_count,
            warmup_count,
            verdict: verdict_of_json(doc),
            distributions,
            idle: doc.get("idle").and_then(|x| x.as_array()).cloned().unwrap_or_default(),
            graph_level,
            step_label: doc.get("step_label").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            step_label_choice: doc.get("step_label_choice").and_then(|x| x.as_str()).map(String::from),
            outlier_factor: doc.get("outlier_factor").and_then(|x| x.as_f64()),
        },
        source,
    ))
}

/// The verdict of a step-budget document (JSON). A verdict step-budget itself rejected (its gates said RETRY)
/// draws the class the evidence gives; the report rejects it again from the gates it reads
/// (`kernel_profile.step_budget.gates` among them).
fn verdict_of_json(doc: &Value) -> StepVerdict {
    doc.get("verdict")
        .map(|v| match v.get("would_be") {
            Some(w) if v.get("class").and_then(|c| c.as_str()) == Some(crate::step_budget::UNRELIABLE) => w,
            _ => v,
        })
        .map(|v| StepVerdict {
            class: v.get("class").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            rule: v.get("rule").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            reason: v.get("reason").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            steps_used: v.get("steps_used").and_then(|x| x.as_u64()),
            rows: v
                .get("rows")
                .and_then(|r| r.as_array())
                .map(|a| {
                    a.iter()
                        .map(|r| StepVerdictRow {
                            name: r.get("name").and_then(|x| x.as_str()).unwrap_or("").to_string(),
                            value_ns: i(r, "value_ns"),
                            share: r.get("share").and_then(|x| x.as_f64()),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .unwrap_or_default()
}

/// [`section`] of a step-budget document computed in this process: the same section, drawn from the steps the
/// library keeps in memory (the document itself holds none).
pub fn section_of(doc: &crate::step_budget::StepBudgetDoc, source: &str) -> Option<StepBudgetSection> {
    if doc.steps.is_empty() {
        return None;
    }
    let names: Vec<String> = KNOWN_COMPONENTS.iter().map(|n| n.to_string()).collect();
    let rows = doc
        .steps
        .iter()
        .map(|s| StepRow {
            index: s.index as u64,
            start: s.start_ns,
            wall: s.wall_ns,
            busy: s.gpu_busy_ns,
            device: s.kernels + s.memcpys + s.memsets + s.graph_traces + s.graph_launches > 0 || s.gpu_busy_ns > 0,
            outlier: s.outlier,
            apart: s.outlier || s.warmup,
            comps: names.iter().map(|n| s.components.get(n)).collect(),
        })
        .collect();
    let v = match &doc.verdict.would_be {
        Some(w) if doc.verdict.class == crate::step_budget::UNRELIABLE => w,
        _ => &doc.verdict,
    };
    let verdict = StepVerdict {
        class: v.class.clone(),
        rule: v.rule.clone(),
        reason: v.reason.clone(),
        steps_used: Some(v.steps_used as u64),
        rows: v
            .rows
            .iter()
            .map(|r| StepVerdictRow {
                name: r.name.clone(),
                value_ns: r.value_ns,
                share: r.share.filter(|x| x.is_finite()),
            })
            .collect(),
    };
    let distributions = doc
        .distributions
        .iter()
        .map(|(k, d)| {
            (k.clone(), StepDist { count: d.count as u64, median: d.median, p90: d.p90, p99: d.p99, max: d.max })
        })
        .collect();
    Some(build(
        Parts {
            names,
            rows,
            summary: None,
            outliers: doc.outliers.iter().map(|o| o.index as u64).collect(),
            outlier_count: doc.outlier_count as u64,
            warmup_count: doc.warmup_count as u64,
            verdict,
            distributions,
            idle: doc.idle.iter().filter_map(|d| serde_json::to_value(d).ok()).collect(),
            graph_level: doc.graph_level,
            step_label: doc.step_label.clone(),
            step_label_choice: Some(doc.step_label_choice.clone()),
            outlier_factor: Some(doc.outlier_factor).filter(|x| x.is_finite()),
        },
        source,
    ))
}

/// The section from its parts: totals, bars (binned past [`MAX_BARS`]), histograms; from a summary, its own
/// totals and sums and no bars.
fn build(p: Parts, source: &str) -> StepBudgetSection {
    let Parts { names, rows, outliers, verdict, distributions, idle, graph_level, .. } = p;
    let (steps, mut totals, (apart_wall, apart_busy), device_work) = match p.summary {
        Some(s) => {
            let totals: BTreeMap<String, i64> =
                s.totals.into_iter().filter(|(k, _)| k == "wall" || names.contains(k)).collect();
            (s.steps, totals, s.apart, s.device_work)
        }
        None => {
            let apart: Vec<&StepRow> = rows.iter().filter(|r| r.apart).collect();
            let sums = (apart.iter().map(|r| r.wall).sum(), apart.iter().map(|r| r.busy).sum());
            let mut totals = BTreeMap::new();
            totals.insert("wall".to_string(), rows.iter().map(|r| r.wall).sum());
            for (k, n) in names.iter().enumerate() {
                totals.insert(n.clone(), rows.iter().map(|r| r.comps[k]).sum());
            }
            (rows.len() as u64, totals, sums, rows.iter().any(|r| r.device))
        }
    };
    let wall = *totals.entry("wall".to_string()).or_insert(0);
    let set_apart = SetApart {
        warmup: p.warmup_count,
        outliers: p.outlier_count,
        wall_ns: apart_wall,
        wall_share: (wall > 0).then(|| apart_wall as f64 / wall as f64),
        gpu_busy_share: (apart_wall > 0).then(|| apart_busy as f64 / apart_wall as f64),
    };
    let per = rows.len().div_ceil(MAX_BARS).max(1);
    let bars: Vec<StepBar> = rows
        .chunks(per)
        .map(|c| StepBar {
            first_index: c[0].index,
            last_index: c[c.len() - 1].index,
            steps: c.len() as u64,
            start_ns: c[0].start,
            wall_ns: c.iter().map(|r| r.wall).sum(),
            gpu_busy_ns: c.iter().map(|r| r.busy).sum(),
            components: (0..names.len()).map(|k| c.iter().map(|r| r.comps[k]).sum()).collect(),
            outliers: c.iter().filter(|r| r.outlier).count() as u64,
        })
        .collect();
    let histograms = if rows.is_empty() {
        Vec::new()
    } else {
        vec![
            histogram("wall", rows.iter().map(|r| r.wall).collect()),
            histogram("gpu_busy", rows.iter().map(|r| r.busy).collect()),
        ]
    };
    StepBudgetSection {
        source: source.to_string(),
        step_label: p.step_label,
        step_label_choice: p.step_label_choice,
        steps,
        outlier_factor: p.outlier_factor,
        graph_level,
        device_work: graph_level || device_work,
        verdict,
        components: names,
        totals,
        distributions,
        outlier_count: (p.outlier_count > outliers.len() as u64).then_some(p.outlier_count),
        outliers,
        bars_note: rows.is_empty().then(|| SUMMARY_NOTE.to_string()),
        set_apart,
        bars: StepBars { steps_per_bar: per as u64, binned: per > 1, bars },
        histograms,
        idle_computed: !idle.is_empty(),
        idle,
    }
}

/// A histogram of `v` (see the module docs for the range).
pub fn histogram(name: &str, v: Vec<i64>) -> Histogram {
    let d = crate::step_budget::dist(v.iter().copied());
    let lo = v.iter().copied().min().unwrap_or(0);
    let max = d.max;
    let cap = 3 * d.median;
    let hi = if cap > lo { max.min(cap) } else { max };
    let bin = ((hi - lo) / HIST_BINS as i64 + 1).max(1);
    let mut counts = vec![0u64; HIST_BINS];
    let mut above = 0;
    for x in v {
        if x > hi {
            above += 1;
        } else {
            counts[(((x - lo) / bin) as usize).min(HIST_BINS - 1)] += 1;
        }
    }
    Histogram { name: name.to_string(), lo_ns: lo, bin_ns: bin, hi_ns: hi, counts, above, max_ns: max }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerant_of_missing_and_extra_fields() {
        assert!(section(&json!({"steps": []}), "x").is_none());
        assert!(section(&json!({"verdict": {}}), "x").is_none());
        // no components, outliers as plain indexes, an unknown component kept after the known ones
        let d = json!({"steps": [
            {"index": 0, "start_ns": 0, "wall_ns": 10, "components": {"unattributed": 6, "new_part": 4}},
            {"start_ns": 20, "wall_ns": 30},
        ], "outliers": [1], "idle": null});
        let s = section(&d, "x").unwrap();
        assert_eq!(s.components, vec!["unattributed", "new_part"]);
        assert_eq!(s.bars.bars.len(), 2);
        assert_eq!(s.bars.bars[0].components, vec![6, 4]);
        assert_eq!(s.bars.bars[1].components, vec![0, 0]);
        assert_eq!((s.bars.bars[1].first_index, s.bars.bars[1].outliers), (1, 1));
        assert!(!s.device_work && !s.idle_computed && s.verdict.class.is_empty());
        assert_eq!(s.totals["wall"], 40);
    }

    /// The typed path and the JSON path give the same section, on a real export's step budget.
    #[test]
    fn typed_and_json_sections_agree() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1/decode_mixed.sqlite");
        let cap = crate::export::open_capture(&path, None).unwrap();
        let opts = crate::step_budget::StepBudgetOptions {
            step: Some("vibeserve.engine.iteration".into()),
            ..Default::default()
        };
        let doc = crate::step_budget::analyze(&cap.export, &opts).unwrap();
        let typed = section_of(&doc, "x").unwrap();
        // the summary with the rows `step-budget --steps` prints put back as `steps[]`
        let mut v = serde_json::to_value(&doc).unwrap();
        assert!(v.get("steps").is_none());
        v["steps"] = serde_json::to_value(&doc.steps).unwrap();
        let json = section(&v, "x").unwrap();
        assert_eq!(serde_json::to_string(&typed).unwrap(), serde_json::to_string(&json).unwrap());
        assert!(typed.steps > 100 && typed.idle_computed && !typed.outliers.is_empty());
        assert!(typed.bars_note.is_none() && typed.outlier_count.is_none());
        // the summary alone: everything but the bars and histograms, and a note saying why they are absent
        let summary = section(&serde_json::to_value(&doc).unwrap(), "x").unwrap();
        assert!(summary.bars.bars.is_empty() && summary.histograms.is_empty());
        assert_eq!(summary.bars_note.as_deref(), Some(SUMMARY_NOTE));
        let same = |s: &StepBudgetSection| {
            serde_json::to_string(&(&s.steps, &s.totals, &s.set_apart, &s.outliers, &s.verdict, s.device_work)).unwrap()
        };
        assert_eq!(same(&summary), same(&typed));
    }

    /// More outliers than the step budget lists: the report lists those it lists and says how many there are.
    #[test]
    fn bounded_outliers_are_counted() {
        let steps: Vec<Value> = (0..300)
            .map(|i| json!({"index": i, "start_ns": i * 100, "wall_ns": 50, "components": {"unattributed": 50}}))
            .collect();
        let outliers: Vec<Value> =
            (0..300).filter(|i| i % 2 == 1).map(|i| json!({"index": i, "ratio_to_median": 1.0 + i as f64})).collect();
        let s = section(&json!({"steps": steps, "outliers": outliers}), "x").unwrap();
        let m = crate::step_budget::MAX_LISTED as u64;
        assert_eq!((s.outliers.len() as u64, s.outlier_count, s.set_apart.outliers), (m, Some(150), 150));
        // the largest ratios (the last ones), in index order
        assert_eq!(s.outliers.first(), Some(&(299 - 2 * (m - 1))));
        assert_eq!(s.outliers.last(), Some(&299));
        assert_eq!(s.bars.bars.iter().map(|b| b.outliers).sum::<u64>(), 150);
    }

    #[test]
    fn bins_past_max_bars_and_histograms_count_every_step() {
        let steps: Vec<Value> = (0..1001)
            .map(|i| {
                json!({"index": i, "start_ns": i * 100, "wall_ns": 50 + (i % 7), "gpu_busy_ns": i % 3, "kernels": 1,
                "components": {"gpu_kernel": 1, "unattributed": 49 + (i % 7)}})
            })
            .collect();
        let s = section(&json!({"steps": steps, "outliers": [{"index": 1000}]}), "x").unwrap();
        assert_eq!((s.bars.steps_per_bar, s.bars.bars.len(), s.bars.binned), (3, 334, true));
        assert_eq!(s.bars.bars[333].steps, 2);
        assert_eq!(s.bars.bars[333].outliers, 1);
        assert_eq!(s.bars.bars.iter().map(|b| b.wall_ns).sum::<i64>(), s.totals["wall"]);
        for h in &s.histograms {
            assert_eq!(h.counts.iter().sum::<u64>() + h.above, 1001);
            assert_eq!(h.counts.len(), HIST_BINS);
        }
        // a long tail goes above the last bin
        let h = histogram("wall", vec![10, 10, 11, 12, 1000]);
        assert_eq!((h.above, h.hi_ns, h.max_ns), (1, 33, 1000));
        assert_eq!(h.counts.iter().sum::<u64>(), 4);
    }
}
