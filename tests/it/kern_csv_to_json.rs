//! kern-csv-to-json on every real `nsys stats` CSV in fixtures/, on real non-ns and console outputs
//! (tests/data/kern_csv/), and on the edge cases of the issue (CRLF, BOM, blank lines, empty, SKIPPED).

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn bin() -> Command {
    Command::cargo_bin("kern-csv-to-json").unwrap()
}

fn data(name: &str) -> PathBuf {
    common::root().join("tests/data/kern_csv").join(name)
}

fn fixture_csvs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for ver in std::fs::read_dir(common::root().join("fixtures")).unwrap() {
        let stats = ver.unwrap().path().join("stats");
        if let Ok(rd) = std::fs::read_dir(&stats) {
            for f in rd {
                let p = f.unwrap().path();
                if p.extension().and_then(|e| e.to_str()) == Some("csv") {
                    v.push(p);
                }
            }
        }
    }
    v.sort();
    v
}

/// The CSV parsed independently of the library: header and records.
fn csv_rows(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::ReaderBuilder::new().has_headers(true).from_path(path).unwrap();
    let header = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r.records().map(|rec| rec.unwrap().iter().map(String::from).collect()).collect();
    (header, rows)
}

fn convert(args: &[&str]) -> (i32, Value) {
    let out = bin().args(args).output().unwrap();
    let code = out.status.code().unwrap();
    assert!(code == 0 || code == 1, "{args:?}: exit {code}: {}", String::from_utf8_lossy(&out.stderr));
    (code, common::one_doc(&out.stdout))
}

fn convert_bytes(bytes: &[u8], args: &[&str]) -> std::process::Output {
    bin().args(args).write_stdin(bytes.to_vec()).output().unwrap()
}

