//! Unit tests of the ranges analysis (packed rows, sync API names, label patterns).

use super::device::Tags;
use super::*;

#[test]
fn a_correlated_row_is_12_bytes() {
    assert_eq!(std::mem::size_of::<PackedCorrelatedRow>(), 12);
}

/// Packed rows give back what was pushed, rows of 2^32 - 1 ns or more and rows starting 2^31 ns or more from the
/// first included (kept whole), and sort as the rows themselves sorted stably by `(start, end)`, with and
/// without such rows.
#[test]
fn correlated_rows_keep_long_ends_and_sort_stably() {
    let row = |start: i64, len: i64, kind: DeviceKind, device: u32| CorrelatedDeviceRow {
        start,
        end: start + len,
        kind,
        device,
    };
    let long = u32::MAX as i64;
    let short = vec![
        row(50, 10, DeviceKind::Kernel, 0),
        row(10, 5, DeviceKind::Memcpy, 3),
        row(10, 5, DeviceKind::Kernel, 1),
        row(10, 2, DeviceKind::GraphTrace, (1 << 30) - 1),
        row(-7, 0, DeviceKind::Memset, 2),
    ];
    let mut with_long = short.clone();
    with_long.insert(1, row(10, long, DeviceKind::Kernel, 4));
    with_long.insert(3, row(10, long - 1, DeviceKind::Memcpy, 5));
    with_long.push(row(-100, 1 << 40, DeviceKind::GraphTrace, 6));
    // starts 2^31 ns or more from the first row's: kept whole too
    with_long.push(row(1 << 35, 5, DeviceKind::Kernel, 7));
    with_long.push(row(50 + (1 << 31), 5, DeviceKind::Memcpy, 8));
    with_long.push(row(50 + (1 << 31) - 1, 5, DeviceKind::Kernel, 9));
    with_long.push(row(-(1 << 33), 0, DeviceKind::Memset, 10));
    for rows in [short, with_long] {
        let mut packed = CorrelatedDeviceRows::default();
        rows.iter().for_each(|&r| packed.push(r));
        assert_eq!(packed.iter().collect::<Vec<_>>(), rows);
        assert_eq!(packed.len(), rows.len());
        let mut sorted = rows.clone();
        sorted.sort_by_key(|d| (d.start, d.end));
        packed.sort();
        assert_eq!(packed.iter().collect::<Vec<_>>(), sorted);
    }
}

#[test]
fn an_enclosed_call_is_12_bytes() {
    assert_eq!(std::mem::size_of::<PackedEnclosed>(), 12);
}

/// Packed runtime calls give back what was pushed, in order, calls that do not pack included (2^32 - 1 ns or
/// more, a name id outside `0..2^31 - 1`, a start 2^31 ns or more from the first call's), and sort as the calls themselves, with and without such calls; the
/// same calls sorted give equal containers whatever order they were pushed in.
#[test]
fn enclosed_calls_keep_wide_calls_and_sort_by_the_call() {
    let call = |start: i64, len: i64, name_id: Option<i64>, sync: bool| EnclosedRuntimeCall {
        start,
        end: start + len,
        name_id,
        sync,
    };
    let long = u32::MAX as i64;
    let narrow = vec![
        call(50, 10, Some(7), false),
        call(10, 5, None, true),
        call(10, 5, Some(0), true),
        call(10, 5, Some(0), false),
        call(10, long - 1, Some((1 << 31) - 2), true),
        call(-7, 0, None, false),
        call(10, 5, None, false),
    ];
    let mut with_wide = narrow.clone();
    with_wide.insert(1, call(10, 1 << 33, Some(3), true));
    with_wide.insert(3, call(10, long, None, false));
    with_wide.insert(5, call(10, 5, Some(1 << 31), false));
    with_wide.insert(6, call(10, 5, Some((1 << 31) - 1), true));
    with_wide.push(call(10, 5, Some(-1), true));
    with_wide.push(call(-100, 1 << 40, Some(i64::MAX), false));
    with_wide.push(call(10, 5, Some(1 << 40), false));
    // starts 2^31 ns or more from the first call's
    with_wide.push(call(1 << 35, 5, Some(3), false));
    with_wide.push(call(50 + (1 << 31), 5, None, true));
    with_wide.push(call(50 + (1 << 31) - 1, 5, Some(4), false));
    with_wide.push(call(-(1 << 33), 0, None, false));
    for calls in [narrow, with_wide] {
        let mut packed = EnclosedCalls::default();
        assert!(packed.is_empty());
        calls.iter().for_each(|&c| packed.push(c));
        assert_eq!(packed.iter().collect::<Vec<_>>(), calls);
        assert_eq!((packed.len(), packed.is_empty()), (calls.len(), false));
        let mut sorted = calls.clone();
        sorted.sort_by_key(|r| (r.start, r.end, r.name_id, r.sync));
        packed.sort();
        assert_eq!(packed.iter().collect::<Vec<_>>(), sorted);
        let mut reversed = EnclosedCalls::default();
        calls.iter().rev().for_each(|&c| reversed.push(c));
        reversed.sort();
        assert_eq!(reversed, packed);
    }
}

