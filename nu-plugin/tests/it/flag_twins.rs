//! Every flag of every binary has its Nushell twin: the same long name, the same kind (switch or valued),
//! the same help and the same default. The binaries' flags are their clap commands, defined once in the
//! library (`nsyskit::flags::commands()`; tests/flag_twins.rs of the root crate checks each binary prints
//! exactly that command's help); the Nushell side is each plugin command's `signature()`.
//! The deliberate exceptions are the one list [`EXCEPTIONS`], each with its reason; a listed exception that
//! no longer applies fails too.

use std::collections::BTreeSet;

use nu_protocol::{Signature, Value};

/// (binary or `*` for all, flag, reason): flags that exist in only one adapter, on purpose.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    ("*", "pretty", "JSON text formatting of the binary's stdout; a Nushell command returns values"),
    ("*", "compact", "JSON text formatting of the binary's stdout; a Nushell command returns values"),
    ("*", "help", "each adapter's own help (clap's --help, Nushell's --help)"),
    ("*", "version", "clap's --version; Nushell lists the plugin's version in `plugin list`"),
    ("sqlite-ranges", "format", "the binary's human table; Nushell shows the record as its own table"),
];

fn excepted(bin: &str, flag: &str) -> bool {
    EXCEPTIONS.iter().any(|(b, f, _)| (*b == "*" || *b == bin) && *f == flag)
}

/// A Nushell default value as the text clap shows (`0.25`, `500`, `throughput`).
fn nu_default_text(v: &Value) -> String {
    match v {
        Value::Float { val, .. } => val.to_string(),
        Value::Int { val, .. } => val.to_string(),
        Value::String { val, .. } => val.clone(),
        other => format!("{other:?}"),
    }
}

/// Every mismatch between a binary's clap command and the Nushell signature of the same name.
fn mismatches(cmd: &clap::Command, sig: &Signature) -> Vec<String> {
    let bin = cmd.get_name();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        seen.insert(long.to_string());
        if excepted(bin, long) {
            if sig.named.iter().any(|f| f.long == long) {
                out.push(format!("{bin} --{long}: listed as an exception but has a Nushell twin"));
            }
            continue;
        }
        let Some(flag) = sig.named.iter().find(|f| f.long == long) else {
            out.push(format!("{bin} --{long}: no Nushell twin"));
            continue;
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        if flag.desc != help {
            out.push(format!("{bin} --{long}: help differs\n  binary: {help}\n  nushell: {}", flag.desc));
        }
        let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        if switch != flag.arg.is_none() {
            out.push(format!("{bin} --{long}: a switch in one adapter only"));
        }
        let clap_default =
            if switch { None } else { arg.get_default_values().first().map(|d| d.to_string_lossy().into_owned()) };
        let nu_default = flag.default_value.as_ref().map(nu_default_text);
        if clap_default != nu_default {
            out.push(format!("{bin} --{long}: default differs: binary {clap_default:?}, nushell {nu_default:?}"));
        }
        if arg.get_short() != flag.short {
            out.push(format!("{bin} --{long}: short flag differs: {:?} vs {:?}", arg.get_short(), flag.short));
        }
    }
    for flag in &sig.named {
        if !seen.contains(&flag.long) && !excepted(bin, &flag.long) {
            out.push(format!("{bin} --{}: a Nushell flag the binary lacks", flag.long));
        }
    }
    out
}

#[test]
fn every_binary_flag_has_its_nushell_twin() {
    let plugin = nu_plugin_nsyskit::commands::all();
    let mut problems = Vec::new();
    let mut bins = BTreeSet::new();
    for cmd in nsyskit::flags::commands() {
        let bin = cmd.get_name().to_string();
        bins.insert(bin.clone());
        let Some(c) = plugin.iter().find(|c| c.name() == bin) else {
            problems.push(format!("{bin}: no Nushell command of that name"));
            continue;
        };
        problems.extend(mismatches(&cmd, &c.signature()));
    }
    // every binary of the workspace is covered (pod-attach's binary lives in its own crate)
    for bin in ["bundle-merge", "capture-compare", "gate-check", "kern-csv-to-json", "nsys-resolve"]
        .into_iter()
        .chain(["nvtx-readiness", "pod-attach", "report", "serve-capture", "sqlite-ranges", "step-budget"])
    {
        assert!(bins.contains(bin), "{bin} is missing from nsyskit::flags::commands()");
    }
    // an exception names a real flag of a real binary
    for (bin, flag, _) in EXCEPTIONS {
        if *bin != "*" {
            let cmd = nsyskit::flags::commands().into_iter().find(|c| c.get_name() == *bin);
            assert!(
                cmd.is_some_and(|c| c.get_arguments().any(|a| a.get_long() == Some(flag))),
                "exception {bin} --{flag} names no flag of the binary"
            );
        }
    }
    assert!(problems.is_empty(), "{} mismatches:\n{}", problems.len(), problems.join("\n"));
}

/// The check catches a drifted twin: a help, a default and a missing flag planted in a copy of a signature.
#[test]
fn a_planted_mismatch_fails() {
    let cmd = nsyskit::flags::commands().into_iter().find(|c| c.get_name() == "gate-check").unwrap();
    let plugin = nu_plugin_nsyskit::commands::all();
    let good = plugin.iter().find(|c| c.name() == "gate-check").unwrap().signature();
    assert!(mismatches(&cmd, &good).is_empty());
    let mut bad = good.clone();
    let f = bad.named.iter_mut().find(|f| f.long == "max-gap-share").unwrap();
    f.desc.push_str(" (default 0.3)");
    f.default_value = Some(Value::test_float(0.3));
    bad.named.retain(|f| f.long != "min-gap-ms");
    let found = mismatches(&cmd, &bad);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].contains("--max-gap-share: help differs"), "{found:#?}");
    assert!(found[1].contains("--max-gap-share: default differs"), "{found:#?}");
    assert!(found[2].contains("--min-gap-ms: no Nushell twin"), "{found:#?}");
}
