//! `host_samples`: what the host ran in the steps' unattributed time, from nsys's CPU samples (seed A28:
//! capture with `--sample=process-tree`). A sample of a step's own thread taken inside the step and outside
//! every interval the partition attributes (device rows, API calls, waits, communication ranges) is a sample of
//! unattributed time; its leaf frame and module name the host code that ran there.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{fill_step_classes, gpu_waits_of, host_comm_of, partition_in, BudgetVerdict, Step, StepCx, StepScratch};
use crate::contract::Result;
use crate::export::samples::{CpuSamples, NO_FRAME};
use crate::export::Export;

/// Fewer samples in unattributed time than this rank nothing: the shares are listed, the reason says so.
pub const MIN_RANKED_SAMPLES: u64 = 30;
/// How many frames and modules are listed.
pub const TOP: usize = 10;

/// The CPU samples inside the steps' unattributed time (present only when the export holds CPU samples).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostSamples {
    /// nsys's CPU sampling period (CPU-clock ns between two samples of a running thread), when the export
    /// records it (`META_DATA_CAPTURE` `LINUX_PERF_OPTIONS:SAMPLING_PERIOD`).
    pub sampling_period_ns: Option<i64>,
    /// Samples of the steps' threads taken inside their steps.
    pub in_steps: u64,
    /// Of those, the samples taken in unattributed time.
    pub in_unattributed: u64,
    /// Σ over the steps of their unattributed time, for scale.
    pub unattributed_ns: i64,
    /// `in_unattributed` ≥ [`MIN_RANKED_SAMPLES`]: the frames' order means something.
    pub ranked: bool,
    /// The share of the unattributed time the steps' threads spent on a CPU, estimated as `in_unattributed` ×
    /// `sampling_period_ns` / `unattributed_ns` (nsys samples a thread per period of its own CPU time, so an
    /// off-CPU thread — blocked in a lock, the GIL or I/O that no traced call shows — is not sampled); its
    /// relative error is about 1/√`in_unattributed`. Null when the period or the time is unknown or zero.
    pub on_cpu_share: Option<f64>,
    /// The leaf frames of the samples in unattributed time, most samples first (at most 10).
    pub top_frames: Vec<SampledFrame>,
    /// The same samples by module, most first (at most 10).
    pub top_modules: Vec<SampledModule>,
    /// One sentence: what the samples say, or why they say little.
    pub reason: String,
}

/// A leaf frame and its samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SampledFrame {
    /// The function (an address such as `0x61cb5d` when nsys could not resolve it; `<no call stack>` for a
    /// sample nsys wrote without one).
    pub symbol: String,
    /// The module's file name (`libtorch_cpu.so`, `python3.12`).
    pub module: String,
    pub samples: u64,
    /// Of `in_unattributed`.
    pub share: f64,
}

/// A module and its samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SampledModule {
    pub module: String,
    pub samples: u64,
    /// Of `in_unattributed`.
    pub share: f64,
}

impl StepCx<'_> {
    /// The union of every interval the partition of step `k` attributes (sorted, disjoint, inside the step).
    fn covered<'s>(&self, k: usize, scratch: &'s mut StepScratch) -> &'s [(i64, i64)] {
        let i = self.idx[k];
        let o = self.a.occurrences.get(i);
        let host_comm = host_comm_of(self.comm_occ, o.global_tid, o.start, o.end);
        let waits =
            gpu_waits_of(self.waits, self.tl, o.global_tid, (o.start, o.end), self.a.occurrences.last_device_end(i));
        fill_step_classes(&self.iv[i], self.api, self.comm, &host_comm, &waits, &mut scratch.classes);
        partition_in(o.start, o.end, &scratch.classes, &mut scratch.partition);
        &scratch.partition.acc
    }
}

/// `host_samples` of the steps; None when the export has no CPU samples.
pub(super) fn host_samples(
    export: &Export,
    cx: &StepCx<'_>,
    steps: &[Step],
    tids: &crate::fx::FxSet<i64>,
) -> Result<Option<HostSamples>> {
    let Some(samples) = export.cpu_samples(tids)? else { return Ok(None) };
    let mut scratch = StepScratch::default();
    let (mut in_steps, mut hits) = (0u64, vec![0u64; samples.frames.len() + 1]);
    for (k, s) in steps.iter().enumerate() {
        let Some(v) = samples.by_tid.get(&s.global_tid) else { continue };
        let (start, end) = (s.start_ns, s.start_ns + s.wall_ns);
        let from = v.partition_point(|x| x.0 < start);
        let inside = &v[from..from + v[from..].partition_point(|x| x.0 < end)];
        if inside.is_empty() {
            continue;
        }
        in_steps += inside.len() as u64;
        let covered = cx.covered(k, &mut scratch);
        for &(t, f) in inside {
            let j = covered.partition_point(|c| c.1 <= t);
            if covered.get(j).is_none_or(|c| c.0 > t) {
                hits[if f == NO_FRAME { samples.frames.len() } else { f as usize }] += 1;
            }
        }
    }
    let unattributed_ns = steps.iter().map(|s| s.components.unattributed).sum();
    Ok(Some(summarise(&samples, in_steps, &hits, unattributed_ns)))
}

