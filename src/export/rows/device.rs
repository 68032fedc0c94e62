//! Device rows in bulk ([`DeviceChunk`] of 16-byte [`PackedDeviceRow`]s), runtime batches, and the device
//! operations the step budget's timelines read.

use super::*;

/// A device row as read in bulk: 16 bytes. `dur` is `end - start`, or `u32::MAX` for a row lasting that long
/// or longer (its end is in [`DeviceChunk::long`]); `aux` is the `correlationId`, or `u32::MAX` when it is NULL
/// or outside `0..u32::MAX` (the value is in [`DeviceChunk::wide`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackedDeviceRow {
    pub start: i64,
    pub dur: u32,
    pub aux: u32,
}

/// The valid rows of one device table, or of one rowid range of it, in table order.
#[derive(Debug, Default, Clone)]
pub struct DeviceChunk {
    pub kind: Option<DeviceKind>,
    pub rows: Vec<PackedDeviceRow>,
    /// `(first row index, globalPid, deviceId)`: runs of rows with the same process and device.
    pub segs: Vec<(usize, Option<i64>, Option<i64>)>,
    /// `(row index, end)` of the rows with `dur == u32::MAX`, by index.
    pub long: Vec<(usize, i64)>,
    /// `(row index, correlationId)` of the rows with `aux == u32::MAX`, by index.
    pub wide: Vec<(usize, Option<i64>)>,
    /// Invalid intervals, not delivered.
    pub skips: RowSkips,
    /// With [`DeviceDetail::Names`], row `i`'s KERNEL `demangledName` id in 32 bits ([`DeviceChunk::name`];
    /// empty for the other tables): 22 MB at 5 M kernels, not 45.
    pub(crate) names: Vec<u32>,
    /// `(row index, id)` of the names that do not fit 32 bits, by index.
    pub(crate) wide_names: Vec<(usize, i64)>,
    /// With [`DeviceDetail::Names`], the valid rows with a `graphNodeId` (node-level graph rows).
    pub node_rows: u64,
    /// The [`TimedStats`] of these rows when the read was asked to compute them (None when not asked or when a
    /// value is not an INTEGER).
    pub stats: Option<TimedStats>,
}

/// In [`DeviceChunk`]'s names: NULL.
const NULL_NAME: u32 = u32::MAX;
/// In [`DeviceChunk`]'s names: an id kept in `wide_names`.
const WIDE_NAME: u32 = u32::MAX - 1;

/// What a bulk read of the device tables reads besides [`cols::DEVICE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceDetail {
    /// Nothing more (the ranges contract).
    None,
    /// KERNEL's `demangledName` (required then) and every table's `graphNodeId` when present: the device
    /// timelines of the step budget read them from the same scan. The rows are then shared: the valid intervals
    /// kept for the gates are left in them, each chunk's stats attached to it by the reader's caller
    /// ([`TimedStats::attach_rows`]).
    Names,
}

impl DeviceChunk {
    /// Room for `n` names.
    pub(crate) fn reserve_names(&mut self, n: usize) {
        self.names.reserve_exact(n);
    }

    /// Append the next row's KERNEL `demangledName` id (None: NULL).
    pub(crate) fn push_name(&mut self, id: Option<i64>) {
        let packed = match id {
            None => NULL_NAME,
            Some(v) => match u32::try_from(v) {
                Ok(x) if x < WIDE_NAME => x,
                _ => {
                    self.wide_names.push((self.names.len(), v));
                    WIDE_NAME
                }
            },
        };
        self.names.push(packed);
    }

    /// Row `i`'s KERNEL `demangledName` id (None: NULL, or names not read).
    #[inline]
    pub fn name(&self, i: usize) -> Option<i64> {
        match *self.names.get(i)? {
            NULL_NAME => None,
            WIDE_NAME => Some(crate::beside::at(&self.wide_names, i)),
            x => Some(x as i64),
        }
    }

