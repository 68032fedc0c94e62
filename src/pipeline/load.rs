//! Loading [`Evidence`]: a bundle or a ranges document (JSON), or a raw export, whose evidence runs the ranges
//! analysis, the step budget's device timelines and gate-check on one open export (report, capture-compare).

use std::path::Path;

use crate::contract::{Error, Input, Result};
use crate::evidence::{self, Evidence, EvidenceGates, RangesView};
use crate::export::{Export, SQLITE_MAGIC};

/// Standard input can be read once per process: a second `-` is an error, not an empty input.
static STDIN_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Bytes that are not a regular file (`-`, a FIFO, `<(cmd)`): an SQLite export among them is copied to a
/// private temporary file (never beside the input) and read from there; anything else is JSON.
fn load_streamed(bytes: Vec<u8>, name: &str, step_detail: bool) -> Result<Evidence> {
    if !bytes.starts_with(SQLITE_MAGIC) {
        return evidence::load_json(bytes, name);
    }
    let mut tmp = spool_file(name)?;
    use std::io::Write;
    tmp.write_all(&bytes)
        .and_then(|_| tmp.flush())
        .map_err(|e| Error::env(format!("{name}: cannot write a temporary copy of the export: {e}")))?;
    from_spooled(tmp, name, step_detail)
}

fn spool_file(name: &str) -> Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix("nsyskit-stdin-")
        .suffix(".sqlite")
        .tempfile()
        .map_err(|e| Error::env(format!("{name}: cannot create a temporary copy of the export: {e}")))
}

/// Standard input: an SQLite export is streamed into a temporary file (never held in memory), at most
/// `NSYSKIT_STDIN_MAX_BYTES` ([`crate::export::capture::stdin_max_bytes`]; past it exit 2 naming `<stdin>` and
/// the bound, the partial copy removed); anything else is read as JSON.
fn load_stdin(step_detail: bool) -> Result<Evidence> {
    use std::io::Read;
    let name = crate::export::STDIN_NAME;
    let mut stdin = std::io::stdin().lock();
    let mut head = Vec::new();
    let read_err = |e: std::io::Error| Error::input(format!("{name}: cannot read: {e}"));
    (&mut stdin).take(SQLITE_MAGIC.len() as u64).read_to_end(&mut head).map_err(read_err)?;
    let max = crate::export::capture::stdin_max_bytes()?;
    if !head.starts_with(SQLITE_MAGIC) {
        // JSON is parsed in memory; the same bound stops an endless stream
        let rest = max.saturating_sub(head.len() as u64).saturating_add(1);
        (&mut stdin).take(rest).read_to_end(&mut head).map_err(read_err)?;
        if head.len() as u64 > max {
            return Err(crate::export::capture::stdin_too_big(max));
        }
        return evidence::load_json(head, name);
    }
    let mut tmp = spool_file(name)?;
    crate::export::capture::copy_stdin_bounded(head.as_slice().chain(stdin), tmp.as_file_mut(), max)?;
    from_spooled(tmp, name, step_detail)
}

/// The evidence of the export spooled into `tmp` (kept while the evidence lives); messages say `name`.
fn from_spooled(tmp: tempfile::NamedTempFile, name: &str, step_detail: bool) -> Result<Evidence> {
    let tmp_name = tmp.path().display().to_string();
    let mut ev = from_export_with(tmp.path(), step_detail)
        .map_err(|e| Error { message: e.message.replace(&tmp_name, name), ..e })?;
    ev.source = name.to_string();
    ev.spooled = Some(std::sync::Arc::new(tmp.into_temp_path()));
    Ok(ev)
}

/// Load evidence from a path (`-` = stdin): `.sqlite` (or any SQLite file) as an export, anything else as JSON.
/// `provenance` is an optional `nsyskit.provenance/v1` document that adds facts to an export (or replaces the
/// bundle's own provenance block).
pub fn load(path: &Path, provenance: Option<&Path>) -> Result<Evidence> {
    load_with(path, provenance, false)
}

/// What an input is, by its first bytes, else by its extension (a report renamed, a .qdstrm given where a report
/// is wanted: refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `-`: standard input.
    Stdin,
    /// A FIFO (`<(cmd)`): read once.
    Stream,
    /// A regular file that is an SQLite export or an `.nsys-rep`.
    Export,
    /// Anything else: JSON (a bundle or a ranges document).
    Json,
}

