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

fn type_name(v: ValueRef) -> &'static str {
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
    pub(crate) fn int_at(&self, row: &rusqlite::Row, i: usize, table: &str, col: &str) -> Result<Option<i64>> {
        match row.get_ref(i).map_err(self.sql_err(table))? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(v) => Ok(Some(v)),
            other => Err(Error::input(format!(
                "{}: schema mismatch: {table}.{col} holds a {} value, not the INTEGER nsys writes",
                self.name(),
                type_name(other)
            ))),
        }
    }

    /// Column `i` as optional text; any other type is an input error naming table and column.
    pub(crate) fn text_at(&self, row: &rusqlite::Row, i: usize, table: &str, col: &str) -> Result<Option<String>> {
        match row.get_ref(i).map_err(self.sql_err(table))? {
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
        if let Some(t) = v {
            if !(-MAX_TIMESTAMP_NS..=MAX_TIMESTAMP_NS).contains(&t) {
                return Err(Error::input(format!(
                    "{}: {table}.{col} = {t} ns on row {}: an impossible timestamp (beyond ±2^53 ns, about 104 days from the session start); the export is damaged",
                    self.name(),
                    rowid.map(|r| format!("id {r}")).unwrap_or_else(|| "?".into())
                )));
            }
        }
        Ok(v)
    }

    /// A timed row's `(start, end)` when valid, else the reason counted in `skips`.
    fn interval(
        &self,
        table: &str,
        rowid: Option<i64>,
        start: Option<i64>,
        end: Option<i64>,
        skips: &mut RowSkips,
    ) -> Result<Option<(i64, i64)>> {
        let start = self.check_ts(table, "start", rowid, start)?;
        let end = self.check_ts(table, "end", rowid, end)?;
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
        let t = self.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
        let domain = if t.has_column(cols::DOMAIN_ID) { cols::DOMAIN_ID } else { "NULL" };
        let tbl = schema::NVTX_EVENTS;
        let list = types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        self.scan(tbl, &["start", "end", "eventType", "text", "textId", "globalTid", domain]).run(
            &format!("eventType IN ({list})"),
            |rowid, row| {
                let start = self.check_ts(tbl, "start", rowid, self.int_at(row, 1, tbl, "start")?)?;
                let end = self.check_ts(tbl, "end", rowid, self.int_at(row, 2, tbl, "end")?)?;
                f(NvtxRow {
                    start,
                    end,
                    event_type: self.int_at(row, 3, tbl, "eventType")?.unwrap_or(0),
                    text: self.text_at(row, 4, tbl, "text")?,
                    text_id: self.int_at(row, 5, tbl, "textId")?,
                    global_tid: self.int_at(row, 6, tbl, "globalTid")?,
                    domain_id: self.int_at(row, 7, tbl, cols::DOMAIN_ID)?.filter(|&d| d != 0),
                })
            },
        )
    }

    /// Every valid `CUPTI_ACTIVITY_KIND_RUNTIME` row (none when the table is absent); invalid intervals are
    /// counted in `skips`.
    pub fn runtime_calls(&self, skips: &mut RowSkips, mut f: impl FnMut(RuntimeRow) -> Result<()>) -> Result<()> {
        let tbl = schema::RUNTIME;
        if self.optional(tbl, &cols::RUNTIME)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::RUNTIME).run("", |rowid, row| {
            let Some((start, end)) =
                self.interval(tbl, rowid, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
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
        self.scan(tbl, &cols::DEVICE).run("", |rowid, row| {
            let Some((start, end)) =
                self.interval(tbl, rowid, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
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
        self.scan(tbl, &["start", "end"]).run("", |rowid, row| {
            if let Some((s, e)) =
                self.interval(tbl, rowid, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
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
        self.scan(tbl, &cols::SYNCHRONIZATION).run("", |rowid, row| {
            let Some((start, end)) =
                self.interval(tbl, rowid, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
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
        for &tbl in tables {
            let Some(t) = self.optional(tbl, &["start", "end"])? else { continue };
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
        self.scan(tbl, &["globalPid"]).run("", |_, row| {
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
        self.scan(tbl, &cols::THREAD_NAMES).run("", |_, row| {
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
        self.scan(tbl, &cols::STRING_IDS).run("", |_, row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if let ValueRef::Text(v) = row.get_ref(2).map_err(self.sql_err(tbl))? {
                f(id, v);
            }
            Ok(())
        })
    }

    /// The `StringIds` values of `ids` (one scan; a non-TEXT value of a wanted id is an input error).
    pub fn strings_for(&self, ids: &HashSet<i64>) -> Result<HashMap<i64, String>> {
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let tbl = schema::STRING_IDS;
        self.require(tbl, &cols::STRING_IDS)?;
        self.scan(tbl, &cols::STRING_IDS).run("", |_, row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if ids.contains(&id) {
                if let Some(v) = self.text_at(row, 2, tbl, "value")? {
                    out.insert(id, v);
                }
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
                    v.push((*c, r.get::<_, Option<String>>(i)?));
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
        let sql = format!("SELECT max(end) FROM \"{}\" WHERE {VALID}", t.name);
        self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))
    }

    /// Σ `end - start` of the valid rows of a timed table (0 when absent).
    pub fn sum_durations(&self, table: &'static str) -> Result<i64> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(0) };
        let sql = format!("SELECT sum(end - start) FROM \"{}\" WHERE {VALID}", t.name);
        let s: Option<i64> = self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))?;
        Ok(s.unwrap_or(0))
    }

    /// Distinct `globalTid` values of the runtime calls (0 when absent).
    pub fn runtime_thread_count(&self) -> Result<i64> {
        let Some(t) = self.optional(schema::RUNTIME, &["globalTid"])? else { return Ok(0) };
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
        let sql = format!(
            "SELECT count(*), coalesce(sum(n.start > ?1), 0), coalesce(max(max(n.start, coalesce(n.end, n.start))), 0)
             FROM \"{}\" n WHERE n.eventType IN ({}, {}, {})
             AND n.globalTid IN (SELECT DISTINCT globalTid FROM \"{}\")",
            nv.name,
            schema::nvtx::MARK,
            schema::nvtx::PUSH_POP,
            schema::nvtx::START_END,
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

    /// Number of NVTX range rows (push/pop and start/end; 0 without NVTX_EVENTS).
    pub fn nvtx_range_rows(&self) -> Result<Option<i64>> {
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["eventType", "text"])? else { return Ok(None) };
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
        let v = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|r| r.collect())
            .map_err(self.sql_err(schema::NVTX_EVENTS))?;
        Ok(v)
    }
}

/// The SQL predicate of a valid interval.
const VALID: &str = "start IS NOT NULL AND end IS NOT NULL AND end >= start";
const VALID_K: &str = "k.start IS NOT NULL AND k.end IS NOT NULL AND k.end >= k.start";

impl Scan<'_> {
    /// Run the scan; `f` gets the row id (None when the table has none) and the row, whose column `i + 1` is
    /// `cols[i]`.
    fn run(self, filter: &str, mut f: impl FnMut(Option<i64>, &rusqlite::Row) -> Result<()>) -> Result<()> {
        let ex = self.ex;
        let t = ex.table(self.table).ok_or_else(|| {
            Error::input(format!("{}: schema mismatch: required table {} is missing", ex.name(), self.table))
        })?;
        let where_ = if filter.is_empty() { String::new() } else { format!(" WHERE {filter}") };
        let list = self.cols.join(", ");
        // rowid names the row in messages; a view or WITHOUT ROWID table has none
        let with_rowid = format!("SELECT rowid, {list} FROM \"{}\"{where_}", t.name);
        let mut stmt = match ex.conn().prepare(&with_rowid) {
            Ok(s) => s,
            Err(_) => ex
                .conn()
                .prepare(&format!("SELECT NULL, {list} FROM \"{}\"{where_}", t.name))
                .map_err(ex.sql_err(self.table))?,
        };
        let mut rows = stmt.query([]).map_err(ex.sql_err(self.table))?;
        while let Some(row) = rows.next().map_err(ex.sql_err(self.table))? {
            let rowid = match row.get_ref(0).map_err(ex.sql_err(self.table))? {
                ValueRef::Integer(v) => Some(v),
                _ => None,
            };
            f(rowid, row)?;
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
    /// error naming the table, column and row id. For tools that aggregate in SQL (the streamed readers check
    /// every row they deliver).
    pub fn check_timestamps(&self, tables: &[&'static str]) -> Result<()> {
        for &tbl in tables {
            let Some(t) = self.optional(tbl, &["start", "end"])? else { continue };
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
        self.scan(tbl, &c).run("", |rowid, row| {
            let Some((start, end)) =
                self.interval(tbl, rowid, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
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
