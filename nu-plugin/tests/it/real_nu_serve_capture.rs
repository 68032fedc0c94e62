//! `serve-capture` in a REAL nu 0.115.1: a real nsys 2023.4 capture of the CPU test server
//! (scripts/cpu/vibeserve_http.c) through the plugin, Ctrl-C (SIGINT to nu) mid-run, and a usage error.
//! SKIPs without nu, nsys, gcc or the NVTX headers.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Nu;
use serde_json::{json, Value};

/// One capture at a time (2 cores; each run is timing-sensitive).
static NSYS_LOCK: Mutex<()> = Mutex::new(());

struct Setup {
    nu: Nu,
    nsys: PathBuf,
    server: PathBuf,
    tmp: tempfile::TempDir,
}

/// How many times a run is tried when nsys 2023.4 fails on its own (its agent lost, its endpoint missing): such
/// a run says nothing about nsyskit.
const NSYS_OWN_TRIES: u32 = 3;

fn setup(test: &str) -> Option<Setup> {
    let nu = Nu::or_skip(test)?;
    let nsys = common::nsys_or_skip(test)?;
    let tmp = tempfile::tempdir().unwrap();
    let server = common::cpu_server_or_skip(test, &nsys, tmp.path())?;
    Some(Setup { nu, nsys, server, tmp })
}

/// Independently of serve-capture: is this recorded process (PID + start time) still alive?
fn still_alive(p: &Value) -> bool {
    let pid = p["pid"].as_i64().unwrap();
    let st = p["starttime_ticks"].as_u64().unwrap();
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let rest: Vec<&str> = text[text.rfind(')').unwrap() + 1..].split_whitespace().collect();
    rest[19].parse::<u64>().unwrap() == st && rest[0] != "Z"
}

fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&format!(":{port:04X}")) && c[3] == "0A"
        })
    })
}

fn assert_cleaned_up(processes: &Value, port: u16) {
    let procs = processes.as_array().unwrap();
    assert!(procs.len() >= 3, "{processes}");
    for p in procs {
        assert!(!still_alive(p), "recorded process still alive: {p}");
    }
    assert!(!listening(port), "port {port} still listening");
}

fn server_cmd(s: &Setup, port: u16) -> String {
    format!("-- '{}' {port}", s.server.display())
}

