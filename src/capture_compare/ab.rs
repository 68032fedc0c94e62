//! A/B statistics: per stable range label, the per-occurrence distributions of baseline and trial captures,
//! the relative change of the median with a seeded two-level bootstrap confidence interval, and a verdict.
//!
//! Method (docs/compare-report.md, "A/B statistics"): for each label and metric (host wall, kernel busy union,
//! GPU idle within the kernel span) the estimate is `median(trial) / median(baseline) − 1` over the pooled
//! occurrences of each side. The interval is a percentile bootstrap that resamples at two levels, as the data
//! were produced: first the captures of a side (with replacement), then the occurrences inside each drawn
//! capture (with replacement). With one capture per side it only covers within-run noise (a note says so).
//! The generator is SplitMix64 seeded with `--seed` (default 1): the same inputs give the same interval.
//! Verdict of a metric: `slower` when the whole interval lies above 0, `faster` when it lies below 0,
//! `no significant change` otherwise (and when either side has fewer than `MIN_OCCURRENCES` occurrences).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::evidence::{occurrences_of, Occ};

/// The per-occurrence values of one label in one capture, in time order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Series {
    pub host_wall_ns: Vec<i64>,
    pub kernel_busy_union_ns: Vec<i64>,
    pub gpu_idle_within_kernel_span_ns: Vec<i64>,
}

impl Series {
    pub fn len(&self) -> usize {
        self.host_wall_ns.len()
    }
    pub fn is_empty(&self) -> bool {
        self.host_wall_ns.is_empty()
    }
    fn metric(&self, m: Metric) -> &[i64] {
        match m {
            Metric::HostWall => &self.host_wall_ns,
            Metric::KernelBusy => &self.kernel_busy_union_ns,
            Metric::GpuIdle => &self.gpu_idle_within_kernel_span_ns,
        }
    }
}

/// Group occurrences by label (time order kept).
pub fn series_by_label(occ: &[Occ]) -> BTreeMap<String, Series> {
    let mut sorted: Vec<&Occ> = occ.iter().collect();
    sorted.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.label.cmp(&b.label)));
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for o in sorted {
        let s = out.entry(o.label.clone()).or_default();
        s.host_wall_ns.push(o.host_wall_ns);
        s.kernel_busy_union_ns.push(o.kernel_busy_union_ns);
        s.gpu_idle_within_kernel_span_ns.push(o.gpu_idle_within_kernel_span_ns);
    }
    out
}

/// The three compared quantities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    HostWall,
    KernelBusy,
    GpuIdle,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::HostWall, Metric::KernelBusy, Metric::GpuIdle];
    pub fn name(self) -> &'static str {
        match self {
            Metric::HostWall => "host_wall",
            Metric::KernelBusy => "kernel_busy_union",
            Metric::GpuIdle => "gpu_idle_within_kernel_span",
        }
    }
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Fewer occurrences than this on either side: no verdict other than `no significant change`.
pub const MIN_OCCURRENCES: usize = 5;

/// Bootstrap settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbSettings {
    /// Bootstrap resamples (≥ 100).
    pub resamples: usize,
    pub seed: u64,
    /// Two-sided confidence level, e.g. 0.95.
    pub confidence: f64,
}

impl Default for AbSettings {
    fn default() -> Self {
        AbSettings { resamples: 2000, seed: 1, confidence: 0.95 }
    }
}

/// median, p90, p99 (nearest rank) of one side's pooled occurrences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Distribution {
    pub n: usize,
    pub median_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
}

/// One metric of one label: both distributions, the relative change of the median and its interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MetricChange {
    /// `host_wall`, `kernel_busy_union` or `gpu_idle_within_kernel_span`.
    pub metric: String,
    pub baseline: Distribution,
    pub trial: Distribution,
    /// `median(trial) / median(baseline) − 1`; null when the baseline median is 0.
    pub relative_change: Option<f64>,
    /// The bootstrap percentile interval of `relative_change` at `confidence`; null when not measurable.
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// `slower`, `faster`, `no significant change`, or `not measurable` (baseline median 0).
    pub verdict: String,
}

/// Per-label result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LabelChange {
    pub label: String,
    /// Captures of each side that contain the label.
    pub baseline_captures: usize,
    pub trial_captures: usize,
    /// The verdict of the chosen metric (`--metric`, default host_wall).
    pub verdict: String,
    pub metrics: Vec<MetricChange>,
    /// Fewer than MIN_OCCURRENCES occurrences on a side: the verdict cannot say more than "no significant change".
    pub too_few_occurrences: bool,
}

/// SplitMix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 11) as u128 * n as u128) >> 53) as usize
    }
}

/// Nearest-rank quantile of sorted values (q in (0, 1]); the median is the lower middle for even n.
fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median_of(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let k = (v.len() - 1) / 2;
    *v.select_nth_unstable(k).1
}

pub fn distribution(values: &[i64]) -> Distribution {
    let mut s = values.to_vec();
    s.sort_unstable();
    Distribution { n: s.len(), median_ns: quantile(&s, 0.5), p90_ns: quantile(&s, 0.9), p99_ns: quantile(&s, 0.99) }
}

fn pooled(series: &[&Series], m: Metric) -> Vec<i64> {
    series.iter().flat_map(|s| s.metric(m).iter().copied()).collect()
}

