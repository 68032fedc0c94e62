//! G2–G5 window and size: report size, kernel rows, CUDA coverage of the window, traffic.
#![allow(unused_imports)]
use std::path::{Path, PathBuf};

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::rows::IntervalPart;
use crate::export::schema::{self, DeviceKind};
use crate::export::{self, Export};

use super::*;

// ---------------------------------------------------------------------------------------------------------
// G2 report size

pub fn g2_report_size(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G2", "report-size", "bytes");
    let min = cx.opts.thresholds.min_rep_bytes.unwrap_or_else(|| default_min_rep_bytes(cx.opts.tier));
    let size = cx.source.size;
    match cx.source.kind.as_str() {
        "qdstrm" => Ok(g.decide(
            true,
            size as f64,
            None,
            {
                let version = match export::capture::sniff(Path::new(&cx.source.path)) {
                    Some(export::capture::FileKind::Qdstrm { version }) => version,
                    _ => None,
                };
                format!(
                    "{} (a .qdstrm is left instead of a .nsys-rep; the raw stream embeds copies of every loaded library, measured 2 GB for a GPU server)",
                    export::capture::qdstrm_message(&cx.source.path, version.as_deref())
                )
            },
        )),
        "nsys-rep" => {
            let mut g = if size < min {
                g.decide(
                    true,
                    size as f64,
                    Some(min as f64),
                    format!(
                        "the report is {size} bytes, under the {} tier's {min} bytes: an idle or failed capture (nothing ran under load); re-capture under load, or lower --min-rep-bytes for a deliberately small capture",
                        tier_name(cx.opts.tier)
                    ),
                )
            } else {
                g.decide(false, size as f64, Some(min as f64), format!("the report is {size} bytes (≥ {min})"))
            };
            g.evidence.push(format!("{}: {size} bytes", cx.source.path));
            Ok(g)
        }
        _ => Ok(g.skip(
            "an export was given, not a report: its size says nothing about the capture; give the .nsys-rep as CAPTURE (with --sqlite for its export) to check it",
        )),
    }
}

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Throughput => "throughput",
        Tier::Decode => "decode",
    }
}

// ---------------------------------------------------------------------------------------------------------
// G3 kernel rows

pub fn g3_kernel_rows(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G3", "kernel-rows", "rows");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let mut g = match e.table(schema::KERNEL) {
        None => g.decide(
            true,
            0.0,
            Some(1.0),
            format!(
                "no CUDA kernel data: the export has no {} table (nsys creates it only when it records a kernel)",
                schema::KERNEL
            ),
        ),
        Some(t) => {
            let n = e.count_rows(&t.name)?;
            if n == 0 {
                g.decide(true, 0.0, Some(1.0), format!("no CUDA kernel data: {} is empty", schema::KERNEL))
            } else {
                g.decide(false, n as f64, Some(1.0), format!("{n} kernel rows"))
            }
        }
    };
    g.evidence.push(format!("{}: {} rows {}", e.name(), schema::KERNEL, e.count_rows(schema::KERNEL)?));
    // no kernel outlasts the capture it was recorded in (ANALYSIS_DETAILS.duration)
    if g.verdict == GateVerdict::Pass {
        let capture = export::capture_info(e)?.duration_ns.filter(|d| *d > 0);
        if let (Some(cap), Some((longest, rowid))) = (capture, e.longest_row(schema::KERNEL)?) {
            if longest > cap {
                let row = rowid.map(|r| format!("id {r}")).unwrap_or_else(|| "?".into());
                let rows = g.measured.unwrap_or(0.0);
                g = g.decide(
                    true,
                    rows,
                    Some(1.0),
                    format!(
                        "{kernel} row {row} lasts {}, longer than the whole capture (ANALYSIS_DETAILS.duration {}): a kernel cannot outlast the capture it was recorded in, so the export's timestamps are not real (damaged or edited); capture again",
                        secs(longest),
                        secs(cap),
                        kernel = schema::KERNEL,
                    ),
                );
                g.evidence
                    .push(format!("{}: KERNEL row {row}: end - start = {longest} ns > duration {cap} ns", e.name()));
            }
        }
    }
    if g.verdict == GateVerdict::Retry {
        if let Some(cause) = missing_kernels_cause(e)? {
            g.reason = format!("{}; {cause}", g.reason);
        }
    }
    Ok(g)
}

