//! G1 trace settings: node-level CUDA graph tracing, from the export's metadata, the log and the provenance.
#![allow(unused_imports)]
use std::path::{Path, PathBuf};

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Error, Result, Tool};
use crate::export::schema::{self, DeviceKind};
use crate::export::{self, Export};

use super::*;

// ---------------------------------------------------------------------------------------------------------
// G1 node-level graph tracing

/// `--cuda-graph-trace` mode and CUDA tracing as recorded by one source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceSettings {
    /// `node` or `graph` (lower case), None when the source does not say.
    pub graph_mode: Option<String>,
    /// Whether CUDA tracing was on, None when the source does not say.
    pub cuda_trace: Option<bool>,
    /// Where it was read.
    pub from: Vec<String>,
}

/// Read `--cuda-graph-trace=X` and `--trace=LIST` / `-t LIST` out of a flag string.
pub fn settings_from_flags(flags: &str) -> TraceSettings {
    let mut s = TraceSettings::default();
    let graph = Regex::new(r"--cuda-graph-trace[= ]+'?([A-Za-z]+)").unwrap();
    if let Some(m) = graph.captures(flags) {
        s.graph_mode = Some(m[1].to_ascii_lowercase());
    }
    let trace = Regex::new(r#"(?:^|[\s'"])(?:--trace|-t)[= ]+([A-Za-z0-9_,-]+)"#).unwrap();
    if let Some(m) = trace.captures(flags) {
        s.cuda_trace = Some(m[1].split(',').any(|t| t.eq_ignore_ascii_case("cuda")));
    }
    s
}

/// From META_DATA_CAPTURE: `PROCESS_n:CUDA_GRAPH_TRACE_OPTIONS:MODE`, `PROCESS_n:COLLECT_CUDA_TRACE` (or the bare
/// names: [`crate::export::schema::capture_keys::is`]); then the
/// recorded `PROCESS_n:COMMAND` / `PROCESS_n:ARGUMENT_m` searched for `--cuda-graph-trace` (set when the
/// profiled command is itself a launcher that carries nsys flags).
pub fn settings_from_metadata(e: &Export) -> Result<(TraceSettings, TraceSettings)> {
    let rows = e.capture_settings()?;
    let mut md = TraceSettings::default();
    // the mode with the one definition of the export layer; its evidence line at the row's place
    let mode = e.graph_trace_mode()?;
    let mut cmd_parts: Vec<(String, String)> = Vec::new();
    for (name, value) in &rows {
        let v = value.clone().unwrap_or_default();
        if crate::export::schema::capture_keys::is(name, crate::export::schema::capture_keys::GRAPH_TRACE_MODE) {
            if let Some(m) = mode.as_ref().filter(|m| &m.key == name && md.graph_mode.is_none()) {
                md.graph_mode = Some(m.mode.clone());
                md.from.push(format!("{} {}={}", schema::META_DATA_CAPTURE, m.key, m.raw));
            }
        } else if crate::export::schema::capture_keys::is(name, crate::export::schema::capture_keys::COLLECT_CUDA_TRACE)
        {
            let on = v.eq_ignore_ascii_case("true");
            if md.cuda_trace != Some(true) {
                md.cuda_trace = Some(on);
                md.from.push(format!("{} {name}={v}", schema::META_DATA_CAPTURE));
            }
        } else if name.ends_with(":COMMAND") || name.contains(":ARGUMENT_") {
            cmd_parts.push((name.clone(), v));
        }
    }
    let joined = cmd_parts.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join(" ");
    let mut cmd = settings_from_flags(&joined);
    if cmd.graph_mode.is_some() || cmd.cuda_trace.is_some() {
        cmd.from.push(format!("{} COMMAND/ARGUMENT rows: {joined}", schema::META_DATA_CAPTURE));
    }
    Ok((md, cmd))
}

/// From an `nsyskit.provenance/v1` document: the capture flag string at `capture.flags` (a string, or an array
/// of strings joined with spaces), else `capture.flags_argv`/`argv`/`command`/`args` (empty or null values
/// do not count), else any string in the document
/// that mentions `--cuda-graph-trace`. The nsys default (`--cuda-graph-trace=graph`, CUDA traced) applies when
/// a flag string was found that does not set them.
pub fn settings_from_provenance(path: &str, doc: &serde_json::Value) -> TraceSettings {
    fn text_of(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(a) => Some(a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(" ")),
            _ => None,
        }
    }
    fn all_strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| all_strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| all_strings(x, out)),
            _ => {}
        }
    }
    // nsys-resolve writes the whole `nsys profile` argv to `capture.flags_argv` and the user's extra flags to
    // `capture.flags`: the argv first, then the first other key that sets --cuda-graph-trace, then any.
    let keys = ["flags_argv", "flags", "argv", "command", "args"];
    let texts: Vec<(String, String)> = keys
        .iter()
        .filter_map(|k| {
            doc.get("capture")
                .and_then(|c| c.get(*k))
                .and_then(text_of)
                .filter(|t| !t.trim().is_empty())
                .map(|t| (format!("capture.{k}"), t))
        })
        .collect();
    let mut found: Option<(String, String)> = texts
        .iter()
        .find(|(k, t)| k == "capture.flags_argv" || t.contains("--cuda-graph-trace"))
        .or(texts.first())
        .cloned();
    if found.is_none() {
        let mut strings = Vec::new();
        all_strings(doc, &mut strings);
        if let Some(s) = strings.into_iter().find(|s| s.contains("--cuda-graph-trace")) {
            found = Some(("a string mentioning --cuda-graph-trace".into(), s));
        }
    }
    let Some((key, flags)) = found else { return TraceSettings::default() };
    let mut s = settings_from_flags(&flags);
    let explicit = s.graph_mode.is_some();
    // nsys's defaults apply only to a whole `nsys profile` command line, not to a list of extra flags
    let whole = flags.split_whitespace().any(|w| w.trim_matches(|c| c == '\'' || c == '"') == "profile");
    let mut note = "";
    if whole {
        if s.graph_mode.is_none() {
            s.graph_mode = Some("graph".into()); // nsys default
            note = " (no --cuda-graph-trace: nsys default graph)";
        }
        if s.cuda_trace.is_none() {
            s.cuda_trace = Some(true); // nsys default --trace includes cuda
        }
    } else if !explicit {
        note = " (extra flags only: says nothing about --cuda-graph-trace)";
    }
    s.from.push(format!("{path} {key}: {flags}{note}"));
    s
}

