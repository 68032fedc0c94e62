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

/// [`parse_args`], and for an unknown flag that clap finds no close spelling of, the flag that holds it as a
/// word (`--prefix` → `--range-prefix`, `--step-label` → `--step`): clap's own suggestion goes by edit distance and
/// says nothing there (it offered only "use '-- --prefix'").
pub fn parse_or_exit<A: clap::Parser>() -> A {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match A::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let hint = (e.kind() == ErrorKind::UnknownArgument && e.get(ContextKind::SuggestedArg).is_none())
                .then(|| match e.get(ContextKind::InvalidArg) {
                    Some(ContextValue::String(s)) => suggest_flag(&A::command(), s),
                    _ => None,
                })
                .flatten();
            let _ = e.print();
            if let Some(h) = hint {
                eprintln!("\n  tip: did you mean '{h}'?");
            }
            std::process::exit(e.exit_code())
        }
    }
}

/// The long flag of `cmd` that holds the unknown `given` (`--prefix=x`, `--prefix`) as a whole word, or that it
/// holds, the shortest first; None when there is none or `given` is shorter than 3 letters.
pub fn suggest_flag(cmd: &clap::Command, given: &str) -> Option<String> {
    let g = given.trim_start_matches('-').split('=').next().unwrap_or("").to_ascii_lowercase();
    if g.len() < 3 {
        return None;
    }
    let words = |s: &str| s.split('-').map(str::to_string).collect::<Vec<_>>();
    let gw = words(&g);
    let mut hits: Vec<&str> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| {
            let lw = words(l);
            // every word of one is a word of the other: `prefix` in `range-prefix`, `step` in `step-label`
            gw.iter().all(|w| lw.contains(w)) || lw.iter().all(|w| gw.contains(w))
        })
        .collect();
    hits.sort_by_key(|l| (l.len(), l.to_string()));
    hits.first().map(|l| format!("--{l}"))
}

/// The values of `T`'s flags when none is given: their clap defaults. `T` has no required argument (every
/// caller is one of this crate's option structs; a unit test parses each).
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = cmd.try_get_matches_from(std::iter::empty::<&str>());
    match matches.and_then(|m| T::from_arg_matches(&m)) {
        Ok(t) => t,
        // a required flag in a struct with defaults: a bug caught by the unit tests of crate::flags
        Err(e) => unreachable!("defaults of an option struct: {e}"),
    }
}
