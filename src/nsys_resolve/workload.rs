//! The workload record of a capture: the question it answers, the client command, request rate, concurrency,
//! seed policy, clock policy and the diagnostic instrumentation patch's identity (`provenance.workload`).
//!
//! `capture-compare` compares `workload.request_rate`, `.concurrency`, `.seed_policy`, `.clock_policy` and
//! `.instrumentation_patch` between two captures (`src/capture_compare/checks.rs`); a value absent on a side is
//! "unchecked". serve-capture (and pod-attach) fill it from their flags and from the load command's own flags
//! ([`from_command`]); an explicit flag that disagrees with the load command is a usage error naming both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Error, Result};

/// Server flags that force an engine which normally replays CUDA graphs to run eagerly.
pub const EAGER_FLAGS: [&str; 3] = ["--enforce-eager", "--disable-cuda-graph", "--disable-cuda-graphs"];

/// `provenance.workload`: what the capture was for and how the server was driven.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Workload {
    /// The question the capture answers: the text of `--question FILE` (trimmed); `null` when none was given
    /// (the tool then warns on stderr: a capture without a question is an untargeted "capture everything").
    #[serde(default)]
    pub question: Option<String>,
    /// The `--question` file as given.
    #[serde(default)]
    pub question_file: Option<String>,
    /// The client (load) command, redacted like every command.
    #[serde(default)]
    pub client_command: Option<String>,
    /// Requests per second the client sends: a decimal number (`4`, `0.5`) or `inf` (all at once, vLLM's
    /// default); `null` when neither a flag nor the load command says.
    #[serde(default)]
    pub request_rate: Option<String>,
    /// The most requests in flight (`--concurrency`, or the load command's `--max-concurrency`/`--concurrency`).
    #[serde(default)]
    pub concurrency: Option<u64>,
    /// `fixed:N` for a seed N, else the policy as given (`random`); `null` when unknown.
    #[serde(default)]
    pub seed_policy: Option<String>,
    /// The GPU clock policy as stated (`--clock-policy`, e.g. `locked:1980,2619` or `default`); the measured
    /// application clocks are in `gpu.gpus[]`.
    #[serde(default)]
    pub clock_policy: Option<String>,
    /// The diagnostic instrumentation patch's identity: `sha256:HEX` of `--instrumentation-patch FILE`.
    #[serde(default)]
    pub instrumentation_patch: Option<String>,
    /// The patch file as given.
    #[serde(default)]
    pub instrumentation_patch_file: Option<String>,
    /// Where each recorded value was read: `--concurrency` (the tool's flag), `load command --max-concurrency`,
    /// or both (`--concurrency = load command --max-concurrency`).
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
}

/// What a tool was told about the workload (its flags), before the load command is read.
#[derive(Debug, Clone, Default)]
pub struct WorkloadSpec {
    /// `--question FILE`.
    pub question: Option<PathBuf>,
    /// `--request-rate R`.
    pub request_rate: Option<String>,
    /// `--concurrency N`.
    pub concurrency: Option<u64>,
    /// `--seed N|POLICY`.
    pub seed: Option<String>,
    /// `--clock-policy TEXT`.
    pub clock_policy: Option<String>,
    /// `--instrumentation-patch FILE`.
    pub instrumentation_patch: Option<PathBuf>,
}

impl WorkloadSpec {
    /// Whether no workload flag was given at all.
    pub fn is_empty(&self) -> bool {
        self.question.is_none()
            && self.request_rate.is_none()
            && self.concurrency.is_none()
            && self.seed.is_none()
            && self.clock_policy.is_none()
            && self.instrumentation_patch.is_none()
    }
}

/// The load-command flags read for each field (benchmark clients: `vllm bench serve`, SGLang's
/// `bench_serving`, genai-perf, …): `--flag VALUE` or `--flag=VALUE`, the last one wins (argparse's rule).
const RATE_FLAGS: [&str; 2] = ["--request-rate", "--rate"];
const CONCURRENCY_FLAGS: [&str; 3] = ["--max-concurrency", "--concurrency", "--num-concurrent-requests"];
const SEED_FLAGS: [&str; 2] = ["--seed", "--random-seed"];

