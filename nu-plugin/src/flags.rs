//! Nushell signatures and argument parsing built from the library's clap definitions ([`nsyskit::flags`]):
//! a flag's long name, help, default and value type are written once, in the library, and read here.
//!
//! - [`Flags::signature`] adds every long flag of a binary's `clap::Command` to a Nushell [`Signature`], in
//!   clap's order: a `bool` flag becomes a switch, any other a named flag whose shape follows the value type
//!   (`PathBuf` → path, `f64` → number, integers → int, a repeatable flag → one value or a list) refined by its
//!   value name (`BYTES` also takes a filesize, `SECONDS` a duration, `DIR` a directory, `TIME` a date), with
//!   clap's help as its description and clap's default as its `default_value` (Nushell's help shows it).
//! - [`Flags::parse`] turns a Nushell call back into the binary's command line (paths resolved against
//!   Nushell's current directory, filesizes as bytes, durations as seconds) and parses it with the same clap
//!   parser, so both adapters get the same typed arguments, defaults and validation.
//!
//! `--pretty`/`--compact` (JSON text formatting) never become Nushell flags: a Nushell command returns
//! values. Flags that only make sense for the binary are named in `skip` (and listed, with the reason, in
//! tests/flag_twins.rs).

use std::any::TypeId;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue};
use clap::{Arg, ArgAction};
use nu_plugin::{EngineInterface, EvaluatedCall};
use nu_protocol::{LabeledError, Signature, Span, SyntaxShape, Value};

use crate::call::resolve_path;

/// Flags of the library's output formatting, never Nushell flags.
pub const OUTPUT_FLAGS: &[&str] = &["pretty", "compact"];

/// Nushell-specific shapes by flag name (see [`Flags::shapes`]).
pub type Shapes = &'static [(&'static str, fn() -> SyntaxShape)];

/// One binary's command line as a source of Nushell flags.
pub struct Flags {
    cmd: clap::Command,
    skip: &'static [&'static str],
    shapes: Shapes,
}

impl Flags {
    /// The flags of `cmd` (from `nsyskit::flags::…::command()`).
    pub fn new(cmd: clap::Command) -> Self {
        Flags { cmd, skip: &[], shapes: &[] }
    }

