//! Interval unions and a device's pieces of time (busy, or idle by cause).

use super::*;
pub(in crate::step_budget) use crate::intervals::{merge_sorted, union_sorted};

/// The union of a device's compute rows (non-NCCL kernels, GRAPH_TRACE) and its length, from rows sorted by
/// start: the union only when the device has NCCL rows to overlap it with (at 5 M kernels without NCCL, 80 MB of
/// intervals read for their length alone).
pub(super) fn compute_of(ops: &OpRows) -> (Vec<(i64, i64)>, i64) {
    let rows = ops
        .iter()
        .filter(|o| (o.kind() == DeviceKind::Kernel && !o.nccl()) || o.kind() == DeviceKind::GraphTrace)
        .map(|o| (o.start, o.end));
    if ops.iter().any(|o| o.nccl()) {
        let u = union_sorted(rows);
        let l = len(&u);
        return (u, l);
    }
    let mut total = 0i64;
    merge_sorted(rows, |(a, b)| total += b - a);
    (Vec::new(), total)
}

/// Idle pieces `(start, end, category)` by start: the starts, the lengths and the categories apart, 9 bytes a
/// piece (a tuple was 24, the intervals and the categories apart 17, 13 with 32-bit lengths: 5.6 M pieces at
/// 5 M kernels, 50 MB). A start is an offset in 32 bits from the start of its block of [`Pieces::BLOCK`] pieces
/// (`u32::MAX`: the start is in `far`, by piece index); a piece of 2^32 ns or more has `u32::MAX` as its length
/// and its end in `long`. The first piece of each gap has [`GAP_START`] in its category byte (two gaps can touch:
/// around a zero-length row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Pieces {
    /// The start of each block's first piece.
    bases: Vec<i64>,
    offs: Vec<u32>,
    lens: Vec<u32>,
    kinds: Vec<u8>,
    /// `(piece index, start)` of the pieces whose offset is `u32::MAX`, by index.
    far: Vec<(usize, i64)>,
    /// `(piece index, end)` of the pieces whose length is `u32::MAX`, by index.
    long: Vec<(usize, i64)>,
}

impl Pieces {
    /// Pieces per block of offsets: a block's pieces lie within 4.3 s of its first one, as a rule.
    const BLOCK_BITS: u32 = 10;
    pub(super) const BLOCK: usize = 1 << Self::BLOCK_BITS;

