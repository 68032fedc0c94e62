//! The intervals of an analysis with intervals, computed from what an earlier analysis of the same export with
//! the same options kept ([`analyze_preloading`]): the step budget chooses its step label with one analysis,
//! then collects the label's intervals here without reading a table again or redoing the join.
//!
//! Exact by construction: the earlier analysis is the same analysis (same options, same rows), so its metrics
//! are the later one's, and what decides the intervals is kept from it: each device row's mark (its tag, hence
//! its chain of occurrences, its device index and its end, as the sweep read them) and the runtime calls (those
//! with an API name id in [`CapturedRows`], the others apart), which are stabbed against the wanted occurrences
//! by the join's own rule ([`Stabs::query`]: on the occurrence's thread, `start <= call.start <= end`).

use super::runtime::Stabs;
use super::*;

/// A runtime call with a thread and no API name id: counted by the join, not in [`CapturedRows::runtime`].
#[derive(Debug, Clone, Copy)]
pub(super) struct NamelessCall {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) global_tid: i64,
}

/// Each device row's mark once swept (its tag, by chunk, then row; none for a chunk of no table) and the tags.
#[derive(Clone)]
pub(super) struct DeviceMarks {
    pub(super) marks: Vec<Vec<u32>>,
    pub(super) tags: device::Tags,
}

/// What an analysis keeps for a later collection of intervals ([`collect_preloaded`]).
#[derive(Clone)]
pub(super) struct FirstPass {
    rows: CapturedRows,
    runtime_read: bool,
    device_ids: Vec<i64>,
    nameless: Vec<NamelessCall>,
    sync_ids: FxMap<i64, u8>,
    marks: DeviceMarks,
    /// The occurrence chains of the marks ([`Chains`], frozen).
    chain_offs: Vec<usize>,
    chain_data: Vec<u32>,
}

impl FirstPass {
    /// What an analysis collecting with `keep_marks` kept, with its chains; None when the device rows were not
    /// marked apart.
    pub(super) fn of(c: Collect, chains: Chains) -> Option<FirstPass> {
        let Collect { rows, runtime_read, device_ids, nameless, sync_ids, marks, .. } = c;
        let marks = marks?;
        Some(FirstPass {
            rows,
            runtime_read,
            device_ids,
            nameless,
            sync_ids,
            marks,
            chain_offs: chains.offs,
            chain_data: chains.data,
        })
    }
}

/// What [`analyze_with_intervals_preloaded`] returns besides the analysis, computed from what
/// [`analyze_preloading`] kept, reading no table: the analysis is then `analyze_preloading`'s (the same options
/// give the same analysis). `Err(pre)` when `pre` cannot give it (not kept by `analyze_preloading`, or other
/// options): [`analyze_with_intervals_preloaded`] then reads again.
pub fn collect_preloaded(
    pre: Preloaded,
    opts: &RangesOptions,
    want: &dyn Fn(&str) -> bool,
) -> std::result::Result<Collected, Box<Preloaded>> {
    if !pre.fits(opts) || pre.1.is_none() {
        return Err(Box::new(pre));
    }
    let Preloaded(part, Some(first)) = pre else { unreachable!("checked") };
    let f = *first;
    let want: Vec<bool> = part.label_names.iter().map(|l| want(l)).collect();
    let wanted: Vec<bool> = part.occ.iter().map(|o| want[o.label as usize]).collect();
    let n = part.occ.len();
    let mut per_occ = IntervalTable::default();
    if wanted.contains(&true) {
        // the wanted occurrences apart, the others gone before the intervals are allocated
        let sub = Wanted::of(&part, &wanted);
        drop(part);
        per_occ = IntervalTable::new(n, |i| wanted[i]);
        sub.runtime_of(&f, &mut per_occ);
        drop(sub);
        device_of(&wanted, &f, &mut per_occ);
    }
    let FirstPass { rows, runtime_read, device_ids, nameless, sync_ids, marks, chain_offs, chain_data } = f;
    // the attribution's marks go before the intervals are sorted
    drop((nameless, sync_ids, marks, chain_offs, chain_data));
    Ok(Collected { intervals: sorted_intervals(per_occ, n), rows, runtime_read, occurrences: None, device_ids })
}

/// The wanted occurrences, in their order (by thread, then start), with their indices and thread slices.
struct Wanted {
    occ: Vec<COcc>,
    orig: Vec<u32>,
    slice_of: FxMap<i64, (u32, usize, usize)>,
}

