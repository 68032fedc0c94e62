//! `report`'s classification: the class of the primary range from the range rules (R0-R7), or of the capture
//! from its device rows when no range can be attributed, with the evidence rows, the unattributed work and the
//! capture header. [`classify`] runs the named steps in order; each note lands where it did.

use super::*;

/// The category shares, the kernel time they are shares of, and the top kernels.
struct KernelShares {
    cats: Vec<CategoryShare>,
    kernel_time: i64,
    top_kernels: Vec<TopKernel>,
}

impl KernelShares {
    fn share_of(&self, c: &str) -> f64 {
        self.cats.iter().find(|x| x.category == c).map(|x| x.share).unwrap_or(0.0)
    }
}

/// CUDA graph replays the capture cannot see, or sees only as opaque GRAPH_TRACE rows: why no device-side class
/// stands (R0).
struct HiddenGraphs {
    invisible: Option<String>,
    opaque: Option<String>,
}

/// Classify the evidence: the class, the signals it rests on and everything the report shows beside them.
pub fn classify(ev: &Evidence, categories: &Categories, chosen: &Primary, top: usize) -> Result<ReportDoc> {
    let (schema, tool) = ReportDoc::header();
    let mut notes = Vec::new();
    let empty = Vec::new();
    let ranges: &Vec<RangeRow> = ev.ranges.as_ref().map(|r| &r.ranges).unwrap_or(&empty);
    let primary: Option<&RangeRow> = chosen.label.as_deref().and_then(|l| ranges.iter().find(|r| r.label == l));
    let choice = chosen.choice.clone();
    let k = kernel_shares(ev, categories, top, &mut notes);
    let mut kernels_scope = match ev.kernels_source.as_deref() {
        Some(_) => "every kernel of the capture".to_string(),
        None => "no kernel statistics".to_string(),
    };
    let s = signals(ev, categories, primary, &k, &mut notes);
    let graphs = hidden_graphs(ev);
    if graphs.opaque.is_some() {
        kernels_scope = "eager kernels only: graph replays are opaque GRAPH_TRACE rows (graph-level tracing), so this is not the workload's kernel ranking".into();
        notes.push(format!("top_kernels and categories: {kernels_scope}"));
    }
    let device_rows = devices::rows(ev);
    // graph replays the capture cannot see, or sees only as opaque rows: the device rows do not show what the
    // GPU ran (replayed work missing, or communication and copies inside the replays hidden), so they decide
    // nothing (R0, as for a range)
    let graphs_hidden = graphs.invisible.as_ref().or(graphs.opaque.as_ref());
    let device_basis = primary.is_none() && !device_rows.is_empty() && graphs_hidden.is_none();
    let (class, rule, reason) = decide(ev, primary, &s, &device_rows, &choice, &graphs, device_basis);
    let (evidence, children) = evidence_rows(ranges, primary, &mut notes);
    let u = unattributed(ev, primary, &k, &mut notes);
    notes.extend(devices::uneven_comm_note(&device_rows, s.comm_share));
    notes.extend(ev.capture.iter().flat_map(|c| c.notes.iter()).map(|n| format!("capture: {n}")));
    notes.push("nested labels overlap: numbers of labels at different depths are never added".into());
    let question = question::section(ev, categories, primary.map(|p| p.label.as_str()))?;
    let capture = capture_header(ev, k.kernel_time);
    let primary_split = primary.map(|p| split_of(p, &children));
    Ok(ReportDoc {
        schema,
        tool,
        source: ev.source.clone(),
        source_kind: ev.kind.clone(),
        class: class.to_string(),
        decision: Decision {
            class: class.to_string(),
            rule: rule.to_string(),
            reason,
            primary_label: primary.map(|p| p.label.clone()),
            primary_label_choice: choice,
            basis: if device_basis { "device" } else { "ranges" }.into(),
            would_be: None,
        },
        headline: String::new(),
        capture,
        primary_split,
        signals: s,
        evidence,
        devices: if devices::shown(ev, &device_rows) { device_rows } else { Vec::new() },
        ranks: Vec::new(),
        blocking_calls: ev.no_range.as_ref().map(|n| n.blocking_calls.clone()).unwrap_or_default(),
        top_kernels: k.top_kernels,
        categories: k.cats,
        categories_source: categories.source().to_string(),
        kernels_source: ev.kernels_source.clone(),
        kernels_scope,
        unattributed: u,
        provenance: ev.provenance.clone().unwrap_or(Value::Null),
        facts: ev.facts.clone(),
        html: None,
        question,
        step_budget: None,
        range_decision: None,
        trace: None,
        notes,
    })
}

