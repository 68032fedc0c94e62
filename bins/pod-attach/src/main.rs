fn main() { eprintln!("pod-attach: not built yet"); std::process::exit(2); }
