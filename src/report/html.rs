//! `report --html`: one self-contained page (inline CSS and SVG, no script, no network).
//!
//! From the top: the verdict and its reason; the capture header (GPU, driver, nsys, start, duration, window,
//! kernels); the primary range split into its direct children (one bar = its host wall); per range label two
//! bars on ONE time axis for the whole section (the longest wall or span is the full width, so 5 837 ms and
//! 3 ms never look the same length): host wall = coverage by device work + uncovered host time, and
//! device-work span = busy + idle within span; the kernel categories and top kernels as shares of the whole
//! kernel table; what is not attributed; the decision signals and the provenance as tables.
//!
//! Every bar segment carries `data-ns` (its duration) and every bar `data-axis` (its section), so a test can
//! check the geometry the browser rendered against the document.

use std::fmt::Write;

use serde_json::Value;

use super::steps::StepBudgetSection;
use super::{dur, ReportDoc};

/// HTML-escape text for element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ms(ns: i64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

const COLORS: &[&str] =
    &["#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#718096", "#e53e3e", "#4a5568"];

/// Width in pixels of the time axis of the ranges section and of the split bar.
pub const AXIS_PX: f64 = 360.0;

/// A horizontal bar on a shared axis: `(ns, color, title)` parts, `px_per_ns` pixels per nanosecond, inside an
/// SVG `width` wide (the axis), the unused rest left blank.
fn axis_bar(axis: &str, parts: &[(i64, &str, String)], px_per_ns: f64, width: f64, height: f64) -> String {
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\" data-axis=\"{axis}\"><rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#f7fafc\"/>"
    );
    let mut x = 0.0;
    for (v, color, title) in parts {
        let w = px_per_ns * (*v).max(0) as f64;
        let _ = write!(
            svg,
            "<rect class=\"seg\" data-ns=\"{}\" x=\"{x:.3}\" y=\"0\" width=\"{w:.3}\" height=\"{height}\" fill=\"{color}\"><title>{}</title></rect>",
            (*v).max(0),
            escape(title)
        );
        x += w;
    }
    svg.push_str("</svg>");
    svg
}

fn row(h: &mut String, key: &str, id: &str, value: &str) {
    let _ = write!(h, "<tr><th>{}</th><td data-k=\"{}\">{}</td></tr>", escape(key), escape(id), value);
}

fn opt(s: &Option<String>) -> String {
    s.as_deref().map(escape).unwrap_or_else(|| "<span class=\"unk\">not recorded</span>".into())
}

/// A JSON value flattened into `(dotted path, text)` rows (arrays of scalars joined; at most `max` rows).
fn flatten(v: &Value, path: String, out: &mut Vec<(String, String)>, max: usize) {
    if out.len() >= max {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                flatten(x, p, out, max);
            }
        }
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            out.push((path, a.iter().map(scalar).collect::<Vec<_>>().join(" ")));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(x, format!("{path}[{i}]"), out, max);
            }
        }
        x => out.push((path, scalar(x))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        x => x.to_string(),
    }
}

/// Render the report as a self-contained HTML page.
pub fn render(doc: &ReportDoc) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>nsyskit report: {}</title><style>{}</style></head><body>",
        escape(&doc.class),
        CSS
    );
    let _ = write!(
        h,
        "<h1>nsyskit report <span class=\"class {c}\" id=\"class\">{c}</span></h1><p class=\"headline\" id=\"headline\">{headline}</p><p class=\"reason\"><b>{rule}</b>: {reason}</p><p class=\"src\">source: {src} ({kind}); primary range: {label} ({choice})</p>",
        c = escape(&doc.class),
        headline = escape(&doc.headline),
        rule = escape(&doc.decision.rule),
        reason = escape(&doc.decision.reason),
        src = escape(&doc.source),
        kind = escape(&doc.source_kind),
        label = escape(doc.decision.primary_label.as_deref().unwrap_or("none")),
        choice = escape(&doc.decision.primary_label_choice),
    );

    capture_section(&mut h, doc);

    if let Some(sb) = &doc.step_budget {
        step_budget_section(&mut h, sb);
    }

    split_section(&mut h, doc);

    ranges_section(&mut h, doc);

    categories_section(&mut h, doc);

    kernels_section(&mut h, doc);

    // unattributed
    h.push_str("<h2>Not attributed</h2><ul id=\"unattributed\">");
    for s in &doc.unattributed.statements {
        let _ = write!(h, "<li>{}</li>", escape(s));
    }
    h.push_str("</ul>");
    devices_section(&mut h, &doc.devices);

    signals_section(&mut h, doc);

    provenance_section(&mut h, doc);
    let _ = writeln!(h, "<p class=\"src\">{} {}</p></body></html>", escape(&doc.tool.name), escape(&doc.tool.version));
    h
}

