//! `kern-csv-to-json`: `nsys stats --format csv` output to typed JSON.
//!
//! One run converts one report. The report is recognised from its CSV header (every supported report has a
//! fixed column list), disambiguated where two reports share a header (`cuda_api_sum`/`osrt_sum`,
//! `nvtx_pushpop_sum`/`nvtx_startend_sum`) by `--report`, by the `Processing [...] with [.../REPORT.py]` line
//! nsys prints when it writes to the console, or by the file name (`<base>_<report>.csv`, nsys's own naming).
//!
//! Typing rules, by column header:
//! * `Label (ns|us|ms|s|sec|…)` — a time: integer nanoseconds, key `label_ns`. Decimal text is scaled exactly
//!   (no floating point) and rounded half away from zero to whole nanoseconds.
//! * `Time (%)` — a float, key `time_pct`. `… (MB)` and `… (MB/s)` — floats, keys `…_mb` / `…_mb_per_s`.
//! * names (`Name`, `Range`, `Kernel Name`, …) — strings, byte-exact (CSV quoting undone, nothing else).
//! * `Avg GPU Ops`, `Avg Range Lvl`, `Avg Num Child` — floats; every other column is an integer.
//! * An empty cell is `null`.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::contract::{Document, Error, Input, Result, Style, Tool};

/// Default of `--top`.
pub const DEFAULT_TOP: usize = 20;

/// A converted `nsys stats` report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KernCsvDoc {
    pub schema: String,
    pub tool: Tool,
    /// Where the CSV came from: the path as given, or `<stdin>`.
    pub source: String,
    /// The file's modification time (RFC 3339, UTC, whole seconds): when `nsys stats` wrote it. Null for stdin.
    pub source_mtime_utc: Option<String>,
    /// When the capture was taken, as far as this tool knows: `--captured-at` when given, else
    /// `source_mtime_utc` (an upper bound: nsys stats ran after the capture). bundle-merge copies it to
    /// `kernel_profile.captured_at`.
    pub captured_at: Option<String>,
    /// Where `captured_at` came from: `--captured-at` or `csv-mtime` (null when unknown).
    pub captured_at_from: Option<String>,
    /// The canonical (current) nsys report name, e.g. `cuda_gpu_kern_sum`.
    pub report: String,
    /// The name the report was given under when that was an older alias (`gpukernsum`), else null.
    pub report_alias: Option<String>,
    /// How the report was recognised: `header`, `file-name`, `nsys-output` (the `Processing [...]` line) or
    /// `--report`.
    pub detected_from: String,
    /// `ok`, or `skipped` when nsys printed `SKIPPED: … does not contain …` (a capture problem: exit 1).
    pub status: String,
    /// nsys's SKIPPED line (without the `SKIPPED: ` prefix), when status is `skipped`.
    pub skipped_reason: Option<String>,
    /// The time unit of the CSV's time columns (`ns`, `us`, `ms`, `s`), null when it has none (or skipped).
    pub csv_time_unit: Option<String>,
    /// The CSV columns in order, with the JSON key and type each became.
    pub columns: Vec<Column>,
    /// One object per CSV row, keys as in `columns`, in CSV order.
    #[schemars(with = "Vec<std::collections::BTreeMap<String, Option<Cell>>>")]
    pub rows: Vec<Map<String, Value>>,
    /// Kernel reports (`cuda_gpu_kern_sum`) only: sums over every row.
    pub totals: Option<KernelTotals>,
    /// Kernel reports only: the `--top` kernels by total time (ties keep CSV order).
    pub top_kernels: Option<Vec<StatsTopKernel>>,
}

/// Only for the schema of `rows`: a cell is an integer, a float or a string (null when empty).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Column {
    /// The header text exactly as in the CSV.
    pub header: String,
    /// The key in `rows`.
    pub key: String,
    /// `time_ns` (integer ns), `percent` (float), `integer`, `float`, `megabytes` (float), `megabytes_per_s`
    /// (float) or `text`.
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelTotals {
    /// Rows in the report (distinct kernel names).
    pub kernels: u64,
    /// Sum of `Instances`.
    pub instances: u64,
    /// Sum of `Total Time`, ns.
    pub total_time_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "TopKernel")]
