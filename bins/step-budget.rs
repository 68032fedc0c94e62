//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::iterations::window::{self, Windowed};
use nsyskit::step_budget;

use nsyskit::flags::step_budget::StepBudgetArgs as Args;

fn main() {
    main_with("step-budget", || {
        let a = Args::parse();
        let opts = a.options();
        let it = match a.iteration_args() {
            Ok(it) => it,
            Err(e) => return report_error("step-budget", &e),
        };
        if it.any() {
            let result = if a.export == "-" {
                nsyskit::export::StdinCopy::read().and_then(|copy| {
                    let mut w = copy.run(|p| window::step_budget_run(p, &opts, a.nsys.as_deref(), &it))?;
                    match &mut w {
                        Windowed::Doc(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                        Windowed::Retry(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                    }
                    Ok(w)
                })
            } else {
                window::step_budget_run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref(), &it)
            };
            return match result {
                Ok(Windowed::Retry(d)) => {
                    eprintln!("step-budget: RETRY: {}", d.reason);
                    emit("step-budget", Ok(*d), a.out.style())
                }
                Ok(Windowed::Doc(d)) => emit("step-budget", Ok(d), a.out.style()),
                Err(e) => report_error("step-budget", &e),
            };
        }
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
