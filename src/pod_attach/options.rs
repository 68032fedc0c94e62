//! Validated options, the flags with their defaults, and the per-step deadlines.

use super::*;

/// How many `--wait-timeout`s a command doing real work in the container may take ([`Options::work_deadline`]).
pub const WORK_TIMEOUTS: u64 = 10;
/// The copy-out's slowest accepted average rate, bytes per second ([`Options::copy_deadline`]): 1 MiB/s.
pub const COPY_MIN_RATE: u64 = 1 << 20;

/// Everything a run needs to know up front (the binary's flags, validated).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Options {
    pub namespace: String,
    /// `--pod`; None means find it with `selector`.
    pub pod: Option<String>,
    pub selector: Option<String>,
    /// `--container`: the engine's container (the ephemeral container's `targetContainerName`).
    pub container: Option<String>,
    /// The sidecar image (`--image`, else `$NSYSKIT_SIDECAR_IMAGE`, else [`DEFAULT_SIDECAR_IMAGE`]).
    pub image: String,
    /// `--allow-unpinned-image`: accept an image reference without `@sha256:<digest>`.
    pub allow_unpinned_image: bool,
    /// `--install-nsys apt`: install nsys in the sidecar before probing it (Path B).
    pub install_nsys: Option<InstallNsys>,
    pub profile: SecurityProfile,
    pub strategy: Strategy,
    pub process_match: String,
    pub duration_s: f64,
    /// nsys program in the sidecar (endpoint, attach) or in the engine's container (session).
    pub nsys: String,
    /// Scratch folder inside the container that runs nsys export/stats; created by pod-attach (it must not
    /// exist) and removed at cleanup. Its name starts with [`WORKDIR_PREFIX`].
    pub workdir: String,
    /// Local folder the copied-out files go to.
    pub out_dir: String,
    /// `--max-copy-bytes`: refuse a copy-out whose files total more (default: the sizes `stat` gave in the
    /// container; the tar stream is cut when it runs past them).
    pub max_copy_bytes: Option<u64>,
    /// `--bundle DIR`: copy the report and CSVs into `DIR/profiles/` and merge `kernel_profile` into
    /// `DIR/inference_perfbench_v1.json`.
    pub bundle: Option<String>,
    /// Engine HTTP port (endpoint strategy).
    pub port: u16,
    /// Session name (session strategy).
    pub session: String,
    /// Ephemeral container name.
    pub sidecar_name: String,
    /// The sidecar's `sleep` length in seconds; also how cleanup recognises that sleep.
    pub sidecar_sleep_s: u64,
    /// Seconds to wait for the sidecar to run and for the new report; also the deadline of every remote step
    /// ([`Options::step_deadline`] and the others derived from it). Positive.
    pub wait_timeout_s: u64,
    /// Base name of the capture files.
    pub capture_name: String,
    /// `--min-rep-bytes`: the size gate (G2's threshold) the report must reach before `nsys stats` runs, and the
    /// gate's; default: gate-check's throughput-tier default.
    #[serde(default)]
    pub min_rep_bytes: Option<u64>,
    /// `--nsys-source-image`: the approved image (pinned by digest) the engine container's nsys was copied from
    /// (the seed's GB300 path).
    #[serde(default)]
    pub nsys_source_image: Option<String>,
    /// `--nsys-launch-change`: how the engine's launch was changed to run the copied nsys.
    #[serde(default)]
    pub nsys_launch_change: Option<String>,
    /// The workload (`--question`, `--client-cmd`, `--request-rate`, `--concurrency`, `--seed`), recorded as
    /// serve-capture records it (`provenance.workload`, [`crate::nsys_resolve::workload::from_command`]).
    #[serde(default)]
    pub workload: crate::nsys_resolve::Workload,
}

/// A DNS-1123 label (namespace and container names): 1–63 of `a-z`, `0-9`, `-`, starting and ending
/// alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain (pod names): at most 253 characters, dot-separated labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The `sha256:<64 hex>` digest an image reference is pinned by; None when it has no `@`; an error when the
/// part after `@` is not a sha256 digest.
pub fn image_digest(image: &str) -> Result<Option<String>> {
    let Some((_, d)) = image.rsplit_once('@') else { return Ok(None) };
    let hex = d.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        Ok(Some(d.to_string()))
    } else {
        Err(Error::usage(format!(
            "--image {image:?}: `@{d}` is not a digest (expected @sha256: and 64 lowercase hex digits)"
        ))
        .with_arg("--image"))
    }
}