/// The capture header: GPU, driver, nsys, when, how long, the window, graph trace level, kernels.
fn capture_section(h: &mut String, doc: &ReportDoc) {
    // capture header
    let c = &doc.capture;
    h.push_str("<h2>Capture</h2><table class=\"kv\" id=\"capture\">");
    row(h, "GPU", "gpu", &if c.gpus.is_empty() { opt(&None) } else { escape(&c.gpus.join(", ")) });
    let cuda = c
        .cuda_driver_version
        .as_deref()
        .and_then(|v| v.parse::<i64>().ok())
        .map(|v| format!(" (CUDA {}.{})", v / 1000, (v % 1000) / 10));
    row(h, "driver", "driver", &format!("{}{}", opt(&c.driver_version), escape(&cuda.unwrap_or_default())));
    row(h, "nsys (export)", "nsys", &opt(&c.nsys_version));
    row(
        h,
        "captured at",
        "captured_at",
        &format!(
            "{}{}",
            opt(&c.captured_at),
            c.captured_at_from
                .as_deref()
                .map(|f| format!(" <span class=\"src\">({})</span>", escape(f)))
                .unwrap_or_default()
        ),
    );
    row(h, "duration", "duration", &c.duration_ns.map(dur).map(|d| escape(&d)).unwrap_or_else(|| opt(&None)));
    let window = match &c.window {
        Value::Null => opt(&None),
        Value::String(s) => escape(s),
        Value::Object(m) => escape(
            &m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k}={}", scalar(v)))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        v => escape(&v.to_string()),
    };
    row(h, "window", "window", &window);
    row(h, "CUDA graph trace", "graph_trace", &opt(&c.graph_trace_level));
    let kernels = match (c.kernel_names, c.kernel_instances, c.kernel_time_ns) {
        (Some(n), Some(i), Some(t)) => format!("{n} kernel names, {i} launches, {} of kernel time", dur(t)),
        (Some(n), _, _) => format!("{n} kernel names"),
        _ => "no kernel statistics".into(),
    };
    row(h, "kernels", "kernels", &escape(&kernels));
    h.push_str("</table>");
}

/// The primary range split into its children (absent without a split).
fn split_section(h: &mut String, doc: &ReportDoc) {
    // the primary range split into its children
    if let Some(sp) = &doc.primary_split {
        let _ = write!(h, "<h2>Where the time of {} went</h2>", escape(&sp.label));
        let px = if sp.host_wall_time_ns > 0 { 900.0 / sp.host_wall_time_ns as f64 } else { 0.0 };
        let mut parts: Vec<(i64, &str, String)> = sp
            .children
            .iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    p.host_wall_time_ns,
                    COLORS[i % COLORS.len()],
                    format!("{} {} ({})", p.label, dur(p.host_wall_time_ns), pct(p.share_of_primary)),
                )
            })
            .collect();
        if sp.more_children > 0 {
            parts.push((
                sp.more_children_ns,
                "#718096",
                format!("{} more child labels {}", sp.more_children, dur(sp.more_children_ns)),
            ));
        }
        parts.push((sp.not_in_any_child_ns, "#cbd5e0", format!("in no child range {}", dur(sp.not_in_any_child_ns))));
        h.push_str(&axis_bar("split", &parts, px, 900.0, 22.0));
        h.push_str("<table class=\"split\" id=\"split\"><tr><th></th><th>child range</th><th>share of its wall</th><th>host wall</th></tr>");
        for (i, p) in sp.children.iter().enumerate() {
            let _ = write!(
                h,
                "<tr><td><span class=\"sw\" style=\"background:{}\"></span></td><td class=\"label\">{}{}</td><td class=\"num\" data-k=\"split-share\">{}</td><td class=\"num\">{}</td></tr>",
                COLORS[i % COLORS.len()],
                escape(&p.label),
                if p.also_under_other_parents { " <span class=\"src\">(also under other parents: an upper bound)</span>" } else { "" },
                pct(p.share_of_primary),
                escape(&dur(p.host_wall_time_ns))
            );
        }
        if sp.more_children > 0 {
            let _ = write!(
                h,
                "<tr><td><span class=\"sw\" style=\"background:#718096\"></span></td><td>{} more child labels</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                sp.more_children,
                pct(sp.more_children_share),
                escape(&dur(sp.more_children_ns))
            );
        }
        let _ = write!(
            h,
            "<tr><td><span class=\"sw\" style=\"background:#cbd5e0\"></span></td><td>in no child range</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr></table>",
            pct(sp.not_in_any_child_share),
            escape(&dur(sp.not_in_any_child_ns))
        );
        let _ = write!(
            h,
            "<p class=\"src\">100% = {} of host wall, summed over its occurrences.</p>",
            escape(&dur(sp.host_wall_time_ns))
        );
    }
}

