//! The shared run of issue #19: `gate-check --ranges R.json --nvtx-readiness D.json --report P.json` writes, from
//! its own run, the bytes `sqlite-ranges`, `nvtx-readiness` and `report` print for the same export, and its own
//! stdout and exit code are unchanged; `pipeline::run_shared` gives the documents each tool gives on its own. Every
//! real SQLite fixture.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;

/// Every real SQLite fixture of the nsys version folders, the `.xz` ones decompressed into `dir`.
fn fixtures(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for folder in ["nsys-2023.4.4", "nsys-2025.3.1"] {
        for e in std::fs::read_dir(root().join("fixtures").join(folder)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".sqlite") || name.ends_with(".sqlite.xz") {
                v.push(common::export(&format!("{folder}/{name}"), dir));
            }
        }
    }
    v.sort();
    assert!(v.len() >= 20, "expected the real fixtures, found {}", v.len());
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

/// The documents a shared run wrote, by flag, against what each tool prints alone (`alone`: `(rc, stdout)`).
fn compare_written(name: &str, dir: &Path, alone: &[(&str, (i32, Vec<u8>))]) {
    for (flag, (rc, bytes)) in alone {
        let file = dir.join(format!("{}.json", flag.trim_start_matches('-')));
        if *rc == 2 {
            continue;
        }
        let written = std::fs::read(&file).unwrap_or_else(|e| panic!("{name}: {flag} wrote nothing: {e}"));
        assert!(!written.is_empty(), "{name}: empty {flag} file");
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(bytes),
            "{name}: gate-check {flag} differs from the tool alone"
        );
    }
}

#[test]
fn gate_check_writes_the_bytes_each_tool_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let exports = tempfile::tempdir().unwrap();
    let mut compared = 0;
    let mut refused = 0;
    for f in fixtures(exports.path()) {
        let before = listing(f.parent().unwrap());
        let name = f.display().to_string();
        let tool = |bin: &str| {
            let (rc, out, _) = run(bin, &[f.as_os_str()]);
            (rc, out)
        };
        let alone = [
            ("--ranges", tool("sqlite-ranges")),
            ("--nvtx-readiness", tool("nvtx-readiness")),
            ("--report", tool("report")),
        ];
        let (gate_rc, gate_alone, _) = run("gate-check", &[f.as_os_str()]);
        // --ranges alone (the ranges analysis shares the scans), then all three (the report's analysis is the
        // ranges document)
        for flags in [&alone[..1], &alone[..]] {
            let dir = tmp.path().join(format!("{}-{}", compared, flags.len()));
            std::fs::create_dir(&dir).unwrap();
            let mut args: Vec<std::ffi::OsString> = vec![f.clone().into()];
            for (flag, _) in flags {
                args.push(flag.into());
                args.push(dir.join(format!("{}.json", flag.trim_start_matches('-'))).into());
            }
            let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let (rc, gate_shared, err) = run("gate-check", &args);
            if flags.iter().any(|(_, (rc, _))| *rc == 2) {
                // a tool refuses this export alone: so does the shared run, naming the flag of that document
                let (flag, _) = flags.iter().find(|(_, (rc, _))| *rc == 2).unwrap();
                assert_eq!(rc, 2, "{name}: {flag}'s tool failed alone but the shared run did not: {err}");
                assert!(err.contains(flag), "{name}: the error does not name {flag}: {err}");
                refused += 1;
                continue;
            }
            assert_eq!(rc, gate_rc, "{name}: gate-check's exit code changed with {} documents: {err}", flags.len());
            assert_eq!(gate_shared, gate_alone, "{name}: gate-check's stdout changed with {} documents", flags.len());
            compare_written(&name, &dir, flags);
        }
        assert_eq!(listing(f.parent().unwrap()), before, "{name}: a file appeared next to the evidence");
        compared += 1;
    }
    assert!(compared >= 20, "only {compared} fixtures compared");
    // the lazy export without NVTX_EVENTS: sqlite-ranges refuses it (its contract requires the table), the
    // other tools do not
    assert!(refused >= 2, "only {refused} refused runs (the lazy export without NVTX is one, twice)");
}

#[test]
fn shared_documents_from_stdin_name_it() {
    let f = root().join("fixtures/nsys-2025.3.1/gpu_full_node.sqlite");
    let tmp = tempfile::tempdir().unwrap();
    let piped = |bin: &str, args: &[&std::ffi::OsStr]| {
        let out = Command::new(assert_cmd::cargo::cargo_bin(bin))
            .args(args)
            .stdin(std::fs::File::open(&f).unwrap())
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), out.stdout)
    };
    let dash = std::ffi::OsStr::new("-");
    let alone = [
        ("--ranges", piped("sqlite-ranges", &[dash])),
        ("--nvtx-readiness", piped("nvtx-readiness", &[dash])),
        ("--report", piped("report", &[dash])),
    ];
    let files: Vec<std::ffi::OsString> =
        ["ranges", "nvtx-readiness", "report"].iter().map(|n| tmp.path().join(format!("{n}.json")).into()).collect();
    let (rc, gate) = piped(
        "gate-check",
        &[dash, "--ranges".as_ref(), &files[0], "--nvtx-readiness".as_ref(), &files[1], "--report".as_ref(), &files[2]],
    );
    assert_eq!((rc, gate), piped("gate-check", &[dash]));
    for (flag, (rc, _)) in &alone {
        assert_eq!(*rc, 0, "{flag}'s tool on stdin");
    }
    compare_written("<stdin>", tmp.path(), &alone);
    assert!(String::from_utf8_lossy(&std::fs::read(&files[2]).unwrap()).contains("\"source\":\"<stdin>\""));
}

