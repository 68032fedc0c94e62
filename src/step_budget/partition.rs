//! Interval arithmetic of the step budget: the priority partition of a step's wall, unions, queue-depth counts.

use super::*;

/// The counts of small integer values (queue depths): [`dist`] of the values added, without holding them (a
/// depth per device row was 45 MB at 5 M kernels).
#[derive(Debug, Default)]
pub struct DepthCounts {
    /// The least value added.
    lo: i64,
    /// `counts[i]`: how many times `lo + i` was added.
    counts: Vec<u64>,
}

impl DepthCounts {
    pub fn add(&mut self, v: i64) {
        if self.counts.is_empty() {
            self.lo = v;
        } else if v < self.lo {
            let below = usize::try_from(self.lo - v).unwrap_or(usize::MAX);
            self.counts.splice(0..0, std::iter::repeat_n(0, below));
            self.lo = v;
        }
        let i = usize::try_from(v - self.lo).unwrap_or(usize::MAX);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
    }

    /// [`dist`] of the values added: the same nearest ranks, read off the cumulative counts.
    pub fn dist(&self) -> Dist {
        let n: u64 = self.counts.iter().sum();
        let Some(top) = self.counts.iter().rposition(|&c| c > 0) else { return Dist::default() };
        let value_at = |rank: usize| {
            let mut seen = 0u64;
            for (i, &c) in self.counts.iter().enumerate() {
                seen += c;
                if seen > rank as u64 {
                    return self.lo + i as i64;
                }
            }
            self.lo + top as i64
        };
        let n = n as usize;
        Dist {
            count: n,
            median: value_at(rank_index(n, 0.5)),
            p90: value_at(rank_index(n, 0.9)),
            p99: value_at(rank_index(n, 0.99)),
            max: self.lo + top as i64,
        }
    }
}

/// Length of the union of intervals (any order, unclipped).
pub fn union_len(mut iv: Vec<(i64, i64)>) -> i64 {
    iv.retain(|(s, e)| e > s);
    device::len(&device::union(iv))
}

/// The priority partition of `[start, end)`: `classes[k]` are the intervals of component k (in priority
/// order); component k gets `|∪_{j≤k} C_j ∩ wall| − |∪_{j<k} C_j ∩ wall|`, the rest is returned last.
///
/// The definition, in one pass per class: the union of the classes so far is kept sorted and disjoint, each
/// class's clipped intervals (by start: a device class comes so, a class that does not is sorted) are merged
/// into it, and the component is how much it grew.
pub fn partition(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> (Vec<i64>, i64) {
    partition_in(start, end, classes, &mut PartitionBuffers::default())
}

/// [`partition`]'s buffers: the union so far, the next one, a class clipped.
#[derive(Debug, Default)]
pub(super) struct PartitionBuffers {
    pub(super) acc: Vec<(i64, i64)>,
    pub(super) next: Vec<(i64, i64)>,
    pub(super) cls: Vec<(i64, i64)>,
}

/// [`partition`] in the buffers given (cleared first).
pub(super) fn partition_in(
    start: i64,
    end: i64,
    classes: &[Vec<(i64, i64)>],
    buf: &mut PartitionBuffers,
) -> (Vec<i64>, i64) {
    let PartitionBuffers { acc, next, cls } = buf;
    acc.clear();
    let mut out = Vec::with_capacity(classes.len());
    let mut covered = 0i64;
    for c in classes {
        cls.clear();
        cls.extend(c.iter().map(|&(s, e)| (s.max(start), e.min(end))).filter(|(s, e)| e > s));
        if !cls.is_sorted_by_key(|iv| iv.0) {
            cls.sort_unstable_by_key(|iv| iv.0);
        }
        merge_union(acc, cls, next);
        std::mem::swap(acc, next);
        let now = device::len(acc);
        out.push(now - covered);
        covered = now;
    }
    (out, (end - start) - covered)
}

/// The union of `a` (sorted, disjoint) and `b` (by start) into `out`, sorted and disjoint: the two lists read
/// by start with two cursors (the union does not depend on the order of equal starts).
pub(super) fn merge_union(a: &[(i64, i64)], b: &[(i64, i64)], out: &mut Vec<(i64, i64)>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    let by_start = std::iter::from_fn(|| {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 <= y.0 => {
                i += 1;
                x
            }
            (Some(x), None) => {
                i += 1;
                x
            }
            (_, Some(y)) => {
                j += 1;
                y
            }
            (None, None) => return None,
        };
        Some(*next)
    });
    device::merge_sorted(by_start, |u| out.push(u));
}

pub(super) fn is_launch(name: &str) -> bool {
    name.contains("Launch")
}
