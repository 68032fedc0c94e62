//! The one label-folding rule shared by `sqlite-ranges`, `nvtx-readiness` and `report`.
//!
//! Third-party NVTX carries ids in its labels: PyTorch's `torch.autograd.profiler.emit_nvtx()` names every op
//! call `aten::mm, op_id = 41599` (plus `seq = N` with autograd on, `sizes = [[4, 256], [256, 256]]` with
//! `record_shapes=True`, `stream = N`), and engines number their requests (`vibeserve.request.3`). Measured on
//! a Hugging Face `generate()` capture (fixtures/nsys-2025.3.1/hf_eager): 92 185 distinct labels in 92 280 NVTX
//! rows, so a per-label table is as long as the trace. Folding turns each into a stable label:
//!
//! | form | folded to | rule |
//! |---|---|---|
//! | `aten::mm, op_id = 41599` | `aten::mm` | `op_id` |
//! | `aten::add, seq = 12, op_id = 7` | `aten::add` | `seq`, `op_id` |
//! | `aten::mm, sizes = [[4, 256], [256, 256]]` | `aten::mm` | `sizes` |
//! | `aten::cat, input_op_ids = [3, 4]` | `aten::cat` | `input_op_ids` |
//! | `nccl:all_reduce, stream = 7` | `nccl:all_reduce` | `stream` |
//! | `vibeserve.request.3` | `vibeserve.request.<n>` | `trailing_number` (a last dotted segment of digits only) |
//! | `decode step 12` | `decode step <n>` | `trailing_number` (a last space-separated word of digits only) |
//! | `ProfilerStep#12, op_id = 2044` | `ProfilerStep#<n>` | `op_id`, `trailing_number` (digits after a last `#`: PyTorch profiler's step) |
//!
//! Not folded: hashes and compile ids, which name different things (`## Call CompiledFxGraph
//! fpfwjtfd4iuyycexefjctaadhoi5ngi4cv3hquuqiddusso5pqcc ##` keeps its hash; `Torch-Compiled Region: 0/1` is a
//! recompilation of frame 0, not an occurrence of `0/0`), digits inside a word (`triton_poi_fused_add_0`,
//! `layer3`), and a field this module does not know.
use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most bytes of an NVTX message a label keeps: a longer one is cut at a character boundary at or below
/// this and ends with [`LABEL_CUT_MARKER`], so a label's memory is bounded (an export of thousands of distinct
/// 64 KiB labels took 9.3 GB in nvtx-readiness). Messages that agree on their first bytes up to the cut are one
/// label.
pub const LABEL_MAX_BYTES: usize = 4096;

/// The end of a cut label ([`LABEL_MAX_BYTES`]).
pub const LABEL_CUT_MARKER: &str = "…[cut]";

/// `b` cut to at most [`LABEL_MAX_BYTES`] at a UTF-8 character boundary, and whether it was cut.
pub fn cut_label_bytes(b: &[u8]) -> (&[u8], bool) {
    if b.len() <= LABEL_MAX_BYTES {
        return (b, false);
    }
    let mut end = LABEL_MAX_BYTES;
    // back off continuation bytes (0b10xx_xxxx), at most 3 in valid UTF-8
    while end > LABEL_MAX_BYTES - 3 && b[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    (&b[..end], true)
}

/// A label from message bytes: their lossy UTF-8, cut with [`LABEL_CUT_MARKER`] beyond [`LABEL_MAX_BYTES`].
pub fn label_of_bytes(b: &[u8]) -> String {
    let (head, cut) = cut_label_bytes(b);
    let mut s = String::from_utf8_lossy(head).into_owned();
    if cut {
        s.push_str(LABEL_CUT_MARKER);
    }
    s
}

/// One folding rule (the serialised names are the `rules` of a [`FoldedLabel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FoldRule {
    /// `, op_id = N` (emit_nvtx's per-call op id).
    OpId,
    /// `, seq = N` (emit_nvtx's autograd sequence number).
    Seq,
    /// `, sizes = [...]` (emit_nvtx with `record_shapes=True`).
    Sizes,
    /// `, input_op_ids = [...]` (emit_nvtx with `record_shapes=True`).
    InputOpIds,
    /// `, stream = N`.
    Stream,
    /// A last dotted segment, last word or last `#`-part made of digits only (`vibeserve.request.3`, `step 12`,
    /// `ProfilerStep#12`).
    TrailingNumber,
}

