//! `--format table`: a human table of a ranges document, for a terminal.

use super::SqliteRangesDoc;

fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// One line per label: label, occurrences, wall, coverage, busy, idle in span, uncovered, kernels, syncs
/// (times in ms), then totals and notes.
pub fn render_table(doc: &SqliteRangesDoc) -> String {
    let header =
        ["label", "occ", "wall_ms", "coverage", "busy_ms", "idle_in_span_ms", "uncovered_ms", "kernels", "syncs"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in &doc.ranges {
        let syncs: u64 = r.sync.values().map(|s| s.calls).sum();
        rows.push(vec![
            r.label.clone(),
            r.occurrences.to_string(),
            ms(r.host_wall_time_ns),
            format!("{:.1}%", r.host_range_kernel_coverage_fraction * 100.0),
            ms(r.kernel_busy_union_ns),
            ms(r.gpu_idle_within_kernel_span_ns),
            ms(r.uncovered_host_time_ns),
            r.kernels.to_string(),
            syncs.to_string(),
        ]);
    }
    let ncol = header.len();
    let widths: Vec<usize> = (0..ncol).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let mut line = String::new();
        for c in 0..ncol {
            let cell = &r[c];
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (ncol - 1)));
            out.push('\n');
        }
    }
    if doc.ranges.is_empty() {
        out.push_str("(no matching ranges)\n");
    }
    let t = &doc.totals;
    out.push_str(&format!(
        "\nkernels: {} total, {} attributed, {} unattributed ({} ms unattributed work)\n",
        t.kernels_total,
        t.kernels_attributed,
        t.kernels_unattributed,
        ms(t.kernel_work_unattributed_ns)
    ));
    for d in &t.per_device {
        out.push_str(&format!("device {}: {} rows, busy {} ms\n", d.device_id, d.device_rows, ms(d.busy_union_ns)));
    }
    out.push_str(&format!(
        "skipped: {} unlabeled, {} open or inverted\n",
        doc.skipped.unlabeled, doc.skipped.open_or_inverted
    ));
    for t in doc.thread_diagnostics.iter().filter(|t| !t.attention.is_empty()) {
        out.push_str(&format!(
            "thread {} (pid {} tid {}, {}): {}\n",
            t.global_tid,
            t.pid,
            t.tid,
            t.thread_name.as_deref().unwrap_or("unnamed"),
            t.attention.join(", ")
        ));
    }
    if let Some(f) = doc.folded.as_ref().filter(|f| !f.folded.is_empty()) {
        out.push_str(&format!(
            "folded: {} raw labels into {} ({} occurrences folded; --no-fold keeps them):",
            f.raw_labels, f.labels, f.folded_occurrences
        ));
        for x in f.folded.iter().take(10) {
            out.push_str(&format!(" {} ({} labels, {} occ)", x.label, x.raw_labels, x.occurrences));
        }
        if f.folded.len() > 10 || f.folded_left_out > 0 {
            out.push_str(&format!(" … {} more", f.folded.len().saturating_sub(10) as u64 + f.folded_left_out));
        }
        out.push('\n');
    }
    for h in &doc.high_cardinality_labels {
        out.push_str(&format!("high-cardinality labels: {} ({} labels)\n", h.pattern, h.labels));
    }
    out.push_str("Nested labels overlap: never add rows at different depths. Uncovered host time is not GPU idle.\n");
    out
}
