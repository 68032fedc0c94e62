//! The kept NVTX range occurrences of an export: `NVTX_EVENTS` read in parallel rowid ranges, messages resolved
//! to labels (`DOMAIN:` for a named domain), prefix and window applied, sorted by `(thread, start, end
//! descending, label)`, with each occurrence's depth and parent among the kept ones of its thread (see the
//! contract, docs/sqlite-ranges.md).

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fold_read::{ExampleAt, FoldTally, FrameworkFolds, ReadFold};
use super::{nvtx_table, FxMap, RangesOptions};
use crate::contract::{Error, Result};
use crate::export::rows::Keep;
use crate::export::schema::{self, cols, nvtx};
use crate::export::{ns_of, Export};

/// One kept NVTX range occurrence (after label resolution and prefix/window filtering).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    /// The label: the message, prefixed with `DOMAIN:` for a named NVTX domain.
    pub label: std::sync::Arc<str>,
    /// The thread that opened it.
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// 59 push/pop, 60 start/end.
    pub event_type: i64,
    /// `NVTX_EVENTS.domainId` (None when NULL or the column is absent).
    pub domain_id: Option<i64>,
    /// Number of kept occurrences on the same thread enclosing it (0 = outermost).
    pub depth: u32,
    /// Index (into the same Vec) of the immediately enclosing kept occurrence.
    pub parent: Option<usize>,
}

/// Rows of `NVTX_EVENTS` with eventType 59/60 that are not occurrences (counted before any prefix/window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Skipped {
    /// No message: `textId` without a string, or both `textId` and `text` NULL.
    pub unlabeled: u64,
    /// `start` or `end` NULL, or `end < start` (counted only here when also unlabeled).
    pub open_or_inverted: u64,
    /// Closed by the capture's end: a labeled range whose `end` is at or after the end of the capture
    /// (`ANALYSIS_DETAILS.duration`). nsys closed it when the capture stopped, so its end and wall are the
    /// capture's, not the range's (the document's `truncated_ranges` lists them); like an open range it is no
    /// occurrence.
    #[serde(default)]
    pub closed_by_capture_end: u64,
}

/// A range closed by the capture's end ([`Skipped::closed_by_capture_end`]): what it would have been.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TruncatedRange {
    pub label: String,
    #[serde(rename = "globalTid")]
    pub global_tid: i64,
    pub start: i64,
    /// The capture's end, where nsys closed it: its wall `end - start` is a lower bound.
    pub end: i64,
}

/// At most this many [`TruncatedRange`]s are listed (all are counted).
pub const TRUNCATED_LISTED: usize = 100;

/// The kept occurrences, sorted by `(global_tid, start, end descending, label)`, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct LoadedOccurrences {
    /// Labels raw, or a framework's folded as they were read ([`load_occurrences_framework_folded`]: then
    /// `framework_folds` tells what their raw labels were).
    pub occurrences: Vec<Occurrence>,
    pub framework_folds: Option<FrameworkFolds>,
    pub skipped: Skipped,
    /// 59/60 rows seen (kept + skipped + filtered out by prefix/window).
    pub range_rows: u64,
    /// The first [`TRUNCATED_LISTED`] ranges closed by the capture's end, by thread and start.
    pub truncated: Vec<TruncatedRange>,
}

/// A range row's message: its `text` (interned) or its `textId` (resolved after the scan).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Msg {
    Text(u32),
    Id(i64),
    /// A row folded as it was read (its label is its own text): an id of the read's [`FoldTally`].
    Folded(u32),
}

/// A range row as read: 48 bytes (a label-heavy capture has one per NVTX row), the message and the domain
/// unpacked by [`RawRange::msg`] and [`RawRange::domain`].
struct RawRange {
    start: i64,
    end: i64,
    gtid: i64,
    /// The message's text or folded-label id, or its textId.
    msg_val: i64,
    domain_val: i64,
    /// The eventType of a range row (59 or 60).
    event_type: i32,
    /// 0 text, 1 textId, 2 folded.
    msg_kind: u8,
    has_domain: bool,
}

impl RawRange {
    fn new(start: i64, end: i64, event_type: i64, gtid: i64, msg: Msg, domain: Option<i64>) -> RawRange {
        let (msg_kind, msg_val) = match msg {
            Msg::Text(i) => (0, i64::from(i)),
            Msg::Id(id) => (1, id),
            Msg::Folded(f) => (2, i64::from(f)),
        };
        RawRange {
            start,
            end,
            gtid,
            msg_val,
            domain_val: domain.unwrap_or(0),
            // the rows read are ranges (59, 60) or domain names (75, never a RawRange)
            event_type: event_type as i32,
            msg_kind,
            has_domain: domain.is_some(),
        }
    }

    fn msg(&self) -> Msg {
        match self.msg_kind {
            0 => Msg::Text(self.msg_val as u32),
            1 => Msg::Id(self.msg_val),
            _ => Msg::Folded(self.msg_val as u32),
        }
    }

    fn set_msg(&mut self, m: Msg) {
        *self = RawRange::new(self.start, self.end, self.event_type.into(), self.gtid, m, self.domain());
    }

    fn domain(&self) -> Option<i64> {
        self.has_domain.then_some(self.domain_val)
    }
}

const _: () = assert!(std::mem::size_of::<RawRange>() == 48);

