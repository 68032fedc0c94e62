//! Finding and verifying the nsys binary: candidates in order, each verified (canonical path, regular
//! executable file, `--version` within a timeout, a parsable version), the chosen one probed for capabilities.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::caps::{compare_versions, parse_capabilities, parse_version, Capabilities};
use crate::contract::{Error, Result};

/// The known install folders searched after `--nsys`, `NSYS_BIN` and `PATH` (newest version first).
pub const KNOWN_INSTALL_GLOBS: &[&str] = &[
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys",
];

/// The install-folder globs: `NSYSKIT_NSYS_DIRS` (`:`-separated globs of nsys executables; set but empty = search
/// no install folder) when set, else [`KNOWN_INSTALL_GLOBS`].
pub fn install_globs_from_env() -> Vec<String> {
    install_globs_from_vars(&|n| std::env::var_os(n))
}

/// [`install_globs_from_env`] over an environment given as a lookup (Nushell's `$env` for the plugin).
pub fn install_globs_from_vars(var: &dyn Fn(&str) -> Option<OsString>) -> Vec<String> {
    match var("NSYSKIT_NSYS_DIRS") {
        Some(v) => v.to_string_lossy().split(':').filter(|s| !s.is_empty()).map(|s| s.to_string()).collect(),
        None => {
            let mut g: Vec<String> = KNOWN_INSTALL_GLOBS.iter().map(|s| s.to_string()).collect();
            g.extend(project_install_globs(var("NSYS_HOME").as_deref(), var("HOME").as_deref()));
            g
        }
    }
}

/// Where this project's own `scripts/get-nsys` installs nsys: `$NSYS_HOME/usr/bin/nsys` (its DEST when
/// `NSYS_HOME` is set) and `~/.cache/nsyskit/*/usr/bin/nsys` (its default DEST, `~/.cache/nsyskit/nsys-2023.4`).
pub fn project_install_globs(nsys_home: Option<&std::ffi::OsStr>, home: Option<&std::ffi::OsStr>) -> Vec<String> {
    let mut g = Vec::new();
    if let Some(h) = nsys_home.filter(|h| !h.is_empty()) {
        g.push(format!("{}/usr/bin/nsys", Path::new(h).display()));
    }
    if let Some(h) = home.filter(|h| !h.is_empty()) {
        g.push(format!("{}/.cache/nsyskit/*/usr/bin/nsys", Path::new(h).display()));
    }
    g
}

/// Where to look for nsys and how long to wait for it.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// `--nsys PATH`: use exactly this binary (no fallback when it is unusable).
    pub nsys: Option<PathBuf>,
    /// The value of `NSYS_BIN` (an empty value counts as unset). Like `--nsys`, no fallback when unusable.
    pub nsys_bin: Option<OsString>,
    /// The `PATH` searched for `nsys` (every match, in `PATH` order).
    pub path_var: Option<OsString>,
    /// Glob patterns of install folders (`*` within one path component), searched last, newest version first.
    pub install_globs: Vec<String>,
    /// Limit for each `nsys --version` / `--help` run; a run past it is killed.
    pub timeout: Duration,
    /// Run `nsys profile --help` and `nsys export --help` on the chosen binary to fill [`Capabilities`].
    pub probe: bool,
    /// `--require-explicit-nsys`: only `--nsys` or `NSYS_BIN` may name the nsys; `PATH` and the install folders
    /// are not searched (the serving-run manual forbids that fallback for evidence runs).
    pub require_explicit: bool,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        ResolveOptions::from_env()
    }
}

impl ResolveOptions {
    /// `NSYS_BIN` and `PATH` from this process's environment, the install folders (`NSYSKIT_NSYS_DIRS` when
    /// set, else [`KNOWN_INSTALL_GLOBS`]), a 10 s timeout, capabilities probed.
    pub fn from_env() -> ResolveOptions {
        ResolveOptions::from_vars(&|n| std::env::var_os(n))
    }

    /// [`ResolveOptions::from_env`] over an environment given as a lookup (the user's environment of a tool's
    /// run: the process's for a binary, Nushell's `$env` for the plugin).
    pub fn from_vars(var: &dyn Fn(&str) -> Option<OsString>) -> ResolveOptions {
        ResolveOptions {
            nsys: None,
            nsys_bin: var("NSYS_BIN").filter(|v| !v.is_empty()),
            path_var: var("PATH"),
            install_globs: install_globs_from_vars(var),
            timeout: Duration::from_millis(10_000),
            probe: true,
            require_explicit: false,
        }
    }
}

