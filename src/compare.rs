//! `capture-compare A B`: is the pair comparable, and if it is, what changed.
//!
//! The pair is refused (exit 1, every invalidator listed) when any comparability fact differs between A and B
//! (capture flags, trace set, nsys version, node- vs graph-level graph tracing, CUDA graphs vs eager, window,
//! warmup, instrumentation, GPU, clock policy) or when either capture saw a foreign GPU process. A fact that is
//! unknown on one side is listed under `unchecked`, never guessed. Otherwise the document carries per-range and
//! per-kernel deltas (B − A, absolute and relative to A), sorted by impact, the kernels that appear (only in B)
//! or vanish (only in A), and the category shares of both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::categories::{category_shares, Categories, CategoryShare, KernelStat};
use crate::contract::{Document, Result, Tool};
use crate::evidence::{self, CaptureFacts, Evidence, Fact, RangeRow};

/// What `capture-compare` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    pub a: PathBuf,
    pub b: PathBuf,
    /// Provenance documents adding facts to A / B (useful with raw exports).
    pub provenance_a: Option<PathBuf>,
    pub provenance_b: Option<PathBuf>,
    /// `--categories FILE`; None = the built-in rules.
    pub categories: Option<PathBuf>,
    /// How many kernel deltas to list (0 = all).
    pub top: usize,
}

/// One side of the comparison: where it came from and its facts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    pub source: String,
    /// `bundle`, `ranges` or `sqlite`.
    pub kind: String,
    pub facts: CaptureFacts,
    /// Whether per-range and per-kernel data were available.
    pub has_ranges: bool,
    pub kernels_source: Option<String>,
}

/// A reason the pair is not comparable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Invalidator {
    /// `a` and `b` are the fact's values (for an object such as capture_flags, only the keys that differ). The fact: `nsys_version`, `capture_flags`, `trace_set`, `graph_trace_level`, `cuda_graphs`, `window`,
    /// `warmup`, `foreign_gpu_process`, `instrumentation`, `gpu`, `clock_policy`.
    pub check: String,
    pub a: Value,
    pub b: Value,
    pub reason: String,
}

/// A fact that could not be checked because one side does not record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Unchecked {
    pub check: String,
    pub reason: String,
}

/// `b - a` and `(b - a) / a` (null when a = 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Delta {
    pub a: i64,
    pub b: i64,
    pub delta: i64,
    pub relative: Option<f64>,
}

impl Delta {
    pub fn new(a: i64, b: i64) -> Delta {
        Delta { a, b, delta: b - a, relative: if a != 0 { Some((b - a) as f64 / a as f64) } else { None } }
    }
}

/// Per-label deltas (sums over occurrences, as in the ranges document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RangeDelta {
    pub label: String,
    /// `both`, `a_only` or `b_only`.
    pub present: String,
    /// |Δ host_wall_time_ns| + |Δ kernel_busy_union_ns|: the sort key.
    pub impact_ns: i64,
    pub occurrences: Delta,
    pub host_wall_time_ns: Delta,
    /// Mean wall per occurrence (integer ns, floor), comparable when the runs differ in length.
    pub wall_ns_per_occurrence: Delta,
    pub host_range_kernel_coverage_ns: Delta,
    pub kernel_busy_union_ns: Delta,
    pub gpu_idle_within_kernel_span_ns: Delta,
    pub uncovered_host_time_ns: Delta,
    pub kernels: Delta,
    pub runtime_calls: Delta,
}

/// Per-kernel-name deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelDelta {
    pub name: String,
    pub category: String,
    /// |Δ total_time_ns|: the sort key.
    pub impact_ns: i64,
    pub total_time_ns: Delta,
    pub instances: Delta,
    /// Mean duration per instance (integer ns, floor).
    pub mean_ns: Delta,
}

/// A kernel seen on one side only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelOnly {
    pub name: String,
    pub category: String,
    pub total_time_ns: i64,
    pub instances: i64,
}

/// Category shares of both sides and their delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryDelta {
    pub category: String,
    pub total_time_ns: Delta,
    pub share_a: f64,
    pub share_b: f64,
}