#[test]
fn serve_capture_cpu_server_time_window() {
    let Some(s) = setup("serve_capture_cpu_server_time_window") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let port = common::free_port();
    let srv = s.server.display();
    // --out relative to Nushell's current folder (cd), a client as a list and one as a string, durations and
    // a filesize where the binary takes seconds and bytes
    let pipeline = format!(
        "cd '{tmp}'; serve-capture --nsys '{nsys}' --trace nvtx,osrt --delay 5sec --duration 3 --grace 3sec \
           --min-rep-bytes 100KB --health http://127.0.0.1:{port}/health --models http://127.0.0.1:{port}/v1/models \
           --warmup '{srv} --client {port} 0.3' --load ['{srv}' --client '{port}' '11'] --out run {server} \
         | {{outcome: $in.outcome, failures: $in.failures, out_dir: $in.out_dir, mode: $in.window.mode, \
            gate: $in.gate, load: ($in.load | select exit_code spans_window argv), warmup_exit: $in.warmup.exit_code, \
            roles: ($in.processes | get role), processes: $in.processes, cleanup: $in.cleanup, \
            iterations: ($in.capture.nvtx_ranges | where name == vibeserve.engine.iteration | get 0.count), \
            typed: ($in.capture.nvtx_ranges | describe)}}",
        tmp = s.tmp.path().display(),
        nsys = s.nsys.display(),
        server = server_cmd(&s, port),
    );
    let out = s.tmp.path().join("run");
    // nsys 2023.4 sometimes loses its own agent ("Connection to Agent lost. This is most likely a bug") and exits 0
    // without a report, seen under load in stops 12 and 13, or cannot reach its own endpoint ("Local Endpoint is
    // not available", exit 1, seen in a fresh clone on 2026-12-02): such a run says nothing about nsyskit, so it is
    // tried once more (any other failure fails the test at once)
    // (it lost its agent twice in a row once, in a fresh clone on 2026-12-06: up to NSYS_OWN_TRIES runs)
    let nsys_own = ["Connection to Agent lost", "Local Endpoint is not available"];
    let mut tries = 0;
    let got: Value = loop {
        tries += 1;
        let run = s.nu.raw(&format!("plugin use nsyskit\n{pipeline} | to json --raw"));
        let stderr = String::from_utf8_lossy(&run.stderr);
        if !run.status.success() && nsys_own.iter().any(|m| stderr.contains(m)) && tries < NSYS_OWN_TRIES {
            eprintln!("nsys 2023.4 failed on its own (its own bug): trying again ({tries} of {NSYS_OWN_TRIES})");
            let _ = std::fs::remove_dir_all(&out);
            continue;
        }
        assert!(run.status.success(), "nu failed on `{pipeline}`:\n{stderr}");
        break serde_json::from_slice(&run.stdout).expect("JSON");
    };
    assert_eq!(got["outcome"], "ok", "{got}");
    assert_eq!(got["failures"], json!([]));
    assert_eq!(got["out_dir"], out.display().to_string(), "relative --out follows Nushell's cd");
    assert_eq!(got["mode"], "time");
    // a CPU-only capture has no CUDA data: gate-check RETRY at G1 and G3, as data (no error)
    assert_eq!(got["gate"]["verdict"], "RETRY");
    assert_eq!(got["gate"]["retry"], json!(["G1", "G3"]));
    assert_eq!(got["load"]["exit_code"], 0);
    assert_eq!(got["load"]["spans_window"], true);
    assert_eq!(got["load"]["argv"], json!([srv.to_string(), "--client", port.to_string(), "11"]));
    assert_eq!(got["warmup_exit"], 0);
    for role in ["profiler", "server", "warmup", "load"] {
        assert!(got["roles"].as_array().unwrap().contains(&json!(role)), "{role}: {got}");
    }
    for (k, v) in
        [("all_gone", json!(true)), ("port", json!(port)), ("port_released", json!(true)), ("stop_signal", Value::Null)]
    {
        assert_eq!(got["cleanup"][k], v, "{k}: {got}");
    }
    // without a GPU the release check is "not checked", never "passed"
    let gpu_check = got["cleanup"]["gpu_check"].as_str().unwrap();
    assert!(
        gpu_check == "not checked"
            || (gpu_check == "passed"
                && std::env::var_os("PATH")
                    .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("nvidia-smi").is_file()))),
        "{got}"
    );
    assert_cleaned_up(&got["processes"], port);
    // the record is the document the run folder keeps (what the binary prints), and the export agrees
    let kept: Value = serde_json::from_slice(&std::fs::read(out.join("serve-capture.json")).unwrap()).unwrap();
    assert_eq!(kept["processes"], got["processes"]);
    let ex = nsyskit::export::Export::open(&out.join("capture.sqlite")).unwrap();
    let n: i64 = ex
        .conn()
        .query_row(
            // the last iteration, if nsys closed it at the capture's end, is no step (docs/sqlite-ranges.md)
            "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'vibeserve.engine.iteration' AND end IS NOT NULL AND end < (SELECT duration FROM ANALYSIS_DETAILS)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(n > 100, "only {n} iterations in the 3 s window");
    assert_eq!(got["iterations"], json!(n));
    assert_eq!(got["typed"], "table<name: string, count: int>");
}

