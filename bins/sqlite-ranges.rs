//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.
//! The whole run is nsyskit::tools::sqlite_ranges::run, shared with the Nushell command.

fn main() {
    // before any thread starts; not for the report's step budget, whose parallel passes allocate (see the doc)
    nsyskit::memory::limit_arenas();
    nsyskit::tools::main::<nsyskit::flags::sqlite_ranges::SqliteRangesArgs>(
        "sqlite-ranges",
        nsyskit::tools::sqlite_ranges::run,
    )
}
