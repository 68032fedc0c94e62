//! `capture-compare`: are captures comparable, and is the trial faster → `nsyskit.compare/v1`
//! (or `nsyskit.baseline/v1` with `--save-baseline`).

use nsyskit::compare::{self, ab::AbSettings, CompareOptions};
use nu_plugin::{EngineInterface, EvaluatedCall, SimplePluginCommand};
use nu_protocol::{Example, LabeledError, Signature, SyntaxShape, Type, Value};

use crate::call::{
    category, doc_arg, doc_value, flag_f64, flag_list, flag_path, flag_str, flag_usize, labeled, resolve_path,
};
use crate::NsyskitPlugin;

pub struct CaptureCompare;

impl SimplePluginCommand for CaptureCompare {
    type Plugin = NsyskitPlugin;

    fn name(&self) -> &str {
        "capture-compare"
    }

    fn description(&self) -> &str {
        "Are captures comparable, and if so, what changed and is the trial faster (with statistics)."
    }

    fn extra_description(&self) -> &str {
        "Two forms: `capture-compare A B` (one pair; paths or records such as `(sqlite-ranges a.sqlite)`), or \
         `capture-compare --baseline [A1 A2] --trial [B1 B2]` (several captures per side). Every invalidator of \
         the serving-run manual is checked with both values shown; unknown facts are listed (--strict refuses on \
         them). A refusal, and a tripped --fail-on-regression, is data: `verdict` / `regression.failed` (the \
         binary exits 1). The A/B numbers per label are `ab.labels` (a table); docs/compare-report.md."
    }