/// Every range of the evidence on one time axis: host wall coverage and device span.
fn ranges_section(h: &mut String, doc: &ReportDoc) {
    // ranges, one axis
    h.push_str("<h2>Ranges</h2><p class=\"legend\"><span style=\"background:#38a169\"></span>covered by device work <span style=\"background:#a0aec0\"></span>uncovered host time (not GPU idle) &nbsp; <span style=\"background:#2b6cb0\"></span>GPU busy <span style=\"background:#dd6b20\"></span>GPU idle within span</p>");
    if doc.evidence.is_empty() {
        h.push_str("<p>No NVTX ranges in the evidence.</p>");
    } else {
        let longest = doc.evidence.iter().map(|r| r.host_wall_time_ns.max(r.kernel_span_ns)).max().unwrap_or(0).max(1);
        let px = AXIS_PX / longest as f64;
        let _ = write!(
            h,
            "<p class=\"src\" id=\"ranges-axis\" data-axis-ns=\"{longest}\">one time axis for every bar below: the full width ({AXIS_PX} px) is {}, the longest host wall or device span</p>",
            escape(&dur(longest))
        );
        h.push_str("<table class=\"ranges\" id=\"ranges\"><tr><th>label</th><th>role</th><th>occ.</th><th>host wall: coverage | uncovered</th><th>device span: busy | idle in span</th></tr>");
        for r in &doc.evidence {
            let cov = axis_bar(
                "ranges",
                &[
                    (
                        r.host_range_kernel_coverage_ns,
                        "#38a169",
                        format!("coverage {}", ms(r.host_range_kernel_coverage_ns)),
                    ),
                    (
                        r.uncovered_host_time_ns,
                        "#a0aec0",
                        format!("uncovered host time {}", ms(r.uncovered_host_time_ns)),
                    ),
                ],
                px,
                AXIS_PX,
                14.0,
            );
            let busy = axis_bar(
                "ranges",
                &[
                    (r.kernel_busy_union_ns, "#2b6cb0", format!("busy {}", ms(r.kernel_busy_union_ns))),
                    (
                        r.gpu_idle_within_kernel_span_ns,
                        "#dd6b20",
                        format!("idle in span {}", ms(r.gpu_idle_within_kernel_span_ns)),
                    ),
                ],
                px,
                AXIS_PX,
                14.0,
            );
            let _ = write!(
                h,
                "<tr class=\"{role}\" data-label=\"{lt}\"><td class=\"label\" title=\"{lt}\">{l}</td><td>{role}</td><td class=\"num\">{occ}</td><td>{cov}<div class=\"cap\">wall {w} = {c} + {u}</div></td><td>{busy}<div class=\"cap\">span {s} = {b} + {i}</div></td></tr>",
                role = escape(&r.role),
                lt = escape(&r.label),
                l = escape(&truncate(&r.label, 48)),
                occ = r.occurrences,
                w = ms(r.host_wall_time_ns),
                c = ms(r.host_range_kernel_coverage_ns),
                u = ms(r.uncovered_host_time_ns),
                s = ms(r.kernel_span_ns),
                b = ms(r.kernel_busy_union_ns),
                i = ms(r.gpu_idle_within_kernel_span_ns),
            );
        }
        h.push_str("</table>");
    }
}

/// Kernel categories, a bar and a table.
fn categories_section(h: &mut String, doc: &ReportDoc) {
    // categories
    let eager_only = doc.kernels_scope.starts_with("eager");
    if eager_only {
        let _ = write!(h, "<p class=\"warn\" id=\"kernels-scope\">{}</p>", escape(&doc.kernels_scope));
    }
    h.push_str(if eager_only {
        "<h2>Kernel categories of the eager kernels (not the workload's)</h2>"
    } else {
        "<h2>Kernel categories</h2>"
    });
    if doc.categories.is_empty() {
        h.push_str("<p>No kernel statistics.</p>");
    } else {
        let total: i64 = doc.categories.iter().map(|c| c.total_time_ns).sum::<i64>().max(1);
        let parts: Vec<(i64, &str, String)> = doc
            .categories
            .iter()
            .enumerate()
            .map(|(i, c)| {
                (c.total_time_ns, COLORS[i % COLORS.len()], format!("{} {:.1}%", c.category, c.share * 100.0))
            })
            .collect();
        h.push_str(&axis_bar("categories", &parts, 900.0 / total as f64, 900.0, 22.0));
        h.push_str("<table class=\"cats\" id=\"categories\"><tr><th></th><th>category</th><th>share</th><th>time</th><th>instances</th><th>names</th></tr>");
        for (i, c) in doc.categories.iter().enumerate() {
            let _ = write!(
                h,
                "<tr data-category=\"{cat}\"><td><span class=\"sw\" style=\"background:{}\"></span></td><td>{cat}</td><td class=\"num\" data-k=\"category-share\">{:.1}%</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                COLORS[i % COLORS.len()],
                c.share * 100.0,
                ms(c.total_time_ns),
                c.instances,
                c.kernel_names,
                cat = escape(&c.category),
            );
        }
        let _ = write!(
            h,
            "</table><p class=\"src\">shares of {} of kernel time (the whole kernel table; rules: {})</p>",
            escape(&dur(total)),
            escape(&doc.categories_source)
        );
    }
}

/// The top kernels, one axis: 100% of kernel time = 160 px.
fn kernels_section(h: &mut String, doc: &ReportDoc) {
    let eager_only = doc.kernels_scope.starts_with("eager");
    // top kernels: one axis, 100% of kernel time = 160 px
    h.push_str(if eager_only {
        "<h2>Eager kernels (graph replays are opaque: not the workload's ranking)</h2>"
    } else {
        "<h2>Top kernels</h2>"
    });
    if doc.top_kernels.is_empty() {
        h.push_str("<p>No kernel statistics.</p>");
    } else {
        let total = doc.capture.kernel_time_ns.unwrap_or(0).max(1);
        h.push_str("<table class=\"kernels\" id=\"kernels\"><tr><th>share</th><th>time</th><th>instances</th><th>category</th><th>kernel</th></tr>");
        for k in doc.top_kernels.iter().take(25) {
            let bar = axis_bar(
                "kernels",
                &[(k.total_time_ns, "#2b6cb0", format!("{:.1}%", k.share * 100.0))],
                160.0 / total as f64,
                160.0,
                12.0,
            );
            let _ = write!(
                h,
                "<tr><td>{bar} <span data-k=\"kernel-share\">{:.1}%</span></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"label\" title=\"{}\">{}</td></tr>",
                k.share * 100.0,
                ms(k.total_time_ns),
                k.instances,
                escape(&k.category),
                escape(&k.name),
                escape(&truncate(&k.name, 90))
            );
        }
        h.push_str("</table>");
        if doc.top_kernels.len() > 25 {
            let _ = write!(h, "<p class=\"src\">{} more kernels in the JSON document.</p>", doc.top_kernels.len() - 25);
        }
    }
}

