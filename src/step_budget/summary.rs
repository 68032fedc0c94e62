//! What the steps add up to: slow steps and warm-up, periodic stalls, the waterfall of the median step, ranks
//! and stragglers, distributions, totals and pacing.

use super::*;

/// The most segments a waterfall keeps.
pub const WATERFALL_SEGMENTS: usize = 4096;

/// How far above the median a step must be to be slow (robust: the median absolute deviation, scaled to a
/// standard deviation by 1.4826, of all steps; warm-up steps barely move it).
pub const OUTLIER_ROBUST_SIGMAS: f64 = 5.0;
/// A slow step is at least this × the median (regular loops have a tiny deviation).
pub const OUTLIER_MIN_RATIO: f64 = 1.25;
/// The warm-up of a rank is at most this many of its first steps (and a tenth of them when more).
pub const WARMUP_MAX_STEPS: usize = 5;

/// The slow steps: wall above `min(factor × median, max(OUTLIER_MIN_RATIO × median, median + 5 σ))`, σ the
/// robust deviation: a stall of 1.6× the median in a regular loop is slow, as is anything beyond the factor.
pub(super) struct Slow {
    pub(super) slow: Vec<bool>,
    pub(super) median: i64,
}

pub(super) fn slow_steps(steps: &[Step], median: i64, factor: f64) -> Slow {
    let mut dev: Vec<i64> = steps.iter().map(|s| (s.wall_ns - median).abs()).collect();
    dev.sort_unstable();
    let mad = if dev.is_empty() { 0 } else { dev[dev.len() / 2] };
    let robust = (median as f64 + OUTLIER_ROBUST_SIGMAS * 1.4826 * mad as f64).max(OUTLIER_MIN_RATIO * median as f64);
    let limit = robust.min(factor * median as f64);
    Slow { slow: steps.iter().map(|s| median > 0 && s.wall_ns as f64 > limit).collect(), median }
}

impl Slow {
    /// `(warm-up, outliers)`: the slow steps at the start of each rank (at most [`WARMUP_MAX_STEPS`], or a tenth
    /// of its steps, each one slow from its first step on) are its warm-up; the other slow steps are outliers.
    pub(super) fn split(&self, steps: &[Step]) -> (Vec<Outlier>, Vec<Outlier>) {
        let mut seen: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
        let per_rank: BTreeMap<usize, usize> = steps.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.rank).or_insert(0) += 1;
            m
        });
        let (mut warm, mut out) = (Vec::new(), Vec::new());
        for (s, &slow) in steps.iter().zip(&self.slow) {
            let (k, leading) = seen.entry(s.rank).or_insert((0, true));
            let max_warm = WARMUP_MAX_STEPS.max(per_rank[&s.rank] / 10);
            let o = Outlier {
                index: s.index,
                start_ns: s.start_ns,
                wall_ns: s.wall_ns,
                ratio_to_median: s.wall_ns as f64 / self.median.max(1) as f64,
            };
            if slow && *leading && *k < max_warm {
                warm.push(o);
            } else {
                *leading = false;
                if slow {
                    out.push(o);
                }
            }
            *k += 1;
        }
        (warm, out)
    }
}

