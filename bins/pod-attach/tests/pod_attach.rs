//! pod-attach end to end against the stand-in API server (tests/standin), with real local processes: nsys 2023.4
//! (NSYS_BIN), tar, sha256sum, and a stand-in engine (tests/data/standin_engine.py).

mod common;
mod standin;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use common::{assert_valid, root};
use standin::{pod, PatchMode, StandIn, TarFault, TOKEN};

fn nsys() -> Option<PathBuf> {
    let p = std::env::var_os("NSYS_BIN").map(PathBuf::from).or_else(|| {
        let d = PathBuf::from("/root/.cache/nsyskit/nsys-2023.4/usr/bin/nsys");
        d.exists().then_some(d)
    })?;
    Command::new(&p).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| p)
}

macro_rules! nsys_or_skip {
    ($name:expr) => {
        match nsys() {
            Some(n) => n,
            None => {
                eprintln!("SKIP {}: no nsys (set NSYS_BIN=$(scripts/get-nsys) to run it)", $name);
                return;
            }
        }
    };
}

fn one_doc(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("stdout is not one JSON doc ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)));
    assert_valid(&v);
    v
}

fn bin(si: &StandIn) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pod-attach"));
    c.env("KUBECONFIG", &si.kubeconfig).env_remove("KUBERNETES_SERVICE_HOST").env("NO_PROXY", "127.0.0.1").env("PATH", "/usr/bin:/bin");
    c
}

/// A stand-in engine (HTTP server + CUDA-owning child) started under `nsys profile --capture-range=cudaProfilerApi
/// --capture-range-end=repeat` (or `nsys launch --session-new`), in its own process group so the test ends it.
struct Engine {
    child: Child,
    nsys: PathBuf,
    /// The nsys session the engine runs in (`profile-<nsys pid>` for `nsys profile`).
    session: String,
    port: u16,
    _outdir: PathBuf,
    marker: String,
    hits: PathBuf,
}

impl Engine {
    fn start(nsys: &Path, dir: &Path, how: &[&str], tag: &str) -> Engine {
        let outdir = dir.join("engine-out");
        std::fs::create_dir_all(&outdir).unwrap();
        let libcuda = dir.join("libcuda.so.1");
        std::fs::write(&libcuda, vec![0x7fu8; 4096]).unwrap();
        let portfile = dir.join("port");
        let marker = format!("standin-engine-{tag}-{}", std::process::id());
        // `how` empty: the engine runs without nsys (the attach strategy's target)
        let mut c = if how.is_empty() { Command::new("python3") } else { Command::new(nsys) };
        if !how.is_empty() {
            c.args(how).arg("python3");
        }
        c
            .arg(root().join("bins/pod-attach/tests/data/standin_engine.py"))
            .args(["serve", &marker])
            .arg(&portfile)
            .arg(&outdir)
            .arg(root().join("fixtures/nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"))
            .arg(&libcuda)
            .args(how.contains(&"--capture-range-end=stop").then_some("stop"))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = c.spawn().unwrap();
        let session = how.iter().find_map(|a| a.strip_prefix("--session-new=")).map(String::from).unwrap_or_else(|| format!("profile-{}", child.id()));
        let t0 = Instant::now();
        while !portfile.exists() {
            assert!(t0.elapsed() < Duration::from_secs(60), "stand-in engine did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // the CUDA-owning child needs a moment to map libcuda
        std::thread::sleep(Duration::from_millis(500));
        let port = std::fs::read_to_string(&portfile).unwrap().trim().parse().unwrap();
        Engine { child, nsys: nsys.to_path_buf(), session, port, _outdir: outdir, marker, hits: dir.join("engine-hits.log") }
    }
    /// The --process-match regex: `[s]tandin-…` matches the engine but not pod-attach's own command line (which
    /// is visible in this machine's /proc, unlike in a real pod).
    fn pattern(&self) -> String {
        format!("[{}]{}", &self.marker[..1], &self.marker[1..])
    }
    fn hits(&self) -> Vec<String> {
        std::fs::read_to_string(&self.hits).unwrap_or_default().lines().map(String::from).collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // nsys's launcher starts the engine in a new session, so the engine leaves this test's process group:
        // end the processes this test started by their PIDs, found through this run's unique marker.
        // First let nsys end its own session (its agent daemon outlives a killed nsys).
        let _ = Command::new(&self.nsys).arg("shutdown").arg(format!("--session={}", self.session)).stdout(Stdio::null()).stderr(Stdio::null()).status();
        let mut pids = vec![self.child.id()];
        for d in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = d.file_name().to_string_lossy().parse::<u32>() else { continue };
            let cmd = std::fs::read(d.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains("standin_engine.py") && cmd.split(' ').any(|w| w == self.marker) {
                pids.push(pid);
            }
        }
        for pid in pids {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status();
        }
        let _ = self.child.wait();
    }
}

fn common_args(c: &mut Command, nsys: &Path, work: &Path, out: &Path) {
    common_args_d(c, nsys, work, out, "1")
}

fn common_args_d(c: &mut Command, nsys: &Path, work: &Path, out: &Path, duration: &str) {
    c.args(["--pod", "engine-0", "--container", "engine", "--image", "registry.invalid/nsys@sha256:00", "--duration", duration, "--wait-timeout", "30"])
        .arg("--nsys")
        .arg(nsys)
        .arg("--workdir")
        .arg(work)
        .arg("--out-dir")
        .arg(out)
        .arg("--compact");
}

/// The real gate-check: NSYSKIT_GATE_CHECK, else the workspace's own build next to pod-attach (present once the
/// gate-check binary is in the workspace and `cargo test --workspace` built it).
fn gate_check() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NSYSKIT_GATE_CHECK") {
        return Some(PathBuf::from(p));
    }
    let p = Path::new(env!("CARGO_BIN_EXE_pod-attach")).with_file_name("gate-check");
    p.is_file().then_some(p)
}

