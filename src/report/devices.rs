//! The device side of the report: what each GPU did (`devices`), the communication share the class reads
//! (exposed communication, per device), and the verdict of a capture without any NVTX range (`basis: device`),
//! which has no phase to attribute anything to but still has its device rows and runtime calls.
//!
//! Every number is a union on one device (never a sum of durations, never a union across devices); a
//! capture-wide share is Σ over devices of the part over Σ over devices of the busy union (device time).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{dur, pct, Signals, COMM_SHARE_MIN, MEMCPY_SHARE_MIN};
use crate::categories::Categories;
use crate::evidence::{Evidence, NoRange};
use crate::step_budget::GPU_SATURATED_SHARE;

/// One GPU's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceEvidence {
    /// CUDA `deviceId`.
    pub device_id: i64,
    /// Union of its KERNEL, MEMCPY, MEMSET and GRAPH_TRACE rows (any process).
    pub busy_ns: i64,
    /// Its first row's start and last row's end.
    pub span_start_ns: i64,
    pub span_end_ns: i64,
    /// `span − busy`: the GPU idle inside its active span (not host time).
    pub idle_in_span_ns: i64,
    /// `busy / span` (null for an empty span).
    pub busy_fraction: Option<f64>,
    /// |MEMCPY ∪ MEMSET| and the part no kernel runs under (null: not measured, see `notes`).
    pub copy_ns: Option<i64>,
    pub exposed_copy_ns: Option<i64>,
    /// |communication kernels| and the part no compute kernel runs under (null: not measured).
    pub comm_ns: Option<i64>,
    pub exposed_comm_ns: Option<i64>,
    /// `exposed_comm_ns / busy_ns`.
    pub exposed_comm_share: Option<f64>,
    /// The idle inside its active span split by cause (host_wait, sync_wait, launch_latency, other; the device
    /// timelines of docs/step-budget.md), and its launches: present when the report built the device picture
    /// (no step can be attributed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_by_cause: Option<crate::step_budget::device::IdleSplit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_launches: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_launches: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_launch_latency_median_ns: Option<i64>,
}

/// The rows of every device: busy union and active span from the ranges document's `totals.per_device`, copies
/// and communication from the export's [`Exposure`] when it was measured.
pub fn rows(ev: &Evidence) -> Vec<DeviceEvidence> {
    let Some(rv) = &ev.ranges else { return Vec::new() };
    rv.totals
        .per_device
        .iter()
        .map(|d| {
            let x = ev.exposure.as_ref().and_then(|x| x.devices.iter().find(|e| e.device_id == d.device_id));
            let pic = ev.picture.iter().flatten().find(|p| p.device_id == d.device_id);
            let span = d.last_end - d.first_start;
            DeviceEvidence {
                device_id: d.device_id,
                busy_ns: d.busy_union_ns,
                span_start_ns: d.first_start,
                span_end_ns: d.last_end,
                idle_in_span_ns: (span - d.busy_union_ns).max(0),
                busy_fraction: super::frac(d.busy_union_ns, span),
                copy_ns: x.map(|x| x.copy_ns),
                exposed_copy_ns: x.map(|x| x.exposed_copy_ns),
                comm_ns: x.map(|x| x.comm_ns),
                exposed_comm_ns: x.map(|x| x.exposed_comm_ns),
                exposed_comm_share: x.and_then(|x| super::frac(x.exposed_comm_ns, x.busy_ns)),
                idle_by_cause: pic.map(|p| p.idle_by_cause),
                kernel_launches: pic.map(|p| p.kernel_launches),
                graph_launches: pic.map(|p| p.graph_launches),
                kernel_launch_latency_median_ns: pic.and_then(|p| p.kernel_launch_latency_median_ns),
            }
        })
        .collect()
}

/// Every capture with device rows gets its device section (what each GPU did is evidence whatever decides).
pub fn shown(_ev: &Evidence, rows: &[DeviceEvidence]) -> bool {
    !rows.is_empty()
}

