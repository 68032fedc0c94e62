//! `gate-check` on the real captures (fixtures/README.md) and on synthetic edge cases.

use crate::common;

use assert_cmd::Command;
use common::{fixture, gate, one_doc};
use serde_json::Value;

fn gate_check(args: &[&str]) -> (i32, Value, String) {
    let out = Command::cargo_bin("gate-check").unwrap().args(args).arg("--compact").output().unwrap();
    let code = out.status.code().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(code == 0 || code == 1, "exit {code}, stderr: {stderr}");
    (code, one_doc(&out.stdout), stderr)
}

fn fails(args: &[&str]) -> String {
    let out = Command::cargo_bin("gate-check").unwrap().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stdout.is_empty(), "no document on an error");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked") && !stderr.contains("internal error"), "{stderr}");
    stderr
}

fn retry(doc: &Value) -> Vec<String> {
    doc["retry"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

fn p(rel: &str) -> String {
    fixture(rel).display().to_string()
}

#[test]
fn gpu_full_node_passes() {
    let f = p("nsys-2025.3.1/gpu_full_node.sqlite");
    let before = std::fs::metadata(&f).unwrap();
    let bytes = std::fs::read(&f).unwrap();
    let (code, doc, _) = gate_check(&[&f]);
    assert_eq!(code, 0);
    assert_eq!(doc["schema"], "nsyskit.gate/v1");
    assert_eq!(doc["tool"]["name"], "gate-check");
    assert_eq!(doc["verdict"], "PASS");
    assert_eq!(doc["tier"], "throughput");
    let ids: Vec<&str> = doc["gates"].as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["G0", "G1", "G2", "G3", "G4", "G5", "G6", "G7"]);
    assert_eq!(gate(&doc, "G0")["verdict"], "PASS");
    assert_eq!(gate(&doc, "G1")["verdict"], "PASS");
    assert_eq!(gate(&doc, "G1")["measured"], 9400.0); // 200 replays × 47 nodes
                                                      // no report to measure: an export was given (the documented small-capture case: G2 skips)
    assert_eq!(gate(&doc, "G2")["verdict"], "SKIP");
    assert_eq!(gate(&doc, "G3")["measured"], 9579.0);
    assert_eq!(gate(&doc, "G4")["measured"], 0.0);
    let g5 = gate(&doc, "G5");
    assert_eq!(g5["verdict"], "PASS");
    assert_eq!(g5["at_ns"], 8423154279i64);
    assert!(
        g5["evidence"].to_string().contains("kernel starts per tenth of the window: 43 3 1 2 0 6 35 289 0 9200"),
        "{g5}"
    );
    assert_eq!(gate(&doc, "G6")["verdict"], "SKIP");
    assert!(doc["source"]["nsys_version"].as_str().unwrap().starts_with("2025.3"), "{}", doc["source"]); // META_DATA_EXPORT says 2025.3.2.0
                                                                                                         // the evidence is untouched
    let after = std::fs::metadata(&f).unwrap();
    assert_eq!(before.modified().unwrap(), after.modified().unwrap());
    assert_eq!(bytes, std::fs::read(&f).unwrap());
}

#[test]
fn gpu_full_graph_retries_at_g1() {
    let (code, doc, _) = gate_check(&[&p("nsys-2025.3.1/gpu_full_graph.sqlite")]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    assert_eq!(retry(&doc), ["G1"]);
    let g1 = gate(&doc, "G1");
    assert_eq!(g1["measured"], 0.0);
    let reason = g1["reason"].as_str().unwrap();
    assert!(reason.contains("--cuda-graph-trace=node") && reason.contains("200 opaque GRAPH_TRACE rows"), "{reason}");
    assert!(g1["evidence"].to_string().contains("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE=Graph"));
}

#[test]
fn gpu_range_graph_retries_at_g1() {
    let (code, doc, _) = gate_check(&[&p("nsys-2023.4.4/gpu_range_graph.sqlite")]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G1"]);
    let g1 = gate(&doc, "G1");
    assert!(g1["reason"].as_str().unwrap().contains("not in the export"), "{}", g1["reason"]);
    assert!(g1["evidence"].to_string().contains("cudaGraphLaunch calls 200"));
}

#[test]
fn failed_capture_retries_at_g0_with_its_log() {
    let (code, doc, _) = gate_check(&[
        &p("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite"),
        "--log",
        &p("logs/nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt"),
    ]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G0", "G4"]);
    let g0 = gate(&doc, "G0");
    let reason = g0["reason"].as_str().unwrap();
    assert!(reason.contains("unknown-runtime-api (runtime API function index 468)"), "{reason}");
    assert!(reason.contains("older than the application's CUDA runtime"), "{reason}");
    assert!(reason.contains("analysis-failed"), "{reason}");
    assert!(g0["measured"].as_f64().unwrap() >= 2.0);
    assert!(g0["evidence"].to_string().contains("FAILED-cbid468.console.txt:"), "{}", g0["evidence"]);
}

#[test]
fn failed_capture_retries_at_g4_without_its_log() {
    let (code, doc, _) = gate_check(&[&p("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite")]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G4"]);
    assert_eq!(gate(&doc, "G0")["verdict"], "SKIP"); // nsys 2023.4 writes no DIAGNOSTIC_EVENT
    let g4 = gate(&doc, "G4");
    assert_eq!(g4["at_ns"], 7567576464i64); // the last CUDA runtime row ends here
    let share = g4["measured"].as_f64().unwrap();
    assert!((share - 1022.0 / 1028.0).abs() < 1e-12, "{share}");
    assert!(g4["reason"].as_str().unwrap().contains("CUDA data stops at 7.568 s"), "{}", g4["reason"]);
    // the threshold is a flag
    let (code, doc, _) =
        gate_check(&[&p("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite"), "--max-nvtx-after-cuda-share", "1"]);
    assert_eq!(code, 0);
    assert_eq!(gate(&doc, "G4")["verdict"], "PASS");
}

#[test]
fn cpu_captures_retry_at_g3() {
    for f in ["nsys-2023.4.4/cpu_nvtx_osrt.sqlite", "nsys-2025.3.1/cpu_nvtx_osrt.sqlite"] {
        let (code, doc, _) = gate_check(&[&p(f)]);
        assert_eq!(code, 1, "{f}");
        let g3 = gate(&doc, "G3");
        assert_eq!(g3["verdict"], "RETRY", "{f}");
        assert_eq!(g3["measured"], 0.0);
        assert!(g3["reason"].as_str().unwrap().starts_with("no CUDA kernel data"));
        // CUDA tracing was off: G1 says so too; nothing else is judged on absent data
        assert_eq!(retry(&doc), ["G1", "G3"], "{f}");
        assert!(gate(&doc, "G1")["evidence"].to_string().contains("COLLECT_CUDA_TRACE=false"));
    }
}

#[test]
fn g5_finds_long_empty_stretches() {
    // with thresholds lowered to the toy workload's scale, gpu_full_node's 123 ms hole is "long"
    let (code, doc, _) =
        gate_check(&[&p("nsys-2025.3.1/gpu_full_node.sqlite"), "--max-gap-share", "0.1", "--min-gap-ms", "100"]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G5"]);
    let g5 = gate(&doc, "G5");
    assert_eq!(g5["at_ns"], 8423154279i64);
    let reason = g5["reason"].as_str().unwrap();
    assert!(reason.contains("8.423 s – 8.547 s") && reason.contains("8.116 s – 8.236 s"), "{reason}");
    // the decode tier does not judge traffic
    let (_, doc, _) = gate_check(&[&p("nsys-2025.3.1/gpu_full_node.sqlite"), "--tier", "decode", "--min-gap-ms", "1"]);
    assert_eq!(gate(&doc, "G5")["verdict"], "SKIP");
}

#[test]
fn qdstrm_retries_at_g2_and_skips_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("capture.qdstrm");
    std::fs::write(&q, b"QDSTRM raw stream stand-in").unwrap();
    let (code, doc, _) = gate_check(&[q.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G2"]);
    assert!(gate(&doc, "G2")["reason"].as_str().unwrap().contains("a .qdstrm, nsys's raw capture stream"));
    for id in ["G0", "G1", "G3", "G4", "G5", "G6", "G7"] {
        assert_eq!(gate(&doc, id)["verdict"], "SKIP", "{id}");
    }
    assert_eq!(doc["source"]["kind"], "qdstrm");
}

#[test]
fn report_with_its_export_checks_size() {
    let rep = p("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    let sql = p("nsys-2023.4.4/cpu_nvtx_osrt.sqlite");
    let (code, doc, _) = gate_check(&[&rep, "--sqlite", &sql]);
    assert_eq!(code, 1);
    let g2 = gate(&doc, "G2");
    assert_eq!(g2["verdict"], "RETRY");
    assert_eq!(g2["measured"], 214193.0);
    assert_eq!(g2["threshold"], 10000000.0);
    assert!(g2["reason"].as_str().unwrap().contains("idle or failed capture"));
    assert_eq!(doc["source"]["sqlite"], sql.as_str());
    // the documented override for a deliberately small capture
    let (_, doc, _) = gate_check(&[&rep, "--sqlite", &sql, "--min-rep-bytes", "100000"]);
    assert_eq!(gate(&doc, "G2")["verdict"], "PASS");
    assert_eq!(gate(&doc, "G2")["threshold"], 100000.0);
    // decode tier default: 1 MB
    let (_, doc, _) = gate_check(&[&rep, "--sqlite", &sql, "--tier", "decode"]);
    assert_eq!(gate(&doc, "G2")["threshold"], 1000000.0);
}

#[test]
fn real_report_is_exported_with_nsys() {
    let Some(_nsys) = common::nsys_or_skip("real_report_is_exported_with_nsys") else { return };
    let rep = p("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    let dir = fixture("nsys-2023.4.4");
    let before: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    let (code, doc, _) = gate_check(&[&rep]);
    assert_eq!(code, 1);
    let (_, doc2, _) = gate_check(&[&rep, "--nsys", _nsys.to_str().unwrap()]);
    assert_eq!(doc2["source"]["exported_with"], _nsys.to_str().unwrap());
    assert_eq!(doc2["retry"], doc["retry"]);
    assert_eq!(doc["source"]["kind"], "nsys-rep");
    assert_eq!(doc["source"]["sqlite"], "exported");
    assert!(doc["source"]["exported_with"].is_string());
    assert_eq!(retry(&doc), ["G1", "G2", "G3"]);
    assert!(doc["source"]["nsys_version"].as_str().unwrap().starts_with("2023.4"));
    // nothing written next to the evidence
    let after: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after);
}

#[test]
fn unusable_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    // truncated export
    let full = std::fs::read(fixture("nsys-2025.3.1/gpu_full_node.sqlite")).unwrap();
    let t = dir.path().join("truncated.sqlite");
    std::fs::write(&t, &full[..full.len() / 2]).unwrap();
    let e = fails(&[t.to_str().unwrap()]);
    assert!(e.contains("truncated.sqlite") && e.contains("truncated"), "{e}");
    // garbage
    let g = dir.path().join("garbage.sqlite");
    std::fs::write(&g, b"this is not a database at all, just text\n".repeat(50)).unwrap();
    let e = fails(&[g.to_str().unwrap()]);
    assert!(e.contains("garbage.sqlite") && e.contains("not an SQLite file"), "{e}");
    // garbage report given with garbage export
    let e = fails(&[&p("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"), "--sqlite", g.to_str().unwrap()]);
    assert!(e.contains("garbage.sqlite"), "{e}");
    // SQLite, but not an nsys export
    let o = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&o).unwrap().execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
    let e = fails(&[o.to_str().unwrap()]);
    assert!(e.contains("other.sqlite") && e.contains("StringIds"), "{e}");
    // a report that nsys cannot export (here: a garbage file; nsys 2023.4 also refuses 2025.x reports)
    let bad_rep = dir.path().join("bad.nsys-rep");
    std::fs::write(&bad_rep, b"not a report").unwrap();
    let e = fails(&[bad_rep.to_str().unwrap(), "--nsys", "/nonexistent/nsys"]);
    assert!(e.contains("/nonexistent/nsys"), "{e}");
    // missing file, missing log, bad flags
    let e = fails(&["/nonexistent/cap.sqlite"]);
    assert!(e.contains("/nonexistent/cap.sqlite: no such file"), "{e}");
    let f = p("nsys-2025.3.1/gpu_full_node.sqlite");
    let e = fails(&[&f, "--log", "/nonexistent/log.txt"]);
    assert!(e.contains("/nonexistent/log.txt"), "{e}");
    fails(&[&f, "--tier", "latency"]);
    let e = fails(&[&f, "--max-gap-share", "1.5"]);
    assert!(e.contains("--max-gap-share"), "{e}");
    let e = fails(&[&f, "--sqlite", &f]);
    assert!(e.contains("--sqlite"), "{e}");
    // a provenance file that is not JSON names file and line
    let bad = dir.path().join("prov.json");
    std::fs::write(&bad, "{\n  \"capture\": \n").unwrap();
    let e = fails(&[&f, "--provenance", bad.to_str().unwrap()]);
    assert!(e.contains("prov.json: line"), "{e}");
}

/// A small synthetic export: a graph launch whose kernels carry no graphNodeId, and no graph-mode row.
fn synthetic_export(
    dir: &std::path::Path,
    name: &str,
    with_node_rows: bool,
    diagnostics: &[(i64, &str)],
) -> std::path::PathBuf {
    let path = dir.join(name);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);
         INSERT INTO StringIds VALUES (1, 'cudaGraphLaunch_v10000'), (2, 'k');
         CREATE TABLE META_DATA_CAPTURE(name TEXT, value TEXT);
         INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:COMMAND', 'python3'), ('PROCESS_0:ARGUMENT_0', 'serve.py'),
                                              ('PROCESS_0:COLLECT_CUDA_TRACE', 'true');
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (100, 200, 16777217, 7, 1);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER, end INTEGER, globalPid INTEGER, correlationId INTEGER, graphNodeId INTEGER);
         CREATE TABLE DIAGNOSTIC_EVENT(timestamp INTEGER, timestampType INTEGER, source INTEGER, severity INTEGER, text TEXT, globalPid INTEGER);",
    )
    .unwrap();
    let node = if with_node_rows { "5" } else { "NULL" };
    c.execute_batch(&format!("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (300, 400, 16777216, 7, {node});"))
        .unwrap();
    for (sev, text) in diagnostics {
        c.execute("INSERT INTO DIAGNOSTIC_EVENT VALUES (10, 1, 1, ?1, ?2, 0)", rusqlite::params![sev, text]).unwrap();
    }
    path
}

#[test]
fn g1_decides_from_data_and_provenance_when_metadata_is_silent() {
    let dir = tempfile::tempdir().unwrap();
    let graph = synthetic_export(dir.path(), "graph.sqlite", false, &[]);
    let (code, doc, _) = gate_check(&[graph.to_str().unwrap()]);
    assert_eq!(code, 1);
    let g1 = gate(&doc, "G1");
    assert_eq!(g1["verdict"], "RETRY");
    assert!(
        g1["reason"].as_str().unwrap().contains("1 cudaGraphLaunch calls but no KERNEL row has a graphNodeId"),
        "{}",
        g1["reason"]
    );
    let node = synthetic_export(dir.path(), "node.sqlite", true, &[]);
    let (_, doc, _) = gate_check(&[node.to_str().unwrap()]);
    assert_eq!(gate(&doc, "G1")["verdict"], "PASS");
    // no NVTX at all: the decode tier cannot find steps (a RETRY, not an error)
    let (code, doc, _) = gate_check(&[node.to_str().unwrap(), "--tier", "decode"]);
    assert_eq!(code, 1);
    assert!(gate(&doc, "G6")["reason"].as_str().unwrap().contains("no NVTX_EVENTS table"), "{}", gate(&doc, "G6"));
    assert_eq!(gate(&doc, "G7")["verdict"], "SKIP");
    // the provenance's flags decide the mode when META_DATA_CAPTURE has none
    let prov = dir.path().join("prov.json");
    std::fs::write(
        &prov,
        r#"{"schema":"nsyskit.provenance/v1","capture":{"flags":"--trace=cuda,nvtx,osrt --cuda-graph-trace=graph"}}"#,
    )
    .unwrap();
    let (code, doc, _) = gate_check(&[node.to_str().unwrap(), "--provenance", prov.to_str().unwrap()]);
    assert_eq!(code, 1);
    let g1 = gate(&doc, "G1");
    assert!(g1["reason"].as_str().unwrap().contains("from --provenance"), "{}", g1["reason"]);
    assert_eq!(doc["source"]["provenance"], prov.to_str().unwrap());
}

#[test]
fn g0_names_the_cause_in_diagnostics_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    let e = synthetic_export(
        dir.path(),
        "diag.sqlite",
        true,
        &[
            (2, "No CUDA events collected. Does the process use CUDA?"),
            (3, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: ERR_NVGPUCTRPERM"),
        ],
    );
    let (code, doc, _) = gate_check(&[e.to_str().unwrap()]);
    assert_eq!(code, 1);
    let g0 = gate(&doc, "G0");
    assert_eq!(g0["measured"], 1.0); // the warning is not a finding
    assert!(g0["reason"].as_str().unwrap().contains("permission"), "{}", g0["reason"]);
    let log = dir.path().join("console.txt");
    std::fs::write(
        &log,
        "Collecting data...\nCUPTI_ERROR_INVALID_DEVICE: cuptiActivityEnable failed\nCUDA versions. CUPTI/Runtime/Driver: 12.4/12.4/11.8\n",
    )
    .unwrap();
    let clean = synthetic_export(dir.path(), "node.sqlite", true, &[]);
    let (_, doc, _) = gate_check(&[clean.to_str().unwrap(), "--log", log.to_str().unwrap()]);
    let reason = gate(&doc, "G0")["reason"].as_str().unwrap().to_string();
    // the dotted versions line: runtime 12.4 vs driver 11.8 is named as a toolkit-vs-driver major skew
    assert!(
        reason.contains(
            "toolkit-vs-driver major-version skew: CUDA runtime 12.4 vs driver 11.8 (CUPTI failed to initialise)"
        ),
        "{reason}"
    );
    // the real logs of the captures that worked have no finding
    for log in [
        "logs/nsys-2025.3.1_gpu_full_node.console.txt",
        "logs/nsys-2025.3.1_gpu_full_graph.console.txt",
        "logs/nsys-2023.4.4_gpu_range_node.console.txt",
        "logs/nsys-2023.4.4_cpu_nvtx_osrt.console.txt",
    ] {
        let (code, doc, _) = gate_check(&[&p("nsys-2025.3.1/gpu_full_node.sqlite"), "--log", &p(log)]);
        assert_eq!(code, 0, "{log}");
        assert_eq!(gate(&doc, "G0")["measured"], 0.0, "{log}");
    }
}

#[test]
fn decode_clean_passes_the_decode_tier() {
    let (code, doc, _) = gate_check(&[&p("nsys-2025.3.1/decode_clean.sqlite"), "--tier", "decode"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["verdict"], "PASS");
    assert_eq!(doc["tier"], "decode");
    assert_eq!(gate(&doc, "G5")["verdict"], "SKIP");
    let g6 = gate(&doc, "G6");
    assert_eq!(g6["verdict"], "PASS");
    assert!((g6["measured"].as_f64().unwrap() - 398.0 / 399.0).abs() < 1e-12, "{g6}");
    let ev = g6["evidence"].to_string();
    assert!(ev.contains("step label vibeserve.engine.iteration (the most frequent iteration-like label)"), "{ev}");
    // fixtures/README.md: step gaps min/median/p90/max 323/467/512/984 µs (start-to-start, truncated to µs here)
    assert!(ev.contains("min/median/p90/max 322/466/511/984 µs"), "{ev}");
    assert!(ev.contains("most frequent 50 in 400 of 400 steps"), "{ev}");
    let g7 = gate(&doc, "G7");
    assert_eq!(g7["verdict"], "PASS");
    assert_eq!(g7["measured"], 0.0);
}

#[test]
fn decode_mixed_retries_at_g7() {
    let (code, doc, _) = gate_check(&[&p("nsys-2025.3.1/decode_mixed.sqlite"), "--tier", "decode"]);
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G7"]);
    assert_eq!(gate(&doc, "G6")["verdict"], "PASS"); // the steps are regular; 15 of 400 are prefill-contaminated
    let g7 = gate(&doc, "G7");
    assert_eq!(g7["measured"], 15.0 / 400.0);
    assert_eq!(g7["threshold"], 0.01);
    let reason = g7["reason"].as_str().unwrap();
    assert!(reason.contains("15 of 400 decode steps") && reason.contains("15 contain a prefill range"), "{reason}");
    assert_eq!(g7["at_ns"], 22532138i64); // the first contaminated step
                                          // the threshold is a flag
    let (code, doc, _) =
        gate_check(&[&p("nsys-2025.3.1/decode_mixed.sqlite"), "--tier", "decode", "--max-contaminated-share", "0.05"]);
    assert_eq!(code, 0);
    assert_eq!(gate(&doc, "G7")["verdict"], "PASS");
}

#[test]
fn decode_range_flag_picks_the_step_label() {
    let f = p("nsys-2025.3.1/decode_clean.sqlite");
    // a label that is not a decode step: its intervals are irregular or it carries no kernel
    let (code, doc, _) = gate_check(&[&f, "--tier", "decode", "--decode-range", "vibeserve.api.poll"]);
    assert_eq!(code, 1);
    let g6 = gate(&doc, "G6");
    assert_eq!(g6["verdict"], "RETRY");
    assert!(g6["reason"].as_str().unwrap().contains("only 3 vibeserve.api.poll steps"), "{}", g6["reason"]);
    // an unknown label lists what exists
    let (code, doc, _) = gate_check(&[&f, "--tier", "decode", "--decode-range", "nope"]);
    assert_eq!(code, 1);
    let reason = gate(&doc, "G6")["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("--decode-range nope: no such NVTX range")
            && reason.contains("vibeserve.engine.iteration (400)"),
        "{reason}"
    );
    assert_eq!(gate(&doc, "G7")["verdict"], "SKIP");
    // a CPU-only capture: its steps carry no kernel
    let (_, doc, _) = gate_check(&[&p("nsys-2023.4.4/cpu_nvtx_osrt.sqlite"), "--tier", "decode"]);
    assert!(gate(&doc, "G6")["reason"].as_str().unwrap().contains("carry no kernel"));
    assert_eq!(gate(&doc, "G7")["verdict"], "SKIP");
}

#[test]
fn export_on_stdin() {
    let bytes = std::fs::read(fixture("nsys-2025.3.1/gpu_full_graph.sqlite")).unwrap();
    let out = Command::cargo_bin("gate-check").unwrap().arg("-").arg("--compact").write_stdin(bytes).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc = one_doc(&out.stdout);
    assert_eq!(doc["source"]["path"], "<stdin>");
    assert_eq!(retry(&doc), ["G1"]);
    assert!(gate(&doc, "G1")["evidence"].to_string().contains("<stdin>: cudaGraphLaunch calls 200"));
    let out = Command::cargo_bin("gate-check").unwrap().arg("-").write_stdin("garbage").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("<stdin>: not an SQLite file"), "{e}");
}

#[test]
fn real_serve_capture_with_its_log_and_provenance() {
    // fixtures/serve-capture-gpu: a real serve-capture run on the H200; gate.json is what gate-check wrote
    // there on the .nsys-rep (RETRY at G2 only: a deliberately short 1.9 MB report)
    let f = p("nsys-2025.3.1/serve_node.sqlite");
    let prov = p("serve-capture-gpu/provenance.json");
    let (code, doc, _) = gate_check(&[&f, "--log", &p("serve-capture-gpu/nsys.log"), "--provenance", &prov]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["verdict"], "PASS");
    let g1 = gate(&doc, "G1");
    assert!(
        g1["evidence"]
            .to_string()
            .contains("capture.flags_argv: profile --trace=cuda,nvtx,osrt --cuda-graph-trace=node"),
        "{}",
        g1["evidence"]
    );
    // written on the GPU machine before gate verdicts were uppercase and whole numbers integers (issue #41): read
    // as bundle-merge and report read it (the lowercase is accepted), compared verdict by verdict, number by number
    let recorded = std::fs::read(fixture("serve-capture-gpu/gate.json")).unwrap();
    let recorded: serde_json::Value = serde_json::from_slice(&recorded).unwrap();
    let _: nsyskit::gate_check::GateCheckDoc = serde_json::from_value(recorded.clone()).unwrap();
    assert_eq!(recorded["retry"], serde_json::json!(["G2"]));
    for id in ["G0", "G1", "G3", "G4", "G5"] {
        let verdict = |d: &serde_json::Value| gate(d, id)["verdict"].as_str().unwrap().to_uppercase();
        assert_eq!(verdict(&doc), verdict(&recorded), "{id}.verdict");
        for k in ["measured", "threshold", "at_ns"] {
            assert_eq!(gate(&doc, id)[k].as_f64(), gate(&recorded, id)[k].as_f64(), "{id}.{k}");
        }
    }
    // the provenance decides when the export records no graph-trace mode
    let dir = tempfile::tempdir().unwrap();
    let graph = synthetic_export(dir.path(), "graph.sqlite", false, &[]);
    let (code, doc, _) = gate_check(&[graph.to_str().unwrap(), "--provenance", &prov]);
    assert_eq!(code, 1); // provenance says node, but the data shows a graph launch without node rows
    let reason = gate(&doc, "G1")["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("recorded mode node from --provenance") && reason.contains("no KERNEL row has a graphNodeId"),
        "{reason}"
    );
    let node = synthetic_export(dir.path(), "node.sqlite", true, &[]);
    let (code, doc, _) = gate_check(&[node.to_str().unwrap(), "--provenance", &prov]);
    // the synthetic export has no NVTX_EVENTS table: G4 cannot check the coverage, never PASS (issue #14)
    assert_eq!(code, 1);
    assert_eq!(retry(&doc), ["G4"]);
    assert!(gate(&doc, "G4")["reason"].as_str().unwrap().contains("no NVTX_EVENTS table"), "{}", gate(&doc, "G4"));
    assert!(gate(&doc, "G1")["reason"].as_str().unwrap().starts_with("--cuda-graph-trace=node (from --provenance)"));
}

#[test]
fn gate_check_piped_into_bundle_merge_records_the_verdict() {
    let gate_bin = assert_cmd::cargo::cargo_bin("gate-check");
    let merge_bin = assert_cmd::cargo::cargo_bin("bundle-merge");
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    std::fs::write(&bundle, "{\n  \"model\": \"vibeserve\",\n  \"throughput_tok_s\": 1234.5\n}\n").unwrap();
    // `gate-check x.sqlite | bundle-merge bundle.json`, as CI runs it (bash, pipefail: the RETRY still shows)
    let run = |capture: &str| {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"set -o pipefail; "$0" "$1" | "$2" "$3""#)
            .arg(&gate_bin)
            .arg(capture)
            .arg(&merge_bin)
            .arg(&bundle)
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        out.status.code().unwrap()
    };
    assert_eq!(run(&p("nsys-2025.3.1/gpu_full_graph.sqlite")), 1); // gate-check's RETRY through pipefail
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    assert_eq!(b["model"], "vibeserve");
    assert_eq!(b["throughput_tok_s"], 1234.5);
    let gates = &b["kernel_profile"]["gates"];
    common::assert_valid(gates);
    assert_eq!(gates["verdict"], "RETRY");
    assert_eq!(gates["retry"], serde_json::json!(["G1"]));
    // a PASS afterwards replaces the RETRY
    assert_eq!(run(&p("nsys-2025.3.1/gpu_full_node.sqlite")), 0);
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    assert_eq!(b["kernel_profile"]["gates"]["verdict"], "PASS");
    assert_eq!(b["kernel_profile"]["gates"]["source"]["path"], p("nsys-2025.3.1/gpu_full_node.sqlite").as_str());
    assert_eq!(b["model"], "vibeserve");
}
