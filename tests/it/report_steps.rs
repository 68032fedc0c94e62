//! `report` and the step budget (issue #20, "Show it"): the class comes from the step budget of the step label
//! (the same numbers as `step-budget` on the same export, or the bundle's `kernel_profile.step_budget`), the
//! document carries what the page draws (bars = steps or bins, histograms, outliers, idle), and the page as
//! headless Chromium builds it shows exactly those numbers.

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn run(bin: &str, args: &[&str], stdin: Option<Vec<u8>>) -> (Vec<u8>, i32, String) {
    let mut c = Command::cargo_bin(bin).unwrap();
    c.args(args).current_dir(common::root());
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    (out.stdout, out.status.code().unwrap_or(-1), err)
}

fn report(args: &[&str]) -> Value {
    report_exit(args, 0)
}

/// The report, which must exit with `code` (1: no class stands).
fn report_exit(args: &[&str], code: i32) -> Value {
    let (out, rc, err) = run("report", args, None);
    assert_eq!(rc, code, "{err}");
    common::one_doc(&out)
}

fn step_budget(args: &[&str]) -> Value {
    let (out, rc, err) = run("step-budget", args, None);
    let mut doc = common::one_doc(&out);
    // exit 1 exactly when the verdict does not stand (`unreliable`: the capture's gates said RETRY)
    assert_eq!(rc, i32::from(doc["verdict"]["class"] == "unreliable"), "{err}");
    common::with_step_rows(&mut doc, args, rc);
    doc
}

/// The verdict the evidence gives: `would_be` of an `unreliable` one.
fn evidence_verdict(sb: &Value) -> &Value {
    let v = &sb["verdict"];
    if v["class"] == "unreliable" {
        &v["would_be"]
    } else {
        v
    }
}