/// Why a capture that traced CUDA holds no kernel, when the export shows it (None when CUDA was not traced or
/// nothing points at a cause). Measured on the held-out engine captures, an engine process started by Python
/// multiprocessing `fork` (no exec):
/// - without `--trace-fork-before-exec=true` the child is not traced at all: no CUDA runtime row
///   (`engine_fork_noflag`, `TRACE_AFTER_FORK_BEFORE_EXEC=false`);
/// - with it, the child's NVTX is there but its CUDA buffers were never written: 3 runtime rows, no kernel, and
///   nsys's `Not all CUDA events might have been collected.` (`engine_fork`): fork children end with `os._exit`,
///   which runs no exit handler.
pub fn missing_kernels_cause(e: &Export) -> Result<Option<String>> {
    use crate::export::schema::capture_keys::{is, COLLECT_CUDA_TRACE, TRACE_AFTER_FORK_BEFORE_EXEC};
    let settings = e.capture_settings()?;
    let setting = |key: &str| settings.iter().find(|(n, _)| is(n, key)).and_then(|(_, v)| v.clone());
    if !settings.iter().any(|(n, v)| is(n, COLLECT_CUDA_TRACE) && v.as_deref() == Some("true")) {
        return Ok(None);
    }
    let runtime = e.count_rows(schema::RUNTIME)?;
    if runtime == 0 {
        let fork = setting(TRACE_AFTER_FORK_BEFORE_EXEC);
        return Ok(Some(match fork.as_deref() {
            Some("false") => format!("CUDA was traced but no CUDA call of any process was recorded, and the capture ran without --trace-fork-before-exec ({} TRACE_AFTER_FORK_BEFORE_EXEC=false): an engine that owns CUDA in a child forked without exec (Python multiprocessing 'fork', vLLM's default worker start) is not traced; capture with --trace-fork-before-exec=true and start the engine with 'spawn'", schema::META_DATA_CAPTURE),
            _ => "CUDA was traced but no CUDA call of any process was recorded: the CUDA-owning process was not traced (see G0: a CUPTI that did not initialise records nothing)".to_string(),
        }));
    }
    Ok(cuda_unflushed(e)?.then(|| format!("{runtime} CUDA runtime calls were recorded but no kernel, and {UNFLUSHED}")))
}

/// The cause named when nsys says a process's CUDA data was not all written.
const UNFLUSHED: &str = "nsys says \"Not all CUDA events might have been collected\" (DIAGNOSTIC_EVENT): a process that ends without running exit handlers (os._exit, how Python multiprocessing's fork children end) never flushes nsys's CUDA buffers; start the engine with 'spawn', or call cudaProfilerStop (torch.cuda.profiler.stop()) in it before it exits";

/// nsys's DIAGNOSTIC_EVENT says some process's CUDA events were not all collected.
fn cuda_unflushed(e: &Export) -> Result<bool> {
    Ok(e.diagnostic_events()?
        .iter()
        .any(|d| d.text.as_deref().is_some_and(|t| t.contains(crate::export::schema::DIAG_CUDA_NOT_ALL_COLLECTED))))
}

// ---------------------------------------------------------------------------------------------------------
// G4 CUDA data covers the window

/// NVTX events (marks 34, push/pop 59, start/end 60) opened on threads that made CUDA runtime calls,
/// against the end of the last CUDA runtime call.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Coverage {
    pub cuda_threads: i64,
    /// max(end) over CUPTI_ACTIVITY_KIND_RUNTIME.
    pub last_runtime_end: i64,
    /// max(end) over the device tables (None without device rows).
    pub last_device_end: Option<i64>,
    pub nvtx_on_cuda_threads: i64,
    pub nvtx_after: i64,
    /// max(start, end) of those NVTX events.
    pub last_nvtx: i64,
}

