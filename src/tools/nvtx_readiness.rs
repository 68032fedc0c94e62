//! `nvtx-readiness CAPTURE`: can this trace attribute time to named engine phases → `nsyskit.readiness/v1`.

use std::path::Path;

use crate::contract::Result;
use crate::export::STDIN_NAME;
use crate::flags::nvtx_readiness::NvtxReadinessArgs;
use crate::nvtx_readiness;

use super::{Invocation, Outcome};

pub fn run(a: NvtxReadinessArgs, host: &Invocation) -> Result<Outcome> {
    let path = Path::new(&a.capture);
    super::refuse_unfinished(&[(path, "CAPTURE")])?;
    let opts = a.options();
    let nsys = super::nsys_for(a.nsys.as_deref(), &[path], host)?;
    let doc = if a.capture == "-" {
        super::on_stdin_export(
            host,
            "CAPTURE",
            |p| nvtx_readiness::run(p, &opts, nsys.as_deref()),
            |d| d.source.path = STDIN_NAME.into(),
        )?
    } else {
        nvtx_readiness::run(path, &opts, nsys.as_deref())?
    };
    // a given prefix with no iteration under it: the prefixes the capture has, on stderr (issue #41)
    let hint = match (&a.range_prefix, &doc.suggested_prefix) {
        (Some(p), Some(s)) => Some(format!(
            "--range-prefix {p:?}: no `{}.engine.iteration` range; prefixes seen (most occurrences first): {}; try --range-prefix {s}",
            p.trim_end_matches('.'),
            doc.prefixes_seen
                .iter()
                .take(crate::label_families::HINT_LIMIT)
                .map(|x| format!("{} ({} occurrences, {} labels)", x.prefix, x.occurrences, x.labels))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => None,
    };
    let o = Outcome::doc(doc, a.out.style());
    Ok(match hint {
        Some(h) => o.saying(h),
        None => o,
    })
}
