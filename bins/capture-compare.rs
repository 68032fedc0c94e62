use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};

use nsyskit::flags::capture_compare::CaptureCompareArgs as Args;

fn main() {
    main_with("capture-compare", || {
        let a = Args::parse();
        let opts = match a.options() {
            Ok(o) => o,
            Err(e) => return emit::<nsyskit::compare::CompareDoc>("capture-compare", Err(e), a.out.style()),
        };
        match &a.save_baseline {
            Some(name) => emit("capture-compare", nsyskit::compare::baseline::save(&opts, name), a.out.style()),
            None => emit("capture-compare", nsyskit::compare::run(&opts), a.out.style()),
        }
    })
}
