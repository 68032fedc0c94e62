//! The engine step label of a capture: one rule for every tool that needs it — gate-check's decode gates (G6,
//! G7), step-budget, report's primary range, capture-compare's iteration label, the `--iterations` windows.
//!
//! A framework's own ranges ([`crate::framework`]: `aten::mm`, `TSL:XlaModule:…`, `NCCL:…`) are never the step,
//! nor are per-request labels (several labels that differ only in digit runs, such as `request.1`,
//! `request.2`). Among the others, the first rule that finds a label decides ([`StepRule`]):
//!
//! 1. `iteration_label`: a label whose text contains `iteration`, `step` or `decode` (case-insensitive) and not
//!    `prefill`:
//!    - when some of them carry device work (an occurrence with correlated KERNEL/MEMCPY/MEMSET/GRAPH_TRACE
//!      rows), only those, ranked by the occurrences carrying device work, then the longer host wall, then byte
//!      order: an engine step launches GPU work, and a CPU-only range whose name says `decode` (an API process's
//!      `detokenizer.decode`, measured in `fixtures/nsys-2025.3.1/engine_spawn`: 800 occurrences against the
//!      engine's 200 `EngineCore.step`) is not the step;
//!    - otherwise (no device work known or none at all), the most occurrences, then `iteration` before `step`
//!      before `decode`, then the outermost (smallest nesting depth seen), then byte order;
//! 2. `profiler_step`: PyTorch profiler's `ProfilerStep#N` (folded to `ProfilerStep#<n>`) with device work;
//! 3. `repeating_top_level`: the way a person finds a loop in a timeline: a label that repeats at the top level
//!    of a thread that calls CUDA inside it, carries device work in at least [`REPEAT_MIN`] of those
//!    occurrences, and comes at a regular period (the p90 of its start-to-start intervals at most
//!    [`PERIOD_P90_OVER_MEDIAN_MAX`] times their median); the one covering the most device busy time wins (then
//!    more occurrences, then byte order). Needs the occurrences ([`period_facts`]); label counts alone cannot
//!    apply it.

use std::collections::BTreeSet;

/// Is a label iteration-like (a candidate engine step by its name)? Its text contains `iteration`, `step` or
/// `decode` (case-insensitive) and not `prefill`, and it is not a framework's own range
/// ([`crate::framework::is_framework`]: `Optimizer.step#SGD.step`, `TSL:XlaModule:#hlo_module=jit__step…#`).
pub fn is_iteration_like(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    (l.contains("iteration") || l.contains("step") || l.contains("decode"))
        && !l.contains("prefill")
        && !crate::framework::is_framework(label)
}

/// Could `label` be a step under any rule (its intervals are worth collecting): not a framework's own range.
pub fn may_be_step(label: &str) -> bool {
    !crate::framework::is_framework(label)
}

/// Whether an analysis that chooses the step label ([`period_facts`]: the top-level ranges that may be a step)
/// and then budgets an iteration-like step from its occurrences reads the device metrics of a range `label`
/// at `depth` (a framework's own ranges are never read: on a label-heavy capture most occurrences are theirs).
pub fn reads_metrics(label: &str, depth: u32) -> bool {
    may_be_step(label) && (depth == 0 || is_iteration_like(label))
}

/// Occurrences with device work at the top level of a CUDA-calling thread a repeating label needs.
pub const REPEAT_MIN: u64 = 5;
/// The most the p90 of a repeating label's start-to-start intervals may exceed their median (×).
pub const PERIOD_P90_OVER_MEDIAN_MAX: f64 = 2.0;

/// How a label repeats: its occurrences at the top level of a thread that calls CUDA inside them and carry
/// device work ([`period_facts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeriodFacts {
    pub top_level_with_work: u64,
    /// Start-to-start intervals of consecutive such occurrences on the same thread.
    pub interval_median_ns: i64,
    pub interval_p90_ns: i64,
    /// Their median host wall.
    pub median_wall_ns: i64,
    /// Σ of their device busy unions.
    pub device_busy_ns: i64,
}