    pub(super) fn with_capacity(n: usize) -> Pieces {
        Pieces {
            bases: Vec::with_capacity(n / Self::BLOCK + 1),
            offs: Vec::with_capacity(n),
            lens: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            far: Vec::new(),
            long: Vec::new(),
        }
    }
    pub(super) fn push(&mut self, (s, e, k): (i64, i64, u8)) {
        let i = self.kinds.len();
        if i.is_multiple_of(Self::BLOCK) {
            self.bases.push(s);
        }
        let base = self.bases[i >> Self::BLOCK_BITS];
        let off = match s.checked_sub(base).and_then(|d| u32::try_from(d).ok()) {
            Some(d) if d < u32::MAX => d,
            _ => {
                self.far.push((i, s));
                u32::MAX
            }
        };
        let len = match u32::try_from(e - s) {
            Ok(l) if l < u32::MAX => l,
            _ => {
                self.long.push((i, e));
                u32::MAX
            }
        };
        self.offs.push(off);
        self.lens.push(len);
        self.kinds.push(k);
    }
    pub(super) fn shrink_to_fit(&mut self) {
        self.bases.shrink_to_fit();
        self.offs.shrink_to_fit();
        self.lens.shrink_to_fit();
        self.kinds.shrink_to_fit();
    }
    /// The start of piece `i`.
    #[inline]
    fn start(&self, i: usize) -> i64 {
        match self.offs[i] {
            u32::MAX => crate::beside::at(&self.far, i),
            d => self.bases[i >> Self::BLOCK_BITS] + d as i64,
        }
    }
    /// The end of piece `i`, which starts at `start`.
    #[inline]
    fn end_from(&self, i: usize, start: i64) -> i64 {
        match self.lens[i] {
            u32::MAX => crate::beside::at(&self.long, i),
            l => start + l as i64,
        }
    }
    /// The end of piece `i`.
    #[inline]
    fn end(&self, i: usize) -> i64 {
        self.end_from(i, self.start(i))
    }
    /// Piece `i` with its category byte as held.
    #[inline]
    fn at(&self, i: usize) -> (i64, i64, u8) {
        let s = self.start(i);
        (s, self.end_from(i, s), self.kinds[i])
    }
    /// The pieces from the first that ends after `t`.
    pub(super) fn ending_after(&self, t: i64) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        // the pieces are disjoint and by start: their ends ascend too
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.end(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.starting_at(lo)
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        self.starting_at(0)
    }
    pub(super) fn starting_at(&self, i: usize) -> impl Iterator<Item = (i64, i64, u8)> + '_ {
        (i..self.len()).map(|i| {
            let (s, e, k) = self.at(i);
            (s, e, k & !GAP_START)
        })
    }
    pub(super) fn len(&self) -> usize {
        self.kinds.len()
    }
    /// Mark piece `at` as the first of its gap.
    pub(super) fn mark_gap_start(&mut self, at: usize) {
        if let Some(k) = self.kinds.get_mut(at) {
            *k |= GAP_START;
        }
    }
    /// The pieces, each with whether it is the first of its gap.
    pub(super) fn with_gap_starts(&self) -> impl Iterator<Item = (i64, i64, u8, bool)> + '_ {
        self.with_gap_starts_in(0..self.len())
    }
    /// [`Pieces::with_gap_starts`] of the pieces in `range`.
    fn with_gap_starts_in(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = (i64, i64, u8, bool)> + '_ {
        range.map(|i| {
            let (s, e, k) = self.at(i);
            (s, e, k & !GAP_START, k & GAP_START != 0)
        })
    }
    /// The length of each gap, in order: its pieces cover it exactly. The pieces are cut into up to `threads`
    /// runs of whole gaps, each run's lengths written by a thread of its own (100 M kernels: 2.4 s on one).
    pub(super) fn gap_lengths(&self, threads: usize) -> GapLengths {
        let (n, threads) = (self.len(), threads.max(1));
        // each run starts at a gap's first piece (the first piece is one: each gap's first piece is marked)
        let mut cuts: Vec<usize> = (0..threads)
            .map(|k| k * n / threads)
            .map(|at| (at..n).find(|&i| self.kinds[i] & GAP_START != 0).unwrap_or(n))
            .collect();
        cuts[0] = 0;
        cuts.push(n);
        cuts.dedup();
        let counts: Vec<usize> =
            cuts.windows(2).map(|w| self.kinds[w[0]..w[1]].iter().filter(|&&k| k & GAP_START != 0).count()).collect();
        let mut short = vec![0u32; counts.iter().sum()];
        let mut slots: Vec<&mut [u32]> = Vec::with_capacity(counts.len());
        let mut rest = short.as_mut_slice();
        for &c in &counts {
            let (mine, more) = rest.split_at_mut(c);
            slots.push(mine);
            rest = more;
        }
        let fits = std::thread::scope(|s| {
            let handles: Vec<_> = cuts
                .windows(2)
                .zip(slots)
                .map(|(w, out)| {
                    let (lo, hi) = (w[0], w[1]);
                    s.spawn(move || self.gaps_into(lo, hi, |k, g| u32::try_from(g).map(|g| out[k] = g).is_ok()))
                })
                .collect();
            handles.into_iter().all(|h| h.join().expect("a gap-length thread panicked"))
        });
        if fits {
            return GapLengths::Short(short);
        }
        drop(short);
        let mut wide = vec![0i64; counts.iter().sum()];
        self.gaps_into(0, n, |k, g| {
            wide[k] = g;
            true
        });
        GapLengths::Long(wide)
    }
    /// The length of each gap whose first piece is in `[lo, hi)` (`lo` a gap's first piece, `hi` one or the
    /// end), given to `put` with its index among them; false as soon as `put` says so.
    fn gaps_into(&self, lo: usize, hi: usize, mut put: impl FnMut(usize, i64) -> bool) -> bool {
        let (mut k, mut cur) = (0usize, None);
        for (s, e, _, first) in self.with_gap_starts_in(lo..hi) {
            if first {
                if let Some(g) = cur {
                    if !put(k, g) {
                        return false;
                    }
                    k += 1;
                }
                cur = Some(0);
            }
            // a piece before any gap start cannot be: each gap's first piece is marked
            *cur.get_or_insert(0) += e - s;
        }
        cur.is_none_or(|g| put(k, g))
    }
    /// The idle of `[lo, hi)` by category.
    pub(super) fn idle_in(&self, lo: i64, hi: i64) -> [i64; 4] {
        let mut v = [0i64; 4];
        if hi <= lo {
            return v;
        }
        for (s, e, k) in self.ending_after(lo) {
            if s >= hi {
                break;
            }
            v[k as usize] += e.min(hi) - s.max(lo);
        }
        v
    }
    /// The idle inside the sorted disjoint spans `u` ([`Pieces::idle_in`] summed over them) and across them (from
    /// the first start to the last end), by category, in one pass over the pieces.
    pub(super) fn idle_inside_and_across(&self, u: &[(i64, i64)]) -> ([i64; 4], [i64; 4]) {
        let (mut inside, mut across) = ([0i64; 4], [0i64; 4]);
        let (Some(&(lo, _)), Some(&(_, hi))) = (u.first(), u.last()) else { return (inside, across) };
        let mut j = 0;
        for (s, e, k) in self.ending_after(lo) {
            if s >= hi {
                break;
            }
            across[k as usize] += e.min(hi) - s.max(lo);
            while j < u.len() && u[j].1 <= s {
                j += 1;
            }
            for &(a, b) in u[j..].iter().take_while(|span| span.0 < e) {
                inside[k as usize] += e.min(b) - s.max(a);
            }
        }
        (inside, across)
    }
}

/// Split `[a, b)` into the parts covered by `cover` (sorted disjoint) and the rest, pushed as pieces.
pub(super) fn split_by(a: i64, b: i64, cover: &[(i64, i64)], inside: u8, outside: u8, out: &mut Pieces) {
    let mut t = a;
    let lo = cover.partition_point(|c| c.1 <= a);
    for &(s, e) in &cover[lo..] {
        if s >= b {
            break;
        }
        let (s, e) = (s.max(a), e.min(b));
        if s > t {
            out.push((t, s, outside));
        }
        if e > s {
            out.push((s, e, inside));
        }
        t = t.max(e);
    }
    if b > t {
        out.push((t, b, outside));
    }
}
