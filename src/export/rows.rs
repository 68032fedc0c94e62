//! Typed row readers over the nsys tables. Rows are streamed (one callback per row, no copy of a table), the
//! columns are type-checked (a value of another type than nsys writes is an input error naming the table and
//! column), and timed rows are checked once here for every tool:
//!
//! - a timestamp beyond ±[`MAX_TIMESTAMP_NS`] is impossible: an input error naming the table, column and row id;
//! - a row of a timed CUDA table (runtime, kernel, memcpy, memset, graph trace, synchronization) with a NULL
//!   `start`, a NULL `end` or `end < start` is not delivered: it is counted in [`RowSkips`] by table and reason.
//!
//! NVTX rows are delivered as they are (open and inverted ranges are the ranges contract's own `skipped`).

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::types::ValueRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::raw::{IntCell, RawQuery, RawRow};
use super::schema::{self, cols, DeviceKind, MAX_TIMESTAMP_NS};
use super::Export;
use crate::contract::{Error, Result};

/// Rows of one timed table that were skipped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalSkips {
    /// `start` is NULL.
    pub null_start: u64,
    /// `end` is NULL (and `start` is not).
    pub null_end: u64,
    /// `end < start`.
    pub inverted: u64,
}

impl IntervalSkips {
    pub fn total(&self) -> u64 {
        self.null_start + self.null_end + self.inverted
    }
}

/// Skipped rows of the timed CUDA tables, by table name (only tables with a skipped row are listed).
pub type RowSkips = BTreeMap<String, IntervalSkips>;

/// Add `b` into `a`.
pub fn merge_skips(a: &mut RowSkips, b: &RowSkips) {
    for (t, s) in b {
        let e = a.entry(t.clone()).or_default();
        e.null_start += s.null_start;
        e.null_end += s.null_end;
        e.inverted += s.inverted;
    }
}

/// A one-line summary of skipped rows (`KERNEL: 3 with a NULL start, 1 with end < start; …`), None when none.
pub fn describe_skips(s: &RowSkips) -> Option<String> {
    let parts: Vec<String> = s
        .iter()
        .filter(|(_, v)| v.total() > 0)
        .map(|(t, v)| {
            let mut why = Vec::new();
            if v.null_start > 0 {
                why.push(format!("{} with a NULL start", v.null_start));
            }
            if v.null_end > 0 {
                why.push(format!("{} with a NULL end", v.null_end));
            }
            if v.inverted > 0 {
                why.push(format!("{} with end < start", v.inverted));
            }
            format!("{t}: {}", why.join(", "))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `NVTX_EVENTS` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvtxRow {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub event_type: i64,
    pub text: Option<String>,
    pub text_id: Option<i64>,
    pub global_tid: Option<i64>,
    /// `domainId`, None when NULL, 0 (the default domain) or the column is absent.
    pub domain_id: Option<i64>,
}

/// `CUPTI_ACTIVITY_KIND_RUNTIME` row with a valid interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeRow {
    pub start: i64,
    pub end: i64,
    pub global_tid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub name_id: Option<i64>,
}

/// A device activity row (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE) with a valid interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRow {
    pub start: i64,
    pub end: i64,
    pub global_pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub device_id: Option<i64>,
}

/// `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` row with a valid interval (`syncType` differs between nsys versions
/// and is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncRow {
    pub start: i64,
    pub end: i64,
    pub global_pid: Option<i64>,
    pub correlation_id: Option<i64>,
}

/// A `DIAGNOSTIC_EVENT` row (nsys 2024+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticRow {
    pub timestamp: i64,
    pub severity: i64,
    pub text: Option<String>,
}

pub(super) fn type_name(v: ValueRef) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}

/// Which columns a scan reads: the first is `rowid` (NULL for a table without one).
struct Scan<'a> {
    ex: &'a Export,
    table: &'static str,
    cols: Vec<&'a str>,
}

impl Export {
    /// Column `i` as an optional integer; any other type is an input error naming table and column.
    #[inline]
    pub(crate) fn int_at(&self, row: &RawRow, i: usize, table: &str, col: &str) -> Result<Option<i64>> {
        // the error (a String naming the file) is built only on an error: this runs for every cell
        match row.int(i) {
            IntCell::Int(v) => Ok(Some(v)),
            IntCell::Null => Ok(None),
            IntCell::Other(t) => Err(Error::input(format!(
                "{}: schema mismatch: {table}.{col} holds a {t} value, not the INTEGER nsys writes",
                self.name()
            ))),
        }
    }

