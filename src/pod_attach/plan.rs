//! The container argv and API requests of a run, in order ([`plan`]), and `--dry-run`.

use super::*;

/// One step of a run: an API request, a command in a container, an HTTP call to the engine, or a local wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[schemars(rename = "Step")]
pub enum PlanStep {
    /// A Kubernetes API request.
    Api {
        method: String,
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
        body: Option<serde_json::Value>,
        why: String,
    },
    /// `POST …/pods/NAME/exec` (WebSocket) of this argv in this container.
    Exec { container: String, argv: Vec<String>, why: String },
    /// An HTTP request to the engine through a port-forward (`…/pods/NAME/portforward?ports=PORT`).
    Http { method: String, port: u16, path: String, why: String },
    /// A local wait (the capture window, or polling for the sidecar).
    Wait { seconds: f64, why: String },
}

/// Base path of a pod's API resource.
pub fn pod_path(ns: &str, pod: &str) -> String {
    format!("/api/v1/namespaces/{}/pods/{}", path_segment(ns), path_segment(pod))
}

/// A path segment, percent-encoded (names are validated as DNS-1123 first, so this changes only the dry run's
/// `<POD>` placeholder, which is kept).
fn path_segment(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~<>".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The strategic-merge patch body that adds the sidecar as an ephemeral container.
pub fn ephemeral_patch(o: &Options) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "ephemeralContainers": [{
                "name": o.sidecar_name,
                "image": o.image,
                "command": ["sleep", o.sidecar_sleep_s.to_string()],
                "targetContainerName": o.container_or_placeholder(),
                "stdin": false,
                "tty": false,
                "securityContext": o.profile.security_context(),
            }]
        }
    })
}

