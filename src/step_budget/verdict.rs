//! The verdict: the dominant component of the typical step, or, with no step, the device picture of every GPU.

use super::*;

/// A capture without any NVTX range has no step to budget: the same message for its lazy export (no
/// `NVTX_EVENTS` table) and its `--lazy=false` export (an empty one), with the cause when the export says it.
/// Why no step can be attributed in a capture without NVTX ranges, and what to add.
pub(super) fn no_range_why(export: &Export) -> Result<String> {
    let cause = export.nvtx_recorded()?.no_range_cause().map(|c| format!(" ({c})")).unwrap_or_default();
    Ok(format!(
        "the capture holds no NVTX range{cause}, so no engine step and no phase can be attributed: the budget is the GPUs' own picture over the whole capture; {}",
        crate::export::nvtx::ANNOTATE
    ))
}

/// The step budget of a capture in which no step can be attributed (`why`): no step, the device picture of
/// every GPU over its whole active span, and the class it supports ([`picture`]).
pub(super) fn device_only(
    export: &Export,
    ropts: &RangesOptions,
    opts: &StepBudgetOptions,
    why: String,
) -> Result<StepBudgetDoc> {
    let (_, collected) = sqlite_ranges::analyze_with_intervals(export, ropts, &|_| false)?;
    let tl = device::build(export, &collected.rows)?;
    let (kernels, copies) = picture::export_kernel_stats(export)?;
    let exposure = picture::export_exposure(export, &collected.rows.device, &kernels, copies)?;
    Ok(device_only_of(export.name(), &tl, exposure.as_ref(), opts, vec![why]))
}

/// The note on the device rows whose `(globalPid, correlationId)` several runtime calls share (linked to no call,
/// no step), or None.
pub(super) fn ambiguous_join_note(tl: &device::Timelines) -> Option<String> {
    (tl.ambiguous_joins > 0).then(|| format!("device timelines: {} device rows have a (globalPid, correlationId) that more than one {} call shares: the join is ambiguous, so they are linked to no call and no step, never to several", tl.ambiguous_joins, crate::export::schema::RUNTIME))
}

/// [`device_only`] from device timelines already built (report's evidence): `notes` first say why no step.
pub fn device_only_of(
    source: String,
    tl: &device::Timelines,
    exposure: Option<&picture::Exposure>,
    opts: &StepBudgetOptions,
    mut notes: Vec<String>,
) -> StepBudgetDoc {
    let rows = picture::rows(tl, exposure);
    let picture = picture::decide(&rows);
    let idle: i64 = tl.devices.iter().map(|d| d.idle.idle_ns).sum();
    let verdict_rows: Vec<VerdictRow> = device::IDLE_NAMES
        .iter()
        .map(|n| {
            let ns: i64 = tl.devices.iter().map(|d| d.idle.categories.get(*n).map_or(0, |c| c.ns)).sum();
            VerdictRow { name: format!("idle_{n}"), value_ns: ns, share: (idle > 0).then(|| ns as f64 / idle as f64) }
        })
        .collect();
    notes.extend(picture.decided_by.iter().map(|f| format!("decided by: {f}")));
    let (ranks, stragglers) = device_ranks(tl);
    for r in ranks.iter().filter(|r| r.straggler_steps > 0) {
        let leads: Vec<i64> = stragglers.iter().filter(|x| x.rank == r.rank).map(|x| x.lead_ns).collect();
        notes.push(format!(
            "rank {} (pid {}) is the straggler of {} of {} matched collectives (the rank whose NCCL kernel waited least: the others waited for it; median lead {} ns, max {} ns)",
            r.rank,
            r.pid,
            leads.len(),
            stragglers.len(),
            dist(leads.iter().copied()).median,
            leads.iter().max().copied().unwrap_or(0)
        ));
    }
    if let Some(s) = crate::export::describe_skips(&tl.skips) {
        notes.push(format!("device timelines: rows skipped: {s}"));
    }
    if let Some(n) = ambiguous_join_note(tl) {
        notes.push(n);
    }
    let (schema, tool) = StepBudgetDoc::header();
    let mut doc = StepBudgetDoc {
        schema,
        tool,
        source,
        step_label: String::new(),
        step_label_choice: "none: no step can be attributed".into(),
        outlier_factor: opts.outlier_factor,
        graph_level: false,
        nccl_kernels: tl.nccl_kernels,
        nccl_by_name: tl.nccl_by_name.clone(),
        step_count: 0,
        steps: Vec::new(),
        distributions: distributions_of(std::iter::empty(), true),
        totals: totals_of(std::iter::empty()),
        outliers: Vec::new(),
        outlier_count: 0,
        warmup: Vec::new(),
        warmup_count: 0,
        set_apart: None,
        periodic_stall: None,
        pacing: None,
        groups: Vec::new(),
        group_count: 0,
        comm_labels: Vec::new(),
        waterfall: None,
        idle: tl.devices.iter().map(|d| d.idle.clone()).collect(),
        launch: tl.devices.iter().map(|d| d.launch.clone()).collect(),
        ranks,
        straggler_count: stragglers.len(),
        stragglers,
        verdict: BudgetVerdict {
            class: picture.class.into(),
            rule: picture.rule.into(),
            reason: picture.reason,
            steps_used: 0,
            rows: verdict_rows,
            would_be: None,
        },
        gates: None,
        notes,
        iterations: None,
        devices: rows,
        host_samples: None,
    };
    summarize(&mut doc);
    doc
}

