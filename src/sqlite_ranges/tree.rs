//! A static max-segment-tree over the `end` of occurrences sorted by `(thread, start, end desc)`.
//!
//! One query, restricted to an index range `[lo, hi)` (one thread's slice, cut at a start bound): every index
//! whose end is `>= x` (stabbing: which occurrences contain a time point).

pub(crate) struct MaxTree {
    size: usize,
    tree: Vec<i64>,
}

impl MaxTree {
    pub(crate) fn new(ends: &[i64]) -> MaxTree {
        let size = ends.len().next_power_of_two().max(1);
        let mut tree = vec![i64::MIN; 2 * size];
        tree[size..size + ends.len()].copy_from_slice(ends);
        for i in (1..size).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        MaxTree { size, tree }
    }

    /// Push every index in `[lo, hi)` whose value is `>= x` onto `out`, in ascending order.
    pub(crate) fn collect_ge(&self, lo: usize, hi: usize, x: i64, out: &mut Vec<u32>) {
        if lo < hi {
            self.collect(1, 0, self.size, lo, hi, x, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn collect(&self, node: usize, nlo: usize, nhi: usize, lo: usize, hi: usize, x: i64, out: &mut Vec<u32>) {
        if nhi <= lo || hi <= nlo || self.tree[node] < x {
            return;
        }
        if nhi - nlo == 1 {
            out.push(nlo as u32);
            return;
        }
        let mid = (nlo + nhi) / 2;
        self.collect(2 * node, nlo, mid, lo, hi, x, out);
        self.collect(2 * node + 1, mid, nhi, lo, hi, x, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_match_a_naive_scan() {
        let ends = [5i64, 3, 9, -2, 7, 7, 1];
        let t = MaxTree::new(&ends);
        for lo in 0..ends.len() {
            for hi in lo..=ends.len() {
                for x in -3..11 {
                    let mut got = Vec::new();
                    t.collect_ge(lo, hi, x, &mut got);
                    let want: Vec<u32> = (lo..hi).filter(|&i| ends[i] >= x).map(|i| i as u32).collect();
                    assert_eq!(got, want);
                }
            }
        }
    }
}
