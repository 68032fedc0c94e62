//! The join of iteration records to the NVTX step occurrences of a capture (docs/iterations.md, "The join").
//!
//! The records' `start_ns`/`end_ns` are the engine's monotonic clock; the NVTX occurrences are on the nsys
//! timeline of the export. The offset between the two clocks is **measured** per rank and process from the
//! overlap, never assumed:
//!
//! 1. candidates: [`ANCHORS`] records spread evenly over the rank's timed records; every pair (anchor, step
//!    occurrence of the process) proposes `offset = record start − occurrence start`;
//! 2. votes: an offset is supported by every anchor with a proposal within [`VOTE_WINDOW_NS`]; the
//!    [`CLUSTERS`] best-supported offsets (more than the window apart) are kept;
//! 3. refinement: each record is shifted by the offset and paired with the occurrence whose start is nearest;
//!    the offset moves by the median residual (three times); its score is the median |residual| over the
//!    records that fall inside the steps' span (the *overlapping* records);
//! 4. the best offset is the one with the smallest median |residual| among those with at least
//!    [`MIN_MATCHED`] overlapping records. A record is *matched* when its residual is within the tolerance
//!    `max(MATCH_TOL_MIN_NS, 4 × p90 |residual|, median step period / 8)` (one record per occurrence, the nearest);
//! 5. refusals (reported, never guessed): fewer than [`MIN_MATCHED`] matched records (insufficient overlap),
//!    less than [`MIN_MATCHED_FRACTION`] of the overlapping records matched, 4 × p90 |residual| above a quarter of
//!    the median step period (the residual spread is too wide to tell neighbouring steps apart), or an ambiguous
//!    fit: another offset (more than the tolerance away) whose median |residual| is within
//!    [`AMBIGUITY_RATIO`]× the best's, or another process that fits as well.
//!
//! Shape-only records (no `start_ns`/`end_ns`) are never used as time: they are counted, not joined.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Record;
use crate::export::pid_of;

/// Records used as anchors for the candidate offsets (at most).
pub const ANCHORS: usize = 32;
/// Width of the voting window for candidate offsets, ns.
pub const VOTE_WINDOW_NS: i64 = 50_000;
/// Candidate offsets refined and compared.
pub const CLUSTERS: usize = 16;
/// Smallest match tolerance, ns.
pub const MATCH_TOL_MIN_NS: i64 = 10_000;
/// The match tolerance is this many times the p90 |start residual| of the best fit (at least [`MATCH_TOL_MIN_NS`]).
pub const MATCH_TOL_P90_FACTOR: i64 = 4;
/// … or an eighth of the median step period when that is larger (a record that near its step has no nearer one).
pub const MATCH_TOL_PERIOD_DIVISOR: i64 = 8;
/// A join needs at least this many matched records per rank.
pub const MIN_MATCHED: usize = 8;
/// … and at least this share of the records inside the steps' span matched.
pub const MIN_MATCHED_FRACTION: f64 = 0.5;
/// Another fit whose median |residual| is within this factor of the best's makes the join ambiguous.
pub const AMBIGUITY_RATIO: f64 = 4.0;
/// Median |residual| values are floored at this before the ambiguity ratio (ns), so that two near-perfect
/// fits are not told apart by noise.
pub const RESIDUAL_FLOOR_NS: i64 = 100;
/// Framework elapsed and NVTX wall disagree when they differ by more than this share of the elapsed …
pub const ELAPSED_REL: f64 = 0.10;
/// … and by more than this many ns.
pub const ELAPSED_ABS_NS: i64 = 20_000;
/// Bound on anchor × occurrence candidate offsets.
const MAX_CANDIDATES: usize = 4_000_000;

/// A step occurrence as the join sees it (the step label's occurrence on the nsys timeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOcc {
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
}

/// The batch geometry of a step, from the record joined to it, and how the two agree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepGeometry {
    /// The engine's iteration index.
    pub iteration: u64,
    pub rank: u64,
    pub phase: String,
    pub batch_size: u64,
    pub scheduled_tokens: u64,
    pub scheduled_requests: u64,
    pub prefill_chunks: Vec<u64>,
    pub decode_kv_lens: Vec<u64>,
    pub graph_mode: String,
    pub backend: String,
    /// NVTX start − (record start − offset), ns.
    pub start_residual_ns: i64,
    /// NVTX end − (record end − offset), ns.
    pub end_residual_ns: i64,
    /// The framework's elapsed: `elapsed_ns`, else `end_ns − start_ns`.
    pub framework_elapsed_ns: i64,
    /// `elapsed_ns` or `end_ns - start_ns`.
    pub framework_elapsed_from: String,
    /// The NVTX step's wall (end − start).
    pub nvtx_wall_ns: i64,
    /// |wall − elapsed| > max(ELAPSED_REL × elapsed, ELAPSED_ABS_NS).
    pub elapsed_disagrees: bool,
}

