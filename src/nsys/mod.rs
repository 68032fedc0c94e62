//! The nsys binary itself: where it is (`NSYS_BIN`, PATH, the known install folders), whether it runs
//! (`--version` under a deadline), its version and what its `profile`/`export` accept. Below the export layer
//! (which runs `nsys export`) and `resolve` (which records all of it in provenance, with the preflight); it
//! imports only `contract`.

mod caps;
mod find;

pub use caps::{
    compare_versions, declared_options, export_types, parse_capabilities, parse_version, version_key, Capabilities,
    TRACKED_SWITCHES,
};
pub use find::{
    expand_glob, glob_regex, install_globs_from_env, probe_capabilities, project_install_globs, resolve,
    run_with_timeout, verify, NsysCandidate, ResolveOptions, Resolved, RunError, RunOutput, KNOWN_INSTALL_GLOBS,
};
