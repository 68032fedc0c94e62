//! `report --trace OUT.json`: a Chrome / Perfetto trace-event file of a window of steps.
//!
//! The window is `--window START:END` in step indexes of the step budget (half-open, as a slice: steps START
//! to END−1), by default [`DEFAULT_WINDOW_STEPS`] steps centred on the median step (the first non-outlier step
//! whose wall is the median wall). In time it runs from the first step's start to the last step's end or the
//! end of the window's last correlated device work, whichever is later: `[start_ns, end_ns)`.
//!
//! What it holds, every timestamp in µs (`ts`, `dur`) as the format requires, every slice clipped to the
//! window (`args.clipped` when it was):
//! - per host thread (pid = the process, tid = the thread; `M` events name both): the NVTX ranges and the
//!   CUDA runtime/driver calls as complete events (`ph: X`); a step's range carries `args.step`/`args.outlier`;
//! - per device and stream (pid "GPU d", tid "GPU d stream s"): kernels, memcpys, memsets and GRAPH_TRACE
//!   replays (`X`);
//! - flow arrows (`ph: s` on the API call, `ph: f` with `bp: e` on the GPU slice, one id per pair) from each
//!   runtime call to the device rows of the same `(globalPid, correlationId)`;
//! - the step budget as counters (`ph: C`, "step budget (µs)", one sample at each step start with its
//!   components, zeros at its end).
//!
//! Slices that do not nest on one track (start/end ranges, concurrent graph nodes) go to extra lanes of the
//! same thread or stream (tid + k·2²⁴, named "… lane k"), so every track nests properly. The file is bounded:
//! at most `--trace-max-events` events ([`DEFAULT_MAX_EVENTS`]); past it the events after a cut-off time are
//! dropped (flows only in pairs), and `otherData` and the report's `trace` and `notes` say so.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::contract::{Error, Result};
use crate::export::schema::DeviceKind;
use crate::export::window::{WindowCall, WindowDeviceRow, WindowRange};
use crate::export::{ns_of, pid_of, tid_of, Export};
use crate::step_budget::StepBudgetDoc;

/// Default of `--trace-max-events`.
pub const DEFAULT_MAX_EVENTS: usize = 200_000;
/// The smallest `--trace-max-events` accepted.
pub const MIN_MAX_EVENTS: usize = 100;
/// Steps in the default window.
pub const DEFAULT_WINDOW_STEPS: usize = 5;
/// GPU tracks live in pids `GPU_PID_BASE + deviceId` (far above any OS pid).
pub const GPU_PID_BASE: i64 = 1 << 30;
/// Extra lanes of a track: tid + lane · 2²⁴.
const LANE: i64 = 1 << 24;

/// What `--trace` wrote (`report.trace`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceSummary {
    pub path: String,
    pub step_label: String,
    /// `[START, END)` in step indexes.
    pub window_steps: [u64; 2],
    /// `--window`, or how the default was chosen.
    pub window_choice: String,
    /// The window in time (ns on the export's clock): `[start_ns, end_ns)`.
    pub start_ns: i64,
    pub end_ns: i64,
    /// Events written (metadata included).
    pub events: u64,
    pub max_events: u64,
    pub truncated: bool,
    pub dropped_events: u64,
    /// When truncated: events at or after this time (ns) were dropped.
    pub truncated_at_ns: Option<i64>,
    /// Rows of each kind in the window (before any truncation).
    pub nvtx_ranges: u64,
    pub runtime_calls: u64,
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub graph_traces: u64,
    /// Flow pairs (launch → GPU work) before any truncation.
    pub flows: u64,
    pub threads: u64,
    pub gpu_streams: u64,
}

/// `START:END` (step indexes, END > START).
pub fn parse_window(s: &str) -> Result<(u64, u64)> {
    let bad = || {
        Error::usage(format!("--window {s:?}: expected START:END, step indexes with END > START (e.g. 10:15)"))
            .with_arg("--window")
    };
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    if b <= a {
        return Err(bad());
    }
    Ok((a, b))
}

