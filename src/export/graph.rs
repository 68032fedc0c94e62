//! The CUDA graph facts of an export, each with one definition used by every tool:
//!
//! - **graph-trace mode** ([`Export::graph_trace_mode`]): the first `META_DATA_CAPTURE` row named
//!   `PROCESS_n:CUDA_GRAPH_TRACE_OPTIONS:MODE` or bare `CUDA_GRAPH_TRACE_OPTIONS:MODE` with a value, lower-cased (`node` / `graph`); nsys writes `Node`/`Graph`,
//!   and the comparison is case-insensitive;
//! - **node-level device rows** ([`GraphFacts::node_rows`]): rows of KERNEL, MEMCPY and MEMSET whose
//!   `graphNodeId` is set (a graph node is a kernel, a memcpy or a memset; GRAPH_TRACE rows are whole
//!   graph-level replays, never nodes); the KERNEL part is [`GraphFacts::kernel_node_rows`];
//! - **graph launches** ([`GraphFacts::graph_launches`]): runtime calls whose API name starts with
//!   `cudaGraphLaunch` or `cuGraphLaunch` ([`schema::is_graph_launch`], case-sensitive as nsys writes them);
//! - **node-building events** ([`GraphFacts::node_events`]): rows of `CUDA_GRAPH_NODE_EVENTS` (nsys 2025.3)
//!   or `CUDA_GRAPH_EVENTS` (nsys 2023.4), whichever the export has.

use super::schema::{self, cols};
use super::Export;
use crate::contract::Result;

/// The graph-trace mode recorded in `META_DATA_CAPTURE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphTraceMode {
    /// The row's name (`PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE`).
    pub key: String,
    /// Its value as written (`Node`).
    pub raw: String,
    /// Lower-cased: `node` or `graph`.
    pub mode: String,
}

/// Graph launches, node-level device rows and graph-level replay rows of an export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphFacts {
    /// Runtime calls that launch a graph.
    pub graph_launches: i64,
    /// KERNEL + MEMCPY + MEMSET rows with `graphNodeId` set.
    pub node_rows: i64,
    /// The KERNEL part of `node_rows`.
    pub kernel_node_rows: i64,
    /// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` rows (one per graph-level replay).
    pub graph_trace_rows: i64,
    /// `CUPTI_ACTIVITY_KIND_RUNTIME` rows.
    pub runtime_rows: i64,
    /// KERNEL + MEMCPY + MEMSET rows (GRAPH_TRACE apart): whether the export holds GPU rows at all.
    pub device_rows: i64,
    /// `(table, rows)` of the node-building events table, when the export has one.
    pub node_events: Option<(String, i64)>,
}

impl Export {
    /// The graph-trace mode of the capture settings (see the module docs), None when not recorded.
    pub fn graph_trace_mode(&self) -> Result<Option<GraphTraceMode>> {
        Ok(self.capture_settings()?.into_iter().find_map(|(key, v)| {
            let raw = v?;
            schema::capture_keys::is(&key, schema::capture_keys::GRAPH_TRACE_MODE).then(|| GraphTraceMode {
                mode: raw.to_ascii_lowercase(),
                key,
                raw,
            })
        }))
    }

