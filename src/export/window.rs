//! Typed readers of the rows inside one time window (`report --trace`): NVTX ranges, runtime calls and device
//! rows that overlap `[t0, t1)`, with the columns a timeline needs (stream, device, kernel name, bytes), and
//! the process names. Filtered in SQL by time so a window of a few steps does not scan a whole table in Rust.
//!
//! Rows with a NULL `start`/`end` or `end < start` are never delivered (they overlap nothing); NVTX rows are
//! delivered only when closed (`end` set).

use std::collections::HashMap;

use rusqlite::types::ValueRef;

use super::schema::{self, DeviceKind};
use super::Export;
use crate::contract::Result;

/// One device row (KERNEL, MEMCPY, MEMSET or GRAPH_TRACE) overlapping a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowDeviceRow {
    pub kind: DeviceKind,
    pub start: i64,
    pub end: i64,
    pub global_pid: Option<i64>,
    pub device_id: Option<i64>,
    pub stream_id: Option<i64>,
    pub correlation_id: Option<i64>,
    /// KERNEL: `demangledName` (else `shortName`), a StringIds id.
    pub name_id: Option<i64>,
    /// MEMCPY/MEMSET: `bytes`.
    pub bytes: Option<i64>,
    /// MEMCPY: `copyKind`.
    pub copy_kind: Option<i64>,
    /// Node-level graph row: `graphNodeId`.
    pub graph_node_id: Option<i64>,
}

/// One NVTX push/pop or start/end range overlapping a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRange {
    pub start: i64,
    pub end: i64,
    pub event_type: i64,
    pub text: Option<String>,
    pub text_id: Option<i64>,
    pub global_tid: Option<i64>,
}

/// One runtime/driver API call overlapping a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowCall {
    pub start: i64,
    pub end: i64,
    pub global_tid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub name_id: Option<i64>,
}

fn int(v: ValueRef) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        _ => None,
    }
}

impl Export {
    /// `column` when the table has it, else `NULL` (the reader tolerates a column an older nsys lacks).
    fn col_or_null<'a>(&self, table: &str, column: &'a str) -> &'a str {
        if self.table(table).is_some_and(|t| t.has_column(column)) {
            column
        } else {
            "NULL"
        }
    }

    /// Every valid row of one device table overlapping `[t0, t1)` (`start < t1 AND end > t0`), by start.
    pub fn device_rows_in(&self, kind: DeviceKind, t0: i64, t1: i64, mut f: impl FnMut(WindowDeviceRow)) -> Result<()> {
        let tbl = kind.table();
        let Some(t) = self.optional(tbl, &["start", "end"])? else { return Ok(()) };
        let name = match kind {
            DeviceKind::Kernel => {
                let d = self.col_or_null(tbl, schema::cols::DEMANGLED_NAME);
                let s = self.col_or_null(tbl, "shortName");
                format!("coalesce({d}, {s})")
            }
            _ => "NULL".to_string(),
        };
        let sql = format!(
            "SELECT start, end, {}, {}, {}, {}, {name}, {}, {}, {} FROM \"{}\" WHERE start < ?1 AND end > ?2 AND end >= start ORDER BY start",
            self.col_or_null(tbl, "globalPid"),
            self.col_or_null(tbl, "deviceId"),
            self.col_or_null(tbl, "streamId"),
            self.col_or_null(tbl, "correlationId"),
            self.col_or_null(tbl, "bytes"),
            self.col_or_null(tbl, "copyKind"),
            self.col_or_null(tbl, schema::cols::GRAPH_NODE_ID),
            t.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let mut rows = stmt.query([t1, t0]).map_err(self.sql_err(tbl))?;
        while let Some(r) = rows.next().map_err(self.sql_err(tbl))? {
            let g = |i: usize| r.get_ref(i).ok().and_then(int);
            let (Some(start), Some(end)) = (g(0), g(1)) else { continue };
            f(WindowDeviceRow {
                kind,
                start,
                end,
                global_pid: g(2),
                device_id: g(3),
                stream_id: g(4),
                correlation_id: g(5),
                name_id: g(6),
                bytes: g(7),
                copy_kind: g(8),
                graph_node_id: g(9),
            });
        }
        Ok(())
    }

    /// Every valid runtime/driver call overlapping `[t0, t1)`, by start (none without the RUNTIME table).
    pub fn runtime_calls_in(&self, t0: i64, t1: i64, mut f: impl FnMut(WindowCall)) -> Result<()> {
        let tbl = schema::RUNTIME;
        let Some(t) = self.optional(tbl, &schema::cols::RUNTIME)? else { return Ok(()) };
        let sql = format!(
            "SELECT start, end, globalTid, correlationId, nameId FROM \"{}\" WHERE start < ?1 AND end > ?2 AND end >= start ORDER BY start",
            t.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let mut rows = stmt.query([t1, t0]).map_err(self.sql_err(tbl))?;
        while let Some(r) = rows.next().map_err(self.sql_err(tbl))? {
            let g = |i: usize| r.get_ref(i).ok().and_then(int);
            let (Some(start), Some(end)) = (g(0), g(1)) else { continue };
            f(WindowCall { start, end, global_tid: g(2), correlation_id: g(3), name_id: g(4) });
        }
        Ok(())
    }

    /// Every closed NVTX push/pop or start/end range overlapping `[t0, t1)`, by start (none without the table).
    pub fn nvtx_ranges_in(&self, t0: i64, t1: i64, mut f: impl FnMut(WindowRange)) -> Result<()> {
        let tbl = schema::NVTX_EVENTS;
        let Some(t) = self.optional(tbl, &schema::cols::NVTX_EVENTS)? else { return Ok(()) };
        let sql = format!(
            "SELECT start, end, eventType, text, textId, globalTid FROM \"{}\" WHERE eventType IN ({}, {}) AND start < ?1 AND end > ?2 AND end >= start ORDER BY start",
            t.name,
            schema::nvtx::PUSH_POP,
            schema::nvtx::START_END
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let mut rows = stmt.query([t1, t0]).map_err(self.sql_err(tbl))?;
        while let Some(r) = rows.next().map_err(self.sql_err(tbl))? {
            let g = |i: usize| r.get_ref(i).ok().and_then(int);
            let (Some(start), Some(end)) = (g(0), g(1)) else { continue };
            let text = match r.get_ref(3) {
                Ok(ValueRef::Text(t)) => Some(String::from_utf8_lossy(t).into_owned()),
                _ => None,
            };
            f(WindowRange { start, end, event_type: g(2).unwrap_or(0), text, text_id: g(4), global_tid: g(5) });
        }
        Ok(())
    }

    /// `globalPid → (pid, name)` of every PROCESSES row (empty when absent).
    pub fn process_names(&self) -> Result<HashMap<i64, (i64, String)>> {
        let tbl = schema::PROCESSES;
        let mut out = HashMap::new();
        let Some(t) = self.optional(tbl, &schema::cols::PROCESSES)? else { return Ok(out) };
        let sql = format!("SELECT globalPid, pid, name FROM \"{}\"", t.name);
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let mut rows = stmt.query([]).map_err(self.sql_err(tbl))?;
        while let Some(r) = rows.next().map_err(self.sql_err(tbl))? {
            let Some(g) = r.get_ref(0).ok().and_then(int) else { continue };
            let pid = r.get_ref(1).ok().and_then(int).unwrap_or(super::pid_of(g));
            let name = match r.get_ref(2) {
                Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                _ => String::new(),
            };
            out.insert(g, (pid, name));
        }
        Ok(out)
    }
}
