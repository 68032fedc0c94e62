//! `--iterations START:END` and `--iteration-records FILE` for sqlite-ranges, step-budget and report
//! (docs/iterations.md, "Windows by iteration").
//!
//! Before any analysis: the step occurrences are loaded, the records (when given) joined to them
//! ([`super::join`]), and the window resolved — by engine iteration index when records are given, else by
//! occurrence index (0-based, by start) of the step label. A window that selects no step is RETRY (exit 1)
//! with both windows shown (the capture's and the requested one): the serving-run manual's "the GPU capture
//! can succeed while normalization later selects no evidence". A window that selects steps becomes the time
//! window `[first selected step's start, last selected step's end]` on the export's clock, applied as
//! sqlite-ranges' `--window` (occurrences lying inside it are kept).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::join::{join, IterationJoin, StepGeometry, StepOcc};
use crate::contract::{Document, Error, Result, Tool};
use crate::export::Export;
use crate::ranges::{self, RangesOptions};
use crate::step_budget::{self, Components, Dist};

/// Parse `START:END`: engine iteration indices (or occurrence indices), integers ≥ 0, `START <= END`, both
/// inclusive.
pub fn parse_iterations(s: &str) -> Result<(u64, u64)> {
    let bad = || {
        Error::usage(format!("--iterations {s:?}: expected START:END (iteration indices, integers >= 0, START <= END)"))
            .with_arg("--iterations")
    };
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// What a tool is given for iterations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationArgs {
    /// `--iteration-records FILE` (JSON lines, docs/iterations.md).
    pub records: Option<PathBuf>,
    /// `--iterations START:END`.
    pub iterations: Option<(u64, u64)>,
    /// The step label (`--step`; None: the iteration label, chosen as step-budget does).
    pub step: Option<String>,
    /// Fold id-bearing labels (as the tools do unless `--no-fold`).
    pub fold: bool,
}

impl IterationArgs {
    /// Whether anything is asked (else the tools run exactly as without these flags).
    pub fn any(&self) -> bool {
        self.records.is_some() || self.iterations.is_some()
    }
}

/// An inclusive range of indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IndexRange {
    pub start: u64,
    pub end: u64,
}

/// What the capture holds, in the window's terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureSpan {
    /// `engine_iteration` (with records) or `step_occurrence`.
    pub by: String,
    /// The first and last index the capture can select (joined iterations, or occurrences 0..n-1); null
    /// when it can select none.
    pub indices: Option<IndexRange>,
    /// Step occurrences in the capture (all processes).
    pub steps: u64,
    /// Steps joined to a record (null without records).
    pub joined_steps: Option<u64>,
    /// The first and last iteration of the records file (the whole engine run; null without records).
    pub records_iterations: Option<IndexRange>,
    /// First step start and last step end, ns on the export's clock.
    pub start_ns: Option<i64>,
    pub end_ns: Option<i64>,
}

/// The window that was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WindowInfo {
    /// `engine_iteration` or `step_occurrence`.
    pub by: String,
    pub requested: IndexRange,
    /// The first and last index actually selected, and how many steps.
    pub selected: IndexRange,
    pub selected_steps: u64,
    /// The time window applied (`--window` semantics), ns on the export's clock.
    pub time_window_start_ns: i64,
    pub time_window_end_ns: i64,
    pub capture: CaptureSpan,
}

/// One step occurrence with its iteration (sqlite-ranges' per-occurrence output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRow {
    /// 0-based occurrence index of the step label in the whole capture, by start.
    pub index: u64,
    pub start_ns: i64,
    pub end_ns: i64,
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    /// The engine iteration joined to it (null when none).
    pub iteration: Option<u64>,
    pub rank: Option<u64>,
    pub phase: Option<String>,
    pub batch_size: Option<u64>,
}

/// Steps of one phase and batch size (step-budget, joined steps only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GeometryGroup {
    pub phase: String,
    pub batch_size: u64,
    pub steps: usize,
    /// First step index (step-budget's) of the group.
    pub first_index: usize,
    /// `wall`, `gpu_busy`, `framework_elapsed` and every component.
    pub distributions: BTreeMap<String, Dist>,
}

