//! Phase 3: device rows attributed to occurrence chains through `(globalPid, correlationId)`, then swept in
//! start order into per-occurrence and per-device interval unions.

use super::*;

/// The device rows the attribution reads, and where it keeps each row's mark (its chain, then its tag): in the
/// rows' own `aux` when the analysis holds them alone (`sqlite-ranges`: no second copy of anything), else in a
/// vector apart, the rows shared as read with the step budget's timelines.
pub(super) enum DeviceRows {
    Own(Vec<DeviceChunk>),
    Shared(std::sync::Arc<Vec<DeviceChunk>>),
}

impl DeviceRows {
    fn chunks(&self) -> &[DeviceChunk] {
        match self {
            DeviceRows::Own(v) => v,
            DeviceRows::Shared(a) => a,
        }
    }

    /// Each chunk's meta and its rows with their marks (none yet).
    fn marked(&mut self) -> (Vec<ChunkMeta<'_>>, Vec<Marked<'_>>) {
        match self {
            DeviceRows::Own(v) => v
                .iter_mut()
                .map(|c| {
                    let DeviceChunk { kind, rows, long, wide, .. } = c;
                    (ChunkMeta { kind: *kind, long, wide }, Marked::Aux(rows))
                })
                .unzip(),
            DeviceRows::Shared(a) => a
                .iter()
                .map(|c| (ChunkMeta { kind: c.kind, long: &c.long, wide: &c.wide }, Marked::Apart(&c.rows, Vec::new())))
                .unzip(),
        }
    }
}

/// One chunk's rows and their marks ([`DeviceRows`]).
pub(super) enum Marked<'a> {
    /// In the rows' `aux` (the correlation id until marked).
    Aux(&'a mut [PackedDeviceRow]),
    /// Apart (filled by [`chain_rows`]).
    Apart(&'a [PackedDeviceRow], Vec<u32>),
}

impl Marked<'_> {
    /// The marks kept apart (none when they are in the rows' `aux`).
    fn into_apart(self) -> Vec<u32> {
        match self {
            Marked::Aux(_) => Vec::new(),
            Marked::Apart(_, m) => m,
        }
    }

    fn rows(&self) -> &[PackedDeviceRow] {
        match self {
            Marked::Aux(r) => r,
            Marked::Apart(r, _) => r,
        }
    }

    fn mark(&self, i: usize) -> u32 {
        match self {
            Marked::Aux(r) => r[i].aux,
            Marked::Apart(_, m) => m[i],
        }
    }

    fn set(&mut self, i: usize, mark: u32) {
        match self {
            Marked::Aux(r) => r[i].aux = mark,
            Marked::Apart(_, m) => m[i] = mark,
        }
    }
}

/// What the attribution reads of a chunk besides its rows.
#[derive(Clone, Copy)]
pub(super) struct ChunkMeta<'a> {
    kind: Option<DeviceKind>,
    long: &'a [(usize, i64)],
    wide: &'a [(usize, Option<i64>)],
}