/// [`LoadedOccurrences`] with the labels as ids into one table (no `String` per occurrence).
#[derive(Default, Clone)]
pub(super) struct InternedOccurrences {
    /// Sorted like [`LoadedOccurrences::occurrences`].
    pub(super) occurrences: Vec<Interned>,
    pub(super) labels: Vec<String>,
    pub(super) skipped: Skipped,
    pub(super) range_rows: u64,
    pub(super) truncated: Vec<TruncatedRange>,
    /// With folding at read ([`super::fold_read`]): the labels already folded, and the tally of the rows
    /// folded as they were read (the other labels are raw).
    pub(super) prefolded: Vec<bool>,
    pub(super) tally: Option<FoldTally>,
    /// With [`AtRead::FoldFramework`]: the tally of the framework's labels as read (kept when `tally` goes on to
    /// fold the others).
    pub(super) framework: Option<FrameworkFolds>,
}

/// An [`Occurrence`] with its label as an id into [`InternedOccurrences::labels`]: 48 bytes, no heap (the
/// occurrences of a big export are held while its device rows are read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Interned {
    pub(super) global_tid: i64,
    pub(super) start: i64,
    pub(super) end: i64,
    /// `domainId`, 0 for none (the default domain 0 is read as none).
    pub(super) domain_id: i64,
    /// 59 or 60 (the only range event types).
    pub(super) event_type: i32,
    pub(super) label: u32,
    pub(super) depth: u32,
    /// `u32::MAX` for none.
    pub(super) parent: u32,
}

/// What [`nest`] and [`thread_slices`] read and write of an occurrence.
pub(super) trait Nested {
    fn tid(&self) -> i64;
    fn interval(&self) -> (i64, i64);
    fn set_nesting(&mut self, depth: u32, parent: Option<usize>);
}

impl Nested for Occurrence {
    fn tid(&self) -> i64 {
        self.global_tid
    }
    fn interval(&self) -> (i64, i64) {
        (self.start, self.end)
    }
    fn set_nesting(&mut self, depth: u32, parent: Option<usize>) {
        (self.depth, self.parent) = (depth, parent);
    }
}

impl Nested for Interned {
    fn tid(&self) -> i64 {
        self.global_tid
    }
    fn interval(&self) -> (i64, i64) {
        (self.start, self.end)
    }
    fn set_nesting(&mut self, depth: u32, parent: Option<usize>) {
        // an index fits: occurrences are counted in u32 everywhere in the analysis
        (self.depth, self.parent) = (depth, parent.map_or(u32::MAX, |p| p as u32));
    }
}

/// The NVTX rows of an export (or of one rowid range of it), as read: the range rows with their message (a
/// `text` interned, or a `textId`), the domain-creation rows, what was skipped.
#[derive(Default)]
struct NvtxRead {
    raw: Vec<RawRange>,
    /// Distinct `text` values by their first [`crate::labels::LABEL_MAX_BYTES`] (one buffer, no allocation per
    /// text: an emit_nvtx capture has one per op call), and whether the first one seen was cut there.
    texts: crate::fx::Interner,
    cut: Vec<bool>,
    /// `(NS(globalTid), domainId, message)` of the eventType 75 rows naming a domain.
    domain_rows: Vec<(i64, i64, Option<Msg>)>,
    skipped: Skipped,
    range_rows: u64,
    tally: FoldTally,
}

impl NvtxRead {
    /// The message of a row: textId when set (even with a text), else the text (interned).
    fn msg_of(&mut self, r: &crate::export::rows::NvtxRef<'_>) -> Option<Msg> {
        match (r.text_id, r.text) {
            (Some(id), _) => Some(Msg::Id(id)),
            (None, Some(t)) => Some(Msg::Text(self.intern(t))),
            (None, None) => None,
        }
    }

    /// A labelled range row whose label is its text `t`, folded as it is read: dropped when the prefix or the
    /// window leaves it out (as the raw path drops it), else tallied under its folded label.
    /// False when the row is left to the raw path (`framework_only`: a label of the user's own, or a cut one).
    fn add_folded(&mut self, cfg: &ReadFold, t: &[u8], row: (i64, i64, i64, i64)) -> bool {
        let (start, end, event_type, gtid) = row;
        let (head, cut) = crate::labels::cut_label_bytes(t);
        if cut && cfg.framework_only {
            return false;
        }
        let raw = match (cut, std::str::from_utf8(head)) {
            (false, Ok(s)) => std::borrow::Cow::Borrowed(s),
            _ => std::borrow::Cow::Owned(crate::labels::label_of_bytes(t)),
        };
        if cfg.prefix.as_ref().is_some_and(|p| !raw.starts_with(p.as_str())) {
            return true;
        }
        if cfg.window.is_some_and(|(ws, we)| start < ws || end > we) {
            return true;
        }
        let at = ExampleAt { gtid, start, end, event_type, domain: 0 };
        let id = if cfg.framework_only {
            match self.tally.add_framework(&raw, at) {
                Some(id) => id,
                None => return false,
            }
        } else {
            self.tally.add(&raw, 1, at)
        };
        self.raw.push(RawRange::new(start, end, event_type, gtid, Msg::Folded(id), None));
        true
    }

    /// Interned by their first [`crate::labels::LABEL_MAX_BYTES`]: a long message costs no more than that.
    fn intern(&mut self, t: &[u8]) -> u32 {
        let (key, cut) = crate::labels::cut_label_bytes(t);
        self.intern_key(key, cut)
    }

