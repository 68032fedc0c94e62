//! `bundle-merge`: merge nsyskit documents into an evidence bundle.
//!
//! A bundle is a JSON object (an `inference_perfbench_v1.json`-style file) of which nsyskit owns only a few
//! places, chosen by each document's kind ([`placement`]). Everything else in the file is kept byte for byte:
//! the merge edits the text in place (it replaces the value of an owned key, or inserts a missing key after
//! the last member of its object, indented like its siblings), so key order, unknown fields, number text
//! (`1.0`, `12345678901234567890`), string escapes and whitespace outside the owned values never change.
//!
//! Writing is atomic (temporary file in the bundle's folder, fsync, rename, the old file's permissions) under
//! an exclusive lock on the sidecar file `BUNDLE.lock` (removed when the merge ends), so parallel merges into one
//! bundle lose nothing.

use std::borrow::Cow;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod editor;

use crate::contract::{kind_of_schema_id, parse_json_stream, Document, Error, Input, Result, Tool};

/// Where one document kind goes in a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// `nsyskit.stats/v1` (kern-csv-to-json): `kernel_profile.stats.<report>`; a kernel report
    /// (`cuda_gpu_kern_sum`) also sets `kernel_profile.top_kernels`, `.totals`, `.summary_csv_path`,
    /// `.captured_at`.
    KernelProfile,
    /// The whole document replaces the value at this dotted path.
    At(&'static str),
    /// `comparisons.<key>`: the key names the two compared inputs (see [`comparison_key`]).
    Comparisons,
    /// `<path>.<name>`: keyed by the document's `name` (named baselines of capture-compare).
    Named(&'static str),
    /// `nsyskit.pod-attach/v1`: the whole document at `pod_attach`, and each member of its `kernel_profile`
    /// (when an object) at `kernel_profile.<member>` (the seed's step-5 fields).
    PodAttach,
}

/// The placement table: every document kind nsyskit writes, and where bundle-merge puts it.
pub const PLACEMENTS: &[(&str, Placement)] = &[
    ("stats", Placement::KernelProfile),
    ("gate", Placement::At("kernel_profile.gates")),
    ("ranges", Placement::At("kernel_profile.ranges")),
    ("readiness", Placement::At("kernel_profile.readiness")),
    ("step-budget", Placement::At("kernel_profile.step_budget")),
    ("provenance", Placement::At("provenance")),
    ("compare", Placement::Comparisons),
    ("report", Placement::At("report")),
    ("serve-capture", Placement::At("serve_capture")),
    ("pod-attach", Placement::PodAttach),
    ("question", Placement::At("question")),
    ("benchmark", Placement::At("benchmark")),
    ("iterations", Placement::At("iterations")),
    ("iteration-window", Placement::At("iteration_window")),
    ("baseline", Placement::Named("baselines")),
];

/// Where documents of `kind` (the `<kind>` of `nsyskit.<kind>/v1`) go, or None when bundle-merge does not
/// place that kind (unknown kinds, and its own `bundle-merge` summaries).
pub fn placement(kind: &str) -> Option<Placement> {
    PLACEMENTS.iter().find(|(k, _)| *k == kind).map(|(_, p)| *p)
}

/// bundle-merge's own output: what it merged where.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BundleMergeDoc {
    pub schema: String,
    pub tool: Tool,
    /// The bundle path as given.
    pub bundle: String,
    /// `write` (default), `check` (`--check`: nothing written) or `stdout` (`--stdout`: the merged bundle is
    /// printed instead of written; this summary then goes to stderr).
    pub mode: String,
    /// The bundle did not exist (or was empty) before.
    pub created: bool,
    /// The merge changes the bundle's bytes.
    pub changed: bool,
    /// The bundle file was (re)written by this run.
    pub written: bool,
    /// Size of the bundle before (null when absent) and after the merge, bytes.
    pub bytes_before: Option<u64>,
    pub bytes_after: u64,
    /// Every document merged, in order (a later document replaces an earlier one at the same place).
    pub documents: Vec<MergedDoc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MergedDoc {
    /// The file (or `<stdin>`) and line where the document started.
    pub source: String,
    pub line: usize,
    /// The document's `schema`.
    pub schema: String,
    /// The dotted paths in the bundle it set, e.g. `kernel_profile.gates`.
    pub places: Vec<String>,
}

impl Document for BundleMergeDoc {
    const KIND: &'static str = "bundle-merge";
    const TOOL: &'static str = "bundle-merge";
    fn exit_code(&self) -> i32 {
        if self.mode == "check" && self.changed {
            1
        } else {
            0
        }
    }
}

/// What to do with the merged bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Write the bundle (atomically, under the lock).
    #[default]
    Write,
    /// Write nothing; the report says whether the merge would change the bundle (exit 1 if so).
    Check,
    /// Write nothing; return the merged text (the binary prints it).
    Stdout,
}