/// Without steps, the ranks are the processes with device rows (one per GPU in a torchrun/tensor-parallel run),
/// in `globalPid` order; with two or more, the k-th NCCL kernel of every rank is one collective, and its
/// straggler the rank whose kernel waited least (rule `least_comm_collective`: the others' kernels began
/// earlier and waited for it; lead = longest − shortest of those kernels).
pub(super) fn device_ranks(tl: &device::Timelines) -> (Vec<RankBudget>, Vec<Straggler>) {
    let mut pids: Vec<i64> = tl.devices.iter().flat_map(|d| d.busy_by_pid.keys().copied()).collect();
    pids.sort_unstable();
    pids.dedup();
    let mut ranks: Vec<RankBudget> = pids
        .iter()
        .enumerate()
        .map(|(r, &pid)| {
            let mut devices: Vec<(i64, i64)> =
                tl.devices.iter().filter_map(|d| d.busy_by_pid.get(&pid).map(|&b| (d.device_id, b))).collect();
            devices.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let device_id = devices.first().map(|d| d.0);
            let (mut comm, mut exposed, mut compute) = (0, 0, 0);
            let (mut kl, mut gl) = (device::LatencyDist::default(), device::LatencyDist::default());
            if let Some(d) = tl.devices.iter().find(|d| Some(d.device_id) == device_id) {
                (comm, exposed) = d.comm_of(pid);
                compute = d.compute_busy();
                if let Some(l) = d.launch_by_pid.get(&pid) {
                    (kl, gl) = *l;
                }
            }
            let mut ds: Vec<i64> = devices.iter().map(|d| d.0).collect();
            ds.sort_unstable();
            RankBudget {
                rank: r,
                global_pid: pid,
                pid: crate::export::pid_of(pid),
                device_id,
                devices: ds,
                steps: 0,
                first_index: None,
                distributions: BTreeMap::new(),
                totals: totals_of(std::iter::empty()),
                comm_busy_ns: comm,
                exposed_comm_ns: exposed,
                compute_busy_ns: compute,
                straggler_steps: 0,
                pacing: None,
                kernel_launch: kl,
                graph_launch: gl,
            }
        })
        .collect();
    let mut stragglers = Vec::new();
    let lists: Vec<&[(i64, i64, i64)]> =
        pids.iter().map(|p| tl.nccl_rows.get(p).map_or(&[][..], |v| v.as_slice())).collect();
    if lists.len() >= 2 {
        let k_max = lists.iter().map(|v| v.len()).min().unwrap_or(0);
        for k in 0..k_max {
            let dur = |r: usize| lists[r][k].1 - lists[r][k].0;
            let r = (0..lists.len()).min_by_key(|&r| (dur(r), std::cmp::Reverse(lists[r][k].0), r)).unwrap_or(0);
            let longest = (0..lists.len()).map(dur).max().unwrap_or(0);
            ranks[r].straggler_steps += 1;
            stragglers.push(Straggler {
                occurrence: k,
                step_indexes: Vec::new(),
                rank: r,
                rule: "least_comm_collective".into(),
                lead_ns: longest - dur(r),
            });
        }
    }
    (ranks, stragglers)
}