#[test]
fn sync_api_names_normalise() {
    assert_eq!(normalize_sync_api("cudaStreamSynchronize_v3020"), Some("cudaStreamSynchronize"));
    assert_eq!(normalize_sync_api("cudaMemcpy_ptds_v7000"), Some("cudaMemcpy"));
    assert_eq!(normalize_sync_api("cudaMemcpyAsync_v3020"), None);
    assert_eq!(normalize_sync_api("cudaMemcpy2D_v3020"), Some("cudaMemcpy2D"));
    assert_eq!(normalize_sync_api("cuCtxSynchronize"), Some("cuCtxSynchronize"));
    assert_eq!(normalize_sync_api("cudaStreamQuery_ptsz"), Some("cudaStreamQuery"));
    assert_eq!(normalize_sync_api("cudaLaunchKernel_v7000"), None);
    // `_v` without a digit is not a version suffix
    assert_eq!(normalize_sync_api("cudaMemset_vx"), None);
    assert_eq!(normalize_sync_api(""), None);
}

#[test]
fn windows_parse() {
    assert_eq!(parse_window("10:20").unwrap(), (10, 20));
    assert_eq!(parse_window("-5:-1").unwrap(), (-5, -1));
    assert!(parse_window("5:1").is_err());
    assert!(parse_window("5").is_err());
    assert!(parse_window("a:b").is_err());
}

#[test]
fn chains_intern_by_content() {
    let mut c = Chains::new();
    let (a, b) = (c.intern(&[1, 2, 3]), c.intern(&[1, 2]));
    assert_ne!(a, b);
    assert_eq!(c.intern(&[1, 2, 3]), a);
    assert_eq!(c.intern(&[1, 2]), b);
    // many chains: the table grows and still finds each by its content
    let ids: Vec<u32> = (0..5000u32).map(|i| c.intern(&[i, i + 7])).collect();
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(c.get(id), &[i as u32, i as u32 + 7]);
        assert_eq!(c.intern(&[i as u32, i as u32 + 7]), id);
    }
    c.freeze();
    assert_eq!(c.get(a), &[1, 2, 3]);
}

#[test]
fn tags_are_shared_by_chain_and_device() {
    let mut t = Tags::new(3);
    let first = t.shared(1, 0);
    assert_eq!(t.shared(1, 0), first);
    // the same chain on another device: its own shared tag, found again
    let other = t.shared(1, 5);
    assert_ne!(other, first);
    assert_eq!(t.shared(1, 5), other);
    assert_eq!(t.shared(1, 0), first);
    // no chain (unattributed rows) has a slot too
    let none = t.shared(u32::MAX, 0);
    assert_eq!(t.shared(u32::MAX, 0), none);
    // a long row's tag is its own, holding its end
    let long = t.own(Tag { chain: 2, dev: 0, end: 99 });
    assert_ne!(long, t.shared(2, 0));
    for (id, (chain, dev)) in [(first, (1, 0)), (other, (1, 5)), (none, (u32::MAX, 0))] {
        let tag = t.get(id);
        assert_eq!((tag.chain, tag.dev), (chain, dev));
    }
    assert_eq!(t.get(long).end, 99);
}

#[test]
fn sync_table_gives_each_occurrence_its_apis_in_order() {
    let mut hits = SyncHits::default();
    let st = |calls, total_ns| SyncStat { calls, total_ns };
    hits.insert(2 << 8 | 5, st(1, 10));
    hits.insert(2 << 8 | 1, st(2, 30));
    hits.insert(4 << 8, st(1, i64::MAX));
    hits.insert(4 << 8 | 3, st(1, 5));
    let t = SyncTable::new(hits);
    assert_eq!(t.of(2).collect::<Vec<_>>(), vec![(1, st(2, 30)), (5, st(1, 10))]);
    assert_eq!(t.totals(2), (3, 40));
    assert_eq!(t.of(3).count(), 0);
    assert_eq!(t.totals(0), (0, 0));
    // saturating, like each API's sum
    assert_eq!(t.totals(4), (2, i64::MAX));
    assert_eq!(t.of(9).count(), 0);
}

#[test]
fn digit_runs_collapse() {
    assert_eq!(digits_to_hash("vibeserve.request.12"), "vibeserve.request.#");
    assert_eq!(digits_to_hash("a1b22c"), "a#b#c");
}

#[test]
fn an_occurrence_keeps_its_domain_and_event_type_packed() {
    let mut d = Domains::default();
    let cases = [(0i64, 59i32), (7, 60), (1 << 40, 59), (-3, 60), (7, 59), (0, 60)];
    let kinds: Vec<u32> = cases.iter().map(|&(dom, et)| d.kind(dom, et)).collect();
    for (&(dom, et), &kind) in cases.iter().zip(&kinds) {
        let o = COcc { start: 0, end: 1, label: 0, depth: 0, parent: u32::MAX, kind };
        assert_eq!((o.domain_id(&d), o.event_type()), (dom, et));
    }
    // one index per distinct domain, none (0) first
    assert_eq!(d.ids, [0, 7, 1 << 40, -3]);
    assert_eq!(std::mem::size_of::<COcc>(), 32);
}