/// The classification's signals as a table, unknown ones shown as such.
fn signals_section(h: &mut String, doc: &ReportDoc) {
    // signals as a table
    h.push_str("<h2>Signals</h2><table class=\"kv\" id=\"signals\"><tr><th>signal</th><th>value</th><th>what it measures</th></tr>");
    let s = &doc.signals;
    let sig: [(&str, Option<f64>, bool, &str); 9] = [
        ("coverage_fraction", s.coverage_fraction, true, "host wall of the primary range covered by device work"),
        ("idle_in_span_fraction", s.idle_in_span_fraction, true, "GPU idle within the device-work span"),
        ("outside_span_fraction", s.outside_span_fraction, true, "host wall outside any device-work span"),
        ("host_ns_per_runtime_call", s.host_ns_per_runtime_call, false, "host wall per CUDA runtime call"),
        (
            "kernels_per_runtime_call",
            s.kernels_per_runtime_call,
            false,
            "kernels per runtime call (≫ 1 with CUDA graphs)",
        ),
        ("sync_fraction", s.sync_fraction, true, "host wall in blocking synchronisation"),
        ("memcpy_api_fraction", s.memcpy_api_fraction, true, "host wall in blocking copy calls"),
        (
            "comm_share",
            s.comm_share,
            true,
            if s.comm_share_source.is_some() {
                "device busy time in communication with no compute under it"
            } else {
                "kernel time in communication kernels"
            },
        ),
        (
            "memcpy_device_share",
            s.memcpy_device_share,
            true,
            if s.memcpy_device_share_source.as_deref() == Some(super::MEMCPY_FROM_CATEGORY) {
                "kernel time in copy kernels only (no MEMCPY/MEMSET rows in a bundle)"
            } else {
                "device time in copies"
            },
        ),
    ];
    for (name, v, is_frac, what) in sig {
        let text = match (v, is_frac, name) {
            (None, _, _) => "<span class=\"unk\">not measurable here</span>".to_string(),
            (Some(x), true, _) => pct(x),
            (Some(x), false, "host_ns_per_runtime_call") => escape(&dur(x.round() as i64)),
            (Some(x), false, _) => format!("{x:.2}"),
        };
        let _ = write!(
            h,
            "<tr><td class=\"label\">{name}</td><td class=\"num\" data-k=\"signal-{name}\">{text}</td><td>{}</td></tr>",
            escape(what)
        );
    }
    if let Some(src) = &s.comm_share_source {
        let _ = write!(h, "<tr><td class=\"label\">comm_share_source</td><td colspan=\"2\">{}</td></tr>", escape(src));
    }
    if let Some(src) = &s.memcpy_device_share_source {
        let _ = write!(
            h,
            "<tr><td class=\"label\">memcpy_device_share_source</td><td colspan=\"2\">{}</td></tr>",
            escape(src)
        );
    }
    h.push_str("</table>");
}

/// The provenance record flattened into a table, or what to do without one.
fn provenance_section(h: &mut String, doc: &ReportDoc) {
    // provenance as a table
    h.push_str("<h2>Provenance</h2>");
    if doc.provenance.is_null() {
        h.push_str("<p id=\"provenance\" class=\"unk\">No provenance record in the evidence: <code>nsys-resolve --record DIR</code> writes one (the nsys used, its flags, the GPU preflight); merge it with <code>bundle-merge</code> or pass <code>report --provenance FILE</code>. The capture header above comes from the export's own metadata.</p>");
    } else {
        let mut rows = Vec::new();
        flatten(&doc.provenance, String::new(), &mut rows, 200);
        h.push_str("<table class=\"kv\" id=\"provenance\">");
        for (k, v) in rows.iter().filter(|(k, _)| k != "schema" && !k.starts_with("tool.")) {
            let _ = write!(h, "<tr><th class=\"label\">{}</th><td>{}</td></tr>", escape(k), escape(&truncate(v, 300)));
        }
        h.push_str("</table>");
    }
}

/// One row per GPU (`#devices`): busy union of its active span, idle in it, communication and copies with the
/// part nothing hides (absent when the report has no per-device rows).
fn devices_section(h: &mut String, devices: &[super::devices::DeviceEvidence]) {
    if devices.is_empty() {
        return;
    }
    h.push_str("<h2>GPUs</h2><table id=\"devices\"><tr><th>GPU</th><th>busy</th><th>active span</th><th>busy share</th><th>idle in span</th><th>communication</th><th>with no compute under it</th><th>copies</th><th>with no kernel under them</th></tr>");
    let opt_ms = |v: Option<i64>| v.map(ms).unwrap_or_else(|| "not measured".into());
    for d in devices {
        let _ = write!(
            h,
            "<tr><td class=\"label\">{}</td><td class=\"num\" data-k=\"device-busy\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\" data-k=\"device-exposed-comm\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            d.device_id,
            ms(d.busy_ns),
            ms(d.span_end_ns - d.span_start_ns),
            d.busy_fraction.map(pct).unwrap_or_default(),
            ms(d.idle_in_span_ns),
            opt_ms(d.comm_ns),
            opt_ms(d.exposed_comm_ns),
            opt_ms(d.copy_ns),
            opt_ms(d.exposed_copy_ns)
        );
    }
    h.push_str("</table>");
}

