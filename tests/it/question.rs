//! The question record and the unprofiled score: bundle-merge places `nsyskit.question/v1` and
//! `nsyskit.benchmark/v1`; `report` states the measured share of the contributor, the Amdahl bound, and GPU
//! busy per decode step against the unprofiled TPOT — on the real decode_clean capture.

use crate::common;

use assert_cmd::Command;
use serde_json::{json, Value};

fn stdout_of(bin: &str, args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::cargo_bin(bin).unwrap().args(args).output().unwrap();
    assert!(matches!(out.status.code(), Some(0) | Some(1)), "{bin}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A real bundle of decode_clean (ranges + kernel summary) plus the given documents.
fn bundle(dir: &std::path::Path, name: &str, extra: &[Value]) -> std::path::PathBuf {
    let sqlite = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let csv = common::fixture("nsys-2025.3.1/stats/decode_clean_cuda_gpu_kern_sum.csv");
    let mut docs = Vec::new();
    docs.extend(stdout_of("kern-csv-to-json", &["--top".as_ref(), "0".as_ref(), csv.as_os_str()]));
    docs.extend(stdout_of("sqlite-ranges", &[sqlite.as_os_str()]));
    for e in extra {
        docs.extend(serde_json::to_vec(e).unwrap());
        docs.push(b'\n');
    }
    let path = dir.join(name);
    let out = Command::cargo_bin("bundle-merge").unwrap().arg(&path).write_stdin(docs).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::one_doc(&out.stdout);
    let places: Vec<String> = summary["documents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["places"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()))
        .collect();
    for e in extra {
        let kind = e["schema"].as_str().unwrap().trim_start_matches("nsyskit.").trim_end_matches("/v1").to_string();
        assert!(places.contains(&kind), "{kind} placed: {places:?}");
    }
    path
}

fn report(path: &std::path::Path) -> (Value, i32, String) {
    let out = Command::cargo_bin("report").unwrap().arg(path).output().unwrap();
    let code = out.status.code().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if code == 0 {
        (common::one_doc(&out.stdout), code, err)
    } else {
        (Value::Null, code, err)
    }
}

#[test]
fn report_states_the_measured_share_and_the_amdahl_bound() {
    let dir = tempfile::tempdir().unwrap();
    let q = json!({"schema": "nsyskit.question/v1", "metric": "tpot_ms", "contributor": {"label": "vibeserve.sampling.d2h"},
                   "expected_share": 0.1, "max_win": 0.6});
    let bench = json!({"schema": "nsyskit.benchmark/v1", "profiled": false, "client_command": "python3 bench.py --concurrency 1",
                       "client_json": {"median_tpot_ms": 0.41, "mean_tpot_ms": 0.43, "output_throughput": 2400.0}});
    let b = bundle(dir.path(), "b.json", &[q, bench]);
    let (d, code, err) = report(&b);
    assert_eq!(code, 0, "{err}");
    // the numbers from the real ranges document
    let rd =
        nsyskit::sqlite_ranges::run(&common::fixture("nsys-2025.3.1/decode_clean.sqlite"), &Default::default(), None)
            .unwrap();
    let row = |l: &str| rd.ranges.iter().find(|r| r.label == l).unwrap().clone();
    let (it, d2h) = (row("vibeserve.engine.iteration"), row("vibeserve.sampling.d2h"));
    let share = d2h.host_wall_time_ns as f64 / it.host_wall_time_ns as f64;
    let a = &d["question"]["question"];
    assert_eq!(a["per"], "vibeserve.engine.iteration");
    assert!((a["measured_share"].as_f64().unwrap() - share).abs() < 1e-12);
    assert!((a["max_speedup"].as_f64().unwrap() - 1.0 / (1.0 - share)).abs() < 1e-9);
    let st = a["statement"].as_str().unwrap();
    assert!(st.contains("Amdahl") && st.contains("more than the bound allows"), "{st}");
    eprintln!("{st}");
    // GPU busy per decode step against the unprofiled TPOT
    let s = &d["question"]["score"];
    let busy_ms = it.kernel_busy_union_ns as f64 / it.occurrences as f64 / 1e6;
    assert!((s["gpu_busy_per_step_ms"].as_f64().unwrap() - busy_ms).abs() < 1e-12);
    assert_eq!(s["benchmark_tpot_ms"], 0.41);
    assert_eq!(s["benchmark_tpot_source"], "benchmark.client_json.median_tpot_ms");
    assert!((s["gpu_busy_share_of_tpot"].as_f64().unwrap() - busy_ms / 0.41).abs() < 1e-12);
    assert_eq!(s["steps"], 400);
    assert!(s["statements"][0].as_str().unwrap().contains("of the unprofiled TPOT"), "{}", s["statements"]);
    eprintln!("{}", s["statements"]);
}

#[test]
fn kernel_category_questions_and_unmeasurable_ones() {
    let dir = tempfile::tempdir().unwrap();
    let q = json!({"schema": "nsyskit.question/v1", "metric": "tpot_ms", "contributor": {"kernel_category": "gemm"}, "max_win": 0.05});
    let (d, code, err) = report(&bundle(dir.path(), "k.json", &[q]));
    assert_eq!(code, 0, "{err}");
    let a = &d["question"]["question"];
    let gemm: i64 = d["categories"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["category"] == "gemm")
        .map(|c| c["total_time_ns"].as_i64().unwrap())
        .sum();
    let it = d["evidence"].as_array().unwrap().iter().find(|r| r["label"] == "vibeserve.engine.iteration").unwrap()
        ["host_wall_time_ns"]
        .as_i64()
        .unwrap();
    assert!(gemm > 0);
    assert!((a["measured_share"].as_f64().unwrap() - gemm as f64 / it as f64).abs() < 1e-12);
    assert!(a["share_basis"].as_str().unwrap().contains("upper bound"));
    assert!(d["question"]["score"].is_null(), "no benchmark record");
    // a contributor the capture does not have
    let q = json!({"schema": "nsyskit.question/v1", "metric": "tpot_ms", "contributor": {"label": "vibeserve.attention.planning"}});
    let (d, _, _) = report(&bundle(dir.path(), "m.json", &[q]));
    assert!(d["question"]["question"]["measured_share"].is_null());
    assert!(d["question"]["question"]["statement"].as_str().unwrap().contains("not measurable"));
    // two contributors at once: exit 2 naming the JSON path
    let q = json!({"schema": "nsyskit.question/v1", "metric": "tpot_ms", "contributor": {"label": "a", "kernel_category": "gemm"}});
    let (_, code, err) = report(&bundle(dir.path(), "bad.json", &[q]));
    assert_eq!(code, 2);
    assert!(err.contains("$.question.contributor: give exactly one of"), "{err}");
    // a profiled benchmark record is stated as diagnostic
    let bench = json!({"schema": "nsyskit.benchmark/v1", "profiled": true, "scores": {"tpot_ms": 0.6}});
    let (d, _, _) = report(&bundle(dir.path(), "p.json", &[bench]));
    assert_eq!(d["question"]["score"]["benchmark_profiled"], true);
    assert!(d["question"]["score"]["statements"][0].as_str().unwrap().contains("diagnostic, not the score"));
}
