//! The nsys export layer: everything nsyskit knows about the SQLite file written by `nsys export --type
//! sqlite`. No other module writes SQL over an nsys table.
//!
//! - [`schema`]: table and column names, NVTX event type codes, the differences between nsys versions;
//! - [`Export`]: a read-only connection with introspection (a missing table or column is an input error naming
//!   the file, table and column), string-id lookups and typed, streamed row readers ([`rows`]);
//! - [`graph`]: the CUDA graph facts (trace mode, node-level rows, graph launches), one definition each;
//! - [`capture`]: an `.nsys-rep` exported into a temporary folder, standard input copied into one, and the one
//!   `nsys export` command line.
//!
//! The evidence file is never modified and nothing is ever created next to it (no `-wal`, `-shm` or
//! `-journal`), and a writer's uncommitted data is never read ([`Export::open`]):
//!
//! - a rollback-journal export (what nsys writes) is opened `mode=ro` with SQLite's ordinary locking: a live
//!   writer's uncommitted changes stay invisible (its exclusive lock makes the read wait, then fail with exit 2
//!   naming the writer); a hot journal left by a crashed writer is never rolled back (that would change the
//!   evidence): exit 2 saying so;
//! - a WAL-mode export with no `-wal`/`-shm` file beside it holds all its content in the main file and is read
//!   `immutable=1` (no side file can be created); with a `-wal` or `-shm` beside it another program has it
//!   open (or did not close it): exit 2, because reading it would create or change those files.
//!
//! Nothing here creates a table, index, view or temp table in it (temporary b-trees are kept in memory).

pub mod bulk;
pub mod capture;
pub mod fold;
pub mod graph;
pub mod nvtx;
pub mod osrt;
mod raw;
pub mod rows;
pub mod samples;
pub mod schema;
pub mod window;

pub use capture::{
    capture_info, default_nsys, nsys_export_args, open_capture, run_nsys_export, CaptureInfo, CaptureSource,
    OpenedCapture, StdinCopy, STDIN_NAME,
};
pub use graph::{GraphFacts, GraphTraceMode};
pub use nvtx::NvtxRecorded;
pub use rows::{
    describe_skips, merge_skips, session_start_utc_ns, DeviceRow, IntervalSkips, NvtxRow, RowSkips, RuntimeRow, SyncRow,
};
pub use schema::DeviceKind;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::contract::{Error, Result};

/// `PID(x) = (x >> 24) & 0xFFFFFF` of a packed nsys `globalTid`/`globalPid`.
pub fn pid_of(global_tid: i64) -> i64 {
    (global_tid >> 24) & 0xFF_FFFF
}
/// `TID(x) = x & 0xFFFFFF`.
pub fn tid_of(global_tid: i64) -> i64 {
    global_tid & 0xFF_FFFF
}
/// `NS(x) = x & !0xFFFFFF`: the process key, equal to the process's `globalPid`.
pub fn ns_of(global_tid: i64) -> i64 {
    global_tid & !0xFF_FFFF
}

/// A table of the export: its name as stored and its columns.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    pub columns: Vec<String>,
}

impl TableInfo {
    pub fn has_column(&self, col: &str) -> bool {
        self.columns.iter().any(|c| c.eq_ignore_ascii_case(col))
    }
}

/// An open, read-only nsys SQLite export.
pub struct Export {
    conn: Connection,
    path: PathBuf,
    tables: HashMap<String, TableInfo>,
    /// The URI it was opened with: [`Export::reopen`] opens more read-only connections for parallel scans.
    uri: String,
    /// One scan's facts per timed table ([`rows::TimedStats`]), computed once (perf helper, issue #19).
    stats: rows::StatsCache,
    /// Informational values read lossily ([`Export::lossy_reads`]).
    lossy: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("path", &self.path).finish()
    }
}

/// The first 16 bytes of every SQLite database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

