//! `nsys-resolve`: the real nsys 2023.4.4 (NSYS_BIN or the scripts/get-nsys cache; skipped when absent), fake
//! executables for the edge cases, a fake nvidia-smi replaying the real H200 output in fixtures/nvidia-smi,
//! a port bound by the test, a /dev/shm segment made by the test, a temp git repository.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

const REAL_VERSION: &str = "2023.4.4.54-234433681190v0";

fn real_nsys(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("NSYS_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.cache/nsyskit/nsys-2023.4/usr/bin/nsys"));
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP {test}: no real nsys (set NSYS_BIN=$(scripts/get-nsys) to run it)");
        None
    }
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A fake nsys that prints `version` and answers `profile --help`/`export --help` with the real texts of
/// nsys 2025.3.1 (for a 2025.* version) or 2023.4.4 (otherwise).
fn fake_nsys(dir: &Path, version: &str) -> PathBuf {
    let real = if version.starts_with("2025.") { "2025.3.1" } else { "2023.4.4" };
    let help = common::root().join("fixtures/nsys-help").join(real);
    script(
        dir,
        "nsys",
        &format!(
            "case \"$1\" in\n  --version) echo 'NVIDIA Nsight Systems version {version}';;\n  profile) cat '{}';;\n  export) cat '{}';;\n  *) exit 1;;\nesac",
            help.join("profile-help.txt").display(),
            help.join("export-help.txt").display()
        ),
    )
}

/// `nsys-resolve` with a controlled environment: no NSYS_BIN, PATH = `path` (plus /usr/bin:/bin for `sh`), no
/// install folder searched (NSYSKIT_NSYS_DIRS empty: a machine with /opt/nvidia/nsight-systems stays hermetic),
/// no CUDA_VISIBLE_DEVICES.
fn cmd(path: &[&Path]) -> Command {
    let mut c = Command::cargo_bin("nsys-resolve").unwrap();
    let mut dirs: Vec<PathBuf> = path.iter().map(|p| p.to_path_buf()).collect();
    dirs.push("/usr/bin".into());
    dirs.push("/bin".into());
    c.env("PATH", std::env::join_paths(dirs).unwrap())
        .env("NSYSKIT_NSYS_DIRS", "")
        .env_remove("NSYS_BIN")
        .env_remove("CUDA_VISIBLE_DEVICES");
    c
}

fn run(c: &mut Command) -> (i32, Value, String) {
    let o = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o.status.code().unwrap_or(-1);
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let doc = if code == 2 { Value::Null } else { common::one_doc(&o.stdout) };
    (code, doc, stderr)
}

fn check<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {doc}"))
}

