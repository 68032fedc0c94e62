//! Engine evidence for serve-capture: launcher contracts (`--require-argv`, `--engine`) checked before
//! anything starts, and the generated/JIT modules (`--module PATH[=SHA256]`, `--strict-prebuilt`): their
//! identity on disk, and whether this run's server processes actually mapped that file.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::{Error, Result};

pub use crate::nsys_resolve::{ArgvRequirement, LauncherCheck};

/// The engines `--engine` knows.
pub const ENGINES: &[&str] = &["sglang", "vllm"];

/// The requirements: `required` (from `--require-argv`), then those `engine` and the window imply.
pub fn requirements(
    required: &[String],
    engine: Option<&str>,
    capture_range: Option<&str>,
) -> Result<Vec<ArgvRequirement>> {
    let mut out: Vec<ArgvRequirement> = Vec::new();
    let mut add = |flag: &str, why: String| {
        if !out.iter().any(|r| r.flag == flag) {
            out.push(ArgvRequirement { flag: flag.into(), why });
        }
    };
    for f in required {
        if !f.starts_with('-') || f.len() < 2 {
            return Err(Error::usage(format!("--require-argv {f:?}: expected a flag (starting with -)"))
                .with_arg("--require-argv"));
        }
        add(f, "--require-argv".into());
    }
    match engine {
        None => {}
        Some("sglang") => {
            // the serving-run manual: SGLang's per-iteration NVTX ranges and iteration records
            add("--alignment-nvtx-ranges", "--engine sglang".into());
            add("--alignment-iteration-records", "--engine sglang".into());
        }
        Some("vllm")
            // a range-bounded window opens on cudaProfilerStart: vLLM calls it only with the CUDA profiler
            if capture_range.is_some_and(|r| r != "none") => {
                add(
                    "--profiler-config.profiler=cuda",
                    format!("--engine vllm with --capture-range {}", capture_range.unwrap_or_default()),
                );
            }
        // a time window needs no profiler hook in vLLM
        Some("vllm") => {}
        Some(e) => {
            return Err(
                Error::usage(format!("--engine {e:?}: expected one of {}", ENGINES.join(", "))).with_arg("--engine")
            );
        }
    }
    Ok(out)
}

/// Does `argv` carry `flag`? `--f` matches `--f` and `--f=anything`; `--f=v` matches `--f=v` and `--f v`; a
/// dotted `--group.key=v` is also met by the group given as JSON (`--group '{"key": "v"}'`, `--group={...}`),
/// as vLLM's `--profiler-config` accepts.
pub fn has_flag(argv: &[String], flag: &str) -> bool {
    let json_group = |name: &str, value: &str| -> bool {
        let Some((group, key)) = name.rsplit_once('.') else { return false };
        let holds = |j: &str| {
            serde_json::from_str::<serde_json::Value>(j)
                .ok()
                .is_some_and(|v| v.get(key).and_then(|x| x.as_str()) == Some(value))
        };
        argv.iter().enumerate().any(|(i, a)| {
            (a == group && argv.get(i + 1).is_some_and(|j| holds(j)))
                || a.strip_prefix(group).and_then(|r| r.strip_prefix('=')).is_some_and(holds)
        })
    };
    match flag.split_once('=') {
        Some((name, value)) => {
            argv.iter()
                .enumerate()
                .any(|(i, a)| a == flag || (a == name && argv.get(i + 1).is_some_and(|v| v == value)))
                || json_group(name, value)
        }
        None => argv.iter().any(|a| a == flag || a.strip_prefix(flag).is_some_and(|rest| rest.starts_with('='))),
    }
}

/// Check the server command against the requirements: exit 2 naming the first missing flag (nothing started).
pub fn check_argv(server: &[String], reqs: &[ArgvRequirement]) -> Result<()> {
    let missing: Vec<&ArgvRequirement> = reqs.iter().filter(|r| !has_flag(server, &r.flag)).collect();
    if let Some(first) = missing.first() {
        let all: Vec<String> = missing.iter().map(|r| format!("{} ({})", r.flag, r.why)).collect();
        return Err(Error::usage(format!(
            "the server command lacks {}: required by {}; missing: {}; nothing was started",
            first.flag,
            first.why,
            all.join(", ")
        ))
        .with_arg(if first.why == "--require-argv" { "--require-argv" } else { "--engine" }));
    }
    Ok(())
}

