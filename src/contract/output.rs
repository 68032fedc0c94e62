use serde::Serialize;

/// How a document is printed: pretty on a terminal and compact otherwise (`Auto`), or forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    #[default]
    Auto,
    Pretty,
    Compact,
}

impl Style {
    /// Decide `Auto` for standard output.
    pub fn resolve_for_stdout(self) -> Style {
        use std::io::IsTerminal;
        match self {
            Style::Auto if std::io::stdout().is_terminal() => Style::Pretty,
            Style::Auto => Style::Compact,
            s => s,
        }
    }
}

/// Render a document as one JSON text followed by a newline.
pub fn render<T: Serialize + ?Sized>(doc: &T, style: Style) -> String {
    let mut s = match style.resolve_for_stdout() {
        Style::Pretty => serde_json::to_string_pretty(doc),
        _ => serde_json::to_string(doc),
    }
    .expect("documents serialise");
    s.push('\n');
    s
}
