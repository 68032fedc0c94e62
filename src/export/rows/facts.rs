//! The per-connection facts scans share ([`StatsCache`]): kept intervals, adopted and taken-over facts, and
//! the timed-stats prefetch.

use super::*;

/// The per-table [`TimedStats`] of an export (`None` for a table that fell back to SQL), the tables whose
/// valid intervals the next scan keeps, and the NVTX range rows counted by a read of them all.
#[derive(Debug, Default)]
pub(crate) struct StatsCache {
    pub(super) stats: std::cell::RefCell<HashMap<String, Option<TimedStats>>>,
    pub(super) keep: std::cell::RefCell<HashMap<String, Keep>>,
    pub(super) nvtx_range_rows: std::cell::Cell<Option<i64>>,
    /// Each thread's NVTX marks and ranges, from a read of every NVTX row ([`Export::put_nvtx_facts`]).
    pub(super) nvtx_threads: std::cell::RefCell<Option<std::sync::Arc<NvtxThreads>>>,
    /// What an analysis computed from the rows, under a key it names ([`Export::remember`]).
    pub(super) memo: std::cell::RefCell<HashMap<String, Memo>>,
}

/// A value an analysis computed from an export's rows ([`Export::remember`]).
pub(crate) type Memo = std::sync::Arc<dyn std::any::Any + Send + Sync>;

impl Export {
    /// What another thread needs to open its own read-only connection to this export.
    pub fn source(&self) -> ScanSource {
        ScanSource { uri: self.uri.clone(), name: self.name() }
    }

    /// Keep the valid `(start, end)` of these tables in the next scan of each (for [`Export::window_intervals`]).
    pub fn keep_intervals(&self, tables: &[&str]) {
        let mut k = self.stats.keep.borrow_mut();
        for t in tables {
            if let Some(info) = self.table(t) {
                k.entry(info.name.to_ascii_lowercase()).or_default().intervals = true;
            }
        }
    }

