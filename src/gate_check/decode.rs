//! G6 / G7 decode tier: decode-step regularity and prefill contamination.
#![allow(unused_imports)]
use std::path::{Path, PathBuf};

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::{self, DeviceKind};
use crate::export::{self, Export};

use super::*;

// ---------------------------------------------------------------------------------------------------------
// G6 / G7 decode tier

/// The decode steps of a capture: occurrences of the step label (from `sqlite-ranges`' reading code) with
/// their kernel counts and the prefill-labelled occurrences nested in them.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeSteps {
    pub label: String,
    /// How the label was chosen: `--decode-range` or `most frequent iteration-like label`.
    pub chosen_by: String,
    /// The iteration-like labels seen, with their occurrence counts (most frequent first).
    pub candidates: Vec<(String, usize)>,
    pub steps: Vec<DecodeStep>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeStep {
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// KERNEL rows attributed to it (runtime calls on its thread, then `(globalPid, correlationId)`).
    pub kernels: u64,
    /// Prefill-labelled occurrences nested inside it.
    pub prefills: u64,
}

use crate::step_label::is_iteration_like;

pub fn is_prefill_label(label: &str) -> bool {
    label.to_ascii_lowercase().contains("prefill")
}

/// Read the decode steps with `sqlite-ranges`' reading code ([`crate::sqlite_ranges::analyze`]). None when no step
/// label was found (the candidates and the reason are in the error string).
pub fn decode_steps(e: &Export, decode_range: Option<&str>) -> Result<std::result::Result<DecodeSteps, String>> {
    let recorded = e.nvtx_recorded()?;
    if !e.has_table(schema::NVTX_EVENTS) && !recorded.nothing_recorded() {
        return Ok(Err(recorded.explain_missing_table(&e.name())));
    }
    let a = crate::sqlite_ranges::analyze(e, &crate::sqlite_ranges::RangesOptions::default())?;
    // a capture without any range (its lazy export has no NVTX_EVENTS table, its --lazy=false export an empty
    // one): the same reason for both
    if a.occurrences.is_empty() {
        if let Some(cause) = recorded.no_range_cause() {
            return Ok(Err(format!("{}: no NVTX range: {cause}; {}", e.name(), crate::export::nvtx::ANNOTATE)));
        }
    }
    let mut counts: std::collections::BTreeMap<&str, (usize, u32)> = std::collections::BTreeMap::new();
    // per label: occurrences carrying device work, Σ host wall
    let mut work: std::collections::BTreeMap<&str, (u64, i64)> = std::collections::BTreeMap::new();
    for (i, o) in a.occurrences.iter().enumerate() {
        let c = counts.entry(o.label).or_insert((0, u32::MAX));
        c.0 += 1;
        c.1 = c.1.min(o.depth);
        let w = work.entry(o.label).or_default();
        w.0 += u64::from(a.occurrences.device_rows(i) > 0);
        w.1 += o.end - o.start;
    }
    let periods = crate::step_label::period_facts(&a);
    let cand = |with_work: bool| -> Vec<crate::step_label::StepCandidate> {
        counts
            .iter()
            .map(|(l, (n, d))| crate::step_label::StepCandidate {
                label: l,
                occurrences: *n as u64,
                with_device_work: with_work.then(|| work[l].0),
                min_depth: Some(*d),
                host_wall_ns: Some(work[l].1),
                period: with_work.then(|| periods.get(*l).copied().unwrap_or_default()),
            })
            .collect()
    };
    let unstable = crate::step_label::unstable_labels(counts.keys().copied());
    // the evidence list: every iteration-like label, most frequent first; the choice: the step-label rule
    let by_count = cand(false);
    let cand_list: Vec<(String, usize)> = crate::step_label::ranked(&by_count, &unstable)
        .iter()
        .map(|c| (c.label.to_string(), c.occurrences as usize))
        .collect();
    let with_work = cand(true);
    let chosen = crate::step_label::choose_step(&with_work, &unstable);
    let (label, chosen_by) = match decode_range {
        Some(l) => {
            if !counts.contains_key(l) {
                let mut top: Vec<(&&str, &(usize, u32))> = counts.iter().collect();
                top.sort_by_key(|t| std::cmp::Reverse(t.1 .0));
                let names: Vec<String> = top.iter().take(8).map(|(l, (n, _))| format!("{l} ({n})")).collect();
                return Ok(Err(format!("--decode-range {l}: no such NVTX range in the capture (most frequent: {})", names.join(", "))));
            }
            (l.to_string(), "--decode-range".to_string())
        }
        None => match chosen {
            Some(c) if c.rule != crate::step_label::StepRule::IterationLabel => {
                (c.label.to_string(), format!("{} ({})", c.rule.name(), c.rule.describe()))
            }
            Some(crate::step_label::StepChoice { label: l, .. })
                if cand_list.first().is_some_and(|(top, _)| top == l) =>
            {
                (l.to_string(), "the most frequent iteration-like label".to_string())
            }
            Some(crate::step_label::StepChoice { label: l, .. }) => {
                let (top, n) = &cand_list[0];
                (
                    l.to_string(),
                    format!("the iteration-like label with the most occurrences carrying device work ({top}, {n} occurrences, carries none)"),
                )
            }
            None => {
                return Ok(Err(
                    "no iteration-like NVTX range (a label containing iteration, step or decode): annotate each engine step, or name it with --decode-range".to_string(),
                ))
            }
        },
    };
    let mut steps: Vec<DecodeStep> = Vec::new();
    for (i, o) in a.occurrences.iter().enumerate() {
        if *o.label == *label {
            steps.push(DecodeStep {
                global_tid: o.global_tid,
                start: o.start,
                end: o.end,
                kernels: a.occurrences.kernels(i),
                prefills: 0,
            });
        }
    }
    steps.sort_by_key(|s| (s.global_tid, s.start));
    // Prefill-labelled occurrences overlapping a step on the same thread. Overlap, not ranges' parent chain:
    // a start/end range (e.g. a request opened inside a step and outliving it) encloses the prefill, so the
    // prefill's parent is the request, which the step does not enclose.
    for o in a.occurrences.iter().filter(|o| is_prefill_label(o.label)) {
        // steps of this thread starting before the prefill ends; walk back while they overlap it
        let hi = steps.partition_point(|s| (s.global_tid, s.start) < (o.global_tid, o.end));
        let mut i = hi;
        while i > 0 {
            i -= 1;
            let s = &mut steps[i];
            if s.global_tid != o.global_tid || s.end <= o.start {
                break;
            }
            if s.start < o.end || (s.start == o.start && o.start == o.end) {
                s.prefills += 1;
            }
        }
    }
    Ok(Ok(DecodeSteps { label, chosen_by, candidates: cand_list, steps }))
}

