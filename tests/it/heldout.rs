//! The tools on the held-out captures of fixtures/README.md "Held-out shapes" (real H200 exports, nsys 2025.3.1):
//! a vLLM-V1-shaped engine with third-party labels (spawned, forked, forked without --trace-fork-before-exec),
//! NCCL world size 1 with NCCL's NVTX domain, copies hidden under compute on two streams, a program without NVTX
//! exported lazily and with --lazy=false. Each test states the wrong answer the tools used to give.

use crate::common;

use common::{doc, export, exposed_and_union, fixture, gate, run, two_gpu_custom_all_reduce};

#[test]
fn the_step_label_is_the_engine_step_that_launches_gpu_work() {
    // engine_spawn: the API process's CPU-only `detokenizer.decode` (800) outnumbers the engine's
    // `EngineCore.step` (200 graph replays). Before: step-budget took detokenizer.decode (python_overhead_bound,
    // 100 % unattributed) and G6 RETRYd "the step range is not on the thread that launches the GPU work",
    // while report took EngineCore.step.
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/engine_spawn.sqlite.xz", dir.path());
    let p = p.to_str().unwrap();
    let (_, sb) = doc("step-budget", &[p]);
    assert_eq!(sb["step_label"], "EngineCore.step");
    assert_eq!(sb["steps"].as_array().unwrap().len(), 200);
    assert_eq!(sb["verdict"]["class"], "python_overhead_bound", "{}", sb["verdict"]);
    let (_, g) = doc("gate-check", &[p, "--tier", "decode"]);
    let g6 = gate(&g, "G6");
    assert_eq!(g6["verdict"], "PASS", "{g6}");
    assert!(g6["reason"].as_str().unwrap().contains("200 EngineCore.step steps"), "{g6}");
    assert!(
        g6["evidence"][0].as_str().unwrap().contains("carrying device work (detokenizer.decode, 800 occurrences"),
        "{g6}"
    );
    let (_, r) = doc("report", &[p]);
    assert_eq!(r["decision"]["primary_label"], "EngineCore.step");
    assert_eq!(r["step_budget"]["step_label"], "EngineCore.step");
    let (_, c) = doc("capture-compare", &[p, p]);
    assert_eq!(c["iteration_label"], "EngineCore.step");
    // the --iterations window numbers the same steps
    let (_, w) = doc("step-budget", &[p, "--iterations", "10:20"]);
    assert_eq!(w["step_label"], "EngineCore.step");
    assert_eq!(w["steps"].as_array().unwrap().len(), 11);
}

#[test]
fn tools_agree_on_the_step_label_of_a_cpu_only_capture() {
    // cpu_nvtx_osrt: `vibeserve.engine.iteration` and `vibeserve.detokenizer.decode_tokens` occur 50 times each.
    // Before: G6 took the engine iteration (iteration before decode) while step-budget and capture-compare took
    // the detokenizer range (byte order).
    for f in ["nsys-2023.4.4/cpu_nvtx_osrt.sqlite", "nsys-2025.3.1/cpu_nvtx_osrt.sqlite"] {
        let p = fixture(f);
        let p = p.to_str().unwrap();
        let (_, sb) = doc("step-budget", &[p]);
        assert_eq!(sb["step_label"], "vibeserve.engine.iteration", "{f}");
        let (_, g) = doc("gate-check", &[p, "--tier", "decode"]);
        assert!(gate(&g, "G6")["evidence"][0].as_str().unwrap().starts_with("step label vibeserve.engine.iteration"));
        let (_, c) = doc("capture-compare", &[p, p]);
        assert_eq!(c["iteration_label"], "vibeserve.engine.iteration", "{f}");
    }
}

