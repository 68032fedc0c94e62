//! The SQLite readers (sqlite-ranges, gate-check, nvtx-readiness, report, capture-compare) on copies of real
//! exports mutated with rusqlite in a temporary folder: a WAL-mode export, a live writer, a hot journal
//! (nothing created next to the evidence, its bytes and mtime unchanged, nothing uncommitted read), impossible
//! timestamps (exit 2 naming table, column and row), and NULL or inverted intervals in every timed CUDA table
//! (skipped and counted per table and reason by every reader).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use assert_cmd::Command;
use rusqlite::Connection;
use serde_json::Value;

const READERS: [&str; 5] = ["sqlite-ranges", "gate-check", "nvtx-readiness", "report", "capture-compare"];

fn copy_fixture(dir: &Path, rel: &str) -> PathBuf {
    let dst = dir.join("capture.sqlite");
    std::fs::copy(common::fixture(rel), &dst).unwrap();
    dst
}

/// Every file of the folder: name → (bytes, mtime).
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (e.file_name().to_string_lossy().into_owned(), (std::fs::read(e.path()).unwrap(), m.modified().unwrap()))
        })
        .collect()
}

fn run(bin: &str, input: &Path) -> (i32, Vec<u8>, String) {
    let mut c = Command::cargo_bin(bin).unwrap();
    c.arg(input);
    if bin == "capture-compare" {
        c.arg(input);
    }
    let out = c
        .arg("--compact")
        .env("NSYS_BIN", "/nonexistent/nsys")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn doc(stdout: &[u8]) -> Value {
    common::one_doc(stdout)
}

/// Each reader on `input`: the folder is unchanged afterwards (no new file, same bytes and mtimes).
fn run_all_unchanged(dir: &Path, input: &Path) -> Vec<(&'static str, i32, Vec<u8>, String)> {
    let before = snapshot(dir);
    let mut out = Vec::new();
    for bin in READERS {
        let (code, stdout, stderr) = run(bin, input);
        assert!(!stderr.contains("panicked"), "{bin}: {stderr}");
        let after = snapshot(dir);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "{bin}: a file appeared or vanished next to the evidence"
        );
        for (k, v) in &before {
            assert!(after[k] == *v, "{bin}: {k} changed (bytes or mtime)");
        }
        out.push((bin, code, stdout, stderr));
    }
    out
}

#[test]
fn wal_export_with_a_live_writer_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let p = copy_fixture(dir.path(), "nsys-2025.3.1/gpu_full_node.sqlite");
    let w = Connection::open(&p).unwrap();
    let mode: String = w.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    // a live writer holding a transaction with an uncommitted label, spilled into the -wal
    w.execute_batch(
        "PRAGMA cache_size=1; BEGIN IMMEDIATE;
         UPDATE NVTX_EVENTS SET text = 'vibeserve.UNCOMMITTED' WHERE eventType = 59;
         INSERT INTO StringIds SELECT id + 10000000, value FROM StringIds;",
    )
    .unwrap();
    assert!(dir.path().join("capture.sqlite-wal").exists());
    for (bin, code, stdout, stderr) in run_all_unchanged(dir.path(), &p) {
        assert_eq!(code, 2, "{bin}: {stderr}");
        assert!(stdout.is_empty(), "{bin}");
        assert!(
            stderr.contains("capture.sqlite") && stderr.contains("WAL") && stderr.contains("-wal"),
            "{bin}: {stderr}"
        );
        assert!(!stderr.contains("UNCOMMITTED"), "{bin}");
    }
    w.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn wal_export_closed_cleanly_is_read_without_side_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = copy_fixture(dir.path(), "nsys-2025.3.1/gpu_full_node.sqlite");
    {
        let w = Connection::open(&p).unwrap();
        let _: String = w.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
    }
    assert!(!dir.path().join("capture.sqlite-wal").exists(), "SQLite removes the -wal on close");
    let want = run("sqlite-ranges", &common::fixture("nsys-2025.3.1/gpu_full_node.sqlite"));
    for (bin, code, stdout, stderr) in run_all_unchanged(dir.path(), &p) {
        assert!(code == 0 || code == 1, "{bin}: {stderr}");
        if bin == "sqlite-ranges" {
            assert_eq!(doc(&stdout)["ranges"], doc(&want.1)["ranges"], "the WAL copy reads as the original");
        }
    }
}

