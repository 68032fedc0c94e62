//! `capture-compare`: refusals on the real fixture pairs, zero deltas against itself, deltas and
//! appear/vanish on comparable pairs, and refusals from provenance facts.

use crate::common;

use assert_cmd::Command;
use serde_json::{json, Value};

/// capture-compare A B with `extra`; the tests about deltas, statistics and invalidators accept unverified facts
/// (`--allow-unverified`, unless `--strict` or `--no-allow` is asked: the UNVERIFIED verdict has its own test).
fn compare(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (Value, i32, String) {
    let mut extra: Vec<&str> = extra.to_vec();
    let allow = !extra.contains(&"--strict") && !extra.contains(&"--no-allow");
    extra.retain(|e| *e != "--no-allow");
    if allow {
        extra.push("--allow-unverified");
    }
    // 400 resamples keep the debug-build tests quick (the default is 2000)
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg(a)
        .arg(b)
        .args(&extra)
        .args(["--bootstrap", "400"])
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(code == 0 || code == 1, "exit {code}: {stderr}");
    (common::one_doc(&out.stdout), code, stderr)
}

fn checks(doc: &Value) -> Vec<String> {
    doc["invalidators"].as_array().unwrap().iter().map(|i| i["check"].as_str().unwrap().to_string()).collect()
}

#[test]
fn node_vs_graph_level_is_refused() {
    let a = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let b = common::fixture("nsys-2025.3.1/gpu_full_graph.sqlite");
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 1);
    assert_eq!(d["verdict"], "REFUSED");
    // node vs graph level, and gate-check's G1 RETRY on the graph-level side
    assert_eq!(checks(&d), vec!["graph_trace_level", "gate"]);
    let gate = &d["invalidators"][1];
    assert_eq!(gate["sides"], json!([b.display().to_string()]));
    assert_eq!(gate["a"]["retry"], json!(["G1"]));
    let inv = &d["invalidators"][0];
    assert_eq!((inv["a"].as_str(), inv["b"].as_str()), (Some("node"), Some("graph")));
    assert!(inv["reason"].as_str().unwrap().contains("node-level"));
    // both use CUDA graphs: that fact is the same
    assert_eq!(d["a"]["facts"]["cuda_graphs"]["value"], "graphs");
    assert_eq!(d["b"]["facts"]["cuda_graphs"]["value"], "graphs");
    assert!(d["kernel_deltas"].is_null() && d["range_deltas"].is_null());
}

#[test]
fn different_nsys_versions_are_refused() {
    let a = common::fixture("nsys-2023.4.4/gpu_range_node.sqlite");
    let b = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 1);
    let c = checks(&d);
    assert!(c.contains(&"nsys_version".to_string()), "{c:?}");
    let v = d["invalidators"].as_array().unwrap().iter().find(|i| i["check"] == "nsys_version").unwrap();
    assert!(v["a"].as_str().unwrap().starts_with("2023.4.4"));
    assert!(v["b"].as_str().unwrap().starts_with("2025.3"));
    // both node level: not an invalidator here
    assert!(!c.contains(&"graph_trace_level".to_string()));
}

#[test]
fn a_capture_against_itself_has_zero_deltas() {
    let a = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let (d, code, _) = compare(&a, &a, &["--top", "0"]);
    assert_eq!(code, 0);
    assert_eq!(d["verdict"], "COMPARABLE");
    assert!(d["invalidators"].as_array().unwrap().is_empty());
    let kd = d["kernel_deltas"].as_array().unwrap();
    let (stats, _) =
        nsyskit::step_budget::picture::export_kernel_stats(&nsyskit::export::Export::open(&a).unwrap()).unwrap();
    assert_eq!(kd.len(), stats.len());
    for k in kd {
        assert_eq!(k["total_time_ns"]["delta"], 0);
        assert_eq!(k["instances"]["delta"], 0);
        assert_eq!(k["impact_ns"], 0);
    }
    assert!(d["kernels_appeared"].as_array().unwrap().is_empty());
    assert!(d["kernels_vanished"].as_array().unwrap().is_empty());
    for c in d["category_deltas"].as_array().unwrap() {
        assert_eq!(c["total_time_ns"]["delta"], 0);
    }
    if let Some(rd) = d["range_deltas"].as_array() {
        for r in rd {
            assert_eq!(r["impact_ns"], 0);
            assert_eq!(r["present"], "both");
        }
    }
    // what the exports do not record is stated, not guessed
    let unchecked: Vec<&str> =
        d["unchecked"].as_array().unwrap().iter().map(|u| u["check"].as_str().unwrap()).collect();
    assert!(
        unchecked.contains(&"warmup")
            && unchecked.contains(&"foreign_gpu_process")
            && unchecked.contains(&"clock_policy")
    );
}

fn bundle(version: &str, warmup: i64, foreign: Value, kernels: Value) -> Value {
    json!({
        "schema": "nsyskit.bundle/v1",
        "tool": {"name": "bundle-merge", "version": "0.1.0"},
        "provenance": {
            "schema": "nsyskit.provenance/v1",
            "nsys": {"version": version},
            "capture": {"flags": "--trace=cuda,nvtx,osrt --cuda-graph-trace=node", "window": {"delay_s": 10, "duration_s": 5}, "warmup": warmup},
            "gpu": {"name": "NVIDIA H200", "clock_policy": "default", "foreign_processes": foreign},
            "instrumentation": {"nvtx": true}
        },
        "kernel_profile": {
            "top_kernels": kernels,
            "ranges": {"schema": "nsyskit.ranges/v1", "ranges": [
                {"label": "step", "occurrences": 10, "host_wall_time_ns": 1000, "kernel_busy_union_ns": 800, "host_range_kernel_coverage_ns": 800, "depths": {"0": 10}, "parents": {"": 10}}
            ], "totals": {}, "thread_diagnostics": []}
        }
    })
}

fn write(dir: &std::path::Path, name: &str, v: &Value) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    p
}

#[test]
fn bundles_refused_for_provenance_invalidators() {
    let dir = tempfile::tempdir().unwrap();
    let k = json!([{"name": "nvjet_a", "total_time_ns": 100, "instances": 1}]);
    let a = write(dir.path(), "a.json", &bundle("2025.3.1", 50, json!([]), k.clone()));
    let b = write(
        dir.path(),
        "b.json",
        &bundle("2025.3.1", 10, json!([{"pid": 433, "used_memory_mib": 10240}]), k.clone()),
    );
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 1);
    let c = checks(&d);
    assert!(c.contains(&"warmup".to_string()) && c.contains(&"foreign_gpu_process".to_string()), "{c:?}");
    assert_eq!(d["a"]["facts"]["warmup"]["source"], "provenance.capture.warmup");
    // the flag string gives the trace set and graph level
    assert_eq!(d["a"]["facts"]["trace_set"]["value"], json!(["cuda", "nvtx", "osrt"]));
    assert_eq!(d["a"]["facts"]["graph_trace_level"]["value"], "node");
}