#[test]
fn a_capture_without_nvtx_says_what_happened_and_both_exports_agree() {
    // nonvtx: NVTX traced, none emitted; nsys's default export has no NVTX_EVENTS table, --lazy=false an empty
    // one. Before: "schema mismatch: required table NVTX_EVENTS is missing" (exit 2 from every range tool),
    // gate-check RETRY G4 "capture with --trace=cuda,nvtx,osrt" (NVTX was traced) on the lazy export and PASS on
    // the other, nvtx-readiness exit 2 on one and RETRY on the other.
    let dir = tempfile::tempdir().unwrap();
    let lazy = export("nsys-2025.3.1/nonvtx.sqlite.xz", dir.path());
    let full = export("nsys-2025.3.1/nonvtx_lazy_false.sqlite.xz", dir.path());
    let (lazy, full) = (lazy.to_str().unwrap(), full.to_str().unwrap());
    // sqlite-ranges' contract requires the table; step-budget and report: tests/it/heldout_devices.rs
    let (code, stdout, stderr) = run("sqlite-ranges", &[lazy]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stderr.contains("nonvtx.sqlite: no NVTX range to read: NVTX was traced but the program emitted no NVTX event")
            && stderr.contains("No NVTX events collected")
            && stderr.contains("annotate each engine step"),
        "{stderr}"
    );
    assert!(!stderr.contains("schema mismatch"), "{stderr}");
    for tier in ["throughput", "decode"] {
        let (a_code, a) = doc("gate-check", &[lazy, "--tier", tier]);
        let (b_code, b) = doc("gate-check", &[full, "--tier", tier]);
        assert_eq!((a_code, &a["retry"]), (b_code, &b["retry"]), "{tier}");
        assert_eq!(gate(&a, "G4")["verdict"], "SKIP");
        assert_eq!(gate(&a, "G4")["reason"], gate(&b, "G4")["reason"]);
    }
    let (a_code, a) = doc("nvtx-readiness", &[lazy]);
    let (b_code, b) = doc("nvtx-readiness", &[full]);
    assert_eq!((a_code, b_code), (1, 1));
    assert_eq!(a["reason"], b["reason"]);
    assert_eq!(a["unenclosed_syncs"], b["unenclosed_syncs"]);
}

#[test]
fn a_table_nsys_counted_events_for_is_a_damaged_export() {
    // hf_node with NVTX_EVENTS dropped: nsys's DIAGNOSTIC_EVENT counted the NVTX events, so the table is missing
    // from a damaged export, not from a capture without NVTX (G4 RETRY, range tools exit 2 saying so)
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch("DROP TABLE NVTX_EVENTS;").unwrap();
    drop(c);
    let p = p.to_str().unwrap();
    let (code, _, stderr) = run("sqlite-ranges", &[p]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("NVTX_EVENTS is missing although nsys collected") && stderr.contains("export the report again"),
        "{stderr}"
    );
    let (code, g) = doc("gate-check", &[p]);
    assert_eq!(code, 1);
    assert!(gate(&g, "G4")["reason"].as_str().unwrap().contains("although nsys collected"), "{}", gate(&g, "G4"));
}

#[test]
fn an_empty_graph_trace_table_is_not_graph_level_tracing() {
    // `nsys export --lazy=false` writes an empty CUPTI_ACTIVITY_KIND_GRAPH_TRACE for every capture. Before:
    // sqlite-ranges (and report's notes) said "CUDA graphs were traced at graph level" on node-level captures
    // (engine_spawn: 200 graph launches, 2200 graph-node kernels; two_rank, serve_node) and on overlap (no graph).
    let dir = tempfile::tempdir().unwrap();
    for f in ["engine_spawn", "overlap", "two_rank"] {
        let p = export(&format!("nsys-2025.3.1/{f}.sqlite.xz"), dir.path());
        let (_, d) = doc("sqlite-ranges", &[p.to_str().unwrap()]);
        assert!(d["tables_present"].as_array().unwrap().iter().any(|t| t == "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"));
        assert!(!d["notes"].to_string().contains("traced at graph level"), "{f}: {}", d["notes"]);
    }
    let (_, d) = doc("sqlite-ranges", &[fixture("nsys-2025.3.1/gpu_full_graph.sqlite").to_str().unwrap()]);
    assert!(d["notes"].to_string().contains("traced at graph level: each replay is one opaque GRAPH_TRACE row"));
}

