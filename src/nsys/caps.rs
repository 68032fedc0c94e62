//! Parsing the real `nsys --version`, `nsys profile --help` and `nsys export --help` texts.

use std::cmp::Ordering;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the resolved nsys can do, read from its own `profile --help` and `export --help`.
///
/// Later tools refuse a capture recipe that uses a switch the resolved nsys lacks (nsys 2023.4 has no
/// `--attach-pid` and no `--pytorch`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Capabilities {
    /// `nsys profile --cuda-graph-trace` exists (graph-replayed kernels at node level need it).
    pub cuda_graph_trace: bool,
    /// `nsys profile --capture-range` (`-c`) exists.
    pub capture_range: bool,
    /// `nsys profile --capture-range-end` exists.
    pub capture_range_end: bool,
    /// `nsys profile --trace-fork-before-exec` exists.
    pub trace_fork_before_exec: bool,
    /// `nsys profile --attach-pid` exists (attach to a running process).
    pub attach_pid: bool,
    /// `nsys profile --python-sampling` exists.
    pub python_sampling: bool,
    /// `nsys profile --pytorch` exists.
    pub pytorch: bool,
    /// `nsys export --type` values, in the order the help lists them (e.g. `sqlite`, `hdf`, …).
    pub export_types: Vec<String>,
}

/// The `nsys profile` switches [`Capabilities`] tracks: `(switch, field name)`.
pub const TRACKED_SWITCHES: &[(&str, &str)] = &[
    ("--cuda-graph-trace", "cuda_graph_trace"),
    ("--capture-range", "capture_range"),
    ("--capture-range-end", "capture_range_end"),
    ("--trace-fork-before-exec", "trace_fork_before_exec"),
    ("--attach-pid", "attach_pid"),
    ("--python-sampling", "python_sampling"),
    ("--pytorch", "pytorch"),
];

impl Capabilities {
    /// Does the nsys support this tracked `profile` switch (`"--attach-pid"` or `"attach-pid"`)?
    /// `None` when the switch is not one [`Capabilities`] tracks.
    pub fn supports(&self, switch: &str) -> Option<bool> {
        let name = switch.trim_start_matches('-');
        let name = name.split('=').next().unwrap_or(name);
        Some(match name {
            "cuda-graph-trace" => self.cuda_graph_trace,
            "capture-range" | "c" => self.capture_range,
            "capture-range-end" => self.capture_range_end,
            "trace-fork-before-exec" => self.trace_fork_before_exec,
            "attach-pid" => self.attach_pid,
            "python-sampling" => self.python_sampling,
            "pytorch" => self.pytorch,
            _ => return None,
        })
    }

    /// The tracked switches used in a capture flag list (`["--trace=cuda,nvtx", "--attach-pid=12"]` or one
    /// whitespace-separated string split by the caller) that this nsys lacks, as `--switch` names.
    /// Switches the struct does not track are not judged here.
    pub fn unsupported<S: AsRef<str>>(&self, flags: &[S]) -> Vec<String> {
        let mut out = Vec::new();
        for f in flags {
            let f = f.as_ref();
            if !f.starts_with("--") {
                continue;
            }
            let name = f.split('=').next().unwrap_or(f);
            if self.supports(name) == Some(false) && !out.iter().any(|o: &String| o == name) {
                out.push(name.to_string());
            }
        }
        out
    }

    /// Can this nsys export to `ty` (`"sqlite"`)?
    pub fn can_export(&self, ty: &str) -> bool {
        self.export_types.iter().any(|t| t.eq_ignore_ascii_case(ty))
    }
}

/// The long option names (without `--`) a `nsys <command> --help` text declares, in order.
///
/// A declaration is a line whose first non-blank text is `-x, --name…` or `--name…` (after an optional
/// `(Experimental) ` or `(Deprecated) ` tag), the name followed by
/// `=`, `[`, `<`, a blank then `[`/`<` (`--include-blobs [true|false]`) or the end of the line (prose that merely mentions `--capture-range option.` does not count).
/// Bracket alternatives are expanded: `--nvtx-domain-[include|exclude]=` declares `nvtx-domain-include` and
/// `nvtx-domain-exclude`.
pub fn declared_options(help: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        // `(Experimental) --syscall`, `(Deprecated) --event-sampling-frequency=`
        let t = match t.strip_prefix('(').and_then(|r| r.split_once(") ")) {
            Some((tag, rest)) if tag.chars().all(|c| c.is_ascii_alphabetic()) => rest.trim_start(),
            _ => t,
        };
        let t = match t.strip_prefix('-') {
            Some(rest) if !rest.starts_with('-') => {
                // short form `-x, --long`
                let mut chars = rest.chars();
                match (chars.next(), chars.as_str().strip_prefix(", ")) {
                    (Some(c), Some(long)) if c.is_ascii_alphanumeric() || c == '?' => long,
                    _ => continue,
                }
            }
            Some(_) => t,
            None => continue,
        };
        let Some(body) = t.strip_prefix("--") else { continue };
        let name_len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '[' || c == ']' || c == '|'))
            .unwrap_or(body.len());
        let (name, after) = body.split_at(name_len);
        // `--x=`, `--x=<v>`, `--x<v>`, `--x`, `--x [true|false]`, `--x <v>`
        let after_ok = after.is_empty()
            || after.starts_with('=')
            || after.starts_with('<')
            || after.trim().is_empty()
            || (after.starts_with(char::is_whitespace) && after.trim_start().starts_with(['[', '<']));
        // `--name[=…]` puts the bracket inside `name`: split it off when it starts an optional value
        let (name, after_ok) = match name.find("[=") {
            Some(i) => (&name[..i], true),
            None => (name, after_ok || name.ends_with(']') && !name.contains('[')),
        };
        if name.is_empty() || !after_ok || !name.chars().next().unwrap().is_ascii_alphanumeric() {
            continue;
        }
        for n in expand_alternatives(name) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

