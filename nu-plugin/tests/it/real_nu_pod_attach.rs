//! `pod-attach` in a REAL nu 0.115.1: --dry-run (no cluster), and against the stand-in Kubernetes API server of
//! bins/pod-attach/tests/standin (reused, not copied): pod lookup errors as LabeledErrors, a session-strategy
//! capture with nsys 2023.4 gated through the library, and Ctrl-C mid-capture. SKIPs without nu or nsys.

use crate::standin;

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Nu;
use serde_json::json;
use standin::{pod, PatchMode, StandIn, TarFault, TOKEN};

/// One nsys session at a time.
static NSYS_LOCK: Mutex<()> = Mutex::new(());

#[test]
fn pod_attach_dry_run_plan() {
    let Some(nu) = Nu::or_skip("pod_attach_dry_run_plan") else { return };
    let image = "r/x@sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd";
    let got = nu.json(&format!(
        "pod-attach --dry-run --pod vllm-0 --container engine --image '{image}' --duration 7sec \
         | {{n: ($in.plan | length), dry_run: $in.dry_run, strategy: $in.strategy, \
            patch: ($in.plan | where method? == PATCH | get 0), wait: ($in.plan | where kind == wait | get 0.seconds), \
            execs_are_argv: ($in.plan | where kind == exec | all {{|s| ($s.argv | describe) == 'list<string>'}})}}"
    ));
    // the same plan as the library's for the same flags (the binary prints that one)
    let f = nsyskit_pod_attach::Flags {
        pod: Some("vllm-0".into()),
        container: Some("engine".into()),
        image: Some(image.into()),
        duration: 7.0,
        ..Default::default()
    };
    let want = nsyskit::pod_attach::dry_run(&nsyskit_pod_attach::options(&f).unwrap()).unwrap();
    assert_eq!(got["n"], json!(want.plan.len()));
    assert!(want.plan.len() > 15);
    assert_eq!(got["dry_run"], true);
    assert_eq!(got["strategy"], "endpoint");
    assert_eq!(got["patch"]["path"], "/api/v1/namespaces/default/pods/vllm-0/ephemeralcontainers");
    assert_eq!(got["patch"]["body"]["spec"]["ephemeralContainers"][0]["image"], image);
    assert_eq!(got["patch"]["body"]["spec"]["ephemeralContainers"][0]["targetContainerName"], "engine");
    assert_eq!(got["wait"], json!(7.0), "--duration 7sec is 7 s");
    assert_eq!(got["execs_are_argv"], true);
    // bad usage is a LabeledError at the flag
    let script = "pod-attach --dry-run --pod p --process-match '('";
    let err = nu.error(script);
    assert!(err.contains("--process-match \"(\" is not a valid regex"), "{err}");
    assert!(err.contains("nsyskit::usage") && err.contains("bad argument (--process-match)"), "{err}");
    let at = script.find("--process-match").unwrap() + 1;
    assert!(err.contains(&format!("label at line 2, columns {at} to {}", script.len())), "{err}");
    // no --image and no $env.NSYSKIT_SIDECAR_IMAGE: the seed's Path A image; an unpinned one is refused
    let got = nu.json("hide-env -i NSYSKIT_SIDECAR_IMAGE; pod-attach --dry-run --pod p --container c | get plan | where method? == PATCH | get 0.body.spec.ephemeralContainers.0.image");
    assert_eq!(got, json!(nsyskit::pod_attach::DEFAULT_SIDECAR_IMAGE));
    let err = nu.error("pod-attach --dry-run --pod p --image nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04");
    assert!(err.contains("not pinned by digest") && err.contains("--allow-unpinned-image"), "{err}");
    let got = nu.json("pod-attach --dry-run --pod p --image nvcr.io/nvidia/cuda:12.9.1-devel-ubuntu22.04 --allow-unpinned-image --install-nsys apt | get plan | where kind == exec | get argv | where {|a| 'install' in $a} | get 0");
    assert_eq!(
        got,
        json!([
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "-q",
            "-y",
            "install",
            "--no-install-recommends",
            "nsight-systems-cli"
        ])
    );
    // the site default comes from Nushell's $env.NSYSKIT_SIDECAR_IMAGE (set inside nu, not the plugin's own env)
    let got = nu.json(
        "$env.NSYSKIT_SIDECAR_IMAGE = 'site.example/nsys@sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e'; \
         pod-attach --dry-run --pod p --container c | get plan | where method? == PATCH | get 0.body.spec.ephemeralContainers.0.image",
    );
    assert_eq!(got, json!("site.example/nsys@sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"));
}