#[test]
fn bundles_deltas_appear_and_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let ka = json!([{"name": "nvjet_a", "total_time_ns": 1000, "instances": 10}, {"name": "old_kernel", "total_time_ns": 50, "instances": 5}, {"name": "layer_norm_k", "total_time_ns": 300, "instances": 10}]);
    let kb = json!([{"name": "nvjet_a", "total_time_ns": 700, "instances": 10}, {"name": "new_kernel", "total_time_ns": 90, "instances": 3}, {"name": "layer_norm_k", "total_time_ns": 310, "instances": 10}]);
    let a = write(dir.path(), "a.json", &bundle("2025.3.1", 50, json!([]), ka));
    let b = write(dir.path(), "b.json", &bundle("2025.3.1", 50, json!([]), kb));
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    let kd = d["kernel_deltas"].as_array().unwrap();
    assert_eq!(kd[0]["name"], "nvjet_a");
    assert_eq!(kd[0]["total_time_ns"], json!({"a": 1000, "b": 700, "delta": -300, "relative": -0.3}));
    assert_eq!(kd[0]["mean_ns"]["delta"], -30);
    assert_eq!(kd[1]["name"], "layer_norm_k");
    assert_eq!(kd[1]["category"], "norm");
    assert_eq!(d["kernels_appeared"][0]["name"], "new_kernel");
    assert_eq!(d["kernels_vanished"][0]["name"], "old_kernel");
    let rd = d["range_deltas"].as_array().unwrap();
    assert_eq!(rd[0]["label"], "step");
    assert_eq!(rd[0]["host_wall_time_ns"]["delta"], 0);
    // the provenance gives these facts; graph use (graph launches and kernels are only in an export), the gate
    // verdict and the run's outcome are not recorded: stated as unknown, not guessed
    let unchecked: Vec<&str> =
        d["unchecked"].as_array().unwrap().iter().map(|u| u["check"].as_str().unwrap()).collect();
    for c in ["cuda_graphs", "gate", "run_outcome", "nsys_path", "gpu_uuid", "client_command"] {
        assert!(unchecked.contains(&c), "{c} in {unchecked:?}");
    }
    for c in [
        "nsys_version",
        "warmup",
        "gpu",
        "clock_policy",
        "trace_set",
        "graph_trace_level",
        "window",
        "capture_flags",
        "foreign_gpu_process",
    ] {
        assert!(!unchecked.contains(&c), "{c} in {unchecked:?}");
    }
    // bundles carry no per-occurrence values: no statistics, and a note says why
    assert!(d["ab"].is_null());
    assert!(d["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("per-occurrence")));
    // --strict turns each unknown into a refusal, shown as unknown
    let (d, code, _) = compare(&a, &b, &["--strict"]);
    assert_eq!(code, 1);
    let strict: Vec<&Value> = d["invalidators"].as_array().unwrap().iter().collect();
    assert!(strict.iter().any(|i| i["check"] == "cuda_graphs"
        && i["a"] == "unknown"
        && i["reason"].as_str().unwrap().starts_with("unknown under --strict")));
}

#[test]
fn bad_inputs_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"hello\": 1}").unwrap();
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json") && err.contains("not an evidence bundle"), "{err}");
    assert!(out.stdout.is_empty());
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).arg("/nonexistent.sqlite").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.sqlite: no such file"));
    let cats = dir.path().join("cats.txt");
    std::fs::write(&cats, "gemm=(").unwrap();
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg(&good)
        .arg(&good)
        .arg("--categories")
        .arg(&cats)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cats.txt: rule 1 (gemm): bad regular expression"));
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // usage: an unknown --label, a bad --metric, both forms at once, a share out of range
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg(&good)
        .arg(&good)
        .args(["--label", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--label \"nope\": no capture has this range label (labels: vibeserve.api.poll"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for args in [
        vec!["--metric", "speed"],
        vec!["--max-attributed-share-diff", "2"],
        vec!["--bootstrap", "10"],
        vec!["--confidence", "1.5"],
    ] {
        let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).arg(&good).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(args[0]),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg(&good)
        .arg(&good)
        .arg("--baseline")
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::cargo_bin("capture-compare").unwrap().arg("--baseline").arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("both sides"), "{}", String::from_utf8_lossy(&out.stderr));
}

// ---------------------------------------------------------------------------------------------------------
// End to end with the real tools: kern-csv-to-json, sqlite-ranges, gate-check and nsys-resolve documents
// merged by bundle-merge into one bundle per capture, then compared.

/// A fake nvidia-smi replaying the real H200 output of fixtures/nvidia-smi (`idle` or `foreign`).
fn fake_smi(dir: &std::path::Path, which: &str) -> std::path::PathBuf {
    let f = common::root().join("fixtures/nvidia-smi");
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("nvidia-smi");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  *--query-gpu=*) cat '{g}';;\n  *--query-compute-apps=*) cat '{a}';;\n  --version) cat '{v}';;\n  *) cat '{t}';;\nesac\n",
            g = f.join(format!("query_gpu_{which}.csv")).display(),
            a = f.join(format!("query_compute_apps_{which}.csv")).display(),
            v = f.join("version.txt").display(),
            t = f.join("nvidia-smi_idle.txt").display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn stdout_of(bin: &str, args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::cargo_bin(bin).unwrap().args(args).output().unwrap();
    assert!(matches!(out.status.code(), Some(0) | Some(1)), "{bin}: {}", String::from_utf8_lossy(&out.stderr));
    common::one_doc(&out.stdout);
    out.stdout
}

fn real_bundle(
    dir: &std::path::Path,
    capture: &str,
    nsys: &std::path::Path,
    smi: &std::path::Path,
) -> std::path::PathBuf {
    real_bundle_tier(dir, capture, nsys, smi, "throughput")
}

fn real_bundle_tier(
    dir: &std::path::Path,
    capture: &str,
    nsys: &std::path::Path,
    smi: &std::path::Path,
    tier: &str,
) -> std::path::PathBuf {
    let sqlite = common::fixture(&format!("nsys-2025.3.1/{capture}.sqlite"));
    let csv = common::fixture(&format!("nsys-2025.3.1/stats/{capture}_cuda_gpu_kern_sum.csv"));
    let mut docs = Vec::new();
    docs.extend(stdout_of("kern-csv-to-json", &["--top".as_ref(), "0".as_ref(), csv.as_os_str()]));
    docs.extend(stdout_of("sqlite-ranges", &[sqlite.as_os_str()]));
    docs.extend(stdout_of("gate-check", &["--tier".as_ref(), tier.as_ref(), sqlite.as_os_str()]));
    docs.extend(stdout_of(
        "nsys-resolve",
        &[
            "--nsys".as_ref(),
            nsys.as_os_str(),
            "--preflight".as_ref(),
            "--nvidia-smi".as_ref(),
            smi.as_os_str(),
            "--gpu".as_ref(),
            "0".as_ref(),
            "--flags".as_ref(),
            "--trace=cuda,nvtx,osrt --cuda-graph-trace=node --capture-range=cudaProfilerApi --capture-range-end=stop"
                .as_ref(),
        ],
    ));
    let bundle =
        dir.join(format!("{capture}.{tier}.{}.json", smi.parent().unwrap().file_name().unwrap().to_string_lossy()));
    let out = Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(docs).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    bundle
}

