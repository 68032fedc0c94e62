//! Where parallel scans read: [`ScanSource`] (a URI to open more read-only connections on), thread counts and
//! rowid chunks.

use super::*;

/// At this many rows in all the tables asked for, the scans run in parallel threads.
pub(super) const PARALLEL_ROWS: usize = 200_000;
/// A table of at least this many rows is split into rowid ranges scanned in parallel.
pub(crate) const CHUNK_ROWS: usize = 400_000;

/// Threads for parallel scans: the cores available (at least 1, at most 64), or `NSYSKIT_SCAN_THREADS` when it
/// is set to a number from 1 to 64 (a shared machine's cap; a benchmark's way to see a 16-core host's parts,
/// hence its peak memory, on fewer cores).
pub fn scan_threads() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let set = std::env::var("NSYSKIT_SCAN_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok());
        match set {
            Some(n @ 1..=64) => n,
            _ => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 64),
        }
    })
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

/// How to open more read-only connections to an export from other threads ([`Export::source`]): the URI and
/// flags of [`Export::open`], and the file's name for messages. `Send`, unlike the export's connection.
#[derive(Debug, Clone)]
pub struct ScanSource {
    pub(super) uri: String,
    pub(super) name: String,
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
        .map_err(|e| {
            Error::input(format!("{name}: cannot open as SQLite: {}", crate::export::describe_sql_error(&e)))
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(2))
            .map_err(|e| Error::input(format!("{name}: cannot configure read-only access: {e}")))?;
        // a scan reads each page once: a small page cache (512 KiB, not 2 MiB) per parallel reader
        conn.execute_batch("PRAGMA query_only = 1; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -512;").map_err(
            |e| {
                Error::input(format!(
                    "{name}: cannot configure read-only access: {}",
                    crate::export::describe_sql_error(&e)
                ))
            },
        )?;
        Ok(conn)
    }
    /// The file's name for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// An SQLite error met while reading `what`, as [`Export::sql_err`] words it.
    pub fn sql_err(&self, what: &str, e: rusqlite::Error) -> Error {
        Error::input(format!("{}: while reading {what}: {}", self.name, crate::export::describe_sql_error(&e)))
    }
}

// ---- parallel reads over rowid ranges, each on its own connection (`export::fold` plans and folds them)

/// One rowid range of one of the tables of a fold (`table` indexes the caller's list).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job {
    pub table: usize,
    pub range: Option<(i64, i64)>,
}

/// `f(index, job)` of every job, each in its own thread; the results in job order.
pub(crate) fn run_jobs<T: Send>(jobs: &[Job], f: impl Fn(usize, Job) -> Result<T> + Sync) -> Vec<Result<T>> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs.iter().enumerate().map(|(i, &j)| s.spawn(move || f(i, j))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::input("a table scan thread panicked"))))
            .collect()
    })
}

/// Step through `SELECT rowid, <list> FROM table [WHERE rowid in range]` on a new connection of `src`: `f`
/// gets the row id (None for a table without one) and the row (column `i + 1` is the i-th of `list`), and
/// returns false to stop early. `logical` names the table in messages.
pub(crate) fn for_each_in_range(
    src: &ScanSource,
    t: &crate::export::TableInfo,
    logical: &str,
    list: &str,
    range: Option<(i64, i64)>,
    f: impl FnMut(&RawRow) -> Result<bool>,
) -> Result<()> {
    for_each_in_range_where(src, t, logical, list, range, None, f)
}

/// [`for_each_in_range`] of the rows that also satisfy `cond` (an SQL condition over the table's columns).
pub(crate) fn for_each_in_range_where(
    src: &ScanSource,
    t: &crate::export::TableInfo,
    logical: &str,
    list: &str,
    range: Option<(i64, i64)>,
    cond: Option<&str>,
    mut f: impl FnMut(&RawRow) -> Result<bool>,
) -> Result<()> {
    let conn = src.open()?;
    let conds: Vec<String> =
        range.map(|(a, b)| format!("rowid >= {a} AND rowid < {b}")).into_iter().chain(cond.map(String::from)).collect();
    let filter = if conds.is_empty() { String::new() } else { format!(" WHERE {}", conds.join(" AND ")) };
    let mut q = match RawQuery::prepare(&conn, &format!("SELECT rowid, {list} FROM \"{}\"{filter}", t.name)) {
        Ok(q) => q,
        Err(e) if range.is_some() => return Err(src.sql_err(logical, e)),
        Err(_) => {
            let filter = cond.map(|c| format!(" WHERE {c}")).unwrap_or_default();
            RawQuery::prepare(&conn, &format!("SELECT NULL, {list} FROM \"{}\"{filter}", t.name))
                .map_err(|e| src.sql_err(logical, e))?
        }
    };
    while let Some(r) = q.next().map_err(|e| src.sql_err(logical, e))? {
        if !f(&r)? {
            break;
        }
    }
    Ok(())
}

/// The first error in job order, else the values in job order.
pub(crate) fn in_order<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    results.into_iter().collect()
}
