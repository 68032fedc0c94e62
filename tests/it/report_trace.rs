//! `report --trace OUT.json` (issue #20, "Show it"): a Chrome/Perfetto trace-event file of a window of steps,
//! validated here against the trace-event format (required fields per phase, flows paired and bound to their
//! slices, every slice nested on its track, every timestamp inside the window, thread and process names), and
//! on real captures against counts made here with SQL of our own: the kernels (per device and stream) and the
//! launch→GPU pairs in the window, and the window's start = the step's NVTX row.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use assert_cmd::Command;
use common::export;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

fn run(args: &[&str]) -> (Value, i32, String) {
    let out =
        Command::cargo_bin("report").unwrap().args(args).arg("--compact").current_dir(common::root()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    let code = out.status.code().unwrap_or(-1);
    if code != 0 {
        return (Value::Null, code, err);
    }
    (common::one_doc(&out.stdout), code, err)
}

fn raw(p: &Path) -> Connection {
    Connection::open_with_flags(
        format!("file:{}?mode=ro&immutable=1", p.display()),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap()
}

fn has_table(c: &Connection, t: &str) -> bool {
    c.query_row("SELECT count(*) FROM sqlite_master WHERE name = ?1", [t], |r| r.get::<_, i64>(0)).unwrap() > 0
}

const EPS: f64 = 1e-6;

/// Validate a trace-event file; returns its events.
fn validate(trace: &Value) -> Vec<Value> {
    let od = &trace["otherData"];
    let (t0, t1) = (
        od["window_start_ns"].as_i64().unwrap() as f64 / 1000.0,
        od["window_end_ns"].as_i64().unwrap() as f64 / 1000.0,
    );
    assert!(t1 > t0);
    let ev = trace["traceEvents"].as_array().expect("traceEvents is an array").clone();
    assert_eq!(ev.len() as u64, od["events"].as_u64().unwrap());
    assert!(ev.len() as u64 <= od["max_events"].as_u64().unwrap());
    let mut names: HashSet<(i64, i64)> = HashSet::new();
    let mut pnames: HashSet<i64> = HashSet::new();
    let mut tracks: BTreeMap<(i64, i64), Vec<(f64, f64)>> = BTreeMap::new();
    let mut flows: HashMap<u64, Vec<&Value>> = HashMap::new();
    for e in &ev {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "name: {e}");
        let pid = e["pid"].as_i64().expect("pid");
        match ph {
            "M" => {
                match e["name"].as_str().unwrap() {
                    "process_name" => {
                        assert!(e["args"]["name"].is_string());
                        pnames.insert(pid);
                    }
                    "thread_name" => {
                        assert!(e["args"]["name"].is_string());
                        names.insert((pid, e["tid"].as_i64().expect("tid")));
                    }
                    "process_sort_index" => assert!(e["args"]["sort_index"].is_i64()),
                    n => panic!("unknown metadata {n}"),
                }
                continue;
            }
            "X" | "s" | "f" | "C" => {}
            p => panic!("unexpected phase {p}: {e}"),
        }
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= t0 - EPS && ts <= t1 + EPS, "ts {ts} outside [{t0}, {t1}]: {e}");
        assert!(e["cat"].is_string(), "cat: {e}");
        match ph {
            "X" => {
                let dur = e["dur"].as_f64().expect("dur");
                assert!(dur >= 0.0 && ts + dur <= t1 + EPS, "{e}");
                tracks.entry((pid, e["tid"].as_i64().expect("tid"))).or_default().push((ts, ts + dur));
            }
            "s" | "f" => {
                e["tid"].as_i64().expect("tid");
                flows.entry(e["id"].as_u64().expect("id")).or_default().push(e);
                if ph == "f" {
                    assert_eq!(e["bp"], "e", "{e}");
                }
            }
            "C" => {
                let a = e["args"].as_object().expect("counter args");
                assert!(!a.is_empty() && a.values().all(|v| v.is_number()), "{e}");
            }
            _ => unreachable!(),
        }
    }
    // every track is named, every process too, and its slices nest
    for ((pid, tid), sl) in &mut tracks {
        assert!(names.contains(&(*pid, *tid)), "track {pid}/{tid} has no thread_name");
        assert!(pnames.contains(pid), "process {pid} has no process_name");
        sl.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for (s, e) in sl.iter() {
            while open.last().is_some_and(|&t| t <= *s + EPS) {
                open.pop();
            }
            if let Some(&top) = open.last() {
                assert!(*e <= top + EPS, "track {pid}/{tid}: [{s}, {e}] overlaps without nesting (parent ends {top})");
            }
            open.push(*e);
        }
    }
    // flows: one s and one f per id, s no later than f, each bound to a slice of its track
    let inside = |e: &Value, start: bool| {
        let k = (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap());
        let ts = e["ts"].as_f64().unwrap();
        tracks.get(&k).is_some_and(|sl| {
            sl.iter().any(|(s, x)| if start { *s <= ts + EPS && ts <= *x + EPS } else { (s - ts).abs() < EPS })
        })
    };
    for (id, pair) in &flows {
        assert_eq!(pair.len(), 2, "flow {id}");
        let s = pair.iter().find(|e| e["ph"] == "s").unwrap_or_else(|| panic!("flow {id} has no start"));
        let f = pair.iter().find(|e| e["ph"] == "f").unwrap_or_else(|| panic!("flow {id} has no end"));
        assert!(s["ts"].as_f64().unwrap() <= f["ts"].as_f64().unwrap() + EPS, "flow {id}");
        assert!(inside(s, true), "flow {id} starts outside a slice: {s}");
        assert!(inside(f, false), "flow {id} ends on no slice start: {f}");
    }
    ev
}