#[test]
fn real_bundles_compare_and_a_foreign_gpu_process_refuses() {
    let Some(nsys) = common::nsys_or_skip("real_bundles_compare_and_a_foreign_gpu_process_refuses") else { return };
    let dir = tempfile::tempdir().unwrap();
    let idle = fake_smi(&dir.path().join("idle"), "idle");
    let foreign = fake_smi(&dir.path().join("foreign"), "foreign");
    let clean = real_bundle(dir.path(), "decode_clean", &nsys, &idle);
    let mixed = real_bundle(dir.path(), "decode_mixed", &nsys, &idle);
    let mixed_foreign = real_bundle(dir.path(), "decode_mixed", &nsys, &foreign);

    std::fs::create_dir_all(dir.path().join("again")).unwrap();
    let clean_again = real_bundle(&dir.path().join("again"), "decode_clean", &nsys, &idle);

    // two bundles of the same real capture: comparable (the provenance records the GPU, version, flags)
    let (d, code, _) = compare(&clean, &clean_again, &["--top", "0"]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    assert_eq!(d["a"]["facts"]["foreign_gpu_processes"]["value"], json!([]));
    assert_eq!(d["a"]["facts"]["graph_trace_level"]["value"], "node");
    assert!(
        d["a"]["run_facts"]["gpu_uuid"]["value"].as_str().unwrap().starts_with("GPU-"),
        "{}",
        d["a"]["run_facts"]["gpu_uuid"]
    );
    assert_eq!(d["a"]["run_facts"]["gpu_index"]["value"], 0);
    assert_eq!(d["a"]["run_facts"]["gate"]["value"]["verdict"], "PASS");
    // per-range deltas from the two real ranges documents: all zero
    let ra =
        nsyskit::sqlite_ranges::run(&common::fixture("nsys-2025.3.1/decode_clean.sqlite"), &Default::default(), None)
            .unwrap();
    let it = d["range_deltas"].as_array().unwrap().iter().find(|r| r["label"] == "vibeserve.engine.iteration").unwrap();
    let wall = |doc: &nsyskit::sqlite_ranges::SqliteRangesDoc| {
        doc.ranges.iter().find(|r| r.label == "vibeserve.engine.iteration").unwrap().host_wall_time_ns
    };
    assert_eq!(it["host_wall_time_ns"]["a"], wall(&ra));
    assert_eq!(it["host_wall_time_ns"]["delta"], 0);

    // clean vs mixed bundles: the mixed run's extra producer ranges refuse the pair …
    let (d, code, _) = compare(&clean, &mixed, &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["expected_ranges"]);
    assert_eq!(d["invalidators"][0]["b"], json!(["vibeserve.model.prefill", "vibeserve.request"]));
    // … and with decode-tier gates in the bundles, G7 is named
    let clean_d = real_bundle_tier(dir.path(), "decode_clean", &nsys, &idle, "decode");
    let mixed_d = real_bundle_tier(dir.path(), "decode_mixed", &nsys, &idle, "decode");
    let (d, code, _) = compare(&clean_d, &mixed_d, &[]);
    assert_eq!(code, 1);
    let g = d["invalidators"].as_array().unwrap().iter().find(|i| i["check"] == "gate").expect("gate refusal");
    assert_eq!(g["a"]["retry"], json!(["G7"]));
    assert_eq!(g["sides"], json!([mixed_d.display().to_string()]));
    assert!(g["reason"].as_str().unwrap().contains("G7: prefill contamination"), "{g}");

    let (d, code, _) = compare(&clean, &mixed_foreign, &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["expected_ranges", "foreign_gpu_process"]);
    let f = &d["invalidators"][1];
    assert_eq!(f["a"][0]["pid"], 433);
    assert_eq!(f["sides"], json!([mixed_foreign.display().to_string()]));
    assert_eq!(d["b"]["facts"]["foreign_gpu_processes"]["value"][0]["pid"], 433);

    // and report reads the same real bundle
    let out = Command::cargo_bin("report").unwrap().arg(&mixed).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let r = common::one_doc(&out.stdout);
    assert_eq!(r["provenance"]["schema"], "nsyskit.provenance/v1");
    assert_eq!(r["decision"]["primary_label"], "vibeserve.engine.iteration");
    // the whole kernel table the bundle holds, never its cut top list (issue 21)
    assert_eq!(r["kernels_source"], "kernel_profile.stats.cuda_gpu_kern_sum.rows");
}

// ---------------------------------------------------------------------------------------------------------
// Issue 17 regressions: a FIFO never hangs, `-` is stdin (once), a known block of the wrong type is refused.

fn compare_raw(args: &[&std::ffi::OsStr], stdin: Vec<u8>) -> std::process::Output {
    Command::cargo_bin("capture-compare")
        .unwrap()
        .args(args)
        .write_stdin(stdin)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

#[test]
fn fifo_stdin_and_wrong_block_types() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let fifo = dir.path().join("b.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let o = compare_raw(&[a.as_os_str(), fifo.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("b.fifo: empty"), "{}", String::from_utf8_lossy(&o.stderr));
    // the export against itself through stdin: comparable, zero deltas
    let o = compare_raw(&[a.as_os_str(), "-".as_ref(), "--allow-unverified".as_ref()], std::fs::read(&a).unwrap());
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let d = common::one_doc(&o.stdout);
    assert_eq!(d["b"]["source"], "<stdin>");
    assert_eq!(d["verdict"], "COMPARABLE", "{d}");
    // stdin cannot be both sides
    let o = compare_raw(&["-".as_ref(), "-".as_ref()], std::fs::read(&a).unwrap());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("standard input is given twice"));
    // a bundle whose kernel_profile is a string was accepted (exit 0); now exit 2 naming the path
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&json!({"kernel_profile": "x", "provenance": {}})).unwrap()).unwrap();
    let o = compare_raw(&[a.as_os_str(), bad.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.json: $.kernel_profile: expected an object, found a string")
    );
    let o = compare_raw(&["/dev/null".as_ref(), a.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/dev/null: is a character device"));
}

// The real refusals of issue #15, A/B statistics on real and planted data, and every invalidator.

fn inv_of<'a>(d: &'a Value, check: &str) -> &'a Value {
    d["invalidators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check"] == check)
        .unwrap_or_else(|| panic!("no {check} invalidator in {:?}", checks(d)))
}

#[test]
fn decode_clean_vs_mixed_is_refused_with_g7_named() {
    let a = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let b = common::fixture("nsys-2025.3.1/decode_mixed.sqlite");
    let (d, code, _) = compare(&a, &b, &["--tier", "decode"]);
    assert_eq!(code, 1);
    assert_eq!(d["verdict"], "REFUSED");
    let g = inv_of(&d, "gate");
    assert_eq!(g["sides"], json!([b.display().to_string()]));
    assert_eq!(g["a"]["verdict"], "RETRY");
    assert_eq!(g["a"]["retry"], json!(["G7"]));
    assert_eq!(g["a"]["tier"], "decode");
    assert!(g["reason"].as_str().unwrap().contains("G7: prefill contamination: 15 of 400 decode steps"), "{g}");
    // the clean side passes its gates: only B is named
    assert_eq!(d["a"]["run_facts"]["gate"]["value"]["verdict"], "PASS");
    // the prefill ranges exist only in the mixed run: an expected producer range missing on one side
    let e = inv_of(&d, "expected_ranges");
    assert_eq!(e["a"], json!([]));
    assert_eq!(e["b"], json!(["vibeserve.model.prefill", "vibeserve.request"]));
    assert!(d["ab"].is_null() && d["range_deltas"].is_null(), "a refused pair has no statistics");
    // in the throughput tier G7 does not run; the range check still refuses
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["expected_ranges"]);
    // with --expect-label naming only the step, the gate is what refuses
    let (d, code, _) = compare(&a, &b, &["--tier", "decode", "--expect-label", "vibeserve.engine.iteration"]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["gate"]);
}