    /// Column `i` as optional text; any other type is an input error naming table and column.
    pub(crate) fn text_at(&self, row: &RawRow, i: usize, table: &str, col: &str) -> Result<Option<String>> {
        match row.get_ref(i).map_err(|e| self.sql_err(table)(e))? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
            other => Err(Error::input(format!(
                "{}: schema mismatch: {table}.{col} holds a {} value, not the TEXT nsys writes",
                self.name(),
                type_name(other)
            ))),
        }
    }

    /// Stream `SELECT rowid, cols… FROM table [WHERE …]`; the table must be present with the columns.
    fn scan<'a>(&'a self, table: &'static str, cols: &[&'a str]) -> Scan<'a> {
        Scan { ex: self, table, cols: cols.to_vec() }
    }

    fn check_ts(&self, table: &str, col: &str, rowid: Option<i64>, v: Option<i64>) -> Result<Option<i64>> {
        match v {
            Some(t) if !possible_ts(t) => Err(impossible_timestamp(&self.name(), table, col, rowid, t)),
            _ => Ok(v),
        }
    }

    /// [`Export::check_ts`] of a cell of `row`, whose id is read only when the timestamp is refused.
    fn check_row_ts(&self, table: &str, col: &str, row: &RawRow, v: Option<i64>) -> Result<Option<i64>> {
        match v {
            Some(t) if !possible_ts(t) => self.check_ts(table, col, row.rowid(), v),
            _ => Ok(v),
        }
    }

    /// A timed row's `(start, end)` when valid, else the reason counted in `skips`.
    fn interval(
        &self,
        table: &str,
        row: &RawRow,
        start: Option<i64>,
        end: Option<i64>,
        skips: &mut RowSkips,
    ) -> Result<Option<(i64, i64)>> {
        let start = self.check_row_ts(table, "start", row, start)?;
        let end = self.check_row_ts(table, "end", row, end)?;
        let k = match (start, end) {
            (Some(s), Some(e)) if e >= s => return Ok(Some((s, e))),
            (None, _) => 0,
            (_, None) => 1,
            _ => 2,
        };
        let e = skips.entry(table.to_string()).or_default();
        match k {
            0 => e.null_start += 1,
            1 => e.null_end += 1,
            _ => e.inverted += 1,
        }
        Ok(None)
    }

    /// Every `NVTX_EVENTS` row whose `eventType` is in `types` (required table and columns; `domainId` when
    /// present).
    pub fn nvtx_events(&self, types: &[i64], mut f: impl FnMut(NvtxRow) -> Result<()>) -> Result<()> {
        self.nvtx_events_ref(types, |r| {
            f(NvtxRow {
                start: r.start,
                end: r.end,
                event_type: r.event_type,
                text: r.text.map(|t| String::from_utf8_lossy(t).into_owned()),
                text_id: r.text_id,
                global_tid: r.global_tid,
                domain_id: r.domain_id,
            })
        })
    }

    /// Every valid `CUPTI_ACTIVITY_KIND_RUNTIME` row (none when the table is absent); invalid intervals are
    /// counted in `skips`.
    pub fn runtime_calls(&self, skips: &mut RowSkips, mut f: impl FnMut(RuntimeRow) -> Result<()>) -> Result<()> {
        let tbl = schema::RUNTIME;
        if self.optional(tbl, &cols::RUNTIME)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::RUNTIME).run("", |row| {
            let Some((start, end)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            else {
                return Ok(());
            };
            f(RuntimeRow {
                start,
                end,
                global_tid: self.int_at(row, 3, tbl, "globalTid")?,
                correlation_id: self.int_at(row, 4, tbl, "correlationId")?,
                name_id: self.int_at(row, 5, tbl, "nameId")?,
            })
        })
    }

    /// Every valid row of one device table (none when absent); invalid intervals are counted in `skips`.
    pub fn device_rows(
        &self,
        kind: DeviceKind,
        skips: &mut RowSkips,
        mut f: impl FnMut(DeviceRow) -> Result<()>,
    ) -> Result<()> {
        let tbl = kind.table();
        if self.optional(tbl, &cols::DEVICE)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::DEVICE).run("", |row| {
            let Some((start, end)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            else {
                return Ok(());
            };
            f(DeviceRow {
                start,
                end,
                global_pid: self.int_at(row, 3, tbl, "globalPid")?,
                correlation_id: self.int_at(row, 4, tbl, "correlationId")?,
                device_id: self.int_at(row, 5, tbl, "deviceId")?,
            })
        })
    }

    /// `(start, end)` of every valid row of one device table (only those two columns are required).
    pub fn device_intervals(&self, kind: DeviceKind, skips: &mut RowSkips, mut f: impl FnMut(i64, i64)) -> Result<()> {
        let tbl = kind.table();
        if self.optional(tbl, &["start", "end"])?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &["start", "end"]).run("", |row| {
            if let Some((s, e)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            {
                f(s, e);
            }
            Ok(())
        })
    }

    /// Every valid `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` row (none when absent).
    pub fn sync_rows(&self, skips: &mut RowSkips, mut f: impl FnMut(SyncRow) -> Result<()>) -> Result<()> {
        let tbl = schema::SYNCHRONIZATION;
        if self.optional(tbl, &cols::SYNCHRONIZATION)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::SYNCHRONIZATION).run("", |row| {
            let Some((start, end)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            else {
                return Ok(());
            };
            f(SyncRow {
                start,
                end,
                global_pid: self.int_at(row, 3, tbl, "globalPid")?,
                correlation_id: self.int_at(row, 4, tbl, "correlationId")?,
            })
        })
    }

    /// Count the invalid intervals of the named timed tables present into `skips`, without delivering rows:
    /// what the readers and aggregates of this layer skip in them.
    pub fn count_interval_skips(&self, tables: &[&'static str], skips: &mut RowSkips) -> Result<()> {
        self.prefetch_timed_stats(tables)?;
        for &tbl in tables {
            let Some(t) = self.optional(tbl, &["start", "end"])? else { continue };
            if let Some(k) = self.with_stats(tbl, |s| s.skips)? {
                if k.total() > 0 {
                    let e = skips.entry(tbl.to_string()).or_default();
                    e.null_start += k.null_start;
                    e.null_end += k.null_end;
                    e.inverted += k.inverted;
                }
                continue;
            }
            let sql = format!(
                "SELECT coalesce(sum(start IS NULL), 0), coalesce(sum(start IS NOT NULL AND end IS NULL), 0), coalesce(sum(end < start), 0) FROM \"{}\"",
                t.name
            );
            let (a, b, c): (i64, i64, i64) = self
                .conn()
                .query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(self.sql_err(tbl))?;
            if a + b + c > 0 {
                let e = skips.entry(tbl.to_string()).or_default();
                e.null_start += a as u64;
                e.null_end += b as u64;
                e.inverted += c as u64;
            }
        }
        Ok(())
    }

    /// `globalPid` of every `PROCESSES` row (empty when absent).
    pub fn process_ids(&self) -> Result<HashSet<i64>> {
        let tbl = schema::PROCESSES;
        let mut out = HashSet::new();
        if self.optional(tbl, &cols::PROCESSES)?.is_none() {
            return Ok(out);
        }
        self.scan(tbl, &["globalPid"]).run("", |row| {
            if let Some(g) = self.int_at(row, 1, tbl, "globalPid")? {
                out.insert(g);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `(globalTid, nameId)` of every `ThreadNames` row with both set, in table order (empty when absent).
    pub fn thread_names(&self, mut f: impl FnMut(i64, i64)) -> Result<()> {
        let tbl = schema::THREAD_NAMES;
        if self.optional(tbl, &cols::THREAD_NAMES)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::THREAD_NAMES).run("", |row| {
            if let (Some(nid), Some(g)) = (self.int_at(row, 1, tbl, "nameId")?, self.int_at(row, 2, tbl, "globalTid")?)
            {
                f(g, nid);
            }
            Ok(())
        })
    }

    /// Every `StringIds` row whose value is TEXT, as `(id, bytes)` (required table).
    pub fn for_each_string(&self, mut f: impl FnMut(i64, &[u8])) -> Result<()> {
        let tbl = schema::STRING_IDS;
        self.require(tbl, &cols::STRING_IDS)?;
        self.scan(tbl, &cols::STRING_IDS).run("", |row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if let ValueRef::Text(v) = row.get_ref(2).map_err(|e| self.sql_err(tbl)(e))? {
                f(id, v);
            }
            Ok(())
        })
    }

    /// The `StringIds` values of `ids` (one scan; a non-TEXT value of a wanted id is an input error).
    pub fn strings_for(&self, ids: &HashSet<i64>) -> Result<HashMap<i64, String>> {
        self.string_values_for(ids, None)
    }

    /// [`Export::strings_for`] as NVTX labels: each cut to [`crate::labels::LABEL_MAX_BYTES`] as it is read
    /// ([`crate::labels::label_of_bytes`]), so a long string never stays in memory whole.
    pub fn labels_for(&self, ids: &HashSet<i64>) -> Result<HashMap<i64, String>> {
        self.string_values_for(ids, Some(crate::labels::label_of_bytes))
    }

    /// The one scan of [`Export::strings_for`] and [`Export::labels_for`]: a TEXT value of a wanted id through
    /// `of_text` when given (on its bytes, before any copy), else as the column's text.
    fn string_values_for(
        &self,
        ids: &HashSet<i64>,
        of_text: Option<fn(&[u8]) -> String>,
    ) -> Result<HashMap<i64, String>> {
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let tbl = schema::STRING_IDS;
        self.require(tbl, &cols::STRING_IDS)?;
        self.scan(tbl, &cols::STRING_IDS).run("", |row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if !ids.contains(&id) {
                return Ok(());
            }
            if let Some(f) = of_text {
                if let ValueRef::Text(t) = row.get_ref(2).map_err(|e| self.sql_err(tbl)(e))? {
                    out.insert(id, f(t));
                    return Ok(());
                }
            }
            if let Some(v) = self.text_at(row, 2, tbl, "value")? {
                out.insert(id, v);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The ids of the `StringIds` values for which `keep` gives a key, with that key.
    pub fn string_ids_where<K>(&self, keep: impl Fn(&str) -> Option<K>) -> Result<HashMap<i64, K>> {
        let mut out = HashMap::new();
        self.for_each_string(|id, v| {
            if let Some(k) = std::str::from_utf8(v).ok().and_then(&keep) {
                out.insert(id, k);
            }
        })?;
        Ok(out)
    }

    /// `DIAGNOSTIC_EVENT` rows by timestamp (empty when the table is absent: nsys 2023.4 writes none).
    pub fn diagnostic_events(&self) -> Result<Vec<DiagnosticRow>> {
        let tbl = schema::DIAGNOSTIC_EVENT;
        let Some(t) = self.optional(tbl, &cols::DIAGNOSTIC_EVENT)? else { return Ok(Vec::new()) };
        let sql = format!("SELECT timestamp, severity, CAST(text AS TEXT) FROM \"{}\" ORDER BY timestamp", t.name);
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let rows: Vec<(i64, i64, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .map_err(self.sql_err(tbl))?;
        Ok(rows.into_iter().map(|(timestamp, severity, text)| DiagnosticRow { timestamp, severity, text }).collect())
    }

    /// `META_DATA_CAPTURE` `(name, value)` rows: the capture settings (empty when absent).
    pub fn capture_settings(&self) -> Result<Vec<(String, Option<String>)>> {
        self.name_values(schema::META_DATA_CAPTURE)
    }

    /// `TARGET_INFO_GPU` rows: `name`, then those of [`cols::GPU_DETAILS`] the table has, each as text.
    pub fn target_gpus(&self) -> Result<Vec<GpuRow>> {
        let tbl = schema::TARGET_INFO_GPU;
        let Some(g) = self.optional(tbl, &["name"])? else { return Ok(Vec::new()) };
        let present: Vec<&'static str> =
            std::iter::once("name").chain(cols::GPU_DETAILS.iter().copied().filter(|c| g.has_column(c))).collect();
        let sel = present.iter().map(|c| format!("CAST({c} AS TEXT)")).collect::<Vec<_>>().join(", ");
        let mut stmt = self.conn().prepare(&format!("SELECT {sel} FROM \"{}\"", g.name)).map_err(self.sql_err(tbl))?;
        let rows = stmt
            .query_map([], |r| {
                let mut v = Vec::new();
                for (i, c) in present.iter().enumerate() {
                    v.push((*c, super::text_lossy(r.get_ref(i)?).0));
                }
                Ok(v)
            })
            .and_then(|r| r.collect())
            .map_err(self.sql_err(tbl))?;
        Ok(rows)
    }

    // ---- aggregates computed by SQLite (valid intervals only)

    /// `max(end)` of the valid rows of a timed table (None when absent or empty).
    pub fn max_end(&self, table: &'static str) -> Result<Option<i64>> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(None) };
        if let Some(m) = self.with_stats(table, |s| s.max_end)? {
            return Ok(m);
        }
        let sql = format!("SELECT max(end) FROM \"{}\" WHERE {VALID}", t.name);
        self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))
    }

    /// The longest valid row of a timed table: `(end - start, rowid)` (None when absent or empty).
    pub fn longest_row(&self, table: &'static str) -> Result<Option<(i64, Option<i64>)>> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(None) };
        if let Some(l) = self.with_stats(table, |s| s.longest)? {
            return Ok(l);
        }
        let sql =
            format!("SELECT end - start, rowid FROM \"{}\" WHERE {VALID} ORDER BY end - start DESC LIMIT 1", t.name);
        match self.conn().query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?))) {
            Ok(v) => Ok(Some(v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(self.sql_err(table)(e)),
        }
    }

    /// Σ `end - start` of the valid rows of a timed table (0 when absent).
    pub fn sum_durations(&self, table: &'static str) -> Result<i64> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(0) };
        if let Some(Some(v)) = self.with_stats(table, |s| s.sum_dur)? {
            return Ok(v);
        }
        let sql = format!("SELECT sum(end - start) FROM \"{}\" WHERE {VALID}", t.name);
        let s: Option<i64> = self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))?;
        Ok(s.unwrap_or(0))
    }

    /// Distinct `globalTid` values of the runtime calls (0 when absent).
    pub fn runtime_thread_count(&self) -> Result<i64> {
        let Some(t) = self.optional(schema::RUNTIME, &["globalTid"])? else { return Ok(0) };
        if let Some(n) = self.with_stats(schema::RUNTIME, |s| s.thread_ids.len() as i64)? {
            return Ok(n);
        }
        let sql = format!("SELECT count(DISTINCT globalTid) FROM \"{}\"", t.name);
        self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(schema::RUNTIME))
    }

    /// NVTX marks and ranges on threads that made runtime calls: `(count, count starting after after_ns,
    /// max(start, end))` (zeros without NVTX_EVENTS or runtime calls).
    pub fn nvtx_on_runtime_threads(&self, after_ns: i64) -> Result<(i64, i64, i64)> {
        let Some(rt) = self.optional(schema::RUNTIME, &["end", "globalTid"])? else { return Ok((0, 0, 0)) };
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["start", "end", "eventType", "globalTid"])? else {
            return Ok((0, 0, 0));
        };
        // the runtime threads from the one runtime scan, then one NVTX scan (no IN subquery re-reading RUNTIME)
        if let Some(tids) = self.with_stats(schema::RUNTIME, |s| s.thread_ids.clone())? {
            if let Some(th) = self.stats.nvtx_threads.borrow().as_deref() {
                return Ok(th.on(&tids, after_ns));
            }
            // no read of every NVTX row yet: the marks and ranges alone, counted as that read counts them
            let mut th = Some(NvtxThreads::default());
            let types = nvtx_types_condition(&NVTX_MARKS_AND_RANGES);
            self.scan(schema::NVTX_EVENTS, &["start", "end", "globalTid", "eventType"]).run(&types, |row| {
                if th.as_mut().is_some_and(|t| !t.add(row.int(4), row.int(1), row.int(2), row.int(3))) {
                    th = None;
                }
                Ok(())
            })?;
            if let Some(th) = th {
                return Ok(th.on(&tids, after_ns));
            }
        }
        let sql = format!(
            "SELECT count(*), coalesce(sum(n.start > ?1), 0), coalesce(max(max(n.start, coalesce(n.end, n.start))), 0)
             FROM \"{}\" n WHERE n.{} AND n.globalTid IN (SELECT DISTINCT globalTid FROM \"{}\")",
            nv.name,
            nvtx_types_condition(&NVTX_MARKS_AND_RANGES),
            rt.name
        );
        self.conn()
            .query_row(&sql, [after_ns], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))
            .map_err(self.sql_err(schema::NVTX_EVENTS))
    }

    /// Kernel starts in each tenth of `[first, first + window)` (a start past the end counts in the last tenth).
    pub fn kernel_start_tenths(&self, first: i64, window: i64) -> Result<Option<[i64; 10]>> {
        let Some(k) = self.optional(schema::KERNEL, &["start"])? else { return Ok(None) };
        let sql = format!(
            "SELECT min(9, (start - ?1) * 10 / ?2), count(*) FROM \"{}\" WHERE start >= ?1 GROUP BY 1 ORDER BY 1",
            k.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::KERNEL))?;
        let rows = stmt
            .query_map([first, window.max(1)], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .and_then(|r| r.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(self.sql_err(schema::KERNEL))?;
        let mut tenths = [0i64; 10];
        for (i, n) in rows {
            if (0..10).contains(&i) {
                tenths[i as usize] += n;
            }
        }
        Ok(Some(tenths))
    }

    /// Kernel rows by demangled name: `(name, instances, Σ duration)` over valid intervals; a name id without a
    /// string is `<unknown kernel name id N>`. None when the KERNEL table is absent.
    pub fn kernel_time_by_name(&self) -> Result<Option<Vec<(String, i64, i64)>>> {
        let Some(k) = self.optional(schema::KERNEL, &["start", "end", cols::DEMANGLED_NAME])? else { return Ok(None) };
        self.require(schema::STRING_IDS, &cols::STRING_IDS)?;
        // one scan of the kernel rows aggregated by name id (that of the timed stats when it was asked to keep
        // them, else its own), then the names of those ids: SQLite's GROUP BY over the joined string sorts every
        // row (≈ 2 s per million kernels); the SQL below stays for a name id that is not an integer and for a
        // sum that does not fit
        let kept = self.known_stats(schema::KERNEL, |s| s.name_time.clone()).flatten();
        let by_id = match kept {
            Some(m) => Some(m),
            None => self.kernel_time_by_name_id(&k.name)?,
        };
        if let Some(rows) = by_id.and_then(|m| self.kernel_names_of(m)) {
            return Ok(Some(rows));
        }
        let sql = format!(
            "SELECT COALESCE(s.value, '<unknown kernel name id ' || k.demangledName || '>'), count(*), sum(k.end - k.start) \
             FROM \"{}\" k LEFT JOIN StringIds s ON s.id = k.demangledName WHERE {VALID_K} GROUP BY 1",
            k.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::KERNEL))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|r| r.collect())
            .map_err(self.sql_err(schema::KERNEL))?;
        Ok(Some(rows))
    }

    /// The kernel rows aggregated by name id in one scan: `id → (rows, Σ duration)`; None (use the SQL) when a
    /// name id is not an integer or a sum overflows.
    fn kernel_time_by_name_id(&self, table: &str) -> Result<Option<crate::fx::FxMap<i64, (i64, i64)>>> {
        let sql = format!("SELECT demangledName, end - start FROM \"{table}\" WHERE {VALID}");
        let mut q = RawQuery::prepare(self.conn(), &sql).map_err(self.sql_err(schema::KERNEL))?;
        let mut by_id: crate::fx::FxMap<i64, (i64, i64)> = Default::default();
        while let Some(row) = q.next().map_err(self.sql_err(schema::KERNEL))? {
            let (IntCell::Int(id), IntCell::Int(d)) = (row.int(0), row.int(1)) else {
                return Ok(None);
            };
            let e = by_id.entry(id).or_insert((0, 0));
            let Some(sum) = e.1.checked_add(d) else { return Ok(None) };
            *e = (e.0 + 1, sum);
        }
        Ok(Some(by_id))
    }

    /// `(name, rows, Σ duration)` of kernel rows aggregated by name id: ids of one string count as one name, as
    /// GROUP BY over the string does; None (use the SQL) when StringIds cannot be read as text or a sum overflows.
    fn kernel_names_of(&self, by_id: crate::fx::FxMap<i64, (i64, i64)>) -> Option<Vec<(String, i64, i64)>> {
        let ids: HashSet<i64> = by_id.keys().copied().collect();
        let names = self.strings_for(&ids).ok()?;
        let mut by_name: HashMap<String, (i64, i64)> = HashMap::new();
        for (id, (n, sum)) in by_id {
            let name = names.get(&id).cloned().unwrap_or_else(|| format!("<unknown kernel name id {id}>"));
            let e = by_name.entry(name).or_insert((0, 0));
            *e = (e.0 + n, e.1.checked_add(sum)?);
        }
        Some(by_name.into_iter().map(|(name, (n, sum))| (name, n, sum)).collect())
    }

    /// Number of NVTX range rows (push/pop and start/end; None without NVTX_EVENTS): counted by the read of
    /// every range row when one was made on this connection ([`Export::put_nvtx_range_rows`]), else by SQL.
    pub fn nvtx_range_rows(&self) -> Result<Option<i64>> {
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["eventType", "text"])? else { return Ok(None) };
        if let Some(n) = self.stats.nvtx_range_rows.get() {
            return Ok(Some(n));
        }
        let sql = format!(
            "SELECT count(*) FROM \"{}\" WHERE eventType IN ({}, {})",
            nv.name,
            schema::nvtx::PUSH_POP,
            schema::nvtx::START_END
        );
        self.conn().query_row(&sql, [], |r| r.get(0)).map(Some).map_err(self.sql_err(schema::NVTX_EVENTS))
    }

    /// The names of the NVTX domains created (`nvtxDomainCreate` rows: `text`, else `textId` → StringIds),
    /// sorted, distinct.
    pub fn nvtx_domain_names(&self) -> Result<Vec<String>> {
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["eventType", "text"])? else { return Ok(Vec::new()) };
        let has_id = nv.has_column("textId") && self.has_table(schema::STRING_IDS);
        let sql = if has_id {
            format!(
                "SELECT DISTINCT COALESCE(e.text, s.value) AS n FROM \"{}\" e LEFT JOIN StringIds s ON s.id = e.textId \
                 WHERE e.eventType = {} AND n IS NOT NULL ORDER BY n",
                nv.name,
                schema::nvtx::DOMAIN_CREATE
            )
        } else {
            format!(
                "SELECT DISTINCT text FROM \"{}\" WHERE eventType = {} AND text IS NOT NULL ORDER BY text",
                nv.name,
                schema::nvtx::DOMAIN_CREATE
            )
        };
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::NVTX_EVENTS))?;
        let v: Vec<Option<String>> = stmt
            .query_map([], |r| Ok(super::text_lossy(r.get_ref(0)?).0))
            .and_then(|r| r.collect())
            .map_err(self.sql_err(schema::NVTX_EVENTS))?;
        Ok(v.into_iter().flatten().collect())
    }
}

