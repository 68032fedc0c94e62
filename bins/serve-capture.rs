//! `serve-capture`: run a server under `nsys profile`, wait until it is ready, warm it up, drive a bounded load
//! across the capture window, stop only the recorded PIDs, and check the port is released.
//! The whole run is nsyskit::tools::serve_capture::run, shared with the Nushell command.

fn main() {
    nsyskit::tools::main::<nsyskit::flags::serve_capture::ServeCaptureArgs>(
        "serve-capture",
        nsyskit::tools::serve_capture::run,
    )
}
