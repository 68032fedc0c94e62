//! Lookups by id and small tables: `StringIds`, processes, thread names, diagnostics, capture settings, GPUs,
//! the session start and the system environment.

use super::*;

impl Export {
    /// `globalPid` of every `PROCESSES` row (empty when absent).
    pub fn process_ids(&self) -> Result<HashSet<i64>> {
        let tbl = schema::PROCESSES;
        let mut out = HashSet::new();
        if self.optional(tbl, &cols::PROCESSES)?.is_none() {
            return Ok(out);
        }
        self.scan(tbl, &["globalPid"]).run("", |row| {
            if let Some(g) = self.int_at(row, 1, tbl, "globalPid")? {
                out.insert(g);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `(globalTid, nameId)` of every `ThreadNames` row with both set, in table order (empty when absent).
    pub fn thread_names(&self, mut f: impl FnMut(i64, i64)) -> Result<()> {
        let tbl = schema::THREAD_NAMES;
        if self.optional(tbl, &cols::THREAD_NAMES)?.is_none() {
            return Ok(());
        }
        self.scan(tbl, &cols::THREAD_NAMES).run("", |row| {
            if let (Some(nid), Some(g)) = (self.int_at(row, 1, tbl, "nameId")?, self.int_at(row, 2, tbl, "globalTid")?)
            {
                f(g, nid);
            }
            Ok(())
        })
    }

    /// Every `StringIds` row whose value is TEXT, as `(id, bytes)` (required table).
    pub fn for_each_string(&self, mut f: impl FnMut(i64, &[u8])) -> Result<()> {
        let tbl = schema::STRING_IDS;
        self.require(tbl, &cols::STRING_IDS)?;
        self.scan(tbl, &cols::STRING_IDS).run("", |row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if let ValueRef::Text(v) = row.get_ref(2).map_err(|e| self.sql_err(tbl)(e))? {
                f(id, v);
            }
            Ok(())
        })
    }

    /// The `StringIds` values of `ids` (one scan; a non-TEXT value of a wanted id is an input error).
    pub fn strings_for(&self, ids: &HashSet<i64>) -> Result<HashMap<i64, String>> {
        self.string_values_for(ids, None)
    }

    /// [`Export::strings_for`] as NVTX labels: each cut to [`crate::labels::LABEL_MAX_BYTES`] as it is read
    /// ([`crate::labels::label_of_bytes`]), so a long string never stays in memory whole.
    pub fn labels_for(&self, ids: &HashSet<i64>) -> Result<HashMap<i64, String>> {
        self.string_values_for(ids, Some(crate::labels::label_of_bytes))
    }

    /// The one scan of [`Export::strings_for`] and [`Export::labels_for`]: a TEXT value of a wanted id through
    /// `of_text` when given (on its bytes, before any copy), else as the column's text.
    pub(super) fn string_values_for(
        &self,
        ids: &HashSet<i64>,
        of_text: Option<fn(&[u8]) -> String>,
    ) -> Result<HashMap<i64, String>> {
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let tbl = schema::STRING_IDS;
        self.require(tbl, &cols::STRING_IDS)?;
        self.scan(tbl, &cols::STRING_IDS).run("", |row| {
            let Some(id) = self.int_at(row, 1, tbl, "id")? else { return Ok(()) };
            if !ids.contains(&id) {
                return Ok(());
            }
            if let Some(f) = of_text {
                if let ValueRef::Text(t) = row.get_ref(2).map_err(|e| self.sql_err(tbl)(e))? {
                    out.insert(id, f(t));
                    return Ok(());
                }
            }
            if let Some(v) = self.text_at(row, 2, tbl, "value")? {
                out.insert(id, v);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The ids of the `StringIds` values for which `keep` gives a key, with that key.
    pub fn string_ids_where<K>(&self, keep: impl Fn(&str) -> Option<K>) -> Result<HashMap<i64, K>> {
        let mut out = HashMap::new();
        self.for_each_string(|id, v| {
            if let Some(k) = std::str::from_utf8(v).ok().and_then(&keep) {
                out.insert(id, k);
            }
        })?;
        Ok(out)
    }

    /// `DIAGNOSTIC_EVENT` rows by timestamp (empty when the table is absent: nsys 2023.4 writes none).
    pub fn diagnostic_events(&self) -> Result<Vec<DiagnosticRow>> {
        let tbl = schema::DIAGNOSTIC_EVENT;
        let Some(t) = self.optional(tbl, &cols::DIAGNOSTIC_EVENT)? else { return Ok(Vec::new()) };
        let sql = format!("SELECT timestamp, severity, CAST(text AS TEXT) FROM \"{}\" ORDER BY timestamp", t.name);
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(tbl))?;
        let rows: Vec<(i64, i64, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .map_err(self.sql_err(tbl))?;
        Ok(rows.into_iter().map(|(timestamp, severity, text)| DiagnosticRow { timestamp, severity, text }).collect())
    }

    /// `META_DATA_CAPTURE` `(name, value)` rows: the capture settings (empty when absent).
    pub fn capture_settings(&self) -> Result<Vec<(String, Option<String>)>> {
        self.name_values(schema::META_DATA_CAPTURE)
    }

    /// `TARGET_INFO_GPU` rows: `name`, then those of [`cols::GPU_DETAILS`] the table has, each as text.
    pub fn target_gpus(&self) -> Result<Vec<GpuRow>> {
        let tbl = schema::TARGET_INFO_GPU;
        let Some(g) = self.optional(tbl, &["name"])? else { return Ok(Vec::new()) };
        let present: Vec<&'static str> =
            std::iter::once("name").chain(cols::GPU_DETAILS.iter().copied().filter(|c| g.has_column(c))).collect();
        let sel = present.iter().map(|c| format!("CAST({c} AS TEXT)")).collect::<Vec<_>>().join(", ");
        let mut stmt = self.conn().prepare(&format!("SELECT {sel} FROM \"{}\"", g.name)).map_err(self.sql_err(tbl))?;
        let rows = stmt
            .query_map([], |r| {
                let mut v = Vec::new();
                for (i, c) in present.iter().enumerate() {
                    v.push((*c, crate::export::text_lossy(r.get_ref(i)?).0));
                }
                Ok(v)
            })
            .and_then(|r| r.collect())
            .map_err(self.sql_err(tbl))?;
        Ok(rows)
    }

    // ---- aggregates computed by SQLite (valid intervals only)
}

/// One `TARGET_INFO_GPU` row: `(column, value as text)`, `name` first.
pub type GpuRow = Vec<(&'static str, Option<String>)>;

impl Export {
    /// When the capture session started: `TARGET_INFO_SESSION_START_TIME.utcEpochNs` (UTC ns since the epoch);
    /// None when the table is absent or empty (capture-compare checks that baseline and trial alternated).
    pub fn session_start_utc_ns(&self) -> Result<Option<i64>> {
        let Some(t) = self.optional(schema::TARGET_INFO_SESSION_START_TIME, &["utcEpochNs"])? else { return Ok(None) };
        self.conn()
            .query_row(&format!("SELECT min(utcEpochNs) FROM \"{}\"", t.name), [], |r| r.get::<_, Option<i64>>(0))
            .map_err(self.sql_err("TARGET_INFO_SESSION_START_TIME.utcEpochNs"))
    }
}

/// [`Export::session_start_utc_ns`] (the free function capture-compare calls).
pub fn session_start_utc_ns(export: &Export) -> Result<Option<i64>> {
    export.session_start_utc_ns()
}
// ---- readers added for gate verdicts (helper H6)

impl Export {
    /// `TARGET_INFO_SYSTEM_ENV` `(name, value)` rows (empty when absent): `CudaDriverVersion` (`13000`),
    /// `DeviceEnvironment` (`;`-separated `NAME=value`), ….
    pub fn system_env(&self) -> Result<Vec<(String, Option<String>)>> {
        self.name_values(schema::TARGET_INFO_SYSTEM_ENV)
    }
}
