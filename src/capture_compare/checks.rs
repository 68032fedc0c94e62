//! The comparability facts beyond the capture's own (`evidence::CaptureFacts`): what the run's provenance
//! and serve-capture documents record (resolved nsys path, capture mode, workload identity, warmup command,
//! instrumentation patch, GPU index/UUID, application clocks and clock-event reasons at start and end, the
//! run's outcome, the engine revision), the gate verdict, and the checks of every invalidator of the manual.
//! Field names read are listed in docs/compare-report.md ("Run facts"); a field that is absent is unknown.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Invalidator, Side, Unchecked};
use crate::evidence::Fact;

/// Run facts of one capture (each `{value, source}`, value null = unknown).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFacts {
    /// `provenance.nsys.path` / `serve_capture.nsys.path`: the resolved executable.
    pub nsys_path: Fact,
    /// `range`, `time` or `whole`: `serve_capture.window.mode`, else from the provenance flags.
    pub capture_mode: Fact,
    /// `provenance.capture.client_cmd`, else `serve_capture.load.argv` joined.
    pub client_command: Fact,
    /// `provenance.workload.request_rate` / `.concurrency` / `.seed_policy`.
    pub request_rate: Fact,
    pub concurrency: Fact,
    pub seed_policy: Fact,
    /// `serve_capture.warmup.argv` (the fixed warmup client).
    pub warmup_command: Fact,
    /// `provenance.workload.instrumentation_patch` (`sha256:…` of serve-capture's `--instrumentation-patch`), else
    /// `provenance.capture.instrumentation_patch` / `provenance.instrumentation_patch`: the diagnostic patch's
    /// identity.
    pub instrumentation_patch: Fact,
    /// Target GPU(s) of `provenance.gpu.gpus[target]`: physical index and UUID.
    pub gpu_index: Fact,
    pub gpu_uuid: Fact,
    /// `{graphics_mhz, memory_mhz}` application clocks of the target GPU at start (provenance) and end
    /// (`serve_capture.gpu_end`).
    pub application_clocks_start: Fact,
    pub application_clocks_end: Fact,
    /// `clocks_event_reasons_active` bitmask of the target GPU at start and end.
    pub clocks_event_reasons_start: Fact,
    pub clocks_event_reasons_end: Fact,
    /// `serve_capture.outcome` (`ok` or not).
    pub run_outcome: Fact,
    /// `{verdict, retry}` of gate-check: the bundle's `kernel_profile.gates`, or gate-check run on a raw export.
    pub gate: Fact,
    /// `{revision, dirty}` of `provenance.repo`: shown, never compared (it is the code under test).
    pub engine: Fact,
    /// Whether the capture has the engine's iteration records: `serve_capture.iterations` (records > 0), else
    /// the ranges document's `iterations.join`; `false` for a serve-capture run without `--iteration-records`.
    #[serde(default)]
    pub iteration_records: Fact,
    /// The backend the server was started with: every `--*backend*` flag of the server argv with its value
    /// (`--attention-backend FLASHINFER`) and every `*BACKEND*` variable of its environment
    /// (`VLLM_ATTENTION_BACKEND`); `{}` = the engine's defaults. From `provenance.capture.server_cmd`, else the
    /// server process of `serve_capture.processes`.
    #[serde(default)]
    pub backend: Fact,
    /// The graph mode the server argv asks for: `eager` when it carries `--enforce-eager` (vLLM) or
    /// `--disable-cuda-graph` (SGLang), else `graphs` (the engine's default); a graph-mode engine captured
    /// eagerly is a cross-check only (the serving-run manual).
    #[serde(default)]
    pub graph_mode: Fact,
}

pub use crate::nsys_resolve::workload::EAGER_FLAGS;

/// The server argv of a run: `provenance.capture.server_cmd` split like a shell, else the `server` process of
/// the serve-capture document. With where it was read.
fn server_argv(p: &Value, s: &Value, prov_name: &str) -> Option<(Vec<String>, String)> {
    if let Some(c) = get(p, "capture.server_cmd").and_then(|c| c.as_str()) {
        return Some((crate::nsys_resolve::split_words(c), format!("{prov_name}.capture.server_cmd")));
    }
    let procs = get(s, "processes")?.as_array()?;
    let server = procs.iter().find(|x| x.get("role").and_then(|r| r.as_str()) == Some("server"))?;
    let argv = server.get("argv")?.as_array()?.iter().filter_map(|w| w.as_str().map(String::from)).collect();
    Some((argv, "serve_capture.processes[server].argv".into()))
}