/// Compare one label: `base` and `trial` hold the label's series of each capture that has it.
pub fn compare_label(
    label: &str,
    base: &[&Series],
    trial: &[&Series],
    settings: &AbSettings,
    chosen: Metric,
) -> LabelChange {
    // a per-label seed: the same label gets the same stream whatever other labels exist
    let mut h: u64 = settings.seed ^ 0xcbf29ce484222325;
    for b in label.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    let mut rng = Rng(h);
    let nb: usize = base.iter().map(|s| s.len()).sum();
    let nt: usize = trial.iter().map(|s| s.len()).sum();
    let too_few = nb < MIN_OCCURRENCES || nt < MIN_OCCURRENCES;
    // bootstrap: the same resampled occurrences for all three metrics
    let mut boot: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let med_b: Vec<i64> = Metric::ALL.iter().map(|m| median_of(&mut pooled(base, *m))).collect();
    if !too_few {
        let mut bufs: [[Vec<i64>; 3]; 2] = Default::default();
        for _ in 0..settings.resamples {
            for (side, series) in [base, trial].into_iter().enumerate() {
                for b in bufs[side].iter_mut() {
                    b.clear();
                }
                for _ in 0..series.len() {
                    let s = series[rng.below(series.len())];
                    for _ in 0..s.len() {
                        let i = rng.below(s.len());
                        bufs[side][0].push(s.host_wall_ns[i]);
                        bufs[side][1].push(s.kernel_busy_union_ns[i]);
                        bufs[side][2].push(s.gpu_idle_within_kernel_span_ns[i]);
                    }
                }
            }
            for k in 0..3 {
                let (b, t) = bufs.split_at_mut(1);
                let mb = median_of(&mut b[0][k]);
                let mt = median_of(&mut t[0][k]);
                if mb > 0 {
                    boot[k].push(mt as f64 / mb as f64 - 1.0);
                }
            }
        }
    }
    let alpha = (1.0 - settings.confidence) / 2.0;
    let metrics: Vec<MetricChange> = Metric::ALL
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let db = distribution(&pooled(base, *m));
            let dt = distribution(&pooled(trial, *m));
            let mt = median_of(&mut pooled(trial, *m));
            let rel = (med_b[k] > 0).then(|| mt as f64 / med_b[k] as f64 - 1.0);
            let (lo, hi) = if too_few || rel.is_none() || boot[k].len() < settings.resamples / 2 {
                (None, None)
            } else {
                let v = &mut boot[k];
                v.sort_by(|a, b| a.total_cmp(b));
                let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
                (Some(at(alpha)), Some(at(1.0 - alpha)))
            };
            let verdict = match (rel, lo, hi) {
                (None, _, _) => "not measurable",
                (_, Some(l), _) if l > 0.0 => "slower",
                (_, _, Some(h)) if h < 0.0 => "faster",
                _ => "no significant change",
            };
            MetricChange {
                metric: m.name().into(),
                baseline: db,
                trial: dt,
                relative_change: rel,
                ci_low: lo,
                ci_high: hi,
                verdict: verdict.into(),
            }
        })
        .collect();
    let chosen_verdict =
        metrics.iter().find(|c| c.metric == chosen.name()).map(|c| c.verdict.clone()).unwrap_or_default();
    LabelChange {
        label: label.to_string(),
        baseline_captures: base.len(),
        trial_captures: trial.len(),
        verdict: if chosen_verdict == "not measurable" { "no significant change".into() } else { chosen_verdict },
        metrics,
        too_few_occurrences: too_few,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(v: &[i64]) -> Series {
        Series {
            host_wall_ns: v.to_vec(),
            kernel_busy_union_ns: v.to_vec(),
            gpu_idle_within_kernel_span_ns: vec![0; v.len()],
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let d = distribution(&(1..=100).collect::<Vec<i64>>());
        assert_eq!((d.median_ns, d.p90_ns, d.p99_ns), (50, 90, 99));
        assert_eq!(distribution(&[7]).p99_ns, 7);
    }

    #[test]
    fn bootstrap_detects_a_shift_and_not_noise() {
        // deterministic "noise": a spread of values, the trial 10 % longer
        let a: Vec<i64> = (0..200).map(|i| 1000 + (i * 37 % 101)).collect();
        let b: Vec<i64> = a.iter().map(|x| x * 11 / 10).collect();
        let s = AbSettings { resamples: 500, ..Default::default() };
        let c = compare_label("x", &[&series(&a)], &[&series(&b)], &s, Metric::HostWall);
        assert_eq!(c.verdict, "slower");
        let m = &c.metrics[0];
        assert!((m.relative_change.unwrap() - 0.1).abs() < 0.01, "{m:?}");
        assert!(m.ci_low.unwrap() < 0.1 && m.ci_high.unwrap() > 0.09, "{m:?}");
        // the idle metric is all zero: not measurable
        assert_eq!(c.metrics[2].verdict, "not measurable");
        let same = compare_label("x", &[&series(&a)], &[&series(&a)], &s, Metric::HostWall);
        assert_eq!(same.verdict, "no significant change");
        let rev = compare_label("x", &[&series(&b)], &[&series(&a)], &s, Metric::HostWall);
        assert_eq!(rev.verdict, "faster");
        // seeded: the same interval twice
        let again = compare_label("x", &[&series(&a)], &[&series(&b)], &s, Metric::HostWall);
        assert_eq!(again, c);
        // too few occurrences: never a verdict beyond "no significant change"
        let few = compare_label("x", &[&series(&[1, 2])], &[&series(&[10, 20])], &s, Metric::HostWall);
        assert_eq!(few.verdict, "no significant change");
        assert!(few.too_few_occurrences && few.metrics[0].ci_low.is_none());
    }
}
