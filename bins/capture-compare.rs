use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};

use nsyskit::flags::capture_compare::CaptureCompareArgs as Args;

fn main() {
    main_with("capture-compare", || {
        let a = Args::parse();
        let tier = match nsyskit::gate::Tier::parse(&a.tier) {
            Ok(t) => t,
            Err(e) => {
                return emit::<nsyskit::compare::CompareDoc>(
                    "capture-compare",
                    Err(e.with_arg("--tier")),
                    a.out.style(),
                )
            }
        };
        let opts = nsyskit::compare::CompareOptions {
            a: a.a.unwrap_or_default(),
            b: a.b.unwrap_or_default(),
            baseline: a.baseline,
            trial: a.trial,
            baseline_name: a.baseline_name,
            provenance_a: a.provenance_a,
            provenance_b: a.provenance_b,
            categories: a.categories,
            top: a.top,
            strict: a.strict,
            tier,
            expect_labels: a.expect_label,
            max_attributed_share_diff: a.max_attributed_share_diff,
            label: a.label,
            metric: a.metric,
            fail_on_regression: a.fail_on_regression,
            ab: nsyskit::compare::ab::AbSettings { resamples: a.bootstrap, seed: a.seed, confidence: a.confidence },
        };
        match &a.save_baseline {
            Some(name) => emit("capture-compare", nsyskit::compare::baseline::save(&opts, name), a.out.style()),
            None => emit("capture-compare", nsyskit::compare::run(&opts), a.out.style()),
        }
    })
}
