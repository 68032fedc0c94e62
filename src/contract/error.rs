use std::fmt;

/// What went wrong, which decides how adapters present it (the exit code is 2 for every kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments: a flag value that does not parse, flags that conflict.
    Usage,
    /// Unusable input: not a file, not SQLite, a missing table or column, malformed JSON or CSV.
    Input,
    /// The environment failed: a tool could not run, an output could not be written.
    Environment,
}

/// An nsyskit error: exit code 2, one message naming the file and the line, table, column or JSON path.
///
/// `arg` names the argument at fault (a flag such as `--window`, or a positional name such as `EXPORT`) so
/// that the Nushell plugin can point at its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub arg: Option<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn usage(message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::Usage, message: message.into(), arg: None }
    }
    pub fn input(message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::Input, message: message.into(), arg: None }
    }
    pub fn env(message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::Environment, message: message.into(), arg: None }
    }
    /// Name the argument at fault.
    pub fn with_arg(mut self, arg: impl Into<String>) -> Error {
        self.arg = Some(arg.into());
        self
    }
    /// Prefix the message with context (`"bundle.json: "` etc.).
    pub fn context(mut self, prefix: impl fmt::Display) -> Error {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
    /// Always 2: usage error or unusable input.
    pub fn exit_code(&self) -> i32 {
        2
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
