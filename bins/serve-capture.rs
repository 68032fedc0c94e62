//! `serve-capture`: run a server under `nsys profile`, wait until it is ready, warm it up, drive a bounded load
//! across the capture window, stop only the recorded PIDs, and check the port is released.

use std::time::Duration;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::contract::Result;
use nsyskit::serve_capture::{self, ServeCaptureOptions};

use nsyskit::flags::serve_capture::ServeCaptureArgs as Args;

fn secs(x: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(x)
        .map_err(|_| nsyskit::contract::Error::usage(format!("{flag} {x}: expected seconds >= 0")).with_arg(flag))
}

fn options(a: &Args) -> Result<ServeCaptureOptions> {
    let mut o = ServeCaptureOptions::new(
        a.server.clone(),
        a.health.clone(),
        serve_capture::split_command(&a.load, "--load")?,
        a.out.clone(),
    );
    o.nsys = a.nsys.clone();
    o.trace = a.trace.clone();
    o.flags = match &a.flags {
        Some(f) => serve_capture::split_command(f, "--flags")?,
        None => Vec::new(),
    };
    o.delay_s = a.delay;
    o.duration_s = a.duration;
    o.capture_range = a.capture_range.clone();
    o.capture_range_end = a.capture_range_end.clone();
    o.cuda_child = a.cuda_child;
    o.env = a.env.iter().map(|e| serve_capture::parse_env(e)).collect::<Result<_>>()?;
    o.models = a.models.clone();
    o.warmup = a.warmup.as_deref().map(|w| serve_capture::split_command(w, "--warmup")).transpose()?;
    o.ready_timeout = secs(a.ready_timeout, "--ready-timeout")?;
    o.client_timeout = secs(a.client_timeout, "--client-timeout")?;
    o.finalize_timeout = secs(a.finalize_timeout, "--finalize-timeout")?;
    o.grace = secs(a.grace, "--grace")?;
    o.tier = nsyskit::gate::Tier::parse(&a.tier).map_err(|e| e.with_arg("--tier"))?;
    o.decode_range = a.decode_range.clone();
    o.min_rep_bytes = a.min_rep_bytes;
    o.gpu = a.gpu;
    o.nvidia_smi = a.nvidia_smi.clone();
    o.engine_repo = a.engine_repo.clone();
    o.instrumentation = a.instrumentation.clone();
    o.shm = a.shm.clone();
    o.gpu_mem_tolerance_mib = a.gpu_mem_tolerance;
    o.require_argv = a.require_argv.clone();
    o.engine = a.engine.clone();
    o.modules = a.module.iter().map(|m| serve_capture::engine::parse_module(m)).collect::<Result<_>>()?;
    o.strict_prebuilt = a.strict_prebuilt;
    o.iteration_records = a.iteration_records.clone();
    Ok(o)
}

fn main() {
    main_with("serve-capture", || {
        let a = Args::parse();
        emit("serve-capture", options(&a).and_then(|o| serve_capture::run(&o)), a.output.style())
    })
}
