//! The tools layer: each tool's whole run, written once for both adapters (the binaries in `bins/` and the
//! Nushell commands in `nu-plugin/`).
//!
//! A tool is one function, `tools::<tool>::run(args, &Invocation) -> Result<Outcome>`:
//! - `args` are the tool's flags as its clap definition in [`crate::flags`] parses them: the binary parses its
//!   argv, the Nushell command builds the same argv from its call (paths made absolute against Nushell's
//!   current folder) and parses it with the same definition;
//! - [`Invocation`] is all that differs between the two adapters: the user's environment (the process's, or
//!   Nushell's `$env`), the current folder, what standard input holds, whether progress may be drawn, and an
//!   interrupt raised by Nushell's Ctrl-C;
//! - [`Outcome`] is what the run produced: the document (or text) for stdout, the lines it says on stderr,
//!   and its exit code (0 ok, 1 RETRY / not comparable / would change).
//!
//! Everything a tool decides (its inputs, the serve-capture refusal of an unfinished run, the `--iterations`
//! window, RETRY versus document, which nsys exports a report, the files it writes beside its document) is in
//! its run; an adapter only turns an [`Outcome`] into bytes on stdout or a Nushell value, and an
//! [`crate::contract::Error`] into exit 2 or a labelled Nushell error.

pub mod bundle_merge;
pub mod capture_compare;
pub mod gate_check;
pub mod kern_csv_to_json;
pub mod nsys_resolve;
pub mod nvtx_readiness;
pub mod report;
pub mod serve_capture;
pub mod sqlite_ranges;
pub mod step_budget;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::contract::cli::report_error;
use crate::contract::{render, Document, Error, Result, Style};

/// What a tool's run reads from whoever runs it.
pub struct Invocation<'a> {
    /// The user's environment: the process's for a binary, Nushell's `$env` for a Nushell command (the
    /// plugin process's own environment is not the user's once they change `$env`).
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    /// The user's current folder, for what the run starts (serve-capture's server); `None`: the process's.
    pub cwd: Option<PathBuf>,
    /// What `-` (or no input argument) reads.
    pub stdin: Stdin,
    /// Progress lines may be drawn on stderr (a terminal).
    pub progress: bool,
    /// Set by the adapter when the user interrupts (Nushell's Ctrl-C arrives through the plugin protocol);
    /// `None`: the run handles the process's own signals.
    pub stop: Option<crate::serve_capture::StopFlag>,
    /// `env` is this process's own environment (a binary): a library that reads the environment itself (kube's
    /// client configuration) may then be left to do so.
    pub own_env: bool,
}

/// Standard input as a tool sees it.
pub enum Stdin {
    /// The process's standard input (a binary).
    Process,
    /// Bytes the adapter already holds (Nushell's pipeline input as text), and how messages name them.
    Bytes(Vec<u8>, String),
    /// Documents the adapter already holds (Nushell's pipeline records), each with how messages name it.
    Values(Vec<(serde_json::Value, String)>),
    /// Nothing: `-` is a usage error (a Nushell command takes its input as an argument or a record).
    None,
}

impl Invocation<'_> {
    /// A variable of the user's environment; an empty value counts as unset.
    pub fn var(&self, name: &str) -> Option<OsString> {
        (self.env)(name).filter(|v| !v.is_empty())
    }
    /// A variable as it is, empty included (an empty `CUDA_VISIBLE_DEVICES` hides every GPU).
    pub fn var_raw(&self, name: &str) -> Option<OsString> {
        (self.env)(name)
    }
    /// A relative path given by the user, made absolute against the user's current folder ([`Invocation::cwd`]).
    pub fn path(&self, p: &str) -> String {
        match &self.cwd {
            Some(cwd) if !Path::new(p).is_absolute() => cwd.join(p).display().to_string(),
            _ => p.to_string(),
        }
    }
    /// The host of a binary: this process's environment, folder, standard input and signals.
    pub fn process() -> Invocation<'static> {
        use std::io::IsTerminal;
        Invocation {
            env: &|n| std::env::var_os(n),
            cwd: None,
            stdin: Stdin::Process,
            progress: std::io::stderr().is_terminal(),
            stop: None,
            own_env: true,
        }
    }
    /// Refuse `-` unless it reads the process's own standard input (a binary's).
    pub fn stdin_allowed(&self, what: &str) -> Result<()> {
        match self.stdin {
            Stdin::Process => Ok(()),
            _ => Err(Error::usage(format!(
                "{what} -: standard input is not read here; give a path (or pipe a record in where the command takes one)"
            ))
            .with_arg(what)),
        }
    }
}

