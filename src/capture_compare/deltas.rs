//! Per-range, per-kernel and per-category deltas of a comparable pair, and the throughput comparison.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{CaptureCompareDoc, CategoryDelta, Delta, KernelDelta, KernelOnly, RangeDelta, Side, ThroughputComparison};
use crate::categories::{category_shares, Categories, CategoryShare, KernelStat};
use crate::evidence::{Evidence, RangeRow};

/// Scores of a benchmark record: `scores` (object of numbers) or the recognised keys of `client_json`.
pub fn benchmark_scores(b: &Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if let Some(o) = b.get("scores").and_then(|s| s.as_object()) {
        for (k, v) in o {
            if let Some(x) = v.as_f64() {
                out.insert(k.clone(), x);
            }
        }
    }
    out
}

pub(super) fn throughput_comparison(a: &Side, b: &Side) -> ThroughputComparison {
    let kind = |s: &Side| -> &'static str {
        match (&s.benchmark, &s.diagnostic_throughput) {
            (Some(bm), _) if !bm.get("profiled").and_then(|p| p.as_bool()).unwrap_or(false) => "unprofiled",
            (Some(_), _) | (None, Some(_)) => "profiled",
            _ => "none",
        }
    };
    let (ka, kb) = (kind(a), kind(b));
    let none = |reason: String| ThroughputComparison { compared: false, reason, scores: BTreeMap::new() };
    match (ka, kb) {
        ("unprofiled", "unprofiled") => {
            let sa = benchmark_scores(a.benchmark.as_ref().unwrap());
            let sb = benchmark_scores(b.benchmark.as_ref().unwrap());
            let scores: BTreeMap<String, (f64, f64)> = sa.iter().filter_map(|(k, x)| sb.get(k).map(|y| (k.clone(), (*x, *y)))).collect();
            ThroughputComparison { compared: !scores.is_empty(), reason: if scores.is_empty() { "no score metric on both sides".into() } else { "unprofiled benchmark scores of both sides (the first baseline and the first trial)".into() }, scores }
        }
        ("none", _) | (_, "none") => none("no throughput score on one side".into()),
        _ => none(format!(
            "not compared: a profiled run's throughput is diagnostic only ({ka} vs {kb}); record unprofiled benchmark scores on both sides"
        )),
    }
}

pub(super) fn pair_deltas(
    doc: &mut CaptureCompareDoc,
    notes: &mut Vec<String>,
    a: &Evidence,
    b: &Evidence,
    categories: &Categories,
    top: usize,
) {
    match (&a.ranges, &b.ranges) {
        (Some(ra), Some(rb)) => {
            doc.range_deltas = Some(range_deltas(&ra.ranges, &rb.ranges));
            notes.push(
                "range deltas are per label; nested labels overlap: never add deltas of labels at different depths"
                    .into(),
            );
        }
        _ => notes.push(
            "per-range deltas need ranges on both sides (a bundle with kernel_profile.ranges, or an export)".into(),
        ),
    }
    match (&a.kernels, &b.kernels) {
        (Some(ka), Some(kb)) => {
            let (deltas, appeared, vanished) = kernel_deltas(ka, kb, categories, top);
            doc.kernel_deltas = Some(deltas);
            doc.kernels_appeared = Some(appeared);
            doc.kernels_vanished = Some(vanished);
            doc.category_deltas =
                Some(category_deltas(&category_shares(categories, ka), &category_shares(categories, kb)));
            if a.kernels_source != b.kernels_source {
                notes.push(format!(
                    "kernel statistics come from different sources ({} vs {}): a top-N list may omit kernels that exist",
                    a.kernels_source.as_deref().unwrap_or("?"),
                    b.kernels_source.as_deref().unwrap_or("?")
                ));
            }
        }
        _ => notes.push("per-kernel deltas need kernel statistics on both sides".into()),
    }
}
/// Per-label deltas over the union of labels, sorted by impact (desc), then label.
pub fn range_deltas(a: &[RangeRow], b: &[RangeRow]) -> Vec<RangeDelta> {
    let ma: BTreeMap<&str, &RangeRow> = a.iter().map(|r| (r.label.as_str(), r)).collect();
    let mb: BTreeMap<&str, &RangeRow> = b.iter().map(|r| (r.label.as_str(), r)).collect();
    let labels: BTreeSet<&str> = ma.keys().chain(mb.keys()).copied().collect();
    let zero = RangeRow::default();
    let mut out: Vec<RangeDelta> = labels
        .into_iter()
        .map(|l| {
            let ra = ma.get(l).copied().unwrap_or(&zero);
            let rb = mb.get(l).copied().unwrap_or(&zero);
            let present = match (ma.contains_key(l), mb.contains_key(l)) {
                (true, true) => "both",
                (true, false) => "a_only",
                _ => "b_only",
            };
            let per = |r: &RangeRow| if r.occurrences > 0 { r.host_wall_time_ns / r.occurrences } else { 0 };
            let wall = Delta::new(ra.host_wall_time_ns, rb.host_wall_time_ns);
            let busy = Delta::new(ra.kernel_busy_union_ns, rb.kernel_busy_union_ns);
            RangeDelta {
                label: l.to_string(),
                present: present.into(),
                impact_ns: wall.delta.abs() + busy.delta.abs(),
                occurrences: Delta::new(ra.occurrences, rb.occurrences),
                host_wall_time_ns: wall,
                wall_ns_per_occurrence: Delta::new(per(ra), per(rb)),
                host_range_kernel_coverage_ns: Delta::new(
                    ra.host_range_kernel_coverage_ns,
                    rb.host_range_kernel_coverage_ns,
                ),
                kernel_busy_union_ns: busy,
                gpu_idle_within_kernel_span_ns: Delta::new(
                    ra.gpu_idle_within_kernel_span_ns,
                    rb.gpu_idle_within_kernel_span_ns,
                ),
                uncovered_host_time_ns: Delta::new(ra.uncovered_host_time_ns, rb.uncovered_host_time_ns),
                kernels: Delta::new(ra.kernels, rb.kernels),
                runtime_calls: Delta::new(ra.runtime_calls, rb.runtime_calls),
            }
        })
        .collect();
    out.sort_by(|x, y| y.impact_ns.cmp(&x.impact_ns).then_with(|| x.label.cmp(&y.label)));
    out
}