    /// Leave out these binary-only flags (each listed in tests/flag_twins.rs with the reason).
    pub fn skip(mut self, skip: &'static [&'static str]) -> Self {
        self.skip = skip;
        self
    }

    /// A Nushell-specific shape for these flags (e.g. a command given as a list of words).
    pub fn shapes(mut self, shapes: Shapes) -> Self {
        self.shapes = shapes;
        self
    }

    /// The clap command.
    pub fn command(&self) -> &clap::Command {
        &self.cmd
    }

    fn flag_args(&self) -> impl Iterator<Item = &Arg> {
        self.cmd.get_arguments().filter(|a| match a.get_long() {
            Some(long) => !OUTPUT_FLAGS.contains(&long) && !self.skip.contains(&long),
            None => false,
        })
    }

    /// The Nushell shape of a clap argument.
    pub fn shape(&self, arg: &Arg) -> SyntaxShape {
        let id = arg.get_id().as_str().replace('_', "-");
        if let Some((_, f)) = self.shapes.iter().find(|(name, _)| *name == id || Some(*name) == arg.get_long()) {
            return f();
        }
        let one = value_shape(arg);
        if matches!(arg.get_action(), ArgAction::Append) {
            SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(one.clone())), one])
        } else {
            one
        }
    }

    /// `sig` with every flag of the command added (switches and named flags, help and default from clap).
    pub fn signature(&self, mut sig: Signature) -> Signature {
        for arg in self.flag_args() {
            let long = arg.get_long().unwrap_or_default();
            let help = help(arg);
            if is_switch(arg) {
                sig = sig.switch(long, help, arg.get_short());
            } else {
                let shape = self.shape(arg);
                let default = default_value(arg, &shape);
                sig = if arg.is_required_set() {
                    sig.required_named(long, shape, help, arg.get_short())
                } else {
                    sig.named(long, shape, help, arg.get_short())
                };
                if let Some(flag) = sig.named.last_mut() {
                    flag.default_value = default;
                }
            }
        }
        sig
    }

    /// The positional argument `id` of the command as a Nushell required positional (clap's help).
    pub fn required(&self, sig: Signature, id: &str) -> Signature {
        match self.cmd.get_arguments().find(|a| a.get_id() == id) {
            Some(arg) => sig.required(id, self.shape(arg), help(arg)),
            None => sig,
        }
    }

    /// Parse a Nushell call with the binary's own parser: the given named flags of the command, then
    /// `positionals` (already resolved by the command) after `--`. Named flags the command does not know
    /// (Nushell-only ones) are left to the command.
    pub fn parse<A: clap::FromArgMatches>(
        &self,
        engine: &EngineInterface,
        call: &EvaluatedCall,
        positionals: Vec<OsString>,
    ) -> Result<A, LabeledError> {
        let mut argv: Vec<OsString> = vec![self.cmd.get_name().into()];
        for (name, value) in &call.named {
            let Some(arg) = self.flag_args().find(|a| a.get_long() == Some(name.item.as_str())) else { continue };
            if is_switch(arg) {
                if !matches!(value, Some(Value::Bool { val: false, .. })) {
                    argv.push(format!("--{}", name.item).into());
                }
                continue;
            }
            let items = match value {
                None | Some(Value::Nothing { .. }) => continue,
                Some(Value::List { vals, .. }) if matches!(arg.get_action(), ArgAction::Append) => vals.to_vec(),
                // a list given to a one-value flag is a command's words (`--load [curl -s URL]`): one string
                // the library splits back into exactly these words
                Some(Value::List { vals, .. }) => vec![command_string(&name.item, vals)?],
                Some(v) => vec![v.clone()],
            };
            for item in items {
                let mut a = OsString::from(format!("--{}=", name.item));
                a.push(arg_text(engine, arg, &item)?);
                argv.push(a);
            }
        }
        argv.push("--".into());
        argv.extend(positionals);
        self.cmd
            .clone()
            .try_get_matches_from(argv)
            .and_then(|m| A::from_arg_matches(&m))
            .map_err(|e| clap_error(&e, call))
    }
}

/// Seconds: a number or a Nushell duration (for [`Flags::shapes`]).
pub fn seconds() -> SyntaxShape {
    SyntaxShape::OneOf(vec![SyntaxShape::Number, SyntaxShape::Duration])
}

/// A path (for [`Flags::shapes`]).
pub fn path() -> SyntaxShape {
    SyntaxShape::Filepath
}

/// A command: one string split with shell-word rules, or a list of words (for [`Flags::shapes`]).
pub fn command_words() -> SyntaxShape {
    SyntaxShape::OneOf(vec![SyntaxShape::List(Box::new(SyntaxShape::String)), SyntaxShape::String])
}

fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue)
}

/// A flag's help: clap's (the doc comment of the library's field), on one line.
pub fn help(arg: &Arg) -> String {
    arg.get_help().map(|h| h.to_string()).unwrap_or_default()
}

fn is_type<T: 'static>(arg: &Arg) -> bool {
    arg.get_value_parser().type_id() == TypeId::of::<T>()
}

fn is_int(arg: &Arg) -> bool {
    is_type::<u64>(arg)
        || is_type::<usize>(arg)
        || is_type::<u32>(arg)
        || is_type::<u16>(arg)
        || is_type::<u8>(arg)
        || is_type::<i64>(arg)
}

fn value_shape(arg: &Arg) -> SyntaxShape {
    let name = arg.get_value_names().and_then(|v| v.first()).map(|s| s.as_str().to_string()).unwrap_or_default();
    let int = is_int(arg);
    if is_type::<PathBuf>(arg) {
        if name == "DIR" {
            SyntaxShape::Directory
        } else {
            SyntaxShape::Filepath
        }
    } else if is_type::<f64>(arg) {
        if name == "SECONDS" {
            SyntaxShape::OneOf(vec![SyntaxShape::Number, SyntaxShape::Duration])
        } else {
            SyntaxShape::Number
        }
    } else if int {
        if name == "BYTES" {
            SyntaxShape::OneOf(vec![SyntaxShape::Int, SyntaxShape::Filesize])
        } else {
            SyntaxShape::Int
        }
    } else if name == "TIME" {
        SyntaxShape::OneOf(vec![SyntaxShape::DateTime, SyntaxShape::String])
    } else {
        SyntaxShape::String
    }
}