/// Lower median of a sorted slice.
fn lower_median(sorted: &[i64]) -> i64 {
    if sorted.is_empty() {
        0
    } else {
        sorted[(sorted.len() - 1) / 2]
    }
}

/// Step-start to next-step-start intervals on the same thread.
pub fn step_intervals(steps: &[DecodeStep]) -> Vec<i64> {
    steps.windows(2).filter(|w| w[0].global_tid == w[1].global_tid).map(|w| w[1].start - w[0].start).collect()
}

/// The most frequent kernel count per step (ties: the smaller count) and how many steps have it.
pub fn kernel_mode(steps: &[DecodeStep]) -> (u64, usize) {
    let mut c: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for s in steps {
        *c.entry(s.kernels).or_default() += 1;
    }
    c.into_iter().fold((0, 0), |best, (k, n)| if n > best.1 { (k, n) } else { best })
}

/// A decode-step shape: a kernel count that at least [`SHAPE_MIN_SHARE`] of the steps (and 3 or more) have.
/// An engine that replays one CUDA graph per batch size has one shape per batch size it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub kernels: u64,
    pub steps: usize,
}

/// Smallest share of the steps a kernel count needs to be a shape of its own (rarer counts are outliers of
/// the shapes: G7's business).
pub const SHAPE_MIN_SHARE: f64 = 0.10;