#[test]
fn copies_hidden_under_compute_are_not_memcpy_bound() {
    // overlap: 128 MiB H2D copies on a copy stream under 20 matmuls on a compute stream. Before: report said
    // memcpy_bound (R2: "copies take 39.4% of device time"), a share of summed durations; the copies overlap the
    // kernels, and only the copy time with no kernel under it can hold the GPU back.
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/overlap.sqlite.xz", dir.path());
    let c = rusqlite::Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows = |t: &str| -> Vec<(i64, i64)> {
        let mut st = c.prepare(&format!("SELECT start, end FROM {t} WHERE end >= start")).unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect()
    };
    let copies = [rows("CUPTI_ACTIVITY_KIND_MEMCPY"), rows("CUPTI_ACTIVITY_KIND_MEMSET")].concat();
    let kernels = [rows("CUPTI_ACTIVITY_KIND_KERNEL"), rows("CUPTI_ACTIVITY_KIND_GRAPH_TRACE")].concat();
    let (exposed, busy) = exposed_and_union(&copies, &kernels);
    let (_, r) = doc("report", &[p.to_str().unwrap()]);
    assert_eq!(r["class"], "kernel_bound", "{}", r["decision"]);
    // `overlap.chunk` repeats 20 times at top level, so it is the step and the step budget decides: the GPU is
    // busy through the step (not memcpy_bound on summed copy time).
    assert_eq!(r["decision"]["rule"], "step_budget.gpu_saturated", "{}", r["decision"]);
    let share = r["signals"]["memcpy_device_share"].as_f64().unwrap();
    assert!((share - exposed as f64 / busy as f64).abs() < 1e-12, "{share} vs {exposed}/{busy}");
    assert!(share < 0.1, "{share}");
    let src = r["signals"]["memcpy_device_share_source"].as_str().unwrap();
    assert!(src.contains("not overlapped by KERNEL/GRAPH_TRACE") && src.contains("summed share 39.4%"), "{src}");
}

#[test]
fn nccl_calls_are_not_host_communication() {
    // nccl: world size 1, nothing to wait for. Before: step-budget put 37.1 % of the step wall (32.0 ms of
    // 86.4 ms) in comm, the host time inside `tp.all_reduce` / `NCCL:ncclAllReduce` ranges (torch's
    // dist.all_reduce and NCCL's enqueue), and said mixed_or_unclear with comm as the second component.
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/nccl.sqlite.xz", dir.path());
    let (_, sb) = doc("step-budget", &[p.to_str().unwrap()]);
    assert_eq!(sb["totals"]["comm"], 0);
    assert_eq!(sb["totals"]["wall"], 86407910);
    assert!(sb["comm_labels"].as_array().unwrap().iter().any(|l| l == "NCCL:ncclAllReduce"));
    assert!(sb["notes"][0].as_str().unwrap().contains("are not host communication: an NCCL call only enqueues"));
    assert_eq!(sb["verdict"]["class"], "python_overhead_bound", "{}", sb["verdict"]);
    // the host communication of a process without NCCL (two_rank: torch.distributed gloo) is unchanged
    let p = export("nsys-2025.3.1/two_rank.sqlite.xz", dir.path());
    let (_, sb) = doc("step-budget", &[p.to_str().unwrap()]);
    assert!(sb["totals"]["comm"].as_i64().unwrap() > 0);
}

#[test]
fn custom_all_reduce_kernels_are_communication_on_two_gpus() {
    // Before: step-budget and the report's categories knew communication kernels only by `nccl` in the name;
    // vLLM/SGLang custom all-reduce (and TensorRT-LLM's, PyTorch symmetric memory's) counted as compute.
    let dir = tempfile::tempdir().unwrap();
    let p = two_gpu_custom_all_reduce(dir.path());
    let p = p.to_str().unwrap();
    let (_, sb) = doc("step-budget", &[p]);
    assert_eq!(sb["nccl_kernels"], 248, "{}", sb["nccl_by_name"]);
    assert!(sb["nccl_by_name"][0]["name"].as_str().unwrap().contains("cross_device_reduce_1stage"));
    let ranks = sb["ranks"].as_array().unwrap();
    assert_eq!(
        ranks.iter().map(|r| (r["pid"].as_i64().unwrap(), r["device_id"].as_i64().unwrap())).collect::<Vec<_>>(),
        [(717, 0), (718, 1)]
    );
    assert!(ranks.iter().all(|r| r["comm_busy_ns"].as_i64().unwrap() > 0), "{ranks:?}");
    assert_eq!(sb["idle"].as_array().unwrap().len(), 2, "one GPU idle split per device");
    let (_, sr) = doc("sqlite-ranges", &[p]);
    assert_eq!(sr["totals"]["per_device"].as_array().unwrap().len(), 2);
    let (_, r) = doc("report", &[p]);
    let comm =
        r["categories"].as_array().unwrap().iter().find(|c| c["category"] == "communication").expect("communication");
    assert_eq!(comm["instances"], 248);
}