/// A `--workdir` pod-attach may create and later `rm -rf`: an absolute, normalised path (no `.`, `..` or empty
/// component) whose last component is `nsyskit-pod-attach-<id>` (letters, digits, `.`, `_`, `-`). `/tmp`, `/`,
/// a home folder or any folder not dedicated to pod-attach is refused.
pub fn check_workdir(w: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::usage(format!(
            "--workdir {w:?} refused: {why}. It must be a dedicated scratch folder, an absolute path whose last \
             component starts with {WORKDIR_PREFIX} (e.g. /tmp/{WORKDIR_PREFIX}run1): cleanup removes it with rm -rf"
        ))
        .with_arg("--workdir"))
    };
    if !w.starts_with('/') {
        return bad("not absolute");
    }
    let comps: Vec<&str> = w[1..].split('/').collect();
    if comps.iter().any(|c| c.is_empty() || *c == "." || *c == "..") {
        return bad("it has an empty, `.` or `..` component");
    }
    let last = comps.last().copied().unwrap_or("");
    match last.strip_prefix(WORKDIR_PREFIX) {
        Some(id) if !id.is_empty() && last.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) => Ok(()),
        _ => bad(&format!("its last component {last:?} is not {WORKDIR_PREFIX}<id>")),
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        self.validate_capture_checks()?;
        if self.pod.is_none() && self.selector.is_none() {
            return Err(Error::usage("give --pod NAME or --selector LABELS to find the pod").with_arg("--pod"));
        }
        if !is_dns1123_label(&self.namespace) {
            return Err(Error::usage(format!(
                "--namespace {:?} is not a DNS-1123 label (1-63 of a-z, 0-9, '-', starting and ending alphanumeric)",
                self.namespace
            ))
            .with_arg("--namespace"));
        }
        if let Some(p) = &self.pod {
            if !is_dns1123_subdomain(p) {
                return Err(Error::usage(format!(
                    "--pod {p:?} is not a DNS-1123 subdomain (at most 253 of a-z, 0-9, '-', '.', each dot-separated part starting and ending alphanumeric)"
                ))
                .with_arg("--pod"));
            }
        }
        if let Some(c) = &self.container {
            if !is_dns1123_label(c) {
                return Err(Error::usage(format!("--container {c:?} is not a DNS-1123 label (1-63 of a-z, 0-9, '-')"))
                    .with_arg("--container"));
            }
        }
        if let Some(sel) = &self.selector {
            if sel.trim().is_empty() || sel.chars().any(|c| c.is_control()) {
                return Err(Error::usage(format!("--selector {sel:?} is empty or holds control characters"))
                    .with_arg("--selector"));
            }
        }
        regex::Regex::new(&self.process_match).map_err(|e| {
            Error::usage(format!("--process-match {:?} is not a valid regex: {e}", self.process_match))
                .with_arg("--process-match")
        })?;
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err(Error::usage(format!(
                "--duration must be a positive number of seconds, got {}",
                self.duration_s
            ))
            .with_arg("--duration"));
        }
        check_workdir(&self.workdir)?;
        for (flag, v) in [("--session", &self.session), ("--capture-name", &self.capture_name)] {
            if v.is_empty()
                || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
                || v.starts_with('.')
            {
                return Err(
                    Error::usage(format!("{flag} {v:?} must be letters, digits, '-', '_' or '.'")).with_arg(flag)
                );
            }
        }
        if !is_dns1123_label(&self.sidecar_name) {
            return Err(Error::usage(format!("sidecar name {:?} is not a DNS-1123 label", self.sidecar_name)));
        }
        if self.wait_timeout_s == 0 {
            return Err(Error::usage(
                "--wait-timeout must be a positive number of seconds (it bounds every remote step)",
            )
            .with_arg("--wait-timeout"));
        }
        if self.max_copy_bytes == Some(0) {
            return Err(Error::usage("--max-copy-bytes must be positive").with_arg("--max-copy-bytes"));
        }
        if let Some(b) = &self.bundle {
            if b.is_empty() {
                return Err(Error::usage("--bundle needs a folder").with_arg("--bundle"));
            }
        }
        if self.strategy != Strategy::Session {
            if self.image.trim().is_empty() {
                return Err(
                    Error::usage(format!("--image is empty (default {DEFAULT_SIDECAR_IMAGE})")).with_arg("--image")
                );
            }
            if image_digest(&self.image)?.is_none() && !self.allow_unpinned_image {
                return Err(Error::usage(format!(
                    "--image {:?} is not pinned by digest (@sha256:<64 hex>): a tag can move to other bytes between \
                     runs. Pin it (e.g. the default {DEFAULT_SIDECAR_IMAGE}), or pass --allow-unpinned-image to accept \
                     it (the digest the kubelet pulled is then recorded from the pod's status)",
                    self.image
                ))
                .with_arg("--image"));
            }
        } else if self.install_nsys.is_some() {
            return Err(Error::usage(
                "--install-nsys installs nsys in the sidecar; the session strategy adds no sidecar",
            )
            .with_arg("--install-nsys"));
        }
        Ok(())
    }
    /// The deadline of one API request or short command in the container (listings, probes, `mkdir`, the
    /// engine checks, `nsys start`, a port-forwarded POST, each cleanup step): `--wait-timeout`.
    pub fn step_deadline(&self) -> Duration {
        Duration::from_secs(self.wait_timeout_s)
    }
    /// The deadline of a command doing real work in the container (`apt-get`, `nsys export`, `nsys stats`,
    /// `nsys stop`, `sha256sum`, the report's `cp`): [`WORK_TIMEOUTS`] × `--wait-timeout`.
    pub fn work_deadline(&self) -> Duration {
        Duration::from_secs(self.wait_timeout_s.saturating_mul(WORK_TIMEOUTS))
    }
    /// The deadline of `nsys profile --attach-pid … --duration=D`: D plus [`Options::work_deadline`].
    pub fn attach_deadline(&self) -> Duration {
        Duration::from_secs(
            (self.duration_s.ceil().max(0.0) as u64).saturating_add(self.wait_timeout_s.saturating_mul(WORK_TIMEOUTS)),
        )
    }
    /// The copy-out's total deadline for `bytes` listed: `--wait-timeout` plus the bytes at [`COPY_MIN_RATE`]
    /// (a stream that trickles is stopped here); a stall of `--wait-timeout` without a byte stops it earlier.
    pub fn copy_deadline(&self, bytes: u64) -> Duration {
        Duration::from_secs(self.wait_timeout_s.saturating_add(bytes.div_ceil(COPY_MIN_RATE)))
    }
    /// The report size `nsys stats` and the gate require: `--min-rep-bytes`, else gate-check's default.
    pub fn size_gate_bytes(&self) -> u64 {
        self.min_rep_bytes
            .unwrap_or_else(|| crate::gate_check::default_min_rep_bytes(crate::gate_check::GateOptions::default().tier))
    }
    /// A52: the copied nsys's record (`--nsys-source-image`, `--nsys-launch-change`), with the version of the
    /// nsys that wrote the report.
    pub fn copied_nsys(&self, version: Option<String>) -> Option<CopiedNsys> {
        let image = self.nsys_source_image.clone()?;
        Some(CopiedNsys {
            source_image_digest: image_digest(&image).ok().flatten().unwrap_or_default(),
            source_image: image,
            version,
            launch_change: self.nsys_launch_change.clone().unwrap_or_default(),
        })
    }
    fn validate_capture_checks(&self) -> Result<()> {
        match (&self.nsys_source_image, &self.nsys_launch_change) {
            (Some(i), Some(l)) => {
                if image_digest(i)?.is_none() {
                    return Err(Error::usage(format!(
                        "--nsys-source-image {i:?} is not pinned by digest (@sha256:<64 hex>): the seed's GB300 path \
                         records the source image digest of the copied nsys"
                    ))
                    .with_arg("--nsys-source-image"));
                }
                if l.trim().is_empty() {
                    return Err(Error::usage("--nsys-launch-change is empty").with_arg("--nsys-launch-change"));
                }
            }
            (Some(_), None) => {
                return Err(Error::usage(
                    "--nsys-source-image needs --nsys-launch-change (how the engine's launch runs the copied nsys)",
                )
                .with_arg("--nsys-launch-change"))
            }
            (None, Some(_)) => {
                return Err(Error::usage(
                    "--nsys-launch-change needs --nsys-source-image (the approved image the nsys was copied from)",
                )
                .with_arg("--nsys-source-image"))
            }
            (None, None) => {}
        }
        Ok(())
    }
    pub(super) fn pod_or_placeholder(&self) -> &str {
        self.pod.as_deref().unwrap_or("<POD>")
    }
    pub(super) fn container_or_placeholder(&self) -> &str {
        self.container.as_deref().unwrap_or("<CONTAINER>")
    }
}