/// Below this on-CPU share (two standard errors included) the steps' threads were mostly off a CPU in their
/// unattributed time.
pub const OFF_CPU_SHARE: f64 = 0.5;

/// The verdict read with the samples: a `python_overhead_bound` verdict says how much of the unattributed time
/// ran on a CPU; when ranked samples put it clearly below [`OFF_CPU_SHARE`] (the estimate plus two standard
/// errors), the threads mostly waited off a CPU in no traced call (a lock, the GIL, a sleep, I/O), Python
/// overhead is the wrong cause, and the class becomes `mixed_or_unclear` (rule `host_samples_off_cpu`).
pub fn qualify(verdict: &mut BudgetVerdict, h: &HostSamples) {
    if verdict.class != "python_overhead_bound" || h.in_unattributed == 0 {
        return;
    }
    let Some(x) = h.on_cpu_share else { return };
    let err = x / (h.in_unattributed as f64).sqrt();
    let what = format!(
        "CPU samples put ≈ {:.0}% ± {:.0}% of the unattributed time on a CPU ({} samples, top module {})",
        x * 100.0,
        err * 100.0,
        h.in_unattributed,
        h.top_modules.first().map(|m| m.module.as_str()).unwrap_or("none")
    );
    if h.ranked && x + 2.0 * err < OFF_CPU_SHARE {
        verdict.class = "mixed_or_unclear".into();
        verdict.rule = "host_samples_off_cpu".into();
        verdict.reason = format!(
            "{}; but {what}: the threads mostly waited off a CPU in no traced call (a lock, the GIL, a sleep, I/O), not Python overhead; trace the wait (--trace=osrt, or NVTX around it)",
            verdict.reason
        );
    } else {
        verdict.reason = format!("{}; {what}", verdict.reason);
    }
}

