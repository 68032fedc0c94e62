//! Unit tests of the device timelines (unions, idle pieces, gaps, launches, queue depth).

use super::*;

#[test]
fn two_gaps_that_touch_count_as_two() {
    // [0, 10), a zero-length row at 20, [30, 40): the gaps [10, 20) and [20, 30) touch
    let op = |start: i64, end: i64| Op::new(start, end, NO_CALL, 0, DeviceKind::Kernel, false);
    let ops = OpRows::from(&[op(0, 10), op(20, 20), op(30, 40)][..]);
    let (pieces, busy, span) = gaps(&ops, &Calls::default(), &FirstRows::of(&ops));
    let lengths = pieces.gap_lengths(2);
    assert_eq!((lengths.dist(), busy, span), (dist([10, 10]), 20, (0, 40)));
    let other = categories_of(&pieces)["other"];
    assert_eq!((other.ns, other.gaps), (20, 2));
    assert_eq!(pieces.iter().collect::<Vec<_>>(), vec![(10, 20, OTHER), (20, 30, OTHER)]);
}

#[test]
fn idle_inside_and_across_spans_is_idle_in_summed() {
    let mut next = crate::test_rng::xorshift(0x5DEE_CE66_D1CE_4E5B);
    for _ in 0..500 {
        // sorted disjoint pieces (some touching), sorted disjoint spans (some empty of pieces)
        let (mut pieces, mut t) = (Pieces::default(), next(20));
        for _ in 0..next(30) {
            let s = t + next(3);
            t = s + 1 + next(10);
            pieces.push((s, t, next(4) as u8));
        }
        let (mut u, mut t) = (Vec::new(), next(40) - 10);
        for _ in 0..1 + next(8) {
            let a = t + 1 + next(15);
            t = a + 1 + next(20);
            u.push((a, t));
        }
        let mut inside = [0i64; 4];
        for &(a, b) in &u {
            let v = pieces.idle_in(a, b);
            (0..4).for_each(|k| inside[k] += v[k]);
        }
        let across = pieces.idle_in(u[0].0, u[u.len() - 1].1);
        assert_eq!(pieces.idle_inside_and_across(&u), (inside, across), "{pieces:?} {u:?}");
    }
    assert_eq!(Pieces::default().idle_inside_and_across(&[]), ([0; 4], [0; 4]));
}

/// Pieces give back what was pushed, over several blocks of offsets, with starts 2^32 ns or more from their
/// block's first piece and pieces of 2^32 ns or more; lookups by time find them.
#[test]
fn pieces_keep_far_starts_and_long_ends() {
    let mut next = crate::test_rng::xorshift(0x0123_4567_89AB_CDEF);
    let (mut want, mut t) = (Vec::new(), -(1i64 << 40));
    for i in 0..3 * Pieces::BLOCK + 17 {
        let s = t + match i % 97 {
            0 => 1 << 33,
            5 => u32::MAX as i64 - 1,
            _ => next(50),
        };
        let len = match i % 89 {
            0 => 1 << 34,
            3 => u32::MAX as i64,
            _ => 1 + next(40),
        };
        t = s + len;
        want.push((s, t, (i % 4) as u8));
    }
    let mut pieces = Pieces::with_capacity(want.len());
    want.iter().for_each(|&p| pieces.push(p));
    pieces.shrink_to_fit();
    assert_eq!(pieces.iter().collect::<Vec<_>>(), want);
    for &k in &[0usize, 1, 96, 97, 1023, 1024, 1025, 2048, want.len() - 1] {
        let (s, e, _) = want[k];
        assert_eq!(pieces.ending_after(s).next(), Some(want[k]), "piece {k}");
        let mut v = [0i64; 4];
        v[want[k].2 as usize] = e - s;
        assert_eq!(pieces.idle_in(s, e), v, "piece {k}");
    }
}