impl Export {
    /// Open an export read-only. Not a file, not SQLite, an unreadable or corrupt schema: input errors.
    pub fn open(path: &Path) -> Result<Export> {
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::input(format!("{name}: no such file")),
            _ => Error::input(format!("{name}: cannot read: {e}")),
        })?;
        if !meta.is_file() {
            return Err(Error::input(format!("{name}: not a regular file")));
        }
        let mut header = [0u8; 100];
        let n = {
            use std::io::Read;
            let mut f = std::fs::File::open(path).map_err(|e| Error::input(format!("{name}: cannot open: {e}")))?;
            let mut n = 0;
            while n < header.len() {
                match f.read(&mut header[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(Error::input(format!("{name}: cannot read: {e}"))),
                }
            }
            n
        };
        if n < 16 || &header[..16] != SQLITE_MAGIC {
            return Err(Error::input(format!(
                "{name}: not an SQLite file (no 'SQLite format 3' header); give the .sqlite written by `nsys export --type sqlite`, or the .nsys-rep"
            )));
        }
        if n < 100 {
            return Err(Error::input(format!("{name}: truncated SQLite file ({n} bytes, shorter than its header)")));
        }
        // bytes 18/19: file format write/read version, 2 = WAL
        let wal = header[18] == 2 || header[19] == 2;
        let page_size = match u16::from_be_bytes([header[16], header[17]]) {
            1 => 65536u64,
            p => p as u64,
        };
        let page_count = u32::from_be_bytes([header[28], header[29], header[30], header[31]]) as u64;
        if page_size >= 512 && page_count > 0 && meta.len() < page_size * page_count {
            return Err(Error::input(format!(
                "{name}: truncated SQLite file: the header declares {page_count} pages of {page_size} bytes ({} bytes) but the file has {} bytes",
                page_size * page_count,
                meta.len()
            )));
        }
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if wal {
            let side: Vec<String> = ["-wal", "-shm"]
                .iter()
                .map(|s| {
                    let mut p = abs.clone().into_os_string();
                    p.push(s);
                    PathBuf::from(p)
                })
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .map(|p| p.display().to_string())
                .collect();
            if !side.is_empty() {
                return Err(Error::input(format!(
                    "{name}: a WAL-mode SQLite file with {} beside it: another program has it open (a live writer) or did not close it, and reading it would create or change files next to the evidence; nothing was read. Close the writer, or checkpoint a copy (`sqlite3 COPY 'PRAGMA wal_checkpoint(TRUNCATE)'`) and give that",
                    side.join(" and ")
                )));
            }
        }
        // WAL without side files: everything is in the main file, and `immutable` keeps SQLite from creating
        // -wal/-shm. Rollback journal: ordinary locking keeps a live writer's uncommitted pages out of the read.
        let uri = format!("file:{}?mode=ro{}", uri_escape(&abs), if wal { "&immutable=1" } else { "" });
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::input(format!("{name}: cannot open as SQLite: {}", describe_sql_error(&e))))?;
        // a writer committing holds its lock for milliseconds: wait a little, then say who holds the file
        conn.busy_timeout(std::time::Duration::from_secs(2))
            .map_err(|e| Error::input(format!("{name}: cannot configure read-only access: {e}")))?;
        // Temporary b-trees (sorts) in memory, never in a file next to the evidence.
        conn.execute_batch("PRAGMA query_only = 1; PRAGMA temp_store = MEMORY;").map_err(|e| {
            Error::input(format!("{name}: cannot configure read-only access: {}", describe_sql_error(&e)))
        })?;
        let mut tables = HashMap::new();
        {
            let mut stmt =
                conn.prepare("SELECT name FROM sqlite_master WHERE type IN ('table','view')").map_err(|e| {
                    Error::input(format!("{name}: not a readable SQLite database: {}", describe_sql_error(&e)))
                })?;
            let names: Vec<String> =
                stmt.query_map([], |r| r.get::<_, String>(0)).and_then(|rows| rows.collect()).map_err(|e| {
                    Error::input(format!("{name}: not a readable SQLite database: {}", describe_sql_error(&e)))
                })?;
            for t in names {
                let cols = table_columns(&conn, &t)
                    .map_err(|e| Error::input(format!("{name}: table {t}: {}", describe_sql_error(&e))))?;
                tables.insert(t.to_ascii_lowercase(), TableInfo { name: t, columns: cols });
            }
        }
        Ok(Export { conn, path: path.to_path_buf(), tables, uri, stats: Default::default(), lossy: Default::default() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The file's name for messages.
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }
    pub fn conn(&self) -> &Connection {
        &self.conn
    }
    /// The table, matched case-insensitively as SQLite does.
    pub fn table(&self, name: &str) -> Option<&TableInfo> {
        self.tables.get(&name.to_ascii_lowercase())
    }
    pub fn has_table(&self, name: &str) -> bool {
        self.table(name).is_some()
    }

    /// A required table with required columns; the error names file, table and column.
    pub fn require(&self, table: &str, columns: &[&str]) -> Result<&TableInfo> {
        let t = self.table(table).ok_or_else(|| Error::input(self.missing_table_message(table)))?;
        self.check_columns(t, columns)?;
        Ok(t)
    }

    /// What a missing required table means. NVTX_EVENTS is absent from a capture that recorded no NVTX event
    /// (nsys creates tables lazily): [`NvtxRecorded::explain_missing_table`] says which case it is.
    fn missing_table_message(&self, table: &str) -> String {
        let generic = format!("{}: schema mismatch: required table {table} is missing", self.name());
        if !table.eq_ignore_ascii_case(schema::NVTX_EVENTS) {
            return generic;
        }
        self.nvtx_recorded().map(|r| r.explain_missing_table(&self.name())).unwrap_or(generic)
    }

    /// An optional table: None when absent; when present, every named column must exist.
    pub fn optional(&self, table: &str, columns: &[&str]) -> Result<Option<&TableInfo>> {
        match self.table(table) {
            None => Ok(None),
            Some(t) => {
                self.check_columns(t, columns)?;
                Ok(Some(t))
            }
        }
    }

    fn check_columns(&self, t: &TableInfo, columns: &[&str]) -> Result<()> {
        for c in columns {
            if !t.has_column(c) {
                return Err(Error::input(format!(
                    "{}: schema mismatch: table {} has no column {c} (columns: {})",
                    self.name(),
                    t.name,
                    t.columns.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Map an SQLite error met while reading `what` to an input error naming the file.
    pub fn sql_err(&self, what: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
        let what = what.to_string();
        move |e| Error::input(format!("{}: while reading {what}: {}", self.name(), describe_sql_error(&e)))
    }

    /// `(name, value)` rows of a `name, value` table such as META_DATA_EXPORT or META_DATA_CAPTURE; empty when
    /// the table is absent. These tables are informational: bytes that are not UTF-8 (nsys 2021.3–2022.4 store
    /// a protobuf blob as the TEXT value `GpuInfo` of TARGET_INFO_SYSTEM_ENV) are decoded lossily and recorded
    /// ([`Export::lossy_reads`]), never an error.
    pub fn name_values(&self, table: &str) -> Result<Vec<(String, Option<String>)>> {
        let Some(t) = self.optional(table, &["name", "value"])? else { return Ok(Vec::new()) };
        let sql = format!("SELECT name, CAST(value AS TEXT) FROM \"{}\"", t.name);
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql_err(table))?;
        let mut lossy = Vec::new();
        let rows = stmt
            .query_map([], |r| {
                let (name, bad_name) = text_lossy(r.get_ref(0)?);
                let (value, bad_value) = text_lossy(r.get_ref(1)?);
                if bad_name || bad_value {
                    lossy.push(name.clone().unwrap_or_default());
                }
                Ok((name.unwrap_or_default(), value))
            })
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(self.sql_err(table))?;
        drop(stmt);
        if !lossy.is_empty() {
            self.note_lossy(&t.name, "value", &lossy);
        }
        Ok(rows)
    }

    /// Record that `table.column` held bytes that are not UTF-8, read lossily (U+FFFD) in the rows named.
    pub(crate) fn note_lossy(&self, table: &str, column: &str, names: &[String]) {
        let mut shown: Vec<&str> = names.iter().map(String::as_str).take(5).collect();
        shown.dedup();
        let line = format!(
            "{table}.{column}: {} value(s) not UTF-8, decoded lossily ({}{})",
            names.len(),
            shown.join(", "),
            if names.len() > 5 { ", …" } else { "" }
        );
        if let Ok(mut l) = self.lossy.lock() {
            if !l.contains(&line) {
                l.push(line);
            }
        }
    }

    /// Informational values that were not UTF-8 and were decoded lossily, one line per table and column (empty
    /// when every value read was UTF-8).
    pub fn lossy_reads(&self) -> Vec<String> {
        self.lossy.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Refuse an export that holds no capture: every genuine export (nsys ≈2021.3 to 2026.2 seen) has a
    /// `TARGET_INFO_SESSION_START_TIME` row; an export that stopped part-way has tables and strings but not it
    /// (measured: nsys 2025.3.1 on a 2026.1 report writes ANALYSIS_FILE, ProcessStreams, StringIds and the NVTX
    /// payload schemas, and exits 1 with a protobuf "missing required fields" error).
    pub fn refuse_incomplete(&self) -> Result<()> {
        let has_rows = |t: &str| -> Result<bool> {
            match self.table(t) {
                None => Ok(false),
                Some(info) => self
                    .conn
                    .query_row(&format!("SELECT EXISTS (SELECT 1 FROM \"{}\")", info.name), [], |r| r.get::<_, bool>(0))
                    .map_err(self.sql_err(t)),
            }
        };
        // a capture: its session start, or any event it recorded (a small export made by hand for a test has
        // events but no session table)
        let t = schema::TARGET_INFO_SESSION_START_TIME;
        if has_rows(t)? || !has_rows(schema::STRING_IDS)? {
            // a file without strings is not what a failed nsys export leaves (the readers say what it lacks)
            return Ok(());
        }
        for e in schema::EVENT_TABLES {
            if has_rows(e)? {
                return Ok(());
            }
        }
        let mut names: Vec<&TableInfo> = self.tables.values().collect();
        names.sort_by(|a, b| a.name.cmp(&b.name));
        let mut with_rows = Vec::new();
        for info in names {
            if has_rows(&info.name)? {
                with_rows.push(info.name.clone());
            }
        }
        Err(Error::input(format!(
            "{}: an incomplete export: it holds no capture (no {t} row and no event; tables with rows: {}): the export stopped part-way (nsys exits with an error and leaves such a file, e.g. nsys 2025.3.1 on a report of a later release: \"missing required fields\"); export the report again with an nsys as new as the one that captured it",
            self.name(),
            if with_rows.is_empty() { "none".to_string() } else { with_rows.join(", ") }
        )))
    }

    /// What a reader of this export must be told about it beside its rows: the export-metadata table missing
    /// (the nsys version that wrote it is unknown), a window cut out of another export (`DERIVED_FROM` rows:
    /// the capture's duration and settings are the original's, the rows only the window's), informational
    /// values decoded lossily ([`Export::lossy_reads`]).
    pub fn caveats(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if self.export_meta_table().is_none() {
            out.push(format!(
                "no export-metadata table ({}): the nsys version that wrote this export is unknown (≈2021.3 exports have none)",
                schema::EXPORT_META_TABLES.join(" / ")
            ));
        }
        let meta = self.export_metadata()?;
        let get = |k: &str| meta.iter().find(|(n, _)| n == k).and_then(|(_, v)| v.clone());
        if let Some(from) = get("DERIVED_FROM") {
            out.push(format!(
                "a window cut out of another export ({}: DERIVED_FROM {from}{}{}): the rows cover only that window, while the capture's recorded duration and settings are the original's",
                self.export_meta_table().unwrap_or("export metadata"),
                get("DERIVED_WINDOW_NS").map(|w| format!(", DERIVED_WINDOW_NS {w}")).unwrap_or_default(),
                get("DERIVED_BY").map(|b| format!(", DERIVED_BY {b}")).unwrap_or_default()
            ));
        }
        out.extend(self.lossy_reads());
        Ok(out)
    }

    /// The export-metadata table: `META_DATA_EXPORT` (nsys 2022.4 and later), `EXPORT_META_DATA` (nsys 2022.1,
    /// schema 2.9.1); None when the export has none (≈2021.3 exports have no export-metadata table).
    pub fn export_meta_table(&self) -> Option<&'static str> {
        schema::EXPORT_META_TABLES.into_iter().find(|t| self.has_table(t))
    }

    /// The rows of the export-metadata table ([`Export::export_meta_table`]); empty when there is none.
    pub fn export_metadata(&self) -> Result<Vec<(String, Option<String>)>> {
        match self.export_meta_table() {
            Some(t) => self.name_values(t),
            None => Ok(Vec::new()),
        }
    }

    /// The nsys version that wrote the export (META_DATA_EXPORT `nsys_version`, else `EXPORT_...VERSION`).
    pub fn nsys_version(&self) -> Result<Option<String>> {
        let rows = self.export_metadata()?;
        for key in ["NSYS_VERSION", "nsys_version", "EXPORT_PROGRAM_VERSION"] {
            if let Some((_, v)) = rows.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) {
                return Ok(v.clone());
            }
        }
        Ok(rows.iter().find(|(n, _)| n.to_ascii_lowercase().contains("version")).and_then(|(_, v)| v.clone()))
    }

    /// The threads (`globalTid`) that made a CUDA runtime call (empty without a runtime table).
    pub fn runtime_thread_ids(&self) -> Result<crate::fx::FxSet<i64>> {
        let Some(t) = self.optional(schema::RUNTIME, &["globalTid"])? else { return Ok(Default::default()) };
        if let Some(ids) = self.with_stats(schema::RUNTIME, |s| s.thread_ids.clone())? {
            return Ok(ids);
        }
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT DISTINCT globalTid FROM \"{}\" WHERE globalTid IS NOT NULL", t.name))
            .map_err(self.sql_err(schema::RUNTIME))?;
        let ids = stmt
            .query_map([], |r| r.get::<_, i64>(0))
            .and_then(|rows| rows.collect())
            .map_err(self.sql_err(schema::RUNTIME))?;
        Ok(ids)
    }

    /// Count rows of a table (0 when absent).
    pub fn count_rows(&self, table: &str) -> Result<i64> {
        let Some(t) = self.table(table) else { return Ok(0) };
        if let Some(n) = self.known_stats(table, |s| s.rows) {
            return Ok(n);
        }
        let sql = format!("SELECT count(*) FROM \"{}\"", t.name);
        self.conn.query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))
    }
}