#[test]
fn every_fixture_csv_converts() {
    let files = fixture_csvs();
    assert!(files.len() >= 70, "only {} CSV files found", files.len());
    for f in &files {
        let (code, doc) = convert(&[f.to_str().unwrap()]);
        assert_eq!(code, 0, "{}", f.display());
        let (header, rows) = csv_rows(f);
        assert_eq!(doc["rows"].as_array().unwrap().len(), rows.len(), "{}", f.display());
        let stem = f.file_stem().unwrap().to_str().unwrap();
        let report = doc["report"].as_str().unwrap();
        assert!(stem.ends_with(&format!("_{report}")), "{} detected as {report}", f.display());
        let cols: Vec<&str> =
            doc["columns"].as_array().unwrap().iter().map(|c| c["header"].as_str().unwrap()).collect();
        assert_eq!(cols, header.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        let unit = if report == "cuda_gpu_mem_size_sum" { Value::Null } else { Value::from("ns") };
        assert_eq!(doc["csv_time_unit"], unit, "{}", f.display());
        // every cell: text byte-exact, time = integer ns (rounded half away from zero), counts integers
        for (row, rec) in doc["rows"].as_array().unwrap().iter().zip(&rows) {
            for ((col, cell), h) in doc["columns"].as_array().unwrap().iter().zip(rec).zip(&header) {
                let v = &row[col["key"].as_str().unwrap()];
                if cell.is_empty() {
                    assert!(v.is_null(), "{}: {h}", f.display());
                    continue;
                }
                match col["type"].as_str().unwrap() {
                    "text" => assert_eq!(v.as_str().unwrap(), cell),
                    "time_ns" => {
                        let x: f64 = cell.parse().unwrap();
                        assert_eq!(v.as_i64().unwrap(), x.round() as i64, "{}: {h} {cell}", f.display());
                    }
                    "integer" => assert_eq!(v.as_i64().unwrap(), cell.parse::<i64>().unwrap()),
                    _ => assert_eq!(v.as_f64().unwrap(), cell.parse::<f64>().unwrap()),
                }
            }
        }
        assert_eq!(doc["totals"].is_null(), report != "cuda_gpu_kern_sum");
    }
}

#[test]
fn kernel_reports_have_totals_and_top_kernels() {
    let f = common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let (_, rows) = csv_rows(&f);
    let (_, doc) = convert(&[f.to_str().unwrap()]);
    let top = doc["top_kernels"].as_array().unwrap();
    assert_eq!(top.len(), 20.min(rows.len()));
    let total: i64 = rows.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
    let instances: i64 = rows.iter().map(|r| r[2].parse::<i64>().unwrap()).sum();
    assert_eq!(doc["totals"]["total_time_ns"].as_i64().unwrap(), total);
    assert_eq!(doc["totals"]["instances"].as_i64().unwrap(), instances);
    assert_eq!(doc["totals"]["kernels"].as_u64().unwrap() as usize, rows.len());
    assert_eq!(top[0]["rank"], 1);
    assert_eq!(top[0]["name"], "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT");
    assert_eq!(top[0]["total_time_ns"], 6009202);
    let share = top[0]["share"].as_f64().unwrap();
    assert!((share - 6009202.0 / total as f64).abs() < 1e-12);
    assert!((share * 100.0 - top[0]["time_pct"].as_f64().unwrap()).abs() < 0.05, "nsys's own Time (%) agrees");
    let (_, doc) = convert(&[f.to_str().unwrap(), "--top", "3"]);
    assert_eq!(doc["top_kernels"].as_array().unwrap().len(), 3);
    let (_, doc) = convert(&[f.to_str().unwrap(), "--top", "0"]);
    let all = doc["top_kernels"].as_array().unwrap();
    assert_eq!(all.len(), rows.len());
    let shares: f64 = all.iter().map(|k| k["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert!(all.windows(2).all(|w| w[0]["total_time_ns"].as_i64() >= w[1]["total_time_ns"].as_i64()));
}

#[test]
fn crlf_bom_and_trailing_blank_lines_change_nothing() {
    let f = common::fixture("nsys-2025.3.1/stats/decode_mixed_cuda_gpu_kern_sum.csv");
    let plain = std::fs::read(&f).unwrap();
    let base = convert_bytes(&plain, &["-"]);
    assert_eq!(base.status.code(), Some(0), "{}", String::from_utf8_lossy(&base.stderr));
    let base = common::one_doc(&base.stdout);
    let text = String::from_utf8(plain.clone()).unwrap();
    let variants: Vec<(&str, Vec<u8>)> = vec![
        ("crlf", text.replace('\n', "\r\n").into_bytes()),
        ("bom", [b"\xEF\xBB\xBF".as_slice(), &plain].concat()),
        ("trailing blank lines", format!("{text}\n\n\r\n  \n").into_bytes()),
        ("all three", format!("\u{feff}{}\r\n\r\n", text.replace('\n', "\r\n")).into_bytes()),
    ];
    for (what, bytes) in variants {
        let out = convert_bytes(&bytes, &["-"]);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = common::one_doc(&out.stdout);
        assert_eq!(doc["rows"], base["rows"], "{what}");
        assert_eq!(doc["top_kernels"], base["top_kernels"], "{what}");
        assert_eq!(doc["columns"], base["columns"], "{what}");
    }
}

#[test]
fn an_empty_file_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x_cuda_gpu_kern_sum.csv");
    for content in ["", "\n\n", "\u{feff}"] {
        std::fs::write(&p, content).unwrap();
        let out = bin().arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{}: empty: no CSV header", p.display())), "{err}");
    }
}

#[test]
fn skipped_is_exit_1_with_the_reason() {
    // nsys's real console output for a capture without kernels
    let (code, doc) = convert(&[data("cpu_nvtx_osrt_cuda_gpu_kern_sum_console.txt").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(doc["status"], "skipped");
    assert_eq!(doc["report"], "cuda_gpu_kern_sum");
    assert_eq!(doc["detected_from"], "nsys-output");
    assert_eq!(doc["skipped_reason"], "cpu_nvtx_osrt.sqlite does not contain CUDA kernel data.");
    assert_eq!(doc["top_kernels"], serde_json::json!([]));
    // the SKIPPED line alone, named by the file or by --report
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cap_cudaapisum.csv");
    std::fs::write(&p, "SKIPPED: cap.sqlite does not contain CUDA trace data.\r\n").unwrap();
    let (code, doc) = convert(&[p.to_str().unwrap()]);
    assert_eq!(
        (code, doc["report"].as_str(), doc["report_alias"].as_str()),
        (1, Some("cuda_api_sum"), Some("cudaapisum"))
    );
    let out = convert_bytes(
        b"SKIPPED: a.sqlite does not contain NV Tools Extension (NVTX) data.\n",
        &["--report", "nvtx_sum"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        common::one_doc(&out.stdout)["skipped_reason"],
        "a.sqlite does not contain NV Tools Extension (NVTX) data."
    );
    // without a name it cannot say which report was skipped
    let out = convert_bytes(b"SKIPPED: a.sqlite does not contain CUDA trace data.\n", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<stdin>: line 1: nsys skipped the report"));
}

#[test]
fn unknown_and_ambiguous_headers_are_exit_2_naming_what_was_seen() {
    let out = convert_bytes(b"Foo (ns),Bar\n1,2\n", &["-"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<stdin>: line 1: unknown CSV header [Foo (ns), Bar]"), "{err}");
    // cuda_api_sum and osrt_sum share a header: stdin cannot tell them apart, --report can
    let csv = std::fs::read(common::fixture("nsys-2025.3.1/stats/gpu_full_node_osrt_sum.csv")).unwrap();
    let out = convert_bytes(&csv, &["-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fits reports cuda_api_sum and osrt_sum"));
    let out = convert_bytes(&csv, &["-", "--report", "osrtsum"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = common::one_doc(&out.stdout);
    assert_eq!((doc["report"].as_str(), doc["report_alias"].as_str()), (Some("osrt_sum"), Some("osrtsum")));
    // --report that does not fit the header, and an unknown --report
    let out = convert_bytes(&csv, &["-", "--report", "cuda_gpu_kern_sum"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match report cuda_gpu_kern_sum"));
    let out = convert_bytes(&csv, &["-", "--report", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--report nope: unknown report"));
    // a row with a wrong field count or a bad number names the line
    let out = convert_bytes(
        b"Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n1,2,3\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<stdin>: line 2: 3 fields, the header has 9"));
    let out = convert_bytes(b"Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n\n1,2,x,4,5,6,7,8,k\n", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("<stdin>: line 3: column \"Instances\": not an integer: \"x\""), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn names_are_byte_exact() {
    let name = "void ns::k<(int)8, \"q\", a,b>(T1)::[lambda() (instance 1)] ünï ☃ \\n <>";
    let quoted = name.replace('"', "\"\"");
    let csv = format!(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n100.0,10,1,10.0,10.0,10,10,0.0,\"{quoted}\"\n"
    );
    let out = convert_bytes(csv.as_bytes(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = common::one_doc(&out.stdout);
    assert_eq!(doc["rows"][0]["name"].as_str().unwrap(), name);
    assert_eq!(doc["top_kernels"][0]["name"].as_str().unwrap(), name);
    assert_eq!(doc["top_kernels"][0]["share"], 1.0);
}

#[test]
fn non_ns_time_units_convert_to_integer_ns() {
    let (_, ns) = convert(&[common::fixture("nsys-2023.4.4/stats/cpu_nvtx_osrt_osrt_sum.csv").to_str().unwrap()]);
    // us has 3 decimals: exact; ms and sec have 4: within half the last digit
    for (file, unit, tolerance) in [("us", "us", 0i64), ("ms", "ms", 50), ("sec", "s", 50_000)] {
        let (code, doc) = convert(&[data(&format!("cpu_nvtx_osrt_{file}_osrt_sum.csv")).to_str().unwrap()]);
        assert_eq!(code, 0);
        assert_eq!(doc["csv_time_unit"], unit);
        assert_eq!(doc["report"], "osrt_sum");
        for (a, b) in doc["rows"].as_array().unwrap().iter().zip(ns["rows"].as_array().unwrap()) {
            assert_eq!(a["name"], b["name"]);
            assert_eq!(a["num_calls"], b["num_calls"]);
            for k in ["total_time_ns", "min_ns", "max_ns"] {
                let d = (a[k].as_i64().unwrap() - b[k].as_i64().unwrap()).abs();
                assert!(d <= tolerance, "{file} {k}: {} vs {}", a[k], b[k]);
            }
        }
    }
    let (_, sec) = convert(&[data("cpu_nvtx_osrt_sec_osrt_sum.csv").to_str().unwrap()]);
    assert_eq!(sec["rows"][0]["total_time_ns"], 116_400_000); // 0.1164 sec
    let (_, us) = convert(&[data("cpu_nvtx_osrt_us_osrt_sum.csv").to_str().unwrap()]);
    assert_eq!(us["rows"][0]["total_time_ns"], 116_406_319); // 116406.319 us
    assert_eq!(us["rows"][0]["med_ns"], 600_629); // 600.629 us (the ns CSV says 600628.5, rounded by nsys)
                                                  // a trace report in us: start/end exact
    let (_, tr) = convert(&[data("cpu_nvtx_osrt_us_nvtx_pushpop_trace.csv").to_str().unwrap()]);
    assert_eq!(tr["rows"][0]["start_ns"], 47_602_261);
    assert_eq!(tr["rows"][0]["parentid"], Value::Null);
}

#[test]
fn older_report_names_and_nsys_console_output() {
    let (_, doc) = convert(&[data("cpu_nvtx_osrt_osrtsum.csv").to_str().unwrap()]);
    assert_eq!((doc["report"].as_str(), doc["report_alias"].as_str()), (Some("osrt_sum"), Some("osrtsum")));
    let (_, doc) = convert(&[data("cpu_nvtx_osrt_nvtxsesum.csv").to_str().unwrap()]);
    assert_eq!((doc["report"].as_str(), doc["report_alias"].as_str()), (Some("nvtx_startend_sum"), Some("nvtxsesum")));
    assert_eq!(doc["detected_from"], "file-name");
    // three reports on nsys's stdout: one must be picked
    let console = data("cpu_nvtx_osrt_console_us.txt");
    let out = bin().arg(&console).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds 3 reports (osrt_sum, nvtx_sum, cuda_gpu_kern_sum)"));
    let (code, doc) = convert(&[console.to_str().unwrap(), "--report", "nvtxsum"]);
    assert_eq!(code, 0);
    assert_eq!(doc["report"], "nvtx_sum");
    assert_eq!(doc["rows"].as_array().unwrap().len(), 16);
    assert_eq!(doc["rows"][0]["total_time_ns"], 83_026_548);
    let (code, doc) = convert(&[console.to_str().unwrap(), "--report", "cuda_gpu_kern_sum"]);
    assert_eq!((code, doc["status"].as_str()), (1, Some("skipped")));
}

/// Runs the real nsys (when present) to prove a fresh `--timeunit usec` CSV converts to the same ns.
#[test]
fn real_nsys_stats_in_other_units() {
    let Some(nsys) = common::nsys_or_skip("real_nsys_stats_in_other_units") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rep = dir.path().join("cap.nsys-rep");
    std::fs::copy(common::fixture("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"), &rep).unwrap();
    for unit in ["nsec", "usec"] {
        let st = std::process::Command::new(&nsys)
            .args([
                "stats",
                "--report",
                "nvtx_sum",
                "--format",
                "csv",
                "--timeunit",
                unit,
                "--force-overwrite",
                "true",
                "--force-export",
                "true",
                "--output",
            ])
            .arg(dir.path().join(unit))
            .arg(&rep)
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    }
    let (_, ns) = convert(&[dir.path().join("nsec_nvtx_sum.csv").to_str().unwrap()]);
    let (_, us) = convert(&[dir.path().join("usec_nvtx_sum.csv").to_str().unwrap()]);
    assert_eq!(us["csv_time_unit"], "us");
    assert!(!ns["rows"].as_array().unwrap().is_empty());
    for (a, b) in us["rows"].as_array().unwrap().iter().zip(ns["rows"].as_array().unwrap()) {
        assert_eq!(a["total_time_ns"], b["total_time_ns"]);
        assert_eq!(a["min_ns"], b["min_ns"]);
        assert_eq!(a["range"], b["range"]);
    }
}

#[test]
fn version_works_and_a_missing_file_is_exit_2() {
    // the help's examples run as printed in tests/it/help_examples.rs
    let out = bin().arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
    let out = bin().arg("/nonexistent.csv").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.csv: no such file"));
}

/// nsys 2025.3.1's real console output (saved from a run on the GPU machine): several reports, µs.
#[test]
fn nsys_2025_console_output() {
    let console = data("nsys2025_gpu_full_node_console_us.txt");
    let (code, api) = convert(&[console.to_str().unwrap(), "--report", "cuda_api_sum"]);
    assert_eq!(code, 0);
    assert_eq!((api["detected_from"].as_str(), api["csv_time_unit"].as_str()), (Some("--report"), Some("us")));
    // the same report in ns from the fixtures: µs with 3 decimals is exact
    let (_, ns) = convert(&[common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_api_sum.csv").to_str().unwrap()]);
    assert_eq!(api["rows"].as_array().unwrap().len(), ns["rows"].as_array().unwrap().len());
    for (a, b) in api["rows"].as_array().unwrap().iter().zip(ns["rows"].as_array().unwrap()) {
        for k in ["name", "num_calls", "total_time_ns", "min_ns", "max_ns", "time_pct"] {
            assert_eq!(a[k], b[k], "{k}");
        }
    }
    // two sections are cuda_gpu_kern_sum (plain and :base): refused, not guessed
    let out = bin().arg(&console).args(["--report", "cuda_gpu_kern_sum"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("holds 3 reports (cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_kern_sum), 2 of them cuda_gpu_kern_sum"));
    let cpu = data("nsys2025_cpu_nvtx_osrt_console.txt");
    let (code, doc) = convert(&[cpu.to_str().unwrap(), "--report", "cuda_gpu_kern_sum"]);
    assert_eq!((code, doc["status"].as_str()), (1, Some("skipped")));
    let (code, doc) = convert(&[cpu.to_str().unwrap(), "--report", "nvtx_sum"]);
    assert_eq!(code, 0);
    let (_, fixture) = convert(&[common::fixture("nsys-2025.3.1/stats/cpu_nvtx_osrt_nvtx_sum.csv").to_str().unwrap()]);
    assert_eq!(doc["rows"], fixture["rows"]);
}

#[test]
fn captured_at_comes_from_the_flag_or_the_file_time() {
    let f = common::fixture("nsys-2025.3.1/stats/decode_clean_cuda_gpu_kern_sum.csv");
    let (_, doc) = convert(&[f.to_str().unwrap()]);
    assert_eq!(doc["captured_at"], doc["source_mtime_utc"]);
    assert_eq!(doc["captured_at_from"], "csv-mtime");
    let (_, doc) = convert(&[f.to_str().unwrap(), "--captured-at", "2026-11-29T21:05:00Z"]);
    assert_eq!(
        (doc["captured_at"].as_str(), doc["captured_at_from"].as_str()),
        (Some("2026-11-29T21:05:00Z"), Some("--captured-at"))
    );
    let csv = std::fs::read(&f).unwrap();
    let out = convert_bytes(&csv, &[]);
    let doc = common::one_doc(&out.stdout);
    assert!(doc["captured_at"].is_null() && doc["source_mtime_utc"].is_null());
    let out = bin().arg(&f).args(["--captured-at", "yesterday"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--captured-at \"yesterday\": not an RFC 3339 time"));
    // bundle-merge copies it to kernel_profile.captured_at
    let doc = bin().arg(&f).args(["--captured-at", "2026-11-29T21:05:00+01:00"]).output().unwrap().stdout;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let out = Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(doc).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(b["kernel_profile"]["captured_at"], "2026-11-29T21:05:00+01:00");
}

// ---------------------------------------------------------------------------------------------------------
// Issue 17 regressions: two BOMs, an unterminated quote, FIFOs and devices as the input.

const KERN_HEADER: &str = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n";

fn fails(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "no document on a failure");
    assert!(!err.contains("internal error") && !err.contains("panicked"), "{err}");
    err
}

#[test]
fn doubled_byte_order_marks_never_panic() {
    let real = std::fs::read(common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv")).unwrap();
    let bom = "\u{feff}".as_bytes();
    let once = convert_bytes(&[bom, &real].concat(), &["-"]);
    assert_eq!(once.status.code(), Some(0));
    let want = common::one_doc(&once.stdout);
    // two (or three) BOMs in a row count as one; the document is the same
    for n in [2, 3] {
        let out = convert_bytes(&[bom.repeat(n), real.clone()].concat(), &["-"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(common::one_doc(&out.stdout)["rows"], want["rows"]);
    }
    // BOMs and nothing else, or BOMs then blank lines: empty input, exit 2 (this panicked)
    for input in [bom.repeat(2), [bom.repeat(2), b"\n\n".to_vec()].concat(), b"\"\"\n".to_vec()] {
        let err = fails(&convert_bytes(&input, &["-"]));
        assert!(err.contains("<stdin>: empty: no CSV header"), "{err}");
    }
}

#[test]
fn an_unterminated_quote_is_an_error_naming_its_line() {
    let csv = format!("{KERN_HEADER}1.0,10,1,10,10,10,10,0,k1\n2.0,20,1,20,20,20,20,0,\"k2 unterminated\n3.0,30,1,30,30,30,30,0,k3\n4.0,40,1,40,40,40,40,0,k4\n");
    let err = fails(&convert_bytes(csv.as_bytes(), &["-"]));
    assert!(err.contains("<stdin>: line 3: unterminated quoted field"), "{err}");
    // in a file, named by its path; on the last line too
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x_cuda_gpu_kern_sum.csv");
    std::fs::write(&p, format!("{KERN_HEADER}1.0,10,1,10,10,10,10,0,\"k1")).unwrap();
    let out = bin().arg(&p).output().unwrap();
    let err = fails(&out);
    assert!(err.contains(&format!("{}: line 2: unterminated quoted field", p.display())), "{err}");
    // a properly quoted field with a line break, commas and doubled quotes is one field of one row
    let csv = format!("{KERN_HEADER}1.0,10,1,10,10,10,10,0,\"a, \"\"b\"\"\nc\"\n2.0,20,1,20,20,20,20,0,k2\n");
    let out = convert_bytes(csv.as_bytes(), &["-"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let d = common::one_doc(&out.stdout);
    assert_eq!(d["rows"][0]["name"], "a, \"b\"\nc");
    assert_eq!(d["rows"].as_array().unwrap().len(), 2);
    // an error in a later row still names its own line after a multi-line field
    let csv = format!("{KERN_HEADER}1.0,10,1,10,10,10,10,0,\"a\nb\"\n2.0,x,1,20,20,20,20,0,k2\n");
    let err = fails(&convert_bytes(csv.as_bytes(), &["-"]));
    assert!(err.contains("<stdin>: line 4: column \"Total Time (ns)\": not a decimal time"), "{err}");
}

#[test]
fn fifos_and_devices_as_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("k_cuda_gpu_kern_sum.csv");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let limit = std::time::Duration::from_secs(30);
    // nothing writes to it: empty at once, never a hang
    let err = fails(&bin().arg(&fifo).timeout(limit).output().unwrap());
    assert!(err.contains("empty: no CSV header"), "{err}");
    // a writer: converted like the file (`<(nsys stats …)` is such a pipe)
    let real = common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let writer = {
        let (fifo, real) = (fifo.clone(), real.clone());
        std::thread::spawn(move || std::fs::write(&fifo, std::fs::read(real).unwrap()).unwrap())
    };
    let out = bin().arg(&fifo).timeout(limit).output().unwrap();
    writer.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let d = common::one_doc(&out.stdout);
    assert_eq!(d["totals"]["instances"], 9579);
    for dev in ["/dev/zero", "/dev/null"] {
        let err = fails(&bin().arg(dev).timeout(limit).output().unwrap());
        assert!(err.contains(&format!("{dev}: is a character device")), "{err}");
    }
    let err = fails(&bin().arg(dir.path()).output().unwrap());
    assert!(err.contains("is a directory"), "{err}");
}