#[test]
fn split_and_overlap() {
    let mut out = Pieces::default();
    split_by(0, 100, &[(-5, 10), (20, 30), (90, 200)], SYNC, HOST, &mut out);
    assert_eq!(
        out.iter().collect::<Vec<_>>(),
        vec![(0, 10, SYNC), (10, 20, HOST), (20, 30, SYNC), (30, 90, HOST), (90, 100, SYNC)]
    );
    assert_eq!(overlap(&[(0, 10), (20, 30)], &[(5, 25)]), 10);
    assert_eq!(base_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
    assert_eq!(base_name("cuLaunchKernelEx"), "cuLaunchKernelEx");
    assert_eq!(classify("cudaLaunchKernelExC_v11060"), Api::KernelLaunch);
    assert_eq!(classify("cudaGraphLaunch_v10000"), Api::GraphLaunch);
    assert_eq!(classify("cudaStreamSynchronize_v3020"), Api::Sync);
}

#[test]
fn compute_length_without_the_union_is_the_unions() {
    let op = |start: i64, end: i64, kind: DeviceKind, nccl: bool| Op::new(start, end, NO_CALL, 0, kind, nccl);
    let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..300 {
        let n = 1 + next(40);
        let mut ops: Vec<Op> = (0..n)
            .map(|_| {
                let (s, d) = (next(1000), next(90));
                op(s, s + d, DeviceKind::ALL[next(4) as usize], false)
            })
            .collect();
        ops.sort_by_key(|o| o.start);
        let compute = |o: &&Op| matches!(o.kind(), DeviceKind::Kernel | DeviceKind::GraphTrace);
        // by definition: the ns covered by at least one compute row
        let covered = (0..1100).filter(|&t| ops.iter().filter(compute).any(|o| o.start <= t && t < o.end)).count();
        let (kept, ns) = compute_of(&OpRows::from(ops.as_slice()));
        assert!(kept.is_empty());
        assert_eq!(ns, covered as i64, "{ops:?}");
        // with a communication row, the union itself is kept (the NCCL row is not compute)
        let want = union(ops.iter().filter(compute).map(|o| (o.start, o.end)).collect());
        ops.push(op(2000, 2010, DeviceKind::Kernel, true));
        assert_eq!(compute_of(&OpRows::from(ops.as_slice())), (want, covered as i64));
    }
}

/// The timelines built in their own thread from the rows the ranges analysis hands over while it goes on are
/// those built from its collected rows afterwards; the device rows leave the collected rows and stay shared
/// with the caller; a pending build is joined once.
#[test]
fn timelines_built_beside_the_analysis_are_the_same() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["decode_mixed", "gpu_full_node"] {
        let path = root.join(format!("fixtures/nsys-2025.3.1/{name}.sqlite"));
        let export = Export::open(&path).unwrap();
        let want = |l: &str| crate::step_label::is_iteration_like(l);
        let opts = crate::sqlite_ranges::RangesOptions { fold: true, ..Default::default() };
        let mut beside = None;
        let mut ready = |rows: &mut CapturedRows| beside = Some(build_beside(&export, rows).unwrap());
        let (_, handed) =
            crate::sqlite_ranges::analyze_with_intervals_keeping(&export, &opts, &want, false, Some(&mut ready))
                .unwrap();
        let (pending, device, go) = beside.expect("the rows were handed over");
        assert!(handed.rows.device.is_empty() && !device.is_empty(), "{name}: the device rows were taken");
        // the thread waits, its rows linked, until it may go on
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!pending.is_finished(), "{name}: the timelines went on before they were let go");
        go.now();
        let (_, kept) = crate::sqlite_ranges::analyze_with_intervals(&export, &opts, &want).unwrap();
        let after = build(&export, &kept.rows).unwrap();
        let early = pending.clone().join().unwrap();
        assert!(pending.join().is_err(), "{name}: joined twice");
        let view = |t: &Timelines| {
            let mut keys: Vec<_> = t.nccl_keys.iter().copied().collect();
            keys.sort_unstable();
            let devices: Vec<_> = t
                .devices
                .iter()
                .map(|d| (d.device_id, d.pieces.clone(), d.compute.clone(), d.idle.clone(), d.launch.clone()))
                .collect();
            (devices, keys, t.ambiguous_keys, t.nccl_kernels, t.nccl_by_name.clone(), t.node_rows)
        };
        assert!(!after.devices.is_empty(), "{name}: the fixture has device rows");
        assert_eq!(view(&early), view(&after), "{name}");
    }
}

/// The gaps' lengths cut into runs of whole gaps for several threads are each gap's length, in order, whatever
/// the number of threads: gaps of one piece or several, gaps that touch, and one gap too long for 4 bytes, which
/// widens them all.
#[test]
fn gap_lengths_in_runs_are_the_gaps_in_order() {
    let mut next = crate::test_rng::xorshift(0x51_7CC1_B727_220A);
    for round in 0..200 {
        let (mut pieces, mut want, mut t) = (Pieces::default(), Vec::new(), next(1000));
        let long_at = (round % 3 == 0).then(|| next(40) as usize);
        for g in 0..next(40) as usize {
            // a gap of 1 to 4 pieces, touching the previous gap one time in four
            t += if next(4) == 0 { 0 } else { 1 + next(50) };
            let first = pieces.len();
            let mut len = 0;
            for _ in 0..1 + next(4) {
                let l = if long_at == Some(g) { u32::MAX as i64 + next(3) } else { 1 + next(5000) };
                pieces.push((t, t + l, next(4) as u8));
                (t, len) = (t + l, len + l);
            }
            pieces.mark_gap_start(first);
            want.push(len);
        }
        for threads in 1..=7 {
            let got = pieces.gap_lengths(threads);
            assert_eq!(got.len(), want.len(), "round {round}, {threads} threads");
            let got: Vec<i64> = match got {
                GapLengths::Short(v) => v.iter().map(|&x| x as i64).collect(),
                GapLengths::Long(v) => v,
            };
            assert_eq!(got, want, "round {round}, {threads} threads");
        }
        let widened = matches!(pieces.gap_lengths(3), GapLengths::Long(_));
        assert_eq!(widened, want.iter().any(|&g| g > u32::MAX as i64), "round {round}");
        assert_eq!(pieces.gap_lengths(4).dist(), dist(want.iter().copied()), "round {round}");
    }
}

