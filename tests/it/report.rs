//! `report`: one class per capture, evidence rows, unattributed work, and the HTML page.
//!
//! Each class has a test on a synthetic evidence bundle built to show it (synthetic numbers, not fixture
//! numbers); the real captures go through the same binary.

use crate::common;

use assert_cmd::Command;
use serde_json::{json, Value};

#[allow(clippy::too_many_arguments)]
fn range(label: &str, wall: i64, cov: i64, busy: i64, span: i64, sync: Value, depth: &str, parent: &str) -> Value {
    json!({
        "label": label,
        "occurrences": 10,
        "occurrences_with_device_work": if busy > 0 { 10 } else { 0 },
        "runtime_calls": 40,
        "kernels": if busy > 0 { 30 } else { 0 },
        "memcpys": 0, "memsets": 0, "graph_traces": 0,
        "host_wall_time_ns": wall,
        "wall_ns_min": wall / 10, "wall_ns_median": wall / 10, "wall_ns_max": wall / 10,
        "kernel_work_ns": busy,
        "host_range_kernel_coverage_ns": cov,
        "host_range_kernel_coverage_fraction": cov as f64 / wall as f64,
        "kernel_busy_union_ns": busy,
        "kernel_span_ns": span,
        "gpu_idle_within_kernel_span_ns": span - busy,
        "uncovered_host_time_ns": wall - cov,
        "gpu_busy_fraction": if span > 0 { Value::from(busy as f64 / span as f64) } else { Value::Null },
        "sync": sync,
        "depths": {depth: 10},
        "parents": {parent: 10},
    })
}

/// A bundle whose primary range `step` has the given wall/coverage/busy/span, a child without device work,
/// and the given top kernels.
fn bundle(wall: i64, cov: i64, busy: i64, span: i64, sync: Value, kernels: Value) -> Value {
    json!({
        "schema": "nsyskit.bundle/v1",
        "tool": {"name": "bundle-merge", "version": "0.1.0"},
        "provenance": {"schema": "nsyskit.provenance/v1", "nsys": {"version": "2025.3.1"}, "capture": {"flags": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"]}},
        "kernel_profile": {
            "top_kernels": kernels,
            "ranges": {
                "schema": "nsyskit.ranges/v1",
                "ranges": [
                    range("step", wall, cov, busy, span, sync, "0", ""),
                    range("step.schedule", wall / 10, 0, 0, 0, json!({}), "1", "step"),
                ],
                "thread_diagnostics": [
                    {"globalTid": 281488331374592i64 + 1, "pid": 796, "tid": 797, "mapping": "unmapped", "is_main_thread": false, "occurrences": 3, "runtime_calls": 5, "device_rows_attributed": 0}
                ],
                "totals": {"kernels_total": 320, "kernel_work_total_ns": busy + 1000, "kernels_attributed": 300, "kernel_work_attributed_ns": busy, "kernels_unattributed": 20, "kernel_work_unattributed_ns": 1000},
                "notes": []
            }
        }
    })
}

fn gemm(t: i64) -> Value {
    json!([{"name": "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT", "total_time_ns": t, "instances": 30, "share": 1.0}])
}

fn report_on(doc: &Value, extra: &[&str]) -> (Value, i32) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bundle.json");
    std::fs::write(&p, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    let out = Command::cargo_bin("report").unwrap().arg(&p).args(extra).output().unwrap();
    assert!(out.status.code() == Some(0), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    (common::one_doc(&out.stdout), out.status.code().unwrap())
}

fn class_of(doc: &Value) -> (String, String) {
    let (r, _) = report_on(doc, &[]);
    (r["class"].as_str().unwrap().to_string(), r["decision"]["rule"].as_str().unwrap().to_string())
}

// ---------------------------------------------------------------------------------------------------------
// Synthetic nsys exports (built with rusqlite in a temp dir, the tables and columns nsys writes), run through
// the ranges library inside `report`: one per class.

const PID: i64 = 100;
fn gpid() -> i64 {
    (1i64 << 48) | (PID << 24)
}
fn gtid() -> i64 {
    gpid() | PID
}

struct Synth {
    conn: rusqlite::Connection,
    strings: std::collections::HashMap<String, i64>,
    corr: i64,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Synth {
    fn new() -> Synth {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("synthetic.sqlite");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
             CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER, callchainId INTEGER);
             CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, graphNodeId INTEGER);
             CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, graphNodeId INTEGER);
             CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
             CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
             CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
             CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
             INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.3.2.0');
             INSERT INTO META_DATA_CAPTURE VALUES ('CAPTURE_EVENT_TYPE', 'Cuda'), ('CAPTURE_EVENT_TYPE', 'NvtxEvents'), ('PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE', 'Node');",
        )
        .unwrap();
        conn.execute("INSERT INTO PROCESSES VALUES (?1, ?2, 'python3')", rusqlite::params![gpid(), PID]).unwrap();
        Synth { conn, strings: Default::default(), corr: 0, _dir: dir, path }
    }
    fn sid(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as i64 + 1;
        self.conn.execute("INSERT INTO StringIds VALUES (?1, ?2)", rusqlite::params![id, s]).unwrap();
        self.strings.insert(s.to_string(), id);
        id
    }
    fn range(&mut self, label: &str, start: i64, end: i64) {
        let id = self.sid(label);
        self.conn
            .execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId) VALUES (?1, ?2, 59, ?3, ?4, 0)", rusqlite::params![start, end, id, gtid()])
            .unwrap();
    }
    /// A runtime call on the main thread; returns its correlation id.
    fn call(&mut self, api: &str, start: i64, end: i64) -> i64 {
        self.corr += 1;
        let id = self.sid(api);
        self.conn
            .execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) VALUES (?1, ?2, ?3, ?4, ?5)", rusqlite::params![start, end, gtid(), self.corr, id])
            .unwrap();
        self.corr
    }
    fn kernel(&mut self, name: &str, corr: i64, start: i64, end: i64) {
        let id = self.sid(name);
        self.conn
            .execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, correlationId, globalPid, demangledName, shortName) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?5)", rusqlite::params![start, end, corr, gpid(), id])
            .unwrap();
    }
    fn memcpy(&mut self, corr: i64, start: i64, end: i64) {
        self.conn
            .execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, correlationId, globalPid, bytes, copyKind) VALUES (?1, ?2, 0, ?3, ?4, 1048576, 1)", rusqlite::params![start, end, corr, gpid()])
            .unwrap();
    }
    /// `steps` occurrences of `step`, each `len` ns long, filled by `body(self, t0)`.
    fn steps(mut self, steps: i64, len: i64, mut body: impl FnMut(&mut Synth, i64)) -> Synth {
        for i in 0..steps {
            let t0 = 1_000_000 + i * (len + 50_000);
            self.range("step", t0, t0 + len);
            body(&mut self, t0);
        }
        self
    }
}

