//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.

use std::io::IsTerminal;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::ranges::{self};

use nsyskit::flags::sqlite_ranges::Format;
use nsyskit::flags::sqlite_ranges::SqliteRangesArgs as Args;

fn main() {
    main_with("sqlite-ranges", || {
        let a = Args::parse();
        ranges::set_progress(std::io::stderr().is_terminal());
        let result = (|| {
            let opts = a.options()?;
            if a.export == "-" {
                let copy = nsyskit::export::StdinCopy::read()?;
                let mut doc = copy.run(|p| ranges::run(p, &opts, a.nsys.as_deref()))?;
                doc.source.path = nsyskit::export::STDIN_NAME.into();
                Ok(doc)
            } else {
                ranges::run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref())
            }
        })();
        match (a.format, result) {
            (Format::Table, Ok(doc)) => {
                print!("{}", ranges::render_table(&doc));
                0
            }
            (Format::Table, Err(e)) => report_error("sqlite-ranges", &e),
            (Format::Json, r) => emit("sqlite-ranges", r, a.out.style()),
        }
    })
}
