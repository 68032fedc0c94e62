//! `report`: the evidence loaded once, with `--iterations`/`--iteration-records` the window resolved first, then
//! classified ([`crate::report::report_of`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::contract::{Error, Result};
use crate::evidence::{self, Evidence, RangesView};
use crate::export::{self, CaptureSource, Export, OpenedCapture};
use crate::iterations::window::{IterationArgs, Prepared, Windowed};

use super::window::prepare;
use crate::report::{self, ReportDoc, ReportOptions};
use crate::sqlite_ranges::{self, Analysis, Collected, RangesOptions, SharedOccurrences, SqliteRangesDoc};

use super::load::{self, InputKind};

/// Load the input, classify it, and write the HTML page and the trace when asked. With `--iterations` or
/// `--iteration-records` ([`IterationArgs::any`]), the ranges of the evidence are those of the window, and a
/// window that selects no iteration is a RETRY document.
pub fn run(opts: &ReportOptions, args: &IterationArgs) -> Result<Windowed<ReportDoc>> {
    let categories = report::prepare(opts)?;
    let ph = crate::phase::Phases::new("report");
    let bundle = |e: Error| e.with_arg("BUNDLE");
    // an export given as a regular file is opened once: for the window, the evidence and the step budget
    if load::input_kind(&opts.input).map_err(bundle)? == InputKind::Export {
        let cap = export::open_capture(&opts.input, None).map_err(bundle)?;
        let window = match args.any() {
            true => match window_of(&cap.export, &cap.source.path, opts, args.records.clone(), args)? {
                Windowed::Retry(d) => return Ok(Windowed::Retry(d)),
                Windowed::Doc(p) => Some(p),
            },
            false => None,
        };
        let mut ev = load::from_open_export(&cap.export, &cap.source, true).map_err(bundle)?;
        if let Some(p) = &opts.provenance {
            evidence::add_provenance(&mut ev, p).map_err(bundle)?;
        }
        let mut ph = ph;
        ph.mark("evidence");
        let note = window.map(|p| apply_window(&mut ev, &cap, &p)).transpose()?;
        let mut doc = report::report_of(&mut ev, opts, &categories, Some(&cap.export), ph)?;
        doc.notes.extend(note);
        return Ok(Windowed::Doc(doc));
    }
    let mut ph = ph;
    let mut ev = load::load_with(&opts.input, opts.provenance.as_deref(), true).map_err(bundle)?;
    ph.mark("evidence");
    let mut note = None;
    if args.any() {
        let (capture, records) = capture_of(&ev, opts, args)?;
        let cap = export::open_capture(&capture, None)?;
        match window_of(&cap.export, &ev.source, opts, records, args)? {
            Windowed::Retry(d) => return Ok(Windowed::Retry(d)),
            Windowed::Doc(p) => note = Some(apply_window(&mut ev, &cap, &p)?),
        }
    }
    let mut doc = report::report_of(&mut ev, opts, &categories, None, ph)?;
    doc.notes.extend(note);
    Ok(Windowed::Doc(doc))
}

/// [`run`] without a window: the report document.
pub fn document(opts: &ReportOptions) -> Result<ReportDoc> {
    match run(opts, &IterationArgs::default())? {
        Windowed::Doc(d) => Ok(d),
        // without --iterations no window is resolved, so none selects nothing
        Windowed::Retry(d) => Err(Error::input(d.reason)),
    }
}

/// The window of `export` (`source`: how a RETRY names the input): the steps of the report's label (`--label`,
/// else `--step`, else the iteration label), joined to `records`, selected by `args.iterations`.
fn window_of(
    export: &Export,
    source: &str,
    opts: &ReportOptions,
    records: Option<PathBuf>,
    args: &IterationArgs,
) -> Result<Windowed<Prepared>> {
    let a = IterationArgs { records, step: opts.label.clone().or(args.step.clone()), fold: true, ..args.clone() };
    Ok(match prepare(export, &a, "report")? {
        Windowed::Retry(mut d) => {
            d.source = source.to_string();
            Windowed::Retry(d)
        }
        doc => doc,
    })
}