    /// Every row's KERNEL `demangledName` id, in order (none when the names were not read).
    pub fn names(&self) -> impl Iterator<Item = Option<i64>> + '_ {
        (0..self.names.len()).map(|i| self.name(i))
    }

    /// The bytes the rows and names hold.
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<PackedDeviceRow>()
            + self.names.capacity() * std::mem::size_of::<u32>()
    }

    /// The runs of rows with one process and device: (row indices, `globalPid`, `deviceId`).
    pub fn segments(&self) -> impl Iterator<Item = (std::ops::Range<usize>, Option<i64>, Option<i64>)> + '_ {
        self.segs.iter().enumerate().map(|(k, &(lo, pid, dev))| {
            let hi = self.segs.get(k + 1).map_or(self.rows.len(), |n| n.0);
            (lo..hi, pid, dev)
        })
    }

    /// `(start, end)` of every row, in order.
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.rows.iter().enumerate().map(|(i, &r)| (r.start, self.end_of(i, r)))
    }

    /// `(start, end)` of row `i`.
    pub fn interval(&self, i: usize) -> Option<Interval> {
        let r = *self.rows.get(i)?;
        Some((r.start, self.end_of(i, r)))
    }

    /// `end` of row `i`.
    pub fn end(&self, i: usize) -> i64 {
        self.end_of(i, self.rows[i])
    }

    /// `end` of `r`, row `i`.
    pub(super) fn end_of(&self, i: usize, r: PackedDeviceRow) -> i64 {
        if r.dur == u32::MAX {
            crate::beside::at(&self.long, i)
        } else {
            r.start + r.dur as i64
        }
    }
    /// `correlationId` of row `i` as read.
    pub fn correlation_id(&self, i: usize, aux: u32) -> Option<i64> {
        if aux == u32::MAX {
            crate::beside::at(&self.wide, i)
        } else {
            Some(aux as i64)
        }
    }
}

/// Rows of `CUPTI_ACTIVITY_KIND_RUNTIME` sent by [`read_runtime_batches`]: `chunk` is the rowid range they come
/// from (in table order).
pub struct RuntimeBatch {
    pub chunk: usize,
    /// An upper bound of the rows of its chunk (the size of its rowid range; 0 when the chunk is the whole table):
    /// for a consumer that keeps the rows of each chunk apart and reserves once.
    pub chunk_bound: usize,
    pub rows: Vec<RuntimeRow>,
}

/// A device row with what the device-timeline analysis of `step-budget` reads besides [`DeviceRow`]: the
/// kernel's `demangledName` (KERNEL only, required there), `streamId` and `graphNodeId` (when the table has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOp {
    pub row: DeviceRow,
    pub kind: DeviceKind,
    /// `StringIds` id of the kernel's demangled name (None for the other tables).
    pub name_id: Option<i64>,
    pub stream_id: Option<i64>,
    pub graph_node_id: Option<i64>,
}

impl Export {
    /// Every valid row of one device table as a [`DeviceOp`] (none when the table is absent); invalid
    /// intervals are counted in `skips`. KERNEL requires `demangledName` as well.
    pub fn device_ops(
        &self,
        kind: DeviceKind,
        skips: &mut RowSkips,
        mut f: impl FnMut(DeviceOp) -> Result<()>,
    ) -> Result<()> {
        let tbl = kind.table();
        let Some(t) = self.optional(tbl, &cols::DEVICE)? else { return Ok(()) };
        let name = if kind == DeviceKind::Kernel {
            self.require(tbl, &[cols::DEMANGLED_NAME])?;
            cols::DEMANGLED_NAME
        } else {
            "NULL"
        };
        let stream = if t.has_column(cols::STREAM_ID) { cols::STREAM_ID } else { "NULL" };
        let node = if t.has_column(cols::GRAPH_NODE_ID) { cols::GRAPH_NODE_ID } else { "NULL" };
        let mut c: Vec<&str> = cols::DEVICE.to_vec();
        c.extend([name, stream, node]);
        self.scan(tbl, &c).run("", |row| {
            let Some((start, end)) =
                self.interval(tbl, row, self.int_at(row, 1, tbl, "start")?, self.int_at(row, 2, tbl, "end")?, skips)?
            else {
                return Ok(());
            };
            f(DeviceOp {
                row: DeviceRow {
                    start,
                    end,
                    global_pid: self.int_at(row, 3, tbl, "globalPid")?,
                    correlation_id: self.int_at(row, 4, tbl, "correlationId")?,
                    device_id: self.int_at(row, 5, tbl, "deviceId")?,
                },
                kind,
                name_id: self.int_at(row, 6, tbl, cols::DEMANGLED_NAME)?,
                stream_id: self.int_at(row, 7, tbl, cols::STREAM_ID)?,
                graph_node_id: self.int_at(row, 8, tbl, cols::GRAPH_NODE_ID)?,
            })
        })
    }
}