#[test]
fn resolves_and_probes_the_real_nsys_2023_4() {
    let Some(nsys) = real_nsys("resolves_and_probes_the_real_nsys_2023_4") else { return };
    let empty = tempfile::tempdir().unwrap();
    let (code, doc, _) = run(cmd(&[empty.path()]).env("NSYS_BIN", &nsys));
    assert_eq!(code, 0);
    assert_eq!(doc["schema"], "nsyskit.provenance/v1");
    assert_eq!(doc["verdict"], "PASS");
    let n = &doc["nsys"];
    assert_eq!(n["version"], REAL_VERSION);
    assert_eq!(n["source"], "NSYS_BIN");
    assert_eq!(n["path"], std::fs::canonicalize(&nsys).unwrap().display().to_string());
    assert_ne!(n["path"], nsys.display().to_string(), "the symlink is resolved");
    let c = &n["capabilities"];
    assert_eq!(c["attach_pid"], false, "nsys 2023.4 has no --attach-pid");
    assert_eq!(c["pytorch"], false);
    for k in ["cuda_graph_trace", "capture_range", "capture_range_end", "trace_fork_before_exec", "python_sampling"] {
        assert_eq!(c[k], true, "{k}");
    }
    assert!(c["export_types"].as_array().unwrap().iter().any(|t| t == "sqlite"));
    let cands = n["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 1);
    assert_eq!(cands[0]["chosen"], true);
    assert_eq!(cands[0]["reason"], "given by NSYS_BIN");
    // the same capability answers as the stored help texts
    let stored = nsyskit::nsys_resolve::parse_capabilities(
        include_str!("../../fixtures/nsys-help/2023.4.4/profile-help.txt"),
        include_str!("../../fixtures/nsys-help/2023.4.4/export-help.txt"),
    );
    assert_eq!(serde_json::to_value(&stored).unwrap(), *c, "fixtures/nsys-help is stale");
}

#[test]
fn flags_the_real_nsys_cannot_run_fail_the_check() {
    let Some(nsys) = real_nsys("flags_the_real_nsys_cannot_run_fail_the_check") else { return };
    let empty = tempfile::tempdir().unwrap();
    let (code, doc, _) = run(cmd(&[empty.path()])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--flags")
        .arg("--trace=cuda,nvtx --attach-pid=1234 --cuda-graph-trace=node"));
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    assert_eq!(doc["capture"]["unsupported_flags"], serde_json::json!(["--attach-pid"]));
    assert_eq!(check(&doc, "flags")["status"], "fail");
    assert!(doc["reason"].as_str().unwrap().contains("has no --attach-pid"));
    let (code, doc, _) = run(cmd(&[empty.path()])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--flags=--trace=cuda,nvtx --cuda-graph-trace=node --capture-range=cudaProfilerApi"));
    assert_eq!(code, 0);
    assert_eq!(check(&doc, "flags")["status"], "pass");
}

#[test]
fn explicit_nsys_wins_and_others_are_listed() {
    let Some(nsys) = real_nsys("explicit_nsys_wins_and_others_are_listed") else { return };
    let t = tempfile::tempdir().unwrap();
    let on_path = fake_nsys(&t.path().join("p"), "2025.3.1.90-253135822126v0");
    let (code, doc, _) = run(cmd(&[&t.path().join("p")]).env("NSYS_BIN", "/nonexistent/nsys").arg("--nsys").arg(&nsys));
    assert_eq!(code, 0);
    let cands = doc["nsys"]["candidates"].as_array().unwrap();
    assert_eq!(cands.iter().map(|c| c["source"].as_str().unwrap()).collect::<Vec<_>>(), ["--nsys", "NSYS_BIN", "PATH"]);
    assert_eq!(cands[0]["chosen"], true);
    assert_eq!(cands[1]["reason"], "not considered: --nsys was given");
    assert_eq!(cands[2]["path"], on_path.display().to_string());
    assert_eq!(doc["nsys"]["version"], REAL_VERSION);
}

#[test]
fn unusable_explicit_nsys_is_exit_2_naming_why() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // a good nsys on PATH is not a fallback for an unusable --nsys
    fake_nsys(&d.join("p"), "2025.3.1.90-253135822126v0");
    let noexec = d.join("noexec/nsys");
    std::fs::create_dir_all(noexec.parent().unwrap()).unwrap();
    std::fs::write(&noexec, "#!/bin/sh\necho 'NVIDIA Nsight Systems version 2023.4.4.54-1'\n").unwrap();
    std::fs::set_permissions(&noexec, std::fs::Permissions::from_mode(0o644)).unwrap();
    let broken = d.join("broken-nsys");
    std::os::unix::fs::symlink(d.join("gone/nsys"), &broken).unwrap();
    let garbage = script(&d.join("garbage"), "nsys", "echo 'hello, I am not nsys'");
    let fails = script(&d.join("fails"), "nsys", "echo 'NVIDIA Nsight Systems version 2023.4.4.54-1'; exit 3");
    let cases: Vec<(PathBuf, &str)> = vec![
        (noexec, "not executable (mode 0644)"),
        (broken, "broken symlink (to "),
        (garbage, "`--version` printed no nsys version"),
        (fails, "exited with exit status: 3"),
        (d.join("missing/nsys"), "does not exist"),
        (d.to_path_buf(), "a directory, not an executable file"),
    ];
    for (p, why) in cases {
        let (code, _, stderr) = run(cmd(&[&d.join("p")]).arg("--nsys").arg(&p));
        assert_eq!(code, 2, "{}: {stderr}", p.display());
        assert!(stderr.contains("the nsys given by --nsys is not usable"), "{stderr}");
        assert!(stderr.contains(&p.display().to_string()), "{stderr}");
        assert!(stderr.contains(why), "{} should say {why:?}: {stderr}", p.display());
        assert!(stderr.contains("not considered: --nsys was given"), "the PATH candidate is listed: {stderr}");
    }
}

#[test]
fn a_hanging_nsys_is_killed_at_the_timeout() {
    let t = tempfile::tempdir().unwrap();
    let hang = script(&t.path().join("h"), "nsys", "sleep 30");
    let start = Instant::now();
    let (code, _, stderr) = run(cmd(&[]).arg("--nsys").arg(&hang).arg("--timeout-ms").arg("300"));
    let took = start.elapsed();
    assert_eq!(code, 2);
    assert!(stderr.contains("`--version` did not finish within 300 ms (killed)"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}: the sleeping child must not hold the run");
}

#[test]
fn two_versions_on_path_first_usable_in_path_order_wins() {
    let t = tempfile::tempdir().unwrap();
    let (a, b, bad) = (t.path().join("a"), t.path().join("b"), t.path().join("bad"));
    fake_nsys(&a, "2023.4.4.54-234433681190v0");
    fake_nsys(&b, "2025.3.1.90-253135822126v0");
    script(&bad, "nsys", "echo garbage");
    // PATH order decides (what a shell would run), not the version
    let (code, doc, _) = run(&mut cmd(&[&bad, &a, &b]));
    assert_eq!(code, 0);
    let n = &doc["nsys"];
    assert_eq!(n["source"], "PATH");
    assert_eq!(n["version"], "2023.4.4.54-234433681190v0");
    assert_eq!(n["path"], a.join("nsys").display().to_string());
    let c = n["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 3);
    assert_eq!(c[0]["chosen"], false);
    assert!(c[0]["reason"].as_str().unwrap().starts_with("`--version` printed no nsys version"));
    assert_eq!(c[1]["chosen"], true);
    assert_eq!(c[1]["reason"], "first usable nsys on PATH");
    assert_eq!(c[2]["version"], "2025.3.1.90-253135822126v0");
    assert!(c[2]["reason"].as_str().unwrap().starts_with("usable, but candidate 2"), "{}", c[2]);
    // the same file twice on PATH (a symlink) is recorded once as such
    let l = t.path().join("l");
    std::fs::create_dir_all(&l).unwrap();
    std::os::unix::fs::symlink(a.join("nsys"), l.join("nsys")).unwrap();
    let (_, doc, _) = run(&mut cmd(&[&a, &l]));
    assert!(doc["nsys"]["candidates"][1]["reason"].as_str().unwrap().starts_with("same file as candidate 1"));
}

#[test]
fn nothing_usable_is_exit_2_listing_every_candidate() {
    let t = tempfile::tempdir().unwrap();
    script(&t.path().join("g"), "nsys", "echo 'version banana'");
    let glob = format!("{}/opt/*/bin/nsys", t.path().display());
    let (code, doc, stderr) = run(cmd(&[&t.path().join("g")]).env("NSYSKIT_NSYS_DIRS", &glob));
    assert_eq!(code, 2);
    assert_eq!(doc, Value::Null);
    assert!(stderr.starts_with("nsys-resolve: error: no usable nsys found; candidates:"), "{stderr}");
    assert!(
        stderr
            .contains(&format!("1. {} [PATH]: `--version` printed no nsys version", t.path().join("g/nsys").display())),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("searched PATH, {glob})")), "the search is named: {stderr}");
    // with nothing anywhere
    let (code, _, stderr) = run(&mut cmd(&[]));
    assert_eq!(code, 2);
    assert!(stderr.contains("no usable nsys found: no candidates (no --nsys, NSYS_BIN unset, no nsys on PATH, no install folder searched)"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn install_folders_newest_version_first() {
    let t = tempfile::tempdir().unwrap();
    for (dir, v) in [("2023.4.4", "2023.4.4.54-1"), ("2025.3.1", "2025.3.1.90-2"), ("2024.6.2", "2024.6.2.225-3")] {
        fake_nsys(&t.path().join(dir).join("bin"), v);
    }
    script(&t.path().join("2026.1.1/bin"), "nsys", "exit 1");
    let opts = nsyskit::nsys_resolve::ResolveOptions {
        nsys: None,
        nsys_bin: None,
        path_var: Some(tempfile::tempdir().unwrap().path().as_os_str().to_owned()),
        install_globs: vec![format!("{}/*/bin/nsys", t.path().display())],
        timeout: Duration::from_secs(10),
        probe: true,
        require_explicit: false,
    };
    let r = nsyskit::nsys_resolve::resolve(&opts).unwrap();
    assert_eq!(r.version, "2025.3.1.90-2");
    assert_eq!(r.source, "install-dir");
    assert!(
        r.capabilities.pytorch && !r.capabilities.attach_pid,
        "probed from the 2025.3.1 help: {:?}",
        r.capabilities
    );
    let order: Vec<Option<&str>> = r.candidates.iter().map(|c| c.version.as_deref()).collect();
    assert_eq!(order, [Some("2025.3.1.90-2"), Some("2024.6.2.225-3"), Some("2023.4.4.54-1"), None]);
    assert_eq!(r.candidates[0].reason, "newest usable nsys in the known install folders");
    assert!(r.candidates[3].reason.contains("printed no nsys version"), "{}", r.candidates[3].reason);
}

/// A fake nvidia-smi answering exactly the queries nsys-resolve makes with the real H200 output.
fn fake_smi(dir: &Path, gpu_csv: &str, apps_csv: &str) -> PathBuf {
    let f = common::root().join("fixtures/nvidia-smi");
    script(
        dir,
        "nvidia-smi",
        &format!(
            "case \"$*\" in\n  '--query-gpu={} --format=csv') cat '{}';;\n  '--query-compute-apps={} --format=csv') cat '{}';;\n  --version) cat '{}';;\n  '') cat '{}';;\n  *) echo \"Invalid combination of input arguments: $*\"; exit 2;;\nesac",
            nsyskit::nsys_resolve::GPU_QUERY,
            f.join(gpu_csv).display(),
            nsyskit::nsys_resolve::APPS_QUERY,
            f.join(apps_csv).display(),
            f.join("version.txt").display(),
            f.join("nvidia-smi_idle.txt").display(),
        ),
    )
}

#[test]
fn preflight_flags_a_foreign_process_on_the_target_gpu() {
    let Some(nsys) = real_nsys("preflight_flags_a_foreign_process_on_the_target_gpu") else { return };
    let t = tempfile::tempdir().unwrap();
    let foreign = fake_smi(&t.path().join("foreign"), "query_gpu_foreign.csv", "query_compute_apps_foreign.csv");
    let idle = fake_smi(&t.path().join("idle"), "query_gpu_idle.csv", "query_compute_apps_idle.csv");

    // nvidia-smi found on PATH
    let (code, doc, _) = run(cmd(&[&t.path().join("foreign")]).arg("--nsys").arg(&nsys).arg("--preflight"));
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"], "RETRY");
    let c = check(&doc, "gpu-foreign-processes");
    assert_eq!(c["status"], "fail");
    assert_eq!(c["reason"], "foreign process on the target GPU: pid 433 (python3) uses 10758 MiB on GPU 0");
    let g = &doc["gpu"];
    assert_eq!(g["status"], "available");
    assert_eq!(g["cuda_version"], "13.0");
    assert_eq!(g["driver_version"], "580.159.04");
    assert_eq!(g["target_source"], "all");
    assert_eq!(g["gpus"][0]["name"], "NVIDIA H200");
    assert_eq!(g["gpus"][0]["memory_used_mib"], 10767);
    assert_eq!(g["processes"][0]["gpu_index"], 0);

    // CUDA_VISIBLE_DEVICES by UUID selects GPU 0 too
    let (code, doc, _) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .arg("--nvidia-smi")
        .arg(&foreign)
        .env("CUDA_VISIBLE_DEVICES", "GPU-d88ae72a"));
    assert_eq!(code, 1);
    assert_eq!(doc["gpu"]["targets"], serde_json::json!([0]));
    assert_eq!(doc["gpu"]["target_source"], "CUDA_VISIBLE_DEVICES");

    // an empty CUDA_VISIBLE_DEVICES hides every GPU
    let (code, doc, _) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .arg("--nvidia-smi")
        .arg(&foreign)
        .env("CUDA_VISIBLE_DEVICES", ""));
    assert_eq!(code, 1);
    assert_eq!(check(&doc, "gpu")["reason"], "no target GPU: CUDA_VISIBLE_DEVICES selects none of the 1 GPUs");

    // a target GPU that does not exist is a failed check, not a crash
    let (code, doc, _) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .arg("--nvidia-smi")
        .arg(&foreign)
        .arg("--gpu")
        .arg("1"));
    assert_eq!(code, 1);
    assert_eq!(check(&doc, "gpu")["reason"], "target GPU 1 not found (1 GPUs listed)");
    assert_eq!(check(&doc, "gpu-foreign-processes")["status"], "pass", "the process is on GPU 0");

    // idle: pass
    let (code, doc, _) =
        run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--preflight").arg("--nvidia-smi").arg(&idle).arg("--gpu").arg("0"));
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["verdict"], "PASS");
    assert_eq!(check(&doc, "gpu")["reason"], "target GPU 0 (NVIDIA H200) from --gpu");
    assert_eq!(check(&doc, "gpu-foreign-processes")["status"], "pass");
}

#[test]
fn no_nvidia_smi_is_unavailable_and_fails_only_with_require_gpu() {
    let Some(nsys) = real_nsys("no_nvidia_smi_is_unavailable_and_fails_only_with_require_gpu") else { return };
    let empty = tempfile::tempdir().unwrap();
    let mut c = Command::cargo_bin("nsys-resolve").unwrap();
    c.env("PATH", empty.path())
        .env("NSYSKIT_NSYS_DIRS", "")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight");
    let (code, doc, _) = run(&mut c);
    assert_eq!(code, 0);
    assert_eq!(doc["gpu"]["status"], "unavailable");
    assert_eq!(doc["gpu"]["reason"], "no nvidia-smi on PATH");
    assert_eq!(check(&doc, "gpu")["status"], "skip");
    let (code, doc, _) = run(c.arg("--require-gpu"));
    assert_eq!(code, 1);
    assert_eq!(check(&doc, "gpu")["status"], "fail");
    // an nvidia-smi that cannot talk to the driver
    let broken = script(
        empty.path(),
        "nvidia-smi",
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
    );
    let (code, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--require-gpu").arg("--nvidia-smi").arg(&broken));
    assert_eq!(code, 1);
    assert!(
        doc["gpu"]["reason"].as_str().unwrap().contains("exited with exit status: 9: NVIDIA-SMI has failed"),
        "{}",
        doc["gpu"]
    );
}

#[test]
fn port_in_use_names_the_holder() {
    let Some(nsys) = real_nsys("port_in_use_names_the_holder") else { return };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (code, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--port").arg(port.to_string()));
    assert_eq!(code, 1);
    let p = &doc["port"];
    assert_eq!(p["free"], false);
    assert_eq!(p["listeners"][0]["local_address"], format!("127.0.0.1:{port}"));
    assert_eq!(p["listeners"][0]["holders"][0]["pid"], std::process::id());
    let reason = check(&doc, "port")["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with(&format!("port {port} is in use: 127.0.0.1:{port} held by pid {}", std::process::id())),
        "{reason}"
    );
    drop(l);
    let (code, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--port").arg(port.to_string()));
    assert_eq!(code, 0, "{doc}");
    assert_eq!(check(&doc, "port")["reason"], format!("port {port} is free"));
}

#[test]
fn stale_shm_segments_fail_held_ones_do_not() {
    let Some(nsys) = real_nsys("stale_shm_segments_fail_held_ones_do_not") else { return };
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("SKIP stale_shm_segments_fail_held_ones_do_not: no /dev/shm");
        return;
    }
    let tag = format!("nsyskit-test-{}", std::process::id());
    let stale = PathBuf::from(format!("/dev/shm/{tag}-stale"));
    let held = PathBuf::from(format!("/dev/shm/{tag}-held"));
    std::fs::write(&stale, b"x").unwrap();
    let _open = std::fs::File::create(&held).unwrap();
    let out = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--shm").arg(format!("{tag}-*")));
    let out_held = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--shm").arg(format!("re:^{tag}-h")));
    let _ = std::fs::remove_file(&stale);
    let _ = std::fs::remove_file(&held);
    let (code, doc, _) = out;
    assert_eq!(code, 1);
    let s = &doc["shm"];
    assert_eq!(s["syntax"], "glob");
    assert_eq!(s["stale"], 1);
    assert_eq!(s["segments"].as_array().unwrap().len(), 2);
    let h = s["segments"].as_array().unwrap().iter().find(|x| x["path"] == held.display().to_string()).unwrap();
    assert_eq!(h["stale"], false);
    assert_eq!(h["holders"][0]["pid"], std::process::id());
    assert_eq!(check(&doc, "shm")["reason"], format!("1 stale segment(s) match \"{tag}-*\": {}", stale.display()));
    let (code, doc, _) = out_held;
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["shm"]["syntax"], "regex");
    assert_eq!(check(&doc, "shm")["status"], "pass");
}

#[test]
fn record_writes_the_same_document_with_secrets_redacted() {
    let Some(nsys) = real_nsys("record_writes_the_same_document_with_secrets_redacted") else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("engine");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git").arg("-C").arg(&repo).args(args).output().unwrap();
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.py"), "print(1)\n").unwrap();
    git(&["add", "a.py"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]);
    let rev = git(&["rev-parse", "HEAD"]);
    let smi = fake_smi(&t.path().join("smi"), "query_gpu_idle.csv", "query_compute_apps_idle.csv");
    let dir = t.path().join("runs/r1");
    let mut c = cmd(&[]);
    c.arg("--nsys")
        .arg(&nsys)
        .arg("--nvidia-smi")
        .arg(&smi)
        .arg("--record")
        .arg(&dir)
        .arg("--repo")
        .arg(&repo)
        .args(["--flags", "--trace=cuda,nvtx --cuda-graph-trace=node -o 'my rep'"])
        .args(["--server-cmd", "HF_TOKEN=hf_live vllm serve m --api-key sk-123 --port 8000"])
        .args(["--client-cmd", "vllm bench serve --port 8000"])
        .args([
            "--env",
            "HF_TOKEN",
            "--env",
            "VLLM_USE_V1",
            "--env",
            "my_api_key=zq-not-a-hex-secret",
            "--env",
            "UNSET_THING",
        ])
        .args(["--instrumentation", "nvtx=on", "--artifact", "runs/r1/capture.nsys-rep"])
        .env("HF_TOKEN", "hf_secret_value")
        .env("VLLM_USE_V1", "1")
        .env_remove("UNSET_THING");
    let (code, doc, _) = run(&mut c);
    assert_eq!(code, 0, "{doc}");
    let text = std::fs::read_to_string(dir.join("provenance.json")).unwrap();
    let rec: Value = serde_json::from_str(&text).unwrap();
    common::assert_valid(&rec);
    assert_eq!(rec, doc, "the record is the document printed on stdout");
    let loaded = nsyskit::nsys_resolve::load_record(&dir.join("provenance.json")).unwrap();
    assert_eq!(serde_json::to_value(&loaded).unwrap(), doc);
    let e = nsyskit::nsys_resolve::load_record(&repo.join("a.py")).unwrap_err();
    assert!(e.message.starts_with(&format!("{}: not JSON", repo.join("a.py").display())), "{}", e.message);
    assert!(
        !text.contains("hf_secret_value")
            && !text.contains("hf_live")
            && !text.contains("sk-123")
            && !text.contains("zq-not-a-hex-secret"),
        "{text}"
    );
    let env = doc["capture"]["env"].as_array().unwrap();
    assert_eq!(
        env[0],
        serde_json::json!({"name": "HF_TOKEN", "value": "<redacted>", "redacted": true, "source": "environment"})
    );
    assert_eq!(
        env[1],
        serde_json::json!({"name": "VLLM_USE_V1", "value": "1", "redacted": false, "source": "environment"})
    );
    assert_eq!(env[2]["value"], "<redacted>");
    assert_eq!(
        env[3],
        serde_json::json!({"name": "UNSET_THING", "value": null, "redacted": false, "source": "environment"})
    );
    assert_eq!(doc["capture"]["server_cmd"], "HF_TOKEN=<redacted> vllm serve m --api-key <redacted> --port 8000");
    assert_eq!(doc["capture"]["flags"], "--trace=cuda,nvtx --cuda-graph-trace=node -o 'my rep'");
    assert_eq!(
        doc["capture"]["flags_argv"],
        serde_json::json!(["--trace=cuda,nvtx", "--cuda-graph-trace=node", "-o", "my rep"])
    );
    assert_eq!(doc["capture"]["instrumentation"], serde_json::json!([{"name": "nvtx", "state": "on"}]));
    assert_eq!(doc["repo"]["revision"], rev);
    assert_eq!(doc["repo"]["branch"], "main");
    assert_eq!(doc["repo"]["dirty"], false);
    assert_eq!(doc["gpu"]["gpus"][0]["name"], "NVIDIA H200");
    assert_eq!(doc["gpu"]["cuda_version"], "13.0");
    assert!(
        doc["checks"].as_array().unwrap().iter().all(|c| c["name"] == "flags"),
        "--record alone runs no preflight checks"
    );
    assert_eq!(
        doc["artifacts"],
        serde_json::json!(["runs/r1/capture.nsys-rep", dir.join("provenance.json").display().to_string()])
    );
    let time = doc["host"]["time_utc"].as_str().unwrap();
    assert!(regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$").unwrap().is_match(time), "{time}");
    assert!(doc["host"]["hostname"].is_string());

    // a dirty tree
    std::fs::write(repo.join("a.py"), "print(2)\n").unwrap();
    std::fs::write(repo.join("new.py"), "\n").unwrap();
    let (_, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--repo").arg(&repo));
    assert_eq!(doc["repo"]["dirty"], true);
    assert_eq!(doc["repo"]["changes"], serde_json::json!([" M a.py", "?? new.py"]));
    // not a repository: exit 2 naming it
    let (code, _, stderr) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--repo").arg(t.path().join("runs")));
    assert_eq!(code, 2);
    assert!(
        stderr.contains(&t.path().join("runs").display().to_string()) && stderr.contains("not a git repository"),
        "{stderr}"
    );
}

#[test]
fn a_bad_env_flag_is_exit_2() {
    // the help's examples run as printed in tests/it/help_examples.rs
    let (code, _, stderr) = run(cmd(&[]).arg("--env").arg("").arg("--nsys").arg("/nonexistent"));
    assert_eq!(code, 2);
    assert!(stderr.contains("--env \"\": expected NAME or NAME=VALUE"), "{stderr}");
}

#[test]
fn the_resolved_canonical_path_exports_a_nsys_rep() {
    let Some(nsys) = real_nsys("the_resolved_canonical_path_exports_a_nsys_rep") else { return };
    let rep = common::fixture("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    let resolved = nsyskit::nsys_resolve::resolve(&nsyskit::nsys_resolve::ResolveOptions {
        nsys: Some(nsys),
        probe: false,
        ..nsyskit::nsys_resolve::ResolveOptions::from_env()
    })
    .unwrap();
    let cap = nsyskit::export::open_capture(&rep, Some(&resolved.path)).unwrap();
    assert!(cap.export.count_rows("NVTX_EVENTS").unwrap() > 0);
}

/// The preflight warns before a capture when the resolved nsys is older than the driver's CUDA major supports:
/// the real nsys 2023.4.4 against the real H200 driver output (CUDA 13.0) is the measured cbid-468 case; the
/// 2025.3.1 help texts behind a fake nsys of that version pass. A warning never fails the verdict.
#[test]
fn preflight_warns_when_nsys_is_older_than_the_driver_cuda() {
    let Some(nsys) = real_nsys("preflight_warns_when_nsys_is_older_than_the_driver_cuda") else { return };
    let t = tempfile::tempdir().unwrap();
    let idle = fake_smi(&t.path().join("idle"), "query_gpu_idle.csv", "query_compute_apps_idle.csv");
    let (code, doc, err) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--preflight").arg("--nvidia-smi").arg(&idle));
    assert_eq!(code, 0, "a warning is not a RETRY: {doc}");
    let c = check(&doc, "nsys-driver");
    assert_eq!(c["status"], "warn");
    let r = c["reason"].as_str().unwrap();
    assert!(r.contains("older than 2025.3") && r.contains("CUDA 13.0") && r.contains("cbid 468"), "{r}");
    assert!(err.contains("warning: nsys-driver"), "said before the capture: {err}");
    let new = fake_nsys(&t.path().join("new"), "2025.3.1.90-253135822126v0");
    let (code, doc, _) = run(cmd(&[]).arg("--nsys").arg(&new).arg("--preflight").arg("--nvidia-smi").arg(&idle));
    assert_eq!(code, 0);
    assert_eq!(check(&doc, "nsys-driver")["status"], "pass", "{doc}");
    // the clock policy query is separate: an nvidia-smi that does not answer it leaves the fields null
    assert!(doc["gpu"]["gpus"][0]["clocks_event_reasons_active"].is_null());
}

/// CUDA_INJECTION64_PATH already set where the engine starts from (this environment, or `--env`): a `warn`
/// naming the value; nsys's own injection library passes.
#[test]
fn a_preset_cuda_injection_path_is_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let nsys = fake_nsys(&t.path().join("n"), "2025.3.1.90-253135822126v0");
    let (code, doc, err) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--record")
        .arg(t.path().join("r"))
        .env("CUDA_INJECTION64_PATH", "/opt/zymtrace/libzymtrace.so"));
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["capture"]["cuda_injection64_path"], "/opt/zymtrace/libzymtrace.so", "recorded in provenance");
    assert!(err.contains("warning: CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace.so is already set"), "{err}");
    let (code, doc, err) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .env("CUDA_INJECTION64_PATH", "/opt/zymtrace/libzymtrace.so"));
    assert_eq!(code, 0, "{doc}");
    let c = check(&doc, "cuda-injection");
    assert_eq!(c["status"], "warn");
    assert!(
        c["reason"].as_str().unwrap().contains("CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace.so is already set"),
        "{c}"
    );
    assert!(err.contains("warning: cuda-injection"), "{err}");
    let (_, doc, _) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .arg("--env")
        .arg("CUDA_INJECTION64_PATH=/x/libzym.so")
        .env_remove("CUDA_INJECTION64_PATH"));
    assert_eq!(check(&doc, "cuda-injection")["status"], "warn");
    let (_, doc, _) = run(cmd(&[])
        .arg("--nsys")
        .arg(&nsys)
        .arg("--preflight")
        .env("CUDA_INJECTION64_PATH", "/opt/nsys/target-linux-x64/libToolsInjection64.so"));
    assert_eq!(check(&doc, "cuda-injection")["status"], "pass");
    let (_, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--preflight").env_remove("CUDA_INJECTION64_PATH"));
    assert_eq!(check(&doc, "cuda-injection")["reason"], "CUDA_INJECTION64_PATH is not set");
}

