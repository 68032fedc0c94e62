//! Iteration records written by the serving engine (JSON lines, one record per engine iteration; format in
//! docs/iterations.md), validated into a `nsyskit.iterations/v1` document.
//!
//! Checks: every line is a JSON object with the required fields of the right type; within a rank the
//! iteration index increases, the monotonic clock never goes back and two iterations never overlap. A record
//! without `start_ns`/`end_ns` is *shape-only*: its geometry (phase, batch, tokens) is kept, but it is never
//! usable as time, and the document says so.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{Document, Error, Result, Tool};

pub mod join;
pub mod window;

pub use join::{join, IterationJoin, StepGeometry, StepOcc};
pub use window::{parse_iterations, IterationWindowDoc};

/// The environment variable through which serve-capture tells the server where to write its records (set on
/// the nsys process, so the server and its workers inherit it).
pub const RECORDS_ENV: &str = "NSYSKIT_ITERATION_RECORDS";

/// Required fields and their JSON type (`u` unsigned integer, `s` string, `a` array of unsigned integers).
const REQUIRED: &[(&str, char)] = &[
    ("iteration", 'u'),
    ("rank", 'u'),
    ("phase", 's'),
    ("prefill_chunks", 'a'),
    ("decode_kv_lens", 'a'),
    ("scheduled_tokens", 'u'),
    ("scheduled_requests", 'u'),
    ("batch_size", 'u'),
    ("graph_mode", 's'),
    ("backend", 's'),
];
/// Optional fields: the time of the record (both or neither of start/end), and the engine's own elapsed.
const OPTIONAL: &[(&str, char)] = &[("start_ns", 'u'), ("end_ns", 'u'), ("elapsed_ns", 'u'), ("pid", 'u')];

/// Largest `start_ns`/`end_ns` accepted (2^62 ns, 146 years of uptime): the join subtracts clock readings.
const MAX_NS: u64 = 1 << 62;

/// The phases a record may name.
pub const PHASES: &[&str] = &["prefill", "decode", "mixed", "idle"];

/// `nsyskit.iterations/v1`: what a file of iteration records holds and whether it is valid.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IterationsDoc {
    pub schema: String,
    pub tool: Tool,
    /// The records file as read.
    pub source: String,
    /// `PASS` when every check passed, `RETRY` when one failed (exit 1); `problems` says which.
    pub verdict: String,
    /// Records read (lines that are not blank).
    pub records: u64,
    /// Records with `start_ns` and `end_ns` (monotonic engine clock, ns).
    pub timed: u64,
    /// Records without timestamps: accepted for geometry (phase, batch, tokens), never usable as time.
    pub shape_only: u64,
    /// True only when every record is timed and the file is valid: the records may be used as time. Joins to
    /// NVTX steps must still measure the clock offset from the overlap (the engine's monotonic clock is not the
    /// nsys timeline).
    pub usable_as_time: bool,
    /// Why the records are not usable as time (null when they are).
    pub time_note: Option<String>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankSummary>,
    /// Records per phase.
    pub phases: BTreeMap<String, u64>,
    /// Records per batch size.
    pub batch_sizes: BTreeMap<String, u64>,
    /// What failed, each naming the line and the JSON path.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RankSummary {
    pub rank: u64,
    pub records: u64,
    pub timed: u64,
    pub first_iteration: u64,
    pub last_iteration: u64,
    /// Earliest start and latest end of the timed records (engine monotonic ns).
    pub first_start_ns: Option<u64>,
    pub last_end_ns: Option<u64>,
    /// Sum of `end_ns - start_ns` of the timed records.
    pub busy_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// 1-based line in the records file.
    pub line: u64,
    /// JSON path in that line's record (`$` for the whole line).
    pub path: String,
    pub message: String,
}

impl Document for IterationsDoc {
    const KIND: &'static str = "iterations";
    const TOOL: &'static str = "serve-capture";
    fn exit_code(&self) -> i32 {
        if self.verdict == "PASS" {
            0
        } else {
            1
        }
    }
}

/// One record, as parsed after the field checks (the fields of docs/iterations.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// 1-based line in the records file.
    pub line: u64,
    pub iteration: u64,
    pub rank: u64,
    /// Optional `pid`: the OS process that ran the iteration (lets the join pick the process without searching).
    pub pid: Option<u64>,
    pub phase: String,
    pub prefill_chunks: Vec<u64>,
    pub decode_kv_lens: Vec<u64>,
    pub scheduled_tokens: u64,
    pub scheduled_requests: u64,
    pub batch_size: u64,
    pub graph_mode: String,
    pub backend: String,
    /// Both or neither (a shape-only record has neither).
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub elapsed_ns: Option<u64>,
}
type Rec = Record;

