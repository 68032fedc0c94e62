//! Pass 0 and pass 1: the input split into report sections, the report told from its header (or `--report`,
//! nsys's `Processing` line, the file name), and every row converted once before any output.

use super::*;

/// Everything of the document but its rows, and where the rows are.
pub(super) struct Prepared {
    pub(super) doc: KernCsvToJsonDoc,
    pub(super) parsed: Vec<ParsedCol>,
    pub(super) header: Vec<String>,
    /// Byte offset of the first data line, end of the report's section, and the first data line's number.
    pub(super) rows_at: Option<(u64, u64, usize)>,
}

pub(super) const BOM: &[u8] = "\u{feff}".as_bytes();

/// One report of the input (nsys's console output of several reports has one per `Processing` line).
pub(super) struct SectionInfo {
    pub(super) processing: Option<String>,
    pub(super) first_line: usize,
    pub(super) end: u64,
    /// Its first line that is not blank and not nsys console chatter: SKIPPED, or the CSV header.
    pub(super) first: Option<(usize, u64, Option<String>)>,
}

/// Pass 0 (the lines: UTF-8, sections, header) and pass 1 (every row converted, kernel totals).
pub(super) fn prepare<R: Read + Seek>(
    r: &mut R,
    source: &str,
    path: Option<&Path>,
    mtime: Option<String>,
    opts: &KernCsvOptions,
) -> Result<Prepared> {
    let forced = checked_options(opts)?;
    let io = |e: std::io::Error| Error::input(format!("{source}: cannot read: {e}"));
    let sections = split_sections(r, source)?;
    let section = pick_section(&sections, forced, source)?;

    let mut doc = new_doc(source, opts, mtime);

    // the name that nsys or the user gave, before looking at the header
    let file_report = path.and_then(report_from_file_name);
    let named: Option<(&'static ReportDef, String, &str)> = if let Some(r) = forced {
        Some((r, opts.report.clone().unwrap(), "--report"))
    } else if let Some(n) = &section.processing {
        find_report(n).map(|r| (r, n.clone(), "nsys-output"))
    } else {
        file_report.map(|(r, n)| (r, n, "file-name"))
    };

    let empty = || {
        Error::input(format!(
            "{source}: empty: no CSV header (nsys stats writes no file for a report it SKIPPED; its console says why)"
        ))
    };
    let (first_line, header_at) = match &section.first {
        None => return Err(empty()),
        Some((line, _, Some(reason))) => {
            let (r, n, how) = named.clone().ok_or_else(|| {
                Error::input(format!(
                    "{source}: line {line}: nsys skipped the report ({reason}) but the report cannot be told: use --report"
                ))
                .with_arg("--report")
            })?;
            set_name(&mut doc, r, &n, how);
            doc.status = "skipped".into();
            doc.skipped_reason = Some(reason.clone());
            if doc.is_kernel_report() {
                doc.totals = Some(KernelTotals { kernels: 0, instances: 0, total_time_ns: 0 });
                doc.top_kernels = Some(Vec::new());
            }
            return Ok(Prepared { doc, parsed: Vec::new(), header: Vec::new(), rows_at: None });
        }
        Some((line, at, None)) => (*line, *at),
    };

    r.seek(SeekFrom::Start(header_at)).map_err(io)?;
    let mut records = Records::new(BufReader::with_capacity(1 << 16, &mut *r), section.end - header_at, first_line);
    let header = match records.next_record().map_err(|e| e.into_error(source))? {
        Some((_, h)) => h,
        None => return Err(empty()),
    };
    let parsed: Vec<ParsedCol> = header.iter().map(|h| parse_header(h)).collect();
    let signature: Vec<String> = parsed.iter().map(|c| c.signature.clone()).collect();
    let candidates: Vec<&'static ReportDef> =
        REPORTS.iter().filter(|r| r.header.iter().copied().eq(signature.iter().map(|s| s.as_str()))).collect();

    let (def, name, how) = identify(forced, &candidates, named, opts, source, first_line, &header)?;
    set_name(&mut doc, def, &name, how);

    // one time unit per file in practice; record it (the first seen), convert each column by its own
    doc.csv_time_unit = parsed.iter().find_map(|c| c.unit.map(|(u, _)| u.to_string()));
    doc.columns = parsed
        .iter()
        .zip(&header)
        .map(|(c, h)| Column { header: h.clone(), key: c.key.clone(), kind: c.kind.as_str().to_string() })
        .collect();

    // pass 1: every row converts (errors before any output), kernel totals and the top kernels
    let rows_at = (header_at + records.consumed, section.end, records.line);
    let mut summary = doc.is_kernel_report().then(|| Summary::new(opts.top, &parsed, &header));
    let mut summary_error: Option<Error> = None;
    let mut i = 0usize;
    while let Some((line, rec)) = records.next_record().map_err(|e| e.into_error(source))? {
        let row = convert_row(&rec, line, &parsed, &header, source)?;
        if let Some(s) = summary.as_mut() {
            if let Err(e) = s.add(&row, i, line, source) {
                summary_error.get_or_insert(e);
            }
        }
        i += 1;
    }
    if let Some(e) = summary_error {
        return Err(e);
    }
    if let Some(s) = summary {
        let (totals, top) = s.finish(source)?;
        doc.totals = Some(totals);
        doc.top_kernels = Some(top);
    }
    Ok(Prepared { doc, parsed, header, rows_at: Some(rows_at) })
}

