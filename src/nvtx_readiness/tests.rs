//! Unit tests of the readiness analysis (prefixes, opaque gaps, taxonomy).

use super::*;

fn o(label: &str, tid: i64, start: i64, end: i64) -> Occurrence {
    Occurrence {
        label: label.into(),
        global_tid: tid,
        start,
        end,
        event_type: 59,
        domain_id: None,
        depth: 0,
        parent: None,
    }
}

#[test]
fn opaque_is_the_uncovered_part_of_each_iteration() {
    // iteration [0, 100): children [10, 30), [20, 40) (overlapping), [60, 70); a grandchild [62, 65);
    // a range on another thread and one sticking out are not children.
    let occ = vec![
        o("P.engine.iteration", 1, 0, 100),
        o("P.a", 1, 10, 30),
        o("P.b", 1, 20, 40),
        o("P.c", 1, 60, 70),
        o("P.d", 1, 62, 65),
        o("P.out", 1, 90, 120),
        o("P.engine.iteration", 1, 200, 210),
        o("P.x", 2, 0, 100),
    ];
    let (it, mut gaps) = opaque(&occ, "P.engine.iteration", usize::MAX);
    assert_eq!(it.occurrences, 2);
    assert_eq!(it.wall_ns, 110);
    assert_eq!(it.named_ns, 40);
    assert_eq!(it.opaque_ns, 70);
    assert_eq!(it.without_children, 1);
    gaps.sort_by_key(|g| g.start);
    let got: Vec<(i64, i64, Option<&str>, Option<&str>)> =
        gaps.iter().map(|g| (g.start, g.end, g.after.as_deref(), g.before.as_deref())).collect();
    assert_eq!(
        got,
        vec![
            (0, 10, None, Some("P.a")),
            (40, 60, Some("P.b"), Some("P.c")),
            (70, 100, Some("P.c"), None),
            (200, 210, None, None)
        ]
    );
    assert_eq!(it.engine_threads.len(), 1);
}

#[test]
fn top_gaps_are_the_first_of_a_stable_sort_of_all() {
    // gaps of equal duration and start on twin iterations: the order found breaks the tie
    let occ = vec![
        o("P.engine.iteration", 1, 0, 100),
        o("P.engine.iteration", 1, 0, 100),
        o("P.a", 1, 50, 60),
        o("P.engine.iteration", 1, 200, 240),
        o("P.b", 1, 210, 220),
        o("P.engine.iteration", 2, 0, 40),
    ];
    let (_, mut all) = opaque(&occ, "P.engine.iteration", usize::MAX);
    all.sort_by(|a, b| {
        b.duration_ns.cmp(&a.duration_ns).then(a.start.cmp(&b.start)).then(a.global_tid.cmp(&b.global_tid))
    });
    for keep in 0..=all.len() + 1 {
        let (_, top) = opaque(&occ, "P.engine.iteration", keep);
        assert_eq!(top, all[..keep.min(all.len())], "keep {keep}");
    }
    assert_eq!(all[0].iteration_index, 0, "twins: the first found first");
    assert_eq!(all[1].iteration_index, 1);
}

#[test]
fn prefix_is_inferred_from_the_most_frequent_iteration_label() {
    let occ =
        vec![o("a.engine.iteration", 1, 0, 1), o("b.engine.iteration", 1, 2, 3), o("b.engine.iteration", 1, 4, 5)];
    assert_eq!(infer_prefix(&occ).as_deref(), Some("b"));
    assert_eq!(infer_prefix(&occ[..1]).as_deref(), Some("a"));
    assert_eq!(infer_prefix(&[o("x", 1, 0, 1)]), None);
}

/// Each distinct label folded once with its count is the fold of every occurrence one by one (labels that
/// fold together, prefixes of both kinds, labels without a prefix).
#[test]
fn prefixes_of_distinct_labels_are_those_of_every_occurrence() {
    let pool = [
        "engine.step_12",
        "engine.step_13",
        "engine::decode 7",
        "engine::decode 8",
        "req 3.prefill",
        "plain",
        "P.engine.iteration",
        "b.x",
    ];
    let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
    for _ in 0..200 {
        let occ: Vec<Occurrence> =
            (0..next(40)).map(|i| o(pool[next(pool.len() as i64) as usize], 1, i, i + 1)).collect();
        // the definition: every occurrence folded, cut and counted
        let mut per: BTreeMap<String, (BTreeSet<String>, u64)> = BTreeMap::new();
        let mut folder = crate::labels::Folder::new();
        // a framework's own ranges (here `engine::decode N`, namespace::op) are left out
        for x in occ.iter().filter(|x| !crate::framework::is_framework(&x.label)) {
            let l = folder.add(&x.label, 1);
            if let Some(p) = label_prefix(l) {
                let e = per.entry(p).or_default();
                e.0.insert(l.to_string());
                e.1 += 1;
            }
        }
        let mut want: Vec<PrefixCount> = per
            .into_iter()
            .map(|(prefix, (l, n))| PrefixCount { prefix, labels: l.len() as u64, occurrences: n })
            .collect();
        want.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then_with(|| a.prefix.cmp(&b.prefix)));
        let got = prefixes_seen(&occ);
        let key = |v: &[PrefixCount]| v.iter().map(|p| (p.prefix.clone(), p.labels, p.occurrences)).collect::<Vec<_>>();
        assert_eq!(key(&got), key(&want), "{:?}", occ.iter().map(|x| &*x.label).collect::<Vec<_>>());
    }
}