#[test]
fn rollback_journal_writer_never_shows_uncommitted_data() {
    let dir = tempfile::tempdir().unwrap();
    let p = copy_fixture(dir.path(), "nsys-2025.3.1/gpu_full_node.sqlite");
    let w = Connection::open(&p).unwrap();
    // a reserved lock, the change in the writer's cache only: readers see the committed export
    w.execute_batch("BEGIN IMMEDIATE; UPDATE NVTX_EVENTS SET text = 'vibeserve.UNCOMMITTED' WHERE eventType = 59;")
        .unwrap();
    for (bin, code, stdout, stderr) in run_all_unchanged(dir.path(), &p) {
        assert!(code == 0 || code == 1, "{bin}: {stderr}");
        assert!(!String::from_utf8_lossy(&stdout).contains("UNCOMMITTED"), "{bin} read a writer's uncommitted label");
    }
    // the writer spills its changes into the file (exclusive lock): readers wait, then exit 2, reading nothing
    w.execute_batch(
        "PRAGMA cache_size=1; INSERT INTO StringIds SELECT id + 10000000, value || 'UNCOMMITTED' FROM StringIds;",
    )
    .unwrap();
    let journal = dir.path().join("capture.sqlite-journal");
    assert!(journal.exists());
    let (code, stdout, stderr) = run("sqlite-ranges", &p);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stdout.is_empty() && stderr.contains("capture.sqlite") && stderr.contains("locked by another program"),
        "{stderr}"
    );

    // a hot journal: the spilled file and its journal copied while the writer holds them, then left alone
    let hot = tempfile::tempdir().unwrap();
    let hp = hot.path().join("capture.sqlite");
    std::fs::copy(&p, &hp).unwrap();
    std::fs::copy(&journal, hot.path().join("capture.sqlite-journal")).unwrap();
    w.execute_batch("ROLLBACK").unwrap();
    drop(w);
    for (bin, code, stdout, stderr) in run_all_unchanged(hot.path(), &hp) {
        assert_eq!(code, 2, "{bin}: {stderr}");
        assert!(stdout.is_empty(), "{bin}");
        assert!(stderr.contains("hot journal"), "{bin}: {stderr}");
    }
}

/// Copy `rel`, apply `sql` to the copy.
fn mutated(dir: &Path, rel: &str, sql: &str) -> PathBuf {
    let p = copy_fixture(dir, rel);
    let c = Connection::open(&p).unwrap();
    c.execute_batch(sql).unwrap();
    drop(c);
    p
}

#[test]
fn impossible_timestamps_are_exit_2_naming_table_column_and_row() {
    let big = 1i64 << 62;
    for (table, col) in
        [("NVTX_EVENTS", "end"), ("CUPTI_ACTIVITY_KIND_KERNEL", "end"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "start")]
    {
        let dir = tempfile::tempdir().unwrap();
        let rowid: i64 = {
            let c = Connection::open(common::fixture("nsys-2025.3.1/gpu_full_node.sqlite")).unwrap();
            let filter = if table == "NVTX_EVENTS" { "WHERE eventType = 59" } else { "" };
            c.query_row(&format!("SELECT min(rowid) FROM {table} {filter}"), [], |r| r.get(0)).unwrap()
        };
        let p = mutated(
            dir.path(),
            "nsys-2025.3.1/gpu_full_node.sqlite",
            &format!("UPDATE {table} SET {col} = {big} WHERE rowid IN ({rowid}, {rowid} + 1, {rowid} + 2);"),
        );
        for bin in READERS {
            let (code, stdout, stderr) = run(bin, &p);
            if bin == "nvtx-readiness" && table == "CUPTI_ACTIVITY_KIND_KERNEL" {
                // it reads no device table: the damaged rows do not enter its document
                assert!(code == 0 || code == 1, "{stderr}");
                continue;
            }
            assert_eq!(code, 2, "{bin} {table}.{col}: {stderr}");
            assert!(stdout.is_empty());
            assert!(
                stderr.contains(&format!("{table}.{col} = {big}")) && stderr.contains(&format!("row id {rowid}")),
                "{bin}: {stderr}"
            );
        }
    }
}

