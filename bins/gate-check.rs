//! `gate-check CAPTURE`: PASS/RETRY capture gates (see docs/gate-check.md); flags in nsyskit::flags::gate_check.
//! The whole run is nsyskit::tools::gate_check::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::gate_check::GateCheckArgs>("gate-check", nsyskit::tools::gate_check::run)
}