pub(super) fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// argv: the `/proc` listing (see [`PROC_LIST_SCRIPT`]).
pub fn argv_proc_list() -> Vec<String> {
    s(&["sh", "-c", PROC_LIST_SCRIPT, "nsyskit-proc-list"])
}
/// argv: the three nsys probes.
pub fn argv_nsys_probe(nsys: &str) -> [Vec<String>; 3] {
    [s(&[nsys, "--version"]), s(&[nsys, "--help"]), s(&[nsys, "profile", "--help"])]
}
/// argv: the parent of the work folder (may exist).
pub fn argv_mkdir_parent(workdir: &str) -> Vec<String> {
    let parent = Path::new(workdir).parent().map(|p| p.to_string_lossy().to_string()).unwrap_or_else(|| "/".into());
    s(&["mkdir", "-p", "--", &parent])
}
/// argv: the work folder itself, which must not exist yet (so cleanup's `rm -rf` only removes what this run made).
pub fn argv_mkdir(workdir: &str) -> Vec<String> {
    s(&["mkdir", "-m", "0700", "--", workdir])
}
/// argv: the checked variables of the engine's environment (see [`ENV_CHECK_SCRIPT`]).
pub fn argv_env_check(pid: &str) -> Vec<String> {
    s(&["sh", "-c", ENV_CHECK_SCRIPT, "nsyskit-env-check", pid])
}
/// argv of `--install-nsys apt`, in order: update the package lists, install the package, print its version.
pub fn argv_install_nsys(how: InstallNsys) -> [Vec<String>; 3] {
    match how {
        InstallNsys::Apt => [
            s(&["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "update"]),
            s(&[
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "-q",
                "-y",
                "install",
                "--no-install-recommends",
                NSYS_APT_PACKAGE,
            ]),
            s(&["dpkg-query", "-W", "-f=${Version}", NSYS_APT_PACKAGE]),
        ],
    }
}

/// Percent-encoding of a query value (RFC 3986 unreserved characters kept).
pub fn url_encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
/// argv: list the `.nsys-rep` files of a folder (size, mtime, path) — used before and after the capture.
pub fn argv_list_reports(dir: &str) -> Vec<String> {
    s(&[
        "find",
        dir,
        "-maxdepth",
        "1",
        "-type",
        "f",
        "-name",
        "*.nsys-rep",
        "-exec",
        "stat",
        "-c",
        "%s\t%Y\t%n",
        "{}",
        "+",
    ])
}
pub fn argv_copy(src: &str, dst: &str) -> Vec<String> {
    s(&["cp", "--", src, dst])
}
pub fn argv_session_start(o: &Options) -> Vec<String> {
    vec![
        o.nsys.clone(),
        "start".into(),
        format!("--session={}", o.session),
        "-o".into(),
        format!("{}/{}", o.workdir, o.capture_name),
    ]
}
pub fn argv_session_stop(o: &Options) -> Vec<String> {
    vec![o.nsys.clone(), "stop".into(), format!("--session={}", o.session)]
}
pub fn argv_attach(o: &Options, pid: &str) -> Vec<String> {
    vec![
        o.nsys.clone(),
        "profile".into(),
        format!("--attach-pid={pid}"),
        "--trace=cuda,nvtx,osrt".into(),
        "--cuda-graph-trace=node".into(),
        // CPU samples name the host code in unattributed step time (seed A28; step-budget's host_samples). With
        // --attach-pid nsys launches nothing, so its default is none; the seed's `--sample=cpu
        // --sampling-frequency=1000` is refused by nsys 2023.4 and 2025.3.1 (fixtures/logs/
        // nsys-2025.3.1_engine_samples_sampling-frequency.console.txt): process-tree at nsys's default period.
        "--sample=process-tree".into(),
        format!("--duration={}", o.duration_s.ceil() as u64),
        "-o".into(),
        format!("{}/{}", o.workdir, o.capture_name),
    ]
}
pub fn argv_export(o: &Options) -> Vec<String> {
    let base = format!("{}/{}", o.workdir, o.capture_name);
    // the one `nsys export` command line of the export layer (with --lazy=false, as every other caller)
    let mut v = vec![o.nsys.clone()];
    v.extend(crate::export::nsys_export_args(&format!("{base}.nsys-rep"), &format!("{base}.sqlite")));
    v
}
pub fn argv_stats(o: &Options) -> Vec<String> {
    let base = format!("{}/{}", o.workdir, o.capture_name);
    vec![
        o.nsys.clone(),
        "stats".into(),
        format!("--report={}", STATS_REPORTS.join(",")),
        "--format=csv".into(),
        "--force-export=false".into(),
        "-o".into(),
        base.clone(),
        format!("{base}.sqlite"),
    ]
}
/// argv: the names of the regular files in the work folder.
pub fn argv_list_workdir(workdir: &str) -> Vec<String> {
    s(&["find", workdir, "-maxdepth", "1", "-type", "f", "-printf", "%f\n"])
}
/// argv: `NAME<TAB>SIZE` then `sha256sum` lines for the named files of the work folder.
pub fn argv_checksums(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["sha256sum", "--"]);
    v.extend(names.iter().map(|n| format!("{workdir}/{n}")));
    v
}
pub fn argv_sizes(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["stat", "-c", "%s\t%n", "--"]);
    v.extend(names.iter().map(|n| format!("{workdir}/{n}")));
    v
}
/// argv: the tar stream of the named files, relative to the work folder.
pub fn argv_tar(workdir: &str, names: &[String]) -> Vec<String> {
    let mut v = s(&["tar", "cf", "-", "-C", workdir, "--"]);
    v.extend(names.iter().cloned());
    v
}
pub fn argv_cleanup_workdir(workdir: &str) -> Vec<String> {
    s(&["rm", "-rf", "--", workdir])
}
pub fn argv_end_sleep(sleep_s: u64) -> Vec<String> {
    vec!["sh".into(), "-c".into(), END_SLEEP_SCRIPT.into(), "nsyskit-end-sleep".into(), sleep_s.to_string()]
}