/// A document to merge and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DocIn {
    pub value: Value,
    pub source: String,
    pub line: usize,
}

/// The result of [`run`]: the summary document and the merged bundle text.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    pub report: BundleMergeDoc,
    pub bundle_text: String,
    /// Temporary files of an interrupted earlier run, removed under the lock (the binary lists them on stderr).
    pub removed_temps: Vec<PathBuf>,
}

/// Read documents from inputs (paths or `-`): each a stream of JSON documents (one, concatenated or NDJSON);
/// a top-level JSON array is a list of documents.
pub fn read_docs(inputs: &[Input]) -> Result<Vec<DocIn>> {
    let mut out = Vec::new();
    for input in inputs {
        out.extend(docs_from_bytes(&input.read_json_bytes()?, &input.name())?);
    }
    if out.is_empty() && !inputs.is_empty() {
        let names: Vec<String> = inputs.iter().map(|i| i.name()).collect();
        return Err(Error::input(format!(
            "no documents to merge: {} held none (the input was empty)",
            names.join(", ")
        ))
        .with_arg("DOC"));
    }
    Ok(out)
}

/// The documents of one JSON text named `source` in messages: one document, concatenated documents or NDJSON;
/// a top-level array is a list of documents.
pub fn docs_from_bytes(bytes: &[u8], source: &str) -> Result<Vec<DocIn>> {
    let mut out = Vec::new();
    let docs = parse_json_stream(bytes, source).map_err(|e| name_bundle_place(e, bytes))?;
    for d in docs {
        match d.value {
            Value::Array(items) => {
                out.extend(items.into_iter().map(|value| DocIn { value, source: source.to_string(), line: d.line }))
            }
            value => out.push(DocIn { value, source: source.to_string(), line: d.line }),
        }
    }
    Ok(out)
}

/// A duplicate key in a document: add where that key would land in the bundle (`kernel_profile.ranges…`).
fn name_bundle_place(e: Error, bytes: &[u8]) -> Error {
    let Some(dpath) = crate::contract::duplicate_key_path(&e.message).map(String::from) else { return e };
    let line: Option<usize> =
        e.message.split(": line ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok());
    let text = std::str::from_utf8(bytes).unwrap_or("");
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // parse leniently (last key wins) just to learn the document's kind
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut found: Option<Value> = None;
    loop {
        let offset = stream.byte_offset();
        let rest = &text[offset..];
        let start = offset + rest.len() - rest.trim_start().len();
        let start_line = 1 + text[..start].matches('\n').count();
        match stream.next() {
            Some(Ok(v)) if line.map(|l| start_line <= l).unwrap_or(false) => found = Some(v),
            _ => break,
        }
    }
    let (doc, rest) = match (found, dpath.strip_prefix("$[")) {
        (Some(Value::Array(items)), Some(r)) => {
            let i: Option<usize> = r.split(']').next().and_then(|n| n.parse().ok());
            let rest = r.split_once(']').map(|(_, t)| t.to_string()).unwrap_or_default();
            (i.and_then(|i| items.get(i).cloned()), rest)
        }
        (v, _) => (v, dpath.trim_start_matches('$').to_string()),
    };
    let place = doc.and_then(|value| {
        let d = DocIn { value, source: String::new(), line: 0 };
        let place = edits_for(&d).ok().and_then(|edits| edits.last().map(|e| e.dotted()));
        place
    });
    match place {
        Some(p) => Error::input(format!("{}; in the bundle that is {p}{rest}", e.message)),
        None => e,
    }
}

/// One value to set in the bundle: borrowed from its document (a 100 MB document was cloned twice per merge).
#[derive(Debug, Clone, PartialEq)]
pub struct Edit<'a> {
    pub path: Vec<String>,
    pub value: Cow<'a, Value>,
    /// Leave a non-null value already there as it is (a CSV's mtime never replaces the capture's start).
    pub keep_existing: bool,
}