/// Colours of the step-budget components (known ones fixed, others from [`COLORS`]).
fn comp_color(name: &str, i: usize) -> &'static str {
    match name {
        "gpu_kernel" => "#2b6cb0",
        "gpu_memcpy" => "#319795",
        "sync_wait" => "#805ad5",
        "launch_api" => "#dd6b20",
        "other_api" => "#d69e2e",
        "comm" => "#d53f8c",
        "unattributed" => "#a0aec0",
        _ => COLORS[i % COLORS.len()],
    }
}

/// Width and height in pixels of the per-step chart.
pub const STEPS_PX: f64 = 900.0;
pub const STEPS_H: f64 = 180.0;
/// The per-step chart's vertical axis ends at this many times the median bar (taller bars are clipped and
/// marked), so one 18× outlier does not flatten every other step.
pub const STEPS_CLIP: i64 = 4;

fn step_budget_section(h: &mut String, sb: &StepBudgetSection) {
    let v = &sb.verdict;
    let _ = write!(
        h,
        "<h2 id=\"step-budget\">Step budget of {}</h2><p class=\"src\">{} steps, source: {}{}</p><p class=\"reason\">step budget verdict <span class=\"class {c}\" id=\"sb-class\">{c}</span> <b>{}</b>: {}</p>",
        escape(&sb.step_label),
        sb.steps,
        escape(&sb.source),
        sb.outlier_factor.map(|k| format!("; outliers: wall &gt; {k}× the median wall")).unwrap_or_default(),
        escape(&v.rule),
        escape(&v.reason),
        c = escape(&v.class),
    );
    if !sb.device_work {
        h.push_str(
            "<p class=\"warn\">These steps carry no device work: the report's class comes from the range rules.</p>",
        );
    }
    // the rows that establish the verdict
    h.push_str("<table class=\"kv\" id=\"sb-verdict\"><tr><th>row</th><th>value</th><th>share</th></tr>");
    for r in &v.rows {
        let _ = write!(
            h,
            "<tr><td class=\"label\">{}</td><td class=\"num\" data-k=\"sb-row-ns\" data-ns=\"{}\">{}</td><td class=\"num\" data-k=\"sb-row-share\">{}</td></tr>",
            escape(&r.name),
            r.value_ns,
            escape(&dur(r.value_ns)),
            r.share.map(pct).unwrap_or_else(|| "—".into())
        );
    }
    h.push_str("</table>");
    // legend
    h.push_str("<p class=\"legend\">");
    for (i, n) in sb.components.iter().enumerate() {
        let _ = write!(h, "<span style=\"background:{}\"></span>{} ", comp_color(n, i), escape(n));
    }
    h.push_str("<span style=\"background:#e53e3e\"></span>outlier step</p>");
    step_bars(h, sb);
    // outliers
    if !sb.outliers.is_empty() {
        let list: Vec<String> = sb.outliers.iter().take(60).map(|o| o.to_string()).collect();
        let all = sb.outlier_count.unwrap_or(sb.outliers.len() as u64);
        let _ = write!(
            h,
            "<p id=\"sb-outliers\" data-count=\"{all}\">outlier steps: {}{}</p>",
            list.join(", "),
            if all > list.len() as u64 { format!(" … ({all} in all)") } else { String::new() }
        );
    }
    step_histograms(h, sb);
    step_distributions(h, sb);
    idle_attribution(h, sb);
}

