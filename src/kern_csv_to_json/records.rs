//! A CSV record reader that knows line numbers (for messages) and where a section ends.

use super::*;

pub(super) enum RecordError {
    Io(std::io::Error),
    /// A quoted field opened on this line is never closed.
    Unterminated(usize),
}

impl RecordError {
    pub(super) fn into_error(self, source: &str) -> Error {
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
pub(super) struct Records<R: BufRead> {
    pub(super) r: std::io::Take<R>,
    /// The number of the next line, and the bytes consumed so far.
    pub(super) line: usize,
    pub(super) consumed: u64,
    pub(super) buf: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    pub(super) fn new(r: R, limit: u64, first_line: usize) -> Self {
        Records { r: r.take(limit), line: first_line, consumed: 0, buf: Vec::new() }
    }

    pub(super) fn next_record(&mut self) -> std::result::Result<Option<(usize, Vec<String>)>, RecordError> {
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
