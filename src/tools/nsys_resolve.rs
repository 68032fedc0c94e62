//! `nsys-resolve`: find and verify nsys, probe it, preflight the GPU/port/shm, write the provenance record →
//! `nsyskit.provenance/v1`. Every variable it reads is the user's environment ([`Invocation::var`]).

use std::time::Duration;

use crate::contract::Result;
use crate::flags::nsys_resolve::NsysResolveArgs;
use crate::nsys_resolve::{ProvenanceOptions, ResolveOptions};

use super::{Invocation, Outcome};

pub fn run(a: NsysResolveArgs, host: &Invocation) -> Result<Outcome> {
    let timeout = Duration::from_millis(a.timeout_ms.max(1));
    let lossy = |v: std::ffi::OsString| v.to_string_lossy().into_owned();
    // `--env NAME` records NAME's value in the user's environment
    let environment = a
        .env
        .iter()
        .filter(|e| !e.contains('='))
        .filter_map(|name| host.var_raw(name).map(|v| (name.clone(), lossy(v))))
        .collect();
    let spec = crate::nsys_resolve::WorkloadSpec {
        question: a.question.clone(),
        request_rate: a.request_rate.clone(),
        concurrency: a.concurrency,
        seed: a.seed.clone(),
        clock_policy: a.clock_policy.clone(),
        instrumentation_patch: a.instrumentation_patch.clone(),
    };
    // the workload record, when any workload flag or a client command was given
    let workload = if spec.is_empty() && a.client_cmd.is_none() {
        None
    } else {
        let client = a.client_cmd.as_deref().map(crate::nsys_resolve::split_words);
        let recorded = a.client_cmd.as_deref().map(|c| crate::nsys_resolve::redact_command(c).0);
        let w = crate::nsys_resolve::workload::from_command(&spec, client.as_deref(), recorded, host.cwd.as_deref())?;
        for line in crate::nsys_resolve::workload::warnings(&w, false) {
            eprintln!("nsys-resolve: warning: {line}");
        }
        Some(w)
    };
    let opts = ProvenanceOptions {
        resolve: ResolveOptions {
            nsys: a.nsys,
            timeout,
            probe: !a.no_probe,
            require_explicit: a.require_explicit_nsys,
            ..ResolveOptions::from_vars(host.env)
        },
        workload,
        preflight: a.preflight,
        require_gpu: a.require_gpu,
        gpu: a.gpu,
        cuda_visible_devices: host.var_raw("CUDA_VISIBLE_DEVICES").map(lossy),
        nvidia_smi: a.nvidia_smi,
        port: a.port,
        shm: a.shm,
        record: a.record,
        flags: a.flags,
        server_cmd: a.server_cmd,
        client_cmd: a.client_cmd,
        env: a.env,
        environment: Some(environment),
        instrumentation: a.instrumentation,
        repo: a.repo,
        artifacts: a.artifact,
        cuda_injection: host.var("CUDA_INJECTION64_PATH").map(lossy),
        ..ProvenanceOptions::default()
    };
    Ok(Outcome::doc(crate::nsys_resolve::run(&opts)?, a.out.style()))
}