/// The backend and graph-mode facts of a server argv and its environment entries.
fn backend_facts(f: &mut RunFacts, p: &Value, s: &Value, prov_name: &str) {
    let Some((argv, src)) = server_argv(p, s, prov_name) else { return };
    let mut flags = serde_json::Map::new();
    let mut i = 0;
    while i < argv.len() {
        let w = &argv[i];
        if let Some(name) = w.strip_prefix("--").filter(|n| n.to_ascii_lowercase().contains("backend")) {
            let (k, v) = match name.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => {
                    let v = argv.get(i + 1).filter(|n| !n.starts_with("--")).cloned();
                    if v.is_some() {
                        i += 1;
                    }
                    (name.to_string(), v)
                }
            };
            flags.insert(format!("--{}", k.replace('_', "-")), json!(v));
        }
        i += 1;
    }
    let mut env = serde_json::Map::new();
    for list in ["capture.env", "capture.server_environment"] {
        for e in get(p, list).and_then(|v| v.as_array()).into_iter().flatten() {
            if let Some(n) =
                e.get("name").and_then(|n| n.as_str()).filter(|n| n.to_ascii_uppercase().contains("BACKEND"))
            {
                env.insert(n.to_string(), e.get("value").cloned().unwrap_or(Value::Null));
            }
        }
    }
    f.backend = fact(json!({"flags": flags, "env": env}), format!("{src} (--*backend* flags; *BACKEND* variables)"));
    let eager = argv.iter().find(|w| EAGER_FLAGS.iter().any(|e| w == e || w.starts_with(&format!("{e}="))));
    f.graph_mode = match eager {
        Some(flag) => fact(json!("eager"), format!("{src}: {flag}")),
        None => fact(json!("graphs"), format!("{src}: no {}", EAGER_FLAGS.join("/"))),
    };
}