/// The kernel categories and top kernels, as shares of the whole kernel table (a cut list adds `not_listed`).
fn kernel_shares(ev: &Evidence, categories: &Categories, top: usize, notes: &mut Vec<String>) -> KernelShares {
    let kernels: &[KernelStat] = ev.kernels.as_deref().unwrap_or(&[]);
    let mut cats = category_shares(categories, kernels);
    let listed_time: i64 = kernels.iter().map(|k| k.total_time_ns).sum();
    // shares are taken over the whole kernel table: when the list is cut (kern-csv-to-json --top), what it
    // omits is one `not_listed` row, never silently dropped from the denominator
    let kernel_time = match &ev.kernel_totals {
        Some(t) if t.total_time_ns > listed_time => {
            let missing_names = t.kernels.map(|n| (n - kernels.len() as i64).max(0) as usize).unwrap_or(0);
            let missing_inst =
                t.instances.map(|n| (n - kernels.iter().map(|k| k.instances).sum::<i64>()).max(0)).unwrap_or(0);
            notes.push(format!(
                "the kernel list has {} of {} kernel names; the {} ns it omits are the row not_listed, and every share is of {}'s total {} ns",
                kernels.len(),
                t.kernels.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
                t.total_time_ns - listed_time,
                t.source,
                t.total_time_ns
            ));
            cats.push(CategoryShare {
                category: NOT_LISTED.into(),
                kernel_names: missing_names,
                instances: missing_inst,
                total_time_ns: t.total_time_ns - listed_time,
                share: 0.0,
            });
            t.total_time_ns
        }
        _ => listed_time,
    };
    for c in cats.iter_mut() {
        c.share = if kernel_time > 0 { c.total_time_ns as f64 / kernel_time as f64 } else { 0.0 };
    }
    cats.sort_by(|a, b| b.total_time_ns.cmp(&a.total_time_ns).then_with(|| a.category.cmp(&b.category)));
    let mut sorted: Vec<&KernelStat> = kernels.iter().collect();
    sorted.sort_by(|a, b| b.total_time_ns.cmp(&a.total_time_ns).then_with(|| a.name.cmp(&b.name)));
    let top_kernels: Vec<TopKernel> = sorted
        .iter()
        .take(if top == 0 { usize::MAX } else { top })
        .map(|k| TopKernel {
            name: k.name.clone(),
            category: categories.categorize(&k.name).to_string(),
            total_time_ns: k.total_time_ns,
            instances: k.instances,
            share: if kernel_time > 0 { k.total_time_ns as f64 / kernel_time as f64 } else { 0.0 },
        })
        .collect();
    KernelShares { cats, kernel_time, top_kernels }
}

