//! bundle-merge: merge nsyskit documents into an evidence bundle (a JSON object), losslessly and atomically.

use std::io::Write;

use clap::Parser;
use nsyskit::bundle::{read_docs, run, Mode};
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::contract::{render, Error, Input, Style};

use nsyskit::flags::bundle_merge::BundleMergeArgs as Args;

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
