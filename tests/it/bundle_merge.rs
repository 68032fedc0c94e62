//! bundle-merge: placement, losslessness, idempotence, atomic safe writes, --check/--stdout, parallel merges,
//! and the done-when check: every fixture CSV converts and merges, and kernel_profile.top_kernels matches the
//! CSV row for row.

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{json, Value};

fn merge() -> Command {
    Command::cargo_bin("bundle-merge").unwrap()
}

fn kern_csv(args: &[&str]) -> Vec<u8> {
    let out = Command::cargo_bin("kern-csv-to-json").unwrap().args(args).output().unwrap();
    assert!(out.status.code() == Some(0) || out.status.code() == Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    common::one_doc(&out.stdout);
    out.stdout
}

fn stats(rel: &str) -> Vec<u8> {
    kern_csv(&[common::fixture(rel).to_str().unwrap()])
}

fn gate(verdict: &str) -> Value {
    json!({"schema": "nsyskit.gate/v1", "tool": {"name": "gate-check", "version": "0.1.0"}, "verdict": verdict,
           "gates": [{"id": "G1", "name": "graph tracing", "verdict": "retry", "measured": 200, "threshold": 0, "reason": "graph-level"}]})
}

/// Run bundle-merge, check its exit code and validate its summary.
fn run_merge(bundle: &Path, docs: &[&Path], stdin: &[u8], code: i32) -> Value {
    let out = merge().arg(bundle).args(docs).write_stdin(stdin.to_vec()).output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
    common::one_doc(&out.stdout)
}

fn fail_merge(bundle: &Path, docs: &[&Path], stdin: &[u8]) -> String {
    let out = merge().arg(bundle).args(docs).write_stdin(stdin.to_vec()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn fixture_csvs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for ver in std::fs::read_dir(common::root().join("fixtures")).unwrap() {
        if let Ok(rd) = std::fs::read_dir(ver.unwrap().path().join("stats")) {
            v.extend(rd.map(|f| f.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "csv")));
        }
    }
    v.sort();
    v
}

#[test]
fn every_fixture_csv_merges_and_top_kernels_match_the_csv_row_for_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut kernel_files = 0;
    // one bundle per capture, all its reports merged by one bundle-merge run
    let mut by_bundle: std::collections::BTreeMap<PathBuf, Vec<(PathBuf, PathBuf)>> = Default::default();
    for (i, f) in fixture_csvs().into_iter().enumerate() {
        let name = f.file_stem().unwrap().to_str().unwrap();
        let capture = name.split('_').take(3).collect::<Vec<_>>().join("_");
        let version = f.parent().unwrap().parent().unwrap().file_name().unwrap().to_str().unwrap();
        let bundle = dir.path().join(format!("{version}_{capture}.json"));
        let doc = dir.path().join(format!("doc{i}.json"));
        std::fs::write(&doc, kern_csv(&[f.to_str().unwrap(), "--top", "0"])).unwrap();
        by_bundle.entry(bundle).or_default().push((f, doc));
    }
    assert!(by_bundle.len() >= 9);
    for (bundle, files) in &by_bundle {
        let docs: Vec<&Path> = files.iter().map(|(_, d)| d.as_path()).collect();
        let summary = run_merge(bundle, &docs, b"", 0);
        assert_eq!(summary["documents"].as_array().unwrap().len(), files.len());
        let b = read(bundle);
        for (f, d) in files {
            let doc = std::fs::read(d).unwrap();
            let report = serde_json::from_slice::<Value>(&doc).unwrap()["report"].as_str().unwrap().to_string();
            assert_eq!(b["kernel_profile"]["stats"][&report]["report"], report.as_str(), "{}", f.display());
            assert_eq!(b["kernel_profile"]["stats"][&report], serde_json::from_slice::<Value>(&doc).unwrap());
            if report != "cuda_gpu_kern_sum" {
                continue;
            }
            kernel_files += 1;
            let kp = &b["kernel_profile"];
            assert_eq!(kp["summary_csv_path"], f.to_str().unwrap());
            assert!(kp["captured_at"].as_str().unwrap().ends_with('Z'));
            let mut rdr = csv::Reader::from_path(f).unwrap();
            let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
            let top = kp["top_kernels"].as_array().unwrap();
            assert_eq!(top.len(), rows.len(), "{}", f.display());
            for (i, (k, r)) in top.iter().zip(&rows).enumerate() {
                let ns = |s: &str| s.parse::<f64>().unwrap().round() as i64;
                assert_eq!(k["rank"], i + 1);
                assert_eq!(k["name"].as_str().unwrap(), &r[8], "{} row {i}", f.display());
                assert_eq!(k["time_pct"].as_f64().unwrap(), r[0].parse::<f64>().unwrap());
                assert_eq!(k["total_time_ns"].as_i64().unwrap(), r[1].parse::<i64>().unwrap());
                assert_eq!(k["instances"].as_i64().unwrap(), r[2].parse::<i64>().unwrap());
                assert_eq!(k["avg_ns"].as_i64().unwrap(), ns(&r[3]));
                assert_eq!(k["med_ns"].as_i64().unwrap(), ns(&r[4]));
                assert_eq!(k["min_ns"].as_i64().unwrap(), ns(&r[5]));
                assert_eq!(k["max_ns"].as_i64().unwrap(), ns(&r[6]));
                assert_eq!(k["stddev_ns"].as_i64().unwrap(), ns(&r[7]));
            }
            let total: i64 = rows.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
            assert_eq!(kp["totals"]["total_time_ns"].as_i64().unwrap(), total);
        }
    }
    assert_eq!(kernel_files, 8, "the cuda_gpu_kern_sum CSVs under fixtures/ (two_rank added in stop 14)");
}