/// The signals the range rules read: communication and copy shares, and the primary range's coverage, idle,
/// sync and launch figures.
fn signals(
    ev: &Evidence,
    categories: &Categories,
    primary: Option<&RangeRow>,
    k: &KernelShares,
    notes: &mut Vec<String>,
) -> Signals {
    let kernel_time = k.kernel_time;
    let share_of = |c: &str| k.share_of(c);
    let mut s = Signals::default();
    if ev.kernels.is_some() && kernel_time > 0 {
        let (share, source, note) = devices::comm_share(ev, categories, share_of("communication"));
        s.comm_share = Some(share);
        s.comm_share_source = source;
        notes.extend(note);
    }
    let summed_copies = ev.memcpy_time_ns.map(|m| m as f64 / (m + kernel_time).max(1) as f64);
    match ev.memcpy_time_ns {
        // copies hidden under compute on the same device do not bound anything: the exposed copy time (measured
        // when the summed share reaches the threshold, the only case where it can change the class)
        Some(_) if summed_copies.is_some_and(|c| c >= MEMCPY_SHARE_MIN) && ev.exposure.is_some() => {
            let x = ev.exposure.as_ref().expect("checked");
            let (exposed, busy) = (x.sum(|d| d.exposed_copy_ns), x.sum(|d| d.busy_ns));
            s.memcpy_device_share = frac(exposed, busy);
            s.memcpy_device_share_source = Some(format!(
                "MEMCPY+MEMSET time not overlapped by KERNEL/GRAPH_TRACE on the same device / device busy union ({} of {} ns; copies {} ns, summed share {:.1}%)",
                exposed,
                busy,
                x.sum(|d| d.copy_ns),
                100.0 * summed_copies.unwrap_or(0.0)
            ));
        }
        Some(m) if m + kernel_time > 0 => {
            s.memcpy_device_share = Some(m as f64 / (m + kernel_time) as f64);
            s.memcpy_device_share_source = Some("MEMCPY+MEMSET rows / (KERNEL + MEMCPY + MEMSET time)".into());
        }
        _ if ev.kernels.is_some() && kernel_time > 0 => {
            s.memcpy_device_share = Some(share_of("memcpy"));
            s.memcpy_device_share_source = Some(MEMCPY_FROM_CATEGORY.into());
        }
        _ => {}
    }
    let graphs_used = ev.facts.cuda_graphs.value.as_str() == Some("graphs");
    if let Some(p) = primary {
        let w = p.host_wall_time_ns;
        let (sync_ns, mem_ns) = sync_split(p);
        // a range that launches CUDA graphs returns long before its replayed kernels run: its host-clipped
        // coverage measures the launch, so its coverage is the busy union of the device work correlated to it
        let launches_graphs = p.graph_traces > 0 || (graphs_used && p.kernels > p.runtime_calls);
        if launches_graphs {
            s.coverage_fraction = frac(p.kernel_busy_union_ns.min(w), w);
            s.coverage_source = Some(
                "kernel_busy_union_ns / host_wall_time_ns: the range launches CUDA graphs, whose replayed work runs after the launch returns (host-clipped coverage would measure the launch)".into(),
            );
        } else {
            s.coverage_fraction = frac(p.host_range_kernel_coverage_ns, w);
            s.coverage_source = Some("host_range_kernel_coverage_ns / host_wall_time_ns".into());
        }
        s.idle_in_span_fraction = frac(p.gpu_idle_within_kernel_span_ns, p.kernel_span_ns);
        s.outside_span_fraction = frac((w - p.kernel_span_ns.min(w)).max(0), w);
        s.sync_fraction = frac(sync_ns, w);
        s.host_ns_per_runtime_call = frac(w, p.runtime_calls);
        s.kernels_per_runtime_call = frac(p.kernels, p.runtime_calls);
        s.memcpy_api_fraction = frac(mem_ns, w);
    }
    s
}

/// Graph replays the capture cannot see (graph-level tracing in nsys 2023.4 writes no GPU row for them), and
/// graph-level tracing (`--cuda-graph-trace=graph`: every replay one opaque GRAPH_TRACE row, the kernel table
/// holding only the kernels launched outside graphs).
fn hidden_graphs(ev: &Evidence) -> HiddenGraphs {
    let invisible_graphs = ev.facts.graph_evidence.as_ref().filter(|g| g.graph_launch_calls > 0 && g.kernels_with_graph_node == 0 && g.graph_trace_rows == 0).map(|g| {
        format!(
            "{} CUDA graph launches left no GPU row (no node-level kernel, no GRAPH_TRACE row): the replayed work is invisible, so no device-side class can be established; capture again with --cuda-graph-trace=node",
            g.graph_launch_calls
        )
    });
    // graph-level tracing (--cuda-graph-trace=graph): every replay is one opaque GRAPH_TRACE row, the kernel
    // table holds only the kernels launched outside graphs
    let opaque_graphs = ev.facts.graph_evidence.as_ref().filter(|g| g.graph_trace_rows > 0 && g.kernels_with_graph_node == 0).map(|g| {
        format!(
            "graph-level tracing: the {} CUDA graph launches ran as {} opaque GRAPH_TRACE rows, so the kernel table holds only the {} kernels launched outside graphs; neither a class nor a kernel ranking of the workload can be established from them (the kernels listed are the eager ones only); capture again with --cuda-graph-trace=node",
            g.graph_launch_calls, g.graph_trace_rows, if g.kernels > 0 { g.kernels.to_string() } else { "eager".into() }
        )
    });
    HiddenGraphs { invisible: invisible_graphs, opaque: opaque_graphs }
}

