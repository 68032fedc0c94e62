use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, OutputArgs};

/// Are captures comparable, and if so, what changed and is the trial faster (with statistics).
///
/// Two forms: `capture-compare A B` (one pair), or `capture-compare --baseline A1 A2 … --trial B1 B2 …`
/// (several captures per side, in any order). Inputs are evidence bundles (bundle-merge output), bare
/// nsyskit.ranges/v1 documents, raw nsys .sqlite exports, or stored baselines (nsyskit.baseline/v1). Every
/// invalidator of the serving-run manual is checked with both values shown; unknown facts are listed
/// (`--strict` refuses on them). Exit 0: comparable; 1: refused (each invalidator listed), or
/// `--fail-on-regression` tripped, or `--save-baseline` over captures that are not comparable; 2: bad usage or input.
#[derive(Parser)]
#[command(
    name = "capture-compare",
    version,
    after_help = "Examples (from the repository root):\n  cd fixtures/nsys-2025.3.1\n  capture-compare gpu_full_node.sqlite gpu_full_graph.sqlite  # exit 1\n  capture-compare --tier decode decode_clean.sqlite \\\n    decode_mixed.sqlite  # exit 1\n  capture-compare --baseline gpu_full_node.sqlite \\\n    --trial gpu_full_node.sqlite --fail-on-regression 5"
)]
struct Args {
    /// The baseline capture: bundle JSON, ranges JSON, nsys .sqlite export or stored baseline (`-` = stdin, for one of A/B)
    #[arg(value_name = "A", required_unless_present = "baseline")]
    a: Option<std::path::PathBuf>,
    /// The capture compared with A
    #[arg(value_name = "B", required_unless_present = "baseline")]
    b: Option<std::path::PathBuf>,
    /// Baseline captures (several: the A side of an A/B comparison)
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["a", "b"])]
    baseline: Vec<std::path::PathBuf>,
    /// Trial captures (the B side)
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["a", "b"])]
    trial: Vec<std::path::PathBuf>,
    /// Read baseline-side bundles as their stored baseline `baselines.NAME`
    #[arg(long, value_name = "NAME")]
    baseline_name: Option<String>,
    /// Print an nsyskit.baseline/v1 document of the --baseline captures instead of comparing (store it with bundle-merge)
    #[arg(long, value_name = "NAME")]
    save_baseline: Option<String>,
    /// A provenance document (nsyskit.provenance/v1) for A: adds version, flags, window, GPU facts
    #[arg(long, value_name = "FILE")]
    provenance_a: Option<std::path::PathBuf>,
    /// A provenance document for B
    #[arg(long, value_name = "FILE")]
    provenance_b: Option<std::path::PathBuf>,
    /// A fact unknown on a side makes the comparison not comparable
    #[arg(long)]
    strict: bool,
    /// The gate-check tier used for raw exports: throughput or decode (bundles carry their own gate verdict)
    #[arg(long, default_value = "throughput", value_name = "TIER")]
    tier: String,
    /// A producer range both sides must contain (repeatable; default: every stable label seen on either side)
    #[arg(long, value_name = "LABEL")]
    expect_label: Vec<String>,
    /// Largest allowed difference of the attributed kernel-work shares (0–1)
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    max_attributed_share_diff: f64,
    /// The label whose verdict --fail-on-regression reads (default: the iteration label)
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// The metric of each label's verdict: host_wall, kernel_busy_union or gpu_idle_within_kernel_span
    #[arg(long, default_value = "host_wall", value_name = "METRIC")]
    metric: String,
    /// Exit 1 when the chosen label is slower than PCT percent with confidence
    #[arg(long, value_name = "PCT")]
    fail_on_regression: Option<f64>,
    /// Bootstrap resamples (≥ 100)
    #[arg(long, default_value_t = 2000, value_name = "N")]
    bootstrap: usize,
    /// Seed of the bootstrap (the same seed gives the same interval)
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Two-sided confidence level of the interval
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    confidence: f64,
    /// Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)
    #[arg(long, value_name = "FILE")]
    categories: Option<std::path::PathBuf>,
    /// List at most N kernel deltas (0 = all)
    #[arg(long, default_value_t = 50, value_name = "N")]
    top: usize,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("capture-compare", || {
        let a = Args::parse();
        let tier = match nsyskit::gate::Tier::parse(&a.tier) {
            Ok(t) => t,
            Err(e) => {
                return emit::<nsyskit::compare::CompareDoc>(
                    "capture-compare",
                    Err(e.with_arg("--tier")),
                    a.out.style(),
                )
            }
        };
        let opts = nsyskit::compare::CompareOptions {
            a: a.a.unwrap_or_default(),
            b: a.b.unwrap_or_default(),
            baseline: a.baseline,
            trial: a.trial,
            baseline_name: a.baseline_name,
            provenance_a: a.provenance_a,
            provenance_b: a.provenance_b,
            categories: a.categories,
            top: a.top,
            strict: a.strict,
            tier,
            expect_labels: a.expect_label,
            max_attributed_share_diff: a.max_attributed_share_diff,
            label: a.label,
            metric: a.metric,
            fail_on_regression: a.fail_on_regression,
            ab: nsyskit::compare::ab::AbSettings { resamples: a.bootstrap, seed: a.seed, confidence: a.confidence },
        };
        match &a.save_baseline {
            Some(name) => emit("capture-compare", nsyskit::compare::baseline::save(&opts, name), a.out.style()),
            None => emit("capture-compare", nsyskit::compare::run(&opts), a.out.style()),
        }
    })
}