/// The default window: [`DEFAULT_WINDOW_STEPS`] steps around the median step, and the median step's index.
pub fn default_window(sb: &StepBudgetDoc) -> (u64, u64, usize) {
    let n = sb.steps.len();
    let median = sb.distributions.get("wall").map(|d| d.median).unwrap_or(0);
    let m = sb
        .steps
        .iter()
        .position(|s| s.wall_ns == median && !s.outlier)
        .or_else(|| (0..n).min_by_key(|&k| (sb.steps[k].wall_ns - median).abs()))
        .unwrap_or(0);
    let w = DEFAULT_WINDOW_STEPS.min(n);
    let start = m.saturating_sub(w / 2).min(n - w);
    (start as u64, (start + w) as u64, m)
}

/// One event with its sort time (ns) and, for flows, its id.
struct Ev {
    ts: i64,
    order: u32,
    flow: Option<u64>,
    v: Value,
}

fn us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

/// Lanes so that every lane nests: `iv` = (start, end) sorted by start then longer first; returns the lane of
/// each.
fn lanes(iv: &[(i64, i64)]) -> Vec<i64> {
    let mut order: Vec<usize> = (0..iv.len()).collect();
    order.sort_by(|&a, &b| iv[a].0.cmp(&iv[b].0).then(iv[b].1.cmp(&iv[a].1)).then(a.cmp(&b)));
    let mut stacks: Vec<Vec<i64>> = Vec::new();
    let mut out = vec![0; iv.len()];
    for k in order {
        let (s, e) = iv[k];
        let mut placed = false;
        for (l, st) in stacks.iter_mut().enumerate() {
            while st.last().is_some_and(|&top| top <= s) {
                st.pop();
            }
            if st.last().is_none_or(|&top| top >= e) {
                st.push(e);
                out[k] = l as i64;
                placed = true;
                break;
            }
        }
        if !placed {
            stacks.push(vec![e]);
            out[k] = (stacks.len() - 1) as i64;
        }
    }
    out
}

fn copy_kind(k: Option<i64>) -> String {
    match k {
        Some(1) => "memcpy HtoD".into(),
        Some(2) => "memcpy DtoH".into(),
        Some(8) => "memcpy DtoD".into(),
        Some(10) => "memcpy PtoP".into(),
        Some(k) => format!("memcpy kind {k}"),
        None => "memcpy".into(),
    }
}

/// Write the trace of `window` (None: the default) of the step budget `sb` of `export` to `out`.
pub fn write(
    export: &Export,
    sb: &StepBudgetDoc,
    window: Option<(u64, u64)>,
    max_events: usize,
    out: &Path,
) -> Result<TraceSummary> {
    if max_events < MIN_MAX_EVENTS {
        return Err(Error::usage(format!(
            "--trace-max-events {max_events}: at least {MIN_MAX_EVENTS} (the process and thread names alone take dozens)"
        ))
        .with_arg("--trace-max-events"));
    }
    let (a, b, choice) = window_steps(export, sb, window)?;
    let steps = &sb.steps[a as usize..b as usize];
    let t0 = steps[0].start_ns;
    let t1 = steps
        .iter()
        .map(|s| (s.start_ns + s.wall_ns).max(s.last_device_end_ns.unwrap_or(i64::MIN)))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);

    let w = read_window(export, t0, t1)?;
    let span = Span { t0, t1 };
    let mut evs = Events::default();
    let mut tracks: BTreeMap<(i64, i64), String> = BTreeMap::new();
    let mut host_pids: BTreeMap<i64, String> = BTreeMap::new();
    let call_at = host_tracks(&w, sb, steps, span, &mut evs, &mut tracks, &mut host_pids);
    let threads = tracks.len() as u64;

    let (gpu_pids, gpu_tracks, flows) = gpu_tracks(&w, &call_at, span, &mut evs, &mut tracks);

    step_counters(steps, span, &mut evs, &mut host_pids);

    let meta = metadata(&host_pids, &gpu_pids, &tracks);

    let (evs, truncated_at, dropped) = bound(evs.evs, &meta, max_events);
    let events = (evs.len() + meta.len()) as u64;
    let mut trace_events: Vec<Value> = meta;
    trace_events.extend(evs.into_iter().map(|e| e.v));
    let summary = TraceSummary {
        path: out.display().to_string(),
        step_label: sb.step_label.clone(),
        window_steps: [a, b],
        window_choice: choice,
        start_ns: t0,
        end_ns: t1,
        events,
        max_events: max_events as u64,
        truncated: truncated_at.is_some(),
        dropped_events: dropped,
        truncated_at_ns: truncated_at,
        nvtx_ranges: w.ranges.len() as u64,
        runtime_calls: w.calls.len() as u64,
        kernels: w.count(DeviceKind::Kernel),
        memcpys: w.count(DeviceKind::Memcpy),
        memsets: w.count(DeviceKind::Memset),
        graph_traces: w.count(DeviceKind::GraphTrace),
        flows,
        threads,
        gpu_streams: gpu_tracks,
    };
    let file = json!({
        "traceEvents": trace_events,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": format!("nsyskit report {}", env!("CARGO_PKG_VERSION")),
            "source": sb.source,
            "step_label": sb.step_label,
            "window_steps": [a, b],
            "window_choice": summary.window_choice,
            "window_start_ns": t0,
            "window_end_ns": t1,
            "time_unit": "ts and dur in µs; window_*_ns in ns on the export's clock",
            "max_events": max_events,
            "events": events,
            "truncated": summary.truncated,
            "dropped_events": dropped,
            "truncated_at_ns": truncated_at,
            "kernels_in_window": summary.kernels,
            "flows": flows,
        }
    });
    let bytes = serde_json::to_vec(&file).map_err(|e| Error::env(format!("--trace: {e}")))?;
    std::fs::write(out, bytes)
        .map_err(|e| Error::env(format!("{}: cannot write the trace file: {e}", out.display())).with_arg("--trace"))?;
    Ok(summary)
}