/// `--module PATH[=SHA256]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleSpec {
    pub path: PathBuf,
    /// The pinned sha256 (64 hex digits, lower-cased).
    pub sha256: Option<String>,
}

/// Parse `--module PATH` or `--module PATH=SHA256` (a path holding `=` is read whole unless what follows the
/// last `=` is 64 hex digits).
pub fn parse_module(s: &str) -> Result<ModuleSpec> {
    if s.is_empty() {
        return Err(Error::usage("--module '': expected PATH or PATH=SHA256").with_arg("--module"));
    }
    if let Some((p, h)) = s.rsplit_once('=') {
        if h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()) && !p.is_empty() {
            return Ok(ModuleSpec { path: PathBuf::from(p), sha256: Some(h.to_ascii_lowercase()) });
        }
        if h.chars().all(|c| c.is_ascii_hexdigit()) && !h.is_empty() {
            return Err(
                Error::usage(format!("--module {s}: {h:?} is not a sha256 (64 hex digits)")).with_arg("--module")
            );
        }
    }
    Ok(ModuleSpec { path: PathBuf::from(s), sha256: None })
}

/// One `--module`: its identity on disk at start, and whether this run's server processes mapped it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModuleRecord {
    /// The path as given, made absolute.
    pub path: String,
    pub exists: bool,
    pub size: Option<u64>,
    pub sha256: Option<String>,
    /// Modification time, RFC 3339 UTC.
    pub mtime_utc: Option<String>,
    /// Device and inode at start (the mapping must name the same file, not only the same path).
    pub dev: Option<u64>,
    pub inode: Option<u64>,
    /// `--module PATH=SHA256`: the pinned hash, and whether the file matches it.
    pub expected_sha256: Option<String>,
    pub sha256_matches: Option<bool>,
    /// True when a recorded server process had this file (same path and inode) in /proc/PID/maps while the run
    /// was live; false when none did (a file in the cache is not proof that this run loaded it).
    pub loaded: bool,
    /// The recorded server PIDs that mapped it.
    pub loaded_by_pid: Vec<i64>,
    /// How many times the maps were read, and when the first one saw it (seconds since start).
    pub scans: u64,
    pub first_seen_s: Option<f64>,
    /// Mapped at the scan right after readiness (null: the server never became ready). A module first mapped
    /// later was built or loaded after readiness: with `--strict-prebuilt` that fails the run (`stage:
    /// modules`).
    #[serde(default)]
    pub loaded_at_ready: Option<bool>,
    /// The file on disk changed during the run (size, mtime or inode differ from the start): how, and when it
    /// was seen (a rebuild; with `--strict-prebuilt` a failure).
    #[serde(default)]
    pub changed: Option<String>,
    /// What the file says about itself (ELF build ID, SONAME, needed libraries, compilers, recorded flags, ABI
    /// note) and the `build.ninja` beside it; read at start (null when the file was missing).
    #[serde(default)]
    pub identity: Option<super::module_id::ModuleIdentity>,
    /// The compile event: recorded server processes whose command line names this module (its path or file
    /// name), e.g. `gcc … -o PATH` or `ninja -C DIR`, with when they were seen.
    #[serde(default)]
    pub compile_events: Vec<CompileEvent>,
}

/// A recorded process whose command line names a module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompileEvent {
    pub pid: i64,
    pub argv: Vec<String>,
    /// When serve-capture first saw it (seconds since start).
    pub seen_at_s: f64,
    /// Seen after readiness: a process-local build that did not finish before the server said it was ready.
    pub after_ready: bool,
}