/// One place nsys was looked for, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Candidate")]
pub struct NsysCandidate {
    /// The path as found (before resolving symlinks).
    pub path: PathBuf,
    /// `--nsys`, `NSYS_BIN`, `PATH` or `install-dir`.
    pub source: String,
    /// The path with every symlink resolved, when it resolves.
    pub canonical: Option<PathBuf>,
    /// The version `--version` printed, when it was run and parsed.
    pub version: Option<String>,
    /// Whether this is the nsys that was chosen.
    pub chosen: bool,
    /// Why it was chosen or not (`not executable (mode 0644)`, `--version did not finish within 500 ms`, …).
    pub reason: String,
}

/// The resolved nsys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Resolved {
    /// Canonical path (symlinks resolved) of the chosen binary.
    pub path: PathBuf,
    /// Where it was found (`--nsys`, `NSYS_BIN`, `PATH`, `install-dir`).
    pub source: String,
    /// Its version, e.g. `2023.4.4.54-234433681190v0`.
    pub version: String,
    /// What its `profile --help` / `export --help` declare (all false / empty when not probed).
    pub capabilities: Capabilities,
    /// Whether `capabilities` was probed from the binary.
    pub probed: bool,
    /// Every candidate in search order, with why it was or was not chosen.
    pub candidates: Vec<NsysCandidate>,
    /// `--require-explicit-nsys` was given: only `--nsys` or `NSYS_BIN` could name this nsys (absent: the
    /// `PATH` / install-folder fallback was allowed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explicit_required: bool,
}

/// The output of a program run with a timeout.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Why a timed run did not produce output.
#[derive(Debug, Clone)]
pub enum RunError {
    Spawn(String),
    Timeout(Duration),
    Io(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn(e) => write!(f, "cannot run it: {e}"),
            RunError::Timeout(d) => write!(f, "did not finish within {} ms (killed)", d.as_millis()),
            RunError::Io(e) => write!(f, "cannot read its output: {e}"),
        }
    }
}

/// Run `program args…` with stdin closed and output captured in temporary files; past `timeout` its whole
/// process group is killed (a shell script's children too).
pub fn run_with_timeout(program: &Path, args: &[&str], timeout: Duration) -> std::result::Result<RunOutput, RunError> {
    use std::io::{Read, Seek};
    let mut out = tempfile::tempfile().map_err(|e| RunError::Io(e.to_string()))?;
    let mut err = tempfile::tempfile().map_err(|e| RunError::Io(e.to_string()))?;
    let mut attempt = 0;
    let mut child = loop {
        let r = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| RunError::Io(e.to_string()))?)
            .stderr(err.try_clone().map_err(|e| RunError::Io(e.to_string()))?)
            .process_group(0)
            .spawn();
        match r {
            Ok(c) => break c,
            // ETXTBSY: a just-written executable still open for writing in a forked, not yet exec'd child
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 5 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20 * attempt));
            }
            Err(e) => return Err(RunError::Spawn(e.to_string())),
        }
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(RunError::Io(e.to_string())),
        }
        if start.elapsed() >= timeout {
            let pgid = child.id() as i32;
            // SAFETY: kill(2) on the process group this function created for the child.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::Timeout(timeout));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |f: &mut std::fs::File| -> std::result::Result<String, RunError> {
        let mut buf = Vec::new();
        f.seek(std::io::SeekFrom::Start(0)).map_err(|e| RunError::Io(e.to_string()))?;
        f.read_to_end(&mut buf).map_err(|e| RunError::Io(e.to_string()))?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    Ok(RunOutput { status, stdout: read(&mut out)?, stderr: read(&mut err)? })
}

/// Expand a glob whose `*`/`?` wildcards stay within path components (`/opt/x/*/bin/nsys`), sorted.
pub fn expand_glob(pattern: &str) -> Vec<PathBuf> {
    let mut paths = vec![PathBuf::from("/")];
    let rel = pattern.strip_prefix('/').unwrap_or(pattern);
    if !pattern.starts_with('/') {
        paths = vec![PathBuf::from(".")];
    }
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        if comp.contains(['*', '?', '[']) {
            let re = glob_regex(comp);
            for p in &paths {
                let Ok(rd) = std::fs::read_dir(p) else { continue };
                let mut names: Vec<String> =
                    rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                names.sort();
                for n in names {
                    if re.is_match(&n) {
                        next.push(p.join(n));
                    }
                }
            }
        } else {
            for p in &paths {
                let q = p.join(comp);
                if q.symlink_metadata().is_ok() {
                    next.push(q);
                }
            }
        }
        paths = next;
        if paths.is_empty() {
            break;
        }
    }
    paths
}

