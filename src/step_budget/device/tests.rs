//! Unit tests of the device timelines (unions, idle pieces, gaps, launches, queue depth).

use super::*;

#[test]
fn two_gaps_that_touch_count_as_two() {
    // [0, 10), a zero-length row at 20, [30, 40): the gaps [10, 20) and [20, 30) touch
    let op = |start: i64, end: i64| Op::new(start, end, NO_CALL, 0, DeviceKind::Kernel, false);
    let ops = [op(0, 10), op(20, 20), op(30, 40)];
    let (pieces, lengths, busy, span) = gaps(&ops, &Calls::default(), &FirstRows::of(&ops));
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
        let (kept, ns) = compute_of(&ops);
        assert!(kept.is_empty());
        assert_eq!(ns, covered as i64, "{ops:?}");
        // with a communication row, the union itself is kept (the NCCL row is not compute)
        let want = union(ops.iter().filter(compute).map(|o| (o.start, o.end)).collect());
        ops.push(op(2000, 2010, DeviceKind::Kernel, true));
        assert_eq!(compute_of(&ops), (want, covered as i64));
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
        let (pending, device) = beside.expect("the rows were handed over");
        assert!(handed.rows.device.is_empty() && !device.is_empty(), "{name}: the device rows were taken");
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

/// Gap lengths held in 4 bytes give the distribution of their values, and one too long for 4 bytes widens
/// those held before it.
#[test]
fn gap_lengths_widen_and_keep_their_distribution() {
    let mut next = crate::test_rng::xorshift(0x51_7CC1_B727_220A);
    for long_at in [None, Some(0), Some(7), Some(63)] {
        let mut g = GapLengths::Short(Vec::new());
        let mut want = Vec::new();
        for k in 0..64 {
            let v = if Some(k) == long_at { u32::MAX as i64 + 1 + next(1000) } else { 1 + next(5000) };
            g.push(v);
            want.push(v);
        }
        assert_eq!(matches!(g, GapLengths::Long(_)), long_at.is_some());
        assert_eq!(g.len(), 64);
        assert_eq!(g.dist(), dist(want));
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
