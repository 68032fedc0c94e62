fn main() {
    nsyskit::contract::cli::main_with("kern-csv-to-json", || 2)
}
