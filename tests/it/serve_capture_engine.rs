//! serve-capture's engine evidence (#22): launcher contracts (`--require-argv`, `--engine`), generated/JIT
//! modules (`--module`, `--strict-prebuilt`) and iteration records (`--iteration-records`), against the real
//! nsys 2023.4 (NSYS_BIN) and the CPU server scripts/cpu/vibeserve_http.c, which dlopens `--load-module`s and
//! writes NSYSKIT_ITERATION_RECORDS. Tests that need nsys or gcc SKIP with a message when they are absent.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

fn gcc(args: &[&str]) -> bool {
    match StdCommand::new("gcc").args(args).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!("gcc {args:?}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("SKIP: no gcc ({e})");
            false
        }
    }
}

struct Env {
    nsys: PathBuf,
    server: PathBuf,
    dir: tempfile::TempDir,
}

fn env_or_skip(test: &str) -> Option<&'static Env> {
    static ENV: OnceLock<Option<Env>> = OnceLock::new();
    let e = ENV.get_or_init(|| {
        let nsys = common::nsys_or_skip("serve_capture_engine")?;
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
        let i = format!("-I{}", inc.display());
        gcc(&["-O1", &i, src.to_str().unwrap(), "-o", server.to_str().unwrap(), "-ldl"]).then_some(Env {
            nsys,
            server,
            dir,
        })
    });
    if e.is_none() {
        eprintln!("SKIP {test}: needs nsys, gcc and the NVTX headers");
    }
    e.as_ref()
}

/// Build a small shared object `name` in `dir` (a generated/JIT module); returns its path.
fn build_so(dir: &Path, name: &str, body: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, body).unwrap();
    let so = dir.join(format!("{name}.so"));
    assert!(gcc(&["-shared", "-fPIC", "-O1", c.to_str().unwrap(), "-o", so.to_str().unwrap()]));
    so
}