impl PeriodFacts {
    /// At least [`REPEAT_MIN`] occurrences at a regular period.
    pub fn repeats_regularly(&self) -> bool {
        self.top_level_with_work >= REPEAT_MIN
            && self.interval_median_ns > 0
            && (self.interval_p90_ns as f64) <= PERIOD_P90_OVER_MEDIAN_MAX * self.interval_median_ns as f64
    }
}

/// [`PeriodFacts`] of every label of a ranges analysis (its occurrences and their metrics).
pub fn period_facts(a: &crate::sqlite_ranges::Analysis) -> std::collections::HashMap<String, PeriodFacts> {
    use std::collections::HashMap;
    let mut by_label: HashMap<&str, Vec<(i64, i64, i64, i64)>> = HashMap::new();
    let t = &a.occurrences;
    for (i, o) in t.iter().enumerate() {
        if o.depth == 0 && t.runtime_calls(i) > 0 && t.busy_ns(i) > 0 && may_be_step(o.label) {
            by_label.entry(o.label).or_default().push((o.global_tid, o.start, o.end, t.busy_ns(i)));
        }
    }
    let pick = |v: &mut Vec<i64>, q: f64| -> i64 {
        if v.is_empty() {
            return 0;
        }
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    by_label
        .into_iter()
        .map(|(label, mut occ)| {
            occ.sort_unstable();
            let mut intervals: Vec<i64> =
                occ.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1 - w[0].1).collect();
            let mut walls: Vec<i64> = occ.iter().map(|o| o.2 - o.1).collect();
            let f = PeriodFacts {
                top_level_with_work: occ.len() as u64,
                interval_median_ns: pick(&mut intervals, 0.5),
                interval_p90_ns: pick(&mut intervals, 0.9),
                median_wall_ns: pick(&mut walls, 0.5),
                device_busy_ns: occ.iter().map(|o| o.3).sum(),
            };
            (label.to_string(), f)
        })
        .collect()
}

/// Which rule found the step ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepRule {
    IterationLabel,
    ProfilerStep,
    RepeatingTopLevel,
}

impl StepRule {
    /// The rule's name as documents write it.
    pub fn name(self) -> &'static str {
        match self {
            StepRule::IterationLabel => "iteration_label",
            StepRule::ProfilerStep => "profiler_step",
            StepRule::RepeatingTopLevel => "repeating_top_level",
        }
    }
    /// What the rule is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            StepRule::IterationLabel => "an iteration-like label (iteration, step or decode in its name, not prefill) with the most occurrences carrying device work",
            StepRule::ProfilerStep => "PyTorch profiler's ProfilerStep#N",
            StepRule::RepeatingTopLevel => "a label repeating at a regular period at the top level of a CUDA-calling thread, with device work, covering the most device busy time",
        }
    }
}

/// The step and the rule that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepChoice<'a> {
    pub label: &'a str,
    pub rule: StepRule,
}

/// One label as the chooser sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCandidate<'a> {
    pub label: &'a str,
    pub occurrences: u64,
    /// Occurrences with correlated device work; None when unknown (only label counts are at hand).
    pub with_device_work: Option<u64>,
    /// The smallest nesting depth of its occurrences (0 = outermost); None when unknown.
    pub min_depth: Option<u32>,
    /// Σ host wall of its occurrences; None when unknown.
    pub host_wall_ns: Option<i64>,
    /// How it repeats on CUDA-calling threads; None when unknown (label counts only).
    pub period: Option<PeriodFacts>,
}

impl<'a> From<&'a crate::sqlite_ranges::RangeStats> for StepCandidate<'a> {
    /// A label of the ranges library's own document.
    fn from(r: &'a crate::sqlite_ranges::RangeStats) -> StepCandidate<'a> {
        StepCandidate {
            label: &r.label,
            occurrences: r.occurrences,
            with_device_work: Some(r.occurrences_with_device_work),
            min_depth: r.depths.keys().copied().min(),
            host_wall_ns: Some(r.host_wall_time_ns),
            period: None,
        }
    }
}

