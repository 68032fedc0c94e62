//! Phases 4 to 6: per-thread diagnostics, per-label statistics, and the finished document with its notes.

use super::*;

/// Phase 4: one diagnostic per thread with kept occurrences: its process mapping (PROCESSES, else the
/// device tables' globalPid, else unmapped: listed, never guessed), its name, what it owns.
pub(super) fn map_threads(export: &Export, w: &Work) -> Result<Vec<ThreadDiagnostics>> {
    progress("summarising");
    let processes = if w.present(schema::PROCESSES) { export.process_ids()? } else { Default::default() };
    let mut thread_name_ids: FxMap<i64, i64> = FxMap::default();
    if w.present(schema::THREAD_NAMES) && !w.slices.is_empty() {
        export.thread_names(|g, nid| {
            if w.slice_of.contains_key(&g) {
                thread_name_ids.insert(g, nid); // the last row for the thread wins
            }
        })?;
    }
    let names = export.strings_for(&thread_name_ids.values().copied().collect())?;
    let mut thread_diagnostics = Vec::with_capacity(w.slices.len());
    for (ti, &(g, lo, hi)) in w.slices.iter().enumerate() {
        let ns = ns_of(g);
        let mapping = if processes.contains(&ns) {
            "processes"
        } else if w.device_pids.contains(&ns) {
            "device_namespace_fallback"
        } else {
            "unmapped"
        };
        let is_main = tid_of(g) == pid_of(g);
        let mut attention = Vec::new();
        if !is_main && w.th_device[ti] > 0 {
            attention.push("non_main_thread_owns_device_work".to_string());
        }
        if mapping != "processes" {
            attention.push(mapping.to_string());
        }
        thread_diagnostics.push(ThreadDiagnostics {
            global_tid: g,
            pid: pid_of(g),
            tid: tid_of(g),
            namespace: ns,
            mapping: mapping.to_string(),
            is_main_thread: is_main,
            thread_name: thread_name_ids.get(&g).and_then(|nid| names.get(nid).cloned()),
            occurrences: (hi - lo) as u64,
            runtime_calls: w.th_runtime[ti],
            device_rows_attributed: w.th_device[ti],
            attention,
        });
    }
    Ok(thread_diagnostics)
}

/// Per label, what phase 5 sums over its occurrences in one pass over them.
#[derive(Default)]
struct LabelAcc {
    walls: Vec<i64>,
    with_device_work: u64,
    runtime_calls: u64,
    kernels: u64,
    memcpys: u64,
    memsets: u64,
    graph_traces: u64,
    /// kernel_work, coverage, busy, span, idle in span, uncovered host time ([`SUMS`]).
    sums: [i64; 6],
    /// By sync API index.
    sync: BTreeMap<u8, SyncStat>,
    depths: BTreeMap<u32, u64>,
    /// By parent label id (u32::MAX: none).
    parents: FxMap<u32, u64>,
    /// The first sum that overflowed, in the order of the occurrences and of the fields.
    overflow: Option<&'static str>,
}

/// The fields of [`LabelAcc::sums`], as named in the overflow error.
const SUMS: [&str; 6] = [
    "kernel_work_ns",
    "host_range_kernel_coverage_ns",
    "kernel_busy_union_ns",
    "kernel_span_ns",
    "gpu_idle_within_kernel_span_ns",
    "uncovered_host_time_ns",
];

