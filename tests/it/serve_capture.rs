//! serve-capture against the real nsys 2023.4 (NSYS_BIN) and a real CPU-only HTTP server with NVTX ranges
//! (scripts/cpu/vibeserve_http.c, compiled here with gcc and the NVTX v3 headers shipped with nsys).
//! Tests that need nsys, gcc or the headers SKIP with a message when they are absent.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

struct Env {
    nsys: PathBuf,
    server: PathBuf,
    _dir: tempfile::TempDir,
}

/// Find `nvtx/include/nvtx3/nvToolsExt.h` in the nsys install (Debian layout or a plain nsys folder).
fn nvtx_include(nsys: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(nsys).ok()?;
    let mut dir = real.parent()?.to_path_buf();
    for _ in 0..4 {
        for cand in [
            dir.join("lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include"),
            dir.join("target-linux-x64/nvtx/include"),
            dir.join("nvtx/include"),
        ] {
            if cand.join("nvtx3/nvToolsExt.h").is_file() {
                return Some(cand);
            }
        }
        dir = dir.parent()?.to_path_buf();
    }
    None
}

fn env_or_skip(test: &str) -> Option<&'static Env> {
    static ENV: OnceLock<Option<Env>> = OnceLock::new();
    let e = ENV.get_or_init(|| {
        let nsys = common::nsys_or_skip("serve_capture")?;
        let Some(inc) = nvtx_include(&nsys) else {
            eprintln!("SKIP: no NVTX headers found in the nsys install {}", nsys.display());
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("vibeserve_http");
        let src = common::root().join("scripts/cpu/vibeserve_http.c");
        let out =
            StdCommand::new("gcc").args(["-O1", "-I"]).arg(&inc).arg(&src).arg("-o").arg(&server).arg("-ldl").output();
        match out {
            Ok(o) if o.status.success() => Some(Env { nsys, server, _dir: dir }),
            Ok(o) => panic!("gcc failed on {}: {}", src.display(), String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                eprintln!("SKIP: no gcc ({e})");
                None
            }
        }
    });
    if e.is_none() {
        eprintln!("SKIP {test}: needs nsys, gcc and the NVTX headers");
    }
    e.as_ref()
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&format!(":{port:04X}")) && c[3] == "0A"
        })
    })
}

/// Independently of serve-capture: is this recorded process (PID + start time) still alive?
fn still_alive(p: &Value) -> bool {
    let pid = p["pid"].as_i64().unwrap();
    let st = p["starttime_ticks"].as_u64().unwrap();
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let rest: Vec<&str> = text[text.rfind(')').unwrap() + 1..].split_whitespace().collect();
    rest[19].parse::<u64>().unwrap() == st && rest[0] != "Z"
}

fn assert_all_gone_and_port_free(doc: &Value, port: u16) {
    let procs = doc["processes"].as_array().unwrap();
    assert!(!procs.is_empty());
    for p in procs {
        assert!(!still_alive(p), "recorded process still alive: {p}");
        assert_eq!(p["gone"], true, "{p}");
    }
    assert_eq!(doc["cleanup"]["all_gone"], true);
    assert!(!listening(port), "port {port} still listening");
    assert_eq!(doc["cleanup"]["port_released"], true);
}

fn base_args(e: &Env, port: u16, out: &Path) -> Vec<String> {
    vec![
        "--nsys".into(),
        e.nsys.display().to_string(),
        "--trace".into(),
        "nvtx,osrt".into(),
        "--health".into(),
        format!("http://127.0.0.1:{port}/health"),
        "--models".into(),
        format!("http://127.0.0.1:{port}/v1/models"),
        "--grace".into(),
        "3".into(),
        "--out".into(),
        out.display().to_string(),
    ]
}

fn role<'a>(doc: &'a Value, role: &str) -> &'a Value {
    doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["role"] == role)
        .unwrap_or_else(|| panic!("no {role} in {doc}"))
}

