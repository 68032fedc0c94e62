//! Label prefixes and families: what `--range-prefix` can be given, and what to say when the one given matches
//! nothing (issue #41: a mistyped prefix used to give "(no matching ranges)", exit 0, and no hint).
//!
//! A label's family is its prefix ([`label_prefix`]: `vibeserve.` for `vibeserve.engine.iteration`, `aten::`
//! for `aten::mm`), else its NVTX domain (`TSL:` for `TSL:Thunk:…`), else the folded label itself
//! (`ProfilerStep#<n>`). Framework ranges count here: a user may well want `--range-prefix aten::`.

/// A label's prefix: the text before its first `.` (a dotted name such as `hf.decode_step`), else before its
/// first `::` (`aten::mm`); None for a label with neither, or with a space before the separator.
pub fn label_prefix(label: &str) -> Option<String> {
    let dot = label.find('.');
    let colons = label.find("::");
    let (i, sep) = match (dot, colons) {
        (Some(d), Some(c)) if c < d => (c, "::"),
        (Some(d), _) => (d, "."),
        (None, Some(c)) => (c, "::"),
        (None, None) => return None,
    };
    let head = &label[..i];
    (!head.is_empty() && !head.contains(char::is_whitespace)).then(|| format!("{head}{sep}"))
}

/// The family of one label (see the module documentation).
pub fn family(label: &str) -> String {
    if let Some(p) = label_prefix(label) {
        return p;
    }
    if let Some(i) = label.find(':') {
        let head = &label[..i];
        if !head.is_empty() && !head.contains(char::is_whitespace) {
            return format!("{head}:");
        }
    }
    crate::labels::fold_label(label).label
}

/// One family: its text, its distinct (folded) labels and its occurrences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub family: String,
    pub labels: u64,
    pub occurrences: u64,
}

/// The families of a capture's range occurrences (one label per occurrence), most occurrences first (ties:
/// byte order).
pub fn families<'a>(occurrence_labels: impl IntoIterator<Item = &'a str>) -> Vec<Family> {
    let mut counts: crate::fx::FxMap<&str, u64> = Default::default();
    for l in occurrence_labels {
        *counts.entry(l).or_default() += 1;
    }
    let mut per: std::collections::BTreeMap<String, (std::collections::BTreeSet<String>, u64)> = Default::default();
    for (raw, n) in counts {
        let folded = crate::labels::fold_label(raw).label;
        let e = per.entry(family(&folded)).or_default();
        e.0.insert(folded);
        e.1 += n;
    }
    let mut v: Vec<Family> = per
        .into_iter()
        .map(|(family, (labels, occurrences))| Family { family, labels: labels.len() as u64, occurrences })
        .collect();
    v.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.family.cmp(&b.family)));
    v
}

/// How many families a hint lists.
pub const HINT_LIMIT: usize = 6;

/// The start of every [`no_match_hint`], so that a tool can find the note in its document.
pub const NO_MATCH: &str = "--range-prefix ";

/// When no label of the capture starts with `prefix`: one line naming the families that exist (the most
/// frequent [`HINT_LIMIT`], with occurrences and distinct labels) and the one the user probably meant; None
/// when some label starts with `prefix` (the ranges were left out by something else, such as `--window`).
pub fn no_match_hint<'a>(prefix: &str, occurrence_labels: impl IntoIterator<Item = &'a str> + Clone) -> Option<String> {
    if occurrence_labels.clone().into_iter().any(|l| l.starts_with(prefix)) {
        return None;
    }
    let fams = families(occurrence_labels.clone());
    if fams.is_empty() {
        return Some(format!("{NO_MATCH}{prefix:?} matches no label: the capture has no NVTX range"));
    }
    let listed: Vec<String> = fams
        .iter()
        .take(HINT_LIMIT)
        .map(|f| {
            let s = if f.labels == 1 { "" } else { "s" };
            format!("{} ({} occurrences, {} label{s})", f.family, f.occurrences, f.labels)
        })
        .collect();
    let more = match fams.len().saturating_sub(HINT_LIMIT) {
        0 => String::new(),
        n => format!(", … {n} more"),
    };
    let meant = meant(prefix, occurrence_labels, &fams)
        .map(|m| format!("; did you mean --range-prefix {m}?"))
        .unwrap_or_default();
    Some(format!(
        "{NO_MATCH}{prefix:?} matches no label; label families in the capture (most occurrences first): {}{more}{meant}",
        listed.join(", ")
    ))
}

/// The prefix the user probably meant: a label's head up to where it contains `prefix` (`engine.` →
/// `vibeserve.engine.`), else the family closest to `prefix` by edit distance (case ignored) when at most a
/// third of it differs (`vibserve.` → `vibeserve.`).
fn meant<'a>(prefix: &str, labels: impl IntoIterator<Item = &'a str>, fams: &[Family]) -> Option<String> {
    if !prefix.is_empty() {
        let mut heads: Vec<String> = labels
            .into_iter()
            .filter_map(|l| l.find(prefix).map(|i| crate::labels::fold_label(&l[..i + prefix.len()]).label))
            .collect();
        heads.sort();
        heads.dedup();
        if let Some(h) = heads.into_iter().min_by_key(|h| h.len()) {
            return Some(h);
        }
    }
    let p = prefix.to_lowercase();
    let best = fams
        .iter()
        .map(|f| {
            let fam = f.family.to_lowercase();
            // a longer family is compared on its first |prefix| characters plus one (`vibserve` ~ `vibeserve.`)
            let head: String = fam.chars().take(p.chars().count() + 1).collect();
            (edit_distance(&p, &fam).min(edit_distance(&p, &head)), f)
        })
        .min_by_key(|(d, _)| *d)?;
    (best.0 * 3 <= p.chars().count().max(3)).then(|| best.1.family.clone())
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_fold_and_count() {
        let occ = ["vibeserve.request.1", "vibeserve.request.2", "vibeserve.engine.iteration", "aten::mm, op_id = 3"];
        let f = families(occ.iter().copied());
        assert_eq!(f[0], Family { family: "vibeserve.".into(), labels: 2, occurrences: 3 });
        assert_eq!(f[1], Family { family: "aten::".into(), labels: 1, occurrences: 1 });
        assert_eq!(family("TSL:Thunk:#hlo_op=x#"), "TSL:");
        assert_eq!(family("ProfilerStep#12"), "ProfilerStep#<n>");
    }

    #[test]
    fn the_hint_names_what_was_meant() {
        let occ = ["vibeserve.engine.iteration", "vibeserve.graph.replay", "ProfilerStep#1"];
        let h = no_match_hint("vibserve.", occ.iter().copied()).unwrap();
        assert!(h.contains("vibeserve. (2 occurrences, 2 labels)"), "{h}");
        assert!(h.ends_with("did you mean --range-prefix vibeserve.?"), "{h}");
        let h = no_match_hint("engine.", occ.iter().copied()).unwrap();
        assert!(h.ends_with("did you mean --range-prefix vibeserve.engine.?"), "{h}");
        assert!(!no_match_hint("zzzzzz", occ.iter().copied()).unwrap().contains("did you mean"));
        assert_eq!(no_match_hint("vibeserve.graph", occ.iter().copied()), None);
        assert!(no_match_hint("x", std::iter::empty()).unwrap().ends_with("has no NVTX range"));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("vibserve.", "vibeserve."), 1);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
