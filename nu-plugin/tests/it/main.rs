//! The Nushell plugin's integration tests, one binary (issue #38). Run one file with `cargo test -p nu_plugin_nsyskit
//! --test it <file>::`.

mod common;
#[path = "../../../bins/pod-attach/tests/standin/mod.rs"]
mod standin;

mod examples;
mod flag_twins;
mod real_nu;
mod real_nu_iterations;
mod real_nu_pod_attach;
mod real_nu_serve_capture;