pub struct StatsTopKernel {
    /// 1-based rank by total time.
    pub rank: u64,
    pub name: String,
    pub total_time_ns: i64,
    pub instances: i64,
    pub avg_ns: i64,
    pub med_ns: i64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub stddev_ns: i64,
    /// nsys's own `Time (%)` column (rounded by nsys to 0.1).
    pub time_pct: f64,
    /// `total_time_ns / totals.total_time_ns` (0 when the total is 0), unrounded.
    pub share: f64,
}

impl Document for KernCsvDoc {
    const KIND: &'static str = "stats";
    const TOOL: &'static str = "kern-csv-to-json";
    fn exit_code(&self) -> i32 {
        if self.status == "skipped" {
            1
        } else {
            0
        }
    }
}

impl KernCsvDoc {
    /// Is this a kernel report (one that carries `totals` and `top_kernels`)?
    pub fn is_kernel_report(&self) -> bool {
        KERNEL_REPORTS.contains(&self.report.as_str())
    }
}

/// Options of a conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernCsvOptions {
    /// Force the report (current or older name); the header must still match it.
    pub report: Option<String>,
    /// How many kernels `top_kernels` keeps (0 = all).
    pub top: usize,
    /// The capture time to record (RFC 3339), instead of the CSV file's mtime.
    pub captured_at: Option<String>,
}

impl Default for KernCsvOptions {
    fn default() -> Self {
        KernCsvOptions { report: None, top: DEFAULT_TOP, captured_at: None }
    }
}

/// Reports that get `totals` and `top_kernels`.
pub const KERNEL_REPORTS: &[&str] = &["cuda_gpu_kern_sum"];

/// A supported report: canonical name, older names, header (time columns written `Label (T)`).
pub struct ReportDef {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub header: &'static [&'static str],
}

