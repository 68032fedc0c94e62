//! Phases 1 to 3 as one scan: the table checks, the parallel reads of the device and runtime tables, and
//! phase 1, loading the kept occurrences.

use super::*;

/// Phases 1 to 3: the device tables are read in parallel threads (each large table split into rowid ranges,
/// each range on its own read-only connection: [`crate::export::bulk::read_device_chunks`]) while the
/// occurrences load and the runtime calls join on the export's connection; then the device rows are
/// attributed and swept. Errors come in the order of a serial run: tables, NVTX, runtime, device rows.
/// With `share_stats`, the reads also compute the timed-stats facts of the tables they read whole
/// ([`Export::put_stats`]): the caller's other questions (the evidence of a report, the gates) then need no
/// scan of their own.
pub(super) fn run_scans(
    export: &Export,
    opts: &RangesOptions,
    want: Option<Want<'_>>,
    share_stats: bool,
    keep_occurrences: bool,
    ready: Option<RowsReady<'_>>,
    pre: Option<Preloaded>,
) -> Result<Work> {
    check_tables(export)?;
    let pre = pre.filter(|p| p.fits(opts) && !keep_occurrences);
    let stats = |t: &str| if share_stats { export.stats_wanted(t) } else { None };
    let dev_tables: Vec<(DeviceKind, crate::export::TableInfo, Option<Keep>)> = DeviceKind::ALL
        .iter()
        .filter_map(|k| export.table(k.table()).map(|t| (*k, t.clone(), stats(k.table()))))
        .collect();
    let rt_stats = stats(schema::RUNTIME);
    let src = export.source();
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let threads = crate::export::rows::scan_threads();
    // with intervals (the step budget), the kernels' names too: its device timelines read them from this scan
    let detail = if want.is_some() {
        if export.has_table(schema::KERNEL) {
            export.require(schema::KERNEL, &[cols::DEMANGLED_NAME])?;
        }
        crate::export::rows::DeviceDetail::Names
    } else {
        crate::export::rows::DeviceDetail::None
    };
    // the runtime calls too, in parallel batches (the join and the collected intervals do not depend on the
    // order in which they arrive: [`analyze_with_intervals`] sorts each occurrence's calls on all their fields)
    let rt_table = export.table(schema::RUNTIME).cloned();
    let (tx, rx) = std::sync::mpsc::sync_channel::<crate::export::rows::RuntimeBatch>(16);
    let mut rx = Some(rx);
    std::thread::scope(|s| {
        let (src_r, cancel_r) = (&src, &cancel);
        let reader = s.spawn(|| crate::export::bulk::read_device_chunks(&src, &dev_tables, threads, detail, &cancel));
        let rt_reader =
            match rt_table.as_ref() {
                Some(t) => Some(s.spawn(move || {
                    crate::export::bulk::read_runtime_batches(src_r, t, threads, rt_stats, cancel_r, tx)
                })),
                None => {
                    drop(tx);
                    rx = None;
                    None
                }
            };
        let mut ph = crate::phase::Phases::new("sqlite-ranges");
        let main = (|| -> Result<(Work, CorrTable, bool)> {
            let mut w = match pre {
                Some(Preloaded(part, _)) => Work::of_load(part, None),
                None => load(export, opts, keep_occurrences, stats(schema::NVTX_EVENTS))?,
            };
            ph.mark("load");
            // a first pass keeps nothing for the second when no occurrence is kept (no step to collect; the
            // runtime table is then not read: no occurrence to attribute to)
            let want = want.filter(|&(_, keep_marks)| !(keep_marks && w.occ.is_empty()));
            if let Some((want, keep_marks)) = want {
                let want: Vec<bool> = w.label_names.iter().map(|l| want(l)).collect();
                let per_occ = IntervalTable::new(w.occ.len(), |i| want[w.occ[i].label as usize]);
                w.collect = Some(Collect {
                    per_occ,
                    rows: CapturedRows::default(),
                    calls_by_part: Vec::new(),
                    runtime_read: false,
                    device_ids: Vec::new(),
                    nameless: Vec::new(),
                    sync_ids: FxMap::default(),
                    keep_marks,
                    marks: None,
                });
            }
            let (corr, consumed) = join_runtime(export, &mut w, rx.take())?;
            ph.mark("join_runtime");
            Ok((w, corr, consumed))
        })();
        // a reader never waits on a consumer that is gone
        drop(rx.take());
        if main.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let rt_skips =
            rt_reader.map(|h| h.join().unwrap_or_else(|_| Err(Error::input("the runtime table reader panicked"))));
        let chunks = reader.join().unwrap_or_else(|_| Err(Error::input("the device table reader panicked")));
        ph.mark("device_rows_wait");
        let (mut w, corr, consumed) = main?;
        let (rt_skips, rt_stats) = if consumed { rt_skips.transpose()?.unzip() } else { (None, None) };
        if let Some(sk) = &rt_skips {
            crate::export::merge_skips(&mut w.row_skips, sk);
        }
        if let Some(st) = rt_stats.flatten() {
            export.put_stats(schema::RUNTIME, st);
        }
        let mut chunks = chunks?;
        let stats = chunks.iter_mut().map(|c| (c.kind, c.stats.take())).collect();
        let rows = match w.collect.as_mut() {
            Some(c) => {
                c.runtime_read = consumed;
                let chunks = std::sync::Arc::new(chunks);
                put_device_stats(export, stats, Some(&chunks));
                let calls = RuntimeCalls::new(std::mem::take(&mut c.calls_by_part));
                let runtime_skips = rt_skips.unwrap_or_default();
                c.rows = CapturedRows { device: chunks.clone(), runtime: std::sync::Arc::new(calls), runtime_skips };
                if let Some(f) = ready {
                    f(&mut c.rows);
                }
                DeviceRows::Shared(chunks)
            }
            None => {
                put_device_stats(export, stats, None);
                DeviceRows::Own(chunks)
            }
        };
        attribute_device_rows(&mut w, corr, rows)?;
        ph.mark("attribute_device_rows+sweep");
        Ok(w)
    })
}