/// A periodic stall: on one rank, at least three outliers whose step numbers (within the rank) step by one
/// period, for at least 80 % of the gaps between them.
pub(super) fn periodic_stall_of(steps: &[Step], outliers: &[Outlier]) -> Option<PeriodicStall> {
    let mut k_of: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for s in steps {
        let c = counts.entry(s.rank).or_insert(0);
        k_of.insert(s.index, (s.rank, *c));
        *c += 1;
    }
    let mut by_rank: BTreeMap<usize, Vec<(usize, &Outlier)>> = BTreeMap::new();
    for o in outliers {
        if let Some(&(r, k)) = k_of.get(&o.index) {
            by_rank.entry(r).or_default().push((k, o));
        }
    }
    let median_wall = |o: &[&Outlier]| {
        let mut v: Vec<f64> = o.iter().map(|o| o.ratio_to_median).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    by_rank.into_iter().find_map(|(rank, list)| {
        if list.len() < 3 {
            return None;
        }
        let gaps: Vec<usize> = list.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let mut freq: BTreeMap<usize, usize> = BTreeMap::new();
        for g in &gaps {
            *freq.entry(*g).or_insert(0) += 1;
        }
        let (&period, &n) = freq.iter().max_by_key(|(g, n)| (**n, std::cmp::Reverse(**g)))?;
        if period < 2 || (n as f64) < 0.8 * gaps.len() as f64 {
            return None;
        }
        let kept: Vec<&Outlier> = list.iter().map(|(_, o)| *o).collect();
        let ratio = median_wall(&kept);
        let mut walls: Vec<i64> = kept.iter().map(|o| o.wall_ns).collect();
        walls.sort_unstable();
        let base = (kept[0].wall_ns as f64 / kept[0].ratio_to_median.max(f64::MIN_POSITIVE)) as i64;
        Some(PeriodicStall {
            period,
            rank,
            first_index: kept[0].index,
            count: kept.len(),
            median_ratio: ratio,
            extra_ns: walls[walls.len() / 2] - base,
        })
    })
}

/// Whether a step is not an outlier: its index looked up in the outliers' indices, sorted (a scan of every
/// outlier per step was 25 M comparisons at 100 k steps and 250 outliers).
pub(super) fn typical_step(outliers: &[Outlier]) -> impl Fn(&&Step) -> bool {
    let mut at: Vec<usize> = outliers.iter().map(|o| o.index).collect();
    at.sort_unstable();
    move |s: &&Step| at.binary_search(&s.index).is_err()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn waterfall_of(
    steps: &[Step],
    outliers: &[Outlier],
    median_wall: i64,
    idx: &[usize],
    a: &sqlite_ranges::Analysis,
    iv: &sqlite_ranges::IntervalTable,
    api: &ApiIds,
    nccl: CommRows<'_>,
    comm_occ: &HashMap<i64, Vec<(i64, i64)>>,
    waits: &HashMap<i64, Vec<(i64, i64)>>,
    tl: &device::Timelines,
) -> Option<Waterfall> {
    let typical = typical_step(outliers);
    let s = steps
        .iter()
        .filter(&typical)
        .find(|s| s.wall_ns == median_wall)
        .or_else(|| steps.iter().filter(&typical).min_by_key(|s| ((s.wall_ns - median_wall).abs(), s.index)))
        .or_else(|| steps.first())?;
    let o = a.occurrences.get(idx[s.index]);
    let hc = host_comm_of(comm_occ, o.global_tid, o.start, o.end);
    let w = gpu_waits_of(waits, tl, o.global_tid, (o.start, o.end), a.occurrences.last_device_end(idx[s.index]));
    let cls = step_classes(&iv[idx[s.index]], api, nccl, &hc, &w);
    let seg = sweep_segments(o.start, o.end, &cls);
    let segments = seg
        .iter()
        .map(|&(k, f, t)| Segment { component: CLASS_COMPONENT[k].to_string(), offset_ns: f - o.start, dur_ns: t - f })
        .collect::<Vec<_>>();
    // merge neighbours that became one component (NCCL kernels, then host comm)
    let mut merged: Vec<Segment> = Vec::with_capacity(segments.len());
    for g in segments {
        match merged.last_mut() {
            Some(l) if l.component == g.component && l.offset_ns + l.dur_ns == g.offset_ns => l.dur_ns += g.dur_ns,
            _ => merged.push(g),
        }
    }
    let truncated = merged.len() > WATERFALL_SEGMENTS;
    merged.truncate(WATERFALL_SEGMENTS);
    let segments = merged;
    let mut cum = 0;
    let bars = PRIORITY
        .iter()
        .map(|n| {
            let ns = s.components.get(n);
            let b = WaterfallBar { component: n.to_string(), ns, cumulative_ns: cum };
            cum += ns;
            b
        })
        .collect();
    Some(Waterfall { index: s.index, start_ns: s.start_ns, wall_ns: s.wall_ns, bars, segments, truncated })
}

pub(super) fn ranks_of(steps: &[Step], rank_pids: &[i64], tl: &device::Timelines) -> (Vec<RankBudget>, Vec<Straggler>) {
    let mut ranks: Vec<RankBudget> = Vec::new();
    let mut per_rank: Vec<Vec<&Step>> = vec![Vec::new(); rank_pids.len()];
    for s in steps {
        per_rank[s.rank].push(s);
    }
    for (r, &pid) in rank_pids.iter().enumerate() {
        let mine: &[&Step] = &per_rank[r];
        let mut devices: Vec<(i64, i64)> =
            tl.devices.iter().filter_map(|d| d.busy_by_pid.get(&pid).map(|&b| (d.device_id, b))).collect();
        devices.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        let device_id = devices.first().map(|d| d.0);
        let (mut comm, mut exposed, mut compute) = (0, 0, 0);
        let (mut kl, mut gl) = (LatencyDist::default(), LatencyDist::default());
        if let Some(d) = tl.devices.iter().find(|d| Some(d.device_id) == device_id) {
            (comm, exposed) = d.comm_of(pid);
            compute = d.compute_busy();
            if let Some(l) = d.launch_by_pid.get(&pid) {
                (kl, gl) = *l;
            }
        }
        let mut distributions = distributions_of(mine.iter().copied(), false);
        distributions.insert("comm_busy".into(), dist(mine.iter().map(|s| s.comm_busy_ns)));
        let totals = totals_of(mine.iter().copied());
        let mut ds: Vec<i64> = devices.iter().map(|d| d.0).collect();
        ds.sort_unstable();
        ranks.push(RankBudget {
            rank: r,
            global_pid: pid,
            pid: crate::export::pid_of(pid),
            device_id,
            devices: ds,
            steps: mine.len(),
            first_index: mine.first().map(|s| s.index),
            distributions,
            totals,
            comm_busy_ns: comm,
            exposed_comm_ns: exposed,
            compute_busy_ns: compute,
            straggler_steps: 0,
            pacing: pacing_of(mine.iter().copied()),
            kernel_launch: kl,
            graph_launch: gl,
        });
    }
    let mut stragglers = Vec::new();
    if rank_pids.len() >= 2 {
        let k_max = per_rank.iter().map(|v| v.len()).min().unwrap_or(0);
        for k in 0..k_max {
            let row: Vec<&Step> = per_rank.iter().map(|v| v[k]).collect();
            let end = |s: &Step| s.start_ns + s.wall_ns;
            let wait = |s: &Step| s.comm_busy_ns + s.host_comm_ns;
            let any_comm = row.iter().any(|s| wait(s) > 0);
            let (rank, rule, lead) = if any_comm {
                let r = (0..row.len()).min_by_key(|&r| (wait(row[r]), std::cmp::Reverse(end(row[r])), r)).unwrap();
                let mx = row.iter().map(|s| wait(s)).max().unwrap();
                (r, "least_comm", mx - wait(row[r]))
            } else {
                let r = (0..row.len()).max_by_key(|&r| (end(row[r]), std::cmp::Reverse(r))).unwrap();
                let mn = row.iter().map(|s| end(s)).min().unwrap();
                (r, "last_end", end(row[r]) - mn)
            };
            ranks[rank].straggler_steps += 1;
            stragglers.push(Straggler {
                occurrence: k,
                step_indexes: row.iter().map(|s| s.index).collect(),
                rank,
                rule: rule.into(),
                lead_ns: lead,
            });
        }
    }
    (ranks, stragglers)
}

pub(super) fn distributions_of<'a>(steps: impl Iterator<Item = &'a Step>, all: bool) -> BTreeMap<String, Dist> {
    // the values of every distribution gathered in one pass over the steps (a pass per distribution read each
    // step's cache lines eleven times over: 100 k steps of ~490 bytes)
    const WALL: usize = Components::NAMES.len();
    let (busy, idle) = (WALL + 1, WALL + 2);
    let n = steps.size_hint().0;
    let mut cols: [Vec<i64>; WALL + 3] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut gaps: Vec<i64> = Vec::new();
    for s in steps {
        for (col, v) in cols.iter_mut().zip(s.components.values()) {
            col.push(v);
        }
        cols[WALL].push(s.wall_ns);
        cols[busy].push(s.gpu_busy_ns);
        if all {
            cols[idle].push(s.gpu_idle_in_span_ns);
            gaps.extend(s.host_gap_to_next_ns);
        }
    }
    let ds = cols.map(dist);
    let mut d = BTreeMap::new();
    d.insert("wall".to_string(), ds[WALL]);
    d.insert("gpu_busy".to_string(), ds[busy]);
    if all {
        d.insert("gpu_idle_in_span".to_string(), ds[idle]);
        d.insert("host_gap_to_next".to_string(), dist(gaps));
    }
    for (k, name) in Components::NAMES.iter().enumerate() {
        d.insert(name.to_string(), ds[k]);
    }
    d
}

/// The wall and each component summed over `steps`, in one pass.
pub(super) fn totals_of<'a>(steps: impl IntoIterator<Item = &'a Step>) -> BTreeMap<String, i64> {
    let (mut wall, mut sums) = (0i64, [0i64; Components::NAMES.len()]);
    for s in steps {
        wall += s.wall_ns;
        for (t, v) in sums.iter_mut().zip(s.components.values()) {
            *t += v;
        }
    }
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    totals.insert("wall".into(), wall);
    for (name, t) in Components::NAMES.iter().zip(sums) {
        totals.insert(name.to_string(), t);
    }
    totals
}

/// Start-to-start intervals of consecutive steps of the same rank (all ranks' intervals together).
pub(super) fn pacing_of<'a>(steps: impl Iterator<Item = &'a Step>) -> Option<Pacing> {
    let mut last: BTreeMap<usize, i64> = BTreeMap::new();
    let mut iv: Vec<i64> = Vec::new();
    for s in steps {
        if let Some(p) = last.insert(s.rank, s.start_ns) {
            iv.push(s.start_ns - p);
        }
    }
    if iv.is_empty() {
        return None;
    }
    let d = dist(iv.iter().copied());
    let n = iv.len() as f64;
    let mean = iv.iter().map(|&x| x as f64).sum::<f64>() / n;
    let cv = (iv.len() >= 2 && mean > 0.0)
        .then(|| (iv.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / mean);
    let ratio = (d.median > 0).then(|| d.p90 as f64 / d.median as f64);
    Some(Pacing {
        intervals: d,
        min: *iv.iter().min().unwrap(),
        mean_ns: mean,
        cv,
        p90_over_median: ratio,
        regular: ratio.is_some_and(|r| r <= 1.25),
    })
}
