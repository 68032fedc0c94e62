//! Order statistics (nearest rank) of series of nanoseconds: the distributions step-budget, report and the
//! `--iterations` groups print.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Order statistics (nearest rank) of a series of ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Dist {
    pub count: usize,
    pub median: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

/// The 0-based index of the nearest-rank quantile `q` (in (0, 1]) of `n > 0` sorted values.
pub fn rank_index(n: usize, q: f64) -> usize {
    ((q * n as f64).ceil() as usize).clamp(1, n) - 1
}

/// Order statistics of a series: nearest-rank quantiles, found by selection (a device's millions of gaps or
/// launch latencies need no full sort).
pub fn dist(values: impl IntoIterator<Item = i64>) -> Dist {
    let mut v: Vec<i64> = values.into_iter().collect();
    dist_in(&mut v)
}

/// [`dist`] of the values in `v` (reordered), of any integer type that widens to `i64`.
pub fn dist_in<T: Copy + Ord + Into<i64>>(v: &mut [T]) -> Dist {
    let n = v.len();
    let Some(&max) = v.iter().max() else { return Dist { count: 0, median: 0, p90: 0, p99: 0, max: 0 } };
    // from the highest rank down: a selection leaves the smaller values to its left
    let (i50, i90, i99) = (rank_index(n, 0.5), rank_index(n, 0.9), rank_index(n, 0.99));
    let p99 = *v.select_nth_unstable(i99).1;
    let p90 = *v[..=i99].select_nth_unstable(i90).1;
    let median = *v[..=i90].select_nth_unstable(i50).1;
    Dist { count: n, median: median.into(), p90: p90.into(), p99: p99.into(), max: max.into() }
}

/// A component is the verdict's when its share of all steps' wall reaches this (step-budget's and report's
/// dominance rule; readiness's opaque-step rule asks whether named host time could still reach it).
pub const DOMINANT_SHARE: f64 = 0.5;