/// The report `--report` names (an unknown one is a usage error), after checking `--captured-at`.
fn checked_options(opts: &KernCsvOptions) -> Result<Option<&'static ReportDef>> {
    let forced = match &opts.report {
        Some(r) => Some(find_report(r).ok_or_else(|| {
            Error::usage(format!("--report {r}: unknown report; known: {}", report_names().join(", ")))
                .with_arg("--report")
        })?),
        None => None,
    };
    if let Some(t) = &opts.captured_at {
        if !is_rfc3339(t) {
            return Err(Error::usage(format!("--captured-at {t:?}: not an RFC 3339 time (e.g. 2026-11-29T22:43:05Z)"))
                .with_arg("--captured-at"));
        }
    }
    Ok(forced)
}

/// Pass 0: the input split into sections line by line (UTF-8 checked, byte-order marks skipped).
fn split_sections<R: Read + Seek>(r: &mut R, source: &str) -> Result<Vec<SectionInfo>> {
    let io = |e: std::io::Error| Error::input(format!("{source}: cannot read: {e}"));
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut sections = vec![SectionInfo { processing: None, first_line: 1, end: 0, first: None }];
    {
        let mut br = BufReader::with_capacity(1 << 16, &mut *r);
        let (mut buf, mut offset, mut n) = (Vec::new(), 0u64, 0usize);
        loop {
            buf.clear();
            let k = br.read_until(b'\n', &mut buf).map_err(io)?;
            if k == 0 {
                break;
            }
            n += 1;
            if n == 1 && buf.starts_with(crate::export::SQLITE_MAGIC) {
                return Err(Error::input(format!(
                    "{source}: an SQLite export (it starts with \"SQLite format 3\"), not `nsys stats --format csv` output: read the export with gate-check, report or sqlite-ranges, or write its CSV first with `nsys stats --report cuda_gpu_kern_sum --format csv --output - EXPORT | kern-csv-to-json -`"
                )));
            }
            let line_start = offset;
            offset += k as u64;
            let mut content: &[u8] = buf.strip_suffix(b"\n").unwrap_or(&buf);
            content = content.strip_suffix(b"\r").unwrap_or(content);
            let mut text_start = line_start;
            if n == 1 {
                // byte-order marks (a doubled one too: a re-encoded file) are not text
                while let Some(rest) = content.strip_prefix(BOM) {
                    content = rest;
                    text_start += BOM.len() as u64;
                }
            }
            let text = std::str::from_utf8(content)
                .map_err(|_| Error::input(format!("{source}: line {n}: not UTF-8 text")))?;
            if let Some(name) = processing_report(text) {
                let cur = sections.last_mut().unwrap();
                if cur.processing.is_some() || cur.first.is_some() {
                    cur.end = line_start;
                    sections.push(SectionInfo { processing: Some(name), first_line: n, end: 0, first: None });
                } else {
                    cur.processing = Some(name);
                }
            }
            let cur = sections.last_mut().unwrap();
            let t = text.trim();
            if cur.first.is_none() && !t.is_empty() {
                if let Some(reason) = t.strip_prefix("SKIPPED:") {
                    cur.first = Some((n, text_start, Some(reason.trim().to_string())));
                } else if !is_preamble(t) {
                    cur.first = Some((n, text_start, None));
                }
            }
        }
        sections.last_mut().unwrap().end = offset;
    }
    Ok(sections)
}

/// The document before its report is known: source, capture time and where it came from.
fn new_doc(source: &str, opts: &KernCsvOptions, mtime: Option<String>) -> KernCsvToJsonDoc {
    let (schema, tool) = KernCsvToJsonDoc::header();
    KernCsvToJsonDoc {
        schema,
        tool,
        source: source.to_string(),
        captured_at_from: match (&opts.captured_at, &mtime) {
            (Some(_), _) => Some("--captured-at".into()),
            (None, Some(_)) => Some("csv-mtime".into()),
            (None, None) => None,
        },
        captured_at: opts.captured_at.clone().or_else(|| mtime.clone()),
        source_mtime_utc: mtime,
        report: String::new(),
        report_alias: None,
        detected_from: String::new(),
        status: "ok".into(),
        skipped_reason: None,
        csv_time_unit: None,
        columns: Vec::new(),
        rows: Vec::new(),
        totals: None,
        top_kernels: None,
    }
}

