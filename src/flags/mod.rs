//! Every binary's command line, defined once (issue #18: flags written once).
//!
//! Each binary's arguments are a clap `Parser` here (`flags::gate_check::GateCheckArgs`, …), with the
//! library's own option structs flattened in where they are flags (`gate::Thresholds` derives `clap::Args`).
//! The binary parses it; the Nushell plugin builds its signature from the same `clap::Command`
//! ([`command`]: long name, help, default value, value type) and parses a call through the same parser, so a
//! flag, its help and its default are written in one place. `tests/it/flag_twins.rs` of the plugin checks every
//! flag of every binary against its Nushell twin.
//!
//! Conventions the Nushell side reads from a definition (nu-plugin/src/flags.rs):
//! - the value type gives the shape: `PathBuf` a path, `f64` a number, an integer type an int, a `bool` flag a
//!   switch, a repeatable flag (`Vec<T>`) one value or a list;
//! - the value name refines it: `BYTES` also takes a Nushell filesize, `SECONDS` a duration, `DIR` a directory,
//!   `TIME` a date.

use clap::CommandFactory;

pub mod bundle_merge;
pub mod capture_compare;
pub mod gate_check;
pub mod kern_csv_to_json;
pub mod nsys_resolve;
pub mod nvtx_readiness;
pub mod pod_attach;
pub mod report;
pub mod serve_capture;
pub mod sqlite_ranges;
pub mod step_budget;

pub use crate::contract::cli::defaults;

/// The `clap::Command` of every binary whose flags are defined here, by binary name.
pub fn commands() -> Vec<clap::Command> {
    vec![
        bundle_merge::BundleMergeArgs::command(),
        capture_compare::CaptureCompareArgs::command(),
        gate_check::GateCheckArgs::command(),
        kern_csv_to_json::KernCsvToJsonArgs::command(),
        nsys_resolve::NsysResolveArgs::command(),
        nvtx_readiness::NvtxReadinessArgs::command(),
        pod_attach::PodAttachArgs::command(),
        report::ReportArgs::command(),
        serve_capture::ServeCaptureArgs::command(),
        sqlite_ranges::SqliteRangesArgs::command(),
        step_budget::StepBudgetArgs::command(),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_command_is_well_formed() {
        for c in super::commands() {
            c.debug_assert();
        }
    }

    /// serve-capture's Nushell command fills `ServeCaptureOptions` from `ServeCaptureOptions::new`'s
    /// defaults: they are the binary's flag defaults.
    #[test]
    fn serve_capture_defaults_are_the_flags_defaults() {
        use clap::Parser;
        let a = super::serve_capture::ServeCaptureArgs::try_parse_from([
            "serve-capture",
            "--health",
            "h",
            "--load",
            "l",
            "--out",
            "o",
            "--",
            "s",
        ])
        .unwrap();
        let o = crate::serve_capture::ServeCaptureOptions::new(vec![], String::new(), vec![], Default::default());
        assert_eq!(o.trace, a.trace);
        assert_eq!(o.ready_timeout.as_secs_f64(), a.ready_timeout);
        assert_eq!(o.client_timeout.as_secs_f64(), a.client_timeout);
        assert_eq!(o.finalize_timeout.as_secs_f64(), a.finalize_timeout);
        assert_eq!(o.grace.as_secs_f64(), a.grace);
        assert_eq!(o.gpu_mem_tolerance_mib, a.gpu_mem_tolerance);
        assert_eq!(o.tier, crate::gate_check::Tier::parse(&a.tier).unwrap());
    }

    #[test]
    fn threshold_defaults_are_the_documented_ones() {
        let t = crate::gate_check::Thresholds::default();
        assert_eq!((t.max_gap_share, t.min_gap_ms, t.min_decode_steps, t.min_rep_bytes), (0.25, 500.0, 20, None));
    }
}