    fn intern_key(&mut self, key: &[u8], cut: bool) -> u32 {
        let (i, new) = self.texts.intern(key);
        if new {
            self.cut.push(cut);
        }
        i
    }

    /// The label text of an interned message: its lossy UTF-8, with [`crate::labels::LABEL_CUT_MARKER`] when cut.
    fn text(&self, i: u32) -> std::borrow::Cow<'_, str> {
        let b = self.texts.bytes(i);
        match (self.cut[i as usize], std::str::from_utf8(b)) {
            (false, Ok(s)) => std::borrow::Cow::Borrowed(s),
            (cut, _) => {
                let mut s = String::from_utf8_lossy(b).into_owned();
                if cut {
                    s.push_str(crate::labels::LABEL_CUT_MARKER);
                }
                std::borrow::Cow::Owned(s)
            }
        }
    }

    /// One row, in table order; with `fold`, the rows whose label is their own text are folded as they are read
    /// ([`super::fold_read`]). The parts of a parallel read borrow one `fold`: a shared `Arc` cloned for each row
    /// made every reader write to the one cache line of its count, twice a row.
    fn add(&mut self, r: crate::export::rows::NvtxRef<'_>, name: &str, fold: Option<&ReadFold>) -> Result<()> {
        if r.event_type == nvtx::DOMAIN_CREATE {
            if let (Some(g), Some(d)) = (r.global_tid, r.domain_id) {
                let msg = self.msg_of(&r);
                self.domain_rows.push((ns_of(g), d, msg));
            }
            return Ok(());
        }
        self.range_rows += 1;
        let (Some(start), Some(end)) = (r.start, r.end) else {
            self.skipped.open_or_inverted += 1;
            return Ok(());
        };
        if end < start {
            self.skipped.open_or_inverted += 1;
            return Ok(());
        }
        if r.text_id.is_none() && r.text.is_none() {
            self.skipped.unlabeled += 1;
            return Ok(());
        }
        let Some(gtid) = r.global_tid else {
            return Err(Error::input(format!(
                "{name}: {} row with start {start}: globalTid is NULL (the thread of a range is required)",
                schema::NVTX_EVENTS
            )));
        };
        if let (Some(cfg), None, Some(t), None) = (fold, r.text_id, r.text, r.domain_id) {
            // a range closed by the capture's end is listed with its raw label: the raw path
            if cfg.capture_end.is_none_or(|e| end < e) && self.add_folded(cfg, t, (start, end, r.event_type, gtid)) {
                return Ok(());
            }
        }
        let Some(msg) = self.msg_of(&r) else { unreachable!("a text or a textId, tested above") };
        self.raw.push(RawRange::new(start, end, r.event_type, gtid, msg, r.domain_id));
        Ok(())
    }

    /// Take in `p`, read after everything in `self`: its texts interned into `self`'s, its domain rows and
    /// counts added; its range rows are returned, their texts renumbered in place (the parts' rows are never
    /// copied into one vector: at 16 parallel parts its doubling growth was the peak of the whole analysis).
    /// Its raw labels are returned too, for one [`FoldTally::merge_raws`] of every part.
    fn absorb(&mut self, mut p: NvtxRead) -> (Vec<RawRange>, super::fold_read::PendingRaws) {
        let map: Vec<u32> =
            (0..p.texts.len() as u32).map(|i| self.intern_key(p.texts.bytes(i), p.cut[i as usize])).collect();
        let pending = self.tally.absorb_labels(std::mem::take(&mut p.tally));
        let fmap = pending.map();
        let remap = |m: Msg| match m {
            Msg::Text(i) => Msg::Text(map[i as usize]),
            Msg::Folded(i) => Msg::Folded(fmap[i as usize]),
            id => id,
        };
        let moved = |m: &[u32]| m.iter().enumerate().any(|(i, &m)| i as u32 != m);
        if moved(&map) || moved(fmap) {
            for r in &mut p.raw {
                r.set_msg(remap(r.msg()));
            }
        }
        self.domain_rows.extend(p.domain_rows.into_iter().map(|(n, d, m)| (n, d, m.map(remap))));
        self.skipped.unlabeled += p.skipped.unlabeled;
        self.skipped.open_or_inverted += p.skipped.open_or_inverted;
        self.range_rows += p.range_rows;
        (p.raw, pending)
    }
}

/// The range and domain rows of `NVTX_EVENTS` (present), read in parallel rowid ranges and taken in table
/// order: what one read in table order gives, the range rows as the parts read them (in table order, one vector
/// per part). With `stats`, the read is also the table's timed-stats scan ([`Export::put_nvtx_facts`]).
fn read_nvtx(export: &Export, stats: Option<Keep>, fold: Option<ReadFold>) -> Result<(NvtxRead, Vec<Vec<RawRange>>)> {
    let t = export.require(schema::NVTX_EVENTS, &cols::NVTX_EVENTS)?.clone();
    let name = export.name();
    let types = [nvtx::PUSH_POP, nvtx::START_END, nvtx::DOMAIN_CREATE];
    let threads = crate::export::rows::scan_threads();
    let (parts, facts) = crate::export::fold::fold_nvtx_events(
        &export.source(),
        &t,
        &types,
        threads,
        stats,
        NvtxRead::default,
        |p, r| p.add(r, &name, fold.as_ref()),
    )?;
    if let Some(f) = facts {
        export.put_nvtx_facts(f);
    }
    // the first part is the base (what absorbing it into an empty read gives, without re-interning its texts
    // and re-inserting its raw labels: a quarter of the merge's work at 4 parts)
    let mut parts = parts.into_iter();
    let Some(mut all) = parts.next() else { return Ok((NvtxRead::default(), Vec::new())) };
    let mut raw = vec![std::mem::take(&mut all.raw)];
    let mut pending = Vec::new();
    for p in parts {
        let (r, p) = all.absorb(p);
        raw.push(r);
        pending.push(p);
    }
    all.tally.merge_raws(pending);
    Ok((all, raw))
}