fn type_ok(v: &Value, t: char) -> bool {
    match t {
        'u' => v.as_u64().is_some(),
        's' => v.is_string(),
        'a' => v.as_array().is_some_and(|a| a.iter().all(|x| x.as_u64().is_some())),
        _ => false,
    }
}

fn type_name(t: char) -> &'static str {
    match t {
        'u' => "an integer >= 0",
        's' => "a string",
        _ => "an array of integers >= 0",
    }
}

/// Validate the records in `text` (read from `source`).
pub fn validate_text(text: &str, source: &str) -> IterationsDoc {
    parse_text(text, source).0
}

/// One line's record after the field checks (None when a required field is missing or of the wrong type, or the
/// line is not a JSON object); every problem found goes to `problems`.
fn parse_record(line: u64, raw: &str, problems: &mut Vec<Problem>) -> Option<Rec> {
    let mut bad = |path: &str, message: String| problems.push(Problem { line, path: path.into(), message });
    let v: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => {
            bad("$", format!("not JSON: {e}"));
            return None;
        }
    };
    let Some(obj) = v.as_object() else {
        bad("$", "not a JSON object".into());
        return None;
    };
    let mut ok = true;
    for (k, t) in REQUIRED {
        match obj.get(*k) {
            None => {
                bad(&format!("$.{k}"), "missing (a required field)".into());
                ok = false;
            }
            Some(x) if !type_ok(x, *t) => {
                bad(&format!("$.{k}"), format!("expected {}, found {x}", type_name(*t)));
                ok = false;
            }
            _ => {}
        }
    }
    for (k, t) in OPTIONAL {
        if let Some(x) = obj.get(*k).filter(|x| !x.is_null() && !type_ok(x, *t)) {
            bad(&format!("$.{k}"), format!("expected {}, found {x}", type_name(*t)));
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    let phase = obj["phase"].as_str().unwrap_or_default().to_string();
    if !PHASES.contains(&phase.as_str()) {
        bad("$.phase", format!("{phase:?} is not one of {}", PHASES.join(", ")));
    }
    let start = obj.get("start_ns").and_then(Value::as_u64);
    let end = obj.get("end_ns").and_then(Value::as_u64);
    match (start, end) {
        (Some(_), None) => bad("$.end_ns", "missing while start_ns is given (both or neither)".into()),
        (None, Some(_)) => bad("$.start_ns", "missing while end_ns is given (both or neither)".into()),
        (Some(s), Some(e)) if e < s => bad("$.end_ns", format!("{e} is before start_ns {s}")),
        (Some(s), Some(e)) if e > MAX_NS => bad(
            if s > MAX_NS { "$.start_ns" } else { "$.end_ns" },
            format!("{} exceeds 2^62 ns: not a monotonic clock reading", s.max(e)),
        ),
        _ => {}
    }
    let timed = start.is_some() && end.is_some();
    let u = |k: &str| obj.get(k).and_then(Value::as_u64).unwrap_or(0);
    let arr = |k: &str| -> Vec<u64> {
        obj.get(k).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
    };
    let st = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    Some(Rec {
        line,
        iteration: u("iteration"),
        rank: u("rank"),
        pid: obj.get("pid").and_then(Value::as_u64),
        phase,
        prefill_chunks: arr("prefill_chunks"),
        decode_kv_lens: arr("decode_kv_lens"),
        scheduled_tokens: u("scheduled_tokens"),
        scheduled_requests: u("scheduled_requests"),
        batch_size: u("batch_size"),
        graph_mode: st("graph_mode"),
        backend: st("backend"),
        start: start.filter(|_| timed),
        end: end.filter(|_| timed),
        elapsed_ns: obj.get("elapsed_ns").and_then(Value::as_u64),
    })
}

/// Per rank, in file order: the iteration index increases, the clock never goes back, no overlap (problems to
/// `problems`); each rank's summary.
fn rank_summaries(recs: &[Rec], problems: &mut Vec<Problem>) -> Vec<RankSummary> {
    // per rank, in file order: the iteration index increases, the clock never goes back, no overlap
    let mut by_rank: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
    for r in recs {
        by_rank.entry(r.rank).or_default().push(r);
    }
    let mut ranks = Vec::new();
    for (rank, rs) in &by_rank {
        let mut prev: Option<&Rec> = None;
        let mut prev_timed: Option<&Rec> = None;
        for r in rs {
            if let Some(p) = prev {
                if r.iteration <= p.iteration {
                    problems.push(Problem {
                        line: r.line,
                        path: "$.iteration".into(),
                        message: format!(
                            "rank {rank}: iteration {} does not follow iteration {} (line {})",
                            r.iteration, p.iteration, p.line
                        ),
                    });
                }
            }
            if let (Some(p), Some(s)) = (prev_timed, r.start) {
                let (ps, pe) = (p.start.unwrap_or(0), p.end.unwrap_or(0));
                if s < ps {
                    problems.push(Problem {
                        line: r.line,
                        path: "$.start_ns".into(),
                        message: format!(
                            "rank {rank}: the monotonic clock goes back: start_ns {s} < {ps} of line {}",
                            p.line
                        ),
                    });
                } else if s < pe {
                    problems.push(Problem {
                        line: r.line,
                        path: "$.start_ns".into(),
                        message: format!(
                            "rank {rank}: overlaps the iteration of line {}: start_ns {s} < its end_ns {pe}",
                            p.line
                        ),
                    });
                }
            }
            prev = Some(r);
            if r.start.is_some() {
                prev_timed = Some(r);
            }
        }
        let timed: Vec<&&Rec> = rs.iter().filter(|r| r.start.is_some()).collect();
        ranks.push(RankSummary {
            rank: *rank,
            records: rs.len() as u64,
            timed: timed.len() as u64,
            first_iteration: rs.first().map(|r| r.iteration).unwrap_or(0),
            last_iteration: rs.last().map(|r| r.iteration).unwrap_or(0),
            first_start_ns: timed.iter().filter_map(|r| r.start).min(),
            last_end_ns: timed.iter().filter_map(|r| r.end).max(),
            busy_ns: timed.iter().map(|r| r.end.unwrap_or(0) - r.start.unwrap_or(0)).sum(),
        });
    }
    ranks
}

/// Validate the records in `text` and return them too (the records that passed the field checks, in file order).
pub fn parse_text(text: &str, source: &str) -> (IterationsDoc, Vec<Record>) {
    let mut problems = Vec::new();
    let mut recs = Vec::new();
    let mut records = 0u64;
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        if raw.trim().is_empty() {
            continue;
        }
        records += 1;
        if let Some(r) = parse_record(line, raw, &mut problems) {
            recs.push(r);
        }
    }

    let ranks = rank_summaries(&recs, &mut problems);
    let mut phases = BTreeMap::new();
    let mut batch_sizes = BTreeMap::new();
    for r in &recs {
        *phases.entry(r.phase.clone()).or_insert(0) += 1;
        *batch_sizes.entry(r.batch_size.to_string()).or_insert(0) += 1;
    }
    problems.sort_by_key(|p| p.line);
    let timed = recs.iter().filter(|r| r.start.is_some()).count() as u64;
    let shape_only = recs.len() as u64 - timed;
    if records == 0 {
        problems.push(Problem {
            line: 0,
            path: "$".into(),
            message: "the file holds no record (did the server write any? is the path the one it writes?)".into(),
        });
    }
    let valid = problems.is_empty();
    let usable_as_time = valid && timed == records && records > 0;
    let time_note = (!usable_as_time).then(|| {
        if !valid {
            "the records failed validation: never usable as time".to_string()
        } else {
            format!("{shape_only} of {records} record(s) are shape-only (no start_ns/end_ns): geometry only, never usable as time")
        }
    });
    let (schema, tool) = IterationsDoc::header();
    let doc = IterationsDoc {
        schema,
        tool,
        source: source.into(),
        verdict: if valid { "PASS" } else { "RETRY" }.into(),
        records,
        timed,
        shape_only,
        usable_as_time,
        time_note,
        ranks,
        phases,
        batch_sizes,
        problems,
    };
    (doc, recs)
}

