//! Folding while `NVTX_EVENTS` is read (issue #40): a PyTorch `emit_nvtx` capture names every op call
//! (`aten::mm, op_id = 41599`), so it has about one distinct raw label per NVTX row (205 708 in 206 019 rows of
//! `fixtures/nsys-2025.3.1/emit_nvtx_decode`) that fold into a few dozen labels. A row whose label is its own
//! `text` (no `textId`, no domain: the label is the message) is kept or dropped, folded and counted as it is
//! read; only its folded label is interned. What the fold report ([`FoldReport`]) needs of the raw labels is
//! tallied on the way: occurrences, the rules, the first three raw labels of each folded label (in the order of
//! the sorted occurrences) and the number of distinct raw labels, counted by a 96-bit hash of each (a 16-byte
//! map entry a raw label with its folded label, not its text).
//!
//! The other rows (a `textId`, a named domain, a range closed by the capture's end) keep the raw path: their
//! label is known only after the read (`StringIds`, the domain rows of any part), and the truncated ranges are
//! listed with their raw label. [`super::scan::load`] folds them once per distinct raw label into the same tally.

use std::cmp::Reverse;
use std::hash::Hasher;

use crate::fx::{FxMap, Interner};
use crate::labels::{FoldReport, FoldedLabel};

/// What decides at read time whether a row is kept: the prefix, the window and the capture's end; with
/// `framework_only`, only a framework's own ranges are folded as they are read ([`FoldTally::add_framework`]).
#[derive(Debug, Clone, Default)]
pub(super) struct ReadFold {
    pub prefix: Option<String>,
    pub window: Option<(i64, i64)>,
    pub capture_end: Option<i64>,
    pub framework_only: bool,
}

/// The id of a raw label in [`Raws`] that [`FoldTally::add_framework`] left to the raw path (its next
/// [`FoldTally::add`] tallies it).
const RAW_PATH: u32 = u32::MAX;

/// The sort key of an occurrence (thread, start, end descending, raw label, eventType, domainId): the order in
/// which the fold report's examples are first seen.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ExampleKey {
    pub gtid: i64,
    pub start: i64,
    pub end: Reverse<i64>,
    pub raw: String,
    pub event_type: i64,
    pub domain: i64,
}

/// Where an occurrence is, without its raw label: its [`ExampleKey`] is built (the label's text copied) only when
/// the occurrence can enter a folded label's examples.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExampleAt {
    pub gtid: i64,
    pub start: i64,
    pub end: i64,
    pub event_type: i64,
    pub domain: i64,
}

impl ExampleAt {
    fn key(self, raw: &str) -> ExampleKey {
        let ExampleAt { gtid, start, end, event_type, domain } = self;
        ExampleKey { gtid, start, end: Reverse(end), raw: raw.to_string(), event_type, domain }
    }

    /// The order of the keys' leading fields (thread, start, end descending).
    fn cmp_head(self, k: &ExampleKey) -> std::cmp::Ordering {
        (self.gtid, self.start, Reverse(self.end)).cmp(&(k.gtid, k.start, k.end))
    }
}

/// One folded label's tally.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// occurrences whose raw label was changed by folding
    occurrences: u64,
    /// distinct raw labels folded into it
    raw: u64,
    /// the rules that applied (bit `rule as u8`: [`crate::labels::fold_bits`])
    rules: u8,
    /// the first three distinct changed raw labels by their first occurrence, sorted by key
    examples: Vec<ExampleKey>,
}

/// A 96-bit hash of a raw label: distinct raw labels are counted by it (two of 10⁸ labels collide with a
/// probability below 10⁻¹³): SipHash's 64 bits, then the top 32 of the Fx hash. Three 32-bit words, not a
/// `u128` (aligned to 16): with its [`Slot`] a map entry is 16 bytes, not 32, and each part of a parallel read
/// holds one entry per raw label it saw (on emit_nvtx ×10 read in 16 parts, the parts' maps were the read's peak:
/// RSS 274 MB, 243 at 24 bytes an entry).
pub(super) type RawHash = [u32; 3];

/// A raw label's entry in [`Raws`]: its folded label's id and whether folding changed it, in 4 bytes (the top
/// bit); [`RAW_PATH`] as `u32::MAX`. Label ids stay below 2³¹ - 1 (one per distinct label of fewer rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot(u32);

