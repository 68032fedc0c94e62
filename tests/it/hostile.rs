//! The hostile-input suite (issue 17): mutate the real fixtures and assert the contract for every analysis
//! binary (gate-check, sqlite-ranges, nvtx-readiness, report, capture-compare, kern-csv-to-json,
//! bundle-merge):
//!
//! * exit 0/1 with exactly one schema-valid document on stdout (no negative `_ns` durations, shares and
//!   fractions within [0, 1]), or exit 2 with nothing on stdout and the culprit named on stderr (the file, and
//!   the table, column, line or JSON path the case broke);
//! * never a panic, a signal or a hang (every run has a time limit);
//! * the input's bytes and mtime unchanged, and no new file beside it.
//!
//! Mutations: truncations at several offsets, dropped tables and renamed columns, NULLs and inverted
//! intervals in every timed table, huge values, WAL mode, a locked writer, FIFOs, devices, sockets and folders
//! as paths, malformed CSV and JSON streams. Seeded: `NSYSKIT_HOSTILE_SEED=N` changes the seed (default 17);
//! the test prints how many cases it tried.
//!
//! `PENDING_EXPORT_FIXES` lists the cases that fail only until the export layer's SQLite fixes land (helper
//! H1: WAL side files, overflowing sums, inverted intervals outside NVTX, NULL-start rows vanishing). They
//! run, are reported, and do not fail the test; remove the list once those fixes are merged.

#![allow(clippy::type_complexity)]

use crate::common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::Value;

/// Cases (by id) that fail only until the export layer's SQLite fixes are merged (H1, issue 17
/// "SQLite readers"): reported and skipped. Remove the list after merging them.
const PENDING_EXPORT_FIXES: &[&str] = &[];

/// Rows of CUPTI_ACTIVITY_KIND_KERNEL in the base fixture (nsys-2025.3.1/gpu_full_node.sqlite).
const KERNEL_ROWS: i64 = 9579;

const LIMIT: Duration = Duration::from_secs(60);

fn bin(name: &str) -> PathBuf {
    let p = PathBuf::from(match name {
        "gate-check" => env!("CARGO_BIN_EXE_gate-check"),
        "sqlite-ranges" => env!("CARGO_BIN_EXE_sqlite-ranges"),
        "nvtx-readiness" => env!("CARGO_BIN_EXE_nvtx-readiness"),
        "report" => env!("CARGO_BIN_EXE_report"),
        "capture-compare" => env!("CARGO_BIN_EXE_capture-compare"),
        "kern-csv-to-json" => env!("CARGO_BIN_EXE_kern-csv-to-json"),
        "bundle-merge" => env!("CARGO_BIN_EXE_bundle-merge"),
        "step-budget" => env!("CARGO_BIN_EXE_step-budget"),
        other => panic!("no binary {other}"),
    });
    p
}

/// splitmix64 (the same seed gives the same cases).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One run of one binary and what the contract demands of it.
struct Run {
    id: String,
    args: Vec<OsString>,
    stdin: Vec<u8>,
    /// Words that must all appear on stderr when it exits 2 (the file, and the table/column/line/path).
    culprit: Vec<String>,
    /// Must exit 2 (a path that is not a file).
    must_fail: bool,
    /// Check durations/shares of a single-capture document (not capture-compare's deltas).
    check_values: bool,
    /// A further check of an exit-0/1 document.
    extra: Option<fn(&Value) -> Result<(), String>>,
}

/// A mutated input in its own folder, and the runs on it.
struct Job {
    /// Files that must keep their bytes and mtime.
    inputs: Vec<PathBuf>,
    /// Folders where no file may appear or vanish.
    dirs: Vec<PathBuf>,
    runs: Vec<Run>,
    /// Kept alive (a FIFO, a socket listener, a writer holding a lock) until the job is done.
    _keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
    _tmp: Option<tempfile::TempDir>,
}

fn os(s: impl AsRef<std::ffi::OsStr>) -> OsString {
    s.as_ref().to_os_string()
}

/// The runs of the five SQLite readers on `x` (capture-compare against a pristine copy).
fn sqlite_runs(id: &str, x: &Path, pristine: &Path, culprit: &[&str]) -> Vec<Run> {
    let name = x.file_name().unwrap().to_string_lossy().to_string();
    let mut c: Vec<String> = vec![name];
    c.extend(culprit.iter().map(|s| s.to_string()));
    let mut runs = Vec::new();
    for b in ["gate-check", "sqlite-ranges", "nvtx-readiness", "report"] {
        runs.push(Run {
            id: format!("{id}/{b}"),
            args: vec![os(b), os(x)],
            stdin: vec![],
            culprit: c.clone(),
            must_fail: false,
            check_values: true,
            extra: None,
        });
    }
    runs.push(Run {
        id: format!("{id}/capture-compare"),
        args: vec![os("capture-compare"), os(x), os(pristine)],
        stdin: vec![],
        culprit: c,
        must_fail: false,
        check_values: false,
        extra: None,
    });
    runs
}

fn copy_into(src: &Path, name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    std::fs::copy(src, &p).unwrap();
    (d, p)
}

/// A mutated copy of the SQLite fixture: `sql` runs on the copy (with a fresh connection, then closed).
fn sqlite_job(id: &str, base: &Path, pristine: &Path, sql: &str, culprit: &[&str]) -> Job {
    let (d, p) = copy_into(base, "cap.sqlite");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(sql).unwrap_or_else(|e| panic!("{id}: {sql}: {e}"));
    }
    let _ = std::fs::remove_file(p.with_extension("sqlite-journal"));
    Job {
        inputs: vec![p.clone()],
        dirs: vec![d.path().to_path_buf()],
        runs: sqlite_runs(id, &p, pristine, culprit),
        _keep: vec![],
        _tmp: Some(d),
    }
}

/// SQL that rebuilds a table without its constraints (NOT NULL), so NULLs can be written into it.
fn unconstrained(t: &str) -> String {
    format!("CREATE TABLE h_tmp AS SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE h_tmp RENAME TO {t};")
}