/// The SQL predicate of a valid interval.
const VALID: &str = "start IS NOT NULL AND end IS NOT NULL AND end >= start";
const VALID_K: &str = "k.start IS NOT NULL AND k.end IS NOT NULL AND k.end >= k.start";

impl Scan<'_> {
    /// Run the scan; `f` gets the row id (None when the table has none) and the row, whose column `i + 1` is
    /// `cols[i]`.
    fn run(self, filter: &str, mut f: impl FnMut(&RawRow) -> Result<()>) -> Result<()> {
        let ex = self.ex;
        let t = ex.table(self.table).ok_or_else(|| {
            Error::input(format!("{}: schema mismatch: required table {} is missing", ex.name(), self.table))
        })?;
        let where_ = if filter.is_empty() { String::new() } else { format!(" WHERE {filter}") };
        let list = self.cols.join(", ");
        // rowid names the row in messages; a view or WITHOUT ROWID table has none
        let with_rowid = format!("SELECT rowid, {list} FROM \"{}\"{where_}", t.name);
        let mut q = match RawQuery::prepare(ex.conn(), &with_rowid) {
            Ok(q) => q,
            Err(_) => RawQuery::prepare(ex.conn(), &format!("SELECT NULL, {list} FROM \"{}\"{where_}", t.name))
                .map_err(ex.sql_err(self.table))?,
        };
        let table = self.table;
        // errors are built lazily: `sql_err` allocates, and this loop runs once per row
        while let Some(row) = q.next().map_err(|e| ex.sql_err(table)(e))? {
            f(&row)?;
        }
        Ok(())
    }
}

impl Export {
    /// An upper bound of a table's row count without a scan: `max(rowid)`, one b-tree descent (0 when absent,
    /// empty, or the table has no rowid). For reserving memory once.
    pub fn row_count_hint(&self, table: &str) -> usize {
        let Some(t) = self.table(table) else { return 0 };
        let h: Option<i64> =
            self.conn().query_row(&format!("SELECT max(rowid) FROM \"{}\"", t.name), [], |r| r.get(0)).unwrap_or(None);
        h.unwrap_or(0).clamp(0, 1 << 32) as usize
    }
}

impl Export {
    /// Refuse impossible timestamps (beyond ±[`MAX_TIMESTAMP_NS`]) in the named timed tables present: an input
    /// error naming the table, column and row id; and rows whose durations do not sum in 64-bit nanoseconds
    /// ([`durations_not_real`], what the readers that sum them say). For tools that aggregate in SQL (the
    /// streamed readers check every row they deliver).
    pub fn check_timestamps(&self, tables: &[&'static str]) -> Result<()> {
        self.prefetch_timed_stats(tables)?;
        for &tbl in tables {
            let Some(t) = self.optional(tbl, &["start", "end"])? else { continue };
            if let Some(hit) = self.with_stats(tbl, |s| s.bad_ts)? {
                if let Some((rowid, start, end)) = hit {
                    self.check_ts(tbl, "start", rowid, start)?;
                    self.check_ts(tbl, "end", rowid, end)?;
                }
                continue;
            }
            let sql = format!(
                "SELECT rowid, start, end FROM \"{}\" WHERE start NOT BETWEEN -?1 AND ?1 OR end NOT BETWEEN -?1 AND ?1 LIMIT 1",
                t.name
            );
            let hit: Option<RowTimes> =
                match self.conn().query_row(&sql, [MAX_TIMESTAMP_NS], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))) {
                    Ok(v) => Some(v),
                    Err(rusqlite::Error::QueryReturnedNoRows) => None,
                    Err(e) => return Err(self.sql_err(tbl)(e)),
                };
            if let Some((rowid, start, end)) = hit {
                self.check_ts(tbl, "start", rowid, start)?;
                self.check_ts(tbl, "end", rowid, end)?;
            }
        }
        // each timestamp possible, but rows so long that their durations do not sum in 64 bits (every row
        // spanning ±2^53 ns): the readers that sum them refuse that, so every reader does
        for &tbl in tables {
            if self.with_stats(tbl, |s| s.sum_dur.is_none() && s.rows > 0)? == Some(true) {
                return Err(durations_not_real(&self.name(), tbl));
            }
        }
        Ok(())
    }
}

/// One `TARGET_INFO_GPU` row: `(column, value as text)`, `name` first.
pub type GpuRow = Vec<(&'static str, Option<String>)>;

/// `(rowid, start, end)` of one row.
type RowTimes = (Option<i64>, Option<i64>, Option<i64>);

/// The timed tables of an export: NVTX and the CUDA ones.
pub const TIMED_TABLES: [&str; 7] = [
    schema::NVTX_EVENTS,
    schema::RUNTIME,
    schema::KERNEL,
    schema::MEMCPY,
    schema::MEMSET,
    schema::GRAPH_TRACE,
    schema::SYNCHRONIZATION,
];

impl Export {
    /// When the capture session started: `TARGET_INFO_SESSION_START_TIME.utcEpochNs` (UTC ns since the epoch);
    /// None when the table is absent or empty (capture-compare checks that baseline and trial alternated).
    pub fn session_start_utc_ns(&self) -> Result<Option<i64>> {
        let Some(t) = self.optional(schema::TARGET_INFO_SESSION_START_TIME, &["utcEpochNs"])? else { return Ok(None) };
        self.conn()
            .query_row(&format!("SELECT min(utcEpochNs) FROM \"{}\"", t.name), [], |r| r.get::<_, Option<i64>>(0))
            .map_err(self.sql_err("TARGET_INFO_SESSION_START_TIME.utcEpochNs"))
    }
}

/// [`Export::session_start_utc_ns`] (the free function capture-compare calls).
pub fn session_start_utc_ns(export: &Export) -> Result<Option<i64>> {
    export.session_start_utc_ns()
}
// ---- readers added for gate verdicts (helper H6)

impl Export {
    /// `TARGET_INFO_SYSTEM_ENV` `(name, value)` rows (empty when absent): `CudaDriverVersion` (`13000`),
    /// `DeviceEnvironment` (`;`-separated `NAME=value`), ….
    pub fn system_env(&self) -> Result<Vec<(String, Option<String>)>> {
        self.name_values(schema::TARGET_INFO_SYSTEM_ENV)
    }
}

// ---- one scan per timed table (perf helper, issue #19)
//
// The gates and the evidence bundle ask many questions of the same timed tables (impossible timestamps,
// skipped intervals, row counts, max(end), Σ durations, distinct threads, graph launches, node-level rows):
// each was its own SQL pass. They are answered here from one scan per table, computed once per export and
// in parallel threads (one read-only connection each) when several tables are asked for at once. A value of
// another type than INTEGER in a column read makes the table fall back to the SQL queries (same answers,
// SQLite's own semantics).

/// `(start, end)` of a valid row.
pub type Interval = (i64, i64);

/// [`Export::window_intervals`]: the valid intervals in parts, each part in its table's order (a rowid chunk
/// of a table read in parallel, or a whole table), the parts in table order; how many parts come from the first
/// table; the starts of that table's invalid rows. Kept in parts, the rows of a 5 M-kernel capture are never
/// concatenated (an 80 MB copy into fresh pages).
#[derive(Debug, Clone, Default)]
pub struct WindowRows {
    pub parts: Vec<IntervalPart>,
    pub first_parts: usize,
    pub first_invalid: Vec<i64>,
}

impl WindowRows {
    /// Every interval, in table order.
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.parts.iter().flat_map(IntervalPart::iter)
    }

    /// The intervals of the first table, in its order.
    pub fn first_table(&self) -> impl Iterator<Item = Interval> + '_ {
        self.parts[..self.first_parts].iter().flat_map(IntervalPart::iter)
    }
}

