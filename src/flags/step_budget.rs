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
    after_help = "Examples:\n  step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite --compact \\\n    | jq '.outliers | length'\n  step-budget fixtures/nsys-2025.3.1/serve_node.sqlite \\\n    --step vibeserve.engine.iteration --compact | jq .verdict"
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
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
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
