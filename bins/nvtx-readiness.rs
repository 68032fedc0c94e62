//! `nvtx-readiness CAPTURE`: can this trace name where the time went? → `nsyskit.readiness/v1`.

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::readiness::{self};

use nsyskit::flags::nvtx_readiness::NvtxReadinessArgs as Args;

fn main() {
    main_with("nvtx-readiness", || {
        let a = Args::parse();
        let opts = a.options();
        let result = if a.capture == "-" {
            (|| {
                let copy = nsyskit::export::StdinCopy::read()?;
                let mut doc = copy.run(|p| readiness::run(p, &opts, a.nsys.as_deref()))?;
                doc.source.path = nsyskit::export::STDIN_NAME.into();
                Ok(doc)
            })()
        } else {
            readiness::run(std::path::Path::new(&a.capture), &opts, a.nsys.as_deref())
        };
        emit("nvtx-readiness", result, a.out.style())
    })
}