/// A part of a table's valid intervals, in its order: copied by the scan that kept them, or the rows of a
/// device chunk that scan read and shared ([`DeviceDetail::Names`]: the intervals are these rows, not a copy).
#[derive(Debug, Clone)]
pub enum IntervalPart {
    Own(Vec<Interval>),
    /// Chunk `.1` of the shared device rows.
    Rows(std::sync::Arc<Vec<DeviceChunk>>, usize),
}

impl IntervalPart {
    pub fn len(&self) -> usize {
        match self {
            IntervalPart::Own(v) => v.len(),
            IntervalPart::Rows(c, i) => c[*i].rows.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The intervals as a slice or as the chunk's rows (for lookups one by one: no reference counted on each).
    pub fn view(&self) -> PartView<'_> {
        match self {
            IntervalPart::Own(v) => PartView::Own(v),
            IntervalPart::Rows(c, k) => PartView::Rows(&c[*k]),
        }
    }
    /// Every interval, in order (the rows of a chunk read in one pass, not looked up one by one).
    pub fn iter(&self) -> impl Iterator<Item = Interval> + '_ {
        let (own, rows) = match self {
            IntervalPart::Own(v) => (Some(v.iter().copied()), None),
            IntervalPart::Rows(c, k) => (None, Some(c[*k].intervals())),
        };
        own.into_iter().flatten().chain(rows.into_iter().flatten())
    }
    /// Sorted by start (an unsorted part of shared rows becomes a sorted copy).
    pub fn sort_by_start(&mut self) {
        let sorted = match self {
            IntervalPart::Own(v) => v.is_sorted_by_key(|r| r.0),
            IntervalPart::Rows(c, k) => c[*k].rows.is_sorted_by_key(|r| r.start),
        };
        if sorted {
            return;
        }
        let mut v: Vec<Interval> = self.iter().collect();
        v.sort_unstable_by_key(|r| r.0);
        *self = IntervalPart::Own(v);
    }
}

/// [`IntervalPart::view`].
#[derive(Debug, Clone, Copy)]
pub enum PartView<'a> {
    Own(&'a [Interval]),
    Rows(&'a DeviceChunk),
}

impl PartView<'_> {
    /// The start of interval `i`.
    #[inline]
    pub fn start(&self, i: usize) -> Option<i64> {
        match self {
            PartView::Own(v) => v.get(i).map(|r| r.0),
            PartView::Rows(c) => c.rows.get(i).map(|r| r.start),
        }
    }
    /// Interval `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Interval> {
        match self {
            PartView::Own(v) => v.get(i).copied(),
            PartView::Rows(c) => c.interval(i),
        }
    }
}

/// Facts about every row of one timed table, from one scan.
#[derive(Debug, Clone, Default)]
pub struct TimedStats {
    /// `count(*)`.
    pub rows: i64,
    pub skips: IntervalSkips,
    /// `max(end)` over the valid rows.
    pub max_end: Option<i64>,
    /// Σ `end - start` over the valid rows; None when it overflows (the SQL query then decides).
    pub sum_dur: Option<i64>,
    /// The longest valid row: `(end - start, rowid)` (the first of equals in table order).
    longest: Option<(i64, Option<i64>)>,
    /// The first row (table order) with a timestamp beyond ±[`MAX_TIMESTAMP_NS`].
    bad_ts: Option<RowTimes>,
    /// Distinct non-NULL `globalTid` (when the table has the column).
    pub thread_ids: crate::fx::FxSet<i64>,
    /// Rows per non-NULL `nameId` (when the table has the column).
    pub name_counts: crate::fx::FxMap<i64, i64>,
    /// Rows with `graphNodeId` set (None when the table has no such column).
    pub node_rows: Option<i64>,
    /// `(start, end)` of the valid rows in table order, in the parts the scans read (one per rowid chunk),
    /// kept only when asked ([`Export::keep_intervals`]), and the starts of the invalid rows with a start;
    /// taken by [`Export::window_intervals`].
    intervals: Option<(Vec<IntervalPart>, Vec<i64>)>,
    /// `demangledName` id → (rows, Σ `end - start`) over the valid rows, kept only when asked
    /// ([`Export::keep_kernel_names`]); None when a name id is not an INTEGER or a sum overflows (the SQL of
    /// [`Export::kernel_time_by_name`] then decides).
    name_time: Option<crate::fx::FxMap<i64, (i64, i64)>>,
    /// The table has `globalTid` / `nameId` (what [`TimedStats::add_row`] counts).
    threads: bool,
    names: bool,
}

/// What a scan keeps besides the facts of [`TimedStats`], per table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Keep {
    /// The valid intervals (G5's window).
    pub intervals: bool,
    /// The kernel time by `demangledName` id.
    pub names: bool,
}

impl TimedStats {
    /// A copy without the kept intervals (only the gates take them, from the connection that kept them).
    fn facts(&self) -> TimedStats {
        TimedStats {
            rows: self.rows,
            skips: self.skips,
            max_end: self.max_end,
            sum_dur: self.sum_dur,
            longest: self.longest,
            bad_ts: self.bad_ts,
            thread_ids: self.thread_ids.clone(),
            name_counts: self.name_counts.clone(),
            node_rows: self.node_rows,
            intervals: None,
            name_time: self.name_time.clone(),
            threads: self.threads,
            names: self.names,
        }
    }

    /// How many valid intervals the scan kept for the gates and nobody took yet.
    pub fn kept_intervals(&self) -> usize {
        self.intervals.as_ref().map_or(0, |(v, _)| v.iter().map(IntervalPart::len).sum())
    }

    /// The valid intervals this scan keeps are the rows it reads, shared afterwards ([`DeviceDetail::Names`]):
    /// none is copied; [`TimedStats::attach_rows`] names the chunk that holds them.
    fn leave_intervals_to_rows(&mut self) {
        if let Some((v, _)) = self.intervals.as_mut() {
            v.clear();
        }
    }

    /// The kept valid intervals of these stats are the rows of chunk `at` of `rows` (after
    /// [`TimedStats::leave_intervals_to_rows`]); nothing when no interval is kept.
    pub(crate) fn attach_rows(&mut self, rows: &std::sync::Arc<Vec<DeviceChunk>>, at: usize) {
        if let Some((v, _)) = self.intervals.as_mut() {
            debug_assert!(v.is_empty(), "intervals copied and left to the rows");
            *v = vec![IntervalPart::Rows(rows.clone(), at)];
        }
    }

    /// Add the stats of the next rows of the same table (chunks in table order).
    fn append(&mut self, o: TimedStats) {
        self.rows += o.rows;
        self.skips.null_start += o.skips.null_start;
        self.skips.null_end += o.skips.null_end;
        self.skips.inverted += o.skips.inverted;
        self.max_end = match (self.max_end, o.max_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.sum_dur = match (self.sum_dur, o.sum_dur) {
            (Some(a), Some(b)) => a.checked_add(b),
            _ => None,
        };
        if self.bad_ts.is_none() {
            self.bad_ts = o.bad_ts;
        }
        if o.longest.is_some_and(|(d, _)| self.longest.is_none_or(|(l, _)| d > l)) {
            self.longest = o.longest;
        }
        self.thread_ids.extend(o.thread_ids);
        for (k, v) in o.name_counts {
            *self.name_counts.entry(k).or_default() += v;
        }
        self.node_rows = match (self.node_rows, o.node_rows) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        if let (Some((v, s)), Some((ov, os))) = (self.intervals.as_mut(), o.intervals) {
            // the parts moved, never copied
            v.extend(ov);
            s.extend_from_slice(&os);
        }
        self.name_time = match (self.name_time.take(), o.name_time) {
            (Some(mut a), Some(b)) => b
                .into_iter()
                .try_for_each(|(id, (n, t))| {
                    let e = a.entry(id).or_insert((0, 0));
                    *e = (e.0 + n, e.1.checked_add(t)?);
                    Some(())
                })
                .map(|_| a),
            _ => None,
        };
    }
}

/// What one read of every `NVTX_EVENTS` row tells besides its ranges ([`super::fold::fold_nvtx_events`] with
/// stats): the table's [`TimedStats`] and each thread's marks and ranges ([`NvtxThreads`]), each None when a
/// value is not an INTEGER (its question then falls back to its own scan, as without this read).
#[derive(Debug, Clone)]
pub struct NvtxFacts {
    stats: Option<TimedStats>,
    threads: Option<NvtxThreads>,
}

impl NvtxFacts {
    pub(crate) fn new(t: &super::TableInfo, keep: Keep) -> NvtxFacts {
        NvtxFacts { stats: Some(TimedStats::new(t, keep)), threads: Some(NvtxThreads::default()) }
    }

    /// Count a row of [`nvtx_columns`] followed by [`TimedStats::columns`] at `at` (what [`scan_timed_stats`]
    /// and [`Export::nvtx_on_runtime_threads`]'s scan count of it).
    pub(crate) fn add_row(&mut self, r: &RawRow, at: usize) {
        if self.stats.as_mut().is_some_and(|st| !st.add_timed_row(r, at)) {
            self.stats = None;
        }
        // the columns of `nvtx_columns`: start 1, end 2, eventType 3, globalTid 6
        if self.threads.as_mut().is_some_and(|th| !th.add(r.int(3), r.int(1), r.int(2), r.int(6))) {
            self.threads = None;
        }
    }

    /// The facts of the parts of a read, in rowid order.
    pub(crate) fn merge(parts: Vec<NvtxFacts>) -> NvtxFacts {
        let mut threads = Some(NvtxThreads::default());
        let mut stats = Vec::with_capacity(parts.len());
        for p in parts {
            stats.push(p.stats);
            threads = threads.zip(p.threads).map(|(mut a, b)| {
                a.append(b);
                a
            });
        }
        NvtxFacts { stats: merge_stats(stats), threads }
    }
}

/// The NVTX marks, push/pop and start/end ranges of each thread (`globalTid`, not NULL): their count, their
/// starts and `max(start, end)` over those with a start (what [`Export::nvtx_on_runtime_threads`] counts).
#[derive(Debug, Clone, Default)]
pub(crate) struct NvtxThreads(crate::fx::FxMap<i64, ThreadMarks>);

#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadMarks {
    rows: i64,
    starts: Vec<i64>,
    last: Option<i64>,
}