/// The class, its rule and its reason: R0 when nothing can be attributed, the device rows' class when there is
/// no range ([`devices`]), else the range rules on the primary range ([`range_rule`]).
fn decide(
    ev: &Evidence,
    primary: Option<&RangeRow>,
    s: &Signals,
    device_rows: &[devices::DeviceEvidence],
    choice: &str,
    graphs: &HiddenGraphs,
    device_basis: bool,
) -> (&'static str, &'static str, String) {
    let (invisible_graphs, opaque_graphs) = (&graphs.invisible, &graphs.opaque);
    let graphs_hidden = invisible_graphs.as_ref().or(opaque_graphs.as_ref());
    match primary {
    // no range at all, but device rows: what they show alone (src/report/devices.rs)
    None if device_basis => match (&ev.picture, &ev.no_range) {
        (Some(rows), Some(nr)) => {
            let why = format!(
                "the capture holds no NVTX range{}",
                nr.cause.as_deref().map(|c| format!(", {c}")).unwrap_or_default()
            );
            devices::decide_picture(rows, &why, Some(nr))
        }
        (Some(rows), None) => devices::decide_picture(rows, &format!("no engine step ({})", choice), None),
        (None, Some(nr)) => devices::decide(device_rows, s, nr),
        (None, None) => (
            "mixed_or_unclear",
            "R0",
            format!("no engine step and no device picture to judge by ({choice})"),
        ),
    },
    None if ev.no_range.is_some() && graphs_hidden.is_some() => (
        "mixed_or_unclear",
        "R0",
        format!(
            "no phase can be attributed: the capture holds no NVTX range{}; and the device rows cannot stand in for one: {}",
            ev.no_range.as_ref().and_then(|n| n.cause.as_deref()).map(|c| format!(", {c}")).unwrap_or_default(),
            graphs_hidden.cloned().unwrap_or_default()
        ),
    ),
    None => ("mixed_or_unclear", "R0", "no NVTX range in the evidence: nothing to attribute device work to".into()),
    Some(_) if invisible_graphs.is_some() => {
        ("mixed_or_unclear", "R0", invisible_graphs.clone().unwrap_or_default())
    }
    Some(_) if opaque_graphs.is_some() => ("mixed_or_unclear", "R0", opaque_graphs.clone().unwrap_or_default()),
    Some(p) if p.kernel_busy_union_ns == 0 => (
        "mixed_or_unclear",
        "R0",
        format!("no device work is attributed to the primary range {:?} ({} occurrences)", p.label, p.occurrences),
    ),
        Some(p) => range_rule(p, s, device_rows),
    }
}