#[test]
fn capture_settings_are_read_with_or_without_the_process_prefix() {
    // nsys 2023.4/2025.3 write PROCESS_0:COLLECT_CUDA_TRACE and PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE; public
    // analyses of nsys 2025.6 exports query the bare names. Before: with the bare COLLECT_CUDA_TRACE=true, a
    // capture whose CUDA trace came back empty (engine_fork_noflag: the forked engine was not traced) got G1
    // "CUDA tracing was off", the wrong cause. Now both layouts give the same gates.
    let dir = tempfile::tempdir().unwrap();
    let orig = export("nsys-2025.3.1/engine_fork_noflag.sqlite.xz", dir.path());
    // as nsys's default (lazy) export writes it: without the empty CUDA tables
    let c = rusqlite::Connection::open(&orig).unwrap();
    for t in ["RUNTIME", "KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE", "SYNCHRONIZATION"] {
        let rows: i64 =
            c.query_row(&format!("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{t}"), [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 0, "{t}");
        c.execute_batch(&format!("DROP TABLE CUPTI_ACTIVITY_KIND_{t};")).unwrap();
    }
    drop(c);
    let bare = dir.path().join("bare_keys.sqlite");
    std::fs::copy(&orig, &bare).unwrap();
    let c = rusqlite::Connection::open(&bare).unwrap();
    let n = c
        .execute(
            "UPDATE META_DATA_CAPTURE SET name = substr(name, 11) WHERE name IN ('PROCESS_0:COLLECT_CUDA_TRACE', 'PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE')",
            [],
        )
        .unwrap();
    assert_eq!(n, 2);
    drop(c);
    let (a_code, a) = doc("gate-check", &[orig.to_str().unwrap()]);
    let (b_code, b) = doc("gate-check", &[bare.to_str().unwrap()]);
    assert_eq!((a_code, &a["retry"]), (b_code, &b["retry"]));
    for id in ["G0", "G1", "G3", "G4"] {
        assert_eq!(gate(&a, id)["verdict"], gate(&b, id)["verdict"], "{id}");
        assert_eq!(gate(&a, id)["measured"], gate(&b, id)["measured"], "{id}");
    }
    let g1 = gate(&b, "G1");
    assert!(!g1["reason"].as_str().unwrap().contains("CUDA tracing was off"), "{g1}");
    assert!(g1["evidence"].to_string().contains("META_DATA_CAPTURE COLLECT_CUDA_TRACE=true"), "{g1}");
    assert!(g1["evidence"].to_string().contains("META_DATA_CAPTURE CUDA_GRAPH_TRACE_OPTIONS:MODE=Node"), "{g1}");
}

#[test]
fn a_forked_engine_without_kernels_gets_its_cause() {
    // engine_fork_noflag: the engine forked without exec, no --trace-fork-before-exec: no CUDA row at all.
    // engine_fork: with the flag, the engine's NVTX is there (165 of 200 steps) but 3 CUDA runtime rows and no
    // kernel; nsys: "Not all CUDA events might have been collected". Before: G3 said only "no CUDA kernel data:
    // CUPTI_ACTIVITY_KIND_KERNEL is empty", G4 blamed "e.g. an nsys older than the CUDA runtime".
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/engine_fork_noflag.sqlite.xz", dir.path());
    let (code, g) = doc("gate-check", &[p.to_str().unwrap()]);
    assert_eq!((code, &g["retry"]), (1, &serde_json::json!(["G3"])));
    let r = gate(&g, "G3")["reason"].as_str().unwrap();
    assert!(r.contains("TRACE_AFTER_FORK_BEFORE_EXEC=false") && r.contains("--trace-fork-before-exec=true"), "{r}");
    let p = export("nsys-2025.3.1/engine_fork.sqlite.xz", dir.path());
    let (code, g) = doc("gate-check", &[p.to_str().unwrap()]);
    assert_eq!((code, &g["retry"]), (1, &serde_json::json!(["G3", "G4"])));
    let r = gate(&g, "G3")["reason"].as_str().unwrap();
    assert!(r.contains("3 CUDA runtime calls were recorded but no kernel") && r.contains("os._exit"), "{r}");
    let g4 = gate(&g, "G4");
    assert_eq!(g4["measured"], 1.0);
    assert!(g4["reason"].as_str().unwrap().contains("never flushes nsys's CUDA buffers"), "{g4}");
    assert!(!g4["reason"].as_str().unwrap().contains("older than the CUDA runtime"), "{g4}");
}

#[test]
fn a_graph_replay_is_gpu_work_for_the_traffic_gate() {
    // hf_graph: graph-level tracing, each of the 94 replays one GRAPH_TRACE row. Before: G5 built the GPU
    // activity from KERNEL, MEMCPY and MEMSET only, so a replay counted as an empty stretch: longest 11.555 ms
    // at 0.189 s (a replay runs inside it), 4022 stretches. GPU busy is the union of the four tables.
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/hf_graph.sqlite.xz", dir.path());
    let c = rusqlite::Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut rows: Vec<(i64, i64)> = Vec::new();
    for t in ["KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE"] {
        let present: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = ?1",
                [format!("CUPTI_ACTIVITY_KIND_{t}")],
                |r| r.get(0),
            )
            .unwrap();
        if present == 1 {
            let mut st =
                c.prepare(&format!("SELECT start, end FROM CUPTI_ACTIVITY_KIND_{t} WHERE end >= start")).unwrap();
            rows.extend(st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()));
        }
    }
    rows.sort();
    let (first, mut reach, mut longest, mut gaps) = (rows[0].0, rows[0].1, (0, 0), 0);
    for &(s, e) in &rows[1..] {
        if s > reach {
            gaps += 1;
            longest = longest.max((s - reach, reach));
        }
        reach = reach.max(e);
    }
    let (_, g) = doc("gate-check", &[p.to_str().unwrap()]);
    let g5 = gate(&g, "G5");
    assert_eq!(g5["measured"].as_f64().unwrap(), longest.0 as f64 / (reach - first) as f64, "{g5}");
    assert_eq!(g5["at_ns"], longest.1);
    assert!(g5["evidence"][0].as_str().unwrap().ends_with(&format!("{gaps} empty stretches")), "{g5}");
    assert_eq!(longest.0, 5_746_695, "measured on the fixture");
}