impl Edit<'_> {
    fn dotted(&self) -> String {
        self.path.join(".")
    }
}

fn at<'a>(path: &str, value: Cow<'a, Value>) -> Edit<'a> {
    Edit { path: path.split('.').map(String::from).collect(), value, keep_existing: false }
}

/// The edits a document makes to a bundle; an unknown schema or a document missing what its placement
/// needs is an input error naming the document and the JSON path.
pub fn edits_for(doc: &DocIn) -> Result<Vec<Edit<'_>>> {
    let whr = format!("{}: line {}", doc.source, doc.line);
    let obj = doc.value.as_object().ok_or_else(|| {
        Error::input(format!("{whr}: $: a document must be a JSON object, found {}", type_name(&doc.value)))
    })?;
    let schema = obj
        .get("schema")
        .ok_or_else(|| Error::input(format!("{whr}: $.schema: missing (not an nsyskit document)")))?
        .as_str()
        .ok_or_else(|| Error::input(format!("{whr}: $.schema: not a string")))?;
    let known = PLACEMENTS.iter().map(|(k, _)| format!("nsyskit.{k}/v1")).collect::<Vec<_>>().join(", ");
    let kind = kind_of_schema_id(schema).ok_or_else(|| {
        Error::input(format!("{whr}: $.schema: {schema:?} is not an nsyskit schema; bundle-merge places {known}"))
    })?;
    let Some(p) = placement(kind) else {
        return Err(Error::input(format!(
            "{whr}: $.schema: bundle-merge has no place for {schema:?}; it places {known}"
        )));
    };
    Ok(match p {
        Placement::At(path) => {
            let mut edits = vec![at(path, Cow::Borrowed(&doc.value))];
            // a ranges document knows when its capture started (the export's session start)
            if kind == "ranges" {
                if let Some(t) = doc.value.pointer("/source/capture/captured_at").filter(|t| t.is_string()) {
                    edits.push(at("kernel_profile.captured_at", Cow::Borrowed(t)));
                }
            }
            edits
        }
        Placement::PodAttach => {
            let mut edits = vec![at("pod_attach", Cow::Borrowed(&doc.value))];
            if let Some(Value::Object(kp)) = obj.get("kernel_profile") {
                for (k, v) in kp {
                    edits.push(Edit {
                        path: vec!["kernel_profile".into(), k.clone()],
                        value: Cow::Borrowed(v),
                        keep_existing: false,
                    });
                }
            }
            edits
        }
        Placement::Comparisons => {
            let key = comparison_key(&doc.value);
            vec![Edit { path: vec!["comparisons".into(), key], value: Cow::Borrowed(&doc.value), keep_existing: false }]
        }
        Placement::Named(prefix) => {
            let name = obj.get("name").and_then(|n| n.as_str()).filter(|n| !n.is_empty()).ok_or_else(|| {
                Error::input(format!("{whr}: $.name: missing or not a string (it names the entry under {prefix})"))
            })?;
            vec![Edit {
                path: vec![prefix.into(), name.into()],
                value: Cow::Borrowed(&doc.value),
                keep_existing: false,
            }]
        }
        Placement::KernelProfile => {
            let report = obj
                .get("report")
                .and_then(|r| r.as_str())
                .filter(|r| !r.is_empty())
                .ok_or_else(|| Error::input(format!("{whr}: $.report: missing or not a string")))?;
            let mut edits = Vec::new();
            if crate::kern_csv_to_json::KERNEL_REPORTS.contains(&report) {
                let top = obj.get("top_kernels").filter(|v| v.is_array()).ok_or_else(|| {
                    Error::input(format!("{whr}: $.top_kernels: missing or not an array (a {report} document)"))
                })?;
                let totals = obj.get("totals").filter(|v| v.is_object()).ok_or_else(|| {
                    Error::input(format!("{whr}: $.totals: missing or not an object (a {report} document)"))
                })?;
                let csv_path = match obj.get("source") {
                    Some(Value::String(s)) if s != "<stdin>" => Value::String(s.clone()),
                    _ => Value::Null,
                };
                edits.push(at("kernel_profile.top_kernels", Cow::Borrowed(top)));
                edits.push(at("kernel_profile.totals", Cow::Borrowed(totals)));
                edits.push(at("kernel_profile.summary_csv_path", Cow::Owned(csv_path)));
                // the CSV's mtime is only an upper bound of the capture time: it fills a gap, it never replaces
                // the capture's start a ranges document recorded
                let mut captured = at(
                    "kernel_profile.captured_at",
                    obj.get("captured_at").map(Cow::Borrowed).unwrap_or(Cow::Owned(Value::Null)),
                );
                captured.keep_existing = obj.get("captured_at_from").and_then(|v| v.as_str()) != Some("--captured-at");
                edits.push(captured);
            }
            edits.push(Edit {
                path: vec!["kernel_profile".into(), "stats".into(), report.to_string()],
                value: Cow::Borrowed(&doc.value),
                keep_existing: false,
            });
            edits
        }
    })
}

