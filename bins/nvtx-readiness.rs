//! `nvtx-readiness CAPTURE`: can this trace name where the time went? → `nsyskit.readiness/v1`.

use std::path::PathBuf;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, OutputArgs};
use nsyskit::readiness::{self, ReadinessOptions, DEFAULT_MAX_OPAQUE_SHARE};

/// Check that a capture's NVTX ranges can attribute engine time to named phases (the serving range taxonomy
/// under a prefix P): taxonomy present/missing, opaque share of P.engine.iteration and its largest gaps,
/// naming problems, blocking syncs outside any range. Exit 0 READY, 1 RETRY, 2 bad input.
#[derive(Debug, Parser)]
#[command(
    name = "nvtx-readiness",
    version,
    after_help = "Examples:\n  nvtx-readiness fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --range-prefix vibeserve --pretty\n  nvtx-readiness fixtures/nsys-2025.3.1/decode_clean.sqlite --compact \\\n    | jq '.iterations'"
)]
struct Args {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "CAPTURE")]
    capture: String,
    /// The range prefix P of the taxonomy (P.engine.iteration, …); a trailing dot is ignored
    /// [default: inferred from the *.engine.iteration label with the most occurrences]
    #[arg(long, value_name = "P")]
    range_prefix: Option<String>,
    /// READY needs the opaque share of iteration wall time below this
    #[arg(long, default_value_t = DEFAULT_MAX_OPAQUE_SHARE, value_name = "SHARE")]
    max_opaque_share: f64,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    nsys: Option<PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("nvtx-readiness", || {
        let a = Args::parse();
        let opts = ReadinessOptions { range_prefix: a.range_prefix.clone(), max_opaque_share: a.max_opaque_share };
        let result = if a.capture == "-" {
            (|| {
                let copy = nsyskit::export::StdinCopy::read()?;
                let mut doc = copy.run(|p| readiness::run(p, &opts, a.nsys.as_deref()))?;
                doc.source.path = nsyskit::export::STDIN_NAME.into();
                Ok(doc)
            })()
        } else {
            readiness::run(std::path::Path::new(&a.capture), &opts, a.nsys.as_deref())
        };
        emit("nvtx-readiness", result, a.out.style())
    })
}
