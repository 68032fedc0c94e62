//! `report`: its flags, for the binary and the Nushell command (see docs/report.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;

/// Classify a capture's bottleneck: one primary class from a fixed vocabulary (cpu_launch_bound,
/// python_overhead_bound, sync_bound, memcpy_bound, comm_bound, kernel_bound, mixed_or_unclear), the evidence
/// rows that establish it, the provenance block, and what remains unattributed.
///
/// BUNDLE is an evidence bundle (bundle-merge output), a bare nsyskit.ranges/v1 document, or an nsys .sqlite
/// export. `--html OUT.html` also writes a self-contained page (no network, no script).
#[derive(clap::Parser, Clone)]
#[command(
    name = "report",
    version,
    after_help = "Examples:\n  report fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --html /tmp/report.html --pretty\n  report fixtures/nsys-2025.3.1/decode_clean.sqlite \\\n    --trace /tmp/steps.trace.json --window 200:205 --compact"
)]
pub struct ReportArgs {
    /// Evidence bundle JSON, ranges JSON or nsys .sqlite export (`-` = stdin; a FIFO is read like stdin)
    #[arg(value_name = "BUNDLE")]
    pub input: PathBuf,
    /// Write a self-contained HTML page with the bars, top kernels and categories (never over an input)
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Classify this range label instead of the automatic primary range
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// A provenance document (nsyskit.provenance/v1) to report (and use with an export)
    #[arg(long, value_name = "FILE")]
    pub provenance: Option<PathBuf>,
    /// Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    /// Iteration records of the engine (JSON lines, docs/iterations.md) for --iterations (default with a
    /// bundle: its iterations.source)
    #[arg(long, value_name = "FILE")]
    pub iteration_records: Option<PathBuf>,
    /// Classify only iterations START..=END: engine iteration indices with records, else occurrence indices of
    /// the step label (--label, else the iteration label); a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    pub iterations: Option<String>,
    /// List at most N top kernels (0 = all)
    #[arg(long, default_value_t = crate::report::DEFAULT_TOP, value_name = "N")]
    pub top: usize,
    /// Write a Chrome/Perfetto trace-event file of a window of steps (an nsys export only; opens in ui.perfetto.dev)
    #[arg(long, value_name = "OUT.json")]
    pub trace: Option<PathBuf>,
    /// The steps of --trace: START:END in step indexes, END excluded (default: 5 steps around the median step)
    #[arg(long, value_name = "START:END")]
    pub window: Option<String>,
    /// At most N events in the --trace file (later events are dropped and the file says so)
    #[arg(long, default_value_t = crate::report::trace::DEFAULT_MAX_EVENTS, value_name = "N")]
    pub trace_max_events: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl ReportArgs {
    /// The library's options for these flags (a bad `--window` is a usage error).
    pub fn options(&self) -> crate::contract::Result<crate::report::ReportOptions> {
        let window = self.window.as_deref().map(crate::report::trace::parse_window).transpose()?;
        Ok(crate::report::ReportOptions {
            input: self.input.clone(),
            provenance: self.provenance.clone(),
            categories: self.categories.clone(),
            label: self.label.clone(),
            html: self.html.clone(),
            top: self.top,
            trace: self.trace.clone(),
            window,
            trace_max_events: Some(self.trace_max_events),
        })
    }

    /// `--iteration-records` and `--iterations` as the library's iteration window; records without a window
    /// are a usage error naming `--iteration-records`.
    pub fn iteration_args(&self) -> crate::contract::Result<crate::iterations::window::IterationArgs> {
        let it = crate::iterations::window::IterationArgs {
            records: self.iteration_records.clone(),
            iterations: self.iterations.as_deref().map(crate::iterations::window::parse_iterations).transpose()?,
            ..Default::default()
        };
        if it.iterations.is_none() && it.records.is_some() {
            return Err(crate::contract::Error::usage("--iteration-records is for --iterations START:END")
                .with_arg("--iteration-records"));
        }
        Ok(it)
    }
}