/// `nsyskit.compare/v1`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CompareDoc {
    pub schema: String,
    pub tool: Tool,
    /// `COMPARABLE` or `REFUSED` (exit 1).
    pub verdict: String,
    pub a: Side,
    pub b: Side,
    pub invalidators: Vec<Invalidator>,
    pub unchecked: Vec<Unchecked>,
    /// Sorted by impact; null when refused or when either side has no ranges.
    pub range_deltas: Option<Vec<RangeDelta>>,
    /// Kernels on both sides, sorted by impact; null when refused or when either side has no kernel data.
    pub kernel_deltas: Option<Vec<KernelDelta>>,
    pub kernels_appeared: Option<Vec<KernelOnly>>,
    pub kernels_vanished: Option<Vec<KernelOnly>>,
    pub category_deltas: Option<Vec<CategoryDelta>>,
    /// `builtin` or the `--categories` file.
    pub categories_source: String,
    pub notes: Vec<String>,
}

impl Document for CompareDoc {
    const KIND: &'static str = "compare";
    const TOOL: &'static str = "capture-compare";
    fn exit_code(&self) -> i32 {
        if self.verdict == "COMPARABLE" {
            0
        } else {
            1
        }
    }
}

/// Load both sides and compare them.
pub fn run(opts: &CompareOptions) -> Result<CompareDoc> {
    let categories = match &opts.categories {
        Some(p) => Categories::from_file(p).map_err(|e| e.with_arg("--categories"))?,
        None => Categories::builtin(),
    };
    let a = evidence::load(&opts.a, opts.provenance_a.as_deref()).map_err(|e| e.with_arg("A"))?;
    let b = evidence::load(&opts.b, opts.provenance_b.as_deref()).map_err(|e| e.with_arg("B"))?;
    Ok(compare(&a, &b, &categories, opts.top))
}

fn side(e: &Evidence) -> Side {
    Side {
        source: e.source.clone(),
        kind: e.kind.clone(),
        facts: e.facts.clone(),
        has_ranges: e.ranges.is_some(),
        kernels_source: e.kernels_source.clone(),
    }
}

