//! Golden outputs: every analysis binary on every real fixture (with the flags the docs use), stdout bytes and
//! exit code compared with `tests/golden/<case>.out`. It proves "behaviour unchanged" across refactors: a
//! change of any document byte fails here, and a deliberate one is re-blessed with `NSYSKIT_BLESS=1 cargo test
//! --test golden` and justified in its commit.
//!
//! Each `.out` file is `exit N\n` followed by the binary's stdout. Run-dependent text is neutralised before
//! the comparison, and only that: the absolute checkout path (`<ROOT>`) and the path of a temporary folder or
//! file of nsyskit (`<TMP>`), and kern-csv-to-json's `source_mtime_utc` (`<MTIME>`, the checkout's time). No case records a run time: kern-csv-to-json gets `--captured-at` instead of
//! its default (the CSV file's modification time, which is the checkout's time).
//!
//! Cases run in parallel on the debug binaries (the whole set takes seconds).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Case {
    name: String,
    bin: &'static str,
    args: Vec<String>,
    /// A fixture fed on stdin (the argument list then carries `-`).
    stdin: Option<String>,
}

const SQLITE: [&str; 9] = [
    "nsys-2023.4.4/cpu_nvtx_osrt.sqlite",
    "nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite",
    "nsys-2023.4.4/gpu_range_graph.sqlite",
    "nsys-2023.4.4/gpu_range_node.sqlite",
    "nsys-2025.3.1/cpu_nvtx_osrt.sqlite",
    "nsys-2025.3.1/decode_clean.sqlite",
    "nsys-2025.3.1/decode_mixed.sqlite",
    "nsys-2025.3.1/gpu_full_graph.sqlite",
    "nsys-2025.3.1/gpu_full_node.sqlite",
];

/// Real exports kept xz-compressed in the repository: decompressed once per run into the test's scratch folder
/// (`CARGO_TARGET_TMPDIR/golden-xz/`, written `<XZ>` in the outputs).
const SQLITE_XZ: [&str; 4] = [
    "nsys-2025.3.1/hf_node.sqlite.xz",
    "nsys-2025.3.1/serve_node.sqlite.xz",
    "nsys-2025.3.1/two_rank.sqlite.xz",
    "serve-capture-gpu-records/capture.sqlite.xz",
];

fn xz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("golden-xz")
}