fn table_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let cols = stmt.query_map([table], |r| r.get::<_, String>(0))?.collect();
    cols
}

/// A TEXT (or BLOB) cell as text, bytes that are not UTF-8 replaced (U+FFFD); whether any was. Numbers are
/// written as SQLite would cast them; NULL is None.
pub(crate) fn text_lossy(v: rusqlite::types::ValueRef<'_>) -> (Option<String>, bool) {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => (None, false),
        ValueRef::Integer(i) => (Some(i.to_string()), false),
        ValueRef::Real(f) => (Some(f.to_string()), false),
        ValueRef::Text(b) | ValueRef::Blob(b) => match std::str::from_utf8(b) {
            Ok(s) => (Some(s.to_string()), false),
            Err(_) => (Some(String::from_utf8_lossy(b).into_owned()), true),
        },
    }
}

/// A one-line description of an SQLite error, naming a corrupt or truncated file as such.
pub fn describe_sql_error(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, msg)
            if f.code == rusqlite::ErrorCode::DatabaseCorrupt || msg.as_deref().is_some_and(is_damage_message) =>
        {
            damaged("corrupt or truncated SQLite file", msg.as_deref().unwrap_or("database disk image is malformed"))
        }
        rusqlite::Error::SqliteFailure(f, msg) if f.code == rusqlite::ErrorCode::NotADatabase => {
            damaged("not an SQLite database", msg.as_deref().unwrap_or("file is not a database"))
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy || f.code == rusqlite::ErrorCode::DatabaseLocked => {
            "locked by another program writing it (a live writer in the middle of a commit); nothing uncommitted is read: retry when it is done".to_string()
        }
        rusqlite::Error::SqliteFailure(f, _) if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK => {
            "a hot journal (-journal) beside it: a writer stopped in the middle of a transaction, and rolling it back would change the evidence; nothing was read. Recover a copy with `sqlite3 COPY 'PRAGMA integrity_check'` (copy the -journal too) and give that".to_string()
        }
        rusqlite::Error::InvalidColumnType(i, name, ty) => {
            format!("column {name} (#{i}) holds a value of type {ty}, not the type nsys writes")
        }
        rusqlite::Error::IntegralValueOutOfRange(i, v) => format!("column #{i}: value {v} out of range"),
        other => other.to_string(),
    }
}

