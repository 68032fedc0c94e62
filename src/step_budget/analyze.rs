//! The step budget of a capture: the step label chosen, its occurrences, the device timelines, every step
//! swept, then the summaries and the verdict ([`analyze_window_with`]).

use super::*;

/// Analyse an open export.
pub fn analyze(export: &Export, opts: &StepBudgetOptions) -> Result<StepBudgetDoc> {
    analyze_window(export, opts, None)
}

/// [`analyze`] restricted to the steps lying inside `window` (ns on the export's clock, as sqlite-ranges'
/// `--window`); `--iterations` resolves to one (crate::iterations::window).
pub fn analyze_window(export: &Export, opts: &StepBudgetOptions, window: Option<(i64, i64)>) -> Result<StepBudgetDoc> {
    analyze_window_with(export, opts, window, None, None)
}

/// [`analyze_window`], reusing `pre`: the ranges analysis of the same export with the same options
/// (`fold`, `window`), the intervals of (at least) every occurrence of the step label and the rows read, as
/// [`sqlite_ranges::analyze_with_intervals`] returns them (report computes them once for the evidence and the step
/// budget). Used only when `opts.step` is given; `pre_built` are then the device timelines of `pre`'s rows, built
/// beside that analysis ([`device::build_beside`]: report's evidence), else they are built from `pre`'s rows.
pub fn analyze_window_with(
    export: &Export,
    opts: &StepBudgetOptions,
    window: Option<(i64, i64)>,
    pre: Option<(&sqlite_ranges::Analysis, &sqlite_ranges::Collected)>,
    pre_built: Option<device::PendingTimelines>,
) -> Result<StepBudgetDoc> {
    if !(opts.outlier_factor.is_finite() && opts.outlier_factor > 1.0) {
        return Err(Error::usage(format!(
            "--outlier-factor {}: expected a number greater than 1",
            opts.outlier_factor
        ))
        .with_arg("--outlier-factor"));
    }
    let ropts = RangesOptions { fold: opts.fold, window, ..Default::default() };
    let (label, choice, first_pass) = match choose_label(export, &ropts, opts)? {
        Chosen::Step(label, choice, pre) => (label, choice, pre),
        Chosen::NoStep(doc) => return Ok(*doc),
    };
    let mut ph = crate::phase::Phases::new("step-budget");
    let owned;
    // the device rows of an analysis run here go to the timelines, which drop them as their own rows are built
    let mut own_device = None;
    let (a, collected, pre_built) = match pre.filter(|_| opts.step.is_some()) {
        Some((a, c)) => (a, c, pre_built),
        None => {
            let (an, mut c) = second_pass(export, &ropts, &label, first_pass)?;
            ph.mark("second_pass");
            own_device = Some(std::mem::take(&mut c.rows.device));
            owned = (an, c);
            (&owned.0, &owned.1, None)
        }
    };
    let iv = &collected.intervals;
    let idx = step_occurrences(export, a, &label)?;
    // runtime API names of the steps' calls
    let ids: std::collections::HashSet<i64> =
        idx.iter().flat_map(|&i| iv[i].runtime.iter().filter_map(|r| r.name_id)).collect();
    let api = ApiIds::of(&export.strings_for(&ids)?);
    ph.mark("ranges+names");
    let mut tl = match pre_built {
        Some(p) => p.join()?,
        None => device::build_owned(export, &collected.rows, own_device)?,
    };
    ph.mark("device_timeline");
    let nccl_kernels = tl.nccl_kernels;
    // ranks: the processes of the steps' threads, in order of their first step
    let mut rank_pids: Vec<i64> = Vec::new();
    for &i in &idx {
        let p = crate::export::ns_of(a.occurrences.get(i).global_tid);
        if !rank_pids.contains(&p) {
            rank_pids.push(p);
        }
    }
    // a process that runs its collectives with NCCL only enqueues GPU work in them: not host communication
    let comm = CommRows { keys: &tl.nccl_keys, device_ids: &collected.device_ids };
    let HostComm { labels: comm_labels, occ: comm_occ, enqueue_labels } = host_comm(a, iv, &idx, &label, comm);
    let dev_pos: BTreeMap<i64, usize> = tl.devices.iter().enumerate().map(|(k, d)| (d.device_id, k)).collect();
    // the OS runtime waits of the steps' threads: a thread that blocks while its step's GPU work runs waits for
    // the GPU (sync_wait), as in a CUDA sync call (JAX's block_until_ready waits in futex)
    let step_tids: crate::fx::FxSet<i64> = idx.iter().map(|&i| a.occurrences.get(i).global_tid).collect();
    let waits = export.osrt_waits(&step_tids)?;
    let cx = StepCx {
        a,
        iv,
        idx: &idx,
        api: &api,
        tl: &tl,
        comm_occ: &comm_occ,
        rank_pids: &rank_pids,
        dev_pos: &dev_pos,
        comm,
        waits: &waits,
    };
    let (steps, step_spans) = cx.steps();
    let host_samples = samples::host_samples(export, &cx, &steps, &step_tids)?;
    let distributions = distributions_beside_spans(&steps, &mut tl.devices, &dev_pos, step_spans);
    // graph-level: the steps launch graphs (or own GRAPH_TRACE rows) and the export has no node-level row:
    // the replays are single GRAPH_TRACE rows (nsys 2024+) or invisible (nsys 2023.4 has no GRAPH_TRACE table)
    // (the timelines' valid node rows answer first: the export's count, which also counts invalid rows, is
    // read only when they hold none)
    let graph_level = steps.iter().any(|s| s.graph_traces > 0 || s.graph_launches > 0)
        && tl.node_rows == 0
        && export.graph_facts()?.node_rows == 0;
    let totals = totals_of(&steps);
    let median_wall = distributions["wall"].median;
    let slow = slow_steps(&steps, median_wall, opts.outlier_factor);
    let (warmup, outliers) = slow.split(&steps);
    let periodic_stall = periodic_stall_of(&steps, &outliers);
    // the typical steps leave out the warm-up too: the verdict reads the steady state
    let mut not_typical = outliers.clone();
    not_typical.extend(warmup.iter().cloned());
    let pacing = pacing_of(steps.iter());
    let groups = groups_of(&steps);
    let mut verdict =
        typical_verdict(&steps, &not_typical, &distributions, pacing.as_ref(), graph_level, nccl_kernels, &comm_labels);
    reject_on_opaque_step(&mut verdict, &a.occurrences, &label);
    if let Some(h) = &host_samples {
        samples::qualify(&mut verdict, h);
    }
    ph.mark("steps");
    let waterfall = waterfall_of(&steps, &not_typical, median_wall, &idx, a, iv, &api, comm, &comm_occ, &waits, &tl);
    let (ranks, stragglers) = ranks_of(&steps, &rank_pids, &tl);
    let notes =
        notes_of(&steps, enqueue_labels, &comm_labels, &comm_occ, nccl_kernels, &ranks, &stragglers, &tl, graph_level);
    let (schema, tool) = StepBudgetDoc::header();
    let mut doc = StepBudgetDoc {
        schema,
        tool,
        source: export.name(),
        step_label: label,
        step_label_choice: choice,
        outlier_factor: opts.outlier_factor,
        graph_level,
        nccl_kernels,
        nccl_by_name: tl.nccl_by_name.clone(),
        step_count: steps.len(),
        steps,
        distributions,
        totals,
        outlier_count: outliers.len(),
        outliers,
        warmup_count: warmup.len(),
        warmup,
        set_apart: None,
        periodic_stall,
        pacing,
        group_count: groups.len(),
        groups,
        comm_labels,
        waterfall,
        idle: tl.devices.iter().map(|d| d.idle.clone()).collect(),
        launch: tl.devices.iter().map(|d| d.launch.clone()).collect(),
        ranks,
        straggler_count: stragglers.len(),
        stragglers,
        verdict,
        gates: None,
        notes,
        iterations: None,
        devices: Vec::new(),
        host_samples,
    };
    summarize(&mut doc);
    crate::memory::drop_beside(tl);
    Ok(doc)
}

