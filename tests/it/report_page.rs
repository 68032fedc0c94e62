//! The first picture a user sees (`scripts/demo`): true kernel shares from both routes, the capture header,
//! the capture's start in the bundle, and the page as a browser renders it (one time axis per section).

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

const CAP: &str = "nsys-2025.3.1/gpu_full_node.sqlite";
const CSV: &str = "nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv";

fn run(bin: &str, args: &[&str], stdin: Option<Vec<u8>>) -> (Vec<u8>, i32) {
    let mut c = Command::cargo_bin(bin).unwrap();
    c.args(args).current_dir(common::root());
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let out = c.output().unwrap();
    (out.stdout, out.status.code().unwrap_or(-1))
}

/// The demo's bundle: `kern-csv-to-json --top 5`, `sqlite-ranges`, gate-check, merged by bundle-merge.
fn demo_bundle(dir: &Path) -> PathBuf {
    let bundle = dir.join("inference_perfbench_v1.json");
    let b = bundle.to_str().unwrap();
    let (stats, rc) = run("kern-csv-to-json", &["--top", "5", common::fixture(CSV).to_str().unwrap()], None);
    assert_eq!(rc, 0);
    assert_eq!(run("bundle-merge", &[b], Some(stats)).1, 0);
    let (ranges, rc) =
        run("sqlite-ranges", &[common::fixture(CAP).to_str().unwrap(), "--range-prefix", "vibeserve."], None);
    assert_eq!(rc, 0);
    assert_eq!(run("bundle-merge", &[b], Some(ranges)).1, 0);
    let (gate, rc) = run("gate-check", &[common::fixture(CAP).to_str().unwrap()], None);
    assert_eq!(rc, 0);
    assert_eq!(run("bundle-merge", &[b], Some(gate)).1, 0);
    bundle
}

fn report(input: &Path, extra: &[&str]) -> Value {
    report_exit(input, extra, 0)
}

