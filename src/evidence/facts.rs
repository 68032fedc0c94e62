//! Capture facts: from a provenance document ([`apply_provenance`]) or from an export's metadata tables
//! ([`export_facts`]), normalised so that two captures' facts compare.

use super::*;

/// Facts from a provenance document (`nsyskit.provenance/v1` from `nsys-resolve`; the accepted paths are listed
/// in docs/compare-report.md). What the provenance records replaces what an export says.
pub fn apply_provenance(f: &mut CaptureFacts, p: &Value, prefix: &str) {
    let set = |fact: &mut Fact, paths: &[&str]| {
        if let Some((path, v)) = lookup(p, paths) {
            *fact = Fact::known(v.clone(), format!("{prefix}.{path}"));
        }
    };
    set(&mut f.nsys_version, &["nsys.version", "nsys.resolved_version", "nsys_version"]);
    if let Value::String(v) = &f.nsys_version.value {
        f.nsys_version.value = Value::String(normalize_version(v));
    }
    set(
        &mut f.capture_flags,
        &["capture.flags_argv", "capture.flags", "capture.argv", "capture.args", "capture_flags"],
    );
    // a flag string is compared as its list of words
    if let Value::String(s) = &f.capture_flags.value {
        let words: Vec<Value> = s.split_whitespace().map(|w| Value::String(w.to_string())).collect();
        f.capture_flags.value = Value::Array(words);
    }
    if f.capture_flags.source.starts_with(prefix) {
        if let Some(words) = f.capture_flags.value.as_array().cloned() {
            let words: Vec<String> = words.iter().filter_map(|w| w.as_str().map(String::from)).collect();
            f.capture_flags.value = serde_json::json!(profile_flags(&words));
        }
    }
    // empty flags (`flags_argv: []` when --flags was not given) record nothing
    if f.capture_flags.value.as_array().map(|a| a.is_empty()).unwrap_or(false)
        && f.capture_flags.source.starts_with(prefix)
    {
        f.capture_flags = Fact::default();
    }
    set(&mut f.trace_set, &["capture.trace", "capture.trace_set", "trace_set"]);
    set(&mut f.graph_trace_level, &["capture.cuda_graph_trace", "capture.graph_trace_level"]);
    set(&mut f.window, &["capture.window", "window"]);
    set(&mut f.warmup, &["capture.warmup", "warmup", "workload.warmup"]);
    set(&mut f.instrumentation, &["capture.instrumentation", "instrumentation"]);
    set(&mut f.clock_policy, &["gpu.clock_policy", "clock_policy", "workload.clock_policy"]);
    set(&mut f.gpu, &["gpu.name", "gpu.names"]);
    set(&mut f.foreign_gpu_processes, &["gpu.foreign_processes", "foreign_gpu_processes"]);
    // nsys-resolve's preflight: gpu.gpus[] (target = true) and gpu.processes[] (on_target = true = foreign,
    // as the preflight runs before the profiled application starts)
    if let Some(gpu) = p.get("gpu").filter(|g| g.is_object()) {
        let available = gpu.get("status").and_then(|s| s.as_str()).map(|s| s == "available").unwrap_or(true);
        if available {
            if let Some(gpus) = gpu.get("gpus").and_then(|g| g.as_array()) {
                let mut names: Vec<String> = gpus
                    .iter()
                    .filter(|g| g.get("target").and_then(|t| t.as_bool()).unwrap_or(true))
                    .filter_map(|g| g.get("name").and_then(|n| n.as_str()).map(String::from))
                    .collect();
                names.sort();
                if !names.is_empty() && !f.gpu.source.starts_with(prefix) {
                    f.gpu = Fact::known(serde_json::json!(names), format!("{prefix}.gpu.gpus[target].name"));
                }
            }
            if let Some(procs) = gpu.get("processes").and_then(|g| g.as_array()) {
                if !f.foreign_gpu_processes.source.starts_with(prefix) {
                    let foreign: Vec<Value> = procs
                        .iter()
                        .filter(|q| q.get("on_target").and_then(|t| t.as_bool()).unwrap_or(true))
                        .map(|q| serde_json::json!({"pid": q.get("pid"), "process_name": q.get("process_name"), "used_memory_mib": q.get("used_memory_mib")}))
                        .collect();
                    f.foreign_gpu_processes =
                        Fact::known(Value::Array(foreign), format!("{prefix}.gpu.processes[on_target]"));
                }
            }
        }
    }
    // flags given as words: derive the trace set, graph level and window when not given separately
    if let Some(args) = f.capture_flags.value.as_array().cloned().filter(|_| f.capture_flags.source.starts_with(prefix))
    {
        let args: Vec<String> = args.iter().filter_map(|a| a.as_str().map(String::from)).collect();
        let opt = |name: &str| -> Option<String> {
            args.iter().enumerate().find_map(|(i, a)| {
                a.strip_prefix(&format!("{name}="))
                    .map(String::from)
                    .or_else(|| (a == name).then(|| args.get(i + 1).cloned()).flatten())
            })
        };
        let from = |flag: &str| format!("{prefix}.capture flags {flag}");
        if !f.trace_set.source.starts_with(prefix) {
            // nsys's default --trace is cuda,nvtx,osrt (plus opengl on some platforms)
            let t = opt("--trace").or_else(|| opt("-t")).unwrap_or_else(|| "cuda,nvtx,osrt".into());
            f.trace_set = Fact::known(serde_json::json!(normalize_trace(t.split(','))), from("--trace"));
        }
        if !f.graph_trace_level.source.starts_with(prefix) {
            // nsys's default is graph level
            let t = opt("--cuda-graph-trace").unwrap_or_else(|| "graph".into());
            f.graph_trace_level = Fact::known(Value::String(t.to_ascii_lowercase()), from("--cuda-graph-trace"));
        }
        if !f.window.source.starts_with(prefix) {
            let mut w = serde_json::Map::new();
            for k in ["--delay", "--duration", "--capture-range", "--capture-range-end"] {
                let short = match k {
                    "--delay" => opt("-y"),
                    "--duration" => opt("-d"),
                    "--capture-range" => opt("-c"),
                    _ => None,
                };
                w.insert(
                    k.trim_start_matches("--").to_string(),
                    opt(k).or(short).map(Value::String).unwrap_or(Value::Null),
                );
            }
            f.window = Fact::known(Value::Object(w), from("--delay/--duration/--capture-range/--capture-range-end"));
        }
    }
}

