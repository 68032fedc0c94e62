//! `report BUNDLE`: one primary bottleneck class and the evidence that establishes it → `nsyskit.report/v1`;
//! with `--iterations` / `--iteration-records`, of that window.

use crate::contract::Result;
use crate::flags::report::ReportArgs;
use crate::iterations::window::Windowed;

use super::{Invocation, Outcome};

pub fn run(a: ReportArgs, host: &Invocation) -> Result<Outcome> {
    // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
    super::refuse_unfinished(&[(a.input.as_path(), "BUNDLE")])?;
    if a.input.as_os_str() == "-" {
        host.stdin_allowed("BUNDLE")?;
    }
    let opts = a.options()?;
    let it = a.iteration_args()?;
    let doc = match crate::pipeline::report::run(&opts, &it)? {
        Windowed::Retry(d) => {
            let reason = d.reason.clone();
            return Ok(Outcome::doc(*d, a.out.style()).saying(format!("RETRY: {reason}")));
        }
        Windowed::Doc(d) => d,
    };
    let truncated = doc.trace.as_ref().filter(|t| t.truncated).map(|t| {
        format!(
            "--trace {}: more than {} events in the window: the trace stops at {} ns ({} events dropped)",
            t.path,
            t.max_events,
            t.truncated_at_ns.unwrap_or(0),
            t.dropped_events
        )
    });
    let mut o = Outcome::doc(doc, a.out.style());
    o.say.extend(truncated);
    Ok(o)
}