const FIELD_RULES: [(&str, FoldRule); 5] = [
    ("op_id", FoldRule::OpId),
    ("seq", FoldRule::Seq),
    ("sizes", FoldRule::Sizes),
    ("input_op_ids", FoldRule::InputOpIds),
    ("stream", FoldRule::Stream),
];

/// How many folded labels a document lists (the rest are counted in `folded_left_out`).
pub const REPORT_LIMIT: usize = 100;

/// The placeholder a trailing number is replaced by.
pub const NUMBER: &str = "<n>";

/// A label after folding, with the rules that changed it (empty: unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fold {
    pub label: String,
    pub rules: Vec<FoldRule>,
}

impl Fold {
    pub fn changed(&self) -> bool {
        !self.rules.is_empty()
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `[...]` with balanced brackets, or an integer (optionally negative).
fn is_field_value(v: &str, rule: FoldRule) -> bool {
    let v = v.trim();
    match rule {
        FoldRule::Sizes | FoldRule::InputOpIds => {
            v.starts_with('[') && v.ends_with(']') && {
                let mut depth = 0i32;
                v.chars().all(|c| {
                    match c {
                        '[' => depth += 1,
                        ']' => depth -= 1,
                        _ => {}
                    }
                    depth >= 0
                }) && depth == 0
            }
        }
        _ => is_digits(v.strip_prefix('-').unwrap_or(v)),
    }
}

/// The byte offsets of the top-level `", "` of `raw` (commas inside brackets belong to a value), in order.
fn top_level_cuts(raw: &str) -> impl Iterator<Item = usize> + '_ {
    let bytes = raw.as_bytes();
    let mut depth = 0i32;
    bytes.iter().enumerate().filter_map(move |(i, &b)| {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 && bytes.get(i + 1) == Some(&b' ') => return Some(i),
            _ => {}
        }
        None
    })
}