#[test]
fn lossless_for_everything_it_does_not_own() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("inference_perfbench_v1.json");
    let head = "{\n  \"benchmark\": \"decode\",\n  \"seed\": 12345678901234567890,\n  \"huge\": 123456789012345678901234567890.000,\n  \"ratio\": 1.0,\n  \"exp\": 1E+2,\n  \"text\": \"tab\\t\\u00e9\\ud83d\\ude00 \\\"q\\\" \\/\",\n  \"kernel_profile\": {\n    \"owner_note\": \"keep me\",\n    \"gpu\": {\"name\": \"H200\", \"mem_gib\": 141.0}";
    let tail = "\n  },\n  \"zeta\": [1.10, -0.0, {\"b\": 1, \"a\": 2}]\n}\n";
    std::fs::write(&bundle, format!("{head}{tail}")).unwrap();
    let kern = stats("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    run_merge(&bundle, &[], &kern, 0);
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert!(text.starts_with(&format!("{head},\n    \"top_kernels\": [\n      {{\n        \"rank\": 1,")), "{text}");
    assert!(text.ends_with(tail), "{text}");
    let v = read(&bundle);
    assert_eq!(v["kernel_profile"]["owner_note"], "keep me");
    assert_eq!(v["kernel_profile"]["top_kernels"][0]["total_time_ns"], 6009202);
    let keys: Vec<&String> = v["kernel_profile"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["owner_note", "gpu", "top_kernels", "totals", "summary_csv_path", "captured_at", "stats"]);
    // idempotent: the same documents again give the same bytes, and --check says so
    run_merge(&bundle, &[], &kern, 0);
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), text);
    let out = merge().arg("--check").arg(&bundle).write_stdin(kern.clone()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(common::one_doc(&out.stdout)["changed"], false);
    // a different document replaces only its own place
    let other = stats("nsys-2025.3.1/stats/decode_clean_cuda_gpu_kern_sum.csv");
    let out = merge().arg("--check").arg(&bundle).write_stdin(other.clone()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(common::one_doc(&out.stdout)["changed"], true);
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), text, "--check writes nothing");
    run_merge(&bundle, &[], &other, 0);
    let text2 = std::fs::read_to_string(&bundle).unwrap();
    assert!(text2.starts_with(head) && text2.ends_with(tail));
    assert_eq!(read(&bundle)["kernel_profile"]["top_kernels"][0]["name"], "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT");
    assert_eq!(read(&bundle)["kernel_profile"]["top_kernels"][0]["total_time_ns"], 12365275);
}

#[test]
fn a_retry_gate_is_recorded_and_documents_come_from_files_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let g = dir.path().join("gate.json");
    std::fs::write(&g, serde_json::to_string_pretty(&gate("RETRY")).unwrap()).unwrap();
    let summary = run_merge(&bundle, &[&g], b"", 0);
    assert_eq!(summary["created"], true);
    assert_eq!(summary["written"], true);
    assert_eq!(summary["documents"][0]["places"], json!(["kernel_profile.gates"]));
    assert_eq!(read(&bundle)["kernel_profile"]["gates"]["verdict"], "RETRY");
    // NDJSON on stdin: provenance + a PASS gate (which replaces the RETRY)
    let prov = json!({"schema": "nsyskit.provenance/v1", "tool": {"name": "nsys-resolve", "version": "0.1.0"}, "nsys": {"version": "2025.3.1"}});
    let stdin = format!("{}\n{}\n", prov, gate("PASS"));
    let summary = run_merge(&bundle, &[], stdin.as_bytes(), 0);
    assert_eq!(summary["documents"].as_array().unwrap().len(), 2);
    assert_eq!(summary["documents"][1]["line"], 2);
    let v = read(&bundle);
    assert_eq!(v["provenance"]["nsys"]["version"], "2025.3.1");
    assert_eq!(v["kernel_profile"]["gates"]["verdict"], "PASS");
    // every kind of the table has its place
    let kinds = [
        ("ranges", "kernel_profile.ranges"),
        ("readiness", "kernel_profile.readiness"),
        ("report", "report"),
        ("serve-capture", "serve_capture"),
        ("pod-attach", "pod_attach"),
    ];
    for (kind, place) in kinds {
        let d = json!({"schema": format!("nsyskit.{kind}/v1"), "tool": {"name": kind, "version": "0.1.0"}});
        let s = run_merge(&bundle, &[], d.to_string().as_bytes(), 0);
        assert_eq!(s["documents"][0]["places"][0], place);
    }
    let cmp = json!({"schema": "nsyskit.compare/v1", "tool": {"name": "capture-compare", "version": "0.1.0"},
                     "a": {"path": "a.sqlite"}, "b": {"path": "b.sqlite"}});
    let s = run_merge(&bundle, &[], cmp.to_string().as_bytes(), 0);
    assert_eq!(s["documents"][0]["places"][0], "comparisons.a.sqlite vs b.sqlite");
    assert_eq!(read(&bundle)["comparisons"]["a.sqlite vs b.sqlite"]["a"]["path"], "a.sqlite");
}

