//! nsyskit: turn NVIDIA Nsight Systems captures of LLM inference servers into trustworthy evidence.
//!
//! One module per tool, each a plain function from typed input to typed output. The binaries in
//! `bins/` and the Nushell plugin in `nu-plugin/` are thin adapters over these functions.
//!
//! - [`contract`]: what every tool shares (document header, errors and exit codes, input, output).
//! - [`export`]: the nsys export layer: the only module that knows the nsys SQLite schema (tables, columns,
//!   versions), with read-only, typed readers; every tool reads exports through it.
//! - [`schemas`]: the registry of every document kind (above the tools, so `contract` knows no tool).

pub mod beside;
pub mod bundle_merge;
pub mod capture_compare;
pub mod categories;
pub mod contract;
pub mod evidence;
pub mod export;
pub mod flags;
pub mod framework;
pub mod fx;
pub mod gate_check;
pub mod health_log;
pub mod intervals;
pub mod iterations;
pub mod kern_csv_to_json;
pub mod label_families;
pub mod labels;
pub mod memory;
pub mod merge;
pub mod nsys;
pub mod nsys_resolve;
pub mod nvtx_readiness;
pub mod phase;
pub mod pipeline;
pub mod pod_attach;
pub mod report;
pub mod schemas;
pub mod serve_capture;
pub mod signals;
pub mod sqlite_ranges;
pub mod stats;
pub mod step_budget;
pub mod step_label;
#[cfg(test)]
mod test_rng;
pub mod tools;
