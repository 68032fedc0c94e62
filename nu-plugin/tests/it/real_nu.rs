//! The plugin in a REAL nu 0.115.1: `plugin add` and `plugin use nsyskit` in a temporary config folder, then
//! real pipelines on the fixtures.

use crate::common;

use common::Nu;
use serde_json::json;

#[test]
fn registers_and_lists_its_commands() {
    let Some(nu) = Nu::or_skip("registers_and_lists_its_commands") else { return };
    let names = nu.json("help commands | where category == nsyskit | get name | sort");
    let names: Vec<&str> = names.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for expected in nu_plugin_nsyskit::commands::all().iter().map(|c| c.name().to_string()) {
        assert!(names.contains(&expected.as_str()), "{expected} missing from {names:?}");
    }
    let plugins = nu.json("plugin list | where name == nsyskit | get 0 | select name version status");
    assert_eq!(plugins["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn typed_values_in_a_real_shell() {
    let Some(nu) = Nu::or_skip("typed_values_in_a_real_shell") else { return };
    // typed in place, no column added (issue #41): `_ns` integer → duration; `_bytes` → filesize; captured_at →
    // date; null → nothing; a plain count stays an int
    let v = nu.json(
        r#"'{"wall_ns": 1500000, "copy_bytes": 2048, "captured_at": "2026-11-29T22:45:59Z", "gap_ns": null, "kernels": 9400}'
           | from nsyskit | describe"#,
    );
    assert_eq!(
        v,
        json!("record<wall_ns: duration, copy_bytes: filesize, captured_at: datetime, gap_ns: nothing, kernels: int>")
    );
    let v = nu.json(r#"'{"wall_ns": 1500000}' | from nsyskit | get wall_ns | $in == 1.5ms"#);
    assert_eq!(v, json!(true));
    // exact: the nanoseconds come back as the same integer, in JSON and with `into int`
    let v = nu.json(r#"'{"wall_ns": 9007199254740993}' | from nsyskit | [($in.wall_ns | into int) $in]"#);
    assert_eq!(v, json!([9_007_199_254_740_993i64, {"wall_ns": 9_007_199_254_740_993i64}]));
    // the round trip back to JSON keeps the keys and the exact text of the timestamp
    let v = nu.json(
        r#"'{"wall_ns": 1500000, "captured_at": "2026-11-29T22:45:59Z"}' | from nsyskit | from nsyskit | columns"#,
    );
    assert_eq!(v, json!(["wall_ns", "captured_at"]));
}

fn fixture(rel: &str) -> std::path::PathBuf {
    common::root().join("fixtures").join(rel)
}

#[test]
fn sqlite_ranges_top_five_by_busy_union() {
    let Some(nu) = Nu::or_skip("sqlite_ranges_top_five_by_busy_union") else { return };
    let got = nu.json(
        "sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve. | get ranges \
         | sort-by kernel_busy_union_ns -r | first 5 \
         | each {|r| {label: $r.label, ns: ($r.kernel_busy_union_ns | into int), \
                      typed: ($r.kernel_busy_union_ns | describe), width: ($r | columns | length)} }",
    );
    // independently: the library's document, sorted here
    let opts =
        nsyskit::sqlite_ranges::RangesOptions { range_prefix: Some("vibeserve.".into()), window: None, fold: true };
    let mut doc = nsyskit::sqlite_ranges::run(&fixture("nsys-2025.3.1/gpu_full_node.sqlite"), &opts, None).unwrap();
    doc.ranges.sort_by_key(|r| std::cmp::Reverse(r.kernel_busy_union_ns));
    // a row is as wide as the document's object: no companion column (issue #41; it was 33 with them)
    let fields = serde_json::to_value(&doc.ranges[0]).unwrap().as_object().unwrap().len();
    assert_eq!(fields, 23);
    let want: Vec<_> = doc.ranges[..5]
        .iter()
        .map(|r| json!({"label": r.label, "ns": r.kernel_busy_union_ns, "typed": "duration", "width": fields}))
        .collect();
    assert_eq!(got, json!(want));
    // the four vibeserve.request.N ranges are folded into one label by default (issue #14)
    assert_eq!(got[0]["label"], "vibeserve.request.<n>");
    assert_eq!(got[0]["ns"], 22_559_008);
    assert_eq!(got[1]["label"], "vibeserve.engine.iteration");
    assert_eq!(got[1]["ns"], 22_263_904);
    // --no-fold: the raw labels, as the binary's flag
    let raw = nu.json("sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --range-prefix vibeserve.request --no-fold | get ranges.label | sort");
    assert_eq!(
        raw,
        json!(["vibeserve.request.0", "vibeserve.request.1", "vibeserve.request.2", "vibeserve.request.3"])
    );
}

#[test]
fn gate_check_retry_is_data() {
    let Some(nu) = Nu::or_skip("gate_check_retry_is_data") else { return };
    let got = nu
        .json("gate-check fixtures/nsys-2025.3.1/gpu_full_graph.sqlite | get gates | where verdict == RETRY | get id");
    assert_eq!(got, json!(["G1"]));
    // the FAILED capture: G0 with its console log, G4 (where CUDA data stops: at_ns, a duration)
    let got = nu.json(
        "gate-check fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite \
           --log fixtures/logs/nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt \
         | get gates | where verdict == RETRY | select id at_ns",
    );
    let ids: Vec<_> = got.as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["G0", "G4"]);
    assert!(got[1]["at_ns"].as_i64().unwrap() > 0, "G4 says where CUDA data stops: {got}");
}

#[test]
fn gate_check_every_fixture_from_ls() {
    let Some(nu) = Nu::or_skip("gate_check_every_fixture_from_ls") else { return };
    let got = nu.json("ls fixtures/**/*.sqlite | sort-by name | each {|f| {file: $f.name, verdict: (gate-check $f.name | get verdict)} }");
    let rows = got.as_array().unwrap();
    let on_disk = std::fs::read_dir(common::root().join("fixtures"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .filter(|f| f.as_ref().unwrap().path().extension().is_some_and(|e| e == "sqlite"))
        .count();
    assert!(on_disk >= 9);
    assert_eq!(rows.len(), on_disk, "every .sqlite fixture: {got}");
    for row in rows {
        let file = row["file"].as_str().unwrap();
        let opts = nsyskit::gate_check::GateOptions {
            capture: common::root().join(file),
            sqlite: None,
            log: None,
            provenance: None,
            tier: Default::default(),
            decode_range: None,
            nsys: None,
            thresholds: Default::default(),
            ..Default::default()
        };
        let doc = nsyskit::gate_check::run(&opts).unwrap();
        assert_eq!(row["verdict"], serde_json::to_value(doc.verdict).unwrap(), "{file}");
    }
    let verdict_of =
        |name: &str| rows.iter().find(|r| r["file"].as_str().unwrap().ends_with(name)).unwrap()["verdict"].clone();
    assert_eq!(verdict_of("nsys-2025.3.1/gpu_full_node.sqlite"), "PASS");
    assert_eq!(verdict_of("nsys-2025.3.1/gpu_full_graph.sqlite"), "RETRY");
    assert_eq!(verdict_of("nsys-2023.4.4/cpu_nvtx_osrt.sqlite"), "RETRY");
}

#[test]
fn kern_csv_from_open_raw() {
    let Some(nu) = Nu::or_skip("kern_csv_from_open_raw") else { return };
    let csv = "fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv";
    let got = nu.json(&format!(
        "open {csv} --raw | kern-csv-to-json | get top_kernels | each {{|k| [$k.name ($k.total_time_ns | into int) ($k.total_time_ns | describe)] }}"
    ));
    let doc =
        nsyskit::kern_csv_to_json::run(&nsyskit::contract::Input::Path(common::root().join(csv)), &Default::default())
            .unwrap();
    let want: Vec<_> = doc.top_kernels.unwrap().iter().map(|k| json!([k.name, k.total_time_ns, "duration"])).collect();
    assert_eq!(want.len(), 20);
    assert_eq!(got, json!(want));
    // the path argument gives the same kernels
    let by_path = nu.json(&format!("kern-csv-to-json {csv} | get top_kernels.name"));
    assert_eq!(by_path, json!(got.as_array().unwrap().iter().map(|k| k[0].clone()).collect::<Vec<_>>()));
}

#[test]
fn gate_check_into_bundle_merge_matches_the_library() {
    let Some(nu) = Nu::or_skip("gate_check_into_bundle_merge_matches_the_library") else { return };
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    let capture = "fixtures/nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite";
    let summary =
        nu.json(&format!("gate-check {capture} | bundle-merge '{}' | select written documents", bundle.display()));
    assert_eq!(summary["written"], true);
    assert_eq!(summary["documents"][0]["places"], json!(["kernel_profile.gates"]));
    // the bytes equal what the library writes for the same gate document: `at_ns` (a duration) and `size` (a
    // filesize) went back to the same integers and nothing else changed on the way through Nushell
    let opts = nsyskit::gate_check::GateOptions { capture: common::root().join(capture), ..Default::default() };
    let doc = serde_json::to_value(nsyskit::gate_check::run(&opts).unwrap()).unwrap();
    let docs = vec![nsyskit::bundle_merge::DocIn { value: doc, source: "x".into(), line: 1 }];
    let want =
        nsyskit::bundle_merge::run(&dir.path().join("other.json"), &docs, nsyskit::bundle_merge::Mode::Stdout).unwrap();
    assert_eq!(std::fs::read_to_string(&bundle).unwrap(), want.bundle_text);
    // merging the same again changes nothing (--check says so, as data)
    let check = nu.json(&format!("gate-check {capture} | bundle-merge --check '{}' | get changed", bundle.display()));
    assert_eq!(check, json!(false));
}

#[test]
fn errors_point_at_the_offending_argument() {
    let Some(nu) = Nu::or_skip("errors_point_at_the_offending_argument") else { return };
    let script = "sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --window 5:1";
    let err = nu.error(script);
    assert!(err.contains(r#"--window "5:1": expected START:END"#), "{err}");
    assert!(err.contains("nsyskit::usage"), "{err}");
    assert!(err.contains("bad argument (--window)"), "{err}");
    // the label covers `--window 5:1` (1-based columns; the script is on line 2, after `plugin use`)
    let at = script.find("--window").unwrap() + 1;
    assert!(err.contains(&format!("label at line 2, columns {at} to {}", script.len())), "{err}");

    let err = nu.error("gate-check fixtures/nope.sqlite");
    assert!(err.contains("fixtures/nope.sqlite: no such file"), "{err}");
    assert!(err.contains("unusable input (CAPTURE)"), "{err}");
    let at = "gate-check ".len() + 1;
    assert!(
        err.contains(&format!("label at line 2, columns {at} to {}", at - 1 + "fixtures/nope.sqlite".len())),
        "{err}"
    );

    let err = nu.error("'{\"schema\": \"nsyskit.nope/v1\"}' | from nsyskit | bundle-merge --stdout x.json");
    assert!(err.contains("pipeline input: line 1: $.schema"), "{err}");
}

#[test]
fn relative_paths_follow_nushell_cd() {
    let Some(nu) = Nu::or_skip("relative_paths_follow_nushell_cd") else { return };
    let got = nu.json("cd fixtures/nsys-2025.3.1; gate-check gpu_full_node.sqlite | get source.path");
    assert_eq!(got, json!(fixture("nsys-2025.3.1/gpu_full_node.sqlite").display().to_string()));
}

#[test]
fn nsys_resolve_reads_nushell_environment() {
    let Some(nu) = Nu::or_skip("nsys_resolve_reads_nushell_environment") else { return };
    let nsys = std::env::var_os("NSYS_BIN").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::Path::new(&std::env::var("HOME").unwrap()).join(".cache/nsyskit/nsys-2023.4/usr/bin/nsys")
    });
    if !nsys.is_file() {
        eprintln!("SKIP nsys_resolve_reads_nushell_environment: no nsys at {} (scripts/get-nsys)", nsys.display());
        return;
    }
    // $env.NSYS_BIN set inside Nushell, after the plugin started, is what the command sees; so is --env NAME
    let got = nu.json(&format!(
        "$env.NSYS_BIN = '{}'; $env.MY_TOKEN = 'hunter2'; $env.MY_MODE = 'fast'; \
         nsys-resolve --env [MY_TOKEN MY_MODE] | {{source: $in.nsys.source, version: $in.nsys.version, \
         attach_pid: $in.nsys.capabilities.attach_pid, env: $in.capture.env}}",
        nsys.display()
    ));
    assert_eq!(got["source"], "NSYS_BIN", "{got}");
    assert!(got["version"].as_str().unwrap().starts_with("20"), "{got}");
    let env = got["env"].to_string();
    assert!(env.contains("fast") && !env.contains("hunter2"), "value read from Nushell, secret redacted: {env}");
}

#[test]
fn nvtx_readiness_and_gate_g8() {
    let Some(nu) = Nu::or_skip("nvtx_readiness_and_gate_g8") else { return };
    let got = nu.json(
        "ls fixtures/nsys-2025.3.1/*.sqlite | sort-by name | each {|f| nvtx-readiness $f.name | {file: $f.name, verdict: $in.verdict} }",
    );
    for row in got.as_array().unwrap() {
        let file = row["file"].as_str().unwrap();
        let doc = nsyskit::nvtx_readiness::run(&common::root().join(file), &Default::default(), None).unwrap();
        assert_eq!(row["verdict"], serde_json::to_value(doc.verdict).unwrap(), "{file}");
    }
    let g8 = nu.json(
        "gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite --readiness --range-prefix vibeserve | get gates | where id == G8 | get 0.verdict",
    );
    assert_eq!(g8, json!("PASS"));
}

#[test]
fn report_and_capture_compare_take_paths_and_records() {
    let Some(nu) = Nu::or_skip("report_and_capture_compare_take_paths_and_records") else { return };
    let node = "fixtures/nsys-2025.3.1/gpu_full_node.sqlite";
    let want = nsyskit::pipeline::report::document(&nsyskit::report::ReportOptions {
        input: common::root().join(node),
        top: 20,
        ..Default::default()
    })
    .unwrap();
    // a path, and the sqlite-ranges record from the pipeline
    assert_eq!(nu.json(&format!("report {node} | get class")), json!(want.class));
    let from_record = nu.json(&format!("sqlite-ranges {node} | report | select source_kind class"));
    assert_eq!(from_record["source_kind"], "ranges", "{from_record}");
    let got = nu.json(&format!(
        "capture-compare {node} fixtures/nsys-2025.3.1/gpu_full_graph.sqlite | {{verdict: $in.verdict, n: ($in.invalidators | length)}}"
    ));
    assert_eq!(got["verdict"], "REFUSED", "node vs graph level is refused, as data");
    assert!(got["n"].as_i64().unwrap() >= 1);
    // two ranges records carry no provenance: nothing invalidates the pair, but it is not shown comparable
    // either, unless the unknown facts are accepted (the binary's exit 1 / exit 0)
    let same = nu.json(&format!("capture-compare (sqlite-ranges {node}) (sqlite-ranges {node}) | get verdict"));
    assert_eq!(same, json!("UNVERIFIED"));
    let same = nu.json(&format!(
        "capture-compare (sqlite-ranges {node}) (sqlite-ranges {node}) --allow-unverified | get verdict"
    ));
    assert_eq!(same, json!("COMPARABLE"));
}

#[test]
fn report_trace_flags_are_the_binary_s() {
    let Some(nu) = Nu::or_skip("report_trace_flags_are_the_binary_s") else { return };
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.json");
    let clean = "fixtures/nsys-2025.3.1/decode_clean.sqlite";
    let got = nu.json(&format!(
        "report {clean} --trace {} --window 200:205 --trace-max-events 400 | get trace | select window_steps window_choice max_events truncated",
        t.display()
    ));
    assert_eq!(got["window_steps"], json!([200, 205]));
    assert_eq!(got["window_choice"], "--window");
    assert_eq!((got["max_events"].clone(), got["truncated"].clone()), (json!(400), json!(true)));
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&t).unwrap()).unwrap();
    assert_eq!(file["otherData"]["max_events"], 400);
    // the default window and a bad one, labelled at the flag
    let d = nu.json(&format!("report {clean} --trace {} | get trace.window_steps", t.display()));
    assert_eq!(d, json!([67, 72]));
    let err = nu.error(&format!("report {clean} --trace {} --window 5:3", t.display()));
    assert!(err.contains("--window"), "{err}");
}

#[test]
fn capture_compare_ab_numbers_match_the_binary() {
    let Some(nu) = Nu::or_skip("capture_compare_ab_numbers_match_the_binary") else { return };
    let clean = "fixtures/nsys-2025.3.1/decode_clean.sqlite";
    let mixed = "fixtures/nsys-2025.3.1/decode_mixed.sqlite";
    // the library's document, as the binary prints it
    let want = nsyskit::capture_compare::run(&nsyskit::capture_compare::CompareOptions {
        baseline: vec![common::root().join(clean)],
        trial: vec![common::root().join(clean)],
        fail_on_regression: Some(5.0),
        ab: nsyskit::capture_compare::ab::AbSettings { resamples: 300, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let want = serde_json::to_value(&want.ab).unwrap();
    let got = nu.json(&format!(
        "capture-compare --baseline [{clean}] --trial [{clean}] --bootstrap 300 --fail-on-regression 5 | get ab"
    ));
    // the same numbers in the Nushell table (*_ns fields are durations, `to json` gives their ns; floats pass through
    // nu's own number formatting, so they are compared to 1e-12)
    let (g, w) = (got["labels"].as_array().unwrap(), want["labels"].as_array().unwrap());
    assert_eq!(g.len(), w.len());
    for (gl, wl) in g.iter().zip(w) {
        assert_eq!((&gl["label"], &gl["verdict"]), (&wl["label"], &wl["verdict"]));
        for (gm, wm) in gl["metrics"].as_array().unwrap().iter().zip(wl["metrics"].as_array().unwrap()) {
            for side in ["baseline", "trial"] {
                for k in ["n", "median_ns", "p90_ns", "p99_ns"] {
                    assert_eq!(gm[side][k], wm[side][k], "{} {} {side} {k}", wl["label"], wm["metric"]);
                }
            }
            for k in ["relative_change", "ci_low", "ci_high"] {
                match (gm[k].as_f64(), wm[k].as_f64()) {
                    (Some(x), Some(y)) => assert!((x - y).abs() < 1e-12, "{k}: {x} vs {y}"),
                    (x, y) => assert_eq!(x, y, "{k}"),
                }
            }
        }
    }
    let it = nu.json(&format!(
        "capture-compare --baseline [{clean}] --trial [{clean}] --bootstrap 300 | get ab.labels | where label == vibeserve.engine.iteration | get 0.verdict"
    ));
    assert_eq!(it, json!("no significant change"));
    // a refusal is data: G7 named with --tier decode
    let g = nu.json(&format!(
        "capture-compare --tier decode {clean} {mixed} | get invalidators | where check == gate | get 0.a.retry"
    ));
    assert_eq!(g, json!(["G7"]));
}

/// The binary's path (the workspace's target folder, beside this test's own executable).
fn binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().join(name)
}

/// One run per tool (nsyskit::tools): every tool that reads a capture refuses a serve-capture run folder that
/// never reached a terminal state, the binary with exit 2 and the Nushell command with an error, the same
/// message from both (the refusal once lived only in the gate-check and report binaries).
#[test]
fn unfinished_run_folders_are_refused_by_both_adapters() {
    let Some(nu) = Nu::or_skip("unfinished_run_folders_are_refused_by_both_adapters") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(run.join("pids")).unwrap();
    std::fs::copy(fixture("nsys-2025.3.1/gpu_full_node.sqlite"), run.join("capture.sqlite")).unwrap();
    std::fs::write(run.join("provenance.json"), "{}").unwrap();
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    std::fs::write(run.join("run-state"), format!("running {dead}\n")).unwrap();
    let sql = run.join("capture.sqlite").display().to_string();
    let other = fixture("nsys-2025.3.1/gpu_full_node.sqlite").display().to_string();
    let want = format!("the serve-capture run in {} never reached a terminal state", run.display());
    for (tool, args) in [
        ("gate-check", vec![sql.clone()]),
        ("report", vec![sql.clone()]),
        ("sqlite-ranges", vec![sql.clone()]),
        ("step-budget", vec![sql.clone()]),
        ("nvtx-readiness", vec![sql.clone()]),
        ("capture-compare", vec![sql.clone(), other.clone()]),
    ] {
        let o = std::process::Command::new(binary(tool)).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{tool}: {err}");
        assert!(err.contains(&want) && o.stdout.is_empty(), "{tool}: {err}");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let nu_err = nu.error(&format!("{tool} {}", quoted.join(" ")));
        assert!(nu_err.contains(&want), "{tool} in nu: {nu_err}");
    }
    // terminal: both read it
    std::fs::write(run.join("run-state"), "ok 1\n").unwrap();
    assert_eq!(nu.json(&format!("(gate-check '{sql}').verdict")), json!("PASS"));
}

/// Issue #36 through Nushell: old and new schemas are read, every capture with kernels gets a class and devices,
/// a raw .qdstrm and an incomplete export get their plain message (the same runs as the binaries').
#[test]
fn world_captures_in_nushell() {
    let Some(nu) = Nu::or_skip("world_captures_in_nushell") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let unxz = |rel: &str| {
        let out = tmp.path().join(std::path::Path::new(rel).file_name().unwrap()).with_extension("");
        let got = std::process::Command::new("xz").arg("-dc").arg(fixture(rel)).output().unwrap();
        std::fs::write(&out, got.stdout).unwrap();
        out.display().to_string()
    };
    let vit = unxz("thirdparty/DynamicViT/nsys_profile.sqlite.xz");
    let v = nu.json(&format!("gate-check '{vit}' | get source.notes"));
    assert!(v.as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("no export-metadata table")), "{v}");
    let mfu = unxz("thirdparty/nsys-ai/mfu_2gpu_before.sqlite.xz");
    let r = nu.json(&format!("report '{mfu}' | select class devices"));
    assert_eq!(r["devices"].as_array().unwrap().len(), 2, "{r}");
    let bin = binary("report");
    let o = std::process::Command::new(bin).args([&mfu, "--compact"]).output().unwrap();
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["class"], b["class"]);
    // issue #37: no class on rejected evidence, and the evidence's reading kept, as the binary gives them
    let failed = fixture("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite").display().to_string();
    let v = nu.json(&format!("step-budget '{failed}' | get verdict"));
    assert_eq!((v["class"].as_str(), v["rule"].as_str()), (Some("unreliable"), Some("gates.G4")), "{v}");
    let jax = unxz("nsys-2025.3.1/jax_decode.sqlite.xz");
    let v = nu.json(&format!("step-budget '{jax}' | get verdict.would_be"));
    let o = std::process::Command::new(binary("step-budget")).args([&jax, "--compact"]).output().unwrap();
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["class"], b["verdict"]["would_be"]["class"]);
    assert_ne!(v["class"], "python_overhead_bound");
    // a step found without an iteration-like name, with the rule that found it
    let fwd = unxz("nsys-2025.3.1/plain_loop_fwd.sqlite.xz");
    let v = nu.json(&format!("step-budget '{fwd}' | select step_label step_label_choice"));
    assert_eq!(
        (v["step_label"].as_str(), v["step_label_choice"].as_str()),
        (Some("forward_block"), Some("repeating_top_level"))
    );
    // unknown is not comparable: two raw exports without provenance are UNVERIFIED
    let node = fixture("nsys-2025.3.1/gpu_full_node.sqlite").display().to_string();
    let v = nu.json(&format!("capture-compare '{node}' '{node}' | get verdict"));
    assert_eq!(v, "UNVERIFIED");
    let q = fixture("nsys-2023.4.4/no_importer_head.qdstrm").display().to_string();
    let err = nu.error(&format!("sqlite-ranges '{q}'"));
    assert!(err.contains("a .qdstrm, nsys's raw capture stream"), "{err}");
    let apax = unxz("thirdparty/apax/report1.sqlite.xz");
    let err = nu.error(&format!("report '{apax}'"));
    assert!(err.contains("an incomplete export: it holds no capture"), "{err}");
}

/// Issue #40: `step-budget --steps` is a table of the per-step rows, as many as the summary's `step_count`, the
/// same rows as the binary's NDJSON (`from json --objects`), and with --iterations the window's steps.
#[test]
fn step_budget_steps_is_a_table_of_the_steps() {
    let Some(nu) = Nu::or_skip("step_budget_steps_is_a_table_of_the_steps") else { return };
    let f = fixture("nsys-2025.3.1/decode_mixed.sqlite").display().to_string();
    let v = nu.json(&format!(
        "let s = (step-budget '{f}'); let t = (step-budget '{f}' --steps); \
         {{count: $s.step_count, rows: ($t | length), type: ($t | describe | str replace --regex '<.*' ''), \
          outliers: ($t | where outlier | length), outlier_count: $s.outlier_count, first: ($t | first | get index), \
          last: ($t | last | get index), has_steps: ($s | columns | any {{|c| $c == steps}})}}"
    ));
    assert_eq!(v["count"], 400, "{v}");
    assert_eq!(v["rows"], v["count"], "{v}");
    assert_eq!(v["type"], "table", "{v}");
    assert_eq!((v["outliers"].as_u64(), v["outlier_count"].as_u64()), (Some(22), Some(22)), "{v}");
    assert_eq!((v["first"].as_u64(), v["last"].as_u64()), (Some(0), Some(399)), "{v}");
    assert_eq!(v["has_steps"], false, "{v}");
    // the binary's NDJSON read as a table: the same rows
    let bin = binary("step-budget").display().to_string();
    let v = nu.json(&format!(
        "let a = (^'{bin}' '{f}' --steps | from json --objects); let b = (step-budget '{f}' --steps); \
         {{rows: ($a | length), same_walls: (($a | get wall_ns) == ($b | get wall_ns | into int)), \
          same_gpu: (($a | get components.gpu_kernel) == ($b | get components.gpu_kernel))}}"
    ));
    assert_eq!(v["rows"], 400, "{v}");
    assert_eq!((v["same_walls"].as_bool(), v["same_gpu"].as_bool()), (Some(true), Some(true)), "{v}");
    // with --iterations: the window's steps
    let v = nu.json(&format!("step-budget '{f}' --iterations 10:19 --steps | length"));
    assert_eq!(v, 10);
}
