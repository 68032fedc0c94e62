//! Blocking sync calls that no kept range encloses, by API.

use super::*;

/// Blocking sync runtime calls (by [`sqlite_ranges::normalize_sync_api`]) whose start lies inside no occurrence of
/// `occ` on their thread (`o.start <= r.start <= o.end`, the correlation rule of the ranges contract).
pub fn unenclosed_syncs(export: &Export, runtime: Option<&str>, occ: &[Occurrence]) -> Result<UnenclosedSyncs> {
    unenclosed_syncs_of(export, runtime, occ, None)
}

/// Per API: calls, Σ duration (None once it overflows), threads, first start.
pub(super) type SyncCounts = BTreeMap<String, (u64, Option<i64>, BTreeSet<i64>, i64)>;

/// [`unenclosed_syncs`], over `calls` when given (every runtime call with a thread and an API name id, as
/// another analysis read them), else over the runtime table read here in parallel rowid ranges.
pub(super) fn unenclosed_syncs_of(
    export: &Export,
    runtime: Option<&str>,
    occ: &[Occurrence],
    calls: Option<&sqlite_ranges::RuntimeCalls>,
) -> Result<UnenclosedSyncs> {
    let mut out =
        UnenclosedSyncs { runtime_table: runtime.is_some(), sync_calls: 0, enclosed_calls: 0, by_api: Vec::new() };
    if runtime.is_none() {
        return Ok(out);
    }
    let ids = export.string_ids_where(|v| sqlite_ranges::normalize_sync_api(v).map(str::to_string))?;
    if ids.is_empty() {
        return Ok(out);
    }
    let unions = thread_unions(occ);
    // per part: calls, enclosed calls, and per API (calls, Σ duration — None once it overflows —, threads,
    // first start)
    type Part = (u64, u64, SyncCounts);
    let add = |p: &mut Part, g: i64, n: i64, s: i64, e: i64| {
        let Some(api) = ids.get(&n) else { return };
        p.0 += 1;
        let enclosed = unions.get(&g).is_some_and(|u| {
            let k = u.partition_point(|iv| iv.0 <= s);
            k > 0 && u[k - 1].1 >= s
        });
        if enclosed {
            p.1 += 1;
            return;
        }
        let entry = p.2.entry(api.clone()).or_insert((0, Some(0), BTreeSet::new(), s));
        entry.0 += 1;
        entry.1 = entry.1.and_then(|t| t.checked_add(e - s));
        entry.2.insert(g);
        entry.3 = entry.3.min(s);
    };
    let parts: Vec<Part> = match calls {
        Some(calls) => {
            let mut p = Part::default();
            for c in calls.iter() {
                add(&mut p, c.global_tid, c.name_id, c.start, c.end);
            }
            vec![p]
        }
        // the runtime table in parallel rowid ranges (rows with a NULL or inverted interval are skipped by the
        // export layer and counted there)
        None => {
            let t = export.table(schema::RUNTIME).cloned().ok_or_else(|| Error::input("no runtime table"))?;
            let threads = crate::export::rows::scan_threads();
            let src = export.source();
            let (parts, _skips) = crate::export::fold::fold_runtime(&src, &t, threads, Part::default, |p, r| {
                if let (Some(g), Some(n)) = (r.global_tid, r.name_id) {
                    add(p, g, n, r.start, r.end);
                }
            })?;
            parts
        }
    };
    let mut by_api: BTreeMap<String, (u64, i64, BTreeSet<i64>, i64)> = BTreeMap::new();
    for (calls, enclosed, apis) in parts {
        out.sync_calls += calls;
        out.enclosed_calls += enclosed;
        for (api, (n, total, th, first)) in apis {
            let entry = by_api.entry(api.clone()).or_insert((0, 0, BTreeSet::new(), first));
            entry.0 += n;
            entry.1 = total.and_then(|t| entry.1.checked_add(t)).ok_or_else(|| {
                Error::input(format!("{}: {}: total duration of {api} calls overflows 64-bit nanoseconds: the export's timestamps are not real", export.name(), schema::RUNTIME))
            })?;
            entry.2.extend(th);
            entry.3 = entry.3.min(first);
        }
    }
    out.by_api = by_api
        .into_iter()
        .map(|(api, (calls, total_ns, th, first))| SyncApiCount {
            api,
            calls,
            total_ns,
            threads: th.len() as u64,
            first_start: first,
        })
        .collect();
    out.by_api.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.api.cmp(&b.api)));
    Ok(out)
}

/// Per thread: the union of its occurrences' closed intervals, sorted. Occurrences by thread, then start (as
/// loaded) are merged as they come, no interval held but the union's (2 M op ranges on emit_nvtx ×10: 75 MB
/// gathered and sorted at the CI chain's peak); in any other order they are gathered per thread and sorted.
pub(super) fn thread_unions(occ: &[Occurrence]) -> HashMap<i64, Vec<(i64, i64)>> {
    let mut unions: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    let in_order = occ.windows(2).all(|w| (w[0].global_tid, w[0].start) <= (w[1].global_tid, w[1].start));
    if in_order {
        for run in occ.chunk_by(|a, b| a.global_tid == b.global_tid) {
            unions.insert(run[0].global_tid, merged(run.iter().map(|o| (o.start, o.end))));
        }
        return unions;
    }
    for o in occ {
        unions.entry(o.global_tid).or_default().push((o.start, o.end));
    }
    for v in unions.values_mut() {
        v.sort_unstable();
        *v = merged(v.iter().copied());
    }
    unions
}

/// Closed intervals given by start, overlapping or touching ones merged (grown as the union is: it holds far
/// fewer than the intervals).
fn merged(by_start: impl Iterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    let mut merged: Vec<(i64, i64)> = Vec::new();
    crate::intervals::merge_sorted(by_start, |u| merged.push(u));
    merged
}