#[test]
fn cpu_captures_are_refused_with_the_gates_named() {
    let cpu = common::fixture("nsys-2025.3.1/cpu_nvtx_osrt.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cpu_copy.sqlite");
    std::fs::copy(&cpu, &copy).unwrap();
    let (d, code, _) = compare(&cpu, &copy, &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["gate", "gate"]);
    for (i, side) in d["invalidators"].as_array().unwrap().iter().zip([&cpu, &copy]) {
        assert_eq!(i["sides"], json!([side.display().to_string()]));
        assert_eq!(i["a"]["retry"], json!(["G1", "G3"]));
        assert!(i["reason"].as_str().unwrap().contains("G1: the export holds no CUDA API or GPU row"), "{i}");
    }
    // two real CPU bundles (sqlite-ranges + gate-check documents merged by bundle-merge): same refusal
    let mut bundles = Vec::new();
    for (n, src) in [("a", &cpu), ("b", &copy)] {
        let mut docs = Vec::new();
        docs.extend(stdout_of("sqlite-ranges", &[src.as_os_str()]));
        docs.extend(stdout_of("gate-check", &[src.as_os_str()]));
        let bundle = dir.path().join(format!("{n}.json"));
        let out = Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(docs).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        bundles.push(bundle);
    }
    let (d, code, _) = compare(&bundles[0], &bundles[1], &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["gate", "gate"]);
    assert_eq!(d["invalidators"][0]["a"]["retry"], json!(["G1", "G3"]));
    assert_eq!(d["a"]["run_facts"]["gate"]["source"], "kernel_profile.gates");
}

/// Copy a fixture into `dir` under `name`, optionally running SQL on the copy.
fn planted(dir: &std::path::Path, fixture: &str, name: &str, sql: &[String]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::copy(common::fixture(fixture), &p).unwrap();
    if !sql.is_empty() {
        let c = rusqlite::Connection::open(&p).unwrap();
        for q in sql {
            c.execute_batch(q).unwrap();
        }
    }
    p
}

/// SQL that stretches time by `num/den` around the first NVTX start: every start/end/timestamp column of
/// every table (nesting, order and correlation are kept; every duration grows by exactly that factor).
fn stretch_sql(path: &std::path::Path, num: i64, den: i64) -> Vec<String> {
    let c = rusqlite::Connection::open(path).unwrap();
    let t0: i64 = c.query_row("SELECT min(start) FROM NVTX_EVENTS", [], |r| r.get(0)).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut out = Vec::new();
    for t in tables {
        let cols: Vec<String> = c
            .prepare(&format!("PRAGMA table_info(\"{t}\")"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .map(|r| r.unwrap())
            .filter(|c| c == "start" || c == "end" || c == "timestamp")
            .collect();
        if cols.is_empty() {
            continue;
        }
        let set: Vec<String> =
            cols.iter().map(|c| format!("\"{c}\" = {t0} + ((\"{c}\" - {t0}) * {num}) / {den}")).collect();
        out.push(format!("UPDATE \"{t}\" SET {};", set.join(", ")));
    }
    out
}

fn set_start(ns: i64) -> String {
    format!("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = {ns};")
}

fn label<'a>(d: &'a Value, l: &str) -> &'a Value {
    d["ab"]["labels"].as_array().unwrap().iter().find(|x| x["label"] == l).unwrap_or_else(|| panic!("no label {l}"))
}

fn metric<'a>(lc: &'a Value, m: &str) -> &'a Value {
    lc["metrics"].as_array().unwrap().iter().find(|x| x["metric"] == m).unwrap()
}

#[test]
fn a_capture_against_itself_and_a_copy_shows_no_significant_change() {
    let a = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let copy = planted(dir.path(), "nsys-2025.3.1/gpu_full_node.sqlite", "copy.sqlite", &[]);
    for b in [&a, &copy] {
        let (d, code, _) = compare(&a, b, &["--fail-on-regression", "0"]);
        assert_eq!(code, 0, "{:?}", d["invalidators"]);
        let labels = d["ab"]["labels"].as_array().unwrap();
        assert!(labels.len() >= 10, "{}", labels.len());
        for l in labels {
            assert_eq!(l["verdict"], "no significant change", "{l}");
            for m in l["metrics"].as_array().unwrap() {
                assert!(m["verdict"] == "no significant change" || m["verdict"] == "not measurable", "{m}");
                if let Some(r) = m["relative_change"].as_f64() {
                    assert_eq!(r, 0.0);
                }
            }
        }
        // per-request labels (vibeserve.request.0 … .3: differ only in digits) are never compared one by one: the
        // one folding rule (src/labels.rs) makes them the stable vibeserve.request.<n>; vibeserve.sampling.d2h stays
        assert!(labels
            .iter()
            .filter_map(|l| l["label"].as_str())
            .filter(|l| l.starts_with("vibeserve.request."))
            .all(|l| l == "vibeserve.request.<n>"));
        assert!(labels.iter().any(|l| l["label"] == "vibeserve.sampling.d2h"));
        let it = label(&d, "vibeserve.engine.iteration");
        let w = metric(it, "host_wall");
        assert_eq!(w["baseline"], w["trial"]);
        assert_eq!(w["baseline"]["n"], 204);
        assert!(w["ci_low"].as_f64().unwrap() < 0.0 && w["ci_high"].as_f64().unwrap() > 0.0);
        assert_eq!(d["regression"]["failed"], false);
        assert_eq!(d["regression"]["label"], "vibeserve.engine.iteration");
    }
}

#[test]
fn ab_on_real_decode_captures_finds_the_contaminated_step_slower() {
    // The clean/mixed pair is refused (G7): the statistics are computed through the library on the real
    // per-occurrence values, as capture-compare would on a comparable pair.
    let load = |f: &str| {
        let p = common::fixture(f);
        let ev = nsyskit::pipeline::load(&p, None).unwrap();
        nsyskit::capture_compare::capture_of(ev, "baseline", &p, nsyskit::gate_check::Tier::Decode).unwrap()
    };
    let clean = load("nsys-2025.3.1/decode_clean.sqlite");
    let mixed = load("nsys-2025.3.1/decode_mixed.sqlite");
    let s = nsyskit::capture_compare::ab::AbSettings::default();
    let get = |c: &nsyskit::capture_compare::Capture, l: &str| c.series.as_ref().unwrap().get(l).unwrap().clone();
    let it = "vibeserve.engine.iteration";
    let (sc, sm) = (get(&clean, it), get(&mixed, it));
    assert_eq!((sc.len(), sm.len()), (400, 400));
    let r = nsyskit::capture_compare::ab::compare_label(
        it,
        &[&sc],
        &[&sm],
        &s,
        nsyskit::capture_compare::ab::Metric::HostWall,
    );
    let w = &r.metrics[0];
    // the medians are the real per-occurrence medians
    let mut v = sc.host_wall_ns.clone();
    v.sort();
    assert_eq!(w.baseline.median_ns, v[199]);
    assert_eq!(r.verdict, "slower", "{r:?}");
    let busy = &r.metrics[1];
    assert_eq!(busy.verdict, "slower", "{busy:?}");
    assert!(w.ci_low.unwrap() > 0.0 && w.relative_change.unwrap() > 0.0);
    eprintln!("decode clean → mixed, {it}: host wall median {} → {} ns ({:+.1}%, CI {:+.1}%..{:+.1}%); busy {:+.1}%; p99 {} → {}",
        w.baseline.median_ns, w.trial.median_ns, w.relative_change.unwrap() * 100.0, w.ci_low.unwrap() * 100.0, w.ci_high.unwrap() * 100.0,
        busy.relative_change.unwrap() * 100.0, w.baseline.p99_ns, w.trial.p99_ns);
    // and the reverse direction is faster
    let back = nsyskit::capture_compare::ab::compare_label(
        it,
        &[&sm],
        &[&sc],
        &s,
        nsyskit::capture_compare::ab::Metric::HostWall,
    );
    assert_eq!(back.verdict, "faster");
}