/// Phase 5: per label, the sums over its occurrences (sorted by host wall time descending, then label), and
/// the high-cardinality label groups. One pass over the occurrences in their order, summing into each label's
/// accumulator (a pass per label, gathering its occurrences, spent most of its time waiting for memory: 2 M
/// PyTorch op ranges of 45 labels).
pub(super) fn aggregate(export: &Export, w: &Work) -> Result<(Vec<RangeStats>, Vec<HighCardinality>)> {
    let (occ, label_names) = (&w.occ, &w.label_names);
    let mut acc: Vec<LabelAcc> = (0..label_names.len()).map(|_| LabelAcc::default()).collect();
    // each label's walls allocated once at their number (2 M op ranges: 16 MB, not up to twice that by doubling)
    let mut counts = vec![0usize; label_names.len()];
    occ.iter().for_each(|o| counts[o.label as usize] += 1);
    acc.iter_mut().zip(counts).for_each(|(a, n)| a.walls.reserve_exact(n));
    let mut syncs = w.syncs.cursor();
    for (i, o) in occ.iter().enumerate() {
        let a = &mut acc[o.label as usize];
        let wall = o.end - o.start;
        a.walls.push(wall);
        if a.overflow.is_some() {
            continue;
        }
        let (m, n) = (w.dev.met(i), w.dev.counts(i));
        if n.device_rows() > 0 {
            a.with_device_work += 1;
        }
        a.runtime_calls += u64::from(w.runtime_calls[i]);
        a.kernels += u64::from(n.kernels);
        a.memcpys += u64::from(n.memcpys);
        a.memsets += u64::from(n.memsets);
        a.graph_traces += u64::from(n.graph_traces);
        let vals = [
            n.kernel_work_ns,
            m.coverage_ns,
            m.busy_ns,
            m.span_ns(),
            m.span_ns() - m.busy_ns,
            (wall - m.coverage_ns).max(0),
        ];
        // checked sums: timestamps are bounded by the export layer, but many huge rows could still overflow
        for (k, v) in vals.into_iter().enumerate() {
            match a.sums[k].checked_add(v).filter(|x| *x != i64::MAX) {
                Some(x) => a.sums[k] = x,
                None => a.overflow = Some(SUMS[k]),
            }
            if a.overflow.is_some() {
                break;
            }
        }
        if a.overflow.is_some() {
            continue;
        }
        for (api, st) in syncs.of(i) {
            let e = a.sync.entry(api).or_default();
            e.calls += st.calls;
            match e.total_ns.checked_add(st.total_ns).filter(|x| *x != i64::MAX) {
                Some(x) => e.total_ns = x,
                None => {
                    a.overflow = Some("sync total_ns");
                    break;
                }
            }
        }
        *a.depths.entry(o.depth).or_default() += 1;
        let parent = if o.parent == u32::MAX { u32::MAX } else { occ[o.parent as usize].label };
        *a.parents.entry(parent).or_default() += 1;
    }
    // the labels in byte order: the first overflow reported is that of the first label in that order
    let mut order: Vec<usize> = (0..label_names.len()).filter(|&l| !acc[l].walls.is_empty()).collect();
    order.sort_unstable_by(|&a, &b| label_names[a].as_str().cmp(label_names[b].as_str()));
    let mut ranges = Vec::with_capacity(order.len());
    for &l in &order {
        let a = std::mem::take(&mut acc[l]);
        ranges.push(range_stats(export, label_names, &label_names[l], a)?);
    }
    ranges.sort_by(|a, b| {
        b.host_wall_time_ns.cmp(&a.host_wall_time_ns).then_with(|| a.label.as_bytes().cmp(b.label.as_bytes()))
    });
    let high_cardinality_labels = high_cardinality(order.iter().map(|&l| label_names[l].as_str()));
    Ok((ranges, high_cardinality_labels))
}

/// One label's statistics from its accumulator; the error naming the first sum that overflows.
fn range_stats(export: &Export, label_names: &[String], label: &str, a: LabelAcc) -> Result<RangeStats> {
    let overflow = |field: &str| {
        Error::input(format!(
            "{}: label {label:?}: {field} overflows 64-bit nanoseconds: the export's timestamps are not real; nothing was written",
            export.name()
        ))
    };
    let mut walls = a.walls;
    walls.sort_unstable();
    // walls are non-negative: their sum overflows in any order when it does in sorted order
    let mut host_wall_time_ns = 0i64;
    for &w in &walls {
        host_wall_time_ns =
            host_wall_time_ns.checked_add(w).filter(|x| *x != i64::MAX).ok_or_else(|| overflow("host_wall_time_ns"))?;
    }
    if let Some(field) = a.overflow {
        return Err(overflow(field));
    }
    let [kernel_work_ns, coverage, busy, span, idle, uncovered] = a.sums;
    let mut r = RangeStats {
        label: label.to_string(),
        occurrences: walls.len() as u64,
        occurrences_with_device_work: a.with_device_work,
        runtime_calls: a.runtime_calls,
        kernels: a.kernels,
        memcpys: a.memcpys,
        memsets: a.memsets,
        graph_traces: a.graph_traces,
        host_wall_time_ns,
        wall_ns_min: walls[0],
        wall_ns_median: walls[(walls.len() - 1) / 2],
        wall_ns_max: walls[walls.len() - 1],
        kernel_work_ns,
        host_range_kernel_coverage_ns: coverage,
        host_range_kernel_coverage_fraction: 0.0,
        kernel_busy_union_ns: busy,
        kernel_span_ns: span,
        gpu_idle_within_kernel_span_ns: idle,
        uncovered_host_time_ns: uncovered,
        gpu_busy_fraction: None,
        sync: a.sync.into_iter().map(|(api, st)| (SYNC_APIS[api as usize].to_string(), st)).collect(),
        depths: a.depths,
        parents: BTreeMap::new(),
    };
    for (p, n) in a.parents {
        let name = if p == u32::MAX { String::new() } else { label_names[p as usize].clone() };
        *r.parents.entry(name).or_default() += n;
    }
    if r.host_wall_time_ns > 0 {
        r.host_range_kernel_coverage_fraction =
            (r.host_range_kernel_coverage_ns as f64 / r.host_wall_time_ns as f64).min(1.0);
    }
    if r.kernel_span_ns > 0 {
        r.gpu_busy_fraction = Some(r.kernel_busy_union_ns as f64 / r.kernel_span_ns as f64);
    }
    Ok(r)
}