fn sha256(p: &Path) -> String {
    Sha256::digest(std::fs::read(p).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn serve(args: &[String]) -> (Option<i32>, Vec<u8>, String) {
    let _g = common::nsys_guard();
    let o = common::serve_capture_run(args, Duration::from_secs(240));
    (o.status.code(), o.stdout, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// A server command that leaves a marker file if it is ever started (and then idles), to prove nothing ran.
fn marker_server(dir: &Path) -> (PathBuf, PathBuf) {
    let marker = dir.join("started");
    let sh = dir.join("server.sh");
    std::fs::write(&sh, format!("#!/bin/sh\ntouch {}\nexec sleep 30\n", marker.display())).unwrap();
    std::fs::set_permissions(&sh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (sh, marker)
}

/// Processes whose command line holds `token` (none may be left by a refused start).
fn processes_with(token: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let cl = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cl = String::from_utf8_lossy(&cl).replace('\0', " ");
        if cl.contains(token) {
            out.push(format!("{}: {cl}", e.file_name().to_string_lossy()));
        }
    }
    out
}

/// The launcher contract: a server command without a required flag is refused before anything is created or
/// started (exit 2 naming the flag), for `--require-argv` and for what `--engine` implies.
#[test]
fn launcher_contracts_refuse_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let (sh, marker) = marker_server(tmp.path());
    let out = tmp.path().join("run");
    let base = |extra: &[&str], server: &[&str]| {
        let mut a =
            s(&["--nsys", "/nonexistent/nsys", "--health", "http://127.0.0.1:9/health", "--load", "true", "--out"]);
        a.push(out.display().to_string());
        a.extend(s(extra));
        a.push("--".into());
        a.push(sh.display().to_string());
        a.extend(s(server));
        a
    };
    let cases: &[(&[&str], &[&str], &str)] = &[
        (&["--require-argv", "--enable-nvtx"], &["--port", "1"], "lacks --enable-nvtx: required by --require-argv"),
        // a prefix of another flag is not that flag
        (&["--require-argv", "--enable-nvtx"], &["--enable-nvtx-ranges"], "lacks --enable-nvtx"),
        (
            &["--engine", "sglang"],
            &["--alignment-nvtx-ranges"],
            "lacks --alignment-iteration-records: required by --engine sglang",
        ),
        (&["--engine", "sglang"], &[], "lacks --alignment-nvtx-ranges"),
        (
            &["--engine", "vllm", "--capture-range", "cudaProfilerApi"],
            &["--profiler-config.profiler", "torch"],
            "lacks --profiler-config.profiler=cuda: required by --engine vllm with --capture-range cudaProfilerApi",
        ),
        (&["--engine", "tgi"], &[], "--engine \"tgi\": expected one of sglang, vllm"),
    ];
    for (extra, server, want) in cases {
        let (code, stdout, stderr) = serve(&base(extra, server));
        assert_eq!(code, Some(2), "{extra:?} {server:?}: {stderr}");
        assert!(stderr.contains(want), "{extra:?} {server:?}: {stderr}");
        assert!(stdout.is_empty() || !String::from_utf8_lossy(&stdout).contains("serve-capture/v1"));
        assert!(!out.exists(), "the run folder was created for a refused start");
        assert!(!marker.exists(), "the server was started");
    }
    // --iteration-records: a file left from an earlier run, or a contradicting --env, is refused the same way
    let old = tmp.path().join("old.jsonl");
    std::fs::write(&old, "{}\n").unwrap();
    let (code, _, stderr) = serve(&base(&["--iteration-records", old.to_str().unwrap()], &[]));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("exists already: records from an earlier run"), "{stderr}");
    let fresh = tmp.path().join("fresh.jsonl");
    let (code, _, stderr) = serve(&base(
        &["--iteration-records", fresh.to_str().unwrap(), "--env", "NSYSKIT_ITERATION_RECORDS=/tmp/other"],
        &[],
    ));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("contradicts --iteration-records"), "{stderr}");
    assert!(!out.exists() && !marker.exists() && !fresh.exists());
    // the contract met, the run goes on to the next check (here: the nsys that does not exist, still exit 2)
    let (code, _, stderr) =
        serve(&base(&["--engine", "vllm", "--capture-range", "cudaProfilerApi"], &["--profiler-config.profiler=cuda"]));
    assert_eq!(code, Some(2));
    assert!(!stderr.contains("lacks"), "{stderr}");
    assert!(!marker.exists());
}

/// `--strict-prebuilt`: a listed module that is missing, or whose sha256 differs from its pin, fails before the
/// server is launched: exit 2 naming the module, no run folder, no process left.
#[test]
fn strict_prebuilt_refuses_and_leaves_no_process() {
    let tmp = tempfile::tempdir().unwrap();
    let (sh, marker) = marker_server(tmp.path());
    let token = format!("engine-strict-{}", std::process::id());
    let so = build_so(tmp.path(), "kern", "int kern_answer(void) { return 42; }\n");
    let out = tmp.path().join("run");
    let run = |module: String, strict: bool| {
        let mut a =
            s(&["--nsys", "/nonexistent/nsys", "--health", "http://127.0.0.1:9/health", "--load", "true", "--module"]);
        a.push(module);
        if strict {
            a.push("--strict-prebuilt".into());
        }
        a.extend(["--out".into(), out.display().to_string(), "--".into(), sh.display().to_string(), token.clone()]);
        serve(&a)
    };
    let missing = tmp.path().join("missing.so");
    let (code, _, stderr) = run(missing.display().to_string(), true);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("module {} is missing", missing.display())), "{stderr}");
    let wrong = "0".repeat(64);
    let (code, _, stderr) = run(format!("{}={wrong}", so.display()), true);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("has sha256 {}", sha256(&so))) && stderr.contains(&format!("pins {wrong}")),
        "{stderr}"
    );
    assert!(!out.exists() && !marker.exists());
    assert!(processes_with(&token).is_empty(), "{:?}", processes_with(&token));
    // the right pin passes the module check (the run then stops at the nsys that does not exist)
    let (code, _, stderr) = run(format!("{}={}", so.display(), sha256(&so)), true);
    assert_eq!(code, Some(2));
    assert!(!stderr.contains("--strict-prebuilt"), "{stderr}");
    // without --strict-prebuilt a missing module is recorded, not refused
    let (_, _, stderr) = run(missing.display().to_string(), false);
    assert!(!stderr.contains("--strict-prebuilt"), "{stderr}");
    assert!(processes_with(&token).is_empty());
}