/// The shapes of a step list, most steps first (ties: the smaller count). Empty when no count qualifies.
pub fn step_shapes(steps: &[DecodeStep]) -> Vec<Shape> {
    let mut c: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for s in steps {
        *c.entry(s.kernels).or_default() += 1;
    }
    let n = steps.len().max(1);
    let mut v: Vec<Shape> = c
        .into_iter()
        .filter(|&(k, m)| k > 0 && m >= 3 && m as f64 / n as f64 >= SHAPE_MIN_SHARE)
        .map(|(kernels, steps)| Shape { kernels, steps })
        .collect();
    v.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.kernels.cmp(&b.kernels)));
    v
}

/// One shape's step intervals: (kernels per step, median interval ns, intervals inside the band, intervals).
pub type ShapeIntervals = (u64, i64, usize, usize);

/// Regularity within shapes: for each shape, the step-start intervals between consecutive steps of that
/// shape (same thread, adjacent in time) and how many lie in [median/2, 2·median] around that shape's median.
/// Returns (inside, total, per-shape (kernels, median ns, inside, total)).
pub fn shape_intervals(steps: &[DecodeStep], shapes: &[Shape]) -> (usize, usize, Vec<ShapeIntervals>) {
    let mut per = Vec::new();
    let (mut inside_all, mut total_all) = (0, 0);
    for sh in shapes {
        let mut iv: Vec<i64> = steps
            .windows(2)
            .filter(|w| w[0].global_tid == w[1].global_tid && w[0].kernels == sh.kernels && w[1].kernels == sh.kernels)
            .map(|w| w[1].start - w[0].start)
            .collect();
        iv.sort_unstable();
        let med = lower_median(&iv);
        let inside = iv.iter().filter(|&&x| 2 * x >= med && x <= 2 * med).count();
        inside_all += inside;
        total_all += iv.len();
        per.push((sh.kernels, med, inside, iv.len()));
    }
    (inside_all, total_all, per)
}

/// The cause G6 names when G1 says the capture is graph-level: the decode steps' kernels are inside opaque
/// GRAPH_TRACE rows, so neither kernel counts nor "no kernel" say anything about the threads.
pub fn graph_level_cause(e: &Export) -> Result<Option<String>> {
    let Some(mode) = e.graph_trace_mode()? else { return Ok(None) };
    if mode.mode != "graph" {
        return Ok(None);
    }
    let f = e.graph_facts()?;
    if f.graph_launches == 0 && f.graph_trace_rows == 0 {
        return Ok(None);
    }
    Ok(Some(format!(
        "graph-level capture (G1: --cuda-graph-trace=graph, from {}): the {} graph launches' kernels are {} opaque GRAPH_TRACE rows, so the decode steps' kernels are not in the export; re-capture with --cuda-graph-trace=node",
        schema::META_DATA_CAPTURE,
        f.graph_launches,
        f.graph_trace_rows
    )))
}

fn steps_of<'c>(cx: &'c Context) -> Result<&'c std::result::Result<DecodeSteps, String>> {
    let e = cx.export.expect("checked by the caller");
    if cx.steps.get().is_none() {
        let v = decode_steps(e, cx.opts.decode_range.as_deref())?;
        let _ = cx.steps.set(v);
    }
    Ok(cx.steps.get().expect("set above"))
}

