//! Getting an export to read: an `.sqlite` given directly, an `.nsys-rep` exported with `nsys export` into a
//! temporary folder ([`open_capture`]), or an SQLite file read from standard input into a temporary folder
//! ([`StdinCopy`]). The `nsys export` command line is written once here ([`nsys_export_args`]) for every caller
//! (these readers, serve-capture, pod-attach).

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::{
    cols, system_env_keys, ANALYSIS_DETAILS, TARGET_INFO_GPU, TARGET_INFO_SESSION_START_TIME, TARGET_INFO_SYSTEM_ENV,
};
use super::Export;
use crate::contract::{Error, Result};

/// The arguments after the nsys program of `nsys export` to SQLite: `export --type=sqlite
/// --force-overwrite=true --lazy=false --output=OUT REPORT`. `--lazy=false` makes nsys write every table it
/// knows up front (with `--lazy=true`, the default of some versions, tables appear only when first queried
/// by nsys itself).
pub fn nsys_export_args(report: &str, out: &str) -> Vec<String> {
    vec![
        "export".into(),
        "--type=sqlite".into(),
        "--force-overwrite=true".into(),
        "--lazy=false".into(),
        format!("--output={out}"),
        report.into(),
    ]
}

/// Run `nsys export` of `report` into `out` (stdin closed); the error names the report and nsys's last lines.
pub fn run_nsys_export(nsys: &Path, report: &Path, out: &Path) -> Result<()> {
    let name = report.display().to_string();
    let output = std::process::Command::new(nsys)
        .args(nsys_export_args(&name, &out.display().to_string()))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::env(format!("cannot run {}: {e}", nsys.display())))?;
    if !output.status.success() || !out.is_file() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let text = format!("{stdout}{stderr}");
        let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(Error::input(format!(
            "{name}: `{} export --type=sqlite` failed ({}): {}",
            nsys.display(),
            output.status,
            tail.join(" | ")
        )));
    }
    Ok(())
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
    let opts = crate::resolve::ResolveOptions { probe: false, ..crate::resolve::ResolveOptions::from_env() };
    crate::resolve::resolve(&opts)
        .map(|r| r.path)
        .map_err(|e| e.context("cannot export the .nsys-rep (or give the .sqlite export)"))
}

