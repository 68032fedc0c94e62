//! kern-csv-to-json: `nsys stats --format csv` output → one typed JSON document (`nsyskit.stats/v1`).

use clap::Parser;
use nsyskit::contract::cli::{main_with, report_error};
use nsyskit::contract::Input;
use nsyskit::kern_csv::run_to_writer;

use nsyskit::flags::kern_csv_to_json::KernCsvToJsonArgs as Args;

fn main() {
    main_with("kern-csv-to-json", || {
        let a = Args::parse();
        let opts = a.options();
        // the rows are streamed to stdout (a large trace report is never held in memory)
        let mut out = std::io::stdout().lock();
        match run_to_writer(&Input::parse(&a.input), &opts, a.out.style(), &mut out) {
            Ok(code) => code,
            Err(e) => report_error("kern-csv-to-json", &e),
        }
    })
}