/// The last value of any of `flags` in `argv`, with the flag that gave it.
fn flag_value(argv: &[String], flags: &[&str]) -> Option<(String, String)> {
    let mut found = None;
    let mut i = 0;
    while i < argv.len() {
        let w = &argv[i];
        for f in flags {
            if w == f {
                if let Some(v) = argv.get(i + 1) {
                    found = Some((f.to_string(), v.clone()));
                    i += 1;
                }
            } else if let Some(v) = w.strip_prefix(f).and_then(|r| r.strip_prefix('=')) {
                found = Some((f.to_string(), v.to_string()));
            }
        }
        i += 1;
    }
    found
}

/// A request rate as recorded: `inf` or a positive decimal in its shortest form (`4.0` → `4`).
pub fn normalize_rate(s: &str) -> Option<String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("infinity") {
        return Some("inf".into());
    }
    let x: f64 = t.parse().ok()?;
    (x.is_finite() && x > 0.0).then(|| format!("{x}"))
}

/// A seed policy as recorded: `fixed:N` for an integer, else the word as given (lower-cased).
pub fn normalize_seed(s: &str) -> Option<String> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    Some(match t.parse::<i64>() {
        Ok(n) => format!("fixed:{n}"),
        Err(_) => t.to_ascii_lowercase(),
    })
}

fn resolve_path(p: &Path, cwd: Option<&Path>) -> PathBuf {
    match cwd {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    }
}