/// [`InputKind`] of `path`; a `.qdstrm` is refused.
pub fn input_kind(path: &Path) -> Result<InputKind> {
    let name = path.display().to_string();
    let sniffed = crate::export::capture::sniff(path);
    if let Some(crate::export::capture::FileKind::Qdstrm { version }) = &sniffed {
        return Err(Error::input(crate::export::capture::qdstrm_message(&name, version.as_deref())));
    }
    let is_rep = matches!(sniffed, Some(crate::export::capture::FileKind::Report { .. }))
        || path.extension().map(|e| e == "nsys-rep" || e == "qdrep").unwrap_or(false);
    let is_fifo = {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).map(|m| m.file_type().is_fifo()).unwrap_or(false)
    };
    Ok(if path == Path::new("-") {
        InputKind::Stdin
    } else if is_fifo {
        InputKind::Stream
    } else if is_rep || evidence::looks_like_sqlite(path) {
        InputKind::Export
    } else {
        InputKind::Json
    })
}

/// [`load`]; with `step_detail`, a raw export's evidence keeps [`Evidence::step_detail`] (report).
pub fn load_with(path: &Path, provenance: Option<&Path>, step_detail: bool) -> Result<Evidence> {
    let name = path.display().to_string();
    let mut ev = match input_kind(path)? {
        InputKind::Stdin => {
            if STDIN_TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Err(Error::usage("-: standard input is given twice; it can be read only once"));
            }
            load_stdin(step_detail)?
        }
        InputKind::Stream => load_streamed(crate::contract::read_input(path)?, &name, step_detail)?,
        InputKind::Export => from_export_with(path, step_detail)?,
        InputKind::Json => evidence::load_json(Input::Path(path.to_path_buf()).read_json_bytes()?, &name)?,
    };
    if let Some(p) = provenance {
        evidence::add_provenance(&mut ev, p)?;
    }
    Ok(ev)
}

/// Evidence from a raw nsys SQLite export: facts from META_DATA_EXPORT / META_DATA_CAPTURE / TARGET_INFO_GPU,
/// graph evidence from RUNTIME / KERNEL / GRAPH_TRACE, kernel statistics from KERNEL, ranges through the
/// ranges library.
pub fn from_export(path: &Path) -> Result<Evidence> {
    from_export_with(path, false)
}

/// [`from_export`]; with `step_detail`, [`Evidence::step_detail`] is kept.
pub fn from_export_with(path: &Path, step_detail: bool) -> Result<Evidence> {
    let cap = crate::export::open_capture(path, None)?;
    from_open_export(&cap.export, &cap.source, step_detail)
}

/// [`from_export_with`] of an export already open, `source` saying where it came from (`gate-check --report`:
/// the report of the gates' own export, whose reads also compute the gates' facts).
pub fn from_open_export(export: &Export, source: &crate::export::CaptureSource, step_detail: bool) -> Result<Evidence> {
    from_open_export_keeping(export, source, step_detail, false)
}

