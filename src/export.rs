//! Read-only access to the SQLite file written by `nsys export --type sqlite`.
//!
//! The evidence file is never modified: it is opened with `mode=ro` (plus `immutable=1` unless the file is in
//! WAL mode, where `immutable` would hide un-checkpointed pages), and nothing here creates a table, index,
//! view or temp table in it. A missing table or column is an [`Error`] naming the file, table and column.
//!
//! An `.nsys-rep` is exported first with the resolved nsys into a temporary folder, never next to the
//! evidence ([`open_capture`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("path", &self.path).finish()
    }
}

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

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
        let uri = format!(
            "file:{}?mode=ro{}",
            uri_escape(&abs.to_string_lossy()),
            if wal { "" } else { "&immutable=1" }
        );
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::input(format!("{name}: cannot open as SQLite: {e}")))?;
        // Temporary b-trees (sorts) in memory, never in a file next to the evidence.
        conn.execute_batch("PRAGMA query_only = 1; PRAGMA temp_store = MEMORY;")
            .map_err(|e| Error::input(format!("{name}: cannot configure read-only access: {e}")))?;
        let mut tables = HashMap::new();
        {
            let mut stmt = conn
                .prepare("SELECT name FROM sqlite_master WHERE type IN ('table','view')")
                .map_err(|e| Error::input(format!("{name}: not a readable SQLite database: {e}")))?;
            let names: Vec<String> = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
                .map_err(|e| Error::input(format!("{name}: not a readable SQLite database: {e}")))?;
            for t in names {
                let cols = table_columns(&conn, &t).map_err(|e| Error::input(format!("{name}: table {t}: {e}")))?;
                tables.insert(t.to_ascii_lowercase(), TableInfo { name: t, columns: cols });
            }
        }
        Ok(Export { conn, path: path.to_path_buf(), tables })
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
        let t = self.table(table).ok_or_else(|| {
            Error::input(format!("{}: schema mismatch: required table {table} is missing", self.name()))
        })?;
        self.check_columns(t, columns)?;
        Ok(t)
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
    /// the table is absent.
    pub fn name_values(&self, table: &str) -> Result<Vec<(String, Option<String>)>> {
        let Some(t) = self.optional(table, &["name", "value"])? else { return Ok(Vec::new()) };
        let sql = format!("SELECT name, CAST(value AS TEXT) FROM \"{}\"", t.name);
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql_err(table))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)))
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(self.sql_err(table))?;
        Ok(rows)
    }

    /// The nsys version that wrote the export (META_DATA_EXPORT `nsys_version`, else `EXPORT_...VERSION`).
    pub fn nsys_version(&self) -> Result<Option<String>> {
        let rows = self.name_values("META_DATA_EXPORT")?;
        for key in ["NSYS_VERSION", "nsys_version", "EXPORT_PROGRAM_VERSION"] {
            if let Some((_, v)) = rows.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) {
                return Ok(v.clone());
            }
        }
        Ok(rows.iter().find(|(n, _)| n.to_ascii_lowercase().contains("version")).and_then(|(_, v)| v.clone()))
    }

    /// Count rows of a table (0 when absent).
    pub fn count_rows(&self, table: &str) -> Result<i64> {
        let Some(t) = self.table(table) else { return Ok(0) };
        let sql = format!("SELECT count(*) FROM \"{}\"", t.name);
        self.conn.query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))
    }
}

fn table_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let cols = stmt.query_map([table], |r| r.get::<_, String>(0))?.collect();
    cols
}

/// A one-line description of an SQLite error, naming a corrupt or truncated file as such.
pub fn describe_sql_error(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, msg) if f.code == rusqlite::ErrorCode::DatabaseCorrupt => {
            format!("corrupt or truncated SQLite file ({})", msg.as_deref().unwrap_or("database disk image is malformed"))
        }
        rusqlite::Error::SqliteFailure(f, msg) if f.code == rusqlite::ErrorCode::NotADatabase => {
            format!("not an SQLite database ({})", msg.as_deref().unwrap_or("file is not a database"))
        }
        rusqlite::Error::InvalidColumnType(i, name, ty) => {
            format!("column {name} (#{i}) holds a value of type {ty}, not the type nsys writes")
        }
        rusqlite::Error::IntegralValueOutOfRange(i, v) => format!("column #{i}: value {v} out of range"),
        other => other.to_string(),
    }
}