/// Read and validate the records file at `path`; the records are returned only when the file is valid
/// (exit 2 naming the first problem's line and JSON path otherwise, or when it cannot be read).
pub fn read_records(path: &Path) -> Result<(IterationsDoc, Vec<Record>)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::input(format!("{}: {e}", path.display())))?;
    let (doc, recs) = parse_text(&text, &path.display().to_string());
    if let Some(p) = doc.problems.first() {
        return Err(Error::input(format!(
            "{}: line {} {}: {} ({} problem(s); validate the file with serve-capture's nsyskit.iterations/v1)",
            path.display(),
            p.line,
            p.path,
            p.message,
            doc.problems.len()
        ))
        .with_arg("--iteration-records"));
    }
    Ok((doc, recs))
}

/// Validate the records file at `path` (exit 2 when it cannot be read).
pub fn validate_file(path: &Path) -> Result<IterationsDoc> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::input(format!("{}: {e}", path.display())))?;
    Ok(validate_text(&text, &path.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(it: u64, rank: u64, s: Option<u64>, e: Option<u64>) -> String {
        let mut v = serde_json::json!({"iteration": it, "rank": rank, "phase": "decode", "prefill_chunks": [], "decode_kv_lens": [17, 33],
            "scheduled_tokens": 2, "scheduled_requests": 2, "batch_size": 2, "graph_mode": "full", "backend": "flashinfer"});
        if let Some(s) = s {
            v["start_ns"] = s.into();
        }
        if let Some(e) = e {
            v["end_ns"] = e.into();
            v["elapsed_ns"] = (e - s.unwrap_or(0)).into();
        }
        v.to_string()
    }

    #[test]
    fn valid_timed_records_are_usable_as_time() {
        let t = [rec(0, 0, Some(100), Some(200)), rec(0, 1, Some(150), Some(260)), rec(1, 0, Some(200), Some(300))]
            .join("\n");
        let d = validate_text(&t, "x");
        assert_eq!(d.verdict, "PASS", "{:?}", d.problems);
        assert!(d.usable_as_time);
        assert_eq!((d.records, d.timed, d.shape_only), (3, 3, 0));
        assert_eq!(d.ranks.len(), 2);
        assert_eq!(d.ranks[0].busy_ns, 200);
        assert_eq!(d.ranks[0].first_start_ns, Some(100));
        assert_eq!(d.ranks[0].last_end_ns, Some(300));
    }

    #[test]
    fn overlap_backwards_clock_and_missing_fields_are_named() {
        // ranks are checked separately: rank 1 overlapping rank 0 is fine, within rank 0 it is not
        let t = [
            rec(0, 0, Some(100), Some(200)),
            rec(1, 0, Some(150), Some(250)),
            rec(2, 0, Some(90), Some(95)),
            rec(0, 1, Some(100), Some(200)),
        ]
        .join("\n");
        let d = validate_text(&t, "x");
        assert_eq!(d.verdict, "RETRY");
        assert!(!d.usable_as_time);
        assert_eq!(d.problems.len(), 2, "{:?}", d.problems);
        assert_eq!((d.problems[0].line, d.problems[0].path.as_str()), (2, "$.start_ns"));
        assert!(d.problems[0].message.contains("overlaps"), "{}", d.problems[0].message);
        assert!(d.problems[1].message.contains("goes back"), "{}", d.problems[1].message);

        let d = validate_text("{\"iteration\": 0, \"rank\": 0}\n[1]\nnope\n", "x");
        assert!(
            d.problems.iter().any(|p| p.line == 1 && p.path == "$.phase" && p.message.contains("missing")),
            "{:?}",
            d.problems
        );
        assert!(d.problems.iter().any(|p| p.line == 2 && p.message.contains("not a JSON object")));
        assert!(d.problems.iter().any(|p| p.line == 3 && p.message.contains("not JSON")));

        let d = validate_text(&[rec(3, 0, None, None), rec(3, 0, None, None)].join("\n"), "x");
        assert!(d.problems.iter().any(|p| p.line == 2 && p.path == "$.iteration"), "{:?}", d.problems);
        let d = validate_text(&rec(0, 0, Some(5), Some(1 << 63)), "x");
        assert!(d.problems.iter().any(|p| p.path == "$.end_ns" && p.message.contains("2^62")), "{:?}", d.problems);
        let d = validate_text(&rec(0, 0, Some(5), None), "x");
        assert!(
            d.problems.iter().any(|p| p.path == "$.end_ns" && p.message.contains("both or neither")),
            "{:?}",
            d.problems
        );
        let d = validate_text("", "x");
        assert_eq!(d.verdict, "RETRY");
    }

    #[test]
    fn shape_only_records_are_geometry_never_time() {
        let t = [rec(0, 0, None, None), rec(1, 0, None, None), rec(2, 0, Some(10), Some(20))].join("\n");
        let d = validate_text(&t, "x");
        assert_eq!(d.verdict, "PASS", "{:?}", d.problems);
        assert_eq!((d.timed, d.shape_only), (1, 2));
        assert!(!d.usable_as_time);
        assert!(d.time_note.as_deref().unwrap().contains("2 of 3 record(s) are shape-only"));
        assert_eq!(d.phases.get("decode"), Some(&3));
        assert_eq!(d.batch_sizes.get("2"), Some(&3));
    }
}
