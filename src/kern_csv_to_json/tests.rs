//! Unit tests of the CSV conversion (headers, units, sections, summaries).

use super::*;

#[test]
fn decimal_scaling_rounds_half_away_from_zero() {
    assert_eq!(decimal_to_ns("116406319", 0), Some(116406319));
    assert_eq!(decimal_to_ns("776042.1", 0), Some(776042));
    assert_eq!(decimal_to_ns("1358521.5", 0), Some(1358522));
    assert_eq!(decimal_to_ns("-2.5", 0), Some(-3));
    assert_eq!(decimal_to_ns("116406.319", 3), Some(116406319));
    assert_eq!(decimal_to_ns("0.6006", 6), Some(600600));
    assert_eq!(decimal_to_ns("0.0479", 9), Some(47_900_000));
    assert_eq!(decimal_to_ns("1.2345", 3), Some(1235));
    assert_eq!(decimal_to_ns("1.23449", 3), Some(1234));
    assert_eq!(decimal_to_ns("7", 9), Some(7_000_000_000));
    assert_eq!(decimal_to_ns(".5", 0), Some(1));
    assert_eq!(decimal_to_ns("1e3", 0), None);
    assert_eq!(decimal_to_ns("", 0), None);
    assert_eq!(decimal_to_ns("99999999999999999999", 0), None);
}

#[test]
fn header_typing() {
    let c = parse_header("Total Time (us)");
    assert_eq!((c.key.as_str(), c.kind, c.signature.as_str()), ("total_time_ns", Kind::TimeNs, "Total Time (T)"));
    assert_eq!(parse_header("Time (%)").key, "time_pct");
    assert_eq!(parse_header("Reg/Trd").key, "reg_per_trd");
    assert_eq!(parse_header("Throughput (MB/s)").key, "throughput_mb_per_s");
    assert_eq!(parse_header("Kernel Name").kind, Kind::Text);
    assert_eq!(parse_header("Start (sec)").unit, Some(("s", 9)));
}

#[test]
fn every_report_header_types_every_column_and_keys_are_unique() {
    for r in REPORTS {
        let keys: Vec<String> = r.header.iter().map(|h| parse_header(&h.replace("(T)", "(ns)")).key).collect();
        let mut dedup = keys.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), keys.len(), "{}: {keys:?}", r.name);
    }
}

#[test]
fn file_names_pick_the_report() {
    let n = |s: &str| report_from_file_name(Path::new(s)).map(|(r, n)| (r.name, n));
    assert_eq!(n("x/gpu_full_node_cuda_api_sum.csv"), Some(("cuda_api_sum", "cuda_api_sum".into())));
    assert_eq!(n("a_osrt_sum.csv"), Some(("osrt_sum", "osrt_sum".into())));
    assert_eq!(n("nvtx_sum.csv"), Some(("nvtx_sum", "nvtx_sum".into())));
    assert_eq!(n("r_nvtx_pushpop_sum.csv"), Some(("nvtx_pushpop_sum", "nvtx_pushpop_sum".into())));
    assert_eq!(n("r_gpukernsum.csv"), Some(("cuda_gpu_kern_sum", "gpukernsum".into())));
    assert_eq!(n("stats.csv"), None);
}

#[test]
fn processing_lines_name_the_report() {
    assert_eq!(
        processing_report("Processing [a.sqlite] with [/usr/lib/nsight-systems/reports/osrt_sum.py]... ").as_deref(),
        Some("osrt_sum")
    );
    assert_eq!(processing_report("Time (%),Total"), None);
}

#[test]
fn rfc3339_check() {
    assert!(is_rfc3339("2026-11-29T22:43:05Z"));
    assert!(is_rfc3339("2026-11-29T22:43:05.123+01:00"));
    assert!(!is_rfc3339("2026-11-29"));
    assert!(!is_rfc3339("2026-13-29T22:43:05Z"));
    assert!(!is_rfc3339("yesterday"));
}

fn fixture_csvs() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut out = Vec::new();
    for v in std::fs::read_dir(&root).unwrap() {
        let stats = v.unwrap().path().join("stats");
        if let Ok(d) = std::fs::read_dir(&stats) {
            out.extend(d.map(|e| e.unwrap().path()).filter(|p| p.extension().map(|e| e == "csv").unwrap_or(false)));
        }
    }
    out.sort();
    assert!(out.len() > 20, "{out:?}");
    out
}

#[test]
fn records_match_the_csv_crate_on_every_fixture() {
    for p in fixture_csvs() {
        let bytes = std::fs::read(&p).unwrap();
        let mut ours = Records::new(std::io::Cursor::new(&bytes[..]), bytes.len() as u64, 1);
        let mut theirs = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(&bytes[..]);
        for rec in theirs.records() {
            let rec = rec.unwrap();
            let want: Vec<String> = rec.iter().map(String::from).collect();
            let (_, got) = ours.next_record().ok().flatten().unwrap_or_else(|| panic!("{}: ends early", p.display()));
            assert_eq!(got, want, "{}", p.display());
        }
        assert!(ours.next_record().ok().flatten().is_none(), "{}", p.display());
    }
}

#[test]
fn quoted_fields_line_numbers_and_unterminated_quotes() {
    let text = "a,b\n\n\"x\"\"y\",\"two\r\nlines\"\r\n  \n\"q\"z,3\n";
    let mut r = Records::new(std::io::Cursor::new(text.as_bytes()), text.len() as u64, 10);
    assert_eq!(r.next_record().ok().flatten(), Some((10, vec!["a".to_string(), "b".into()])));
    assert_eq!(r.next_record().ok().flatten(), Some((12, vec!["x\"y".to_string(), "two\nlines".into()])));
    assert_eq!(r.next_record().ok().flatten(), Some((15, vec!["qz".to_string(), "3".into()])));
    assert!(r.next_record().ok().flatten().is_none());
    let text = "a,b\n1,\"open\n2,3\n4,5\n";
    let mut r = Records::new(std::io::Cursor::new(text.as_bytes()), text.len() as u64, 1);
    r.next_record().ok();
    match r.next_record() {
        Err(RecordError::Unterminated(2)) => {}
        _ => panic!("an unterminated quote on line 2"),
    }
}

#[test]
fn streamed_output_equals_the_rendered_document() {
    for p in fixture_csvs() {
        let input = Input::Path(p.clone());
        let opts = KernCsvOptions { top: 3, ..Default::default() };
        let doc = run(&input, &opts).unwrap();
        for style in [Style::Pretty, Style::Compact] {
            let mut out = Vec::new();
            let code = run_to_writer(&input, &opts, style, &mut out).unwrap();
            assert_eq!(code, doc.exit_code());
            assert!(
                String::from_utf8(out).unwrap() == crate::contract::render(&doc, style),
                "{} {style:?}",
                p.display()
            );
        }
    }
}

#[test]
fn rfc3339() {
    assert_eq!(rfc3339_utc(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_078_585);
    assert_eq!(rfc3339_utc(t), "2026-11-30T22:43:05Z");
}