pub fn coverage(e: &Export) -> Result<Option<Coverage>> {
    let Some(rt) = e.optional(schema::RUNTIME, &["end", "globalTid"])? else { return Ok(None) };
    let rt = rt.name.clone();
    let nrt = e.count_rows(&rt)?;
    if nrt == 0 {
        return Ok(None);
    }
    let mut c = Coverage {
        last_runtime_end: e.max_end(schema::RUNTIME)?.unwrap_or(0),
        cuda_threads: e.runtime_thread_count()?,
        ..Default::default()
    };
    for k in WINDOW_TABLES {
        c.last_device_end = c.last_device_end.max(e.max_end(k.table())?);
    }
    let (a, b, m) = e.nvtx_on_runtime_threads(c.last_runtime_end)?;
    c.nvtx_on_cuda_threads = a;
    c.nvtx_after = b;
    c.last_nvtx = m;
    Ok(Some(c))
}

/// G4 RETRYs only when at least this many NVTX events on the CUDA threads start after the last CUDA runtime row
/// (and their share is above `--max-nvtx-after-cuda-share`).
pub const MIN_NVTX_AFTER_CUDA: i64 = 3;

pub fn g4_cuda_coverage(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G4", "cuda-data-covers-window", "share");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let Some(c) = coverage(e)? else {
        // device rows without the runtime calls that launched them: the table the joins need is gone
        let device: i64 =
            [schema::KERNEL, schema::MEMCPY, schema::MEMSET].iter().map(|t| e.count_rows(t)).sum::<Result<i64>>()?;
        if device > 0 {
            let what = if e.has_table(schema::RUNTIME) { "an empty" } else { "no" };
            return Ok(g.decide(
                true,
                0.0,
                None,
                format!(
                    "{} holds {device} GPU rows but {what} {} table: the CUDA API calls are missing, so GPU work joins no thread or range and the coverage cannot be checked; re-export the report (or re-capture with --trace=cuda)",
                    e.name(),
                    schema::RUNTIME
                ),
            ));
        }
        return Ok(g.skip("no CUDA runtime rows: nothing to compare (G1/G3 decide)"));
    };
    g.evidence.push(format!(
        "{}: last CUDA runtime row ends {} ({} ns); last device row ends {}; {} CUDA thread(s); NVTX events on them {}, starting after the last runtime row {}, last at {}",
        e.name(),
        secs(c.last_runtime_end),
        c.last_runtime_end,
        c.last_device_end.map(secs).unwrap_or_else(|| "-".into()),
        c.cuda_threads,
        c.nvtx_on_cuda_threads,
        c.nvtx_after,
        secs(c.last_nvtx)
    ));
    // no table: nothing recorded (nsys's lazy export of a program without NVTX) reads as an empty table; a table
    // nsys counted events for but the export lacks is a damaged export; unexplained, it cannot be checked
    let absent = if e.has_table(schema::NVTX_EVENTS) { None } else { Some(e.nvtx_recorded()?) };
    if let Some(rec) = absent.as_ref().filter(|r| r.collected.unwrap_or(0) > 0) {
        return Ok(g.decide(true, 0.0, None, rec.explain_missing_table(&e.name())));
    }
    if c.nvtx_on_cuda_threads == 0 && absent.as_ref().is_some_and(|r| !r.nothing_recorded()) {
        return Ok(g.decide(
            true,
            0.0,
            None,
            format!(
                "{} has no {} table: nothing shows how long the CUDA threads ran, so a CUDA trace that stopped early (see G0, the cbid 468 case) cannot be told from a complete one; capture with --trace=cuda,nvtx,osrt and annotate the engine with NVTX",
                e.name(),
                schema::NVTX_EVENTS
            ),
        ));
    }
    if c.nvtx_on_cuda_threads == 0 {
        return Ok(g.skip("no NVTX events on the threads that call CUDA: nothing shows how long they ran (annotate the engine with NVTX)"));
    }
    let share = c.nvtx_after as f64 / c.nvtx_on_cuda_threads as f64;
    let max = cx.opts.thresholds.max_nvtx_after_cuda_share;
    g.at_ns = Some(c.last_runtime_end);
    // a lost trace leaves the NVTX events going on without CUDA rows; one or two ranges closing the run after its
    // last CUDA call (a final post-processing or shutdown range) are not that
    let g = if share > max && c.nvtx_after >= MIN_NVTX_AFTER_CUDA {
        // the cause: a process that never flushed, when nsys says so; else the analyser's loss (G0)
        let cause = if cuda_unflushed(e)? {
            format!("nsys lost the CUDA trace: {UNFLUSHED}")
        } else {
            "nsys silently lost the CUDA trace (see G0; e.g. an nsys older than the CUDA runtime); re-capture"
                .to_string()
        };
        g.decide(
            true,
            share,
            Some(max),
            format!(
                "CUDA data stops at {} (last CUDA runtime row) but {} of {} NVTX events on the CUDA thread(s) ({:.1} %) start after it, until {}: {cause}",
                secs(c.last_runtime_end),
                c.nvtx_after,
                c.nvtx_on_cuda_threads,
                share * 100.0,
                secs(c.last_nvtx)
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(max),
            format!(
                "CUDA data lasts as long as the CUDA threads' NVTX ranges: {} of {} NVTX events start after the last CUDA runtime row ({}){}",
                c.nvtx_after,
                c.nvtx_on_cuda_threads,
                secs(c.last_runtime_end),
                if share > max {
                    format!(" (fewer than {MIN_NVTX_AFTER_CUDA}: a range closing the run, not a lost trace)")
                } else {
                    String::new()
                }
            ),
        )
    };
    Ok(g)
}