const US: i64 = 1000;
const GEMM: &str = "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT";

fn report_on_export(s: &Synth) -> Value {
    report_on_export_exit(s, 0)
}

/// The report on a synthetic export, which must exit with `code` (1: no class stands).
fn report_on_export_exit(s: &Synth, code: i32) -> Value {
    let out = Command::cargo_bin("report").unwrap().arg(&s.path).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let r = common::one_doc(&out.stdout);
    // the evidence row is the ranges library's row for the primary label, number for number
    let doc = nsyskit::sqlite_ranges::run(&s.path, &Default::default(), None).unwrap();
    let label = r["decision"]["primary_label"].as_str().unwrap();
    let row = doc.ranges.iter().find(|x| x.label == label).unwrap();
    let ev = &r["evidence"][0];
    assert_eq!(ev["host_wall_time_ns"], row.host_wall_time_ns);
    assert_eq!(ev["host_range_kernel_coverage_ns"], row.host_range_kernel_coverage_ns);
    assert_eq!(ev["kernel_busy_union_ns"], row.kernel_busy_union_ns);
    assert_eq!(ev["gpu_idle_within_kernel_span_ns"], row.gpu_idle_within_kernel_span_ns);
    r
}

/// The class and rule of the range rules R0…R7 (`range_decision`; the report's class comes from the step
/// budget when the step label carries device work: [`step_class`]).
fn class_rule(r: &Value) -> (&str, &str) {
    (r["range_decision"]["class"].as_str().unwrap(), r["range_decision"]["rule"].as_str().unwrap())
}

/// The report's class when the step budget of the step label decided it (its verdict, its rule).
fn step_class(r: &Value) -> &str {
    assert_eq!(r["decision"]["basis"], "step_budget", "{}", r["decision"]["reason"]);
    assert_eq!(r["class"], r["step_budget"]["verdict"]["class"]);
    assert_eq!(
        r["decision"]["rule"].as_str().unwrap(),
        format!("step_budget.{}", r["step_budget"]["verdict"]["rule"].as_str().unwrap())
    );
    r["class"].as_str().unwrap()
}

