//! `sqlite-ranges EXPORT`: exact NVTX range attribution → `nsyskit.ranges/v1` (or its table with
//! `--format table`); with `--iterations` / `--iteration-records`, the ranges of that window.

use std::path::Path;

use crate::contract::Result;
use crate::export::STDIN_NAME;
use crate::flags::sqlite_ranges::{Format, SqliteRangesArgs};
use crate::iterations::window::Windowed;
use crate::pipeline::window;
use crate::sqlite_ranges;

use super::{Invocation, Outcome, Output};

pub fn run(a: SqliteRangesArgs, host: &Invocation) -> Result<Outcome> {
    sqlite_ranges::set_progress(host.progress);
    let path = Path::new(&a.export);
    super::refuse_unfinished(&[(path, "EXPORT")])?;
    let opts = a.options()?;
    let it = a.iteration_args()?;
    let nsys = super::nsys_for(a.nsys.as_deref(), &[path], host)?;
    let nsys = nsys.as_deref();
    let result = match (it.any(), a.export == "-") {
        (true, true) => super::on_stdin_export(
            host,
            "EXPORT",
            |p| window::ranges_run(p, &opts, nsys, &it),
            |w| match w {
                Windowed::Doc(d) => d.source.path = STDIN_NAME.into(),
                Windowed::Retry(d) => d.source = STDIN_NAME.into(),
            },
        )?,
        (true, false) => window::ranges_run(path, &opts, nsys, &it)?,
        (false, true) => Windowed::Doc(super::on_stdin_export(
            host,
            "EXPORT",
            |p| sqlite_ranges::run(p, &opts, nsys),
            |d| d.source.path = STDIN_NAME.into(),
        )?),
        (false, false) => Windowed::Doc(sqlite_ranges::run(path, &opts, nsys)?),
    };
    // a --range-prefix that matched no label: its hint (the families that exist) on stderr too
    let hint: Vec<String> = match &result {
        Windowed::Doc(d) => {
            d.notes.iter().filter(|n| n.starts_with(crate::label_families::NO_MATCH)).cloned().collect()
        }
        Windowed::Retry(_) => Vec::new(),
    };
    let outcome = match (a.format, result) {
        (_, Windowed::Retry(d)) => {
            let reason = d.reason.clone();
            Outcome::doc(*d, a.out.style()).saying(format!("RETRY: {reason}"))
        }
        (Format::Table, Windowed::Doc(doc)) => Outcome {
            output: Output::Text(sqlite_ranges::render_table(&doc)),
            say: Vec::new(),
            exit: 0,
            style: a.out.style(),
            stderr: None,
        },
        (Format::Json, Windowed::Doc(doc)) => Outcome::doc(doc, a.out.style()),
    };
    Ok(hint.into_iter().fold(outcome, Outcome::saying))
}