/// A whole run on the CPU server: the module it dlopens is `loaded` by the server's PID (same path and inode),
/// the one it does not load is recorded with its hash but `loaded: false`; the iteration records it writes to
/// NSYSKIT_ITERATION_RECORDS are collected, validated (nsyskit.iterations/v1) and merged into the bundle; the
/// checked argv is in provenance.
#[test]
fn modules_loaded_and_iteration_records_on_a_cpu_server() {
    let Some(e) = env_or_skip("modules_loaded_and_iteration_records_on_a_cpu_server") else { return };
    let tmp = tempfile::tempdir_in(e.dir.path()).unwrap();
    let used = build_so(tmp.path(), "used_kernel", "int used_kernel(void) { return 1; }\n");
    let unused = build_so(tmp.path(), "unused_kernel", "int unused_kernel(void) { return 2; }\n");
    let records = tmp.path().join("records.jsonl");
    let port = free_port();
    let out = tmp.path().join("run");
    let server = e.server.display().to_string();
    let mut a = s(&["--nsys", e.nsys.to_str().unwrap(), "--trace", "nvtx,osrt", "--grace", "3"]);
    a.extend(["--health".into(), format!("http://127.0.0.1:{port}/health")]);
    a.extend(["--load".into(), format!("{server} --client {port} 2")]);
    a.extend(["--require-argv".into(), "--load-module".into()]);
    a.extend(["--module".into(), used.display().to_string()]);
    a.extend(["--module".into(), format!("{}={}", unused.display(), sha256(&unused)), "--strict-prebuilt".into()]);
    a.extend(["--iteration-records".into(), records.display().to_string()]);
    a.extend(["--out".into(), out.display().to_string(), "--".into(), server.clone(), port.to_string()]);
    a.extend(["--load-module".into(), used.display().to_string()]);
    let (code, stdout, stderr) = serve(&a);
    let doc = common::one_doc(&stdout);
    assert!(matches!(code, Some(0) | Some(1)), "{code:?} {stderr}");
    assert_eq!(doc["outcome"], "ok", "{doc}\n{stderr}");
    common::assert_valid(&doc);
    let server_pid =
        doc["processes"].as_array().unwrap().iter().find(|p| p["role"] == "server").unwrap()["pid"].as_i64().unwrap();

    let mods = doc["modules"].as_array().unwrap();
    assert_eq!(mods.len(), 2);
    assert_eq!(mods[0]["path"], used.display().to_string());
    assert_eq!(mods[0]["sha256"], sha256(&used));
    assert_eq!(mods[0]["size"], std::fs::metadata(&used).unwrap().len());
    assert!(mods[0]["mtime_utc"].as_str().unwrap().ends_with('Z'));
    assert_eq!(mods[0]["loaded"], true, "{}", mods[0]);
    assert_eq!(mods[0]["loaded_by_pid"], serde_json::json!([server_pid]));
    assert_eq!(mods[1]["loaded"], false, "{}", mods[1]);
    assert_eq!(mods[1]["loaded_by_pid"], serde_json::json!([]));
    assert_eq!(mods[1]["sha256_matches"], true);
    assert!(mods[1]["scans"].as_u64().unwrap() >= 2);

    // the launcher contract that was checked, in the document and in provenance
    let prov: Value = serde_json::from_str(&std::fs::read_to_string(out.join("provenance.json")).unwrap()).unwrap();
    let checked = &prov["capture"]["launcher"];
    assert_eq!(checked["required"][0]["flag"], "--load-module", "{prov}");
    assert!(checked["checked_argv"].as_array().unwrap().iter().any(|x| x == "--load-module"));
    assert_eq!(doc["launcher"], *checked);

    // the iteration records: kept in the run folder, validated, merged into the bundle
    let it = &doc["iterations"];
    assert_eq!(it["source"], records.display().to_string());
    assert_eq!(it["verdict"], "PASS", "{it}");
    assert_eq!(it["usable_as_time"], true);
    let copy = std::fs::read_to_string(out.join("iterations.jsonl")).unwrap();
    assert_eq!(copy, std::fs::read_to_string(&records).unwrap());
    let n = copy.lines().count() as u64;
    assert!(n >= 8 && n.is_multiple_of(4), "{n} records: 4 per request");
    assert_eq!(it["records"], n);
    let idoc: Value = serde_json::from_str(&std::fs::read_to_string(out.join("iterations.json")).unwrap()).unwrap();
    common::assert_valid(&idoc);
    assert_eq!(idoc["schema"], "nsyskit.iterations/v1");
    assert_eq!(idoc["phases"]["prefill"].as_u64().unwrap() * 4, n);
    assert_eq!(idoc["ranks"][0]["rank"], 0);
    assert!(
        idoc["ranks"][0]["busy_ns"].as_u64().unwrap() > n * 500_000,
        "each iteration busy-waits 750 us: {}",
        idoc["ranks"][0]
    );
    let bundle: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bundle.json")).unwrap()).unwrap();
    assert_eq!(bundle["iterations"]["records"], n);
    assert_eq!(bundle["serve_capture"]["modules"][0]["loaded"], true);
}