fn uri_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'?' | b'#' | b'%' => out.push_str(&format!("%{b:02X}")),
            _ => out.push(b as char),
        }
    }
    // non-ASCII bytes were pushed as Latin-1 chars above; redo properly for UTF-8 paths
    if !path.is_ascii() {
        let mut s = String::new();
        for ch in path.chars() {
            match ch {
                '?' | '#' | '%' => s.push_str(&format!("%{:02X}", ch as u32)),
                c if c.is_ascii() => s.push(c),
                c => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        s.push_str(&format!("%{b:02X}"));
                    }
                }
            }
        }
        return s;
    }
    out
}

/// Where the analysed SQLite came from: given directly, or exported from a report into a temporary folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureSource {
    /// The path the user gave.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// `sqlite` when an export was given; `nsys-rep` when a report was exported by nsyskit.
    pub kind: String,
    /// For a report: the nsys that exported it and the temporary SQLite (deleted afterwards).
    pub exported_with: Option<String>,
    pub exported_sqlite: Option<String>,
}

/// An opened capture: the export, where it came from, and the temporary folder holding an export made from
/// a report (deleted when dropped).
pub struct OpenedCapture {
    pub export: Export,
    pub source: CaptureSource,
    _tmp: Option<tempfile::TempDir>,
}

/// The nsys to use for exporting reports: resolved by [`crate::resolve::resolve`] (`NSYS_BIN`, else the first
/// usable `nsys` on PATH, else the newest in the known install folders), verified with `--version`, not probed.
pub fn default_nsys() -> Result<PathBuf> {
    // NSYS_BIN, then PATH, then the known install folders, each verified (`--version`); see crate::resolve.
    let opts = crate::resolve::ResolveOptions { probe: false, ..crate::resolve::ResolveOptions::from_env() };
    crate::resolve::resolve(&opts)
        .map(|r| r.path)
        .map_err(|e| e.context("cannot export the .nsys-rep (or give the .sqlite export)"))
}

