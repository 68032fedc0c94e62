//! `gate-check CAPTURE`: its flags, for the binary and the Nushell command (see docs/gate-check.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;
use crate::contract::Result;
use crate::gate_check::{GateOptions, Thresholds, Tier};
use crate::nvtx_readiness::ReadinessOptions;

/// Decide whether an nsys capture can be analysed: PASS, or RETRY with the gate, the number it measured and
/// the threshold. Exit 0 PASS, 1 RETRY, 2 unusable input.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "gate-check",
    version,
    after_help = "Examples:\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --pretty\n  f=nsys-2023.4.4_gpu_full_node_FAILED-cbid468\n  gate-check fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite \\\n    --log fixtures/logs/$f.console.txt  # exit 1: RETRY G0, G4\n  gate-check fixtures/nsys-2025.3.1/decode_mixed.sqlite --tier decode # exit 1\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --readiness --range-prefix vibeserve\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --ranges /tmp/ranges.json  # + the sqlite-ranges document, same run\n  gate-check fixtures/nsys-2025.3.1/decode_clean.sqlite \\\n    --ranges /tmp/r.json --nvtx-readiness /tmp/d.json \\\n    --report /tmp/p.json  # the whole CI chain, one run"
)]
pub struct GateCheckArgs {
    /// The capture: an .nsys-rep (exported with nsys: NSYS_BIN, else nsys on PATH), an .sqlite export, a
    /// .qdstrm left instead of a report, or - for an .sqlite export on stdin
    pub capture: PathBuf,
    /// The SQLite export of an .nsys-rep CAPTURE (no re-export)
    #[arg(long, value_name = "S")]
    pub sqlite: Option<PathBuf>,
    /// The nsys console log of the capture (stdout+stderr of `nsys profile`), read by G0
    #[arg(long, value_name = "L")]
    pub log: Option<PathBuf>,
    /// An nsyskit.provenance/v1 JSON (from nsys-resolve); its capture flags are read by G1
    #[arg(long, value_name = "P")]
    pub provenance: Option<PathBuf>,
    /// The nsys that exports an .nsys-rep CAPTURE [default: resolved like nsys-resolve: NSYS_BIN, PATH,
    /// install folders]
    #[arg(long, value_name = "NSYS")]
    pub nsys: Option<PathBuf>,
    /// Which analysis the capture is for: throughput (G5) or decode (G6, G7)
    #[arg(long, default_value = "throughput", value_parser = ["throughput", "decode"])]
    pub tier: String,
    /// Decode tier: the NVTX label of one decode step [default: the most frequent iteration-like label]
    #[arg(long, value_name = "LABEL")]
    pub decode_range: Option<String>,
    #[command(flatten)]
    pub thresholds: Thresholds,
    /// Append G8, NVTX readiness (as nvtx-readiness): the taxonomy under --range-prefix and the opaque share
    #[arg(long)]
    pub readiness: bool,
    /// G8: the range prefix P of the taxonomy [default: inferred from the *.engine.iteration labels]
    #[arg(long, value_name = "P", requires = "readiness")]
    pub range_prefix: Option<String>,
    /// G8: READY needs the opaque share of P.engine.iteration wall time below this
    #[arg(long, default_value_t = crate::nvtx_readiness::DEFAULT_MAX_OPAQUE_SHARE, value_name = "SHARE")]
    pub max_opaque_share: f64,
    /// Also write the sqlite-ranges document of the same export to this file, from the same run (one pass over
    /// each table for both documents): the bytes `sqlite-ranges EXPORT > OUT.json` writes
    #[arg(long, value_name = "OUT.json")]
    pub ranges: Option<PathBuf>,
    /// Also write the nvtx-readiness document of the same export to this file, from the same run: the bytes
    /// `nvtx-readiness EXPORT > OUT.json` writes (with --range-prefix and --max-opaque-share when given)
    #[arg(long, value_name = "OUT.json")]
    pub nvtx_readiness: Option<PathBuf>,
    /// Also write the report document of the same export to this file, from the same run (its reads compute the
    /// gates' facts and the --ranges document): the bytes `report EXPORT > OUT.json` writes
    #[arg(long, value_name = "OUT.json")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl GateCheckArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> Result<GateOptions> {
        Ok(GateOptions {
            capture: self.capture.clone(),
            sqlite: self.sqlite.clone(),
            log: self.log.clone(),
            provenance: self.provenance.clone(),
            tier: Tier::parse(&self.tier)?,
            decode_range: self.decode_range.clone(),
            nsys: self.nsys.clone(),
            thresholds: self.thresholds.clone(),
            readiness: self.readiness.then(|| ReadinessOptions {
                range_prefix: self.range_prefix.clone(),
                max_opaque_share: self.max_opaque_share,
            }),
        })
    }
}