    /// The node-building events table present, newest name first.
    pub fn graph_node_events_table(&self) -> Option<&'static str> {
        // nsys 2026 keeps a CUDA_GRAPH_EVENTS table of whole-graph events (`graphId`, no `graphNodeId`) beside
        // the node events: only a table with node ids holds node-building events
        schema::GRAPH_NODE_EVENTS_TABLES
            .into_iter()
            .find(|t| self.table(t).is_some_and(|i| i.has_column(cols::GRAPH_NODE_ID)))
    }

    /// `(runtime rows, graph launches)` of [`GraphFacts`]: the runtime table alone (None without one), for a
    /// tool that needs no device table.
    pub fn runtime_graph_launches(&self) -> Result<Option<(i64, i64)>> {
        let Some(rt) = self.optional(schema::RUNTIME, &["nameId"])? else { return Ok(None) };
        let rt = rt.name.clone();
        let rows = self.count_rows(&rt)?;
        let ids = self.string_ids_where(|v| schema::is_graph_launch(v).then_some(()))?;
        let counted = if ids.is_empty() {
            None
        } else {
            self.with_stats(&rt, |s| ids.keys().map(|k| s.name_counts.get(k).copied().unwrap_or(0)).sum::<i64>())?
        };
        let launches = if let Some(n) = counted {
            n
        } else if !ids.is_empty() {
            let list = ids.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
            self.conn()
                .query_row(&format!("SELECT count(*) FROM \"{rt}\" WHERE nameId IN ({list})"), [], |r| r.get(0))
                .map_err(self.sql_err(schema::RUNTIME))?
        } else {
            0
        };
        Ok(Some((rows, launches)))
    }

    /// The windows in which a thread captured a CUDA graph: from each stream capture's begin call to the next end
    /// call of the same thread ([`schema::stream_capture_edge`]), `(globalTid, begin start, end end)` by thread and
    /// start; a begin without an end lasts to the end of the thread's last call. Empty without a runtime table or
    /// such calls. Whatever a thread records between them (NVTX ranges among it) happens once, at capture time:
    /// the graph's replays re-run its device work only.
    pub fn stream_capture_windows(&self) -> Result<Vec<(i64, i64, i64)>> {
        let Some(rt) = self.optional(schema::RUNTIME, &["nameId", "globalTid", "start", "end"])? else {
            return Ok(Vec::new());
        };
        let rt = rt.name.clone();
        let ids = self.string_ids_where(schema::stream_capture_edge)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = ids.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
        let sql = format!(
            "SELECT globalTid, start, end, nameId FROM \"{rt}\" WHERE nameId IN ({list}) AND globalTid IS NOT NULL AND start IS NOT NULL AND end >= start ORDER BY globalTid, start"
        );
        let mut st = self.conn().prepare(&sql).map_err(self.sql_err(schema::RUNTIME))?;
        let mut rows = st.query([]).map_err(self.sql_err(schema::RUNTIME))?;
        let mut out = Vec::new();
        let mut open: Option<(i64, i64)> = None;
        let mut last_end = 0i64;
        while let Some(r) = rows.next().map_err(self.sql_err(schema::RUNTIME))? {
            let (tid, start, end, name): (i64, i64, i64, i64) = (
                r.get(0).map_err(self.sql_err(schema::RUNTIME))?,
                r.get(1).map_err(self.sql_err(schema::RUNTIME))?,
                r.get(2).map_err(self.sql_err(schema::RUNTIME))?,
                r.get(3).map_err(self.sql_err(schema::RUNTIME))?,
            );
            if let Some((t, s)) = open.filter(|(t, _)| *t != tid) {
                out.push((t, s, last_end));
                open = None;
            }
            match ids.get(&name) {
                Some(true) if open.is_none() => open = Some((tid, start)),
                Some(false) => {
                    if let Some((t, s)) = open.take() {
                        out.push((t, s, end));
                    }
                }
                _ => {}
            }
            last_end = end;
        }
        if let Some((t, s)) = open {
            out.push((t, s, last_end));
        }
        Ok(out)
    }

    /// The graph facts (see the module docs).
    pub fn graph_facts(&self) -> Result<GraphFacts> {
        let mut d = GraphFacts::default();
        if let Some((rows, launches)) = self.runtime_graph_launches()? {
            d.runtime_rows = rows;
            d.graph_launches = launches;
        }
        for t in schema::NODE_LEVEL_TABLES {
            if let Some(info) = self.table(t) {
                if info.has_column(cols::GRAPH_NODE_ID) {
                    let known = self.with_stats(t, |s| s.node_rows)?.flatten();
                    let n: i64 = if let Some(n) = known {
                        n
                    } else {
                        self.conn()
                            .query_row(
                                &format!("SELECT count(*) FROM \"{}\" WHERE graphNodeId IS NOT NULL", info.name),
                                [],
                                |r| r.get(0),
                            )
                            .map_err(self.sql_err(t))?
                    };
                    d.node_rows += n;
                    if t == schema::KERNEL {
                        d.kernel_node_rows = n;
                    }
                }
            }
        }
        d.graph_trace_rows = self.count_rows(schema::GRAPH_TRACE)?;
        for t in schema::NODE_LEVEL_TABLES {
            d.device_rows += self.count_rows(t)?;
        }
        if let Some(t) = self.graph_node_events_table() {
            d.node_events = Some((t.to_string(), self.count_rows(t)?));
        }
        Ok(d)
    }
}
