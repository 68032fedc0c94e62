//! What every binary's `main` shares: output flags, printing one document, exit codes, errors on stderr.

use std::io::Write;

use super::{render, Document, Error, Style};

/// `--pretty` / `--compact`, flattened into every binary's arguments.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct OutputArgs {
    /// Pretty-print the JSON (default on a terminal)
    #[arg(long, conflicts_with = "compact")]
    pub pretty: bool,
    /// One-line JSON (default when stdout is not a terminal)
    #[arg(long)]
    pub compact: bool,
}

impl OutputArgs {
    pub fn style(&self) -> Style {
        if self.pretty {
            Style::Pretty
        } else if self.compact {
            Style::Compact
        } else {
            Style::Auto
        }
    }
}

/// Report an error the nsyskit way: `TOOL: message` on stderr; returns its exit code (2).
pub fn report_error(tool: &str, e: &Error) -> i32 {
    eprintln!("{tool}: error: {}", e.message);
    e.exit_code()
}

/// Print a document on stdout and return its exit code, or report the error.
pub fn emit<T: Document>(tool: &str, result: Result<T, Error>, style: Style) -> i32 {
    match result {
        Ok(doc) => {
            let text = render(&doc, style);
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return doc.exit_code();
                }
                return report_error(tool, &Error::env(format!("cannot write to stdout: {e}")));
            }
            doc.exit_code()
        }
        Err(e) => report_error(tool, &e),
    }
}

/// Run a binary's body: installs a panic hook that prints one line (no backtrace), then exits with the code
/// the body returns. A panic is a bug in nsyskit; it exits 2 with a one-line message.
pub fn main_with(tool: &'static str, body: impl FnOnce() -> i32) -> ! {
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("{tool}: internal error (a bug in nsyskit, please report it): {msg}{at}");
    }));
    // a panic (already reported by the hook) exits 2
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(2);
    std::process::exit(code)
}

/// Parse arguments with clap; usage errors exit 2 (clap's convention), `--help`/`--version` exit 0.
pub fn parse_args<A: clap::Parser>() -> A {
    A::parse()
}