/// The window in step indexes `[a, b)` and how it was chosen (`--window`, else around the median step).
fn window_steps(export: &Export, sb: &StepBudgetDoc, window: Option<(u64, u64)>) -> Result<(u64, u64, String)> {
    let n = sb.steps.len() as u64;
    if n == 0 {
        return Err(Error::input(format!(
            "{}: --trace: the step label {:?} has no step",
            export.name(),
            sb.step_label
        )));
    }
    let found = match window {
        Some((a, b)) => {
            if a >= n {
                return Err(Error::usage(format!(
                    "--window {a}:{b}: the capture has {n} steps of {:?} (indexes 0 to {})",
                    sb.step_label,
                    n - 1
                ))
                .with_arg("--window"));
            }
            (a, b.min(n), "--window".to_string())
        }
        None => {
            let (a, b, m) = default_window(sb);
            (a, b, format!("default: {} steps around the median step {m}", b - a))
        }
    };
    Ok(found)
}

/// The rows of a window and the names they refer to.
struct WindowData {
    ranges: Vec<WindowRange>,
    calls: Vec<WindowCall>,
    dev: Vec<WindowDeviceRow>,
    tname_ids: HashMap<i64, i64>,
    strings: HashMap<i64, String>,
    procs: HashMap<i64, (i64, String)>,
}

impl WindowData {
    fn count(&self, k: DeviceKind) -> u64 {
        self.dev.iter().filter(|d| d.kind == k).count() as u64
    }
}

/// The NVTX ranges, runtime calls and device rows of `[t0, t1)`, with the strings, thread and process names.
fn read_window(export: &Export, t0: i64, t1: i64) -> Result<WindowData> {
    let mut ranges: Vec<WindowRange> = Vec::new();
    export.nvtx_ranges_in(t0, t1, |r| ranges.push(r))?;
    let mut calls: Vec<WindowCall> = Vec::new();
    export.runtime_calls_in(t0, t1, |c| calls.push(c))?;
    let mut dev: Vec<WindowDeviceRow> = Vec::new();
    for k in DeviceKind::ALL {
        export.device_rows_in(k, t0, t1, |d| dev.push(d))?;
    }
    let mut ids: HashSet<i64> = ranges.iter().filter(|r| r.text.is_none()).filter_map(|r| r.text_id).collect();
    ids.extend(calls.iter().filter_map(|c| c.name_id));
    ids.extend(dev.iter().filter_map(|d| d.name_id));
    let mut tname_ids: HashMap<i64, i64> = HashMap::new();
    export.thread_names(|g, nid| {
        tname_ids.insert(g, nid);
    })?;
    ids.extend(tname_ids.values().copied());
    let strings = export.strings_for(&ids)?;
    let procs = export.process_names()?;
    Ok(WindowData { ranges, calls, dev, tname_ids, strings, procs })
}

/// The window in time: every slice is clipped to it.
#[derive(Clone, Copy)]
struct Span {
    t0: i64,
    t1: i64,
}

impl Span {
    /// `(start, end)` clipped to the window, and whether it was.
    fn clip(&self, s: i64, e: i64) -> (i64, i64, bool) {
        (s.max(self.t0), e.min(self.t1), s < self.t0 || e > self.t1)
    }
}

