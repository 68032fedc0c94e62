//! `report BUNDLE`: one primary bottleneck class and the evidence that establishes it (docs/compare-report.md).
//! The whole run is nsyskit::tools::report::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::report::ReportArgs>("report", nsyskit::tools::report::run)
}