/// The key of a `compare` document under `comparisons`: `"<A> vs <B>"` from its `a`/`b` (or
/// `baseline`/`candidate`) members — a string, or an object's `path`, `source`, `label` or `name` — else
/// `doc-<16 hex digits>`, an FNV-1a hash of the compact document text.
pub fn comparison_key(doc: &Value) -> String {
    fn ident(v: Option<&Value>) -> Option<String> {
        match v? {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => {
                ["path", "source", "label", "name"].iter().find_map(|k| o.get(*k)?.as_str().map(String::from))
            }
            _ => None,
        }
    }
    for (a, b) in [("a", "b"), ("baseline", "candidate")] {
        if let (Some(x), Some(y)) = (ident(doc.get(a)), ident(doc.get(b))) {
            return format!("{x} vs {y}");
        }
    }
    let text = serde_json::to_string(doc).unwrap_or_default();
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("doc-{h:016x}")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Merge documents into bundle text (None or blank: a new bundle). Pure: no file access. Returns the new text
/// and, per document, the dotted paths it set.
pub fn merge_text(old: Option<&str>, bundle_name: &str, docs: &[DocIn]) -> Result<(String, Vec<MergedDoc>)> {
    let mut plans = Vec::new();
    for d in docs {
        plans.push(edits_for(d)?);
    }
    let mut text = match old {
        Some(t) if !t.trim().is_empty() => {
            check_readable(t, bundle_name, "")?;
            t.to_string()
        }
        _ => "{}\n".to_string(),
    };
    let mut merged = Vec::new();
    for (d, edits) in docs.iter().zip(plans) {
        for e in &edits {
            text = editor::apply(&text, &e.path, &e.value, e.keep_existing, bundle_name)?;
        }
        merged.push(MergedDoc {
            source: d.source.clone(),
            line: d.line,
            schema: d.value.get("schema").and_then(|s| s.as_str()).unwrap_or("").to_string(),
            places: edits.iter().map(|e| e.dotted()).collect(),
        });
    }
    // a document nested deep enough is readable alone but not at its place in the bundle
    check_readable(
        &text,
        bundle_name,
        "the merged bundle would be refused by its readers (report, capture-compare); nothing was written: ",
    )?;
    Ok((text, merged))
}

/// Is `text` one JSON document that the bundle's readers (report, capture-compare: [`parse_json_stream`],
/// strict [`crate::contract::StrictValue`]s) accept? They refuse what serde_json's syntax check alone lets
/// through: a number beyond f64 (`1e400`), nesting 128 levels deep or more, a lone surrogate escape (`"\ud800"`) and a
/// duplicate key anywhere. An error names the bundle, the line and column, and the JSON path of a duplicate.
/// The check builds no value (a syntax-only check did not either).
fn check_readable(text: &str, bundle_name: &str, why: &str) -> Result<()> {
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Err(e) = crate::contract::check_strict(body) else { return Ok(()) };
    let msg = e.to_string();
    let what = match crate::contract::duplicate_key_path(&msg) {
        Some(path) => format!("{path}: duplicate key (bundle-merge will not guess which one counts)"),
        None => format!("not valid JSON: {}", strip_position(&msg)),
    };
    Err(Error::input(format!("{bundle_name}: {why}line {} column {}: {what}", e.line(), e.column())))
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Merge `docs` into the bundle file at `bundle` (created when absent).
pub fn run(bundle: &Path, docs: &[DocIn], mode: Mode) -> Result<MergeOutcome> {
    let name = bundle.display().to_string();
    if docs.is_empty() {
        return Err(Error::input("no documents to merge (the input was empty)".to_string()).with_arg("DOC"));
    }
    // validate every document before touching anything
    for d in docs {
        edits_for(d)?;
    }
    // write to the target of a symlink, not over the link
    let target: PathBuf = match std::fs::symlink_metadata(bundle) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(bundle).map_err(|e| Error::input(format!("{name}: cannot resolve the link: {e}")))?
        }
        _ => bundle.to_path_buf(),
    };
    // a device, FIFO, socket or folder is never read, locked or replaced (`bundle-merge /dev/null` as root
    // once replaced /dev/null with a regular file)
    check_bundle_file(&target, &name, mode)?;
    let _lock = if mode == Mode::Write { Some(lock(&target, &name)?) } else { None };
    // again under the lock: the file may have been created or replaced meanwhile
    check_bundle_file(&target, &name, mode)?;
    let removed_temps = if mode == Mode::Write { remove_stale_temps(&target) } else { Vec::new() };

    let old = match std::fs::metadata(&target) {
        Ok(m) => Some((crate::contract::read_json_file(&target, crate::contract::json_max_bytes()?)?, m.permissions())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::input(format!("{name}: cannot read: {e}"))),
    };
    let old_text = match &old {
        Some((bytes, _)) => Some(std::str::from_utf8(bytes).map_err(|e| {
            let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
            Error::input(format!("{name}: line {line}: not UTF-8 text"))
        })?),
        None => None,
    };
    let (new_text, merged) = merge_text(old_text, &name, docs)?;
    let changed = old_text != Some(new_text.as_str());
    let mut written = false;
    if mode == Mode::Write && changed {
        write_atomic(&target, new_text.as_bytes(), old.as_ref().map(|(_, p)| p.clone()), &name)?;
        written = true;
    }
    let (schema, tool) = BundleMergeDoc::header();
    let report = BundleMergeDoc {
        schema,
        tool,
        bundle: name,
        mode: match mode {
            Mode::Write => "write",
            Mode::Check => "check",
            Mode::Stdout => "stdout",
        }
        .into(),
        created: old_text.map(|t| t.trim().is_empty()).unwrap_or(true),
        changed,
        written,
        bytes_before: old.as_ref().map(|(b, _)| b.len() as u64),
        bytes_after: new_text.len() as u64,
        documents: merged,
    };
    Ok(MergeOutcome { report, bundle_text: new_text, removed_temps })
}

