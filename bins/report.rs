use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::iterations::window;

/// Classify a capture's bottleneck: one primary class from a fixed vocabulary (cpu_launch_bound,
/// python_overhead_bound, sync_bound, memcpy_bound, comm_bound, kernel_bound, mixed_or_unclear), the evidence
/// rows that establish it, the provenance block, and what remains unattributed.
///
/// BUNDLE is an evidence bundle (bundle-merge output), a bare nsyskit.ranges/v1 document, or an nsys .sqlite
/// export. `--html OUT.html` also writes a self-contained page (no network, no script).
#[derive(Parser)]
#[command(
    name = "report",
    version,
    after_help = "Examples:\n  report fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --html /tmp/report.html --pretty\n  report fixtures/nsys-2025.3.1/decode_clean.sqlite \\\n    --trace /tmp/steps.trace.json --window 200:205 --compact"
)]
struct Args {
    /// Evidence bundle JSON, ranges JSON or nsys .sqlite export (`-` = stdin; a FIFO is read like stdin)
    #[arg(value_name = "BUNDLE")]
    input: std::path::PathBuf,
    /// Write a self-contained HTML page with the bars, top kernels and categories (never over an input)
    #[arg(long, value_name = "OUT.html")]
    html: Option<std::path::PathBuf>,
    /// Classify this range label instead of the automatic primary range
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// A provenance document (nsyskit.provenance/v1) to report (and use with an export)
    #[arg(long, value_name = "FILE")]
    provenance: Option<std::path::PathBuf>,
    /// Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)
    #[arg(long, value_name = "FILE")]
    categories: Option<std::path::PathBuf>,
    /// Iteration records of the engine (JSON lines, docs/iterations.md) for --iterations (default with a
    /// bundle: its iterations.source)
    #[arg(long, value_name = "FILE")]
    iteration_records: Option<std::path::PathBuf>,
    /// Classify only iterations START..=END: engine iteration indices with records, else occurrence indices of
    /// the step label (--label, else the iteration label); a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    iterations: Option<String>,
    /// List at most N top kernels (0 = all)
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,
    /// Write a Chrome/Perfetto trace-event file of a window of steps (an nsys export only; opens in ui.perfetto.dev)
    #[arg(long, value_name = "OUT.json")]
    trace: Option<std::path::PathBuf>,
    /// The steps of --trace: START:END in step indexes, END excluded (default: 5 steps around the median step)
    #[arg(long, value_name = "START:END")]
    window: Option<String>,
    /// At most N events in the --trace file (later events are dropped and the file says so)
    #[arg(long, default_value_t = nsyskit::report::trace::DEFAULT_MAX_EVENTS, value_name = "N")]
    trace_max_events: usize,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("report", || {
        let a = Args::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let unfinished = nsyskit::serve_capture::refuse_unfinished(&a.input);
        let opts = nsyskit::report::ReportOptions {
            input: a.input,
            provenance: a.provenance,
            categories: a.categories,
            label: a.label,
            html: a.html,
            top: a.top,
            trace: a.trace,
            window: None,
            trace_max_events: Some(a.trace_max_events),
        };
        let unfinished = unfinished.and_then(|_| match &a.window {
            Some(w) => nsyskit::report::trace::parse_window(w).map(Some),
            None => Ok(None),
        });
        let opts = match unfinished {
            Ok(window) => nsyskit::report::ReportOptions { window, ..opts },
            Err(e) => return report_error("report", &e),
        };
        let it = match a.iterations.as_deref().map(window::parse_iterations).transpose() {
            Ok(w) => window::IterationArgs { records: a.iteration_records, iterations: w, ..Default::default() },
            Err(e) => return report_error("report", &e),
        };
        if it.iterations.is_none() && it.records.is_some() {
            return report_error(
                "report",
                &nsyskit::contract::Error::usage("--iteration-records is for --iterations START:END")
                    .with_arg("--iteration-records"),
            );
        }
        let result = if it.any() {
            match window::report_run(&opts, &it) {
                Ok(window::Windowed::Retry(d)) => {
                    eprintln!("report: RETRY: {}", d.reason);
                    return emit("report", Ok(*d), a.out.style());
                }
                Ok(window::Windowed::Doc(d)) => Ok(d),
                Err(e) => Err(e),
            }
        } else {
            nsyskit::report::run(&opts)
        };
        if let Ok(doc) = &result {
            if let Some(t) = doc.trace.as_ref().filter(|t| t.truncated) {
                eprintln!(
                    "report: --trace {}: more than {} events in the window: the trace stops at {} ns ({} events dropped)",
                    t.path,
                    t.max_events,
                    t.truncated_at_ns.unwrap_or(0),
                    t.dropped_events
                );
            }
        }
        emit("report", result, a.out.style())
    })
}