// ---------------------------------------------------------------------------------------------------------
// G5 traffic

/// An empty stretch of the GPU activity window: no kernel, memcpy, memset or graph-level replay running.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gap {
    pub start: i64,
    pub end: i64,
}

/// The GPU activity window `[first start, last end]` over KERNEL, MEMCPY, MEMSET, GRAPH_TRACE and its gaps (between the
/// union of the intervals).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuWindow {
    pub first: i64,
    pub last: i64,
    /// How many gaps the window has.
    pub gaps: usize,
    /// The three longest gaps and every gap the caller's `keep` accepted, longest first (then by start).
    pub kept: Vec<Gap>,
}

/// The window and every gap, longest first.
pub fn device_gaps(e: &Export) -> Result<Option<GpuWindow>> {
    Ok(device_gaps_and_tenths(e, &|_, _| true)?.map(|(w, _)| w))
}

/// The window, its gaps (`keep(gap length, window length)` says which gaps besides the three longest are
/// kept: a capture has about one gap per kernel, millions, and G5 reads a few) and the kernel starts in each
/// tenth of the window (what `Export::kernel_start_tenths` counts: every KERNEL row with a start at or after
/// the first, a start past the end in the last tenth), from the same rows: the valid intervals of the window
/// tables, read once (kept by the timed-table scans when gate-check asked for them), and the starts of the
/// invalid kernel rows.
pub fn device_gaps_and_tenths(
    e: &Export,
    keep: &(dyn Fn(i64, i64) -> bool + Sync),
) -> Result<Option<(GpuWindow, Option<[i64; 10]>)>> {
    if !WINDOW_TABLES.iter().any(|k| e.has_table(k.table())) {
        return Ok(None);
    }
    // 16 bytes a row, in the parts the scans read, merged here by start rather than sorted by SQLite (a
    // temporary b-tree of the same rows); rows with a NULL or inverted interval are skipped by the export layer
    // (counted in the document's source.skipped_rows)
    let mut rows = e.window_intervals(&WINDOW_TABLES)?;
    let kernel_table = WINDOW_TABLES[0] == DeviceKind::Kernel && e.has_table(DeviceKind::Kernel.table());
    let Some(first) = rows.intervals().map(|r| r.0).min() else { return Ok(None) };
    let last = rows.intervals().map(|r| r.1).max().unwrap_or(first);
    let tenths = kernel_table.then(|| {
        let window = (last - first).max(1);
        let mut t = [0i64; 10];
        for s in rows.first_table().map(|r| r.0).chain(rows.first_invalid.iter().copied()) {
            if s >= first {
                t[((s - first) * 10 / window).min(9) as usize] += 1;
            }
        }
        t
    });
    // by start only (the gaps do not depend on the order of equal starts): each part sorted (nsys writes its
    // rows so: the sort is a check), then the parts merged
    rows.parts.iter_mut().for_each(IntervalPart::sort_by_start);
    let window = (last - first).max(1);
    let parts: Vec<_> = rows.parts.iter().map(IntervalPart::view).collect();
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let n = if total < 1 << 20 { 1 } else { crate::export::rows::scan_threads().min(32) };
    let (gaps, kept, reach) = gaps_in_slices(&parts, &|len| keep(len, window), n);
    Ok(Some((GpuWindow { first, last: reach, gaps, kept: kept.into_sorted() }, tenths)))
}