/// A shell glob (`*`, `?`, `[…]`) as an anchored regex over one name.
pub fn glob_regex(glob: &str) -> regex::Regex {
    let mut re = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            '[' => {
                let mut class = String::new();
                let mut closed = false;
                for d in chars.by_ref() {
                    if d == ']' {
                        closed = true;
                        break;
                    }
                    class.push(d);
                }
                if closed && !class.is_empty() {
                    let class = class.strip_prefix('!').map(|c| format!("^{c}")).unwrap_or(class);
                    re.push('[');
                    re.push_str(&class.replace('\\', "\\\\"));
                    re.push(']');
                } else {
                    re.push_str(&regex::escape(&format!("[{class}")));
                }
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re).unwrap_or_else(|_| regex::Regex::new(&format!("^{}$", regex::escape(glob))).unwrap())
}

/// Check one candidate: canonical path, regular executable file, `--version` within the timeout, parsable.
/// `Ok((canonical, version))` or `Err((canonical if any, reason))`.
pub fn verify(path: &Path, timeout: Duration) -> std::result::Result<(PathBuf, String), (Option<PathBuf>, String)> {
    let lmeta = match path.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err((None, "does not exist".into())),
        Err(e) => return Err((None, format!("cannot stat: {e}"))),
    };
    let canonical = match std::fs::canonicalize(path) {
        Ok(c) => c,
        Err(e) => {
            if lmeta.file_type().is_symlink() {
                let target = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
                return Err((None, format!("broken symlink (to {target})")));
            }
            return Err((None, format!("cannot resolve the path: {e}")));
        }
    };
    let meta = match std::fs::metadata(&canonical) {
        Ok(m) => m,
        Err(e) => return Err((Some(canonical), format!("cannot stat: {e}"))),
    };
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file" };
        return Err((Some(canonical), format!("{what}, not an executable file")));
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err((Some(canonical), format!("not executable (mode {:04o})", mode & 0o7777)));
    }
    let out = match run_with_timeout(&canonical, &["--version"], timeout) {
        Ok(o) => o,
        Err(e) => return Err((Some(canonical), format!("`--version` {e}"))),
    };
    let text = format!("{}{}", out.stdout, out.stderr);
    match parse_version(&text) {
        Some(v) if out.status.success() => Ok((canonical, v)),
        Some(v) => Err((Some(canonical), format!("`--version` printed {v} but exited with {}", out.status))),
        None => {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            let first: String = first.chars().take(80).collect();
            Err((Some(canonical), format!("`--version` printed no nsys version ({}: {:?})", out.status, first)))
        }
    }
}

/// Probe the capabilities of a verified nsys from its `profile --help` and `export --help`.
pub fn probe_capabilities(nsys: &Path, timeout: Duration) -> std::result::Result<Capabilities, String> {
    let run = |cmd: &str| -> std::result::Result<String, String> {
        let o = run_with_timeout(nsys, &[cmd, "--help"], timeout).map_err(|e| format!("`{cmd} --help` {e}"))?;
        let text = format!("{}{}", o.stdout, o.stderr);
        if !o.status.success() && text.trim().is_empty() {
            return Err(format!("`{cmd} --help` exited with {} and printed nothing", o.status));
        }
        Ok(text)
    };
    let profile = run("profile")?;
    let export = run("export")?;
    let caps = parse_capabilities(&profile, &export);
    if !caps.capture_range && caps.export_types.is_empty() {
        return Err(
            "`profile --help`/`export --help` do not look like nsys help (no --capture-range, no export types)".into(),
        );
    }
    Ok(caps)
}

struct Found {
    path: PathBuf,
    source: &'static str,
}

