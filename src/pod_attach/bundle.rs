//! `--bundle`: the seed's `kernel_profile` fields and the profiles copied into the evidence bundle.

use super::*;

/// `--install-nsys`: what was installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NsysInstall {
    pub method: InstallNsys,
    pub package: String,
    /// `dpkg-query -W -f=${Version}` after the install.
    pub version: String,
}

/// The seed recipe's `kernel_profile` (step 5), as `--bundle` merges it: paths relative to the bundle folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelProfile {
    /// UTC (RFC 3339) when the capture started (the `/start_profile` POST, `nsys start`, or the attach), not a
    /// file's mtime.
    pub captured_at: String,
    /// `profiles/capture.nsys-rep`.
    pub nsys_rep_path: String,
    /// `profiles/gpu_kern_sum.csv` (`nsys stats` cuda_gpu_kern_sum), when nsys wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_csv_path: Option<String>,
    /// `profiles/cuda_api_sum.csv`, when nsys wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_api_csv_path: Option<String>,
    /// The capture window asked for (`--duration`, default 120 s).
    pub duration_s: f64,
    /// The engine PID in the pod's PID namespace (the CUDA-owning process pod-attach chose).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm_pid: Option<u32>,
    /// The sidecar image reference as used (with its digest when pinned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_image: Option<String>,
    /// `sha256:…` of the sidecar image: from the reference, else from the pod's status (what the kubelet pulled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_image_digest: Option<String>,
    /// The seed's value `kubectl-debug-share-processes` (endpoint, attach), so a consumer matching the seed finds
    /// it; `nsys-session-in-engine-container` (session, no sidecar).
    pub method: String,
    /// The precise mechanism behind `method`, with the reason it differs from the seed's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method_detail: Option<String>,
    /// `endpoint`, `session` or `attach`.
    pub strategy: Strategy,
    /// From `profiles/gpu_kern_sum.csv` (kern-csv-to-json's `top_kernels`: name, instances, times in ns, share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_kernels: Option<Vec<crate::kern_csv_to_json::StatsTopKernel>>,
    /// A52 (the seed's GB300 path): the source image digest, version and launch change of the copied nsys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_nsys: Option<CopiedNsys>,
}

/// The seed's GB300 path: a Blackwell-capable nsys copied from an approved CUDA 13 image into the serving
/// container by an operator-owned launch wrapper. pod-attach records what the seed asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CopiedNsys {
    /// `--nsys-source-image` as given (pinned by digest).
    pub source_image: String,
    /// Its `sha256:…` digest.
    pub source_image_digest: String,
    /// The version of the nsys that wrote the report (the export's metadata), i.e. the copied binary's.
    pub version: Option<String>,
    /// `--nsys-launch-change`: how the engine's launch was changed to run it.
    pub launch_change: String,
}

/// The seed's `method` value for the sidecar strategies.
pub const SEED_METHOD: &str = "kubectl-debug-share-processes";

/// What pod-attach does for the seed's `kubectl debug --share-processes`, and why the words differ.
pub const METHOD_DETAIL: &str = "ephemeral-container-share-processes: pod-attach adds the ephemeral container through \
    the Kubernetes API (PATCH pods/NAME/ephemeralcontainers with targetContainerName, the request `kubectl debug \
    --share-processes --target` makes); no kubectl runs";

/// What `--bundle` wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BundleOut {
    /// The bundle folder as given.
    pub dir: String,
    /// The bundle file merged into (`DIR/inference_perfbench_v1.json`).
    pub file: String,
    /// The files copied into `DIR/profiles/` (path relative to the bundle folder, size, sha256 of the bytes written).
    pub profiles: Vec<CopiedFile>,
}