/// Records that fail validation, and a server that writes none, are failures with stage `iterations`
/// (outcome failed, exit 1) naming the line and the JSON path; the copy and its document are still kept.
#[test]
fn bad_or_missing_iteration_records_fail_the_run() {
    let Some(e) = env_or_skip("bad_or_missing_iteration_records_fail_the_run") else { return };
    let tmp = tempfile::tempdir_in(e.dir.path()).unwrap();
    // wrappers with the server's basename (serve-capture finds the server by it) that exec the real server
    let wrap = |name: &str, body: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir(&d).unwrap();
        let w = d.join("vibeserve_http");
        std::fs::write(&w, format!("#!/bin/sh\n{body}\nexec {} \"$@\"\n", e.server.display())).unwrap();
        std::fs::set_permissions(&w, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        w
    };
    // a record without its phase, before the server's valid ones
    let bad = wrap(
        "bad",
        r#"echo '{"iteration":0,"rank":0,"prefill_chunks":[],"decode_kv_lens":[],"scheduled_tokens":1,"scheduled_requests":1,"batch_size":1,"graph_mode":"none","backend":"cpu"}' >> "$NSYSKIT_ITERATION_RECORDS""#,
    );
    let none = wrap("none", "unset NSYSKIT_ITERATION_RECORDS");
    for (w, want) in
        [(&bad, "line 1 $.phase: missing (a required field)"), (&none, "the server wrote no iteration records at")]
    {
        let port = free_port();
        let out = w.parent().unwrap().join("run");
        let records = w.parent().unwrap().join("records.jsonl");
        let mut a = s(&["--nsys", e.nsys.to_str().unwrap(), "--trace", "nvtx,osrt", "--grace", "3"]);
        a.extend(["--health".into(), format!("http://127.0.0.1:{port}/health")]);
        a.extend(["--load".into(), format!("{} --client {port} 1", e.server.display())]);
        a.extend(["--iteration-records".into(), records.display().to_string()]);
        a.extend(["--out".into(), out.display().to_string(), "--".into(), w.display().to_string(), port.to_string()]);
        let (code, stdout, stderr) = serve(&a);
        let doc = common::one_doc(&stdout);
        assert_eq!(code, Some(1), "{doc}\n{stderr}");
        assert_eq!(doc["outcome"], "failed", "{doc}");
        let f = doc["failures"].as_array().unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0]["stage"], "iterations");
        assert!(f[0]["reason"].as_str().unwrap().contains(want), "{f:?}");
        if w == &bad {
            assert_eq!(doc["iterations"]["verdict"], "RETRY");
            let idoc: Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("iterations.json")).unwrap()).unwrap();
            assert_eq!(idoc["problems"].as_array().unwrap().len(), 1, "{idoc}");
            assert!(idoc["records"].as_u64().unwrap() > 1);
        } else {
            assert!(doc["iterations"]["copy"].is_null());
            assert!(!out.join("iterations.jsonl").exists());
        }
    }
}

