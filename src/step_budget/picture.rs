//! The device picture: what each GPU did over its whole active span, and the one class it supports when no
//! engine step can be attributed (no NVTX range at all, only a framework's own op ranges, or no label that
//! behaves like a step). `report` and `step-budget` decide from it with the same rules.
//!
//! Per device (CUDA `deviceId`, every process): the busy union of its KERNEL, MEMCPY, MEMSET and GRAPH_TRACE
//! rows, its active span (first row start to last row end), the idle inside that span split by cause (the
//! device timelines' attribution, docs/step-budget.md: `host_wait`, `sync_wait`, `launch_latency`, `other`),
//! its launches and their latency, and the copy and communication time no compute of that device runs under.
//! Shares over several devices are Σ of the part over Σ of the whole, each term a union on its own device.
//!
//! # Rules (first match wins)
//! 1. no device row → `mixed_or_unclear` (`device.no_rows`); fewer than [`MIN_LAUNCHES`] launches linked to the
//!    rows → `mixed_or_unclear` (`device.too_few_launches`);
//! 2. exposed communication ≥ [`COMM_SHARE_MIN`] of the busy time → `comm_bound` (`device.comm_exposed`);
//! 3. exposed copies ≥ [`COPY_SHARE_MIN`] of the busy time → `memcpy_bound` (`device.copies_exposed`);
//! 4. every device busy ≥ [`BUSY_MIN`] of its active span → `kernel_bound` (`device.gpu_busy`);
//! 5. the idle's dominant cause (≥ [`IDLE_DOMINANT`] of the idle of all devices): `sync_wait` → `sync_bound`
//!    (`device.idle_sync_wait`: the GPU waits while the host blocks in a synchronisation call);
//!    `launch_latency` → `cpu_launch_bound` (`device.idle_launch_latency`: issued work waits to start);
//!    `host_wait` → `cpu_launch_bound` when the launching threads issue a launch at least every
//!    [`LAUNCH_INTERVAL_MAX_NS`] on average (the host launches as fast as it can and the GPU still waits:
//!    `device.idle_host_wait_launch_rate`), else `python_overhead_bound` (`device.idle_host_wait`: host code
//!    between CUDA calls, which no range names, holds the GPU back);
//! 6. otherwise → `mixed_or_unclear` (`device.no_dominant_idle`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::device::{IdleSplit, Timelines};
use crate::categories::KernelStat;
use crate::contract::Result;
use crate::export::{schema, Export};

/// Exposed communication share of the busy time from which communication bounds the capture.
pub const COMM_SHARE_MIN: f64 = 0.30;
/// Exposed copy share of the busy time from which copies bound the capture.
pub const COPY_SHARE_MIN: f64 = 0.30;
/// Busy share of its active span from which a device is the bottleneck (its idle is not what holds it back).
pub const BUSY_MIN: f64 = 0.80;
/// Share of the idle time one cause must reach to name the class.
pub const IDLE_DOMINANT: f64 = 0.50;
/// Fewer kernel and graph launches than this say nothing about what bounds the GPUs.
pub const MIN_LAUNCHES: usize = 10;
/// Mean interval between launches under which a host-wait idle is launch overhead (20 µs).
pub const LAUNCH_INTERVAL_MAX_NS: f64 = 20_000.0;

/// One GPU over its whole active span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PictureRow {
    pub device_id: i64,
    /// Union of its device rows (any process).
    pub busy_ns: i64,
    /// First row start to last row end.
    pub span_ns: i64,
    /// `busy / span` (null for an empty span).
    pub busy_fraction: Option<f64>,
    /// `span − busy`, split by cause (the parts sum to it exactly).
    pub idle_ns: i64,
    pub idle_by_cause: IdleSplit,
    /// Kernel launches and graph launches linked to its rows.
    pub kernel_launches: usize,
    pub graph_launches: usize,
    /// Median call-start to kernel-start latency of its kernel launches (null without any).
    pub kernel_launch_latency_median_ns: Option<i64>,
    /// Share of its issue window with nothing queued or running.
    pub queue_empty_share: f64,
    /// Copy and communication time with no compute of this device under it (null: not measured, see the
    /// exposure rules of crate::evidence::export_exposure).
    pub exposed_copy_ns: Option<i64>,
    pub exposed_comm_ns: Option<i64>,
}