/// The bundle must be a regular file (or absent); to be written it must be writable by this user and have
/// one name: replacing a file with several hard links would leave the other names holding the old bundle.
fn check_bundle_file(target: &Path, name: &str, mode: Mode) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::input(format!("{name}: cannot read: {e}"))),
    };
    if !m.file_type().is_file() {
        return Err(Error::input(format!(
            "{name}: is {}, not a bundle file (bundle-merge reads and replaces regular files only; nothing was touched)",
            crate::contract::file_kind(&m.file_type())
        ))
        .with_arg("BUNDLE"));
    }
    if mode != Mode::Write {
        return Ok(());
    }
    let perm = m.mode() & 0o7777;
    let c_path = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).ok();
    let writable = c_path.map(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0).unwrap_or(false);
    if m.permissions().readonly() || !writable {
        return Err(Error::input(format!(
            "{name}: is read-only for you (mode {perm:04o}): refusing to replace it; make it writable (chmod u+w) or use --stdout"
        ))
        .with_arg("BUNDLE"));
    }
    if m.nlink() > 1 {
        return Err(Error::input(format!(
            "{name}: has {} hard links: an atomic replace would break them (the other names would keep the old bundle); refusing. Merge into one copy (cp, then bundle-merge the copy), or use --stdout",
            m.nlink()
        ))
        .with_arg("BUNDLE"));
    }
    Ok(())
}

