//! Every binary parses the library's definition of its flags (`nsyskit::flags`, the one the Nushell plugin
//! builds its signatures from; nu-plugin/tests/flag_twins.rs checks the twins): its `--help` and `-h` are
//! exactly what that clap command renders.

use assert_cmd::Command;

#[test]
fn each_binary_prints_the_help_of_its_library_definition() {
    let mut checked = 0;
    for cmd in nsyskit::flags::commands() {
        let name = cmd.get_name().to_string();
        if name == "pod-attach" {
            // its binary is the nsyskit-pod-attach crate's (bins/pod-attach), checked there
            continue;
        }
        for flag in ["--help", "-h"] {
            // what clap prints for this flag with the library's command
            let want = cmd.clone().try_get_matches_from([name.as_str(), flag]).unwrap_err().render().to_string();
            let out = Command::cargo_bin(&name).unwrap().arg(flag).env("COLUMNS", "100").output().unwrap();
            assert!(out.status.success(), "{name} {flag}");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "{name} {flag}");
        }
        checked += 1;
    }
    assert_eq!(checked, 10);
}

/// The defaults a tool's docs page states (`--max-gap-share` (0.25) in prose, `| --port | 8000 |` in a
/// flag table) are the defaults of its definition: the docs cannot drift from the one definition either.
#[test]
fn docs_state_the_defined_defaults() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let prose = regex::Regex::new(r"`--([a-z-]+)` \(([0-9][0-9.]*)\)").unwrap();
    let row = regex::Regex::new(r"^\| `--([a-z-]+)`[^|]*\| *`?((?:[^`|\\]|\\\|)*?)`?(?: \([^|]*\))? *\|").unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for cmd in nsyskit::flags::commands() {
        let name = cmd.get_name().to_string();
        let Ok(text) = std::fs::read_to_string(root.join("docs").join(format!("{name}.md"))) else { continue };
        // prose, and the rows of `| flag | default | … |` tables
        let mut stated: Vec<(String, String)> =
            prose.captures_iter(&text).map(|c| (c[1].to_string(), c[2].to_string())).collect();
        let mut in_table = false;
        for line in text.lines() {
            in_table = (in_table && line.starts_with('|')) || line.starts_with("| flag | default |");
            if let Some(c) = row.captures(line).filter(|_| in_table) {
                stated.push((c[1].to_string(), c[2].replace("\\|", "|")));
            }
        }
        for (flag, doc) in &stated {
            let (flag, doc) = (flag.as_str(), doc.trim());
            let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(flag)) else { continue };
            let Some(def) = arg.get_default_values().first().map(|d| d.to_string_lossy().into_owned()) else {
                continue;
            };
            if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                continue;
            }
            let same = match (doc.parse::<f64>(), def.parse::<f64>()) {
                (Ok(a), Ok(b)) => a == b,
                _ => doc == def,
            };
            checked += 1;
            if !same {
                wrong.push(format!("docs/{name}.md: --{flag} documented as {doc:?}, defined as {def:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 15, "only {checked} documented defaults found");
    eprintln!("{checked} documented defaults checked");
}
