//! `nsys-resolve`: find, verify and probe nsys; preflight the machine; write the provenance record.

use std::time::Duration;

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with};
use nsyskit::resolve::{ProvenanceOptions, ResolveOptions};

use nsyskit::flags::nsys_resolve::NsysResolveArgs as Args;

fn main() {
    main_with("nsys-resolve", || {
        let a = Args::parse();
        let timeout = Duration::from_millis(a.timeout_ms.max(1));
        let opts = ProvenanceOptions {
            resolve: ResolveOptions { nsys: a.nsys, timeout, probe: !a.no_probe, ..ResolveOptions::from_env() },
            preflight: a.preflight,
            require_gpu: a.require_gpu,
            gpu: a.gpu,
            nvidia_smi: a.nvidia_smi,
            port: a.port,
            shm: a.shm,
            record: a.record,
            flags: a.flags,
            server_cmd: a.server_cmd,
            client_cmd: a.client_cmd,
            env: a.env,
            instrumentation: a.instrumentation,
            repo: a.repo,
            artifacts: a.artifact,
            ..ProvenanceOptions::default()
        };
        emit("nsys-resolve", nsyskit::resolve::run(&opts), a.out.style())
    })
}