#[test]
fn bad_bundles_and_bad_documents_leave_the_bundle_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    let cases: &[(&str, &str)] = &[
        ("not json", "b.json: line 1 column 2: not valid JSON"),
        ("[1, 2]", "b.json: $: the bundle must be a JSON object, found an array"),
        ("\"str\"", "must be a JSON object, found a string"),
        ("{\n  \"a\": 1,\n  \"kernel_profile\": [1]\n}", "b.json: line 3: $.kernel_profile: must be an object"),
        ("{\"kernel_profile\": {\"gates\": 1}, \"kernel_profile\": {}}", "duplicate key"),
        ("{\"a\": 1}{\"b\": 2}", "not valid JSON"),
    ];
    for (content, msg) in cases {
        let bundle = dir.path().join("b.json");
        std::fs::write(&bundle, format!("{content}\n")).unwrap();
        let err = fail_merge(&bundle, &[], &doc);
        assert!(err.contains(msg), "{content}: {err}");
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), format!("{content}\n"));
    }
    let bundle = dir.path().join("good.json");
    let original = "{\"x\": 1.0}";
    std::fs::write(&bundle, original).unwrap();
    let bad_docs: &[(&[u8], &str)] = &[
        (
            b"{\"schema\": \"nsyskit.unknown/v1\"}",
            "<stdin>: line 2: $.schema: bundle-merge has no place for \"nsyskit.unknown/v1\"",
        ),
        (b"{\"no\": 1}", "$.schema: missing"),
        (b"\n\n{\"schema\": \"x\"", "<stdin>: line 4 column 14: not valid JSON"),
        (b"42", "$: a document must be a JSON object"),
        (b"{\"schema\": \"nsyskit.stats/v1\", \"report\": \"cuda_gpu_kern_sum\"}", "$.top_kernels: missing"),
    ];
    for (d, msg) in bad_docs {
        // a good document first: nothing is merged when any document is bad
        let stdin = [doc.as_slice(), b"\n", d].concat();
        let err = fail_merge(&bundle, &[], &stdin);
        assert!(err.contains(msg), "{}: {err}", String::from_utf8_lossy(d));
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), original);
    }
    let err = fail_merge(&bundle, &[], b" \n");
    assert!(err.contains("no documents to merge"), "{err}");
    let err = fail_merge(&bundle, &[Path::new("/nonexistent/doc.json")], b"");
    assert!(err.contains("/nonexistent/doc.json: no such file"));
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), original);
    assert!(!dir.path().join("b.json.tmp").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(leftovers.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "{leftovers:?}");
}

#[test]
fn permissions_stdout_and_check() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    std::fs::write(&bundle, "{}").unwrap();
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o640)).unwrap();
    let doc = serde_json::to_vec(&gate("RETRY")).unwrap();
    // --stdout: the merged bundle on stdout, the summary on stderr, nothing written
    let out = merge().arg("--stdout").arg(&bundle).write_stdin(doc.clone()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["kernel_profile"]["gates"]["verdict"], "RETRY");
    let summary: Value = serde_json::from_slice(&out.stderr).unwrap();
    common::assert_valid(&summary);
    assert_eq!(summary["mode"], "stdout");
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), "{}");
    // --check: exit 1, nothing written
    let s = run_merge(&bundle, &[], &doc, 0);
    assert_eq!(s["written"], true);
    assert_eq!(std::fs::read(&bundle).unwrap(), out.stdout, "--stdout printed exactly what is written");
    assert_eq!(std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777, 0o640);
    let s = run_merge(&bundle, &[], &doc, 0);
    assert_eq!((s["changed"].as_bool(), s["written"].as_bool()), (Some(false), Some(false)));
    // a new bundle in a missing folder is an error naming it
    let err = fail_merge(&dir.path().join("no/such/b.json"), &[], &doc);
    assert!(err.contains("no/such/b.json"), "{err}");
    // the help's examples run as printed in tests/it/help_examples.rs
}