pub fn g6_decode_regularity(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G6", "decode-regularity", "share");
    if cx.opts.tier != Tier::Decode {
        return Ok(g.skip("decode tier only"));
    }
    if cx.export.is_none() {
        return Ok(g.skip("no export to read (a .qdstrm: see G2)"));
    }
    let t = &cx.opts.thresholds;
    let ds = match steps_of(cx)? {
        Err(why) => return Ok(g.decide(true, 0.0, Some(t.min_decode_steps as f64), why.clone())),
        Ok(ds) => ds,
    };
    g.evidence.push(format!(
        "step label {} ({}); iteration-like labels: {}",
        ds.label,
        ds.chosen_by,
        ds.candidates.iter().map(|(l, n)| format!("{l} ({n})")).collect::<Vec<_>>().join(", ")
    ));
    let n = ds.steps.len();
    if n < t.min_decode_steps {
        g.unit = "steps".into();
        return Ok(g.decide(
            true,
            n as f64,
            Some(t.min_decode_steps as f64),
            format!("only {n} {} steps, fewer than {}: capture more decode steps", ds.label, t.min_decode_steps),
        ));
    }
    let mut iv = step_intervals(&ds.steps);
    iv.sort_unstable();
    let med = lower_median(&iv);
    let inside = iv.iter().filter(|&&x| 2 * x >= med && x <= 2 * med).count();
    let gap_share = if iv.is_empty() { 0.0 } else { inside as f64 / iv.len() as f64 };
    let (mode, mode_n) = kernel_mode(&ds.steps);
    let mut k_share = mode_n as f64 / n as f64;
    // several shapes (one CUDA graph per batch size): regularity is judged within each shape
    let shapes = step_shapes(&ds.steps);
    let multi = shapes.len() >= 2;
    let mut gap_share = gap_share;
    if multi {
        let (ins, tot, per) = shape_intervals(&ds.steps, &shapes);
        gap_share = if tot == 0 { 0.0 } else { ins as f64 / tot as f64 };
        k_share = shapes.iter().map(|s| s.steps).sum::<usize>() as f64 / n as f64;
        g.evidence.push(format!(
            "{} step shapes (kernels per step): {}",
            shapes.len(),
            per.iter()
                .zip(&shapes)
                .map(|((k, med, i, t), sh)| format!(
                    "{k} kernels in {} steps, {i} of {t} intervals in the bucket around its {} µs median",
                    sh.steps,
                    med / 1000
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let graph_cause = graph_level_cause(cx.export.expect("checked above"))?;
    let pct = |v: &[i64], q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    g.evidence.push(format!(
        "{n} steps; step-start intervals min/median/p90/max {}/{}/{}/{} µs; {inside} of {} in the dominant bucket [{} µs, {} µs]",
        iv.first().copied().unwrap_or(0) / 1000,
        med / 1000,
        pct(&iv, 0.9) / 1000,
        iv.last().copied().unwrap_or(0) / 1000,
        iv.len(),
        med / 2000,
        med * 2 / 1000
    ));
    g.evidence.push(format!(
        "kernels per step: most frequent {mode} in {mode_n} of {n} steps ({:.1} %)",
        mode_n as f64 / n as f64 * 100.0
    ));
    if mode == 0 {
        g.unit = "kernels per step".into();
        let why = match &graph_cause {
            Some(c) => format!("most {} steps carry no kernel: {c}", ds.label),
            None => format!("most {} steps carry no kernel: the step range is not on the thread that launches the GPU work (or CUDA data is missing)", ds.label),
        };
        return Ok(g.decide(true, 0.0, Some(1.0), why));
    }
    if gap_share < t.min_dominant_gap_share {
        return Ok(g.decide(
            true,
            gap_share,
            Some(t.min_dominant_gap_share),
            format!(
                "irregular decode steps: only {:.1} % of step-start intervals lie within [median/2, 2·median] around the {} (below {:.0} %); capture steady decode{}",
                gap_share * 100.0,
                if multi { format!("median of their shape ({} shapes)", shapes.len()) } else { format!("{} µs median", med / 1000) },
                t.min_dominant_gap_share * 100.0,
                graph_cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default()
            ),
        ));
    }
    if k_share < t.min_stable_kernel_share {
        g.unit = "share of steps".into();
        return Ok(g.decide(
            true,
            k_share,
            Some(t.min_stable_kernel_share),
            format!(
                "unstable decode steps: {} hold(s) for only {:.1} % of steps (below {:.0} %){}",
                if multi {
                    format!(
                        "the {} step shapes ({})",
                        shapes.len(),
                        shapes.iter().map(|s| format!("{} kernels", s.kernels)).collect::<Vec<_>>().join(", ")
                    )
                } else {
                    format!("the most frequent kernel count ({mode})")
                },
                k_share * 100.0,
                t.min_stable_kernel_share * 100.0,
                graph_cause.as_ref().map(|c| format!("; {c}")).unwrap_or_default()
            ),
        ));
    }
    Ok(g.decide(
        false,
        gap_share,
        Some(t.min_dominant_gap_share),
        if multi {
            format!(
                "{n} {} steps in {} shapes ({}): {:.1} % of step-start intervals in the dominant bucket of their shape; the shapes hold {:.1} % of steps",
                ds.label,
                shapes.len(),
                shapes.iter().map(|s| format!("{} kernels × {} steps", s.kernels, s.steps)).collect::<Vec<_>>().join(", "),
                gap_share * 100.0,
                k_share * 100.0
            )
        } else {
            format!(
                "{n} {} steps: {:.1} % of step-start intervals in the dominant bucket around the {} µs median; {mode} kernels in {:.1} % of steps",
                ds.label,
                gap_share * 100.0,
                med / 1000,
                k_share * 100.0
            )
        },
    ))
}

/// A slow step among the first this many steps of its thread is counted as warm-up in G7's reason.
pub const EARLY_STEPS: usize = 5;

pub fn g7_prefill_contamination(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G7", "prefill-contamination", "share");
    if cx.opts.tier != Tier::Decode {
        return Ok(g.skip("decode tier only"));
    }
    if cx.export.is_none() {
        return Ok(g.skip("no export to read (a .qdstrm: see G2)"));
    }
    let t = &cx.opts.thresholds;
    let ds = match steps_of(cx)? {
        Err(_) => return Ok(g.skip("no decode steps (see G6)")),
        Ok(ds) if ds.steps.is_empty() => return Ok(g.skip("no decode steps (see G6)")),
        Ok(ds) => ds,
    };
    let n = ds.steps.len();
    let mut walls: Vec<i64> = ds.steps.iter().map(|s| s.end - s.start).collect();
    walls.sort_unstable();
    let med = lower_median(&walls);
    let (mode, _) = kernel_mode(&ds.steps);
    if mode == 0 {
        return Ok(g.skip("the decode steps carry no kernel (G6 decides)"));
    }
    let (mut by_prefill, mut by_kernels, mut by_duration) = (0, 0, 0);
    let mut bad: Vec<&DecodeStep> = Vec::new();
    // position of each step among its thread's steps (ds.steps is sorted by thread, then start)
    let mut first_of_thread = 0;
    let mut early = 0;
    for (i, s) in ds.steps.iter().enumerate() {
        if i > 0 && ds.steps[i - 1].global_tid != s.global_tid {
            first_of_thread = i;
        }
        let p = s.prefills > 0;
        let k = (s.kernels as f64) > mode as f64 * t.kernel_outlier_factor
            || (s.kernels as f64) * t.kernel_outlier_factor < mode as f64;
        let d = (s.end - s.start) as f64 > med as f64 * t.duration_outlier_factor;
        by_prefill += p as usize;
        by_kernels += k as usize;
        by_duration += d as usize;
        if p || k || d {
            bad.push(s);
            early += usize::from(i - first_of_thread < EARLY_STEPS);
        }
    }
    let share = bad.len() as f64 / n as f64;
    g.evidence.push(format!(
        "{n} {} steps; median duration {} µs, most frequent kernel count {mode}; unlike it: {} (prefill-labelled range inside {by_prefill}, kernel count outside [{:.0}, {:.0}] {by_kernels}, duration above {} µs {by_duration})",
        ds.label,
        med / 1000,
        bad.len(),
        mode as f64 / t.kernel_outlier_factor,
        mode as f64 * t.kernel_outlier_factor,
        (med as f64 * t.duration_outlier_factor / 1000.0) as i64
    ));
    for s in bad.iter().take(5) {
        g.evidence.push(format!(
            "step at {}: {} µs, {} kernels, {} prefill range(s)",
            secs(s.start),
            (s.end - s.start) / 1000,
            s.kernels,
            s.prefills
        ));
    }
    if let Some(s) = bad.first() {
        g.at_ns = Some(s.start);
    }
    Ok(if share > t.max_contaminated_share && by_prefill == 0 && by_kernels == 0 {
        // only slow steps with the usual kernels: nothing says prefill; name what the steps show
        let warm = if early > 0 {
            format!("{early} of them among the first {EARLY_STEPS} steps of their thread (warm-up), ")
        } else {
            String::new()
        };
        g.decide(
            true,
            share,
            Some(t.max_contaminated_share),
            format!(
                "{} of {n} decode steps ({:.2} %, above {:.0} %) last more than {} × the {} µs median step with a usual kernel count (within [{:.0}, {:.0}], most often {mode}) and no prefill range: {warm}a host stall in the step (Python GC, scheduling, I/O) or a prefill mixed into the batch (the same kernels on more tokens); capture a steady decode window after warm-up, and check the steps in the evidence",
                bad.len(),
                share * 100.0,
                t.max_contaminated_share * 100.0,
                t.duration_outlier_factor,
                med / 1000,
                mode as f64 / t.kernel_outlier_factor,
                mode as f64 * t.kernel_outlier_factor
            ),
        )
    } else if share > t.max_contaminated_share {
        g.decide(
            true,
            share,
            Some(t.max_contaminated_share),
            format!(
                "prefill contamination: {} of {n} decode steps ({:.2} %, above {:.0} %) are unlike the dominant decode step ({by_prefill} contain a prefill range, {by_kernels} kernel-count and {by_duration} duration outliers); capture decode without arriving requests (or a longer steady window)",
                bad.len(),
                share * 100.0,
                t.max_contaminated_share * 100.0
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(t.max_contaminated_share),
            format!("{} of {n} decode steps ({:.2} %) are unlike the dominant decode step", bad.len(), share * 100.0),
        )
    })
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    /// Steps of one thread: `counts[i]` kernels, starting `gap_us[i]` µs after the previous one.
    fn steps(spec: &[(u64, i64, usize)]) -> Vec<DecodeStep> {
        let mut t = 0;
        let mut v = Vec::new();
        for &(kernels, gap_us, times) in spec {
            for _ in 0..times {
                v.push(DecodeStep { global_tid: 1, start: t, end: t + gap_us * 900, kernels, prefills: 0 });
                t += gap_us * 1000;
            }
        }
        v
    }

    #[test]
    fn two_graph_shapes_are_two_regular_shapes() {
        // the case: batch 1 then batch 4, 126 and 127 kernels per step, each ~99 % regular
        let s = steps(&[(126, 700, 62), (125, 700, 1), (127, 1900, 62), (128, 1900, 1)]);
        let (mode, mode_n) = kernel_mode(&s);
        assert_eq!((mode, mode_n), (126, 62));
        assert!((mode_n as f64 / s.len() as f64) < 0.5, "a single mode holds under half: 'unstable' before");
        let shapes = step_shapes(&s);
        assert_eq!(shapes, vec![Shape { kernels: 126, steps: 62 }, Shape { kernels: 127, steps: 62 }]);
        let (inside, total, per) = shape_intervals(&s, &shapes);
        assert_eq!((inside, total), (122, 122));
        assert_eq!(per[0].1, 700_000);
        assert_eq!(per[1].1, 1_900_000);
        // one shape: unchanged (shapes not used)
        let one = steps(&[(50, 466, 400)]);
        assert_eq!(step_shapes(&one), vec![Shape { kernels: 50, steps: 400 }]);
        // a rare count (prefill steps, 15 of 400) is no shape
        let mixed = steps(&[(56, 500, 385), (109, 2400, 15)]);
        assert_eq!(step_shapes(&mixed).len(), 1);
    }
}
