//! `serve-capture`: run a server under `nsys profile`, wait until it is ready, warm it up, drive a bounded load
//! across the capture window, stop only the recorded PIDs, and check the port is released.

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::serve_capture;

use nsyskit::flags::serve_capture::ServeCaptureArgs as Args;

fn main() {
    main_with("serve-capture", || {
        let a = Args::parse();
        emit("serve-capture", a.options().and_then(|o| serve_capture::run(&o)), a.output.style())
    })
}