#[test]
fn a_planted_ten_percent_slowdown_is_detected_and_zero_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let f = "nsys-2025.3.1/decode_clean.sqlite";
    let t = 1_795_989_864_241_168_329i64;
    let sec = 1_000_000_000i64;
    let a1 = planted(dir.path(), f, "a1.sqlite", &[set_start(t)]);
    let a2 = planted(dir.path(), f, "a2.sqlite", &[set_start(t + 2 * sec)]);
    let mut sql = stretch_sql(&a1, 11, 10);
    sql.push(set_start(t + sec));
    let b1 = planted(dir.path(), f, "b1.sqlite", &sql);
    sql.pop();
    sql.push(set_start(t + 3 * sec));
    let b2 = planted(dir.path(), f, "b2.sqlite", &sql);
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::cargo_bin("capture-compare")
            .unwrap()
            .args(args)
            .args(["--bootstrap", "400", "--allow-unverified"])
            .output()
            .unwrap();
        let code = out.status.code().unwrap();
        assert!(code == 0 || code == 1, "{}", String::from_utf8_lossy(&out.stderr));
        (common::one_doc(&out.stdout), code)
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    // inputs in any order; alternated in time (a1 b1 a2 b2): no warning
    let (d, code) = run(&[
        os("--baseline"),
        a2.as_os_str(),
        a1.as_os_str(),
        os("--trial"),
        b1.as_os_str(),
        b2.as_os_str(),
        os("--fail-on-regression"),
        os("5"),
    ]);
    assert_eq!(d["verdict"], "COMPARABLE", "{:?}", d["invalidators"]);
    assert!(d["warnings"].as_array().unwrap().is_empty(), "{:?}", d["warnings"]);
    assert_eq!(d["ab"]["baseline_captures"], 2);
    let it = label(&d, "vibeserve.engine.iteration");
    assert_eq!(it["verdict"], "slower");
    for m in ["host_wall", "kernel_busy_union", "gpu_idle_within_kernel_span"] {
        let x = metric(it, m);
        let rel = x["relative_change"].as_f64().unwrap();
        assert!((rel - 0.10).abs() < 0.002, "{m}: {rel}");
        assert!(x["ci_low"].as_f64().unwrap() > 0.05 && x["ci_low"].as_f64().unwrap() <= 0.1001, "{x}");
        assert_eq!(x["verdict"], "slower");
    }
    // every stable label with enough occurrences is slower
    for l in ["vibeserve.graph.replay", "vibeserve.engine.scheduling", "vibeserve.sampling.d2h"] {
        assert_eq!(label(&d, l)["verdict"], "slower", "{l}");
    }
    // --fail-on-regression 5: slower than 5 % with confidence → exit 1
    assert_eq!(code, 1);
    assert_eq!(d["regression"]["failed"], true);
    assert!(d["regression"]["ci_low_pct"].as_f64().unwrap() > 5.0);
    // 15 %: not beyond it → exit 0; the same inputs give the same statistics (seeded)
    let (d2, code) = run(&[
        os("--baseline"),
        a2.as_os_str(),
        a1.as_os_str(),
        os("--trial"),
        b1.as_os_str(),
        b2.as_os_str(),
        os("--fail-on-regression"),
        os("15"),
    ]);
    assert_eq!((code, d2["regression"]["failed"].as_bool()), (0, Some(false)));
    assert_eq!(d["ab"], d2["ab"]);
    // planted 0 %: two copies of the same capture — nothing flagged, --fail-on-regression 0 passes
    let (d, code) =
        run(&[os("--baseline"), a1.as_os_str(), os("--trial"), a2.as_os_str(), os("--fail-on-regression"), os("0")]);
    assert_eq!(code, 0);
    for l in d["ab"]["labels"].as_array().unwrap() {
        assert_eq!(l["verdict"], "no significant change", "{l}");
    }
    // not alternated (a1 a2 then b1 b2 … here: baselines at t, t+2 s; trials at t+1 s, t+3 s are alternated,
    // so give the baselines both before the trials)
    let late = planted(dir.path(), f, "b3.sqlite", &[set_start(t + 10 * sec)]);
    let late2 = planted(dir.path(), f, "b4.sqlite", &[set_start(t + 11 * sec)]);
    let (d, _) =
        run(&[os("--baseline"), a1.as_os_str(), a2.as_os_str(), os("--trial"), late.as_os_str(), late2.as_os_str()]);
    let w = d["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].as_str().unwrap().contains("not alternated")
            && w[0].as_str().unwrap().contains("AABB")
            && w[0].as_str().unwrap().contains("entirely before"),
        "{w:?}"
    );
}