impl Slot {
    const CHANGED: u32 = 1 << 31;
    const RAW: Slot = Slot(RAW_PATH);

    fn of((id, changed): (u32, bool)) -> Slot {
        if id == RAW_PATH {
            return Slot::RAW;
        }
        debug_assert!(id < Slot::CHANGED - 1, "fewer than 2^31 - 1 labels");
        Slot(id | if changed { Slot::CHANGED } else { 0 })
    }

    fn get(self) -> (u32, bool) {
        match self {
            Slot::RAW => (RAW_PATH, false),
            Slot(v) => (v & !Slot::CHANGED, v & Slot::CHANGED != 0),
        }
    }
}

pub(super) fn raw_hash(raw: &[u8]) -> RawHash {
    let mut sip = std::hash::DefaultHasher::new();
    sip.write(raw);
    let (s, f) = (sip.finish(), crate::fx::hash_bytes(raw));
    [(s >> 32) as u32, s as u32, (f >> 32) as u32]
}

/// The distinct raw labels by hash, each with its folded label (and whether it was changed), in shards by the
/// hash's top bits: the parts of a parallel read merge them shard by shard ([`FoldTally::merge_raws`]; on an
/// emit_nvtx capture nearly every row is a new raw label, merged after the parallel read).
#[derive(Clone)]
struct Raws(Vec<FxMap<RawHash, Slot>>);

const RAW_SHARDS: usize = 16;

impl Default for Raws {
    fn default() -> Raws {
        Raws((0..RAW_SHARDS).map(|_| FxMap::default()).collect())
    }
}

impl Raws {
    fn shard(&mut self, h: RawHash) -> &mut FxMap<RawHash, Slot> {
        // the top four bits of the SipHash half
        &mut self.0[(h[0] >> 28) as usize % RAW_SHARDS]
    }

    /// The raw labels tallied (not those left to the raw path and never tallied).
    fn len(&self) -> usize {
        self.0.iter().flat_map(|m| m.values()).filter(|v| **v != Slot::RAW).count()
    }
}

/// A part's raw labels, taken out of its tally by [`FoldTally::absorb_labels`] until [`FoldTally::merge_raws`]:
/// `map` renumbers their folded labels.
pub(super) struct PendingRaws {
    map: Vec<u32>,
    raws: Raws,
}

impl PendingRaws {
    /// The part's label ids renumbered: `map[id]` is the id in the tally that absorbed it.
    pub fn map(&self) -> &[u32] {
        &self.map
    }
}

/// Folded labels with their tallies; the distinct raw labels ([`Raws`]). One per part of a parallel read, merged
/// in table order ([`FoldTally::absorb`]).
#[derive(Default, Clone)]
pub(super) struct FoldTally {
    names: Interner,
    entries: Vec<Entry>,
    raws: Raws,
    folded_occurrences: u64,
}

impl FoldTally {
    /// `n` occurrences of the kept raw label `raw`, the first at `at`; returns the id of the label to use (an
    /// index into [`FoldTally::label`]).
    pub fn add(&mut self, raw: &str, n: u64, at: ExampleAt) -> u32 {
        self.add_hashed(raw, raw_hash(raw.as_bytes()), n, at)
    }

    fn add_hashed(&mut self, raw: &str, h: RawHash, n: u64, at: ExampleAt) -> u32 {
        let FoldTally { names, entries, raws, .. } = self;
        // one probe of the map: a label-heavy capture's raw labels are nearly all new
        let slot = raws.shard(h).entry(h).or_insert(Slot::RAW);
        if *slot == Slot::RAW {
            *slot = Slot::of(fold_new(names, entries, raw, crate::labels::fold_bits(raw)));
        }
        let (id, changed) = slot.get();
        self.count(raw, id, changed, n, at);
        id
    }

