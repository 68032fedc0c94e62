use std::sync::{Arc, Mutex};

use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::contract::Error;
use nsyskit::pod_attach::{self as pa, Options, SecurityProfile, Strategy};
use nsyskit_pod_attach::{cleanup, run, KubeCluster, Setup};

/// Capture an nsys profile from a live Kubernetes pod through the API (no kubectl), copy the report, its SQLite
/// export and stats CSVs out with sha256 checks, run gate-check on it, and clean up.
#[derive(Parser, Debug)]
#[command(
    version,
    after_help = "Example (prints the exact API requests and container argv; needs no cluster):\n  pod-attach --dry-run --pod vllm-0 --container engine \\\n    --image 'registry.example/nsys@sha256:<digest>' --duration 10"
)]
struct Args {
    /// Namespace of the pod
    #[arg(long, short = 'n', default_value = "default")]
    namespace: String,
    /// Pod name (else --selector must match exactly one pod)
    #[arg(long)]
    pod: Option<String>,
    /// Label selector to find the pod, e.g. app=vllm
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// The engine's container (the sidecar's targetContainerName); may be left out when the pod has one container
    #[arg(long, short = 'c')]
    container: Option<String>,
    /// Sidecar image with nsys, pinned by digest; required unless --strategy session (no default: see docs/pod-attach.md)
    #[arg(long)]
    image: Option<String>,
    /// Security setting of the sidecar, like kubectl debug's: general (SYS_PTRACE) or sysadmin (privileged)
    #[arg(long, default_value = "general")]
    profile: String,
    /// endpoint (engine under nsys --capture-range=cudaProfilerApi --capture-range-end=repeat), session
    /// (engine under `nsys launch --session`), attach (only if the sidecar's nsys lists --attach-pid)
    #[arg(long, default_value = "endpoint")]
    strategy: String,
    /// Regex over /proc/*/cmdline finding the engine (children are followed to the CUDA-owning one)
    #[arg(long, default_value = pa::DEFAULT_PROCESS_MATCH)]
    process_match: String,
    /// Capture window in seconds
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// nsys program in the container that runs it
    #[arg(long, default_value = "nsys")]
    nsys: String,
    /// Scratch folder in that container (removed at cleanup)
    #[arg(long)]
    workdir: Option<String>,
    /// Local folder for the copied files
    #[arg(long, short = 'o', default_value = "pod-attach-out")]
    out_dir: String,
    /// Engine HTTP port (endpoint strategy)
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// nsys session name (session strategy)
    #[arg(long, default_value = "nsyskit")]
    session: String,
    /// Seconds to wait for the sidecar to run and for the report to appear
    #[arg(long, default_value_t = 120)]
    wait_timeout: u64,
    /// Base name of the copied files
    #[arg(long, default_value = "capture")]
    capture_name: String,
    /// gate-check program (default: next to pod-attach, else on PATH)
    #[arg(long)]
    gate_check: Option<std::path::PathBuf>,
    /// Print the plan (API requests and exec argv) as JSON; contacts no cluster
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    out: OutputArgs,
}

fn options(a: &Args) -> Result<Options, Error> {
    let id = format!("{:x}", std::process::id() as u64 ^ (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0) & 0xffff_ffff));
    let image = a.image.clone().unwrap_or_default();
    let o = Options {
        namespace: a.namespace.clone(),
        pod: a.pod.clone(),
        selector: a.selector.clone(),
        container: a.container.clone(),
        image,
        profile: SecurityProfile::parse(&a.profile)?,
        strategy: Strategy::parse(&a.strategy)?,
        process_match: a.process_match.clone(),
        duration_s: a.duration,
        nsys: a.nsys.clone(),
        workdir: a.workdir.clone().unwrap_or_else(|| format!("/tmp/nsyskit-pod-attach-{id}")),
        out_dir: a.out_dir.clone(),
        port: a.port,
        session: a.session.clone(),
        sidecar_name: format!("nsyskit-{id}"),
        // A per-run sleep length lets cleanup recognise this sidecar's sleep.
        sidecar_sleep_s: (a.duration.ceil() as u64) + 3 * a.wait_timeout + 600 + (std::process::id() as u64 % 997),
        wait_timeout_s: a.wait_timeout,
        capture_name: a.capture_name.clone(),
    };
    o.validate()?;
    Ok(o)
}

fn gate_bin(a: &Args) -> Option<std::path::PathBuf> {
    if let Some(g) = &a.gate_check {
        return Some(g.clone());
    }
    if let Some(p) = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("gate-check"))).filter(|p| p.is_file()) {
        return Some(p);
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("gate-check")).find(|p| p.is_file()))
}

fn main() {
    main_with("pod-attach", || {
        let a = Args::parse();
        let style = a.out.style();
        let o = match options(&a) {
            Ok(o) => o,
            Err(e) => return report_error("pod-attach", &e),
        };
        if a.dry_run {
            return emit("pod-attach", pa::dry_run(&o), style);
        }
        let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return report_error("pod-attach", &Error::env(format!("cannot start the async runtime: {e}"))),
        };
        let gate = gate_bin(&a);
        rt.block_on(async {
            let cluster = match KubeCluster::connect().await {
                Ok(c) => c,
                Err(e) => return report_error("pod-attach", &e),
            };
            let setup = Arc::new(Mutex::new(Setup::default()));
            let outcome = tokio::select! {
                r = run(&cluster, &o, &setup, gate.as_deref()) => Some(r),
                _ = tokio::signal::ctrl_c() => None,
            };
            if outcome.is_none() {
                eprintln!("pod-attach: interrupted (SIGINT); cleaning up");
            }
            let log = cleanup(&cluster, &o, &setup).await;
            for l in &log {
                eprintln!("pod-attach: cleanup: {l}");
            }
            match outcome {
                None => {
                    eprintln!("pod-attach: error: interrupted by SIGINT before the capture was copied out");
                    130
                }
                Some(Ok(mut doc)) => {
                    doc.cleanup = log;
                    emit("pod-attach", Ok(doc), style)
                }
                Some(Err(e)) => report_error("pod-attach", &e),
            }
        })
    })
}
