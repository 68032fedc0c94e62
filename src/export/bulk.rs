//! Device and runtime rows read in bulk by parallel folds ([`super::fold`]): each rowid range on its own
//! connection, the rows checked as the streamed readers check them.

use super::raw::IntCell;
use super::rows::*;
use super::schema::{self, cols, DeviceKind};
use crate::contract::{Error, Result};

fn read_device_chunk(
    src: &ScanSource,
    kind: DeviceKind,
    t: &crate::export::TableInfo,
    range: Option<(i64, i64)>,
    detail: DeviceDetail,
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<DeviceChunk> {
    let name = src.name();
    let tbl = kind.table();
    let mut c = DeviceChunk { kind: Some(kind), stats: stats.map(|k| TimedStats::new(t, k)), ..Default::default() };
    if let Some(st) = c.stats.as_mut().filter(|_| detail == DeviceDetail::Names) {
        st.leave_intervals_to_rows();
    }
    let names = detail == DeviceDetail::Names && kind == DeviceKind::Kernel;
    let nodes = detail == DeviceDetail::Names && t.has_column(cols::GRAPH_NODE_ID) && kind != DeviceKind::GraphTrace;
    if let Some((a, b)) = range {
        // an upper bound, reserved once (untouched pages cost no memory)
        c.rows.reserve_exact((b - a).clamp(0, 1 << 32) as usize);
        if names {
            c.reserve_names((b - a).clamp(0, 1 << 32) as usize);
        }
    }
    let mut last: Option<(Option<i64>, Option<i64>)> = None;
    let mut n = 0u64;
    // the row's columns after rowid and the device columns: the kernel's name, its graph node, then the stats'
    const NAME_AT: usize = 6;
    const NODE_AT: usize = 7;
    // the stats read the name and the graph node where the rows' own columns have them (not twice)
    let (stat_list, at) = match stats {
        Some(k) => TimedStats::columns_beside(t, k, 8, nodes.then_some(NODE_AT), names.then_some(NAME_AT)),
        None => ("NULL, NULL, NULL, NULL".into(), StatCols::at(8)),
    };
    let list = format!(
        "{}, {}, {}, {stat_list}",
        cols::DEVICE.join(", "),
        if names { cols::DEMANGLED_NAME } else { "NULL" },
        if nodes { cols::GRAPH_NODE_ID } else { "NULL" },
    );
    crate::export::fold::for_each_in_range(src, t, tbl, &list, range, |r| {
        n += 1;
        if n & 0xFFFF == 0 && cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        let ((s, e), interval) = crate::export::fold::row_times(src, tbl, r, &mut c.skips)?;
        // the kernel's name and graph node, asked of SQLite once for the row and its stats
        let kname = if names { r.int(NAME_AT) } else { IntCell::Null };
        let node = if nodes { r.int(NODE_AT) } else { IntCell::Null };
        if let Some(st) = c.stats.as_mut() {
            let cell = |i: usize| match i {
                NAME_AT if names => kname,
                NODE_AT if nodes => node,
                _ => r.int(i),
            };
            if !st.add_cells(s, e, at, cell) {
                c.stats = None;
            }
        }
        let Some((s, e)) = interval else { return Ok(true) };
        let gpid = cell_int(name, r, 3, tbl, "globalPid")?;
        let corr = cell_int(name, r, 4, tbl, "correlationId")?;
        let dev = cell_int(name, r, 5, tbl, "deviceId")?;
        if names {
            c.push_name(cell_value(name, kname, tbl, cols::DEMANGLED_NAME)?);
        }
        if nodes && cell_value(name, node, tbl, cols::GRAPH_NODE_ID)?.is_some() {
            c.node_rows += 1;
        }
        let i = c.rows.len();
        if last != Some((gpid, dev)) {
            c.segs.push((i, gpid, dev));
            last = Some((gpid, dev));
        }
        let d = e - s;
        let dur = if d < u32::MAX as i64 {
            d as u32
        } else {
            c.long.push((i, e));
            u32::MAX
        };
        let aux = match corr {
            Some(v) if (0..u32::MAX as i64).contains(&v) => v as u32,
            other => {
                c.wide.push((i, other));
                u32::MAX
            }
        };
        c.rows.push(PackedDeviceRow { start: s, dur, aux });
        Ok(true)
    })?;
    Ok(c)
}

/// The valid rows of the device tables named (each present, with the columns of [`cols::DEVICE`]), in
/// table order, each large table split into rowid ranges read in parallel threads, each on its own
/// read-only connection: the chunks in table and rowid order, so that reading them in order is reading the
/// tables in order. The checks are those of [`Export::device_rows`] (same messages; the first error in
/// table order wins). `cancel` stops the reads early (the result is then incomplete: for a caller that
/// failed meanwhile).
pub fn read_device_chunks(
    src: &ScanSource,
    tables: &[(DeviceKind, crate::export::TableInfo, Option<Keep>)],
    threads: usize,
    detail: DeviceDetail,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Vec<DeviceChunk>> {
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let infos: Vec<&crate::export::TableInfo> = tables.iter().map(|(_, t, _)| t).collect();
    let jobs = crate::export::fold::plan(src, &infos, threads)?;
    crate::export::fold::run_jobs(&jobs, |_, j| {
        let (kind, t, stats) = &tables[j.table];
        read_device_chunk(src, *kind, t, j.range, detail, *stats, cancel)
    })
    .into_iter()
    .collect()
}

/// Rows per batch: with 16 parallel readers, 16 batches filling and 16 waiting in the channel (the join is the
/// slower side) held 16 MiB at 8192 rows of 64 bytes, the peak of `sqlite-ranges` on 16 cores; 4 MiB now.
const RUNTIME_BATCH: usize = 2048;

fn read_runtime_chunk(
    src: &ScanSource,
    t: &crate::export::TableInfo,
    (chunk, range): (usize, Option<(i64, i64)>),
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: &std::sync::mpsc::SyncSender<RuntimeBatch>,
) -> Result<(RowSkips, Option<TimedStats>)> {
    let name = src.name();
    let tbl = schema::RUNTIME;
    let mut skips = RowSkips::new();
    let mut st = stats.map(|k| TimedStats::new(t, k));
    let mut batch = Vec::with_capacity(RUNTIME_BATCH);
    let list = format!(
        "{}, {}",
        cols::RUNTIME.join(", "),
        stats.map(|k| TimedStats::columns(t, k)).unwrap_or_else(|| "NULL, NULL, NULL, NULL".into())
    );
    let mut gone = false;
    let chunk_bound = range.map_or(0, |(a, b)| (b - a).clamp(0, 1 << 32) as usize);
    crate::export::fold::for_each_in_range(src, t, tbl, &list, range, |r| {
        // the order of the checks of `Export::runtime_calls`: both types, both timestamps, then the rest
        let ((s, e), interval) = crate::export::fold::row_times(src, tbl, r, &mut skips)?;
        if let Some(x) = st.as_mut() {
            if !x.add_row(r, s, e, StatCols::at(6)) {
                st = None;
            }
        }
        let Some((s, e)) = interval else { return Ok(true) };
        batch.push(RuntimeRow {
            start: s,
            end: e,
            global_tid: cell_int(name, r, 3, tbl, "globalTid")?,
            correlation_id: cell_int(name, r, 4, tbl, "correlationId")?,
            name_id: cell_int(name, r, 5, tbl, "nameId")?,
        });
        if batch.len() == RUNTIME_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(RUNTIME_BATCH));
            if cancel.load(std::sync::atomic::Ordering::Relaxed)
                || tx.send(RuntimeBatch { chunk, chunk_bound, rows: full }).is_err()
            {
                gone = true; // the consumer is gone
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    if !gone && !batch.is_empty() {
        let _ = tx.send(RuntimeBatch { chunk, chunk_bound, rows: batch });
    }
    Ok((skips, if gone { None } else { st }))
}

/// The valid rows of `CUPTI_ACTIVITY_KIND_RUNTIME` (present, with [`cols::RUNTIME`]) sent in batches on `tx`,
/// the table split into rowid ranges read in parallel threads on their own read-only connections: batches
/// of different ranges arrive interleaved (a consumer whose result does not depend on the row order). The
/// checks and messages of [`Export::runtime_calls`]; the skipped intervals are returned, and the first error
/// in table order wins. It returns when every range is read, the consumer dropped its receiver, or `cancel`.
pub fn read_runtime_batches(
    src: &ScanSource,
    t: &crate::export::TableInfo,
    threads: usize,
    stats: Option<Keep>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: std::sync::mpsc::SyncSender<RuntimeBatch>,
) -> Result<(RowSkips, Option<TimedStats>)> {
    let jobs = crate::export::fold::plan(src, &[t], threads)?;
    let tx = std::sync::Mutex::new(tx);
    let results = crate::export::fold::run_jobs(&jobs, |i, j| {
        let tx = tx.lock().map_err(|_| Error::input("the runtime table reader panicked"))?.clone();
        read_runtime_chunk(src, t, (i, j.range), stats, cancel, &tx)
    });
    drop(tx);
    let mut skips = RowSkips::new();
    let mut parts = Vec::with_capacity(results.len());
    for r in results {
        let (sk, st) = r?;
        merge_skips(&mut skips, &sk);
        parts.push(st);
    }
    Ok((skips, if stats.is_some() { merge_stats(parts) } else { None }))
}