#[test]
fn parallel_merges_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let reports = [
        "cuda_gpu_kern_sum",
        "cuda_api_sum",
        "osrt_sum",
        "nvtx_sum",
        "nvtx_pushpop_sum",
        "nvtx_startend_sum",
        "nvtx_kern_sum",
        "nvtx_gpu_proj_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
        "cuda_kern_exec_sum",
    ];
    let mut docs = Vec::new();
    for r in reports {
        let p = dir.path().join(format!("{r}.json"));
        std::fs::write(&p, stats(&format!("nsys-2025.3.1/stats/gpu_full_node_{r}.csv"))).unwrap();
        docs.push(p);
    }
    let g = dir.path().join("gate.json");
    std::fs::write(&g, gate("RETRY").to_string()).unwrap();
    docs.push(g);
    let exe = assert_cmd::cargo::cargo_bin("bundle-merge");
    for round in 0..3 {
        let bundle = dir.path().join(format!("bundle{round}.json"));
        std::fs::write(&bundle, "{\n  \"run\": 1.0\n}\n").unwrap();
        let children: Vec<_> = docs
            .iter()
            .map(|d| {
                std::process::Command::new(&exe)
                    .arg(&bundle)
                    .arg(d)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let v = read(&bundle);
        assert_eq!(v["run"], 1.0);
        for r in reports {
            assert_eq!(v["kernel_profile"]["stats"][r]["report"], r, "round {round}: {r} lost");
        }
        assert_eq!(v["kernel_profile"]["gates"]["verdict"], "RETRY", "round {round}: gate lost");
        assert!(v["kernel_profile"]["top_kernels"].is_array());
        // each run unlinks the lock file it held; a run that waited on an unlinked one locked the path again
        assert!(!lock_path_of(&bundle).exists(), "round {round}: a lock file was left");
    }
}

/// Issue #41: bundle-merge used to leave an empty `BUNDLE.lock` beside every bundle it wrote. A created bundle,
/// a changed one, an unchanged one, a refused document and a stale lock file of an earlier version: afterwards
/// the folder holds the bundle alone.
#[test]
fn no_lock_file_is_left_beside_the_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let names = || -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        v.sort();
        v
    };
    let pass = serde_json::to_vec(&gate("PASS")).unwrap();
    let retry = serde_json::to_vec(&gate("RETRY")).unwrap();
    for (doc, what) in [(&pass, "created"), (&retry, "changed"), (&retry, "unchanged")] {
        let (code, _, err) = merge_limited(&[bundle.as_os_str()], doc);
        assert_eq!(code, Some(0), "{what}: {err}");
        assert_eq!(names(), ["b.json"], "{what}");
    }
    assert_eq!(read(&bundle)["kernel_profile"]["gates"]["verdict"], "RETRY");
    let (code, _, _) = merge_limited(&[bundle.as_os_str()], b"{\"schema\": \"nsyskit.nope/v1\"}");
    assert_eq!(code, Some(2));
    assert_eq!(names(), ["b.json"], "refused");
    // a lock file an earlier version left is used, then removed
    std::fs::write(lock_path_of(&bundle), "").unwrap();
    let (code, _, err) = merge_limited(&[bundle.as_os_str()], &pass);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(names(), ["b.json"], "stale lock");
    assert_eq!(read(&bundle)["kernel_profile"]["gates"]["verdict"], "PASS");
}

#[test]
fn bom_non_utf8_and_symlinked_bundles() {
    let dir = tempfile::tempdir().unwrap();
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    // a BOM and a missing final newline are kept
    let bundle = dir.path().join("bom.json");
    std::fs::write(&bundle, "\u{feff}{\n    \"a\": 1\n}").unwrap();
    run_merge(&bundle, &[], &doc, 0);
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert!(
        text.starts_with("\u{feff}{\n    \"a\": 1,\n    \"kernel_profile\": {\n        \"gates\": {\n"),
        "{text:?}"
    );
    assert!(text.ends_with("\n    }\n}"), "{text:?}");
    run_merge(&bundle, &[], &doc, 0);
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), text);
    // not UTF-8: exit 2 naming the line, bytes kept
    let bad = dir.path().join("latin1.json");
    std::fs::write(&bad, b"{\n\"a\": \"\xe9\"}").unwrap();
    let err = fail_merge(&bad, &[], &doc);
    assert!(err.contains("latin1.json: line 2: not UTF-8 text"), "{err}");
    assert_eq!(std::fs::read(&bad).unwrap(), b"{\n\"a\": \"\xe9\"}");
    // a symlinked bundle is written through to its target; the link stays a link
    let target = dir.path().join("real.json");
    std::fs::write(&target, "{}\n").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    run_merge(&link, &[], &doc, 0);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(read(&target)["kernel_profile"]["gates"]["verdict"], "PASS");
}

/// The real documents of the serve-capture run on the H200 (fixtures/serve-capture-gpu/): a RETRY gate,
/// provenance, ranges and serve-capture, merged by one run next to a kernel summary.
#[test]
fn real_documents_of_a_serve_capture_run() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("inference_perfbench_v1.json");
    std::fs::write(&bundle, "{\n  \"model\": \"vibeserve\",\n  \"throughput_tok_s\": 1234.50\n}\n").unwrap();
    let fx = |n: &str| common::fixture(&format!("serve-capture-gpu/{n}.json"));
    let files = [fx("provenance"), fx("gate"), fx("ranges"), fx("serve-capture")];
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let kern = stats("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let mut cmd = merge();
    cmd.arg(&bundle).args(&paths).arg("-").write_stdin(kern);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::one_doc(&out.stdout);
    let places: Vec<&str> =
        summary["documents"].as_array().unwrap().iter().map(|d| d["places"][0].as_str().unwrap()).collect();
    assert_eq!(
        places,
        ["provenance", "kernel_profile.gates", "kernel_profile.ranges", "serve_capture", "kernel_profile.top_kernels"]
    );
    let b = read(&bundle);
    assert_eq!(b["kernel_profile"]["gates"]["verdict"], "RETRY");
    for (file, place) in files.iter().zip([
        &b["provenance"],
        &b["kernel_profile"]["gates"],
        &b["kernel_profile"]["ranges"],
        &b["serve_capture"],
    ]) {
        assert_eq!(place, &read(file), "{}", file.display());
    }
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert!(text.starts_with("{\n  \"model\": \"vibeserve\",\n  \"throughput_tok_s\": 1234.50,\n  \"provenance\": {"));
    // the same run again: same bytes
    let mut cmd = merge();
    cmd.arg(&bundle)
        .args(&paths)
        .arg("-")
        .write_stdin(stats("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv"));
    let out = cmd.output().unwrap();
    assert_eq!(common::one_doc(&out.stdout)["changed"], false);
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), text);
}