/// The exact request plan of a run (what `--dry-run` prints). Values only known while running (the engine PID,
/// the report's name) appear as `<ENGINE_PID>`, `<NSYS_PID>`, `<NEW_REPORT>`, `<FILES>`.
pub fn plan(o: &Options) -> Vec<PlanStep> {
    let pod = o.pod_or_placeholder();
    let base = pod_path(&o.namespace, pod);
    let mut v = Vec::new();
    match &o.pod {
        Some(_) => v.push(PlanStep::Api {
            method: "GET".into(),
            path: base.clone(),
            content_type: None,
            body: None,
            why: "find the pod".into(),
        }),
        None => v.push(PlanStep::Api {
            method: "GET".into(),
            path: format!(
                "/api/v1/namespaces/{}/pods?labelSelector={}",
                o.namespace,
                url_encode(o.selector.as_deref().unwrap_or(""))
            ),
            content_type: None,
            body: None,
            why: "find exactly one pod by selector".into(),
        }),
    }
    let sidecar = o.strategy != Strategy::Session;
    let tools_container = if sidecar { o.sidecar_name.clone() } else { o.container_or_placeholder().to_string() };
    let exec =
        |argv: Vec<String>, why: &str| PlanStep::Exec { container: tools_container.clone(), argv, why: why.into() };
    if sidecar {
        v.push(PlanStep::Api {
            method: "PATCH".into(),
            path: format!("{base}/ephemeralcontainers"),
            content_type: Some("application/strategic-merge-patch+json".into()),
            body: Some(ephemeral_patch(o)),
            why: "add the nsys sidecar sharing the engine's PID namespace".into(),
        });
        v.push(PlanStep::Api {
            method: "GET".into(),
            path: base.clone(),
            content_type: None,
            body: None,
            why: format!("poll until {} runs (up to {} s)", o.sidecar_name, o.wait_timeout_s),
        });
        v.push(PlanStep::Api {
            method: "GET".into(),
            path: format!(
                "/api/v1/namespaces/{}/events?fieldSelector={}",
                o.namespace,
                url_encode(&format!("involvedObject.name={pod}"))
            ),
            content_type: None,
            body: None,
            why: "only if the sidecar fails to run: the pod's events for the error".into(),
        });
    }
    if let Some(how) = o.install_nsys {
        let [u, i, q] = argv_install_nsys(how);
        v.push(exec(u, "--install-nsys apt: package lists"));
        v.push(exec(i, &format!("--install-nsys apt: install {NSYS_APT_PACKAGE} (a failure stops the run with apt's message; cleanup still runs)")));
        v.push(exec(q, "--install-nsys apt: record the installed version"));
    }
    v.push(exec(argv_proc_list(), "list /proc to find the engine PID"));
    v.push(exec(
        argv_env_check("<ENGINE_PID>"),
        "engine environment: CUDA_INJECTION64_PATH (a foreign CUDA injector blocks tracing), VLLM_TORCH_CUDA_PROFILE",
    ));
    for a in argv_nsys_probe(&o.nsys) {
        v.push(exec(a, "probe nsys capabilities"));
    }
    v.push(exec(argv_mkdir_parent(&o.workdir), "parent of the scratch folder"));
    v.push(exec(argv_mkdir(&o.workdir), "scratch folder (must not exist: cleanup removes only what this run made)"));
    match o.strategy {
        Strategy::Endpoint => {
            v.push(exec(argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"), "reports before the capture"));
            v.push(PlanStep::Http {
                method: "POST".into(),
                port: o.port,
                path: "/start_profile".into(),
                why: format!("engine calls cudaProfilerStart. {STOP_RESTART_NOTE}"),
            });
            v.push(PlanStep::Wait { seconds: o.duration_s, why: "capture window".into() });
            v.push(PlanStep::Http {
                method: "POST".into(),
                port: o.port,
                path: "/stop_profile".into(),
                why: "engine calls cudaProfilerStop; nsys writes a report".into(),
            });
            v.push(exec(
                argv_list_reports("/proc/<NSYS_PID>/root/<NSYS_OUTPUT_DIR>"),
                "poll for the new report until its size is stable",
            ));
            v.push(exec(
                argv_copy("/proc/<NSYS_PID>/root/<NEW_REPORT>", &format!("{}/{}.nsys-rep", o.workdir, o.capture_name)),
                "take the report",
            ));
        }
        Strategy::Session => {
            v.push(exec(argv_session_start(o), "start the session's collection"));
            v.push(PlanStep::Wait { seconds: o.duration_s, why: "capture window".into() });
            v.push(exec(argv_session_stop(o), "stop; nsys writes the report"));
        }
        Strategy::Attach => {
            v.push(exec(argv_attach(o, "<ENGINE_PID>"), "attach for the capture window"));
        }
    }
    v.push(exec(argv_export(o), "export SQLite"));
    v.push(exec(
        argv_size_of(&format!("{}/{}.nsys-rep", o.workdir, o.capture_name)),
        &format!(
            "size gate: the report must have at least {} bytes (--min-rep-bytes) before nsys stats",
            o.size_gate_bytes()
        ),
    ));
    v.push(exec(argv_stats(o), "nsys stats CSVs (only when the size gate passed: never stats on a tiny report)"));
    v.push(exec(argv_list_workdir(&o.workdir), "files to copy"));
    let files = vec!["<FILES>".to_string()];
    v.push(exec(argv_sizes(&o.workdir, &files), "sizes in the container"));
    v.push(exec(argv_checksums(&o.workdir, &files), "sha256 in the container"));
    v.push(exec(argv_tar(&o.workdir, &files), "copy out (tar stream over exec, written to disk as it arrives: only the listed regular files, each once, size and sha256 of the bytes written checked, capped)"));
    v.push(exec(argv_cleanup_workdir(&o.workdir), "cleanup: scratch folder"));
    if sidecar {
        v.push(exec(
            argv_end_sleep(o.sidecar_sleep_s),
            "cleanup: end the sidecar's sleep (ephemeral containers cannot be removed)",
        ));
    }
    v
}

/// A86, said at plan time: under `--capture-range-end=stop` the engine's nsys captures once per engine start.
pub const STOP_RESTART_NOTE: &str =
    "if the engine's nsys runs with --capture-range-end=stop, this is the engine's one \
    capture: each further capture needs an engine restart (a second run is refused before any POST)";

/// `--dry-run`: the plan, no cluster needed.
pub fn dry_run(o: &Options) -> Result<PodAttachDoc> {
    o.validate()?;
    let (schema, tool) = PodAttachDoc::header();
    let mut warnings = Vec::new();
    if o.pod.is_none() || o.container.is_none() {
        warnings.push(
            "without --pod and --container the plan shows <POD>/<CONTAINER>: a run finds them through the API".into(),
        );
    }
    if o.strategy == Strategy::Endpoint {
        warnings.push(STOP_RESTART_NOTE.into());
    }
    warnings.extend(crate::nsys_resolve::workload::warnings(&o.workload, false));
    Ok(PodAttachDoc {
        schema,
        tool,
        dry_run: true,
        strategy: o.strategy,
        namespace: o.namespace.clone(),
        pod: o.pod.clone(),
        container: o.container.clone(),
        plan: plan(o),
        provenance: None,
        out_dir: Some(o.out_dir.clone()),
        files: vec![],
        gate: None,
        kernel_profile: None,
        bundle: o.bundle.as_ref().map(|d| BundleOut {
            dir: d.clone(),
            file: Path::new(d).join(BUNDLE_FILE).display().to_string(),
            profiles: vec![],
        }),
        cleanup: vec![],
        warnings,
    })
}
