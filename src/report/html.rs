//! `report --html`: one self-contained page (inline CSS and SVG, no script, no network).
//!
//! Per range label two stacked bars, each scaled to 100 % of its own total: host wall = coverage by device
//! work + uncovered host time, and device-work span = busy + idle within span. Then the top kernels with
//! their categories and the category shares.

use std::fmt::Write;

use super::ReportDoc;

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

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

const COLORS: &[&str] = &["#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#718096", "#e53e3e", "#4a5568"];

/// A horizontal stacked bar: `(value, color, title)` parts scaled to their sum over `width` pixels.
fn stacked_bar(parts: &[(i64, &str, String)], width: f64, height: f64) -> String {
    let total: i64 = parts.iter().map(|p| p.0.max(0)).sum();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\"><rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#edf2f7\"/>"
    );
    if total > 0 {
        let mut x = 0.0;
        for (v, color, title) in parts {
            let w = width * (*v).max(0) as f64 / total as f64;
            if w > 0.0 {
                let _ = write!(
                    svg,
                    "<rect x=\"{x:.2}\" y=\"0\" width=\"{w:.2}\" height=\"{height}\" fill=\"{color}\"><title>{}</title></rect>",
                    escape(title)
                );
            }
            x += w;
        }
    }
    svg.push_str("</svg>");
    svg
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
        "<h1>nsyskit report <span class=\"class {c}\">{c}</span></h1><p class=\"reason\"><b>{rule}</b>: {reason}</p><p class=\"src\">source: {src} ({kind}); primary range: {label} ({choice})</p>",
        c = escape(&doc.class),
        rule = escape(&doc.decision.rule),
        reason = escape(&doc.decision.reason),
        src = escape(&doc.source),
        kind = escape(&doc.source_kind),
        label = escape(doc.decision.primary_label.as_deref().unwrap_or("none")),
        choice = escape(&doc.decision.primary_label_choice),
    );

    // ranges
    h.push_str("<h2>Ranges</h2><p class=\"legend\"><span style=\"background:#38a169\"></span>covered by device work <span style=\"background:#a0aec0\"></span>uncovered host time (not GPU idle) &nbsp; <span style=\"background:#2b6cb0\"></span>GPU busy <span style=\"background:#dd6b20\"></span>GPU idle within span</p>");
    if doc.evidence.is_empty() {
        h.push_str("<p>No NVTX ranges in the evidence.</p>");
    } else {
        h.push_str("<table class=\"ranges\"><tr><th>label</th><th>role</th><th>occ.</th><th>host wall: coverage | uncovered</th><th>device span: busy | idle in span</th></tr>");
        for r in &doc.evidence {
            let cov = stacked_bar(
                &[
                    (r.host_range_kernel_coverage_ns, "#38a169", format!("coverage {}", ms(r.host_range_kernel_coverage_ns))),
                    (r.uncovered_host_time_ns, "#a0aec0", format!("uncovered host time {}", ms(r.uncovered_host_time_ns))),
                ],
                300.0,
                16.0,
            );
            let busy = stacked_bar(
                &[
                    (r.kernel_busy_union_ns, "#2b6cb0", format!("busy {}", ms(r.kernel_busy_union_ns))),
                    (r.gpu_idle_within_kernel_span_ns, "#dd6b20", format!("idle in span {}", ms(r.gpu_idle_within_kernel_span_ns))),
                ],
                300.0,
                16.0,
            );
            let _ = write!(
                h,
                "<tr class=\"{role}\"><td class=\"label\" title=\"{lt}\">{l}</td><td>{role}</td><td class=\"num\">{occ}</td><td>{cov}<div class=\"cap\">wall {w} = {c} + {u}</div></td><td>{busy}<div class=\"cap\">span {s} = {b} + {i}</div></td></tr>",
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

    // categories
    h.push_str("<h2>Kernel categories</h2>");
    if doc.categories.is_empty() {
        h.push_str("<p>No kernel statistics.</p>");
    } else {
        let parts: Vec<(i64, &str, String)> = doc
            .categories
            .iter()
            .enumerate()
            .map(|(i, c)| (c.total_time_ns, COLORS[i % COLORS.len()], format!("{} {:.1}%", c.category, c.share * 100.0)))
            .collect();
        h.push_str(&stacked_bar(&parts, 900.0, 24.0));
        h.push_str("<table class=\"cats\"><tr><th></th><th>category</th><th>share</th><th>time</th><th>instances</th><th>names</th></tr>");
        for (i, c) in doc.categories.iter().enumerate() {
            let _ = write!(
                h,
                "<tr><td><span class=\"sw\" style=\"background:{}\"></span></td><td>{}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                COLORS[i % COLORS.len()],
                escape(&c.category),
                c.share * 100.0,
                ms(c.total_time_ns),
                c.instances,
                c.kernel_names
            );
        }
        let _ = write!(h, "</table><p class=\"src\">rules: {}</p>", escape(&doc.categories_source));
    }

    // top kernels
    h.push_str("<h2>Top kernels</h2>");
    if doc.top_kernels.is_empty() {
        h.push_str("<p>No kernel statistics.</p>");
    } else {
        h.push_str("<table class=\"kernels\"><tr><th>share</th><th>time</th><th>instances</th><th>category</th><th>kernel</th></tr>");
        for k in doc.top_kernels.iter().take(25) {
            let bar = stacked_bar(&[(((k.share * 1000.0) as i64).max(1), "#2b6cb0", format!("{:.1}%", k.share * 100.0)), ((1000 - (k.share * 1000.0) as i64).max(0), "#edf2f7", String::new())], 120.0, 12.0);
            let _ = write!(
                h,
                "<tr><td>{bar} {:.1}%</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"label\" title=\"{}\">{}</td></tr>",
                k.share * 100.0,
                ms(k.total_time_ns),
                k.instances,
                escape(&k.category),
                escape(&k.name),
                escape(&truncate(&k.name, 90))
            );
        }
        h.push_str("</table>");
    }

    // unattributed, signals, provenance
    h.push_str("<h2>Not attributed</h2><ul>");
    for s in &doc.unattributed.statements {
        let _ = write!(h, "<li>{}</li>", escape(s));
    }
    h.push_str("</ul><h2>Signals</h2><pre>");
    h.push_str(&escape(&serde_json::to_string_pretty(&doc.signals).unwrap_or_default()));
    h.push_str("</pre><h2>Provenance</h2><pre>");
    h.push_str(&escape(&serde_json::to_string_pretty(&doc.provenance).unwrap_or_default()));
    h.push_str("</pre>");
    let _ = write!(h, "<p class=\"src\">{} {}</p></body></html>\n", escape(&doc.tool.name), escape(&doc.tool.version));
    h
}

const CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:24px;color:#1a202c;background:#fff}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #e2e8f0}\
.class{padding:2px 10px;border-radius:4px;background:#2d3748;color:#fff;font-family:monospace}\
.kernel_bound{background:#2b6cb0}.cpu_launch_bound{background:#c05621}.python_overhead_bound{background:#b7791f}\
.sync_bound{background:#805ad5}.memcpy_bound{background:#319795}.comm_bound{background:#d53f8c}.mixed_or_unclear{background:#718096}\
.reason{font-size:15px}.src{color:#718096;font-size:12px}\
table{border-collapse:collapse;margin-top:8px}td,th{padding:3px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #edf2f7}\
td.num{text-align:right;font-variant-numeric:tabular-nums}td.label{font-family:monospace;font-size:12px;max-width:520px;overflow:hidden}\
tr.primary td{background:#ebf8ff}.cap{font-size:11px;color:#4a5568}\
.legend span,.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}\
pre{background:#f7fafc;padding:8px;font-size:12px;overflow:auto;max-height:400px}";