/// Every report kern-csv-to-json understands (the header columns of nsys 2023.4 and 2025.3, which agree).
pub const REPORTS: &[ReportDef] = &[
    ReportDef {
        name: "cuda_gpu_kern_sum",
        aliases: &["gpukernsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "cuda_api_sum",
        aliases: &["cudaapisum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Num Calls",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "osrt_sum",
        aliases: &["osrtsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Num Calls",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "nvtx_sum",
        aliases: &["nvtxsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Style",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_pushpop_sum",
        aliases: &["nvtxppsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_startend_sum",
        aliases: &["nvtxsesum", "nvtxsssum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_kern_sum",
        aliases: &["nvtxkernsum"],
        header: &[
            "NVTX Range",
            "Style",
            "PID",
            "TID",
            "NVTX Inst",
            "Kern Inst",
            "Total Time (T)",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Kernel Name",
        ],
    },
    ReportDef {
        name: "nvtx_gpu_proj_sum",
        aliases: &[],
        header: &[
            "Range",
            "Style",
            "Total Proj Time (T)",
            "Total Range Time (T)",
            "Range Instances",
            "Proj Avg (T)",
            "Proj Med (T)",
            "Proj Min (T)",
            "Proj Max (T)",
            "Proj StdDev (T)",
            "Total GPU Ops",
            "Avg GPU Ops",
            "Avg Range Lvl",
            "Avg Num Child",
        ],
    },
    ReportDef {
        name: "cuda_gpu_mem_time_sum",
        aliases: &["gpumemtimesum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Count",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Operation",
        ],
    },
    ReportDef {
        name: "cuda_gpu_mem_size_sum",
        aliases: &["gpumemsizesum"],
        header: &["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"],
    },
    ReportDef {
        name: "cuda_kern_exec_sum",
        aliases: &["kernexecsum"],
        header: &[
            "PID",
            "TID",
            "DevId",
            "Count",
            "QCount",
            "TAvg (T)",
            "TMed (T)",
            "TMin (T)",
            "TMax (T)",
            "TStdDev (T)",
            "AAvg (T)",
            "AMed (T)",
            "AMin (T)",
            "AMax (T)",
            "AStdDev (T)",
            "QAvg (T)",
            "QMed (T)",
            "QMin (T)",
            "QMax (T)",
            "QStdDev (T)",
            "KAvg (T)",
            "KMed (T)",
            "KMin (T)",
            "KMax (T)",
            "KStdDev (T)",
            "API Name",
            "Kernel Name",
        ],
    },
    ReportDef {
        name: "cuda_api_trace",
        aliases: &["cudaapitrace"],
        header: &["Start (T)", "Duration (T)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri", "Thread Name"],
    },
    ReportDef {
        name: "cuda_gpu_trace",
        aliases: &["gputrace"],
        header: &[
            "Start (T)",
            "Duration (T)",
            "CorrId",
            "GrdX",
            "GrdY",
            "GrdZ",
            "BlkX",
            "BlkY",
            "BlkZ",
            "Reg/Trd",
            "StcSMem (MB)",
            "DymSMem (MB)",
            "Bytes (MB)",
            "Throughput (MB/s)",
            "SrcMemKd",
            "DstMemKd",
            "Device",
            "Ctx",
            "GreenCtx",
            "Strm",
            "Name",
        ],
    },
    ReportDef {
        name: "nvtx_pushpop_trace",
        aliases: &["nvtxpptrace"],
        header: &[
            "Start (T)",
            "End (T)",
            "Duration (T)",
            "DurChild (T)",
            "DurNonChild (T)",
            "Name",
            "PID",
            "TID",
            "Lvl",
            "NumChild",
            "RangeId",
            "ParentId",
            "RangeStack",
            "NameTree",
        ],
    },
];

const TEXT_COLUMNS: &[&str] = &[
    "Name",
    "Range",
    "Style",
    "Operation",
    "API Name",
    "Kernel Name",
    "NVTX Range",
    "RangeStack",
    "NameTree",
    "Thread Name",
    "SrcMemKd",
    "DstMemKd",
    "Device",
];
const FLOAT_COLUMNS: &[&str] = &["Avg GPU Ops", "Avg Range Lvl", "Avg Num Child"];
/// Time columns that are points in time, not durations (every other time column must not be negative).
const TIME_POINT_COLUMNS: &[&str] = &["Start", "End"];
/// Integer columns that count something (a negative value is refused).
const COUNT_COLUMNS: &[&str] = &[
    "Instances",
    "Num Calls",
    "Count",
    "QCount",
    "NVTX Inst",
    "Kern Inst",
    "Range Instances",
    "Total GPU Ops",
    "Lvl",
    "NumChild",
];

/// Look a report up by its current or older name.
pub fn find_report(name: &str) -> Option<&'static ReportDef> {
    REPORTS.iter().find(|r| r.name == name || r.aliases.contains(&name))
}

/// Every report name accepted by `--report` (current names, then older ones).
pub fn report_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = REPORTS.iter().map(|r| r.name).collect();
    v.extend(REPORTS.iter().flat_map(|r| r.aliases.iter().copied()));
    v
}

/// Read the input and convert it, the whole document in memory (the Nushell command's entry point for paths
/// and stdin). The binary streams instead: [`run_to_writer`].
pub fn run(input: &Input, opts: &KernCsvOptions) -> Result<KernCsvDoc> {
    let (mut src, name, mtime) = open_source(input)?;
    let mut p = prepare(&mut src, &name, input.path(), mtime, opts)?;
    let mut rows = Vec::new();
    let _ = for_each_row(&mut src, &p, &name, |r| {
        rows.push(r);
        Ok(())
    })?;
    p.doc.rows = rows;
    Ok(p.doc)
}

/// Convert the input and write the document to `out` exactly as [`crate::contract::render`] would print
/// [`run`]'s document, without holding the rows in memory: the input is first copied, once, to an anonymous
/// temporary file; a first pass over the copy checks every row (so an error is reported before anything is
/// written) and computes the kernel totals, a second pass over the same copy writes the rows. Returns the
/// document's exit code.
pub fn run_to_writer(input: &Input, opts: &KernCsvOptions, style: Style, out: &mut dyn Write) -> Result<i32> {
    let (mut src, name, mtime) = open_source(input)?;
    let p = prepare(&mut src, &name, input.path(), mtime, opts)?;
    let code = p.doc.exit_code();
    let head = crate::contract::render(&p.doc, style);
    let pretty = style.resolve_for_stdout() == Style::Pretty;
    let marker = if pretty { "\"rows\": []" } else { "\"rows\":[]" };
    let at = head.find(marker).expect("the document has an empty rows array") + marker.len() - 1;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
    let written = (|| -> std::io::Result<std::io::Result<()>> {
        w.write_all(&head.as_bytes()[..at])?;
        let mut n = 0usize;
        let r = for_each_row(&mut src, &p, &name, |row| {
            if n > 0 {
                w.write_all(b",")?;
            }
            if pretty {
                let text = serde_json::to_string_pretty(&row).expect("a row serialises");
                w.write_all(b"\n    ")?;
                w.write_all(text.replace('\n', "\n    ").as_bytes())?;
            } else {
                serde_json::to_writer(&mut w, &row).map_err(std::io::Error::other)?;
            }
            n += 1;
            Ok(())
        });
        let r = match r {
            Ok(r) => r,
            Err(e) => return Ok(Err(std::io::Error::other(e.message))),
        };
        r?;
        if pretty && n > 0 {
            w.write_all(b"\n  ")?;
        }
        w.write_all(&head.as_bytes()[at..])?;
        w.flush()?;
        Ok(Ok(()))
    })();
    match written {
        Ok(Ok(())) => Ok(code),
        Ok(Err(e)) => Err(Error::input(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        Err(e) => Err(Error::env(format!("cannot write to stdout: {e}"))),
    }
}

/// A private, seekable copy of the input (an anonymous temporary file, never beside the input): the input is
/// read exactly once, and every later pass reads the copy. Reading a file twice let a rewrite between the
/// passes publish totals that disagree with the rows, or fail after megabytes of partial JSON on stdout.
fn open_source(input: &Input) -> Result<(std::fs::File, String, Option<String>)> {
    let name = input.name();
    let spool = |r: &mut dyn Read| -> Result<std::fs::File> {
        let mut f =
            tempfile::tempfile().map_err(|e| Error::env(format!("{name}: cannot create a temporary file: {e}")))?;
        std::io::copy(r, &mut f).map_err(|e| Error::input(format!("{name}: cannot read: {e}")))?;
        Ok(f)
    };
    match input {
        Input::Stdin => Ok((spool(&mut std::io::stdin().lock())?, name, None)),
        Input::Path(p) => {
            let mut f = crate::contract::open_input(p)?;
            let m = f.metadata().map_err(|e| Error::input(format!("{name}: cannot read: {e}")))?;
            let mtime = m.modified().ok().map(rfc3339_utc);
            Ok((spool(&mut f)?, name, mtime))
        }
    }
}

/// Convert CSV bytes. `source` names the input in messages and in the document; `path` (when the input is a
/// file) lets the file name pick between reports that share a header; `mtime` is recorded as
/// `source_mtime_utc`.
pub fn convert(
    bytes: &[u8],
    source: &str,
    path: Option<&Path>,
    mtime: Option<String>,
    opts: &KernCsvOptions,
) -> Result<KernCsvDoc> {
    let mut cur = std::io::Cursor::new(bytes);
    let mut p = prepare(&mut cur, source, path, mtime, opts)?;
    let mut rows = Vec::new();
    let _ = for_each_row(&mut cur, &p, source, |r| {
        rows.push(r);
        Ok(())
    })?;
    p.doc.rows = rows;
    Ok(p.doc)
}

/// Everything of the document but its rows, and where the rows are.
struct Prepared {
    doc: KernCsvDoc,
    parsed: Vec<ParsedCol>,
    header: Vec<String>,
    /// Byte offset of the first data line, end of the report's section, and the first data line's number.
    rows_at: Option<(u64, u64, usize)>,
}

const BOM: &[u8] = "\u{feff}".as_bytes();

/// One report of the input (nsys's console output of several reports has one per `Processing` line).
struct SectionInfo {
    processing: Option<String>,
    first_line: usize,
    end: u64,
    /// Its first line that is not blank and not nsys console chatter: SKIPPED, or the CSV header.
    first: Option<(usize, u64, Option<String>)>,
}

/// Pass 0 (the lines: UTF-8, sections, header) and pass 1 (every row converted, kernel totals).
fn prepare<R: Read + Seek>(
    r: &mut R,
    source: &str,
    path: Option<&Path>,
    mtime: Option<String>,
    opts: &KernCsvOptions,
) -> Result<Prepared> {
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
    let io = |e: std::io::Error| Error::input(format!("{source}: cannot read: {e}"));
    // pass 0: split into sections line by line
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
    let section = pick_section(&sections, forced, source)?;

    let (schema, tool) = KernCsvDoc::header();
    let mut doc = KernCsvDoc {
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
    };

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

    let (def, name, how) = match (forced, candidates.as_slice()) {
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

/// Pass 2: the rows again, converted, in order, to `sink`. The outer error is the input's (it changed since
/// pass 1), the inner one the sink's.
fn for_each_row<R: Read + Seek>(
    r: &mut R,
    p: &Prepared,
    source: &str,
    mut sink: impl FnMut(Map<String, Value>) -> std::io::Result<()>,
) -> Result<std::io::Result<()>> {
    let Some((at, end, line)) = p.rows_at else { return Ok(Ok(())) };
    r.seek(SeekFrom::Start(at)).map_err(|e| Error::input(format!("{source}: cannot read: {e}")))?;
    let mut records = Records::new(BufReader::with_capacity(1 << 16, &mut *r), end - at, line);
    while let Some((line, rec)) = records.next_record().map_err(|e| e.into_error(source))? {
        let row = convert_row(&rec, line, &p.parsed, &p.header, source)?;
        if let Err(e) = sink(row) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

fn convert_row(
    rec: &[String],
    line: usize,
    parsed: &[ParsedCol],
    header: &[String],
    source: &str,
) -> Result<Map<String, Value>> {
    if rec.len() != header.len() {
        return Err(Error::input(format!(
            "{source}: line {line}: {} fields, the header has {}",
            rec.len(),
            header.len()
        )));
    }
    if rec.iter().all(|c| c.trim().is_empty()) {
        // a row of nulls would pass for data (nsys never writes one)
        return Err(Error::input(format!(
            "{source}: line {line}: every one of the {} fields is empty: not a row nsys writes (a damaged or hand-edited file)",
            rec.len()
        )));
    }
    let mut row = Map::new();
    for ((cell, col), h) in rec.iter().zip(parsed).zip(header) {
        let v = col
            .convert(cell)
            .map_err(|why| Error::input(format!("{source}: line {line}: column \"{h}\": {why}: {cell:?}")))?;
        row.insert(col.key.clone(), v);
    }
    Ok(row)
}

enum RecordError {
    Io(std::io::Error),
    /// A quoted field opened on this line is never closed.
    Unterminated(usize),
}

impl RecordError {
    fn into_error(self, source: &str) -> Error {
        match self {
            RecordError::Io(e) => Error::input(format!("{source}: cannot read: {e}")),
            RecordError::Unterminated(l) => Error::input(format!(
                "{source}: line {l}: unterminated quoted field: the quote opened on line {l} is never closed (it would swallow every following row)"
            )),
        }
    }
}

/// CSV records (RFC 4180 as nsys writes it, and as the `csv` crate reads it: a quote opens a quoted field
/// only at the start of a field, `""` inside it is a quote, a line break inside it is part of the field)
/// read one line at a time, each with the line it starts on. Blank lines are skipped. A CR before a line
/// break is dropped.
struct Records<R: BufRead> {
    r: std::io::Take<R>,
    /// The number of the next line, and the bytes consumed so far.
    line: usize,
    consumed: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    fn new(r: R, limit: u64, first_line: usize) -> Self {
        Records { r: r.take(limit), line: first_line, consumed: 0, buf: Vec::new() }
    }

    fn next_record(&mut self) -> std::result::Result<Option<(usize, Vec<String>)>, RecordError> {
        #[derive(PartialEq)]
        enum St {
            Start,
            Plain,
            Quoted,
            QuoteInQuoted,
        }
        loop {
            let start_line = self.line;
            let (mut fields, mut field, mut st, mut started) = (Vec::new(), String::new(), St::Start, false);
            loop {
                self.buf.clear();
                let k = self.r.read_until(b'\n', &mut self.buf).map_err(RecordError::Io)?;
                if k == 0 {
                    if !started {
                        return Ok(None);
                    }
                    if st == St::Quoted {
                        return Err(RecordError::Unterminated(start_line));
                    }
                    break;
                }
                started = true;
                self.consumed += k as u64;
                self.line += 1;
                let mut l: &[u8] = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                l = l.strip_suffix(b"\r").unwrap_or(l);
                let text = String::from_utf8_lossy(l);
                for c in text.chars() {
                    match (&st, c) {
                        (St::Start, '"') => st = St::Quoted,
                        (St::Start | St::Plain | St::QuoteInQuoted, ',') => {
                            fields.push(std::mem::take(&mut field));
                            st = St::Start;
                        }
                        (St::Start | St::Plain, c) => {
                            field.push(c);
                            st = St::Plain;
                        }
                        (St::Quoted, '"') => st = St::QuoteInQuoted,
                        (St::Quoted, c) => field.push(c),
                        (St::QuoteInQuoted, '"') => {
                            field.push('"');
                            st = St::Quoted;
                        }
                        (St::QuoteInQuoted, c) => {
                            field.push(c);
                            st = St::Plain;
                        }
                    }
                }
                if st == St::Quoted {
                    field.push('\n');
                    continue;
                }
                break;
            }
            fields.push(field);
            if fields.len() == 1 && fields[0].trim().is_empty() {
                continue; // a blank (or whitespace-only) line
            }
            return Ok(Some((start_line, fields)));
        }
    }
}

fn set_name(doc: &mut KernCsvDoc, def: &ReportDef, given: &str, how: &str) {
    doc.report = def.name.to_string();
    doc.report_alias = (given != def.name).then(|| given.to_string());
    doc.detected_from = how.to_string();
}

/// Lines nsys prints around a report on its console.
fn is_preamble(t: &str) -> bool {
    t.starts_with("Generating SQLite file ")
        || t.starts_with("Processing [")
        || t.starts_with("NOTICE:")
        || t.starts_with("Exporting ")
        || t.starts_with("Using ")
}

/// `Processing [x.sqlite] with [/…/reports/osrt_sum.py]...` → `osrt_sum`.
fn processing_report(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("Processing [")?;
    let i = rest.find("] with [")?;
    let script = &rest[i + "] with [".len()..];
    let script = &script[..script.find(']')?];
    let file = script.rsplit(['/', '\\']).next()?;
    Some(file.strip_suffix(".py").unwrap_or(file).to_string())
}

fn pick_section<'b>(sections: &'b [SectionInfo], forced: Option<&ReportDef>, source: &str) -> Result<&'b SectionInfo> {
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
fn report_from_file_name(path: &Path) -> Option<(&'static ReportDef, String)> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    TimeNs,
    Percent,
    Integer,
    Float,
    Megabytes,
    MegabytesPerS,
    Text,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::TimeNs => "time_ns",
            Kind::Percent => "percent",
            Kind::Integer => "integer",
            Kind::Float => "float",
            Kind::Megabytes => "megabytes",
            Kind::MegabytesPerS => "megabytes_per_s",
            Kind::Text => "text",
        }
    }
}

struct ParsedCol {
    signature: String,
    key: String,
    kind: Kind,
    /// (unit name, power of ten to nanoseconds)
    unit: Option<(&'static str, u32)>,
    /// A duration or a count: a negative value is refused (a share of −1 or 2 would follow from it).
    nonneg: bool,
}

const TIME_UNITS: &[(&str, &str, u32)] = &[
    ("ns", "ns", 0),
    ("nsec", "ns", 0),
    ("us", "us", 3),
    ("usec", "us", 3),
    ("ms", "ms", 6),
    ("msec", "ms", 6),
    ("s", "s", 9),
    ("sec", "s", 9),
];

fn parse_header(h: &str) -> ParsedCol {
    let h = h.trim();
    if let Some(open) = h.rfind(" (") {
        if let Some(unit) = h[open + 2..].strip_suffix(')') {
            let label = &h[..open];
            if let Some(&(_, u, p)) = TIME_UNITS.iter().find(|(n, _, _)| *n == unit) {
                return ParsedCol {
                    signature: format!("{label} (T)"),
                    key: format!("{}_ns", snake(label)),
                    kind: Kind::TimeNs,
                    unit: Some((u, p)),
                    nonneg: !TIME_POINT_COLUMNS.contains(&label),
                };
            }
            let (key, kind) = match unit {
                "%" => (format!("{}_pct", snake(label)), Kind::Percent),
                "MB" => (format!("{}_mb", snake(label)), Kind::Megabytes),
                "MB/s" => (format!("{}_mb_per_s", snake(label)), Kind::MegabytesPerS),
                _ => (snake(h), Kind::Text),
            };
            return ParsedCol { signature: h.to_string(), key, kind, unit: None, nonneg: false };
        }
    }
    let kind = if TEXT_COLUMNS.contains(&h) {
        Kind::Text
    } else if FLOAT_COLUMNS.contains(&h) {
        Kind::Float
    } else {
        Kind::Integer
    };
    ParsedCol { signature: h.to_string(), key: snake(h), kind, unit: None, nonneg: COUNT_COLUMNS.contains(&h) }
}

/// `Total Time` → `total_time`, `Reg/Trd` → `reg_per_trd`, `T-Pri` → `t_pri`.
fn snake(label: &str) -> String {
    let label = label.replace('/', " per ");
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

impl ParsedCol {
    fn convert(&self, cell: &str) -> std::result::Result<Value, String> {
        if cell.is_empty() {
            return Ok(Value::Null);
        }
        let int = |v: i64| -> std::result::Result<Value, String> {
            if self.nonneg && v < 0 {
                let what = if self.kind == Kind::TimeNs { "a duration" } else { "a count" };
                return Err(format!("negative: {what} cannot be below zero"));
            }
            Ok(Value::from(v))
        };
        Ok(match self.kind {
            Kind::Text => Value::String(cell.to_string()),
            Kind::TimeNs => {
                let (_, p) = self.unit.unwrap_or(("ns", 0));
                int(decimal_to_ns(cell.trim(), p).ok_or("not a decimal time, or beyond the 64-bit range of ns")?)?
            }
            Kind::Integer => {
                let t = cell.trim();
                int(t.parse::<i64>().map_err(|_| {
                    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
                    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                        "an integer beyond the 64-bit range"
                    } else {
                        "not an integer"
                    }
                })?)?
            }
            Kind::Percent | Kind::Float | Kind::Megabytes | Kind::MegabytesPerS => {
                let f: f64 = cell.trim().parse().map_err(|_| "not a number")?;
                if !f.is_finite() {
                    return Err("not a finite number".into());
                }
                Value::from(f)
            }
        })
    }
}

/// Scale decimal text by 10^pow exactly and round half away from zero: `1.2345` µs (pow 3) → 1235 ns.
pub fn decimal_to_ns(s: &str, pow: u32) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let p = pow as usize;
    let mut mag: i128 = 0;
    for b in int.bytes().chain(frac.bytes().chain(std::iter::repeat(b'0')).take(p)) {
        mag = mag.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    if frac.len() > p && frac.as_bytes()[p] >= b'5' {
        mag += 1;
    }
    let v = if neg { -mag } else { mag };
    i64::try_from(v).ok()
}

/// Kernel totals and the top kernels, one row at a time (ties keep CSV order); only the top candidates are
/// kept. Sums are checked: one that overflows is an input error naming the line and column, never a
/// saturated total.
struct Summary {
    top: usize,
    total: i64,
    instances: u64,
    kernels: u64,
    cands: Vec<Cand>,
    /// The CSV header of each key the summary reads (for messages).
    headers: std::collections::HashMap<String, String>,
}

struct Cand {
    index: usize,
    line: usize,
    name: String,
    total: i64,
    instances: i64,
    rest: [Option<i64>; 5],
    time_pct: f64,
}

const REST: [&str; 5] = ["avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"];

impl Summary {
    fn new(top: usize, parsed: &[ParsedCol], header: &[String]) -> Summary {
        let headers = parsed.iter().zip(header).map(|(c, h)| (c.key.clone(), h.clone())).collect();
        Summary { top, total: 0, instances: 0, kernels: 0, cands: Vec::new(), headers }
    }

    /// The message prefix naming `line` and the column of `key`.
    fn at(&self, source: &str, line: usize, key: &str) -> String {
        let h = self.headers.get(key).map(String::as_str).unwrap_or(key);
        format!("{source}: line {line}: column \"{h}\"")
    }

    fn add(&mut self, row: &Map<String, Value>, i: usize, line: usize, source: &str) -> Result<()> {
        let int = |k: &str| -> Result<i64> {
            row.get(k).and_then(|v| v.as_i64()).ok_or_else(|| {
                Error::input(format!("{}: empty (a kernel report needs it in every row)", self.at(source, line, k)))
            })
        };
        let total = int("total_time_ns")?;
        let instances = int("instances")?;
        self.total = self.total.checked_add(total).ok_or_else(|| {
            Error::input(format!(
                "{}: {total}: the sum of the total times overflows (beyond {} ns); nothing was written",
                self.at(source, line, "total_time_ns"),
                i64::MAX
            ))
        })?;
        let inst = u64::try_from(instances)
            .map_err(|_| Error::input(format!("{}: negative: {instances}", self.at(source, line, "instances"))))?;
        self.instances = self.instances.checked_add(inst).ok_or_else(|| {
            Error::input(format!(
                "{}: {instances}: the sum of the instances overflows (beyond {}); nothing was written",
                self.at(source, line, "instances"),
                u64::MAX
            ))
        })?;
        self.kernels += 1;
        self.cands.push(Cand {
            index: i,
            line,
            name: row.get("name").and_then(|v| v.as_str()).unwrap_or("").to_string(),
            total,
            instances,
            rest: REST.map(|k| row.get(k).and_then(|v| v.as_i64())),
            time_pct: row.get("time_pct").and_then(|v| v.as_f64()).unwrap_or(0.0),
        });
        if self.top > 0 && self.cands.len() >= 2 * self.top.max(64) {
            self.sort();
            self.cands.truncate(self.top);
        }
        Ok(())
    }

    fn sort(&mut self) {
        self.cands.sort_by_key(|c| (std::cmp::Reverse(c.total), c.index));
    }

    fn finish(mut self, source: &str) -> Result<(KernelTotals, Vec<StatsTopKernel>)> {
        self.sort();
        let n = if self.top == 0 { self.cands.len() } else { self.top.min(self.cands.len()) };
        let mut out = Vec::with_capacity(n);
        for (rank, c) in std::mem::take(&mut self.cands).into_iter().take(n).enumerate() {
            let mut rest = [0i64; 5];
            for (j, v) in c.rest.iter().enumerate() {
                rest[j] = v.ok_or_else(|| {
                    Error::input(format!(
                        "{}: empty (a kernel report needs it in every row)",
                        self.at(source, c.line, REST[j])
                    ))
                })?;
            }
            out.push(StatsTopKernel {
                rank: rank as u64 + 1,
                name: c.name,
                total_time_ns: c.total,
                instances: c.instances,
                avg_ns: rest[0],
                med_ns: rest[1],
                min_ns: rest[2],
                max_ns: rest[3],
                stddev_ns: rest[4],
                time_pct: c.time_pct,
                share: if self.total > 0 { c.total as f64 / self.total as f64 } else { 0.0 },
            });
        }
        Ok((KernelTotals { kernels: self.kernels, instances: self.instances, total_time_ns: self.total }, out))
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (a `t`/`z` or a space separator is accepted, as RFC 3339 allows).
pub fn is_rfc3339(t: &str) -> bool {
    let re = regex::Regex::new(
        r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt ]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$",
    )
    .expect("a valid regex");
    re.is_match(t)
}

pub use crate::contract::rfc3339_utc;

#[cfg(test)]
mod tests {
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
            processing_report("Processing [a.sqlite] with [/usr/lib/nsight-systems/reports/osrt_sum.py]... ")
                .as_deref(),
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
                let (_, got) =
                    ours.next_record().ok().flatten().unwrap_or_else(|| panic!("{}: ends early", p.display()));
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
}
