//! `--iterations START:END` and `--iteration-records FILE` for sqlite-ranges and step-budget: the window is
//! resolved first ([`crate::iterations::window::prepare`], a RETRY document when it selects no iteration), then
//! the capture, opened once, is analysed over it. report's window is in [`super::report`].

use std::path::Path;

use crate::contract::{Error, Result};
use crate::iterations::join::StepOcc;
use crate::iterations::window::{geometry_groups, join_note, prepare, IterationArgs, StepRow, Windowed};
use crate::ranges::{self, RangesOptions};
use crate::step_budget::{self, StepBudgetDoc, StepBudgetOptions};

/// sqlite-ranges with `--iteration-records` / `--iterations`: the ranges of the window, and the step
/// occurrences kept with their iteration.
pub fn ranges_run(
    path: &Path,
    opts: &RangesOptions,
    nsys: Option<&Path>,
    args: &IterationArgs,
) -> Result<Windowed<ranges::RangesDoc>> {
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
    let mut doc = ranges::described(ranges::analyze_doc(&cap.export, &o)?, &cap.source);
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