/// The steps' distributions, and beside them the idle inside, between and outside the steps on each device.
fn distributions_beside_spans(
    steps: &[Step],
    devices: &mut [device::DeviceTimeline],
    dev_pos: &BTreeMap<i64, usize>,
    step_spans: SpansByDevice,
) -> BTreeMap<String, Dist> {
    std::thread::scope(|s| {
        s.spawn(|| {
            for (d, spans) in step_spans {
                if let Some(&p) = dev_pos.get(&d) {
                    devices[p].set_step_spans(spans);
                }
            }
        });
        distributions_of(steps.iter(), true)
    })
}

/// The verdict on the typical step: the totals over the steps that are not outliers (all when every step is);
/// a `comm_bound` verdict says what comm is here.
pub(super) fn typical_verdict(
    steps: &[Step],
    not_typical: &[Outlier],
    distributions: &BTreeMap<String, Dist>,
    pacing: Option<&Pacing>,
    graph_level: bool,
    nccl_kernels: u64,
    comm_labels: &[String],
) -> BudgetVerdict {
    let typical: Vec<&Step> = steps.iter().filter(typical_step(not_typical)).collect();
    let typical: Vec<&Step> = if typical.is_empty() { steps.iter().collect() } else { typical };
    let vt = totals_of(typical.iter().copied());
    let mut verdict = verdict_of(&vt, distributions, pacing, graph_level, nccl_kernels);
    verdict.steps_used = typical.len();
    if verdict.class == "comm_bound" {
        let what = match (nccl_kernels > 0, comm_labels.is_empty()) {
            (true, true) => "exposed NCCL kernels".to_string(),
            (true, false) => format!("exposed NCCL kernels and host communication ranges ({})", comm_labels.join(", ")),
            _ => format!("host communication ranges ({})", comm_labels.join(", ")),
        };
        verdict.reason.push_str(&format!("; comm here is {what}"));
    }
    verdict
}

