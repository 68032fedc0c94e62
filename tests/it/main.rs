//! The integration tests of the `nsyskit` crate, one binary (issue #38: 29 test executables linked one by one
//! on 2 cores before). A file per tool or concern; `common` holds the shared helpers. Run one file with
//! `cargo test --test it <file>::` (e.g. `cargo test --test it golden::`).

mod common;
mod ranges_reference;

mod bundle_merge;
mod capture_compare;
mod export_layer;
mod flag_twins;
mod gate_check;
mod golden;
mod heldout;
mod heldout_devices;
mod help_examples;
mod hostile;
mod iterations;
mod kern_csv_to_json;
mod nsys_resolve;
mod nvtx_readiness;
mod question;
mod report;
mod report_page;
mod report_steps;
mod report_trace;
mod schemas;
mod serve_capture;
mod serve_capture_engine;
mod shared_scan;
mod sqlite_ranges;
mod sqlite_readers;
mod step_budget;
mod step_rows;
mod type_names;
mod verdicts;
mod world;