/// pod-attach's flags as plain values, with the binary's defaults ([`Flags::default`]); both adapters (the
/// binary's clap arguments, the Nushell command's signature) fill one and call [`options`]. `image` None: the
/// adapter found neither `--image` nor `$NSYSKIT_SIDECAR_IMAGE`, so [`DEFAULT_SIDECAR_IMAGE`] is used.
#[derive(Debug, Clone, PartialEq)]
pub struct Flags {
    pub namespace: String,
    pub pod: Option<String>,
    pub selector: Option<String>,
    pub container: Option<String>,
    pub image: Option<String>,
    pub allow_unpinned_image: bool,
    pub install_nsys: Option<String>,
    pub profile: String,
    pub strategy: String,
    pub process_match: String,
    pub duration: f64,
    pub nsys: String,
    pub workdir: Option<String>,
    pub out_dir: String,
    pub max_copy_bytes: Option<u64>,
    pub bundle: Option<String>,
    pub port: u16,
    pub session: String,
    pub wait_timeout: u64,
    pub capture_name: String,
    pub min_rep_bytes: Option<u64>,
    pub nsys_source_image: Option<String>,
    pub nsys_launch_change: Option<String>,
    pub question: Option<String>,
    pub client_cmd: Option<String>,
    pub request_rate: Option<String>,
    pub concurrency: Option<u64>,
    pub seed: Option<String>,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            namespace: "default".into(),
            pod: None,
            selector: None,
            container: None,
            image: None,
            allow_unpinned_image: false,
            install_nsys: None,
            profile: "general".into(),
            strategy: "endpoint".into(),
            process_match: DEFAULT_PROCESS_MATCH.into(),
            duration: DEFAULT_DURATION_S,
            nsys: "nsys".into(),
            workdir: None,
            out_dir: "pod-attach-out".into(),
            max_copy_bytes: None,
            bundle: None,
            port: 8000,
            session: "nsyskit".into(),
            wait_timeout: 120,
            capture_name: "capture".into(),
            min_rep_bytes: None,
            nsys_source_image: None,
            nsys_launch_change: None,
            question: None,
            client_cmd: None,
            request_rate: None,
            concurrency: None,
            seed: None,
        }
    }
}

