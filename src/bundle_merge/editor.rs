//! The byte-preserving JSON text editor behind bundle-merge: it sets a value at a path of object keys in a
//! valid JSON text, replacing the old value's text or inserting a new member after the last one of its object
//! (in the style of its siblings), and leaves every other byte as it was.

use serde::Serialize;
use serde_json::Value;

use super::type_name;
use crate::contract::{Error, Result};

struct Member {
    key: String,
    key_start: usize,
    value_start: usize,
    value_end: usize,
}

struct Obj {
    open: usize,
    close: usize,
    members: Vec<Member>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// End (exclusive) of the string starting at `i` (a `"`).
fn string_end(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// End (exclusive) of the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> usize {
    match b[i] {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            j
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                j += 1;
            }
            j
        }
    }
}

/// The members of the object whose `{` is at `open` (the text is valid JSON).
fn scan_object(text: &str, open: usize) -> Obj {
    let b = text.as_bytes();
    let mut members = Vec::new();
    let mut i = skip_ws(b, open + 1);
    while b[i] != b'}' {
        let key_start = i;
        let key_end = string_end(b, i);
        let key: String = serde_json::from_str(&text[key_start..key_end]).unwrap_or_default();
        i = skip_ws(b, key_end);
        i = skip_ws(b, i + 1); // ':'
        let value_start = i;
        let end = value_end(b, i);
        members.push(Member { key, key_start, value_start, value_end: end });
        i = skip_ws(b, end);
        if b[i] == b',' {
            i = skip_ws(b, i + 1);
        }
    }
    Obj { open, close: i, members }
}

fn line_of(text: &str, pos: usize) -> usize {
    1 + text[..pos].matches('\n').count()
}

/// The whitespace at the start of the line holding `pos`.
fn line_indent(text: &str, pos: usize) -> &str {
    let start = text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let mut line = &text[start..];
    if start == 0 {
        line = line.trim_start_matches('\u{feff}'); // a BOM is not indentation
    }
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

struct Style {
    newline: &'static str,
    unit: String,
    /// The top-level object is pretty-printed (or empty): new members of empty objects are written pretty.
    pretty: bool,
}

fn detect_style(text: &str) -> Style {
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let b = text.as_bytes();
    let open = skip_ws(b, text.len() - text.trim_start_matches('\u{feff}').len());
    let mut unit = "  ".to_string();
    let mut pretty = true;
    if open < b.len() && b[open] == b'{' {
        let top = scan_object(text, open);
        if let Some(m) = top.members.first() {
            pretty = text[open..m.key_start].contains('\n');
            if pretty {
                // the unit is what the first member adds to the indentation of the `{` line (an indented
                // top-level object, `  {`, does not double the unit)
                let ind = line_indent(text, m.key_start);
                let outer = line_indent(text, open);
                match ind.strip_prefix(outer) {
                    Some(u) if !u.is_empty() => unit = u.to_string(),
                    _ if !ind.is_empty() => unit = ind.to_string(),
                    _ => {}
                }
            }
        }
    }
    Style { newline, unit, pretty }
}

/// `{"k1": {"k2": … value}}` for the keys `keys`: the missing rest of a path, serialised around the borrowed
/// value (it was cloned into new objects before).
struct Nested<'a> {
    keys: &'a [String],
    value: &'a Value,
}

impl Serialize for Nested<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.keys.split_first() {
            None => self.value.serialize(s),
            Some((k, rest)) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(k, &Nested { keys: rest, value: self.value })?;
                m.end()
            }
        }
    }
}

/// serde_json's `PrettyFormatter` with the bundle's newline and the indentation of the line the value starts
/// on written at each line start: the value goes straight into the new text (it was rendered, then copied by
/// a `replace` of every newline, then copied again into the new text).
struct Indented<'a> {
    newline: &'a [u8],
    base: &'a [u8],
    unit: &'a [u8],
    depth: usize,
    has_value: bool,
}

impl Indented<'_> {
    fn line<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.newline)?;
        w.write_all(self.base)?;
        for _ in 0..self.depth {
            w.write_all(self.unit)?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for Indented<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.line(w)?;
        }
        w.write_all(b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.line(w)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.line(w)?;
        }
        w.write_all(b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.line(w)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Append `value` (inside the objects `wrap`) to `out`: compact, or pretty with `indent` after each newline.
fn render_into(out: &mut Vec<u8>, value: &Value, wrap: &[String], pretty: bool, indent: &str, style: &Style) {
    let v = Nested { keys: wrap, value };
    if !pretty {
        serde_json::to_writer(&mut *out, &v).expect("a JSON value serialises");
        return;
    }
    let fmt = Indented {
        newline: style.newline.as_bytes(),
        base: indent.as_bytes(),
        unit: style.unit.as_bytes(),
        depth: 0,
        has_value: false,
    };
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, fmt);
    v.serialize(&mut ser).expect("a JSON value serialises");
}