/// The kept NVTX range occurrences of an export, with depth and parent (see the module docs).
pub fn load_occurrences(export: &Export, opts: &RangesOptions) -> Result<LoadedOccurrences> {
    Ok(load_interned(export, opts, None, AtRead::Raw)?.into_loaded())
}

/// [`load_occurrences`] with default options, a framework's own ranges ([`crate::framework`]) under their folded
/// label (`aten::mm, op_id = 41599` → `aten::mm`), folded as they are read; every other label raw
/// ([`AtRead::FoldFramework`]): what `nvtx-readiness` reads.
pub fn load_occurrences_framework_folded(export: &Export) -> Result<LoadedOccurrences> {
    Ok(load_interned(export, &RangesOptions::default(), None, AtRead::FoldFramework)?.into_loaded())
}

/// Which range rows are folded as they are read ([`super::fold_read`]); only rows whose label is their own text
/// (no `textId`, no named domain) and not closed by the capture's end ever are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtRead {
    /// None: every label raw.
    Raw,
    /// Every such row.
    Fold,
    /// A framework's own ranges (their raw and folded labels both a framework's, not cut): an emit_nvtx capture's
    /// 205 708 distinct op labels are never held, and every label of the user's own stays raw.
    FoldFramework,
}

/// One shared string per label, for the occurrences that carry it ([`Occurrence::label`]).
pub(super) fn shared_labels(labels: &[String]) -> Vec<std::sync::Arc<str>> {
    labels.iter().map(|l| std::sync::Arc::from(l.as_str())).collect()
}

impl InternedOccurrences {
    /// The occurrences with their labels, the interned occurrences given back as they are turned into
    /// occurrences (from the end, a block at a time): the two vectors are never whole together (on emit_nvtx ×10,
    /// 2.06 M occurrences: 99 MB interned, 181 MB loaded; nvtx-readiness's peak RSS was the two).
    pub(super) fn into_loaded(self) -> LoadedOccurrences {
        const BLOCK: usize = 1 << 16;
        let InternedOccurrences { occurrences: mut from, labels, skipped, range_rows, truncated, framework, .. } = self;
        let labels = shared_labels(&labels);
        let mut occurrences: Vec<Occurrence> = Vec::with_capacity(from.len());
        while !from.is_empty() {
            let keep = from.len().saturating_sub(BLOCK);
            occurrences.extend(from.drain(keep..).rev().map(|o| o.with_label(&labels)));
            // a large vector's shrink gives its tail pages back in place (mremap)
            from.shrink_to_fit();
        }
        occurrences.reverse();
        LoadedOccurrences { occurrences, framework_folds: framework, skipped, range_rows, truncated }
    }
}

impl Interned {
    fn with_label(&self, labels: &[std::sync::Arc<str>]) -> Occurrence {
        Occurrence {
            label: labels[self.label as usize].clone(),
            global_tid: self.global_tid,
            start: self.start,
            end: self.end,
            event_type: self.event_type as i64,
            domain_id: (self.domain_id != 0).then_some(self.domain_id),
            depth: self.depth,
            parent: (self.parent != u32::MAX).then_some(self.parent as usize),
        }
    }
}