/// The trace's events in the order they were made (`order` breaks ties of `ts`).
#[derive(Default)]
struct Events {
    evs: Vec<Ev>,
    order: u32,
}

impl Events {
    fn push(&mut self, ts: i64, flow: Option<u64>, v: Value) {
        self.order += 1;
        self.evs.push(Ev { ts, order: self.order, flow, v });
    }
}

/// `(ts ns, pid, tid)` of a runtime call.
type CallPlace = (i64, i64, i64);

/// Host tracks: NVTX ranges and API calls per thread, lane-packed. Returns where each `(globalPid,
/// correlationId)` was called; None when several calls share the key (an ambiguous join: no flow arrow rather
/// than one to a guessed call).
fn host_tracks(
    w: &WindowData,
    sb: &StepBudgetDoc,
    steps: &[crate::step_budget::Step],
    span: Span,
    evs: &mut Events,
    tracks: &mut BTreeMap<(i64, i64), String>,
    host_pids: &mut BTreeMap<i64, String>,
) -> HashMap<(i64, i64), Option<CallPlace>> {
    // the window's steps by (thread, start): their NVTX ranges carry the step index
    let step_at: HashMap<(i64, i64), (usize, bool)> =
        steps.iter().map(|s| ((s.global_tid, s.start_ns), (s.index, s.outlier))).collect();

    // host tracks: NVTX ranges and API calls per thread, lane-packed
    // (kind, index) per thread
    let mut per_thread: BTreeMap<i64, Vec<(u8, usize)>> = BTreeMap::new();
    for (k, r) in w.ranges.iter().enumerate() {
        per_thread.entry(r.global_tid.unwrap_or(0)).or_default().push((0, k));
    }
    for (k, c) in w.calls.iter().enumerate() {
        per_thread.entry(c.global_tid.unwrap_or(0)).or_default().push((1, k));
    }
    // (globalPid, correlationId) -> (ts ns, pid, tid) of the call; None when several calls share the key (an
    // ambiguous join: no flow arrow rather than one to a guessed call)
    let mut call_at: HashMap<(i64, i64), Option<CallPlace>> = HashMap::new();
    for (gtid, items) in &per_thread {
        let pid = pid_of(*gtid);
        let tid = tid_of(*gtid);
        let iv: Vec<(i64, i64)> = items
            .iter()
            .map(|&(kind, k)| {
                let (s, e) =
                    if kind == 0 { (w.ranges[k].start, w.ranges[k].end) } else { (w.calls[k].start, w.calls[k].end) };
                let (s, e, _) = span.clip(s, e);
                (s, e)
            })
            .collect();
        let ln = lanes(&iv);
        let tname =
            w.tname_ids.get(gtid).and_then(|id| w.strings.get(id)).cloned().unwrap_or_else(|| format!("thread {tid}"));
        host_pids.entry(pid).or_insert_with(|| {
            w.procs.get(&ns_of(*gtid)).map(|(_, n)| n.clone()).filter(|n| !n.is_empty()).unwrap_or_default()
        });
        for (j, &(kind, k)) in items.iter().enumerate() {
            let t = tid + ln[j] * LANE;
            tracks.entry((pid, t)).or_insert_with(|| {
                if ln[j] == 0 {
                    tname.clone()
                } else {
                    format!("{tname} lane {}", ln[j])
                }
            });
            let (s, e) = iv[j];
            if kind == 0 {
                let r = &w.ranges[k];
                let (_, _, clipped) = span.clip(r.start, r.end);
                let name = r
                    .text
                    .clone()
                    .or_else(|| r.text_id.and_then(|i| w.strings.get(&i).cloned()))
                    .unwrap_or_else(|| "(unnamed range)".into());
                let mut args = json!({"event_type": if r.event_type == crate::export::schema::nvtx::START_END { "start/end" } else { "push/pop" }});
                if clipped {
                    args["clipped"] = json!(true);
                    args["start_ns"] = json!(r.start);
                    args["end_ns"] = json!(r.end);
                }
                if name == sb.step_label {
                    if let Some(&(ix, outlier)) = step_at.get(&(*gtid, r.start)) {
                        args["step"] = json!(ix);
                        args["outlier"] = json!(outlier);
                    }
                }
                evs.push(s, None, json!({"name": name, "cat": "nvtx", "ph": "X", "ts": us(s), "dur": us(e - s), "pid": pid, "tid": t, "args": args}));
            } else {
                let c = &w.calls[k];
                let (_, _, clipped) = span.clip(c.start, c.end);
                let name =
                    c.name_id.and_then(|i| w.strings.get(&i).cloned()).unwrap_or_else(|| "(runtime call)".into());
                let mut args = json!({"correlation_id": c.correlation_id});
                if clipped {
                    args["clipped"] = json!(true);
                }
                if let Some(corr) = c.correlation_id {
                    call_at.entry((ns_of(*gtid), corr)).and_modify(|c| *c = None).or_insert(Some((s, pid, t)));
                }
                evs.push(s, None, json!({"name": name, "cat": "cuda_api", "ph": "X", "ts": us(s), "dur": us(e - s), "pid": pid, "tid": t, "args": args}));
            }
        }
    }
    call_at
}

