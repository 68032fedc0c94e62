//! What every command shares: reading arguments, paths relative to Nushell's current directory, turning a
//! library result into a Nushell value and an nsyskit [`Error`] into a [`LabeledError`] at the right span.

use std::path::{Path, PathBuf};

use nsyskit::contract::{Error, ErrorKind};
use nu_plugin::{EngineInterface, EvaluatedCall};
use nu_protocol::{Category, LabeledError, ShellError, Signature, Span, Spanned, Value};

use crate::convert::json_to_nu;

/// The category every nsyskit command is listed under (`help commands | where category == nsyskit`).
pub fn category() -> Category {
    Category::Custom("nsyskit".into())
}

fn normalise(name: &str) -> String {
    name.trim_start_matches('-').trim_matches(|c| c == '<' || c == '>').to_ascii_lowercase().replace('_', "-")
}

/// The span of the argument an nsyskit error names (`Error::arg`: `--window`, `EXPORT`, …): a flag's value
/// (or the flag itself for a switch), a positional by its signature name (all rest arguments for the rest
/// parameter), the pipeline input for `stdin`/`input`/`-`; the command's head when it names nothing known.
pub fn span_of_arg(arg: Option<&str>, call: &EvaluatedCall, sig: &Signature, input: Option<Span>) -> Span {
    let Some(arg) = arg else { return call.head };
    let wanted = normalise(arg);
    if matches!(wanted.as_str(), "stdin" | "input" | "" | "pipeline") {
        return input.unwrap_or(call.head);
    }
    if arg.starts_with('-') || sig.named.iter().any(|f| f.long == wanted) {
        for (name, value) in &call.named {
            if normalise(&name.item) == wanted {
                return value.as_ref().map(|v| v.span()).unwrap_or(name.span);
            }
        }
    }
    let positionals: Vec<_> = sig.required_positional.iter().chain(sig.optional_positional.iter()).collect();
    if let Some(i) = positionals.iter().position(|p| normalise(&p.name) == wanted) {
        if let Some(v) = call.positional.get(i) {
            return v.span();
        }
    }
    if let Some(rest) = &sig.rest_positional {
        if normalise(&rest.name) == wanted && call.positional.len() > positionals.len() {
            return Span::merge_many(call.positional[positionals.len()..].iter().map(|v| v.span()));
        }
    }
    // the positional was not given (input came from the pipeline)
    input.unwrap_or(call.head)
}

/// The span an error without `arg` points at: unusable input is about the first positional (the file the
/// command reads) or else the pipeline input; anything else is about the command as a whole.
fn default_span(e: &Error, call: &EvaluatedCall, input: Option<Span>) -> Span {
    match e.kind {
        ErrorKind::Input => call.positional.first().map(|v| v.span()).or(input).unwrap_or(call.head),
        _ => call.head,
    }
}

/// An nsyskit error as a Nushell error pointing at the offending argument.
pub fn labeled(e: Error, call: &EvaluatedCall, sig: &Signature, input: Option<Span>) -> LabeledError {
    let span = match e.arg.as_deref() {
        Some(arg) => span_of_arg(Some(arg), call, sig, input),
        None => default_span(&e, call, input),
    };
    labeled_at(e, span)
}

/// An nsyskit error as a Nushell error pointing at `span`.
pub fn labeled_at(e: Error, span: Span) -> LabeledError {
    let (code, label) = match e.kind {
        ErrorKind::Usage => ("nsyskit::usage", "bad argument"),
        ErrorKind::Input => ("nsyskit::input", "unusable input"),
        ErrorKind::Environment => ("nsyskit::environment", "environment failure"),
    };
    let label = match &e.arg {
        Some(arg) => format!("{label} ({arg})"),
        None => label.to_string(),
    };
    LabeledError::new(e.message).with_code(code).with_label(label, span)
}

/// A path argument, relative to Nushell's current directory (the plugin process runs elsewhere).
pub fn resolve_path(engine: &EngineInterface, path: &str) -> Result<PathBuf, ShellError> {
    let p = Path::new(path);
    if p.is_absolute() || path == "-" {
        return Ok(p.to_path_buf());
    }
    let expanded = if let Some(rest) = path.strip_prefix("~/") {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest))
    } else {
        None
    };
    match expanded {
        Some(p) => Ok(p),
        None => Ok(PathBuf::from(engine.get_current_dir()?).join(p)),
    }
}

/// An optional string flag with its span.
pub fn flag_str(call: &EvaluatedCall, name: &str) -> Result<Option<Spanned<String>>, ShellError> {
    match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => Ok(None),
        Some(v) => {
            let span = v.span();
            Ok(Some(Spanned { item: v.coerce_into_string()?, span }))
        }
    }
}

