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

use super::join::{IterationJoin, StepGeometry, StepOcc};
use crate::contract::{Document, Error, Result, Tool};
use crate::stats::Dist;

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
    /// step-budget: joined steps grouped by (phase, batch size), most steps first; at most 64
    /// (`nsyskit::step_budget::MAX_GROUPS`), `group_count` is how many there are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GeometryGroup>,
    /// step-budget: the number of (phase, batch size) groups (with `--iteration-records`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_count: Option<usize>,
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
    /// `(thread, start, end)` → index into `steps`.
    pub by_key: HashMap<(i64, i64, i64), usize>,
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
            group_count: None,
            unjoined_steps: None,
        }
    }
}