/// The analysis with the intervals of `label`'s occurrences. When the first pass is this analysis (same options),
/// only the label's intervals are computed, from the rows it kept (no table read again); else they are read.
fn second_pass(
    export: &Export,
    ropts: &RangesOptions,
    label: &str,
    first_pass: Option<Box<FirstPass>>,
) -> Result<(sqlite_ranges::Analysis, sqlite_ranges::Collected)> {
    let want = |l: &str| l == label;
    Ok(match first_pass {
        Some(fp) => {
            let FirstPass(mut a, pre) = *fp;
            // the budget reads the metrics of the steps alone: the others' go before the second pass
            a.occurrences.keep_metrics_where(|l, _| l == label);
            match sqlite_ranges::collect_preloaded(pre, ropts, &want) {
                Ok(c) => (a, c),
                Err(p) => sqlite_ranges::analyze_with_intervals_preloaded(export, ropts, &want, *p)?,
            }
        }
        None => sqlite_ranges::analyze_with_intervals(export, ropts, &want)?,
    })
}

/// The step label ([`crate::step_label`]), or the step budget of a capture in which no step can be attributed.
pub(super) enum Chosen {
    /// The label and how it was chosen (`--step`, or the rule's name); the first pass: its analysis, and its
    /// occurrences and rows for the second ([`sqlite_ranges::collect_preloaded`]).
    Step(String, String, Option<Box<FirstPass>>),
    NoStep(Box<StepBudgetDoc>),
}

/// The step label's first pass: the analysis that chose it, and what it kept for the second.
pub(super) struct FirstPass(sqlite_ranges::Analysis, sqlite_ranges::Preloaded);

