//! `gate-check --ranges/--nvtx-readiness/--report`: the gate document and the documents of other tools from the
//! same capture in the same run, one pass over each big table for all of them.

use std::path::PathBuf;
use std::sync::Arc;

use crate::contract::{Error, Result};
use crate::export::{self, Export};
use crate::gate_check::{self, GateCheckDoc, GateOptions};
use crate::nvtx_readiness::{self, NvtxReadinessDoc, ReadinessOptions};
use crate::report::{ReportDoc, ReportOptions};
use crate::sqlite_ranges::{self, Analysis, Collected, RangesOptions, SharedOccurrences, SqliteRangesDoc};

/// Documents of other tools computed from the same capture in the same run ([`run_shared`]).
#[derive(Debug, Clone, Default)]
pub struct AlsoDocs {
    /// `gate-check --ranges`: the `sqlite-ranges` document with these options.
    pub ranges: Option<RangesOptions>,
    /// The `nvtx-readiness` document with these options.
    pub readiness: Option<ReadinessOptions>,
    /// `gate-check --report`: the `report` document with these options (`input` is not read: the gates' export
    /// is).
    pub report: Option<ReportOptions>,
}

/// The gate document and the documents [`AlsoDocs`] asked for, each byte for byte what its own tool prints
/// for the same SQLite export (`sqlite-ranges EXPORT`, `nvtx-readiness EXPORT`; for a report the export
/// gate-check made, described as the tools describe a report they exported).
#[derive(Debug, Clone)]
pub struct SharedDocs {
    pub gate: GateCheckDoc,
    pub ranges: Option<SqliteRangesDoc>,
    pub readiness: Option<NvtxReadinessDoc>,
    pub report: Option<ReportDoc>,
}

/// [`crate::gate_check::run`], and the documents `also` asks for from the same capture in the same run: one open
/// export (one export of a report). The report, then the ranges document, are computed first on the gates' own
/// export, and their reads of the runtime and device tables also compute the gates' facts of those tables
/// ([`super::report::document_sharing_scans`], [`ranges_sharing_scans`]): one pass over each table for all
/// documents; with the report, its ranges analysis is the ranges document. The readiness document is computed
/// in its own thread on its own read-only connection: from the report's reads (its occurrences and runtime
/// calls, [`crate::nvtx_readiness::SharedReads`]) beside the gates when there is a report, else meanwhile. CAPTURE
/// `-` is read from standard input ([`crate::gate_check::on_capture`]). Errors: the gates' first, then the ranges',
/// readiness', the report's.
pub fn run_shared(opts: &GateOptions, also: &AlsoDocs) -> Result<SharedDocs> {
    gate_check::validate(opts)?;
    if let Some(r) = &also.readiness {
        r.validate()?;
    }
    gate_check::on_capture(
        opts,
        |o, shown| {
            let (opened, inputs) = gate_check::open(o, shown)?;
            shared_documents(o, also, opened.export(), opened.other.as_ref(), |e| inputs.doc(o, e))
        },
        |shared| &mut shared.gate,
    )
}