pub(super) fn no_range_error(export: &Export) -> Result<Error> {
    let cause = export.nvtx_recorded()?.no_range_cause().map(|c| format!("; {c}")).unwrap_or_default();
    Ok(Error::input(format!(
        "{}: the capture holds no NVTX range, so there is no engine step to budget{cause}; {}; `report` gives the GPU-side evidence of a capture without ranges",
        export.name(),
        crate::export::nvtx::ANNOTATE
    ))
    .with_arg("--step"))
}

pub(super) fn verdict_of(
    totals: &BTreeMap<String, i64>,
    dists: &BTreeMap<String, Dist>,
    pacing: Option<&Pacing>,
    graph_level: bool,
    nccl: u64,
) -> BudgetVerdict {
    let wall = totals["wall"].max(1);
    let mut rows: Vec<VerdictRow> = Components::NAMES
        .iter()
        .map(|n| VerdictRow { name: n.to_string(), value_ns: totals[*n], share: Some(totals[*n] as f64 / wall as f64) })
        .collect();
    rows.sort_by(|a, b| b.value_ns.cmp(&a.value_ns).then(a.name.cmp(&b.name)));
    if graph_level {
        return BudgetVerdict {
            class: "mixed_or_unclear".into(),
            rule: "graph_level_capture".into(),
            reason: "graph-level capture: the graph replays are single GRAPH_TRACE rows, no node-level kernel rows; re-capture with --cuda-graph-trace=node".into(),
            steps_used: 0,
            rows,
            would_be: None,
        };
    }
    let period = pacing.map(|p| p.intervals.median).unwrap_or(0);
    let busy = dists["gpu_busy"].median;
    if period > 0 && busy as f64 >= GPU_SATURATED_SHARE * period as f64 {
        let mut r = vec![
            VerdictRow { name: "median_gpu_busy".into(), value_ns: busy, share: Some(busy as f64 / period as f64) },
            VerdictRow { name: "median_step_period".into(), value_ns: period, share: None },
        ];
        // what fills the busy GPU: compute, copies, or communication no compute hides (the largest of the
        // device components of the steps' wall)
        let (what, class) = [("gpu_kernel", "kernel_bound"), ("gpu_memcpy", "memcpy_bound"), ("comm", "comm_bound")]
            .into_iter()
            .max_by_key(|(n, _)| totals[*n])
            .unwrap_or(("gpu_kernel", "kernel_bound"));
        r.extend(rows);
        return BudgetVerdict {
            class: class.into(),
            rule: "gpu_saturated".into(),
            reason: format!("the median step's correlated GPU busy ({busy} ns) is ≥ {GPU_SATURATED_SHARE} of the median start-to-start period ({period} ns); the largest device component of the steps is {what} ({:.1}% of their wall)", totals[what] as f64 * 100.0 / wall as f64),
            steps_used: 0,
            rows: r,
            would_be: None,
        };
    }
    let top = &rows[0];
    let share = top.share.unwrap_or(0.0);
    if share >= DOMINANT_SHARE {
        let class = match top.name.as_str() {
            "gpu_kernel" => "kernel_bound",
            "gpu_memcpy" => "memcpy_bound",
            "sync_wait" => "sync_bound",
            "launch_api" | "other_api" => "cpu_launch_bound",
            "comm" => "comm_bound",
            _ => "python_overhead_bound",
        };
        let mut reason = format!(
            "{} is {:.1}% of the typical (non-outlier) steps' wall (≥ {:.0}%)",
            top.name,
            share * 100.0,
            DOMINANT_SHARE * 100.0
        );
        if nccl > 0 && top.name != "comm" {
            reason.push_str("; NCCL kernels exist: their exposed time is comm");
        }
        return BudgetVerdict {
            class: class.into(),
            rule: "dominant_component".into(),
            reason,
            steps_used: 0,
            rows,
            would_be: None,
        };
    }
    BudgetVerdict {
        class: "mixed_or_unclear".into(),
        rule: "no_dominant_component".into(),
        reason: format!(
            "no component reaches {:.0}% of the typical steps' wall (largest: {} at {:.1}%)",
            DOMINANT_SHARE * 100.0,
            top.name,
            share * 100.0
        ),
        steps_used: 0,
        rows,
        would_be: None,
    }
}