/// What a run produced.
pub struct Outcome {
    pub output: Output,
    /// Lines for stderr, each printed as `TOOL: line` (a RETRY's reason, a truncated trace, a removed temp file).
    pub say: Vec<String>,
    /// 0 ok, 1 RETRY / not comparable / would change; a tool's own code otherwise (never 2: that is an error).
    pub exit: i32,
    /// `--pretty` / `--compact` (the Nushell adapter ignores it).
    pub style: Style,
    /// A text for stderr as it is, after the lines (bundle-merge --stdout: its summary document); a binary
    /// prints it, a Nushell command (whose value is the output) does not.
    pub stderr: Option<String>,
}

/// The part of an [`Outcome`] that goes to stdout.
pub enum Output {
    /// One nsyskit document.
    Doc(Box<dyn Emit>),
    /// A JSON text to print as it is (bundle-merge --stdout: the merged bundle).
    Json(String),
    /// Plain text (sqlite-ranges --format table).
    Text(String),
    /// A document written while it is computed (kern-csv-to-json streams its rows: a large trace report is
    /// never held in memory); returns the exit code.
    Stream(StreamWriter),
    /// Rows, one JSON object each (`step-budget --steps`: one per step): NDJSON for a binary (one compact
    /// object per line, whatever the style), a list of records (a table) for Nushell.
    Rows(Box<dyn EmitRows>),
}

/// What [`Output::Rows`] holds: rows written one by one, never as one document.
pub trait EmitRows {
    /// Each row as one line of compact JSON.
    fn write_ndjson(&self, out: &mut dyn Write) -> std::io::Result<()>;
    /// Each row as a JSON value.
    fn to_json(&self) -> Vec<serde_json::Value>;
}

impl<T: Serialize> EmitRows for Vec<T> {
    fn write_ndjson(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(out);
        for row in self {
            serde_json::to_writer(&mut w, row)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    }
    fn to_json(&self) -> Vec<serde_json::Value> {
        self.iter().map(Emit::to_json).collect()
    }
}

/// What [`Output::Stream`] runs: writes the document, returns the exit code.
pub type StreamWriter = Box<dyn FnOnce(&mut dyn Write) -> Result<i32>>;

/// A document as both adapters use it: rendered JSON text (the binary) or a JSON value (Nushell).
pub trait Emit {
    fn render(&self, style: Style) -> String;
    fn to_json(&self) -> serde_json::Value;
}

impl<T: Serialize> Emit for T {
    fn render(&self, style: Style) -> String {
        render(self, style)
    }
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|e| serde_json::Value::String(format!("unserialisable: {e}")))
    }
}

impl Outcome {
    /// A document, its exit code its own ([`Document::exit_code`]).
    pub fn doc<T: Document + 'static>(doc: T, style: Style) -> Outcome {
        let exit = doc.exit_code();
        Outcome { output: Output::Doc(Box::new(doc)), say: Vec::new(), exit, style, stderr: None }
    }
    /// Rows ([`Output::Rows`]) with the exit code of the document they come from.
    pub fn rows(rows: Box<dyn EmitRows>, exit: i32, style: Style) -> Outcome {
        Outcome { output: Output::Rows(rows), say: Vec::new(), exit, style, stderr: None }
    }
    /// Add a line for stderr.
    pub fn saying(mut self, line: impl Into<String>) -> Outcome {
        self.say.push(line.into());
        self
    }
}