fn sha256_file(p: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(p)?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

/// One field from the tool's flag and the load command: equal or only one given → recorded with its source;
/// different → a usage error naming both.
fn agree(
    field: &str,
    flag: &str,
    given: Option<(String, String)>,
    from_load: Option<(String, String, String)>,
    sources: &mut BTreeMap<String, String>,
) -> Result<Option<String>> {
    match (given, from_load) {
        (Some((raw, g)), Some((lf, lraw, l))) if g != l => Err(Error::usage(format!(
            "{flag} {raw} disagrees with the load command's {lf} {lraw}: give the {field} once, or the same value in both"
        ))
        .with_arg(flag)),
        (Some((_, g)), Some((lf, _, _))) => {
            sources.insert(field.into(), format!("{flag} = load command {lf}"));
            Ok(Some(g))
        }
        (Some((_, g)), None) => {
            sources.insert(field.into(), flag.into());
            Ok(Some(g))
        }
        (None, Some((lf, _, l))) => {
            sources.insert(field.into(), format!("load command {lf}"));
            Ok(Some(l))
        }
        (None, None) => Ok(None),
    }
}

/// The workload record of a run: `spec` (the tool's flags; files relative to `cwd`) and the load command
/// `client` (its argv, read for `--request-rate`, `--max-concurrency`/`--concurrency`, `--seed`).
/// `client_command` is the command as it will be recorded (already redacted by the caller). Errors (exit 2):
/// an unreadable `--question` or `--instrumentation-patch` file, a value that is not a rate/count, or a flag
/// that disagrees with the load command.
pub fn from_command(
    spec: &WorkloadSpec,
    client: Option<&[String]>,
    client_command: Option<String>,
    cwd: Option<&Path>,
) -> Result<Workload> {
    let mut w = Workload { client_command, ..Default::default() };
    if let Some(q) = &spec.question {
        let path = resolve_path(q, cwd);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::input(format!("--question {}: {e}", q.display())).with_arg("--question"))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::input(format!(
                "--question {}: empty: write the question the capture answers (the metric, the suspected contributor, its share if known)",
                q.display()
            ))
            .with_arg("--question"));
        }
        w.question = Some(text.to_string());
        w.question_file = Some(q.display().to_string());
    }
    let argv = client.unwrap_or(&[]);
    let bad = |flag: &str, v: &str, want: &str| Error::usage(format!("{flag} {v}: expected {want}")).with_arg(flag);
    let rate = match &spec.request_rate {
        Some(r) => Some((r.clone(), normalize_rate(r).ok_or_else(|| bad("--request-rate", r, "a rate > 0 or inf"))?)),
        None => None,
    };
    let load_rate = flag_value(argv, &RATE_FLAGS).and_then(|(f, v)| normalize_rate(&v).map(|n| (f, v, n)));
    w.request_rate = agree("request rate", "--request-rate", rate, load_rate, &mut w.sources)?;
    if let Some(c) = spec.concurrency {
        if c == 0 {
            return Err(bad("--concurrency", "0", "a count >= 1"));
        }
    }
    let load_conc = flag_value(argv, &CONCURRENCY_FLAGS)
        .and_then(|(f, v)| v.trim().parse::<u64>().ok().filter(|n| *n > 0).map(|n| (f, v, n.to_string())));
    w.concurrency = agree(
        "concurrency",
        "--concurrency",
        spec.concurrency.map(|c| (c.to_string(), c.to_string())),
        load_conc,
        &mut w.sources,
    )?
    .and_then(|c| c.parse().ok());
    let seed = match &spec.seed {
        Some(s) => Some((s.clone(), normalize_seed(s).ok_or_else(|| bad("--seed", s, "a seed or a policy word"))?)),
        None => None,
    };
    let load_seed = flag_value(argv, &SEED_FLAGS).and_then(|(f, v)| normalize_seed(&v).map(|n| (f, v, n)));
    w.seed_policy = agree("seed policy", "--seed", seed, load_seed, &mut w.sources)?;
    // the sources are keyed by the JSON field names
    for (from, to) in [("request rate", "request_rate"), ("seed policy", "seed_policy")] {
        if let Some(v) = w.sources.remove(from) {
            w.sources.insert(to.into(), v);
        }
    }
    if let Some(c) = spec.clock_policy.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        w.clock_policy = Some(c.to_string());
        w.sources.insert("clock_policy".into(), "--clock-policy".into());
    }
    if let Some(p) = &spec.instrumentation_patch {
        let path = resolve_path(p, cwd);
        let sha = sha256_file(&path).map_err(|e| {
            Error::input(format!("--instrumentation-patch {}: {e}", p.display())).with_arg("--instrumentation-patch")
        })?;
        w.instrumentation_patch = Some(format!("sha256:{sha}"));
        w.instrumentation_patch_file = Some(p.display().to_string());
        w.sources.insert("instrumentation_patch".into(), "--instrumentation-patch".into());
    }
    Ok(w)
}

