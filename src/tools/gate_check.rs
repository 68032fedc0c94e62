//! `gate-check CAPTURE`: PASS/RETRY capture gates → `nsyskit.gate/v1`; with `--ranges`, `--nvtx-readiness`
//! and `--report`, also those tools' documents of the same export, from the same run.

use crate::contract::{render, Error, Result, Style};
use crate::flags::gate_check::GateCheckArgs;
use crate::nvtx_readiness::ReadinessOptions;

use super::{Invocation, Outcome};

pub fn run(a: GateCheckArgs, host: &Invocation) -> Result<Outcome> {
    // a serve-capture run folder that never reached a terminal state is not evidence (docs/serve-capture.md)
    let mut inputs = vec![(a.capture.as_path(), "CAPTURE")];
    inputs.extend(a.sqlite.as_deref().map(|s| (s, "--sqlite")));
    super::refuse_unfinished(&inputs)?;
    if a.capture.as_os_str() == "-" {
        host.stdin_allowed("CAPTURE")?;
    }
    let mut opts = a.options()?;
    if a.sqlite.is_none() {
        opts.nsys = super::nsys_for(a.nsys.as_deref(), &[a.capture.as_path()], host)?;
    }
    let also = crate::pipeline::AlsoDocs {
        ranges: a.ranges.as_ref().map(|_| crate::sqlite_ranges::RangesOptions::sqlite_ranges_default()),
        readiness: a
            .nvtx_readiness
            .as_ref()
            .map(|_| ReadinessOptions { range_prefix: a.range_prefix.clone(), max_opaque_share: a.max_opaque_share }),
        report: a.report.as_ref().map(|_| crate::report::ReportOptions::of_input(opts.capture.clone())),
    };
    let read: Vec<&std::path::Path> =
        [Some(&opts.capture), opts.sqlite.as_ref(), opts.log.as_ref(), opts.provenance.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| p.as_path())
            .collect();
    let outputs = outputs(&a);
    for (i, (flag, out)) in outputs.iter().enumerate() {
        crate::contract::refuse_output_over_input(out, flag, &read)?;
        if let Some((other, _)) = outputs[..i].iter().find(|(_, o)| o == out) {
            return Err(Error::usage(format!("{flag} {}: {other} writes that file too", out.display())).with_arg(*flag));
        }
    }
    let shared = crate::pipeline::run_shared(&opts, &also)?;
    // what each tool writes to a file (not a terminal: compact)
    let written = [
        ("--ranges", a.ranges.as_deref(), shared.ranges.as_ref().map(|d| render(d, Style::Compact))),
        ("--nvtx-readiness", a.nvtx_readiness.as_deref(), shared.readiness.as_ref().map(|d| render(d, Style::Compact))),
        ("--report", a.report.as_deref(), shared.report.as_ref().map(|d| render(d, Style::Compact))),
    ];
    for (flag, out, text) in written {
        let (Some(out), Some(text)) = (out, text) else { continue };
        std::fs::write(out, text)
            .map_err(|e| Error::env(format!("{flag} {}: cannot write: {e}", out.display())).with_arg(flag))?;
    }
    Ok(Outcome::doc(shared.gate, a.out.style()))
}

/// `(flag, file)` of the other documents asked for, in the order --ranges, --nvtx-readiness, --report.
fn outputs(a: &GateCheckArgs) -> Vec<(&'static str, &std::path::Path)> {
    [("--ranges", &a.ranges), ("--nvtx-readiness", &a.nvtx_readiness), ("--report", &a.report)]
        .into_iter()
        .filter_map(|(f, p)| p.as_deref().map(|p| (f, p)))
        .collect()
}