/// The class the device picture supports, and the facts that decided it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PictureVerdict {
    pub class: &'static str,
    /// `device.*` (module docs).
    pub rule: &'static str,
    pub reason: String,
    /// The measured facts the rule read, one line each.
    pub decided_by: Vec<String>,
}

/// The picture of every device of `tl`, with the copy and communication exposure when measured.
pub fn rows(tl: &Timelines, exposure: Option<&Exposure>) -> Vec<PictureRow> {
    tl.devices
        .iter()
        .map(|d| {
            let span = d.idle.span_end_ns - d.idle.span_start_ns;
            let x = exposure.and_then(|x| x.devices.iter().find(|e| e.device_id == d.device_id));
            let idle = IdleSplit {
                host_wait: d.idle.categories.get("host_wait").map_or(0, |c| c.ns),
                sync_wait: d.idle.categories.get("sync_wait").map_or(0, |c| c.ns),
                launch_latency: d.idle.categories.get("launch_latency").map_or(0, |c| c.ns),
                other: d.idle.categories.get("other").map_or(0, |c| c.ns),
            };
            PictureRow {
                device_id: d.device_id,
                busy_ns: d.idle.busy_ns,
                span_ns: span,
                busy_fraction: (span > 0).then(|| d.idle.busy_ns as f64 / span as f64),
                idle_ns: d.idle.idle_ns,
                idle_by_cause: idle,
                kernel_launches: d.launch.kernel_launch.count,
                graph_launches: d.launch.graph_launch.count,
                kernel_launch_latency_median_ns: (d.launch.kernel_launch.count > 0)
                    .then_some(d.launch.kernel_launch.median),
                queue_empty_share: d.launch.queue_depth.empty_share,
                exposed_copy_ns: x.map(|x| x.exposed_copy_ns),
                exposed_comm_ns: x.map(|x| x.exposed_comm_ns),
            }
        })
        .collect()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn ms(ns: i64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The class of the device picture (module docs).
pub fn decide(rows: &[PictureRow]) -> PictureVerdict {
    let busy: i64 = rows.iter().map(|r| r.busy_ns).sum();
    let span: i64 = rows.iter().map(|r| r.span_ns).sum();
    let idle: i64 = rows.iter().map(|r| r.idle_ns).sum();
    let mut facts: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "device {}: busy {} of its {} active span ({}); idle by cause: host_wait {}, sync_wait {}, launch_latency {}, other {}; {} kernel and {} graph launches",
                r.device_id,
                ms(r.busy_ns),
                ms(r.span_ns),
                r.busy_fraction.map(pct).unwrap_or_else(|| "n/a".into()),
                ms(r.idle_by_cause.host_wait),
                ms(r.idle_by_cause.sync_wait),
                ms(r.idle_by_cause.launch_latency),
                ms(r.idle_by_cause.other),
                r.kernel_launches,
                r.graph_launches
            )
        })
        .collect();
    let verdict = |class: &'static str, rule: &'static str, reason: String, facts: Vec<String>| PictureVerdict {
        class,
        rule,
        reason,
        decided_by: facts,
    };
    if rows.is_empty() || busy == 0 {
        return verdict(
            "mixed_or_unclear",
            "device.no_rows",
            "no device row: the GPUs did nothing that was traced".into(),
            facts,
        );
    }
    let launches: usize = rows.iter().map(|r| r.kernel_launches + r.graph_launches).sum();
    if launches < MIN_LAUNCHES {
        let reason = format!(
            "only {launches} launch(es) reached the GPUs (fewer than {MIN_LAUNCHES}): too little device work to say what bounds it"
        );
        return verdict("mixed_or_unclear", "device.too_few_launches", reason, facts);
    }
    let share = |f: fn(&PictureRow) -> Option<i64>| -> Option<f64> {
        let parts: Vec<i64> = rows.iter().filter_map(f).collect();
        (!parts.is_empty()).then(|| parts.iter().sum::<i64>() as f64 / busy as f64)
    };
    let comm = share(|r| r.exposed_comm_ns);
    let copies = share(|r| r.exposed_copy_ns);
    if let Some(c) = comm {
        facts.push(format!("communication with no compute under it: {} of the busy time", pct(c)));
    }
    if let Some(c) = copies {
        facts.push(format!("copies with no kernel under them: {} of the busy time", pct(c)));
    }
    if let Some(c) = comm.filter(|c| *c >= COMM_SHARE_MIN) {
        let reason = format!(
            "communication with no compute under it takes {} of the GPUs' busy time (≥ {})",
            pct(c),
            pct(COMM_SHARE_MIN)
        );
        return verdict("comm_bound", "device.comm_exposed", reason, facts);
    }
    if let Some(c) = copies.filter(|c| *c >= COPY_SHARE_MIN) {
        let reason = format!(
            "copies with no kernel under them take {} of the GPUs' busy time (≥ {})",
            pct(c),
            pct(COPY_SHARE_MIN)
        );
        return verdict("memcpy_bound", "device.copies_exposed", reason, facts);
    }
    let least =
        rows.iter().filter_map(|r| r.busy_fraction.map(|b| (b, r.device_id))).min_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((b, dev)) = least.filter(|(b, _)| *b >= BUSY_MIN) {
        let reason = format!(
            "every GPU is busy at least {} of its active span (the least busy, device {dev}, {}): the GPUs' own work is what takes the time",
            pct(BUSY_MIN),
            pct(b)
        );
        return verdict("kernel_bound", "device.gpu_busy", reason, facts);
    }
    decide_by_idle(rows, span, idle, launches, facts)
}

