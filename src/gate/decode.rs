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
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// KERNEL rows attributed to it (runtime calls on its thread, then `(globalPid, correlationId)`).
    pub kernels: u64,
    /// Prefill-labelled occurrences nested inside it.
    pub prefills: u64,
}

/// Is a label iteration-like (a candidate decode step)? Its text contains `iteration`, `step` or `decode`
/// (case-insensitive) and not `prefill`.
pub fn is_iteration_like(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    (l.contains("iteration") || l.contains("step") || l.contains("decode")) && !l.contains("prefill")
}

pub fn is_prefill_label(label: &str) -> bool {
    label.to_ascii_lowercase().contains("prefill")
}

/// Read the decode steps with `sqlite-ranges`' reading code ([`crate::ranges::analyze`]). None when no step
/// label was found (the candidates and the reason are in the error string).
pub fn decode_steps(e: &Export, decode_range: Option<&str>) -> Result<std::result::Result<DecodeSteps, String>> {
    if !e.has_table("NVTX_EVENTS") {
        return Ok(Err("the export has no NVTX_EVENTS table (NVTX was not traced): capture with --trace=cuda,nvtx,osrt and annotate each engine step".into()));
    }
    let a = crate::ranges::analyze(e, &crate::ranges::RangesOptions::default())?;
    let mut counts: std::collections::BTreeMap<&str, (usize, u32)> = std::collections::BTreeMap::new();
    for o in &a.occurrences {
        let c = counts.entry(o.label.as_str()).or_insert((0, u32::MAX));
        c.0 += 1;
        c.1 = c.1.min(o.depth);
    }
    let mut candidates: Vec<(&str, usize, u32)> =
        counts.iter().filter(|(l, _)| is_iteration_like(l)).map(|(l, (n, d))| (*l, *n, *d)).collect();
    // most frequent, then `iteration` before `step` before `decode`, then outermost, then label order
    let rank = |l: &str| {
        let l = l.to_ascii_lowercase();
        if l.contains("iteration") {
            0
        } else if l.contains("step") {
            1
        } else {
            2
        }
    };
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(rank(a.0).cmp(&rank(b.0))).then(a.2.cmp(&b.2)).then(a.0.cmp(b.0)));
    let cand_list: Vec<(String, usize)> = candidates.iter().map(|(l, n, _)| (l.to_string(), *n)).collect();
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
        None => match candidates.first() {
            Some((l, _, _)) => (l.to_string(), "the most frequent iteration-like label".to_string()),
            None => {
                return Ok(Err(
                    "no iteration-like NVTX range (a label containing iteration, step or decode): annotate each engine step, or name it with --decode-range".to_string(),
                ))
            }
        },
    };
    let mut steps: Vec<Step> = Vec::new();
    for (i, o) in a.occurrences.iter().enumerate() {
        if o.label == label {
            steps.push(Step { global_tid: o.global_tid, start: o.start, end: o.end, kernels: a.metrics[i].kernels, prefills: 0 });
        }
    }
    steps.sort_by_key(|s| (s.global_tid, s.start));
    // Prefill-labelled occurrences overlapping a step on the same thread. Overlap, not ranges' parent chain:
    // a start/end range (e.g. a request opened inside a step and outliving it) encloses the prefill, so the
    // prefill's parent is the request, which the step does not enclose.
    for o in a.occurrences.iter().filter(|o| is_prefill_label(&o.label)) {
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
pub fn step_intervals(steps: &[Step]) -> Vec<i64> {
    steps.windows(2).filter(|w| w[0].global_tid == w[1].global_tid).map(|w| w[1].start - w[0].start).collect()
}

/// The most frequent kernel count per step (ties: the smaller count) and how many steps have it.
pub fn kernel_mode(steps: &[Step]) -> (u64, usize) {
    let mut c: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for s in steps {
        *c.entry(s.kernels).or_default() += 1;
    }
    c.into_iter().fold((0, 0), |best, (k, n)| if n > best.1 { (k, n) } else { best })
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
    let k_share = mode_n as f64 / n as f64;
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
    g.evidence.push(format!("kernels per step: most frequent {mode} in {mode_n} of {n} steps ({:.1} %)", k_share * 100.0));
    if mode == 0 {
        g.unit = "kernels per step".into();
        return Ok(g.decide(
            true,
            0.0,
            Some(1.0),
            format!("most {} steps carry no kernel: the step range is not on the thread that launches the GPU work (or CUDA data is missing)", ds.label),
        ));
    }
    if gap_share < t.min_dominant_gap_share {
        return Ok(g.decide(
            true,
            gap_share,
            Some(t.min_dominant_gap_share),
            format!(
                "irregular decode steps: only {:.1} % of step-start intervals lie within [median/2, 2·median] around the {} µs median (below {:.0} %); capture steady decode",
                gap_share * 100.0,
                med / 1000,
                t.min_dominant_gap_share * 100.0
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
                "unstable decode steps: the most frequent kernel count ({mode}) holds for only {:.1} % of steps (below {:.0} %)",
                k_share * 100.0,
                t.min_stable_kernel_share * 100.0
            ),
        ));
    }
    Ok(g.decide(
        false,
        gap_share,
        Some(t.min_dominant_gap_share),
        format!(
            "{n} {} steps: {:.1} % of step-start intervals in the dominant bucket around the {} µs median; {mode} kernels in {:.1} % of steps",
            ds.label,
            gap_share * 100.0,
            med / 1000,
            k_share * 100.0
        ),
    ))
}

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
    let mut bad: Vec<&Step> = Vec::new();
    for s in &ds.steps {
        let p = s.prefills > 0;
        let k = (s.kernels as f64) > mode as f64 * t.kernel_outlier_factor || (s.kernels as f64) * t.kernel_outlier_factor < mode as f64;
        let d = (s.end - s.start) as f64 > med as f64 * t.duration_outlier_factor;
        by_prefill += p as usize;
        by_kernels += k as usize;
        by_duration += d as usize;
        if p || k || d {
            bad.push(s);
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
    Ok(if share > t.max_contaminated_share {
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
