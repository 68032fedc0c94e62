//! Benchmark helper for `sqlite-ranges` (see `scripts/bench-ranges`); built only with `--features bench-tools`.
//!
//! `gen-big-export SRC.sqlite OUT.sqlite COPIES` writes a large export by replicating the rows of a real
//! fixture COPIES times: NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME and the four device tables get every row once
//! per copy, with timestamps shifted by `copy × (capture length + 1 ms)` and correlation ids shifted by
//! `copy × (max correlationId + 1)` (fresh ids: no copy's kernels join another copy's calls); every other table
//! (StringIds, PROCESSES, ThreadNames, META_DATA_*, …) is copied once, except that `ANALYSIS_DETAILS`'s `duration`
//! and `stopTime` grow by the copies' length (else every range of a later copy would end after the capture's end:
//! closed by it, no occurrence). The source is opened read-only.
//!
//! `gen-big-export --scan-floor FILE.sqlite` prints the wall time of the bare scan floor: one SELECT of only the
//! columns `sqlite-ranges` reads from each table it reads, stepped through with the same SQLite library.

use std::time::Instant;

use rusqlite::{types::ValueRef, Connection, OpenFlags};

const REPLICATED: [&str; 6] = [
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--scan-floor" {
        scan_floor(&args[2]);
        return;
    }
    if args.len() != 4 {
        eprintln!("usage: gen-big-export SRC.sqlite OUT.sqlite COPIES | gen-big-export --scan-floor FILE.sqlite");
        std::process::exit(2);
    }
    let copies: i64 = args[3].parse().expect("COPIES is an integer");
    let _ = std::fs::remove_file(&args[2]);
    let out = Connection::open(&args[2]).unwrap();
    out.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;").unwrap();
    out.execute("ATTACH DATABASE ?1 AS src", [format!("file:{}?mode=ro", args[1])]).ok();
    // rusqlite's ATTACH through execute needs URI support; fall back to a plain path
    if out.query_row("SELECT count(*) FROM src.sqlite_master", [], |r| r.get::<_, i64>(0)).is_err() {
        out.execute("ATTACH DATABASE ?1 AS src", [&args[1]]).unwrap();
    }
    let tables: Vec<(String, String)> = {
        let mut st =
            out.prepare("SELECT name, sql FROM src.sqlite_master WHERE type = 'table' AND sql IS NOT NULL").unwrap();
        let v = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect();
        v
    };
    let (t0, t1): (i64, i64) = out
        .query_row(
            "SELECT min(s), max(e) FROM (SELECT min(start) s, max(coalesce(end, start)) e FROM src.NVTX_EVENTS
             UNION ALL SELECT min(start), max(end) FROM src.CUPTI_ACTIVITY_KIND_RUNTIME)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let shift = (t1 - t0) + 1_000_000;
    let mut max_corr = 0i64;
    for t in &REPLICATED[1..] {
        if tables.iter().any(|(n, _)| n == t) {
            let m: Option<i64> =
                out.query_row(&format!("SELECT max(correlationId) FROM src.{t}"), [], |r| r.get(0)).unwrap();
            max_corr = max_corr.max(m.unwrap_or(0));
        }
    }
    let cshift = max_corr + 1;
    out.execute_batch("BEGIN").unwrap();
    for (name, sql) in &tables {
        out.execute_batch(sql).unwrap();
        let cols: Vec<String> = {
            let mut st = out.prepare("SELECT name FROM pragma_table_info(?1, 'src')").unwrap();
            let v = st.query_map([name], |r| r.get(0)).unwrap().map(|r| r.unwrap()).collect();
            v
        };
        let list = cols.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(", ");
        if !REPLICATED.contains(&name.as_str()) {
            out.execute_batch(&format!("INSERT INTO main.\"{name}\" ({list}) SELECT {list} FROM src.\"{name}\""))
                .unwrap();
            continue;
        }
        for k in 0..copies {
            let sel = cols
                .iter()
                .map(|c| match c.as_str() {
                    "start" | "end" => format!("\"{c}\" + {}", k * shift),
                    "correlationId" => format!("\"{c}\" + {}", k * cshift),
                    _ => format!("\"{c}\""),
                })
                .collect::<Vec<_>>()
                .join(", ");
            out.execute_batch(&format!(
                "INSERT INTO main.\"{name}\" ({list}) SELECT {sel} FROM src.\"{name}\" ORDER BY rowid"
            ))
            .unwrap();
        }
        eprint!("\r{name}: {copies} copies\x1b[K");
    }
    // the capture lasts as long as its copies: a range ending after ANALYSIS_DETAILS.duration is one nsys closed
    // at the capture's end (not an occurrence), so a copy beyond the source's duration would not be analysed
    let extra = (copies - 1) * shift;
    if tables.iter().any(|(n, _)| n == "ANALYSIS_DETAILS") {
        for col in ["duration", "stopTime"] {
            let has: i64 = out
                .query_row("SELECT count(*) FROM pragma_table_info('ANALYSIS_DETAILS') WHERE name = ?1", [col], |r| {
                    r.get(0)
                })
                .unwrap();
            if has > 0 {
                out.execute_batch(&format!("UPDATE ANALYSIS_DETAILS SET \"{col}\" = \"{col}\" + {extra}")).unwrap();
            }
        }
    }
    out.execute_batch("COMMIT").unwrap();
    eprintln!();
    let kernels: i64 = out.query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| r.get(0)).unwrap_or(0);
    println!("{kernels}");
}

fn scan_floor(path: &str) {
    let t = Instant::now();
    let c = Connection::open_with_flags(
        format!("file:{path}?mode=ro&immutable=1"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let queries = [
        ("NVTX_EVENTS", "SELECT start, end, eventType, text, textId, globalTid, domainId FROM NVTX_EVENTS WHERE eventType IN (59, 60, 75)"),
        ("StringIds", "SELECT id, value FROM StringIds"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "SELECT start, end, globalPid, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "SELECT start, end, globalPid, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "SELECT start, end, globalPid, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_MEMSET"),
        ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "SELECT start, end, globalPid, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
    ];
    let mut acc = 0i64;
    let mut rows = 0u64;
    for (table, q) in queries {
        let exists: i64 =
            c.query_row("SELECT count(*) FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0)).unwrap();
        if exists == 0 {
            continue;
        }
        let mut st = c.prepare(q).unwrap();
        let n = st.column_count();
        let mut rs = st.query([]).unwrap();
        while let Some(r) = rs.next().unwrap() {
            rows += 1;
            for i in 0..n {
                match r.get_ref(i).unwrap() {
                    ValueRef::Integer(v) => acc = acc.wrapping_add(v),
                    ValueRef::Text(t) => acc = acc.wrapping_add(t.len() as i64),
                    _ => {}
                }
            }
        }
    }
    println!("{:.3} {rows} {acc}", t.elapsed().as_secs_f64());
}
