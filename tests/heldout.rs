//! The tools on the held-out captures of fixtures/README.md "Held-out shapes" (real H200 exports, nsys 2025.3.1):
//! a vLLM-V1-shaped engine with third-party labels (spawned, forked, forked without --trace-fork-before-exec),
//! NCCL world size 1 with NCCL's NVTX domain, copies hidden under compute on two streams, a program without NVTX
//! exported lazily and with --lazy=false. Each test states the wrong answer the tools used to give.

mod common;

use assert_cmd::Command;
use common::{export, fixture, one_doc};
use serde_json::Value;

fn run(bin: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin(bin).unwrap().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).to_string(), stderr)
}

/// The document of a run that must give one (exit 0 or 1).
fn doc(bin: &str, args: &[&str]) -> (i32, Value) {
    let (code, stdout, stderr) = run(bin, &[args, &["--compact"]].concat());
    assert!(code == 0 || code == 1, "{bin} exit {code}: {stderr}");
    (code, one_doc(stdout.as_bytes()))
}

fn gate<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["gates"].as_array().unwrap().iter().find(|g| g["id"] == id).unwrap()
}

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
    assert_eq!(g6["verdict"], "pass", "{g6}");
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