/// R1-R7 on the primary range `p`, first that holds.
fn range_rule(
    p: &RangeRow,
    s: &Signals,
    device_rows: &[devices::DeviceEvidence],
) -> (&'static str, &'static str, String) {
    let ge = |x: Option<f64>, t: f64| x.map(|v| v >= t).unwrap_or(false);
    let le = |x: Option<f64>, t: f64| x.map(|v| v <= t).unwrap_or(false);
    let lt = |x: Option<f64>, t: f64| x.map(|v| v < t).unwrap_or(false);
    if ge(s.comm_share, COMM_SHARE_MIN) {
        ("comm_bound", "R1", r1_reason(s, device_rows))
    } else if ge(s.memcpy_device_share, MEMCPY_SHARE_MIN) || ge(s.memcpy_api_fraction, MEMCPY_SHARE_MIN) {
        (
            "memcpy_bound",
            "R2",
            format!(
                "copies take {} of device time and blocking copy calls {} of the wall of {:?} (threshold {:.0}%)",
                pct(s.memcpy_device_share),
                pct(s.memcpy_api_fraction),
                p.label,
                MEMCPY_SHARE_MIN * 100.0
            ),
        )
    } else if ge(s.coverage_fraction, KERNEL_COVERAGE_MIN) && le(s.idle_in_span_fraction, KERNEL_IDLE_IN_SPAN_MAX) {
        (
            "kernel_bound",
            "R3",
            format!(
                "device work covers {} of the host wall of {:?} (≥ {:.0}%) and the GPU idles only {} of its span (≤ {:.0}%)",
                pct(s.coverage_fraction),
                p.label,
                KERNEL_COVERAGE_MIN * 100.0,
                pct(s.idle_in_span_fraction),
                KERNEL_IDLE_IN_SPAN_MAX * 100.0
            ),
        )
    } else if ge(s.sync_fraction, SYNC_FRACTION_MIN) {
        (
            "sync_bound",
            "R4",
            format!(
                "blocking synchronisation takes {} of the host wall of {:?} (≥ {:.0}%) while device work covers only {}",
                pct(s.sync_fraction),
                p.label,
                SYNC_FRACTION_MIN * 100.0,
                pct(s.coverage_fraction)
            ),
        )
    } else if lt(s.coverage_fraction, LOW_COVERAGE_MAX)
        && p.graph_traces == 0
        && ge(s.idle_in_span_fraction, LAUNCH_IDLE_IN_SPAN_MIN)
        && le(s.kernels_per_runtime_call, LAUNCH_KERNELS_PER_CALL_MAX)
        && lt(s.host_ns_per_runtime_call, LAUNCH_HOST_NS_PER_CALL_MAX)
    {
        (
            "cpu_launch_bound",
            "R5",
            format!(
                "device work covers {} of the host wall of {:?} (< {:.0}%), the GPU idles {} of its span (≥ {:.0}%), kernels are launched one by one ({:.2} per runtime call ≤ {LAUNCH_KERNELS_PER_CALL_MAX}) and quickly ({:.1} µs of host time per call < {:.0} µs): the GPU waits for launches",
                pct(s.coverage_fraction),
                p.label,
                LOW_COVERAGE_MAX * 100.0,
                pct(s.idle_in_span_fraction),
                LAUNCH_IDLE_IN_SPAN_MIN * 100.0,
                s.kernels_per_runtime_call.unwrap_or(0.0),
                s.host_ns_per_runtime_call.unwrap_or(0.0) / 1000.0,
                LAUNCH_HOST_NS_PER_CALL_MAX / 1000.0
            ),
        )
    } else if lt(s.coverage_fraction, LOW_COVERAGE_MAX)
        && (ge(s.host_ns_per_runtime_call, LAUNCH_HOST_NS_PER_CALL_MAX)
            || ge(s.outside_span_fraction, PYTHON_OUTSIDE_SPAN_MIN))
    {
        (
            "python_overhead_bound",
            "R6",
            format!(
                "device work covers {} of the host wall of {:?} (< {:.0}%) and the host spends {:.1} µs per runtime call (R6 needs ≥ {:.0} µs) or {} of the wall outside any device-work span (or ≥ {:.0}%; either suffices): host code between CUDA calls, not launching, holds the GPU back",
                pct(s.coverage_fraction),
                p.label,
                LOW_COVERAGE_MAX * 100.0,
                s.host_ns_per_runtime_call.unwrap_or(0.0) / 1000.0,
                LAUNCH_HOST_NS_PER_CALL_MAX / 1000.0,
                pct(s.outside_span_fraction),
                PYTHON_OUTSIDE_SPAN_MIN * 100.0
            ),
        )
    } else {
        (
            "mixed_or_unclear",
            "R7",
            format!(
                "no rule holds for {:?}: coverage {}, idle in span {}, outside span {}, sync {}, copies {}, communication {}",
                p.label,
                pct(s.coverage_fraction),
                pct(s.idle_in_span_fraction),
                pct(s.outside_span_fraction),
                pct(s.sync_fraction),
                pct(s.memcpy_device_share),
                pct(s.comm_share)
            ),
        )
    }
}