/// Issue 39 B137/B138/B140: a server whose worker rebuilds one `--module` after readiness (`gcc … -o MOD`) and
/// loads another one only then. With `--strict-prebuilt` the run fails at stage `modules` naming both (rebuilt
/// on disk; first loaded after readiness); each module records its ELF identity (build ID as readelf prints
/// it, the libraries it needs, the flags `-frecord-gcc-switches` kept), and the rebuilt one its compile event.
#[test]
fn strict_prebuilt_fails_a_module_built_or_loaded_after_readiness() {
    let Some(e) = env_or_skip("strict_prebuilt_fails_a_module_built_or_loaded_after_readiness") else { return };
    let tmp = tempfile::tempdir_in(e.dir.path()).unwrap();
    let flags = ["-shared", "-fPIC", "-O1", "-frecord-gcc-switches"];
    let build = |name: &str| {
        let c = tmp.path().join(format!("{name}.c"));
        std::fs::write(&c, format!("#include <stdio.h>\nint {name}(void) {{ return puts(\"x\"); }}\n")).unwrap();
        let so = tmp.path().join(format!("{name}.so"));
        let mut a: Vec<&str> = flags.to_vec();
        a.extend([c.to_str().unwrap(), "-o", so.to_str().unwrap()]);
        assert!(gcc(&a));
        (c, so)
    };
    let (rebuilt_c, rebuilt) = build("rebuilt_kernel");
    let (_, late) = build("late_kernel");
    let (port, port2) = (free_port(), free_port());
    let server = e.server.display().to_string();
    let sh = tmp.path().join("late.sh");
    std::fs::write(
        &sh,
        format!(
            "#!/bin/sh\n{server} {port} &\nsleep 5\nsh -c 'sleep 1; exec gcc {} {} -o {}'\n{server} {port2} --load-module {} &\nwait\n",
            flags.join(" "),
            rebuilt_c.display(),
            rebuilt.display(),
            late.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&sh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = tmp.path().join("run");
    let mut a = s(&["--nsys", e.nsys.to_str().unwrap(), "--trace", "nvtx,osrt", "--grace", "3", "--strict-prebuilt"]);
    a.extend(["--health".into(), format!("http://127.0.0.1:{port}/health")]);
    a.extend(["--load".into(), format!("{server} --client {port} 10")]);
    a.extend(["--module".into(), rebuilt.display().to_string(), "--module".into(), late.display().to_string()]);
    a.extend(["--out".into(), out.display().to_string(), "--".into(), sh.display().to_string()]);
    let (code, stdout, stderr) = serve(&a);
    let doc = common::one_doc(&stdout);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(doc["outcome"], "failed", "{doc}");
    let reasons: Vec<&str> = doc["failures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["stage"] == "modules")
        .map(|f| f["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains(&format!("module {} changed on disk", rebuilt.display()))),
        "{reasons:?}\n{stderr}"
    );
    assert!(
        reasons.iter().any(|r| r.contains(&format!("module {} was first loaded after readiness", late.display()))),
        "{reasons:?}\n{stderr}"
    );
    let mods = doc["modules"].as_array().unwrap();
    let (m0, m1) = (&mods[0], &mods[1]);
    assert_eq!((m0["loaded_at_ready"].as_bool(), m1["loaded_at_ready"].as_bool()), (Some(false), Some(false)));
    assert_eq!(m1["loaded"], true, "{m1}");
    assert!(m0["changed"].as_str().unwrap().contains("mtime"), "{m0}");
    let ev = m0["compile_events"].as_array().unwrap();
    assert!(!ev.is_empty() && ev[0]["after_ready"] == true, "{m0}");
    assert!(ev[0]["argv"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("-o")), "{m0}");
    // the ELF identity, read at start
    let id = &m1["identity"];
    assert!(id["format"].as_str().unwrap().starts_with("ELF64"), "{id}");
    assert!(id["needed"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("libc.so")), "{id}");
    let recorded =
        id["recorded_flags"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect::<Vec<_>>().join(" ");
    assert!(recorded.contains("-O1") && recorded.contains("-fPIC"), "{id}");
    if let Ok(o) = std::process::Command::new("readelf").arg("-n").arg(&late).output() {
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(l) = text.lines().find(|l| l.contains("Build ID:")) {
            assert_eq!(id["build_id"].as_str(), Some(l.split(':').nth(1).unwrap().trim()));
        }
    }
}

/// Issue 39 B79: `--iterations START:END` given up front is the analysis window of `ranges.json` (joined to the
/// run's iteration records); a window that selects no evidence fails the run (stage `iterations`) with the
/// RETRY document kept; a malformed window is exit 2 before anything starts.
#[test]
fn iterations_window_given_up_front() {
    let Some(e) = env_or_skip("iterations_window_given_up_front") else { return };
    let server = e.server.display().to_string();
    let run = |window: &str| {
        let tmp = tempfile::tempdir_in(e.dir.path()).unwrap();
        let port = free_port();
        let out = tmp.path().join("run");
        let mut a = s(&["--nsys", e.nsys.to_str().unwrap(), "--trace", "nvtx,osrt", "--grace", "3"]);
        a.extend(["--health".into(), format!("http://127.0.0.1:{port}/health")]);
        a.extend(["--load".into(), format!("{server} --client {port} 2")]);
        a.extend(["--iteration-records".into(), tmp.path().join("rec.jsonl").display().to_string()]);
        a.extend(["--iterations".into(), window.into()]);
        a.extend(["--out".into(), out.display().to_string(), "--".into(), server.clone(), port.to_string()]);
        let (code, stdout, stderr) = serve(&a);
        (code, stdout, stderr, out, tmp)
    };
    let (code, stdout, stderr, out, _t) = run("10:19");
    let doc = common::one_doc(&stdout);
    assert_eq!(doc["outcome"], "ok", "{code:?} {stderr}");
    assert_eq!(doc["window"]["analysis_iterations"], "10:19");
    let ranges: Value = serde_json::from_str(&std::fs::read_to_string(out.join("ranges.json")).unwrap()).unwrap();
    let w = &ranges["iterations"]["window"];
    assert_eq!(
        (w["by"].as_str(), w["requested"]["start"].as_u64(), w["requested"]["end"].as_u64()),
        (Some("engine_iteration"), Some(10), Some(19)),
        "{w}"
    );
    assert_eq!(w["selected_steps"].as_u64(), Some(10), "{w}");
    // the windowed ranges hold fewer iterations than the whole run's records
    let it = ranges["ranges"].as_array().unwrap().iter().find(|r| r["label"] == "vibeserve.engine.iteration").unwrap();
    assert!(it["occurrences"].as_i64().unwrap() <= 10, "{it}");
    // a window past the last record selects nothing: the run fails at stage iterations
    let (code, stdout, stderr, out, _t2) = run("1000000:1000009");
    let doc = common::one_doc(&stdout);
    assert_eq!(code, Some(1), "{stderr}");
    let f = doc["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["stage"] == "iterations")
        .unwrap_or_else(|| panic!("{doc}"));
    assert!(f["reason"].as_str().unwrap().contains("--iterations 1000000:1000009 selects no evidence"), "{f}");
    let retry: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("iteration-window.json")).unwrap()).unwrap();
    assert_eq!(retry["verdict"], "RETRY");
    // malformed: exit 2, nothing created
    let o = assert_cmd::Command::cargo_bin("serve-capture")
        .unwrap()
        .args(s(&[
            "--health",
            "http://127.0.0.1:9/h",
            "--load",
            "true",
            "--iterations",
            "9:3",
            "--out",
            "/nonexistent/x",
            "--",
            "true",
        ]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--iterations"));
}