/// The `nsys profile` switches of a command line, as `--switch=value` words in order: a leading `nsys` /
/// `profile` is skipped, the profiled command (the first word that is neither a switch nor a switch's value)
/// ends the list, and per-run switches that do not change what is measured are left out (`--output`/`-o`,
/// `--force-overwrite`/`-f`, `--stats`, `--export`).
pub fn profile_flags(words: &[String]) -> Vec<String> {
    const TAKES_VALUE: &[&str] = &[
        "-t",
        "-o",
        "-c",
        "-y",
        "-d",
        "-s",
        "-b",
        "-w",
        "-x",
        "-p",
        "-e",
        "-n",
        "-f",
        "--trace",
        "--output",
        "--capture-range",
        "--capture-range-end",
        "--cuda-graph-trace",
        "--delay",
        "--duration",
        "--sample",
        "--cpuctxsw",
        "--backtrace",
        "--kill",
        "--resolve-symbols",
        "--trace-fork-before-exec",
        "--force-overwrite",
        "--stats",
        "--export",
        "--env-var",
        "--cuda-memory-usage",
        "--gpu-metrics-devices",
        "--nvtx-capture",
        "--osrt-threshold",
        "--wait",
        "--show-output",
        "--session-new",
        "--python-sampling",
    ];
    const PER_RUN: &[&str] = &["-o", "--output", "-f", "--force-overwrite", "--stats", "--export"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() && (words[i] == "profile" || words[i].ends_with("nsys")) {
        i += 1;
    }
    while i < words.len() {
        let w = &words[i];
        if !w.starts_with('-') {
            break;
        }
        let (name, value) = match w.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None if TAKES_VALUE.contains(&w.as_str()) && i + 1 < words.len() => {
                i += 1;
                (w.clone(), Some(words[i].clone()))
            }
            None => (w.clone(), None),
        };
        if !PER_RUN.contains(&name.as_str()) {
            out.push(match value {
                Some(v) => format!("{name}={v}"),
                None => name,
            });
        }
        i += 1;
    }
    out
}