// ---------------------------------------------------------------------------------------------------------
// Idempotence for any formatting of the bundle (issue 17: an indented top-level `{` grew on every merge).

/// splitmix64: a small seeded generator (no dependency; the same seed gives the same cases).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// A JSON text tree that keeps leaf text as written (number text such as `1.0`, string escapes).
enum Node {
    Leaf(String),
    Arr(Vec<Node>),
    Obj(Vec<(String, Node)>),
}

const LEAVES: &[&str] = &[
    "1",
    "1.0",
    "-0.5e-3",
    "1E+2",
    "12345678901234567890",
    "true",
    "false",
    "null",
    "\"x\"",
    "\"a\\u00e9\\n\"",
    "\"tab\\tq\\\"\"",
    "\"\\/\"",
    "\"{[,:]}\"",
    "\"\"",
];

fn rand_node(r: &mut Rng, depth: usize, keys: &[&str]) -> Node {
    match if depth >= 3 { 0 } else { r.below(4) } {
        0 | 1 => Node::Leaf(r.pick(LEAVES).to_string()),
        2 => Node::Arr((0..r.below(4)).map(|_| rand_node(r, depth + 1, keys)).collect()),
        _ => Node::Obj(rand_members(r, depth + 1, keys)),
    }
}

fn rand_members(r: &mut Rng, depth: usize, keys: &[&str]) -> Vec<(String, Node)> {
    let mut out: Vec<(String, Node)> = Vec::new();
    for _ in 0..r.below(5) {
        let k = r.pick(keys).to_string();
        if out.iter().all(|(x, _)| *x != k) {
            out.push((k, rand_node(r, depth, &["a", "b", "verdict", "gates", "é", "k\\\"q"])));
        }
    }
    out
}

/// A random bundle: unknown members, sometimes a `kernel_profile` (object, maybe holding owned places) and
/// `comparisons`, and owned top-level places holding anything.
fn rand_bundle(r: &mut Rng) -> Node {
    let mut members = rand_members(r, 1, &["benchmark", "seed", "ratio", "notes", "report", "provenance", "zz"]);
    if r.chance(60) {
        let mut kp = rand_members(r, 2, &["owner_note", "gates", "ranges", "top_kernels", "totals", "keep"]);
        if r.chance(40) {
            kp.push(("stats".into(), Node::Obj(rand_members(r, 3, &["cuda_gpu_kern_sum", "nvtx_sum", "x"]))));
        }
        let at = r.below(members.len() + 1);
        members.insert(at, ("kernel_profile".into(), Node::Obj(kp)));
    }
    if r.chance(30) {
        members.push(("comparisons".into(), Node::Obj(rand_members(r, 2, &["a vs b", "old"]))));
    }
    Node::Obj(members)
}

struct Fmt {
    nl: &'static str,
    unit: String,
}

fn ws(r: &mut Rng) -> &'static str {
    ["", "", " ", "  ", "\t"][r.below(5)]
}

/// Write a node with random formatting: each container pretty or compact, random spaces around `:` and `,`,
/// trailing whitespace at line ends.
fn write_node(r: &mut Rng, n: &Node, f: &Fmt, indent: &str, out: &mut String) {
    let (open, close, items): (char, char, Vec<(Option<&str>, &Node)>) = match n {
        Node::Leaf(t) => {
            out.push_str(t);
            return;
        }
        Node::Arr(v) => ('[', ']', v.iter().map(|x| (None, x)).collect()),
        Node::Obj(m) => ('{', '}', m.iter().map(|(k, x)| (Some(k.as_str()), x)).collect()),
    };
    out.push(open);
    if items.is_empty() {
        out.push_str(ws(r));
        out.push(close);
        return;
    }
    let pretty = r.chance(70);
    let inner = format!("{indent}{}", f.unit);
    for (i, (k, v)) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(ws(r));
            out.push(',');
        }
        if pretty {
            if r.chance(20) {
                out.push_str(ws(r)); // trailing whitespace
            }
            out.push_str(f.nl);
            out.push_str(&inner);
        } else {
            out.push_str(ws(r));
        }
        if let Some(k) = k {
            out.push('"');
            out.push_str(k);
            out.push('"');
            out.push_str(ws(r));
            out.push(':');
            out.push_str(ws(r));
        }
        write_node(r, v, f, &inner, out);
    }
    if pretty {
        out.push_str(f.nl);
        out.push_str(indent);
    } else {
        out.push_str(ws(r));
    }
    out.push(close);
}