fn fact(v: Value, source: impl Into<String>) -> Fact {
    Fact { value: v, source: source.into() }
}

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for p in path.split('.') {
        cur = cur.get(p)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// The target GPUs of a `gpus[]` list (`target: true`, or all when no entry says).
fn targets(gpus: Option<&Value>) -> Vec<&Value> {
    let Some(list) = gpus.and_then(|g| g.as_array()) else { return Vec::new() };
    list.iter().filter(|g| g.get("target").and_then(|t| t.as_bool()).unwrap_or(true)).collect()
}

fn per_target(gpus: &[&Value], key: &str) -> Option<Value> {
    let vals: Vec<Value> = gpus.iter().map(|g| g.get(key).cloned().unwrap_or(Value::Null)).collect();
    (!vals.is_empty() && vals.iter().all(|v| !v.is_null())).then(|| {
        if vals.len() == 1 {
            vals[0].clone()
        } else {
            Value::Array(vals)
        }
    })
}

fn clocks(gpus: &[&Value]) -> Option<Value> {
    let g = per_target(gpus, "app_clock_graphics_mhz")?;
    let m = per_target(gpus, "app_clock_memory_mhz")?;
    Some(json!({"graphics_mhz": g, "memory_mhz": m}))
}

/// Read the run facts of a provenance block and a serve-capture document (either may be absent).
pub fn run_facts(prov: Option<&Value>, prov_name: &str, serve: Option<&Value>) -> RunFacts {
    let mut f = RunFacts::default();
    let null = Value::Null;
    let p = prov.unwrap_or(&null);
    let s = serve.unwrap_or(&null);
    let pn = |path: &str| format!("{prov_name}.{path}");
    let sn = |path: &str| format!("serve_capture.{path}");
    if let Some(v) = get(p, "nsys.path") {
        f.nsys_path = fact(v.clone(), pn("nsys.path"));
    } else if let Some(v) = get(s, "nsys.path") {
        f.nsys_path = fact(v.clone(), sn("nsys.path"));
    }
    if let Some(v) = get(s, "window.mode") {
        f.capture_mode = fact(v.clone(), sn("window.mode"));
    } else if let Some(words) = get(p, "capture.flags_argv").and_then(|a| a.as_array()).filter(|a| !a.is_empty()) {
        let w: Vec<String> = words.iter().filter_map(|x| x.as_str().map(String::from)).collect();
        let flags = crate::evidence::profile_flags(&w);
        let has = |n: &str| flags.iter().any(|x| x == n || x.starts_with(&format!("{n}=")));
        let mode = if has("--capture-range") || has("-c") {
            "range"
        } else if has("--delay") || has("--duration") || has("-y") || has("-d") {
            "time"
        } else {
            "whole"
        };
        f.capture_mode = fact(
            json!(mode),
            pn("capture.flags_argv (--capture-range → range, --delay/--duration → time, else whole)"),
        );
    }
    if let Some(v) = get(p, "capture.client_cmd") {
        f.client_command = fact(v.clone(), pn("capture.client_cmd"));
    } else if let Some(a) = get(s, "load.argv").and_then(|a| a.as_array()) {
        let words: Vec<&str> = a.iter().filter_map(|x| x.as_str()).collect();
        f.client_command = fact(json!(words.join(" ")), sn("load.argv"));
    }
    for (slot, key) in [
        (&mut f.request_rate, "request_rate"),
        (&mut f.concurrency, "concurrency"),
        (&mut f.seed_policy, "seed_policy"),
    ] {
        if let Some(v) = get(p, &format!("workload.{key}")) {
            *slot = fact(v.clone(), pn(&format!("workload.{key}")));
        }
    }
    if let Some(v) = get(s, "warmup.argv") {
        f.warmup_command = fact(v.clone(), sn("warmup.argv"));
    }
    for path in ["workload.instrumentation_patch", "capture.instrumentation_patch", "instrumentation_patch"] {
        if let Some(v) = get(p, path) {
            f.instrumentation_patch = fact(v.clone(), pn(path));
            break;
        }
    }
    let available = get(p, "gpu.status").and_then(|v| v.as_str()).map(|v| v == "available").unwrap_or(true);
    let start = if available { targets(get(p, "gpu.gpus")) } else { Vec::new() };
    if let Some(v) = per_target(&start, "index") {
        f.gpu_index = fact(v, pn("gpu.gpus[target].index"));
    }
    if let Some(v) = per_target(&start, "uuid") {
        f.gpu_uuid = fact(v, pn("gpu.gpus[target].uuid"));
    }
    if let Some(v) = clocks(&start) {
        f.application_clocks_start = fact(v, pn("gpu.gpus[target].app_clock_graphics_mhz/app_clock_memory_mhz"));
    }
    if let Some(v) = per_target(&start, "clocks_event_reasons_active") {
        f.clocks_event_reasons_start = fact(v, pn("gpu.gpus[target].clocks_event_reasons_active"));
    }
    let end = targets(get(s, "gpu_end.gpus"));
    if let Some(v) = clocks(&end) {
        f.application_clocks_end = fact(v, sn("gpu_end.gpus[target].app_clock_graphics_mhz/app_clock_memory_mhz"));
    }
    if let Some(v) = per_target(&end, "clocks_event_reasons_active") {
        f.clocks_event_reasons_end = fact(v, sn("gpu_end.gpus[target].clocks_event_reasons_active"));
    }
    if let Some(v) = get(s, "outcome") {
        f.run_outcome = fact(v.clone(), sn("outcome"));
    }
    if let Some(r) = get(p, "repo").filter(|r| r.is_object()) {
        f.engine = fact(json!({"revision": r.get("revision"), "dirty": r.get("dirty")}), pn("repo"));
    }
    if s.is_object() {
        let records = s.get("iterations").and_then(|i| i.get("records")).and_then(|r| r.as_u64()).unwrap_or(0);
        f.iteration_records = fact(json!(records > 0), sn(&format!("iterations.records ({records})")));
    }
    backend_facts(&mut f, p, s, prov_name);
    f
}

/// Clock-event reasons that mean the clocks were pulled down by heat or a hardware brake (NVML bits):
/// HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
pub const THROTTLE_MASK: u64 = 0x8 | 0x20 | 0x40 | 0x80;

/// The names of the set bits of a clocks_event_reasons mask.
pub fn reason_names(mask: u64) -> Vec<&'static str> {
    const BITS: [(u64, &str); 9] = [
        (0x1, "gpu_idle"),
        (0x2, "applications_clocks_setting"),
        (0x4, "sw_power_cap"),
        (0x8, "hw_slowdown"),
        (0x10, "sync_boost"),
        (0x20, "sw_thermal_slowdown"),
        (0x40, "hw_thermal_slowdown"),
        (0x80, "hw_power_brake_slowdown"),
        (0x100, "display_clock_setting"),
    ];
    BITS.iter().filter(|(b, _)| mask & b != 0).map(|(_, n)| *n).collect()
}