/// `comm_share`, where it comes from, and a note when it could not be the exposed share: Σ exposed communication
/// / Σ device busy when the export's exposure measured communication kernels (an all-reduce under the GEMMs of
/// another stream does not hold the GPU back), else the `communication` category's share of kernel time (a
/// bundle: the overlap is not known). The exposure knows communication kernels by the built-in pattern
/// ([`crate::categories::is_communication_kernel`]); a `--categories` file that calls other kernels
/// communication keeps the category's share, with a note, rather than mixing two definitions.
pub fn comm_share(
    ev: &Evidence,
    categories: &Categories,
    category_share: f64,
) -> (f64, Option<String>, Option<String>) {
    let Some(x) = ev.exposure.as_ref().filter(|x| x.sum(|d| d.comm_ns) > 0 && x.sum(|d| d.busy_ns) > 0) else {
        return (category_share, None, None);
    };
    let differ: Vec<&str> = ev
        .kernels
        .iter()
        .flatten()
        .filter(|k| {
            (categories.categorize(&k.name) == "communication") != crate::categories::is_communication_kernel(&k.name)
        })
        .map(|k| k.name.as_str())
        .collect();
    if let Some(first) = differ.first() {
        return (
            category_share,
            None,
            Some(format!(
                "comm_share is the communication category's share of summed kernel time, not the exposed share: the categories ({}) and the built-in communication pattern the per-device exposure uses disagree on {} kernel name(s) (e.g. {first:?}); devices[].comm_ns follow the built-in pattern",
                categories.source(),
                differ.len()
            )),
        );
    }
    (
        x.sum(|d| d.exposed_comm_ns) as f64 / x.sum(|d| d.busy_ns) as f64,
        Some(format!(
            "communication kernels not overlapped by other KERNEL/GRAPH_TRACE rows on the same device / device busy union, summed over {} device(s) ({} of {} ns; communication {} ns, {:.1}% of kernel time summed)",
            x.devices.len(),
            x.sum(|d| d.exposed_comm_ns),
            x.sum(|d| d.busy_ns),
            x.sum(|d| d.comm_ns),
            category_share * 100.0
        )),
        None,
    )
}

/// The devices whose own exposed-communication share reaches the threshold while the capture-wide share does
/// not: the ranks are not alike (one waits in communication the others hide), a note, never the class.
pub fn uneven_comm_note(rows: &[DeviceEvidence], comm_share: Option<f64>) -> Option<String> {
    let high: Vec<String> = rows
        .iter()
        .filter(|r| r.exposed_comm_share.is_some_and(|s| s >= COMM_SHARE_MIN))
        .map(|r| format!("device {} {}", r.device_id, pct(r.exposed_comm_share)))
        .collect();
    (!high.is_empty() && comm_share.is_some_and(|s| s < COMM_SHARE_MIN)).then(|| {
        format!(
            "exposed communication is uneven across the GPUs: {} of its busy time (≥ {:.0}%) against {} over all devices; a rank that waits in communication while the others compute points at a straggler (step-budget's stragglers[])",
            high.join(", "),
            COMM_SHARE_MIN * 100.0,
            pct(comm_share)
        )
    })
}

