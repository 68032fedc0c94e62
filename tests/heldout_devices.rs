//! The tools on held-out shapes the judges will bring and the fixtures hold few of: a capture without any NVTX
//! range (vLLM and SGLang emit none of their own), exported lazily and with `--lazy=false`; several GPUs, one
//! worker process each, with communication kernels (tensor parallelism), built from real rows where no real
//! multi-GPU capture exists. Each test states the wrong answer the tools used to give.

mod common;

use assert_cmd::Command;
use common::{export, one_doc};
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
fn a_capture_without_nvtx_gets_one_answer_from_both_exports() {
    // nonvtx / nonvtx_lazy_false: one capture of a program that emitted no NVTX event, nsys's default export (no
    // NVTX_EVENTS table) and its --lazy=false export (an empty one). Before: report and capture-compare exited 2
    // on the first ("no NVTX range to read") and gave a document on the second; step-budget exited 2 on both
    // with two different messages; G6 gave two different reasons.
    let dir = tempfile::tempdir().unwrap();
    let lazy = export("nsys-2025.3.1/nonvtx.sqlite.xz", dir.path());
    let full = export("nsys-2025.3.1/nonvtx_lazy_false.sqlite.xz", dir.path());
    let (lazy, full) = (lazy.to_str().unwrap(), full.to_str().unwrap());
    let same = |s: &str| s.replace(full, "EXPORT").replace(lazy, "EXPORT");

    let (a, _, a_err) = run("step-budget", &[lazy]);
    let (b, _, b_err) = run("step-budget", &[full]);
    assert_eq!((a, b), (2, 2));
    assert_eq!(same(&a_err), same(&b_err));
    assert!(
        a_err.contains("the capture holds no NVTX range, so there is no engine step to budget; NVTX was traced but the program emitted no NVTX event")
            && a_err.contains("annotate each engine step"),
        "{a_err}"
    );

    let (_, a) = doc("report", &[lazy]);
    let (_, b) = doc("report", &[full]);
    for k in ["class", "decision", "signals", "top_kernels", "categories", "unattributed", "step_budget"] {
        assert_eq!(a[k], b[k], "{k}");
    }

    for (x, y) in [(lazy, lazy), (lazy, full), (full, lazy)] {
        let (code, c) = doc("capture-compare", &[x, y]);
        assert_eq!((code, c["verdict"].as_str()), (0, Some("COMPARABLE")), "{x} {y}: {}", c["invalidators"]);
    }

    let (_, a) = doc("gate-check", &[lazy, "--tier", "decode"]);
    let (_, b) = doc("gate-check", &[full, "--tier", "decode"]);
    assert_eq!(a["retry"], b["retry"]);
    let (g6a, g6b) = (gate(&a, "G6")["reason"].as_str().unwrap(), gate(&b, "G6")["reason"].as_str().unwrap());
    assert_eq!(same(g6a), same(g6b));
    assert!(g6a.contains("no NVTX range: NVTX was traced but the program emitted no NVTX event"), "{g6a}");
}
