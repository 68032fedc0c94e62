//! Validation and the `nsys profile` command line serve-capture builds.

#[allow(unused_imports)]
use super::*;

/// The flags serve-capture owns: given in `--flags` they are refused with the serve-capture flag to use.
pub(super) fn owned_flag(word: &str) -> Option<&'static str> {
    let name = word.split('=').next().unwrap_or(word);
    Some(match name {
        "-o" | "--output" => "--out DIR (the report is OUT/capture.nsys-rep)",
        "-t" | "--trace" => "--trace",
        "-y" | "--delay" => "--delay",
        "-d" | "--duration" => "--duration",
        "-c" | "--capture-range" => "--capture-range",
        "--capture-range-end" => "--capture-range-end",
        "-e" | "--env-var" => "--env NAME=VALUE (set on the nsys process)",
        "-f" | "--force-overwrite" => "a fresh --out DIR",
        _ => return None,
    })
}

/// Check the options and build the `nsys profile` argv (without the nsys path) and the flags added.
pub fn build_nsys_args(
    o: &ServeCaptureOptions,
    caps: &Capabilities,
    report_base: &Path,
) -> Result<(Vec<String>, Vec<AddedFlag>)> {
    if o.server.is_empty() {
        return Err(
            Error::usage("no server command: give it after `--`: serve-capture … -- SERVER ARGS…").with_arg("SERVER")
        );
    }
    let prog = Path::new(&o.server[0]).file_name().and_then(|s| s.to_str()).unwrap_or("");
    if prog == "env" {
        return Err(Error::usage(
            "the server command starts with `env`: environment for the profiled server must be set on the nsys process itself (use --env NAME=VALUE), never `nsys … -- env VAR=v cmd`",
        )
        .with_arg("SERVER"));
    }
    if o.load.is_empty() {
        return Err(Error::usage("--load: empty command").with_arg("--load"));
    }
    if matches!(&o.warmup, Some(w) if w.is_empty()) {
        return Err(Error::usage("--warmup: empty command").with_arg("--warmup"));
    }
    let trace: Vec<&str> = o.trace.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if trace.is_empty() {
        return Err(Error::usage("--trace: empty list").with_arg("--trace"));
    }
    let cuda = trace.iter().any(|t| *t == "cuda" || t.starts_with("cuda-"));
    let timed = o.delay_s.is_some() || o.duration_s.is_some();
    let ranged = o.capture_range.as_deref().is_some_and(|r| r != "none");
    if timed && ranged {
        return Err(Error::usage(
            "--delay/--duration (time-bounded window) and --capture-range (range-bounded window) exclude each other",
        )
        .with_arg("--capture-range"));
    }
    for (v, f) in [(o.delay_s, "--delay"), (o.duration_s, "--duration")] {
        if let Some(x) = v {
            if !(x.is_finite() && x >= 0.0) || (f == "--duration" && x <= 0.0) {
                return Err(Error::usage(format!("{f} {x}: expected a positive number of seconds")).with_arg(f));
            }
        }
    }
    if o.warmup.is_some() && !timed && !ranged {
        return Err(Error::usage(
            "--warmup needs a capture window that opens after it: --delay SECONDS [--duration SECONDS] or --capture-range cudaProfilerApi",
        )
        .with_arg("--warmup"));
    }
    if o.warmup.is_some() && timed && o.delay_s.is_none() {
        return Err(Error::usage("--warmup with a time-bounded window needs --delay SECONDS: the window would open at launch, before the warmup").with_arg("--delay"));
    }
    if o.capture_range_end.is_some() && !ranged {
        return Err(Error::usage("--capture-range-end needs --capture-range").with_arg("--capture-range-end"));
    }
    let mut added = Vec::new();
    let mut args: Vec<String> = vec!["profile".into(), format!("--trace={}", trace.join(","))];
    // mandatory flags
    let user_graph = o.flags.iter().find(|f| f.starts_with("--cuda-graph-trace"));
    if let Some(f) = user_graph {
        if !f.starts_with("--cuda-graph-trace=node") {
            return Err(Error::usage(format!(
                "--flags: '{f}' refused: graph-replayed kernels only exist in a trace taken with --cuda-graph-trace=node (serve-capture adds it when CUDA is traced)"
            ))
            .with_arg("--flags"));
        }
    }
    if cuda {
        if !caps.cuda_graph_trace {
            return Err(Error::usage(
                "refused: CUDA is traced but this nsys has no --cuda-graph-trace (graph-replayed kernels would be invisible); use a newer nsys or trace without cuda",
            )
            .with_arg("--trace"));
        }
        if user_graph.is_none() {
            args.push("--cuda-graph-trace=node".into());
            added.push(AddedFlag {
                flag: "--cuda-graph-trace=node".into(),
                why: "CUDA is traced: graph-replayed kernels only exist at node level".into(),
            });
        }
    }
    let user_fork = o.flags.iter().find(|f| f.starts_with("--trace-fork-before-exec"));
    if o.cuda_child {
        if !caps.trace_fork_before_exec {
            return Err(Error::usage(
                "refused: --cuda-child needs --trace-fork-before-exec=true, which this nsys does not have",
            )
            .with_arg("--cuda-child"));
        }
        match user_fork {
            Some(f) if f != "--trace-fork-before-exec=true" => {
                return Err(Error::usage(format!("--flags: '{f}' refused: the CUDA process is a child (--cuda-child), which needs --trace-fork-before-exec=true")).with_arg("--flags"))
            }
            Some(_) => {}
            None => {
                args.push("--trace-fork-before-exec=true".into());
                added.push(AddedFlag { flag: "--trace-fork-before-exec=true".into(), why: "--cuda-child: the CUDA process is a child of the launched one".into() });
            }
        }
    }
    if let Some(d) = o.delay_s {
        args.push(format!("--delay={}", fmt_secs(d)));
    }
    if let Some(d) = o.duration_s {
        args.push(format!("--duration={}", fmt_secs(d)));
    }
    if ranged {
        let r = o.capture_range.as_deref().unwrap_or_default();
        if !caps.capture_range {
            return Err(Error::usage("refused: this nsys has no --capture-range").with_arg("--capture-range"));
        }
        args.push(format!("--capture-range={r}"));
        let end = o.capture_range_end.clone().unwrap_or_else(|| "stop".into());
        if !caps.capture_range_end {
            return Err(Error::usage("refused: this nsys has no --capture-range-end (needed so that the server keeps running after the range)").with_arg("--capture-range-end"));
        }
        args.push(format!("--capture-range-end={end}"));
        if o.capture_range_end.is_none() {
            added.push(AddedFlag {
                flag: "--capture-range-end=stop".into(),
                why: "the server keeps running after the range; serve-capture stops it".into(),
            });
        }
    }
    for f in &o.flags {
        if let Some(use_instead) = owned_flag(f) {
            return Err(
                Error::usage(format!("--flags: '{f}' is set by serve-capture: use {use_instead}")).with_arg("--flags")
            );
        }
    }
    // --kill exists in every nsys serve-capture supports (2020.x onwards); resolve does not track it
    let user_kill = o.flags.iter().any(|f| f.starts_with("--kill"));
    if !user_kill {
        args.push("--kill=none".into());
        added.push(AddedFlag {
            flag: "--kill=none".into(),
            why: "nsys must not signal the server when the window ends: the load client spans the window, and serve-capture stops the recorded PIDs itself".into(),
        });
    }
    args.extend(o.flags.iter().cloned());
    args.push(format!("--output={}", report_base.display()));
    args.extend(o.server.iter().cloned());
    Ok((args, added))
}

pub(super) fn fmt_secs(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as u64)
    } else {
        format!("{x}")
    }
}
