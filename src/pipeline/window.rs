//! `--iterations START:END` and `--iteration-records FILE` for sqlite-ranges and step-budget: the window is
//! resolved first ([`prepare`], a RETRY document when it selects no iteration), then the capture, opened once,
//! is analysed over it. report's window is in [`super::report`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::contract::{Document, Error, Result, Tool};
use crate::export::Export;
use crate::iterations::join::{join, IterationJoin, StepOcc};
use crate::iterations::window::{
    CaptureSpan, GeometryGroup, IndexRange, IterationArgs, IterationWindowDoc, Prepared, StepRow, WindowInfo, Windowed,
};
use crate::sqlite_ranges::{self, RangesOptions};
use crate::step_budget::{self, Components, StepBudgetDoc, StepBudgetOptions};

/// sqlite-ranges with `--iteration-records` / `--iterations`: the ranges of the window, and the step
/// occurrences kept with their iteration.
pub fn ranges_run(
    path: &Path,
    opts: &RangesOptions,
    nsys: Option<&Path>,
    args: &IterationArgs,
) -> Result<Windowed<sqlite_ranges::SqliteRangesDoc>> {
    if opts.window.is_some() && args.iterations.is_some() {
        return Err(Error::usage("--window and --iterations: give one window").with_arg("--iterations"));
    }
    let cap = crate::export::open_capture(path, nsys)?;
    let prep = match prepare(&cap.export, args, "sqlite-ranges")? {
        Windowed::Doc(p) => p,
        Windowed::Retry(mut d) => {
            d.source = cap.source.path.clone();
            return Ok(Windowed::Retry(d));
        }
    };
    let mut o = opts.clone();
    if prep.time_window.is_some() {
        o.window = prep.time_window;
    }
    let mut doc = sqlite_ranges::described(sqlite_ranges::analyze_doc(&cap.export, &o)?, &cap.source);
    let mut sec = prep.section();
    let inside = |s: &StepOcc| o.window.is_none_or(|(ws, we)| s.start >= ws && s.end <= we);
    sec.occurrences = prep
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| inside(s))
        .map(|(i, s)| {
            let g = prep.geometry[i].as_ref();
            StepRow {
                index: i as u64,
                start_ns: s.start,
                end_ns: s.end,
                global_tid: s.global_tid,
                iteration: g.map(|g| g.iteration),
                rank: g.map(|g| g.rank),
                phase: g.map(|g| g.phase.clone()),
                batch_size: g.map(|g| g.batch_size),
            }
        })
        .collect();
    if let Some(w) = &prep.window {
        doc.notes.push(format!(
            "--iterations {}:{} ({}): {} step(s) selected, analysed as the time window {}:{}",
            w.requested.start, w.requested.end, w.by, w.selected_steps, w.time_window_start_ns, w.time_window_end_ns
        ));
    }
    if let Some(j) = &prep.join {
        doc.notes.push(join_note(j));
    }
    doc.iterations = Some(sec);
    Ok(Windowed::Doc(doc))
}

/// step-budget with `--iteration-records` / `--iterations`: the budget of the window; each joined step carries
/// its batch geometry; joined steps are grouped by phase and batch size.
pub fn step_budget_run(
    path: &Path,
    opts: &StepBudgetOptions,
    nsys: Option<&Path>,
    args: &IterationArgs,
) -> Result<Windowed<StepBudgetDoc>> {
    let cap = crate::export::open_capture(path, nsys)?;
    let mut a = args.clone();
    a.step = opts.step.clone();
    a.fold = opts.fold;
    let prep = match prepare(&cap.export, &a, "step-budget")? {
        Windowed::Doc(p) => p,
        Windowed::Retry(mut d) => {
            d.source = cap.source.path.clone();
            return Ok(Windowed::Retry(d));
        }
    };
    let mut o = opts.clone();
    o.step = Some(prep.step_label.clone());
    let mut doc = step_budget::analyze_window(&cap.export, &o, prep.time_window)?;
    doc.source = cap.source.path.clone();
    step_budget::judge(&mut doc, &cap.export, &cap.source)?;
    doc.step_label_choice = prep.step_label_choice.clone();
    let mut unjoined = 0usize;
    for s in &mut doc.steps {
        s.geometry =
            prep.step_index(s.global_tid, s.start_ns, s.start_ns + s.wall_ns).and_then(|i| prep.geometry[i].clone());
        if s.geometry.is_none() {
            unjoined += 1;
        }
    }
    let mut sec = prep.section();
    if prep.join.is_some() {
        sec.groups = geometry_groups(&doc.steps);
        sec.group_count = Some(sec.groups.len());
        sec.groups.truncate(step_budget::MAX_GROUPS);
        sec.unjoined_steps = Some(unjoined);
    }
    if let Some(w) = &prep.window {
        doc.notes.push(format!(
            "--iterations {}:{} ({}): {} step(s) selected, analysed as the time window {}:{}",
            w.requested.start, w.requested.end, w.by, w.selected_steps, w.time_window_start_ns, w.time_window_end_ns
        ));
    }
    if let Some(j) = &prep.join {
        doc.notes.push(join_note(j));
    }
    doc.iterations = Some(sec);
    Ok(Windowed::Doc(doc))
}

