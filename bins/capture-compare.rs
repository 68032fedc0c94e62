use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, OutputArgs};

/// Is a pair of captures comparable, and if so, what changed (per range, per kernel, per category).
///
/// A and B are evidence bundles (bundle-merge output), bare nsyskit.ranges/v1 documents, or raw nsys SQLite
/// exports. Exit 0: comparable, deltas printed; 1: refused, each invalidator listed; 2: bad usage or input.
#[derive(Parser)]
#[command(
    name = "capture-compare",
    version,
    after_help = "Example (node- vs graph-level pair: refused, exit 1):\n  cd fixtures/nsys-2025.3.1 && \\\n    capture-compare gpu_full_node.sqlite gpu_full_graph.sqlite"
)]
struct Args {
    /// The baseline capture: bundle JSON, ranges JSON or nsys .sqlite export
    #[arg(value_name = "A")]
    a: std::path::PathBuf,
    /// The capture compared with A
    #[arg(value_name = "B")]
    b: std::path::PathBuf,
    /// A provenance document (nsyskit.provenance/v1) for A: adds version, flags, window, GPU facts
    #[arg(long, value_name = "FILE")]
    provenance_a: Option<std::path::PathBuf>,
    /// A provenance document for B
    #[arg(long, value_name = "FILE")]
    provenance_b: Option<std::path::PathBuf>,
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
        let opts = nsyskit::compare::CompareOptions {
            a: a.a,
            b: a.b,
            provenance_a: a.provenance_a,
            provenance_b: a.provenance_b,
            categories: a.categories,
            top: a.top,
        };
        emit("capture-compare", nsyskit::compare::run(&opts), a.out.style())
    })
}