impl NvtxThreads {
    /// Count a row of the cells `event_type`, `start`, `end` and `global_tid` when it is a mark or a range;
    /// false when its `start`, `end` or `globalTid` is not an INTEGER ([`Export::nvtx_on_runtime_threads`] then
    /// asks SQL).
    fn add(&mut self, event_type: IntCell, start: IntCell, end: IntCell, global_tid: IntCell) -> bool {
        if !matches!(event_type, IntCell::Int(t) if NVTX_MARKS_AND_RANGES.contains(&t)) {
            return true;
        }
        let (Ok(s), Ok(e), Ok(g)) = (int_cell(start), int_cell(end), int_cell(global_tid)) else {
            return false;
        };
        if let Some(g) = g {
            let m = self.0.entry(g).or_default();
            m.rows += 1;
            if let Some(s) = s {
                m.starts.push(s);
                let v = s.max(e.unwrap_or(s));
                m.last = Some(m.last.map_or(v, |l| l.max(v)));
            }
        }
        true
    }

    fn append(&mut self, o: NvtxThreads) {
        for (g, m) in o.0 {
            let x = self.0.entry(g).or_default();
            x.rows += m.rows;
            x.starts.extend(m.starts);
            x.last = x.last.max(m.last);
        }
    }

    /// `(count, count starting after after_ns, max(start, end))` of the rows on `tids`.
    fn on(&self, tids: &crate::fx::FxSet<i64>, after_ns: i64) -> (i64, i64, i64) {
        let (mut n, mut after, mut last) = (0, 0, None::<i64>);
        for (_, m) in self.0.iter().filter(|(g, _)| tids.contains(g)) {
            n += m.rows;
            after += m.starts.iter().filter(|&&s| s > after_ns).count() as i64;
            last = last.max(m.last);
        }
        (n, after, last.unwrap_or(0))
    }
}

/// The NVTX event types [`Export::nvtx_on_runtime_threads`] counts.
const NVTX_MARKS_AND_RANGES: [i64; 3] = [schema::nvtx::MARK, schema::nvtx::PUSH_POP, schema::nvtx::START_END];

/// The per-table [`TimedStats`] of an export (`None` for a table that fell back to SQL), the tables whose
/// valid intervals the next scan keeps, and the NVTX range rows counted by a read of them all.
#[derive(Debug, Default)]
pub(crate) struct StatsCache {
    stats: std::cell::RefCell<HashMap<String, Option<TimedStats>>>,
    keep: std::cell::RefCell<HashMap<String, Keep>>,
    nvtx_range_rows: std::cell::Cell<Option<i64>>,
    /// Each thread's NVTX marks and ranges, from a read of every NVTX row ([`Export::put_nvtx_facts`]).
    nvtx_threads: std::cell::RefCell<Option<std::sync::Arc<NvtxThreads>>>,
}

/// At this many rows in all the tables asked for, the scans run in parallel threads.
const PARALLEL_ROWS: usize = 200_000;
/// A table of at least this many rows is split into rowid ranges scanned in parallel.
pub(crate) const CHUNK_ROWS: usize = 400_000;

fn int_cell(v: IntCell) -> std::result::Result<Option<i64>, ()> {
    match v {
        IntCell::Int(i) => Ok(Some(i)),
        IntCell::Null => Ok(None),
        IntCell::Other(_) => Err(()),
    }
}

/// Threads for parallel scans: the cores available (at least 1).
pub fn scan_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 64)
}

/// `[lo, hi)` rowid ranges splitting a table into about `parts` pieces of equal rowid span (one unbounded
/// range, `None`, for a small table, a table without rowid, or when `parts` is 1).
pub(crate) fn rowid_chunks(conn: &rusqlite::Connection, table: &str, parts: usize) -> Vec<Option<(i64, i64)>> {
    rowid_chunks_of(conn, table, parts, CHUNK_ROWS)
}

/// [`rowid_chunks`] of a table split from `chunk_rows` rows on, in pieces of at least `chunk_rows / 2`.
pub(crate) fn rowid_chunks_of(
    conn: &rusqlite::Connection,
    table: &str,
    parts: usize,
    chunk_rows: usize,
) -> Vec<Option<(i64, i64)>> {
    if parts <= 1 {
        return vec![None];
    }
    // two queries: each is one b-tree descent (together in one SELECT they would scan the table)
    let one = |f: &str| -> Option<i64> {
        conn.query_row(&format!("SELECT {f}(rowid) FROM \"{table}\""), [], |r| r.get(0)).ok().flatten()
    };
    let (Some(lo), Some(hi)) = (one("min"), one("max")) else { return vec![None] };
    let span = (hi as i128 - lo as i128 + 1) as u128;
    if span < (chunk_rows as u128) || span > (1u128 << 40) {
        return vec![None];
    }
    let parts = parts.min((span / (chunk_rows as u128 / 2)).max(1) as usize);
    let step = span.div_ceil(parts as u128) as i64;
    (0..parts as i64)
        .map(|i| {
            let a = lo + i * step;
            let b = if i + 1 == parts as i64 { hi + 1 } else { lo + (i + 1) * step };
            Some((a, b))
        })
        .collect()
}

/// One scan of a timed table (or of one rowid range of it) on `conn`; Ok(None) when a value is not an
/// INTEGER.
fn scan_timed_stats(
    conn: &rusqlite::Connection,
    t: &super::TableInfo,
    range: Option<(i64, i64)>,
    keep: Keep,
) -> std::result::Result<Option<TimedStats>, rusqlite::Error> {
    let list = format!("start, end, {}", TimedStats::columns(t, keep));
    let filter = range.map(|(a, b)| format!(" WHERE rowid >= {a} AND rowid < {b}")).unwrap_or_default();
    let mut q = match RawQuery::prepare(conn, &format!("SELECT rowid, {list} FROM \"{}\"{filter}", t.name)) {
        Ok(q) => q,
        Err(e) if range.is_some() => return Err(e),
        Err(_) => RawQuery::prepare(conn, &format!("SELECT NULL, {list} FROM \"{}\"", t.name))?,
    };
    let mut st = TimedStats::new(t, keep);
    while let Some(r) = q.next()? {
        if !st.add_timed_row(&r, 3) {
            return Ok(None);
        }
    }
    Ok(Some(st))
}

/// Where [`TimedStats::add_row`] finds its four values in a row: `globalTid`, `nameId`, `graphNodeId` and the
/// kernel's `demangledName`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatCols {
    tid: usize,
    name: usize,
    node: usize,
    kname: usize,
}

impl StatCols {
    /// The list of [`TimedStats::columns`] at `base`.
    pub(crate) fn at(base: usize) -> StatCols {
        StatCols { tid: base, name: base + 1, node: base + 2, kname: base + 3 }
    }
}

impl TimedStats {
    /// Empty stats of a scan of `t` that keeps `keep`.
    pub(crate) fn new(t: &super::TableInfo, keep: Keep) -> TimedStats {
        TimedStats {
            sum_dur: Some(0),
            node_rows: t.has_column(cols::GRAPH_NODE_ID).then_some(0),
            intervals: keep.intervals.then(|| (vec![IntervalPart::Own(Vec::new())], Vec::new())),
            name_time: (keep.names && t.has_column(cols::DEMANGLED_NAME)).then(Default::default),
            threads: t.has_column("globalTid"),
            names: t.has_column("nameId"),
            ..Default::default()
        }
    }

    /// The four columns [`TimedStats::add_row`] reads (NULL for those the table lacks): `globalTid`, `nameId`,
    /// `graphNodeId`, and the kernel's `demangledName` when kept.
    pub(crate) fn columns(t: &super::TableInfo, keep: Keep) -> String {
        Self::columns_beside(t, keep, 0, None, None).0
    }

    /// [`TimedStats::columns`] as the list at `base` of a statement that reads `graphNodeId` at `node` or
    /// `demangledName` at `kname` itself: those are not read twice (NULL in the list); and where
    /// [`TimedStats::add_row`] finds each value.
    pub(crate) fn columns_beside(
        t: &super::TableInfo,
        keep: Keep,
        base: usize,
        node: Option<usize>,
        kname: Option<usize>,
    ) -> (String, StatCols) {
        let has = |c: &'static str| if t.has_column(c) { c } else { "NULL" };
        let keep_name = keep.names && t.has_column(cols::DEMANGLED_NAME) && kname.is_none();
        let list = format!(
            "{}, {}, {}, {}",
            has("globalTid"),
            has("nameId"),
            if node.is_some() { "NULL" } else { has(cols::GRAPH_NODE_ID) },
            if keep_name { cols::DEMANGLED_NAME } else { "NULL" }
        );
        let at = StatCols::at(base);
        (list, StatCols { node: node.unwrap_or(at.node), kname: kname.unwrap_or(at.kname), ..at })
    }

    /// Count one row whose interval was read as `start, end` and whose [`TimedStats::columns`] are the
    /// columns of `r` at `at`; the row id (column 0) names an impossible timestamp. False when a value is not
    /// an INTEGER (the stats of the table then fall back to SQL).
    pub(crate) fn add_row(&mut self, r: &RawRow, start: Option<i64>, end: Option<i64>, at: StatCols) -> bool {
        self.add_cells(start, end, at, |i| r.int(i))
    }

    /// [`TimedStats::add_row`] of a row whose `start` and `end` are columns 1 and 2 and whose
    /// [`TimedStats::columns`] start at `at`: what a scan of the table counts of it. False when a value is not an
    /// INTEGER.
    pub(crate) fn add_timed_row(&mut self, r: &RawRow, at: usize) -> bool {
        match (int_cell(r.int(1)), int_cell(r.int(2))) {
            (Ok(s), Ok(e)) => self.add_row(r, s, e, StatCols::at(at)),
            _ => false,
        }
    }

    /// [`TimedStats::add_row`] of a row whose cell `i` is `cell(i)` (the caller's reader, which gives the cells
    /// it has read already instead of asking SQLite twice).
    #[inline]
    pub(crate) fn add_cells(
        &mut self,
        start: Option<i64>,
        end: Option<i64>,
        at: StatCols,
        cell: impl Fn(usize) -> IntCell,
    ) -> bool {
        let bad = |v: Option<i64>| v.is_some_and(|x| !possible_ts(x));
        self.rows += 1;
        if self.bad_ts.is_none() && (bad(start) || bad(end)) {
            let rowid = int_cell(cell(0)).ok().flatten();
            self.bad_ts = Some((rowid, start, end));
        }
        match (start, end) {
            (Some(s), Some(e)) if e >= s => {
                self.max_end = Some(self.max_end.map_or(e, |m| m.max(e)));
                self.sum_dur = self.sum_dur.and_then(|a| a.checked_add(e - s));
                if let Some(d) = e.checked_sub(s).filter(|d| self.longest.is_none_or(|(l, _)| *d > l)) {
                    self.longest = Some((d, int_cell(cell(0)).ok().flatten()));
                }
                if let Some((v, _)) = self.intervals.as_mut() {
                    if let Some(IntervalPart::Own(v)) = v.last_mut() {
                        v.push((s, e));
                    }
                }
                if let Some(m) = self.name_time.as_mut() {
                    let ok = match cell(at.kname) {
                        IntCell::Int(id) => {
                            let x = m.entry(id).or_insert((0, 0));
                            e.checked_sub(s).and_then(|d| x.1.checked_add(d)).map(|t| *x = (x.0 + 1, t)).is_some()
                        }
                        _ => false,
                    };
                    if !ok {
                        self.name_time = None;
                    }
                }
            }
            (None, _) => self.skips.null_start += 1,
            (Some(s), None) => {
                self.skips.null_end += 1;
                if let Some((_, i)) = self.intervals.as_mut() {
                    i.push(s);
                }
            }
            (Some(s), Some(_)) => {
                self.skips.inverted += 1;
                if let Some((_, i)) = self.intervals.as_mut() {
                    i.push(s);
                }
            }
        }
        if self.threads {
            let Ok(g) = int_cell(cell(at.tid)) else { return false };
            if let Some(g) = g {
                self.thread_ids.insert(g);
            }
        }
        if self.names {
            let Ok(n) = int_cell(cell(at.name)) else { return false };
            if let Some(n) = n {
                *self.name_counts.entry(n).or_default() += 1;
            }
        }
        if let Some(n) = self.node_rows.as_mut() {
            // `graphNodeId IS NOT NULL`
            if !matches!(cell(at.node), IntCell::Null) {
                *n += 1;
            }
        }
        true
    }
}

