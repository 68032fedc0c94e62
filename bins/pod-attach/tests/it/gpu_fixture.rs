//! The real GPU run of pod-attach (fixtures/pod-attach-gpu, made by scripts/gpu-pod-attach on an H200 with nsys
//! 2025.3.1 against the stand-in API server): its documents are valid, the copied SQLite export in the fixture
//! is byte for byte the one pod-attach checksummed, and gate-check, run again here on it, measures what the
//! run's gate measured. `nsys stats` (run in the "container") and the export agree on the kernel count.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_valid, root};
use nsyskit::contract::Document;
use serde_json::Value;

fn fixture(p: &str) -> PathBuf {
    root().join("fixtures/pod-attach-gpu").join(p)
}

fn doc(p: &str) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(fixture(p)).unwrap()).unwrap();
    assert_valid(&v);
    v
}

/// The endpoint capture's export, decompressed (xz) into a temporary folder.
fn endpoint_sqlite(dir: &Path) -> PathBuf {
    let out = dir.join("capture.sqlite");
    let src = fixture("endpoint/capture.sqlite.xz");
    // xz (xz-utils), else Python's lzma module
    let xz = Command::new("xz").arg("-dc").arg(&src).output().or_else(|_| {
        Command::new("python3")
            .args(["-c", "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())"])
            .arg(&src)
            .output()
    });
    let xz = xz.expect("xz or python3 is needed to read fixtures/pod-attach-gpu/endpoint/capture.sqlite.xz");
    assert!(xz.status.success(), "{}", String::from_utf8_lossy(&xz.stderr));
    std::fs::write(&out, &xz.stdout).unwrap();
    out
}

