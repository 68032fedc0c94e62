//! The document is a summary whose size does not grow with the steps (issue #40): the per-step rows stay in
//! memory ([`StepBudgetDoc::steps`], printed by `step-budget --steps`), and every list that grows with the
//! steps keeps at most a fixed number of entries beside its count ([`summarize`]).

use super::*;

/// The most outliers, warm-up steps and stragglers the document lists (each list has its count beside it).
pub const MAX_LISTED: usize = 100;
/// The most step groups (shapes, and `iterations.groups`) the document lists.
pub const MAX_GROUPS: usize = 64;

/// Σ over the steps set apart from the typical ones (warm-up and outliers, all of them, listed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApartSums {
    /// Warm-up steps and outliers.
    pub steps: usize,
    /// Σ of their wall.
    pub wall_ns: i64,
    /// Σ of their GPU busy (`gpu_busy_ns`).
    pub gpu_busy_ns: i64,
}

/// At most `cap` of `list`, in its order: those with the largest `key`, ties to the earlier one.
pub fn keep_largest<T>(list: Vec<T>, cap: usize, key: impl Fn(&T) -> f64) -> Vec<T> {
    if list.len() <= cap {
        return list;
    }
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by(|&a, &b| key(&list[b]).total_cmp(&key(&list[a])).then(a.cmp(&b)));
    let mut keep = vec![false; list.len()];
    for &k in &order[..cap] {
        keep[k] = true;
    }
    list.into_iter().zip(keep).filter_map(|(x, k)| k.then_some(x)).collect()
}

/// The outliers (or warm-up steps) listed: at most [`MAX_LISTED`], the largest `ratio_to_median`, in index order.
pub fn listed_outliers(list: Vec<Outlier>) -> Vec<Outlier> {
    keep_largest(list, MAX_LISTED, |o| o.ratio_to_median)
}

/// The stragglers listed: at most [`MAX_LISTED`], the largest `lead_ns`, in occurrence order.
pub fn listed_stragglers(list: Vec<Straggler>) -> Vec<Straggler> {
    keep_largest(list, MAX_LISTED, |s| s.lead_ns as f64)
}