fn fx(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

const COMPONENTS: [&str; 7] =
    ["gpu_kernel", "gpu_memcpy", "sync_wait", "launch_api", "other_api", "comm", "unattributed"];

/// The report's step budget is the step-budget document's: verdict, steps, outliers, and bars that sum its
/// steps in order (one per step up to 400, else bins), histograms counting every step.
fn assert_same_budget(r: &Value, sb: &Value) {
    let s = &r["step_budget"];
    assert_eq!(s["step_label"], sb["step_label"]);
    let steps = sb["steps"].as_array().unwrap();
    assert_eq!(s["steps"].as_u64().unwrap() as usize, steps.len());
    assert_eq!(s["verdict"]["class"], evidence_verdict(sb)["class"]);
    assert_eq!(s["verdict"]["rule"], evidence_verdict(sb)["rule"]);
    assert_eq!(s["verdict"]["rows"], evidence_verdict(sb)["rows"]);
    assert_eq!(s["distributions"]["wall"], sb["distributions"]["wall"]);
    let outl: Vec<u64> = sb["outliers"].as_array().unwrap().iter().map(|o| o["index"].as_u64().unwrap()).collect();
    assert_eq!(s["outliers"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect::<Vec<_>>(), outl);
    let names: Vec<&str> = s["components"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(names, COMPONENTS);
    let bars = s["bars"]["bars"].as_array().unwrap();
    let per = s["bars"]["steps_per_bar"].as_u64().unwrap() as usize;
    assert_eq!(per, steps.len().div_ceil(400));
    assert_eq!(bars.len(), steps.len().div_ceil(per));
    assert!(bars.len() <= 400);
    for (k, b) in bars.iter().enumerate() {
        let chunk = &steps[k * per..((k + 1) * per).min(steps.len())];
        assert_eq!(b["steps"].as_u64().unwrap() as usize, chunk.len());
        assert_eq!(b["first_index"], chunk[0]["index"]);
        assert_eq!(b["wall_ns"].as_i64().unwrap(), chunk.iter().map(|x| x["wall_ns"].as_i64().unwrap()).sum::<i64>());
        for (i, n) in COMPONENTS.iter().enumerate() {
            let want: i64 = chunk.iter().map(|x| x["components"][*n].as_i64().unwrap()).sum();
            assert_eq!(b["components"][i].as_i64().unwrap(), want, "bar {k} {n}");
        }
        // the components of a bar add up to its wall, as every step's do
        assert_eq!(
            b["components"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).sum::<i64>(),
            b["wall_ns"].as_i64().unwrap()
        );
        let o = chunk.iter().filter(|x| outl.contains(&x["index"].as_u64().unwrap())).count();
        assert_eq!(b["outliers"].as_u64().unwrap() as usize, o);
    }
    for h in s["histograms"].as_array().unwrap() {
        let n: u64 = h["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum::<u64>()
            + h["above"].as_u64().unwrap();
        assert_eq!(n as usize, steps.len(), "{}", h["name"]);
        let key = if h["name"] == "wall" { "wall_ns" } else { "gpu_busy_ns" };
        let (lo, bin, hi) = (h["lo_ns"].as_i64().unwrap(), h["bin_ns"].as_i64().unwrap(), h["hi_ns"].as_i64().unwrap());
        let first = steps.iter().filter(|x| {
            let v = x[key].as_i64().unwrap();
            v >= lo && v < lo + bin && v <= hi
        });
        assert_eq!(first.count() as u64, h["counts"][0].as_u64().unwrap(), "{}", h["name"]);
        let above = steps.iter().filter(|x| x[key].as_i64().unwrap() > hi).count() as u64;
        assert_eq!(above, h["above"].as_u64().unwrap());
    }
}

#[test]
fn the_class_comes_from_the_step_budget_on_the_real_captures() {
    // (capture, class of the step budget, rule of the range rules before, whether the gates reject the capture)
    for (f, class, range_rule, rejected) in [
        ("nsys-2025.3.1/decode_mixed.sqlite", "kernel_bound", "R7", false),
        ("nsys-2025.3.1/decode_clean.sqlite", "mixed_or_unclear", "R6", false),
        ("nsys-2025.3.1/serve_node.sqlite", "kernel_bound", "R7", false),
        ("nsys-2025.3.1/gpu_full_graph.sqlite", "mixed_or_unclear", "R0", true),
    ] {
        let r = report_exit(&[&fx(f), "--compact"], i32::from(rejected));
        let sb = step_budget(&[&fx(f), "--step", "vibeserve.engine.iteration", "--compact"]);
        // a capture its gates rejected (graph-level tracing, G1) keeps the step budget's class as `would_be`
        let d = if rejected {
            assert_eq!((r["class"].as_str(), r["decision"]["rule"].as_str()), (Some("unreliable"), Some("gates.G1")));
            &r["decision"]["would_be"]
        } else {
            assert_eq!(r["class"], evidence_verdict(&sb)["class"], "{f}");
            &r["decision"]
        };
        assert_eq!(d["class"], class, "{f}: {}", d["reason"]);
        assert_eq!(d["class"], evidence_verdict(&sb)["class"], "{f}");
        assert_eq!(d["basis"], "step_budget");
        assert_eq!(
            d["rule"].as_str().unwrap(),
            format!("step_budget.{}", evidence_verdict(&sb)["rule"].as_str().unwrap())
        );
        assert!(d["reason"].as_str().unwrap().contains(evidence_verdict(&sb)["reason"].as_str().unwrap()));
        assert_eq!(r["range_decision"]["rule"], range_rule, "{f}");
        assert_eq!(r["range_decision"]["basis"], "ranges");
        assert_eq!(r["step_budget"]["source"], "step-budget on the export");
        assert_same_budget(&r, &sb);
    }
    // decode_mixed: one bar per step, the 22 outliers (15 prefill-contaminated, 7 slow decode steps) marked in
    // 22 bars
    let r = report(&[&fx("nsys-2025.3.1/decode_mixed.sqlite"), "--compact"]);
    let bars = r["step_budget"]["bars"]["bars"].as_array().unwrap();
    assert_eq!((bars.len(), r["step_budget"]["bars"]["binned"].as_bool().unwrap()), (400, false));
    assert_eq!(bars.iter().filter(|b| b["outliers"].as_u64().unwrap() > 0).count(), 22);
    // serve_node: 1190 steps in 397 bins of 3
    let r = report(&[&fx("nsys-2025.3.1/serve_node.sqlite"), "--compact"]);
    assert_eq!(r["step_budget"]["bars"]["steps_per_bar"], 3);
    assert_eq!(r["step_budget"]["bars"]["bars"].as_array().unwrap().len(), 397);
    // idle attribution: computed when the step budget has a non-empty idle[], carried as it is
    let idle = r["step_budget"]["idle"].as_array().unwrap();
    assert_eq!(r["step_budget"]["idle_computed"].as_bool().unwrap(), !idle.is_empty());
    let sb = step_budget(&[&fx("nsys-2025.3.1/serve_node.sqlite"), "--compact"]);
    assert_eq!(idle, sb["idle"].as_array().unwrap_or(&Vec::new()));
}

#[test]
fn steps_without_device_work_leave_the_class_to_the_range_rules() {
    // the CPU-only capture: its iteration-like label carries no device work; the step budget (100 %
    // unattributed) is shown but does not call it python_overhead_bound; and without CUDA data no class stands
    let r = report_exit(&[&fx("nsys-2025.3.1/cpu_nvtx_osrt.sqlite"), "--compact"], 1);
    assert_eq!(r["class"], "unreliable");
    let d = &r["decision"]["would_be"];
    assert_eq!((d["class"].as_str().unwrap(), d["rule"].as_str().unwrap()), ("mixed_or_unclear", "R0"));
    assert_eq!(d["basis"], "ranges");
    if !r["step_budget"].is_null() {
        assert_eq!(r["step_budget"]["device_work"], false);
        assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("carry no device work")));
    }
}

#[test]
fn a_bundle_brings_its_step_budget_and_unknown_or_missing_fields_are_tolerated() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let b = bundle.to_str().unwrap();
    let f = fx("nsys-2025.3.1/decode_mixed.sqlite");
    for bin in ["sqlite-ranges", "step-budget"] {
        let (doc, rc, err) = run(bin, &[&f, "--compact"], None);
        assert_eq!(rc, 0, "{err}");
        assert_eq!(run("bundle-merge", &[b], Some(doc)).1, 0);
    }
    let from_sqlite = report(&[&f, "--compact"]);
    let from_bundle = report(&[b, "--compact"]);
    assert_eq!(from_bundle["step_budget"]["source"], "kernel_profile.step_budget");
    assert_eq!(from_bundle["class"], from_sqlite["class"]);
    assert_eq!(from_bundle["decision"]["rule"], from_sqlite["decision"]["rule"]);
    // the bundle's step budget is a summary (issue #40): the same verdict, totals, outliers and set-apart steps,
    // no bars or histograms, and the report says why
    for k in ["steps", "totals", "distributions", "outliers", "set_apart", "verdict", "device_work", "idle"] {
        assert_eq!(from_bundle["step_budget"][k], from_sqlite["step_budget"][k], "{k}");
    }
    assert!(from_bundle["step_budget"]["bars"]["bars"].as_array().unwrap().is_empty());
    assert!(from_bundle["step_budget"]["histograms"].as_array().unwrap().is_empty());
    assert!(from_sqlite["step_budget"].get("bars_note").is_none());
    let note = from_bundle["step_budget"]["bars_note"].as_str().unwrap();
    assert!(note.contains("summary") && note.contains("step-budget --steps"), "{note}");
    let notes = from_bundle["notes"].as_array().unwrap();
    assert!(notes
        .iter()
        .any(|n| n.as_str().unwrap().starts_with("kernel_profile.step_budget: the step budget is a summary")));
    // with its rows put back as steps[] (`step-budget --steps`; a step budget written before the summary held
    // them): the same bars and histograms as from the export
    let mut v: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let (_, rows) = common::step_rows(&[&f]);
    v["kernel_profile"]["step_budget"]["steps"] = Value::Array(rows);
    std::fs::write(&bundle, serde_json::to_vec(&v).unwrap()).unwrap();
    let with_rows = report(&[b, "--compact"]);
    for k in ["bars", "histograms", "steps", "totals", "outliers", "set_apart", "verdict", "bars_note"] {
        assert_eq!(with_rows["step_budget"][k], from_sqlite["step_budget"][k], "{k}");
    }
    // a newer step budget: idle[] filled, a field added; an older one: groups/pacing/distributions absent
    let sb = v["kernel_profile"]["step_budget"].as_object_mut().unwrap();
    sb.insert("idle".into(), serde_json::json!([{"device": 0, "cause": "host", "gaps": 12, "ns": 34567}, {"device": 0, "cause": "sync", "gaps": 3, "ns": 890}]));
    sb.insert("ranks".into(), serde_json::json!([]));
    for k in ["groups", "pacing", "distributions", "totals"] {
        sb.remove(k);
    }
    std::fs::write(&bundle, serde_json::to_vec(&v).unwrap()).unwrap();
    let html = dir.path().join("p.html");
    let r = report(&[b, "--html", html.to_str().unwrap(), "--compact"]);
    assert_eq!(r["class"], from_sqlite["class"]);
    assert_eq!(r["step_budget"]["idle_computed"], true);
    assert_eq!(r["step_budget"]["idle"].as_array().unwrap().len(), 2);
    assert!(r["step_budget"]["distributions"].as_object().unwrap().is_empty());
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("id=\"idle\"") && !page.contains("id=\"idle-not-computed\""));
    assert_eq!(page.matches("class=\"idle-row\"").count(), 2);
    assert!(page.contains("<td>34567</td>") && page.contains("<td>sync</td>"));
    // the step budget's per-device shape (idle[] of DeviceIdle): one row and one bar per device, by cause
    let dev = |d: i64, h: i64, sy: i64, l: i64, o: i64| {
        serde_json::json!({"device_id": d, "processes": [1], "span_start_ns": 0, "span_end_ns": 1, "busy_ns": 1,
            "idle_ns": h + sy + l + o, "gaps": 9, "categories": {"host_wait": {"ns": h, "gaps": 4}, "sync_wait": {"ns": sy, "gaps": 1},
            "launch_latency": {"ns": l, "gaps": 3}, "other": {"ns": o, "gaps": 1}},
            "in_steps": {"host_wait": h / 2, "sync_wait": sy, "launch_latency": l, "other": o}, "future_field": [1, 2]})
    };
    let sb = v["kernel_profile"]["step_budget"].as_object_mut().unwrap();
    sb.insert(
        "idle".into(),
        serde_json::json!([dev(0, 4_000_000, 1_000_000, 500_000, 0), dev(1, 2_000_000, 0, 0, 250_000)]),
    );
    std::fs::write(&bundle, serde_json::to_vec(&v).unwrap()).unwrap();
    report(&[b, "--html", html.to_str().unwrap(), "--compact"]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("class=\"idle-row\"").count(), 2);
    assert_eq!(common::cells(&page, "idle-ns"), vec!["5.500 ms", "2.250 ms"]);
    assert_eq!(common::cells(&page, "idle-host_wait"), vec!["4.000 ms (72.7%)", "2.000 ms (88.9%)"]);
    assert_eq!(common::cells(&page, "idle-launch_latency")[0], "500.0 µs (9.1%)");
    assert!(page.contains("id=\"idle-where\"") && page.contains("inside the steps' GPU spans"));
    let re = regex::Regex::new(r#"data-axis="idle".*?</svg>"#).unwrap();
    let bars: Vec<&str> = re.find_iter(&page).map(|m| m.as_str()).collect();
    assert_eq!(bars.len(), 2);
    assert!(bars[0].contains("data-ns=\"4000000\"") && bars[0].contains("data-ns=\"500000\""));
    // an empty idle[] is "not computed"
    let sb = v["kernel_profile"]["step_budget"].as_object_mut().unwrap();
    sb.insert("idle".into(), serde_json::json!([]));
    std::fs::write(&bundle, serde_json::to_vec(&v).unwrap()).unwrap();
    report(&[b, "--html", html.to_str().unwrap(), "--compact"]);
    assert!(std::fs::read_to_string(&html).unwrap().contains("id=\"idle-not-computed\""));
}

/// Render the page with a probe appended (the page has no script) and return the DOM and the probe's JSON:
/// per step bar `[steps, wall_ns, Σ rendered segment height px, clipped]`, per histogram bin `[id, count]`.
fn render(chromium: &Path, page: &Path, dir: &Path) -> (String, Value) {
    let html = std::fs::read_to_string(page).unwrap();
    let probe = "<pre id=\"probe\"></pre><script>const bars=[];document.querySelectorAll('#step-bars g.step-bar').forEach(g=>{let h=0;g.querySelectorAll('rect.sseg').forEach(r=>h+=r.getBoundingClientRect().height);bars.push([+g.dataset.steps,+g.dataset.wallNs,h,g.querySelector('.clip-mark')?1:0,g.querySelector('.outlier-mark')?1:0]);});const bins=[];document.querySelectorAll('svg[data-axis=hist] rect.hbin').forEach(r=>bins.push([r.closest('svg').id,+r.dataset.count]));document.getElementById('probe').textContent=JSON.stringify({bars,bins});</script></body>";
    let copy = dir.join("probe.html");
    std::fs::write(&copy, html.replace("</body>", probe)).unwrap();
    let out = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(["--window-size=1200,1600", "--dump-dom"])
        .arg(format!("file://{}", copy.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    let start = dom
        .find("<pre id=\"probe\">")
        .unwrap_or_else(|| panic!("chromium dumped no DOM: {}", String::from_utf8_lossy(&out.stderr)))
        + 16;
    let end = start + dom[start..].find("</pre>").unwrap();
    (dom.clone(), serde_json::from_str(&dom[start..end]).unwrap())
}

#[test]
fn the_step_budget_page_as_chromium_renders_it() {
    let Some(chromium) = common::chromium_or_skip("the_step_budget_page_as_chromium_renders_it") else { return };
    let dir = tempfile::tempdir().unwrap();
    for (f, nbars, per) in [("nsys-2025.3.1/decode_mixed.sqlite", 400, 1), ("nsys-2025.3.1/serve_node.sqlite", 397, 3)]
    {
        let page: PathBuf = dir.path().join("r.html");
        let r = report(&[&fx(f), "--html", page.to_str().unwrap(), "--compact"]);
        let (dom, m) = render(&chromium, &page, dir.path());
        let s = &r["step_budget"];
        for id in
            ["step-budget", "sb-verdict", "step-bars", "hist-wall", "hist-gpu_busy", "sb-dist", "signals", "provenance"]
        {
            assert!(dom.contains(&format!("id=\"{id}\"")), "{f}: the page has no #{id}");
        }
        // the idle attribution: one row per device of idle[] with its idle, or the sentence saying it is absent
        let idle = s["idle"].as_array().unwrap();
        if idle.is_empty() {
            assert!(dom.contains("id=\"idle-not-computed\""), "{f}");
        } else {
            assert!(dom.contains("id=\"idle\"") && !dom.contains("id=\"idle-not-computed\""), "{f}");
            assert_eq!(dom.matches("class=\"idle-row\"").count(), idle.len());
            if idle.iter().all(|d| d["categories"].is_object()) {
                let want: Vec<String> =
                    idle.iter().map(|d| nsyskit::report::dur(d["idle_ns"].as_i64().unwrap())).collect();
                assert_eq!(common::cells(&dom, "idle-ns"), want, "{f}");
            }
        }
        // signals and provenance are tables (or a sentence), never raw JSON
        assert!(dom.contains("<table class=\"kv\" id=\"signals\">"));
        assert!(
            !dom.contains("{\"") || dom.find("{\"").unwrap() > dom.find("id=\"probe\"").unwrap(),
            "{f}: raw JSON on the page"
        );
        // the class and the rows that establish it, as in the document
        assert_eq!(
            common::cells(&dom, "sb-row-share"),
            s["verdict"]["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| match x["share"].as_f64() {
                    Some(v) => format!("{:.1}%", v * 100.0),
                    None => "—".into(),
                })
                .collect::<Vec<_>>()
        );
        assert_eq!(
            common::cells(&dom, "sb-row-ns"),
            s["verdict"]["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| nsyskit::report::dur(x["value_ns"].as_i64().unwrap()))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            common::cells(&dom, "sbd-wall-median"),
            vec![nsyskit::report::dur(s["distributions"]["wall"]["median"].as_i64().unwrap())]
        );
        assert!(dom.contains(&format!("id=\"sb-class\">{}<", r["class"].as_str().unwrap())));
        // one bar per step (or bin), as many as the document has; binned pages say so
        let bars = m["bars"].as_array().unwrap();
        assert_eq!(bars.len(), nbars, "{f}");
        assert_eq!(s["bars"]["bars"].as_array().unwrap().len(), nbars);
        assert!(dom.contains(&format!("data-bars=\"{nbars}\" data-steps-per-bar=\"{per}\"")));
        assert_eq!(dom.contains("they are binned, each bar is 3 consecutive steps"), per == 3, "{f}");
        for (b, d) in bars.iter().zip(s["bars"]["bars"].as_array().unwrap()) {
            assert_eq!(b[0], d["steps"]);
            assert_eq!(b[1], d["wall_ns"]);
            assert_eq!(b[4].as_u64().unwrap() > 0, d["outliers"].as_u64().unwrap() > 0);
        }
        // outliers marked: decode_mixed's 15 prefill-contaminated steps and 7 slow decode steps
        let marked = bars.iter().filter(|b| b[4] == 1).count();
        if per == 1 {
            assert_eq!(marked, s["outliers"].as_array().unwrap().len());
            assert_eq!(marked, 22);
        }
        // heights: one factor (px per ns of mean step wall) for every bar that is not clipped
        let free: Vec<(f64, f64)> = bars
            .iter()
            .filter(|b| b[3] == 0 && b[1].as_i64().unwrap() > 0)
            .map(|b| (b[1].as_f64().unwrap() / b[0].as_f64().unwrap(), b[2].as_f64().unwrap()))
            .collect();
        assert!(free.len() > nbars / 2, "{f}: most bars are drawn unclipped");
        let (w0, h0) = free.iter().copied().fold((0.0, 0.0), |a, x| if x.0 > a.0 { x } else { a });
        for (w, hgt) in &free {
            assert!(
                (hgt - h0 * w / w0).abs() < 0.05 + 1e-3 * hgt,
                "{f}: a {w} ns step drawn {hgt} px, expected {}",
                h0 * w / w0
            );
        }
        // clipped bars are the ones above the scale, and they reach the full height
        for b in bars.iter().filter(|b| b[3] == 1) {
            assert!(b[1].as_f64().unwrap() / b[0].as_f64().unwrap() > w0, "{f}");
            assert!((b[2].as_f64().unwrap() - nsyskit::report::html::STEPS_H).abs() < 0.05);
        }
        // histograms: the bins' counts as in the document, every step counted
        for h in s["histograms"].as_array().unwrap() {
            let id = format!("hist-{}", h["name"].as_str().unwrap());
            let got: Vec<u64> = m["bins"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x[0] == id.as_str())
                .map(|x| x[1].as_u64().unwrap())
                .collect();
            let mut want: Vec<u64> = h["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
            if h["above"].as_u64().unwrap() > 0 {
                want.push(h["above"].as_u64().unwrap());
            }
            assert_eq!(got, want, "{f} {id}");
            assert_eq!(got.iter().sum::<u64>(), s["steps"].as_u64().unwrap());
        }
    }
}

/// The headline names the biggest measured fact even when no class wins (issue #41): on the clean node-level H200
/// capture, the steps set apart (warm-up and outliers: the eager prefill iterations) hold most of the steps' wall
/// at almost no GPU time, and the range rules' other reading is named; the numbers are the step budget's own.
#[test]
fn the_headline_names_the_biggest_measured_fact() {
    let f = fx("nsys-2025.3.1/gpu_full_node.sqlite");
    let r = report(&[&f, "--compact"]);
    let sb = step_budget(&[&f, "--compact"]);
    let steps = sb["steps"].as_array().unwrap();
    let apart: Vec<u64> = sb["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(sb["warmup"].as_array().unwrap())
        .map(|o| o["index"].as_u64().unwrap())
        .collect();
    let wall: i64 = steps.iter().map(|s| s["wall_ns"].as_i64().unwrap()).sum();
    let apart_wall: i64 = steps
        .iter()
        .filter(|s| apart.contains(&s["index"].as_u64().unwrap()))
        .map(|s| s["wall_ns"].as_i64().unwrap())
        .sum();
    let share = apart_wall as f64 / wall as f64;
    assert!(share > 0.5, "{share}");
    let sa = &r["step_budget"]["set_apart"];
    assert_eq!(sa["wall_ns"].as_i64().unwrap(), apart_wall);
    assert_eq!(sa["warmup"].as_u64().unwrap() + sa["outliers"].as_u64().unwrap(), apart.len() as u64);
    let h = r["headline"].as_str().unwrap();
    assert!(h.starts_with(&format!("{}: ", r["class"].as_str().unwrap())), "{h}");
    assert!(h.contains(&format!("{} of {} vibeserve.engine.iteration steps", apart.len(), steps.len())), "{h}");
    assert!(h.contains(&format!("take {:.1}% of all steps' wall", 100.0 * share)), "{h}");
    let rd = &r["range_decision"];
    if rd["class"] != r["class"] {
        assert!(
            h.contains(&format!(
                "the range rules alone read {} ({})",
                rd["class"].as_str().unwrap(),
                rd["rule"].as_str().unwrap()
            )),
            "{h}"
        );
    }
    // a capture the gates rejected says first that no class stands
    let r = report_exit(&[&fx("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite"), "--compact"], 1);
    assert!(r["headline"].as_str().unwrap().starts_with("unreliable: no class stands (gates.G4): G4: CUDA data stops"));
    // the page shows the headline first, escaped as the document says it
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let r = report(&[&f, "--html", page.to_str().unwrap(), "--compact"]);
    let html = std::fs::read_to_string(&page).unwrap();
    let at = html.find("id=\"headline\"").expect("a headline on the page");
    assert!(at < html.find("id=\"capture\"").unwrap());
    assert!(html.contains(&nsyskit::report::html::escape(r["headline"].as_str().unwrap())));
}

/// A fallback that measures something else says so (issue #41): a bundle holds nsys's kernel summary but no
/// MEMCPY/MEMSET rows, so its `memcpy_device_share` is the copy kernels' share, labelled as that on the page, never
/// "device time in copies" (the demo's page showed 0.0 % beside an export whose copies are 4.6 % of device time).
#[test]
fn a_bundles_memcpy_share_is_labelled_as_copy_kernels_only() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("b.html");
    let b = fx("pod-attach-gpu/bundle/inference_perfbench_v1.json");
    let (out, _, err) = run("report", &[&b, "--html", page.to_str().unwrap(), "--compact"], None);
    let r = common::one_doc(&out);
    let src = r["signals"]["memcpy_device_share_source"].as_str().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(src, nsyskit::report::MEMCPY_FROM_CATEGORY);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("kernel time in copy kernels only (no MEMCPY/MEMSET rows in a bundle)"));
    assert!(!html.contains("device time in copies"));
    // on the export itself the share is the copies' rows, labelled as device time in copies
    let r = report(&[&fx("nsys-2025.3.1/gpu_full_node.sqlite"), "--html", page.to_str().unwrap(), "--compact"]);
    assert_ne!(r["signals"]["memcpy_device_share_source"], nsyskit::report::MEMCPY_FROM_CATEGORY);
    assert!(std::fs::read_to_string(&page).unwrap().contains("device time in copies"));
}
