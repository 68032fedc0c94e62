//! The export layer (`nsyskit::export`) on the real exports of each nsys version in fixtures/: the schema
//! differences it resolves, its graph facts and row readers, each checked against SQL written here
//! independently of the layer.

use crate::common;

use std::collections::HashSet;

use nsyskit::export::schema::{self, DeviceKind};
use nsyskit::export::{Export, RowSkips};
use rusqlite::Connection;

fn raw(rel: &str) -> Connection {
    let p = common::fixture(rel);
    Connection::open_with_flags(
        format!("file:{}?mode=ro&immutable=1", p.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap()
}

fn q(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// `(fixture, node-building events table it must use)` per nsys version.
const NODE_LEVEL: [(&str, &str); 4] = [
    ("nsys-2023.4.4/gpu_range_node.sqlite", "CUDA_GRAPH_EVENTS"),
    ("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite", "CUDA_GRAPH_EVENTS"),
    ("nsys-2025.3.1/gpu_full_node.sqlite", "CUDA_GRAPH_NODE_EVENTS"),
    ("nsys-2025.3.1/decode_clean.sqlite", "CUDA_GRAPH_NODE_EVENTS"),
];

#[test]
fn graph_node_events_table_is_resolved_per_nsys_version() {
    for (f, table) in NODE_LEVEL {
        let ex = Export::open(&common::fixture(f)).unwrap();
        assert_eq!(ex.graph_node_events_table(), Some(table), "{f}");
        let facts = ex.graph_facts().unwrap();
        let c = raw(f);
        assert_eq!(
            facts.node_events,
            Some((table.to_string(), q(&c, &format!("SELECT count(*) FROM {table}")))),
            "{f}"
        );
    }
    // graph-level 2025.3 capture: CUDA_GRAPH_EVENTS holds whole-graph events (graphId, no graphNodeId, as in nsys
    // 2026), so there is no node-building table
    let ex = Export::open(&common::fixture("nsys-2025.3.1/gpu_full_graph.sqlite")).unwrap();
    assert!(ex.table("CUDA_GRAPH_EVENTS").is_some_and(|t| t.has_column("graphId") && !t.has_column("graphNodeId")));
    assert_eq!(ex.graph_node_events_table(), None);
    // no CUDA at all: no table
    for f in ["nsys-2023.4.4/cpu_nvtx_osrt.sqlite", "nsys-2025.3.1/cpu_nvtx_osrt.sqlite"] {
        assert_eq!(Export::open(&common::fixture(f)).unwrap().graph_node_events_table(), None, "{f}");
    }
}

#[test]
fn graph_facts_have_one_definition_on_every_version() {
    for f in [
        "nsys-2023.4.4/gpu_range_node.sqlite",
        "nsys-2023.4.4/gpu_range_graph.sqlite",
        "nsys-2025.3.1/gpu_full_node.sqlite",
        "nsys-2025.3.1/gpu_full_graph.sqlite",
        "nsys-2025.3.1/serve_node.sqlite",
    ] {
        let ex = Export::open(&common::fixture(f)).unwrap();
        let c = raw(f);
        let g = ex.graph_facts().unwrap();
        let launches = q(
            &c,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId \
             WHERE substr(s.value, 1, 15) = 'cudaGraphLaunch' OR substr(s.value, 1, 13) = 'cuGraphLaunch'",
        );
        assert_eq!(g.graph_launches, launches, "{f}");
        assert!(launches > 0, "{f}: every GPU fixture replays a graph");
        let mut node = 0;
        for t in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
            if q(&c, &format!("SELECT count(*) FROM sqlite_master WHERE name = '{t}'")) > 0 {
                node += q(&c, &format!("SELECT count(*) FROM {t} WHERE graphNodeId IS NOT NULL"));
            }
        }
        assert_eq!(g.node_rows, node, "{f}");
        assert_eq!(
            g.kernel_node_rows,
            q(&c, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL"),
            "{f}"
        );
        let mode = ex.graph_trace_mode().unwrap().expect("both versions record the mode");
        let node_level = f.contains("node");
        assert_eq!(mode.mode, if node_level { "node" } else { "graph" }, "{f}");
        assert_eq!(mode.raw, if node_level { "Node" } else { "Graph" }, "{f}: nsys writes it capitalised");
        assert_eq!(node_level, g.node_rows > 0, "{f}");
    }
}

#[test]
fn typed_readers_match_the_tables_on_every_version() {
    for f in
        ["nsys-2023.4.4/gpu_range_node.sqlite", "nsys-2025.3.1/gpu_full_node.sqlite", "nsys-2025.3.1/serve_node.sqlite"]
    {
        let ex = Export::open(&common::fixture(f)).unwrap();
        let c = raw(f);
        let mut skips = RowSkips::new();
        let (mut n, mut sum) = (0i64, 0i64);
        ex.runtime_calls(&mut skips, |r| {
            n += 1;
            sum += r.end - r.start;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            (n, sum),
            (
                q(&c, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
                q(&c, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
            ),
            "{f}"
        );
        for k in DeviceKind::ALL {
            let t = k.table();
            if q(&c, &format!("SELECT count(*) FROM sqlite_master WHERE name = '{t}'")) == 0 {
                continue;
            }
            let mut n = 0i64;
            let mut corr = HashSet::new();
            ex.device_rows(k, &mut skips, |r| {
                n += 1;
                corr.insert((r.global_pid, r.correlation_id));
                Ok(())
            })
            .unwrap();
            assert_eq!(n, q(&c, &format!("SELECT count(*) FROM {t}")), "{f} {t}");
            assert_eq!(
                corr.len() as i64,
                q(&c, &format!("SELECT count(*) FROM (SELECT DISTINCT globalPid, correlationId FROM {t})")),
                "{f} {t}"
            );
        }
        let mut sync = 0i64;
        ex.sync_rows(&mut skips, |_| {
            sync += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(sync, q(&c, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"), "{f}");
        assert!(skips.is_empty(), "{f}: real exports have no invalid interval: {skips:?}");
        // NVTX: text (both versions write the message inline) or textId
        let mut ranges = 0i64;
        ex.nvtx_events(&schema::nvtx::RANGES, |r| {
            assert!(r.text.is_some() || r.text_id.is_some(), "{f}");
            ranges += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(ranges, q(&c, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)"), "{f}");
        assert_eq!(
            ex.process_ids().unwrap().len() as i64,
            q(&c, "SELECT count(DISTINCT globalPid) FROM PROCESSES"),
            "{f}"
        );
        // DIAGNOSTIC_EVENT exists from nsys 2024 on
        let diag = ex.diagnostic_events().unwrap();
        if f.contains("2023") {
            assert!(diag.is_empty() && !ex.has_table("DIAGNOSTIC_EVENT"), "{f}");
        } else {
            assert_eq!(diag.len() as i64, q(&c, "SELECT count(*) FROM DIAGNOSTIC_EVENT"), "{f}");
        }
        assert!(!ex.target_gpus().unwrap().is_empty(), "{f}");
    }
}

#[test]
fn a_missing_column_names_file_table_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.sqlite");
    let c = Connection::open(&p).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds(id INTEGER, value TEXT);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER, end INTEGER, globalTid INTEGER, nameId INTEGER);",
    )
    .unwrap();
    drop(c);
    let ex = Export::open(&p).unwrap();
    let e = ex.runtime_calls(&mut RowSkips::new(), |_| Ok(())).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.contains("x.sqlite") && e.message.contains("CUPTI_ACTIVITY_KIND_RUNTIME has no column correlationId"),
        "{}",
        e.message
    );
}

#[test]
fn one_nsys_export_command_line() {
    let v = nsyskit::export::nsys_export_args("r.nsys-rep", "o.sqlite");
    assert_eq!(
        v,
        ["export", "--type=sqlite", "--force-overwrite=true", "--lazy=false", "--output=o.sqlite", "r.nsys-rep"]
    );
}

/// The export layer is the only code that reads nsys tables: no SQL and no raw connection outside src/export/
/// (test files excepted: they check results against SQL of their own).
#[test]
fn no_sql_over_nsys_tables_outside_the_export_layer() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                // tests check results against SQL of their own, on purpose
                if p.file_name().is_some_and(|n| n != "tests") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = common::root();
    let mut files = Vec::new();
    for d in ["src", "bins", "nu-plugin/src"] {
        walk(&root.join(d), &mut files);
    }
    let export_dir = root.join("src/export");
    let mut offenders = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&export_dir)) {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.contains(".conn()") || line.contains("SELECT ") || line.contains("rusqlite::") {
                offenders.push(format!("{}:{}: {}", f.strip_prefix(&root).unwrap().display(), i + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 20, "walked {} files", files.len());
    assert!(offenders.is_empty(), "SQL outside src/export/:\n{}", offenders.join("\n"));
}