/// The report a header is (`candidates`: the reports with that header), with the name given and how it was
/// told; `--report` must fit the header, and a header several reports share needs a name.
fn identify(
    forced: Option<&'static ReportDef>,
    candidates: &[&'static ReportDef],
    named: Option<(&'static ReportDef, String, &'static str)>,
    opts: &KernCsvOptions,
    source: &str,
    first_line: usize,
    header: &[String],
) -> Result<(&'static ReportDef, String, &'static str)> {
    let found = match (forced, candidates) {
        (Some(r), _) => {
            if !candidates.iter().any(|c| c.name == r.name) {
                return Err(Error::input(format!(
                    "{source}: line {first_line}: the header does not match report {} (named by --report): expected [{}], saw [{}]",
                    r.name,
                    r.header.join(", ").replace("(T)", "(ns)"),
                    header.join(", ")
                ))
                .with_arg("--report"));
            }
            (r, opts.report.clone().unwrap(), "--report")
        }
        (None, [one]) => {
            // the header decides; a name nsys or the file gave for the same report is kept as its alias
            let given = named.as_ref().filter(|(r, _, _)| r.name == one.name).map(|(_, n, _)| n.clone());
            (*one, given.unwrap_or_else(|| one.name.to_string()), "header")
        }
        (None, []) => {
            return Err(Error::input(format!(
                "{source}: line {first_line}: unknown CSV header [{}]; known reports: {}",
                header.join(", "),
                REPORTS.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
            )))
        }
        (None, many) => match named.as_ref().filter(|(r, _, _)| many.iter().any(|c| c.name == r.name)) {
            Some((r, n, how)) => (*r, n.clone(), *how),
            None => {
                return Err(Error::input(format!(
                    "{source}: line {first_line}: the header [{}] fits reports {}; name one with --report (or a file name ending in _REPORT.csv)",
                    header.join(", "),
                    many.iter().map(|r| r.name).collect::<Vec<_>>().join(" and ")
                ))
                .with_arg("--report"))
            }
        },
    };
    Ok(found)
}

pub(super) fn set_name(doc: &mut KernCsvToJsonDoc, def: &ReportDef, given: &str, how: &str) {
    doc.report = def.name.to_string();
    doc.report_alias = (given != def.name).then(|| given.to_string());
    doc.detected_from = how.to_string();
}

/// Lines nsys prints around a report on its console.
pub(super) fn is_preamble(t: &str) -> bool {
    t.starts_with("Generating SQLite file ")
        || t.starts_with("Processing [")
        || t.starts_with("NOTICE:")
        || t.starts_with("Exporting ")
        || t.starts_with("Using ")
}

/// `Processing [x.sqlite] with [/…/reports/osrt_sum.py]...` → `osrt_sum`.
pub(super) fn processing_report(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("Processing [")?;
    let i = rest.find("] with [")?;
    let script = &rest[i + "] with [".len()..];
    let script = &script[..script.find(']')?];
    let file = script.rsplit(['/', '\\']).next()?;
    Some(file.strip_suffix(".py").unwrap_or(file).to_string())
}

pub(super) fn pick_section<'b>(
    sections: &'b [SectionInfo],
    forced: Option<&ReportDef>,
    source: &str,
) -> Result<&'b SectionInfo> {
    if sections.len() == 1 {
        return Ok(&sections[0]);
    }
    let names: Vec<String> = sections.iter().map(|s| s.processing.clone().unwrap_or_else(|| "?".into())).collect();
    if let Some(r) = forced {
        let hits: Vec<&SectionInfo> = sections
            .iter()
            .filter(|s| s.processing.as_deref().and_then(find_report).map(|d| d.name) == Some(r.name))
            .collect();
        if hits.len() == 1 {
            return Ok(hits[0]);
        }
        return Err(Error::input(format!(
            "{source}: the input holds {} reports ({}), {} of them {}",
            sections.len(),
            names.join(", "),
            hits.len(),
            r.name
        ))
        .with_arg("--report"));
    }
    Err(Error::input(format!(
        "{source}: line {}: the input holds {} reports ({}); kern-csv-to-json converts one: pick it with --report",
        sections[1].first_line,
        sections.len(),
        names.join(", ")
    ))
    .with_arg("--report"))
}

/// `gpu_full_node_cuda_api_sum.csv` → cuda_api_sum (nsys names its files `<base>_<report>.<ext>`).
pub(super) fn report_from_file_name(path: &Path) -> Option<(&'static ReportDef, String)> {
    let stem = path.file_stem()?.to_str()?;
    let mut best: Option<(&'static ReportDef, &str)> = None;
    for r in REPORTS {
        for n in std::iter::once(&r.name).chain(r.aliases.iter()) {
            let hit = stem == *n || stem.ends_with(&format!("_{n}"));
            if hit && best.map(|(_, b)| n.len() > b.len()).unwrap_or(true) {
                best = Some((r, n));
            }
        }
    }
    best.map(|(r, n)| (r, n.to_string()))
}
