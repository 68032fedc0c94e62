//! Parallel folds over the rows of the large tables (issue #19): a table is split into rowid ranges, each range
//! is read by its own thread on its own read-only connection ([`ScanSource::open`]) into an accumulator of the
//! caller's, and the accumulators come back in table then rowid order, so that folding them in order is
//! reading the tables in order. The row checks and their messages are those of the streamed readers of
//! [`super::rows`] (types, impossible timestamps, invalid intervals counted in [`RowSkips`]); when several
//! ranges fail, the first error in table order wins.

use super::raw::IntCell;
use super::rows::in_order;
use super::rows::{
    cell_int, rowid_chunks_of, Keep, NvtxFacts, RowSkips, RuntimeRow, ScanSource, TimedStats, CHUNK_ROWS,
};
pub(crate) use super::rows::{for_each_in_range, for_each_in_range_where, row_times, run_jobs, valid_interval, Job};
use super::schema::{self, cols};
use super::TableInfo;
use crate::contract::Result;

/// Where `NVTX_EVENTS` is split for a parallel read (in pieces of at least half of it).
pub(crate) const NVTX_CHUNK_ROWS: usize = 100_000;

/// The jobs of a fold over `tables`: a table of at least [`CHUNK_ROWS`] rows (by `max(rowid)`) is split into
/// about `threads` rowid ranges, a smaller one is one job.
pub(crate) fn plan(src: &ScanSource, tables: &[&TableInfo], threads: usize) -> Result<Vec<Job>> {
    plan_with(src, tables, threads, CHUNK_ROWS)
}

/// [`plan`] with another split size: a table of at least `chunk_rows` rows is split (`NVTX_EVENTS`, whose rows
/// cost more to read and intern than a device row's, splits from [`NVTX_CHUNK_ROWS`]).
pub(crate) fn plan_with(
    src: &ScanSource,
    tables: &[&TableInfo],
    threads: usize,
    chunk_rows: usize,
) -> Result<Vec<Job>> {
    let conn = src.open()?;
    let mut jobs = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let hint: Option<i64> =
            conn.query_row(&format!("SELECT max(rowid) FROM \"{}\"", t.name), [], |r| r.get(0)).unwrap_or(None);
        let parts = if hint.unwrap_or(0) as usize >= chunk_rows { threads } else { 1 };
        jobs.extend(
            rowid_chunks_of(&conn, &t.name, parts, chunk_rows).into_iter().map(|range| Job { table: i, range }),
        );
    }
    Ok(jobs)
}

/// Every valid row of `CUPTI_ACTIVITY_KIND_RUNTIME` (`t`, present with [`cols::RUNTIME`]) folded into an
/// accumulator per rowid range (`init`, `f`); the accumulators in rowid order, and the rows skipped.
pub fn fold_runtime<T: Send>(
    src: &ScanSource,
    t: &TableInfo,
    threads: usize,
    init: impl Fn() -> T + Sync,
    f: impl Fn(&mut T, RuntimeRow) + Sync,
) -> Result<(Vec<T>, RowSkips)> {
    let jobs = plan(src, &[t], threads)?;
    let tbl = schema::RUNTIME;
    let list = cols::RUNTIME.join(", ");
    let parts = in_order(run_jobs(&jobs, |_, j| {
        let (mut acc, mut skips) = (init(), RowSkips::new());
        let name = src.name();
        for_each_in_range(src, t, tbl, &list, j.range, |r| {
            let Some((start, end)) = valid_interval(src, tbl, r, &mut skips)? else { return Ok(true) };
            let row = RuntimeRow {
                start,
                end,
                global_tid: cell_int(name, r, 3, tbl, "globalTid")?,
                correlation_id: cell_int(name, r, 4, tbl, "correlationId")?,
                name_id: cell_int(name, r, 5, tbl, "nameId")?,
            };
            f(&mut acc, row);
            Ok(true)
        })?;
        Ok((acc, skips))
    }))?;
    let mut skips = RowSkips::new();
    let accs = parts
        .into_iter()
        .map(|(a, s)| {
            super::rows::merge_skips(&mut skips, &s);
            a
        })
        .collect();
    Ok((accs, skips))
}

/// Every `NVTX_EVENTS` row whose `eventType` is in `types` (`t`: the table, present with
/// [`cols::NVTX_EVENTS`]) folded into an accumulator per rowid range (`init`, `f`): the accumulators in rowid
/// order; the checks and messages of [`super::Export::nvtx_events_ref`], the first error in table order wins.
/// With `stats`, the same read is the table's timed-stats scan ([`super::rows::NvtxFacts`]: every row read,
/// those of `types` folded), instead of a second scan of the table by the caller's other questions.
pub fn fold_nvtx_events<T: Send>(
    src: &ScanSource,
    t: &TableInfo,
    types: &[i64],
    threads: usize,
    stats: Option<Keep>,
    init: impl Fn() -> T + Sync,
    f: impl Fn(&mut T, super::rows::NvtxRef<'_>) -> Result<()> + Sync,
) -> Result<(Vec<T>, Option<NvtxFacts>)> {
    let jobs = plan_with(src, &[t], threads, NVTX_CHUNK_ROWS)?;
    let nvtx = super::rows::nvtx_columns(t);
    // without stats SQLite selects the rows of `types`; with them every row is read and the type tested here
    // (an `eventType` that is not an INTEGER is in no list, as in SQL), the stats' columns after the row's
    let types_only = super::rows::nvtx_types_condition(types);
    let stats_at = nvtx.len() + 1;
    let (list, cond) = match stats {
        Some(k) => (format!("{}, {}", nvtx.join(", "), TimedStats::columns(t, k)), None),
        None => (nvtx.join(", "), Some(types_only.as_str())),
    };
    let parts = in_order(run_jobs(&jobs, |_, j| {
        let mut acc = init();
        let mut facts = stats.map(|k| NvtxFacts::new(t, k));
        for_each_in_range_where(src, t, schema::NVTX_EVENTS, &list, j.range, cond, |r| {
            if let Some(x) = facts.as_mut() {
                x.add_row(r, stats_at);
                if !matches!(r.int(3), IntCell::Int(v) if types.contains(&v)) {
                    return Ok(true);
                }
            }
            f(&mut acc, super::rows::nvtx_ref(src.name(), r)?)?;
            Ok(true)
        })?;
        Ok((acc, facts))
    }))?;
    let (accs, facts): (Vec<T>, Vec<Option<NvtxFacts>>) = parts.into_iter().unzip();
    Ok((accs, facts.into_iter().collect::<Option<Vec<_>>>().map(NvtxFacts::merge)))
}