/// The step label (given, or the iteration label) and its occurrences.
fn steps_of(export: &Export, step: Option<&str>, fold: bool) -> Result<(String, String, Vec<StepOcc>)> {
    let loaded = sqlite_ranges::load_occurrences(export, &RangesOptions::default())?;
    let label_of = |raw: &str| if fold { crate::labels::fold_label(raw).label } else { raw.to_string() };
    let labels: Vec<String> = loaded.occurrences.iter().map(|o| label_of(&o.label)).collect();
    let (label, choice) = match step {
        Some(l) => (l.to_string(), "--step".to_string()),
        None => {
            let mut counts: BTreeMap<String, i64> = BTreeMap::new();
            for l in &labels {
                *counts.entry(l.clone()).or_insert(0) += 1;
            }
            match step_label_of(export, &counts, fold)? {
                Some(l) => (l, "iteration_label".to_string()),
                None => {
                    return Err(Error::input(format!(
                        "{}: no iteration-like label (containing iteration, step or decode, not prefill) among {} labels: give --step LABEL",
                        export.name(),
                        counts.len()
                    ))
                    .with_arg("--step"))
                }
            }
        }
    };
    let mut steps: Vec<StepOcc> = loaded
        .occurrences
        .iter()
        .zip(&labels)
        .filter(|(_, l)| **l == label)
        .map(|(o, _)| StepOcc { global_tid: o.global_tid, start: o.start, end: o.end })
        .collect();
    steps.sort_by_key(|s| (s.start, s.end, s.global_tid));
    Ok((label, choice, steps))
}

/// The step label ([`crate::step_label`]) from the label counts; when several iteration-like labels compete,
/// from the ranges analysis, which knows which of them carry device work (the choice step-budget and report
/// make on the same export).
fn step_label_of(export: &Export, counts: &BTreeMap<String, i64>, fold: bool) -> Result<Option<String>> {
    let unstable = crate::step_label::unstable_labels(counts.keys().map(|k| k.as_str()));
    let competing = counts
        .iter()
        .filter(|(l, n)| **n > 0 && crate::step_label::is_iteration_like(l) && !unstable.contains(*l))
        .count();
    if competing < 2 {
        return Ok(crate::step_label::of_counts(counts, &unstable));
    }
    let a = sqlite_ranges::analyze(export, &RangesOptions { fold, ..Default::default() })?;
    let cands: Vec<crate::step_label::StepCandidate> = a.doc.ranges.iter().map(Into::into).collect();
    Ok(crate::step_label::choose(&cands, &unstable).map(str::to_string))
}

