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

mod columns;
mod doc;
mod records;
mod reports;
mod sections;
mod summary;

pub use columns::decimal_to_ns;
use columns::*;
pub use doc::*;
use records::*;
pub use reports::*;
use sections::*;
use summary::*;

/// Read the input and convert it, the whole document in memory (the Nushell command's entry point for paths
/// and stdin). The binary streams instead: [`run_to_writer`].
pub fn run(input: &Input, opts: &KernCsvOptions) -> Result<KernCsvToJsonDoc> {
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
) -> Result<KernCsvToJsonDoc> {
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
mod tests;