/// `ident = value` at the start of `s`: (key end, value start); None when `s` does not start with one.
fn field_of(s: &str) -> Option<(usize, usize)> {
    let eq = s.find(" = ")?;
    let key = &s[..eq];
    (!key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some((eq, eq + 3))
}

/// Whether a rule takes the field `part` (`key = value`), and its bit (`1 << rule as u8`); None when `part` is
/// not a field.
fn field_taken(part: &str) -> Option<(bool, u8)> {
    let (ke, vs) = field_of(part)?;
    let (k, v) = (&part[..ke], &part[vs..]);
    Some(match FIELD_RULES.iter().find(|(name, _)| *name == k) {
        Some((_, rule)) if is_field_value(v, *rule) => (true, 1 << *rule as u8),
        _ => (false, 0),
    })
}

/// `base, k1 = v1, k2 = [a, b], …` folded: the base with the fields no rule takes (borrowed from `raw` when
/// every field went) and the bits (`1 << rule as u8`) of the rules that took one. None when the tail is not
/// made of such fields (the first `, ident = ` starts them), or when no rule took a field: then nothing is
/// folded. Allocates only when a field stays beside a folded one.
fn fold_fields(raw: &str) -> Option<(Cow<'_, str>, u8)> {
    let first = top_level_cuts(raw).find(|&c| field_of(&raw[c + 2..]).is_some())?;
    let parts = || {
        let mut cuts = top_level_cuts(raw).skip_while(move |&c| c < first).peekable();
        std::iter::from_fn(move || {
            let c = cuts.next()?;
            let end = cuts.peek().copied().unwrap_or(raw.len());
            Some(&raw[c + 2..end])
        })
    };
    let (mut bits, mut kept) = (0u8, 0usize);
    for part in parts() {
        let (taken, bit) = field_taken(part)?;
        bits |= bit;
        kept += usize::from(!taken);
    }
    if bits == 0 {
        return None;
    }
    let base = &raw[..first];
    if kept == 0 {
        return Some((Cow::Borrowed(base), bits));
    }
    let mut label = String::with_capacity(raw.len());
    label.push_str(base);
    for part in parts().filter(|p| field_taken(p).is_some_and(|(taken, _)| !taken)) {
        label.push_str(", ");
        label.push_str(part);
    }
    Some((Cow::Owned(label), bits))
}

/// The byte offset of the separator before a trailing number of `label`: a last dotted segment, last word or
/// last `#`-part (PyTorch profiler's `ProfilerStep#12`) of digits only, after a non-empty head that is not
/// itself a number (a label that IS a number, "3", stays).
fn trailing_number_at(label: &str) -> Option<usize> {
    let i = label.bytes().rposition(|b| matches!(b, b'.' | b' ' | b'#'))?;
    let (head, tail) = (&label[..i], &label[i + 1..]);
    (is_digits(tail) && !head.trim().is_empty() && !is_digits(head.trim())).then_some(i)
}

/// Every rule, in order (`rule as u8` is its index).
const ALL_RULES: [FoldRule; 6] =
    [FoldRule::OpId, FoldRule::Seq, FoldRule::Sizes, FoldRule::InputOpIds, FoldRule::Stream, FoldRule::TrailingNumber];

/// [`fold_label`] when it changes `raw` (else None): the label, borrowed from `raw` where it can be, and the
/// bits (`1 << rule as u8`) of the rules that changed it. An emit_nvtx label whose fields all fold
/// (`aten::mm, op_id = 41599`) is folded without an allocation.
pub fn fold_bits(raw: &str) -> Option<(Cow<'_, str>, u8)> {
    let (label, mut bits) = fold_fields(raw).unwrap_or((Cow::Borrowed(raw), 0));
    let label = match trailing_number_at(&label) {
        Some(i) => {
            bits |= 1 << FoldRule::TrailingNumber as u8;
            Cow::Owned(format!("{}{NUMBER}", &label[..=i]))
        }
        None => label,
    };
    (bits != 0).then_some((label, bits))
}

/// The rules of bits [`fold_bits`] gave, in order.
pub fn rules_of_bits(bits: u8) -> Vec<FoldRule> {
    ALL_RULES.iter().copied().filter(|&r| bits & (1 << r as u8) != 0).collect()
}

/// [`fold_label`] when it changes `raw`, else None.
pub fn fold_changed(raw: &str) -> Option<Fold> {
    fold_bits(raw).map(|(label, bits)| Fold { label: label.into_owned(), rules: rules_of_bits(bits) })
}

/// Fold one label (see the module documentation for the forms).
pub fn fold_label(raw: &str) -> Fold {
    fold_changed(raw).unwrap_or_else(|| Fold { label: raw.to_string(), rules: Vec::new() })
}

/// Whether a label carries an id that [`fold_label`] folds (a naming finding for `nvtx-readiness`).
pub fn is_id_bearing(raw: &str) -> bool {
    fold_label(raw).changed()
}

/// One folded label of a [`FoldReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FoldedLabel {
    /// The stable label.
    pub label: String,
    /// Occurrences (NVTX ranges) it now holds, over all raw labels it folds.
    pub occurrences: u64,
    /// Distinct raw labels folded into it.
    pub raw_labels: u64,
    /// The rules that applied, over all its raw labels.
    pub rules: Vec<FoldRule>,
    /// Up to three raw labels, in first-seen order.
    pub examples: Vec<String>,
}

/// What folding did to a set of labels: one entry per stable label that some raw label was folded into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FoldReport {
    /// Distinct labels before folding.
    pub raw_labels: u64,
    /// Distinct labels after folding (folded and unchanged together).
    pub labels: u64,
    /// Occurrences whose label was folded.
    pub folded_occurrences: u64,
    /// The folded labels, most occurrences first (ties by label), at most `limit` of them.
    pub folded: Vec<FoldedLabel>,
    /// Folded labels left out of `folded` by its limit.
    pub folded_left_out: u64,
}

#[derive(Default)]
struct Entry {
    occurrences: u64,
    raw: u64,
    rules: Vec<FoldRule>,
    examples: Vec<String>,
}

