//! One step's sweep: its device, API and communication intervals by class, partitioned in priority order into
//! the components of its wall.

use super::*;

/// The components in the priority order of the sweep (`unattributed` last: the rest).
pub const PRIORITY: [&str; 7] =
    ["gpu_kernel", "comm", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "unattributed"];

/// The GPU span of a step on each device it ran on: `(deviceId, (first start, last end))`.
type StepSpans = Vec<(i64, (i64, i64))>;
/// The GPU spans of the steps, by device.
pub(super) type SpansByDevice = BTreeMap<i64, Vec<(i64, i64)>>;

/// What every step of [`analyze_window_with`] reads: the steps are independent, so they run in parallel chunks.
pub(super) struct StepCx<'a> {
    pub(super) a: &'a sqlite_ranges::Analysis,
    pub(super) iv: &'a sqlite_ranges::IntervalTable,
    /// The steps' occurrence indices, by start.
    pub(super) idx: &'a [usize],
    pub(super) api: &'a ApiIds,
    pub(super) tl: &'a device::Timelines,
    pub(super) comm_occ: &'a HashMap<i64, Vec<(i64, i64)>>,
    pub(super) rank_pids: &'a [i64],
    pub(super) dev_pos: &'a BTreeMap<i64, usize>,
    pub(super) comm: CommRows<'a>,
    /// The OS runtime waits of the steps' threads ([`crate::export::Export::osrt_waits`]).
    pub(super) waits: &'a HashMap<i64, Vec<(i64, i64)>>,
}