/// The class of a device picture whose GPUs are neither saturated nor bound by exposed communication or copies:
/// the dominant cause of their idle time (rows `device.idle_*`, or `device.no_dominant_idle`).
fn decide_by_idle(
    rows: &[PictureRow],
    span: i64,
    idle: i64,
    launches: usize,
    mut facts: Vec<String>,
) -> PictureVerdict {
    let verdict = |class: &'static str, rule: &'static str, reason: String, facts: Vec<String>| PictureVerdict {
        class,
        rule,
        reason,
        decided_by: facts,
    };
    let sum = |f: fn(&IdleSplit) -> i64| rows.iter().map(|r| f(&r.idle_by_cause)).sum::<i64>();
    let causes = [
        ("host_wait", sum(|s| s.host_wait)),
        ("sync_wait", sum(|s| s.sync_wait)),
        ("launch_latency", sum(|s| s.launch_latency)),
        ("other", sum(|s| s.other)),
    ];
    let (top, top_ns) = causes.iter().copied().max_by_key(|(n, v)| (*v, std::cmp::Reverse(*n))).unwrap_or(("other", 0));
    let top_share = if idle > 0 { top_ns as f64 / idle as f64 } else { 0.0 };
    facts.push(format!(
        "idle {} of the {} active span of all GPUs ({}); by cause: {}",
        ms(idle),
        ms(span),
        pct(idle as f64 / span.max(1) as f64),
        causes
            .iter()
            .map(|(n, v)| format!("{n} {}", pct(*v as f64 / idle.max(1) as f64)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let idle_part = format!(
        "the GPUs idle {} of their active span and {} of that idle is {top}",
        pct(idle as f64 / span.max(1) as f64),
        pct(top_share)
    );
    if top_share < IDLE_DOMINANT {
        let reason = format!("{idle_part}: no cause of the idle reaches {} of it", pct(IDLE_DOMINANT));
        return verdict("mixed_or_unclear", "device.no_dominant_idle", reason, facts);
    }
    match top {
        "sync_wait" => verdict(
            "sync_bound",
            "device.idle_sync_wait",
            format!(
                "{idle_part} (≥ {}): the GPU waits while the host blocks in a synchronisation call",
                pct(IDLE_DOMINANT)
            ),
            facts,
        ),
        "launch_latency" => verdict(
            "cpu_launch_bound",
            "device.idle_launch_latency",
            format!(
                "{idle_part} (≥ {}): issued work waits to start on the device (launch overhead)",
                pct(IDLE_DOMINANT)
            ),
            facts,
        ),
        "host_wait" => {
            let interval = if launches > 0 { span as f64 / launches as f64 } else { f64::INFINITY };
            facts.push(format!("{launches} launches over {}: one every {:.1} µs on average", ms(span), interval / 1e3));
            if interval <= LAUNCH_INTERVAL_MAX_NS {
                verdict(
                    "cpu_launch_bound",
                    "device.idle_host_wait_launch_rate",
                    format!(
                        "{idle_part} (≥ {}) while the host issues a launch every {:.1} µs on average (≤ {:.0} µs): it launches as fast as it can and the kernels are too short to keep the GPU busy",
                        pct(IDLE_DOMINANT),
                        interval / 1e3,
                        LAUNCH_INTERVAL_MAX_NS / 1e3
                    ),
                    facts,
                )
            } else {
                verdict(
                    "python_overhead_bound",
                    "device.idle_host_wait",
                    format!(
                        "{idle_part} (≥ {}): the next work was not issued yet and the host was not in a synchronisation call, so host code between CUDA calls holds the GPU back (one launch every {:.1} µs on average); no range names that host code",
                        pct(IDLE_DOMINANT),
                        interval / 1e3
                    ),
                    facts,
                )
            }
        }
        _ => verdict(
            "mixed_or_unclear",
            "device.idle_other",
            format!(
                "{idle_part}: device-side scheduling or rows without a runtime call, which no host-side class explains"
            ),
            facts,
        ),
    }
}

/// Summed copy time from this share of the summed kernel and copy time on: copies may bound the capture, and
/// their exposure is measured ([`export_exposure`]; report's `memcpy_bound` rules read the same share).
pub const MEMCPY_SHARE_MIN: f64 = 0.30;

/// Kernel statistics by demangled name from the KERNEL table, and Σ duration of MEMCPY + MEMSET rows.
pub fn export_kernel_stats(export: &Export) -> Result<(Vec<KernelStat>, i64)> {
    let mut out: Vec<KernelStat> = export
        .kernel_time_by_name()?
        .unwrap_or_default()
        .into_iter()
        .map(|(name, instances, total_time_ns)| KernelStat { name, instances, total_time_ns })
        .collect();
    out.sort_by(|a: &KernelStat, b: &KernelStat| {
        b.total_time_ns.cmp(&a.total_time_ns).then_with(|| a.name.cmp(&b.name))
    });
    let mem = export.sum_durations(schema::MEMCPY)? + export.sum_durations(schema::MEMSET)?;
    Ok((out, mem))
}

/// One device's busy time, and the parts of it that copies and communication kernels take with no compute
/// under them: unions of that device's rows (any process), never sums of durations, never across devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceExposure {
    pub device_id: i64,
    /// |KERNEL ∪ MEMCPY ∪ MEMSET ∪ GRAPH_TRACE|: the device busy union.
    pub busy_ns: i64,
    /// |MEMCPY ∪ MEMSET|.
    pub copy_ns: i64,
    /// |copies \ (KERNEL ∪ GRAPH_TRACE)|: copy time no kernel of the device runs under.
    pub exposed_copy_ns: i64,
    /// |communication kernels| ([`crate::categories::is_communication_kernel`]).
    pub comm_ns: i64,
    /// |communication \ (other KERNEL ∪ GRAPH_TRACE)|: communication time no compute of the device runs under
    /// (step-budget's `exposed_comm_ns`, per device instead of per rank).
    pub exposed_comm_ns: i64,
}

/// [`DeviceExposure`] of every device of a capture, by `deviceId`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exposure {
    pub devices: Vec<DeviceExposure>,
}

impl Exposure {
    /// Σ over devices of one field: device time, each term a union on its own device.
    pub fn sum(&self, field: impl Fn(&DeviceExposure) -> i64) -> i64 {
        self.devices.iter().map(field).sum()
    }
}

/// [`Exposure`] of an export from the device rows its ranges scan read ([`crate::sqlite_ranges::CapturedRows`]: report's
/// step detail), measured only when it can change a class (the grouping and unions cost on big exports): the
/// summed copy time reaches [`MEMCPY_SHARE_MIN`] of the summed kernel and copy time, or the kernel table
/// holds communication kernels. Copies on a copy stream under compute on another stream are not what bounds the
/// step (measured: held-out `overlap`, 128 MiB H2D copies under 20 matmuls: the copies are 38.9 % of the summed
/// device time but 7.6 % of the busy union is copy time with no kernel under it), nor is an all-reduce on a
/// communication stream under the GEMMs (tests/it/heldout_devices.rs).
pub fn export_exposure(
    export: &Export,
    device: &[crate::export::rows::DeviceChunk],
    kernels: &[KernelStat],
    copy_sum: i64,
) -> Result<Option<Exposure>> {
    let kernel_sum: i64 = kernels.iter().map(|k| k.total_time_ns).sum();
    let copies = copy_sum > 0 && (copy_sum as f64) >= MEMCPY_SHARE_MIN * (copy_sum + kernel_sum) as f64;
    let comm = kernels.iter().any(|k| crate::categories::is_communication_kernel(&k.name));
    if !copies && !comm {
        return Ok(None);
    }
    let devices = device_rows_by_role(export, device)?.into_iter().map(|(d, r)| r.exposure(d)).collect();
    Ok(Some(Exposure { devices }))
}

type Intervals = Vec<(i64, i64)>;

/// One device's rows by role (intervals, not unioned).
#[derive(Debug, Clone, Default)]
pub struct Roles {
    /// Kernels that are not communication, and GRAPH_TRACE replays.
    pub compute: Intervals,
    /// Communication kernels ([`crate::categories::is_communication_kernel`]).
    pub comm: Intervals,
    /// MEMCPY and MEMSET rows.
    pub copies: Intervals,
}

/// Every valid row of the four device tables as the ranges scan read them (any process; its kernels with their
/// `demangledName` ids), by `deviceId` (-1: none) and role.
pub fn device_rows_by_role(
    export: &Export,
    device: &[crate::export::rows::DeviceChunk],
) -> Result<BTreeMap<i64, Roles>> {
    use crate::export::DeviceKind;
    let comm_ids = export.string_ids_where(|v| crate::categories::is_communication_kernel(v).then_some(()))?;
    let mut by_dev: BTreeMap<i64, Roles> = BTreeMap::new();
    for c in device {
        let Some(kind) = c.kind else { continue };
        for (rows, _, dev) in c.segments() {
            let r = by_dev.entry(dev.unwrap_or(-1)).or_default();
            for i in rows {
                let comm = || c.name(i).is_some_and(|n| comm_ids.contains_key(&n));
                let part = match kind {
                    DeviceKind::Memcpy | DeviceKind::Memset => &mut r.copies,
                    DeviceKind::Kernel if comm() => &mut r.comm,
                    _ => &mut r.compute,
                };
                part.push((c.rows[i].start, c.end(i)));
            }
        }
    }
    Ok(by_dev)
}

impl Roles {
    fn exposure(self, device_id: i64) -> DeviceExposure {
        use super::device::{len, overlap, union};
        let (compute, comm, copies) = (union(self.compute), union(self.comm), union(self.copies));
        let kernels = union([compute.as_slice(), comm.as_slice()].concat());
        let copies_under_kernels = overlap(&kernels, &copies);
        DeviceExposure {
            device_id,
            busy_ns: len(&kernels) + len(&copies) - copies_under_kernels,
            copy_ns: len(&copies),
            exposed_copy_ns: len(&copies) - copies_under_kernels,
            comm_ns: len(&comm),
            exposed_comm_ns: len(&comm) - overlap(&comm, &compute),
        }
    }
}