/// Is there an `NVTX_EVENTS` table to read? An absent one (nsys creates it only when it records an NVTX event:
/// [`crate::export::NvtxRecorded::absent_table_is_empty`]) reads as the empty table the `--lazy=false` export of
/// the same capture has; one that nsys's own count says should be there is the error naming it. Only
/// [`document`] (the `sqlite-ranges` contract) requires the table itself.
pub(super) fn nvtx_table(export: &Export) -> Result<bool> {
    if !export.has_table(schema::NVTX_EVENTS) && export.nvtx_recorded()?.absent_table_is_empty() {
        return Ok(false);
    }
    export.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?;
    Ok(true)
}

/// The timed-stats facts the device reads computed, per table ([`Export::put_stats`]); their kept intervals
/// the rows of `shared` when the chunks are shared ([`crate::export::rows::DeviceDetail::Names`]).
pub(super) fn put_device_stats(
    export: &Export,
    mut stats: Vec<(Option<DeviceKind>, Option<crate::export::rows::TimedStats>)>,
    shared: Option<&std::sync::Arc<Vec<DeviceChunk>>>,
) {
    if let Some(rows) = shared {
        for (at, (_, st)) in stats.iter_mut().enumerate() {
            if let Some(st) = st {
                st.attach_rows(rows, at);
            }
        }
    }
    for kind in DeviceKind::ALL {
        let parts: Vec<_> = stats.iter_mut().filter(|c| c.0 == Some(kind)).map(|c| c.1.take()).collect();
        if let Some(st) = crate::export::rows::merge_stats(parts) {
            export.put_stats(kind.table(), st);
        }
    }
}

/// Every table of the contract, validated before any work (a schema mismatch is an error, never a partial
/// report).
pub(super) fn check_tables(export: &Export) -> Result<()> {
    nvtx_table(export)?;
    export.require(schema::STRING_IDS, &cols::STRING_IDS)?;
    for (t, cols) in OPTIONAL_TABLES {
        export.optional(t, cols)?;
    }
    Ok(())
}

