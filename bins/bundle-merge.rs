//! bundle-merge: merge nsyskit documents into an evidence bundle (a JSON object), losslessly and atomically.
//! The whole run is nsyskit::tools::bundle_merge::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::bundle_merge::BundleMergeArgs>(
        "bundle-merge",
        nsyskit::tools::bundle_merge::run,
    )
}
