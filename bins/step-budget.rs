//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.

use std::path::PathBuf;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::iterations::window::{self, parse_iterations, IterationArgs, Windowed};
use nsyskit::step_budget::{self, StepBudgetOptions, DEFAULT_OUTLIER_FACTOR};

/// Partition the host wall of every step (one occurrence of the step label) exactly into gpu_kernel,
/// gpu_memcpy, sync_wait, launch_api, other_api, comm and unattributed; then distributions, outliers, pacing,
/// groups by shape (kernel count) and one verdict. See docs/step-budget.md.
#[derive(Debug, Parser)]
#[command(
    name = "step-budget",
    version,
    after_help = "Examples:\n  step-budget fixtures/nsys-2025.3.1/decode_mixed.sqlite --compact \\\n    | jq '.outliers | length'\n  step-budget fixtures/nsys-2025.3.1/serve_node.sqlite \\\n    --step vibeserve.engine.iteration --compact | jq .verdict"
)]
struct Args {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "EXPORT")]
    export: String,
    /// The step label (default: the iteration label, chosen as capture-compare does: the most frequent label
    /// containing iteration, step or decode and not prefill)
    #[arg(long, value_name = "LABEL")]
    step: Option<String>,
    /// A step whose wall exceeds this many times the median step wall is an outlier
    #[arg(long, value_name = "K", default_value_t = DEFAULT_OUTLIER_FACTOR)]
    outlier_factor: f64,
    /// Keep id-bearing labels as they are (by default they are folded as sqlite-ranges does)
    #[arg(long)]
    no_fold: bool,
    /// Iteration records of the engine (JSON lines, docs/iterations.md): joined to the steps by time (clock
    /// offset measured); each joined step carries its batch geometry, groups by phase and batch size
    #[arg(long, value_name = "FILE")]
    iteration_records: Option<PathBuf>,
    /// Analyse only iterations START..=END: engine iteration indices with --iteration-records, else step
    /// indices (0-based, by start); a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    iterations: Option<String>,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    nsys: Option<PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("step-budget", || {
        let a = Args::parse();
        let opts = StepBudgetOptions { step: a.step.clone(), outlier_factor: a.outlier_factor, fold: !a.no_fold };
        let it = match a.iterations.as_deref().map(parse_iterations).transpose() {
            Ok(w) => IterationArgs { records: a.iteration_records.clone(), iterations: w, ..Default::default() },
            Err(e) => return report_error("step-budget", &e),
        };
        if it.any() {
            let result = if a.export == "-" {
                nsyskit::export::StdinCopy::read().and_then(|copy| {
                    let mut w = copy.run(|p| window::step_budget_run(p, &opts, a.nsys.as_deref(), &it))?;
                    match &mut w {
                        Windowed::Doc(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                        Windowed::Retry(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                    }
                    Ok(w)
                })
            } else {
                window::step_budget_run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref(), &it)
            };
            return match result {
                Ok(Windowed::Retry(d)) => {
                    eprintln!("step-budget: RETRY: {}", d.reason);
                    emit("step-budget", Ok(*d), a.out.style())
                }
                Ok(Windowed::Doc(d)) => emit("step-budget", Ok(d), a.out.style()),
                Err(e) => report_error("step-budget", &e),
            };
        }
        let result = if a.export == "-" {
            nsyskit::export::StdinCopy::read().and_then(|copy| {
                let mut doc = copy.run(|p| step_budget::run(p, &opts, a.nsys.as_deref()))?;
                doc.source = nsyskit::export::STDIN_NAME.into();
                Ok(doc)
            })
        } else {
            step_budget::run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref())
        };
        emit("step-budget", result, a.out.style())
    })
}
