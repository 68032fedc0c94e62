//! The `--iterations` / `--iteration-records` twins (#22) in a real nu 0.115.1: the same library functions as
//! the binaries, a window that selects nothing is a RETRY record (data, not an error), and each flag's help
//! is the binary's.

use crate::common;

use common::Nu;
use serde_json::json;

const GPU: &str = "fixtures/nsys-2025.3.1/gpu_full_node.sqlite";

#[test]
fn iteration_windows_and_records_through_the_plugin() {
    let Some(nu) = Nu::or_skip("iteration_windows_and_records_through_the_plugin") else { return };
    // by occurrence index of the iteration label: steps 10..=19 of the 204
    let v = nu.json(&format!("step-budget {GPU} --iterations 10:19 --steps | each {{|s| $s.index}}"));
    assert_eq!(v, json!((0..10).collect::<Vec<_>>()));
    let v = nu.json(&format!(
        "sqlite-ranges {GPU} --iterations 10:19 --step vibeserve.engine.iteration | get iterations.occurrences.index"
    ));
    assert_eq!(v, json!((10..20).collect::<Vec<_>>()));
    // nothing selected: RETRY as data, with both windows
    for cmd in ["step-budget", "sqlite-ranges", "report"] {
        let v = nu.json(&format!("{cmd} {GPU} --iterations 900:901 | select verdict requested capture.indices"));
        let v =
            json!({"verdict": v["verdict"], "requested": v["requested"], "capture": {"indices": v["capture.indices"]}});
        assert_eq!(
            v,
            json!({"verdict": "RETRY", "requested": {"start": 900, "end": 901}, "capture": {"indices": {"start": 0, "end": 203}}}),
            "{cmd}"
        );
    }
    // records written here from the fixture's own steps, 123456789 µs later on another clock: the offset is
    // measured from them (engine ns − nsys ns), and a window by engine iteration selects those steps
    let steps = nu.json(&format!("step-budget {GPU} --steps | each {{|s| [$s.start_ns $s.wall_ns]}}"));
    let dir = tempfile::tempdir().unwrap();
    let recs = dir.path().join("records.jsonl");
    let mut text = String::new();
    for (i, s) in steps.as_array().unwrap().iter().enumerate() {
        let (st, w) = (s[0].as_i64().unwrap() + 123_456_789_000, s[1].as_i64().unwrap());
        text += &json!({"iteration": i + 7, "rank": 0, "start_ns": st, "end_ns": st + w, "phase": "decode",
            "prefill_chunks": [], "decode_kv_lens": [i], "scheduled_tokens": 1, "scheduled_requests": 1,
            "batch_size": 1 + i % 2, "graph_mode": "full", "backend": "flashinfer"})
        .to_string();
        text.push('\n');
    }
    std::fs::write(&recs, text).unwrap();
    let r = recs.display();
    let v = nu.json(&format!(
        "sqlite-ranges {GPU} --iteration-records {r} | get iterations.join.ranks.0 | select verdict offset_ns matched"
    ));
    assert_eq!(v, json!({"verdict": "joined", "offset_ns": 123_456_789_000i64, "matched": 204}));
    let v = nu.json(&format!(
        "step-budget {GPU} --iteration-records {r} --iterations 20:23 --steps | each {{|s| [$s.geometry.iteration $s.geometry.batch_size]}}"
    ));
    assert_eq!(v, json!([[20, 2], [21, 1], [22, 2], [23, 1]]));
    let v = nu.json(&format!("report {GPU} --iteration-records {r} --iterations 20:23 | get evidence | where label == vibeserve.engine.iteration | get 0.occurrences"));
    assert_eq!(v, json!(4));
    // a bad window is an error labelled at the flag
    let e = nu.error(&format!("step-budget {GPU} --iterations 9:3"));
    assert!(e.contains("expected START:END"), "{e}");
}

/// Each new flag's help in nu is the binary's (`--help`), word for word.
#[test]
fn the_twins_have_the_binaries_help() {
    let Some(nu) = Nu::or_skip("the_twins_have_the_binaries_help") else { return };
    for (cmd, flags) in [
        ("sqlite-ranges", &["iteration-records", "iterations", "step"][..]),
        ("step-budget", &["iteration-records", "iterations"][..]),
        ("report", &["iteration-records", "iterations"][..]),
    ] {
        let bin = common::root().join("target/debug").join(cmd);
        let target = std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from);
        let bin = target.map(|t| t.join("debug").join(cmd)).filter(|p| p.is_file()).unwrap_or(bin);
        if !bin.is_file() {
            eprintln!("SKIP the_twins_have_the_binaries_help: {} is not built (cargo build)", bin.display());
            return;
        }
        let help = std::process::Command::new(&bin).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        for f in flags {
            let desc = nu.json(&format!(
                "help commands | where name == {cmd} | get 0.params | where name == \"--{f}\" | get 0.description"
            ));
            let desc = desc.as_str().unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(help.contains(&desc), "{cmd} --{f}: nu says {desc:?}, the binary's help does not");
        }
    }
}