#[test]
fn slow_steps_with_the_usual_kernels_are_not_called_prefill_contamination() {
    // nccl, decode tier: 4 of 100 engine.step steps last 2.4-4.3 ms against a 739 us median, each with the
    // usual 12 kernels and no prefill range. Before: G7 "prefill contamination … capture decode without
    // arriving requests", a cause nothing in the capture shows. The RETRY stays (the steps are unlike the rest).
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/nccl.sqlite.xz", dir.path());
    let (code, g) = doc("gate-check", &[p.to_str().unwrap(), "--tier", "decode"]);
    assert_eq!(code, 1);
    let g7 = gate(&g, "G7");
    assert_eq!((g7["verdict"].as_str(), g7["measured"].as_f64()), (Some("RETRY"), Some(0.04)));
    let r = g7["reason"].as_str().unwrap();
    assert!(
        r.starts_with("4 of 100 decode steps (4.00 %, above 1 %) last more than 3 × the 739 µs median step"),
        "{r}"
    );
    assert!(r.contains("no prefill range") && r.contains("host stall") && !r.contains("prefill contamination"), "{r}");
    // a capture whose unlike steps hold prefill ranges keeps the prefill-contamination reason
    let (_, g) =
        doc("gate-check", &[fixture("nsys-2025.3.1/decode_mixed.sqlite").to_str().unwrap(), "--tier", "decode"]);
    assert!(gate(&g, "G7")["reason"].as_str().unwrap().starts_with("prefill contamination: 15 of 400"));
}

#[test]
fn readiness_suggests_the_engine_prefix() {
    // engine_spawn: the API process's `detokenizer.` ranges (800, CPU only) outnumber the engine's `EngineCore.`
    // (200). Before: "try --range-prefix detokenizer and name the engine step `detokenizer.engine.iteration`".
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/engine_spawn.sqlite.xz", dir.path());
    let (code, r) = doc("nvtx-readiness", &[p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(r["suggested_prefix"], "EngineCore");
    assert!(r["reason"]
        .as_str()
        .unwrap()
        .ends_with("try --range-prefix EngineCore and name the engine step `EngineCore.engine.iteration`"));
    assert_eq!(r["prefixes_seen"][0]["prefix"], "detokenizer.", "the list itself is unchanged");
}