/// Remove the temporary files (`.BUNDLE.XXXXXX.tmp`) that a killed earlier run left beside the bundle. Called
/// under the lock, so no live run is writing one. Returns what it removed.
fn remove_stale_temps(target: &Path) -> Vec<PathBuf> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(file_name) = target.file_name().map(|f| f.to_string_lossy().to_string()) else { return Vec::new() };
    let prefix = format!(".{file_name}.");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return out };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        let Some(mid) = n.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")) else { continue };
        let is_ours = mid.len() == TEMP_RAND_LEN && mid.bytes().all(|b| b.is_ascii_alphanumeric());
        if is_ours && e.file_type().map(|t| t.is_file()).unwrap_or(false) && std::fs::remove_file(e.path()).is_ok() {
            out.push(e.path());
        }
    }
    out
}

/// Random characters in a temporary file's name (`.BUNDLE.XXXXXX.tmp`).
const TEMP_RAND_LEN: usize = 6;

/// The sidecar lock file of a bundle: `bundle.json` → `bundle.json.lock`, present only while a merge holds it.
pub fn lock_path(bundle: &Path) -> PathBuf {
    let mut s = bundle.as_os_str().to_os_string();
    s.push(".lock");
    PathBuf::from(s)
}

/// The exclusive lock on `BUNDLE.lock`: dropping it unlinks the lock file, then releases the lock, so nothing
/// stays beside the bundle (issue #41: an empty `.lock` was left beside every bundle). Safe with parallel
/// merges because [`lock`] only counts a lock as taken when the path still names the file it locked: a merge
/// that waited on a file unlinked meanwhile opens the path again.
pub struct BundleLock {
    path: PathBuf,
    _file: File,
}

impl Drop for BundleLock {
    fn drop(&mut self) {
        // unlinked while still held (the file is closed, and the lock released, after this body)
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Take the exclusive lock on `BUNDLE.lock`. The lock file is opened without following a symbolic link
/// (`O_NOFOLLOW`: a dangling link once made bundle-merge create its target, anywhere the user may write) and
/// without blocking (`O_NONBLOCK`: a FIFO once hung it forever); anything but a regular file is exit 2 naming it.
/// Once locked, the path must still name the same file (same device and inode, not a link): otherwise the holder
/// before us unlinked it on release and we try again on the path as it is now.
fn lock(bundle: &Path, name: &str) -> Result<BundleLock> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let lp = lock_path(bundle);
    let refuse = |what: &str| {
        Error::input(format!(
            "{name}: the lock file {} is {what}, not a regular file: refusing to use it (nothing was touched); remove it, bundle-merge creates it afresh",
            lp.display()
        ))
        .with_arg("BUNDLE")
    };
    loop {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&lp)
            .map_err(|e| match std::fs::symlink_metadata(&lp) {
                // O_NOFOLLOW on a link: ELOOP; a FIFO without a reader: ENXIO; a directory: EISDIR
                Ok(m) if !m.is_file() => refuse(crate::contract::file_kind(&m.file_type())),
                _ => Error::env(format!("{name}: cannot create the lock file {}: {e}", lp.display())),
            })?;
        let m =
            f.metadata().map_err(|e| Error::env(format!("{name}: cannot read the lock file {}: {e}", lp.display())))?;
        if !m.is_file() {
            return Err(refuse(crate::contract::file_kind(&m.file_type())));
        }
        f.lock().map_err(|e| Error::env(format!("{name}: cannot lock {}: {e}", lp.display())))?;
        match std::fs::symlink_metadata(&lp) {
            Ok(now) if now.is_file() && (now.dev(), now.ino()) == (m.dev(), m.ino()) => {
                return Ok(BundleLock { path: lp, _file: f })
            }
            // unlinked (or replaced) by the holder before us: this lock guards nothing any more
            _ => continue,
        }
    }
}

