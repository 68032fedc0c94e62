//! What every command shares: reading arguments, paths relative to Nushell's current directory, turning a
//! library result into a Nushell value and an nsyskit [`Error`] into a [`LabeledError`] at the right span.

use std::path::{Path, PathBuf};

use nsyskit::contract::{Error, ErrorKind};
use nu_plugin::{EngineInterface, EvaluatedCall};
use nu_protocol::{Category, LabeledError, ShellError, Signature, Span, Spanned, Value};
use serde::Serialize;

use crate::convert::json_to_nu;

/// The category every nsyskit command is listed under (`help commands | where category == nsyskit`).
pub fn category() -> Category {
    Category::Custom("nsyskit".into())
}

/// A document (any `Serialize`, in practice an nsyskit `Document`) as a typed Nushell value.
pub fn doc_value<T: Serialize>(doc: &T, span: Span) -> Result<Value, LabeledError> {
    let json = serde_json::to_value(doc)
        .map_err(|e| LabeledError::new(format!("internal error: document does not serialise: {e}")))?;
    Ok(json_to_nu(&json, span))
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

/// An optional path flag, resolved against the current directory.
pub fn flag_path(engine: &EngineInterface, call: &EvaluatedCall, name: &str) -> Result<Option<PathBuf>, ShellError> {
    match flag_str(call, name)? {
        None => Ok(None),
        Some(s) => Ok(Some(resolve_path(engine, &s.item)?)),
    }
}

/// An optional non-negative integer flag.
pub fn flag_usize(call: &EvaluatedCall, name: &str) -> Result<Option<usize>, LabeledError> {
    match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => Ok(None),
        Some(v) => {
            let span = v.span();
            let i = v.as_int().map_err(LabeledError::from)?;
            usize::try_from(i).map(Some).map_err(|_| {
                LabeledError::new(format!("--{name} must not be negative, got {i}"))
                    .with_code("nsyskit::usage")
                    .with_label("negative", span)
            })
        }
    }
}

/// An optional number flag (int or float) as `f64`.
pub fn flag_f64(call: &EvaluatedCall, name: &str) -> Result<Option<f64>, ShellError> {
    match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => Ok(None),
        Some(v) => v.coerce_float().map(Some),
    }
}

/// Seconds: a number, or a Nushell duration (`--duration 10sec`, `--grace 3sec`).
pub fn flag_seconds(call: &EvaluatedCall, name: &str) -> Result<Option<f64>, LabeledError> {
    Ok(match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => None,
        Some(Value::Duration { val, .. }) => Some(val as f64 / 1e9),
        Some(v) => Some(v.coerce_float().map_err(LabeledError::from)?),
    })
}

/// [`flag_seconds`] as a `Duration`: a negative or non-finite value is a usage error at the flag's value.
pub fn flag_duration(call: &EvaluatedCall, name: &str) -> Result<Option<std::time::Duration>, LabeledError> {
    let Some(secs) = flag_seconds(call, name)? else { return Ok(None) };
    std::time::Duration::try_from_secs_f64(secs).map(Some).map_err(|_| {
        let span = call.get_flag_value(name).map(|v| v.span()).unwrap_or(call.head);
        LabeledError::new(format!("--{name} {secs}: expected seconds >= 0"))
            .with_code("nsyskit::usage")
            .with_label("bad argument", span)
    })
}

/// An optional byte count: an int or a filesize (`--min-rep-bytes 10MB`).
pub fn flag_bytes(call: &EvaluatedCall, name: &str) -> Result<Option<u64>, LabeledError> {
    match call.get_flag_value(name) {
        None | Some(Value::Nothing { .. }) => Ok(None),
        Some(v) => {
            let span = v.span();
            let n = match &v {
                Value::Filesize { val, .. } => val.get(),
                other => other.as_int().map_err(LabeledError::from)?,
            };
            u64::try_from(n).map(Some).map_err(|_| {
                LabeledError::new(format!("--{name} must not be negative, got {n}"))
                    .with_code("nsyskit::usage")
                    .with_label("negative", span)
            })
        }
    }
}

/// A variable of Nushell's environment (`$env.NSYS_BIN`), which the plugin process does not see once it
/// changed after the plugin started. Empty counts as unset.
pub fn nu_env(engine: &EngineInterface, name: &str) -> Result<Option<String>, ShellError> {
    Ok(nu_env_raw(engine, name)?.filter(|s| !s.is_empty()))
}

/// A variable of Nushell's environment as it is, empty included (an empty `CUDA_VISIBLE_DEVICES` hides
/// every GPU).
pub fn nu_env_raw(engine: &EngineInterface, name: &str) -> Result<Option<String>, ShellError> {
    engine.get_env_var(name)?.map(|v| v.coerce_into_string()).transpose()
}

/// `$env.NSYS_BIN` as a path (relative to the current directory), for commands that export an `.nsys-rep`.
pub fn nu_nsys_bin(engine: &EngineInterface) -> Result<Option<PathBuf>, ShellError> {
    nu_env(engine, "NSYS_BIN")?.map(|s| resolve_path(engine, &s)).transpose()
}

/// A JSON-document argument given as a path (a string: resolved against the current directory) or as a
/// Nushell record/list (written, companions dropped, to `<name>.json` in a temporary folder that lives as long
/// as the returned guard), for library functions that read a document from a path.
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

/// A repeatable string flag: one value, or a list of them (`--env [HF_TOKEN VLLM_USE_V1=1]`).
pub fn flag_list(call: &EvaluatedCall, name: &str) -> Result<Vec<String>, ShellError> {
    let mut out = Vec::new();
    for (flag, value) in &call.named {
        if flag.item != name {
            continue;
        }
        match value {
            None | Some(Value::Nothing { .. }) => {}
            Some(Value::List { vals, .. }) => {
                for v in vals {
                    out.push(v.clone().coerce_into_string()?);
                }
            }
            Some(v) => out.push(v.clone().coerce_into_string()?),
        }
    }
    Ok(out)
}
