//! The typed rows the readers deliver (NVTX, runtime, device, sync, diagnostic) and the skipped-row counts
//! ([`RowSkips`]) of timed tables.

use super::*;

/// Rows of one timed table that were skipped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalSkips {
    /// `start` is NULL.
    pub null_start: u64,
    /// `end` is NULL (and `start` is not).
    pub null_end: u64,
    /// `end < start`.
    pub inverted: u64,
}

impl IntervalSkips {
    pub fn total(&self) -> u64 {
        self.null_start + self.null_end + self.inverted
    }
}

/// Skipped rows of the timed CUDA tables, by table name (only tables with a skipped row are listed).
pub type RowSkips = BTreeMap<String, IntervalSkips>;

/// Add `b` into `a`.
pub fn merge_skips(a: &mut RowSkips, b: &RowSkips) {
    for (t, s) in b {
        let e = a.entry(t.clone()).or_default();
        e.null_start += s.null_start;
        e.null_end += s.null_end;
        e.inverted += s.inverted;
    }
}

/// A one-line summary of skipped rows (`KERNEL: 3 with a NULL start, 1 with end < start; …`), None when none.
pub fn describe_skips(s: &RowSkips) -> Option<String> {
    let parts: Vec<String> = s
        .iter()
        .filter(|(_, v)| v.total() > 0)
        .map(|(t, v)| {
            let mut why = Vec::new();
            if v.null_start > 0 {
                why.push(format!("{} with a NULL start", v.null_start));
            }
            if v.null_end > 0 {
                why.push(format!("{} with a NULL end", v.null_end));
            }
            if v.inverted > 0 {
                why.push(format!("{} with end < start", v.inverted));
            }
            format!("{t}: {}", why.join(", "))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `NVTX_EVENTS` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvtxRow {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub event_type: i64,
    pub text: Option<String>,
    pub text_id: Option<i64>,
    pub global_tid: Option<i64>,
    /// `domainId`, None when NULL, 0 (the default domain) or the column is absent.
    pub domain_id: Option<i64>,
}

/// `CUPTI_ACTIVITY_KIND_RUNTIME` row with a valid interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeRow {
    pub start: i64,
    pub end: i64,
    pub global_tid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub name_id: Option<i64>,
}

/// A device activity row (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE) with a valid interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRow {
    pub start: i64,
    pub end: i64,
    pub global_pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub device_id: Option<i64>,
}

/// `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` row with a valid interval (`syncType` differs between nsys versions
/// and is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncRow {
    pub start: i64,
    pub end: i64,
    pub global_pid: Option<i64>,
    pub correlation_id: Option<i64>,
}

/// A `DIAGNOSTIC_EVENT` row (nsys 2024+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticRow {
    pub timestamp: i64,
    pub severity: i64,
    pub text: Option<String>,
}

pub(crate) fn type_name(v: ValueRef) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}