/// The stderr warnings for a workload before a capture (the kernel-profile runbook's "bound the question" and
/// the decode tier's clean single-stream workload).
pub fn warnings(w: &Workload, decode_tier: bool) -> Vec<String> {
    let mut out = Vec::new();
    if w.question.is_none() {
        out.push(
            "no --question FILE: the capture answers no recorded question; name the end-to-end metric, the suspected contributor and its share if known (recorded as workload.question)"
                .to_string(),
        );
    }
    if decode_tier {
        match w.concurrency {
            Some(1) => {}
            Some(n) => out.push(format!(
                "the decode tier wants a clean single-stream workload (concurrency 1); this load runs at concurrency {n}"
            )),
            None => out.push(
                "the decode tier wants a clean single-stream workload: give --concurrency 1 (or the load command's --max-concurrency 1) so it is recorded"
                    .to_string(),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn reads_the_load_command_and_the_flags() {
        let load = argv("vllm bench serve --model m --request-rate 4.0 --max-concurrency=8 --seed 42");
        let w = from_command(&WorkloadSpec::default(), Some(&load), Some("x".into()), None).unwrap();
        assert_eq!(w.request_rate.as_deref(), Some("4"));
        assert_eq!(w.concurrency, Some(8));
        assert_eq!(w.seed_policy.as_deref(), Some("fixed:42"));
        assert_eq!(w.sources["concurrency"], "load command --max-concurrency");
        assert_eq!(w.sources["request_rate"], "load command --request-rate");
        // the same value twice is fine, recorded from both
        let spec = WorkloadSpec { concurrency: Some(8), request_rate: Some("4".into()), ..Default::default() };
        let w = from_command(&spec, Some(&load), None, None).unwrap();
        assert_eq!(w.sources["concurrency"], "--concurrency = load command --max-concurrency");
        assert_eq!(w.request_rate.as_deref(), Some("4"));
        // a disagreement names both
        let spec = WorkloadSpec { concurrency: Some(4), ..Default::default() };
        let e = from_command(&spec, Some(&load), None, None).unwrap_err();
        assert!(e.message.contains("--concurrency 4") && e.message.contains("--max-concurrency 8"), "{}", e.message);
        let spec = WorkloadSpec { seed: Some("7".into()), ..Default::default() };
        assert!(from_command(&spec, Some(&load), None, None).unwrap_err().message.contains("--seed 42"));
        // flags alone; inf; a policy word
        let spec = WorkloadSpec {
            request_rate: Some("inf".into()),
            concurrency: Some(1),
            seed: Some("Random".into()),
            ..Default::default()
        };
        let w = from_command(&spec, Some(&argv("curl http://h/x")), None, None).unwrap();
        assert_eq!((w.request_rate.as_deref(), w.concurrency), (Some("inf"), Some(1)));
        assert_eq!(w.seed_policy.as_deref(), Some("random"));
        for (rate, ok) in [("0", false), ("-1", false), ("x", false), ("0.5", true), ("nan", false)] {
            let spec = WorkloadSpec { request_rate: Some(rate.into()), ..Default::default() };
            assert_eq!(from_command(&spec, None, None, None).is_ok(), ok, "{rate}");
        }
        let spec = WorkloadSpec { concurrency: Some(0), ..Default::default() };
        assert!(from_command(&spec, None, None, None).is_err());
    }

    #[test]
    fn question_and_patch_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("q.txt"), "  Where does c=1 decode time go?\n").unwrap();
        std::fs::write(d.path().join("p.diff"), "--- a\n+++ b\n").unwrap();
        std::fs::write(d.path().join("empty.txt"), "\n \n").unwrap();
        let spec = WorkloadSpec {
            question: Some("q.txt".into()),
            instrumentation_patch: Some("p.diff".into()),
            clock_policy: Some("locked:1980,2619".into()),
            ..Default::default()
        };
        let w = from_command(&spec, None, None, Some(d.path())).unwrap();
        assert_eq!(w.question.as_deref(), Some("Where does c=1 decode time go?"));
        // sha256sum of the same bytes
        assert_eq!(
            w.instrumentation_patch.as_deref(),
            Some("sha256:6e53bf2ad8f234c60294a05a013874a211fe3c03653f48df43ac4ec085ab9a24")
        );
        assert_eq!(w.clock_policy.as_deref(), Some("locked:1980,2619"));
        assert!(warnings(&w, false).is_empty());
        let e = from_command(
            &WorkloadSpec { question: Some("empty.txt".into()), ..Default::default() },
            None,
            None,
            Some(d.path()),
        )
        .unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
        let e = from_command(
            &WorkloadSpec { question: Some("nope.txt".into()), ..Default::default() },
            None,
            None,
            Some(d.path()),
        )
        .unwrap_err();
        assert!(e.message.contains("--question nope.txt"), "{}", e.message);
        let none = Workload::default();
        assert!(warnings(&none, false)[0].contains("no --question"));
        assert!(warnings(&Workload { concurrency: Some(8), ..none.clone() }, true)[1].contains("concurrency 8"));
    }
}