fn write_atomic(target: &Path, bytes: &[u8], perms: Option<std::fs::Permissions>, name: &str) -> Result<()> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = target.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_else(|| "bundle".into());
    let env = |what: &str, e: std::io::Error| Error::env(format!("{name}: {what}: {e}"));
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}."))
        .rand_bytes(TEMP_RAND_LEN)
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| env("cannot create a temporary file beside it", e))?;
    tmp.write_all(bytes).map_err(|e| env("cannot write", e))?;
    let perms = perms.unwrap_or_else(|| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::Permissions::from_mode(0o644)
    });
    tmp.as_file().set_permissions(perms).map_err(|e| env("cannot set permissions", e))?;
    tmp.as_file().sync_all().map_err(|e| env("cannot fsync", e))?;
    tmp.persist(target).map_err(|e| env("cannot rename into place", e.error))?;
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(v: Value) -> DocIn {
        DocIn { value: v, source: "t.json".into(), line: 1 }
    }
    fn gate(verdict: &str) -> Value {
        json!({"schema": "nsyskit.gate/v1", "tool": {"name": "gate-check", "version": "0"}, "verdict": verdict})
    }

    #[test]
    fn a_new_bundle_is_pretty_and_merging_again_changes_nothing() {
        let (t1, placed) = merge_text(None, "b.json", &[doc(gate("RETRY"))]).unwrap();
        assert_eq!(placed[0].places, vec!["kernel_profile.gates"]);
        let v: Value = serde_json::from_str(&t1).unwrap();
        assert_eq!(v["kernel_profile"]["gates"]["verdict"], "RETRY");
        assert!(t1.starts_with("{\n  \"kernel_profile\": {\n    \"gates\": {\n      \"schema\""), "{t1}");
        assert!(t1.ends_with("}\n"));
        let (t2, _) = merge_text(Some(&t1), "b.json", &[doc(gate("RETRY"))]).unwrap();
        assert_eq!(t1, t2);
        // the same bundle grown in two runs equals one run with both documents
        let p = json!({"schema": "nsyskit.provenance/v1", "tool": {"name": "nsys-resolve", "version": "0"}, "x": 1});
        let (t3, _) = merge_text(Some(&t1), "b.json", &[doc(p.clone())]).unwrap();
        let (t4, _) = merge_text(None, "b.json", &[doc(gate("RETRY")), doc(p)]).unwrap();
        assert_eq!(t3, t4);
    }

    #[test]
    fn untouched_text_stays_byte_identical() {
        let old = "{\n    \"id\": 12345678901234567890,\n    \"x\": 1.0,\n    \"s\": \"a\\u00e9\\n\",\n    \"kernel_profile\": {\"keep\": [1.50, 2e3]},\n    \"z\": null\n}";
        let (new, _) = merge_text(Some(old), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert!(new.starts_with("{\n    \"id\": 12345678901234567890,\n    \"x\": 1.0,\n    \"s\": \"a\\u00e9\\n\",\n    \"kernel_profile\": {\"keep\": [1.50, 2e3],\"gates\": {\"schema\":\"nsyskit.gate/v1\","), "{new}");
        assert!(new.ends_with("},\n    \"z\": null\n}"), "{new}");
        let (again, _) = merge_text(Some(&new), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert_eq!(new, again);
        let (changed, _) = merge_text(Some(&new), "b.json", &[doc(gate("RETRY"))]).unwrap();
        assert!(changed.contains("\"verdict\":\"RETRY\""));
        assert!(changed.starts_with("{\n    \"id\": 12345678901234567890,\n    \"x\": 1.0,"));
    }

    #[test]
    fn pretty_insertion_follows_the_sibling_indentation_and_crlf() {
        let old = "{\r\n\t\"a\": 1,\r\n\t\"kernel_profile\": {\r\n\t\t\"b\": 2\r\n\t}\r\n}\r\n";
        let (new, _) = merge_text(Some(old), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert!(new.starts_with("{\r\n\t\"a\": 1,\r\n\t\"kernel_profile\": {\r\n\t\t\"b\": 2,\r\n\t\t\"gates\": {\r\n\t\t\t\"schema\": \"nsyskit.gate/v1\","), "{new:?}");
        assert!(new.ends_with("\r\n\t\t}\r\n\t}\r\n}\r\n"), "{new:?}");
        let v: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(v["kernel_profile"]["b"], 2);
    }

    #[test]
    fn compact_bundles_stay_compact() {
        let old = "{\"a\":1.0,\"kernel_profile\":{}}";
        let (new, _) = merge_text(Some(old), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert!(new.starts_with("{\"a\":1.0,\"kernel_profile\":{\"gates\":{\"schema\":"), "{new}");
        assert!(!new.contains('\n'));
        let (again, _) = merge_text(Some(&new), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert_eq!(new, again);
        let (top, _) = merge_text(Some("{\"a\":1}"), "b.json", &[doc(gate("PASS"))]).unwrap();
        assert!(top.starts_with("{\"a\":1,\"kernel_profile\":{\"gates\":{"), "{top}");
    }

    #[test]
    fn bad_bundles_and_documents_are_input_errors() {
        let e = |old: &str| merge_text(Some(old), "b.json", &[doc(gate("PASS"))]).unwrap_err().message;
        assert!(e("[1]").contains("$: the bundle must be a JSON object, found an array"));
        assert!(e("{\"a\":").starts_with("b.json: line 1 column 5: not valid JSON"));
        assert!(e("{\n\"kernel_profile\": 3}").contains("line 2: $.kernel_profile: must be an object"));
        assert!(e("{\"kernel_profile\": {}, \"kernel_profile\": {}}").contains("duplicate key"));
        let bad = |v: Value| merge_text(None, "b.json", &[doc(v)]).unwrap_err().message;
        assert!(bad(json!({"schema": "nsyskit.nope/v1"})).contains("no place for \"nsyskit.nope/v1\""));
        assert!(bad(json!({"schema": "other/v1"})).contains("not an nsyskit schema"));
        assert!(bad(json!({"a": 1})).contains("$.schema: missing"));
        assert!(bad(json!([1])).contains("must be a JSON object"));
        assert!(bad(json!({"schema": "nsyskit.stats/v1"})).contains("$.report"));
        assert!(bad(json!({"schema": "nsyskit.bundle-merge/v1"})).contains("no place"));
    }

    #[test]
    fn comparison_keys_are_stable() {
        assert_eq!(comparison_key(&json!({"a": {"path": "x.sqlite"}, "b": "y.sqlite"})), "x.sqlite vs y.sqlite");
        let k = comparison_key(&json!({"schema": "nsyskit.compare/v1", "q": 1}));
        assert!(k.starts_with("doc-") && k.len() == 20);
        assert_eq!(k, comparison_key(&json!({"schema": "nsyskit.compare/v1", "q": 1})));
    }

    #[test]
    fn every_kind_has_a_place() {
        for k in [
            "stats",
            "gate",
            "ranges",
            "readiness",
            "provenance",
            "compare",
            "report",
            "serve-capture",
            "pod-attach",
            "question",
            "benchmark",
            "baseline",
        ] {
            assert!(placement(k).is_some(), "{k}");
        }
        assert!(placement("bundle-merge").is_none());
    }
}
