//! The inputs of the timelines: runtime API classes and kernel names from `StringIds`, the device ops, and the
//! runtime calls that issued them by `(globalPid, correlationId)`.

use super::*;

/// What the one pass over `StringIds` tells the timelines: runtime API classes, launch API names, NCCL names.
#[derive(Default)]
pub(super) struct Names {
    pub(super) api_of: FxMap<i64, Api>,
    pub(super) launch_names: HashMap<i64, String>,
    /// Ids of communication kernel names ([`crate::categories::is_communication_kernel`]): an NCCL (or custom
    /// all-reduce) kernel when a kernel row carries one.
    pub(super) nccl: FxMap<i64, String>,
}

pub(super) fn names_of(export: &Export) -> Result<Names> {
    let mut n = Names::default();
    export.for_each_string(|id, v| {
        let Ok(v) = std::str::from_utf8(v) else { return };
        if crate::categories::is_communication_kernel(v) {
            n.nccl.insert(id, v.to_string());
        }
        let a = classify(v);
        if a != Api::Other {
            n.api_of.insert(id, a);
            if matches!(a, Api::KernelLaunch | Api::GraphLaunch) {
                n.launch_names.insert(id, base_name(v).to_string());
            }
        }
    })?;
    Ok(n)
}

/// The rows by device, the process ids they index, the NCCL kernel rows by name id, the node-level rows
/// ([`ops_of`]).
pub(super) struct Ops {
    pub(super) by_dev: BTreeMap<i64, OpRows>,
    /// The rows' `globalPid` values (−1 for NULL), sorted: [`Op::process`] indexes them.
    pub(super) pids: Vec<i64>,
    pub(super) nccl_by_id: FxMap<i64, (u64, i64)>,
    pub(super) node_rows: u64,
    /// Rows whose key several calls share ([`AMBIGUOUS_CALL`]): linked to none.
    pub(super) ambiguous: u64,
}

/// The device rows the timelines are built from: the ranges scan's, shared, or given to them alone (then each
/// chunk is dropped once its rows are timeline rows, and its pages given back as they add up).
pub(super) enum Chunks<'a> {
    Shared(&'a [DeviceChunk]),
    Owned(Vec<DeviceChunk>),
}

/// Bytes of chunks dropped after which their pages are given back ([`crate::memory::release_free_memory`]).
const TRIM_EVERY: usize = 32 << 20;

