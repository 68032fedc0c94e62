//! Phase 2: the runtime join (each runtime call to the kept occurrences of its thread that contain it).

use super::*;

/// Phase 2: stream the runtime calls once; each call inside kept occurrences of its thread counts for them
/// (calls, blocking syncs) and records `(process, correlationId) → occurrence chain` for the device rows.
pub(super) fn join_runtime(
    export: &Export,
    w: &mut Work,
    rx: Option<std::sync::mpsc::Receiver<crate::export::rows::RuntimeBatch>>,
) -> Result<(CorrTable, bool)> {
    let mut consumed = false;
    let mut corr: Vec<CorrEnt> = Vec::new();
    let mut corr_wide: FxMap<(i64, i64), u32> = FxMap::default();
    let n = w.occ.len();
    // the calls are read when an occurrence can be attributed to, or when the caller collects the rows (the
    // device timelines of a capture without any range link its device rows to their calls)
    let scan = n > 0 || w.collect.is_some();
    if w.present(schema::RUNTIME) && !scan {
        // not scanned (no occurrence to attribute to): its skipped rows are still counted
        export.count_interval_skips(&[schema::RUNTIME], &mut w.row_skips)?;
    }
    if w.present(schema::RUNTIME) && scan {
        let tbl = schema::RUNTIME;
        let sync_ids = sync_api_ids(export)?;
        let mut stabs = Stabs::new();
        // an upper bound, reserved once (untouched pages cost no memory): no copy while growing
        corr.reserve_exact(export.row_count_hint(tbl));
        let mut hits: Vec<u32> = Vec::with_capacity(16);
        let mut last_hits: Vec<u32> = Vec::new();
        let mut last_chain = u32::MAX;
        let mut last_ns = i64::MIN;
        let mut last_pidx = 0u32;
        let mut seen = 0u64;
        let Work { occ, slice_of, runtime_calls, sync_hits, th_runtime, proc_idx, chains, row_skips, collect, .. } = w;
        // `bound`: an upper bound of the rows of the part, reserved once (untouched pages cost no memory)
        let mut body = |r: crate::export::RuntimeRow, part: usize, bound: usize| -> Result<()> {
            seen += 1;
            if let (Some(c), Some(t), Some(n)) = (collect.as_mut(), r.global_tid, r.name_id) {
                if c.calls_by_part.len() <= part {
                    c.calls_by_part.resize_with(part + 1, CallPart::default);
                }
                if c.calls_by_part[part].capacity() == 0 {
                    c.calls_by_part[part].reserve_exact(bound);
                }
                let call = CapturedCall {
                    start: r.start,
                    end: r.end,
                    global_tid: t,
                    correlation_id: r.correlation_id,
                    name_id: n,
                };
                c.calls_by_part[part].push(call);
            }
            if let (Some(c), Some(t), None) = (collect.as_mut(), r.global_tid, r.name_id) {
                c.nameless.push(NamelessCall { start: r.start, end: r.end, global_tid: t });
            }
            if seen & 0xF_FFFF == 0 {
                progress(&format!("{tbl}: {seen} rows"));
            }
            let Some(gtid) = r.global_tid else { return Ok(()) };
            let (rs, re) = (r.start, r.end);
            hits.clear();
            if let Some(&(ti, lo, hi)) = slice_of.get(&gtid) {
                stabs.query(occ, ti as usize, part, (lo, hi), rs, &mut hits);
                if !hits.is_empty() {
                    th_runtime[ti as usize] += 1;
                }
            }
            let sync = r.name_id.and_then(|id| sync_ids.get(&id).copied());
            for &h in &hits {
                if let Some(iv) = collect.as_mut().and_then(|c| c.per_occ.get_mut(h as usize)) {
                    iv.runtime.push(EnclosedRuntimeCall {
                        start: rs,
                        end: re,
                        name_id: r.name_id,
                        sync: sync.is_some(),
                    });
                }
                // 4 bytes an occurrence (2 M op ranges: 8 MB, not 16); a count past them is refused, never wrapped
                let n = &mut runtime_calls[h as usize];
                *n = n.checked_add(1).ok_or_else(|| {
                    Error::input(format!("{tbl}: a range encloses more than {} runtime calls: not supported", u32::MAX))
                })?;
                if let Some(api) = sync {
                    let s = sync_hits.entry((h as u64) << 8 | api as u64).or_default();
                    s.calls += 1;
                    // saturating: an overflow is reported by the label sums (aggregate), never wrapped
                    s.total_ns = s.total_ns.saturating_add(re - rs);
                }
            }
            // every call with a correlation id is keyed, those outside kept occurrences too (chain u32::MAX):
            // a device row whose key several calls share is ambiguous, wherever the calls are
            let Some(cid) = r.correlation_id else { return Ok(()) };
            let chain = if hits.is_empty() {
                u32::MAX
            } else if hits == last_hits && last_chain != u32::MAX {
                last_chain
            } else {
                let c = chains.intern(&hits);
                last_hits.clone_from(&hits);
                last_chain = c;
                c
            };
            let ns = ns_of(gtid);
            let pidx = if ns == last_ns {
                last_pidx
            } else {
                let next = proc_idx.len() as u32;
                let p = *proc_idx.entry(ns).or_insert(next);
                last_ns = ns;
                last_pidx = p;
                p
            };
            if (0..=u32::MAX as i64).contains(&cid) && pidx < (1 << 30) {
                corr.push(CorrEnt { key: ((pidx as u64) << 32) | cid as u64, chain });
                return Ok(());
            }
            // the same (process, correlationId) on two runtime calls: ambiguous, never a union of both
            corr_wide.entry((ns, cid)).and_modify(|c| *c = AMBIGUOUS).or_insert(chain);
            Ok(())
        };
        match rx {
            // batches of parallel readers (the join does not depend on the row order)
            Some(rx) => {
                consumed = true;
                for b in rx.iter() {
                    for r in b.rows {
                        body(r, b.chunk, b.chunk_bound)?;
                    }
                }
            }
            None => {
                let hint = export.row_count_hint(tbl);
                export.runtime_calls(row_skips, |r| body(r, 0, hint))?
            }
        }
        if let Some(c) = collect.as_mut() {
            c.sync_ids = sync_ids;
        }
    }

    settle_correlations(&mut corr);
    corr_wide.retain(|_, c| *c != u32::MAX);
    // the chain map is only needed to intern; the chains themselves stay
    w.chains.freeze();
    Ok((CorrTable { corr, wide: corr_wide }, consumed))
}