/// nsys installed by the project's own scripts/get-nsys (`$NSYS_HOME/usr/bin/nsys`, default
/// `~/.cache/nsyskit/*/usr/bin/nsys`) is found without NSYS_BIN or PATH.
#[test]
fn finds_nsys_in_the_projects_own_install_folder() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    fake_nsys(&home.join(".cache/nsyskit/nsys-2023.4/usr/bin"), "2023.4.4.54-234433681190v0");
    let mut c = cmd(&[]);
    c.env_remove("NSYSKIT_NSYS_DIRS").env_remove("NSYS_HOME").env("HOME", &home).arg("--no-probe");
    let (code, doc, err) = run(&mut c);
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc["nsys"]["source"], "install-dir");
    assert!(doc["nsys"]["path"].as_str().unwrap().ends_with(".cache/nsyskit/nsys-2023.4/usr/bin/nsys"), "{doc}");
    let nh = t.path().join("elsewhere");
    fake_nsys(&nh.join("usr/bin"), "2025.3.1.90-253135822126v0");
    let mut c = cmd(&[]);
    c.env_remove("NSYSKIT_NSYS_DIRS").env("NSYS_HOME", &nh).env("HOME", t.path().join("nohome")).arg("--no-probe");
    let (code, doc, err) = run(&mut c);
    assert_eq!(code, 0, "{err}");
    assert!(doc["nsys"]["path"].as_str().unwrap().starts_with(&nh.display().to_string()), "{doc}");
    assert_eq!(
        nsyskit::nsys_resolve::project_install_globs(
            Some(std::ffi::OsStr::new("/n")),
            Some(std::ffi::OsStr::new("/h"))
        ),
        ["/n/usr/bin/nsys", "/h/.cache/nsyskit/*/usr/bin/nsys"]
    );
}