/// Kernels (per device and stream) and device rows with a correlated runtime call, in `[t0, t1)`, by our SQL.
fn independent(p: &Path, t0: i64, t1: i64) -> (BTreeMap<(i64, i64), i64>, i64) {
    let c = raw(p);
    let mut per: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut st = c
        .prepare("SELECT deviceId, streamId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start < ?1 AND end > ?2 GROUP BY 1, 2")
        .unwrap();
    let rows = st.query_map([t1, t0], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?))).unwrap();
    for r in rows {
        let (k, n) = r.unwrap();
        per.insert(k, n);
    }
    let mut flows = 0;
    for t in [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    ] {
        if !has_table(&c, t) {
            continue;
        }
        flows += c
            .query_row(
                &format!(
                    "SELECT count(*) FROM {t} d WHERE d.start < ?1 AND d.end > ?2 AND EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r \
                     WHERE r.correlationId = d.correlationId AND (r.globalTid >> 24) = (d.globalPid >> 24) AND r.start < ?1 AND r.end > ?2)"
                ),
                [t1, t0],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
    }
    (per, flows)
}

/// The start of the k-th occurrence of `label` (0-based, by start), by our SQL.
fn step_start(p: &Path, label: &str, k: i64) -> i64 {
    raw(p)
        .query_row(
            "SELECT n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId \
             WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND coalesce(n.text, s.value) = ?1 ORDER BY n.start, n.end LIMIT 1 OFFSET ?2",
            rusqlite::params![label, k],
            |r| r.get(0),
        )
        .unwrap()
}

