//! The gate of the copied capture and the output document.

use super::*;

/// How the copied capture is gated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// No gate: the verdict is `NOT_RUN` with this reason.
    Skip(String),
    /// Run this `gate-check` program (`REPORT --sqlite SQLITE --compact`) and read its exit code and document
    /// (`--gate-check PROGRAM`: an operator pins the gate they trust).
    Program(PathBuf),
    /// Call [`crate::gate_check::run`] in this process: the default of the binary and of the Nushell command, as in
    /// serve-capture.
    Library,
}

fn retry_ids(doc: Option<&serde_json::Value>) -> Vec<String> {
    doc.and_then(|d| d.get("retry"))
        .and_then(|r| r.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Gate the copied files (`REPORT`, with its export `SQLITE`): `PASS`, `RETRY`, else `NOT_RUN` with why.
pub fn run_gate(gate: &Gate, report: &Path, sqlite: &Path) -> PodGateResult {
    run_gate_with(gate, report, sqlite, None)
}

/// [`run_gate`] with G2's threshold (`--min-rep-bytes`) when given.
pub fn run_gate_with(gate: &Gate, report: &Path, sqlite: &Path, min_rep_bytes: Option<u64>) -> PodGateResult {
    match gate {
        Gate::Skip(reason) => PodGateResult { verdict: "NOT_RUN".into(), reason: reason.clone(), document: None },
        Gate::Program(bin) => run_gate_program(bin, report, sqlite, min_rep_bytes),
        Gate::Library => {
            let mut opts = crate::gate_check::GateOptions {
                capture: report.to_path_buf(),
                sqlite: Some(sqlite.to_path_buf()),
                ..Default::default()
            };
            opts.thresholds.min_rep_bytes = min_rep_bytes;
            match crate::gate_check::run(&opts) {
                Ok(doc) => {
                    let code = doc.exit_code();
                    let doc = serde_json::to_value(&doc).ok();
                    let (verdict, reason) = if code == 0 {
                        ("PASS", "gate-check (library) said PASS".to_string())
                    } else {
                        (
                            "RETRY",
                            format!(
                                "gate-check (library): gates {} said retry (see document.gates)",
                                retry_ids(doc.as_ref()).join(",")
                            ),
                        )
                    };
                    PodGateResult { verdict: verdict.into(), reason, document: doc }
                }
                Err(e) => PodGateResult {
                    verdict: "NOT_RUN".into(),
                    reason: format!("gate-check (library): {}", e.message),
                    document: None,
                },
            }
        }
    }
}

fn run_gate_program(bin: &Path, report: &Path, sqlite: &Path, min_rep_bytes: Option<u64>) -> PodGateResult {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg(report).arg("--sqlite").arg(sqlite).arg("--compact");
    if let Some(n) = min_rep_bytes {
        cmd.arg("--min-rep-bytes").arg(n.to_string());
    }
    match cmd.output() {
        Ok(out) => {
            let doc = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
            let verdict = match out.status.code() {
                Some(0) => "PASS",
                Some(1) => "RETRY",
                _ => "NOT_RUN",
            };
            let retry = retry_ids(doc.as_ref());
            let reason = match verdict {
                "NOT_RUN" => format!(
                    "{} exited {:?}: {}",
                    bin.display(),
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                "RETRY" => {
                    format!("{} exited 1: gates {} said retry (see document.gates)", bin.display(), retry.join(","))
                }
                _ => format!("{} exited 0", bin.display()),
            };
            PodGateResult { verdict: verdict.into(), reason, document: doc }
        }
        Err(e) => {
            PodGateResult { verdict: "NOT_RUN".into(), reason: format!("{}: {e}", bin.display()), document: None }
        }
    }
}

/// The result of `gate-check` on the copied-out capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "GateResult")]
pub struct PodGateResult {
    /// `PASS`, `RETRY`, or `NOT_RUN` with the reason in `reason`.
    pub verdict: String,
    pub reason: String,
    /// The gate document, when it ran.
    pub document: Option<serde_json::Value>,
}

/// Where the capture came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Provenance")]
pub struct PodProvenance {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: Option<String>,
    pub node: Option<String>,
    pub container: String,
    pub container_image: Option<String>,
    /// The ephemeral container (endpoint/attach strategies).
    pub sidecar: Option<String>,
    pub sidecar_image: Option<String>,
    /// `sha256:…` of the sidecar image: from `--image` when pinned, else from the pod's
    /// `ephemeralContainerStatuses[].imageID` (`--allow-unpinned-image`).
    pub sidecar_image_digest: Option<String>,
    /// The sidecar's `imageID` in the pod's status (what the kubelet pulled), when reported.
    pub sidecar_image_id: Option<String>,
    /// `--install-nsys`: the package and version installed in the sidecar.
    pub nsys_install: Option<NsysInstall>,
    pub nsys: NsysCaps,
    pub engine: Option<EngineChoice>,
    /// What was checked of the engine's environment and command line before the capture.
    pub engine_env: Option<EngineEnv>,
    /// UTC (RFC 3339) when the capture started.
    pub captured_at: Option<String>,
    /// The report as nsys wrote it, in the container's filesystem.
    pub source_report: Option<String>,
    pub started_at_unix_s: f64,
    pub capture_s: f64,
    /// A30: `--cuda-graph-trace` of the engine's nsys, read before the capture (`node…`; a run without it is
    /// refused).
    #[serde(default)]
    pub graph_trace: Option<String>,
    /// A47: `libcupti` beside nsys's injection library and mapped by the engine, read before the capture.
    #[serde(default)]
    pub cupti: Option<CuptiCheck>,
    /// A53: the driver as read in the container that runs nsys (compared with nsys before the capture).
    #[serde(default)]
    pub driver: Option<DriverInfo>,
    /// A58: the report's size in the container, read before `nsys stats` (the size gate).
    #[serde(default)]
    pub report_bytes: Option<u64>,
    /// A58: the size gate's threshold (`--min-rep-bytes`, else gate-check's default).
    #[serde(default)]
    pub min_rep_bytes: Option<u64>,
    /// The nsys version that wrote the report (the export's metadata): for endpoint, the engine's nsys.
    #[serde(default)]
    pub report_nsys_version: Option<String>,
    /// A52: the copied nsys of the seed's GB300 path (`--nsys-source-image`, `--nsys-launch-change`).
    #[serde(default)]
    pub copied_nsys: Option<CopiedNsys>,
    /// B72: which process called cudaProfilerStart, against the engine PID pod-attach resolved.
    #[serde(default)]
    pub capture_trigger: Option<CaptureTrigger>,
    /// The workload (question, client command, request rate, concurrency, seed policy), as serve-capture
    /// records it in `provenance.workload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::nsys_resolve::Workload>,
}

/// The `pod-attach` document.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PodAttachDoc {
    pub schema: String,
    pub tool: Tool,
    pub dry_run: bool,
    pub strategy: Strategy,
    pub namespace: String,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// `--dry-run`: the exact requests and argv a run issues, in order.
    pub plan: Vec<PlanStep>,
    pub provenance: Option<PodProvenance>,
    pub out_dir: Option<String>,
    pub files: Vec<CopiedFile>,
    pub gate: Option<PodGateResult>,
    /// `--bundle`: the seed's `kernel_profile`, as merged into the bundle.
    pub kernel_profile: Option<KernelProfile>,
    /// `--bundle`: where it was written.
    pub bundle: Option<BundleOut>,
    /// What cleanup did, and what it could not do.
    pub cleanup: Vec<String>,
    pub warnings: Vec<String>,
}

impl Document for PodAttachDoc {
    const KIND: &'static str = "pod-attach";
    const TOOL: &'static str = "pod-attach";
    fn exit_code(&self) -> i32 {
        match &self.gate {
            Some(g) if g.verdict == "RETRY" => 1,
            _ => 0,
        }
    }
}
