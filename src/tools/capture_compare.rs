//! `capture-compare A B`: are two captures comparable, and what changed → `nsyskit.compare/v1`; with
//! `--save-baseline NAME`, a named baseline.

use crate::contract::Result;
use crate::flags::capture_compare::CaptureCompareArgs;

use super::{Invocation, Outcome};

pub fn run(a: CaptureCompareArgs, host: &Invocation) -> Result<Outcome> {
    let opts = a.options()?;
    for (p, arg) in [(&opts.a, "A"), (&opts.b, "B")] {
        if p.as_os_str() == "-" {
            host.stdin_allowed(arg)?;
        }
    }
    Ok(match &a.save_baseline {
        Some(name) => Outcome::doc(crate::capture_compare::baseline::save(&opts, name)?, a.out.style()),
        None => Outcome::doc(crate::capture_compare::run(&opts)?, a.out.style()),
    })
}