/// GPU tracks: per (device, process, stream), lane-packed, with a flow arrow from each runtime call to its
/// device rows. Returns the GPU processes' names, the number of GPU tracks and of flows.
fn gpu_tracks(
    w: &WindowData,
    call_at: &HashMap<(i64, i64), Option<CallPlace>>,
    span: Span,
    evs: &mut Events,
    tracks: &mut BTreeMap<(i64, i64), String>,
) -> (BTreeMap<i64, String>, u64, u64) {
    let mut per_stream: BTreeMap<(i64, i64, i64), Vec<usize>> = BTreeMap::new();
    for (k, d) in w.dev.iter().enumerate() {
        per_stream
            .entry((d.device_id.unwrap_or(0), d.global_pid.unwrap_or(0), d.stream_id.unwrap_or(0)))
            .or_default()
            .push(k);
    }
    let mut procs_on_dev: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for &(devid, gpid, _) in per_stream.keys() {
        let v = procs_on_dev.entry(devid).or_default();
        if !v.contains(&gpid) {
            v.push(gpid);
        }
    }
    let mut gpu_pids: BTreeMap<i64, String> = BTreeMap::new();
    let mut gpu_tracks = 0u64;
    let mut flows = 0u64;
    let mut flow_id = 0u64;
    for ((devid, gpid, stream), items) in &per_stream {
        let pid = GPU_PID_BASE + devid;
        gpu_pids.insert(pid, format!("GPU {devid}"));
        let rank = procs_on_dev[devid].iter().position(|g| g == gpid).unwrap_or(0) as i64;
        let several = procs_on_dev[devid].len() > 1;
        let iv: Vec<(i64, i64)> = items
            .iter()
            .map(|&k| {
                let (s, e, _) = span.clip(w.dev[k].start, w.dev[k].end);
                (s, e)
            })
            .collect();
        let ln = lanes(&iv);
        for (j, &k) in items.iter().enumerate() {
            let d = &w.dev[k];
            let t = stream + rank * (LANE << 4) + ln[j] * LANE;
            tracks.entry((pid, t)).or_insert_with(|| {
                gpu_tracks += 1;
                let mut name = format!("GPU {devid} stream {stream}");
                if several {
                    name.push_str(&format!(" (pid {})", pid_of(*gpid)));
                }
                if ln[j] > 0 {
                    name.push_str(&format!(" lane {}", ln[j]));
                }
                name
            });
            let (s, e) = iv[j];
            let (name, cat) = match d.kind {
                DeviceKind::Kernel => {
                    (d.name_id.and_then(|i| w.strings.get(&i).cloned()).unwrap_or_else(|| "(kernel)".into()), "kernel")
                }
                DeviceKind::Memcpy => (copy_kind(d.copy_kind), "memcpy"),
                DeviceKind::Memset => ("memset".to_string(), "memset"),
                DeviceKind::GraphTrace => ("graph replay".to_string(), "graph"),
            };
            let mut args = json!({"correlation_id": d.correlation_id});
            if let Some(b) = d.bytes {
                args["bytes"] = json!(b);
            }
            if let Some(g) = d.graph_node_id {
                args["graph_node_id"] = json!(g);
            }
            if d.start < span.t0 || d.end > span.t1 {
                args["clipped"] = json!(true);
            }
            evs.push(s, None, json!({"name": name, "cat": cat, "ph": "X", "ts": us(s), "dur": us(e - s), "pid": pid, "tid": t, "args": args}));
            if let (Some(g), Some(corr)) = (d.global_pid, d.correlation_id) {
                if let Some(&Some((cts, cpid, ctid))) = call_at.get(&(g, corr)) {
                    flow_id += 1;
                    flows += 1;
                    evs.push(cts, Some(flow_id), json!({"name": "launch", "cat": "flow", "ph": "s", "id": flow_id, "ts": us(cts), "pid": cpid, "tid": ctid}));
                    evs.push(s, Some(flow_id), json!({"name": "launch", "cat": "flow", "ph": "f", "bp": "e", "id": flow_id, "ts": us(s), "pid": pid, "tid": t}));
                }
            }
        }
    }

    (gpu_pids, gpu_tracks, flows)
}