/// The report, which must exit with `code` (1: no class stands).
fn report_exit(input: &Path, extra: &[&str], code: i32) -> Value {
    let mut args = vec![input.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (out, rc) = run("report", &args, None);
    assert_eq!(rc, code);
    common::one_doc(&out)
}

fn shares(r: &Value) -> Vec<(String, f64)> {
    r["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["category"].as_str().unwrap().to_string(), c["share"].as_f64().unwrap()))
        .collect()
}

#[test]
fn shares_come_from_the_whole_kernel_table_on_both_routes() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = demo_bundle(dir.path());
    let from_bundle = report(&bundle, &[]);
    let from_sqlite = report(&common::fixture(CAP), &[]);
    // the CSV's own Time (%) column says 27.8 % for the top kernel: 6 009 202 of 21 622 401 ns
    let csv = std::fs::read_to_string(common::fixture(CSV)).unwrap();
    let first = csv.lines().nth(1).unwrap();
    assert!(first.starts_with("27.8,6009202,"), "{first}");
    for r in [&from_bundle, &from_sqlite] {
        let top = &r["top_kernels"][0];
        assert_eq!(top["name"], "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT");
        assert!((top["share"].as_f64().unwrap() - 6009202.0 / 21622401.0).abs() < 1e-12, "{}", top["share"]);
        assert_eq!(r["capture"]["kernel_time_ns"], 21622401);
        assert_eq!(r["capture"]["kernel_names"], 28);
    }
    // the ranking of categories is the same on both routes: elementwise 39.8 %, gemm 38.2 %, not gemm first
    let (a, b) = (shares(&from_bundle), shares(&from_sqlite));
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for ((ca, sa), (cb, sb)) in a.iter().zip(&b) {
        assert_eq!(ca, cb);
        assert!((sa - sb).abs() < 1e-12, "{ca}: {sa} vs {sb}");
    }
    assert_eq!(a[0].0, "elementwise");
    assert_eq!(format!("{:.1}", a[0].1 * 100.0), "39.8");
    assert_eq!((a[1].0.as_str(), format!("{:.1}", a[1].1 * 100.0)), ("gemm", "38.2".to_string()));
    assert_eq!(from_bundle["kernels_source"], "kernel_profile.stats.cuda_gpu_kern_sum.rows");
}

#[test]
fn a_bundle_with_only_the_cut_list_counts_what_it_omits() {
    // a bundle that kept only top_kernels (5 of 28) and the totals: shares still over the totals, the rest is
    // one not_listed row
    let dir = tempfile::tempdir().unwrap();
    let bundle = demo_bundle(dir.path());
    let mut v: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    v["kernel_profile"].as_object_mut().unwrap().remove("stats");
    std::fs::write(&bundle, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let r = report(&bundle, &[]);
    assert_eq!(r["kernels_source"], "kernel_profile.top_kernels");
    assert!((r["top_kernels"][0]["share"].as_f64().unwrap() - 0.27791557).abs() < 1e-6);
    let cats = shares(&r);
    let listed: i64 = v["kernel_profile"]["top_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["total_time_ns"].as_i64().unwrap())
        .sum();
    let nl = cats.iter().find(|(c, _)| c == "not_listed").expect("a not_listed row");
    assert!((nl.1 - (21622401 - listed) as f64 / 21622401.0).abs() < 1e-12);
    assert!((cats.iter().map(|c| c.1).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(r["unattributed"]["statements"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.as_str().unwrap().contains("not_listed")));
}

#[test]
fn the_bundle_records_the_capture_start_not_a_file_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = demo_bundle(dir.path());
    let v: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    // TARGET_INFO_SESSION_START_TIME of the export: 2026-11-29T20:38:21
    assert_eq!(v["kernel_profile"]["captured_at"], "2026-11-29T20:38:21Z");
    // merging the CSV (captured_at = its mtime) again does not replace it; an explicit --captured-at does
    let b = bundle.to_str().unwrap();
    let (stats, _) = run("kern-csv-to-json", &[common::fixture(CSV).to_str().unwrap()], None);
    assert_eq!(run("bundle-merge", &[b], Some(stats)).1, 0);
    let v: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(v["kernel_profile"]["captured_at"], "2026-11-29T20:38:21Z");
    let (stats, _) = run(
        "kern-csv-to-json",
        &["--captured-at", "2026-11-29T20:38:20Z", common::fixture(CSV).to_str().unwrap()],
        None,
    );
    assert_eq!(run("bundle-merge", &[b], Some(stats)).1, 0);
    let v: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(v["kernel_profile"]["captured_at"], "2026-11-29T20:38:20Z");
    // a CSV alone still records its mtime (a gap filled, labelled csv-mtime)
    let lone = dir.path().join("lone.json");
    let (stats, _) = run("kern-csv-to-json", &[common::fixture(CSV).to_str().unwrap()], None);
    assert_eq!(run("bundle-merge", &[lone.to_str().unwrap()], Some(stats)).1, 0);
    let v: Value = serde_json::from_slice(&std::fs::read(&lone).unwrap()).unwrap();
    assert!(v["kernel_profile"]["captured_at"].is_string());
    assert_eq!(v["kernel_profile"]["stats"]["cuda_gpu_kern_sum"]["captured_at_from"], "csv-mtime");
}

#[test]
fn capture_header_and_primary_split_on_the_demo_capture() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = demo_bundle(dir.path());
    for r in [report(&bundle, &[]), report(&common::fixture(CAP), &[])] {
        let c = &r["capture"];
        assert_eq!(c["captured_at"], "2026-11-29T20:38:21Z");
        assert_eq!(c["gpus"][0], "NVIDIA H200");
        assert_eq!(c["driver_version"], "580.159.04");
        assert_eq!(c["nsys_version"], "2025.3.2");
        assert_eq!(c["duration_ns"], 9588479707i64);
        assert_eq!(c["graph_trace_level"], "node");
        let sp = &r["primary_split"];
        assert_eq!(sp["label"], "vibeserve.engine.iteration");
        assert_eq!(sp["children"][0]["label"], "vibeserve.model.prefill");
        // 456 114 228 of 546 505 969 ns
        assert!((sp["children"][0]["share_of_primary"].as_f64().unwrap() - 456114228.0 / 546505969.0).abs() < 1e-12);
        // the readiness document's figure: 1.411 ms of iteration time in no child range
        assert_eq!(sp["not_in_any_child_ns"], 546505969i64 - (456114228 + 40235491 + 23270205 + 22232998 + 3241692));
    }
}

#[test]
fn the_demo_page_as_chromium_renders_it() {
    let Some(chromium) = common::chromium_or_skip("the_demo_page_as_chromium_renders_it") else { return };
    let dir = tempfile::tempdir().unwrap();
    let bundle = demo_bundle(dir.path());
    let page = dir.path().join("report.html");
    let r = report(&bundle, &["--html", page.to_str().unwrap()]);
    let (dom, segs) = common::render_and_measure(&chromium, &page, dir.path());
    for id in ["class", "capture", "split", "ranges", "categories", "kernels", "signals", "provenance", "unattributed"]
    {
        assert!(dom.contains(&format!("id=\"{id}\"")), "the page has no #{id}");
    }
    // the header shows the document's numbers
    assert_eq!(common::cells(&dom, "gpu"), vec!["NVIDIA H200"]);
    assert_eq!(common::cells(&dom, "captured_at")[0].trim(), "2026-11-29T20:38:21Z");
    assert_eq!(common::cells(&dom, "driver")[0], "580.159.04 (CUDA 13.0)");
    assert_eq!(common::cells(&dom, "kernels")[0], "28 kernel names, 9579 launches, 21.622 ms of kernel time");
    // shares as printed equal the document's, the top kernel is 27.8 %, not 47.3 %
    let ks: Vec<String> = r["top_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .take(25)
        .map(|k| format!("{:.1}%", k["share"].as_f64().unwrap() * 100.0))
        .collect();
    assert_eq!(common::cells(&dom, "kernel-share"), ks);
    assert_eq!(ks[0], "27.8%");
    let cs: Vec<String> = r["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{:.1}%", c["share"].as_f64().unwrap() * 100.0))
        .collect();
    assert_eq!(common::cells(&dom, "category-share"), cs);
    assert_eq!(cs[..2], ["39.8%".to_string(), "38.2%".to_string()]);
    assert_eq!(common::cells(&dom, "split-share")[0], "83.5%");
    // signals and provenance are tables, never raw JSON or `null`
    assert_eq!(common::cells(&dom, "signal-coverage_fraction"), vec!["4.1%"]);
    assert!(!dom.contains(">null<") && !dom.contains("\"coverage_fraction\""));
    // one time axis per section: pixels per ns are the same for every segment of a section
    for axis in ["ranges", "split", "categories", "kernels"] {
        let s: Vec<&(String, i64, f64)> = segs.iter().filter(|s| s.0 == axis && s.1 > 0).collect();
        assert!(!s.is_empty(), "no {axis} bar");
        let big = s.iter().max_by_key(|x| x.1).unwrap();
        let k = big.2 / big.1 as f64;
        for x in &s {
            assert!(
                (x.2 - k * x.1 as f64).abs() < 0.01 + 1e-3 * x.2,
                "{axis}: {} ns drawn {} px, expected {}",
                x.1,
                x.2,
                k * x.1 as f64
            );
        }
    }
    // api.serve's 5 837.784 ms wall is the full axis; scheduling's 3.242 ms is drawn 1800× shorter
    let px_of = |ns: i64| segs.iter().find(|s| s.0 == "ranges" && s.1 == ns).map(|s| s.2).unwrap();
    let serve = px_of(5837783901);
    assert!((serve - nsyskit::report::html::AXIS_PX).abs() < 0.5, "{serve}");
    assert!(px_of(3241692) < serve / 1000.0);
    // and a screenshot of the real page
    let png = dir.path().join("report.png");
    let out = std::process::Command::new(&chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", dir.path().join("profile2").display()))
        .arg(format!("--screenshot={}", png.display()))
        .args(["--window-size=1200,2400"])
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(png.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    if let Ok(keep) = std::env::var("NSYSKIT_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

#[test]
fn a_graph_level_capture_gets_no_class_and_no_workload_ranking() {
    // gpu_full_graph: --cuda-graph-trace=graph, 200 graph launches = 200 opaque GRAPH_TRACE rows; the KERNEL
    // table holds only the 579 eager kernels (before: python_overhead_bound R6, reduce_kernel "56 %")
    let graph = "nsys-2025.3.1/gpu_full_graph.sqlite";
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let b = bundle.to_str().unwrap();
    for bin in ["sqlite-ranges", "gate-check"] {
        let (doc, rc) = run(bin, &[common::fixture(graph).to_str().unwrap()], None);
        assert!(rc == 0 || (bin == "gate-check" && rc == 1));
        assert_eq!(run("bundle-merge", &[b], Some(doc)).1, 0);
    }
    let html = dir.path().join("g.html");
    for r in
        [report_exit(&common::fixture(graph), &[], 1), report_exit(&bundle, &["--html", html.to_str().unwrap()], 1)]
    {
        // G1 rejects graph-level tracing, so no class stands (exit 1); the range rules say R0 with the counts;
        // from the export the step budget would decide, with the same class
        assert_eq!((r["class"].as_str(), r["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G1")));
        assert_eq!(r["decision"]["would_be"]["class"], "mixed_or_unclear");
        assert_eq!(
            (r["range_decision"]["class"].as_str().unwrap(), r["range_decision"]["rule"].as_str().unwrap()),
            ("mixed_or_unclear", "R0"),
            "{}",
            r["range_decision"]["reason"]
        );
        let reason = r["range_decision"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("graph-level tracing")
                && reason.contains("200 CUDA graph launches")
                && reason.contains("--cuda-graph-trace=node"),
            "{reason}"
        );
        assert!(r["kernels_scope"].as_str().unwrap().starts_with("eager kernels only"));
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("id=\"kernels-scope\"") && page.contains("not the workload&#39;s kernel ranking"));
    // the node-level capture of the same program keeps its class and lists every kernel
    let r = report(&common::fixture(CAP), &[]);
    assert_eq!(r["range_decision"]["class"], "python_overhead_bound");
    assert_eq!(
        (r["class"].as_str().unwrap(), r["decision"]["rule"].as_str().unwrap()),
        ("mixed_or_unclear", "step_budget.no_dominant_component")
    );
    assert_eq!(r["kernels_scope"], "every kernel of the capture");
}

#[test]
fn a_range_that_launches_graphs_is_measured_by_its_correlated_busy_union() {
    // vibeserve.graph.replay (node level): 200 occurrences, 400 runtime calls, 9000 kernels; the launch returns
    // before the replay runs, so its host-clipped coverage is 0.239 ms of 23.270 ms while its kernels are busy
    // 19.929 ms: coverage 85.6 %, not 1.0 %
    let r = report(&common::fixture(CAP), &["--label", "vibeserve.graph.replay"]);
    let e = &r["evidence"][0];
    assert_eq!(e["label"], "vibeserve.graph.replay");
    let (busy, wall, clipped) = (
        e["kernel_busy_union_ns"].as_i64().unwrap(),
        e["host_wall_time_ns"].as_i64().unwrap(),
        e["host_range_kernel_coverage_ns"].as_i64().unwrap(),
    );
    assert!(clipped * 10 < busy, "{clipped} vs {busy}");
    assert!((r["signals"]["coverage_fraction"].as_f64().unwrap() - busy as f64 / wall as f64).abs() < 1e-12);
    assert!(r["signals"]["coverage_source"].as_str().unwrap().starts_with("kernel_busy_union_ns"));
    assert_eq!(
        (r["class"].as_str().unwrap(), r["decision"]["rule"].as_str().unwrap()),
        ("kernel_bound", "R3"),
        "{}",
        r["decision"]["reason"]
    );
    // an eager range keeps the host-clipped coverage
    let r = report(&common::fixture(CAP), &["--label", "vibeserve.sampling.d2h"]);
    assert_eq!(r["signals"]["coverage_source"], "host_range_kernel_coverage_ns / host_wall_time_ns");
}