/// Accumulates raw labels (with their occurrence counts) and remembers what each folded into. The labels live in
/// interners (one buffer each, no allocation per label: an emit_nvtx capture has one raw label per op call).
#[derive(Default)]
pub struct Folder {
    /// raw labels seen, and what each folded into (an index into `folded`; u32::MAX: unchanged)
    seen: crate::fx::Interner,
    target: Vec<u32>,
    /// the folded labels and their entries (same ids)
    folded_names: crate::fx::Interner,
    folded: Vec<Entry>,
    /// the stable labels: unchanged raw labels and folded labels
    stable: crate::fx::Interner,
    folded_occurrences: u64,
}

impl Folder {
    pub fn new() -> Folder {
        Folder::default()
    }

    /// Record `n` occurrences of `raw`; returns the label to use for it.
    pub fn add<'a>(&'a mut self, raw: &'a str, n: u64) -> &'a str {
        let (id, new) = self.seen.intern(raw.as_bytes());
        if new {
            let t = self.fold_new(raw);
            self.target.push(t);
        }
        self.count(raw, self.target[id as usize], n)
    }

    fn count<'a>(&'a mut self, raw: &'a str, target: u32, n: u64) -> &'a str {
        match target {
            u32::MAX => raw,
            k => {
                self.folded[k as usize].occurrences += n;
                self.folded_occurrences += n;
                std::str::from_utf8(self.folded_names.bytes(k)).unwrap_or_default()
            }
        }
    }

    /// What a raw label seen for the first time folds into (an index into `folded`, u32::MAX: unchanged).
    fn fold_new(&mut self, raw: &str) -> u32 {
        match fold_changed(raw) {
            Some(f) => {
                let (k, new_label) = self.folded_names.intern(f.label.as_bytes());
                if new_label {
                    self.folded.push(Entry::default());
                    self.stable.intern(f.label.as_bytes());
                }
                let e = &mut self.folded[k as usize];
                e.raw += 1;
                for r in f.rules {
                    if !e.rules.contains(&r) {
                        e.rules.push(r);
                    }
                }
                e.rules.sort();
                if e.examples.len() < 3 {
                    e.examples.push(raw.to_string());
                }
                k
            }
            None => {
                self.stable.intern(raw.as_bytes());
                u32::MAX
            }
        }
    }

    /// The report, with at most `limit` folded labels listed.
    pub fn report(&self, limit: usize) -> FoldReport {
        let folded: Vec<FoldedLabel> = self
            .folded
            .iter()
            .enumerate()
            .map(|(k, e)| FoldedLabel {
                label: String::from_utf8_lossy(self.folded_names.bytes(k as u32)).into_owned(),
                occurrences: e.occurrences,
                raw_labels: e.raw,
                rules: e.rules.clone(),
                examples: e.examples.clone(),
            })
            .collect();
        FoldReport::of(folded, limit, self.seen.len() as u64, self.stable.len() as u64, self.folded_occurrences)
    }
}