/// The per-step stacked bars (binned when there are too many steps), one axis, tall bars clipped and marked.
fn step_bars(h: &mut String, sb: &StepBudgetSection) {
    // per-step stacked bars
    let bars = &sb.bars.bars;
    if let Some(note) = sb.bars_note.as_deref().filter(|_| bars.is_empty()) {
        let _ = write!(h, "<p class=\"warn\" id=\"step-bars-note\" data-bars=\"0\">{}</p>", escape(note));
        return;
    }
    let mean = |x: i64, k: u64| x as f64 / k.max(1) as f64;
    let mut means: Vec<f64> = bars.iter().map(|b| mean(b.wall_ns, b.steps)).collect();
    means.sort_by(|a, b| a.total_cmp(b));
    let med = means.get(means.len() / 2).copied().unwrap_or(0.0);
    let top = means.last().copied().unwrap_or(0.0);
    let scale_ns = if med > 0.0 { top.min(STEPS_CLIP as f64 * med) } else { top }.max(1.0);
    let px = STEPS_H / scale_ns;
    let bw = STEPS_PX / bars.len().max(1) as f64;
    let per = sb.bars.steps_per_bar;
    let _ = write!(
        h,
        "<p class=\"src\" id=\"step-bars-note\" data-bars=\"{}\" data-steps-per-bar=\"{per}\" data-scale-ns=\"{}\">{}; the bar height is the step's wall split into its components, the full height ({STEPS_H} px) is {} per step; taller bars are clipped at the top and marked ▲{}</p>",
        bars.len(),
        scale_ns.round() as i64,
        if sb.bars.binned {
            format!(
                "{} steps are too many to draw one by one: they are binned, each bar is {per} consecutive steps and is drawn as the mean step of its bin ({} bars)",
                sb.steps,
                bars.len()
            )
        } else {
            format!("one bar per step, {} steps in step order", sb.steps)
        },
        escape(&dur(scale_ns.round() as i64)),
        if sb.outliers.is_empty() { String::new() } else { format!("; {} outlier steps marked in red above their bar", sb.outlier_count.unwrap_or(sb.outliers.len() as u64)) }
    );
    let _ = write!(
        h,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"step-bars\" width=\"{STEPS_PX}\" height=\"{}\" role=\"img\" data-axis=\"steps\"><rect x=\"0\" y=\"0\" width=\"{STEPS_PX}\" height=\"{}\" fill=\"#f7fafc\"/>",
        STEPS_H + 10.0,
        STEPS_H + 10.0
    );
    for (k, b) in bars.iter().enumerate() {
        let x = k as f64 * bw;
        let _ = write!(
            h,
            "<g class=\"step-bar\" data-first=\"{}\" data-last=\"{}\" data-steps=\"{}\" data-wall-ns=\"{}\" data-outliers=\"{}\"><title>{}{} wall {} (mean per step), GPU busy {}</title>",
            b.first_index,
            b.last_index,
            b.steps,
            b.wall_ns,
            b.outliers,
            if b.steps == 1 { format!("step {}", b.first_index) } else { format!("steps {}–{}", b.first_index, b.last_index) },
            if b.outliers > 0 { format!(" ({} outlier)", b.outliers) } else { String::new() },
            escape(&dur(mean(b.wall_ns, b.steps).round() as i64)),
            escape(&dur(mean(b.gpu_busy_ns, b.steps).round() as i64))
        );
        let mut y = STEPS_H + 10.0;
        let floor = 10.0;
        for (i, n) in sb.components.iter().enumerate() {
            let ns = b.components.get(i).copied().unwrap_or(0);
            let full = mean(ns, b.steps) * px;
            if ns == 0 {
                continue;
            }
            let hgt = full.min((y - floor).max(0.0));
            y -= hgt;
            let _ = write!(
                h,
                "<rect class=\"sseg\" data-c=\"{}\" data-ns=\"{ns}\" x=\"{x:.2}\" y=\"{y:.3}\" width=\"{:.2}\" height=\"{hgt:.3}\" fill=\"{}\"/>",
                escape(n),
                (bw - if bw > 2.0 { 0.5 } else { 0.0 }).max(0.1),
                comp_color(n, i),
            );
        }
        if mean(b.wall_ns, b.steps) > scale_ns * 1.0001 {
            let _ = write!(h, "<text class=\"clip-mark\" x=\"{:.3}\" y=\"9\" font-size=\"8\">▲</text>", x);
        }
        if b.outliers > 0 {
            let _ = write!(
                h,
                "<rect class=\"outlier-mark\" x=\"{x:.3}\" y=\"0\" width=\"{:.3}\" height=\"4\" fill=\"#e53e3e\"/>",
                bw.max(1.0)
            );
        }
        h.push_str("</g>");
    }
    h.push_str("</svg>");
    if let (Some(f), Some(l)) = (bars.first(), bars.last()) {
        let _ = write!(
            h,
            "<p class=\"src\" id=\"step-bars-axis\">left: step {} (starts at {}) · right: step {} ({} at {}); times on the export's clock</p>",
            f.first_index,
            escape(&dur(f.start_ns)),
            l.last_index,
            if l.steps > 1 { "its bin starts" } else { "starts" },
            escape(&dur(l.start_ns))
        );
    }
}