/// `iteration` 0, `step` 1, `decode` 2.
fn keyword_rank(label: &str) -> u8 {
    let l = label.to_ascii_lowercase();
    if l.contains("iteration") {
        0
    } else if l.contains("step") {
        1
    } else {
        2
    }
}

/// The iteration-like candidates the rule ranks (see the module docs), best first.
pub fn ranked<'c, 'a>(cands: &'c [StepCandidate<'a>], unstable: &BTreeSet<String>) -> Vec<&'c StepCandidate<'a>> {
    let steps: Vec<&StepCandidate> = cands
        .iter()
        .filter(|c| c.occurrences > 0 && is_iteration_like(c.label) && !unstable.contains(c.label))
        .collect();
    let busy: Vec<&StepCandidate> = steps.iter().copied().filter(|c| c.with_device_work.unwrap_or(0) > 0).collect();
    if busy.is_empty() {
        let mut pool = steps;
        let top = near_top(&pool, |c| c.occurrences);
        pool.sort_by(|a, b| {
            top(b)
                .cmp(&top(a))
                .then_with(|| if top(a) { std::cmp::Ordering::Equal } else { b.occurrences.cmp(&a.occurrences) })
                .then(keyword_rank(a.label).cmp(&keyword_rank(b.label)))
                .then(a.min_depth.unwrap_or(0).cmp(&b.min_depth.unwrap_or(0)))
                .then(b.occurrences.cmp(&a.occurrences))
                .then(a.label.cmp(b.label))
        });
        return pool;
    }
    let mut pool = busy;
    let work = |c: &StepCandidate| c.with_device_work.unwrap_or(0);
    let top = near_top(&pool, work);
    pool.sort_by(|a, b| {
        top(b)
            .cmp(&top(a))
            .then_with(|| if top(a) { std::cmp::Ordering::Equal } else { work(b).cmp(&work(a)) })
            .then(b.host_wall_ns.unwrap_or(0).cmp(&a.host_wall_ns.unwrap_or(0)))
            .then(work(b).cmp(&work(a)))
            .then(a.label.cmp(b.label))
    });
    pool
}

/// Whether a candidate's count (`count`) is within [`COUNT_TIE`] of the largest: such counts are one count. An
/// engine step and the phase nested once in each step differ by one occurrence when the capture's end closed the
/// last step (a range closed by the capture's end is no occurrence: docs/sqlite-ranges.md), which made
/// `vibeserve.model.decode` (2240) the step over `vibeserve.engine.iteration` (2239) in a real CPU capture.
fn near_top<'c, 'a>(
    pool: &[&'c StepCandidate<'a>],
    count: impl Fn(&StepCandidate) -> u64 + Copy + 'c,
) -> impl Fn(&StepCandidate) -> bool + 'c {
    let max = pool.iter().map(|c| count(c)).max().unwrap_or(0);
    let slack = ((max as f64 * COUNT_TIE) as u64).max(1);
    move |c: &StepCandidate| count(c) + slack >= max
}

/// Counts within this share of the largest (at least one occurrence) tie when the step is ranked by count.
pub const COUNT_TIE: f64 = 0.01;

/// The step label (see the module docs), None when no rule finds one.
pub fn choose<'a>(cands: &[StepCandidate<'a>], unstable: &BTreeSet<String>) -> Option<&'a str> {
    choose_step(cands, unstable).map(|c| c.label)
}

