//! `capture-compare A B`: are two captures comparable, and what changed (docs/compare-report.md).
//! The whole run is nsyskit::tools::capture_compare::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::capture_compare::CaptureCompareArgs>(
        "capture-compare",
        nsyskit::tools::capture_compare::run,
    )
}
