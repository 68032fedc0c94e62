//! CUDA graph launches and the ranges inside `cudaProfilerStart`/`Stop` capture windows.

use super::*;

/// Graph launches among the runtime calls, and the note on what a host range around a replay measures.
pub(super) fn cuda_graphs(
    export: &Export,
    runtime: Option<&str>,
    prefix: Option<&str>,
    replay_range: bool,
) -> Result<CudaGraphs> {
    // graph launches: the one definition of the export layer
    let launches = if runtime.is_some() { export.runtime_graph_launches()?.map_or(0, |(_, n)| n) as u64 } else { 0 };
    let note = (launches > 0 || replay_range).then(|| {
        let replay = prefix.map(|p| format!("`{p}.graph.replay`")).unwrap_or_else(|| "a graph replay".into());
        format!(
            "CUDA graphs: {launches} graph launches. A host range around a replay ({replay}) measures the launch, not the GPU work: graph work is read from kernel rows (node-level tracing, --cuda-graph-trace=node, joined through the launch's correlationId; see sqlite-ranges)."
        )
    });
    Ok(CudaGraphs { graph_launches: launches, note, ranges_in_capture: None })
}

/// `g` with the ranges of `all` recorded inside a graph capture, their warning pushed on `notes`.
pub(super) fn with_ranges_in_capture(
    mut g: CudaGraphs,
    export: &Export,
    all: &[Occurrence],
    notes: &mut Vec<String>,
) -> Result<CudaGraphs> {
    g.ranges_in_capture = ranges_in_capture(export, all)?;
    if let Some(r) = &g.ranges_in_capture {
        notes.push(r.warning.clone());
    }
    Ok(g)
}

/// The ranges of `occ` recorded inside a CUDA graph capture on their own thread (seed B93: "ranges captured
/// inside a graph are not re-emitted per replay"); None when there is none.
pub(super) fn ranges_in_capture(export: &Export, occ: &[Occurrence]) -> Result<Option<RangesInCapture>> {
    let windows = export.stream_capture_windows()?;
    if windows.is_empty() {
        return Ok(None);
    }
    let mut by_label: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    let mut folder = crate::labels::Folder::new();
    let mut n = 0u64;
    for o in occ {
        let lo = windows.partition_point(|w| (w.0, w.2) < (o.global_tid, o.end));
        let inside = windows[lo..].iter().take_while(|w| w.0 == o.global_tid).any(|w| w.1 <= o.start && o.end <= w.2);
        if inside {
            n += 1;
            let e = by_label.entry(folder.add(&o.label, 1).to_string()).or_default();
            e.0 += 1;
            e.1 += o.end - o.start;
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let mut labels: Vec<LabelCount> = by_label
        .into_iter()
        .map(|(label, (occurrences, wall_ns))| LabelCount { label, occurrences, wall_ns })
        .collect();
    labels.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.label.cmp(&b.label)));
    let shown: Vec<String> = labels.iter().take(3).map(|l| format!("{} ×{}", l.label, l.occurrences)).collect();
    labels.truncate(10);
    let warning = format!(
        "{n} NVTX range(s) ({}{}) were recorded while their thread captured a CUDA graph (between a stream capture's begin and end calls, {} capture(s)): a range inside a captured graph is emitted once, when the graph is captured, and never when the graph replays, so these labels count the capture, not the replays' work; put step and phase ranges around the graph launch, outside the captured region",
        shown.join(", "),
        if labels.len() > 3 { ", …" } else { "" },
        windows.len()
    );
    Ok(Some(RangesInCapture { captures: windows.len() as u64, occurrences: n, labels, warning }))
}