#[test]
fn ranges_over_an_input_is_refused() {
    let f = root().join("fixtures/nsys-2025.3.1/gpu_full_node.sqlite");
    let (rc, out, err) = run("gate-check", &[f.as_os_str(), "--ranges".as_ref(), f.as_os_str()]);
    assert_eq!(rc, 2, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("--ranges") && err.contains("refusing to overwrite"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("same.json");
    let (rc, _, err) =
        run("gate-check", &[f.as_os_str(), "--ranges".as_ref(), out.as_os_str(), "--report".as_ref(), out.as_os_str()]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("--report") && err.contains("--ranges writes that file too"), "{err}");
    assert!(!out.exists());
}

#[test]
fn run_shared_gives_each_tool_its_own_document() {
    use nsyskit::gate_check::{self, GateOptions};
    use nsyskit::pipeline::AlsoDocs;
    for rel in ["fixtures/nsys-2025.3.1/gpu_full_node.sqlite", "fixtures/nsys-2023.4.4/gpu_range_node.sqlite"] {
        let f = root().join(rel);
        let ropts = nsyskit::sqlite_ranges::RangesOptions { fold: true, ..Default::default() };
        let dopts = nsyskit::nvtx_readiness::ReadinessOptions::default();
        let opts = GateOptions { capture: f.clone(), ..Default::default() };
        let popts = nsyskit::report::ReportOptions { input: f.clone(), top: 5, ..Default::default() };
        let also =
            AlsoDocs { ranges: Some(ropts.clone()), readiness: Some(dopts.clone()), report: Some(popts.clone()) };
        let shared = nsyskit::pipeline::run_shared(&opts, &also).unwrap();
        assert_eq!(shared.gate, gate_check::run(&opts).unwrap(), "{rel}: gate");
        assert_eq!(shared.ranges.unwrap(), nsyskit::sqlite_ranges::run(&f, &ropts, None).unwrap(), "{rel}: ranges");
        assert_eq!(
            shared.readiness.unwrap(),
            nsyskit::nvtx_readiness::run(&f, &dopts, None).unwrap(),
            "{rel}: readiness"
        );
        let (report, alone) = (shared.report.unwrap(), nsyskit::pipeline::report::document(&popts).unwrap());
        assert_eq!(serde_json::to_value(&report).unwrap(), serde_json::to_value(&alone).unwrap(), "{rel}: report");
        assert_eq!(report.top_kernels.len(), 5, "{rel}: the report's own options");
    }
}

/// The report of the shared run hands the occurrences its analysis kept for readiness to the caller, once, and
/// keeps none itself (on emit_nvtx ×10 the chain held them twice, interned and loaded: 99 MB of its peak);
/// given back as loaded, they are what readiness reads on its own (`load_occurrences_framework_folded`). Fails if
/// the detail still holds them, if none are handed over, or if they differ from that read.
#[test]
fn kept_occurrences_are_handed_over_not_held() {
    let tmp = tempfile::tempdir().unwrap();
    let f = common::export("nsys-2025.3.1/emit_nvtx_decode.sqlite.xz", tmp.path());
    let cap = nsyskit::export::open_capture(&f, None).unwrap();
    let popts = nsyskit::report::ReportOptions { input: f.clone(), ..Default::default() };
    let mut handed = None;
    let beside =
        |detail: Option<&std::sync::Arc<(nsyskit::sqlite_ranges::Analysis, nsyskit::sqlite_ranges::Collected)>>,
         kept: Option<nsyskit::sqlite_ranges::SharedOccurrences>| {
            let d = detail.expect("the report's ranges analysis");
            assert!(d.1.occurrences.is_none(), "the report's detail still holds the kept occurrences");
            handed = kept;
        };
    nsyskit::pipeline::report::document_sharing_scans(&cap.export, &cap.source, &popts, true, beside).unwrap();
    let loaded = handed.expect("the kept occurrences were not handed over").into_loaded();
    let alone = nsyskit::sqlite_ranges::load_occurrences_framework_folded(&cap.export).unwrap();
    assert!(loaded.occurrences.len() > 100_000, "{} occurrences", loaded.occurrences.len());
    assert_eq!(loaded.occurrences, alone.occurrences);
    assert_eq!((loaded.skipped, loaded.range_rows), (alone.skipped, alone.range_rows));
}