/// How to open more read-only connections to an export from other threads ([`Export::source`]): the URI and
/// flags of [`Export::open`], and the file's name for messages. `Send`, unlike the export's connection.
#[derive(Debug, Clone)]
pub struct ScanSource {
    uri: String,
    name: String,
}

impl ScanSource {
    /// Another read-only connection (same URI, flags and pragmas as [`Export::open`]).
    pub fn open(&self) -> Result<rusqlite::Connection> {
        use rusqlite::OpenFlags;
        let name = &self.name;
        let conn = rusqlite::Connection::open_with_flags(
            &self.uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::input(format!("{name}: cannot open as SQLite: {}", super::describe_sql_error(&e))))?;
        conn.busy_timeout(std::time::Duration::from_secs(2))
            .map_err(|e| Error::input(format!("{name}: cannot configure read-only access: {e}")))?;
        // a scan reads each page once: a small page cache (512 KiB, not 2 MiB) per parallel reader
        conn.execute_batch("PRAGMA query_only = 1; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -512;").map_err(
            |e| Error::input(format!("{name}: cannot configure read-only access: {}", super::describe_sql_error(&e))),
        )?;
        Ok(conn)
    }
    /// The file's name for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// An SQLite error met while reading `what`, as [`Export::sql_err`] words it.
    pub fn sql_err(&self, what: &str, e: rusqlite::Error) -> Error {
        Error::input(format!("{}: while reading {what}: {}", self.name, super::describe_sql_error(&e)))
    }
}

impl Export {
    /// What another thread needs to open its own read-only connection to this export.
    pub fn source(&self) -> ScanSource {
        ScanSource { uri: self.uri.clone(), name: self.name() }
    }

    /// Keep the valid `(start, end)` of these tables in the next scan of each (for [`Export::window_intervals`]).
    pub fn keep_intervals(&self, tables: &[&str]) {
        let mut k = self.stats.keep.borrow_mut();
        for t in tables {
            if let Some(info) = self.table(t) {
                k.entry(info.name.to_ascii_lowercase()).or_default().intervals = true;
            }
        }
    }

    /// Take the facts `other`'s scans computed (its timed-stats cache, without the intervals kept for the gates),
    /// `other` being a connection to the same export: a thread on this connection then answers from them what
    /// `other` already knows, without a scan.
    pub fn adopt_facts(&self, other: &Export) {
        if self.stats.nvtx_range_rows.get().is_none() {
            self.stats.nvtx_range_rows.set(other.stats.nvtx_range_rows.get());
        }
        if self.stats.nvtx_threads.borrow().is_none() {
            self.stats.nvtx_threads.replace(other.stats.nvtx_threads.borrow().clone());
        }
        let theirs = other.stats.stats.borrow();
        let mut mine = self.stats.stats.borrow_mut();
        for (k, v) in theirs.iter() {
            mine.entry(k.clone()).or_insert_with(|| v.as_ref().map(TimedStats::facts));
        }
    }

    /// The NVTX range rows a read of every push/pop and start/end row of `NVTX_EVENTS` counted (what
    /// [`Export::nvtx_range_rows`] then answers without a scan).
    pub(crate) fn put_nvtx_range_rows(&self, n: u64) {
        self.stats.nvtx_range_rows.set(i64::try_from(n).ok());
    }

    /// [`Export::adopt_facts`], and the intervals `other`'s scans kept for the gates ([`Export::keep_intervals`])
    /// moved here: the gates then run on this connection, `other` keeping the facts alone.
    pub fn take_over_facts(&self, other: &Export) {
        self.adopt_facts(other);
        let mut theirs = other.stats.stats.borrow_mut();
        let mut mine = self.stats.stats.borrow_mut();
        for (k, v) in theirs.iter_mut().filter_map(|(k, v)| Some((k, v.as_mut()?))) {
            if let Some(Some(m)) = mine.get_mut(k) {
                m.intervals = v.intervals.take();
            }
        }
    }

    /// Aggregate the kernel rows by `demangledName` in the next scan of KERNEL (for
    /// [`Export::kernel_time_by_name`]: no scan of its own).
    pub fn keep_kernel_names(&self) {
        if let Some(info) = self.table(schema::KERNEL) {
            self.stats.keep.borrow_mut().entry(info.name.to_ascii_lowercase()).or_default().names = true;
        }
    }

    /// Compute the [`TimedStats`] of the named tables present and not yet known: one scan each, in parallel
    /// threads on their own read-only connections when the tables are large (a large table split into rowid
    /// ranges, merged in table order).
    pub fn prefetch_timed_stats(&self, tables: &[&str]) -> Result<()> {
        let todo: Vec<super::TableInfo> = {
            let cache = self.stats.stats.borrow();
            let mut v: Vec<super::TableInfo> = Vec::new();
            for t in tables {
                if let Some(info) = self.table(t) {
                    let key = info.name.to_ascii_lowercase();
                    if !cache.contains_key(&key) && !v.iter().any(|x| x.name == info.name) {
                        v.push(info.clone());
                    }
                }
            }
            v
        };
        if todo.is_empty() {
            return Ok(());
        }
        let keep: Vec<Keep> = {
            let k = self.stats.keep.borrow();
            todo.iter().map(|t| k.get(&t.name.to_ascii_lowercase()).copied().unwrap_or_default()).collect()
        };
        let hints: Vec<usize> = todo.iter().map(|t| self.row_count_hint(&t.name)).collect();
        let big: usize = hints.iter().sum();
        let results: Vec<Result<Option<TimedStats>>> = if big >= PARALLEL_ROWS {
            let src = self.source();
            let threads = scan_threads();
            // (table index, rowid range) jobs
            let mut jobs: Vec<(usize, Option<(i64, i64)>)> = Vec::new();
            for (i, t) in todo.iter().enumerate() {
                let parts = if hints[i] >= CHUNK_ROWS { threads } else { 1 };
                for r in rowid_chunks(&self.conn, &t.name, parts) {
                    jobs.push((i, r));
                }
            }
            let out: Vec<(usize, Result<Option<TimedStats>>)> = std::thread::scope(|s| {
                let handles: Vec<_> = jobs
                    .iter()
                    .map(|&(i, r)| {
                        let (src, t, keep) = (&src, &todo[i], keep[i]);
                        s.spawn(move || -> Result<Option<TimedStats>> {
                            let conn = src.open()?;
                            scan_timed_stats(&conn, t, r, keep).map_err(|e| src.sql_err(&t.name, e))
                        })
                    })
                    .collect();
                jobs.iter()
                    .zip(handles)
                    .map(|(&(i, _), h)| {
                        (i, h.join().unwrap_or_else(|_| Err(Error::input("a table scan thread panicked"))))
                    })
                    .collect()
            });
            // merge the chunks of each table in rowid order; the first error of a table (in order) wins
            let mut merged: Vec<Option<Result<Option<TimedStats>>>> = (0..todo.len()).map(|_| None).collect();
            for (i, r) in out {
                merged[i] = Some(match (merged[i].take(), r) {
                    (None, r) => r,
                    (Some(Err(e)), _) => Err(e),
                    (Some(Ok(_)), Err(e)) => Err(e),
                    (Some(Ok(None)), Ok(_)) | (Some(Ok(_)), Ok(None)) => Ok(None),
                    (Some(Ok(Some(mut a))), Ok(Some(b))) => {
                        a.append(b);
                        Ok(Some(a))
                    }
                });
            }
            merged.into_iter().map(|m| m.unwrap_or(Ok(None))).collect()
        } else {
            todo.iter()
                .zip(&keep)
                .map(|(t, &k)| scan_timed_stats(&self.conn, t, None, k).map_err(|e| self.sql_err(&t.name)(e)))
                .collect()
        };
        let mut cache = self.stats.stats.borrow_mut();
        for (t, r) in todo.iter().zip(results) {
            cache.insert(t.name.to_ascii_lowercase(), r?);
        }
        Ok(())
    }

    /// The valid `(start, end)` of the named device tables (in table order, each in its table's order), how
    /// many come from the first table, and the starts of that table's invalid rows that have a start: from the
    /// scans of [`Export::prefetch_timed_stats`] when [`Export::keep_intervals`] asked for them (taken: asked
    /// once), else read now. A value of another type than INTEGER is an input error naming table and column.
    pub fn window_intervals(&self, kinds: &[DeviceKind]) -> Result<WindowRows> {
        let mut rows = WindowRows::default();
        for (n, k) in kinds.iter().enumerate() {
            let tbl = k.table();
            let Some(info) = self.optional(tbl, &["start", "end"])? else { continue };
            let key = info.name.to_ascii_lowercase();
            let cached =
                self.stats.stats.borrow_mut().get_mut(&key).and_then(|s| s.as_mut()).and_then(|s| s.intervals.take());
            match cached {
                Some((v, inv)) => {
                    rows.parts.extend(v);
                    if n == 0 {
                        rows.first_invalid = inv;
                    }
                }
                None => {
                    let mut skips = RowSkips::new();
                    let mut part = Vec::new();
                    self.device_intervals(*k, &mut skips, |s, e| part.push((s, e)))?;
                    rows.parts.push(IntervalPart::Own(part));
                    if n == 0 && skips.get(tbl).is_some_and(|s| s.null_end + s.inverted > 0) {
                        // the starts of the invalid rows (only the tenths of the first table need them)
                        self.scan(tbl, &["start", "end"]).run(
                            "start IS NOT NULL AND (end IS NULL OR end < start)",
                            |row| {
                                let s = self.check_row_ts(tbl, "start", row, self.int_at(row, 1, tbl, "start")?)?;
                                rows.first_invalid.extend(s);
                                Ok(())
                            },
                        )?;
                    }
                }
            }
            if n == 0 {
                rows.first_parts = rows.parts.len();
            }
        }
        Ok(rows)
    }

    /// `f` of the table's [`TimedStats`] (computed now when unknown); None when the table is absent or fell
    /// back to SQL.
    pub(crate) fn with_stats<T>(&self, table: &str, f: impl FnOnce(&TimedStats) -> T) -> Result<Option<T>> {
        if self.table(table).is_none() {
            return Ok(None);
        }
        self.prefetch_timed_stats(&[table])?;
        let key = self.table(table).map(|t| t.name.to_ascii_lowercase()).unwrap_or_default();
        Ok(self.stats.stats.borrow().get(&key).and_then(|s| s.as_ref()).map(f))
    }

    /// `f` of the table's [`TimedStats`] when already computed (no scan).
    pub(crate) fn known_stats<T>(&self, table: &str, f: impl FnOnce(&TimedStats) -> T) -> Option<T> {
        let key = self.table(table)?.name.to_ascii_lowercase();
        self.stats.stats.borrow().get(&key).and_then(|s| s.as_ref()).map(f)
    }

    /// What the next scan of `table` keeps besides its facts ([`Export::keep_intervals`],
    /// [`Export::keep_kernel_names`]); None when its stats are already known (no scan needs to compute them).
    pub(crate) fn stats_wanted(&self, table: &str) -> Option<Keep> {
        let key = self.table(table)?.name.to_ascii_lowercase();
        if self.stats.stats.borrow().contains_key(&key) {
            return None;
        }
        Some(self.stats.keep.borrow().get(&key).copied().unwrap_or_default())
    }