/// The histograms of step wall, GPU busy and the components.
fn step_histograms(h: &mut String, sb: &StepBudgetSection) {
    // histograms
    h.push_str("<div class=\"hists\">");
    for hg in &sb.histograms {
        let title = match hg.name.as_str() {
            "wall" => "step wall",
            "gpu_busy" => "GPU busy per step",
            n => n,
        };
        let maxc = hg.counts.iter().copied().chain([hg.above]).max().unwrap_or(0).max(1) as f64;
        let nb = hg.counts.len() + usize::from(hg.above > 0);
        let w = 420.0;
        let bw = w / nb.max(1) as f64;
        let _ = write!(
            h,
            "<figure><figcaption>Histogram of {} ({} steps)</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" id=\"hist-{}\" width=\"{w}\" height=\"110\" role=\"img\" data-axis=\"hist\"><rect x=\"0\" y=\"0\" width=\"{w}\" height=\"110\" fill=\"#f7fafc\"/>",
            title,
            sb.steps,
            escape(&hg.name)
        );
        for (k, c) in hg.counts.iter().enumerate() {
            let lo = hg.lo_ns + k as i64 * hg.bin_ns;
            let hi = (lo + hg.bin_ns).min(hg.hi_ns + 1);
            let ht = *c as f64 / maxc * 100.0;
            let _ = write!(
                h,
                "<rect class=\"hbin\" data-count=\"{c}\" data-lo-ns=\"{lo}\" x=\"{:.3}\" y=\"{:.3}\" width=\"{:.3}\" height=\"{ht:.3}\" fill=\"#2b6cb0\"><title>{} – {}: {c} steps</title></rect>",
                k as f64 * bw,
                110.0 - ht,
                (bw - 0.5).max(0.1),
                escape(&dur(lo)),
                escape(&dur(hi))
            );
        }
        if hg.above > 0 {
            let ht = hg.above as f64 / maxc * 100.0;
            let _ = write!(
                h,
                "<rect class=\"hbin above\" data-count=\"{}\" data-lo-ns=\"{}\" x=\"{:.3}\" y=\"{:.3}\" width=\"{:.3}\" height=\"{ht:.3}\" fill=\"#e53e3e\"><title>above {}: {} steps (max {})</title></rect>",
                hg.above,
                hg.hi_ns + 1,
                hg.counts.len() as f64 * bw,
                110.0 - ht,
                (bw - 0.5).max(0.1),
                escape(&dur(hg.hi_ns)),
                hg.above,
                escape(&dur(hg.max_ns))
            );
        }
        let _ = write!(
            h,
            "</svg><p class=\"src\">{} bins of {} from {} to {}{}</p></figure>",
            hg.counts.len(),
            escape(&dur(hg.bin_ns)),
            escape(&dur(hg.lo_ns)),
            escape(&dur(hg.hi_ns)),
            if hg.above > 0 {
                format!(
                    "; {} step{} above (red, up to {})",
                    hg.above,
                    if hg.above == 1 { "" } else { "s" },
                    escape(&dur(hg.max_ns))
                )
            } else {
                String::new()
            }
        );
    }
    h.push_str("</div>");
}

/// Median, p90, p99, max and the sum over steps of each per-step quantity.
fn step_distributions(h: &mut String, sb: &StepBudgetSection) {
    // distributions
    h.push_str("<table class=\"dist\" id=\"sb-dist\"><tr><th>per step</th><th>median</th><th>p90</th><th>p99</th><th>max</th><th>Σ over steps</th></tr>");
    let mut order: Vec<&str> = vec!["wall", "gpu_busy"];
    order.extend(sb.components.iter().map(|s| s.as_str()));
    for extra in sb.distributions.keys() {
        if !order.contains(&extra.as_str()) {
            order.push(extra);
        }
    }
    for n in order {
        let Some(d) = sb.distributions.get(n) else { continue };
        let _ = write!(
            h,
            "<tr><td class=\"label\">{n}</td><td class=\"num\" data-k=\"sbd-{n}-median\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&dur(d.median)),
            escape(&dur(d.p90)),
            escape(&dur(d.p99)),
            escape(&dur(d.max)),
            sb.totals.get(n).map(|t| escape(&dur(*t))).unwrap_or_else(|| "—".into()),
            n = escape(n),
        );
    }
    h.push_str("</table>");
}