#[test]
fn null_and_inverted_intervals_are_skipped_and_counted_by_every_reader() {
    // nsys declares start/end NOT NULL: rebuild each timed table without the constraint, then mutate rows
    let rebuild =
        |t: &str| format!("CREATE TABLE x AS SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE x RENAME TO {t};");
    let mut sql = String::new();
    let mutate = [
        ("CUPTI_ACTIVITY_KIND_RUNTIME", 3, 2),
        ("CUPTI_ACTIVITY_KIND_KERNEL", 5, 4),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", 2, 1),
        ("CUPTI_ACTIVITY_KIND_MEMSET", 1, 1),
    ];
    for (t, nulls, inverted) in mutate {
        sql += &rebuild(t);
        sql += &format!(
            "UPDATE {t} SET start = NULL WHERE rowid IN (SELECT rowid FROM {t} ORDER BY rowid LIMIT {nulls});"
        );
        sql += &format!(
            "UPDATE {t} SET end = start - 7 WHERE rowid IN (SELECT rowid FROM {t} WHERE start IS NOT NULL ORDER BY rowid DESC LIMIT {inverted});"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let p = mutated(dir.path(), "nsys-2025.3.1/serve_node.sqlite", &sql);
    let orig = common::fixture("nsys-2025.3.1/serve_node.sqlite");
    let c = Connection::open(&orig).unwrap();
    let count = |q: &str| -> i64 { c.query_row(q, [], |r| r.get(0)).unwrap() };
    let expect = |v: &Value, tables: &[&str]| {
        for (t, nulls, inverted) in mutate.iter().filter(|m| tables.contains(&m.0)) {
            assert_eq!(v[t]["null_start"], *nulls, "{t}: {v}");
            assert_eq!(v[t]["inverted"], *inverted, "{t}: {v}");
            assert_eq!(v[t]["null_end"], 0, "{t}: {v}");
        }
        assert_eq!(v.as_object().unwrap().len(), tables.len(), "{v}");
    };
    let all = [
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    ];

    // sqlite-ranges: skipped_rows, a note, and no negative or vanished total
    let (code, stdout, stderr) = run("sqlite-ranges", &p);
    assert_eq!(code, 0, "{stderr}");
    let r = doc(&stdout);
    expect(&r["skipped_rows"], &all);
    let kernels = count("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
    assert_eq!(r["totals"]["kernels_total"], kernels - 5 - 4, "the valid kernel rows are all counted");
    assert!(r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("CUPTI_ACTIVITY_KIND_KERNEL: 5 with a NULL start, 4 with end < start")));
    for range in r["ranges"].as_array().unwrap() {
        for (k, v) in range.as_object().unwrap() {
            if let Some(n) = v.as_i64() {
                assert!(n >= 0, "{k} = {n} in {}", range["label"]);
            }
        }
        for (_, s) in range["sync"].as_object().unwrap() {
            assert!(s["total_ns"].as_i64().unwrap() >= 0);
        }
    }
    // the original has none
    let (_, o, _) = run("sqlite-ranges", &orig);
    assert!(doc(&o).get("skipped_rows").is_none());

    // gate-check: source.skipped_rows over the tables the gates read
    let (code, stdout, stderr) = run("gate-check", &p);
    assert!(code == 0 || code == 1, "{stderr}");
    expect(&doc(&stdout)["source"]["skipped_rows"], &all);

    // nvtx-readiness: the runtime rows it reads
    let (code, stdout, stderr) = run("nvtx-readiness", &p);
    assert!(code == 0 || code == 1, "{stderr}");
    expect(&doc(&stdout)["source"]["skipped_rows"], &["CUPTI_ACTIVITY_KIND_RUNTIME"]);

    // report: the counts in its notes (from the ranges it reads), no negative device share
    let (code, stdout, stderr) = run("report", &p);
    assert_eq!(code, 0, "{stderr}");
    let rep = doc(&stdout);
    let notes = rep["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("CUPTI_ACTIVITY_KIND_MEMCPY: 2 with a NULL start, 1 with end < start")),
        "{notes:?}"
    );
    let share = rep["signals"]["memcpy_device_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share), "{share}");
}

#[test]
fn graph_trace_rows_with_null_or_inverted_intervals_are_counted() {
    let t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
    let dir = tempfile::tempdir().unwrap();
    let p = mutated(
        dir.path(),
        "nsys-2025.3.1/gpu_full_graph.sqlite",
        &format!(
            "CREATE TABLE x AS SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE x RENAME TO {t};
             UPDATE {t} SET end = NULL WHERE rowid IN (SELECT rowid FROM {t} ORDER BY rowid LIMIT 3);
             UPDATE {t} SET end = start - 1 WHERE rowid IN (SELECT rowid FROM {t} ORDER BY rowid DESC LIMIT 2);"
        ),
    );
    let (code, stdout, stderr) = run("sqlite-ranges", &p);
    assert_eq!(code, 0, "{stderr}");
    let r = doc(&stdout);
    assert_eq!(r["skipped_rows"][t]["null_end"], 3, "{}", r["skipped_rows"]);
    assert_eq!(r["skipped_rows"][t]["inverted"], 2);
    let traces: u64 = r["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["label"] == "vibeserve.graph.replay")
        .map(|x| x["graph_traces"].as_u64().unwrap())
        .sum();
    assert_eq!(traces, 200 - 5, "the valid replays are still attributed");
}

/// Device rows out of start order (nsys writes them in order; the readers check and sort): every reader's
/// document is the same as on the same rows in order, the CI chain's documents too. Both copies are rebuilt
/// the same way, only the row order differs (rows of equal start keep their table order).
#[test]
fn device_rows_out_of_start_order_give_the_same_documents() {
    let rebuilt = |order: &str| {
        let dir = tempfile::tempdir().unwrap();
        let mut sql = String::new();
        for t in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"] {
            sql += &format!(
                "CREATE TABLE x AS SELECT * FROM {t} ORDER BY {order}; DROP TABLE {t}; ALTER TABLE x RENAME TO {t};"
            );
        }
        sql += "VACUUM;";
        let p = mutated(dir.path(), "nsys-2025.3.1/decode_clean.sqlite", &sql);
        (dir, p)
    };
    let (da, a) = rebuilt("rowid");
    let (db, b) = rebuilt("start DESC, rowid");
    let c = Connection::open(&b).unwrap();
    let first: i64 =
        c.query_row("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1", [], |r| r.get(0)).unwrap();
    let max: i64 = c.query_row("SELECT max(start) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| r.get(0)).unwrap();
    assert_eq!(first, max, "the kernels are in reverse start order");
    drop(c);
    assert_eq!(std::fs::metadata(&a).unwrap().len(), std::fs::metadata(&b).unwrap().len());
    let same = |what: &str, x: &[u8], y: &[u8]| {
        let (x, y) = (String::from_utf8_lossy(x), String::from_utf8_lossy(y));
        let x = x.replace(&da.path().display().to_string(), "DIR");
        let y = y.replace(&db.path().display().to_string(), "DIR");
        assert!(x.len() > 100, "{what}: {x}");
        assert!(x == y, "{what} differs on rows out of start order:\n{x}\n---\n{y}");
    };
    for bin in READERS {
        let (ca, sa, ea) = run(bin, &a);
        let (cb, sb, eb) = run(bin, &b);
        assert_eq!((ca, bin), (cb, bin), "{ea}\n{eb}");
        same(bin, &sa, &sb);
    }
    // the CI chain: the report's timelines and the attribution share the rows as read
    let chain = |p: &Path, dir: &Path| {
        let out = Command::cargo_bin("gate-check")
            .unwrap()
            .arg(p)
            .arg("--compact")
            .args(["--ranges", &dir.join("r.json").display().to_string()])
            .args(["--nvtx-readiness", &dir.join("d.json").display().to_string()])
            .args(["--report", &dir.join("p.json").display().to_string()])
            .output()
            .unwrap();
        assert!(out.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&out.stderr));
        let side = ["r.json", "d.json", "p.json"].map(|f| std::fs::read(dir.join(f)).unwrap());
        (out.stdout, side)
    };
    let (ga, sa) = chain(&a, da.path());
    let (gb, sb) = chain(&b, db.path());
    same("gate-check (chain)", &ga, &gb);
    for (f, (x, y)) in ["--ranges", "--nvtx-readiness", "--report"].iter().zip(sa.iter().zip(&sb)) {
        same(f, x, y);
    }
}
