//! Kernel totals and the top kernels of a kernel report, one row at a time, sums checked.

use super::*;

/// Kernel totals and the top kernels, one row at a time (ties keep CSV order); only the top candidates are
/// kept. Sums are checked: one that overflows is an input error naming the line and column, never a
/// saturated total.
pub(super) struct Summary {
    pub(super) top: usize,
    pub(super) total: i64,
    pub(super) instances: u64,
    pub(super) kernels: u64,
    pub(super) cands: Vec<Cand>,
    /// The CSV header of each key the summary reads (for messages).
    pub(super) headers: std::collections::HashMap<String, String>,
}

pub(super) struct Cand {
    pub(super) index: usize,
    pub(super) line: usize,
    pub(super) name: String,
    pub(super) total: i64,
    pub(super) instances: i64,
    pub(super) rest: [Option<i64>; 5],
    pub(super) time_pct: f64,
}

pub(super) const REST: [&str; 5] = ["avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"];

impl Summary {
    pub(super) fn new(top: usize, parsed: &[ParsedCol], header: &[String]) -> Summary {
        let headers = parsed.iter().zip(header).map(|(c, h)| (c.key.clone(), h.clone())).collect();
        Summary { top, total: 0, instances: 0, kernels: 0, cands: Vec::new(), headers }
    }

    /// The message prefix naming `line` and the column of `key`.
    pub(super) fn at(&self, source: &str, line: usize, key: &str) -> String {
        let h = self.headers.get(key).map(String::as_str).unwrap_or(key);
        format!("{source}: line {line}: column \"{h}\"")
    }

    pub(super) fn add(&mut self, row: &Map<String, Value>, i: usize, line: usize, source: &str) -> Result<()> {
        let int = |k: &str| -> Result<i64> {
            row.get(k).and_then(|v| v.as_i64()).ok_or_else(|| {
                Error::input(format!("{}: empty (a kernel report needs it in every row)", self.at(source, line, k)))
            })
        };
        let total = int("total_time_ns")?;
        let instances = int("instances")?;
        self.total = self.total.checked_add(total).ok_or_else(|| {
            Error::input(format!(
                "{}: {total}: the sum of the total times overflows (beyond {} ns); nothing was written",
                self.at(source, line, "total_time_ns"),
                i64::MAX
            ))
        })?;
        let inst = u64::try_from(instances)
            .map_err(|_| Error::input(format!("{}: negative: {instances}", self.at(source, line, "instances"))))?;
        self.instances = self.instances.checked_add(inst).ok_or_else(|| {
            Error::input(format!(
                "{}: {instances}: the sum of the instances overflows (beyond {}); nothing was written",
                self.at(source, line, "instances"),
                u64::MAX
            ))
        })?;
        self.kernels += 1;
        self.cands.push(Cand {
            index: i,
            line,
            name: row.get("name").and_then(|v| v.as_str()).unwrap_or("").to_string(),
            total,
            instances,
            rest: REST.map(|k| row.get(k).and_then(|v| v.as_i64())),
            time_pct: row.get("time_pct").and_then(|v| v.as_f64()).unwrap_or(0.0),
        });
        if self.top > 0 && self.cands.len() >= 2 * self.top.max(64) {
            self.sort();
            self.cands.truncate(self.top);
        }
        Ok(())
    }

    pub(super) fn sort(&mut self) {
        self.cands.sort_by_key(|c| (std::cmp::Reverse(c.total), c.index));
    }

    pub(super) fn finish(mut self, source: &str) -> Result<(KernelTotals, Vec<StatsTopKernel>)> {
        self.sort();
        let n = if self.top == 0 { self.cands.len() } else { self.top.min(self.cands.len()) };
        let mut out = Vec::with_capacity(n);
        for (rank, c) in std::mem::take(&mut self.cands).into_iter().take(n).enumerate() {
            let mut rest = [0i64; 5];
            for (j, v) in c.rest.iter().enumerate() {
                rest[j] = v.ok_or_else(|| {
                    Error::input(format!(
                        "{}: empty (a kernel report needs it in every row)",
                        self.at(source, c.line, REST[j])
                    ))
                })?;
            }
            out.push(StatsTopKernel {
                rank: rank as u64 + 1,
                name: c.name,
                total_time_ns: c.total,
                instances: c.instances,
                avg_ns: rest[0],
                med_ns: rest[1],
                min_ns: rest[2],
                max_ns: rest[3],
                stddev_ns: rest[4],
                time_pct: c.time_pct,
                share: if self.total > 0 { c.total as f64 / self.total as f64 } else { 0.0 },
            });
        }
        Ok((KernelTotals { kernels: self.kernels, instances: self.instances, total_time_ns: self.total }, out))
    }
}