/// The `iterations` section of a ranges or step-budget document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IterationsSection {
    pub step_label: String,
    /// `--step`, or `iteration_label`.
    pub step_label_choice: String,
    /// The window applied (null without `--iterations`).
    pub window: Option<WindowInfo>,
    /// The join (null without `--iteration-records`).
    pub join: Option<IterationJoin>,
    /// sqlite-ranges: the step occurrences kept, with their iteration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub occurrences: Vec<StepRow>,
    /// step-budget: joined steps grouped by (phase, batch size), most steps first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GeometryGroup>,
    /// step-budget: steps without a joined record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unjoined_steps: Option<usize>,
}

/// `nsyskit.iteration-window/v1`: the window selects no evidence (RETRY, exit 1), both windows shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IterationWindowDoc {
    pub schema: String,
    pub tool: Tool,
    pub source: String,
    /// Always `RETRY`.
    pub verdict: String,
    pub reason: String,
    pub step_label: String,
    /// `engine_iteration` or `step_occurrence`.
    pub by: String,
    pub requested: IndexRange,
    pub capture: CaptureSpan,
    /// The join, when records were given.
    pub join: Option<IterationJoin>,
}

impl Document for IterationWindowDoc {
    const KIND: &'static str = "iteration-window";
    const TOOL: &'static str = "sqlite-ranges";
    fn exit_code(&self) -> i32 {
        1
    }
}

/// A document, or the RETRY of a window that selects nothing.
#[derive(Debug, Clone)]
pub enum Windowed<T> {
    Doc(T),
    Retry(Box<IterationWindowDoc>),
}

/// What [`prepare`] found before the analysis.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub step_label: String,
    pub step_label_choice: String,
    /// Every occurrence of the step label, by (start, end, thread).
    pub steps: Vec<StepOcc>,
    /// Parallel to `steps` (all None without records).
    pub geometry: Vec<Option<StepGeometry>>,
    pub join: Option<IterationJoin>,
    pub window: Option<WindowInfo>,
    /// The time window to analyse (None: the whole capture).
    pub time_window: Option<(i64, i64)>,
    by_key: HashMap<(i64, i64, i64), usize>,
}

impl Prepared {
    /// The index (into `steps`) of the occurrence `(thread, start, end)`.
    pub fn step_index(&self, global_tid: i64, start: i64, end: i64) -> Option<usize> {
        self.by_key.get(&(global_tid, start, end)).copied()
    }
    /// The `iterations` section of a document analysed over this window (occurrences and groups empty).
    pub fn section(&self) -> IterationsSection {
        IterationsSection {
            step_label: self.step_label.clone(),
            step_label_choice: self.step_label_choice.clone(),
            window: self.window.clone(),
            join: self.join.clone(),
            occurrences: Vec::new(),
            groups: Vec::new(),
            unjoined_steps: None,
        }
    }
}

/// The step label (given, or the iteration label) and its occurrences.
fn steps_of(export: &Export, step: Option<&str>, fold: bool) -> Result<(String, String, Vec<StepOcc>)> {
    let loaded = ranges::load_occurrences(export, &RangesOptions::default())?;
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
    let unstable = crate::compare::checks::unstable_labels(counts.keys().map(|k| k.as_str()));
    let competing = counts
        .iter()
        .filter(|(l, n)| **n > 0 && crate::step_label::is_iteration_like(l) && !unstable.contains(*l))
        .count();
    if competing < 2 {
        return Ok(crate::compare::iteration_label(counts, &unstable));
    }
    let a = ranges::analyze(export, &RangesOptions { fold, ..Default::default() })?;
    let cands: Vec<crate::step_label::StepCandidate> = a.doc.ranges.iter().map(Into::into).collect();
    Ok(crate::step_label::choose(&cands, &unstable).map(str::to_string))
}

/// Load the steps, join the records, resolve the window: before any analysis.
pub fn prepare(export: &Export, args: &IterationArgs, tool: &str) -> Result<Windowed<Prepared>> {
    let records = match &args.records {
        Some(p) => Some(super::read_records(p)?),
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