/// SQLite's words for a damaged file (whatever code carries them).
fn is_damage_message(m: &str) -> bool {
    ["malformed database schema", "database disk image is malformed", "file is not a database"]
        .iter()
        .any(|w| m.contains(w))
}

/// One line saying the export is damaged, with SQLite's reason but never the SQL it quotes: a damaged schema
/// page gives `malformed database schema (TABLE) - unrecognized token: "…"` followed by the rest of that
/// table's CREATE TABLE, many lines of it; only the table's name (printable, at most 64 characters) is kept.
fn damaged(what: &str, msg: &str) -> String {
    let printable = |s: &str, n: usize| -> String { s.chars().filter(|c| !c.is_control()).take(n).collect() };
    let reason = match msg.find("malformed database schema") {
        Some(i) => {
            let rest = &msg[i + "malformed database schema".len()..];
            match rest.trim_start().strip_prefix('(').and_then(|r| r.split(')').next()) {
                Some(t) if !t.is_empty() => format!("malformed database schema, at table {}", printable(t, 64)),
                _ => "malformed database schema".to_string(),
            }
        }
        None => printable(msg.lines().next().unwrap_or(msg), 120),
    };
    format!("{what} ({reason}): the export is damaged; export it again from the .nsys-rep, or copy it again")
}

