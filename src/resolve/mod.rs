//! `nsys-resolve`: find, verify and probe the profiler; preflight the machine; write the provenance record.

mod caps;

pub use caps::{compare_versions, declared_options, export_types, parse_capabilities, parse_version, version_key, Capabilities, TRACKED_SWITCHES};