/// `2025.3.2.0`, `2023.4.4.54-234433681190v0` → the first three numbers (`2025.3.2`, `2023.4.4`).
pub fn normalize_version(v: &str) -> String {
    let re = regex::Regex::new(r"\d+\.\d+(\.\d+)?").expect("version regex");
    re.find(v).map(|m| m.as_str().to_string()).unwrap_or_else(|| v.trim().to_string())
}

/// Trace names as `nsys profile --trace` spells them, sorted: META_DATA_CAPTURE's `Cuda`, `NvtxEvents`,
/// `OSRuntime` become `cuda`, `nvtx`, `osrt`.
pub fn normalize_trace<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = names
        .map(|n| match n.trim() {
            "Cuda" => "cuda".to_string(),
            "NvtxEvents" => "nvtx".to_string(),
            "OSRuntime" => "osrt".to_string(),
            "CublasEvents" => "cublas".to_string(),
            "CudnnEvents" => "cudnn".to_string(),
            "OpenGL" => "opengl".to_string(),
            "MPI" => "mpi".to_string(),
            other => other.to_ascii_lowercase(),
        })
        .filter(|n| !n.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Capture settings that vary from run to run without changing what is measured, or that are compared as
/// their own facts: left out of `capture_flags`.
pub(super) fn is_run_specific(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    let tail = k.rsplit(':').next().unwrap_or(&k);
    matches!(
        tail,
        "PROFILING_SESSION_UUID"
            | "PROFILING_SESSION_ID"
            | "RUN_DURATION_MS"
            | "WORKING_DIR"
            | "COMMAND"
            | "PID"
            | "APPLICATION_PID"
            | "DEVICE_DISPLAY_NAME"
            | "DEVICE_ID"
            | "USER_NAME"
            | "CAPTURE_EVENT_TYPE"
            | "MODE"
            | "START_TRIGGER"
            | "STOP_TRIGGER"
            | "START_DELAY_MS"
            | "START_FRAME_VALUE"
            | "RUN_DURATION_FRAMES"
    ) || tail.starts_with("ARGUMENT_")
        || k.contains("ENVIRONMENT_VARIABLE")
}

pub(super) const WINDOW_KEYS: &[&str] =
    &["START_TRIGGER", "STOP_TRIGGER", "START_DELAY_MS", "START_FRAME_VALUE", "RUN_DURATION_FRAMES"];

/// The comparability facts of an export.
pub fn export_facts(export: &Export) -> Result<CaptureFacts> {
    let mut f = CaptureFacts::default();
    let meta = export.export_metadata()?;
    let meta_table = export.export_meta_table().unwrap_or(schema::META_DATA_EXPORT);
    if let Some((_, Some(v))) = meta.iter().find(|(n, _)| n == "EXPORT_PRODUCT_VERSION") {
        f.nsys_version = Fact::known(
            Value::String(normalize_version(v)),
            format!("{meta_table}.EXPORT_PRODUCT_VERSION (the nsys that exported it)"),
        );
    } else if let Some(v) = export.nsys_version()? {
        f.nsys_version = Fact::known(Value::String(normalize_version(&v)), meta_table);
    } else if export.export_meta_table().is_none() {
        f.nsys_version = Fact::unknown(format!(
            "unknown: the export has no export-metadata table ({}; ≈2021.3 exports have none)",
            schema::EXPORT_META_TABLES.join(" / ")
        ));
    }
    let cap = export.capture_settings()?;
    if !cap.is_empty() {
        let trace =
            normalize_trace(cap.iter().filter(|(n, _)| n == "CAPTURE_EVENT_TYPE").filter_map(|(_, v)| v.as_deref()));
        f.trace_set = Fact::known(
            serde_json::json!(trace),
            format!("{}.CAPTURE_EVENT_TYPE", crate::export::schema::META_DATA_CAPTURE),
        );
        let mut flags = serde_json::Map::new();
        let mut sorted: Vec<&(String, Option<String>)> = cap.iter().filter(|(n, _)| !is_run_specific(n)).collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, v) in sorted {
            flags.insert(n.clone(), v.clone().map(Value::String).unwrap_or(Value::Null));
        }
        f.capture_flags = Fact::known(
            Value::Object(flags),
            format!("{} (run-specific rows left out)", crate::export::schema::META_DATA_CAPTURE),
        );
        let mut window = serde_json::Map::new();
        for k in WINDOW_KEYS {
            if let Some((_, v)) = cap.iter().find(|(n, _)| n == k) {
                window.insert(k.to_string(), v.clone().map(Value::String).unwrap_or(Value::Null));
            }
        }
        if !window.is_empty() {
            f.window = Fact::known(
                Value::Object(window),
                format!(
                    "{} (START_TRIGGER, STOP_TRIGGER, START_DELAY_MS, …; nsys does not record --capture-range here)",
                    crate::export::schema::META_DATA_CAPTURE
                ),
            );
        }
        if let Some(m) = export.graph_trace_mode()? {
            f.graph_trace_level =
                Fact::known(Value::String(m.mode), format!("{}.{}", crate::export::schema::META_DATA_CAPTURE, m.key));
        }
    }
    // graph evidence: the export layer's graph facts (one definition for every tool)
    let mut ge = GraphEvidence::default();
    let facts = export.graph_facts()?;
    if let Some(k) = export.optional(schema::KERNEL, &["start", "end"])? {
        ge.kernels = export.count_rows(&k.name)?;
    }
    ge.kernels_with_graph_node = facts.kernel_node_rows;
    ge.graph_trace_rows = facts.graph_trace_rows;
    ge.graph_launch_calls = facts.graph_launches;
    if !f.graph_trace_level.is_known() {
        if facts.node_rows > 0 {
            f.graph_trace_level =
                Fact::known("node".into(), format!("{}.graphNodeId set", crate::export::schema::KERNEL));
        } else if ge.graph_trace_rows > 0 {
            f.graph_trace_level = Fact::known("graph".into(), format!("{} rows", crate::export::schema::GRAPH_TRACE));
        }
    }
    let uses = ge.graph_launch_calls > 0 || facts.node_rows > 0 || ge.graph_trace_rows > 0;
    if uses {
        f.cuda_graphs = Fact::known("graphs".into(), "graph launches / graphNodeId / GRAPH_TRACE rows");
    } else if ge.kernels > 0 {
        f.cuda_graphs = Fact::known("eager".into(), "kernels without any graph launch, graph node or graph trace");
    }
    f.graph_evidence = Some(ge);
    // instrumentation: NVTX domains and whether any NVTX range exists
    if let Some(ranges) = export.nvtx_range_rows()? {
        let domains = export.nvtx_domain_names()?;
        f.instrumentation = Fact::known(
            serde_json::json!({"nvtx_ranges_present": ranges > 0, "nvtx_domains": domains}),
            format!("{} (ranges present, named domains)", crate::export::schema::NVTX_EVENTS),
        );
    } else {
        f.instrumentation = Fact::known(
            serde_json::json!({"nvtx_ranges_present": false, "nvtx_domains": []}),
            format!("{} absent", crate::export::schema::NVTX_EVENTS),
        );
    }
    // GPU model(s)
    let mut gpus: Vec<String> = export
        .target_gpus()?
        .into_iter()
        .map(|row| {
            row.into_iter()
                .enumerate()
                .map(|(i, (col, v))| {
                    format!("{}{}", if i == 0 { String::new() } else { format!("{col}=") }, v.unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    gpus.sort();
    gpus.dedup();
    if !gpus.is_empty() {
        f.gpu = Fact::known(
            serde_json::json!(gpus),
            format!("{} (name, chipName, smCount, totalMemory, clockRate)", crate::export::schema::TARGET_INFO_GPU),
        );
    }
    Ok(f)
}