/// Phase 1: validate every table (a schema mismatch is an error before any work, never a partial report),
/// load the kept occurrences and intern their labels (`nvtx_stats`: the NVTX read is also the table's
/// timed-stats scan).
pub(super) fn load(export: &Export, opts: &RangesOptions, keep_loaded: bool, nvtx_stats: Option<Keep>) -> Result<Work> {
    nvtx_table(export)?;
    export.require(schema::STRING_IDS, &cols::STRING_IDS)?;
    let mut tables_present = Vec::new();
    for (t, cols) in OPTIONAL_TABLES {
        if export.optional(t, cols)?.is_some() {
            tables_present.push(t.to_string());
        }
    }
    progress(&format!("reading {}", schema::NVTX_EVENTS));
    // the raw labels are wanted only without folding, and a user's own with the occurrences as read (keep_loaded:
    // what nvtx-readiness reads, `load_occurrences_framework_folded`)
    let at_read = match (opts.fold && !raw_path_forced(), keep_loaded || framework_path_forced()) {
        (false, _) => occurrences::AtRead::Raw,
        (true, false) => occurrences::AtRead::Fold,
        (true, true) => occurrences::AtRead::FoldFramework,
    };
    let mut loaded = load_interned(export, opts, nvtx_stats, at_read)?;
    let slices = thread_slices(&loaded.occurrences);
    // labels as ids; folding runs once per distinct raw label (with its occurrence count, first-seen order:
    // what one call per occurrence gives), and the folded labels are numbered in order of first occurrence
    let mut label_names: Vec<String> = Vec::new();
    let mut tally = opts.fold.then(|| loaded.tally.take().unwrap_or_default());
    let mut domains = Domains::default();
    let occ: Vec<COcc> = {
        let mut count = vec![0u64; loaded.labels.len()];
        // the first occurrence of each label (its key orders the fold report's examples)
        let mut first = vec![usize::MAX; loaded.labels.len()];
        for (i, o) in loaded.occurrences.iter().enumerate() {
            count[o.label as usize] += 1;
            if first[o.label as usize] == usize::MAX {
                first[o.label as usize] = i;
            }
        }
        let mut final_of: Vec<u32> = vec![u32::MAX; loaded.labels.len()];
        let mut ids = crate::fx::Interner::new();
        for r in loaded.occurrences.iter().map(|o| o.label) {
            if final_of[r as usize] == u32::MAX {
                let raw = &loaded.labels[r as usize];
                let label = match tally.as_mut() {
                    Some(_) if loaded.prefolded.get(r as usize) == Some(&true) => raw.as_str(),
                    Some(t) => {
                        let o = &loaded.occurrences[first[r as usize]];
                        let at = super::fold_read::ExampleAt {
                            gtid: o.global_tid,
                            start: o.start,
                            end: o.end,
                            event_type: o.event_type as i64,
                            domain: o.domain_id,
                        };
                        let id = t.add(raw, count[r as usize], at);
                        t.label(id)
                    }
                    None => raw.as_str(),
                };
                let (id, new) = ids.intern(label.as_bytes());
                if new {
                    label_names.push(label.to_string());
                }
                final_of[r as usize] = id;
            }
        }
        let mut c_occ = |o: &occurrences::Interned| COcc {
            start: o.start,
            end: o.end,
            label: final_of[o.label as usize],
            depth: o.depth,
            parent: o.parent,
            kind: domains.kind(o.domain_id, o.event_type),
        };
        if keep_loaded {
            loaded.occurrences.iter().map(c_occ).collect()
        } else {
            // collected in place, then shrunk: the occurrences as read and the kept ones are not both alive
            let mut v: Vec<COcc> = std::mem::take(&mut loaded.occurrences).into_iter().map(|o| c_occ(&o)).collect();
            v.shrink_to_fit();
            v
        }
    };
    let mut slice_of: FxMap<i64, (u32, usize, usize)> = FxMap::default();
    for (ti, &(g, lo, hi)) in slices.iter().enumerate() {
        slice_of.insert(g, (ti as u32, lo, hi));
    }
    let folded = tally.map(|t| t.report(crate::labels::REPORT_LIMIT, label_names.len() as u64));
    let part = LoadPart {
        opts: opts.clone(),
        tables_present,
        skipped: loaded.skipped,
        truncated: std::mem::take(&mut loaded.truncated),
        occ: std::sync::Arc::new(occ),
        label_names,
        domains,
        slices,
        slice_of,
        folded,
    };
    Ok(Work::of_load(part, keep_loaded.then_some(loaded)))
}