/// The workload record from the flags and `--client-cmd`'s own flags (a disagreement is a usage error naming
/// both; `--question` is read here: the adapters pass it absolute).
fn workload_of(f: &Flags) -> Result<crate::nsys_resolve::Workload> {
    let spec = crate::nsys_resolve::WorkloadSpec {
        question: f.question.as_ref().map(PathBuf::from),
        request_rate: f.request_rate.clone(),
        concurrency: f.concurrency,
        seed: f.seed.clone(),
        ..Default::default()
    };
    let argv =
        match &f.client_cmd {
            Some(c) => Some(shlex::split(c).ok_or_else(|| {
                Error::usage(format!("--client-cmd {c:?}: unbalanced quotes")).with_arg("--client-cmd")
            })?),
            None => None,
        };
    let redacted = f.client_cmd.as_deref().map(|c| crate::nsys_resolve::redact_command(c).0);
    crate::nsys_resolve::workload::from_command(&spec, argv.as_deref(), redacted, None)
}

/// The run's [`Options`] from the flags: a per-run id names the sidecar (`nsyskit-ID`) and the default work
/// folder (`/tmp/nsyskit-pod-attach-ID`), and a per-run sleep length lets cleanup recognise this sidecar's sleep.
/// Validated (usage errors name the flag).
pub fn options(f: &Flags) -> Result<Options> {
    let id = format!(
        "{:x}",
        std::process::id() as u64
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
                & 0xffff_ffff)
    );
    let o = Options {
        namespace: f.namespace.clone(),
        pod: f.pod.clone(),
        selector: f.selector.clone(),
        container: f.container.clone(),
        image: f.image.clone().unwrap_or_else(|| DEFAULT_SIDECAR_IMAGE.to_string()),
        allow_unpinned_image: f.allow_unpinned_image,
        install_nsys: f.install_nsys.as_deref().map(InstallNsys::parse).transpose()?,
        profile: SecurityProfile::parse(&f.profile)?,
        strategy: Strategy::parse(&f.strategy)?,
        process_match: f.process_match.clone(),
        duration_s: f.duration,
        nsys: f.nsys.clone(),
        workdir: f.workdir.clone().unwrap_or_else(|| format!("/tmp/{WORKDIR_PREFIX}{id}")),
        out_dir: f.out_dir.clone(),
        max_copy_bytes: f.max_copy_bytes,
        bundle: f.bundle.clone(),
        port: f.port,
        session: f.session.clone(),
        sidecar_name: format!("nsyskit-{id}"),
        sidecar_sleep_s: (f.duration.ceil().max(0.0) as u64)
            + 3 * f.wait_timeout
            + 600
            + (std::process::id() as u64 % 997),
        wait_timeout_s: f.wait_timeout,
        capture_name: f.capture_name.clone(),
        min_rep_bytes: f.min_rep_bytes,
        nsys_source_image: f.nsys_source_image.clone(),
        nsys_launch_change: f.nsys_launch_change.clone(),
        workload: workload_of(f)?,
    };
    o.validate()?;
    Ok(o)
}
