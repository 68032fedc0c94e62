use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::iterations::window;

use nsyskit::flags::report::ReportArgs as Args;

fn main() {
    main_with("report", || {
        let a = Args::parse();
        // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
        let unfinished = nsyskit::serve_capture::refuse_unfinished(&a.input);
        let opts = nsyskit::report::ReportOptions {
            input: a.input,
            provenance: a.provenance,
            categories: a.categories,
            label: a.label,
            html: a.html,
            top: a.top,
            trace: a.trace,
            window: None,
            trace_max_events: Some(a.trace_max_events),
        };
        let unfinished = unfinished.and_then(|_| match &a.window {
            Some(w) => nsyskit::report::trace::parse_window(w).map(Some),
            None => Ok(None),
        });
        let opts = match unfinished {
            Ok(window) => nsyskit::report::ReportOptions { window, ..opts },
            Err(e) => return report_error("report", &e),
        };
        let it = match a.iterations.as_deref().map(window::parse_iterations).transpose() {
            Ok(w) => window::IterationArgs { records: a.iteration_records, iterations: w, ..Default::default() },
            Err(e) => return report_error("report", &e),
        };
        if it.iterations.is_none() && it.records.is_some() {
            return report_error(
                "report",
                &nsyskit::contract::Error::usage("--iteration-records is for --iterations START:END")
                    .with_arg("--iteration-records"),
            );
        }
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