/// The sync API index ([`SYNC_APIS`]) of each `StringIds` id that names a blocking sync API (one scan of the
/// strings).
fn sync_api_ids(export: &Export) -> Result<FxMap<i64, u8>> {
    let mut sync_ids: FxMap<i64, u8> = FxMap::default();
    export.for_each_string(|id, v| {
        if v.len() < 64 && v.starts_with(b"cu") {
            if let Some(api) = std::str::from_utf8(v).ok().and_then(normalize_sync_api) {
                let idx = SYNC_APIS.iter().position(|a| *a == api).unwrap() as u8;
                sync_ids.insert(id, idx);
            }
        }
    })?;
    Ok(sync_ids)
}

/// Sorts the correlation entries by key; a key seen on several calls is ambiguous (its device rows are
/// attributed to none of them, and counted), a key of one call outside kept occurrences is dropped.
fn settle_correlations(corr: &mut Vec<CorrEnt>) {
    if !corr.windows(2).all(|w| { w[0].key } <= { w[1].key }) {
        corr.sort_unstable_by_key(|e| e.key);
    }
    let len = corr.len();
    let (mut i, mut o) = (0, 0);
    while i < len {
        let key = corr[i].key;
        let mut ch = corr[i].chain;
        let mut j = i + 1;
        while j < len && { corr[j].key } == key {
            ch = AMBIGUOUS;
            j += 1;
        }
        if ch != u32::MAX {
            corr[o] = CorrEnt { key, chain: ch };
            o += 1;
        }
        i = j;
    }
    corr.truncate(o);
}

/// The stabbing queries of the runtime join ("which kept occurrences of this thread contain the time t"),
/// answered incrementally: the calls of one thread and one part of the table mostly come in time order, and
/// for `t ≥` the previous `t'` of the same (thread, part), `{i < cut(t): end_i ≥ t}` is the previous answer
/// without the occurrences that ended before `t`, plus those that started in `(t', t]` and are still open.
/// A call earlier than the previous one asks the tree of the occurrences' ends, built at the first such call
/// (none in a table whose calls come in time order per thread: the tree's memory is not spent).
pub(super) struct Stabs {
    /// Per (thread slice, part): `(t, cut, answer)` of the last query.
    last: FxMap<(u32, u32), (i64, usize, Vec<u32>)>,
    tree: Option<MaxTree>,
}

impl Stabs {
    pub(super) fn new() -> Stabs {
        Stabs { last: FxMap::default(), tree: None }
    }

    /// `out` = the indices `i` in `[lo, cut)` with `occ[i].end >= t`, ascending, where `cut` is the first index
    /// of the thread's slice `[lo, hi)` whose start is after `t`.
    pub(super) fn query(
        &mut self,
        occ: &[COcc],
        thread: usize,
        part: usize,
        (lo, hi): (usize, usize),
        t: i64,
        out: &mut Vec<u32>,
    ) {
        let e = self.last.entry((thread as u32, part as u32)).or_insert((i64::MIN, lo, Vec::new()));
        if t >= e.0 {
            let mut cut = e.1;
            while cut < hi && occ[cut].start <= t {
                cut += 1;
            }
            e.2.retain(|&i| occ[i as usize].end >= t);
            e.2.extend((e.1..cut).filter(|&i| occ[i].end >= t).map(|i| i as u32));
            (e.0, e.1) = (t, cut);
        } else {
            let cut = lo + occ[lo..hi].partition_point(|o| o.start <= t);
            e.2.clear();
            let tree = self.tree.get_or_insert_with(|| MaxTree::new(&occ.iter().map(|o| o.end).collect::<Vec<_>>()));
            tree.collect_ge(lo, cut, t, &mut e.2);
            (e.0, e.1) = (t, cut);
        }
        out.clone_from(&e.2);
    }
}