#[test]
fn named_baselines_are_stored_in_and_read_from_a_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let f = "nsys-2025.3.1/decode_clean.sqlite";
    let a1 = planted(dir.path(), f, "a1.sqlite", &[]);
    let sql = stretch_sql(&a1, 11, 10);
    let b1 = planted(dir.path(), f, "b1.sqlite", &sql);
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg("--baseline")
        .arg(&a1)
        .arg(f.replace("nsys-2025.3.1/", ""))
        .current_dir(common::root().join("fixtures/nsys-2025.3.1"))
        .args(["--save-baseline", "main"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let base = common::one_doc(&out.stdout);
    assert_eq!(base["schema"], "nsyskit.baseline/v1");
    assert_eq!(base["name"], "main");
    assert_eq!(base["captures"].as_array().unwrap().len(), 2);
    assert_eq!(
        base["captures"][0]["series"]["vibeserve.engine.iteration"]["host_wall_ns"].as_array().unwrap().len(),
        400
    );
    // bundle-merge stores it at baselines.main
    let bundle = dir.path().join("bundle.json");
    let out =
        Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(out.stdout.clone()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let merged = common::one_doc(&out.stdout);
    assert_eq!(merged["documents"][0]["places"][0], "baselines.main");
    // read back: the trial is compared against the stored captures (facts and gates checked as well)
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg("--baseline")
        .arg(&bundle)
        .args(["--baseline-name", "main", "--bootstrap", "400", "--allow-unverified", "--trial"])
        .arg(&b1)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let d = common::one_doc(&out.stdout);
    assert_eq!(d["verdict"], "COMPARABLE", "{:?}", d["invalidators"]);
    assert_eq!(d["baseline"].as_array().unwrap().len(), 2);
    assert_eq!(d["a"]["kind"], "baseline");
    assert_eq!(label(&d, "vibeserve.engine.iteration")["verdict"], "slower");
    // a stored baseline is checked like a capture: against a CPU capture it refuses (gates, ranges)
    let cpu = common::fixture("nsys-2025.3.1/cpu_nvtx_osrt.sqlite");
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg("--baseline")
        .arg(&bundle)
        .args(["--baseline-name", "main", "--trial"])
        .arg(&cpu)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let d = common::one_doc(&out.stdout);
    assert!(checks(&d).contains(&"gate".to_string()));
    // an unknown name: exit 2 naming the stored ones
    let out = Command::cargo_bin("capture-compare")
        .unwrap()
        .arg("--baseline")
        .arg(&bundle)
        .args(["--baseline-name", "nope", "--trial"])
        .arg(&b1)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("$.baselines.nope: no such baseline (stored: main)"), "{err}");
}

/// A full provenance document (nsys-resolve's shape plus the serve fields of issue #15).
fn full_provenance() -> Value {
    json!({
        "schema": "nsyskit.provenance/v1",
        "tool": {"name": "nsys-resolve", "version": "0.1.0"},
        "nsys": {"path": "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys", "version": "2025.3.1.0"},
        "gpu": {"status": "available", "clock_policy": "default",
                "gpus": [{"index": 0, "uuid": "GPU-cce536fc-5671-8c56-30c3-5f6fa3d29c2e", "name": "NVIDIA H200", "target": true,
                          "app_clock_graphics_mhz": 1980, "app_clock_memory_mhz": 3201, "clocks_event_reasons_active": "0x0000000000000001"}],
                "processes": []},
        "capture": {"flags_argv": ["profile", "--trace=cuda,nvtx,osrt", "--cuda-graph-trace=node", "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "python3", "server.py"],
                    "client_cmd": "python3 load_client.py http://127.0.0.1:18080 1",
                    "instrumentation": [{"name": "VS_NVTX", "state": "on"}],
                    "instrumentation_patch": "sha256:1111",
                    "warmup": "3 requests"},
        "workload": {"request_rate": 4, "concurrency": 1, "seed_policy": "fixed:0"},
        "host": {"time_utc": "2026-11-29T23:19:13Z"}
    })
}

fn set_path(v: &mut Value, path: &str, x: Value) {
    let mut cur = v;
    let parts: Vec<&str> = path.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        cur = if let Ok(i) = p.parse::<usize>() { &mut cur[i] } else { &mut cur[*p] };
    }
    cur[parts[parts.len() - 1]] = x;
}

#[test]
fn every_provenance_invalidator_refuses_with_both_values() {
    let cap = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let pa = write(dir.path(), "pa.json", &full_provenance());
    // the same capture and provenance on both sides: comparable
    let (d, code, _) =
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pa.to_str().unwrap()]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    assert_eq!(d["a"]["run_facts"]["capture_mode"]["value"], "range");
    assert_eq!(d["a"]["run_facts"]["request_rate"]["value"], 4);
    // (check, path in the provenance, new value, expected a, expected b)
    let cases: Vec<(&str, &str, Value, Value, Value)> = vec![
        ("nsys_version", "nsys.version", json!("2025.3.2.0"), json!("2025.3.1"), json!("2025.3.2")),
        (
            "nsys_path",
            "nsys.path",
            json!("/usr/local/bin/nsys"),
            json!("/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"),
            json!("/usr/local/bin/nsys"),
        ),
        (
            "capture_flags",
            "capture.flags_argv",
            json!([
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--cuda-graph-trace=node",
                "--capture-range=cudaProfilerApi",
                "--capture-range-end=stop",
                "--sample=none",
                "python3",
                "server.py"
            ]),
            Value::Null,
            Value::Null,
        ),
        (
            "client_command",
            "capture.client_cmd",
            json!("python3 load_client.py http://127.0.0.1:18080 4"),
            json!("python3 load_client.py http://127.0.0.1:18080 1"),
            json!("python3 load_client.py http://127.0.0.1:18080 4"),
        ),
        ("request_rate", "workload.request_rate", json!(8), json!(4), json!(8)),
        ("concurrency", "workload.concurrency", json!(4), json!(1), json!(4)),
        ("seed_policy", "workload.seed_policy", json!("random"), json!("fixed:0"), json!("random")),
        ("warmup", "capture.warmup", json!("0 requests"), json!("3 requests"), json!("0 requests")),
        (
            "instrumentation",
            "capture.instrumentation",
            json!([{"name": "VS_NVTX", "state": "off"}]),
            json!([{"name": "VS_NVTX", "state": "on"}]),
            json!([{"name": "VS_NVTX", "state": "off"}]),
        ),
        (
            "instrumentation_patch",
            "capture.instrumentation_patch",
            json!("sha256:2222"),
            json!("sha256:1111"),
            json!("sha256:2222"),
        ),
        ("gpu", "gpu.gpus.0.name", json!("NVIDIA H100"), json!(["NVIDIA H200"]), json!(["NVIDIA H100"])),
        ("gpu_index", "gpu.gpus.0.index", json!(3), json!(0), json!(3)),
        (
            "gpu_uuid",
            "gpu.gpus.0.uuid",
            json!("GPU-other"),
            json!("GPU-cce536fc-5671-8c56-30c3-5f6fa3d29c2e"),
            json!("GPU-other"),
        ),
        ("clock_policy", "gpu.clock_policy", json!("locked:1500"), json!("default"), json!("locked:1500")),
        (
            "application_clocks",
            "gpu.gpus.0.app_clock_graphics_mhz",
            json!(1500),
            json!({"graphics_mhz": 1980, "memory_mhz": 3201}),
            json!({"graphics_mhz": 1500, "memory_mhz": 3201}),
        ),
    ];
    for (check, path, value, ea, eb) in cases {
        let mut p = full_provenance();
        set_path(&mut p, path, value);
        let pb = write(dir.path(), &format!("pb_{check}.json"), &p);
        let (d, code, _) =
            compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
        assert_eq!(code, 1, "{check}");
        assert_eq!(checks(&d), vec![check.to_string()], "{check}: {:?}", d["invalidators"]);
        let i = &d["invalidators"][0];
        if !ea.is_null() {
            assert_eq!((&i["a"], &i["b"]), (&ea, &eb), "{check}");
        }
        assert!(!i["reason"].as_str().unwrap().is_empty());
    }
    // flag words that change the trace set / graph level / window / mode refuse on those facts
    for (flags, expect) in [
        (
            json!([
                "profile",
                "--trace=cuda,nvtx",
                "--cuda-graph-trace=node",
                "--capture-range=cudaProfilerApi",
                "--capture-range-end=stop",
                "python3",
                "server.py"
            ]),
            "trace_set",
        ),
        (
            json!([
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--capture-range=cudaProfilerApi",
                "--capture-range-end=stop",
                "python3",
                "server.py"
            ]),
            "graph_trace_level",
        ),
        (
            json!([
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--cuda-graph-trace=node",
                "--delay=60",
                "--duration=10",
                "python3",
                "server.py"
            ]),
            "window",
        ),
        (
            json!([
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--cuda-graph-trace=node",
                "--delay=60",
                "--duration=10",
                "python3",
                "server.py"
            ]),
            "capture_mode",
        ),
    ] {
        let mut p = full_provenance();
        p["capture"]["flags_argv"] = flags;
        let pb = write(dir.path(), &format!("pf_{expect}.json"), &p);
        let (d, code, _) =
            compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
        assert_eq!(code, 1, "{expect}");
        assert!(checks(&d).contains(&expect.to_string()), "{expect}: {:?}", checks(&d));
    }
    let mode = {
        let mut p = full_provenance();
        p["capture"]["flags_argv"] = json!([
            "profile",
            "--trace=cuda,nvtx,osrt",
            "--cuda-graph-trace=node",
            "--delay=60",
            "--duration=10",
            "python3",
            "server.py"
        ]);
        let pb = write(dir.path(), "pmode.json", &p);
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]).0
    };
    assert_eq!(
        (&inv_of(&mode, "capture_mode")["a"], &inv_of(&mode, "capture_mode")["b"]),
        (&json!("range"), &json!("time"))
    );
    // a foreign process or throttling on ONE side refuses, naming that side
    let mut p = full_provenance();
    p["gpu"]["processes"] =
        json!([{"pid": 433, "process_name": "python3", "used_memory_mib": 10240, "on_target": true}]);
    let pb = write(dir.path(), "pforeign.json", &p);
    let (d, _, _) =
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
    assert_eq!(checks(&d), vec!["foreign_gpu_process"]);
    assert_eq!(d["invalidators"][0]["a"][0]["pid"], 433);
    let mut p = full_provenance();
    p["gpu"]["gpus"][0]["clocks_event_reasons_active"] = json!("0x0000000000000040");
    let pb = write(dir.path(), "pthrottle.json", &p);
    let (d, _, _) =
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
    assert_eq!(checks(&d), vec!["thermal_throttling"]);
    assert!(d["invalidators"][0]["reason"].as_str().unwrap().contains("hw_thermal_slowdown"));
    // SW power cap alone is not thermal throttling
    let mut p = full_provenance();
    p["gpu"]["gpus"][0]["clocks_event_reasons_active"] = json!("0x0000000000000004");
    let pb = write(dir.path(), "ppower.json", &p);
    let (_, code, _) =
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
    assert_eq!(code, 0);
    // a field absent on one side is unknown, not a difference; --strict refuses on it
    let mut p = full_provenance();
    p["workload"].as_object_mut().unwrap().remove("seed_policy");
    let pb = write(dir.path(), "punknown.json", &p);
    let (d, code, _) =
        compare(&cap, &cap, &["--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(d["unchecked"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["check"] == "seed_policy" && u["reason"] == "not recorded in the second"));
    let (d, code, _) = compare(
        &cap,
        &cap,
        &["--strict", "--provenance-a", pa.to_str().unwrap(), "--provenance-b", pb.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    let i = inv_of(&d, "seed_policy");
    assert_eq!((&i["a"], &i["b"]), (&json!("unknown"), &json!("unknown")));
}

fn serve_bundle(outcome: &str, clocks_end: i64, reasons_end: &str, warmup: &str, ranges: Value, extra: Value) -> Value {
    let mut b = json!({
        "schema": "nsyskit.bundle/v1",
        "provenance": full_provenance(),
        "serve_capture": {
            "schema": "nsyskit.serve-capture/v1", "outcome": outcome,
            "window": {"mode": "range"},
            "warmup": {"argv": ["python3", "load_client.py", "http://127.0.0.1:18080", warmup]},
            "load": {"argv": ["python3", "load_client.py", "http://127.0.0.1:18080", "1"]},
            "gpu_end": {"gpus": [{"index": 0, "target": true, "app_clock_graphics_mhz": clocks_end, "app_clock_memory_mhz": 3201, "clocks_event_reasons_active": reasons_end}]},
            "gate": {"verdict": "PASS", "retry": [], "reasons": []},
            "diagnostic": {"diagnostic_only": true, "tokens_per_s": 328.1}
        },
        "kernel_profile": {"ranges": ranges}
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn ranges_doc(labels: &[(&str, i64)], attributed: i64, total: i64) -> Value {
    let rows: Vec<Value> = labels
        .iter()
        .map(|(l, n)| json!({"label": l, "occurrences": n, "host_wall_time_ns": 1000 * n, "depths": {"0": n}}))
        .collect();
    json!({"schema": "nsyskit.ranges/v1", "ranges": rows, "totals": {"kernel_work_total_ns": total, "kernel_work_attributed_ns": attributed}, "thread_diagnostics": []})
}

#[test]
fn every_run_invalidator_refuses_on_serve_capture_bundles() {
    let dir = tempfile::tempdir().unwrap();
    let std_ranges = ranges_doc(&[("vibeserve.engine.iteration", 400), ("vibeserve.graph.replay", 400)], 990, 1000);
    let ok = serve_bundle("ok", 1980, "0x0000000000000000", "3", std_ranges.clone(), json!({}));
    let a = write(dir.path(), "a.json", &ok);
    let b = write(dir.path(), "b.json", &ok);
    let (d, code, _) = compare(&a, &b, &[]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    assert_eq!(d["iteration_label"], "vibeserve.engine.iteration");
    let cases: Vec<(&str, Value)> = vec![
        ("run_outcome", serve_bundle("failed", 1980, "0x0000000000000000", "3", std_ranges.clone(), json!({}))),
        ("clock_stability", serve_bundle("ok", 1755, "0x0000000000000000", "3", std_ranges.clone(), json!({}))),
        ("thermal_throttling", serve_bundle("ok", 1980, "0x0000000000000020", "3", std_ranges.clone(), json!({}))),
        ("warmup_command", serve_bundle("ok", 1980, "0x0000000000000000", "10", std_ranges.clone(), json!({}))),
        (
            "iteration_label",
            serve_bundle(
                "ok",
                1980,
                "0x0000000000000000",
                "3",
                ranges_doc(&[("vibeserve.graph.replay", 400)], 990, 1000),
                json!({}),
            ),
        ),
        (
            "expected_ranges",
            serve_bundle(
                "ok",
                1980,
                "0x0000000000000000",
                "3",
                ranges_doc(
                    &[
                        ("vibeserve.engine.iteration", 400),
                        ("vibeserve.graph.replay", 400),
                        ("vibeserve.model.prefill", 3),
                    ],
                    990,
                    1000,
                ),
                json!({}),
            ),
        ),
        (
            "attributed_share",
            serve_bundle(
                "ok",
                1980,
                "0x0000000000000000",
                "3",
                ranges_doc(&[("vibeserve.engine.iteration", 400), ("vibeserve.graph.replay", 400)], 700, 1000),
                json!({}),
            ),
        ),
    ];
    for (check, bundle) in cases {
        let b = write(dir.path(), &format!("b_{check}.json"), &bundle);
        let (d, code, _) = compare(&a, &b, &[]);
        assert_eq!(code, 1, "{check}");
        let c = checks(&d);
        assert!(c.contains(&check.to_string()), "{check}: {c:?}");
        let i = inv_of(&d, check);
        assert!(!i["reason"].as_str().unwrap().is_empty());
        match check {
            "run_outcome" => assert_eq!(i["a"], "failed"),
            "clock_stability" => {
                assert_eq!((&i["a"]["graphics_mhz"], &i["b"]["graphics_mhz"]), (&json!(1980), &json!(1755)))
            }
            "attributed_share" => assert_eq!((i["a"].as_f64(), i["b"].as_f64()), (Some(0.99), Some(0.7))),
            "expected_ranges" => assert_eq!(i["b"], json!(["vibeserve.model.prefill"])),
            "iteration_label" => assert_eq!((&i["a"], &i["b"]), (&json!(400), &json!(0))),
            _ => {}
        }
    }
    // a share difference within the threshold passes; a lower threshold refuses it
    let near = write(
        dir.path(),
        "near.json",
        &serve_bundle(
            "ok",
            1980,
            "0x0000000000000000",
            "3",
            ranges_doc(&[("vibeserve.engine.iteration", 400), ("vibeserve.graph.replay", 400)], 960, 1000),
            json!({}),
        ),
    );
    assert_eq!(compare(&a, &near, &[]).1, 0);
    assert_eq!(compare(&a, &near, &["--max-attributed-share-diff", "0.01"]).1, 1);
    // a gate RETRY recorded by serve-capture refuses
    let mut g = ok.clone();
    g["serve_capture"]["gate"] =
        json!({"verdict": "RETRY", "retry": ["G2"], "reasons": ["G2: the report is 1911082 bytes"]});
    let gb = write(dir.path(), "gate.json", &g);
    let (d, _, _) = compare(&a, &gb, &[]);
    assert_eq!(inv_of(&d, "gate")["a"]["retry"], json!(["G2"]));
    // a different clock policy at the end of the run on both sides
    let mut p2 = serve_bundle("ok", 1600, "0x0", "3", std_ranges.clone(), json!({}));
    p2["provenance"]["gpu"]["gpus"][0]["app_clock_graphics_mhz"] = json!(1755);
    let mut p1 = serve_bundle("ok", 1755, "0x0", "3", std_ranges.clone(), json!({}));
    p1["provenance"]["gpu"]["gpus"][0]["app_clock_graphics_mhz"] = json!(1755);
    let (e1, e2) = (write(dir.path(), "e1.json", &p1), write(dir.path(), "e2.json", &p2));
    let (d, _, _) = compare(&e1, &e2, &[]);
    assert!(checks(&d).contains(&"clock_policy_end".to_string()), "{:?}", checks(&d));
}

#[test]
fn profiled_throughput_is_never_compared_with_an_unprofiled_score() {
    let dir = tempfile::tempdir().unwrap();
    let r = ranges_doc(&[("vibeserve.engine.iteration", 400)], 990, 1000);
    let bench = |tpot: f64| json!({"benchmark": {"schema": "nsyskit.benchmark/v1", "profiled": false, "scores": {"tpot_ms": tpot}}});
    let a = write(dir.path(), "a.json", &serve_bundle("ok", 1980, "0x0", "3", r.clone(), bench(12.0)));
    let b = write(dir.path(), "b.json", &serve_bundle("ok", 1980, "0x0", "3", r.clone(), bench(11.0)));
    let p = write(dir.path(), "p.json", &serve_bundle("ok", 1980, "0x0", "3", r.clone(), json!({})));
    let (d, _, _) = compare(&a, &b, &[]);
    assert_eq!(d["throughput"]["compared"], true);
    assert_eq!(d["throughput"]["scores"]["tpot_ms"], json!([12.0, 11.0]));
    // B has only the profiled client's throughput: never compared
    let (d, _, _) = compare(&a, &p, &[]);
    assert_eq!(d["throughput"]["compared"], false);
    assert!(
        d["throughput"]["reason"]
            .as_str()
            .unwrap()
            .contains("profiled run's throughput is diagnostic only (unprofiled vs profiled)"),
        "{}",
        d["throughput"]
    );
    assert_eq!(d["b"]["diagnostic_throughput"]["diagnostic_only"], true);
    let (d, _, _) = compare(&p, &p, &[]);
    assert_eq!(d["throughput"]["compared"], false);
}

#[test]
fn graphs_vs_eager_is_refused() {
    // the fixtures have no eager CUDA capture: a synthetic copy of the node-level capture with every graph
    // trace removed (no graphNodeId, no graph launches)
    let dir = tempfile::tempdir().unwrap();
    let eager = planted(
        dir.path(),
        "nsys-2025.3.1/gpu_full_node.sqlite",
        "eager.sqlite",
        &[
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = NULL; UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET graphNodeId = NULL;".into(),
            "UPDATE StringIds SET value = 'cudaLaunchKernel_v7000' WHERE value LIKE 'cudaGraphLaunch%';".into(),
            "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS%';".into(),
        ],
    );
    let node = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let (d, code, _) = compare(&node, &eager, &[]);
    assert_eq!(code, 1);
    let i = inv_of(&d, "cuda_graphs");
    assert_eq!((&i["a"], &i["b"]), (&json!("graphs"), &json!("eager")));
}

#[test]
fn a_planted_kernel_slowdown_in_one_range_is_found_in_that_range() {
    // every kernel launched inside vibeserve.sampling.d2h (runtime call on the range's thread, then
    // correlationId) 10 % longer; its D2H memcpy and every other range untouched
    let dir = tempfile::tempdir().unwrap();
    let f = "nsys-2025.3.1/decode_clean.sqlite";
    let a = planted(dir.path(), f, "a.sqlite", &[]);
    let b = planted(
        dir.path(),
        f,
        "b.sqlite",
        &["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + ((end - start) * 11) / 10 WHERE correlationId IN (
            SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN NVTX_EVENTS n ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end
            LEFT JOIN StringIds s ON s.id = n.textId
            WHERE COALESCE(n.text, s.value) = 'vibeserve.sampling.d2h');"
            .into()],
    );
    let (d, code, _) = compare(
        &a,
        &b,
        &["--metric", "kernel_busy_union", "--label", "vibeserve.sampling.d2h", "--fail-on-regression", "1"],
    );
    assert_eq!(d["verdict"], "COMPARABLE", "{:?}", d["invalidators"]);
    let d2h = label(&d, "vibeserve.sampling.d2h");
    assert_eq!(d2h["verdict"], "slower");
    let busy = metric(d2h, "kernel_busy_union");
    let rel = busy["relative_change"].as_f64().unwrap();
    // the union also holds the unchanged memcpy: more than 0, at most the kernels' 10 %
    assert!(rel > 0.01 && rel <= 0.10, "{rel}");
    assert_eq!(metric(d2h, "host_wall")["verdict"], "no significant change");
    // the replay's kernels were not touched
    let replay = label(&d, "vibeserve.graph.replay");
    assert_eq!(metric(replay, "kernel_busy_union")["relative_change"], 0.0);
    assert_eq!(replay["verdict"], "no significant change");
    // the CI gate on that label and metric trips
    assert_eq!(code, 1);
    assert_eq!(d["regression"]["failed"], true);
    assert_eq!(d["regression"]["metric"], "kernel_busy_union");
}

/// Unknown is not comparable (issue #37): a pair whose comparability facts are unknown (two raw exports without
/// provenance: request rate, seed policy, clock policy… are recorded by no export) is UNVERIFIED, exit 1, its
/// deltas and statistics still given; `--allow-unverified` accepts it (COMPARABLE, exit 0), `--strict` refuses.
#[test]
fn unknown_facts_make_a_pair_unverified_not_comparable() {
    let a = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let (d, code, _) = compare(&a, &a, &["--no-allow"]);
    assert_eq!((d["verdict"].as_str(), code), (Some("UNVERIFIED"), 1));
    assert!(d["invalidators"].as_array().unwrap().is_empty());
    let unchecked = d["unchecked"].as_array().unwrap().len();
    assert!(unchecked > 0);
    assert!(d["range_deltas"].is_array() && d["ab"].is_object(), "the numbers are still given");
    assert!(d["notes"].as_array().unwrap().iter().any(|n| n
        .as_str()
        .unwrap()
        .starts_with(&format!("unverified: {unchecked} comparability check(s) could not be made"))));
    let (d, code, _) = compare(&a, &a, &[]);
    assert_eq!((d["verdict"].as_str(), code), (Some("COMPARABLE"), 0));
    let (d, code, _) = compare(&a, &a, &["--strict"]);
    assert_eq!((d["verdict"].as_str(), code), (Some("REFUSED"), 1));
}

/// A pod-attach bundle keeps its gate at pod_attach.gate: two copies of the real H200 bundle whose gate said
/// RETRY (G2, a 9.8 MB report under the throughput tier's 10 MB) are not comparable, and its report says the
/// class does not stand (issue #37).
#[test]
fn a_pod_attach_bundle_whose_gate_said_retry_is_refused_and_unreliable() {
    let b = common::fixture("pod-attach-gpu/bundle/inference_perfbench_v1.json");
    let (d, code, _) = compare(&b, &b, &[]);
    assert_eq!((d["verdict"].as_str(), code), (Some("REFUSED"), 1));
    let gate = d["invalidators"].as_array().unwrap().iter().find(|i| i["check"] == "gate").expect("gate invalidator");
    assert_eq!(gate["a"]["retry"], serde_json::json!(["G2"]), "{gate}");
    let out = Command::cargo_bin("report").unwrap().arg(&b).arg("--compact").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r = common::one_doc(&out.stdout);
    assert_eq!(r["class"], "unreliable");
    assert_eq!(r["decision"]["rule"], "gates.G2");
    assert!(r["decision"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("gate-check said RETRY (pod_attach.gate.document): G2:"));
}