/// The capture a bundle's window is taken on (its `kernel_profile.ranges.source.path`) and the records (
/// `--iteration-records`, else its `iterations.source` when that file exists); an export read from a stream is
/// its own capture.
fn capture_of(ev: &Evidence, opts: &ReportOptions, args: &IterationArgs) -> Result<(PathBuf, Option<PathBuf>)> {
    match ev.kind.as_str() {
        "bundle" => {
            let b = ev.bundle.as_ref();
            let cap = b.and_then(|b| b.pointer("/kernel_profile/ranges/source/path")).and_then(|v| v.as_str());
            let Some(cap) = cap.map(PathBuf::from).filter(|p| p.is_file()) else {
                return Err(Error::input(format!(
                    "{}: --iterations/--iteration-records need the capture: kernel_profile.ranges.source.path {} (give the .sqlite export instead)",
                    ev.source,
                    cap.map_or("is absent".to_string(), |c| format!("{c:?} is not a file"))
                ))
                .with_arg("--iterations"));
            };
            let rec = args.records.clone().or_else(|| {
                b.and_then(|b| b.pointer("/iterations/source"))
                    .and_then(|v| v.as_str())
                    .map(PathBuf::from)
                    .filter(|p| p.is_file())
            });
            Ok((cap, rec))
        }
        "ranges" => Err(Error::input(format!(
            "{}: a ranges document cannot be windowed by iteration: give the capture (.sqlite) or a bundle",
            ev.source
        ))
        .with_arg("--iterations")),
        _ => Ok((opts.input.clone(), args.records.clone())),
    }
}

/// Replace the evidence's ranges by those of the window (the step budget is then taken over the same window,
/// [`Evidence::step_window`]); the note the report adds.
fn apply_window(ev: &mut Evidence, cap: &OpenedCapture, prep: &Prepared) -> Result<String> {
    ev.step_window = prep.time_window;
    let ro = RangesOptions { fold: true, window: prep.time_window, ..Default::default() };
    ev.ranges = Some(RangesView::from(&sqlite_ranges::analyze_doc(&cap.export, &ro)?));
    let joined = prep
        .join
        .as_ref()
        .map(|j| format!("; records joined: {} ({} of {} steps)", j.verdict, j.joined_steps, j.steps));
    Ok(match &prep.window {
        Some(w) => format!(
            "--iterations {}:{} ({} of {:?}): {} step(s) selected; the ranges were recomputed from {} over the time window {}:{}{}",
            w.requested.start,
            w.requested.end,
            w.by,
            prep.step_label,
            w.selected_steps,
            cap.source.path,
            w.time_window_start_ns,
            w.time_window_end_ns,
            joined.unwrap_or_default()
        ),
        None => format!("--iteration-records: no window{}", joined.unwrap_or_default()),
    })
}

/// The document [`run`] prints for an export already open, `source` saying where it came from, and the
/// `sqlite-ranges` document its ranges analysis computed (`gate-check --report`: on the gates' own export, whose
/// facts these reads also compute; `opts.input` is not read). With `keep_occurrences`, the detail keeps the
/// occurrences as read ([`crate::sqlite_ranges::Collected::occurrences`]). `beside` is called once the evidence is read,
/// before the step budget, with that detail and the occurrences it kept (taken out of it: the report never reads
/// them): the caller can start the work that needs only the scans' facts (its own threads, on its own
/// connections) while the step budget finishes.
pub fn document_sharing_scans(
    export: &Export,
    source: &CaptureSource,
    opts: &ReportOptions,
    keep_occurrences: bool,
    beside: impl FnOnce(Option<&Arc<(Analysis, Collected)>>, Option<SharedOccurrences>),
) -> Result<(ReportDoc, Option<SqliteRangesDoc>)> {
    let categories = report::prepare(opts)?;
    let mut ph = crate::phase::Phases::new("report");
    let mut ev = load::from_open_export_keeping(export, source, true, keep_occurrences)?;
    if let Some(p) = &opts.provenance {
        evidence::add_provenance(&mut ev, p)?;
    }
    ph.mark("evidence");
    // the detail was just made: no one else holds it yet
    let kept = ev.step_detail.as_mut().and_then(Arc::get_mut).and_then(|(_, c)| c.occurrences.take());
    beside(ev.step_detail.as_ref(), kept);
    let doc = report::report_of(&mut ev, opts, &categories, Some(export), ph)?;
    let ranges = ev.step_detail.as_deref().map(|(a, _)| sqlite_ranges::described(a.doc.clone(), source));
    crate::memory::drop_beside(ev);
    Ok((doc, ranges))
}