    /// One occurrence of a framework's own range (its raw label `raw`, not cut), as it is read, when its folded
    /// label is a framework's too ([`crate::framework::is_framework`]): the id of the label to use; None leaves
    /// it to the raw path, untallied (a label of the user's own keeps its raw text for `nvtx-readiness`, and
    /// `MyBlock, op_id = 7` is a framework's annotation of a label of the user's own).
    pub fn add_framework(&mut self, raw: &str, at: ExampleAt) -> Option<u32> {
        let h = raw_hash(raw.as_bytes());
        let FoldTally { names, entries, raws, .. } = self;
        let slot = raws.shard(h).entry(h).or_insert_with(|| {
            let fold = crate::labels::fold_bits(raw);
            let folded = fold.as_ref().map_or(raw, |(l, _)| l);
            if crate::framework::is_framework(raw) && crate::framework::is_framework(folded) {
                Slot::of(fold_new(names, entries, raw, fold))
            } else {
                Slot::RAW
            }
        });
        let (id, changed) = slot.get();
        if id == RAW_PATH {
            return None;
        }
        self.count(raw, id, changed, 1, at);
        Some(id)
    }

    /// `n` more occurrences of the raw label `raw` of label `id`, the first at `at`.
    fn count(&mut self, raw: &str, id: u32, changed: bool, n: u64, at: ExampleAt) {
        let FoldTally { entries, folded_occurrences, .. } = self;
        if changed {
            *folded_occurrences += n;
            let e = &mut entries[id as usize];
            e.occurrences += n;
            offer(&mut e.examples, raw, at);
        }
    }

    fn intern(&mut self, label: &str) -> u32 {
        intern(&mut self.names, &mut self.entries, label)
    }

    /// The label of an id [`FoldTally::add`] returned.
    pub fn label(&self, id: u32) -> &str {
        std::str::from_utf8(self.names.bytes(id)).unwrap_or_default()
    }

    /// Take in `p` (a part read after everything in `self`); returns its label ids renumbered into `self`'s (the
    /// read merges its parts' raw labels at once: [`FoldTally::absorb_labels`]).
    #[cfg(test)]
    pub fn absorb(&mut self, p: FoldTally) -> Vec<u32> {
        let pending = self.absorb_labels(p);
        let map = pending.map.clone();
        self.merge_raws(vec![pending]);
        map
    }

    /// [`FoldTally::absorb`] but for the raw labels, returned to be merged with those of the other parts
    /// ([`FoldTally::merge_raws`]), with the part's label ids renumbered into `self`'s ([`PendingRaws::map`]).
    pub fn absorb_labels(&mut self, p: FoldTally) -> PendingRaws {
        let map: Vec<u32> = (0..p.names.len() as u32).map(|i| self.intern(p.label(i))).collect();
        for (i, e) in p.entries.into_iter().enumerate() {
            let mine = &mut self.entries[map[i] as usize];
            mine.occurrences += e.occurrences;
            mine.rules |= e.rules;
            for k in e.examples {
                offer_key(&mut mine.examples, k);
            }
        }
        self.folded_occurrences += p.folded_occurrences;
        PendingRaws { map, raws: p.raws }
    }

    /// The raw labels of parts absorbed by [`FoldTally::absorb_labels`] (in any order: a raw label folds to one
    /// label), shard by shard (each shard's map stays in cache while every part's entries go in); each new
    /// changed raw label counted for its folded label. On one thread: merging the 16 shards in 16 threads made
    /// the report's peak RSS on emit_nvtx_decode 57 -> 70 MB (each thread's allocations in an arena of its own).
    pub fn merge_raws(&mut self, pending: Vec<PendingRaws>) {
        let merge = |s: usize, mut mine: FxMap<RawHash, Slot>| {
            let mut changed: FxMap<u32, u64> = FxMap::default();
            for p in &pending {
                for (&h, &theirs) in &p.raws.0[s] {
                    let (id, ch) = theirs.get();
                    let slot = mine.entry(h).or_insert(Slot::RAW);
                    // new here, or left to the raw path here and tallied in that part (a raw label's fold and
                    // whether it is a framework's are the same in every part)
                    if *slot == Slot::RAW && id != RAW_PATH {
                        let g = p.map[id as usize];
                        *slot = Slot::of((g, ch));
                        if ch {
                            *changed.entry(g).or_default() += 1;
                        }
                    }
                }
            }
            (mine, changed)
        };
        let shards = std::mem::take(&mut self.raws.0).into_iter().enumerate();
        let merged: Vec<_> = shards.map(|(s, m)| merge(s, m)).collect();
        for (m, changed) in merged {
            self.raws.0.push(m);
            for (g, n) in changed {
                self.entries[g as usize].raw += n;
            }
        }
    }