    fn signature(&self) -> Signature {
        let doc = || SyntaxShape::OneOf(vec![SyntaxShape::Record(Vec::new().into()), SyntaxShape::Filepath]);
        let list =
            || SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::Filepath)), SyntaxShape::Filepath]);
        Signature::build(SimplePluginCommand::name(self))
            .optional("a", doc(), "The baseline capture: bundle JSON, ranges JSON, nsys .sqlite export or stored baseline (a path or a record)")
            .optional("b", doc(), "The capture compared with A (a path or a record)")
            .named("baseline", list(), "Baseline captures (several: the A side of an A/B comparison)", None)
            .named("trial", list(), "Trial captures (the B side)", None)
            .named("baseline-name", SyntaxShape::String, "Read baseline-side bundles as their stored baseline `baselines.NAME`", None)
            .named("save-baseline", SyntaxShape::String, "Return an nsyskit.baseline/v1 document of the --baseline captures instead of comparing (store it with bundle-merge)", None)
            .named("provenance-a", SyntaxShape::Filepath, "A provenance document (nsyskit.provenance/v1) for A: adds version, flags, window, GPU facts", None)
            .named("provenance-b", SyntaxShape::Filepath, "A provenance document for B", None)
            .switch("strict", "A fact unknown on a side makes the comparison not comparable", None)
            .named("tier", SyntaxShape::String, "The gate-check tier used for raw exports: throughput or decode (default throughput; bundles carry their own gate verdict)", None)
            .named(
                "expect-label",
                SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::String)), SyntaxShape::String]),
                "A producer range both sides must contain (a list, or repeat; default: every stable label seen on either side)",
                None,
            )
            .named("max-attributed-share-diff", SyntaxShape::Number, "Largest allowed difference of the attributed kernel-work shares (0–1; default 0.05)", None)
            .named("label", SyntaxShape::String, "The label whose verdict --fail-on-regression reads (default: the iteration label)", None)
            .named("metric", SyntaxShape::String, "The metric of each label's verdict: host_wall, kernel_busy_union or gpu_idle_within_kernel_span (default host_wall)", None)
            .named("fail-on-regression", SyntaxShape::Number, "Fail (regression.failed; exit 1 in the binary) when the chosen label is slower than PCT percent with confidence", None)
            .named("bootstrap", SyntaxShape::Int, "Bootstrap resamples (≥ 100; default 2000)", None)
            .named("seed", SyntaxShape::Int, "Seed of the bootstrap (default 1; the same seed gives the same interval)", None)
            .named("confidence", SyntaxShape::Number, "Two-sided confidence level of the interval (default 0.95)", None)
            .named("categories", SyntaxShape::Filepath, "Kernel category rules replacing the built-in ones (JSON or `category=regex` lines)", None)
            .named("top", SyntaxShape::Int, "List at most N kernel deltas (0 = all; default 50)", None)
            .input_output_types(vec![(Type::Nothing, Type::record())])
            .category(category())
    }

    fn search_terms(&self) -> Vec<&str> {
        vec!["diff", "delta", "comparable", "regression", "ab", "bootstrap", "baseline"]
    }

    fn examples(&self) -> Vec<Example<'_>> {
        vec![
            Example {
                example: "(capture-compare fixtures/nsys-2025.3.1/gpu_full_node.sqlite fixtures/nsys-2025.3.1/gpu_full_graph.sqlite).verdict",
                description: "A node-level and a graph-level capture are not comparable (real fixtures)",
                result: Some(Value::test_string("REFUSED")),
            },
            Example {
                example: "(capture-compare --baseline [fixtures/nsys-2025.3.1/gpu_full_node.sqlite] --trial [fixtures/nsys-2025.3.1/gpu_full_node.sqlite] --bootstrap 200 --label vibeserve.engine.iteration --fail-on-regression 5).regression.reason",
                description: "A/B per stable label (ab.labels is a table); the CI gate on the step label: a capture against itself does not regress",
                result: Some(Value::test_string("vibeserve.engine.iteration host_wall: +0.00% (interval from -1.82%): not slower than 5% with confidence")),
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
        let err = |e| labeled(e, call, &sig, Some(input.span()));
        let (a, _ta) = match call.positional.first() {
            Some(v) => {
                let (p, t) = doc_arg(engine, v, "a")?;
                (p, t)
            }
            None => (Default::default(), None),
        };
        let (b, _tb) = match call.positional.get(1) {
            Some(v) => {
                let (p, t) = doc_arg(engine, v, "b")?;
                (p, t)
            }
            None => (Default::default(), None),
        };
        let paths = |name: &str| -> Result<Vec<std::path::PathBuf>, LabeledError> {
            flag_list(call, name)?.iter().map(|p| resolve_path(engine, p).map_err(LabeledError::from)).collect()
        };
        let tier = match flag_str(call, "tier")? {
            Some(t) => nsyskit::gate::Tier::parse(&t.item).map_err(err)?,
            None => nsyskit::gate::Tier::default(),
        };
        let d = AbSettings::default();
        let opts = CompareOptions {
            a,
            b,
            baseline: paths("baseline")?,
            trial: paths("trial")?,
            baseline_name: flag_str(call, "baseline-name")?.map(|s| s.item),
            provenance_a: flag_path(engine, call, "provenance-a")?,
            provenance_b: flag_path(engine, call, "provenance-b")?,
            categories: flag_path(engine, call, "categories")?,
            top: flag_usize(call, "top")?.unwrap_or(50),
            strict: call.has_flag("strict")?,
            tier,
            expect_labels: flag_list(call, "expect-label")?,
            max_attributed_share_diff: flag_f64(call, "max-attributed-share-diff")?.unwrap_or(0.05),
            label: flag_str(call, "label")?.map(|s| s.item),
            metric: flag_str(call, "metric")?.map(|s| s.item).unwrap_or_else(|| "host_wall".into()),
            fail_on_regression: flag_f64(call, "fail-on-regression")?,
            ab: AbSettings {
                resamples: flag_usize(call, "bootstrap")?.unwrap_or(d.resamples),
                seed: flag_usize(call, "seed")?.map(|s| s as u64).unwrap_or(d.seed),
                confidence: flag_f64(call, "confidence")?.unwrap_or(d.confidence),
            },
        };
        match flag_str(call, "save-baseline")? {
            Some(name) => doc_value(&compare::baseline::save(&opts, &name.item).map_err(err)?, call.head),
            None => doc_value(&compare::run(&opts).map_err(err)?, call.head),
        }
    }
}
