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
    nsys_export_os_args(Path::new(report), Path::new(out))
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// [`nsys_export_args`] with the paths' exact bytes (a path that is not UTF-8 is passed as it is, never
/// through a lossy string that could name another file).
pub fn nsys_export_os_args(report: &Path, out: &Path) -> Vec<std::ffi::OsString> {
    let mut output = std::ffi::OsString::from("--output=");
    output.push(out);
    vec![
        "export".into(),
        "--type=sqlite".into(),
        "--force-overwrite=true".into(),
        "--lazy=false".into(),
        output,
        report.into(),
    ]
}

/// The variable that bounds `nsys export` of an `.nsys-rep`, in seconds ([`DEFAULT_EXPORT_TIMEOUT_S`] when unset).
pub const EXPORT_TIMEOUT_VAR: &str = "NSYSKIT_EXPORT_TIMEOUT";

/// How long `nsys export` may run by default: generous (a multi-GB report exports in minutes), but bounded.
pub const DEFAULT_EXPORT_TIMEOUT_S: u64 = 600;

/// The deadline of `nsys export`: `NSYSKIT_EXPORT_TIMEOUT` seconds (a positive integer), else 600 s.
fn export_timeout() -> Result<std::time::Duration> {
    match std::env::var(EXPORT_TIMEOUT_VAR) {
        Err(_) => Ok(std::time::Duration::from_secs(DEFAULT_EXPORT_TIMEOUT_S)),
        Ok(v) if v.trim().is_empty() => Ok(std::time::Duration::from_secs(DEFAULT_EXPORT_TIMEOUT_S)),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(std::time::Duration::from_secs(n)),
            _ => Err(Error::usage(format!(
                "{EXPORT_TIMEOUT_VAR}={v:?}: expected a positive number of seconds for `nsys export` (default {DEFAULT_EXPORT_TIMEOUT_S})"
            ))),
        },
    }
}

/// A stop signal received while `nsys export` runs (0 = none): recorded by [`on_export_signal`].
static EXPORT_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_export_signal(sig: libc::c_int) {
    // only an atomic store: async-signal-safe
    let _ = EXPORT_SIGNAL.compare_exchange(
        0,
        sig,
        std::sync::atomic::Ordering::SeqCst,
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// SIGINT/SIGTERM/SIGHUP recorded (not fatal) while `nsys export` runs, so that the child is stopped and the
/// temporary folder removed before the process exits; the previous handlers come back on drop. A signal that
/// already has a handler (serve-capture's, which [`stop_requested`] also reads) or is ignored is left alone.
struct ExportSignals(Vec<(libc::c_int, libc::sigaction)>);

impl ExportSignals {
    fn install() -> ExportSignals {
        let mut saved = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: reads the current disposition; installs a handler that only stores into an atomic.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_export_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = libc::SA_RESTART;
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0 {
                    saved.push((sig, old));
                }
            }
        }
        ExportSignals(saved)
    }
}

impl Drop for ExportSignals {
    fn drop(&mut self) {
        for (sig, old) in &self.0 {
            // SAFETY: restores the disposition saved by install.
            unsafe {
                libc::sigaction(*sig, old, std::ptr::null_mut());
            }
        }
    }
}

/// The stop signal received so far: while exporting, or by serve-capture's handlers (0 = none).
fn stop_requested() -> i32 {
    match EXPORT_SIGNAL.load(std::sync::atomic::Ordering::SeqCst) {
        0 => crate::signals::stop_signal(),
        s => s,
    }
}

