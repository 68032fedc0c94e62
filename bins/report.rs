use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};

use nsyskit::flags::report::ReportArgs as Args;

fn main() {
    main_with("report", || {
        let a = Args::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let unfinished = nsyskit::serve_capture::refuse_unfinished(&a.input);
        let opts = a.options();
        emit("report", unfinished.and_then(|_| nsyskit::report::run(&opts)), a.out.style())
    })
}