fn check_capture(p: &Path, extra: &[&str], dir: &Path) -> (Value, Value, Vec<Value>) {
    let out = dir.join("t.json");
    let mut args = vec![p.to_str().unwrap(), "--trace", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (r, rc, err) = run(&args);
    assert_eq!(rc, 0, "{err}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("the trace file is JSON");
    let ev = validate(&trace);
    let od = &trace["otherData"];
    let t = &r["trace"];
    assert_eq!(t["path"], out.to_str().unwrap());
    assert_eq!(
        (t["start_ns"].clone(), t["end_ns"].clone()),
        (od["window_start_ns"].clone(), od["window_end_ns"].clone())
    );
    assert_eq!(t["truncated"], false);
    let (t0, t1) = (od["window_start_ns"].as_i64().unwrap(), od["window_end_ns"].as_i64().unwrap());
    // the window starts at its first step's NVTX row
    let label = t["step_label"].as_str().unwrap();
    let a = t["window_steps"][0].as_i64().unwrap();
    assert_eq!(t0, step_start(p, label, a));
    // kernels per device and stream = our count
    let (per, flows) = independent(p, t0, t1);
    let mut got: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let gpu_names: HashMap<(i64, i64), String> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            ((e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap()), e["args"]["name"].as_str().unwrap().to_string())
        })
        .collect();
    let re = regex::Regex::new(r"^GPU (\d+) stream (\d+)").unwrap();
    for e in ev.iter().filter(|e| e["ph"] == "X" && e["cat"] == "kernel") {
        let name = &gpu_names[&(e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap())];
        let c = re.captures(name).unwrap_or_else(|| panic!("a kernel on track {name:?}"));
        *got.entry((c[1].parse().unwrap(), c[2].parse().unwrap())).or_default() += 1;
    }
    assert_eq!(got, per, "kernels per (device, stream) in [{t0}, {t1})");
    let kernels: i64 = per.values().sum();
    assert!(kernels > 0);
    assert_eq!(t["kernels"].as_i64().unwrap(), kernels);
    assert_eq!(od["kernels_in_window"].as_i64().unwrap(), kernels);
    // one flow per correlated (launch, GPU work) pair
    assert_eq!(ev.iter().filter(|e| e["ph"] == "s").count() as i64, flows);
    assert_eq!(t["flows"].as_i64().unwrap(), flows);
    // the step budget as counters: one sample per step of the window, its components summing to its wall
    let b = t["window_steps"][1].as_i64().unwrap();
    let sb = nsyskit::step_budget::run(
        p,
        &nsyskit::step_budget::StepBudgetOptions { step: Some(label.into()), ..Default::default() },
        None,
    )
    .unwrap();
    let samples: Vec<&Value> = ev
        .iter()
        .filter(|e| e["ph"] == "C" && e["args"].as_object().unwrap().values().any(|v| v.as_f64().unwrap() > 0.0))
        .collect();
    assert_eq!(samples.len() as i64, b - a);
    for (s, step) in samples.iter().zip(&sb.steps[a as usize..b as usize]) {
        let sum: f64 = s["args"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
        assert!(
            (sum * 1000.0 - step.wall_ns as f64).abs() < 1.0,
            "step {}: {sum} µs vs {} ns",
            step.index,
            step.wall_ns
        );
    }
    (r, trace, ev)
}

#[test]
fn decode_clean_default_window_is_five_steps_around_the_median_step() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let (r, _, ev) = check_capture(&p, &[], dir.path());
    let t = &r["trace"];
    let (a, b) = (t["window_steps"][0].as_u64().unwrap(), t["window_steps"][1].as_u64().unwrap());
    assert_eq!(b - a, 5);
    // the median step is in the middle, and its wall is the median wall
    let m = t["window_choice"].as_str().unwrap().rsplit(' ').next().unwrap().parse::<u64>().unwrap();
    assert_eq!(m, a + 2);
    let sb = nsyskit::step_budget::run(&p, &Default::default(), None).unwrap();
    assert_eq!(sb.steps[m as usize].wall_ns, sb.distributions["wall"].median);
    // names: the engine thread, the GPU stream
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"].as_str().is_some_and(|n| n.starts_with("GPU 0 stream "))));
    // the window's step ranges carry their step index
    let idx: Vec<u64> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "nvtx" && e["name"] == "vibeserve.engine.iteration")
        .filter_map(|e| e["args"]["step"].as_u64())
        .collect();
    assert_eq!(idx, (a..b).collect::<Vec<_>>());
    assert!(ev.iter().any(|e| e["ph"] == "X"
        && e["cat"] == "cuda_api"
        && e["name"].as_str().unwrap().starts_with("cudaLaunchKernel")));
    assert!(ev.iter().any(|e| e["ph"] == "X" && e["cat"] == "memcpy"));
}