/// The note on the ranges closed by the capture's end: how many, of which labels (up to five), and why they are
/// no occurrence.
pub fn truncated_note(n: u64, listed: &[occurrences::TruncatedRange]) -> String {
    let mut by_label: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
    for t in listed {
        let e = by_label.entry(t.label.as_str()).or_insert((0, 0));
        e.0 += 1;
        e.1 = e.1.max(t.end - t.start);
    }
    let mut names: Vec<String> = by_label
        .iter()
        .take(5)
        .map(|(l, (c, w))| format!("{l} ×{c} (open for at least {:.3} ms)", *w as f64 / 1e6))
        .collect();
    if by_label.len() > 5 {
        names.push(format!("{} more label(s)", by_label.len() - 5));
    }
    format!(
        "{n} NVTX range(s) end at the capture's end (ANALYSIS_DETAILS.duration): nsys closed them when the capture stopped, so their end and wall are the capture's, not theirs; they are marked truncated (truncated_ranges) and kept out of every statistic like an open range: {}",
        names.join(", ")
    )
}

/// Phase 6: the notes, the document, and (when asked) the public per-occurrence vectors.
pub(super) fn finish(
    export: &Export,
    opts: &RangesOptions,
    mut w: Work,
    ranges: Vec<RangeStats>,
    thread_diagnostics: Vec<ThreadDiagnostics>,
    high_cardinality_labels: Vec<HighCardinality>,
    detail: bool,
) -> Result<(SqliteRangesDoc, Detail)> {
    let notes = notes_of(export, opts, &w, &thread_diagnostics)?;
    let (kernels_total, kernels_attr, kernel_work_total, kernel_work_attr) =
        (w.kernels_total, w.kernels_attr, w.kernel_work_total, w.kernel_work_attr);
    if progress_on() {
        eprintln!();
    }

    let (schema, tool) = SqliteRangesDoc::header();
    let size = std::fs::metadata(export.path()).map(|m| m.len()).unwrap_or(0);
    let doc = SqliteRangesDoc {
        schema,
        tool,
        source: RangesSource {
            path: export.name(),
            size,
            range_prefix: opts.range_prefix.clone(),
            nsys_version: export.nsys_version()?,
            kind: "sqlite".into(),
            exported_with: None,
            window: opts.window.map(|(start, end)| TimeWindow { start, end }),
            capture: Some(crate::export::capture_info(export)?),
        },
        tables_present: w.tables_present.clone(),
        ranges,
        thread_diagnostics,
        totals: Totals {
            per_device: std::mem::take(&mut w.per_device),
            kernels_total,
            kernel_work_total_ns: kernel_work_total,
            kernels_attributed: kernels_attr,
            kernel_work_attributed_ns: kernel_work_attr,
            kernels_unattributed: kernels_total - kernels_attr,
            kernel_work_unattributed_ns: kernel_work_total - kernel_work_attr,
            device_rows_ambiguous: w.ambiguous_rows,
        },
        skipped: w.skipped,
        truncated_ranges: std::mem::take(&mut w.truncated),
        skipped_rows: std::mem::take(&mut w.row_skips),
        high_cardinality_labels,
        folded: w.folded.take(),
        notes,
        iterations: None,
    };
    if !detail {
        return Ok((doc, None));
    }
    Ok((doc, Some(OccurrenceTable::of_work(w))))
}