/// `"0x…"` (nvidia-smi) or a number → the mask; every target GPU's masks OR-ed; None when unreadable.
pub fn parse_mask(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => {
            let t = s.trim();
            let t = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
            u64::from_str_radix(t, 16).ok()
        }
        Value::Number(n) => n.as_u64(),
        Value::Array(a) => a.iter().map(parse_mask).try_fold(0u64, |acc, m| m.map(|m| acc | m)),
        _ => None,
    }
}

/// What the checks need of one capture besides its side.
pub struct CheckInput<'a> {
    pub side: &'a Side,
    /// Occurrences per label (None: no ranges).
    pub labels: Option<&'a BTreeMap<String, i64>>,
}

/// Thresholds and switches of the checks.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Per-request labels (see [`unstable_labels`]): never expected.
    pub unstable: BTreeSet<String>,
    /// `--expect-label`: these labels must be on both sides (default: every stable label seen on either side).
    pub expect_labels: Vec<String>,
    /// The iteration label (always expected).
    pub iteration_label: Option<String>,
    /// `--max-attributed-share-diff`: largest allowed difference of attributed kernel-work shares.
    pub max_attributed_share_diff: f64,
}

pub use crate::step_label::unstable_labels;

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => "unknown".into(),
        other => other.to_string(),
    };
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

fn inv(check: &str, sides: &[&Side], a: Value, b: Value, reason: String) -> Invalidator {
    Invalidator { check: check.into(), sides: sides.iter().map(|s| s.source.clone()).collect(), a, b, reason }
}

fn unk(check: &str, sides: &[&Side], reason: String) -> Unchecked {
    Unchecked { check: check.into(), sides: sides.iter().map(|s| s.source.clone()).collect(), reason }
}

/// The run facts compared pairwise: (check, fact of A, fact of B, what a difference means).
fn pair_facts<'a>(ra: &'a RunFacts, rb: &'a RunFacts) -> [(&'static str, &'a Fact, &'a Fact, &'static str); 15] {
    [
        (
            "iteration_records",
            &ra.iteration_records,
            &rb.iteration_records,
            "iteration records on one side only (batch geometry and the iteration join differ)",
        ),
        ("backend", &ra.backend, &rb.backend, "different backend"),
        ("graph_mode", &ra.graph_mode, &rb.graph_mode, "different graph mode asked of the engine"),
        ("nsys_path", &ra.nsys_path, &rb.nsys_path, "different resolved nsys executables"),
        ("capture_mode", &ra.capture_mode, &rb.capture_mode, "different capture modes"),
        ("client_command", &ra.client_command, &rb.client_command, "different workload (client command)"),
        ("request_rate", &ra.request_rate, &rb.request_rate, "different request rate"),
        ("concurrency", &ra.concurrency, &rb.concurrency, "different concurrency"),
        ("seed_policy", &ra.seed_policy, &rb.seed_policy, "different seed policy"),
        ("warmup_command", &ra.warmup_command, &rb.warmup_command, "different warmup client"),
        (
            "instrumentation_patch",
            &ra.instrumentation_patch,
            &rb.instrumentation_patch,
            "different diagnostic instrumentation patches",
        ),
        ("gpu_index", &ra.gpu_index, &rb.gpu_index, "different physical GPU index"),
        ("gpu_uuid", &ra.gpu_uuid, &rb.gpu_uuid, "a different GPU (UUID)"),
        (
            "application_clocks",
            &ra.application_clocks_start,
            &rb.application_clocks_start,
            "different application clocks (clock policy)",
        ),
        (
            "clock_policy_end",
            &ra.application_clocks_end,
            &rb.application_clocks_end,
            "different application clocks at the end of the run",
        ),
    ]
}