/// The step label and the rule that found it (see the module docs).
pub fn choose_step<'a>(cands: &[StepCandidate<'a>], unstable: &BTreeSet<String>) -> Option<StepChoice<'a>> {
    if let Some(c) = ranked(cands, unstable).first() {
        return Some(StepChoice { label: c.label, rule: StepRule::IterationLabel });
    }
    let usable = |c: &&StepCandidate<'a>| c.occurrences > 0 && !unstable.contains(c.label) && may_be_step(c.label);
    if let Some(c) = cands
        .iter()
        .filter(usable)
        .filter(|c| c.label.starts_with("ProfilerStep#") && c.with_device_work.unwrap_or(0) > 0)
        .max_by(|a, b| a.with_device_work.cmp(&b.with_device_work).then(b.label.cmp(a.label)))
    {
        return Some(StepChoice { label: c.label, rule: StepRule::ProfilerStep });
    }
    cands
        .iter()
        .filter(usable)
        .filter(|c| c.period.is_some_and(|p| p.repeats_regularly()))
        .max_by(|a, b| {
            let (pa, pb) = (a.period.unwrap_or_default(), b.period.unwrap_or_default());
            pa.device_busy_ns
                .cmp(&pb.device_busy_ns)
                .then(pa.top_level_with_work.cmp(&pb.top_level_with_work))
                .then(b.label.cmp(a.label))
        })
        .map(|c| StepChoice { label: c.label, rule: StepRule::RepeatingTopLevel })
}

/// The candidates a user could pass as the step when no rule finds one: the labels that are not a framework's
/// own ranges, most device busy first, with their occurrences, median duration and share of the capture's
/// device busy time (`total_busy_ns`), at most `n`, one line each.
pub fn best_candidates(cands: &[StepCandidate<'_>], total_busy_ns: i64, n: usize) -> Vec<String> {
    let mut v: Vec<&StepCandidate> = cands.iter().filter(|c| c.occurrences > 0 && may_be_step(c.label)).collect();
    v.sort_by(|a, b| {
        let (pa, pb) = (a.period.unwrap_or_default(), b.period.unwrap_or_default());
        pb.device_busy_ns
            .cmp(&pa.device_busy_ns)
            .then(b.with_device_work.cmp(&a.with_device_work))
            .then(b.occurrences.cmp(&a.occurrences))
            .then(a.label.cmp(b.label))
    });
    v.into_iter()
        .take(n)
        .map(|c| {
            let p = c.period.unwrap_or_default();
            let share = if total_busy_ns > 0 { 100.0 * p.device_busy_ns as f64 / total_busy_ns as f64 } else { 0.0 };
            let why = if p.top_level_with_work < REPEAT_MIN {
                format!("{} top-level occurrences with device work (< {REPEAT_MIN})", p.top_level_with_work)
            } else if !p.repeats_regularly() {
                format!(
                    "irregular period (p90 {:.3} ms over median {:.3} ms > {PERIOD_P90_OVER_MEDIAN_MAX}×)",
                    p.interval_p90_ns as f64 / 1e6,
                    p.interval_median_ns as f64 / 1e6
                )
            } else {
                "repeats regularly".to_string()
            };
            format!(
                "{:?}: {} occurrences, median {:.3} ms, {share:.1}% of the device busy time; {why}",
                c.label,
                c.occurrences,
                p.median_wall_ns as f64 / 1e6
            )
        })
        .collect()
}

/// The labels that are not stable: labels that differ from another label only in digit runs (per-request
/// labels such as `vibeserve.request.0`, `vibeserve.request.1`; `vibeserve.sampling.d2h` alone is stable).
pub fn unstable_labels<'a>(labels: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut by: std::collections::BTreeMap<String, BTreeSet<String>> = std::collections::BTreeMap::new();
    for l in labels {
        by.entry(crate::sqlite_ranges::digits_to_hash(l)).or_default().insert(l.to_string());
    }
    by.into_values().filter(|g| g.len() > 1).flatten().collect()
}

