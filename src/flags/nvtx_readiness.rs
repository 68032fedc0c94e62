//! `nvtx-readiness`: its flags, for the binary and the Nushell command (see docs/nvtx-readiness.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;
use crate::nvtx_readiness::DEFAULT_MAX_OPAQUE_SHARE;

/// Check that a capture's NVTX ranges can attribute engine time to named phases (the serving range taxonomy
/// under a prefix P): taxonomy present/missing, opaque share of P.engine.iteration and its largest gaps,
/// naming problems, blocking syncs outside any range. Exit 0 READY, 1 RETRY, 2 bad input.
#[derive(Debug, clap::Parser, Clone)]
#[command(
    name = "nvtx-readiness",
    version,
    after_help = "Examples:\n  nvtx-readiness fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --range-prefix vibeserve --pretty\n  nvtx-readiness fixtures/nsys-2025.3.1/decode_clean.sqlite --compact \\\n    | jq '.iterations'"
)]
pub struct NvtxReadinessArgs {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "CAPTURE")]
    pub capture: String,
    /// The range prefix P of the taxonomy (P.engine.iteration, …); a trailing dot is ignored
    /// [default: inferred from the *.engine.iteration label with the most occurrences]
    #[arg(long, value_name = "P")]
    pub range_prefix: Option<String>,
    /// READY needs the opaque share of iteration wall time below this
    #[arg(long, default_value_t = DEFAULT_MAX_OPAQUE_SHARE, value_name = "SHARE")]
    pub max_opaque_share: f64,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl NvtxReadinessArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> crate::nvtx_readiness::ReadinessOptions {
        crate::nvtx_readiness::ReadinessOptions {
            range_prefix: self.range_prefix.clone(),
            max_opaque_share: self.max_opaque_share,
        }
    }
}
