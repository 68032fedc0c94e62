//! G0 profiler health: the console log (`--log`), the export's DIAGNOSTIC_EVENT rows and recorded environment.
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
// G0 profiler health

// The lines understood and what each is evidence for live in crate::health_log (one table there); this gate
// feeds it the console log, the export's DIAGNOSTIC_EVENT rows, the export's recorded environment
// (CUDA_INJECTION64_PATH) and driver version, and adds the export-level check of NVTX recorded but empty.

use crate::health_log::{self, CudaData, HealthScan};

/// nsys's message in StringIds when it cannot read an NVTX library's payloads (measured: pip nvtx 0.2.17
/// under nsys 2023.4.4).
pub const NVTX_INCOMPATIBLE: &str = "NVTX binary payload extension is incompatible";

/// Read everything G0 looks at into one scan; returns the scan and the sources read.
pub fn health_scan(cx: &Context) -> Result<(HealthScan, Vec<String>)> {
    let mut scan = HealthScan::new();
    let mut sources = Vec::new();
    if let Some((path, text)) = &cx.log {
        scan.text(path, text);
        sources.push(format!("console log {path}"));
    }
    if let Some(e) = cx.export {
        if e.has_table(schema::DIAGNOSTIC_EVENT) {
            sources.push(format!("{} DIAGNOSTIC_EVENT", e.name()));
        }
        for crate::export::rows::DiagnosticRow { timestamp: ts, severity, text } in e.diagnostic_events()? {
            // severity 3 = Error (ENUM_DIAGNOSTIC_SEVERITY_LEVEL); warnings such as "No CUDA events collected"
            // for a process that never used CUDA are normal and ignored.
            let at = format!("{}: DIAGNOSTIC_EVENT t={ts} ns severity={severity}", e.name());
            scan.line(&at, &text.unwrap_or_default(), severity >= 3);
        }
        // the recorded environment: nsys 2025.3.1 leaves CUDA_INJECTION64_PATH out of the
        // PROCESS_n:ENVIRONMENT_VARIABLE rows but keeps it in TARGET_INFO_SYSTEM_ENV DeviceEnvironment (measured)
        let injections_before = scan.injections.len();
        for (name, value) in e.capture_settings()? {
            if name.ends_with(":ENVIRONMENT_VARIABLE") {
                let v = value.unwrap_or_default();
                if v.starts_with("CUDA_INJECTION64_PATH") {
                    scan.line(&format!("{}: {} {name}", e.name(), schema::META_DATA_CAPTURE), &v, false);
                }
            }
        }
        for (name, value) in e.system_env()? {
            let v = value.unwrap_or_default();
            if name == "DeviceEnvironment" {
                for entry in v.split(';').filter(|x| x.starts_with("CUDA_INJECTION64_PATH")) {
                    let at = format!("{}: {} DeviceEnvironment", e.name(), schema::TARGET_INFO_SYSTEM_ENV);
                    scan.line(&at, entry, false);
                }
            } else if name == "CudaDriverVersion" {
                let at = format!("{}: {} CudaDriverVersion", e.name(), schema::TARGET_INFO_SYSTEM_ENV);
                scan.export_driver_version(&at, &v);
            }
        }
        if scan.injections.len() > injections_before {
            sources.push(format!("{} recorded environment", e.name()));
        }
        // NVTX recorded but empty: nsys's own message in StringIds and no range row
        if e.nvtx_range_rows()? == Some(0) {
            let msgs = e.string_ids_where(|v| v.contains(NVTX_INCOMPATIBLE).then(|| v.to_string()))?;
            if let Some((id, msg)) = msgs.into_iter().min_by_key(|(id, _)| *id) {
                let rows = e.count_rows(schema::NVTX_EVENTS)?;
                scan.line(
                    &format!(
                        "{}: {} id {id} ({}: {rows} row(s), no range)",
                        e.name(),
                        schema::STRING_IDS,
                        schema::NVTX_EVENTS
                    ),
                    &msg,
                    false,
                );
                sources.push(format!("{} {}", e.name(), schema::STRING_IDS));
            }
        }
    }
    Ok((scan, sources))
}

/// Whether the export holds the CUDA data it was asked for.
fn cuda_data(e: Option<&Export>) -> Result<CudaData> {
    let Some(e) = e else { return Ok(CudaData::Unknown) };
    let requested = e.capture_settings()?.iter().any(|(n, v)| {
        schema::capture_keys::is(n, schema::capture_keys::COLLECT_CUDA_TRACE) && v.as_deref() == Some("true")
    }) || e.has_table(schema::RUNTIME);
    if !requested {
        return Ok(CudaData::Unknown);
    }
    let rows = e.count_rows(schema::RUNTIME)? + e.count_rows(schema::KERNEL)?;
    Ok(if rows > 0 { CudaData::Present } else { CudaData::Missing })
}

pub fn g0_profiler_health(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G0", "profiler-health", "findings");
    let (scan, sources) = health_scan(cx)?;
    if sources.is_empty() {
        return Ok(g.skip(
            "nothing to read: no --log given and the export has no DIAGNOSTIC_EVENT table (nsys 2023.4 writes none); pass the nsys console log with --log",
        ));
    }
    let mut d = health_log::diagnose(&scan, cuda_data(cx.export)?);
    // what nsys's failed analysis lost that the export shows: NVTX events whose name it could not resolve
    if let Some(e) = cx.export.filter(|_| scan.of("analysis-failed").next().is_some()) {
        let unknown = e.nvtx_unknown_names()?;
        if unknown > 0 {
            d.causes.push(format!(
                "{unknown} NVTX event(s) of {} are named {:?}: nsys lost their strings",
                e.name(),
                crate::export::nvtx::UNKNOWN_NAME
            ));
        }
    }
    let n = d.errors.len();
    let mut g = if d.retry() {
        g.decide(
            true,
            n as f64,
            Some(0.0),
            format!("{n} profiler error line(s) in {}; {}", sources.join(" and "), d.causes.join("; ")),
        )
    } else {
        let mut r = format!("no profiler error in {}", sources.join(" and "));
        if !d.notes.is_empty() {
            r.push_str(&format!("; {}", d.notes.join("; ")));
        }
        g.decide(false, n as f64, Some(0.0), r)
    };
    g.evidence = scan.findings.iter().take(20).map(|f| format!("{} [{}] {}", f.at, f.class, f.text)).collect();
    if scan.findings.len() > 20 {
        g.evidence.push(format!("… {} more", scan.findings.len() - 20));
    }
    if d.retry() {
        g.evidence.extend(d.notes.iter().cloned());
    }
    Ok(g)
}