/// A JSON-document argument given as a path (a string: resolved against the current directory) or as a
/// Nushell record/list (written, durations and filesizes as integers, to `<name>.json` in a temporary folder
/// that lives as long as the returned guard), for library functions that read a document from a path.
pub fn doc_arg(
    engine: &EngineInterface,
    value: &Value,
    name: &str,
) -> Result<(PathBuf, Option<tempfile::TempDir>), LabeledError> {
    match value {
        Value::String { val, .. } | Value::Glob { val, .. } => Ok((resolve_path(engine, val)?, None)),
        Value::Record { .. } | Value::List { .. } => {
            let json = crate::convert::nu_to_json(value)?;
            let dir = tempfile::Builder::new()
                .prefix("nsyskit-nu-")
                .tempdir()
                .map_err(|e| LabeledError::new(format!("cannot create a temporary folder: {e}")))?;
            let path = dir.path().join(format!("{name}.json"));
            let text = serde_json::to_vec(&json).map_err(|e| LabeledError::new(format!("internal error: {e}")))?;
            std::fs::write(&path, text)
                .map_err(|e| LabeledError::new(format!("{}: cannot write: {e}", path.display())))?;
            Ok((path, Some(dir)))
        }
        Value::Nothing { .. } => Err(LabeledError::new(format!("{name}: expected a path or a record, got nothing"))
            .with_code("nsyskit::usage")
            .with_label("give a path argument or pipe a record in", value.span())),
        other => Err(LabeledError::new(format!("{name}: expected a path or a record, got {}", other.get_type()))
            .with_code("nsyskit::usage")
            .with_label("not a path or a record", other.span())),
    }
}

/// The user's environment as a tool's run reads it ([`nsyskit::tools::Invocation::env`]): Nushell's `$env` (the
/// plugin process's own is not the user's once they change it); a list (`PATH`) is joined with `:`.
pub fn nu_var(engine: &EngineInterface, name: &str) -> Option<std::ffi::OsString> {
    match engine.get_env_var(name).ok()?? {
        Value::List { vals, .. } => {
            let dirs: Vec<String> = vals.into_iter().filter_map(|v| v.coerce_into_string().ok()).collect();
            std::env::join_paths(dirs).ok()
        }
        v => v.coerce_into_string().ok().map(Into::into),
    }
}

/// Run a tool the Nushell way: the flags of `call` (and `positionals`, already resolved) through the binary's
/// parser, the tool's one run ([`nsyskit::tools`]) on Nushell's host, its lines on stderr, its output as a
/// typed value; an error labelled at the argument it names. `stdin` is what `-` reads (the pipeline input
/// the command accepts).
#[allow(clippy::too_many_arguments)]
pub fn run_tool<A: clap::FromArgMatches>(
    engine: &EngineInterface,
    call: &EvaluatedCall,
    input: &Value,
    sig: &Signature,
    flags: &crate::flags::Flags,
    positionals: Vec<std::ffi::OsString>,
    stdin: nsyskit::tools::Stdin,
    stop: Option<nsyskit::serve_capture::StopFlag>,
    run: fn(A, &nsyskit::tools::Invocation) -> nsyskit::contract::Result<nsyskit::tools::Outcome>,
) -> Result<Value, LabeledError> {
    let label = |e| labeled(e, call, sig, Some(input.span()));
    run_tool_with(engine, call, sig, flags, positionals, stdin, stop, run, &label)
}

/// [`run_tool`] with the command's own placing of an error (`label`).
#[allow(clippy::too_many_arguments)]
pub fn run_tool_with<A: clap::FromArgMatches>(
    engine: &EngineInterface,
    call: &EvaluatedCall,
    sig: &Signature,
    flags: &crate::flags::Flags,
    positionals: Vec<std::ffi::OsString>,
    stdin: nsyskit::tools::Stdin,
    stop: Option<nsyskit::serve_capture::StopFlag>,
    run: fn(A, &nsyskit::tools::Invocation) -> nsyskit::contract::Result<nsyskit::tools::Outcome>,
    label: &dyn Fn(Error) -> LabeledError,
) -> Result<Value, LabeledError> {
    let args: A = flags.parse(engine, call, positionals)?;
    let outcome = with_host(engine, stdin, stop, |host| run(args, host))?.map_err(label)?;
    outcome_value(&sig.name, outcome, call)
}

/// Call `f` with Nushell's host: `$env` as the user's environment, Nushell's current folder, `stdin` as what
/// `-` reads, `stop` raised by Ctrl-C.
pub fn with_host<R>(
    engine: &EngineInterface,
    stdin: nsyskit::tools::Stdin,
    stop: Option<nsyskit::serve_capture::StopFlag>,
    f: impl FnOnce(&nsyskit::tools::Invocation) -> R,
) -> Result<R, ShellError> {
    let env = |n: &str| nu_var(engine, n);
    let host = nsyskit::tools::Invocation {
        env: &env,
        cwd: Some(PathBuf::from(engine.get_current_dir()?)),
        stdin,
        progress: false,
        stop,
        own_env: false,
    };
    Ok(f(&host))
}

/// An outcome as the command's value (its `say` lines go to stderr as the binary prints them).
pub fn outcome_value(tool: &str, o: nsyskit::tools::Outcome, call: &EvaluatedCall) -> Result<Value, LabeledError> {
    use nsyskit::tools::Output;
    let name = call.head;
    for line in &o.say {
        eprintln!("{tool}: {line}");
    }
    let json = match o.output {
        Output::Doc(doc) => doc.to_json(),
        Output::Text(text) => return Ok(Value::string(text, name)),
        Output::Json(text) => serde_json::from_str(&text)
            .map_err(|e| LabeledError::new(format!("internal error: the output is not JSON: {e}")))?,
        Output::Rows(rows) => {
            return Ok(Value::list(rows.to_json().iter().map(|r| json_to_nu(r, name)).collect(), name));
        }
        Output::Stream(write) => {
            let mut buf = Vec::new();
            write(&mut buf).map_err(|e| labeled_at(e, call.head))?;
            serde_json::from_slice(&buf)
                .map_err(|e| LabeledError::new(format!("internal error: the output is not JSON: {e}")))?
        }
    };
    Ok(json_to_nu(&json, name))
}