/// [`load_occurrences`], the messages interned while the rows stream (one `String` per distinct text) and the
/// labels built once per distinct `(domain, message)`; with `stats`, the NVTX read is also the table's
/// timed-stats scan ([`read_nvtx`]).
/// `at_read` says which rows are folded as they are read ([`AtRead`]).
pub(super) fn load_interned(
    export: &Export,
    opts: &RangesOptions,
    stats: Option<Keep>,
    at_read: AtRead,
) -> Result<InternedOccurrences> {
    let fold_at_read = at_read != AtRead::Raw;
    let nvtx = nvtx_table(export)?;
    export.require(schema::STRING_IDS, &cols::STRING_IDS)?;
    if !nvtx {
        return Ok(InternedOccurrences::default());
    }
    let mut ph = crate::phase::Phases::new("nvtx");
    // a range nsys closed when the capture stopped ends at the capture's end (never later)
    let capture_end = export.capture_end_ns()?;
    let fold = fold_at_read.then(|| ReadFold {
        prefix: opts.range_prefix.clone(),
        window: opts.window,
        capture_end,
        framework_only: at_read == AtRead::FoldFramework,
    });
    let (mut read, raw) = read_nvtx(export, stats, fold)?;
    let tally = fold_at_read.then(|| std::mem::take(&mut read.tally));
    let (range_rows, mut skipped) = (read.range_rows, read.skipped);
    export.put_nvtx_range_rows(range_rows);
    ph.mark("read");
    let ids = message_ids(&raw, &read.domain_rows);
    let strings = export.labels_for(&ids)?;
    let message = |m: Msg| -> Option<std::borrow::Cow<'_, str>> {
        match m {
            Msg::Id(id) => strings.get(&id).map(|s| std::borrow::Cow::Borrowed(s.as_str())),
            Msg::Text(i) => Some(read.text(i)),
            Msg::Folded(_) => None,
        }
    };
    let mut domains: FxMap<(i64, i64), String> = FxMap::default();
    for &(ns, d, m) in &read.domain_rows {
        if let Some(name) = m.and_then(message) {
            domains.insert((ns, d), name.into_owned());
        }
    }

    // labels: one per distinct (domain name, message), interned by their text; `keep` says whether the label
    // passes the prefix
    let mut labels: Vec<String> = Vec::new();
    let mut keep: Vec<bool> = Vec::new();
    let mut label_idx = crate::fx::Interner::new();
    // (named domain (NS, domainId), message) → label id (None: a textId without a string)
    type LabelKey = (Option<(i64, i64)>, Msg);
    let mut by_key: FxMap<LabelKey, Option<u32>> = FxMap::default();
    let mut prefolded: Vec<bool> = Vec::new();
    // label_idx's ids → labels (the folded rows' labels are numbered apart)
    let mut label_of: Vec<u32> = Vec::new();
    let mut occ: Vec<Interned> = Vec::with_capacity(raw.iter().map(Vec::len).sum());
    let mut truncated: Vec<TruncatedRange> = Vec::new();
    // a folded row's label by its tally id (no map probe: on an emit_nvtx capture nearly every row is one)
    let mut of_folded: Vec<u32> = Vec::new();
    // each part's rows freed once taken
    for r in raw.into_iter().flatten() {
        if let (Msg::Folded(f), Some(t)) = (r.msg(), tally.as_ref()) {
            let f = f as usize;
            if f >= of_folded.len() {
                of_folded.resize(f + 1, u32::MAX);
            }
            if of_folded[f] == u32::MAX {
                // its own label id (never merged with a raw label of the same text: that one is still folded)
                of_folded[f] = labels.len() as u32;
                labels.push(t.label(f as u32).to_string());
                keep.push(true);
                prefolded.push(true);
            }
            // kept: the prefix and the window were applied as it was read; it ends before the capture's end
            occ.push(Interned {
                global_tid: r.gtid,
                start: r.start,
                end: r.end,
                domain_id: 0,
                event_type: r.event_type,
                label: of_folded[f],
                depth: 0,
                parent: u32::MAX,
            });
            continue;
        }
        let dkey = r.domain().map(|d| (ns_of(r.gtid), d)).filter(|k| domains.contains_key(k));
        let label = *by_key.entry((dkey, r.msg())).or_insert_with(|| {
            let msg = message(r.msg())?;
            let text = match dkey.and_then(|k| domains.get(&k)) {
                Some(dn) => std::borrow::Cow::Owned(format!("{dn}:{msg}")),
                None => msg,
            };
            let (i, new) = label_idx.intern(text.as_bytes());
            if new {
                label_of.push(labels.len() as u32);
                keep.push(opts.range_prefix.as_ref().is_none_or(|p| text.starts_with(p.as_str())));
                prefolded.push(false);
                labels.push(text.into_owned());
            }
            Some(label_of[i as usize])
        });
        let Some(label) = label else {
            skipped.unlabeled += 1;
            continue;
        };
        if capture_end.is_some_and(|e| r.end >= e) {
            skipped.closed_by_capture_end += 1;
            if truncated.len() < 4 * TRUNCATED_LISTED {
                truncated.push(TruncatedRange {
                    label: labels[label as usize].clone(),
                    global_tid: r.gtid,
                    start: r.start,
                    end: r.end,
                });
            }
            continue;
        }
        if !keep[label as usize] {
            continue;
        }
        if let Some((ws, we)) = opts.window {
            if r.start < ws || r.end > we {
                continue;
            }
        }
        occ.push(Interned {
            global_tid: r.gtid,
            start: r.start,
            end: r.end,
            domain_id: r.domain().unwrap_or(0),
            event_type: r.event_type,
            label,
            depth: 0,
            parent: u32::MAX,
        });
    }
    drop((label_idx, by_key));
    ph.mark("labels");
    sort_interned(&mut occ, &labels);
    ph.mark("sort");
    nest(&mut occ);
    ph.mark("nest");
    truncated.sort_by(|a, b| (a.global_tid, a.start, &a.label).cmp(&(b.global_tid, b.start, &b.label)));
    truncated.truncate(TRUNCATED_LISTED);
    let (tally, framework) = framework_folds(at_read, opts.fold, tally);
    Ok(InternedOccurrences { occurrences: occ, labels, skipped, range_rows, truncated, prefolded, tally, framework })
}

/// The read's tally for the folding after it, and the framework's folds for readiness ([`AtRead::FoldFramework`]):
/// readiness alone (nothing folds after) takes the tally; an analysis keeping its occurrences for readiness folds
/// the user's labels into its own copy.
fn framework_folds(at: AtRead, fold: bool, tally: Option<FoldTally>) -> (Option<FoldTally>, Option<FrameworkFolds>) {
    match at {
        AtRead::FoldFramework if !fold => (None, tally.map(FrameworkFolds::of)),
        AtRead::FoldFramework => (tally.clone(), tally.map(FrameworkFolds::of)),
        _ => (tally, None),
    }
}

