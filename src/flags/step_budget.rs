//! `step-budget`: its flags, for the binary and the Nushell command (see docs/step-budget.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;
use crate::step_budget::DEFAULT_OUTLIER_FACTOR;

/// Partition the host wall of every step (one occurrence of the step label) exactly into gpu_kernel,
/// gpu_memcpy, sync_wait, launch_api, other_api, comm and unattributed; then distributions, outliers, pacing,
/// groups by shape (kernel count) and one verdict. See docs/step-budget.md.
#[derive(Debug, clap::Parser, Clone)]
#[command(
    name = "step-budget",
    version,
    after_help = "Examples:\n  step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite --compact \\\n    | jq '[.outlier_count, (.outliers | length)]'\n  step-budget fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --step vibeserve.engine.iteration --compact | jq .verdict\n  step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite --steps \\\n    | jq -s 'map(select(.outlier)) | length'"
)]
pub struct StepBudgetArgs {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "EXPORT")]
    pub export: String,
    /// The step label (default: the iteration label, chosen as capture-compare does: the most frequent label
    /// containing iteration, step or decode and not prefill)
    #[arg(long, value_name = "LABEL")]
    pub step: Option<String>,
    /// A step whose wall exceeds this many times the median step wall is an outlier
    #[arg(long, value_name = "K", default_value_t = DEFAULT_OUTLIER_FACTOR)]
    pub outlier_factor: f64,
    /// Keep id-bearing labels as they are (by default they are folded as sqlite-ranges does)
    #[arg(long)]
    pub no_fold: bool,
    /// Iteration records of the engine (JSON lines, docs/iterations.md): joined to the steps by time (clock
    /// offset measured); each joined step carries its batch geometry, groups by phase and batch size
    #[arg(long, value_name = "FILE")]
    pub iteration_records: Option<PathBuf>,
    /// Analyse only iterations START..=END: engine iteration indices with --iteration-records, else step
    /// indices (0-based, by start); a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    pub iterations: Option<String>,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Print the per-step rows instead of the summary: one JSON object per step and line (NDJSON), in index
    /// order, each with `outlier` and `warmup`; the exit code is the summary's (1 when its verdict is
    /// unreliable). In Nushell: a table
    #[arg(long)]
    pub steps: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl StepBudgetArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> crate::step_budget::StepBudgetOptions {
        crate::step_budget::StepBudgetOptions {
            step: self.step.clone(),
            outlier_factor: self.outlier_factor,
            fold: !self.no_fold,
        }
    }
}

impl StepBudgetArgs {
    /// `--iteration-records` and `--iterations` as the library's iteration window (a bad window is a usage
    /// error naming `--iterations`).
    pub fn iteration_args(&self) -> crate::contract::Result<crate::iterations::window::IterationArgs> {
        Ok(crate::iterations::window::IterationArgs {
            records: self.iteration_records.clone(),
            iterations: self.iterations.as_deref().map(crate::iterations::window::parse_iterations).transpose()?,
            ..Default::default()
        })
    }
}