#[test]
fn thresholds_are_validated() {
    assert!(ReadinessOptions { max_opaque_share: 0.0, ..Default::default() }.validate().is_err());
    assert!(ReadinessOptions { max_opaque_share: 1.5, ..Default::default() }.validate().is_err());
    assert!(ReadinessOptions { range_prefix: Some(".".into()), ..Default::default() }.validate().is_err());
    assert!(ReadinessOptions::default().validate().is_ok());
}

#[test]
fn a_union_made_by_start_is_the_union_of_its_intervals() {
    let mut u = Union::default();
    for (a, b) in [(0, 10), (5, 6), (10, 12), (20, 30), (25, 40), (25, 26)] {
        assert!(u.add(a, b), "({a}, {b}) comes by start");
    }
    assert_eq!(u.len(), 12 + 20);
    assert!(!u.add(19, 21), "a start before the open run's is refused (it could bridge two runs)");
}

/// The opaque share of the ranges nested in `label`'s occurrences gathered per step, then united (what
/// [`opaque_step_share`] computed before it made the unions as the ranges come).
fn opaque_step_share_gathered(occ: &sqlite_ranges::OccurrenceTable, label: &str, wall: i64) -> f64 {
    let mut covered: HashMap<usize, Vec<(i64, i64)>> = Default::default();
    for (i, o) in occ.iter().enumerate() {
        if o.label == label {
            covered.entry(i).or_default();
        }
    }
    for o in occ.iter().filter(|o| o.label != label) {
        let mut p = o.parent;
        while let Some(j) = p {
            if let Some(v) = covered.get_mut(&j) {
                v.push((o.start, o.end));
                break;
            }
            p = occ.get(j).parent;
        }
    }
    let named: i64 = covered
        .iter()
        .map(|(&j, v)| {
            let (s, e) = (occ.get(j).start, occ.get(j).end);
            let clipped: Vec<(i64, i64)> =
                v.iter().map(|&(a, b)| (a.max(s), b.min(e))).filter(|(a, b)| b > a).collect();
            crate::intervals::len(&crate::intervals::union(clipped))
        })
        .sum();
    1.0 - named as f64 / wall as f64
}

/// The opaque share made as the nested ranges come equals the one of the ranges gathered and united, for every
/// top-level label of real captures (fails if the running union loses or double-counts any nested time).
#[test]
fn opaque_step_share_made_by_start_is_the_gathered_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut compared = 0;
    for name in ["decode_mixed", "gpu_full_node", "cpu_nvtx_osrt"] {
        let export = Export::open(&root.join(format!("fixtures/nsys-2025.3.1/{name}.sqlite"))).unwrap();
        for fold in [false, true] {
            let a =
                sqlite_ranges::analyze(&export, &sqlite_ranges::RangesOptions { fold, ..Default::default() }).unwrap();
            let occ = &a.occurrences;
            let labels: BTreeSet<String> = occ.iter().filter(|o| o.depth == 0).map(|o| o.label.to_string()).collect();
            for l in &labels {
                let wall: i64 = occ.iter().filter(|o| *o.label == **l).map(|o| o.end - o.start).sum();
                if wall <= 0 {
                    continue;
                }
                let got = opaque_step_share(occ, l).unwrap();
                assert_eq!(got, opaque_step_share_gathered(occ, l, wall), "{name} {l:?} fold {fold}");
                compared += usize::from(got < 1.0);
            }
        }
    }
    assert!(compared >= 3, "labels with nested ranges compared: {compared}");
}

#[test]
fn thread_unions_do_not_depend_on_the_order() {
    let occ = vec![
        o("a", 1, 0, 10),
        o("b", 1, 2, 4),
        o("c", 1, 10, 12),
        o("d", 1, 20, 30),
        o("e", 2, 5, 6),
        o("f", 2, 5, 9),
        o("g", 2, 9, 9),
    ];
    let want: HashMap<i64, Vec<(i64, i64)>> = [(1, vec![(0, 12), (20, 30)]), (2, vec![(5, 9)])].into_iter().collect();
    assert_eq!(syncs::thread_unions(&occ), want, "by thread, then start");
    let reversed: Vec<Occurrence> = occ.iter().rev().cloned().collect();
    assert_eq!(syncs::thread_unions(&reversed), want, "in any other order");
}