/// The iteration label from label counts alone (no device facts: a stored baseline, a window's label counts).
pub fn of_counts(labels: &std::collections::BTreeMap<String, i64>, unstable: &BTreeSet<String>) -> Option<String> {
    let cands: Vec<StepCandidate> = labels
        .iter()
        .map(|(l, n)| StepCandidate {
            label: l,
            occurrences: (*n).max(0) as u64,
            with_device_work: None,
            min_depth: None,
            host_wall_ns: None,
            period: None,
        })
        .collect();
    choose(&cands, unstable).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(label: &str, n: u64, busy: Option<u64>, depth: Option<u32>) -> StepCandidate<'_> {
        StepCandidate {
            label,
            occurrences: n,
            with_device_work: busy,
            min_depth: depth,
            host_wall_ns: None,
            period: None,
        }
    }

    #[test]
    fn a_cpu_only_decode_range_is_not_the_step_when_one_launches_gpu_work() {
        // engine_spawn: the API process's detokenizer.decode (800, CPU only) vs the engine's EngineCore.step
        let cands = [c("detokenizer.decode", 800, Some(0), Some(1)), c("EngineCore.step", 200, Some(200), Some(0))];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("EngineCore.step"));
        // without device work anywhere (a CPU-only capture) the most frequent one, as before
        let cpu = [c("detokenizer.decode", 800, Some(0), Some(1)), c("EngineCore.step", 200, Some(0), Some(0))];
        assert_eq!(choose(&cpu, &BTreeSet::new()), Some("detokenizer.decode"));
        // label counts only (no device facts): the most frequent
        let counts = [c("detokenizer.decode", 800, None, None), c("EngineCore.step", 200, None, None)];
        assert_eq!(choose(&counts, &BTreeSet::new()), Some("detokenizer.decode"));
    }

    #[test]
    fn steps_with_device_work_rank_by_busy_occurrences_then_host_wall() {
        // an engine loop whose idle iterations launch nothing: the label that carries the work more often wins
        let mut cands =
            [c("engine.iteration", 5000, Some(900), Some(0)), c("model.decode_step", 1000, Some(1000), Some(1))];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("model.decode_step"));
        cands[0].with_device_work = Some(1000);
        cands[0].host_wall_ns = Some(9);
        cands[1].host_wall_ns = Some(5);
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("engine.iteration"));
    }

    #[test]
    fn without_device_work_ties_go_to_iteration_then_step_then_outermost_then_label() {
        let cands = [c("model.decode", 10, None, Some(0)), c("zz.step", 10, None, Some(1))];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("zz.step"));
        let cands = [c("b.step", 10, None, Some(1)), c("a.step", 10, None, Some(2)), c("x.iteration", 8, None, None)];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("b.step"));
        let cands = [c("b.step", 10, None, Some(0)), c("a.step", 10, None, Some(0))];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("a.step"));
    }

    #[test]
    fn a_step_the_capture_end_closed_ties_with_its_nested_phase() {
        // the last engine iteration closed by the capture's end is no occurrence: 2239 against the nested
        // decode's 2240 is one count; `iteration` before `decode`, then the outermost
        let none = BTreeSet::new();
        let cands =
            [c("vibeserve.model.decode", 2240, None, Some(1)), c("vibeserve.engine.iteration", 2239, None, Some(0))];
        assert_eq!(choose(&cands, &none), Some("vibeserve.engine.iteration"));
        // with device work: the longer host wall (the enclosing step) among counts that tie
        let mut outer = c("engine.step", 199, Some(199), Some(0));
        outer.host_wall_ns = Some(1_000);
        let mut inner = c("model.decode", 200, Some(200), Some(1));
        inner.host_wall_ns = Some(600);
        assert_eq!(choose(&[inner, outer], &none), Some("engine.step"));
        // counts that differ by more than the tie stay ranked by count
        let cands = [c("a.decode", 300, None, Some(1)), c("b.iteration", 200, None, Some(0))];
        assert_eq!(choose(&cands, &none), Some("a.decode"));
    }

    #[test]
    fn prefill_and_per_request_labels_are_never_the_step() {
        let unstable: BTreeSet<String> = ["step.1".to_string(), "step.2".to_string()].into();
        let cands = [
            c("decode_prefill", 99, Some(99), None),
            c("step.1", 50, Some(50), None),
            c("step.2", 50, Some(50), None),
            c("forward", 500, Some(500), None),
            c("engine.iteration", 3, Some(3), None),
        ];
        assert_eq!(choose(&cands, &unstable), Some("engine.iteration"));
        assert_eq!(choose(&cands[..4], &unstable), None);
    }
}
