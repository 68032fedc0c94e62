//! A minimal statement reader over SQLite's C API, for the scans that read every row of the large tables
//! (issue #19). Through rusqlite, one integer cell costs a column-count check, two locked C calls
//! (`sqlite3_column_type`, `sqlite3_column_int64`) and a `ValueRef` round trip: as much as SQLite's own
//! virtual machine spends decoding the row. Here a cell is one `sqlite3_column_value` and two unlocked reads
//! of that value, and rows are borrowed, never copied.
//!
//! Safety: a [`RawQuery`] owns its prepared statement (finalized on drop) and borrows its connection, so the
//! connection outlives it; a [`RawRow`] borrows the query mutably, so no value is read after the next step;
//! column indexes are checked against the statement's column count. Every connection is used by one thread
//! (each scan thread opens its own), which is what SQLite asks of the unprotected values read here.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;

use rusqlite::ffi;
use rusqlite::types::ValueRef;

/// A prepared `SELECT`, stepped row by row.
pub(crate) struct RawQuery<'c> {
    stmt: *mut ffi::sqlite3_stmt,
    db: *mut ffi::sqlite3,
    ncols: usize,
    _conn: PhantomData<&'c rusqlite::Connection>,
}

/// The current row of a [`RawQuery`].
pub(crate) struct RawRow<'q> {
    stmt: *mut ffi::sqlite3_stmt,
    ncols: usize,
    _q: PhantomData<&'q mut ()>,
}

/// The error SQLite reports for `rc` on `db`, as rusqlite builds it (code, extended code, message).
fn error_of(db: *mut ffi::sqlite3, rc: std::os::raw::c_int) -> rusqlite::Error {
    // SAFETY: `db` is the open connection the statement belongs to; the message is copied at once.
    let msg = unsafe {
        let p = ffi::sqlite3_errmsg(db);
        (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), msg)
}

impl<'c> RawQuery<'c> {
    /// Prepare `sql` (one statement) on `conn`.
    pub(crate) fn prepare(conn: &'c rusqlite::Connection, sql: &str) -> rusqlite::Result<RawQuery<'c>> {
        let c = CString::new(sql).map_err(rusqlite::Error::NulError)?;
        // SAFETY: the handle is valid while `conn` is borrowed (`'c`); the statement pointer is checked below.
        unsafe {
            let db = conn.handle();
            let mut stmt = std::ptr::null_mut();
            let rc = ffi::sqlite3_prepare_v2(db, c.as_ptr(), -1, &mut stmt, std::ptr::null_mut());
            if rc != ffi::SQLITE_OK {
                return Err(error_of(db, rc));
            }
            if stmt.is_null() {
                return Err(rusqlite::Error::InvalidQuery);
            }
            let ncols = ffi::sqlite3_column_count(stmt).max(0) as usize;
            Ok(RawQuery { stmt, db, ncols, _conn: PhantomData })
        }
    }

    /// Step to the next row; None at the end.
    #[inline]
    pub(crate) fn next(&mut self) -> rusqlite::Result<Option<RawRow<'_>>> {
        // SAFETY: `stmt` is a live prepared statement owned by `self`.
        match unsafe { ffi::sqlite3_step(self.stmt) } {
            ffi::SQLITE_ROW => Ok(Some(RawRow { stmt: self.stmt, ncols: self.ncols, _q: PhantomData })),
            ffi::SQLITE_DONE => Ok(None),
            rc => Err(error_of(self.db, rc)),
        }
    }
}

impl Drop for RawQuery<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, here; no row outlives the query.
        unsafe {
            ffi::sqlite3_finalize(self.stmt);
        }
    }
}

/// A cell read as an integer: its value, NULL, or the name of its other storage class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntCell {
    Int(i64),
    Null,
    Other(&'static str),
}

impl RawRow<'_> {
    #[inline]
    fn value(&self, i: usize) -> *mut ffi::sqlite3_value {
        assert!(i < self.ncols, "column {i} of a {}-column statement", self.ncols);
        // SAFETY: the statement is on a row (`RawRow` exists only then) and `i` is in range.
        unsafe { ffi::sqlite3_column_value(self.stmt, i as std::os::raw::c_int) }
    }

    /// The row id: column 0, which every scan selects first (NULL where the table has none: a view or a
    /// WITHOUT ROWID table). Read only where a message names the row, not for every row.
    #[cold]
    pub(crate) fn rowid(&self) -> Option<i64> {
        match self.int(0) {
            IntCell::Int(v) => Some(v),
            _ => None,
        }
    }

    /// Column `i` as an integer cell.
    #[inline]
    pub(crate) fn int(&self, i: usize) -> IntCell {
        let v = self.value(i);
        // SAFETY: `v` is the current row's value of column `i`, read before the next step.
        unsafe {
            match ffi::sqlite3_value_type(v) {
                ffi::SQLITE_INTEGER => IntCell::Int(ffi::sqlite3_value_int64(v)),
                ffi::SQLITE_NULL => IntCell::Null,
                ffi::SQLITE_FLOAT => IntCell::Other("REAL"),
                ffi::SQLITE_TEXT => IntCell::Other("TEXT"),
                _ => IntCell::Other("BLOB"),
            }
        }
    }

    /// Column `i` as rusqlite's borrowed value (any storage class).
    pub(crate) fn get_ref(&self, i: usize) -> rusqlite::Result<ValueRef<'_>> {
        let v = self.value(i);
        // SAFETY: as in `int`; text and blob pointers are read before their length, as SQLite asks, and stay
        // valid until the next step (the borrow of `self`).
        unsafe {
            Ok(match ffi::sqlite3_value_type(v) {
                ffi::SQLITE_INTEGER => ValueRef::Integer(ffi::sqlite3_value_int64(v)),
                ffi::SQLITE_NULL => ValueRef::Null,
                ffi::SQLITE_FLOAT => ValueRef::Real(ffi::sqlite3_value_double(v)),
                ffi::SQLITE_TEXT => {
                    let p = ffi::sqlite3_value_text(v);
                    let n = ffi::sqlite3_value_bytes(v).max(0) as usize;
                    ValueRef::Text(if p.is_null() || n == 0 { &[] } else { std::slice::from_raw_parts(p, n) })
                }
                _ => {
                    let p = ffi::sqlite3_value_blob(v) as *const u8;
                    let n = ffi::sqlite3_value_bytes(v).max(0) as usize;
                    ValueRef::Blob(if p.is_null() || n == 0 { &[] } else { std::slice::from_raw_parts(p, n) })
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_and_errors() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t(a, b); INSERT INTO t VALUES (1, 'x'), (NULL, 2.5), (-7, X'0102');").unwrap();
        let mut q = RawQuery::prepare(&c, "SELECT a, b FROM t ORDER BY rowid").unwrap();
        let mut got = Vec::new();
        while let Some(r) = q.next().unwrap() {
            got.push((r.int(0), r.int(1), format!("{:?}", r.get_ref(1).unwrap())));
        }
        assert_eq!(got[0].0, IntCell::Int(1));
        assert_eq!(got[0].1, IntCell::Other("TEXT"));
        assert_eq!(got[0].2, "Text([120])");
        assert_eq!((got[1].0, got[1].1), (IntCell::Null, IntCell::Other("REAL")));
        assert_eq!((got[2].0, got[2].1), (IntCell::Int(-7), IntCell::Other("BLOB")));
        assert_eq!(got[2].2, "Blob([1, 2])");
        let e = RawQuery::prepare(&c, "SELECT nope FROM t").err().unwrap();
        assert!(e.to_string().contains("no such column: nope"), "{e}");
    }
}