/// `fixtures/REL` decompressed to `<XZ>/STEM.sqlite` (xz, else Python's lzma); returns its path.
fn unxz(rel: &str) -> String {
    let out = xz_dir().join(format!("{}.sqlite", stem(rel.trim_end_matches(".xz"))));
    if !out.is_file() {
        std::fs::create_dir_all(xz_dir()).unwrap();
        let src = root().join("fixtures").join(rel);
        let got = Command::new("xz").arg("-dc").arg(&src).output().or_else(|_| {
            Command::new("python3")
                .args(["-c", "import lzma,sys;sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())"])
                .arg(&src)
                .output()
        });
        let got = got.expect("xz or python3 is needed to read the .xz fixtures");
        assert!(got.status.success(), "{rel}: {}", String::from_utf8_lossy(&got.stderr));
        let part = out.with_extension("part");
        std::fs::write(&part, &got.stdout).unwrap();
        std::fs::rename(&part, &out).unwrap();
    }
    out.display().to_string()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stem(fixture: &str) -> String {
    fixture.trim_end_matches(".sqlite").trim_end_matches(".csv").replace(['/', '.'], "_")
}

fn case(name: String, bin: &'static str, args: &[&str]) -> Case {
    Case { name, bin, args: args.iter().map(|s| s.to_string()).collect(), stdin: None }
}

fn fx(rel: &str) -> String {
    format!("fixtures/{rel}")
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let plain = SQLITE.iter().map(|f| (f.to_string(), fx(f)));
    let xz = SQLITE_XZ.iter().map(|f| (f.trim_end_matches(".xz").to_string(), unxz(f)));
    for (f, p) in plain.chain(xz) {
        let (f, p) = (f.as_str(), p.as_str());
        let s = stem(f);
        v.push(case(format!("gate-check__{s}"), "gate-check", &[p, "--pretty"]));
        v.push(case(format!("sqlite-ranges__{s}"), "sqlite-ranges", &[p, "--pretty"]));
        v.push(case(
            format!("sqlite-ranges__{s}__prefix"),
            "sqlite-ranges",
            &[p, "--range-prefix", "vibeserve.", "--pretty"],
        ));
        v.push(case(format!("nvtx-readiness__{s}"), "nvtx-readiness", &[p, "--pretty"]));
        v.push(case(
            format!("nvtx-readiness__{s}__prefix"),
            "nvtx-readiness",
            &[p, "--range-prefix", "vibeserve", "--pretty"],
        ));
        v.push(case(format!("report__{s}"), "report", &[p, "--pretty"]));
        // step-budget's summary does not grow with the steps (issue #40): the serve captures (1 190 and 4 318
        // steps, whose documents held every step: 0.8 and 3 MB) are in too
        v.push(case(format!("step-budget__{s}"), "step-budget", &[p]));
        if f.contains("decode_") {
            v.push(case(format!("gate-check__{s}__decode"), "gate-check", &[p, "--tier", "decode", "--pretty"]));
        }
        if f.contains("gpu_") || f.contains("decode_") || f.contains("serve_") {
            v.push(case(
                format!("gate-check__{s}__readiness"),
                "gate-check",
                &[p, "--readiness", "--range-prefix", "vibeserve", "--pretty"],
            ));
        }
    }
    // the flags the docs use
    v.push(case(
        "gate-check__FAILED__log".into(),
        "gate-check",
        &[
            &fx("nsys-2023.4.4/gpu_full_node_FAILED-cbid468.sqlite"),
            "--log",
            &fx("logs/nsys-2023.4.4_gpu_full_node_FAILED-cbid468.console.txt"),
            "--pretty",
        ],
    ));
    v.push(case(
        "gate-check__serve_node__log_provenance".into(),
        "gate-check",
        &[
            &unxz("nsys-2025.3.1/serve_node.sqlite.xz"),
            "--log",
            "fixtures/serve-capture-gpu/nsys.log",
            "--provenance",
            "fixtures/serve-capture-gpu/provenance.json",
            "--pretty",
        ],
    ));
    v.push(case(
        "sqlite-ranges__gpu_full_node__table".into(),
        "sqlite-ranges",
        &[&fx("nsys-2025.3.1/gpu_full_node.sqlite"), "--range-prefix", "vibeserve.", "--format", "table"],
    ));
    v.push(case(
        "sqlite-ranges__decode_mixed__window".into(),
        "sqlite-ranges",
        &[&fx("nsys-2025.3.1/decode_mixed.sqlite"), "--window", "0:3000000000", "--pretty"],
    ));
    // stdin (`-`)
    for (bin, extra) in
        [("gate-check", &[][..]), ("sqlite-ranges", &["--range-prefix", "vibeserve."][..]), ("nvtx-readiness", &[][..])]
    {
        let mut args = vec!["-".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push("--pretty".into());
        v.push(Case {
            name: format!("{bin}__stdin__gpu_range_node"),
            bin,
            args,
            stdin: Some(fx("nsys-2023.4.4/gpu_range_node.sqlite")),
        });
    }
    // capture-compare pairs
    let pairs = [
        ("node_vs_graph", "nsys-2025.3.1/gpu_full_node.sqlite", "nsys-2025.3.1/gpu_full_graph.sqlite"),
        ("clean_vs_mixed", "nsys-2025.3.1/decode_clean.sqlite", "nsys-2025.3.1/decode_mixed.sqlite"),
        ("v2023_vs_v2025", "nsys-2023.4.4/gpu_range_node.sqlite", "nsys-2025.3.1/gpu_full_node.sqlite"),
        ("same", "nsys-2025.3.1/gpu_full_node.sqlite", "nsys-2025.3.1/gpu_full_node.sqlite"),
        ("cpu_2023_vs_2025", "nsys-2023.4.4/cpu_nvtx_osrt.sqlite", "nsys-2025.3.1/cpu_nvtx_osrt.sqlite"),
    ];
    for (n, a, b) in pairs {
        v.push(case(format!("capture-compare__{n}"), "capture-compare", &[&fx(a), &fx(b), "--pretty"]));
    }
    // kern-csv-to-json on the summary CSVs (the *_trace.csv files are megabytes of per-call rows)
    for dir in ["nsys-2023.4.4/stats", "nsys-2025.3.1/stats"] {
        let mut files: Vec<String> = std::fs::read_dir(root().join("fixtures").join(dir))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with("_sum.csv"))
            .collect();
        files.sort();
        for f in files {
            let rel = format!("{dir}/{f}");
            v.push(case(
                format!("kern-csv-to-json__{}", stem(&rel)),
                "kern-csv-to-json",
                &[&fx(&rel), "--captured-at", "2026-01-01T00:00:00Z", "--pretty"],
            ));
        }
    }
    v
}

fn bin_path(bin: &str) -> PathBuf {
    assert_cmd::cargo::cargo_bin(bin)
}

fn neutralise(text: &str) -> String {
    let root = root().display().to_string();
    let t = text.replace(&xz_dir().display().to_string(), "<XZ>").replace(&root, "<ROOT>");
    let tmp = regex::Regex::new(r"(/tmp|/var/tmp|/var/folders/[^\s\x22]*)/nsyskit-[A-Za-z0-9_.-]+").unwrap();
    let t = tmp.replace_all(&t, "<TMP>");
    // a checkout's file mtimes are the clone's, not the capture's
    let mtime = regex::Regex::new(r#""source_mtime_utc": ?"[^"]*""#).unwrap();
    mtime.replace_all(&t, r#""source_mtime_utc": "<MTIME>""#).into_owned()
}

fn run_case(c: &Case) -> Vec<u8> {
    let mut cmd = Command::new(bin_path(c.bin));
    cmd.args(&c.args).current_dir(root()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // no nsys is needed by any case: make sure none is used
    cmd.env("NSYS_BIN", "/nonexistent/nsys").env_remove("NSYSKIT_NSYS");
    cmd.stdin(if c.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{}: cannot run {}: {e}", c.name, c.bin));
    let writer = c.stdin.as_ref().map(|f| {
        let bytes = std::fs::read(root().join(f)).unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        })
    });
    let out = child.wait_with_output().unwrap();
    if let Some(w) = writer {
        w.join().unwrap();
    }
    let code = out.status.code().map(|c| c.to_string()).unwrap_or_else(|| "signal".into());
    assert!(
        out.status.code().is_some_and(|c| c <= 2),
        "{}: exit {code}; stderr: {}",
        c.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut bytes = format!("exit {code}\n").into_bytes();
    bytes.extend(neutralise(&String::from_utf8_lossy(&out.stdout)).into_bytes());
    bytes
}

#[test]
fn every_binary_on_every_fixture_is_unchanged() {
    let dir = root().join("tests/golden");
    let bless = std::env::var_os("NSYSKIT_BLESS").is_some();
    let cases = cases();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(usize, Vec<u8>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= cases.len() {
                            break;
                        }
                        out.push((i, run_case(&cases[i])));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    if bless {
        std::fs::create_dir_all(&dir).unwrap();
        // drop files of cases that no longer exist
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".out") && !cases.iter().any(|c| format!("{}.out", c.name) == n) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    for (i, got) in results {
        let c = &cases[i];
        let path = dir.join(format!("{}.out", c.name));
        if bless {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        match std::fs::read(&path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!(
                "{}: differs from {} ({}); {}",
                c.name,
                rel(&path),
                first_diff(&want, &got),
                cmdline(c)
            )),
            Err(_) => failures.push(format!("{}: no golden file {} (bless with NSYSKIT_BLESS=1)", c.name, rel(&path))),
        }
    }
    eprintln!("golden: {} cases{}", cases.len(), if bless { " blessed" } else { "" });
    assert!(
        failures.is_empty(),
        "{} of {} golden cases changed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

fn cmdline(c: &Case) -> String {
    let mut s = format!("{} {}", c.bin, c.args.join(" "));
    if let Some(f) = &c.stdin {
        s.push_str(&format!(" < {f}"));
    }
    s
}

fn first_diff(want: &[u8], got: &[u8]) -> String {
    let w = String::from_utf8_lossy(want);
    let g = String::from_utf8_lossy(got);
    for (n, (a, b)) in w.lines().zip(g.lines()).enumerate() {
        if a != b {
            return format!("line {}: want {:?}, got {:?}", n + 1, a, b);
        }
    }
    format!("{} vs {} lines", w.lines().count(), g.lines().count())
}
