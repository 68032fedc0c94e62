//! nvtx-readiness on the real fixtures (checked against an independent SQL reference), synthetic edge cases
//! (an iteration no child names, a missing column), RETRY and bad input, gate-check's G8, bundle-merge.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;
use rusqlite::Connection;
use serde_json::Value;

fn readiness(args: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("nvtx-readiness").unwrap().args(args).arg("--compact").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let code = out.status.code().unwrap();
    assert!(code == 0 || code == 1, "exit {code}: {err}");
    (code, common::one_doc(&out.stdout))
}

fn fails(args: &[&str]) -> String {
    let out = Command::cargo_bin("nvtx-readiness").unwrap().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "no document on stdout after an error");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn p(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

fn present(doc: &Value) -> Vec<String> {
    doc["taxonomy"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["present"] == true)
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// An independent reference: plain SQL + a quadratic nesting test, no nsyskit code.

struct Occ {
    label: String,
    tid: i64,
    start: i64,
    end: i64,
}

fn occurrences(path: &Path, prefix: &str) -> Vec<Occ> {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut st = c
        .prepare(
            "SELECT CASE WHEN n.textId IS NOT NULL THEN s.value ELSE n.text END, n.globalTid, n.start, n.end
             FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
             WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND n.end >= n.start",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
        })
        .unwrap();
    rows.filter_map(|r| {
        let (l, tid, start, end) = r.unwrap();
        let l = l?;
        l.starts_with(prefix).then_some(Occ { label: l, tid, start, end })
    })
    .collect()
}

/// (Σ iteration wall, Σ opaque, all gaps as (duration, start, end)).
fn reference_opaque(occ: &[Occ], iter: &str) -> (i64, i64, Vec<(i64, i64, i64)>) {
    let (mut wall, mut opaque, mut gaps) = (0, 0, Vec::new());
    for it in occ.iter().filter(|o| o.label == iter) {
        wall += it.end - it.start;
        let mut kids: Vec<(i64, i64)> = occ
            .iter()
            .filter(|c| c.label != iter && c.tid == it.tid && it.start <= c.start && c.end <= it.end)
            .map(|c| (c.start, c.end))
            .collect();
        kids.sort();
        let mut t = it.start;
        for (s, e) in kids {
            if s > t {
                gaps.push((s - t, t, s));
                opaque += s - t;
            }
            t = t.max(e);
        }
        if it.end > t {
            gaps.push((it.end - t, t, it.end));
            opaque += it.end - t;
        }
    }
    gaps.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    (wall, opaque, gaps)
}

fn check_opaque_against_reference(rel: &str, doc: &Value) {
    let occ = occurrences(&common::fixture(rel), "vibeserve.");
    let (wall, opaque, gaps) = reference_opaque(&occ, "vibeserve.engine.iteration");
    let it = &doc["iterations"];
    assert_eq!(it["wall_ns"], wall, "{rel}");
    assert_eq!(it["opaque_ns"], opaque, "{rel}");
    assert_eq!(it["named_ns"], wall - opaque, "{rel}");
    assert_eq!(it["opaque_share"].as_f64().unwrap(), opaque as f64 / wall as f64, "{rel}");
    let got: Vec<(i64, i64, i64)> = doc["largest_opaque_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["duration_ns"].as_i64().unwrap(), g["start"].as_i64().unwrap(), g["end"].as_i64().unwrap()))
        .collect();
    assert_eq!(got.len(), 10.min(gaps.len()));
    assert_eq!(got, gaps[..got.len()].to_vec(), "{rel}: the ten largest gaps");
    for g in doc["largest_opaque_gaps"].as_array().unwrap() {
        assert!(
            g["iteration_start"].as_i64() <= g["start"].as_i64() && g["end"].as_i64() <= g["iteration_end"].as_i64()
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// Real fixtures

#[test]
fn gpu_full_node_taxonomy_ids_and_graph_note() {
    let rel = "nsys-2025.3.1/gpu_full_node.sqlite";
    let (code, doc) = readiness(&[&p(rel), "--range-prefix", "vibeserve"]);
    assert_eq!(code, 0);
    assert_eq!(doc["schema"], "nsyskit.readiness/v1");
    assert_eq!(doc["tool"]["name"], "nvtx-readiness");
    assert_eq!(doc["verdict"], "READY");
    assert_eq!(doc["source"]["range_prefix"], "vibeserve");
    assert_eq!(doc["source"]["range_prefix_inferred"], false);
    // META_DATA_EXPORT names the exporter: 2025.3.2.0 for this 2025.3.1 capture
    assert!(doc["source"]["nsys_version"].as_str().unwrap().starts_with("2025.3"), "{}", doc["source"]);
    assert_eq!(
        present(&doc),
        ["engine.iteration", "engine.scheduling", "engine.input_preparation", "graph.replay", "sampling.d2h"]
    );
    let tax: BTreeMap<&str, &Value> =
        doc["taxonomy"].as_array().unwrap().iter().map(|t| (t["name"].as_str().unwrap(), t)).collect();
    assert_eq!(tax.len(), 11);
    for missing in [
        "attention.planning",
        "graph.preparation",
        "token.acceptance",
        "request.cleanup",
        "api.detokenization",
        "api.streaming",
    ] {
        assert_eq!(tax[missing]["present"], false);
        assert_eq!(tax[missing]["occurrences"], 0);
        assert_eq!(tax[missing]["label"], format!("vibeserve.{missing}"));
    }
    // counts and wall of present names, from plain SQL
    let occ = occurrences(&common::fixture(rel), "vibeserve.");
    for (name, t) in &tax {
        let label = format!("vibeserve.{name}");
        let mine: Vec<&Occ> = occ.iter().filter(|o| o.label == label).collect();
        assert_eq!(t["occurrences"], mine.len() as u64, "{name}");
        assert_eq!(t["wall_ns"], mine.iter().map(|o| o.end - o.start).sum::<i64>(), "{name}");
    }
    assert_eq!(tax["engine.iteration"]["occurrences"], 204);
    assert_eq!(tax["graph.replay"]["occurrences"], 200);
    // the request ids are flagged
    let ids = doc["naming"]["labels_with_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids[0]["pattern"], "vibeserve.request.<n>");
    assert_eq!(ids[0]["labels"], 4);
    assert_eq!(ids[0]["occurrences"], 4);
    // labels under the prefix outside the taxonomy are listed, not judged
    let outside: Vec<&str> =
        doc["outside_taxonomy"].as_array().unwrap().iter().map(|l| l["label"].as_str().unwrap()).collect();
    for l in ["vibeserve.api.serve", "vibeserve.model.prefill", "vibeserve.request.0", "vibeserve.graph.capture"] {
        assert!(outside.contains(&l), "{l} in {outside:?}");
    }
    // the worker thread owns the iterations and opens only vibeserve.* ranges
    assert_eq!(doc["iterations"]["engine_threads"].as_array().unwrap().len(), 1);
    assert_eq!(doc["naming"]["outside_prefix_on_engine_threads"], Value::Array(vec![]));
    assert_eq!(doc["naming"]["labels_at_several_depths"], Value::Array(vec![]));
    // 200 graph launches, and the note on what a replay range measures
    assert_eq!(doc["cuda_graphs"]["graph_launches"], 200);
    let note = doc["cuda_graphs"]["note"].as_str().unwrap();
    assert!(note.contains("measures the launch, not the GPU work") && note.contains("kernel rows"), "{note}");
    // every blocking sync (the sampling cudaStreamSynchronize, …) is inside a vibeserve range
    assert_eq!(doc["unenclosed_syncs"]["runtime_table"], true);
    assert!(doc["unenclosed_syncs"]["sync_calls"].as_u64().unwrap() >= 200);
    assert_eq!(doc["unenclosed_syncs"]["sync_calls"], doc["unenclosed_syncs"]["enclosed_calls"]);
    check_opaque_against_reference(rel, &doc);
    assert!(doc["iterations"]["opaque_share"].as_f64().unwrap() < 0.01);
}

#[test]
fn prefix_is_inferred_and_a_trailing_dot_is_ignored() {
    let rel = "nsys-2025.3.1/gpu_full_node.sqlite";
    let (_, inferred) = readiness(&[&p(rel)]);
    let (_, dotted) = readiness(&[&p(rel), "--range-prefix", "vibeserve."]);
    assert_eq!(inferred["source"]["range_prefix"], "vibeserve");
    assert_eq!(inferred["source"]["range_prefix_inferred"], true);
    assert_eq!(inferred["iterations"], dotted["iterations"]);
    assert_eq!(inferred["taxonomy"], dotted["taxonomy"]);
}

#[test]
fn decode_clean_lists_its_one_unenclosed_sync() {
    let rel = "nsys-2025.3.1/decode_clean.sqlite";
    let (code, doc) = readiness(&[&p(rel), "--range-prefix", "vibeserve"]);
    assert_eq!(code, 0);
    assert_eq!(
        present(&doc),
        ["engine.iteration", "engine.scheduling", "engine.input_preparation", "graph.replay", "sampling.d2h"]
    );
    assert_eq!(doc["iterations"]["occurrences"], 400);
    check_opaque_against_reference(rel, &doc);
    // reference: blocking syncs whose start lies in no vibeserve.* range on their thread
    let c = Connection::open_with_flags(common::fixture(rel), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let (n, total): (i64, i64) = c
        .query_row(
            "SELECT count(*), total(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
             WHERE s.value LIKE 'cudaDeviceSynchronize%' AND NOT EXISTS (
               SELECT 1 FROM NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId
               WHERE n.eventType IN (59, 60) AND n.globalTid = r.globalTid AND n.start <= r.start AND r.start <= n.end
                 AND coalesce(t.value, n.text) LIKE 'vibeserve.%')",
            [],
            |r| Ok((r.get(0)?, r.get::<_, f64>(1)? as i64)),
        )
        .unwrap();
    assert_eq!(n, 1);
    let by_api = doc["unenclosed_syncs"]["by_api"].as_array().unwrap();
    assert_eq!(by_api.len(), 1, "{by_api:?}");
    assert_eq!(by_api[0]["api"], "cudaDeviceSynchronize");
    assert_eq!(by_api[0]["calls"], n);
    assert_eq!(by_api[0]["total_ns"], total);
    assert_eq!(doc["unenclosed_syncs"]["enclosed_calls"], 400);
}

#[test]
fn decode_mixed_request_ranges_shift_the_nesting_depth() {
    let rel = "nsys-2025.3.1/decode_mixed.sqlite";
    let (code, doc) = readiness(&[&p(rel), "--range-prefix", "vibeserve"]);
    assert_eq!(code, 0);
    check_opaque_against_reference(rel, &doc);
    let outside: Vec<&str> =
        doc["outside_taxonomy"].as_array().unwrap().iter().map(|l| l["label"].as_str().unwrap()).collect();
    assert_eq!(outside, ["vibeserve.request", "vibeserve.api.poll", "vibeserve.model.prefill"]);
    // the request start/end ranges enclose 0..3 iterations: the same label lands at several depths
    let several: BTreeMap<&str, &Value> = doc["naming"]["labels_at_several_depths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["label"].as_str().unwrap(), &d["depths"]))
        .collect();
    let it = several["vibeserve.engine.iteration"].as_object().unwrap();
    assert_eq!(it.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 400);
    assert!(it.len() > 1);
    // prefill is a child: the gap after it is listed with its name
    assert!(doc["largest_opaque_gaps"].as_array().unwrap().iter().any(|g| g["after"] == "vibeserve.model.prefill"));
}

#[test]
fn cpu_nvtx_osrt_labels_at_two_depths_and_no_cuda() {
    for rel in ["nsys-2023.4.4/cpu_nvtx_osrt.sqlite", "nsys-2025.3.1/cpu_nvtx_osrt.sqlite"] {
        let (code, doc) = readiness(&[&p(rel), "--range-prefix", "vibeserve"]);
        assert_eq!(code, 0, "{rel}");
        assert_eq!(
            present(&doc),
            ["engine.iteration", "engine.scheduling", "engine.input_preparation", "sampling.d2h"],
            "{rel}"
        );
        let several = doc["naming"]["labels_at_several_depths"].as_array().unwrap();
        assert_eq!(several.len(), 1, "{rel}: {several:?}");
        assert_eq!(several[0]["label"], "vibeserve.engine.input_preparation");
        assert_eq!(several[0]["depths"], serde_json::json!({"1": 50, "3": 50}));
        assert_eq!(doc["naming"]["labels_with_ids"][0]["pattern"], "vibeserve.request.<n>");
        assert_eq!(doc["naming"]["labels_with_ids"][0]["labels"], 5);
        assert_eq!(doc["unenclosed_syncs"]["runtime_table"], false);
        assert_eq!(doc["unenclosed_syncs"]["by_api"], Value::Array(vec![]));
        assert_eq!(doc["cuda_graphs"]["graph_launches"], 0);
        assert_eq!(doc["cuda_graphs"]["note"], Value::Null);
        assert!(doc["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("without CUDA")));
        check_opaque_against_reference(rel, &doc);
    }
}

#[test]
fn retry_above_the_threshold_and_without_iterations() {
    let rel = "nsys-2025.3.1/decode_clean.sqlite";
    let (code, doc) = readiness(&[&p(rel), "--max-opaque-share", "0.005"]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    assert!(doc["reason"].as_str().unwrap().starts_with("add instrumentation before choosing an optimisation"));
    assert_eq!(doc["threshold"]["max_opaque_share"], 0.005);

    let (code, doc) = readiness(&[&p(rel), "--range-prefix", "sglang"]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    assert!(doc["reason"].as_str().unwrap().contains("no `sglang.engine.iteration` range"), "{}", doc["reason"]);
    assert_eq!(doc["iterations"]["occurrences"], 0);
    assert_eq!(doc["iterations"]["opaque_share"], Value::Null);
    assert!(present(&doc).is_empty());
    // no iteration, no engine thread: nothing can be outside the prefix on one
    assert_eq!(doc["naming"]["outside_prefix_on_engine_threads"], Value::Array(vec![]));
    // with no range under the prefix, every blocking sync is unenclosed
    assert_eq!(doc["unenclosed_syncs"]["enclosed_calls"], 0);
    assert_eq!(doc["unenclosed_syncs"]["by_api"][0]["calls"], 400);
}

/// A mistyped prefix (issue #41): the RETRY document, and on stderr the prefixes the capture has (the
/// document's `prefixes_seen`) and the one to try.
#[test]
fn a_mistyped_prefix_says_which_prefixes_exist_on_stderr() {
    let rel = "nsys-2025.3.1/gpu_full_node.sqlite";
    let out =
        Command::cargo_bin("nvtx-readiness").unwrap().args([&p(rel), "--range-prefix", "vibserve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc = common::one_doc(&out.stdout);
    assert_eq!(doc["suggested_prefix"], "vibeserve");
    let seen = &doc["prefixes_seen"][0];
    let err = String::from_utf8_lossy(&out.stderr);
    let line = format!(
        "nvtx-readiness: --range-prefix \"vibserve\": no `vibserve.engine.iteration` range; prefixes seen (most occurrences first): vibeserve. ({} occurrences, {} labels); try --range-prefix vibeserve",
        seen["occurrences"], seen["labels"]
    );
    assert!(err.lines().any(|l| l == line), "{err}");
    // the right prefix: no such line
    let out =
        Command::cargo_bin("nvtx-readiness").unwrap().args([&p(rel), "--range-prefix", "vibeserve"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("prefixes seen"));
}

#[test]
fn the_evidence_file_is_unchanged_and_stdin_works() {
    let rel = "nsys-2025.3.1/decode_clean.sqlite";
    let f = common::fixture(rel);
    let before = (std::fs::read(&f).unwrap(), std::fs::metadata(&f).unwrap().modified().unwrap());
    let (_, from_path) = readiness(&[&p(rel)]);
    let out = Command::cargo_bin("nvtx-readiness")
        .unwrap()
        .arg("-")
        .arg("--compact")
        .write_stdin(before.0.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let from_stdin = common::one_doc(&out.stdout);
    assert_eq!(from_stdin["source"]["path"], "<stdin>");
    assert_eq!(from_stdin["iterations"], from_path["iterations"]);
    assert_eq!(from_stdin["largest_opaque_gaps"], from_path["largest_opaque_gaps"]);
    assert_eq!(std::fs::read(&f).unwrap(), before.0);
    assert_eq!(std::fs::metadata(&f).unwrap().modified().unwrap(), before.1);
}

#[test]
fn a_report_is_exported_with_nsys() {
    let Some(nsys) = common::nsys_or_skip("a_report_is_exported_with_nsys") else { return };
    let rep = p("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    let out =
        Command::cargo_bin("nvtx-readiness").unwrap().args([&rep, "--compact", "--nsys"]).arg(&nsys).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = common::one_doc(&out.stdout);
    let (_, sqlite) = readiness(&[&p("nsys-2023.4.4/cpu_nvtx_osrt.sqlite")]);
    assert_eq!(doc["source"]["kind"], "nsys-rep");
    assert_eq!(doc["iterations"], sqlite["iterations"]);
    assert_eq!(doc["naming"], sqlite["naming"]);
}

// ---------------------------------------------------------------------------------------------------------
// Synthetic exports (hand-computed)

fn synthetic(dir: &Path, rows: &[(&str, i64, i64, i64)]) -> String {
    let path = dir.join("synthetic.sqlite");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
           category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);",
    )
    .unwrap();
    for (label, tid, s, e) in rows {
        c.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?1, ?2, 59, ?3, ?4)",
            rusqlite::params![s, e, label, tid],
        )
        .unwrap();
    }
    path.display().to_string()
}

#[test]
fn synthetic_opaque_gaps_are_hand_computed() {
    let dir = tempfile::tempdir().unwrap();
    let t = (1i64 << 24) | 1;
    let other = (1i64 << 24) | 2;
    let f = synthetic(
        dir.path(),
        &[
            // iteration 1 [0, 100): children [10, 30) and [20, 50) overlap, [80, 90); opaque 10 + 30 + 10 = 50
            ("e.engine.iteration", t, 0, 100),
            ("e.engine.scheduling", t, 10, 30),
            ("e.engine.input_preparation", t, 20, 50),
            ("e.sampling.d2h", t, 80, 90),
            // a range outside the prefix on the engine thread, twice: not a child, listed
            ("python.gc", t, 55, 60),
            ("python.gc", t, 150, 160),
            // iteration 2 [100, 200): no child at all; opaque 100
            ("e.engine.iteration", t, 100, 200),
            // a range on another thread inside iteration 2's time: not a child
            ("e.engine.scheduling", other, 120, 180),
            // the same label at depth 1 and depth 2, and ids
            ("e.step.1", t, 300, 310),
            ("e.step.2", t, 310, 320),
            ("e.engine.scheduling", t, 300, 305),
        ],
    );
    let (code, doc) = readiness(&[&f, "--range-prefix", "e", "--max-opaque-share", "0.5"]);
    assert_eq!(code, 1, "150 of 200 ns opaque = 0.75 >= 0.5");
    assert_eq!(doc["iterations"]["wall_ns"], 200);
    assert_eq!(doc["iterations"]["named_ns"], 50);
    assert_eq!(doc["iterations"]["opaque_ns"], 150);
    assert_eq!(doc["iterations"]["opaque_share"], 0.75);
    assert_eq!(doc["iterations"]["without_children"], 1);
    let gaps: Vec<(i64, i64, Value, Value)> = doc["largest_opaque_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["start"].as_i64().unwrap(), g["end"].as_i64().unwrap(), g["after"].clone(), g["before"].clone()))
        .collect();
    let s = |x: &str| Value::String(x.into());
    assert_eq!(
        gaps,
        vec![
            (100, 200, Value::Null, Value::Null),
            (50, 80, s("e.engine.input_preparation"), s("e.sampling.d2h")),
            (0, 10, Value::Null, s("e.engine.scheduling")),
            (90, 100, s("e.sampling.d2h"), Value::Null),
        ]
    );
    assert_eq!(
        doc["naming"]["outside_prefix_on_engine_threads"],
        serde_json::json!([{"label": "python.gc", "occurrences": 2, "wall_ns": 15}])
    );
    assert_eq!(
        doc["naming"]["labels_with_ids"],
        serde_json::json!([{"pattern": "e.step.<n>", "labels": 2, "occurrences": 2, "examples": ["e.step.1", "e.step.2"]}])
    );
    assert_eq!(
        doc["naming"]["labels_at_several_depths"],
        serde_json::json!([{"label": "e.engine.scheduling", "depths": {"0": 1, "1": 2}}])
    );
    assert_eq!(doc["unenclosed_syncs"]["runtime_table"], false);
    // READY once the threshold is above the measured 0.75
    let (code, _) = readiness(&[&f, "--range-prefix", "e", "--max-opaque-share", "0.8"]);
    assert_eq!(code, 0);
}

/// A framework's own ranges (emit_nvtx op labels) are folded as they are read: listed outside the prefix by
/// their folded label, while `labels_with_ids` still counts and shows their raw labels; a label of the user's own
/// that emit_nvtx annotated (`my_block, op_id = N`: its fold is not a framework's) stays raw.
#[test]
fn synthetic_framework_labels_are_folded_and_their_raw_labels_counted() {
    let dir = tempfile::tempdir().unwrap();
    let t = (1i64 << 24) | 1;
    let f = synthetic(
        dir.path(),
        &[
            ("e.engine.iteration", t, 0, 100),
            ("e.engine.scheduling", t, 0, 100),
            ("aten::mm, op_id = 3", t, 10, 20),
            ("aten::mm, op_id = 1", t, 30, 40),
            ("aten::mm, seq = 2, op_id = 2", t, 50, 55),
            ("my_block, op_id = 9", t, 60, 70),
            ("my_block, op_id = 9", t, 70, 75),
        ],
    );
    let (_, doc) = readiness(&[&f, "--range-prefix", "e"]);
    assert_eq!(
        doc["naming"]["outside_prefix_on_engine_threads"],
        serde_json::json!([
            {"label": "aten::mm", "occurrences": 3, "wall_ns": 25},
            {"label": "my_block, op_id = 9", "occurrences": 2, "wall_ns": 15}
        ])
    );
    // no prefix: every label's patterns, the framework's raw labels by their first occurrence
    let sub = dir.path().join("g");
    std::fs::create_dir(&sub).unwrap();
    let g = synthetic(
        &sub,
        &[
            ("aten::mm, op_id = 3", t, 10, 20),
            ("aten::mm, op_id = 1", t, 30, 40),
            ("aten::mm, seq = 2, op_id = 2", t, 50, 55),
            ("my_block, op_id = 9", t, 60, 70),
        ],
    );
    // the same raw label once more through StringIds (a textId row, read raw): one raw label, four occurrences
    let c = Connection::open(&g).unwrap();
    c.execute_batch(&format!(
        "INSERT INTO StringIds (id, value) VALUES (1, 'aten::mm, op_id = 3');
         INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) VALUES (80, 90, 59, 1, {t});"
    ))
    .unwrap();
    drop(c);
    let (_, doc) = readiness(&[&g]);
    assert_eq!(
        doc["naming"]["labels_with_ids"],
        serde_json::json!([
            {"pattern": "aten::mm", "labels": 3, "occurrences": 4,
             "examples": ["aten::mm, op_id = 3", "aten::mm, op_id = 1", "aten::mm, seq = 2, op_id = 2"]},
            {"pattern": "my_block", "labels": 1, "occurrences": 1, "examples": ["my_block, op_id = 9"]}
        ])
    );
}

#[test]
fn bad_input_exits_2_naming_the_fault() {
    let err = fails(&["/nonexistent/x.sqlite"]);
    assert!(err.contains("/nonexistent/x.sqlite") && err.contains("no such file"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("not.sqlite");
    std::fs::write(&txt, "hello").unwrap();
    let err = fails(&[txt.to_str().unwrap()]);
    assert!(err.contains("not an SQLite file"), "{err}");
    let err = fails(&[&p("nsys-2025.3.1/decode_clean.sqlite"), "--max-opaque-share", "2"]);
    assert!(err.contains("--max-opaque-share"), "{err}");
    // a missing column is named
    let f = dir.path().join("nocol.sqlite");
    let c = Connection::open(&f).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds (id INTEGER, value TEXT); CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);",
    )
    .unwrap();
    drop(c);
    let err = fails(&[f.to_str().unwrap()]);
    assert!(err.contains("NVTX_EVENTS") && err.contains("textId"), "{err}");
}

#[test]
fn help_example_runs() {
    // the help's examples run as printed in tests/it/help_examples.rs; this is the documented command of docs/nvtx-readiness.md
    let out = Command::cargo_bin("nvtx-readiness")
        .unwrap()
        .current_dir(common::root())
        .args(["fixtures/nsys-2025.3.1/gpu_full_node.sqlite", "--range-prefix", "vibeserve", "--pretty"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    common::one_doc(&out.stdout);
}

// ---------------------------------------------------------------------------------------------------------
// gate-check G8 and bundle-merge

#[test]
fn gate_check_reports_readiness_as_g8() {
    let f = p("nsys-2025.3.1/gpu_full_node.sqlite");
    let out = Command::cargo_bin("gate-check").unwrap().args([&f, "--compact"]).output().unwrap();
    let plain = common::one_doc(&out.stdout);
    assert!(plain["gates"].as_array().unwrap().iter().all(|g| g["id"] != "G8"), "G8 only with --readiness");

    let out = Command::cargo_bin("gate-check")
        .unwrap()
        .args([&f, "--readiness", "--range-prefix", "vibeserve", "--compact"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = common::one_doc(&out.stdout);
    let g8 = doc["gates"].as_array().unwrap().iter().find(|g| g["id"] == "G8").unwrap().clone();
    let (_, r) = readiness(&[&f, "--range-prefix", "vibeserve"]);
    assert_eq!(g8["name"], "nvtx-readiness");
    assert_eq!(g8["verdict"], "PASS");
    assert_eq!(g8["measured"], r["iterations"]["opaque_share"]);
    assert_eq!(g8["threshold"], 0.05);
    assert_eq!(g8["reason"], r["reason"]);
    assert_eq!(g8["at_ns"], r["largest_opaque_gaps"][0]["start"]);
    assert!(g8["evidence"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().contains("vibeserve.request.<n>")));

    let out = Command::cargo_bin("gate-check")
        .unwrap()
        .args([&f, "--readiness", "--max-opaque-share", "0.001", "--compact"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc = common::one_doc(&out.stdout);
    assert_eq!(doc["verdict"], "RETRY");
    assert_eq!(doc["retry"], serde_json::json!(["G8"]));

    let out = Command::cargo_bin("gate-check").unwrap().args([&f, "--range-prefix", "vibeserve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--range-prefix needs --readiness");
}

#[test]
fn a_readiness_document_merges_into_the_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    let out = Command::cargo_bin("nvtx-readiness")
        .unwrap()
        .args([&p("nsys-2025.3.1/decode_clean.sqlite"), "--compact"])
        .output()
        .unwrap();
    let doc = common::one_doc(&out.stdout);
    let m = Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(out.stdout.clone()).output().unwrap();
    assert_eq!(m.status.code(), Some(0), "{}", String::from_utf8_lossy(&m.stderr));
    common::one_doc(&m.stdout);
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(b["kernel_profile"]["readiness"], doc);
    // and through the library: the document read back from the library merges at the same place
    let lib =
        nsyskit::nvtx_readiness::run(&common::fixture("nsys-2025.3.1/decode_clean.sqlite"), &Default::default(), None)
            .unwrap();
    let value = serde_json::to_value(&lib).unwrap();
    common::assert_valid(&value);
    let (text, merged) = nsyskit::bundle_merge::merge_text(
        None,
        "bundle.json",
        &[nsyskit::bundle_merge::DocIn { value: value.clone(), source: "lib".into(), line: 1 }],
    )
    .unwrap();
    assert_eq!(merged.len(), 1);
    let b: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(b["kernel_profile"]["readiness"]["iterations"], doc["iterations"]);
    assert_eq!(b["kernel_profile"]["readiness"]["verdict"], "READY");
}

#[test]
fn serve_node_a_real_http_engine_is_ready() {
    let rel = "nsys-2025.3.1/serve_node.sqlite";
    let (code, doc) = readiness(&[&p(rel)]);
    assert_eq!(code, 0);
    assert_eq!(doc["source"]["range_prefix"], "vibeserve");
    assert_eq!(
        present(&doc),
        ["engine.iteration", "engine.scheduling", "engine.input_preparation", "graph.replay", "sampling.d2h"]
    );
    assert_eq!(doc["iterations"]["occurrences"], 1190);
    check_opaque_against_reference(rel, &doc);
    // the largest gap opens an iteration, before scheduling: where a range is missing
    let g = &doc["largest_opaque_gaps"][0];
    assert_eq!(g["start"], g["iteration_start"]);
    assert_eq!(g["before"], "vibeserve.engine.scheduling");
}

#[test]
fn no_iteration_label_and_no_prefix_is_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let t = (1i64 << 24) | 1;
    let f = synthetic(dir.path(), &[("app.step", t, 0, 100), ("app.step.inner", t, 10, 20)]);
    let (code, doc) = readiness(&[&f]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    assert_eq!(doc["source"]["range_prefix"], Value::Null);
    assert_eq!(doc["source"]["range_prefix_inferred"], false);
    assert_eq!(doc["taxonomy"], Value::Array(vec![]));
    assert_eq!(doc["iterations"]["opaque_share"], Value::Null);
    assert!(doc["reason"]
        .as_str()
        .unwrap()
        .starts_with("add instrumentation before choosing an optimisation: no `<P>.engine.iteration` range"));
    assert!(doc["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("--range-prefix")));
}

#[test]
fn hf_capture_names_prefixes_suggests_hf_and_counts_syncs_in_any_range() {
    // fixtures/nsys-2025.3.1/hf_node (issue #14): emit_nvtx labels + our own hf.* ranges, no *.engine.iteration
    let dir = tempfile::tempdir().unwrap();
    let src = common::fixture("nsys-2025.3.1/hf_node.sqlite.xz");
    let out = dir.path().join("hf_node.sqlite");
    let x = std::process::Command::new("xz").arg("-dc").arg(&src).output().expect("xz");
    std::fs::write(&out, &x.stdout).unwrap();
    let o = assert_cmd::Command::cargo_bin("nvtx-readiness").unwrap().arg(&out).arg("--compact").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["suggested_prefix"], "hf");
    let reason = doc["reason"].as_str().unwrap();
    assert!(reason.contains("prefixes seen: hf. (4 labels, 100 occurrences)"), "{reason}");
    assert!(reason.contains("try --range-prefix hf"), "{reason}");
    // no prefix: a sync inside ANY range is enclosed (120 of 123; 3 cudaDeviceSynchronize outside every range)
    assert_eq!(doc["unenclosed_syncs"]["sync_calls"], 123);
    assert_eq!(doc["unenclosed_syncs"]["enclosed_calls"], 120);
    // id-bearing labels are naming findings, folded by the shared rule (hashes kept apart)
    let ids = doc["naming"]["labels_with_ids"].as_array().unwrap();
    assert_eq!(ids[0]["pattern"], "aten::as_strided");
    assert_eq!(ids[0]["occurrences"], 2440);
    assert!(!ids.iter().any(|i| i["pattern"].as_str().unwrap().contains("Torch-Compiled Region: 0/<n>")));
    // with the suggested prefix: hf.batch.<n> is the only id-bearing label under it
    let o = assert_cmd::Command::cargo_bin("nvtx-readiness")
        .unwrap()
        .arg(&out)
        .args(["--range-prefix", "hf", "--compact"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["naming"]["labels_with_ids"][0]["pattern"], "hf.batch.<n>");
    assert_eq!(doc["naming"]["labels_with_ids"].as_array().unwrap().len(), 1);
    assert_eq!(doc["unenclosed_syncs"]["enclosed_calls"], 120);
}

/// Seed B93, "ranges captured inside a graph are not re-emitted per replay": on the real transformers capture
/// (torch.compile reduce-overhead, emit_nvtx) the op ranges recorded while the thread captured its CUDA graph are
/// counted and named, as our own SQL finds them; a capture whose graph capture holds no range says nothing.
#[test]
fn ranges_recorded_inside_a_graph_capture_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let c = rusqlite::Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let want: i64 = c
        .query_row(
            "WITH cap AS (SELECT r.globalTid t, r.start, r.end, s.value n FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                          JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cu%StreamBeginCapture%'
                          OR s.value LIKE 'cu%StreamEndCapture%'),
                  win AS (SELECT b.t, b.start s, (SELECT min(e.end) FROM cap e WHERE e.t = b.t
                          AND e.n LIKE '%EndCapture%' AND e.start > b.start) e FROM cap b WHERE b.n LIKE '%BeginCapture%')
             SELECT count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds x ON x.id = n.textId
             JOIN win w ON n.globalTid = w.t AND n.start >= w.s AND n.end <= w.e
             WHERE n.eventType IN (59, 60) AND COALESCE(n.text, x.value) IS NOT NULL
             AND n.end < (SELECT duration FROM ANALYSIS_DETAILS)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(want > 50, "{want}");
    let o = assert_cmd::Command::cargo_bin("nvtx-readiness").unwrap().arg(&p).arg("--compact").output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &doc["cuda_graphs"]["ranges_in_capture"];
    assert_eq!(r["occurrences"].as_i64().unwrap(), want);
    assert_eq!(r["captures"], 1);
    assert_eq!(r["labels"][0]["label"], "aten::mm");
    let n: i64 = r["labels"].as_array().unwrap().iter().map(|l| l["occurrences"].as_i64().unwrap()).sum();
    assert!(n <= want);
    assert!(doc["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("never when the graph replays")));
    // gpu_full_node captures its decode graph too, with no range inside the capture
    let f = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let o = assert_cmd::Command::cargo_bin("nvtx-readiness").unwrap().arg(&f).arg("--compact").output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["cuda_graphs"].get("ranges_in_capture").is_none(), "{}", doc["cuda_graphs"]);
}