/// Stop `child` and its process group (nsys's own helpers): SIGTERM, then SIGKILL after 2 s; reaped.
fn stop_export(child: &mut std::process::Child) {
    let pgid = child.id() as i32;
    // SAFETY: signals the process group the child leads (it was started in its own group).
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(2) {
        if let Ok(Some(_)) = child.try_wait() {
            // its helpers too, should any have outlived it
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
}

/// Run `nsys export` of `report` into `out` (stdin closed); the error names the report and says, in plain words,
/// what nsys's failure means: a report newer than this nsys, a corrupt report, an export that stopped part-way
/// (nsys exits non-zero and may leave a partial SQLite: that one is never read). The export runs in its own
/// process group with a deadline (`NSYSKIT_EXPORT_TIMEOUT` seconds, default 600): past it, or on SIGINT,
/// SIGTERM or SIGHUP, nsys is stopped and the error names the report and why (the caller's temporary folder
/// is then removed as the error unwinds).
pub fn run_nsys_export(nsys: &Path, report: &Path, out: &Path) -> Result<()> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let name = report.display().to_string();
    let timeout = export_timeout()?;
    let signals = ExportSignals::install();
    if let s @ 1.. = stop_requested() {
        return Err(interrupted(&name, nsys, s));
    }
    let mut child = std::process::Command::new(nsys)
        .args(nsys_export_os_args(report, out))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::env(format!("cannot run {}: {e}", nsys.display())))?;
    let drain = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let so = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let se = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(e) => {
                stop_export(&mut child);
                return Err(Error::env(format!("{name}: cannot wait for {} export: {e}", nsys.display())));
            }
        }
        let sig = stop_requested();
        if sig != 0 || start.elapsed() >= timeout {
            stop_export(&mut child);
            drop(signals);
            return Err(if sig != 0 {
                interrupted(&name, nsys, sig)
            } else {
                Error::input(format!(
                    "{name}: `{} export --type=sqlite` did not finish within {} s ({EXPORT_TIMEOUT_VAR}): nsys was stopped and its partial export removed; raise {EXPORT_TIMEOUT_VAR} for a very large report, or give the .sqlite export",
                    nsys.display(),
                    timeout.as_secs()
                ))
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(signals);
    let (stdout, stderr) = (so.join().unwrap_or_default(), se.join().unwrap_or_default());
    if !status.success() || !out.is_file() {
        let stderr = String::from_utf8_lossy(&stderr);
        let stdout = String::from_utf8_lossy(&stdout);
        let text = format!("{stdout}{stderr}");
        let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
        let said = tail.join(" | ");
        let why = export_failure(&text, report, nsys);
        return Err(Error::input(format!(
            "{name}: `{} export --type=sqlite` failed ({status}){why}: {said}",
            nsys.display(),
        )));
    }
    Ok(())
}

/// The error of an export stopped by a signal.
fn interrupted(name: &str, nsys: &Path, sig: i32) -> Error {
    Error::input(format!(
        "{name}: `{} export --type=sqlite` interrupted by {}: nsys was stopped and its partial export removed; nothing was read",
        nsys.display(),
        crate::signals::signal_name(sig)
    ))
}

/// What nsys's export failure output means, as a clause (empty when it is none of the known failures).
fn export_failure(text: &str, report: &Path, nsys: &Path) -> String {
    let written = report_header(report).ok().flatten().and_then(|h| h.version);
    if text.contains("newer than your current version") || text.contains("Please update your Nsight Systems") {
        return format!(
            ": the report is newer than this nsys{}; {}",
            written.as_deref().map(|v| format!(" (written by nsys {v})")).unwrap_or_default(),
            newer_nsys_advice(written.as_deref())
        );
    }
    if text.contains("magic number mismatch") || text.contains("Section Table") {
        return ": the report is corrupt or truncated (its section table cannot be read: a copy cut short, or a capture that never finished); copy it again from where it was written, or capture again".into();
    }
    if text.contains("missing required fields") || text.contains("Can't parse message") {
        return format!(
            ": nsys {} could not read this report's format{} and stopped part-way (the partial SQLite it leaves holds no capture data and is not read); {}",
            nsys.display(),
            written.as_deref().map(|v| format!(" (written by nsys {v})")).unwrap_or_default(),
            newer_nsys_advice(written.as_deref())
        );
    }
    String::new()
}

/// How to get an nsys that opens a report written by `written`.
fn newer_nsys_advice(written: Option<&str>) -> String {
    format!(
        "export it with nsys {} (nsys opens reports of its own release and older ones; `nsys-resolve --nsys PATH` checks one, `NSYS_BIN` or `--nsys` chooses it), or give the .sqlite export made where it was captured",
        written.map(|v| format!("{} or newer", short_version(v))).unwrap_or_else(|| "of the release that wrote it, or newer".into())
    )
}

/// `2024.5.1.113-245134619542v0` → `2024.5.1`.
fn short_version(v: &str) -> String {
    let key = crate::nsys::version_key(v);
    key.iter().take(3).map(|n| n.to_string()).collect::<Vec<_>>().join(".")
}

/// What a capture file is, read from its first bytes (never from its name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileKind {
    /// An SQLite database (an export, or something else SQLite).
    Sqlite,
    /// An nsys report (`.nsys-rep`, `.qdrep`): `NVIDIA Tegra Profiler Report`; the version that wrote it when
    /// the header carries one (2023 and later: `2024@5@1@113-…`; older reports write `1.`).
    Report { version: Option<String> },
    /// nsys's raw capture stream, left when no report was made from it: `NVIDIA Nsight Systems Stream <version>`.
    Qdstrm { version: Option<String> },
    /// Anything else.
    Other,
}

const REPORT_MAGIC: &[u8] = b"NVIDIA Tegra Profiler Report ";
const QDSTRM_MAGIC: &[u8] = b"NVIDIA Nsight Systems Stream ";

/// The kind of the file at `path` by its first bytes; None when it cannot be read or is not a regular file (a
/// FIFO or standard input is never opened here: reading it would consume it, or wait for a writer).
pub fn sniff(path: &Path) -> Option<FileKind> {
    use std::io::Read;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut head = [0u8; 256];
    let mut f = std::fs::File::open(path).ok()?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    let head = &head[..n];
    let find = |magic: &[u8]| head.windows(magic.len()).position(|w| w == magic).map(|i| i + magic.len());
    let version_after = |at: usize, sep: u8| -> Option<String> {
        let rest: Vec<u8> = head[at..].iter().copied().take_while(|b| b.is_ascii_graphic() && *b != b'!').collect();
        let text = String::from_utf8(rest).ok()?.replace(sep as char, ".");
        let text = text.trim_end_matches('.').to_string();
        (crate::nsys::version_key(&text).first().is_some_and(|y| *y >= 2000)).then_some(text)
    };
    if head.starts_with(b"SQLite format 3\0") {
        Some(FileKind::Sqlite)
    } else if head.starts_with(REPORT_MAGIC) {
        Some(FileKind::Report { version: version_after(REPORT_MAGIC.len(), b'@') })
    } else if let Some(at) = find(QDSTRM_MAGIC) {
        Some(FileKind::Qdstrm { version: version_after(at, b'.') })
    } else {
        Some(FileKind::Other)
    }
}

/// The report header of `path` when it is an nsys report (`Ok(None)` when it is not one).
fn report_header(path: &Path) -> Result<Option<ReportHeader>> {
    Ok(match sniff(path) {
        Some(FileKind::Report { version }) => Some(ReportHeader { version }),
        _ => None,
    })
}

struct ReportHeader {
    version: Option<String>,
}

/// The message for a `.qdstrm` given where a report or an export is needed.
pub fn qdstrm_message(name: &str, version: Option<&str>) -> String {
    format!(
        "{name}: a .qdstrm, nsys's raw capture stream{}, not a report: nsys wrote no .nsys-rep from it (its importer, QdstrmImporter, was missing, failed or was interrupted; the console output of `nsys profile` says which); import it with the QdstrmImporter of that nsys release (`QdstrmImporter -i {name}`), or capture again, then give the .nsys-rep or its .sqlite export",
        version.map(|v| format!(" (written by nsys {})", short_version(v))).unwrap_or_default()
    )
}

/// Refuse a report that `nsys` (of `nsys_version`) cannot open because a newer release wrote it: by the year
/// and release of the report header against those of the nsys (a report of the same release is tried).
pub fn refuse_newer_report(name: &str, report_version: Option<&str>, nsys: &Path, nsys_version: &str) -> Result<()> {
    let Some(rv) = report_version else { return Ok(()) };
    let key = |v: &str| crate::nsys::version_key(v).into_iter().take(2).collect::<Vec<_>>();
    if key(rv) > key(nsys_version) {
        return Err(Error::input(format!(
            "{name}: written by nsys {} (its header), newer than the nsys that would export it ({}, {}): nsys cannot open a report of a later release; {}",
            short_version(rv),
            nsys.display(),
            short_version(nsys_version),
            newer_nsys_advice(Some(rv))
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

/// The nsys to use for exporting reports: resolved by [`crate::nsys::resolve`] (`NSYS_BIN`, else the first
/// usable `nsys` on PATH, else the newest in the known install folders), verified with `--version`, not probed.
pub fn default_nsys() -> Result<PathBuf> {
    let opts = crate::nsys::ResolveOptions { probe: false, ..crate::nsys::ResolveOptions::from_env() };
    crate::nsys::resolve(&opts)
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
    let kind = sniff(path);
    if let Some(FileKind::Qdstrm { version }) = &kind {
        return Err(Error::input(qdstrm_message(&name, version.as_deref())));
    }
    let report = matches!(kind, Some(FileKind::Report { .. })) || (is_report(path) && kind != Some(FileKind::Sqlite));
    if !report {
        let export = Export::open(path)?;
        export.refuse_incomplete()?;
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
    if let Some(FileKind::Report { version: Some(v) }) = &kind {
        if let Ok((_, nv)) = crate::nsys::verify(&nsys, std::time::Duration::from_secs(10)) {
            refuse_newer_report(&name, Some(v), &nsys, &nv)?;
        }
    }
    let out = tmp.path().join("export.sqlite");
    run_nsys_export(&nsys, path, &out)?;
    let export = Export::open(&out)?;
    export.refuse_incomplete().map_err(|e| e.context(format!("{name}: exported by {}", nsys.display())))?;
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

/// The variable that bounds how many bytes of standard input are copied ([`DEFAULT_STDIN_MAX_BYTES`] when unset).
pub const STDIN_MAX_BYTES_VAR: &str = "NSYSKIT_STDIN_MAX_BYTES";

/// The default bound of standard input: 64 GiB (exports of a few GB are common; an endless stream is not).
pub const DEFAULT_STDIN_MAX_BYTES: u64 = 64 << 30;

/// The most bytes of standard input copied: `NSYSKIT_STDIN_MAX_BYTES` (a positive integer), else 64 GiB.
pub fn stdin_max_bytes() -> Result<u64> {
    match std::env::var(STDIN_MAX_BYTES_VAR) {
        Err(_) => Ok(DEFAULT_STDIN_MAX_BYTES),
        Ok(v) if v.trim().is_empty() => Ok(DEFAULT_STDIN_MAX_BYTES),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Error::usage(format!(
                "{STDIN_MAX_BYTES_VAR}={v:?}: expected a positive number of bytes for {STDIN_NAME} (default {DEFAULT_STDIN_MAX_BYTES})"
            ))),
        },
    }
}

/// The error of standard input past [`stdin_max_bytes`] (exit 2).
pub fn stdin_too_big(max: u64) -> Error {
    Error::input(format!(
        "{STDIN_NAME}: more than {max} bytes ({STDIN_MAX_BYTES_VAR}): stopped reading, nothing kept; give the export as a file, or raise {STDIN_MAX_BYTES_VAR}"
    ))
}

/// Copy standard input's bytes `r` into `f`, 256 KiB at a time (never held whole), at most `max` bytes: one
/// more stops reading with an input error naming `<stdin>` and the bound (the caller removes `f`).
pub fn copy_stdin_bounded(r: impl std::io::Read, f: &mut std::fs::File, max: u64) -> Result<u64> {
    use std::io::Read;
    let mut r = r.take(max.saturating_add(1));
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => return Ok(n),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::input(format!("{STDIN_NAME}: cannot read: {e}"))),
        };
        n += k as u64;
        if n > max {
            return Err(stdin_too_big(max));
        }
        std::io::Write::write_all(f, &buf[..k])
            .map_err(|e| Error::env(format!("cannot write a temporary file for {STDIN_NAME}: {e}")))?;
    }
}

impl StdinCopy {
    /// Stream standard input into `TMP/nsyskit-stdin-XXXX/stdin.sqlite` (never held in memory), at most
    /// [`stdin_max_bytes`]: past it, reading stops and the error (exit 2) names `<stdin>` and the bound; the
    /// temporary folder is removed.
    pub fn read() -> Result<StdinCopy> {
        Self::from_reader(std::io::stdin().lock(), stdin_max_bytes()?)
    }

    /// The same from bytes already read (the same bound).
    pub fn from_bytes(bytes: &[u8]) -> Result<StdinCopy> {
        Self::from_reader(bytes, stdin_max_bytes()?)
    }

    /// Copy `r` into the temporary file, at most `max` bytes (one more is an error).
    pub fn from_reader(r: impl std::io::Read, max: u64) -> Result<StdinCopy> {
        let dir = tempfile::Builder::new()
            .prefix("nsyskit-stdin-")
            .tempdir()
            .map_err(|e| Error::env(format!("cannot create a temporary folder for {STDIN_NAME}: {e}")))?;
        let path = dir.path().join("stdin.sqlite");
        let write_err = |e: std::io::Error| Error::env(format!("cannot write a temporary file for {STDIN_NAME}: {e}"));
        let mut f = std::fs::File::create(&path).map_err(write_err)?;
        // on an error `dir` is dropped with it: the partial copy is removed
        copy_stdin_bounded(r, &mut f, max)?;
        drop(f);
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
    /// The capture's duration and its bounds on the export's clock (`ANALYSIS_DETAILS`); null when not
    /// recorded, or when impossible (a duration that is not a positive integer below 2^53 ns, a bound beyond
    /// ±2^53 ns: `notes` says which and why).
    pub duration_ns: Option<i64>,
    pub start_ns: Option<i64>,
    pub stop_ns: Option<i64>,
    /// Why a recorded value was treated as unknown (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// `ANALYSIS_DETAILS.duration` as a capture's duration: a positive integer that is a possible timestamp
/// (below 2^53 ns, the export layer's one timestamp rule); Err says why another cell is unknown.
fn capture_duration(v: rusqlite::types::ValueRef) -> std::result::Result<Option<i64>, String> {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(d) if d > 0 && super::rows::possible_ts(d) => Ok(Some(d)),
        ValueRef::Integer(d) => Err(format!(
            "{ANALYSIS_DETAILS}.duration is {d} ns, not a positive duration below 2^53 ns: the capture's duration is unknown"
        )),
        other => Err(format!(
            "{ANALYSIS_DETAILS}.duration is {}, not an integer: the capture's duration is unknown",
            super::rows::type_name(other)
        )),
    }
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
        let names: Vec<Option<String>> = stmt
            .query_map([], |r| Ok(super::text_lossy(r.get_ref(0)?).0))
            .and_then(|r| r.collect())
            .map_err(export.sql_err(&gpu_name_col))?;
        c.gpus = names.into_iter().flatten().collect();
    }
    if let Some(t) = export.optional(TARGET_INFO_SYSTEM_ENV, &cols::NAME_VALUE)? {
        let [name, value] = cols::NAME_VALUE;
        let get = |key: &str| -> Result<Option<String>> {
            conn.query_row(
                &format!("SELECT CAST({value} AS TEXT) FROM \"{}\" WHERE {name} = ?1 LIMIT 1", t.name),
                [key],
                |r| Ok(super::text_lossy(r.get_ref(0)?).0),
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
        type Bounds = (std::result::Result<Option<i64>, String>, Option<i64>, Option<i64>);
        let bound = |v: rusqlite::types::ValueRef| match v {
            rusqlite::types::ValueRef::Integer(i) => Some(i),
            _ => None,
        };
        let row: Option<Bounds> = conn
            .query_row(&format!("SELECT {duration}, {start}, {stop} FROM \"{}\" LIMIT 1", t.name), [], |r| {
                Ok(Some((capture_duration(r.get_ref(0)?), bound(r.get_ref(1)?), bound(r.get_ref(2)?))))
            })
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(export.sql_err(ANALYSIS_DETAILS))?;
        if let Some((d, s, e)) = row {
            match d {
                Ok(d) => c.duration_ns = d,
                Err(why) => c.notes.push(why),
            }
            for (col, v, slot) in [(start, s, &mut c.start_ns), (stop, e, &mut c.stop_ns)] {
                match v {
                    Some(v) if !super::rows::possible_ts(v) => c.notes.push(format!(
                        "{ANALYSIS_DETAILS}.{col} is {v} ns, beyond ±2^53 ns: not a real timestamp, treated as unknown"
                    )),
                    v => *slot = v,
                }
            }
        }
    }
    Ok(c)
}

impl Export {
    /// The end of the capture on the export's clock: `ANALYSIS_DETAILS.duration` (events are timed from the
    /// session start, so the last possible end is the duration). None without the table, a row or a positive
    /// integer below 2^53 ns there (an informational table: odd bytes never make the capture unreadable;
    /// [`capture_info`] notes why).
    pub fn capture_end_ns(&self) -> Result<Option<i64>> {
        let Some(t) = self.optional(ANALYSIS_DETAILS, &cols::ANALYSIS_DETAILS[..1])? else { return Ok(None) };
        let [duration, ..] = cols::ANALYSIS_DETAILS;
        let v = self
            .conn()
            .query_row(&format!("SELECT {duration} FROM \"{}\" LIMIT 1", t.name), [], |r| {
                Ok(capture_duration(r.get_ref(0)?).ok().flatten())
            })
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(self.sql_err(ANALYSIS_DETAILS))?;
        Ok(v)
    }
}