/// The gaps of the union of `parts` (each sorted by start): their number, the longest three and those `keep`
/// asks for, and the last end. The rows are cut by start into slices merged in parallel (one k-way merge of 5.6 M
/// rows was 0.7 s of the report at 5 M kernels, alone on one of 16 cores; `n` slices): a slice starts from the reach of every
/// row before it (the largest end of the earlier slices, a first pass), so each finds the gaps a merge of all
/// rows in start order finds there.
fn gaps_in_slices(
    parts: &[crate::export::rows::PartView<'_>],
    keep: &(dyn Fn(i64) -> bool + Sync),
    n: usize,
) -> (usize, Longest, i64) {
    // slice bounds: starts of the largest part at evenly spaced rows (slice k holds the starts in [b[k], b[k+1]))
    let big = parts.iter().max_by_key(|p| p.len());
    let mut bounds = vec![i64::MIN];
    if let Some(big) = big {
        bounds.extend((1..n).filter_map(|k| big.start(big.len() * k / n)));
    }
    bounds.push(i64::MAX);
    bounds.dedup();
    let first_at = |p: &crate::export::rows::PartView<'_>, t: i64| {
        let (mut lo, mut hi) = (0, p.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if p.start(mid).is_some_and(|s| s < t) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let slices: Vec<Vec<(usize, usize)>> = bounds
        .windows(2)
        .map(|b| {
            parts
                .iter()
                .map(|p| (first_at(p, b[0]), if b[1] == i64::MAX { p.len() } else { first_at(p, b[1]) }))
                .collect()
        })
        .collect();
    let max_end = |sl: &Vec<(usize, usize)>| {
        sl.iter().zip(parts).flat_map(|(&(lo, hi), p)| (lo..hi).filter_map(|i| p.get(i)).map(|r| r.1)).max()
    };
    let scan = |sl: &Vec<(usize, usize)>, mut reach: i64| {
        let (mut gaps, mut kept) = (0usize, Longest::default());
        let key = |p: usize, i: usize| if sl[p].0 + i < sl[p].1 { parts[p].start(sl[p].0 + i) } else { None };
        for (p, i) in crate::merge::MergeByKey::new(parts.len(), key) {
            let Some((s, en)) = parts[p].get(sl[p].0 + i) else { continue };
            if reach != i64::MIN && s > reach {
                gaps += 1;
                kept.offer(Gap { start: reach, end: s }, keep(s - reach));
            }
            reach = reach.max(en);
        }
        (gaps, kept, reach)
    };
    if slices.len() == 1 {
        return scan(&slices[0], i64::MIN);
    }
    let ends: Vec<Option<i64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = slices.iter().map(|sl| sc.spawn(move || max_end(sl))).collect();
        hs.into_iter().map(|h| h.join().expect("a gap slice panicked")).collect()
    });
    // the reach before slice k: the largest end of the rows of the slices before it
    let mut before = Vec::with_capacity(slices.len());
    let mut r = i64::MIN;
    for e in &ends {
        before.push(r);
        r = r.max(e.unwrap_or(i64::MIN));
    }
    let done: Vec<(usize, Longest, i64)> = std::thread::scope(|sc| {
        let hs: Vec<_> = slices.iter().zip(&before).map(|(sl, &b)| sc.spawn(move || scan(sl, b))).collect();
        hs.into_iter().map(|h| h.join().expect("a gap slice panicked")).collect()
    });
    let mut out = (0usize, Longest::default(), i64::MIN);
    for (g, k, reach) in done {
        out.0 += g;
        out.1.absorb(k);
        out.2 = out.2.max(reach);
    }
    out
}