/// Ctrl-C: SIGINT to nu (the plugin runs in its own process group and never sees it); nu forwards the
/// interrupt through the plugin protocol, the run stops and cleans up as the binary does on SIGINT.
#[test]
fn serve_capture_ctrl_c_cleans_up() {
    let Some(s) = setup("serve_capture_ctrl_c_cleans_up") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let port = common::free_port();
    let out = s.tmp.path().join("run");
    let script = format!(
        "plugin use nsyskit\nserve-capture --nsys '{nsys}' --trace nvtx,osrt --grace 3 \
           --health http://127.0.0.1:{port}/health --load '{srv} --client {port} 60' --out '{out}' {server} | get outcome",
        nsys = s.nsys.display(),
        srv = s.server.display(),
        out = out.display(),
        server = server_cmd(&s, port),
    );
    // as in serve_capture_cpu_server_time_window: a run that nsys 2023.4 itself broke before the load started
    // (its own bug, exit without a report) is tried once more; anything else fails the test with nu's output
    let mut tries = 0;
    let (child, t) = loop {
        tries += 1;
        let _ = std::fs::remove_dir_all(&out);
        let mut child =
            s.nu.command(&script)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
        let t = Instant::now();
        while !out.join("pids/load.pid").exists() && child.try_wait().unwrap().is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!("the load client never started in 60 s:\n{}", String::from_utf8_lossy(&o.stderr));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if out.join("pids/load.pid").exists() {
            break (child, t);
        }
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        let nsys_own = ["Connection to Agent lost", "Local Endpoint is not available"];
        assert!(
            tries < NSYS_OWN_TRIES && nsys_own.iter().any(|m| stderr.contains(m)),
            "the run ended before its load client started:\n{stderr}"
        );
        eprintln!("nsys 2023.4 failed on its own (its own bug): trying again ({tries} of {NSYS_OWN_TRIES})");
    };
    std::thread::sleep(Duration::from_millis(500));
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(t.elapsed() < Duration::from_secs(50), "cleanup took {:?}", t.elapsed());
    // nu reports the interrupted pipeline; the run's document is in the run folder
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(stderr.contains("serve-capture: interrupted: SIGINT received"), "{stderr}");
    let doc: Value = serde_json::from_slice(&std::fs::read(out.join("serve-capture.json")).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "interrupted", "{doc}");
    assert_eq!(doc["cleanup"]["stop_signal"], 2);
    assert_eq!(doc["cleanup"]["all_gone"], true);
    assert_eq!(doc["failures"][0]["stage"], "interrupted");
    let load = doc["processes"].as_array().unwrap().iter().find(|p| p["role"] == "load").unwrap();
    assert_eq!(load["signals_sent"][0], "SIGTERM");
    assert_cleaned_up(&doc["processes"], port);
}

#[test]
fn serve_capture_usage_errors_point_at_the_flag() {
    let Some(nu) = Nu::or_skip("serve_capture_usage_errors_point_at_the_flag") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let script = format!(
        "serve-capture --health ftp://x/health --load 'true' --out '{}' -- sleep 1",
        tmp.path().join("r").display()
    );
    let err = nu.error(&script);
    assert!(err.contains("nsyskit::usage"), "{err}");
    assert!(err.contains("(--health)"), "{err}");
    // the label covers `--health ftp://x/health` (1-based columns; the script is on line 2, after `plugin use`)
    let at = script.find("--health").unwrap() + 1;
    assert!(
        err.contains(&format!("label at line 2, columns {at} to {}", at - 1 + "--health ftp://x/health".len())),
        "{err}"
    );
    assert!(!Path::new(&tmp.path().join("r")).exists(), "nothing is created on a usage error");
    // an unbalanced client command: the span of --load's value
    let err = nu.error("serve-capture --health http://127.0.0.1:9/ --load 'a \"b' --out /tmp/x -- sleep 1");
    assert!(err.contains("--load"), "{err}");
    assert!(err.contains("unbalanced quotes"), "{err}");
}

