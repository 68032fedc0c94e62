//! Values kept beside a packed vector: the few entries whose value does not fit the packed form (a duration of
//! 2^32 ns or more, an id beyond 32 bits), as `(index, value)` sorted by index, the packed entry holding a
//! sentinel instead. One lookup for every packed row type (device rows, idle pieces, G5's intervals, kept
//! runtime calls, kernel name ids).

/// The value kept beside for entry `i`; `beside` is sorted by index and holds `i` (its packed entry says so).
#[inline]
pub fn at<T: Copy>(beside: &[(usize, T)], i: usize) -> T {
    beside[beside.partition_point(|&(j, _)| j < i)].1
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_each_kept_value_by_index() {
        let beside = [(0usize, -1i64), (3, 30), (4, 40), (9, 90)];
        for &(i, v) in &beside {
            assert_eq!(super::at(&beside, i), v);
        }
    }
}
