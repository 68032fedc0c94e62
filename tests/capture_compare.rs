//! `capture-compare`: refusals on the real fixture pairs, zero deltas against itself, deltas and
//! appear/vanish on comparable pairs, and refusals from provenance facts.

mod common;

use assert_cmd::Command;
use serde_json::{json, Value};

fn compare(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (Value, i32, String) {
    let out = Command::cargo_bin("capture-compare").unwrap().arg(a).arg(b).args(extra).output().unwrap();
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
    assert_eq!(checks(&d), vec!["graph_trace_level"]);
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
    let (stats, _) = nsyskit::evidence::export_kernel_stats(&nsyskit::export::Export::open(&a).unwrap()).unwrap();
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
    let unchecked: Vec<&str> = d["unchecked"].as_array().unwrap().iter().map(|u| u["check"].as_str().unwrap()).collect();
    assert!(unchecked.contains(&"warmup") && unchecked.contains(&"foreign_gpu_process") && unchecked.contains(&"clock_policy"));
}

#[test]
fn comparable_real_pair_lists_deltas_by_impact_and_new_kernels() {
    let a = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let b = common::fixture("nsys-2025.3.1/decode_mixed.sqlite");
    let (d, code, _) = compare(&a, &b, &["--top", "0"]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    let kd = d["kernel_deltas"].as_array().unwrap();
    let impacts: Vec<i64> = kd.iter().map(|k| k["impact_ns"].as_i64().unwrap()).collect();
    assert!(impacts.windows(2).all(|w| w[0] >= w[1]), "sorted by impact");
    for k in kd {
        let t = &k["total_time_ns"];
        assert_eq!(t["delta"].as_i64().unwrap(), t["b"].as_i64().unwrap() - t["a"].as_i64().unwrap());
        assert_eq!(k["impact_ns"].as_i64().unwrap(), t["delta"].as_i64().unwrap().abs());
    }
    // the prefill of the mixed capture runs kernels the clean decode never runs
    let (sa, _) = nsyskit::evidence::export_kernel_stats(&nsyskit::export::Export::open(&a).unwrap()).unwrap();
    let (sb, _) = nsyskit::evidence::export_kernel_stats(&nsyskit::export::Export::open(&b).unwrap()).unwrap();
    let only_b: Vec<&str> = sb.iter().filter(|k| !sa.iter().any(|x| x.name == k.name)).map(|k| k.name.as_str()).collect();
    let appeared: Vec<&str> = d["kernels_appeared"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert!(!only_b.is_empty());
    assert_eq!(appeared.len(), only_b.len());
    assert!(only_b.iter().all(|n| appeared.contains(n)));
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
    let b = write(dir.path(), "b.json", &bundle("2025.3.1", 10, json!([{"pid": 433, "used_memory_mib": 10240}]), k.clone()));
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
    // the provenance gives every fact but graph use (graph launches and kernels are only in an export)
    let unchecked: Vec<&str> = d["unchecked"].as_array().unwrap().iter().map(|u| u["check"].as_str().unwrap()).collect();
    assert_eq!(unchecked, vec!["cuda_graphs"]);
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
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).arg(&good).arg("--categories").arg(&cats).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cats.txt: rule 1 (gemm): bad regular expression"));
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
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

fn real_bundle(dir: &std::path::Path, capture: &str, nsys: &std::path::Path, smi: &std::path::Path) -> std::path::PathBuf {
    let sqlite = common::fixture(&format!("nsys-2025.3.1/{capture}.sqlite"));
    let csv = common::fixture(&format!("nsys-2025.3.1/stats/{capture}_cuda_gpu_kern_sum.csv"));
    let mut docs = Vec::new();
    docs.extend(stdout_of("kern-csv-to-json", &["--top".as_ref(), "0".as_ref(), csv.as_os_str()]));
    docs.extend(stdout_of("sqlite-ranges", &[sqlite.as_os_str()]));
    docs.extend(stdout_of("gate-check", &[sqlite.as_os_str()]));
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
            "--trace=cuda,nvtx,osrt --cuda-graph-trace=node --capture-range=cudaProfilerApi --capture-range-end=stop".as_ref(),
        ],
    ));
    let bundle = dir.join(format!("{capture}.{}.json", smi.parent().unwrap().file_name().unwrap().to_string_lossy()));
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

    let (d, code, _) = compare(&clean, &mixed, &["--top", "0"]);
    assert_eq!(code, 0, "{:?}", d["invalidators"]);
    assert_eq!(d["a"]["facts"]["foreign_gpu_processes"]["value"], json!([]));
    assert_eq!(d["a"]["facts"]["graph_trace_level"]["value"], "node");
    // per-range deltas from the two real ranges documents
    let ra = nsyskit::ranges::run(&common::fixture("nsys-2025.3.1/decode_clean.sqlite"), &Default::default(), None).unwrap();
    let rb = nsyskit::ranges::run(&common::fixture("nsys-2025.3.1/decode_mixed.sqlite"), &Default::default(), None).unwrap();
    let it = d["range_deltas"].as_array().unwrap().iter().find(|r| r["label"] == "vibeserve.engine.iteration").unwrap();
    let wall = |doc: &nsyskit::ranges::RangesDoc| doc.ranges.iter().find(|r| r.label == "vibeserve.engine.iteration").unwrap().host_wall_time_ns;
    assert_eq!(it["host_wall_time_ns"]["a"], wall(&ra));
    assert_eq!(it["host_wall_time_ns"]["b"], wall(&rb));
    assert!(d["kernels_appeared"].as_array().unwrap().len() > 0);

    let (d, code, _) = compare(&clean, &mixed_foreign, &[]);
    assert_eq!(code, 1);
    assert_eq!(checks(&d), vec!["foreign_gpu_process"]);
    assert_eq!(d["b"]["facts"]["foreign_gpu_processes"]["value"][0]["pid"], 433);

    // and report reads the same real bundle
    let out = Command::cargo_bin("report").unwrap().arg(&mixed).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let r = common::one_doc(&out.stdout);
    assert_eq!(r["provenance"]["schema"], "nsyskit.provenance/v1");
    assert_eq!(r["decision"]["primary_label"], "vibeserve.engine.iteration");
    assert_eq!(r["kernels_source"], "kernel_profile.top_kernels");
}

// ---------------------------------------------------------------------------------------------------------
// Issue 17 regressions: a FIFO never hangs, `-` is stdin (once), a known block of the wrong type is refused.

fn compare_raw(args: &[&std::ffi::OsStr], stdin: Vec<u8>) -> std::process::Output {
    Command::cargo_bin("capture-compare").unwrap().args(args).write_stdin(stdin).timeout(std::time::Duration::from_secs(120)).output().unwrap()
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
    let o = compare_raw(&[a.as_os_str(), "-".as_ref()], std::fs::read(&a).unwrap());
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
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.json: $.kernel_profile: expected an object, found a string"));
    let o = compare_raw(&["/dev/null".as_ref(), a.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/dev/null: is a character device"));
}
