//! The engine step label of a capture: one rule for every tool that needs it — gate-check's decode gates (G6,
//! G7), step-budget, report's primary range, capture-compare's iteration label, the `--iterations` windows.
//!
//! A label is *iteration-like* when it contains `iteration`, `step` or `decode` (case-insensitive) and not
//! `prefill`. Among the iteration-like labels that are stable (not one of several labels that differ only in
//! digit runs, such as `request.1`, `request.2`):
//!
//! - when some of them carry device work (an occurrence with correlated KERNEL/MEMCPY/MEMSET/GRAPH_TRACE rows),
//!   only those, ranked by the occurrences carrying device work, then the longer host wall, then byte order: an
//!   engine step launches GPU work, and a CPU-only range whose name says `decode` (an API process's
//!   `detokenizer.decode`, measured in `fixtures/nsys-2025.3.1/engine_spawn`: 800 occurrences against the
//!   engine's 200 `EngineCore.step`) is not the step;
//! - otherwise (no device work known or none at all), the most occurrences, then `iteration` before `step`
//!   before `decode`, then the outermost (smallest nesting depth seen), then byte order.

use std::collections::BTreeSet;

use crate::evidence::RangeRow;

/// Is a label iteration-like (a candidate engine step)? Its text contains `iteration`, `step` or `decode`
/// (case-insensitive) and not `prefill`.
pub fn is_iteration_like(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    (l.contains("iteration") || l.contains("step") || l.contains("decode")) && !l.contains("prefill")
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
}

impl<'a> StepCandidate<'a> {
    /// A label of a ranges document (its `depths` keys are depths as text).
    pub fn of_row(r: &'a RangeRow) -> StepCandidate<'a> {
        StepCandidate {
            label: &r.label,
            occurrences: r.occurrences.max(0) as u64,
            with_device_work: Some(r.occurrences_with_device_work.max(0) as u64),
            min_depth: r.depths.keys().filter_map(|d| d.parse().ok()).min(),
            host_wall_ns: Some(r.host_wall_time_ns),
        }
    }
}

impl<'a> From<&'a crate::ranges::RangeStats> for StepCandidate<'a> {
    /// A label of the ranges library's own document.
    fn from(r: &'a crate::ranges::RangeStats) -> StepCandidate<'a> {
        StepCandidate {
            label: &r.label,
            occurrences: r.occurrences,
            with_device_work: Some(r.occurrences_with_device_work),
            min_depth: r.depths.keys().copied().min(),
            host_wall_ns: Some(r.host_wall_time_ns),
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
        pool.sort_by(|a, b| {
            b.occurrences
                .cmp(&a.occurrences)
                .then(keyword_rank(a.label).cmp(&keyword_rank(b.label)))
                .then(a.min_depth.unwrap_or(0).cmp(&b.min_depth.unwrap_or(0)))
                .then(a.label.cmp(b.label))
        });
        return pool;
    }
    let mut pool = busy;
    pool.sort_by(|a, b| {
        b.with_device_work
            .cmp(&a.with_device_work)
            .then(b.host_wall_ns.unwrap_or(0).cmp(&a.host_wall_ns.unwrap_or(0)))
            .then(a.label.cmp(b.label))
    });
    pool
}

/// The step label (see the module docs), None when no label is iteration-like.
pub fn choose<'a>(cands: &[StepCandidate<'a>], unstable: &BTreeSet<String>) -> Option<&'a str> {
    ranked(cands, unstable).first().map(|c| c.label)
}

/// The step label among the rows of a ranges document.
pub fn of_rows(rows: &[RangeRow]) -> Option<String> {
    let unstable = crate::compare::checks::unstable_labels(rows.iter().map(|r| r.label.as_str()));
    let cands: Vec<StepCandidate> = rows.iter().map(StepCandidate::of_row).collect();
    choose(&cands, &unstable).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(label: &str, n: u64, busy: Option<u64>, depth: Option<u32>) -> StepCandidate<'_> {
        StepCandidate { label, occurrences: n, with_device_work: busy, min_depth: depth, host_wall_ns: None }
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
        let cands = [c("b.step", 10, None, Some(1)), c("a.step", 10, None, Some(2)), c("x.iteration", 9, None, None)];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("b.step"));
        let cands = [c("b.step", 10, None, Some(0)), c("a.step", 10, None, Some(0))];
        assert_eq!(choose(&cands, &BTreeSet::new()), Some("a.step"));
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