#[test]
fn kernel_bound_synthetic_export() {
    // one launch per step, one kernel covering 94% of it
    let s = Synth::new().steps(10, 1000 * US, |s, t| {
        let c = s.call("cudaLaunchKernel_v7000", t, t + 5 * US);
        s.kernel(GEMM, c, t + 10 * US, t + 950 * US);
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("kernel_bound", "R3"), "{}", r["decision"]["reason"]);
    assert_eq!(step_class(&r), "kernel_bound");
}

#[test]
fn cpu_launch_bound_synthetic_export() {
    // 40 back-to-back launches of 2 µs kernels every 10 µs: the GPU waits for the next launch
    let s = Synth::new().steps(10, 400 * US, |s, t| {
        for i in 0..40 {
            let at = t + i * 10 * US;
            let c = s.call("cudaLaunchKernel_v7000", at, at + 5 * US);
            s.kernel("void at::native::vectorized_elementwise_kernel<4>", c, at + 6 * US, at + 8 * US);
        }
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("cpu_launch_bound", "R5"), "{}", r["decision"]["reason"]);
    assert_eq!(step_class(&r), "cpu_launch_bound");
}

#[test]
fn python_overhead_bound_synthetic_export() {
    // 900 µs of host code without a CUDA call, then two launches; the host code is a named phase
    let body = |named: bool| {
        move |s: &mut Synth, t: i64| {
            if named {
                s.range("scheduler.prepare", t + 5 * US, t + 895 * US);
            }
            for i in 0..2 {
                let at = t + 900 * US + i * 10 * US;
                let c = s.call("cudaLaunchKernel_v7000", at, at + 5 * US);
                s.kernel(GEMM, c, at + 6 * US, at + 26 * US);
            }
        }
    };
    let s = Synth::new().steps(10, 1000 * US, body(true));
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("python_overhead_bound", "R6"), "{}", r["decision"]["reason"]);
    assert_eq!(step_class(&r), "python_overhead_bound");
    // the same host time with no range naming it: an opaque gap is compatible with scheduling, input
    // preparation, a hidden sync and Python overhead alike, so NVTX readiness rejects the class (exit 1)
    let s = Synth::new().steps(10, 1000 * US, body(false));
    let r = report_on_export_exit(&s, 1);
    assert_eq!(
        (r["class"].as_str(), r["decision"]["rule"].as_str()),
        (Some("unreliable"), Some("readiness.opaque_step"))
    );
    assert_eq!(r["decision"]["would_be"]["class"], "python_overhead_bound");
    assert!(
        r["decision"]["reason"].as_str().unwrap().contains("covered by no range nested in it"),
        "{}",
        r["decision"]
    );
}

#[test]
fn sync_bound_synthetic_export() {
    // a 300 µs kernel, then the host blocks 400 µs in cudaStreamSynchronize
    let s = Synth::new().steps(10, 1000 * US, |s, t| {
        s.range("model.forward", t + 1, t + 421 * US);
        let c = s.call("cudaLaunchKernel_v7000", t, t + 5 * US);
        s.kernel(GEMM, c, t + 10 * US, t + 310 * US);
        s.call("cudaStreamSynchronize_v3020", t + 20 * US, t + 420 * US);
        s.range("sampler.postprocess", t + 425 * US, t + 995 * US);
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("sync_bound", "R4"), "{}", r["decision"]["reason"]);
    assert_eq!(r["evidence"][0]["sync_ns"], 10 * 400 * US);
    // the step budget counts only the sync time no GPU work covers (110 of the 400 µs): the 585 µs of host
    // time without a CUDA call (named by a nested range) dominate the step
    assert_eq!(step_class(&r), "python_overhead_bound");
    assert_eq!(r["step_budget"]["totals"]["sync_wait"], 10 * 110 * US);
}

#[test]
fn memcpy_bound_synthetic_export() {
    // a blocking 600 µs cudaMemcpy (580 µs on the copy engine) and a 100 µs kernel
    let s = Synth::new().steps(10, 1000 * US, |s, t| {
        let c = s.call("cudaMemcpy_v3020", t, t + 600 * US);
        s.memcpy(c, t + 10 * US, t + 590 * US);
        let c = s.call("cudaLaunchKernel_v7000", t + 610 * US, t + 615 * US);
        s.kernel(GEMM, c, t + 620 * US, t + 720 * US);
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("memcpy_bound", "R2"), "{}", r["decision"]["reason"]);
    let share = r["signals"]["memcpy_device_share"].as_f64().unwrap();
    assert!((share - 580.0 / 680.0).abs() < 1e-9, "{share}");
    assert_eq!(step_class(&r), "memcpy_bound");
}

#[test]
fn comm_bound_synthetic_export() {
    let s = Synth::new().steps(10, 1000 * US, |s, t| {
        let c = s.call("cudaLaunchKernel_v7000", t, t + 5 * US);
        s.kernel(
            "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096>)",
            c,
            t + 10 * US,
            t + 810 * US,
        );
        let c = s.call("cudaLaunchKernel_v7000", t + 6 * US, t + 9 * US);
        s.kernel(GEMM, c, t + 820 * US, t + 900 * US);
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("comm_bound", "R1"), "{}", r["decision"]["reason"]);
    assert_eq!(r["categories"][0]["category"], "communication");
    // the step budget's class: comm_bound where it measures NCCL kernels as comm; a step budget that does not
    // (comm always 0) says that the NCCL kernels count as gpu_kernel
    match step_class(&r) {
        "comm_bound" => assert!(r["step_budget"]["totals"]["comm"].as_i64().unwrap() > 0),
        "kernel_bound" => assert!(
            r["decision"]["reason"].as_str().unwrap().contains("NCCL kernels exist and are counted in gpu_kernel"),
            "{}",
            r["decision"]["reason"]
        ),
        c => panic!("{c}: {}", r["decision"]["reason"]),
    }
}

#[test]
fn mixed_or_unclear_synthetic_export() {
    // half covered, no sync, no copies, a few slow calls: no rule holds
    let s = Synth::new().steps(10, 1000 * US, |s, t| {
        let c = s.call("cudaLaunchKernel_v7000", t, t + 5 * US);
        s.kernel(GEMM, c, t + 10 * US, t + 510 * US);
    });
    let r = report_on_export(&s);
    assert_eq!(class_rule(&r), ("mixed_or_unclear", "R7"), "{}", r["decision"]["reason"]);
    // the step budget: the kernel covers exactly 50.0 % of each step, its dominance threshold
    assert_eq!(step_class(&r), "kernel_bound");
    // and a step without any device work is R0
    let s = Synth::new().steps(3, 1000 * US, |s, t| {
        s.call("cudaStreamQuery_v3020", t, t + 5 * US);
    });
    // no CUDA kernel data at all: gate-check's G3 says RETRY, so no class stands (exit 1)
    let r = report_on_export_exit(&s, 1);
    assert_eq!(class_rule(&r), ("mixed_or_unclear", "R0"), "{}", r["decision"]["reason"]);
    assert_eq!(
        (
            r["class"].as_str().unwrap(),
            r["decision"]["rule"].as_str().unwrap(),
            r["decision"]["basis"].as_str().unwrap()
        ),
        ("unreliable", "gates.G3", "rejected")
    );
    assert_eq!(
        (r["decision"]["would_be"]["class"].as_str(), r["decision"]["would_be"]["basis"].as_str()),
        (Some("mixed_or_unclear"), Some("ranges"))
    );
}

// Synthetic bundles: the same rules when the input is an evidence bundle.

#[test]
fn kernel_bound_when_device_work_covers_the_range() {
    let (c, rule) = class_of(&bundle(1_000_000, 900_000, 900_000, 1_000_000, json!({}), gemm(900_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("kernel_bound", "R3"));
}

#[test]
fn sync_bound_when_blocking_syncs_take_the_wall() {
    let sync = json!({"cudaStreamSynchronize": {"calls": 10, "total_ns": 500_000}});
    let (c, rule) = class_of(&bundle(1_000_000, 450_000, 450_000, 900_000, sync, gemm(450_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("sync_bound", "R4"));
}

#[test]
fn memcpy_bound_when_blocking_copies_take_the_wall() {
    let sync = json!({"cudaMemcpy": {"calls": 10, "total_ns": 600_000}, "cudaStreamSynchronize": {"calls": 1, "total_ns": 10}});
    let (c, rule) = class_of(&bundle(1_000_000, 500_000, 500_000, 800_000, sync, gemm(500_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("memcpy_bound", "R2"));
}

#[test]
fn comm_bound_when_nccl_kernels_dominate() {
    let kernels = json!([
        {"name": "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096>)", "total_time_ns": 600_000, "instances": 10},
        {"name": "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT", "total_time_ns": 300_000, "instances": 30}
    ]);
    let (r, _) = report_on(&bundle(1_000_000, 900_000, 900_000, 1_000_000, json!({}), kernels), &[]);
    assert_eq!(r["class"], "comm_bound");
    assert_eq!(r["categories"][0]["category"], "communication");
    assert!((r["signals"]["comm_share"].as_f64().unwrap() - 600.0 / 900.0).abs() < 1e-9);
}

#[test]
fn python_overhead_and_unclear_bundles() {
    let (c, rule) = class_of(&bundle(1_000_000, 200_000, 200_000, 250_000, json!({}), gemm(200_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("python_overhead_bound", "R6"));
    let (c, rule) = class_of(&bundle(1_000_000, 500_000, 500_000, 800_000, json!({}), gemm(500_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("mixed_or_unclear", "R7"));
    let (c, rule) = class_of(&bundle(1_000_000, 0, 0, 0, json!({}), gemm(500_000)));
    assert_eq!((c.as_str(), rule.as_str()), ("mixed_or_unclear", "R0"));
}

#[test]
fn evidence_rows_provenance_and_unattributed_are_explicit() {
    let (r, _) = report_on(&bundle(1_000_000, 900_000, 900_000, 1_000_000, json!({}), gemm(900_000)), &[]);
    let rows = r["evidence"].as_array().unwrap();
    assert_eq!(rows[0]["label"], "step");
    assert_eq!(rows[0]["role"], "primary");
    assert_eq!(rows[0]["host_range_kernel_coverage_ns"], 900_000);
    assert_eq!(rows[0]["kernel_busy_union_ns"], 900_000);
    assert_eq!(rows[0]["gpu_idle_within_kernel_span_ns"], 100_000);
    assert_eq!(rows[0]["host_wall_time_ns"], 1_000_000);
    assert_eq!(rows[1]["label"], "step.schedule");
    assert_eq!(rows[1]["role"], "child");
    assert_eq!(r["provenance"]["nsys"]["version"], "2025.3.1");
    let u = &r["unattributed"];
    assert_eq!(u["kernels_unattributed"], 20);
    assert_eq!(u["kernel_work_unattributed_ns"], 1000);
    assert_eq!(u["unmapped_threads"].as_array().unwrap().len(), 1);
    assert_eq!(u["primary_uncovered_host_time_ns"], 100_000);
    assert!(u["statements"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().contains("not GPU idle")));
}

#[test]
fn label_override_and_bad_inputs() {
    let b = bundle(1_000_000, 900_000, 900_000, 1_000_000, json!({}), gemm(900_000));
    let (r, _) = report_on(&b, &["--label", "step.schedule"]);
    assert_eq!(r["decision"]["primary_label"], "step.schedule");
    assert_eq!(r["class"], "mixed_or_unclear");

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.json");
    std::fs::write(&p, serde_json::to_vec(&b).unwrap()).unwrap();
    let out = Command::cargo_bin("report").unwrap().arg(&p).args(["--label", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no range labelled \"nope\""));

    std::fs::write(&p, b"{\"kernel_profile\": {\"top_kernels\": 3}}").unwrap();
    let out = Command::cargo_bin("report").unwrap().arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("b.json") && err.contains("$.kernel_profile.top_kernels"), "{err}");
    assert!(out.stdout.is_empty());

    std::fs::write(&p, b"{\"a\": ").unwrap();
    let out = Command::cargo_bin("report").unwrap().arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1 column"));

    let out = Command::cargo_bin("report").unwrap().arg("/nonexistent/bundle.json").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/bundle.json: no such file"));
}

#[test]
fn categories_override_file() {
    let dir = tempfile::tempdir().unwrap();
    let cats = dir.path().join("cats.txt");
    std::fs::write(&cats, "# mine\nmatmul=nvjet\n").unwrap();
    let (r, _) = report_on(
        &bundle(1_000_000, 900_000, 900_000, 1_000_000, json!({}), gemm(900_000)),
        &["--categories", cats.to_str().unwrap()],
    );
    assert_eq!(r["categories"][0]["category"], "matmul");
    assert_eq!(r["categories_source"], cats.display().to_string());
}

#[test]
fn report_on_a_real_export_lists_kernels_and_categories() {
    let f = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let out = Command::cargo_bin("report").unwrap().arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = common::one_doc(&out.stdout);
    assert!(nsyskit::report::CLASSES.contains(&r["class"].as_str().unwrap()));
    // top kernel and category shares come from the KERNEL table
    let (stats, _) =
        nsyskit::step_budget::picture::export_kernel_stats(&nsyskit::export::Export::open(&f).unwrap()).unwrap();
    assert_eq!(r["top_kernels"][0]["name"], stats[0].name.as_str());
    assert_eq!(r["top_kernels"][0]["category"], "gemm");
    let total: i64 = r["categories"].as_array().unwrap().iter().map(|c| c["total_time_ns"].as_i64().unwrap()).sum();
    assert_eq!(total, stats.iter().map(|k| k.total_time_ns).sum::<i64>());
}

#[test]
fn html_page_is_self_contained_and_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let b = bundle(1_000_000, 300_000, 300_000, 900_000, json!({}), gemm(300_000));
    let (r, _) = report_on(&b, &["--html", html.to_str().unwrap()]);
    assert_eq!(r["html"], html.display().to_string());
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    // 25 µs of host time per runtime call (≥ 20 µs): R6, not R5 (the class CSS names every class: check the badge)
    assert_eq!(r["class"], "python_overhead_bound");
    assert!(
        page.contains("id=\"class\">python_overhead_bound<") && page.contains("<svg") && page.contains("step.schedule")
    );
    for banned in ["http://", "https://", "<script", "<link", "src=\"//", "@import"] {
        // the only URL allowed is the SVG namespace
        let n = page.matches(banned).count();
        let allowed = if banned == "http://" { page.matches("http://www.w3.org/2000/svg").count() } else { 0 };
        assert_eq!(n, allowed, "the page must not reference {banned}");
    }
    let Some(chromium) = common::chromium_or_skip("html_page_is_self_contained_and_renders_in_headless_chromium")
    else {
        return;
    };
    // the page as the browser built it: every section, and the numbers of the document
    let (dom, segs) = common::render_and_measure(&chromium, &html, dir.path());
    for id in ["class", "capture", "split", "ranges", "categories", "kernels", "signals", "provenance", "unattributed"]
    {
        assert!(dom.contains(&format!("id=\"{id}\"")), "the page has no #{id}");
    }
    assert!(dom.contains(&format!(">{}<", r["class"].as_str().unwrap())), "{}", r["class"]);
    assert_eq!(common::cells(&dom, "kernel-share"), vec!["100.0%"]);
    assert_eq!(
        common::cells(&dom, "signal-coverage_fraction"),
        vec![format!("{:.1}%", r["signals"]["coverage_fraction"].as_f64().unwrap() * 100.0)]
    );
    // step.schedule is a tenth of step's wall: drawn a tenth as long on the one axis of the ranges section
    let wall_px =
        |label_wall: i64| segs.iter().filter(|s| s.0 == "ranges" && s.1 == label_wall).map(|s| s.2).fold(0.0, f64::max);
    let (step, sched) = (wall_px(700_000), wall_px(100_000));
    assert!((step / sched - 7.0).abs() < 0.05, "uncovered 700 µs drawn {step} px, 100 µs drawn {sched} px");
    let png = dir.path().join("x.png");
    let profile = dir.path().join("profile-shot");
    let out = std::process::Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,1600",
            &format!("file://{}", html.display()),
        ])
        .output()
        .unwrap();
    assert!(png.exists(), "chromium wrote no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    if let Ok(keep) = std::env::var("NSYSKIT_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

#[test]
fn real_fixtures_classes() {
    let run_exit = |f: &str, code: i32| {
        let out = Command::cargo_bin("report").unwrap().arg(common::fixture(f)).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{f}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        common::one_doc(&out.stdout)
    };
    let run = |f: &str| run_exit(f, 0);
    // the whole-run node-level capture: a tiny model replayed as a CUDA graph, Python host code dominates
    let r = run("nsys-2025.3.1/gpu_full_node.sqlite");
    assert_eq!(class_rule(&r), ("python_overhead_bound", "R6"), "{}", r["decision"]["reason"]);
    // the step budget of its 204 steps (18 prefill-bearing outliers left out): no component reaches 50 %
    assert_eq!(step_class(&r), "mixed_or_unclear");
    assert_eq!(r["decision"]["rule"], "step_budget.no_dominant_component");
    assert_eq!(r["decision"]["primary_label"], "vibeserve.engine.iteration");
    let doc =
        nsyskit::sqlite_ranges::run(&common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), &Default::default(), None)
            .unwrap();
    let it = doc.ranges.iter().find(|x| x.label == "vibeserve.engine.iteration").unwrap();
    assert_eq!(r["evidence"][0]["host_range_kernel_coverage_ns"], it.host_range_kernel_coverage_ns);
    assert_eq!(r["evidence"][0]["uncovered_host_time_ns"], it.uncovered_host_time_ns);
    assert_eq!(r["unattributed"]["kernels_total"], doc.totals.kernels_total);
    // nsys 2023.4 graph level: the 200 replays left no GPU row, nothing device-side can be concluded, and G1
    // rejects the capture: no class stands (exit 1)
    let r = run_exit("nsys-2023.4.4/gpu_range_graph.sqlite", 1);
    assert_eq!(class_rule(&r), ("mixed_or_unclear", "R0"));
    assert_eq!((r["class"].as_str(), r["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G1")));
    assert_eq!(r["decision"]["would_be"]["rule"], "step_budget.graph_level_capture");
    assert!(r["range_decision"]["reason"].as_str().unwrap().contains("invisible"));
    // a CPU-only capture: no CUDA data, so no class (G1 and G3 say RETRY; exit 1)
    let r = run_exit("nsys-2025.3.1/cpu_nvtx_osrt.sqlite", 1);
    assert_eq!(class_rule(&r), ("mixed_or_unclear", "R0"));
    assert_eq!((r["class"].as_str(), r["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G1+G3")));
    assert_eq!(r["decision"]["would_be"]["rule"], "R0");
    assert!(r["top_kernels"].as_array().unwrap().is_empty());
}

#[test]
fn real_serve_capture_documents_in_a_bundle() {
    // the documents of the real H200 serve-capture run, merged by bundle-merge
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    let docs = common::root().join("fixtures/serve-capture-gpu");
    let out = Command::cargo_bin("bundle-merge")
        .unwrap()
        .arg(&bundle)
        .arg(docs.join("provenance.json"))
        .arg(docs.join("ranges.json"))
        .arg(docs.join("gate.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // its gate-check said RETRY (G2: a deliberately small report), so no class stands on it (exit 1); the
    // evidence is still shown, number for number
    let out = Command::cargo_bin("report").unwrap().arg(&bundle).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let r = common::one_doc(&out.stdout);
    assert_eq!((r["class"].as_str(), r["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G2")));
    assert!(r["decision"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("gate-check said RETRY (kernel_profile.gates): G2: the report is 1911082 bytes"));
    assert!(nsyskit::report::CLASSES.contains(&r["decision"]["would_be"]["class"].as_str().unwrap()));
    let ranges: Value = serde_json::from_slice(&std::fs::read(docs.join("ranges.json")).unwrap()).unwrap();
    let label = r["decision"]["primary_label"].as_str().unwrap();
    let row = ranges["ranges"].as_array().unwrap().iter().find(|x| x["label"] == label).unwrap();
    for k in [
        "host_wall_time_ns",
        "host_range_kernel_coverage_ns",
        "kernel_busy_union_ns",
        "gpu_idle_within_kernel_span_ns",
        "uncovered_host_time_ns",
    ] {
        assert_eq!(r["evidence"][0][k], row[k], "{k}");
    }
    assert_eq!(r["provenance"]["schema"], "nsyskit.provenance/v1");
    assert_eq!(r["facts"]["graph_trace_level"]["value"], "node");
    assert!(r["facts"]["capture_flags"]["value"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w.as_str().unwrap().starts_with('-')));
    // the bundle against itself: its gate-check said RETRY (G2, a deliberately small report), so capture-compare
    // refuses it, naming that gate once (issue #15: a RETRY capture is never compared)
    let out = Command::cargo_bin("capture-compare").unwrap().arg(&bundle).arg(&bundle).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let d = common::one_doc(&out.stdout);
    let inv = d["invalidators"].as_array().unwrap();
    assert_eq!(inv.len(), 1, "{inv:?}");
    assert_eq!((&inv[0]["check"], &inv[0]["a"]["retry"]), (&Value::from("gate"), &serde_json::json!(["G2"])));
}

// ---------------------------------------------------------------------------------------------------------
// Issue 17 regressions: input handling (FIFO, stdin, wrong block types) and an output over an input.

fn report_cmd(args: &[&std::ffi::OsStr], stdin: Vec<u8>) -> std::process::Output {
    Command::cargo_bin("report")
        .unwrap()
        .args(args)
        .write_stdin(stdin)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

#[test]
fn html_over_an_input_is_refused_even_through_a_symlink_or_a_hard_link() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cap.sqlite");
    std::fs::copy(common::fixture("nsys-2025.3.1/decode_clean.sqlite"), &cap).unwrap();
    let before = std::fs::read(&cap).unwrap();
    let mtime = std::fs::metadata(&cap).unwrap().modified().unwrap();
    let sym = dir.path().join("sym.html");
    std::os::unix::fs::symlink(&cap, &sym).unwrap();
    let hard = dir.path().join("hard.html");
    std::fs::hard_link(&cap, &hard).unwrap();
    let prov = dir.path().join("prov.json");
    std::fs::write(&prov, r#"{"schema":"nsyskit.provenance/v1","tool":{"name":"nsys-resolve","version":"0"}}"#)
        .unwrap();
    for (out, input) in [(&cap, &cap), (&sym, &cap), (&hard, &cap), (&prov, &prov)] {
        let o = report_cmd(
            &[cap.as_os_str(), "--provenance".as_ref(), prov.as_os_str(), "--html".as_ref(), out.as_os_str()],
            vec![],
        );
        assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("--html {}: is the input {}", out.display(), input.display())), "{err}");
        assert!(o.stdout.is_empty());
    }
    assert_eq!(std::fs::read(&cap).unwrap(), before, "the evidence is byte-identical");
    assert_eq!(std::fs::metadata(&cap).unwrap().modified().unwrap(), mtime);
    // a different output path works
    let ok = dir.path().join("r.html");
    let o = report_cmd(&[cap.as_os_str(), "--html".as_ref(), ok.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&ok).unwrap().contains("<html"));
}

#[test]
fn a_fifo_never_hangs_and_stdin_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    // nothing writes to it: exit 2 at once, naming it
    let o = report_cmd(&[fifo.as_os_str()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("in.json: empty"), "{}", String::from_utf8_lossy(&o.stderr));
    // a writer on the FIFO: read like a file (an SQLite export through a FIFO or stdin is copied to a private
    // temporary file, never beside the input)
    let export = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let from_file = common::one_doc(&report_cmd(&[export.as_os_str()], vec![]).stdout);
    let writer = {
        let (fifo, export) = (fifo.clone(), export.clone());
        std::thread::spawn(move || std::fs::write(&fifo, std::fs::read(&export).unwrap()).unwrap())
    };
    let o = report_cmd(&[fifo.as_os_str()], vec![]);
    writer.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let via_fifo = common::one_doc(&o.stdout);
    assert_eq!(via_fifo["class"], from_file["class"]);
    assert_eq!(via_fifo["evidence"], from_file["evidence"]);
    let o = report_cmd(&["-".as_ref()], std::fs::read(&export).unwrap());
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let via_stdin = common::one_doc(&o.stdout);
    assert_eq!(via_stdin["source"], "<stdin>");
    assert_eq!(via_stdin["evidence"], from_file["evidence"]);
    // a bundle on stdin
    let b = bundle(1_000_000, 900_000, 850_000, 900_000, json!({}), gemm(800_000));
    let o = report_cmd(&["-".as_ref()], serde_json::to_vec(&b).unwrap());
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    common::one_doc(&o.stdout);
    // a device is refused
    let o = report_cmd(&["/dev/zero".as_ref()], vec![]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/dev/zero: is a character device"));
}

#[test]
fn a_known_block_of_the_wrong_type_is_refused_naming_its_path() {
    let ok = bundle(1_000_000, 900_000, 850_000, 900_000, json!({}), gemm(800_000));
    for (ptr, bad, path, found) in [
        ("/kernel_profile", json!("x"), "$.kernel_profile", "a string"),
        ("/kernel_profile/gates", json!([1]), "$.kernel_profile.gates", "an array"),
        ("/kernel_profile/ranges", json!(3), "$.kernel_profile.ranges", "a number"),
        ("/kernel_profile/top_kernels", json!({}), "$.kernel_profile.top_kernels", "an object"),
        ("/provenance", json!(true), "$.provenance", "a boolean"),
    ] {
        let mut b = ok.clone();
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        let parent = if parent.is_empty() { Some(&mut b) } else { b.pointer_mut(parent) };
        parent.and_then(|p| p.as_object_mut()).expect("parent object").insert(key.to_string(), bad);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.json");
        std::fs::write(&p, serde_json::to_vec(&b).unwrap()).unwrap();
        let o = report_cmd(&[p.as_os_str()], vec![]);
        assert_eq!(o.status.code(), Some(2), "{ptr}: {}", String::from_utf8_lossy(&o.stdout));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("b.json: {path}: expected")) && err.contains(found), "{err}");
    }
}