/// Phase 3: the device rows (read in bulk, in table order: [`run_scans`]) attributed through `(globalPid,
/// correlationId)` to the occurrence chain of their runtime call: each row marked ([`DeviceRows`]) with its
/// chain, then its tag; then [`sweep`]. More than `u32::MAX` device rows (all tables together) are refused: the
/// counts are 32-bit ([`DevCounts`]).
pub(super) fn attribute_device_rows(w: &mut Work, ct: CorrTable, mut rows: DeviceRows) -> Result<()> {
    progress("attributing device rows");
    refuse_too_many_rows(rows.chunks())?;
    let CorrTable { corr, wide: corr_wide } = ct;
    let (segs, dev_ids) = segments_of(w, rows.chunks());
    let (metas, marked) = rows.marked();
    // each row's chain, chunk by chunk in parallel threads
    let (counts, mut marked): (Vec<KernelTotals>, Vec<Marked>) = {
        let (corr, corr_wide) = (&corr, &corr_wide);
        std::thread::scope(|s| {
            let handles: Vec<_> = marked
                .into_iter()
                .zip(metas.iter().zip(&segs))
                .map(|(mut m, (meta, sg))| {
                    s.spawn(move || {
                        let n = chain_rows(*meta, &mut m, sg, corr, corr_wide);
                        (n, m)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a device row attribution thread panicked")).unzip()
        })
    };
    drop(corr);
    drop(corr_wide);
    w.syncs = SyncTable::new(std::mem::take(&mut w.sync_hits));
    // sqlite-ranges' peak is next (the sweep); the report's analysis (collecting intervals) does not trim: its
    // step budget allocates again at once, and the pages trimmed would be faulted in afresh (measured at 5 M
    // kernels: the chain's CPU 3.78 -> 3.60 s, peak RSS unchanged)
    if w.collect.is_none() {
        crate::memory::release_free_memory();
    }
    w.chain_counts = vec![DevCounts::default(); w.chains.len()];
    for c in counts {
        w.kernels_total += c.kernels_total;
        w.kernel_work_total = w.kernel_work_total.saturating_add(c.kernel_work_total);
        w.kernels_attr += c.kernels_attr;
        w.kernel_work_attr = w.kernel_work_attr.saturating_add(c.kernel_work_attr);
        w.ambiguous_rows += c.ambiguous_rows;
    }
    // then, in one pass, the rows counted for the occurrences of their chain and tagged
    let tags = tag_rows(w, &metas, &segs, &mut marked);
    w.dev = DevTable::of_chains(w.occ.len(), &w.chains, &w.chain_counts);
    crate::phase::timed("sqlite-ranges", "sweep", || sweep(w, &metas, &marked, &tags, &dev_ids));
    // the marks and tags, kept for a later collection of other labels' intervals (replay::FirstPass)
    if let Some(c) = w.collect.as_mut().filter(|c| c.keep_marks) {
        let marks = marked.into_iter().map(Marked::into_apart).collect();
        c.marks = Some(DeviceMarks { marks, tags });
    } else {
        drop((tags, marked));
    }
    // the rows (when the analysis held them alone) go before the occurrences' counts are spread
    drop(metas);
    drop(rows);
    spread_counts(w);
    Ok(())
}

/// The input error for a capture with more device rows than 32-bit counts hold (none is near: 100 M kernels is
/// a 12 GB export).
fn refuse_too_many_rows(chunks: &[DeviceChunk]) -> Result<()> {
    let n: u64 = chunks.iter().map(|c| c.rows.len() as u64).sum();
    if n <= u64::from(u32::MAX) {
        return Ok(());
    }
    let mut tables: Vec<&str> = chunks.iter().filter_map(|c| c.kind).map(|k| k.table()).collect();
    tables.dedup();
    Err(Error::input(format!(
        "{}: {n} device rows together, more than {} (the 32-bit row counts): not supported",
        tables.join(", "),
        u32::MAX
    )))
}

/// Each chunk's runs of rows of one process and device ([`SegOf`]), in row order, and the devices (a few per
/// chunk) by index; the chunks' skipped rows counted, their processes noted.
pub(super) fn segments_of(w: &mut Work, chunks: &[DeviceChunk]) -> (Vec<Vec<SegOf>>, Vec<i64>) {
    let mut dev_ids: Vec<i64> = Vec::new();
    let mut dev_idx: FxMap<i64, u32> = FxMap::default();
    let mut segs: Vec<Vec<SegOf>> = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        crate::export::merge_skips(&mut w.row_skips, &chunk.skips);
        if chunk.kind.is_none() {
            segs.push(Vec::new());
            continue;
        }
        let mut v = Vec::with_capacity(chunk.segs.len());
        for (k, &(lo, gpid, dev)) in chunk.segs.iter().enumerate() {
            let hi = chunk.segs.get(k + 1).map_or(chunk.rows.len(), |n| n.0);
            if hi <= lo {
                continue;
            }
            let dev = dev.unwrap_or(-1);
            let next = dev_ids.len() as u32;
            let di = *dev_idx.entry(dev).or_insert_with(|| {
                dev_ids.push(dev);
                next
            });
            if let Some(g) = gpid {
                w.device_pids.insert(g);
            }
            let pidx = gpid.and_then(|g| w.proc_idx.get(&g).copied());
            v.push(SegOf { rows: lo..hi, gpid, pidx, dev: di });
        }
        segs.push(v);
    }
    (segs, dev_ids)
}

/// A run of rows of one chunk with the same process and device: the device's index, the process's index in the
/// correlation table.
pub(super) struct SegOf {
    rows: std::ops::Range<usize>,
    gpid: Option<i64>,
    pidx: Option<u32>,
    dev: u32,
}

/// The kernel rows of a chunk, and those with a chain.
#[derive(Default)]
pub(super) struct KernelTotals {
    kernels_total: u64,
    kernel_work_total: i64,
    kernels_attr: u64,
    kernel_work_attr: i64,
    /// Device rows (every kind) whose key several runtime calls share: attributed to none.
    ambiguous_rows: u64,
}

/// Each row's chain (`u32::MAX` for none), through `(process, correlationId)`, by row; the kernel totals.
pub(super) fn chain_rows(
    chunk: ChunkMeta,
    m: &mut Marked,
    segs: &[SegOf],
    corr: &[CorrEnt],
    corr_wide: &FxMap<(i64, i64), u32>,
) -> KernelTotals {
    let mut n = KernelTotals::default();
    let Some(kind) = chunk.kind else { return n };
    if let Marked::Apart(rows, marks) = m {
        *marks = vec![u32::MAX; rows.len()];
    }
    let (mut ends, mut wide_i, mut hint) = (Ends::new(chunk.long), 0usize, 0usize);
    for sg in segs {
        for i in sg.rows.clone() {
            let r = m.rows()[i];
            let (s, e) = (r.start, ends.next(r));
            let correlation_id = if r.aux == u32::MAX {
                wide_i += 1;
                chunk.wide[wide_i - 1].1
            } else {
                Some(r.aux as i64)
            };
            let mut chain = match (sg.gpid, sg.pidx, correlation_id) {
                (Some(g), Some(p), Some(c)) => chain_of(corr, corr_wide, &mut hint, g, p, c),
                _ => u32::MAX,
            };
            if chain == AMBIGUOUS {
                n.ambiguous_rows += 1;
                chain = u32::MAX;
            }
            if kind == DeviceKind::Kernel {
                n.kernels_total += 1;
                n.kernel_work_total = n.kernel_work_total.saturating_add(e - s);
                if chain != u32::MAX {
                    n.kernels_attr += 1;
                    n.kernel_work_attr = n.kernel_work_attr.saturating_add(e - s);
                }
            }
            m.set(i, chain);
        }
    }
    n
}

/// The chain of `(process, correlationId)`: the packed table (device rows come nearly in correlation order: the
/// last hit and its successor are tried first), else the map of keys that do not pack.
pub(super) fn chain_of(
    corr: &[CorrEnt],
    corr_wide: &FxMap<(i64, i64), u32>,
    hint: &mut usize,
    g: i64,
    p: u32,
    c: i64,
) -> u32 {
    if !((0..=u32::MAX as i64).contains(&c) && p < (1 << 30)) {
        return corr_wide.get(&(g, c)).copied().unwrap_or(u32::MAX);
    }
    let k = ((p as u64) << 32) | c as u64;
    let at = if *hint < corr.len() && { corr[*hint].key } == k {
        Some(*hint)
    } else if *hint + 1 < corr.len() && { corr[*hint + 1].key } == k {
        Some(*hint + 1)
    } else {
        let i = corr.partition_point(|e| { e.key } < k);
        (i < corr.len() && { corr[i].key } == k).then_some(i)
    };
    match at {
        Some(i) => {
            *hint = i;
            corr[i].chain
        }
        None => u32::MAX,
    }
}

/// The ends of a chunk's rows read in row order: a row lasting `u32::MAX` ns or more takes the next entry of
/// [`DeviceChunk::long`].
pub(super) struct Ends<'a> {
    long: &'a [(usize, i64)],
    next: usize,
}

impl<'a> Ends<'a> {
    fn new(long: &'a [(usize, i64)]) -> Ends<'a> {
        Ends { long, next: 0 }
    }

    fn next(&mut self, r: PackedDeviceRow) -> i64 {
        if r.dur == u32::MAX {
            self.next += 1;
            self.long[self.next - 1].1
        } else {
            r.start + r.dur as i64
        }
    }
}

/// A run of `rows` rows of `kind` with the same chain, lasting `work` ns together, added to the chain's counts
/// (sums of non-negative durations saturate the same in any grouping).
pub(super) fn add_run(w: &mut Work, kind: DeviceKind, (chain, rows, work): (u32, u32, i64)) {
    if chain == u32::MAX || rows == 0 {
        return;
    }
    let m = &mut w.chain_counts[chain as usize];
    match kind {
        DeviceKind::Kernel => {
            m.kernels += rows;
            m.kernel_work_ns = m.kernel_work_ns.saturating_add(work);
        }
        DeviceKind::Memcpy => m.memcpys += rows,
        DeviceKind::Memset => m.memsets += rows,
        DeviceKind::GraphTrace => m.graph_traces += rows,
    }
}

/// The chains that counted device rows: their counts and their occurrences.
pub(super) fn counted_chains<'a>(
    chains: &'a Chains,
    counts: &'a [DevCounts],
) -> impl Iterator<Item = (&'a DevCounts, &'a [u32])> {
    counts.iter().enumerate().filter(|(_, cc)| cc.device_rows() > 0).map(|(c, cc)| (cc, chains.get(c as u32)))
}

/// Each chain's counts added to its occurrences, and its rows to the device rows of their threads (once per
/// thread of the chain).
pub(super) fn spread_counts(w: &mut Work) {
    let Work { chains, chain_counts, slices, th_device, dev, .. } = w;
    dev.counts = vec![DevCounts::default(); dev.met.len()];
    for (cc, occs) in counted_chains(chains, chain_counts) {
        // the occurrences ascend: a search only past the end of the last one's thread
        let mut end = 0;
        for &o in occs {
            if o as usize >= end {
                let th = slice_at(slices, o as usize);
                th_device[th as usize] += cc.device_rows();
                end = slices[th as usize].2;
            }
            if let Some(k) = dev.slot.get(o as usize) {
                dev.counts[k as usize].add(cc);
            }
        }
    }
    w.chain_counts = Vec::new();
}

/// Each row counted for the occurrences of its chain (its mark, by runs of rows with the same chain: the rows of
/// a launch come together), then tagged: its mark becomes `(chain, device)`, shared by the rows of a key, or its
/// own tag holding the end for a row lasting `u32::MAX` ns or more.
pub(super) fn tag_rows(w: &mut Work, chunks: &[ChunkMeta], segs: &[Vec<SegOf>], marked: &mut [Marked]) -> Tags {
    let mut tags = Tags::new(w.chains.len());
    let (mut last_key, mut last_tag) = ((u32::MAX, u32::MAX), u32::MAX);
    for ((chunk, sg), m) in chunks.iter().zip(segs).zip(marked) {
        let Some(kind) = chunk.kind else { continue };
        let mut ends = Ends::new(chunk.long);
        let mut run: (u32, u32, i64) = (u32::MAX, 0, 0);
        for sg in sg {
            for i in sg.rows.clone() {
                let r = m.rows()[i];
                let chain = m.mark(i);
                let end = ends.next(r);
                if chain != run.0 {
                    add_run(w, kind, run);
                    run = (chain, 0, 0);
                }
                run.1 += 1;
                run.2 = run.2.saturating_add(end - r.start);
                let tag = if r.dur != u32::MAX {
                    let key = (chain, sg.dev);
                    if key != last_key {
                        last_tag = tags.shared(chain, sg.dev);
                        last_key = key;
                    }
                    last_tag
                } else {
                    tags.own(Tag { chain, dev: sg.dev, end })
                };
                m.set(i, tag);
            }
        }
        add_run(w, kind, run);
    }
    tags.done()
}

/// The tags of [`tag_rows`]: one shared by the rows of each (chain, device), its own for each long row. Tag
/// `chain + 1` (no chain: 0) is the chain's on the first device it was seen on, kept as that device alone (4
/// bytes a chain, not a 16-byte [`Tag`]: 7 MB less on emit_nvtx ×10's 0.58 M chains, held to the second pass);
/// only a chain seen on a second device, or a long row, needs a whole tag, and only the first needs the map.
#[derive(Clone, Default)]
pub(super) struct Tags {
    /// Tag `t < first.len()`: chain `t - 1` on device `first[t]` ([`UNSEEN`] while no row of it is seen).
    first: Vec<u32>,
    /// Tags from `first.len()` on.
    whole: Vec<Tag>,
    more: FxMap<(u32, u32), u32>,
}

/// A chain's first tag before any row of it was seen.
pub(super) const UNSEEN: u32 = u32::MAX;

impl Tags {
    pub(super) fn new(chains: usize) -> Tags {
        Tags { first: vec![UNSEEN; chains + 1], whole: Vec::new(), more: FxMap::default() }
    }

    pub(super) fn len(&self) -> usize {
        self.first.len() + self.whole.len()
    }

    /// Tag `t` (no chain, no device, for one out of range).
    pub(super) fn get(&self, t: u32) -> Tag {
        match self.first.get(t as usize) {
            Some(&dev) => Tag { chain: t.wrapping_sub(1), dev, end: 0 },
            None => self.whole.get(t as usize - self.first.len()).copied().unwrap_or(Tag {
                chain: u32::MAX,
                dev: UNSEEN,
                end: 0,
            }),
        }
    }

    /// Every tag, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = Tag> + '_ {
        (0..self.len() as u32).map(|t| self.get(t))
    }

    pub(super) fn own(&mut self, tag: Tag) -> u32 {
        self.whole.push(tag);
        self.len() as u32 - 1
    }

    pub(super) fn shared(&mut self, chain: u32, dev: u32) -> u32 {
        let slot = chain.wrapping_add(1);
        match self.first[slot as usize] {
            UNSEEN => {
                self.first[slot as usize] = dev;
                slot
            }
            d if d == dev => slot,
            _ => match self.more.get(&(chain, dev)) {
                Some(&t) => t,
                None => {
                    let t = self.own(Tag { chain, dev, end: 0 });
                    self.more.insert((chain, dev), t);
                    t
                }
            },
        }
    }

    /// Tagging is over: the map goes.
    fn done(mut self) -> Tags {
        self.more = FxMap::default();
        self
    }
}

/// Phase 3b: the device records swept by start, merging per-occurrence and per-device interval unions
/// incrementally (busy, coverage, span), no per-occurrence interval list.
pub(super) fn sweep(w: &mut Work, chunks: &[ChunkMeta], marked: &[Marked], tags: &Tags, dev_ids: &[i64]) {
    progress("merging device intervals");
    // each chunk in start order (nsys writes its rows so: the order is a check, an index only for a chunk
    // that is not), then merged by start (the unions do not depend on the order of equal starts; the collected
    // intervals keep the table order of rows with equal starts: a stable sort)
    let order: Vec<Option<Vec<u32>>> = marked.iter().map(|m| start_order(m.rows())).collect();
    let row_at = |c: usize, i: usize| order[c].as_ref().map_or(Some(i), |o| o.get(i).map(|&j| j as usize));
    let key = |c: usize, i: usize| row_at(c, i).and_then(|j| marked[c].rows().get(j)).map(|r| r.start);
    // a row's mark is its tag: `(chain, device index, end of a long row)`; a row lasting `u32::MAX` ns or more
    // has `dur == u32::MAX` and its own tag holding its end
    let rows_out = crate::merge::MergeByKey::new(marked.len(), key).filter_map(|(c, i)| {
        let j = row_at(c, i)?;
        Some((marked[c].rows()[j], marked[c].mark(j), c))
    });
    // the collected device rows of an occurrence: as many as its chains counted, allocated once
    if let Some(c) = w.collect.as_mut() {
        let mut need = vec![0u64; w.occ.len()];
        for (cc, occs) in counted_chains(&w.chains, &w.chain_counts) {
            for &o in occs {
                need[o as usize] += cc.device_rows();
            }
        }
        for (o, &n) in need.iter().enumerate() {
            if let (Some(iv), true) = (c.per_occ.get_mut(o), n > 0) {
                iv.device.reserve_exact(n as usize);
            }
        }
    }

    // sweep: per-occurrence and per-device incremental unions
    #[derive(Clone, Copy)]
    struct Cur {
        s: i64,
        e: i64,
        open: bool,
    }
    let mut dcur = vec![Cur { s: 0, e: 0, open: false }; dev_ids.len()];
    let mut dtot: Vec<DeviceTotals> = dev_ids
        .iter()
        .map(|&d| DeviceTotals {
            device_id: d,
            device_rows: 0,
            busy_union_ns: 0,
            first_start: i64::MAX,
            last_end: i64::MIN,
        })
        .collect();
    if let Some(c) = w.collect.as_mut() {
        c.device_ids = dev_ids.to_vec();
    }
    let (occ, dev, chains, collect) = (&w.occ, &mut w.dev, &w.chains, &mut w.collect);
    for (r, mark, ci) in rows_out {
        let tg = tags.get(mark);
        let end = if r.dur == u32::MAX { tg.end } else { r.start + r.dur as i64 };
        let di = tg.dev as usize;
        let dt = &mut dtot[di];
        dt.device_rows += 1;
        dt.first_start = dt.first_start.min(r.start);
        dt.last_end = dt.last_end.max(end);
        let c = &mut dcur[di];
        if !c.open {
            *c = Cur { s: r.start, e: end, open: true };
        } else if r.start <= c.e {
            c.e = c.e.max(end);
        } else {
            dt.busy_union_ns += c.e - c.s;
            *c = Cur { s: r.start, e: end, open: true };
        }
        if tg.chain == u32::MAX {
            continue;
        }
        for &o in chains.get(tg.chain).iter() {
            let o = o as usize;
            if let (Some(iv), Some(kind)) = (collect.as_mut().and_then(|c| c.per_occ.get_mut(o)), chunks[ci].kind) {
                iv.device.push(CorrelatedDeviceRow { start: r.start, end, kind, device: di as u32 });
            }
            // a chain with rows: each of its occurrences has a slot
            let Some(k) = dev.slot.get(o) else { continue };
            let m = &mut dev.met[k as usize];
            // the part of the row the union does not hold yet, `[from, end)`: rows come by start, so the union
            // ends at cur_e and grows by disjoint pieces whose lengths and overlaps with the range add up exactly
            let from = if !m.has_device() {
                // the first one gives min(d.start)
                (m.first, m.cur_e) = (r.start, end);
                r.start
            } else {
                let from = r.start.max(m.cur_e);
                m.cur_e = m.cur_e.max(end);
                from
            };
            if end > from {
                m.busy_ns += end - from;
                m.coverage_ns += overlap(from, end, occ[o].start, occ[o].end);
            }
        }
    }
    for (di, c) in dcur.iter().enumerate() {
        if c.open {
            dtot[di].busy_union_ns += c.e - c.s;
        }
    }
    let mut per_device: Vec<DeviceTotals> = dtot.into_iter().filter(|d| d.device_rows > 0).collect();
    per_device.sort_by_key(|d| d.device_id);
    w.per_device = per_device;
}

/// The rows' indices in start order (stable), or None when they are in start order already.
pub(super) fn start_order(rows: &[PackedDeviceRow]) -> Option<Vec<u32>> {
    if rows.is_sorted_by_key(|r| r.start) {
        return None;
    }
    let mut o: Vec<u32> = (0..rows.len() as u32).collect();
    o.sort_by_key(|&i| rows[i as usize].start);
    Some(o)
}
