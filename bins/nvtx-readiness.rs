//! `nvtx-readiness CAPTURE`: can this trace name where the time went? → `nsyskit.readiness/v1`.
//! The whole run is nsyskit::tools::nvtx_readiness::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::nvtx_readiness::NvtxReadinessArgs>(
        "nvtx-readiness",
        nsyskit::tools::nvtx_readiness::run,
    )
}