/// |residual| statistics (nearest rank), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Residuals {
    pub median_abs_ns: i64,
    pub p90_abs_ns: i64,
    pub max_abs_ns: i64,
}

/// A candidate offset, refined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    /// The process (`PID` of the steps' `globalTid`).
    pub pid: i64,
    /// Engine monotonic ns − nsys timestamp ns.
    pub offset_ns: i64,
    /// Records inside the steps' span once shifted.
    pub overlapping: u64,
    pub median_abs_residual_ns: i64,
}

/// The join of one rank's records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankJoin {
    pub rank: u64,
    /// `joined` or `refused`.
    pub verdict: String,
    /// Why it was refused (null when joined).
    pub reason: Option<String>,
    /// The process whose steps the records were joined to.
    pub pid: Option<i64>,
    /// The measured offset: engine monotonic ns − nsys timestamp ns (add it to an nsys time to get the engine's).
    pub offset_ns: Option<i64>,
    /// The match tolerance used, ns.
    pub tolerance_ns: Option<i64>,
    pub timed_records: u64,
    /// Records of the rank that fall inside the steps' span once shifted.
    pub overlapping_records: u64,
    pub matched: u64,
    /// `matched / overlapping_records`.
    pub matched_fraction: Option<f64>,
    /// Overlapping records without a step (outside the tolerance, or a step taken by a nearer record).
    pub unmatched_records: u64,
    /// Records outside the steps' span (before or after the capture).
    pub records_outside_capture: u64,
    /// Step occurrences of the process.
    pub process_steps: u64,
    /// Steps of the process between the first and last matched record without a record.
    pub steps_without_record: u64,
    pub first_iteration: Option<u64>,
    pub last_iteration: Option<u64>,
    /// Start residuals (NVTX start − shifted record start) of the matched records.
    pub start_residual: Option<Residuals>,
    /// End residuals of the matched records.
    pub end_residual: Option<Residuals>,
    /// Least-squares slope of the start residual against time, in ppm (clock drift; ~0 when one clock).
    pub drift_ppm: Option<f64>,
    /// The best candidate offsets compared (at most 4 per process).
    pub candidates: Vec<Candidate>,
}

/// A step whose NVTX wall and framework elapsed disagree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Disagreement {
    pub iteration: u64,
    pub rank: u64,
    pub nvtx_wall_ns: i64,
    pub framework_elapsed_ns: i64,
}

/// Framework elapsed against NVTX wall over the joined steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElapsedVsWall {
    pub compared: u64,
    pub disagreeing: u64,
    pub threshold_fraction: f64,
    pub threshold_ns: i64,
    /// Median of `nvtx_wall / framework_elapsed`.
    pub median_wall_over_elapsed: Option<f64>,
    /// The largest disagreements (at most 5).
    pub worst: Vec<Disagreement>,
}

/// The join: per rank, the measured clock offset, its residuals, and what was matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IterationJoin {
    /// The records file.
    pub records_source: String,
    /// The step label whose occurrences the records were joined to.
    pub step_label: String,
    /// `joined` (every rank with timed records joined), `partly_joined` or `refused`.
    pub verdict: String,
    pub method: String,
    /// The two clocks and how they were related.
    pub clock: String,
    pub records: u64,
    pub timed_records: u64,
    /// Records without timestamps: geometry only, never used as time, never joined.
    pub shape_only_records: u64,
    pub steps: u64,
    pub joined_steps: u64,
    pub ranks: Vec<RankJoin>,
    /// Largest minus smallest `offset_ns` of the joined ranks (null with fewer than two): ranks of one host
    /// share one monotonic clock, so their offsets agree (a cross-check of the measurement).
    pub offset_spread_ns: Option<i64>,
    pub elapsed_vs_wall: ElapsedVsWall,
    /// What a reader must know (disagreements, steps without a record, refusals).
    pub findings: Vec<String>,
}

impl IterationJoin {
    pub fn is_joined(&self) -> bool {
        self.joined_steps > 0
    }
}

fn abs_stats(v: &[i64]) -> Option<Residuals> {
    if v.is_empty() {
        return None;
    }
    let mut a: Vec<i64> = v.iter().map(|x| x.abs()).collect();
    a.sort_unstable();
    let q = |f: f64| a[((f * a.len() as f64).ceil() as usize).clamp(1, a.len()) - 1];
    Some(Residuals { median_abs_ns: q(0.5), p90_abs_ns: q(0.9), max_abs_ns: *a.last().unwrap() })
}

fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// A refined offset and the nearest-start pairs it gives: `(record index, occurrence index, residual)`.
#[derive(Debug, Clone)]
struct Fit {
    offset: i64,
    pairs: Vec<(usize, usize, i64)>,
    median_abs: i64,
}

/// Pair every record start shifted by `d` with the nearest occurrence start (records outside the steps' span
/// are left out).
fn pairs_at(recs: &[(i64, i64)], starts: &[i64], span: (i64, i64), d: i64) -> Vec<(usize, usize, i64)> {
    let mut out = Vec::new();
    for (i, &(s, _)) in recs.iter().enumerate() {
        let t = s - d;
        if t < span.0 - VOTE_WINDOW_NS || t > span.1 {
            continue;
        }
        let j = starts.partition_point(|&a| a < t);
        let best = [j.checked_sub(1), (j < starts.len()).then_some(j)]
            .into_iter()
            .flatten()
            .min_by_key(|&k| ((starts[k] - t).abs(), k));
        if let Some(k) = best {
            out.push((i, k, starts[k] - t));
        }
    }
    out
}

fn refine(recs: &[(i64, i64)], starts: &[i64], span: (i64, i64), mut d: i64) -> Fit {
    let mut pairs = pairs_at(recs, starts, span, d);
    for _ in 0..3 {
        if pairs.is_empty() {
            break;
        }
        let mut r: Vec<i64> = pairs.iter().map(|p| p.2).collect();
        let m = median(&mut r);
        if m == 0 {
            break;
        }
        d -= m;
        pairs = pairs_at(recs, starts, span, d);
    }
    let mut a: Vec<i64> = pairs.iter().map(|p| p.2.abs()).collect();
    let median_abs = if a.is_empty() { i64::MAX } else { median(&mut a) };
    Fit { offset: d, pairs, median_abs }
}

/// The candidate offsets of one rank's records against one process's steps, best first.
fn fits(recs: &[(i64, i64)], starts: &[i64], span: (i64, i64)) -> Vec<Fit> {
    let (n, m) = (recs.len(), starts.len());
    if n == 0 || m == 0 {
        return Vec::new();
    }
    let mut a = ANCHORS.min(n);
    if a * m > MAX_CANDIDATES {
        a = (MAX_CANDIDATES / m).max(1);
    }
    let anchors: Vec<usize> = (0..a).map(|k| if a == 1 { n / 2 } else { k * (n - 1) / (a - 1) }).collect();
    let mut cands: Vec<(i64, u32)> = Vec::with_capacity(a * m);
    for (ai, &i) in anchors.iter().enumerate() {
        for &s in starts {
            cands.push((recs[i].0 - s, ai as u32));
        }
    }
    cands.sort_unstable();
    // sliding window [cands[l].0, cands[l].0 + W]: distinct anchors in it
    let mut count = vec![0u32; a];
    let mut distinct = 0usize;
    let mut r = 0usize;
    let mut support: Vec<(usize, i64)> = Vec::with_capacity(cands.len());
    for l in 0..cands.len() {
        while r < cands.len() && cands[r].0 <= cands[l].0 + VOTE_WINDOW_NS {
            let c = &mut count[cands[r].1 as usize];
            if *c == 0 {
                distinct += 1;
            }
            *c += 1;
            r += 1;
        }
        support.push((distinct, cands[l].0 + VOTE_WINDOW_NS / 2));
        let c = &mut count[cands[l].1 as usize];
        *c -= 1;
        if *c == 0 {
            distinct -= 1;
        }
    }
    support.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    let mut centers: Vec<i64> = Vec::new();
    for &(_, d) in &support {
        if centers.len() >= CLUSTERS {
            break;
        }
        if centers.iter().all(|&c| (c - d).abs() > VOTE_WINDOW_NS) {
            centers.push(d);
        }
    }
    let mut out: Vec<Fit> = Vec::new();
    for c in centers {
        let f = refine(recs, starts, span, c);
        if f.pairs.is_empty() || out.iter().any(|o| o.offset == f.offset) {
            continue;
        }
        out.push(f);
    }
    out.sort_by(|x, y| x.median_abs.cmp(&y.median_abs).then(y.pairs.len().cmp(&x.pairs.len())));
    out
}

