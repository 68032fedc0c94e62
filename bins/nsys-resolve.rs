//! `nsys-resolve`: find, verify and probe nsys; preflight the machine; write the provenance record.
//! The whole run is nsyskit::tools::nsys_resolve::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::nsys_resolve::NsysResolveArgs>(
        "nsys-resolve",
        nsyskit::tools::nsys_resolve::run,
    )
}
