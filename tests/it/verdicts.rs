//! Issue #14 verdicts on the real captures of fixtures/README.md "Third-party NVTX and Hugging Face captures":
//! pip nvtx 0.2.17 vs 0.2.10 under nsys 2023.4.4, HF generate node/graph/eager and the injector run under nsys
//! 2025.3.1, and real kineto / nsys / driver log lines; plus edge copies of a real export with a table taken
//! away or the file truncated (made in a temporary folder, never next to the fixture).

use crate::common;

use common::{export, fixture, gate, one_doc, run};
use serde_json::Value;

fn gate_check(args: &[&str]) -> (i32, Value) {
    let (code, stdout, stderr) = run("gate-check", &[args, &["--compact"]].concat());
    assert!(code == 0 || code == 1, "exit {code}: {stderr}");
    (code, one_doc(stdout.as_bytes()))
}

fn reason(doc: &Value, id: &str) -> String {
    gate(doc, id)["reason"].as_str().unwrap().to_string()
}

#[test]
fn nvtx_recorded_but_empty_is_a_named_retry() {
    let f = fixture("nsys-2023.4.4/cpu_pynvtx_0_2_17.sqlite");
    let (code, doc) = gate_check(&[f.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(gate(&doc, "G0")["verdict"], "RETRY");
    let r = reason(&doc, "G0");
    assert!(
        r.contains("nvtx-incompatible (")
            && r.contains("cpu_pynvtx_0_2_17.sqlite: StringIds id 121 (NVTX_EVENTS: 1 row(s), no range))"),
        "{r}"
    );
    assert!(r.contains("nvtx 0.2.17"), "{r}");
    // the same program with nvtx 0.2.10: every range, no such finding (G0 has nothing to read in a 2023.4 export)
    let f = fixture("nsys-2023.4.4/cpu_pynvtx_0_2_10.sqlite");
    let (_, doc) = gate_check(&[f.to_str().unwrap(), "--readiness"]);
    assert_eq!(gate(&doc, "G0")["verdict"], "SKIP");
    assert_eq!(gate(&doc, "G8")["verdict"], "PASS", "{}", reason(&doc, "G8"));
}

#[test]
fn g0_reads_real_logs_and_the_recorded_environment() {
    let dir = tempfile::tempdir().unwrap();
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    // torch.profiler under nsys: kineto lost CUPTI to nsys, whose CUDA data is there: PASS with the note
    let log = fixture("logs/kineto-2.11.0_under_nsys-2025.3.1.console.txt");
    let (_, doc) = gate_check(&[node.to_str().unwrap(), "--log", log.to_str().unwrap()]);
    assert_eq!(gate(&doc, "G0")["verdict"], "PASS", "{}", reason(&doc, "G0"));
    let r = reason(&doc, "G0");
    assert!(r.contains("lost CUPTI to nsys") && r.contains("share a major version"), "{r}");
    // RmProfilingAdminOnly: 0 never yields a permission cause
    let params = fixture("logs/driver-params_580.159.04.txt");
    let (_, doc) = gate_check(&[node.to_str().unwrap(), "--log", params.to_str().unwrap()]);
    assert_eq!(gate(&doc, "G0")["verdict"], "PASS");
    let r = reason(&doc, "G0");
    assert!(
        r.contains("evidence against a permission cause") && !r.contains("insufficient GPU profiling permission"),
        "{r}"
    );
    // the injector run: CUDA_INJECTION64_PATH recorded in TARGET_INFO_SYSTEM_ENV, CUDA traced anyway
    let inj = export("nsys-2025.3.1/injector.sqlite.xz", dir.path());
    let (_, doc) = gate_check(&[inj.to_str().unwrap()]);
    assert_eq!(gate(&doc, "G0")["verdict"], "PASS");
    let r = reason(&doc, "G0");
    assert!(
        r.contains("CUDA_INJECTION64_PATH=/tmp/hf/libfake_injector.so (")
            && r.contains("injector.sqlite: TARGET_INFO_SYSTEM_ENV DeviceEnvironment)"),
        "{r}"
    );
    assert!(r.contains("CUDA was traced anyway"), "{r}");
    // G1 on it: nsys's default graph mode, no graph launched: said as such
    assert!(reason(&doc, "G1").contains("this capture launched no CUDA graph"), "{}", reason(&doc, "G1"));
    // the same export with its CUDA rows gone: the injector is the named cause
    let lost = dir.path().join("injector_no_cuda.sqlite");
    std::fs::copy(&inj, &lost).unwrap();
    let c = rusqlite::Connection::open(&lost).unwrap();
    c.execute_batch("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME; DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL;").unwrap();
    drop(c);
    let (code, doc) = gate_check(&[lost.to_str().unwrap()]);
    assert_eq!(code, 1);
    let r = reason(&doc, "G0");
    assert!(r.contains("foreign CUDA injection: CUDA_INJECTION64_PATH=/tmp/hf/libfake_injector.so"), "{r}");
}

#[test]
fn g6_names_graph_level_tracing_and_passes_node_level() {
    let dir = tempfile::tempdir().unwrap();
    let graph = export("nsys-2025.3.1/hf_graph.sqlite.xz", dir.path());
    let (_, doc) = gate_check(&[graph.to_str().unwrap(), "--tier", "decode", "--decode-range", "hf.decode_step"]);
    assert_eq!(gate(&doc, "G1")["verdict"], "RETRY");
    let r = reason(&doc, "G6");
    assert!(r.contains("graph-level capture (G1: --cuda-graph-trace=graph") && r.contains("94 graph launches"), "{r}");
    assert!(!r.contains("not on the thread"), "a graph-level capture does not blame threads: {r}");
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let (_, doc) = gate_check(&[node.to_str().unwrap(), "--tier", "decode", "--decode-range", "hf.decode_step"]);
    assert_eq!(gate(&doc, "G6")["verdict"], "PASS", "{}", reason(&doc, "G6"));
    assert!(
        reason(&doc, "G6").contains("94 hf.decode_step steps")
            && reason(&doc, "G6").contains("74 kernels in 98.9 % of steps")
    );
    let eager = export("nsys-2025.3.1/hf_eager.sqlite.xz", dir.path());
    let (_, doc) = gate_check(&[eager.to_str().unwrap(), "--tier", "decode", "--decode-range", "hf.decode_step"]);
    assert_eq!(gate(&doc, "G6")["verdict"], "PASS", "{}", reason(&doc, "G6"));
    assert!(reason(&doc, "G6").contains("212 kernels in 100.0 % of steps"));
}

#[test]
fn a_missing_table_is_never_pass() {
    let dir = tempfile::tempdir().unwrap();
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    for (table, name) in [("NVTX_EVENTS", "no_nvtx"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "no_runtime")] {
        let p = dir.path().join(format!("{name}.sqlite"));
        std::fs::copy(&node, &p).unwrap();
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(&format!("DROP TABLE {table};")).unwrap();
        drop(c);
        for tier in ["throughput", "decode"] {
            let (code, doc) = gate_check(&[p.to_str().unwrap(), "--tier", tier]);
            assert_eq!(code, 1, "{table} {tier}: {doc}");
            let named = doc["gates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["verdict"] == "RETRY" && g["reason"].as_str().unwrap().contains(table));
            assert!(named, "{table} {tier}: no RETRY names the table: {doc}");
        }
    }
    // a truncated file whose header was patched to the shorter page count: exit 2 naming the file and table
    let bytes = std::fs::read(&node).unwrap();
    let page = u16::from_be_bytes([bytes[16], bytes[17]]) as usize;
    let keep = bytes.len() / page / 2;
    let mut t = bytes[..keep * page].to_vec();
    t[28..32].copy_from_slice(&(keep as u32).to_be_bytes());
    let p = dir.path().join("truncated.sqlite");
    std::fs::write(&p, &t).unwrap();
    let (code, stdout, stderr) = run("gate-check", &[p.to_str().unwrap()]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("truncated.sqlite")
            && stderr.contains("corrupt or truncated")
            && stderr.contains("while reading "),
        "{stderr}"
    );
}

#[test]
fn sqlite_ranges_folds_emit_nvtx_labels_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let eager = export("nsys-2025.3.1/hf_eager.sqlite.xz", dir.path());
    let (code, folded, _) = run("sqlite-ranges", &[eager.to_str().unwrap(), "--compact"]);
    assert_eq!(code, 0);
    let (code, raw, _) = run("sqlite-ranges", &[eager.to_str().unwrap(), "--no-fold", "--compact"]);
    assert_eq!(code, 0);
    // measured: 51 251 293 bytes raw, 67 990 folded; bounded by folded labels, not occurrences
    assert!(raw.len() > 50_000_000 && folded.len() < 100_000, "{} / {}", raw.len(), folded.len());
    let f = one_doc(folded.as_bytes());
    let r = one_doc(raw.as_bytes());
    assert_eq!(r["folded"], Value::Null);
    assert_eq!(r["ranges"].as_array().unwrap().len(), 92184);
    assert_eq!(f["ranges"].as_array().unwrap().len(), 86);
    assert_eq!(f["folded"]["raw_labels"], 92184);
    assert_eq!(f["folded"]["labels"], 86);
    let mm =
        f["folded"]["folded"].as_array().unwrap().iter().find(|x| x["label"] == "aten::mm").expect("aten::mm folded");
    assert_eq!(mm["rules"], serde_json::json!(["op_id"]));
    assert!(mm["examples"][0].as_str().unwrap().starts_with("aten::mm, op_id = "));
    // every occurrence is kept: the folded ranges hold as many occurrences as the raw ones
    let occ =
        |d: &Value| d["ranges"].as_array().unwrap().iter().map(|x| x["occurrences"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(occ(&f), occ(&r));
    // node-level compiled capture: the inductor graph hashes stay distinct labels, op_id goes
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let (_, out, _) = run("sqlite-ranges", &[node.to_str().unwrap(), "--compact"]);
    let d = one_doc(out.as_bytes());
    let labels: Vec<&str> = d["ranges"].as_array().unwrap().iter().map(|x| x["label"].as_str().unwrap()).collect();
    let fx: Vec<&&str> = labels.iter().filter(|l| l.starts_with("## Call CompiledFxGraph f")).collect();
    assert!(!fx.is_empty() && fx.iter().all(|l| l.ends_with(" ##")), "{fx:?}");
    assert!(
        labels.contains(&"Torch-Compiled Region: 0/0") && labels.contains(&"Torch-Compiled Region: 0/1"),
        "{labels:?}"
    );
    assert!(labels.contains(&"hf.batch.<n>") && labels.contains(&"hf.decode_step"));
}

#[test]
fn g8_on_the_hf_capture_suggests_a_prefix_and_bounds_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let (code, doc) = gate_check(&[node.to_str().unwrap(), "--readiness"]);
    assert_eq!(code, 1);
    let g8 = gate(&doc, "G8");
    assert_eq!(g8["verdict"], "RETRY");
    assert!(reason(&doc, "G8").contains("try --range-prefix hf"), "{}", reason(&doc, "G8"));
    let ev: Vec<&str> = g8["evidence"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(ev.iter().any(|e| e.contains("suggested range prefix: hf (prefixes seen: hf.)")), "{ev:?}");
    assert!(ev.iter().any(|e| e.contains("more id-bearing label groups")), "{ev:?}");
    assert!(ev.len() < 20, "{ev:?}");
}

/// `report` on the HF captures (issue 14, "Reports that know what CUDA graphs do"): node level, the engine step
/// `hf.decode_step` is the primary label (not the far more numerous `aten::` op labels) and, since it launches
/// graphs, its device work is the correlated busy union, not the host-clipped coverage; graph level, no class
/// and no kernel ranking is claimed from the eager kernels alone.
#[test]
fn report_on_the_hf_captures_knows_what_graphs_do() {
    let dir = tempfile::tempdir().unwrap();
    let node = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let (code, out, err) = run("report", &[node.to_str().unwrap(), "--compact"]);
    assert_eq!(code, 0, "{err}");
    let d = one_doc(out.as_bytes());
    assert_eq!(d["decision"]["primary_label"], "hf.decode_step");
    let step = d["evidence"].as_array().unwrap().iter().find(|e| e["label"] == "hf.decode_step").unwrap();
    let (wall, busy, clipped) = (
        step["host_wall_time_ns"].as_f64().unwrap(),
        step["kernel_busy_union_ns"].as_f64().unwrap(),
        step["host_range_kernel_coverage_ns"].as_f64().unwrap(),
    );
    assert!(busy > clipped, "busy union {busy} vs clipped {clipped}");
    let stated = format!("{:.1}%", 100.0 * busy / wall);
    // the range rules state it (the class itself comes from the step budget of hf.decode_step: same class)
    let r = &d["range_decision"];
    assert!(r["reason"].as_str().unwrap().contains(&stated), "{} lacks {stated}", r["reason"]);
    assert_eq!((d["class"].clone(), d["decision"]["basis"].clone()), (r["class"].clone(), "step_budget".into()));

    let graph = export("nsys-2025.3.1/hf_graph.sqlite.xz", dir.path());
    let (code, out, err) = run("report", &[graph.to_str().unwrap(), "--compact"]);
    // G1 rejects graph-level tracing: no class stands (exit 1); the step budget's reading is kept as would_be
    assert_eq!(code, 1, "{err}");
    let d = one_doc(out.as_bytes());
    assert_eq!((d["class"].as_str(), d["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G1")));
    assert_eq!(d["decision"]["would_be"]["class"], "mixed_or_unclear");
    assert_eq!(d["decision"]["would_be"]["rule"], "step_budget.graph_level_capture");
    assert_eq!(d["range_decision"]["rule"], "R0");
    assert!(d["kernels_scope"].as_str().unwrap().starts_with("eager kernels only"), "{}", d["kernels_scope"]);
}
