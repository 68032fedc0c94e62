//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::step_budget::{self};

use nsyskit::flags::step_budget::StepBudgetArgs as Args;

fn main() {
    main_with("step-budget", || {
        let a = Args::parse();
        let opts = a.options();
        let result = if a.export == "-" {
            nsyskit::export::StdinCopy::read().and_then(|copy| {
                let mut doc = copy.run(|p| step_budget::run(p, &opts, a.nsys.as_deref()))?;
                doc.source = nsyskit::export::STDIN_NAME.into();
                Ok(doc)
            })
        } else {
            step_budget::run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref())
        };
        emit("step-budget", result, a.out.style())
    })
}