/// The evidence rows: primary, its direct children, then the others by wall (labels are looked up in a set: an
/// export can hold ~10⁵ distinct labels, e.g. one per torch op with its shapes, and a list scan per label made
/// `report` quadratic: 188 s on a 10.7 MB export); and the primary's direct children, longest first.
fn evidence_rows<'a>(
    ranges: &'a [RangeRow],
    primary: Option<&RangeRow>,
    notes: &mut Vec<String>,
) -> (Vec<EvidenceRow>, Vec<&'a RangeRow>) {
    let mut evidence = Vec::new();
    let mut children: Vec<&RangeRow> = Vec::new();
    if let Some(p) = primary {
        evidence.push(row(p, "primary"));
        children = ranges.iter().filter(|r| r.label != p.label && r.parents.contains_key(&p.label)).collect();
        children.sort_by(|a, b| b.host_wall_time_ns.cmp(&a.host_wall_time_ns).then_with(|| a.label.cmp(&b.label)));
        if children.len() > OTHER_ROWS_MAX {
            notes.push(format!(
                "{} further direct children of {:?} are not listed as evidence rows (only the {OTHER_ROWS_MAX} longest; primary_split counts them all)",
                children.len() - OTHER_ROWS_MAX,
                p.label
            ));
        }
        evidence.extend(children.iter().take(OTHER_ROWS_MAX).map(|r| row(r, "child")));
    }
    let listed: std::collections::HashSet<&str> =
        primary.iter().map(|p| p.label.as_str()).chain(children.iter().map(|r| r.label.as_str())).collect();
    let mut others: Vec<&RangeRow> = ranges.iter().filter(|r| !listed.contains(r.label.as_str())).collect();
    others.sort_by(|a, b| b.host_wall_time_ns.cmp(&a.host_wall_time_ns).then_with(|| a.label.cmp(&b.label)));
    if others.len() > OTHER_ROWS_MAX {
        notes.push(format!(
            "{} further labels are not listed (only the {OTHER_ROWS_MAX} longest)",
            others.len() - OTHER_ROWS_MAX
        ));
    }
    evidence.extend(others.into_iter().take(OTHER_ROWS_MAX).map(|r| row(r, "other")));
    (evidence, children)
}

/// What is not attributed: kernels outside every kept range, unmapped threads, the primary's uncovered host
/// time, uncategorised and unlisted kernel time, a gate RETRY; notes on the kernel list and the ranges.
fn unattributed(ev: &Evidence, primary: Option<&RangeRow>, k: &KernelShares, notes: &mut Vec<String>) -> Unattributed {
    let (cats, kernel_time) = (&k.cats, k.kernel_time);
    let share_of = |c: &str| k.share_of(c);
    let mut u = Unattributed::default();
    if let Some(rv) = &ev.ranges {
        let t = &rv.totals;
        u.kernels_total = Some(t.kernels_total);
        u.kernels_unattributed = Some(t.kernels_unattributed);
        u.kernel_work_unattributed_ns = Some(t.kernel_work_unattributed_ns);
        u.kernel_work_unattributed_fraction = frac(t.kernel_work_unattributed_ns, t.kernel_work_total_ns);
        u.statements.push(format!(
            "{} of {} kernels ({}, {} of kernel work) are not attributed to any kept range",
            t.kernels_unattributed,
            t.kernels_total,
            dur(t.kernel_work_unattributed_ns),
            pct(u.kernel_work_unattributed_fraction)
        ));
        for th in &rv.thread_diagnostics {
            match th.mapping.as_str() {
                "unmapped" => u.unmapped_threads.push(th.global_tid),
                "device_namespace_fallback" => u.fallback_threads.push(th.global_tid),
                _ => {}
            }
        }
        if !u.unmapped_threads.is_empty() {
            u.statements.push(format!(
                "{} thread(s) could not be mapped to a process; their device work is not attributed: {:?}",
                u.unmapped_threads.len(),
                u.unmapped_threads
            ));
        }
        if !u.fallback_threads.is_empty() {
            u.statements.push(format!(
                "{} thread(s) were mapped only through the device-namespace fallback (absent from PROCESSES): {:?}",
                u.fallback_threads.len(),
                u.fallback_threads
            ));
        }
    } else {
        u.statements.push("no ranges document: which kernels are attributed to ranges is unknown".into());
    }
    if let Some(p) = primary {
        u.primary_uncovered_host_time_ns = Some(p.uncovered_host_time_ns);
        u.statements.push(format!(
            "{} of the host time of {:?} is not covered by device work (host time, not GPU idle)",
            dur(p.uncovered_host_time_ns),
            p.label
        ));
    }
    u.uncategorized_kernel_time_ns =
        cats.iter().filter(|c| c.category == crate::categories::OTHER).map(|c| c.total_time_ns).sum();
    if u.uncategorized_kernel_time_ns > 0 {
        u.statements.push(format!(
            "{} of kernel time ({}) matches no category rule (category other)",
            dur(u.uncategorized_kernel_time_ns),
            pct(Some(share_of(crate::categories::OTHER)))
        ));
    }
    if let Some(g) = ev.gates.as_ref().filter(|g| g.rejected()) {
        u.statements.push(format!(
            "gate-check said RETRY for this capture ({}, {}): no class stands on evidence that failed its gates",
            g.source,
            g.reasons.join("; ")
        ));
    }
    if ev.kernels.is_none() {
        u.statements.push("no kernel statistics: top kernels and categories are unknown".into());
    } else if ev.kernels_source.as_deref() == Some("kernel_profile.top_kernels") && ev.kernel_totals.is_none() {
        notes.push("top kernels and category shares come from the bundle's kernel list and it records no totals: kernels it omits are not counted".into());
    }
    let not_listed: i64 = cats.iter().filter(|c| c.category == NOT_LISTED).map(|c| c.total_time_ns).sum();
    if not_listed > 0 {
        u.statements.push(format!(
            "{} of kernel time ({}) belongs to kernels the bundle's list omits (category not_listed): their names and categories are unknown",
            dur(not_listed),
            pct(frac(not_listed, kernel_time))
        ));
    }
    if let Some(rv) = &ev.ranges {
        notes.extend(rv.notes.iter().map(|n| format!("ranges: {n}")));
    }
    if ev.no_range.is_some() {
        u.statements.push(format!(
            "no NVTX range: no host phase can be attributed, only what the device rows show; {}",
            crate::export::nvtx::ANNOTATE
        ));
    }
    u
}