/// GPU idle attribution: by device, as flattened rows, or why it is not computed.
fn idle_attribution(h: &mut String, sb: &StepBudgetSection) {
    // idle attribution
    h.push_str("<h3>GPU idle attribution</h3>");
    let per_device = sb.idle.iter().all(|x| x.get("categories").is_some_and(|c| c.is_object()));
    if sb.idle_computed && per_device {
        idle_by_device(h, &sb.idle);
    } else if sb.idle_computed {
        let mut rows: Vec<Vec<(String, String)>> = Vec::new();
        for x in sb.idle.iter().take(200) {
            let mut r = Vec::new();
            flatten(x, String::new(), &mut r, 60);
            rows.push(r);
        }
        let mut cols: Vec<String> = Vec::new();
        for r in &rows {
            for (k, _) in r {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
        h.push_str("<table class=\"kv\" id=\"idle\"><tr>");
        for c in &cols {
            let _ = write!(h, "<th>{}</th>", escape(c));
        }
        h.push_str("</tr>");
        for r in &rows {
            h.push_str("<tr class=\"idle-row\">");
            for c in &cols {
                let v = r.iter().find(|(k, _)| k == c).map(|(_, v)| v.as_str()).unwrap_or("");
                let _ = write!(h, "<td>{}</td>", escape(&truncate(v, 120)));
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
        if sb.idle.len() > 200 {
            let _ = write!(h, "<p class=\"src\">{} more rows in the JSON document.</p>", sb.idle.len() - 200);
        }
    } else {
        h.push_str("<p id=\"idle-not-computed\" class=\"unk\">Not computed: the step budget has no GPU idle attribution (<code>idle[]</code> is absent or empty in the step-budget document), so idle gaps are not split into waiting on the host, on a sync, launch latency or other.</p>");
    }
}

/// Idle categories in drawing order (others follow as found).
const IDLE_ORDER: [&str; 4] = ["host_wait", "sync_wait", "launch_latency", "other"];

fn idle_color(name: &str, i: usize) -> &'static str {
    match name {
        "host_wait" => "#a0aec0",
        "sync_wait" => "#805ad5",
        "launch_latency" => "#dd6b20",
        "other" => "#718096",
        _ => COLORS[i % COLORS.len()],
    }
}

/// `idle[]` of the step budget as one row per device: its idle split by cause, one bar per device on one axis.
fn idle_by_device(h: &mut String, idle: &[Value]) {
    let ns_of = |v: &Value, k: &str| v.get(k).and_then(|x| x.as_i64()).unwrap_or(0);
    let mut cats: Vec<String> = IDLE_ORDER.iter().map(|s| s.to_string()).collect();
    for d in idle {
        if let Some(m) = d.get("categories").and_then(|c| c.as_object()) {
            for k in m.keys() {
                if !cats.contains(k) {
                    cats.push(k.clone());
                }
            }
        }
    }
    let longest = idle.iter().map(|d| ns_of(d, "idle_ns")).max().unwrap_or(0).max(1);
    let px = AXIS_PX / longest as f64;
    h.push_str("<p class=\"legend\">");
    for (i, c) in cats.iter().enumerate() {
        let _ = write!(h, "<span style=\"background:{}\"></span>{} ", idle_color(c, i), escape(c));
    }
    let _ = write!(
        h,
        "</p><p class=\"src\">GPU idle inside each device's active span (first to last device row), split by what the GPU waited for; one axis: the full width ({AXIS_PX} px) is {}</p>",
        escape(&dur(longest))
    );
    h.push_str("<table class=\"kv\" id=\"idle\"><tr><th>device</th><th>idle</th><th>gaps</th>");
    for c in &cats {
        let _ = write!(h, "<th>{}</th>", escape(c));
    }
    h.push_str("<th>idle by cause</th></tr>");
    for d in idle {
        let total = ns_of(d, "idle_ns");
        let cat = |c: &str| d.get("categories").and_then(|m| m.get(c));
        let parts: Vec<(i64, &str, String)> = cats
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let ns = cat(c).map(|x| ns_of(x, "ns")).unwrap_or(0);
                (ns, idle_color(c, i), format!("{c} {}", dur(ns)))
            })
            .collect();
        let _ = write!(
            h,
            "<tr class=\"idle-row\"><td class=\"num\">{}</td><td class=\"num\" data-k=\"idle-ns\">{}</td><td class=\"num\">{}</td>",
            d.get("device_id").map(scalar).unwrap_or_default(),
            escape(&dur(total)),
            d.get("gaps").map(scalar).unwrap_or_default()
        );
        for (c, (ns, _, _)) in cats.iter().zip(&parts) {
            let _ = write!(
                h,
                "<td class=\"num\" data-k=\"idle-{}\">{} ({})</td>",
                escape(c),
                escape(&dur(*ns)),
                if total > 0 { pct(*ns as f64 / total as f64) } else { "—".into() }
            );
        }
        let _ = write!(h, "<td>{}</td></tr>", axis_bar("idle", &parts, px, AXIS_PX, 14.0));
    }
    h.push_str("</table>");
    // where the idle lies relative to the steps
    let splits = ["in_steps", "between_steps", "outside_steps"];
    if idle.iter().any(|d| splits.iter().any(|k| d.get(*k).is_some_and(|x| x.is_object()))) {
        h.push_str("<table class=\"kv\" id=\"idle-where\"><tr><th>device</th><th>where</th>");
        for c in &cats {
            let _ = write!(h, "<th>{}</th>", escape(c));
        }
        h.push_str("</tr>");
        for d in idle {
            for k in splits {
                let Some(x) = d.get(k).filter(|x| x.is_object()) else { continue };
                let _ = write!(
                    h,
                    "<tr><td class=\"num\">{}</td><td>{}</td>",
                    d.get("device_id").map(scalar).unwrap_or_default(),
                    match k {
                        "in_steps" => "inside the steps' GPU spans",
                        "between_steps" => "between steps",
                        _ => "before the first / after the last step",
                    }
                );
                for c in &cats {
                    let _ = write!(h, "<td class=\"num\">{}</td>", escape(&dur(ns_of(x, c))));
                }
                h.push_str("</tr>");
            }
        }
        h.push_str("</table>");
    }
}

const CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:24px;color:#1a202c;background:#fff}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #e2e8f0}\
.class{padding:2px 10px;border-radius:4px;background:#2d3748;color:#fff;font-family:monospace}\
.kernel_bound{background:#2b6cb0}.cpu_launch_bound{background:#c05621}.python_overhead_bound{background:#b7791f}\
.sync_bound{background:#805ad5}.memcpy_bound{background:#319795}.comm_bound{background:#d53f8c}.mixed_or_unclear{background:#718096}\
.headline{font-size:17px;font-weight:600;margin:6px 0}.reason{font-size:15px}.warn{background:#fffaf0;border-left:4px solid #dd6b20;padding:6px 10px}.src{color:#718096;font-size:12px}.unk{color:#a0aec0;font-style:italic}\
table{border-collapse:collapse;margin-top:8px}td,th{padding:3px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #edf2f7}\
table.kv th{font-weight:600;color:#4a5568;white-space:nowrap}\
td.num{text-align:right;font-variant-numeric:tabular-nums}td.label,th.label{font-family:monospace;font-size:12px;max-width:520px;overflow:hidden}\
tr.primary td{background:#ebf8ff}.cap{font-size:11px;color:#4a5568}\
.legend span,.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}\
svg{display:block}svg[data-axis=kernels]{display:inline-block;vertical-align:middle}\
.hists{display:flex;gap:24px;flex-wrap:wrap}figure{margin:8px 0}figcaption{font-size:13px;color:#4a5568}h3{font-size:15px;margin-top:20px}";