/// How the file of `m` differs from what was read at start (`None`: unchanged, or missing at start).
pub fn changed_on_disk(m: &ModuleRecord) -> Option<String> {
    let (size, ino) = (m.size?, m.inode?);
    let md = match std::fs::metadata(&m.path) {
        Ok(md) => md,
        Err(e) => return Some(format!("gone from disk ({e})")),
    };
    let mtime = md.modified().ok().map(crate::contract::rfc3339_utc);
    let mut how = Vec::new();
    if md.ino() != ino {
        how.push(format!("inode {ino} → {}", md.ino()));
    }
    if md.len() != size {
        how.push(format!("size {size} → {}", md.len()));
    }
    if mtime != m.mtime_utc {
        how.push(format!("mtime {} → {}", m.mtime_utc.as_deref().unwrap_or("?"), mtime.as_deref().unwrap_or("?")));
    }
    (!how.is_empty()).then(|| how.join(", "))
}

fn sha256_file(p: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Read each module's identity (before the server starts). With `strict`, a missing module or one whose
/// sha256 differs from its pin is an error (exit 2, nothing started).
pub fn inspect_modules(specs: &[ModuleSpec], cwd: Option<&Path>, strict: bool) -> Result<Vec<ModuleRecord>> {
    let mut out = Vec::new();
    for s in specs {
        let path = if s.path.is_absolute() {
            s.path.clone()
        } else if let Some(d) = cwd {
            d.join(&s.path)
        } else {
            std::path::absolute(&s.path).unwrap_or_else(|_| s.path.clone())
        };
        let md = std::fs::metadata(&path).ok().filter(|m| m.is_file());
        let sha = match &md {
            Some(_) => Some(sha256_file(&path).map_err(|e| {
                Error::input(format!("--module {}: cannot read: {e}", path.display())).with_arg("--module")
            })?),
            None => None,
        };
        let matches = s.sha256.as_ref().map(|want| sha.as_deref() == Some(want.as_str()));
        if strict {
            if md.is_none() {
                return Err(Error::input(format!(
                    "--strict-prebuilt: module {} is missing (not a file): nothing was started",
                    path.display()
                ))
                .with_arg("--module"));
            }
            if matches == Some(false) {
                return Err(Error::input(format!(
                    "--strict-prebuilt: module {} has sha256 {} but --module pins {}: nothing was started",
                    path.display(),
                    sha.as_deref().unwrap_or_default(),
                    s.sha256.as_deref().unwrap_or_default()
                ))
                .with_arg("--module"));
            }
        }
        out.push(ModuleRecord {
            path: path.display().to_string(),
            exists: md.is_some(),
            size: md.as_ref().map(|m| m.len()),
            sha256: sha,
            mtime_utc: md.as_ref().and_then(|m| m.modified().ok()).map(crate::contract::rfc3339_utc),
            dev: md.as_ref().map(|m| m.dev()),
            inode: md.as_ref().map(|m| m.ino()),
            expected_sha256: s.sha256.clone(),
            sha256_matches: matches,
            loaded: false,
            loaded_by_pid: vec![],
            scans: 0,
            first_seen_s: None,
            loaded_at_ready: None,
            changed: None,
            identity: md.as_ref().map(|_| super::module_id::identify(&path)),
            compile_events: Vec::new(),
        });
    }
    Ok(out)
}

/// The file mappings of `/proc/PID/maps`: (inode, path), deleted files excluded.
pub fn mapped_files(pid: i32) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut out: Vec<(u64, String)> = Vec::new();
    for l in text.lines() {
        // address perms offset dev inode pathname (the path may hold spaces)
        let mut it = l.splitn(6, ' ');
        let (_, _, _, _, ino) = (it.next(), it.next(), it.next(), it.next(), it.next());
        let Some(ino) = ino.and_then(|i| i.parse::<u64>().ok()).filter(|i| *i != 0) else { continue };
        let path = it.next().unwrap_or("").trim_start().to_string();
        if path.is_empty() || path.ends_with(" (deleted)") {
            continue;
        }
        if !out.iter().any(|(i, p)| *i == ino && *p == path) {
            out.push((ino, path));
        }
    }
    out
}

