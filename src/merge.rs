//! Merging runs that are each sorted: the device tables are read in parallel rowid chunks, each sorted by
//! start as nsys writes it, and the analyses sweep their rows in start order without concatenating them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The positions `(run, index)` of the items of runs each sorted by key, in key order: a k-way merge (one run
/// is read straight through). Items of equal key come in run order, and in their run's order: a stable
/// merge. `key(run, i)` is the key of the `i`-th item of `run`, None past its end.
pub struct MergeByKey<F> {
    pos: Vec<usize>,
    /// `(key, run)` of the next item of each run but the one being read ([`MergeByKey::cur`]).
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    key: F,
    /// The run being read straight through, and the least `(key, run)` of the others, which its items may not
    /// pass: the runs of a device table are its rowid chunks, one after the other in time, so the heap is
    /// touched where the runs interleave, not at every item.
    cur: Option<(usize, Option<(i64, usize)>)>,
}

impl<F: Fn(usize, usize) -> Option<i64>> MergeByKey<F> {
    pub fn new(runs: usize, key: F) -> MergeByKey<F> {
        let heap = (0..runs).filter_map(|r| Some(Reverse((key(r, 0)?, r)))).collect();
        MergeByKey { pos: vec![0; runs], heap, key, cur: None }
    }
}

impl<F: Fn(usize, usize) -> Option<i64>> Iterator for MergeByKey<F> {
    type Item = (usize, usize);
    fn next(&mut self) -> Option<(usize, usize)> {
        if let Some((r, bound)) = self.cur.take() {
            let i = self.pos[r];
            if let Some(k) = (self.key)(r, i) {
                // ties go to the lower run: (key, run) order, as the heap's
                if bound.is_none_or(|b| (k, r) < b) {
                    self.pos[r] += 1;
                    self.cur = Some((r, bound));
                    return Some((r, i));
                }
                self.heap.push(Reverse((k, r)));
            }
        }
        let Reverse((_, r)) = self.heap.pop()?;
        self.cur = Some((r, self.heap.peek().map(|t| t.0)));
        let i = self.pos[r];
        self.pos[r] += 1;
        Some((r, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge is the stable sort of the concatenation, on random runs with many equal keys, empty runs
    /// included.
    #[test]
    fn merge_is_the_stable_sort_of_the_runs() {
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..200 {
            let runs: Vec<Vec<(i64, i64)>> = (0..next(6))
                .map(|_| {
                    let mut r: Vec<(i64, i64)> = (0..next(40)).map(|_| (next(25), next(i64::MAX))).collect();
                    r.sort_by_key(|p| p.0);
                    r
                })
                .collect();
            let mut want: Vec<((i64, i64), usize)> =
                runs.iter().enumerate().flat_map(|(i, r)| r.iter().map(move |&p| (p, i))).collect();
            want.sort_by_key(|(p, _)| p.0);
            let got: Vec<_> =
                MergeByKey::new(runs.len(), |r, i| runs[r].get(i).map(|p| p.0)).map(|(r, i)| (runs[r][i], r)).collect();
            assert_eq!(got, want);
        }
    }

    /// Runs one after the other in key order (a table's rowid chunks), touching or overlapping at their ends
    /// and given in any order: the merge is still the stable sort.
    #[test]
    fn consecutive_runs_merge_as_the_stable_sort() {
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
        for _ in 0..300 {
            let n = 1 + next(5) as usize;
            let mut runs: Vec<Vec<i64>> = (0..n)
                .map(|r| {
                    let lo = r as i64 * 20 - next(4);
                    let mut v: Vec<i64> = (0..next(30)).map(|_| lo + next(24)).collect();
                    v.sort_unstable();
                    v
                })
                .collect();
            runs.rotate_left(next(n as i64) as usize);
            let mut want: Vec<(i64, usize)> =
                runs.iter().enumerate().flat_map(|(r, v)| v.iter().map(move |&k| (k, r))).collect();
            want.sort_by_key(|p| p.0);
            let got: Vec<(i64, usize)> =
                MergeByKey::new(runs.len(), |r, i| runs[r].get(i).copied()).map(|(r, i)| (runs[r][i], r)).collect();
            assert_eq!(got, want);
        }
    }
}