/// Rows are held in 16 bytes and read back as they were: negative and extreme starts, rows of 2^32 ns or more,
/// processes beyond the 32 packed ones; a stable sort keeps equal rows in order.
#[test]
fn rows_are_held_in_16_bytes_and_read_back() {
    assert_eq!(std::mem::size_of::<ops::PackedOp>(), 16);
    let bound = crate::export::schema::MAX_TIMESTAMP_NS;
    let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
    let mut want = Vec::new();
    for k in 0..2000 {
        let start = match k % 7 {
            0 => -bound,
            1 => bound - next(10),
            _ => next(1 << 40) - (1 << 39),
        };
        let dur = if k % 11 == 0 { u32::MAX as i64 + next(3) - 1 } else { next(1000) };
        let end = (start + dur).min(bound);
        let process = if k % 13 == 0 { 31 + next(3) as u32 } else { next(32) as u32 };
        let call = if k % 5 == 0 { NO_CALL } else { next(1 << 30) as u32 };
        want.push(Op::new(start, end.max(start), call, process, DeviceKind::ALL[next(4) as usize], next(2) == 1));
    }
    let mut rows = OpRows::from(want.as_slice());
    let same = |a: &Op, b: &Op| {
        (a.start, a.end, a.call, a.meta) == (b.start, b.end, b.call, b.meta)
            && (a.kind(), a.nccl()) == (b.kind(), b.nccl())
    };
    assert_eq!(rows.len(), want.len());
    assert!(rows.iter().zip(&want).all(|(a, b)| same(&a, b)));
    let key = |o: &Op| (o.start / 1000, o.end);
    want.sort_by_key(key);
    rows.sort_by(|a, b| key(a).cmp(&key(b)));
    assert!(rows.iter().zip(&want).all(|(a, b)| same(&a, b)));
    assert!(same(&rows.first().unwrap(), &want[0]) && rows.get(want.len()).is_none());
}

/// The issues of a device's rows, entries of several rows each, are the issue of every row, sorted.
#[test]
fn issues_are_every_rows_issue() {
    let mut next = crate::test_rng::xorshift(0x3C6E_F372_FE94_F82B);
    for _ in 0..200 {
        // calls sorted by (pid, corr) as Calls keeps them; rows linked to some, some before their call starts
        let n = 1 + next(20) as usize;
        let parts = crate::sqlite_ranges::RuntimeCalls::of(vec![(0..n)
            .map(|k| CapturedCall {
                start: next(1000),
                end: 2000,
                global_tid: 1 << 24,
                correlation_id: Some(k as i64),
                name_id: 0,
            })
            .collect::<Vec<_>>()]);
        let at: Vec<CallAt> = (0..n as u32).map(|i| CallAt { part: 0, i }).collect();
        let calls = Calls { parts: parts.parts(), at, ..Default::default() };
        let mut ops: Vec<Op> = (0..next(1500))
            .map(|_| {
                let call = if next(6) == 0 { NO_CALL } else { next(n as i64) as u32 };
                let s = next(1200);
                Op::new(s, s + next(50), call, 0, DeviceKind::Kernel, false)
            })
            .collect();
        ops.sort_by_key(|o| o.start);
        let rows = OpRows::from(ops.as_slice());
        let mut want: Vec<i64> = ops.iter().map(|o| calls.issue_of(o)).collect();
        want.sort_unstable();
        let got: Vec<i64> = Issues::of(&rows, &calls)
            .0
            .iter()
            .flat_map(|&x| std::iter::repeat_n(Issues::time(x), Issues::rows(x) as usize))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn an_op_is_24_bytes_and_keeps_its_fields() {
    assert_eq!(std::mem::size_of::<Op>(), 24);
    for (k, nccl, process) in
        [(DeviceKind::Kernel, true, 0), (DeviceKind::GraphTrace, false, 7), (DeviceKind::Memset, true, 1 << 28)]
    {
        let o = Op::new(-5, 9, 3, process, k, nccl);
        assert_eq!((o.start, o.end, o.call, o.kind(), o.nccl(), o.process()), (-5, 9, 3, k, nccl, process));
    }
}
