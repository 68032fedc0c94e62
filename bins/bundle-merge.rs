//! bundle-merge: merge nsyskit documents into an evidence bundle (a JSON object), losslessly and atomically.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use nsyskit::bundle::{read_docs, run, Mode};
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::contract::{render, Error, Input, Style};

/// Merge nsyskit documents (files, or stdin when none is given: one, concatenated or NDJSON) into BUNDLE,
/// each at the place its `schema` kind owns (see docs/bundle-merge.md); every other byte of the bundle stays
/// as it was. Creates BUNDLE when absent; writes atomically under a lock on BUNDLE.lock. Prints a summary of
/// what went where. Exit 0 merged (a RETRY gate is recorded too), 1 with --check when the merge would change
/// the bundle, 2 bad bundle or bad document (the bundle is left byte-identical).
#[derive(Parser)]
#[command(
    name = "bundle-merge",
    version,
    after_help = "Examples:\n  kern-csv-to-json \\\n    fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv > k.json\n  bundle-merge bundle.json k.json\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    | bundle-merge bundle.json\n  bundle-merge --check bundle.json k.json  # exit 0: nothing would change"
)]
struct Args {
    /// The evidence bundle (a JSON object; created when absent)
    bundle: PathBuf,
    /// nsyskit documents to merge, in order (`-` = stdin; default: stdin)
    docs: Vec<String>,
    /// Write nothing; exit 1 when the merge would change the bundle
    #[arg(long, conflicts_with = "stdout")]
    check: bool,
    /// Write nothing; print the merged bundle on stdout (the summary goes to stderr)
    #[arg(long)]
    stdout: bool,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("bundle-merge", || {
        let a = Args::parse();
        let inputs: Vec<Input> =
            if a.docs.is_empty() { vec![Input::Stdin] } else { a.docs.iter().map(|d| Input::parse(d)).collect() };
        let mode = if a.check {
            Mode::Check
        } else if a.stdout {
            Mode::Stdout
        } else {
            Mode::Write
        };
        let doc_paths: Vec<&std::path::Path> = inputs.iter().filter_map(|i| i.path()).collect();
        let result = nsyskit::contract::refuse_output_over_input(&a.bundle, "BUNDLE", &doc_paths)
            .and_then(|_| read_docs(&inputs))
            .and_then(|docs| run(&a.bundle, &docs, mode));
        if let Ok(o) = &result {
            for t in &o.removed_temps {
                eprintln!("bundle-merge: removed {}, the temporary file of an interrupted earlier run", t.display());
            }
        }
        match (mode, result) {
            (Mode::Stdout, Ok(outcome)) => {
                eprint!("{}", render(&outcome.report, Style::Compact));
                let mut out = std::io::stdout().lock();
                match out.write_all(outcome.bundle_text.as_bytes()).and_then(|_| out.flush()) {
                    Ok(()) => 0,
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                    Err(e) => report_error("bundle-merge", &Error::env(format!("cannot write to stdout: {e}"))),
                }
            }
            (_, result) => emit("bundle-merge", result.map(|o| o.report), a.out.style()),
        }
    })
}
