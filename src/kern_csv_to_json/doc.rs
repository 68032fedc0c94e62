//! The `nsyskit.stats/v1` document ([`KernCsvToJsonDoc`]) and the conversion options.

use super::*;

/// Default of `--top`.
pub const DEFAULT_TOP: usize = 20;

/// A converted `nsys stats` report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KernCsvToJsonDoc {
    pub schema: String,
    pub tool: Tool,
    /// Where the CSV came from: the path as given, or `<stdin>`.
    pub source: String,
    /// The file's modification time (RFC 3339, UTC, whole seconds): when `nsys stats` wrote it. Null for stdin.
    pub source_mtime_utc: Option<String>,
    /// When the capture was taken, as far as this tool knows: `--captured-at` when given, else
    /// `source_mtime_utc` (an upper bound: nsys stats ran after the capture). bundle-merge copies it to
    /// `kernel_profile.captured_at`.
    pub captured_at: Option<String>,
    /// Where `captured_at` came from: `--captured-at` or `csv-mtime` (null when unknown).
    pub captured_at_from: Option<String>,
    /// The canonical (current) nsys report name, e.g. `cuda_gpu_kern_sum`.
    pub report: String,
    /// The name the report was given under when that was an older alias (`gpukernsum`), else null.
    pub report_alias: Option<String>,
    /// How the report was recognised: `header`, `file-name`, `nsys-output` (the `Processing [...]` line) or
    /// `--report`.
    pub detected_from: String,
    /// `ok`, or `skipped` when nsys printed `SKIPPED: … does not contain …` (a capture problem: exit 1).
    pub status: String,
    /// nsys's SKIPPED line (without the `SKIPPED: ` prefix), when status is `skipped`.
    pub skipped_reason: Option<String>,
    /// The time unit of the CSV's time columns (`ns`, `us`, `ms`, `s`), null when it has none (or skipped).
    pub csv_time_unit: Option<String>,
    /// The CSV columns in order, with the JSON key and type each became.
    pub columns: Vec<Column>,
    /// One object per CSV row, keys as in `columns`, in CSV order.
    #[schemars(with = "Vec<std::collections::BTreeMap<String, Option<Cell>>>")]
    pub rows: Vec<Map<String, Value>>,
    /// Kernel reports (`cuda_gpu_kern_sum`) only: sums over every row.
    pub totals: Option<KernelTotals>,
    /// Kernel reports only: the `--top` kernels by total time (ties keep CSV order).
    pub top_kernels: Option<Vec<StatsTopKernel>>,
}

/// Only for the schema of `rows`: a cell is an integer, a float or a string (null when empty).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Column {
    /// The header text exactly as in the CSV.
    pub header: String,
    /// The key in `rows`.
    pub key: String,
    /// `time_ns` (integer ns), `percent` (float), `integer`, `float`, `megabytes` (float), `megabytes_per_s`
    /// (float) or `text`.
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelTotals {
    /// Rows in the report (distinct kernel names).
    pub kernels: u64,
    /// Sum of `Instances`.
    pub instances: u64,
    /// Sum of `Total Time`, ns.
    pub total_time_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "TopKernel")]
pub struct StatsTopKernel {
    /// 1-based rank by total time.
    pub rank: u64,
    pub name: String,
    pub total_time_ns: i64,
    pub instances: i64,
    pub avg_ns: i64,
    pub med_ns: i64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub stddev_ns: i64,
    /// nsys's own `Time (%)` column (rounded by nsys to 0.1).
    pub time_pct: f64,
    /// `total_time_ns / totals.total_time_ns` (0 when the total is 0), unrounded.
    pub share: f64,
}

impl Document for KernCsvToJsonDoc {
    const KIND: &'static str = "stats";
    const TOOL: &'static str = "kern-csv-to-json";
    fn exit_code(&self) -> i32 {
        if self.status == "skipped" {
            1
        } else {
            0
        }
    }
}

impl KernCsvToJsonDoc {
    /// Is this a kernel report (one that carries `totals` and `top_kernels`)?
    pub fn is_kernel_report(&self) -> bool {
        KERNEL_REPORTS.contains(&self.report.as_str())
    }
}

/// Options of a conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernCsvOptions {
    /// Force the report (current or older name); the header must still match it.
    pub report: Option<String>,
    /// How many kernels `top_kernels` keeps (0 = all).
    pub top: usize,
    /// The capture time to record (RFC 3339), instead of the CSV file's mtime.
    pub captured_at: Option<String>,
}

impl Default for KernCsvOptions {
    fn default() -> Self {
        KernCsvOptions { report: None, top: DEFAULT_TOP, captured_at: None }
    }
}
