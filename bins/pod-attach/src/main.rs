use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::pod_attach as pa;
use nsyskit_pod_attach::{connect_and_run, options, runtime, Flags, Gate, Outcome};

/// Capture an nsys profile from a live Kubernetes pod through the API (no kubectl), copy the report, its SQLite
/// export and stats CSVs out with sha256 checks, run gate-check on it, and clean up.
#[derive(Parser, Debug)]
#[command(
    name = "pod-attach",
    version,
    after_help = "Example (prints the exact API requests and container argv; needs no cluster):\n  pod-attach --dry-run --pod vllm-0 --container engine \\\n    --image 'registry.example/nsys:2025.3.1' --duration 10"
)]
struct Args {
    /// Namespace of the pod
    #[arg(long, short = 'n', default_value_t = Flags::default().namespace)]
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
    /// Sidecar image with nsys, pinned by digest [default: $NSYSKIT_SIDECAR_IMAGE]; required unless --strategy
    /// session (no built-in default: see docs/pod-attach.md)
    #[arg(long)]
    image: Option<String>,
    /// Security setting of the sidecar, like kubectl debug's: general (SYS_PTRACE) or sysadmin (privileged)
    #[arg(long, default_value_t = Flags::default().profile)]
    profile: String,
    /// endpoint (engine under nsys --capture-range=cudaProfilerApi --capture-range-end=stop|repeat), session
    /// (engine under `nsys launch --session`), attach (only if the sidecar's nsys lists --attach-pid)
    #[arg(long, default_value_t = Flags::default().strategy)]
    strategy: String,
    /// Regex over /proc/*/cmdline finding the engine (children are followed to the CUDA-owning one)
    #[arg(long, default_value_t = Flags::default().process_match)]
    process_match: String,
    /// Capture window in seconds
    #[arg(long, default_value_t = Flags::default().duration)]
    duration: f64,
    /// nsys program in the container that runs it
    #[arg(long, default_value_t = Flags::default().nsys)]
    nsys: String,
    /// Scratch folder in that container (removed at cleanup)
    #[arg(long)]
    workdir: Option<String>,
    /// Local folder for the copied files
    #[arg(long, short = 'o', default_value_t = Flags::default().out_dir)]
    out_dir: String,
    /// Engine HTTP port (endpoint strategy)
    #[arg(long, default_value_t = Flags::default().port)]
    port: u16,
    /// nsys session name (session strategy)
    #[arg(long, default_value_t = Flags::default().session)]
    session: String,
    /// Seconds to wait for the sidecar to run and for the report to appear
    #[arg(long, default_value_t = Flags::default().wait_timeout)]
    wait_timeout: u64,
    /// Base name of the copied files
    #[arg(long, default_value_t = Flags::default().capture_name)]
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

impl Args {
    fn flags(&self) -> Flags {
        Flags {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            selector: self.selector.clone(),
            container: self.container.clone(),
            image: self.image.clone().or_else(|| std::env::var(pa::SIDECAR_IMAGE_ENV).ok().filter(|s| !s.is_empty())),
            profile: self.profile.clone(),
            strategy: self.strategy.clone(),
            process_match: self.process_match.clone(),
            duration: self.duration,
            nsys: self.nsys.clone(),
            workdir: self.workdir.clone(),
            out_dir: self.out_dir.clone(),
            port: self.port,
            session: self.session.clone(),
            wait_timeout: self.wait_timeout,
            capture_name: self.capture_name.clone(),
        }
    }
}

fn main() {
    main_with("pod-attach", || {
        let a = Args::parse();
        let style = a.out.style();
        let o = match options(&a.flags()) {
            Ok(o) => o,
            Err(e) => return report_error("pod-attach", &e),
        };
        if a.dry_run {
            return emit("pod-attach", pa::dry_run(&o), style);
        }
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return report_error("pod-attach", &e),
        };
        let gate = Gate::find_program(a.gate_check.as_deref());
        let sigint = async {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT".to_string()
        };
        match rt.block_on(connect_and_run(None, &o, &gate, sigint)) {
            Err(e) => report_error("pod-attach", &e),
            Ok(Outcome::Done(doc)) => emit("pod-attach", Ok(*doc), style),
            Ok(Outcome::Failed(e, _)) => report_error("pod-attach", &e),
            Ok(Outcome::Interrupted(why, _)) => {
                eprintln!("pod-attach: error: interrupted by {why} before the capture was copied out");
                130
            }
        }
    })
}