/// The three longest gaps seen and the gaps asked for, longest first then by start.
#[derive(Default)]
struct Longest {
    top: Vec<Gap>,
    asked: Vec<Gap>,
}

impl Longest {
    fn rank(g: &Gap) -> (std::cmp::Reverse<i64>, i64) {
        (std::cmp::Reverse(g.end - g.start), g.start)
    }

    fn offer(&mut self, g: Gap, asked: bool) {
        if asked {
            self.asked.push(g);
            return;
        }
        if self.top.len() < 3 || Self::rank(&g) < Self::rank(&self.top[self.top.len() - 1]) {
            let at = self.top.partition_point(|x| Self::rank(x) < Self::rank(&g));
            self.top.insert(at, g);
            self.top.truncate(3);
        }
    }

    /// Take in the gaps another [`Longest`] kept.
    fn absorb(&mut self, o: Longest) {
        self.asked.extend(o.asked);
        for g in o.top {
            self.offer(g, false);
        }
    }

    /// The three longest of all, then the asked ones.
    fn into_sorted(self) -> Vec<Gap> {
        let mut v: Vec<(Gap, bool)> = self.asked.into_iter().map(|g| (g, true)).collect();
        v.extend(self.top.into_iter().map(|g| (g, false)));
        v.sort_by_key(|(g, _)| Self::rank(g));
        v.into_iter().enumerate().filter(|(i, (_, asked))| *i < 3 || *asked).map(|(_, (g, _))| g).collect()
    }
}

/// G5's window, its gaps and the kernel starts in each tenth ([`device_gaps_and_tenths`]), as kept on the export.
pub(super) type G5Window = Option<(GpuWindow, Option<[i64; 10]>)>;

/// The key G5's window is kept under on the export ([`Export::remember`]): it depends on the rows and on these
/// two thresholds only.
pub(super) fn g5_key(t: &super::Thresholds) -> String {
    format!("gate-check G5 window: max_gap_share {:e}, min_gap_ns {}", t.max_gap_share, (t.min_gap_ms * 1e6) as i64)
}

