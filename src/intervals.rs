//! Interval arithmetic on `(start, end)` pairs of nanoseconds: unions, lengths, overlaps. A utility below every
//! analysis (the step budget's device timelines and readiness's opaque share both measure with it).

/// Union of intervals already sorted by start.
pub fn union_sorted(iv: impl Iterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    // the iterator's upper bound, reserved once: untouched pages cost no memory and no copy while growing
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(iv.size_hint().1.unwrap_or(0));
    merge_sorted(iv, |u| out.push(u));
    out.shrink_to_fit();
    out
}

/// Each interval of the union of intervals already sorted by start, in order, given to `emit` once complete.
pub fn merge_sorted(iv: impl Iterator<Item = (i64, i64)>, mut emit: impl FnMut((i64, i64))) {
    let mut cur: Option<(i64, i64)> = None;
    for (s, e) in iv {
        match cur.as_mut() {
            Some(c) if s <= c.1 => c.1 = c.1.max(e),
            _ => {
                if let Some(done) = cur.replace((s, e)) {
                    emit(done);
                }
            }
        }
    }
    if let Some(done) = cur {
        emit(done);
    }
}

/// Union of intervals, sorted and disjoint.
pub fn union(mut iv: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    iv.sort_unstable();
    union_sorted(iv.into_iter())
}

/// Length of sorted disjoint intervals.
pub fn len(u: &[(i64, i64)]) -> i64 {
    u.iter().map(|(a, b)| b - a).sum()
}

/// `|A ∩ B|` of two sorted disjoint lists.
pub fn overlap(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut t) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            t += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    t
}
