use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::iterations::window;

use nsyskit::flags::report::ReportArgs as Args;

fn main() {
    main_with("report", || {
        let a = Args::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let parsed = nsyskit::serve_capture::refuse_unfinished(&a.input)
            .and_then(|_| a.options())
            .and_then(|opts| a.iteration_args().map(|it| (opts, it)));
        let (opts, it) = match parsed {
            Ok(p) => p,
            Err(e) => return report_error("report", &e),
        };
        let result = if it.any() {
            match window::report_run(&opts, &it) {
                Ok(window::Windowed::Retry(d)) => {
                    eprintln!("report: RETRY: {}", d.reason);
                    return emit("report", Ok(*d), a.out.style());
                }
                Ok(window::Windowed::Doc(d)) => Ok(d),
                Err(e) => Err(e),
            }
        } else {
            nsyskit::report::run(&opts)
        };
        if let Ok(doc) = &result {
            if let Some(t) = doc.trace.as_ref().filter(|t| t.truncated) {
                eprintln!(
                    "report: --trace {}: more than {} events in the window: the trace stops at {} ns ({} events dropped)",
                    t.path,
                    t.max_events,
                    t.truncated_at_ns.unwrap_or(0),
                    t.dropped_events
                );
            }
        }
        emit("report", result, a.out.style())
    })
}