fn rand_text(r: &mut Rng) -> String {
    let f = Fmt {
        nl: if r.chance(30) { "\r\n" } else { "\n" },
        unit: ["  ", "    ", "\t", " ", "   ", "\t\t"][r.below(6)].to_string(),
    };
    let mut out = String::new();
    if r.chance(10) {
        out.push('\u{feff}');
    }
    let lead = [String::new(), "  ".into(), "\t".into(), f.nl.to_string(), format!("{}  ", f.nl)][r.below(5)].clone();
    out.push_str(&lead);
    let indent = lead.rsplit('\n').next().unwrap_or("").to_string();
    let bundle = rand_bundle(r);
    write_node(r, &bundle, &f, &indent, &mut out);
    out.push_str([String::new(), f.nl.to_string(), format!("  {}", f.nl), "\t".into()][r.below(4)].as_str());
    out
}

fn rand_docs(r: &mut Rng) -> Vec<nsyskit::bundle_merge::DocIn> {
    let tool = json!({"name": "t", "version": "0"});
    let all = [
        json!({"schema": "nsyskit.gate/v1", "tool": tool, "verdict": "PASS", "gates": [{"id": "G1", "v": 1.5}]}),
        json!({"schema": "nsyskit.ranges/v1", "tool": tool, "ranges": [], "nested": {"a": {"b": [1, 2, {}]}, "e": []}}),
        json!({"schema": "nsyskit.stats/v1", "tool": tool, "report": "cuda_gpu_kern_sum", "source": "k.csv",
               "top_kernels": [{"rank": 1, "name": "k"}], "totals": {"kernels": 1}, "captured_at": null}),
        json!({"schema": "nsyskit.stats/v1", "tool": tool, "report": "nvtx_sum", "rows": [{"a": "é\n"}]}),
        json!({"schema": "nsyskit.compare/v1", "tool": tool, "a": "x.sqlite", "b": "y.sqlite", "deltas": {}}),
        json!({"schema": "nsyskit.report/v1", "tool": tool, "class": "mixed_or_unclear"}),
        json!({"schema": "nsyskit.provenance/v1", "tool": tool, "flags": ["--trace=cuda"]}),
    ];
    let n = 1 + r.below(3);
    (0..n)
        .map(|i| nsyskit::bundle_merge::DocIn {
            value: all[r.below(all.len())].clone(),
            source: "d.json".into(),
            line: i + 1,
        })
        .collect()
}

/// A dotted place as its keys (the key under `comparisons` may hold dots).
fn split_place(p: &str) -> Vec<&str> {
    match p.strip_prefix("comparisons.") {
        Some(k) => vec!["comparisons", k],
        None => p.split('.').collect(),
    }
}

/// The bundle's value with the places the documents own removed (what must survive the merge as it was).
fn without_owned(v: &Value, places: &[String]) -> Value {
    let mut v = v.clone();
    for p in places {
        let parts = split_place(p);
        let parent = format!("/{}", parts[..parts.len() - 1].join("/"));
        let parent = if parts.len() == 1 { Some(&mut v) } else { v.pointer_mut(&parent) };
        if let Some(o) = parent.and_then(|x| x.as_object_mut()) {
            o.remove(*parts.last().unwrap());
        }
    }
    if let Some(kp) = v.get_mut("kernel_profile").and_then(|k| k.as_object_mut()) {
        if kp.get("stats").map(|s| s.as_object().map(|o| o.is_empty()).unwrap_or(false)).unwrap_or(false) {
            kp.remove("stats");
        }
    }
    // parents that the merge created are not part of the old text either
    for k in ["kernel_profile", "comparisons"] {
        if v.get(k).map(|x| x.as_object().map(|o| o.is_empty()).unwrap_or(false)).unwrap_or(false) {
            v.as_object_mut().unwrap().remove(k);
        }
    }
    v
}

