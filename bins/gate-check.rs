//! `gate-check CAPTURE`: PASS/RETRY capture gates (see docs/gate-check.md).

use std::path::PathBuf;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, OutputArgs};
use nsyskit::contract::{render, Error, Style};
use nsyskit::gate::{self, GateOptions, Thresholds, Tier};
use nsyskit::ranges::RangesOptions;
use nsyskit::readiness::ReadinessOptions;

/// Decide whether an nsys capture can be analysed: PASS, or RETRY with the gate, the number it measured and
/// the threshold. Exit 0 PASS, 1 RETRY, 2 unusable input.
#[derive(Parser, Debug)]
#[command(
    name = "gate-check",
    version,
    after_help = "Examples:\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --pretty\n  f=nsys-2023.4.4_gpu_full_node_FAILED-cbid468\n  gate-check fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite \\\n    --log fixtures/logs/$f.console.txt  # exit 1: RETRY G0, G4\n  gate-check fixtures/nsys-2025.3.1/decode_mixed.sqlite --tier decode # exit 1\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --readiness --range-prefix vibeserve\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --ranges /tmp/ranges.json  # + the sqlite-ranges document, same run"
)]
struct Args {
    /// The capture: an .nsys-rep (exported with nsys: NSYS_BIN, else nsys on PATH), an .sqlite export, a
    /// .qdstrm left instead of a report, or - for an .sqlite export on stdin
    capture: PathBuf,
    /// The SQLite export of an .nsys-rep CAPTURE (no re-export)
    #[arg(long, value_name = "S")]
    sqlite: Option<PathBuf>,
    /// The nsys console log of the capture (stdout+stderr of `nsys profile`), read by G0
    #[arg(long, value_name = "L")]
    log: Option<PathBuf>,
    /// An nsyskit.provenance/v1 JSON (from nsys-resolve); its capture flags are read by G1
    #[arg(long, value_name = "P")]
    provenance: Option<PathBuf>,
    /// The nsys that exports an .nsys-rep CAPTURE [default: resolved like nsys-resolve: NSYS_BIN, PATH,
    /// install folders]
    #[arg(long, value_name = "NSYS")]
    nsys: Option<PathBuf>,
    /// Which analysis the capture is for: throughput (G5) or decode (G6, G7)
    #[arg(long, default_value = "throughput", value_parser = ["throughput", "decode"])]
    tier: String,
    /// Decode tier: the NVTX label of one decode step [default: the most frequent iteration-like label]
    #[arg(long, value_name = "LABEL")]
    decode_range: Option<String>,
    /// G2: smallest acceptable .nsys-rep in bytes [default: 10000000 for throughput, 1000000 for decode]
    #[arg(long, value_name = "BYTES")]
    min_rep_bytes: Option<u64>,
    /// G4: largest share of the CUDA threads' NVTX events that may start after the last CUDA runtime row
    #[arg(long, default_value_t = 0.02, value_name = "SHARE")]
    max_nvtx_after_cuda_share: f64,
    /// G5: an empty GPU stretch is long when above this share of the GPU activity window …
    #[arg(long, default_value_t = 0.25, value_name = "SHARE")]
    max_gap_share: f64,
    /// … and at least this many milliseconds
    #[arg(long, default_value_t = 500.0, value_name = "MS")]
    min_gap_ms: f64,
    /// G6: smallest share of step-start intervals in the dominant bucket [median/2, 2·median]
    #[arg(long, default_value_t = 0.8, value_name = "SHARE")]
    min_dominant_gap_share: f64,
    /// G6: smallest share of steps with the most frequent kernel count
    #[arg(long, default_value_t = 0.8, value_name = "SHARE")]
    min_stable_kernel_share: f64,
    /// G7: a step is a duration outlier above this factor × the median step duration
    #[arg(long, default_value_t = 3.0, value_name = "FACTOR")]
    duration_outlier_factor: f64,
    /// G7: a step is a kernel-count outlier above this factor × the most frequent count (or below it ÷ factor)
    #[arg(long, default_value_t = 1.5, value_name = "FACTOR")]
    kernel_outlier_factor: f64,
    /// G7: largest share of steps unlike the dominant decode-step shape
    #[arg(long, default_value_t = 0.01, value_name = "SHARE")]
    max_contaminated_share: f64,
    /// G6: fewest decode steps the decode tier accepts
    #[arg(long, default_value_t = 20, value_name = "N")]
    min_decode_steps: usize,
    /// Append G8, NVTX readiness (as nvtx-readiness): the taxonomy under --range-prefix and the opaque share
    #[arg(long)]
    readiness: bool,
    /// G8: the range prefix P of the taxonomy [default: inferred from the *.engine.iteration labels]
    #[arg(long, value_name = "P", requires = "readiness")]
    range_prefix: Option<String>,
    /// G8: READY needs the opaque share of P.engine.iteration wall time below this
    #[arg(long, default_value_t = nsyskit::readiness::DEFAULT_MAX_OPAQUE_SHARE, value_name = "SHARE")]
    max_opaque_share: f64,
    /// Also write the sqlite-ranges document of the same export to this file, from the same run (read in
    /// parallel with the gates): the bytes `sqlite-ranges EXPORT > OUT.json` writes
    #[arg(long, value_name = "OUT.json")]
    ranges: Option<PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("gate-check", || {
        let a = Args::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let unfinished = [Some(&a.capture), a.sqlite.as_ref()]
            .into_iter()
            .flatten()
            .try_for_each(|p| nsyskit::serve_capture::refuse_unfinished(p));
        let opts = Tier::parse(&a.tier).map(|tier| GateOptions {
            capture: a.capture.clone(),
            sqlite: a.sqlite.clone(),
            log: a.log.clone(),
            provenance: a.provenance.clone(),
            tier,
            decode_range: a.decode_range.clone(),
            nsys: a.nsys.clone(),
            thresholds: Thresholds {
                min_rep_bytes: a.min_rep_bytes,
                max_nvtx_after_cuda_share: a.max_nvtx_after_cuda_share,
                max_gap_share: a.max_gap_share,
                min_gap_ms: a.min_gap_ms,
                min_dominant_gap_share: a.min_dominant_gap_share,
                min_stable_kernel_share: a.min_stable_kernel_share,
                duration_outlier_factor: a.duration_outlier_factor,
                kernel_outlier_factor: a.kernel_outlier_factor,
                max_contaminated_share: a.max_contaminated_share,
                min_decode_steps: a.min_decode_steps,
            },
            readiness: a.readiness.then(|| ReadinessOptions {
                range_prefix: a.range_prefix.clone(),
                max_opaque_share: a.max_opaque_share,
            }),
        });
        let also = gate::AlsoDocs {
            ranges: a.ranges.as_ref().map(|_| RangesOptions { fold: true, ..Default::default() }),
            readiness: None,
        };
        let result = unfinished.and(opts).and_then(|o| {
            if let Some(out) = &a.ranges {
                let inputs: Vec<&std::path::Path> =
                    [Some(&a.capture), a.sqlite.as_ref(), a.log.as_ref(), a.provenance.as_ref()]
                        .into_iter()
                        .flatten()
                        .map(|p| p.as_path())
                        .collect();
                nsyskit::contract::refuse_output_over_input(out, "--ranges", &inputs)?;
            }
            gate::run_shared(&o, &also)
        });
        let result = result.and_then(|shared| {
            if let (Some(out), Some(doc)) = (&a.ranges, &shared.ranges) {
                // what `sqlite-ranges EXPORT > OUT.json` writes (not a terminal: compact)
                std::fs::write(out, render(doc, Style::Compact)).map_err(|e| {
                    Error::env(format!("--ranges {}: cannot write: {e}", out.display())).with_arg("--ranges")
                })?;
            }
            Ok(shared.gate)
        });
        emit("gate-check", result, a.out.style())
    })
}
