//! The comparability checks of a pair of capture facts: each invalidator, and each fact unknown on a side.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Invalidator, Unchecked};
use crate::evidence::{CaptureFacts, Fact};

/// The invalidators and unchecked facts of a pair.
pub fn check_comparable(a: &CaptureFacts, b: &CaptureFacts) -> (Vec<Invalidator>, Vec<Unchecked>) {
    let mut inv = Vec::new();
    let mut unchecked = Vec::new();
    let checks: [(&str, &Fact, &Fact, &str); 10] = [
        ("nsys_version", &a.nsys_version, &b.nsys_version, "different nsys versions"),
        ("trace_set", &a.trace_set, &b.trace_set, "different trace sets"),
        ("capture_flags", &a.capture_flags, &b.capture_flags, "different capture flags"),
        (
            "graph_trace_level",
            &a.graph_trace_level,
            &b.graph_trace_level,
            "one capture is node-level and the other graph-level (--cuda-graph-trace)",
        ),
        ("cuda_graphs", &a.cuda_graphs, &b.cuda_graphs, "CUDA graphs in one capture and eager launches in the other"),
        ("window", &a.window, &b.window, "different capture window"),
        ("warmup", &a.warmup, &b.warmup, "different warmup"),
        ("instrumentation", &a.instrumentation, &b.instrumentation, "different instrumentation state"),
        ("gpu", &a.gpu, &b.gpu, "different GPU"),
        ("clock_policy", &a.clock_policy, &b.clock_policy, "different GPU clock policy"),
    ];
    for (check, fa, fb, why) in checks {
        match (fa.is_known(), fb.is_known()) {
            (true, true) if std::mem::discriminant(&fa.value) != std::mem::discriminant(&fb.value) => {
                unchecked.push(Unchecked {
                    check: check.into(),
                    sides: Vec::new(),
                    reason: format!("recorded differently ({} vs {}): give both sides the same kind of evidence (e.g. a provenance document for each)", fa.source, fb.source),
                });
            }
            (true, true) => {
                if fa.value != fb.value {
                    let detail = if check == "capture_flags" { flag_diff(&fa.value, &fb.value) } else { String::new() };
                    let (va, vb) = differing(&fa.value, &fb.value);
                    inv.push(Invalidator {
                        check: check.into(),
                        sides: Vec::new(),
                        a: va,
                        b: vb,
                        reason: if detail.is_empty() {
                            format!("{why}: {} vs {}", short(&fa.value), short(&fb.value))
                        } else {
                            format!("{why}: {detail}")
                        },
                    });
                }
            }
            (ka, kb) => {
                let missing = match (ka, kb) {
                    (false, false) => "A and B",
                    (false, true) => "A",
                    _ => "B",
                };
                unchecked.push(Unchecked {
                    check: check.into(),
                    sides: Vec::new(),
                    reason: format!("not recorded in {missing}"),
                });
            }
        }
    }
    // a foreign GPU process in either capture invalidates the pair on its own
    for (which, f) in [("A", &a.foreign_gpu_processes), ("B", &b.foreign_gpu_processes)] {
        if !f.is_known() {
            unchecked.push(Unchecked {
                check: "foreign_gpu_process".into(),
                sides: Vec::new(),
                reason: format!("{which} does not record the GPU's other processes (give a provenance document)"),
            });
        } else if foreign_present(&f.value) {
            inv.push(Invalidator {
                check: "foreign_gpu_process".into(),
                sides: Vec::new(),
                a: a.foreign_gpu_processes.value.clone(),
                b: b.foreign_gpu_processes.value.clone(),
                reason: format!("a foreign GPU process ran during capture {which}: {}", short(&f.value)),
            });
        }
    }
    (inv, unchecked)
}

/// For two objects, only their differing keys (absent = null); other values as they are.
fn differing(a: &Value, b: &Value) -> (Value, Value) {
    match (a.as_object(), b.as_object()) {
        (Some(oa), Some(ob)) => {
            let keys: BTreeSet<&String> = oa.keys().chain(ob.keys()).filter(|k| oa.get(*k) != ob.get(*k)).collect();
            let pick = |o: &serde_json::Map<String, Value>| {
                Value::Object(keys.iter().map(|k| ((*k).clone(), o.get(*k).cloned().unwrap_or(Value::Null))).collect())
            };
            (pick(oa), pick(ob))
        }
        _ => (a.clone(), b.clone()),
    }
}

pub(crate) fn foreign_present(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().unwrap_or(0.0) > 0.0,
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Null => false,
    }
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

/// `KEY: a vs b` for each differing key of two flag objects (or the whole values when not objects).
fn flag_diff(a: &Value, b: &Value) -> String {
    match (a.as_object(), b.as_object()) {
        (Some(oa), Some(ob)) => {
            let keys: BTreeSet<&String> = oa.keys().chain(ob.keys()).collect();
            keys.into_iter()
                .filter(|k| oa.get(*k) != ob.get(*k))
                .map(|k| {
                    let show =
                        |o: &serde_json::Map<String, Value>| o.get(k).map(short).unwrap_or_else(|| "(absent)".into());
                    format!("{k}: {} vs {}", show(oa), show(ob))
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        _ => format!("{} vs {}", short(a), short(b)),
    }
}