/// Pairwise checks between two captures (`x` is the reference: the first baseline, or A).
pub fn check_pair(x: &CheckInput, y: &CheckInput, o: &CheckOptions) -> (Vec<Invalidator>, Vec<Unchecked>) {
    let (a, b) = (x.side, y.side);
    let (mut out, mut unchecked) = super::check_comparable(&a.facts, &b.facts);
    for i in &mut out {
        i.sides = vec![a.source.clone(), b.source.clone()];
    }
    for u in &mut unchecked {
        u.sides = vec![a.source.clone(), b.source.clone()];
    }
    // the foreign-process check of check_comparable is per capture: done in check_single instead
    out.retain(|i| i.check != "foreign_gpu_process");
    unchecked.retain(|u| u.check != "foreign_gpu_process");
    let (ra, rb) = (&a.run_facts, &b.run_facts);
    let two = pair_facts(ra, rb);
    for (check, fa, fb, why) in two {
        match (fa.is_known(), fb.is_known()) {
            (true, true) if fa.value != fb.value => out.push(inv(
                check,
                &[a, b],
                fa.value.clone(),
                fb.value.clone(),
                format!("{why}: {} vs {}", short(&fa.value), short(&fb.value)),
            )),
            (true, true) => {}
            (ka, kb) => {
                let missing = match (ka, kb) {
                    (false, false) => "either capture",
                    (false, true) => "the first",
                    _ => "the second",
                };
                unchecked.push(unk(check, &[a, b], format!("not recorded in {missing}")));
            }
        }
    }
    // expected ranges and the iteration label
    match (x.labels, y.labels) {
        (Some(la), Some(lb)) => {
            let present = |l: &BTreeMap<String, i64>, k: &str| l.get(k).copied().unwrap_or(0) > 0;
            let expected: BTreeSet<String> = if o.expect_labels.is_empty() {
                la.keys().chain(lb.keys()).filter(|k| !o.unstable.contains(*k)).cloned().collect()
            } else {
                o.expect_labels.iter().cloned().collect()
            };
            let mut expected = expected;
            if let Some(it) = &o.iteration_label {
                expected.insert(it.clone());
                if !present(la, it) || !present(lb, it) {
                    out.push(inv(
                        "iteration_label",
                        &[a, b],
                        json!(la.get(it).copied().unwrap_or(0)),
                        json!(lb.get(it).copied().unwrap_or(0)),
                        format!(
                            "the iteration label {it:?} is missing from one capture (occurrences {} vs {})",
                            la.get(it).copied().unwrap_or(0),
                            lb.get(it).copied().unwrap_or(0)
                        ),
                    ));
                }
            }
            let only_a: Vec<&String> = expected.iter().filter(|l| present(la, l) && !present(lb, l)).collect();
            let only_b: Vec<&String> = expected.iter().filter(|l| !present(la, l) && present(lb, l)).collect();
            let neither: Vec<&String> = expected.iter().filter(|l| !present(la, l) && !present(lb, l)).collect();
            if !only_a.is_empty() || !only_b.is_empty() || !neither.is_empty() {
                let mut why = Vec::new();
                if !only_a.is_empty() {
                    why.push(format!(
                        "only in the first: {}",
                        only_a.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                }
                if !only_b.is_empty() {
                    why.push(format!(
                        "only in the second: {}",
                        only_b.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                }
                if !neither.is_empty() {
                    why.push(format!(
                        "in neither: {}",
                        neither.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                }
                out.push(inv(
                    "expected_ranges",
                    &[a, b],
                    json!(only_a),
                    json!(only_b),
                    format!("an expected producer range is missing from one side ({})", why.join("; ")),
                ));
            }
        }
        _ => unchecked.push(unk("expected_ranges", &[a, b], "per-label occurrences need ranges on both sides".into())),
    }
    // attributed kernel-work share
    match (a.attributed_kernel_share, b.attributed_kernel_share) {
        (Some(sa), Some(sb)) => {
            if (sa - sb).abs() > o.max_attributed_share_diff {
                out.push(inv(
                    "attributed_share",
                    &[a, b],
                    json!(sa),
                    json!(sb),
                    format!(
                        "the attributed share of kernel work differs by {:.1} points ({:.1}% vs {:.1}%; --max-attributed-share-diff {:.1} points): the captures do not cover a comparable share of kernel work",
                        (sa - sb).abs() * 100.0,
                        sa * 100.0,
                        sb * 100.0,
                        o.max_attributed_share_diff * 100.0
                    ),
                ));
            }
        }
        _ => unchecked.push(unk(
            "attributed_share",
            &[a, b],
            "the attributed kernel-work share needs ranges totals with kernel work on both sides".into(),
        )),
    }
    (out, unchecked)
}

/// Checks of one capture on its own: a foreign GPU process, a gate RETRY, a run that did not end ok,
/// thermal throttling, application clocks that changed during the run.
pub fn check_single(c: &Side) -> (Vec<Invalidator>, Vec<Unchecked>) {
    let mut out = Vec::new();
    let mut unchecked = Vec::new();
    let s = [c];
    let f = &c.facts.foreign_gpu_processes;
    if !f.is_known() {
        unchecked.push(unk(
            "foreign_gpu_process",
            &s,
            format!("{} does not record the GPU's other processes (give a provenance document)", c.source),
        ));
    } else if super::foreign_present(&f.value) {
        out.push(inv(
            "foreign_gpu_process",
            &s,
            f.value.clone(),
            Value::Null,
            format!("a foreign GPU process ran during capture {}: {}", c.source, short(&f.value)),
        ));
    }
    let r = &c.run_facts;
    match &r.gate.value {
        Value::Null => unchecked.push(unk("gate", &s, format!("{}: no gate-check verdict", c.source))),
        g => {
            let verdict = g.get("verdict").and_then(|v| v.as_str()).unwrap_or("");
            if verdict != "PASS" {
                let retry: Vec<String> = g
                    .get("retry")
                    .and_then(|r| r.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                let reasons: Vec<String> = g
                    .get("reasons")
                    .and_then(|r| r.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                out.push(inv(
                    "gate",
                    &s,
                    g.clone(),
                    Value::Null,
                    format!(
                        "gate-check says {verdict} for {} ({}): {}",
                        c.source,
                        if retry.is_empty() { "no gate named".to_string() } else { retry.join(", ") },
                        if reasons.is_empty() {
                            "fix the capture before comparing it".to_string()
                        } else {
                            reasons.join("; ")
                        }
                    ),
                ));
            }
        }
    }
    match r.run_outcome.value.as_str() {
        None if r.run_outcome.is_known() => {}
        None => unchecked.push(unk(
            "run_outcome",
            &s,
            format!("{}: no serve-capture outcome (not a serve-capture run folder bundle)", c.source),
        )),
        Some("ok") => {}
        Some(o) => out.push(inv(
            "run_outcome",
            &s,
            json!(o),
            Value::Null,
            format!("the run of {} did not complete (serve-capture outcome {o:?}): reject the sample", c.source),
        )),
    }
    let mut throttle_known = false;
    for (when, m) in [("start", &r.clocks_event_reasons_start), ("end", &r.clocks_event_reasons_end)] {
        let mask = if m.value.is_null() { None } else { parse_mask(&m.value) };
        if let Some(mask) = mask {
            throttle_known = true;
            if mask & THROTTLE_MASK != 0 {
                out.push(inv(
                    "thermal_throttling",
                    &s,
                    m.value.clone(),
                    Value::Null,
                    format!(
                        "{} was throttled at the {when} of the run (clocks_event_reasons {}: {})",
                        c.source,
                        short(&m.value),
                        reason_names(mask).join(", ")
                    ),
                ));
            }
        }
    }
    if !throttle_known {
        unchecked.push(unk("thermal_throttling", &s, format!("{}: no clocks_event_reasons recorded", c.source)));
    }
    match (r.application_clocks_start.is_known(), r.application_clocks_end.is_known()) {
        (true, true) if r.application_clocks_start.value != r.application_clocks_end.value => out.push(inv(
            "clock_stability",
            &s,
            r.application_clocks_start.value.clone(),
            r.application_clocks_end.value.clone(),
            format!(
                "the application clocks of {} changed during the run: {} at start vs {} at end",
                c.source,
                short(&r.application_clocks_start.value),
                short(&r.application_clocks_end.value)
            ),
        )),
        (true, true) => {}
        _ => unchecked.push(unk(
            "clock_stability",
            &s,
            format!("{}: application clocks not recorded at both start and end", c.source),
        )),
    }
    (out, unchecked)
}
