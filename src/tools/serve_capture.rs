//! `serve-capture … -- SERVER…`: the profiled-server lifecycle (nsys + server, readiness, warmup, bounded
//! load, stop only recorded PIDs, then gate/ranges/bundle) → `nsyskit.serve-capture/v1`.

use crate::contract::Result;
use crate::flags::serve_capture::ServeCaptureArgs;
use crate::serve_capture::{self, StopSource};

use super::{Invocation, Outcome};

pub fn run(a: ServeCaptureArgs, host: &Invocation) -> Result<Outcome> {
    let mut o = a.options()?;
    o.resolve = crate::nsys_resolve::ResolveOptions::from_vars(host.env);
    if host.cwd.is_some() {
        o.cwd = host.cwd.clone();
    }
    if let Some(stop) = &host.stop {
        o.stop = StopSource::Flag(stop.clone());
    }
    Ok(Outcome::doc(serve_capture::run(&o)?, a.output.style()))
}
