fn main() {
    nsyskit::contract::cli::main_with("bundle-merge", || 2)
}