/// The gate document (`gate`, on the open export) and the documents `also` asks for: `other` is the SQLite file
/// they read and how their own tools would describe it (None for a `.qdstrm`, which has no export).
fn shared_documents(
    opts: &GateOptions,
    also: &AlsoDocs,
    export: Option<&Export>,
    other: Option<&(PathBuf, export::CaptureSource)>,
    gate: impl FnOnce(Option<&Export>) -> Result<GateCheckDoc> + Send,
) -> Result<SharedDocs> {
    let name = opts.capture.display();
    let asked = [
        ("--ranges", also.ranges.is_some()),
        ("--nvtx-readiness", also.readiness.is_some()),
        ("--report", also.report.is_some()),
    ];
    if let (Some(&(flag, _)), None) = (asked.iter().find(|a| a.1), other) {
        return Err(Error::usage(format!(
            "{name}: a .qdstrm holds no SQLite export: {flag} needs an .sqlite export or an .nsys-rep"
        ))
        .with_arg(flag));
    }
    // with the report, the gates and readiness start once its evidence is read (on their own connections
    // holding the facts its scans computed, readiness from what its ranges analysis read), beside its step
    // budget; without, readiness reads on its own connection beside the others
    let after_evidence = also.report.is_some() && export.is_some();
    std::thread::scope(|s| {
        let mut readiness = also
            .readiness
            .as_ref()
            .zip(other)
            .filter(|_| !after_evidence)
            .map(|(ro, (p, src))| readiness_thread(s, Export::open(p), src, ro, None));
        // the report first, then the ranges document, on the gates' own export: their reads of the runtime and
        // device tables also compute what the gates' scans would (one pass over each table for all documents),
        // and the report's ranges analysis is the ranges document when it has sqlite-ranges' default options
        if let Some(e) = export.filter(|_| also.report.is_some() || also.ranges.is_some()) {
            gate_check::keep_for_gates(opts, e);
        }
        let mut gate = Some(gate);
        let mut gate_beside = None;
        let (report, report_ranges) = match (&also.report, other, export) {
            (Some(po), Some((p, src)), Some(e)) => {
                let beside = |detail: Option<&Arc<(Analysis, Collected)>>, kept: Option<SharedOccurrences>| {
                    let ex = Export::open(p).inspect(|ex| ex.take_over_facts(e));
                    gate_beside = gate.take().map(|g| s.spawn(move || g(Some(&ex?))));
                    readiness = also.readiness.as_ref().map(|ro| {
                        let ex = Export::open(p).inspect(|ex| ex.adopt_facts(e));
                        readiness_thread(s, ex, src, ro, detail.cloned().zip(kept))
                    });
                };
                match super::report::document_sharing_scans(e, src, po, also.readiness.is_some(), beside) {
                    Ok((doc, ranges)) => (Some(Ok(doc)), ranges),
                    Err(err) => (Some(Err(err)), None),
                }
            }
            _ => (None, None),
        };
        // the report failed before its evidence was read: readiness reads on its own
        if let (None, true, Some(ro), Some((p, src))) = (&readiness, after_evidence, &also.readiness, other) {
            readiness = Some(readiness_thread(s, Export::open(p), src, ro, None));
        }
        let ranges = match (&also.ranges, other, export) {
            (Some(ro), Some((_, src)), Some(e)) => Some(ranges_doc(e, src, ro, report_ranges)),
            _ => None,
        };
        // gate_beside is set exactly when the gates were taken from `gate`
        let gate = match (gate_beside, gate) {
            (Some(h), _) => join_doc(h),
            (None, Some(g)) => g(export),
            (None, None) => Err(Error::input("the gates did not run")),
        };
        let readiness = readiness.map(|h| join_doc(h)).transpose();
        // an error of another document names its flag: the gates themselves went through
        let named = |flag: &'static str| move |e: Error| e.context(flag).with_arg(flag);
        Ok(SharedDocs {
            gate: gate?,
            ranges: ranges.transpose().map_err(named("--ranges"))?,
            readiness: readiness.map_err(named("--nvtx-readiness"))?,
            report: report.transpose().map_err(named("--report"))?,
        })
    })
}

/// The `sqlite-ranges` document with `ro`: the report's ranges analysis when there is one and `ro` are
/// sqlite-ranges' default options (the same analysis, once the contract's table is checked), else its own
/// analysis sharing the scans.
fn ranges_doc(
    e: &Export,
    src: &export::CaptureSource,
    ro: &RangesOptions,
    from_report: Option<SqliteRangesDoc>,
) -> Result<SqliteRangesDoc> {
    match from_report {
        Some(doc) if *ro == RangesOptions::sqlite_ranges_default() => {
            e.require(export::schema::NVTX_EVENTS, &export::schema::cols::NVTX_EVENTS)?;
            Ok(doc)
        }
        _ => ranges_sharing_scans(e, src, ro),
    }
}

/// The document `sqlite-ranges` prints ([`crate::sqlite_ranges::document`]), whose reads of the runtime and device
/// tables also compute those tables' timed-stats facts ([`Export::put_stats`], with what
/// [`Export::keep_intervals`] asked them to keep): gates run afterwards on the same export scan none of them
/// again (`gate-check --ranges`: one pass over each table for both documents).
pub fn ranges_sharing_scans(e: &Export, src: &export::CaptureSource, ro: &RangesOptions) -> Result<SqliteRangesDoc> {
    // the contract requires the table (its message says why a capture has none)
    e.require(export::schema::NVTX_EVENTS, &export::schema::cols::NVTX_EVENTS)?;
    Ok(sqlite_ranges::described(sqlite_ranges::analyze_sharing_scans(e, ro)?, src))
}

/// The readiness document in its own thread, on `ex` (its own connection to the export), from the reads of
/// `detail` (the report's ranges analysis and the occurrences it kept) when given, else reading them itself.
fn readiness_thread<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    ex: Result<Export>,
    src: &'s export::CaptureSource,
    ro: &'s ReadinessOptions,
    detail: Option<(Arc<(Analysis, Collected)>, SharedOccurrences)>,
) -> std::thread::ScopedJoinHandle<'s, Result<NvtxReadinessDoc>> {
    s.spawn(move || {
        let ex = ex?;
        let (detail, kept) = detail.unzip();
        let reads = detail.as_deref().zip(kept).map(|((_, c), kept)| nvtx_readiness::SharedReads::of(kept, c));
        crate::phase::timed("gate-check", "readiness", || nvtx_readiness::document_with(&ex, src, ro, reads))
    })
}

fn join_doc<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| Err(Error::input("a document thread panicked")))
}