fn expand_alternatives(name: &str) -> Vec<String> {
    if let (Some(open), Some(close)) = (name.find('['), name.find(']')) {
        if open < close {
            let (pre, rest) = name.split_at(open);
            let alts = &rest[1..close - open];
            let post = &rest[close - open + 1..];
            return alts.split('|').flat_map(|a| expand_alternatives(&format!("{pre}{a}{post}"))).collect();
        }
    }
    vec![name.trim_end_matches('-').to_string()]
}

/// The `--type` values listed by `nsys export --help`: the sentence `Possible values are: a, b, and c.` of the
/// `-t, --type=` block (it may wrap over several lines). Empty when the help has no such block.
pub fn export_types(export_help: &str) -> Vec<String> {
    let lines: Vec<&str> = export_help.lines().collect();
    let Some(start) = lines.iter().position(|l| {
        let t = l.trim_start();
        t.starts_with("-t, --type") || t.starts_with("--type=") || t == "--type"
    }) else {
        return Vec::new();
    };
    // the block ends at the next declaration
    let mut text = String::new();
    for l in &lines[start + 1..] {
        let t = l.trim();
        if t.starts_with('-') && !declared_options(l).is_empty() {
            break;
        }
        text.push(' ');
        text.push_str(t);
    }
    let Some(i) = text.find("Possible values are") else { return Vec::new() };
    let rest = &text[i + "Possible values are".len()..];
    let rest = rest.trim_start_matches(':').trim_start();
    let sentence = match rest.find('.') {
        Some(j) => &rest[..j],
        None => rest,
    };
    sentence
        .split(',')
        .map(|s| s.trim())
        .map(|s| s.strip_prefix("and ").or_else(|| s.strip_prefix("or ")).unwrap_or(s))
        .map(|s| s.trim_matches(|c| c == '\'' || c == '"' || c == ' '))
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .map(|s| s.to_string())
        .collect()
}

/// Capabilities from the real `nsys profile --help` and `nsys export --help` texts.
pub fn parse_capabilities(profile_help: &str, export_help: &str) -> Capabilities {
    let opts = declared_options(profile_help);
    let has = |n: &str| opts.iter().any(|o| o == n);
    Capabilities {
        cuda_graph_trace: has("cuda-graph-trace"),
        capture_range: has("capture-range"),
        capture_range_end: has("capture-range-end"),
        trace_fork_before_exec: has("trace-fork-before-exec"),
        attach_pid: has("attach-pid"),
        python_sampling: has("python-sampling"),
        pytorch: has("pytorch"),
        export_types: export_types(export_help),
    }
}

/// The version from `nsys --version` output:
/// `"NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0"` → `"2023.4.4.54-234433681190v0"`.
/// `None` when no line carries `version <YYYY.N…>`.
pub fn parse_version(version_output: &str) -> Option<String> {
    for line in version_output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2) {
            if w[0].eq_ignore_ascii_case("version") && looks_like_version(w[1]) {
                return Some(w[1].to_string());
            }
        }
    }
    None
}

fn looks_like_version(v: &str) -> bool {
    let nums = version_key(v);
    nums.len() >= 2 && nums[0] >= 2000 && nums[0] < 10000
}

/// The numeric components before the build suffix: `2023.4.4.54-234433681190v0` → `[2023, 4, 4, 54]`.
pub fn version_key(v: &str) -> Vec<u64> {
    let head = v.split(['-', ' ']).next().unwrap_or("");
    let mut out = Vec::new();
    for part in head.split('.') {
        match part.parse::<u64>() {
            Ok(n) => out.push(n),
            Err(_) => break,
        }
    }
    out
}