/// The flags added for issue #15 through the plugin: a worker of the server that exits 7 mid-load rejects the
/// sample (a value, not an error); `--instrumentation` as a list lands in provenance; `--nvidia-smi` pointing at
/// nothing makes the GPU release check "not checked".
#[test]
fn serve_capture_worker_death_and_new_flags() {
    let Some(s) = setup("serve_capture_worker_death_and_new_flags") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let port = common::free_port();
    let out = s.tmp.path().join("wrun");
    let got = s.nu.json(&format!(
        "serve-capture --nsys '{nsys}' --trace nvtx,osrt --grace 3sec --health http://127.0.0.1:{port}/health \
           --nvidia-smi '{none}' --instrumentation [nvtx=on graphs=off] --gpu-mem-tolerance 64 \
           --load '{srv} --client {port} 8' --out '{out}' -- '{srv}' {port} --worker --worker-dies-after 30 \
         | {{outcome: $in.outcome, stage: $in.failures.0.stage, reason: $in.failures.0.reason, cleanup: $in.cleanup}}",
        nsys = s.nsys.display(),
        none = s.tmp.path().join("no-nvidia-smi").display(),
        srv = s.server.display(),
        out = out.display(),
    ));
    assert_eq!(got["outcome"], "failed", "{got}");
    assert_eq!(got["stage"], "worker");
    assert!(got["reason"].as_str().unwrap().contains("exit 7"), "{got}");
    assert_eq!(got["cleanup"]["gpu_check"], "not checked");
    let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(
        prov["capture"]["instrumentation"],
        json!([{"name": "nvtx", "state": "on"}, {"name": "graphs", "state": "off"}])
    );
}

/// The flags of issue #22 through the plugin (the binary's twins): `--require-argv` and `--module` as lists,
/// `--strict-prebuilt` refusing a missing module before anything starts, and `--iteration-records`.
#[test]
fn serve_capture_engine_flags() {
    let Some(s) = setup("serve_capture_engine_flags") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = s.tmp.path();
    for (name, body) in [("used", "int used(void) { return 1; }\n"), ("unused", "int unused(void) { return 2; }\n")] {
        std::fs::write(dir.join(format!("{name}.c")), body).unwrap();
        let st = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC"])
            .arg(dir.join(format!("{name}.c")))
            .arg("-o")
            .arg(dir.join(format!("{name}.so")))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let (used, unused) = (dir.join("used.so"), dir.join("unused.so"));
    // --strict-prebuilt with a missing module: an error, no run folder
    let refused = dir.join("refused");
    let err = s.nu.error(&format!(
        "serve-capture --nsys '{nsys}' --health http://127.0.0.1:9/health --load 'true' --module ['{missing}' '{used}'] --strict-prebuilt --out '{out}' -- '{srv}' 9",
        nsys = s.nsys.display(),
        missing = dir.join("missing.so").display(),
        used = used.display(),
        out = refused.display(),
        srv = s.server.display(),
    ));
    assert!(err.contains("missing.so is missing"), "{err}");
    assert!(!refused.exists());
    // --engine sglang without its flags: refused, naming the flag
    let err = s.nu.error(&format!(
        "serve-capture --engine sglang --health http://127.0.0.1:9/health --load 'true' --out '{}' -- '{}' 9",
        refused.display(),
        s.server.display()
    ));
    assert!(err.contains("lacks --alignment-nvtx-ranges: required by --engine sglang"), "{err}");
    assert!(!refused.exists());

    let port = common::free_port();
    let out = dir.join("erun");
    let records = dir.join("records.jsonl");
    let got = s.nu.json(&format!(
        "serve-capture --nsys '{nsys}' --trace nvtx,osrt --grace 3sec --health http://127.0.0.1:{port}/health \
           --require-argv ['--load-module'] --module ['{used}' '{unused}'] --iteration-records '{records}' \
           --load '{srv} --client {port} 1' --out '{out}' -- '{srv}' {port} --load-module '{used}' \
         | {{outcome: $in.outcome, modules: $in.modules, iterations: $in.iterations, launcher: $in.launcher}}",
        nsys = s.nsys.display(),
        used = used.display(),
        unused = unused.display(),
        records = records.display(),
        srv = s.server.display(),
        out = out.display(),
    ));
    assert_eq!(got["outcome"], "ok", "{got}");
    assert_eq!(got["modules"][0]["loaded"], true, "{got}");
    assert_eq!(got["modules"][0]["loaded_by_pid"].as_array().unwrap().len(), 1);
    assert_eq!(got["modules"][1]["loaded"], false);
    assert_eq!(got["iterations"]["verdict"], "PASS");
    assert!(got["iterations"]["records"].as_u64().unwrap() >= 4);
    assert_eq!(got["launcher"]["required"][0]["flag"], "--load-module");
    assert!(out.join("iterations.json").is_file());
}
