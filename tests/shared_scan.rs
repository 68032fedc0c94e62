//! The shared run of issue #19: `gate-check --ranges OUT.json` writes, from its own run, the bytes
//! `sqlite-ranges EXPORT > OUT.json` writes, and its own stdout is unchanged; `gate::run_shared` gives the
//! documents `sqlite-ranges` and `nvtx-readiness` give on their own. Every real SQLite fixture.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every real `.sqlite` fixture of the nsys version folders.
fn fixtures() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["fixtures/nsys-2023.4.4", "fixtures/nsys-2025.3.1"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "sqlite") {
                v.push(p);
            }
        }
    }
    v.sort();
    assert!(v.len() >= 10, "expected the real fixtures, found {}", v.len());
    v
}

fn run(bin: &str, args: &[&std::ffi::OsStr]) -> (i32, Vec<u8>, String) {
    let out = Command::new(assert_cmd::cargo::cargo_bin(bin)).args(args).current_dir(root()).output().unwrap();
    (out.status.code().unwrap_or(-1), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn gate_check_ranges_writes_the_bytes_sqlite_ranges_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for f in fixtures() {
        let before = listing(f.parent().unwrap());
        let out = tmp.path().join("ranges.json");
        let _ = std::fs::remove_file(&out);
        let (rc_alone, ranges_alone, _) = run("sqlite-ranges", &[f.as_os_str()]);
        let (gate_rc, gate_alone, _) = run("gate-check", &[f.as_os_str()]);
        let (rc, gate_shared, err) = run("gate-check", &[f.as_os_str(), "--ranges".as_ref(), out.as_os_str()]);
        let name = f.display();
        if rc_alone == 2 {
            // sqlite-ranges refuses this export: so does the shared run, naming --ranges' document's error
            assert_eq!(rc, 2, "{name}: sqlite-ranges failed alone but gate-check --ranges did not: {err}");
            continue;
        }
        assert_eq!(rc, gate_rc, "{name}: gate-check's exit code changed with --ranges: {err}");
        assert_eq!(gate_shared, gate_alone, "{name}: gate-check's stdout changed with --ranges");
        let shared = std::fs::read(&out).unwrap();
        assert!(!shared.is_empty(), "{name}: empty --ranges file");
        assert_eq!(
            String::from_utf8_lossy(&shared),
            String::from_utf8_lossy(&ranges_alone),
            "{name}: gate-check --ranges differs from sqlite-ranges"
        );
        assert_eq!(listing(f.parent().unwrap()), before, "{name}: a file appeared next to the evidence");
        compared += 1;
    }
    assert!(compared >= 8, "only {compared} fixtures compared");
}

#[test]
fn ranges_over_an_input_is_refused() {
    let f = root().join("fixtures/nsys-2025.3.1/gpu_full_node.sqlite");
    let (rc, out, err) = run("gate-check", &[f.as_os_str(), "--ranges".as_ref(), f.as_os_str()]);
    assert_eq!(rc, 2, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("--ranges") && err.contains("refusing to overwrite"), "{err}");
}

#[test]
fn run_shared_gives_each_tool_its_own_document() {
    use nsyskit::gate::{self, AlsoDocs, GateOptions};
    for rel in ["fixtures/nsys-2025.3.1/gpu_full_node.sqlite", "fixtures/nsys-2023.4.4/gpu_range_node.sqlite"] {
        let f = root().join(rel);
        let ropts = nsyskit::ranges::RangesOptions { fold: true, ..Default::default() };
        let dopts = nsyskit::readiness::ReadinessOptions::default();
        let opts = GateOptions { capture: f.clone(), ..Default::default() };
        let also = AlsoDocs { ranges: Some(ropts.clone()), readiness: Some(dopts.clone()) };
        let shared = gate::run_shared(&opts, &also).unwrap();
        assert_eq!(shared.gate, gate::run(&opts).unwrap(), "{rel}: gate");
        assert_eq!(shared.ranges.unwrap(), nsyskit::ranges::run(&f, &ropts, None).unwrap(), "{rel}: ranges");
        assert_eq!(shared.readiness.unwrap(), nsyskit::readiness::run(&f, &dopts, None).unwrap(), "{rel}: readiness");
    }
}