impl FoldReport {
    /// The report of these folded labels: most occurrences first (ties by label), at most `limit` listed.
    pub fn of(
        mut folded: Vec<FoldedLabel>,
        limit: usize,
        raw_labels: u64,
        labels: u64,
        folded_occurrences: u64,
    ) -> FoldReport {
        folded.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.label.cmp(&b.label)));
        let folded_left_out = folded.len().saturating_sub(limit) as u64;
        folded.truncate(limit);
        FoldReport { raw_labels, labels, folded_occurrences, folded, folded_left_out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- the oracle: fold_label as it was before fold_bits (issue #40), kept verbatim ----

    /// Split `base, k1 = v1, k2 = [a, b], …` into the base and its `key = value` fields, commas inside brackets
    /// belonging to the value. Returns None when the tail is not made of such fields (then nothing is folded).
    fn split_fields(raw: &str) -> Option<(&str, Vec<(&str, &str)>)> {
        // the first ", ident = " starts the fields
        let bytes = raw.as_bytes();
        let mut depth = 0i32;
        let mut cuts = Vec::new(); // byte offsets of top-level ", "
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'[' => depth += 1,
                b']' => depth -= 1,
                b',' if depth == 0 && bytes.get(i + 1) == Some(&b' ') => cuts.push(i),
                _ => {}
            }
        }
        let field_of = |s: &'_ str| -> Option<(usize, usize)> {
            // "ident = value": returns (key end, value start)
            let eq = s.find(" = ")?;
            let key = &s[..eq];
            (!key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some((eq, eq + 3))
        };
        let first = cuts.iter().position(|&c| field_of(&raw[c + 2..]).is_some())?;
        let base = &raw[..cuts[first]];
        let mut fields = Vec::new();
        for (k, &c) in cuts[first..].iter().enumerate() {
            let end = cuts.get(first + k + 1).copied().unwrap_or(raw.len());
            let part = &raw[c + 2..end];
            let (ke, vs) = field_of(part)?;
            fields.push((&part[..ke], &part[vs..]));
        }
        Some((base, fields))
    }

    /// The fold as first written (one allocation per label and per field): the oracle of [`fold_bits`].
    fn fold_label_before(raw: &str) -> Fold {
        let mut rules = Vec::new();
        let mut label = raw.to_string();
        if let Some((base, fields)) = split_fields(raw) {
            let mut kept = Vec::new();
            for (k, v) in &fields {
                match FIELD_RULES.iter().find(|(name, _)| name == k) {
                    Some((_, rule)) if is_field_value(v, *rule) => rules.push(*rule),
                    _ => kept.push(format!("{k} = {v}")),
                }
            }
            if !rules.is_empty() {
                label = std::iter::once(base.to_string()).chain(kept).collect::<Vec<_>>().join(", ");
            }
        }
        // a trailing number: last dotted segment or last word, digits only, after a non-empty head that is not
        // itself a number (a label that IS a number, "3", stays)
        // (`#` too: PyTorch profiler's `ProfilerStep#12`)
        let cut = [label.rfind('.'), label.rfind(' '), label.rfind('#')].into_iter().flatten().max();
        if let Some(i) = cut {
            let (head, tail) = (&label[..i], &label[i + 1..]);
            if is_digits(tail) && !head.trim().is_empty() && !is_digits(head.trim()) {
                label = format!("{head}{}{NUMBER}", &label[i..=i]);
                rules.push(FoldRule::TrailingNumber);
            }
        }
        rules.sort();
        rules.dedup();
        Fold { label, rules }
    }

    /// [`fold_label`] is [`fold_label_before`] on every sequence of up to 7 of these fragments (bracket depth
    /// going negative, fields that are not, known fields with values that are not ids, trailing numbers after
    /// `.`, ` ` and `#`, non-ASCII text) and on the real forms above.
    #[test]
    fn fold_is_the_fold_as_first_written() {
        const FRAGS: [&str; 24] = [
            "aten::mm",
            ", ",
            "op_id = ",
            "seq = ",
            "12",
            "-3",
            "[",
            "]",
            "[[1, 2], [3]]",
            " = ",
            "step",
            ".",
            "#",
            " ",
            "x",
            "sizes = ",
            "stream = ",
            "tag = warm",
            "é",
            "3",
            "input_op_ids = ",
            "(5,0)",
            ",",
            "_k",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut changed, mut borrowed) = (0, 0);
        const BASES: [&str; 7] = ["aten::mm", "step 7", "x.y.3", "ProfilerStep#12", "é", "a, b", ""];
        const FIELDS: [&str; 13] = [
            "op_id = 3",
            "op_id = -3",
            "op_id = x",
            "seq = 12",
            "sizes = [[1, 2], [3]]",
            "sizes = [1",
            "sizes = []",
            "tag = warm",
            "stream = 7",
            "stream = default",
            "input_op_ids = [(5,0), (6,0)]",
            "_k = 1",
            "k=1",
        ];
        let mut pick = |v: &[&'static str]| v[(next() % v.len() as u64) as usize];
        for case in 0..200_000 {
            let raw: String = if case % 2 == 0 {
                // fragments at random
                let n = 1 + (pick(&["0", "1", "2", "3", "4", "5", "6"]).parse::<usize>().unwrap_or(0));
                (0..n).map(|_| pick(&FRAGS)).collect()
            } else {
                // a base, fields, maybe a trailing number
                let n = pick(&["0", "1", "2", "3", "4"]).parse::<usize>().unwrap_or(0);
                let mut r = pick(&BASES).to_string();
                (0..n).for_each(|_| r = format!("{r}, {}", pick(&FIELDS)));
                r + pick(&["", "", " 12", ".3", "#4", " x"])
            };
            let before = fold_label_before(&raw);
            assert_eq!(fold_label(&raw), before, "{raw:?}");
            match fold_bits(&raw) {
                Some((l, bits)) => {
                    changed += 1;
                    borrowed += usize::from(matches!(l, Cow::Borrowed(_)));
                    assert_eq!((l.as_ref(), rules_of_bits(bits)), (before.label.as_str(), before.rules), "{raw:?}");
                }
                None => assert!(!before.changed(), "{raw:?}"),
            }
        }
        // the generator reaches both kinds of label, and most folds borrow
        assert!(changed > 20_000 && borrowed > 1_000, "{changed} changed, {borrowed} borrowed");
    }

    fn f(raw: &str) -> (String, Vec<FoldRule>) {
        let x = fold_label(raw);
        (x.label, x.rules)
    }

    #[test]
    fn long_labels_are_cut_at_a_character_boundary() {
        assert_eq!(cut_label_bytes(b"short"), (&b"short"[..], false));
        let exact = "a".repeat(LABEL_MAX_BYTES);
        assert_eq!(label_of_bytes(exact.as_bytes()), exact);
        // 'é' is two bytes: 4 095 bytes of 'a' then 'é' straddles the limit, so the cut backs off one byte
        let s = format!("{}é{}", "a".repeat(LABEL_MAX_BYTES - 1), "b".repeat(100));
        let (head, cut) = cut_label_bytes(s.as_bytes());
        assert!(cut && head.len() == LABEL_MAX_BYTES - 1);
        let l = label_of_bytes(s.as_bytes());
        assert_eq!(l, format!("{}{LABEL_CUT_MARKER}", "a".repeat(LABEL_MAX_BYTES - 1)));
        let e = "€".repeat(3000); // three bytes each
        let l = label_of_bytes(e.as_bytes());
        assert!(l.ends_with(LABEL_CUT_MARKER) && !l.contains('\u{fffd}'));
        assert!(l.len() <= LABEL_MAX_BYTES + LABEL_CUT_MARKER.len());
    }

    #[test]
    fn emit_nvtx_fields_fold() {
        // real labels of fixtures/nsys-2025.3.1/hf_node (emit_nvtx under no_grad: no seq)
        assert_eq!(f("aten::mm, op_id = 41599"), ("aten::mm".into(), vec![FoldRule::OpId]));
        assert_eq!(f("aten::randint, op_id = 1").0, "aten::randint");
        assert_eq!(f("detach_, op_id = 15").0, "detach_");
        assert_eq!(f("TorchDynamo Cache Lookup, op_id = 995").0, "TorchDynamo Cache Lookup");
        // the other emit_nvtx fields (torch/autograd/profiler.py: seq with grad, sizes/input_op_ids with shapes)
        assert_eq!(
            f("aten::addmm, seq = 12, op_id = 7, sizes = [[4, 256], [256, 256], []], input_op_ids = [(5,0), (6,0)]"),
            ("aten::addmm".into(), vec![FoldRule::OpId, FoldRule::Seq, FoldRule::Sizes, FoldRule::InputOpIds])
        );
        assert_eq!(f("nccl:all_reduce, stream = 7"), ("nccl:all_reduce".into(), vec![FoldRule::Stream]));
        // an unknown field stays, a known one folds next to it
        assert_eq!(f("custom, op_id = 3, tag = warm").0, "custom, tag = warm");
        // a known field with a value that is not an id stays
        assert_eq!(f("x, stream = default"), ("x, stream = default".into(), vec![]));
        assert_eq!(f("x, sizes = [[1, 2]"), ("x, sizes = [[1, 2]".into(), vec![]));
    }

    #[test]
    fn trailing_numbers_fold() {
        assert_eq!(f("vibeserve.request.3"), ("vibeserve.request.<n>".into(), vec![FoldRule::TrailingNumber]));
        assert_eq!(f("vibeserve.request.12").0, "vibeserve.request.<n>");
        assert_eq!(f("hf.batch.4").0, "hf.batch.<n>");
        assert_eq!(f("app.request.0").0, "app.request.<n>");
        assert_eq!(f("decode step 12").0, "decode step <n>");
        assert_eq!(f("ProfilerStep#12, op_id = 2044").0, "ProfilerStep#<n>");
        assert_eq!(f("Optimizer.step#SGD.step").1, vec![]);
        // not a number to fold: digits inside a word, a label that is a number, a version
        assert_eq!(f("triton_poi_fused_add_0").1, vec![]);
        assert_eq!(f("layer3").1, vec![]);
        assert_eq!(f("3").1, vec![]);
        assert_eq!(f("hf.decode_step").1, vec![]);
        // both kinds at once
        assert_eq!(f("step 7, op_id = 9"), ("step <n>".into(), vec![FoldRule::OpId, FoldRule::TrailingNumber]));
    }

    #[test]
    fn hashes_and_compile_ids_are_not_folded_blindly() {
        // real: the inductor graph's hash stays (two different graphs must stay two labels); only op_id goes
        let raw = "## Call CompiledFxGraph fpfwjtfd4iuyycexefjctaadhoi5ngi4cv3hquuqiddusso5pqcc ##, op_id = 999";
        assert_eq!(
            f(raw),
            (
                "## Call CompiledFxGraph fpfwjtfd4iuyycexefjctaadhoi5ngi4cv3hquuqiddusso5pqcc ##".into(),
                vec![FoldRule::OpId]
            )
        );
        let other = "## Call CompiledFxGraph fxabc123def4567890000000000000000000000000000000000 ##, op_id = 1";
        assert_ne!(fold_label(raw).label, fold_label(other).label);
        // a hash whose last characters are digits is still not a trailing number (no separator)
        assert_eq!(f("CompiledFxGraph f3a9c0d1e2b4567").1, vec![]);
        // real: frame 0 compiled twice (batch 1, then batch 4 recompiles): 0/0 and 0/1 stay apart
        assert_eq!(f("Torch-Compiled Region: 0/0, op_id = 996").0, "Torch-Compiled Region: 0/0");
        assert_eq!(f("Torch-Compiled Region: 0/1, op_id = 2000").0, "Torch-Compiled Region: 0/1");
        // and a blind digits-to-# rule would have merged them: this one does not
        assert!(!is_id_bearing("Torch-Compiled Region: 0/1"));
    }

    #[test]
    fn folder_reports_what_it_folded() {
        let mut fo = Folder::new();
        for (i, n) in [(41599, 1), (41600, 2), (41601, 1)] {
            assert_eq!(fo.add(&format!("aten::mm, op_id = {i}"), n), "aten::mm");
        }
        assert_eq!(fo.add("hf.decode_step", 94), "hf.decode_step");
        assert_eq!(fo.add("vibeserve.request.1", 1), "vibeserve.request.<n>");
        assert_eq!(fo.add("vibeserve.request.1", 1), "vibeserve.request.<n>");
        assert_eq!(fo.add("vibeserve.request.2", 1), "vibeserve.request.<n>");
        let r = fo.report(10);
        assert_eq!(r.raw_labels, 6);
        assert_eq!(r.labels, 3);
        assert_eq!(r.folded_occurrences, 7);
        assert_eq!(r.folded[0].label, "aten::mm");
        assert_eq!((r.folded[0].occurrences, r.folded[0].raw_labels), (4, 3));
        assert_eq!(r.folded[0].examples.len(), 3);
        assert_eq!(r.folded[1].label, "vibeserve.request.<n>");
        assert_eq!((r.folded[1].occurrences, r.folded[1].raw_labels), (3, 2));
        let r1 = fo.report(1);
        assert_eq!((r1.folded.len(), r1.folded_left_out), (1, 1));
    }
}