/// One scan of the live server processes' maps: mark each module mapped by a PID (same path and inode).
pub fn scan(mods: &mut [ModuleRecord], pids: &[i32], at_s: f64) {
    let maps: Vec<(i32, Vec<(u64, String)>)> = pids.iter().map(|p| (*p, mapped_files(*p))).collect();
    for m in mods.iter_mut() {
        m.scans += 1;
        let Some(ino) = m.inode else { continue };
        // the mapping names the path the loader opened: compare it canonicalised with ours
        let canon = std::fs::canonicalize(&m.path).map(|p| p.display().to_string()).unwrap_or_else(|_| m.path.clone());
        for (pid, files) in &maps {
            if files.iter().any(|(i, p)| *i == ino && (*p == m.path || *p == canon))
                && !m.loaded_by_pid.contains(&(*pid as i64))
            {
                m.loaded_by_pid.push(*pid as i64);
                m.loaded = true;
                m.first_seen_s.get_or_insert(at_s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn engine_implications() {
        let r = requirements(&[], Some("sglang"), None).unwrap();
        assert_eq!(
            r.iter().map(|x| x.flag.as_str()).collect::<Vec<_>>(),
            ["--alignment-nvtx-ranges", "--alignment-iteration-records"]
        );
        assert!(requirements(&[], Some("vllm"), None).unwrap().is_empty());
        let r = requirements(&[], Some("vllm"), Some("cudaProfilerApi")).unwrap();
        assert_eq!(r[0].flag, "--profiler-config.profiler=cuda");
        assert!(r[0].why.contains("cudaProfilerApi"));
        assert!(requirements(&[], Some("trt"), None).unwrap_err().message.contains("sglang, vllm"));
        assert!(requirements(&v(&["x"]), None, None).is_err());
        // a flag given twice (explicitly and implied) is required once
        assert_eq!(requirements(&v(&["--alignment-nvtx-ranges"]), Some("sglang"), None).unwrap().len(), 2);
    }

    #[test]
    fn flags_are_matched_whole() {
        let a = v(&[
            "python",
            "-m",
            "vllm",
            "--profiler-config.profiler",
            "cuda",
            "--enforce-eager=1",
            "--alignment-nvtx-ranges-x",
        ]);
        assert!(has_flag(&a, "--profiler-config.profiler=cuda"));
        assert!(!has_flag(&a, "--profiler-config.profiler=torch"));
        assert!(has_flag(&v(&["--profiler-config.profiler=cuda"]), "--profiler-config.profiler=cuda"));
        assert!(has_flag(&a, "--enforce-eager"));
        assert!(has_flag(&v(&["--profiler-config", r#"{"profiler": "cuda"}"#]), "--profiler-config.profiler=cuda"));
        assert!(has_flag(&v(&[r#"--profiler-config={"profiler":"cuda","x":1}"#]), "--profiler-config.profiler=cuda"));
        assert!(!has_flag(&v(&["--profiler-config", r#"{"profiler": "torch"}"#]), "--profiler-config.profiler=cuda"));
        assert!(!has_flag(&a, "--alignment-nvtx-ranges"), "a prefix of another flag is not that flag");
        let reqs = requirements(&[], Some("sglang"), None).unwrap();
        let e = check_argv(&v(&["sglang", "--alignment-nvtx-ranges"]), &reqs).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message.contains("lacks --alignment-iteration-records: required by --engine sglang"),
            "{}",
            e.message
        );
        check_argv(&v(&["s", "--alignment-nvtx-ranges", "--alignment-iteration-records"]), &reqs).unwrap();
    }

    #[test]
    fn module_specs() {
        let h = "ab".repeat(32);
        assert_eq!(
            parse_module(&format!("/a/b.so={h}")).unwrap(),
            ModuleSpec { path: "/a/b.so".into(), sha256: Some(h.clone()) }
        );
        assert_eq!(parse_module("/a/k=v.so").unwrap().sha256, None);
        assert!(parse_module("/a/b.so=abc").is_err());
        assert!(parse_module("").is_err());
    }
}
