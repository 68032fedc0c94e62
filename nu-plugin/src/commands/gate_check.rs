//! `gate-check`: PASS/RETRY capture gates → `nsyskit.gate/v1`. A RETRY verdict is data, not an error.

use nsyskit::gate::{self, GateOptions, Thresholds, Tier};
use nsyskit::readiness::{ReadinessOptions, DEFAULT_MAX_OPAQUE_SHARE};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{
    category, doc_value, flag_bytes, flag_f64, flag_path, flag_str, flag_usize, labeled, nu_nsys_bin, resolve_path,
};
use crate::NsyskitPlugin;

pub struct GateCheck;

impl SimplePluginCommand for GateCheck {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "gate-check"
    }

    fn description(&self) -> &str {
        "Decide whether an nsys capture can be analysed: PASS, or RETRY with the gate, the number it measured and the threshold."
    }

    fn extra_description(&self) -> &str {
        "Gates G0 profiler health, G1 node-level graph tracing, G2 report size, G3 kernel rows, G4 CUDA data covers \
         the window, G5 traffic (throughput tier), G6 decode regularity and G7 prefill contamination (decode tier); \
         see docs/gate-check.md. A RETRY is a value (`verdict: RETRY`, the gates' `verdict: retry`), never an \
         error: `gate-check x.sqlite | get gates | where verdict == retry`. Only unusable input is an error. \
         An .nsys-rep is exported with $env.NSYS_BIN, else nsys on PATH."
    }

    fn signature(&self) -> Signature {
        Signature::build(SimplePluginCommand::name(self))
            .required("capture", SyntaxShape::Filepath, "The capture: an .nsys-rep, an .sqlite export, or a .qdstrm left instead of a report")
            .named("sqlite", SyntaxShape::Filepath, "The SQLite export of an .nsys-rep CAPTURE (no re-export)", None)
            .named("log", SyntaxShape::Filepath, "The nsys console log of the capture (stdout+stderr of `nsys profile`), read by G0", None)
            .named("provenance", SyntaxShape::Filepath, "An nsyskit.provenance/v1 JSON (from nsys-resolve); its capture flags are read by G1", None)
            .named(
                "nsys",
                SyntaxShape::Filepath,
                "The nsys that exports an .nsys-rep CAPTURE (default: $env.NSYS_BIN, else resolved like nsys-resolve)",
                None,
            )
            .named("tier", SyntaxShape::String, "Which analysis the capture is for: throughput (G5, the default) or decode (G6, G7)", None)
            .named("decode-range", SyntaxShape::String, "Decode tier: the NVTX label of one decode step (default: the most frequent iteration-like label)", None)
            .named(
                "min-rep-bytes",
                SyntaxShape::OneOf(vec![SyntaxShape::Int, SyntaxShape::Filesize]),
                "G2: smallest acceptable .nsys-rep, bytes or a filesize (default: 10000000 for throughput, 1000000 for decode)",
                None,
            )
            .named("max-nvtx-after-cuda-share", SyntaxShape::Number, "G4: largest share of the CUDA threads' NVTX events that may start after the last CUDA runtime row (default 0.02)", None)
            .named("max-gap-share", SyntaxShape::Number, "G5: an empty GPU stretch is long when above this share of the GPU activity window (default 0.25) …", None)
            .named("min-gap-ms", SyntaxShape::Number, "… and at least this many milliseconds (default 500)", None)
            .named("min-dominant-gap-share", SyntaxShape::Number, "G6: smallest share of inter-step gaps in the dominant bucket [median/2, 2·median] (default 0.8)", None)
            .named("min-stable-kernel-share", SyntaxShape::Number, "G6: smallest share of steps with the most frequent kernel count (default 0.8)", None)
            .named("duration-outlier-factor", SyntaxShape::Number, "G7: a step is a duration outlier above this factor × the median step duration (default 3)", None)
            .named("kernel-outlier-factor", SyntaxShape::Number, "G7: a step is a kernel-count outlier above this factor × the most frequent count, or below it ÷ factor (default 1.5)", None)
            .named("max-contaminated-share", SyntaxShape::Number, "G7: largest share of steps unlike the dominant decode-step shape (default 0.01)", None)
            .named("min-decode-steps", SyntaxShape::Int, "G6: fewest decode steps the decode tier accepts (default 20)", None)
            .switch("readiness", "Append G8, NVTX readiness (as nvtx-readiness): the taxonomy under --range-prefix and the opaque share", None)
            .named("range-prefix", SyntaxShape::String, "G8: the range prefix P of the taxonomy (default: inferred from the *.engine.iteration labels)", None)
            .named("max-opaque-share", SyntaxShape::Number, "G8: READY needs the opaque share of P.engine.iteration wall time below this (default 0.05)", None)
            .named("ranges", SyntaxShape::Filepath, "Also write the sqlite-ranges document of the same export to this file, from the same run (read in parallel with the gates): the bytes `sqlite-ranges EXPORT > OUT.json` writes", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nsys", "capture", "verdict", "retry", "pass", "health"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite).verdict",
                description: "A node-level capture with kernels all along: PASS (real fixture)",
                result: Some(Value::test_string("PASS")),
            },
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_graph.sqlite).retry",
                description: "A graph-level capture: RETRY at G1 — a value, not an error",
                result: Some(Value::test_list(vec![Value::test_string("G1")])),
            },
            Example {
                example: "(gate-check fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite --log fixtures/logs/nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt).retry",
                description: "The silently truncated capture, with its console log: G0 sees the analyser failure, G4 where CUDA data stops",
                result: Some(Value::test_list(EXAMPLE_FAILED_RETRY.iter().map(|g| Value::test_string(*g)).collect())),
            },
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --readiness --range-prefix vibeserve).gates.8.id",
                description: "--readiness appends G8, the NVTX readiness of the vibeserve taxonomy",
                result: Some(Value::test_string("G8")),
            },
            Example {
                example: "(gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --ranges /tmp/nsyskit-example-ranges.json).verdict",
                description: "--ranges also writes the sqlite-ranges document of the same export, from the same run",
                result: Some(Value::test_string("PASS")),
            },
        ]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let sig = self.signature();
        let d = Thresholds::default();
        let thresholds = Thresholds {
            min_rep_bytes: flag_bytes(call, "min-rep-bytes")?,
            max_nvtx_after_cuda_share: flag_f64(call, "max-nvtx-after-cuda-share")?
                .unwrap_or(d.max_nvtx_after_cuda_share),
            max_gap_share: flag_f64(call, "max-gap-share")?.unwrap_or(d.max_gap_share),
            min_gap_ms: flag_f64(call, "min-gap-ms")?.unwrap_or(d.min_gap_ms),
            min_dominant_gap_share: flag_f64(call, "min-dominant-gap-share")?.unwrap_or(d.min_dominant_gap_share),
            min_stable_kernel_share: flag_f64(call, "min-stable-kernel-share")?.unwrap_or(d.min_stable_kernel_share),
            duration_outlier_factor: flag_f64(call, "duration-outlier-factor")?.unwrap_or(d.duration_outlier_factor),
            kernel_outlier_factor: flag_f64(call, "kernel-outlier-factor")?.unwrap_or(d.kernel_outlier_factor),
            max_contaminated_share: flag_f64(call, "max-contaminated-share")?.unwrap_or(d.max_contaminated_share),
            min_decode_steps: flag_usize(call, "min-decode-steps")?.unwrap_or(d.min_decode_steps),
        };
        let range_prefix = flag_str(call, "range-prefix")?;
        let readiness = if call.has_flag("readiness")? {
            Some(ReadinessOptions {
                range_prefix: range_prefix.map(|s| s.item),
                max_opaque_share: flag_f64(call, "max-opaque-share")?.unwrap_or(DEFAULT_MAX_OPAQUE_SHARE),
            })
        } else if let Some(p) = range_prefix {
            return Err(LabeledError::new("--range-prefix needs --readiness (it selects G8's taxonomy)")
                .with_code("nsyskit::usage")
                .with_label("only with --readiness", p.span));
        } else {
            None
        };
        let capture = resolve_path(engine, &call.req::<String>(0)?)?;
        let ranges_out = flag_path(engine, call, "ranges")?;
        let tier = flag_str(call, "tier")?.map(|t| t.item);
        let opts = GateOptions {
            capture,
            sqlite: flag_path(engine, call, "sqlite")?,
            log: flag_path(engine, call, "log")?,
            provenance: flag_path(engine, call, "provenance")?,
            tier: Tier::default(),
            decode_range: flag_str(call, "decode-range")?.map(|s| s.item),
            nsys: match flag_path(engine, call, "nsys")? {
                Some(p) => Some(p),
                None => nu_nsys_bin(engine)?,
            },
            thresholds,
            readiness,
        };
        let result =
            tier.as_deref()
                .map(Tier::parse)
                .transpose()
                .map(|t| GateOptions { tier: t.unwrap_or_default(), ..opts })
                .and_then(|o| {
                    let Some(out) = &ranges_out else { return gate::run(&o) };
                    let inputs: Vec<&std::path::Path> =
                        [Some(&o.capture), o.sqlite.as_ref(), o.log.as_ref(), o.provenance.as_ref()]
                            .into_iter()
                            .flatten()
                            .map(|p| p.as_path())
                            .collect();
                    nsyskit::contract::refuse_output_over_input(out, "--ranges", &inputs)?;
                    let also = gate::AlsoDocs {
                        ranges: Some(nsyskit::ranges::RangesOptions { fold: true, ..Default::default() }),
                        readiness: None,
                    };
                    let shared = gate::run_shared(&o, &also)?;
                    if let Some(doc) = &shared.ranges {
                        // what `sqlite-ranges EXPORT > OUT.json` writes (compact)
                        std::fs::write(out, nsyskit::contract::render(doc, nsyskit::contract::Style::Compact))
                            .map_err(|e| {
                                nsyskit::contract::Error::env(format!("--ranges {}: cannot write: {e}", out.display()))
                                    .with_arg("--ranges")
                            })?;
                    }
                    Ok(shared.gate)
                });
        let doc = result.map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}

const EXAMPLE_FAILED_RETRY: &[&str] = &["G0", "G4"];