impl Wanted {
    fn of(part: &scan::LoadPart, wanted: &[bool]) -> Wanted {
        let mut w = Wanted { occ: Vec::new(), orig: Vec::new(), slice_of: FxMap::default() };
        for &(g, lo, hi) in &part.slices {
            let from = w.occ.len();
            for i in (lo..hi).filter(|&i| wanted[i]) {
                w.occ.push(part.occ[i]);
                w.orig.push(i as u32);
            }
            if w.occ.len() > from {
                w.slice_of.insert(g, (w.slice_of.len() as u32, from, w.occ.len()));
            }
        }
        w
    }

    /// The runtime calls of the wanted occurrences: each call stabbed against the wanted occurrences of its
    /// thread by the join's rule.
    fn runtime_of(&self, f: &FirstPass, per_occ: &mut IntervalTable) {
        let mut stabs = Stabs::new();
        let mut hits: Vec<u32> = Vec::new();
        let mut call = |part: usize, gtid: i64, start: i64, end: i64, name_id: Option<i64>| {
            let Some(&(ti, lo, hi)) = self.slice_of.get(&gtid) else { return };
            stabs.query(&self.occ, ti as usize, part, (lo, hi), start, &mut hits);
            let sync = name_id.is_some_and(|id| f.sync_ids.contains_key(&id));
            for &h in &hits {
                let iv = per_occ.get_mut(self.orig[h as usize] as usize).expect("a wanted occurrence is asked for");
                iv.runtime.push(EnclosedRuntimeCall { start, end, name_id, sync });
            }
        };
        let parts = f.rows.runtime.parts();
        for (p, cp) in parts.iter().enumerate() {
            for c in cp.iter() {
                call(p, c.global_tid, c.start, c.end, Some(c.name_id));
            }
        }
        for c in &f.nameless {
            call(parts.len(), c.global_tid, c.start, c.end, None);
        }
    }
}

/// The device rows of the wanted occurrences: each row to the wanted occurrences of its mark's chain, with its
/// mark's device and end, in table order (the order of equal intervals after the stable sort, as the sweep's
/// stable merge gives it). The wanted occurrences are resolved once per tag, not per row.
fn device_of(wanted: &[bool], f: &FirstPass, per_occ: &mut IntervalTable) {
    let DeviceMarks { marks, tags } = &f.marks;
    // each tag's wanted occurrences: `occs[off[t]..off[t + 1]]`
    let mut off: Vec<usize> = Vec::with_capacity(tags.len() + 1);
    let mut occs: Vec<u32> = Vec::new();
    off.push(0);
    for t in tags.iter() {
        if t.chain != u32::MAX {
            occs.extend(chain_in(&f.chain_offs, &f.chain_data, t.chain).iter().filter(|&&o| wanted[o as usize]));
        }
        off.push(occs.len());
    }
    if occs.is_empty() {
        return;
    }
    let chunks = || f.rows.device.iter().zip(marks).filter_map(|(c, m)| Some((c.kind?, c, m)));
    // the rows of each tag, then of each occurrence: its rows' vector allocated once
    let mut rows_of_tag = vec![0usize; tags.len()];
    for (_, _, m) in chunks() {
        for &t in m {
            rows_of_tag[t as usize] += 1;
        }
    }
    let mut need = vec![0usize; per_occ.len()];
    for (t, &n) in rows_of_tag.iter().enumerate().filter(|(_, &n)| n > 0) {
        for &o in &occs[off[t]..off[t + 1]] {
            need[o as usize] += n;
        }
    }
    drop(rows_of_tag);
    for (o, &n) in need.iter().enumerate().filter(|(_, &n)| n > 0) {
        if let Some(iv) = per_occ.get_mut(o) {
            iv.device.reserve_exact(n);
        }
    }
    drop(need);
    for (kind, c, m) in chunks() {
        for (r, &t) in c.rows.iter().zip(m) {
            let (a, b) = (off[t as usize], off[t as usize + 1]);
            if a == b {
                continue;
            }
            let tg = tags.get(t);
            let end = if r.dur == u32::MAX { tg.end } else { r.start + r.dur as i64 };
            for &o in &occs[a..b] {
                let iv = per_occ.get_mut(o as usize).expect("a wanted occurrence is asked for");
                iv.device.push(CorrelatedDeviceRow { start: r.start, end, kind, device: tg.dev });
            }
        }
    }
}