    /// The report, with at most `limit` folded labels listed; `labels` is the number of labels after folding.
    pub fn report(&self, limit: usize, labels: u64) -> FoldReport {
        let folded: Vec<FoldedLabel> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.raw > 0)
            .map(|(k, e)| FoldedLabel {
                label: self.label(k as u32).to_string(),
                occurrences: e.occurrences,
                raw_labels: e.raw,
                rules: crate::labels::rules_of_bits(e.rules),
                examples: e.examples.iter().map(|k| k.raw.clone()).collect(),
            })
            .collect();
        FoldReport::of(folded, limit, self.raws.len() as u64, labels, self.folded_occurrences)
    }
}

/// A new raw label's entry in [`Raws`] from its fold ([`crate::labels::fold_bits`]): its label's id (interned),
/// whether folding changed it; a changed one counted as a raw label of its folded label.
fn fold_new(
    names: &mut Interner,
    entries: &mut Vec<Entry>,
    raw: &str,
    fold: Option<(std::borrow::Cow<'_, str>, u8)>,
) -> (u32, bool) {
    let (id, changed, rules) = match fold {
        Some((label, bits)) => (intern(names, entries, &label), true, bits),
        None => (intern(names, entries, raw), false, 0),
    };
    if changed {
        let e = &mut entries[id as usize];
        e.raw += 1;
        e.rules |= rules;
    }
    (id, changed)
}

/// What the framework's labels folded as they were read were ([`super::load_occurrences_framework_folded`]): each
/// folded label's tally (raw labels, occurrences, rules, examples) and the raw labels' hashes, not their text.
#[derive(Clone, Default)]
pub struct FrameworkFolds(FoldTally);

impl std::fmt::Debug for FrameworkFolds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameworkFolds({} labels)", self.0.names.len())
    }
}

impl FrameworkFolds {
    /// The tally of a read that folded a framework's labels ([`FoldTally::add_framework`]), with its raw labels'
    /// hashes: a raw label the raw path holds too (a range closed by the capture's end, a `textId`) is counted
    /// once, as the raw labels of every occurrence are.
    pub(super) fn of(t: FoldTally) -> FrameworkFolds {
        FrameworkFolds(t)
    }

    /// Whether a label that folding changed at read starts with `under` (its raw labels do: folding keeps a
    /// label's dotted head).
    pub fn folds_under(&self, under: &str) -> bool {
        self.0.entries.iter().enumerate().any(|(k, e)| e.raw > 0 && self.0.label(k as u32).starts_with(under))
    }

    /// The fold report ([`crate::labels::Folder::report`]) of the loaded occurrences `occs` (sorted, or a sorted
    /// subset) whose folded label passes `keep`, at most `limit` listed: the labels folded at read from this
    /// tally, the others (raw) folded now, each with its count and its first occurrence.
    pub fn report<'a>(
        &self,
        occs: impl IntoIterator<Item = &'a super::Occurrence>,
        keep: impl Fn(&str) -> bool,
        limit: usize,
    ) -> FoldReport {
        let mut t = self.0.clone();
        for (k, e) in t.entries.iter_mut().enumerate() {
            if !keep(std::str::from_utf8(t.names.bytes(k as u32)).unwrap_or_default()) {
                *e = Entry::default();
            }
        }
        // distinct raw labels by text, in order of first appearance (a folded label's text is not one)
        let mut first: FxMap<&str, usize> = FxMap::default();
        let mut raw: Vec<(&str, u64, &super::Occurrence)> = Vec::new();
        for o in occs {
            if self.0.names.get(o.label.as_bytes()).is_some() {
                continue;
            }
            match first.entry(&o.label) {
                std::collections::hash_map::Entry::Occupied(e) => raw[*e.get()].1 += 1,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(raw.len());
                    raw.push((&o.label, 1, o));
                }
            }
        }
        for (l, n, o) in raw {
            let at = ExampleAt {
                gtid: o.global_tid,
                start: o.start,
                end: o.end,
                event_type: o.event_type,
                domain: o.domain_id.unwrap_or(0),
            };
            t.add(l, n, at);
        }
        t.report(limit, 0)
    }
}

/// The id of a folded label, with an empty tally entry when it is new.
fn intern(names: &mut Interner, entries: &mut Vec<Entry>, label: &str) -> u32 {
    let (id, new) = names.intern(label.as_bytes());
    if new {
        entries.push(Entry::default());
    }
    id
}