/// `head`, the rendered value, `tail`: the new text, built in one buffer.
#[allow(clippy::too_many_arguments)]
fn splice(
    head: &str,
    mid: &str,
    value: &Value,
    wrap: &[String],
    pretty: bool,
    indent: &str,
    style: &Style,
    tail: &[&str],
) -> String {
    let mut out = Vec::with_capacity(head.len() + mid.len() + tail.iter().map(|t| t.len()).sum::<usize>() + 1024);
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(mid.as_bytes());
    render_into(&mut out, value, wrap, pretty, indent, style);
    for t in tail {
        out.extend_from_slice(t.as_bytes());
    }
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Set `path` to `value` in `text` (valid JSON whose top level must be an object).
pub(crate) fn apply(
    text: &str,
    path: &[String],
    value: &Value,
    keep_existing: bool,
    bundle_name: &str,
) -> Result<String> {
    let style = detect_style(text);
    let b = text.as_bytes();
    let open = skip_ws(b, text.len() - text.trim_start_matches('\u{feff}').len());
    if b[open] != b'{' {
        let v: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).unwrap_or(Value::Null);
        return Err(Error::input(format!(
            "{bundle_name}: $: the bundle must be a JSON object, found {}",
            type_name(&v)
        )));
    }
    let mut obj = scan_object(text, open);
    let mut jpath = String::from("$");
    for (depth, key) in path.iter().enumerate() {
        let hits: Vec<&Member> = obj.members.iter().filter(|m| &m.key == key).collect();
        if hits.len() > 1 {
            return Err(Error::input(format!(
                "{bundle_name}: line {}: {jpath}.{key}: duplicate key (bundle-merge will not guess which one counts)",
                line_of(text, hits[1].key_start)
            )));
        }
        let last = depth + 1 == path.len();
        match hits.first() {
            Some(m) if last && keep_existing && &text[m.value_start..m.value_end] != "null" => {
                return Ok(text.to_string());
            }
            Some(m) if last => {
                let pretty = obj_pretty(text, &obj, &style);
                let indent = line_indent(text, m.key_start);
                return Ok(splice(
                    &text[..m.value_start],
                    "",
                    value,
                    &[],
                    pretty,
                    indent,
                    &style,
                    &[&text[m.value_end..]],
                ));
            }
            Some(m) => {
                if b[m.value_start] != b'{' {
                    let v: Value = serde_json::from_str(&text[m.value_start..m.value_end]).unwrap_or(Value::Null);
                    return Err(Error::input(format!(
                        "{bundle_name}: line {}: {jpath}.{key}: must be an object (bundle-merge places documents in it), found {}",
                        line_of(text, m.key_start),
                        type_name(&v)
                    )));
                }
                jpath = format!("{jpath}.{key}");
                obj = scan_object(text, m.value_start);
            }
            None => {
                // the missing rest of the path becomes nested objects around the value, inserted here
                return Ok(insert_member(text, &obj, key, value, &path[depth + 1..], &style));
            }
        }
    }
    unreachable!("the loop returns at the last path element")
}

/// An object is pretty-printed when a newline precedes its first member.
fn obj_pretty(text: &str, obj: &Obj, style: &Style) -> bool {
    obj.members.first().map(|m| text[obj.open..m.key_start].contains('\n')).unwrap_or(style.pretty)
}

fn insert_member(text: &str, obj: &Obj, key: &str, value: &Value, wrap: &[String], style: &Style) -> String {
    let key_text = serde_json::to_string(key).expect("a string serialises");
    match obj.members.last() {
        Some(last) => {
            let pretty = obj_pretty(text, obj, style);
            // reuse the separator between key and value of the last member (`: ` or `:`)
            let key_end = string_end(text.as_bytes(), last.key_start);
            let sep = &text[key_end..last.value_start];
            let sep = if sep.contains('\n') { ": " } else { sep };
            if pretty {
                let indent = line_indent(text, last.key_start);
                let mid = format!(",{}{indent}{key_text}{sep}", style.newline);
                splice(&text[..last.value_end], &mid, value, wrap, true, indent, style, &[&text[last.value_end..]])
            } else {
                let mid = format!(",{key_text}{sep}");
                splice(&text[..last.value_end], &mid, value, wrap, false, "", style, &[&text[last.value_end..]])
            }
        }
        None if !style.pretty => {
            let mid = format!("{{{key_text}:");
            splice(&text[..obj.open], &mid, value, wrap, false, "", style, &["}", &text[obj.close + 1..]])
        }
        None => {
            let outer = line_indent(text, obj.open).to_string();
            let indent = format!("{outer}{}", style.unit);
            let nl = style.newline;
            let mid = format!("{{{nl}{indent}{key_text}: ");
            let close = format!("{nl}{outer}}}");
            splice(&text[..obj.open], &mid, value, wrap, true, &indent, style, &[&close, &text[obj.close + 1..]])
        }
    }
}
