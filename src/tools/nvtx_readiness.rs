//! `nvtx-readiness CAPTURE`: can this trace attribute time to named engine phases → `nsyskit.readiness/v1`.

use std::path::Path;

use crate::contract::Result;
use crate::export::STDIN_NAME;
use crate::flags::nvtx_readiness::NvtxReadinessArgs;
use crate::readiness;

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
            |p| readiness::run(p, &opts, nsys.as_deref()),
            |d| d.source.path = STDIN_NAME.into(),
        )?
    } else {
        readiness::run(path, &opts, nsys.as_deref())?
    };
    Ok(Outcome::doc(doc, a.out.style()))
}