/// Issue 39 B7: `--require-explicit-nsys` refuses the PATH / install-folder fallback (exit 2, naming what the
/// fallback would have offered) and records `nsys.explicit_required` when --nsys or NSYS_BIN names the nsys.
#[test]
fn require_explicit_nsys_refuses_the_path_fallback() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    let nsys = fake_nsys(&a, "2025.3.1.90-253135822126v0");
    // without the flag PATH is searched
    let (code, doc, _) = run(cmd(&[&a]).arg("--no-probe"));
    assert_eq!((code, doc["nsys"]["source"].as_str()), (0, Some("PATH")));
    assert!(doc["nsys"].get("explicit_required").is_none(), "{doc}");
    // with it, PATH is not enough
    let (code, _, err) = run(cmd(&[&a]).args(["--no-probe", "--require-explicit-nsys"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--require-explicit-nsys") && err.contains(&format!("{} [PATH]", nsys.display())), "{err}");
    // NSYS_BIN or --nsys satisfies it, and the record says so
    let (code, doc, err) = run(cmd(&[]).env("NSYS_BIN", &nsys).args(["--no-probe", "--require-explicit-nsys"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (doc["nsys"]["source"].as_str(), doc["nsys"]["explicit_required"].as_bool()),
        (Some("NSYS_BIN"), Some(true))
    );
    let (code, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).args(["--no-probe", "--require-explicit-nsys"]));
    assert_eq!((code, doc["nsys"]["explicit_required"].as_bool()), (0, Some(true)));
}

/// Issue 39 B28/B29/B34: nsys-resolve records the workload from its flags and --client-cmd's own flags.
#[test]
fn workload_from_the_client_command() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    let nsys = fake_nsys(&a, "2025.3.1.90-253135822126v0");
    let q = t.path().join("q.txt");
    std::fs::write(&q, "where does c=1 decode time go\n").unwrap();
    let client = "vllm bench serve --model m --request-rate 2 --max-concurrency 1 --seed 0";
    let (code, doc, err) =
        run(cmd(&[]).arg("--nsys").arg(&nsys).args(["--no-probe", "--client-cmd", client]).arg("--question").arg(&q));
    assert_eq!(code, 0, "{err}");
    let w = &doc["workload"];
    assert_eq!(w["question"], "where does c=1 decode time go");
    assert_eq!((w["request_rate"].as_str(), w["concurrency"].as_u64()), (Some("2"), Some(1)));
    assert_eq!(w["seed_policy"], "fixed:0");
    assert_eq!(w["client_command"], client);
    // a disagreeing flag is exit 2 naming both; no question is a warning
    let (code, _, err) =
        run(cmd(&[]).arg("--nsys").arg(&nsys).args(["--no-probe", "--client-cmd", client, "--seed", "1"]));
    assert_eq!(code, 2);
    assert!(err.contains("--seed 1") && err.contains("--seed 0"), "{err}");
    let (code, _, err) = run(cmd(&[]).arg("--nsys").arg(&nsys).args(["--no-probe", "--concurrency", "4"]));
    assert_eq!(code, 0);
    assert!(err.contains("warning: no --question FILE"), "{err}");
    // no workload flag, no client command: no workload block
    let (_, doc, _) = run(cmd(&[]).arg("--nsys").arg(&nsys).arg("--no-probe"));
    assert!(doc.get("workload").is_none(), "{doc}");
}
