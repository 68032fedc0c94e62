//! pod-attach's integration tests, one binary (issue #38). Run one file with `cargo test -p nsyskit-pod-attach
//! --test it <file>::`.

mod common;
#[path = "../standin/mod.rs"]
mod standin;

mod gpu_fixture;
mod pod_attach;