/// Kernel deltas (names on both sides, sorted by impact), kernels that appeared and vanished (by time).
pub fn kernel_deltas(
    a: &[KernelStat],
    b: &[KernelStat],
    categories: &Categories,
    top: usize,
) -> (Vec<KernelDelta>, Vec<KernelOnly>, Vec<KernelOnly>) {
    let sum = |ks: &[KernelStat]| {
        let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for k in ks {
            let e = m.entry(k.name.clone()).or_default();
            e.0 += k.total_time_ns;
            e.1 += k.instances;
        }
        m
    };
    let (ma, mb) = (sum(a), sum(b));
    let mut deltas = Vec::new();
    let mut vanished = Vec::new();
    let mut appeared = Vec::new();
    for (name, &(ta, ia)) in &ma {
        match mb.get(name) {
            Some(&(tb, ib)) => {
                let mean = |t: i64, i: i64| if i > 0 { t / i } else { 0 };
                let total = Delta::new(ta, tb);
                deltas.push(KernelDelta {
                    name: name.clone(),
                    category: categories.categorize(name).to_string(),
                    impact_ns: total.delta.abs(),
                    total_time_ns: total,
                    instances: Delta::new(ia, ib),
                    mean_ns: Delta::new(mean(ta, ia), mean(tb, ib)),
                });
            }
            None => vanished.push(KernelOnly {
                name: name.clone(),
                category: categories.categorize(name).into(),
                total_time_ns: ta,
                instances: ia,
            }),
        }
    }
    for (name, &(tb, ib)) in &mb {
        if !ma.contains_key(name) {
            appeared.push(KernelOnly {
                name: name.clone(),
                category: categories.categorize(name).into(),
                total_time_ns: tb,
                instances: ib,
            });
        }
    }
    deltas.sort_by(|x, y| y.impact_ns.cmp(&x.impact_ns).then_with(|| x.name.cmp(&y.name)));
    if top > 0 {
        deltas.truncate(top);
    }
    let by_time =
        |x: &KernelOnly, y: &KernelOnly| y.total_time_ns.cmp(&x.total_time_ns).then_with(|| x.name.cmp(&y.name));
    appeared.sort_by(by_time);
    vanished.sort_by(by_time);
    (deltas, appeared, vanished)
}

fn category_deltas(a: &[CategoryShare], b: &[CategoryShare]) -> Vec<CategoryDelta> {
    let cats: BTreeSet<&str> = a.iter().chain(b.iter()).map(|c| c.category.as_str()).collect();
    let find = |l: &[CategoryShare], c: &str| {
        l.iter().find(|x| x.category == c).map(|x| (x.total_time_ns, x.share)).unwrap_or((0, 0.0))
    };
    let mut out: Vec<CategoryDelta> = cats
        .into_iter()
        .map(|c| {
            let (ta, sa) = find(a, c);
            let (tb, sb) = find(b, c);
            CategoryDelta { category: c.to_string(), total_time_ns: Delta::new(ta, tb), share_a: sa, share_b: sb }
        })
        .collect();
    out.sort_by(|x, y| {
        y.total_time_ns.delta.abs().cmp(&x.total_time_ns.delta.abs()).then_with(|| x.category.cmp(&y.category))
    });
    out
}
