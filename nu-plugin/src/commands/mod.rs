//! One module per command. Each mirrors its binary's flags and calls the same library function.

use nu_plugin::PluginCommand;

use crate::NsyskitPlugin;

mod bundle_merge;
mod capture_compare;
mod from_nsyskit;
mod gate_check;
mod kern_csv_to_json;
mod nsys_resolve;
mod nvtx_readiness;
mod pod_attach;
mod report;
mod serve_capture;
mod sqlite_ranges;
mod step_budget;

pub use bundle_merge::BundleMerge;
pub use capture_compare::CaptureCompare;
pub use from_nsyskit::FromNsyskit;
pub use gate_check::GateCheck;
pub use kern_csv_to_json::KernCsvToJson;
pub use nsys_resolve::NsysResolve;
pub use nvtx_readiness::NvtxReadiness;
pub use pod_attach::PodAttach;
pub use report::Report;
pub use serve_capture::ServeCapture;
pub use sqlite_ranges::SqliteRanges;
pub use step_budget::StepBudget;

/// Every command of the plugin.
pub fn all() -> Vec<Box<dyn PluginCommand<Plugin = NsyskitPlugin>>> {
    vec![
        Box::new(NsysResolve),
        Box::new(GateCheck),
        Box::new(SqliteRanges),
        Box::new(NvtxReadiness),
        Box::new(CaptureCompare),
        Box::new(Report),
        Box::new(KernCsvToJson),
        Box::new(BundleMerge),
        Box::new(FromNsyskit),
        Box::new(ServeCapture),
        Box::new(PodAttach),
        Box::new(StepBudget),
    ]
}
