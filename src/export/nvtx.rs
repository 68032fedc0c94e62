//! Why an export has no `NVTX_EVENTS` table, from what the capture recorded about NVTX.
//!
//! nsys creates tables lazily: a program traced with `--trace=…,nvtx` that emits no NVTX event leaves no
//! `NVTX_EVENTS` table at all under `nsys export`'s default, and an empty one under `--lazy=false` (measured:
//! `fixtures/nsys-2025.3.1/nonvtx` and `nonvtx_lazy_false`, the same report). That is a capture without NVTX,
//! not a damaged export, and the message says so; a table that is absent although nsys counted NVTX events is a
//! damaged export. The facts:
//!
//! - NVTX traced: `META_DATA_CAPTURE` `PROCESS_n:COLLECT_NVTX_TRACE` (`true`/`false`), else a
//!   `CAPTURE_EVENT_TYPE` row `NvtxEvents`;
//! - nsys's own count: `DIAGNOSTIC_EVENT` rows `Number of NVTX events collected: N` (one per process that
//!   emitted NVTX) and `No NVTX events collected. Does the process use NVTX?` (nsys 2025.3.1; 2023.4 writes no
//!   DIAGNOSTIC_EVENT).

use super::Export;
use crate::contract::Result;

/// What the capture recorded about NVTX.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvtxRecorded {
    /// NVTX tracing as recorded in `META_DATA_CAPTURE`; None when the export does not say.
    pub traced: Option<bool>,
    /// Σ of nsys's `Number of NVTX events collected: N` diagnostics; None when there is no such row.
    pub collected: Option<u64>,
    /// nsys said `No NVTX events collected` for a process.
    pub none_collected: bool,
}

const COLLECTED: &str = "Number of NVTX events collected:";
const NONE_COLLECTED: &str = "No NVTX events collected";

impl Export {
    /// What the capture recorded about NVTX (see the module docs).
    pub fn nvtx_recorded(&self) -> Result<NvtxRecorded> {
        let mut r = NvtxRecorded::default();
        for (name, value) in self.capture_settings()? {
            let v = value.unwrap_or_default();
            if super::schema::capture_keys::is(&name, super::schema::capture_keys::COLLECT_NVTX_TRACE) {
                r.traced = Some(r.traced.unwrap_or(false) || v.eq_ignore_ascii_case("true"));
            } else if name == "CAPTURE_EVENT_TYPE" && v == "NvtxEvents" && r.traced.is_none() {
                r.traced = Some(true);
            }
        }
        for d in self.diagnostic_events()? {
            let text = d.text.unwrap_or_default();
            if let Some(n) =
                text.split_once(COLLECTED).and_then(|(_, n)| n.trim().trim_end_matches('.').parse::<u64>().ok())
            {
                r.collected = Some(r.collected.unwrap_or(0) + n);
            } else if text.contains(NONE_COLLECTED) {
                r.none_collected = true;
            }
        }
        Ok(r)
    }
}

/// The name nsys gives an NVTX event whose string it could not resolve (its analysis failed: "Cannot find string
/// for an exterior index", measured on JAX/XLA captures of nsys 2025.3.1).
pub const UNKNOWN_NAME: &str = "[Unknown]";

impl Export {
    /// NVTX events named [`UNKNOWN_NAME`]: strings nsys lost (0 without an NVTX table).
    pub fn nvtx_unknown_names(&self) -> Result<i64> {
        use super::schema::{cols, NVTX_EVENTS};
        let Some(t) = self.optional(NVTX_EVENTS, &cols::NVTX_EVENTS)? else { return Ok(0) };
        let ids = self.string_ids_where(|v| (v == UNKNOWN_NAME).then_some(()))?;
        let list = ids.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
        let by_id = if list.is_empty() { "0".to_string() } else { format!("textId IN ({list})") };
        self.conn()
            .query_row(
                &format!("SELECT count(*) FROM \"{}\" WHERE text = ?1 OR {by_id}", t.name),
                [UNKNOWN_NAME],
                |r| r.get(0),
            )
            .map_err(self.sql_err(NVTX_EVENTS))
    }
}

impl NvtxRecorded {
    /// The export positively says that no NVTX event was recorded (so an absent table is nsys's lazy creation).
    pub fn nothing_recorded(&self) -> bool {
        self.collected.unwrap_or(0) == 0 && (self.none_collected || self.traced == Some(false))
    }

    /// Does an absent `NVTX_EVENTS` table mean "no NVTX event recorded"? nsys creates it only when it records
    /// one (22 of 42 public exports with kernels have none), so yes, unless nsys's own count says it collected
    /// NVTX events (the export is then damaged or incomplete).
    pub fn absent_table_is_empty(&self) -> bool {
        self.collected.unwrap_or(0) == 0
    }

    /// Why a capture holds no NVTX range, when the export says (the same for its lazy export, which has no
    /// `NVTX_EVENTS` table, and its `--lazy=false` export, which has an empty one).
    pub fn no_range_cause(&self) -> Option<&'static str> {
        if self.collected.unwrap_or(0) > 0 {
            None
        } else if self.traced == Some(false) {
            Some("NVTX was not traced (META_DATA_CAPTURE: COLLECT_NVTX_TRACE=false)")
        } else if self.none_collected {
            Some("NVTX was traced but the program emitted no NVTX event (nsys: \"No NVTX events collected\")")
        } else {
            None
        }
    }

    /// What an absent `NVTX_EVENTS` table means and what to do, one sentence (the file name first).
    pub fn explain_missing_table(&self, file: &str) -> String {
        if let Some(n) = self.collected.filter(|n| *n > 0) {
            return format!(
                "{file}: required table NVTX_EVENTS is missing although nsys collected {n} NVTX events (DIAGNOSTIC_EVENT): the export is incomplete or was edited; export the report again (nsys export --type sqlite)"
            );
        }
        match self.no_range_cause() {
            Some(cause) if self.traced == Some(false) => {
                format!("{file}: no NVTX range to read: {cause}, so the export has no NVTX_EVENTS table; {ANNOTATE}")
            }
            Some(cause) => {
                format!("{file}: no NVTX range to read: {cause}, so nsys created no NVTX_EVENTS table; {ANNOTATE}")
            }
            None => format!(
                "{file}: no NVTX_EVENTS table (a required table is missing): the capture recorded no NVTX event (nsys creates the table only when it records one) or the table was removed; {ANNOTATE}"
            ),
        }
    }
}

/// What to add to a capture without NVTX ranges (every tool's message says the same).
pub const ANNOTATE: &str = "annotate each engine step and phase with an NVTX range (e.g. torch.cuda.nvtx.range_push/range_pop) and capture with --trace=cuda,nvtx,osrt";
