//! `kern-csv-to-json`: its flags, for the binary and the Nushell command (see docs/kern-csv-to-json.md).

use crate::contract::cli::OutputArgs;
use crate::kern_csv_to_json::DEFAULT_TOP;

/// Convert one `nsys stats --format csv` report (a file, or `-` for stdin) into typed JSON: times become
/// integer nanoseconds whatever the CSV's time unit (rounded half away from zero), percentages floats, counts
/// integers, names byte-exact. Kernel reports (cuda_gpu_kern_sum, old name gpukernsum) add `totals` and
/// `top_kernels`. Exit 0 converted, 1 nsys SKIPPED the report (reason in the JSON), 2 bad input.
#[derive(clap::Parser, Clone)]
#[command(
    name = "kern-csv-to-json",
    version,
    after_help = "Examples:\n  kern-csv-to-json --top 5 --pretty \\\n    fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv\n  nsys stats --report cuda_gpu_kern_sum --format csv --output - \\\n    fixtures/nsys-2023.4.4/gpu_range_node.sqlite | kern-csv-to-json -\n  kern-csv-to-json \\\n    fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv \\\n    | bundle-merge bundle.json"
)]
pub struct KernCsvToJsonArgs {
    /// The CSV file written by `nsys stats --format csv`, or `-` for stdin (nsys's console output with its
    /// `Processing [...]` lines is accepted too)
    #[arg(default_value = "-")]
    pub input: String,
    /// Force the report (current or older nsys name, e.g. cuda_api_sum or cudaapisum); the header must match
    /// it. Default: recognised from the header, then nsys's `Processing` line or the file name
    #[arg(long, value_name = "NAME")]
    pub report: Option<String>,
    /// Kernel reports: how many kernels `top_kernels` keeps, by total time (0 = all)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP)]
    pub top: usize,
    /// The capture's time (RFC 3339, e.g. 2026-11-29T22:43:05Z) to record as `captured_at`; default: the CSV
    /// file's modification time (null for stdin)
    #[arg(long, value_name = "TIME")]
    pub captured_at: Option<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl KernCsvToJsonArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> crate::kern_csv_to_json::KernCsvOptions {
        crate::kern_csv_to_json::KernCsvOptions {
            report: self.report.clone(),
            top: self.top,
            captured_at: self.captured_at.clone(),
        }
    }
}