/// `--step`, else the step label chosen from a first pass over the labels (the doc's label counts); with none,
/// the device picture of the whole capture ([`device_only`]).
pub(super) fn choose_label(export: &Export, ropts: &RangesOptions, opts: &StepBudgetOptions) -> Result<Chosen> {
    // pass 1 (labels only) when the step label is not given: the doc's label counts
    Ok(match &opts.step {
        Some(l) => Chosen::Step(l.clone(), "--step".to_string(), None),
        None => {
            let (a, pre) = sqlite_ranges::analyze_preloading(export, ropts)?;
            if a.doc.ranges.is_empty() {
                // the rows the first pass kept go before the device picture reads its own
                drop(pre);
                return Ok(Chosen::NoStep(Box::new(device_only(export, ropts, opts, no_range_why(export)?)?)));
            }
            let unstable = crate::step_label::unstable_labels(a.doc.ranges.iter().map(|r| r.label.as_str()));
            let periods = crate::step_label::period_facts(&a);
            let cands: Vec<crate::step_label::StepCandidate> = a
                .doc
                .ranges
                .iter()
                .map(|r| crate::step_label::StepCandidate {
                    period: Some(periods.get(&r.label).copied().unwrap_or_default()),
                    ..r.into()
                })
                .collect();
            match crate::step_label::choose_step(&cands, &unstable) {
                Some(c) => {
                    let (label, rule) = (c.label.to_string(), c.rule.name().to_string());
                    Chosen::Step(label, rule, Some(Box::new(FirstPass(a, pre))))
                }
                // no step of the user's (only a framework's own ranges, or nothing that behaves like a step): the
                // devices' own picture, as without NVTX, and the labels a user could pass as --step
                None => {
                    drop(pre);
                    let busy: i64 = a.doc.totals.per_device.iter().map(|d| d.busy_union_ns).sum();
                    let best = crate::step_label::best_candidates(&cands, busy, 5);
                    let what = if best.is_empty() {
                        format!(
                            "the capture's {} NVTX labels are all a framework's own ranges (e.g. {:?}: {})",
                            a.doc.ranges.len(),
                            a.doc.ranges[0].label,
                            crate::framework::framework_of(&a.doc.ranges[0].label).unwrap_or("a framework")
                        )
                    } else {
                        format!(
                            "none of the capture's {} NVTX labels is a step (iteration-like, PyTorch's ProfilerStep#N, or repeating at a regular period at the top level of a CUDA-calling thread with device work); the best candidates for --step: {}",
                            a.doc.ranges.len(),
                            best.join("; ")
                        )
                    };
                    let why = format!(
                        "{what}: no step and no phase of the workload can be attributed, so the budget is the GPUs' own picture over the whole capture; name the engine step with --step LABEL, or {}",
                        crate::export::nvtx::ANNOTATE
                    );
                    Chosen::NoStep(Box::new(device_only(export, ropts, opts, why)?))
                }
            }
        }
    })
}

/// The occurrences (indices into `a.occurrences`) of the step label, by (start, end, thread); an error when the
/// capture has no range or the label no occurrence.
pub(super) fn step_occurrences(export: &Export, a: &sqlite_ranges::Analysis, label: &str) -> Result<Vec<usize>> {
    let mut idx: Vec<usize> = a.occurrences.indices_of(label).collect();
    if a.doc.ranges.is_empty() {
        return Err(no_range_error(export)?);
    }
    if idx.is_empty() {
        let known: Vec<&str> = a.doc.ranges.iter().take(8).map(|r| r.label.as_str()).collect();
        return Err(Error::input(format!(
            "{}: no occurrence of the step label {label:?} (labels: {})",
            export.name(),
            known.join(", ")
        ))
        .with_arg("--step"));
    }
    idx.sort_by_key(|&i| {
        let o = a.occurrences.get(i);
        (o.start, o.end, o.global_tid)
    });
    Ok(idx)
}

/// Host communication: the ranges of a communication label ([`COMM_LABEL_PATTERNS`]) on the steps' threads, by
/// thread and sorted; the labels; and those of processes that run NCCL (they only enqueue, not host communication).
pub(super) struct HostComm<'a> {
    pub(super) labels: Vec<String>,
    pub(super) occ: HashMap<i64, Vec<(i64, i64)>>,
    pub(super) enqueue_labels: std::collections::BTreeSet<&'a str>,
}