/// nu with $env.KUBECONFIG pointing at the stand-in, set inside Nushell (the plugin reads Nushell's
/// environment, not its own).
fn with_cluster(si: &StandIn, pipeline: &str) -> String {
    format!("$env.KUBECONFIG = '{}'; $env.NO_PROXY = '127.0.0.1'; {pipeline}", si.kubeconfig.display())
}

#[test]
fn pod_attach_lookup_errors_against_the_standin() {
    let Some(nu) = Nu::or_skip("pod_attach_lookup_errors_against_the_standin") else { return };
    let si = StandIn::start(
        vec![
            pod("engine-0", json!({"app": "vllm"}), &["engine"]),
            pod("engine-1", json!({"app": "vllm"}), &["engine"]),
        ],
        PatchMode::Ok,
        TarFault::None,
    );
    let dir = tempfile::tempdir().unwrap();
    let base = format!("pod-attach --image registry.invalid/nsys@sha256:0000000000000000000000000000000000000000000000000000000000000000 --duration 1 --wait-timeout 5 --out-dir '{}'", dir.path().join("out").display());
    let script = format!("{base} --selector app=none");
    let err = nu.error(&with_cluster(&si, &script));
    assert!(err.contains("no pod in namespace default matches selector \"app=none\""), "{err}");
    assert!(err.contains("nsyskit::input") && err.contains("unusable input (--selector)"), "{err}");
    let line = with_cluster(&si, "");
    let at = line.len() + script.find("--selector").unwrap() + 1;
    assert!(err.contains(&format!("label at line 2, columns {at} to {}", line.len() + script.len())), "{err}");
    let err = nu.error(&with_cluster(&si, &format!("{base} --selector app=vllm")));
    assert!(err.contains("2 pods") && err.contains("engine-0, engine-1"), "{err}");
    let err = nu.error(&with_cluster(&si, &format!("{base} --pod missing")));
    assert!(err.contains("404") && err.contains("missing") && err.contains("nsyskit::environment"), "{err}");
    assert!(!err.contains(TOKEN), "token leaked: {err}");
    let s = si.state.lock().unwrap();
    assert!(s.saw_token, "the stand-in was reached with the kubeconfig's token");
    assert!(s.sidecar.is_none());
}

/// A stand-in engine (tests/data/standin_engine.py: an HTTP server with a CUDA-owning child) under
/// `nsys launch --session-new=SESSION`; ended by PID and marker on drop.
struct Engine {
    child: Child,
    nsys: PathBuf,
    session: String,
    marker: String,
}