/// clap's default as a Nushell value of the flag's shape (None when it has none).
pub fn default_value(arg: &Arg, shape: &SyntaxShape) -> Option<Value> {
    let text = arg.get_default_values().first()?.to_string_lossy().into_owned();
    let numeric = |s: &SyntaxShape| match s {
        SyntaxShape::Number => Some(false),
        SyntaxShape::Int => Some(true),
        SyntaxShape::OneOf(v) => v.iter().find_map(|s| match s {
            SyntaxShape::Number => Some(false),
            SyntaxShape::Int => Some(true),
            _ => None,
        }),
        _ => None,
    };
    Some(match numeric(shape) {
        Some(true) => match text.parse::<i64>() {
            Ok(i) => Value::int(i, Span::unknown()),
            Err(_) => Value::string(text, Span::unknown()),
        },
        Some(false) => match text.parse::<f64>() {
            Ok(f) => Value::float(f, Span::unknown()),
            Err(_) => Value::string(text, Span::unknown()),
        },
        None => Value::string(text, Span::unknown()),
    })
}

/// A Nushell value as the text of the binary's flag.
fn arg_text(engine: &EngineInterface, arg: &Arg, v: &Value) -> Result<OsString, LabeledError> {
    let long = arg.get_long().unwrap_or_default();
    Ok(match v {
        Value::Filesize { val, .. } => val.get().to_string().into(),
        // seconds: whole ones for an integer flag (`--wait-timeout 3sec`)
        Value::Duration { val, .. } if is_int(arg) => (val / 1_000_000_000).to_string().into(),
        Value::Duration { val, .. } => (*val as f64 / 1e9).to_string().into(),
        Value::Int { val, .. } => val.to_string().into(),
        Value::Float { val, .. } => val.to_string().into(),
        Value::Date { val, .. } => crate::convert::date_to_json(val).into(),
        Value::String { val, .. } | Value::Glob { val, .. } => {
            if is_type::<PathBuf>(arg) {
                resolve_path(engine, val)?.into_os_string()
            } else {
                val.into()
            }
        }
        other => {
            return Err(LabeledError::new(format!("--{long}: expected a value, got {}", other.get_type()))
                .with_code("nsyskit::usage")
                .with_label(format!("bad argument (--{long})"), other.span()))
        }
    })
}

/// Words as one shell-quoted string (split back by the library's shell-word rules).
fn command_string(flag: &str, words: &[Value]) -> Result<Value, LabeledError> {
    let span = words.first().map(|v| v.span()).unwrap_or(Span::unknown());
    let words = words.iter().map(|w| w.clone().coerce_into_string()).collect::<Result<Vec<_>, _>>()?;
    let text = shlex::try_join(words.iter().map(String::as_str)).map_err(|e| {
        LabeledError::new(format!("--{flag}: {e}"))
            .with_code("nsyskit::usage")
            .with_label(format!("bad argument (--{flag})"), span)
    })?;
    Ok(Value::string(text, span))
}

/// A clap usage error as a Nushell error at the flag it names (else the command's head).
fn clap_error(e: &clap::Error, call: &EvaluatedCall) -> LabeledError {
    let rendered = e.render().to_string();
    let text = rendered.trim_start_matches("error: ");
    let first = text.split("\n\n").next().unwrap_or(text);
    let message = first.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    let flag = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next().map(str::to_string),
        _ => None,
    };
    let span = flag
        .as_deref()
        .and_then(|f| f.strip_prefix("--"))
        .and_then(|f| call.named.iter().find(|(n, _)| n.item == f))
        .map(|(n, v)| v.as_ref().map(|v| Span::merge(n.span, v.span())).unwrap_or(n.span))
        .unwrap_or(call.head);
    let label = match &flag {
        Some(f) => format!("bad argument ({f})"),
        None => "bad argument".to_string(),
    };
    LabeledError::new(message).with_code("nsyskit::usage").with_label(label, span)
}