pub(super) fn host_comm<'a>(
    a: &'a sqlite_ranges::Analysis,
    iv: &sqlite_ranges::IntervalTable,
    idx: &[usize],
    label: &str,
    comm: CommRows,
) -> HostComm<'a> {
    // host communication: the ranges of a communication label (COMM_LABEL_PATTERNS) on the steps' threads
    let comm_labels: Vec<String> = a
        .doc
        .ranges
        .iter()
        .map(|r| r.label.clone())
        .filter(|l| *l != label && is_comm_label(l))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    // a process that runs its collectives with NCCL only enqueues GPU work in them: not host communication
    let nccl_procs = nccl_processes(a, iv, idx, comm);
    let mut comm_occ: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    let mut enqueue_labels: std::collections::BTreeSet<&str> = Default::default();
    for o in a.occurrences.iter().filter(|o| comm_labels.iter().any(|l| **l == *o.label)) {
        if nccl_procs.contains(&crate::export::ns_of(o.global_tid)) {
            enqueue_labels.insert(o.label);
            continue;
        }
        comm_occ.entry(o.global_tid).or_default().push((o.start, o.end));
    }
    for v in comm_occ.values_mut() {
        v.sort_unstable();
    }
    HostComm { labels: comm_labels, occ: comm_occ, enqueue_labels }
}

/// The steps grouped by kernel count, most steps first.
pub(super) fn groups_of(steps: &[Step]) -> Vec<Group> {
    let mut by_shape: BTreeMap<u64, Vec<&Step>> = BTreeMap::new();
    for s in steps {
        by_shape.entry(s.kernels).or_default().push(s);
    }
    let mut groups: Vec<Group> = by_shape
        .into_iter()
        .map(|(kernels, ss)| Group {
            kernels,
            steps: ss.len(),
            first_index: ss[0].index,
            distributions: distributions_of(ss.iter().copied(), false),
        })
        .collect();
    groups.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.kernels.cmp(&b.kernels)));
    groups
}

/// The notes of a step budget: what comm is here, NCCL key collisions, stragglers, graph rows, skipped rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn notes_of(
    steps: &[Step],
    enqueue_labels: std::collections::BTreeSet<&str>,
    comm_labels: &[String],
    comm_occ: &HashMap<i64, Vec<(i64, i64)>>,
    nccl_kernels: u64,
    ranks: &[RankBudget],
    stragglers: &[Straggler],
    tl: &device::Timelines,
    graph_level: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !enqueue_labels.is_empty() {
        notes.push(format!(
            "the communication ranges of processes that run NCCL ({}) are not host communication: an NCCL call only enqueues the collective, whose time is its NCCL kernels' (comm); their host time is API or host time",
            enqueue_labels.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if nccl_kernels == 0 && comm_occ.is_empty() {
        notes.push("no NCCL kernel in the capture: comm is 0".into());
    } else if nccl_kernels == 0 {
        notes.push(format!(
            "no NCCL kernel in the capture: comm is the host time in the communication ranges ({})",
            comm_labels.join(", ")
        ));
    } else {
        notes.push(format!("{nccl_kernels} NCCL kernels in the capture: their wall not covered by a compute kernel of the step is comm"));
    }
    if tl.ambiguous_keys > 0 {
        notes.push(format!(
            "{} kernel rows share (device, start, end) with an NCCL kernel row: counted as NCCL",
            tl.ambiguous_keys
        ));
    }
    if !stragglers.is_empty() {
        for r in ranks {
            let leads: Vec<i64> = stragglers.iter().filter(|x| x.rank == r.rank).map(|x| x.lead_ns).collect();
            if !leads.is_empty() {
                notes.push(format!(
                    "rank {} (pid {}) is the straggler of {} of {} matched steps (median lead {} ns, max {} ns)",
                    r.rank,
                    r.pid,
                    leads.len(),
                    stragglers.len(),
                    dist(leads.iter().copied()).median,
                    leads.iter().max().unwrap()
                ));
            }
        }
    }
    let graph_rows: usize = tl.devices.iter().map(|d| d.launch.graph_launch.count).sum();
    if steps.iter().any(|s| s.graph_launches > 0) && graph_rows == 0 {
        notes.push("no device row belongs to a graph launch (graph-level capture without GRAPH_TRACE rows, nsys 2023.4): idle[] and launch[] miss the graphs' GPU work and count its time as idle".into());
    }
    if let Some(s) = crate::export::describe_skips(&tl.skips) {
        notes.push(format!("device timelines: rows skipped: {s}"));
    }
    if let Some(n) = ambiguous_join_note(tl) {
        notes.push(n);
    }
    if graph_level {
        notes.push("graph-level capture (GRAPH_TRACE rows, no node-level kernels): re-capture with --cuda-graph-trace=node to see the kernels".into());
    }
    notes
}