/// [`from_open_export`]; with `step_detail` and `keep_occurrences`, the step detail keeps the occurrences as read
/// ([`crate::sqlite_ranges::Collected::occurrences`]): what a readiness document on the same export reads.
pub fn from_open_export_keeping(
    export: &Export,
    source: &crate::export::CaptureSource,
    step_detail: bool,
    keep_occurrences: bool,
) -> Result<Evidence> {
    let mut ph = crate::phase::Phases::new("evidence");
    let ropts = crate::sqlite_ranges::RangesOptions { fold: true, ..Default::default() };
    export.keep_kernel_names();
    // report (step detail): the ranges analysis first; its parallel reads of the runtime and device tables
    // check every row's timestamps and compute those tables' timed-stats facts (Export::put_stats), so that
    // the checks, sums and counts below scan only the tables it did not read
    // the step budget's device timelines start in their own thread as soon as the rows are read; the device rows
    // are shared with them until the exposure below has read them (names that cannot be read leave the rows in
    // the detail: the step budget then builds the timelines itself and reports that error)
    let (mut beside, mut go) = (None, None);
    let mut detail = if step_detail {
        let want = &crate::step_label::is_iteration_like;
        let mut ready = |rows: &mut crate::sqlite_ranges::CapturedRows| {
            if let Ok((pending, device, g)) = crate::step_budget::device::build_beside(export, rows) {
                (beside, go) = (Some((pending, device)), Some(g));
            }
        };
        Some(crate::sqlite_ranges::analyze_with_intervals_keeping(
            export,
            &ropts,
            want,
            keep_occurrences,
            Some(&mut ready),
        )?)
    } else {
        None
    };
    ph.mark("ranges_with_intervals");
    // past the analysis's peak: the timelines go on from their linked rows (an error above lets them go too)
    if let Some(g) = go {
        g.now();
    }
    // what reads the analysis's device metrics from here on: the choice of the report's step label and its step
    // budget; the rest go while the timelines sort their rows (before their gaps are cut; after it, the timelines
    // waited for this on the report's path: 0.13 s at 20 M kernels on 16 cores)
    if let Some((a, _)) = detail.as_mut() {
        a.occurrences.keep_metrics_where(crate::step_label::reads_metrics);
        ph.mark("keep_metrics");
    }
    // kernel statistics and memcpy time are SQL sums: refuse impossible timestamps first (one scan per timed
    // table not read yet, which also aggregates the kernel rows by name for the kernel statistics)
    export.check_timestamps(&crate::export::rows::TIMED_TABLES)?;
    ph.mark("check_timestamps");
    let mut ev = Evidence { source: source.path.clone(), kind: source.kind.clone(), ..Default::default() };
    ev.facts = evidence::export_facts(export)?;
    ph.mark("facts");
    ev.capture = Some(crate::export::capture_info(export)?);
    ph.mark("capture_info");
    let (kernels, memcpy) = crate::step_budget::picture::export_kernel_stats(export)?;
    ph.mark("kernel_stats");
    ev.kernels = Some(kernels);
    ev.kernels_source = Some(format!("{} (demangledName)", crate::export::schema::KERNEL));
    ev.memcpy_time_ns = Some(memcpy);
    let (a, iv) = match detail {
        Some((a, c)) => (a, Some(c)),
        None => (crate::sqlite_ranges::analyze(export, &ropts)?, None),
    };
    // the report reads them from its step detail (a copy of 500 k labels at 5 M kernels, on the critical path)
    if iv.is_none() {
        ev.occurrences = Some(evidence::occurrences_of(&a));
    }
    ev.ranges = Some(RangesView::from(&a.doc));
    ph.mark("ranges");
    // report (step detail): how much copy and communication time the compute hides on each device, from the
    // device rows the ranges scan read (no second read of the device tables)
    if let Some(c) = &iv {
        let device = beside.as_ref().map_or(c.rows.device.as_slice(), |(_, d)| d.as_slice());
        ev.exposure = crate::step_budget::picture::export_exposure(
            export,
            device,
            ev.kernels.as_deref().unwrap_or_default(),
            memcpy,
        )?;
        ph.mark("exposure");
    }
    // nothing here reads the device rows after the exposure: the timelines' thread holds them until its own rows
    // are built, and the last of the two to let go gives their pages back (5 M kernels: 130 MB, no longer held
    // while the gates below read the device tables again)
    let beside = beside.map(|(pending, device)| {
        crate::step_budget::device::let_go(device);
        pending
    });
    // report (step detail): gate-check's verdict on the same export (its scans' facts shared): a class never
    // stands on a capture the gates rejected
    if step_detail {
        ev.gates = EvidenceGates::of_export(export, source)?;
        ph.mark("gates");
    }
    // report (step detail) on a capture without any range: what the host side still shows
    if step_detail && ev.ranges.as_ref().is_some_and(|r| r.ranges.is_empty()) {
        ev.no_range = Some(evidence::no_range_of(export)?);
        ph.mark("no_range");
    }
    ev.step_timelines = beside;
    ev.step_detail = iv.map(|iv| std::sync::Arc::new((a, iv)));
    ev.started_utc_ns = crate::export::session_start_utc_ns(export)?;
    Ok(ev)
}
