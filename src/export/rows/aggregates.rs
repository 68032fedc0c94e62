//! Aggregates that SQLite computes over one table: `max(end)`, the longest row, Σ durations, thread counts,
//! kernel time by name, NVTX range rows and domain names.

use super::*;

impl Export {
    /// `max(end)` of the valid rows of a timed table (None when absent or empty).
    pub fn max_end(&self, table: &'static str) -> Result<Option<i64>> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(None) };
        if let Some(m) = self.with_stats(table, |s| s.max_end)? {
            return Ok(m);
        }
        let sql = format!("SELECT max(end) FROM \"{}\" WHERE {VALID}", t.name);
        self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))
    }

    /// The longest valid row of a timed table: `(end - start, rowid)` (None when absent or empty).
    pub fn longest_row(&self, table: &'static str) -> Result<Option<(i64, Option<i64>)>> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(None) };
        if let Some(l) = self.with_stats(table, |s| s.longest)? {
            return Ok(l);
        }
        let sql =
            format!("SELECT end - start, rowid FROM \"{}\" WHERE {VALID} ORDER BY end - start DESC LIMIT 1", t.name);
        match self.conn().query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?))) {
            Ok(v) => Ok(Some(v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(self.sql_err(table)(e)),
        }
    }

    /// Σ `end - start` of the valid rows of a timed table (0 when absent).
    pub fn sum_durations(&self, table: &'static str) -> Result<i64> {
        let Some(t) = self.optional(table, &["start", "end"])? else { return Ok(0) };
        if let Some(Some(v)) = self.with_stats(table, |s| s.sum_dur)? {
            return Ok(v);
        }
        let sql = format!("SELECT sum(end - start) FROM \"{}\" WHERE {VALID}", t.name);
        let s: Option<i64> = self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(table))?;
        Ok(s.unwrap_or(0))
    }

    /// Distinct `globalTid` values of the runtime calls (0 when absent).
    pub fn runtime_thread_count(&self) -> Result<i64> {
        let Some(t) = self.optional(schema::RUNTIME, &["globalTid"])? else { return Ok(0) };
        if let Some(n) = self.with_stats(schema::RUNTIME, |s| s.thread_ids.len() as i64)? {
            return Ok(n);
        }
        let sql = format!("SELECT count(DISTINCT globalTid) FROM \"{}\"", t.name);
        self.conn().query_row(&sql, [], |r| r.get(0)).map_err(self.sql_err(schema::RUNTIME))
    }

    /// NVTX marks and ranges on threads that made runtime calls: `(count, count starting after after_ns,
    /// max(start, end))` (zeros without NVTX_EVENTS or runtime calls).
    pub fn nvtx_on_runtime_threads(&self, after_ns: i64) -> Result<(i64, i64, i64)> {
        let Some(rt) = self.optional(schema::RUNTIME, &["end", "globalTid"])? else { return Ok((0, 0, 0)) };
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["start", "end", "eventType", "globalTid"])? else {
            return Ok((0, 0, 0));
        };
        // the runtime threads from the one runtime scan, then one NVTX scan (no IN subquery re-reading RUNTIME)
        if let Some(tids) = self.with_stats(schema::RUNTIME, |s| s.thread_ids.clone())? {
            if let Some(th) = self.stats.nvtx_threads.borrow().as_deref() {
                return Ok(th.on(&tids, after_ns));
            }
            // no read of every NVTX row yet: the marks and ranges alone, counted as that read counts them
            let mut th = Some(NvtxThreads::default());
            let types = nvtx_types_condition(&NVTX_MARKS_AND_RANGES);
            self.scan(schema::NVTX_EVENTS, &["start", "end", "globalTid", "eventType"]).run(&types, |row| {
                if th.as_mut().is_some_and(|t| !t.add(row.int(4), row.int(1), row.int(2), row.int(3))) {
                    th = None;
                }
                Ok(())
            })?;
            if let Some(th) = th {
                return Ok(th.on(&tids, after_ns));
            }
        }
        let sql = format!(
            "SELECT count(*), coalesce(sum(n.start > ?1), 0), coalesce(max(max(n.start, coalesce(n.end, n.start))), 0)
             FROM \"{}\" n WHERE n.{} AND n.globalTid IN (SELECT DISTINCT globalTid FROM \"{}\")",
            nv.name,
            nvtx_types_condition(&NVTX_MARKS_AND_RANGES),
            rt.name
        );
        self.conn()
            .query_row(&sql, [after_ns], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))
            .map_err(self.sql_err(schema::NVTX_EVENTS))
    }

    /// Kernel starts in each tenth of `[first, first + window)` (a start past the end counts in the last tenth).
    pub fn kernel_start_tenths(&self, first: i64, window: i64) -> Result<Option<[i64; 10]>> {
        let Some(k) = self.optional(schema::KERNEL, &["start"])? else { return Ok(None) };
        let sql = format!(
            "SELECT min(9, (start - ?1) * 10 / ?2), count(*) FROM \"{}\" WHERE start >= ?1 GROUP BY 1 ORDER BY 1",
            k.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::KERNEL))?;
        let rows = stmt
            .query_map([first, window.max(1)], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .and_then(|r| r.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(self.sql_err(schema::KERNEL))?;
        let mut tenths = [0i64; 10];
        for (i, n) in rows {
            if (0..10).contains(&i) {
                tenths[i as usize] += n;
            }
        }
        Ok(Some(tenths))
    }

    /// Kernel rows by demangled name: `(name, instances, Σ duration)` over valid intervals; a name id without a
    /// string is `<unknown kernel name id N>`. None when the KERNEL table is absent.
    pub fn kernel_time_by_name(&self) -> Result<Option<Vec<(String, i64, i64)>>> {
        let Some(k) = self.optional(schema::KERNEL, &["start", "end", cols::DEMANGLED_NAME])? else { return Ok(None) };
        self.require(schema::STRING_IDS, &cols::STRING_IDS)?;
        // one scan of the kernel rows aggregated by name id (that of the timed stats when it was asked to keep
        // them, else its own), then the names of those ids: SQLite's GROUP BY over the joined string sorts every
        // row (≈ 2 s per million kernels); the SQL below stays for a name id that is not an integer and for a
        // sum that does not fit
        let kept = self.known_stats(schema::KERNEL, |s| s.name_time.clone()).flatten();
        let by_id = match kept {
            Some(m) => Some(m),
            None => self.kernel_time_by_name_id(&k.name)?,
        };
        if let Some(rows) = by_id.and_then(|m| self.kernel_names_of(m)) {
            return Ok(Some(rows));
        }
        let sql = format!(
            "SELECT COALESCE(s.value, '<unknown kernel name id ' || k.demangledName || '>'), count(*), sum(k.end - k.start) \
             FROM \"{}\" k LEFT JOIN StringIds s ON s.id = k.demangledName WHERE {VALID_K} GROUP BY 1",
            k.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::KERNEL))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|r| r.collect())
            .map_err(self.sql_err(schema::KERNEL))?;
        Ok(Some(rows))
    }

    /// The kernel rows aggregated by name id in one scan: `id → (rows, Σ duration)`; None (use the SQL) when a
    /// name id is not an integer or a sum overflows.
    pub(super) fn kernel_time_by_name_id(&self, table: &str) -> Result<Option<crate::fx::FxMap<i64, (i64, i64)>>> {
        let sql = format!("SELECT demangledName, end - start FROM \"{table}\" WHERE {VALID}");
        let mut q = RawQuery::prepare(self.conn(), &sql).map_err(self.sql_err(schema::KERNEL))?;
        let mut by_id: crate::fx::FxMap<i64, (i64, i64)> = Default::default();
        while let Some(row) = q.next().map_err(self.sql_err(schema::KERNEL))? {
            let (IntCell::Int(id), IntCell::Int(d)) = (row.int(0), row.int(1)) else {
                return Ok(None);
            };
            let e = by_id.entry(id).or_insert((0, 0));
            let Some(sum) = e.1.checked_add(d) else { return Ok(None) };
            *e = (e.0 + 1, sum);
        }
        Ok(Some(by_id))
    }

    /// `(name, rows, Σ duration)` of kernel rows aggregated by name id: ids of one string count as one name, as
    /// GROUP BY over the string does; None (use the SQL) when StringIds cannot be read as text or a sum overflows.
    pub(super) fn kernel_names_of(&self, by_id: crate::fx::FxMap<i64, (i64, i64)>) -> Option<Vec<(String, i64, i64)>> {
        let ids: HashSet<i64> = by_id.keys().copied().collect();
        let names = self.strings_for(&ids).ok()?;
        let mut by_name: HashMap<String, (i64, i64)> = HashMap::new();
        for (id, (n, sum)) in by_id {
            let name = names.get(&id).cloned().unwrap_or_else(|| format!("<unknown kernel name id {id}>"));
            let e = by_name.entry(name).or_insert((0, 0));
            *e = (e.0 + n, e.1.checked_add(sum)?);
        }
        Some(by_name.into_iter().map(|(name, (n, sum))| (name, n, sum)).collect())
    }

    /// Number of NVTX range rows (push/pop and start/end; None without NVTX_EVENTS): counted by the read of
    /// every range row when one was made on this connection ([`Export::put_nvtx_range_rows`]), else by SQL.
    pub fn nvtx_range_rows(&self) -> Result<Option<i64>> {
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["eventType", "text"])? else { return Ok(None) };
        if let Some(n) = self.stats.nvtx_range_rows.get() {
            return Ok(Some(n));
        }
        let sql = format!(
            "SELECT count(*) FROM \"{}\" WHERE eventType IN ({}, {})",
            nv.name,
            schema::nvtx::PUSH_POP,
            schema::nvtx::START_END
        );
        self.conn().query_row(&sql, [], |r| r.get(0)).map(Some).map_err(self.sql_err(schema::NVTX_EVENTS))
    }

    /// The names of the NVTX domains created (`nvtxDomainCreate` rows: `text`, else `textId` → StringIds),
    /// sorted, distinct.
    pub fn nvtx_domain_names(&self) -> Result<Vec<String>> {
        let Some(nv) = self.optional(schema::NVTX_EVENTS, &["eventType", "text"])? else { return Ok(Vec::new()) };
        let has_id = nv.has_column("textId") && self.has_table(schema::STRING_IDS);
        let sql = if has_id {
            format!(
                "SELECT DISTINCT COALESCE(e.text, s.value) AS n FROM \"{}\" e LEFT JOIN StringIds s ON s.id = e.textId \
                 WHERE e.eventType = {} AND n IS NOT NULL ORDER BY n",
                nv.name,
                schema::nvtx::DOMAIN_CREATE
            )
        } else {
            format!(
                "SELECT DISTINCT text FROM \"{}\" WHERE eventType = {} AND text IS NOT NULL ORDER BY text",
                nv.name,
                schema::nvtx::DOMAIN_CREATE
            )
        };
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::NVTX_EVENTS))?;
        let v: Vec<Option<String>> = stmt
            .query_map([], |r| Ok(crate::export::text_lossy(r.get_ref(0)?).0))
            .and_then(|r| r.collect())
            .map_err(self.sql_err(schema::NVTX_EVENTS))?;
        Ok(v.into_iter().flatten().collect())
    }
}