fn candidates(opts: &ResolveOptions) -> Vec<Found> {
    let mut out = Vec::new();
    if let Some(p) = &opts.nsys {
        out.push(Found { path: p.clone(), source: "--nsys" });
    }
    if let Some(p) = opts.nsys_bin.as_ref().filter(|v| !v.is_empty()) {
        out.push(Found { path: PathBuf::from(p), source: "NSYS_BIN" });
    }
    if let Some(pv) = &opts.path_var {
        for dir in std::env::split_paths(pv) {
            if dir.as_os_str().is_empty() {
                continue;
            }
            let p = dir.join("nsys");
            // listed when something named nsys is there (even a broken link or non-executable file)
            if p.symlink_metadata().is_ok() {
                out.push(Found { path: p, source: "PATH" });
            }
        }
    }
    for g in &opts.install_globs {
        for p in expand_glob(g) {
            out.push(Found { path: p, source: "install-dir" });
        }
    }
    out
}

/// Find the nsys to use. Order: `--nsys`, `NSYS_BIN`, every `nsys` on `PATH` (in `PATH` order), then the
/// install folders (newest version first). `--nsys` and `NSYS_BIN` are explicit choices: when the first of them
/// given is unusable, that is an error, not a fall back to another nsys. Otherwise the first usable candidate
/// wins. Every candidate is recorded with the reason it was or was not chosen.
///
/// Error (exit 2, environment): nothing usable, with every candidate and why it was rejected.
pub fn resolve(opts: &ResolveOptions) -> Result<Resolved> {
    let found = candidates(opts);
    let explicit = found.first().filter(|f| f.source == "--nsys" || f.source == "NSYS_BIN").map(|f| f.source);
    if opts.require_explicit && explicit.is_none() {
        let fallback: Vec<String> = found.iter().map(|f| format!("{} [{}]", f.path.display(), f.source)).collect();
        return Err(Error::usage(format!(
            "--require-explicit-nsys: neither --nsys nor NSYS_BIN names the nsys; PATH and the install folders are not searched for an evidence run{}: give --nsys PATH or set NSYS_BIN",
            if fallback.is_empty() { String::new() } else { format!(" (they would have offered {})", fallback.join(", ")) }
        ))
        .with_arg("--require-explicit-nsys"));
    }
    let mut cands: Vec<NsysCandidate> = Vec::new();
    // verification results, indexed like `cands`
    let mut ok: Vec<bool> = Vec::new();
    for (i, f) in found.iter().enumerate() {
        let mut c = NsysCandidate {
            path: f.path.clone(),
            source: f.source.into(),
            canonical: None,
            version: None,
            chosen: false,
            reason: String::new(),
        };
        if let (Some(src), true) = (explicit, i > 0) {
            c.canonical = std::fs::canonicalize(&f.path).ok();
            c.reason = format!("not considered: {src} was given");
            cands.push(c);
            ok.push(false);
            continue;
        }
        let canon = std::fs::canonicalize(&f.path).ok();
        if let Some(j) = canon.as_ref().and_then(|cp| cands.iter().position(|o| o.canonical.as_ref() == Some(cp))) {
            c.canonical = canon;
            c.version = cands[j].version.clone();
            c.reason = format!("same file as candidate {} ({})", j + 1, cands[j].path.display());
            cands.push(c);
            ok.push(false);
            continue;
        }
        match verify(&f.path, opts.timeout) {
            Ok((canonical, version)) => {
                c.canonical = Some(canonical);
                c.version = Some(version);
                ok.push(true);
            }
            Err((canonical, reason)) => {
                c.canonical = canonical;
                c.reason = reason;
                ok.push(false);
            }
        }
        cands.push(c);
    }
    // install folders: newest version first (stable for equal versions), unusable ones after
    let first_install = cands.iter().position(|c| c.source == "install-dir").unwrap_or(cands.len());
    let mut tail: Vec<(NsysCandidate, bool)> = cands.drain(first_install..).zip(ok.drain(first_install..)).collect();
    tail.sort_by(|(a, aok), (b, bok)| {
        bok.cmp(aok).then_with(|| match (&a.version, &b.version) {
            (Some(x), Some(y)) => compare_versions(y, x),
            _ => std::cmp::Ordering::Equal,
        })
    });
    for (c, o) in tail {
        cands.push(c);
        ok.push(o);
    }

    let mut chosen: Option<(usize, Capabilities, bool)> = None;
    for i in 0..cands.len() {
        if !ok[i] {
            continue;
        }
        if let Some((j, _, _)) = &chosen {
            cands[i].reason = format!(
                "usable, but candidate {} ({}) comes first in the search order",
                j + 1,
                cands[*j].path.display()
            );
            continue;
        }
        let canonical = cands[i].canonical.clone().expect("verified candidates have a canonical path");
        let caps = if opts.probe {
            match probe_capabilities(&canonical, opts.timeout) {
                Ok(c) => Some((c, true)),
                Err(e) => {
                    cands[i].reason = format!("capability probe failed: {e}");
                    ok[i] = false;
                    None
                }
            }
        } else {
            Some((Capabilities::default(), false))
        };
        if let Some((caps, probed)) = caps {
            cands[i].chosen = true;
            cands[i].reason = match cands[i].source.as_str() {
                "--nsys" => "given with --nsys".into(),
                "NSYS_BIN" => "given by NSYS_BIN".into(),
                "PATH" => "first usable nsys on PATH".into(),
                _ => "newest usable nsys in the known install folders".into(),
            };
            chosen = Some((i, caps, probed));
        } else if explicit.is_some() {
            break;
        }
    }
    match chosen {
        Some((i, capabilities, probed)) => {
            let c = &cands[i];
            Ok(Resolved {
                path: c.canonical.clone().unwrap(),
                source: c.source.clone(),
                version: c.version.clone().unwrap(),
                capabilities,
                probed,
                candidates: cands,
                explicit_required: opts.require_explicit,
            })
        }
        None => {
            let mut msg = match explicit {
                Some(src) => format!("the nsys given by {src} is not usable"),
                None => "no usable nsys found".to_string(),
            };
            if cands.is_empty() {
                let dirs = if opts.install_globs.is_empty() {
                    "no install folder searched".to_string()
                } else {
                    format!("nothing in {}", opts.install_globs.join(", "))
                };
                msg.push_str(&format!(": no candidates (no --nsys, NSYS_BIN unset, no nsys on PATH, {dirs}); give --nsys PATH or set NSYS_BIN"));
            } else {
                msg.push_str("; candidates:");
                for (k, c) in cands.iter().enumerate() {
                    msg.push_str(&format!("\n  {}. {} [{}]: {}", k + 1, c.path.display(), c.source, c.reason));
                }
            }
            if explicit.is_none() && !cands.is_empty() {
                msg.push_str("\n  (give --nsys PATH or set NSYS_BIN; searched PATH");
                for g in &opts.install_globs {
                    msg.push_str(", ");
                    msg.push_str(g);
                }
                msg.push(')');
            }
            Err(Error::env(msg).with_arg("--nsys"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let r = glob_regex("vllm_*");
        assert!(r.is_match("vllm_123") && !r.is_match("xvllm_1"));
        let r = glob_regex("psm_[0-9]?");
        assert!(r.is_match("psm_1a") && !r.is_match("psm_ab"));
        let r = glob_regex("cuda*");
        assert!(r.is_match("cuda-12.4") && r.is_match("cuda"));
    }

    fn real_nsys() -> Option<PathBuf> {
        let p = std::env::var_os("NSYS_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root/.cache/nsyskit/nsys-2023.4/usr/bin/nsys"));
        if p.exists() {
            Some(p)
        } else {
            eprintln!("SKIP: no real nsys (set NSYS_BIN or run scripts/get-nsys)");
            None
        }
    }

    fn opts(nsys: Option<PathBuf>, path_var: Option<&str>) -> ResolveOptions {
        ResolveOptions {
            nsys,
            nsys_bin: None,
            path_var: path_var.map(OsString::from),
            install_globs: vec![],
            timeout: Duration::from_millis(10_000),
            probe: true,
            require_explicit: false,
        }
    }

    #[test]
    fn resolves_and_probes_the_real_nsys() {
        let Some(n) = real_nsys() else { return };
        let r = resolve(&opts(Some(n.clone()), None)).unwrap();
        assert_eq!(r.version, "2023.4.4.54-234433681190v0");
        assert_eq!(r.path, std::fs::canonicalize(&n).unwrap());
        assert!(r.path.ends_with("nsight-systems/target-linux-x64/nsys"), "{}", r.path.display());
        assert!(r.probed && r.capabilities.cuda_graph_trace && !r.capabilities.attach_pid);
        assert!(r.capabilities.can_export("sqlite"));
        assert_eq!(r.candidates.len(), 1);
        assert!(r.candidates[0].chosen);
    }

    #[test]
    fn nothing_found_lists_the_search() {
        let d = tempfile::tempdir().unwrap();
        let e = resolve(&opts(None, Some(&d.path().display().to_string()))).unwrap_err();
        assert!(e.message.contains("no usable nsys found: no candidates"), "{}", e.message);
    }
}