/// Graph launches and node-level device rows in the export: [`crate::export::GraphFacts`], one definition
/// for every tool.
pub type GraphData = crate::export::GraphFacts;

pub fn graph_data(e: &Export) -> Result<GraphData> {
    e.graph_facts()
}

pub fn g1_graph_tracing(cx: &Context) -> Result<GateResult> {
    let mut g = GateResult::new("G1", "node-level-graph-tracing", "node-level device rows");
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let (md, cmd) = settings_from_metadata(e)?;
    let prov = cx.provenance.as_ref().map(|(p, d)| settings_from_provenance(p, d)).unwrap_or_default();
    // mode: metadata, else command/arguments, else provenance
    let (mode, mode_from) = if md.graph_mode.is_some() {
        (md.graph_mode.clone(), schema::META_DATA_CAPTURE)
    } else if cmd.graph_mode.is_some() {
        (cmd.graph_mode.clone(), "the recorded command and arguments")
    } else if prov.graph_mode.is_some() {
        (prov.graph_mode.clone(), "--provenance")
    } else {
        (None, "")
    };
    let cuda = md.cuda_trace.or(cmd.cuda_trace).or(prov.cuda_trace);
    let data = graph_data(e)?;
    g.evidence.extend(md.from.iter().cloned());
    g.evidence.extend(cmd.from.iter().cloned());
    g.evidence.extend(prov.from.iter().cloned());
    g.evidence.push(format!(
        "{}: cudaGraphLaunch calls {}, KERNEL/MEMCPY/MEMSET rows with graphNodeId {}, GRAPH_TRACE rows {}, runtime rows {}",
        e.name(),
        data.graph_launches,
        data.node_rows,
        data.graph_trace_rows,
        data.runtime_rows
    ));
    let measured = data.node_rows as f64;
    // rows beat metadata: nsys records COLLECT_CUDA_TRACE per process (false for a launcher such as torchrun
    // whose workers were traced), so CUDA rows in the export mean CUDA was traced, whatever a row says
    let cuda_rows = data.runtime_rows + data.device_rows + data.graph_trace_rows;
    if cuda_rows == 0 && (cuda == Some(false) || (cuda.is_none() && !e.has_table(schema::RUNTIME))) {
        let said = if cuda == Some(false) { ", and the recorded settings say CUDA tracing was off" } else { "" };
        return Ok(g.decide(
            true,
            measured,
            None,
            format!("the export holds no CUDA API or GPU row{said}: CUDA was not traced (or recorded nothing); capture with --trace=cuda,nvtx,osrt --cuda-graph-trace=node"),
        ));
    }
    if cuda_rows == 0 {
        // traced (as recorded), and nothing recorded: no replay to judge; G3 says what is missing
        return Ok(g.skip(format!(
            "CUDA was traced but the export holds no CUDA API or GPU row: no graph replay to judge (G3 decides); {} runtime rows",
            data.runtime_rows
        )));
    }
    if cuda == Some(false) {
        let said: Vec<String> = md
            .from
            .iter()
            .chain(cmd.from.iter())
            .chain(prov.from.iter())
            .filter(|f| f.contains("COLLECT_CUDA_TRACE") || f.contains("--trace"))
            .cloned()
            .collect();
        g.evidence.push(format!(
            "the recorded settings say CUDA tracing was off ({}) but the export holds {} CUDA runtime and {} GPU rows: CUDA was traced (a per-process setting, e.g. a launcher's; the rows decide)",
            said.join("; "),
            data.runtime_rows,
            data.device_rows + data.graph_trace_rows
        ));
    }
    let launches_hidden = data.graph_launches > 0 && data.node_rows == 0;
    match mode.as_deref() {
        // rows beat metadata: graph-level mode hides only the replays of graphs that were launched
        Some("graph") if data.graph_launches == 0 && data.graph_trace_rows == 0 => Ok(g.decide(
            false,
            measured,
            None,
            format!(
                "graph-level tracing (--cuda-graph-trace=graph, from {mode_from}; nsys's default), but this capture launched no CUDA graph (0 graph launches among {} CUDA runtime rows, 0 GRAPH_TRACE rows): no replayed kernel is hidden; an engine that replays CUDA graphs needs --cuda-graph-trace=node",
                data.runtime_rows
            ),
        )),
        Some("graph") => Ok(g.decide(
            true,
            measured,
            None,
            format!(
                "graph-level tracing (--cuda-graph-trace=graph, from {mode_from}): the {} graph launches' kernels are {}; re-capture with --cuda-graph-trace=node",
                data.graph_launches,
                if data.graph_trace_rows > 0 { format!("{} opaque GRAPH_TRACE rows", data.graph_trace_rows) } else { "not in the export".to_string() }
            ),
        )),
        _ if launches_hidden => Ok(g.decide(
            true,
            measured,
            None,
            format!(
                "{} cudaGraphLaunch calls but no KERNEL row has a graphNodeId: graph-level tracing ({}), the replayed work is {}; re-capture with --cuda-graph-trace=node",
                data.graph_launches,
                match mode.as_deref() {
                    Some(m) => format!("recorded mode {m} from {mode_from}"),
                    None => "mode not recorded".into(),
                },
                if data.graph_trace_rows > 0 { "opaque GRAPH_TRACE rows" } else { "invisible" }
            ),
        )),
        Some(m) => Ok(g.decide(
            false,
            measured,
            None,
            format!(
                "--cuda-graph-trace={m} (from {mode_from}), CUDA traced; {} cudaGraphLaunch calls, {} node-level device rows",
                data.graph_launches, data.node_rows
            ),
        )),
        None => Ok(g.decide(
            false,
            measured,
            None,
            if data.graph_launches == 0 {
                format!("graph-trace mode not recorded (no {} mode row, no flag in the command or --provenance), but the capture has no cudaGraphLaunch call: nothing is hidden", schema::META_DATA_CAPTURE)
            } else {
                format!("graph-trace mode not recorded, but the data is node level: {} node-level device rows for {} cudaGraphLaunch calls", data.node_rows, data.graph_launches)
            },
        )),
    }
}