    /// Record what a read of every NVTX row found ([`NvtxFacts`]): the table's timed stats and each thread's
    /// marks and ranges, where they could be computed (the rest is asked of the table as before).
    pub(crate) fn put_nvtx_facts(&self, facts: NvtxFacts) {
        if let Some(st) = facts.stats {
            self.put_stats(schema::NVTX_EVENTS, st);
        }
        if let Some(th) = facts.threads {
            self.stats.nvtx_threads.replace(Some(std::sync::Arc::new(th)));
        }
    }

    /// Whether each thread's NVTX marks and ranges are known without a scan ([`Export::put_nvtx_facts`]).
    #[cfg(test)]
    pub(crate) fn knows_nvtx_threads(&self) -> bool {
        self.stats.nvtx_threads.borrow().is_some()
    }

    /// Record the [`TimedStats`] of `table` computed by another whole-table scan (the ranges readers), unless
    /// known already.
    pub(crate) fn put_stats(&self, table: &str, stats: TimedStats) {
        if let Some(t) = self.table(table) {
            self.stats.stats.borrow_mut().entry(t.name.to_ascii_lowercase()).or_insert(Some(stats));
        }
    }
}

/// The [`TimedStats`] of one table from the parts of a parallel read, in rowid order: None when a part did not
/// compute them (a value of another type than INTEGER).
pub(crate) fn merge_stats(parts: impl IntoIterator<Item = Option<TimedStats>>) -> Option<TimedStats> {
    let mut out: Option<TimedStats> = None;
    for p in parts {
        let p = p?;
        match out.as_mut() {
            None => out = Some(p),
            Some(o) => o.append(p),
        }
    }
    out
}

// ---- device rows in bulk, in parallel (perf helper, issue #19)

/// A device row as read in bulk: 16 bytes. `dur` is `end - start`, or `u32::MAX` for a row lasting that long
/// or longer (its end is in [`DeviceChunk::long`]); `aux` is the `correlationId`, or `u32::MAX` when it is NULL
/// or outside `0..u32::MAX` (the value is in [`DeviceChunk::wide`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackedDeviceRow {
    pub start: i64,
    pub dur: u32,
    pub aux: u32,
}

/// The valid rows of one device table, or of one rowid range of it, in table order.
#[derive(Debug, Default, Clone)]
pub struct DeviceChunk {
    pub kind: Option<DeviceKind>,
    pub rows: Vec<PackedDeviceRow>,
    /// `(first row index, globalPid, deviceId)`: runs of rows with the same process and device.
    pub segs: Vec<(usize, Option<i64>, Option<i64>)>,
    /// `(row index, end)` of the rows with `dur == u32::MAX`, by index.
    pub long: Vec<(usize, i64)>,
    /// `(row index, correlationId)` of the rows with `aux == u32::MAX`, by index.
    pub wide: Vec<(usize, Option<i64>)>,
    /// Invalid intervals, not delivered.
    pub skips: RowSkips,
    /// With [`DeviceDetail::Names`], row `i`'s KERNEL `demangledName` id ([`NO_NAME`] when NULL; empty for the
    /// other tables).
    pub names: Vec<i64>,
    /// With [`DeviceDetail::Names`], the valid rows with a `graphNodeId` (node-level graph rows).
    pub node_rows: u64,
    /// The [`TimedStats`] of these rows when the read was asked to compute them (None when not asked or when a
    /// value is not an INTEGER).
    pub stats: Option<TimedStats>,
}

/// `demangledName` of a kernel row read as NULL.
pub const NO_NAME: i64 = i64::MIN;

/// What a bulk read of the device tables reads besides [`cols::DEVICE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceDetail {
    /// Nothing more (the ranges contract).
    None,
    /// KERNEL's `demangledName` (required then) and every table's `graphNodeId` when present: the device
    /// timelines of the step budget read them from the same scan. The rows are then shared: the valid intervals
    /// kept for the gates are left in them, each chunk's stats attached to it by the reader's caller
    /// ([`TimedStats::attach_rows`]).
    Names,
}

impl DeviceChunk {
    /// The runs of rows with one process and device: (row indices, `globalPid`, `deviceId`).
    pub fn segments(&self) -> impl Iterator<Item = (std::ops::Range<usize>, Option<i64>, Option<i64>)> + '_ {
        self.segs.iter().enumerate().map(|(k, &(lo, pid, dev))| {
            let hi = self.segs.get(k + 1).map_or(self.rows.len(), |n| n.0);
            (lo..hi, pid, dev)
        })
    }

    /// `(start, end)` of every row, in order.
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.rows.iter().enumerate().map(|(i, &r)| (r.start, self.end_of(i, r)))
    }

    /// `(start, end)` of row `i`.
    pub fn interval(&self, i: usize) -> Option<Interval> {
        let r = *self.rows.get(i)?;
        Some((r.start, self.end_of(i, r)))
    }

    /// `end` of row `i`.
    pub fn end(&self, i: usize) -> i64 {
        self.end_of(i, self.rows[i])
    }

    /// `end` of `r`, row `i`.
    fn end_of(&self, i: usize, r: PackedDeviceRow) -> i64 {
        if r.dur == u32::MAX {
            self.long[self.long.partition_point(|&(j, _)| j < i)].1
        } else {
            r.start + r.dur as i64
        }
    }
    /// `correlationId` of row `i` as read.
    pub fn correlation_id(&self, i: usize, aux: u32) -> Option<i64> {
        if aux == u32::MAX {
            self.wide[self.wide.partition_point(|&(j, _)| j < i)].1
        } else {
            Some(aux as i64)
        }
    }
}

/// Column `i` of a row of `table` (in the file `name`) as an optional integer; any other type is an input
/// error naming table and column.
/// Small enough to inline into every reader's loop (called for every cell of millions of rows): the message is
/// built out of line.
#[inline(always)]
pub(crate) fn cell_int(name: &str, r: &RawRow, i: usize, table: &str, col: &str) -> Result<Option<i64>> {
    cell_value(name, r.int(i), table, col)
}

/// A cell read as an integer cell: its value, None for NULL, an error naming `table.col` for another storage
/// class.
#[inline]
pub(crate) fn cell_value(name: &str, cell: IntCell, table: &str, col: &str) -> Result<Option<i64>> {
    match cell {
        IntCell::Int(v) => Ok(Some(v)),
        IntCell::Null => Ok(None),
        IntCell::Other(t) => Err(not_integer(name, table, col, t)),
    }
}

#[cold]
#[inline(never)]
fn not_integer(name: &str, table: &str, col: &str, t: &str) -> Error {
    Error::input(format!("{name}: schema mismatch: {table}.{col} holds a {t} value, not the INTEGER nsys writes"))
}

#[inline(always)]
pub(crate) fn named_ts(name: &str, table: &str, col: &str, row: &RawRow, v: Option<i64>) -> Result<Option<i64>> {
    match v {
        Some(t) if !possible_ts(t) => Err(impossible_timestamp(name, table, col, row.rowid(), t)),
        _ => Ok(v),
    }
}

/// A timestamp within ±[`MAX_TIMESTAMP_NS`]: one an nsys capture can hold.
#[inline(always)]
pub(super) fn possible_ts(t: i64) -> bool {
    (-MAX_TIMESTAMP_NS..=MAX_TIMESTAMP_NS).contains(&t)
}

/// The rows of `table` last so long that their durations overflow 64-bit nanoseconds: the one message of
/// every reader that sums them.
#[cold]
#[inline(never)]
pub(crate) fn durations_not_real(name: &str, table: &str) -> Error {
    Error::input(format!(
        "{name}: {table}: the rows' total duration overflows 64-bit nanoseconds: the export's timestamps are not real"
    ))
}

#[cold]
#[inline(never)]
fn impossible_timestamp(name: &str, table: &str, col: &str, rowid: Option<i64>, t: i64) -> Error {
    Error::input(format!(
        "{name}: {table}.{col} = {t} ns on row {}: an impossible timestamp (beyond ±2^53 ns, about 104 days from the session start); the export is damaged",
        rowid.map(|r| format!("id {r}")).unwrap_or_else(|| "?".into())
    ))
}