#[test]
fn endpoint_and_session_documents_from_the_h200() {
    for (p, strategy) in [("endpoint/pod-attach.json", "endpoint"), ("session/pod-attach.json", "session")] {
        let d = doc(p);
        assert_eq!(d["strategy"], strategy);
        assert_eq!(d["dry_run"], false);
        assert!(d["provenance"]["nsys"]["version"].as_str().unwrap().starts_with("2025.3.1"), "{p}");
        assert_eq!(d["provenance"]["engine"]["cuda_owner"], true, "{p}");
        assert_eq!(d["gate"]["verdict"], "PASS", "{p}");
        let names: Vec<&str> = d["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"capture.nsys-rep") && names.contains(&"capture.sqlite"), "{p}: {names:?}");
    }
    let ep = doc("endpoint/pod-attach.json");
    // the engine's nsys wrote the report after /stop_profile, in its own -o folder, seen through /proc/PID/root
    assert!(ep["provenance"]["source_report"]
        .as_str()
        .unwrap()
        .ends_with("/root/tmp/gpu-pod-attach/endpoint/engine.nsys-rep"));
    assert!(ep["provenance"]["engine"]["nsys_ancestor"]["cmdline"]
        .as_str()
        .unwrap()
        .contains("--capture-range-end=stop"));
    let log = std::fs::read_to_string(fixture("endpoint/engine-nsys.txt")).unwrap();
    assert!(
        log.contains("Capture range started in the application.")
            && log.contains("Capture range ended in the application."),
        "{log}"
    );
    // repeat: nsys 2025.3.1 never started a range; pod-attach said why
    let rlog = std::fs::read_to_string(fixture("endpoint-repeat/engine-nsys.txt")).unwrap();
    assert!(!rlog.contains("Capture range started"), "{rlog}");
    let rerr = std::fs::read_to_string(fixture("endpoint-repeat/pod-attach.stderr.txt")).unwrap();
    assert!(rerr.contains("no new .nsys-rep appeared") && rerr.contains("--capture-range-end=stop"), "{rerr}");
    // the second endpoint capture on the same engine and the attach strategy were refused
    let again = std::fs::read_to_string(fixture("endpoint/again.stderr.txt")).unwrap();
    assert!(again.contains("has already written its one report"), "{again}");
    let attach = std::fs::read_to_string(fixture("attach.stderr.txt")).unwrap();
    assert!(attach.contains("strategy attach refused: nsys 2025.3.1.0 does not list --attach-pid"), "{attach}");
}

#[test]
fn endpoint_export_is_the_checksummed_copy_and_gates_reproduce() {
    let d = doc("endpoint/pod-attach.json");
    let tmp = tempfile::tempdir().unwrap();
    let sqlite = endpoint_sqlite(tmp.path());
    let bytes = std::fs::read(&sqlite).unwrap();
    let rec = d["files"].as_array().unwrap().iter().find(|f| f["name"] == "capture.sqlite").unwrap();
    assert_eq!(rec["size"], bytes.len() as u64);
    assert_eq!(rec["sha256"], nsyskit::pod_attach::sha256_hex(&bytes));

    // gate-check again (the library, as the Nushell command runs it), here, on the same export: every gate the
    // run measured measures the same now (G2 looks at the .nsys-rep, which the fixture does not keep: skipped here)
    let gate =
        nsyskit::gate_check::run(&nsyskit::gate_check::GateOptions { capture: sqlite.clone(), ..Default::default() })
            .unwrap();
    let now = serde_json::to_value(&gate).unwrap();
    let then = &d["gate"]["document"];
    let gates = |g: &Value| -> Vec<(String, String, Value)> {
        g["gates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["id"] != "G2")
            .map(|x| {
                // the fixture was recorded when gate verdicts were lowercase and whole numbers floats (`9400.0`)
                (
                    x["id"].as_str().unwrap().to_string(),
                    x["verdict"].as_str().unwrap().to_uppercase(),
                    x["measured"].as_f64().map_or(Value::Null, Value::from),
                )
            })
            .collect()
    };
    assert_eq!(gates(&now), gates(then));
    assert_eq!(now["verdict"], "PASS", "{}", now);
    assert_eq!(gate.exit_code(), 0);

    // nsys stats' kernel summary (run in the container by pod-attach) and the export agree on the kernel count
    let csv = std::fs::read_to_string(fixture("endpoint/capture_cuda_gpu_kern_sum.csv")).unwrap();
    let mut rdr = csv::Reader::from_reader(csv.as_bytes());
    let col = rdr.headers().unwrap().iter().position(|h| h == "Instances").unwrap();
    let instances: u64 = rdr.records().map(|r| r.unwrap()[col].parse::<u64>().unwrap()).sum();
    let ex = nsyskit::export::Export::open(&sqlite).unwrap();
    assert_eq!(instances, ex.count_rows("CUPTI_ACTIVITY_KIND_KERNEL").unwrap() as u64);
    // node-level graph tracing: graph-replayed kernels are present as their own rows
    let node_rows: i64 = ex
        .conn()
        .query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert!(node_rows > 100_000, "{node_rows}");
}

/// `--bundle` on the H200 (scripts/gpu-pod-attach `CASES=bundle`, fixtures/pod-attach-gpu/bundle): the bundle's
/// `kernel_profile` carries every field of the seed's step 5 with real values, the bundle's own bytes before
/// the run survive, and `top_kernels` equals the copied kernel CSV row for row.
#[test]
fn the_h200_bundle_has_every_seed_field() {
    let text = std::fs::read_to_string(fixture("bundle/inference_perfbench_v1.json")).unwrap();
    let b: Value = serde_json::from_str(&text).unwrap();
    let kp = &b["kernel_profile"];
    let doc = doc("bundle/pod-attach.json");
    assert_eq!(doc["kernel_profile"]["vllm_pid"], kp["vllm_pid"]);
    assert_eq!(kp["nsys_rep_path"], "profiles/capture.nsys-rep");
    assert_eq!(kp["summary_csv_path"], "profiles/gpu_kern_sum.csv");
    assert_eq!(kp["cuda_api_csv_path"], "profiles/cuda_api_sum.csv");
    assert_eq!(kp["duration_s"], 3.0);
    assert!(kp["vllm_pid"].as_i64().unwrap() > 0);
    assert_eq!(kp["method"], "ephemeral-container-share-processes");
    let image = kp["sidecar_image"].as_str().unwrap();
    assert!(image.starts_with("ghcr.io/cfregly/nsys-sidecar:0.1.0@sha256:3146de96"), "{image}");
    assert!(image.ends_with(kp["sidecar_image_digest"].as_str().unwrap()));
    // the UTC of the capture itself (this run: 2026-12-01T14:43:01Z), not a file's mtime
    assert!(kp["captured_at"].as_str().unwrap().starts_with("2026-12-01T14:4"), "{}", kp["captured_at"]);
    // what the bundle held before the run is byte for byte still there
    assert!(text.contains(r#""numbers": [1.0, 12345678901234567890]"#), "{text}");
    assert_eq!(kp["operator_note"], "kept byte for byte");
    // top_kernels = the CSV's rows (name, total time, instances)
    let csv = std::fs::read_to_string(fixture("bundle/profiles/gpu_kern_sum.csv")).unwrap();
    let top = kp["top_kernels"].as_array().unwrap();
    assert!(!top.is_empty());
    assert_eq!(top.len(), csv.lines().skip(1).filter(|l| !l.trim().is_empty()).count().min(top.len()));
    for (row, k) in csv.lines().skip(1).zip(top) {
        let f = csv_fields(row);
        assert_eq!(k["total_time_ns"].as_i64().unwrap(), f[1].parse::<i64>().unwrap());
        assert_eq!(k["instances"].as_i64().unwrap(), f[2].parse::<i64>().unwrap());
        assert_eq!(k["name"].as_str().unwrap(), f[8]);
    }
}

/// The fields of one CSV line (RFC 4180 quotes, `""` inside a quoted field).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut chars) = (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// B72 on the real H200 endpoint capture: cudaProfilerStart (`cuProfilerStart`) came from the engine PID
/// pod-attach resolved, the process whose kernels the export holds; another PID is a finding.
#[test]
fn capture_trigger_came_from_the_cuda_owner() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = endpoint_sqlite(dir.path());
    let d = doc("endpoint/pod-attach.json");
    let pid = d["provenance"]["engine"]["pid"].as_u64().unwrap() as u32;
    let t = nsyskit::pod_attach::capture_trigger(&sqlite, pid).unwrap();
    eprintln!("MEASURED trigger: {t:?}");
    assert_eq!(t.trigger_pids, vec![pid as i64]);
    assert_eq!(t.kernel_pids, vec![pid as i64]);
    assert_eq!(t.from_engine, Some(true));
    assert_eq!(nsyskit::pod_attach::trigger_finding(&t), None);
    let other = nsyskit::pod_attach::capture_trigger(&sqlite, pid + 1).unwrap();
    assert_eq!(other.from_engine, Some(false));
    let f = nsyskit::pod_attach::trigger_finding(&other).unwrap();
    assert!(f.contains(&format!("came from PID [{pid}], not the CUDA-owning engine PID {}", pid + 1)), "{f}");
    let v = nsyskit::pod_attach::report_nsys_version(&sqlite);
    eprintln!("MEASURED report nsys version: {v:?}");
    // measured: the export's metadata says 2025.3.2.0 where `nsys --version` of that install said 2025.3.1.0
    assert_eq!(v.as_deref(), Some("2025.3.2.0"));
}

/// docs/pod-attach.md says `--bundle` merges as bundle-merge would: bundle-merge's library, given the H200 run's
/// bundle as it was before (`bundle.before.json`), the stats document of its copied `gpu_kern_sum.csv` and its
/// saved pod-attach document, writes exactly the bundle that run left.
#[test]
fn the_h200_bundle_is_what_bundle_merge_makes_of_the_saved_documents() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("inference_perfbench_v1.json");
    std::fs::copy(fixture("bundle/bundle.before.json"), &bundle).unwrap();
    let d = doc("bundle/pod-attach.json");
    let csv = fixture("bundle/profiles/gpu_kern_sum.csv");
    let opts = nsyskit::kern_csv_to_json::KernCsvOptions {
        captured_at: d["kernel_profile"]["captured_at"].as_str().map(String::from),
        ..Default::default()
    };
    let stats = nsyskit::kern_csv_to_json::convert(
        &std::fs::read(&csv).unwrap(),
        "profiles/gpu_kern_sum.csv",
        Some(&csv),
        None,
        &opts,
    )
    .unwrap();
    let docs = [
        nsyskit::bundle_merge::DocIn { value: serde_json::to_value(&stats).unwrap(), source: "stats".into(), line: 1 },
        nsyskit::bundle_merge::DocIn { value: d.clone(), source: "pod-attach.json".into(), line: 1 },
    ];
    nsyskit::bundle_merge::run(&bundle, &docs, nsyskit::bundle_merge::Mode::Write).unwrap();
    let made: Value = serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("bundle/inference_perfbench_v1.json")).unwrap()).unwrap();
    assert_eq!(made["kernel_profile"], kept["kernel_profile"]);
    assert_eq!(made["pod_attach"], kept["pod_attach"]);
    assert_eq!(made, kept);
}
