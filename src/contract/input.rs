use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Error, Result};

/// Where a tool reads its input: a path, or standard input (`-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Path(PathBuf),
    Stdin,
}

impl Input {
    /// `-` is standard input, anything else a path.
    pub fn parse(arg: &str) -> Input {
        if arg == "-" {
            Input::Stdin
        } else {
            Input::Path(PathBuf::from(arg))
        }
    }

    /// The name used in messages: the path as given, or `<stdin>`.
    pub fn name(&self) -> String {
        match self {
            Input::Path(p) => p.display().to_string(),
            Input::Stdin => "<stdin>".to_string(),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            Input::Path(p) => Some(p),
            Input::Stdin => None,
        }
    }

    /// Read all bytes; a missing file, a folder or an unreadable file is an input error naming the path.
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        match self {
            Input::Path(p) => read_file(p),
            Input::Stdin => {
                let mut buf = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut buf)
                    .map_err(|e| Error::input(format!("<stdin>: cannot read: {e}")))?;
                Ok(buf)
            }
        }
    }
}

/// Read a whole file, with errors that name it (a FIFO never hangs; a directory or device is refused).
pub fn read_file(p: &Path) -> Result<Vec<u8>> {
    super::paths::read_input(p)
}

/// The environment variable that bounds a JSON input's size in bytes ([`json_max_bytes`]).
pub const JSON_MAX_BYTES_ENV: &str = "NSYSKIT_JSON_MAX_BYTES";

/// The default bound of a JSON input: 1 GiB. A parsed document takes several times its text (about 8× for
/// bundle-merge, see docs/bundle-merge.md), so a larger one would need many GiB of memory.
pub const JSON_MAX_BYTES_DEFAULT: u64 = 1 << 30;

/// The most bytes a JSON reader reads: `$NSYSKIT_JSON_MAX_BYTES` (a positive integer), else 1 GiB. A value
/// that is not a positive integer is a usage error naming the variable.
pub fn json_max_bytes() -> Result<u64> {
    match std::env::var_os(JSON_MAX_BYTES_ENV) {
        None => Ok(JSON_MAX_BYTES_DEFAULT),
        Some(v) => match v.to_str().and_then(|s| s.trim().parse::<u64>().ok()).filter(|&n| n > 0) {
            Some(n) => Ok(n),
            None => Err(Error::usage(format!(
                "{JSON_MAX_BYTES_ENV}={}: expected a positive number of bytes",
                v.to_string_lossy()
            ))),
        },
    }
}

fn over_bound(name: &str, size: Option<u64>, max: u64) -> Error {
    let size = match size {
        Some(n) => format!("is {n} bytes"),
        None => "holds more".to_string(),
    };
    Error::input(format!(
        "{name}: {size}, over the JSON input bound of {max} bytes ({JSON_MAX_BYTES_ENV}; default 1 GiB): not parsed"
    ))
}

/// Read at most `max` bytes; more is the input error [`over_bound`].
fn read_bounded(r: impl Read, name: &str, max: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Error::input(format!("{name}: cannot read: {e}")))?;
    if buf.len() as u64 > max {
        return Err(over_bound(name, None, max));
    }
    Ok(buf)
}

impl Input {
    /// [`Input::read_bytes`] for a JSON reader, bounded by [`json_max_bytes`]: a regular file over the bound is
    /// refused by its size before anything is read, a stream once it passes the bound (exit 2, naming the input
    /// and the bound).
    pub fn read_json_bytes(&self) -> Result<Vec<u8>> {
        let max = json_max_bytes()?;
        match self {
            Input::Path(p) => read_json_file(p, max),
            Input::Stdin => read_bounded(std::io::stdin().lock(), "<stdin>", max),
        }
    }
}

/// A JSON file bounded by `max` bytes (see [`Input::read_json_bytes`]).
pub fn read_json_file(p: &Path, max: u64) -> Result<Vec<u8>> {
    let f = super::paths::open_input(p)?;
    let name = p.display().to_string();
    if let Ok(m) = f.metadata() {
        if m.is_file() && m.len() > max {
            return Err(over_bound(&name, Some(m.len()), max));
        }
    }
    read_bounded(f, &name, max)
}

/// One JSON document of a stream, with where it started (1-based line) for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonDoc {
    pub value: serde_json::Value,
    pub line: usize,
}

/// Parse a stream of JSON documents: one document, concatenated documents, or NDJSON. Whitespace-only input
/// is an empty stream. A syntax error names the source, line and column.
pub fn parse_json_stream(bytes: &[u8], source: &str) -> Result<Vec<JsonDoc>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        Error::input(format!("{source}: line {line}: not UTF-8 text"))
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<super::StrictValue>();
    loop {
        // where the next document starts: skip whitespace from the current offset
        let offset = stream.byte_offset();
        let rest = &text[offset..];
        let skipped = rest.len() - rest.trim_start().len();
        let start_line = 1 + text[..offset + skipped].matches('\n').count();
        match stream.next() {
            None => break,
            Some(Ok(super::StrictValue(value))) => out.push(JsonDoc { value, line: start_line }),
            Some(Err(e)) if super::json::duplicate_key_path(&e.to_string()).is_some() => {
                return Err(Error::input(format!(
                    "{source}: line {} column {}: {}",
                    e.line(),
                    e.column(),
                    strip_position(&e.to_string())
                )))
            }
            Some(Err(e)) => {
                return Err(Error::input(format!(
                    "{source}: line {} column {}: not valid JSON: {}",
                    e.line(),
                    e.column(),
                    strip_position(&e.to_string())
                )))
            }
        }
    }
    Ok(out)
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_of_documents() {
        let docs = parse_json_stream(b"{\"a\":1}\n{\"b\":2}{\"c\":3}\n\n", "x").unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1].line, 2);
        assert_eq!(docs[2].value["c"], 3);
        assert!(parse_json_stream(b"  \n", "x").unwrap().is_empty());
        let bom = parse_json_stream("\u{feff}[1]".as_bytes(), "x").unwrap();
        assert_eq!(bom[0].value, serde_json::json!([1]));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse_json_stream(b"{\"a\":1}\n{\"b\":}\n", "in.json").unwrap_err();
        assert!(e.message.starts_with("in.json: line 2 column 6: not valid JSON"), "{}", e.message);
        let e = parse_json_stream(b"\n\xff", "bin").unwrap_err();
        assert_eq!(e.message, "bin: line 2: not UTF-8 text");
    }

    #[test]
    fn missing_and_directory_inputs() {
        let e = Input::parse("/nonexistent/x.json").read_bytes().unwrap_err();
        assert_eq!(e.message, "/nonexistent/x.json: no such file");
        let e = Input::parse("/").read_bytes().unwrap_err();
        assert!(e.message.contains("is a directory"));
    }
}
