//! `step-budget CAPTURE`: where each engine step's time went → `nsyskit.step-budget/v1`; with `--iterations`
//! / `--iteration-records`, the budget of that window.

use std::path::Path;

use crate::contract::{Document, Result};
use crate::export::STDIN_NAME;
use crate::flags::step_budget::StepBudgetArgs;
use crate::iterations::window::Windowed;
use crate::pipeline::window;
use crate::step_budget;

use super::{Invocation, Outcome};

pub fn run(a: StepBudgetArgs, host: &Invocation) -> Result<Outcome> {
    let path = Path::new(&a.export);
    super::refuse_unfinished(&[(path, "CAPTURE")])?;
    let opts = a.options();
    let it = a.iteration_args()?;
    let nsys = super::nsys_for(a.nsys.as_deref(), &[path], host)?;
    let nsys = nsys.as_deref();
    let result = match (it.any(), a.export == "-") {
        (true, true) => super::on_stdin_export(
            host,
            "CAPTURE",
            |p| window::step_budget_run(p, &opts, nsys, &it),
            |w| match w {
                Windowed::Doc(d) => d.source = STDIN_NAME.into(),
                Windowed::Retry(d) => d.source = STDIN_NAME.into(),
            },
        )?,
        (true, false) => window::step_budget_run(path, &opts, nsys, &it)?,
        (false, true) => Windowed::Doc(super::on_stdin_export(
            host,
            "CAPTURE",
            |p| step_budget::run(p, &opts, nsys),
            |d| d.source = STDIN_NAME.into(),
        )?),
        (false, false) => Windowed::Doc(step_budget::run(path, &opts, nsys)?),
    };
    Ok(match result {
        // --steps: the window selected no step, so there is no row; the RETRY is said and exits 1
        Windowed::Retry(d) if a.steps => {
            Outcome::rows(Box::new(Vec::<step_budget::Step>::new()), d.exit_code(), a.out.style())
                .saying(format!("RETRY: {}", d.reason))
        }
        Windowed::Retry(d) => {
            let reason = d.reason.clone();
            Outcome::doc(*d, a.out.style()).saying(format!("RETRY: {reason}"))
        }
        Windowed::Doc(mut d) => {
            let rejected = (d.verdict.class == step_budget::UNRELIABLE).then(|| d.verdict.reason.clone());
            let o = if a.steps {
                // the rows of the summary's steps, with its exit code
                let rows = std::mem::take(&mut d.steps);
                Outcome::rows(Box::new(rows), d.exit_code(), a.out.style())
            } else {
                Outcome::doc(d, a.out.style())
            };
            match rejected {
                Some(reason) => o.saying(format!("unreliable: {reason}")),
                None => o,
            }
        }
    })
}