#[test]
fn idempotent_for_any_formatting_of_the_bundle() {
    use nsyskit::bundle_merge::merge_text;
    let cases: usize = std::env::var("NSYSKIT_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2000);
    let seed: u64 = std::env::var("NSYSKIT_HOSTILE_SEED").ok().and_then(|c| c.parse().ok()).unwrap_or(17);
    let mut r = Rng(seed);
    // the case of the issue first
    let mut texts =
        vec!["  {}".to_string(), "  {\n    \"a\": 1\n  }\n".to_string(), "\t{\r\n\t\t\"a\": 1 \r\n\t}".to_string()];
    while texts.len() < cases {
        texts.push(rand_text(&mut r));
    }
    let mut failures = Vec::new();
    for (i, t0) in texts.iter().enumerate() {
        let v0: Value = serde_json::from_str(t0.trim_start_matches('\u{feff}'))
            .unwrap_or_else(|e| panic!("case {i}: generator wrote bad JSON ({e}): {t0:?}"));
        let docs = rand_docs(&mut r);
        let docs2 = rand_docs(&mut r);
        let (t1, placed) = merge_text(Some(t0), "b.json", &docs).unwrap_or_else(|e| panic!("case {i}: {e}\n{t0:?}"));
        let v1: Value = serde_json::from_str(t1.trim_start_matches('\u{feff}'))
            .unwrap_or_else(|e| panic!("case {i}: merged text is not JSON ({e}): {t1:?}"));
        let places: Vec<String> = placed.iter().flat_map(|m| m.places.clone()).collect();
        // every document is at its place (the last one per place wins)
        for (d, m) in docs.iter().zip(&placed) {
            let last = m.places.last().unwrap();
            let later = placed
                .iter()
                .zip(&docs)
                .skip_while(|(x, _)| !std::ptr::eq(*x, m))
                .skip(1)
                .any(|(x, _)| x.places.contains(last));
            if !later {
                let ptr = format!("/{}", split_place(last).join("/"));
                assert_eq!(v1.pointer(&ptr), Some(&d.value), "case {i}: {last} not merged\n{t1:?}");
            }
        }
        assert_eq!(
            without_owned(&v1, &places),
            without_owned(&v0, &places),
            "case {i}: a field it does not own changed\n{t0:?}\n{t1:?}"
        );
        let (t1b, _) = merge_text(Some(&t1), "b.json", &docs).unwrap();
        let (t2, _) = merge_text(Some(&t1), "b.json", &docs2).unwrap();
        let (t2b, _) = merge_text(Some(&t2), "b.json", &docs2).unwrap();
        if t1b != t1 || t2b != t2 {
            failures.push(format!("case {i}: not idempotent: {t0:?}\n first merge:  {t1:?}\n merged again: {t1b:?}"));
        }
    }
    eprintln!(
        "idempotence: {} randomly formatted bundles (seed {seed}), {} not idempotent",
        texts.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} bundles:\n{}",
        failures.len(),
        texts.len(),
        failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n")
    );
}

// ---------------------------------------------------------------------------------------------------------
// Issue 17 regressions: what a bundle path may be, read-only bundles, hard links, stale temp files,
// duplicate keys.

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

/// Run bundle-merge with a time limit (a FIFO must never hang it): (exit code, stdout, stderr).
fn merge_limited(args: &[&std::ffi::OsStr], stdin: &[u8]) -> (Option<i32>, Vec<u8>, String) {
    let out =
        merge().args(args).write_stdin(stdin.to_vec()).timeout(std::time::Duration::from_secs(20)).output().unwrap();
    (out.status.code(), out.stdout, String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn a_bundle_that_is_not_a_regular_file_is_refused_and_untouched() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = tempfile::tempdir().unwrap();
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    let fifo = dir.path().join("fifo.json");
    mkfifo(&fifo);
    let sock_path = dir.path().join("sock.json");
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let folder = dir.path().join("folder.json");
    std::fs::create_dir(&folder).unwrap();
    let null_before = std::fs::metadata("/dev/null").unwrap();
    for (path, kind) in [
        (Path::new("/dev/null"), "a character device"),
        (fifo.as_path(), "a FIFO"),
        (sock_path.as_path(), "a socket"),
        (folder.as_path(), "a directory"),
    ] {
        for mode in [None, Some("--check"), Some("--stdout")] {
            let mut args: Vec<&std::ffi::OsStr> = mode.iter().map(|m| std::ffi::OsStr::new(*m)).collect();
            args.push(path.as_os_str());
            let (code, stdout, err) = merge_limited(&args, &doc);
            assert_eq!(code, Some(2), "{} {mode:?}: {err}", path.display());
            assert!(stdout.is_empty());
            assert!(err.contains(&format!("{}: is {kind}, not a bundle file", path.display())), "{err}");
            assert!(!err.contains("panicked"), "{err}");
            // no lock file and no temporary file beside it
            assert!(!lock_path_of(path).exists(), "{}: a lock file was created", path.display());
        }
    }
    let null_after = std::fs::metadata("/dev/null").unwrap();
    assert!(null_after.file_type().is_char_device());
    assert_eq!((null_before.ino(), null_before.rdev()), (null_after.ino(), null_after.rdev()));
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert_eq!(names.len(), 3, "nothing new beside the paths: {names:?}");
}

fn lock_path_of(p: &Path) -> PathBuf {
    nsyskit::bundle_merge::lock_path(p)
}

#[test]
fn a_read_only_bundle_is_refused_and_check_and_stdout_still_read_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    std::fs::write(&bundle, "{\"keep\": 1.0}\n").unwrap();
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o444)).unwrap();
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    let err = fail_merge(&bundle, &[], &doc);
    assert!(err.contains("b.json: is read-only for you (mode 0444): refusing to replace it"), "{err}");
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), "{\"keep\": 1.0}\n");
    assert_eq!(std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777, 0o444);
    // nothing is written by --check and --stdout: they still work
    let (code, _, _) = merge_limited(&[std::ffi::OsStr::new("--check"), bundle.as_os_str()], &doc);
    assert_eq!(code, Some(1));
    let (code, stdout, _) = merge_limited(&[std::ffi::OsStr::new("--stdout"), bundle.as_os_str()], &doc);
    assert_eq!(code, Some(0));
    assert!(String::from_utf8(stdout).unwrap().starts_with("{\"keep\": 1.0,"));
}