/// Open an `.sqlite` export, or export an `.nsys-rep` with `nsys` (default: [`default_nsys`]) into a
/// temporary folder and open that.
pub fn open_capture(path: &Path, nsys: Option<&Path>) -> Result<OpenedCapture> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::input(format!("{name}: no such file")),
        _ => Error::input(format!("{name}: cannot read: {e}")),
    })?;
    if !meta.is_file() {
        return Err(Error::input(format!("{name}: not a regular file")));
    }
    let is_rep = path.extension().map(|e| e == "nsys-rep" || e == "qdrep").unwrap_or(false);
    if !is_rep {
        let export = Export::open(path)?;
        return Ok(OpenedCapture {
            export,
            source: CaptureSource { path: name, size: meta.len(), kind: "sqlite".into(), exported_with: None, exported_sqlite: None },
            _tmp: None,
        });
    }
    let nsys = match nsys {
        Some(p) => p.to_path_buf(),
        None => default_nsys()?,
    };
    let tmp = tempfile::Builder::new()
        .prefix("nsyskit-export-")
        .tempdir()
        .map_err(|e| Error::env(format!("cannot create a temporary folder: {e}")))?;
    let out = tmp.path().join("export.sqlite");
    let output = std::process::Command::new(&nsys)
        .arg("export")
        .arg("--type=sqlite")
        .arg("--force-overwrite=true")
        .arg("--lazy=false")
        .arg(format!("--output={}", out.display()))
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::env(format!("cannot run {}: {e}", nsys.display())))?;
    if !output.status.success() || !out.is_file() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let tail: String = format!("{stdout}{stderr}").lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
        return Err(Error::input(format!(
            "{name}: `{} export --type=sqlite` failed ({}): {tail}",
            nsys.display(),
            output.status
        )));
    }
    let export = Export::open(&out)?;
    Ok(OpenedCapture {
        export,
        source: CaptureSource {
            path: name,
            size: meta.len(),
            kind: "nsys-rep".into(),
            exported_with: Some(nsys.display().to_string()),
            exported_sqlite: Some(out.display().to_string()),
        },
        _tmp: Some(tmp),
    })
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

    #[test]
    fn uri_escapes_specials() {
        assert_eq!(uri_escape("/a/b?c#d%e"), "/a/b%3Fc%23d%25e");
        assert_eq!(uri_escape("/é"), "/%C3%A9");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Appended by H7 (first-hour, issue #21): the capture header `report` shows and the capture start that the
// ranges document carries (so that bundle-merge records `kernel_profile.captured_at` from the capture, not a
// file's mtime). Move into src/export/ with the rest of this file.

/// When and on what a capture was taken, as the export records it. Every field is null when the export does
/// not record it (these tables are metadata, not evidence: their absence is not an error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureInfo {
    /// The capture's start, RFC 3339 UTC (`TARGET_INFO_SESSION_START_TIME.utcTime`).
    pub captured_at: Option<String>,
    /// Where `captured_at` was read.
    pub captured_at_from: Option<String>,
    /// GPU names (`TARGET_INFO_GPU.name`), sorted, distinct.
    pub gpus: Vec<String>,
    /// NVIDIA driver (`TARGET_INFO_SYSTEM_ENV` `NvDriverVersion`; `0` on a machine without a driver is null).
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (`CudaDriverVersion`, e.g. `13000` = 13.0).
    pub cuda_driver_version: Option<String>,
    /// The capture's duration and its bounds on the export's clock (`ANALYSIS_DETAILS`).
    pub duration_ns: Option<i64>,
    pub start_ns: Option<i64>,
    pub stop_ns: Option<i64>,
}

/// The capture header of an export (read-only; optional tables give nulls).
pub fn capture_info(export: &Export) -> Result<CaptureInfo> {
    let mut c = CaptureInfo::default();
    let conn = export.conn();
    if let Some(t) = export.optional("TARGET_INFO_SESSION_START_TIME", &["utcTime"])? {
        let v: Option<String> = conn
            .query_row(&format!("SELECT CAST(utcTime AS TEXT) FROM \"{}\" LIMIT 1", t.name), [], |r| r.get(0))
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err("TARGET_INFO_SESSION_START_TIME.utcTime"))?;
        if let Some(v) = v.filter(|v| !v.trim().is_empty()) {
            let v = v.trim();
            c.captured_at = Some(if v.ends_with('Z') || v.contains('+') { v.to_string() } else { format!("{v}Z") });
            c.captured_at_from = Some("TARGET_INFO_SESSION_START_TIME.utcTime".into());
        }
    }
    if let Some(t) = export.optional("TARGET_INFO_GPU", &["name"])? {
        let mut stmt = conn.prepare(&format!("SELECT DISTINCT name FROM \"{}\" WHERE name IS NOT NULL ORDER BY name", t.name)).map_err(export.sql_err("TARGET_INFO_GPU.name"))?;
        c.gpus = stmt.query_map([], |r| r.get::<_, String>(0)).and_then(|r| r.collect()).map_err(export.sql_err("TARGET_INFO_GPU.name"))?;
    }
    if let Some(t) = export.optional("TARGET_INFO_SYSTEM_ENV", &["name", "value"])? {
        let get = |key: &str| -> Result<Option<String>> {
            conn.query_row(&format!("SELECT CAST(value AS TEXT) FROM \"{}\" WHERE name = ?1 LIMIT 1", t.name), [key], |r| r.get::<_, Option<String>>(0))
                .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
                .map_err(export.sql_err("TARGET_INFO_SYSTEM_ENV"))
        };
        let known = |v: Option<String>| v.filter(|v| !v.trim().is_empty() && v.trim() != "0");
        c.driver_version = known(get("NvDriverVersion")?);
        c.cuda_driver_version = known(get("CudaDriverVersion")?);
    }
    if let Some(t) = export.optional("ANALYSIS_DETAILS", &["duration", "startTime", "stopTime"])? {
        let row: Option<(Option<i64>, Option<i64>, Option<i64>)> = conn
            .query_row(&format!("SELECT duration, startTime, stopTime FROM \"{}\" LIMIT 1", t.name), [], |r| Ok(Some((r.get(0)?, r.get(1)?, r.get(2)?))))
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err("ANALYSIS_DETAILS"))?;
        if let Some((d, s, e)) = row {
            c.duration_ns = d;
            c.start_ns = s;
            c.stop_ns = e;
        }
    }
    Ok(c)
}
