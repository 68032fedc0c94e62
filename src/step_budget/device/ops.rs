//! A device's timeline rows as held: 16 bytes a row ([`OpRows`]), read back as [`Op`]s.

use super::*;

/// Bits of a packed row's `at` below its start: the kind (bits 0–1), the NCCL flag (bit 2), the exception flag
/// (bit 3) and the process index (bits 4–8). A start is within ±2^53 ns (the export refuses any other,
/// [`crate::export::schema::MAX_TIMESTAMP_NS`]): shifted by 9 bits it stays within ±2^62.
const META_BITS: u32 = 9;
const EXCEPTION: i64 = 1 << 3;
/// Process indices from this one on are kept in the exceptions.
const PROCESS_LIMIT: u32 = 1 << (META_BITS - 4);

/// A row as held: `at` is the start shifted by [`META_BITS`] above its kind, NCCL flag and process; `dur` its
/// duration, or with the exception flag the index of its end and process in [`OpRows::exceptions`] (a row of
/// 2^32 ns or more, or of a process beyond the 32 first); `call` as [`Op::call`].
#[derive(Debug, Clone, Copy)]
pub(super) struct PackedOp {
    at: i64,
    dur: u32,
    call: u32,
}

/// A device's rows, 16 bytes each (5.6 M rows at 5 M kernels: 90 MB; [`Op`] as they are read is 24).
#[derive(Debug, Clone, Default)]
pub(super) struct OpRows {
    rows: Vec<PackedOp>,
    /// `(end, process)` of the rows whose duration or process does not fit.
    exceptions: Vec<(i64, u32)>,
}

impl OpRows {
    pub(super) fn with_capacity(n: usize) -> OpRows {
        OpRows { rows: Vec::with_capacity(n), exceptions: Vec::new() }
    }

    pub(super) fn push(&mut self, o: Op) {
        debug_assert!((-(1i64 << 54)..1i64 << 54).contains(&o.start), "a start beyond the export's bound");
        let base = o.start << META_BITS | (o.meta & 7) as i64;
        let packed = match u32::try_from(o.end - o.start) {
            Ok(dur) if o.process() < PROCESS_LIMIT => {
                PackedOp { at: base | (o.process() as i64) << 4, dur, call: o.call }
            }
            _ => {
                let at = u32::try_from(self.exceptions.len()).expect("fewer than 2^32 exceptional rows");
                self.exceptions.push((o.end, o.process()));
                PackedOp { at: base | EXCEPTION, dur: at, call: o.call }
            }
        };
        self.rows.push(packed);
    }

    /// Row `p` as read.
    #[inline]
    fn open(&self, p: &PackedOp) -> Op {
        let start = p.at >> META_BITS;
        let low = (p.at & ((1 << META_BITS) - 1)) as u32;
        let (end, process) =
            if p.at & EXCEPTION != 0 { self.exceptions[p.dur as usize] } else { (start + p.dur as i64, low >> 4) };
        Op { start, end, call: p.call, meta: process << 3 | (low & 7) }
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(super) fn get(&self, i: usize) -> Option<Op> {
        self.rows.get(i).map(|p| self.open(p))
    }

    pub(super) fn first(&self) -> Option<Op> {
        self.get(0)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Op> + '_ {
        self.rows.iter().map(|p| self.open(p))
    }

    /// Sorted by `cmp` of the rows as read, stable.
    pub(super) fn sort_by(&mut self, mut cmp: impl FnMut(&Op, &Op) -> std::cmp::Ordering) {
        let OpRows { rows, exceptions } = self;
        let view = OpRows { rows: Vec::new(), exceptions: std::mem::take(exceptions) };
        rows.sort_by(|a, b| cmp(&view.open(a), &view.open(b)));
        *exceptions = view.exceptions;
    }
}

impl From<&[Op]> for OpRows {
    fn from(ops: &[Op]) -> OpRows {
        let mut v = OpRows::with_capacity(ops.len());
        ops.iter().for_each(|&o| v.push(o));
        v
    }
}