/// The notes of the document (what a reader must know to read its numbers); an error when the KERNEL rows'
/// total duration overflows.
fn notes_of(
    export: &Export,
    opts: &RangesOptions,
    w: &Work,
    thread_diagnostics: &[ThreadDiagnostics],
) -> Result<Vec<String>> {
    let mut notes = vec![
        "Nested labels overlap by construction: never add numbers of labels at different depths (see each label's `depths` and `parents`).".to_string(),
        "uncovered_host_time_ns is host time not covered by device work; it is NOT GPU idle (gpu_idle_within_kernel_span_ns is the device bubble).".to_string(),
        "kernel_busy_union_ns, kernel_span_ns and host_range_kernel_coverage_ns cover all device work (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE); only kernel_work_ns is kernels alone.".to_string(),
        "Ranges still open when the capture ended are either absent from the export (nsys ended the application at cudaProfilerStop) or exported with their end clipped to the end of the capture (--capture-range-end=stop).".to_string(),
    ];
    if !schema::DEVICE_TABLES.iter().any(|t| w.present(t)) {
        notes.push("No CUDA device table in this export (a capture without CUDA): no device work is attributed; that is a result, not an error.".to_string());
    } else if !w.present(schema::RUNTIME) {
        notes.push(format!(
            "No {} table: device work cannot be joined to ranges, all of it is unattributed.",
            schema::RUNTIME
        ));
    }
    let graph_mode = export.graph_trace_mode()?.is_some_and(|m| m.mode == "graph");
    // an empty GRAPH_TRACE table is what `nsys export --lazy=false` writes for every capture: not graph level
    if w.present(schema::GRAPH_TRACE) && export.count_rows(schema::GRAPH_TRACE)? > 0 {
        notes.push("CUDA graphs were traced at graph level: each replay is one opaque GRAPH_TRACE row (counted in graph_traces, not kernels).".to_string());
    } else if graph_mode {
        notes.push(format!("CUDA graphs were traced at graph level ({} CUDA_GRAPH_TRACE_OPTIONS:MODE = Graph) and the export has no GRAPH_TRACE table: graph replays left no GPU row at all (seen with nsys 2023.4), so their device work is invisible here. Capture with --cuda-graph-trace=node.", schema::META_DATA_CAPTURE));
    }
    let unmapped = thread_diagnostics.iter().filter(|t| t.mapping == "unmapped").count();
    if unmapped > 0 {
        notes.push(format!("{unmapped} thread(s) with kept ranges map to no process: their runtime calls are counted, no device work is attributed to them (see thread_diagnostics)."));
    }
    let fallback = thread_diagnostics.iter().filter(|t| t.mapping == "device_namespace_fallback").count();
    if fallback > 0 {
        notes.push(format!("{fallback} thread(s) belong to a process missing from PROCESSES (nsys omits traced fork children) and were mapped through the device tables' globalPid (mapping = device_namespace_fallback)."));
    }
    let (kernels_total, kernels_attr, kernel_work_total, kernel_work_attr) =
        (w.kernels_total, w.kernels_attr, w.kernel_work_total, w.kernel_work_attr);
    if kernel_work_total == i64::MAX {
        return Err(Error::input(format!(
            "{}: the KERNEL rows' total duration overflows 64-bit nanoseconds: the export's timestamps are not real; nothing was written",
            export.name()
        )));
    }
    if w.ambiguous_rows > 0 {
        notes.push(format!("{} device rows have a (globalPid, correlationId) that more than one {} call shares: the join is ambiguous, so they are attributed to no range (totals.device_rows_ambiguous), never to several.", w.ambiguous_rows, schema::RUNTIME));
    }
    if kernels_total > kernels_attr {
        notes.push(format!(
            "{} of {} KERNEL rows ({} ns of {} ns) are not attributed to any kept range: reported in totals, never dropped.",
            kernels_total - kernels_attr,
            kernels_total,
            kernel_work_total - kernel_work_attr,
            kernel_work_total
        ));
    }
    if w.skipped.unlabeled + w.skipped.open_or_inverted > 0 {
        notes.push(format!(
            "Skipped NVTX range rows: {} without a message, {} with a NULL or inverted interval.",
            w.skipped.unlabeled, w.skipped.open_or_inverted
        ));
    }
    if w.skipped.closed_by_capture_end > 0 {
        notes.push(truncated_note(w.skipped.closed_by_capture_end, &w.truncated));
    }
    if let Some(s) = crate::export::describe_skips(&w.row_skips) {
        notes.push(format!("Skipped rows with a NULL or inverted interval (never summed, never attributed): {s}."));
    }
    if let Some((ws, we)) = opts.window {
        notes.push(format!("--window {ws}:{we}: only occurrences lying inside it were kept (start >= {ws} and end <= {we}); totals and per_device still cover the whole capture."));
    }
    Ok(notes)
}