/// What one (rank, process) gives: an accepted fit or a refusal.
struct Outcome {
    pid: i64,
    fit: Option<Fit>,
    tolerance: i64,
    /// One-to-one matched pairs (record index, occurrence index, residual).
    matched: Vec<(usize, usize, i64)>,
    refusal: Option<String>,
    candidates: Vec<Candidate>,
}

fn assess(pid: i64, recs: &[(i64, i64)], starts: &[i64], span: (i64, i64)) -> Outcome {
    let all = fits(recs, starts, span);
    let candidates: Vec<Candidate> = all
        .iter()
        .take(4)
        .map(|f| Candidate {
            pid,
            offset_ns: f.offset,
            overlapping: f.pairs.len() as u64,
            median_abs_residual_ns: f.median_abs,
        })
        .collect();
    let mut o = Outcome { pid, fit: None, tolerance: 0, matched: Vec::new(), refusal: None, candidates };
    let usable: Vec<&Fit> = all.iter().filter(|f| f.pairs.len() >= MIN_MATCHED).collect();
    let Some(best) = usable.first().copied() else {
        o.refusal = Some(format!(
            "insufficient overlap: no clock offset puts {MIN_MATCHED} or more of the {} timed records inside the span of the {} steps of process {pid}",
            recs.len(),
            starts.len()
        ));
        return o;
    };
    let res: Vec<i64> = best.pairs.iter().map(|p| p.2).collect();
    let st = abs_stats(&res).unwrap();
    let mut periods: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).filter(|&p| p > 0).collect();
    let period = if periods.is_empty() { i64::MAX } else { median(&mut periods) };
    let spread = MATCH_TOL_P90_FACTOR * st.p90_abs_ns;
    let tol = spread.max(MATCH_TOL_MIN_NS).max(if period == i64::MAX { 0 } else { period / MATCH_TOL_PERIOD_DIVISOR });
    o.tolerance = tol;
    // one record per occurrence: the nearest
    let mut by_occ: HashMap<usize, (usize, i64)> = HashMap::new();
    for &(i, k, r) in &best.pairs {
        if r.abs() > tol {
            continue;
        }
        let e = by_occ.entry(k).or_insert((i, r));
        if r.abs() < e.1.abs() {
            *e = (i, r);
        }
    }
    let mut matched: Vec<(usize, usize, i64)> = by_occ.into_iter().map(|(k, (i, r))| (i, k, r)).collect();
    matched.sort_unstable();
    let overlapping = best.pairs.len();
    let frac = matched.len() as f64 / overlapping.max(1) as f64;
    let floor = |x: i64| x.max(RESIDUAL_FLOOR_NS) as f64;
    let rival = usable.iter().skip(1).find(|f| {
        (f.offset - best.offset).abs() > tol
            && f.pairs.len() * 2 >= overlapping
            && floor(f.median_abs) < AMBIGUITY_RATIO * floor(best.median_abs)
    });
    o.refusal = if spread > period / 4 {
        Some(format!(
            "residual spread too wide: 4 × p90 |residual| ({} ns) exceeds a quarter of the median step period {period} ns of process {pid}: neighbouring steps cannot be told apart",
            st.p90_abs_ns
        ))
    } else if matched.len() < MIN_MATCHED {
        Some(format!(
            "insufficient overlap: {} record(s) matched within {tol} ns (at least {MIN_MATCHED} needed)",
            matched.len()
        ))
    } else if frac < MIN_MATCHED_FRACTION {
        Some(format!(
            "inconsistent: only {} of the {overlapping} records inside the steps' span matched a step within {tol} ns ({:.0}% < {:.0}%)",
            matched.len(),
            frac * 100.0,
            MIN_MATCHED_FRACTION * 100.0
        ))
    } else {
        rival.map(|r| format!(
            "ambiguous: offsets {} ns and {} ns fit about as well (median |residual| {} ns and {} ns, within {AMBIGUITY_RATIO}×): the steps are too regular to tell which record is which",
            best.offset, r.offset, best.median_abs, r.median_abs
        ))
    };
    o.matched = matched;
    o.fit = Some(best.clone());
    o
}

fn disagrees(wall: i64, elapsed: i64) -> bool {
    let d = (wall - elapsed).abs();
    d > ELAPSED_ABS_NS && d as f64 > ELAPSED_REL * elapsed as f64
}

