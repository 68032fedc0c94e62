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
    after_help = "Example:\n  report fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --html /tmp/report.html --pretty"
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
    /// List at most N top kernels (0 = all)
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl ReportArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> crate::report::ReportOptions {
        crate::report::ReportOptions {
            input: self.input.clone(),
            provenance: self.provenance.clone(),
            categories: self.categories.clone(),
            label: self.label.clone(),
            html: self.html.clone(),
            top: self.top,
        }
    }
}