/// The document's section from the per-frame counts (`hits[frames.len()]`: samples without a call stack).
fn summarise(samples: &CpuSamples, in_steps: u64, hits: &[u64], unattributed_ns: i64) -> HostSamples {
    let n: u64 = hits.iter().sum();
    let share = |c: u64| if n == 0 { 0.0 } else { c as f64 / n as f64 };
    let frame_of = |i: usize| match samples.frames.get(i) {
        Some(f) => (f.symbol.clone(), f.module.clone()),
        None => ("<no call stack>".to_string(), "<unknown>".to_string()),
    };
    let mut frames: Vec<(u64, String, String)> =
        hits.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (c, frame_of(i).0, frame_of(i).1)).collect();
    let mut modules: std::collections::BTreeMap<String, u64> = Default::default();
    for (c, _, m) in &frames {
        *modules.entry(m.clone()).or_default() += c;
    }
    frames.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| (&a.1, &a.2).cmp(&(&b.1, &b.2))));
    let mut modules: Vec<(String, u64)> = modules.into_iter().collect();
    modules.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let top_frames: Vec<SampledFrame> = frames
        .iter()
        .take(TOP)
        .map(|(c, s, m)| SampledFrame { symbol: s.clone(), module: m.clone(), samples: *c, share: share(*c) })
        .collect();
    let top_modules: Vec<SampledModule> = modules
        .iter()
        .take(TOP)
        .map(|(m, c)| SampledModule { module: m.clone(), samples: *c, share: share(*c) })
        .collect();
    let ranked = n >= MIN_RANKED_SAMPLES;
    let on_cpu_share =
        samples.period_ns.filter(|_| unattributed_ns > 0).map(|p| n as f64 * p as f64 / unattributed_ns as f64);
    let on_cpu = match on_cpu_share {
        Some(x) if n > 0 => {
            format!("; ≈ {:.0}% ± {:.0}% of that time ran on a CPU", x * 100.0, x * 100.0 / (n as f64).sqrt())
        }
        _ => String::new(),
    };
    let period = match samples.period_ns {
        Some(p) => format!("one sample per {:.1} ms of CPU time", p as f64 / 1e6),
        None => "sampling period not recorded".to_string(),
    };
    let reason = if in_steps == 0 {
        format!("the export holds CPU samples ({period}) but none of the steps' threads inside a step: the step thread was not sampled, or its steps are shorter than the period")
    } else if !ranked {
        format!("{n} of {in_steps} samples inside the steps fall in unattributed time ({period}){on_cpu}: too few (< {MIN_RANKED_SAMPLES}) to rank the frames; capture a longer window or a shorter --sampling-period")
    } else {
        let m = &top_modules[0];
        let f = &top_frames[0];
        format!(
            "{n} of {in_steps} samples inside the steps fall in unattributed time ({period}){on_cpu}: {:.0}% in {} ({:.0}% in {} alone)",
            m.share * 100.0,
            m.module,
            f.share * 100.0,
            f.symbol
        )
    };
    HostSamples {
        sampling_period_ns: samples.period_ns,
        in_steps,
        in_unattributed: n,
        unattributed_ns,
        ranked,
        on_cpu_share,
        top_frames,
        top_modules,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::samples::Frame;

    fn frames(n: usize) -> CpuSamples {
        CpuSamples {
            frames: (0..n).map(|i| Frame { symbol: format!("f{i}"), module: format!("m{}", i % 2) }).collect(),
            period_ns: Some(2_000_000),
            ..Default::default()
        }
    }

    #[test]
    fn ranks_frames_and_modules_by_samples() {
        let s = frames(3);
        let h = summarise(&s, 50, &[10, 25, 5, 0], 1_000);
        assert!(h.ranked);
        assert_eq!(h.in_unattributed, 40);
        assert_eq!(h.top_frames[0].symbol, "f1");
        assert_eq!(h.top_frames[0].samples, 25);
        assert_eq!(h.top_modules[0].module, "m1");
        assert_eq!(h.top_modules[1].samples, 15);
        assert!((h.top_frames[0].share - 0.625).abs() < 1e-12);
        assert!(h.reason.contains("62% in m1"), "{}", h.reason);
        // 40 samples × 2 ms over 1 µs of unattributed time: the estimate is what it is (no clamp hides it)
        assert_eq!(h.on_cpu_share, Some(40.0 * 2e6 / 1e3));
        let unknown = summarise(&CpuSamples { period_ns: None, ..frames(3) }, 50, &[10, 25, 5, 0], 1_000);
        assert_eq!(unknown.on_cpu_share, None);
    }

    fn overhead_verdict() -> BudgetVerdict {
        BudgetVerdict {
            class: "python_overhead_bound".into(),
            rule: "dominant_component".into(),
            reason: "unattributed is 80% of the steps' wall".into(),
            steps_used: 10,
            rows: Vec::new(),
            would_be: None,
        }
    }

    #[test]
    fn off_cpu_unattributed_time_is_not_python_overhead() {
        // 100 samples × 2 ms over 1 s of unattributed time: 20% ± 2% on a CPU
        let s = frames(2);
        let off = summarise(&s, 120, &[60, 40, 0], 1_000_000_000);
        let mut v = overhead_verdict();
        qualify(&mut v, &off);
        assert_eq!((v.class.as_str(), v.rule.as_str()), ("mixed_or_unclear", "host_samples_off_cpu"));
        assert!(v.reason.contains("≈ 20% ± 2%"), "{}", v.reason);
        // 400 samples over the same time: 80% on a CPU, the class stands and says so
        let on = summarise(&s, 500, &[300, 100, 0], 1_000_000_000);
        let mut v = overhead_verdict();
        qualify(&mut v, &on);
        assert_eq!(v.class, "python_overhead_bound");
        assert!(v.reason.ends_with("(400 samples, top module m0)"), "{}", v.reason);
        // too few samples never change the class
        let few = summarise(&s, 10, &[5, 0, 0], 1_000_000_000);
        let mut v = overhead_verdict();
        qualify(&mut v, &few);
        assert_eq!(v.class, "python_overhead_bound");
        // another class is left alone
        let mut v = BudgetVerdict { class: "kernel_bound".into(), ..overhead_verdict() };
        qualify(&mut v, &off);
        assert_eq!(v.reason, "unattributed is 80% of the steps' wall");
    }

    #[test]
    fn few_samples_rank_nothing_and_say_so() {
        let s = frames(2);
        let h = summarise(&s, 20, &[3, 1, 2], 1_000);
        assert!(!h.ranked);
        assert_eq!(h.top_frames.iter().find(|f| f.symbol == "<no call stack>").map(|f| f.samples), Some(2));
        assert!(h.reason.contains("too few"), "{}", h.reason);
        let none = summarise(&s, 0, &[0, 0, 0], 0);
        assert!(none.reason.contains("none of the steps' threads"), "{}", none.reason);
    }
}
