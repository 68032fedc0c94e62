//! The streamed readers: one callback per row of NVTX, runtime, device and sync tables, invalid intervals
//! counted, plus the timestamp check of whole tables.

use super::*;

/// Which columns a scan reads: the first is `rowid` (NULL for a table without one).
pub(super) struct Scan<'a> {
    pub(super) ex: &'a Export,
    pub(super) table: &'static str,
    pub(super) cols: Vec<&'a str>,
}

impl Export {
    /// Stream `SELECT rowid, cols… FROM table [WHERE …]`; the table must be present with the columns.
    pub(super) fn scan<'a>(&'a self, table: &'static str, cols: &[&'a str]) -> Scan<'a> {
        Scan { ex: self, table, cols: cols.to_vec() }
    }

    /// A timed row's `(start, end)` when valid, else the reason counted in `skips`.
    pub(super) fn interval(
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
}

/// The SQL predicate of a valid interval.
pub(super) const VALID: &str = "start IS NOT NULL AND end IS NOT NULL AND end >= start";
pub(super) const VALID_K: &str = "k.start IS NOT NULL AND k.end IS NOT NULL AND k.end >= k.start";

impl Scan<'_> {
    /// Run the scan; `f` gets the row id (None when the table has none) and the row, whose column `i + 1` is
    /// `cols[i]`.
    pub(super) fn run(self, filter: &str, mut f: impl FnMut(&RawRow) -> Result<()>) -> Result<()> {
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

/// `(rowid, start, end)` of one row.
pub(super) type RowTimes = (Option<i64>, Option<i64>, Option<i64>);

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
    /// `String::from_utf8_lossy` of them). The parallel fold over `NVTX_EVENTS` (`fold.rs`) reads them in parallel.
    pub fn nvtx_events_ref(&self, types: &[i64], mut f: impl FnMut(NvtxRef<'_>) -> Result<()>) -> Result<()> {
        let t = self.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
        let name = self.name();
        self.scan(schema::NVTX_EVENTS, &nvtx_columns(t))
            .run(&nvtx_types_condition(types), |row| f(nvtx_ref(&name, row)?))
    }
}

/// The columns of an NVTX row, in [`nvtx_ref`]'s order (`domainId` as NULL when the table has none).
pub(crate) fn nvtx_columns(t: &crate::export::TableInfo) -> [&'static str; 7] {
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