/// Join `records` (all ranks; shape-only ones are counted, never used) to the step occurrences `steps`.
/// Returns the join and, parallel to `steps`, the geometry of each step that was joined.
pub fn join(
    records: &[Record],
    steps: &[StepOcc],
    records_source: &str,
    step_label: &str,
) -> (IterationJoin, Vec<Option<StepGeometry>>) {
    let mut geo: Vec<Option<StepGeometry>> = vec![None; steps.len()];
    let timed: Vec<&Record> = records.iter().filter(|r| r.start.is_some() && r.end.is_some()).collect();
    let ranks: BTreeSet<u64> = timed.iter().map(|r| r.rank).collect();
    // the steps of each process, by start
    let mut by_pid: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        by_pid.entry(pid_of(s.global_tid)).or_default().push(i);
    }
    for v in by_pid.values_mut() {
        v.sort_by_key(|&i| (steps[i].start, steps[i].end, steps[i].global_tid));
    }
    let mut taken: BTreeMap<usize, u64> = BTreeMap::new();
    let mut rank_joins = Vec::new();
    let mut findings = Vec::new();
    for rank in ranks {
        let rr: Vec<&Record> = timed.iter().copied().filter(|r| r.rank == rank).collect();
        let recs: Vec<(i64, i64)> =
            rr.iter().map(|r| (r.start.unwrap_or(0) as i64, r.end.unwrap_or(0) as i64)).collect();
        let named: BTreeSet<u64> = rr.iter().filter_map(|r| r.pid).collect();
        let mut rj = refused_rank(rank, rr.len() as u64);
        let pids: Vec<i64> = if named.len() > 1 {
            rj.reason = Some(format!("the records of rank {rank} name several pids {named:?}: one process per rank"));
            Vec::new()
        } else if let Some(&p) = named.iter().next() {
            if by_pid.contains_key(&(p as i64)) {
                vec![p as i64]
            } else {
                rj.reason = Some(format!(
                    "the records of rank {rank} name pid {p}, which has no occurrence of {step_label:?} (processes with steps: {:?})",
                    by_pid.keys().collect::<Vec<_>>()
                ));
                Vec::new()
            }
        } else {
            by_pid.keys().copied().collect()
        };
        if by_pid.is_empty() {
            rj.reason = Some(format!("no occurrence of the step label {step_label:?} in the capture"));
        }
        let mut outcomes: Vec<Outcome> = pids
            .iter()
            .map(|&p| {
                let idx = &by_pid[&p];
                let starts: Vec<i64> = idx.iter().map(|&i| steps[i].start).collect();
                let span = (starts[0], idx.iter().map(|&i| steps[i].end).max().unwrap_or(starts[0]));
                assess(p, &recs, &starts, span)
            })
            .collect();
        for o in &outcomes {
            rj.candidates.extend(o.candidates.iter().cloned());
        }
        // across processes as across offsets: the accepted fit with the smallest median |residual| wins; another
        // accepted process within AMBIGUITY_RATIO (matching at least half as many records) makes it ambiguous
        let med = |o: &Outcome| o.fit.as_ref().map_or(i64::MAX, |f| f.median_abs);
        outcomes.sort_by_key(|o| (o.refusal.is_some(), med(o), std::cmp::Reverse(o.matched.len()), o.pid));
        let floor = |x: i64| x.max(RESIDUAL_FLOOR_NS) as f64;
        let chosen = match outcomes.as_slice() {
            [] => None,
            [first, rest @ ..] => {
                if let Some(why) = &first.refusal {
                    rj.reason =
                        Some(if pids.len() > 1 { format!("process {}: {why}", first.pid) } else { why.clone() });
                    None
                } else if let Some(other) = rest.iter().find(|o| {
                    o.refusal.is_none()
                        && o.matched.len() * 2 >= first.matched.len()
                        && floor(med(o)) < AMBIGUITY_RATIO * floor(med(first))
                }) {
                    rj.reason = Some(format!(
                        "ambiguous: the records of rank {rank} fit the steps of processes {} (median |residual| {} ns, {} matched) and {} ({} ns, {} matched) about as well: write `pid` in the records",
                        first.pid,
                        med(first),
                        first.matched.len(),
                        other.pid,
                        med(other),
                        other.matched.len()
                    ));
                    None
                } else {
                    Some(first)
                }
            }
        };
        if let Some(o) = chosen {
            let joined = Joined { rank, rr: &rr, recs: &recs, idx: &by_pid[&o.pid], steps };
            record_joined(&mut rj, o, joined, &mut geo, &mut taken, &mut findings);
        } else {
            findings.push(format!(
                "rank {rank}: the join is refused: {}",
                rj.reason.clone().unwrap_or_else(|| "no candidate".into())
            ));
        }
        rank_joins.push(rj);
    }
    let ev = elapsed_vs_wall(&geo, &mut findings);
    let shape_only = (records.len() - timed.len()) as u64;
    if shape_only > 0 {
        findings.push(format!(
            "{shape_only} shape-only record(s) (no start_ns/end_ns): geometry only, never used as time, not joined"
        ));
    }
    let offs: Vec<i64> = rank_joins.iter().filter_map(|r| r.offset_ns).collect();
    let offset_spread_ns = (offs.len() >= 2).then(|| offs.iter().max().unwrap_or(&0) - offs.iter().min().unwrap_or(&0));
    let nj = rank_joins.iter().filter(|r| r.verdict == "joined").count();
    let verdict = if nj > 0 && nj == rank_joins.len() {
        "joined"
    } else if nj > 0 {
        "partly_joined"
    } else {
        "refused"
    };
    if rank_joins.is_empty() {
        findings.push("no timed record: nothing can be joined by time".into());
    }
    let doc = IterationJoin {
        records_source: records_source.into(),
        step_label: step_label.into(),
        verdict: verdict.into(),
        method: format!(
            "per rank and process: candidate clock offsets from {ANCHORS} anchor records × the step starts, voted within {} µs, refined by the median start residual; best = smallest median |residual|; matched within max({} µs, {MATCH_TOL_P90_FACTOR} × p90 |residual|, step period / {MATCH_TOL_PERIOD_DIVISOR}), one record per step; refused below {MIN_MATCHED} matched or {:.0}% of the overlapping records, or when another offset or process fits within {AMBIGUITY_RATIO}× (docs/iterations.md)",
            VOTE_WINDOW_NS / 1000,
            MATCH_TOL_MIN_NS / 1000,
            MIN_MATCHED_FRACTION * 100.0
        ),
        clock: format!(
            "records: the engine's monotonic clock (CLOCK_MONOTONIC ns); steps: the nsys timestamps of the export; offset_ns = engine ns − nsys ns, measured from the overlap (the export holds the session start only as UTC, {}, not on the monotonic clock: no cross-check)",
            crate::export::schema::TARGET_INFO_SESSION_START_TIME
        ),
        records: records.len() as u64,
        timed_records: timed.len() as u64,
        shape_only_records: shape_only,
        steps: steps.len() as u64,
        joined_steps: taken.len() as u64,
        ranks: rank_joins,
        offset_spread_ns,
        elapsed_vs_wall: ev,
        findings,
    };
    (doc, geo)
}