/// Turn a document holding every outlier, warm-up step, straggler and group into the summary: mark each step
/// (`outlier`, `warmup`), sum the steps set apart, count each list and keep its bounded part.
pub(super) fn summarize(doc: &mut StepBudgetDoc) {
    for (list, outlier) in [(&doc.outliers, true), (&doc.warmup, false)] {
        for o in list {
            // steps are in index order: index k is steps[k]
            if let Some(s) = doc.steps.get_mut(o.index).filter(|s| s.index == o.index) {
                if outlier {
                    s.outlier = true;
                } else {
                    s.warmup = true;
                }
            }
        }
    }
    let apart = doc.steps.iter().filter(|s| s.outlier || s.warmup).fold(ApartSums::default(), |mut a, s| {
        a.steps += 1;
        a.wall_ns += s.wall_ns;
        a.gpu_busy_ns += s.gpu_busy_ns;
        a
    });
    doc.set_apart = (apart.steps > 0).then_some(apart);
    doc.step_count = doc.steps.len();
    doc.outlier_count = doc.outliers.len();
    doc.outliers = listed_outliers(std::mem::take(&mut doc.outliers));
    doc.warmup_count = doc.warmup.len();
    doc.warmup = listed_outliers(std::mem::take(&mut doc.warmup));
    doc.straggler_count = doc.stragglers.len();
    doc.stragglers = listed_stragglers(std::mem::take(&mut doc.stragglers));
    doc.group_count = doc.groups.len();
    doc.groups.truncate(MAX_GROUPS);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outlier(index: usize, ratio: f64) -> Outlier {
        Outlier { index, start_ns: index as i64 * 10, wall_ns: (ratio * 100.0) as i64, ratio_to_median: ratio }
    }

    /// More outliers than the cap: the count is every one, the listed are the largest ratios in index order.
    #[test]
    fn more_outliers_than_listed() {
        // 250 outliers: ratio 2 + (index * 37 % 250) / 100, all distinct; two ties at the cut resolved by index
        let n = 250;
        let mut list: Vec<Outlier> = (0..n).map(|i| outlier(i * 3, 2.0 + ((i * 37) % n) as f64 / 100.0)).collect();
        // a tie with the smallest kept ratio, earlier and later than it
        let cut = 2.0 + (n - MAX_LISTED) as f64 / 100.0;
        list.push(outlier(10_000, cut));
        list.insert(0, outlier(0, cut));
        list[1].index = 1; // keep the indexes increasing after the insert
        let kept = listed_outliers(list.clone());
        assert_eq!(kept.len(), MAX_LISTED);
        assert!(kept.windows(2).all(|w| w[0].index < w[1].index), "index order");
        let min_kept = kept.iter().map(|o| o.ratio_to_median).fold(f64::INFINITY, f64::min);
        let left_out_max = list
            .iter()
            .filter(|o| !kept.iter().any(|k| k.index == o.index))
            .map(|o| o.ratio_to_median)
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(min_kept >= left_out_max, "kept down to {min_kept}, left out up to {left_out_max}");
        // the earlier of the tied ones is kept, the later not
        assert!(kept.iter().any(|o| o.index == 0));
        assert!(!kept.iter().any(|o| o.index == 10_000));
        // within the cap nothing changes
        assert_eq!(listed_outliers(list[..MAX_LISTED].to_vec()), list[..MAX_LISTED].to_vec());
    }

    #[test]
    fn summarize_counts_marks_and_bounds() {
        let step = |index: usize, wall: i64| Step {
            index,
            start_ns: index as i64 * 1000,
            wall_ns: wall,
            components: Components { unattributed: wall, ..Default::default() },
            global_tid: 1,
            kernels: (index % 70) as u64,
            memcpys: 0,
            memsets: 0,
            graph_traces: 0,
            runtime_calls: 0,
            graph_launches: 0,
            gpu_busy_ns: 7,
            gpu_span_ns: 0,
            gpu_idle_in_span_ns: 0,
            first_device_start_ns: None,
            last_device_end_ns: None,
            host_gap_to_next_ns: None,
            rank: 0,
            comm_busy_ns: 0,
            host_comm_ns: 0,
            idle: IdleSplit::default(),
            geometry: None,
            outlier: false,
            warmup: false,
        };
        // 1000 steps: 0 and 1 warm-up, every 3rd after that an outlier (333 of them)
        let steps: Vec<Step> =
            (0..1000).map(|i| step(i, if i < 2 || (i > 1 && i % 3 == 0) { 500 } else { 100 })).collect();
        let slow: Vec<Outlier> =
            steps.iter().filter(|s| s.wall_ns > 100).map(|s| outlier(s.index, s.wall_ns as f64 / 100.0)).collect();
        let (warm, out): (Vec<Outlier>, Vec<Outlier>) = slow.into_iter().partition(|o| o.index < 2);
        let mut doc = device_only_of(String::new(), &device::Timelines::default(), None, &Default::default(), vec![]);
        doc.groups = groups_of(&steps);
        doc.steps = steps;
        doc.outliers = out;
        doc.warmup = warm;
        summarize(&mut doc);
        assert_eq!((doc.step_count, doc.outlier_count, doc.warmup_count), (1000, 333, 2));
        assert_eq!((doc.outliers.len(), doc.warmup.len()), (MAX_LISTED, 2));
        assert_eq!(doc.set_apart, Some(ApartSums { steps: 335, wall_ns: 335 * 500, gpu_busy_ns: 335 * 7 }));
        assert_eq!(doc.steps.iter().filter(|s| s.outlier).count(), 333);
        assert!(doc.steps[0].warmup && !doc.steps[0].outlier && doc.steps[3].outlier && !doc.steps[4].outlier);
        assert_eq!((doc.group_count, doc.groups.len()), (70, MAX_GROUPS));
        let v = serde_json::to_value(&doc).unwrap();
        assert!(v.get("steps").is_none());
        assert_eq!(v["outliers"].as_array().unwrap().len(), MAX_LISTED);
    }
}