/// What phase 1 ([`load`]) gives: the kept occurrences with their labels and threads. An analysis may hand it
/// to the next one on the same export with the same options ([`Preloaded`]): the step budget chooses its step
/// label with one analysis and collects the chosen label's intervals with a second, which then does not read
/// `NVTX_EVENTS` again.
#[derive(Clone)]
pub(super) struct LoadPart {
    pub(super) opts: RangesOptions,
    tables_present: Vec<String>,
    skipped: Skipped,
    truncated: Vec<occurrences::TruncatedRange>,
    /// Shared with the analysis that loaded them (its [`OccurrenceTable`] keeps them): never copied.
    pub(super) occ: std::sync::Arc<Vec<COcc>>,
    pub(super) label_names: Vec<String>,
    domains: Domains,
    pub(super) slices: Vec<(i64, usize, usize)>,
    pub(super) slice_of: FxMap<i64, (u32, usize, usize)>,
    folded: Option<crate::labels::FoldReport>,
}

impl Work {
    fn of_load(p: LoadPart, loaded: Option<occurrences::InternedOccurrences>) -> Work {
        let LoadPart {
            tables_present, skipped, truncated, occ, label_names, domains, slices, slice_of, folded, ..
        } = p;
        let n = occ.len();
        let nth = slices.len();
        Work {
            tables_present,
            skipped,
            truncated,
            row_skips: RowSkips::new(),
            occ,
            label_names,
            domains,
            slices,
            slice_of,
            runtime_calls: vec![0; n],
            chain_counts: Vec::new(),
            dev: DevTable::default(),
            sync_hits: FxMap::default(),
            syncs: SyncTable::default(),
            th_runtime: vec![0u64; nth],
            th_device: vec![0u64; nth],
            proc_idx: FxMap::default(),
            chains: Chains::new(),
            device_pids: FxSet::default(),
            per_device: Vec::new(),
            kernels_total: 0,
            kernel_work_total: 0,
            kernels_attr: 0,
            kernel_work_attr: 0,
            ambiguous_rows: 0,
            folded,
            collect: None,
            loaded,
        }
    }

    /// The part of phase 1 (a copy, for the next analysis: [`Preloaded`]).
    pub(super) fn load_part(&self, opts: &RangesOptions) -> LoadPart {
        LoadPart {
            opts: opts.clone(),
            tables_present: self.tables_present.clone(),
            skipped: self.skipped,
            truncated: self.truncated.clone(),
            occ: std::sync::Arc::clone(&self.occ),
            label_names: self.label_names.clone(),
            domains: self.domains.clone(),
            slices: self.slices.clone(),
            slice_of: self.slice_of.clone(),
            folded: self.folded.clone(),
        }
    }
}

/// Phase 1 of an earlier analysis of the same export, for the next one ([`LoadPart`]): used when its options
/// are the same, else the next analysis loads again. With [`analyze_preloading`], also the rows it read and
/// their attribution ([`FirstPass`]: [`collect_preloaded`] reads no table).
#[derive(Clone)]
pub struct Preloaded(pub(super) LoadPart, pub(super) Option<Box<FirstPass>>);

impl Preloaded {
    pub(super) fn fits(&self, opts: &RangesOptions) -> bool {
        self.0.opts == *opts
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: fold every label after the read (the raw path), to compare it with folding while reading.
    pub(super) static FORCE_RAW_PATH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    pub(super) static FORCE_FRAMEWORK_PATH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn raw_path_forced() -> bool {
    #[cfg(test)]
    return FORCE_RAW_PATH.with(|f| f.get());
    #[cfg(not(test))]
    false
}

/// Tests compare the documents read with every label folded at read and with only a framework's.
fn framework_path_forced() -> bool {
    #[cfg(test)]
    return FORCE_FRAMEWORK_PATH.with(|f| f.get());
    #[cfg(not(test))]
    false
}