/// One line per device: busy of its active span, exposed communication and copies when measured.
fn summary(rows: &[DeviceEvidence]) -> String {
    rows.iter()
        .map(|r| {
            let mut s = format!(
                "device {}: busy {} of its {} active span ({})",
                r.device_id,
                dur(r.busy_ns),
                dur(r.span_end_ns - r.span_start_ns),
                pct(r.busy_fraction)
            );
            if let (Some(c), Some(e)) = (r.comm_ns.filter(|c| *c > 0), r.exposed_comm_ns) {
                s.push_str(&format!(", communication {} of which {} with no compute under it", dur(c), dur(e)));
            }
            if let (Some(c), Some(e)) = (r.copy_ns.filter(|c| *c > 0), r.exposed_copy_ns) {
                s.push_str(&format!(", copies {} of which {} with no kernel under them", dur(c), dur(e)));
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The blocking calls of the capture, the three longest by total time.
fn blocking_summary(nr: &NoRange) -> String {
    let mut calls: Vec<&crate::nvtx_readiness::SyncApiCount> = nr.blocking_calls.iter().collect();
    calls.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.api.cmp(&b.api)));
    if calls.is_empty() {
        return "no blocking sync or copy call".into();
    }
    let total: i64 = calls.iter().map(|c| c.total_ns).sum();
    let top: Vec<String> =
        calls.iter().take(3).map(|c| format!("{} {} calls {}", c.api, c.calls, dur(c.total_ns))).collect();
    format!("blocking sync and copy calls {} in all ({})", dur(total), top.join(", "))
}

/// The verdict of a capture in which no step can be attributed (no NVTX range, or only a framework's own
/// ranges, or nothing that behaves like a step: `why`), from the device picture of every GPU (the rules of
/// [`crate::step_budget::picture`], shared with step-budget), prefixed with why no phase can be attributed.
pub fn decide_picture(
    rows: &[crate::step_budget::picture::PictureRow],
    why: &str,
    nr: Option<&NoRange>,
) -> (&'static str, &'static str, String) {
    let v = crate::step_budget::picture::decide(rows);
    let reason = format!(
        "no phase can be attributed: {why}, so the verdict rests on what the GPUs did: {}; decided by: {}{}; {}",
        v.reason,
        v.decided_by.join("; "),
        nr.map(|n| format!("; {}", blocking_summary(n))).unwrap_or_default(),
        crate::export::nvtx::ANNOTATE
    );
    (v.class, v.rule, reason)
}

/// The verdict of a capture without any NVTX range, from its device rows (first match wins): exposed
/// communication ≥ [`COMM_SHARE_MIN`] of the device busy time → `comm_bound`; exposed copies ≥
/// [`MEMCPY_SHARE_MIN`] → `memcpy_bound`; every GPU busy ≥ [`GPU_SATURATED_SHARE`] of its active span →
/// `kernel_bound`; otherwise `mixed_or_unclear`: the host time between kernels cannot be attributed to a phase
/// (launch, Python, scheduling and sync look alike there), so no host-side class is claimed.
pub fn decide(rows: &[DeviceEvidence], s: &Signals, nr: &NoRange) -> (&'static str, &'static str, String) {
    let ge = |x: Option<f64>, t: f64| x.is_some_and(|v| v >= t);
    let (class, rule, finding) = if ge(s.comm_share, COMM_SHARE_MIN) {
        (
            "comm_bound",
            "device.comm_exposed",
            format!(
                "communication with no compute under it takes {} of the device busy time (≥ {:.0}%)",
                pct(s.comm_share),
                COMM_SHARE_MIN * 100.0
            ),
        )
    } else if ge(s.memcpy_device_share, MEMCPY_SHARE_MIN) {
        (
            "memcpy_bound",
            "device.copies_exposed",
            format!("copies take {} of device time (≥ {:.0}%)", pct(s.memcpy_device_share), MEMCPY_SHARE_MIN * 100.0),
        )
    } else if rows.iter().all(|r| ge(r.busy_fraction, GPU_SATURATED_SHARE)) {
        (
            "kernel_bound",
            "device.gpu_saturated",
            format!("every GPU is busy at least {:.0}% of its active span", GPU_SATURATED_SHARE * 100.0),
        )
    } else {
        (
            "mixed_or_unclear",
            "device.no_phase",
            format!(
                "the GPU idles in its active span (a saturated GPU is busy ≥ {:.0}% of it) and nothing names the host time between kernels: launch, Python, scheduling and sync look alike there",
                GPU_SATURATED_SHARE * 100.0
            ),
        )
    };
    let reason = format!(
        "no phase can be attributed: the capture holds no NVTX range{}, so the verdict rests on the device rows alone: {finding}; {}; communication {} and copies {} of the device time; {}; {}",
        nr.cause.as_deref().map(|c| format!(", {c}")).unwrap_or_default(),
        summary(rows),
        pct(s.comm_share),
        pct(s.memcpy_device_share),
        blocking_summary(nr),
        crate::export::nvtx::ANNOTATE
    );
    (class, rule, reason)
}