/// The bundle's copies of the copied-out files: (name in the out folder, name in `profiles/`).
fn bundle_names(capture_name: &str) -> [(String, &'static str); 3] {
    [
        (format!("{capture_name}.nsys-rep"), "capture.nsys-rep"),
        (format!("{capture_name}_cuda_gpu_kern_sum.csv"), "gpu_kern_sum.csv"),
        (format!("{capture_name}_cuda_api_sum.csv"), "cuda_api_sum.csv"),
    ]
}

/// `--bundle DIR`: copy the report and the two CSVs into `DIR/profiles/` (sha256 of the bytes written checked,
/// links not followed), fill `doc.kernel_profile` and `doc.bundle`, and merge into `DIR/inference_perfbench_v1.json`
/// through bundle-merge ([`crate::bundle_merge::run`]: the kernel CSV's `nsyskit.stats/v1` document, then this
/// document, whose `kernel_profile` members go to the bundle's `kernel_profile`); everything else in the bundle
/// stays byte-identical.
pub fn write_bundle(dir: &Path, doc: &mut PodAttachDoc, o: &Options) -> Result<()> {
    let prov = doc.provenance.clone().ok_or_else(|| Error::env("--bundle: no capture to put in the bundle"))?;
    let profiles = dir.join("profiles");
    for p in [dir, profiles.as_path()] {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.file_type().is_symlink() || !m.is_dir() {
                return Err(Error::input(format!(
                    "--bundle: {} is {}, not a folder: refused",
                    p.display(),
                    if m.file_type().is_symlink() { "a symbolic link" } else { "a file" }
                ))
                .with_arg("--bundle"));
            }
        }
    }
    std::fs::create_dir_all(&profiles)
        .map_err(|e| Error::env(format!("{}: {e}", profiles.display())).with_arg("--bundle"))?;
    let mut copied = Vec::new();
    for (src, dst) in bundle_names(&o.capture_name) {
        let Some(f) = doc.files.iter().find(|f| f.name == src) else { continue };
        let n = copy_verified(Path::new(&f.path), &profiles, dst, &f.sha256)?;
        copied.push(CopiedFile {
            name: dst.to_string(),
            path: format!("profiles/{dst}"),
            size: n,
            sha256: f.sha256.clone(),
        });
    }
    if !copied.iter().any(|c| c.name == "capture.nsys-rep") {
        return Err(Error::env("--bundle: the report was not copied out"));
    }
    let captured_at =
        prov.captured_at.clone().unwrap_or_else(|| crate::contract::rfc3339_utc(std::time::SystemTime::now()));
    let mut stats = None;
    let mut top = None;
    if copied.iter().any(|c| c.name == "gpu_kern_sum.csv") {
        let csv = profiles.join("gpu_kern_sum.csv");
        let bytes = std::fs::read(&csv).map_err(|e| Error::env(format!("{}: {e}", csv.display())))?;
        let opts =
            crate::kern_csv_to_json::KernCsvOptions { captured_at: Some(captured_at.clone()), ..Default::default() };
        match crate::kern_csv_to_json::convert(&bytes, "profiles/gpu_kern_sum.csv", Some(&csv), None, &opts) {
            Ok(s) if s.status == "ok" => {
                top = s.top_kernels.clone();
                stats = Some(s);
            }
            Ok(s) => doc.warnings.push(format!(
                "--bundle: nsys stats skipped cuda_gpu_kern_sum ({}): no top_kernels",
                s.skipped_reason.unwrap_or_default()
            )),
            Err(e) => doc.warnings.push(format!(
                "--bundle: profiles/gpu_kern_sum.csv ({} bytes) not converted: {}: no top_kernels",
                bytes.len(),
                e.message
            )),
        }
    } else {
        doc.warnings
            .push("--bundle: nsys stats wrote no cuda_gpu_kern_sum CSV: no summary_csv_path, no top_kernels".into());
    }
    let sidecar = doc.strategy != Strategy::Session;
    doc.kernel_profile = Some(KernelProfile {
        captured_at,
        nsys_rep_path: "profiles/capture.nsys-rep".into(),
        summary_csv_path: copied
            .iter()
            .any(|c| c.name == "gpu_kern_sum.csv")
            .then(|| "profiles/gpu_kern_sum.csv".into()),
        cuda_api_csv_path: copied
            .iter()
            .any(|c| c.name == "cuda_api_sum.csv")
            .then(|| "profiles/cuda_api_sum.csv".into()),
        duration_s: o.duration_s,
        vllm_pid: prov.engine.as_ref().map(|e| e.pid),
        sidecar_image: prov.sidecar_image.clone(),
        sidecar_image_digest: prov.sidecar_image_digest.clone(),
        method: if sidecar { SEED_METHOD } else { "nsys-session-in-engine-container" }.into(),
        method_detail: sidecar.then(|| METHOD_DETAIL.to_string()),
        strategy: doc.strategy,
        top_kernels: top,
        copied_nsys: prov.copied_nsys.clone(),
    });
    let file = dir.join(BUNDLE_FILE);
    doc.bundle = Some(BundleOut { dir: dir.display().to_string(), file: file.display().to_string(), profiles: copied });
    let mut docs = Vec::new();
    if let Some(s) = &stats {
        docs.push(crate::bundle_merge::DocIn {
            value: serde_json::to_value(s).map_err(|e| Error::env(e.to_string()))?,
            source: "profiles/gpu_kern_sum.csv".into(),
            line: 1,
        });
    }
    docs.push(crate::bundle_merge::DocIn {
        value: serde_json::to_value(&*doc).map_err(|e| Error::env(e.to_string()))?,
        source: "pod-attach".into(),
        line: 1,
    });
    crate::bundle_merge::run(&file, &docs, crate::bundle_merge::Mode::Write).map_err(|e| e.context("--bundle"))?;
    Ok(())
}