/// The `textId`s of the range rows and of the domain-creation rows (resolved in one pass over `StringIds`).
fn message_ids(raw: &[Vec<RawRange>], domain_rows: &[(i64, i64, Option<Msg>)]) -> HashSet<i64> {
    let msgs = raw.iter().flatten().map(RawRange::msg).chain(domain_rows.iter().filter_map(|d| d.2));
    msgs.filter_map(|m| if let Msg::Id(id) = m { Some(id) } else { None }).collect()
}

/// Sort by (thread, start, end descending, label bytes, eventType, domain): the labels' byte order as ranks, so
/// that the sort compares integers only.
fn sort_interned(occ: &mut [Interned], labels: &[String]) {
    let mut by_text: Vec<u32> = (0..labels.len() as u32).collect();
    by_text.sort_unstable_by(|&a, &b| labels[a as usize].as_bytes().cmp(labels[b as usize].as_bytes()));
    let mut rank = vec![0u32; labels.len()];
    for (r, &l) in by_text.iter().enumerate() {
        rank[l as usize] = r as u32;
    }
    occ.sort_unstable_by_key(|o| {
        (o.global_tid, o.start, std::cmp::Reverse(o.end), rank[o.label as usize], o.event_type, o.domain_id)
    });
}

/// The occurrences of `loaded` (a [`load_occurrences`] without prefix or window) whose label starts with
/// `prefix`, with their depth and parent among themselves: what [`load_occurrences`] gives with that
/// `range_prefix`, without reading the export again (the sorted order of a subset is its sorted order).
pub fn keep_prefix(loaded: &LoadedOccurrences, prefix: &str) -> LoadedOccurrences {
    let kept = |o: &&Occurrence| o.label.starts_with(prefix);
    // allocated once at its size (500 k occurrences: no doubling copies)
    let mut occ: Vec<Occurrence> = Vec::with_capacity(loaded.occurrences.iter().filter(kept).count());
    occ.extend(loaded.occurrences.iter().filter(kept).map(|o| Occurrence { depth: 0, parent: None, ..o.clone() }));
    nest(&mut occ);
    LoadedOccurrences {
        occurrences: occ,
        framework_folds: loaded.framework_folds.clone(),
        skipped: loaded.skipped,
        range_rows: loaded.range_rows,
        truncated: loaded.truncated.clone(),
    }
}

/// [`keep_prefix`]'s occurrences, borrowed from `loaded` when every occurrence's label starts with `prefix`: the
/// same occurrences, whose depth and parent among themselves are the ones `loaded` holds (a copy was 44 MB at
/// 500 k occurrences).
pub fn kept_under<'a>(loaded: &'a LoadedOccurrences, prefix: &str) -> std::borrow::Cow<'a, [Occurrence]> {
    if loaded.occurrences.iter().all(|o| o.label.starts_with(prefix)) {
        return std::borrow::Cow::Borrowed(&loaded.occurrences);
    }
    std::borrow::Cow::Owned(keep_prefix(loaded, prefix).occurrences)
}

/// Thread slices `[lo, hi)` of the sorted occurrences.
pub(super) fn thread_slices<T: Nested>(occ: &[T]) -> Vec<(i64, usize, usize)> {
    let mut out = Vec::new();
    let mut lo = 0;
    while lo < occ.len() {
        let g = occ[lo].tid();
        let mut hi = lo + 1;
        while hi < occ.len() && occ[hi].tid() == g {
            hi += 1;
        }
        out.push((g, lo, hi));
        lo = hi;
    }
    out
}

/// Depth and parent of every occurrence (sorted by thread, start, end descending, label). The parent is the
/// rightmost earlier occurrence of the thread whose end is not before its end (a previous-greater-or-equal
/// stack); the depth counts the earlier ones whose end is not before its end (a Fenwick tree over end ranks).
fn nest<T: Nested>(occ: &mut [T]) {
    // earlier occurrences of the slice whose end no later one has passed: ends non-increasing from the bottom
    let mut stack: Vec<usize> = Vec::new();
    for (_, lo, hi) in thread_slices(occ) {
        stack.clear();
        // depth(i) = #{j < i in the slice: end_j >= end_i} + identical twins after i: the stack's height when the
        // ranges nest ([`nests`]), else counted in a Fenwick tree over the ranks of the ends
        let nested = nests(&occ[lo..hi]);
        let mut ends: Vec<i64> = if nested { Vec::new() } else { occ[lo..hi].iter().map(|o| o.interval().1).collect() };
        ends.sort_unstable();
        ends.dedup();
        let m = ends.len();
        let mut fen = vec![0u32; m + 1];
        let mut inserted = 0u32;
        let mut i = lo;
        while i < hi {
            // the run of identical intervals [i, k)
            let mut k = i + 1;
            while k < hi && occ[k].interval() == occ[i].interval() {
                k += 1;
            }
            let rank = ends.partition_point(|&e| e < occ[i].interval().1); // number of distinct ends < end_i
                                                                           // earlier ones with end < end_i
            let mut less = 0u32;
            let mut r = rank;
            while r > 0 {
                less += fen[r];
                r &= r - 1;
            }
            let run = k - i;
            // the rightmost earlier one with end >= end_i: the top of the stack once the smaller ends are gone
            while stack.last().is_some_and(|&t| occ[t].interval().1 < occ[i].interval().1) {
                stack.pop();
            }
            let before_ge = if nested { stack.len() as u32 } else { inserted - less };
            let outer = if run == 1 { stack.last().copied() } else { None };
            for (p, j) in (i..k).enumerate() {
                let parent = if run > 1 {
                    // its identical twins enclose it: the smallest label among the others
                    Some(if p == 0 { i + 1 } else { i })
                } else {
                    // the run of the enclosing one: its first element has the smallest label
                    outer.map(|o| {
                        let mut f = o;
                        while f > lo && occ[f - 1].interval() == occ[o].interval() {
                            f -= 1;
                        }
                        f
                    })
                };
                occ[j].set_nesting(before_ge + (run - 1) as u32, parent);
            }
            stack.extend(i..k);
            for _ in (i..k).filter(|_| !nested) {
                let mut r = rank + 1;
                while r <= m {
                    fen[r] += 1;
                    r += r & r.wrapping_neg();
                }
                inserted += 1;
            }
            i = k;
        }
    }
}