#[test]
fn serve_node_explicit_window() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _, _) =
        check_capture(&common::fixture("nsys-2025.3.1/serve_node.sqlite"), &["--window", "100:104"], dir.path());
    assert_eq!(r["trace"]["window_steps"], serde_json::json!([100, 104]));
    assert_eq!(r["trace"]["window_choice"], "--window");
}

#[test]
fn hf_node_window_over_the_graph_recording_outlier() {
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/hf_node.sqlite.xz", dir.path());
    // the default window, then steps 46..49 around the second call's first decode step (14.75 ms)
    check_capture(&p, &[], dir.path());
    let (r, _, ev) = check_capture(&p, &["--window", "46:49"], dir.path());
    assert_eq!(r["trace"]["step_label"], "hf.decode_step");
    // step 47, the second call's first decode step (graph re-recording), is marked an outlier on its range, and
    // step 48 after it (1.52x the median of a tight distribution) too
    let marks: Vec<(u64, bool)> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "hf.decode_step")
        .filter_map(|e| Some((e["args"]["step"].as_u64()?, e["args"]["outlier"].as_bool()?)))
        .collect();
    assert_eq!(marks, vec![(46, false), (47, true), (48, true)]);
    assert!(ev.iter().filter(|e| e["cat"] == "kernel").count() > 100);
}

#[test]
fn the_file_is_bounded_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let p = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let (r, rc, err) = run(&[p.to_str().unwrap(), "--trace", out.to_str().unwrap(), "--trace-max-events", "300"]);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("more than 300 events") && err.contains("dropped"), "{err}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = validate(&trace);
    assert!(ev.len() <= 300);
    let od = &trace["otherData"];
    assert_eq!(od["truncated"], true);
    assert_eq!(od["max_events"], 300);
    let cut = od["truncated_at_ns"].as_i64().unwrap() as f64 / 1000.0;
    assert!(ev.iter().filter(|e| e["ph"] != "M").all(|e| e["ts"].as_f64().unwrap() < cut));
    assert_eq!(r["trace"]["truncated"], true);
    assert!(r["trace"]["dropped_events"].as_u64().unwrap() > 0);
    assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("--trace-max-events")));
}

#[test]
fn bad_trace_usage_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let o = out.to_str().unwrap();
    let p = common::fixture("nsys-2025.3.1/decode_clean.sqlite");
    let p = p.to_str().unwrap();
    for (args, want) in [
        (vec![p, "--window", "1:3"], "--window"),
        (vec![p, "--trace", o, "--window", "5:3"], "--window"),
        (vec![p, "--trace", o, "--window", "x"], "--window"),
        (vec![p, "--trace", o, "--window", "400:405"], "400 steps"),
        (vec![p, "--trace", p], "--trace"),
        (vec![p, "--trace", o, "--trace-max-events", "5"], "--trace-max-events"),
    ] {
        let (_, rc, err) = run(&args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // a bundle holds no timeline
    let bundle = dir.path().join("b.json");
    let ranges = Command::cargo_bin("sqlite-ranges").unwrap().arg(p).output().unwrap();
    Command::cargo_bin("bundle-merge").unwrap().arg(&bundle).write_stdin(ranges.stdout).assert().success();
    let (_, rc, err) = run(&[bundle.to_str().unwrap(), "--trace", o]);
    assert_eq!(rc, 2);
    assert!(err.contains("needs an nsys export"), "{err}");
    assert!(!out.exists());
}

#[test]
fn two_ranks_on_one_gpu_get_a_stream_track_each() {
    // two rank processes (pids 717, 718) replaying graphs on stream 7 of the same H200
    let dir = tempfile::tempdir().unwrap();
    let p = export("nsys-2025.3.1/two_rank.sqlite.xz", dir.path());
    let (_, _, ev) = check_capture(&p, &[], dir.path());
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"GPU 0 stream 7 (pid 717)") && names.contains(&"GPU 0 stream 7 (pid 718)"), "{names:?}");
    let procs: Vec<&str> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        procs.contains(&"python3 (pid 717)") && procs.contains(&"python3 (pid 718)") && procs.contains(&"GPU 0"),
        "{procs:?}"
    );
}
