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
    /// Σ per component over all steps, and `wall` (recomputed from `steps[]`).
    pub totals: BTreeMap<String, i64>,
    pub distributions: BTreeMap<String, StepDist>,
    /// Outlier step indexes.
    pub outliers: Vec<u64>,
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

/// One step as read from the document: index, start, wall, GPU busy, whether it carries device work, and its
/// components in the order of the section's component names.
struct StepRow {
    index: u64,
    start: i64,
    wall: i64,
    busy: i64,
    device: bool,
    comps: Vec<i64>,
}

/// What a section is built from, whether read from JSON ([`section`]) or from the typed document
/// ([`section_of`]).
struct Parts {
    names: Vec<String>,
    rows: Vec<StepRow>,
    outliers: Vec<u64>,
    warmup: Vec<u64>,
    verdict: StepVerdict,
    distributions: BTreeMap<String, StepDist>,
    idle: Vec<Value>,
    graph_level: bool,
    step_label: String,
    step_label_choice: Option<String>,
    outlier_factor: Option<f64>,
}

/// Build the section from a step-budget document (JSON). None when it has no steps.
pub fn section(doc: &Value, source: &str) -> Option<StepBudgetSection> {
    let steps_v = doc.get("steps")?.as_array()?;
    if steps_v.is_empty() {
        return None;
    }
    fn comps_of(s: &Value) -> Option<&serde_json::Map<String, Value>> {
        s.get("components").and_then(|c| c.as_object())
    }
    // component order: the known ones present, then the others as first found
    let mut names: Vec<String> = KNOWN_COMPONENTS
        .iter()
        .filter(|n| {
            steps_v.iter().any(|s| comps_of(s).is_some_and(|m| m.get(**n).is_some_and(|v| v.as_i64().is_some())))
        })
        .map(|n| n.to_string())
        .collect();
    for s in steps_v {
        for (k, v) in comps_of(s).into_iter().flatten() {
            if v.as_i64().is_some() && !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    let rows: Vec<StepRow> = steps_v
        .iter()
        .enumerate()
        .map(|(k, s)| StepRow {
            index: s.get("index").and_then(|x| x.as_u64()).unwrap_or(k as u64),
            start: i(s, "start_ns"),
            wall: i(s, "wall_ns"),
            busy: i(s, "gpu_busy_ns"),
            device: ["kernels", "memcpys", "memsets", "graph_traces", "graph_launches"].iter().any(|f| i(s, f) > 0)
                || i(s, "gpu_busy_ns") > 0,
            comps: names
                .iter()
                .map(|n| comps_of(s).and_then(|m| m.get(n)).and_then(|v| v.as_i64()).unwrap_or(0))
                .collect(),
        })
        .collect();
    let outliers: Vec<u64> = doc
        .get("outliers")
        .and_then(|o| o.as_array())
        .map(|a| a.iter().filter_map(|o| o.as_u64().or_else(|| o.get("index").and_then(|x| x.as_u64()))).collect())
        .unwrap_or_default();
    let warmup: Vec<u64> = doc
        .get("warmup")
        .and_then(|o| o.as_array())
        .map(|a| a.iter().filter_map(|o| o.get("index").and_then(|x| x.as_u64())).collect())
        .unwrap_or_default();
    // a verdict step-budget itself rejected (its gates said RETRY) draws the class the evidence gives; the
    // report rejects it again from the gates it reads (`kernel_profile.step_budget.gates` among them)
    let verdict: StepVerdict = doc
        .get("verdict")
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
        .unwrap_or_default();
    let distributions: BTreeMap<String, StepDist> = doc
        .get("distributions")
        .and_then(|d| d.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| serde_json::from_value(v.clone()).ok().map(|d| (k.clone(), d))).collect())
        .unwrap_or_default();
    Some(build(
        Parts {
            names,
            rows,
            outliers,
            warmup,
            verdict,
            distributions,
            idle: doc.get("idle").and_then(|x| x.as_array()).cloned().unwrap_or_default(),
            graph_level: doc.get("graph_level").and_then(|x| x.as_bool()).unwrap_or(false),
            step_label: doc.get("step_label").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            step_label_choice: doc.get("step_label_choice").and_then(|x| x.as_str()).map(String::from),
            outlier_factor: doc.get("outlier_factor").and_then(|x| x.as_f64()),
        },
        source,
    ))
}

/// [`section`] of a step-budget document computed in this process: the same section, without writing its
/// JSON (a large step budget's steps would be serialized only to be read back).
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
            outliers: doc.outliers.iter().map(|o| o.index as u64).collect(),
            warmup: doc.warmup.iter().map(|o| o.index as u64).collect(),
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

/// The section from its parts: totals, bars (binned past [`MAX_BARS`]), histograms.
fn build(p: Parts, source: &str) -> StepBudgetSection {
    let Parts { names, rows, outliers, warmup, verdict, distributions, idle, graph_level, .. } = p;
    let mut totals = BTreeMap::new();
    let wall: i64 = rows.iter().map(|r| r.wall).sum();
    totals.insert("wall".to_string(), wall);
    let apart: Vec<&StepRow> =
        rows.iter().filter(|r| outliers.contains(&r.index) || warmup.contains(&r.index)).collect();
    let apart_wall: i64 = apart.iter().map(|r| r.wall).sum();
    let set_apart = SetApart {
        warmup: warmup.len() as u64,
        outliers: outliers.len() as u64,
        wall_ns: apart_wall,
        wall_share: (wall > 0).then(|| apart_wall as f64 / wall as f64),
        gpu_busy_share: (apart_wall > 0).then(|| apart.iter().map(|r| r.busy).sum::<i64>() as f64 / apart_wall as f64),
    };
    for (k, n) in names.iter().enumerate() {
        totals.insert(n.clone(), rows.iter().map(|r| r.comps[k]).sum());
    }
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
            outliers: c.iter().filter(|r| outliers.contains(&r.index)).count() as u64,
        })
        .collect();
    let histograms = vec![
        histogram("wall", rows.iter().map(|r| r.wall).collect()),
        histogram("gpu_busy", rows.iter().map(|r| r.busy).collect()),
    ];
    StepBudgetSection {
        source: source.to_string(),
        step_label: p.step_label,
        step_label_choice: p.step_label_choice,
        steps: rows.len() as u64,
        outlier_factor: p.outlier_factor,
        graph_level,
        device_work: graph_level || rows.iter().any(|r| r.device),
        verdict,
        components: names,
        totals,
        distributions,
        outliers,
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
        let json = section(&serde_json::to_value(&doc).unwrap(), "x").unwrap();
        assert_eq!(serde_json::to_string(&typed).unwrap(), serde_json::to_string(&json).unwrap());
        assert!(typed.steps > 100 && typed.idle_computed && !typed.outliers.is_empty());
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