fn has_table(c: &rusqlite::Connection, t: &str) -> bool {
    c.query_row("SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?1", [t], |r| r.get::<_, i64>(0))
        .unwrap()
        > 0
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

fn listing(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|r| r.map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn snapshot(p: &Path) -> Option<(Vec<u8>, SystemTime)> {
    let m = std::fs::metadata(p).ok()?;
    if !m.is_file() {
        return None;
    }
    Some((std::fs::read(p).ok()?, m.modified().ok()?))
}

/// Numbers a single-capture document may not hold: a negative duration, a share or fraction outside [0, 1].
fn bad_values(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let p = format!("{path}.{k}");
                if let Some(n) = x.as_f64() {
                    let dur = k.ends_with("_ns") && !k.contains("delta");
                    let frac =
                        (k.ends_with("_share") || k == "share" || k.ends_with("_fraction")) && !k.contains("delta");
                    if (dur && n < 0.0) || (frac && !(0.0..=1.0 + 1e-9).contains(&n)) {
                        out.push(format!("{p} = {n}"));
                    }
                }
                bad_values(x, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                bad_values(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Does a key of the document (a skip counter) or a text in it speak of NULL rows?
fn mentions_null(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.iter().any(|(k, x)| k.to_lowercase().contains("null") || mentions_null(x)),
        Value::Array(a) => a.iter().any(mentions_null),
        Value::String(s) => s.contains("NULL"),
        _ => false,
    }
}

/// An uncommitted write is never read.
fn no_uncommitted(doc: &Value) -> Result<(), String> {
    if doc.to_string().contains("uncommitted.label") {
        Err("read a writer's uncommitted NVTX range".into())
    } else {
        Ok(())
    }
}

/// SQL that adds an NVTX range labelled `label` (a copy of a real one).
fn nvtx_insert(label: &str) -> String {
    format!("INSERT INTO NVTX_EVENTS(start, \"end\", eventType, globalTid, text) SELECT start, \"end\", eventType, globalTid, '{label}' FROM NVTX_EVENTS WHERE \"end\" IS NOT NULL AND text IS NOT NULL LIMIT 1;")
}

/// Run one case; Err says how it broke the contract.
fn check(run: &Run) -> Result<String, String> {
    let mut cmd = assert_cmd::Command::new(bin(run.args[0].to_str().unwrap()));
    cmd.args(&run.args[1..]).write_stdin(run.stdin.clone()).timeout(LIMIT);
    let out = cmd.output().map_err(|e| format!("did not finish within {LIMIT:?}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let Some(code) = out.status.code() else {
        return Err(format!("killed by a signal (or the time limit): {:?}; stderr: {stderr}", out.status));
    };
    if stderr.contains("panicked") || stderr.contains("internal error") {
        return Err(format!("panic: {stderr}"));
    }
    match code {
        0 | 1 if !run.must_fail => {
            let docs = nsyskit::contract::parse_json_stream(&out.stdout, "stdout")
                .map_err(|e| format!("exit {code}, stdout is not JSON: {e}"))?;
            if docs.len() != 1 {
                return Err(format!("exit {code} with {} documents on stdout", docs.len()));
            }
            let doc = &docs[0].value;
            std::panic::catch_unwind(|| common::assert_valid(doc))
                .map_err(|_| format!("exit {code}: the document does not match its schema"))?;
            if let Some(f) = run.extra {
                f(doc).map_err(|e| format!("exit {code}: {e}"))?;
            }
            if run.check_values {
                let mut bad = Vec::new();
                bad_values(doc, "$", &mut bad);
                if !bad.is_empty() {
                    return Err(format!(
                        "exit {code} with impossible values: {}",
                        bad.iter().take(4).cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            Ok(format!("exit {code}"))
        }
        2 => {
            if !out.stdout.is_empty() {
                return Err("exit 2 with output on stdout".into());
            }
            let missing: Vec<&String> = run.culprit.iter().filter(|c| !stderr.contains(c.as_str())).collect();
            if !missing.is_empty() {
                return Err(format!("exit 2 without naming {missing:?}: {stderr}"));
            }
            Ok("exit 2".into())
        }
        c => Err(format!("exit {c}: {stderr}")),
    }
}

/// Run every case of a job, then check its inputs and folders.
fn run_job(job: &Job) -> Vec<(String, Result<String, String>)> {
    let before: Vec<_> = job.inputs.iter().map(|p| snapshot(p)).collect();
    let dirs: Vec<_> = job.dirs.iter().map(|d| listing(d)).collect();
    let mut results = Vec::new();
    for run in &job.runs {
        let mut r = check(run);
        if r.is_ok() {
            for (p, b) in job.inputs.iter().zip(&before) {
                let now = snapshot(p);
                if now.as_ref().map(|x| &x.0) != b.as_ref().map(|x| &x.0) {
                    r = Err(format!("{} changed bytes", p.display()));
                } else if now.as_ref().map(|x| x.1) != b.as_ref().map(|x| x.1) {
                    r = Err(format!("{} changed mtime", p.display()));
                }
            }
            for (d, l) in job.dirs.iter().zip(&dirs) {
                let now = listing(d);
                if &now != l {
                    r = Err(format!("files beside the input changed: {l:?} -> {now:?}"));
                }
            }
        }
        results.push((run.id.clone(), r));
    }
    results
}

fn sqlite_jobs(rng: &mut Rng) -> Vec<Job> {
    let base = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let pristine_dir = tempfile::tempdir().unwrap();
    let pristine = pristine_dir.path().join("pristine.sqlite");
    std::fs::copy(&base, &pristine).unwrap();
    let mut jobs = Vec::new();
    let conn = rusqlite::Connection::open_with_flags(&base, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();

    // the pristine capture: the contract holds on the real thing
    let (d, p) = copy_into(&base, "cap.sqlite");
    jobs.push(Job {
        inputs: vec![p.clone()],
        dirs: vec![d.path().into()],
        runs: sqlite_runs("pristine", &p, &pristine, &[]),
        _keep: vec![],
        _tmp: Some(d),
    });

    // truncations: inside the header, at a few seeded offsets, one byte short
    let len = std::fs::metadata(&base).unwrap().len();
    let mut offsets = vec![0, 50, 100, 4096, len - 1];
    for _ in 0..4 {
        offsets.push(4096 + rng.below(len - 4096));
    }
    for off in offsets {
        let (d, p) = copy_into(&base, "cap.sqlite");
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(off).unwrap();
        jobs.push(Job {
            inputs: vec![p.clone()],
            dirs: vec![d.path().into()],
            runs: sqlite_runs(&format!("truncated@{off}"), &p, &pristine, &[]),
            _keep: vec![],
            _tmp: Some(d),
        });
    }
    // a byte flipped in a seeded page (not the header)
    for _ in 0..2 {
        let (d, p) = copy_into(&base, "cap.sqlite");
        let mut bytes = std::fs::read(&p).unwrap();
        let at = 4096 + rng.below(len - 4096) as usize;
        bytes[at] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        jobs.push(Job {
            inputs: vec![p.clone()],
            dirs: vec![d.path().into()],
            runs: sqlite_runs(&format!("flipped@{at}"), &p, &pristine, &[]),
            _keep: vec![],
            _tmp: Some(d),
        });
    }

    let timed = [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "NVTX_EVENTS",
        "OSRT_API",
        "CUDA_GRAPH_NODE_EVENTS",
    ];
    // dropped tables: the timed ones and those that name things
    for t in timed.iter().copied().chain([
        "StringIds",
        "ThreadNames",
        "META_DATA_CAPTURE",
        "META_DATA_EXPORT",
        "TARGET_INFO_GPU",
        "PROCESSES",
    ]) {
        if has_table(&conn, t) {
            jobs.push(sqlite_job(&format!("dropped:{t}"), &base, &pristine, &format!("DROP TABLE {t};"), &[t]));
        }
    }
    // renamed columns: what the readers join and sum on
    for (t, c) in [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
        ("NVTX_EVENTS", "text"),
        ("NVTX_EVENTS", "start"),
        ("NVTX_EVENTS", "globalTid"),
        ("StringIds", "value"),
    ] {
        jobs.push(sqlite_job(
            &format!("renamed:{t}.{c}"),
            &base,
            &pristine,
            &format!("ALTER TABLE {t} RENAME COLUMN {c} TO {c}_renamed;"),
            &[c],
        ));
    }
    // NULLs and inverted intervals in every timed table, on a seeded seventh of the rows
    for t in timed {
        if !has_table(&conn, t) {
            continue;
        }
        let m = 2 + rng.below(7);
        let r = rng.below(m);
        let rows = format!("rowid % {m} = {r}");
        for col in ["start", "end"] {
            let mut job = sqlite_job(
                &format!("null-{col}:{t}"),
                &base,
                &pristine,
                &format!("{} UPDATE {t} SET \"{col}\" = NULL WHERE {rows};", unconstrained(t)),
                &[],
            );
            if t == "CUPTI_ACTIVITY_KIND_KERNEL" {
                // rows with a NULL time are counted somewhere, not gone: every kernel row is in kernels_total,
                // or the document reports NULL rows (the export layer's skip counts)
                for r in job.runs.iter_mut().filter(|r| r.id.ends_with("/sqlite-ranges")) {
                    r.extra = Some(|doc| {
                        let total = doc.pointer("/totals/kernels_total").and_then(|v| v.as_i64()).unwrap_or(-1);
                        if total == KERNEL_ROWS || mentions_null(doc) {
                            Ok(())
                        } else {
                            Err(format!("kernels_total {total} of {KERNEL_ROWS} kernel rows, and no NULL rows reported: rows vanished"))
                        }
                    });
                }
            }
            jobs.push(job);
        }
        jobs.push(sqlite_job(
            &format!("inverted:{t}"),
            &base,
            &pristine,
            &format!("UPDATE {t} SET \"end\" = start - 1000 WHERE {rows};"),
            &[],
        ));
        jobs.push(sqlite_job(
            &format!("huge:{t}"),
            &base,
            &pristine,
            &format!("UPDATE {t} SET \"end\" = 4611686018427387904 WHERE {rows};"),
            &[],
        ));
    }
    // WAL mode: committed pages that only the -wal file holds, and nothing may appear beside the export
    jobs.push(sqlite_job("wal-mode", &base, &pristine, "PRAGMA journal_mode=WAL;", &[]));
    // a live writer: a WAL export with a committed and an open (uncommitted) transaction
    {
        let (d, p) = copy_into(&base, "cap.sqlite");
        let w = rusqlite::Connection::open(&p).unwrap();
        w.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; {} BEGIN IMMEDIATE; {}",
            nvtx_insert("committed.label"),
            nvtx_insert("uncommitted.label")
        ))
        .unwrap();
        let mut runs = sqlite_runs("wal-writer", &p, &pristine, &[]);
        runs.iter_mut().for_each(|r| r.extra = Some(no_uncommitted));
        jobs.push(Job {
            inputs: vec![p.clone()],
            dirs: vec![d.path().into()],
            runs,
            _keep: vec![Box::new(Mutex::new(w))],
            _tmp: Some(d),
        });
    }
    // a rollback-journal writer holding the write lock
    {
        let (d, p) = copy_into(&base, "cap.sqlite");
        let w = rusqlite::Connection::open(&p).unwrap();
        w.execute_batch(&format!("BEGIN IMMEDIATE; {}", nvtx_insert("uncommitted.label"))).unwrap();
        let mut runs = sqlite_runs("locked-writer", &p, &pristine, &[]);
        runs.iter_mut().for_each(|r| r.extra = Some(no_uncommitted));
        jobs.push(Job {
            inputs: vec![p.clone()],
            dirs: vec![d.path().into()],
            runs,
            _keep: vec![Box::new(Mutex::new(w))],
            _tmp: Some(d),
        });
    }
    // not SQLite at all: JSON, CSV and binary junk under an .sqlite name
    for (what, bytes) in [
        ("json", b"{\"a\": 1}".to_vec()),
        ("text", b"hello\n".to_vec()),
        ("empty", vec![]),
        ("junk", (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect()),
    ] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cap.sqlite");
        std::fs::write(&p, bytes).unwrap();
        jobs.push(Job {
            inputs: vec![p.clone()],
            dirs: vec![d.path().into()],
            runs: sqlite_runs(&format!("not-sqlite:{what}"), &p, &pristine, &[]),
            _keep: vec![],
            _tmp: Some(d),
        });
    }
    jobs.push(Job {
        inputs: vec![pristine.clone()],
        dirs: vec![],
        runs: vec![],
        _keep: vec![Box::new(pristine_dir)],
        _tmp: None,
    });
    jobs
}

/// FIFOs (no writer), devices, sockets and folders as the input of every binary.
fn path_jobs() -> Vec<Job> {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("in.fifo");
    mkfifo(&fifo);
    let sock = d.path().join("in.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let folder = d.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let csv = common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let bundle_dir = tempfile::tempdir().unwrap();
    let good_bundle = bundle_dir.path().join("b.json");
    std::fs::write(&good_bundle, "{}\n").unwrap();
    let doc = d.path().join("doc.json");
    std::fs::write(&doc, r#"{"schema":"nsyskit.gate/v1","tool":{"name":"gate-check","version":"0"},"verdict":"PASS"}"#)
        .unwrap();
    let mut runs = Vec::new();
    for p in [fifo.clone(), sock.clone(), folder.clone(), PathBuf::from("/dev/null"), PathBuf::from("/dev/zero")] {
        let pn = p.display().to_string();
        let kind = p.file_name().unwrap().to_string_lossy().to_string();
        for b in ["gate-check", "sqlite-ranges", "nvtx-readiness", "report", "kern-csv-to-json"] {
            runs.push(Run {
                id: format!("path:{kind}/{b}"),
                args: vec![os(b), os(&p)],
                stdin: vec![],
                culprit: vec![pn.clone()],
                must_fail: true,
                check_values: false,
                extra: None,
            });
        }
        runs.push(Run {
            id: format!("path:{kind}/capture-compare"),
            args: vec![os("capture-compare"), os(&p), os(&csv)],
            stdin: vec![],
            culprit: vec![pn.clone()],
            must_fail: true,
            check_values: false,
            extra: None,
        });
        runs.push(Run {
            id: format!("path:{kind}/bundle-merge-bundle"),
            args: vec![os("bundle-merge"), os(&p), os(&doc)],
            stdin: vec![],
            culprit: vec![pn.clone()],
            must_fail: true,
            check_values: false,
            extra: None,
        });
        runs.push(Run {
            id: format!("path:{kind}/bundle-merge-doc"),
            args: vec![os("bundle-merge"), os(&good_bundle), os(&p)],
            stdin: vec![],
            culprit: vec![pn.clone()],
            must_fail: true,
            check_values: false,
            extra: None,
        });
        // an output over an input
    }
    runs.push(Run {
        id: "same-inode/report-html".into(),
        args: vec![
            os("report"),
            os(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite")),
            os("--html"),
            os(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite")),
        ],
        stdin: vec![],
        culprit: vec!["--html".into(), "gpu_full_node.sqlite".into()],
        must_fail: true,
        check_values: false,
        extra: None,
    });
    vec![Job {
        inputs: vec![doc.clone(), good_bundle.clone(), csv, common::fixture("nsys-2025.3.1/gpu_full_node.sqlite")],
        dirs: vec![d.path().into(), bundle_dir.path().into()],
        runs,
        _keep: vec![Box::new(listener), Box::new(bundle_dir)],
        _tmp: Some(d),
    }]
}

/// Malformed CSV for kern-csv-to-json: truncations, quotes, BOMs, wrong field counts, bad bytes.
fn csv_jobs(rng: &mut Rng) -> Vec<Job> {
    let mut jobs = Vec::new();
    for rel in [
        "nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv",
        "nsys-2025.3.1/stats/gpu_full_node_nvtx_sum.csv",
        "nsys-2025.3.1/stats/gpu_full_node_cuda_api_sum.csv",
    ] {
        let real = std::fs::read(common::fixture(rel)).unwrap();
        let name = Path::new(rel).file_name().unwrap().to_string_lossy().to_string();
        let n = real.len() as u64;
        let lines: Vec<usize> = real.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect();
        let mut variants: Vec<(String, Vec<u8>, Vec<String>)> = Vec::new();
        for off in [0, 1, 10, n / 3, n / 2, n - 2].into_iter().chain((0..3).map(|_| rng.below(n))) {
            variants.push((format!("truncated@{off}"), real[..off as usize].to_vec(), vec![]));
        }
        // an unterminated quote in a seeded data line: the rows after it must not vanish silently
        let l = lines[1 + rng.below(lines.len() as u64 - 2) as usize];
        let mut v = real.clone();
        v.insert(l + 1, b'"');
        let line_no = 1 + real[..l + 1].iter().filter(|b| **b == b'\n').count();
        variants.push(("unterminated-quote".into(), v, vec![format!("line {line_no}")]));
        variants.push(("two-boms".into(), ["\u{feff}\u{feff}".as_bytes(), &real].concat(), vec![]));
        variants.push(("only-boms".into(), "\u{feff}\u{feff}".as_bytes().to_vec(), vec![]));
        let mut v = real.clone();
        v.splice(l..l, b",extra".iter().copied());
        variants.push(("extra-field".into(), v, vec!["line".into()]));
        let mut v = real.clone();
        v[l - 1] = 0xff;
        variants.push(("not-utf8".into(), v, vec!["line".into()]));
        let mut v = real.clone();
        v.splice(l..l, b"x".iter().copied());
        variants.push(("bad-number".into(), v, vec![]));
        variants.push((
            "crlf".into(),
            String::from_utf8(real.clone()).unwrap().replace('\n', "\r\n").into_bytes(),
            vec![],
        ));
        variants.push(("nul-bytes".into(), [real.clone(), vec![0u8; 64]].concat(), vec![]));
        for (what, bytes, extra) in variants {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join(&name);
            std::fs::write(&p, &bytes).unwrap();
            let mut culprit = vec![name.clone()];
            culprit.extend(extra.clone());
            let mut stdin_culprit = vec!["<stdin>".to_string()];
            stdin_culprit.extend(extra);
            let runs = vec![
                Run {
                    id: format!("csv:{what}:{name}/kern-csv-to-json"),
                    args: vec![os("kern-csv-to-json"), os(&p)],
                    stdin: vec![],
                    culprit,
                    must_fail: false,
                    check_values: true,
                    extra: None,
                },
                Run {
                    id: format!("csv:{what}:{name}/kern-csv-to-json-stdin"),
                    args: vec![
                        os("kern-csv-to-json"),
                        os("-"),
                        os("--report"),
                        os(name.trim_start_matches("gpu_full_node_").trim_end_matches(".csv")),
                    ],
                    stdin: bytes.clone(),
                    culprit: stdin_culprit,
                    must_fail: false,
                    check_values: true,
                    extra: None,
                },
            ];
            jobs.push(Job { inputs: vec![p], dirs: vec![d.path().into()], runs, _keep: vec![], _tmp: Some(d) });
        }
    }
    jobs
}

/// Malformed JSON: bundles for report/capture-compare/bundle-merge, document streams for bundle-merge.
fn json_jobs(rng: &mut Rng) -> Vec<Job> {
    // a real bundle: the kernel summary, the gate and the ranges of the real capture
    let cap = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let csv = common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let real_bundle_dir = tempfile::tempdir().unwrap();
    let real_bundle = real_bundle_dir.path().join("real.json");
    let mut docs = Vec::new();
    for (b, a) in [("kern-csv-to-json", &csv), ("gate-check", &cap), ("sqlite-ranges", &cap)] {
        let out = std::process::Command::new(bin(b)).arg(a).output().unwrap();
        assert!(out.status.code().unwrap() <= 1, "{b}: {}", String::from_utf8_lossy(&out.stderr));
        docs.push(out.stdout);
    }
    let stream = docs.concat();
    let out = std::process::Command::new(bin("bundle-merge"))
        .arg(&real_bundle)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&stream)?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let bundle = std::fs::read(&real_bundle).unwrap();
    let n = bundle.len() as u64;
    let mut variants: Vec<(String, Vec<u8>, Vec<String>)> = vec![("real".into(), bundle.clone(), vec![])];
    for off in [0, 1, n / 2, n - 2].into_iter().chain((0..3).map(|_| rng.below(n))) {
        variants.push((format!("truncated@{off}"), bundle[..off as usize].to_vec(), vec![]));
    }
    let v: Value = serde_json::from_slice(&bundle).unwrap();
    for (ptr, bad, path) in [
        ("/kernel_profile", Value::from("x"), "$.kernel_profile"),
        ("/kernel_profile/gates", Value::from(3), "$.kernel_profile.gates"),
        ("/kernel_profile/ranges", Value::from(true), "$.kernel_profile.ranges"),
        ("/kernel_profile/top_kernels", serde_json::json!({}), "$.kernel_profile.top_kernels"),
        ("/provenance", serde_json::json!([1]), "$.provenance"),
    ] {
        let mut w = v.clone();
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        let parent = if parent.is_empty() { Some(&mut w) } else { w.pointer_mut(parent) };
        parent.and_then(|p| p.as_object_mut()).unwrap().insert(key.into(), bad);
        variants.push((format!("wrong-type:{path}"), serde_json::to_vec(&w).unwrap(), vec![path.to_string()]));
    }
    // a duplicate key: a second, empty ranges block after the real one
    let text = String::from_utf8(bundle.clone()).unwrap();
    let dup = text.replacen(
        "\"kernel_profile\": {",
        "\"kernel_profile\": {\n    \"ranges\": {\"schema\": \"nsyskit.ranges/v1\", \"ranges\": []},",
        1,
    );
    variants.push(("duplicate-key".into(), dup.into_bytes(), vec!["duplicate key".into(), "ranges".into()]));
    let mut flipped = bundle.clone();
    let at = rng.below(n) as usize;
    flipped[at] = b'\x01';
    variants.push((format!("control-char@{at}"), flipped, vec![]));
    variants.push(("not-utf8".into(), [&bundle[..10], &[0xff, 0xfe], &bundle[10..]].concat(), vec![]));
    variants.push(("two-documents".into(), [bundle.clone(), bundle.clone()].concat(), vec![]));

    let mut jobs = Vec::new();
    for (what, bytes, extra) in variants {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("bundle.json");
        std::fs::write(&p, &bytes).unwrap();
        let mut culprit = vec!["bundle.json".to_string()];
        culprit.extend(extra.clone());
        let other = real_bundle.clone();
        let out_dir = tempfile::tempdir().unwrap();
        let target = out_dir.path().join("target.json");
        std::fs::write(&target, "{\"owner\": 1}\n").unwrap();
        let gate_doc = out_dir.path().join("gate.json");
        std::fs::write(&gate_doc, &docs[1]).unwrap();
        let mut runs = vec![
            Run {
                id: format!("json:{what}/report"),
                args: vec![os("report"), os(&p)],
                stdin: vec![],
                culprit: culprit.clone(),
                must_fail: false,
                check_values: true,
                extra: None,
            },
            Run {
                id: format!("json:{what}/capture-compare"),
                args: vec![os("capture-compare"), os(&p), os(&other)],
                stdin: vec![],
                culprit: culprit.clone(),
                must_fail: false,
                check_values: false,
                extra: None,
            },
            Run {
                id: format!("json:{what}/report-stdin"),
                args: vec![os("report"), os("-")],
                stdin: bytes.clone(),
                culprit: {
                    let mut c = vec!["<stdin>".to_string()];
                    c.extend(extra.clone());
                    c
                },
                must_fail: false,
                check_values: true,
                extra: None,
            },
            // the mutated file as the bundle of a merge (--check: nothing written; the file must not change)
            Run {
                id: format!("json:{what}/bundle-merge-check"),
                args: vec![os("bundle-merge"), os("--check"), os(&p), os(&gate_doc)],
                stdin: vec![],
                culprit: vec!["bundle.json".into()],
                must_fail: false,
                check_values: false,
                extra: None,
            },
        ];
        // the document stream as documents of a merge into another bundle (which must stay byte-identical
        // on exit 2): only the real stream, truncated or mutated
        if what != "real" {
            runs.push(Run {
                id: format!("json:{what}/bundle-merge-docs"),
                args: vec![os("bundle-merge"), os("--check"), os(&target), os(&p)],
                stdin: vec![],
                culprit: vec!["bundle.json".into()],
                must_fail: false,
                check_values: false,
                extra: None,
            });
        }
        jobs.push(Job {
            inputs: vec![p, target, gate_doc],
            dirs: vec![d.path().into(), out_dir.path().into()],
            runs,
            _keep: vec![Box::new(out_dir)],
            _tmp: Some(d),
        });
    }
    // document streams on stdin of a real merge: truncated, duplicate keys, not objects, unknown schemas
    let sn = stream.len() as u64;
    let mut streams: Vec<(String, Vec<u8>, Vec<String>)> = Vec::new();
    for off in [1, sn / 3, sn - 2].into_iter().chain((0..2).map(|_| rng.below(sn))) {
        streams.push((
            format!("stream-truncated@{off}"),
            stream[..off as usize].to_vec(),
            vec!["<stdin>".into(), "line".into()],
        ));
    }
    streams.push((
        "stream-duplicate".into(),
        br#"{"schema":"nsyskit.gate/v1","verdict":"PASS","verdict":"RETRY"}"#.to_vec(),
        vec!["duplicate key".into(), "$.verdict".into(), "kernel_profile.gates.verdict".into()],
    ));
    streams.push(("stream-not-object".into(), b"[1, 2]".to_vec(), vec!["<stdin>".into(), "$".into()]));
    streams.push(("stream-unknown".into(), br#"{"schema":"nsyskit.nope/v1"}"#.to_vec(), vec!["$.schema".into()]));
    streams.push(("stream-empty".into(), vec![], vec!["no documents".into()]));
    streams.push(("stream-real".into(), stream.clone(), vec![]));
    for (what, bytes, culprit) in streams {
        let d = tempfile::tempdir().unwrap();
        let b = d.path().join("target.json");
        std::fs::write(&b, "{\n  \"owner\": 1.0\n}\n").unwrap();
        let ok = what == "stream-real";
        let runs = vec![Run {
            id: format!("json:{what}/bundle-merge"),
            args: vec![os("bundle-merge"), os(&b)],
            stdin: bytes,
            culprit,
            must_fail: !ok,
            check_values: false,
            extra: None,
        }];
        // on exit 2 the bundle is byte-identical: watch it (the real stream writes it, so it is not watched)
        let inputs = if ok { vec![] } else { vec![b.clone()] };
        let dirs = if ok { vec![] } else { vec![d.path().into()] };
        jobs.push(Job { inputs, dirs, runs, _keep: vec![], _tmp: Some(d) });
    }
    jobs.push(Job {
        inputs: vec![real_bundle],
        dirs: vec![],
        runs: vec![],
        _keep: vec![Box::new(real_bundle_dir)],
        _tmp: None,
    });
    jobs
}

#[test]
fn hostile_inputs_keep_the_contract() {
    let seed: u64 = std::env::var("NSYSKIT_HOSTILE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(17);
    let mut rng = Rng(seed);
    let mut jobs = sqlite_jobs(&mut rng);
    jobs.extend(path_jobs());
    jobs.extend(csv_jobs(&mut rng));
    jobs.extend(json_jobs(&mut rng));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(String, Result<String, String>)>> = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let r = run_job(job);
                results.lock().unwrap().extend(r);
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let pending = |id: &str| PENDING_EXPORT_FIXES.contains(&id);
    let (mut failed, mut pend_failed, mut pend_passed) = (Vec::new(), Vec::new(), Vec::new());
    let mut exits = std::collections::BTreeMap::new();
    for (id, r) in &results {
        match r {
            Ok(how) => {
                *exits.entry(how.clone()).or_insert(0) += 1;
                if pending(id) {
                    pend_passed.push(id.clone());
                }
            }
            Err(why) if pending(id) => pend_failed.push(format!("{id}: {why}")),
            Err(why) => failed.push(format!("{id}: {why}")),
        }
    }
    eprintln!(
        "hostile: {} cases tried (seed {seed}, {} mutated inputs): {} kept the contract {exits:?}, {} broke it, {} pending",
        results.len(),
        jobs.iter().filter(|j| !j.runs.is_empty()).count(),
        results.len() - failed.len() - pend_failed.len(),
        failed.len(),
        pend_failed.len()
    );
    for p in &pend_failed {
        eprintln!("  PENDING_EXPORT_FIXES (skipped until the export layer's SQLite fixes land): {p}");
    }
    if !pend_passed.is_empty() {
        eprintln!("  listed in PENDING_EXPORT_FIXES but keeping the contract now: {}", pend_passed.join(", "));
    }
    assert!(failed.is_empty(), "{} cases broke the contract:\n{}", failed.len(), failed.join("\n"));
}

// ---------------------------------------------------------------------------------------------------------------
// serve-capture without a real nsys (issue 42): a stand-in nsys that runs the server and "writes" the real CPU
// report of fixtures/nsys-2023.4.4, and a tiny Python HTTP server.

/// The Python interpreter itself (not a shim: serve-capture finds the server by its argv[0]), or None after
/// a SKIP line.
fn python_or_skip(test: &str) -> Option<PathBuf> {
    let o = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
    match o {
        Ok(o) if o.status.success() => Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())),
        _ => {
            common::skip(test, "no python3 for the stand-in server");
            None
        }
    }
}

/// A stand-in nsys: `--version` and `profile --help`/`export --help` with the real 2023.4.4 texts; `profile
/// FLAGS… SERVER…` runs the server in the foreground and, once it is gone, copies the real CPU report to
/// `--output`; `export … --output=X REP` copies that report's real export to X. It prints nothing of its argv.
fn stand_in_nsys(dir: &Path) -> PathBuf {
    let help = common::root().join("fixtures/nsys-help/2023.4.4");
    let fx = common::root().join("fixtures/nsys-2023.4.4");
    let p = dir.join("nsys");
    std::fs::write(
        &p,
        format!(
            r#"#!/bin/sh
case "$1" in
  --version) echo 'NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0';;
  profile)
    if [ "$2" = --help ]; then cat '{ph}'; exit 0; fi
    shift; out=
    while [ $# -gt 0 ]; do case "$1" in --output=*) out="${{1#--output=}}"; shift;; -*) shift;; *) break;; esac; done
    "$@"
    cp '{rep}' "$out.nsys-rep";;
  export)
    if [ "$2" = --help ]; then cat '{eh}'; exit 0; fi
    for a; do case "$a" in --output=*) out="${{a#--output=}}";; esac; done
    cp '{sql}' "$out";;
  *) exit 1;;
esac
"#,
            ph = help.join("profile-help.txt").display(),
            eh = help.join("export-help.txt").display(),
            rep = fx.join("cpu_nvtx_osrt.nsys-rep").display(),
            sql = fx.join("cpu_nvtx_osrt.sqlite").display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// A Python HTTP server answering 200 to every GET on `127.0.0.1:PORT` (argv[1]); the rest of its argv is
/// ignored, except `--ignore-term FILE`: SIGTERM then only writes FILE (a server slow to shut down).
fn stand_in_server(dir: &Path) -> PathBuf {
    let p = dir.join("srv.py");
    std::fs::write(
        &p,
        r#"import http.server, signal, sys
a = sys.argv
if '--ignore-term' in a:
    mark = a[a.index('--ignore-term') + 1]
    def on_term(s, f):
        open(mark, 'w').write('SIGTERM ignored\n')
    signal.signal(signal.SIGTERM, on_term)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'ok')
    def log_message(self, *x):
        pass
http.server.HTTPServer(('127.0.0.1', int(a[1])), H).serve_forever()
"#,
    )
    .unwrap();
    p
}

/// serve-capture's arguments for a whole-run capture of the stand-in server (CPU trace, no GPU).
fn stand_in_args(nsys: &Path, port: u16, out: &Path, grace: u32) -> Vec<String> {
    [
        "--nsys",
        &nsys.display().to_string(),
        "--trace",
        "nvtx,osrt",
        "--health",
        &format!("http://127.0.0.1:{port}/health"),
        "--grace",
        &grace.to_string(),
        "--finalize-timeout",
        "10",
        "--out",
        &out.display().to_string(),
    ]
    .map(String::from)
    .into()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(files_under(&p));
        } else {
            v.push(p);
        }
    }
    v
}

/// Issue 42: every form of secret the redaction rule names stays out of stdout, stderr and every file
/// serve-capture writes (serve-capture.json, provenance.json, gate.json, ranges.json, bundle.json, pids/, the
/// client logs); only the report and its export are nsys's evidence and skipped. One distinct value per form:
/// an `Authorization: Bearer` and a `Proxy-Authorization: Basic` header and URL credentials in `--load`;
/// `--passwd V`, `--credentials=V`, `--bearer V`, `-p V` and URL credentials on the server command;
/// `--env DB_URL=mysql://u:V@…` and `--env WANDB_PASSWD=V`.
#[test]
fn serve_capture_redacts_every_secret_form() {
    let Some(py) = python_or_skip("serve_capture_redacts_every_secret_form") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let nsys = stand_in_nsys(tmp.path());
    let srv = stand_in_server(tmp.path());
    let port = free_port();
    let out = tmp.path().join("run");
    let secrets = [
        ("Authorization: Bearer in --load", "hdrSECRET01"),
        ("Proxy-Authorization: Basic in --load", "dXNlcjpTRUNSRVQwMg=="),
        ("URL credentials in --load", "urlSECRET03"),
        ("--passwd", "pwdSECRET04"),
        ("--credentials=", "credSECRET05"),
        ("--bearer", "bearSECRET06"),
        ("-p", "pSECRET07"),
        ("URL credentials on the server", "srvurlSECRET08"),
        ("--env DB_URL", "envurlSECRET09"),
        ("--env WANDB_PASSWD", "wandbSECRET10"),
    ];
    let mut args = stand_in_args(&nsys, port, &out, 3);
    args.extend([
        "--load".into(),
        "/bin/true -H 'Authorization: Bearer hdrSECRET01' -H 'Proxy-Authorization: Basic dXNlcjpTRUNSRVQwMg==' https://alice:urlSECRET03@example.com/v1".into(),
        "--env".into(),
        "DB_URL=mysql://dbuser:envurlSECRET09@db.local:3306/app".into(),
        "--env".into(),
        "WANDB_PASSWD=wandbSECRET10".into(),
        "--".into(),
        py.display().to_string(),
        srv.display().to_string(),
        port.to_string(),
        "--passwd".into(),
        "pwdSECRET04".into(),
        "--credentials=credSECRET05".into(),
        "--bearer".into(),
        "bearSECRET06".into(),
        "-p".into(),
        "pSECRET07".into(),
        "--upstream".into(),
        "https://carol:srvurlSECRET08@models.local/".into(),
    ]);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_serve-capture")).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{:?}\n{stderr}", o.status);
    let doc = common::one_doc(&o.stdout);
    assert_eq!(doc["outcome"], "ok", "{doc}\n{stderr}");
    let mut texts = vec![("stdout".to_string(), String::from_utf8_lossy(&o.stdout).into_owned())];
    texts.push(("stderr".into(), stderr.clone()));
    for f in files_under(&out) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name == "capture.nsys-rep" || name == "capture.sqlite" {
            continue;
        }
        texts.push((f.display().to_string(), String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned()));
    }
    for f in ["serve-capture.json", "provenance.json", "gate.json", "ranges.json", "bundle.json"] {
        assert!(out.join(f).is_file(), "{f} was written: {stderr}");
    }
    for (what, text) in &texts {
        for (form, s) in secrets {
            assert!(!text.contains(s), "{form}: {s} leaked into {what}:\n{text}");
        }
        assert!(!text.contains("SECRET"), "{what}:\n{text}");
    }
    // the redacted words say what was there: the server's argv as recorded from /proc
    let server = doc["processes"].as_array().unwrap().iter().find(|p| p["role"] == "server").unwrap();
    let argv: Vec<&str> = server["argv"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    for w in ["--passwd", "--credentials=<redacted>", "--bearer", "-p", "https://carol:<redacted>@models.local/"] {
        assert!(argv.contains(&w), "{w} in {argv:?}");
    }
    let prov: Value = serde_json::from_str(&std::fs::read_to_string(out.join("provenance.json")).unwrap()).unwrap();
    let env = prov["capture"]["env"].as_array().unwrap();
    assert!(env.iter().all(|e| e["redacted"] == true), "{env:?}");
    assert!(env.iter().any(|e| e["value"] == "mysql://dbuser:<redacted>@db.local:3306/app"), "{env:?}");
}

/// Issue 42: a SIGTERM while serve-capture is already shutting down (here: waiting out `--grace` for a server
/// that ignores SIGTERM) still means stop now: exit 143, `outcome: interrupted`, `cleanup.stop_signal` 15,
/// `run-state` interrupted, and no post-processing (no export, gate, ranges or bundle).
#[test]
fn serve_capture_sigterm_during_shutdown_interrupts() {
    let Some(py) = python_or_skip("serve_capture_sigterm_during_shutdown_interrupts") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let nsys = stand_in_nsys(tmp.path());
    let srv = stand_in_server(tmp.path());
    let mark = tmp.path().join("server-got-sigterm");
    let port = free_port();
    let out = tmp.path().join("run");
    let mut args = stand_in_args(&nsys, port, &out, 4);
    args.extend(["--load".into(), "/bin/true".into(), "--".into()]);
    args.extend([py.display().to_string(), srv.display().to_string(), port.to_string()]);
    args.extend(["--ignore-term".into(), mark.display().to_string()]);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_serve-capture"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    // the shutdown has begun once the server got serve-capture's SIGTERM (and ignored it)
    while !mark.exists() {
        assert!(t.elapsed() < LIMIT, "the shutdown never began");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let doc = common::one_doc(&o.stdout);
    assert_eq!(o.status.code(), Some(143), "{doc}\n{stderr}");
    assert_eq!(doc["outcome"], "interrupted", "{doc}");
    assert_eq!(doc["cleanup"]["stop_signal"], 15);
    assert!(doc["failures"].as_array().unwrap().iter().any(|f| f["stage"] == "interrupted"), "{doc}");
    assert!(doc["capture"].is_null() && doc["gate"].is_null(), "no post-processing: {doc}");
    assert!(doc["files"]["bundle"].is_null(), "{doc}");
    for f in ["capture.sqlite", "gate.json", "ranges.json", "bundle.json"] {
        assert!(!out.join(f).exists(), "{f} written after SIGTERM");
    }
    assert!(std::fs::read_to_string(out.join("run-state")).unwrap().starts_with("interrupted "));
    let server = doc["processes"].as_array().unwrap().iter().find(|p| p["role"] == "server").unwrap();
    assert_eq!(server["gone"], true, "the server was still stopped: {server}");
}

/// A copy of a real bundle with the cell at JSON pointer `ptr` set to the JSON text `cell` (written as text, so
/// that numbers beyond u64 stay as planted), in its own folder.
fn bundle_with_cell(src: &str, ptr: &str, cell: &str) -> (tempfile::TempDir, PathBuf) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(common::fixture(src)).unwrap()).unwrap();
    *v.pointer_mut(ptr).unwrap_or_else(|| panic!("{src} has no {ptr}")) = Value::String("@@CELL@@".into());
    let text = serde_json::to_string_pretty(&v).unwrap().replace("\"@@CELL@@\"", cell);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bundle.json");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// Issue 42: every kernel cell report and capture-compare read from a bundle is type- and range-checked on a
/// copy of the real pod-attach bundle: a count of 2^64 or 2^63, a time as a string, null, true or "NaN", and
/// negative times and counts (in stats rows, top_kernels and totals) are exit 2 naming the file and the JSON
/// path, never a dropped row or a wrapped category count; rows whose times sum past i64 too. A string `gpus`
/// in the ranges' capture header is exit 2 with its path (it made `captured_at` null). The pristine copies read.
#[test]
fn bundle_kernel_cells_are_type_and_range_checked() {
    const POD: &str = "pod-attach-gpu/bundle/inference_perfbench_v1.json";
    const SERVE: &str = "serve-capture-gpu-records/bundle.json";
    let rows = "/kernel_profile/stats/cuda_gpu_kern_sum/rows";
    let rows_at = "kernel_profile.stats.cuda_gpu_kern_sum.rows";
    let cases: Vec<(&str, String, &str, String)> = vec![
        (
            POD,
            format!("{rows}/3/instances"),
            "18446744073709551616",
            format!("{rows_at}[3].instances: expected a non-negative integer, got 1.8446744073709552e+19"),
        ),
        (
            POD,
            format!("{rows}/3/instances"),
            "9223372036854775808",
            format!("{rows_at}[3].instances: expected a non-negative integer"),
        ),
        (
            POD,
            format!("{rows}/3/total_time_ns"),
            "\"6009202\"",
            format!("{rows_at}[3].total_time_ns: expected a non-negative integer, got \"6009202\""),
        ),
        (
            POD,
            format!("{rows}/3/total_time_ns"),
            "null",
            format!("{rows_at}[3].total_time_ns: expected a non-negative integer, got null"),
        ),
        (
            POD,
            format!("{rows}/3/total_time_ns"),
            "true",
            format!("{rows_at}[3].total_time_ns: expected a non-negative integer, got true"),
        ),
        (
            POD,
            format!("{rows}/5/total_time_ns"),
            "\"NaN\"",
            format!("{rows_at}[5].total_time_ns: expected a non-negative integer, got \"NaN\""),
        ),
        (
            POD,
            format!("{rows}/5/total_time_ns"),
            "-1",
            format!("{rows_at}[5].total_time_ns: expected a non-negative integer, got -1"),
        ),
        (
            POD,
            format!("{rows}/7/instances"),
            "-40",
            format!("{rows_at}[7].instances: expected a non-negative integer, got -40"),
        ),
        (
            POD,
            format!("{rows}/7/instances"),
            "2.5",
            format!("{rows_at}[7].instances: expected a non-negative integer, got 2.5"),
        ),
        (POD, format!("{rows}/7/name"), "7", format!("{rows_at}[7].name: expected a string, got 7")),
        (
            POD,
            format!("{rows}/0/total_time_ns"),
            "9223372036854775000",
            format!("{rows_at}: the rows' total_time_ns sum past"),
        ),
        (
            POD,
            "/kernel_profile/top_kernels/2/instances".into(),
            "-1",
            "kernel_profile.top_kernels[2].instances: expected a non-negative integer, got -1".into(),
        ),
        (
            POD,
            "/kernel_profile/totals/total_time_ns".into(),
            "\"916235599\"",
            "kernel_profile.totals.total_time_ns: expected a non-negative integer, got \"916235599\"".into(),
        ),
        (
            POD,
            "/kernel_profile/totals/instances".into(),
            "-288462",
            "kernel_profile.totals.instances: expected a non-negative integer, got -288462".into(),
        ),
        (
            SERVE,
            "/kernel_profile/ranges/source/capture/gpus".into(),
            "\"NVIDIA H200\"",
            "kernel_profile.ranges.source.capture.gpus: expected an array of strings, got \"NVIDIA H200\"".into(),
        ),
        (
            SERVE,
            "/kernel_profile/ranges/source/capture/duration_ns".into(),
            "-5",
            "kernel_profile.ranges.source.capture.duration_ns: expected a non-negative integer or null, got -5".into(),
        ),
    ];
    let run = |args: &[&Path]| {
        let o = std::process::Command::new(bin(args[0].to_str().unwrap())).args(&args[1..]).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for src in [POD, SERVE] {
        let pristine = common::fixture(src);
        let (code, _, err) = run(&[Path::new("report"), &pristine]);
        assert!(matches!(code, Some(0 | 1)), "{src}: {err}");
    }
    let mut failed = Vec::new();
    for (src, ptr, cell, want) in &cases {
        let (_dir, p) = bundle_with_cell(src, ptr, cell);
        let pristine = common::fixture(src);
        for args in [vec![Path::new("report"), &p], vec![Path::new("capture-compare"), &pristine, &p]] {
            let (code, out, err) = run(&args);
            let ok = code == Some(2) && out.is_empty() && err.contains("bundle.json") && err.contains(want.as_str());
            if !ok {
                failed.push(format!(
                    "{} {ptr}={cell}: exit {code:?}, stderr {err}, stdout {} bytes",
                    args[0].display(),
                    out.len()
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{} runs trusted a bad cell:\n{}", failed.len(), failed.join("\n"));
}

/// A copy of the real GPU export with `sql` run on it (rusqlite), in its own folder.
fn edited_export(sql: &str) -> (tempfile::TempDir, PathBuf) {
    let (d, p) = copy_into(&common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), "cap.sqlite");
    rusqlite::Connection::open(&p).unwrap().execute_batch(sql).unwrap();
    (d, p)
}

/// Issue 42: one timestamp rule for every reader. Every kernel of a copy of the real 9.6 s GPU export spanning
/// ±2^53 ns (each timestamp possible, their durations not summable in 64 bits) is exit 2 "timestamps are not
/// real" from gate-check as from report, naming the file and the table. One kernel lasting an hour in that
/// capture is G3 RETRY naming the row and the capture's ANALYSIS_DETAILS.duration; the pristine copy passes G3.
#[test]
fn gate_check_uses_the_one_timestamp_rule() {
    let run = |b: &str, p: &Path| {
        let o = std::process::Command::new(bin(b)).arg(p).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let g3 = |doc: &Value| doc["gates"].as_array().unwrap().iter().find(|g| g["id"] == "G3").unwrap().clone();
    // ±2^53 ns on every kernel
    let (_d, p) =
        edited_export("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9007199254740992, end = 9007199254740992;");
    for b in ["gate-check", "report"] {
        let (code, out, err) = run(b, &p);
        assert_eq!(code, Some(2), "{b}: {err}");
        assert!(out.is_empty(), "{b}: {out}");
        // (report's ranges read sums first and names the label whose kernel time overflows)
        let table = if b == "gate-check" { "CUPTI_ACTIVITY_KIND_KERNEL" } else { "overflows 64-bit" };
        for w in ["cap.sqlite", table, "timestamps are not real"] {
            assert!(err.contains(w), "{b}: {w} in {err}");
        }
    }
    // one kernel of an hour in a 9.6 s capture
    let (_d, p) = edited_export(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 3600000000000 WHERE rowid = (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1 OFFSET 41);",
    );
    let rowid: i64 = rusqlite::Connection::open(&p)
        .unwrap()
        .query_row("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1 OFFSET 41", [], |r| r.get(0))
        .unwrap();
    let (code, out, err) = run("gate-check", &p);
    assert_eq!(code, Some(1), "{err}");
    let doc = common::one_doc(out.as_bytes());
    assert_eq!(doc["verdict"], "RETRY");
    assert!(doc["retry"].as_array().unwrap().iter().any(|g| g == "G3"), "{doc}");
    let reason = g3(&doc)["reason"].as_str().unwrap().to_string();
    for w in [
        format!("CUPTI_ACTIVITY_KIND_KERNEL row id {rowid} lasts 3600.000 s"),
        "longer than the whole capture (ANALYSIS_DETAILS.duration 9.588 s)".into(),
    ] {
        assert!(reason.contains(&w), "{w} in {reason}");
    }
    // the pristine export: G3 passes
    let (code, out, err) = run("gate-check", &common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"));
    assert!(matches!(code, Some(0 | 1)), "{err}");
    assert_eq!(g3(&common::one_doc(out.as_bytes()))["verdict"], "PASS");
}

/// Issue 42: with every `correlationId` 0 (each device row's `(globalPid, correlationId)` shared by every runtime
/// call of its process), step-budget and report said `kernel_bound / gpu_saturated` with a GPU-busy share of 7.87
/// (232 on another fixture): each row was attributed to every step. Such a join is ambiguous: the rows are
/// attributed to no range, call or step, counted (`totals.device_rows_ambiguous`) and named in a note, and no
/// share or fraction of step-budget, report or sqlite-ranges exceeds 1.
#[test]
fn duplicate_correlation_ids_are_ambiguous_never_summed() {
    for rel in ["nsys-2025.3.1/decode_clean.sqlite", "nsys-2025.3.1/gpu_full_node.sqlite"] {
        let (_d, p) = copy_into(&common::fixture(rel), "cap.sqlite");
        let c = rusqlite::Connection::open(&p).unwrap();
        let mut device_rows = 0i64;
        for t in ["RUNTIME", "KERNEL", "MEMCPY", "MEMSET"] {
            let t = format!("CUPTI_ACTIVITY_KIND_{t}");
            if has_table(&c, &t) {
                c.execute_batch(&format!("UPDATE {t} SET correlationId = 0;")).unwrap();
                if !t.ends_with("RUNTIME") {
                    device_rows +=
                        c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get::<_, i64>(0)).unwrap();
                }
            }
        }
        drop(c);
        let p = p.to_str().unwrap();
        let mut bad = Vec::new();
        for b in ["step-budget", "report", "sqlite-ranges"] {
            let (code, doc) = common::doc(b, &[p]);
            assert!(code == 0 || code == 1, "{rel}: {b} exit {code}");
            bad_values(&doc, &format!("{rel}:{b}"), &mut bad);
            let text = doc.to_string();
            assert!(!text.contains("gpu_saturated"), "{rel}: {b} still says gpu_saturated");
            assert!(text.contains("the join is ambiguous"), "{rel}: {b} has no note of the ambiguous join");
            if b == "sqlite-ranges" {
                assert_eq!(doc["totals"]["device_rows_ambiguous"], device_rows, "{rel}");
                assert_eq!(doc["totals"]["kernels_attributed"], 0, "{rel}");
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
    // a real capture (unique ids per process) has no ambiguous join
    let (_, doc) =
        common::doc("sqlite-ranges", &[common::fixture("nsys-2025.3.1/gpu_full_node.sqlite").to_str().unwrap()]);
    assert!(doc["totals"].get("device_rows_ambiguous").is_none(), "{}", doc["totals"]);
}

/// Issue 42: a negative, zero or i64::MAX capture duration (ANALYSIS_DETAILS.duration) was copied into
/// documents unchecked. It is not a positive duration below 2^53 ns (the export layer's timestamp rule): the
/// duration is unknown (null), with the reason in `source.capture.notes` (sqlite-ranges) and the report's notes;
/// gate-check still reads the export. The pristine copy keeps its 9.588 s and no note.
#[test]
fn impossible_capture_duration_is_unknown_with_a_note() {
    for d in ["-5", "0", "9223372036854775807"] {
        let (_d, p) = edited_export(&format!("UPDATE ANALYSIS_DETAILS SET duration = {d};"));
        let p = p.to_str().unwrap();
        let (_, ranges) = common::doc("sqlite-ranges", &[p]);
        let cap = &ranges["source"]["capture"];
        assert!(cap["duration_ns"].is_null(), "{d}: {cap}");
        let why = format!("ANALYSIS_DETAILS.duration is {d} ns, not a positive duration below 2^53 ns");
        assert!(cap["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains(&why)), "{d}: {cap}");
        let (_, report) = common::doc("report", &[p]);
        assert!(report["capture"]["duration_ns"].is_null(), "{d}: {}", report["capture"]);
        assert!(
            report["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains(&why)),
            "{d}: {}",
            report["notes"]
        );
        let mut bad = Vec::new();
        bad_values(&ranges, "ranges", &mut bad);
        bad_values(&report, "report", &mut bad);
        assert!(bad.is_empty(), "{d}: {bad:?}");
        let (code, _) = common::doc("gate-check", &[p]);
        assert!(code == 0 || code == 1, "{d}");
    }
    let (_, ranges) =
        common::doc("sqlite-ranges", &[common::fixture("nsys-2025.3.1/gpu_full_node.sqlite").to_str().unwrap()]);
    assert_eq!(ranges["source"]["capture"]["duration_ns"], 9588479707i64);
    assert!(ranges["source"]["capture"].get("notes").is_none());
}

/// Issue 42: damage to the schema gave a multi-line error quoting CREATE TABLE (a quote planted in a table's
/// CREATE TABLE text: SQLite's `malformed database schema (T) - unrecognized token: "'…` quotes the rest of it).
/// A copy of the real export with its schema page (the first page, after the 100-byte header) overwritten, and
/// one with a quote planted in the first CREATE TABLE text of the schema: every SQLite reader exits 2 with one
/// line naming the file and saying the export is damaged, quoting no SQL, stdout empty.
#[test]
fn damaged_schema_is_one_line_without_sql() {
    let src = std::fs::read(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite")).unwrap();
    let page = u16::from_be_bytes([src[16], src[17]]) as usize;
    let mut page_one = src.clone();
    for (i, b) in page_one[100..page].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) ^ 0xA5;
    }
    let mut quoted = src.clone();
    let at = src.windows(12).position(|w| w == b"CREATE TABLE").unwrap();
    let col = at + src[at..].iter().position(|&b| b == b'\n').unwrap() + 5;
    quoted[col] = b'\'';
    for (case, bytes) in [("page_one", page_one), ("quote_in_create_table", quoted)] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cap.sqlite");
        std::fs::write(&p, bytes).unwrap();
        for b in ["gate-check", "sqlite-ranges", "nvtx-readiness", "report", "step-budget", "capture-compare"] {
            let mut cmd = std::process::Command::new(bin(b));
            cmd.arg(&p);
            if b == "capture-compare" {
                cmd.arg(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"));
            }
            let o = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(o.status.code(), Some(2), "{case} {b}: {err}");
            assert!(o.stdout.is_empty(), "{case} {b}");
            assert_eq!(err.trim_end().lines().count(), 1, "{case} {b}: {err}");
            assert!(
                err.contains(&p.display().to_string()) && err.contains("the export is damaged"),
                "{case} {b}: {err}"
            );
            for sql in ["CREATE", "INTEGER", "NOT NULL"] {
                assert!(!err.contains(sql), "{case} {b} quotes SQL: {err}");
            }
        }
    }
}

/// A stand-in nsys whose `export` hangs: it writes its pid to `pidfile` and becomes `sleep 300` (`--version`
/// answers as nsys 2023.4.4 does).
fn hanging_nsys(dir: &Path, pidfile: &Path) -> PathBuf {
    let p = dir.join("nsys");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  --version) echo 'NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0';;\n  *) echo $$ > '{}'; exec sleep 300;;\nesac\n",
            pidfile.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// Is process `pid` gone (reaped, not merely a zombie)?
fn gone(pid: i32) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if unsafe { libc::kill(pid, 0) } != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Issue 42: an `.nsys-rep` input whose `nsys export` hangs had no bound, and after SIGTERM the temporary
/// `$TMPDIR/nsyskit-export-*` folder and the nsys child stayed behind. On the real cpu_nvtx_osrt.nsys-rep with
/// a stand-in nsys that hangs: past `NSYSKIT_EXPORT_TIMEOUT` (2 s) sqlite-ranges exits 2 naming the report and
/// the timeout; on SIGTERM it exits 2 naming the signal. Either way nothing is left in the TMPDIR set for the
/// run, the nsys child is gone, and stdout is empty.
#[test]
fn hung_nsys_export_is_bounded_and_cleaned_up() {
    let rep = common::fixture("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep");
    for case in ["timeout", "sigterm"] {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let pidfile = dir.path().join("nsys.pid");
        let nsys = hanging_nsys(dir.path(), &pidfile);
        let mut cmd = std::process::Command::new(bin("sqlite-ranges"));
        cmd.arg(&rep).arg("--nsys").arg(&nsys).env("TMPDIR", &tmp).env_remove("NSYSKIT_EXPORT_TIMEOUT");
        if case == "timeout" {
            cmd.env("NSYSKIT_EXPORT_TIMEOUT", "2");
        }
        let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let t = std::time::Instant::now();
        while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            assert!(t.elapsed() < LIMIT, "{case}: the export never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let nsys_pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        if case == "sigterm" {
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{case}: {:?} {err}", o.status);
        assert!(t.elapsed() < Duration::from_secs(20), "{case}: took {:?}", t.elapsed());
        assert!(o.stdout.is_empty(), "{case}");
        let why = if case == "timeout" {
            "did not finish within 2 s (NSYSKIT_EXPORT_TIMEOUT)"
        } else {
            "interrupted by SIGTERM"
        };
        assert!(err.contains("cpu_nvtx_osrt.nsys-rep") && err.contains(why), "{case}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{case}: {err}");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{case}: left in TMPDIR: {left:?}");
        assert!(gone(nsys_pid), "{case}: the nsys child {nsys_pid} is still running");
    }
}

// ---- issue 42: second pass ----

/// One run that must exit 2 with nothing on stdout, naming every word of `culprit` on stderr (a panic, a
/// signal, a hang or exit 0/1 fail the test).
fn assert_refused(args: Vec<OsString>, stdin: &[u8], culprit: &[&str]) -> String {
    let run = Run {
        id: format!("{args:?}"),
        args: args.clone(),
        stdin: stdin.to_vec(),
        culprit: culprit.iter().map(|s| s.to_string()).collect(),
        must_fail: true,
        check_values: true,
        extra: None,
    };
    match check(&run) {
        Ok(how) if how == "exit 2" => {}
        other => panic!("{args:?}: expected exit 2 naming {culprit:?}, got {other:?}"),
    }
    let out = assert_cmd::Command::new(bin(args[0].to_str().unwrap()))
        .args(&args[1..])
        .write_stdin(stdin.to_vec())
        .timeout(LIMIT)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// One run that must give exactly one schema-valid document with possible values (exit 0 or 1).
fn assert_document(args: Vec<OsString>, stdin: &[u8]) -> Value {
    let run = Run {
        id: format!("{args:?}"),
        args: args.clone(),
        stdin: stdin.to_vec(),
        culprit: vec![],
        must_fail: false,
        check_values: true,
        extra: None,
    };
    let how = check(&run).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(how == "exit 0" || how == "exit 1", "{args:?}: {how}");
    // again, for the document (check keeps only the verdict); the tools are idempotent
    let out = assert_cmd::Command::new(bin(args[0].to_str().unwrap()))
        .args(&args[1..])
        .write_stdin(stdin.to_vec())
        .timeout(LIMIT)
        .output()
        .unwrap();
    common::one_doc(&out.stdout)
}

const KERN_HEADER: &str = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name";

/// A kernel report of `rows` (`total,instances,avg` each) in a temporary folder.
fn kern_csv(rows: &[(&str, &str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("k_cuda_gpu_kern_sum.csv");
    let mut text = format!("{KERN_HEADER}\n");
    for (i, (total, inst, avg)) in rows.iter().enumerate() {
        text.push_str(&format!("50.0,{total},{inst},{avg},1,1,1,0,kernel_{i}\n"));
    }
    std::fs::write(&p, text).unwrap();
    (d, p)
}

#[test]
fn kern_csv_sums_never_saturate_and_durations_and_counts_are_not_negative() {
    let big = "9223372036854775000";
    let max = "9223372036854775807";
    let cases: Vec<(Vec<(&str, &str, &str)>, &[&str])> = vec![
        // two rows of 2^63 − 808 ns: the sum overflows at the second row
        (vec![(big, "1", "1"), (big, "1", "1")], &["line 3", "column \"Total Time (ns)\"", "overflows"]),
        // instances: three rows of i64::MAX overflow u64
        (vec![("1", max, "1"), ("1", max, "1"), ("1", max, "1")], &["line 4", "column \"Instances\"", "overflows"]),
        (vec![("100", "1", "1"), ("-100", "1", "1")], &["line 3", "column \"Total Time (ns)\"", "negative"]),
        (vec![("100", "-1", "1")], &["line 2", "column \"Instances\"", "negative"]),
        (vec![("100", "1", "-5")], &["line 2", "column \"Avg (ns)\"", "negative"]),
        // a cell beyond i64 is refused by the cell itself
        (vec![("9223372036854775808", "1", "1")], &["line 2", "column \"Total Time (ns)\""]),
    ];
    for (rows, culprit) in cases {
        let (_d, p) = kern_csv(&rows);
        let mut c = vec!["k_cuda_gpu_kern_sum.csv"];
        c.extend(culprit);
        assert_refused(vec![os("kern-csv-to-json"), os(&p)], b"", &c);
        let bytes = std::fs::read(&p).unwrap();
        let mut c = vec!["<stdin>"];
        c.extend(culprit);
        assert_refused(vec![os("kern-csv-to-json"), os("-")], &bytes, &c);
    }
    // a sum of exactly i64::MAX still fits, and its shares add up to 1
    let (_d, p) = kern_csv(&[("4611686018427387903", "1", "1"), ("4611686018427387904", "1", "1")]);
    let doc = assert_document(vec![os("kern-csv-to-json"), os(&p), os("--compact")], b"");
    assert_eq!(doc["totals"]["total_time_ns"], i64::MAX);
    let shares: f64 = doc["top_kernels"].as_array().unwrap().iter().map(|k| k["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
    // non-kernel reports: a negative count or duration is refused too
    let api = common::fixture("nsys-2025.3.1/stats/gpu_full_node_cuda_api_sum.csv");
    let text = std::fs::read_to_string(api).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut cells: Vec<String> = lines[1].split(',').map(String::from).collect();
    cells[2] = "-3".into(); // Num Calls
    lines[1] = cells.join(",");
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x_cuda_api_sum.csv");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    assert_refused(vec![os("kern-csv-to-json"), os(&p)], b"", &["x_cuda_api_sum.csv", "line 2", "\"Num Calls\""]);
}

#[test]
fn kern_csv_reads_its_input_once() {
    // a large kernel report rewritten in place, over and over, while kern-csv-to-json reads it: the tool must
    // either refuse with nothing on stdout, or publish a document whose totals are the sums of its rows
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big_cuda_gpu_kern_sum.csv");
    let version = |total: u64, n: usize| {
        let mut t = format!("{KERN_HEADER}\n");
        for i in 0..n {
            t.push_str(&format!("0.1,{total},1,{total},{total},{total},{total},0,kernel_{i}\n"));
        }
        t.into_bytes()
    };
    let (a, b) = (version(1, 60_000), version(1000, 40_000));
    std::fs::write(&p, &a).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let outs: Vec<std::process::Output> = std::thread::scope(|s| {
        s.spawn(|| {
            let mut k = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let bytes = if k.is_multiple_of(2) { &b } else { &a };
                let _ = std::fs::write(&p, bytes); // truncate and rewrite the same file
                k += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
        });
        let outs: Vec<_> = (0..4)
            .map(|_| {
                assert_cmd::Command::new(bin("kern-csv-to-json"))
                    .args([os(&p), os("--top"), os("0"), os("--compact")])
                    .timeout(LIMIT)
                    .output()
            })
            .collect();
        stop.store(true, Ordering::SeqCst);
        outs
    })
    .into_iter()
    .collect::<Result<_, _>>()
    .unwrap();
    let (mut docs, mut refused) = (0, 0);
    for out in outs {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        match out.status.code() {
            Some(0) => {
                let doc = common::one_doc(&out.stdout);
                let rows = doc["rows"].as_array().unwrap();
                let sum: i64 = rows.iter().map(|r| r["total_time_ns"].as_i64().unwrap()).sum();
                assert_eq!(doc["totals"]["total_time_ns"].as_i64(), Some(sum), "totals disagree with the rows");
                assert_eq!(doc["totals"]["kernels"].as_u64(), Some(rows.len() as u64));
                docs += 1;
            }
            Some(2) => {
                assert!(out.stdout.is_empty(), "exit 2 after {} bytes on stdout: {stderr}", out.stdout.len());
                refused += 1;
            }
            c => panic!("exit {c:?}: {stderr}"),
        }
    }
    eprintln!("kern_csv_reads_its_input_once: {docs} documents, {refused} refused");
}

#[test]
fn kern_csv_refuses_an_all_empty_row() {
    for rel in [
        "nsys-2025.3.1/stats/gpu_full_node_nvtx_sum.csv",
        "nsys-2025.3.1/stats/gpu_full_node_cuda_api_sum.csv",
        "nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv",
    ] {
        let text = std::fs::read_to_string(common::fixture(rel)).unwrap();
        let name = Path::new(rel).file_name().unwrap().to_str().unwrap();
        let fields = text.lines().next().unwrap().split(',').count();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines.insert(2, ",".repeat(fields - 1));
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        assert_refused(vec![os("kern-csv-to-json"), os(&p)], b"", &[name, "line 3", "empty"]);
        let report = name.trim_start_matches("gpu_full_node_").trim_end_matches(".csv");
        let bytes = std::fs::read(&p).unwrap();
        assert_refused(
            vec![os("kern-csv-to-json"), os("-"), os("--report"), os(report)],
            &bytes,
            &["<stdin>", "line 3", "empty"],
        );
    }
}

#[test]
fn kern_csv_names_an_sqlite_export() {
    let (_d, p) = copy_into(&common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), "x.sqlite");
    for (args, stdin, who) in [
        (vec![os("kern-csv-to-json"), os(&p)], vec![], "x.sqlite"),
        (vec![os("kern-csv-to-json"), os("-")], std::fs::read(&p).unwrap(), "<stdin>"),
    ] {
        let err = assert_refused(args, &stdin, &[who, "SQLite export", "gate-check", "report", "sqlite-ranges"]);
        assert!(!err.contains("UTF-8"), "{err}");
    }
}

/// A gate document of the real capture (what bundle-merge merges in the tests below).
fn gate_doc() -> Vec<u8> {
    let cap = common::fixture("nsys-2025.3.1/gpu_full_node.sqlite");
    let out = std::process::Command::new(bin("gate-check")).args([os(&cap), os("--compact")]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn bundle_merge_never_follows_or_blocks_on_its_lock_file() {
    let doc = gate_doc();
    let d = tempfile::tempdir().unwrap();
    let bundle = d.path().join("b.json");
    let lock = d.path().join("b.json.lock");
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("created-by-the-link");
    let cases: Vec<(&str, Box<dyn Fn(&Path) + '_>)> = vec![
        ("a FIFO", Box::new(|p: &Path| mkfifo(p))),
        ("a symbolic link", Box::new(|p: &Path| std::os::unix::fs::symlink(&target, p).unwrap())),
        ("a directory", Box::new(|p: &Path| std::fs::create_dir(p).unwrap())),
    ];
    for (what, plant) in cases {
        for with_bundle in [false, true] {
            let _ = std::fs::remove_file(&lock).or_else(|_| std::fs::remove_dir(&lock));
            let _ = std::fs::remove_file(&bundle);
            if with_bundle {
                std::fs::write(&bundle, "{\"a\": 1}\n").unwrap();
            }
            plant(&lock);
            let before = listing(d.path());
            assert_refused(vec![os("bundle-merge"), os(&bundle)], &doc, &["b.json.lock", what]);
            assert_eq!(listing(d.path()), before, "{what}: files changed beside the bundle");
            assert!(!target.exists(), "{what}: the link's target was created");
            if with_bundle {
                assert_eq!(std::fs::read_to_string(&bundle).unwrap(), "{\"a\": 1}\n");
            }
        }
    }
    // a regular lock file left by an earlier run is used as before
    let _ = std::fs::remove_file(&lock).or_else(|_| std::fs::remove_dir(&lock));
    std::fs::write(&lock, "").unwrap();
    assert_document(vec![os("bundle-merge"), os(&bundle)], &doc);
    assert!(!lock.exists(), "the lock file is removed when the merge ends");
    assert_document(vec![os("report"), os(&bundle), os("--compact")], b"");
}

#[test]
fn bundle_merge_accepts_what_the_bundle_readers_accept() {
    let doc = gate_doc();
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    // foreign fields the readers refuse: each is refused by bundle-merge too, naming line and column
    let bad: Vec<(String, &[&str])> = vec![
        ("{\n  \"foreign\": 1e400\n}\n".into(), &["line 2 column", "number out of range"]),
        ("{\n  \"foreign\": -1e400\n}\n".into(), &["line 2 column", "number out of range"]),
        ("{\n  \"foreign\": \"\\ud800\"\n}\n".into(), &["line 2 column", "not valid JSON"]),
        ("{\n  \"foreign\": \"\\udc00x\"\n}\n".into(), &["line 2 column", "not valid JSON"]),
        (format!("{{\n  \"foreign\": {}\n}}\n", deep(140)), &["line 2 column", "recursion limit"]),
        ("{\"foreign\": {\"x\": 1, \"x\": 2}}\n".into(), &["line 1 column", "$.foreign.x", "duplicate key"]),
    ];
    for (text, culprit) in &bad {
        let d = tempfile::tempdir().unwrap();
        let bundle = d.path().join("b.json");
        std::fs::write(&bundle, text).unwrap();
        let mut c = vec!["b.json"];
        c.extend(culprit.iter());
        for mode in [None, Some("--check"), Some("--stdout")] {
            let mut args = vec![os("bundle-merge"), os(&bundle)];
            args.extend(mode.map(os));
            assert_refused(args, &doc, &c);
        }
        assert_eq!(&std::fs::read_to_string(&bundle).unwrap(), text, "the bundle changed");
        // the readers refuse it as well: the same language
        assert_refused(vec![os("report"), os(&bundle)], b"", &["b.json", culprit.last().unwrap()]);
    }
    // what the readers accept is accepted: a number at the edge of f64, nesting of 127, a surrogate pair
    let d = tempfile::tempdir().unwrap();
    let bundle = d.path().join("b.json");
    let ok = format!(
        "{{\"big\": 1.7976931348623157e308, \"int\": 123456789012345678901234567890, \"pair\": \"\\ud83d\\ude00\", \"nest\": {}}}\n",
        deep(126)
    );
    std::fs::write(&bundle, &ok).unwrap();
    assert_document(vec![os("bundle-merge"), os(&bundle)], &doc);
    let merged = std::fs::read_to_string(&bundle).unwrap();
    assert!(merged.contains("123456789012345678901234567890") && merged.contains("\\ud83d\\ude00"), "{merged}");
    assert_document(vec![os("report"), os(&bundle), os("--compact")], b"");
    // a document readable alone but nested too deep at its place in the bundle (kernel_profile.gates.x…)
    let d = tempfile::tempdir().unwrap();
    let bundle = d.path().join("b.json");
    let mut g: Value = serde_json::from_slice(&doc).unwrap();
    g["x"] = serde_json::from_str(&deep(126)).unwrap();
    let text = serde_json::to_vec(&g).unwrap();
    assert!(nsyskit::contract::parse_json_stream(&text, "doc").is_ok());
    assert_refused(vec![os("bundle-merge"), os(&bundle)], &text, &["b.json", "merged bundle", "recursion limit"]);
    assert!(!bundle.exists());
}

#[test]
fn a_path_that_is_not_utf8_opens_exactly_that_file() {
    use std::os::unix::ffi::OsStrExt;
    // `cap-\xff.sqlite` (PASS, nsys 2025.3) beside `cap-\u{FFFD}.sqlite` (RETRY, nsys 2023.4): the lossy form of
    // the first name is the second one
    let d = tempfile::tempdir().unwrap();
    let raw = d.path().join(std::ffi::OsStr::from_bytes(b"cap-\xff.sqlite"));
    let look_alike = d.path().join("cap-\u{FFFD}.sqlite");
    std::fs::copy(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), &raw).unwrap();
    std::fs::copy(common::fixture("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite"), &look_alike).unwrap();
    assert_eq!(raw.to_string_lossy(), look_alike.to_string_lossy());
    let version = |doc: &Value| doc.pointer("/source/nsys_version").and_then(|v| v.as_str()).unwrap_or("").to_string();
    let before = listing(d.path());

    let pass = assert_document(vec![os("gate-check"), os(&raw), os("--compact")], b"");
    assert_eq!(pass["verdict"], "PASS", "{}", pass["retry"]);
    assert!(version(&pass).starts_with("2025.3"), "{}", version(&pass));
    let retry = assert_document(vec![os("gate-check"), os(&look_alike), os("--compact")], b"");
    assert_eq!(retry["verdict"], "RETRY");
    assert!(version(&retry).starts_with("2023.4"), "{}", version(&retry));

    // report: the same document as from a plain-named copy of the PASS capture
    let plain = d.path().join("plain.sqlite");
    std::fs::copy(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"), &plain).unwrap();
    let norm = |v: &Value, p: &Path| {
        v.to_string()
            .replace(&p.to_string_lossy().to_string(), "CAP")
            .replace(p.file_name().unwrap().to_string_lossy().as_ref(), "CAP")
    };
    let r_raw = assert_document(vec![os("report"), os(&raw), os("--compact")], b"");
    let r_plain = assert_document(vec![os("report"), os(&plain), os("--compact")], b"");
    let r_look = assert_document(vec![os("report"), os(&look_alike), os("--compact")], b"");
    assert_eq!(norm(&r_raw, &raw), norm(&r_plain, &plain), "report read another file");
    assert_ne!(norm(&r_raw, &raw), norm(&r_look, &look_alike));

    // capture-compare: each side is the file named
    let c = assert_document(vec![os("capture-compare"), os(&raw), os(&look_alike), os("--compact")], b"");
    let v = |side: &str| c.pointer(&format!("/{side}/facts/nsys_version/value")).cloned().unwrap_or(Value::Null);
    assert!(v("a").as_str().unwrap_or("").starts_with("2025.3"), "a: {}", v("a"));
    assert!(v("b").as_str().unwrap_or("").starts_with("2023.4"), "b: {}", v("b"));
    std::fs::remove_file(&plain).unwrap();
    assert_eq!(listing(d.path()), before, "files appeared beside the captures");
}

/// Peak RSS (KiB, `VmHWM`) of a running child, sampled every 10 ms until `done`; past `kill_kib` the child is
/// killed (SIGKILL), so that a reader holding its input in memory cannot exhaust the machine.
fn sample_peak_rss(
    pid: u32,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    kill_kib: i64,
) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || {
        let mut peak = 0i64;
        while !done.load(Ordering::Relaxed) {
            if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if let Some(v) = st
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
                {
                    peak = peak.max(v);
                    if peak > kill_kib {
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                        return peak;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    })
}

/// Issue 42: SQLite on stdin was read whole into memory (6.6 GB in 8 s on an endless stdin). Now it streams into
/// a temporary file bounded by NSYSKIT_STDIN_MAX_BYTES: an endless stream of zeros stops at the bound (exit 2
/// naming <stdin> and the bound) in every reader of an export on stdin, in bounded memory, quickly, and leaves nothing in TMPDIR; an export under
/// the bound still reads; a malformed bound is a usage error.
#[test]
fn endless_stdin_is_bounded_and_leaves_nothing() {
    use std::io::Write;
    const MAX: u64 = 256 << 20;
    let export = common::fixture("nsys-2023.4.4/cpu_nvtx_osrt.sqlite");
    let other = export.to_string_lossy().into_owned();
    for (tool, args) in [
        ("gate-check", vec!["-"]),
        ("sqlite-ranges", vec!["-"]),
        ("nvtx-readiness", vec!["-"]),
        ("report", vec!["-"]),
        ("capture-compare", vec!["-", other.as_str()]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let t = std::time::Instant::now();
        let mut child = std::process::Command::new(bin(tool))
            .args(&args)
            .env("TMPDIR", &tmp)
            .env("NSYSKIT_STDIN_MAX_BYTES", MAX.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rss = sample_peak_rss(child.id(), done.clone(), 1 << 20);
        // a reader that never stops (the old behaviour) is killed here, and the asserts below say so
        let (pid, d2) = (child.id() as i32, done.clone());
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while !d2.load(Ordering::Relaxed) {
                if t.elapsed() > Duration::from_secs(30) {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut stdin = child.stdin.take().unwrap();
        // an endless writer: an SQLite header, then zeros until the reader stops reading (EPIPE)
        let writer = std::thread::spawn(move || {
            let zeros = vec![0u8; 1 << 20];
            let mut sent = 0u64;
            let mut first = zeros.clone();
            first[..16].copy_from_slice(b"SQLite format 3\0");
            if stdin.write_all(&first).is_ok() {
                sent += first.len() as u64;
            }
            while stdin.write_all(&zeros).is_ok() {
                sent += zeros.len() as u64;
            }
            sent
        });
        let o = child.wait_with_output().unwrap();
        done.store(true, Ordering::Relaxed);
        let (sent, peak_kib) = (writer.join().unwrap(), rss.join().unwrap());
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        eprintln!(
            "MEASURED {tool}: endless stdin, bound {MAX} B: exit {:?} after {:.2} s, {sent} B written, peak RSS {:.1} MiB",
            o.status.code(),
            t.elapsed().as_secs_f64(),
            peak_kib as f64 / 1024.0
        );
        assert_eq!(o.status.code(), Some(2), "{tool}: {err}");
        assert!(o.stdout.is_empty(), "{tool}");
        assert!(
            err.contains(&format!("<stdin>: more than {MAX} bytes (NSYSKIT_STDIN_MAX_BYTES): stopped reading")),
            "{tool}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{tool}: {err}");
        assert!(t.elapsed() < Duration::from_secs(30), "{tool}: took {:?}", t.elapsed());
        assert!(sent <= MAX + (4 << 20) + (1 << 20) * 2, "{tool}: read {sent} B past the bound");
        assert!(peak_kib < 128 << 10, "{tool}: peak RSS {peak_kib} KiB: stdin was held in memory");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{tool}: left in TMPDIR: {left:?}");
    }
    // a real export under the bound reads as from a file; one byte over it does not; a bad bound is usage
    let size = std::fs::metadata(&export).unwrap().len();
    for (bound, code) in [(size.to_string(), Some(0)), ((size - 1).to_string(), Some(2)), ("0".into(), Some(2))] {
        let dir = tempfile::tempdir().unwrap();
        let o = std::process::Command::new(bin("sqlite-ranges"))
            .arg("-")
            .env("TMPDIR", dir.path())
            .env("NSYSKIT_STDIN_MAX_BYTES", &bound)
            .stdin(std::fs::File::open(&export).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), code, "bound {bound}: {err}");
        if bound == "0" {
            assert!(err.contains("NSYSKIT_STDIN_MAX_BYTES=\"0\": expected a positive number of bytes"), "{err}");
        } else if code == Some(2) {
            assert!(err.contains(&format!("<stdin>: more than {bound} bytes")), "{err}");
        } else {
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert!(v.to_string().contains("<stdin>"), "the document names <stdin>");
        }
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "bound {bound}: TMPDIR not empty");
    }
}

/// Run `bin args…` with `env` and return (exit code, stderr, peak RSS in bytes) of that child alone
/// (`wait4`'s rusage).
fn run_measured(name: &str, args: &[&Path], env: &[(&str, &str)]) -> (i32, String, u64) {
    let err = tempfile::NamedTempFile::new().unwrap();
    let (code, rss) = reap_measured(
        name,
        &args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>(),
        env,
        std::process::Stdio::null(),
        err.reopen().unwrap().into(),
    );
    (code, std::fs::read_to_string(err.path()).unwrap(), rss)
}

/// Run the binary `name` with `args` and `env` (stdio as given) and return its exit code (minus the signal when
/// killed) and its peak RSS in bytes, of that program alone. A child's `ru_maxrss` counts the pages of the
/// process it was spawned from until its exec: spawned from this test process (hundreds of MB while other
/// tests run beside it) it read 265–392 MB for a 32 MB nvtx-readiness run. So a small python3 process spawns it
/// and reports its `wait4` rusage: only the wrapper's few MB can precede the exec.
fn reap_measured(
    name: &str,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
    stdout: std::process::Stdio,
    stderr: std::process::Stdio,
) -> (i32, u64) {
    const WRAP: &str = "import os, sys\npid = os.fork()\nif pid == 0:\n    os.execv(sys.argv[2], sys.argv[2:])\n_, st, ru = os.wait4(pid, 0)\nopen(sys.argv[1], 'w').write('%d %d' % (os.waitstatus_to_exitcode(st), ru.ru_maxrss))\n";
    let report = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(WRAP)
        .arg(report.path())
        .arg(bin(name))
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .expect("python3 (a prerequisite of scripts/test) runs the measured child");
    assert!(status.success(), "the measuring wrapper failed: {status}");
    let text = std::fs::read_to_string(report.path()).unwrap();
    let (code, kib) = text.split_once(' ').unwrap();
    (code.parse().unwrap(), kib.parse::<u64>().unwrap() * 1024)
}

/// Issue 42 (Low, memory): bundle-merge of a 103 MB document took 3.1 GB (it cloned the document twice, then
/// rendered it, copied the rendering to indent it and copied it again into the new text); report cloned the
/// whole bundle. Peak RSS ÷ document size, measured at 100 MB: bundle-merge 28× → 11.5×, report on that
/// bundle 16.9× → 10.8× of the bundle. Here a 20 MB ranges document must stay under 16× (bundle-merge) and
/// 14× of the bundle (report), and a JSON input over NSYSKIT_JSON_MAX_BYTES is exit 2 before it is parsed.
#[test]
fn json_tools_memory_is_bounded_by_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("ranges.json");
    let row = |i: usize| {
        format!(
            r#"{{"label":"vibeserve.engine.iteration#{i}","occurrences":400,"occurrences_with_device_work":400,"runtime_calls":5200,"kernels":20000,"memcpys":2400,"memsets":0,"graph_traces":0,"host_wall_time_ns":184588994,"wall_ns_min":320547,"wall_ns_median":459851,"wall_ns_max":967074,"kernel_work_ns":58494842,"host_range_kernel_coverage_ns":61042721,"host_range_kernel_coverage_fraction":0.3306953447072798,"kernel_busy_union_ns":61042721,"kernel_span_ns":135070294,"gpu_idle_within_kernel_span_ns":74027573,"uncovered_host_time_ns":123546273,"gpu_busy_fraction":0.451932983872827,"sync":{{"cudaStreamSynchronize":{{"calls":400,"total_ns":2035888}}}},"depths":{{"0":400}},"parents":{{"":400}}}}"#
        )
    };
    let mut text =
        String::from(r#"{"schema":"nsyskit.ranges/v1","tool":{"name":"sqlite-ranges","version":"0.1.0"},"ranges":["#);
    let mut i = 0;
    while text.len() < 20_000_000 {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&row(i));
        i += 1;
    }
    text.push_str("]}\n");
    std::fs::write(&doc, &text).unwrap();
    let size = text.len() as u64;
    drop(text);

    let bundle = dir.path().join("bundle.json");
    let (code, err, rss) = run_measured("bundle-merge", &[&bundle, &doc], &[]);
    assert_eq!(code, 0, "{err}");
    let ratio = rss as f64 / size as f64;
    eprintln!("bundle-merge: {size} B document, peak RSS {rss} B = {ratio:.1}x");
    assert!(ratio < 16.0, "bundle-merge took {ratio:.1}x the document ({rss} B for {size} B)");

    let bsize = std::fs::metadata(&bundle).unwrap().len();
    let (code, err, rss) = run_measured("report", &[&bundle], &[]);
    assert!(code == 0 || code == 1, "{err}");
    let ratio = rss as f64 / bsize as f64;
    eprintln!("report: {bsize} B bundle, peak RSS {rss} B = {ratio:.1}x");
    assert!(ratio < 14.0, "report took {ratio:.1}x the bundle ({rss} B for {bsize} B)");

    // the bound: exit 2 naming the file and the bound, before anything is parsed or written
    let fresh = dir.path().join("fresh.json");
    let (code, err, _) = run_measured("bundle-merge", &[&fresh, &doc], &[("NSYSKIT_JSON_MAX_BYTES", "1000000")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ranges.json") && err.contains("1000000 bytes") && err.contains("NSYSKIT_JSON_MAX_BYTES"),
        "{err}"
    );
    assert!(!fresh.exists());
    // the bundle itself is a JSON input too; report and capture-compare read it under the same bound
    let (code, err, _) = run_measured("bundle-merge", &[&bundle, &doc], &[("NSYSKIT_JSON_MAX_BYTES", "30000000")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bundle.json") && err.contains("30000000 bytes"), "{err}");
    let (code, err, _) = run_measured("report", &[&bundle], &[("NSYSKIT_JSON_MAX_BYTES", "1000")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bundle.json") && err.contains("NSYSKIT_JSON_MAX_BYTES"), "{err}");
    let (code, err, _) = run_measured("capture-compare", &[&bundle, &bundle], &[("NSYSKIT_JSON_MAX_BYTES", "1000")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bundle.json") && err.contains("NSYSKIT_JSON_MAX_BYTES"), "{err}");
    let (code, err, _) = run_measured("bundle-merge", &[&fresh, &doc], &[("NSYSKIT_JSON_MAX_BYTES", "lots")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("NSYSKIT_JSON_MAX_BYTES=lots"), "{err}");
}

/// Issue 42 (Low, memory): an export of long distinct NVTX labels pushed nvtx-readiness to 9.3 GB: every
/// message was kept whole, several times (interned text, its key, the label, its key, the folding tables, the
/// document). A label now keeps at most `LABEL_MAX_BYTES` (4 KiB) of its message, cut at a character boundary
/// and marked, and a note counts the cut labels. 1 500 ranges with distinct 64 KiB messages (half as `text`,
/// half as `textId`, two-byte characters across the cut) in a copy of decode_clean: measured 3 000 of them at
/// 782 MB before, 62 MB after (decode_clean alone: 11 MB). The bound: 40 MB for the program and the fixture
/// plus 8 copies of every cut label (1 500 × 4 KiB × 8 = 49 MB); the old code needs about 400 MB here.
#[test]
fn long_distinct_nvtx_labels_take_bounded_memory() {
    let (_dir, x) = copy_into(&common::fixture("nsys-2025.3.1/decode_clean.sqlite"), "long.sqlite");
    const N: usize = 1500;
    {
        let c = rusqlite::Connection::open(&x).unwrap();
        let g: i64 =
            c.query_row("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1", [], |r| r.get(0)).unwrap();
        let top: i64 = c.query_row("SELECT max(id) FROM StringIds", [], |r| r.get(0)).unwrap();
        let t = c.unchecked_transaction().unwrap();
        for i in 0..N {
            // "long.00007." then 2-byte characters, so the cut at 4 096 bytes falls inside one
            let text = format!("long.{i:05}.{}x", "é".repeat(32767));
            let s = 20_000_000 + i as i64 * 10;
            if i % 2 == 1 {
                let id = top + 1 + i as i64;
                t.execute("INSERT INTO StringIds(id, value) VALUES (?1, ?2)", rusqlite::params![id, text]).unwrap();
                t.execute(
                    "INSERT INTO NVTX_EVENTS(start, \"end\", eventType, globalTid, textId, domainId) VALUES (?1, ?2, 59, ?3, ?4, 0)",
                    rusqlite::params![s, s + 5, g, id],
                )
                .unwrap();
            } else {
                t.execute(
                    "INSERT INTO NVTX_EVENTS(start, \"end\", eventType, globalTid, text, domainId) VALUES (?1, ?2, 59, ?3, ?4, 0)",
                    rusqlite::params![s, s + 5, g, text],
                )
                .unwrap();
            }
        }
        t.commit().unwrap();
    }
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let (code, rss) = reap_measured(
        "nvtx-readiness",
        &[x.as_os_str()],
        &[],
        out.reopen().unwrap().into(),
        err.reopen().unwrap().into(),
    );
    let stderr = std::fs::read_to_string(err.path()).unwrap();
    assert!(code == 0 || code == 1, "{code} {stderr}");
    let bound = 40_000_000 + N as u64 * 4096 * 8;
    eprintln!("nvtx-readiness: {N} distinct 64 KiB labels, peak RSS {rss} B (bound {bound} B)");
    assert!(rss < bound, "peak RSS {rss} B over {bound} B");
    let doc: Value = serde_json::from_slice(&std::fs::read(out.path()).unwrap()).unwrap();
    let notes: Vec<&str> = doc["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with(&format!("{N} labels were longer than 4096 bytes")) && n.contains("…[cut]")),
        "{notes:?}"
    );
    // every label in the document is cut: at most 4 096 bytes of message and the marker, a valid string
    let mut longest = 0;
    let mut stack = vec![&doc];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => longest = longest.max(s.len()),
            Value::Array(a) => stack.extend(a),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    assert!(longest <= 4096 + "…[cut]".len() + 64, "a string of {longest} bytes in the document");
}