/// A binary's `main`: parse the flags, run the tool on this process's host, print the outcome, exit with its
/// code (2 with one line on stderr for an error, and for a panic).
pub fn main<A: clap::Parser>(tool: &'static str, run: fn(A, &Invocation) -> Result<Outcome>) -> ! {
    crate::contract::cli::main_with(tool, || {
        let args = crate::contract::cli::parse_or_exit::<A>();
        match run(args, &Invocation::process()) {
            Ok(outcome) => print(tool, outcome),
            Err(e) => report_error(tool, &e),
        }
    })
}

/// Print an outcome the binary way: its lines on stderr, its output on stdout; returns the exit code.
pub fn print(tool: &str, o: Outcome) -> i32 {
    for line in &o.say {
        eprintln!("{tool}: {line}");
    }
    if let Some(text) = &o.stderr {
        eprint!("{text}");
    }
    let mut out = std::io::stdout().lock();
    let written = match o.output {
        Output::Doc(doc) => out.write_all(doc.render(o.style).as_bytes()),
        Output::Json(text) | Output::Text(text) => out.write_all(text.as_bytes()),
        Output::Rows(rows) => rows.write_ndjson(&mut out),
        Output::Stream(write) => match write(&mut out) {
            Ok(code) => return code,
            Err(e) => return report_error(tool, &e),
        },
    };
    match written.and_then(|_| out.flush()) {
        Ok(()) => o.exit,
        // a reader that stopped early (`| head`) is not an error of the tool
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => o.exit,
        Err(e) => report_error(tool, &Error::env(format!("cannot write to stdout: {e}"))),
    }
}

/// The nsys that exports a report among `inputs`: `--nsys` when given, else (only when an input is an
/// `.nsys-rep`) the one resolved from the user's environment as `nsys-resolve` does (`NSYS_BIN`, `PATH`,
/// install folders), verified, not probed. `None` when no input is a report.
pub fn nsys_for(explicit: Option<&Path>, inputs: &[&Path], host: &Invocation) -> Result<Option<PathBuf>> {
    if let Some(p) = explicit {
        return Ok(Some(p.to_path_buf()));
    }
    // a report that is not there is the reader's error to name, not a reason to look for nsys
    if !inputs.iter().any(|p| crate::export::capture::is_report(p) && p.is_file()) {
        return Ok(None);
    }
    let opts = crate::nsys_resolve::ResolveOptions {
        probe: false,
        ..crate::nsys_resolve::ResolveOptions::from_vars(host.env)
    };
    crate::nsys_resolve::resolve(&opts)
        .map(|r| Some(r.path))
        .map_err(|e| e.context("cannot export the .nsys-rep (or give the .sqlite export)"))
}

/// Refuse every input that lies in a serve-capture run folder that never reached a terminal state: its files
/// are not evidence (docs/serve-capture.md). `-` and files outside a run pass.
pub fn refuse_unfinished(inputs: &[(&Path, &str)]) -> Result<()> {
    for (p, arg) in inputs {
        crate::serve_capture::refuse_unfinished(p).map_err(|e| e.with_arg(*arg))?;
    }
    Ok(())
}

/// Run `f` on the SQLite export that standard input holds, copied into a temporary file (deleted after);
/// `rename` makes the document name it `<stdin>`.
pub fn on_stdin_export<T>(
    host: &Invocation,
    what: &str,
    f: impl FnOnce(&Path) -> Result<T>,
    rename: impl FnOnce(&mut T),
) -> Result<T> {
    let copy = match &host.stdin {
        Stdin::Process => crate::export::StdinCopy::read()?,
        Stdin::Bytes(bytes, _) => crate::export::StdinCopy::from_bytes(bytes)?,
        Stdin::Values(_) | Stdin::None => {
            return Err(Error::usage(format!(
                "{what} -: standard input is not read here; give the path of the .sqlite export"
            ))
            .with_arg(what))
        }
    };
    let mut t = copy.run(f)?;
    rename(&mut t);
    Ok(t)
}