impl Engine {
    fn start(nsys: &Path, dir: &Path, tag: &str) -> Engine {
        let root = common::root();
        let outdir = dir.join("engine-out");
        std::fs::create_dir_all(&outdir).unwrap();
        let libcuda = dir.join("libcuda.so.1");
        std::fs::write(&libcuda, vec![0x7fu8; 4096]).unwrap();
        let portfile = dir.join("port");
        let marker = format!("standin-engine-nu{tag}-{}", std::process::id());
        let session = format!("pa-nu-{tag}-{}", std::process::id());
        let child = Command::new(nsys)
            .args(["launch", &format!("--session-new={session}"), "--trace=osrt", "--cuda-graph-trace=node", "python3"])
            .arg(root.join("bins/pod-attach/tests/data/standin_engine.py"))
            .args(["serve", &marker])
            .arg(&portfile)
            .arg(&outdir)
            .arg(root.join("fixtures/nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"))
            .arg(&libcuda)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !portfile.exists() {
            assert!(t0.elapsed() < Duration::from_secs(180), "stand-in engine did not start in 180 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        Engine { child, nsys: nsys.to_path_buf(), session, marker }
    }
    /// `[s]tandin-…`: matches the engine, not the command lines that carry the pattern itself.
    fn pattern(&self) -> String {
        format!("[{}]{}", &self.marker[..1], &self.marker[1..])
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = Command::new(&self.nsys)
            .arg("shutdown")
            .arg(format!("--session={}", self.session))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let mut pids = vec![self.child.id()];
        for d in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = d.file_name().to_string_lossy().parse::<u32>() else { continue };
            let cmd = String::from_utf8_lossy(&std::fs::read(d.path().join("cmdline")).unwrap_or_default())
                .replace('\0', " ");
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

fn session_args(nsys: &Path, eng: &Engine, work: &Path, duration: &str) -> String {
    format!(
        "--pod engine-0 --container engine --strategy session --session {} --process-match '{}' --nsys '{}' \
         --workdir '{}' --duration {duration} --wait-timeout 30",
        eng.session,
        eng.pattern(),
        nsys.display(),
        work.display()
    )
}

#[test]
fn pod_attach_session_capture_gated_by_the_library() {
    let Some(nu) = Nu::or_skip("pod_attach_session_capture_gated_by_the_library") else { return };
    let Some(nsys) = common::nsys_or_skip("pod_attach_session_capture_gated_by_the_library") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let si = StandIn::start(vec![pod("engine-0", json!({"app": "vllm"}), &["engine"])], PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), "ok");
    let work = dir.path().join("nsyskit-pod-attach-work");
    // --out-dir relative to Nushell's current folder
    let got = nu.json(&with_cluster(
        &si,
        &format!(
            "cd '{}'; pod-attach {} --out-dir out | {{strategy: $in.strategy, sidecar: $in.provenance.sidecar, \
             gate: ($in.gate | select verdict reason), gate_schema: $in.gate.document.schema, \
             gate_retry: $in.gate.document.retry, files: ($in.files | select name path size sha256), \
             typed: ($in.files.0.size | describe), cleanup: $in.cleanup, out_dir: $in.out_dir}}",
            dir.path().display(),
            session_args(&nsys, &eng, &work, "1")
        ),
    ));
    assert_eq!(got["strategy"], "session", "{got}");
    assert!(got["sidecar"].is_null());
    assert_eq!(got["out_dir"], dir.path().join("out").display().to_string());
    // gated in the plugin's process by the library: a CPU-only capture says RETRY (G1: no CUDA tracing)
    assert_eq!(got["gate"]["verdict"], "RETRY", "{got}");
    assert!(got["gate"]["reason"].as_str().unwrap().starts_with("gate-check (library): gates G1"), "{got}");
    assert_eq!(got["gate_schema"], "nsyskit.gate/v1");
    assert!(got["gate_retry"].as_array().unwrap().contains(&json!("G1")));
    let files = got["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"capture.nsys-rep") && names.contains(&"capture.sqlite"), "{names:?}");
    for f in files {
        let bytes = std::fs::read(f["path"].as_str().unwrap()).unwrap();
        assert_eq!(f["size"], json!(bytes.len()));
        assert_eq!(f["sha256"], nsyskit::pod_attach::sha256_hex(&bytes));
    }
    assert_eq!(got["typed"], "filesize");
    // a real capture of the running engine; the gate document is the library's on the copied files
    let out = dir.path().join("out");
    let ex = nsyskit::export::Export::open(&out.join("capture.sqlite")).unwrap();
    assert!(ex.count_rows("OSRT_API").unwrap() > 0);
    let gate = nsyskit::gate_check::run(&nsyskit::gate_check::GateOptions {
        capture: out.join("capture.nsys-rep"),
        sqlite: Some(out.join("capture.sqlite")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(got["gate_retry"], serde_json::to_value(&gate.retry).unwrap());
    // cleanup ran: the work folder is gone, and the record says so
    assert!(!work.exists());
    assert!(got["cleanup"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("removed ")), "{got}");
    let s = si.state.lock().unwrap();
    assert!(s.sidecar.is_none() && s.execs.iter().all(|(c, _)| c == "engine"));
}

/// Ctrl-C: SIGINT to nu mid-capture; nu forwards the interrupt to the plugin, the run is cancelled and cleanup
/// cancels the nsys session and removes the work folder; the error says so.
#[test]
fn pod_attach_ctrl_c_mid_capture_cleans_up() {
    let Some(nu) = Nu::or_skip("pod_attach_ctrl_c_mid_capture_cleans_up") else { return };
    let Some(nsys) = common::nsys_or_skip("pod_attach_ctrl_c_mid_capture_cleans_up") else { return };
    let _g = NSYS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let si = StandIn::start(vec![pod("engine-0", json!({"app": "vllm"}), &["engine"])], PatchMode::Ok, TarFault::None);
    let dir = tempfile::tempdir().unwrap();
    let eng = Engine::start(&nsys, dir.path(), "cc");
    let work = dir.path().join("nsyskit-pod-attach-work");
    let script = format!(
        "plugin use nsyskit\n{}",
        with_cluster(
            &si,
            &format!(
                "pod-attach {} --out-dir '{}'",
                session_args(&nsys, &eng, &work, "60"),
                dir.path().join("out").display()
            )
        )
    );
    let mut child = nu.command(&script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
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
    assert!(!status.success());
    assert!(rest.contains("pod-attach: interrupted (Ctrl-C); cleaning up"), "{rest}");
    assert!(rest.contains(&format!("`nsys cancel --session={}` exited", eng.session)), "{rest}");
    assert!(rest.contains("interrupted by Ctrl-C before the capture was copied out"), "{rest}");
    assert!(rest.contains("nsyskit::interrupted"), "{rest}");
    assert!(!work.exists(), "work folder removed");
}
