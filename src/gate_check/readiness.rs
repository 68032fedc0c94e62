//! G8 NVTX readiness (with `--readiness`).
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
// G8 NVTX readiness (only with --readiness; the analysis is crate::nvtx_readiness, `nvtx-readiness`)

/// G8: can the capture's NVTX ranges attribute engine time to named phases? PASS when `nvtx-readiness` says
/// READY, RETRY with its reason otherwise; measured = the opaque share of `P.engine.iteration` wall time.
pub fn g8_readiness(cx: &Context) -> Result<GateResult> {
    let g = GateResult::new("G8", "nvtx-readiness", "share");
    let Some(ropts) = &cx.opts.readiness else { return Ok(g.skip("not requested (--readiness)")) };
    let Some(e) = cx.export else { return Ok(g.skip("no export to read (a .qdstrm: see G2)")) };
    let doc = crate::nvtx_readiness::analyze(e, ropts)?;
    let retry = doc.verdict == crate::nvtx_readiness::ReadinessVerdict::Retry;
    let mut g = match doc.iterations.opaque_share {
        Some(share) => g.decide(retry, share, Some(ropts.max_opaque_share), doc.reason.clone()),
        None => {
            let mut g = g.decide(true, 0.0, Some(ropts.max_opaque_share), doc.reason.clone());
            g.measured = None;
            g
        }
    };
    g.at_ns = doc.largest_opaque_gaps.first().map(|gap| gap.start);
    let present: Vec<&str> = doc.taxonomy.iter().filter(|t| t.present).map(|t| t.name.as_str()).collect();
    let missing: Vec<&str> = doc.taxonomy.iter().filter(|t| !t.present).map(|t| t.name.as_str()).collect();
    let name = e.name();
    if let Some(p) = &doc.source.range_prefix {
        g.evidence.push(format!(
            "{name}: range prefix {p}{}; taxonomy present: {}; missing: {}",
            if doc.source.range_prefix_inferred { " (inferred)" } else { "" },
            if present.is_empty() { "none".to_string() } else { present.join(", ") },
            if missing.is_empty() { "none".to_string() } else { missing.join(", ") }
        ));
    }
    if doc.iterations.occurrences > 0 {
        g.evidence.push(format!(
            "{name}: {} iterations, wall {} ns, opaque {} ns, {} without a child range",
            doc.iterations.occurrences,
            doc.iterations.wall_ns,
            doc.iterations.opaque_ns,
            doc.iterations.without_children
        ));
    }
    if let Some(gap) = doc.largest_opaque_gaps.first() {
        g.evidence.push(format!(
            "{name}: largest opaque gap {} ns at {} (after {}, before {})",
            gap.duration_ns,
            gap.start,
            gap.after.as_deref().unwrap_or("the iteration start"),
            gap.before.as_deref().unwrap_or("the iteration end")
        ));
    }
    for h in doc.naming.labels_with_ids.iter().take(10) {
        g.evidence.push(format!(
            "{name}: labels carry ids: {} ({} labels, {} occurrences)",
            h.pattern, h.labels, h.occurrences
        ));
    }
    if doc.naming.labels_with_ids.len() > 10 {
        g.evidence.push(format!(
            "{name}: … {} more id-bearing label groups (nvtx-readiness lists them)",
            doc.naming.labels_with_ids.len() - 10
        ));
    }
    if let Some(p) = &doc.suggested_prefix {
        g.evidence.push(format!(
            "{name}: suggested range prefix: {p} (prefixes seen: {})",
            doc.prefixes_seen.iter().take(5).map(|x| x.prefix.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    for l in &doc.naming.outside_prefix_on_engine_threads {
        g.evidence.push(format!(
            "{name}: label outside the prefix on an engine thread: {} ({} occurrences)",
            l.label, l.occurrences
        ));
    }
    for d in &doc.naming.labels_at_several_depths {
        let depths: Vec<String> = d.depths.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        g.evidence.push(format!("{name}: label at several depths: {} ({})", d.label, depths.join(", ")));
    }
    for s in &doc.unenclosed_syncs.by_api {
        g.evidence.push(format!(
            "{name}: blocking sync outside any range under the prefix: {} × {} ({} ns)",
            s.calls, s.api, s.total_ns
        ));
    }
    if let Some(n) = &doc.cuda_graphs.note {
        g.evidence.push(n.clone());
    }
    Ok(g)
}
