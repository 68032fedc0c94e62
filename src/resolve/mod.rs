//! `nsys-resolve`: find, verify and probe the profiler; preflight the machine; write the provenance record.

mod caps;
mod find;

pub use caps::{compare_versions, declared_options, export_types, parse_capabilities, parse_version, version_key, Capabilities, TRACKED_SWITCHES};
pub use find::{expand_glob, glob_regex, probe_capabilities, resolve, run_with_timeout, verify, Candidate, Resolved, ResolveOptions, RunError, RunOutput, KNOWN_INSTALL_GLOBS};
