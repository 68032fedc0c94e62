//! Typed cells: integer and text columns checked for their type, timestamps checked for being possible, and
//! the messages naming the file, table, column and row.

use super::*;

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

    pub(super) fn check_ts(&self, table: &str, col: &str, rowid: Option<i64>, v: Option<i64>) -> Result<Option<i64>> {
        match v {
            Some(t) if !possible_ts(t) => Err(impossible_timestamp(&self.name(), table, col, rowid, t)),
            _ => Ok(v),
        }
    }

    /// [`Export::check_ts`] of a cell of `row`, whose id is read only when the timestamp is refused.
    pub(super) fn check_row_ts(&self, table: &str, col: &str, row: &RawRow, v: Option<i64>) -> Result<Option<i64>> {
        match v {
            Some(t) if !possible_ts(t) => self.check_ts(table, col, row.rowid(), v),
            _ => Ok(v),
        }
    }
}

pub(super) fn int_cell(v: IntCell) -> std::result::Result<Option<i64>, ()> {
    match v {
        IntCell::Int(i) => Ok(Some(i)),
        IntCell::Null => Ok(None),
        IntCell::Other(_) => Err(()),
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
pub(super) fn not_integer(name: &str, table: &str, col: &str, t: &str) -> Error {
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
pub(crate) fn possible_ts(t: i64) -> bool {
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
pub(super) fn impossible_timestamp(name: &str, table: &str, col: &str, rowid: Option<i64>, t: i64) -> Error {
    Error::input(format!(
        "{name}: {table}.{col} = {t} ns on row {}: an impossible timestamp (beyond ±2^53 ns, about 104 days from the session start); the export is damaged",
        rowid.map(|r| format!("id {r}")).unwrap_or_else(|| "?".into())
    ))
}

/// The `(start, end)` of columns 1 and 2 of a timed row when valid; else the reason is counted in `skips`.
/// The checks of [`crate::export::Export`]'s streamed readers, in their order: both types, then both timestamps.
pub(crate) fn valid_interval(
    src: &ScanSource,
    tbl: &str,
    r: &RawRow,
    skips: &mut RowSkips,
) -> Result<Option<(i64, i64)>> {
    row_times(src, tbl, r, skips).map(|(_, valid)| valid)
}

/// The `start` and `end` cells of a row as read (integers or NULL).
pub(crate) type TimeCells = (Option<i64>, Option<i64>);

/// [`valid_interval`], and the two cells as read (integers or NULL: anything else is an error), for a caller that
/// also counts the row in [`TimedStats`] (not read twice).
pub(crate) fn row_times(
    src: &ScanSource,
    tbl: &str,
    r: &RawRow,
    skips: &mut RowSkips,
) -> Result<(TimeCells, Option<(i64, i64)>)> {
    let name = src.name();
    let (start, end) = (cell_int(name, r, 1, tbl, "start")?, cell_int(name, r, 2, tbl, "end")?);
    let start = named_ts(name, tbl, "start", r, start)?;
    let end = named_ts(name, tbl, "end", r, end)?;
    match (start, end) {
        (Some(s), Some(e)) if e >= s => Ok(((start, end), Some((s, e)))),
        (st, en) => {
            let k = skips.entry(tbl.to_string()).or_default();
            match (st, en) {
                (None, _) => k.null_start += 1,
                (_, None) => k.null_end += 1,
                _ => k.inverted += 1,
            }
            Ok(((start, end), None))
        }
    }
}
