//! `step-budget`: where each engine step's time went, step by step → `nsyskit.step-budget/v1`.
//! The whole run is nsyskit::tools::step_budget::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::step_budget::StepBudgetArgs>("step-budget", nsyskit::tools::step_budget::run)
}