fn with_gate(c: &mut Command, dir: &Path, test: &str) -> Option<PathBuf> {
    let gate = gate_check();
    match &gate {
        Some(g) => c.arg("--gate-check").arg(g),
        None => {
            eprintln!("NOTE {test}: no gate-check binary (NSYSKIT_GATE_CHECK or next to pod-attach): checking the NOT_RUN path only");
            c.arg("--gate-check").arg(dir.join("no-gate-check"))
        }
    };
    gate
}

/// Both stand-in captures are CPU only (no CUDA kernels): the real gate-check sends them back (RETRY), and
/// pod-attach must exit 1 with the gate's document; without gate-check the verdict is NOT_RUN, exit 0.
fn expect_gate(d: &Value, out: &Output, have_gate: bool) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if have_gate {
        assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
        assert_eq!(d["gate"]["verdict"], "RETRY", "{}", d["gate"]);
        assert!(d["gate"]["reason"].as_str().unwrap().contains("G1"), "{}", d["gate"]["reason"]);
        assert_eq!(d["gate"]["document"]["schema"], "nsyskit.gate/v1");
        assert_eq!(d["gate"]["document"]["verdict"], "RETRY");
    } else {
        assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
        assert_eq!(d["gate"]["verdict"], "NOT_RUN");
        assert!(d["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("gate-check not run")));
    }
}

fn pods1() -> Vec<Value> {
    vec![pod("engine-0", json!({"app": "vllm"}), &["engine"])]
}

#[test]
fn dry_run_needs_no_cluster() {
    let out = Command::new(env!("CARGO_BIN_EXE_pod-attach"))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .args(["--dry-run", "--pod", "vllm-0", "--container", "engine", "--image", "reg/nsys@sha256:ab", "--duration", "7", "--compact"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let d = one_doc(&out);
    assert_eq!(d["dry_run"], true);
    let plan = d["plan"].as_array().unwrap();
    assert_eq!(plan[0], json!({"kind": "api", "method": "GET", "path": "/api/v1/namespaces/default/pods/vllm-0", "body": null, "why": "find the pod"}));
    let patch = plan.iter().find(|s| s["method"] == "PATCH").unwrap();
    assert_eq!(patch["path"], "/api/v1/namespaces/default/pods/vllm-0/ephemeralcontainers");
    assert_eq!(patch["content_type"], "application/strategic-merge-patch+json");
    assert_eq!(patch["body"]["spec"]["ephemeralContainers"][0]["targetContainerName"], "engine");
    assert_eq!(patch["body"]["spec"]["ephemeralContainers"][0]["image"], "reg/nsys@sha256:ab");
    assert!(plan.iter().any(|s| s["kind"] == "http" && s["path"] == "/start_profile"));
    assert!(plan.iter().any(|s| s["kind"] == "wait" && s["seconds"] == 7.0));
    assert!(plan.iter().filter(|s| s["kind"] == "exec").all(|s| s["argv"].is_array()));
    // bad input: exit 2, one line, no panic
    let bad = Command::new(env!("CARGO_BIN_EXE_pod-attach")).args(["--dry-run", "--pod", "p", "--image", "i", "--process-match", "("]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--process-match"));
    let noimg = Command::new(env!("CARGO_BIN_EXE_pod-attach")).env_remove("NSYSKIT_SIDECAR_IMAGE").args(["--dry-run", "--pod", "p"]).output().unwrap();
    assert_eq!(noimg.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&noimg.stderr).contains("--image is required for --strategy endpoint"));
    // a site default from NSYSKIT_SIDECAR_IMAGE; --image wins over it
    let site = "site.example/nsys@sha256:5e";
    let envimg = Command::new(env!("CARGO_BIN_EXE_pod-attach")).env("NSYSKIT_SIDECAR_IMAGE", site).args(["--dry-run", "--pod", "p", "--container", "c", "--compact"]).output().unwrap();
    assert_eq!(envimg.status.code(), Some(0), "{}", String::from_utf8_lossy(&envimg.stderr));
    let d = one_doc(&envimg);
    let patch = d["plan"].as_array().unwrap().iter().find(|s| s["method"] == "PATCH").unwrap().clone();
    assert_eq!(patch["body"]["spec"]["ephemeralContainers"][0]["image"], site);
    let both = Command::new(env!("CARGO_BIN_EXE_pod-attach")).env("NSYSKIT_SIDECAR_IMAGE", site).args(["--dry-run", "--pod", "p", "--container", "c", "--image", "flag/nsys@sha256:ab", "--compact"]).output().unwrap();
    let d = one_doc(&both);
    let patch = d["plan"].as_array().unwrap().iter().find(|s| s["method"] == "PATCH").unwrap().clone();
    assert_eq!(patch["body"]["spec"]["ephemeralContainers"][0]["image"], "flag/nsys@sha256:ab");
    // the session strategy adds no sidecar, so it needs no image
    let sess = Command::new(env!("CARGO_BIN_EXE_pod-attach")).args(["--dry-run", "--pod", "p", "--container", "c", "--strategy", "session", "--compact"]).output().unwrap();
    assert_eq!(sess.status.code(), Some(0), "{}", String::from_utf8_lossy(&sess.stderr));
    let d = one_doc(&sess);
    let plan = d["plan"].as_array().unwrap();
    assert!(!plan.iter().any(|s| s["method"] == "PATCH"));
    assert!(plan.iter().filter(|s| s["kind"] == "exec").all(|s| s["container"] == "c"));
    assert!(plan.iter().any(|s| s["argv"] == json!(["nsys", "start", "--session=nsyskit", "-o", format!("{}/capture", plan.iter().find(|s| s["argv"][0] == "mkdir").unwrap()["argv"][3].as_str().unwrap())])));
}

fn check_no_token(out: &Output) {
    assert!(!String::from_utf8_lossy(&out.stderr).contains(TOKEN) && !String::from_utf8_lossy(&out.stdout).contains(TOKEN), "token leaked");
}

#[test]
fn endpoint_happy_path() {
    let nsys = nsys_or_skip!("endpoint_happy_path");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), &["profile", "--trace=osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "-o", &dir.path().join("engine-out/run").to_string_lossy()], "ep");
    let work = dir.path().join("work");
    let out_dir = dir.path().join("out");
    let mut c = bin(&si);
    common_args(&mut c, &nsys, &work, &out_dir);
    c.args(["--process-match", &eng.pattern(), "--port", &eng.port.to_string()]);
    let gate = with_gate(&mut c, dir.path(), "endpoint_happy_path");
    let t0 = Instant::now();
    let out = c.output().unwrap();
    eprintln!("MEASURED endpoint_happy_path: pod-attach wall {:.2} s (--duration 1)", t0.elapsed().as_secs_f64());
    check_no_token(&out);
    let d = one_doc(&out);
    eprintln!("STDERR endpoint_happy_path:\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("DOC endpoint_happy_path: {}", serde_json::to_string_pretty(&d).unwrap());
    expect_gate(&d, &out, gate.is_some());
    assert_eq!(d["strategy"], "endpoint");
    let prov = &d["provenance"];
    assert!(prov["engine"]["cmdline"].as_str().unwrap().contains("EngineCore"), "{prov}");
    assert_eq!(prov["engine"]["cuda_owner"], true);
    assert!(prov["engine"]["nsys_ancestor"]["cmdline"].as_str().unwrap().contains("--capture-range-end=repeat"));
    assert!(prov["source_report"].as_str().unwrap().ends_with("run.1.nsys-rep"));
    assert!(prov["nsys"]["version"].as_str().unwrap().contains("2023.4"));
    assert_eq!(eng.hits(), vec!["/start_profile", "/stop_profile"]);
    let files = d["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"capture.nsys-rep") && names.contains(&"capture.sqlite"), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with(".csv")), "{names:?}");
    // copied bytes are the real report, checksums match the local files
    let rep = std::fs::read(out_dir.join("capture.nsys-rep")).unwrap();
    assert_eq!(rep, std::fs::read(root().join("fixtures/nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep")).unwrap());
    for f in files {
        let bytes = std::fs::read(f["path"].as_str().unwrap()).unwrap();
        assert_eq!(f["size"], bytes.len() as u64);
        assert_eq!(f["sha256"], nsyskit::pod_attach::sha256_hex(&bytes));
    }
    // the export is a real nsys SQLite export
    let ex = nsyskit::export::Export::open(&out_dir.join("capture.sqlite")).unwrap();
    assert!(ex.count_rows("NVTX_EVENTS").unwrap() > 0);
    // cleanup: the work folder is gone, the sidecar's sleep ended, and the document says so
    assert!(!work.exists());
    assert_eq!(si.sidecar_ended(), Some(true));
    let cleanup = d["cleanup"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect::<Vec<_>>().join("\n");
    assert!(cleanup.contains("cannot be removed") && cleanup.contains("ended its `sleep"), "{cleanup}");
    // exec went to the sidecar; every command was an argv array (the stand-in got separate `command` params)
    let s = si.state.lock().unwrap();
    assert!(s.saw_token);
    assert!(s.execs.iter().all(|(c, _)| c.starts_with("nsyskit-")), "{:?}", s.execs);
    assert!(s.execs.iter().any(|(_, a)| a[0] == "tar" && a[1] == "cf"));
}

#[test]
fn session_happy_path() {
    let nsys = nsys_or_skip!("session_happy_path");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let session = format!("pa-test-{}", std::process::id());
    let eng = Engine::start(&nsys, dir.path(), &["launch", &format!("--session-new={session}"), "--trace=osrt"], "ss");
    let work = dir.path().join("work");
    let out_dir = dir.path().join("out");
    let mut c = bin(&si);
    common_args(&mut c, &nsys, &work, &out_dir);
    c.args(["--strategy", "session", "--session", &session, "--process-match", &eng.pattern()]);
    let gate = with_gate(&mut c, dir.path(), "session_happy_path");
    let t0 = Instant::now();
    let out = c.output().unwrap();
    eprintln!("MEASURED session_happy_path: pod-attach wall {:.2} s (--duration 1)", t0.elapsed().as_secs_f64());
    let d = one_doc(&out);
    expect_gate(&d, &out, gate.is_some());
    assert_eq!(d["strategy"], "session");
    assert!(d["provenance"]["sidecar"].is_null());
    let s = si.state.lock().unwrap();
    // no ephemeral container; nsys start/stop ran in the engine's container
    assert!(s.sidecar.is_none());
    assert!(s.execs.iter().all(|(c, _)| c == "engine"));
    assert!(s.execs.iter().any(|(_, a)| a[1] == "start" && a[2] == format!("--session={session}")));
    drop(s);
    // a real capture of the running engine: the stand-in's osrt calls are in it
    let ex = nsyskit::export::Export::open(&out_dir.join("capture.sqlite")).unwrap();
    assert!(ex.count_rows("OSRT_API").unwrap() > 0);
    assert!(!work.exists());
}

fn run_err(si: &StandIn, extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = bin(si);
    c.args(["--image", "registry.invalid/nsys@sha256:00", "--duration", "1", "--wait-timeout", "5", "--compact", "--nsys", "/nonexistent/nsys"])
        .arg("--out-dir")
        .arg(dir.path().join("out"))
        .arg("--workdir")
        .arg(dir.path().join("work"))
        .args(extra);
    let out = c.output().unwrap();
    check_no_token(&out);
    assert!(out.stdout.is_empty(), "no document on error");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn no_pod_and_two_pods() {
    let si = StandIn::start(vec![pod("engine-0", json!({"app": "vllm"}), &["engine"]), pod("engine-1", json!({"app": "vllm"}), &["engine"])], PatchMode::Ok, TarFault::None);
    let (code, err) = run_err(&si, &["--selector", "app=none"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no pod in namespace default matches selector \"app=none\""), "{err}");
    let (code, err) = run_err(&si, &["--selector", "app=vllm"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("2 pods") && err.contains("engine-0, engine-1"), "{err}");
    let (code, err) = run_err(&si, &["--pod", "missing"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("404") && err.contains("missing"), "{err}");
    assert!(si.state.lock().unwrap().sidecar.is_none());
}

#[test]
fn ephemeral_containers_forbidden() {
    let si = StandIn::start(pods1(), PatchMode::Forbidden, TarFault::None);
    // found by selector (exactly one pod), its only container taken as the target
    let (code, err) = run_err(&si, &["--selector", "app=vllm"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("forbidden (403") && err.contains("pods/ephemeralcontainers"), "{err}");
    assert!(err.contains("pod default/engine-0, container engine"), "{err}");
}

#[test]
fn image_pull_failure_shows_events() {
    let si = StandIn::start(pods1(), PatchMode::ImagePullError, TarFault::None);
    let (code, err) = run_err(&si, &["--pod", "engine-0", "--container", "engine"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("did not start: ErrImagePull") && err.contains("Failed: Failed to pull image"), "{err}");
    assert!(err.contains("cannot be removed"), "cleanup must say the ephemeral container stays: {err}");
}

#[test]
fn engine_pid_not_found_and_ambiguous() {
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let marker = format!("[n]o-such-engine-{}", std::process::id());
    let (code, err) = run_err(&si, &["--pod", "engine-0", "--container", "engine", "--process-match", &marker]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no process matches --process-match"), "{err}");
    assert_eq!(si.sidecar_ended(), Some(true), "cleanup ends the sidecar's sleep after an error");
    // two CUDA-owning candidates
    let dir = tempfile::tempdir().unwrap();
    let libcuda = dir.path().join("libcuda.so.1");
    std::fs::write(&libcuda, vec![0u8; 4096]).unwrap();
    let tag = format!("ambiguous-engine-{}", std::process::id());
    let mut kids: Vec<Child> = (0..2)
        .map(|_| Command::new("python3").arg(root().join("bins/pod-attach/tests/data/standin_engine.py")).arg("core").arg(&libcuda).arg(&tag).spawn().unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let si2 = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    si2.state.lock().unwrap().v4_only = true; // exec over v4.channel.k8s.io only
    let (code, err) = run_err(&si2, &["--pod", "engine-0", "--container", "engine", "--process-match", &format!("[a]{}", &tag[1..])]);
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
    assert_eq!(code, Some(2));
    assert!(err.contains("ambiguous engine: 2 CUDA-owning processes"), "{err}");
}

#[test]
fn attach_refused_by_nsys_2023() {
    let nsys = nsys_or_skip!("attach_refused_by_nsys_2023");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), &["profile", "--trace=osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "-o", &dir.path().join("engine-out/run").to_string_lossy()], "at");
    let mut c = bin(&si);
    common_args(&mut c, &nsys, &dir.path().join("work"), &dir.path().join("out"));
    c.args(["--strategy", "attach", "--process-match", &eng.pattern()]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("strategy attach refused") && err.contains("2023.4") && err.contains("--attach-pid"), "{err}");
    assert!(eng.hits().is_empty());
}

/// `--capture-range-end=stop` (the mode nsys 2025.3.1 honours, measured on the H200): the first pod-attach gets
/// the one report, with a warning; a second one on the same engine is refused before any POST, naming the report.
#[test]
fn endpoint_stop_mode_one_capture_per_engine() {
    let nsys = nsys_or_skip!("endpoint_stop_mode_one_capture_per_engine");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), &["profile", "--trace=osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "-o", &dir.path().join("engine-out/run").to_string_lossy()], "es");
    let run = |tag: &str| {
        let mut c = bin(&si);
        common_args(&mut c, &nsys, &dir.path().join(format!("work-{tag}")), &dir.path().join(format!("out-{tag}")));
        c.args(["--process-match", &eng.pattern(), "--port", &eng.port.to_string()]);
        with_gate(&mut c, dir.path(), "endpoint_stop_mode_one_capture_per_engine");
        c.output().unwrap()
    };
    let first = run("1");
    let d = one_doc(&first);
    assert_eq!(d["strategy"], "endpoint");
    assert!(d["provenance"]["source_report"].as_str().unwrap().ends_with("/run.nsys-rep"), "{}", d["provenance"]);
    assert!(d["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("one capture per engine start")), "{}", d["warnings"]);
    assert_eq!(eng.hits(), vec!["/start_profile", "/stop_profile"]);
    let second = run("2");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains("--capture-range-end=stop and has already written its one report") && err.contains("run.nsys-rep"), "{err}");
    assert_eq!(eng.hits(), vec!["/start_profile", "/stop_profile"], "the refusal comes before any POST");
    assert!(!dir.path().join("work-2").exists());
}

/// The attach strategy's happy path. No real nsys lists `--attach-pid` (2023.4.4 here, 2025.3.1 on the H200), so
/// the sidecar's nsys is a test double (tests/data/nsys_attach_shim.sh) over the real nsys 2023.4: it adds the
/// option line to `profile --help`, and for `profile --attach-pid=PID` checks the PID, logs its argv, waits and
/// writes a real report; export and stats are the real nsys. What is tested is pod-attach's side.
#[test]
fn attach_happy_path_with_shim_nsys() {
    let nsys = nsys_or_skip!("attach_happy_path_with_shim_nsys");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let shim_log = dir.path().join("shim.log");
    let report = root().join("fixtures/nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    {
        let mut s = si.state.lock().unwrap();
        s.env.insert("REAL_NSYS".into(), nsys.to_string_lossy().into());
        s.env.insert("SHIM_LOG".into(), shim_log.to_string_lossy().into());
        s.env.insert("SHIM_REPORT".into(), report.to_string_lossy().into());
    }
    let shim = root().join("bins/pod-attach/tests/data/nsys_attach_shim.sh");
    let eng = Engine::start(&nsys, dir.path(), &[], "ap");
    let work = dir.path().join("work");
    let out_dir = dir.path().join("out");
    let mut c = bin(&si);
    common_args_d(&mut c, &shim, &work, &out_dir, "2");
    c.args(["--strategy", "attach", "--process-match", &eng.pattern()]);
    let gate = with_gate(&mut c, dir.path(), "attach_happy_path_with_shim_nsys");
    let out = c.output().unwrap();
    check_no_token(&out);
    let d = one_doc(&out);
    eprintln!("STDERR attach_happy_path_with_shim_nsys:\n{}", String::from_utf8_lossy(&out.stderr));
    expect_gate(&d, &out, gate.is_some());
    assert_eq!(d["strategy"], "attach");
    // the engine pod-attach chose is the CUDA-owning child, and the shim was asked to attach to exactly that PID
    let prov = &d["provenance"];
    assert_eq!(prov["engine"]["cuda_owner"], true);
    assert!(prov["engine"]["cmdline"].as_str().unwrap().contains("EngineCore"), "{prov}");
    let pid = prov["engine"]["pid"].as_i64().unwrap();
    let log = std::fs::read_to_string(&shim_log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "{log}");
    let argv: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(
        argv,
        vec![
            "profile",
            &format!("--attach-pid={pid}"),
            "--trace=cuda,nvtx,osrt",
            "--cuda-graph-trace=node",
            "--duration=2",
            "-o",
            &format!("{}/capture", work.display()),
        ]
    );
    // the probe saw the flag; the rest of the version text is the real nsys's
    assert!(prov["nsys"]["version"].as_str().unwrap().contains("2023.4"), "{prov}");
    // copy-out: the report the shim wrote, the real export and stats made from it, checksums matching
    assert_eq!(std::fs::read(out_dir.join("capture.nsys-rep")).unwrap(), std::fs::read(&report).unwrap());
    let files = d["files"].as_array().unwrap();
    for f in files {
        let bytes = std::fs::read(f["path"].as_str().unwrap()).unwrap();
        assert_eq!(f["sha256"], nsyskit::pod_attach::sha256_hex(&bytes));
    }
    let ex = nsyskit::export::Export::open(&out_dir.join("capture.sqlite")).unwrap();
    assert!(ex.count_rows("NVTX_EVENTS").unwrap() > 0);
    // the sidecar ran it, and cleanup ended the sidecar's sleep and removed the work folder
    let s = si.state.lock().unwrap();
    assert!(s.execs.iter().all(|(c, _)| c.starts_with("nsyskit-")), "{:?}", s.execs);
    assert!(s.execs.iter().any(|(_, a)| a.get(1).map(String::as_str) == Some("profile") && a.get(2).is_some_and(|x| x.starts_with("--attach-pid="))));
    drop(s);
    assert_eq!(si.sidecar_ended(), Some(true));
    assert!(!work.exists());
    assert!(eng.hits().is_empty(), "attach sends no HTTP to the engine");
}

fn copy_fault(fault: TarFault, tag: &str, expect: &str) {
    let nsys = nsys_or_skip!("copy fault");
    let si = StandIn::start(pods1(), PatchMode::Ok, fault);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), &["profile", "--trace=osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "-o", &dir.path().join("engine-out/run").to_string_lossy()], tag);
    let work = dir.path().join("work");
    let out_dir = dir.path().join("out");
    let mut c = bin(&si);
    common_args(&mut c, &nsys, &work, &out_dir);
    c.args(["--process-match", &eng.pattern(), "--port", &eng.port.to_string()]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains(expect), "{err}");
    assert!(!dir.path().join("escaped.nsys-rep").exists() && !out_dir.join("../escaped.nsys-rep").exists());
    assert!(!work.exists(), "cleanup removed the work folder");
    assert_eq!(si.sidecar_ended(), Some(true));
}

#[test]
fn interrupted_copy_is_an_error() {
    copy_fault(TarFault::Cut, "cut", "the copy was interrupted");
}

#[test]
fn tar_entry_with_dotdot_rejected() {
    copy_fault(TarFault::DotDot, "dotdot", "\"../escaped.nsys-rep\" at byte 0: `..` component rejected");
}

#[test]
fn ctrl_c_mid_capture_cleans_up() {
    let nsys = nsys_or_skip!("ctrl_c_mid_capture_cleans_up");
    let si = StandIn::start(pods1(), PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), &["profile", "--trace=osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "-o", &dir.path().join("engine-out/run").to_string_lossy()], "cc");
    let work = dir.path().join("work");
    let mut c = bin(&si);
    common_args_d(&mut c, &nsys, &work, &dir.path().join("out"), "60");
    c.args(["--process-match", &eng.pattern(), "--port", &eng.port.to_string()]);
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "pod-attach ended before capturing: {seen}");
        seen.push_str(&line);
        if line.contains("capturing for") {
            break;
        }
    }
    assert!(work.exists());
    let t0 = Instant::now();
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "did not stop promptly");
    assert_eq!(status.code(), Some(130), "{seen}{rest}");
    assert!(rest.contains("interrupted (SIGINT)") && rest.contains("POST /stop_profile answered 200"), "{rest}");
    assert_eq!(eng.hits(), vec!["/start_profile", "/stop_profile"]);
    assert!(!work.exists(), "work folder removed");
    assert_eq!(si.sidecar_ended(), Some(true));
}