/// Order two nsys versions by their numeric components (`2025.3.1.90` > `2023.4.4.54`).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    version_key(a).cmp(&version_key(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE_2023: &str = include_str!("../../fixtures/nsys-help/2023.4.4/profile-help.txt");
    const EXPORT_2023: &str = include_str!("../../fixtures/nsys-help/2023.4.4/export-help.txt");
    const VERSION_2023: &str = include_str!("../../fixtures/nsys-help/2023.4.4/version.txt");

    #[test]
    fn real_2023_4_help() {
        let c = parse_capabilities(PROFILE_2023, EXPORT_2023);
        assert!(c.cuda_graph_trace);
        assert!(c.capture_range);
        assert!(c.capture_range_end);
        assert!(c.trace_fork_before_exec);
        assert!(c.python_sampling);
        assert!(!c.attach_pid, "nsys 2023.4 has no --attach-pid");
        assert!(!c.pytorch, "nsys 2023.4 has no --pytorch");
        assert_eq!(c.export_types, ["sqlite", "hdf", "text", "json", "info", "arrow", "arrowdir", "parquetdir"]);
        assert_eq!(c.unsupported(&["--trace=cuda", "--attach-pid=12", "--cuda-graph-trace=node"]), ["--attach-pid"]);
        assert!(c.can_export("sqlite"));
    }

    #[test]
    fn declared_options_of_real_help() {
        let o = declared_options(PROFILE_2023);
        for n in [
            "backtrace",
            "capture-range",
            "help",
            "output",
            "trace",
            "delay",
            "nvtx-domain-include",
            "nvtx-domain-exclude",
            "export",
        ] {
            assert!(o.iter().any(|x| x == n), "{n} missing from {o:?}");
        }
        // prose mentions are not declarations
        assert!(!o.iter().any(|x| x == "capture-range option"));
        assert_eq!(o.len(), 68, "{o:?}"); // 61 plain declaration lines, one of them `--nvtx-domain-[include|exclude]=`, 6 tagged `(Experimental)`/`(Deprecated)`
        assert!(o.iter().any(|x| x == "event-sampling-frequency") && o.iter().any(|x| x == "ib-switch-metrics-device"));
        let e = declared_options(EXPORT_2023);
        assert!(e.iter().any(|x| x == "type") && e.iter().any(|x| x == "lazy"), "{e:?}");
    }

    const PROFILE_2025: &str = include_str!("../../fixtures/nsys-help/2025.3.1/profile-help.txt");
    const EXPORT_2025: &str = include_str!("../../fixtures/nsys-help/2025.3.1/export-help.txt");
    const VERSION_2025: &str = include_str!("../../fixtures/nsys-help/2025.3.1/version.txt");

    /// The nsys 2025.3.1 that Nsight Compute bundles on the H200 machine (captured there with the device tool).
    #[test]
    fn real_2025_3_help() {
        let c = parse_capabilities(PROFILE_2025, EXPORT_2025);
        assert!(
            c.cuda_graph_trace
                && c.capture_range
                && c.capture_range_end
                && c.trace_fork_before_exec
                && c.python_sampling
        );
        assert!(c.pytorch, "2025.3.1 has --pytorch");
        assert!(!c.attach_pid, "this 2025.3.1 build has no --attach-pid either");
        assert_eq!(c.export_types, ["sqlite", "hdf", "text", "json", "info", "arrow", "arrowdir", "parquetdir"]);
        let o = declared_options(PROFILE_2025);
        // 69 plain declaration lines (+1 for `--nvtx-domain-[include|exclude]=`), 11 tagged `(Experimental)`/`(Deprecated)`
        assert_eq!(o.len(), 81, "{o:?}");
        for n in [
            "cuda-event-trace",
            "cuda-trace-all-apis",
            "python-functions-trace",
            "syscall",
            "enable",
            "gpu-metrics-devices",
        ] {
            assert!(o.iter().any(|x| x == n), "{n} missing");
        }
        let e = declared_options(EXPORT_2025);
        assert!(e.iter().any(|x| x == "include-blobs") && e.iter().any(|x| x == "include-json"), "{e:?}");
        assert_eq!(parse_version(VERSION_2025).as_deref(), Some("2025.3.1.0"));
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version(VERSION_2023).as_deref(), Some("2023.4.4.54-234433681190v0"));
        assert_eq!(
            parse_version("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0\n").as_deref(),
            Some("2025.3.1.90-253135822126v0")
        );
        assert_eq!(parse_version("garbage"), None);
        assert_eq!(parse_version("version banana"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(compare_versions("2025.3.1.90-1", "2023.4.4.54-2"), Ordering::Greater);
        assert_eq!(compare_versions("2023.4.4.54", "2023.4.4.54-x"), Ordering::Equal);
    }
}
