//! The report's headline: the first line a person reads. It says whether a class stands, then the biggest
//! measured fact and where the time went, even when no single class wins (`mixed_or_unclear` alone says only what
//! is not the case), and the range rules' reading where it differs from the class that stands.

use super::{dur, pct, ReportDoc};

/// The set-apart steps (warm-up and outliers) are the headline's first fact from this share of all steps' wall.
pub const SET_APART_SHARE: f64 = 0.25;

/// The headline of `doc` (after the class, the step budget and the range decision are settled).
pub fn headline(doc: &ReportDoc) -> String {
    let mut parts: Vec<String> = Vec::new();
    let d = &doc.decision;
    if doc.class == crate::step_budget::UNRELIABLE {
        let why = d.reason.split("; the class").next().unwrap_or(&d.reason);
        // "gate-check said RETRY (where it was read): G…" → "G…"
        let why = why.strip_prefix("gate-check said RETRY (").and_then(|r| r.split_once("): ")).map_or(why, |(_, r)| r);
        parts.push(format!("no class stands ({}): {}", d.rule, clip(why, 200)));
    }
    if let Some(sb) = &doc.step_budget {
        let a = &sb.set_apart;
        let n = a.warmup + a.outliers;
        if n > 0 && a.wall_share.is_some_and(|x| x >= SET_APART_SHARE) {
            parts.push(format!(
                "{n} of {} {} steps ({} warm-up, {} outlier) take {} of all steps' wall ({}), the GPU busy {} of their time",
                sb.steps,
                sb.step_label,
                a.warmup,
                a.outliers,
                pct(a.wall_share),
                dur(a.wall_ns),
                pct(a.gpu_busy_share)
            ));
        }
        if let Some(top) = sb.verdict.rows.first().filter(|r| r.share.is_some()) {
            let median = sb.distributions.get("wall").map(|w| format!(" (median step {})", dur(w.median)));
            parts.push(format!(
                "in the typical step{}, {} is the largest part: {} of the wall ({} by the step budget)",
                median.unwrap_or_default(),
                top.name,
                pct(top.share),
                sb.verdict.class
            ));
        }
    } else if doc.class != crate::step_budget::UNRELIABLE {
        // the device picture's reason opens with why no phase can be attributed: its fact follows "so the verdict
        // rests on what the GPUs did: "
        let fact = d.reason.split_once("rests on what the GPUs did: ").map_or(d.reason.as_str(), |(_, f)| f);
        let fact = fact.split("; decided by:").next().unwrap_or(fact);
        parts.push(format!("{}: {}", d.rule, clip(fact, 220)));
    }
    let stands = d.would_be.as_ref().map_or(&d.class, |w| &w.class);
    if let Some(rd) = doc.range_decision.as_ref().filter(|rd| rd.class != *stands && rd.class != doc.class) {
        parts.push(format!(
            "the range rules alone read {} ({}) for {}",
            rd.class,
            rd.rule,
            rd.primary_label.as_deref().map(|l| format!("{l:?}")).unwrap_or_else(|| "the capture".into())
        ));
    }
    let mut h = format!("{}: {}", doc.class, parts.join("; "));
    if parts.is_empty() {
        h.push_str(&clip(&d.reason, 220));
    }
    h
}

/// `s` cut at a character boundary near `max` bytes, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
