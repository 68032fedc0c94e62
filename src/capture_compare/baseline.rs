//! Named baselines: `capture-compare --baseline A1 A2 … --save-baseline NAME` writes an
//! `nsyskit.baseline/v1` document (the captures' sides — facts, run facts, gate verdict — their label counts
//! and per-occurrence values); `bundle-merge` stores it at `baselines.NAME`; `capture-compare --baseline
//! BUNDLE --baseline-name NAME --trial …` reads it back, and every comparability check runs against it as if
//! the captures had been given.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ab::Series;
use super::{Capture, CompareOptions, Invalidator, Side, Unchecked};
use crate::contract::{Document, Error, Input, Result, Tool};

/// One stored capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoredCapture {
    pub side: Side,
    /// Occurrences per label (null: no ranges).
    pub labels: Option<BTreeMap<String, i64>>,
    /// Per-label per-occurrence values, in time order (stable labels only).
    pub series: BTreeMap<String, Series>,
}

/// `nsyskit.baseline/v1`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BaselineDoc {
    pub schema: String,
    pub tool: Tool,
    /// The baseline's name: bundle-merge stores the document at `baselines.<name>`.
    pub name: String,
    pub captures: Vec<StoredCapture>,
    /// Invalidators among the baseline captures themselves (non-empty: exit 1, a baseline that is not one).
    pub invalidators: Vec<Invalidator>,
    pub unchecked: Vec<Unchecked>,
    pub notes: Vec<String>,
}

impl Document for BaselineDoc {
    const KIND: &'static str = "baseline";
    const TOOL: &'static str = "capture-compare";
    fn exit_code(&self) -> i32 {
        if self.invalidators.is_empty() {
            0
        } else {
            1
        }
    }
}

/// `--save-baseline NAME`: load `opts.baseline` and store them.
pub fn save(opts: &CompareOptions, name: &str) -> Result<BaselineDoc> {
    if name.is_empty() || name.contains('.') {
        return Err(Error::usage(format!(
            "--save-baseline {name:?}: expected a non-empty name without dots (it becomes the key baselines.NAME)"
        ))
        .with_arg("--save-baseline"));
    }
    if opts.baseline.is_empty() || !opts.trial.is_empty() || !opts.a.as_os_str().is_empty() {
        return Err(Error::usage("--save-baseline NAME takes --baseline A1 [A2 …] only (no --trial, no A B)")
            .with_arg("--save-baseline"));
    }
    let mut caps = Vec::new();
    for p in &opts.baseline {
        caps.extend(super::load_input(p, "baseline", None, opts)?);
    }
    let (schema, tool) = BaselineDoc::header();
    let mut notes = Vec::new();
    let missing: Vec<&str> = caps.iter().filter(|c| c.series.is_none()).map(|c| c.side.source.as_str()).collect();
    if !missing.is_empty() {
        return Err(Error::input(format!(
            "{}: no per-occurrence values (a bundle without a stored baseline): store raw .sqlite exports",
            missing.join(", ")
        ))
        .with_arg("--baseline"));
    }
    // the captures of a baseline must be comparable among themselves
    let (mut invalidators, mut unchecked) = (Vec::new(), Vec::new());
    if caps.len() > 1 {
        let doc = super::compare_captures(
            &caps[..1],
            &caps[1..],
            &crate::categories::Categories::builtin(),
            &CompareOptions { fail_on_regression: None, ..opts.clone() },
        );
        invalidators = doc.invalidators;
        unchecked = doc.unchecked;
    }
    if !invalidators.is_empty() {
        notes.push("the baseline captures are not comparable among themselves (see invalidators): exit 1".into());
    }
    let unstable = super::checks::unstable_labels(
        caps.iter().flat_map(|c| c.series.iter().flat_map(|s| s.keys())).map(|k| k.as_str()),
    );
    let captures = caps
        .into_iter()
        .map(|c| StoredCapture {
            side: c.side,
            labels: c.labels,
            series: c.series.unwrap_or_default().into_iter().filter(|(l, _)| !unstable.contains(l)).collect(),
        })
        .collect();
    Ok(BaselineDoc { schema, tool, name: name.to_string(), captures, invalidators, unchecked, notes })
}

fn captures_of(doc: &Value, at: &str, path: &Path) -> Result<Vec<Capture>> {
    let b: BaselineDoc = serde_json::from_value(doc.clone())
        .map_err(|e| Error::input(format!("{}: {at}: not an nsyskit.baseline/v1 document: {e}", path.display())))?;
    Ok(b.captures
        .into_iter()
        .map(|c| {
            let mut side = c.side;
            side.kind = "baseline".into();
            side.source = format!("{}#{}:{}", path.display(), b.name, side.source);
            Capture { side, evidence: None, labels: c.labels, series: Some(c.series) }
        })
        .collect())
}

/// A stored baseline, if `path` is one (a baseline document) or a bundle read with `--baseline-name`.
/// None: an ordinary capture.
pub fn try_load(path: &Path, name: Option<&str>) -> Result<Option<Vec<Capture>>> {
    let binary = matches!(
        crate::export::capture::sniff(path),
        Some(
            crate::export::capture::FileKind::Sqlite
                | crate::export::capture::FileKind::Report { .. }
                | crate::export::capture::FileKind::Qdstrm { .. }
        )
    );
    let is_json = !binary
        && !crate::evidence::looks_like_sqlite(path)
        && !path.extension().map(|e| e == "nsys-rep" || e == "qdrep").unwrap_or(false);
    // `-`, a FIFO or a device is read once, by evidence::load (reading it here would consume it)
    let regular = std::fs::metadata(path).map(|m| m.is_file()).unwrap_or(false);
    if !is_json || !regular {
        return Ok(None);
    }
    let bytes = Input::Path(path.to_path_buf()).read_json_bytes()?;
    let pname = path.display().to_string();
    let docs = crate::contract::parse_json_stream(&bytes, &pname)?;
    let Some(v) = docs.first().map(|d| &d.value) else { return Ok(None) };
    if v.get("schema").and_then(|s| s.as_str()) == Some("nsyskit.baseline/v1") {
        return captures_of(v, "$", path).map(Some);
    }
    let Some(name) = name else { return Ok(None) };
    let Some(stored) = v.get("baselines").and_then(|b| b.as_object()) else {
        return Err(Error::input(format!(
            "{pname}: $.baselines: missing: the bundle stores no named baseline (--baseline-name {name})"
        )));
    };
    let Some(doc) = stored.get(name) else {
        return Err(Error::input(format!(
            "{pname}: $.baselines.{name}: no such baseline (stored: {})",
            stored.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    };
    captures_of(doc, &format!("$.baselines.{name}"), path).map(Some)
}
