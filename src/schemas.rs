//! The registry of every document kind nsyskit writes. It sits above the tools (it imports each tool's
//! document type) so that [`crate::contract`], which every tool imports, knows no tool: no import circle.

use crate::contract::{json_schema, Document};

/// Every document kind nsyskit writes: `(kind, schema generator)`. `schemas/` is generated from this list
/// (`NSYSKIT_BLESS=1 cargo test --test it schemas::`), and tests validate outputs against those files.
pub fn all() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (crate::kern_csv_to_json::KernCsvToJsonDoc::KIND, json_schema::<crate::kern_csv_to_json::KernCsvToJsonDoc>()),
        (crate::bundle_merge::BundleMergeDoc::KIND, json_schema::<crate::bundle_merge::BundleMergeDoc>()),
        (crate::serve_capture::ServeCaptureDoc::KIND, json_schema::<crate::serve_capture::ServeCaptureDoc>()),
        (crate::nsys_resolve::Provenance::KIND, json_schema::<crate::nsys_resolve::Provenance>()),
        (crate::gate_check::GateCheckDoc::KIND, json_schema::<crate::gate_check::GateCheckDoc>()),
        (crate::sqlite_ranges::SqliteRangesDoc::KIND, json_schema::<crate::sqlite_ranges::SqliteRangesDoc>()),
        (crate::pod_attach::PodAttachDoc::KIND, json_schema::<crate::pod_attach::PodAttachDoc>()),
        (crate::nvtx_readiness::NvtxReadinessDoc::KIND, json_schema::<crate::nvtx_readiness::NvtxReadinessDoc>()),
        (crate::capture_compare::CaptureCompareDoc::KIND, json_schema::<crate::capture_compare::CaptureCompareDoc>()),
        (
            crate::capture_compare::baseline::BaselineDoc::KIND,
            json_schema::<crate::capture_compare::baseline::BaselineDoc>(),
        ),
        (crate::report::ReportDoc::KIND, json_schema::<crate::report::ReportDoc>()),
        (crate::report::question::QuestionDoc::KIND, json_schema::<crate::report::question::QuestionDoc>()),
        (crate::iterations::IterationsDoc::KIND, json_schema::<crate::iterations::IterationsDoc>()),
        (crate::step_budget::StepBudgetDoc::KIND, json_schema::<crate::step_budget::StepBudgetDoc>()),
        (crate::report::question::BenchmarkDoc::KIND, json_schema::<crate::report::question::BenchmarkDoc>()),
        (crate::iterations::IterationWindowDoc::KIND, json_schema::<crate::iterations::IterationWindowDoc>()),
    ]
}
