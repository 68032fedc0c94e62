//! kern-csv-to-json: `nsys stats --format csv` output → one typed JSON document (`nsyskit.stats/v1`).
//! The whole run is nsyskit::tools::kern_csv_to_json::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::kern_csv_to_json::KernCsvToJsonArgs>(
        "kern-csv-to-json",
        nsyskit::tools::kern_csv_to_json::run,
    )
}
