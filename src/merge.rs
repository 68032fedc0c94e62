//! Merging runs that are each sorted: the device tables are read in parallel rowid chunks, each sorted by
//! start as nsys writes it, and the analyses sweep their rows in start order without concatenating them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The positions `(run, index)` of the items of runs each sorted by key, in key order: a k-way merge (one run
/// is read straight through). Items of equal key come in run order, and in their run's order: a stable
/// merge. `key(run, i)` is the key of the `i`-th item of `run`, None past its end.
pub struct MergeByKey<F> {
    pos: Vec<usize>,
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    key: F,
}

impl<F: Fn(usize, usize) -> Option<i64>> MergeByKey<F> {
    pub fn new(runs: usize, key: F) -> MergeByKey<F> {
        let heap = (0..runs).filter_map(|r| Some(Reverse((key(r, 0)?, r)))).collect();
        MergeByKey { pos: vec![0; runs], heap, key }
    }
}

impl<F: Fn(usize, usize) -> Option<i64>> Iterator for MergeByKey<F> {
    type Item = (usize, usize);
    fn next(&mut self) -> Option<(usize, usize)> {
        let mut top = self.heap.peek_mut()?;
        let r = top.0 .1;
        let i = self.pos[r];
        self.pos[r] += 1;
        match (self.key)(r, i + 1) {
            Some(k) => top.0 .0 = k,
            None => {
                std::collections::binary_heap::PeekMut::pop(top);
            }
        }
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
}
