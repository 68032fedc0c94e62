//! The join of iteration records to NVTX steps and the `--iterations START:END` window (#22), on a real
//! capture: the CPU server scripts/cpu/vibeserve_http.c under the real nsys 2023.4 (NSYS_BIN), captured by
//! serve-capture with `--iteration-records`. The server writes one record per `vibeserve.engine.iteration`
//! range on CLOCK_MONOTONIC; the first iteration of each request is `prefill`, the three others `decode`.
//! The test checks the join against what it reads itself from the export: each step's parent request range
//! (prefill = the first step of its request), and the step starts (the offset, the residuals).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::sync::OnceLock;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::Value;

struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    fn out(&self) -> PathBuf {
        self.dir.path().join("run")
    }
    fn sqlite(&self) -> PathBuf {
        self.out().join("capture.sqlite")
    }
    fn records(&self) -> PathBuf {
        self.out().join("iterations.jsonl")
    }
}

/// One serve-capture run of the CPU server writing records (shared by the tests), or None (SKIP) without
/// nsys, gcc or the NVTX headers.
fn run_or_skip(test: &str) -> Option<&'static Run> {
    static RUN: OnceLock<Option<Run>> = OnceLock::new();
    let r = RUN.get_or_init(|| {
        let nsys = common::nsys_or_skip("iterations")?;
        let real = std::fs::canonicalize(&nsys).ok()?;
        let inc = real.ancestors().take(6).flat_map(|d| {
            [
                d.join("lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include"),
                d.join("target-linux-x64/nvtx/include"),
                d.join("nvtx/include"),
            ]
        });
        let inc = inc.into_iter().find(|c| c.join("nvtx3/nvToolsExt.h").is_file())?;
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("vibeserve_http");
        let src = common::root().join("scripts/cpu/vibeserve_http.c");
        let o = StdCommand::new("gcc")
            .args([
                "-O1",
                &format!("-I{}", inc.display()),
                src.to_str().unwrap(),
                "-o",
                server.to_str().unwrap(),
                "-ldl",
            ])
            .output()
            .ok()?;
        assert!(o.status.success(), "gcc: {}", String::from_utf8_lossy(&o.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let server = server.display().to_string();
        let out = dir.path().join("run");
        let mut a: Vec<String> = ["--nsys", nsys.to_str().unwrap(), "--trace", "nvtx,osrt", "--grace", "3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(["--health".into(), format!("http://127.0.0.1:{port}/health")]);
        a.extend(["--load".into(), format!("{server} --client {port} 2")]);
        a.extend(["--iteration-records".into(), dir.path().join("records.jsonl").display().to_string()]);
        a.extend(["--out".into(), out.display().to_string(), "--".into(), server, port.to_string()]);
        let _g = common::nsys_guard();
        let o = common::serve_capture_run(&a, Duration::from_secs(240));
        let doc: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert_eq!(doc["outcome"], "ok", "{doc}\n{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(doc["iterations"]["verdict"], "PASS", "{}", doc["iterations"]);
        Some(Run { dir })
    });
    if r.is_none() {
        eprintln!("SKIP {test}: needs nsys, gcc and the NVTX headers");
    }
    r.as_ref()
}

fn bin(name: &str, args: &[&str]) -> (i32, Value, String) {
    let o =
        assert_cmd::Command::cargo_bin(name).unwrap().args(args).timeout(Duration::from_secs(300)).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "{name} {args:?}: exit {code}: {stderr}");
    let mut doc = common::one_doc(&o.stdout);
    if name == "step-budget" {
        common::with_step_rows(&mut doc, args, code);
    }
    (code, doc, stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `(start, end, first step of its request)` of every `vibeserve.engine.iteration` range, by start, read with
/// SQL written here (the server's text is inline in 2023.4, or through StringIds).
/// The steps by our own SQL; a range that ends at the capture's end (ANALYSIS_DETAILS.duration: nsys closed it
/// when the capture stopped) is no step.
fn steps_from_sql(db: &Path) -> Vec<(i64, i64, bool)> {
    let c = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    // a request the capture's end closed still tells which step is its first (its prefill)
    let q = "SELECT n.start, n.end, COALESCE(n.text, s.value) AS label FROM NVTX_EVENTS n
             LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 AND n.end IS NOT NULL
             AND (n.end < (SELECT duration FROM ANALYSIS_DETAILS) OR COALESCE(n.text, s.value) = 'vibeserve.request')
             ORDER BY n.start";
    let mut st = c.prepare(q).unwrap();
    let rows: Vec<(i64, i64, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<String>>(2)?.unwrap_or_default())))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let requests: Vec<(i64, i64)> = rows.iter().filter(|r| r.2 == "vibeserve.request").map(|r| (r.0, r.1)).collect();
    let mut out = Vec::new();
    let mut last_req = None;
    for r in rows.iter().filter(|r| r.2 == "vibeserve.engine.iteration") {
        let req = requests.iter().position(|q| q.0 <= r.0 && r.1 <= q.1);
        out.push((r.0, r.1, req.is_some() && req != last_req));
        last_req = req;
    }
    out
}

/// The records joined to the steps: the offset is measured (not assumed), the residuals are small, every
/// step of the capture gets the record of its own iteration (prefill exactly on the first step of each request
/// range, read from the export here), and the framework elapsed agrees with the NVTX wall.
#[test]
fn records_join_the_steps_of_a_real_cpu_capture() {
    let Some(r) = run_or_skip("records_join_the_steps_of_a_real_cpu_capture") else { return };
    let (code, doc, stderr) =
        bin("sqlite-ranges", &[s(&r.sqlite()), "--iteration-records", s(&r.records()), "--compact"]);
    assert_eq!(code, 0, "{stderr}");
    let it = &doc["iterations"];
    assert_eq!(it["step_label"], "vibeserve.engine.iteration");
    assert_eq!(it["step_label_choice"], "iteration_label");
    let j = &it["join"];
    assert_eq!(j["verdict"], "joined", "{j}");
    let rk = &j["ranks"][0];
    let steps = steps_from_sql(&r.sqlite());
    let n = steps.len();
    assert!(n >= 400, "a 2 s load makes hundreds of steps: {n}");
    // every step has its record (the server writes one per step); records after nsys stopped are outside. A
    // server preempted between its clock reading and the NVTX push (2 cores shared by the test run) can leave
    // a record off its step by more than the tolerance: at most 1 % of them
    let slack = (n / 100).max(2) as u64;
    assert_eq!(j["steps"], n as u64);
    assert!(rk["matched"].as_u64().unwrap() + slack >= n as u64, "{rk}");
    assert!(rk["matched_fraction"].as_f64().unwrap() > 0.95, "{rk}");
    assert!(rk["steps_without_record"].as_u64().unwrap() <= slack, "{rk}");
    // the offset: the records' clock minus the export's; the residual is tiny against a 750 us step
    let recs: Vec<Value> =
        std::fs::read_to_string(r.records()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let offset = rk["offset_ns"].as_i64().unwrap();
    // independently: the median of (record i start − step i start) over the first 20 (the capture starts
    // before the server, so record i is step i there)
    let mut d: Vec<i64> = (0..20).map(|i| recs[i]["start_ns"].as_i64().unwrap() - steps[i].0).collect();
    d.sort();
    assert!((offset - d[10]).abs() < 10_000, "offset {offset} vs record − step {}", d[10]);
    let res = &rk["start_residual"];
    assert!(res["median_abs_ns"].as_i64().unwrap() < 5_000, "{res}");
    assert!(res["p90_abs_ns"].as_i64().unwrap() < 20_000, "{res}");
    assert!(rk["drift_ppm"].as_f64().unwrap().abs() < 50.0, "{rk}");
    // the runner-up offsets (a step off) fit far worse: this is what makes the join unambiguous
    let cands = rk["candidates"].as_array().unwrap();
    assert!(cands.len() >= 2, "{rk}");
    assert!(
        cands[1]["median_abs_residual_ns"].as_i64().unwrap()
            > 4 * cands[0]["median_abs_residual_ns"].as_i64().unwrap().max(100)
    );
    // per occurrence: its iteration and geometry; prefill exactly on the first step of each request
    let occ = it["occurrences"].as_array().unwrap();
    assert_eq!(occ.len(), n);
    let (mut prefills, mut unjoined, mut late) = (0, 0, Vec::new());
    for (k, o) in occ.iter().enumerate() {
        assert_eq!(o["index"], k as u64);
        assert_eq!(o["start_ns"], steps[k].0);
        let Some(itn) = o["iteration"].as_u64() else {
            unjoined += 1;
            continue;
        };
        let rec = recs.iter().find(|x| x["iteration"] == itn).unwrap();
        // a record within 20 µs of its step, except for a few steps of a preempted server (the record is
        // written late): at most `slack` of them, as for the steps without a record
        if (rec["start_ns"].as_i64().unwrap() - offset - steps[k].0).abs() >= 20_000 {
            late.push(format!("step {k}: {o} {rec}"));
        }
        assert_eq!(o["phase"] == "prefill", steps[k].2, "step {k}: {o}");
        prefills += (o["phase"] == "prefill") as usize;
    }
    assert!(unjoined <= slack, "{unjoined} steps not joined");
    assert!(late.len() as u64 <= slack, "{} records more than 20 µs from their step: {late:?}", late.len());
    assert!(prefills * 4 + 4 * unjoined as usize >= n - 4 && prefills * 4 <= n + 4, "{prefills} prefills in {n} steps");
    // framework elapsed vs NVTX wall: they agree on a CPU step (the last step may be cut by the capture's end)
    let ev = &j["elapsed_vs_wall"];
    assert_eq!(ev["compared"], rk["matched"]);
    assert!(ev["disagreeing"].as_u64().unwrap() <= 1 + slack, "{ev}");
    let ratio = ev["median_wall_over_elapsed"].as_f64().unwrap();
    assert!((0.98..1.02).contains(&ratio), "{ev}");
}

/// `--iterations START:END` by engine iteration: step-budget analyses exactly those steps, each with its
/// geometry, grouped by phase and batch size; report and sqlite-ranges take the same window; by occurrence
/// index without records.
#[test]
fn a_window_by_iteration_selects_those_steps() {
    let Some(r) = run_or_skip("a_window_by_iteration_selects_those_steps") else { return };
    let (code, doc, stderr) = bin(
        "step-budget",
        &[s(&r.sqlite()), "--iteration-records", s(&r.records()), "--iterations", "40:47", "--compact"],
    );
    // a CPU-only capture: gate-check finds no CUDA data, so the verdict is `unreliable` (exit 1, document written)
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["verdict"]["class"], "unreliable");
    let st = doc["steps"].as_array().unwrap();
    assert_eq!(st.len(), 8, "{}", doc["iterations"]["window"]);
    let its: Vec<u64> = st.iter().map(|x| x["geometry"]["iteration"].as_u64().unwrap()).collect();
    assert_eq!(its, (40..=47).collect::<Vec<_>>());
    for x in st {
        let g = &x["geometry"];
        assert_eq!(g["batch_size"], 1);
        assert_eq!(g["backend"], "cpu");
        assert_eq!(g["graph_mode"], "none");
        let want = if g["phase"] == "prefill" { 16 } else { 1 };
        assert_eq!(g["scheduled_tokens"], want, "{g}");
        assert_eq!(g["nvtx_wall_ns"], x["wall_ns"]);
    }
    let w = &doc["iterations"]["window"];
    assert_eq!(w["by"], "engine_iteration");
    assert_eq!(w["selected_steps"], 8);
    assert_eq!(w["time_window_start_ns"], st[0]["start_ns"]);
    let groups = doc["iterations"]["groups"].as_array().unwrap();
    let total: u64 = groups.iter().map(|g| g["steps"].as_u64().unwrap()).sum();
    assert_eq!(total, 8);
    assert_eq!(groups[0]["phase"], "decode");
    assert_eq!(groups[0]["steps"], 6);
    assert_eq!(groups[1]["phase"], "prefill");
    assert_eq!(groups[0]["distributions"]["wall"]["count"], 6);
    assert_eq!(doc["iterations"]["unjoined_steps"], 0);

    // without records: by occurrence index of the step label
    let (_, d2, _) = bin("step-budget", &[s(&r.sqlite()), "--iterations", "40:47", "--compact"]);
    assert_eq!(d2["iterations"]["window"]["by"], "step_occurrence");
    assert_eq!(d2["steps"].as_array().unwrap().len(), 8);
    assert!(d2["steps"][0].get("geometry").is_none());

    // sqlite-ranges and report with the same window: the step label has 8 occurrences
    let (_, d3, _) = bin(
        "sqlite-ranges",
        &[s(&r.sqlite()), "--iteration-records", s(&r.records()), "--iterations", "40:47", "--compact"],
    );
    let step = d3["ranges"].as_array().unwrap().iter().find(|x| x["label"] == "vibeserve.engine.iteration").unwrap();
    assert_eq!(step["occurrences"], 8);
    assert_eq!(d3["iterations"]["occurrences"].as_array().unwrap().len(), 8);
    let bundle = r.out().join("bundle.json");
    let (code, d4, stderr) = bin("report", &[s(&bundle), "--iterations", "40:47", "--compact"]);
    // a CPU-only capture: the bundle's gate-check said RETRY (no CUDA data), so no class stands (exit 1); the
    // window applies to the evidence all the same
    assert_eq!((code, d4["class"].as_str()), (1, Some("unreliable")), "{stderr} {}", d4["decision"]);
    assert!(d4["decision"]["rule"].as_str().unwrap().starts_with("gates.G1"), "{}", d4["decision"]);
    let ev = d4["evidence"].as_array().unwrap().iter().find(|x| x["label"] == "vibeserve.engine.iteration").unwrap();
    assert_eq!(ev["occurrences"], 8, "{d4}");
    assert!(
        d4["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("--iterations 40:47 (engine_iteration")),
        "{}",
        d4["notes"]
    );
}

/// A window that selects no iteration is RETRY (exit 1) before any analysis, showing the capture's window and
/// the requested one, in each of the three tools; shape-only records are never used as time.
#[test]
fn a_window_that_selects_nothing_is_retry_with_both_windows() {
    let Some(r) = run_or_skip("a_window_that_selects_nothing_is_retry_with_both_windows") else { return };
    let n = steps_from_sql(&r.sqlite()).len() as u64;
    for tool in ["sqlite-ranges", "step-budget", "report"] {
        let (code, doc, stderr) = bin(
            tool,
            &[s(&r.sqlite()), "--iteration-records", s(&r.records()), "--iterations", "900000:900009", "--compact"],
        );
        assert_eq!(code, 1, "{tool}: {stderr}");
        assert_eq!(doc["schema"], "nsyskit.iteration-window/v1");
        assert_eq!(doc["tool"]["name"], tool);
        assert_eq!(doc["verdict"], "RETRY");
        assert_eq!(doc["requested"], serde_json::json!({"start": 900000, "end": 900009}));
        assert_eq!(doc["capture"]["indices"]["start"], 0);
        assert_eq!(doc["capture"]["indices"]["end"], n - 1, "{doc}");
        assert!(doc["reason"].as_str().unwrap().contains("selects no iteration"), "{doc}");
        assert!(stderr.contains("RETRY: --iterations 900000:900009 selects no iteration"), "{stderr}");
    }
    // the RETRY merges into a bundle like a gate's, so `step-budget --iterations … | bundle-merge` keeps it
    let bundle = r.dir.path().join("bundle.json");
    let (_, retry, _) = bin(
        "step-budget",
        &[s(&r.sqlite()), "--iteration-records", s(&r.records()), "--iterations", "900000:900009", "--compact"],
    );
    let m = assert_cmd::Command::cargo_bin("bundle-merge")
        .unwrap()
        .arg(&bundle)
        .write_stdin(retry.to_string())
        .output()
        .unwrap();
    assert_eq!(m.status.code(), Some(0), "{}", String::from_utf8_lossy(&m.stderr));
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(b["iteration_window"], retry);
    assert_eq!(b["iteration_window"]["verdict"], "RETRY");
    // by occurrence: past the last step
    let (code, doc, _) = bin("step-budget", &[s(&r.sqlite()), "--iterations", &format!("{n}:{}", n + 5), "--compact"]);
    assert_eq!(code, 1);
    assert_eq!(doc["by"], "step_occurrence");
    assert_eq!(doc["capture"]["steps"], n);

    // shape-only records (timestamps removed): geometry only, never joined by time → a window by iteration
    // cannot place them on the timeline
    let shape = r.dir.path().join("shape.jsonl");
    let text: String = std::fs::read_to_string(r.records())
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("start_ns");
            o.remove("end_ns");
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&shape, text).unwrap();
    let (code, doc, _) = bin("sqlite-ranges", &[s(&r.sqlite()), "--iteration-records", s(&shape), "--compact"]);
    assert_eq!(code, 0);
    let j = &doc["iterations"]["join"];
    assert_eq!(j["joined_steps"], 0);
    assert_eq!(j["timed_records"], 0);
    assert!(
        j["findings"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().contains("never used as time")),
        "{j}"
    );
    let (code, doc, _) =
        bin("step-budget", &[s(&r.sqlite()), "--iteration-records", s(&shape), "--iterations", "0:9", "--compact"]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["capture"]["joined_steps"], 0);
}

/// Bad `--iterations` values and invalid records are usage/input errors (exit 2) naming the flag or the line.
#[test]
fn bad_windows_and_bad_records_exit_2() {
    let f = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    for w in ["5", "9:3", "-1:4", "a:b"] {
        let o =
            assert_cmd::Command::cargo_bin("step-budget").unwrap().args([s(&f), "--iterations", w]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{w}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--iterations"), "{w}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"iteration\":0,\"rank\":0}\n").unwrap();
    let o = assert_cmd::Command::cargo_bin("sqlite-ranges")
        .unwrap()
        .args([s(&f), "--iteration-records", s(&bad)])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.jsonl: line 1 $.phase: missing"), "{e}");
    // by occurrence on a real GPU fixture: steps 10..=19 of its 204 iterations
    let o = assert_cmd::Command::cargo_bin("step-budget")
        .unwrap()
        .args([s(&f), "--iterations", "10:19", "--compact"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let d = common::one_doc(&o.stdout);
    assert_eq!(d["step_count"], 10);
    assert_eq!(d["iterations"]["window"]["capture"]["steps"], 204);
}

/// `fixtures/REL` (xz) decompressed once into the test's scratch folder (xz, else Python's lzma).
fn unxz(rel: &str) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iterations-xz");
    let out = dir.join(rel.trim_end_matches(".xz").replace('/', "_"));
    if !out.is_file() {
        std::fs::create_dir_all(&dir).unwrap();
        let src = common::fixture(rel);
        let got = StdCommand::new("xz").arg("-dc").arg(&src).output().or_else(|_| {
            StdCommand::new("python3")
                .args(["-c", "import lzma,sys;sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())"])
                .arg(&src)
                .output()
        });
        let got = got.expect("xz or python3 is needed to read the .xz fixtures");
        assert!(got.status.success(), "{rel}: {}", String::from_utf8_lossy(&got.stderr));
        let part = out.with_extension("part");
        std::fs::write(&part, &got.stdout).unwrap();
        std::fs::rename(&part, &out).unwrap();
    }
    out
}

/// The H200 serve-capture run with records (nsys 2025.3.1, `scripts/gpu/vibeserve_http.py` writing
/// `time.monotonic_ns()` records, a cudaProfilerApi range): the server's whole life is in the records (14 436),
/// only the iterations inside the capture range are steps. Every step is joined to a record of its own
/// iteration, and the geometry is the step's own: `graph_mode: full` exactly on the steps that launch a CUDA
/// graph (counted by step-budget from the runtime calls, independently of the records), `none` on the eager
/// prefills.
#[test]
fn records_join_the_steps_of_the_h200_serve_capture() {
    let db = unxz("serve-capture-gpu-records/capture.sqlite.xz");
    let recs = unxz("serve-capture-gpu-records/iterations.jsonl.xz");
    let (code, doc, stderr) = bin("step-budget", &[s(&db), "--iteration-records", s(&recs), "--compact"]);
    assert_eq!(code, 0, "{stderr}");
    let j = &doc["iterations"]["join"];
    assert_eq!(j["verdict"], "joined", "{j}");
    assert_eq!(j["records"], 14436);
    let steps = doc["steps"].as_array().unwrap();
    let n = steps.len() as u64;
    assert_eq!(n, 4318);
    let rk = &j["ranks"][0];
    assert_eq!(rk["matched"], n, "{rk}");
    assert_eq!(rk["records_outside_capture"], 14436 - n, "{rk}");
    assert_eq!(rk["steps_without_record"], 0);
    // the engine's iterations inside the capture range: consecutive
    let (first, last) = (rk["first_iteration"].as_u64().unwrap(), rk["last_iteration"].as_u64().unwrap());
    assert_eq!(last - first + 1, n, "{rk}");
    let res = &rk["start_residual"];
    assert!(res["median_abs_ns"].as_i64().unwrap() < 2_000, "{res}");
    let c = rk["candidates"].as_array().unwrap();
    assert!(c[1]["median_abs_residual_ns"].as_i64().unwrap() > 20 * c[0]["median_abs_residual_ns"].as_i64().unwrap());
    assert!(rk["drift_ppm"].as_f64().unwrap().abs() < 10.0, "{rk}");
    let mut graphs = 0;
    for (k, st) in steps.iter().enumerate() {
        let g = &st["geometry"];
        assert_eq!(g["iteration"], first + k as u64, "step {k}");
        let launches = st["graph_launches"].as_u64().unwrap();
        assert_eq!(g["graph_mode"] == "full", launches > 0, "step {k}: {g} with {launches} graph launches");
        assert_eq!(g["phase"] == "prefill", g["graph_mode"] == "none", "step {k}: {g}");
        graphs += (launches > 0) as u64;
    }
    assert_eq!(graphs, 4064, "the capture's cudaGraphLaunch count");
    // framework elapsed (the host readings inside the range) agrees with the NVTX wall on every step
    let ev = &j["elapsed_vs_wall"];
    assert_eq!(ev["disagreeing"], 0, "{ev}");
    // grouped by phase and batch size: decode at batch 4 (graphs), prefill at batch 4 (eager)
    let groups = doc["iterations"]["groups"].as_array().unwrap();
    let names: Vec<(String, u64, u64)> = groups
        .iter()
        .map(|g| {
            (g["phase"].as_str().unwrap().to_string(), g["batch_size"].as_u64().unwrap(), g["steps"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(names, vec![("decode".to_string(), 4, 4064), ("prefill".to_string(), 4, 254)]);
    let dec = &groups[0]["distributions"];
    assert!(
        dec["wall"]["median"].as_i64().unwrap() * 5 < groups[1]["distributions"]["wall"]["median"].as_i64().unwrap()
    );
    // a window of engine iterations that the capture range missed (the warmup) is RETRY, both windows shown
    let (code, d, _) =
        bin("step-budget", &[s(&db), "--iteration-records", s(&recs), "--iterations", "0:99", "--compact"]);
    assert_eq!(code, 1);
    assert_eq!(d["capture"]["indices"], serde_json::json!({"start": first, "end": last}));
    assert_eq!(d["capture"]["records_iterations"]["start"], 0);
    let (code, d, _) = bin(
        "step-budget",
        &[
            s(&db),
            "--iteration-records",
            s(&recs),
            "--iterations",
            &format!("{}:{}", first + 100, first + 149),
            "--compact",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(d["steps"].as_array().unwrap().len(), 50);
}

/// Two rank processes on one H200 (nsys 2025.3.1), one records file with rank 0 and 1 and no `pid`: each rank
/// is joined to its own process, chosen by the residuals (the other rank's steps fit 100× worse). Which process
/// is rank 1 is read here from the export: rank 1 sleeps 2 ms inside `vibeserve.engine.scheduling` every 10th
/// step (scripts/gpu/two_rank.py).
#[test]
fn two_ranks_join_their_own_processes() {
    let db = unxz("nsys-2025.3.1/two_rank.sqlite.xz");
    let recs = common::fixture("nsys-2025.3.1/two_rank.iterations.jsonl");
    let c = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let slow: Vec<i64> = c
        .prepare(
            "SELECT DISTINCT (n.globalTid >> 24) & 16777215 FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
             WHERE COALESCE(n.text, s.value) = 'vibeserve.engine.scheduling' AND n.end - n.start > 2000000",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(slow.len(), 1, "one process sleeps in scheduling: {slow:?}");
    let (code, doc, stderr) = bin("sqlite-ranges", &[s(&db), "--iteration-records", s(&recs), "--compact"]);
    assert_eq!(code, 0, "{stderr}");
    let j = &doc["iterations"]["join"];
    assert_eq!(j["verdict"], "joined", "{j}");
    let ranks = j["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[1]["pid"], slow[0], "rank 1 is the process that sleeps");
    assert_ne!(ranks[0]["pid"], slow[0]);
    for r in ranks {
        assert_eq!(r["matched"], 124, "{r}");
        let pid = r["pid"].as_i64().unwrap();
        let own = r["start_residual"]["median_abs_ns"].as_i64().unwrap();
        let other = r["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["pid"].as_i64() != Some(pid))
            .map(|c| c["median_abs_residual_ns"].as_i64().unwrap())
            .min()
            .unwrap();
        assert!(other > 20 * own.max(100), "rank {}: own {own} ns, other process {other} ns", r["rank"]);
    }
    // one clock on one host: the two ranks' measured offsets agree within a microsecond
    let d = ranks[0]["offset_ns"].as_i64().unwrap() - ranks[1]["offset_ns"].as_i64().unwrap();
    assert!(d.abs() < 1_000, "{d}");
    assert_eq!(j["offset_spread_ns"], d.abs());
    // the window by engine iteration 15 selects that iteration on both ranks, each with its own geometry
    let (_, sb, _) =
        bin("step-budget", &[s(&db), "--iteration-records", s(&recs), "--iterations", "15:15", "--compact"]);
    let st = sb["steps"].as_array().unwrap();
    assert_eq!(st.len(), 2);
    let mut rk: Vec<u64> = st.iter().map(|x| x["geometry"]["rank"].as_u64().unwrap()).collect();
    rk.sort();
    assert_eq!(rk, vec![0, 1]);
    assert!(st.iter().all(|x| x["geometry"]["iteration"] == 15 && x["wall_ns"].as_i64().unwrap() > 2_000_000));
}