pub fn g5_traffic(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G5", "traffic", "share");
    if cx.opts.tier != Tier::Throughput {
        return Ok(g.skip("throughput tier only"));
    }
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let t = &cx.opts.thresholds;
    let min_gap_ns = (t.min_gap_ms * 1e6) as i64;
    let long = |len: i64, window: i64| len as f64 / window as f64 > t.max_gap_share && len >= min_gap_ns;
    // the window and its gaps depend on the rows and these two thresholds only: a second gate document on the
    // same export (gate-check --report: the report's evidence ran the gates first) reads them back
    let key = g5_key(t);
    let found = match e.recall::<G5Window>(&key) {
        Some(v) => v,
        None => {
            let v = std::sync::Arc::new(device_gaps_and_tenths(e, &long)?);
            e.remember(key, v.clone());
            v
        }
    };
    let Some((w, tenths)) = found.as_ref() else {
        return Ok(g.skip("no GPU rows (G3 decides)"));
    };
    let (first, last, gaps) = (w.first, w.last, &w.kept);
    let window = (last - first).max(1);
    g.evidence.push(format!(
        "{}: GPU activity window {} – {} ({}), {} empty stretches",
        e.name(),
        secs(first),
        secs(last),
        ms(window),
        w.gaps
    ));
    // the rate, for the reader: kernel starts in each tenth of the window
    if let Some(tenths) = tenths {
        g.evidence.push(format!(
            "kernel starts per tenth of the window: {}",
            tenths.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
        ));
    }
    for gap in gaps.iter().take(3) {
        g.evidence.push(format!(
            "empty {} – {} ({}, {:.1} % of the window)",
            secs(gap.start),
            secs(gap.end),
            ms(gap.end - gap.start),
            100.0 * (gap.end - gap.start) as f64 / window as f64
        ));
    }
    let Some(longest) = gaps.first().copied() else {
        return Ok(g.decide(false, 0.0, Some(t.max_gap_share), "the GPU is never idle inside its activity window"));
    };
    let len = longest.end - longest.start;
    let share = len as f64 / window as f64;
    g.at_ns = Some(longest.start);
    let long: Vec<&Gap> = gaps.iter().filter(|x| long(x.end - x.start, window)).collect();
    Ok(if !long.is_empty() {
        let where_: Vec<String> = long.iter().map(|x| format!("{} – {}", secs(x.start), secs(x.end))).collect();
        // where in the window: a stretch in its first quarter is most likely a one-time warm-up inside it
        let early = (longest.start - first) as f64 <= 0.25 * window as f64;
        let cause = if early {
            "early in the window: most likely a one-time warm-up inside it (compilation, autotuning, weight load, CUDA-graph capture), else the load started late; start the capture after warm-up (--delay, or a capture range opened after warm-up) and under steady load"
        } else {
            "the load stopped or stalled, or a one-time step (a compilation of a new shape, a checkpoint) ran inside the window; re-capture under steady load, after warm-up"
        };
        g.decide(
            true,
            share,
            Some(t.max_gap_share),
            format!(
                "no kernel ran for {} ({:.1} % of the {} GPU activity window, above {:.0} % and ≥ {} ms) at {}: traffic was not steady: {cause}",
                ms(len),
                share * 100.0,
                ms(window),
                t.max_gap_share * 100.0,
                t.min_gap_ms,
                where_.join(", ")
            ),
        )
    } else {
        g.decide(
            false,
            share,
            Some(t.max_gap_share),
            format!(
                "kernels across the {} GPU activity window; longest empty stretch {} ({:.1} %) at {}; long means above {:.0} % of the window and ≥ {} ms",
                ms(window),
                ms(len),
                share * 100.0,
                secs(longest.start),
                t.max_gap_share * 100.0,
                t.min_gap_ms
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gaps kept are the three longest and every asked gap, in the order of a full sort (length
    /// descending, then start), whatever the order they come in.
    #[test]
    fn longest_equals_a_full_sort() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut gaps = Vec::new();
        for i in 0..5000i64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // few distinct lengths: ties are decided by the start
            gaps.push(Gap { start: i * 1000, end: i * 1000 + (x % 40) as i64 });
        }
        for asked in [|_: i64| false, |l: i64| l >= 38, |l: i64| l % 7 == 0] {
            let mut kept = Longest::default();
            for g in &gaps {
                kept.offer(*g, asked(g.end - g.start));
            }
            let mut all = gaps.clone();
            all.sort_by(|a, b| (b.end - b.start).cmp(&(a.end - a.start)).then(a.start.cmp(&b.start)));
            let want: Vec<Gap> =
                all.iter().enumerate().filter(|(i, g)| *i < 3 || asked(g.end - g.start)).map(|(_, g)| *g).collect();
            assert_eq!(kept.into_sorted(), want);
        }
    }
}

#[cfg(test)]
mod slice_tests {
    use super::*;
    use crate::export::rows::PartView;

    /// Any number of slices finds the gaps one merge of all rows finds: parts of random rows (touching, nested,
    /// zero-length, equal starts across parts), gaps asked for by length.
    #[test]
    fn sliced_gaps_are_the_merged_gaps() {
        let mut rng = crate::test_rng::xorshift(7);
        for round in 0..200 {
            let nparts = 1 + rng(5) as usize;
            let parts: Vec<Vec<(i64, i64)>> = (0..nparts)
                .map(|_| {
                    let mut t = rng(50);
                    let mut v: Vec<(i64, i64)> = (0..rng(60))
                        .map(|_| {
                            t += rng(20);
                            (t, t + rng(30))
                        })
                        .collect();
                    v.sort_by_key(|r| r.0);
                    v
                })
                .collect();
            let owned: Vec<crate::export::rows::OwnIntervals> =
                parts.iter().map(|p| p.iter().copied().collect()).collect();
            let views: Vec<PartView<'_>> = owned.iter().map(PartView::Own).collect();
            let keep = |len: i64| len > 12;
            let one = gaps_in_slices(&views, &keep, 1);
            let one = (one.0, one.1.into_sorted(), one.2);
            for n in 2..9 {
                let got = gaps_in_slices(&views, &keep, n);
                assert_eq!((got.0, got.1.into_sorted(), got.2), one, "round {round}, {n} slices");
            }
        }
    }
}
