//! An independent reference computation of the `nsyskit.ranges/v1` metrics, for the tests.
//!
//! Deliberately a different code path from `src/ranges`: labels and skipped counts are SQL expressions over the
//! same file; runtime calls are matched by a plain loop over every RUNTIME row of the thread (no index, no
//! tree); device rows are looked up by `(globalPid, correlationId)` and deduplicated per occurrence with a
//! set; interval unions are sort-then-merge over full lists; nesting is a quadratic loop; sync names use the
//! `regex` crate.

#![allow(clippy::type_complexity)]
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};

const NSMASK: i64 = -16777216; // !0xFFFFFF

pub struct RefOcc {
    pub rowid: i64,
    pub label: String,
    pub tid: i64,
    pub start: i64,
    pub end: i64,
}

fn open(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn has_table(c: &Connection, t: &str) -> bool {
    c.query_row("SELECT count(*) FROM sqlite_master WHERE type='table' AND lower(name)=lower(?1)", [t], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap()
        > 0
}

fn union_len(mut iv: Vec<(i64, i64)>) -> i64 {
    iv.sort();
    let mut total = 0;
    let mut cur: Option<(i64, i64)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

pub fn sync_name(name: &str) -> Option<String> {
    const LIST: [&str; 19] = [
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaStreamQuery",
        "cudaEventQuery",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cudaMemset",
        "cudaMemset2D",
        "cudaMemset3D",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpyDtoD",
    ];
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| regex::Regex::new("_v[0-9]+|_pt").unwrap());
    let base = match re.find(name) {
        Some(m) => &name[..m.start()],
        None => name,
    };
    LIST.contains(&base).then(|| base.to_string())
}

/// The kept occurrences per the contract, in no particular order.
/// The capture's end when the export records it (`ANALYSIS_DETAILS.duration`): a range ending there was closed
/// by the capture's end and is no occurrence (docs/sqlite-ranges.md).
pub fn capture_end(c: &Connection) -> Option<i64> {
    if !has_table(c, "ANALYSIS_DETAILS") {
        return None;
    }
    c.query_row("SELECT duration FROM ANALYSIS_DETAILS LIMIT 1", [], |r| r.get::<_, Option<i64>>(0))
        .ok()
        .flatten()
        .filter(|d| *d > 0)
}

pub fn occurrences(c: &Connection, prefix: Option<&str>) -> Vec<RefOcc> {
    let end_of_capture = capture_end(c).unwrap_or(i64::MAX);
    let sql = "SELECT n.rowid, n.start, n.end, n.globalTid,
        CASE WHEN n.textId IS NOT NULL THEN (SELECT value FROM StringIds WHERE id = n.textId) ELSE n.text END,
        (SELECT d.text FROM NVTX_EVENTS d WHERE d.eventType = 75 AND n.domainId <> 0 AND d.domainId = n.domainId
            AND (d.globalTid & -16777216) = (n.globalTid & -16777216))
        FROM NVTX_EVENTS n WHERE n.eventType IN (59, 60) AND n.start IS NOT NULL AND n.end IS NOT NULL AND n.end >= n.start";
    let mut st = c.prepare(sql).unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .unwrap();
    let mut out = Vec::new();
    for row in rows {
        let (rowid, start, end, tid, msg, dom) = row.unwrap();
        let capture = end_of_capture;
        let Some(msg) = msg else { continue };
        if end >= capture {
            continue;
        }
        let label = match dom {
            Some(d) => format!("{d}:{msg}"),
            None => msg,
        };
        if let Some(p) = prefix {
            if !label.starts_with(p) {
                continue;
            }
        }
        out.push(RefOcc { rowid, label, tid, start, end });
    }
    out
}

/// The expected document parts: `ranges`, `thread_diagnostics`, `totals`, `skipped`, `high_cardinality_labels`.
pub fn expected(path: &Path, prefix: Option<&str>) -> Value {
    let c = open(path);
    let occ = occurrences(&c, prefix);
    let _kept: HashMap<i64, usize> = occ.iter().enumerate().map(|(i, o)| (o.rowid, i)).collect();
    let n = occ.len();

    // runtime calls: every RUNTIME row of the occurrence's thread, a plain loop
    let mut rt_calls = vec![0u64; n];
    let mut rt_sync: Vec<BTreeMap<String, (u64, i64)>> = vec![BTreeMap::new(); n];
    let mut thread_rt: HashMap<i64, HashSet<i64>> = HashMap::new();
    let mut occ_corr: Vec<Vec<i64>> = vec![Vec::new(); n];
    let has_rt = has_table(&c, "CUPTI_ACTIVITY_KIND_RUNTIME");
    if has_rt {
        let mut by_thread: HashMap<i64, Vec<(i64, i64, i64, Option<i64>, Option<String>)>> = HashMap::new();
        let mut st = c
            .prepare("SELECT r.rowid, r.start, r.end, r.globalTid, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId")
            .unwrap();
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                ))
            })
            .unwrap();
        for row in rows {
            let (id, s, e, t, corr, name) = row.unwrap();
            by_thread.entry(t).or_default().push((id, s, e, corr, name));
        }
        for (i, o) in occ.iter().enumerate() {
            for (id, s, e, corr, name) in by_thread.get(&o.tid).map(|v| v.as_slice()).unwrap_or(&[]) {
                if *s < o.start || *s > o.end {
                    continue;
                }
                rt_calls[i] += 1;
                thread_rt.entry(o.tid).or_default().insert(*id);
                if let Some(c) = corr {
                    occ_corr[i].push(*c);
                }
                if let Some(api) = name.as_deref().and_then(sync_name) {
                    let en = rt_sync[i].entry(api).or_default();
                    en.0 += 1;
                    en.1 += e - s;
                }
            }
        }
    }

    // device rows per occurrence: (table index, rowid, start, end), looked up by (globalPid, correlationId)
    let tables = [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    ];
    let mut by_key: HashMap<(i64, i64), Vec<(usize, i64, i64, i64)>> = HashMap::new();
    for (ti, t) in tables.iter().enumerate() {
        if !has_table(&c, t) {
            continue;
        }
        let mut st = c.prepare(&format!("SELECT rowid, start, end, globalPid, correlationId FROM {t}")).unwrap();
        for row in st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })
            .unwrap()
        {
            let (id, s, e, g, corr) = row.unwrap();
            if let (Some(g), Some(corr)) = (g, corr) {
                by_key.entry((g, corr)).or_default().push((ti, id, s, e));
            }
        }
    }
    let mut dev: Vec<Vec<(usize, i64, i64, i64)>> = vec![Vec::new(); n];
    let mut attributed_kernels: HashSet<i64> = HashSet::new();
    let mut thread_dev: HashMap<i64, HashSet<(usize, i64)>> = HashMap::new();
    for (i, o) in occ.iter().enumerate() {
        let mut set: BTreeSet<(usize, i64, i64, i64)> = BTreeSet::new();
        for corr in &occ_corr[i] {
            for d in by_key.get(&(o.tid & NSMASK, *corr)).map(|v| v.as_slice()).unwrap_or(&[]) {
                set.insert(*d);
            }
        }
        for &(ti, id, s, e) in &set {
            if ti == 0 {
                attributed_kernels.insert(id);
            }
            thread_dev.entry(o.tid).or_default().insert((ti, id));
            dev[i].push((ti, id, s, e));
        }
    }

    // nesting: quadratic
    let encloses = |a: &RefOcc, b: &RefOcc| a.tid == b.tid && a.start <= b.start && b.end <= a.end;
    let mut depth = vec![0u64; n];
    let mut parent: Vec<String> = vec![String::new(); n];
    for b in 0..n {
        let mut best: Option<usize> = None;
        for a in 0..n {
            if a == b || !encloses(&occ[a], &occ[b]) {
                continue;
            }
            depth[b] += 1;
            best = match best {
                None => Some(a),
                Some(p) => {
                    let ka = (std::cmp::Reverse(occ[a].start), occ[a].end, occ[a].label.as_bytes());
                    let kp = (std::cmp::Reverse(occ[p].start), occ[p].end, occ[p].label.as_bytes());
                    Some(if ka < kp { a } else { p })
                }
            };
        }
        parent[b] = best.map(|p| occ[p].label.clone()).unwrap_or_default();
    }

    // per label
    let mut labels: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, o) in occ.iter().enumerate() {
        labels.entry(o.label.clone()).or_default().push(i);
    }
    let mut ranges: Vec<Value> = Vec::new();
    for (label, idx) in &labels {
        let mut walls: Vec<i64> = idx.iter().map(|&i| occ[i].end - occ[i].start).collect();
        walls.sort();
        let (mut with_dev, mut rc, mut kw, mut cov, mut busy, mut span, mut unc) =
            (0u64, 0u64, 0i64, 0i64, 0i64, 0i64, 0i64);
        let mut counts = [0u64; 4];
        let mut sync: BTreeMap<String, (u64, i64)> = BTreeMap::new();
        let mut depths: BTreeMap<String, u64> = BTreeMap::new();
        let mut parents: BTreeMap<String, u64> = BTreeMap::new();
        for &i in idx {
            let o = &occ[i];
            rc += rt_calls[i];
            for (api, (k, ns)) in &rt_sync[i] {
                let e = sync.entry(api.clone()).or_default();
                e.0 += k;
                e.1 += ns;
            }
            *depths.entry(depth[i].to_string()).or_default() += 1;
            *parents.entry(parent[i].clone()).or_default() += 1;
            let d = &dev[i];
            if !d.is_empty() {
                with_dev += 1;
            }
            for &(t, _, s, e) in d {
                counts[t] += 1;
                if t == 0 {
                    kw += e - s;
                }
            }
            let b = union_len(d.iter().map(|&(_, _, s, e)| (s, e)).collect());
            let cv = union_len(
                d.iter().map(|&(_, _, s, e)| (s.max(o.start), e.min(o.end))).filter(|(s, e)| s < e).collect(),
            );
            let sp = if d.is_empty() {
                0
            } else {
                d.iter().map(|x| x.3).max().unwrap() - d.iter().map(|x| x.2).min().unwrap()
            };
            busy += b;
            cov += cv;
            span += sp;
            unc += (o.end - o.start - cv).max(0);
        }
        let wall: i64 = walls.iter().sum();
        let sync_v: serde_json::Map<String, Value> =
            sync.into_iter().map(|(k, (c, t))| (k, json!({"calls": c, "total_ns": t}))).collect();
        ranges.push(json!({
            "label": label,
            "occurrences": idx.len(),
            "occurrences_with_device_work": with_dev,
            "runtime_calls": rc,
            "kernels": counts[0], "memcpys": counts[1], "memsets": counts[2], "graph_traces": counts[3],
            "host_wall_time_ns": wall,
            "wall_ns_min": walls[0], "wall_ns_median": walls[(walls.len() - 1) / 2], "wall_ns_max": walls[walls.len() - 1],
            "kernel_work_ns": kw,
            "host_range_kernel_coverage_ns": cov,
            "host_range_kernel_coverage_fraction": if wall == 0 { 0.0 } else { (cov as f64 / wall as f64).min(1.0) },
            "kernel_busy_union_ns": busy,
            "kernel_span_ns": span,
            "gpu_idle_within_kernel_span_ns": span - busy,
            "uncovered_host_time_ns": unc,
            "gpu_busy_fraction": if span == 0 { Value::Null } else { json!(busy as f64 / span as f64) },
            "sync": sync_v,
            "depths": depths,
            "parents": parents,
        }));
    }
    ranges.sort_by(|a, b| {
        b["host_wall_time_ns"]
            .as_i64()
            .cmp(&a["host_wall_time_ns"].as_i64())
            .then(a["label"].as_str().unwrap().as_bytes().cmp(b["label"].as_str().unwrap().as_bytes()))
    });

    // threads
    let processes: HashSet<i64> = if has_table(&c, "PROCESSES") {
        let mut st = c.prepare("SELECT globalPid FROM PROCESSES").unwrap();
        let v = st.query_map([], |r| r.get::<_, i64>(0)).unwrap().map(|x| x.unwrap()).collect();
        v
    } else {
        HashSet::new()
    };
    let mut device_pids: HashSet<i64> = HashSet::new();
    let mut per_dev: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for t in tables {
        if !has_table(&c, t) {
            continue;
        }
        let mut st = c.prepare(&format!("SELECT globalPid, deviceId, start, end FROM {t}")).unwrap();
        for row in st
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?)))
            .unwrap()
        {
            let (g, d, s, e) = row.unwrap();
            device_pids.insert(g);
            per_dev.entry(d).or_default().push((s, e));
        }
    }
    let names: HashMap<i64, String> = if has_table(&c, "ThreadNames") {
        let mut st = c
            .prepare(
                "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId ORDER BY t.rowid",
            )
            .unwrap();
        let v = st
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .unwrap()
            .map(|x| x.unwrap())
            .collect();
        v
    } else {
        HashMap::new()
    };
    let tids: BTreeSet<i64> = occ.iter().map(|o| o.tid).collect();
    let threads: Vec<Value> = tids
        .iter()
        .map(|&t| {
            let ns = t & NSMASK;
            let mapping = if processes.contains(&ns) {
                "processes"
            } else if device_pids.contains(&ns) {
                "device_namespace_fallback"
            } else {
                "unmapped"
            };
            json!({
                "globalTid": t,
                "pid": (t >> 24) & 0xFFFFFF,
                "tid": t & 0xFFFFFF,
                "namespace": ns,
                "mapping": mapping,
                "is_main_thread": (t >> 24) & 0xFFFFFF == t & 0xFFFFFF,
                "thread_name": names.get(&t),
                "occurrences": occ.iter().filter(|o| o.tid == t).count(),
                "runtime_calls": thread_rt.get(&t).map_or(0, |s| s.len()),
                "device_rows_attributed": thread_dev.get(&t).map_or(0, |s| s.len()),
            })
        })
        .collect();

    // totals
    let (kt, kwt): (i64, i64) = if has_table(&c, "CUPTI_ACTIVITY_KIND_KERNEL") {
        c.query_row("SELECT count(*), coalesce(sum(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    } else {
        (0, 0)
    };
    let mut ka = 0i64;
    let mut kwa = 0i64;
    if !attributed_kernels.is_empty() {
        let mut st = c.prepare("SELECT rowid, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL").unwrap();
        for row in st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))).unwrap() {
            let (id, w) = row.unwrap();
            if attributed_kernels.contains(&id) {
                ka += 1;
                kwa += w;
            }
        }
    }
    let per_device: Vec<Value> = per_dev
        .into_iter()
        .map(|(d, iv)| {
            json!({
                "deviceId": d,
                "device_rows": iv.len(),
                "first_start": iv.iter().map(|x| x.0).min().unwrap(),
                "last_end": iv.iter().map(|x| x.1).max().unwrap(),
                "busy_union_ns": union_len(iv),
            })
        })
        .collect();
    let skipped_open: i64 = c
        .query_row("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND (start IS NULL OR end IS NULL OR end < start)", [], |r| r.get(0))
        .unwrap();
    let skipped_unlabeled: i64 = c
        .query_row(
            "SELECT count(*) FROM NVTX_EVENTS n WHERE n.eventType IN (59, 60) AND n.start IS NOT NULL AND n.end IS NOT NULL AND n.end >= n.start
             AND (CASE WHEN n.textId IS NOT NULL THEN (SELECT value FROM StringIds WHERE id = n.textId) ELSE n.text END) IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let closed: i64 = match capture_end(&c) {
        Some(e) => c
            .query_row(
                "SELECT count(*) FROM NVTX_EVENTS n WHERE n.eventType IN (59, 60) AND n.start IS NOT NULL AND n.end IS NOT NULL AND n.end >= n.start AND n.end >= ?1
                 AND (CASE WHEN n.textId IS NOT NULL THEN (SELECT value FROM StringIds WHERE id = n.textId) ELSE n.text END) IS NOT NULL",
                [e],
                |r| r.get(0),
            )
            .unwrap(),
        None => 0,
    };
    let re = regex::Regex::new("[0-9]+").unwrap();
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for l in labels.keys() {
        *groups.entry(re.replace_all(l, "#").into_owned()).or_default() += 1;
    }
    let high: Vec<Value> =
        groups.into_iter().filter(|(_, n)| *n >= 2).map(|(p, n)| json!({"pattern": p, "labels": n})).collect();

    json!({
        "ranges": ranges,
        "thread_diagnostics": threads,
        "totals": {
            "per_device": per_device,
            "kernels_total": kt,
            "kernel_work_total_ns": kwt,
            "kernels_attributed": ka,
            "kernel_work_attributed_ns": kwa,
            "kernels_unattributed": kt - ka,
            "kernel_work_unattributed_ns": kwt - kwa,
        },
        "skipped": {"unlabeled": skipped_unlabeled, "open_or_inverted": skipped_open, "closed_by_capture_end": closed},
        "high_cardinality_labels": high,
    })
}