/// Keep in `ex` the first three distinct raw labels by the key of their first occurrence, whatever the order in
/// which the occurrences come: a raw label's key is its least, and a later raw label enters only before the last.
fn offer(ex: &mut Vec<ExampleKey>, raw: &str, at: ExampleAt) {
    // the common case of a full list and a later occurrence: decided on the key's head, without copying the text
    if ex.len() == 3 && at.cmp_head(&ex[2]).is_gt() && ex.iter().all(|k| k.raw != raw) {
        return;
    }
    offer_key(ex, at.key(raw));
}

/// [`offer`] with the key built.
fn offer_key(ex: &mut Vec<ExampleKey>, k: ExampleKey) {
    if let Some(p) = ex.iter().position(|e| e.raw == k.raw) {
        if k < ex[p] {
            ex[p] = k;
        }
    } else if ex.len() == 3 {
        if k >= ex[2] {
            return;
        }
        ex[2] = k;
    } else {
        ex.push(k);
    }
    ex.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: i64) -> ExampleAt {
        ExampleAt { gtid: 1, start: t, end: t + 1, event_type: 59, domain: 0 }
    }

    /// The tally in any order of the occurrences, and split into parts, is the one of the sorted occurrences.
    #[test]
    fn tally_is_order_free() {
        let mut next = crate::test_rng::xorshift(0x1234_5678_9ABC_DEF1);
        for _ in 0..300 {
            let n = 1 + next(60) as usize;
            let occ: Vec<(i64, String)> = (0..n)
                .map(|i| {
                    let raw = match next(4) {
                        0 => format!("aten::mm, op_id = {}", next(8)),
                        1 => format!("req.{}", next(5)),
                        2 => "aten::mm".to_string(),
                        _ => format!("step {}", next(3)),
                    };
                    (i as i64 * 10 + next(7), raw)
                })
                .collect();
            let mut sorted = occ.clone();
            sorted.sort();
            let mut want = FoldTally::default();
            for (t, raw) in &sorted {
                want.add(raw, 1, key(*t));
            }
            let mut all = FoldTally::default();
            let cut = next(n as i64 + 1) as usize;
            for part in [&occ[..cut], &occ[cut..]] {
                let mut p = FoldTally::default();
                for (t, raw) in part.iter().rev() {
                    p.add(raw, 1, key(*t));
                }
                all.absorb(p);
            }
            assert_eq!(all.report(100, 0), want.report(100, 0), "{occ:?}");
        }
    }

    /// Only a framework's labels whose fold is a framework's too are tallied at read; the others are left to the
    /// raw path, and the tally then equals one of every label added after the read, whatever part saw which.
    #[test]
    fn framework_labels_alone_are_folded_at_read() {
        let mut t = FoldTally::default();
        assert!(t.add_framework("aten::mm, op_id = 7", key(1)).is_some());
        assert!(t.add_framework("aten::mm", key(2)).is_some(), "a framework's label folding to itself");
        assert_eq!(t.add_framework("my_block, op_id = 8", key(3)), None, "a user's label the framework annotated");
        assert_eq!(t.add_framework("decode step 3", key(4)), None, "a user's own label");
        assert_eq!(t.add_framework("my_block, op_id = 8", key(5)), None, "left to the raw path again");
        assert_eq!(t.report(10, 0).raw_labels, 2, "the raw path's labels not counted until added");
        let raws = ["aten::mm, op_id = 7", "aten::mm", "my_block, op_id = 8", "decode step 3", "aten::mm, op_id = 9"];
        let mut want = FoldTally::default();
        for (i, r) in raws.iter().enumerate() {
            want.add(r, 1, key(i as i64 + 1));
        }
        // part one saw the first three at read, part two the rest; the raw path adds the user's labels after
        let mut one = FoldTally::default();
        let mut two = FoldTally::default();
        for (i, r) in raws.iter().enumerate() {
            let p = if i < 3 { &mut one } else { &mut two };
            p.add_framework(r, key(i as i64 + 1));
        }
        one.absorb(two);
        for (i, r) in raws.iter().enumerate() {
            if !crate::framework::is_framework(r) || crate::labels::fold_label(r).label == "my_block" {
                one.add(r, 1, key(i as i64 + 1));
            }
        }
        assert_eq!(one.report(10, 0), want.report(10, 0));
    }

    /// Parts merged at once, shard by shard (90 000 raw labels, some in two parts), give the tally of one read of
    /// every occurrence.
    #[test]
    fn parts_merged_in_parallel_are_one_tally() {
        let raw = |k: i64| format!("aten::op{}, op_id = {}", k % 90_000 % 7, k % 90_000);
        let mut one = FoldTally::default();
        for k in 0..120_000 {
            one.add(&raw(k), 1, key(k));
        }
        let mut parts = [0..40_000, 40_000..80_000, 80_000..120_000].into_iter().map(|r| {
            let mut p = FoldTally::default();
            for k in r {
                p.add(&raw(k), 1, key(k));
            }
            p
        });
        let mut all = parts.next().unwrap();
        let pending: Vec<PendingRaws> = parts.map(|p| all.absorb_labels(p)).collect();
        all.merge_raws(pending);
        assert_eq!(all.raws.len(), 90_000);
        assert_eq!(all.report(100, 0), one.report(100, 0));
    }

    /// The report is the Folder's on the same labels (one raw label at a time, in first-seen order).
    #[test]
    fn report_is_the_folders() {
        let raws = ["aten::mm, op_id = 1", "aten::mm, op_id = 2", "aten::mm", "a.3", "a.4", "b", "aten::mm, op_id = 1"];
        let mut f = crate::labels::Folder::new();
        let mut t = FoldTally::default();
        for (i, r) in raws.iter().enumerate() {
            f.add(r, 2);
            t.add(r, 2, key(i as i64));
        }
        let want = f.report(100);
        assert_eq!(t.report(100, want.labels), want);
    }

    /// On real captures, folding while reading gives the document of folding after the read, with and without
    /// a prefix or a window: emit_nvtx's op labels, Hugging Face's, a torch.compile capture, named domains
    /// (NCCL), ranges closed by the capture's end.
    #[test]
    fn folding_while_reading_is_folding_after() {
        use crate::sqlite_ranges::{analyze, RangesOptions};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1");
        let dir = tempfile::tempdir().unwrap();
        for f in ["emit_nvtx_decode", "hf_eager", "nccl", "jax_decode", "profiler_step", "serve_node", "decode_clean"] {
            let plain = root.join(format!("{f}.sqlite"));
            let path = if plain.exists() {
                plain
            } else {
                let out = dir.path().join(format!("{f}.sqlite"));
                let st = std::process::Command::new("xz")
                    .arg("-dkc")
                    .arg(root.join(format!("{f}.sqlite.xz")))
                    .stdout(std::fs::File::create(&out).unwrap())
                    .status()
                    .unwrap();
                assert!(st.success(), "{f}: xz");
                out
            };
            let export = crate::export::Export::open(&path).unwrap();
            let mid = {
                let d = analyze(&export, &RangesOptions::default()).unwrap().doc;
                let per = &d.totals.per_device;
                per.first().map(|p| (p.first_start + p.last_end) / 2)
            };
            // folding on (RangesOptions::default() folds nothing: every path would be the raw one)
            let folding = RangesOptions::sqlite_ranges_default();
            let mut cases = vec![
                folding.clone(),
                RangesOptions { range_prefix: Some("aten::".into()), ..folding.clone() },
                RangesOptions { range_prefix: Some("hf.".into()), ..folding.clone() },
            ];
            if let Some(m) = mid {
                cases.push(RangesOptions { window: Some((0, m)), ..folding.clone() });
            }
            assert!(cases.iter().all(|o| o.fold));
            for opts in cases {
                let read = analyze(&export, &opts).unwrap().doc;
                let paths = [
                    (&super::super::scan::FORCE_RAW_PATH, "every label folded after the read"),
                    // what gate-check --nvtx-readiness --report reads
                    (
                        &super::super::scan::FORCE_FRAMEWORK_PATH,
                        "a framework's labels folded at read, the user's after",
                    ),
                ];
                for (force, path) in paths {
                    force.with(|c| c.set(true));
                    let other = analyze(&export, &opts).unwrap().doc;
                    force.with(|c| c.set(false));
                    assert_eq!(
                        serde_json::to_string(&read).unwrap(),
                        serde_json::to_string(&other).unwrap(),
                        "{f} {opts:?}: {path}"
                    );
                }
            }
        }
    }
}