/// The capture header: when and on what it was taken, and the kernel table's size.
fn capture_header(ev: &Evidence, kernel_time: i64) -> CaptureHeader {
    let c = ev.capture.clone().unwrap_or_default();
    let fact_str = |f: &evidence::Fact| f.value.as_str().map(String::from);
    CaptureHeader {
        captured_at: c.captured_at.clone(),
        captured_at_from: c.captured_at_from.clone(),
        gpus: if !c.gpus.is_empty() {
            c.gpus.clone()
        } else {
            match &ev.facts.gpu.value {
                Value::Array(a) => a.iter().filter_map(|g| g.as_str().map(String::from)).collect(),
                Value::String(g) => vec![g.clone()],
                _ => Vec::new(),
            }
        },
        driver_version: c.driver_version.clone(),
        cuda_driver_version: c.cuda_driver_version.clone(),
        nsys_version: fact_str(&ev.facts.nsys_version),
        duration_ns: c.duration_ns,
        window: ev.facts.window.value.clone(),
        graph_trace_level: fact_str(&ev.facts.graph_trace_level),
        kernel_names: ev.kernel_totals.as_ref().and_then(|t| t.kernels).or(ev.kernels.as_ref().map(|k| k.len() as i64)),
        kernel_instances: ev
            .kernel_totals
            .as_ref()
            .and_then(|t| t.instances)
            .or(ev.kernels.as_ref().map(|k| k.iter().map(|x| x.instances).sum())),
        kernel_time_ns: ev.kernels.as_ref().map(|_| kernel_time),
    }
}

/// The primary range split into its direct children (the longest [`SPLIT_PARTS_MAX`] listed).
fn split_of(p: &RangeRow, children: &[&RangeRow]) -> PrimarySplit {
    let w = p.host_wall_time_ns;
    let part = |r: &RangeRow| SplitPart {
        label: r.label.clone(),
        host_wall_time_ns: r.host_wall_time_ns,
        share_of_primary: frac(r.host_wall_time_ns, w).unwrap_or(0.0),
        also_under_other_parents: r.parents.keys().any(|k| k != &p.label),
    };
    let all_children: i64 = children.iter().map(|c| c.host_wall_time_ns).sum();
    let listed: Vec<SplitPart> = children.iter().take(SPLIT_PARTS_MAX).map(|r| part(r)).collect();
    let more = children.len().saturating_sub(SPLIT_PARTS_MAX);
    let more_ns: i64 = children.iter().skip(SPLIT_PARTS_MAX).map(|c| c.host_wall_time_ns).sum();
    let rest = (w - all_children).max(0);
    PrimarySplit {
        label: p.label.clone(),
        host_wall_time_ns: w,
        children: listed,
        more_children: more,
        more_children_ns: more_ns,
        more_children_share: frac(more_ns, w).unwrap_or(0.0),
        not_in_any_child_ns: rest,
        not_in_any_child_share: frac(rest, w).unwrap_or(0.0),
    }
}