impl StepCx<'_> {
    /// Every step, in order, and the GPU span of each step on each device it ran on.
    pub(super) fn steps(&self) -> (Vec<Step>, SpansByDevice) {
        let n = self.idx.len();
        let chunk = n.div_ceil(crate::export::rows::scan_threads().max(1)).max(256);
        // each thread writes its steps in place (100 k steps of ~350 bytes: no part copied into the whole on
        // one thread) and returns its steps' spans in step order
        let mut steps: Vec<Step> = Vec::with_capacity(n);
        let parts: Vec<StepSpans> = std::thread::scope(|s| {
            let handles: Vec<_> = steps.spare_capacity_mut()[..n]
                .chunks_mut(chunk)
                .enumerate()
                .map(|(c, slots)| {
                    s.spawn(move || {
                        let (mut spans, mut scratch) = (StepSpans::new(), StepScratch::default());
                        for (j, slot) in slots.iter_mut().enumerate() {
                            slot.write(self.step(c * chunk + j, &mut spans, &mut scratch));
                        }
                        spans
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a step thread panicked")).collect()
        });
        // SAFETY: the chunks cover the first `n` slots and every thread wrote each slot of its chunk once before
        // it was joined (a thread that panicked stopped this function above: its steps are leaked, never read).
        unsafe { steps.set_len(n) };
        let mut spans = SpansByDevice::new();
        for (d, span) in parts.into_iter().flatten() {
            spans.entry(d).or_default().push(span);
        }
        (steps, spans)
    }

    /// Step `k` (occurrence `idx[k]`), in the buffers of `scratch`; its GPU span on each device it ran on is
    /// pushed on `spans`.
    pub(super) fn step(&self, k: usize, spans: &mut StepSpans, scratch: &mut StepScratch) -> Step {
        let (a, iv, tl) = (self.a, self.iv, self.tl);
        let i = self.idx[k];
        let o = a.occurrences.get(i);
        let m = a.occurrences.metrics(i);
        let host_comm = host_comm_of(self.comm_occ, o.global_tid, o.start, o.end);
        let waits = gpu_waits_of(self.waits, tl, o.global_tid, (o.start, o.end), m.last_device_end);
        let c = step_components_with(o.start, o.end, &iv[i], self.api, self.comm, &host_comm, &waits, scratch);
        debug_assert_eq!(c.sum(), o.end - o.start);
        // the next step of the same rank (process)
        let rank_of = |j: usize| crate::export::ns_of(a.occurrences.get(j).global_tid);
        let gap =
            self.idx[k + 1..].iter().find(|&&j| rank_of(j) == rank_of(i)).map(|&j| a.occurrences.get(j).start - o.end);
        let comm_busy = union_len(iv[i].device.iter().filter(|d| self.comm.has(d)).map(|d| (d.start, d.end)).collect());
        let mut idle = IdleSplit::default();
        if let (Some(fs), Some(le)) = (m.first_device_start, m.last_device_end) {
            let mut devs: Vec<i64> = iv[i].device.iter().map(|d| self.comm.device_id(&d)).collect();
            devs.sort_unstable();
            devs.dedup();
            let mut v = [0i64; 4];
            for d in devs {
                spans.push((d, (fs, le)));
                if let Some(&p) = self.dev_pos.get(&d) {
                    let s = tl.devices[p].idle_in(fs, le).values();
                    for q in 0..4 {
                        v[q] += s[q];
                    }
                }
            }
            idle = IdleSplit { host_wait: v[0], sync_wait: v[1], launch_latency: v[2], other: v[3] };
        }
        let rank = self.rank_pids.iter().position(|&p| p == crate::export::ns_of(o.global_tid)).unwrap_or(0);
        let graph_launches = iv[i].runtime.iter().filter(|r| self.api.is_graph_launch(r.name_id)).count() as u64;
        Step {
            index: k,
            start_ns: o.start,
            wall_ns: o.end - o.start,
            components: c,
            global_tid: o.global_tid,
            kernels: m.kernels,
            memcpys: m.memcpys,
            memsets: m.memsets,
            graph_traces: m.graph_traces,
            runtime_calls: m.runtime_calls,
            graph_launches,
            gpu_busy_ns: m.busy_ns,
            gpu_span_ns: m.span_ns,
            gpu_idle_in_span_ns: m.idle_in_span_ns(),
            first_device_start_ns: m.first_device_start,
            last_device_end_ns: m.last_device_end,
            host_gap_to_next_ns: gap,
            rank,
            comm_busy_ns: comm_busy,
            host_comm_ns: union_len(host_comm),
            idle,
            geometry: None,
            outlier: false,
            warmup: false,
        }
    }
}

/// The capture's NCCL kernel rows by `(deviceId, start, end)` ([`device::Timelines::nccl_keys`]), and the
/// `deviceId` of each device index of the correlated rows ([`sqlite_ranges::Collected::device_ids`]).
#[derive(Clone, Copy)]
pub struct CommRows<'a> {
    pub keys: &'a HashSet<(i64, i64, i64)>,
    pub device_ids: &'a [i64],
}

impl CommRows<'_> {
    /// Is this correlated row an NCCL kernel (recognised by `(device, start, end)` among the NCCL rows)?
    pub(super) fn has(&self, d: &sqlite_ranges::CorrelatedDeviceRow) -> bool {
        d.kind == DeviceKind::Kernel && self.keys.contains(&(self.device_id(d), d.start, d.end))
    }
    /// The CUDA `deviceId` of a correlated row.
    pub(super) fn device_id(&self, d: &sqlite_ranges::CorrelatedDeviceRow) -> i64 {
        self.device_ids[d.device as usize]
    }
}

/// What each class of [`step_classes`] counts as (the last entry: the rest).
pub const CLASS_COMPONENT: [&str; 8] =
    ["gpu_kernel", "comm", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "comm", "unattributed"];

/// Substrings (case-insensitive) of a host communication label.
pub const COMM_LABEL_PATTERNS: [&str; 10] = [
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "all_to_all",
    "alltoall",
    "broadcast",
    "nccl",
];

/// Is this NVTX label host-side communication?
pub fn is_comm_label(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    COMM_LABEL_PATTERNS.iter().any(|p| l.contains(p))
}

/// The host communication ranges of thread `tid` starting inside `[start, end)`, clipped to it.
/// The processes (`NS(globalTid)`) that run collectives with NCCL: they opened a range in NCCL's own NVTX
/// domain (`NCCL:ncclAllReduce`, …) or their steps own NCCL kernels. NCCL's calls are asynchronous: the host call
/// enqueues the collective, and the wait for the peers is the NCCL kernel's time on the GPU (measured: held-out
/// `nccl`, world size 1, `NCCL:ncclAllReduce` 7.4 µs per call while `tp.all_reduce` around torch's
/// `dist.all_reduce` took 82.7 µs of host time with no peer to wait for).
pub(super) fn nccl_processes(
    a: &sqlite_ranges::Analysis,
    iv: &sqlite_ranges::IntervalTable,
    idx: &[usize],
    nccl: CommRows<'_>,
) -> HashSet<i64> {
    let by_domain = a.occurrences.iter().filter(|o| o.label.starts_with(NCCL_DOMAIN_PREFIX));
    let by_kernel = idx.iter().filter(|&&i| iv[i].device.iter().any(|d| nccl.has(&d))).map(|&i| a.occurrences.get(i));
    by_domain.chain(by_kernel).map(|o| crate::export::ns_of(o.global_tid)).collect()
}

/// The label prefix of NCCL's own NVTX domain (`DOMAIN:` labels of the ranges contract).
pub const NCCL_DOMAIN_PREFIX: &str = "NCCL:";

/// The OS runtime waits of thread `tid` in `[start, end)` while the GPUs its process uses are busy (its GPU work
/// runs, whichever thread launched it: XLA's executor, PyTorch's autograd thread): the thread waits for the GPU.
/// A wait in flight when the step's own device work ends (`last_device_end`: it started before and returned at or
/// after the end of the step's last correlated device row) was released by that work's completion: all of it is
/// waiting for the GPU, as a CUDA sync call that returns after the work is done (JAX/XLA's `block_until_ready()`
/// blocks in `futex` from the launch to past the last kernel: 199 of 200 steps of jax_decode, 38.5 ms). The rest
/// of another wait (the GPU idle too: waiting for another host thread, the GIL) is not: multiprocessing's feeder
/// thread holds the GIL of a vLLM-shaped engine (engine_spawn: 390 `pthread_cond_timedwait`, none in flight when
/// its step's device work ends); counting the idle gaps inside the step's device span (nsys's GPU projection)
/// made 11 % of its steps "sync_wait".
pub(super) fn gpu_waits_of(
    waits: &HashMap<i64, Vec<(i64, i64)>>,
    tl: &device::Timelines,
    tid: i64,
    (start, end): (i64, i64),
    last_device_end: Option<i64>,
) -> Vec<(i64, i64)> {
    let Some(v) = waits.get(&tid) else { return Vec::new() };
    let pid = crate::export::ns_of(tid);
    let first = v.partition_point(|w| w.1 <= start);
    let mut out = Vec::new();
    for &(ws, we) in v[first..].iter().take_while(|w| w.0 < end) {
        let (s, e) = (ws.max(start), we.min(end));
        if e <= s {
            continue;
        }
        if last_device_end.is_some_and(|le| ws < le && le <= we) {
            out.push((s, e));
            continue;
        }
        for d in tl.devices.iter().filter(|d| d.has_process(pid)) {
            out.extend(d.busy_within(s, e));
        }
    }
    out
}

pub(super) fn host_comm_of(comm: &HashMap<i64, Vec<(i64, i64)>>, tid: i64, start: i64, end: i64) -> Vec<(i64, i64)> {
    let Some(v) = comm.get(&tid) else { return Vec::new() };
    let lo = v.partition_point(|c| c.0 < start);
    v[lo..].iter().take_while(|c| c.0 < end).map(|&(s, e)| (s, e.min(end))).filter(|(s, e)| e > s).collect()
}

/// The runtime API name ids of the steps' calls by what a step asks of them, from their names once (not a
/// SipHash lookup and a substring search per call of every step).
#[derive(Debug, Default)]
pub struct ApiIds {
    launch: crate::fx::FxSet<i64>,
    graph_launch: crate::fx::FxSet<i64>,
}

impl ApiIds {
    pub fn of(names: &HashMap<i64, String>) -> ApiIds {
        let ids = |f: fn(&str) -> bool| names.iter().filter(|(_, n)| f(n)).map(|(&id, _)| id).collect();
        ApiIds { launch: ids(is_launch), graph_launch: ids(crate::export::schema::is_graph_launch) }
    }
    /// A launch API (kernel or graph).
    pub(super) fn is_launch(&self, id: Option<i64>) -> bool {
        id.is_some_and(|i| self.launch.contains(&i))
    }
    pub(super) fn is_graph_launch(&self, id: Option<i64>) -> bool {
        id.is_some_and(|i| self.graph_launch.contains(&i))
    }
}

/// The buffers one thread's steps reuse from one step to the next (a step's classes and partition were eleven
/// allocations).
#[derive(Debug, Default)]
pub struct StepScratch {
    pub(super) classes: Vec<Vec<(i64, i64)>>,
    pub(super) partition: PartitionBuffers,
}

/// The intervals of one step per class, in priority order: compute kernels, NCCL kernels, memcpy/memset,
/// sync APIs, launch APIs, other APIs, host communication ranges (see [`CLASS_COMPONENT`]).
pub fn step_classes(
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
) -> Vec<Vec<(i64, i64)>> {
    let mut cls = Vec::new();
    fill_step_classes(iv, api, nccl, host_comm, waits, &mut cls);
    cls
}

/// [`step_classes`] into `cls` (its vectors reused).
pub(super) fn fill_step_classes(
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
    cls: &mut Vec<Vec<(i64, i64)>>,
) {
    cls.resize_with(7, Vec::new);
    cls.iter_mut().for_each(Vec::clear);
    cls[6].extend_from_slice(host_comm);
    // OS runtime waits while the step's GPU work runs: waiting for the GPU, as a sync call; inside a host
    // communication range a wait is that communication's (class 6)
    if host_comm.is_empty() {
        cls[3].extend_from_slice(waits);
    } else {
        let comm = device::union(host_comm.to_vec());
        for &(s, e) in waits {
            let mut at = s;
            for &(cs, ce) in comm.iter().filter(|c| c.1 > s && c.0 < e) {
                if cs > at {
                    cls[3].push((at, cs));
                }
                at = at.max(ce);
            }
            if e > at {
                cls[3].push((at, e));
            }
        }
    }
    for d in iv.device.iter() {
        let k = match d.kind {
            DeviceKind::Kernel if nccl.has(&d) => 1,
            DeviceKind::Kernel | DeviceKind::GraphTrace => 0,
            DeviceKind::Memcpy | DeviceKind::Memset => 2,
        };
        cls[k].push((d.start, d.end));
    }
    for r in iv.runtime.iter() {
        let k = if r.sync {
            3
        } else if api.is_launch(r.name_id) {
            4
        } else {
            5
        };
        cls[k].push((r.start, r.end));
    }
}

/// The partition of one step from its intervals.
pub fn step_components(
    start: i64,
    end: i64,
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
) -> Components {
    step_components_with(start, end, iv, api, nccl, host_comm, waits, &mut StepScratch::default())
}

/// [`step_components`] in the buffers of `scratch`.
#[allow(clippy::too_many_arguments)]
pub(super) fn step_components_with(
    start: i64,
    end: i64,
    iv: &OccurrenceIntervals,
    api: &ApiIds,
    nccl: CommRows<'_>,
    host_comm: &[(i64, i64)],
    waits: &[(i64, i64)],
    scratch: &mut StepScratch,
) -> Components {
    let StepScratch { classes, partition } = scratch;
    fill_step_classes(iv, api, nccl, host_comm, waits, classes);
    let (v, rest) = partition_in(start, end, classes, partition);
    Components {
        gpu_kernel: v[0],
        comm: v[1] + v[6],
        gpu_memcpy: v[2],
        sync_wait: v[3],
        launch_api: v[4],
        other_api: v[5],
        unattributed: rest,
    }
}

impl Components {
    /// The value of a component by name.
    pub fn get(&self, name: &str) -> i64 {
        Components::NAMES.iter().position(|n| *n == name).map(|k| self.values()[k]).unwrap_or(0)
    }
}

/// The priority sweep of `[start, end)` in time order: `(class, from, to)` with consecutive ns of one class
/// merged; class `classes.len()` is the rest.
pub fn sweep_segments(start: i64, end: i64, classes: &[Vec<(i64, i64)>]) -> Vec<(usize, i64, i64)> {
    let unions: Vec<Vec<(i64, i64)>> = classes
        .iter()
        .map(|c| device::union(c.iter().map(|&(s, e)| (s.max(start), e.min(end))).filter(|(s, e)| e > s).collect()))
        .collect();
    let mut cuts: Vec<i64> = vec![start, end];
    for u in &unions {
        for &(s, e) in u {
            cuts.push(s);
            cuts.push(e);
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let covers = |u: &[(i64, i64)], t: i64| {
        let i = u.partition_point(|x| x.1 <= t);
        i < u.len() && u[i].0 <= t
    };
    let mut out: Vec<(usize, i64, i64)> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let k = unions.iter().position(|u| covers(u, a)).unwrap_or(classes.len());
        match out.last_mut() {
            Some(l) if l.0 == k && l.2 == a => l.2 = b,
            _ => out.push((k, a, b)),
        }
    }
    out
}