fn read_device_chunk(
    src: &ScanSource,
    kind: DeviceKind,
    t: &super::TableInfo,
    range: Option<(i64, i64)>,
    detail: DeviceDetail,
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<DeviceChunk> {
    let name = src.name();
    let tbl = kind.table();
    let mut c = DeviceChunk { kind: Some(kind), stats: stats.map(|k| TimedStats::new(t, k)), ..Default::default() };
    if let Some(st) = c.stats.as_mut().filter(|_| detail == DeviceDetail::Names) {
        st.leave_intervals_to_rows();
    }
    let names = detail == DeviceDetail::Names && kind == DeviceKind::Kernel;
    let nodes = detail == DeviceDetail::Names && t.has_column(cols::GRAPH_NODE_ID) && kind != DeviceKind::GraphTrace;
    if let Some((a, b)) = range {
        // an upper bound, reserved once (untouched pages cost no memory)
        c.rows.reserve_exact((b - a).clamp(0, 1 << 32) as usize);
        if names {
            c.names.reserve_exact((b - a).clamp(0, 1 << 32) as usize);
        }
    }
    let mut last: Option<(Option<i64>, Option<i64>)> = None;
    let mut n = 0u64;
    // the row's columns after rowid and the device columns: the kernel's name, its graph node, then the stats'
    const NAME_AT: usize = 6;
    const NODE_AT: usize = 7;
    // the stats read the name and the graph node where the rows' own columns have them (not twice)
    let (stat_list, at) = match stats {
        Some(k) => TimedStats::columns_beside(t, k, 8, nodes.then_some(NODE_AT), names.then_some(NAME_AT)),
        None => ("NULL, NULL, NULL, NULL".into(), StatCols::at(8)),
    };
    let list = format!(
        "{}, {}, {}, {stat_list}",
        cols::DEVICE.join(", "),
        if names { cols::DEMANGLED_NAME } else { "NULL" },
        if nodes { cols::GRAPH_NODE_ID } else { "NULL" },
    );
    super::fold::for_each_in_range(src, t, tbl, &list, range, |r| {
        n += 1;
        if n & 0xFFFF == 0 && cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        let ((s, e), interval) = super::fold::row_times(src, tbl, r, &mut c.skips)?;
        // the kernel's name and graph node, asked of SQLite once for the row and its stats
        let kname = if names { r.int(NAME_AT) } else { IntCell::Null };
        let node = if nodes { r.int(NODE_AT) } else { IntCell::Null };
        if let Some(st) = c.stats.as_mut() {
            let cell = |i: usize| match i {
                NAME_AT if names => kname,
                NODE_AT if nodes => node,
                _ => r.int(i),
            };
            if !st.add_cells(s, e, at, cell) {
                c.stats = None;
            }
        }
        let Some((s, e)) = interval else { return Ok(true) };
        let gpid = cell_int(name, r, 3, tbl, "globalPid")?;
        let corr = cell_int(name, r, 4, tbl, "correlationId")?;
        let dev = cell_int(name, r, 5, tbl, "deviceId")?;
        if names {
            c.names.push(cell_value(name, kname, tbl, cols::DEMANGLED_NAME)?.unwrap_or(NO_NAME));
        }
        if nodes && cell_value(name, node, tbl, cols::GRAPH_NODE_ID)?.is_some() {
            c.node_rows += 1;
        }
        let i = c.rows.len();
        if last != Some((gpid, dev)) {
            c.segs.push((i, gpid, dev));
            last = Some((gpid, dev));
        }
        let d = e - s;
        let dur = if d < u32::MAX as i64 {
            d as u32
        } else {
            c.long.push((i, e));
            u32::MAX
        };
        let aux = match corr {
            Some(v) if (0..u32::MAX as i64).contains(&v) => v as u32,
            other => {
                c.wide.push((i, other));
                u32::MAX
            }
        };
        c.rows.push(PackedDeviceRow { start: s, dur, aux });
        Ok(true)
    })?;
    Ok(c)
}

/// The valid rows of the device tables named (each present, with the columns of [`cols::DEVICE`]), in
/// table order, each large table split into rowid ranges read in parallel threads, each on its own
/// read-only connection: the chunks in table and rowid order, so that reading them in order is reading the
/// tables in order. The checks are those of [`Export::device_rows`] (same messages; the first error in
/// table order wins). `cancel` stops the reads early (the result is then incomplete: for a caller that
/// failed meanwhile).
pub fn read_device_chunks(
    src: &ScanSource,
    tables: &[(DeviceKind, super::TableInfo, Option<Keep>)],
    threads: usize,
    detail: DeviceDetail,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Vec<DeviceChunk>> {
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let infos: Vec<&super::TableInfo> = tables.iter().map(|(_, t, _)| t).collect();
    let jobs = super::fold::plan(src, &infos, threads)?;
    super::fold::run_jobs(&jobs, |_, j| {
        let (kind, t, stats) = &tables[j.table];
        read_device_chunk(src, *kind, t, j.range, detail, *stats, cancel)
    })
    .into_iter()
    .collect()
}

/// An `NVTX_EVENTS` row as [`Export::nvtx_events_ref`] gives it: the `text` borrowed (raw bytes), never copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvtxRef<'a> {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub event_type: i64,
    pub text: Option<&'a [u8]>,
    pub text_id: Option<i64>,
    pub global_tid: Option<i64>,
    /// `domainId`, None when NULL, 0 (the default domain) or the column is absent.
    pub domain_id: Option<i64>,
}

impl Export {
    /// [`Export::nvtx_events`] without a `String` per row: the same rows, checks and messages, `text` as the
    /// bytes SQLite holds (valid only during the callback; [`Export::nvtx_events`] gives
    /// `String::from_utf8_lossy` of them). [`super::fold::fold_nvtx_events`] reads them in parallel.
    pub fn nvtx_events_ref(&self, types: &[i64], mut f: impl FnMut(NvtxRef<'_>) -> Result<()>) -> Result<()> {
        let t = self.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
        let name = self.name();
        self.scan(schema::NVTX_EVENTS, &nvtx_columns(t))
            .run(&nvtx_types_condition(types), |row| f(nvtx_ref(&name, row)?))
    }
}

/// The columns of an NVTX row, in [`nvtx_ref`]'s order (`domainId` as NULL when the table has none).
pub(crate) fn nvtx_columns(t: &super::TableInfo) -> [&'static str; 7] {
    let domain = if t.has_column(cols::DOMAIN_ID) { cols::DOMAIN_ID } else { "NULL" };
    ["start", "end", "eventType", "text", "textId", "globalTid", domain]
}

/// `eventType IN (…)`.
pub(crate) fn nvtx_types_condition(types: &[i64]) -> String {
    format!("eventType IN ({})", types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "))
}

/// One row of [`nvtx_columns`] (column `i + 1` is the i-th), checked: integer columns, text, timestamps.
pub(crate) fn nvtx_ref<'r>(name: &str, row: &'r RawRow) -> Result<NvtxRef<'r>> {
    let tbl = schema::NVTX_EVENTS;
    let start = named_ts(name, tbl, "start", row, cell_int(name, row, 1, tbl, "start")?)?;
    let end = named_ts(name, tbl, "end", row, cell_int(name, row, 2, tbl, "end")?)?;
    let event_type = cell_int(name, row, 3, tbl, "eventType")?.unwrap_or(0);
    let text = match row.get_ref(4).map_err(|e| Error::input(format!("{name}: {tbl}: {e}")))? {
        ValueRef::Null => None,
        ValueRef::Text(t) => Some(t),
        other => {
            return Err(Error::input(format!(
                "{name}: schema mismatch: {tbl}.text holds a {} value, not the TEXT nsys writes",
                type_name(other)
            )))
        }
    };
    Ok(NvtxRef {
        start,
        end,
        event_type,
        text,
        text_id: cell_int(name, row, 5, tbl, "textId")?,
        global_tid: cell_int(name, row, 6, tbl, "globalTid")?,
        domain_id: cell_int(name, row, 7, tbl, cols::DOMAIN_ID)?.filter(|&d| d != 0),
    })
}

/// Rows of `CUPTI_ACTIVITY_KIND_RUNTIME` sent by [`read_runtime_batches`]: `chunk` is the rowid range they come
/// from (in table order).
pub struct RuntimeBatch {
    pub chunk: usize,
    /// An upper bound of the rows of its chunk (the size of its rowid range; 0 when the chunk is the whole table):
    /// for a consumer that keeps the rows of each chunk apart and reserves once.
    pub chunk_bound: usize,
    pub rows: Vec<RuntimeRow>,
}

/// Rows per batch: with 16 parallel readers, 16 batches filling and 16 waiting in the channel (the join is the
/// slower side) held 16 MiB at 8192 rows of 64 bytes, the peak of `sqlite-ranges` on 16 cores; 4 MiB now.
const RUNTIME_BATCH: usize = 2048;

fn read_runtime_chunk(
    src: &ScanSource,
    t: &super::TableInfo,
    (chunk, range): (usize, Option<(i64, i64)>),
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: &std::sync::mpsc::SyncSender<RuntimeBatch>,
) -> Result<(RowSkips, Option<TimedStats>)> {
    let name = src.name();
    let tbl = schema::RUNTIME;
    let mut skips = RowSkips::new();
    let mut st = stats.map(|k| TimedStats::new(t, k));
    let mut batch = Vec::with_capacity(RUNTIME_BATCH);
    let list = format!(
        "{}, {}",
        cols::RUNTIME.join(", "),
        stats.map(|k| TimedStats::columns(t, k)).unwrap_or_else(|| "NULL, NULL, NULL, NULL".into())
    );
    let mut gone = false;
    let chunk_bound = range.map_or(0, |(a, b)| (b - a).clamp(0, 1 << 32) as usize);
    super::fold::for_each_in_range(src, t, tbl, &list, range, |r| {
        // the order of the checks of `Export::runtime_calls`: both types, both timestamps, then the rest
        let ((s, e), interval) = super::fold::row_times(src, tbl, r, &mut skips)?;
        if let Some(x) = st.as_mut() {
            if !x.add_row(r, s, e, StatCols::at(6)) {
                st = None;
            }
        }
        let Some((s, e)) = interval else { return Ok(true) };
        batch.push(RuntimeRow {
            start: s,
            end: e,
            global_tid: cell_int(name, r, 3, tbl, "globalTid")?,
            correlation_id: cell_int(name, r, 4, tbl, "correlationId")?,
            name_id: cell_int(name, r, 5, tbl, "nameId")?,
        });
        if batch.len() == RUNTIME_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(RUNTIME_BATCH));
            if cancel.load(std::sync::atomic::Ordering::Relaxed)
                || tx.send(RuntimeBatch { chunk, chunk_bound, rows: full }).is_err()
            {
                gone = true; // the consumer is gone
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    if !gone && !batch.is_empty() {
        let _ = tx.send(RuntimeBatch { chunk, chunk_bound, rows: batch });
    }
    Ok((skips, if gone { None } else { st }))
}

/// The valid rows of `CUPTI_ACTIVITY_KIND_RUNTIME` (present, with [`cols::RUNTIME`]) sent in batches on `tx`,
/// the table split into rowid ranges read in parallel threads on their own read-only connections: batches
/// of different ranges arrive interleaved (a consumer whose result does not depend on the row order). The
/// checks and messages of [`Export::runtime_calls`]; the skipped intervals are returned, and the first error
/// in table order wins. It returns when every range is read, the consumer dropped its receiver, or `cancel`.
pub fn read_runtime_batches(
    src: &ScanSource,
    t: &super::TableInfo,
    threads: usize,
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: std::sync::mpsc::SyncSender<RuntimeBatch>,
) -> Result<(RowSkips, Option<TimedStats>)> {
    let jobs = super::fold::plan(src, &[t], threads)?;
    let tx = std::sync::Mutex::new(tx);
    let results = super::fold::run_jobs(&jobs, |i, j| {
        let tx = tx.lock().map_err(|_| Error::input("the runtime table reader panicked"))?.clone();
        read_runtime_chunk(src, t, (i, j.range), stats, cancel, &tx)
    });
    drop(tx);
    let mut skips = RowSkips::new();
    let mut parts = Vec::with_capacity(results.len());
    for r in results {
        let (sk, st) = r?;
        merge_skips(&mut skips, &sk);
        parts.push(st);
    }
    Ok((skips, if stats.is_some() { merge_stats(parts) } else { None }))
}

// ---- readers added for step-budget's device timelines (helper step)

/// A device row with what the device-timeline analysis of `step-budget` reads besides [`DeviceRow`]: the
/// kernel's `demangledName` (KERNEL only, required there), `streamId` and `graphNodeId` (when the table has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOp {
    pub row: DeviceRow,
    pub kind: DeviceKind,
    /// `StringIds` id of the kernel's demangled name (None for the other tables).
    pub name_id: Option<i64>,
    pub stream_id: Option<i64>,
    pub graph_node_id: Option<i64>,
}

impl Export {
    /// Every valid row of one device table as a [`DeviceOp`] (none when the table is absent); invalid
    /// intervals are counted in `skips`. KERNEL requires `demangledName` as well.
    pub fn device_ops(
        &self,
        kind: DeviceKind,
        skips: &mut RowSkips,
        mut f: impl FnMut(DeviceOp) -> Result<()>,
    ) -> Result<()> {
        let tbl = kind.table();
        let Some(t) = self.optional(tbl, &cols::DEVICE)? else { return Ok(()) };
        let name = if kind == DeviceKind::Kernel {
            self.require(tbl, &[cols::DEMANGLED_NAME])?;
            cols::DEMANGLED_NAME
        } else {
            "NULL"
        };
        let stream = if t.has_column(cols::STREAM_ID) { cols::STREAM_ID } else { "NULL" };
        let node = if t.has_column(cols::GRAPH_NODE_ID) { cols::GRAPH_NODE_ID } else { "NULL" };
        let mut c: Vec<&str> = cols::DEVICE.to_vec();
        c.extend([name, stream, node]);
        self.scan(tbl, &c).run("", |row| {
            let Some((start, end)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            else {
                return Ok(());
            };
            f(DeviceOp {
                row: DeviceRow {
                    start,
                    end,
                    global_pid: self.int_at(row, 3, tbl, "globalPid")?,
                    correlation_id: self.int_at(row, 4, tbl, "correlationId")?,
                    device_id: self.int_at(row, 5, tbl, "deviceId")?,
                },
                kind,
                name_id: self.int_at(row, 6, tbl, cols::DEMANGLED_NAME)?,
                stream_id: self.int_at(row, 7, tbl, cols::STREAM_ID)?,
                graph_node_id: self.int_at(row, 8, tbl, cols::GRAPH_NODE_ID)?,
            })
        })
    }
}
