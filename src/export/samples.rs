//! CPU samples (`--sample=process-tree`; the seed's sidecar recipe asks for `--sample=cpu`): nsys writes one
//! `COMPOSITE_EVENTS` row per sample (time, thread) and its call stack in `SAMPLING_CALLCHAINS` (depth 0 = the
//! leaf frame; `symbol`, `module` → StringIds). Measured on nsys 2025.3.1 (fixtures/nsys-2025.3.1/
//! engine_samples): 5 467 samples in 8.3 s at the default period of 2 000 000 CPU-clock ns, every one
//! `Running`; `--python-sampling=true` adds no table to the SQLite export (the Python frames stay in the
//! report), so the frames are native ones (`_PyEval_EvalFrameDefault`, `libtorch_cpu.so`…).

use std::collections::{HashMap, HashSet};

use super::schema;
use super::Export;
use crate::contract::Result;

/// The leaf frame of a sample.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function (nsys writes an address such as `0x61cb5d` when it could not resolve the symbol).
    pub symbol: String,
    /// The module's file name without its folder (`libtorch_cpu.so`, `python3.12`).
    pub module: String,
}

/// The CPU samples of some threads.
#[derive(Debug, Clone, Default)]
pub struct CpuSamples {
    /// Per thread (`globalTid`): `(time, index into frames)`, by time; a sample without a call stack has
    /// index `u32::MAX`.
    pub by_tid: HashMap<i64, Vec<(i64, u32)>>,
    /// The distinct leaf frames.
    pub frames: Vec<Frame>,
    /// The sampling period in CPU-clock ns ([`schema::SAMPLING_PERIOD_SETTING`]), when the export says.
    pub period_ns: Option<i64>,
}

/// A sample with no call stack (`CpuSamples::by_tid` frame index).
pub const NO_FRAME: u32 = u32::MAX;

impl Export {
    /// The CPU samples of the threads `tids`; None when the export holds no sample at all (captured with
    /// `--sample=none`: no table, or the empty table of `nsys export --lazy=false`).
    pub fn cpu_samples(&self, tids: &crate::fx::FxSet<i64>) -> Result<Option<CpuSamples>> {
        let Some(ev) = self.optional(schema::COMPOSITE_EVENTS, &schema::cols::COMPOSITE_EVENTS)? else {
            return Ok(None);
        };
        let chains = self.optional(schema::SAMPLING_CALLCHAINS, &schema::cols::SAMPLING_CALLCHAINS)?;
        let period_ns = self
            .capture_settings()?
            .into_iter()
            .find(|(n, _)| n == schema::SAMPLING_PERIOD_SETTING)
            .and_then(|(_, v)| v?.trim().parse::<i64>().ok())
            .filter(|p| *p > 0);
        let mut out = CpuSamples { period_ns, ..Default::default() };
        let sql = match chains {
            Some(c) => format!(
                "SELECT e.globalTid, e.start, c.symbol, c.module FROM \"{}\" e LEFT JOIN \"{}\" c ON c.id = e.id AND c.stackDepth = 0",
                ev.name, c.name
            ),
            None => format!("SELECT globalTid, start, NULL, NULL FROM \"{}\"", ev.name),
        };
        let err = self.sql_err(schema::COMPOSITE_EVENTS);
        let mut stmt = self.conn().prepare(&sql).map_err(&err)?;
        let mut rows = stmt.query([]).map_err(&err)?;
        let mut ids: HashMap<(i64, i64), u32> = HashMap::new();
        let mut keys: Vec<(i64, i64)> = Vec::new();
        let mut any = false;
        while let Some(r) = rows.next().map_err(&err)? {
            any = true;
            let tid: Option<i64> = r.get(0).map_err(&err)?;
            let Some(tid) = tid.filter(|t| tids.contains(t)) else { continue };
            let Some(t) = r.get::<_, Option<i64>>(1).map_err(&err)? else { continue };
            let key: (Option<i64>, Option<i64>) = (r.get(2).map_err(&err)?, r.get(3).map_err(&err)?);
            let frame = match key {
                (Some(s), Some(m)) => *ids.entry((s, m)).or_insert_with(|| {
                    keys.push((s, m));
                    (keys.len() - 1) as u32
                }),
                _ => NO_FRAME,
            };
            out.by_tid.entry(tid).or_default().push((t, frame));
        }
        drop(rows);
        drop(stmt);
        if !any {
            return Ok(None);
        }
        for v in out.by_tid.values_mut() {
            v.sort_unstable();
        }
        let want: HashSet<i64> = keys.iter().flat_map(|&(s, m)| [s, m]).collect();
        let names = self.strings_for(&want)?;
        let name = |id: i64| names.get(&id).cloned().unwrap_or_else(|| format!("<string {id}>"));
        out.frames = keys
            .iter()
            .map(|&(s, m)| {
                let module = name(m);
                let module = module.rsplit('/').next().unwrap_or(&module).to_string();
                Frame { symbol: name(s), module }
            })
            .collect();
        Ok(Some(out))
    }
}
