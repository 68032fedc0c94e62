//! `gate-check CAPTURE`: PASS/RETRY capture gates (see docs/gate-check.md); flags in nsyskit::flags::gate_check.

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::flags::gate_check::GateCheckArgs;

fn main() {
    main_with("gate-check", || {
        let a = GateCheckArgs::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let unfinished = [Some(&a.capture), a.sqlite.as_ref()]
            .into_iter()
            .flatten()
            .try_for_each(|p| nsyskit::serve_capture::refuse_unfinished(p));
        emit("gate-check", unfinished.and(a.options()).and_then(|o| a.run(&o)), a.out.style())
    })
}