    /// Take the facts `other`'s scans computed (its timed-stats cache, without the intervals kept for the gates),
    /// `other` being a connection to the same export: a thread on this connection then answers from them what
    /// `other` already knows, without a scan.
    pub fn adopt_facts(&self, other: &Export) {
        if self.stats.nvtx_range_rows.get().is_none() {
            self.stats.nvtx_range_rows.set(other.stats.nvtx_range_rows.get());
        }
        if self.stats.nvtx_threads.borrow().is_none() {
            self.stats.nvtx_threads.replace(other.stats.nvtx_threads.borrow().clone());
        }
        let theirs = other.stats.stats.borrow();
        let mut mine = self.stats.stats.borrow_mut();
        for (k, v) in theirs.iter() {
            mine.entry(k.clone()).or_insert_with(|| v.as_ref().map(TimedStats::facts));
        }
        let mut memo = self.stats.memo.borrow_mut();
        for (k, v) in other.stats.memo.borrow().iter() {
            memo.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// Keep `value`, computed from this export's rows by an analysis, under `key` (a name the analysis gives
    /// it, with every option the value depends on): a later document on this connection, or on one that
    /// adopted its facts ([`Export::adopt_facts`]), reads it with [`Export::recall`] instead of the rows again.
    pub fn remember<T: std::any::Any + Send + Sync>(&self, key: String, value: std::sync::Arc<T>) {
        self.stats.memo.borrow_mut().insert(key, value);
    }

    /// The value [`Export::remember`] kept under `key`, when it is a `T`.
    pub fn recall<T: std::any::Any + Send + Sync>(&self, key: &str) -> Option<std::sync::Arc<T>> {
        self.stats.memo.borrow().get(key).cloned()?.downcast::<T>().ok()
    }

    /// The NVTX range rows a read of every push/pop and start/end row of `NVTX_EVENTS` counted (what
    /// [`Export::nvtx_range_rows`] then answers without a scan).
    pub(crate) fn put_nvtx_range_rows(&self, n: u64) {
        self.stats.nvtx_range_rows.set(i64::try_from(n).ok());
    }

    /// [`Export::adopt_facts`], and the intervals `other`'s scans kept for the gates ([`Export::keep_intervals`])
    /// moved here: the gates then run on this connection, `other` keeping the facts alone.
    pub fn take_over_facts(&self, other: &Export) {
        self.adopt_facts(other);
        let mut theirs = other.stats.stats.borrow_mut();
        let mut mine = self.stats.stats.borrow_mut();
        for (k, v) in theirs.iter_mut().filter_map(|(k, v)| Some((k, v.as_mut()?))) {
            if let Some(Some(m)) = mine.get_mut(k) {
                m.intervals = v.intervals.take();
            }
        }
    }

    /// Aggregate the kernel rows by `demangledName` in the next scan of KERNEL (for
    /// [`Export::kernel_time_by_name`]: no scan of its own).
    pub fn keep_kernel_names(&self) {
        if let Some(info) = self.table(schema::KERNEL) {
            self.stats.keep.borrow_mut().entry(info.name.to_ascii_lowercase()).or_default().names = true;
        }
    }

    /// Compute the [`TimedStats`] of the named tables present and not yet known: one scan each, in parallel
    /// threads on their own read-only connections when the tables are large (a large table split into rowid
    /// ranges, merged in table order).
    pub fn prefetch_timed_stats(&self, tables: &[&str]) -> Result<()> {
        let todo: Vec<crate::export::TableInfo> = {
            let cache = self.stats.stats.borrow();
            let mut v: Vec<crate::export::TableInfo> = Vec::new();
            for t in tables {
                if let Some(info) = self.table(t) {
                    let key = info.name.to_ascii_lowercase();
                    if !cache.contains_key(&key) && !v.iter().any(|x| x.name == info.name) {
                        v.push(info.clone());
                    }
                }
            }
            v
        };
        if todo.is_empty() {
            return Ok(());
        }
        let keep: Vec<Keep> = {
            let k = self.stats.keep.borrow();
            todo.iter().map(|t| k.get(&t.name.to_ascii_lowercase()).copied().unwrap_or_default()).collect()
        };
        let hints: Vec<usize> = todo.iter().map(|t| self.row_count_hint(&t.name)).collect();
        let big: usize = hints.iter().sum();
        let results: Vec<Result<Option<TimedStats>>> = if big >= PARALLEL_ROWS {
            let src = self.source();
            let threads = scan_threads();
            // (table index, rowid range) jobs
            let mut jobs: Vec<(usize, Option<(i64, i64)>)> = Vec::new();
            for (i, t) in todo.iter().enumerate() {
                let parts = if hints[i] >= CHUNK_ROWS { threads } else { 1 };
                for r in rowid_chunks(&self.conn, &t.name, parts) {
                    jobs.push((i, r));
                }
            }
            let out: Vec<(usize, Result<Option<TimedStats>>)> = std::thread::scope(|s| {
                let handles: Vec<_> = jobs
                    .iter()
                    .map(|&(i, r)| {
                        let (src, t, keep) = (&src, &todo[i], keep[i]);
                        s.spawn(move || -> Result<Option<TimedStats>> {
                            let conn = src.open()?;
                            scan_timed_stats(&conn, t, r, keep).map_err(|e| src.sql_err(&t.name, e))
                        })
                    })
                    .collect();
                jobs.iter()
                    .zip(handles)
                    .map(|(&(i, _), h)| {
                        (i, h.join().unwrap_or_else(|_| Err(Error::input("a table scan thread panicked"))))
                    })
                    .collect()
            });
            // merge the chunks of each table in rowid order; the first error of a table (in order) wins
            let mut merged: Vec<Option<Result<Option<TimedStats>>>> = (0..todo.len()).map(|_| None).collect();
            for (i, r) in out {
                merged[i] = Some(match (merged[i].take(), r) {
                    (None, r) => r,
                    (Some(Err(e)), _) => Err(e),
                    (Some(Ok(_)), Err(e)) => Err(e),
                    (Some(Ok(None)), Ok(_)) | (Some(Ok(_)), Ok(None)) => Ok(None),
                    (Some(Ok(Some(mut a))), Ok(Some(b))) => {
                        a.append(b);
                        Ok(Some(a))
                    }
                });
            }
            merged.into_iter().map(|m| m.unwrap_or(Ok(None))).collect()
        } else {
            todo.iter()
                .zip(&keep)
                .map(|(t, &k)| scan_timed_stats(&self.conn, t, None, k).map_err(|e| self.sql_err(&t.name)(e)))
                .collect()
        };
        let mut cache = self.stats.stats.borrow_mut();
        for (t, r) in todo.iter().zip(results) {
            cache.insert(t.name.to_ascii_lowercase(), r?);
        }
        Ok(())
    }

    /// The valid `(start, end)` of the named device tables (in table order, each in its table's order), how
    /// many come from the first table, and the starts of that table's invalid rows that have a start: from the
    /// scans of [`Export::prefetch_timed_stats`] when [`Export::keep_intervals`] asked for them (taken: asked
    /// once), else read now (in parallel rowid ranges for a big table: [`read_intervals`]). A value of another
    /// type than INTEGER is an input error naming table and column.
    pub fn window_intervals(&self, kinds: &[DeviceKind]) -> Result<WindowRows> {
        let mut rows = WindowRows::default();
        for (n, k) in kinds.iter().enumerate() {
            let tbl = k.table();
            let Some(info) = self.optional(tbl, &["start", "end"])? else { continue };
            let key = info.name.to_ascii_lowercase();
            let cached =
                self.stats.stats.borrow_mut().get_mut(&key).and_then(|s| s.as_mut()).and_then(|s| s.intervals.take());
            match cached {
                Some((v, inv)) => {
                    rows.parts.extend(v);
                    if n == 0 {
                        rows.first_invalid = inv;
                    }
                }
                None => {
                    let mut skips = RowSkips::new();
                    if self.row_count_hint(&info.name) >= CHUNK_ROWS {
                        let (parts, s) =
                            read_intervals(&self.source(), &self.conn, info, tbl, scan_threads(), CHUNK_ROWS)?;
                        skips = s;
                        rows.parts.extend(parts.into_iter().map(IntervalPart::Own));
                    } else {
                        let mut part = OwnIntervals::default();
                        self.device_intervals(*k, &mut skips, |s, e| part.push((s, e)))?;
                        rows.parts.push(IntervalPart::Own(part));
                    }
                    if n == 0 && skips.get(tbl).is_some_and(|s| s.null_end + s.inverted > 0) {
                        // the starts of the invalid rows (only the tenths of the first table need them)
                        self.scan(tbl, &["start", "end"]).run(
                            "start IS NOT NULL AND (end IS NULL OR end < start)",
                            |row| {
                                let s = self.check_row_ts(tbl, "start", row, self.int_at(row, 1, tbl, "start")?)?;
                                rows.first_invalid.extend(s);
                                Ok(())
                            },
                        )?;
                    }
                }
            }
            if n == 0 {
                rows.first_parts = rows.parts.len();
            }
        }
        Ok(rows)
    }

    /// `f` of the table's [`TimedStats`] (computed now when unknown); None when the table is absent or fell
    /// back to SQL.
    pub(crate) fn with_stats<T>(&self, table: &str, f: impl FnOnce(&TimedStats) -> T) -> Result<Option<T>> {
        if self.table(table).is_none() {
            return Ok(None);
        }
        self.prefetch_timed_stats(&[table])?;
        let key = self.table(table).map(|t| t.name.to_ascii_lowercase()).unwrap_or_default();
        Ok(self.stats.stats.borrow().get(&key).and_then(|s| s.as_ref()).map(f))
    }

    /// `f` of the table's [`TimedStats`] when already computed (no scan).
    pub(crate) fn known_stats<T>(&self, table: &str, f: impl FnOnce(&TimedStats) -> T) -> Option<T> {
        let key = self.table(table)?.name.to_ascii_lowercase();
        self.stats.stats.borrow().get(&key).and_then(|s| s.as_ref()).map(f)
    }

    /// What the next scan of `table` keeps besides its facts ([`Export::keep_intervals`],
    /// [`Export::keep_kernel_names`]); None when its stats are already known (no scan needs to compute them).
    pub(crate) fn stats_wanted(&self, table: &str) -> Option<Keep> {
        let key = self.table(table)?.name.to_ascii_lowercase();
        if self.stats.stats.borrow().contains_key(&key) {
            return None;
        }
        Some(self.stats.keep.borrow().get(&key).copied().unwrap_or_default())
    }

    /// Record what a read of every NVTX row found ([`NvtxFacts`]): the table's timed stats and each thread's
    /// marks and ranges, where they could be computed (the rest is asked of the table as before).
    pub(crate) fn put_nvtx_facts(&self, facts: NvtxFacts) {
        if let Some(st) = facts.stats {
            self.put_stats(schema::NVTX_EVENTS, st);
        }
        if let Some(th) = facts.threads {
            self.stats.nvtx_threads.replace(Some(std::sync::Arc::new(th)));
        }
    }

    /// Whether each thread's NVTX marks and ranges are known without a scan ([`Export::put_nvtx_facts`]).
    #[cfg(test)]
    pub(crate) fn knows_nvtx_threads(&self) -> bool {
        self.stats.nvtx_threads.borrow().is_some()
    }

    /// Record the [`TimedStats`] of `table` computed by another whole-table scan (the ranges readers), unless
    /// known already.
    pub(crate) fn put_stats(&self, table: &str, stats: TimedStats) {
        if let Some(t) = self.table(table) {
            self.stats.stats.borrow_mut().entry(t.name.to_ascii_lowercase()).or_insert(Some(stats));
        }
    }
}

/// The valid `(start, end)` of table `t` (present with both columns; `logical` names it in messages and in the
/// skips), read in parallel rowid ranges on their own connections (a table of `chunk_rows` rows or more is
/// split into up to `threads`; [`run_jobs`], [`for_each_in_range`]): the ranges' intervals in rowid order, and
/// the rows skipped; the checks of the streamed reader ([`valid_interval`]), the first error in rowid order. G5's window on a capture whose scans
/// did not keep the intervals: one thread read the 5.6 M rows of a 5 M-kernel capture in 0.77 s, most of
/// step-budget's gate check on 16 cores.
pub(crate) fn read_intervals(
    src: &ScanSource,
    conn: &rusqlite::Connection,
    t: &crate::export::TableInfo,
    logical: &str,
    threads: usize,
    chunk_rows: usize,
) -> Result<(Vec<OwnIntervals>, RowSkips)> {
    let jobs: Vec<Job> =
        rowid_chunks_of(conn, &t.name, threads, chunk_rows).into_iter().map(|range| Job { table: 0, range }).collect();
    let out = in_order(run_jobs(&jobs, |_, j| {
        let (mut v, mut skips) = (OwnIntervals::default(), RowSkips::new());
        for_each_in_range(src, t, logical, "start, end", j.range, |r| {
            if let Some(iv) = valid_interval(src, logical, r, &mut skips)? {
                v.push(iv);
            }
            Ok(true)
        })?;
        Ok((v, skips))
    }))?;
    let mut skips = RowSkips::new();
    let mut parts = Vec::with_capacity(out.len());
    for (v, s) in out {
        merge_skips(&mut skips, &s);
        parts.push(v);
    }
    Ok((parts, skips))
}

#[cfg(test)]
mod read_intervals_tests {
    use super::*;

    /// [`read_intervals`] in 1 to 7 rowid ranges gives the intervals and skips of the streamed read, in order:
    /// on a real export (20 000 kernels, memcpys, node-level graph rows) and on a copy of it with NULL ends and
    /// inverted rows.
    #[test]
    fn intervals_read_in_ranges_are_the_streamed_ones() {
        let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1/decode_clean.sqlite");
        let bad = std::env::temp_dir().join(format!("nsyskit-fold-intervals-{}.sqlite", std::process::id()));
        std::fs::copy(&real, &bad).unwrap();
        rusqlite::Connection::open(&bad)
            .unwrap()
            .execute_batch(
                // (the tables again without their NOT NULL constraints)
                "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k0;
                 CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k0; DROP TABLE k0;
                 ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY RENAME TO m0;
                 CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY AS SELECT * FROM m0; DROP TABLE m0;
                 UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL WHERE rowid % 97 = 0;
                 UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE rowid % 89 = 0;
                 UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = NULL WHERE rowid % 3 = 0;",
            )
            .unwrap();
        for path in [&real, &bad] {
            let e = Export::open(path).unwrap();
            let mut split = 0;
            for k in [DeviceKind::Kernel, DeviceKind::Memcpy, DeviceKind::Memset, DeviceKind::GraphTrace] {
                let Some(t) = e.table(k.table()) else { continue };
                let (mut want, mut skips) = (Vec::new(), RowSkips::new());
                e.device_intervals(k, &mut skips, |s, en| want.push((s, en))).unwrap();
                let broken = path == &bad && matches!(k, DeviceKind::Kernel | DeviceKind::Memcpy);
                assert_eq!(skips.is_empty(), !broken, "{}", k.table());
                for (threads, chunk_rows) in [(1, CHUNK_ROWS), (16, CHUNK_ROWS), (4, 1000), (7, 64)] {
                    let (parts, s) = read_intervals(&e.source(), &e.conn, t, k.table(), threads, chunk_rows).unwrap();
                    split += usize::from(parts.len() > 1);
                    let got: Vec<Interval> = parts.iter().flat_map(OwnIntervals::iter).collect();
                    assert_eq!(got, want, "{} {threads} {chunk_rows}", k.table());
                    assert_eq!(s, skips, "{} {threads} {chunk_rows}", k.table());
                }
            }
            assert!(split >= 4, "{}: the kernels and memcpys were read in several ranges", path.display());
        }
        let _ = std::fs::remove_file(&bad);
    }
}