/// Whether the ranges of a thread's slice (by start, then end descending) nest: none empty, and none crossing
/// another (it starts inside one and ends after it). Then the earlier ranges whose end is not before a range's end
/// are the ones that enclose it: those [`nest`]'s stack holds (none was popped by a later one, which would have
/// crossed it or started after its end, hence after the range's own start and end).
fn nests<T: Nested>(occ: &[T]) -> bool {
    let mut ends: Vec<i64> = Vec::new();
    for o in occ {
        let (s, e) = o.interval();
        if s == e {
            return false;
        }
        while ends.last().is_some_and(|&t| t <= s) {
            ends.pop();
        }
        if ends.last().is_some_and(|&t| t < e) {
            return false;
        }
        ends.push(e);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Depth and parent by their definitions, quadratic: depth = the earlier occurrences of the thread whose end
    /// is not before its end, plus its identical twins after it; parent = the first of the run of the rightmost
    /// earlier one whose end is not before its end (a twin: the first of the others).
    fn nest_by_definition(occ: &[Occurrence]) -> Vec<(u32, Option<usize>)> {
        let mut out = Vec::new();
        for (i, o) in occ.iter().enumerate() {
            let same = |j: usize| occ[j].global_tid == o.global_tid;
            let twin = |j: usize| same(j) && occ[j].start == o.start && occ[j].end == o.end;
            let run_start = (0..=i).rev().take_while(|&j| twin(j)).last().unwrap();
            let run_end = (i..occ.len()).take_while(|&j| twin(j)).last().unwrap() + 1;
            let before = (0..run_start).filter(|&j| same(j) && occ[j].end >= o.end).count();
            let depth = (before + run_end - run_start - 1) as u32;
            let parent = if run_end - run_start > 1 {
                Some(if i == run_start { i + 1 } else { run_start })
            } else {
                (0..i).rev().find(|&j| same(j) && occ[j].end >= o.end).map(|p| {
                    (0..=p)
                        .rev()
                        .take_while(|&j| occ[j].start == occ[p].start && occ[j].end == occ[p].end && same(j))
                        .last()
                        .unwrap()
                })
            };
            out.push((depth, parent));
        }
        out
    }

    /// Rows read in parts and taken in order ([`NvtxRead::absorb`]) are the rows one read gives: the same texts in
    /// the same order, each row's message pointing at the same text, domain rows and counts added.
    #[test]
    fn parts_taken_in_order_are_one_read() {
        let texts: [&[u8]; 6] = [b"decode", b"prefill", b"decode", b"sample", b"prefill", b"other"];
        let row = |i: usize| crate::export::rows::NvtxRef {
            start: Some(i as i64 * 10),
            end: Some(i as i64 * 10 + 5),
            event_type: if i == 4 { nvtx::DOMAIN_CREATE } else { nvtx::PUSH_POP },
            text: (i != 3).then_some(texts[i % texts.len()]),
            text_id: (i == 3).then_some(77),
            global_tid: Some(1 << 24 | 5),
            domain_id: Some(1),
        };
        let read = |rows: std::ops::Range<usize>| {
            let mut p = NvtxRead::default();
            rows.for_each(|i| p.add(row(i), "x", None).unwrap());
            p
        };
        // a message as its text (or its textId)
        let text = |p: &NvtxRead, m: Msg| match m {
            Msg::Text(i) => Ok(p.text(i).into_owned()),
            Msg::Id(id) => Err(id),
            Msg::Folded(f) => Err(-1 - f as i64),
        };
        let rows = |p: &NvtxRead, raw: &[RawRange]| raw.iter().map(|r| (r.start, text(p, r.msg()))).collect::<Vec<_>>();
        let domains =
            |p: &NvtxRead| p.domain_rows.iter().map(|d| (d.0, d.1, d.2.map(|m| text(p, m)))).collect::<Vec<_>>();
        let one = read(0..12);
        let mut all = NvtxRead::default();
        // the third part's first text is the second one read: its rows are renumbered
        let raw: Vec<Vec<RawRange>> = [0..2, 2..7, 7..12].into_iter().map(|r| all.absorb(read(r)).0).collect();
        let raw: Vec<RawRange> = raw.into_iter().flatten().collect();
        let texts = |p: &NvtxRead| (0..p.texts.len() as u32).map(|i| p.text(i).into_owned()).collect::<Vec<_>>();
        assert_eq!(texts(&all), texts(&one));
        assert_eq!(rows(&all, &raw), rows(&one, &one.raw));
        assert_eq!(domains(&all), domains(&one));
        assert_eq!((all.range_rows, all.skipped.unlabeled), (one.range_rows, one.skipped.unlabeled));
        assert_eq!(all.range_rows, 11);
    }

    /// On real captures: the occurrences under a prefix are [`keep_prefix`]'s, borrowed exactly when every label
    /// has the prefix (then `keep_prefix` re-nests the same occurrences into the same depths and parents).
    #[test]
    fn kept_under_is_keep_prefix_borrowed_when_all_are_kept() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nsys-2025.3.1");
        for f in ["decode_clean.sqlite", "gpu_full_node.sqlite"] {
            let export = crate::export::Export::open(&root.join(f)).unwrap();
            let loaded = load_occurrences(&export, &RangesOptions::default()).unwrap();
            assert!(loaded.occurrences.iter().any(|o| o.depth > 0), "{f}: nested ranges");
            for (prefix, all) in [("vibeserve.", true), ("vibeserve.engine.", false), ("none.", false)] {
                let got = kept_under(&loaded, prefix);
                assert_eq!(matches!(got, std::borrow::Cow::Borrowed(_)), all, "{f} {prefix}");
                assert_eq!(*got, *keep_prefix(&loaded, prefix).occurrences, "{f} {prefix}");
            }
        }
    }

    /// A packed range row gives back its message and domain at their edges, and a message set later.
    #[test]
    fn raw_range_packs_its_message_and_domain() {
        let msgs =
            [Msg::Text(0), Msg::Text(u32::MAX), Msg::Id(i64::MIN), Msg::Id(-1), Msg::Id(i64::MAX), Msg::Folded(7)];
        for m in msgs {
            for d in [None, Some(0), Some(-5), Some(i64::MAX)] {
                let mut r = RawRange::new(-3, 9, 60, 1 << 40, m, d);
                assert!(
                    r.msg() == m && r.domain() == d && (r.start, r.end, r.gtid, r.event_type) == (-3, 9, 1 << 40, 60)
                );
                r.set_msg(Msg::Folded(u32::MAX));
                assert!(r.msg() == Msg::Folded(u32::MAX) && r.domain() == d && r.event_type == 60);
            }
        }
    }

    #[test]
    fn nesting_follows_its_definition() {
        // crossing start/end ranges, identical twins and nested push/pop ranges on two threads
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..200 {
            let mut occ: Vec<Occurrence> = (0..40)
                .map(|_| {
                    let start = next(30) as i64;
                    Occurrence {
                        label: "".into(),
                        global_tid: next(2) as i64,
                        start,
                        end: start + next(12) as i64,
                        event_type: 59,
                        domain_id: None,
                        depth: 0,
                        parent: None,
                    }
                })
                .collect();
            occ.sort_by_key(|o| (o.global_tid, o.start, std::cmp::Reverse(o.end)));
            let want = nest_by_definition(&occ);
            nest(&mut occ);
            let got: Vec<(u32, Option<usize>)> = occ.iter().map(|o| (o.depth, o.parent)).collect();
            assert_eq!(got, want);
        }
    }

    /// Push/pop ranges that nest (the stack's height is the depth) follow the definition too, with identical
    /// twins, ranges sharing a start or an end, and adjacent ones; one empty or crossing range in a slice sends
    /// that slice to the Fenwick count, and the result is the same.
    #[test]
    fn nested_ranges_follow_the_definition() {
        let mut next = crate::test_rng::xorshift(0x5EED_0F4E57);
        let mut seen = [0usize; 2];
        for round in 0..400 {
            let mut occ: Vec<Occurrence> = Vec::new();
            for tid in 0..2i64 {
                // a random tree of ranges over [0, 64): each splits its span into children
                let mut spans = vec![(0i64, 64i64, 0u32)];
                while let Some((s, e, d)) = spans.pop() {
                    occ.push(Occurrence {
                        label: "".into(),
                        global_tid: tid,
                        start: s,
                        end: e,
                        event_type: 59,
                        domain_id: None,
                        depth: 0,
                        parent: None,
                    });
                    if next(4) == 0 {
                        spans.push((s, e, 5)); // an identical twin (its own children would cross its twin's)
                    }
                    let mut at = s;
                    while d < 5 && at < e {
                        let len = 1 + next(e - at);
                        let (cs, ce) = (at + next(2), (at + len).min(e));
                        if cs < ce && next(3) > 0 {
                            spans.push((cs, ce, d + 1));
                        }
                        at += len;
                    }
                }
            }
            // every other round, one empty or crossing range
            if round % 2 == 1 {
                let (s, e) = if next(2) == 0 { (10, 10) } else { (5, 70) };
                let o = Occurrence { start: s, end: e, ..occ[0].clone() };
                occ.push(o);
            }
            occ.sort_by_key(|o| (o.global_tid, o.start, std::cmp::Reverse(o.end)));
            let slices = thread_slices(&occ);
            seen[usize::from(slices.iter().all(|&(_, lo, hi)| nests(&occ[lo..hi])))] += 1;
            let want = nest_by_definition(&occ);
            nest(&mut occ);
            let got: Vec<(u32, Option<usize>)> = occ.iter().map(|o| (o.depth, o.parent)).collect();
            assert_eq!(got, want, "round {round}");
        }
        assert!(seen[0] >= 150 && seen[1] >= 150, "both counts exercised: {seen:?}");
    }
}