/// A rank's join before any fit: refused, nothing matched.
fn refused_rank(rank: u64, timed_records: u64) -> RankJoin {
    RankJoin {
        rank,
        verdict: "refused".into(),
        reason: None,
        pid: None,
        offset_ns: None,
        tolerance_ns: None,
        timed_records,
        overlapping_records: 0,
        matched: 0,
        matched_fraction: None,
        unmatched_records: 0,
        records_outside_capture: 0,
        process_steps: 0,
        steps_without_record: 0,
        first_iteration: None,
        last_iteration: None,
        start_residual: None,
        end_residual: None,
        drift_ppm: None,
        candidates: Vec::new(),
    }
}

/// What [`record_joined`] reads of one rank: its timed records (and their intervals), the chosen process's
/// steps (indexes into `steps`, by start).
struct Joined<'a> {
    rank: u64,
    rr: &'a [&'a Record],
    recs: &'a [(i64, i64)],
    idx: &'a [usize],
    steps: &'a [StepOcc],
}

/// A rank joined by the fit of `o`: its numbers, each matched step's geometry (`geo`, `taken`), and the
/// findings on steps without a record and records without a step.
fn record_joined(
    rj: &mut RankJoin,
    o: &Outcome,
    j: Joined<'_>,
    geo: &mut [Option<StepGeometry>],
    taken: &mut BTreeMap<usize, u64>,
    findings: &mut Vec<String>,
) {
    let fit = o.fit.as_ref().unwrap();
    let Joined { rank, rr, recs, idx, steps } = j;
    rj.verdict = "joined".into();
    rj.pid = Some(o.pid);
    rj.offset_ns = Some(fit.offset);
    rj.tolerance_ns = Some(o.tolerance);
    rj.overlapping_records = fit.pairs.len() as u64;
    rj.matched = o.matched.len() as u64;
    rj.matched_fraction = Some(o.matched.len() as f64 / fit.pairs.len().max(1) as f64);
    rj.unmatched_records = (fit.pairs.len() - o.matched.len()) as u64;
    rj.records_outside_capture = (recs.len() - fit.pairs.len()) as u64;
    rj.process_steps = idx.len() as u64;
    let ks: BTreeSet<usize> = o.matched.iter().map(|m| m.1).collect();
    if let (Some(&lo), Some(&hi)) = (ks.first(), ks.last()) {
        rj.steps_without_record = ((lo..=hi).count() - ks.len()) as u64;
    }
    let sres: Vec<i64> = o.matched.iter().map(|m| m.2).collect();
    let mut eres = Vec::new();
    for &(i, k, r) in &o.matched {
        let si = idx[k];
        let s = &steps[si];
        let rec = rr[i];
        let (rs, re) = recs[i];
        let end_res = s.end - (re - fit.offset);
        eres.push(end_res);
        let (el, from) = match rec.elapsed_ns {
            Some(e) => (e.min(1 << 62) as i64, "elapsed_ns"),
            None => (re - rs, "end_ns - start_ns"),
        };
        let wall = s.end - s.start;
        taken.insert(si, rank);
        geo[si] = Some(StepGeometry {
            iteration: rec.iteration,
            rank,
            phase: rec.phase.clone(),
            batch_size: rec.batch_size,
            scheduled_tokens: rec.scheduled_tokens,
            scheduled_requests: rec.scheduled_requests,
            prefill_chunks: rec.prefill_chunks.clone(),
            decode_kv_lens: rec.decode_kv_lens.clone(),
            graph_mode: rec.graph_mode.clone(),
            backend: rec.backend.clone(),
            start_residual_ns: r,
            end_residual_ns: end_res,
            framework_elapsed_ns: el,
            framework_elapsed_from: from.into(),
            nvtx_wall_ns: wall,
            elapsed_disagrees: disagrees(wall, el),
        });
    }
    rj.first_iteration = o.matched.first().map(|m| rr[m.0].iteration);
    rj.last_iteration = o.matched.last().map(|m| rr[m.0].iteration);
    rj.start_residual = abs_stats(&sres);
    rj.end_residual = abs_stats(&eres);
    // drift: least-squares slope of the start residual against the step start
    if o.matched.len() >= 2 {
        let xs: Vec<f64> = o.matched.iter().map(|m| steps[idx[m.1]].start as f64).collect();
        let ys: Vec<f64> = sres.iter().map(|&r| r as f64).collect();
        let n = xs.len() as f64;
        let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        rj.drift_ppm = (sxx > 0.0).then(|| sxy / sxx * 1e6);
    }
    if rj.steps_without_record > 0 {
        findings.push(format!(
            "rank {rank}: {} step(s) of process {} between the first and last matched record have no record",
            rj.steps_without_record, o.pid
        ));
    }
    if rj.unmatched_records > 0 {
        findings.push(format!(
            "rank {rank}: {} record(s) inside the capture matched no step within {} ns",
            rj.unmatched_records, o.tolerance
        ));
    }
}

