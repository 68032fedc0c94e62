//! The step-budget document is a summary whose size does not grow with the steps, and `step-budget --steps`
//! prints the per-step rows (issue #40, "bounded documents").

use crate::common;

use assert_cmd::Command;
use common::{fixture, one_doc};
use nsyskit::step_budget::{MAX_GROUPS, MAX_LISTED};
use serde_json::Value;

/// `step-budget ARGS --steps`: exit code and the rows, one JSON object per line.
fn rows(args: &[&str]) -> (i32, Vec<Value>) {
    common::step_rows(args)
}

/// The summary of `step-budget ARGS` (compact) and its size in bytes.
fn summary(args: &[&str]) -> (i32, Value, usize) {
    let out = Command::cargo_bin("step-budget").unwrap().args(args).arg("--compact").output().unwrap();
    let code = out.status.code().unwrap();
    assert!(code == 0 || code == 1, "{}", String::from_utf8_lossy(&out.stderr));
    (code, one_doc(&out.stdout), out.stdout.len())
}

/// No per-step list, and every list that could grow with the steps within its bound, its count beside it.
fn assert_bounded(doc: &Value) {
    assert!(doc.get("steps").is_none(), "the summary holds no steps[]");
    let n = |k: &str| doc[k].as_array().map_or(0, |a| a.len());
    let count = |k: &str| doc[k].as_u64().unwrap_or_else(|| panic!("{k} missing")) as usize;
    for (list, total, cap) in [
        ("outliers", "outlier_count", MAX_LISTED),
        ("warmup", "warmup_count", MAX_LISTED),
        ("stragglers", "straggler_count", MAX_LISTED),
        ("groups", "group_count", MAX_GROUPS),
    ] {
        assert!(n(list) <= cap, "{list}: {} > {cap}", n(list));
        assert_eq!(n(list), count(total).min(cap), "{list} lists min({total}, {cap})");
    }
    if let Some(g) = doc["iterations"]["groups"].as_array() {
        assert!(g.len() <= MAX_GROUPS);
    }
    assert!(doc["waterfall"]["segments"].as_array().map_or(0, |a| a.len()) <= 4096);
    // the outliers listed are in index order and each at least as slow as any left out (ratio to the median)
    let listed: Vec<&Value> = doc["outliers"].as_array().unwrap().iter().collect();
    assert!(listed.windows(2).all(|w| w[0]["index"].as_u64() < w[1]["index"].as_u64()));
}

/// (a) The rows `--steps` prints are the library's steps, field for field, as many as `step_count`, in index
/// order; the summary is the library's document; the exit code is the summary's.
#[test]
fn steps_rows_are_the_library_s() {
    for (rel, code) in
        [("nsys-2025.3.1/decode_mixed.sqlite", 0), ("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite", 1)]
    {
        let f = fixture(rel);
        let p = f.to_str().unwrap();
        let lib = nsyskit::step_budget::run(&f, &Default::default(), None).unwrap();
        let (sc, doc, _) = summary(&[p]);
        let (rc, got) = rows(&[p]);
        assert_eq!((sc, rc), (code, code), "{rel}: --steps exits as the summary");
        assert_eq!(doc, serde_json::to_value(&lib).unwrap(), "{rel}: the summary is the library's document");
        assert_eq!(got.len(), lib.step_count, "{rel}");
        assert_eq!(got.len() as u64, doc["step_count"].as_u64().unwrap(), "{rel}");
        for (k, (row, step)) in got.iter().zip(&lib.steps).enumerate() {
            assert_eq!(row, &serde_json::to_value(step).unwrap(), "{rel}: row {k}");
            assert_eq!(row["index"].as_u64(), Some(k as u64));
        }
        // the flags are the summary's lists and counts
        let flagged = |k: &str| got.iter().filter(|r| r[k] == true).count() as u64;
        assert_eq!(flagged("outlier"), doc["outlier_count"].as_u64().unwrap(), "{rel}");
        assert_eq!(flagged("warmup"), doc["warmup_count"].as_u64().unwrap(), "{rel}");
        for o in doc["outliers"].as_array().unwrap() {
            assert_eq!(got[o["index"].as_u64().unwrap() as usize]["outlier"], true);
        }
    }
    // decode_mixed: 22 outliers (15 prefill steps and 7 slow decode steps), step 0 warm-up
    let (_, doc, _) = summary(&[fixture("nsys-2025.3.1/decode_mixed.sqlite").to_str().unwrap()]);
    assert_eq!((doc["step_count"].as_u64(), doc["outlier_count"].as_u64()), (Some(400), Some(22)));
    assert_eq!(doc["outliers"].as_array().unwrap().len(), 22);
}

/// `--steps` with `--iterations`: the rows of the window's steps; a window selecting nothing: no row, exit 1.
#[test]
fn steps_rows_of_an_iteration_window() {
    let f = fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let p = f.to_str().unwrap();
    let (_, all) = rows(&[p]);
    let (code, doc, _) = summary(&[p, "--iterations", "10:19"]);
    let (rc, window) = rows(&[p, "--iterations", "10:19"]);
    assert_eq!((code, rc), (0, 0));
    assert_eq!(doc["step_count"], 10);
    assert_eq!(window.len(), 10);
    // the same steps as in the whole capture (numbered within the window), same numbers
    let strip = |r: &Value| {
        let mut r = r.clone();
        for k in ["index", "host_gap_to_next_ns", "outlier", "warmup"] {
            r.as_object_mut().unwrap().remove(k);
        }
        r
    };
    let by_start: std::collections::HashMap<i64, &Value> =
        all.iter().map(|r| (r["start_ns"].as_i64().unwrap(), r)).collect();
    for r in &window {
        let whole = by_start[&r["start_ns"].as_i64().unwrap()];
        assert_eq!(strip(r)["components"], strip(whole)["components"]);
        assert_eq!(r["wall_ns"], whole["wall_ns"]);
    }
    let out =
        Command::cargo_bin("step-budget").unwrap().args([p, "--iterations", "5000:5001", "--steps"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("RETRY"));
}

/// (b) The summary does not grow with the steps: on 400 steps and on 4 318 steps (ten times as many) it
/// holds no steps[], its lists stay within their bounds, and its size barely moves while the rows grow with
/// the steps.
#[test]
fn the_summary_does_not_grow_with_the_steps() {
    let small = fixture("nsys-2025.3.1/decode_mixed.sqlite");
    let big = fixture("serve-capture-gpu-records/capture.sqlite");
    let (_, s_doc, s_bytes) = summary(&[small.to_str().unwrap()]);
    let (_, b_doc, b_bytes) = summary(&[big.to_str().unwrap()]);
    assert_bounded(&s_doc);
    assert_bounded(&b_doc);
    let (ns, nb) = (s_doc["step_count"].as_u64().unwrap(), b_doc["step_count"].as_u64().unwrap());
    assert!(nb >= 10 * ns, "{nb} steps vs {ns}");
    // the rows grow with the steps; the summary does not
    let (_, b_rows) = rows(&[big.to_str().unwrap()]);
    let row_bytes: usize = b_rows.iter().map(|r| r.to_string().len() + 1).sum();
    assert_eq!(b_rows.len() as u64, nb);
    assert!(b_bytes * 10 < row_bytes, "summary {b_bytes} bytes, rows {row_bytes} bytes");
    assert!(b_bytes < 3 * s_bytes, "summary of {nb} steps {b_bytes} bytes, of {ns} steps {s_bytes} bytes");
    assert!(b_bytes < 256 * 1024, "{b_bytes}");
}