/// Load the steps, join the records, resolve the window: before any analysis.
pub fn prepare(export: &Export, args: &IterationArgs, tool: &str) -> Result<Windowed<Prepared>> {
    let records = match &args.records {
        Some(p) => Some(crate::iterations::read_records(p)?),
        None => None,
    };
    let (label, choice, steps) = steps_of(export, args.step.as_deref(), args.fold)?;
    if steps.is_empty() {
        return Err(Error::input(format!("{}: no occurrence of the step label {label:?} ({choice})", export.name()))
            .with_arg("--step"));
    }
    let (jn, geometry) = match &records {
        Some((doc, recs)) => {
            let (j, g) = join(recs, &steps, &doc.source, &label);
            (Some(j), g)
        }
        None => (None, vec![None; steps.len()]),
    };
    let by_key = steps.iter().enumerate().map(|(i, s)| ((s.global_tid, s.start, s.end), i)).collect();
    let by = if records.is_some() { "engine_iteration" } else { "step_occurrence" };
    let indices: Vec<Option<u64>> = match &records {
        Some(_) => geometry.iter().map(|g| g.as_ref().map(|g| g.iteration)).collect(),
        None => (0..steps.len() as u64).map(Some).collect(),
    };
    let span_of = |sel: &[usize]| -> (Option<IndexRange>, Option<i64>, Option<i64>) {
        let idx: Vec<u64> = sel.iter().filter_map(|&i| indices[i]).collect();
        let r = match (idx.iter().min(), idx.iter().max()) {
            (Some(&a), Some(&b)) => Some(IndexRange { start: a, end: b }),
            _ => None,
        };
        (r, sel.iter().map(|&i| steps[i].start).min(), sel.iter().map(|&i| steps[i].end).max())
    };
    let all: Vec<usize> = (0..steps.len()).collect();
    let (cap_idx, cap_s, cap_e) = span_of(&all);
    let capture = CaptureSpan {
        by: by.into(),
        indices: cap_idx,
        steps: steps.len() as u64,
        joined_steps: jn.as_ref().map(|j| j.joined_steps),
        records_iterations: records.as_ref().and_then(|(_, recs)| {
            let a = recs.iter().map(|r| r.iteration).min()?;
            let b = recs.iter().map(|r| r.iteration).max()?;
            Some(IndexRange { start: a, end: b })
        }),
        start_ns: cap_s,
        end_ns: cap_e,
    };
    let mut prep = Prepared {
        step_label: label.clone(),
        step_label_choice: choice,
        steps: steps.clone(),
        geometry,
        join: jn,
        window: None,
        time_window: None,
        by_key,
    };
    let Some((ws, we)) = args.iterations else {
        return Ok(Windowed::Doc(prep));
    };
    let requested = IndexRange { start: ws, end: we };
    let sel: Vec<usize> = (0..prep.steps.len()).filter(|&i| indices[i].is_some_and(|k| k >= ws && k <= we)).collect();
    if sel.is_empty() {
        let show = |r: Option<IndexRange>| r.map_or("none".to_string(), |r| format!("{}:{}", r.start, r.end));
        let what = if records.is_some() {
            format!(
                "the capture's joined engine iterations are {} ({} of {} steps joined; the records file holds iterations {})",
                show(capture.indices),
                capture.joined_steps.unwrap_or(0),
                capture.steps,
                show(capture.records_iterations)
            )
        } else {
            format!("the capture holds occurrences {} of {label:?} ({} steps)", show(capture.indices), capture.steps)
        };
        let mut reason = format!("--iterations {ws}:{we} selects no iteration: {what}");
        if let Some(j) = prep.join.as_ref().filter(|j| !j.is_joined()) {
            reason.push_str(&format!(
                "; the records could not be joined to the steps: {}",
                j.findings.first().cloned().unwrap_or_else(|| j.verdict.clone())
            ));
        }
        if let (Some(s), Some(e)) = (capture.start_ns, capture.end_ns) {
            reason.push_str(&format!(" (steps between {s} and {e} ns on the export's clock)"));
        }
        reason.push_str(
            ": the capture succeeded but the window selects no evidence; capture the iterations asked, or ask for the ones captured",
        );
        let (schema, _) = IterationWindowDoc::header();
        return Ok(Windowed::Retry(Box::new(IterationWindowDoc {
            schema,
            tool: Tool::new(tool),
            source: export.name(),
            verdict: "RETRY".into(),
            reason,
            step_label: label,
            by: by.into(),
            requested,
            capture,
            join: prep.join.clone(),
        })));
    }
    let (sel_idx, s, e) = span_of(&sel);
    let (s, e) = (s.unwrap_or(0), e.unwrap_or(0));
    prep.time_window = Some((s, e));
    prep.window = Some(WindowInfo {
        by: by.into(),
        requested,
        selected: sel_idx.unwrap_or(requested),
        selected_steps: sel.len() as u64,
        time_window_start_ns: s,
        time_window_end_ns: e,
        capture,
    });
    Ok(Windowed::Doc(prep))
}

/// One line for a document's notes: the join's verdict and its findings.
pub fn join_note(j: &IterationJoin) -> String {
    let mut s = format!(
        "iteration records {}: {} {} of {} steps ({} records, {} shape-only)",
        j.records_source, j.verdict, j.joined_steps, j.steps, j.records, j.shape_only_records
    );
    for f in &j.findings {
        s.push_str("; ");
        s.push_str(f);
    }
    s
}

/// Joined steps grouped by (phase, batch size), most steps first.
pub fn geometry_groups(steps: &[step_budget::Step]) -> Vec<GeometryGroup> {
    let mut by: BTreeMap<(String, u64), Vec<&step_budget::Step>> = BTreeMap::new();
    for s in steps {
        if let Some(g) = &s.geometry {
            by.entry((g.phase.clone(), g.batch_size)).or_default().push(s);
        }
    }
    let mut out: Vec<GeometryGroup> = by
        .into_iter()
        .map(|((phase, batch_size), ss)| {
            let mut d = BTreeMap::new();
            d.insert("wall".to_string(), step_budget::dist(ss.iter().map(|s| s.wall_ns)));
            d.insert("gpu_busy".to_string(), step_budget::dist(ss.iter().map(|s| s.gpu_busy_ns)));
            d.insert(
                "framework_elapsed".to_string(),
                step_budget::dist(ss.iter().filter_map(|s| s.geometry.as_ref().map(|g| g.framework_elapsed_ns))),
            );
            for (n, name) in Components::NAMES.iter().enumerate() {
                d.insert(name.to_string(), step_budget::dist(ss.iter().map(|s| s.components.values()[n])));
            }
            GeometryGroup { phase, batch_size, steps: ss.len(), first_index: ss[0].index, distributions: d }
        })
        .collect();
    out.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.phase.cmp(&b.phase)).then(a.batch_size.cmp(&b.batch_size)));
    out
}