/// Is this path a report (`.nsys-rep`, `.qdrep`) rather than an export?
pub fn is_report(path: &Path) -> bool {
    path.extension().map(|e| e == "nsys-rep" || e == "qdrep").unwrap_or(false)
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
    if !is_report(path) {
        let export = Export::open(path)?;
        return Ok(OpenedCapture {
            export,
            source: CaptureSource {
                path: name,
                size: meta.len(),
                kind: "sqlite".into(),
                exported_with: None,
                exported_sqlite: None,
            },
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
    run_nsys_export(&nsys, path, &out)?;
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

/// An SQLite export read from standard input into a temporary folder (deleted when dropped). Messages and
/// documents name it `<stdin>`: [`StdinCopy::rename`] and [`StdinCopy::rename_err`] replace its path.
pub struct StdinCopy {
    path: PathBuf,
    name: String,
    _dir: tempfile::TempDir,
}

/// How documents and messages name standard input.
pub const STDIN_NAME: &str = "<stdin>";

impl StdinCopy {
    /// Read all of standard input into `TMP/nsyskit-stdin-XXXX/stdin.sqlite`.
    pub fn read() -> Result<StdinCopy> {
        let bytes = crate::contract::Input::Stdin.read_bytes()?;
        Self::from_bytes(&bytes)
    }

    /// The same from bytes already read.
    pub fn from_bytes(bytes: &[u8]) -> Result<StdinCopy> {
        let dir = tempfile::Builder::new()
            .prefix("nsyskit-stdin-")
            .tempdir()
            .map_err(|e| Error::env(format!("cannot create a temporary folder for {STDIN_NAME}: {e}")))?;
        let path = dir.path().join("stdin.sqlite");
        std::fs::write(&path, bytes)
            .map_err(|e| Error::env(format!("cannot write a temporary file for {STDIN_NAME}: {e}")))?;
        let name = path.display().to_string();
        Ok(StdinCopy { path, name, _dir: dir })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `text` with the temporary path replaced by `<stdin>`.
    pub fn rename(&self, text: &str) -> String {
        text.replace(&self.name, STDIN_NAME)
    }

    /// The error with the temporary path replaced by `<stdin>`.
    pub fn rename_err(&self, mut e: Error) -> Error {
        e.message = self.rename(&e.message);
        e
    }

    /// Run `f` on the copy; an error names `<stdin>`.
    pub fn run<T>(&self, f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
        f(&self.path).map_err(|e| self.rename_err(e))
    }
}

// ---- the capture header (`report`) and the capture start the ranges document carries (bundle-merge records it
// as `kernel_profile.captured_at`, not a file's mtime)

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
    let [utc_time] = cols::SESSION_START_TIME;
    let start_time_col = format!("{TARGET_INFO_SESSION_START_TIME}.{utc_time}");
    if let Some(t) = export.optional(TARGET_INFO_SESSION_START_TIME, &cols::SESSION_START_TIME)? {
        let v: Option<String> = conn
            .query_row(&format!("SELECT CAST({utc_time} AS TEXT) FROM \"{}\" LIMIT 1", t.name), [], |r| r.get(0))
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err(&start_time_col))?;
        if let Some(v) = v.filter(|v| !v.trim().is_empty()) {
            let v = v.trim();
            c.captured_at = Some(if v.ends_with('Z') || v.contains('+') { v.to_string() } else { format!("{v}Z") });
            c.captured_at_from = Some(start_time_col.clone());
        }
    }
    let [name] = cols::GPU_NAME;
    let gpu_name_col = format!("{TARGET_INFO_GPU}.{name}");
    if let Some(t) = export.optional(TARGET_INFO_GPU, &cols::GPU_NAME)? {
        let mut stmt = conn
            .prepare(&format!("SELECT DISTINCT {name} FROM \"{}\" WHERE {name} IS NOT NULL ORDER BY {name}", t.name))
            .map_err(export.sql_err(&gpu_name_col))?;
        c.gpus = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|r| r.collect())
            .map_err(export.sql_err(&gpu_name_col))?;
    }
    if let Some(t) = export.optional(TARGET_INFO_SYSTEM_ENV, &cols::NAME_VALUE)? {
        let [name, value] = cols::NAME_VALUE;
        let get = |key: &str| -> Result<Option<String>> {
            conn.query_row(
                &format!("SELECT CAST({value} AS TEXT) FROM \"{}\" WHERE {name} = ?1 LIMIT 1", t.name),
                [key],
                |r| r.get::<_, Option<String>>(0),
            )
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err(TARGET_INFO_SYSTEM_ENV))
        };
        let known = |v: Option<String>| v.filter(|v| !v.trim().is_empty() && v.trim() != "0");
        c.driver_version = known(get(system_env_keys::NV_DRIVER_VERSION)?);
        c.cuda_driver_version = known(get(system_env_keys::CUDA_DRIVER_VERSION)?);
    }
    if let Some(t) = export.optional(ANALYSIS_DETAILS, &cols::ANALYSIS_DETAILS)? {
        let [duration, start, stop] = cols::ANALYSIS_DETAILS;
        let row: Option<(Option<i64>, Option<i64>, Option<i64>)> = conn
            .query_row(&format!("SELECT {duration}, {start}, {stop} FROM \"{}\" LIMIT 1", t.name), [], |r| {
                Ok(Some((r.get(0)?, r.get(1)?, r.get(2)?)))
            })
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err(ANALYSIS_DETAILS))?;
        if let Some((d, s, e)) = row {
            c.duration_ns = d;
            c.start_ns = s;
            c.stop_ns = e;
        }
    }
    Ok(c)
}
