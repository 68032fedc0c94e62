//! Every `--help` example of every binary runs as printed, and `--version` names the binary.
//!
//! The examples are read from each binary's `--help` (the `Example…:` block: indented lines, `\` joins
//! lines), and each block runs as one bash script (`set -eo pipefail`) from a stand-in repository root: a temp
//! folder holding `fixtures/` and `scripts/` (links to this checkout's) and a git repository of its own, so
//! that what the examples write (`bundle.json`, `runs/…`) never lands in the checkout. The block's exit status
//! must be the one its header names (`exit 1`), else 0. A block that needs a tool this machine lacks (nsys,
//! jq, gcc, curl) is skipped with the reason recorded (`common::skip`).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

const BINARIES: &[&str] = &[
    "nsys-resolve",
    "serve-capture",
    "pod-attach",
    "gate-check",
    "sqlite-ranges",
    "nvtx-readiness",
    "kern-csv-to-json",
    "bundle-merge",
    "capture-compare",
    "report",
    "step-budget",
];

fn bin_dir() -> PathBuf {
    assert_cmd::cargo::cargo_bin("report").parent().unwrap().to_path_buf()
}

/// One example block of a help text: its header, and each command with the exit status it must give (a
/// trailing `# exit N` comment, else the header's `exit N` for the block's last command, else 0).
struct Block {
    header: String,
    commands: Vec<(String, i32)>,
}

fn examples(help: &str) -> Vec<Block> {
    let exit_re = regex::Regex::new(r"exit (\d+)").unwrap();
    let mut out = Vec::new();
    let mut lines = help.lines().peekable();
    while let Some(l) = lines.next() {
        if !l.starts_with("Example") {
            continue;
        }
        let mut header = l.to_string();
        // a long header is wrapped by clap: its other lines are not indented
        while let Some(n) = lines.peek() {
            if n.starts_with("  ") || n.trim().is_empty() {
                break;
            }
            header.push(' ');
            header.push_str(n.trim());
            lines.next();
        }
        let mut cmds: Vec<String> = Vec::new();
        let mut cont = false;
        while let Some(n) = lines.peek() {
            if !n.starts_with("  ") || n.trim().is_empty() {
                break;
            }
            let t = n.trim();
            if cont {
                cmds.last_mut().unwrap().push_str(&format!("\n  {t}"));
            } else {
                cmds.push(t.to_string());
            }
            cont = t.ends_with('\\');
            lines.next();
        }
        let header_exit = exit_re.captures(&header).map(|c| c[1].parse::<i32>().unwrap());
        let n = cmds.len();
        let commands = cmds
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let own = c
                    .rsplit_once('#')
                    .and_then(|(_, comment)| exit_re.captures(comment))
                    .map(|m| m[1].parse::<i32>().unwrap());
                let expect = own.or(if i + 1 == n { header_exit } else { None }).unwrap_or(0);
                (c, expect)
            })
            .collect();
        out.push(Block { header, commands });
    }
    out
}

fn have(tool: &str) -> bool {
    which::which(tool).is_ok()
}