/// Every device row of the capture, by device (rows in table then rowid order), as the ranges scan read them,
/// each linked to the runtime call of its `(globalPid, correlationId)`.
pub(super) fn ops_of(device: Chunks, names: &Names, calls: &Calls, skips: &mut RowSkips) -> Ops {
    let all = match &device {
        Chunks::Shared(v) => *v,
        Chunks::Owned(v) => v.as_slice(),
    };
    // each device's rows allocated once at their size (5 M rows: no doubling copies); the process ids
    let mut sizes: BTreeMap<i64, usize> = BTreeMap::new();
    let mut pids: Vec<i64> = Vec::new();
    for c in all.iter().filter(|c| c.kind.is_some()) {
        for (rows, pid, dev) in c.segments() {
            *sizes.entry(dev.unwrap_or(-1)).or_default() += rows.len();
            pids.push(pid.unwrap_or(-1));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    let by_dev: BTreeMap<i64, OpRows> = sizes.into_iter().map(|(d, n)| (d, OpRows::with_capacity(n))).collect();
    let mut o = Ops { by_dev, pids, nccl_by_id: FxMap::default(), node_rows: 0, ambiguous: 0 };
    match device {
        Chunks::Shared(v) => v.iter().for_each(|c| add_chunk(&mut o, c, names, calls, skips)),
        Chunks::Owned(v) => {
            let mut freed = 0usize;
            for c in v {
                add_chunk(&mut o, &c, names, calls, skips);
                freed += c.heap_bytes();
                drop(c);
                if freed >= TRIM_EVERY {
                    crate::memory::release_free_memory();
                    freed = 0;
                }
            }
            if freed > 0 {
                crate::memory::release_free_memory();
            }
        }
    }
    o
}

/// Rows of a chunk linked to their calls by one thread at a time ([`add_chunk`]): with the threads of the scan,
/// at most ~16 MB of rows as read are in flight on 16 threads, whatever the capture's size.
const LINK_SLICE: usize = 1 << 15;

/// The rows of one slice linked ([`link_slice`]): as read, the NCCL kernel rows' `(count, Σ duration)` by name
/// id, and the rows linked to no call because several calls share their key.
#[derive(Default)]
struct Linked {
    ops: Vec<Op>,
    nccl: FxMap<i64, (u64, i64)>,
    ambiguous: u64,
}

/// The rows of one chunk added to `o` ([`ops_of`]): slices of each run of rows linked to their calls in parallel
/// (the lookup is most of the work: 7.2 s of a 100 M-kernel capture on one thread), added in order.
fn add_chunk(o: &mut Ops, c: &DeviceChunk, names: &Names, calls: &Calls, skips: &mut RowSkips) {
    crate::export::merge_skips(skips, &c.skips);
    o.node_rows += c.node_rows;
    let Some(kind) = c.kind else { return };
    let threads = crate::export::rows::scan_threads().max(1);
    for (idx, pid, dev) in c.segments() {
        let (pid, dev) = (pid.unwrap_or(-1), dev.unwrap_or(-1));
        let process = o.pids.partition_point(|&p| p < pid) as u32;
        let v = o.by_dev.entry(dev).or_default();
        let slices: Vec<std::ops::Range<usize>> =
            idx.clone().step_by(LINK_SLICE).map(|lo| lo..(lo + LINK_SLICE).min(idx.end)).collect();
        // one buffer per thread, reused: fresh pages for every slice cost more than the lookups they save
        let mut bufs: Vec<Linked> = (0..threads.min(slices.len())).map(|_| Linked::default()).collect();
        for group in slices.chunks(threads) {
            let link = |r: &std::ops::Range<usize>, l: &mut Linked| {
                link_slice(c, r.clone(), kind, pid, process, names, calls, l)
            };
            if group.len() == 1 {
                link(&group[0], &mut bufs[0]);
            } else {
                std::thread::scope(|s| {
                    for (r, l) in group.iter().zip(bufs.iter_mut()) {
                        s.spawn(move || link(r, l));
                    }
                });
            }
            for l in bufs.iter_mut().take(group.len()) {
                l.ops.iter().for_each(|&op| v.push(op));
                for (&id, &(n, t)) in &l.nccl {
                    let e = o.nccl_by_id.entry(id).or_insert((0, 0));
                    e.0 += n;
                    e.1 += t;
                }
                o.ambiguous += l.ambiguous;
            }
        }
    }
}

/// Rows `idx` of `c` (one process and device) linked to the runtime calls of their `(globalPid, correlationId)`,
/// into `out` (cleared first).
#[allow(clippy::too_many_arguments)]
fn link_slice(
    c: &DeviceChunk,
    idx: std::ops::Range<usize>,
    kind: DeviceKind,
    pid: i64,
    process: u32,
    names: &Names,
    calls: &Calls,
    out: &mut Linked,
) {
    out.ops.clear();
    out.nccl.clear();
    out.ambiguous = 0;
    // rows come nearly in correlation order: each lookup tries the previous call and its successor first
    let mut hint = 0usize;
    for i in idx {
        let r = c.rows[i];
        let (end, corr) = (c.end(i), c.correlation_id(i, r.aux));
        let name = c.name(i);
        let nccl = kind == DeviceKind::Kernel && name.is_some_and(|n| names.nccl.contains_key(&n));
        if nccl {
            let e = out.nccl.entry(name.unwrap_or(-1)).or_insert((0, 0));
            e.0 += 1;
            e.1 += end - r.start;
        }
        let mut call = corr.map_or(NO_CALL, |corr| calls.find(pid, corr, &mut hint));
        if call == AMBIGUOUS_CALL {
            out.ambiguous += 1;
            call = NO_CALL;
        }
        out.ops.push(Op::new(r.start, end, call, process, kind, nccl));
    }
}

/// What [`Calls::find`] answers for a key that several runtime calls share: the device row is linked to none.
pub(super) const AMBIGUOUS_CALL: u32 = u32::MAX - 1;

/// The runtime calls with a correlation id, sorted by `(pid, corr)` (one per key: the last in table order): where
/// the ranges scan keeps them (8 bytes a call; a copy of each was 48, 62 MB at 5 M kernels) and their API
/// classes; and each thread's blocking sync calls, unioned. A call's index is its place in this order.
#[derive(Default)]
pub(super) struct Calls<'a> {
    pub(super) parts: &'a [CallPart],
    pub(super) at: Vec<CallAt>,
    /// Indices in `at` of the keys that several calls share, ascending.
    pub(super) shared: Vec<u32>,
    pub(super) api: Vec<Api>,
    pub(super) syncs: FxMap<i64, Vec<(i64, i64)>>,
}

/// A call's `(pid, corr)`: the key of its device rows.
pub(super) fn key_of(c: &CapturedCall) -> (i64, Option<i64>) {
    (ns_of(c.global_tid), c.correlation_id)
}

/// The call kept at `c` in `parts`.
pub(super) fn call_at(parts: &[CallPart], c: &CallAt) -> CapturedCall {
    parts[c.part as usize].get(c.i as usize)
}

impl<'a> Calls<'a> {
    /// The call of index `k`.
    pub(super) fn get(&self, k: u32) -> Option<CapturedCall> {
        self.at.get(k as usize).map(|c| call_at(self.parts, c))
    }

    /// The index of the call of `(pid, corr)`, trying `hint` and its successor first (rows come nearly in
    /// correlation order); [`AMBIGUOUS_CALL`] when several calls have that key.
    pub(super) fn find(&self, pid: i64, corr: i64, hint: &mut usize) -> u32 {
        let key = (pid, Some(corr));
        let at = |i: usize| self.get(i as u32).is_some_and(|c| key_of(&c) == key);
        let i = if at(*hint) {
            *hint
        } else if at(*hint + 1) {
            *hint + 1
        } else {
            let i = self.at.partition_point(|c| key_of(&call_at(self.parts, c)) < key);
            if !at(i) {
                return NO_CALL;
            }
            i
        };
        *hint = i;
        if self.shared.binary_search(&(i as u32)).is_ok() {
            return AMBIGUOUS_CALL;
        }
        i as u32
    }

    /// When `o` was issued: its call's start (at most its own start), else its start.
    pub(super) fn issue_of(&self, o: &Op) -> i64 {
        match self.get(o.call) {
            Some(c) => c.start.min(o.start),
            None => o.start,
        }
    }
}

pub(super) fn calls_of<'a>(rows: &'a CapturedRows, names: &Names, skips: &mut RowSkips) -> Calls<'a> {
    crate::export::merge_skips(skips, &rows.runtime_skips);
    let parts = rows.runtime.parts();
    let api_of = |c: &CapturedCall| names.api_of.get(&c.name_id).copied().unwrap_or(Api::Other);
    let mut at: Vec<CallAt> = Vec::with_capacity(rows.runtime.len());
    let mut syncs: FxMap<i64, Vec<(i64, i64)>> = FxMap::default();
    for (part, calls) in parts.iter().enumerate() {
        for (i, c) in calls.iter().enumerate() {
            if api_of(&c) == Api::Sync {
                syncs.entry(c.global_tid).or_default().push((c.start, c.end));
            }
            if c.correlation_id.is_some() {
                at.push(CallAt { part: part as u32, i: i as u32 });
            }
        }
    }
    let call = |c: &CallAt| call_at(parts, c);
    // stable: equal keys keep table order, and the last of them is kept (its API class, its syncs); a key
    // several calls share is noted: its device rows are linked to none of them
    at.sort_by_key(|c| key_of(&call(c)));
    let mut shared: Vec<u32> = Vec::new();
    let mut kept_len = 1usize;
    at.dedup_by(|later, kept| {
        let same = key_of(&call(later)) == key_of(&call(kept));
        if same {
            *kept = *later;
            // `kept` is the last entry kept so far: index kept_len - 1
            if shared.last() != Some(&(kept_len as u32 - 1)) {
                shared.push(kept_len as u32 - 1);
            }
        } else {
            kept_len += 1;
        }
        same
    });
    at.shrink_to_fit();
    let api = at.iter().map(|c| api_of(&call(c))).collect();
    let syncs = syncs.into_iter().map(|(k, v)| (k, union(v))).collect();
    Calls { parts, at, shared, api, syncs }
}