/// The step budget as counters, on the step's process.
fn step_counters(
    steps: &[crate::step_budget::Step],
    span: Span,
    evs: &mut Events,
    host_pids: &mut BTreeMap<i64, String>,
) {
    for s in steps {
        let pid = pid_of(s.global_tid);
        let comps = serde_json::to_value(s.components).unwrap_or(Value::Null);
        let mut on = serde_json::Map::new();
        let mut off = serde_json::Map::new();
        if let Some(m) = comps.as_object() {
            for (k, v) in m {
                on.insert(k.clone(), json!(us(v.as_i64().unwrap_or(0))));
                off.insert(k.clone(), json!(0.0));
            }
        }
        let (s0, s1, _) = span.clip(s.start_ns, s.start_ns + s.wall_ns);
        evs.push(s0, None, json!({"name": "step budget (µs)", "cat": "step_budget", "ph": "C", "ts": us(s0), "pid": pid, "tid": 0, "args": Value::Object(on)}));
        evs.push(s1, None, json!({"name": "step budget (µs)", "cat": "step_budget", "ph": "C", "ts": us(s1), "pid": pid, "tid": 0, "args": Value::Object(off)}));
        host_pids.entry(pid).or_default();
    }
}

/// The `M` events naming processes and threads.
fn metadata(
    host_pids: &BTreeMap<i64, String>,
    gpu_pids: &BTreeMap<i64, String>,
    tracks: &BTreeMap<(i64, i64), String>,
) -> Vec<Value> {
    let mut meta: Vec<Value> = Vec::new();
    for (pid, name) in host_pids {
        let name = if name.is_empty() { format!("process {pid}") } else { format!("{name} (pid {pid})") };
        meta.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}));
    }
    for (pid, name) in gpu_pids {
        meta.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}));
        meta.push(json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}));
    }
    for ((pid, tid), name) in tracks {
        meta.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
    }

    meta
}

/// At most `max_events` events with the metadata: past it the events after a cut-off time are dropped (flows
/// only in pairs). Returns the events kept, the cut-off and how many were dropped.
fn bound(mut evs: Vec<Ev>, meta: &[Value], max_events: usize) -> (Vec<Ev>, Option<i64>, u64) {
    evs.sort_by(|x, y| x.ts.cmp(&y.ts).then(x.order.cmp(&y.order)));
    let total = evs.len() + meta.len();
    let mut truncated_at = None;
    let mut dropped = 0u64;
    if total > max_events {
        let room = max_events.saturating_sub(meta.len());
        let cut = evs.get(room).map(|e| e.ts);
        truncated_at = cut;
        let mut kept: Vec<Ev> = evs.into_iter().filter(|e| cut.is_none_or(|c| e.ts < c)).collect();
        // flows only in pairs
        let mut halves: HashMap<u64, u32> = HashMap::new();
        for e in &kept {
            if let Some(id) = e.flow {
                *halves.entry(id).or_default() += 1;
            }
        }
        kept.retain(|e| e.flow.is_none_or(|id| halves[&id] == 2));
        dropped = (total - meta.len() - kept.len()) as u64;
        evs = kept;
    }
    (evs, truncated_at, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_nest() {
        // [0,10) holds [1,3) and [2,4)? no: [2,4) overlaps [1,3) without nesting -> lane 1
        let iv = vec![(0, 10), (1, 3), (2, 4), (5, 6), (9, 12)];
        assert_eq!(lanes(&iv), vec![0, 0, 1, 0, 1]);
    }

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("3:8").unwrap(), (3, 8));
        assert!(parse_window("8:3").is_err() && parse_window("3").is_err() && parse_window("a:b").is_err());
    }
}