/// The invalidators and unchecked facts of a pair.
pub fn check_comparable(a: &CaptureFacts, b: &CaptureFacts) -> (Vec<Invalidator>, Vec<Unchecked>) {
    let mut inv = Vec::new();
    let mut unchecked = Vec::new();
    let checks: [(&str, &Fact, &Fact, &str); 10] = [
        ("nsys_version", &a.nsys_version, &b.nsys_version, "different nsys versions"),
        ("trace_set", &a.trace_set, &b.trace_set, "different trace sets"),
        ("capture_flags", &a.capture_flags, &b.capture_flags, "different capture flags"),
        ("graph_trace_level", &a.graph_trace_level, &b.graph_trace_level, "one capture is node-level and the other graph-level (--cuda-graph-trace)"),
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
                    reason: format!("recorded differently ({} vs {}): give both sides the same kind of evidence (e.g. a provenance document for each)", fa.source, fb.source),
                });
            }
            (true, true) => {
                if fa.value != fb.value {
                    let detail = if check == "capture_flags" { flag_diff(&fa.value, &fb.value) } else { String::new() };
                    let (va, vb) = differing(&fa.value, &fb.value);
                    inv.push(Invalidator {
                        check: check.into(),
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
                unchecked.push(Unchecked { check: check.into(), reason: format!("not recorded in {missing}") });
            }
        }
    }
    // a foreign GPU process in either capture invalidates the pair on its own
    for (which, f) in [("A", &a.foreign_gpu_processes), ("B", &b.foreign_gpu_processes)] {
        if !f.is_known() {
            unchecked.push(Unchecked {
                check: "foreign_gpu_process".into(),
                reason: format!("{which} does not record the GPU's other processes (give a provenance document)"),
            });
        } else if foreign_present(&f.value) {
            inv.push(Invalidator {
                check: "foreign_gpu_process".into(),
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

fn foreign_present(v: &Value) -> bool {
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
                    let show = |o: &serde_json::Map<String, Value>| o.get(k).map(short).unwrap_or_else(|| "(absent)".into());
                    format!("{k}: {} vs {}", show(oa), show(ob))
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        _ => format!("{} vs {}", short(a), short(b)),
    }
}

/// Compare two loaded captures.
pub fn compare(a: &Evidence, b: &Evidence, categories: &Categories, top: usize) -> CompareDoc {
    let (schema, tool) = CompareDoc::header();
    let (invalidators, unchecked) = check_comparable(&a.facts, &b.facts);
    let mut notes = Vec::new();
    let refused = !invalidators.is_empty();
    let mut doc = CompareDoc {
        schema,
        tool,
        verdict: if refused { "REFUSED".into() } else { "COMPARABLE".into() },
        a: side(a),
        b: side(b),
        invalidators,
        unchecked,
        range_deltas: None,
        kernel_deltas: None,
        kernels_appeared: None,
        kernels_vanished: None,
        category_deltas: None,
        categories_source: categories.source().to_string(),
        notes: Vec::new(),
    };
    if refused {
        notes.push("the pair is not comparable: no deltas are computed (fix each invalidator, or capture again)".into());
        doc.notes = notes;
        return doc;
    }
    if !doc.unchecked.is_empty() {
        notes.push(format!(
            "{} comparability check(s) could not be made (see unchecked): deltas are only as trustworthy as those facts",
            doc.unchecked.len()
        ));
    }
    match (&a.ranges, &b.ranges) {
        (Some(ra), Some(rb)) => {
            doc.range_deltas = Some(range_deltas(&ra.ranges, &rb.ranges));
            notes.push("range deltas are per label; nested labels overlap: never add deltas of labels at different depths".into());
        }
        _ => notes.push("per-range deltas need ranges on both sides (a bundle with kernel_profile.ranges, or an export)".into()),
    }
    match (&a.kernels, &b.kernels) {
        (Some(ka), Some(kb)) => {
            let (deltas, appeared, vanished) = kernel_deltas(ka, kb, categories, top);
            doc.kernel_deltas = Some(deltas);
            doc.kernels_appeared = Some(appeared);
            doc.kernels_vanished = Some(vanished);
            doc.category_deltas = Some(category_deltas(&category_shares(categories, ka), &category_shares(categories, kb)));
            if a.kernels_source != b.kernels_source {
                notes.push(format!(
                    "kernel statistics come from different sources ({} vs {}): a top-N list may omit kernels that exist",
                    a.kernels_source.as_deref().unwrap_or("?"),
                    b.kernels_source.as_deref().unwrap_or("?")
                ));
            }
        }
        _ => notes.push("per-kernel deltas need kernel statistics on both sides".into()),
    }
    doc.notes = notes;
    doc
}

/// Per-label deltas over the union of labels, sorted by impact (desc), then label.
pub fn range_deltas(a: &[RangeRow], b: &[RangeRow]) -> Vec<RangeDelta> {
    let ma: BTreeMap<&str, &RangeRow> = a.iter().map(|r| (r.label.as_str(), r)).collect();
    let mb: BTreeMap<&str, &RangeRow> = b.iter().map(|r| (r.label.as_str(), r)).collect();
    let labels: BTreeSet<&str> = ma.keys().chain(mb.keys()).copied().collect();
    let zero = RangeRow::default();
    let mut out: Vec<RangeDelta> = labels
        .into_iter()
        .map(|l| {
            let ra = ma.get(l).copied().unwrap_or(&zero);
            let rb = mb.get(l).copied().unwrap_or(&zero);
            let present = match (ma.contains_key(l), mb.contains_key(l)) {
                (true, true) => "both",
                (true, false) => "a_only",
                _ => "b_only",
            };
            let per = |r: &RangeRow| if r.occurrences > 0 { r.host_wall_time_ns / r.occurrences } else { 0 };
            let wall = Delta::new(ra.host_wall_time_ns, rb.host_wall_time_ns);
            let busy = Delta::new(ra.kernel_busy_union_ns, rb.kernel_busy_union_ns);
            RangeDelta {
                label: l.to_string(),
                present: present.into(),
                impact_ns: wall.delta.abs() + busy.delta.abs(),
                occurrences: Delta::new(ra.occurrences, rb.occurrences),
                host_wall_time_ns: wall,
                wall_ns_per_occurrence: Delta::new(per(ra), per(rb)),
                host_range_kernel_coverage_ns: Delta::new(ra.host_range_kernel_coverage_ns, rb.host_range_kernel_coverage_ns),
                kernel_busy_union_ns: busy,
                gpu_idle_within_kernel_span_ns: Delta::new(ra.gpu_idle_within_kernel_span_ns, rb.gpu_idle_within_kernel_span_ns),
                uncovered_host_time_ns: Delta::new(ra.uncovered_host_time_ns, rb.uncovered_host_time_ns),
                kernels: Delta::new(ra.kernels, rb.kernels),
                runtime_calls: Delta::new(ra.runtime_calls, rb.runtime_calls),
            }
        })
        .collect();
    out.sort_by(|x, y| y.impact_ns.cmp(&x.impact_ns).then_with(|| x.label.cmp(&y.label)));
    out
}

/// Kernel deltas (names on both sides, sorted by impact), kernels that appeared and vanished (by time).
pub fn kernel_deltas(
    a: &[KernelStat],
    b: &[KernelStat],
    categories: &Categories,
    top: usize,
) -> (Vec<KernelDelta>, Vec<KernelOnly>, Vec<KernelOnly>) {
    let sum = |ks: &[KernelStat]| {
        let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for k in ks {
            let e = m.entry(k.name.clone()).or_default();
            e.0 += k.total_time_ns;
            e.1 += k.instances;
        }
        m
    };
    let (ma, mb) = (sum(a), sum(b));
    let mut deltas = Vec::new();
    let mut vanished = Vec::new();
    let mut appeared = Vec::new();
    for (name, &(ta, ia)) in &ma {
        match mb.get(name) {
            Some(&(tb, ib)) => {
                let mean = |t: i64, i: i64| if i > 0 { t / i } else { 0 };
                let total = Delta::new(ta, tb);
                deltas.push(KernelDelta {
                    name: name.clone(),
                    category: categories.categorize(name).to_string(),
                    impact_ns: total.delta.abs(),
                    total_time_ns: total,
                    instances: Delta::new(ia, ib),
                    mean_ns: Delta::new(mean(ta, ia), mean(tb, ib)),
                });
            }
            None => vanished.push(KernelOnly { name: name.clone(), category: categories.categorize(name).into(), total_time_ns: ta, instances: ia }),
        }
    }
    for (name, &(tb, ib)) in &mb {
        if !ma.contains_key(name) {
            appeared.push(KernelOnly { name: name.clone(), category: categories.categorize(name).into(), total_time_ns: tb, instances: ib });
        }
    }
    deltas.sort_by(|x, y| y.impact_ns.cmp(&x.impact_ns).then_with(|| x.name.cmp(&y.name)));
    if top > 0 {
        deltas.truncate(top);
    }
    let by_time = |x: &KernelOnly, y: &KernelOnly| y.total_time_ns.cmp(&x.total_time_ns).then_with(|| x.name.cmp(&y.name));
    appeared.sort_by(by_time);
    vanished.sort_by(by_time);
    (deltas, appeared, vanished)
}

fn category_deltas(a: &[CategoryShare], b: &[CategoryShare]) -> Vec<CategoryDelta> {
    let cats: BTreeSet<&str> = a.iter().chain(b.iter()).map(|c| c.category.as_str()).collect();
    let find = |l: &[CategoryShare], c: &str| l.iter().find(|x| x.category == c).map(|x| (x.total_time_ns, x.share)).unwrap_or((0, 0.0));
    let mut out: Vec<CategoryDelta> = cats
        .into_iter()
        .map(|c| {
            let (ta, sa) = find(a, c);
            let (tb, sb) = find(b, c);
            CategoryDelta { category: c.to_string(), total_time_ns: Delta::new(ta, tb), share_a: sa, share_b: sb }
        })
        .collect();
    out.sort_by(|x, y| y.total_time_ns.delta.abs().cmp(&x.total_time_ns.delta.abs()).then_with(|| x.category.cmp(&y.category)));
    out
}
