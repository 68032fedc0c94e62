//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.

use std::io::IsTerminal;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::iterations::window::{self, Windowed};
use nsyskit::ranges;

use nsyskit::flags::sqlite_ranges::Format;
use nsyskit::flags::sqlite_ranges::SqliteRangesArgs as Args;

fn main() {
    // before any thread starts; not for the report's step budget, whose parallel passes allocate (see the doc)
    nsyskit::memory::limit_arenas();
    main_with("sqlite-ranges", || {
        let a = Args::parse();
        ranges::set_progress(std::io::stderr().is_terminal());
        let result = (|| {
            let opts = a.options()?;
            let it = a.iteration_args()?;
            if it.any() {
                return if a.export == "-" {
                    let copy = nsyskit::export::StdinCopy::read()?;
                    let mut w = copy.run(|p| window::ranges_run(p, &opts, a.nsys.as_deref(), &it))?;
                    match &mut w {
                        Windowed::Doc(d) => d.source.path = nsyskit::export::STDIN_NAME.into(),
                        Windowed::Retry(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                    }
                    Ok(w)
                } else {
                    window::ranges_run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref(), &it)
                };
            }
            if a.export == "-" {
                let copy = nsyskit::export::StdinCopy::read()?;
                let mut doc = copy.run(|p| ranges::run(p, &opts, a.nsys.as_deref()))?;
                doc.source.path = nsyskit::export::STDIN_NAME.into();
                Ok(Windowed::Doc(doc))
            } else {
                ranges::run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref()).map(Windowed::Doc)
            }
        })();
        match (a.format, result) {
            (_, Ok(Windowed::Retry(d))) => {
                eprintln!("sqlite-ranges: RETRY: {}", d.reason);
                emit("sqlite-ranges", Ok(*d), a.out.style())
            }
            (Format::Table, Ok(Windowed::Doc(doc))) => {
                print!("{}", ranges::render_table(&doc));
                0
            }
            (Format::Table, Err(e)) | (Format::Json, Err(e)) => report_error("sqlite-ranges", &e),
            (Format::Json, Ok(Windowed::Doc(doc))) => emit("sqlite-ranges", Ok(doc), a.out.style()),
        }
    })
}