#[test]
fn a_hard_linked_bundle_is_refused_so_the_links_never_diverge() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let other = dir.path().join("other-name.json");
    std::fs::write(&bundle, "{}\n").unwrap();
    std::fs::hard_link(&bundle, &other).unwrap();
    let ino = std::fs::metadata(&bundle).unwrap().ino();
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    let err = fail_merge(&bundle, &[], &doc);
    assert!(err.contains("b.json: has 2 hard links: an atomic replace would break them"), "{err}");
    for p in [&bundle, &other] {
        assert_eq!(std::fs::read_to_string(p).unwrap(), "{}\n");
        assert_eq!(std::fs::metadata(p).unwrap().ino(), ino);
    }
    // with one name left it merges (and a symlink to it is still written through)
    std::fs::remove_file(&other).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&bundle, &link).unwrap();
    run_merge(&link, &[], &doc, 0);
    assert_eq!(read(&bundle)["kernel_profile"]["gates"]["verdict"], "PASS");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
}

#[test]
fn temp_files_of_a_killed_run_are_removed_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    std::fs::write(&bundle, "{}\n").unwrap();
    // what a run killed between writing its temporary file and renaming it leaves (the name pattern of the
    // real temp files: `.b.json.` + 6 random characters + `.tmp`)
    let stale = dir.path().join(".b.json.Xq3zT9.tmp");
    std::fs::write(&stale, vec![b'x'; 1 << 20]).unwrap();
    // files that only look alike are not ours: kept
    let keep = [
        dir.path().join(".b.json.notours.tmp"),
        dir.path().join(".other.json.Xq3zT9.tmp"),
        dir.path().join("b.json.tmp"),
    ];
    for k in &keep {
        std::fs::write(k, "mine").unwrap();
    }
    let doc = serde_json::to_vec(&gate("PASS")).unwrap();
    // --check takes no lock and removes nothing
    let (code, _, _) = merge_limited(&[std::ffi::OsStr::new("--check"), bundle.as_os_str()], &doc);
    assert_eq!(code, Some(1));
    assert!(stale.exists());
    let out = merge().arg(&bundle).write_stdin(doc).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".b.json.Xq3zT9.tmp, the temporary file of an interrupted earlier run"), "{err}");
    assert!(!stale.exists(), "the stale temp file is gone");
    for k in &keep {
        assert_eq!(std::fs::read_to_string(k).unwrap(), "mine");
    }
    assert_eq!(read(&bundle)["kernel_profile"]["gates"]["verdict"], "PASS");
    // and a real run leaves no temp file of its own
    let tmps: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".b.json.") && n.len() == ".b.json.XXXXXX.tmp".len())
        .collect();
    assert!(tmps.is_empty(), "{tmps:?}");
}

#[test]
fn duplicate_keys_in_a_document_are_refused_naming_the_key_and_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let before = "{\"kernel_profile\": {\"ranges\": {\"real\": true}}}\n";
    std::fs::write(&bundle, before).unwrap();
    // the real ranges array, then a second `ranges` member that last-wins parsing let replace it
    let doc = "{\"schema\":\"nsyskit.ranges/v1\",\"tool\":{\"name\":\"sqlite-ranges\",\"version\":\"0\"},\n\"ranges\":[{\"label\":\"a\"}],\n\"ranges\":[]}\n";
    let err = fail_merge(&bundle, &[], doc.as_bytes());
    assert!(err.contains("<stdin>: line 3 column"), "{err}");
    assert!(err.contains("duplicate key \"ranges\" at $.ranges"), "{err}");
    assert!(err.contains("in the bundle that is kernel_profile.ranges.ranges"), "{err}");
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), before);
    // deeper, in a file, in a list of documents
    let f = dir.path().join("docs.json");
    std::fs::write(&f, "[{\"schema\":\"nsyskit.gate/v1\",\"gates\":[{\"id\":\"G1\",\"id\":\"G2\"}]}]").unwrap();
    let err = fail_merge(&bundle, &[&f], b"");
    assert!(err.contains("docs.json: line 1 column"), "{err}");
    assert!(err.contains("duplicate key \"id\" at $[0].gates[0].id"), "{err}");
    assert!(err.contains("kernel_profile.gates.gates[0].id"), "{err}");
    // a duplicate on the bundle's own path is refused too (as before)
    std::fs::write(&bundle, "{\"kernel_profile\": {}, \"kernel_profile\": {}}").unwrap();
    let err = fail_merge(&bundle, &[], &serde_json::to_vec(&gate("PASS")).unwrap());
    assert!(err.contains("$.kernel_profile: duplicate key"), "{err}");
}

#[test]
fn a_document_that_is_the_bundle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    std::fs::write(&bundle, "{}\n").unwrap();
    let link = dir.path().join("l.json");
    std::os::unix::fs::symlink(&bundle, &link).unwrap();
    let err = fail_merge(&bundle, &[&link], b"");
    assert!(err.contains("is the input"), "{err}");
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), "{}\n");
}
