//! `capture-compare`: its flags, for the binary and the Nushell command (see docs/capture-compare.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;

/// Are captures comparable, and if so, what changed and is the trial faster (with statistics).
///
/// Two forms: `capture-compare A B` (one pair), or `capture-compare --baseline A1 A2 … --trial B1 B2 …`
/// (several captures per side, in any order). Inputs are evidence bundles (bundle-merge output), bare
/// nsyskit.ranges/v1 documents, raw nsys .sqlite exports, or stored baselines (nsyskit.baseline/v1). Every
/// invalidator of the serving-run manual is checked with both values shown; unknown facts are listed and make
/// the comparison UNVERIFIED (`--allow-unverified` accepts them, `--strict` refuses). Exit 0: comparable; 1:
/// refused (each invalidator listed), unverified, `--fail-on-regression` tripped, or `--save-baseline` over
/// captures that are not comparable; 2: bad usage or input.
#[derive(clap::Parser, Clone)]
#[command(
    name = "capture-compare",
    version,
    after_help = "Examples (from the repository root):\n  cd fixtures/nsys-2025.3.1\n  capture-compare gpu_full_node.sqlite gpu_full_graph.sqlite  # exit 1\n  capture-compare --tier decode decode_clean.sqlite \\\n    decode_mixed.sqlite  # exit 1\n  capture-compare gpu_full_node.sqlite \\\n    gpu_full_node.sqlite  # exit 1: UNVERIFIED, no provenance\n  capture-compare --baseline gpu_full_node.sqlite \\\n    --trial gpu_full_node.sqlite --allow-unverified \\\n    --fail-on-regression 5"
)]
pub struct CaptureCompareArgs {
    /// The baseline capture: bundle JSON, ranges JSON, nsys .sqlite export or stored baseline (`-` = stdin, for one of A/B)
    #[arg(value_name = "A", required_unless_present = "baseline")]
    pub a: Option<PathBuf>,
    /// The capture compared with A
    #[arg(value_name = "B", required_unless_present = "baseline")]
    pub b: Option<PathBuf>,
    /// Baseline captures (several: the A side of an A/B comparison)
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["a", "b"])]
    pub baseline: Vec<PathBuf>,
    /// Trial captures (the B side)
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["a", "b"])]
    pub trial: Vec<PathBuf>,
    /// Read baseline-side bundles as their stored baseline `baselines.NAME`
    #[arg(long, value_name = "NAME")]
    pub baseline_name: Option<String>,
    /// Give an nsyskit.baseline/v1 document of the --baseline captures instead of comparing (store it with bundle-merge)
    #[arg(long, value_name = "NAME")]
    pub save_baseline: Option<String>,
    /// A provenance document (nsyskit.provenance/v1) for A: adds version, flags, window, GPU facts
    #[arg(long, value_name = "FILE")]
    pub provenance_a: Option<PathBuf>,
    /// A provenance document for B
    #[arg(long, value_name = "FILE")]
    pub provenance_b: Option<PathBuf>,
    /// A fact unknown on a side makes the comparison not comparable
    #[arg(long)]
    pub strict: bool,
    /// Accept a comparison whose checks could not all be made (verdict COMPARABLE, exit 0, the unchecked facts
    /// listed); without it such a comparison is UNVERIFIED (exit 1), its A/B numbers still given
    #[arg(long, conflicts_with = "strict")]
    pub allow_unverified: bool,
    /// The gate-check tier used for raw exports: throughput or decode (bundles carry their own gate verdict)
    #[arg(long, default_value = "throughput", value_name = "TIER")]
    pub tier: String,
    /// A producer range both sides must contain (repeatable; default: every stable label seen on either side)
    #[arg(long, value_name = "LABEL")]
    pub expect_label: Vec<String>,
    /// Largest allowed difference of the attributed kernel-work shares (0–1)
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub max_attributed_share_diff: f64,
    /// The label whose verdict --fail-on-regression reads (default: the iteration label)
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// The metric of each label's verdict: host_wall, kernel_busy_union or gpu_idle_within_kernel_span
    #[arg(long, default_value = "host_wall", value_name = "METRIC")]
    pub metric: String,
    /// Fail (regression.failed; the binary exits 1) when the chosen label is slower than PCT percent with confidence
    #[arg(long, value_name = "PCT")]
    pub fail_on_regression: Option<f64>,
    /// Bootstrap resamples (≥ 100)
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub bootstrap: usize,
    /// Seed of the bootstrap (the same seed gives the same interval)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// Two-sided confidence level of the interval
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    pub confidence: f64,
    /// Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    /// List at most N kernel deltas (0 = all)
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl CaptureCompareArgs {
    /// The library's options for these flags (a bad `--tier` is a usage error naming it).
    pub fn options(&self) -> crate::contract::Result<crate::capture_compare::CompareOptions> {
        let tier = crate::gate_check::Tier::parse(&self.tier).map_err(|e| e.with_arg("--tier"))?;
        Ok(crate::capture_compare::CompareOptions {
            a: self.a.clone().unwrap_or_default(),
            b: self.b.clone().unwrap_or_default(),
            baseline: self.baseline.clone(),
            trial: self.trial.clone(),
            baseline_name: self.baseline_name.clone(),
            provenance_a: self.provenance_a.clone(),
            provenance_b: self.provenance_b.clone(),
            categories: self.categories.clone(),
            top: self.top,
            strict: self.strict,
            allow_unverified: self.allow_unverified,
            tier,
            expect_labels: self.expect_label.clone(),
            max_attributed_share_diff: self.max_attributed_share_diff,
            label: self.label.clone(),
            metric: self.metric.clone(),
            fail_on_regression: self.fail_on_regression,
            ab: crate::capture_compare::ab::AbSettings {
                resamples: self.bootstrap,
                seed: self.seed,
                confidence: self.confidence,
            },
        })
    }
}