fn uri_escape(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    // every byte of the path as it is, so any path (one that is not UTF-8 too) opens exactly that file: a
    // lossy string once turned `cap-\xff.sqlite` into `cap-\u{FFFD}.sqlite`, a neighbouring file
    let mut out = String::with_capacity(path.as_os_str().len());
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------------------
// Appended by helper H5 (serve-capture), to move with the export layer: why an export holds no NVTX range.

/// NVTX facts for "the capture's NVTX table has no range" (serve-capture's message): rows of `NVTX_EVENTS`
/// that are not closed push/pop or start/end ranges (domain creation, registered strings, marks…), and nsys's
/// own `NVTX binary payload extension is incompatible…` message from `StringIds` when it is there (measured:
/// Python `nvtx` 0.2.17 under nsys 2023.4.4 records one domain-creation row, eventType 76, and that message).
pub fn nvtx_no_range_facts(ex: &Export) -> Result<(u64, Option<String>)> {
    use schema::{cols, nvtx, NVTX_EVENTS, NVTX_INCOMPATIBLE_LIKE, STRING_IDS};
    let other = if ex.has_table(NVTX_EVENTS) {
        let [_, end, event_type, ..] = cols::NVTX_EVENTS;
        let [push_pop, start_end] = nvtx::RANGES;
        ex.conn()
            .query_row(
                &format!(
                    "SELECT COUNT(*) FROM {NVTX_EVENTS} \
                     WHERE NOT ({event_type} IN ({push_pop}, {start_end}) AND {end} IS NOT NULL)"
                ),
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(ex.sql_err(NVTX_EVENTS))? as u64
    } else {
        0
    };
    let msg = if ex.has_table(STRING_IDS) {
        let [_, value] = cols::STRING_IDS;
        ex.conn()
            .query_row(
                &format!("SELECT {value} FROM {STRING_IDS} WHERE {value} LIKE ?1 LIMIT 1"),
                [NVTX_INCOMPATIBLE_LIKE],
                |r| r.get::<_, String>(0),
            )
            .ok()
    } else {
        None
    };
    Ok((other, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_unpack() {
        // hw=0, vm=1, pid=796, tid=801
        let g: i64 = (1 << 48) | (796 << 24) | 801;
        assert_eq!(pid_of(g), 796);
        assert_eq!(tid_of(g), 801);
        assert_eq!(ns_of(g), (1 << 48) | (796 << 24));
        // session-wide ids are negative as signed integers
        let neg = 0xfe00000000000000u64 as i64;
        assert!(neg < 0);
        assert_eq!(pid_of(neg), 0);
        assert_eq!(ns_of(neg), neg);
    }

    /// G4's count of the NVTX marks and ranges on the runtime threads, by the export's own scan, is the SQL
    /// statement it falls back to, at cuts before, inside and after the rows (captures of nsys 2025.3 and 2023.4
    /// with marks, push/pop and start/end ranges).
    #[test]
    fn nvtx_on_runtime_threads_is_sqls() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for name in ["nsys-2025.3.1/decode_mixed", "nsys-2025.3.1/gpu_full_node", "nsys-2023.4.4/gpu_range_node"] {
            let e = Export::open(&root.join(format!("fixtures/{name}.sqlite"))).unwrap();
            let sql = |cut: i64| -> (i64, i64, i64) {
                e.conn()
                    .query_row(
                        "SELECT count(*), coalesce(sum(n.start > ?1), 0), coalesce(max(max(n.start, coalesce(n.end, n.start))), 0)
                         FROM NVTX_EVENTS n WHERE n.eventType IN (34, 59, 60)
                         AND n.globalTid IN (SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME)",
                        [cut],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .unwrap()
            };
            let starts: Vec<i64> = e
                .conn()
                .prepare("SELECT start FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60) ORDER BY start")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<std::result::Result<_, _>>()
                .unwrap();
            let n = starts.len();
            assert!(n > 10, "{name}: the capture has NVTX rows");
            for cut in [i64::MIN, starts[0], starts[n / 3], starts[n / 2], starts[n - 1] - 1, starts[n - 1]] {
                assert_eq!(e.nvtx_on_runtime_threads(cut).unwrap(), sql(cut), "{name}: after {cut}");
            }
            let (all, after, _) = e.nvtx_on_runtime_threads(starts[n / 2]).unwrap();
            assert!(all == 0 || (after > 0 && after < all), "{name}: a cut in the middle counts some");
        }
    }

    #[test]
    fn uri_escapes_specials() {
        use std::os::unix::ffi::OsStrExt;
        let e = |b: &[u8]| uri_escape(Path::new(std::ffi::OsStr::from_bytes(b)));
        assert_eq!(e(b"/a/b?c#d%e"), "/a/b%3Fc%23d%25e");
        assert_eq!(e("/é".as_bytes()), "/%C3%A9");
        assert_eq!(e(b"/t/cap-\xff.sqlite"), "/t/cap-%FF.sqlite");
        assert_eq!(e("/t/cap-\u{FFFD}.sqlite".as_bytes()), "/t/cap-%EF%BF%BD.sqlite");
        assert_eq!(e(b"/a b&c=d+e;f"), "/a%20b%26c%3Dd%2Be%3Bf");
    }
}