/// Framework elapsed against NVTX wall over the joined steps, with the finding when they disagree.
fn elapsed_vs_wall(geo: &[Option<StepGeometry>], findings: &mut Vec<String>) -> ElapsedVsWall {
    let joined: Vec<&StepGeometry> = geo.iter().flatten().collect();
    let mut ratios: Vec<f64> = joined
        .iter()
        .filter(|g| g.framework_elapsed_ns > 0)
        .map(|g| g.nvtx_wall_ns as f64 / g.framework_elapsed_ns as f64)
        .collect();
    ratios.sort_by(|a, b| a.total_cmp(b));
    let mut worst: Vec<&&StepGeometry> = joined.iter().filter(|g| g.elapsed_disagrees).collect();
    worst.sort_by_key(|g| (std::cmp::Reverse((g.nvtx_wall_ns - g.framework_elapsed_ns).abs()), g.rank, g.iteration));
    let disagreeing = worst.len() as u64;
    let ev = ElapsedVsWall {
        compared: joined.len() as u64,
        disagreeing,
        threshold_fraction: ELAPSED_REL,
        threshold_ns: ELAPSED_ABS_NS,
        median_wall_over_elapsed: (!ratios.is_empty()).then(|| ratios[(ratios.len() - 1) / 2]),
        worst: worst
            .iter()
            .take(5)
            .map(|g| Disagreement {
                iteration: g.iteration,
                rank: g.rank,
                nvtx_wall_ns: g.nvtx_wall_ns,
                framework_elapsed_ns: g.framework_elapsed_ns,
            })
            .collect(),
    };
    if disagreeing > 0 {
        let w = &ev.worst[0];
        findings.push(format!(
            "{disagreeing} of {} joined steps: NVTX wall and framework elapsed differ by more than {:.0}% and {} µs (worst: iteration {} of rank {}, wall {} ns vs elapsed {} ns)",
            joined.len(),
            ELAPSED_REL * 100.0,
            ELAPSED_ABS_NS / 1000,
            w.iteration,
            w.rank,
            w.nvtx_wall_ns,
            w.framework_elapsed_ns
        ));
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(it: u64, s: i64, e: i64) -> Record {
        Record {
            line: it + 1,
            iteration: it,
            rank: 0,
            pid: None,
            phase: if it.is_multiple_of(4) { "prefill" } else { "decode" }.into(),
            prefill_chunks: vec![],
            decode_kv_lens: vec![],
            scheduled_tokens: 1,
            scheduled_requests: 1,
            batch_size: 1 + it % 2,
            graph_mode: "none".into(),
            backend: "cpu".into(),
            start: Some(s as u64),
            end: Some(e as u64),
            elapsed_ns: Some((e - s) as u64),
        }
    }

    /// Irregular steps (a pseudo-random gap), records offset by a constant plus a little noise.
    fn series(n: usize, offset: i64) -> (Vec<Record>, Vec<StepOcc>) {
        let mut t = 1_000_000i64;
        let mut x = 12345u64;
        let (mut recs, mut steps) = (Vec::new(), Vec::new());
        for i in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let wall = 700_000 + (x >> 40) as i64 % 100_000;
            let gap = 5_000 + (x >> 20) as i64 % 80_000;
            let noise = (x >> 50) as i64 % 300;
            steps.push(StepOcc { global_tid: (77 << 24) | 77, start: t, end: t + wall });
            recs.push(rec(i as u64, t + offset - 200 + noise, t + wall + offset + 150));
            t += wall + gap;
        }
        (recs, steps)
    }

    #[test]
    fn the_offset_is_measured_and_the_geometry_attached() {
        let off = 9_876_543_210_000;
        let (recs, steps) = series(200, off);
        // the capture holds steps 50..150 only
        let cap: Vec<StepOcc> = steps[50..150].to_vec();
        let (j, g) = join(&recs, &cap, "r", "step");
        assert_eq!(j.verdict, "joined", "{:?}", j.findings);
        let r = &j.ranks[0];
        assert!((r.offset_ns.unwrap() - off).abs() < 400, "{r:?}");
        assert_eq!(r.matched, 100);
        assert_eq!(r.records_outside_capture, 100);
        assert_eq!(r.first_iteration, Some(50));
        assert_eq!(g[0].as_ref().unwrap().iteration, 50);
        assert!(g.iter().all(|x| x.is_some()));
        assert!(r.start_residual.unwrap().max_abs_ns < 400);
        assert_eq!(j.elapsed_vs_wall.disagreeing, 0);
    }

    #[test]
    fn too_little_overlap_and_perfectly_regular_steps_are_refused() {
        let (recs, steps) = series(200, 5_000_000_000);
        // records and steps do not overlap at all: 4 records only near the steps
        let (j, g) = join(&recs[..4], &steps, "r", "step");
        assert_eq!(j.verdict, "refused");
        assert!(j.ranks[0].reason.as_deref().unwrap().contains("insufficient overlap"), "{:?}", j.ranks[0]);
        assert!(g.iter().all(|x| x.is_none()));
        // perfectly periodic steps: every shift by a step fits as well
        let steps: Vec<StepOcc> = (0..100)
            .map(|i| StepOcc { global_tid: 1 << 24, start: i * 1_000_000, end: i * 1_000_000 + 900_000 })
            .collect();
        let recs: Vec<Record> =
            (0..100).map(|i| rec(i as u64, i * 1_000_000 + 42_000_000, i * 1_000_000 + 42_900_000)).collect();
        let (j, _) = join(&recs[10..90], &steps, "r", "step");
        assert_eq!(j.verdict, "refused", "{:?}", j.ranks[0]);
        assert!(j.ranks[0].reason.as_deref().unwrap().contains("ambiguous"), "{:?}", j.ranks[0]);
    }

    #[test]
    fn elapsed_disagreement_is_a_finding() {
        let (mut recs, steps) = series(60, 1_000);
        recs[30].elapsed_ns = Some(100_000);
        let (j, g) = join(&recs, &steps, "r", "step");
        assert_eq!(j.verdict, "joined");
        assert_eq!(j.elapsed_vs_wall.disagreeing, 1);
        assert_eq!(j.elapsed_vs_wall.worst[0].iteration, 30);
        assert!(g[30].as_ref().unwrap().elapsed_disagrees);
        assert!(j.findings.iter().any(|f| f.contains("framework elapsed")), "{:?}", j.findings);
    }
}
