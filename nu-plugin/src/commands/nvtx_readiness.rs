//! `nvtx-readiness`: can this trace name where the time went? → `nsyskit.readiness/v1`. RETRY is data.

use nsyskit::readiness::{self, ReadinessOptions, DEFAULT_MAX_OPAQUE_SHARE};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{category, doc_value, flag_f64, flag_path, flag_str, labeled, nu_nsys_bin, resolve_path};
use crate::NsyskitPlugin;

pub struct NvtxReadiness;

impl SimplePluginCommand for NvtxReadiness {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "nvtx-readiness"
    }

    fn description(&self) -> &str {
        "Check that a capture's NVTX ranges can attribute engine time to named phases: READY, or RETRY with what is missing."
    }

    fn extra_description(&self) -> &str {
        "The serving range taxonomy under a prefix P (P.engine.iteration, …): present/missing labels, the opaque \
         share of P.engine.iteration and its largest gaps, naming problems, blocking syncs outside any range \
         (docs/nvtx-readiness.md). A RETRY is a value (`verdict: RETRY`), never an error. An .nsys-rep is \
         exported with --nsys, else $env.NSYS_BIN, else nsys on PATH."
    }

    fn signature(&self) -> Signature {
        Signature::build(SimplePluginCommand::name(self))
            .required("capture", SyntaxShape::Filepath, "The export written by `nsys export --type sqlite` (or an .nsys-rep)")
            .named(
                "range-prefix",
                SyntaxShape::String,
                "The range prefix P of the taxonomy; a trailing dot is ignored (default: inferred from the *.engine.iteration label with the most occurrences)",
                None,
            )
            .named("max-opaque-share", SyntaxShape::Number, "READY needs the opaque share of iteration wall time below this (default 0.05)", None)
            .named("nsys", SyntaxShape::Filepath, "The nsys used to export an .nsys-rep (default: $env.NSYS_BIN, else nsys on PATH)", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["nvtx", "taxonomy", "instrumentation", "opaque", "ready"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![Example {
            example: "(nvtx-readiness fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve).verdict",
            description: "Whether the vibeserve taxonomy attributes the engine's time (real fixture)",
            result: Some(Value::test_string(EXAMPLE_VERDICT)),
        }]
    }

    fn run(
        &self,
        _plugin: &NsyskitPlugin,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        input: &Value,
    ) -> Result<Value, LabeledError> {
        let sig = self.signature();
        let capture = resolve_path(engine, &call.req::<String>(0)?)?;
        let nsys = match flag_path(engine, call, "nsys")? {
            Some(p) => Some(p),
            None => nu_nsys_bin(engine)?,
        };
        let opts = ReadinessOptions {
            range_prefix: flag_str(call, "range-prefix")?.map(|s| s.item),
            max_opaque_share: flag_f64(call, "max-opaque-share")?.unwrap_or(DEFAULT_MAX_OPAQUE_SHARE),
        };
        let doc =
            readiness::run(&capture, &opts, nsys.as_deref()).map_err(|e| labeled(e, call, &sig, Some(input.span())))?;
        doc_value(&doc, call.head)
    }
}

const EXAMPLE_VERDICT: &str = "READY";