/// A stand-in repository root for the examples.
fn stand_in_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for sub in ["fixtures", "scripts"] {
        std::os::unix::fs::symlink(common::root().join(sub), d.path().join(sub)).unwrap();
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(d.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    assert!(
        git(&["init", "-q"]) && git(&["commit", "-q", "--allow-empty", "-m", "stand-in"]),
        "git is needed for the stand-in root"
    );
    d
}

#[test]
fn every_help_example_runs_as_printed() {
    let bins = bin_dir();
    let nsys = nsyskit::export::default_nsys()
        .ok()
        .filter(|p| Command::new(p).arg("--version").output().map(|o| o.status.success()).unwrap_or(false));
    let path = format!(
        "{}:{}{}",
        bins.display(),
        nsys.as_ref().and_then(|p| p.parent()).map(|p| format!("{}:", p.display())).unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut ran, mut skipped, mut failed) = (0, 0, Vec::new());
    for b in BINARIES {
        let exe = bins.join(b);
        if !exe.exists() {
            // pod-attach is its own crate: built by `cargo build --workspace` (scripts/test)
            common::skip(
                &format!("help examples of {b}"),
                &format!("{} not built (cargo build --workspace)", exe.display()),
            );
            skipped += 1;
            continue;
        }
        let help = Command::new(&exe).arg("--help").output().unwrap();
        assert_eq!(help.status.code(), Some(0), "{b} --help");
        let help = String::from_utf8(help.stdout).unwrap();
        let blocks = examples(&help);
        assert!(!blocks.is_empty(), "{b} --help has no example");
        for Block { header, commands } in blocks {
            let script: String = commands.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join("\n");
            assert!(!script.contains('<') || script.contains("<<"), "{b}: a placeholder in the example: {script}");
            let mut needs = Vec::new();
            if script.contains("NSYS_BIN") || script.contains("nsys stats") || script.contains("get-nsys") {
                needs.push("nsys");
            }
            for t in ["jq", "gcc", "curl", "git"] {
                if script
                    .split(|c: char| c.is_whitespace() || c == '|' || c == '(' || c == ';' || c == '"')
                    .any(|w| w == t)
                    || (t == "git" && script.contains("--repo"))
                {
                    needs.push(t);
                }
            }
            let missing: Vec<&str> =
                needs.iter().copied().filter(|t| if *t == "nsys" { nsys.is_none() } else { !have(t) }).collect();
            if !missing.is_empty() {
                common::skip(
                    &format!("help example of {b} ({header})"),
                    &format!(
                        "needs {} (scripts/test installs nsys; apt-get install jq gcc curl git)",
                        missing.join(", ")
                    ),
                );
                skipped += 1;
                continue;
            }
            // each command runs in turn in one shell; a command whose exit status is not the expected one ends it
            let mut sh = String::from("set -o pipefail\n");
            for (i, (c, expect)) in commands.iter().enumerate() {
                sh.push_str(&format!(
                    "{c}\nrc=$?; if [ $rc -ne {expect} ]; then echo \"EXAMPLE FAILED: command {} exited $rc, expected {expect}\" >&2; exit 100; fi\n",
                    i + 1
                ));
            }
            let root = stand_in_root();
            let mut c = Command::new("bash");
            c.arg("-c").arg(&sh).current_dir(root.path()).env("PATH", &path);
            // NSYS_BIN only where the example says it needs it (serve-capture's): the others find nsys alone
            match &nsys {
                Some(p) if script.contains("NSYS_BIN") => c.env("NSYS_BIN", p),
                _ => c.env_remove("NSYS_BIN"),
            };
            let out = c.output().unwrap();
            ran += 1;
            let rc = out.status.code().unwrap_or(-1);
            eprintln!(
                "example of {b} ({header}): {} commands, {}",
                commands.len(),
                if rc == 0 { "each exited as expected" } else { "FAILED" }
            );
            if rc != 0 {
                failed.push(format!(
                    "{b}: {header}\n{script}\nexit {rc}\nstderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .rev()
                        .take(8)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
        }
    }
    eprintln!("help examples: {ran} blocks ran, {skipped} skipped, {} failed", failed.len());
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(ran >= 7, "only {ran} example blocks ran");
}

#[test]
fn version_names_the_binary() {
    let bins = bin_dir();
    for b in BINARIES {
        let exe = bins.join(b);
        if !exe.exists() {
            common::skip(&format!("{b} --version"), &format!("{} not built (cargo build --workspace)", exe.display()));
            continue;
        }
        let out = Command::new(&exe).arg("--version").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v = String::from_utf8(out.stdout).unwrap();
        assert_eq!(v.trim(), format!("{b} {}", env!("CARGO_PKG_VERSION")), "{b} --version");
    }
}

#[test]
fn the_example_parser_reads_blocks_and_expected_exits() {
    let help = "Usage: x\n\nExamples (a refusal, exit 1 expected\nbecause it is refused):\n  a --b \\\n    --c  # exit 2: bad\n  d\n  e\n\nExit: 0 ok\n";
    let e = examples(help);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].header, "Examples (a refusal, exit 1 expected because it is refused):");
    assert_eq!(
        e[0].commands,
        vec![("a --b \\\n  --c  # exit 2: bad".to_string(), 2), ("d".to_string(), 0), ("e".to_string(), 1)]
    );
}

#[test]
fn help_examples_fit_80_columns() {
    // clap wraps long lines into what looks like a new command: every example line must fit
    let bins = bin_dir();
    for b in BINARIES {
        let exe = bins.join(b);
        if !exe.exists() {
            continue;
        }
        let wide = Command::new(&exe).arg("--help").env("COLUMNS", "200").output().unwrap();
        let narrow = Command::new(&exe).arg("--help").env("COLUMNS", "80").output().unwrap();
        let cmds =
            |o: &[u8]| examples(&String::from_utf8_lossy(o)).into_iter().flat_map(|b| b.commands).collect::<Vec<_>>();
        assert_eq!(cmds(&narrow.stdout), cmds(&wide.stdout), "{b}: an example line is wrapped at 80 columns");
    }
}

/// Issue #41: `scripts/install --help` says what each part costs (time and disk, measured, with the load), the
/// analysis binaries are installed first and the rest is optional (`--analysis-only`, `--no-pod-attach`,
/// `--no-plugin`) or in the background (`--background`); an unknown option is exit 2 before anything is built.
#[test]
fn install_help_states_costs_and_options() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash").arg(root.join("scripts/install")).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in ["--analysis-only", "--background", "--no-pod-attach", "--no-plugin", "--no-nsys"] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
    // each of the three builds carries a measured wall time and its load; step 1 its CPU time and disk
    let step = |n: &str| help.split(&format!("  {n}. ")).nth(1).unwrap().split("\n  ").next().unwrap().to_string();
    let s1 = help.split("  1. ").nth(1).unwrap().split("  2. ").next().unwrap();
    for want in ["24 min 36 s wall", "305 s CPU", "load 10-17", "312 MB", "79 MB", "2026-12-06"] {
        assert!(s1.contains(want), "step 1 lacks {want:?}: {s1}");
    }
    assert!(step("2").contains("~18 min wall under load 8-11"), "{}", step("2"));
    assert!(help.contains("~33 min wall under load 8-11"), "{help}");
    assert!(help.contains("5 s (docs/first-hour.md)"), "{help}");
    // the analysis binaries come first in the script itself
    let script = std::fs::read_to_string(root.join("scripts/install")).unwrap();
    let at = |s: &str| script.find(s).unwrap_or_else(|| panic!("{s} not in scripts/install"));
    assert!(at("  cargo_install .\n") < at("cargo_install bins/pod-attach"));
    assert!(at("  cargo_install .\n") < at("cargo_install nu-plugin"));
    let out = Command::new("bash").arg(root.join("scripts/install")).arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option --bogus"));
}

/// Issue #41: the measured first-hour times (wall, CPU, load) are on a docs page linked from the README.
#[test]
fn the_first_hour_page_is_linked_with_measured_times() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("(docs/first-hour.md)"), "README does not link docs/first-hour.md");
    let page = std::fs::read_to_string(root.join("docs/first-hour.md")).unwrap();
    for want in ["1 min 22 s", "71 s", "12 min 9 s", "724 s", "517 passed", "24 min 36 s", "4.9 s"] {
        assert!(page.contains(want), "docs/first-hour.md lacks {want:?}");
    }
}