#[test]
fn captures_a_cpu_server_with_a_time_window() {
    let Some(e) = env_or_skip("captures_a_cpu_server_with_a_time_window") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        // a 5 s delay leaves room for a slow start on a loaded CI machine (readiness takes ~1.3 s here)
        "--delay".into(),
        "5".into(),
        "--duration".into(),
        "3".into(),
        "--min-rep-bytes".into(),
        "100000".into(),
        "--warmup".into(),
        format!("{} --client {port} 0.3", e.server.display()),
        "--load".into(),
        format!("{} --client {port} 11", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let o = &common::serve_capture_run(&args, Duration::from_secs(240));
    let doc = common::one_doc(&o.stdout);
    // the lifecycle went through; gate-check says RETRY because a CPU-only capture has no CUDA data (G1, G3):
    // exit 1, as a RETRY must be
    assert_eq!(o.status.code(), Some(1), "{doc}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(doc["outcome"], "ok", "{doc}");
    assert!(doc["failures"].as_array().unwrap().is_empty());
    assert_eq!(doc["gate"]["verdict"], "RETRY");
    assert_eq!(doc["gate"]["retry"], serde_json::json!(["G1", "G3"]));
    assert_eq!(doc["window"]["mode"], "time");
    assert_eq!(doc["load"]["spans_window"], true);
    assert_eq!(doc["load"]["exit_code"], 0);
    assert_eq!(doc["warmup"]["exit_code"], 0);
    assert!(doc["warmup"]["ended_at_s"].as_f64().unwrap() < doc["window"]["start_est_s"].as_f64().unwrap());
    // nsys flags: env-free command, window flags, --kill=none added
    let argv: Vec<&str> = doc["nsys_argv"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(argv.contains(&"--delay=5") && argv.contains(&"--duration=3") && argv.contains(&"--kill=none"), "{argv:?}");
    // the processes: nsys, the server found under it, the clients launched by serve-capture (not by nsys)
    let prof = role(&doc, "profiler");
    let server = role(&doc, "server");
    assert_eq!(server["argv"][0], e.server.display().to_string());
    for c in ["warmup", "load"] {
        let p = role(&doc, c);
        assert_ne!(p["parent_pid"], prof["pid"], "{c} must not be a child of nsys");
        assert_eq!(p["parent_pid"], prof["parent_pid"], "{c} is launched by serve-capture itself");
    }
    let pids_dir = out.join("pids");
    let server_pid_file = std::fs::read_to_string(pids_dir.join("server.pid")).unwrap();
    assert!(server_pid_file.starts_with(&format!("{} ", server["pid"])));
    assert!(pids_dir.join("load.pid").is_file() && pids_dir.join("profiler.pid").is_file());
    assert_all_gone_and_port_free(&doc, port);
    // the capture: ranges found in the export, independently of serve-capture's summary
    let sqlite = out.join("capture.sqlite");
    assert!(out.join("capture.nsys-rep").is_file() && sqlite.is_file());
    let ex = nsyskit::export::Export::open(&sqlite).unwrap();
    let n: i64 = ex
        .conn()
        .query_row(
            // the last iteration, if nsys closed it at the capture's end, is no occurrence (docs/sqlite-ranges.md)
            "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'vibeserve.engine.iteration' AND end IS NOT NULL AND end < (SELECT duration FROM ANALYSIS_DETAILS)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(n > 100, "only {n} iterations in the 3 s window");
    let ranges = doc["capture"]["nvtx_ranges"].as_array().unwrap();
    let it = ranges.iter().find(|r| r["name"] == "vibeserve.engine.iteration").unwrap();
    assert_eq!(it["count"].as_i64().unwrap(), n);
    let req = ranges.iter().find(|r| r["name"] == "vibeserve.request").unwrap()["count"].as_i64().unwrap();
    // 4 iterations per request; a request cut by a window edge keeps only some of its iterations
    assert!((n - 4 * req).abs() <= 8, "{n} iterations vs {req} requests");
    // the window holds part of the load only: fewer requests than the client made
    let d = &doc["diagnostic"];
    assert_eq!(d["diagnostic_only"], true);
    assert!(d["requests"].as_i64().unwrap() > req, "{d}");
    // gate-check, sqlite-ranges and the bundle in the run folder
    let read = |f: &str| -> Value { serde_json::from_slice(&std::fs::read(out.join(f)).unwrap()).unwrap() };
    let gate = read("gate.json");
    common::assert_valid(&gate);
    assert_eq!(gate["verdict"], "RETRY");
    let rdoc = read("ranges.json");
    common::assert_valid(&rdoc);
    let rq = rdoc["ranges"].as_array().unwrap().iter().find(|r| r["label"] == "vibeserve.request").unwrap();
    assert_eq!(rq["occurrences"].as_i64().unwrap(), req);
    let bundle = read("bundle.json");
    assert_eq!(bundle["serve_capture"]["outcome"], "ok");
    assert_eq!(bundle["kernel_profile"]["gates"]["verdict"], "RETRY");
    assert_eq!(bundle["provenance"]["schema"], "nsyskit.provenance/v1");
    // provenance written at start, the document kept in the run folder
    let prov = read("provenance.json");
    common::assert_valid(&prov);
    assert_eq!(prov["capture"]["server_cmd"], format!("{} {port}", e.server.display()));
    assert!(prov["checks"].as_array().unwrap().iter().any(|c| c["name"] == "port" && c["status"] == "pass"), "{prov}");
    let kept: Value = serde_json::from_slice(&std::fs::read(out.join("serve-capture.json")).unwrap()).unwrap();
    common::assert_valid(&kept);
    assert_eq!(kept["outcome"], "ok");
}

/// Range-bounded window on CPU: `--capture-range=nvtx` on the server's start/end range `vibeserve.capture`,
/// opened and closed by the load client (`/start_profile`, `/stop_profile`). nsys only honours unregistered NVTX
/// strings as capture triggers with NSYS_NVTX_PROFILER_REGISTER_ONLY=0, set with --env on the nsys process.
#[test]
fn captures_a_cpu_server_with_a_range_window() {
    let Some(e) = env_or_skip("captures_a_cpu_server_with_a_range_window") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        "--capture-range".into(),
        "nvtx".into(),
        "--flags".into(),
        "--nvtx-capture=vibeserve.capture".into(),
        "--env".into(),
        "NSYS_NVTX_PROFILER_REGISTER_ONLY=0".into(),
        "--min-rep-bytes".into(),
        "100000".into(),
        "--warmup".into(),
        format!("{} --client {port} 0.3", e.server.display()),
        "--load".into(),
        format!("{} --client {port} 4 --profile-range", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let o = &common::serve_capture_run(&args, Duration::from_secs(240));
    let doc = common::one_doc(&o.stdout);
    assert_eq!(doc["outcome"], "ok", "{doc}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "gate-check RETRY on a CPU-only capture");
    assert_eq!(doc["window"]["mode"], "range");
    assert_eq!(doc["window"]["capture_range_end"], "stop");
    assert_eq!(doc["env_names"], serde_json::json!(["NSYS_NVTX_PROFILER_REGISTER_ONLY"]));
    let argv: Vec<&str> = doc["nsys_argv"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(argv.contains(&"--capture-range=nvtx") && argv.contains(&"--capture-range-end=stop"), "{argv:?}");
    assert!(
        !argv.iter().any(|a| a.contains("NSYS_NVTX_PROFILER_REGISTER_ONLY")),
        "env goes on the nsys process, not its argv"
    );
    let ranges = doc["capture"]["nvtx_ranges"].as_array().unwrap();
    let count =
        |name: &str| ranges.iter().find(|r| r["name"] == name).map(|r| r["count"].as_i64().unwrap()).unwrap_or(0);
    assert_eq!(count("vibeserve.capture"), 1, "{ranges:?}");
    let inside = count("vibeserve.request");
    let total = doc["diagnostic"]["requests"].as_i64().unwrap();
    assert!(inside > 0 && inside < total, "the range holds part of the load: {inside} of {total} requests");
    assert_all_gone_and_port_free(&doc, port);
}

#[test]
fn server_never_ready_fails_and_cleans_up() {
    let Some(e) = env_or_skip("server_never_ready_fails_and_cleans_up") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        "--ready-timeout".into(),
        "3".into(),
        "--load".into(),
        format!("{} --client {port} 2", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
        "--never-ready".into(),
    ]);
    let o = &common::serve_capture_run(&args, Duration::from_secs(180));
    let doc = common::one_doc(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{doc}");
    assert_eq!(doc["outcome"], "failed");
    assert_eq!(doc["failures"][0]["stage"], "ready");
    let reason = doc["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("not ready after 3 s") && reason.contains("answered 503"), "{reason}");
    assert!(doc["load"].is_null(), "no load client without readiness");
    assert_eq!(role(&doc, "server")["signals_sent"][0], "SIGTERM");
    assert_all_gone_and_port_free(&doc, port);
}

#[test]
fn server_dying_mid_run_is_a_failure() {
    let Some(e) = env_or_skip("server_dying_mid_run_is_a_failure") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        "--load".into(),
        format!("{} --client {port} 20", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
        "--die-after".into(),
        "30".into(),
    ]);
    let t = Instant::now();
    let o = &common::serve_capture_run(&args, Duration::from_secs(180));
    let doc = common::one_doc(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{doc}");
    assert_eq!(doc["failures"][0]["stage"], "server", "{doc}");
    assert!(doc["failures"][0]["reason"].as_str().unwrap().contains("mid-run"));
    let server = role(&doc, "server");
    assert_eq!(server["ended"], "gone");
    assert!(server["signals_sent"].as_array().unwrap().is_empty(), "it died by itself: {server}");
    // the 20 s load client is stopped early rather than waited for
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert_all_gone_and_port_free(&doc, port);
    // nsys still wrote the report of what happened, with the 30 requests
    let req =
        doc["capture"]["nvtx_ranges"].as_array().unwrap().iter().find(|r| r["name"] == "vibeserve.request").unwrap();
    assert_eq!(req["count"], 30);
}

#[test]
fn failing_load_client_is_a_failure() {
    let Some(e) = env_or_skip("failing_load_client_is_a_failure") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        "--load".into(),
        format!("{} --client {port} 2 /no-such-endpoint", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let o = &common::serve_capture_run(&args, Duration::from_secs(180));
    let doc = common::one_doc(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{doc}");
    assert_eq!(doc["failures"][0]["stage"], "load", "{doc}");
    assert_eq!(doc["load"]["exit_code"], 1);
    let stderr = std::fs::read_to_string(out.join("load.stderr")).unwrap();
    assert!(stderr.contains("404"), "{stderr}");
    // the server was alive and serve-capture stopped it
    assert_eq!(role(&doc, "server")["signals_sent"][0], "SIGTERM");
    assert_all_gone_and_port_free(&doc, port);
}

#[test]
fn sigint_mid_run_cleans_up_and_exits_130() {
    let Some(e) = env_or_skip("sigint_mid_run_cleans_up_and_exits_130") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend([
        "--load".into(),
        format!("{} --client {port} 60", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let bin = assert_cmd::cargo::cargo_bin("serve-capture");
    let child = StdCommand::new(bin)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !out.join("pids/load.pid").exists() {
        assert!(t.elapsed() < Duration::from_secs(60), "the load client never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Ctrl-C: SIGINT to serve-capture only
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    let doc = common::one_doc(&o.stdout);
    assert_eq!(o.status.code(), Some(130), "{doc}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(doc["outcome"], "interrupted");
    assert_eq!(doc["cleanup"]["stop_signal"], 2);
    assert_eq!(doc["failures"][0]["stage"], "interrupted");
    assert_eq!(role(&doc, "load")["signals_sent"][0], "SIGTERM");
    assert!(t.elapsed() < Duration::from_secs(50), "cleanup took {:?}", t.elapsed());
    assert_all_gone_and_port_free(&doc, port);
}

/// The SIGINT/SIGTERM/SIGHUP handlers of this (test) process: bits of `SigCgt` in /proc/self/status.
fn caught_stop_signals() -> Vec<i32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).unwrap().trim();
    let mask = u64::from_str_radix(hex, 16).unwrap();
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].into_iter().filter(|s| mask & (1u64 << (s - 1)) != 0).collect()
}

/// The library with a caller-owned stop flag (what the Nushell plugin passes): setting it mid-run takes the
/// SIGINT cleanup path, and no process-wide signal handler is installed. The run folder is given relative to
/// `cwd`, as the plugin passes Nushell's current folder.
#[test]
fn stop_flag_interrupts_like_sigint_without_signal_handlers() {
    let Some(e) = env_or_skip("stop_flag_interrupts_like_sigint_without_signal_handlers") else { return };
    let _g = common::nsys_guard();
    use nsyskit::serve_capture::{run, ServeCaptureOptions, StopFlag, StopSource};
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let mut o = ServeCaptureOptions::new(
        vec![e.server.display().to_string(), port.to_string()],
        format!("http://127.0.0.1:{port}/health"),
        vec![e.server.display().to_string(), "--client".into(), port.to_string(), "60".into()],
        "run".into(),
    );
    o.nsys = Some(e.nsys.clone());
    o.trace = "nvtx,osrt".into();
    o.grace = Duration::from_secs(3);
    o.cwd = Some(tmp.path().to_path_buf());
    let stop = StopFlag::new();
    o.stop = StopSource::Flag(stop.clone());
    let out = tmp.path().join("run");
    let before = caught_stop_signals();
    let t = Instant::now();
    let doc = std::thread::scope(|s| {
        let h = s.spawn(|| run(&o));
        while !out.join("pids/load.pid").exists() {
            assert!(t.elapsed() < Duration::from_secs(60) && !h.is_finished(), "the load client never started");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        stop.interrupt();
        h.join().unwrap().unwrap()
    });
    let doc = serde_json::to_value(&doc).unwrap();
    common::assert_valid(&doc);
    assert_eq!(doc["outcome"], "interrupted", "{doc}");
    assert_eq!(doc["cleanup"]["stop_signal"], 2);
    assert_eq!(doc["failures"][0]["stage"], "interrupted");
    assert_eq!(doc["out_dir"], out.display().to_string(), "relative --out resolved against cwd");
    assert_eq!(role(&doc, "load")["signals_sent"][0], "SIGTERM");
    assert!(t.elapsed() < Duration::from_secs(50), "cleanup took {:?}", t.elapsed());
    assert_all_gone_and_port_free(&doc, port);
    assert_eq!(caught_stop_signals(), before, "a StopSource::Flag run installs no signal handler");
    assert!(!before.contains(&libc::SIGINT), "no test of this binary runs the library with process signals");
}

/// A stand-in nsys (a shell script) whose `profile --help` lacks the mandatory flags: refused before anything
/// starts. Runs without the real nsys.
#[test]
fn refuses_when_nsys_lacks_mandatory_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("nsys");
    std::fs::write(&fake, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'NVIDIA Nsight Systems version 2020.1.1'; exit 0; fi\necho '\t-t, --trace='\necho '\t-o, --output='\necho '\t-c, --capture-range='\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = tmp.path().join("run");
    let base = |extra: &[&str]| {
        let mut v: Vec<String> = vec![
            "--nsys".into(),
            fake.display().to_string(),
            "--health".into(),
            "http://127.0.0.1:1/health".into(),
            "--load".into(),
            "true".into(),
            "--out".into(),
            out.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let o = Command::cargo_bin("serve-capture").unwrap().args(base(&["--", "/bin/sleep", "30"])).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused") && err.contains("--cuda-graph-trace"), "{err}");
    assert!(o.stdout.is_empty());
    let o = Command::cargo_bin("serve-capture")
        .unwrap()
        .args(base(&["--trace", "nvtx", "--cuda-child", "--", "/bin/sleep", "30"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--trace-fork-before-exec"));
    // env on the command line of the profiled program is refused
    let o = Command::cargo_bin("serve-capture")
        .unwrap()
        .args(base(&["--trace", "nvtx", "--", "env", "A=1", "/bin/sleep", "30"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--env NAME=VALUE"));
    // a non-empty run folder is refused
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("x"), "").unwrap();
    let o = Command::cargo_bin("serve-capture")
        .unwrap()
        .args(base(&["--trace", "nvtx", "--", "/bin/sleep", "30"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
    // bad quoting in a command
    let mut a = base(&["--trace", "nvtx", "--", "/bin/sleep", "30"]);
    a[5] = "curl 'x".into();
    let o = Command::cargo_bin("serve-capture").unwrap().args(a).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--load"));
}

#[test]
fn help_has_a_runnable_example() {
    let o = Command::cargo_bin("serve-capture").unwrap().arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let h = String::from_utf8_lossy(&o.stdout);
    assert!(h.contains("Example") && h.contains("--health") && h.contains("130/143"), "{h}");
}

/// The real run of scripts/gpu-serve-capture on the H200 (nsys 2025.3.1, fixtures/serve-capture-gpu): its
/// document matches today's schema, and the summary serve-capture wrote is reproduced from the committed export.
#[test]
fn the_h200_run_document_matches_its_export() {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(common::fixture("serve-capture-gpu/serve-capture.json")).unwrap())
            .unwrap();
    common::assert_valid(&doc);
    assert_eq!(doc["outcome"], "ok");
    assert_eq!(doc["window"]["mode"], "range");
    let argv: Vec<&str> = doc["nsys_argv"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(argv.contains(&"--cuda-graph-trace=node") && argv.contains(&"--capture-range=cudaProfilerApi"), "{argv:?}");
    for p in doc["processes"].as_array().unwrap() {
        assert_eq!(p["gone"], true, "{p}");
        if p["role"] == "load" || p["role"] == "warmup" {
            assert_eq!(p["parent_pid"], role(&doc, "profiler")["parent_pid"], "clients are serve-capture's children");
        }
    }
    assert_eq!(doc["diagnostic"]["diagnostic_only"], true);
    let ex = nsyskit::export::Export::open(&common::fixture("nsys-2025.3.1/serve_node.sqlite")).unwrap();
    let (ranges, total, kernels) = nsyskit::serve_capture::summarize_export(&ex).unwrap();
    assert_eq!(kernels, doc["capture"]["kernel_rows"].as_u64().unwrap());
    assert_eq!(total, doc["capture"]["nvtx_range_total"].as_u64().unwrap());
    assert_eq!(serde_json::to_value(&ranges).unwrap(), doc["capture"]["nvtx_ranges"]);
    // node-level tracing: the replayed graph kernels are there, each with its graph node id
    let graph_kernels: i64 = ex
        .conn()
        .query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert!(graph_kernels > 1000, "{graph_kernels}");
}

/// Run the serve-capture binary with `args`; (exit code, document, stderr).
/// One serve-capture run ([`common::serve_capture_run_env`]: tried again when nsys 2023.4 lost its own agent, as a
/// fresh clone's run of `worker_dying_mid_load_rejects_the_sample` once did at the ready stage, 0.35 s after the
/// start: "Connection to Agent lost. This is most likely a bug").
fn serve(args: &[String], env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
    let o = common::serve_capture_run_env(args, env, Duration::from_secs(240));
    (o.status.code(), common::one_doc(&o.stdout), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn script(path: &Path, body: &str) -> PathBuf {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// A server whose worker child ends mid-load while the server itself keeps running (the server reaps it at
/// once, as an engine's process manager does): the sample is rejected with the worker's PID, command and exit
/// status, for a non-zero exit and for a signal; the run folder is terminal (`run-state` failed); without a GPU
/// the GPU release check says "not checked", never "passed".
#[test]
fn worker_dying_mid_load_rejects_the_sample() {
    let Some(e) = env_or_skip("worker_dying_mid_load_rejects_the_sample") else { return };
    let _g = common::nsys_guard();
    for (extra, status) in [(vec!["--worker-exit", "7"], "exit 7"), (vec!["--worker-signal", "11"], "signal SIGSEGV")] {
        let port = free_port();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let mut args = base_args(e, port, &out);
        args.extend(["--nvidia-smi".into(), tmp.path().join("no-nvidia-smi").display().to_string()]);
        args.extend([
            "--load".into(),
            format!("{} --client {port} 8", e.server.display()),
            "--".into(),
            e.server.display().to_string(),
            port.to_string(),
        ]);
        args.extend(["--worker", "--worker-dies-after", "40"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        let t = Instant::now();
        let (code, doc, err) = serve(&args, &[]);
        common::assert_valid(&doc);
        assert_eq!(code, Some(1), "{doc}\n{err}");
        assert_eq!(doc["outcome"], "failed");
        let f = &doc["failures"][0];
        assert_eq!(f["stage"], "worker", "{doc}");
        let worker = role(&doc, "server-child");
        let reason = f["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("worker pid {} ", worker["pid"]))
                && reason.contains("--worker-dies-after 40")
                && reason.contains(status),
            "{reason}"
        );
        assert!(reason.contains(&format!("parent pid {}", role(&doc, "server")["pid"])), "{reason}");
        assert_eq!(worker["ended"], status);
        assert!(worker["signals_sent"].as_array().unwrap().is_empty(), "it ended by itself: {worker}");
        // the 8 s load is cut short, the server (alive until the cleanup) was stopped by serve-capture
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
        assert_eq!(role(&doc, "server")["signals_sent"][0], "SIGTERM");
        assert_all_gone_and_port_free(&doc, port);
        assert_eq!(doc["cleanup"]["gpu_check"], "not checked");
        assert!(doc["cleanup"]["gpu_reason"].as_str().unwrap().contains("no GPU state at start"), "{doc}");
        assert!(std::fs::read_to_string(out.join("run-state")).unwrap().starts_with("failed "));
    }
}

/// A replaying nvidia-smi (the real H200 CSV of fixtures/nvidia-smi) that answers "before" until the run has
/// recorded its server (OUT/pids/server.pid exists), then "after".
fn phased_smi(dir: &Path, out: &Path, before: (&str, &str), after: (&str, &str)) -> PathBuf {
    let f = common::root().join("fixtures/nvidia-smi");
    let q = nsyskit::nsys_resolve::GPU_QUERY;
    let a = nsyskit::nsys_resolve::APPS_QUERY;
    std::fs::create_dir_all(dir).unwrap();
    script(
        &dir.join("nvidia-smi"),
        &format!(
            "#!/bin/sh\nif [ -e '{pids}/server.pid' ]; then G='{ga}'; A='{aa}'; else G='{gb}'; A='{ab}'; fi\ncase \"$*\" in\n  '--query-gpu={q} --format=csv') cat \"$G\";;\n  '--query-compute-apps={a} --format=csv') cat \"$A\";;\n  --version) cat '{v}';;\n  *) echo \"Invalid combination of input arguments: $*\"; exit 2;;\nesac\n",
            pids = out.join("pids").display(),
            gb = f.join(before.0).display(),
            ab = f.join(before.1).display(),
            ga = f.join(after.0).display(),
            aa = f.join(after.1).display(),
            v = f.join("version.txt").display(),
        ),
    )
}

/// `--gpu 0`: CUDA_VISIBLE_DEVICES=0 reaches the server (through nsys) and the clients, the pin records the
/// physical index and UUID; the GPU release check passes when memory used is back at its level at start, fails
/// when it is not (the real "foreign process" CSV after shutdown), and a foreign PID at start fails the preflight.
#[test]
fn gpu_pin_and_gpu_release_check() {
    let Some(e) = env_or_skip("gpu_pin_and_gpu_release_check") else { return };
    let _g = common::nsys_guard();
    let idle = ("query_gpu_idle.csv", "query_compute_apps_idle.csv");
    let foreign = ("query_gpu_foreign.csv", "query_compute_apps_foreign.csv");
    let uuid = "GPU-d88ae72a-a315-b2b5-471e-023b73e1019d";
    for (after, want) in [(idle, "passed"), (foreign, "failed")] {
        let port = free_port();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let smi = phased_smi(&tmp.path().join("smi"), &out, idle, after);
        // the server wrapper prints the CUDA_VISIBLE_DEVICES it got (into nsys.log), then runs the server (its child)
        let srv = script(
            &tmp.path().join("srv"),
            &format!("#!/bin/sh\necho \"server CVD=$CUDA_VISIBLE_DEVICES\" >&2\n{} \"$@\"\n", e.server.display()),
        );
        let cvd_file = tmp.path().join("client-cvd");
        let mut args = base_args(e, port, &out);
        args.extend(["--gpu".into(), "0".into(), "--nvidia-smi".into(), smi.display().to_string()]);
        args.extend([
            "--load".into(),
            format!(
                "sh -c 'echo $CUDA_VISIBLE_DEVICES > {}; {} --client {port} 1'",
                cvd_file.display(),
                e.server.display()
            ),
        ]);
        args.extend(["--".into(), srv.display().to_string(), port.to_string()]);
        let (code, doc, err) = serve(&args, &[("CUDA_VISIBLE_DEVICES", "3")]);
        common::assert_valid(&doc);
        assert_eq!(code, Some(1), "{doc}\n{err}");
        assert_eq!(doc["gpu_pin"], serde_json::json!({"index": 0, "uuid": uuid, "cuda_visible_devices": "0"}));
        assert_eq!(
            std::fs::read_to_string(&cvd_file).unwrap_or_else(|e| panic!("{e}: {doc}\n{err}")).trim(),
            "0",
            "the client runs pinned"
        );
        assert!(
            std::fs::read_to_string(out.join("nsys.log")).unwrap().contains("server CVD=0"),
            "the server runs pinned"
        );
        let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
        assert_eq!(prov["gpu"]["targets"], serde_json::json!([0]));
        assert_eq!(prov["gpu"]["target_source"], "--gpu");
        assert_eq!(prov["gpu"]["gpus"][0]["uuid"], uuid);
        let c = &doc["cleanup"];
        assert_eq!(c["gpu_check"], want, "{doc}");
        assert_eq!(c["gpu_memory_before_mib"], 0);
        if want == "passed" {
            assert_eq!(doc["outcome"], "ok", "{doc}");
            assert_eq!(c["gpu_memory_after_mib"], 0);
        } else {
            assert_eq!(doc["outcome"], "failed");
            assert_eq!(c["gpu_memory_after_mib"], 10767);
            let f = doc["failures"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["stage"] == "cleanup")
                .expect("a cleanup failure");
            assert!(f["reason"].as_str().unwrap().contains("10767 MiB after shutdown, 0 MiB at start"), "{f}");
        }
        assert_eq!(doc["gpu_end"]["gpus"][0]["memory_used_mib"], if want == "passed" { 0 } else { 10767 });
    }
    // a foreign PID on the pinned GPU at start: refused by the preflight, nothing started
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let smi = phased_smi(&tmp.path().join("smi"), &out, foreign, foreign);
    let mut args = base_args(e, port, &out);
    args.extend(["--gpu".into(), "0".into(), "--nvidia-smi".into(), smi.display().to_string()]);
    args.extend(["--load".into(), "true".into(), "--".into(), e.server.display().to_string(), port.to_string()]);
    let (code, doc, _) = serve(&args, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(doc["failures"][0]["stage"], "preflight");
    assert!(
        doc["failures"][0]["reason"].as_str().unwrap().contains("pid 433 (python3) uses 10758 MiB on GPU 0"),
        "{doc}"
    );
    assert!(doc["processes"].as_array().unwrap().is_empty());
}

/// A CUDA injector already in the server's environment (a wrapper exports CUDA_INJECTION64_PATH before starting
/// the server, which replaces nsys's own): with CUDA traced the run stops before the warmup, naming it.
#[test]
fn foreign_cuda_injection_in_the_server_environment_is_refused() {
    let Some(e) = env_or_skip("foreign_cuda_injection_in_the_server_environment_is_refused") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let srv = script(
        &tmp.path().join("zymserve"),
        &format!(
            "#!/bin/sh\nexport CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace.so\n{} \"$@\"\n",
            e.server.display()
        ),
    );
    let mut args = base_args(e, port, &out);
    args[3] = "cuda,nvtx,osrt".into();
    args.extend([
        "--load".into(),
        format!("{} --client {port} 2", e.server.display()),
        "--".into(),
        srv.display().to_string(),
        port.to_string(),
    ]);
    let (code, doc, err) = serve(&args, &[]);
    assert_eq!(code, Some(1), "{doc}\n{err}");
    assert_eq!(doc["failures"][0]["stage"], "injection", "{doc}");
    assert!(
        doc["failures"][0]["reason"].as_str().unwrap().contains("CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace.so"),
        "{doc}"
    );
    assert_eq!(doc["injection"][0]["value"], "/opt/zymtrace/libzymtrace.so");
    assert_eq!(doc["injection"][0]["role"], "server-child", "the wrapper's child, the engine itself");
    assert_eq!(doc["injection"][0]["blocks_cuda_tracing"], true);
    assert!(doc["load"].is_null(), "nothing was driven");
    assert_all_gone_and_port_free(&doc, port);
}

/// `--api-key` on the server command and a secret `--env` value appear nowhere serve-capture writes: not in
/// stdout, stderr, provenance (flags_argv), serve-capture.json, gate.json, ranges.json, bundle.json, pids/ or
/// the logs. (The report and its export are nsys's evidence: nsys records the argv and the environment itself.)
#[test]
fn secrets_are_redacted_in_every_document_and_message() {
    let Some(e) = env_or_skip("secrets_are_redacted_in_every_document_and_message") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend(
        ["--delay", "2", "--duration", "1", "--min-rep-bytes", "1000", "--env", "API_TOKEN=tok-SECRET456"]
            .map(String::from),
    );
    args.extend(["--warmup".into(), format!("{} --client {port} 0.2", e.server.display())]);
    args.extend(["--load".into(), format!("{} --client {port} 4", e.server.display())]);
    args.extend([
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
        "--api-key".into(),
        "sk-test-SECRET123".into(),
    ]);
    let o = common::serve_capture_run(&args, Duration::from_secs(240));
    let doc = common::one_doc(&o.stdout);
    assert_eq!(doc["outcome"], "ok", "{doc}");
    for (what, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let t = String::from_utf8_lossy(bytes);
        assert!(!t.contains("SECRET"), "{what}: {t}");
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("'<redacted>'"), "the message shows what was redacted");
    let mut checked = 0;
    for f in walk(&out) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name == "capture.nsys-rep" || name == "capture.sqlite" {
            continue;
        }
        let b = std::fs::read(&f).unwrap();
        assert!(!String::from_utf8_lossy(&b).contains("SECRET"), "{}", f.display());
        checked += 1;
    }
    assert!(checked >= 12, "{checked} files");
    let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
    assert!(prov["capture"]["flags_argv"].as_array().unwrap().iter().any(|w| w == "<redacted>"), "{prov}");
    let bundle: Value = serde_json::from_slice(&std::fs::read(out.join("bundle.json")).unwrap()).unwrap();
    assert!(bundle["serve_capture"]["nsys_argv"].as_array().unwrap().iter().any(|w| w == "<redacted>"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

/// A range capture whose range never opens (the load does not call /start_profile): nsys exits 143 with no
/// report when the server is stopped, and the failure names that cause (measured, nsys 2023.4.4).
#[test]
fn a_range_that_never_opened_is_named_as_the_cause_of_no_report() {
    let Some(e) = env_or_skip("a_range_that_never_opened_is_named_as_the_cause_of_no_report") else { return };
    let _g = common::nsys_guard();
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend(
        [
            "--capture-range",
            "nvtx",
            "--flags",
            "--nvtx-capture=vibeserve.capture",
            "--env",
            "NSYS_NVTX_PROFILER_REGISTER_ONLY=0",
        ]
        .map(String::from),
    );
    args.extend([
        "--load".into(),
        format!("{} --client {port} 1", e.server.display()),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let (code, doc, err) = serve(&args, &[]);
    assert_eq!(code, Some(1), "{doc}\n{err}");
    let f =
        doc["failures"].as_array().unwrap().iter().find(|f| f["stage"] == "capture").unwrap_or_else(|| panic!("{doc}"));
    let reason = f["reason"].as_str().unwrap();
    assert!(
        reason.contains("nsys (exit 143) wrote no report") && reason.contains("the capture range never opened"),
        "{reason}"
    );
    assert_all_gone_and_port_free(&doc, port);
}

/// gate-check, report and capture-compare refuse a run folder that never reached a terminal state (serve-capture
/// killed mid-run: `run-state` still says running, its PID gone), and take it once it is terminal.
#[test]
fn unfinished_run_folders_are_refused_by_the_analysis_tools() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(run.join("pids")).unwrap();
    std::fs::copy(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), run.join("capture.sqlite")).unwrap();
    std::fs::write(run.join("provenance.json"), "{}").unwrap();
    // a PID that is certainly not serve-capture: a finished child's
    let mut c = StdCommand::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    std::fs::write(run.join("run-state"), format!("running {dead}\n")).unwrap();
    assert!(matches!(nsyskit::serve_capture::run_state(&run), nsyskit::serve_capture::RunState::Unfinished(_)));
    let sql = run.join("capture.sqlite").display().to_string();
    for (bin, args) in [
        ("gate-check", vec![sql.clone()]),
        ("report", vec![sql.clone()]),
        (
            "capture-compare",
            vec![sql.clone(), common::fixture("nsys-2025.3.1/gpu_full_node.sqlite").display().to_string()],
        ),
    ] {
        let o = Command::cargo_bin(bin).unwrap().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bin}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("never reached a terminal state") && err.contains(&run.display().to_string()),
            "{bin}: {err}"
        );
        assert!(o.stdout.is_empty());
    }
    std::fs::write(run.join("run-state"), "ok 1\n").unwrap();
    let o = Command::cargo_bin("gate-check").unwrap().arg(&sql).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    // a folder serve-capture has nothing to do with is not judged
    assert_eq!(nsyskit::serve_capture::run_state(tmp.path()), nsyskit::serve_capture::RunState::NotARun);
}

/// The real worker-death and GPU-release runs on the H200 (fixtures/serve-capture-gpu/checks, nsys 2025.3.1).
#[test]
fn the_h200_checks_documents() {
    let read = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(common::fixture(&format!("serve-capture-gpu/checks/{f}"))).unwrap())
            .unwrap()
    };
    let (rel, prov, wrk) =
        (read("release.serve-capture.json"), read("release.provenance.json"), read("worker.serve-capture.json"));
    for d in [&rel, &prov, &wrk] {
        common::assert_valid(d);
    }
    assert_eq!(rel["outcome"], "ok");
    assert_eq!(rel["cleanup"]["gpu_check"], "passed");
    assert_eq!(rel["gpu_pin"]["index"], 0);
    assert_eq!(rel["gpu_pin"]["uuid"], prov["gpu"]["gpus"][0]["uuid"]);
    assert_eq!(prov["gpu"]["target_source"], "--gpu");
    assert_eq!(prov["capture"]["instrumentation"], serde_json::json!([{"name": "nvtx", "state": "on"}]));
    for g in [&prov["gpu"]["gpus"][0], &rel["gpu_end"]["gpus"][0]] {
        assert_eq!(g["clocks_event_reasons_field"], "clocks_event_reasons.active");
        assert!(g["clocks_event_reasons_active"].as_str().unwrap().starts_with("0x"));
        assert_eq!(
            (g["app_clock_graphics_mhz"].as_u64(), g["app_clock_memory_mhz"].as_u64()),
            (Some(1980), Some(3201))
        );
    }
    assert!(rel["processes"].as_array().unwrap().iter().all(|p| p["gone"] == true));
    assert_eq!(wrk["outcome"], "failed");
    assert_eq!(wrk["failures"][0]["stage"], "worker");
    let w = wrk["processes"].as_array().unwrap().iter().find(|p| p["ended"] == "exit 7").expect("the worker that died");
    assert_eq!(w["role"], "server-child");
    assert!(w["signals_sent"].as_array().unwrap().is_empty());
    let reason = wrk["failures"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("worker pid {} ", w["pid"]))
            && reason.contains("exit 7")
            && reason.contains("--multiprocessing-fork"),
        "{reason}"
    );
    assert_eq!(wrk["cleanup"]["gpu_check"], "passed");
}

/// Provenance at start: `--engine-repo` (revision, dirty state), `--instrumentation`, and `--shm`: a stale
/// shared-memory segment left by an earlier run fails the preflight (nothing started), named in the reason.
#[test]
fn provenance_records_engine_revision_switch_and_stale_shm() {
    let Some(e) = env_or_skip("provenance_records_engine_revision_switch_and_stale_shm") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("engine");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        assert!(
            StdCommand::new("git").arg("-C").arg(&repo).args(args).output().unwrap().status.success(),
            "git {args:?}"
        )
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("engine.py"), "print(1)\n").unwrap();
    git(&["add", "."]);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]);
    std::fs::write(repo.join("engine.py"), "print(2)\n").unwrap();
    let seg = format!("/dev/shm/nsyskit_test_stale_{}", std::process::id());
    std::fs::write(&seg, b"x").unwrap();
    let port = free_port();
    let out = tmp.path().join("run");
    let mut args = base_args(e, port, &out);
    args.extend(["--engine-repo".into(), repo.display().to_string(), "--instrumentation".into(), "nvtx=on".into()]);
    args.extend([
        "--shm".into(),
        "nsyskit_test_stale_*".into(),
        "--load".into(),
        "true".into(),
        "--".into(),
        e.server.display().to_string(),
        port.to_string(),
    ]);
    let (code, doc, err) = serve(&args, &[]);
    std::fs::remove_file(&seg).unwrap();
    assert_eq!(code, Some(1), "{doc}\n{err}");
    assert_eq!(doc["failures"][0]["stage"], "preflight");
    assert!(doc["failures"][0]["reason"].as_str().unwrap().contains(&seg), "{doc}");
    assert!(doc["processes"].as_array().unwrap().is_empty(), "nothing started");
    let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["repo"]["dirty"], true);
    assert_eq!(prov["repo"]["changes"], serde_json::json!([" M engine.py"]));
    assert_eq!(prov["repo"]["revision"].as_str().unwrap().len(), 40);
    assert_eq!(prov["capture"]["instrumentation"], serde_json::json!([{"name": "nvtx", "state": "on"}]));
    assert_eq!(prov["shm"]["stale"], 1);
    assert!(std::fs::read_to_string(out.join("run-state")).unwrap().starts_with("failed "));
}

/// The facts behind serve-capture's "no NVTX range" message, on the real exports of a Python `nvtx` 0.2.17 and
/// 0.2.10 run under nsys 2023.4.4 (fixtures committed by the verdicts work; SKIP until they are merged).
#[test]
fn no_nvtx_range_facts_on_the_real_pynvtx_exports() {
    let bad = common::root().join("fixtures/nsys-2023.4.4/cpu_pynvtx_0_2_17.sqlite");
    let good = common::root().join("fixtures/nsys-2023.4.4/cpu_pynvtx_0_2_10.sqlite");
    if !bad.is_file() || !good.is_file() {
        eprintln!("SKIP no_nvtx_range_facts_on_the_real_pynvtx_exports: {} not there yet", bad.display());
        return;
    }
    let ex = nsyskit::export::Export::open(&bad).unwrap();
    let (other, msg) = nsyskit::export::nvtx_no_range_facts(&ex).unwrap();
    assert_eq!(other, 1, "one domain-creation row");
    assert!(msg.unwrap().contains("NVTX binary payload extension is incompatible"));
    assert_eq!(nsyskit::serve_capture::summarize_export(&ex).unwrap().1, 0, "no closed range");
    let ex = nsyskit::export::Export::open(&good).unwrap();
    assert_eq!(nsyskit::export::nvtx_no_range_facts(&ex).unwrap().1, None);
    assert!(nsyskit::serve_capture::summarize_export(&ex).unwrap().1 > 100);
}

/// Issue 39 (B28, B29, B34, A13; B40, B43, B73): the workload record. Two real CPU captures that differ in the
/// stated concurrency, the server's `--attention-backend`, `--enforce-eager` and iteration records:
/// serve-capture writes `provenance.workload` (the question — the run without one is warned —, the client
/// command, rate, concurrency, seed, clock policy, patch identity), and capture-compare refuses the pair on
/// `concurrency`, `backend`, `graph_mode` and `iteration_records` (exit 1), marking the eager one "cross-check
/// only", while the same run against itself checks all of them as equal (none is "unchecked").
#[test]
fn workload_record_makes_concurrency_a_checked_invalidator() {
    let Some(e) = env_or_skip("workload_record_makes_concurrency_a_checked_invalidator") else { return };
    let _g = common::nsys_guard();
    let tmp = tempfile::tempdir().unwrap();
    let question = tmp.path().join("question.txt");
    std::fs::write(&question, "Is batch formation on the critical path at c=4?\n").unwrap();
    let patch = tmp.path().join("nvtx.diff");
    std::fs::write(&patch, "--- a/engine.py\n+++ b/engine.py\n").unwrap();
    let mut bundles = Vec::new();
    for (i, conc) in ["4", "8"].iter().enumerate() {
        let port = free_port();
        let out = tmp.path().join(format!("run{i}"));
        let mut args = base_args(e, port, &out);
        args.extend(
            [
                "--delay",
                "3",
                "--duration",
                "2",
                "--min-rep-bytes",
                "1000",
                "--concurrency",
                conc,
                "--request-rate",
                "inf",
                "--seed",
                "42",
                "--clock-policy",
                "default",
                "--instrumentation-patch",
                patch.to_str().unwrap(),
                "--load",
            ]
            .map(String::from),
        );
        args.push(format!("{} --client {port} 7", e.server.display()));
        // the first run states its question, the second does not (and is warned)
        if i == 0 {
            args.extend(["--question".into(), question.display().to_string(), "--require-explicit-nsys".into()]);
        }
        if i == 0 {
            let records = tmp.path().join("records.jsonl");
            args.extend(["--iteration-records".into(), records.display().to_string()]);
        }
        args.extend(["--".into(), e.server.display().to_string(), port.to_string()]);
        // the server ignores flags it does not know: the engine flags capture-compare reads
        args.extend(
            [&["--attention-backend", "flashinfer"][..], &["--attention-backend=triton", "--enforce-eager"][..]][i]
                .iter()
                .map(|w| w.to_string()),
        );
        let o = common::serve_capture_run(&args, Duration::from_secs(240));
        let doc = common::one_doc(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(doc["outcome"], "ok", "{doc}\n{err}");
        assert_eq!(err.contains("warning: no --question FILE"), i == 1, "{err}");
        let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
        common::assert_valid(&prov);
        // B7: --require-explicit-nsys (with --nsys given) is recorded
        assert_eq!(prov["nsys"]["explicit_required"].as_bool(), [Some(true), None][i], "{}", prov["nsys"]);
        let w = &prov["workload"];
        let q = ["Is batch formation on the critical path at c=4?"][..].get(i).map(|q| serde_json::json!(q));
        assert_eq!(w["question"], q.unwrap_or(Value::Null));
        assert_eq!(w["concurrency"].as_u64(), Some(conc.parse().unwrap()));
        assert_eq!((w["request_rate"].as_str(), w["seed_policy"].as_str()), (Some("inf"), Some("fixed:42")));
        assert_eq!(w["sources"]["concurrency"], "--concurrency");
        assert_eq!(
            w["instrumentation_patch"],
            "sha256:".to_string() + &sha256_hex(&std::fs::read(&patch).unwrap()),
            "{w}"
        );
        assert_eq!(w["client_command"], format!("{} --client {port} 7", e.server.display()));
        bundles.push(out.join("bundle.json"));
    }
    let (a, b) = (bundles[0].to_str().unwrap(), bundles[1].to_str().unwrap());
    let (code, doc) = common::doc("capture-compare", &[a, b]);
    assert_eq!(code, 1, "{doc}");
    let inv = doc["invalidators"].as_array().unwrap();
    let c = inv.iter().find(|i| i["check"] == "concurrency").unwrap_or_else(|| panic!("{doc}"));
    assert_eq!((c["a"].as_u64(), c["b"].as_u64()), (Some(4), Some(8)), "{c}");
    let find = |check: &str| inv.iter().find(|i| i["check"] == check).unwrap_or_else(|| panic!("{check}: {doc}"));
    assert_eq!(find("backend")["a"]["flags"]["--attention-backend"], "flashinfer");
    assert_eq!(find("backend")["b"]["flags"]["--attention-backend"], "triton");
    assert_eq!((find("graph_mode")["a"].as_str(), find("graph_mode")["b"].as_str()), (Some("graphs"), Some("eager")));
    let it = find("iteration_records");
    assert_eq!((it["a"].as_bool(), it["b"].as_bool()), (Some(true), Some(false)), "{it}");
    let warnings: Vec<&str> = doc["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert!(
        warnings.iter().any(|w| w.starts_with("cross-check only: ") && w.contains(b) && w.contains("--enforce-eager")),
        "{warnings:?}"
    );
    assert!(!warnings.iter().any(|w| w.contains("cross-check only") && w.contains(a)), "{warnings:?}");
    // the same run on both sides: every workload fact is checked (recorded on both sides, equal)
    let (_, same) = common::doc("capture-compare", &[a, a]);
    for check in [
        "concurrency",
        "request_rate",
        "seed_policy",
        "clock_policy",
        "instrumentation_patch",
        "backend",
        "graph_mode",
        "iteration_records",
    ] {
        for list in ["invalidators", "unchecked"] {
            assert!(!same[list].as_array().unwrap().iter().any(|x| x["check"] == check), "{check} in {list}: {same}");
        }
    }
    assert_eq!(same["a"]["run_facts"]["concurrency"]["source"], "provenance.workload.concurrency", "{same}");
}

fn sha256_hex(bytes: &[u8]) -> String {
    let o = StdCommand::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&o.stdout)[..64].to_string()
}

/// An explicit workload flag that disagrees with the load command is exit 2 naming both, before anything is
/// created.
#[test]
fn workload_flag_disagreeing_with_the_load_command_is_refused() {
    let Some(e) = env_or_skip("workload_flag_disagreeing_with_the_load_command_is_refused") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, free_port(), &out);
    args.extend(
        ["--concurrency", "8", "--load", "vllm bench serve --max-concurrency 4 --request-rate 2", "--", "true"]
            .map(String::from),
    );
    let o = Command::cargo_bin("serve-capture").unwrap().args(&args).timeout(Duration::from_secs(60)).output().unwrap();
    let (code, err) = (o.status.code(), String::from_utf8_lossy(&o.stderr));
    assert_eq!(code, Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert!(err.contains("--concurrency 8") && err.contains("--max-concurrency 4"), "{err}");
    assert!(!out.exists(), "nothing created");
}

/// Issue 39 B7: with `--require-explicit-nsys` and neither `--nsys` nor `NSYS_BIN`, serve-capture refuses before
/// anything is created, even though PATH holds a usable nsys.
#[test]
fn require_explicit_nsys_refuses_the_path_fallback() {
    let Some(e) = env_or_skip("require_explicit_nsys_refuses_the_path_fallback") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, free_port(), &out);
    args.drain(0..2); // no --nsys
    args.extend(["--require-explicit-nsys", "--load", "true", "--", "true"].map(String::from));
    let dir = e.nsys.parent().unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let o = Command::cargo_bin("serve-capture")
        .unwrap()
        .args(&args)
        .env_remove("NSYS_BIN")
        .env("PATH", &path)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--require-explicit-nsys") && err.contains("[PATH]"), "{err}");
    assert!(!out.exists(), "nothing created");
}

/// Issue 39 B16: provenance.json records the server's whole environment (inherited, `--env`, what serve-capture
/// sets), names and values, with secrets redacted by the one rule; the secret value appears in no file of the
/// run folder. A stale `--shm` segment stops the run right after the provenance is written (nothing started).
#[test]
fn provenance_records_the_server_environment_redacted() {
    let Some(e) = env_or_skip("provenance_records_the_server_environment_redacted") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let seg = format!("/dev/shm/nsyskit_test_env_{}", std::process::id());
    std::fs::write(&seg, b"x").unwrap();
    let out = tmp.path().join("run");
    let mut args = base_args(e, free_port(), &out);
    args.extend(
        [
            "--shm",
            "nsyskit_test_env_*",
            "--gpu",
            "0",
            "--nvidia-smi",
            "/nonexistent/nvidia-smi",
            "--env",
            "GIVEN_VAR=g1",
            "--load",
            "true",
            "--",
            "true",
        ]
        .map(String::from),
    );
    let (code, doc, err) = serve(
        &args,
        &[("NSYSKIT_TEST_INHERITED", "plain-value"), ("MY_SERVICE_API_KEY", "sk-live-abcdef123"), ("GIVEN_VAR", "x")],
    );
    std::fs::remove_file(&seg).unwrap();
    assert_eq!(code, Some(1), "{doc}\n{err}");
    assert_eq!(doc["failures"][0]["stage"], "preflight");
    let prov: Value = serde_json::from_slice(&std::fs::read(out.join("provenance.json")).unwrap()).unwrap();
    common::assert_valid(&prov);
    let env = prov["capture"]["server_environment"].as_array().unwrap();
    let get = |n: &str| env.iter().find(|v| v["name"] == n).unwrap_or_else(|| panic!("{n} not in {env:?}"));
    assert_eq!(
        (get("NSYSKIT_TEST_INHERITED")["value"].as_str(), get("NSYSKIT_TEST_INHERITED")["source"].as_str()),
        (Some("plain-value"), Some("inherited"))
    );
    assert_eq!(
        (get("MY_SERVICE_API_KEY")["value"].as_str(), get("MY_SERVICE_API_KEY")["redacted"].as_bool()),
        (Some("<redacted>"), Some(true))
    );
    // --env overrides the inherited value; --gpu sets CUDA_VISIBLE_DEVICES
    assert_eq!((get("GIVEN_VAR")["value"].as_str(), get("GIVEN_VAR")["source"].as_str()), (Some("g1"), Some("given")));
    assert_eq!(
        (get("CUDA_VISIBLE_DEVICES")["value"].as_str(), get("CUDA_VISIBLE_DEVICES")["source"].as_str()),
        (Some("0"), Some("serve-capture"))
    );
    let names: Vec<&str> = env.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
    for f in walk(&out) {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(!text.contains("sk-live-abcdef123"), "{} holds the secret", f.display());
    }
}
